"""``pygraph``: the classic ``cudnn.pygraph`` class, a thin facade over the IR graph and the planning session.

* The IR (``cudnn_py.ir.Graph``) holds tensors, nodes and uids and generates the op builders from the op specs.
* Routing (``cudnn_py.engines``): ``create_execution_plans()`` asks the Router for one ranked list mixing python
  engines and at most one cuDNN entry, then freezes the graph. Two plan index spaces are kept apart on purpose:
  the routed plans (``plans``, ``select_plan``) and the cuDNN plans behind the cuDNN entry (the classic
  ``get_execution_plan_count`` / ``*_at_index`` API).
* The cuDNN side (``plans.session.PlanningSession``) is made when first needed; an IR change drops it (no freeze yet).

This module holds the graph's state and the steps that move it between phases (validate, the staged build,
planning) with the methods the session answers (``facade/mirror.py``'s rows). The rest of the class is in its
bases, one job each: the engines and routed plans (``facade/routing.py``), execution (``facade/executing.py``),
serialization (``facade/serialization.py``).

Unknown constructor keywords raise TypeError, classic ones not implemented yet ``NotImplementedOptionError``.
``build_plans(ALL)`` with ``OPENSOURCE`` among the modes measures our engines against cuDNN's (autotune.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..engines.base import BACKEND_PLAN, BaseEngine, CompiledPlan, ExecutionContext, PlanConfig
from ..engines.router import default_router, route
from ..enums import build_plan_policy, heur_mode
from ..errors import InvalidTypeError, InvalidValueError, PhaseError, UsageError
from ..ir import Graph
from ..plans.phase import Phase, SessionOptions
from . import autotune
from .executing import Executing
from .executing import _classic_execute as _classic_execute  # (re-exported: tests reach it here)
from .gc_pause import without_gc
from .mirror import OVERRIDES, mirror
from .options import (
    DEFAULT_HEURISTICS,
    check_planning_targets,
    heuristic_list,
    no_overrides,  # noqa: F401  (read by the mirrored methods' source: facade/mirror.py)
    refuse_unimplemented,
)
from .routing import Routing
from .serial import one_at_a_time
from .serialization import Serialization

if TYPE_CHECKING:  # the builders' typed surface, generated from the op specs (python bindings/apigen.py)
    from ..plans.session import PlanningSession
    from ._builder_api import BuilderMethods
else:
    BuilderMethods = object


class pygraph(Graph, Routing, Executing, Serialization, BuilderMethods):
    """A cuDNN graph, built op by op and run: the classic ``cudnn.pygraph``.

    Create tensors (``tensor``, ``tensor_like``, ``tensor_scalar``) and add ops with the builder methods (one per
    op: ``matmul``, ``add``, ``sdpa``, ``conv_fprop``, ..., each returning its output tensor(s); each builder's
    docstring has its call forms and arguments, e.g. ``help(cudnn.pygraph.matmul)``). Then the phases, each after
    the one before: ``validate()`` (inference and the deviceless cuDNN checks), ``build_operation_graph()``,
    ``create_execution_plans([heur_mode.A])``, ``check_support()``, ``build_plans()`` (or all of them:
    ``build([heur_mode.A])``), and ``execute({tensor: array, ...}, workspace)``.
    A call made before the phase it needs raises ``PhaseError`` naming the call to make.

    Example::

        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
        A = g.tensor(dim=[1, 64, 32], stride=[2048, 32, 1], data_type=cudnn.data_type.HALF)
        B = g.tensor(dim=[1, 32, 16], stride=[512, 16, 1], data_type=cudnn.data_type.HALF)
        C = g.matmul(A, B).set_output(True)
        g.build([cudnn.heur_mode.A])
        g.execute({A: a, B: b, C: c}, workspace)
    """

    def __init__(
        self,
        name: str = "test_graph",
        io_data_type: Any = None,
        intermediate_data_type: Any = None,
        compute_data_type: Any = None,
        handle: Any = None,
        sm_count: Any = None,
        sm_version: Any = None,
        kernel_cache: Any = None,
        device_property: Any = None,
        is_dynamic_shape_enabled: bool = False,
        is_override_shape_enabled: bool = False,
        cuda_graph_retention: Any = None,
        *,
        is_cuda_graph_replay_expected: bool = False,
        backends: Sequence[BaseEngine] | None = None,
        router: Any = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise InvalidTypeError(f"pygraph() got unexpected keyword arguments {sorted(kwargs)}")
        refuse_unimplemented(cuda_graph_retention=cuda_graph_retention,
                              is_cuda_graph_replay_expected=is_cuda_graph_replay_expected)
        if sm_count is not None and (isinstance(sm_count, bool) or not isinstance(sm_count, int) or sm_count < 0):
            raise InvalidValueError(f"pygraph(sm_count=...) must be a non-negative int, got {sm_count!r}")
        check_planning_targets(handle, sm_version, kernel_cache, device_property)
        super().__init__(name, io_data_type, intermediate_data_type, compute_data_type)
        self._handle = handle
        self._sm_count = sm_count
        self._sm_version = sm_version
        self._kernel_cache = kernel_cache
        self._device_property = device_property
        # the classic module turns dynamic shapes on for a kernel cache (the frontend refuses one without them)
        self._is_dynamic_shape_enabled = bool(is_dynamic_shape_enabled) or kernel_cache is not None
        # shapes given per execute: the operation graph says so (cuDNN >= 9.21, refused at validate() before);
        # execute-time override_uids / _shapes / _strides themselves are not implemented yet (refused when given)
        self._is_override_shape_enabled = bool(is_override_shape_enabled)
        # routing
        self._engines: list[BaseEngine] = []
        self._router = router
        self._plans: list[PlanConfig] = []  # empty until planned (create_execution_plans)
        self._plan_index = 0
        self._heuristics: list[Any] = list(DEFAULT_HEURISTICS)
        self._compiled: dict[int, CompiledPlan] = {}  # routed plan index -> built python plan
        self._engine_report: list[dict[str, Any]] = []  # cudnn_py's engines at planning: accepted or why not
        # the cuDNN side
        self._session: PlanningSession | None = None
        self.on_change(self._drop_session)
        for engine in backends or ():
            self.register_backend(engine)

    # ---- graph-level attributes --------------------------------------------------------------------------------------
    handle = property(lambda self: self._handle)
    sm_count = property(lambda self: self._sm_count)
    sm_version = property(lambda self: self._sm_version)
    kernel_cache = property(lambda self: self._kernel_cache)
    device_property = property(lambda self: self._device_property)
    is_dynamic_shape_enabled = property(lambda self: self._is_dynamic_shape_enabled)
    is_built = property(lambda self: self._is_built)

    # ---- where the graph is: derived from the routed plans and the session's phase, never kept beside them ---------
    @property
    def _planning_done(self) -> bool:
        """Planned: create_execution_plans() (or create_execution_plan(), deserialize()) made the routed plans."""
        return bool(self._plans)

    @property
    def _is_built(self) -> bool:
        """The selected plan is built: a python engine's compiled, or the cuDNN session EXECUTABLE."""
        if not self._plans:
            return False
        if self.selected_engine is not None:
            return self._plan_index in self._compiled
        return self._session is not None and self._session.phase >= Phase.EXECUTABLE

    def _is_dynamic(self) -> bool:
        return self._is_dynamic_shape_enabled

    def get_cuda_graph_retention(self) -> Any:
        return None  # cuda_graph_retention is refused at construction until CUDA graphs are implemented

    # ---- the cuDNN session -------------------------------------------------------------------------------------------
    def _drop_session(self) -> None:
        self._session = None
        self.drop_fast_path()

    @property
    def _fast_execute(self) -> Any:
        """The default cuDNN plan's bound execute once execute has run it (installed as this graph's ``execute``),
        else None."""
        return self.__dict__.get("execute")

    def drop_fast_path(self) -> None:
        """Forget the bound cuDNN execute (the selected or default plan changed); the next execute rebinds."""
        self.__dict__.pop("execute", None)  # the method again (see _use_fast_execute)

    def _use_fast_execute(self, fast: Any) -> None:
        """Make the default plan's bound execute (``Executor.fast``, which takes the classic keywords too) this
        graph's ``execute``: an instance attribute shadows the method, so a call enters it directly, one Python
        frame instead of two (the per-call host time is a headline figure). A call with ``override_*`` or
        ``tensor_uids`` comes back to the method through ``classic``, which holds the graph weakly (the graph
        holds the bound execute: no reference cycle)."""
        self.execute = fast  # type: ignore[method-assign]

    @property
    def session(self) -> PlanningSession:
        """The planning session of the cuDNN path (made, and validated, on first use)."""
        session = self._session
        if session is None:
            with self._lock:  # made once, also where threads share the graph
                if self._session is None:
                    if not self._is_validated:
                        self.validate_ir()
                    from ..plans.session import (
                        PlanningSession,  # the cuDNN side, imported by the first graph that plans
                    )

                    self._session = PlanningSession(self, self._session_options(self._handle), self.drop_fast_path)
                session = self._session
        return session

    def _session_options(self, handle: Any) -> SessionOptions:
        return SessionOptions(handle, self._sm_count, self._is_dynamic_shape_enabled, self._is_override_shape_enabled,
                              self._kernel_cache, self._device_property, self._sm_version)

    def _at(self, phase: Phase) -> PlanningSession:
        """The session advanced to ``phase`` where that needs no decision of the caller (validation, the
        operation graph, the heuristics query with the modes given at create_execution_plans)."""
        s = self.session
        if phase >= Phase.VALIDATED:
            s.validate()
        if phase >= Phase.OPERATION_GRAPH:
            s.build_operation_graph()
        if phase >= Phase.ENGINE_CONFIGS and s.phase < Phase.ENGINE_CONFIGS:
            if not self._planning_done:
                raise PhaseError("call create_execution_plans() first")
            s.create_execution_plans(list(self._heuristics))
        return s

    # ---- validation and the classic staged build --------------------------------------------------------------------
    @one_at_a_time
    @without_gc
    def validate(self) -> None:
        """IR inference and checks; then, with no python engines registered, the passes and cuDNN's own tensor /
        operation / operation-graph validation (which works without a GPU on cuDNN >= 9.8)."""
        self.validate_ir()
        if not self._engines:
            self.session.validate()

    @one_at_a_time
    @without_gc
    def build_operation_graph(self) -> None:
        """Validate; without python engines also finalize the cuDNN operation graph (with a handle), so the
        classic queries (get_engine_count, get_knobs_for_engine) work before create_execution_plans()."""
        if not self._is_validated:
            self.validate()
        if not self._engines:
            self._at(Phase.OPERATION_GRAPH)

    @one_at_a_time
    @without_gc
    def create_execution_plans(self, heuristics: Any = None) -> None:
        """Route once: python engines that accept the graph and the cuDNN entry (heuristic modes `heuristics`,
        default [A, FALLBACK]) form the ranked plan list; the graph freezes."""
        if self._planning_done:
            raise UsageError("create_execution_plans() already ran on this graph (planning is one-shot); "
                               "use select_plan() to switch plans or build a new graph")
        if not self._is_validated:
            self.validate()
        from ..engines import builtin  # cudnn_py's runtime-compiled engines and heur_mode.OPENSOURCE

        modes = heuristic_list(heuristics)
        placed = builtin.place(self, modes, taken={e.engine_id for e in self._engines})
        self._heuristics = placed.cudnn_modes
        self._engine_report = placed.report
        self._measure_all = heur_mode.OPENSOURCE in modes  # build_plans(ALL) measures ours only when they were asked
        plans = route(self._router or default_router, self, self._engines)
        self._check_routed(plans)
        plans = builtin.combine(plans, placed)
        self._engines.extend(placed.engines)  # (not register_backend: the cuDNN session stays)
        self._freeze()
        self._plans, self._plan_index = plans, 0
        if self.selected_engine is None:
            self._at(Phase.ENGINE_CONFIGS)

    @one_at_a_time
    def create_execution_plan(self, engine_id: int, knobs: Any = None) -> None:
        """Classic: append one cuDNN plan for (engine_id, {knob_type: value}); no heuristics query."""
        if not self._planning_done:
            if not self._is_validated:
                self.validate()
            self._freeze()
            self._plans, self._plan_index = [BACKEND_PLAN], 0
        self._at(Phase.OPERATION_GRAPH).create_execution_plan(engine_id, dict(knobs or {}))

    @one_at_a_time
    @without_gc
    def build_plans(self, *args: Any, ctx: ExecutionContext | None = None, **kwargs: Any) -> None:
        """Build the selected plan: a python plan compiles here (once); the cuDNN path takes the classic
        build_plan_policy (HEURISTICS_CHOICE: the best plan that builds; ALL: every plan, measured: autotune.py)."""
        self._require_planned("build_plans")
        policy = args[0] if args else kwargs.pop("policy", build_plan_policy.HEURISTICS_CHOICE)
        if kwargs or len(args) > 1:
            raise InvalidTypeError(f"build_plans() takes one policy argument, got {args}, {kwargs}")
        if not isinstance(policy, build_plan_policy):
            raise InvalidTypeError(f"build_plans() needs a build_plan_policy member, got {policy!r}")
        if policy is build_plan_policy.ALL and getattr(self, "_measure_all", False) and autotune.build_all(self, ctx):
            return
        if self.selected_engine is not None:
            self._compile(ctx)
        else:
            self._at(Phase.ENGINE_CONFIGS).build_plans(build_all=policy is build_plan_policy.ALL)

    @one_at_a_time
    def build(self, heuristics: Any = None, ctx: ExecutionContext | None = None) -> None:
        """build(modes) runs the whole pipeline; build() with no modes is the classic overload that only
        validates and builds the operation graph."""
        self.build_operation_graph()
        if heuristics is None:
            return
        if not self._planning_done:
            self.create_execution_plans(heuristics)
        self.check_support()
        self.build_plans(ctx=ctx)

    @one_at_a_time
    def _compile(self, ctx: ExecutionContext | None) -> CompiledPlan:
        plan = self._compiled.get(self._plan_index)
        if plan is None:
            engine = self.selected_engine
            assert engine is not None
            plan = engine.build_plan(self, self._plans[self._plan_index], ctx or self._exec_context(None))
            self._compiled[self._plan_index] = plan
        return plan

    # ---- the classic methods the planning session answers under the same names: one row each (facade/mirror.py) --
    get_engine_count = mirror("graph", "() -> int")
    get_knobs_for_engine = mirror("graph", "(engine_id: int) -> list")
    get_execution_plan_count = mirror("count", "() -> int")
    check_support = mirror("planned", "() -> None", engine="engine.check_support(self)")
    build_plan_at_index = mirror("planned", "(index: int) -> None")
    get_plan_name_at_index = mirror("planned", "(index: int) -> str")
    get_engine_and_knobs_at_index = mirror("planned", "(index: int) -> Any")
    get_behavior_notes = mirror("planned", "() -> list", engine="list(self._compile(None).behavior_notes)")
    get_behavior_notes_for_plan_at_index = mirror("planned", "(index: int) -> list")
    get_workspace_size = mirror(
        "planned", "(handle: Any = None, override_uids: Any = None, override_shapes: Any = None, "
        "override_strides: Any = None) -> int", forward="", checks=(OVERRIDES,),
        engine="self._compile(None).get_workspace_size()")
    get_workspace_size_plan_at_index = mirror(
        "planned", "(index: int, handle: Any = None, override_uids: Any = None, override_shapes: Any = None, "
        "override_strides: Any = None) -> int", forward="index", checks=(OVERRIDES,))
    # the classic plan filters (cuDNN plans; after create_execution_plans, as classic requires)
    deselect_engines = mirror("planned", "(engine_names: list[str]) -> None", forward="list(engine_names)")
    select_numeric_notes = mirror("planned", "(notes: list) -> None", forward="list(notes)")
    deselect_numeric_notes = mirror("planned", "(notes: list) -> None", forward="list(notes)")
    select_behavior_notes = mirror("planned", "(notes: list) -> None", forward="list(notes)")
    deselect_behavior_notes = mirror("planned", "(notes: list) -> None", forward="list(notes)")
    deselect_workspace_greater_than = mirror("planned", "(workspace_limit: int) -> None",
                                             forward="int(workspace_limit)")
    # CUDA graphs (plans/cuda_graph.py)
    populate_cuda_graph = mirror(
        "cuda_graph", "(handle: Any, variant_pack: Any, workspace: Any, cuda_graph: Any) -> None",
        forward="int(handle if handle is not None else self._graph_handle()), variant_pack, workspace, cuda_graph",
        doc="Record the default cuDNN plan into the empty ``cudaGraph_t`` ``cuda_graph`` (``plans/cuda_graph.py``).")
    update_cuda_graph = mirror(
        "cuda_graph", "(handle: Any, variant_pack: Any, workspace: Any, cuda_graph: Any) -> None",
        forward="int(handle if handle is not None else self._graph_handle()), variant_pack, workspace, cuda_graph",
        doc="Point a graph made by populate_cuda_graph() at other buffers (re-instantiate it to launch the update).")

    def backend_plan_entries(self) -> list[dict[str, Any]]:
        """The cuDNN plans behind the cuDNN entry, one dict each (see PlanningSession.plan_entries); [] before
        create_execution_plans()."""
        if self._session is None or self._session.phase < Phase.ENGINE_CONFIGS:
            return []
        return self._session.plan_entries()

    # ---- debugging -------------------------------------------------------------------------------------------------
    def explain(self, format: str = "text") -> str:
        """What cudnn_py did with this graph (``facade/explain.py``): the IR as built and as lowered, every backend
        descriptor, the heuristics and engine configs with their notes, plans and failures, the errata.
        ``format``: "text", "json" or "dot" (Graphviz). A graph not yet validated is validated first, and the report
        says so."""
        from . import explain

        if format not in ("text", "json", "dot"):  # before the report: a bad format changes nothing
            raise InvalidValueError(f"explain(format=...) takes 'text', 'json' or 'dot', not {format!r}")
        return explain.formatted(explain.report(self), format)

    def render_dot(self, path: str) -> str:
        """Write the Graphviz image of the IR (as built and as lowered) to ``path``; needs Graphviz's ``dot``."""
        from . import explain

        return explain.render_dot(explain.report(self), path)

    # ---- inspection --------------------------------------------------------------------------------------------------
    def inspect(self) -> dict[str, Any]:
        doc = super().inspect()
        doc["plans"] = [{"engine_id": p.engine_id, "name": p.name} for p in self._plans]
        doc["selected_plan"] = self._plan_index if self._planning_done else None
        return doc

