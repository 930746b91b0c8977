"""Attention from its definition (not from the decomposition), and the RNG op, which no python engine can run."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from ...engines.reference.registry import Read, WithExtra, reference, scalar
from ...enums import diagonal_alignment
from ...errors import InvalidValueError
from ..paged_cache.reference import gather_pages, owned_entries
from ..pointwise.reference import _pointwise
from .spec import BLOCK_MASK_TILE, block_mask_packed, kv_length, rng_probability


def _sdpa_check(node: Any) -> str | None:
    p = node.params
    if rng_probability(p) is not None:
        return "sdpa with dropout=(probability, seed, offset): cuDNN's Philox bits cannot be reproduced here"
    if "BLOCK_MASK" in node.inputs and block_mask_packed(node):
        # which bit of a byte is which key tile has not been checked against cuDNN on a GPU yet (cuDNN 9.19 has no
        # engine for block masks): declined rather than guessed, so this engine is never silently wrong
        return "sdpa with a block mask in the packed layout (8 tiles a byte): its bit order is not verified yet"
    return None  # ragged (THD) tensors: the engine reads and writes them packed, through their offsets


def _kv(node: Any, read: Read, port: str) -> np.ndarray:
    """K or V as (b, h, s_kv, d): the tensor itself, or its pages gathered through the page table."""
    ins = node.inputs
    if f"PAGE_TABLE_{port}" not in ins:
        return read(ins[port])
    table = ins[f"PAGE_TABLE_{port}"]
    return gather_pages(read(ins[port]), read(table), read(ins["SEQ_LEN_KV"]), kv_length(node),
                        owned_entries(table, read))


def alibi_slopes(heads: int) -> np.ndarray:
    """The frontend's slopes (``get_alibi_slope``): n = 2^floor(log2 h); 2^(-8 x / n) for x = 1..n, then for the
    remaining heads x = 0.5, 1.5, ... of the doubled series."""
    n = 2 ** int(np.floor(np.log2(heads)))
    xs = list(np.arange(1, n + 1, dtype=np.float64))
    xs += list(np.arange(0.5, heads - n, 1.0))[: heads - n]
    return np.array([2.0 ** (-8.0 * x / n) for x in xs[:heads]])


def _probabilities(node: Any, read: Read, descale: float = 1.0) -> tuple:
    """(P, Stats, scale, q, k, v) of the forward: softmax over the scaled, biased, masked scores, heads of K and V
    repeated for GQA. Masked scores are -inf; a fully masked row (padding, block mask) has P = 0. ``descale``: FP8's
    descale_q · descale_k, applied with the scale (not part of the returned scale)."""
    p, ins = node.params, node.inputs
    q, k, v = read(ins["Q"]), _kv(node, read, "K"), _kv(node, read, "V")
    h_q = q.shape[1]
    k = np.repeat(k, h_q // k.shape[1], axis=1)
    v = np.repeat(v, h_q // v.shape[1], axis=1)
    scale = scalar(read, ins["ATTN_SCALE"]) if "ATTN_SCALE" in ins else 1.0
    s = q @ np.swapaxes(k, -1, -2) * scale * descale
    if p.get("score_mod") is not None:
        s = _score_mod(p["score_mod"], s, read)
    if "BIAS" in ins:
        s = s + read(ins["BIAS"])
    s_q, s_kv = s.shape[-2:]
    rows, cols = np.arange(s_q).reshape(-1, 1), np.arange(s_kv).reshape(1, -1)
    if p["use_alibi_mask"]:
        s = s + alibi_slopes(h_q).reshape(1, -1, 1, 1) * (cols - rows)
    keep = np.ones(s.shape, dtype=bool)
    lq, lkv = s_q, s_kv
    if p["use_padding_mask"]:
        lq = _lengths(node, read, "SEQ_LEN_Q", s_q)
        lkv = _lengths(node, read, "SEQ_LEN_KV", s_kv)
        keep &= (rows < lq) & (cols < lkv)
    # bottom-right: the diagonal ends at the last valid (query, key) of each batch
    shift = lkv - lq if p["diagonal_alignment"] is diagonal_alignment.BOTTOM_RIGHT else 0
    if p["diagonal_band_right_bound"] is not None:
        keep &= cols <= rows + shift + p["diagonal_band_right_bound"]
    if p["diagonal_band_left_bound"] is not None:
        keep &= cols > rows + shift - p["diagonal_band_left_bound"]
    if "BLOCK_MASK" in ins:
        keep &= tiles_kept(read(ins["BLOCK_MASK"]), s_q, s_kv)
    s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    sink = read(ins["SINK_TOKEN"]) if "SINK_TOKEN" in ins else None  # one extra logit per head, in every row
    if sink is not None:
        m = np.maximum(m, sink)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    z = e.sum(axis=-1, keepdims=True)
    if sink is not None:
        z = z + np.exp(sink - m)
    # a fully masked row: P = 0 (O = 0, zero gradients), Stats = -inf
    node_stats = {"Stats": m + np.log(z), "Max": m, "Sum_exp": z}
    return e / np.where(z == 0, 1.0, z), node_stats, scale, q, k, v


def _lengths(node: Any, read: Read, port: str, dim: int) -> np.ndarray:
    """A padding mask's per-batch sequence lengths as (b, 1, 1, 1). A length past its dim (or negative) is
    refused: cuDNN leaves it undefined (its bottom-right diagonal would start past the tensor), and an oracle that
    guessed would make a wrong answer look right."""
    lengths = np.asarray(read(node.inputs[port])).reshape(-1, 1, 1, 1)
    bad = (lengths < 0) | (lengths > dim)
    if bad.any():
        t = node.inputs[port]
        raise InvalidValueError(f"sdpa node {node.name!r}: tensor {t.name!r} (uid {t.uid}) holds sequence length(s) "
                         f"{sorted(set(lengths[bad].astype(int).tolist()))[:8]} outside 0..{dim} (the padded dim "
                         "it masks): undefined in cuDNN, refused by the reference")
    return lengths


def tiles_kept(block_mask: np.ndarray, s_q: int, s_kv: int) -> np.ndarray:
    """(b, h, s_q, s_kv) booleans from a (b, h, ceil(s_q / 128), ceil(s_kv / 128)) block mask: a score is kept
    where its 128 x 128 tile's entry is nonzero (cudnn_py's reading; the header does not say which values keep a
    tile: tests/test_gpu_sdpa_block_mask.py checks it against cuDNN). The last tiles overhang s_q / s_kv. (A packed
    mask is declined by _sdpa_check.)"""
    tile = np.asarray(block_mask) != 0
    tile = np.repeat(np.repeat(tile, BLOCK_MASK_TILE, axis=2), BLOCK_MASK_TILE, axis=3)
    return tile[:, :, :s_q, :s_kv]


class _Score:
    """A value in a score_mod callback run by the reference: a float64 array with the tensor getters it may use."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def get_dim(self) -> list[int]:
        return list(self.array.shape)


class _NumpyScoreGraph:
    """The callback's graph, evaluating each pointwise op at once with the pointwise references."""

    def __init__(self, read: Read) -> None:
        self._read = read

    def __getattr__(self, method: str) -> Any:
        from ...ir.spec import SPECS

        spec = SPECS.get(method)
        if spec is None or spec.kind != "pointwise":
            raise AttributeError(f"score_mod may build pointwise ops only; {method!r} is not one")

        def run(*args: Any, **kwargs: Any) -> _Score:
            values = spec.bind(args, kwargs)
            params = spec.node_params(values)
            arrays = {}
            for port in spec.inputs:
                v = values.get(port.arg)
                if v is not None:
                    arrays[port.port] = self._value(v)
            shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
            node = SimpleNamespace(params=params, inputs={k: k for k in arrays},
                                   outputs={"OUT_0": SimpleNamespace(dim=shape)})
            return _Score(np.broadcast_to(np.asarray(_pointwise(node, arrays.__getitem__), dtype=np.float64), shape))
        return run

    def _value(self, v: Any) -> np.ndarray:
        if isinstance(v, _Score):
            return v.array
        if hasattr(v, "uid"):  # a tensor of the user's graph (a scalar the callback uses)
            return self._read(v)
        return np.asarray(float(v))


def _score_mod(fn: Any, s: np.ndarray, read: Read) -> np.ndarray:
    out = fn(_NumpyScoreGraph(read), _Score(s))
    return np.broadcast_to(out.array, s.shape)


def _dropout_factor(node: Any, read: Read, scale_port: str = "DROPOUT_SCALE") -> Any:
    """mask · scale of a custom dropout, or 1."""
    if node.params["dropout"] != "mask":
        return 1.0
    return read(node.inputs["DROPOUT_MASK"]) * scalar(read, node.inputs[scale_port])


@reference("sdpa", _sdpa_check)
def _sdpa(node: Any, read: Read) -> np.ndarray:
    """O = (P ∘ dropout) · V; Stats = max + ln Σ exp, or the max and Σ exp themselves (score_max / sum_exp)."""
    probs, rows, _, _, _, v = _probabilities(node, read)
    o = probs * _dropout_factor(node, read) @ v
    return WithExtra(o, {node.outputs[port].uid: value for port, value in rows.items() if port in node.outputs})


def _sum_to(x: np.ndarray, dims: Any) -> np.ndarray:
    """Sum x over the axes where ``dims`` is 1, and over consecutive head groups (GQA) where it divides."""
    for axis, d in enumerate(int(d) for d in dims):
        if d == 1 and x.shape[axis] != 1:
            x = x.sum(axis=axis, keepdims=True)
        elif d != x.shape[axis]:
            x = x.reshape(x.shape[:axis] + (d, x.shape[axis] // d) + x.shape[axis + 1:]).sum(axis=axis + 1)
    return x


def add_sink_gradient(node: Any, read: Read, rows: dict, d_row: np.ndarray, extra: dict) -> None:
    """dSink = -Σ p_sink D, with D = rowsum(dP ∘ P) (= rowsum(dO ∘ O)): the sink's share of each row, into
    ``extra`` when the node has a dSink_token output."""
    outs = node.outputs
    if "dSink_token" in outs:
        p_sink = np.exp(read(node.inputs["SINK_TOKEN"]) - rows["Stats"])
        extra[outs["dSink_token"].uid] = _sum_to(-p_sink * d_row, outs["dSink_token"].dim)
