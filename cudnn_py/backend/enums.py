"""Python enums for the cuDNN C enums, built on first use from the generated table.

``str(member)`` is ``"<C enum name>.<MEMBER>"`` (e.g. ``cudnnBackendDescriptorType_t.CUDNN_BACKEND_TENSOR_DESCRIPTOR``).
A value the generated table does not know (a newer libcudnn) becomes a pseudo-member named ``UNKNOWN_<value>``
instead of raising, so reading notes or statuses from a newer library never breaks.
Access: ``enum_class("cudnnDataType_t")`` or attribute access on this module (``enums.cudnnDataType_t``).
"""
from __future__ import annotations

import enum
from functools import cache
from typing import Any

from .._generated.enums import ENUMS
from ..errors import InvalidValueError


class CEnum(enum.IntEnum):
    """Base of every generated cuDNN enum."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    @classmethod
    def _missing_(cls, value):
        if not isinstance(value, int):
            return None
        pseudo = int.__new__(cls, value)
        pseudo._name_ = f"UNKNOWN_{value}"
        pseudo._value_ = value
        return cls._value2member_map_.setdefault(value, pseudo)

    @property
    def since(self) -> int:
        return _since(type(self).__name__).get(self.name, 0)


@cache
def _since(enum_name: str) -> dict[str, int]:
    return {name: since for name, _v, since, _d in ENUMS[enum_name]}


@cache
def enum_class(enum_name: str) -> type[CEnum]:
    """The enum class for a C enum typedef name (aliases with duplicate values resolve to the first member)."""
    try:
        members = ENUMS[enum_name]
    except KeyError:
        raise KeyError(f"no cuDNN enum named {enum_name!r}") from None
    cls: Any = CEnum(enum_name, [(name, value) for name, value, _s, _d in members],  # type: ignore[call-arg,arg-type]
                     module=__name__)
    return cls


@cache
def _member_index() -> dict[str, tuple[str, int]]:
    index: dict[str, tuple[str, int]] = {}
    for enum_name, members in ENUMS.items():
        for name, value, _s, _d in members:
            index.setdefault(name, (enum_name, value))
    return index


def member(c_name: str) -> CEnum:
    """Any enum member by its C name, e.g. ``member("CUDNN_DATA_HALF")``."""
    try:
        enum_name, value = _member_index()[c_name]
    except KeyError:
        raise KeyError(f"no cuDNN enum member named {c_name!r}") from None
    return enum_class(enum_name)(value)


def coerce(enum_name: str, value) -> CEnum:
    """An enum member of ``enum_name`` from a member, its C name or its int value."""
    cls = enum_class(enum_name)
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls[value]
        except KeyError:
            raise InvalidValueError(f"{value!r} is not a member of {enum_name}") from None
    if isinstance(value, enum.Enum) and not isinstance(value, int):
        raise InvalidValueError(f"{value!r} is not a member of {enum_name}")
    return cls(int(value))


def __getattr__(name: str):  # module-level lazy access: enums.cudnnDataType_t
    if name in ENUMS:
        return enum_class(name)
    raise AttributeError(name)
