"""Pointwise nodes (``node_lowering.md`` §1.3): a POINTWISE descriptor with the mode's parameters, then an
OPERATION_POINTWISE with its ports. Backward activations take dy (IN_0), x (IN_1) and write dx (OUT_0)."""
from __future__ import annotations

from typing import Any

from ...backend import Descriptor
from ...enums import to_backend_data_type
from ...lowering.registry import lowers
from .spec import ACTIVATION_BACKWARD_MODES


@lowers("pointwise")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    p = node.params
    mode = p["mode"]
    pw = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR")
    pw.set("CUDNN_ATTR_POINTWISE_MODE", mode)
    compute = to_backend_data_type(p["compute_data_type"])
    pw.set("CUDNN_ATTR_POINTWISE_MATH_PREC", compute)
    if mode in ("CUDNN_POINTWISE_RELU_FWD", "CUDNN_POINTWISE_RELU_BWD"):
        upper = p["relu_upper_clip"]  # inference resolved the default (DBL_MAX, FLT_MAX for float math)
        pw.set("CUDNN_ATTR_POINTWISE_NAN_PROPAGATION", "CUDNN_PROPAGATE_NAN")
        pw.set("CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP", float(p.get("relu_lower_clip") or 0.0), type="CUDNN_TYPE_DOUBLE")
        pw.set("CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP", float(upper), type="CUDNN_TYPE_DOUBLE")
        pw.set("CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE", float(p.get("relu_lower_clip_slope") or 0.0),
               type="CUDNN_TYPE_DOUBLE")
    elif mode in ("CUDNN_POINTWISE_ELU_FWD", "CUDNN_POINTWISE_ELU_BWD"):
        pw.set("CUDNN_ATTR_POINTWISE_ELU_ALPHA", float(p.get("elu_alpha") or 1.0), type="CUDNN_TYPE_DOUBLE")
    elif mode in ("CUDNN_POINTWISE_SOFTPLUS_FWD", "CUDNN_POINTWISE_SOFTPLUS_BWD"):
        pw.set("CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA", float(p.get("softplus_beta") or 1.0), type="CUDNN_TYPE_DOUBLE")
    elif mode in ("CUDNN_POINTWISE_SWISH_FWD", "CUDNN_POINTWISE_SWISH_BWD"):
        beta = p.get("swish_beta")
        pw.set("CUDNN_ATTR_POINTWISE_SWISH_BETA", 1.0 if beta is None else float(beta), type="CUDNN_TYPE_DOUBLE")
    elif mode == "CUDNN_POINTWISE_GEN_INDEX":
        pw.set("CUDNN_ATTR_POINTWISE_AXIS", int(p["axis"]))  # already shifted by the legalize pass's padding
    pw.finalize()

    op = Descriptor("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR", pw)
    ins, out = node.inputs, node.outputs["OUT_0"]
    if mode in ACTIVATION_BACKWARD_MODES:
        op.set("CUDNN_ATTR_OPERATION_POINTWISE_XDESC", tensors(ins["IN_1"]))
        op.set("CUDNN_ATTR_OPERATION_POINTWISE_DYDESC", tensors(ins["IN_0"]))
        op.set("CUDNN_ATTR_OPERATION_POINTWISE_DXDESC", tensors(out))
    else:
        op.set("CUDNN_ATTR_OPERATION_POINTWISE_XDESC", tensors(ins["IN_0"]))
        if ins.get("IN_1") is not None:
            op.set("CUDNN_ATTR_OPERATION_POINTWISE_BDESC", tensors(ins["IN_1"]))
        if ins.get("IN_2") is not None:
            op.set("CUDNN_ATTR_OPERATION_POINTWISE_TDESC", tensors(ins["IN_2"]))
        op.set("CUDNN_ATTR_OPERATION_POINTWISE_YDESC", tensors(out))
    op.set("CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1", 1.0, type="CUDNN_TYPE_FLOAT")
    op.set("CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2", 1.0, type="CUDNN_TYPE_FLOAT")
    op.finalize()
    return [op]
