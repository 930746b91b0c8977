"""sdpa's implementation choice (the unified SDPA_FWD op where its support rules hold) and the composite
decomposition into MATMUL / POINTWISE / REDUCTION / RNG nodes in the frontend's order (docs/internals.md,
"Attention, as the frontend decomposes it"): the helpers the other attention families' decompositions share
live here."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..._generated.names import attr
from ...enums import attention_implementation, data_type, diagonal_alignment, reduction_mode
from ...errors import (
    NotImplementedOptionError,
    cudnnGraphNotSupportedError,
    version_string,
)
from ...ir import layout
from ...ir.node import Node
from ...ir.tensor import Tensor
from ..masks import spec as masks
from . import score_mod
from .options import (
    BLOCK_MASK_ATTRIBUTE,
    BLOCK_MASK_MIN_VERSION,
    DROPOUT_MIN_VERSION,
    OP,
    PAGED_UNIFIED_MIN_VERSION,
    SEQ_LEN_MIN_VERSION,
    UNFUSE_FMA,
    UNIFIED_DESCRIPTOR,
    UNIFIED_MIN_VERSION,
    _where,
    dims_of,
    drops,
    paged,
    rng_probability,
)


# ---- implementation choice ----------------------------------------------------------------------------------------
def unified_refusal(node: Node, available: Any) -> str | None:
    """Why the unified SDPA_FWD op cannot take this node on the running cuDNN, or None."""
    p, ins = node.params, node.inputs
    if not available(UNIFIED_DESCRIPTOR, UNIFIED_MIN_VERSION):
        return "the unified SDPA_FWD op needs cuDNN >= 9.13.1"
    if p["compute_data_type"] is not data_type.FLOAT:
        return f"the unified op computes in FLOAT (compute_data_type is {p['compute_data_type'].name})"
    if ins["Q"].data_type not in (data_type.HALF, data_type.BFLOAT16):
        return f"the unified op takes HALF / BFLOAT16 q, k, v (q is {ins['Q'].data_type.name})"
    if p["use_padding_mask"] and not available(attr.OPERATION_SDPA_FWD_SEQ_LEN_QDESC, SEQ_LEN_MIN_VERSION):
        return "the unified op's padding mask (seq_len_q / seq_len_kv) needs cuDNN >= 9.15.0"
    if paged(node) and not available(attr.OPERATION_SDPA_FWD_PAGE_TABLE_KDESC, PAGED_UNIFIED_MIN_VERSION):
        return "the unified op's paged attention needs cuDNN >= 9.15.0"
    if "BLOCK_MASK" in ins and not available(BLOCK_MASK_ATTRIBUTE, BLOCK_MASK_MIN_VERSION):
        return "the unified op's block mask needs cuDNN >= 9.14.0"
    if p["dropout"] == "mask":
        return "the unified op takes no custom dropout mask"
    if drops(p):
        if not available(attr.OPERATION_SDPA_FWD_DROPOUT_PROBABILITY, DROPOUT_MIN_VERSION):
            return "the unified op's dropout needs cuDNN >= 9.22.0"
        if p["generate_stats"]:
            return "the unified op's dropout excludes generate_stats=True"
    # cuDNN >= 9.21 takes these through a pre-softmax subgraph that cudnn_py does not build yet
    pre_softmax = [what for what, present in (
        ("score_mod", p.get("score_mod") is not None), ("bias", "BIAS" in ins), ("alibi", p["use_alibi_mask"]),
        ("causal / band masks", p["diagonal_band_left_bound"] is not None or
         p["diagonal_band_right_bound"] is not None)) if present]
    if pre_softmax:
        return (f"{', '.join(pre_softmax)} go through the unified op's score subgraph (cuDNN >= 9.21), which "
                "cudnn_py does not build yet")
    if "SINK_TOKEN" in ins:
        return ("a sink token goes through the unified op's softmax descriptor (cuDNN >= 9.21), which cudnn_py "
                "does not build yet")
    if "Max" in node.outputs:
        return ("score_max / score_sum_exp go through the unified op's softmax descriptor (cuDNN >= 9.21), which "
                "cudnn_py does not build yet")
    if p.get("unfuse_fma") and not available(UNFUSE_FMA):
        from ...backend import versions

        return f"the unified op's unfuse_fma needs cuDNN >= {version_string(versions.since(UNFUSE_FMA))}"
    return None


def use_unified(node: Node, available: Any) -> bool:
    impl = node.params["implementation"]
    why = None if impl is attention_implementation.COMPOSITE else unified_refusal(node, available)
    if node.params.get("unfuse_fma") and (impl is attention_implementation.COMPOSITE or why is not None):
        # the composite graph has no counterpart: falling back would drop the option the caller asked for
        reason = "implementation=COMPOSITE was asked for" if why is None else f"the unified op cannot run: {why}"
        raise cudnnGraphNotSupportedError(f"{_where(node)}: unfuse_fma=True is an option of the unified SDPA_FWD op "
                                          f"only, and {reason}")
    block_mask = "BLOCK_MASK" in node.inputs
    if impl is attention_implementation.COMPOSITE:
        if block_mask:  # the frontend's words (sdpa_support_surface.h)
            raise cudnnGraphNotSupportedError(f"{_where(node)}: implementation=COMPOSITE: Composite SDPA node doesn't "
                                              "support Block_mask input (block_mask= needs implementation=UNIFIED "
                                              "or AUTO)")
        return False
    if impl is attention_implementation.UNIFIED and why is not None:
        raise cudnnGraphNotSupportedError(f"{_where(node)}: implementation=UNIFIED is not supported: {why}")
    if block_mask and why is not None:  # AUTO: the composite takes no block mask, so there is nothing to fall back to
        raise cudnnGraphNotSupportedError(f"{_where(node)}: block_mask= needs the unified SDPA_FWD op (the composite "
                                          f"attention takes no block mask), which cannot take this node: {why}")
    return why is None


# ---- the composite decomposition ---------------------------------------------------------------------------------
def virtual(rw: Any, name: str, dims: list[int], strides: list[int], dt: Any) -> Tensor:
    t = Tensor(_user=("dim", "stride", "data_type"), name=f"{rw.origin.name}::{name}", dim=dims, stride=strides,
               data_type=dt, is_virtual=True)
    return rw.program.add_tensor(t)


def transpose_in_place(rw: Any, node: Node, k: Tensor) -> None:
    """K -> Kᵀ: the frontend swaps the last two dims and strides of the caller's K (the same memory, viewed
    transposed). Here the program's copy is rewritten; the user's tensor is untouched."""
    others = [n.name for n in rw.program.nodes if n is not node and any(t is k for t in n.inputs.values())]
    if others:
        raise NotImplementedOptionError(f"{node.spec.method if node.spec else OP} node {node.name!r}: {k.name!r} is "
                                        f"also read by {others}; the composite attention describes it transposed, "
                                        "so it must be the attention's alone (build forward and backward as "
                                        "separate graphs)")
    dims, strides = list(k.dim), list(k.stride)
    k._raw_set("dim", dims[:2] + [dims[3], dims[2]])
    k._raw_set("stride", strides[:2] + [strides[3], strides[2]])


def matmul(rw: Any, a: Tensor, b: Tensor, out: Tensor, overrides: dict[str, Tensor | None]) -> None:
    rw.matmul(a, b, compute_data_type=data_type.FLOAT, out=out)
    mm = rw.emitted[-1]
    mm.inputs = {**mm.inputs, **{port: t for port, t in overrides.items() if t is not None}}


def expand(node: Node, rw: Any, options: Any) -> bool:
    if use_unified(node, options.available):
        return False
    ins = node.inputs
    q = ins["Q"]
    d = dims_of(node)
    b, h, s_q, s_kv = d["b"], d["h_q"], d["s_q"], d["s_kv"]
    f32 = data_type.FLOAT
    seq_q, seq_kv = ins.get("SEQ_LEN_Q"), ins.get("SEQ_LEN_KV")
    k = k_transposed(rw, node, d)
    scores = [b, h, s_q, s_kv]
    s = virtual(rw, "bmm1_S", scores, layout.row_major_strides(scores), f32)
    matmul(rw, q, k, s, {"M_OVERRIDE": seq_q, "N_OVERRIDE": seq_kv})
    s = modify_scores(rw, node, s, h)
    s = band_mask(rw, node, s, options.available)
    # the last op before bmm2 writes Q's type: the backend wants bmm2's A in the I/O type
    probs = _softmax(rw, node, s, [b, h, s_q, 1], f32 if drops(node.params) else q.data_type)
    probs = _dropout(rw, node, probs, scores, q.data_type)
    matmul(rw, probs, v_loaded(rw, node, d), node.outputs["O"], {"M_OVERRIDE": seq_q, "K_OVERRIDE": seq_kv})
    return True


def k_transposed(rw: Any, node: Node, d: Mapping[str, int]) -> Tensor:
    """bmm1's Kᵀ: the caller's K described transposed in place, or a paged cache gathered through
    its page table as a Kᵀ view of BHSD."""
    ins = node.inputs
    k = ins["K"]
    if "PAGE_TABLE_K" not in ins:
        transpose_in_place(rw, node, k)
        return k
    b, h_k, d_qk, s_kv = d["b"], d["h_k"], d["d_qk"], d["s_kv"]
    cache = virtual(rw, "k_cache", [b, h_k, d_qk, s_kv], [d_qk * s_kv * h_k, d_qk * s_kv, 1, d_qk], k.data_type)
    rw.paged_cache_load(k, ins.get("SEQ_LEN_KV"), ins["PAGE_TABLE_K"], out=cache)
    return cache


def v_loaded(rw: Any, node: Node, d: Mapping[str, int]) -> Tensor:
    """bmm2's V: the caller's V, or a paged cache gathered as BHSD."""
    ins = node.inputs
    v = ins["V"]
    if "PAGE_TABLE_V" not in ins:
        return v
    b, h_v, d_v, s_kv = d["b"], d["h_v"], d["d_v"], d["s_kv"]
    cache = virtual(rw, "v_cache", [b, h_v, s_kv, d_v], [d_v * s_kv * h_v, d_v * s_kv, d_v, 1], v.data_type)
    rw.paged_cache_load(v, ins.get("SEQ_LEN_KV"), ins["PAGE_TABLE_V"], out=cache)
    return cache


def modify_scores(rw: Any, node: Node, s: Tensor, heads: int, method: str = OP,
                  descales: tuple[Tensor, ...] = ()) -> Tensor:
    """Scale, (FP8: the descales of Q and K), score_mod, bias, alibi and the padding mask, in the frontend's
    order."""
    p, ins = node.params, node.inputs
    f32, i32, boolean = data_type.FLOAT, data_type.INT32, data_type.BOOLEAN
    if "ATTN_SCALE" in ins:
        s = rw.mul(s, ins["ATTN_SCALE"], compute_data_type=f32)
    for descale in descales:
        s = rw.mul(s, descale, compute_data_type=f32)
    if p.get("score_mod") is not None:
        s = score_mod.apply(p["score_mod"], rw, node.name, s, method)
    if "BIAS" in ins:
        s = rw.add(s, ins["BIAS"], compute_data_type=f32)
    if p["use_alibi_mask"]:
        s = _alibi(rw, s, heads)
    if p["use_padding_mask"]:
        row = rw.gen_index(s, 2, compute_data_type=i32, out_data_type=i32)
        col = rw.gen_index(s, 3, compute_data_type=i32, out_data_type=i32)
        row_ok = rw.cmp_lt(row, ins["SEQ_LEN_Q"], compute_data_type=boolean, out_data_type=boolean)
        col_ok = rw.cmp_lt(col, ins["SEQ_LEN_KV"], compute_data_type=boolean, out_data_type=boolean)
        keep = rw.logical_and(row_ok, col_ok, compute_data_type=boolean, out_data_type=boolean)
        s = rw.binary_select(s, -math.inf, keep, compute_data_type=f32)
    return s


def band_mask(rw: Any, node: Node, s: Tensor, available: Any) -> Tensor:
    """The causal / sliding-window masks (as ``attn_score_modifiers.h: sliding_window_mask`` builds them):
    the unified band-mask ops where the running cuDNN has them (>= 9.21) and the shapes are static, else the
    frontend's composite chain (INT32 indices computed in FLOAT, a fresh pair per bound); right bound first, then left
    bound."""
    p = node.params
    left, right = p["diagonal_band_left_bound"], p["diagonal_band_right_bound"]
    if left is None and right is None:
        return s
    bottom_right = p["diagonal_alignment"] is diagonal_alignment.BOTTOM_RIGHT
    seq_q, seq_kv = node.inputs.get("SEQ_LEN_Q"), node.inputs.get("SEQ_LEN_KV")
    per_batch = bottom_right and seq_q is not None
    if not per_batch and available(masks.UNIFIED_DESCRIPTOR, masks.UNIFIED_MIN_VERSION):
        return rw.diagonal_band_mask(s, left_bound=left, right_bound=right, diagonal_alignment=p["diagonal_alignment"],
                                     fill_value=-math.inf, implementation=attention_implementation.UNIFIED)
    i32, f32, boolean = data_type.INT32, data_type.FLOAT, data_type.BOOLEAN
    s_q, s_kv = int(s.dim[2]), int(s.dim[3])
    lens_q = seq_q if per_batch else s_q  # INT32 tensors, or INT32 scalars for static shapes
    lens_kv = seq_kv if per_batch else s_kv

    def indices(scores: Tensor) -> tuple[Tensor, Tensor]:
        # each bound indexes the scores it masks (the previous bound's output), with its own GEN_INDEX pair computed
        # in FLOAT (INT32 indices), row first, as the frontend builds them: one index pair shared by both bounds
        # (indexing the scores before either select) found no engine or gave wrong results on cuDNN 9.19 / H200
        return (rw.gen_index(scores, 2, compute_data_type=f32, out_data_type=i32),
                rw.gen_index(scores, 3, compute_data_type=f32, out_data_type=i32))

    if right is not None:  # keep row (+ s_kv - s_q) + R >= col
        row, col = indices(s)
        limit = row
        if bottom_right:
            limit = rw.add(limit, lens_kv, compute_data_type=i32, out_data_type=i32)
            limit = rw.sub(limit, lens_q, compute_data_type=i32, out_data_type=i32)
        if right:
            limit = rw.add(limit, int(right), compute_data_type=i32, out_data_type=i32)
        keep = rw.cmp_ge(limit, col, compute_data_type=boolean, out_data_type=boolean)
        s = rw.binary_select(s, -math.inf, keep, compute_data_type=f32)
    if left is not None:  # keep col + L (- s_kv + s_q) > row
        row, col = indices(s)
        if per_batch:
            start = rw.add(col, int(left), compute_data_type=i32, out_data_type=i32)
            start = rw.sub(start, lens_kv, compute_data_type=i32, out_data_type=i32)
            start = rw.add(start, lens_q, compute_data_type=i32, out_data_type=i32)
        else:
            bound = float(left - s_kv + s_q) if bottom_right else float(left)
            start = rw.add(col, bound, compute_data_type=f32, out_data_type=f32)
        keep = rw.cmp_gt(start, row, compute_data_type=boolean, out_data_type=boolean)
        s = rw.binary_select(s, -math.inf, keep, compute_data_type=f32)
    return s


def _alibi(rw: Any, s: Tensor, heads: int) -> Tensor:
    """ADD slope_h · (col - row). The frontend uploads its slope list (``get_alibi_slope``); here the
    slopes come from the head index h: with n = 2^floor(log2 heads), slope_h = 2^(-8 x / n) for x = h + 1 on the
    first n heads and x = h - n + 0.5 on the others (the list's second, interleaving series). The switch between
    the two is arithmetic, x = h + 1 - (2n + 1) · min(max(h - n + 0.5, 0), 0.5), not a compare and select: the
    H200's attention backward engines (cuDNN 9.19) take no select in the scores' chain."""
    f32, i32 = data_type.FLOAT, data_type.INT32
    n = 1 << (heads.bit_length() - 1)
    row = rw.gen_index(s, 2, compute_data_type=i32, out_data_type=i32)
    col = rw.gen_index(s, 3, compute_data_type=i32, out_data_type=i32)
    dist = rw.sub(col, row, compute_data_type=i32, out_data_type=f32)
    head = rw.gen_index(s, 1, compute_data_type=f32, out_data_type=f32)
    x = rw.add(head, 1.0, compute_data_type=f32)
    if n != heads:  # past the first n heads: step = 1 (h - n + 0.5 >= 0.5), before them 0 (it is <= -0.5)
        step = rw.min(rw.max(rw.sub(head, n - 0.5, compute_data_type=f32), 0.0, compute_data_type=f32), 0.5,
                      compute_data_type=f32)
        x = rw.sub(x, rw.mul(step, 2.0 * n + 1.0, compute_data_type=f32), compute_data_type=f32)
    slope = rw.exp(rw.mul(x, -8.0 * math.log(2.0) / n, compute_data_type=f32), compute_data_type=f32)
    return rw.add(s, rw.mul(dist, slope, compute_data_type=f32), compute_data_type=f32)


def _softmax(rw: Any, node: Node, s: Tensor, row_dims: list[int], out_type: Any) -> Tensor:
    """The composite softmax: max, sub, exp, sum (into score_max / score_sum_exp when given), the stats
    branch stats = max + ln(sum) (built even when Stats is not requested, unless the pair is), exp / sum."""
    f32, outs = data_type.FLOAT, node.outputs
    row_strides = [row_dims[1] * row_dims[2], row_dims[2], 1, 1]
    sink = node.inputs.get("SINK_TOKEN")
    # the probabilities' tensor is made first, as the frontend makes it: its uid below the statistics' puts the stats
    # branch before exp / sum and bmm2 in the order cuDNN sorts the graph's nodes into (the frontend's order)
    scores = [*row_dims[:3], int(s.dim[3])]
    probs = virtual(rw, "softmax_probs", scores, layout.row_major_strides(scores), out_type)
    m = outs.get("Max") or virtual(rw, "softmax_max", row_dims, row_strides, f32)
    if sink is None:
        rw.reduction(s, reduction_mode.MAX, compute_data_type=f32, out=m)
    else:  # the sink logit joins every row's max and sum (but not the scores)
        s_max = virtual(rw, "softmax_score_max", row_dims, row_strides, f32)
        rw.reduction(s, reduction_mode.MAX, compute_data_type=f32, out=s_max)
        rw.max(s_max, sink, compute_data_type=f32, out=m)
    e = rw.exp(rw.sub(s, m, compute_data_type=f32), compute_data_type=f32)
    z = outs.get("Sum_exp") or virtual(rw, "softmax_sum_exp", row_dims, row_strides, f32)
    if sink is None:
        rw.reduction(e, reduction_mode.ADD, compute_data_type=f32, out=z)
    else:
        exp_sink = rw.exp(rw.sub(sink, m, compute_data_type=f32), compute_data_type=f32)
        partial = virtual(rw, "softmax_partial_sum", row_dims, row_strides, f32)
        rw.reduction(e, reduction_mode.ADD, compute_data_type=f32, out=partial)
        rw.add(partial, exp_sink, compute_data_type=f32, out=z)
    if "Max" not in outs:
        stats = outs.get("Stats") or virtual(rw, "softmax_stats", row_dims, row_strides, f32)
        rw.add(m, rw.log(z, compute_data_type=f32), compute_data_type=f32, out=stats)
    rw.div(e, z, compute_data_type=f32, out=probs)
    return probs


def _dropout(rw: Any, node: Node, probs: Tensor, scores: list[int], out_type: Any) -> Tensor:
    p, ins, f32 = node.params, node.inputs, data_type.FLOAT
    if p["dropout"] == "mask":
        scaled = rw.mul(probs, ins["DROPOUT_SCALE"], compute_data_type=f32)
        return rw.mul(scaled, ins["DROPOUT_MASK"], compute_data_type=f32, out_data_type=out_type)
    drawn = rng_mask(rw, node, scores, "dropout_mask")
    if drawn is None:
        return probs
    mask, keep = drawn
    return rw.mul(rw.mul(probs, mask, compute_data_type=f32), 1.0 / keep, compute_data_type=f32,
                  out_data_type=out_type)


def auto_kept_unified(node: Node) -> bool:
    """Whether AUTO kept this node as the unified op with the composite to fall back to (not an explicit UNIFIED;
    no block mask, which the composite does not take): the spec's ``composite_fallback``."""
    return node.params.get("implementation") is attention_implementation.AUTO and "BLOCK_MASK" not in node.inputs



def rng_mask(rw: Any, node: Node, scores: list[int], name: str) -> tuple[Tensor, float] | None:
    """The RNG's keep mask over the scores (into the node's rng_dump if it has one, else a virtual ``name``) and
    its keep probability 1 - p; None where no RNG runs. Forward and backward draw the same mask from the same seed
    and offset."""
    p = rng_probability(node.params)
    if p is None:
        return None
    keep = 1.0 - p
    mask = node.outputs.get("RNG_DUMP")
    if mask is None:
        mask = virtual(rw, name, scores, layout.row_major_strides(scores), data_type.FLOAT)
    rw.rng(node.inputs["DROPOUT_SEED"], node.inputs["DROPOUT_OFFSET"], keep, scores, out=mask)
    return mask, keep


