"""MoE grouped matmul: raw MOE_GROUPED_MATMUL (token index in GATHER / SCATTER, token
ks and top_k in SCATTER) and MOE_GROUPED_MATMUL_BWD operations."""
from __future__ import annotations

from typing import Any

from ..._generated.names import attr, atype, desc
from ...backend import Descriptor
from ...enums import backend_name, moe_grouped_matmul_mode, to_backend_data_type
from ...lowering.registry import lowers


@lowers("moe_grouped_matmul")
def lower_forward(node: Any, tensors: Any) -> list[Descriptor]:
    mode = node.params["mode"]
    op = Descriptor(desc.OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR)
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_MODE, backend_name(mode))
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_MATH_PREC, to_backend_data_type(node.params["compute_data_type"]))
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_TOKEN_DESC, tensors(node.inputs["TOKEN"]))
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_WEIGHT_DESC, tensors(node.inputs["WEIGHT"]))
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_FIRST_TOKEN_OFFSET_DESC, tensors(node.inputs["FIRST_TOKEN_OFFSET"]))
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_OUTPUT_DESC, tensors(node.outputs["OUTPUT"]))
    if mode in (moe_grouped_matmul_mode.GATHER, moe_grouped_matmul_mode.SCATTER):
        op.set(attr.OPERATION_MOE_GROUPED_MATMUL_TOKEN_INDEX_DESC, tensors(node.inputs["TOKEN_INDEX"]))
    if mode is moe_grouped_matmul_mode.SCATTER:
        op.set(attr.OPERATION_MOE_GROUPED_MATMUL_TOKEN_KS_DESC, tensors(node.inputs["TOKEN_KS"]))
        op.set(attr.OPERATION_MOE_GROUPED_MATMUL_TOP_K, int(node.params["top_k"]), type=atype.INT32)
    return [op.finalize()]


@lowers("moe_grouped_matmul_bwd")
def lower_backward(node: Any, tensors: Any) -> list[Descriptor]:
    op = Descriptor(desc.OPERATION_MOE_GROUPED_MATMUL_BWD_DESCRIPTOR)
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_BWD_MATH_PREC, to_backend_data_type(node.params["compute_data_type"]))
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_BWD_TOKEN_DESC, tensors(node.inputs["TOKEN"]))
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_BWD_DWEIGHT_DESC, tensors(node.outputs["DWEIGHT"]))
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_BWD_FIRST_TOKEN_OFFSET_DESC, tensors(node.inputs["FIRST_TOKEN_OFFSET"]))
    op.set(attr.OPERATION_MOE_GROUPED_MATMUL_BWD_DOUTPUT_DESC, tensors(node.inputs["DOUTPUT"]))
    return [op.finalize()]
