"""Workspace memory cudnn_py allocates when the caller passes none: one buffer per (owner, device), grown on
demand and reused across executes. Allocated through torch when torch is already in use (its caching allocator
and stream semantics), else through cuda.core."""
from __future__ import annotations

import sys
from typing import Any


class WorkspaceCache:
    def __init__(self) -> None:
        self._buffers: dict[int, tuple[int, Any]] = {}  # device -> (size, owner object)

    def get(self, size: int, device: int) -> int:
        """A device pointer to at least ``size`` bytes on ``device`` (0 for size 0)."""
        if size <= 0:
            return 0
        have = self._buffers.get(device)
        if have is not None and have[0] >= size:
            return _ptr(have[1])
        buf = _allocate(size, device)
        self._buffers[device] = (size, buf)
        return _ptr(buf)


def _allocate(size: int, device: int) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.empty(size, dtype=torch.uint8, device=f"cuda:{device}")
    from cuda.core import Device

    dev = Device(device)
    dev.set_current()
    return dev.allocate(size)


def _ptr(buf: Any) -> int:
    if hasattr(buf, "data_ptr"):
        return buf.data_ptr()
    return int(buf.handle)
