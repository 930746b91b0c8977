"""The registry of reference functions (one per IR node kind) and the helpers they share."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import InvalidValueError

Read = Callable[[Any], np.ndarray]  # IR tensor -> its float64 value
# kind -> (run(node, read) -> the output value, check(node) -> why it is unsupported or None)
REFERENCES: dict[str, tuple] = {}


def reference(kind: str, check: Callable[[Any], str | None] | None = None):
    def register(fn: Callable[[Any, Read], np.ndarray]):
        if kind in REFERENCES:
            raise InvalidValueError(f"node kind {kind!r} has two reference functions")
        REFERENCES[kind] = (fn, check or (lambda node: None))
        return fn
    return register


class WithExtra(np.ndarray):
    """A result array carrying the values of a node's other outputs (uid -> array)."""

    extra: dict

    def __new__(cls, result: np.ndarray, extra: dict) -> WithExtra:
        obj = np.asarray(result).view(cls)
        obj.extra = extra
        return obj


def scalar(read: Read, t: Any) -> float:
    """The one value of a scalar operand (epsilon, momentum, a bound)."""
    return float(read(t).reshape(-1)[0])
