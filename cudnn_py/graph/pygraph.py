"""`pygraph`: the graph IR and the classic build / plan / execute surface.

Design (after the 1.32 pure-Python pygraph):
  * The IR owns the uid namespace. Every tensor gets a uid when it is created (auto uids count up from 1); a
    user-chosen uid always wins - an auto holder of that uid is renumbered - and two user uids colliding is a
    ValueError. Lowering pushes every uid as is, so variant packs keyed by IR uids bind without translation.
  * Names are labels: duplicates are legal; a lookup by an ambiguous name raises ValueError.
  * Planning is one-shot. create_execution_plans() asks the Router for one ranked list mixing python engines
    and at most one cuDNN delegating entry, then freezes the whole graph (tensors, nodes, context).
  * The cuDNN path is `cudnn_py.plans.backend_graph.BackendGraph(self)`, created lazily. Until the freeze, any
    IR change drops it (it mirrors a stale graph) and it is rebuilt from the current IR when next needed.
Op builders live at the bottom: pointwise methods are generated from ops.POINTWISE with the reference surface's
signatures; matmul and reduction are written out.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect as _inspect
import json
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from ..enums import build_plan_policy, data_type, from_any_dtype, heur_mode, reduction_mode, scalar_type
from ..engines.base import BACKEND_PLAN, BaseEngine, CompiledPlan, ExecutionContext, PlanConfig
from ..engines.engine_ids import is_backend_sentinel, is_python_engine
from ..engines.router import default_router, route
from . import ops
from .errors import cudnnGraphNotSupportedError, frozen_error
from .node import Node
from .tensor import Tensor

_PKG = __name__.split(".")[0]  # "cudnn_py"
_DEFAULT_HEURISTICS = (heur_mode.A, heur_mode.FALLBACK)
# module-level aliases: some methods have parameters named like these enums (classic keyword names)
_NOT_SET = data_type.NOT_SET
_COMPILE_TIME_CONST = scalar_type.COMPILE_TIME_CONST


class GraphContext:
    """Graph-level data-type defaults; frozen with the graph."""

    def __init__(self, io_data_type: Any, intermediate_data_type: Any, compute_data_type: Any) -> None:
        self._frozen = False
        self.io_data_type = io_data_type
        self.intermediate_data_type = intermediate_data_type
        self.compute_data_type = compute_data_type

    def __setattr__(self, attr: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise frozen_error(f"set the graph context's {attr}")
        object.__setattr__(self, attr, from_any_dtype(value) if attr.endswith("data_type") else value)

    def to_dict(self) -> dict:
        return {k: str(getattr(self, k)) for k in ("io_data_type", "intermediate_data_type", "compute_data_type")}

    def __repr__(self) -> str:
        return f"GraphContext({self.to_dict()})"


class pygraph:
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
        backends: Optional[Sequence[BaseEngine]] = None,
        router: Any = None,
        **kwargs: Any,
    ) -> None:
        io = from_any_dtype(io_data_type)
        # 1.32 rule: intermediate and compute fall back to io when not given
        inter = from_any_dtype(intermediate_data_type)
        comp = from_any_dtype(compute_data_type)
        self._context = GraphContext(io, inter if inter is not data_type.NOT_SET else io,
                                     comp if comp is not data_type.NOT_SET else io)
        self._name = name
        self._handle = handle
        self._sm_count = sm_count
        self._sm_version = sm_version
        self._kernel_cache = kernel_cache
        self._device_property = device_property
        self._is_dynamic_shape_enabled = bool(is_dynamic_shape_enabled) or kernel_cache is not None
        self._is_override_shape_enabled = bool(is_override_shape_enabled)
        self._cuda_graph_retention = cuda_graph_retention
        self._is_cuda_graph_replay_expected = bool(is_cuda_graph_replay_expected)
        self.extra_options: Dict[str, Any] = dict(kwargs)  # unknown keywords, kept for the backend path
        # IR
        self._nodes: List[Node] = []
        self._tensors: List[Tensor] = []  # creation order
        self._by_uid: Dict[int, Tensor] = {}
        self._next_uid = 1
        self._data_bindings: Dict[int, Any] = {}  # uid -> framework tensor given directly to an op
        self._bound_ids: Dict[int, Tensor] = {}  # id(framework object) -> its tensor (one tensor per object)
        # state
        self._frozen = False
        self._is_validated = False
        self._engines: List[BaseEngine] = []
        self._router = router
        self._plans: List[PlanConfig] = []
        self._planning_done = False
        self._plan_index = 0
        self._heuristics: List[Any] = list(_DEFAULT_HEURISTICS)
        self._compiled: Dict[int, CompiledPlan] = {}  # routed plan index -> built python plan
        self._is_built = False
        self._deserialized = False
        self._drop_backend()
        for engine in backends or ():
            self.register_backend(engine)

    # ---- graph-level attributes read by the backend path ------------------------------------------------------------
    name = property(lambda self: self._name)
    handle = property(lambda self: self._handle)
    sm_count = property(lambda self: self._sm_count)
    sm_version = property(lambda self: self._sm_version)
    kernel_cache = property(lambda self: self._kernel_cache)
    device_property = property(lambda self: self._device_property)
    is_dynamic_shape_enabled = property(lambda self: self._is_dynamic_shape_enabled)
    is_override_shape_enabled = property(lambda self: self._is_override_shape_enabled)
    cuda_graph_retention = property(lambda self: self._cuda_graph_retention)
    is_cuda_graph_replay_expected = property(lambda self: self._is_cuda_graph_replay_expected)
    is_validated = property(lambda self: self._is_validated)
    is_frozen = property(lambda self: self._frozen)
    is_built = property(lambda self: self._is_built)

    @property
    def context(self) -> GraphContext:
        return self._context

    @property
    def nodes(self) -> List[Node]:
        """Nodes in creation order, which is topological (an op can only consume existing tensors)."""
        return list(self._nodes)

    @property
    def tensors(self) -> Dict[Union[str, int], Tensor]:
        """Tensors by name; a tensor whose name is empty or shared is keyed by its uid instead."""
        counts: Dict[str, int] = {}
        for t in self._tensors:
            counts[t.name] = counts.get(t.name, 0) + 1
        return {(t.name if t.name and counts[t.name] == 1 else t.uid): t for t in self._tensors}

    # ---- uid namespace ----------------------------------------------------------------------------------------------
    def _alloc_uid(self) -> int:
        while self._next_uid in self._by_uid:
            self._next_uid += 1
        self._next_uid += 1
        return self._next_uid - 1

    def _register(self, t: Tensor, uid: Optional[int] = None) -> Tensor:
        t._attach(self)
        self._tensors.append(t)
        auto = self._alloc_uid()
        t._raw_set("uid", auto)
        self._by_uid[auto] = t
        if uid is not None:
            self._assign_uid(t, uid)
        return t

    def _assign_uid(self, t: Tensor, uid: int) -> None:
        """A user-chosen uid (tensor(uid=), set_uid, t.uid = ...): the user wins over auto uids."""
        if uid < 0:
            raise ValueError(f"uid must be >= 0, got {uid} (tensor {t.name!r})")
        if uid == t.uid:
            t.uid_assigned = True
            return
        self._check_mutable(f"change the uid of tensor {t.name!r}")
        holder = self._by_uid.get(uid)
        if holder is not None:
            if holder.uid_assigned:
                raise ValueError(f"uid {uid} is already assigned to tensor {holder.name!r}; uids must be unique")
            self._move_uid(holder, self._alloc_uid())
        self._move_uid(t, uid)
        t.uid_assigned = True
        self._invalidate()

    def _move_uid(self, t: Tensor, uid: int) -> None:
        if self._by_uid.get(t.uid) is t:
            del self._by_uid[t.uid]
        if t.uid in self._data_bindings:
            self._data_bindings[uid] = self._data_bindings.pop(t.uid)
        t._raw_set("uid", uid)
        self._by_uid[uid] = t

    # ---- mutation bookkeeping -------------------------------------------------------------------------------------
    def _check_mutable(self, what: str) -> None:
        if self._frozen:
            raise frozen_error(what)

    def _invalidate(self) -> None:
        """The IR changed: inference must re-run, and a lowered backend graph no longer mirrors it."""
        self._is_validated = False
        if not self._frozen:
            self._drop_backend()

    def _drop_backend(self) -> None:
        self._backend_graph: Any = None
        self._backend_validated = False
        self._bog_done = False
        self._backend_plans_created = False

    def _freeze(self) -> None:
        """Freeze tensors, nodes and context: every later mutation raises RuntimeError."""
        if self._frozen:
            return
        for node in self._nodes:
            node._freeze()
        for t in self._tensors:
            t._freeze()
        self._context._frozen = True
        self._frozen = True

    # ---- tensor creation --------------------------------------------------------------------------------------------
    def tensor(self, dim: Sequence[int], stride: Optional[Sequence[int]] = None, data_type: Any = None,
               is_virtual: bool = False, is_pass_by_value: bool = False, ragged_offset: Optional[Tensor] = None,
               reordering_type: Any = None, name: str = "", uid: Optional[int] = None,
               ragged_offset_multiplier: int = 1, alignment_value: int = 1, **kwargs: Any) -> Tensor:
        """A graph input (or a user-declared virtual tensor). `stride` defaults to row-major; `uid` -1/None = auto.
        Extra keywords: alignment (byte alignment, default 16), vector_count, vector_dimension,
        is_compile_time_constant, pass_by_value. `alignment_value` (1.32) is accepted and not interpreted."""
        self._check_mutable("create a tensor")
        allowed = {"alignment", "vector_count", "vector_dimension", "is_compile_time_constant", "pass_by_value"}
        unknown = set(kwargs) - allowed
        if unknown:
            raise TypeError(f"tensor() got unexpected keyword arguments {sorted(unknown)}")
        dt = from_any_dtype(data_type)
        user = ["dim"] + (["stride"] if stride is not None else []) + (["data_type"] if dt is not _NOT_SET else [])
        dims = list(dim)
        t = Tensor(_user=tuple(user), name=name, dim=dims, stride=stride if stride is not None else ops.row_major_strides(dims),
                   data_type=dt, is_virtual=is_virtual, is_pass_by_value=is_pass_by_value,
                   ragged_offset=self._adopt(ragged_offset) if ragged_offset is not None else None,
                   reordering_type=reordering_type, ragged_offset_multiplier=ragged_offset_multiplier, **kwargs)
        t._alignment_value = alignment_value
        return self._register(t, None if uid is None or uid == -1 else int(uid))

    def tensor_like(self, template: Any, name: str = "", is_virtual: bool = False) -> Tensor:
        """Copy a graph tensor's attributes (not its uid or name), or describe any array / DLPack object:
        dims, element strides and dtype from the object; a CPU object becomes pass-by-value (classic rule)."""
        self._check_mutable("create a tensor")
        if isinstance(template, Tensor):
            copied = {k: getattr(template, k) for k in ("dim", "stride", "data_type", "is_pass_by_value",
                                                         "pass_by_value", "is_compile_time_constant", "ragged_offset",
                                                         "ragged_offset_multiplier", "reordering_type", "alignment",
                                                         "vector_count", "vector_dimension")}
            user = tuple(a for a in ("dim", "stride", "data_type") if template.is_user_set(a))
            return self._register(Tensor(_user=user, name=name, is_virtual=is_virtual, **copied))
        dims, strides, dt, on_cpu = _describe(template)
        return self._register(Tensor(_user=("dim", "stride", "data_type"), name=name, dim=dims, stride=strides,
                                     data_type=dt, is_virtual=is_virtual, is_pass_by_value=on_cpu))

    def tensor_scalar(self, value: Any, scalar_type: Any, name: str = "") -> Tensor:
        """A pass-by-value scalar carrying `value`; COMPILE_TIME_CONST bakes it into the plan (9.22+)."""
        self._check_mutable("create a tensor")
        t = self._fused_scalar(value, name)
        t._raw_set("is_compile_time_constant", scalar_type is _COMPILE_TIME_CONST)
        return t

    def _fused_scalar(self, value: Any, name: str) -> Tensor:
        dt, host = _scalar_type_of(value)
        return self._register(Tensor(_user=("data_type",), name=name, dim=[1], stride=[1], data_type=dt,
                                     is_pass_by_value=True, pass_by_value=host))

    def _adopt(self, t: Tensor) -> Tensor:
        """A tensor used by this graph: ours as is; a detached `cudnn.tensor()` joins the graph."""
        owner = t.owner
        if owner is self:
            return t
        if owner is not None:
            raise ValueError(f"tensor {t.name!r} (uid {t.uid}) belongs to another graph")
        self._check_mutable("add a tensor")
        return self._register(t, t.uid if t.uid_assigned else None)

    def _as_input(self, value: Any, label: str) -> Tensor:
        """Anything an op accepts as a tensor argument: graph tensors, python/numpy scalars (fused pass-by-value
        scalars) and framework arrays (bound data: the array is fed to execute automatically)."""
        if isinstance(value, Tensor):
            t = self._adopt(value)
            if not t.name:
                t._raw_set("name", label)  # frontend rule: unnamed inputs take "<node>::<port>"
            return t
        if _is_scalar(value):
            return self._fused_scalar(value, label)
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            known = self._bound_ids.get(id(value))
            if known is not None and self._data_bindings.get(known.uid) is value:
                return known
            dims, strides, dt, on_cpu = _describe(value)
            if not dims:  # 0-d array: a one-element tensor
                dims, strides = [1], [1]
            numel = 1
            for d in dims:
                numel *= d
            # a CPU array is data for a python engine; only a one-element CPU array is a by-value scalar
            t = self._register(Tensor(_user=("dim", "stride", "data_type"), name=label, dim=dims, stride=strides,
                                      data_type=dt, is_pass_by_value=on_cpu and numel == 1))
            self._data_bindings[t.uid] = value
            self._bound_ids[id(value)] = t
            return t
        raise TypeError(f"{label}: cannot use a {type(value).__name__} as a graph tensor")

    # ---- lookup and inspection ----------------------------------------------------------------------------------------
    def find_tensor(self, name_or_uid: Union[str, int, Tensor]) -> Optional[Tensor]:
        """By uid (int), by name (str; ValueError when the name is shared), or a Tensor of this graph."""
        if isinstance(name_or_uid, Tensor):
            return name_or_uid if name_or_uid.owner is self else None
        if isinstance(name_or_uid, int) and not isinstance(name_or_uid, bool):
            return self._by_uid.get(name_or_uid)
        matches = [t for t in self._tensors if t.name == name_or_uid]
        if len(matches) > 1:
            raise ValueError(f"tensor name {name_or_uid!r} is shared by uids {[t.uid for t in matches]}; "
                             "look it up by uid or Tensor")
        return matches[0] if matches else None

    def get_node(self, name: str) -> Optional[Node]:
        matches = [n for n in self._nodes if n.name == name]
        if len(matches) > 1:
            raise ValueError(f"node name {name!r} is used by {len(matches)} nodes")
        return matches[0] if matches else None

    def _produced(self) -> Dict[int, Node]:
        return {t.uid: n for n in self._nodes for t in n.outputs.values()}

    def get_inputs(self) -> List[Tensor]:
        """Non-virtual tensors the nodes read but no node writes (with their ragged-offset tensors)."""
        produced = self._produced()
        seen: Dict[int, Tensor] = {}
        for n in self._nodes:
            for t in n.tensors():
                if t.uid not in produced and not t.is_virtual:
                    seen.setdefault(t.uid, t)
        return list(seen.values())

    def get_outputs(self) -> List[Tensor]:
        return [t for n in self._nodes for t in n.outputs.values() if not t.is_virtual]

    def query_tensor_attributes_of_uid(self, uid: int) -> Tensor:
        t = self._by_uid.get(uid)
        if t is None:
            raise ValueError(f"no tensor with uid {uid}")
        return t.copy()

    def inspect(self) -> Dict[str, Any]:
        return {
            "name": self._name,
            "context": self._context.to_dict(),
            "nodes": [n.to_dict() for n in self._nodes],
            "tensors": [t.to_dict() for t in self._tensors],
            "plans": [{"engine_id": p.engine_id, "name": p.name} for p in self._plans],
            "selected_plan": self._plan_index if self._planning_done else None,
        }

    def __repr__(self) -> str:
        return json.dumps(self.inspect(), indent=4)

    def key(self, *args: Any, **kwargs: Any) -> int:
        """A stable hash of the graph's canonical JSON; shapes are left out when dynamic shapes are on."""
        doc = {"context": self._context.to_dict(), "nodes": [n.to_dict() for n in self._nodes],
               "tensors": [t.to_dict() for t in self._tensors]}
        if self._is_dynamic_shape_enabled:
            for t in doc["tensors"]:
                t["dim"], t["stride"] = [], []
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).digest()
        return int.from_bytes(digest[:8], "little") >> 1

    # ---- validation ---------------------------------------------------------------------------------------------------
    def validate(self) -> None:
        """Shape/type inference and checks over the IR; then, with no python engines registered, the cuDNN
        backend validation (which works without a GPU)."""
        if not self._frozen:
            self._infer_all()
        self._is_validated = True
        if not self._engines and not self._deserialized:
            self._validate_backend()

    def _infer_all(self) -> None:
        produced = self._produced()
        for t in self._tensors:
            if t.uid in produced:
                t._reset_inferred({})
            elif t.is_fused_scalar:
                t._reset_inferred({"dim": [1], "stride": [1]})
            else:
                t._reset_inferred({"stride": ops.row_major_strides(t.dim), "dim": t.dim})
        ctx = ops.InferenceContext(self._context.io_data_type, self._context.intermediate_data_type,
                                   self._context.compute_data_type)
        writers: Dict[int, str] = {}
        for node in self._nodes:
            for t in node.inputs.values():
                if t.is_virtual and t.uid not in writers:
                    raise ValueError(f"{node.op} node {node.name!r}: virtual input tensor {t.name!r} (uid {t.uid}) "
                                     "is not produced by an earlier node")
            for t in node.outputs.values():
                if t.uid in writers:
                    raise ValueError(f"tensor {t.name!r} is written by nodes {writers[t.uid]!r} and {node.name!r}")
                writers[t.uid] = node.name
            ops.infer(node, ctx)
        for node in self._nodes:
            for t in node.tensors():
                ops.check_tensor(t)

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
        return self

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
            module = importlib.import_module(f"{_PKG}.plans.backend_graph")
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
        self._backend().execute(buffers, workspace, handle=handle, **overrides)

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

    # ---- op builders --------------------------------------------------------------------------------------------------
    def _new_node(self, op: str, name: Any, compute_data_type: Any, params: Dict[str, Any]) -> Node:
        self._check_mutable(f"add a {op} op")
        if not isinstance(name, str):
            raise TypeError(f"{op}: name must be a str, got {name!r}")
        # frontend rule: an unnamed node is named after its index
        return Node(op, name or str(len(self._nodes)), params, from_any_dtype(compute_data_type))

    def _add_node(self, node: Node, inputs: Dict[str, Any], outputs: Sequence[str]) -> List[Tensor]:
        node.inputs = {port: self._as_input(v, f"{node.name}::{port}") for port, v in inputs.items()}
        outs = [self._register(Tensor(name=f"{node.name}::{port}", is_virtual=True)) for port in outputs]
        node.outputs = dict(zip(outputs, outs))
        self._nodes.append(node)
        self._invalidate()
        return outs

    def _pointwise(self, spec: ops.PointwiseOp, tensors: Sequence[Any], attrs: Dict[str, Any], name: Any,
                   compute_data_type: Any) -> Tensor:
        for a in spec.attrs:
            if a.required and attrs.get(a.arg) is None:
                raise TypeError(f"{spec.method}() missing required argument {a.arg!r}")
        params = ops.pointwise_params(spec.mode, {a.param: attrs.get(a.arg) for a in spec.attrs})
        node = self._new_node("pointwise", name, compute_data_type, params)
        (out,) = self._add_node(node, {f"IN_{i}": t for i, t in enumerate(tensors)}, ["OUT_0"])
        return out

    def matmul(self, A: Any, B: Any, compute_data_type: Any = None, padding: float = 0.0, name: str = "") -> Tensor:
        """C = A @ B with broadcast batch dims; output `<name>::C`."""
        node = self._new_node("matmul", name, compute_data_type, {"padding": float(padding)})
        (c,) = self._add_node(node, {"A": A, "B": B}, ["C"])
        return c

    def reduction(self, *args: Any, name: str = "", compute_data_type: Any = None, out_dims: Any = None,
                  **kwargs: Any) -> Tensor:
        """reduction(input, mode, compute_data_type=None, name="") -> Y. The reduced axes are the ones where the
        output dims (out_dims= or Y.set_dim) are 1; unset output dims copy the input's (frontend behaviour).
        Keyword `is_deterministic` (bool) is forwarded to the backend."""
        values = _bind_positional("reduction", ("input", "mode", "compute_data_type", "name"), args, kwargs,
                                  {"name": name, "compute_data_type": compute_data_type})
        if "group_offset" in kwargs:
            raise NotImplementedError("reduction(group_offset=...) is not supported yet")
        deterministic = bool(kwargs.pop("is_deterministic", False))
        if kwargs:
            raise TypeError(f"reduction() got unexpected keyword arguments {sorted(kwargs)}")
        mode = values.get("mode")
        if not isinstance(mode, reduction_mode) or mode is reduction_mode.NOT_SET:
            raise TypeError(f"reduction() needs a reduction_mode member as mode, got {mode!r}")
        if "input" not in values:
            raise TypeError("reduction() missing required argument 'input'")
        node = self._new_node("reduction", values["name"], values["compute_data_type"],
                              {"mode": mode, "is_deterministic": deterministic})
        (y,) = self._add_node(node, {"X": values["input"]}, ["Y"])
        if out_dims is not None:
            y.set_dim(out_dims)
        return y


# ---- pointwise builders, generated from the op table ----------------------------------------------------------------
def _is_dtype_like(v: Any) -> bool:
    return isinstance(v, data_type) or type(v).__module__.startswith("torch")


def _bind_pointwise(spec: ops.PointwiseOp, sig: _inspect.Signature, graph: pygraph, args: tuple,
                    kwargs: dict) -> Dict[str, Any]:
    """Map a call onto {argument: value}. Accepts the 1.32 signature and the classic 1.23 positional order
    (compute_data_type before name, and swish_backward's compute_data_type before swish_beta)."""
    n = len(spec.args)
    if spec.explicit:
        try:
            values = sig.bind(graph, *args, **kwargs).arguments
        except TypeError as exc:
            raise TypeError(f"{spec.method}(): {exc}") from None
        values.pop("self", None)
        attr_values = [values.get(a.arg) for a in spec.attrs]
        classic = len(args) > n and (not isinstance(values.get("name", ""), str) or any(map(_is_dtype_like, attr_values)))
        if not classic:
            kwargs.clear()  # all consumed by the signature
            return {**{a.arg: None for a in spec.attrs}, "name": "", "compute_data_type": None, **values}
    return _bind_positional(spec.method, spec.args + spec.classic_tail, args, kwargs,
                            {**{a.arg: None for a in spec.attrs}, "name": "", "compute_data_type": None})


def _bind_positional(method: str, order: Sequence[str], args: tuple, kwargs: dict, defaults: dict) -> Dict[str, Any]:
    """Bind positionals to `order`, then keywords named in `order`; keywords outside it stay in kwargs."""
    if len(args) > len(order):
        raise TypeError(f"{method}() takes at most {len(order)} positional arguments ({', '.join(order)})")
    values = dict(defaults)
    values.update(zip(order, args))
    for key in order[len(args):]:
        if key in kwargs:
            values[key] = kwargs.pop(key)
    duplicated = [k for k in order[: len(args)] if k in kwargs]
    if duplicated:
        raise TypeError(f"{method}() got multiple values for {duplicated}")
    return values


def _make_pointwise(spec: ops.PointwiseOp):
    sig = spec.signature()

    def builder(self: pygraph, *args: Any, **kwargs: Any) -> Tensor:
        kwargs = dict(kwargs)
        values = _bind_pointwise(spec, sig, self, args, kwargs)
        if kwargs:
            raise TypeError(f"{spec.method}() got unexpected keyword arguments {sorted(kwargs)}; "
                            f"its tensor arguments are {spec.args}")
        missing = [a for a in spec.args if a not in values]
        if missing:
            raise TypeError(f"{spec.method}() missing tensor arguments {missing}")
        return self._pointwise(spec, [values[a] for a in spec.args], values, values["name"],
                               values["compute_data_type"])

    builder.__name__ = spec.method
    builder.__qualname__ = f"pygraph.{spec.method}"
    builder.__signature__ = sig
    builder.__doc__ = f"{spec.method}({', '.join(spec.args)}) -> OUT_0, pointwise mode {spec.mode}."
    return builder


for _spec in ops.POINTWISE.values():
    setattr(pygraph, _spec.method, _make_pointwise(_spec))
del _spec


# ---- helpers ----------------------------------------------------------------------------------------------------------


def _heuristic_list(heuristics: Any) -> List[Any]:
    if heuristics is None:
        return list(_DEFAULT_HEURISTICS)
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
    """The stream set on a supplied handle (classic set_stream semantics); None when there is no handle or the
    handle layer is not available."""
    if handle is None:
        return None
    try:
        get_stream = getattr(importlib.import_module(_PKG), "get_stream", None)
    except ImportError:
        return None
    return get_stream(handle) if get_stream is not None else None


def _is_scalar(value: Any) -> bool:
    if isinstance(value, (bool, int, float)):
        return True
    # numpy scalars (np.float16(1)) have a dtype and shape () but, unlike 0-d arrays, no __dlpack__
    return hasattr(value, "dtype") and getattr(value, "shape", None) == () and not hasattr(value, "__dlpack__")


def _scalar_type_of(value: Any) -> tuple:
    """(data_type, python value) of a fused scalar: float -> FLOAT, int -> INT32 (INT64 if it does not fit),
    numpy scalars keep their dtype."""
    if isinstance(value, float):
        return data_type.FLOAT, value
    if isinstance(value, int):  # bool included
        return (data_type.INT32 if -2**31 <= value < 2**31 else data_type.INT64), int(value)
    try:
        return from_any_dtype(value.dtype), value.item()
    except (TypeError, AttributeError):
        raise TypeError(f"cannot use {value!r} as a scalar") from None


def _describe(obj: Any) -> tuple:
    """(dims, element strides, data_type, on_cpu) of an array or DLPack object, without importing frameworks."""
    dims = [int(d) for d in obj.shape]
    strides = None
    if callable(getattr(obj, "stride", None)):  # torch: element strides
        strides = [int(s) for s in obj.stride()]
    elif getattr(obj, "strides", None) is not None and getattr(obj, "itemsize", None):  # numpy / cupy: bytes
        strides = [int(s) // int(obj.itemsize) for s in obj.strides]
    if strides is None or len(strides) != len(dims):
        strides = ops.row_major_strides(dims)
    try:
        dt = from_any_dtype(obj.dtype)
    except TypeError:
        dt = data_type.NOT_SET  # classic: DLPack dtypes it does not know become NOT_SET
    return dims, strides, dt, _on_cpu(obj)


def _on_cpu(obj: Any) -> bool:
    device = getattr(obj, "__dlpack_device__", None)
    if callable(device):
        try:
            return int(device()[0]) == 1  # kDLCPU
        except Exception:  # noqa: BLE001 - a broken producer: fall through to the other probes
            pass
    dev = getattr(obj, "device", None)
    if getattr(dev, "type", None) is not None:
        return dev.type == "cpu"
    return type(obj).__module__ == "numpy"
