"""The CUDA context a cuDNN call runs in, read and set through the driver API (``libcuda.so.1``, via ctypes).

A cuDNN handle belongs to the context that was current when ``cudnnCreate`` made it, and cuDNN loads kernels into
and launches them on *the current* context. A graph built for device 1 and executed while device 0's context is
current would launch on the wrong GPU. So cudnn_py records each handle's context and, for planning and execution,
makes it current (:class:`bound`) when another one is, restoring the caller's context afterwards — the device
guard torch puts around its own ops.

Reading the current context costs one ctypes call (about 0.25 us): the execute fast path does it on every call
through a per-thread :func:`probe`, and only a context other than the handle's leaves the fast path.

Without a driver that exports these entry points (the CPU test stub of ``tests/support`` exports only the six
symbols cuDNN's engines need) every function here reports "unknown" (None) and nothing is switched: there is
nothing to execute on then.
"""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8

_driver: Any = None  # the ctypes libcuda once looked up; False: none with these entry points
_tls = threading.local()


def _lib() -> Any:
    global _driver
    if _driver is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            for name in ("cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxGetDevice", "cuPointerGetAttribute"):
                getattr(lib, name)
        except (OSError, AttributeError):
            _driver = False
        else:
            lib.cuCtxGetCurrent.argtypes = [ctypes.c_void_p]
            lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
            lib.cuCtxGetDevice.argtypes = [ctypes.c_void_p]
            lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
            for f in (lib.cuCtxGetCurrent, lib.cuCtxSetCurrent, lib.cuCtxGetDevice, lib.cuPointerGetAttribute):
                f.restype = ctypes.c_int
            _driver = lib
    return _driver


def _unknown() -> None:
    return None


def probe() -> Callable[[], int | None]:
    """This thread's reader of the current context: a callable returning the ``CUcontext`` value (0: none
    current) or None without a driver. Made once per thread (its result buffer is the thread's own)."""
    p = getattr(_tls, "probe", None)
    if p is None:
        lib = _lib()
        if not lib:
            p = _unknown
        else:
            buf = ctypes.c_void_p()
            addr, get = ctypes.addressof(buf), lib.cuCtxGetCurrent

            def p() -> int | None:
                return (buf.value or 0) if get(addr) == 0 else 0

        _tls.probe = p
    return p


def current() -> int | None:
    """The current ``CUcontext`` of this thread (0: none), or None without a driver."""
    return probe()()


def set_current(ctx: int) -> None:
    """Make ``ctx`` (0: none) current on this thread."""
    lib = _lib()
    if not lib:
        return
    status = lib.cuCtxSetCurrent(ctx or None)
    if status != 0:
        raise RuntimeError(f"cuCtxSetCurrent(0x{ctx:x}) failed with CUresult {status}")


def device_of_current() -> int | None:
    """The device ordinal of the current context, or None (no driver, no current context)."""
    lib = _lib()
    if not lib:
        return None
    out = ctypes.c_int()
    return out.value if lib.cuCtxGetDevice(ctypes.byref(out)) == 0 else None


def device_of_pointer(ptr: int) -> int | None:
    """The device whose memory ``ptr`` points into, or None where that does not bind it to one device: no driver,
    not device memory the driver knows, or managed memory (usable from every device)."""
    lib = _lib()
    if not lib or not ptr:
        return None
    managed = ctypes.c_uint()
    if lib.cuPointerGetAttribute(ctypes.byref(managed), _CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr) != 0 or managed.value:
        return None
    ordinal = ctypes.c_int()
    if lib.cuPointerGetAttribute(ctypes.byref(ordinal), _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) != 0:
        return None
    return ordinal.value


class bound:
    """``with bound(ctx):`` makes ``ctx`` current if another context is, and restores that one on exit. A thread
    with no current context keeps ``ctx`` afterwards (as the CUDA runtime binds one lazily); ``ctx`` None (not
    known) changes nothing."""

    __slots__ = ("ctx", "before")

    def __init__(self, ctx: int | None):
        self.ctx: int | None = ctx
        self.before: int | None = None

    def __enter__(self) -> bound:
        if self.ctx:
            now = current()
            if now is not None and now != self.ctx:
                set_current(self.ctx)
                self.before = now
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.before:  # 0: no context was current before; leave this one current
            set_current(self.before)
        self.before = None
