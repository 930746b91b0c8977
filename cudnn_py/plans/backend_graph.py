"""The cuDNN side of a ``pygraph``: lowering, heuristics, plan building and execution, with the classic
method names. ``pygraph`` creates one lazily and delegates its backend-path methods here.

Differences from the C++ frontend, on purpose (see ``graph_flow.md`` §9):
- configs from several heuristics modes are deduplicated (the frontend builds duplicate plans);
- ``build_plans(ALL)`` makes the *best-ranked* plan that built the default one (the frontend picks the last);
- ``deselect_engines(["eng1"])`` bars engine 1 only, not eng10..eng19 (the frontend matches substrings);
- a variant-pack descriptor is cached per pointer set instead of being rebuilt on every execute.
"""
from __future__ import annotations

from typing import Any

from ..backend.errors import CudnnError
from ..graph.errors import cudnnGraphNotSupportedError
from ..graph.planning import _no_overrides
from ..interop import data_ptr
from ..lowering import lower_graph
from ..lowering.tensors import pointer_alignment
from . import heuristics
from .engine_config import EngineConfig
from .execute import Executor
from .plan import ExecutionPlan


def _not_supported(msg: str) -> cudnnGraphNotSupportedError:
    return cudnnGraphNotSupportedError(msg)


class BackendGraph:
    def __init__(self, ir: Any):
        self.ir = ir
        self.lowered = None
        self.executor: Executor | None = None
        self.configs: list[EngineConfig] = []
        self.plans: dict[int, ExecutionPlan] = {}
        self.failures: dict[int, str] = {}
        self.candidate: int | None = None
        self.heuristics_report: list[tuple[str, str]] = []
        self._barred: dict[int, str] = {}  # config index -> why a filter bars it

    # ------------------------------------------------------------------------------------------- lowering
    def _alignments(self) -> dict[int, int]:
        out = {}
        for uid, obj in getattr(self.ir, "_data_bindings", {}).items():
            try:
                out[uid] = pointer_alignment(data_ptr(obj))
            except TypeError:
                pass
        return out

    def validate(self) -> None:
        """Lower every tensor and operation and finalize the operation graph — with the graph's handle if it has
        one, else without: no device is needed on cuDNN 9.28."""
        self._lower(getattr(self.ir, "handle", None))

    def _lower(self, handle: Any) -> None:
        if self.lowered is not None:
            return
        self.lowered = lower_graph(self.ir, self._alignments(), handle)
        table = self.lowered.tensors
        uids = [uid for uid, t in table.ir_by_uid.items()
                if not t.is_virtual and not getattr(t, "is_compile_time_constant", False)]
        self.executor = Executor(uids, table.ir_by_uid)
        self.executor.graph_handle = getattr(self.ir, "handle", None)  # execute's handle when none is given
        self.executor.bind(getattr(self.ir, "_data_bindings", {}))

    def _planning_handle(self) -> int | None:
        """The graph's handle, else this thread's default handle; None when there is no usable GPU."""
        h = getattr(self.ir, "handle", None)
        if h is not None:
            return int(h)
        from ..backend.errors import CudaUnavailableError
        from ..backend.handle import default_handle

        try:
            return int(default_handle())
        except CudaUnavailableError:
            return None

    def build_operation_graph(self) -> None:
        """Lower (if not yet) and make sure the operation graph carries a handle, which heuristics need to see
        the device."""
        from ..lowering.operation_graph import finalize_operation_graph

        handle = self._planning_handle()
        self._lower(handle)
        if handle is not None and self.lowered.handle is None:
            finalize_operation_graph(self.lowered, self.ir, handle)

    @property
    def operation_graph(self):
        if self.lowered is None or self.lowered.handle is None:
            self.build_operation_graph()
        return self.lowered.operation_graph

    def get_engine_count(self) -> int:
        return self.lowered_graph().engine_count()

    def lowered_graph(self):
        if self.lowered is None:
            self.build_operation_graph()
        return self.lowered

    # ------------------------------------------------------------------------------------------- heuristics
    def create_execution_plans(self, modes: list | None = None) -> None:
        from ..enums import heur_mode, to_backend_heur_mode

        modes = list(modes) if modes else [heur_mode.A, heur_mode.FALLBACK]
        names = [to_backend_heur_mode(m) for m in modes]
        res = heuristics.query(self.operation_graph, names, getattr(self.ir, "sm_count", None))
        self.heuristics_report.extend(res.per_mode)
        self.configs.extend(res.configs)
        if not self.configs:
            from ..backend.api import get_last_error_string

            report = "; ".join(f"{m}: {r}" for m, r in res.per_mode)
            if self.lowered.handle is None:
                report += " (no GPU/handle: cuDNN heuristics need a device to rank engines)"
            raise _not_supported(f"No valid engine configs for graph {getattr(self.ir, 'name', '')!r}: {report}. "
                                 f"{get_last_error_string()}")

    def create_execution_plan(self, engine_id: int, knobs: dict | None = None) -> None:
        """Add a config for an explicit engine id and knob choices (no heuristics)."""
        count = self.get_engine_count()
        if not 0 <= int(engine_id) < count:
            raise RuntimeError(f"Invalid engine id {engine_id}: this graph has engines 0..{count - 1}")
        backend_knobs = {_knob_value(k): int(v) for k, v in (knobs or {}).items()}
        self.configs.append(EngineConfig.explicit(self.operation_graph, int(engine_id), backend_knobs))

    def get_knobs_for_engine(self, engine_id: int) -> list:
        from ..backend import Descriptor

        engine = Descriptor("CUDNN_BACKEND_ENGINE_DESCRIPTOR")
        engine.set("CUDNN_ATTR_ENGINE_OPERATION_GRAPH", self.operation_graph)
        engine.set("CUDNN_ATTR_ENGINE_GLOBAL_INDEX", int(engine_id))
        engine.finalize()
        out = []
        for info in engine.get("CUDNN_ATTR_ENGINE_KNOB_INFO", kind="CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR", count=64):
            out.append(Knob(_classic_knob(info.get("CUDNN_ATTR_KNOB_INFO_TYPE")), int(info.get("CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE")),
                            int(info.get("CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE")), int(info.get("CUDNN_ATTR_KNOB_INFO_STRIDE"))))
        return out

    # ------------------------------------------------------------------------------------------- filters
    def _bar(self, predicate, why: str) -> None:
        for i, c in enumerate(self.configs):
            if i not in self._barred and predicate(c):
                self._barred[i] = why

    def deselect_engines(self, names: list) -> None:
        names = list(names)
        self._bar(lambda c: any(c.name == n or c.name.startswith(n + "_") for n in names), "deselected by name")

    def select_numeric_notes(self, notes: list) -> None:
        want = {_note_name(n) for n in notes}
        self._bar(lambda c: not want <= {n.name for n in c.numerical_notes}, "lacks a selected numerical note")

    def deselect_numeric_notes(self, notes: list) -> None:
        bad = {_note_name(n) for n in notes}
        self._bar(lambda c: bool(bad & {n.name for n in c.numerical_notes}), "has a deselected numerical note")

    def select_behavior_notes(self, notes: list) -> None:
        want = {_note_name(n) for n in notes}
        self._bar(lambda c: not want <= {n.name for n in c.behavior_notes}, "lacks a selected behavior note")

    def deselect_behavior_notes(self, notes: list) -> None:
        bad = {_note_name(n) for n in notes}
        self._bar(lambda c: bool(bad & {n.name for n in c.behavior_notes}), "has a deselected behavior note")

    def deselect_workspace_greater_than(self, limit: int) -> None:
        self._bar(lambda c: c.workspace > int(limit), f"needs more than {limit} bytes of workspace")

    # ------------------------------------------------------------------------------------------- support, plans
    def _require_configs(self) -> None:
        if not self.configs:
            raise RuntimeError("no engine configs: call create_execution_plans() first")

    def check_support(self) -> None:
        self._require_configs()
        if any(i not in self._barred for i in range(len(self.configs))):
            return
        raise _not_supported("No execution plans support the graph: every engine config was filtered out (" +
                             "; ".join(f"{self.configs[i].name}: {w}" for i, w in self._barred.items()) + ")")

    def _index(self, index: int) -> int:
        if not 0 <= int(index) < len(self.configs):
            raise IndexError(f"plan index {index} out of range: this graph has {len(self.configs)} engine config(s)")
        return int(index)

    def build_plan_at_index(self, index: int) -> None:
        i = self._index(index)
        if i in self.plans:
            return
        if i in self._barred:
            raise _not_supported(f"plan {i} ({self.configs[i].name}) is filtered out: {self._barred[i]}")
        try:
            self.plans[i] = ExecutionPlan.build(self.configs[i])
        except CudnnError as e:
            self.failures[i] = str(e)
            raise _not_supported(f"plan {i} ({self.configs[i].name}) did not build: {e}") from e
        if self.candidate is None:
            self._set_candidate(i)

    def build_plans(self, policy: Any = None) -> None:
        self._require_configs()
        build_all = policy is not None and getattr(policy, "name", str(policy)) == "ALL"
        for i in range(len(self.configs)):
            if i in self._barred or i in self.failures:
                continue
            try:
                self.build_plan_at_index(i)
            except cudnnGraphNotSupportedError:  # recorded in self.failures; the summary below says why
                continue
            if not build_all:
                break
        if not self.plans:
            why = "; ".join(f"{self.configs[i].name}: {self.failures.get(i) or self._barred.get(i)}"
                            for i in range(len(self.configs)))
            raise _not_supported(f"No execution plans support the graph: {why}")
        self._set_candidate(min(self.plans))

    def get_execution_plan_count(self) -> int:
        return len(self.configs)

    def get_plan_name_at_index(self, index: int) -> str:
        return self.configs[self._index(index)].name

    def _plan(self, index: int | None = None) -> ExecutionPlan:
        if index is None:
            if self.candidate is None:
                raise RuntimeError("no plan is built: call build_plans() first")
            return self.plans[self.candidate]
        i = self._index(index)
        if i not in self.plans:
            raise RuntimeError(f"Plan index {i} did not build" + (f": {self.failures[i]}" if i in self.failures else
                                                                   " (call build_plan_at_index first)"))
        return self.plans[i]

    def get_workspace_size(self) -> int:
        return self._plan().workspace

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        return self._plan(index).workspace

    def get_behavior_notes(self) -> list:
        return _classic_behavior(self._plan().config.behavior_notes)

    def get_behavior_notes_for_plan_at_index(self, index: int) -> list:
        return _classic_behavior(self.configs[self._index(index)].behavior_notes)

    def get_numerical_notes_for_plan_at_index(self, index: int) -> list:
        return list(self.configs[self._index(index)].numerical_notes)

    # ------------------------------------------------------------------------------------------- execute
    def fast_path(self):
        """``execute`` for the current default plan with every indirection bound: what ``pygraph.execute``
        calls once the plan is built (it drops it when the default plan changes)."""
        return self.executor.fast(self._plan())

    def _set_candidate(self, index: int) -> None:
        if index != self.candidate:
            self.candidate = index
            drop = getattr(self.ir, "drop_fast_path", None)  # the graph's bound execute targets the old plan
            if drop is not None:
                drop()

    def execute(self, variant_pack: dict, workspace: Any = None, handle: Any = None, **overrides: Any) -> None:
        _no_overrides("execute", *overrides.values())
        self.executor.execute(self._plan(), variant_pack, workspace, handle)

    def execute_plan_at_index(self, variant_pack: dict, workspace: Any, index: int, handle: Any = None,
                              **overrides: Any) -> None:
        _no_overrides("execute_plan_at_index", *overrides.values())
        self.executor.execute(self._plan(index), variant_pack, workspace, handle)


class Knob:
    """An engine knob's range, as the classic ``cudnn.knob`` exposes it."""

    __slots__ = ("type", "max_value", "min_value", "stride")

    def __init__(self, type, max_value: int, min_value: int, stride: int):
        self.type, self.max_value, self.min_value, self.stride = type, max_value, min_value, stride

    def __repr__(self) -> str:
        return f"knob(type={self.type}, min={self.min_value}, max={self.max_value}, stride={self.stride})"


def _note_name(note: Any) -> str:
    """Backend C name of a classic numerical/behavior note (or of a backend member / C name)."""
    from .. import enums

    if isinstance(note, str):
        return note
    if isinstance(note, enums.numerical_note):
        return enums.to_backend_numerical_note(note)
    if isinstance(note, enums.behavior_note):
        return enums.to_backend_behavior_note(note)
    return note.name


def _knob_value(knob: Any) -> int:
    """Backend knob type value of a classic knob_type, a backend member or an int."""
    from .. import enums
    from ..backend.enums import enum_class

    if isinstance(knob, enums.knob_type):
        return int(enum_class("cudnnBackendKnobType_t")[enums.to_backend_knob_type(knob)])
    return int(knob)


def _classic_behavior(notes: list) -> list:
    from ..enums import behavior_note_from_backend

    return [behavior_note_from_backend(n.name) for n in notes]


def _classic_knob(backend_member: Any) -> Any:
    from ..enums import knob_type_from_backend

    try:
        return knob_type_from_backend(backend_member.name)
    except (KeyError, ValueError):  # a knob the classic enum cannot name (SWAP_AB, TMA knobs): keep the backend member
        return backend_member
