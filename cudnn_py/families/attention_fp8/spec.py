"""Per-tensor FP8 attention, forward and backward: always COMPOSITE, as in the frontend (which never gives the
unified SDPA_FWD op FP8 descales). cuDNN 9.10.0 is refused
(the frontend's gate: an erratum in ``plans/errata.py``).

``sdpa_fp8(q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, ...) -> [O, Stats, Amax_S,
Amax_O]``: q, k, v are FP8 (E4M3 / E5M2) holding x · scale_x; each descale is the inverse of its scale, a [1, 1, 1,
1] FLOAT tensor. The scores are descaled (S = attn_scale · descale_q · descale_k · Q·Kᵀ), masked and softmaxed as in
``sdpa``; P is quantized into Q's FP8 type with scale_s (Amax_S = max |P| before), then bmm2 is a MatmulFP8:
O = scale_o · descale_s · descale_v · S8·V, Amax_O = max |O| before scale_o.

``sdpa_fp8_backward(q, k, v, o, dO, stats, descale_q, descale_k, descale_v, descale_o, descale_dO, descale_s,
descale_dP, scale_s, scale_dQ, scale_dK, scale_dV, scale_dP, ...) -> [dQ, dK, dV, Amax_dQ, Amax_dK, Amax_dV,
Amax_dP]``: P = exp(S - Stats) recomputed; S8 = P · scale_s in Q's type; dV = MatmulFP8(S8ᵀ, dO); D = descale_dO ·
descale_o · rowsum(dO ∘ O); dP = attn_scale · P ∘ (descale_dO · descale_v · dO·Vᵀ - D), Amax_dP = max |dP|,
quantized into dO's type with scale_dP; dQ = MatmulFP8(dP8, K), dK = MatmulFP8(dP8ᵀ, Q) (GQA: q heads summed per
kv head inside the MatmulFP8).

The masks, scale, score callback (``fn``), dropout and softmax statistics are ``sdpa``'s own helpers; these ops use
the frontend's FP8 argument names (``sliding_window``, ``left_bound`` / ``right_bound``, ``fn``).
"""
from __future__ import annotations

from typing import Any

from ...enums import data_type, diagonal_alignment, reduction_mode
from ...errors import not_supported, shape_error
from ...ir import layout
from ...ir.inference import InferenceContext, member, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register
from ...ir.tensor import Tensor
from ..attention import spec as fwd
from ..attention_backward import spec as bwd

FWD, BWD = "sdpa_fp8", "sdpa_fp8_backward"
FP8_TYPES = (data_type.FP8_E4M3, data_type.FP8_E5M2)
# FP8 outputs everywhere; HALF / BFLOAT16 outputs only on SM >= 100 with cuDNN >= 9.13 (not checked without a device)
OUTPUT_TYPES = FP8_TYPES + (data_type.HALF, data_type.BFLOAT16)
HEAD_DIM_MULTIPLE, MAX_HEAD_DIM = 16, 256  # SM9x (SM10x: at most 128, not checked without a device)
ONE = [1, 1, 1, 1]

def _unpack_forward(values: dict[str, Any]) -> None:
    fwd.unpack_scale_and_dropout(values, FWD)


def _unpack_backward(values: dict[str, Any]) -> None:
    bwd.unpack_scale_and_dropout(values, BWD)


def _finish_forward(params: dict[str, Any]) -> None:
    fwd.finish_stats_choice(params, FWD)
    fwd.finish_masks(params)


def _finish_backward(params: dict[str, Any]) -> None:
    fwd.finish_masks(params)


# ---- inference and validation -----------------------------------------------------------------------------------
def _check_fp8_operands(node: Node, ports: tuple[str, ...]) -> None:
    """FP8 q, k, v (and o, dO): dims set, 4-D, an FP8 type, head dims multiples of 16 up to 256."""
    method = fwd.op_name(node)
    for port in ports:
        t = node.inputs[port]
        require_dims(method, node, t)
        if len(t.dim) != 4:
            raise shape_error(method, node.name, t, f"needs 4 dims (b, h, s, d), got {list(t.dim)}")
        if t.data_type not in FP8_TYPES:
            raise shape_error(method, node.name, t, f"must be FP8_E4M3 or FP8_E5M2 (per-tensor FP8 attention), got "
                              f"{t.data_type.name}")
        dim = int(t.dim[3])
        if port in ("Q", "V") and (dim % HEAD_DIM_MULTIPLE or dim > MAX_HEAD_DIM):
            raise not_supported(method, node.name, f"head dim {dim} must be a multiple of {HEAD_DIM_MULTIPLE} and at "
                              f"most {MAX_HEAD_DIM} (cuDNN's FP8 attention)", t)


def _check_scales(node: Node) -> None:
    """Each descale / scale: one FLOAT value in a [1, 1, 1, 1] tensor (an unset type becomes FLOAT)."""
    method = fwd.op_name(node)
    for port, t in node.inputs.items():
        if not port.startswith(("DESCALE_", "SCALE_")):
            continue
        require_dims(method, node, t)
        if [int(x) for x in t.dim] != ONE:
            raise shape_error(method, node.name, t, f"a descale / scale tensor needs dims {ONE}, got {list(t.dim)}")
        if t.data_type is data_type.NOT_SET:
            t._infer_set("data_type", data_type.FLOAT)
        if t.data_type is not data_type.FLOAT:
            raise shape_error(method, node.name, t, f"a descale / scale tensor must be FLOAT, got {t.data_type.name}")


def _infer_amax(node: Node) -> None:
    method = fwd.op_name(node)
    for port, t in node.outputs.items():
        if not port.startswith("Amax_"):
            continue
        if not t.dim:
            t._infer_set("dim", ONE)
        elif [int(x) for x in t.dim] != ONE:
            raise shape_error(method, node.name, t, f"an amax output has dims {ONE}, got {list(t.dim)}")
        if not t.stride:
            t._infer_set("stride", ONE)
        if t.data_type is data_type.NOT_SET:
            t._infer_set("data_type", data_type.FLOAT)
        if t.data_type is not data_type.FLOAT:
            raise shape_error(method, node.name, t, f"an amax output must be FLOAT, got {t.data_type.name}")


def _check_results(node: Node, ports: tuple[str, ...]) -> None:
    for port in ports:
        t = node.outputs[port]
        if t.data_type not in OUTPUT_TYPES:
            raise shape_error(fwd.op_name(node), node.name, t, f"must be FP8_E4M3 / FP8_E5M2 (or HALF / BFLOAT16 "
                              f"on SM >= 100), got {t.data_type.name}; set its data type")


def infer_forward(node: Node, ctx: InferenceContext) -> None:
    _check_fp8_operands(node, ("Q", "K", "V"))
    _check_scales(node)
    if "BIAS" in node.inputs:
        raise not_supported(FWD, node.name, "FP8 attention takes no bias, as in the frontend")
    for port in ("Stats", "Max", "Sum_exp"):  # FLOAT (the io type, FP8 or HALF, would be refused below)
        t = node.outputs.get(port)
        if t is not None and t.data_type is data_type.NOT_SET:
            t._infer_set("data_type", data_type.FLOAT)
    _infer_amax(node)
    fwd.infer(node, ctx)
    _check_results(node, ("O",))
    for port in ("Stats", "Max", "Sum_exp"):
        t = node.outputs.get(port)
        if t is not None and t.data_type is not data_type.FLOAT:
            raise shape_error(FWD, node.name, t, f"softmax statistics must be FLOAT, got {t.data_type.name}")


def infer_backward(node: Node, ctx: InferenceContext) -> None:
    _check_fp8_operands(node, ("Q", "K", "V", "O", "DO"))
    _check_scales(node)
    stats = node.inputs["STATS"]
    if stats.data_type is data_type.NOT_SET:
        stats._infer_set("data_type", data_type.FLOAT)
    if stats.data_type is not data_type.FLOAT:
        raise shape_error(BWD, node.name, stats, f"the forward's statistics are FLOAT, got {stats.data_type.name}")
    _infer_amax(node)
    bwd.infer(node, ctx)
    _check_results(node, ("dQ", "dK", "dV"))


# ---- what each GPU architecture supports, checked when planning meets the device -------------------------------
HOPPER, BLACKWELL = 90, 100
HALF_OUTPUT_MIN_VERSION = 91300
WIDE_QK_MIN_VERSION = 91900  # SM10x: d_qk 192 with d_v 128


def _blackwell_head_dims(d_qk: int, d_v: int, version: int) -> str | None:
    if d_v > 128 or (d_qk > 128 and not (d_qk == 192 and d_v == 128 and version >= WIDE_QK_MIN_VERSION)):
        return (f"head dims d_qk {d_qk}, d_v {d_v}: SM10x takes at most 128 (or d_qk 192 with d_v 128 on cuDNN >= "
                "9.19)")
    return None


def device_rules(node: Node, cc: int, version: int) -> str | None:
    """Why FP8 attention cannot run on a GPU of compute capability ``cc`` (the frontend's checks), or None."""
    ins, p = node.inputs, node.params
    d_qk, d_v = int(ins["Q"].dim[3]), int(ins["V"].dim[3])
    backward = node.op == BWD
    if p["diagonal_alignment"] is diagonal_alignment.BOTTOM_RIGHT and p["diagonal_band_right_bound"] is not None \
            and cc < BLACKWELL:
        return "a bottom-right causal mask in FP8 attention needs SM >= 100"
    outputs = ("dQ", "dK", "dV") if backward else ("O",)
    wide = [port for port in outputs if node.outputs[port].data_type not in FP8_TYPES]
    if wide and (cc < BLACKWELL or version < HALF_OUTPUT_MIN_VERSION):
        return f"HALF / BFLOAT16 {', '.join(wide)} need SM >= 100 and cuDNN >= 9.13 (FP8 outputs run everywhere)"
    if cc >= BLACKWELL:
        return _blackwell_head_dims(d_qk, d_v, version)
    if backward and (d_qk, d_v) != (128, 128):
        return f"the FP8 attention backward on SM9x needs d_qk == d_v == 128, got {d_qk}, {d_v}"
    if backward and any(t.ragged_offset is not None for t in (ins["Q"], ins["K"], ins["V"], ins["O"], ins["DO"])):
        return "the FP8 attention backward takes no ragged (THD) tensors on SM9x"
    return None


# ---- the composite decompositions ---------------------------------------------------------------------------------
def matmul_fp8(rw: Any, a: Tensor, b: Tensor, descales: tuple[Tensor, Tensor], scale: Tensor, out: Tensor,
               amax: Tensor, overrides: dict[str, Tensor | None], name: str) -> None:
    """The frontend's MatmulFP8: MATMUL(A, B) in FLOAT (summed over the q heads of each kv head when C has
    fewer heads than A), times both descales, AMAX of that into ``amax``, times ``scale`` into ``out``."""
    f32 = data_type.FLOAT
    full = [int(a.dim[0]), int(a.dim[1]), int(a.dim[2]), int(b.dim[3])]
    grouped = int(out.dim[1]) != full[1]
    c = fwd.virtual(rw, f"{name}_matmul", full, layout.row_major_strides(full), f32)
    fwd.matmul(rw, a, b, c, overrides)
    if grouped:
        dims = [int(x) for x in out.dim]
        summed = fwd.virtual(rw, f"{name}_head_sum", dims, layout.row_major_strides(dims), f32)
        rw.grouped_reduction(c, reduction_mode.ADD, compute_data_type=f32, out=summed)
        c = summed
    for descale in descales:
        c = rw.mul(c, descale, compute_data_type=f32)
    rw.reduction(c, reduction_mode.AMAX, compute_data_type=f32, out=amax)
    rw.mul(c, scale, compute_data_type=f32, out=out)


def expand_forward(node: Node, rw: Any, options: Any) -> bool:
    """sdpa's composite up to its dropout, with the descales of Q and K after the scale, then Amax_S, Scale_S and
    bmm2 as a MatmulFP8."""
    ins, outs = node.inputs, node.outputs
    q = ins["Q"]
    d = fwd.dims_of(node)
    b, h, s_q, s_kv = d["b"], d["h_q"], d["s_q"], d["s_kv"]
    f32 = data_type.FLOAT
    seq_q, seq_kv = ins.get("SEQ_LEN_Q"), ins.get("SEQ_LEN_KV")
    k = fwd.k_transposed(rw, node, d)  # paged or not, as in sdpa
    scores = [b, h, s_q, s_kv]
    s = fwd.virtual(rw, "bmm1_S", scores, layout.row_major_strides(scores), f32)
    fwd.matmul(rw, q, k, s, {"M_OVERRIDE": seq_q, "N_OVERRIDE": seq_kv})
    s = fwd.modify_scores(rw, node, s, h, fwd.op_name(node), descales=(ins["DESCALE_Q"], ins["DESCALE_K"]))
    s = fwd.band_mask(rw, node, s, options.available)
    probs = fwd._softmax(rw, node, s, [b, h, s_q, 1], f32)
    probs = fwd._dropout(rw, node, probs, scores, f32)
    rw.reduction(probs, reduction_mode.AMAX, compute_data_type=f32, out=outs["Amax_S"])
    s8 = rw.mul(probs, ins["SCALE_S"], compute_data_type=f32, out_data_type=q.data_type)  # bmm2's A in Q's type
    matmul_fp8(rw, s8, fwd.v_loaded(rw, node, d), (ins["DESCALE_S"], ins["DESCALE_V"]), ins["SCALE_O"], outs["O"],
               outs["Amax_O"], {"M_OVERRIDE": seq_q, "K_OVERRIDE": seq_kv}, "bmm2")
    return True


def expand_backward(node: Node, rw: Any, options: Any) -> bool:
    """The frontend's per-tensor FP8 backward, in its sub-node order (docs/internals.md)."""
    ins, outs = node.inputs, node.outputs
    ops = bwd.operands(node)  # by field name: the fields of one type are easy to swap by position
    q, k, v, o, d_o, stats = ops.q, ops.k, ops.v, ops.o, ops.d_o, ops.stats
    seq_q, seq_kv = ops.seq_q, ops.seq_kv
    b, h, s_q, d_qk, h_k, s_kv = ops.b, ops.h, ops.s_q, ops.d_qk, ops.h_k, ops.s_kv
    f32 = data_type.FLOAT
    scores, rows = [b, h, s_q, s_kv], [b, h, s_q, 1]
    fwd.transpose_in_place(rw, node, k)
    fwd.transpose_in_place(rw, node, v)
    mask, scale, scale_inv = bwd._dropout_operands(rw, node, scores)
    # 1-2. D = descale_dO · descale_o · rowsum(dO ∘ O), and dSink from it
    red = bwd.row_sum_d(rw, node, d_o, o, stats, rows, (ins["DESCALE_DO"], ins["DESCALE_O"]))
    sink = ins.get("SINK_TOKEN")
    # 3. the softmax sum: times the dropout's scale_inv; with a sink and no dropout a MUL by 1.0 (the frontend keeps
    # it so the backend's pattern matcher sees MUL -> SUB)
    softmax_sum = red
    if scale_inv is not None or sink is not None:
        softmax_sum = rw.mul(red, scale_inv if scale_inv is not None else 1.0, compute_data_type=f32)
    # 4. P = exp(S - Stats) from the descaled, masked scores; S8 = P (dropped) · scale_s in Q's type
    s = fwd.virtual(rw, "bmm_Q_K", scores, layout.row_major_strides(scores), f32)
    fwd.matmul(rw, q, k, s, {"M_OVERRIDE": seq_q, "N_OVERRIDE": seq_kv})
    s = fwd.modify_scores(rw, node, s, h, fwd.op_name(node), descales=(ins["DESCALE_Q"], ins["DESCALE_K"]))
    s = fwd.band_mask(rw, node, s, options.available)
    probs = rw.exp(rw.sub(s, stats, compute_data_type=f32), compute_data_type=f32)
    s8 = rw.mul(bwd.dropped(rw, probs, mask, scale), ins["SCALE_S"], compute_data_type=f32,
                out_data_type=q.data_type)
    # 5. dV = MatmulFP8(S8ᵀ, dO)
    s8_t = bwd._transposed_view(rw, s8, q.data_type, "S_transpose")
    matmul_fp8(rw, s8_t, d_o, (ins["DESCALE_S"], ins["DESCALE_DO"]), ins["SCALE_DV"], outs["dV"], outs["Amax_dV"],
               {"M_OVERRIDE": seq_kv, "K_OVERRIDE": seq_q}, "dV")
    # 6. dP = attn_scale · P ∘ (dropout(descaled dO·Vᵀ) - D), its amax, then dP8 in dO's type
    d_p = fwd.virtual(rw, "bmm_dO_V_T", scores, layout.row_major_strides(scores), f32)
    fwd.matmul(rw, d_o, v, d_p, {"M_OVERRIDE": seq_q, "N_OVERRIDE": seq_kv})
    d_p = rw.mul(rw.mul(d_p, ins["DESCALE_DO"], compute_data_type=f32), ins["DESCALE_V"], compute_data_type=f32)
    d_s = bwd.score_gradient(rw, d_p, softmax_sum, probs, mask, scale)
    if "ATTN_SCALE" in ins:
        d_s = rw.mul(d_s, ins["ATTN_SCALE"], compute_data_type=f32)
    rw.reduction(d_s, reduction_mode.AMAX, compute_data_type=f32, out=outs["Amax_dP"])
    dp8 = rw.mul(d_s, ins["SCALE_DP"], compute_data_type=f32, out_data_type=d_o.data_type)
    # 7. dQ = MatmulFP8(dP8, K), K viewed back untransposed, in FLOAT as the frontend describes it (its API log)
    k_back = fwd.virtual(rw, "reshape_k", [b, h_k, s_kv, d_qk],
                         [int(k.stride[0]), int(k.stride[1]), int(k.stride[3]), int(k.stride[2])], f32)
    rw.attention_view(k, out=k_back)
    matmul_fp8(rw, dp8, k_back, (ins["DESCALE_DP"], ins["DESCALE_K"]), ins["SCALE_DQ"], outs["dQ"], outs["Amax_dQ"],
               {"M_OVERRIDE": seq_q, "K_OVERRIDE": seq_kv}, "dQ")
    # 8. dK = MatmulFP8(dP8ᵀ, Q)
    dp8_t = bwd._transposed_view(rw, dp8, d_o.data_type, "dP_T")
    matmul_fp8(rw, dp8_t, q, (ins["DESCALE_DP"], ins["DESCALE_Q"]), ins["SCALE_DK"], outs["dK"], outs["Amax_dK"],
               {"M_OVERRIDE": seq_kv, "K_OVERRIDE": seq_q}, "dK")
    return True


_MASK_PARAMS = (
    Param("use_padding_mask", False, convert=bool), Param("use_causal_mask", False, convert=bool),
    Param("use_causal_mask_bottom_right", False, convert=bool))
_BAND_PARAMS = (
    Param("diagonal_alignment", diagonal_alignment.TOP_LEFT, convert=member(diagonal_alignment)),
    Param("left_bound", None, key="diagonal_band_left_bound", convert=fwd._bound),
    Param("right_bound", None, key="diagonal_band_right_bound", convert=fwd._bound))

SDPA_FP8_ORDER = (
    "q", "k", "v", "descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o", "is_inference",
    "attn_scale", "bias", "use_alibi_mask", "use_padding_mask", "seq_len_q", "seq_len_kv", "use_causal_mask",
    "use_causal_mask_bottom_right", "sliding_window", "diagonal_alignment", "left_bound", "right_bound", "dropout",
    "rng_dump", "paged_attention_k_table", "paged_attention_v_table", "paged_attention_max_seq_len_kv",
    "compute_data_type", "name", "fn", "generate_stats", "score_max", "score_sum_exp", "sink_token")

SDPA_FP8 = OpSpec(
    method=FWD, kind=FWD, decomposed=True,
    inputs=(Port("Q", "q"), Port("K", "k"), Port("V", "v"), Port("DESCALE_Q", "descale_q"),
            Port("DESCALE_K", "descale_k"), Port("DESCALE_V", "descale_v"), Port("DESCALE_S", "descale_s"),
            Port("SCALE_S", "scale_s"), Port("SCALE_O", "scale_o"),
            Port("ATTN_SCALE", "attn_scale", optional=True), Port("BIAS", "bias", optional=True),
            Port("SEQ_LEN_Q", "seq_len_q", optional=True), Port("SEQ_LEN_KV", "seq_len_kv", optional=True),
            Port("PAGE_TABLE_K", "paged_attention_k_table", optional=True),
            Port("PAGE_TABLE_V", "paged_attention_v_table", optional=True),
            Port("SINK_TOKEN", "sink_token", optional=True)) + fwd.DROPOUT_PORTS,
    outputs=(Output("O"), Output("Stats", fwd._stats_wanted), Output("Amax_S"), Output("Amax_O"),
             Output("RNG_DUMP", adopt="rng_dump"),
             Output("Max", adopt="score_max"),
             Output("Sum_exp", adopt="score_sum_exp")),
    infer=infer_forward,
    params=(Param("is_inference", None, convert=fwd._optional_bool), Param("use_alibi_mask", False, convert=bool))
    + _MASK_PARAMS + (Param("sliding_window", None, key="sliding_window_length", convert=fwd._bound),) + _BAND_PARAMS
    + (Param("dropout", None),
       Param("paged_attention_max_seq_len_kv", None, convert=fwd._positive),
       Param("fn", None, key="score_mod", convert=fwd._callable),
       Param("generate_stats", None, convert=fwd._optional_bool)),
    order=SDPA_FP8_ORDER, varargs=True, out_dims=True, returns_list=True, unpack=_unpack_forward,
    finish=_finish_forward, expand=expand_forward, min_compute_capability=HOPPER, device_rules=device_rules,
    doc="sdpa_fp8(q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o, is_inference=None, ...) "
        "-> [O, Stats, Amax_S, Amax_O] (Stats None unless generate_stats). " + (__doc__ or ""),
)

SDPA_FP8_BACKWARD_ORDER = (
    "q", "k", "v", "o", "dO", "stats", "descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s",
    "descale_dP", "scale_s", "scale_dQ", "scale_dK", "scale_dV", "scale_dP", "attn_scale", "use_padding_mask",
    "seq_len_q", "seq_len_kv", "use_causal_mask", "use_causal_mask_bottom_right", "diagonal_alignment", "left_bound",
    "right_bound", "use_deterministic_algorithm", "dropout", "compute_data_type", "name", "sink_token", "dSink_token")

SDPA_FP8_BACKWARD = OpSpec(
    method=BWD, kind=BWD, decomposed=True,
    inputs=(Port("Q", "q"), Port("K", "k"), Port("V", "v"), Port("O", "o"), Port("DO", "dO"), Port("STATS", "stats"))
    + tuple(Port(f"DESCALE_{x.upper()}", f"descale_{x}") for x in ("q", "k", "v", "o", "dO", "s", "dP"))
    + tuple(Port(f"SCALE_{x.upper()}", f"scale_{x}") for x in ("s", "dQ", "dK", "dV", "dP"))
    + (Port("ATTN_SCALE", "attn_scale", optional=True), Port("SEQ_LEN_Q", "seq_len_q", optional=True),
       Port("SEQ_LEN_KV", "seq_len_kv", optional=True), Port("SINK_TOKEN", "sink_token", optional=True))
    + fwd.DROPOUT_PORTS + (bwd.DROPOUT_SCALE_INV_PORT,),
    outputs=(Output("dQ"), Output("dK"), Output("dV"), Output("Amax_dQ"), Output("Amax_dK"), Output("Amax_dV"),
             Output("Amax_dP"), Output("dSink_token", adopt="dSink_token")),
    infer=infer_backward,
    # sdpa's mask helpers read these; the FP8 backward has no such arguments
    fixed={"use_alibi_mask": False, "sliding_window_length": None},
    params=_MASK_PARAMS + _BAND_PARAMS + (
        # dQ is always written by its MatmulFP8 directly (no FLOAT accumulator): the deterministic form already
        Param("use_deterministic_algorithm", False, convert=bool),
        Param("dropout", None)),
    order=SDPA_FP8_BACKWARD_ORDER, varargs=True, out_dims=True, returns_list=True,
    unpack=_unpack_backward, finish=_finish_backward,
    expand=expand_backward, min_compute_capability=HOPPER, device_rules=device_rules,
    doc="sdpa_fp8_backward(q, k, v, o, dO, stats, descale_q, ..., scale_dP, attn_scale=None, ...) -> [dQ, dK, dV, "
        "Amax_dQ, Amax_dK, Amax_dV, Amax_dP]. " + (__doc__ or ""),
)
register(SDPA_FP8, SDPA_FP8_BACKWARD)
