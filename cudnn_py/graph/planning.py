"""Planning and execution for `pygraph`: routing, the classic staged build, plan queries and filters, execute.

Two plan index spaces, kept apart on purpose:
  * the routed plans (`graph.plans`, `select_plan`): python engines plus at most one cuDNN delegating entry;
    stable indices, chosen by the Router at create_execution_plans();
  * the cuDNN plans behind the delegating entry (`get_execution_plan_count`, `*_at_index`): the classic API's
    index space, owned by `cudnn_py.plans.backend_graph.BackendGraph`.
The cuDNN object is created lazily; until the graph freezes, any IR change drops it (see pygraph._invalidate).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional

from ..enums import build_plan_policy, heur_mode
from ..engines.base import BACKEND_PLAN, BaseEngine, CompiledPlan, ExecutionContext, PlanConfig
from ..engines.engine_ids import is_backend_sentinel, is_python_engine
from ..engines.router import default_router, route
from .errors import cudnnGraphNotSupportedError
from .tensor import Tensor

if TYPE_CHECKING:
    from .pygraph import pygraph

DEFAULT_HEURISTICS = (heur_mode.A, heur_mode.FALLBACK)


class PlanningMixin:
    """The plan / build / execute half of pygraph. It uses the state pygraph.__init__ sets up: _engines,
    _router, _plans, _planning_done, _plan_index, _heuristics, _compiled, _is_built, _deserialized and the
    cuDNN-path flags of _drop_backend()."""

    # ---- engines and routing --------------------------------------------------------------------------------------------
    def register_backend(self, engine: BaseEngine) -> "pygraph":
        """Add a python engine as a candidate; it joins the plan list at create_execution_plans() if it
        accepts the graph."""
        eid = getattr(engine, "engine_id", None)
        if not is_python_engine(eid):
            raise ValueError(f"engine {engine!r} must declare an int engine_id >= PYTHON_ENGINE_ID_BASE, got {eid!r}")
        if any(e.engine_id == eid for e in self._engines):
            raise ValueError(f"engine_id {eid} is already registered on this graph")
        if self._planning_done:
            raise RuntimeError("cannot register an engine after create_execution_plans(); build a new graph")
        self._engines.append(engine)
        self._drop_backend()  # a python-engine graph is lowered only if the cuDNN plan is used
        return self

    def set_router(self, router: Any) -> "pygraph":
        if self._planning_done:
            raise RuntimeError("cannot set a router after create_execution_plans(); build a new graph")
        self._router = router
        return self

    @property
    def backends(self) -> List[BaseEngine]:
        return list(self._engines)

    @property
    def plans(self) -> List[PlanConfig]:
        """The routed plan list (python engines and at most one cuDNN entry); select with select_plan()."""
        return list(self._plans)

    @property
    def selected_engine(self) -> Optional[BaseEngine]:
        """The python engine of the selected plan, or None for the cuDNN plan / before planning."""
        if not self._plans:
            return None
        eid = self._plans[self._plan_index].engine_id
        return next((e for e in self._engines if e.engine_id == eid), None)

    def select_plan(self, index: int) -> "pygraph":
        if not self._planning_done:
            raise RuntimeError("call create_execution_plans() before select_plan()")
        if not 0 <= index < len(self._plans):
            raise IndexError(f"plan index {index} is out of range for {len(self._plans)} routed plan(s)")
        self._plan_index = index
        self._is_built = index in self._compiled
        self.drop_fast_path()
        return self

    def drop_fast_path(self) -> None:
        """Forget the bound cuDNN execute (the selected or default plan changed); the next execute rebinds."""
        self._fast_execute = None

    def _check_routed(self, plans: List[PlanConfig]) -> None:
        """A custom router must not smuggle in unregistered engines or several cuDNN entries."""
        if not plans:
            raise cudnnGraphNotSupportedError("no engine supports the graph (the router returned no plans)")
        registered = {e.engine_id for e in self._engines}
        backend_entries = 0
        for p in plans:
            if not isinstance(p, PlanConfig):
                raise TypeError(f"router returned {p!r}; expected PlanConfig entries")
            if is_backend_sentinel(p.engine_id):
                backend_entries += 1
            elif not is_python_engine(p.engine_id) or p.engine_id not in registered:
                raise ValueError(f"router returned a plan for unknown engine_id {p.engine_id}")
        if backend_entries > 1:
            raise ValueError("router returned more than one cuDNN entry")

    def _has_backend_plan(self) -> bool:
        return any(p.is_backend for p in self._plans)

    # ---- the cuDNN path (delegation to plans.backend_graph.BackendGraph) -----------------------------------------------
    def _backend(self) -> Any:
        if self._backend_graph is None:
            # lazy: a graph routed to python engines never loads cuDNN. Through sys.modules (import_module), so a
            # test can stand a fake module in for it.
            module = importlib.import_module("..plans.backend_graph", __package__)
            self._backend_graph = module.BackendGraph(self)
        return self._backend_graph

    def _backend_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self._backend(), method, None)
        if fn is None:
            raise NotImplementedError(f"the cuDNN backend path does not implement {method}() yet")
        return fn(*args, **kwargs)

    def _validate_backend(self) -> None:
        if not self._backend_validated:
            self._backend().validate()
            self._backend_validated = True

    def _backend_op_graph(self) -> Any:
        if not self._is_validated:
            self.validate()
        self._validate_backend()
        if not self._bog_done:
            self._backend().build_operation_graph()
            self._bog_done = True
        return self._backend_graph

    def _backend_plans(self) -> Any:
        if self._planning_done and not self._has_backend_plan():
            raise RuntimeError("this graph was routed to python engines only, so it has no cuDNN plans; "
                               "use graph.plans / select_plan()")
        backend = self._backend_op_graph()
        if not self._backend_plans_created:
            backend.create_execution_plans(list(self._heuristics))
            self._backend_plans_created = True
        return backend

    # ---- classic staged build -----------------------------------------------------------------------------------------
    def build_operation_graph(self) -> None:
        """Validate; without python engines also lower to the cuDNN operation graph, so the classic queries
        (get_engine_count, deselect_*, ...) work before create_execution_plans()."""
        if not self._is_validated:
            self.validate()
        if not self._engines and not self._deserialized:
            self._backend_op_graph()

    def create_execution_plans(self, heuristics: Any = None) -> None:
        """Route once: python engines that accept the graph and the cuDNN entry (heuristic modes `heuristics`,
        default [A, FALLBACK]) form the ranked plan list; the graph freezes."""
        if self._planning_done:
            raise RuntimeError("create_execution_plans() already ran on this graph (planning is one-shot); "
                               "use select_plan() to switch plans or build a new graph")
        if not self._is_validated:
            self.validate()
        self._heuristics = _heuristic_list(heuristics)
        plans = route(self._router or default_router, self, self._engines)
        self._check_routed(plans)
        self._freeze()
        self._plans, self._planning_done, self._plan_index = plans, True, 0
        if self.selected_engine is None:
            self._backend_plans()

    def create_execution_plan(self, engine_id: int, knobs: Any = None) -> None:
        """Classic: append one cuDNN plan for (engine_id, {knob_type: value})."""
        if not self._planning_done:
            if not self._is_validated:
                self.validate()
            self._freeze()
            self._plans, self._planning_done, self._plan_index = [BACKEND_PLAN], True, 0
            self._backend_plans_created = True  # explicit plans replace the heuristics query
        self._backend_op_graph()
        self._backend_call("create_execution_plan", engine_id, dict(knobs or {}))

    def _require_planned(self, what: str) -> None:
        if not self._planning_done:
            raise RuntimeError(f"call create_execution_plans() before {what}()")

    def check_support(self) -> None:
        self._require_planned("check_support")
        engine = self.selected_engine
        if engine is not None:
            engine.check_support(self)
        else:
            self._backend_plans().check_support()

    def build_plans(self, *args: Any, ctx: Optional[ExecutionContext] = None, **kwargs: Any) -> None:
        """Build the selected plan: a python plan compiles here (once); the cuDNN path passes the classic
        build_plan_policy through."""
        self._require_planned("build_plans")
        policy = args[0] if args else kwargs.pop("policy", build_plan_policy.HEURISTICS_CHOICE)
        if self.selected_engine is not None:
            self._compile(ctx)
        else:
            self._backend_plans().build_plans(policy)
        self._is_built = True

    def build(self, heuristics: Any = None, ctx: Optional[ExecutionContext] = None) -> None:
        """build(modes) runs the whole pipeline; build() with no modes is the classic overload that only
        validates and builds the operation graph."""
        if not self._is_validated:
            self.validate()
        self.build_operation_graph()
        if heuristics is None:
            return
        if not self._planning_done:
            self.create_execution_plans(heuristics)
        self.check_support()
        self.build_plans(ctx=ctx)

    def _compile(self, ctx: Optional[ExecutionContext]) -> CompiledPlan:
        plan = self._compiled.get(self._plan_index)
        if plan is None:
            engine = self.selected_engine
            plan = engine.build_plan(self, self._plans[self._plan_index], ctx or self._exec_context(None))
            self._compiled[self._plan_index] = plan
        return plan

    # ---- classic plan queries (cuDNN plan index space) ----------------------------------------------------------------
    def get_execution_plan_count(self) -> int:
        if self._planning_done:
            return self._backend_plans().get_execution_plan_count()
        if self._backend_graph is not None:
            return self._backend_graph.get_execution_plan_count()
        return 0  # classic: nothing planned yet

    def build_plan_at_index(self, index: int) -> None:
        self._require_planned("build_plan_at_index")
        self._backend_plans().build_plan_at_index(index)
        if self.selected_engine is None:
            self._is_built = True

    def get_plan_name_at_index(self, index: int) -> str:
        self._require_planned("get_plan_name_at_index")
        return self._backend_plans().get_plan_name_at_index(index)

    def get_workspace_size(self, handle: Any = None, override_uids: Any = None, override_shapes: Any = None,
                           override_strides: Any = None) -> int:
        self._require_planned("get_workspace_size")
        if self.selected_engine is not None:
            return self._compile(None).get_workspace_size()
        _no_overrides("get_workspace_size", override_uids, override_shapes, override_strides)
        return self._backend_plans().get_workspace_size()

    def get_workspace_size_plan_at_index(self, index: int, handle: Any = None, override_uids: Any = None,
                                         override_shapes: Any = None, override_strides: Any = None) -> int:
        self._require_planned("get_workspace_size_plan_at_index")
        _no_overrides("get_workspace_size_plan_at_index", override_uids, override_shapes, override_strides)
        return self._backend_plans().get_workspace_size_plan_at_index(index)

    def get_behavior_notes(self, *args: Any, **kwargs: Any) -> list:
        self._require_planned("get_behavior_notes")
        if self.selected_engine is not None:
            return list(self._compile(None).behavior_notes)
        return self._backend_plans().get_behavior_notes()

    def get_behavior_notes_for_plan_at_index(self, index: int, *args: Any, **kwargs: Any) -> list:
        self._require_planned("get_behavior_notes_for_plan_at_index")
        return self._backend_plans().get_behavior_notes_for_plan_at_index(index)

    def get_engine_count(self) -> int:
        self._backend_op_graph()
        return self._backend_call("get_engine_count")

    def get_knobs_for_engine(self, engine_id: int) -> list:
        self._backend_op_graph()
        return self._backend_call("get_knobs_for_engine", engine_id)

    def get_engine_and_knobs_at_index(self, index: int) -> Any:
        self._require_planned("get_engine_and_knobs_at_index")
        self._backend_plans()
        return self._backend_call("get_engine_and_knobs_at_index", index)

    def backend_plan_entries(self) -> Any:
        return self._backend_call("backend_plan_entries")

    def get_cuda_graph_retention(self) -> Any:
        return self._cuda_graph_retention

    # ---- classic plan filters (cuDNN plans; call after create_execution_plans, as classic requires) -----------------
    def deselect_engines(self, engine_names: List[str]) -> None:
        self._backend_call("deselect_engines", list(engine_names))

    def select_numeric_notes(self, notes: list) -> None:
        self._backend_call("select_numeric_notes", list(notes))

    def deselect_numeric_notes(self, notes: list) -> None:
        self._backend_call("deselect_numeric_notes", list(notes))

    def select_behavior_notes(self, notes: list) -> None:
        self._backend_call("select_behavior_notes", list(notes))

    def deselect_behavior_notes(self, notes: list) -> None:
        self._backend_call("deselect_behavior_notes", list(notes))

    def deselect_workspace_greater_than(self, workspace_limit: int) -> None:
        self._backend_call("deselect_workspace_greater_than", int(workspace_limit))

    # ---- execution ----------------------------------------------------------------------------------------------------
    def execute(self, tensor_dict: Any, workspace: Any = None, handle: Any = None, override_uids: Any = None,
                override_shapes: Any = None, override_strides: Any = None, tensor_uids: Any = None) -> None:
        """Run the selected plan, building whatever is missing first. Keys: Tensor, uid or name (None keys are
        skipped); or pass buffers as a list with `tensor_uids`. Outputs are written into the given buffers."""
        fast = self._fast_execute
        if fast is not None and tensor_uids is None and override_uids is None and override_shapes is None \
                and override_strides is None:
            return fast(tensor_dict, workspace, handle)  # built cuDNN plan: keys resolved and cached there
        buffers = self._variant_pack(tensor_dict, tensor_uids)
        overrides = _overrides(override_uids, override_shapes, override_strides)
        if not self._planning_done:
            self.create_execution_plans()
        engine = self.selected_engine
        if engine is not None:
            ctx = self._exec_context(handle, workspace, overrides)
            plan = self._compile(ctx)
            self._is_built = True
            plan.execute(self, buffers, ctx)
            return
        if not self._is_built:
            self.check_support()
            self.build_plans()
        backend = self._backend()
        backend.execute(buffers, workspace, handle=handle, **overrides)
        if not self._deserialized:  # from now on skip the generic key resolution above
            fast_path = getattr(backend, "fast_path", None)
            self._fast_execute = fast_path() if fast_path is not None else backend.execute

    def execute_plan_at_index(self, tensor_dict: Any, workspace: Any = None, index: int = 0, handle: Any = None,
                              *args: Any, tensor_uids: Any = None, **kwargs: Any) -> None:
        """Run cuDNN plan `index` (classic index space). Trailing positionals: override uids/shapes/strides."""
        self._require_planned("execute_plan_at_index")
        names = ("override_uids", "override_shapes", "override_strides")
        given = dict(zip(names, args))
        given.update({k: kwargs.pop(k) for k in names if k in kwargs})
        if kwargs:
            raise TypeError(f"execute_plan_at_index() got unexpected keyword arguments {sorted(kwargs)}")
        buffers = self._variant_pack(tensor_dict, tensor_uids)
        overrides = _overrides(*(given.get(n) for n in names))
        self._backend_plans().execute_plan_at_index(buffers, workspace, index, handle=handle, **overrides)

    def populate_cuda_graph(self, handle: Any, variant_pack: Any, workspace: Any, cuda_graph: Any) -> None:
        self._backend_call("populate_cuda_graph", handle, self._variant_pack(variant_pack, None), workspace, cuda_graph)

    def update_cuda_graph(self, handle: Any, variant_pack: Any, workspace: Any, cuda_graph: Any) -> None:
        self._backend_call("update_cuda_graph", handle, self._variant_pack(variant_pack, None), workspace, cuda_graph)

    def serialize(self, *, as_bytes: bool = False, include_kernels: bool = True) -> Any:
        extra: Dict[str, Any] = {}  # only non-defaults, so a minimal backend signature works
        if as_bytes:
            extra["as_bytes"] = True
        if not include_kernels:
            extra["include_kernels"] = False
        return self._backend_call("serialize", **extra)

    def deserialize(self, *args: Any, **kwargs: Any) -> None:
        """Load a serialized cuDNN plan (classic: (blob) or (handle, blob)); the graph can execute right away."""
        self._backend_call("deserialize", *args, **kwargs)
        self._deserialized = True
        self._freeze()
        self._plans, self._planning_done, self._plan_index = [BACKEND_PLAN], True, 0
        self._backend_validated = self._bog_done = self._backend_plans_created = True
        self._is_built = True

    def _variant_pack(self, tensor_dict: Any, tensor_uids: Any) -> Dict[int, Any]:
        """uid -> buffer: data bound at build time first, the caller's buffers over it."""
        buffers = dict(self._data_bindings)
        items: Iterable = zip(tensor_uids, tensor_dict) if tensor_uids is not None else dict(tensor_dict).items()
        for key, data in items:
            if key is not None:
                buffers[self._uid_of(key)] = data
        return buffers

    def _uid_of(self, key: Any) -> int:
        if isinstance(key, Tensor):
            if key.owner is not self:
                raise ValueError(f"variant pack key {key.name!r} (uid {key.uid}) is not a tensor of this graph")
            return key.uid
        if isinstance(key, int) and not isinstance(key, bool):
            if key not in self._by_uid and not self._deserialized:
                raise ValueError(f"variant pack key: no tensor with uid {key}")
            return key
        if isinstance(key, str):
            t = self.find_tensor(key)
            if t is None:
                raise ValueError(f"variant pack key: no tensor named {key!r}")
            return t.uid
        if callable(getattr(key, "get_uid", None)):
            return int(key.get_uid())
        raise TypeError(f"variant pack keys must be tensors, uids or names, got {type(key).__name__}")

    def _exec_context(self, handle: Any, workspace: Any = None, overrides: Optional[dict] = None) -> ExecutionContext:
        h = handle if handle is not None else self._handle
        return ExecutionContext(handle=h, workspace=workspace, stream_resolver=lambda: _stream_of(h),
                                **(overrides or {}))


def _heuristic_list(heuristics: Any) -> List[Any]:
    if heuristics is None:
        return list(DEFAULT_HEURISTICS)
    modes = [heuristics] if isinstance(heuristics, heur_mode) else list(heuristics)
    bad = [m for m in modes if not isinstance(m, heur_mode)]
    if bad:
        raise TypeError(f"heuristic modes must be heur_mode members, got {bad}")
    return modes


def _overrides(uids: Any, shapes: Any, strides: Any) -> Dict[str, Any]:
    """Only the overrides actually given, so a backend without override support is not handed empty ones."""
    given = {"override_uids": uids, "override_shapes": shapes, "override_strides": strides}
    return {k: v for k, v in given.items() if v is not None}


def _no_overrides(method: str, *overrides: Any) -> None:
    if any(o is not None for o in overrides):
        raise NotImplementedError(f"{method}() with shape overrides is not supported yet")


def _stream_of(handle: Any) -> Any:
    """The stream set on a supplied handle (classic set_stream semantics); None when there is no handle."""
    if handle is None:
        return None
    from ..backend.handle import get_stream

    return get_stream(handle)
