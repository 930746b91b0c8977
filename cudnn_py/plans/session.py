"""The planning session: everything on the cuDNN side of one graph, with an explicit phase.

    BUILT -> VALIDATED -> OPERATION_GRAPH -> ENGINE_CONFIGS -> PLANS -> EXECUTABLE

* VALIDATED: the user's graph passed IR inference, the IR passes made the program that is lowered, no erratum of the
  running cuDNN matches it (``errata.py``), and every
  tensor / operation descriptor and the operation graph finalized - without a handle when the graph has none, so
  on cuDNN >= 9.8 this needs no GPU (deviceless validation).
* OPERATION_GRAPH: the operation graph finalized again with a handle (heuristics need to see the device).
* ENGINE_CONFIGS: heuristics ran (or explicit (engine, knobs) configs were added); filters apply here.
* PLANS: at least one execution plan finalized (where support is really decided and kernels compile).
* EXECUTABLE: a default plan is selected and operands can be bound and executed.

Devices. A session belongs to one device: its planning handle's (``device``, known from OPERATION_GRAPH on).
Everything it builds — the operation graph with a handle, engine configs, plans, variant packs, workspaces — is
for that device, made with that handle's CUDA context current (``cuda.context.bound``), and its executor
refuses operands and handles of another device.

Each method states the phase it needs; a call made too early raises :class:`~cudnn_py.errors.PhaseError`
naming it (``pygraph`` advances the cheap phases itself, as the classic API does). The session owns its
descriptors, configs, plans and executor.

Differences from the C++ frontend, on purpose (see ``graph_flow.md`` §9):
- configs from several heuristics modes are deduplicated (the frontend builds duplicate plans);
- the modes after the first that returned a config are queried when first needed (``configs``: the plan count, an
  index past the configs so far, a filter, ``build_plans(ALL)``, explain), or when none of the configs so far
  builds: FALLBACK's query (2-3 ms of an SDPA build on the H200) is usually never made. The list is the one an
  eager query gives (``heuristics.py``, deferred modes);
- ``build_plans(ALL)`` makes the *best-ranked* plan that built the default one (the frontend picks the last);
- ``deselect_engines(["eng1"])`` bars engine 1 only, not eng10..eng19 (the frontend matches substrings);
- a variant-pack descriptor is cached per pointer set instead of being rebuilt on every execute.
"""
from __future__ import annotations

import enum
import json
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import enums
from ..backend import Descriptor, versions
from ..backend.enums import enum_class
from ..backend.handle import context_of, default_handle, placement_of
from ..cuda import context as cuda_context
from ..errors import (
    CudaUnavailableError,
    CudnnError,
    CudnnPyError,
    NotImplementedOptionError,
    PhaseError,
    UsageError,
    cudnnGraphNotSupportedError,
)
from ..interop import data_ptr
from ..ir.graph import weak_callable
from ..ir.passes import PassOptions, prepare
from ..ir.program import Program
from ..lowering import LoweredGraph, finalize_operation_graph, lower_program, pointer_alignment, view_aliases
from . import cuda_graph, device_gates, disk_planning, errata, heuristics, plan_cache, serialize
from .device_properties import DeviceProperties
from .engine_config import CachedEngineConfig, EngineConfig, make_engine
from .execute import Executor
from .kernel_cache import KernelCache
from .plan import ExecutionPlan

_log = logging.getLogger(__name__)


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


class Phase(enum.IntEnum):
    BUILT = 0
    VALIDATED = 1
    OPERATION_GRAPH = 2
    ENGINE_CONFIGS = 3
    PLANS = 4
    EXECUTABLE = 5


# what to call to reach each phase (for the PhaseError message)
_HOW = {Phase.VALIDATED: "validate()", Phase.OPERATION_GRAPH: "build_operation_graph()",
        Phase.ENGINE_CONFIGS: "create_execution_plans()", Phase.PLANS: "build_plans()",
        Phase.EXECUTABLE: "build_plans()"}


@dataclass(frozen=True)
class SessionOptions:
    """The graph-level options the cuDNN side uses."""

    handle: Any = None  # the graph's handle (classic pygraph(handle=)); None: this thread's default handle
    sm_count: int | None = None  # ENGINEHEUR_SM_COUNT_TARGET
    dynamic_shapes: bool = False  # OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED
    override_shapes: bool = False  # OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED (cuDNN >= 9.21)
    kernel_cache: KernelCache | None = None  # EXECUTION_PLAN_KERNEL_CACHE on every plan (kernel_cache.py)
    # deviceless (AoT) planning for these properties: no handle anywhere, ENGINEHEUR_ / ENGINE_DEVICEPROP
    device_properties: DeviceProperties | None = None
    sm_version: int | None = None  # the target architecture (90 = SM 9.0) the device rules are checked against


class PlanningSession:
    def __init__(self, graph: Any, options: SessionOptions, on_default_plan_change: Callable[[], None] = lambda: None):
        # the user's (validated) IR graph, referred to weakly: the graph owns its session, and a reference back would
        # make a cycle that keeps every descriptor of a dropped graph until the cyclic collector runs
        self._graph_ref = weakref.ref(graph)
        self.options = options
        self.phase = Phase.BUILT
        self.program: Program | None = None
        self.lowered: LoweredGraph | None = None
        self.executor: Executor | None = None
        self._configs: list[EngineConfig] = []  # read through .configs, which first queries the deferred modes
        self._deferred: heuristics.HeuristicsResult | None = None  # a query whose later modes wait until needed
        self.plans: dict[int, ExecutionPlan] = {}
        self.failures: dict[int, str] = {}  # config index -> why its plan did not build
        self.barred: dict[int, str] = {}  # config index -> why a filter bars it
        self.deferred_checks: list[str] = []  # what validate() could not check (set by validate)
        self.engine_errata: list[tuple[errata.Erratum, str]] = []  # engine-level errata the program matches
        self.candidate: int | None = None  # the default plan
        self.heuristics_report: list[tuple] = []
        self.heuristics_ranked: list[tuple[str, list[Any]]] = []  # (mode, its EngineConfigs best first)
        self.bound_tensors: list[Any] = []  # the tensor behind every variant-pack slot (the executor checks these)
        self.graph_packs: dict[int, Any] = {}  # cudaGraph_t -> the variant pack it was recorded / updated with
        self.device: int | None = None  # the planning handle's device (None: not known yet)
        self.context: int | None = None  # that handle's CUDA context (None: not known)
        self.lowering = "as built"  # or how the program was lowered again (AUTO's composite attention fallback)
        self.cached_queries: list[tuple[Any, list[str]]] = []  # (cache key, modes) of queries answered from the cache
        self._fingerprint: tuple[Descriptor, tuple | None] | None = None  # (operation graph, its fingerprint)
        self.disk = disk_planning.DiskUse()  # what the disk cache gave this graph (disk_planning.py; explain)
        self._fast_by_plan: dict[int, Callable[..., None]] = {}  # plan id -> its bound execute (_fast)
        self._on_default_plan_change = weak_callable(on_default_plan_change)  # a bound method of the graph: weakly

    @property
    def graph(self) -> Any:
        """The graph this session plans (RuntimeError once it was garbage-collected: only planning needs it; the
        built plans execute without it)."""
        graph = self._graph_ref()
        if graph is None:
            raise UsageError("the graph this planning session belongs to was garbage-collected; keep the graph "
                               "while you plan with its session")
        return graph

    @property
    def configs(self) -> list[EngineConfig]:
        """Every engine config, in plan-index order: heuristics modes a query deferred are queried first (the
        build itself reads ``_configs``, the configs so far, and asks for the rest only when none of them built)."""
        if self._deferred is not None:
            self._resolve_deferred()
        return self._configs

    @configs.setter
    def configs(self, configs: list[EngineConfig]) -> None:
        self._configs, self._deferred = configs, None

    # ---- phase bookkeeping -------------------------------------------------------------------------------------------
    def _need(self, phase: Phase, method: str) -> None:
        if self.phase < phase:
            raise PhaseError(f"{method}() needs the {phase.name} phase, and the graph is at {self.phase.name}: "
                             f"call {_HOW[phase]} first")

    def _advance(self, phase: Phase) -> None:
        self.phase = max(self.phase, phase)

    # ---- VALIDATED: passes and deviceless lowering -------------------------------------------------------------------
    def validate(self) -> None:
        """Run the IR passes and lower every tensor and operation, finalizing the operation graph with the graph's
        handle if it has one, else without (no device needed on cuDNN >= 9.8)."""
        if self.phase >= Phase.VALIDATED:
            return  # (a deserialized session starts EXECUTABLE)
        if not self.graph.is_validated:
            raise PhaseError("validate the IR first (pygraph.validate())")
        t0 = time.perf_counter()
        self._lower(versions_available)
        assert self.program is not None and self.lowered is not None
        self._advance(Phase.VALIDATED)
        handle = self.options.handle
        self.deferred_checks = self._checks_validate_cannot_run()
        _log.info("graph %r validated in %.2f ms: %d node(s) after the passes, %d backend operation(s), operation "
                  "graph finalized %s; not checked yet: %s", self.graph.name, _ms_since(t0), len(self.program.nodes),
                  len(self.lowered.operations), "with a handle" if handle is not None else "without a handle",
                  "; ".join(self.deferred_checks))

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

    def _fall_back_to_composite_attention(self, report: str) -> None:
        """AUTO's unified attention found no engine: lower the graph again with the composite attention (the
        official frontend does not retry; its AUTO decides from the support rules alone)."""
        names = self._auto_unified_attention()
        self._lower(_without_unified_attention)
        self.lowering = "composite attention (AUTO's fallback)"
        assert self.program is not None and self.lowered is not None
        self.program.log.append(f"plans: the unified SDPA_FWD op of {names} found no engine ({report}); AUTO fell "
                                "back to the composite attention")
        handle = self.planning_handle()
        if handle is not None:
            self._bind_device(handle)  # the new executor's device
            if self.lowered.handle is None:
                finalize_operation_graph(self.lowered, handle)  # (called with the planning context current)

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
        aliases = view_aliases(program)
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

    # ---- OPERATION_GRAPH --------------------------------------------------------------------------------------------
    def planning_handle(self) -> int | None:
        """The graph's handle, else this thread's default handle; None when there is no usable GPU, and for a
        deviceless (device_property) graph, which plans for its device properties with no handle at all."""
        if self.options.device_properties is not None:
            return None
        if self.options.handle is not None:
            return int(self.options.handle)
        try:
            return int(default_handle())
        except CudaUnavailableError:
            return None

    def _check_errata_of_some_gpus(self) -> None:
        """The errata of some GPUs only: the GPU (or the sm_version planned for) is read when one matches."""
        assert self.program is not None
        version = versions.runtime_version()
        if errata.on_device(self.program, version):
            cc = self.options.sm_version
            if cc is None:
                cc = device_gates.compute_capability(device_gates.device_of_handle(self.options.handle))
            errata.check_on_device(self.program, version, cc)

    def build_operation_graph(self) -> None:
        """Make sure the operation graph carries a handle, which heuristics need to see the device."""
        self._need(Phase.VALIDATED, "build_operation_graph")
        if self.phase >= Phase.OPERATION_GRAPH:
            return
        assert self.lowered is not None
        handle = self.planning_handle()
        if handle is not None:
            self._bind_device(handle)
            # None: the current device's; sm_version, when given, is the architecture planned for
            device_gates.check(self._gated_nodes(), self.options.handle, self.options.sm_version)
            self._check_errata_of_some_gpus()
            if self.lowered.handle is None:
                t0 = time.perf_counter()
                with self.on_device():
                    finalize_operation_graph(self.lowered, handle)
                _log.info("graph %r: operation graph finalized with handle 0x%x in %.2f ms", self.graph.name, handle,
                          _ms_since(t0))
        elif self.options.sm_version is not None:  # deviceless: the target architecture stands in for the GPU
            device_gates.check(self._gated_nodes(), None, self.options.sm_version)
            self._check_errata_of_some_gpus()
        if self.options.kernel_cache is not None:
            assert self.lowered.operation_graph is not None
            with self.on_device():
                self.options.kernel_cache.bind(self.lowered.operation_graph, self.device)
        self._advance(Phase.OPERATION_GRAPH)

    def _device_properties(self) -> Descriptor | None:
        dp = self.options.device_properties
        return dp.descriptor if dp is not None else None

    def _kernel_cache(self) -> Descriptor | None:
        kc = self.options.kernel_cache
        return kc.descriptor if kc is not None else None

    # The keyword arguments of heuristics.query / EngineConfig.explicit and of ExecutionPlan.build, given only when
    # set: the plain calls (and the test doubles written for them) stay as they were.
    def _for_device(self) -> dict[str, Descriptor]:
        dp = self._device_properties()
        return {"device_properties": dp} if dp is not None else {}

    def _with_cache(self) -> dict[str, Descriptor]:
        kc = self._kernel_cache()
        return {"kernel_cache": kc} if kc is not None else {}

    def _bind_device(self, handle: Any) -> None:
        self.device, self.context = placement_of(handle)  # one read of the handle registry
        if self.executor is not None:
            self.executor.set_device(self.device)

    def on_device(self) -> cuda_context.bound:
        """``with session.on_device():`` runs cuDNN calls with the planning handle's context current."""
        return cuda_context.bound(self.context)

    @property
    def operation_graph(self) -> Descriptor:
        self._need(Phase.OPERATION_GRAPH, "operation_graph")
        assert self.lowered is not None and self.lowered.operation_graph is not None
        return self.lowered.operation_graph

    def get_engine_count(self) -> int:
        self._need(Phase.OPERATION_GRAPH, "get_engine_count")
        assert self.lowered is not None
        return self.lowered.engine_count()

    def get_knobs_for_engine(self, engine_id: int) -> list:
        self._need(Phase.OPERATION_GRAPH, "get_knobs_for_engine")
        with self.on_device():
            engine = make_engine(self.operation_graph, int(engine_id), self._device_properties())
        out = []
        for info in engine.get("CUDNN_ATTR_ENGINE_KNOB_INFO", kind="CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR", count=64):
            out.append(knob(_classic_knob(info.get("CUDNN_ATTR_KNOB_INFO_TYPE")),
                            int(info.get("CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE")),
                            int(info.get("CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE")),
                            int(info.get("CUDNN_ATTR_KNOB_INFO_STRIDE"))))
        return out

    # ---- ENGINE_CONFIGS ---------------------------------------------------------------------------------------------
    def create_execution_plans(self, modes: list[Any]) -> None:
        """Query heuristics for each mode (classic heur_mode members), in order; configs are deduplicated."""
        self._need(Phase.OPERATION_GRAPH, "create_execution_plans")
        assert self.lowered is not None
        names = [enums.to_backend_heur_mode(m) for m in modes]
        self._resolve_deferred()  # an earlier call's modes come first in the plan index space
        t0 = time.perf_counter()
        with self.on_device():
            res = self._query(names, defer=True)
            if not res.configs and not self._configs and self._auto_unified_attention():
                self.heuristics_report.extend(res.per_mode)
                self._fall_back_to_composite_attention("; ".join(f"{m}: {r}" for m, r in res.per_mode))
                res = self._query(names, defer=True)
        if _log.isEnabledFor(logging.INFO):
            _log.info("graph %r: heuristics in %.2f ms: %s", self.graph.name, _ms_since(t0),
                      "; ".join(f"{m}: {r}" for m, r in res.per_mode))
            for c in res.configs:
                _log.debug("graph %r: engine config %d %s (from %s)", self.graph.name,
                           len(self._configs) + res.configs.index(c), c.name, c.source)
            if res.pending:
                _log.info("graph %r: heuristics mode(s) %s deferred until needed", self.graph.name,
                          ", ".join(res.pending))
        self._take(res)
        if not self._configs:
            from ..backend.api import get_last_error_string

            report = "; ".join(f"{m}: {r}" for m, r in res.per_mode)
            if self.options.device_properties is not None:
                report += f" (deviceless, for {self.options.device_properties!r})"
            elif self.lowered.handle is None:
                report += " (no GPU/handle: cuDNN heuristics need a device to rank engines)"
            raise cudnnGraphNotSupportedError(f"No valid engine configs for graph {self.graph.name!r}: {report}. "
                                              f"{get_last_error_string()}")
        self._advance(Phase.ENGINE_CONFIGS)

    def _query(self, modes: list[str], defer: bool = False, disk: bool = True) -> heuristics.HeuristicsResult:
        key = self._heuristics_key(modes)
        if disk and key is not None and not self._configs and not heuristics.has(key):
            # a graph this process has not planned: an earlier process may have (the in-process caches answer
            # the graphs planned here before, so the steady state never reaches the disk)
            self._disk_lookup(key, modes)
        kw: dict[str, Any] = self._for_device()
        if key is not None:  # (given only when set, as _for_device's)
            kw["cache_key"] = key
        res = heuristics.query(self.operation_graph, modes, self.options.sm_count, defer=defer, **kw)
        if res.cached:
            self.cached_queries.append((key, modes))
        return res

    def _disk_lookup(self, heuristics_key: Any, modes: list[str]) -> None:
        """Look the graph up in the disk cache (``disk_planning.py``): a hit seeds the query cache under
        ``heuristics_key`` and keeps the entry's plan for the build; why it is not used goes to explain()."""
        use, lowered = self.disk, self.lowered
        off = disk_planning.off_reason()
        if off is not None:
            return disk_planning.not_used(use, f"off ({off})")
        if self.options.kernel_cache is not None or self.options.dynamic_shapes or self.options.override_shapes:
            return disk_planning.not_used(use, "a graph with a kernel cache or dynamic / override shapes (its plans "
                                               "hold more than their JSON)")
        if lowered is None or lowered.handle is None or lowered.operation_graph is None or self.device is None:
            return disk_planning.not_used(use, "no device handle on the operation graph")
        try:
            fingerprint = disk_planning.portable_fingerprint(self._operation_graph_fingerprint())
            key = disk_planning.make_key(fingerprint, versions.runtime_version(), self.device, modes,
                                         self.options.sm_count)
        except disk_planning.NotPortable as e:
            return disk_planning.not_used(use, str(e))
        except (CudnnPyError, NotImplementedError, OSError) as e:  # the device's facts
            return disk_planning.not_used(use, f"the device's compute capability / SM count: {e}")
        disk_planning.lookup(use, key, heuristics_key, modes)
        return None

    def _resolve_deferred(self) -> bool:
        """Query the modes a query deferred (heuristics.resume) and add their configs; True if that added any."""
        res, self._deferred = self._deferred, None
        if res is None:
            return False
        t0 = time.perf_counter()
        with self.on_device():
            added = heuristics.resume(res)
        if _log.isEnabledFor(logging.INFO):
            _log.info("graph %r: deferred heuristics in %.2f ms: %s", self.graph.name, _ms_since(t0),
                      "; ".join(f"{m}: {r}" for m, r in added.per_mode))
        self._take(added)
        return bool(added.configs)

    def _take(self, res: heuristics.HeuristicsResult) -> None:
        """Add a query's configs (and its report, its ranking) to the graph's, barring those errata bar; a query
        with modes still pending becomes the deferred one (callers resolve the one before first)."""
        self.heuristics_report.extend(res.per_mode)
        self.heuristics_ranked.extend(res.ranked)
        self._configs.extend(res.configs)
        self._deferred = res if res.pending else None
        self._bar_erratic_engines()

    def _heuristics_key(self, modes: list[str]) -> tuple | None:
        """What decides a heuristics answer (heuristics.py, the query cache): the graph's key, how it was lowered
        (the same key lowers the same way on the same cuDNN, given the alignment of data bound at build time),
        the cuDNN version, the device, the SM count target and the modes. None: not cached (deviceless planning,
        no device known)."""
        if self.options.device_properties is not None or self.device is None:
            return None
        return (self.graph.key(), self.lowering, tuple(sorted(self._alignments().items())),
                versions.runtime_version(), self.device, self.options.sm_count, tuple(modes),
                bool(self.options.dynamic_shapes), bool(self.options.override_shapes))

    def _query_afresh(self) -> bool:
        """Every config came from cached answers, every one failed to build and no filter barred any: forget the
        answers, query cuDNN again and start over (True), as a graph queried first would have. False: nothing to
        redo (a config cuDNN gave this graph, or one the caller chose, failed as well)."""
        if not self.cached_queries or self.barred or self.plans or \
                not all(isinstance(c, CachedEngineConfig) for c in self.configs):
            return False
        why = "; ".join(f"{self.configs[i].name}: {f}" for i, f in self.failures.items())
        _log.info("graph %r: the configs of a cached heuristics answer did not build (%s); querying cuDNN afresh",
                  self.graph.name, why)
        queries, self.cached_queries = self.cached_queries, []
        self.configs, self.failures, self.heuristics_ranked = [], {}, []
        self.heuristics_report.append(("cache", f"cached configs did not build ({why}); queried afresh"))
        if self.disk.from_disk:  # the answer was the disk entry's: it goes too (cuDNN's answer is stored instead)
            self.disk.from_disk = False
            disk_planning.drop(self.disk, f"the configs of its heuristics answer did not build ({why})")
        with self.on_device():
            for key, modes in queries:
                heuristics.forget(key)
                self._resolve_deferred()  # an earlier query's modes keep their place in the index space
                # cuDNN's answer, cached in place of the one forgotten
                self._take(self._query(modes, defer=True, disk=False))
        return bool(self._configs)

    def create_execution_plan(self, engine_id: int, knobs: dict | None = None) -> None:
        """Add a config for an explicit engine id and knob choices (no heuristics)."""
        count = self.get_engine_count()
        if not 0 <= int(engine_id) < count:
            raise UsageError(f"Invalid engine id {engine_id}: this graph has engines 0..{count - 1}")
        backend_knobs = {_knob_value(k): int(v) for k, v in (knobs or {}).items()}
        with self.on_device():
            self.configs.append(EngineConfig.explicit(self.operation_graph, int(engine_id), backend_knobs,
                                                      **self._for_device()))
        self._bar_erratic_engines()
        self._advance(Phase.ENGINE_CONFIGS)

    def _bar_erratic_engines(self) -> None:
        """Bar the configs of engines an engine-level erratum says are wrong on this program."""
        version = versions.runtime_version()
        for e, where in self.engine_errata:
            why = errata.engine_reason(e, where, version)
            for i, c in enumerate(self._configs):
                if i not in self.barred and c.engine_index in e.engines:
                    self.barred[i] = why
                    _log.info("graph %r: engine config %s barred: %s", self.graph.name, c.name, why)

    def _bar(self, method: str, predicate: Callable[[EngineConfig], bool], why: str) -> None:
        self._need(Phase.ENGINE_CONFIGS, method)
        for i, c in enumerate(self.configs):
            if i not in self.barred and predicate(c):
                self.barred[i] = why

    def deselect_engines(self, names: list) -> None:
        names = list(names)
        self._bar("deselect_engines", lambda c: any(c.name == n or c.name.startswith(n + "_") for n in names),
                  "deselected by name")

    def select_numeric_notes(self, notes: list) -> None:
        want = {_note_name(n) for n in notes}
        self._bar("select_numeric_notes", lambda c: not want <= {n.name for n in c.numerical_notes},
                  "lacks a selected numerical note")

    def deselect_numeric_notes(self, notes: list) -> None:
        bad = {_note_name(n) for n in notes}
        self._bar("deselect_numeric_notes", lambda c: bool(bad & {n.name for n in c.numerical_notes}),
                  "has a deselected numerical note")

    def select_behavior_notes(self, notes: list) -> None:
        want = {_note_name(n) for n in notes}
        self._bar("select_behavior_notes", lambda c: not want <= {n.name for n in c.behavior_notes},
                  "lacks a selected behavior note")

    def deselect_behavior_notes(self, notes: list) -> None:
        bad = {_note_name(n) for n in notes}
        self._bar("deselect_behavior_notes", lambda c: bool(bad & {n.name for n in c.behavior_notes}),
                  "has a deselected behavior note")

    def deselect_workspace_greater_than(self, limit: int) -> None:
        self._bar("deselect_workspace_greater_than", lambda c: c.workspace > int(limit),
                  f"needs more than {limit} bytes of workspace")

    def check_support(self) -> None:
        self._need(Phase.ENGINE_CONFIGS, "check_support")
        if not self._any_unbarred():
            self._resolve_deferred()  # every config so far is filtered out: the deferred modes' may not be
        if self._any_unbarred():
            return
        raise cudnnGraphNotSupportedError(
            "No execution plans support the graph: every engine config was filtered out ("
            + "; ".join(f"{self.configs[i].name}: {w}" for i, w in self.barred.items()) + ")")

    def _any_unbarred(self) -> bool:
        return any(i not in self.barred for i in range(len(self._configs)))

    def get_execution_plan_count(self) -> int:
        return len(self.configs)

    def _index(self, index: int) -> int:
        i = int(index)
        if i >= len(self._configs):
            self._resolve_deferred()  # an index past the configs so far
        if not 0 <= i < len(self._configs):
            raise IndexError(f"plan index {index} out of range: this graph has {len(self.configs)} engine config(s)")
        return i

    def get_plan_name_at_index(self, index: int) -> str:
        self._need(Phase.ENGINE_CONFIGS, "get_plan_name_at_index")
        return self.configs[self._index(index)].name

    def get_engine_and_knobs_at_index(self, index: int) -> tuple:
        """(engine id, {knob_type: value}) of config ``index``; knobs the classic enum cannot name keep their
        backend member."""
        self._need(Phase.ENGINE_CONFIGS, "get_engine_and_knobs_at_index")
        c = self.configs[self._index(index)]
        knob_enum = enum_class("cudnnBackendKnobType_t")
        return c.engine_index, {_classic_knob(knob_enum(t)): v for t, v in c.knobs}

    def plan_entries(self) -> list[dict[str, Any]]:
        """One dict per engine config: index, name, engine id, knobs, the heuristics mode it came from, workspace,
        and whether its plan built, failed (with the backend's reason) or was filtered out (and why)."""
        out = []
        for i, c in enumerate(self.configs):
            out.append({"index": i, "name": c.name, "engine_id": c.engine_index, "knobs": dict(c.knobs),
                        "source": c.source, "workspace": c.workspace, "built": i in self.plans,
                        "failure": self.failures.get(i), "barred": self.barred.get(i), "default": i == self.candidate})
        return out

    def get_behavior_notes_for_plan_at_index(self, index: int) -> list:
        self._need(Phase.ENGINE_CONFIGS, "get_behavior_notes_for_plan_at_index")
        return _classic_behavior(self.configs[self._index(index)].behavior_notes)

    def get_numerical_notes_for_plan_at_index(self, index: int) -> list:
        self._need(Phase.ENGINE_CONFIGS, "get_numerical_notes_for_plan_at_index")
        return list(self.configs[self._index(index)].numerical_notes)

    # ---- PLANS ------------------------------------------------------------------------------------------------------
    def build_plan_at_index(self, index: int) -> None:
        self._need(Phase.ENGINE_CONFIGS, "build_plan_at_index")
        i = self._index(index)
        if i in self.plans:
            return
        if i in self.barred:
            raise cudnnGraphNotSupportedError(f"plan {i} ({self._configs[i].name}) is filtered out: {self.barred[i]}")
        t0 = time.perf_counter()
        try:
            with self.on_device():  # kernels are compiled and loaded into the current context
                cache_key, plan = self._plan_cache_key(i), None
                if cache_key is not None:
                    assert self.lowered is not None and self.lowered.handle is not None
                    plan = plan_cache.rebuild(cache_key, self._configs[i], self.lowered.handle)
                record = self.disk.plan
                if plan is None and record is not None and self.lowered is not None and \
                        self.lowered.handle is not None:
                    plan = disk_planning.rebuild(self.disk, self._configs[i], self.lowered.handle,
                                                 disk_planning.graph_io(self._operation_graph_fingerprint()))
                    if plan is not None and cache_key is not None:  # the next build here: from memory
                        plan_cache.remember_json(cache_key, record.json, record.engine, dict(record.knobs),
                                                 record.workspace)
                if plan is None:
                    plan = ExecutionPlan.build(self._configs[i], **self._with_cache())
                    if cache_key is not None:
                        plan_cache.remember(cache_key, plan)
            if self.executor is not None:  # the program's workspace-resident intermediates come first
                plan.workspace += self.executor.scratch_bytes
            self.plans[i] = plan
        except CudnnError as e:
            self.failures[i] = str(e)
            _log.info("graph %r: plan %d (%s) did not build (%.2f ms): %s", self.graph.name, i, self._configs[i].name,
                      _ms_since(t0), e)
            raise cudnnGraphNotSupportedError(f"plan {i} ({self._configs[i].name}) did not build: {e}") from e
        _log.info("graph %r: plan %d (%s) built in %.2f ms, workspace %d bytes", self.graph.name, i,
                  self._configs[i].name, _ms_since(t0), self.plans[i].workspace)
        self._advance(Phase.PLANS)
        if self.candidate is None:
            self._set_candidate(i)

    def _plan_cache_key(self, i: int) -> tuple | None:
        """Config ``i``'s key in the plan cache (plan_cache.py), or None: not cached. Only a graph whose heuristics
        came from the query cache (its key was planned before) is fingerprinted, so a graph built once pays
        nothing; never with a kernel cache or device properties (a plan holds more than its JSON then), nor with
        dynamic shapes (their plans serve other shapes through the kernel cache; rebuilt ones were never run)."""
        lowered = self.lowered
        if not self.cached_queries or self.options.kernel_cache is not None or self.options.dynamic_shapes or \
                self.options.override_shapes or \
                lowered is None or lowered.handle is None or lowered.operation_graph is None or \
                not plan_cache.enabled():
            return None
        return plan_cache.key(self._operation_graph_fingerprint(), self._configs[i], self.options.sm_count,
                              self.device, lowered.handle)

    def _operation_graph_fingerprint(self) -> tuple | None:
        """``Descriptor.fingerprint`` of the operation graph, computed once per operation graph (the plan cache
        and the disk cache both key by it)."""
        assert self.lowered is not None and self.lowered.operation_graph is not None
        og = self.lowered.operation_graph
        if self._fingerprint is None or self._fingerprint[0] is not og:  # (lowered again, or finalized again)
            self._fingerprint = (og, og.fingerprint())
        return self._fingerprint[1]

    def build_plans(self, build_all: bool = False) -> None:
        """Build the best-ranked plan that builds (``build_all``: every plan), and make the best one the default."""
        self._need(Phase.ENGINE_CONFIGS, "build_plans")
        if build_all:
            self._resolve_deferred()
        start = 0
        while not self._build_first(start, build_all) and self._deferred is not None:
            start = len(self._configs)
            self._resolve_deferred()  # none of the configs so far built: the deferred modes' configs are next
        if not self.plans and self._query_afresh():
            return self.build_plans(build_all)
        if not self.plans:
            why = "; ".join(f"{c.name}: {self.failures.get(i) or self.barred.get(i)}"
                            for i, c in enumerate(self._configs))
            raise cudnnGraphNotSupportedError(f"No execution plans support the graph: {why}")
        self._set_candidate(min(self.plans))
        if self.disk.store_after_build:
            self._disk_store()

    def _disk_store(self) -> None:
        """Write the disk cache's entry for this graph (a miss, or an entry dropped): its heuristics answer and
        default plan, with cuDNN's workspace (without the program's intermediates, which the session adds)."""
        assert self.candidate is not None
        plan = self.plans[self.candidate]
        if plan.source not in ("finalized", plan_cache.REBUILT):
            return
        scratch = self.executor.scratch_bytes if self.executor is not None else 0
        t0 = time.perf_counter()
        with self.on_device():
            disk_planning.remember(self.disk, plan, plan.workspace - scratch)
        _log.info("graph %r: disk cache store: %s (%.2f ms)", self.graph.name,
                  self.disk.lines[-1] if self.disk.lines else "nothing", _ms_since(t0))

    def _build_first(self, start: int, build_all: bool) -> bool:
        """Build the plans of configs ``start``.. in order, stopping at the first that builds unless ``build_all``;
        True if one did."""
        built = False
        for i in range(start, len(self._configs)):
            if i in self.barred or i in self.failures:
                continue
            try:
                self.build_plan_at_index(i)
            except cudnnGraphNotSupportedError:  # recorded in self.failures; the summary says why
                continue
            built = True
            if not build_all:
                break
        return built

    def _set_candidate(self, index: int) -> None:
        if index != self.candidate:
            _log.info("graph %r: default plan is %d (%s)", self.graph.name, index, self._configs[index].name)
            self.candidate = index
            on_change = self._on_default_plan_change()
            if on_change is not None:  # (the graph may be gone; its session lives on in the caller's hands)
                on_change()  # a bound execute targets the old plan
        self._advance(Phase.EXECUTABLE)

    def plan(self, index: int | None = None) -> ExecutionPlan:
        """The default plan, or the built plan ``index``."""
        if index is None:
            self._need(Phase.EXECUTABLE, "execute")
            assert self.candidate is not None
            return self.plans[self.candidate]
        self._need(Phase.ENGINE_CONFIGS, "execute_plan_at_index")
        i = self._index(index)
        if i not in self.plans:
            raise UsageError(f"Plan index {i} did not build" + (f": {self.failures[i]}" if i in self.failures else
                                                                   " (call build_plan_at_index first)"))
        return self.plans[i]

    def get_workspace_size(self) -> int:
        return self.plan().workspace

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        return self.plan(index).workspace

    def get_behavior_notes(self) -> list:
        return _classic_behavior(self.plan().config.behavior_notes)

    # ---- EXECUTABLE -------------------------------------------------------------------------------------------------
    def fast_path(self, classic: Callable[..., None] | None = None) -> Callable[..., None]:
        """``execute`` for the default plan with every indirection bound (``Executor.fast``). With ``classic``
        (the classic ``pygraph.execute``, for the keywords the bound execute does not handle) a new one, which the
        graph installs as its ``execute``; without, the one ``execute_plan_at_index`` shares."""
        plan = self.plan()
        if classic is None:
            return self._fast(plan)
        assert self.executor is not None
        return self.executor.fast(plan, classic)

    def _fast(self, plan: ExecutionPlan) -> Callable[..., None]:
        """``plan``'s bound execute, made once per plan (the default plan's and ``execute_plan_at_index``'s)."""
        fast = self._fast_by_plan.get(plan.id)
        if fast is None:
            assert self.executor is not None
            fast = self._fast_by_plan[plan.id] = self.executor.fast(plan)
        return fast

    def execute(self, variant_pack: dict, workspace: Any = None, handle: Any = None) -> None:
        assert self.executor is not None
        self.executor.execute(self.plan(), variant_pack, workspace, handle)

    def execute_plan_at_index(self, variant_pack: dict, workspace: Any, index: int, handle: Any = None) -> None:
        """Plan ``index``'s execute: the checked call first, then that plan's bound fast path (``Executor.fast``),
        as ``execute`` does for the default plan (autotuning loops call each plan many times in a row)."""
        assert self.executor is not None
        plan = self.plan(index)
        fast = self._fast_by_plan.get(plan.id)
        if fast is not None:
            return fast(variant_pack, workspace, handle)
        self.executor.execute(plan, variant_pack, workspace, handle)
        self._fast(plan)
        return None

    # ---- CUDA graphs (plans/cuda_graph.py) ---------------------------------------------------------------------
    def populate_cuda_graph(self, handle: int, variant_pack: dict, workspace: Any, graph: Any) -> None:
        assert self.executor is not None
        with cuda_context.bound(context_of(handle)):
            vp = cuda_graph.populate(handle, self.plan(), self.executor, variant_pack, workspace, graph)
        self.graph_packs[cuda_graph.graph_handle(graph)] = vp  # kept alive as long as the graph may run

    def update_cuda_graph(self, handle: int, variant_pack: dict, workspace: Any, graph: Any) -> None:
        assert self.executor is not None
        with cuda_context.bound(context_of(handle)):
            vp = cuda_graph.update(handle, self.plan(), self.executor, variant_pack, workspace, graph)
        self.graph_packs[cuda_graph.graph_handle(graph)] = vp

    # ---- serialization (plans/serialize.py) ---------------------------------------------------------------------
    def serialize(self, graph_doc: dict) -> bytes:
        """The default plan and its variant-pack slots as a blob that :meth:`deserialized` loads."""
        if self.program is not None and view_aliases(self.program):
            raise NotImplementedOptionError("serialize() of a graph with a slice is not implemented: the blob does "
                                            "not record the slice output's pointer offset")
        return serialize.dump(self.plan(), self.bound_tensors, graph_doc,
                              self.program.scratch if self.program is not None else None)

    @classmethod
    def deserialized(cls, graph: Any, options: SessionOptions, blob: Any, handle: int,
                     on_default_plan_change: Callable[[], None] = lambda: None) -> PlanningSession:
        """A session that starts EXECUTABLE: the plan rebuilt from a blob, operands checked against its records."""
        with cuda_context.bound(context_of(handle)):
            plan, records, scratch = serialize.load(blob, handle)
        s = cls(graph, options, on_default_plan_change)
        by_uid = {r.uid: r for r in records}
        s.executor = Executor(list(by_uid), by_uid)
        s.executor.set_scratch(scratch)
        plan.workspace += s.executor.scratch_bytes  # as build_plan_at_index adds them
        s.executor.graph_handle = options.handle  # None: executes without a handle run as any such graph's do
        s._bind_device(handle)
        s.bound_tensors = records
        s.configs, s.plans, s.candidate = [plan.config], {0: plan}, 0
        s.phase = Phase.EXECUTABLE
        return s


def versions_available(feature: str, at_least: int = 0) -> bool:
    """The passes' view of the running cuDNN: has it ``feature`` (and is it at least ``at_least``)?"""
    return versions.available(feature) and versions.runtime_version() >= at_least


def _without_unified_attention(feature: str, at_least: int = 0) -> bool:
    """The running cuDNN, less the unified SDPA_FWD op (AUTO's fallback to the composite attention)."""
    return feature != "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR" and versions_available(feature, at_least)


class knob:
    """An engine knob's range: the classic ``cudnn.knob`` (what ``get_knobs_for_engine`` returns), with read-only
    ``type``, ``max_value``, ``min_value`` and ``stride`` and a JSON ``repr``."""

    __slots__ = ("_type", "_max_value", "_min_value", "_stride")
    _type: Any
    _max_value: Any
    _min_value: Any
    _stride: Any

    def __init__(self, knob_type: Any = enums.knob_type.NOT_SET, max_value: Any = None, min_value: Any = None,
                 stride: Any = None) -> None:
        for slot, value in (("_type", knob_type), ("_max_value", max_value), ("_min_value", min_value),
                            ("_stride", stride)):
            object.__setattr__(self, slot, value)

    type = property(lambda self: self._type)
    max_value = property(lambda self: self._max_value)
    min_value = property(lambda self: self._min_value)
    stride = property(lambda self: self._stride)

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError(f"knob.{attr} is read-only")

    def __repr__(self) -> str:
        return json.dumps({"type": str(self._type), "max_value": self._max_value, "min_value": self._min_value,
                           "stride": self._stride})



def _note_name(note: Any) -> str:
    """Backend C name of a classic numerical/behavior note (or of a backend member / C name)."""
    if isinstance(note, str):
        return note
    if isinstance(note, enums.numerical_note):
        return enums.to_backend_numerical_note(note)
    if isinstance(note, enums.behavior_note):
        return enums.to_backend_behavior_note(note)
    return note.name


def _knob_value(knob: Any) -> int:
    """Backend knob type value of a classic knob_type, a backend member or an int."""
    if isinstance(knob, enums.knob_type):
        return int(enum_class("cudnnBackendKnobType_t")[enums.to_backend_knob_type(knob)])
    return int(knob)


def _classic_behavior(notes: list) -> list:
    return [enums.behavior_note_from_backend(n.name) for n in notes]


def _classic_knob(backend_member: Any) -> Any:
    try:
        return enums.knob_type_from_backend(backend_member.name)
    except (KeyError, ValueError):  # a knob the classic enum cannot name (SWAP_AB, TMA knobs): the backend member
        return backend_member
