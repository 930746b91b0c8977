"""The MoE grouped matmul as a torch custom operator on cudnn_py's ``moe_grouped_matmul`` graph op.

The public function is :func:`moe_grouped_matmul` (``cudnn.gemm.ops.moe_grouped_matmul``, and the official module's
alias ``cudnn.experimental.ops.moe_grouped_matmul``), with the official signature and defaults. Underneath, the
operator ``torch.ops.cudnn_py.moe_grouped_matmul`` (a CUDA kernel and a fake implementation for ``torch.compile``).

Layout (the official operator's): token ``(1, M, K)``, weight ``(E, K, N)`` (any strides: the graph takes the
tensors' own), first_token_offset INT32 ``(G+1, 1, 1)`` boundaries or the deprecated ``(G, 1, 1)`` starts, G a
positive multiple of E (E = 1 takes boundaries only); token_index / token_ks INT32 ``(1, rows, 1)``. mode "none",
"gather" (token_index required) or "scatter" (token_index and token_ks required; ``top_k`` is read in this mode
only: the graph op lowers it for SCATTER alone). Output ``(1, M_out, N)`` of token's dtype, M_out =
token_index.shape[1] in "gather", else M.

The checks run before any GPU work, in the official order with its messages and classes (the mode, the routing
tensors a mode needs, the offsets' shape and count), then cudnn_py's own (CUDA tensors on one device, dtypes); the
graph op's inference checks the shapes. cuDNN's refusal of a graph is a cudnnGraphNotSupportedError with its reason
(on Hopper with cuDNN 9.19 the native engine is Blackwell-only, as for the official operator).

Offsets: the graph op lowers one start per expert (``[E, 1, 1]``, the last group running to the routed capacity);
G+1 boundaries with G = E are given as their first E entries (a view), the rows past the final endpoint being
unspecified output in the official contract too. G = b * E with b > 1 (batched groups) is refused as not supported.
Graphs are cached per shapes, strides, dtype, mode, top_k and device (a bounded LRU) and run on torch's current
stream, their workspace from torch's caching allocator.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ...enums import data_type, moe_grouped_matmul_mode
from ...errors import InvalidTypeError, InvalidValueError, cudnnGraphNotSupportedError
from ...facade import pygraph
from ...ops.norm._common import NAMESPACE, cache, define, execute, planned, require_cuda, require_same_device
from ...ops.norm._common import TORCH_DTYPE_TO_CUDNN as FLOAT_DTYPES

_OP = f"{NAMESPACE}::moe_grouped_matmul"

# the official operator's dtype map: the io dtype of token (weight and output share it): the norm operators'
# floating types, and int32
TORCH_DTYPE_TO_CUDNN = {**FLOAT_DTYPES, torch.int32: data_type.INT32}

MODES = {"none": moe_grouped_matmul_mode.NONE, "gather": moe_grouped_matmul_mode.GATHER,
         "scatter": moe_grouped_matmul_mode.SCATTER}


class UnsupportedDtypeError(InvalidTypeError, KeyError):
    """A token dtype outside the official operator's map (the official raises KeyError for it)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def offset_mode(offset_count: int, num_experts: int) -> bool:
    """Whether first_token_offset holds G+1 boundaries (True) or G starts (False), G a positive multiple of the
    expert count E; E = 1 takes boundaries only. The official operator's rule and message."""
    if num_experts > 0 and offset_count > 0:
        if num_experts == 1:
            if offset_count >= 2:
                return True
        elif offset_count % num_experts == 0:
            return False
        if offset_count > 1 and (offset_count - 1) % num_experts == 0:
            return True
    raise InvalidValueError("first_token_offset must contain G starts or G+1 boundaries, where G is a positive "
                            "multiple of the expert count (E=1 requires G+1)")


# ---- the checks (before any GPU work) -------------------------------------------------------------------------------
def validate(token: torch.Tensor, weight: torch.Tensor, first_token_offset: torch.Tensor,
             token_index: torch.Tensor | None, token_ks: torch.Tensor | None, mode: str) -> torch.Tensor:
    """The checks, in the official order; returns the offsets the graph takes (one start per expert)."""
    if not isinstance(mode, str) or mode not in MODES:
        raise InvalidValueError(f"Invalid mode '{mode}'. Must be one of: none, gather, scatter")
    if mode == "scatter" and (token_index is None or token_ks is None):
        raise InvalidValueError("SCATTER mode requires both token_index and token_ks")
    if mode == "gather" and token_index is None:
        raise InvalidValueError("GATHER mode requires token_index")
    if first_token_offset.ndim != 3 or tuple(first_token_offset.shape[1:]) != (1, 1):
        raise InvalidValueError("first_token_offset must have shape [G,1,1] or [G+1,1,1]")
    explicit = offset_mode(int(first_token_offset.shape[0]), int(weight.shape[0]))
    # cudnn_py's own checks (the official leaves these to the GPU work)
    tensors = {"token": token, "weight": weight, "first_token_offset": first_token_offset}
    tensors.update({n: t for n, t in (("token_index", token_index), ("token_ks", token_ks)) if t is not None})
    require_cuda("moe_grouped_matmul", **tensors)
    require_same_device("moe_grouped_matmul", token, **{n: t for n, t in tensors.items() if n != "token"})
    if token.dtype not in TORCH_DTYPE_TO_CUDNN:
        raise UnsupportedDtypeError(f"moe_grouped_matmul: unsupported token dtype {token.dtype} (one of "
                                    f"{', '.join(str(d) for d in TORCH_DTYPE_TO_CUDNN)})")
    if weight.dtype != token.dtype:
        raise InvalidTypeError(f"moe_grouped_matmul: weight dtype {weight.dtype} must be token's, {token.dtype}")
    for name in ("first_token_offset", "token_index", "token_ks"):
        t = tensors.get(name)
        if t is not None and t.dtype != torch.int32:
            raise InvalidTypeError(f"moe_grouped_matmul: {name} must be torch.int32, got {t.dtype}")
    for name in ("token", "weight"):
        if tensors[name].ndim != 3:
            shape = tuple(tensors[name].shape)
            raise InvalidValueError(f"moe_grouped_matmul: {name} must be rank 3, got shape {shape}")
    experts = int(weight.shape[0])
    groups = int(first_token_offset.shape[0]) - (1 if explicit else 0)
    if groups != experts:
        raise cudnnGraphNotSupportedError(
            f"moe_grouped_matmul: first_token_offset holds {groups} groups for {experts} experts; cudnn_py's "
            f"moe_grouped_matmul graph op lowers one group per expert ([E, 1, 1] starts, or [E+1, 1, 1] "
            f"boundaries), not batched groups (G = {groups // experts} x E)")
    return first_token_offset[:experts] if explicit else first_token_offset


def rows_out(token: torch.Tensor, token_index: torch.Tensor | None, mode: str) -> int:
    return int(token_index.shape[1]) if mode == "gather" and token_index is not None else int(token.shape[1])


# ---- the graph ------------------------------------------------------------------------------------------------------
class Built(NamedTuple):
    graph: Any
    token: Any
    weight: Any
    offsets: Any
    token_index: Any  # None outside GATHER / SCATTER
    token_ks: Any  # None outside SCATTER
    output: Any


def _layout(t: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(int(d) for d in t.shape), tuple(int(s) for s in t.stride())


def build_graph(token: tuple, weight: tuple, offsets: tuple, token_index: tuple | None, token_ks: tuple | None,
                dtype: torch.dtype, mode: str, top_k: int) -> Built:
    """The graph (not yet validated or planned) of one call: each operand given as (dims, strides)."""
    io = TORCH_DTYPE_TO_CUDNN[dtype]
    g = pygraph(io_data_type=io, intermediate_data_type=io, compute_data_type=data_type.FLOAT)

    def tensor(name: str, layout: tuple | None, dt: Any) -> Any:
        if layout is None:
            return None
        return g.tensor(name=name, dim=list(layout[0]), stride=list(layout[1]), data_type=dt)

    tok, w = tensor("token", token, io), tensor("weight", weight, io)
    off = tensor("first_token_offset", offsets, data_type.INT32)
    idx = tensor("token_index", token_index, data_type.INT32) if mode != "none" else None
    ks = tensor("token_ks", token_ks, data_type.INT32) if mode == "scatter" else None
    out = g.moe_grouped_matmul(token=tok, weight=w, first_token_offset=off, token_index=idx, token_ks=ks,
                               mode=MODES[mode], compute_data_type=data_type.FLOAT,
                               top_k=int(top_k) if mode == "scatter" else 0, name="moe")
    m = int(token_index[0][1]) if mode == "gather" and token_index is not None else int(token[0][1])
    n = int(weight[0][2])
    out.set_output(True).set_data_type(io).set_dim([1, m, n]).set_stride([m * n, n, 1])
    return Built(g, tok, w, off, idx, ks, out)


# ---- the CUDA kernel and the fake implementation -------------------------------------------------------------------
def _moe_cuda(token: torch.Tensor, weight: torch.Tensor, first_token_offset: torch.Tensor,
              token_index: torch.Tensor | None = None, token_ks: torch.Tensor | None = None, mode: str = "none",
              top_k: int = 1) -> torch.Tensor:
    offsets = validate(token, weight, first_token_offset, token_index, token_ks, mode)
    if mode == "none":  # the graph takes no routing tensors here (the official passes them unused)
        token_index = token_ks = None
    elif mode == "gather":
        token_ks = None
    layouts = (_layout(token), _layout(weight), _layout(offsets),
               None if token_index is None else _layout(token_index), None if token_ks is None else _layout(token_ks))
    key = (*layouts, token.dtype, mode, int(top_k) if mode == "scatter" else 0, token.device)
    b = cache(_OP).get(key, lambda: planned(build_graph(*layouts, token.dtype, mode, top_k), token.device))
    out = torch.empty((1, rows_out(token, token_index, mode), int(weight.shape[2])), dtype=token.dtype,
                      device=token.device)
    feeds: dict[Any, Any] = {b.token: token, b.weight: weight, b.offsets: offsets, b.output: out}
    if b.token_index is not None:
        feeds[b.token_index] = token_index
    if b.token_ks is not None:
        feeds[b.token_ks] = token_ks
    execute(b.graph, feeds)
    return out


def _moe_fake(token: torch.Tensor, weight: torch.Tensor, first_token_offset: torch.Tensor,
              token_index: torch.Tensor | None = None, token_ks: torch.Tensor | None = None, mode: str = "none",
              top_k: int = 1) -> torch.Tensor:
    return token.new_empty((1, rows_out(token, token_index, mode), weight.shape[2]))


define('moe_grouped_matmul(Tensor token, Tensor weight, Tensor first_token_offset, Tensor? token_index=None, '
       'Tensor? token_ks=None, str mode="none", int top_k=1) -> Tensor', _moe_cuda, _moe_fake)


# ---- the public function --------------------------------------------------------------------------------------------
def moe_grouped_matmul(token: torch.Tensor, weight: torch.Tensor, first_token_offset: torch.Tensor,
                       token_index: torch.Tensor | None = None, token_ks: torch.Tensor | None = None,
                       mode: str = "none", top_k: int = 1) -> torch.Tensor:
    """The MoE grouped matmul in cuDNN: row r of token times the weight of the expert whose group holds r.

    mode "none": ``out[r] = token[r] @ weight[e(r)]``; "gather": ``out[r] = token[token_index[r]] @ weight[e(r)]``
    (the groups range over the output rows); "scatter": ``out[token_index[r] * top_k + token_ks[r]] = token[r] @
    weight[e(r)]``. Returns ``(1, M_out, N)`` of token's dtype (module doc: shapes, offsets, checks)."""
    validate(token, weight, first_token_offset, token_index, token_ks, mode)
    return torch.ops.cudnn_py.moe_grouped_matmul(token, weight, first_token_offset, token_index, token_ks, mode,
                                                 top_k)


__all__ = ["moe_grouped_matmul"]
