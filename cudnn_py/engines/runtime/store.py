"""Where compiled cubins are kept between compiles: get / put bytes by key.

This session keeps them **in memory only** (:class:`MemoryCubinStore`, one per process): a new process compiles
again (about 0.1-0.4 s per kernel variant with the pip NVRTC). A disk store under the cache home, with the trust
rules of the hardened cache store (owner, mode and marker checks, keyed integrity), is meant to implement this
same interface later; nothing else changes then. A store must treat what it returns as untrusted bytes only if it
cannot vouch for them: the loader (``modules.py``) runs whatever cubin the store answers.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol


class CubinStore(Protocol):
    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...


class MemoryCubinStore:
    """A bounded in-process map (least recently used dropped first)."""

    def __init__(self, capacity: int = 512) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)
            return data

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self._items[key] = bytes(data)
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


STORE: CubinStore = MemoryCubinStore()
