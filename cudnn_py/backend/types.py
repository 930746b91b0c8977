"""The C layout of each ``cudnnBackendAttributeType_t``: the ctypes element type, and the C enum behind enum types.

Facts from ``cudnn_graph.h`` (each type's ``/**< ... value. */`` comment) and the live byte widths measured in
on cuDNN 9.28 (set, finalize and read back): BOOLEAN is a 1-byte C++ bool; every enum is a 4-byte int; FRACTION is
``{int64 numerator, int64 denominator}``.
"""
from __future__ import annotations

import ctypes
from typing import Any

from ..errors import InvalidValueError


class cudnnFraction_t(ctypes.Structure):
    _fields_ = [("numerator", ctypes.c_int64), ("denominator", ctypes.c_int64)]


# CUDNN_TYPE_* -> the C enum its elements hold (enum-valued types only)
ENUM_OF_TYPE = {
    "CUDNN_TYPE_DATA_TYPE": "cudnnDataType_t",
    "CUDNN_TYPE_CONVOLUTION_MODE": "cudnnConvolutionMode_t",
    "CUDNN_TYPE_HEUR_MODE": "cudnnBackendHeurMode_t",
    "CUDNN_TYPE_KNOB_TYPE": "cudnnBackendKnobType_t",
    "CUDNN_TYPE_NAN_PROPOGATION": "cudnnNanPropagation_t",
    "CUDNN_TYPE_NUMERICAL_NOTE": "cudnnBackendNumericalNote_t",
    "CUDNN_TYPE_LAYOUT_TYPE": "cudnnBackendLayoutType_t",
    "CUDNN_TYPE_ATTRIB_NAME": "cudnnBackendAttributeName_t",
    "CUDNN_TYPE_POINTWISE_MODE": "cudnnPointwiseMode_t",
    "CUDNN_TYPE_GENSTATS_MODE": "cudnnGenStatsMode_t",
    "CUDNN_TYPE_BN_FINALIZE_STATS_MODE": "cudnnBnFinalizeStatsMode_t",
    "CUDNN_TYPE_REDUCTION_OPERATOR_TYPE": "cudnnReduceTensorOp_t",
    "CUDNN_TYPE_BEHAVIOR_NOTE": "cudnnBackendBehaviorNote_t",
    "CUDNN_TYPE_TENSOR_REORDERING_MODE": "cudnnBackendTensorReordering_t",
    "CUDNN_TYPE_RESAMPLE_MODE": "cudnnResampleMode_t",
    "CUDNN_TYPE_PADDING_MODE": "cudnnPaddingMode_t",
    "CUDNN_TYPE_SIGNAL_MODE": "cudnnSignalMode_t",
    "CUDNN_TYPE_NORM_MODE": "cudnnBackendNormMode_t",
    "CUDNN_TYPE_NORM_FWD_PHASE": "cudnnBackendNormFwdPhase_t",
    "CUDNN_TYPE_RNG_DISTRIBUTION": "cudnnRngDistribution_t",
    "CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE": "cudnnMoeGroupedMatmulMode_t",
    "CUDNN_TYPE_RESHAPE_MODE": "cudnnBackendReshapeMode_t",
    "CUDNN_TYPE_OPERATIONGRAPH_MODE": "cudnnBackendOperationGraphMode_t",
    "CUDNN_TYPE_CUDA_GRAPH_RETENTION": "cudnnCudaGraphRetention_t",
}

_SCALAR_CTYPE = {
    "CUDNN_TYPE_HANDLE": ctypes.c_void_p,
    "CUDNN_TYPE_BOOLEAN": ctypes.c_bool,
    "CUDNN_TYPE_INT64": ctypes.c_int64,
    "CUDNN_TYPE_FLOAT": ctypes.c_float,
    "CUDNN_TYPE_DOUBLE": ctypes.c_double,
    "CUDNN_TYPE_VOID_PTR": ctypes.c_void_p,
    "CUDNN_TYPE_BACKEND_DESCRIPTOR": ctypes.c_void_p,
    "CUDNN_TYPE_INT32": ctypes.c_int32,
    "CUDNN_TYPE_CHAR": ctypes.c_char,
    "CUDNN_TYPE_FRACTION": cudnnFraction_t,
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
    "CUDNN_TYPE_INT64": (-(1 << 63), (1 << 63) - 1),
    "CUDNN_TYPE_INT32": (-(1 << 31), (1 << 31) - 1),
}


class StdVector(ctypes.Structure):
    """The layout of a C++ ``std::vector<T>`` in libstdc++ and libc++ on 64-bit Linux: three pointers (begin, end,
    end of storage). cuDNN's ``CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES`` / ``_STRIDES`` read their
    ``arrayOfElements`` as a ``const std::vector<std::vector<int64_t>>*`` (graph_flow.md §5.3; probed on 9.28: the
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
