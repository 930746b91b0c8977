"""One step at a time on a graph shared by threads (``pygraph``'s validate, build and planning steps)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


def one_at_a_time(method: _F) -> _F:
    """Run a step that moves the graph between phases holding the graph's re-entrant lock (``Graph._lock``), so
    that threads sharing a graph take turns: the second one finds the phase the first one reached (inference,
    the session and its descriptors, the plan list are each made once) instead of a half-made one. A step that
    calls another holds the lock once more (re-entrant). Execute's steady state (the bound fast path) takes no
    lock: it only reads what the steps made."""

    @functools.wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked  # type: ignore[return-value]
