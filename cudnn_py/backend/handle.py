"""cuDNN handles and streams, as in the classic module: ``create_handle``, ``destroy_handle``, ``set_stream``,
``get_stream`` — plus one lazily created default handle per (thread, device).

cuDNN needs a current CUDA context; when the caller has none (no torch/cupy has touched the device yet), the
device's primary context is made current through cuda.core before ``cudnnCreate``.
"""
from __future__ import annotations

import ctypes
import threading

from ..errors import CudaUnavailableError
from . import trace
from .api import error_for, lib


class Handle(int):
    """A ``cudnnHandle_t``. It *is* the raw pointer value (an int), as the classic API returns, and also knows
    the device it was created on."""

    device: int

    def __new__(cls, ptr: int, device: int) -> Handle:
        h = super().__new__(cls, ptr)
        h.device = device
        return h

    def __repr__(self) -> str:
        return f"Handle(0x{int(self):x}, device={self.device})"


def current_device() -> int:
    """The caller's current CUDA device (0 when nothing has chosen one)."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        return 0
    err, dev = runtime.cudaGetDevice()
    return int(dev) if int(err) == 0 else 0


def ensure_context(device: int | None = None) -> int:
    """Make sure a CUDA context is current on this thread; make ``device``'s primary context current if none is.
    Returns the device ordinal in use."""
    try:
        from cuda.bindings import driver
    except ImportError:  # without cuda-bindings we cannot help; cudnnCreate will report what is missing
        return device or 0
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:
        raise CudaUnavailableError(f"no usable CUDA driver: {e}") from e
    if int(err) != 0:
        raise CudaUnavailableError(f"cuInit failed with {err!r}: no usable NVIDIA GPU/driver on this machine")
    err, ctx = driver.cuCtxGetCurrent()
    if int(err) == 0 and int(ctx) != 0 and device is None:
        err, dev = driver.cuCtxGetDevice()
        return int(dev) if int(err) == 0 else 0
    dev = 0 if device is None else device
    from cuda.core import Device

    Device(dev).set_current()
    return dev


def create_handle(device: int | None = None) -> Handle:
    """``cudnnCreate`` on the current (or given) device."""
    dev = ensure_context(device)
    out = ctypes.c_void_p()
    call = None if trace.active is None else trace.begin("cudnnCreate")
    status = lib().cudnnCreate(ctypes.byref(out))
    if call is not None:
        call.end(status, ptr=trace.hexptr(out.value))
    if status != 0:
        raise error_for(status, "cudnnCreate", detail=f"device {dev}")
    return Handle(int(out.value or 0), dev)


def destroy_handle(handle: int) -> None:
    call = None if trace.active is None else trace.begin("cudnnDestroy", handle=trace.hexptr(int(handle)))
    status = lib().cudnnDestroy(int(handle))
    if call is not None:
        call.end(status)
    if status != 0:
        raise error_for(status, "cudnnDestroy")
    for key, h in list(_defaults.items()):
        if int(h) == int(handle):
            del _defaults[key]


def set_stream(handle: int, stream) -> None:
    """Bind ``stream`` (int, torch/cupy stream, or any ``__cuda_stream__`` object) to ``handle``."""
    from ..interop import stream_ptr

    s = stream_ptr(stream)
    call = None if trace.active is None else trace.begin(
        "cudnnSetStream", handle=trace.hexptr(int(handle)), stream=trace.hexptr(s))
    status = lib().cudnnSetStream(int(handle), s)
    if call is not None:
        call.end(status)
    if status != 0:
        raise error_for(status, "cudnnSetStream")


def get_stream(handle: int) -> int:
    out = ctypes.c_void_p()
    status = lib().cudnnGetStream(int(handle), ctypes.byref(out))
    if status != 0:
        raise error_for(status, "cudnnGetStream")
    return out.value or 0


_defaults: dict[tuple[int, int], Handle] = {}
_defaults_lock = threading.Lock()


def default_handle(device: int | None = None) -> Handle:
    """The handle cudnn_py uses when the caller passes none: one per (thread, device), created on first use.
    (cuDNN handles are not meant to be shared between threads.)"""
    dev = ensure_context(device) if device is None else device
    key = (threading.get_ident(), dev)
    h = _defaults.get(key)
    if h is None:
        with _defaults_lock:
            h = _defaults.get(key)
            if h is None:
                h = _defaults[key] = create_handle(dev)
    return h
