"""The least-recently-used map behind the process's planning caches (heuristics answers, plan JSON): an
``OrderedDict`` whose lookups and stores hold one lock (graphs are planned from several threads)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class LruCache(OrderedDict):
    """Oldest first; :meth:`lookup` makes an entry the newest, :meth:`store` drops the oldest past ``size``."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def lookup(self, key: Any) -> Any:
        """The value of ``key`` (None: none), now the most recently used."""
        with self.lock:
            value = self.get(key)
            if value is not None:
                self.move_to_end(key)
        return value

    def store(self, key: Any, value: Any, size: int) -> None:
        with self.lock:
            self[key] = value
            while len(self) > size:
                self.popitem(last=False)

    def drop(self, key: Any) -> None:
        with self.lock:
            self.pop(key, None)

    def empty(self) -> None:
        with self.lock:
            self.clear()
