"""An attribute's values between Python and cuDNN: what ``Descriptor.set`` takes (lists, pointers, handles) turned
into the C elements of its type (:mod:`.values` for the scalar types), elements read back turned into Python values,
and how values are shown (``repr``), traced and fingerprinted.
"""
from __future__ import annotations

import ctypes
import enum
from fractions import Fraction
from typing import Any

from .._generated.names import attr, atype
from ..errors import DescriptorError
from . import live, values
from .enums import CEnum, coerce, enum_class
from .owned import _desc_id_by_ptr
from .requirements import HOST_POINTER_ATTRIBUTES, MIN_HOST_ADDRESS
from .types import ENUM_OF_TYPE

# names compared per value (set, get, describe, trace, fingerprint), bound once: a module-global read, not a
# class-attribute lookup
T_BACKEND_DESCRIPTOR = atype.BACKEND_DESCRIPTOR
T_BOOLEAN = atype.BOOLEAN
T_CHAR = atype.CHAR
T_FRACTION = atype.FRACTION
T_HANDLE = atype.HANDLE
T_INT64 = atype.INT64
T_VOID_PTR = atype.VOID_PTR
T_POINTERS = (T_VOID_PTR, T_HANDLE)
T_FLOATS = (atype.FLOAT, atype.DOUBLE)
A_TENSOR_CONSTANT_VALUE = attr.TENSOR_CONSTANT_VALUE


class DescriptorBase:
    """What the conversions here recognize as a descriptor: ``Descriptor`` (:mod:`.descriptor`) is its one
    subclass, so that this module need not import it."""

    __slots__ = ()
    id: int
    kind: CEnum


def _as_list(value: Any, type_name: str, attr: str) -> list:
    if type_name == T_CHAR:
        return values.char_list(attr, value)
    if type_name == T_FRACTION:
        return values.fractions(attr, value)
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist") and not isinstance(value, (CEnum, enum.Enum, DescriptorBase)):
        try:
            v = value.tolist()
        except Exception as e:
            raise DescriptorError(f"{attr}: cannot read {_type_of(value)} as a list: {e}") from None
        return v if isinstance(v, list) else [v]
    return [value]


def _type_of(v: Any) -> str:
    if isinstance(v, DescriptorBase):
        return f"descriptor #{v.id} ({v.kind.name})"
    r = repr(v)
    return f"{type(v).__name__} {r if len(r) <= 40 else r[:37] + '...'}"


def _pointer_value(v: Any, attr: str, i: int = 0, n: int = 1, host: bool = False) -> int:
    """A VOID_PTR element: an int address, None (NULL), a ctypes pointer/object, or an object exposing an int
    ``ptr`` (a cupy MemoryPointer). Never a Descriptor: its ``ptr`` is a descriptor, not memory, and converting it
    silently handed cuDNN a descriptor as data."""
    where = attr if n == 1 else f"{attr} element {i}"
    if v is None:
        p = 0
    elif isinstance(v, DescriptorBase):
        raise DescriptorError(f"{where} takes a memory address, not a Descriptor (descriptor #{v.id}, {v.kind.name}); "
                              "a descriptor-valued attribute takes it instead")
    elif isinstance(v, (bool, float, complex, str, bytes, enum.Enum)):
        raise DescriptorError(f"{where} takes a memory address (an int), not {_type_of(v)}")
    elif isinstance(v, int):
        p = int(v)
    elif isinstance(v, ctypes.c_void_p):
        p = v.value or 0
    elif isinstance(v, (ctypes.Array, ctypes.Structure, ctypes._SimpleCData)):
        p = ctypes.addressof(v)
    else:
        ptr = getattr(v, "ptr", None)
        if isinstance(ptr, bool) or not isinstance(ptr, int):
            raise DescriptorError(f"{where}: cannot use {_type_of(v)} as a pointer (pass an int address)")
        p = int(ptr)
    if not 0 <= p < 1 << 64:
        raise DescriptorError(f"{where}: {p} is not a 64-bit address")
    if host and p < MIN_HOST_ADDRESS:
        raise DescriptorError(
            f"{where}: {p:#x} cannot be a host address (Linux maps nothing below {MIN_HOST_ADDRESS:#x}); cuDNN "
            f"dereferences it during the Set ({HOST_POINTER_ATTRIBUTES.get(attr, 'a host pointer')}). Pass the "
            "scalar as a ctypes object, or its ctypes.addressof()")
    return p


def _handle_value(v: Any, attr: str, i: int = 0, n: int = 1) -> int:
    """A HANDLE element: a live handle (backend.live). Anything else would be dereferenced by cuDNN."""
    if isinstance(v, ctypes.c_void_p):
        v = v.value or 0
    if live.lookup(v) is None:
        where = attr if n == 1 else f"{attr} element {i}"
        raise DescriptorError(f"{where}: {live.why_not_live(v)}; only a live handle (create_handle(), or adopted "
                              "with cudnn_py.backend.handle.adopt_handle()) can go to cuDNN")
    return int(v.__index__())


# CUDNN_TYPE_* -> converter(attr, type_name, values) -> ctypes array, for the scalar types (values.py)
_CONVERT: dict[str, Any] = {
    atype.INT64: values.int_array,
    atype.INT32: values.int_array,
    atype.FLOAT: values.float_array,
    atype.DOUBLE: values.float_array,
    atype.BOOLEAN: lambda attr, _t, vals: values.bool_array(attr, vals),
}


def _plain_converter(type_name: str) -> Any:
    """The converter of a type whose values need nothing kept alive (numbers, booleans, enums), or None."""
    return _CONVERT.get(type_name) or (values.enum_array if type_name in ENUM_OF_TYPE else None)


def _from_c(x: Any, type_name: str) -> Any:
    if type_name in ENUM_OF_TYPE:
        return enum_class(ENUM_OF_TYPE[type_name])(int(x))
    if type_name == T_FRACTION:
        return Fraction(x.numerator, x.denominator) if x.denominator else Fraction(x.numerator)
    if type_name in T_POINTERS:
        return x or 0
    return x


# pointers and handles are described as they are when set (an operand's pointer can move later)
_DESCRIBED_AT_ONCE = frozenset(T_POINTERS)


class _Unknowable(Exception):
    """A fingerprint cannot be known (a descriptor cuDNN filled in, a constant given by address)."""


def _referenced(value: Any) -> tuple:
    """The descriptors an attribute value refers to (a descriptor array), in order; () for any other value."""
    if isinstance(value, _Undescribed) and value.type_name == T_BACKEND_DESCRIPTOR:
        return tuple(value.vals)
    return ()


def _fingerprint_item(name: str, value: Any, kept: Any, order: dict[int, int]) -> tuple:
    """One attribute of a fingerprint (``Descriptor.fingerprint``): referenced descriptors by position."""
    if isinstance(value, _Undescribed):
        t = value.type_name
        if t == T_BACKEND_DESCRIPTOR:
            return (name, t, tuple(order[c.id] for c in value.vals))
        if t in T_FLOATS:  # -0.0 is not 0.0 here
            return (name, t, tuple(float(x).hex() for x in value.vals))
        return (name, t, tuple(value.vals))
    if name == A_TENSOR_CONSTANT_VALUE:  # the value at the address, not the address
        scalar = kept[1] if kept else None
        if not isinstance(scalar, ctypes._SimpleCData):
            raise _Unknowable
        return (name, type(scalar).__name__, ctypes.string_at(ctypes.addressof(scalar), ctypes.sizeof(scalar)))
    # as shown when set: pointers, handles (_DESCRIBED_AT_ONCE), override vectors
    return (name, "shown", _frozen(value))


def _frozen(value: Any) -> Any:
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


class _Undescribed:
    """The values of a set() until something shows them."""

    __slots__ = ("vals", "type_name", "scalar", "_shown")

    def __init__(self, vals: list, type_name: str, scalar: bool):
        self.vals, self.type_name, self.scalar = vals, type_name, scalar
        self._shown: Any = _Undescribed  # not described yet

    def described(self) -> Any:
        if self._shown is _Undescribed:
            self._shown = _describe(self.vals, self.type_name, self.scalar)
        return self._shown


def _describe(vals: list, type_name: str, scalar: bool) -> Any:
    if type_name == T_BACKEND_DESCRIPTOR:
        out: Any = [f"#{d.id}:{d.kind.name.removeprefix('CUDNN_BACKEND_').removesuffix('_DESCRIPTOR')}" for d in vals]
    elif type_name == T_CHAR:
        return bytes(vals).decode(errors="replace")
    elif type_name == T_VOID_PTR:
        out = [hex(_pointer_value(v, "")) for v in vals]
    elif type_name == T_HANDLE:
        out = [hex((v.value or 0) if isinstance(v, ctypes.c_void_p) else int(v)) for v in vals]
    elif type_name in ENUM_OF_TYPE:
        out = [coerce(ENUM_OF_TYPE[type_name], v).name for v in vals]
    elif type_name == T_BOOLEAN:
        out = [bool(v) for v in vals]
    else:
        out = [str(v) if isinstance(v, Fraction) else v for v in vals]
    return out[0] if scalar and len(out) == 1 else out


def _trace_values(array: Any, type_name: str, n: int) -> Any:
    """JSON-able element values for the trace (descriptors by id, pointers as hex)."""
    if array is None or n <= 0:
        return []
    if type_name == T_CHAR:
        return bytes(array[:n]).decode(errors="replace")
    if type_name == T_BACKEND_DESCRIPTOR:
        return [{"ptr": hex(array[i] or 0), "desc": _desc_id_by_ptr(array[i])} for i in range(n)]
    if type_name in T_POINTERS:
        return [hex(array[i] or 0) for i in range(n)]
    if type_name == T_FRACTION:
        return [[array[i].numerator, array[i].denominator] for i in range(n)]
    if type_name in ENUM_OF_TYPE:
        cls = enum_class(ENUM_OF_TYPE[type_name])
        return [cls(int(array[i])).name for i in range(n)]
    return [array[i] for i in range(n)]
