"""Block-scale quantize / dequantize, from the OCP Microscaling (MX) definition.

Quantize, per block of ``block_size`` elements along the block axis: amax = max |x|; with an FP8_E8M0 scale
(MXFP8 / MXFP4) the scale is 2^(floor(log2 amax) - emax), emax the exponent of the element type's largest normal
(E4M3 8, E5M2 15, E2M1 2), clamped to E8M0's [2^-127, 2^127] (2^-127 for an all-zero block); with an FP8_E4M3
scale (NVFP4) it is amax / max_normal rounded to E4M3. The elements are x / scale rounded to nearest-even on the
element type's grid (subnormals included) and saturated to ±max_normal. Dequantize multiplies each element by its
block's scale. Values are float64 on those grids; the buffers' dtypes store them exactly.

An F8_128x4-reordered scale is stored in tiles of 128 rows (the non-block axis of the last two) by 4 blocks: tile
(i, j) at (i * tiles_per_row + j) * 512, element (r, c) of a tile at (r % 32) * 16 + (r // 32) * 4 + c (the
cuBLAS / CUTLASS MX scale-factor atom). Padding entries carry the scale type's smallest value (the GPU's content
there is unspecified).

Not modelled (refused by the check): NEG_SCALE, whose semantics are not pinned down against a GPU yet (block
scaling runs only on Blackwell).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, WithExtra, reference
from ...enums import data_type
from .spec import dequantize_block_axis


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


def tile_positions(rows: int, cols: int) -> np.ndarray:
    """The F8_128x4 position of each (row, block) of a [rows, cols] scale (both padded to whole tiles)."""
    r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
    tile = (r // 128) * (cols // 4) + c // 4
    return tile * 512 + (r % 32) * 16 + (r % 128 // 32) * 4 + c % 4


def _tile_axes(rank: int, block_axis: int) -> tuple[int, int]:
    return 2 * rank - 3 - block_axis, block_axis  # (rows, blocks): the last two axes


def _is_dense(t: Any) -> bool:
    span = 1 + sum((int(d) - 1) * int(st) for d, st in zip(t.dim, t.stride))
    return span == int(np.prod([int(d) for d in t.dim]))


def swizzle(scales: np.ndarray, t: Any, block_axis: int) -> np.ndarray:
    """The array that, written through ``t``'s strides, leaves the F8_128x4 layout of ``scales`` in memory."""
    rows_axis, _ = _tile_axes(scales.ndim, block_axis)
    tiles = np.moveaxis(scales, (rows_axis, block_axis), (-2, -1))
    rows, cols = tiles.shape[-2:]
    memory = np.empty(tiles.shape[:-2] + (rows * cols,))
    memory[..., tile_positions(rows, cols).reshape(-1)] = tiles.reshape(tiles.shape[:-2] + (rows * cols,))
    flat = memory.reshape(-1)
    return np.lib.stride_tricks.as_strided(flat, tuple(t.dim), tuple(int(st) * flat.itemsize for st in t.stride))


def unswizzle(stored: np.ndarray, t: Any, block_axis: int) -> np.ndarray:
    """The logical scales of an F8_128x4 tensor read (through its strides) as ``stored``."""
    flat = np.zeros(int(np.prod(stored.shape)))
    np.lib.stride_tricks.as_strided(flat, stored.shape, tuple(int(st) * flat.itemsize for st in t.stride))[...] = stored
    rows_axis, _ = _tile_axes(stored.ndim, block_axis)
    dims = [int(d) for d in stored.shape]
    shape = [d for i, d in enumerate(dims) if i not in (rows_axis, block_axis)] + [dims[rows_axis], dims[block_axis]]
    rows, cols = shape[-2:]
    memory = flat.reshape(shape[:-2] + [rows * cols])
    tiles = memory[..., tile_positions(rows, cols).reshape(-1)].reshape(shape)
    return np.moveaxis(tiles, (-2, -1), (rows_axis, block_axis))


def _layout_problem(t: Any) -> str | None:
    name = t.reordering_type.name
    if name not in ("NONE", "F8_128x4"):
        return f"the {name} scale layout"
    if name == "F8_128x4" and not _is_dense(t):
        return f"an F8_128x4 scale with strides {list(t.stride)} that leave gaps"
    return None


def _why_not_quantize(node: Any) -> str | None:
    y, scale = node.outputs["Y"], node.outputs["SCALE"]
    if y.data_type not in GRIDS:
        return f"block_scale_quantize to {y.data_type} (the reference has FP8_E4M3, FP8_E5M2, FP4_E2M1)"
    if scale.data_type not in SCALE_TYPES:
        return f"block_scale_quantize scales of {scale.data_type} (the reference has FP8_E8M0, FP8_E4M3)"
    return _layout_problem(scale)


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
    scales = np.squeeze(scales, axis=axis + 1)
    if scale_t.reordering_type.name == "F8_128x4":
        smallest = 2.0 ** -127 if scale_t.data_type is data_type.FP8_E8M0 else 0.0
        padded = np.full(tuple(int(d) for d in scale_t.dim), smallest)
        padded[tuple(slice(0, n) for n in scales.shape)] = scales
        scales = swizzle(padded, scale_t, axis)
    return WithExtra(y.reshape(x.shape), {scale_t.uid: scales})


def _why_not_dequantize(node: Any) -> str | None:
    if node.params["is_negative_scale"]:
        return "block_scale_dequantize(is_negative_scale=True)"
    return _layout_problem(node.inputs["SCALE"])


@reference("block_scale_dequantize", _why_not_dequantize)
def _dequantize(node: Any, read: Read) -> np.ndarray:
    x, scale_t = read(node.inputs["X"]), node.inputs["SCALE"]
    scale = read(scale_t)
    blocks = node.params["block_size"]
    if scale_t.reordering_type.name == "F8_128x4":
        scale = unswizzle(scale, scale_t, dequantize_block_axis(x.ndim, blocks))
        needed = [d // b for d, b in zip(x.shape[x.ndim - len(blocks):], blocks)]
        scale = scale[(Ellipsis,) + tuple(slice(0, n) for n in needed)]
    for axis, b in enumerate(blocks, start=x.ndim - len(blocks)):
        scale = np.repeat(scale, b, axis=axis)
    return x * scale
