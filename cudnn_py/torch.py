"""Attention served to torch: ``torch.nn.functional.scaled_dot_product_attention`` (forward and autograd backward)
on cudnn_py's SDPA graphs.

    import cudnn_py.torch
    cudnn_py.torch.install()      # F.scaled_dot_product_attention now runs cudnn_py graphs where it can
    ...
    cudnn_py.torch.uninstall()    # torch exactly as it was (the original function object)

What is served: q / k / v 4-D (b, h, s, d) fp16 / bf16 CUDA tensors (any strides with a unit head-dim stride),
``is_causal`` (top-left, as torch defines it), ``scale``, GQA / MQA through ``enable_gqa=True`` (h_q a multiple of
h_kv), and a floating-point additive ``attn_mask`` of q's dtype shaped (1|b, 1|h, s_q, s_kv) (or fewer leading dims)
that needs no gradient, as cuDNN's bias. Everything else goes to torch's own implementation, unchanged: boolean
masks, ``dropout_p > 0`` (torch's RNG stream cannot be reproduced by cuDNN's Philox dropout), tensor subclasses,
``__torch_function__`` modes, ``torch.compile`` tracing, other dtypes / devices / ranks, autocast to another dtype,
and any configuration whose graph cuDNN refuses. Each fallback is said once per configuration through the
``cudnn_py.torch`` logger (WARNING); the mechanism chosen at ``install()`` is logged at INFO.

Graphs are cached per configuration (shapes, strides, dtype, device, causal, scale, GQA, mask layout,
requires_grad, deterministic) in an LRU map (``install(cache_size=...)``), built with ``pygraph(io_data_type=q's
type, intermediate FLOAT, compute FLOAT)`` and executed without a handle, so on torch's current stream; workspaces
come from torch's caching allocator. A call like one seen before finds its graphs through one key tuple of cheap
reads instead of deciding again (the steady state: see ``Provider``). A configuration that needs gradients builds
its forward (with Stats) and its backward together, so a refusal is known before the forward runs: the backward (a
``torch.autograd.Function``) runs cudnn_py's ``sdpa_backward`` from the forward's O and Stats.

How it is hooked into torch: where torch has the attention-implementation registry
(``torch.nn.attention.register_flash_attention_impl`` / ``activate_flash_attention_impl``), the provider registers
as ``"CUDNN_PY"`` and is activated through it (the registry's handle removes it), as nvidia-cudnn-frontend's
``cudnn.torch`` registers ``"CUDNN"``; elsewhere ``torch.nn.functional.scaled_dot_product_attention`` is replaced
directly. Either way what is replaced is the Python-level function (not aten kernels, whose schemas change between
torch versions and whose shadowed kernels are out of reach for a fallback), so code that bound the function by name
before ``install()`` (``from torch.nn.functional import scaled_dot_product_attention``) keeps torch's.

Importing this module does not import torch; ``install()`` does.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidTypeError, InvalidValueError, UsageError

logger = logging.getLogger(__name__)

PROVIDER_NAME = "CUDNN_PY"
DEFAULT_CACHE_SIZE = 64
_LOGGED_LIMIT = 4096  # distinct fallback messages remembered (then forgotten all at once: said again, never lost)
_DTYPES = {"float16": "HALF", "bfloat16": "BFLOAT16"}


# ------------------------------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class Config:
    """One served configuration: everything a graph depends on. Hashable; the graph cache's key."""
    q: tuple  # ((dims), (strides)) of each operand
    k: tuple
    v: tuple
    bias: tuple | None  # ((dims), (strides)) of the 4-D additive mask, or None
    dtype: str  # "float16" / "bfloat16"
    device: int
    causal: bool
    scale: float
    gqa: bool
    requires_grad: bool
    deterministic: bool = False

    def __post_init__(self) -> None:
        # hashed once: the steady state refreshes the graph cache's order at every call (LRU.touch)
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f) for f in self.__dataclass_fields__)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    @property
    def o_dims(self) -> tuple:
        (b, h, s_q, _), (_, _, _, d_v) = self.q[0], self.v[0]
        return (b, h, s_q, d_v)


def row_major(dims) -> tuple:
    strides, acc = [], 1
    for d in reversed(dims):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


def grad_strides(dims, strides) -> tuple:
    """The strides of a gradient buffer for an operand of (dims, strides): the operand's own where they are dense
    and non-overlapping (what ``torch.empty_like`` keeps: a BSHD view's gradient stays BSHD), else row-major."""
    dims, strides = tuple(int(d) for d in dims), tuple(int(s) for s in strides)
    order = sorted((i for i in range(len(dims)) if dims[i] != 1), key=lambda i: strides[i], reverse=True)
    expect = 1
    for i in reversed(order):
        if strides[i] != expect:
            return row_major(dims)
        expect *= dims[i]
    out, acc = list(strides), 1  # size-1 dims: any stride is valid; give them the row-major-consistent one
    for i in reversed(range(len(dims))):
        if dims[i] == 1:
            out[i] = acc
        else:
            acc = strides[i] * dims[i]
    return tuple(out)


def _layout(t) -> tuple:
    return (tuple(int(x) for x in t.shape), tuple(int(x) for x in t.stride()))


def _describe(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa) -> tuple:
    """The configuration as the fallback log names it (no strides: one message per shape / option set)."""
    mask = None if attn_mask is None else (str(getattr(attn_mask, "dtype", type(attn_mask).__name__)),
                                           tuple(getattr(attn_mask, "shape", ())))
    shape = lambda t: tuple(getattr(t, "shape", ()))  # noqa: E731
    return (shape(q), shape(k), shape(v), str(getattr(q, "dtype", None)), str(getattr(q, "device", None)),
            bool(is_causal), bool(enable_gqa), mask, float(dropout_p) if isinstance(dropout_p, (int, float)) else None)


class Fallback(Exception):
    """Why a call goes to torch's own implementation (the message is what the log says)."""


def decide(torch, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False) -> Config:
    """The Config of a call cudnn_py can serve, or raise Fallback naming why not. Reads only public torch API (and
    torch._C's functorch-transform flag where it exists)."""
    T = torch.Tensor
    if not all(type(t) is T for t in (q, k, v)) or (attn_mask is not None and type(attn_mask) is not T):
        raise Fallback("an operand is not a plain torch.Tensor (a subclass or another type)")
    overrides = getattr(torch, "overrides", None)
    has_tf = getattr(overrides, "has_torch_function", None)
    if has_tf is not None and has_tf((q, k, v) if attn_mask is None else (q, k, v, attn_mask)):
        raise Fallback("__torch_function__ handling is active")
    functorch_active = _functorch_flag(torch)
    if functorch_active is not None and functorch_active():
        raise Fallback("a functorch transform (vmap, grad, jacrev, ...) is active")
    if any(getattr(t, "is_nested", False) for t in (q, k, v)):
        raise Fallback("nested tensors")
    if not (q.dim() == k.dim() == v.dim() == 4):
        raise Fallback(f"q, k, v are not all 4-D (b, h, s, d): {q.dim()}, {k.dim()}, {v.dim()}")
    if not all(t.is_cuda for t in (q, k, v)) or not (q.device == k.device == v.device):
        raise Fallback("q, k, v are not all on one CUDA device")
    dtype = str(q.dtype).replace("torch.", "")
    if dtype not in _DTYPES or not (q.dtype == k.dtype == v.dtype):
        raise Fallback(f"dtypes {q.dtype}, {k.dtype}, {v.dtype}: only float16 / bfloat16, all alike")
    autocast = _autocast_dtype(torch)
    if autocast is not None and autocast != q.dtype:
        raise Fallback(f"autocast to {autocast} is on (inputs are {q.dtype})")
    if not isinstance(dropout_p, (int, float)) or dropout_p != 0.0:
        raise Fallback(f"dropout_p={dropout_p}: torch's dropout RNG stream cannot be reproduced by cuDNN's")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise Fallback(f"a scale of type {type(scale).__name__} (torch decides what it makes of it)")
    (b, h_q, s_q, d), (bk, h_k, s_kv, dk), (bv, h_v, s_v, _d_v) = q.shape, k.shape, v.shape
    if not (b == bk == bv) or s_kv != s_v or d != dk or h_k != h_v:
        raise Fallback("q, k, v shapes do not fit together")
    if min(b, h_q, h_k, s_q, s_kv, d, _d_v) == 0:
        raise Fallback("an empty operand")
    if h_q != h_k and not (enable_gqa and h_q % h_k == 0):
        raise Fallback(f"{h_q} query heads over {h_k} key / value heads without enable_gqa=True (or not a multiple)")
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        raise Fallback("a head dimension with a stride other than 1")
    bias = None
    if attn_mask is not None:
        if is_causal:
            raise Fallback("attn_mask together with is_causal (torch decides what that means)")
        if attn_mask.dtype == torch.bool:
            raise Fallback("a boolean attn_mask (not expressed as a cuDNN mask yet)")
        if attn_mask.dtype != q.dtype:
            raise Fallback(f"an attn_mask of {attn_mask.dtype} with inputs of {q.dtype}")
        if attn_mask.requires_grad and torch.is_grad_enabled():
            raise Fallback("an attn_mask that requires grad")
        if attn_mask.dim() > 4 or attn_mask.device != q.device:
            raise Fallback("an attn_mask of more than 4 dims or on another device")
        dims, strides = mask_layout(attn_mask)
        if dims[0] not in (1, b) or dims[1] not in (1, h_q) or dims[2:] != (s_q, s_kv) or strides[3] != 1:
            raise Fallback(f"an attn_mask of shape {tuple(attn_mask.shape)} (served: (1|b, 1|h, s_q, s_kv), unit "
                           "last stride)")
        bias = (dims, strides)
    try:
        misaligned = any(t.data_ptr() % 16 for t in ((q, k, v) if attn_mask is None else (q, k, v, attn_mask)))
    except RuntimeError as exc:  # a tensor without storage (a functorch wrapper outside its transform, ...)
        raise Fallback(f"an operand whose data pointer cannot be read ({_short(exc, 120)})") from None
    if misaligned:
        raise Fallback("an operand not aligned to 16 bytes")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    deterministic = bool(needs_grad and torch.are_deterministic_algorithms_enabled())
    return Config(q=_layout(q), k=_layout(k), v=_layout(v), bias=bias, dtype=dtype, device=int(q.device.index or 0),
                  causal=bool(is_causal), scale=float(scale), gqa=h_q != h_k, requires_grad=needs_grad,
                  deterministic=deterministic)


def _functorch_flag(torch) -> Callable[[], bool] | None:
    """torch._C's "is a functorch transform active" (a private name: None where this torch lacks it)."""
    flag = getattr(getattr(torch, "_C", None), "_are_functorch_transforms_active", None)
    return flag if callable(flag) else None


def mask_layout(mask) -> tuple:
    """(dims, strides) of a mask of up to 4 dims as 4-D, as ``unsqueeze(0)`` makes it (``as_4d``): each new
    leading dim gets the stride size x stride of the dim after it."""
    dims, strides = [int(x) for x in mask.shape], [int(x) for x in mask.stride()]
    while len(dims) < 4:
        strides.insert(0, dims[0] * strides[0] if dims else 1)
        dims.insert(0, 1)
    return tuple(dims), tuple(strides)


def as_4d(mask):
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    return mask


def _autocast_dtype(torch) -> Any:
    """The CUDA autocast dtype when autocast is on, else None (torch >= 2.4 takes a device type; older ones not)."""
    try:
        on = torch.is_autocast_enabled("cuda")
    except TypeError:
        on = torch.is_autocast_enabled()
    if not on:
        return None
    get = getattr(torch, "get_autocast_dtype", None)
    return get("cuda") if get is not None else torch.get_autocast_gpu_dtype()


# ------------------------------------------------------------------------------------------------- graphs
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


# keywords torch's signature accepts after n positional arguments (3..6): the steady-state binding
_KW_AFTER = {n: frozenset(("attn_mask", "dropout_p", "is_causal")[n - 3:]) | {"scale", "enable_gqa"}
             for n in (3, 4, 5, 6)}


# ------------------------------------------------------------------------------------------------- the provider
class Provider:
    """The serving state: the graph cache, the per-call key map, the fallback log, the original function. One per
    install().

    A call takes one of two paths that decide alike. The steady state (``function``): torch's arguments bound
    without building a dict; the checks of torch's *state* that decide() makes (compiling, plain tensors,
    ``__torch_function__``, functorch transforms, autocast, alignment) made again on every call; then a key of
    everything else decide() reads (each operand's shape, strides, dtype, device, nesting, requires_grad; the
    mask's too; grad mode, determinism; is_causal, scale, enable_gqa, dropout_p and its type), one tuple, looked
    up in ``by_key``: the Entry (or the Unsupported) a full decide() gave for that same key. Anything else (a key
    never seen, an unusual call) takes the general path (``__call__``): _bind, decide(), the graph cache, and the
    key remembered. The key map is cleared when the graph cache evicts (it never holds an entry the cache
    dropped) and when it outgrows ``4 x cache_size`` keys.

    Execution goes through each graph's bound execute (``Executor.fast``), which checks every operand (its
    signature against the one fully checked for its slot, new pointers in full) on every call."""

    def __init__(self, torch, original: Callable, cache_size: int = DEFAULT_CACHE_SIZE, build: Callable | None = None):
        self.torch = torch
        self.original = original
        self.cache = LRU(cache_size)
        self.by_key: dict = {}
        self._logged: set = set()
        self._lock = threading.Lock()
        self._build = build or self._build_entry
        self._function_class: Any = None
        self._apply: Any = None
        self.served = self.fallbacks = 0
        function = self._steady_state()
        function.__doc__ = getattr(original, "__doc__", None)
        function.__wrapped__ = original  # type: ignore[attr-defined]
        function.cudnn_py_provider = self  # type: ignore[attr-defined]
        self.function = function

    # -- logging once per configuration
    def note_fallback(self, reason: str, what: tuple) -> None:
        key = (reason, what)
        with self._lock:
            if key in self._logged:
                return
            if len(self._logged) >= _LOGGED_LIMIT:
                self._logged.clear()
            self._logged.add(key)
        q, k, v, dtype, device, causal, gqa, mask, dropout = what
        logger.warning("cudnn_py.torch: scaled_dot_product_attention falls back to torch's implementation for q %s, "
                       "k %s, v %s, %s on %s (is_causal=%s, enable_gqa=%s, attn_mask=%s, dropout_p=%s): %s",
                       q, k, v, dtype, device, causal, gqa, mask, dropout, reason)

    def _fall_back(self, reason: str, args: tuple, kwargs: dict, call: dict | None = None) -> Any:
        self.fallbacks += 1
        if call is None:
            call = _bind(args, kwargs)
        self.note_fallback(reason, _describe(call["q"], call["k"], call["v"], call["attn_mask"], call["dropout_p"],
                                             call["is_causal"], call["enable_gqa"]))
        return self.original(*args, **kwargs)

    # -- the general path
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._general(args, kwargs, None)

    def _general(self, args: tuple, kwargs: dict, key: tuple | None) -> Any:
        """Bind, decide, find or build the graphs; remember the outcome under ``key`` (the steady state's key of
        this call, None when it has none) so that the next call with that key skips all this."""
        torch = self.torch
        compiler = getattr(torch, "compiler", None)
        is_compiling = getattr(compiler, "is_compiling", None)
        if is_compiling is not None and is_compiling():
            return self.original(*args, **kwargs)  # dynamo traces torch's own op (no log: it would break graphs)
        try:
            call = _bind(args, kwargs)
        except TypeError:
            return self.original(*args, **kwargs)  # torch raises its own error
        entry: Entry | Unsupported
        try:
            cfg = decide(torch, **call)
        except Fallback as why:
            entry = Unsupported(str(why))
        else:
            entry = self._entry(cfg)
        if key is not None:
            if len(self.by_key) >= 4 * self.cache.maxsize:
                self.by_key.clear()
            self.by_key[key] = entry
        if isinstance(entry, Unsupported):
            return self._fall_back(entry.reason, args, kwargs, call)
        return self._run(entry, call["q"], call["k"], call["v"], call["attn_mask"])

    def _run(self, entry: Entry, q, k, v, mask) -> Any:
        self.served += 1
        bias = None if mask is None else as_4d(mask)
        if entry.cfg.requires_grad:
            return self._autograd_apply()(q, k, v, bias, entry, self)
        return self.forward(entry, q, k, v, bias)[0]

    def _entry(self, cfg: Config) -> Entry | Unsupported:
        entry = self.cache.get(cfg)
        if entry is None:
            try:
                entry = self._build(cfg)
            except Exception as exc:  # a refusal of any kind: cuDNN's, the IR's, planning's
                entry = Unsupported(f"cudnn_py refused the graph: {type(exc).__name__}: {_short(exc)}")
            evicted = self.cache.evictions
            self.cache.put(cfg, entry)
            if self.cache.evictions != evicted:  # the key map must not keep (and serve) what the cache dropped
                self.by_key.clear()
        return entry

    # -- the steady state
    def _steady_state(self) -> Callable[..., Any]:
        """The function installed as torch's: the per-call path described in the class docstring, with torch's
        functions bound as closure locals. Every check it skips is one whose inputs are in the key."""
        torch, provider, general = self.torch, self, self._general
        T, by_key, kw_after, cache = torch.Tensor, self.by_key, _KW_AFTER, self.cache
        compiler = getattr(torch, "compiler", None)
        is_compiling = getattr(compiler, "is_compiling", None) or (lambda: False)
        has_tf = getattr(getattr(torch, "overrides", None), "has_torch_function", None) or (lambda _ts: False)
        functorch_active = _functorch_flag(torch) or (lambda: False)
        autocast_on = _autocast_probe(torch)
        grad_enabled, deterministic = torch.is_grad_enabled, torch.are_deterministic_algorithms_enabled

        def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> Any:
            n = len(args)
            allowed = kw_after.get(n)
            if allowed is None or (kwargs and not kwargs.keys() <= allowed) or is_compiling():
                return general(args, kwargs, None)
            q, k, v = args[0], args[1], args[2]
            get = kwargs.get
            mask = args[3] if n > 3 else get("attn_mask")
            dropout_p = args[4] if n > 4 else get("dropout_p", 0.0)
            is_causal = args[5] if n > 5 else get("is_causal", False)
            # torch's state, as decide() checks it (any of these: the general path decides and says why)
            if q.__class__ is not T or k.__class__ is not T or v.__class__ is not T or (
                    mask is not None and mask.__class__ is not T) or autocast_on() or functorch_active() or \
                    has_tf((q, k, v) if mask is None else (q, k, v, mask)):
                return general(args, kwargs, None)
            try:  # (a tensor without sizes or storage raises: the general path sends it to torch)
                grad = grad_enabled()
                needs = grad and (q.requires_grad or k.requires_grad or v.requires_grad)
                key = (q.shape, q.stride(), q.dtype, q.device, q.is_nested,
                       k.shape, k.stride(), k.dtype, k.device, k.is_nested,
                       v.shape, v.stride(), v.dtype, v.device, v.is_nested,
                       None if mask is None else (mask.shape, mask.stride(), mask.dtype, mask.device,
                                                  mask.requires_grad),
                       grad, needs, needs and deterministic(), is_causal, get("scale"), get("enable_gqa", False),
                       dropout_p, dropout_p.__class__)
                misaligned = (q.data_ptr() | k.data_ptr() | v.data_ptr() |
                              (0 if mask is None else mask.data_ptr())) & 15
            except RuntimeError:
                return general(args, kwargs, None)
            try:
                entry = by_key.get(key)
            except TypeError:  # an unhashable argument (torch refuses it): the general path
                return general(args, kwargs, None)
            if entry is None or misaligned:
                return general(args, kwargs, None if misaligned else key)
            if entry.__class__ is Unsupported:
                return provider._fall_back(entry.reason, args, kwargs)
            cache.touch(entry.cfg)  # (an LRU: what is used stays)
            return provider._run(entry, q, k, v, mask)

        return scaled_dot_product_attention

    def _build_entry(self, cfg: Config) -> Entry:
        import cudnn_py as cudnn

        with self.torch.cuda.device(cfg.device):
            g, ts = forward_graph(cudnn, cfg)
            _plan(cudnn, g)
            entry = Entry(cfg, g, ts)
            if cfg.requires_grad:  # built now: a refused backward sends the forward to torch too
                gb, tb = backward_graph(cudnn, cfg)
                _plan(cudnn, gb)
                entry.bwd[None] = (gb, tb)
        logger.info("cudnn_py.torch: built the attention graphs for %s", cfg)
        return entry

    # -- execution (torch's current stream: no handle). Outputs are new tensors on every call (autograd saves
    # them); their pointers change, and the graphs' bound execute checks them (see plans/execute.py).
    def forward(self, entry: Entry, q, k, v, bias) -> tuple:
        t_q, t_k, t_v, t_o, t_stats, t_bias = entry.fwd_keys
        o = q.new_empty(entry.o_dims)  # q's dtype and device
        if entry.stats_dims is None:
            stats = None
            feeds = {t_q: q, t_k: k, t_v: v, t_o: o}
        else:
            stats = q.new_empty(entry.stats_dims, dtype=self.torch.float32)
            feeds = {t_q: q, t_k: k, t_v: v, t_o: o, t_stats: stats}
        if bias is not None:
            feeds[t_bias] = bias
        entry.fwd.execute(feeds, None)
        return o, stats

    def backward(self, entry: Entry, q, k, v, o, stats, bias, d_o) -> tuple:
        if d_o.dtype != q.dtype:
            d_o = d_o.to(q.dtype)
        if d_o.data_ptr() % 16:  # the graphs' tensors are 16-byte aligned: a fresh buffer is
            d_o = d_o.clone() if d_o.is_contiguous() else d_o.contiguous()
        strides = d_o.stride()
        built = entry.bwd[None] if strides == entry.o_strides else self._backward_graph(entry, tuple(strides), d_o)
        if built is None:
            d_o, built = d_o.contiguous(), entry.bwd[None]
        g, ts = built
        grads = [q.new_empty_strided(dims, strides) for dims, strides in entry.grad_layouts]
        feeds = {ts["q"]: q, ts["k"]: k, ts["v"]: v, ts["o"]: o, ts["dO"]: d_o, ts["stats"]: stats,
                 ts["dQ"]: grads[0], ts["dK"]: grads[1], ts["dV"]: grads[2]}
        if bias is not None:
            feeds[ts["bias"]] = bias
        g.execute(feeds, None)
        return tuple(grads)

    def _backward_graph(self, entry: Entry, strides: tuple, d_o) -> Any:
        """The backward for a dO of other strides (e.g. the gradient of a transposed view): built once per layout;
        where it cannot be (not dense, refused), None: dO is made contiguous."""
        if strides in entry.bwd:
            return entry.bwd[strides]
        built = None
        if grad_strides(entry.cfg.o_dims, strides) == strides:
            import cudnn_py as cudnn

            try:
                with self.torch.cuda.device(entry.cfg.device):
                    g, ts = backward_graph(cudnn, entry.cfg, strides)
                    _plan(cudnn, g)
                built = (g, ts)
            except Exception as exc:
                logger.info("cudnn_py.torch: dO with strides %s is made contiguous: %s", strides, _short(exc))
        entry.bwd[strides] = built
        return built

    def _autograd(self) -> Any:
        """The torch.autograd.Function (made once: it subclasses a torch class, so not at import)."""
        if self._function_class is None:
            self._function_class = _make_function(self.torch)
        return self._function_class

    def _autograd_apply(self) -> Callable[..., Any]:
        """How a call with gradients enters the Function: torch's C-level apply where this torch has it (what
        ``Function.apply`` calls once it has found no functorch transform active and no ``setup_context``, both
        true here: the call path checked the first, the Function defines no second; it also unwraps dead functorch
        wrappers, which have no storage and so never reach this point: their data pointer cannot be read), else
        ``Function.apply``."""
        if self._apply is None:
            cls = self._autograd()
            base = getattr(getattr(self.torch, "_C", None), "_FunctionBase", None)
            raw: Any = getattr(base, "__dict__", {}).get("apply")
            self._apply = raw.__get__(None, cls) if hasattr(raw, "__get__") else cls.apply
        return self._apply


def _autocast_probe(torch) -> Callable[[], bool]:
    """A cheap "is CUDA autocast on" for the steady state (any autocast sends the call to the general path, which
    decides whether it is autocast to the inputs' own dtype)."""
    enabled = torch.is_autocast_enabled
    try:
        enabled("cuda")
    except TypeError:  # torch < 2.4: no device argument
        return enabled
    return functools.partial(enabled, "cuda")


def _make_function(torch) -> Any:
    class CudnnPyAttention(torch.autograd.Function):
        """O = softmax(q kᵀ · scale + mask) v on cudnn_py's forward graph; its backward on cudnn_py's sdpa_backward
        graph from the forward's O and Stats."""

        @staticmethod
        def forward(ctx, q, k, v, bias, entry, provider):
            o, stats = provider.forward(entry, q, k, v, bias)
            ctx.save_for_backward(q, k, v, o, stats, bias)
            ctx.entry, ctx.provider = entry, provider
            return o

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, d_o):
            q, k, v, o, stats, bias = ctx.saved_tensors
            dq, dk, dv = ctx.provider.backward(ctx.entry, q, k, v, o, stats, bias, d_o)
            return dq, dk, dv, None, None, None

    return CudnnPyAttention


_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
_KW = {"attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"}


def _bind(args: tuple, kwargs: dict) -> dict:
    """torch's signature: (query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
    enable_gqa=False). TypeError for anything else (torch then raises its own error)."""
    if len(args) > len(_PARAMS):
        raise InvalidTypeError("too many positional arguments")
    given = dict(zip(_PARAMS, args))
    for name, value in kwargs.items():
        if name in given or (name not in _KW and name not in _PARAMS):
            raise InvalidTypeError(name)
        given[name] = value
    if not all(n in given for n in _PARAMS[:3]):
        raise InvalidTypeError("query, key and value are required")
    return {"q": given["query"], "k": given["key"], "v": given["value"], "attn_mask": given.get("attn_mask"),
            "dropout_p": given.get("dropout_p", 0.0), "is_causal": given.get("is_causal", False),
            "scale": given.get("scale"), "enable_gqa": given.get("enable_gqa", False)}


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "..."


# ------------------------------------------------------------------------------------------------- install
@dataclass
class _Registry:
    """torch's attention-implementation registry, where the running torch has one."""
    register: Callable
    activate: Callable
    restore: Callable | None
    current: Callable | None


def detect_registry(torch) -> _Registry | None:
    """torch.nn.attention's implementation registry (register_flash_attention_impl / activate_flash_attention_impl,
    and restore_flash_attention_impl / current_flash_attention_impl where present), or None."""
    attention: Any
    try:
        import importlib

        attention = importlib.import_module("torch.nn.attention")
    except Exception:  # (a torch without the package, or one that fails to import it)
        attention = getattr(getattr(torch, "nn", None), "attention", None)
    register = getattr(attention, "register_flash_attention_impl", None)
    activate = getattr(attention, "activate_flash_attention_impl", None)
    if not (callable(register) and callable(activate)):
        return None
    restore = getattr(attention, "restore_flash_attention_impl", None)
    current = getattr(attention, "current_flash_attention_impl", None)
    return _Registry(register, activate, restore if callable(restore) else None,
                     current if callable(current) else None)


class _Handle:
    """What the registry's register function returns: ``remove()`` puts torch's function back (idempotent)."""

    def __init__(self, functional, original: Callable, installed: Callable):
        self._functional, self._original, self._installed = functional, original, installed
        self.active = True

    def remove(self) -> None:
        if not self.active:
            return
        self.active = False
        current = getattr(self._functional, "scaled_dot_product_attention", None)
        if current is self._installed:
            self._functional.scaled_dot_product_attention = self._original
        else:
            logger.warning("cudnn_py.torch: torch.nn.functional.scaled_dot_product_attention was replaced by "
                           "someone else after install(); left as it is (%r)", current)


_state: dict[str, Any] = {"provider": None, "handle": None, "mechanism": None, "registry": None}
_install_lock = threading.Lock()
_pending: dict[str, Callable] = {}  # the register function of the install() in progress
_registered_with: list = []  # the registries' register functions "CUDNN_PY" was registered with (once each)


def _register_trampoline(*_args: Any, **_kwargs: Any) -> Any:
    """What the registry holds: registered once per process (a registry may refuse a second registration of a
    name); it installs the provider of the install() that activates it."""
    fn = _pending.get("register_fn")
    if fn is None:
        raise UsageError("the CUDNN_PY attention implementation is activated by cudnn_py.torch.install()")
    return fn()


def install(*, mechanism: str = "auto", cache_size: int = DEFAULT_CACHE_SIZE) -> str:
    """Serve torch.nn.functional.scaled_dot_product_attention from cudnn_py. ``mechanism``: "auto" (torch's
    attention registry where it exists, else the direct override), "registry" (refused without one) or
    "override". Returns the mechanism used. Installing twice is a no-op (returns the mechanism in use)."""
    if mechanism not in ("auto", "registry", "override"):
        raise InvalidValueError(f"mechanism must be 'auto', 'registry' or 'override', got {mechanism!r}")
    import torch
    import torch.nn.functional as functional

    with _install_lock:
        if _state["provider"] is not None:
            return str(_state["mechanism"])
        original = functional.scaled_dot_product_attention
        provider = Provider(torch, original, cache_size)
        holder: dict[str, _Handle] = {}

        def register_fn(*_args: Any, **_kwargs: Any) -> _Handle:
            functional.scaled_dot_product_attention = provider.function
            holder["handle"] = _Handle(functional, original, provider.function)
            return holder["handle"]

        registry = detect_registry(torch) if mechanism != "override" else None
        version = getattr(torch, "__version__", "?")
        if mechanism == "registry" and registry is None:
            raise UsageError(f"torch {version} has no attention-implementation registry "
                               "(torch.nn.attention.register_flash_attention_impl); use mechanism='override'")
        used = "override"
        if registry is not None:
            logger.info("cudnn_py.torch: torch %s has the attention-implementation registry "
                        "(torch.nn.attention.register_flash_attention_impl): registering and activating %r",
                        version, PROVIDER_NAME)
            try:
                if not any(f is registry.register for f in _registered_with):
                    registry.register(PROVIDER_NAME, register_fn=_register_trampoline)
                    _registered_with.append(registry.register)
                _pending["register_fn"] = register_fn
                try:
                    registry.activate(PROVIDER_NAME)
                finally:
                    _pending.clear()
                if "handle" not in holder or functional.scaled_dot_product_attention is not provider.function:
                    raise UsageError("the registry did not install the provider's function")
                used = "registry"
            except Exception as exc:
                if mechanism == "registry":
                    raise
                logger.warning("cudnn_py.torch: activation through torch's attention registry failed (%s: %s); "
                               "overriding torch.nn.functional.scaled_dot_product_attention directly",
                               type(exc).__name__, _short(exc))
                if "handle" in holder:
                    holder.pop("handle").remove()
        else:
            logger.info("cudnn_py.torch: torch %s: %s; overriding torch.nn.functional.scaled_dot_product_attention "
                        "directly", version, "mechanism='override' asked for" if mechanism == "override"
                        else "no attention-implementation registry (torch.nn.attention.register_flash_attention_impl)")
        if used == "override":
            register_fn()
            registry = None
        _state.update(provider=provider, handle=holder["handle"], mechanism=used, registry=registry)
        return used


def uninstall() -> None:
    """Put torch back: torch.nn.functional.scaled_dot_product_attention is the original function object again (and,
    through the registry, no implementation is active). A no-op when not installed."""
    with _install_lock:
        handle, registry = _state["handle"], _state["registry"]
        if handle is None:
            return
        if registry is not None:
            current = registry.current() if registry.current is not None else PROVIDER_NAME
            if registry.restore is not None and current == PROVIDER_NAME:
                try:
                    registry.restore()
                except Exception as exc:
                    logger.warning("cudnn_py.torch: torch's restore_flash_attention_impl failed (%s: %s)",
                                   type(exc).__name__, _short(exc))
        handle.remove()  # (idempotent: a no-op where the registry's restore already called it)
        provider = _state["provider"]
        if provider is not None:
            provider.cache.clear()
        _state.update(provider=None, handle=None, mechanism=None, registry=None)
        logger.info("cudnn_py.torch: uninstalled; torch.nn.functional.scaled_dot_product_attention is torch's again")


def installed() -> str | None:
    """The mechanism in use ("registry" / "override"), or None."""
    return _state["mechanism"]


def provider() -> Provider | None:
    """The installed Provider (its ``cache``, ``served`` / ``fallbacks`` counts), or None."""
    return _state["provider"]


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Inside the block, torch's own scaled_dot_product_attention; the provider (and its graph cache) stays
    installed and is back after it. A no-op when not installed."""
    handle = _state["handle"]
    if handle is None or not handle.active:
        yield
        return
    functional = handle._functional
    functional.scaled_dot_product_attention = handle._original
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = handle._installed
