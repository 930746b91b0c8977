"""Attention masks: the diagonal band mask, SDPA's causal and sliding-window masks.

``diagonal_band_mask(input, left_bound=None, right_bound=None, ...)`` keeps ``input[..., i, j]`` (row i, column j
of the last two axes) where the column lies in the band around the diagonal and writes ``fill_value`` elsewhere:

* ``right_bound`` R keeps ``j <= i + shift + R`` (R = 0 is the causal mask);
* ``left_bound`` L keeps ``j > i + shift - L`` (a sliding window of L columns);
* ``shift`` is 0 for ``diagonal_alignment.TOP_LEFT`` and ``s_kv - s_q`` for ``BOTTOM_RIGHT``.

It is a composite: cuDNN >= 9.21 lowers it to one OPERATION_DIAGONAL_BAND_MASK descriptor ("unified"); the
decompose pass otherwise expands it, as the frontend does, into GEN_INDEX / ADD / CMP / BINARY_SELECT pointwise
nodes with virtual intermediates ("composite"), with FLOAT index arithmetic. ``implementation`` (AUTO / COMPOSITE /
UNIFIED) chooses. This is
a cudnn_py extension of the classic surface (the official frontend keeps the op internal to SDPA).
"""
from __future__ import annotations

import math
from typing import Any

from ..._generated.names import desc
from ...enums import attention_implementation, data_type, diagonal_alignment
from ...errors import InvalidValueError, shape_error
from ...ir.inference import InferenceContext, fill_data_types, int_at_least, like_input, member, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register

UNIFIED_DESCRIPTOR = desc.OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR
# The frontend uses the unified op from 9.21.0 on although the descriptor exists since 9.20.
UNIFIED_MIN_VERSION = 92100


def infer(node: Node, ctx: InferenceContext) -> None:
    op = "diagonal_band_mask"
    x, y = node.inputs["X"], node.outputs["Y"]
    require_dims(op, node, x)
    if len(x.dim) < 2:
        raise shape_error(op, node.name, x, f"needs rank >= 2 (rows and columns last), got dims {list(x.dim)}")
    like_input(op, node, y, x)
    fill_data_types(node, ctx, x)


def _finish(params: dict[str, Any]) -> None:
    if params["left_bound"] is None and params["right_bound"] is None:
        raise InvalidValueError("diagonal_band_mask(): give left_bound, right_bound or both")
    if params["left_bound"] == 0:
        raise InvalidValueError("diagonal_band_mask(): left_bound 0 masks every element; use left_bound >= 1")


def shift_of(node: Node) -> int:
    """The column shift of the band's diagonal: 0 (TOP_LEFT) or s_kv - s_q (BOTTOM_RIGHT)."""
    if node.params["diagonal_alignment"] is diagonal_alignment.BOTTOM_RIGHT:
        dims = node.inputs["X"].dim
        return int(dims[-1]) - int(dims[-2])
    return 0


def use_unified(node: Node, available: Any) -> bool:
    """The implementation the options and the running cuDNN choose (``available(feature, at_least)``)."""
    impl = node.params["implementation"]
    if impl is attention_implementation.UNIFIED:
        return True
    if impl is attention_implementation.COMPOSITE:
        return False
    return bool(available(UNIFIED_DESCRIPTOR, UNIFIED_MIN_VERSION))


def expand(node: Node, rw: Any, options: Any) -> bool:
    """Replace the mask by the unified op(s) or by the composite chain (compare indices, select -inf). Right
    bound first, then left bound, as the frontend applies them; BOTTOM_RIGHT's shift is folded into the bounds
    (the shapes are static)."""
    x, y = node.inputs["X"], node.outputs["Y"]
    shift = shift_of(node)
    right, left, fill = node.params["right_bound"], node.params["left_bound"], float(node.params["fill_value"])
    if use_unified(node, options.available):
        current = x
        if right is not None:
            bound = shift + right
            current = rw.diagonal_band_mask_op(current, fill, bound if bound else None, "right",
                                               out=y if left is None else None)
        if left is not None:
            rw.diagonal_band_mask_op(current, fill, float(left - shift), "left", out=y)
        return True
    # FLOAT indices (exact below 2**24): on cuDNN 9.19 / H200 a pointwise graph with INT32 GEN_INDEX outputs finds no
    # engine, while the same chain in FLOAT runs and matches the reference (probe of 2026-12-01)
    rank, f32 = len(x.dim), data_type.FLOAT
    row = rw.gen_index(x, rank - 2, compute_data_type=f32, out_data_type=f32)
    col = rw.gen_index(x, rank - 1, compute_data_type=f32, out_data_type=f32)
    current = x
    if right is not None:
        current = _composite_right(rw, current, row, col, fill, shift + right, y if left is None else None)
    if left is not None:
        _composite_left(rw, current, row, col, fill, float(left - shift), y)
    return True


def _composite_right(rw: Any, x: Any, row: Any, col: Any, fill: float, bound: int, out: Any) -> Any:
    """Keep j <= i + bound: row (+ bound) >= col."""
    f32 = data_type.FLOAT
    limit = row if bound == 0 else rw.add(row, float(bound), compute_data_type=f32, out_data_type=f32)
    keep = rw.cmp_ge(limit, col, compute_data_type=f32, out_data_type=data_type.BOOLEAN)
    return rw.binary_select(x, fill, keep, compute_data_type=data_type.FLOAT, out=out)


def _composite_left(rw: Any, x: Any, row: Any, col: Any, fill: float, bound: float, out: Any) -> Any:
    """Keep j + bound > i: col + bound > row (a FLOAT bound, as the frontend's)."""
    f32 = data_type.FLOAT
    start = rw.add(col, bound, compute_data_type=f32, out_data_type=f32)
    keep = rw.cmp_gt(start, row, compute_data_type=f32, out_data_type=data_type.BOOLEAN)
    return rw.binary_select(x, fill, keep, compute_data_type=f32, out=out)


def _side(v: Any) -> str:
    if v not in ("left", "right"):
        raise InvalidValueError(f"side must be 'left' or 'right', got {v!r}")
    return v


# One OPERATION_DIAGONAL_BAND_MASK: the unified form, one bound per op. BOUND is the left bound (FLOAT scalar,
# keeps j + L > i, comparison CMP_GT) or the right bound's shift (INT32 scalar, absent for 0: keeps i + R >= j,
# comparison CMP_GE); B is the fill value.
DIAGONAL_BAND_MASK_OP = OpSpec(
    method="diagonal_band_mask_op", kind="diagonal_band_mask_op", public=False,
    inputs=(Port("X", "input"), Port("B", "fill"), Port("BOUND", "bound", optional=True)),
    outputs=(Output("Y"),), infer=infer, params=(Param("side", convert=_side),),
    order=("input", "fill", "bound", "side", "name", "compute_data_type"),
    requires=(UNIFIED_DESCRIPTOR,), min_version=UNIFIED_MIN_VERSION,
    lowered_rank=4,  # cuDNN 9.28: "xPort.tensor.getNbDims() != 4" otherwise
    doc="The unified diagonal band mask: one OPERATION_DIAGONAL_BAND_MASK descriptor (internal).",
)


DIAGONAL_BAND_MASK = OpSpec(
    method="diagonal_band_mask", kind="diagonal_band_mask", decomposed=True,
    inputs=(Port("X", "input"),), outputs=(Output("Y"),), infer=infer,
    params=(Param("left_bound", None, convert=int_at_least(0, optional=True)),
            Param("right_bound", None, convert=int_at_least(0, optional=True)),
            Param("diagonal_alignment", diagonal_alignment.TOP_LEFT, convert=member(diagonal_alignment)),
            Param("fill_value", -math.inf, convert=float),
            Param("implementation", attention_implementation.AUTO, convert=member(attention_implementation))),
    order=("input", "left_bound", "right_bound", "diagonal_alignment", "fill_value", "implementation", "name",
           "compute_data_type"),
    finish=_finish, expand=expand,
    requires=(),  # always expanded: the ops it expands to carry the gates
    doc=__doc__ or "",
)
register(DIAGONAL_BAND_MASK, DIAGONAL_BAND_MASK_OP)
