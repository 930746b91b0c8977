"""``cudnn.ops.b2b_causal_conv1d``: the fused back-to-back causal conv1d (a projection conv, Q * K gating, a mixer
conv with a skip term, V gating: the Hyena-SE block), a torch custom operator
(``torch.ops.cudnn_py.b2b_causal_conv1d_fwd_primitive`` / ``_bwd_``, the official operator's schema) with autograd,
over ``cudnnB2BCausalConv1dForward`` / ``Backward`` (:mod:`cudnn_py.backend.ext_subquadratic`).

The checks are the official operator's, in its order, with its messages; a cuDNN without the C API (before 9.22)
refuses at the call into it (:class:`~cudnn_py.errors.CApiUnavailableError`, a RuntimeError).
"""
# no `from __future__ import annotations`: torch.library.custom_op reads the annotations as types
from typing import Any

import torch
from torch import Tensor

from ..backend import ext_subquadratic as sq
from ..errors import InvalidTypeError, InvalidValueError, UsageError
from ._conv1d_common import aligned, dtype_to_int, gradient_dtype, stream


def _check_x(x: Tensor) -> tuple[int, int, int]:
    if x.dim() != 3:
        raise InvalidValueError(f"Expected x(3D) with shape (batch, 3*dim, seq_len); got {x.shape}")
    if x.shape[1] % 3 != 0:
        raise InvalidValueError(f"Expected x.shape[1] divisible by 3; got {x.shape[1]}")
    return x.shape[0], x.shape[1] // 3, x.shape[2]


def _check_weights_rank(weights_proj: Tensor, weights_mixer: Tensor, skip_bias: Tensor) -> None:
    if weights_proj.dim() != 2 or weights_mixer.dim() != 2 or skip_bias.dim() != 1:
        raise InvalidValueError(f"Expected weights_proj(2D: 3*dim,K_proj), weights_mixer(2D: dim,K_mixer), "
                                f"skip_bias(1D: dim); got {weights_proj.shape}, {weights_mixer.shape}, "
                                f"{skip_bias.shape}")


def _check_channels(dim: int, weights_proj: Tensor, weights_mixer: Tensor, skip_bias: Tensor) -> None:
    if weights_proj.shape[0] != 3 * dim:
        raise InvalidValueError(f"Channel mismatch: x has 3*dim={3 * dim} but weights_proj has shape "
                                f"{weights_proj.shape}")
    if weights_mixer.shape[0] != dim:
        raise InvalidValueError(f"Channel mismatch: x has dim={dim} but weights_mixer has shape {weights_mixer.shape}")
    if skip_bias.shape[0] != dim:
        raise InvalidValueError(f"Channel mismatch: x has dim={dim} but skip_bias has shape {skip_bias.shape}")


def _check_placement(tensors: dict[str, Tensor]) -> None:
    ts = list(tensors.values())
    if not all(t.is_cuda for t in ts):
        raise InvalidValueError("All tensors must be on CUDA")
    if any(t.device != ts[0].device for t in ts):
        raise InvalidValueError("All tensors must be on the same device")
    if any(t.dtype != ts[0].dtype for t in ts):
        raise InvalidTypeError("Dtype mismatch: " + ", ".join(f"{n}.dtype={t.dtype}" for n, t in tensors.items()))


@torch.library.custom_op("cudnn_py::b2b_causal_conv1d_fwd_primitive", mutates_args=(), device_types="cuda")
def _fwd_primitive(x: Tensor, weights_proj: Tensor, weights_mixer: Tensor,
                   skip_bias: Tensor) -> tuple[Tensor, Tensor]:
    batch, dim, seq_len = _check_x(x)
    _check_weights_rank(weights_proj, weights_mixer, skip_bias)
    _check_placement({"x": x, "weights_proj": weights_proj, "weights_mixer": weights_mixer, "skip_bias": skip_bias})
    _check_channels(dim, weights_proj, weights_mixer, skip_bias)
    x, weights_proj, weights_mixer, skip_bias = (aligned(t) for t in (x, weights_proj, weights_mixer, skip_bias))
    y = torch.empty(batch, dim, seq_len, device=x.device, dtype=x.dtype)
    y_gated = torch.empty(batch, dim, seq_len, device=x.device, dtype=x.dtype)
    sq.b2b_causal_conv1d_forward(stream(x.device), x.data_ptr(), weights_proj.data_ptr(), weights_mixer.data_ptr(),
                                 skip_bias.data_ptr(), y.data_ptr(), y_gated.data_ptr(), batch, dim, seq_len,
                                 weights_proj.shape[1], weights_mixer.shape[1], dtype_to_int(x.dtype))
    return y, y_gated


@_fwd_primitive.register_fake
def _fwd_fake(x: Tensor, weights_proj: Tensor, weights_mixer: Tensor, skip_bias: Tensor) -> tuple[Tensor, Tensor]:
    shape = (x.shape[0], x.shape[1] // 3, x.shape[2])
    return (torch.empty(shape, device=x.device, dtype=x.dtype), torch.empty(shape, device=x.device, dtype=x.dtype))


@torch.library.custom_op("cudnn_py::b2b_causal_conv1d_bwd_primitive", mutates_args=(), device_types="cuda")
def _bwd_primitive(grad_y: Tensor, x: Tensor, weights_proj: Tensor, weights_mixer: Tensor, skip_bias: Tensor,
                   y: Tensor) -> list[Tensor]:
    batch, dim, seq_len = _check_x(x)
    _check_weights_rank(weights_proj, weights_mixer, skip_bias)
    if y.shape != (batch, dim, seq_len):
        raise InvalidValueError(f"Shape mismatch: expected y shape {(batch, dim, seq_len)}; got {y.shape}")
    if grad_y.shape != y.shape:
        raise InvalidValueError(f"Shape mismatch: grad_y {grad_y.shape} vs y {y.shape}")
    _check_placement({"x": x, "weights_proj": weights_proj, "weights_mixer": weights_mixer, "skip_bias": skip_bias,
                      "y": y, "grad_y": grad_y})
    _check_channels(dim, weights_proj, weights_mixer, skip_bias)
    x, weights_proj, weights_mixer, skip_bias, y, grad_y = (
        aligned(t) for t in (x, weights_proj, weights_mixer, skip_bias, y, grad_y))
    gdt = gradient_dtype(x.dtype)
    dx = torch.empty_like(x)
    # zeroed: cuDNN accumulates the parameter gradients
    dwp, dwm, dsb = (torch.zeros(t.shape, device=x.device, dtype=gdt) for t in (weights_proj, weights_mixer,
                                                                                  skip_bias))
    sq.b2b_causal_conv1d_backward(stream(x.device), x.data_ptr(), weights_proj.data_ptr(), weights_mixer.data_ptr(),
                                  skip_bias.data_ptr(), y.data_ptr(), grad_y.data_ptr(), dx.data_ptr(),
                                  dwp.data_ptr(), dwm.data_ptr(), dsb.data_ptr(), batch, dim, seq_len,
                                  weights_proj.shape[1], weights_mixer.shape[1], dtype_to_int(x.dtype),
                                  dtype_to_int(gdt))
    return [dx, dwp.to(x.dtype), dwm.to(x.dtype), dsb.to(x.dtype)]


@_bwd_primitive.register_fake
def _bwd_fake(grad_y: Tensor, x: Tensor, weights_proj: Tensor, weights_mixer: Tensor, skip_bias: Tensor,
              y: Tensor) -> list[Tensor]:
    return [torch.empty_like(t) for t in (x, weights_proj, weights_mixer, skip_bias)]


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs, output[0])


def _autograd_bwd(ctx: Any, grad_y: Tensor, grad_y_gated: Tensor) -> tuple[Any, ...]:
    # only y_gated is the public output; a gradient reaching the intermediate y (torch may pass zeros) is refused
    if grad_y is not None and not torch._is_zerotensor(grad_y) and torch.count_nonzero(grad_y).item() != 0:
        raise UsageError("Gradient for the intermediate B2B output y is not supported; use cudnn.ops.b2b_causal_conv1d")
    x, weights_proj, weights_mixer, skip_bias, y = ctx.saved_tensors
    dx, dwp, dwm, dsb = torch.ops.cudnn_py.b2b_causal_conv1d_bwd_primitive(grad_y_gated, x, weights_proj,
                                                                           weights_mixer, skip_bias, y)
    return dx, dwp, dwm, dsb


_fwd_primitive.register_autograd(torch.compiler.allow_in_graph(_autograd_bwd), setup_context=_setup_context)


def b2b_causal_conv1d(x: Tensor, weights_proj: Tensor, weights_mixer: Tensor, skip_bias: Tensor) -> Tensor:
    """The fused back-to-back causal conv1d (the Hyena-SE block)::

        proj    = causal_conv1d(x, weights_proj)                  # (batch, 3*dim, seq_len)
        gated   = proj[:, 1::3, :] * proj[:, 2::3, :]             # Q * K
        y       = causal_conv1d(gated, weights_mixer) + skip_bias[:, None] * gated
        y_gated = y * proj[:, 0::3, :]                            # * V

    ``x`` ``(batch, 3*dim, seq_len)``, BF16, FP16, FP32 or FP64; ``weights_proj`` ``(3*dim, kernel_size_proj)``
    (2 - 32); ``weights_mixer`` ``(dim, kernel_size_mixer)`` (2 - 256); ``skip_bias`` ``(dim,)``. Returns
    ``y_gated`` ``(batch, dim, seq_len)``; with autograd and ``torch.compile``.
    """
    _, y_gated = torch.ops.cudnn_py.b2b_causal_conv1d_fwd_primitive(x, weights_proj, weights_mixer, skip_bias)
    return y_gated
