"""Scaled dot-product attention, forward (``node_lowering.md`` §14): ``sdpa(q, k, v, ...) -> [O, Stats]``.

Q (b, h_q, s_q, d_qk), K (b, h_k, s_kv, d_qk), V (b, h_v, s_kv, d_v), O (b, h_q, s_q, d_v) - BHSD or BSHD through
strides; h_k and h_v divide h_q (GQA / MQA). ``O = softmax(scale · Q·Kᵀ + bias + alibi, masked) · V`` and
``Stats = max + ln Σ exp`` (natural-log LSE of the scaled, masked scores), (b, h_q, s_q, 1).

Two implementations, as in the frontend (``attention_implementation``):

* COMPOSITE: the decompose pass expands the node into MATMUL / POINTWISE / REDUCTION / RNG nodes in the frontend's
  order (§14.6): K is described transposed in place, bmm1, scale, bias, alibi, padding, band masks (through the
  ``diagonal_band_mask`` composite), softmax with its statistics branch, dropout, bmm2;
* UNIFIED: the node stays one op, lowered to ``OPERATION_SDPA_FWD`` (cuDNN >= 9.13.1, §14.8).

AUTO picks UNIFIED where its support rules (§14.3) hold on the running cuDNN and COMPOSITE otherwise, when the
graph is validated (the frontend decides when ``sdpa`` is called; the rules are the same). What a chosen
implementation cannot honour is refused there (``cudnnGraphNotSupportedError``), never dropped.

Paged K / V: K and V are page containers (num_blocks, h, block_size, d) read through INT32 page tables
(b, 1, ceil(s_kv / block_size), 1) up to seq_len_kv; the composite loads them with ``paged_cache_load`` nodes, the
unified op takes the tables. Ragged (THD) tensors are described by their ragged offsets alone (§14.5).

Block mask: an INT8 (b, h_q, ceil(s_q / 128), ceil(s_kv / 128)) tensor, one entry per 128 x 128 tile of the scores
(cuDNN >= 9.14, the unified op only: COMPOSITE refuses it, AUTO takes UNIFIED or says why it cannot). The header
gives the formula ``softmax(padding_mask(block_mask(Q·Kᵀ) · scale)) · V`` but not the values' meaning; cudnn_py
reads nonzero as "keep the tile" and zero as "mask it" (-inf), and the GPU test says which reading cuDNN follows.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...backend import versions
from ...enums import attention_implementation, data_type, diagonal_alignment, reduction_mode
from ...errors import (
    InvalidTypeError,
    InvalidValueError,
    NotImplementedOptionError,
    cudnnGraphNotSupportedError,
    not_supported,
    shape_error,
    version_string,
)
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, int_at_least, member, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register
from ...ir.tensor import Tensor
from ..masks import spec as masks
from ..paged_cache.spec import check_page_table
from . import score_mod

OP = "sdpa"
UNIFIED_DESCRIPTOR = "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR"
UNIFIED_MIN_VERSION = 91301  # the frontend's gate (the descriptor exists since 9.13.0)
SEQ_LEN_MIN_VERSION = 91500  # unified: padding through SEQ_LEN_Q / SEQ_LEN_KV
DROPOUT_MIN_VERSION = 92200  # unified: dropout (the support check's gate; the attributes exist since 9.21)

PAGED_UNIFIED_MIN_VERSION = 91500  # unified: page tables (with the sequence lengths)
UNFUSE_FMA = "CUDNN_ATTR_OPERATION_SDPA_FWD_UNFUSE_FMA"  # SM100's softmax: fmul + fadd instead of FFMA2 (§14.8)
BLOCK_MASK_ATTRIBUTE = "CUDNN_ATTR_OPERATION_SDPA_FWD_BLOCK_MASK_DESC"
BLOCK_MASK_MIN_VERSION = 91400  # unified: the block mask (the support check's gate; the attribute's too)
BLOCK_MASK_TILE = 128  # one block-mask entry per 128 x 128 tile of the scores (the header)


def _unpack(values: dict[str, Any]) -> None:
    """The classic call's composite arguments: attn_scale (float or tensor) and dropout (a tuple of a
    probability and two tensors, or of a mask and a scale) become tensor ports."""
    unpack_scale_and_dropout(values, OP)


def unpack_scale_and_dropout(values: dict[str, Any], method: str) -> None:
    """attn_scale (an int becomes a float) and the forward's dropout tuple, for sdpa and sdpa_fp8."""
    scale = values.get("attn_scale")
    if isinstance(scale, int) and not isinstance(scale, bool):
        values["attn_scale"] = float(scale)  # a FLOAT by-value scalar, as the frontend's attn_scale_value
    dropout = values.get("dropout")
    values["dropout"] = None
    if dropout is None:
        return
    if not isinstance(dropout, (tuple, list)) or len(dropout) not in (2, 3):
        raise InvalidTypeError(f"{method}(): dropout must be (probability, seed, offset) or (mask, scale)")
    if len(dropout) == 3:
        set_dropout_probability(values, method, *dropout)
    else:
        values["dropout"] = "mask"
        values["dropout_mask"], values["dropout_scale"] = dropout


def set_dropout_probability(values: dict[str, Any], method: str, p: Any, seed: Any, offset: Any) -> None:
    """The (probability, seed, offset) form of dropout, forward and backward alike."""
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise InvalidTypeError(f"{method}(): dropout probability must be a float, got {p!r}")
    if not 0.0 <= float(p) < 1.0:
        raise InvalidValueError(f"{method}(): dropout probability must lie in [0, 1), got {p}")
    if float(p) == 0.0 and values.get("rng_dump") is not None:
        # probability 0 builds no RNG (as in the frontend), so nothing would write the dump: refused, not ignored
        raise InvalidValueError(f"{method}(): rng_dump needs a dropout probability above 0 (with 0 no RNG runs and "
                         "the dump would stay unwritten)")
    values["dropout"] = float(p)
    values["dropout_seed"], values["dropout_offset"] = seed, offset


def drops(params: Mapping[str, Any]) -> bool:
    """Whether the node drops anything: a mask, or a probability above 0 (0 builds no RNG)."""
    return params.get("dropout") not in (None, 0.0)


def rng_probability(params: Mapping[str, Any]) -> float | None:
    """The probability the dropout's RNG drops with; None where no RNG runs (no dropout, a mask, probability 0)."""
    p = params.get("dropout")
    return None if p in (None, 0.0, "mask") else float(p)


def rng_mask(rw: Any, node: Node, scores: list[int], name: str) -> tuple[Tensor, float] | None:
    """The RNG's keep mask over the scores (into the node's rng_dump if it has one, else a virtual ``name``) and
    its keep probability 1 - p; None where no RNG runs. Forward and backward draw the same mask from the same seed
    and offset (§14.6 step 12, §15.3 step 1)."""
    p = rng_probability(node.params)
    if p is None:
        return None
    keep = 1.0 - p
    mask = node.outputs.get("RNG_DUMP")
    if mask is None:
        mask = virtual(rw, name, scores, layout.row_major_strides(scores), data_type.FLOAT)
    rw.rng(node.inputs["DROPOUT_SEED"], node.inputs["DROPOUT_OFFSET"], keep, scores, out=mask)
    return mask, keep


def _finish(params: dict[str, Any]) -> None:
    finish_stats_choice(params, OP)
    finish_masks(params)


def finish_stats_choice(params: dict[str, Any], method: str) -> None:
    gen, inference = params.pop("generate_stats"), params.pop("is_inference")
    if (gen is None) == (inference is None):
        raise InvalidValueError(f"{method}(): give exactly one of generate_stats and is_inference (generate_stats = "
                                f"not "
                         "is_inference)")
    params["generate_stats"] = bool(gen) if gen is not None else not bool(inference)


def finish_masks(params: dict[str, Any]) -> None:
    """The mask arguments in the frontend's terms, with its precedence (the builder accepts every combination, as
    the official builder does): a causal flag is the right bound 0 and overrides diagonal_band_right_bound and
    diagonal_alignment, the bottom-right flag wins over the top-left one, and diagonal_band_left_bound wins over its
    alias sliding_window_length. What the frontend does not support is refused at ``validate()``
    (:func:`check_mask_rules`)."""
    window, left = params.pop("sliding_window_length"), params["diagonal_band_left_bound"]
    if left is None and window is not None:
        params["diagonal_band_left_bound"] = window
    causal, bottom_right = params.pop("use_causal_mask"), params.pop("use_causal_mask_bottom_right")
    if causal or bottom_right:
        params["diagonal_band_right_bound"] = 0
        params["diagonal_alignment"] = diagonal_alignment.BOTTOM_RIGHT if bottom_right else \
            diagonal_alignment.TOP_LEFT


def check_mask_rules(node: Node) -> None:
    """The mask rules the frontend checks at ``validate()`` (its SDPA pre-validation, forward and backward): what
    it does not support raises ``cudnnGraphNotSupportedError``, ill-formed values ``ValueError``."""
    p = node.params
    left, right = p["diagonal_band_left_bound"], p["diagonal_band_right_bound"]
    if p["use_alibi_mask"] and right != 0:
        raise not_supported(op_name(node), node.name, "use_alibi_mask needs a causal mask (diagonal_band_right_bound "
                            "0), as in the frontend")
    if p.get("score_mod") is not None:
        others = [name for name, on in (("use_alibi_mask", p["use_alibi_mask"]),
                                        ("use_padding_mask", p["use_padding_mask"]),
                                        ("a causal mask / right bound", right is not None),
                                        ("a left bound", left is not None)) if on]
        if others:
            raise not_supported(op_name(node), node.name, f"score_mod excludes {', '.join(others)} (the frontend's "
                                "rule: build the masks in the callback)")
    if left is not None and left < 1:
        raise InvalidValueError(f"{_where(node)}: diagonal_band_left_bound (sliding_window_length) must be >= 1, "
                                f"got {left}")
    if right is not None and right < 0:
        raise InvalidValueError(f"{_where(node)}: diagonal_band_right_bound must be >= 0, got {right}")


_bound = int_at_least(None, optional=True)  # band bounds, sliding windows: their ranges are validate()'s
_positive = int_at_least(1, optional=True)  # max_total_seq_len_*, max_seq_len_kv


def _callable(v: Any) -> Any:
    if v is not None and not callable(v):
        raise InvalidTypeError(f"needs a callable (graph, score) -> score, got {v!r}")
    return v


def _optional_bool(v: Any) -> bool | None:
    return None if v is None else bool(v)


# ---- inference and validation -----------------------------------------------------------------------------------
def dims_of(node: Node) -> dict[str, int]:
    q, k, v = (node.inputs[p] for p in ("Q", "K", "V"))
    return {"b": int(q.dim[0]), "h_q": int(q.dim[1]), "s_q": int(q.dim[2]), "d_qk": int(q.dim[3]),
            "h_k": int(k.dim[1]), "s_kv": kv_length(node), "h_v": int(v.dim[1]), "d_v": int(v.dim[3])}


def kv_length(node: Node) -> int:
    """s_kv as the frontend infers it (``SDPANodeBase::infer_s_kv``, §14.5): paged_attention_max_seq_len_kv if
    given; else the sequence dim of an unpaged K or V; else the smaller span of the two page tables."""
    ins, limit = node.inputs, node.params.get("paged_attention_max_seq_len_kv")
    if limit is not None:
        return int(limit)
    for port in ("K", "V"):
        if f"PAGE_TABLE_{port}" not in ins:
            return int(ins[port].dim[2])
    return min(int(ins[f"PAGE_TABLE_{port}"].dim[2]) * int(ins[port].dim[2]) for port in ("K", "V"))


def paged(node: Node) -> bool:
    return "PAGE_TABLE_K" in node.inputs or "PAGE_TABLE_V" in node.inputs


def op_name(node: Node) -> str:
    """The classic method of an attention node (sdpa, sdpa_fp8, ...), for its error messages."""
    return node.spec.method if node.spec is not None else OP


def _where(node: Node) -> str:
    return f"{op_name(node)} node {node.name!r}"


def _fail(node: Node, t: Any, message: str) -> ValueError:
    return shape_error(op_name(node), node.name, t, message)


def _unsupported(node: Node, t: Any, message: str) -> cudnnGraphNotSupportedError:
    """A configuration the frontend refuses as not supported (GRAPH_NOT_SUPPORTED at validate)."""
    return not_supported(op_name(node), node.name, message, t)


def infer(node: Node, ctx: InferenceContext) -> None:
    q, k, v = node.inputs["Q"], node.inputs["K"], node.inputs["V"]
    for t in (q, k, v):
        require_dims(op_name(node), node, t)
        if len(t.dim) != 4:
            raise _fail(node, t, f"needs 4 dims (b, h, s, d), got {list(t.dim)}")
        if int(t.stride[3]) != 1:
            raise _unsupported(node, t, f"the head dim must be innermost (stride[3] == 1), got strides "
                               f"{list(t.stride)}")
    for port in ("PAGE_TABLE_K", "PAGE_TABLE_V"):
        if port in node.inputs:
            require_dims(OP, node, node.inputs[port])
    d = dims_of(node)
    if int(k.dim[3]) != d["d_qk"]:
        raise _fail(node, k, f"head dim {k.dim[3]} differs from q's {d['d_qk']} (q and k need one head dim)")
    _check_paging(node, d)
    for port, t in (("K", k), ("V", v)):
        if f"PAGE_TABLE_{port}" in node.inputs:
            continue  # a page container: (num_blocks, h, block_size, d), checked by _check_paging
        if int(t.dim[2]) != d["s_kv"]:
            raise _fail(node, t, f"sequence length {t.dim[2]} differs from s_kv {d['s_kv']}")
        if int(t.dim[0]) != d["b"]:
            raise _fail(node, t, f"batch {t.dim[0]} differs from q's {d['b']}")
    for t in (k, v):
        if d["h_q"] % int(t.dim[1]):
            raise _unsupported(node, t, f"{t.dim[1]} heads do not divide q's {d['h_q']} heads (GQA / MQA needs a "
                               "divisor)")
    for t, dim in ((q, d["d_qk"]), (v, d["d_v"])):
        if dim % 8:
            raise _unsupported(node, t, f"head dim {dim} is not a multiple of 8 (cuDNN's fp16 / bf16 attention)")
    _check_optional_inputs(node, d)
    _infer_outputs(node, d)
    fill_data_types(node, ctx, q)
    stats = node.outputs.get("Stats")
    if stats is not None and int(stats.stride[-1]) != 1 and int(stats.dim[-1]) != 1:
        raise _fail(node, stats, f"strides {list(stats.stride)} are not the statistics' layout")


def _check_paging(node: Node, d: Mapping[str, int]) -> None:
    """Paged K / V caches (§14.4, §11): INT32 page tables of one entry per block of each sequence, the sequence
    lengths of the padding mask (the load reads seq_len_kv), max_seq_len_kv only with paging."""
    ins, p = node.inputs, node.params
    tables = [port for port in ("K", "V") if f"PAGE_TABLE_{port}" in ins]
    if p["paged_attention_max_seq_len_kv"] is not None and not tables:
        raise _unsupported(node, None, "paged_attention_max_seq_len_kv is only read with a page table "
                           "(paged_attention_k_table / paged_attention_v_table)")
    if not tables:
        return
    if "SEQ_LEN_Q" not in ins or "SEQ_LEN_KV" not in ins:
        raise _unsupported(node, None, "paged attention needs seq_len_q and seq_len_kv (the pages are read up to "
                           "seq_len_kv), as in the frontend")
    for port in tables:
        container = ins[port]
        if container.ragged_offset is not None:
            raise _fail(node, container, "a page container cannot be ragged")
        check_page_table(OP, node, ins[f"PAGE_TABLE_{port}"], d["b"], d["s_kv"], int(container.dim[2]))


def _check_optional_inputs(node: Node, d: Mapping[str, int]) -> None:
    p, ins = node.params, node.inputs
    scores = [d["b"], d["h_q"], d["s_q"], d["s_kv"]]
    bias = ins.get("BIAS")
    if bias is not None:
        require_dims(op_name(node), node, bias)
        if len(bias.dim) != 4 or any(int(x) not in (1, y) for x, y in zip(bias.dim, scores)):
            raise _fail(node, bias, f"dims {list(bias.dim)} do not broadcast to the scores {scores} (4 dims, each "
                        "1 or the score's)")
        if bias.data_type is data_type.BOOLEAN:
            raise _unsupported(node, bias, "a BOOLEAN bias is not supported (use a mask)")
    sink = ins.get("SINK_TOKEN")
    if sink is not None:
        require_dims(op_name(node), node, sink)
        if [int(x) for x in sink.dim] != [1, d["h_q"], 1, 1]:
            raise _fail(node, sink, f"a sink token needs dims [1, h_q, 1, 1] = {[1, d['h_q'], 1, 1]} (one logit per "
                        f"head), got {list(sink.dim)}")
        if d["s_q"] == 1:
            raise _unsupported(node, sink, "no sink token in decode (s_q == 1), as in the frontend")
    _check_block_mask(node, d)
    scale = ins.get("ATTN_SCALE")
    if scale is not None and layout.numel(scale.dim) != 1:
        raise _fail(node, scale, f"attn_scale must be one value, got dims {list(scale.dim)}")
    seq = [ins.get("SEQ_LEN_Q"), ins.get("SEQ_LEN_KV")]
    if p["use_padding_mask"] and None in seq:
        raise InvalidValueError(f"{_where(node)}: use_padding_mask needs both seq_len_q and seq_len_kv")
    if (seq[0] is None) != (seq[1] is None):
        raise InvalidValueError(f"{_where(node)}: seq_len_q and seq_len_kv are given together, as in the frontend")
    if not p["use_padding_mask"] and p.get("score_mod") is None and any(t is not None for t in seq):
        raise InvalidValueError(f"{_where(node)}: seq_len_q / seq_len_kv are only read with use_padding_mask=True (or "
                         "by a score_mod)")
    for t in seq:
        if t is None:
            continue
        if [int(x) for x in t.dim] != [d["b"], 1, 1, 1]:
            raise _fail(node, t, f"a sequence-length tensor needs dims [b, 1, 1, 1] = {[d['b'], 1, 1, 1]}, got "
                        f"{list(t.dim)}")
        if t.data_type not in (data_type.INT32, data_type.NOT_SET):
            raise _fail(node, t, f"a sequence-length tensor must be INT32, got {t.data_type.name}")
    # q, k, v, o, and the backward's dO, dQ, dK, dV (a page container's offset is refused by _check_paging)
    ragged = [t for t in list(ins.values()) + list(node.outputs.values()) if t.ragged_offset is not None]
    for t in ragged:
        off = t.ragged_offset
        assert off is not None
        if off.data_type not in (data_type.INT32, data_type.INT64):
            raise _fail(node, t, f"ragged offset {off.name!r} must be INT32 or INT64, got {off.data_type.name}")
        if [int(x) for x in off.dim] != [d["b"] + 1, 1, 1, 1]:
            raise _fail(node, t, f"ragged offset {off.name!r} needs dims [b + 1, 1, 1, 1] = "
                        f"{[d['b'] + 1, 1, 1, 1]}, got {list(off.dim)}")
    if ragged and not p["use_padding_mask"]:
        raise _unsupported(node, ragged[0], "ragged (THD) tensors need use_padding_mask with seq_len_q / "
                           "seq_len_kv")
    check_mask_rules(node)
    if p["diagonal_alignment"] is diagonal_alignment.BOTTOM_RIGHT and p["diagonal_band_right_bound"] is not None:
        if d["s_q"] > d["s_kv"] and not p["use_padding_mask"]:
            raise _unsupported(node, None, f"a bottom-right causal mask needs s_q <= s_kv (got {d['s_q']} > "
                               f"{d['s_kv']}; slice q to s_kv rows), as in the frontend")
        if bias is not None or p["use_alibi_mask"] or p["dropout"] is not None:
            raise _unsupported(node, None, "a bottom-right causal mask excludes bias, alibi and dropout, as in the "
                               "frontend")
    if p["diagonal_band_left_bound"] is not None and d["s_q"] > d["s_kv"] and not p["use_padding_mask"]:
        raise _unsupported(node, None, f"a sliding window needs s_q <= s_kv (got {d['s_q']} > {d['s_kv']}), as "
                           "in the frontend")
    if p["dropout"] == "mask":
        mask = ins["DROPOUT_MASK"]
        require_dims(op_name(node), node, mask)
        if len(mask.dim) != 4 or any(int(x) not in (1, y) for x, y in zip(mask.dim, scores)):
            raise _fail(node, mask, f"dropout mask dims {list(mask.dim)} do not broadcast to the scores {scores}")
        if layout.numel(ins["DROPOUT_SCALE"].dim) != 1:
            raise _fail(node, ins["DROPOUT_SCALE"], "the dropout scale must be one value")
    if p["dropout"] is not None and p["dropout"] != "mask":
        for port in ("DROPOUT_SEED", "DROPOUT_OFFSET"):
            t = ins[port]
            if layout.numel(t.dim) != 1:
                raise _fail(node, t, f"the dropout {port[8:].lower()} must be one value, got dims {list(t.dim)}")
    dump = node.outputs.get("RNG_DUMP")
    if dump is not None:
        if p["dropout"] is None or p["dropout"] == "mask":
            raise InvalidValueError(f"{_where(node)}: rng_dump needs dropout=(probability, seed, offset)")
        if [int(x) for x in dump.dim] != scores:
            raise _fail(node, dump, f"rng_dump needs the scores' dims {scores}, got {list(dump.dim)}")


def block_mask_dims(d: Mapping[str, int]) -> list[int]:
    """(b, h_q, ceil(s_q / 128), ceil(s_kv / 128)): one entry per 128 x 128 tile of the scores."""
    tiles = lambda n: -(-n // BLOCK_MASK_TILE)  # noqa: E731
    return [d["b"], d["h_q"], tiles(d["s_q"]), tiles(d["s_kv"])]


def _check_block_mask(node: Node, d: Mapping[str, int]) -> None:
    """INT8 with exactly the tile dims: the header names no broadcast, so none is accepted (not even a unit
    batch or head dim)."""
    mask = node.inputs.get("BLOCK_MASK")
    if mask is None:
        return
    require_dims(op_name(node), node, mask)
    want = block_mask_dims(d)
    if [int(x) for x in mask.dim] != want:
        raise _fail(node, mask, f"a block mask needs dims [b, h_q, ceil(s_q / 128), ceil(s_kv / 128)] = {want} "
                    f"(s_q {d['s_q']}, s_kv {d['s_kv']}; one entry per 128 x 128 tile of the scores, no "
                    f"broadcasting), got {list(mask.dim)}")
    if mask.data_type is not data_type.INT8:
        raise _fail(node, mask, f"a block mask must be INT8 (set data_type=INT8), got {mask.data_type.name}")
    if mask.ragged_offset is not None:
        raise _fail(node, mask, "a block mask cannot be ragged")


def _infer_outputs(node: Node, d: Mapping[str, int]) -> None:
    q, o = node.inputs["Q"], node.outputs["O"]
    o_dims = [d["b"], d["h_q"], d["s_q"], d["d_v"]]
    if not o.dim:
        o._infer_set("dim", o_dims)
    elif [int(x) for x in o.dim] != o_dims:
        raise _fail(node, o, f"dims {list(o.dim)} are not (b, h_q, s_q, d_v) = {o_dims}")
    if not o.stride:  # Q's layout (BHSD, BSHD, SBHD, ...)
        o._infer_set("stride", layout.strides_from_order(o_dims, layout.order_preserving_format(q.stride, 4)))
    if int(o.stride[3]) != 1:
        raise _fail(node, o, f"the head dim must be innermost (stride[3] == 1), got strides {list(o.stride)}")
    dump = node.outputs.get("RNG_DUMP")
    if dump is not None and dump.dim and not dump.stride:
        dump._infer_set("stride", layout.row_major_strides(dump.dim))
    rows = [node.outputs.get(port) for port in ("Stats", "Max", "Sum_exp")]
    if (rows[1] is None) != (rows[2] is None) or (rows[1] is not None and rows[0] is not None):
        raise InvalidValueError(f"{_where(node)}: the softmax statistics come as Stats (generate_stats=True) or "
                         "as score_max with score_sum_exp, not both and not one of the pair")
    for t in rows:
        if t is None:
            continue
        s_dims = [d["b"], d["h_q"], d["s_q"], 1]
        if not t.dim:
            t._infer_set("dim", s_dims)
        elif [int(x) for x in t.dim] != s_dims:
            raise _fail(node, t, f"dims {list(t.dim)} are not (b, h_q, s_q, 1) = {s_dims}")
        if not t.stride:
            t._infer_set("stride", [d["h_q"] * d["s_q"], d["s_q"], 1, 1])


# ---- implementation choice ----------------------------------------------------------------------------------------
def unified_refusal(node: Node, available: Any) -> str | None:
    """Why the unified SDPA_FWD op cannot take this node on the running cuDNN (node_lowering.md §14.3), or None."""
    p, ins = node.params, node.inputs
    if not available(UNIFIED_DESCRIPTOR, UNIFIED_MIN_VERSION):
        return "the unified SDPA_FWD op needs cuDNN >= 9.13.1"
    if p["compute_data_type"] is not data_type.FLOAT:
        return f"the unified op computes in FLOAT (compute_data_type is {p['compute_data_type'].name})"
    if ins["Q"].data_type not in (data_type.HALF, data_type.BFLOAT16):
        return f"the unified op takes HALF / BFLOAT16 q, k, v (q is {ins['Q'].data_type.name})"
    if p["use_padding_mask"] and not available("CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC", SEQ_LEN_MIN_VERSION):
        return "the unified op's padding mask (seq_len_q / seq_len_kv) needs cuDNN >= 9.15.0"
    if paged(node) and not available("CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC", PAGED_UNIFIED_MIN_VERSION):
        return "the unified op's paged attention needs cuDNN >= 9.15.0"
    if "BLOCK_MASK" in ins and not available(BLOCK_MASK_ATTRIBUTE, BLOCK_MASK_MIN_VERSION):
        return "the unified op's block mask needs cuDNN >= 9.14.0"
    if p["dropout"] == "mask":
        return "the unified op takes no custom dropout mask"
    if drops(p):
        if not available("CUDNN_ATTR_OPERATION_SDPA_FWD_DROPOUT_PROBABILITY", DROPOUT_MIN_VERSION):
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


# ---- the composite decomposition (node_lowering.md §14.6) -------------------------------------------------------
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
    # the last op before bmm2 writes Q's type: the backend wants bmm2's A in the I/O type (§14.6 step 14)
    probs = _softmax(rw, node, s, [b, h, s_q, 1], f32 if drops(node.params) else q.data_type)
    probs = _dropout(rw, node, probs, scores, q.data_type)
    matmul(rw, probs, v_loaded(rw, node, d), node.outputs["O"], {"M_OVERRIDE": seq_q, "K_OVERRIDE": seq_kv})
    return True


def k_transposed(rw: Any, node: Node, d: Mapping[str, int]) -> Tensor:
    """bmm1's Kᵀ (§14.6 step 1): the caller's K described transposed in place, or a paged cache gathered through
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
    """bmm2's V (§14.6 step 15): the caller's V, or a paged cache gathered as BHSD."""
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
    order (§14.6 steps 3-8)."""
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
    """The causal / sliding-window masks (§13, as ``attn_score_modifiers.h: sliding_window_mask`` builds them):
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
    """ADD slope_h · (col - row) (§14.6.7). The frontend uploads its slope list (``get_alibi_slope``); here the
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
    """The composite softmax (§12): max, sub, exp, sum (into score_max / score_sum_exp when given), the stats
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


def _stats_wanted(params: Mapping[str, Any]) -> bool:
    return bool(params["generate_stats"])


# the dropout tuple's tensors, filled by the unpack step (not classic keywords); the backward adds its scale_inv
DROPOUT_PORTS = (
    Port("DROPOUT_SEED", "dropout_seed", optional=True), Port("DROPOUT_OFFSET", "dropout_offset", optional=True),
    Port("DROPOUT_MASK", "dropout_mask", optional=True), Port("DROPOUT_SCALE", "dropout_scale", optional=True))

SDPA_ORDER = ("q", "k", "v", "is_inference", "attn_scale", "bias", "block_mask", "use_alibi_mask",
              "use_padding_mask", "seq_len_q", "seq_len_kv", "use_causal_mask", "use_causal_mask_bottom_right",
              "sliding_window_length", "diagonal_alignment", "diagonal_band_left_bound", "diagonal_band_right_bound",
              "dropout", "rng_dump", "paged_attention_k_table", "paged_attention_v_table",
              "paged_attention_max_seq_len_kv", "compute_data_type", "name", "score_mod", "generate_stats",
              "implementation", "score_max", "score_sum_exp", "sink_token", "unfuse_fma")

SDPA = OpSpec(
    method="sdpa", kind="sdpa",
    inputs=(Port("Q", "q"), Port("K", "k"), Port("V", "v"), Port("ATTN_SCALE", "attn_scale", optional=True),
            Port("BIAS", "bias", optional=True), Port("BLOCK_MASK", "block_mask", optional=True),
            Port("SEQ_LEN_Q", "seq_len_q", optional=True), Port("SEQ_LEN_KV", "seq_len_kv", optional=True),
            Port("PAGE_TABLE_K", "paged_attention_k_table", optional=True),
            Port("PAGE_TABLE_V", "paged_attention_v_table", optional=True),
            Port("SINK_TOKEN", "sink_token", optional=True)) + DROPOUT_PORTS,
    outputs=(Output("O"), Output("Stats", _stats_wanted),
             Output("RNG_DUMP", adopt="rng_dump"),
             Output("Max", adopt="score_max"),
             Output("Sum_exp", adopt="score_sum_exp")),
    infer=infer,
    params=(Param("is_inference", None, convert=_optional_bool),
            Param("use_alibi_mask", False, convert=bool), Param("use_padding_mask", False, convert=bool),
            Param("use_causal_mask", False, convert=bool), Param("use_causal_mask_bottom_right", False, convert=bool),
            Param("sliding_window_length", None, convert=_bound),
            Param("diagonal_alignment", diagonal_alignment.TOP_LEFT, convert=member(diagonal_alignment)),
            Param("diagonal_band_left_bound", None, convert=_bound),
            Param("diagonal_band_right_bound", None, convert=_bound),
            Param("dropout", None),
            Param("paged_attention_max_seq_len_kv", None, convert=_positive),
            Param("score_mod", None, convert=_callable),
            Param("generate_stats", None, convert=_optional_bool),
            Param("implementation", attention_implementation.AUTO, convert=member(attention_implementation)),
            Param("unfuse_fma", False, convert=bool)),
    order=SDPA_ORDER, varargs=True, out_dims=True, returns_list=True, unpack=_unpack, finish=_finish,
    expand=expand, requires=(UNIFIED_DESCRIPTOR,), min_version=UNIFIED_MIN_VERSION,
    composite_fallback=auto_kept_unified,
    doc="sdpa(q, k, v, is_inference=None, attn_scale=None, bias=None, ..., generate_stats=None, "
        "implementation=AUTO, ...) -> [O, Stats] (Stats None unless generate_stats). " + (__doc__ or ""),
)
register(SDPA)
