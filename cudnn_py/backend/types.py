"""The C layout of each ``cudnnBackendAttributeType_t``: the ctypes element type, and the C enum behind enum types.

Facts from ``cudnn_graph.h`` (each type's ``/**< ... value. */`` comment) and the live byte widths measured in
on cuDNN 9.28 (set, finalize and read back): BOOLEAN is a 1-byte C++ bool; every enum is a 4-byte int; FRACTION is
``{int64 numerator, int64 denominator}``.
"""
from __future__ import annotations

import ctypes
from typing import Any

from .._generated.names import atype
from ..errors import InvalidValueError


class cudnnFraction_t(ctypes.Structure):
    _fields_ = [("numerator", ctypes.c_int64), ("denominator", ctypes.c_int64)]


# CUDNN_TYPE_* -> the C enum its elements hold (enum-valued types only)
ENUM_OF_TYPE = {
    atype.DATA_TYPE: "cudnnDataType_t",
    atype.CONVOLUTION_MODE: "cudnnConvolutionMode_t",
    atype.HEUR_MODE: "cudnnBackendHeurMode_t",
    atype.KNOB_TYPE: "cudnnBackendKnobType_t",
    atype.NAN_PROPOGATION: "cudnnNanPropagation_t",
    atype.NUMERICAL_NOTE: "cudnnBackendNumericalNote_t",
    atype.LAYOUT_TYPE: "cudnnBackendLayoutType_t",
    atype.ATTRIB_NAME: "cudnnBackendAttributeName_t",
    atype.POINTWISE_MODE: "cudnnPointwiseMode_t",
    atype.GENSTATS_MODE: "cudnnGenStatsMode_t",
    atype.BN_FINALIZE_STATS_MODE: "cudnnBnFinalizeStatsMode_t",
    atype.REDUCTION_OPERATOR_TYPE: "cudnnReduceTensorOp_t",
    atype.BEHAVIOR_NOTE: "cudnnBackendBehaviorNote_t",
    atype.TENSOR_REORDERING_MODE: "cudnnBackendTensorReordering_t",
    atype.RESAMPLE_MODE: "cudnnResampleMode_t",
    atype.PADDING_MODE: "cudnnPaddingMode_t",
    atype.SIGNAL_MODE: "cudnnSignalMode_t",
    atype.NORM_MODE: "cudnnBackendNormMode_t",
    atype.NORM_FWD_PHASE: "cudnnBackendNormFwdPhase_t",
    atype.RNG_DISTRIBUTION: "cudnnRngDistribution_t",
    atype.MOE_GROUPED_MATMUL_MODE: "cudnnMoeGroupedMatmulMode_t",
    atype.RESHAPE_MODE: "cudnnBackendReshapeMode_t",
    atype.OPERATIONGRAPH_MODE: "cudnnBackendOperationGraphMode_t",
    atype.CUDA_GRAPH_RETENTION: "cudnnCudaGraphRetention_t",
}

_SCALAR_CTYPE = {
    atype.HANDLE: ctypes.c_void_p,
    atype.BOOLEAN: ctypes.c_bool,
    atype.INT64: ctypes.c_int64,
    atype.FLOAT: ctypes.c_float,
    atype.DOUBLE: ctypes.c_double,
    atype.VOID_PTR: ctypes.c_void_p,
    atype.BACKEND_DESCRIPTOR: ctypes.c_void_p,
    atype.INT32: ctypes.c_int32,
    atype.CHAR: ctypes.c_char,
    atype.FRACTION: cudnnFraction_t,
}


def element_ctype(type_name: str):
    """The ctypes type of one element of an attribute of type ``type_name``."""
    if type_name in ENUM_OF_TYPE:
        return ctypes.c_int
    try:
        return _SCALAR_CTYPE[type_name]
    except KeyError:
        raise InvalidValueError(f"unknown attribute type {type_name!r}") from None


# CUDNN_TYPE_* -> the inclusive range of its C integer type (ctypes wraps anything outside silently)
INT_RANGE = {
    atype.INT64: (-(1 << 63), (1 << 63) - 1),
    atype.INT32: (-(1 << 31), (1 << 31) - 1),
}


class StdVector(ctypes.Structure):
    """The layout of a C++ ``std::vector<T>`` in libstdc++ and libc++ on 64-bit Linux: three pointers (begin, end,
    end of storage). cuDNN's ``CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES`` / ``_STRIDES`` read their
    ``arrayOfElements`` as a ``const std::vector<std::vector<int64_t>>*`` (the frontend passes one; probed on 9.28: the
    backend copies it during the Set, so the memory only has to outlive the call)."""

    _fields_ = [("begin", ctypes.c_void_p), ("end", ctypes.c_void_p), ("end_of_storage", ctypes.c_void_p)]


class Int64VectorVector:
    """A ``std::vector<std::vector<int64_t>>`` built in ctypes memory from rows of ints (the override shapes or
    strides of a variant pack, one row per overridden tensor). ``ref`` is what goes to cuDNN as
    ``arrayOfElements``; the object keeps every buffer alive."""

    __slots__ = ("rows", "_inner", "_vectors", "outer")

    def __init__(self, rows: list[list[int]]):
        self.rows = [list(r) for r in rows]
        self._inner = [(ctypes.c_int64 * max(len(r), 1))(*r) for r in self.rows]
        self._vectors = (StdVector * max(len(self.rows), 1))()
        for vec, row, buf in zip(self._vectors, self.rows, self._inner):
            base = ctypes.addressof(buf)
            vec.begin, vec.end, vec.end_of_storage = base, base + 8 * len(row), base + 8 * len(row)
        base = ctypes.addressof(self._vectors)
        end = base + ctypes.sizeof(StdVector) * len(self.rows)
        self.outer = StdVector(base, end, end)

    @property
    def ref(self) -> Any:
        return ctypes.byref(self.outer)

    @property
    def address(self) -> int:
        return ctypes.addressof(self.outer)
