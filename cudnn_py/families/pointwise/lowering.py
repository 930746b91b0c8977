"""Pointwise nodes: a POINTWISE descriptor with the mode's parameters, then an
OPERATION_POINTWISE with its ports. Backward activations take dy (IN_0), x (IN_1) and write dx (OUT_0)."""
from __future__ import annotations

from typing import Any

from ..._generated.names import NanPropagation, PointwiseMode, attr, atype, desc
from ...backend import Descriptor
from ...enums import to_backend_data_type
from ...lowering.registry import lowers
from .spec import ACTIVATION_BACKWARD_MODES


@lowers("pointwise")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    p = node.params
    mode = p["mode"]
    pw = Descriptor(desc.POINTWISE_DESCRIPTOR)
    pw.set(attr.POINTWISE_MODE, mode)
    compute = to_backend_data_type(p["compute_data_type"])
    pw.set(attr.POINTWISE_MATH_PREC, compute)
    if mode in (PointwiseMode.RELU_FWD, PointwiseMode.RELU_BWD):
        upper = p["relu_upper_clip"]  # inference resolved the default (DBL_MAX, FLT_MAX for float math)
        pw.set(attr.POINTWISE_NAN_PROPAGATION, NanPropagation.PROPAGATE_NAN)
        pw.set(attr.POINTWISE_RELU_LOWER_CLIP, float(p.get("relu_lower_clip") or 0.0), type=atype.DOUBLE)
        pw.set(attr.POINTWISE_RELU_UPPER_CLIP, float(upper), type=atype.DOUBLE)
        pw.set(attr.POINTWISE_RELU_LOWER_CLIP_SLOPE, float(p.get("relu_lower_clip_slope") or 0.0),
               type=atype.DOUBLE)
    elif mode in (PointwiseMode.ELU_FWD, PointwiseMode.ELU_BWD):
        pw.set(attr.POINTWISE_ELU_ALPHA, float(p.get("elu_alpha") or 1.0), type=atype.DOUBLE)
    elif mode in (PointwiseMode.SOFTPLUS_FWD, PointwiseMode.SOFTPLUS_BWD):
        pw.set(attr.POINTWISE_SOFTPLUS_BETA, float(p.get("softplus_beta") or 1.0), type=atype.DOUBLE)
    elif mode in (PointwiseMode.SWISH_FWD, PointwiseMode.SWISH_BWD):
        beta = p.get("swish_beta")
        pw.set(attr.POINTWISE_SWISH_BETA, 1.0 if beta is None else float(beta), type=atype.DOUBLE)
    elif mode == PointwiseMode.GEN_INDEX:
        pw.set(attr.POINTWISE_AXIS, int(p["axis"]))  # already shifted by the legalize pass's padding
    pw.finalize()

    op = Descriptor(desc.OPERATION_POINTWISE_DESCRIPTOR)
    op.set(attr.OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
    ins, out = node.inputs, node.outputs["OUT_0"]
    if mode in ACTIVATION_BACKWARD_MODES:
        op.set(attr.OPERATION_POINTWISE_XDESC, tensors(ins["IN_1"]))
        op.set(attr.OPERATION_POINTWISE_DYDESC, tensors(ins["IN_0"]))
        op.set(attr.OPERATION_POINTWISE_DXDESC, tensors(out))
    else:
        op.set(attr.OPERATION_POINTWISE_XDESC, tensors(ins["IN_0"]))
        if ins.get("IN_1") is not None:
            op.set(attr.OPERATION_POINTWISE_BDESC, tensors(ins["IN_1"]))
        if ins.get("IN_2") is not None:
            op.set(attr.OPERATION_POINTWISE_TDESC, tensors(ins["IN_2"]))
        op.set(attr.OPERATION_POINTWISE_YDESC, tensors(out))
    op.set(attr.OPERATION_POINTWISE_ALPHA1, 1.0, type=atype.FLOAT)
    op.set(attr.OPERATION_POINTWISE_ALPHA2, 1.0, type=atype.FLOAT)
    op.finalize()
    return [op]
