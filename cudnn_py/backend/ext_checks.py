"""Argument checks shared by the thin wrappers of the C-API families (``ext_subquadratic``, ``ext_gnn``): cuDNN
dereferences every pointer it is given and trusts every size, so each argument is checked here, in Python, before the
call, and a refusal names the function and the argument (:class:`~cudnn_py.errors.InvalidTypeError` for a wrong
type, :class:`~cudnn_py.errors.InvalidValueError` for a wrong value).
"""
from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

from .._generated.enums import ENUMS
from .._generated.names import DataType
from ..errors import InvalidTypeError, InvalidValueError
from .api import error_for
from .ext_loader import function

INT_MAX = 2**31 - 1
ADDRESS_MAX = 2**64 - 1
_DATA_TYPES = {value: name for name, value, _s, _d in ENUMS["cudnnDataType_t"]}
FLOATING = (DataType.FLOAT, DataType.DOUBLE, DataType.HALF, DataType.BFLOAT16)


def integer(fn: str, name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidTypeError(f"{fn}: {name} must be an int, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidTypeError(f"{fn}: {name} must be an int, got {type(value).__name__}") from None


def size(fn: str, name: str, value: Any, lo: int = 1, hi: int = INT_MAX) -> int:
    """A C ``int`` dimension in [lo, hi]."""
    v = integer(fn, name, value)
    if not lo <= v <= hi:
        raise InvalidValueError(f"{fn}: {name} must be in [{lo}, {hi}], got {v}")
    return v


def pointer(fn: str, name: str, value: Any, *, nullable: bool = False, align: int = 1) -> int:
    """A device address (an int, or an object with ``data_ptr()``): non-null unless ``nullable``, ``align``-aligned."""
    if value is None:
        v = 0
    elif hasattr(value, "data_ptr") and not isinstance(value, int):
        v = integer(fn, name, value.data_ptr())
    else:
        v = integer(fn, name, value)
    if not 0 <= v <= ADDRESS_MAX:
        raise InvalidValueError(f"{fn}: {name} must be an address in [0, 2**64), got {v}")
    if v == 0 and not nullable:
        raise InvalidValueError(f"{fn}: {name} must not be NULL")
    if v and v % align:
        raise InvalidValueError(f"{fn}: {name} (0x{v:x}) must be {align}-byte aligned")
    return v


def stream(fn: str, value: Any) -> int:
    """A ``cudaStream_t``: an int (0: the default stream) or an object with ``cuda_stream``."""
    if value is None:
        return 0
    if hasattr(value, "cuda_stream"):
        value = value.cuda_stream
    return pointer(fn, "stream", value, nullable=True)


def data_type(fn: str, name: str, value: Any, allowed: Iterable[str] = FLOATING) -> int:
    """A ``cudnnDataType_t`` value (an int, or a member with ``int()``) among ``allowed`` (C names)."""
    v = integer(fn, name, value)
    allowed = tuple(allowed)
    if _DATA_TYPES.get(v) not in allowed:
        raise InvalidValueError(f"{fn}: {name} must be one of {', '.join(allowed)} (cudnnDataType_t), got {v}"
                                + (f" ({_DATA_TYPES[v]})" if v in _DATA_TYPES else ""))
    return v


def enum_value(fn: str, name: str, value: Any, enum: str) -> int:
    v = integer(fn, name, value)
    members = {val: n for n, val, _s, _d in ENUMS[enum]}
    if v not in members:
        listed = ", ".join(f"{n}={val}" for val, n in members.items())
        raise InvalidValueError(f"{fn}: {name} must be a {enum} value ({listed}), got {v}")
    return v


def product(fn: str, what: str, *factors: int, hi: int = 2**63 - 1) -> int:
    n = 1
    for f in factors:
        n *= f
    if n > hi:
        raise InvalidValueError(f"{fn}: {what} has {n} elements, more than the {hi} the C API can index")
    return n


def call(c_name: str, *args: Any) -> None:
    """Call the bound C function (gated on the loaded library) and raise cuDNN's status as our exception."""
    status = function(c_name)(*args)
    if status != 0:
        raise error_for(int(status), c_name)


def data_name(value: int) -> str:
    return _DATA_TYPES.get(value, str(value))
