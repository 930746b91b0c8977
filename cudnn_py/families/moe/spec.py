"""Mixture-of-experts grouped matmul.

Shapes: token [1, T, K] (rows sorted by expert), weight [E, K, N], first_token_offset [E, 1, 1] (int; expert e
owns the rows from its offset up to the next expert's, the last expert up to the end).

* forward, mode NONE: Output[r] = token[r] @ weight[e(r)];
  GATHER: Output[r] = token[token_index[r]] @ weight[e(r)], the expert ranges over the output rows
  (Output has token_index.dim[1] rows); SCATTER: Output[token_index[r] * top_k + token_ks[r]] = token[r] @
  weight[e(r)], writing each expert-sorted row back to its (token, k-th choice) slot; Output has the token rows.
  (The official frontend 1.32's own MoE kernel maps rows so: ``moe_scatter_row`` in its
  ``cudnn/gemm/frost/tile_helpers.py``; token_ks are INT32 slot numbers, not routing weights.)
* first_token_offset, token_index and token_ks are INT32 (the backend reads them as such).
* backward: DWeight[e] = token[rows of e]ᵀ @ doutput[rows of e], DWeight [E, K, N] column-major per expert.

Both default their compute type to FLOAT (the classic signature's default, not the graph's). Arguments a mode
does not lower (token_index outside GATHER/SCATTER, token_ks / top_k outside SCATTER) are refused, not ignored;
the frontend's COMBINE mode has no backend counterpart in cuDNN 9.28 and is refused.
"""
from __future__ import annotations

from typing import Any

from ..._generated.names import desc
from ...enums import data_type, moe_grouped_matmul_mode
from ...errors import InvalidTypeError, NotImplementedOptionError, shape_error
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, fill_or_check_dims, int_at_least, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register

# The frontend's own MoE tests need cuDNN 9.18 (test_moe_grouped_matmul.py), although the
# descriptor exists since 9.15; we gate on the release its tests vouch for.
MOE_MIN_VERSION = 91800
MOE_BWD_MIN_CUBLASLT = 130500  # the backward engine calls cuBLASLt; the frontend's test probes for 13.5
_MODE = moe_grouped_matmul_mode


def _mode(v: Any) -> Any:
    if not isinstance(v, _MODE):
        raise InvalidTypeError(f"needs a moe_grouped_matmul_mode member, got {v!r}")
    if v is _MODE.COMBINE:
        raise NotImplementedOptionError("moe_grouped_matmul(mode=moe_grouped_matmul_mode.COMBINE): cuDNN's backend "
                                        "(9.28) has no COMBINE mode; use NONE, GATHER or SCATTER")
    return v


def _default_float_compute(node: Node, ctx: InferenceContext) -> None:
    """The classic default compute_data_type=FLOAT wins over the graph's compute type."""
    fill_data_types(node, ctx, node.inputs["TOKEN"])
    if node.requested_compute_data_type is data_type.NOT_SET:
        node.params["compute_data_type"] = data_type.FLOAT


def _check_rank3(op: str, node: Node, t: Any, what: str) -> None:
    require_dims(op, node, t)
    if len(t.dim) != 3:
        raise shape_error(op, node.name, t, f"{what} must be rank 3, got dims {list(t.dim)}")


def _check_offsets(op: str, node: Node, offsets: Any, experts: int) -> None:
    require_dims(op, node, offsets)
    if [int(d) for d in offsets.dim] != [experts, 1, 1]:  # cuDNN 9.28 refuses [E] and [1, E, 1] at finalize
        raise shape_error(op, node.name, offsets, f"dims {list(offsets.dim)} must be one offset per expert, "
                          f"[{experts}, 1, 1]")


def _check_per_row(op: str, node: Node, t: Any, rows: int | None, what: str) -> int:
    """token_index / token_ks: one value per routed row, [1, M, 1]; returns M."""
    require_dims(op, node, t)
    if len(t.dim) != 3 or int(t.dim[0]) != 1 or int(t.dim[2]) != 1 or (rows is not None and int(t.dim[1]) != rows):
        want = f"[1, {rows}, 1]" if rows is not None else "[1, M, 1]"
        raise shape_error(op, node.name, t, f"{what} dims {list(t.dim)} must be {want}")
    return int(t.dim[1])


def infer_forward(node: Node, ctx: InferenceContext) -> None:
    op = "moe_grouped_matmul"
    p = node.params
    token, weight, out = node.inputs["TOKEN"], node.inputs["WEIGHT"], node.outputs["OUTPUT"]
    index, ks = node.inputs.get("TOKEN_INDEX"), node.inputs.get("TOKEN_KS")
    mode = p["mode"]
    routed = mode in (_MODE.GATHER, _MODE.SCATTER)
    if routed and index is None:
        raise shape_error(op, node.name, token, f"mode {mode} needs token_index")
    if not routed and index is not None:
        raise shape_error(op, node.name, index, f"token_index is only used in GATHER / SCATTER mode, not {mode}")
    if mode is _MODE.SCATTER and (ks is None or p["top_k"] <= 0):
        raise shape_error(op, node.name, token, "SCATTER mode needs token_ks and top_k > 0")
    if mode is not _MODE.SCATTER and (ks is not None or p["top_k"] != 0):
        raise shape_error(op, node.name, ks if ks is not None else token,
                          f"token_ks and top_k are only used in SCATTER mode, not {mode}")
    _check_rank3(op, node, token, "token")
    _check_rank3(op, node, weight, "weight")
    if int(token.dim[0]) != 1:
        raise shape_error(op, node.name, token, f"dims {list(token.dim)} must be [1, T, K]: the tokens of every "
                          "expert in one sequence")
    if int(token.dim[2]) != int(weight.dim[1]):
        raise shape_error(op, node.name, weight, f"weight dims {list(weight.dim)} do not take tokens of width "
                          f"{token.dim[2]} (token {list(token.dim)}; weight must be [E, K, N])")
    _check_offsets(op, node, node.inputs["FIRST_TOKEN_OFFSET"], int(weight.dim[0]))
    t_rows = int(token.dim[1])
    for what, t in (("first_token_offset", node.inputs["FIRST_TOKEN_OFFSET"]), ("token_index", index),
                    ("token_ks", ks)):
        if t is not None and t.data_type is not data_type.INT32:
            raise shape_error(op, node.name, t, f"{what} must be INT32, got {t.data_type.name}")
    if mode is _MODE.SCATTER and t_rows % p["top_k"]:
        raise shape_error(op, node.name, token, f"SCATTER writes row r to slot token_index * top_k + token_ks: the "
                          f"{t_rows} token rows must be a multiple of top_k = {p['top_k']}")
    if index is not None:
        # GATHER reads token_index per output row; SCATTER per token row
        m = _check_per_row(op, node, index, None if mode is _MODE.GATHER else t_rows, "token_index")
        if mode is _MODE.GATHER and m % t_rows:
            # each token is gathered a whole number of times (top_k); cuDNN 9.28 refuses others without a reason
            raise shape_error(op, node.name, index, f"GATHER needs token_index rows ({m}) to be a multiple of the "
                              f"token rows ({t_rows})")
        if ks is not None:
            _check_per_row(op, node, ks, m, "token_ks")
    rows = int(index.dim[1]) if mode is _MODE.GATHER and index is not None else t_rows
    expected = [1, rows, int(weight.dim[2])]
    fill_or_check_dims(op, node, out, expected, "the expected")
    if not out.stride:
        out._infer_set("stride", layout.row_major_strides(out.dim))
    _default_float_compute(node, ctx)


def infer_backward(node: Node, ctx: InferenceContext) -> None:
    op = "moe_grouped_matmul_bwd"
    dout, token, dweight = node.inputs["DOUTPUT"], node.inputs["TOKEN"], node.outputs["DWEIGHT"]
    _check_rank3(op, node, dout, "doutput")
    _check_rank3(op, node, token, "token")
    if int(dout.dim[1]) != int(token.dim[1]):
        raise shape_error(op, node.name, dout, f"doutput has {dout.dim[1]} rows, token {token.dim[1]}: one "
                          "gradient row per token row")
    offsets = node.inputs["FIRST_TOKEN_OFFSET"]
    require_dims(op, node, offsets)
    experts = int(offsets.dim[0])
    _check_offsets(op, node, offsets, experts)
    k, n = int(token.dim[2]), int(dout.dim[2])
    expected = [experts, k, n]
    fill_or_check_dims(op, node, dweight, expected, "[experts, K, N] =")
    if not dweight.stride:
        dweight._infer_set("stride", [k * n, 1, k])  # column-major per expert, as the frontend infers
    _default_float_compute(node, ctx)


MOE_GROUPED_MATMUL = OpSpec(
    method="moe_grouped_matmul", kind="moe_grouped_matmul",
    inputs=(Port("TOKEN", "token"), Port("WEIGHT", "weight"), Port("FIRST_TOKEN_OFFSET", "first_token_offset"),
            Port("TOKEN_INDEX", "token_index", optional=True), Port("TOKEN_KS", "token_ks", optional=True)),
    outputs=(Output("OUTPUT", label="{node}::Output"),), infer=infer_forward,
    params=(Param("mode", _MODE.NONE, convert=_mode), Param("top_k", 0, convert=int_at_least(0))),
    order=("token", "weight", "first_token_offset", "token_index", "token_ks", "mode", "compute_data_type",
           "top_k", "name"),
    varargs=True, out_dims=True,
    requires=(desc.OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR,), min_version=MOE_MIN_VERSION,
    doc="moe_grouped_matmul(token, weight, first_token_offset, token_index=None, token_ks=None, mode=NONE, "
        "compute_data_type=FLOAT, top_k=0) -> Output: per-expert matmul over the token rows of each expert.")

MOE_GROUPED_MATMUL_BWD = OpSpec(
    method="moe_grouped_matmul_bwd", kind="moe_grouped_matmul_bwd",
    inputs=(Port("DOUTPUT", "doutput"), Port("TOKEN", "token"), Port("FIRST_TOKEN_OFFSET", "first_token_offset")),
    outputs=(Output("DWEIGHT", label="{node}::DWeight"),), infer=infer_backward,
    order=("doutput", "token", "first_token_offset", "compute_data_type", "name"),
    varargs=True, out_dims=True,
    requires=(desc.OPERATION_MOE_GROUPED_MATMUL_BWD_DESCRIPTOR,), min_cublaslt=MOE_BWD_MIN_CUBLASLT,
    doc="moe_grouped_matmul_bwd(doutput, token, first_token_offset, compute_data_type=FLOAT) -> DWeight: "
        "DWeight[e] = token[rows of e]^T @ doutput[rows of e].")
register(MOE_GROUPED_MATMUL, MOE_GROUPED_MATMUL_BWD)
