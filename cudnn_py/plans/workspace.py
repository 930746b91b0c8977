"""Workspace memory cudnn_py allocates when the caller passes ``workspace=None``: one buffer per (device, stream),
grown on demand and reused across executes on that stream.

Ordering. A buffer is only ever used by executes enqueued on the stream it is keyed by, and it is allocated from
a stream-ordered allocator *on that stream*: torch's caching allocator (with that stream current) for torch
operands, cupy's memory pool (same) for cupy operands, else cuda.core's stream-ordered ``Device.allocate(size,
stream=...)``. So two streams never share a buffer, and when a buffer grows the old one can simply be dropped:
torch and cupy hand a freed block only to later allocations on the same stream, whose work is enqueued after
every execute that used the block; cuda.core frees it with ``cuMemFreeAsync`` on its allocation stream, which
orders the free after those executes as well. A call holds a reference to the buffer entry from the lookup until
its ``cudnnBackendExecute`` has been enqueued, so a buffer replaced by another thread meanwhile is freed only
after that enqueue.

Several threads on the same stream (each with its own default handle) do share that stream's buffer: the stream
serialises their executes, so this is safe.

Eviction. At most ``MAX_STREAMS`` buffers are kept per cache. The buffer of an older stream is evicted after a
device synchronisation: that stream may have been destroyed since, so no free may be ordered on it; after the
sync nothing enqueued so far still uses the buffer (cuda.core buffers are then freed on the legacy default
stream instead of their own).
"""
from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from typing import Any

MAX_STREAMS = 8
_log = logging.getLogger(__name__)


class WorkspaceCache:
    def __init__(self) -> None:
        # (placement device, stream) -> (size, pointer, owner). Entries are immutable tuples replaced whole, so the
        # hot path may read them without the lock.
        self._buffers: OrderedDict[tuple, tuple[int, int, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, size: int, framework: str, device: int | None, stream: int,
            device_hint: int | None = None) -> tuple[int, int, Any]:
        """An entry ``(size, pointer, owner)`` of at least ``size`` bytes for executes on ``stream``; keep a
        reference to it until the execute that uses it has been enqueued. ``device`` None means the caller's
        current device (``device_hint`` first: the handle's device)."""
        key = (device, stream)
        with self._lock:
            have = self._buffers.get(key)
            if have is not None and have[0] >= size:
                return have
            dev = device if device is not None else device_hint
            if dev is None:
                from ..backend.handle import current_device

                dev = current_device()
            owner = _allocate(framework, dev, stream, size)
            entry = (size, _ptr(owner), owner)
            _log.info("workspace: %d bytes at 0x%x from %s on device %d, stream 0x%x%s", size, entry[1],
                      _allocator_name(owner), dev, stream,
                      f" (replaces {have[0]} bytes)" if have is not None else "")
            # dropping `have` frees it stream-ordered on this stream (see the module docstring)
            self._buffers[key] = entry
            self._buffers.move_to_end(key)
            while len(self._buffers) > MAX_STREAMS:
                (_, old_stream), (old_size, _, old) = self._buffers.popitem(last=False)
                _log.info("workspace: evicting %d bytes of stream 0x%x (more than %d streams)", old_size, old_stream,
                          MAX_STREAMS)
                _retire(old, dev)
        return entry


# ------------------------------------------------------------------------------------------------- allocation
def _allocate(framework: str, device: int, stream: int, size: int) -> Any:
    if framework == "torch" and "torch" in sys.modules:
        return _torch_allocate(sys.modules["torch"], device, stream, size)
    if framework == "cupy" and "cupy" in sys.modules:
        return _cupy_allocate(sys.modules["cupy"], device, stream, size)
    return _cuda_core_allocate(device, stream, size)


def _torch_allocate(torch: Any, device: int, stream: int, size: int) -> Any:
    where = f"cuda:{device}"
    if torch.cuda.current_stream(device).cuda_stream == stream:  # the usual case: execute follows this stream
        return torch.empty(size, dtype=torch.uint8, device=where)
    # a handle bound to another stream: allocate with that stream current, so the block belongs to it
    s = torch.cuda.default_stream(device)
    if s.cuda_stream != stream:
        s = torch.cuda.ExternalStream(stream, device=where)
    with torch.cuda.stream(s):
        return torch.empty(size, dtype=torch.uint8, device=where)


def _cupy_allocate(cupy: Any, device: int, stream: int, size: int) -> Any:
    with cupy.cuda.Device(device):
        if cupy.cuda.get_current_stream().ptr == stream:
            return cupy.cuda.alloc(size)
        s = cupy.cuda.Stream.null if stream == 0 else cupy.cuda.ExternalStream(stream)
        with s:  # cupy's pool keeps one arena per stream: the block is reused on this stream only
            return cupy.cuda.alloc(size)


def _cuda_core_allocate(device: int, stream: int, size: int) -> Any:
    import cuda.core

    dev = cuda.core.Device(device)
    dev.set_current()
    return dev.allocate(size, stream=_cuda_core_stream(stream))


def _cuda_core_stream(stream: int) -> Any:
    import cuda.core

    if stream in (0, 1):  # 0 and cudaStreamLegacy
        return cuda.core.LEGACY_DEFAULT_STREAM
    if stream == 2:  # cudaStreamPerThread
        return cuda.core.PER_THREAD_DEFAULT_STREAM
    return cuda.core.Stream.from_handle(stream)


def _allocator_name(owner: Any) -> str:
    mod = type(owner).__module__
    return ("torch's caching allocator" if mod.startswith("torch") else "cupy's memory pool" if mod.startswith("cupy")
            else "cuda.core Device.allocate")


def _ptr(owner: Any) -> int:
    if hasattr(owner, "data_ptr"):
        return owner.data_ptr()
    if hasattr(owner, "ptr"):  # cupy MemoryPointer
        return int(owner.ptr)
    return int(owner.handle)


def _retire(owner: Any, device: int) -> None:
    """Drop an evicted buffer once nothing enqueued can still use it (see the module docstring)."""
    mod = type(owner).__module__
    if mod.startswith("torch"):
        sys.modules["torch"].cuda.synchronize(owner.device)
    elif mod.startswith("cupy"):
        with sys.modules["cupy"].cuda.Device(owner.device_id):
            sys.modules["cupy"].cuda.runtime.deviceSynchronize()
    else:
        import cuda.core

        cuda.core.Device(getattr(owner, "device_id", device)).sync()
        setter = getattr(owner, "set_deallocation_stream", None)
        if setter is not None:
            setter(cuda.core.LEGACY_DEFAULT_STREAM)
