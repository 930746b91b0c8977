"""MoE grouped matmul (``node_lowering.md`` §10): raw MOE_GROUPED_MATMUL (token index in GATHER / SCATTER, token
ks and top_k in SCATTER) and MOE_GROUPED_MATMUL_BWD operations."""
from __future__ import annotations

from typing import Any

from ...backend import Descriptor
from ...enums import backend_name, moe_grouped_matmul_mode, to_backend_data_type
from ...lowering.registry import lowers

_PREFIX = "CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_"


@lowers("moe_grouped_matmul")
def lower_forward(node: Any, tensors: Any) -> list[Descriptor]:
    mode = node.params["mode"]
    op = Descriptor("CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR")
    op.set(_PREFIX + "MODE", backend_name(mode))
    op.set(_PREFIX + "MATH_PREC", to_backend_data_type(node.params["compute_data_type"]))
    op.set(_PREFIX + "TOKEN_DESC", tensors(node.inputs["TOKEN"]))
    op.set(_PREFIX + "WEIGHT_DESC", tensors(node.inputs["WEIGHT"]))
    op.set(_PREFIX + "FIRST_TOKEN_OFFSET_DESC", tensors(node.inputs["FIRST_TOKEN_OFFSET"]))
    op.set(_PREFIX + "OUTPUT_DESC", tensors(node.outputs["OUTPUT"]))
    if mode in (moe_grouped_matmul_mode.GATHER, moe_grouped_matmul_mode.SCATTER):
        op.set(_PREFIX + "TOKEN_INDEX_DESC", tensors(node.inputs["TOKEN_INDEX"]))
    if mode is moe_grouped_matmul_mode.SCATTER:
        op.set(_PREFIX + "TOKEN_KS_DESC", tensors(node.inputs["TOKEN_KS"]))
        op.set(_PREFIX + "TOP_K", int(node.params["top_k"]), type="CUDNN_TYPE_INT32")
    return [op.finalize()]


@lowers("moe_grouped_matmul_bwd")
def lower_backward(node: Any, tensors: Any) -> list[Descriptor]:
    prefix = _PREFIX + "BWD_"
    op = Descriptor("CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_BWD_DESCRIPTOR")
    op.set(prefix + "MATH_PREC", to_backend_data_type(node.params["compute_data_type"]))
    op.set(prefix + "TOKEN_DESC", tensors(node.inputs["TOKEN"]))
    op.set(prefix + "DWEIGHT_DESC", tensors(node.outputs["DWEIGHT"]))
    op.set(prefix + "FIRST_TOKEN_OFFSET_DESC", tensors(node.inputs["FIRST_TOKEN_OFFSET"]))
    op.set(prefix + "DOUTPUT_DESC", tensors(node.inputs["DOUTPUT"]))
    return [op.finalize()]
