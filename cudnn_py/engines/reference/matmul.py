"""Matmul and reductions."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...enums import reduction_mode
from .registry import Read, reference

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


@reference("matmul")
def _matmul(node: Any, read: Read) -> np.ndarray:
    """A @ B; grouped batch dims (a divisor of the output's, attention's GQA) repeat their groups. The GEMM
    override ports only bound what is computed: the rows / columns past them are masked by the graph."""
    a, b = read(node.inputs["A"]), read(node.inputs["B"])
    batch = [int(d) for d in node.outputs["C"].dim[:-2]]
    if a.ndim == b.ndim == len(batch) + 2:
        a, b = _grouped(a, batch), _grouped(b, batch)
    return np.matmul(a, b)


def _grouped(x: np.ndarray, batch: list) -> np.ndarray:
    for axis, n in enumerate(batch):
        if x.shape[axis] not in (1, n):
            x = np.repeat(x, n // x.shape[axis], axis=axis)
    return x


@reference("reduction", lambda node: None if node.params.get("mode") in _REDUCE else
           f"reduction mode {node.params.get('mode')}")
def _reduction(node: Any, read: Read) -> np.ndarray:
    x = read(node.inputs["X"])
    y_dim = node.outputs["Y"].dim
    axes = tuple(i for i, (xd, yd) in enumerate(zip(x.shape, y_dim)) if yd == 1 and xd != 1)
    return _REDUCE[node.params["mode"]](x, axes) if axes else x.copy()
