"""Device gates: what a node's engines need of the GPU and its libraries, beyond the cuDNN version.

A spec declares them (``OpSpec.min_compute_capability``, ``OpSpec.min_cublaslt``); they are checked when planning
first meets a GPU (``PlanningSession.build_operation_graph`` with a handle), never during deviceless validation.
Without this check a graph the backend has no kernels for on this GPU (block scaling before Blackwell) fails
later as a bare status code, or not at all until execute; here it is refused as
:class:`~cudnn_py.errors.cudnnGraphNotSupportedError` naming the op, the node, what it needs and what there is.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
from functools import cache
from typing import Any

from ..backend.handle import current_device
from ..backend.loader import mapped_libraries
from ..backend.versions import runtime_version
from ..errors import cudnnGraphNotSupportedError, version_string

_CAPABILITIES: dict[int, int] = {}  # device -> its compute capability, once read


def compute_capability(device: int) -> int:
    """``major * 10 + minor`` of a CUDA device (90 for an H100 / H200, 100 for a B200); 0 if it cannot be read
    (not remembered: a later call may succeed)."""
    cc = _CAPABILITIES.get(int(device))
    if cc is None:
        cc = _read_compute_capability(int(device))
        if cc:
            _CAPABILITIES[int(device)] = cc
    return cc


def _read_compute_capability(device: int) -> int:
    try:
        from cuda.bindings import driver
    except ImportError:
        return 0
    A = driver.CUdevice_attribute
    try:  # cuda-bindings without a usable driver raises instead of returning an error code
        err, dev = driver.cuDeviceGet(int(device))
        if int(err) != 0:
            return 0
        err_major, major = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        err_minor, minor = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    except RuntimeError:
        return 0
    if int(err_major) != 0 or int(err_minor) != 0:
        return 0
    return int(major) * 10 + int(minor)


def _cublaslt_candidates() -> list[str]:
    """The cuBLASLt already mapped into the process (the one cuDNN uses) first, then the usual sonames, then the
    NVIDIA wheels on sys.path."""
    found = [p for p in mapped_libraries("libcublasLt") if os.path.basename(p).startswith("libcublasLt.so")]
    found += ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]
    for root in sys.path:
        found += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcublasLt.so*")), reverse=True)
    return found


@cache
def cublaslt_version() -> int:
    """``cublasLtGetVersion()`` (MAJOR*10000 + MINOR*100 + PATCH) of the cuBLASLt this process would use, or 0
    when none can be loaded."""
    for path in _cublaslt_candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        fn = getattr(lib, "cublasLtGetVersion", None)
        if fn is None:
            continue
        fn.restype, fn.argtypes = ctypes.c_size_t, []
        return int(fn())
    return 0


def device_of_handle(handle: Any) -> int:
    """The device planning runs on: the handle's, or (no handle, or one without a device) the current device,
    whose default handle planning uses."""
    device = getattr(handle, "ordinal", None)  # a Handle's CUDA ordinal (its .device is a DeviceInfo)
    return current_device() if device is None else int(device)


def check(nodes: Any, handle: Any, sm_version: int | None = None) -> None:
    """Refuse the first node whose spec's device gates the GPU of ``handle`` fails (no handle, or one without a
    device: the current device, whose default handle planning uses). ``sm_version`` (classic
    ``pygraph(sm_version=)``, 90 = SM 9.0): the architecture planned for, checked instead of the device's."""
    device = -1
    if sm_version is not None:
        device_label = f"the target sm_version {sm_version}"
    else:
        device = device_of_handle(handle)
        device_label = f"device {device}"
    for node in nodes:
        spec = node.spec
        if spec is None:
            continue
        what = f"{spec.method}() (node {node.name!r})"
        cc = 0
        if spec.min_compute_capability or spec.device_rules is not None:
            cc = sm_version if sm_version is not None else compute_capability(device)
        if spec.min_compute_capability:
            if cc and cc < spec.min_compute_capability:  # unreadable (0): cuDNN's own support check decides
                need = spec.min_compute_capability
                raise cudnnGraphNotSupportedError(
                    f"{what} needs a GPU of compute capability {need // 10}.{need % 10} or newer (cuDNN has its "
                    f"engines only there); {device_label} is {cc // 10}.{cc % 10}")
        if spec.device_rules is not None:
            why = spec.device_rules(node, cc, runtime_version()) if cc else None
            if why:
                raise cudnnGraphNotSupportedError(
                    f"{what} cannot run on {device_label} (compute capability {cc // 10}.{cc % 10}): {why}")
        if spec.min_cublaslt:
            have = cublaslt_version()
            if have < spec.min_cublaslt:
                found = f"the loaded one is {version_string(have)}" if have else "none could be loaded"
                raise cudnnGraphNotSupportedError(
                    f"{what} needs cuBLASLt {version_string(spec.min_cublaslt)} or newer (its cuDNN engine calls it); "
                    f"{found}")
