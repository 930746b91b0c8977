"""The registry of reference functions (one per IR node kind) and the helpers they share."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...registry import REFERENCE, Registry

Read = Callable[[Any], np.ndarray]  # IR tensor -> its float64 value
# kind -> (run(node, read) -> the output value, check(node) -> why it is unsupported or None); the families'
# reference modules fill it on first read (cudnn_py/registry.py)
REFERENCES: Registry[tuple] = Registry(REFERENCE, "reference function")


def reference(kind: str, check: Callable[[Any], str | None] | None = None):
    def register(fn: Callable[[Any, Read], np.ndarray]):
        REFERENCES.add(kind, (fn, check or (lambda node: None)))
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
