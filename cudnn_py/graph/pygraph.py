"""`pygraph`: the graph IR container and the classic `cudnn.pygraph` class.

Design (after the 1.32 pure-Python pygraph):
  * The IR owns the uid namespace. Every tensor gets a uid when it is created (auto uids count up from 1); a
    user-chosen uid always wins - an auto holder of that uid is renumbered - and two user uids colliding is a
    ValueError. Lowering pushes every uid as is, so variant packs keyed by IR uids bind without translation.
  * Names are labels: duplicates are legal; a lookup by an ambiguous name raises ValueError.
  * Planning is one-shot. create_execution_plans() asks the Router for one ranked list mixing python engines
    and at most one cuDNN delegating entry, then freezes the whole graph (tensors, nodes, context).
  * The cuDNN path is `cudnn_py.plans.backend_graph.BackendGraph(self)`, created lazily. Until the freeze, any
    IR change drops it (it mirrors a stale graph) and it is rebuilt from the current IR when next needed.
This module holds the container (uids, mutation bookkeeping, lookup, inference); builders.py adds the op
builders and planning.py the plan / build / execute surface.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, List, Optional, Sequence, Union

from ..enums import data_type, from_any_dtype
from ..engines.base import BaseEngine, CompiledPlan, PlanConfig
from . import ops
from .builders import BuilderMixin
from .errors import frozen_error
from .node import Node
from .planning import DEFAULT_HEURISTICS, PlanningMixin
from .tensor import Tensor


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


class pygraph(BuilderMixin, PlanningMixin):
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
        self._heuristics: List[Any] = list(DEFAULT_HEURISTICS)
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
        self._fast_execute: Any = None  # the built cuDNN plan's execute, once the classic path has run it
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
