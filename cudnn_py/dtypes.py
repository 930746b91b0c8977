"""The one data-type catalog: classic name <-> ``CUDNN_DATA_*`` <-> DLPack (code, bits) <-> framework dtype names
<-> host C type <-> element size. Every layer reads data types from here (the classic enum conversion, operand
checks at execute, pass-by-value scalars, the reference engine), so they cannot disagree.

DLPack type codes are those of ``dlpack.h`` (v1.1): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6,
kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12, kDLFloat8_e8m0fnu 14, kDLFloat4_e2m1fn 17. Framework names are the dtype
names torch, numpy, cupy and ml_dtypes print (``torch.float16`` -> "float16"), so nothing is imported to match them.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from ._generated.names import DataType
from .errors import InvalidValueError

# DLPack type codes
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_COMPLEX, KDL_BOOL = 0, 1, 2, 4, 5, 6
KDL_FLOAT8_E4M3FN, KDL_FLOAT8_E5M2, KDL_FLOAT8_E8M0FNU, KDL_FLOAT4_E2M1FN = 10, 12, 14, 17


@dataclass(frozen=True)
class DType:
    """One row of the catalog."""

    name: str  # the classic ``data_type`` member name, e.g. "HALF"
    backend: str | None  # the ``cudnnDataType_t`` C name, e.g. "CUDNN_DATA_HALF"; None for NOT_SET
    bits: int  # storage bits per element (0: not a storage type)
    dlpack: tuple[int, int] | None = None  # the DLPack (code, bits) of an operand of this type
    also_dlpack: tuple[tuple[int, int], ...] = ()  # other DLPack types accepted for operands (bool as uint8)
    names: tuple[str, ...] = ()  # framework dtype names that mean this type
    ctype: Any = None  # the host C type of a pass-by-value scalar (half / bf16 as their raw 16 bits)

    @property
    def itemsize(self) -> float:
        """Bytes per element (0.5 for 4-bit types)."""
        return self.bits / 8

    @property
    def accepted_dlpack(self) -> frozenset[tuple[int, int]]:
        return frozenset(((self.dlpack,) if self.dlpack else ()) + self.also_dlpack)


CATALOG: tuple[DType, ...] = (
    DType("NOT_SET", None, 0),
    DType("FLOAT", DataType.FLOAT, 32, (KDL_FLOAT, 32), (), ("float32", "float"), ctypes.c_float),
    DType("DOUBLE", DataType.DOUBLE, 64, (KDL_FLOAT, 64), (), ("float64", "double"), ctypes.c_double),
    DType("HALF", DataType.HALF, 16, (KDL_FLOAT, 16), (), ("float16", "half"), ctypes.c_uint16),
    DType("INT8", DataType.INT8, 8, (KDL_INT, 8), (), ("int8",), ctypes.c_int8),
    DType("INT32", DataType.INT32, 32, (KDL_INT, 32), (), ("int32",), ctypes.c_int32),
    DType("INT8x4", DataType.INT8x4, 32),
    DType("UINT8", DataType.UINT8, 8, (KDL_UINT, 8), (), ("uint8",), ctypes.c_uint8),
    DType("UINT8x4", DataType.UINT8x4, 32),
    DType("INT8x32", DataType.INT8x32, 256),
    DType("BFLOAT16", DataType.BFLOAT16, 16, (KDL_BFLOAT, 16), (), ("bfloat16",), ctypes.c_uint16),
    DType("INT64", DataType.INT64, 64, (KDL_INT, 64), (), ("int64",), ctypes.c_int64),
    # cuDNN's BOOLEAN is one byte per element; frameworks without a bool DLPack type hand it over as uint8
    DType("BOOLEAN", DataType.BOOLEAN, 8, (KDL_BOOL, 8), ((KDL_UINT, 8),), ("bool", "bool_"), ctypes.c_bool),
    DType("FP8_E4M3", DataType.FP8_E4M3, 8, (KDL_FLOAT8_E4M3FN, 8), (), ("float8_e4m3fn",)),
    DType("FP8_E5M2", DataType.FP8_E5M2, 8, (KDL_FLOAT8_E5M2, 8), (), ("float8_e5m2",)),
    DType("FAST_FLOAT_FOR_FP8", DataType.FAST_FLOAT_FOR_FP8, 0),  # a compute type only
    DType("FP8_E8M0", DataType.FP8_E8M0, 8, (KDL_FLOAT8_E8M0FNU, 8), (), ("float8_e8m0fnu",)),
    DType("FP4_E2M1", DataType.FP4_E2M1, 4, (KDL_FLOAT4_E2M1FN, 4), (), ("float4_e2m1fn_x2", "float4_e2m1fn")),
    DType("INT4", DataType.INT4, 4, (KDL_INT, 4), (), ("int4",)),
    DType("FP8_E5M3", DataType.FP8_E5M3, 8),
)

BY_NAME: dict[str, DType] = {d.name: d for d in CATALOG}
BY_FRAMEWORK_NAME: dict[str, DType] = {n: d for d in CATALOG for n in d.names}
BY_DLPACK: dict[tuple[int, int], DType] = {d.dlpack: d for d in CATALOG if d.dlpack is not None}
BY_BACKEND: dict[str, DType] = {d.backend: d for d in CATALOG if d.backend is not None}


def dtype(name: str) -> DType:
    """The catalog row of a classic data-type name ("HALF")."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise InvalidValueError(f"no data type named {name!r}") from None


def framework_dtype_name(x: Any) -> str | None:
    """The dtype name of a torch / numpy / cupy / ml_dtypes dtype or scalar type, or of a plain string,
    without importing any framework: ``torch.float16`` -> "float16", ``np.dtype('<f2')`` -> "float16"."""
    if isinstance(x, str):
        text = x
    elif isinstance(x, type) and hasattr(x, "dtype"):  # numpy scalar types such as np.float16
        text = str(getattr(x, "__name__", ""))
    elif type(x).__module__.startswith("torch"):  # torch.float16 prints "torch.float16"
        text = str(x)
    elif hasattr(x, "name") and hasattr(x, "itemsize"):  # numpy (and ml_dtypes) dtypes
        text = str(x.name)
    elif str(x).startswith("torch."):  # objects that print like torch dtypes
        text = str(x)
    else:
        return None
    return text.rsplit(".", 1)[-1]


def of_framework_dtype(x: Any) -> DType | None:
    """The catalog row of a framework dtype (see :func:`framework_dtype_name`), or None."""
    name = framework_dtype_name(x)
    return BY_FRAMEWORK_NAME.get(name) if name else None
