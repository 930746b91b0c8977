"""``DeviceInfo``: one GPU's facts (1.32's ``cudnn.DeviceInfo``, what ``Handle.device`` is), each read from the
driver through cuda.bindings on first access and kept on the instance; one instance per ordinal
(:func:`device_info`), so two handles on one GPU share its facts.

Creating one queries nothing: an ordinal that does not exist, or a machine without a driver, fails on the first
fact read (``ValueError`` / :class:`~cudnn_py.errors.NoCudaDeviceError`, a NotImplementedError as in 1.32).
"""
from __future__ import annotations

import functools
from typing import Any

from ..errors import CudaDriverError, InvalidValueError, NoCudaDeviceError

# CUdevice_attribute ordinals (cuda.h); named here so a cuda-bindings too old to name one still asks for it
_ATTR = {
    "compute_capability_major": 75, "compute_capability_minor": 76, "sm_count": 16,
    "shared_memory_per_block_optin": 97, "l2_cache_bytes": 38, "oversized_shared_memory_per_block": 150,
}


def _driver() -> Any:
    """The cuda.bindings driver module after a successful ``cuInit``, or None (no package, no driver)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    try:
        (err,) = driver.cuInit(0)
    except Exception:
        return None
    return driver if int(err) == 0 else None


def _checked(result: Any) -> Any:
    err, *values = result
    if int(err) != 0:
        raise CudaDriverError(f"cudnn_py: CUDA driver error {err!r}")
    return values[0] if len(values) == 1 else values


class DeviceInfo:
    """Facts of CUDA device ``ordinal``: ``compute_capability`` ((major, minor)), ``sm_version`` (major * 10 +
    minor), ``sm_count``, ``shared_memory_per_block_optin``, ``oversized_shared_memory_per_block`` (0 where the
    driver has no such mode), ``l2_cache_bytes``, ``device_name``."""

    def __init__(self, ordinal: int) -> None:
        self.ordinal = int(ordinal)

    # the one place that talks to the driver (tests give it a fake driver through _driver)
    def _device(self) -> tuple[Any, Any]:
        drv = _driver()
        if drv is None:
            raise NoCudaDeviceError("cudnn_py: no CUDA device visible")
        count = int(_checked(drv.cuDeviceGetCount()))
        if not 0 <= self.ordinal < count:
            raise InvalidValueError(f"cudnn_py: cuda:{self.ordinal} does not exist ({count} device(s) visible)")
        return drv, _checked(drv.cuDeviceGet(self.ordinal))

    def _attribute(self, name: str) -> int:
        drv, dev = self._device()
        attr = _ATTR[name]
        try:
            attr = drv.CUdevice_attribute(attr)
        except Exception:  # a cuda-bindings that cannot name it: the bare ordinal
            pass
        return int(_checked(drv.cuDeviceGetAttribute(attr, dev)))

    @functools.cached_property
    def compute_capability(self) -> tuple[int, int]:
        return self._attribute("compute_capability_major"), self._attribute("compute_capability_minor")

    @property
    def sm_version(self) -> int:
        major, minor = self.compute_capability
        return major * 10 + minor

    @functools.cached_property
    def sm_count(self) -> int:
        return self._attribute("sm_count")

    @functools.cached_property
    def shared_memory_per_block_optin(self) -> int:
        return self._attribute("shared_memory_per_block_optin")

    @functools.cached_property
    def oversized_shared_memory_per_block(self) -> int:
        drv, _ = self._device()
        try:
            version = int(_checked(drv.cuDriverGetVersion()))
        except Exception:
            return 0
        if version < 13040:  # the attribute came with CUDA 13.4; an older driver has no such mode
            return 0
        try:
            return self._attribute("oversized_shared_memory_per_block")
        except RuntimeError:
            return 0

    @functools.cached_property
    def l2_cache_bytes(self) -> int:
        return self._attribute("l2_cache_bytes")

    @functools.cached_property
    def device_name(self) -> str:
        drv, dev = self._device()
        name = _checked(drv.cuDeviceGetName(256, dev))
        return (name.split(b"\x00")[0].decode() if isinstance(name, bytes) else str(name))

    def __repr__(self) -> str:
        return f"DeviceInfo(cuda:{self.ordinal})"


@functools.cache
def device_info(ordinal: int) -> DeviceInfo:
    """The one :class:`DeviceInfo` of CUDA device ``ordinal``."""
    return DeviceInfo(int(ordinal))
