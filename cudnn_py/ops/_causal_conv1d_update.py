"""``cudnn.ops.causal_conv1d_update``: one decode step of a causal conv1d against a mutable state.

The official operator runs every call on its own CuTe DSL kernel (SM100, BF16, width four); cuDNN's C API has no
decode update, and cudnn_py does not build the DSL kernels. So this function checks the call exactly as the
official does (its semantic contract, then the kernel's subset, in its order, with its messages and exception
classes) and then refuses it with :class:`~cudnn_py.errors.NotImplementedOptionError` (a NotImplementedError, as
the official's refusal of a call its kernel cannot run); ``conv_state`` is never touched. On the meta device it
returns the output's shape, as the official's fake implementation does.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import InvalidTypeError, InvalidValueError, NotImplementedOptionError, UsageError


def _normalize_activation(activation: Any) -> str:
    if activation is None or activation == "identity":
        return "identity"
    if activation in ("silu", "swish"):
        return "silu"
    raise InvalidValueError(f"activation must be None, 'identity', 'silu', or 'swish', got {activation!r}")


def _validate_x_stride(x: Tensor) -> None:
    n_channels = x.shape[1]
    row_stride, channel_stride = x.stride()
    if channel_stride != 1:
        raise InvalidValueError(f"x must have row-major strides (ld, 1), got {tuple(x.stride())}")
    if row_stride < n_channels:
        raise InvalidValueError(f"x row stride ld must be at least D={n_channels}, got ld={row_stride}")
    if row_stride > n_channels and row_stride % 8 != 0:
        raise InvalidValueError("padded x rows must start at 16-byte-aligned BF16 addresses (ld % 8 == 0), got "
                                f"D={n_channels}, ld={row_stride}")


def _has_supported_conv_state_layout(conv_state: Tensor) -> bool:
    """Compact [S, D, L], or for L = 3 the [S, 3, D]-backed transpose the full-sequence prefill hands over."""
    if conv_state.is_contiguous():
        return True
    if conv_state.ndim != 3 or conv_state.shape[2] != 3:
        return False
    _, n_channels, state_len = conv_state.shape
    return tuple(conv_state.stride()) == (n_channels * state_len, 1, n_channels)


def _validate_shapes(x: Tensor, conv_state: Tensor, weight: Tensor, bias: Tensor | None,
                     cache_seqlens: Tensor | None, conv_state_indices: Tensor | None) -> None:
    if x.ndim != 2:
        raise InvalidValueError(f"x must have shape [N, D], got {tuple(x.shape)}")
    if conv_state.ndim != 3:
        raise InvalidValueError(f"conv_state must have shape [S, D, L], got {tuple(conv_state.shape)}")
    if weight.ndim != 2:
        raise InvalidValueError(f"weight must have shape [D, W], got {tuple(weight.shape)}")
    (n_rows, n_channels), n_slots = x.shape, conv_state.shape[0]
    if n_rows <= 0:
        raise InvalidValueError(f"x row count N must be positive, got N={n_rows}")
    if n_channels <= 0:
        raise InvalidValueError(f"x channel count D must be positive, got D={n_channels}")
    if n_slots <= 0:
        raise InvalidValueError(f"conv_state slot count S must be positive, got S={n_slots}")
    width, state_len = weight.shape[1], conv_state.shape[2]
    if width < 1:
        raise InvalidValueError(f"weight width W must be positive, got W={width}")
    if weight.shape[0] != n_channels:
        raise InvalidValueError(f"weight must have shape [D, W] with D={n_channels}, got {tuple(weight.shape)}")
    if conv_state.shape[1] != n_channels:
        raise InvalidValueError(f"conv_state must have shape [S, D, L] with D={n_channels}, got "
                                f"{tuple(conv_state.shape)}")
    if state_len < width - 1:
        raise InvalidValueError(f"conv_state length L must satisfy L >= W - 1, got L={state_len}, W={width}")
    if bias is not None and tuple(bias.shape) != (n_channels,):
        raise InvalidValueError(f"bias must have shape {(n_channels,)}, got {tuple(bias.shape)}")
    if conv_state_indices is None:
        if n_slots < n_rows:
            raise InvalidValueError("conv_state needs at least N slots when conv_state_indices is omitted, got "
                                    f"S={n_slots}, N={n_rows}")
    elif tuple(conv_state_indices.shape) != (n_rows,):
        raise InvalidValueError(f"conv_state_indices must have shape {(n_rows,)}, got "
                                f"{tuple(conv_state_indices.shape)}")
    if cache_seqlens is not None and tuple(cache_seqlens.shape) != (n_rows,):
        raise InvalidValueError(f"cache_seqlens must have shape {(n_rows,)}, got {tuple(cache_seqlens.shape)}")


def _validate_semantic_contract(x: Tensor, conv_state: Tensor, weight: Tensor, bias: Tensor | None,
                                cache_seqlens: Tensor | None, conv_state_indices: Tensor | None) -> None:
    _validate_shapes(x, conv_state, weight, bias, cache_seqlens, conv_state_indices)
    for name, t in (("x", x), ("conv_state", conv_state), ("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if t.dtype != torch.bfloat16:
            raise InvalidTypeError(f"{name} must have dtype torch.bfloat16, got {t.dtype}")
        if name == "x":
            _validate_x_stride(t)
        elif name == "conv_state":
            if not _has_supported_conv_state_layout(t):
                raise InvalidValueError("conv_state must be contiguous [S, D, L], or for L=3 a [S, 3, D]-backed "
                                        f"transpose with strides (3 * D, 1, D); got shape {tuple(t.shape)}, strides "
                                        f"{tuple(t.stride())}")
        elif not t.is_contiguous():
            raise InvalidValueError(f"{name} must be contiguous")
        if t.device != x.device:
            raise InvalidValueError(f"{name} must be on {x.device}, got {t.device}")
    for name, t in (("cache_seqlens", cache_seqlens), ("conv_state_indices", conv_state_indices)):
        if t is None:
            continue
        if t.dtype != torch.int32:
            raise InvalidTypeError(f"{name} must have dtype torch.int32, got {t.dtype}")
        if not t.is_contiguous():
            raise InvalidValueError(f"{name} must be contiguous")
        if t.device != x.device:
            raise InvalidValueError(f"{name} must be on {x.device}, got {t.device}")


def _require_native_subset(x: Tensor, conv_state: Tensor, weight: Tensor, cache_seqlens: Tensor | None) -> None:
    width, state_len = weight.shape[1], conv_state.shape[2]
    if width != 4 or state_len not in (3, 4) or cache_seqlens is not None:
        circular = "present" if cache_seqlens is not None else "omitted"
        raise NotImplementedOptionError(
            "the current native causal_conv1d_update kernel supports only one-token x[N, D], weight[D, 4], "
            "conv_state[S, D, L] with L in {3, 4}, and cache_seqlens=None; "
            f"got x{tuple(x.shape)}, weight{tuple(weight.shape)}, conv_state{tuple(conv_state.shape)}, "
            f"cache_seqlens={circular}")


def causal_conv1d_update(x: Tensor, conv_state: Tensor, weight: Tensor, bias: Tensor | None = None,
                         activation: str | None = None, *, cache_seqlens: Tensor | None = None,
                         conv_state_indices: Tensor | None = None) -> Tensor:
    """Advance a causal-convolution state by one decode step (``conv_state`` mutated, a new ``[N, D]`` output).

    ``x`` CUDA BF16 ``[N, D]`` (strides ``(ld, 1)``, a padded ``ld`` a multiple of 8); ``conv_state`` BF16
    ``[S, D, L]`` with ``L >= W - 1``; ``weight`` ``[D, W]``; ``bias`` ``[D]`` or None; ``activation`` None,
    ``"identity"``, ``"silu"`` or ``"swish"``; ``cache_seqlens`` must be None; ``conv_state_indices`` int32 ``[N]``.

    cudnn_py checks the call as the official module does, then refuses it (NotImplementedOptionError): the official
    runs it on a CuTe DSL kernel that cudnn_py does not build, and cuDNN's C API has no decode update.
    """
    for name, t in (("x", x), ("conv_state", conv_state), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise InvalidTypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, opt in (("bias", bias), ("cache_seqlens", cache_seqlens), ("conv_state_indices", conv_state_indices)):
        if opt is not None and not isinstance(opt, torch.Tensor):
            raise InvalidTypeError(f"{name} must be a torch.Tensor or None, got {type(opt).__name__}")
    if not x.is_cuda and x.device.type != "meta":
        raise InvalidValueError(f"x must be a CUDA tensor, got {x.device}")
    normalized = _normalize_activation(activation)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, conv_state, weight, bias)):
        raise UsageError("causal_conv1d_update is inference-only; call it under torch.no_grad()")
    _validate_semantic_contract(x, conv_state, weight, bias, cache_seqlens, conv_state_indices)
    _require_native_subset(x, conv_state, weight, cache_seqlens)
    if x.device.type == "meta":
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    raise NotImplementedOptionError(
        f"causal_conv1d_update (activation {normalized!r}) runs on the official module's CuTe DSL decode kernel "
        "(SM100), which cudnn_py does not build, and cuDNN's C API has no decode update: conv_state is unchanged")
