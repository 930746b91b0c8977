"""Python values -> the C elements of one attribute type, range-checked: what ``Descriptor.set`` hands to
``cudnnBackendSetAttribute`` for the scalar types (integers, floats, booleans, enums, chars, fractions).

ctypes converts silently where the backend would then see something else than the caller wrote: an int beyond the
C range wraps (dims ``[2**64 + 2, 3]`` finalize as ``[2, 3]``; uids ``1`` and ``2**64 + 1`` collide), any object
with ``__bool__`` becomes a C bool (``None``, ``"no"``, ``{}``), a float beyond float32 becomes ``inf``, and an int
outside an enum is passed as is (an enum value the library does not know). Here every element is checked:

* INT64 / INT32: an ``int`` (or anything with ``__index__``, e.g. numpy integers; not ``bool``) within the C range;
* FLOAT / DOUBLE: a real number (not ``bool``), finite unless the attribute is listed in
  ``requirements.NONFINITE_ALLOWED``; for FLOAT, within float32's range (no silent overflow to ``inf``);
* BOOLEAN: ``bool``, numpy ``bool_``, or an int that is 0 or 1 — nothing else;
* enums: a member of that C enum (its class, its C name, or its int value) that the *loaded* library has (the
  member's ``@since`` <= ``cudnnGetVersion()``); never a member of another enum, never ``bool``;
* CHAR: ``str`` or ``bytes``; FRACTION: ``Fraction``, ``int``, ``(numerator, denominator)``, or a finite float,
  with both parts in int64 and a positive denominator.

Every refusal is a :class:`~cudnn_py.errors.DescriptorError` naming the attribute, the element and why.
"""
from __future__ import annotations

import ctypes
import enum
import math
from fractions import Fraction
from functools import cache
from typing import Any

from .._generated.enums import ENUMS
from .._generated.names import atype
from ..errors import DescriptorError, InvalidTypeError
from .enums import CEnum, enum_class
from .requirements import NONFINITE_ALLOWED
from .types import ENUM_OF_TYPE, INT_RANGE, cudnnFraction_t, element_ctype
from .versions import runtime_version

FLT_MAX = 3.4028234663852886e38
INT64_MIN, INT64_MAX = INT_RANGE[atype.INT64]
_T_FLOAT = atype.FLOAT  # compared per float_array call: bound once


def _bad(attr: str, i: int, n: int, msg: str) -> DescriptorError:
    where = f"{attr}" if n == 1 else f"{attr} element {i}"
    return DescriptorError(f"{where}: {msg}")


def _show(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


# --------------------------------------------------------------------------------------------------- integers
def int_array(attr: str, type_name: str, values: list) -> Any:
    ct, lo, hi = _INT_TYPES[type_name]
    for v in values:  # the hot path (every dims/strides/uid set): plain ints in range, checked in one pass
        if v.__class__ is not int or v < lo or v > hi:
            break
    else:
        return array_type(ct, len(values))(*values)
    n = len(values)
    for i, v in enumerate(values):
        if v.__class__ is not int:  # anything else with __index__ (numpy integers), normalised; never bool
            values[i] = v = _as_int(attr, i, n, v, type_name)
        if v < lo or v > hi:
            raise _bad(attr, i, n, f"{v} is out of range for {type_name} [{lo}, {hi}] (ctypes would wrap it)")
    return array_type(ct, n)(*values)


_INT_TYPES = {t: (element_ctype(t), lo, hi) for t, (lo, hi) in INT_RANGE.items()}
_ARRAY_TYPES: dict[tuple[Any, int], Any] = {}  # (C type, length) -> the ctypes array type
CACHED_ARRAY_LENGTH = 64  # longer arrays are rare (a dims list has at most 8): made each time, not kept


def array_type(ct: Any, n: int) -> Any:
    """``ct * n``, made once: ctypes keeps an array type only while something refers to it, so ``ct * n`` builds a
    new type (a class, ~14 us and a reference cycle for the collector) each time the last array of it is gone."""
    made = _ARRAY_TYPES.get((ct, n))
    if made is None:
        made = ct * n
        if n <= CACHED_ARRAY_LENGTH:
            _ARRAY_TYPES[(ct, n)] = made
    return made


def _as_int(attr: str, i: int, n: int, v: Any, type_name: str) -> int:
    if isinstance(v, (bool, enum.Enum)) or type(v).__name__ == "bool_":
        raise _bad(attr, i, n, f"cannot convert {type(v).__name__} {_show(v)} to {type_name} (it takes an int)")
    index = getattr(type(v), "__index__", None)
    if index is None:
        raise _bad(attr, i, n, f"cannot convert {type(v).__name__} {_show(v)} to {type_name} (it takes an int)")
    try:
        return int(index(v))
    except Exception as e:
        raise _bad(attr, i, n, f"cannot read {_show(v)} as an int: {e}") from None


# --------------------------------------------------------------------------------------------------- floats
def float_array(attr: str, type_name: str, values: list) -> Any:
    n = len(values)
    nonfinite = NONFINITE_ALLOWED.get(attr, "")
    single = type_name == _T_FLOAT
    out = []
    for i, v in enumerate(values):
        if v.__class__ is not float:
            if isinstance(v, (bool, enum.Enum, str, bytes)) or type(v).__name__ == "bool_" or v is None:
                raise _bad(attr, i, n, f"cannot convert {type(v).__name__} {_show(v)} to {type_name} (it takes a "
                                       "real number)")
            try:
                v = float(v)
            except (TypeError, ValueError, OverflowError) as e:
                raise _bad(attr, i, n, f"cannot convert {type(v).__name__} {_show(v)} to {type_name} (it takes a "
                                       f"real number: {e})") from None
        if v != v:
            if "nan" not in nonfinite:
                raise _bad(attr, i, n, "NaN is not a meaningful value here")
        elif v in (math.inf, -math.inf):
            if "inf" not in nonfinite:
                raise _bad(attr, i, n, f"{v} is not allowed here (a finite value is required)")
        elif single and abs(v) > FLT_MAX:
            raise _bad(attr, i, n, f"{v} overflows CUDNN_TYPE_FLOAT (|x| <= {FLT_MAX:.7g}); pass "
                                   "type='CUDNN_TYPE_DOUBLE' where the attribute accepts it")
        out.append(v)
    return array_type(element_ctype(type_name), n)(*out)


# --------------------------------------------------------------------------------------------------- booleans
def bool_array(attr: str, values: list) -> Any:
    n = len(values)
    out = []
    for i, v in enumerate(values):
        if v is True or v is False:
            out.append(v)
        elif type(v).__name__ == "bool_" and hasattr(v, "item"):  # numpy.bool_
            out.append(bool(v.item()))
        elif not isinstance(v, enum.Enum) and hasattr(type(v), "__index__") and v.__index__() in (0, 1):
            out.append(bool(v.__index__()))
        else:
            raise _bad(attr, i, n, f"CUDNN_TYPE_BOOLEAN takes True/False (or 0/1), not {type(v).__name__} "
                                   f"{_show(v)}")
    return array_type(ctypes.c_bool, n)(*out)


# --------------------------------------------------------------------------------------------------- enums
@cache
def enum_values(enum_name: str, version: int) -> dict[int, str]:
    """value -> member name, for the members of ``enum_name`` that a library of ``version`` has."""
    out: dict[int, str] = {}
    for name, value, since, _deprecated in ENUMS[enum_name]:
        if since <= version:
            out.setdefault(value, name)
    return out


def enum_member(attr: str, type_name: str, v: Any, i: int = 0, n: int = 1) -> CEnum:
    """The member of the enum behind ``type_name`` for ``v`` (a member, its C name or its int value), checked against
    the loaded library."""
    enum_name = ENUM_OF_TYPE[type_name]
    cls = enum_class(enum_name)
    if v.__class__ is cls:
        value = int(v)
    elif isinstance(v, str):
        try:
            value = int(cls[v])
        except KeyError:
            raise _bad(attr, i, n, f"{v!r} is not a member of {enum_name}") from None
    elif isinstance(v, CEnum):
        raise _bad(attr, i, n, f"{v} is a member of {type(v).__name__}, not of {enum_name}")
    elif isinstance(v, (bool, enum.Enum)) or type(v).__name__ == "bool_" or not hasattr(type(v), "__index__"):
        raise _bad(attr, i, n, f"{v!r} is not a member of {enum_name} (give the member, its C name or its value)")
    else:
        value = v.__index__()
    valid = enum_values(enum_name, runtime_version())
    if value not in valid:
        since = next((s for name, val, s, _d in ENUMS[enum_name] if val == value), None)
        if since is not None:
            raise _bad(attr, i, n, f"{cls(value).name} needs cuDNN {_version(since)}; the loaded library is "
                                   f"{_version(runtime_version())}")
        raise _bad(attr, i, n, f"{value} is not a value of {enum_name}")
    return cls(value)


def _version(v: int) -> str:
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


# (type, the value's class, the value, library version) -> the C value, for names and members already checked: an
# enum set is on every lowering path, and the full check builds the member through the enum's metaclass (4-5 µs).
# Keyed by the value's class too: an IntEnum member equals its int, so a member of another enum must not find it.
_checked_enums: dict[tuple[str, type, Any, int], int] = {}


def enum_array(attr: str, type_name: str, values: list) -> Any:
    n = len(values)
    version = runtime_version()
    out = []
    for i, v in enumerate(values):
        cls = v.__class__
        key = (type_name, cls, v, version) if cls is str or isinstance(v, CEnum) else None
        value = _checked_enums.get(key) if key is not None else None
        if value is None:
            value = int(enum_member(attr, type_name, v, i, n))
            if key is not None:
                _checked_enums[key] = value
        out.append(value)
    return array_type(ctypes.c_int, n)(*out)


# --------------------------------------------------------------------------------------------------- fractions
def fractions(attr: str, value: Any) -> list[Fraction]:
    """The FRACTION elements of ``value``: one fraction, or a list of them; each a Fraction, an int, a
    ``(numerator, denominator)`` pair of ints, or a finite float."""
    if isinstance(value, tuple) and len(value) == 2 and all(_is_plain_int(x) for x in value):
        items: list = [value]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    n = len(items)
    out = []
    for i, v in enumerate(items):
        try:
            if isinstance(v, tuple) and len(v) == 2 and all(_is_plain_int(x) for x in v):
                f = Fraction(int(v[0]), int(v[1]))
            elif isinstance(v, Fraction) or _is_plain_int(v):
                f = Fraction(v)
            elif isinstance(v, float) and math.isfinite(v):
                f = Fraction(v)
            else:
                raise InvalidTypeError(f"not {type(v).__name__} {_show(v)}")
        except (TypeError, ValueError, ZeroDivisionError) as e:
            raise _bad(attr, i, n, f"CUDNN_TYPE_FRACTION takes a Fraction, an int, (numerator, denominator) or a "
                                   f"finite float: {e}") from None
        if not (INT64_MIN <= f.numerator <= INT64_MAX and f.denominator <= INT64_MAX):
            raise _bad(attr, i, n, f"{f} does not fit cudnnFraction_t (int64 numerator and denominator)")
        out.append(f)
    return out


def _is_plain_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def fraction_array(values: list[Fraction]) -> Any:
    return array_type(cudnnFraction_t, len(values))(*[cudnnFraction_t(f.numerator, f.denominator) for f in values])


# --------------------------------------------------------------------------------------------------- chars
def char_list(attr: str, value: Any) -> list[int]:
    if isinstance(value, str):
        return list(value.encode())
    if isinstance(value, (bytes, bytearray)):
        return list(bytes(value))
    raise DescriptorError(f"{attr}: CUDNN_TYPE_CHAR takes str or bytes, not {type(value).__name__}")
