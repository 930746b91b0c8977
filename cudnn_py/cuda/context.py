"""The CUDA context a cuDNN call runs in, read and set through the driver API (cuda.bindings: ``driver.py``).

A cuDNN handle belongs to the context that was current when ``cudnnCreate`` made it, and cuDNN loads kernels into
and launches them on *the current* context. A graph built for device 1 and executed while device 0's context is
current would launch on the wrong GPU. So cudnn_py records each handle's context and, for planning and execution,
makes it current (:class:`bound`) when another one is, restoring the caller's context afterwards — the device
guard torch puts around its own ops.

Reading the current context costs one driver call (about 0.15 us through cuda.bindings, see ``driver.py``): the
execute fast path makes it on every call (inlined, see :func:`reader`) in a process that sees several devices
(:func:`several_devices`), and only a context other than the handle's leaves the fast path.

Without a driver that cuda.bindings can use (or without cuda-bindings; the CPU test stub of ``tests/support``
exports only the six symbols cuDNN's engines need) every function here reports "unknown" (None) and nothing is
switched: there is nothing to execute on then.
"""
from __future__ import annotations

from typing import Any

from ..errors import CudaDriverError
from . import driver

_driver: Any = None  # cuda.bindings' driver once looked up; False: none usable


def _lib() -> Any:
    global _driver
    if _driver is None:
        _driver = driver.bindings() or False
    return _driver


def reader() -> Any:
    """cuda.bindings' ``cuCtxGetCurrent`` (``() -> (CUresult, CUcontext)``; None without a driver), for callers
    that inline reading the current context (the execute fast path)."""
    lib = _lib()
    return lib.cuCtxGetCurrent if lib else None


_several_devices: bool | None = None


def several_devices() -> bool:
    """Whether this process sees more than one CUDA device (True when that cannot be told yet). With one device
    there is one primary context, the one every handle cudnn_py makes belongs to, and a thread with no current
    context gets it from its first execute, which always takes the slow path: the execute fast path then skips
    reading the current context (its only per-call cost, ~0.15 us). Contexts a caller creates themselves
    (cuCtxCreate) are not covered then; cudnn_py never creates one."""
    global _several_devices
    if _several_devices is None:
        lib = _lib()
        if not lib:
            return True
        err, n = lib.cuDeviceGetCount()
        if int(err) != 0:  # before cuInit: ask again next time
            return True
        _several_devices = int(n) > 1
    return _several_devices


def current() -> int | None:
    """The current ``CUcontext`` of this thread (0: none), or None without a driver."""
    get = reader()
    if get is None:
        return None
    err, ctx = get()
    return int(ctx) if int(err) == 0 else 0


def current_id() -> int | None:
    """The process-unique id of this thread's current context (``cuCtxGetId``, CUDA >= 12.0), or None: no driver,
    no current context, or a driver without ids. What per-context caches key on: a context's address can be
    reused by one created after it is destroyed, its id cannot (a stream or module of the old one would be used)."""
    ctx = current()
    if not ctx:
        return None
    try:
        err, ctx_id = _lib().cuCtxGetId(ctx)
    except RuntimeError:  # "function not found": a driver older than CUDA 12.0
        return None
    return int(ctx_id) if int(err) == 0 else None


def set_current(ctx: int) -> None:
    """Make ``ctx`` (0: none) current on this thread."""
    lib = _lib()
    if not lib:
        return
    (err,) = lib.cuCtxSetCurrent(ctx or 0)
    if int(err) != 0:
        raise CudaDriverError(f"cuCtxSetCurrent(0x{ctx:x}) failed with CUresult {int(err)}")


def device_of_current() -> int | None:
    """The device ordinal of the current context, or None (no driver, no current context)."""
    lib = _lib()
    if not lib:
        return None
    err, dev = lib.cuCtxGetDevice()
    return int(dev) if int(err) == 0 else None


def device_of_pointer(ptr: int) -> int | None:
    """The device whose memory ``ptr`` points into, or None where that does not bind it to one device: no driver,
    not device memory the driver knows, or managed memory (usable from every device)."""
    lib = _lib()
    if not lib or not ptr:
        return None
    attribute = lib.CUpointer_attribute
    err, managed = lib.cuPointerGetAttribute(attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr)
    if int(err) != 0 or managed:
        return None
    err, ordinal = lib.cuPointerGetAttribute(attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    return int(ordinal) if int(err) == 0 else None


class bound:
    """``with bound(ctx):`` makes ``ctx`` current if another context (or none) is, and restores the caller's state on
    exit — none current included, so that the CUDA runtime's notion of the thread's device (torch's
    ``current_device()``) is the same after the call as before. ``ctx`` None (not known) changes nothing."""

    __slots__ = ("ctx", "before")

    def __init__(self, ctx: int | None):
        self.ctx: int | None = ctx
        self.before: int | None = None  # the context to restore; None: nothing was switched

    def __enter__(self) -> bound:
        if self.ctx:
            now = current()
            if now is not None and now != self.ctx:
                set_current(self.ctx)
                self.before = now
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.before is not None:
            set_current(self.before)
        self.before = None
