"""The cudnn_py graphs of a served :class:`~.config.Config`: the forward (with Stats where gradients are needed) and
the backward, built through the classic facade, and the bounded map they are cached in.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidValueError
from .config import _DTYPES, Config, grad_strides, row_major


def _graph(cudnn, cfg: Config):
    io = getattr(cudnn.data_type, _DTYPES[cfg.dtype])
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                         compute_data_type=cudnn.data_type.FLOAT)


def _t(g, name, layout, data_type=None):
    dims, strides = layout
    kw = {} if data_type is None else {"data_type": data_type}
    return g.tensor(name=name, dim=list(dims), stride=list(strides), **kw)


def forward_graph(cudnn, cfg: Config):
    """The forward graph of a Config (O contiguous; Stats (b, h, s_q, 1) FLOAT when it needs gradients), not yet
    planned. Returns (graph, {name: graph tensor})."""
    g = _graph(cudnn, cfg)
    ts = {n: _t(g, n, getattr(cfg, n)) for n in ("q", "k", "v")}
    kw: dict[str, Any] = {}
    if cfg.bias is not None:
        kw["bias"] = ts["bias"] = _t(g, "bias", cfg.bias)
    o, stats = g.sdpa(ts["q"], ts["k"], ts["v"], generate_stats=cfg.requires_grad, attn_scale=cfg.scale,
                      use_causal_mask=cfg.causal, name="sdpa", **kw)
    o.set_output(True).set_dim(list(cfg.o_dims)).set_stride(list(row_major(cfg.o_dims)))
    ts["o"] = o
    if cfg.requires_grad:
        b, h, s_q, _ = cfg.q[0]
        stats.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim([b, h, s_q, 1]) \
            .set_stride(list(row_major((b, h, s_q, 1))))
        ts["stats"] = stats
    return g, ts


def backward_graph(cudnn, cfg: Config, d_o_strides: tuple | None = None):
    """The backward graph of a Config: dQ, dK, dV (laid out by ``grad_strides``) from q, k, v, O, dO (contiguous
    unless ``d_o_strides``) and Stats. Returns (graph, {name: graph tensor})."""
    g = _graph(cudnn, cfg)
    o_layout = (cfg.o_dims, row_major(cfg.o_dims))
    b, h, s_q, _ = cfg.q[0]
    ts = {n: _t(g, n, getattr(cfg, n)) for n in ("q", "k", "v")}
    ts["o"] = _t(g, "o", o_layout)
    ts["dO"] = _t(g, "dO", (cfg.o_dims, d_o_strides or row_major(cfg.o_dims)))
    ts["stats"] = _t(g, "stats", ((b, h, s_q, 1), row_major((b, h, s_q, 1))), cudnn.data_type.FLOAT)
    kw: dict[str, Any] = {}
    if cfg.bias is not None:
        kw["bias"] = ts["bias"] = _t(g, "bias", cfg.bias)
    if cfg.deterministic:
        kw["use_deterministic_algorithm"] = True
    dq, dk, dv = g.sdpa_backward(q=ts["q"], k=ts["k"], v=ts["v"], o=ts["o"], dO=ts["dO"], stats=ts["stats"],
                                 attn_scale=cfg.scale, use_causal_mask=cfg.causal, name="sdpa_backward", **kw)
    for t, n, like in ((dq, "dQ", cfg.q), (dk, "dK", cfg.k), (dv, "dV", cfg.v)):
        t.set_output(True).set_dim(list(like[0])).set_stride(list(grad_strides(*like)))
        ts[n] = t
    return g, ts


def _plan(cudnn, g) -> None:
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])


@dataclass
class Entry:
    """The built graphs of one served Config, and what each call of it needs, computed once: the output and
    Stats dims, O's strides, the gradients' layouts, the graph tensors the feeds are keyed by."""
    cfg: Config
    fwd: Any
    fwd_t: dict
    bwd: dict = field(default_factory=dict)  # dO strides (None: contiguous) -> (graph, tensors) or None (refused)

    def __post_init__(self) -> None:
        cfg = self.cfg
        self.o_dims = cfg.o_dims
        self.o_strides = row_major(cfg.o_dims)
        b, h, s_q, _ = cfg.q[0]
        self.stats_dims = (b, h, s_q, 1) if cfg.requires_grad else None
        self.grad_layouts = tuple((like[0], grad_strides(*like)) for like in (cfg.q, cfg.k, cfg.v))
        t = self.fwd_t
        # (q, k, v, O, Stats, bias) tensors of the forward graph (None where the graph has none)
        self.fwd_keys = tuple(t.get(n) for n in ("q", "k", "v", "o", "stats", "bias"))


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

    def clear(self) -> None:
        self._d.clear()
