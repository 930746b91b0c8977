"""Build steps run with the cyclic garbage collector paused (``pygraph``'s validate and build steps)."""
from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])
_gc_lock = threading.Lock()
_gc_paused = [0, False]  # [builds in progress, whether the collector was on when the first one began]


def without_gc(method: _F) -> _F:
    """Run a build step with the cyclic garbage collector paused. Lowering a graph allocates thousands of small
    objects, and each collection it triggers walks the young ones; in a process with a large heap (torch's), an
    occasional full collection lands inside a build (an attention build's validate ranged 4-19 ms on the H200).
    Nothing a build makes is cyclic garbage that must go at once. Nested and concurrent builds share one pause;
    the collector is switched back on by the last one to finish, and only if it was on when the first began."""

    @functools.wraps(method)
    def paused(*args: Any, **kwargs: Any) -> Any:
        with _gc_lock:
            if _gc_paused[0] == 0:
                _gc_paused[1] = gc.isenabled()
                gc.disable()
            _gc_paused[0] += 1
        try:
            return method(*args, **kwargs)
        finally:
            with _gc_lock:
                _gc_paused[0] -= 1
                if _gc_paused[0] == 0 and _gc_paused[1]:
                    gc.enable()

    return paused  # type: ignore[return-value]
