"""Legalization: rewrite the program's layouts into ones cuDNN's engines accept, without changing what it computes.

1. **Fused scalars** (by-value tensors carrying a value) take the rank R of the first non-scalar input of their
   node (else its output), all dims and strides 1 (as the frontend reshapes them: the backend needs equal ranks). A
   one-element by-value tensor the user described with a lower rank gets leading 1s.
2. **Long pointwise vectors**: a pointwise-only graph whose tensors all have the same packed dims with a last
   axis longer than 65535 is folded to ``[1, N / c, c]`` (c <= 1024 dividing the element count N). On cuDNN 9.19 /
   H200 a 2**20-element add as ``[1, 1, N]`` fails at execute with EXECUTION_FAILED_CUDA_DRIVER while
   ``[1, 1024, 1024]`` runs. Elementwise ops do not care how the elements are arranged, so the fold is exact.
3. **Rank-4+ pointwise graphs to rank 3**: on cuDNN 9.19 / H200 a pointwise-only graph over row-major 4-D tensors
   with a batch > 1 finds no engine (NOT_SUPPORTED_LAYOUT: the channel axis must be innermost or outermost), while the
   same data described as 3-D runs. The leading axes are merged into one where every tensor allows it (contiguous
   over those axes, or all 1 there, so broadcasting is unchanged); GEN_INDEX axes follow, and a GEN_INDEX over a
   merged axis keeps the graph as it is.
   (2. and 3. apply to graphs of ``elementwise`` ops alone; an op's ``axis_param`` - GEN_INDEX's axis - keeps 2. off
   and moves with the axes in 3. and 4.)
4. **Rank >= 3** for every tensor (4 where an op of the graph needs it: the unified band mask): leading unit dims
   (outer stride = the tensor's span). A rank-2 pointwise graph finalized and ran on cuDNN 9.19 / H200 but wrote only
   the first row of its output; the frontend's graphs are always >= 3-D. GEN_INDEX axes are shifted by the padding of
   their output.
5. **Views**: an output its spec's ``aliases`` names (a slice's) is a view into an input's memory (the executor
   binds its pointer to the input's plus the offset), so in the program it is non-virtual, with the byte alignment
   the offset leaves of the input's; the user's graph keeps the virtual flag the user chose.
The user keeps the rank they chose: operands are checked against the user's dims at execute.
"""
from __future__ import annotations

from typing import Any

from .. import layout
from ..node import Node
from ..program import Program
from ..tensor import Tensor

MIN_RANK = 3
LONG_AXIS = 65535  # the longest last axis seen to work for a pointwise graph (see 2. above)
FOLD_COLUMNS = 1024


def run(program: Program, options: Any) -> None:
    _reshape_fused_scalars(program)
    _fold_long_vectors(program)
    _merge_leading_axes(program)
    _pad_ranks(program)
    _views(program)



# ---- 1. fused scalars -------------------------------------------------------------------------------------------
def _reshape_fused_scalars(program: Program) -> None:
    shaped: dict[int, int] = {}  # uid -> rank it was given
    for node in program.nodes:
        scalars = [(p, t) for p, t in node.inputs.items() if t.is_fused_scalar]
        short = [t for t in node.inputs.values()
                 if t.is_pass_by_value and not t.is_fused_scalar and layout.numel(t.dim) == 1]
        if not scalars and not short:
            continue
        others = [t for t in node.inputs.values() if not t.is_pass_by_value and t.dim]
        others += [t for t in node.outputs.values() if t.dim]
        rank = len(others[0].dim) if others else 1
        inputs = dict(node.inputs)
        for port, t in scalars:
            if shaped.get(t.uid, rank) != rank:  # shared with a node of another rank: this node gets its own copy
                t = program.add_tensor(t.copy())
                inputs[port] = t
                program.log.append(f"legalize: scalar {t.name!r} copied as uid {t.uid} for node {node.name!r}")
            t._raw_set("dim", [1] * rank)
            t._raw_set("stride", [1] * rank)
            shaped[t.uid] = rank
        node.inputs = inputs
        for t in short:
            if len(t.dim) < rank:
                pad = rank - len(t.dim)
                t._raw_set("dim", [1] * pad + list(t.dim))
                t._raw_set("stride", [1] * pad + list(t.stride))


# ---- 2. long pointwise vectors ------------------------------------------------------------------------------------
def _fold_long_vectors(program: Program) -> None:
    if not program.nodes or any(not _elementwise(n) or _axis_param(n) is not None for n in program.nodes):
        return
    tensors = _distinct(program.nodes)
    data = [t for t in tensors if not t.is_pass_by_value]
    dims = list(data[0].dim) if data else []
    if not dims or dims[-1] <= LONG_AXIS:
        return
    packed = layout.row_major_strides(dims)
    if any(list(t.dim) != dims or list(t.stride) != packed for t in data):
        return
    n = layout.numel(dims)
    cols = next((c for c in range(FOLD_COLUMNS, 1, -1) if n % c == 0), 1)
    if cols == 1:
        return  # nothing divides it: left as is (execute reports what cuDNN says)
    folded = [1, n // cols, cols]
    for t in data:
        t._raw_set("dim", list(folded))
        t._raw_set("stride", layout.row_major_strides(folded))
    for t in tensors:
        if t.is_pass_by_value:
            t._raw_set("dim", [1, 1, 1])
            t._raw_set("stride", [1, 1, 1])
    program.log.append(f"legalize: pointwise graph of {dims} folded to {folded}")


# ---- 3. rank-4+ pointwise graphs to rank 3 ------------------------------------------------------------------------
def _merge_leading_axes(program: Program) -> None:
    if not program.nodes or any(not _elementwise(n) for n in program.nodes):
        return
    tensors = _distinct(program.nodes)
    rank = max(len(t.dim) for t in tensors)
    if rank < 4 or any(len(t.dim) != rank for t in tensors):
        return
    k = rank - 2  # axes 0..k-1 become one
    lead = next((list(t.dim[:k]) for t in tensors if any(d != 1 for d in t.dim[:k])), None)
    if lead is None:
        return
    for t in tensors:
        dims, strides = list(t.dim[:k]), list(t.stride[:k + 1])
        if all(d == 1 for d in dims):
            continue
        if dims != lead or any(strides[i] != strides[i + 1] * int(t.dim[i + 1]) for i in range(k - 1)):
            return  # broadcast or padded over the leading axes: merging would change the meaning
    indexed = [(n, hook[0]) for n in program.nodes if (hook := _axis_param(n)) is not None]
    if any(int(n.params[param]) < k for n, param in indexed):
        return
    for t in tensors:
        merged = layout.numel(t.dim[:k])
        t._raw_set("dim", [merged] + [int(d) for d in t.dim[k:]])
        t._raw_set("stride", [int(t.stride[k - 1])] + [int(s) for s in t.stride[k:]])
    for n, param in indexed:
        n.params[param] = int(n.params[param]) - (k - 1)
    program.log.append(f"legalize: pointwise graph of rank {rank} described as rank 3 (leading axes merged)")


# ---- 4. rank >= 3 -----------------------------------------------------------------------------------------------
def padded(dims: list[int], strides: list[int], rank: int = MIN_RANK) -> tuple[list[int], list[int]]:
    pad = max(0, rank - len(dims))
    outer = max([int(d) * int(s) for d, s in zip(dims, strides)] or [1])
    return [1] * pad + [int(d) for d in dims], [outer] * pad + [int(s) for s in strides]


def _pad_ranks(program: Program) -> None:
    # at least MIN_RANK, or the rank an op of the graph needs (every tensor alike, so broadcasting is unchanged)
    rank = max([MIN_RANK] + [n.spec.lowered_rank for n in program.nodes if n.spec is not None])
    pads: dict[int, int] = {}
    for t in _distinct(program.nodes):
        pad = max(0, rank - len(t.dim))
        pads[t.uid] = pad
        if pad:
            dims, strides = padded(list(t.dim), list(t.stride), rank)
            t._raw_set("dim", dims)
            t._raw_set("stride", strides)
    for node in program.nodes:
        hook = _axis_param(node)
        if hook is not None:
            param, port = hook
            shift = pads.get(node.outputs[port].uid, 0)
            if shift:
                node.params[param] = int(node.params[param]) + shift
    if any(pads.values()):
        program.log.append(f"legalize: {sum(1 for p in pads.values() if p)} tensor(s) padded to rank {rank}")


# ---- 5. views ------------------------------------------------------------------------------------------------------
def _views(program: Program) -> None:
    for node in program.nodes:
        if node.spec is None or node.spec.aliases is None:
            continue
        by_uid = {t.uid: t for t in node.tensors()}
        for view, (source, offset) in node.spec.aliases(node).items():
            x, y = by_uid[source], by_uid[view]
            y._raw_set("is_virtual", False)
            y._raw_set("alignment", min(int(x.alignment or 16), layout.pointer_alignment(offset)))


# ---- the spec hooks the rules read -----------------------------------------------------------------------------------
def _elementwise(node: Node) -> bool:
    return node.spec is not None and node.spec.elementwise


def _axis_param(node: Node) -> tuple[str, str] | None:
    """(param, output port) where the node's param indexes an axis of that output (GEN_INDEX), else None."""
    hook = node.spec.axis_param if node.spec is not None else None
    return hook(node) if hook is not None else None


def _distinct(nodes: list[Node]) -> list[Tensor]:
    seen: dict[int, Tensor] = {}
    for n in nodes:
        for t in n.tensors():
            seen.setdefault(id(t), t)
    return list(seen.values())

