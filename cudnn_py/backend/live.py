"""The registry of live cuDNN handles: the only ints cudnn_py passes to cuDNN as a ``cudnnHandle_t``.

cuDNN dereferences a handle without any check, so an arbitrary int — a typo, a stale value, a handle already
destroyed — is a segfault (``destroy_handle(1)``, ``get_stream(1)``, ``set_stream(1, 0)``, or an int in
``CUDNN_ATTR_OPERATIONGRAPH_HANDLE`` / ``CUDNN_ATTR_DEVICEPROP_HANDLE``: SIGSEGV on cuDNN 9.28). A handle is live
from the moment :func:`~cudnn_py.backend.handle.create_handle` (or the default-handle machinery) creates it until
:func:`~cudnn_py.backend.handle.destroy_handle` destroys it; a handle created by another library (torch, cupy, a C
extension) is used after :func:`~cudnn_py.backend.handle.adopt_handle` registers it.

This module only keeps the books (it imports nothing of the raw layer): ``handle`` registers and unregisters,
``descriptor`` checks HANDLE attributes against it.
"""
from __future__ import annotations

import threading
from typing import Any, NamedTuple


class LiveHandle(NamedTuple):
    ptr: int
    device: int | None  # None: not known (an adopted handle)
    owned: bool  # True: cudnn_py created it (or was handed ownership), so destroy_handle may destroy it
    origin: str  # "create_handle" | "adopt_handle"
    context: int | None = None  # the CUcontext current at cudnnCreate (cuda/context.py); None: not known


_live: dict[int, LiveHandle] = {}
_destroyed: set[int] = set()  # pointers destroyed by destroy_handle (for the error message; cuDNN may reuse them)
_lock = threading.Lock()


def register(ptr: int, device: int | None, *, owned: bool, origin: str, context: int | None = None) -> LiveHandle:
    rec = LiveHandle(int(ptr), device, owned, origin, context)
    with _lock:
        _live[rec.ptr] = rec
        _destroyed.discard(rec.ptr)
    return rec


def unregister(ptr: int, *, destroyed: bool) -> LiveHandle | None:
    with _lock:
        rec = _live.pop(int(ptr), None)
        if destroyed:
            _destroyed.add(int(ptr))
    return rec


def lookup(value: Any) -> LiveHandle | None:
    """The registry entry for ``value`` (a Handle or plain int), or None. Cheap: one dict lookup."""
    if getattr(value, "backend_handle", 0) is None:  # a cudnn_py Handle that destroy_handle cleared
        return None
    try:
        return _live.get(value.__index__())
    except (AttributeError, TypeError):
        return None


def why_not_live(value: Any) -> str:
    """Why ``value`` is not a live handle, in words (for the ValueError/DescriptorError raised by the callers)."""
    if value is None:
        return "it is None (no handle)"
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        return f"a handle is an int (a cudnnHandle_t), not {type(value).__name__}"
    v = value.__index__()
    if getattr(value, "backend_handle", 0) is None:
        return f"handle 0x{v:x} was destroyed by destroy_handle()"
    if v == 0:
        return "it is NULL (no handle)"
    if v in _destroyed:
        return f"handle 0x{v:x} was destroyed by destroy_handle()"
    return (f"0x{v:x} is not a handle created by cudnn_py.create_handle() (nor one registered with "
            "cudnn_py.backend.handle.adopt_handle())")


def live_handles() -> list[LiveHandle]:
    with _lock:
        return list(_live.values())
