"""The reference engine: interprets a graph node by node with the registered float64 functions."""
from __future__ import annotations

import sys
import weakref
from typing import Any

import numpy as np

from ...errors import InvalidTypeError, InvalidValueError, cudnnGraphNotSupportedError
from ...ir import layout
from ..base import BaseEngine, CompiledPlan, ExecutionContext, PlanConfig
from ..engine_ids import REFERENCE_ENGINE_ID
from . import ragged
from .registry import REFERENCES


class ReferenceEngine(BaseEngine):
    """``program=True`` interprets the graph after the IR passes (decomposed, legalized) instead of the user's."""

    engine_id = REFERENCE_ENGINE_ID
    name = "reference_float64"

    def __init__(self, program: bool = False) -> None:
        self.program = program
        # graph -> its prepared program's nodes: check_support (routing) and build_plan read the same program, so
        # the passes run once per graph; an edit of the graph (only possible before the freeze) drops it
        self._programs: weakref.WeakKeyDictionary[Any, list] = weakref.WeakKeyDictionary()
        self._watched: weakref.WeakSet[Any] = weakref.WeakSet()

    def _nodes(self, graph: Any) -> list:
        if not self.program:
            return graph.nodes
        nodes = self._programs.get(graph)
        if nodes is None:
            from ...ir.passes import PassOptions, prepare  # the passes only ask what the running cuDNN offers

            nodes = prepare(graph, PassOptions(available=lambda feature, at_least=0: False)).nodes
            if not graph.is_validated:  # inference has yet to fill the dims the passes read: nothing to keep
                return nodes
            self._programs[graph] = nodes
            if graph not in self._watched:
                self._watched.add(graph)
                ref = weakref.ref(graph)
                graph.on_change(lambda: self._forget(ref()))
        return nodes

    def _forget(self, graph: Any) -> None:
        if graph is not None:
            self._programs.pop(graph, None)

    def check_support(self, graph: Any) -> None:
        for node in self._nodes(graph):
            entry = REFERENCES.get(node.op)
            why = f"{node.op} nodes are not supported" if entry is None else entry[1](node)
            if why:
                raise cudnnGraphNotSupportedError(f"reference engine: {why} (node {node.name!r})")

    def build_plan(self, graph: Any, config: PlanConfig, ctx: ExecutionContext) -> CompiledPlan:
        self.check_support(graph)  # a plan built without routing refuses what routing would have
        return ReferencePlan(graph, config, self._nodes(graph))


class ReferencePlan(CompiledPlan):
    def __init__(self, graph: Any, config: PlanConfig, nodes: list) -> None:
        self.engine_id = config.engine_id
        self.name = config.name
        self._nodes = nodes  # the graph is frozen: this snapshot stays valid
        self._outputs = graph.get_outputs()  # (not the graph: it holds this plan, and a reference back is a cycle)

    def execute(self, graph: Any, buffers: dict[int, Any], ctx: ExecutionContext) -> None:
        read = _Reader(graph, buffers)
        values = read.values
        with np.errstate(all="ignore"):  # inf/nan are legitimate results here, as on the GPU
            for node in self._nodes:
                result = REFERENCES[node.op][0](node, read)
                extra = getattr(result, "extra", {})  # other outputs of a node with several (the norms' stats)
                for t in node.outputs.values():
                    value = extra.get(t.uid, result)
                    values[t.uid] = np.broadcast_to(np.asarray(value), tuple(t.dim))
        for t in self._outputs:
            if t.uid not in buffers:
                raise InvalidValueError(f"variant pack: no buffer for output tensor {t.name!r} (uid {t.uid})")
            if t.ragged_offset is not None:  # packed: each batch's rows go to [offset[b], offset[b + 1])
                _write_ragged(buffers[t.uid], values[t.uid].reshape(tuple(t.dim)), t, read.offsets(t))
            else:
                _write(buffers[t.uid], values[t.uid].reshape(tuple(t.dim)), t)


class _Reader:
    """The value of a tensor during one execute, as the references ask for it (``read(t)``): computed by a node
    already, or read from the caller's buffer (gathered from its ragged offsets), or a pass-by-value scalar. An
    object, not two closures: closures that call each other form a cycle through their cells, which kept the
    graph's descriptors until the cyclic collector ran."""

    __slots__ = ("graph", "buffers", "values")

    def __init__(self, graph: Any, buffers: dict[int, Any]) -> None:
        self.graph, self.buffers = graph, buffers
        self.values: dict[int, np.ndarray] = {}

    def __call__(self, t: Any) -> np.ndarray:
        values, buffers = self.values, self.buffers
        if t.uid not in values:
            if t.uid in buffers and t.ragged_offset is not None:
                values[t.uid] = ragged.gather(_host(buffers[t.uid]), t, self.offsets(t))
            elif t.uid in buffers:
                values[t.uid] = _read_buffer(_host(buffers[t.uid]), t, self.graph.find_tensor(t.uid))
            elif t.pass_by_value is not None:
                values[t.uid] = np.full(tuple(t.dim), float(t.pass_by_value))
            else:
                raise InvalidValueError(f"variant pack: no buffer for input tensor {t.name!r} (uid {t.uid})")
        return values[t.uid]

    def offsets(self, t: Any) -> np.ndarray:
        """Where each batch of ragged ``t`` starts, in elements."""
        return self(t.ragged_offset).reshape(-1) * int(t.ragged_offset_multiplier)


# ---- host adapter: the only place that knows about frameworks -------------------------------------------------------
def _framework(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]


def _host(data: Any) -> np.ndarray:
    """A numpy view or copy of a buffer. Raw device pointers cannot be read here."""
    if isinstance(data, np.ndarray):
        return data
    if isinstance(data, (bool, int, float, np.generic)):
        return np.asarray(data)
    kind = _framework(data)
    if kind == "torch":
        t = data.detach()
        if any(k in str(t.dtype) for k in ("bfloat16", "float8", "float4")):
            t = t.float()  # numpy has no bf16 / fp8 / fp4
        return t.cpu().numpy()
    if kind == "cupy":
        return data.get()
    if hasattr(data, "__dlpack__"):
        return np.from_dlpack(data)
    raise InvalidTypeError(f"the reference engine reads arrays or framework tensors, not {type(data).__name__}")


def _read_buffer(arr: np.ndarray, t: Any, user: Any) -> np.ndarray:
    """The value of program tensor ``t`` from the user's buffer. A pass may describe the user's memory with its
    axes permuted (attention's K, described transposed in place): the buffer is then read as the user
    laid it out and viewed through the program tensor's dims and strides."""
    same = list(user.dim) == list(t.dim) and list(user.stride) == list(t.stride) if user is not None else True
    if same or user is t or len(user.dim) != len(t.dim) or \
            sorted(int(d) for d in user.dim) != sorted(int(d) for d in t.dim):
        return _to_float64(arr, t)
    value = _to_float64(arr, user)
    flat = np.zeros(layout.span(user.dim, user.stride))
    _strided(flat, user)[...] = value
    return _strided(flat, t).copy()


def _to_float64(arr: np.ndarray, t: Any) -> np.ndarray:
    dims = tuple(t.dim)
    arr = np.asarray(arr, dtype=np.float64)
    if arr.shape == dims:
        return arr
    if arr.size == 1:
        return np.full(dims, arr.reshape(()).item())
    if arr.ndim == 1:  # a flat buffer: read it through the tensor's strides
        return _strided(arr, t).copy()
    if arr.size == int(np.prod(dims)):
        return arr.reshape(dims)
    raise InvalidValueError(f"buffer of shape {arr.shape} does not match tensor {t.name!r} dims {list(dims)}")


def _strided(flat: np.ndarray, t: Any) -> np.ndarray:
    dims, strides = tuple(t.dim), tuple(t.stride)
    span = layout.span(dims, strides)
    if span > flat.size:
        raise InvalidValueError(f"flat buffer of {flat.size} elements is too small for tensor {t.name!r} "
                         f"(dims {list(dims)}, stride {list(strides)})")
    return np.lib.stride_tricks.as_strided(flat, dims, tuple(s * flat.itemsize for s in strides))


def _write_ragged(dst: Any, result: np.ndarray, t: Any, offsets: np.ndarray) -> None:
    """Scatter a ragged tensor's rows into its packed buffer; the elements of no batch keep their contents."""
    flat = np.array(_host(dst), dtype=np.float64).reshape(-1)
    ragged.scatter(flat, result, t, offsets)
    if isinstance(dst, np.ndarray):
        np.copyto(dst.reshape(-1) if dst.flags.c_contiguous else dst, flat.reshape(dst.shape), casting="unsafe")
        return
    if _framework(dst) == "torch":
        torch = sys.modules["torch"]
        src = torch.from_numpy(flat.reshape(tuple(dst.shape))).to(device=dst.device, dtype=dst.dtype)
        dst.copy_(src)
        return
    raise InvalidTypeError(f"the reference engine writes ragged tensors into arrays or torch tensors, not "
                    f"{type(dst).__name__}")


def _write(dst: Any, result: np.ndarray, t: Any) -> None:
    """Cast the float64 result to the buffer's dtype and copy it in place."""
    if isinstance(dst, np.ndarray):
        view = dst if dst.shape == result.shape or dst.ndim != 1 else _strided(dst, t)
        np.copyto(view, result.reshape(view.shape), casting="unsafe")
        return
    kind = _framework(dst)
    if kind == "torch":
        torch = sys.modules["torch"]
        src = torch.from_numpy(np.array(result, copy=True)).to(device=dst.device, dtype=dst.dtype)
        flat = dst.dim() == 1 and tuple(dst.shape) != result.shape
        view = dst.as_strided(tuple(t.dim), tuple(t.stride)) if flat else dst
        view.copy_(src.reshape(view.shape))
        return
    if kind == "cupy":
        cupy = sys.modules["cupy"]
        dst[...] = cupy.asarray(result.reshape(dst.shape).astype(dst.dtype))
        return
    if hasattr(dst, "__dlpack__"):
        _write(np.from_dlpack(dst), result, t)  # host DLPack producers share memory with the numpy view
        return
    raise InvalidTypeError(f"the reference engine writes into arrays or framework tensors, not {type(dst).__name__}")
