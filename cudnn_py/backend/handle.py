"""cuDNN handles and streams, as in the classic module: ``create_handle``, ``destroy_handle``, ``set_stream``,
``get_stream`` — plus one lazily created default handle per (thread, device).

cuDNN needs a current CUDA context; when the caller has none (no torch/cupy has touched the device yet), the
device's primary context is made current through cuda.core before ``cudnnCreate``.

Only live handles reach cuDNN (see :mod:`.live`): ``destroy_handle``, ``get_stream``, ``set_stream`` and the
HANDLE-typed descriptor attributes raise ``ValueError`` for any other int, instead of letting cuDNN dereference it
(a segfault). A handle is live from ``create_handle`` until ``destroy_handle``; destroying it twice raises instead
of double-freeing. A handle made by another library (torch's, cupy's, a C extension's) is used through
:func:`adopt_handle`, which registers it without taking ownership::

    h = cudnn_py.backend.handle.adopt_handle(torch_cudnn_handle_ptr)   # owned=False: destroy_handle(h) refuses
    ...
    cudnn_py.backend.handle.forget_handle(h)                           # before its owner destroys it
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

from ..cuda import context
from ..errors import CudaUnavailableError, InvalidValueError
from . import driver_standin, live, trace
from .api import error_for, lib


class Handle(int):
    """A cuDNN handle, as 1.32's ``cudnn.Handle``: ``backend_handle`` (the ``cudnnHandle_t``; None once destroyed),
    ``stream`` (the stream last set through :func:`set_stream`; 0 for a new handle) and ``device`` (the
    :class:`~cudnn_py.backend.device.DeviceInfo` of its GPU). ``Handle(backend_handle, ordinal, stream)`` wraps a
    handle made by another library, which cudnn_py then accepts (it is registered as adopted: :func:`destroy_handle`
    leaves it to its creator).

    Unlike 1.32's, it is also the raw pointer value (an int, as the classic API returned), so plain integer handles
    and Handle objects are accepted alike everywhere a handle is."""

    backend_handle: int | None
    stream: Any
    context: int | None  # the CUcontext it was created in (None: not known); see cuda/context.py
    _ordinal: int | None

    def __new__(cls, backend_handle: int | None, ordinal: int | None = None, stream: Any = None, *,
                context: int | None = None) -> Handle:
        ptr = 0 if backend_handle is None else int(backend_handle)
        h = super().__new__(cls, ptr)
        h.backend_handle = None if backend_handle is None else ptr
        h._ordinal = None if ordinal is None else int(ordinal)
        h.stream, h.context = stream, context
        if ptr and live.lookup(ptr) is None:  # a foreign handle wrapped by the caller: theirs to destroy
            live.register(ptr, h._ordinal, owned=False, origin="Handle", context=context)
        return h

    def __init__(self, backend_handle: int | None, ordinal: int | None = None, stream: Any = None, *,
                 context: int | None = None) -> None:
        super().__init__()

    @property
    def ordinal(self) -> int:
        """The CUDA device ordinal of the handle (the caller's current device for a handle wrapped without one)."""
        if self._ordinal is None:
            rec = live.lookup(self)
            self._ordinal = rec.device if rec is not None and rec.device is not None else current_device()
        return self._ordinal

    @property
    def device(self) -> Any:
        """The :class:`~cudnn_py.backend.device.DeviceInfo` of the handle's GPU."""
        from .device import device_info

        return device_info(self.ordinal)

    def __repr__(self) -> str:
        backend = "None" if self.backend_handle is None else f"0x{self.backend_handle:x}"
        return f"cudnn.Handle(backend_handle={backend}, cuda:{self._ordinal})"


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
    Returns the device ordinal in use. Without an NVIDIA driver (the deviceless stand-in loaded in its place) it
    says so, calling no driver."""
    lib()  # loads libcudnn, and the deviceless driver stand-in where no driver library loads
    if driver_standin.loaded():
        raise CudaUnavailableError(driver_standin.NO_GPU)
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
    """``cudnnCreate`` on the current device, or on ``device`` (a cudnn_py extension; the classic call takes no
    argument). With ``device`` given, the caller's current context (or none) is restored afterwards: the handle is
    made in ``device``'s primary context, and cudnn_py makes that context current whenever it uses the handle."""
    before = context.current()
    dev = ensure_context(device)
    ctx = context.current() or None
    try:
        out = ctypes.c_void_p()
        call = None if trace.active is None else trace.begin("cudnnCreate")
        status = lib().cudnnCreate(ctypes.byref(out))
        if call is not None:
            call.end(status, ptr=trace.hexptr(out.value))
    finally:
        if device is not None and before is not None and before != ctx:
            context.set_current(before)
    if status != 0:
        raise error_for(status, "cudnnCreate", detail=f"device {dev}")
    if not out.value:
        raise CudaUnavailableError(f"cudnnCreate succeeded but returned a NULL handle (device {dev})")
    live.register(out.value, dev, owned=True, origin="create_handle", context=ctx)
    return Handle(out.value, dev, 0, context=ctx)  # a new handle runs on the NULL stream


def placement_of(handle: Any) -> tuple[int | None, int | None]:
    """(device, CUDA context) of a handle, read from one registry record, so the pair cannot mix two states of a
    handle destroyed (or re-registered) by another thread in between. None: unknown (a handle adopted without a
    device); a handle the registry does not know answers from its own attributes."""
    rec = live.lookup(handle)
    if rec is not None:
        return rec.device, rec.context
    return getattr(handle, "_ordinal", None), getattr(handle, "context", None)


def device_of(handle: Any) -> int | None:
    """The device of a handle (None: unknown, as for a handle adopted without one)."""
    return placement_of(handle)[0]


def context_of(handle: Any) -> int | None:
    """The CUDA context a handle was created in (None: unknown)."""
    return placement_of(handle)[1]


def live_handle(handle: Any, what: str = "handle") -> int:
    """The pointer value of ``handle`` if it is live (created by :func:`create_handle` or adopted), else
    ``ValueError`` naming why not. ``what`` names the caller's argument in the message."""
    if live.lookup(handle) is None:
        raise InvalidValueError(f"{what}: {live.why_not_live(handle)}; cuDNN would dereference it")
    return handle.__index__()


def adopt_handle(ptr: Any, device: int | None = None, *, owned: bool = False) -> Handle:
    """Register a ``cudnnHandle_t`` created outside cudnn_py (by torch, cupy, a C extension) so that cudnn_py
    accepts it wherever it checks handles. cudnn_py cannot verify that ``ptr`` really is a live cuDNN handle: that
    is the caller's promise. With ``owned=False`` (the default) :func:`destroy_handle` refuses it — its creator
    destroys it, after :func:`forget_handle`; with ``owned=True`` cudnn_py may destroy it. Adopting a handle that is
    already live returns it unchanged."""
    if isinstance(ptr, bool) or not hasattr(ptr, "__index__"):
        raise InvalidValueError(f"adopt_handle: a handle is an int (a cudnnHandle_t), not {type(ptr).__name__}")
    p = ptr.__index__()
    if not 0 < p < 1 << 64:
        raise InvalidValueError(f"adopt_handle: {p:#x} is not a pointer value")
    rec = live.lookup(p)
    if rec is not None:
        return Handle(p, rec.device if rec.device is not None else device, context=rec.context)
    live.register(p, device, owned=owned, origin="adopt_handle")
    return Handle(p, device)


def forget_handle(handle: Any) -> None:
    """Unregister a live handle without destroying it (an adopted handle whose creator is about to destroy it)."""
    p = live_handle(handle, "forget_handle")
    live.unregister(p, destroyed=False)
    _drop_defaults(p)


def destroy_handle(handle: int) -> None:
    """``cudnnDestroy`` a handle made by :func:`create_handle`. Raises ``ValueError`` for anything else: an int that
    is no handle, one destroyed already (a double free), or an adopted handle cudnn_py does not own. A
    :class:`Handle` is cleared (``backend_handle`` and ``stream`` None); destroying a cleared one does nothing, as
    in 1.32."""
    if isinstance(handle, Handle) and handle.backend_handle is None:
        handle.stream = None
        return
    rec = live.lookup(handle)
    if rec is None:
        raise InvalidValueError(f"destroy_handle: {live.why_not_live(handle)}")
    if not rec.owned:
        raise InvalidValueError(f"destroy_handle: handle 0x{rec.ptr:x} was adopted (adopt_handle(owned=False)); its "
                                f"creator "
                         "destroys it — call forget_handle() first")
    if live.unregister(rec.ptr, destroyed=True) is None:  # another thread destroyed it meanwhile
        raise InvalidValueError(f"destroy_handle: {live.why_not_live(rec.ptr)}")
    call = None if trace.active is None else trace.begin("cudnnDestroy", handle=trace.hexptr(rec.ptr))
    with context.bound(rec.context):  # it frees device memory of the handle's own context
        status = lib().cudnnDestroy(rec.ptr)
    if call is not None:
        call.end(status)
    if status != 0:
        # still alive as far as we know
        live.register(rec.ptr, rec.device, owned=rec.owned, origin=rec.origin, context=rec.context)
        raise error_for(status, "cudnnDestroy")
    _drop_defaults(rec.ptr)
    if isinstance(handle, Handle):
        handle.backend_handle = handle.stream = None


def _drop_defaults(ptr: int) -> None:
    with _defaults_lock:
        for key, h in list(_defaults.items()):
            if int(h) == ptr:
                del _defaults[key]


# Called as hook(handle, stream) after every successful set_stream: the execute layer (plans/execute.py) keeps the
# stream it bound to each default handle and must hear of a set_stream it did not make (on default_handle(), say).
stream_set_hooks: list[Any] = []


def set_stream(handle: int, stream) -> None:
    """Bind ``stream`` (int, torch/cupy stream, or any ``__cuda_stream__`` object) to ``handle``. On a
    :func:`default_handle`, an execute without a handle binds the framework's current stream again: that is the
    stream such an execute runs on."""
    from ..interop import stream_ptr

    h = live_handle(handle, "set_stream")
    s = stream_ptr(stream)
    call = None if trace.active is None else trace.begin("cudnnSetStream", handle=trace.hexptr(h),
                                                         stream=trace.hexptr(s))
    status = lib().cudnnSetStream(h, s)
    if call is not None:
        call.end(status)
    if status != 0:
        raise error_for(status, "cudnnSetStream")
    if isinstance(handle, Handle):
        handle.stream = s
    for hook in stream_set_hooks:
        hook(h, s)


def get_stream(handle: int) -> int:
    h = live_handle(handle, "get_stream")
    out = ctypes.c_void_p()
    status = lib().cudnnGetStream(h, ctypes.byref(out))
    if status != 0:
        raise error_for(status, "cudnnGetStream")
    if isinstance(handle, Handle):
        handle.stream = out.value or 0
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
