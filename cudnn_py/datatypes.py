"""1.32's ``cudnn.datatypes``: the public conversions between framework dtypes and ``cudnn.data_type``.

Built on the one data-type catalog (:mod:`cudnn_py.dtypes`). torch is never imported here: a torch dtype can only
reach these functions from a process that has imported torch, so they read ``sys.modules``; ``is_torch_available``
asks the import system whether torch could be imported, without importing it.
"""
from __future__ import annotations

import importlib.util
import sys
from typing import Any

from . import dtypes
from .enums import data_type
from .errors import cudnnGraphNotSupportedError

cudnn_data_type = data_type  # 1.32's name for the enum in this module

torch_available: bool | None = None  # set by is_torch_available(), as in 1.32
cutlass_available: bool | None = None  # set by is_cutlass_available()

# the torch dtypes 1.32 maps (by their torch names); float64 and the fp8 / fp4 ones included
_TORCH_NAMES = ("float16", "half", "bfloat16", "float32", "float", "float64", "double", "int8", "int32", "int64",
                "uint8", "bool", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn_x2")


def is_torch_available() -> bool:
    """Whether torch can be imported (found on the path; not imported)."""
    global torch_available
    if torch_available is None:
        torch_available = "torch" in sys.modules or importlib.util.find_spec("torch") is not None
    return torch_available


def is_cutlass_available() -> bool:
    """Whether the CUTLASS DSL (``cutlass``) can be imported. cudnn_py runs no DSL kernels; 1.32 asks this to
    choose its DSL engines."""
    global cutlass_available
    if cutlass_available is None:
        cutlass_available = "cutlass" in sys.modules or importlib.util.find_spec("cutlass") is not None
    return cutlass_available


def _is_torch_dtype(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, getattr(torch, "dtype", ()))


def torch_to_cudnn_data_type(torch_data_type: Any) -> Any:
    """The ``cudnn.data_type`` of a ``torch.dtype`` (``torch.bfloat16`` -> ``BFLOAT16``), or None when it is no
    torch dtype or has no cuDNN twin."""
    if not _is_torch_dtype(torch_data_type):
        return None
    name = dtypes.framework_dtype_name(torch_data_type)
    if name not in _TORCH_NAMES:
        return None
    row = dtypes.BY_FRAMEWORK_NAME.get(name)
    return None if row is None else data_type[row.name]


_torch_to_cudnn_data_type = torch_to_cudnn_data_type  # the private spelling 1.32 keeps as an alias


def _cudnn_to_torch_data_type(cudnn_type: Any) -> Any:
    """The torch dtype of a ``cudnn.data_type``, or None (torch not imported, or no torch twin)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(cudnn_type, data_type):
        return None
    for name in dtypes.BY_NAME[cudnn_type.name].names:
        if name in _TORCH_NAMES and isinstance(getattr(torch, name, None), getattr(torch, "dtype", ())):
            return getattr(torch, name)
    return None


def _library_type(input_type: Any) -> Any:
    """A ``cudnn.data_type`` as is, a torch dtype converted; anything else raises
    :class:`~cudnn_py.errors.cudnnGraphNotSupportedError`, as in 1.32."""
    if isinstance(input_type, data_type):
        return input_type
    out = torch_to_cudnn_data_type(input_type)
    if out is not None:
        return out
    raise cudnnGraphNotSupportedError(f"No available conversion from type {input_type} to a library type.")


def _is_torch_tensor(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, getattr(torch, "Tensor", ()))


__all__ = ["cudnn_data_type", "is_cutlass_available", "is_torch_available", "torch_to_cudnn_data_type"]
