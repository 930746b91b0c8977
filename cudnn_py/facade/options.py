"""``pygraph``'s classic constructor and planning options, checked: what is refused, and when."""
from __future__ import annotations

from typing import Any

from ..enums import heur_mode
from ..errors import InvalidTypeError, InvalidValueError, NotImplementedOptionError
from ..plans.device_properties import DeviceProperties
from ..plans.kernel_cache import KernelCache

DEFAULT_HEURISTICS = (heur_mode.A, heur_mode.FALLBACK)


def refuse_unimplemented(**given: Any) -> None:
    """Classic constructor options cudnn_py does not implement yet: refused when given, never ignored."""
    for name, value in given.items():
        if value not in (None, False):
            raise NotImplementedOptionError(f"pygraph({name}=...) is not implemented yet in cudnn_py")


def check_planning_targets(handle: Any, sm_version: Any, kernel_cache: Any, device_property: Any) -> None:
    """The classic planning options, checked at construction (a wrong object would fail only at build)."""
    if sm_version is not None and (isinstance(sm_version, bool) or not isinstance(sm_version, int) or
                                   not 10 <= sm_version < 1000):
        raise InvalidValueError(f"pygraph(sm_version=...) is an architecture as major * 10 + minor (90 for SM 9.0, "
                                f"100 for "
                         f"SM 10.0), got {sm_version!r}")
    if kernel_cache is not None and not isinstance(kernel_cache, KernelCache):
        raise InvalidTypeError(f"pygraph(kernel_cache=...) takes what cudnn.create_kernel_cache() returns, not "
                        f"{type(kernel_cache).__name__}")
    if device_property is not None:
        if not isinstance(device_property, DeviceProperties):
            raise InvalidTypeError(f"pygraph(device_property=...) takes what cudnn.create_device_properties() "
                                   f"returns, not "
                            f"{type(device_property).__name__}")
        if handle is not None:
            raise InvalidValueError("pygraph(handle=..., device_property=...): a graph with device properties plans "
                                    "without "
                             "a handle (ahead of time, for the GPU they describe); give one or the other, and the "
                             "handle to run on to execute(handle=...)")


def heuristic_list(heuristics: Any) -> list[Any]:
    if heuristics is None:
        return list(DEFAULT_HEURISTICS)
    modes = [heuristics] if isinstance(heuristics, heur_mode) else list(heuristics)
    bad = [m for m in modes if not isinstance(m, heur_mode)]
    if bad:
        raise InvalidTypeError(f"heuristic modes must be heur_mode members, got {bad}")
    return modes


def no_overrides(method: str, *overrides: Any) -> None:
    if any(o is not None for o in overrides):
        raise NotImplementedOptionError(f"{method}() with shape overrides is not implemented yet in cudnn_py")
