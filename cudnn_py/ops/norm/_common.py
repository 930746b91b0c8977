"""What the norm operators share: the ``torch.library`` namespace they are defined in, the operand checks (the
official operators' checks, with their messages and exception classes), the bounded graph caches, and how a
graph is built and planned.

Importing this module imports torch (only :mod:`cudnn_py.ops.norm`'s lazy names import it).
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import torch

from ...enums import data_type, heur_mode
from ...errors import CudnnPyError, InvalidTypeError, InvalidValueError
from ...facade import pygraph
from .._library import LIBRARY, NAMESPACE, define  # noqa: F401  (the namespace, shared with the other operators)

logger = logging.getLogger("cudnn_py.ops")


# the io data types the operators take: torch dtype -> cudnn data type
TORCH_DTYPE_TO_CUDNN = {
    torch.float16: data_type.HALF,
    torch.bfloat16: data_type.BFLOAT16,
    torch.float32: data_type.FLOAT,
}


# ---- the operand checks: the official operators', messages and exception classes included -------------------------
def require_cuda(name: str, **tensors: torch.Tensor) -> None:
    others = {n: str(t.device) for n, t in tensors.items() if not t.is_cuda}
    if others:
        raise InvalidValueError(f"{name}: all tensors must be CUDA tensors; got {others}")


def require_same_device(name: str, reference: torch.Tensor, **tensors: torch.Tensor) -> None:
    others = {n: str(t.device) for n, t in tensors.items() if t.device != reference.device}
    if others:
        raise InvalidValueError(f"{name}: all tensors must be on {reference.device}; got {others}")


def require_dtype(name: str, tensor: torch.Tensor, expected: torch.dtype) -> None:
    if tensor.dtype != expected:
        raise InvalidTypeError(f"{name}: expected dtype {expected}, got {tensor.dtype}")


def require_canonical_4d(name: str, tensor: torch.Tensor, rows: int, hidden_size: int) -> None:
    """``tensor`` is (rows, hidden_size, 1, 1) and contiguous: the layout the operators' graphs are built for."""
    expected = (rows, hidden_size, 1, 1)
    if tuple(tensor.shape) != expected:
        raise InvalidValueError(f"{name}: expected shape {expected}, got {tuple(tensor.shape)}")
    if not tensor.is_contiguous():
        raise InvalidValueError(f"{name}: expected a contiguous tensor")


def require_stats(name: str, tensor: torch.Tensor, rows: int) -> None:
    """A saved statistic (mean, inv_var): contiguous FLOAT (rows, 1, 1, 1)."""
    if tuple(tensor.shape) != (rows, 1, 1, 1) or not tensor.is_contiguous():
        raise InvalidValueError(f"{name}: expected contiguous shape {(rows, 1, 1, 1)}, got {tuple(tensor.shape)}")
    require_dtype(name, tensor, torch.float32)


def require_rows(op: str, x: torch.Tensor) -> tuple[int, int]:
    """(rows, hidden_size) of an operator's x, (rows, hidden_size, 1, 1) of a supported dtype."""
    if x.dtype not in TORCH_DTYPE_TO_CUDNN:
        raise InvalidTypeError(f"{op}: unsupported input dtype {x.dtype}")
    if x.ndim != 4 or tuple(x.shape[2:]) != (1, 1):
        raise InvalidValueError(f"{op}: expected x with shape (rows, hidden_size, 1, 1), got {tuple(x.shape)}")
    rows, hidden_size = int(x.shape[0]), int(x.shape[1])
    require_canonical_4d("x", x, rows, hidden_size)
    return rows, hidden_size


def require_public_input(input: torch.Tensor) -> None:
    """The public functions' first checks of ``input``."""
    if input.ndim == 0:
        raise InvalidValueError("input must have at least one dimension")
    if not input.is_cuda:
        raise InvalidValueError(f"input must be a CUDA tensor, got {input.device}")
    if input.dtype not in TORCH_DTYPE_TO_CUDNN:
        raise InvalidTypeError(f"unsupported input dtype: {input.dtype}")


def rows_of(input: torch.Tensor, hidden_size: int) -> int:
    rows = input.numel() // hidden_size
    if rows == 0:
        raise InvalidValueError("input must contain at least one normalization row")
    return rows


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records a call on ``tensors``: the training graphs (statistics saved) are used then, the
    inference graphs (no statistics) otherwise."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def aligned(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a copy of it where its data pointer is not 16-byte aligned (the graphs' tensors declare 16; a
    tensor made from an offset view of another can be less)."""
    return t if t.data_ptr() % 16 == 0 else t.clone()


# ---- the graph caches -----------------------------------------------------------------------------------------------
DEFAULT_CACHE_SIZE = 128


class GraphCache:
    """The built graphs of one operator, per key (shapes, dtypes, device, eps, options: the operand checks admit
    only contiguous operands, so the shapes determine the strides): a bounded map, least recently used first out.
    Thread-safe; a graph is built once, under the lock (another thread asking for the same key waits for it)."""

    def __init__(self, maxsize: int = DEFAULT_CACHE_SIZE):
        self.maxsize = maxsize
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = 0

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry
            self.misses += 1
            entry = build()
            self._entries[key] = entry
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
                self.evictions += 1
            return entry

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


CACHES: dict[str, GraphCache] = {}


def cache(name: str) -> GraphCache:
    """The graph cache of operator ``name`` (made on first use; ``CACHES`` lists them)."""
    return CACHES.setdefault(name, GraphCache())


# ---- building -------------------------------------------------------------------------------------------------------
def new_graph(dtype: torch.dtype) -> Any:
    """An empty graph of io type ``dtype``, FLOAT intermediates and compute."""
    return pygraph(io_data_type=TORCH_DTYPE_TO_CUDNN[dtype], intermediate_data_type=data_type.FLOAT,
                   compute_data_type=data_type.FLOAT)


def operand(g: Any, name: str, dims: tuple, dtype: Any) -> Any:
    """A contiguous graph input of ``dims``: a torch dtype or a cudnn data type."""
    strides, acc = [], 1
    for d in reversed(dims):
        strides.append(acc)
        acc *= max(int(d), 1)
    dt = TORCH_DTYPE_TO_CUDNN.get(dtype, dtype)
    return g.tensor(name=name, dim=list(dims), stride=strides[::-1], data_type=dt)


def epsilon(g: Any, eps: float) -> Any:
    """eps as a pass-by-value FLOAT scalar whose value the graph carries (eps is part of the cache key): no host
    scalar is read per call, so a repeated call can be replayed (plans/execute_replay.py)."""
    return g.tensor(name="epsilon", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=data_type.FLOAT,
                    is_pass_by_value=True, pass_by_value=float(eps))


def output(t: Any, dims: tuple, dtype: Any) -> None:
    """Mark graph tensor ``t`` an output laid out contiguous as ``dims``."""
    strides, acc = [], 1
    for d in reversed(dims):
        strides.append(acc)
        acc *= max(int(d), 1)
    t.set_output(True).set_dim(list(dims)).set_stride(strides[::-1]) \
        .set_data_type(TORCH_DTYPE_TO_CUDNN.get(dtype, dtype))


def planned_forward(make: Callable[[bool], Any], training: bool, device: torch.device) -> Any:
    """The planned forward graph ``make(training)``. An INFERENCE graph that cuDNN refuses gives way to the
    TRAINING graph (whose statistics the caller then allocates and drops), said once at INFO on the
    ``cudnn_py.ops`` logger."""
    if training:
        return planned(make(True), device)
    try:
        return planned(make(False), device)
    except (CudnnPyError, RuntimeError) as exc:
        logger.info("cudnn_py.ops: the inference graph was refused (%s: %s); the training graph serves instead",
                    type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else "")
        return planned(make(True), device)


def planned(built: Any, device: torch.device) -> Any:
    """``built`` (a graph and its tensors, ``.graph`` the graph) with the graph validated and planned for
    ``device`` (heuristics A, then FALLBACK)."""
    with torch.cuda.device(device):
        built.graph.build([heur_mode.A, heur_mode.FALLBACK])
    return built


def execute(g: Any, feeds: dict) -> None:
    """Run ``g`` on torch's current stream of the operands' device, its workspace from torch's caching allocator
    (execute without a handle: docs/tour.md)."""
    g.execute(feeds, None)
