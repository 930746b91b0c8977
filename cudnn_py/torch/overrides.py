"""The official module's aten overrides (its ``cudnn.torch.install_sdpa_overrides``): the CUDA kernels of
``aten::_scaled_dot_product_cudnn_attention`` and its backward, and (where this torch has them) of
``torch_attn::_varlen_attn``, ``_varlen_attn_out`` and ``_varlen_attn_backward``, replaced through
``torch.library`` by functions that call :mod:`.sdpa_ops`' operators (whose graphs :mod:`.graphs` builds and
:class:`~.serving.SharedGraphs` caches, with the provider's builder).

torch's own autograd wrapper of the aten op is untouched: it saves the forward's outputs and calls the (also
overridden) backward, so ``F.scaled_dot_product_attention`` under ``sdpa_kernel([SDPBackend.CUDNN_ATTENTION])`` runs
on cudnn_py, forward and backward. What the operators do not serve goes to torch's kernels, as in the official
module: an attention bias, dropout, a debug mask, the padded dense backward and (new here) any configuration cuDNN
refuses for cudnn_py go to the aten worker ops ``_cudnn_attention_forward`` / ``_backward`` (torch's own cuDNN
kernels, the ones the override shadows); paged or split varlen calls go to the flash kernels. ``calls`` counts
each path.

Importing this module imports torch and defines the operators of :mod:`.sdpa_ops`; it overrides nothing until
:func:`install_sdpa_overrides` (or ``cudnn_py.torch.install(mechanism="aten")``).
"""
from __future__ import annotations

import json
import logging
import math
from typing import Any

import torch

from ..errors import InvalidValueError, UsageError, cudnnGraphNotSupportedError
from . import sdpa_ops
from .sdpa_ops import thd_lse_to_padded

__all__ = ["SdpaOverrides", "calls", "install_sdpa_overrides", "served_plan_names", "worker_ops_present"]

logger = logging.getLogger("cudnn_py.torch")

# How many aten calls each path served: ours ("fwd" / "bwd"), torch's cuDNN worker ops ("_cpp"), flash ("_fa2").
calls = {"fwd": 0, "bwd": 0, "fwd_cpp": 0, "bwd_cpp": 0, "fwd_fa2": 0, "bwd_fa2": 0}
_said: set = set()


def _refused(path: str, exc: Exception) -> None:
    """A configuration cudnn_py's graphs refuse goes to torch's kernel: said once per message at WARNING."""
    text = f"{path}: cudnn_py refused the graph ({type(exc).__name__}: {' '.join(str(exc).split())[:300]}); " \
           "torch's cuDNN kernel serves it"
    if text not in _said and len(_said) < 4096:
        _said.add(text)
        logger.warning("cudnn_py.torch: %s", text)


def worker_ops_present() -> bool:
    """Whether this torch has the aten worker ops the overrides fall back to (their absence refuses the install:
    a call the overrides cannot serve would have no kernel)."""
    return all(hasattr(torch.ops.aten, n) for n in ("_cudnn_attention_forward", "_cudnn_attention_backward"))


# ---- aten::_scaled_dot_product_cudnn_attention ----------------------------------------------------------------------
def _native_fwd(query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, return_debug_mask, scale):
    calls["fwd_cpp"] += 1
    return torch.ops.aten._cudnn_attention_forward(
        query, key, value, attn_bias, None, None, query.size(-2), key.size(-2), compute_log_sumexp, dropout_p,
        is_causal, return_debug_mask, scale=scale)


def _fwd(query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, return_debug_mask=False,
         *, scale=None):
    if attn_bias is not None or dropout_p != 0.0 or return_debug_mask:
        return _native_fwd(query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal,
                           return_debug_mask, scale)
    attn_scale = scale if scale is not None else 1.0 / math.sqrt(query.size(-1))
    try:
        o, stats = torch.ops.cudnn_py.sdpa_fwd(query, key, value, attn_scale, is_causal=is_causal,
                                               return_lse=compute_log_sumexp)
    except cudnnGraphNotSupportedError as exc:
        _refused("_scaled_dot_product_cudnn_attention", exc)
        return _native_fwd(query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal,
                           return_debug_mask, scale)
    calls["fwd"] += 1
    # aten's contract: (output, logsumexp (b, h, s_q, 1) float32 - Stats' own layout, cum_seq_q, cum_seq_k, max_q,
    # max_k, philox_seed, philox_offset, debug_attn_mask)
    seed = torch.zeros((), dtype=torch.long, device=query.device)
    offset = torch.zeros((), dtype=torch.long, device=query.device)
    return o, stats, None, None, query.size(-2), key.size(-2), seed, offset, None


def _bwd(grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k,
         max_q, max_k, dropout_p, is_causal, *, scale=None):
    native = (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q,
              cum_seq_k, max_q, max_k, dropout_p, is_causal)
    if attn_bias is not None or dropout_p > 0.0 or cum_seq_q is not None:
        calls["bwd_cpp"] += 1
        return torch.ops.aten._cudnn_attention_backward(*native, scale=scale)
    attn_scale = scale if scale is not None else query.size(-1) ** -0.5
    lse = logsumexp if logsumexp.dim() == 4 else logsumexp.unsqueeze(-1)
    try:
        grads = torch.ops.cudnn_py.sdpa_bwd(grad_out, query, key, value, out, lse, attn_scale, is_causal=is_causal,
                                            is_deterministic=torch.are_deterministic_algorithms_enabled())
    except cudnnGraphNotSupportedError as exc:
        _refused("_scaled_dot_product_cudnn_attention_backward", exc)
        calls["bwd_cpp"] += 1
        return torch.ops.aten._cudnn_attention_backward(*native, scale=scale)
    calls["bwd"] += 1
    return grads


# ---- torch_attn varlen ----------------------------------------------------------------------------------------------
def _window(window_size) -> list:
    ws = list(window_size) if window_size is not None else [-1, -1]
    if len(ws) != 2:
        raise InvalidValueError(f"window_size must have length 2, got {len(ws)}")
    return ws


def _left(w: int) -> int:
    """flash's window (w, _) reaches w tokens back besides the diagonal; cuDNN's left bound counts the diagonal."""
    return w + 1 if w >= 0 else -1


def _right(is_causal: bool, w: int) -> tuple:
    """flash's right window as (is_causal, window_right): 0 is causal; more admits future columns."""
    if w == 0:
        return True, -1
    return is_causal, (w if w > 0 else -1)


def _served(cu_seq_k, seqused_k=None, block_table=None, num_splits=None) -> bool:
    """Paged caches and split launches stay on flash, as in the official module (and a call without cu_seq_k)."""
    return cu_seq_k is not None and seqused_k is None and block_table is None and num_splits in (None, 1)


def _flash_fwd(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, scale, ws, seqused_k, block_table,
               num_splits):
    calls["fwd_fa2"] += 1
    output, lse, _rng, _, _ = torch.ops.aten._flash_attention_forward(
        query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, 0.0, is_causal, return_debug_mask=False, scale=scale,
        window_size_left=ws[0], window_size_right=ws[1], seqused_k=seqused_k, block_table=block_table,
        num_splits=num_splits)
    return output, lse, torch.zeros((2,), dtype=torch.uint64, device=query.device)


def _varlen_fwd(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, scale=None, window_size=None,
                enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
    ws = _window(window_size)
    if not _served(cu_seq_k, seqused_k, block_table, num_splits):
        return _flash_fwd(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, scale, ws, seqused_k,
                          block_table, num_splits)
    causal, right = _right(is_causal, ws[1])
    attn_scale = scale if scale is not None else query.shape[-1] ** -0.5
    try:
        o, stats = torch.ops.cudnn_py.sdpa_fwd(
            query, key, value, attn_scale, is_causal=causal, window_left=_left(ws[0]), window_right=right,
            cu_seqlens_q=cu_seq_q, cu_seqlens_kv=cu_seq_k, max_seqlen_q=max_q, max_seqlen_kv=max_k, return_lse=True)
    except cudnnGraphNotSupportedError as exc:
        _refused("_varlen_attn", exc)
        return _flash_fwd(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, scale, ws, seqused_k,
                          block_table, num_splits)
    calls["fwd"] += 1
    lse = stats.squeeze(-1).transpose(0, 1).contiguous()  # (total, h, 1) -> flash's (h, total)
    return o, lse, torch.zeros((2,), dtype=torch.uint64, device=query.device)


def _varlen_fwd_out(out, query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, scale=None,
                    window_size=None, enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
    """``_varlen_attn_out``: the forward into ``out``; returns the LSE."""
    ws = _window(window_size)
    if not _served(cu_seq_k, seqused_k, block_table, num_splits):
        calls["fwd_fa2"] += 1
        return torch.ops.aten._flash_attention_forward_no_dropout_inplace(
            out, query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, 0.0, is_causal, False, scale=scale,
            window_size_left=ws[0], window_size_right=ws[1], seqused_k=seqused_k, block_table=block_table,
            num_splits=num_splits)
    o, lse, _rng = _varlen_fwd(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=is_causal,
                               scale=scale, window_size=window_size, enable_gqa=enable_gqa)
    out.copy_(o)
    return lse


def _varlen_bwd(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, rng_state,
                scale=None, window_size=None):
    ws = _window(window_size)

    def flash():
        calls["bwd_fa2"] += 1
        unused = torch.empty(0, device=query.device)
        return torch.ops.aten._flash_attention_backward(
            grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, 0.0, is_causal, rng_state,
            unused, scale=scale, window_size_left=ws[0], window_size_right=ws[1])

    if not _served(cu_seq_k):
        return flash()
    causal, right = _right(is_causal, ws[1])
    attn_scale = scale if scale is not None else query.shape[-1] ** -0.5
    padded = thd_lse_to_padded(lse.transpose(0, 1), cu_seq_q, max_q)  # flash's (h, total) -> (b, h, max_q, 1)
    try:
        grads = torch.ops.cudnn_py.sdpa_bwd(
            grad_out, query, key, value, out, padded, attn_scale, is_causal=causal, window_left=_left(ws[0]),
            window_right=right, cu_seqlens_q=cu_seq_q, cu_seqlens_kv=cu_seq_k, max_seqlen_q=max_q,
            max_seqlen_kv=max_k, is_deterministic=torch.are_deterministic_algorithms_enabled())
    except cudnnGraphNotSupportedError as exc:
        _refused("_varlen_attn_backward", exc)
        return flash()
    calls["bwd"] += 1
    return grads


# ---- installing -----------------------------------------------------------------------------------------------------
class SdpaOverrides:
    """One installation of the overrides; ``remove()`` undoes it (again: a no-op)."""

    def __init__(self, *libs: Any):
        self._libs = list(libs)

    @property
    def active(self) -> bool:
        return bool(self._libs)

    def remove(self) -> None:
        for lib in self._libs:
            lib._destroy()
        self._libs = []


def _varlen_ops_present() -> bool:
    try:
        import torch.nn.attention.varlen  # (defines the torch_attn ops)
    except ImportError:
        return False
    ns = getattr(torch.ops, "torch_attn", None)
    return all(hasattr(ns, n) for n in ("_varlen_attn", "_varlen_attn_out", "_varlen_attn_backward"))


def install_sdpa_overrides() -> SdpaOverrides:
    """Serve torch's cuDNN attention ops from cudnn_py: the CUDA kernels of
    ``aten::_scaled_dot_product_cudnn_attention`` and its backward, and, where this torch defines them,
    ``torch_attn::_varlen_attn``, ``_varlen_attn_out`` and ``_varlen_attn_backward``. Returns the handle that
    removes them. Each call installs its own registrations (the last installed serves). Refused (UsageError) on a
    torch without the aten worker ops the unserved calls fall back to."""
    if not worker_ops_present():
        raise UsageError(f"torch {torch.__version__} has no aten::_cudnn_attention_forward / _backward: the calls the "
                         "overrides do not serve would have no kernel; use cudnn_py.torch.install() instead")
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_scaled_dot_product_cudnn_attention", _fwd, "CUDA")
    lib.impl("_scaled_dot_product_cudnn_attention_backward", _bwd, "CUDA")
    libs = [lib]
    if _varlen_ops_present():
        vlib = torch.library.Library("torch_attn", "IMPL")
        vlib.impl("_varlen_attn", _varlen_fwd, "CUDA")
        vlib.impl("_varlen_attn_out", _varlen_fwd_out, "CUDA")
        vlib.impl("_varlen_attn_backward", _varlen_bwd, "CUDA")
        libs.append(vlib)
    return SdpaOverrides(*libs)


def served_plan_names() -> list:
    """The plan serving each cached graph of the operators and the overrides (the forward's, then the
    backward's of each entry): a python engine's name, else cuDNN's engine config name."""
    names = []
    for entry in sdpa_ops.GRAPHS.cache.values():
        for g in [entry.fwd] + [b[0] for b in entry.bwd.values() if b is not None]:
            if g is None:
                continue
            try:
                engine = g.selected_engine
                if engine is not None:
                    names.append(str(getattr(engine, "name", type(engine).__name__)))
                else:
                    names.append(str(json.loads(g.explain("json"))["default_plan_name"]))
            except Exception as exc:  # (a report, never a failure)
                names.append(f"<unavailable: {exc}>")
    return names
