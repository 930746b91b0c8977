"""The unified diagonal band mask: one OPERATION_DIAGONAL_BAND_MASK per bound. The
composite form needs no lowering of its own: the decompose pass turned it into pointwise nodes."""
from __future__ import annotations

from typing import Any

from ..._generated.names import PointwiseMode, attr, desc
from ...backend import Descriptor
from ...lowering.registry import lowers


@lowers("diagonal_band_mask_op")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    op = Descriptor(desc.OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR)
    op.set(attr.OPERATION_DIAGONAL_BAND_MASK_XDESC, tensors(node.inputs["X"]))
    op.set(attr.OPERATION_DIAGONAL_BAND_MASK_BDESC, tensors(node.inputs["B"]))
    op.set(attr.OPERATION_DIAGONAL_BAND_MASK_YDESC, tensors(node.outputs["Y"]))
    bound = node.inputs.get("BOUND")
    if node.params["side"] == "left":
        op.set(attr.OPERATION_DIAGONAL_BAND_MASK_LEFT_BOUND_DESC, tensors(bound))
        op.set(attr.OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE, PointwiseMode.CMP_GT)
    else:
        if bound is not None:
            op.set(attr.OPERATION_DIAGONAL_BAND_MASK_SHIFT_RIGHT_BOUND_DESC, tensors(bound))
        op.set(attr.OPERATION_DIAGONAL_BAND_MASK_COMPARISON_MODE, PointwiseMode.CMP_GE)
    op.finalize()
    return [op]
