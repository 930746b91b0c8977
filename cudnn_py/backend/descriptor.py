"""``Descriptor``: one owned cuDNN backend descriptor, with catalog-checked ``set``/``get``.

The backend validates attribute types and descriptor kinds inconsistently, and some wrong kinds crash the process
(see ``shared/reference/header_schema.md`` §4). So ``set`` checks, in Python and before any backend call, that the
attribute belongs to this descriptor kind, exists in the running library, is settable, that the type and element
count fit the generated catalog, and that descriptor elements are live, finalized and of an accepted kind.

Ownership: a descriptor is destroyed exactly once — by ``destroy()``, by leaving a ``with`` block, or when it is
garbage-collected. At interpreter exit the remaining ones are left to the OS: by then the CUDA context they may
reference can already be gone, and destroying into it is how teardown crashes happen.
"""
from __future__ import annotations

import ctypes
import enum
import itertools
import weakref
from fractions import Fraction
from functools import cache
from typing import Any

from .._generated.attributes import ATTRIBUTES, DESCRIPTOR_SINCE, AttributeSpec
from ..errors import DescriptorError, UnsupportedAttributeError
from . import trace
from .api import error_for, lib
from .enums import CEnum, coerce, enum_class
from .types import ENUM_OF_TYPE, cudnnFraction_t, element_ctype
from .versions import runtime_version

_ids = itertools.count(1)
_ATTR_BY_VALUE = {spec.value: spec for spec in ATTRIBUTES.values()}


@cache
def type_value(type_name: str) -> int:
    return int(enum_class("cudnnBackendAttributeType_t")[type_name])


def attribute_spec(attr: Any) -> AttributeSpec:
    """The catalog entry for an attribute given as enum member, C name or int value."""
    if isinstance(attr, str):
        try:
            return ATTRIBUTES[attr]
        except KeyError:
            raise DescriptorError(f"unknown or untyped attribute {attr!r} (not in the generated catalog)") from None
    if isinstance(attr, int):
        try:
            return _ATTR_BY_VALUE[int(attr)]
        except KeyError:
            raise DescriptorError(f"unknown or untyped attribute value {int(attr)}") from None
    raise TypeError(f"attribute must be a CUDNN_ATTR_* name or enum member, not {type(attr).__name__}")


def descriptor_kind(kind: Any) -> CEnum:
    if isinstance(kind, str):
        return _kind_by_name(kind)
    try:
        return coerce("cudnnBackendDescriptorType_t", kind)
    except ValueError:
        raise DescriptorError(f"unknown descriptor kind {kind!r}") from None


@cache
def _kind_by_name(name: str) -> CEnum:
    try:
        return coerce("cudnnBackendDescriptorType_t", name)
    except ValueError:
        raise DescriptorError(f"unknown descriptor kind {name!r}") from None


def _destroy_ptr(ptr: int, kind: str, desc_id: int) -> None:
    call = None if trace.active is None else trace.begin("cudnnBackendDestroyDescriptor", desc=desc_id, kind=kind)
    status = lib().cudnnBackendDestroyDescriptor(ptr)
    if call is not None:
        call.end(status)


class Descriptor:
    """An owned ``cudnnBackendDescriptor_t`` of one kind.

    >>> t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    >>> t.set("CUDNN_ATTR_TENSOR_DIMENSIONS", [2, 3]).set("CUDNN_ATTR_TENSOR_STRIDES", [3, 1])
    """

    __slots__ = ("_ptr", "kind", "id", "finalized", "_attrs", "_keepalive", "_finalizer", "__weakref__")

    def __init__(self, kind: Any):
        self.kind = descriptor_kind(kind)
        self.id = next(_ids)
        self.finalized = False
        self._attrs: dict[str, Any] = {}
        self._keepalive: dict[str, Any] = {}
        since = DESCRIPTOR_SINCE.get(self.kind.name, 0)
        if since > runtime_version():
            raise UnsupportedAttributeError(self.kind.name, since, runtime_version())
        out = ctypes.c_void_p()
        call = None if trace.active is None else trace.begin(
            "cudnnBackendCreateDescriptor", desc=self.id, kind=self.kind.name)
        status = lib().cudnnBackendCreateDescriptor(int(self.kind), ctypes.byref(out))
        if call is not None:
            call.end(status, ptr=trace.hexptr(out.value))
        if status != 0:
            raise error_for(status, "cudnnBackendCreateDescriptor", kind=self.kind.name)
        if not out.value:
            raise DescriptorError(f"cudnnBackendCreateDescriptor({self.kind.name}) succeeded but returned NULL")
        self._ptr: int = out.value
        self._finalizer = weakref.finalize(self, _destroy_ptr, self._ptr, self.kind.name, self.id)
        self._finalizer.atexit = False
        _live[self._ptr] = self

    # ----------------------------------------------------------------------------------------------- lifetime
    @property
    def ptr(self) -> int:
        """The raw ``cudnnBackendDescriptor_t`` (raises once destroyed)."""
        if not self._finalizer.alive:
            raise DescriptorError(f"descriptor #{self.id} ({self.kind.name}) was destroyed")
        return self._ptr

    @property
    def destroyed(self) -> bool:
        return not self._finalizer.alive

    def destroy(self) -> None:
        """Destroy now. A second call raises: double destroy is a bug in the caller's ownership logic."""
        if not self._finalizer.alive:
            raise DescriptorError(f"descriptor #{self.id} ({self.kind.name}) was already destroyed")
        self._finalizer()
        self._keepalive.clear()

    def __enter__(self) -> Descriptor:
        return self

    def __exit__(self, *exc) -> None:
        if self._finalizer.alive:
            self.destroy()

    # ----------------------------------------------------------------------------------------------- set
    def _check_attribute(self, spec: AttributeSpec) -> None:
        if spec.owner != self.kind.name:
            raise DescriptorError(
                f"{spec.name} belongs to {spec.owner}, not to {self.kind.name} (descriptor #{self.id})")
        rv = runtime_version()
        if spec.since > rv:
            raise UnsupportedAttributeError(spec.name, spec.since, rv)

    def set(self, attr: Any, value: Any, type: str | None = None) -> Descriptor:
        """Set an attribute; ``type`` picks among the catalog's accepted types (default: the first)."""
        spec = attribute_spec(attr)
        self._check_attribute(spec)
        if not spec.settable:
            raise DescriptorError(f"{spec.name} is read-only (get-only) on {self.kind.name}")
        if self.finalized:
            raise DescriptorError(
                f"cannot set {spec.name}: descriptor #{self.id} ({self.kind.name}) is already finalized")
        type_name = _pick_type(spec, type)
        values = _as_list(value, type_name)
        n = len(values)
        if n < spec.min_count or (spec.max_count is not None and n > spec.max_count):
            want = f"{spec.min_count}" if spec.min_count == spec.max_count else \
                f"{spec.min_count}..{'inf' if spec.max_count is None else spec.max_count}"
            raise DescriptorError(f"{spec.name} takes {want} element(s) of {type_name}; got {n}")
        array, keep = self._to_c_array(spec, type_name, values)
        self._raw_set(spec, type_name, n, array)
        self._attrs[spec.name] = _describe(values, type_name, scalar=spec.max_count == 1)
        self._keepalive[spec.name] = keep
        return self

    def _raw_set(self, spec: AttributeSpec, type_name: str, n: int, array: Any) -> None:
        call = None if trace.active is None else trace.begin(
            "cudnnBackendSetAttribute", desc=self.id, kind=self.kind.name, attr=spec.name, type=type_name, count=n,
            values=lambda: _trace_values(array, type_name, n))
        status = lib().cudnnBackendSetAttribute(self.ptr, spec.value, type_value(type_name), n, array)
        if call is not None:
            call.end(status)
        if status != 0:
            raise error_for(status, "cudnnBackendSetAttribute", kind=self.kind.name, attribute=spec.name,
                            detail=f"{n} element(s) of {type_name}")

    def _to_c_array(self, spec: AttributeSpec, type_name: str, values: list) -> tuple[Any, Any]:
        ct = element_ctype(type_name)
        n = len(values)
        if type_name == "CUDNN_TYPE_BACKEND_DESCRIPTOR":
            for i, d in enumerate(values):
                if not isinstance(d, Descriptor):
                    raise DescriptorError(f"{spec.name} element {i} must be a Descriptor, not {type(d).__name__}")
                if d.destroyed:
                    raise DescriptorError(f"{spec.name} element {i} (descriptor #{d.id}, {d.kind.name}) was destroyed")
                if spec.element_kinds and d.kind.name not in spec.element_kinds:
                    raise DescriptorError(
                        f"{spec.name} element {i} is a {d.kind.name} (descriptor #{d.id}); it must be one of "
                        f"{', '.join(spec.element_kinds)}"
                    )
                if not d.finalized:
                    raise DescriptorError(
                        f"{spec.name} element {i} (descriptor #{d.id}, {d.kind.name}) is not finalized; "
                        "finalize it first"
                    )
            return (ct * n)(*[d.ptr for d in values]), list(values)
        if type_name == "CUDNN_TYPE_CHAR":
            return ctypes.create_string_buffer(bytes(values), n), None
        if type_name == "CUDNN_TYPE_FRACTION":
            return (ct * n)(*[cudnnFraction_t(f.numerator, f.denominator) for f in values]), None
        if type_name in ENUM_OF_TYPE:
            e = ENUM_OF_TYPE[type_name]
            try:
                ints = [int(coerce(e, v)) for v in values]
            except ValueError as ex:
                raise DescriptorError(f"{spec.name}: {ex}") from None
            return (ct * n)(*ints), None
        if type_name in ("CUDNN_TYPE_VOID_PTR", "CUDNN_TYPE_HANDLE"):
            return (ct * n)(*[_pointer_value(v, spec.name) for v in values]), list(values)
        try:
            return (ct * n)(*values), None
        except TypeError as ex:
            raise DescriptorError(f"{spec.name}: cannot convert {values!r} to {type_name}: {ex}") from None

    # ----------------------------------------------------------------------------------------------- finalize
    def finalize(self) -> Descriptor:
        if self.finalized:
            raise DescriptorError(f"descriptor #{self.id} ({self.kind.name}) is already finalized")
        call = None if trace.active is None else trace.begin("cudnnBackendFinalize", desc=self.id, kind=self.kind.name)
        status = lib().cudnnBackendFinalize(self.ptr)
        if call is not None:
            call.end(status)
        if status != 0:
            raise error_for(status, "cudnnBackendFinalize", kind=self.kind.name,
                            detail=f"attributes set: {', '.join(self._attrs) or 'none'}")
        self.finalized = True
        return self

    # ----------------------------------------------------------------------------------------------- get
    def get(self, attr: Any, type: str | None = None, *, kind: Any = None, count: int | None = None,
            into: list[Descriptor] | None = None) -> Any:
        """Read an attribute. Arrays come back as lists (descriptor arrays as new owned Descriptors of ``kind``,
        default: the catalog's element kind); scalars as one value. ``count`` caps how many elements to read.
        ``into``: descriptors to copy a descriptor array into (reused, e.g. across many configs), instead of
        creating new ones; the result is then a prefix of ``into``."""
        spec = attribute_spec(attr)
        self._check_attribute(spec)
        if not spec.readable:
            raise DescriptorError(f"{spec.name} cannot be read back: cuDNN returns NOT_SUPPORTED for Get on it")
        type_name = type or spec.get_type or spec.types[0]
        scalar = spec.max_count == 1
        if type_name == "CUDNN_TYPE_BACKEND_DESCRIPTOR":
            if into is not None:
                return self._get_into(spec, into)
            return self._get_descriptors(spec, kind, count, scalar)
        ct = element_ctype(type_name)
        if scalar:
            n = 1
        elif count is not None:
            n = count
        else:
            n = self._count(spec, type_name)
        buf = (ct * max(n, 1))()  # zero-filled: some Gets write fewer bytes than the type's width
        got = ctypes.c_int64(0)
        self._raw_get(spec, type_name, n, got, buf)
        m = min(got.value, n)
        if type_name == "CUDNN_TYPE_CHAR":
            return bytes(buf[:m]).split(b"\0", 1)[0].decode(errors="replace")
        vals = [_from_c(buf[i], type_name) for i in range(m)]
        return (vals[0] if vals else None) if scalar else vals

    def _count(self, spec: AttributeSpec, type_name: str) -> int:
        got = ctypes.c_int64(0)
        self._raw_get(spec, type_name, 0, got, None)
        return got.value

    def _raw_get(self, spec: AttributeSpec, type_name: str, n: int, got: ctypes.c_int64, buf: Any) -> None:
        call = None if trace.active is None else trace.begin(
            "cudnnBackendGetAttribute", desc=self.id, kind=self.kind.name, attr=spec.name, type=type_name, count=n)
        status = lib().cudnnBackendGetAttribute(self.ptr, spec.value, type_value(type_name), n, ctypes.byref(got), buf)
        if call is not None:
            call.end(status, returned=got.value,
                     values=None if buf is None else lambda: _trace_values(buf, type_name, min(got.value, n)))
        if status != 0:
            raise error_for(status, "cudnnBackendGetAttribute", kind=self.kind.name, attribute=spec.name,
                            detail=f"requested {n} element(s) of {type_name}")

    def _get_into(self, spec: AttributeSpec, into: list[Descriptor]) -> list[Descriptor]:
        arr = (ctypes.c_void_p * max(len(into), 1))(*[d.ptr for d in into])
        got = ctypes.c_int64(0)
        self._raw_get(spec, "CUDNN_TYPE_BACKEND_DESCRIPTOR", len(into), got, arr)
        for d in into[: got.value]:  # the backend copies finalized descriptors into them
            d.finalized = True
        return into[: got.value]

    def _get_descriptors(self, spec: AttributeSpec, kind: Any, count: int | None, scalar: bool) -> Any:
        if kind is None:
            if not spec.element_kinds:
                raise DescriptorError(
                    f"{spec.name}: pass kind= (the catalog does not say which descriptor kind it holds)")
            kind = spec.element_kinds[0]
        n = 1 if scalar else (count if count is not None else self._count(spec, "CUDNN_TYPE_BACKEND_DESCRIPTOR"))
        created = [Descriptor(kind) for _ in range(n)]
        outs = self._get_into(spec, created)
        for d in created[len(outs):]:
            d.destroy()
        return (outs[0] if outs else None) if scalar else outs

    # ----------------------------------------------------------------------------------------------- repr
    @property
    def attributes(self) -> dict[str, Any]:
        """What was set through this object, by attribute C name (as shown in ``repr``)."""
        return dict(self._attrs)

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else ("finalized" if self.finalized else "not finalized")
        attrs = ", ".join(f"{k}={v}" for k, v in self._attrs.items())
        return f"<Descriptor #{self.id} {self.kind.name} {state}{': ' + attrs if attrs else ''}>"


# --------------------------------------------------------------------------------------------------- helpers
def _pick_type(spec: AttributeSpec, type: str | None) -> str:
    if type is None:
        return spec.types[0]
    t = type if isinstance(type, str) else getattr(type, "name", str(type))
    if t not in spec.types:
        raise DescriptorError(f"{spec.name} does not accept {t}; it accepts {', '.join(spec.types)}")
    return t


def _as_list(value: Any, type_name: str) -> list:
    if type_name == "CUDNN_TYPE_CHAR":
        if isinstance(value, str):
            return list(value.encode())
        if isinstance(value, (bytes, bytearray)):
            return list(bytes(value))
        raise DescriptorError(f"a {type_name} attribute takes str or bytes, not {type(value).__name__}")
    if type_name == "CUDNN_TYPE_FRACTION":
        items = value if isinstance(value, (list, tuple)) and value and not isinstance(value[0], int) else [value]
        if isinstance(value, tuple) and len(value) == 2 and all(isinstance(x, int) for x in value):
            items = [value]
        out = []
        for v in items:
            if isinstance(v, tuple):
                v = Fraction(*v)
            out.append(Fraction(v))
        return out
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist") and not isinstance(value, (CEnum, enum.Enum)):
        v = value.tolist()
        return v if isinstance(v, list) else [v]
    return [value]


def _pointer_value(v: Any, attr: str) -> int:
    if v is None:
        return 0
    if isinstance(v, int):
        return v
    if isinstance(v, ctypes.c_void_p):
        return v.value or 0
    if isinstance(v, (ctypes.Array, ctypes.Structure, ctypes._SimpleCData)):
        return ctypes.addressof(v)
    for name in ("ptr", "handle"):
        p = getattr(v, name, None)
        if isinstance(p, int):
            return p
    raise DescriptorError(f"{attr}: cannot use {type(v).__name__} as a pointer (pass an int address)")


def _from_c(x: Any, type_name: str) -> Any:
    if type_name in ENUM_OF_TYPE:
        return enum_class(ENUM_OF_TYPE[type_name])(int(x))
    if type_name == "CUDNN_TYPE_FRACTION":
        return Fraction(x.numerator, x.denominator) if x.denominator else Fraction(x.numerator)
    if type_name in ("CUDNN_TYPE_VOID_PTR", "CUDNN_TYPE_HANDLE"):
        return x or 0
    return x


def _describe(values: list, type_name: str, scalar: bool) -> Any:
    if type_name == "CUDNN_TYPE_BACKEND_DESCRIPTOR":
        out: Any = [f"#{d.id}:{d.kind.name.removeprefix('CUDNN_BACKEND_').removesuffix('_DESCRIPTOR')}" for d in values]
    elif type_name == "CUDNN_TYPE_CHAR":
        return bytes(values).decode(errors="replace")
    elif type_name in ("CUDNN_TYPE_VOID_PTR", "CUDNN_TYPE_HANDLE"):
        out = [hex(_pointer_value(v, "")) for v in values]
    elif type_name in ENUM_OF_TYPE:
        out = [coerce(ENUM_OF_TYPE[type_name], v).name for v in values]
    else:
        out = [str(v) if isinstance(v, Fraction) else v for v in values]
    return out[0] if scalar and len(out) == 1 else out


def _trace_values(array: Any, type_name: str, n: int) -> Any:
    """JSON-able element values for the trace (descriptors by id, pointers as hex)."""
    if array is None or n <= 0:
        return []
    if type_name == "CUDNN_TYPE_CHAR":
        return bytes(array[:n]).decode(errors="replace")
    if type_name == "CUDNN_TYPE_BACKEND_DESCRIPTOR":
        return [{"ptr": hex(array[i] or 0), "desc": _desc_id_by_ptr(array[i])} for i in range(n)]
    if type_name in ("CUDNN_TYPE_VOID_PTR", "CUDNN_TYPE_HANDLE"):
        return [hex(array[i] or 0) for i in range(n)]
    if type_name == "CUDNN_TYPE_FRACTION":
        return [[array[i].numerator, array[i].denominator] for i in range(n)]
    if type_name in ENUM_OF_TYPE:
        cls = enum_class(ENUM_OF_TYPE[type_name])
        return [cls(int(array[i])).name for i in range(n)]
    return [array[i] for i in range(n)]


_live: weakref.WeakValueDictionary[int, Descriptor] = weakref.WeakValueDictionary()


def _desc_id_by_ptr(ptr: int | None) -> int | None:
    d = _live.get(ptr or 0)
    return d.id if d is not None else None
