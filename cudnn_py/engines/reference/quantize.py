"""Block-scale quantize / dequantize, from the OCP Microscaling (MX) definition.

Quantize, per block of ``block_size`` elements along the block axis: amax = max |x|; with an FP8_E8M0 scale
(MXFP8 / MXFP4) the scale is 2^(floor(log2 amax) - emax), emax the exponent of the element type's largest normal
(E4M3 8, E5M2 15, E2M1 2), clamped to E8M0's [2^-127, 2^127] (2^-127 for an all-zero block); with an FP8_E4M3
scale (NVFP4) it is amax / max_normal rounded to E4M3. The elements are x / scale rounded to nearest-even on the
element type's grid (subnormals included) and saturated to ±max_normal. Dequantize multiplies each element by its
block's scale. Values are float64 on those grids; the buffers' dtypes store them exactly.

Not modelled (refused by the checks): the F8_128x4 swizzled scale layout and NEG_SCALE, whose semantics are not
pinned down against a GPU yet (block scaling runs only on Blackwell).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...enums import data_type
from .registry import Read, WithExtra, reference


class Grid:
    """A small float format: mantissa bits, the exponent of the smallest normal, the largest normal value."""

    def __init__(self, mantissa_bits: int, min_normal_exp: int, max_normal: float, max_exp: int):
        self.mantissa_bits, self.min_normal_exp, self.max_normal, self.max_exp = (
            mantissa_bits, min_normal_exp, max_normal, max_exp)

    def round(self, x: np.ndarray) -> np.ndarray:
        """Round to nearest, ties to even, saturating to ±max_normal."""
        a = np.abs(x)
        with np.errstate(divide="ignore"):
            e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
        quantum = np.exp2(np.maximum(e, self.min_normal_exp) - self.mantissa_bits)
        return np.sign(x) * np.minimum(np.rint(a / quantum) * quantum, self.max_normal)


GRIDS = {
    data_type.FP8_E4M3: Grid(3, -6, 448.0, 8),
    data_type.FP8_E5M2: Grid(2, -14, 57344.0, 15),
    data_type.FP4_E2M1: Grid(1, 0, 6.0, 2),
}
SCALE_TYPES = (data_type.FP8_E8M0, data_type.FP8_E4M3)


def block_scales(amax: np.ndarray, element: Grid, scale_type: Any) -> np.ndarray:
    if scale_type is data_type.FP8_E8M0:
        with np.errstate(divide="ignore"):
            e = np.floor(np.log2(np.where(amax > 0, amax, 2.0 ** -200))) - element.max_exp
        return np.exp2(np.clip(e, -127, 127))
    return GRIDS[data_type.FP8_E4M3].round(amax / element.max_normal)


def _blocked(x: np.ndarray, axis: int, block: int) -> np.ndarray:
    """x with the block axis split in (blocks, block) - the block elements on a new axis right after it."""
    shape = list(x.shape)
    return x.reshape(shape[:axis] + [shape[axis] // block, block] + shape[axis + 1:])


def _why_not_quantize(node: Any) -> str | None:
    y, scale = node.outputs["Y"], node.outputs["SCALE"]
    if y.data_type not in GRIDS:
        return f"block_scale_quantize to {y.data_type} (the reference has FP8_E4M3, FP8_E5M2, FP4_E2M1)"
    if scale.data_type not in SCALE_TYPES:
        return f"block_scale_quantize scales of {scale.data_type} (the reference has FP8_E8M0, FP8_E4M3)"
    if scale.reordering_type.name != "NONE":
        return f"the {scale.reordering_type.name} scale layout"
    return None


@reference("block_scale_quantize", _why_not_quantize)
def _quantize(node: Any, read: Read) -> np.ndarray:
    x = read(node.inputs["X"])
    y_t, scale_t = node.outputs["Y"], node.outputs["SCALE"]
    axis = node.params["axis"]
    axis = x.ndim - 1 if axis is None else axis
    block = node.params["block_size"]
    element = GRIDS[y_t.data_type]
    blocks = _blocked(x, axis, block)
    scales = block_scales(np.max(np.abs(blocks), axis=axis + 1, keepdims=True), element, scale_t.data_type)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = element.round(np.where(scales > 0, blocks / scales, 0.0))
    return WithExtra(y.reshape(x.shape), {scale_t.uid: np.squeeze(scales, axis=axis + 1)})


def _why_not_dequantize(node: Any) -> str | None:
    if node.params["is_negative_scale"]:
        return "block_scale_dequantize(is_negative_scale=True)"
    if node.inputs["SCALE"].reordering_type.name != "NONE":
        return f"the {node.inputs['SCALE'].reordering_type.name} scale layout"
    return None


@reference("block_scale_dequantize", _why_not_dequantize)
def _dequantize(node: Any, read: Read) -> np.ndarray:
    x, scale = read(node.inputs["X"]), read(node.inputs["SCALE"])
    blocks = node.params["block_size"]
    for axis, b in enumerate(blocks, start=x.ndim - len(blocks)):
        scale = np.repeat(scale, b, axis=axis)
    return x * scale
