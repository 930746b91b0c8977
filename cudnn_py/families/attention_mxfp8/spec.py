"""MXFP8 attention, forward and backward (``node_lowering.md`` §14.4, §14.7, §16.2, §16.4): block-scaled FP8
operands, always COMPOSITE, as in the frontend. cuDNN >= 9.21.0 and a Blackwell GPU (compute capability major 10
exactly) only.

Every FP8 operand x (E4M3 / E5M2) comes with an FP8_E8M0 descale tensor reordered F8_128x4 (the MX scale-factor
tiles of 128 rows by 4 blocks): one scale per block of 32 consecutive elements along the axis its matmul
contracts, so the value is x · descale of its block. The blocks run along the head dim for q, k and the backward's
v, dO (``descale`` dims [b, h, s padded to 128, d / 32 padded to 4]) and along the sequence for the forward's v and
the backward's q_T, k_T, dO_T ([b, h, s / 32 padded to 4, d padded to 128]). The ``_T`` operands hold the same
logical (b, h, s, d) tensor quantized along s (their memory is usually s-fastest).

``sdpa_mxfp8(q, k, v, descale_q, descale_k, descale_v, ...) -> [O, Stats, Amax_O]``: O = softmax(attn_scale ·
Q·Kᵀ, masked) · V over the dequantized operands (the decomposition: BLOCK_SCALE_DEQUANTIZE of Q, of Kᵀ (K and its
descale described with axes 2 / 3 swapped) and of V, plain matmuls; the softmax output is typed as Q's FP8 type,
the backend's bmm2 operand type), Amax_O = max |O|.

``sdpa_mxfp8_backward(q, q_T, k, k_T, v, o_f16, dO_f16, dO, dO_T, stats, descale_q, descale_q_T, descale_k,
descale_k_T, descale_v, descale_dO, descale_dO_T, ...) -> [dQ, dK, dV, Amax_dQ, Amax_dK, Amax_dV]``:
P = exp(attn_scale · Q·Kᵀ - Stats); D = rowsum(dO_f16 ∘ o_f16); dV = Pᵀ·dO_T; dS = attn_scale · P ∘ (dO·Vᵀ - D);
dQ = dS·K_T; dK = dSᵀ·Q_T (GQA: q heads summed per kv head); each Amax the max |·| of its gradient. P and dS stay
in FLOAT (no scale_s / scale_dP, unlike per-tensor FP8).

The backend's block size: the frontend gives every dequantize {1, 32} (§9.2, §14.7), whichever axis the scale
blocks; cuDNN 9.28 does not check a rank-4 block size against the scale's dims when it finalizes (probed on the
CPU), and its fused attention engines match the frontend's graph. So the dequantize nodes carry the logical block
({1, 32} along d, {32, 1} along s, which inference and the reference engine read) and ``backend_block_size``
{1, 32}, which the lowering sends.
"""
from __future__ import annotations

from typing import Any

from ..._generated.names import desc
from ...enums import data_type, diagonal_alignment, reduction_mode, tensor_reordering
from ...errors import FeatureVersionError, NotImplementedOptionError, cudnnGraphNotSupportedError
from ...ir import layout
from ...ir.inference import InferenceContext, member, require_dims
from ...ir.node import Node
from ...ir.spec import REQUIRED, OpSpec, Output, Param, Port, register
from ...ir.tensor import Tensor
from ..attention import spec as fwd
from ..attention.options import _fail  # the attention families' one shape error (naming the node's method)
from ..attention_backward import spec as bwd
from ..attention_fp8 import spec as fp8

FWD, BWD = "sdpa_mxfp8", "sdpa_mxfp8_backward"
MIN_VERSION = 92100  # the frontend's gate (SDPANodeBase::is_mxfp8_scaling, §14.4)
GATE_FEATURE = desc.OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR  # the catalog entry the 9.21 gate stands on
BLACKWELL_MAJOR = 10
BLOCK = 32  # MX: one E8M0 scale per 32 elements
TILE_ROWS, TILE_BLOCKS = 128, 4  # F8_128x4
BACKEND_BLOCK_SIZE = [1, BLOCK]  # what the frontend gives the backend for every operand
ALONG_D, ALONG_S = 3, 2  # the axis a descale blocks
F16_TYPES = (data_type.HALF, data_type.BFLOAT16, data_type.FLOAT)  # the backward's unquantized o_f16, dO_f16
BLACKWELL_ONLY = ("MXFP8 attention is Blackwell-only: it needs a GPU of compute capability 10.x (major == 10 "
                  "exactly; cuDNN has MXFP8 attention engines only there)")


def _padded(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def descale_dims(x: Tensor, along: int) -> list[int]:
    """The F8_128x4 descale dims of a (b, h, s, d) operand blocked along ``along``: the block axis divided by 32
    and padded to 4, the other of the last two padded to 128."""
    b, h, s, d = (int(n) for n in x.dim)
    if along == ALONG_D:
        return [b, h, _padded(s, TILE_ROWS), _padded(d // BLOCK, TILE_BLOCKS)]
    return [b, h, _padded(s // BLOCK, TILE_BLOCKS), _padded(d, TILE_ROWS)]


# ---- the classic call ---------------------------------------------------------------------------------------------
def _unpack_forward(values: dict[str, Any]) -> None:
    if values.get("unfuse_fma"):
        # the unified SDPA_FWD op's attribute (§14.8); MXFP8 attention is composite, where the frontend drops it
        raise NotImplementedOptionError(f"{FWD}(): unfuse_fma=True is not implemented in cudnn_py (it is an "
                                        "attribute of the unified attention op; MXFP8 attention is composite)")
    fwd.unpack_scale_and_dropout(values, FWD)


def _unpack_backward(values: dict[str, Any]) -> None:
    if values.get("dropout") is not None:
        raise cudnnGraphNotSupportedError(
            f"{BWD}(): dropout is not supported: cuDNN runs the MXFP8 backward deterministically on SM10x, and its "
            "deterministic attention backward takes no dropout (as the official frontend says)")
    bwd.unpack_scale_and_dropout(values, BWD)


def _finish_forward(params: dict[str, Any]) -> None:
    params["generate_stats"] = bool(params["generate_stats"])
    fwd.finish_masks(params)


def _finish_backward(params: dict[str, Any]) -> None:
    fwd.finish_masks(params)


# ---- inference and validation -----------------------------------------------------------------------------------
def _check_operands(node: Node, ports: tuple[str, ...]) -> None:
    """MX FP8 operands: 4-D, E4M3 / E5M2, head dim innermost."""
    for port in ports:
        t = node.inputs[port]
        require_dims(fwd.op_name(node), node, t)
        if len(t.dim) != 4:
            raise _fail(node, t, f"needs 4 dims (b, h, s, d), got {list(t.dim)}")
        if t.data_type not in fp8.FP8_TYPES:
            raise _fail(node, t, f"must be FP8_E4M3 or FP8_E5M2 (MXFP8 attention), got {t.data_type.name}")


def _check_head_dims(node: Node, d_qk: int, d_v: int) -> None:
    """SM10x FP8 attention (§14.4, §16.2): d_qk, d_v at most 128, or d_qk 192 with d_v 128; here also multiples of
    32, whole MX blocks (cudnn_py's dequantize has no partial blocks)."""
    q, v = node.inputs["Q"], node.inputs["V"]
    for t, dim in ((q, d_qk), (v, d_v)):
        if dim % BLOCK:
            raise _fail(node, t, f"head dim {dim} is not a multiple of {BLOCK} (whole MX blocks of {BLOCK})")
    if d_v > 128 or (d_qk > 128 and (d_qk, d_v) != (192, 128)):
        raise _fail(node, q if d_qk > 128 else v, f"head dims d_qk {d_qk}, d_v {d_v}: MXFP8 attention takes at most "
                    "128 (or d_qk 192 with d_v 128), as cuDNN on SM10x")


def _check_sequence_blocks(node: Node, ports: tuple[str, ...]) -> None:
    """Operands blocked along the sequence need whole blocks of 32 there."""
    for port in ports:
        t = node.inputs[port]
        if int(t.dim[2]) % BLOCK:
            raise _fail(node, t, f"sequence length {t.dim[2]} is not a multiple of {BLOCK}: this operand's MX "
                        f"scales block the sequence axis (whole blocks of {BLOCK})")


def _check_descales(node: Node, blocked: dict[str, tuple[str, int]]) -> None:
    """Each descale: FP8_E8M0, reordered F8_128x4, dense, dims of its operand's tiles (§14.4); a descale blocked
    along d (SF_Q, SF_K, ...) has stride[3] == 1."""
    ins = node.inputs
    for port, (operand, along) in blocked.items():
        t, x = ins[port], ins[operand]
        require_dims(fwd.op_name(node), node, t)
        if t.data_type is not data_type.FP8_E8M0 or t.reordering_type is not tensor_reordering.F8_128x4:
            raise _fail(node, t, f"an MXFP8 descale must be FP8_E8M0 reordered F8_128x4 (got "
                        f"{t.data_type.name}, reordering {t.reordering_type.name}); per-tensor FLOAT descales are "
                        "sdpa_fp8's")
        want = descale_dims(x, along)
        if [int(n) for n in t.dim] != want:
            axis = "d" if along == ALONG_D else "s"
            raise _fail(node, t, f"dims {list(t.dim)} are not the F8_128x4 tiles of {x.name!r} {list(x.dim)} blocked "
                        f"along {axis} by {BLOCK}: expected {want}")
        if along == ALONG_D and int(t.stride[3]) != 1:
            raise _fail(node, t, f"stride[3] must be 1 (cuDNN's rule for a descale blocked along d), got strides "
                        f"{list(t.stride)}")
        if layout.span(t.dim, t.stride) != layout.numel(t.dim):
            raise _fail(node, t, f"strides {list(t.stride)} leave gaps: an F8_128x4 descale is dense tiles")


def _check_like(node: Node, port: str, like: Tensor) -> None:
    t = node.inputs[port]
    if [int(n) for n in t.dim] != [int(n) for n in like.dim]:
        raise _fail(node, t, f"dims {list(t.dim)} differ from {like.name!r}'s {list(like.dim)} (the same tensor "
                    "quantized along the other axis)")


def infer_forward(node: Node, ctx: InferenceContext) -> None:
    _check_operands(node, ("Q", "K", "V"))
    q, k, v = (node.inputs[p] for p in ("Q", "K", "V"))
    if int(k.dim[3]) != int(q.dim[3]):
        raise _fail(node, k, f"head dim {k.dim[3]} differs from q's {q.dim[3]} (q and k need one head dim)")
    _check_head_dims(node, int(q.dim[3]), int(v.dim[3]))
    _check_sequence_blocks(node, ("V",))
    _check_descales(node, {"DESCALE_Q": ("Q", ALONG_D), "DESCALE_K": ("K", ALONG_D), "DESCALE_V": ("V", ALONG_S)})
    stats = node.outputs.get("Stats")
    if stats is not None and stats.data_type is data_type.NOT_SET:
        stats._infer_set("data_type", data_type.FLOAT)
    fp8._infer_amax(node)
    fwd.infer(node, ctx)
    fp8._check_results(node, ("O",))
    if stats is not None and stats.data_type is not data_type.FLOAT:
        raise _fail(node, stats, f"softmax statistics must be FLOAT, got {stats.data_type.name}")


def infer_backward(node: Node, ctx: InferenceContext) -> None:
    ins = node.inputs
    _check_operands(node, ("Q", "Q_T", "K", "K_T", "V", "DO_MX", "DO_MX_T"))
    for port in ("O", "DO"):  # o_f16, dO_f16: D = rowsum(dO ∘ O) without descales
        t = ins[port]
        require_dims(BWD, node, t)
        if t.data_type not in F16_TYPES:
            raise _fail(node, t, f"must be HALF, BFLOAT16 or FLOAT (the unquantized o / dO), got {t.data_type.name}")
    stats = ins["STATS"]
    if stats.data_type is data_type.NOT_SET:
        stats._infer_set("data_type", data_type.FLOAT)
    if stats.data_type is not data_type.FLOAT:
        raise _fail(node, stats, f"the forward's statistics are FLOAT, got {stats.data_type.name}")
    fp8._infer_amax(node)
    bwd.infer(node, ctx)  # q, k, v, o_f16, dO_f16, stats: dims, GQA, masks; infers dQ, dK, dV
    q, v = ins["Q"], ins["V"]
    _check_head_dims(node, int(q.dim[3]), int(v.dim[3]))
    for port, like in (("Q_T", "Q"), ("K_T", "K"), ("DO_MX", "DO"), ("DO_MX_T", "DO")):
        _check_like(node, port, ins[like])
    _check_sequence_blocks(node, ("Q_T", "K_T", "DO_MX_T"))
    _check_descales(node, {"DESCALE_Q": ("Q", ALONG_D), "DESCALE_Q_T": ("Q_T", ALONG_S),
                           "DESCALE_K": ("K", ALONG_D), "DESCALE_K_T": ("K_T", ALONG_S),
                           "DESCALE_V": ("V", ALONG_D), "DESCALE_DO": ("DO_MX", ALONG_D),
                           "DESCALE_DO_T": ("DO_MX_T", ALONG_S)})
    fp8._check_results(node, ("dQ", "dK", "dV"))


# ---- gates ----------------------------------------------------------------------------------------------------------
def require_runtime(node: Node, options: Any) -> None:
    """cuDNN >= 9.21.0 (the frontend's MXFP8 gate), refused with what MXFP8 attention needs."""
    what = f"{fwd.op_name(node)}() (node {node.name!r}): MXFP8 attention"
    try:
        options.require(GATE_FEATURE, what=what, at_least=MIN_VERSION)
    except FeatureVersionError as e:  # named after the op, not the catalog feature standing for the gate
        raise FeatureVersionError(what, e.needed, e.loaded, detail=BLACKWELL_ONLY) from None


def device_rules(node: Node, cc: int, version: int) -> str | None:
    """Blackwell only: compute capability major 10 (10.0, 10.3), not 9.x nor 12.x (§14.4)."""
    if cc // 10 != BLACKWELL_MAJOR:
        return BLACKWELL_ONLY
    return None


# ---- the composite decompositions ---------------------------------------------------------------------------------
def dequantize(rw: Any, x: Tensor, descale: Tensor, along: int) -> Tensor:
    """BLOCK_SCALE_DEQUANTIZE of an MX operand (a virtual FLOAT result): the logical block along ``along`` for the
    IR, {1, 32} for the backend (see the module doc)."""
    logical = [1, BLOCK] if along == ALONG_D else [BLOCK, 1]
    y = rw.block_scale_dequantize(x, descale, logical, compute_data_type=data_type.FLOAT)
    rw.emitted[-1].params["backend_block_size"] = list(BACKEND_BLOCK_SIZE)
    return y


def expand_forward(node: Node, rw: Any, options: Any) -> bool:
    """§14.7 (MXFP8): Kᵀ and its descale swapped in place, dequantize Kᵀ and Q; bmm1, scale, band masks, softmax
    (typed as Q's FP8 type, bmm2's A); dequantize V, bmm2 into O; AMAX(O)."""
    require_runtime(node, options)
    ins, outs = node.inputs, node.outputs
    q, k, v = ins["Q"], ins["K"], ins["V"]
    d = fwd.dims_of(node)
    b, h, s_q, s_kv = d["b"], d["h_q"], d["s_q"], d["s_kv"]
    f32 = data_type.FLOAT
    fwd.transpose_in_place(rw, node, k)
    fwd.transpose_in_place(rw, node, ins["DESCALE_K"])
    k_deq = dequantize(rw, k, ins["DESCALE_K"], ALONG_S)  # step 1: Kᵀ (d is axis 2 now), then Q before bmm1
    q_deq = dequantize(rw, q, ins["DESCALE_Q"], ALONG_D)
    scores = [b, h, s_q, s_kv]
    s = fwd.virtual(rw, "bmm1_S", scores, layout.row_major_strides(scores), f32)
    fwd.matmul(rw, q_deq, k_deq, s, {})
    s = fwd.modify_scores(rw, node, s, h, FWD)
    s = fwd.band_mask(rw, node, s, options.available)
    probs = fwd._softmax(rw, node, s, [b, h, s_q, 1], q.data_type)  # §14.6 step 14: S in Q's type
    v_deq = dequantize(rw, v, ins["DESCALE_V"], ALONG_S)
    fwd.matmul(rw, probs, v_deq, outs["O"], {})
    rw.reduction(outs["O"], reduction_mode.AMAX, compute_data_type=f32, out=outs["Amax_O"])
    return True


def expand_backward(node: Node, rw: Any, options: Any) -> bool:
    """§16.3 with the §16.4 differences: a dequantize per use, D from the unquantized o / dO, P and dS in FLOAT,
    AMAX of each gradient."""
    require_runtime(node, options)
    ins, outs = node.inputs, node.outputs
    ops = bwd.operands(node)  # by field name: the fields of one type are easy to swap by position
    q, k, v, o, d_o, stats = ops.q, ops.k, ops.v, ops.o, ops.d_o, ops.stats
    seq_q, seq_kv = ops.seq_q, ops.seq_kv
    b, h, s_q, s_kv = ops.b, ops.h, ops.s_q, ops.s_kv
    f32 = data_type.FLOAT
    scores, rows = [b, h, s_q, s_kv], [b, h, s_q, 1]
    for t in (k, ins["DESCALE_K"], v, ins["DESCALE_V"]):
        fwd.transpose_in_place(rw, node, t)
    # 1-2. D = rowsum(dO_f16 ∘ o_f16), and dSink from it
    red = bwd.row_sum_d(rw, node, d_o, o, stats, rows)
    sink = ins.get("SINK_TOKEN")
    # 3. with a sink, the frontend's MUL by 1.0 (the backend's pattern matcher wants MUL -> SUB)
    softmax_sum = rw.mul(red, 1.0, compute_data_type=f32) if sink is not None else red
    # 4. P = exp(S - Stats) from the masked, scaled scores of the dequantized Q and Kᵀ
    q_deq = dequantize(rw, q, ins["DESCALE_Q"], ALONG_D)
    k_deq = dequantize(rw, k, ins["DESCALE_K"], ALONG_S)  # Kᵀ
    s = fwd.virtual(rw, "bmm_Q_K", scores, layout.row_major_strides(scores), f32)
    fwd.matmul(rw, q_deq, k_deq, s, {"M_OVERRIDE": seq_q, "N_OVERRIDE": seq_kv})
    s = fwd.modify_scores(rw, node, s, h, BWD)
    s = fwd.band_mask(rw, node, s, options.available)
    probs = rw.exp(rw.sub(s, stats, compute_data_type=f32), compute_data_type=f32)
    # 5. dV = Pᵀ·dO_T
    p_t = bwd._transposed_view(rw, probs, f32, "S_transpose")
    d_o_t = dequantize(rw, ins["DO_MX_T"], ins["DESCALE_DO_T"], ALONG_S)
    _gradient(rw, p_t, d_o_t, outs["dV"], outs["Amax_dV"], h, {"M_OVERRIDE": seq_kv, "K_OVERRIDE": seq_q}, "dV")
    # 6. dS = attn_scale · P ∘ (dO·Vᵀ - D)
    d_o_mx = dequantize(rw, ins["DO_MX"], ins["DESCALE_DO"], ALONG_D)
    v_deq = dequantize(rw, v, ins["DESCALE_V"], ALONG_S)  # Vᵀ
    d_p = fwd.virtual(rw, "bmm_dO_V_T", scores, layout.row_major_strides(scores), f32)
    fwd.matmul(rw, d_o_mx, v_deq, d_p, {"M_OVERRIDE": seq_q, "N_OVERRIDE": seq_kv})
    d_s = bwd.score_gradient(rw, d_p, softmax_sum, probs)
    if "ATTN_SCALE" in ins:
        d_s = rw.mul(d_s, ins["ATTN_SCALE"], compute_data_type=f32)
    # 7. dQ = dS·K_T
    k_t = dequantize(rw, ins["K_T"], ins["DESCALE_K_T"], ALONG_S)
    _gradient(rw, d_s, k_t, outs["dQ"], outs["Amax_dQ"], h, {"M_OVERRIDE": seq_q, "K_OVERRIDE": seq_kv}, "dQ")
    # 8. dK = dSᵀ·Q_T
    d_s_t = bwd._transposed_view(rw, d_s, f32, "dP_T")
    q_t = dequantize(rw, ins["Q_T"], ins["DESCALE_Q_T"], ALONG_S)
    _gradient(rw, d_s_t, q_t, outs["dK"], outs["Amax_dK"], h, {"M_OVERRIDE": seq_kv, "K_OVERRIDE": seq_q}, "dK")
    return True


def _gradient(rw: Any, a: Tensor, b: Tensor, grad: Tensor, amax: Tensor, heads: int, overrides: dict,
              what: str) -> None:
    """A gradient matmul (for GQA / MQA into a FLOAT full-head tensor summed per kv head, §16.4), then its AMAX."""
    if int(grad.dim[1]) == heads:
        fwd.matmul(rw, a, b, grad, overrides)
    else:
        full = [int(grad.dim[0]), heads, int(grad.dim[2]), int(grad.dim[3])]
        full_t = fwd.virtual(rw, f"{what}_fullhead", full, layout.row_major_strides(full), data_type.FLOAT)
        fwd.matmul(rw, a, b, full_t, overrides)
        rw.grouped_reduction(full_t, reduction_mode.ADD, compute_data_type=data_type.FLOAT, out=grad)
    rw.reduction(grad, reduction_mode.AMAX, compute_data_type=data_type.FLOAT, out=amax)


# ---- the specs --------------------------------------------------------------------------------------------------
_BAND_PARAMS = (
    Param("diagonal_alignment", diagonal_alignment.TOP_LEFT, convert=member(diagonal_alignment)),
    Param("diagonal_band_left_bound", None, convert=fwd._bound),
    Param("diagonal_band_right_bound", None, convert=fwd._bound))

SDPA_MXFP8_ORDER = (
    "q", "k", "v", "descale_q", "descale_k", "descale_v", "attn_scale", "use_causal_mask",
    "use_causal_mask_bottom_right", "diagonal_alignment", "diagonal_band_left_bound", "diagonal_band_right_bound",
    "compute_data_type", "name", "generate_stats", "sink_token", "unfuse_fma")

SDPA_MXFP8 = OpSpec(
    method=FWD, kind=FWD, decomposed=True,
    inputs=(Port("Q", "q"), Port("K", "k"), Port("V", "v"), Port("DESCALE_Q", "descale_q"),
            Port("DESCALE_K", "descale_k"), Port("DESCALE_V", "descale_v"),
            Port("ATTN_SCALE", "attn_scale", optional=True), Port("SINK_TOKEN", "sink_token", optional=True)),
    outputs=(Output("O"), Output("Stats", fwd._stats_wanted), Output("Amax_O")),
    infer=infer_forward,
    # sdpa's mask, score and inference helpers read these; sdpa_mxfp8 has no such arguments
    fixed={"use_alibi_mask": False, "use_padding_mask": False, "sliding_window_length": None, "dropout": None,
           "paged_attention_max_seq_len_kv": None},
    params=(Param("use_causal_mask", False, convert=bool), Param("use_causal_mask_bottom_right", False, convert=bool))
    + _BAND_PARAMS + (Param("generate_stats", REQUIRED, convert=fwd._optional_bool),
                      Param("unfuse_fma", False, convert=bool)),
    order=SDPA_MXFP8_ORDER, varargs=True, out_dims=True, returns_list=True, unpack=_unpack_forward,
    finish=_finish_forward, expand=expand_forward, device_rules=device_rules,
    doc="sdpa_mxfp8(q, k, v, descale_q, descale_k, descale_v, attn_scale=None, ..., generate_stats, ...) -> [O, "
        "Stats, Amax_O] (generate_stats is required; Stats None unless it is true). " + (__doc__ or ""),
)

SDPA_MXFP8_BACKWARD_ORDER = (
    "q", "q_T", "k", "k_T", "v", "o_f16", "dO_f16", "dO", "dO_T", "stats", "descale_q", "descale_q_T", "descale_k",
    "descale_k_T", "descale_v", "descale_dO", "descale_dO_T", "attn_scale", "use_padding_mask", "seq_len_q",
    "seq_len_kv", "use_causal_mask", "use_causal_mask_bottom_right", "diagonal_alignment", "left_bound",
    "right_bound", "use_deterministic_algorithm", "dropout", "compute_data_type", "name", "sink_token",
    "dSink_token")

SDPA_MXFP8_BACKWARD = OpSpec(
    method=BWD, kind=BWD, decomposed=True,
    inputs=(Port("Q", "q"), Port("Q_T", "q_T"), Port("K", "k"), Port("K_T", "k_T"), Port("V", "v"),
            Port("O", "o_f16"), Port("DO", "dO_f16"), Port("DO_MX", "dO"), Port("DO_MX_T", "dO_T"),
            Port("STATS", "stats"))
    + tuple(Port(f"DESCALE_{x.upper()}", f"descale_{x}") for x in ("q", "q_T", "k", "k_T", "v", "dO", "dO_T"))
    + (Port("ATTN_SCALE", "attn_scale", optional=True), Port("SEQ_LEN_Q", "seq_len_q", optional=True),
       Port("SEQ_LEN_KV", "seq_len_kv", optional=True), Port("SINK_TOKEN", "sink_token", optional=True)),
    outputs=(Output("dQ"), Output("dK"), Output("dV"), Output("Amax_dQ"), Output("Amax_dK"), Output("Amax_dV"),
             Output("dSink_token", adopt="dSink_token")),
    infer=infer_backward,
    fixed={"use_alibi_mask": False, "sliding_window_length": None},
    params=fp8._MASK_PARAMS + fp8._BAND_PARAMS + (
        # the frontend forces determinism for MXFP8 on SM10x; dQ is always written by its matmul directly here
        Param("use_deterministic_algorithm", False, convert=bool),
        Param("dropout", None)),
    order=SDPA_MXFP8_BACKWARD_ORDER, varargs=True, out_dims=True, returns_list=True,
    unpack=_unpack_backward, finish=_finish_backward, expand=expand_backward, device_rules=device_rules,
    doc="sdpa_mxfp8_backward(q, q_T, k, k_T, v, o_f16, dO_f16, dO, dO_T, stats, descale_q, ..., descale_dO_T, "
        "attn_scale=None, ...) -> [dQ, dK, dV, Amax_dQ, Amax_dK, Amax_dV]. " + (__doc__ or ""),
)
register(SDPA_MXFP8, SDPA_MXFP8_BACKWARD)
