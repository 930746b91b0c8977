"""A float64 numpy interpreter: one reference function per IR node kind, registered with ``@reference(kind)``.

It is the ground truth the other engines are tested against, so it favours obvious code over speed: every
value is computed in float64 on the host and cast only when written into an output buffer. Buffers may be
numpy arrays, host scalars, or framework tensors (torch / cupy / any DLPack object); framework tensors cross
over through the small `_host` adapter below, so the engine itself only ever sees numpy.

Composites have a reference of their own, written from their definition rather than from their decomposition,
so ``ReferenceEngine(program=True)`` (which interprets the graph *after* the IR passes) checks a decomposition
against it.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..enums import diagonal_alignment, reduction_mode
from ..errors import cudnnGraphNotSupportedError
from ..ir.ops.norms import normalized_axes
from .base import BaseEngine, CompiledPlan, ExecutionContext, PlanConfig
from .engine_ids import REFERENCE_ENGINE_ID

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_erf = np.frompyfunc(math.erf, 1, 1)


def _erf64(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erf(x), dtype=np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free form


def _gelu_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + _erf64(x / math.sqrt(2.0)))


def _gelu_tanh_parts(x: np.ndarray):
    u = _SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
    return u, np.tanh(u)


def _relu_fwd(p: dict, x: np.ndarray) -> np.ndarray:
    lo, hi, slope = p["relu_lower_clip"], p["relu_upper_clip"], p["relu_lower_clip_slope"]
    y = np.where(x < lo, lo + slope * (x - lo), x)
    return np.where(x > hi, hi, y)


def _relu_bwd(p: dict, dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    lo, hi, slope = p["relu_lower_clip"], p["relu_upper_clip"], p["relu_lower_clip_slope"]
    grad = np.where(x <= lo, slope, np.where(x >= hi, 0.0, 1.0))
    return dy * grad


def _gelu_tanh_bwd(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    _, t = _gelu_tanh_parts(x)
    du = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x ** 2)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


def _swish_bwd(p: dict, dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    b = p["swish_beta"]
    s = _sigmoid(b * x)
    return dy * (s + b * x * s * (1.0 - s))


def _flag(x: np.ndarray) -> np.ndarray:
    return (x != 0).astype(np.float64)


# mode -> f(params, *inputs) over float64 arrays; inputs are IN_0, IN_1, IN_2 in order
_POINTWISE: dict[str, Any] = {  # mode -> f(params, *inputs)
    "ADD": lambda p, a, b: a + b,
    "MUL": lambda p, a, b: a * b,
    "SUB": lambda p, a, b: a - b,
    "DIV": lambda p, a, b: a / b,
    "ADD_SQUARE": lambda p, a, b: a + b * b,
    "MAX": lambda p, a, b: np.maximum(a, b),
    "MIN": lambda p, a, b: np.minimum(a, b),
    "MOD": lambda p, a, b: np.fmod(a, b),  # truncated (C fmod), sign of the dividend
    "POW": lambda p, a, b: np.power(a, b),
    "SQRT": lambda p, x: np.sqrt(x),
    "ABS": lambda p, x: np.abs(x),
    "CEIL": lambda p, x: np.ceil(x),
    "FLOOR": lambda p, x: np.floor(x),
    "COS": lambda p, x: np.cos(x),
    "SIN": lambda p, x: np.sin(x),
    "TAN": lambda p, x: np.tan(x),
    "EXP": lambda p, x: np.exp(x),
    "LOG": lambda p, x: np.log(x),
    "NEG": lambda p, x: -x,
    "RSQRT": lambda p, x: 1.0 / np.sqrt(x),
    "RECIPROCAL": lambda p, x: 1.0 / x,
    "ERF": lambda p, x: _erf64(x),
    "IDENTITY": lambda p, x: x.copy(),
    "RELU_FWD": _relu_fwd,
    "TANH_FWD": lambda p, x: np.tanh(x),
    "SIGMOID_FWD": lambda p, x: _sigmoid(x),
    "ELU_FWD": lambda p, x: np.where(x < 0, p["elu_alpha"] * np.expm1(np.minimum(x, 0)), x),
    "GELU_FWD": lambda p, x: x * _gelu_cdf(x),
    "GELU_APPROX_TANH_FWD": lambda p, x: 0.5 * x * (1.0 + _gelu_tanh_parts(x)[1]),
    "SOFTPLUS_FWD": lambda p, x: np.logaddexp(0.0, p["softplus_beta"] * x) / p["softplus_beta"],
    "SWISH_FWD": lambda p, x: x * _sigmoid(p["swish_beta"] * x),
    # backward activations: IN_0 = dy, IN_1 = x (the forward input)
    "RELU_BWD": _relu_bwd,
    "TANH_BWD": lambda p, dy, x: dy * (1.0 - np.tanh(x) ** 2),
    "SIGMOID_BWD": lambda p, dy, x: dy * _sigmoid(x) * (1.0 - _sigmoid(x)),
    "ELU_BWD": lambda p, dy, x: dy * np.where(x > 0, 1.0, p["elu_alpha"] * np.exp(np.minimum(x, 0))),
    "GELU_BWD": lambda p, dy, x: dy * (_gelu_cdf(x) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)),
    "GELU_APPROX_TANH_BWD": lambda p, dy, x: _gelu_tanh_bwd(dy, x),
    "SOFTPLUS_BWD": lambda p, dy, x: dy * _sigmoid(p["softplus_beta"] * x),
    "SWISH_BWD": _swish_bwd,
    "CMP_EQ": lambda p, a, b: (a == b).astype(np.float64),
    "CMP_NEQ": lambda p, a, b: (a != b).astype(np.float64),
    "CMP_GT": lambda p, a, b: (a > b).astype(np.float64),
    "CMP_GE": lambda p, a, b: (a >= b).astype(np.float64),
    "CMP_LT": lambda p, a, b: (a < b).astype(np.float64),
    "CMP_LE": lambda p, a, b: (a <= b).astype(np.float64),
    "LOGICAL_AND": lambda p, a, b: _flag(a) * _flag(b),
    "LOGICAL_OR": lambda p, a, b: np.maximum(_flag(a), _flag(b)),
    "LOGICAL_NOT": lambda p, x: 1.0 - _flag(x),
    "BINARY_SELECT": lambda p, a, b, mask: np.where(mask != 0, a, b),  # y = mask ? IN_0 : IN_1
    "GEN_INDEX": None,  # needs the output shape: handled in _pointwise
}
_PREFIX = "CUDNN_POINTWISE_"

_REDUCE: dict[Any, Callable[[np.ndarray, tuple], np.ndarray]] = {
    reduction_mode.ADD: lambda x, ax: np.sum(x, axis=ax, keepdims=True),
    reduction_mode.MUL: lambda x, ax: np.prod(x, axis=ax, keepdims=True),
    reduction_mode.MIN: lambda x, ax: np.min(x, axis=ax, keepdims=True),
    reduction_mode.MAX: lambda x, ax: np.max(x, axis=ax, keepdims=True),
    reduction_mode.AMAX: lambda x, ax: np.max(np.abs(x), axis=ax, keepdims=True),
    reduction_mode.AVG: lambda x, ax: np.mean(x, axis=ax, keepdims=True),
    reduction_mode.NORM1: lambda x, ax: np.sum(np.abs(x), axis=ax, keepdims=True),
    reduction_mode.NORM2: lambda x, ax: np.sqrt(np.sum(x * x, axis=ax, keepdims=True)),
    reduction_mode.MUL_NO_ZEROS: lambda x, ax: np.prod(np.where(x == 0, 1.0, x), axis=ax, keepdims=True),
}


Read = Callable[[Any], np.ndarray]  # IR tensor -> its float64 value
# kind -> (run(node, read) -> the output value, check(node) -> why it is unsupported or None)
REFERENCES: dict[str, tuple] = {}


def reference(kind: str, check: Callable[[Any], str | None] | None = None):
    def register(fn: Callable[[Any, Read], np.ndarray]):
        if kind in REFERENCES:
            raise ValueError(f"node kind {kind!r} has two reference functions")
        REFERENCES[kind] = (fn, check or (lambda node: None))
        return fn
    return register


def _unsupported_pointwise(node: Any) -> str | None:
    mode = node.params.get("mode", "")
    if not mode.startswith(_PREFIX) or mode[len(_PREFIX):] not in _POINTWISE:
        return f"pointwise mode {mode}"
    return None


@reference("pointwise", _unsupported_pointwise)
def _pointwise(node: Any, read: Read) -> np.ndarray:
    mode = node.params["mode"][len(_PREFIX):]
    ins = [read(node.inputs[p]) for p in ("IN_0", "IN_1", "IN_2") if p in node.inputs]
    if mode == "GEN_INDEX":
        out_dim = tuple(node.outputs["OUT_0"].dim)
        axis = node.params["axis"]
        shape = [1] * len(out_dim)
        shape[axis] = out_dim[axis]
        return np.broadcast_to(np.arange(out_dim[axis], dtype=np.float64).reshape(shape), out_dim)
    return _POINTWISE[mode](node.params, *ins)


@reference("matmul")
def _matmul(node: Any, read: Read) -> np.ndarray:
    return np.matmul(read(node.inputs["A"]), read(node.inputs["B"]))


@reference("reduction", lambda node: None if node.params.get("mode") in _REDUCE else
           f"reduction mode {node.params.get('mode')}")
def _reduction(node: Any, read: Read) -> np.ndarray:
    x = read(node.inputs["X"])
    y_dim = node.outputs["Y"].dim
    axes = tuple(i for i, (xd, yd) in enumerate(zip(x.shape, y_dim)) if yd == 1 and xd != 1)
    return _REDUCE[node.params["mode"]](x, axes) if axes else x.copy()


def _band_indices(shape: tuple) -> tuple:
    rows = np.arange(shape[-2]).reshape(-1, 1)
    cols = np.arange(shape[-1]).reshape(1, -1)
    return rows, cols


@reference("diagonal_band_mask")
def _diagonal_band_mask(node: Any, read: Read) -> np.ndarray:
    """Keep x[..., i, j] where j <= i + shift + R (right bound) and j > i + shift - L (left bound)."""
    x = read(node.inputs["X"])
    p = node.params
    rows, cols = _band_indices(x.shape)
    shift = x.shape[-1] - x.shape[-2] if p["diagonal_alignment"] is diagonal_alignment.BOTTOM_RIGHT else 0
    keep = np.ones((x.shape[-2], x.shape[-1]), dtype=bool)
    if p["right_bound"] is not None:
        keep &= cols <= rows + shift + p["right_bound"]
    if p["left_bound"] is not None:
        keep &= cols > rows + shift - p["left_bound"]
    return np.where(keep, x, float(p["fill_value"]))


@reference("diagonal_band_mask_op")
def _diagonal_band_mask_op(node: Any, read: Read) -> np.ndarray:
    """The unified op, one bound: left keeps j + L > i; right keeps i + R >= j (R = 0 without a BOUND)."""
    x = read(node.inputs["X"])
    fill = read(node.inputs["B"]).reshape(-1)[0]
    bound = _scalar(read, node.inputs["BOUND"]) if "BOUND" in node.inputs else 0.0
    rows, cols = _band_indices(x.shape)
    keep = cols + bound > rows if node.params["side"] == "left" else rows + bound >= cols
    return np.where(keep, x, fill)


# ---- convolution: written from the definition, one kernel offset at a time -----------------------------------------
def _conv_windows(p: dict, out_spatial: tuple, kernel: tuple) -> Any:
    """For every kernel offset r: r and the strided slices of the padded input it meets at every output point."""
    import itertools

    for r in itertools.product(*(range(k) for k in kernel)):
        yield r, tuple(slice(ri * d, ri * d + (o - 1) * s + 1, s)
                       for ri, d, o, s in zip(r, p["dilation"], out_spatial, p["stride"]))


def _padded(x: np.ndarray, p: dict) -> np.ndarray:
    return np.pad(x, [(0, 0), (0, 0)] + list(zip(p["pre_padding"], p["post_padding"])))


def _flip_if_convolution(w: np.ndarray, p: dict) -> np.ndarray:
    if p["convolution_mode"].name == "CONVOLUTION":  # true convolution: the kernel reversed in every spatial axis
        return w[(slice(None), slice(None)) + (slice(None, None, -1),) * (w.ndim - 2)]
    return w


@reference("conv_fprop")
def _conv_fprop(node: Any, read: Read) -> np.ndarray:
    p, x, w = node.params, read(node.inputs["X"]), read(node.inputs["W"])
    w = _flip_if_convolution(w, p)
    y = np.zeros(tuple(node.outputs["Y"].dim))
    xp, groups = _padded(x, p), x.shape[1] // w.shape[1]
    kg, cg = w.shape[0] // groups, w.shape[1]
    for r, sl in _conv_windows(p, y.shape[2:], w.shape[2:]):
        patch = xp[(slice(None), slice(None)) + sl]
        for g in range(groups):
            y[:, g * kg:(g + 1) * kg] += np.einsum("nc...,kc->nk...", patch[:, g * cg:(g + 1) * cg],
                                                    w[(slice(g * kg, (g + 1) * kg), slice(None)) + r])
    return y


@reference("conv_dgrad")
def _conv_dgrad(node: Any, read: Read) -> np.ndarray:
    p, dy, w = node.params, read(node.inputs["DY"]), read(node.inputs["W"])
    w = _flip_if_convolution(w, p)
    dims = tuple(node.outputs["DX"].dim)
    dxp = _padded(np.zeros(dims), p)
    groups = dims[1] // w.shape[1]
    kg, cg = w.shape[0] // groups, w.shape[1]
    for r, sl in _conv_windows(p, dy.shape[2:], w.shape[2:]):
        for g in range(groups):
            dxp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl] += np.einsum(
                "nk...,kc->nc...", dy[:, g * kg:(g + 1) * kg], w[(slice(g * kg, (g + 1) * kg), slice(None)) + r])
    crop = tuple(slice(pre, pre + d) for pre, d in zip(p["pre_padding"], dims[2:]))
    return dxp[(slice(None), slice(None)) + crop]


@reference("conv_wgrad")
def _conv_wgrad(node: Any, read: Read) -> np.ndarray:
    p, x, dy = node.params, read(node.inputs["X"]), read(node.inputs["DY"])
    dims = tuple(node.outputs["DW"].dim)
    dw = np.zeros(dims)
    xp, groups = _padded(x, p), x.shape[1] // dims[1]
    kg, cg = dims[0] // groups, dims[1]
    for r, sl in _conv_windows(p, dy.shape[2:], dims[2:]):
        patch = xp[(slice(None), slice(None)) + sl]
        for g in range(groups):
            n = dy.shape[0]
            dw[(slice(g * kg, (g + 1) * kg), slice(None)) + r] = np.einsum(
                "nkp,ncp->kc", dy[:, g * kg:(g + 1) * kg].reshape(n, kg, -1),
                patch[:, g * cg:(g + 1) * cg].reshape(n, cg, -1))
    return _flip_if_convolution(dw, p)


# ---- layout ops -------------------------------------------------------------------------------------------------
@reference("transpose")
def _transpose(node: Any, read: Read) -> np.ndarray:
    return np.transpose(read(node.inputs["X"]), node.params["permutation"])


@reference("concatenate")
def _concatenate(node: Any, read: Read) -> np.ndarray:
    return np.concatenate([read(t) for t in node.list_input("X")], axis=node.params["axis"])


# ---- normalizations ----------------------------------------------------------------------------------------------
def _scalar(read: Read, t: Any) -> float:
    """The one value of a scalar operand (epsilon, momentum, a bound)."""
    return float(read(t).reshape(-1)[0])


def _refuse_peer_stats(node: Any) -> None:
    if node.list_input("PEER_STATS"):
        raise ValueError(f"{node.spec.method if node.spec else node.op} {node.name!r}: peer statistics come from "
                         "other GPUs; the float64 reference has no peers")


@reference("norm_forward")
def _norm_forward(node: Any, read: Read) -> np.ndarray:
    """y = (x - mean) * inv_std * scale + bias over the axes where scale is not 1 (RMS: no mean); the statistics
    go to the MEAN / INV_VARIANCE outputs through ``node.reference_extra`` (see ReferencePlan)."""
    x, scale = read(node.inputs["X"]), read(node.inputs["SCALE"])
    if "EPSILON" not in node.inputs:  # batchnorm inference: the statistics are given
        return (x - read(node.inputs["MEAN"])) * read(node.inputs["INV_VARIANCE"]) * scale + read(node.inputs["BIAS"])
    _refuse_peer_stats(node)
    eps = _scalar(read, node.inputs["EPSILON"])
    axes = normalized_axes(node.params["mode"], list(node.inputs["SCALE"].dim), list(x.shape))
    rms = node.params["mode"] == "CUDNN_RMS_NORM"
    mean = x.mean(axis=axes, keepdims=True)
    if rms:  # RMS norm: no centring
        mean = np.zeros_like(mean)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    y = (x - mean) * inv * scale
    if "BIAS" in node.inputs:
        y = y + read(node.inputs["BIAS"])
    extra = {}
    if "MEAN" in node.outputs:
        extra[node.outputs["MEAN"].uid] = mean
    if "INV_VARIANCE" in node.outputs:
        extra[node.outputs["INV_VARIANCE"].uid] = inv
    if "NEXT_RUNNING_MEAN" in node.outputs:  # exponential averages; the variance's is unbiased (n / (n - 1))
        m = _scalar(read, node.inputs["MOMENTUM"])
        n = x.size // mean.size
        extra[node.outputs["NEXT_RUNNING_MEAN"].uid] = (1 - m) * read(node.inputs["PREV_RUNNING_MEAN"]) + m * mean
        extra[node.outputs["NEXT_RUNNING_VAR"].uid] = ((1 - m) * read(node.inputs["PREV_RUNNING_VAR"])
                                                       + m * var * n / max(n - 1, 1))
    return y if not extra else _WithExtra(y, extra)


@reference("genstats")
def _genstats(node: Any, read: Read) -> np.ndarray:
    """Per-channel sum and sum of squares over every axis but 1."""
    x = read(node.inputs["X"])
    axes = tuple(i for i in range(x.ndim) if i != 1)
    return _WithExtra(x.sum(axis=axes, keepdims=True), {node.outputs["SQ_SUM"].uid: (x * x).sum(axis=axes,
                                                                                             keepdims=True)})


@reference("norm_backward")
def _norm_backward(node: Any, read: Read) -> np.ndarray:
    """Gradients of y = xhat * scale + bias, xhat = (x - mean) * inv (RMS: x * inv), over the normalized axes
    (layer / RMS: where scale is not 1; instance: the spatial axes): dscale, dbias sum where scale is 1."""
    _refuse_peer_stats(node)
    dy, x, scale = read(node.inputs["DY"]), read(node.inputs["X"]), read(node.inputs["SCALE"])
    inv = read(node.inputs["INV_VARIANCE"])
    rms = node.params["mode"] == "CUDNN_RMS_NORM"
    mean = 0.0 if rms else read(node.inputs["MEAN"])
    dims = node.inputs["SCALE"].dim
    norm_axes = normalized_axes(node.params["mode"], list(dims), list(x.shape))
    other_axes = tuple(i for i, s in enumerate(dims) if int(s) == 1)
    xhat = (x - mean) * inv
    g = dy * scale
    dx = g - xhat * (g * xhat).mean(axis=norm_axes, keepdims=True)
    if not rms:
        dx = dx - g.mean(axis=norm_axes, keepdims=True)
    extra = {node.outputs["DSCALE"].uid: (dy * xhat).sum(axis=other_axes, keepdims=True)}
    if "DBIAS" in node.outputs:
        extra[node.outputs["DBIAS"].uid] = dy.sum(axis=other_axes, keepdims=True)
    return _WithExtra(dx * inv, extra)


class _WithExtra(np.ndarray):
    """A result array carrying the values of a node's other outputs (uid -> array)."""

    extra: dict

    def __new__(cls, result: np.ndarray, extra: dict) -> _WithExtra:
        obj = np.asarray(result).view(cls)
        obj.extra = extra
        return obj


class ReferenceEngine(BaseEngine):
    """``program=True`` interprets the graph after the IR passes (decomposed, legalized) instead of the user's."""

    engine_id = REFERENCE_ENGINE_ID
    name = "reference_float64"

    def __init__(self, program: bool = False) -> None:
        self.program = program

    def _nodes(self, graph: Any) -> list:
        if not self.program:
            return graph.nodes
        from ..ir.passes import PassOptions, prepare  # the passes only ask what the running cuDNN offers

        return prepare(graph, PassOptions(available=lambda feature, at_least=0: False)).nodes

    def check_support(self, graph: Any) -> None:
        for node in self._nodes(graph):
            entry = REFERENCES.get(node.op)
            why = f"{node.op} nodes are not supported" if entry is None else entry[1](node)
            if why:
                raise cudnnGraphNotSupportedError(f"reference engine: {why} (node {node.name!r})")

    def build_plan(self, graph: Any, config: PlanConfig, ctx: ExecutionContext) -> CompiledPlan:
        return ReferencePlan(graph, config, self._nodes(graph))


class ReferencePlan(CompiledPlan):
    def __init__(self, graph: Any, config: PlanConfig, nodes: list) -> None:
        self.engine_id = config.engine_id
        self.name = config.name
        self._nodes = nodes  # the graph is frozen: this snapshot stays valid
        self._outputs = graph.get_outputs()

    def execute(self, graph: Any, buffers: dict[int, Any], ctx: ExecutionContext) -> None:
        values: dict[int, np.ndarray] = {}

        def read(t: Any) -> np.ndarray:
            if t.uid not in values:
                if t.uid in buffers:
                    values[t.uid] = _to_float64(_host(buffers[t.uid]), t)
                elif t.pass_by_value is not None:
                    values[t.uid] = np.full(tuple(t.dim), float(t.pass_by_value))
                else:
                    raise ValueError(f"variant pack: no buffer for input tensor {t.name!r} (uid {t.uid})")
            return values[t.uid]

        with np.errstate(all="ignore"):  # inf/nan are legitimate results here, as on the GPU
            for node in self._nodes:
                result = REFERENCES[node.op][0](node, read)
                extra = getattr(result, "extra", {})  # other outputs of a node with several (the norms' stats)
                for t in node.outputs.values():
                    value = extra.get(t.uid, result)
                    values[t.uid] = np.broadcast_to(np.asarray(value), tuple(t.dim))
        for t in self._outputs:
            if t.uid not in buffers:
                raise ValueError(f"variant pack: no buffer for output tensor {t.name!r} (uid {t.uid})")
            _write(buffers[t.uid], values[t.uid].reshape(tuple(t.dim)), t)


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
    raise TypeError(f"the reference engine reads arrays or framework tensors, not {type(data).__name__}")


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
    raise ValueError(f"buffer of shape {arr.shape} does not match tensor {t.name!r} dims {list(dims)}")


def _strided(flat: np.ndarray, t: Any) -> np.ndarray:
    dims, strides = tuple(t.dim), tuple(t.stride)
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    if span > flat.size:
        raise ValueError(f"flat buffer of {flat.size} elements is too small for tensor {t.name!r} "
                         f"(dims {list(dims)}, stride {list(strides)})")
    return np.lib.stride_tricks.as_strided(flat, dims, tuple(s * flat.itemsize for s in strides))


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
    raise TypeError(f"the reference engine writes into arrays or framework tensors, not {type(dst).__name__}")
