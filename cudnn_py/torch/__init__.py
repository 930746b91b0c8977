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

The official module's ``cudnn.torch`` names are here too: ``install_sdpa_overrides()`` (returning ``SdpaOverrides``,
whose ``remove()`` undoes it), ``calls`` and ``served_plan_names()`` (:mod:`.overrides`: the aten kernels of torch's
cuDNN attention ops replaced, the official module's way), and ``cudnn_py.sdpa_torch`` is :mod:`.sdpa_ops`' function
(the ``torch.ops.cudnn_py.sdpa_fwd`` / ``sdpa_bwd`` operators). They import torch when first read. The official's
``cudnn.torch.install()`` installs those aten overrides; here ``install()`` keeps its meaning (the provider above)
and ``install(mechanism="aten")`` is the official's (docs/differences.md).

The package by job: :mod:`.config` decides whether a call is served and makes its key (``Config``, ``decide``);
:mod:`.graphs` builds a Config's forward and backward graphs (``Entry``) and holds the LRU; :mod:`.serving` is the
per-call path (``Provider``: the steady state, the general path, the autograd Function); this module installs it.
Every name documented here is importable from ``cudnn_py.torch``.

Importing this package does not import torch; ``install()`` does.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidValueError, UsageError
from .config import Config, Fallback, _short, as_4d, decide, grad_strides, mask_layout, row_major
from .graphs import LRU, Entry, Unsupported, backward_graph, forward_graph
from .serving import DEFAULT_CACHE_SIZE, Provider, logger

__all__ = ["install", "uninstall", "installed", "provider", "paused", "detect_registry", "PROVIDER_NAME",
           "DEFAULT_CACHE_SIZE", "Provider", "Config", "Fallback", "decide", "Entry", "Unsupported", "LRU",
           "forward_graph", "backward_graph", "row_major", "grad_strides", "mask_layout", "as_4d", "logger",
           "SdpaOverrides", "calls", "install_sdpa_overrides", "served_plan_names"]

# the official module's cudnn.torch names, from modules that import torch: resolved on first read
_TORCH_NAMES = {"SdpaOverrides": "overrides", "calls": "overrides", "install_sdpa_overrides": "overrides",
                "served_plan_names": "overrides"}


def __getattr__(name: str) -> Any:
    module = _TORCH_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    try:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    except ImportError as error:  # (torch missing, or failing to import)
        raise ImportError(f"cudnn_py.torch.{name} requires torch, which could not be imported: {error}") from error
    globals()[name] = value
    return value

PROVIDER_NAME = "CUDNN_PY"


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
    attention registry where it exists, else the direct override), "registry" (refused without one),
    "override", or "aten": the official module's ``cudnn.torch.install()``, the aten kernels of torch's cuDNN
    attention ops replaced (``install_sdpa_overrides()``: served only where torch picks its cuDNN backend;
    ``cache_size`` does not apply, the operators' cache is shared). Returns the mechanism used. Installing twice is
    a no-op (returns the mechanism in use)."""
    if mechanism not in ("auto", "registry", "override", "aten"):
        raise InvalidValueError(f"mechanism must be 'auto', 'registry', 'override' or 'aten', got {mechanism!r}")
    if mechanism == "aten" and cache_size != DEFAULT_CACHE_SIZE:
        raise InvalidValueError("cache_size applies to the provider, not to mechanism='aten' (whose graphs are "
                                "cached with the sdpa_torch operators')")
    import torch
    import torch.nn.functional as functional

    with _install_lock:
        if _state["mechanism"] is not None:
            return str(_state["mechanism"])
        if mechanism == "aten":
            from .overrides import install_sdpa_overrides

            _state.update(handle=install_sdpa_overrides(), mechanism="aten")
            logger.info("cudnn_py.torch: torch's cuDNN attention kernels are served by cudnn_py (aten overrides)")
            return "aten"
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
        if _state["mechanism"] == "aten":
            handle.remove()
            _state.update(handle=None, mechanism=None)
            logger.info("cudnn_py.torch: uninstalled; torch's cuDNN attention kernels are torch's again")
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
    """The mechanism in use ("registry" / "override" / "aten"), or None."""
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
    if _state["mechanism"] == "aten":  # torch's kernels for the block, then a fresh installation of the overrides
        from .overrides import install_sdpa_overrides

        handle.remove()
        try:
            yield
        finally:
            _state["handle"] = install_sdpa_overrides()
        return
    functional = handle._functional
    functional.scaled_dot_product_attention = handle._original
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = handle._installed
