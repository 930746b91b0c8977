"""sdpa's classic arguments and what they mean: the implementation gates, dropout, the statistics choice,
the masks (in the frontend's precedence and rules), the converters, and the dims and names every attention
family reads off a node."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._generated.names import attr, desc
from ...enums import diagonal_alignment
from ...errors import (
    InvalidTypeError,
    InvalidValueError,
    cudnnGraphNotSupportedError,
    not_supported,
    shape_error,
)
from ...ir.inference import int_at_least
from ...ir.node import Node

OP = "sdpa"
UNIFIED_DESCRIPTOR = desc.OPERATION_SDPA_FWD_DESCRIPTOR
UNIFIED_MIN_VERSION = 91301  # the frontend's gate (the descriptor exists since 9.13.0)
SEQ_LEN_MIN_VERSION = 91500  # unified: padding through SEQ_LEN_Q / SEQ_LEN_KV
DROPOUT_MIN_VERSION = 92200  # unified: dropout (the support check's gate; the attributes exist since 9.21)

PAGED_UNIFIED_MIN_VERSION = 91500  # unified: page tables (with the sequence lengths)
UNFUSE_FMA = attr.OPERATION_SDPA_FWD_UNFUSE_FMA  # SM100's softmax: fmul + fadd instead of FFMA2
BLOCK_MASK_ATTRIBUTE = attr.OPERATION_SDPA_FWD_BLOCK_MASK_DESC
BLOCK_MASK_MIN_VERSION = 91400  # unified: the block mask (the support check's gate; the attribute's too)
BLOCK_MASK_TILE = 128  # one block-mask entry per 128 x 128 tile of the scores (the header)


def _unpack(values: dict[str, Any]) -> None:
    """The classic call's composite arguments: attn_scale (float or tensor) and dropout (a tuple of a
    probability and two tensors, or of a mask and a scale) become tensor ports."""
    unpack_scale_and_dropout(values, OP)


def unpack_scale_and_dropout(values: dict[str, Any], method: str) -> None:
    """attn_scale (an int becomes a float) and the forward's dropout tuple, for sdpa and sdpa_fp8."""
    float_attn_scale(values)
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


def float_attn_scale(values: dict[str, Any]) -> None:
    """An int attn_scale becomes a float: a FLOAT by-value scalar, as the frontend's attn_scale_value (forward and
    backward alike)."""
    scale = values.get("attn_scale")
    if isinstance(scale, int) and not isinstance(scale, bool):
        values["attn_scale"] = float(scale)


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
    """s_kv as the frontend infers it (``SDPANodeBase::infer_s_kv``): paged_attention_max_seq_len_kv if
    given with a page table; else the sequence dim of an unpaged K or V; else the smaller span of the two page
    tables. Without a page table the limit is ignored (``sdpa`` refuses it there; ``sdpa_fp8`` accepts it, as the
    frontend does, and reads K's length)."""
    ins, limit = node.inputs, node.params.get("paged_attention_max_seq_len_kv")
    if limit is not None and paged(node):
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


