"""Pointwise modes, written from their definitions."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference

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
