"""Scaled dot-product attention, backward: ``sdpa_backward(q, k, v, o, dO, stats, ...)
-> [dQ, dK, dV]`` (dBias into the caller's ``dBias`` tensor). Always COMPOSITE, as in the frontend.

From the forward's O and Stats (LSE): P = exp(S - Stats) is recomputed from the masked, scaled scores S;
dV = Pdᵀ·dO (Pd = P with dropout); dP = dO·Vᵀ; D = rowsum(dO ∘ O); dS = P ∘ (dP ∘ mask · r - D) (r the dropout
scale); dBias = Σ dS over the axes the bias broadcasts; dS := score_mod_bprop(dS) when a score_mod modified the
scores (it runs on the recomputed scores as in the forward); dQ = scale · dS·K; dK = scale · dSᵀ·Q. GQA / MQA sum
the q heads of each kv head (a grouped reduction).

As in the frontend, softmax_sum (D) and, unless dBias or determinism is asked for, a FLOAT dQ accumulator are real
buffers: they live at the start of the workspace (``Program.scratch``), and dQ is a cast of the accumulator.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..._generated.names import attr, desc
from ...enums import data_type, diagonal_alignment, reduction_mode
from ...errors import InvalidTypeError, InvalidValueError, shape_error
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, member, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register
from ...ir.tensor import Tensor
from ..attention import score_mod
from ..attention import spec as fwd
from ..attention.options import _fail, float_attn_scale  # (_fail: the attention families' one shape error)

OP = "sdpa_backward"
MAX_HEAD_DIM = 256  # cuDNN's composite backward on SM9x (SM8x / SM10x: 128, not checked without a device)

MAX_TOTAL_MIN_VERSION = 90600  # below it the frontend drops max_total_seq_len_*


def _unpack(values: dict[str, Any]) -> None:
    unpack_scale_and_dropout(values, OP)


def unpack_scale_and_dropout(values: dict[str, Any], method: str) -> None:
    """attn_scale (an int becomes a float) and the backward's dropout tuple, for sdpa_backward and
    sdpa_fp8_backward."""
    float_attn_scale(values)
    dropout = values.get("dropout")
    values["dropout"] = None
    if dropout is None:
        return
    if not isinstance(dropout, (tuple, list)) or len(dropout) != 3:
        raise InvalidTypeError(f"{method}(): dropout must be (probability, seed, offset) or (mask, scale, scale_inv)")
    first = dropout[0]
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        fwd.set_dropout_probability(values, method, *dropout)
    else:
        values["dropout"] = "mask"
        values["dropout_mask"], values["dropout_scale"], values["dropout_scale_inv"] = dropout


def _finish(params: dict[str, Any]) -> None:
    # without its bprop the gradient would silently skip score_mod's derivative; a bprop alone has no score_mod
    # to differentiate
    if (params["score_mod"] is None) != (params["score_mod_bprop"] is None):
        given, missing = ("score_mod", "score_mod_bprop") if params["score_mod"] is not None else \
            ("score_mod_bprop", "score_mod")
        raise InvalidValueError(f"{OP}(): {given} needs {missing} too (the gradient through score_mod is its bprop)")
    fwd.finish_masks(params)


def infer(node: Node, ctx: InferenceContext) -> None:
    ins = node.inputs
    for port in ("Q", "K", "V", "O", "DO", "STATS"):
        t = ins[port]
        require_dims(fwd.op_name(node), node, t)
        if len(t.dim) != 4:
            raise _fail(node, t, f"needs 4 dims, got {list(t.dim)}")
        if int(t.stride[3]) != 1 and port != "STATS":
            raise fwd._unsupported(node, t, f"the head dim must be innermost (stride[3] == 1), got strides "
                              f"{list(t.stride)}")
    q, k, v = ins["Q"], ins["K"], ins["V"]
    if int(k.dim[3]) != int(q.dim[3]):
        raise _fail(node, k, f"head dim {k.dim[3]} differs from q's {q.dim[3]} (q and k need one "
                          "head dim)")
    if int(v.dim[2]) != int(k.dim[2]):
        raise _fail(node, v, f"sequence length {v.dim[2]} differs from k's {k.dim[2]}")
    b, h_q, s_q, d_qk = (int(x) for x in q.dim)
    d_v = int(v.dim[3])
    for t in (k, v):
        if int(t.dim[0]) != b:
            raise _fail(node, t, f"batch {t.dim[0]} differs from q's {b}")
        if h_q % int(t.dim[1]):
            raise fwd._unsupported(node, t, f"{t.dim[1]} heads do not divide q's {h_q} heads")
    for t, dim in ((q, d_qk), (v, d_v)):
        if dim % 8 or dim > MAX_HEAD_DIM:
            raise fwd._unsupported(node, t, f"head dim {dim} must be a multiple of 8 and at most {MAX_HEAD_DIM} "
                              "(cuDNN's attention backward)")
    if s_q == 1 and int(k.dim[2]) == 1:
        raise fwd._unsupported(node, None, "s_q == s_kv == 1 is not supported by cuDNN's attention backward, as in "
                               "the frontend")
    for port, want in (("O", [b, h_q, s_q, d_v]), ("DO", [b, h_q, s_q, d_v]), ("STATS", [b, h_q, s_q, 1])):
        if [int(x) for x in ins[port].dim] != want:
            raise _fail(node, ins[port], f"dims {list(ins[port].dim)} are not the forward's {want}")
    fwd._check_optional_inputs(node, {"b": b, "h_q": h_q, "s_q": s_q, "d_qk": d_qk, "h_k": int(k.dim[1]),
                                      "s_kv": int(k.dim[2]), "h_v": int(v.dim[1]), "d_v": d_v})
    _check_max_totals(node)
    if node.params["dropout"] == "mask" and layout.numel(ins["DROPOUT_SCALE_INV"].dim) != 1:
        raise _fail(node, ins["DROPOUT_SCALE_INV"], "the dropout scale_inv must be one value")
    for grad, like in (("dQ", q), ("dK", k), ("dV", v)):
        t = node.outputs[grad]
        if not t.dim:
            t._infer_set("dim", list(like.dim))
        elif list(t.dim) != list(like.dim):
            raise _fail(node, t, f"dims {list(t.dim)} differ from {like.name!r}'s {list(like.dim)}")
        if not t.stride:
            t._infer_set("stride", list(like.stride))
    d_sink = node.outputs.get("dSink_token")
    if d_sink is not None:
        if "SINK_TOKEN" not in ins:
            raise InvalidValueError(f"{fwd.op_name(node)} node {node.name!r}: dSink_token needs the forward's "
                                    f"sink_token")
        if [int(x) for x in d_sink.dim] != [1, h_q, 1, 1]:
            raise _fail(node, d_sink, f"dims {list(d_sink.dim)} are not the sink's [1, {h_q}, 1, 1]")
        if not d_sink.stride:
            d_sink._infer_set("stride", layout.row_major_strides(d_sink.dim))
    dbias = node.outputs.get("dBias")
    if dbias is not None:
        scores = [b, h_q, s_q, int(k.dim[2])]
        if len(dbias.dim) != 4 or any(int(x) not in (1, y) for x, y in zip(dbias.dim, scores)):
            raise _fail(node, dbias, f"dims {list(dbias.dim)} do not broadcast to the scores "
                              f"{scores}")
        if not dbias.stride:
            dbias._infer_set("stride", layout.row_major_strides(dbias.dim))
    fill_data_types(node, ctx, q)


def _check_max_totals(node: Node) -> None:
    """max_total_seq_len_q / _kv bound the packed rows of ragged tensors: only with ragged tensors (the
    frontend's rule); they size the workspace intermediates kept in the ragged layout. A bound above b · s only
    makes those larger, so it is accepted, as the frontend accepts it."""
    p, ins, outs = node.params, node.inputs, node.outputs
    for arg, side, ports in (("max_total_seq_len_q", "q", ("Q", "O", "DO", "STATS", "dQ")),
                             ("max_total_seq_len_kv", "kv", ("K", "V", "dK", "dV"))):
        total = p.get(arg)  # absent for sdpa_fp8_backward
        if total is None:
            continue
        tensors = [ins.get(port, outs.get(port)) for port in ports]
        if not any(t is not None and t.ragged_offset is not None for t in tensors):
            raise fwd._unsupported(node, None, f"{arg} is only supported with ragged {side} tensors (a ragged "
                                   "offset on " + " / ".join(ports) + "), as in the frontend")


def _ragged_total(node: Node, arg: str, t: Tensor, options: Any) -> int | None:
    """The packed row count to lay a workspace intermediate out like ragged ``t``, or None: the frontend uses
    max_total_seq_len_* only from cuDNN 9.6 and with head dims that are multiples of 16."""
    total = node.params.get(arg)  # sdpa_fp8_backward, which shares this decomposition, has no such option
    if total is None or t.ragged_offset is None:
        return None
    if not options.available(attr.TENSOR_RAGGED_OFFSET_DESC, MAX_TOTAL_MIN_VERSION):
        return None
    if any(int(node.inputs[port].dim[3]) % 16 for port in ("Q", "O")):  # d_qk, d_v (V is transposed by now)
        return None
    return int(total)


# ---- the composite decomposition (docs/internals.md, "Attention, as the frontend decomposes it") --------------
class Operands(NamedTuple):
    """What every attention backward decomposition (this one, FP8's, MXFP8's) starts from."""

    q: Tensor
    k: Tensor
    v: Tensor
    o: Tensor
    d_o: Tensor
    stats: Tensor
    seq_q: Tensor | None
    seq_kv: Tensor | None
    b: int
    h: int
    s_q: int
    d_qk: int
    h_k: int
    s_kv: int


def operands(node: Node) -> Operands:
    ins = node.inputs
    q, k = ins["Q"], ins["K"]
    b, h, s_q, d_qk = (int(x) for x in q.dim)
    return Operands(q, k, ins["V"], ins["O"], ins["DO"], ins["STATS"], ins.get("SEQ_LEN_Q"), ins.get("SEQ_LEN_KV"),
                    b, h, s_q, d_qk, int(k.dim[1]), int(k.dim[2]))


def expand(node: Node, rw: Any, options: Any) -> bool:
    ins, outs = node.inputs, node.outputs
    ops = operands(node)  # by field name: the fields of one type are easy to swap by position
    q, k, v, o, d_o, stats = ops.q, ops.k, ops.v, ops.o, ops.d_o, ops.stats
    seq_q, seq_kv = ops.seq_q, ops.seq_kv
    b, h, s_q, d_qk, h_k, s_kv = ops.b, ops.h, ops.s_q, ops.d_qk, ops.h_k, ops.s_kv
    f32 = data_type.FLOAT
    scores = [b, h, s_q, s_kv]
    fwd.transpose_in_place(rw, node, k)
    fwd.transpose_in_place(rw, node, v)
    mask, scale, scale_inv = _dropout_operands(rw, node, scores)
    # D = rowsum(dO ∘ O), times (1 - p): the softmax_sum
    rows = [b, h, s_q, 1]
    red = row_sum_d(rw, node, d_o, o, stats, rows, frontend_strides=True)
    total_q = _ragged_total(node, "max_total_seq_len_q", stats, options)
    if total_q is not None:  # Stats' packed layout: max_total_seq_len_q rows of Stats' row stride
        softmax_sum = _scratch(rw, "softmax_sum", rows, [int(x) for x in stats.stride], stats.ragged_offset,
                               total_q * int(stats.stride[2]))
    else:
        softmax_sum = _scratch(rw, "softmax_sum", rows, [h * s_q, s_q, 1, 1])  # real memory, as the frontend's
    rw.mul(red, scale_inv if scale_inv is not None else 1.0, compute_data_type=f32, out=softmax_sum)
    # P recomputed from the scores and the forward's statistics
    s = fwd.virtual(rw, "matmul_Q_KT", scores, layout.row_major_strides(scores), f32)
    fwd.matmul(rw, q, k, s, {"M_OVERRIDE": seq_q, "N_OVERRIDE": seq_kv})
    s = fwd.modify_scores(rw, node, s, h, OP)
    s = rw.sub(s, stats, compute_data_type=f32)
    s = fwd.band_mask(rw, node, s, options.available)
    probs = rw.exp(s, compute_data_type=f32)
    p_t = _transposed_view(rw, dropped(rw, probs, mask, scale), q.data_type, "reshape_p")
    total_kv = {g: _ragged_total(node, "max_total_seq_len_kv", outs[g], options) for g in ("dK", "dV")}
    _grad_matmul(rw, p_t, d_o, outs["dV"], h, {"M_OVERRIDE": seq_kv, "K_OVERRIDE": seq_q}, "dV", total_kv["dV"])
    d_p = fwd.virtual(rw, "matmul_dO_VT", scores, layout.row_major_strides(scores), f32)
    fwd.matmul(rw, d_o, v, d_p, {"M_OVERRIDE": seq_q, "N_OVERRIDE": seq_kv})
    d_s = score_gradient(rw, d_p, softmax_sum, probs, mask, scale)
    if "dBias" in outs:
        rw.reduction(d_s, reduction_mode.ADD, compute_data_type=f32, out=outs["dBias"])
    if node.params["score_mod_bprop"] is not None:  # dS of the scores score_mod received
        d_s = score_mod.apply(node.params["score_mod_bprop"], rw, node.name, d_s, OP, "score_mod_bprop")
    if "ATTN_SCALE" in ins:
        d_s = rw.mul(d_s, ins["ATTN_SCALE"], compute_data_type=f32)
    d_s_t = _transposed_view(rw, d_s, q.data_type, "reshape_dS")
    _grad_matmul(rw, d_s_t, q, outs["dK"], h, {"M_OVERRIDE": seq_kv, "K_OVERRIDE": seq_q}, "dK", total_kv["dK"])
    # Kᵀ viewed back as K, read in FLOAT as the frontend describes it: dQ = dS · K with both operands FLOAT (a HALF
    # K here made dQ's matmul mixed-precision, FLOAT x HALF, and dQ wrong with dropout on cuDNN 9.19 / H200)
    k_back = fwd.virtual(rw, "reshape_k", [b, h_k, s_kv, d_qk],
                         [int(k.stride[0]), int(k.stride[1]), int(k.stride[3]), int(k.stride[2])], f32)
    rw.attention_view(k, out=k_back)
    dq_overrides = {"M_OVERRIDE": seq_q, "K_OVERRIDE": seq_kv}
    if "dBias" in outs or node.params["use_deterministic_algorithm"]:
        fwd.matmul(rw, d_s, k_back, outs["dQ"], dq_overrides)  # the frontend's use_dp_workspace form
    else:  # a FLOAT accumulator in the workspace, then a cast into dQ
        full, d_q = [b, h, s_q, d_qk], outs["dQ"]
        total_q = _ragged_total(node, "max_total_seq_len_q", d_q, options)
        if total_q is not None:  # dQ's packed layout
            accum = _scratch(rw, "dQ_accum", full, [int(x) for x in d_q.stride], d_q.ragged_offset,
                             total_q * int(d_q.stride[2]))
        else:
            accum = _scratch(rw, "dQ_accum", full, layout.row_major_strides(full))
        fwd.matmul(rw, d_s, k_back, accum, dq_overrides)
        rw.identity(accum, compute_data_type=f32, out=outs["dQ"])
    return True


def row_sum_d(rw: Any, node: Node, d_o: Tensor, o: Tensor, stats: Tensor, rows: list[int],
              descales: tuple[Any, ...] = (), frontend_strides: bool = False) -> Tensor:
    """D = rowsum(dO ∘ O) (times the FP8 backwards' descales of dO and O), and from it dSink = -Σ p_sink · D with
    p_sink = exp(sink - Stats) when the node has a dSink_token output, as the frontend
    builds it: Σ p_sink · D reduced into dSink, which the engine negates (``dsink_reduction``). With
    ``frontend_strides`` dO ∘ O (virtual) has the strides the frontend gives it, (h·s·d, s·d, h·d, 1) for
    (b, h, s, d), not the packed ones."""
    f32, h, s_q = data_type.FLOAT, rows[1], rows[2]
    if frontend_strides:
        d_v = int(o.dim[3])
        d_o_o = fwd.virtual(rw, "dO_o", [rows[0], h, s_q, d_v], [h * s_q * d_v, s_q * d_v, h * d_v, 1], f32)
        rw.mul(d_o, o, compute_data_type=f32, out=d_o_o)
    else:
        d_o_o = rw.mul(d_o, o, compute_data_type=f32, out_data_type=f32)
    red = fwd.virtual(rw, "reduce_dO_o", rows, [h * s_q, s_q, 1, 1], f32)
    rw.reduction(d_o_o, reduction_mode.ADD, compute_data_type=f32, out=red)
    for descale in descales:
        red = rw.mul(red, descale, compute_data_type=f32)
    if "dSink_token" in node.outputs:
        sink = node.inputs["SINK_TOKEN"]  # the backward's inference requires it with dSink_token
        p_sink = rw.exp(rw.sub(sink, stats, compute_data_type=f32), compute_data_type=f32)
        # straight into dSink, no NEG: the fused backward engine negates the sum itself (see DSINK_REDUCTION)
        rw.dsink_reduction(rw.mul(p_sink, red, compute_data_type=f32), reduction_mode.ADD, compute_data_type=f32,
                           out=node.outputs["dSink_token"])
    return red


def _scratch(rw: Any, name: str, dims: list[int], strides: list[int], ragged_offset: Tensor | None = None,
             elements: int | None = None, dt: Any = data_type.FLOAT) -> Tensor:
    """An intermediate in real memory (the workspace; FLOAT unless ``dt``), as the frontend keeps it for the
    backend's fused attention backward; a ragged one holds ``elements`` (the packed rows), not its padded span."""
    t = Tensor(_user=("dim", "stride", "data_type"), name=f"{rw.origin.name}::{name}", dim=dims, stride=strides,
               data_type=dt, is_virtual=False)
    if ragged_offset is not None:
        t._raw_set("ragged_offset", ragged_offset)
    return rw.program.add_scratch(t, elements)


def _dropout_operands(rw: Any, node: Node, scores: list[int]) -> tuple[Any, Any, Any]:
    """(mask, scale, scale_inv) of the dropout, or Nones. The RNG, with the forward's seed and offset,
    regenerates the forward's mask."""
    p, ins = node.params, node.inputs
    if p["dropout"] == "mask":
        return ins["DROPOUT_MASK"], ins["DROPOUT_SCALE"], ins["DROPOUT_SCALE_INV"]
    drawn = fwd.rng_mask(rw, node, scores, "rng")
    if drawn is None:
        return None, None, None
    mask, keep = drawn
    # one by-value scale, read by P's dropout and by dS's, as the frontend shares it
    return mask, rw._scalar(1.0 / keep), keep


def dropped(rw: Any, probs: Tensor, mask: Any, scale: Any) -> Tensor:
    """P with the dropout (``_dropout_operands``' mask and scale): P ∘ mask · scale, or P without one."""
    if mask is None:
        return probs
    f32 = data_type.FLOAT
    return rw.mul(rw.mul(probs, mask, compute_data_type=f32), scale, compute_data_type=f32)


def score_gradient(rw: Any, d_p: Tensor, softmax_sum: Tensor, probs: Tensor, mask: Any = None,
                   scale: Any = None) -> Tensor:
    """dS = P ∘ (dP ∘ mask - D) · scale, the dropout's mask and scale left out without one (every attention
    backward's, in the frontend's node order)."""
    f32 = data_type.FLOAT
    if mask is not None:
        d_p = rw.mul(d_p, mask, compute_data_type=f32)
    d_s = rw.mul(rw.sub(d_p, softmax_sum, compute_data_type=f32), probs, compute_data_type=f32)
    if mask is not None:
        d_s = rw.mul(d_s, scale, compute_data_type=f32)
    return d_s


def _transposed_view(rw: Any, x: Tensor, dt: Any, name: str) -> Tensor:
    """(b, h, s_q, s_kv) row-major -> its (b, h, s_kv, s_q) transposed view in ``dt`` (a RESHAPE)."""
    b, h, rows, cols = (int(d) for d in x.dim)
    view = fwd.virtual(rw, name, [b, h, cols, rows], [h * rows * cols, rows * cols, 1, cols], dt)
    rw.attention_view(x, out=view)
    return view


def _grad_matmul(rw: Any, a: Tensor, b: Tensor, grad: Tensor, heads: int, overrides: dict, what: str,
                 ragged_total: int | None = None) -> None:
    """A kv-side gradient: straight into it, or for GQA / MQA into a full-head tensor summed per kv head. The
    full-head tensor is virtual BHSD; for a ragged gradient with max_total_seq_len_kv (``ragged_total``) it lives
    in the workspace in the gradient's packed layout widened to all q heads (its batch and sequence strides times
    h_q / h_kv) and shares the gradient's ragged offset, which cuDNN scales by that ratio itself (the
    frontend's "implicit multiplier", for dV and dK alike)."""
    if int(grad.dim[1]) == heads:
        fwd.matmul(rw, a, b, grad, overrides)
        return
    full = [int(grad.dim[0]), heads, int(grad.dim[2]), int(grad.dim[3])]
    if ragged_total is None:
        full_t = fwd.virtual(rw, f"{what}_fullhead", full, layout.row_major_strides(full), a.data_type)  # Q's type
    else:
        ratio = heads // int(grad.dim[1])
        strides = [int(x) for x in grad.stride]
        strides[0], strides[2] = strides[0] * ratio, strides[2] * ratio
        # the frontend's ragged_workspace_size: max_total rows of the sequence stride plus one token's extent
        elements = (ragged_total - 1) * strides[2] + (full[1] - 1) * strides[1] + (full[3] - 1) * strides[3] + 1
        full_t = _scratch(rw, f"{what}_fullhead", full, strides, grad.ragged_offset, elements, a.data_type)
    fwd.matmul(rw, a, b, full_t, overrides)
    rw.grouped_reduction(full_t, reduction_mode.ADD, compute_data_type=data_type.FLOAT, out=grad)


# ---- the internal view op (OPERATION_RESHAPE) --------------------------------------------------------------------
def infer_view(node: Node, ctx: InferenceContext) -> None:
    x, y = node.inputs["X"], node.outputs["Y"]
    if sorted(int(d) for d in x.dim) != sorted(int(d) for d in y.dim):
        raise shape_error("attention_view", node.name, y, f"dims {list(y.dim)} are not a view of {list(x.dim)}")
    fill_data_types(node, ctx, x)


ATTENTION_VIEW = OpSpec(
    method="attention_view", kind="attention_view", public=False,
    inputs=(Port("X", "input"),), outputs=(Output("Y"),), infer=infer_view,
    order=("input", "name", "compute_data_type"),
    requires=(desc.OPERATION_RESHAPE_DESCRIPTOR,),
    doc="Y: the same elements as X at the same addresses, described with Y's dims and strides (internal: the "
        "attention backward's transposed views, an OPERATION_RESHAPE).",
)


SDPA_BACKWARD_ORDER = (
    "q", "k", "v", "o", "dO", "stats", "attn_scale", "bias", "dBias", "use_alibi_mask", "use_padding_mask",
    "seq_len_q", "seq_len_kv", "max_total_seq_len_q", "max_total_seq_len_kv", "use_causal_mask",
    "use_causal_mask_bottom_right", "sliding_window_length", "diagonal_alignment", "diagonal_band_left_bound",
    "diagonal_band_right_bound", "dropout", "rng_dump", "use_deterministic_algorithm", "compute_data_type", "name",
    "score_mod", "score_mod_bprop", "sink_token", "dSink_token")

DROPOUT_SCALE_INV_PORT = Port("DROPOUT_SCALE_INV", "dropout_scale_inv", optional=True)

SDPA_BACKWARD = OpSpec(
    method="sdpa_backward", kind="sdpa_backward", decomposed=True,
    inputs=(Port("Q", "q"), Port("K", "k"), Port("V", "v"), Port("O", "o"), Port("DO", "dO"),
            Port("STATS", "stats"), Port("ATTN_SCALE", "attn_scale", optional=True),
            Port("BIAS", "bias", optional=True), Port("SEQ_LEN_Q", "seq_len_q", optional=True),
            Port("SEQ_LEN_KV", "seq_len_kv", optional=True), Port("SINK_TOKEN", "sink_token", optional=True))
    + fwd.DROPOUT_PORTS + (DROPOUT_SCALE_INV_PORT,),
    outputs=(Output("dQ"), Output("dK"), Output("dV"), Output("dBias", adopt="dBias"),
             Output("RNG_DUMP", adopt="rng_dump"),
             Output("dSink_token", adopt="dSink_token")),
    infer=infer,
    params=(Param("use_alibi_mask", False, convert=bool), Param("use_padding_mask", False, convert=bool),
            Param("max_total_seq_len_q", None, convert=fwd._positive),
            Param("max_total_seq_len_kv", None, convert=fwd._positive),
            Param("use_causal_mask", False, convert=bool), Param("use_causal_mask_bottom_right", False, convert=bool),
            Param("sliding_window_length", None, convert=fwd._bound),
            Param("diagonal_alignment", diagonal_alignment.TOP_LEFT, convert=member(diagonal_alignment)),
            Param("diagonal_band_left_bound", None, convert=fwd._bound),
            Param("diagonal_band_right_bound", None, convert=fwd._bound),
            Param("dropout", None),
            # dQ is always written by its matmul directly: the frontend's deterministic form on SM9x
            Param("use_deterministic_algorithm", False, convert=bool),
            Param("score_mod", None, convert=fwd._callable),
            Param("score_mod_bprop", None, convert=fwd._callable)),
    order=SDPA_BACKWARD_ORDER, varargs=True, out_dims=True, returns_list=True, unpack=_unpack, finish=_finish,
    expand=expand, requires=(),  # always expanded: the ops it expands to carry the gates
    doc="sdpa_backward(q, k, v, o, dO, stats, attn_scale=None, bias=None, dBias=None, ...) -> [dQ, dK, dV]. "
        + (__doc__ or ""),
)
register(SDPA_BACKWARD, ATTENTION_VIEW)
