"""Thin wrappers of ``cudnn_subquadratic_ops.h`` (causal conv1d, its NWH and back-to-back forms, the medium and long
FFT causal convolutions), under the official module's top-level names and argument order (``cudnn.
causal_conv1d_forward(stream, x, weight, bias, y, batch, dim, seq_len, kernel_size, data_type, activation)``, ...).

Pointers are device addresses (ints, or objects with ``data_ptr()``), ``stream`` a ``cudaStream_t`` (an int, 0 for
the default stream, or an object with ``cuda_stream``), data types ``cudnnDataType_t`` values. Every argument is
checked first (:mod:`.ext_checks`), then the function is called from ``libcudnn_ext.so.9``
(:mod:`.ext_loader`: gated on the loaded cuDNN) and a failed status raised as cudnn_py's exception.
"""
from __future__ import annotations

from typing import Any

from .._generated.names import DataType
from . import ext_checks as ck
from .ext_loader import function

# the kernel widths cudnnCausalConv1dForward supports (its header)
CAUSAL_KERNEL_SIZES = (2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256)
# the widths the official bindings admit for the NWH form and the back-to-back form's two convolutions
NWH_KERNEL_MAX = 128
B2B_PROJ_KERNELS, B2B_MIXER_KERNELS = (2, 32), (2, 256)
FFT_MEDIUM_KERNELS = (128, 16384)  # a power of two in this range
FFT_LONG_KERNELS = (4096, 16777216)
FFT_ALIGN = 16


def _dwtype(fn: str, data_type: int, dw_data_type: Any) -> int:
    """dweight/dbias: DOUBLE for DOUBLE inputs, FLOAT otherwise (the header)."""
    dw = ck.data_type(fn, "dw_data_type", dw_data_type, (DataType.FLOAT, DataType.DOUBLE))
    want = DataType.DOUBLE if ck.data_name(data_type) == DataType.DOUBLE else DataType.FLOAT
    if ck.data_name(dw) != want:
        raise ck.InvalidValueError(f"{fn}: dw_data_type must be {want} when data_type is {ck.data_name(data_type)}, "
                                   f"got {ck.data_name(dw)}")
    return dw


def _shape(fn: str, batch: Any, dim: Any, seq_len: Any) -> tuple[int, int, int]:
    b, d, t = ck.size(fn, "batch", batch), ck.size(fn, "dim", dim), ck.size(fn, "seq_len", seq_len)
    ck.product(fn, "x", b, d, t)
    return b, d, t


def _causal_kernel(fn: str, kernel_size: Any, hi: int = CAUSAL_KERNEL_SIZES[-1]) -> int:
    k = ck.integer(fn, "kernel_size", kernel_size)
    allowed = tuple(w for w in CAUSAL_KERNEL_SIZES if w <= hi)
    if k not in allowed:
        raise ck.InvalidValueError(f"{fn}: kernel_size must be one of {allowed}, got {k}")
    return k


def _activation(fn: str, activation: Any) -> int:
    return ck.enum_value(fn, "activation", activation, "cudnnCausalConv1dActivation_t")


def _kernel_max(c_name: str) -> int:
    return NWH_KERNEL_MAX if "Nwh" in c_name else CAUSAL_KERNEL_SIZES[-1]


def _causal_fwd(c_name: str, fn: str, stream: Any, x: Any, weight: Any, bias: Any, y: Any, batch: Any, dim: Any,
                seq_len: Any, kernel_size: Any, data_type: Any, activation: Any) -> None:
    args = (ck.stream(fn, stream), ck.pointer(fn, "x", x), ck.pointer(fn, "weight", weight),
            ck.pointer(fn, "bias", bias), ck.pointer(fn, "y", y), *_shape(fn, batch, dim, seq_len),
            _causal_kernel(fn, kernel_size, _kernel_max(c_name)), ck.data_type(fn, "data_type", data_type),
            _activation(fn, activation))
    ck.call(c_name, *args)


def _causal_bwd(c_name: str, fn: str, stream: Any, x: Any, weight: Any, bias: Any, dy: Any, dx: Any, dweight: Any,
                dbias: Any, batch: Any, dim: Any, seq_len: Any, kernel_size: Any, data_type: Any, dw_data_type: Any,
                activation: Any) -> None:
    dt = ck.data_type(fn, "data_type", data_type)
    args = (ck.stream(fn, stream), ck.pointer(fn, "x", x), ck.pointer(fn, "weight", weight),
            ck.pointer(fn, "bias", bias), ck.pointer(fn, "dy", dy), ck.pointer(fn, "dx", dx),
            ck.pointer(fn, "dweight", dweight), ck.pointer(fn, "dbias", dbias), *_shape(fn, batch, dim, seq_len),
            _causal_kernel(fn, kernel_size, _kernel_max(c_name)), dt, _dwtype(fn, dt, dw_data_type),
            _activation(fn, activation))
    ck.call(c_name, *args)


def causal_conv1d_forward(stream: Any, x: Any, weight: Any, bias: Any, y: Any, batch: int, dim: int, seq_len: int,
                          kernel_size: int, data_type: int, activation: int) -> None:
    """``cudnnCausalConv1dForward``: y = act(causal depthwise conv1d(x, weight) + bias), x and y (batch, dim,
    seq_len), weight (dim, kernel_size), bias (dim,), all contiguous."""
    _causal_fwd("cudnnCausalConv1dForward", "causal_conv1d_forward", stream, x, weight, bias, y, batch, dim, seq_len,
                kernel_size, data_type, activation)


def causal_conv1d_backward(stream: Any, x: Any, weight: Any, bias: Any, dy: Any, dx: Any, dweight: Any, dbias: Any,
                           batch: int, dim: int, seq_len: int, kernel_size: int, data_type: int, dw_data_type: int,
                           activation: int) -> None:
    """``cudnnCausalConv1dBackward``: dx written; dweight and dbias accumulated (zero them first)."""
    _causal_bwd("cudnnCausalConv1dBackward", "causal_conv1d_backward", stream, x, weight, bias, dy, dx, dweight,
                dbias, batch, dim, seq_len, kernel_size, data_type, dw_data_type, activation)


def causal_conv1d_nwh_forward(stream: Any, x: Any, weight: Any, bias: Any, y: Any, batch: int, dim: int,
                              seq_len: int, kernel_size: int, data_type: int, activation: int) -> None:
    """``cudnnCausalConv1dNwhForward``: as :func:`causal_conv1d_forward` with x, y (batch, seq_len, dim) and weight
    (kernel_size, dim)."""
    _causal_fwd("cudnnCausalConv1dNwhForward", "causal_conv1d_nwh_forward", stream, x, weight, bias, y, batch, dim,
                seq_len, kernel_size, data_type, activation)


def causal_conv1d_nwh_backward(stream: Any, x: Any, weight: Any, bias: Any, dy: Any, dx: Any, dweight: Any,
                               dbias: Any, batch: int, dim: int, seq_len: int, kernel_size: int, data_type: int,
                               dw_data_type: int, activation: int) -> None:
    """``cudnnCausalConv1dNwhBackward``."""
    _causal_bwd("cudnnCausalConv1dNwhBackward", "causal_conv1d_nwh_backward", stream, x, weight, bias, dy, dx,
                dweight, dbias, batch, dim, seq_len, kernel_size, data_type, dw_data_type, activation)


def b2b_causal_conv1d_forward(stream: Any, x: Any, weights_proj: Any, weights_mixer: Any, skip_bias: Any, y: Any,
                              y_gated: Any, batch: int, dim: int, seq_len: int, kernel_size_proj: int,
                              kernel_size_mixer: int, data_type: int) -> None:
    """``cudnnB2BCausalConv1dForward``: x (batch, dim, 3, seq_len), weights_proj (dim, 3, kernel_size_proj),
    weights_mixer (dim, kernel_size_mixer), skip_bias (dim,), y and y_gated (batch, dim, seq_len)."""
    fn = "b2b_causal_conv1d_forward"
    b, d, t = _shape(fn, batch, dim, seq_len)
    ck.product(fn, "x", b, d, 3, t)
    args = (ck.stream(fn, stream), ck.pointer(fn, "x", x), ck.pointer(fn, "weights_proj", weights_proj),
            ck.pointer(fn, "weights_mixer", weights_mixer), ck.pointer(fn, "skip_bias", skip_bias),
            ck.pointer(fn, "y", y), ck.pointer(fn, "y_gated", y_gated), b, d, t,
            ck.size(fn, "kernel_size_proj", kernel_size_proj, *B2B_PROJ_KERNELS),
            ck.size(fn, "kernel_size_mixer", kernel_size_mixer, *B2B_MIXER_KERNELS),
            ck.data_type(fn, "data_type", data_type))
    ck.call("cudnnB2BCausalConv1dForward", *args)


def b2b_causal_conv1d_backward(stream: Any, x: Any, weights_proj: Any, weights_mixer: Any, skip_bias: Any, y: Any,
                               dy: Any, dx: Any, dweights_proj: Any, dweights_mixer: Any, dskip_bias: Any, batch: int,
                               dim: int, seq_len: int, kernel_size_proj: int, kernel_size_mixer: int, data_type: int,
                               dw_data_type: int) -> None:
    """``cudnnB2BCausalConv1dBackward``."""
    fn = "b2b_causal_conv1d_backward"
    b, d, t = _shape(fn, batch, dim, seq_len)
    ck.product(fn, "x", b, d, 3, t)
    dt = ck.data_type(fn, "data_type", data_type)
    args = (ck.stream(fn, stream), ck.pointer(fn, "x", x), ck.pointer(fn, "weights_proj", weights_proj),
            ck.pointer(fn, "weights_mixer", weights_mixer), ck.pointer(fn, "skip_bias", skip_bias),
            ck.pointer(fn, "y", y), ck.pointer(fn, "dy", dy), ck.pointer(fn, "dx", dx),
            ck.pointer(fn, "dweights_proj", dweights_proj), ck.pointer(fn, "dweights_mixer", dweights_mixer),
            ck.pointer(fn, "dskip_bias", dskip_bias), b, d, t,
            ck.size(fn, "kernel_size_proj", kernel_size_proj, *B2B_PROJ_KERNELS),
            ck.size(fn, "kernel_size_mixer", kernel_size_mixer, *B2B_MIXER_KERNELS), dt, _dwtype(fn, dt, dw_data_type))
    ck.call("cudnnB2BCausalConv1dBackward", *args)


def _power_of_two(fn: str, name: str, value: Any, lo: int, hi: int) -> int:
    v = ck.size(fn, name, value, lo, hi)
    if v & (v - 1):
        raise ck.InvalidValueError(f"{fn}: {name} must be a power of two in [{lo}, {hi}], got {v}")
    return v


def _medium(fn: str, batch: Any, dim: Any, seq_len: Any, kernel_size: Any) -> tuple[int, int, int, int]:
    b, d, t = _shape(fn, batch, dim, seq_len)
    k = _power_of_two(fn, "kernel_size", kernel_size, *FFT_MEDIUM_KERNELS)
    if t < k or t % k:
        raise ck.InvalidValueError(f"{fn}: seq_len must be a multiple of kernel_size ({k}) and at least it, got {t}")
    return b, d, t, k


def _long(fn: str, batch: Any, dim: Any, seq_len: Any, kernel_size: Any) -> tuple[int, int, int, int]:
    b, d, t = _shape(fn, batch, dim, seq_len)
    k = _power_of_two(fn, "kernel_size", kernel_size, *FFT_LONG_KERNELS)
    if t != k:
        raise ck.InvalidValueError(f"{fn}: seq_len must equal kernel_size ({k}) on the long FFT path, got {t}")
    return b, d, t, k


def _aligned(fn: str, name: str, value: Any) -> int:
    return ck.pointer(fn, name, value, align=FFT_ALIGN)


def fft_causal_conv1d_forward(stream: Any, x: Any, weight: Any, y: Any, batch: int, dim: int, seq_len: int,
                              kernel_size: int, data_type: int) -> None:
    """``cudnnFFTCausalConv1dForward`` (the medium FFT path; the FFT weight layout, reversed relative to
    :func:`causal_conv1d_forward`'s)."""
    fn = "fft_causal_conv1d_forward"
    args = (ck.stream(fn, stream), _aligned(fn, "x", x), _aligned(fn, "weight", weight), _aligned(fn, "y", y),
            *_medium(fn, batch, dim, seq_len, kernel_size), ck.data_type(fn, "data_type", data_type))
    ck.call("cudnnFFTCausalConv1dForward", *args)


def fft_causal_conv1d_backward(stream: Any, x: Any, weight: Any, dy: Any, dx: Any, dweight: Any, batch: int,
                               dim: int, seq_len: int, kernel_size: int, data_type: int) -> None:
    """``cudnnFFTCausalConv1dBackward``."""
    fn = "fft_causal_conv1d_backward"
    args = (ck.stream(fn, stream), _aligned(fn, "x", x), _aligned(fn, "weight", weight), _aligned(fn, "dy", dy),
            _aligned(fn, "dx", dx), _aligned(fn, "dweight", dweight), *_medium(fn, batch, dim, seq_len, kernel_size),
            ck.data_type(fn, "data_type", data_type))
    ck.call("cudnnFFTCausalConv1dBackward", *args)


def long_fft_causal_conv1d_get_buffer_sizes(batch: int, dim: int, seq_len: int, kernel_size: int,
                                            data_type: int) -> tuple[int, int]:
    """``cudnnLongFFTCausalConv1dGetBufferSizes``: (workspace bytes, reserve-space bytes); host only."""
    import ctypes

    fn = "long_fft_causal_conv1d_get_buffer_sizes"
    args = (*_long(fn, batch, dim, seq_len, kernel_size), ck.data_type(fn, "data_type", data_type))
    ws, rs = ctypes.c_size_t(), ctypes.c_size_t()
    ck.call("cudnnLongFFTCausalConv1dGetBufferSizes", *args, ctypes.byref(ws), ctypes.byref(rs))
    return int(ws.value), int(rs.value)


def _buffers(fn: str, workspace: Any, workspace_size: Any, reserve: Any, reserve_size: Any,
             need: tuple[int, int]) -> tuple[int, int, int, int]:
    ws, rs = ck.integer(fn, "workspace_size", workspace_size), ck.integer(fn, "reserve_space_size", reserve_size)
    for name, got, want in (("workspace_size", ws, need[0]), ("reserve_space_size", rs, need[1])):
        if not want <= got < 2**64:
            raise ck.InvalidValueError(f"{fn}: {name} must be at least {want} bytes "
                                       f"(long_fft_causal_conv1d_get_buffer_sizes), got {got}")
    return (_aligned(fn, "workspace", workspace), ws, _aligned(fn, "reserve_space", reserve), rs)


def long_fft_causal_conv1d_forward(stream: Any, x: Any, weight: Any, y: Any, batch: int, dim: int, seq_len: int,
                                   kernel_size: int, data_type: int, workspace: Any, workspace_size: int,
                                   reserve_space: Any, reserve_space_size: int) -> None:
    """``cudnnLongFFTCausalConv1dForward``: the buffers at least what the size query says."""
    fn = "long_fft_causal_conv1d_forward"
    shape = _long(fn, batch, dim, seq_len, kernel_size)
    dt = ck.data_type(fn, "data_type", data_type)
    head = (ck.stream(fn, stream), _aligned(fn, "x", x), _aligned(fn, "weight", weight), _aligned(fn, "y", y))
    bufs = _buffers(fn, workspace, workspace_size, reserve_space, reserve_space_size,
                    long_fft_causal_conv1d_get_buffer_sizes(*shape, dt))
    ck.call("cudnnLongFFTCausalConv1dForward", *head, *shape, dt, *bufs)


def long_fft_causal_conv1d_backward(stream: Any, dy: Any, dx: Any, dweight: Any, batch: int, dim: int, seq_len: int,
                                    kernel_size: int, data_type: int, workspace: Any, workspace_size: int,
                                    reserve_space: Any, reserve_space_size: int) -> None:
    """``cudnnLongFFTCausalConv1dBackward``: reserve_space from the matching forward call."""
    fn = "long_fft_causal_conv1d_backward"
    shape = _long(fn, batch, dim, seq_len, kernel_size)
    dt = ck.data_type(fn, "data_type", data_type)
    head = (ck.stream(fn, stream), _aligned(fn, "dy", dy), _aligned(fn, "dx", dx), _aligned(fn, "dweight", dweight))
    bufs = _buffers(fn, workspace, workspace_size, reserve_space, reserve_space_size,
                    long_fft_causal_conv1d_get_buffer_sizes(*shape, dt))
    ck.call("cudnnLongFFTCausalConv1dBackward", *head, *shape, dt, *bufs)


def subquadratic_ops_version_check() -> None:
    """``cudnnSubquadraticOpsVersionCheck``: raises when libcudnn_ext and libcudnn come from different releases."""
    ck.call("cudnnSubquadraticOpsVersionCheck")


__all__ = ["causal_conv1d_forward", "causal_conv1d_backward", "causal_conv1d_nwh_forward",
           "causal_conv1d_nwh_backward", "b2b_causal_conv1d_forward", "b2b_causal_conv1d_backward",
           "fft_causal_conv1d_forward", "fft_causal_conv1d_backward", "long_fft_causal_conv1d_get_buffer_sizes",
           "long_fft_causal_conv1d_forward", "long_fft_causal_conv1d_backward", "function"]
