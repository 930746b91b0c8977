"""The IR graph: tensors, nodes, the uid namespace, lookups, inference and the freeze.

Design (after the 1.32 pure-Python pygraph):
  * The IR owns the uid namespace. Every tensor gets a uid when it is created (auto uids count up from 1); a
    user-chosen uid always wins - an auto holder of that uid is renumbered - and two user uids colliding is a
    ValueError. Lowering pushes every uid as is, so variant packs keyed by IR uids bind without translation.
    The passes allocate the uids of the tensors they add from the same namespace (:meth:`Graph.fresh_uids`).
  * Names are labels: duplicates are legal; a lookup by an ambiguous name raises ValueError.
  * The user's graph stays as the user built it: the passes (``cudnn_py.ir.passes``) work on a copy.
  * After planning the whole graph freezes (tensors, nodes, context): every later mutation raises.
The op builders come from the op specs (``builders.py``); planning and execution live above the IR (the
classic facade ``cudnn_py.facade.pygraph`` and ``cudnn_py.plans``).
"""
from __future__ import annotations

import itertools
import json
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ..enums import data_type, from_any_dtype
from ..errors import InvalidValueError, frozen_error
from . import layout
from .builders import BuilderMixin
from .inference import InferenceContext, check_tensor
from .node import Node
from .tensor import Tensor, checked_uid


def weak_callable(callback: Callable[..., Any]) -> Callable[[], Callable[..., Any] | None]:
    """A reference to ``callback``: weak for a bound method (its object may go; the reference then gives None),
    strong for anything else (a function or lambda the caller made for this)."""
    if isinstance(callback, types.MethodType):
        return weakref.WeakMethod(callback)
    return lambda: callback


class GraphContext:
    """Graph-level data-type defaults; frozen with the graph."""

    def __init__(self, io_data_type: Any = None, intermediate_data_type: Any = None,
                 compute_data_type: Any = None) -> None:
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


class Graph(BuilderMixin):
    """The IR container. ``pygraph`` (the classic facade) derives from it."""

    def __init__(self, name: str = "graph", io_data_type: Any = None, intermediate_data_type: Any = None,
                 compute_data_type: Any = None) -> None:
        io = from_any_dtype(io_data_type)
        # 1.32 rule: intermediate and compute fall back to io when not given
        inter = from_any_dtype(intermediate_data_type)
        comp = from_any_dtype(compute_data_type)
        self._context = GraphContext(io, inter if inter is not data_type.NOT_SET else io,
                                     comp if comp is not data_type.NOT_SET else io)
        self._name = name
        self._nodes: list[Node] = []
        self._tensors: list[Tensor] = []  # creation order
        self._by_uid: dict[int, Tensor] = {}
        self._next_uid = 1
        self._data_bindings: dict[int, Any] = {}  # uid -> framework tensor given directly to an op
        self._bound_ids: dict[int, Tensor] = {}  # id(framework object) -> its tensor (one tensor per object)
        self._frozen = False
        self._is_validated = False
        # held by every step that changes where the graph is (inference here; pygraph's validate and build steps,
        # its mirrored session methods and execute's first call): a graph shared by threads runs one step at a time
        # (inference from two threads at once once read half-inferred tensors); re-entrant, as steps call steps
        self._lock = threading.RLock()
        # told when the IR changes (a stale lowering drops); weak references to bound methods (weak_callable)
        self._observers: list[Callable[[], Callable[[], None] | None]] = []

    name = property(lambda self: self._name)
    is_validated = property(lambda self: self._is_validated)
    is_frozen = property(lambda self: self._frozen)

    @property
    def context(self) -> GraphContext:
        return self._context

    @property
    def nodes(self) -> list[Node]:
        """Nodes in creation order, which is topological (an op can only consume existing tensors)."""
        return list(self._nodes)

    @property
    def tensors(self) -> dict[str | int, Tensor]:
        """Tensors by name; a tensor whose name is empty or shared is keyed by its uid instead."""
        counts: dict[str, int] = {}
        for t in self._tensors:
            counts[t.name] = counts.get(t.name, 0) + 1
        return {(t.name if t.name and counts[t.name] == 1 else t.uid): t for t in self._tensors}

    def all_tensors(self) -> list[Tensor]:
        return list(self._tensors)

    def inference_context(self) -> InferenceContext:
        c = self._context
        return InferenceContext(c.io_data_type, c.intermediate_data_type, c.compute_data_type)

    # ---- uid namespace ----------------------------------------------------------------------------------------------
    def _alloc_uid(self) -> int:
        while self._next_uid in self._by_uid:
            self._next_uid += 1
        self._next_uid += 1
        return self._next_uid - 1

    def _register(self, t: Tensor, uid: int | None = None) -> Tensor:
        if uid is not None:  # refused before the tensor joins the graph: a refused tensor(uid=...) leaves no trace
            self._check_uid_free(t, uid)
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
        if uid == t.uid and uid >= 0:
            t.uid_assigned = True
            return
        self._check_uid_free(t, uid)
        self._check_mutable(f"change the uid of tensor {t.name!r}")
        holder = self._by_uid.get(uid)
        if holder is not None:
            self._move_uid(holder, self._alloc_uid())
        self._move_uid(t, uid)
        t.uid_assigned = True
        self._invalidate()

    def _check_uid_free(self, t: Tensor, uid: int) -> None:
        """InvalidValueError unless ``t`` may take ``uid``: >= 0 and not chosen by another tensor of this graph."""
        if uid < 0:
            raise InvalidValueError(f"uid must be >= 0, got {uid} (tensor {t.name!r})")
        holder = self._by_uid.get(uid)
        if holder is not None and holder is not t and holder.uid_assigned:
            raise InvalidValueError(f"uid {uid} is already assigned to tensor {holder.name!r}; uids must be unique")

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
        """The IR changed: inference must re-run, and whatever was derived from it (a lowered graph) is stale."""
        self._is_validated = False
        if not self._frozen:
            for observer in self._observers:
                callback = observer()
                if callback is not None:
                    callback()

    def fresh_uids(self) -> Iterator[int]:
        """Uids no tensor of this graph holds, for the tensors the passes add to their copy of it."""
        taken = set(self._by_uid)
        return (u for u in itertools.count(self._next_uid) if u not in taken)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever the IR changes (before the freeze; a frozen graph does not change), so that
        what was derived from it can drop. A bound method is held weakly: a graph observing itself is no reference
        cycle, so a graph nothing else refers to goes (with its session's descriptors) when its last reference does."""
        self._observers.append(weak_callable(callback))

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

    # ---- lookup and inspection ---------------------------------------------------------------------------------------
    def find_tensor(self, name_or_uid: str | int | Tensor) -> Tensor | None:
        """By uid (int), by name (str; ValueError when the name is shared), or a Tensor of this graph."""
        if isinstance(name_or_uid, Tensor):
            return name_or_uid if name_or_uid.owner is self else None
        if isinstance(name_or_uid, int) and not isinstance(name_or_uid, bool):
            return self._by_uid.get(name_or_uid)
        matches = [t for t in self._tensors if t.name == name_or_uid]
        if len(matches) > 1:
            raise InvalidValueError(f"tensor name {name_or_uid!r} is shared by uids {[t.uid for t in matches]}; "
                             "look it up by uid or Tensor")
        return matches[0] if matches else None

    def get_node(self, name: str) -> Node | None:
        matches = [n for n in self._nodes if n.name == name]
        if len(matches) > 1:
            raise InvalidValueError(f"node name {name!r} is used by {len(matches)} nodes")
        return matches[0] if matches else None

    def _produced(self) -> dict[int, Node]:
        return {t.uid: n for n in self._nodes for t in n.outputs.values()}

    def get_inputs(self) -> list[Tensor]:
        """Non-virtual tensors the nodes read but no node writes (with their ragged-offset tensors)."""
        produced = self._produced()
        seen: dict[int, Tensor] = {}
        for n in self._nodes:
            for t in n.tensors():
                if t.uid not in produced and not t.is_virtual:
                    seen.setdefault(t.uid, t)
        return list(seen.values())

    def get_outputs(self) -> list[Tensor]:
        return [t for n in self._nodes for t in n.outputs.values() if not t.is_virtual]

    def query_tensor_attributes_of_uid(self, uid: int) -> Tensor:
        t = self._by_uid.get(checked_uid(uid, "query_tensor_attributes_of_uid(uid)"))
        if t is None:
            raise InvalidValueError(f"no tensor with uid {uid}")
        return t.copy()

    def inspect(self) -> dict[str, Any]:
        return {
            "name": self._name,
            "context": self._context.to_dict(),
            "nodes": [n.to_dict() for n in self._nodes],
            "tensors": [t.to_dict() for t in self._tensors],
        }

    def __repr__(self) -> str:
        return json.dumps(self.inspect(), indent=4)

    def _is_dynamic(self) -> bool:
        return False

    def key(self, *args: Any, **kwargs: Any) -> int:
        """A stable hash of what decides the plan: the context, every node's op and params, every tensor's uid
        and the attributes the user chose (inferred ones follow from those, so the key is the same before and
        after validate()). Names are labels and are left out; so are shapes when dynamic shapes are on."""
        dynamic = self._is_dynamic()

        def tensor_doc(t: Tensor) -> dict:
            d = t.to_dict()
            del d["name"]
            for attr in ("dim", "stride", "data_type"):
                if not t.is_user_set(attr) or (dynamic and attr != "data_type"):
                    del d[attr]
            return d

        def node_doc(n: Node) -> dict:
            d = n.to_dict()
            del d["name"]
            d["params"] = {k: str(v) for k, v in n.built_params.items()}
            return d

        doc = {"context": self._context.to_dict(), "nodes": [node_doc(n) for n in self._nodes],
               "tensors": [tensor_doc(t) for t in self._tensors], "dynamic": dynamic}
        import hashlib  # (not at import: _hashlib is a few ms)

        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).digest()
        return int.from_bytes(digest[:8], "little") >> 1

    # ---- inference and checks ---------------------------------------------------------------------------------------
    def validate_ir(self) -> None:
        """Shape and data-type inference over every node in order, then the tensor checks (one thread at a time:
        inference rewrites every tensor's inferred attributes)."""
        with self._lock:
            if not self._frozen:
                self._infer_all()
            self._is_validated = True

    def _infer_all(self) -> None:
        produced = self._produced()
        for t in self._tensors:
            if t.uid in produced:
                t._reset_inferred({})
            elif t.is_fused_scalar:
                t._reset_inferred({"dim": [1], "stride": [1]})
            else:
                t._reset_inferred({"stride": layout.row_major_strides(t.dim), "dim": t.dim})
        if not self._nodes:
            raise InvalidValueError(f"graph {self._name!r} has no operations")
        ctx = self.inference_context()
        writers: dict[int, str] = {}
        order = {id(n): i for i, n in enumerate(self._nodes)}
        for node in self._nodes:
            for t in node.inputs.values():
                writer = produced.get(t.uid)
                if writer is not None and order[id(writer)] >= order[id(node)]:
                    raise InvalidValueError(
                        f"{node.op} node {node.name!r} reads tensor {t.name!r} (uid {t.uid}), which node "
                        f"{writer.name!r} writes {'itself' if writer is node else 'after it'}: the graph has a cycle")
                if t.is_virtual and t.uid not in writers:
                    raise InvalidValueError(f"{node.op} node {node.name!r}: virtual input tensor {t.name!r} (uid "
                                            f"{t.uid}) "
                                     "is not produced by an earlier node")
            for t in node.outputs.values():
                if t.uid in writers:
                    raise InvalidValueError(f"tensor {t.name!r} is written by nodes {writers[t.uid]!r} and "
                                            f"{node.name!r}")
                writers[t.uid] = node.name
            assert node.spec is not None, f"node {node.name!r} has no op spec"
            node.spec.infer(node, ctx)
        for node in self._nodes:
            for t in node.tensors():
                check_tensor(t)
            for t in node.outputs.values():
                if not t.is_virtual and any(d > 1 and s == 0 for d, s in zip(t.dim, t.stride)):
                    raise InvalidValueError(f"{node.op} node {node.name!r}: output tensor {t.name!r} (uid {t.uid}) "
                                            f"has stride "
                                     f"0 on an axis of extent > 1 (dims {list(t.dim)}, strides {list(t.stride)}): "
                                     "its elements would overwrite each other")
        if not self.get_outputs():  # after the shape checks, which say more about a half-built graph
            raise InvalidValueError(f"graph {self._name!r} has no outputs: nothing would be computed; mark the "
                                    f"tensors to "
                             "compute with set_output(True)")
