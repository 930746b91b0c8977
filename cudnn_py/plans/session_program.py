"""The planning session's VALIDATED work: the program the IR passes make from the user's graph, the errata it is
checked against, its lowering (tensor and operation descriptors, the operation graph finalized without a handle
where the graph has none), the executor over it, and what validate leaves to later phases, said.

A mixin of :class:`~cudnn_py.plans.session.PlanningSession` (a base class of it): the attributes it reads and
writes are made by ``PlanningSession.__init__``; the phase transitions that call it (``validate``, AUTO's fallback
to the composite attention) stay in ``session.py``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._generated.names import desc
from ..backend import versions
from ..backend.handle import context_of
from ..cuda import context as cuda_context
from ..interop import data_ptr
from ..ir.passes import PassOptions, prepare
from ..ir.program import Program
from ..lowering import LoweredGraph, lower_program, pointer_alignment
from . import errata
from .execute import Executor
from .phase import SessionOptions


class ProgramSteps:
    """The program, its lowering and its executor (see the module's docstring)."""

    options: SessionOptions
    program: Program | None
    lowered: LoweredGraph | None
    executor: Executor | None
    engine_errata: list[tuple[errata.Erratum, str]]
    bound_tensors: list[Any]

    if TYPE_CHECKING:  # PlanningSession's
        @property
        def graph(self) -> Any: ...

    def _checks_validate_cannot_run(self) -> list[str]:
        """What validate() leaves to later phases because it needs a GPU or the operands: said, not implied."""
        assert self.program is not None
        out = ["engine support (cuDNN heuristics and plan builds need a GPU): build_operation_graph, "
               "create_execution_plans, build_plans"]
        if self.options.sm_version is not None:
            when = f"at build_operation_graph, against sm_version {self.options.sm_version}"
        elif self.options.device_properties is not None:
            when = "never: deviceless planning without sm_version (cuDNN's own support checks decide)"
        else:
            when = "when planning meets the GPU"
        for node in self._gated_nodes():
            spec = node.spec
            if spec is not None and (spec.min_compute_capability or spec.min_cublaslt or spec.device_rules):
                out.append(f"{spec.method} node {node.name!r}: its device rules (compute capability, cuBLASLt), "
                           f"{when}")
        for e, _where in self.engine_errata:
            out.append(f"erratum {e.id}: engine(s) {', '.join(map(str, e.engines))} are barred when engine configs "
                       "are queried")
        for e, where in errata.on_device(self.program, versions.runtime_version()):
            out.append(f"erratum {e.id} ({e.gpus}): {where}; refused when planning meets such a GPU")
        out.append("the operands (shape, strides, data type, device, alignment): at execute")
        return out

    def _gated_nodes(self) -> list[Any]:
        """The nodes whose device gates planning checks: the program's, and the user's composites (a decomposed
        node's rules, e.g. FP8 attention's head dims per architecture, hold for the whole decomposition)."""
        assert self.program is not None
        # the composites first: their refusal names the op the user called (MXFP8 attention is Blackwell-only), not
        # one of the primitives it decomposed into
        composites = [n for n in self.graph.nodes if n.spec is not None and n.spec.expand is not None]
        return composites + self.program.nodes

    def _lower(self, available: Callable[..., bool]) -> None:
        self.program = prepare(self.graph, PassOptions(available=available, require=versions.require))
        version = versions.runtime_version()
        errata.check(self.program, version)  # known cuDNN bugs: refused before lowering
        self.engine_errata = errata.engine_errata(self.program, version)  # those barring engines, not the graph
        handle = self.options.handle
        with cuda_context.bound(context_of(handle) if handle is not None else None):
            self.lowered = lower_program(self.program, self._alignments(),
                                         int(handle) if handle is not None else None, self.options.dynamic_shapes,
                                         self.options.override_shapes)
        self.executor = self._make_executor(self.program, self.lowered)

    def _auto_unified_attention(self) -> list[str]:
        """The sdpa nodes AUTO kept as one unified SDPA_FWD op (their spec's ``composite_fallback``)."""
        kept = [(n, n.spec.composite_fallback) for n in (self.program.nodes if self.program is not None else ())
                if n.spec is not None and n.spec.composite_fallback is not None]
        if not all(fallback(n) for n, fallback in kept):
            return []  # an explicit UNIFIED is not second-guessed; a block mask has no composite to fall back to
        return [n.name for n, _ in kept]

    def _alignments(self) -> dict[int, int]:
        """The byte alignment of data bound at build time (framework arrays given to op builders)."""
        out = {}
        for uid, obj in self.graph._data_bindings.items():
            try:
                out[uid] = pointer_alignment(data_ptr(obj))
            except TypeError:
                pass
        return out

    def _make_executor(self, program: Program, lowered: LoweredGraph) -> Executor:
        # operands are checked against the user's tensors (the dims the caller sees), not the legalized copies;
        # scalars a pass added exist only in the program
        checked = {}
        for uid, t in lowered.tensors.ir_by_uid.items():
            if t.is_virtual or t.is_compile_time_constant or uid in program.scratch:
                continue
            checked[uid] = program.user_tensor(uid) or t
        aliases = program.view_aliases()
        for view, (source, _) in aliases.items():
            # the source is bound even where no operation reads it (a slice on cuDNN < 9.22 has no op), and
            # the view is a slot whether or not an operation reads it
            checked.setdefault(source, program.user_tensor(source) or program.tensors[source])
            checked.setdefault(view, program.user_tensor(view) or program.tensors[view])
        produced = {t.uid for n in self.graph.nodes for t in n.outputs.values()}
        unread = [t for t in self.graph.all_tensors()
                  if not t.is_virtual and t.uid not in checked and t.uid not in produced]
        executor = Executor(list(checked), checked, aliases, unread)
        executor.set_scratch(program.scratch)
        executor.graph_handle = self.options.handle  # execute() without a handle runs on pygraph(handle=...)
        executor.bind(self.graph._data_bindings)
        self.bound_tensors = [checked[uid] for uid in sorted(checked)]
        return executor


def versions_available(feature: str, at_least: int = 0) -> bool:
    """The passes' view of the running cuDNN: has it ``feature`` (and is it at least ``at_least``)?"""
    return versions.available(feature) and versions.runtime_version() >= at_least


def _without_unified_attention(feature: str, at_least: int = 0) -> bool:
    """The running cuDNN, less the unified SDPA_FWD op (AUTO's fallback to the composite attention)."""
    return feature != desc.OPERATION_SDPA_FWD_DESCRIPTOR and versions_available(feature, at_least)
