"""Operand and stream interop without any framework installed: protocols, ints, numpy, DLPack."""
from __future__ import annotations

import numpy as np
import pytest

from cudnn_py.interop import KDL_CPU, operand_info, stream_ptr


class CoreStream:  # cuda.core-style
    def __cuda_stream__(self):
        return (0, 0xABC)


class TorchLikeStream:
    cuda_stream = 0x1234


class CupyLikeStream:
    ptr = 0x5678


def test_stream_forms():
    assert stream_ptr(None) == 0
    assert stream_ptr(42) == 42
    assert stream_ptr(CoreStream()) == 0xABC
    assert stream_ptr(TorchLikeStream()) == 0x1234
    assert stream_ptr(CupyLikeStream()) == 0x5678
    with pytest.raises(TypeError, match="cannot use str as a CUDA stream"):
        stream_ptr("default")


def test_numpy_and_dlpack_operands():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)[:, :, ::2]
    info = operand_info(a)
    assert info.ptr == a.ctypes.data and info.shape == (2, 3, 2) and info.strides == (12, 4, 2)
    assert info.dtype == (2, 32) and info.device_type == KDL_CPU and info.on_host
    b = np.ones((3, 5), dtype=np.float16)
    d = operand_info(_DLPackOnly(b))
    assert d.ptr == b.ctypes.data and d.shape == (3, 5) and d.strides == (5, 1) and d.dtype == (2, 16)
    assert operand_info(0x1000).ptr == 0x1000 and operand_info(0x1000).shape is None
    with pytest.raises(TypeError, match="cannot use object as a tensor operand"):
        operand_info(object())


class _DLPackOnly:
    """Exposes an array only through the DLPack protocol."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()
