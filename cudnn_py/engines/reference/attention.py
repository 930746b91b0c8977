"""Attention from its definition (not from the decomposition), and the RNG op, which no python engine can run."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...enums import diagonal_alignment
from .registry import Read, WithExtra, reference, scalar


def _sdpa_check(node: Any) -> str | None:
    p = node.params
    if p["dropout"] is not None and p["dropout"] != "mask" and p["dropout"] != 0.0:
        return "sdpa with dropout=(probability, seed, offset): cuDNN's Philox bits cannot be reproduced here"
    if any(t.ragged_offset is not None for t in list(node.inputs.values()) + list(node.outputs.values())):
        return "sdpa over ragged (THD) tensors"
    return None


def alibi_slopes(heads: int) -> np.ndarray:
    """The frontend's slopes (``get_alibi_slope``): n = 2^floor(log2 h); 2^(-8 x / n) for x = 1..n, then for the
    remaining heads x = 0.5, 1.5, ... of the doubled series."""
    n = 2 ** int(np.floor(np.log2(heads)))
    xs = list(np.arange(1, n + 1, dtype=np.float64))
    xs += list(np.arange(0.5, heads - n, 1.0))[: heads - n]
    return np.array([2.0 ** (-8.0 * x / n) for x in xs[:heads]])


@reference("sdpa", _sdpa_check)
def _sdpa(node: Any, read: Read) -> np.ndarray:
    """softmax(scale · Q Kᵀ + bias + alibi, masked) · V, heads of K and V repeated for GQA; Stats = max + ln Σ exp.
    Masked scores are -inf; a fully masked row is NaN (what its definition gives)."""
    p, ins = node.params, node.inputs
    q, k, v = read(ins["Q"]), read(ins["K"]), read(ins["V"])
    h_q = q.shape[1]
    k = np.repeat(k, h_q // k.shape[1], axis=1)
    v = np.repeat(v, h_q // v.shape[1], axis=1)
    s = q @ np.swapaxes(k, -1, -2)
    if "ATTN_SCALE" in ins:
        s = s * scalar(read, ins["ATTN_SCALE"])
    if "BIAS" in ins:
        s = s + read(ins["BIAS"])
    s_q, s_kv = s.shape[-2:]
    rows, cols = np.arange(s_q).reshape(-1, 1), np.arange(s_kv).reshape(1, -1)
    if p["use_alibi_mask"]:
        s = s + alibi_slopes(h_q).reshape(1, -1, 1, 1) * (cols - rows)
    keep = np.ones(s.shape, dtype=bool)
    if p["use_padding_mask"]:
        lq = read(ins["SEQ_LEN_Q"]).reshape(-1, 1, 1, 1)
        lkv = read(ins["SEQ_LEN_KV"]).reshape(-1, 1, 1, 1)
        keep &= (rows < lq) & (cols < lkv)
    shift = s_kv - s_q if p["diagonal_alignment"] is diagonal_alignment.BOTTOM_RIGHT else 0
    if p["diagonal_band_right_bound"] is not None:
        keep &= cols <= rows + shift + p["diagonal_band_right_bound"]
    if p["diagonal_band_left_bound"] is not None:
        keep &= cols > rows + shift - p["diagonal_band_left_bound"]
    s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    z = e.sum(axis=-1, keepdims=True)
    probs = e / z
    if p["dropout"] == "mask":
        probs = probs * scalar(read, ins["DROPOUT_SCALE"]) * read(ins["DROPOUT_MASK"])
    o = probs @ v
    extra = {}
    if "Stats" in node.outputs:
        extra[node.outputs["Stats"].uid] = m + np.log(z)
    return WithExtra(o, extra)


@reference("rng", lambda node: "rng: cuDNN's Philox bits cannot be reproduced by a python engine")
def _rng(node: Any, read: Read) -> np.ndarray:
    raise AssertionError("unreachable: check_support refuses rng nodes")
