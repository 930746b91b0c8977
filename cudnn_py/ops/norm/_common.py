"""What the norm operators share: the ``torch.library`` namespace they are defined in, the operand checks (the
official operators' checks, with their messages and exception classes), the bounded graph caches, how a graph is
built and planned, and the operators' common shape: a forward saving its statistics, its inference twin and the
backward, each run from its cached graph, with their fake implementations and autograd.

Importing this module imports torch (only :mod:`cudnn_py.ops.norm`'s lazy names import it).
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
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
    return refused_gives_way(lambda: planned(make(False), device), lambda: planned(make(True), device),
                             "the inference graph", "the training graph serves instead")


def refused_gives_way(first: Callable[[], Any], instead: Callable[[], Any], refused: str, serves: str) -> Any:
    """``first()``, or, where cuDNN (or planning) refuses it, ``instead()``, said at INFO on the ``cudnn_py.ops``
    logger ("``refused`` was refused (why); ``serves``"): a graph cached per key is refused once, so once per key."""
    try:
        return first()
    except (CudnnPyError, RuntimeError) as exc:
        logger.info("cudnn_py.ops: %s was refused (%s: %s); %s", refused, type(exc).__name__,
                    str(exc).splitlines()[0][:300] if str(exc) else "", serves)
        return instead()


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


# ---- the norm operators' common shape -------------------------------------------------------------------------------
# Each norm operator is three torch operators: a TRAINING forward -> (y, *statistics), the statistics FLOAT
# (rows, 1, 1, 1) and saved for the backward; its INFERENCE twin -> y, used where autograd records nothing; and the
# backward -> (dx, dscale, dbias). Their graphs differ (the modules' forward_graph / backward_graph); how a graph is
# fetched, fed and run, the fake implementations and the autograd glue are these.
def run_forward(op: str, key: Hashable, make: Callable[[bool], Any], training: bool, x: torch.Tensor,
                operands: dict[str, torch.Tensor | None], stats: Sequence[str]) -> tuple[torch.Tensor | None, ...]:
    """Operator ``op``'s forward on ``x``: its graph for ``key`` (``make(training)``, planned once and cached,
    see :func:`planned_forward`) fed ``operands`` (graph field -> tensor; None: not in the graph) and run. Returns
    y, then each statistic of ``stats`` (graph field names) the graph saves, else None (an INFERENCE graph; also
    an inference call served by the TRAINING graph allocates them, and its caller drops them)."""
    return execute_forward(cache(op).get(key, lambda: planned_forward(make, training, x.device)), x, operands, stats)


def execute_forward(f: Any, x: torch.Tensor, operands: dict[str, torch.Tensor | None],
                    stats: Sequence[str]) -> tuple[torch.Tensor | None, ...]:
    """:func:`run_forward` once the planned forward ``f`` is at hand."""
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    feeds = {getattr(f, name): aligned(t) for name, t in operands.items() if t is not None}
    feeds[f.y] = y
    saved: list[torch.Tensor | None] = []
    for name in stats:
        tensor, stat = getattr(f, name), None
        if tensor is not None:
            stat = feeds[tensor] = torch.empty((x.shape[0], 1, 1, 1), dtype=torch.float32, device=x.device)
        saved.append(stat)
    execute(f.graph, feeds)
    return (y, *saved)


def run_backward(op: str, key: Hashable, make: Callable[[], Any], device: torch.device,
                 operands: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> None:
    """Operator ``op``'s backward: its graph for ``key`` (``make()``, planned once and cached) fed ``operands`` and
    the caller's ``outputs`` (graph field -> tensor) and run."""
    b = cache(op).get(key, lambda: planned(make(), device))
    feeds = {getattr(b, name): aligned(t) for name, t in operands.items()}
    feeds.update({getattr(b, name): t for name, t in outputs.items()})
    execute(b.graph, feeds)


def fake_forward(x: torch.Tensor, statistics: int) -> tuple[torch.Tensor, ...]:
    """A TRAINING forward's fake result: y like x, then ``statistics`` FLOAT (rows, 1, 1, 1)."""
    return (torch.empty_like(x), *(x.new_empty((x.shape[0], 1, 1, 1), dtype=torch.float32)
                                   for _ in range(statistics)))


def fake_inference(x: torch.Tensor, *_args: Any, **_kwargs: Any) -> torch.Tensor:
    """An INFERENCE forward's fake result: y like x."""
    return torch.empty_like(x)


def register_autograd(forward: str, backward: Callable[..., tuple], bias_at: int, pass_has_bias: bool,
                      eager_forward: Callable[..., tuple], eager_backward: Callable[..., tuple]) -> Any:
    """The autograd of the TRAINING forward ``forward``, whose inputs are x, scale (at 0 and 1), a bias at
    ``bias_at`` (None where absent) and arguments that take no gradient, and whose outputs are y and its
    statistics: x, scale and the statistics are saved (the statistics marked non-differentiable), and y's gradient
    runs ``backward(dy, x, scale, *statistics)`` (with ``has_bias`` last where ``pass_has_bias``) -> (dx, dscale,
    dbias), the bias's gradient given only where a bias was.

    Returns the same autograd as a ``torch.autograd.Function`` over the operators' CUDA kernels themselves
    (``eager_forward``, ``eager_backward``): what the public functions run in eager mode (:func:`run_public`), without
    torch.library's dispatch and autograd wrapper, which cost more host time per call than the kernels take on the
    GPU at common sizes. Under ``create_graph`` its backward is the operator's, as the registered autograd's is."""

    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        statistics = output[1:]
        ctx.save_for_backward(inputs[0], inputs[1], *statistics)
        ctx.input_count, ctx.has_bias = len(inputs), inputs[bias_at] is not None
        ctx.set_materialize_grads(False)
        ctx.mark_non_differentiable(*statistics)

    def gradients_by(run: Callable[..., tuple]) -> Callable[..., tuple]:
        def gradients(ctx: Any, dy: torch.Tensor | None, *_d_statistics: Any) -> tuple:
            grads: list[Any] = [None] * ctx.input_count
            if dy is None:  # y took no part in what is differentiated
                return tuple(grads)
            x, scale, *statistics = ctx.saved_tensors
            dx, dscale, dbias = run(dy.contiguous(), x, scale, *statistics,
                                    *((ctx.has_bias,) if pass_has_bias else ()))
            grads[0], grads[1] = dx, dscale
            grads[bias_at] = dbias if ctx.has_bias else None
            return tuple(grads)

        return gradients

    torch.library.register_autograd(forward, gradients_by(backward), setup_context=setup_context)
    grad_enabled = torch.is_grad_enabled

    def eager_gradients(*args: Any) -> tuple:
        # (create_graph: the operator, so that differentiating the gradients fails as it does through the op)
        return (backward if grad_enabled() else eager_backward)(*args)

    saving, eager_backward_fn = setup_context, gradients_by(eager_gradients)  # (a class body reads them by these names)

    class EagerNorm(torch.autograd.Function):
        """The operator's autograd over its CUDA kernels (see register_autograd)."""

        forward = staticmethod(eager_forward)
        setup_context = staticmethod(saving)
        backward = staticmethod(eager_backward_fn)

    return EagerNorm


def _eager_probe() -> Callable[[tuple], bool]:
    """``plain(tensors)``: whether a public function's call may run its operators' kernels directly (eager mode:
    not traced by torch.compile; plain tensors, no __torch_function__ or dispatch mode, no functorch transform);
    anything else goes through the registered operators, which those mechanisms see."""
    compiler = getattr(torch, "compiler", None)
    is_compiling = getattr(compiler, "is_compiling", None) or (lambda: False)
    has_tf = torch.overrides.has_torch_function
    c = torch._C
    modes = getattr(c, "_len_torch_dispatch_stack", None)
    tf_mode = getattr(c, "_is_torch_function_mode_enabled", None)
    functorch = getattr(c, "_are_functorch_transforms_active", None)
    if modes is None or tf_mode is None or functorch is None:  # (a torch without these probes: never eager)
        return lambda _tensors: False
    T = torch.Tensor

    def plain(tensors: tuple) -> bool:
        return (not is_compiling() and all(t is None or t.__class__ is T for t in tensors) and not modes()
                and not tf_mode() and not functorch() and not has_tf(tuple(t for t in tensors if t is not None)))

    return plain


eager_call = _eager_probe()


def run_public(input: torch.Tensor, training: Callable[..., tuple], inference: Callable[..., torch.Tensor],
               args: tuple, differentiable: Sequence[torch.Tensor | None],
               eager: tuple[Any, Callable[..., torch.Tensor]]) -> torch.Tensor:
    """A public function's call: the TRAINING operator where autograd records the call on ``differentiable``
    (its statistics saved for the backward), else the INFERENCE one, on the operators' 4-D ``args`` (eps among
    them); y in ``input``'s shape. In eager mode (:data:`eager_call`, eps a float or int as the schema takes it)
    ``eager`` (the operator's autograd Function, the inference kernel) runs instead of the registered operators: the
    same kernels and autograd, without torch.library's dispatch."""
    grad = needs_grad(*differentiable)
    tensors = tuple(a for a in args if a.__class__ not in (float, int))  # (eps aside: a float or an int)
    if len(tensors) == len(args) - 1 and eager_call((*tensors, *differentiable)):
        function, kernel = eager
        y = function.apply(*args)[0] if grad else kernel(*args)
    else:
        y = training(*args)[0] if grad else inference(*args)
    return y.reshape(input.shape)
