"""The diagonal band mask: the composite from its definition, and the unified op."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference, scalar
from ...enums import diagonal_alignment


def _band_indices(shape: tuple) -> tuple:
    rows = np.arange(shape[-2]).reshape(-1, 1)
    cols = np.arange(shape[-1]).reshape(1, -1)
    return rows, cols


@reference("diagonal_band_mask")
def _diagonal_band_mask(node: Any, read: Read) -> np.ndarray:
    """Keep x[..., i, j] where j <= i + shift + R (right bound) and j > i + shift - L (left bound)."""
    x = read(node.inputs["X"])
    p = node.params
    rows, cols = _band_indices(x.shape)
    shift = x.shape[-1] - x.shape[-2] if p["diagonal_alignment"] is diagonal_alignment.BOTTOM_RIGHT else 0
    keep = np.ones((x.shape[-2], x.shape[-1]), dtype=bool)
    if p["right_bound"] is not None:
        keep &= cols <= rows + shift + p["right_bound"]
    if p["left_bound"] is not None:
        keep &= cols > rows + shift - p["left_bound"]
    return np.where(keep, x, float(p["fill_value"]))


@reference("diagonal_band_mask_op")
def _diagonal_band_mask_op(node: Any, read: Read) -> np.ndarray:
    """The unified op, one bound: left keeps j + L > i; right keeps i + R >= j (R = 0 without a BOUND)."""
    x = read(node.inputs["X"])
    fill = read(node.inputs["B"]).reshape(-1)[0]
    bound = scalar(read, node.inputs["BOUND"]) if "BOUND" in node.inputs else 0.0
    rows, cols = _band_indices(x.shape)
    keep = cols + bound > rows if node.params["side"] == "left" else rows + bound >= cols
    return np.where(keep, x, fill)
