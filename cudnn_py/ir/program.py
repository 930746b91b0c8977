"""The graph that is lowered: a copy of the user's graph that the passes rewrite.

The user's graph stays as the user built it (inspectable, serializable, the dims the caller binds against).
:meth:`Program.from_graph` copies every node and tensor (same uids); the passes then expand composites and
legalize layouts on the copy. Tensors the passes add are virtual intermediates or by-value scalars whose uids come
from the user graph's namespace (:meth:`Graph.fresh_uids`), so they can never collide with a user uid.

:class:`Rewriter` is how a decomposition builds nodes: it has one method per op spec, with the classic
signatures, and runs each new node's inference at once (so every intermediate has dims, strides and types).
"""
from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

from ..enums import data_type, from_any_dtype
from ..errors import UsageError
from . import layout
from .inference import InferenceContext, check_tensor
from .node import Node
from .spec import SPECS, OpSpec
from .tensor import Tensor


class Program:
    def __init__(self, source: Any, nodes: list[Node], tensors: dict[int, Tensor], context: InferenceContext,
                 uids: Iterator[int]) -> None:
        self._source = weakref.ref(source)  # the user's graph (weakly: it owns the session that owns this program)
        self.nodes = nodes
        self.tensors = tensors  # uid -> tensor, every tensor of the program
        self.context = context
        self.log: list[str] = []  # what the passes did, for explain / debugging
        # uid -> bytes: real (non-virtual) intermediates no caller provides, placed by the executor at the start of
        # the workspace (the frontend's "FE workspace" tensors: attention backward's softmax_sum, dQ accumulator)
        self.scratch: dict[int, int] = {}
        self._uids = uids

    @classmethod
    def from_graph(cls, graph: Any) -> Program:
        """Copy ``graph`` (already validated: dims, strides and types inferred)."""
        program = cls(graph, [], {}, graph.inference_context(), graph.fresh_uids())
        own = program.own
        program.nodes = [n.clone({p: own(t) for p, t in n.inputs.items()}, {p: own(t) for p, t in n.outputs.items()})
                         for n in graph.nodes]
        return program

    def own(self, t: Tensor) -> Tensor:
        """The program's twin of a user tensor, made on first use (with the twin of its ragged offset): the
        passes rewrite twins, never the user's tensors."""
        twin = self.tensors.get(t.uid)
        if twin is None:
            twin = self.tensors[t.uid] = t.copy()
            if t.ragged_offset is not None:
                twin._raw_set("ragged_offset", self.own(t.ragged_offset))
        return twin

    def view_aliases(self) -> dict[int, tuple[int, int]]:
        """View uid -> (source uid, byte offset): the variant-pack replacements of the program's views (the
        outputs their specs' ``aliases`` name: a slice's)."""
        out: dict[int, tuple[int, int]] = {}
        for n in self.nodes:
            if n.spec is not None and n.spec.aliases is not None:
                out.update(n.spec.aliases(n))
        return out

    def new_uid(self) -> int:
        return next(self._uids)

    def add_tensor(self, t: Tensor) -> Tensor:
        uid = self.new_uid()
        t._raw_set("uid", uid)
        self.tensors[uid] = t
        return t

    def add_scratch(self, t: Tensor, elements: int | None = None) -> Tensor:
        """A new non-virtual intermediate that lives in the workspace (dims, strides and type set), of
        ``elements`` elements (default: the span of its dims and strides; a ragged one says how many it packs)."""
        from ..enums import dtype_info

        self.add_tensor(t)
        span = elements if elements is not None else layout.span(t.dim, t.stride)
        self.scratch[t.uid] = -(-span * dtype_info(t.data_type).bits // 8)
        return t

    @property
    def source(self) -> Any:
        """The user's graph this program was copied from (RuntimeError once it was garbage-collected)."""
        graph = self._source()
        if graph is None:
            raise UsageError("the graph this program was copied from was garbage-collected")
        return graph

    def user_tensor(self, uid: int) -> Tensor | None:
        """The user's tensor behind a program uid (None for a tensor a pass added)."""
        return self.source.find_tensor(uid) if isinstance(uid, int) else None

    def check(self) -> None:
        for node in self.nodes:
            for t in node.tensors():
                check_tensor(t)

    def to_dict(self) -> dict:
        return {"nodes": [n.to_dict() for n in self.nodes],
                "tensors": [t.to_dict() for t in self.tensors.values()], "log": list(self.log)}


class Rewriter:
    """Builds primitive nodes into a Program on behalf of a decomposition: ``rw.add(a, b, out_data_type=...)``.

    Arguments may be program tensors or python scalars (which become by-value scalars). Extra keywords:
    ``out_data_type`` (the new output's data type; default: inferred), ``out`` (write an existing tensor instead of
    a new virtual one: how the last node of a decomposition writes the composite's own output)."""

    def __init__(self, program: Program, origin: Node) -> None:
        self.program = program
        self.origin = origin  # the composite node being expanded: new nodes are named after it
        self.emitted: list[Node] = []

    def __getattr__(self, method: str) -> Any:
        spec = SPECS.get(method)
        if spec is None:
            raise AttributeError(f"no op {method!r} to build in a decomposition")
        return lambda *args, **kwargs: self.emit(spec, args, kwargs)

    def _scalar(self, value: Any) -> Tensor:
        dt = data_type.FLOAT if isinstance(value, float) else data_type.INT32
        t = Tensor(_user=("data_type",), name=f"{self.origin.name}::scalar", dim=[1], stride=[1], data_type=dt,
                   is_pass_by_value=True, pass_by_value=value)
        return self.program.add_tensor(t)

    def emit(self, spec: OpSpec, args: tuple, kwargs: dict[str, Any]) -> Any:
        kwargs = dict(kwargs)
        out_type = from_any_dtype(kwargs.pop("out_data_type", None))
        out: Tensor | None = kwargs.pop("out", None)
        values = spec.bind(args, kwargs)
        params = spec.node_params(values)
        name = f"{self.origin.name}::{spec.method}_{len(self.emitted)}"
        node = Node(spec.kind, name, params, from_any_dtype(values["compute_data_type"]), spec)
        inputs = {}
        for p in spec.inputs:
            if values.get(p.arg) is None:
                continue
            for in_port, v in p.ports_of(values[p.arg]):
                inputs[in_port] = v if isinstance(v, Tensor) else self._scalar(v)
        node.inputs = inputs
        outputs = {}
        for port in spec.output_ports(params, values):
            if port is None:
                continue
            if out is not None:
                t, out = out, None
            else:
                t = self.program.add_tensor(Tensor(name=f"{name}::{port}", is_virtual=True))
                if out_type is not data_type.NOT_SET:
                    t._raw_set("data_type", out_type)
                    t._user_fields.add("data_type")
            outputs[port] = t
        node.outputs = outputs
        spec.infer(node, self.program.context)
        self.emitted.append(node)
        outs = list(outputs.values())
        return outs[0] if len(outs) == 1 else outs
