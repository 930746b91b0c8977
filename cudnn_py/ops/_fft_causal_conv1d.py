"""``cudnn.ops.fft_causal_conv1d``: the depthwise causal conv1d by FFT, for long filters (FIR order:
``y[t] = sum_j weight[j] * x[t - j]``), torch custom operators (``torch.ops.cudnn_py.fft_causal_conv1d_*`` and
``long_fft_causal_conv1d_*``, the official operators' schemas) with autograd, over the medium and long FFT paths of
cuDNN's C API (``cudnnFFTCausalConv1d*``, ``cudnnLongFFTCausalConv1d*``: :mod:`cudnn_py.backend.ext_subquadratic`).

The path and the padding are the official's: the medium path where the filter fits its dtype and device limit
(the filter padded to a power of two of at least 128, the sequence to a multiple of it), the long path otherwise
(both padded to one power of two); the padding is cut from the result and from the gradients. A cuDNN before 9.26
is refused when a primitive runs (:class:`~cudnn_py.errors.CApiUnavailableError`, a RuntimeError), where the
official refuses.
"""
# no `from __future__ import annotations`: torch.library.custom_op reads the annotations as types
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..backend import ext_loader
from ..backend import ext_subquadratic as sq
from ..errors import InvalidTypeError, InvalidValueError
from ._conv1d_common import TORCH_DTYPE_TO_CUDNN, aligned, stream

_LONG_MIN, _LONG_MAX = 4096, 1 << 24
_BUFFER_ALIGNMENT = 256
_C_FUNCTIONS = ("cudnnFFTCausalConv1dForward", "cudnnFFTCausalConv1dBackward", "cudnnLongFFTCausalConv1dGetBufferSizes",
                "cudnnLongFFTCausalConv1dForward", "cudnnLongFFTCausalConv1dBackward")


def _dtype_to_int(dtype: torch.dtype) -> int:
    if dtype not in TORCH_DTYPE_TO_CUDNN:
        raise InvalidValueError(f"Unsupported dtype {dtype}. Supported: {', '.join(map(str, TORCH_DTYPE_TO_CUDNN))}.")
    return TORCH_DTYPE_TO_CUDNN[dtype]


def _require_api() -> None:
    """The five C functions, or CApiUnavailableError naming the first the loaded cuDNN lacks."""
    for name in _C_FUNCTIONS:
        ext_loader.function(name)


def _validate_tensors(x: Tensor, weight: Tensor) -> tuple[int, int, int, int]:
    if x.dim() != 3 or weight.dim() != 2:
        raise InvalidValueError(f"Expected x(3D) and weight(2D); got x.shape={x.shape}, weight.shape={weight.shape}.")
    if not (x.is_cuda and weight.is_cuda):
        raise InvalidValueError(f"x and weight must be CUDA tensors; got x.device={x.device}, "
                                f"weight.device={weight.device}.")
    if x.device != weight.device:
        raise InvalidValueError(f"x and weight must be on the same device; got x.device={x.device}, "
                                f"weight.device={weight.device}.")
    if x.dtype != weight.dtype:
        raise InvalidTypeError(f"x and weight must have the same dtype; got x.dtype={x.dtype}, "
                               f"weight.dtype={weight.dtype}.")
    _dtype_to_int(x.dtype)
    batch, dim, seq_len = x.shape
    weight_dim, kernel_size = weight.shape
    if batch <= 0 or dim <= 0 or seq_len <= 0 or kernel_size <= 0:
        raise InvalidValueError(f"All tensor dimensions must be positive; got x.shape={x.shape}, "
                                f"weight.shape={weight.shape}.")
    if weight_dim != dim:
        raise InvalidValueError(f"Channel mismatch: x has dim={dim}, but weight.shape[0]={weight_dim}.")
    return batch, dim, seq_len, kernel_size


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _compatible_filter_length(n: int) -> int:
    return max(128, 1 << (n - 1).bit_length())


def _cuda_arch(device: torch.device) -> int:
    p = torch.cuda.get_device_properties(device)
    return p.major * 100 + p.minor * 10


def _medium_fft_is_available(filter_length: int, dtype: torch.dtype, device: torch.device) -> bool:
    """The medium path's filter limit: 4096 for FP64; 16384 on SM90 and newer, 8192 before, for the others."""
    if dtype == torch.float64:
        return filter_length <= 4096
    return filter_length <= (16384 if _cuda_arch(device) >= 900 else 8192)


def _validate_medium_shape(seq_len: int, kernel_size: int) -> None:
    if not _is_power_of_two(kernel_size) or not 128 <= kernel_size <= 16384:
        raise InvalidValueError(f"Medium FFT kernel_size must be a power of two in [128, 16384]; got {kernel_size}.")
    if seq_len < kernel_size or seq_len % kernel_size != 0:
        raise InvalidValueError("Medium FFT requires seq_len >= kernel_size and seq_len % kernel_size == 0; got "
                                f"{seq_len} and {kernel_size}.")


def _validate_long_shape(seq_len: int, kernel_size: int, dtype: torch.dtype, device: torch.device) -> None:
    if seq_len != kernel_size or not _is_power_of_two(kernel_size):
        raise InvalidValueError(f"Long FFT requires power-of-two seq_len == kernel_size; got {seq_len} and "
                                f"{kernel_size}.")
    if not _LONG_MIN <= kernel_size <= _LONG_MAX:
        raise InvalidValueError(f"Long FFT kernel_size must be in [{_LONG_MIN}, {_LONG_MAX}]; got {kernel_size}.")
    if dtype == torch.float64 and kernel_size == _LONG_MAX:
        raise InvalidValueError("Long FFT FP64 supports kernel_size through 8388608.")
    if kernel_size == _LONG_MAX and _cuda_arch(device) < 900:
        raise InvalidValueError("Long FFT kernel_size 16777216 requires compute capability 9.0 or newer.")


def _long_reserve_bytes(batch: int, dim: int, kernel_size: int, dtype: torch.dtype) -> int:
    """The long path's reserve size, for the fake implementation only (the real one asks cuDNN)."""
    bits = (2 * kernel_size).bit_length() - 1
    m, n = 1 << ((bits + 1) // 2), 1 << (bits - (bits + 1) // 2)
    elements, size = 2 * (m // 2 + 1) * n, 8 if dtype == torch.float64 else 4

    def up(b: int) -> int:
        return (b + _BUFFER_ALIGNMENT - 1) // _BUFFER_ALIGNMENT * _BUFFER_ALIGNMENT

    return up(batch * dim * elements * size) + up(dim * elements * size)


def _check_grad(grad_out: Tensor, x: Tensor) -> None:
    if grad_out.shape != x.shape or grad_out.device != x.device or grad_out.dtype != x.dtype:
        raise InvalidValueError("grad_out must match x in shape, device, and dtype.")


@torch.library.custom_op("cudnn_py::fft_causal_conv1d_fwd_primitive", mutates_args=(), device_types="cuda")
def _medium_fwd(x: Tensor, weight: Tensor) -> Tensor:
    _require_api()
    batch, dim, seq_len, kernel_size = _validate_tensors(x, weight)
    _validate_medium_shape(seq_len, kernel_size)
    x, weight = aligned(x), aligned(weight)
    y = torch.empty_like(x)
    sq.fft_causal_conv1d_forward(stream(x.device), x.data_ptr(), weight.data_ptr(), y.data_ptr(), batch, dim,
                                 seq_len, kernel_size, _dtype_to_int(x.dtype))
    return y


@_medium_fwd.register_fake
def _medium_fwd_fake(x: Tensor, weight: Tensor) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("cudnn_py::fft_causal_conv1d_bwd_primitive", mutates_args=(), device_types="cuda")
def _medium_bwd(grad_out: Tensor, x: Tensor, weight: Tensor) -> list[Tensor]:
    _require_api()
    batch, dim, seq_len, kernel_size = _validate_tensors(x, weight)
    _validate_medium_shape(seq_len, kernel_size)
    _check_grad(grad_out, x)
    x, weight, grad_out = aligned(x), aligned(weight), aligned(grad_out)
    grad_x, grad_weight = torch.empty_like(x), torch.empty_like(weight)  # both written whole by cuDNN
    sq.fft_causal_conv1d_backward(stream(x.device), x.data_ptr(), weight.data_ptr(), grad_out.data_ptr(),
                                  grad_x.data_ptr(), grad_weight.data_ptr(), batch, dim, seq_len, kernel_size,
                                  _dtype_to_int(x.dtype))
    return [grad_x, grad_weight]


@_medium_bwd.register_fake
def _medium_bwd_fake(grad_out: Tensor, x: Tensor, weight: Tensor) -> list[Tensor]:
    return [torch.empty_like(x), torch.empty_like(weight)]


def _medium_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _medium_autograd(ctx: Any, grad_out: Tensor) -> tuple[Any, ...]:
    x, weight = ctx.saved_tensors
    grad_x, grad_weight = torch.ops.cudnn_py.fft_causal_conv1d_bwd_primitive(grad_out, x, weight)
    return grad_x, grad_weight


_medium_fwd.register_autograd(torch.compiler.allow_in_graph(_medium_autograd), setup_context=_medium_setup)


@torch.library.custom_op("cudnn_py::long_fft_causal_conv1d_fwd_primitive", mutates_args=(), device_types="cuda")
def _long_fwd(x: Tensor, weight: Tensor) -> list[Tensor]:
    _require_api()
    batch, dim, seq_len, kernel_size = _validate_tensors(x, weight)
    _validate_long_shape(seq_len, kernel_size, x.dtype, x.device)
    x, weight = aligned(x), aligned(weight)
    y = torch.empty_like(x)
    dt = _dtype_to_int(x.dtype)
    ws_size, rs_size = sq.long_fft_causal_conv1d_get_buffer_sizes(batch, dim, seq_len, kernel_size, dt)
    workspace = torch.empty(ws_size, device=x.device, dtype=torch.uint8)
    reserve = torch.empty(rs_size, device=x.device, dtype=torch.uint8)
    sq.long_fft_causal_conv1d_forward(stream(x.device), x.data_ptr(), weight.data_ptr(), y.data_ptr(), batch, dim,
                                      seq_len, kernel_size, dt, workspace.data_ptr(), ws_size, reserve.data_ptr(),
                                      rs_size)
    return [y, reserve]  # the reserve (the transformed x and weight) lives until the backward


@_long_fwd.register_fake
def _long_fwd_fake(x: Tensor, weight: Tensor) -> list[Tensor]:
    batch, dim, _ = x.shape
    size = _long_reserve_bytes(batch, dim, weight.shape[1], x.dtype)
    return [torch.empty_like(x), torch.empty(size, device=x.device, dtype=torch.uint8)]


@torch.library.custom_op("cudnn_py::long_fft_causal_conv1d_bwd_primitive", mutates_args=(), device_types="cuda")
def _long_bwd(grad_out: Tensor, x: Tensor, weight: Tensor, reserve_space: Tensor) -> list[Tensor]:
    _require_api()
    batch, dim, seq_len, kernel_size = _validate_tensors(x, weight)
    _validate_long_shape(seq_len, kernel_size, x.dtype, x.device)
    _check_grad(grad_out, x)
    if reserve_space.device != x.device or reserve_space.dtype != torch.uint8:
        raise InvalidValueError("reserve_space must be a CUDA uint8 tensor on the same device as x.")
    grad_out, reserve_space = aligned(grad_out), aligned(reserve_space)
    grad_x, grad_weight = torch.empty_like(x), torch.empty_like(weight)
    dt = _dtype_to_int(x.dtype)
    ws_size, rs_size = sq.long_fft_causal_conv1d_get_buffer_sizes(batch, dim, seq_len, kernel_size, dt)
    if reserve_space.numel() < rs_size:
        raise InvalidValueError(f"reserve_space has {reserve_space.numel()} bytes, but the backend requires "
                                f"{rs_size}.")
    workspace = torch.empty(ws_size, device=x.device, dtype=torch.uint8)
    sq.long_fft_causal_conv1d_backward(stream(x.device), grad_out.data_ptr(), grad_x.data_ptr(),
                                       grad_weight.data_ptr(), batch, dim, seq_len, kernel_size, dt,
                                       workspace.data_ptr(), ws_size, reserve_space.data_ptr(), rs_size)
    return [grad_x, grad_weight]


@_long_bwd.register_fake
def _long_bwd_fake(grad_out: Tensor, x: Tensor, weight: Tensor, reserve_space: Tensor) -> list[Tensor]:
    return [torch.empty_like(x), torch.empty_like(weight)]


def _long_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(*inputs, output[1])


def _long_autograd(ctx: Any, grads: list[Tensor]) -> tuple[Any, ...]:
    x, weight, reserve_space = ctx.saved_tensors
    grad_x, grad_weight = torch.ops.cudnn_py.long_fft_causal_conv1d_bwd_primitive(grads[0], x, weight, reserve_space)
    return grad_x, grad_weight


_long_fwd.register_autograd(torch.compiler.allow_in_graph(_long_autograd), setup_context=_long_setup)


def fft_causal_conv1d(x: Tensor, weight: Tensor) -> Tensor:
    """Depthwise causal 1D convolution by FFT: ``y[t] = sum(weight[j] * x[t - j], j = 0 .. kernel_size - 1)``.

    The weight is in FIR order, reversed relative to :func:`causal_conv1d`'s (whose first weight multiplies the
    oldest sample). ``x`` ``(batch, dim, seq_len)``, ``weight`` ``(dim, kernel_size)``, FP16, BF16, FP32 or FP64
    CUDA tensors; any lengths (padded for the path the filter takes, the padding cut from the result). Needs cuDNN
    9.26 or newer. Returns ``(batch, dim, seq_len)``; with autograd and ``torch.compile``.
    """
    _, _, seq_len, weight_length = _validate_tensors(x, weight)
    if _medium_fft_is_available(weight_length, x.dtype, x.device):
        filter_length = _compatible_filter_length(weight_length)
        if weight_length != filter_length:
            weight = F.pad(weight, (0, filter_length - weight_length))
        padded = max(filter_length, -(-seq_len // filter_length) * filter_length)
        if seq_len != padded:
            x = F.pad(x, (0, padded - seq_len))
        return torch.ops.cudnn_py.fft_causal_conv1d_fwd_primitive(x, weight)[..., :seq_len]
    filter_length = max(_compatible_filter_length(weight_length), _compatible_filter_length(seq_len))
    _validate_long_shape(filter_length, filter_length, x.dtype, x.device)
    if weight_length != filter_length:
        weight = F.pad(weight, (0, filter_length - weight_length))
    if seq_len != filter_length:
        x = F.pad(x, (0, filter_length - seq_len))
    y, _ = torch.ops.cudnn_py.long_fft_causal_conv1d_fwd_primitive(x, weight)
    return y[..., :seq_len]
