"""The cudnn_py graphs of a served :class:`~.config.Config`: the forward (with Stats where gradients are needed) and
the backward, built through the classic facade, and the bounded map they are cached in.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidValueError, NotImplementedOptionError
from .config import _DTYPES, Config, grad_strides, row_major


def _graph(cudnn, cfg: Config):
    io = getattr(cudnn.data_type, _DTYPES[cfg.dtype])
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                         compute_data_type=cudnn.data_type.FLOAT)


def _t(g, name, layout, data_type=None):
    dims, strides = layout
    kw = {} if data_type is None else {"data_type": data_type}
    return g.tensor(name=name, dim=list(dims), stride=list(strides), **kw)


def _options(cudnn, g, cfg: Config, ts: dict, names: tuple) -> dict:
    """The sdpa / sdpa_backward keywords of the surface beyond torch's function (none for the provider's configs):
    the sequence lengths (padded batches, THD), the ragged offsets of the packed tensors ``names`` (THD), the band
    and its alignment."""
    kw: dict[str, Any] = {}
    b = cfg.q[0][0]
    if cfg.padded or cfg.ragged is not None:
        for n in ("seq_len_q", "seq_len_kv"):
            kw[n] = ts[n] = g.tensor(name=n, dim=[b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32)
        kw["use_padding_mask"] = True
    if cfg.ragged is not None:
        for n in names:
            ts[n].set_ragged_offset(_offset(cudnn, g, cfg, ts, n))
    if cfg.masked or cfg.bottom_right:
        kw["diagonal_alignment"] = (cudnn.diagonal_alignment.BOTTOM_RIGHT if cfg.bottom_right
                                    else cudnn.diagonal_alignment.TOP_LEFT)
        kw["diagonal_band_left_bound"], kw["diagonal_band_right_bound"] = cfg.left, cfg.right
    return kw


def _offset(cudnn, g, cfg: Config, ts: dict, name: str):
    """The INT64 (b + 1, 1, 1, 1) ragged offset of packed tensor ``name`` (fed as element offsets: the prefix sums
    of the lengths times the tensor's token stride), kept in ``ts`` as ``ragged_<name>``."""
    b = cfg.q[0][0]
    t = ts["ragged_" + name] = g.tensor(name="ragged_" + name, dim=[b + 1, 1, 1, 1], stride=[1, 1, 1, 1],
                                        data_type=cudnn.data_type.INT64)
    return t


def forward_graph(cudnn, cfg: Config):
    """The forward graph of a Config (O laid out by ``o_strides``, row-major by default; Stats (b, h, s_q, 1)
    FLOAT when it needs gradients or ``lse``: token-major and ragged for THD), not yet planned. Returns
    (graph, {name: graph tensor})."""
    g = _graph(cudnn, cfg)
    ts = {n: _t(g, n, getattr(cfg, n)) for n in ("q", "k", "v")}
    kw = _options(cudnn, g, cfg, ts, ("q", "k", "v"))
    if cfg.bias is not None:
        kw["bias"] = ts["bias"] = _t(g, "bias", cfg.bias)
    b, h, s_q, _ = cfg.q[0]
    if cfg.sinks:
        kw["sink_token"] = ts["sinks"] = _t(g, "sinks", ((1, h, 1, 1), (h, 1, 1, 1)), cudnn.data_type.FLOAT)
    o, stats = g.sdpa(ts["q"], ts["k"], ts["v"], generate_stats=cfg.stats, attn_scale=cfg.scale,
                      use_causal_mask=cfg.causal, name="sdpa", **kw)
    o.set_output(True).set_dim(list(cfg.o_dims)).set_stride(list(cfg.o_strides or row_major(cfg.o_dims)))
    ts["o"] = o
    if cfg.stats:
        # THD Stats are packed like O: (total_q, h, 1) token-major, each batch at its ragged offset
        stride = (s_q * h, 1, h, 1) if cfg.ragged is not None else row_major((b, h, s_q, 1))
        stats.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim([b, h, s_q, 1]).set_stride(list(stride))
        ts["stats"] = stats
    if cfg.ragged is not None:
        for n in ("o", "stats") if cfg.stats else ("o",):
            ts[n].set_ragged_offset(_offset(cudnn, g, cfg, ts, n))
    return g, ts


def backward_graph(cudnn, cfg: Config, d_o_strides: tuple | None = None):
    """The backward graph of a Config: dQ, dK, dV (laid out by ``grads``, else ``grad_strides``) from q, k, v, O
    (``o_strides``), dO (O's strides unless ``d_o_strides``) and Stats (b, h, s_q, 1) row-major (padded for THD
    too: cuDNN takes no ragged Stats in the backward). Returns (graph, {name: graph tensor})."""
    if cfg.sinks:  # (no dSink: the operators refuse a sink backward before asking for this graph)
        raise NotImplementedOptionError("the attention backward with a sink token is not built by cudnn_py.torch")
    g = _graph(cudnn, cfg)
    o_strides = cfg.o_strides or row_major(cfg.o_dims)
    b, h, s_q, _ = cfg.q[0]
    ts = {n: _t(g, n, getattr(cfg, n)) for n in ("q", "k", "v")}
    ts["o"] = _t(g, "o", (cfg.o_dims, o_strides))
    ts["dO"] = _t(g, "dO", (cfg.o_dims, d_o_strides or o_strides))
    ts["stats"] = _t(g, "stats", ((b, h, s_q, 1), row_major((b, h, s_q, 1))), cudnn.data_type.FLOAT)
    kw = _options(cudnn, g, cfg, ts, ("q", "k", "v", "o"))
    if cfg.ragged is not None:
        ts["dO"].set_ragged_offset(ts["ragged_o"])  # dO is laid out as O (the caller makes it so)
        kw["max_total_seq_len_q"], kw["max_total_seq_len_kv"] = cfg.ragged
    if cfg.bias is not None:
        kw["bias"] = ts["bias"] = _t(g, "bias", cfg.bias)
    if cfg.deterministic:
        kw["use_deterministic_algorithm"] = True
    dq, dk, dv = g.sdpa_backward(q=ts["q"], k=ts["k"], v=ts["v"], o=ts["o"], dO=ts["dO"], stats=ts["stats"],
                                 attn_scale=cfg.scale, use_causal_mask=cfg.causal, name="sdpa_backward", **kw)
    layouts = cfg.grads or tuple(grad_strides(*like) for like in (cfg.q, cfg.k, cfg.v))
    for t, n, like, strides in zip((dq, dk, dv), ("dQ", "dK", "dV"), (cfg.q, cfg.k, cfg.v), layouts):
        t.set_output(True).set_dim(list(like[0])).set_stride(list(strides))
        ts[n] = t
        if cfg.ragged is not None:
            t.set_ragged_offset(_offset(cudnn, g, cfg, ts, n))
    return g, ts


def _plan(cudnn, g) -> None:
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])


@dataclass
class Entry:
    """The built graphs of one served Config, and what each call of it needs, computed once: the output and
    Stats dims, O's strides, the gradients' layouts, the graph tensors the feeds are keyed by."""
    cfg: Config
    fwd: Any  # None in an entry built for its backward alone (the sdpa_bwd operator)
    fwd_t: dict
    bwd: dict = field(default_factory=dict)  # dO strides (None: O's) -> (graph, tensors) or None (refused)

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.o_dims = cfg.o_dims
        self.o_strides = cfg.o_strides or row_major(cfg.o_dims)
        b, h, s_q, _ = cfg.q[0]
        self.stats_dims = (b, h, s_q, 1) if cfg.stats else None
        strides = cfg.grads or tuple(grad_strides(*like) for like in (cfg.q, cfg.k, cfg.v))
        self.grad_layouts = tuple((like[0], s) for like, s in zip((cfg.q, cfg.k, cfg.v), strides))
        t = self.fwd_t
        # (q, k, v, O, Stats, bias) tensors of the forward graph (None where the graph has none)
        self.fwd_keys = tuple(t.get(n) for n in ("q", "k", "v", "o", "stats", "bias"))
        # The graphs' split executes (the provider's: see serving.checked_execute), made after each graph's first
        # execute: (the graph's bound execute they were made with, run); for the backward per dO strides key
        self.fwd_trusted: tuple | None = None
        self.bwd_trusted: dict = {}


# the backward graph's operands in the order the provider's split execute takes them: those re-checked (the bias
# last, where there is one), then those the provider allocated (the forward's O and Stats, the gradients)
BWD_GIVEN = ("dO", "q", "k", "v", "bias")
BWD_MADE = ("o", "stats", "dQ", "dK", "dV")


class Unsupported:
    """A configuration served by torch: a Config whose graphs cuDNN refused, or (in the per-call key map) a call
    that decide() sent to torch. Cached, so it is neither rebuilt nor re-decided on every call."""

    def __init__(self, reason: str):
        self.reason = reason


class LRU:
    """A bounded map, least recently used first out."""

    def __init__(self, maxsize: int):
        if maxsize < 1:
            raise InvalidValueError(f"cache size must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self._d: OrderedDict = OrderedDict()
        self.hits = self.misses = self.evictions = 0

    def get(self, key: Hashable) -> Any:
        try:
            value = self._d[key]
        except KeyError:
            self.misses += 1
            return None
        self._d.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: Hashable, value: Any) -> None:
        self._d[key] = value
        self._d.move_to_end(key)
        while len(self._d) > self.maxsize:
            self._d.popitem(last=False)
            self.evictions += 1

    def touch(self, key: Hashable) -> None:
        """A hit found without get() (the steady state's key map): counted, and made the most recently used."""
        try:
            self._d.move_to_end(key)
        except KeyError:  # evicted meanwhile (another thread): the key map is being cleared
            return
        self.hits += 1

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._d

    def keys(self) -> list:
        return list(self._d)

    def values(self) -> list:
        return list(self._d.values())

    def clear(self) -> None:
        self._d.clear()
