"""Whether cudnn_py serves a call of ``scaled_dot_product_attention``, and the configuration it is served as.

:func:`decide` reads a call (through public torch API only) and returns its :class:`Config`, the graph cache's key,
or raises :class:`Fallback` naming why torch's own implementation takes it. Layout helpers (``row_major``,
``grad_strides``, ``mask_layout``, ``as_4d``) are shared with the graphs and the serving path.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_DTYPES = {"float16": "HALF", "bfloat16": "BFLOAT16"}


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
    # The surface torch's function cannot express (the sdpa_torch operators, cudnn_py.torch.sdpa_ops; the provider
    # leaves these at their defaults). Bounds are cuDNN's diagonal_band_left_bound / _right_bound.
    lse: bool = False  # Stats made without gradients (return_lse): the forward graph outputs it
    bottom_right: bool = False  # the diagonal band anchored bottom-right
    left: int | None = None
    right: int | None = None
    sinks: bool = False  # a (1, h_q, 1, 1) FLOAT sink-logit operand
    padded: bool = False  # seq_len_q / seq_len_kv operands (use_padding_mask)
    ragged: tuple | None = None  # THD: (total_q, total_kv), the backward's bound on the packed tokens ((0, 0) in a
    # forward's config: the forward reads none); None: dense
    o_strides: tuple | None = None  # O's (and dO's) strides; None: row-major
    grads: tuple | None = None  # (dQ, dK, dV) strides; None: grad_strides of each operand

    def __post_init__(self) -> None:
        # hashed once: the steady state refreshes the graph cache's order at every call (LRU.touch)
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f) for f in self.__dataclass_fields__)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    @property
    def o_dims(self) -> tuple:
        (b, h, s_q, _), (_, _, _, d_v) = self.q[0], self.v[0]
        return (b, h, s_q, d_v)

    @property
    def stats(self) -> bool:
        """Whether the forward graph outputs Stats."""
        return self.requires_grad or self.lse

    @property
    def masked(self) -> bool:
        """Whether the scores have a band (causal included) besides torch's top-left causal flag."""
        return self.left is not None or self.right is not None


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


def like_layout(dims, strides) -> tuple:
    """Compact strides for ``dims`` in the dimension order of ``strides`` (innermost: smallest stride; ties keep
    the lower dim inner): the layout a fresh output or gradient of an operand of ``strides`` takes, even where the
    operand itself has gaps (a view of a packed buffer). Broadcast operands (a zero stride) have no order:
    row-major."""
    dims, strides = tuple(int(d) for d in dims), tuple(int(s) for s in strides)
    if 0 in strides:
        return row_major(dims)
    out, acc = [0] * len(dims), 1
    for i in sorted(range(len(dims)), key=lambda i: strides[i]):
        out[i] = acc
        acc *= dims[i]
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
    # O in q's dimension order, as torch's own attention lays it out: a BSHD q (a view of a fused QKV projection)
    # gets a BSHD O, whose transpose(1, 2).reshape(b, s, h * d) is then a view, not a copy
    o_strides = like_layout((b, h_q, s_q, _d_v), q.stride())
    return Config(q=_layout(q), k=_layout(k), v=_layout(v), bias=bias, dtype=dtype, device=int(q.device.index or 0),
                  causal=bool(is_causal), scale=float(scale), gqa=h_q != h_k, requires_grad=needs_grad,
                  deterministic=deterministic,
                  o_strides=None if o_strides == row_major((b, h_q, s_q, _d_v)) else o_strides)


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


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit] + "..."
