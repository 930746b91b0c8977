"""Version gates from the generated catalog: every attribute, descriptor kind, enum member and backend function
carries the cuDNN version that introduced it (``since``), read from the headers by ``bindings/generate.py``.
Features are gated on the *runtime* ``cudnnGetVersion()`` of the loaded library, never on the header version the
tables came from; a gate that fails raises :class:`~cudnn_py.errors.FeatureVersionError` naming what is needed.
"""
from __future__ import annotations

from functools import cache

from .._generated import HEADER_VERSION
from .._generated.attributes import ATTRIBUTES, DESCRIPTOR_SINCE
from .._generated.enums import ENUMS
from .._generated.functions import FUNCTIONS
from ..errors import FeatureVersionError

_runtime_version = 0


def runtime_version() -> int:
    """``cudnnGetVersion()`` of the loaded library (loads it on first use; cached: checked on every set/get)."""
    global _runtime_version
    if not _runtime_version:
        from .loader import load_library

        _runtime_version = load_library().version
    return _runtime_version


@cache
def _enum_member_since() -> dict[str, int]:
    out: dict[str, int] = {}
    for members in ENUMS.values():
        for name, _value, since, _deprecated in members:
            out.setdefault(name, since)
    return out


def since(feature: str) -> int:
    """The cuDNN version that introduced ``feature``: a ``CUDNN_ATTR_*`` attribute, a ``CUDNN_BACKEND_*``
    descriptor kind, any enum member (``CUDNN_POINTWISE_ATAN2``) or a backend function (``cudnnBackendExecute``)."""
    spec = ATTRIBUTES.get(feature)
    if spec is not None:
        return spec.since
    if feature in DESCRIPTOR_SINCE:
        return DESCRIPTOR_SINCE[feature]
    fn = FUNCTIONS.get(feature)
    if fn is not None:  # a header without @since (bindings/overrides.json header_since): the pinned headers' version
        return fn[3] if fn[3] is not None else int(HEADER_VERSION)
    member = _enum_member_since().get(feature)
    if member is not None:
        return member
    raise KeyError(f"{feature!r} is not in the generated catalog (attributes, descriptor kinds, enums, functions)")


def available(feature: str) -> bool:
    """Whether the loaded cuDNN has ``feature`` (see :func:`since`)."""
    return since(feature) <= runtime_version()


def require(feature: str, *, what: str = "", at_least: int = 0) -> None:
    """Raise FeatureVersionError unless the loaded cuDNN has ``feature`` (and is at least ``at_least``, for
    gates stricter than the catalog, e.g. a version with a known bug). ``what`` names the user-facing feature."""
    needed = max(since(feature), at_least)
    loaded = runtime_version()
    if needed > loaded:
        label = f"{what} ({feature})" if what else feature
        raise FeatureVersionError(label, needed, loaded)
