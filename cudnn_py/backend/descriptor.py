"""``Descriptor``: one owned cuDNN backend descriptor, with catalog-checked ``set``/``get``.

The backend validates attribute types and descriptor kinds inconsistently, and some wrong kinds crash the process
(seen setting each attribute live on cuDNN 9.28, one child process per case). So ``set`` checks, in Python and
before any backend call, that the attribute belongs to this descriptor kind, exists in the running library, is
settable, that the type and element count fit the generated catalog, that every element fits its C type (ranges,
finite floats, real booleans, members of the enum the loaded library has: :mod:`.values`), that descriptor
elements are live, finalized and of an accepted kind, that a pointer is a pointer (never a Descriptor), and that
a handle is a live one (:mod:`.live`).
``finalize`` first checks the attributes the kind requires, and a graph's explicit mode against its operations;
``get`` refuses reads cuDNN cannot answer (:mod:`.requirements` holds those tables, each entry with its source).
The crashes no check can prevent are listed in ``requirements.RAW_ERRATA``.

What lives elsewhere: the registry of live descriptors and their destruction (:mod:`.owned`), the catalog lookups and
the finalize checks (:mod:`.checks`), the conversions of values in and out, their display and trace (:mod:`.encoding`).
"""
from __future__ import annotations

import ctypes
from typing import Any

from .._generated.attributes import AttributeSpec
from .._generated.names import attr, atype, desc
from ..dtypes import BY_BACKEND
from ..errors import DescriptorError, UnsupportedAttributeError
from . import json_check, trace, values
from .api import error_for, lib
from .checks import (
    _kind_info,
    _pick_type,
    attribute_spec,
    check_finalizable,
    check_graph_mode,
    descriptor_kind,
    type_value,
)
from .encoding import (
    _DESCRIBED_AT_ONCE,
    T_BACKEND_DESCRIPTOR,
    T_CHAR,
    T_FRACTION,
    T_HANDLE,
    T_VOID_PTR,
    DescriptorBase,
    _as_list,
    _describe,
    _fingerprint_item,
    _from_c,
    _handle_value,
    _plain_converter,
    _pointer_value,
    _referenced,
    _trace_values,
    _type_of,
    _Undescribed,
    _Unknowable,
)
from .enums import CEnum
from .owned import _collected, _destroy_ptr, _ids, _live, _Owner
from .requirements import FILLED_FROM_JSON, GET_CRASHES_ALWAYS, GET_CRASHES_WHEN_UNSET, HOST_POINTER_ATTRIBUTES
from .types import Int64VectorVector, element_ctype
from .versions import runtime_version

# names compared per call (set, get, finalize), bound once: a module-global read, not a class-attribute lookup (the
# attribute types T_*: encoding.py's, imported above)
_D_OPERATIONGRAPH_DESCRIPTOR = desc.OPERATIONGRAPH_DESCRIPTOR


class _SetPlan:
    """What ``Descriptor.set`` needs of one (kind, attribute, type) on the loaded library, worked out once."""

    __slots__ = ("spec", "type_name", "special", "convert", "name", "min_count", "max_count", "scalar",
                 "described_at_once", "fills", "plain_list")

    def __init__(self, spec: AttributeSpec, type_name: str):
        self.spec, self.type_name, self.name = spec, type_name, spec.name
        self.special = _SPECIAL_VOID_PTR.get(spec.name) if type_name == atype.VOID_PTR else None
        self.convert = _plain_converter(type_name)
        self.min_count = spec.min_count
        self.max_count = spec.max_count if spec.max_count is not None else 1 << 62
        self.scalar = spec.max_count == 1
        self.described_at_once = type_name in _DESCRIBED_AT_ONCE
        self.fills = type_name == atype.CHAR and spec.name in FILLED_FROM_JSON  # the value is a JSON document
        # values whose list form _as_list would build as list(value) or [value] (CHAR and FRACTION parse theirs)
        self.plain_list = type_name not in (atype.CHAR, atype.FRACTION)


class Descriptor(DescriptorBase):
    """An owned ``cudnnBackendDescriptor_t`` of one kind.

    >>> t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    >>> t.set("CUDNN_ATTR_TENSOR_DIMENSIONS", [2, 3]).set("CUDNN_ATTR_TENSOR_STRIDES", [3, 1])
    """

    __slots__ = ("_ptr", "kind", "id", "finalized", "_filled", "_attrs", "_keepalive", "_dead", "__weakref__")

    def __init__(self, kind: Any):
        try:  # keyed by the class too: True == 1 and 1.0 == 1 hash alike, and both must be refused
            member, name, value = _kind_info(kind.__class__, kind, runtime_version())
        except TypeError:  # unhashable: descriptor_kind says what is wrong with it
            descriptor_kind(kind)
            raise
        self.kind = member
        self.id = next(_ids)
        self.finalized = False
        self._dead = True  # until it exists
        # True once cuDNN filled this descriptor in (a copy read back by get(), a plan/cache loaded from JSON):
        # then what is set is no longer what went through set()
        self._filled = False
        self._attrs: dict[str, Any] = {}
        self._keepalive: dict[str, Any] = {}
        out = ctypes.c_void_p()
        call = None if trace.active is None else trace.begin("cudnnBackendCreateDescriptor", desc=self.id, kind=name)
        status = lib().cudnnBackendCreateDescriptor(value, ctypes.byref(out))
        if call is not None:
            call.end(status, ptr=trace.hexptr(out.value))
        if status != 0:
            raise error_for(status, "cudnnBackendCreateDescriptor", kind=name)
        if not out.value:
            raise DescriptorError(f"cudnnBackendCreateDescriptor({name}) succeeded but returned NULL")
        self._ptr: int = out.value
        owner = _Owner(self, _collected)
        owner.ptr, owner.kind, owner.desc_id = self._ptr, name, self.id
        _live[self._ptr] = owner
        self._dead = False

    # ----------------------------------------------------------------------------------------------- lifetime
    @property
    def ptr(self) -> int:
        """The raw ``cudnnBackendDescriptor_t`` (raises once destroyed)."""
        if self._dead:
            raise DescriptorError(f"descriptor #{self.id} ({self.kind.name}) was destroyed")
        return self._ptr

    @property
    def destroyed(self) -> bool:
        return self._dead

    def destroy(self) -> None:
        """Destroy now. A second call raises: double destroy is a bug in the caller's ownership logic."""
        if self._dead:
            raise DescriptorError(f"descriptor #{self.id} ({self.kind.name}) was already destroyed")
        self._dead = True
        _live.pop(self._ptr, None)  # its reference goes with the entry: no collection callback follows
        _destroy_ptr(self._ptr, self.kind.name, self.id)
        self._keepalive.clear()

    def __enter__(self) -> Descriptor:
        return self

    def __exit__(self, *exc) -> None:
        if not self._dead:
            self.destroy()

    # ----------------------------------------------------------------------------------------------- set
    def _check_attribute(self, spec: AttributeSpec) -> None:
        if spec.owner != self.kind.name:
            raise DescriptorError(
                f"{spec.name} belongs to {spec.owner}, not to {self.kind.name} (descriptor #{self.id})")
        rv = runtime_version()
        if spec.since > rv:
            raise UnsupportedAttributeError(spec.name, spec.since, rv)

    def set(self, attr: Any, value: Any, type: str | None = None, *, json_checked: bool = False) -> Descriptor:
        """Set an attribute; ``type`` picks among the catalog's accepted types (default: the first).
        ``json_checked``: the value is a JSON document that its caller checked against the attribute's schema
        already (``json_check``), or that cuDNN wrote in this process; it is not parsed a second time (the check
        of a 75 KB attention plan costs about 2 ms, which a plan rebuilt from the plan cache would pay per build)."""
        # what depends only on (kind, attribute, type, loaded library) is checked once and remembered (_SET_PLANS):
        # the lowering sets a few hundred attributes per graph
        key: tuple | None = (self.kind, attr, type, type.__class__, runtime_version())  # (IntEnum == its int)
        try:
            plan: _SetPlan | None = _SET_PLANS.get(key)  # type: ignore[arg-type]
        except TypeError:  # an unhashable attribute or type: the checks below say what is wrong with it
            plan, key = None, None
        if plan is None:
            spec = attribute_spec(attr)
            self._check_attribute(spec)
            if not spec.settable:
                raise DescriptorError(f"{spec.name} is read-only (get-only) on {self.kind.name}")
        else:
            spec = plan.spec
        if self._dead:  # before the finalized check: "destroyed" is the truth for a dead one
            raise DescriptorError(f"cannot set {spec.name}: descriptor #{self.id} ({self.kind.name}) was destroyed")
        if self.finalized:
            raise DescriptorError(
                f"cannot set {spec.name}: descriptor #{self.id} ({self.kind.name}) is already finalized")
        if plan is None:
            plan = _SetPlan(spec, _pick_type(spec, type))
            if key is not None:
                _SET_PLANS[key] = plan
        type_name = plan.type_name
        if plan.special is not None:
            return plan.special(self, spec, type_name, value)
        cls = value.__class__  # the common cases inline: a list or tuple of plain values, or one plain value
        if plan.plain_list and (cls is list or cls is tuple):
            vals = list(value)
        elif plan.plain_list and (cls is int or cls is float or cls is str or cls is bool):
            vals = [value]
        else:
            vals = _as_list(value, type_name, spec.name)
        n = len(vals)
        if n < plan.min_count or n > plan.max_count:
            want = f"{spec.min_count}" if spec.min_count == spec.max_count else \
                f"{spec.min_count}..{'inf' if spec.max_count is None else spec.max_count}"
            raise DescriptorError(f"{spec.name} takes {want} element(s) of {type_name}; got {n}")
        if plan.convert is not None:
            array, keep = plan.convert(spec.name, type_name, vals), None
        else:
            array, keep = self._to_c_array(spec, type_name, vals)
        if plan.fills and not json_checked:  # a JSON document cuDNN parses: checked first (it crashes on some)
            json_check.check_attribute(plan.name, bytes(array))
        self._raw_set(spec, type_name, n, array)  # the one call point of cudnnBackendSetAttribute (tests hook it)
        # described when first shown (repr, explain): a set on the lowering path pays for no string building
        self._attrs[plan.name] = _describe(vals, type_name, plan.scalar) if plan.described_at_once else \
            _Undescribed(vals, type_name, plan.scalar)
        self._keepalive[plan.name] = keep
        if plan.fills:
            self._filled = True
        return self

    def _raw_set(self, spec: AttributeSpec, type_name: str, n: int, array: Any, traced: Any = None) -> None:
        if self._dead:  # before the begin record: no open record for a refused call
            raise DescriptorError(f"descriptor #{self.id} ({self.kind.name}) was destroyed")
        call = None if trace.active is None else trace.begin(
            "cudnnBackendSetAttribute", desc=self.id, kind=self.kind.name, attr=spec.name, type=type_name, count=n,
            values=(lambda: _trace_values(array, type_name, n)) if traced is None else traced)
        status = lib().cudnnBackendSetAttribute(self._ptr, spec.value, type_value(type_name), n, array)
        if call is not None:
            call.end(status)
        if status != 0:
            raise error_for(status, "cudnnBackendSetAttribute", kind=self.kind.name, attribute=spec.name,
                            detail=f"{n} element(s) of {type_name}")

    def _to_c_array(self, spec: AttributeSpec, type_name: str, vals: list) -> tuple[Any, Any]:
        """The C array (and what must stay alive with it) of a type with no plain converter (set tried that)."""
        ct = element_ctype(type_name)
        n = len(vals)
        if type_name == T_BACKEND_DESCRIPTOR:
            for i, d in enumerate(vals):
                if not isinstance(d, Descriptor):
                    raise DescriptorError(f"{spec.name} element {i} must be a Descriptor, not {_type_of(d)}")
                if d._dead:
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
                if d is self:
                    raise DescriptorError(f"{spec.name} element {i} is descriptor #{d.id} itself")
            return values.array_type(ct, n)(*[d._ptr for d in vals]), list(vals)  # each checked live above
        if type_name == T_CHAR:
            return ctypes.create_string_buffer(bytes(vals), n), None
        if type_name == T_FRACTION:
            return values.fraction_array(vals), None
        if type_name == T_HANDLE:
            handles = [_handle_value(v, spec.name, i, n) for i, v in enumerate(vals)]
            return values.array_type(ct, n)(*handles), list(vals)
        if type_name == T_VOID_PTR:
            host = spec.name in HOST_POINTER_ATTRIBUTES
            pointers = [_pointer_value(v, spec.name, i, n, host) for i, v in enumerate(vals)]
            return values.array_type(ct, n)(*pointers), list(vals)
        raise DescriptorError(f"{spec.name}: no conversion for {type_name}")  # a type the catalog does not know

    # ---------------------------------------------------------------------------------------- special attributes
    def _set_override_vectors(self, spec: AttributeSpec, type_name: str, value: Any) -> Descriptor:
        """VARIANT_PACK_OVERRIDE_SHAPES / _STRIDES: rows of ints (one row per overridden uid), passed as the C++
        ``std::vector<std::vector<int64_t>>`` cuDNN reads (types.Int64VectorVector). Anything else — an int, a
        Descriptor — is refused: cuDNN would read it as that vector (std::bad_alloc / SIGSEGV on 9.28)."""
        if isinstance(value, Int64VectorVector):
            vv = value
        else:
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise DescriptorError(
                    f"{spec.name} takes rows of ints (one list per overridden tensor, e.g. [[2, 3, 4], [8, 16]]), "
                    f"not {_type_of(value)}")
            rows = []
            for r, row in enumerate(value):
                if isinstance(row, (str, bytes)) or not isinstance(row, (list, tuple)):
                    raise DescriptorError(f"{spec.name} row {r} must be a list of ints, not {_type_of(row)}")
                rows.append(list(values.int_array(f"{spec.name} row {r}", atype.INT64, list(row))))
            vv = Int64VectorVector(rows)
        self._raw_set(spec, type_name, 1, vv.ref, traced={"rows": vv.rows})
        self._attrs[spec.name] = vv.rows
        self._keepalive[spec.name] = vv
        return self

    def _set_constant_value(self, spec: AttributeSpec, type_name: str, value: Any) -> Descriptor:
        """TENSOR_CONSTANT_VALUE: a host pointer to the scalar's bytes, read by cuDNN during the Set. A ctypes scalar
        (``ctypes.c_float(2.0)``) is checked against the size of the tensor's data type and kept alive; an int is taken
        as the address of such a scalar (the caller keeps it alive; only its plausibility can be checked)."""
        if isinstance(value, (list, tuple)) and len(value) == 1:
            value = value[0]
        if isinstance(value, ctypes._SimpleCData) and not isinstance(value, (ctypes.c_void_p, ctypes.c_char_p)):
            want = self._data_type_bytes()
            if want is not None and ctypes.sizeof(value) != want:
                raise DescriptorError(
                    f"{spec.name}: a {type(value).__name__} has {ctypes.sizeof(value)} byte(s), but the tensor's "
                    f"data type {self._attr(attr.TENSOR_DATA_TYPE)} has {want}")
            ptr, keep = ctypes.addressof(value), value
        elif isinstance(value, (float, complex, str, bytes)) or value is None:
            raise DescriptorError(
                f"{spec.name} takes the host address of the scalar (a ctypes scalar such as ctypes.c_float(2.0) "
                f"matching the tensor's data type, or its int address), not {_type_of(value)}")
        else:
            ptr, keep = _pointer_value(value, spec.name, 0, 1, True), value
        array = values.array_type(ctypes.c_void_p, 1)(ptr)
        self._raw_set(spec, type_name, 1, array)
        self._attrs[spec.name] = hex(ptr)
        self._keepalive[spec.name] = (array, keep)
        return self

    def _attr(self, name: str) -> Any:
        """What was set for attribute ``name`` through this object, as shown (None: not set)."""
        value = self._attrs.get(name)
        if isinstance(value, _Undescribed):  # kept as set (the fingerprint reads the values, not their display)
            value = value.described()
        return value

    def _data_type_bytes(self) -> int | None:
        """Bytes per element of the TENSOR_DATA_TYPE set on this descriptor (None: not set, or not a byte size)."""
        name = self._attr(attr.TENSOR_DATA_TYPE)
        if name is None:
            return None
        row = BY_BACKEND.get(name)
        return row.bits // 8 if row is not None and row.bits % 8 == 0 and row.bits else None

    # ----------------------------------------------------------------------------------------------- finalize
    def finalize(self) -> Descriptor:
        if self.finalized:
            raise DescriptorError(f"descriptor #{self.id} ({self.kind.name}) is already finalized")
        ptr = self.ptr  # raises once destroyed
        self._check_finalizable()
        call = None if trace.active is None else trace.begin("cudnnBackendFinalize", desc=self.id, kind=self.kind.name)
        status = lib().cudnnBackendFinalize(ptr)
        if call is not None:
            call.end(status)
        if status != 0:
            raise error_for(status, "cudnnBackendFinalize", kind=self.kind.name,
                            detail=f"attributes set: {', '.join(self._attrs) or 'none'}")
        self.finalized = True
        return self

    def _check_finalizable(self) -> None:
        """What ``requirements`` says this kind needs before finalize (DescriptorError naming what is missing)."""
        kind = self.kind.name
        check_finalizable(self.id, kind, self._attrs)
        if kind == _D_OPERATIONGRAPH_DESCRIPTOR:
            check_graph_mode(self.id, self._attr(attr.OPERATIONGRAPH_MODE),
                             self._keepalive.get(attr.OPERATIONGRAPH_OPS) or [])

    # ----------------------------------------------------------------------------------------------- fingerprint
    def fingerprint(self) -> tuple | None:
        """Everything set on this descriptor and on every descriptor it references, canonical and hashable: two
        descriptor trees with equal fingerprints got the same ``set()`` calls, descriptors compared by what was set
        on them and a descriptor referenced twice (a tensor two operations share) as one. None when that cannot be
        known from here: a descriptor cuDNN filled in (read back, loaded from JSON), or a constant given by address.
        (The plan cache keys plans by the fingerprint of their operation graph: ``plans/plan_cache.py``.)"""
        # positions: depth-first pre-order (a descriptor before what it references, referenced ones in attribute
        # name order), each descriptor at its first visit. An explicit stack, marked when popped, gives the order a
        # recursion would, with no depth limit.
        order: dict[int, int] = {}  # descriptor id -> its position in the fingerprint
        tree: list[tuple[Descriptor, list[str]]] = []  # each descriptor with its attribute names, sorted once
        stack: list[Descriptor] = [self]
        while stack:
            d = stack.pop()
            if d.id in order:
                continue
            if d._filled:
                return None
            order[d.id] = len(tree)
            names = sorted(d._attrs)
            tree.append((d, names))
            children = [c for name in names for c in _referenced(d._attrs[name])]
            stack.extend(reversed(children))
        try:
            return tuple((d.kind.name, tuple(_fingerprint_item(name, d._attrs[name], d._keepalive.get(name), order)
                                             for name in names)) for d, names in tree)
        except _Unknowable:
            return None

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
        if spec.name in GET_CRASHES_ALWAYS:  # never asked of cuDNN: the descriptor set here is the answer
            kept = self._keepalive.get(spec.name) if not self._filled else None
            if kept:
                return kept[0] if spec.max_count == 1 else list(kept)
            raise DescriptorError(f"cannot read {spec.name} of descriptor #{self.id} ({self.kind.name}): "
                                  f"{'it was never set' if not self._filled else 'cuDNN filled this descriptor in'}, "
                                  f"and cuDNN cannot be asked ({GET_CRASHES_ALWAYS[spec.name]})")
        if type is None:
            type_name = spec.get_type or spec.types[0]
        else:
            type_name = type if isinstance(type, str) else getattr(type, "name", str(type))
            if type_name not in spec.types and type_name != spec.get_type:
                accepted = dict.fromkeys(spec.types + ((spec.get_type,) if spec.get_type else ()))
                raise DescriptorError(f"{spec.name} is not read as {type_name}; it is read as {', '.join(accepted)}")
        self._check_readable(spec)
        scalar = spec.max_count == 1
        if count is not None:
            if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_GET_COUNT:
                raise DescriptorError(f"get({spec.name}): count must be an int in [0, {MAX_GET_COUNT}], not "
                                      f"{count!r}")
        if type_name == T_BACKEND_DESCRIPTOR:
            if into is not None:
                return self._get_into(spec, into)
            return self._get_descriptors(spec, kind, count, scalar)
        if into is not None or kind is not None:
            raise DescriptorError(f"get({spec.name}): into= and kind= are for descriptor-valued attributes")
        ct = element_ctype(type_name)
        if scalar:
            n = 1
        elif count is not None:
            n = count
        else:
            n = self._count(spec, type_name)
            if not 0 <= n <= MAX_GET_COUNT:
                raise DescriptorError(f"get({spec.name}): cuDNN reports {n} element(s); refusing to read more than "
                                      f"{MAX_GET_COUNT}")
        buf = values.array_type(ct, max(n, 1))()  # zero-filled: some Gets write fewer bytes than the type's width
        got = ctypes.c_int64(0)
        self._raw_get(spec, type_name, n, got, buf)
        m = min(got.value, n)
        if type_name == T_CHAR:
            return bytes(buf[:m]).split(b"\0", 1)[0].decode(errors="replace")
        vals = [_from_c(buf[i], type_name) for i in range(m)]
        return (vals[0] if vals else None) if scalar else vals

    def _check_readable(self, spec: AttributeSpec) -> None:
        """Refuse reads cuDNN cannot answer: an optional descriptor attribute that was never set (requirements)."""
        if spec.name in self._attrs:
            return
        if self._filled:
            if spec.name in GET_CRASHES_WHEN_UNSET:
                raise DescriptorError(
                    f"cannot read {spec.name} of descriptor #{self.id}: cuDNN filled this {self.kind.name} in, so "
                    f"cudnn_py cannot tell whether it is set, and reading it unset crashes "
                    f"({GET_CRASHES_WHEN_UNSET[spec.name]}); read it from the descriptor you built")
            return
        if spec.settable and T_BACKEND_DESCRIPTOR in spec.types:
            extra = f" ({GET_CRASHES_WHEN_UNSET[spec.name]})" if spec.name in GET_CRASHES_WHEN_UNSET else ""
            raise DescriptorError(
                f"cannot read {spec.name}: it was never set on descriptor #{self.id} ({self.kind.name}), so cuDNN has "
                f"nothing to return{extra}")

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
        if not isinstance(into, list):
            raise DescriptorError(f"get({spec.name}, into=...): into must be a list of Descriptors, not "
                                  f"{_type_of(into)}")
        for i, d in enumerate(into):
            if not isinstance(d, Descriptor):
                raise DescriptorError(f"get({spec.name}): into[{i}] must be a Descriptor, not {_type_of(d)}")
            if d.destroyed:
                raise DescriptorError(f"get({spec.name}): into[{i}] (descriptor #{d.id}) was destroyed")
            if spec.element_kinds and d.kind.name not in spec.element_kinds:
                raise DescriptorError(f"get({spec.name}): into[{i}] is a {d.kind.name}; cuDNN copies a "
                                      f"{' or '.join(spec.element_kinds)} into it")
            if d is self:
                raise DescriptorError(f"get({spec.name}): into[{i}] is descriptor #{d.id} itself")
        if spec.max_count == 1 and len(into) > 1:
            into = into[:1]  # a scalar is read with exactly one element (cuDNN refuses a larger count)
        arr = values.array_type(ctypes.c_void_p, max(len(into), 1))(*[d.ptr for d in into])
        got = ctypes.c_int64(0)
        self._raw_get(spec, T_BACKEND_DESCRIPTOR, len(into), got, arr)
        for d in into[: got.value]:  # the backend copies finalized descriptors into them
            d.finalized = True
            d._filled = True
            d._attrs.clear()  # what was set through the object is gone: cuDNN overwrote it
        return into[: got.value]

    def _get_descriptors(self, spec: AttributeSpec, kind: Any, count: int | None, scalar: bool) -> Any:
        if kind is None:
            if not spec.element_kinds:
                raise DescriptorError(
                    f"{spec.name}: pass kind= (the catalog does not say which descriptor kind it holds)")
            kind = spec.element_kinds[0]
        k = descriptor_kind(kind)
        if spec.element_kinds and k.name not in spec.element_kinds:
            raise DescriptorError(f"get({spec.name}, kind={k.name}): it holds {' or '.join(spec.element_kinds)}; "
                                  "cuDNN would copy one into a descriptor of another kind")
        n = 1 if scalar else (count if count is not None else self._count(spec, T_BACKEND_DESCRIPTOR))
        if not 0 <= n <= MAX_GET_COUNT:
            raise DescriptorError(f"get({spec.name}): cuDNN reports {n} element(s), more than {MAX_GET_COUNT}")
        created = [Descriptor(k) for _ in range(n)]
        outs = self._get_into(spec, created)
        for d in created[len(outs):]:
            d.destroy()
        return (outs[0] if outs else None) if scalar else outs

    # ----------------------------------------------------------------------------------------------- repr
    @property
    def attributes(self) -> dict[str, Any]:
        """What was set through this object, by attribute C name (as shown in ``repr``)."""
        return {k: self._attr(k) for k in self._attrs}

    def __repr__(self) -> str:
        state = "destroyed" if self.destroyed else ("finalized" if self.finalized else "not finalized")
        attrs = ", ".join(f"{k}={self._attr(k)}" for k in self._attrs)
        return f"<Descriptor #{self.id} {self.kind.name} {state}{': ' + attrs if attrs else ''}>"


class ScalarReader:
    """``get()`` of one scalar number attribute, resolved once, returning the C value (an enum's int).

    Planning reads the same few attributes of hundreds of descriptors cuDNN filled in (each heuristics result's
    engine index and knob choices); for those, what ``get()`` checks per call (the attribute's kind, version,
    readability and type) is settled by the kind alone. Each call is traced like any other. A descriptor that
    cuDNN did not fill in, of another kind, or an attribute with a read hazard takes ``get()``'s careful path.
    """

    __slots__ = ("spec", "type_name", "type_value", "ctype", "careful")

    def __init__(self, attr: Any):
        spec = attribute_spec(attr)
        type_name = spec.get_type or spec.types[0]
        if spec.max_count != 1 or type_name in (atype.BACKEND_DESCRIPTOR, atype.CHAR, atype.FRACTION):
            raise DescriptorError(f"ScalarReader({spec.name}): reads one number; use get() for {type_name} "
                                  f"(max count {spec.max_count})")
        self.spec, self.type_name = spec, type_name
        self.type_value, self.ctype = type_value(type_name), element_ctype(type_name)
        self.careful = not spec.readable or spec.name in GET_CRASHES_ALWAYS or spec.name in GET_CRASHES_WHEN_UNSET

    def __call__(self, d: Descriptor) -> Any:
        spec = self.spec
        if self.careful or not d._filled or d.kind.name != spec.owner or spec.since > runtime_version():
            value = d.get(spec.name)
            return int(value) if isinstance(value, CEnum) else value
        buf = (self.ctype * 1)()
        got = ctypes.c_int64(0)
        d._raw_get(spec, self.type_name, 1, got, buf)
        return buf[0]


MAX_GET_COUNT = 1 << 24  # elements one get() reads at most (the largest real answer is a few thousand configs)

# (descriptor kind, attribute as given, type as given and its class, runtime version) -> its _SetPlan: what
# Descriptor.set checked once for that key (every check that does not depend on the descriptor's state or value)
_SET_PLANS: dict[tuple, _SetPlan] = {}

# VOID_PTR attributes whose Set takes something else than an array of pointers: attribute -> Descriptor method
_SPECIAL_VOID_PTR: dict[str, Any] = {
    attr.VARIANT_PACK_OVERRIDE_SHAPES: Descriptor._set_override_vectors,
    attr.VARIANT_PACK_OVERRIDE_STRIDES: Descriptor._set_override_vectors,
    attr.TENSOR_CONSTANT_VALUE: Descriptor._set_constant_value,
}
