"""LayerNorm over the last axis as torch custom operators on cudnn_py's ``layernorm`` / ``layernorm_backward``
graphs.

The public function is :func:`layer_norm` (``cudnn.ops.norm.layer_norm``). Underneath, three operators of the
``cudnn_py`` namespace (``torch.ops.cudnn_py.*``), each with a CUDA kernel and a fake implementation:

* ``layernorm(x, scale, bias, eps) -> (y, mean, inv_var)``: the TRAINING forward, saving the mean and the inverse
  standard deviation (FLOAT (rows, 1, 1, 1)); its autograd runs ``layernorm_bwd``;
* ``layernorm_bwd(dy, x, scale, mean, inv_var) -> (dx, dscale, dbias)`` (dscale, dbias of scale's dtype);
* ``layernorm_inference(x, scale, bias, eps) -> y``: the INFERENCE forward (no statistics), used where autograd
  records nothing (no operand requires grad, or grad mode is off).

x is (rows, hidden_size, 1, 1) fp16 / bf16 / fp32, scale and bias (1, hidden_size, 1, 1) FLOAT (as the official
operators take them) or of x's dtype, both alike, all contiguous. The graphs take scale and bias in their own type
(a half-precision model's weights are not cast to FLOAT and back on every call); where the running cuDNN refuses
such a graph, the FLOAT one serves, the parameters cast for it (said once at INFO on the ``cudnn_py.ops`` logger).
Graphs are cached per shape, dtype, parameter dtype, device and eps (a bounded LRU), and run on torch's current
stream.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ...enums import data_type, norm_forward_phase
from ...errors import InvalidTypeError, InvalidValueError, NotImplementedOptionError
from ._common import (
    NAMESPACE,
    aligned,
    cache,
    define,
    epsilon,
    execute,
    execute_forward,
    fake_forward,
    fake_inference,
    new_graph,
    operand,
    output,
    planned,
    planned_forward,
    refused_gives_way,
    register_autograd,
    require_canonical_4d,
    require_cuda,
    require_dtype,
    require_public_input,
    require_rows,
    require_same_device,
    require_stats,
    rows_of,
    run_public,
)

_FWD, _BWD = f"{NAMESPACE}::layernorm", f"{NAMESPACE}::layernorm_bwd"
_F = data_type.FLOAT


# ---- the graphs -----------------------------------------------------------------------------------------------------
class Forward(NamedTuple):
    graph: Any
    x: Any
    scale: Any
    bias: Any
    y: Any
    mean: Any  # None in INFERENCE
    inv_var: Any  # None in INFERENCE
    param_dtype: torch.dtype  # scale's and bias's in the graph


class Backward(NamedTuple):
    graph: Any
    dy: Any
    x: Any
    scale: Any
    mean: Any
    inv_var: Any
    dx: Any
    dscale: Any
    dbias: Any
    param_dtype: torch.dtype  # scale's, dscale's and dbias's in the graph


def forward_graph(rows: int, hidden: int, dtype: torch.dtype, eps: float, training: bool,
                  param_dtype: torch.dtype = torch.float32) -> Forward:
    """The forward graph (not yet planned) and its tensors."""
    g = new_graph(dtype)
    x = operand(g, "X", (rows, hidden, 1, 1), dtype)
    scale = operand(g, "scale", (1, hidden, 1, 1), param_dtype)
    bias = operand(g, "bias", (1, hidden, 1, 1), param_dtype)
    phase = norm_forward_phase.TRAINING if training else norm_forward_phase.INFERENCE
    y, mean, inv_var = g.layernorm(norm_forward_phase=phase, input=x, scale=scale, bias=bias,
                                   epsilon=epsilon(g, eps), name="layernorm")
    output(y, (rows, hidden, 1, 1), dtype)
    if not training:
        return Forward(g, x, scale, bias, y, None, None, param_dtype)
    output(mean, (rows, 1, 1, 1), _F)
    output(inv_var, (rows, 1, 1, 1), _F)
    return Forward(g, x, scale, bias, y, mean, inv_var, param_dtype)


def backward_graph(rows: int, hidden: int, dtype: torch.dtype,
                   param_dtype: torch.dtype = torch.float32) -> Backward:
    """The backward graph (not yet planned) and its tensors."""
    g = new_graph(dtype)
    dy = operand(g, "DY", (rows, hidden, 1, 1), dtype)
    x = operand(g, "X", (rows, hidden, 1, 1), dtype)
    scale = operand(g, "scale", (1, hidden, 1, 1), param_dtype)
    mean = operand(g, "mean", (rows, 1, 1, 1), _F)
    inv_var = operand(g, "inv_var", (rows, 1, 1, 1), _F)
    dx, dscale, dbias = g.layernorm_backward(grad=dy, input=x, scale=scale, mean=mean, inv_variance=inv_var,
                                             name="layernorm_bwd")
    output(dx, (rows, hidden, 1, 1), dtype)
    output(dscale, (1, hidden, 1, 1), param_dtype)
    output(dbias, (1, hidden, 1, 1), param_dtype)
    return Backward(g, dy, x, scale, mean, inv_var, dx, dscale, dbias, param_dtype)


def _in_param_dtype(plan: Any, param_dtype: torch.dtype, what: str) -> Any:
    """``plan(param_dtype)``, or, where the running cuDNN refuses graphs with parameters of x's half type,
    ``plan(FLOAT)`` (said once per graph at INFO)."""
    if param_dtype == torch.float32:
        return plan(torch.float32)
    return refused_gives_way(lambda: plan(param_dtype), lambda: plan(torch.float32),
                             f"the layernorm {what} with {param_dtype} scale and bias",
                             "the FLOAT graph serves, the parameters cast for it")


# ---- the operand checks (before any GPU work) -----------------------------------------------------------------------
def validate_forward(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, op: str = _FWD) -> tuple[int, int]:
    require_cuda(op, x=x, scale=scale, bias=bias)
    require_same_device(op, x, scale=scale, bias=bias)
    rows, hidden = require_rows(op, x)
    require_canonical_4d("scale", scale, 1, hidden)
    require_canonical_4d("bias", bias, 1, hidden)
    if scale.dtype != x.dtype:  # FLOAT, as the official operators take them, or x's own type
        require_dtype("scale", scale, torch.float32)
    require_dtype("bias", bias, scale.dtype)
    return rows, hidden


def validate_backward(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, mean: torch.Tensor,
                      inv_var: torch.Tensor) -> tuple[int, int]:
    rows, hidden = validate_forward(x, scale, scale)
    require_cuda(_BWD, dy=dy, x=x, scale=scale, mean=mean, inv_var=inv_var)
    require_same_device(_BWD, x, dy=dy, scale=scale, mean=mean, inv_var=inv_var)
    require_canonical_4d("dy", dy, rows, hidden)
    require_dtype("dy", dy, x.dtype)
    require_stats("mean", mean, rows)
    require_stats("inv_var", inv_var, rows)
    return rows, hidden


# ---- the CUDA kernels ----------------------------------------------------------------------------------------------
def _forward(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, eps: float, training: bool,
             op: str) -> tuple[torch.Tensor | None, ...]:
    rows, hidden = validate_forward(x, scale, bias, op)
    pd = scale.dtype
    f = cache(op).get((x.shape, x.dtype, pd, x.device, float(eps)), lambda: _in_param_dtype(
        lambda d: planned_forward(lambda t: forward_graph(rows, hidden, x.dtype, eps, t, d), training, x.device),
        pd, "forward"))
    if f.param_dtype != pd:
        scale, bias = scale.float(), bias.float()
    return execute_forward(f, x, {"x": x, "scale": scale, "bias": bias}, ("mean", "inv_var"))


def _layernorm_cuda(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, mean, inv_var = _forward(x, scale, bias, eps, True, _FWD)
    assert y is not None and mean is not None and inv_var is not None
    return y, mean, inv_var


def _layernorm_inference_cuda(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    y = _forward(x, scale, bias, eps, False, f"{NAMESPACE}::layernorm_inference")[0]
    assert y is not None
    return y


def _layernorm_bwd_cuda(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, mean: torch.Tensor,
                        inv_var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows, hidden = validate_backward(dy, x, scale, mean, inv_var)
    pd = scale.dtype
    b = cache(_BWD).get((x.shape, x.dtype, pd, x.device), lambda: _in_param_dtype(
        lambda d: planned(backward_graph(rows, hidden, x.dtype, d), x.device), pd, "backward"))
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dscale = torch.empty((1, hidden, 1, 1), dtype=b.param_dtype, device=x.device)
    dbias = torch.empty_like(dscale)
    execute(b.graph, {b.dy: aligned(dy), b.x: aligned(x), b.scale: aligned(scale if b.param_dtype == pd else
                                                                          scale.float()),
                      b.mean: aligned(mean), b.inv_var: aligned(inv_var), b.dx: dx, b.dscale: dscale, b.dbias: dbias})
    if b.param_dtype != pd:
        dscale, dbias = dscale.to(pd), dbias.to(pd)
    return dx, dscale, dbias


# ---- the fake implementations (torch.compile, FakeTensorMode, meta) ------------------------------------------------
def _layernorm_fake(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
    return fake_forward(x, 2)


def _layernorm_bwd_fake(dy: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, mean: torch.Tensor,
                        inv_var: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    params = (1, x.shape[1], 1, 1)
    return torch.empty_like(x), x.new_empty(params, dtype=scale.dtype), x.new_empty(params, dtype=scale.dtype)


define("layernorm(Tensor x, Tensor scale, Tensor bias, float eps) -> (Tensor, Tensor, Tensor)",
       _layernorm_cuda, _layernorm_fake)
define("layernorm_bwd(Tensor dy, Tensor x, Tensor scale, Tensor mean, Tensor inv_var) -> (Tensor, Tensor, Tensor)",
       _layernorm_bwd_cuda, _layernorm_bwd_fake)
define("layernorm_inference(Tensor x, Tensor scale, Tensor bias, float eps) -> Tensor",
       _layernorm_inference_cuda, fake_inference)
_EAGER = register_autograd(_FWD, torch.ops.cudnn_py.layernorm_bwd, bias_at=2, pass_has_bias=False,
                           eager_forward=_layernorm_cuda, eager_backward=_layernorm_bwd_cuda)  # (x, scale, bias, eps)


# ---- the public function --------------------------------------------------------------------------------------------
def _parameter(p: torch.Tensor | None, hidden_size: int, like: torch.Tensor | None, device: torch.device,
               fill: float) -> torch.Tensor:
    """weight or bias as the graphs' (1, hidden_size, 1, 1), in its own dtype (``fill`` where None, in the dtype
    of ``like``, the other parameter, FLOAT where both are None)."""
    if p is None:
        dtype = torch.float32 if like is None else like.dtype
        return torch.full((1, hidden_size, 1, 1), fill, dtype=dtype, device=device)
    return p.reshape(1, hidden_size, 1, 1).contiguous()


def layer_norm(input: torch.Tensor, normalized_shape: tuple[int, ...], weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm of ``input`` over its last axis (``normalized_shape`` is that axis's size, one dimension),
    ``(input - mean) / sqrt(var + eps) * weight + bias``, in cuDNN (fp16 / bf16 / fp32 CUDA tensors; weight and
    bias of input's dtype or, for fp16 / bf16 input, fp32; each optional). Differentiable in all three."""
    normalized_shape = tuple(normalized_shape)
    if len(normalized_shape) != 1:
        raise NotImplementedOptionError(f"only a one-dimensional normalized_shape is supported, got {normalized_shape}")
    require_public_input(input)
    hidden_size = normalized_shape[0]
    if hidden_size <= 0:
        raise InvalidValueError(f"normalized_shape must contain a positive dimension, got {normalized_shape}")
    if input.shape[-1] != hidden_size:
        raise InvalidValueError(f"input's final dimension must be {hidden_size}, got {input.shape[-1]}")
    allowed = {input.dtype}
    if input.dtype in (torch.float16, torch.bfloat16):
        allowed.add(torch.float32)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        if tuple(p.shape) != normalized_shape or p.device != input.device:
            raise InvalidValueError(f"{name} must match normalized_shape and be on the input device")
        if p.dtype not in allowed:
            raise InvalidTypeError(f"{name} dtype must be one of {allowed}, got {p.dtype}")
    if weight is not None and bias is not None and weight.dtype != bias.dtype:
        raise InvalidTypeError(f"weight and bias must have the same dtype, got {weight.dtype} and {bias.dtype}")
    rows = rows_of(input, hidden_size)
    x = input.reshape(rows, hidden_size, 1, 1).contiguous()
    scale = _parameter(weight, hidden_size, bias, input.device, 1.0)
    shift = _parameter(bias, hidden_size, weight, input.device, 0.0)
    return run_public(input, torch.ops.cudnn_py.layernorm, torch.ops.cudnn_py.layernorm_inference,
                      (x, scale, shift, eps), (input, weight, bias),
                      (_EAGER, _layernorm_inference_cuda))


__all__ = ["layer_norm"]
