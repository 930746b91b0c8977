"""``cudnn.sdpa_torch``: the official module's attention operators for what ``scaled_dot_product_attention``
cannot say (attention sinks, diagonal bands, bottom-right alignment, padded batches, THD / varlen packing), as the
torch custom operators ``torch.ops.cudnn_py.sdpa_fwd`` / ``sdpa_bwd`` over the graphs of :mod:`.graphs`, cached in
the shared :class:`~.serving.SharedGraphs` (the aten overrides use the same).

Layouts: dense tensors are BHSD (b, h, s, d) of any strides with a unit head-dim stride; THD tensors are packed
(total, h, d) with ``cu_seqlens_q`` / ``cu_seqlens_kv`` ((b + 1,) int32 / int64 prefix sums of the lengths). The
checks are the official operators': the same exception classes (cudnn_py's subclasses of them), raised when the
CUDA kernel runs, before any graph is built. ``sdpa_fwd`` is differentiable (``torch.library.register_autograd``);
its backward, like the official's, refuses sinks and padded dense batches (NotImplementedError) and needs the
forward's LSE (``return_lse=True``, else RuntimeError). Each operator has a fake implementation giving the real
kernel's output layouts, so ``torch.compile`` traces it.

Importing this module imports torch and defines the operators (``cudnn_py.sdpa_torch`` imports it on first read).
"""
from __future__ import annotations

import logging
import math
from typing import Any

import torch

from ..errors import InvalidValueError, NotImplementedOptionError, UsageError
from .config import Config, like_layout
from .serving import SharedGraphs, run

__all__ = ["sdpa", "thd_lse_to_padded", "GRAPHS", "NAMESPACE"]

logger = logging.getLogger("cudnn_py.torch")
NAMESPACE = "cudnn_py"  # not the official's "cudnn": both packages' operators can live in one process
_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")
_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
GRAPHS = SharedGraphs(torch)  # the operators' and the aten overrides' graphs (one cache for the process)
_register_fake = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract  # torch < 2.4


# ---- the official operators' checks (their classes, raised in their order) ------------------------------------------
def _check_io_dtypes(op: str, **tensors: torch.Tensor) -> None:
    first = next(iter(tensors.values())).dtype
    if first not in _DTYPES:
        raise InvalidValueError(f"{op}: unsupported dtype {first}; supported: "
                                f"{sorted(str(d) for d in _DTYPES)}")
    mixed = {n: str(t.dtype) for n, t in tensors.items() if t.dtype != first}
    if mixed:
        raise InvalidValueError(f"{op}: all io tensors must share one dtype ({first}); got {mixed}")


def _check_band(is_causal: bool, window_right: int) -> None:
    if is_causal and window_right > 0:
        raise InvalidValueError(f"is_causal masks every future column but window_right={window_right} admits some; "
                                "pass one or the other")


def _check_varlen(op: str, q, cu_q, cu_kv, max_q: int, max_kv: int) -> None:
    if cu_kv is None or max_q <= 0 or max_kv <= 0:
        raise InvalidValueError("varlen path needs cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv")
    if q.ndim != 3:
        raise InvalidValueError(f"varlen path expects packed (T, H, D) tensors, got q.ndim={q.ndim}")


def _check_heads(k, shape_k: tuple, h_q: int, h_k: int, h_v: int, what: str) -> None:
    if tuple(k.shape) != shape_k:
        raise InvalidValueError(f"k shape {tuple(k.shape)} must be {what} to match q and v")
    if h_q % h_k or h_q % h_v:
        raise InvalidValueError(f"GQA head counts must divide H_q={h_q}; got H_k={h_k}, H_v={h_v}")


def _check_device(q, **tensors) -> None:
    """Every operand is bound as a device pointer: one on another device (or the host) is refused here."""
    for name, t in tensors.items():
        if t is not None and t.device != q.device:
            raise InvalidValueError(f"{name} must be on {q.device} (bound as a device pointer); got {t.device}")


def _check_prefix_sums(cu_q, cu_kv) -> None:
    """(Not in the official checks: unequal batch counts would read offsets past one of them.)"""
    if cu_q.ndim != 1 or cu_kv.ndim != 1 or cu_q.numel() != cu_kv.numel() or cu_q.numel() < 2:
        raise InvalidValueError(f"cu_seqlens_q {tuple(cu_q.shape)} and cu_seqlens_kv {tuple(cu_kv.shape)} must be "
                                "(b + 1,) prefix sums of one batch (b >= 1)")
    if cu_q.dtype not in (torch.int32, torch.int64) or cu_kv.dtype not in (torch.int32, torch.int64):
        raise InvalidValueError(f"cu_seqlens must be int32 or int64, got {cu_q.dtype} and {cu_kv.dtype}")


def _dense_unit(t: torch.Tensor, op: str, name: str) -> torch.Tensor:
    """``t``, or a packed copy where its head dim is strided or its base is not 16-byte aligned (the graphs'
    tensors declare both). clone(), not contiguous(): a contiguous tensor at an odd offset stays misaligned."""
    if t.stride(-1) != 1 or t.data_ptr() % 16:
        logger.warning("%s: copying %s to normalize layout/alignment (slow path)", op, name)
        t = t.clone(memory_format=torch.contiguous_format)
    return t


def _thd_layout(t: torch.Tensor, s_max: int) -> tuple:
    """The (b, h, s, d) descriptor of packed (total, h, d) ``t`` with its own strides (a view of a KV-packed
    buffer has a token stride of 2 h d); the batch stride is nominal (the ragged offsets place each batch)."""
    s_t, s_h, s_d = (int(x) for x in t.stride())
    return (s_max * s_t, s_h, s_t, s_d)


def _packed(h: int, s: int, d: int) -> tuple:
    return (s * h * d, d, h * d, 1)


def _round64(n: int) -> int:
    return -(-n // 64) * 64


def _bounds(is_causal: bool, window_left: int, window_right: int) -> tuple:
    """cuDNN's (left, right) band bounds of the operators' arguments (causal: a right bound of 0)."""
    right = window_right if window_right >= 0 else (0 if is_causal else None)
    return (window_left if window_left >= 0 else None), right


def _config(q, k, v, o_strides, scale, is_causal, bottom_right, left, right, *, lse=False, sinks=False,
            padded=False, dims=None, ragged=None, grads=None, deterministic=False) -> Config:
    dims = dims or (tuple(q.shape), tuple(k.shape), tuple(v.shape))
    strides = (tuple(q.stride()), tuple(k.stride()), tuple(v.stride())) if ragged is None else ragged[1]
    (dq, dk, dv), (sq, sk, sv) = dims, strides
    left, right = _bounds(is_causal, left, right)
    return Config(q=(tuple(dq), tuple(sq)), k=(tuple(dk), tuple(sk)), v=(tuple(dv), tuple(sv)), bias=None,
                  dtype=_DTYPES[q.dtype], device=int(q.device.index or 0), causal=False, scale=float(scale),
                  gqa=dq[1] != dk[1], requires_grad=False, deterministic=deterministic, lse=lse,
                  bottom_right=bool(bottom_right), left=left, right=right, sinks=sinks, padded=padded,
                  ragged=None if ragged is None else ragged[0], o_strides=tuple(o_strides), grads=grads)


def _column(t: torch.Tensor, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
    """A per-batch length or per-head sink operand as the graph declares it: ``dtype``, compact, aligned. One
    already so is reshaped (torch's reshape refuses another element count, as in the official operators); another
    is counted first (ValueError) and converted."""
    if t.dtype == dtype and t.is_contiguous() and t.data_ptr() % 16 == 0:
        return t.reshape(shape)
    if t.numel() != math.prod(shape):
        raise InvalidValueError(f"SDPA forward metadata needs {math.prod(shape)} elements; got {t.numel()}")
    return t.to(dtype).contiguous().clone().reshape(shape)


def _varlen_operands(cu_q, cu_kv, q_offsets: dict, kv_offsets: dict) -> dict:
    """The THD operands: the int32 lengths and the int64 element offsets of each packed tensor (the prefix sums
    times its token stride), computed on the device (no host read of the prefix sums)."""
    out = {"seq_len_q": (cu_q[1:] - cu_q[:-1]).to(torch.int32).reshape(-1, 1, 1, 1),
           "seq_len_kv": (cu_kv[1:] - cu_kv[:-1]).to(torch.int32).reshape(-1, 1, 1, 1)}
    for cu, offsets in ((cu_q, q_offsets), (cu_kv, kv_offsets)):
        wide = cu.to(torch.int64)
        for name, stride in offsets.items():
            out["ragged_" + name] = (wide * int(stride)).reshape(-1, 1, 1, 1)
    return out


# ---- sdpa_fwd -------------------------------------------------------------------------------------------------------
_FWD = ("sdpa_fwd(Tensor q, Tensor k, Tensor v, float attn_scale, bool is_causal=False, "
        "bool causal_bottom_right=False, int window_left=-1, int window_right=-1, Tensor? sinks=None, "
        "Tensor? seq_len_q=None, Tensor? seq_len_kv=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_kv=None, "
        "int max_seqlen_q=0, int max_seqlen_kv=0, bool return_lse=True) -> (Tensor, Tensor)")


def _fwd_impl(q, k, v, attn_scale, is_causal=False, causal_bottom_right=False, window_left=-1, window_right=-1,
              sinks=None, seq_len_q=None, seq_len_kv=None, cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=0,
              max_seqlen_kv=0, return_lse=True):
    _check_io_dtypes("sdpa_fwd", q=q, k=k, v=v)
    if causal_bottom_right and not (is_causal or window_left >= 0 or window_right >= 0):
        raise InvalidValueError("causal_bottom_right only re-anchors an active diagonal band; set is_causal, "
                                "window_left or window_right too")
    _check_band(is_causal, window_right)
    thd = cu_seqlens_q is not None
    if thd:
        _check_varlen("sdpa_fwd", q, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
        if seq_len_q is not None or seq_len_kv is not None:
            raise InvalidValueError("varlen path derives seq lens from cu_seqlens; do not pass seq_len_q/kv")
        q, k, v = (_dense_unit(t, "sdpa_fwd", n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
        (t_q, h_q, d_qk), (t_kv, h_v, d_v), h_k = q.shape, v.shape, k.shape[1]
        _check_heads(k, (t_kv, h_k, d_qk), h_q, h_k, h_v, f"(T_kv={t_kv}, H_k, D_qk={d_qk})")
        s_q, s_kv = max_seqlen_q, max_seqlen_kv
        _check_device(q, cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv)
        _check_prefix_sums(cu_seqlens_q, cu_seqlens_kv)
        b = cu_seqlens_q.numel() - 1
        dims = ((b, h_q, s_q, d_qk), (b, h_k, s_kv, d_qk), (b, h_v, s_kv, d_v))
        layouts = (_thd_layout(q, s_q), _thd_layout(k, s_kv), _thd_layout(v, s_kv))
        o_strides = _packed(h_q, s_q, d_v)
    else:
        if q.ndim != 4:
            raise InvalidValueError(f"dense path expects BHSD tensors, got q.ndim={q.ndim}")
        (b, h_q, s_q, d_qk), (_, h_v, s_kv, d_v), h_k = q.shape, v.shape, k.shape[1]
        if v.shape[0] != b:
            raise InvalidValueError(f"k shape {tuple(k.shape)} must be (B={b}, H_k, S_kv={s_kv}, D_qk={d_qk}) to "
                                    "match q and v")
        _check_heads(k, (b, h_k, s_kv, d_qk), h_q, h_k, h_v, f"(B={b}, H_k, S_kv={s_kv}, D_qk={d_qk})")
        q, k, v = (_dense_unit(t, "sdpa_fwd", n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
        dims, layouts = None, None
        o_strides = like_layout((b, h_q, s_q, d_v), q.stride())  # O takes q's layout
    _check_device(q, k=k, v=v, sinks=sinks, seq_len_q=seq_len_q, seq_len_kv=seq_len_kv)
    padded = seq_len_q is not None or seq_len_kv is not None
    if padded and (seq_len_q is None or seq_len_kv is None):
        raise InvalidValueError("padded path needs both seq_len_q and seq_len_kv")
    ragged = None if not thd else ((0, 0), layouts)  # (the forward reads no packed totals: one graph for all)
    cfg = _config(q, k, v, o_strides, attn_scale, is_causal, causal_bottom_right, window_left, window_right,
                  lse=bool(return_lse), sinks=sinks is not None, padded=padded, dims=dims, ragged=ragged)
    entry = GRAPHS.entry(cfg, True, False)

    f32 = torch.float32
    if thd:
        o = q.new_empty((t_q, h_q, d_v))
        stats = q.new_empty((t_q, h_q, 1), dtype=f32) if return_lse else q.new_empty(0, dtype=f32)
    else:
        o = torch.empty_strided((b, h_q, s_q, d_v), o_strides, dtype=q.dtype, device=q.device)
        stats = q.new_empty((b, h_q, s_q, 1), dtype=f32) if return_lse else q.new_empty(0, dtype=f32)
    operands = {"q": q, "k": k, "v": v, "o": o}
    if return_lse:
        operands["stats"] = stats
    if sinks is not None:
        operands["sinks"] = _column(sinks, f32, (1, h_q, 1, 1))
    if thd:
        q_side = {"q": q.stride(0), "o": h_q * d_v, **({"stats": h_q} if return_lse else {})}
        operands.update(_varlen_operands(cu_seqlens_q, cu_seqlens_kv, q_side, {"k": k.stride(0), "v": v.stride(0)}))
    elif padded:
        operands["seq_len_q"] = _column(seq_len_q, torch.int32, (b, 1, 1, 1))
        operands["seq_len_kv"] = _column(seq_len_kv, torch.int32, (b, 1, 1, 1))
    run((entry.fwd, entry.fwd_t), operands)
    return o, stats


def _fwd_fake(q, k, v, attn_scale, is_causal=False, causal_bottom_right=False, window_left=-1, window_right=-1,
              sinks=None, seq_len_q=None, seq_len_kv=None, cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=0,
              max_seqlen_kv=0, return_lse=True):
    """The real kernel's outputs: THD packed contiguous, dense O in q's layout; Stats float32 (an empty
    placeholder without ``return_lse``)."""
    f32, d_v = torch.float32, v.shape[-1]
    if cu_seqlens_q is not None:
        o = q.new_empty((q.shape[0], q.shape[1], d_v))
        stats = q.new_empty((q.shape[0], q.shape[1], 1), dtype=f32)
    else:
        dims = (q.shape[0], q.shape[1], q.shape[2], d_v)
        o = torch.empty_strided(dims, _fake_like(dims, q), dtype=q.dtype, device=q.device)
        stats = q.new_empty((q.shape[0], q.shape[1], q.shape[2], 1), dtype=f32)
    return o, (stats if return_lse else q.new_empty(0, dtype=f32))


def _fake_like(dims, t) -> tuple:
    """like_layout for a fake tensor (its dims may be symbolic: their order alone is read)."""
    strides = tuple(t.stride())
    if any(s == 0 for s in strides):
        return tuple(torch.empty(dims, device="meta").stride())
    out, acc = [0] * len(dims), 1
    for i in sorted(range(len(dims)), key=lambda i: strides[i]):
        out[i] = acc
        acc = acc * dims[i]
    return tuple(out)


# ---- sdpa_bwd -------------------------------------------------------------------------------------------------------
_BWD = ("sdpa_bwd(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, float attn_scale, "
        "bool is_causal=False, bool causal_bottom_right=False, int window_left=-1, int window_right=-1, "
        "Tensor? sinks=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_kv=None, int max_seqlen_q=0, "
        "int max_seqlen_kv=0, bool is_deterministic=False) -> (Tensor, Tensor, Tensor)")


def _bwd_impl(grad_out, q, k, v, o, lse, attn_scale, is_causal=False, causal_bottom_right=False, window_left=-1,
              window_right=-1, sinks=None, cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=0, max_seqlen_kv=0,
              is_deterministic=False):
    if sinks is not None:  # no dSink output in the schema: the sink term's gradient would be dropped
        raise NotImplementedOptionError("sdpa_bwd does not support attention sinks (as in the official operator, "
                                        "which has no dSink); gradients would be wrong")
    _check_band(is_causal, window_right)
    thd = cu_seqlens_q is not None
    if thd:
        _check_varlen("sdpa_bwd", q, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    elif q.ndim != 4:
        raise InvalidValueError(f"dense path expects BHSD tensors, got q.ndim={q.ndim}")
    _check_io_dtypes("sdpa_bwd", grad_out=grad_out, q=q, k=k, v=v, o=o)
    if thd:
        q, k, v, o = (_dense_unit(t, "sdpa_bwd", n) for t, n in ((q, "q"), (k, "k"), (v, "v"), (o, "o")))
        (t_q, h_q, d_qk), (t_kv, h_v, d_v), h_k = q.shape, v.shape, k.shape[1]
        _check_heads(k, (t_kv, h_k, d_qk), h_q, h_k, h_v, f"(T_kv={t_kv}, H_k, D_qk={d_qk})")
        if tuple(o.shape) != (t_q, h_q, d_v) or grad_out.shape != o.shape:
            raise InvalidValueError(f"o {tuple(o.shape)} / grad_out {tuple(grad_out.shape)} must be (T_q={t_q}, "
                                    f"H_q={h_q}, D_v={d_v})")
        s_q, s_kv = max_seqlen_q, max_seqlen_kv
        _check_device(q, k=k, v=v, o=o, cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv, lse=lse,
                      grad_out=grad_out)
        _check_prefix_sums(cu_seqlens_q, cu_seqlens_kv)
        b = cu_seqlens_q.numel() - 1
    else:
        (b, h_q, s_q, d_qk), (_, h_v, s_kv, d_v), h_k = q.shape, v.shape, k.shape[1]
        _check_heads(k, (b, h_k, s_kv, d_qk), h_q, h_k, h_v, f"(B={b}, H_k, S_kv={s_kv}, D_qk={d_qk})")
        if tuple(o.shape) != (b, h_q, s_q, d_v) or grad_out.shape != o.shape:
            raise InvalidValueError(f"o {tuple(o.shape)} / grad_out {tuple(grad_out.shape)} must be (B={b}, "
                                    f"H_q={h_q}, S_q={s_q}, D_v={d_v})")
        _check_device(q, k=k, v=v, o=o, lse=lse, grad_out=grad_out)
        q, k, v, o = (_dense_unit(t, "sdpa_bwd", n) for t, n in ((q, "q"), (k, "k"), (v, "v"), (o, "o")))
    if lse.dtype != torch.float32:
        raise InvalidValueError(f"lse must be float32, got {lse.dtype}")
    if not lse.is_contiguous() or lse.data_ptr() % 16:
        lse = lse.clone(memory_format=torch.contiguous_format)
    lse = lse.reshape(b, h_q, s_q, 1)  # (torch refuses another element count)
    if grad_out.stride() != o.stride() or grad_out.data_ptr() % 16:  # dO is declared in O's layout
        grad_out = torch.empty_strided(o.shape, o.stride(), dtype=o.dtype, device=o.device).copy_(grad_out)
    if thd:
        dims = ((b, h_q, s_q, d_qk), (b, h_k, s_kv, d_qk), (b, h_v, s_kv, d_v))
        layouts = (_thd_layout(q, s_q), _thd_layout(k, s_kv), _thd_layout(v, s_kv))
        grads = (_packed(h_q, s_q, d_qk), _packed(h_k, s_kv, d_qk), _packed(h_v, s_kv, d_v))
        cfg = _config(q, k, v, _thd_layout(o, s_q), attn_scale, is_causal, causal_bottom_right, window_left,
                      window_right, dims=dims, ragged=((_round64(t_q), _round64(t_kv)), layouts), grads=grads,
                      deterministic=bool(is_deterministic))
        outs = [q.new_empty(q.shape), q.new_empty(k.shape), q.new_empty(v.shape)]
    else:
        grads = (like_layout(q.shape, q.stride()), like_layout(k.shape, k.stride()),  # each in its input's layout
                 like_layout(v.shape, v.stride()))
        cfg = _config(q, k, v, o.stride(), attn_scale, is_causal, causal_bottom_right, window_left, window_right,
                      grads=grads, deterministic=bool(is_deterministic))
        outs = [torch.empty_strided(t.shape, s, dtype=q.dtype, device=q.device) for t, s in zip((q, k, v), grads)]
    entry = GRAPHS.entry(cfg, False, True)
    operands = {"q": q, "k": k, "v": v, "o": o, "dO": grad_out, "stats": lse, "dQ": outs[0], "dK": outs[1],
                "dV": outs[2]}
    if thd:
        operands.update(_varlen_operands(cu_seqlens_q, cu_seqlens_kv, {"q": q.stride(0), "o": o.stride(0),
                                                                      "dQ": h_q * d_qk},
                                         {"k": k.stride(0), "v": v.stride(0), "dK": h_k * d_qk, "dV": h_v * d_v}))
    run(entry.bwd[None], operands)
    return tuple(outs)


def _bwd_fake(grad_out, q, k, v, o, lse, attn_scale, is_causal=False, causal_bottom_right=False, window_left=-1,
              window_right=-1, sinks=None, cu_seqlens_q=None, cu_seqlens_kv=None, max_seqlen_q=0, max_seqlen_kv=0,
              is_deterministic=False):
    """Fresh gradients in q's dtype: packed for THD, each in its input's layout for dense."""
    if cu_seqlens_q is not None:
        return q.new_empty(q.shape), q.new_empty(k.shape), q.new_empty(v.shape)
    return tuple(torch.empty_strided(t.shape, _fake_like(t.shape, t), dtype=q.dtype, device=q.device)
                 for t in (q, k, v))


# ---- autograd -------------------------------------------------------------------------------------------------------
_INPUTS = ("q", "k", "v", "attn_scale", "is_causal", "causal_bottom_right", "window_left", "window_right", "sinks",
           "seq_len_q", "seq_len_kv", "cu_seqlens_q", "cu_seqlens_kv", "max_seqlen_q", "max_seqlen_kv", "return_lse")


def _setup_context(ctx, inputs, output) -> None:
    a = dict(zip(_INPUTS, inputs))
    o, stats = output
    ctx.save_for_backward(a["q"], a["k"], a["v"], o, stats, a["cu_seqlens_q"], a["cu_seqlens_kv"])
    for name in ("attn_scale", "is_causal", "causal_bottom_right", "window_left", "window_right", "max_seqlen_q",
                 "max_seqlen_kv", "return_lse"):
        setattr(ctx, name, a[name])
    ctx.has_sinks = a["sinks"] is not None
    ctx.has_seq_lens = a["seq_len_q"] is not None or a["seq_len_kv"] is not None
    # cuDNN's backward consumes the LSE, it makes no gradient of it: a loss through it is refused by autograd
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(stats)


def thd_lse_to_padded(lse: torch.Tensor, cu_seqlens_q: torch.Tensor, max_seqlen_q: int) -> torch.Tensor:
    """Packed (total, h) log-sum-exp -> padded (b, h, max_seqlen_q, 1), as the THD backward takes it; rows past a
    sequence's length stay zero. On the device (no host read of the prefix sums: traceable and capturable). Tokens
    past the last prefix sum belong to no sequence and are dropped."""
    b, (tokens, heads) = cu_seqlens_q.numel() - 1, lse.shape
    cu = cu_seqlens_q.to(torch.int64)
    token = torch.arange(tokens, device=lse.device)
    seq = torch.searchsorted(cu[1:], token, right=True)  # b for the tokens past the end: the spare row
    pos = (token - cu[seq.clamp(max=b)]).clamp(min=0, max=max(max_seqlen_q - 1, 0))
    padded = lse.new_zeros((b + 1, heads, max(max_seqlen_q, 1), 1), dtype=torch.float32)
    padded[seq, :, pos, 0] = lse.to(torch.float32)
    return padded[:b, :, :max_seqlen_q]


def _backward(ctx, grad_o, _grad_stats):
    q, k, v, o, stats, cu_q, cu_kv = ctx.saved_tensors
    if grad_o is None:  # O unused by the loss (Stats is not differentiable)
        return (None,) * len(_INPUTS)
    if ctx.has_sinks:
        raise NotImplementedOptionError("sdpa_fwd autograd does not support attention sinks (no dSink)")
    if ctx.has_seq_lens and cu_q is None:
        raise NotImplementedOptionError("sdpa_fwd autograd does not support the padded dense path")
    if not ctx.return_lse:
        raise UsageError("sdpa_fwd autograd requires return_lse=True (the backward consumes the forward's LSE)")
    kw: dict[str, Any] = dict(is_causal=ctx.is_causal, causal_bottom_right=ctx.causal_bottom_right,
                              window_left=ctx.window_left, window_right=ctx.window_right,
                              is_deterministic=torch.are_deterministic_algorithms_enabled())
    if cu_q is not None:
        stats = thd_lse_to_padded(stats[:, :, 0], cu_q, ctx.max_seqlen_q)
        kw.update(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, max_seqlen_q=ctx.max_seqlen_q,
                  max_seqlen_kv=ctx.max_seqlen_kv)
    dq, dk, dv = torch.ops.cudnn_py.sdpa_bwd(grad_o, q, k, v, o, stats, ctx.attn_scale, **kw)
    return (dq, dk, dv) + (None,) * (len(_INPUTS) - 3)


def _define() -> None:
    if hasattr(torch.ops.cudnn_py, "sdpa_fwd"):  # (a re-import of this module: torch keeps the definitions)
        return
    for schema, impl, fake in ((_FWD, _fwd_impl, _fwd_fake), (_BWD, _bwd_impl, _bwd_fake)):
        name = schema.split("(", 1)[0]
        _LIBRARY.define(schema)
        _LIBRARY.impl(name, impl, "CUDA")
        _register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIBRARY)
    torch.library.register_autograd(f"{NAMESPACE}::sdpa_fwd", _backward, setup_context=_setup_context,
                                    lib=_LIBRARY)


_define()


# ---- the public function --------------------------------------------------------------------------------------------
def sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, scale: float | None = None,
         is_causal: bool = False, causal_bottom_right: bool = False, window_left: int = -1, window_right: int = -1,
         sinks: torch.Tensor | None = None, seq_len_q: torch.Tensor | None = None,
         seq_len_kv: torch.Tensor | None = None, cu_seqlens_q: torch.Tensor | None = None,
         cu_seqlens_kv: torch.Tensor | None = None, max_seqlen_q: int = 0, max_seqlen_kv: int = 0,
         return_lse: bool = False):
    """Attention forward with the surface beyond torch's function (see the module doc): ``o``, or ``(o, lse)``
    with ``return_lse=True``. ``scale`` defaults to 1/sqrt(head dim)."""
    attn_scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    o, lse = torch.ops.cudnn_py.sdpa_fwd(
        query, key, value, attn_scale, is_causal=is_causal, causal_bottom_right=causal_bottom_right,
        window_left=window_left, window_right=window_right, sinks=sinks, seq_len_q=seq_len_q, seq_len_kv=seq_len_kv,
        cu_seqlens_q=cu_seqlens_q, cu_seqlens_kv=cu_seqlens_kv, max_seqlen_q=max_seqlen_q,
        max_seqlen_kv=max_seqlen_kv, return_lse=return_lse)
    return (o, lse) if return_lse else o

