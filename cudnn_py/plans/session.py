"""The planning session: everything on the cuDNN side of one graph, with an explicit phase.

    BUILT -> VALIDATED -> OPERATION_GRAPH -> ENGINE_CONFIGS -> PLANS -> EXECUTABLE

* VALIDATED: the user's graph passed IR inference, the IR passes made the program that is lowered, no erratum of the
  running cuDNN matches it (``errata.py``), and every tensor / operation descriptor and the operation graph
  finalized - without a handle when the graph has none, so on cuDNN >= 9.8 this needs no GPU (deviceless validation).
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
descriptors, its plan list (``plan_list.py``: the engine configs, filters, plans and index queries, which the
session's methods of the same names reach once the phase allows) and its executor; planning's caches (query, plan
and disk cache) are reached through ``cached_planning.py``.

This module holds the session's state and its phase transitions; the work they call is in its bases, one job each:
the program, its lowering and executor (``session_program.py``), the device it plans on (``session_device.py``),
executing and CUDA graphs (``session_execute.py``).

Differences from the C++ frontend, on purpose:
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

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from .. import enums
from .. import frontend_log as _fe
from ..backend import Descriptor, driver_standin, versions
from ..backend.handle import context_of, default_handle
from ..cuda import context as cuda_context
from ..errors import (
    CudaUnavailableError,
    CudnnError,
    NotImplementedOptionError,
    PhaseError,
    UsageError,
    cudnnGraphNotSupportedError,
)
from ..ir.graph import weak_callable
from ..ir.program import Program
from ..lowering import LoweredGraph, finalize_operation_graph
from . import cached_planning, device_gates, disk_planning, errata, heuristics, serialize
from .engine_config import EngineConfig
from .execute import Executor
from .phase import Phase, SessionOptions, need
from .plan import ExecutionPlan
from .plan_list import OnPlanList, PlanList, classic_behavior, gated, knob, knob_value
from .session_device import DeviceSteps
from .session_execute import ExecuteSteps
from .session_program import ProgramSteps, _without_unified_attention, versions_available

__all__ = ["Phase", "PlanningSession", "SessionOptions", "knob", "versions_available"]

_log = logging.getLogger(__name__)


def _ms_since(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


class PlanningSession(ProgramSteps, DeviceSteps, ExecuteSteps):
    def __init__(self, graph: Any, options: SessionOptions, on_default_plan_change: Callable[[], None] = lambda: None):
        # the user's (validated) IR graph, referred to weakly: the graph owns its session, and a reference back would
        # make a cycle that keeps every descriptor of a dropped graph until the cyclic collector runs
        self._graph_ref = weakref.ref(graph)
        self.options = options
        self.phase = Phase.BUILT
        self.program: Program | None = None
        self.lowered: LoweredGraph | None = None
        self.executor: Executor | None = None
        self.plan_list = PlanList(self)  # engine configs, filters, plans, the default plan (plan_list.py)
        self.deferred_checks: list[str] = []  # what validate() could not check (set by validate)
        self.engine_errata: list[tuple[errata.Erratum, str]] = []  # engine-level errata the program matches
        self.bound_tensors: list[Any] = []  # the tensor behind every variant-pack slot (the executor checks these)
        self.graph_packs: dict[int, Any] = {}  # cudaGraph_t -> the variant pack it was recorded / updated with
        self.device: int | None = None  # the planning handle's device (None: not known yet)
        self.context: int | None = None  # that handle's CUDA context (None: not known)
        self.lowering = "as built"  # or how the program was lowered again (AUTO's composite attention fallback)
        # planning's caches (cached_planning.py): the queries the query cache answered, as (cache key, modes), and
        # the operation graph's fingerprint, computed once: (operation graph, its fingerprint)
        self.cached_queries: list[tuple[Any, list[str]]] = []
        self.query_modes: list[str] = []  # the modes of the last heuristics query (autotune's records key on them)
        self._fingerprint: tuple[Descriptor, tuple | None] | None = None
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

    # the plan list's state, under the names the session has always given it (plan_list.py says what each is)
    configs: OnPlanList[list[EngineConfig]] = OnPlanList()  # every config: the deferred modes are queried first
    _configs: OnPlanList[list[EngineConfig]] = OnPlanList()  # the configs so far
    _deferred: OnPlanList[heuristics.HeuristicsResult | None] = OnPlanList()
    plans: OnPlanList[dict[int, ExecutionPlan]] = OnPlanList()
    failures: OnPlanList[dict[int, str]] = OnPlanList()
    barred: OnPlanList[dict[int, str]] = OnPlanList()
    candidate: OnPlanList[int | None] = OnPlanList()
    heuristics_report: OnPlanList[list[tuple]] = OnPlanList()
    heuristics_ranked: OnPlanList[list[tuple[str, list[Any]]]] = OnPlanList()

    # ---- phase bookkeeping -------------------------------------------------------------------------------------------
    def _need(self, phase: Phase, method: str) -> None:
        if self.phase < phase:
            need(self.phase, phase, method)

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
        _fe.validating(self.graph, versions.runtime_version())
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

    # ---- ENGINE_CONFIGS ---------------------------------------------------------------------------------------------
    def create_execution_plans(self, modes: list[Any]) -> None:
        """Query heuristics for each mode (classic heur_mode members), in order; configs are deduplicated."""
        self._need(Phase.OPERATION_GRAPH, "create_execution_plans")
        assert self.lowered is not None
        names = [enums.to_backend_heur_mode(m) for m in modes]
        plans = self.plan_list
        plans.resolve_deferred()  # an earlier call's modes come first in the plan index space
        t0 = time.perf_counter()
        with self.on_device():
            res = cached_planning.query(self, names, defer=True)
            if not res.configs and not plans._configs and self._auto_unified_attention():
                plans.heuristics_report.extend(res.per_mode)
                self._fall_back_to_composite_attention("; ".join(f"{m}: {r}" for m, r in res.per_mode))
                res = cached_planning.query(self, names, defer=True)
        if _log.isEnabledFor(logging.INFO):
            _log.info("graph %r: heuristics in %.2f ms: %s", self.graph.name, _ms_since(t0),
                      "; ".join(f"{m}: {r}" for m, r in res.per_mode))
            for c in res.configs:
                _log.debug("graph %r: engine config %d %s (from %s)", self.graph.name,
                           len(plans._configs) + res.configs.index(c), c.name, c.source)
            if res.pending:
                _log.info("graph %r: heuristics mode(s) %s deferred until needed", self.graph.name,
                          ", ".join(res.pending))
        plans.take(res)
        if not plans._configs:
            from ..backend.api import get_last_error_string

            report = "; ".join(f"{m}: {r}" for m, r in res.per_mode)
            if self.options.device_properties is not None:
                report += f" (deviceless, for {self.options.device_properties!r})"
            elif self.lowered.handle is None:
                report += " (no GPU/handle: cuDNN heuristics need a device to rank engines)"
                if driver_standin.loaded():
                    report += f"; {driver_standin.NO_GPU}"
            raise cudnnGraphNotSupportedError(f"No valid engine configs for graph {self.graph.name!r}: {report}. "
                                              f"{get_last_error_string()}")
        self._advance(Phase.ENGINE_CONFIGS)

    # ---- the plan list's filters and queries (plan_list.py), once engine configs exist -------------------------------
    deselect_engines = gated(Phase.ENGINE_CONFIGS, PlanList.deselect_engines)
    select_numeric_notes = gated(Phase.ENGINE_CONFIGS, PlanList.select_numeric_notes)
    deselect_numeric_notes = gated(Phase.ENGINE_CONFIGS, PlanList.deselect_numeric_notes)
    select_behavior_notes = gated(Phase.ENGINE_CONFIGS, PlanList.select_behavior_notes)
    deselect_behavior_notes = gated(Phase.ENGINE_CONFIGS, PlanList.deselect_behavior_notes)
    deselect_workspace_greater_than = gated(Phase.ENGINE_CONFIGS, PlanList.deselect_workspace_greater_than)
    check_support = gated(Phase.ENGINE_CONFIGS, PlanList.check_support)
    get_plan_name_at_index = gated(Phase.ENGINE_CONFIGS, PlanList.get_plan_name_at_index)
    get_engine_and_knobs_at_index = gated(Phase.ENGINE_CONFIGS, PlanList.get_engine_and_knobs_at_index)
    get_behavior_notes_for_plan_at_index = gated(Phase.ENGINE_CONFIGS, PlanList.get_behavior_notes_for_plan_at_index)
    get_numerical_notes_for_plan_at_index = gated(Phase.ENGINE_CONFIGS, PlanList.get_numerical_notes_for_plan_at_index)

    get_execution_plan_count = gated(Phase.BUILT, PlanList.get_execution_plan_count)  # (no phase needed)
    plan_entries = gated(Phase.BUILT, PlanList.plan_entries)

    def create_execution_plan(self, engine_id: int, knobs: dict | None = None) -> None:
        """Add a config for an explicit engine id and knob choices (no heuristics)."""
        count = self.get_engine_count()
        if not 0 <= int(engine_id) < count:
            raise UsageError(f"Invalid engine id {engine_id}: this graph has engines 0..{count - 1}")
        backend_knobs = {knob_value(k): int(v) for k, v in (knobs or {}).items()}
        with self.on_device():
            self.configs.append(EngineConfig.explicit(self.operation_graph, int(engine_id), backend_knobs,
                                                      **self._for_device()))
        self.plan_list.bar_erratic_engines()
        self._advance(Phase.ENGINE_CONFIGS)

    # ---- PLANS ------------------------------------------------------------------------------------------------------
    def build_plan_at_index(self, index: int) -> None:
        self._need(Phase.ENGINE_CONFIGS, "build_plan_at_index")
        plans = self.plan_list
        i = plans.index(index)
        if i in plans.plans:
            return
        name = plans._configs[i].name
        if i in plans.barred:
            raise cudnnGraphNotSupportedError(f"plan {i} ({name}) is filtered out: {plans.barred[i]}")
        t0 = time.perf_counter()
        try:
            with self.on_device():  # kernels are compiled and loaded into the current context
                plan = cached_planning.build_plan(self, i)  # (from the plan cache's or the disk's JSON, or built)
            if self.executor is not None:  # the program's workspace-resident intermediates come first
                plan.workspace += self.executor.scratch_bytes
            plans.plans[i] = plan
        except CudnnError as e:
            plans.failures[i] = str(e)
            _fe.plan_failed(i, e)
            _log.info("graph %r: plan %d (%s) did not build (%.2f ms): %s", self.graph.name, i, name, _ms_since(t0), e)
            raise cudnnGraphNotSupportedError(f"plan {i} ({name}) did not build: {e}") from e
        _log.info("graph %r: plan %d (%s) built in %.2f ms, workspace %d bytes", self.graph.name, i, name,
                  _ms_since(t0), plan.workspace)
        _fe.plan_built(i, plan)
        self._advance(Phase.PLANS)
        if plans.candidate is None:
            self._set_candidate(i)

    def build_plans(self, build_all: bool = False) -> None:
        """Build the best-ranked plan that builds (``build_all``: every plan), and make the best one the default."""
        self._need(Phase.ENGINE_CONFIGS, "build_plans")
        plans = self.plan_list
        if build_all:
            plans.resolve_deferred()
        start = 0
        while not self._build_first(start, build_all) and plans._deferred is not None:
            start = len(plans._configs)
            plans.resolve_deferred()  # none of the configs so far built: the deferred modes' configs are next
        if not plans.plans and cached_planning.query_afresh(self):
            return self.build_plans(build_all)
        if not plans.plans:
            why = "; ".join(f"{c.name}: {plans.failures.get(i) or plans.barred.get(i)}"
                            for i, c in enumerate(plans._configs))
            raise cudnnGraphNotSupportedError(f"No execution plans support the graph: {why}")
        self._set_candidate(min(plans.plans))
        if self.disk.store_after_build:
            cached_planning.disk_store(self)

    def _build_first(self, start: int, build_all: bool) -> bool:
        """Build the plans of configs ``start``.. in order, stopping at the first that builds unless ``build_all``;
        True if one did."""
        built, plans = False, self.plan_list
        for i in range(start, len(plans._configs)):
            if i in plans.barred or i in plans.failures:
                continue
            try:
                self.build_plan_at_index(i)
            except cudnnGraphNotSupportedError:  # recorded in self.failures; the summary says why
                continue
            built = True
            if not build_all:
                break
        return built

    def select_default(self, index: int) -> None:
        """Make the built plan ``index`` the default (a measurement's winner: ``facade/autotune.py``)."""
        self.plan_list.built(index)
        self._set_candidate(self.plan_list.index(index))

    def _set_candidate(self, index: int) -> None:
        plans = self.plan_list
        if index != plans.candidate:
            _log.info("graph %r: default plan is %d (%s)", self.graph.name, index, plans._configs[index].name)
            plans.candidate = index
            _fe.write(f"INFO: Candidate set as {index}")
            on_change = self._on_default_plan_change()
            if on_change is not None:  # (the graph may be gone; its session lives on in the caller's hands)
                on_change()  # a bound execute targets the old plan
        self._advance(Phase.EXECUTABLE)

    def plan(self, index: int | None = None) -> ExecutionPlan:
        """The default plan, or the built plan ``index``."""
        plans = self.plan_list
        if index is None:
            self._need(Phase.EXECUTABLE, "execute")
            assert plans.candidate is not None
            return plans.plans[plans.candidate]
        self._need(Phase.ENGINE_CONFIGS, "execute_plan_at_index")
        return plans.built(index)

    def get_workspace_size(self) -> int:
        return self.plan().workspace

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        return self.plan(index).workspace

    def get_behavior_notes(self) -> list:
        return classic_behavior(self.plan().config.behavior_notes)

    # ---- serialization (plans/serialize.py; execute and CUDA graphs: session_execute.py) -----------------------------
    def serialize(self, graph_doc: dict) -> bytes:
        """The default plan and its variant-pack slots as a blob that :meth:`deserialized` loads."""
        if self.program is not None and self.program.view_aliases():
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


