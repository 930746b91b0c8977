"""The catalog's answers for ``Descriptor``, each worked out once: an attribute or a descriptor kind as given (member,
C name or int), the type a ``set`` uses, and what a kind still needs before ``finalize`` (:mod:`.requirements`:
the attributes it requires, the operations a graph's explicit mode needs).
"""
from __future__ import annotations

from functools import cache
from typing import Any

from .._generated.attributes import ATTRIBUTES, DESCRIPTOR_SINCE, AttributeSpec
from .._generated.enums import ENUMS
from ..errors import DescriptorError, InvalidTypeError, UnsupportedAttributeError
from .enums import CEnum, coerce, enum_class
from .requirements import BACKEND_FILLED_KINDS, GRAPH_MODE_NEEDS, REQUIRED
from .versions import runtime_version, since

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
    raise InvalidTypeError(f"attribute must be a CUDNN_ATTR_* name or enum member, not {type(attr).__name__}")


def descriptor_kind(kind: Any) -> CEnum:
    """The ``cudnnBackendDescriptorType_t`` member for a kind given as member, C name or int value. Only members of
    the catalog: an unknown int (``Descriptor(2**40)``) would reach ``cudnnBackendCreateDescriptor`` truncated to
    a C int — 2**40 creates a POINTWISE descriptor."""
    if isinstance(kind, str):
        return _kind_by_name(kind)
    if isinstance(kind, bool) or not hasattr(type(kind), "__index__"):
        raise DescriptorError(f"a descriptor kind is a CUDNN_BACKEND_* name or member, not {type(kind).__name__}")
    if isinstance(kind, CEnum) and type(kind).__name__ != "cudnnBackendDescriptorType_t":
        raise DescriptorError(f"{kind} is not a descriptor kind (a cudnnBackendDescriptorType_t member)")
    value = kind.__index__()
    if value not in _KIND_VALUES:
        raise DescriptorError(f"unknown descriptor kind {value} (not a cudnnBackendDescriptorType_t value)")
    return coerce("cudnnBackendDescriptorType_t", value)


_KIND_VALUES = frozenset(v for _n, v, _s, _d in ENUMS["cudnnBackendDescriptorType_t"])


@cache
def _kind_by_name(name: str) -> CEnum:
    try:
        return coerce("cudnnBackendDescriptorType_t", name)
    except ValueError:
        raise DescriptorError(f"unknown descriptor kind {name!r}") from None


@cache
def _kind_info(cls: type, kind: Any, version: int) -> tuple[CEnum, str, int]:
    """(member, C name, value) of a descriptor kind as given (``kind``, of class ``cls``), checked against the
    loaded library (``version``) once per kind, class and library."""
    member = descriptor_kind(kind)
    since = DESCRIPTOR_SINCE.get(member.name, 0)
    if since > version:
        raise UnsupportedAttributeError(member.name, since, version)
    return member, member.name, int(member)


def _pick_type(spec: AttributeSpec, type: str | None) -> str:
    if type is None:
        return spec.types[0]
    t = type if isinstance(type, str) else getattr(type, "name", str(type))
    if t not in spec.types:
        raise DescriptorError(f"{spec.name} does not accept {t}; it accepts {', '.join(spec.types)}")
    return t


_MISSING: dict[tuple[str, tuple[str, ...], int], list[str]] = {}  # check_finalizable's answers


def missing_requirements(kind: str, attrs: Any) -> list[str]:
    """The requirements (requirements.REQUIRED) of descriptor ``kind`` not met by the attribute names ``attrs``,
    each in words; requirements on attributes the loaded library lacks are skipped."""
    return [" or ".join(present) for when, present in _requirements_of(kind, runtime_version())
            if (when is None or when in attrs) and not any(a in attrs for a in present)]


@cache
def _requirements_of(kind: str, version: int) -> tuple[tuple[str | None, tuple[str, ...]], ...]:
    """(condition attribute, the attributes of which one is needed) of ``kind`` on cuDNN ``version``: checked at
    every finalize, so resolved against the catalog once."""
    out = []
    for req in REQUIRED.get(kind, ()):
        present = tuple(a for a in req.any_of if since(a) <= version)
        if present:
            out.append((req.when, present))
    return tuple(out)


def check_finalizable(desc_id: int, kind: str, attrs: dict[str, Any]) -> None:
    """Refuse to finalize descriptor #``desc_id`` of ``kind`` with the attributes ``attrs`` set, where cuDNN fills
    that kind in or a required attribute is missing (DescriptorError naming what is missing)."""
    if kind in BACKEND_FILLED_KINDS:
        raise DescriptorError(
            f"descriptor #{desc_id}: a {kind} is filled in by cuDNN (read it with get() from the descriptor that "
            f"holds it); there is nothing to finalize ({BACKEND_FILLED_KINDS[kind]})")
    # the same kinds are finalized with the same attributes over and over: the answer is remembered per set
    key = (kind, tuple(attrs), runtime_version())
    missing = _MISSING.get(key)
    if missing is None:
        missing = _MISSING[key] = missing_requirements(kind, attrs)
    if missing:
        raise DescriptorError(
            f"cannot finalize descriptor #{desc_id} ({kind}): missing required attribute(s) "
            f"{'; '.join(missing)} (attributes set: {', '.join(attrs) or 'none'})")


def check_graph_mode(desc_id: int, mode: Any, ops: list) -> None:
    """Refuse to finalize operation graph #``desc_id`` whose explicit ``mode`` (as shown) needs an operation kind
    that none of ``ops`` (its operation descriptors) is."""
    if mode in GRAPH_MODE_NEEDS:
        needs, source = GRAPH_MODE_NEEDS[mode]
        if not any(op.kind.name in needs for op in ops):
            have = sorted({op.kind.name for op in ops})
            raise DescriptorError(
                f"cannot finalize descriptor #{desc_id}: CUDNN_ATTR_OPERATIONGRAPH_MODE = {mode} needs an "
                f"operation of kind {' or '.join(needs)}; the graph has {', '.join(have) or 'none'} "
                f"({source}). Leave the mode unset (AUTO) unless you know the graph's pattern.")
