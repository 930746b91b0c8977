"""Layout ops: RESHAPE, TRANSPOSE (cuDNN >= 9.22), SLICE (cuDNN >= 9.22; older: no op,
the view alone) and CONCAT raw operations.

The legalize pass gives every tensor at least rank 3 by adding leading unit axes, so the axis-indexed attributes
(permutation, concat axis, slice indices) are shifted by the padding the program's tensors received.
"""
from __future__ import annotations

from typing import Any

from ..._generated.names import attr, desc
from ...backend import Descriptor, versions
from ...enums import reshape_mode
from ...lowering.registry import lowers
from .spec import NATIVE_SLICE

RESHAPE_MODE = attr.OPERATION_RESHAPE_MODE


def _padding(t: Any, user_rank: int) -> int:
    return len(t.dim) - user_rank


@lowers("reshape")
def lower_reshape(node: Any, tensors: Any) -> list[Descriptor]:
    mode = node.params["reshape_mode"]
    op = Descriptor(desc.OPERATION_RESHAPE_DESCRIPTOR)
    op.set(attr.OPERATION_RESHAPE_XDESC, tensors(node.inputs["X"]))
    op.set(attr.OPERATION_RESHAPE_YDESC, tensors(node.outputs["Y"]))
    if mode is reshape_mode.LOGICAL:
        versions.require(RESHAPE_MODE, what=f"reshape node {node.name!r} with reshape_mode.LOGICAL")
    # before 9.22 the op has no mode: a reshape is a view (what VIEW_ONLY names since)
    if versions.available(RESHAPE_MODE):
        op.set(RESHAPE_MODE, f"CUDNN_RESHAPE_{mode.name}")
    return [op.finalize()]


@lowers("transpose")
def lower_transpose(node: Any, tensors: Any) -> list[Descriptor]:
    perm = [int(p) for p in node.params["permutation"]]
    pad = _padding(node.inputs["X"], len(perm))
    op = Descriptor(desc.OPERATION_TRANSPOSE_DESCRIPTOR)
    op.set(attr.OPERATION_TRANSPOSE_XDESC, tensors(node.inputs["X"]))
    op.set(attr.OPERATION_TRANSPOSE_YDESC, tensors(node.outputs["Y"]))
    op.set(attr.OPERATION_TRANSPOSE_PERMUTATION, list(range(pad)) + [p + pad for p in perm])
    return [op.finalize()]


@lowers("slice")
def lower_slice(node: Any, tensors: Any) -> list[Descriptor]:
    """Y is always a view of X: the executor binds Y's pointer to X's plus the offset (the spec's ``aliases``); the
    legalize pass made Y non-virtual with the alignment the offset leaves."""
    x, y = node.inputs["X"], node.outputs["Y"]
    ranges = [(0, 1, 1)] * _padding(x, len(node.params["ranges"])) + list(node.params["ranges"])
    if not versions.available(NATIVE_SLICE):
        return []  # before 9.22: the consumers read the view; there is no operation
    op = Descriptor(NATIVE_SLICE)
    op.set(attr.OPERATION_SLICE_XDESC, tensors(x))
    op.set(attr.OPERATION_SLICE_YDESC, tensors(y))
    op.set(attr.OPERATION_SLICE_START_INDICES, [r[0] for r in ranges])
    op.set(attr.OPERATION_SLICE_LIMIT_INDICES, [r[1] for r in ranges])
    op.set(attr.OPERATION_SLICE_STRIDES, [r[2] for r in ranges])
    return [op.finalize()]


@lowers("concatenate")
def lower_concatenate(node: Any, tensors: Any) -> list[Descriptor]:
    inputs = node.list_input("X")
    op = Descriptor(desc.OPERATION_CONCAT_DESCRIPTOR)
    op.set(attr.OPERATION_CONCAT_INPUT_DESCS, [tensors(t) for t in inputs])
    op.set(attr.OPERATION_CONCAT_OUTPUT_DESC, tensors(node.outputs["Y"]))
    axis = int(node.params["axis"]) + _padding(node.outputs["Y"], int(node.params["rank"]))
    op.set(attr.OPERATION_CONCAT_AXIS, axis)
    if node.params["in_place_index"] is not None:
        op.set(attr.OPERATION_CONCAT_INPLACE_INDEX, int(node.params["in_place_index"]))
    return [op.finalize()]
