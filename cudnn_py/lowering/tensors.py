"""IR tensor → finalized ``CUDNN_BACKEND_TENSOR_DESCRIPTOR`` (``node_lowering.md`` §0.2).

The descriptor's UNIQUE_ID is the IR uid: the IR owns the uid namespace, so the variant pack, the lowering and
the user's keys always agree. One descriptor per uid, shared by every op that reads or writes the tensor.
"""
from __future__ import annotations

import ctypes
from typing import Any

from ..backend import Descriptor
from ..backend.descriptor import runtime_version
from ..enums import to_backend_data_type


def pointer_alignment(ptr: int, cap: int = 16) -> int:
    """The largest power of two (≤ cap) dividing ``ptr``."""
    if ptr == 0:
        return cap
    a = 1
    while a < cap and ptr % (a * 2) == 0:
        a *= 2
    return a


MIN_RANK = 3


def rank_pad(t: Any) -> int:
    """How many leading unit dims lowering adds to ``t``. cuDNN's engines expect at least 3 dims: a rank-2
    pointwise graph finalized and ran on cuDNN 9.19 / H200 but wrote only the first row of its output. The
    frontend's graphs are always ≥ 3-D, so lowering pads; the IR and the user keep the rank they chose."""
    return max(0, MIN_RANK - len(t.dim))


def lowered_dims(t: Any) -> tuple[list[int], list[int]]:
    pad = rank_pad(t)
    dims, strides = [int(x) for x in t.dim], [int(x) for x in t.stride]
    outer = max([d * s for d, s in zip(dims, strides)] or [1])
    return [1] * pad + dims, [outer] * pad + strides


def lower_tensor(t: Any, alignment: int = 16, ragged: "Descriptor | None" = None) -> Descriptor:
    """Create and finalize the tensor descriptor of IR tensor ``t``."""
    where = f"tensor {t.name!r} (uid {t.uid})"
    if not t.dim or not t.stride or len(t.dim) != len(t.stride):
        raise ValueError(f"{where}: dims {t.dim} and strides {t.stride} must be non-empty and of equal rank")
    d = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    d.set("CUDNN_ATTR_TENSOR_DATA_TYPE", to_backend_data_type(t.data_type))
    dims, strides = lowered_dims(t)
    d.set("CUDNN_ATTR_TENSOR_DIMENSIONS", dims)
    d.set("CUDNN_ATTR_TENSOR_STRIDES", strides)
    d.set("CUDNN_ATTR_TENSOR_UNIQUE_ID", int(t.uid))
    d.set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", int(alignment))
    if t.is_virtual:
        d.set("CUDNN_ATTR_TENSOR_IS_VIRTUAL", True)
    if t.is_pass_by_value:
        d.set("CUDNN_ATTR_TENSOR_IS_BY_VALUE", True)
    if ragged is not None:
        d.set("CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC", ragged)
    reordering = getattr(t, "reordering_type", None)
    if reordering is not None and getattr(reordering, "name", "NONE") != "NONE":
        d.set("CUDNN_ATTR_TENSOR_REORDERING_MODE", f"CUDNN_TENSOR_REORDERING_{reordering.name}")
    if getattr(t, "is_compile_time_constant", False):
        if runtime_version() < 92200:
            raise ValueError(f"{where}: compile-time constant scalars need cuDNN 9.22.0 or newer")
        value = host_scalar(t)
        d.set("CUDNN_ATTR_TENSOR_CONSTANT_VALUE", ctypes.addressof(value))
        d._keepalive["constant"] = value
    d.finalize()
    return d


_SCALAR_CTYPES = {
    "FLOAT": ctypes.c_float, "DOUBLE": ctypes.c_double, "INT32": ctypes.c_int32, "INT64": ctypes.c_int64,
    "HALF": ctypes.c_uint16, "BFLOAT16": ctypes.c_uint16, "BOOLEAN": ctypes.c_bool, "INT8": ctypes.c_int8,
    "UINT8": ctypes.c_uint8,
}


def host_scalar(t: Any) -> Any:
    """The pass-by-value value of ``t`` as a ctypes object in the tensor's C type (half/bf16 as raw bits)."""
    import numpy as np

    name = t.data_type.name
    value = t.pass_by_value
    if name == "HALF":
        return ctypes.c_uint16(int(np.array(value, dtype=np.float16).view(np.uint16)))
    if name == "BFLOAT16":
        bits = int(np.array(value, dtype=np.float32).view(np.uint32))
        bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
        return ctypes.c_uint16(bits >> 16)
    try:
        return _SCALAR_CTYPES[name](value)
    except KeyError:
        raise ValueError(f"tensor {t.name!r} (uid {t.uid}): no pass-by-value support for {t.data_type}") from None


class TensorTable:
    """One finalized descriptor per IR uid, created on first use (ragged-offset tensors first)."""

    def __init__(self, alignments: dict[int, int] | None = None):
        self.by_uid: dict[int, Descriptor] = {}
        self.ir_by_uid: dict[int, Any] = {}
        self._alignments = alignments or {}

    def __call__(self, t: Any) -> Descriptor:
        d = self.by_uid.get(t.uid)
        if d is None:
            ragged = self(t.ragged_offset) if getattr(t, "ragged_offset", None) is not None else None
            d = self.by_uid[t.uid] = lower_tensor(t, self._alignments.get(t.uid, getattr(t, "alignment", 16) or 16), ragged)
            self.ir_by_uid[t.uid] = t
        return d
