"""Layout ops (``node_lowering.md`` §7.2, §7.4): TRANSPOSE (cuDNN >= 9.22) and CONCAT raw operations."""
from __future__ import annotations

from typing import Any

from ..backend import Descriptor
from .registry import lowers


@lowers("transpose")
def lower_transpose(node: Any, tensors: Any) -> list[Descriptor]:
    op = Descriptor("CUDNN_BACKEND_OPERATION_TRANSPOSE_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_TRANSPOSE_XDESC", tensors(node.inputs["X"]))
    op.set("CUDNN_ATTR_OPERATION_TRANSPOSE_YDESC", tensors(node.outputs["Y"]))
    op.set("CUDNN_ATTR_OPERATION_TRANSPOSE_PERMUTATION", [int(p) for p in node.params["permutation"]])
    return [op.finalize()]


@lowers("concatenate")
def lower_concatenate(node: Any, tensors: Any) -> list[Descriptor]:
    inputs = node.list_input("X")
    op = Descriptor("CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_CONCAT_INPUT_DESCS", [tensors(t) for t in inputs])
    op.set("CUDNN_ATTR_OPERATION_CONCAT_OUTPUT_DESC", tensors(node.outputs["Y"]))
    op.set("CUDNN_ATTR_OPERATION_CONCAT_AXIS", int(node.params["axis"]))
    if node.params["in_place_index"] is not None:
        op.set("CUDNN_ATTR_OPERATION_CONCAT_INPLACE_INDEX", int(node.params["in_place_index"]))
    return [op.finalize()]
