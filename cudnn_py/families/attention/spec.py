"""Scaled dot-product attention, forward: ``sdpa(q, k, v, ...) -> [O, Stats]``.

Q (b, h_q, s_q, d_qk), K (b, h_k, s_kv, d_qk), V (b, h_v, s_kv, d_v), O (b, h_q, s_q, d_v) - BHSD or BSHD through
strides; h_k and h_v divide h_q (GQA / MQA). ``O = softmax(scale · Q·Kᵀ + bias + alibi, masked) · V`` and
``Stats = max + ln Σ exp`` (natural-log LSE of the scaled, masked scores), (b, h_q, s_q, 1).

Two implementations, as in the frontend (``attention_implementation``):

* COMPOSITE: the decompose pass expands the node into MATMUL / POINTWISE / REDUCTION / RNG nodes in the frontend's
  order: K is described transposed in place, bmm1, scale, bias, alibi, padding, band masks (through the
  ``diagonal_band_mask`` composite), softmax with its statistics branch, dropout, bmm2;
* UNIFIED: the node stays one op, lowered to ``OPERATION_SDPA_FWD`` (cuDNN >= 9.13.1).

AUTO picks UNIFIED where its support rules hold on the running cuDNN and COMPOSITE otherwise, when the
graph is validated (the frontend decides when ``sdpa`` is called; the rules are the same). What a chosen
implementation cannot honour is refused there (``cudnnGraphNotSupportedError``), never dropped.

Paged K / V: K and V are page containers (num_blocks, h, block_size, d) read through INT32 page tables
(b, 1, ceil(s_kv / block_size), 1) up to seq_len_kv; the composite loads them with ``paged_cache_load`` nodes, the
unified op takes the tables. Ragged (THD) tensors are described by their ragged offsets alone.

Block mask: an INT8 (b, h_q, ceil(s_q / 128), ceil(s_kv / 128)) tensor, one entry per 128 x 128 tile of the scores
(cuDNN >= 9.14, the unified op only: COMPOSITE refuses it, AUTO takes UNIFIED or says why it cannot). The header
gives the formula ``softmax(padding_mask(block_mask(Q·Kᵀ) · scale)) · V`` but not the values' meaning; cudnn_py
reads nonzero as "keep the tile" and zero as "mask it" (-inf), and the GPU test says which reading cuDNN follows.
The frontend's packed layout is accepted too: UINT8 (or INT8) (b, h_q, ceil(s_q / 128), ceil(ceil(s_kv / 128) / 8)),
8 tiles a byte along s_kv (tile j is bit j % 8 of byte j // 8; a set bit keeps it). Any other layout or type is
refused as not supported (``cudnnGraphNotSupportedError``, as cuDNN refuses it), not as a shape error.
"""
# (this docstring is sdpa's doc in the builder and docs/api.md.) The arguments and their meaning are in ``options``,
# the implementation choice and the composite in ``decomposition``; what the other attention families read through
# this module is re-exported here.
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...enums import attention_implementation, data_type, diagonal_alignment
from ...errors import InvalidValueError
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, member, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register
from ..paged_cache.spec import check_page_table
from .decomposition import (  # noqa: F401  (re-exported)
    _dropout,
    _softmax,
    auto_kept_unified,
    band_mask,
    expand,
    k_transposed,
    matmul,
    modify_scores,
    rng_mask,
    transpose_in_place,
    v_loaded,
    virtual,
)
from .options import (  # noqa: F401  (re-exported)
    BLOCK_MASK_ATTRIBUTE,
    BLOCK_MASK_MIN_VERSION,
    BLOCK_MASK_TILE,
    DROPOUT_MIN_VERSION,
    OP,
    PAGED_UNIFIED_MIN_VERSION,
    SEQ_LEN_MIN_VERSION,
    UNIFIED_DESCRIPTOR,
    UNIFIED_MIN_VERSION,
    _bound,
    _callable,
    _fail,
    _finish,
    _optional_bool,
    _positive,
    _unpack,
    _unsupported,
    _where,
    check_mask_rules,
    dims_of,
    finish_masks,
    finish_stats_choice,
    kv_length,
    op_name,
    rng_probability,
    set_dropout_probability,
    unpack_scale_and_dropout,
)


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
    """Paged K / V caches: INT32 page tables of one entry per block of each sequence, the sequence
    lengths of the padding mask (the load reads seq_len_kv), max_seq_len_kv only with paging in ``sdpa`` (the
    frontend's fp16 / bf16 rule; ``sdpa_fp8`` has no such rule and ignores it without page tables: ``kv_length``)."""
    ins, p = node.inputs, node.params
    tables = [port for port in ("K", "V") if f"PAGE_TABLE_{port}" in ins]
    if p["paged_attention_max_seq_len_kv"] is not None and not tables and node.op == OP:
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


def block_mask_dims(d: Mapping[str, int], packed: bool = False) -> list[int]:
    """(b, h_q, ceil(s_q / 128), ceil(s_kv / 128)): one entry per 128 x 128 tile of the scores; packed, the last
    dim holds 8 tiles a byte: ceil(ceil(s_kv / 128) / 8)."""
    tiles = lambda n: -(-n // BLOCK_MASK_TILE)  # noqa: E731
    kv = tiles(d["s_kv"])
    return [d["b"], d["h_q"], tiles(d["s_q"]), -(-kv // 8) if packed else kv]


def block_mask_packed(node: Node) -> bool:
    """Whether the block mask is in the frontend's packed layout (one bit per tile along s_kv, tile j in bit j % 8
    of byte j // 8): a UINT8 mask, or an INT8 one whose last dim is the packed count and not the header's."""
    mask = node.inputs["BLOCK_MASK"]
    if mask.data_type is data_type.UINT8:
        return True
    d = dims_of(node)
    dims = [int(x) for x in mask.dim]
    return dims != block_mask_dims(d) and dims == block_mask_dims(d, packed=True)


def _check_block_mask(node: Node, d: Mapping[str, int]) -> None:
    """The header's layout (INT8, one entry per tile) or the frontend's packed one (UINT8 or INT8, 8 tiles a byte
    along s_kv), with exactly those dims: the header names no broadcast, so none is accepted. cuDNN's finalize
    checks only b and h_q; any other layout or type is a configuration cuDNN does not run, refused as not
    supported (the official module's class), not as a shape error."""
    mask = node.inputs.get("BLOCK_MASK")
    if mask is None:
        return
    require_dims(op_name(node), node, mask)
    if mask.data_type is data_type.NOT_SET:
        raise _fail(node, mask, "a block mask must be INT8 (set data_type=INT8), got NOT_SET")
    if mask.data_type not in (data_type.INT8, data_type.UINT8):
        raise _unsupported(node, mask, f"a block mask must be INT8 (or UINT8, packed), got {mask.data_type.name}")
    want, packed = block_mask_dims(d), block_mask_dims(d, packed=True)
    dims = [int(x) for x in mask.dim]
    if dims != packed and (mask.data_type is data_type.UINT8 or dims != want):
        raise _unsupported(node, mask, f"a block mask needs dims [b, h_q, ceil(s_q / 128), ceil(s_kv / 128)] = "
                           f"{want} (INT8) or, packed 8 tiles a byte, {packed} (s_q {d['s_q']}, s_kv {d['s_kv']}; "
                           f"one entry per 128 x 128 tile of the scores, no broadcasting), got {dims}")
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

