"""Reductions (plain and grouped), in float64."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference
from ...enums import reduction_mode

_REDUCE: dict[Any, Callable[[np.ndarray, tuple], np.ndarray]] = {
    reduction_mode.ADD: lambda x, ax: np.sum(x, axis=ax, keepdims=True),
    reduction_mode.MUL: lambda x, ax: np.prod(x, axis=ax, keepdims=True),
    reduction_mode.MIN: lambda x, ax: np.min(x, axis=ax, keepdims=True),
    reduction_mode.MAX: lambda x, ax: np.max(x, axis=ax, keepdims=True),
    reduction_mode.AMAX: lambda x, ax: np.max(np.abs(x), axis=ax, keepdims=True),
    reduction_mode.AVG: lambda x, ax: np.mean(x, axis=ax, keepdims=True),
    reduction_mode.NORM1: lambda x, ax: np.sum(np.abs(x), axis=ax, keepdims=True),
    reduction_mode.NORM2: lambda x, ax: np.sqrt(np.sum(x * x, axis=ax, keepdims=True)),
    reduction_mode.MUL_NO_ZEROS: lambda x, ax: np.prod(np.where(x == 0, 1.0, x), axis=ax, keepdims=True),
}


@reference("reduction", lambda node: None if node.params.get("mode") in _REDUCE else
           f"reduction mode {node.params.get('mode')}")
def _reduction(node: Any, read: Read) -> np.ndarray:
    x = read(node.inputs["X"])
    y_dim = node.outputs["Y"].dim
    for axis, (xd, yd) in enumerate(zip(x.shape, y_dim)):
        if yd not in (1, xd):  # a grouped reduction: consecutive groups of xd / yd reduce to one
            x = x.reshape(x.shape[:axis] + (int(yd), xd // int(yd)) + x.shape[axis + 1:])
            x = _REDUCE[node.params["mode"]](x, (axis + 1,)).squeeze(axis + 1)
    axes = tuple(i for i, (xd, yd) in enumerate(zip(x.shape, y_dim)) if yd == 1 and xd != 1)
    y = _REDUCE[node.params["mode"]](x, axes) if axes else x.copy()
    return -y if node.params.get("negated_by_engine") else y  # attention's dSink: the fused engine negates
