"""``cudnn.ops.causal_conv1d``: the official module's causal depthwise conv1d for torch, over cuDNN's C API
(``cudnnCausalConv1dForward`` / ``Backward`` in libcudnn_ext, :mod:`cudnn_py.backend.ext_subquadratic`).

The official routes some calls (BF16 width-four SiLU, ``cu_seqlens`` packing, initial/final states) to its own CuTe
DSL kernels, not to the C API: those are not built here and are refused with NotImplementedError, as the official
refuses what none of its routes runs. The dense call (``x[B, D, T]``, ``weight[D, W]``, optional ``bias[D]``,
``activation`` None / "identity" / "silu" / "swish") runs on cuDNN, with autograd (dx, dweight, dbias; the weight
and bias gradients accumulate in float32 for half types, as the official's).
"""
from __future__ import annotations

from typing import Any

import torch

from ..backend import ext_subquadratic as sq
from ..errors import InvalidTypeError, InvalidValueError, NotImplementedOptionError
from ._conv1d_common import TORCH_DTYPE_TO_CUDNN, gradient_dtype, stream

_DTYPES = TORCH_DTYPE_TO_CUDNN  # cudnnDataType_t of each torch dtype the C API takes (_conv1d_common.py)
_ACTIVATIONS = {None: 0, "identity": 0, "silu": 1, "swish": 1}


def _checked(x: Any, weight: Any, bias: Any) -> None:
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        if not isinstance(t, torch.Tensor):
            raise InvalidTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if x.dim() != 3 or weight.dim() != 2 or bias.dim() != 1:
        raise InvalidValueError(f"Expected x(3D), weight(2D), bias(1D); got {tuple(x.shape)}, {tuple(weight.shape)}, "
                         f"{tuple(bias.shape)}")
    if not (x.is_cuda and weight.is_cuda and bias.is_cuda) or not (x.device == weight.device == bias.device):
        raise InvalidValueError(f"All tensors must be on one CUDA device: x.device={x.device}, weight.device="
                         f"{weight.device}, bias.device={bias.device}")
    if not (x.dtype == weight.dtype == bias.dtype) or x.dtype not in _DTYPES:
        raise InvalidTypeError(f"x, weight and bias must share one of {list(_DTYPES)}: {x.dtype}, {weight.dtype}, "
                        f"{bias.dtype}")
    if weight.shape[0] != x.shape[1] or bias.shape[0] != x.shape[1]:
        raise InvalidValueError(f"weight must be [D, W] and bias [D] with D={x.shape[1]}: {tuple(weight.shape)}, "
                         f"{tuple(bias.shape)}")


def _forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, act: int) -> torch.Tensor:
    xc, wc, bc = x.contiguous(), weight.contiguous(), bias.contiguous()
    y = torch.empty_like(xc)
    b, d, t = xc.shape
    sq.causal_conv1d_forward(stream(x.device), xc.data_ptr(), wc.data_ptr(),
                             bc.data_ptr(), y.data_ptr(), b, d, t, wc.shape[1], _DTYPES[x.dtype], act)
    return y


def _backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
              act: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    xc, wc, bc, dyc = x.contiguous(), weight.contiguous(), bias.contiguous(), dy.contiguous().to(x.dtype)
    gdt = gradient_dtype(x.dtype)
    dx = torch.empty_like(xc)
    dw = torch.zeros(wc.shape, device=x.device, dtype=gdt)
    db = torch.zeros(bc.shape, device=x.device, dtype=gdt)
    b, d, t = xc.shape
    sq.causal_conv1d_backward(stream(x.device), xc.data_ptr(), wc.data_ptr(),
                              bc.data_ptr(), dyc.data_ptr(), dx.data_ptr(), dw.data_ptr(), db.data_ptr(), b, d, t,
                              wc.shape[1], _DTYPES[x.dtype], _DTYPES[gdt], act)
    return dx, dw.to(weight.dtype), db.to(bias.dtype)


class _CausalConv1d(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, act: int) -> torch.Tensor:
        ctx.save_for_backward(x, weight, bias)
        ctx.act = act
        return _forward(x, weight, bias, act)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        x, weight, bias = ctx.saved_tensors
        dx, dw, db = _backward(dy, x, weight, bias, ctx.act)
        return dx, dw, db, None


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  activation: str | None = None, *, seq_idx: Any = None, cu_seqlens: Any = None,
                  initial_states: Any = None, return_final_states: bool = False,
                  final_states_out: Any = None) -> Any:
    """Depthwise causal convolution of ``x[B, D, T]`` with ``weight[D, W]`` (+ ``bias[D]``), then the activation:
    ``y[t] = act(bias + sum_j x[t - j] * weight[W - 1 - j])``."""
    if activation not in _ACTIVATIONS:
        raise NotImplementedOptionError("activation must be None, 'identity', 'silu', or 'swish'")
    if seq_idx is not None and cu_seqlens is not None:
        raise InvalidValueError("seq_idx and cu_seqlens are mutually exclusive")
    if (seq_idx is not None or cu_seqlens is not None or initial_states is not None or return_final_states
            or final_states_out is not None):
        raise NotImplementedOptionError("causal_conv1d with seq_idx, cu_seqlens or initial/final states runs on the "
                                  "official module's CuTe DSL kernels, not on cuDNN's C API: cudnn_py does not "
                                  "implement it")
    if bias is None and isinstance(weight, torch.Tensor):
        bias = torch.zeros(weight.shape[0], device=weight.device, dtype=weight.dtype)
    _checked(x, weight, bias)
    return _CausalConv1d.apply(x, weight, bias, _ACTIVATIONS[activation])
