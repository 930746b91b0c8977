"""Per-thread out-parameters of the driver and cuDNN calls on the execute path (``cuCtxGetCurrent``,
``cuStreamIsCapturing``, ``cudnnGetStream``): those calls release the GIL, so a buffer shared between threads
could be overwritten by another thread before it is read. One :class:`OutParams` per thread, made on its first
call; the execute fast path reads :data:`by_thread` directly (one dict lookup per call for all three)."""
from __future__ import annotations

import ctypes
import threading


class OutParams:
    """One thread's result buffers, each with its address (what the ctypes calls are given)."""

    __slots__ = ("context", "context_addr", "status", "status_addr", "stream", "stream_addr")

    def __init__(self) -> None:
        self.context = ctypes.c_void_p()  # cuCtxGetCurrent
        self.context_addr = ctypes.addressof(self.context)
        self.status = ctypes.c_int(0)  # cuStreamIsCapturing
        self.status_addr = ctypes.addressof(self.status)
        self.stream = ctypes.c_void_p()  # cudnnGetStream
        self.stream_addr = ctypes.addressof(self.stream)


by_thread: dict[int, OutParams] = {}  # thread id -> its buffers (filled by this_thread())


def this_thread() -> OutParams:
    tid = threading.get_ident()
    p = by_thread.get(tid)
    if p is None:
        p = by_thread[tid] = OutParams()
    return p
