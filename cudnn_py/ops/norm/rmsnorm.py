"""RMSNorm over the last axis as torch custom operators on cudnn_py's ``rmsnorm`` / ``rmsnorm_backward`` graphs.

The public function is :func:`rms_norm` (``cudnn.ops.norm.rms_norm``). Underneath, three operators of the
``cudnn_py`` namespace (``torch.ops.cudnn_py.*``), each with a CUDA kernel and a fake implementation:

* ``rmsnorm(x, scale, eps, bias=None) -> (y, inv_var)``: the TRAINING forward, saving the inverse RMS (FLOAT
  (rows, 1, 1, 1)); its autograd runs ``rmsnorm_bwd``;
* ``rmsnorm_bwd(dy, x, scale, inv_var, has_dbias=False) -> (dx, dscale, dbias)`` (dbias empty without has_dbias);
* ``rmsnorm_inference(x, scale, eps, bias=None) -> y``: the INFERENCE forward (no statistics), used where autograd
  records nothing (no operand requires grad, or grad mode is off).

x is (rows, hidden_size, 1, 1), scale and bias (1, hidden_size, 1, 1) of x's dtype, all contiguous. Graphs are
cached per shape, dtype, device, eps and bias (a bounded LRU), and run on torch's current stream.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ...enums import data_type, norm_forward_phase
from ...errors import InvalidValueError
from ._common import (
    NAMESPACE,
    define,
    epsilon,
    fake_forward,
    fake_inference,
    new_graph,
    operand,
    output,
    register_autograd,
    require_canonical_4d,
    require_cuda,
    require_dtype,
    require_public_input,
    require_rows,
    require_same_device,
    require_stats,
    rows_of,
    run_backward,
    run_forward,
    run_public,
)

_FWD, _BWD = f"{NAMESPACE}::rmsnorm", f"{NAMESPACE}::rmsnorm_bwd"


# ---- the graphs -----------------------------------------------------------------------------------------------------
class Forward(NamedTuple):
    graph: Any
    x: Any
    scale: Any
    bias: Any
    y: Any
    inv_var: Any  # None in INFERENCE


class Backward(NamedTuple):
    graph: Any
    dy: Any
    x: Any
    scale: Any
    inv_var: Any
    dx: Any
    dscale: Any
    dbias: Any  # None without has_dbias


def forward_graph(rows: int, hidden: int, dtype: torch.dtype, eps: float, has_bias: bool,
                  training: bool) -> Forward:
    """The forward graph (not yet planned) and its tensors."""
    g = new_graph(dtype)
    x = operand(g, "X", (rows, hidden, 1, 1), dtype)
    scale = operand(g, "scale", (1, hidden, 1, 1), dtype)
    bias = operand(g, "bias", (1, hidden, 1, 1), dtype) if has_bias else None
    phase = norm_forward_phase.TRAINING if training else norm_forward_phase.INFERENCE
    y, inv_var = g.rmsnorm(norm_forward_phase=phase, input=x, scale=scale, bias=bias, epsilon=epsilon(g, eps),
                           name="rmsnorm")
    output(y, (rows, hidden, 1, 1), dtype)
    if training:
        output(inv_var, (rows, 1, 1, 1), data_type.FLOAT)
    return Forward(g, x, scale, bias, y, inv_var if training else None)


def backward_graph(rows: int, hidden: int, dtype: torch.dtype, has_dbias: bool) -> Backward:
    """The backward graph (not yet planned) and its tensors."""
    g = new_graph(dtype)
    dy = operand(g, "DY", (rows, hidden, 1, 1), dtype)
    x = operand(g, "X", (rows, hidden, 1, 1), dtype)
    scale = operand(g, "scale", (1, hidden, 1, 1), dtype)
    inv_var = operand(g, "inv_var", (rows, 1, 1, 1), data_type.FLOAT)
    dx, dscale, dbias = g.rmsnorm_backward(grad=dy, input=x, scale=scale, inv_variance=inv_var,
                                           has_dbias=has_dbias, name="rmsnorm_bwd")
    output(dx, (rows, hidden, 1, 1), dtype)
    output(dscale, (1, hidden, 1, 1), dtype)
    if has_dbias:
        output(dbias, (1, hidden, 1, 1), dtype)
    return Backward(g, dy, x, scale, inv_var, dx, dscale, dbias if has_dbias else None)


# ---- the operand checks (before any GPU work) -----------------------------------------------------------------------
def validate_forward(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
                     op: str = _FWD) -> tuple[int, int]:
    tensors = {"x": x, "scale": scale} if bias is None else {"x": x, "scale": scale, "bias": bias}
    require_cuda(op, **tensors)
    require_same_device(op, x, **{n: t for n, t in tensors.items() if n != "x"})
    rows, hidden = require_rows(op, x)
    require_canonical_4d("scale", scale, 1, hidden)
    require_dtype("scale", scale, x.dtype)
    if bias is not None:
        require_canonical_4d("bias", bias, 1, hidden)
        require_dtype("bias", bias, x.dtype)
    return rows, hidden


def validate_backward(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor,
                      inv_var: torch.Tensor) -> tuple[int, int]:
    rows, hidden = validate_forward(x, scale, None)
    require_cuda(_BWD, dy=dy, x=x, scale=scale, inv_var=inv_var)
    require_same_device(_BWD, x, dy=dy, scale=scale, inv_var=inv_var)
    require_canonical_4d("dy", dy, rows, hidden)
    require_dtype("dy", dy, x.dtype)
    require_stats("inv_var", inv_var, rows)
    return rows, hidden


# ---- the CUDA kernels ----------------------------------------------------------------------------------------------
def _forward(x: torch.Tensor, scale: torch.Tensor, eps: float, bias: torch.Tensor | None, training: bool,
             op: str) -> tuple[torch.Tensor | None, ...]:
    rows, hidden = validate_forward(x, scale, bias, op)
    return run_forward(op, (x.shape, x.dtype, x.device, float(eps), bias is not None),
                       lambda t: forward_graph(rows, hidden, x.dtype, eps, bias is not None, t), training, x,
                       {"x": x, "scale": scale, "bias": bias}, ("inv_var",))


def _rmsnorm_cuda(x: torch.Tensor, scale: torch.Tensor, eps: float,
                  bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    y, inv_var = _forward(x, scale, eps, bias, True, _FWD)
    assert y is not None and inv_var is not None
    return y, inv_var


def _rmsnorm_inference_cuda(x: torch.Tensor, scale: torch.Tensor, eps: float,
                            bias: torch.Tensor | None = None) -> torch.Tensor:
    y = _forward(x, scale, eps, bias, False, f"{NAMESPACE}::rmsnorm_inference")[0]
    assert y is not None
    return y


def _rmsnorm_bwd_cuda(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, inv_var: torch.Tensor,
                      has_dbias: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows, hidden = validate_backward(dy, x, scale, inv_var)
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dscale = torch.empty_like(scale, memory_format=torch.contiguous_format)
    outputs = {"dx": dx, "dscale": dscale}
    if has_dbias:
        dbias = outputs["dbias"] = torch.empty_like(dscale)
    else:
        dbias = torch.empty(0, dtype=scale.dtype, device=x.device)
    run_backward(_BWD, (x.shape, x.dtype, x.device, bool(has_dbias)),
                 lambda: backward_graph(rows, hidden, x.dtype, bool(has_dbias)), x.device,
                 {"dy": dy, "x": x, "scale": scale, "inv_var": inv_var}, outputs)
    return dx, dscale, dbias


# ---- the fake implementations (torch.compile, FakeTensorMode, meta) ------------------------------------------------
def _rmsnorm_fake(x: torch.Tensor, scale: torch.Tensor, eps: float,
                  bias: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    return fake_forward(x, 1)


def _rmsnorm_bwd_fake(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, inv_var: torch.Tensor,
                      has_dbias: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dbias = torch.empty_like(scale) if has_dbias else scale.new_empty((0,))
    return torch.empty_like(x), torch.empty_like(scale), dbias


define("rmsnorm(Tensor x, Tensor scale, float eps, Tensor? bias=None) -> (Tensor, Tensor)",
       _rmsnorm_cuda, _rmsnorm_fake)
define("rmsnorm_bwd(Tensor dy, Tensor x, Tensor scale, Tensor inv_var, bool has_dbias=False) "
       "-> (Tensor, Tensor, Tensor)", _rmsnorm_bwd_cuda, _rmsnorm_bwd_fake)
define("rmsnorm_inference(Tensor x, Tensor scale, float eps, Tensor? bias=None) -> Tensor",
       _rmsnorm_inference_cuda, fake_inference)
# (x, scale, eps, bias): the bias's gradient where a bias was given, has_dbias telling the backward so
_EAGER = register_autograd(_FWD, torch.ops.cudnn_py.rmsnorm_bwd, bias_at=3, pass_has_bias=True,
                           eager_forward=_rmsnorm_cuda, eager_backward=_rmsnorm_bwd_cuda)


# ---- the public function --------------------------------------------------------------------------------------------
def rms_norm(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
             eps: float = 1e-5) -> torch.Tensor:
    """RMSNorm of ``input`` over its last axis, times ``weight`` (that axis's size), plus ``bias`` if given:
    ``input / sqrt(mean(input², -1) + eps) * weight + bias``, in cuDNN (fp16 / bf16 / fp32 CUDA tensors, weight and
    bias of input's dtype). Differentiable in input, weight and bias."""
    require_public_input(input)
    hidden_size = input.shape[-1]
    if hidden_size <= 0:
        raise InvalidValueError(f"input's final dimension must be positive, got {hidden_size}")
    if tuple(weight.shape) != (hidden_size,):
        raise InvalidValueError(f"weight must have shape ({hidden_size},), got {tuple(weight.shape)}")
    if weight.device != input.device or weight.dtype != input.dtype:
        raise InvalidValueError("weight must have the same device and dtype as input")
    if bias is not None and (bias.shape != weight.shape or bias.device != input.device or bias.dtype != input.dtype):
        raise InvalidValueError("bias must have the same shape, device, and dtype as weight")
    rows = rows_of(input, hidden_size)
    x = input.reshape(rows, hidden_size, 1, 1).contiguous()
    scale = weight.reshape(1, hidden_size, 1, 1).contiguous()
    bias4 = None if bias is None else bias.reshape(1, hidden_size, 1, 1).contiguous()
    return run_public(input, torch.ops.cudnn_py.rmsnorm, torch.ops.cudnn_py.rmsnorm_inference,
                      (x, scale, eps, bias4), (input, weight, bias),
                      (_EAGER, _rmsnorm_inference_cuda))


__all__ = ["rms_norm"]
