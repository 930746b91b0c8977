"""The graph tensor (classic `cudnn.tensor`): attributes, fluent setters, getters, and the freeze guard.

Every public attribute write goes through `__setattr__`, so one place enforces the rules:
  * after the owning graph is frozen (planning), any write raises RuntimeError naming the tensor and the
    attribute - except `name`, which is a label with no execution meaning (classic renames after build);
  * a write records the attribute as user-set, so re-running inference never overwrites what the user chose,
    and tells the owning graph that its validation is stale;
  * `uid` writes are routed to the owning graph, which owns the uid namespace (see pygraph._assign_uid).
Inference writes through `_infer_set`, which neither marks nor invalidates.
"""
from __future__ import annotations

import json
import operator
import weakref
from typing import Any

from ..enums import data_type, from_any_dtype, tensor_reordering
from ..errors import InvalidTypeError, InvalidValueError, frozen_error

_DEFAULT_ALIGNMENT = 16  # bytes; the frontend default (graph_properties.h)

# attribute -> default value; the public surface the lowering reads
_FIELDS = {
    "uid": 0,
    "name": "",
    "dim": None,  # list[int]; [] while unknown
    "stride": None,
    "data_type": data_type.NOT_SET,
    "is_virtual": False,
    "is_pass_by_value": False,
    "pass_by_value": None,  # host value of a fused scalar; None for buffers and runtime parameters
    "is_compile_time_constant": False,
    "ragged_offset": None,
    "ragged_offset_multiplier": 1,
    "reordering_type": tensor_reordering.NONE,
    "alignment": _DEFAULT_ALIGNMENT,
    "vector_count": 1,
    "vector_dimension": -1,
}
# attributes that inference may fill (and re-fill after a user change upstream)
INFERABLE = ("dim", "stride", "data_type")


class Dims(list):
    """Dims or strides: a list that cannot be edited in place (``t.dim[0] = 7`` would bypass the tensor's write
    path, so the graph would not know its inference and lowering are stale). Use ``set_dim`` / ``set_stride``."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise InvalidTypeError("a tensor's dims and strides cannot be edited in place; call set_dim() / "
                               "set_stride() with "
                        "the new list")

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse  # type: ignore[assignment]
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse


def int_list(values: Any, what: str) -> Dims:
    """Each element an int (numpy ints too); strings, floats and bools are refused rather than converted
    ("234" would become [2, 3, 4] and 2.7 would become 2)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise InvalidTypeError(f"{what} must be a sequence of ints, got {values!r}")
    out = []
    for v in values:
        if isinstance(v, bool):
            raise InvalidTypeError(f"{what} must be a sequence of ints, got {values!r}")
        try:
            out.append(operator.index(v))
        except TypeError:
            raise InvalidTypeError(f"{what} must be a sequence of ints, got {values!r} ({type(v).__name__} "
                                   f"element)") from None
    return Dims(out)


def _bound(n: int) -> str:
    return f"2**{n.bit_length() - 1}" if n > 2**16 and n & (n - 1) == 0 else str(n)


def checked_int(value: Any, low: int | None = None, high: int | None = None, what: str = "") -> int:
    """``value`` as an int (numpy ints too; bools, floats and strings refused, not converted) in ``[low, high)``
    (a bound that is None: none). The IR's one integer check (tensor attributes here, op arguments through
    ``inference.py``'s ``int_at_least``): the message names ``what`` (if given), the rule and the value, e.g.
    ``tensor alignment needs an int in [1, 2**31), got 0``."""
    if value.__class__ is int:  # the common case first (the message is made only for a refusal: builds call this
        n = value               # for every tensor attribute and op argument)
    elif isinstance(value, bool):
        raise InvalidTypeError(_int_rule(what, low, high, repr(value)))
    else:
        try:
            n = operator.index(value)
        except TypeError:
            raise InvalidTypeError(_int_rule(what, low, high, repr(value))) from None
    if (low is not None and n < low) or (high is not None and n >= high):
        raise InvalidValueError(_int_rule(what, low, high, str(n)))
    return n


def checked_uid(value: Any, what: str = "tensor uid", low: int = 0) -> int:
    """A tensor uid: an int (numpy ints too, as the official int64 parameters take them) in ``[low, 2**63)``;
    str, float and bool are refused (InvalidTypeError, a TypeError), never converted ("5" or 5.7 once became uid
    5, True uid 1)."""
    return checked_int(value, low, 2**63, what=what)


def _int_rule(what: str, low: int | None, high: int | None, got: str) -> str:
    if low is not None and high is not None:
        rule = f"an int in [{_bound(low)}, {_bound(high)})"
    elif low is not None:
        rule = f"an int >= {_bound(low)}"
    elif high is not None:
        rule = f"an int < {_bound(high)}"
    else:
        rule = "an int"
    return f"{what} needs {rule}, got {got}" if what else f"needs {rule}, got {got}"


def _normalize(attr: str, value: Any) -> Any:
    if attr in ("dim", "stride"):
        return Dims() if value is None else int_list(value, attr)
    if attr == "uid":  # an int64 the backend keys the variant pack by
        return checked_uid(value)
    if attr == "name":
        if not isinstance(value, str):
            raise InvalidTypeError(f"tensor name must be a str, got {value!r} ({type(value).__name__})")
        return value
    if attr == "alignment":
        return checked_int(value, 1, 2**31, what=f"tensor {attr}")
    if attr in ("vector_count", "ragged_offset_multiplier"):
        return checked_int(value, 1, 2**31, what=f"tensor {attr}")
    if attr == "vector_dimension":
        return checked_int(value, -1, 2**31, what=f"tensor {attr}")
    if attr == "data_type":
        return from_any_dtype(value)
    if attr == "reordering_type":
        return tensor_reordering.NONE if value is None else value
    if attr in ("is_virtual", "is_pass_by_value", "is_compile_time_constant"):
        if isinstance(value, (str, bytes)):  # "false" would read as True
            raise InvalidTypeError(f"tensor {attr} must be a bool, got {value!r}")
        return bool(value)
    if attr == "ragged_offset" and value is not None and not isinstance(value, Tensor):
        raise InvalidTypeError(f"ragged_offset must be a graph tensor, got {type(value).__name__}")
    return value


# _FIELDS' defaults as _normalize makes them (Dims stands for a fresh empty Dims)
_NORMALIZED_DEFAULTS: dict[str, Any] = {
    attr: Dims if attr in ("dim", "stride") else _normalize(attr, default) for attr, default in _FIELDS.items()}


class Tensor:
    """A graph tensor. Created by pygraph.tensor()/tensor_like()/tensor_scalar() and by ops (outputs).

    `cudnn.tensor()` with no arguments makes a detached tensor, as the classic class allows."""

    # the fields (see _FIELDS), written through __setattr__ / object.__setattr__
    uid: int
    name: str
    dim: Any
    stride: Any
    data_type: Any
    is_virtual: bool
    is_pass_by_value: bool
    pass_by_value: Any
    is_compile_time_constant: bool
    ragged_offset: Tensor | None
    ragged_offset_multiplier: int
    reordering_type: Any
    alignment: int
    vector_count: int
    vector_dimension: int
    uid_assigned: bool
    _owner: Any
    _frozen: bool
    _user_fields: set

    def __init__(self, _user: tuple = (), **attrs: Any) -> None:
        # `_user` names the attributes the creator chose (kept through re-inference)
        object.__setattr__(self, "_owner", None)
        object.__setattr__(self, "_frozen", False)
        object.__setattr__(self, "_user_fields", set(_user))
        # True once the user chose the uid (cudnn.tensor(uid=5): kept when a graph adopts the tensor)
        object.__setattr__(self, "uid_assigned", "uid" in attrs)
        # the passes make many tensors with mostly default fields: only the given ones are normalized
        for attr, default in _NORMALIZED_DEFAULTS.items():
            if attr in attrs:
                value = _normalize(attr, attrs.pop(attr))
            else:
                value = Dims() if default is Dims else default  # fresh (empty) dims and strides per tensor
            object.__setattr__(self, attr, value)
        if attrs:
            raise InvalidTypeError(f"unknown tensor attributes {sorted(attrs)}")

    # ---- the single write path ------------------------------------------------------------------------------------
    def __setattr__(self, attr: str, value: Any) -> None:
        if attr not in _FIELDS:
            if attr.startswith("_") or attr == "uid_assigned":
                object.__setattr__(self, attr, value)
                return
            raise AttributeError(f"tensor has no attribute {attr!r}")
        if attr == "uid":
            value = _normalize("uid", value)
        if attr == "uid" and value == self.uid:  # same value: only records that the user chose it
            if not self._frozen:
                object.__setattr__(self, "uid_assigned", True)
            return
        if self._frozen and attr != "name":
            raise frozen_error(f"set {attr} of tensor {self.name!r} (uid {self.uid})")
        owner = self.owner
        if attr == "uid":
            if owner is not None:
                owner._assign_uid(self, int(value))  # the graph re-enters via _raw_set
            else:
                object.__setattr__(self, "uid", int(value))
                object.__setattr__(self, "uid_assigned", True)
            return
        object.__setattr__(self, attr, _normalize(attr, value))
        self._user_fields.add(attr)
        if owner is not None and attr != "name":
            owner._invalidate()

    def _raw_set(self, attr: str, value: Any) -> None:
        """Write without marking or invalidating (used by the owning graph for uids and names)."""
        object.__setattr__(self, attr, value)

    def _infer_set(self, attr: str, value: Any) -> None:
        """Inference writes: never overwrite a user choice, never invalidate."""
        if attr not in self._user_fields:
            object.__setattr__(self, attr, _normalize(attr, value))

    def is_user_set(self, attr: str) -> bool:
        return attr in self._user_fields

    def _reset_inferred(self, defaults: dict) -> None:
        for attr in INFERABLE:
            if attr not in self._user_fields:
                object.__setattr__(self, attr, _normalize(attr, defaults.get(attr, _FIELDS[attr])))

    def _attach(self, graph: Any) -> None:
        object.__setattr__(self, "_owner", weakref.ref(graph))

    def _freeze(self) -> None:
        # tuples stop in-place edits such as t.dim.append(...) from slipping past the guard
        object.__setattr__(self, "dim", tuple(self.dim))
        object.__setattr__(self, "stride", tuple(self.stride))
        object.__setattr__(self, "_frozen", True)

    def copy(self) -> Tensor:
        """A detached copy with the same attributes, uid included (classic query_tensor_attributes_of_uid)."""
        twin = Tensor(_user=tuple(self._user_fields), **{k: getattr(self, k) for k in _FIELDS})
        object.__setattr__(twin, "uid_assigned", self.uid_assigned)
        return twin

    @property
    def owner(self) -> Any:
        ref = self._owner
        return ref() if ref is not None else None

    @property
    def is_frozen(self) -> bool:
        return self._frozen

    @property
    def is_fused_scalar(self) -> bool:
        """A by-value tensor whose value is known at build time (python scalar, tensor_scalar)."""
        return self.is_pass_by_value and self.pass_by_value is not None

    # ---- classic setters (return self so calls chain) -------------------------------------------------------------
    def set_output(self, is_output: bool) -> Tensor:
        self.is_virtual = not is_output
        return self

    def set_is_virtual(self, is_virtual: bool) -> Tensor:
        self.is_virtual = is_virtual
        return self

    def set_data_type(self, dt: Any) -> Tensor:
        self.data_type = dt  # classic data_type, torch dtype or numpy dtype
        return self

    def set_dim(self, dim: Any) -> Tensor:
        self.dim = dim
        return self

    def set_stride(self, stride: Any) -> Tensor:
        self.stride = stride
        return self

    def set_uid(self, uid: int) -> Tensor:
        self.uid = uid
        return self

    def set_name(self, name: str) -> Tensor:
        self.name = name
        return self

    def set_is_pass_by_value(self, value: bool) -> Tensor:
        self.is_pass_by_value = value
        return self

    def set_ragged_offset(self, offset: Tensor | None) -> Tensor:
        self.ragged_offset = offset
        return self

    def set_ragged_offset_multiplier(self, multiplier: int) -> Tensor:
        self.ragged_offset_multiplier = multiplier
        return self

    def set_reordering_type(self, reordering: Any) -> Tensor:
        self.reordering_type = reordering
        return self

    def set_alignment(self, alignment: int) -> Tensor:
        self.alignment = alignment
        return self

    def set_vector_count_and_dimension(self, count: int, dimension: int) -> Tensor:
        self.vector_count = count
        self.vector_dimension = dimension
        return self

    # ---- classic getters --------------------------------------------------------------------------------------------
    def get_name(self) -> str:
        return self.name

    def get_data_type(self) -> Any:
        return self.data_type

    def get_dim(self) -> list[int]:
        return list(self.dim)

    def get_stride(self) -> list[int]:
        return list(self.stride)

    def get_is_virtual(self) -> bool:
        return self.is_virtual

    def get_is_pass_by_value(self) -> bool:
        return self.is_pass_by_value

    def get_has_compile_time_constant(self) -> bool:
        return self.is_compile_time_constant

    def get_uid(self) -> int:
        return self.uid

    def get_ragged_offset(self) -> Tensor | None:
        return self.ragged_offset

    def get_ragged_offset_multiplier(self) -> int:
        return self.ragged_offset_multiplier

    def get_reordering_type(self) -> Any:
        return self.reordering_type

    def get_alignment(self) -> int:
        return self.alignment

    def get_vector_count(self) -> int:
        return self.vector_count

    def get_vector_dimension(self) -> int:
        return self.vector_dimension

    # ---- views ------------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "uid": self.uid,
            "uid_assigned": self.uid_assigned,
            "dim": list(self.dim),
            "stride": list(self.stride),
            "data_type": str(self.data_type),
            "is_virtual": self.is_virtual,
            "is_pass_by_value": self.is_pass_by_value,
            "pass_by_value": _jsonable(self.pass_by_value),
            "is_compile_time_constant": self.is_compile_time_constant,
            "ragged_offset_uid": self.ragged_offset.uid if self.ragged_offset is not None else None,
            "reordering_type": str(self.reordering_type),
            "alignment": self.alignment,
        }

    def __repr__(self) -> str:
        return json.dumps(self.to_dict())


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return repr(value)


def declared_otherwise(other: Any, mine: Any) -> str | None:
    """Where ``other``, a tensor of another graph given as a variant-pack key for ``mine`` because their uids are
    the same (the official module keys variant packs by uid alone, so a graph deserialized from another's blob, or
    built again alike, runs with the first graph's tensors), contradicts ``mine``: what ``mine`` has (dims, strides
    or data type) and the key declares otherwise, said; None where nothing it declares (what it leaves unset is not
    compared) contradicts ``mine``. The operand itself is checked against ``mine`` either way: this only catches
    the key of another graph's tensor that happens to share a uid with this one's."""
    for what, theirs, ours in (("dims", other.dim, mine.dim), ("strides", other.stride, mine.stride)):
        if theirs and [int(d) for d in theirs] != [int(d) for d in ours]:
            return f"{what} {[int(d) for d in ours]} (the key declares {[int(d) for d in theirs]})"
    dt = other.data_type
    if dt is not None and dt is not data_type.NOT_SET and dt != mine.data_type:
        return f"data type {mine.data_type} (the key declares {dt})"
    return None


# the classic public name
tensor = Tensor
