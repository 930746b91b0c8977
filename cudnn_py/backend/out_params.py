"""Per-thread out-parameters of the cuDNN call on the execute path (``cudnnGetStream``): it releases the GIL, so a
buffer shared between threads could be overwritten by another thread before it is read. One :class:`OutParams`
per thread, made by :func:`this_thread` on its first call and gone with the thread: a ``threading.local``, not a
dict keyed by thread id, since a new thread can get the id of one that ended and would find that thread's
buffers. (The driver calls of that path return their values: cuda.bindings', see ``cuda/driver.py``.)"""
from __future__ import annotations

import ctypes
import threading


class OutParams:
    """One thread's result buffers, each with its address (what the ctypes calls are given)."""

    __slots__ = ("stream", "stream_addr")

    def __init__(self) -> None:
        self.stream = ctypes.c_void_p()  # cudnnGetStream
        self.stream_addr = ctypes.addressof(self.stream)


per_thread = threading.local()  # .params: this thread's OutParams, once this_thread() made them


def this_thread() -> OutParams:
    p = getattr(per_thread, "params", None)
    if p is None:
        p = per_thread.params = OutParams()
    return p
