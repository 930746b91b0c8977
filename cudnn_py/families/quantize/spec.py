"""Block-scale quantize / dequantize: MX-style block scaling, one scale per block of
``block_size`` consecutive elements (MXFP8: FP8 values with an FP8_E8M0 scale per 32; NVFP4: FP4_E2M1 with an
FP8_E4M3 scale per 16).

* quantize(X) -> [Y, scale]: Y has X's dims, scale X's dims with the block axis (``axis``, default the last)
  divided by ``block_size``. ``axis`` and ``transpose`` only shape the inferred strides (the backend op has no
  such attribute): with ``transpose`` Y and scale are dense with the block axis fastest, the other axes in X's
  order.
* dequantize(X, descale) -> Y: ``block_size`` is a list, aligned to X's trailing axes ({1, 32}: blocks of 32 along
  the last axis); Y has X's dims and strides and must stay virtual - the backend fuses dequantize into the op that
  reads Y (a matmul), as in the frontend.

The backend has engines for these only on Blackwell (compute capability 10.x): the device gate refuses other GPUs
when planning starts, with a message naming the architecture.
"""
from __future__ import annotations

from typing import Any

from ..._generated.names import desc
from ...enums import data_type
from ...errors import InvalidTypeError, InvalidValueError, shape_error
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, fill_or_check_dims, int_at_least, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register
from ...ir.tensor import int_list

BLACKWELL = 100  # compute capability 10.0: the first GPUs with block-scale engines
# the backend kept the negative-scale attribute unset before 9.14 (the frontend's gate)
NEG_SCALE_MIN_VERSION = 91400


def _block_sizes(v: Any) -> list[int]:
    sizes = [int(b) for b in int_list(v, "block_size")]
    if not sizes:
        raise InvalidValueError("needs at least one block size")
    if any(b <= 0 for b in sizes):
        raise InvalidValueError(f"block sizes must be positive, got {sizes}")
    return sizes


def _strict_bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise InvalidTypeError(f"needs a bool, got {v!r}")
    return v


def block_axis_order(x_stride: list, rank: int, axis: int, transpose: bool) -> list[int]:
    """The stride order (0 = fastest) of quantize's outputs: X's, or with ``transpose`` the block axis first and
    the other axes in X's order after it."""
    order = layout.order_preserving_format(x_stride, rank)
    if not transpose:
        return order
    others = sorted((a for a in range(rank) if a != axis), key=lambda a: order[a])
    out = [0] * rank
    for rank_of, a in enumerate([axis] + others):
        out[a] = rank_of
    return out


def _fill(op: str, node: Node, t: Any, expected: list[int], order: list[int]) -> None:
    fill_or_check_dims(op, node, t, expected, "the expected")
    if not t.stride:
        t._infer_set("stride", layout.strides_from_order(t.dim, order))


def scale_dims(op: str, node: Node, x: Any, axis: int, block: int) -> list[int]:
    if int(x.dim[axis]) % block:
        raise shape_error(op, node.name, x, f"dim {axis} ({x.dim[axis]}) is not a multiple of block_size {block}")
    dims = [int(d) for d in x.dim]
    dims[axis] //= block
    return dims


def infer_quantize(node: Node, ctx: InferenceContext) -> None:
    op = "block_scale_quantize"
    x, y, scale = node.inputs["X"], node.outputs["Y"], node.outputs["SCALE"]
    require_dims(op, node, x)
    rank = len(x.dim)
    axis = node.params["axis"]
    axis = rank - 1 if axis is None else axis
    if not 0 <= axis < rank:
        raise shape_error(op, node.name, x, f"axis {node.params['axis']} is outside [0, {rank - 1}]")
    order = block_axis_order(list(x.stride), rank, axis, node.params["transpose"])
    _fill(op, node, y, [int(d) for d in x.dim], order)
    sdims = scale_dims(op, node, x, axis, node.params["block_size"])
    if scale.reordering_type.name == "F8_128x4":
        sdims = padded_to_tiles(op, node, x, sdims, axis)
    _fill(op, node, scale, sdims, order)
    if not scale.stride:
        scale._infer_set("stride", layout.strides_from_order(scale.dim, order))
    fill_data_types(node, ctx, x)


def padded_to_tiles(op: str, node: Node, x: Any, dims: list[int], axis: int) -> list[int]:
    """An F8_128x4 scale is stored in tiles of 128 rows by 4 blocks over X's last two axes: the block axis rounds
    up to a multiple of 4, the other one to a multiple of 128 (what cuDNN checks at finalize)."""
    rank = len(dims)
    if rank < 2 or axis < rank - 2:
        raise shape_error(op, node.name, x, f"an F8_128x4 scale needs the block axis among the last two of X's "
                          f"{rank} axes, got axis {axis}")
    other = 2 * rank - 3 - axis  # the other of the last two axes
    out = list(dims)
    out[axis] = -(-out[axis] // 4) * 4
    out[other] = -(-out[other] // 128) * 128
    return out


def _check_scale(op: str, node: Node, x: Any, scale: Any, needed: list[int], axis: int) -> None:
    if scale.reordering_type.name == "F8_128x4":
        needed = padded_to_tiles(op, node, x, needed, axis)
    if list(scale.dim) != needed:
        raise shape_error(op, node.name, scale, f"dims {list(scale.dim)} are not X's {list(x.dim)} divided by "
                          f"block_size {node.params['block_size']} (expected {needed})")


def dequantize_scale_dims(op: str, node: Node, x: Any, blocks: list[int]) -> list[int]:
    """X's dims divided by the block sizes aligned to its trailing axes."""
    rank = len(x.dim)
    if len(blocks) > rank:
        raise shape_error(op, node.name, x, f"block_size {blocks} has more entries than X has axes ({rank})")
    dims = [int(d) for d in x.dim]
    for i, b in enumerate(blocks, start=rank - len(blocks)):
        if dims[i] % b:
            raise shape_error(op, node.name, x, f"dim {i} ({dims[i]}) is not a multiple of its block size {b}")
        dims[i] //= b
    return dims


def dequantize_block_axis(rank: int, blocks: list[int]) -> int:
    """The block axis of a swizzled descale: the last axis with a block size other than 1 (else the last)."""
    aligned = list(enumerate(blocks, start=rank - len(blocks)))
    return next((i for i, b in reversed(aligned) if b != 1), rank - 1)


def infer_dequantize(node: Node, ctx: InferenceContext) -> None:
    op = "block_scale_dequantize"
    x, descale, y = node.inputs["X"], node.inputs["SCALE"], node.outputs["Y"]
    require_dims(op, node, x)
    require_dims(op, node, descale)
    blocks = node.params["block_size"]
    needed = dequantize_scale_dims(op, node, x, blocks)
    _check_scale(op, node, x, descale, needed, dequantize_block_axis(len(x.dim), blocks))
    if not y.is_virtual:
        raise shape_error(op, node.name, y, "the dequantized output must stay virtual: cuDNN fuses dequantize into "
                          "the op that reads it (e.g. a matmul); do not set_output(True) on it")
    _fill(op, node, y, [int(d) for d in x.dim], layout.order_preserving_format(list(x.stride), len(x.dim)))
    fill_data_types(node, ctx, x)
    if y.data_type is x.data_type and x.data_type in (data_type.FP8_E4M3, data_type.FP8_E5M2, data_type.FP4_E2M1):
        # the IR fallback gave Y the quantized type; a dequantized value is a compute-precision one
        y._infer_set("data_type", data_type.FLOAT)


BLOCK_SCALE_QUANTIZE = OpSpec(
    method="block_scale_quantize", kind="block_scale_quantize",
    inputs=(Port("X", "input"),), outputs=(Output("Y"), Output("SCALE", label="{node}::scale")),
    infer=infer_quantize,
    params=(Param("block_size", convert=int_at_least(1)),
            Param("axis", None, convert=int_at_least(None, optional=True)),
            Param("transpose", False, convert=_strict_bool)),
    order=("input", "block_size", "axis", "transpose", "compute_data_type", "name"),
    varargs=True, out_dims=True, returns_list=True,
    requires=(desc.OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR,),
    min_compute_capability=BLACKWELL,
    doc="block_scale_quantize(input, block_size, axis=None, transpose=False) -> [Y, scale]: one scale per block "
        "of block_size elements along axis (default the last); Y on the grid of its data type.")

BLOCK_SCALE_DEQUANTIZE = OpSpec(
    method="block_scale_dequantize", kind="block_scale_dequantize",
    inputs=(Port("X", "input"), Port("SCALE", "descale")), outputs=(Output("Y"),), infer=infer_dequantize,
    params=(Param("block_size", convert=_block_sizes), Param("is_negative_scale", False, convert=_strict_bool)),
    order=("input", "descale", "block_size", "is_negative_scale", "compute_data_type", "name"),
    varargs=True, out_dims=True,
    requires=(desc.OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR,),
    min_compute_capability=BLACKWELL,
    doc="block_scale_dequantize(input, descale, block_size, is_negative_scale=False) -> Y = X * descale per "
        "block (block_size aligned to X's trailing axes); Y must stay virtual.")
register(BLOCK_SCALE_QUANTIZE, BLOCK_SCALE_DEQUANTIZE)
