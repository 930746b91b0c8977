"""The per-call path of the installed function: :class:`Provider` (the steady state keyed by one tuple of cheap reads,
the general path through :func:`~.config.decide` and the graph cache, the fallback log) and the autograd Function
whose backward runs cudnn_py's ``sdpa_backward``.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..errors import InvalidTypeError
from .config import Config, Fallback, _describe, _functorch_flag, _short, as_4d, decide, grad_strides
from .graphs import BWD_GIVEN, BWD_MADE, LRU, Entry, Unsupported, _plan, backward_graph, forward_graph

logger = logging.getLogger("cudnn_py.torch")  # the package's logger: fallbacks are said there

DEFAULT_CACHE_SIZE = 64
_LOGGED_LIMIT = 4096  # distinct fallback messages remembered (then forgotten all at once: said again, never lost)

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
        return build_entry(self.torch, cfg)

    # -- execution (torch's current stream: no handle). Outputs are new tensors on every call (autograd saves
    # them); their pointers change, and the graphs' bound execute checks them (see plans/execute.py).
    #
    # After a graph's first execute (every operand checked in full) the calls go through its split execute
    # (checked_execute, split_execute): the operands as one tuple, those the caller gave re-checked as every call's
    # are (q, k, v, the mask; in the backward dO and the saved q, k, v), and those allocated here from the entry's
    # layouts (O, Stats, the gradients; and the forward's O and Stats saved for the backward) not re-checked: their
    # shapes, strides, dtypes and devices are the graph's by construction. New pointers are still checked in full.
    def forward(self, entry: Entry, q, k, v, bias) -> tuple:
        o = q.new_empty_strided(entry.o_dims, entry.o_strides)  # q's dtype and device, the graph's O layout
        stats = None if entry.stats_dims is None else q.new_empty(entry.stats_dims, dtype=self.torch.float32)
        given = (q, k, v) if bias is None else (q, k, v, bias)
        made = (o,) if stats is None else (o, stats)
        trusted = entry.fwd_trusted
        if trusted is None or not split_execute(entry.fwd, trusted, given + made):
            t_q, t_k, t_v, t_o, t_stats, t_bias = entry.fwd_keys
            entry.fwd_trusted = checked_execute(entry.fwd, (t_q, t_k, t_v) if bias is None else (t_q, t_k, t_v, t_bias),
                                                (t_o,) if stats is None else (t_o, t_stats), given, made)
        return o, stats

    def backward(self, entry: Entry, q, k, v, o, stats, bias, d_o) -> tuple:
        if d_o.dtype != q.dtype:
            d_o = d_o.to(q.dtype)
        if d_o.data_ptr() % 16:  # the graphs' tensors are 16-byte aligned: a fresh buffer is
            d_o = d_o.clone() if d_o.is_contiguous() else d_o.contiguous()
        strides = d_o.stride()
        key = None if strides == entry.o_strides else tuple(strides)
        built = entry.bwd[None] if key is None else self._backward_graph(entry, key)
        if built is None:
            d_o, built, key = d_o.contiguous(), entry.bwd[None], None
        g, ts = built
        dq, dk, dv = (q.new_empty_strided(dims, strides) for dims, strides in entry.grad_layouts)
        given = (d_o, q, k, v) if bias is None else (d_o, q, k, v, bias)
        made = (o, stats, dq, dk, dv)
        trusted = entry.bwd_trusted.get(key)
        if trusted is None or not split_execute(g, trusted, given + made):
            entry.bwd_trusted[key] = checked_execute(g, tuple(ts[n] for n in BWD_GIVEN[:len(given)]),
                                                     tuple(ts[n] for n in BWD_MADE), given, made)
        return dq, dk, dv

    def _backward_graph(self, entry: Entry, strides: tuple) -> Any:
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


def build_entry(torch, cfg: Config, forward: bool = True, backward: bool | None = None) -> Entry:
    """The planned graphs of ``cfg`` on its device: the forward (unless not ``forward``) and, where ``backward``
    (default: the config needs gradients), the backward for dO laid out as O. Raises what building raises (a
    refusal: cudnnGraphNotSupportedError and its kin). One builder for the provider, the sdpa_torch operators and
    the aten overrides."""
    import cudnn_py as cudnn

    with torch.cuda.device(cfg.device):
        g, ts = forward_graph(cudnn, cfg) if forward else (None, {})
        if g is not None:
            _plan(cudnn, g)
        entry = Entry(cfg, g, ts)
        if cfg.requires_grad if backward is None else backward:  # built now: a refused backward is known first
            gb, tb = backward_graph(cudnn, cfg)
            _plan(cudnn, gb)
            entry.bwd[None] = (gb, tb)
    logger.info("cudnn_py.torch: built the attention graphs for %s", cfg)
    return entry


class SharedGraphs:
    """The graph cache of the sdpa_torch operators and the aten overrides (one per process, shared by both): an
    LRU of Entry per (Config, forward, backward), built under a lock (a thread asking for a key being built waits
    for it). A refusal is not cached: it is raised to the caller, again at the next call."""

    def __init__(self, torch, maxsize: int = 128):
        self.torch = torch
        self.cache = LRU(maxsize)
        self._lock = threading.Lock()

    def entry(self, cfg: Config, forward: bool, backward: bool) -> Entry:
        key = (cfg, forward, backward)
        with self._lock:
            entry = self.cache.get(key)
            if entry is None:
                entry = build_entry(self.torch, cfg, forward, backward)
                self.cache.put(key, entry)
        return entry


def split_execute(g: Any, trusted: tuple, operands: tuple) -> bool:
    """Run ``g`` through ``trusted`` (what :func:`checked_execute` returned) while ``g``'s bound execute is still the
    one it was made with; False (nothing run) where it is not."""
    if trusted[0] is not g.__dict__.get("execute"):
        return False
    trusted[1](operands, None)
    return True


def checked_execute(g: Any, checked: tuple, allocated: tuple, given: tuple, made: tuple) -> tuple | None:
    """Run ``g`` through its checked execute (every operand checked: ``given`` at the graph tensors ``checked``,
    ``made`` at ``allocated``), then return (its bound execute now, its split execute re-checking ``checked`` and not
    ``allocated``) for the next calls, or None where the graph offers none."""
    g.execute(dict(zip(checked + allocated, given + made)), None)
    run_trusted = g._trusted_execute(checked, allocated)
    bound = g.__dict__.get("execute")
    return None if run_trusted is None or bound is None else (bound, run_trusted)


def run(built: tuple, operands: dict) -> None:
    """Execute ``built`` ((graph, {name: graph tensor})) on torch's current stream with ``operands`` by name (its
    workspace from torch's caching allocator: execute without a handle)."""
    g, ts = built
    g.execute({ts[n]: t for n, t in operands.items()}, None)


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
    grad_enabled = torch.is_grad_enabled

    def gradients(ctx, d_o):
        q, k, v, o, stats, bias = ctx.saved_tensors
        dq, dk, dv = ctx.provider.backward(ctx.entry, q, k, v, o, stats, bias, d_o)
        return dq, dk, dv, None, None, None

    # The gradients are not differentiable (cuDNN's backward): under create_graph=True they are returned as
    # once_differentiable returns them (differentiating them raises then). Without it, grad mode is already off
    # in a backward, which is all once_differentiable's wrapper would establish: the call skips it (its no_grad
    # context and its checks are a few microseconds of every training step's host time).
    once = torch.autograd.function.once_differentiable(gradients)

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
        def backward(ctx, d_o):
            return once(ctx, d_o) if grad_enabled() else gradients(ctx, d_o)

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
