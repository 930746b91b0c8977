"""IR tensor → finalized ``CUDNN_BACKEND_TENSOR_DESCRIPTOR``, with the attributes the frontend sets.

The descriptor's UNIQUE_ID is the IR uid: the IR owns the uid namespace, so the variant pack, the lowering and
the user's keys always agree. One descriptor per uid, shared by every op that reads or writes the tensor.
"""
from __future__ import annotations

import ctypes
from typing import Any

from .. import frontend_log as _fe
from .._generated.names import attr, desc
from ..backend import Descriptor, versions
from ..enums import dtype_info, to_backend_data_type
from ..errors import InvalidValueError
from ..ir.layout import pointer_alignment  # noqa: F401  (the lowering's public name for it)


def lower_tensor(t: Any, alignment: int = 16, ragged: Descriptor | None = None) -> Descriptor:
    """Create and finalize the tensor descriptor of IR tensor ``t``."""
    if not t.dim or not t.stride or len(t.dim) != len(t.stride):
        raise InvalidValueError(f"{_where(t)}: dims {t.dim} and strides {t.stride} must be non-empty and of equal rank")
    if _fe.ENABLED:
        _fe.tensor_creating(t)
    d = Descriptor(desc.TENSOR_DESCRIPTOR)
    d.set(attr.TENSOR_DATA_TYPE, to_backend_data_type(t.data_type))
    d.set(attr.TENSOR_DIMENSIONS, [int(x) for x in t.dim])  # the legalize pass made them rank >= 3
    d.set(attr.TENSOR_STRIDES, [int(x) for x in t.stride])
    d.set(attr.TENSOR_UNIQUE_ID, int(t.uid))
    d.set(attr.TENSOR_BYTE_ALIGNMENT, int(alignment))
    if t.is_virtual:
        d.set(attr.TENSOR_IS_VIRTUAL, True)
    if t.is_pass_by_value:
        d.set(attr.TENSOR_IS_BY_VALUE, True)
    if ragged is not None:
        d.set(attr.TENSOR_RAGGED_OFFSET_DESC, ragged)
    multiplier = int(getattr(t, "ragged_offset_multiplier", 1))
    if multiplier != 1:
        versions.require(attr.TENSOR_RAGGED_OFFSET_MULTIPLIER, what=f"{_where(t)}: ragged_offset_multiplier")
        d.set(attr.TENSOR_RAGGED_OFFSET_MULTIPLIER, multiplier)
    if int(getattr(t, "vector_count", 1)) != 1:
        d.set(attr.TENSOR_VECTOR_COUNT, int(t.vector_count))
        d.set(attr.TENSOR_VECTORIZED_DIMENSION, int(t.vector_dimension))
    reordering = getattr(t, "reordering_type", None)
    if reordering is not None and getattr(reordering, "name", "NONE") != "NONE":
        d.set(attr.TENSOR_REORDERING_MODE, f"CUDNN_TENSOR_REORDERING_{reordering.name}")
    if getattr(t, "is_compile_time_constant", False):
        versions.require(attr.TENSOR_CONSTANT_VALUE, what=f"{_where(t)}: a compile-time constant scalar")
        # the ctypes scalar itself: Descriptor checks its size against the data type and keeps it alive, and the
        # plan cache's fingerprint reads its bytes (an address alone would make the graph uncacheable)
        d.set(attr.TENSOR_CONSTANT_VALUE, host_scalar(t))
    d.finalize()
    if _fe.ENABLED:
        _fe.tensor_created(t, alignment)
    return d


def _where(t: Any) -> str:
    return f"tensor {t.name!r} (uid {t.uid})"


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
    ctype = dtype_info(t.data_type).ctype
    if ctype is None:
        raise InvalidValueError(f"tensor {t.name!r} (uid {t.uid}): no pass-by-value support for {t.data_type}")
    return ctype(value)


class TensorTable:
    """One finalized descriptor per program uid, created on first use (ragged-offset tensors first).
    ``ir_by_uid`` holds the program's tensors (legalized dims), not the user's."""

    def __init__(self, alignments: dict[int, int] | None = None):
        self.by_uid: dict[int, Descriptor] = {}
        self.ir_by_uid: dict[int, Any] = {}
        self._alignments = alignments or {}

    def __call__(self, t: Any) -> Descriptor:
        d = self.by_uid.get(t.uid)
        if d is None:
            ragged = self(t.ragged_offset) if getattr(t, "ragged_offset", None) is not None else None
            align = self._alignments.get(t.uid, getattr(t, "alignment", 16) or 16)
            d = self.by_uid[t.uid] = lower_tensor(t, align, ragged)
            self.ir_by_uid[t.uid] = t
        return d
