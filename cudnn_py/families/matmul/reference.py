"""Matmul."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference


@reference("matmul")
def _matmul(node: Any, read: Read) -> np.ndarray:
    """A @ B; grouped batch dims (a divisor of the output's, attention's GQA) repeat their groups. A K override
    (per-batch lengths, attention's padding) contracts over the first K[b] terms only; past an M / N override the
    rows / columns are not computed by cuDNN (undefined), here they are left as computed."""
    a, b = read(node.inputs["A"]), read(node.inputs["B"])
    batch = [int(d) for d in node.outputs["C"].dim[:-2]]
    if a.ndim == b.ndim == len(batch) + 2:
        a, b = _grouped(a, batch), _grouped(b, batch)
    if "K_OVERRIDE" in node.inputs and a.ndim >= 3:
        lengths = read(node.inputs["K_OVERRIDE"]).reshape((-1,) + (1,) * (a.ndim - 1))
        terms = np.arange(a.shape[-1])
        a = np.where(terms.reshape((1,) * (a.ndim - 1) + (-1,)) < lengths, a, 0.0)
        b = np.where(terms.reshape((1,) * (b.ndim - 2) + (-1, 1)) < lengths, b, 0.0)
    return np.matmul(a, b)


def _grouped(x: np.ndarray, batch: list) -> np.ndarray:
    for axis, n in enumerate(batch):
        if x.shape[axis] not in (1, n):
            x = np.repeat(x, n // x.shape[axis], axis=axis)
    return x
