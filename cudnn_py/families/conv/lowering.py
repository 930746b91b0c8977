"""Convolution nodes: one CONVOLUTION descriptor (compute type, mode, spatial dims,
paddings, dilations, strides) and the forward, backward-data or backward-filter operation over it."""
from __future__ import annotations

from typing import Any

from ..._generated.names import attr, atype, desc
from ...backend import Descriptor
from ...enums import to_backend_data_type
from ...lowering.registry import lowers

# op -> (kind, {input port: attribute}, {output port: attribute}, its CONV_DESC, ALPHA and BETA attributes)
_OPS = {
    "conv_fprop": (desc.OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                   {"X": attr.OPERATION_CONVOLUTION_FORWARD_X, "W": attr.OPERATION_CONVOLUTION_FORWARD_W},
                   {"Y": attr.OPERATION_CONVOLUTION_FORWARD_Y},
                   (attr.OPERATION_CONVOLUTION_FORWARD_CONV_DESC, attr.OPERATION_CONVOLUTION_FORWARD_ALPHA,
                    attr.OPERATION_CONVOLUTION_FORWARD_BETA)),
    "conv_dgrad": (desc.OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                   {"DY": attr.OPERATION_CONVOLUTION_BWD_DATA_DY, "W": attr.OPERATION_CONVOLUTION_BWD_DATA_W},
                   {"DX": attr.OPERATION_CONVOLUTION_BWD_DATA_DX},
                   (attr.OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, attr.OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                    attr.OPERATION_CONVOLUTION_BWD_DATA_BETA)),
    "conv_wgrad": (desc.OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                   {"X": attr.OPERATION_CONVOLUTION_BWD_FILTER_X, "DY": attr.OPERATION_CONVOLUTION_BWD_FILTER_DY},
                   {"DW": attr.OPERATION_CONVOLUTION_BWD_FILTER_DW},
                   (attr.OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, attr.OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                    attr.OPERATION_CONVOLUTION_BWD_FILTER_BETA)),
}


def convolution_descriptor(p: Any) -> Descriptor:
    conv = Descriptor(desc.CONVOLUTION_DESCRIPTOR)
    conv.set(attr.CONVOLUTION_COMP_TYPE, to_backend_data_type(p["compute_data_type"]))
    conv.set(attr.CONVOLUTION_CONV_MODE, f"CUDNN_{p['convolution_mode'].name}")
    conv.set(attr.CONVOLUTION_SPATIAL_DIMS, len(p["stride"]))
    conv.set(attr.CONVOLUTION_PRE_PADDINGS, list(p["pre_padding"]))
    conv.set(attr.CONVOLUTION_POST_PADDINGS, list(p["post_padding"]))
    conv.set(attr.CONVOLUTION_DILATIONS, list(p["dilation"]))
    conv.set(attr.CONVOLUTION_FILTER_STRIDES, list(p["stride"]))
    return conv.finalize()


def _lower(node: Any, tensors: Any) -> list[Descriptor]:
    kind, ins, outs, (conv_desc, alpha, beta) = _OPS[node.op]
    op = Descriptor(kind)
    for port, attribute in {**ins, **outs}.items():
        t = node.inputs[port] if port in ins else node.outputs[port]
        op.set(attribute, tensors(t))
    op.set(conv_desc, convolution_descriptor(node.params))
    op.set(alpha, 1.0, type=atype.FLOAT)
    op.set(beta, 0.0, type=atype.FLOAT)
    return [op.finalize()]


for _kind in _OPS:
    lowers(_kind)(_lower)
