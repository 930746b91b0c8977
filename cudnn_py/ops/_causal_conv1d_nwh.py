"""``cudnn.ops.causal_conv1d_nwh``: the depthwise causal conv1d in the NWH layout (``x[B, T, D]``,
``weight[W, D]``), a torch custom operator (``torch.ops.cudnn_py.causal_conv1d_nwh_fwd_primitive`` / ``_bwd_``, the
official operator's schema) with autograd, over ``cudnnCausalConv1dNwhForward`` / ``Backward``
(:mod:`cudnn_py.backend.ext_subquadratic`).

The checks are the official operator's, in its order, with its messages; a cuDNN without the C API (before 9.22)
refuses at the call into it (:class:`~cudnn_py.errors.CApiUnavailableError`, a RuntimeError).
"""
# no `from __future__ import annotations`: torch.library.custom_op reads the annotations as types
from typing import Any, Optional

import torch
from torch import Tensor

from ..backend import ext_subquadratic as sq
from ..errors import InvalidTypeError, InvalidValueError
from ._conv1d_common import ACTIVATION_TO_INT, activation_to_int, aligned, dtype_to_int, gradient_dtype, stream


def _check_operands(x: Tensor, weight: Tensor, bias: Tensor) -> None:
    if x.dim() != 3 or weight.dim() != 2 or bias.dim() != 1:
        raise InvalidValueError(f"Expected x(3D), weight(2D), bias(1D); got {x.shape}, {weight.shape}, {bias.shape}")
    if not (x.is_cuda and weight.is_cuda and bias.is_cuda):
        raise InvalidValueError(f"All tensors must be on CUDA: x.device={x.device}, weight.device={weight.device}, "
                                f"bias.device={bias.device}")
    if not (x.device == weight.device == bias.device):
        raise InvalidValueError(f"All tensors must be on the same device: x.device={x.device}, "
                                f"weight.device={weight.device}, bias.device={bias.device}")
    if not (x.dtype == weight.dtype == bias.dtype):
        raise InvalidTypeError(f"Dtype mismatch: x.dtype={x.dtype}, weight.dtype={weight.dtype}, "
                               f"bias.dtype={bias.dtype} (all must match)")


def _check_channels(x: Tensor, weight: Tensor, bias: Tensor) -> None:
    dim = x.shape[2]
    if weight.shape[1] != dim:
        raise InvalidValueError(f"Channel mismatch: x has dim={dim} but weight has shape {weight.shape} "
                                f"(expected weight.shape[1]={dim})")
    if bias.shape[0] != dim:
        raise InvalidValueError(f"Bias mismatch: x has dim={dim} but bias has shape {bias.shape} "
                                f"(expected bias.shape[0]={dim})")


@torch.library.custom_op("cudnn_py::causal_conv1d_nwh_fwd_primitive", mutates_args=(), device_types="cuda")
def _fwd_primitive(x: Tensor, weight: Tensor, bias: Tensor, activation: str) -> Tensor:
    _check_operands(x, weight, bias)
    _check_channels(x, weight, bias)  # before any operand's address is read
    x, weight, bias = aligned(x), aligned(weight), aligned(bias)
    batch, seq_len, dim = x.shape
    y = torch.empty_like(x)
    sq.causal_conv1d_nwh_forward(stream(x.device), x.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(),
                                 batch, dim, seq_len, weight.shape[0], dtype_to_int(x.dtype),
                                 activation_to_int(activation))
    return y


@_fwd_primitive.register_fake
def _fwd_fake(x: Tensor, weight: Tensor, bias: Tensor, activation: str) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("cudnn_py::causal_conv1d_nwh_bwd_primitive", mutates_args=(), device_types="cuda")
def _bwd_primitive(grad_out: Tensor, x: Tensor, weight: Tensor, bias: Tensor, activation: str) -> list[Tensor]:
    if x.dim() != 3 or weight.dim() != 2 or bias.dim() != 1:
        raise InvalidValueError(f"Expected x(3D), weight(2D), bias(1D); got {x.shape}, {weight.shape}, {bias.shape}")
    if grad_out.shape != x.shape:
        raise InvalidValueError(f"Shape mismatch: dy has shape {grad_out.shape} but x has shape {x.shape} "
                                "(expected dy.shape == x.shape)")
    if not grad_out.is_cuda:
        raise InvalidValueError(f"grad_out must be on CUDA: grad_out.device={grad_out.device}")
    if grad_out.device != x.device:
        raise InvalidValueError(f"Device mismatch: grad_out.device={grad_out.device}, x.device={x.device}")
    if grad_out.dtype != x.dtype:
        raise InvalidValueError(f"Dtype mismatch: grad_out.dtype={grad_out.dtype}, x.dtype={x.dtype}")
    _check_operands(x, weight, bias)
    _check_channels(x, weight, bias)
    x, weight, bias, grad_out = aligned(x), aligned(weight), aligned(bias), aligned(grad_out)
    batch, seq_len, dim = x.shape
    dx = torch.empty_like(x)
    gdt = gradient_dtype(x.dtype)
    # zeroed: cuDNN accumulates the weight and bias gradients
    dweight = torch.zeros(weight.shape, device=x.device, dtype=gdt)
    dbias = torch.zeros(bias.shape, device=x.device, dtype=gdt)
    sq.causal_conv1d_nwh_backward(stream(x.device), x.data_ptr(), weight.data_ptr(), bias.data_ptr(),
                                  grad_out.data_ptr(), dx.data_ptr(), dweight.data_ptr(), dbias.data_ptr(), batch,
                                  dim, seq_len, weight.shape[0], dtype_to_int(x.dtype), dtype_to_int(gdt),
                                  activation_to_int(activation))
    return [dx, dweight.to(x.dtype), dbias.to(x.dtype)]


@_bwd_primitive.register_fake
def _bwd_fake(grad_out: Tensor, x: Tensor, weight: Tensor, bias: Tensor, activation: str) -> list[Tensor]:
    return [torch.empty_like(x), torch.empty_like(weight), torch.empty_like(bias)]


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, weight, bias, activation = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.activation = activation


def _autograd_bwd(ctx: Any, grad_out: Tensor) -> tuple[Any, ...]:
    x, weight, bias = ctx.saved_tensors
    dx, dw, db = torch.ops.cudnn_py.causal_conv1d_nwh_bwd_primitive(grad_out, x, weight, bias, ctx.activation)
    return dx, dw, db, None


_fwd_primitive.register_autograd(torch.compiler.allow_in_graph(_autograd_bwd), setup_context=_setup_context)


def causal_conv1d_nwh(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None,  # noqa: UP045
                      activation: str = "identity") -> Tensor:
    """Depthwise causal 1D convolution in the NWH layout: ``y = activation(conv1d_causal(x, weight) + bias)``.

    ``x`` ``(batch, seq_len, dim)``, BF16, FP16, FP32 or FP64; ``weight`` ``(kernel_size, dim)`` with a
    ``kernel_size`` cuDNN supports up to 128 (2 - 8, 16, 32, 64, 128); ``bias`` ``(dim,)`` or None (zeros);
    ``activation`` ``"identity"`` or ``"silu"``. Returns ``(batch, seq_len, dim)``; with autograd and
    ``torch.compile``.
    """
    if activation not in ACTIVATION_TO_INT:
        raise InvalidValueError(f"Unsupported activation '{activation}'. Supported: 'identity', 'silu'.")
    if bias is None:
        bias = torch.zeros(weight.shape[1], device=x.device, dtype=x.dtype)
    return torch.ops.cudnn_py.causal_conv1d_nwh_fwd_primitive(x, weight, bias, activation)
