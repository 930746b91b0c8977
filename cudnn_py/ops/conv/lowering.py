"""Convolution nodes (``node_lowering.md`` §4): one CONVOLUTION descriptor (compute type, mode, spatial dims,
paddings, dilations, strides) and the forward, backward-data or backward-filter operation over it."""
from __future__ import annotations

from typing import Any

from ...backend import Descriptor
from ...enums import to_backend_data_type
from ...lowering.registry import lowers

_OPS = {
    "conv_fprop": ("CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR",
                   "CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_", {"X": "X", "W": "W"}, {"Y": "Y"}),
    "conv_dgrad": ("CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR",
                   "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_", {"DY": "DY", "W": "W"}, {"DX": "DX"}),
    "conv_wgrad": ("CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR",
                   "CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_", {"X": "X", "DY": "DY"}, {"DW": "DW"}),
}


def convolution_descriptor(p: Any) -> Descriptor:
    conv = Descriptor("CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR")
    conv.set("CUDNN_ATTR_CONVOLUTION_COMP_TYPE", to_backend_data_type(p["compute_data_type"]))
    conv.set("CUDNN_ATTR_CONVOLUTION_CONV_MODE", f"CUDNN_{p['convolution_mode'].name}")
    conv.set("CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS", len(p["stride"]))
    conv.set("CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS", list(p["pre_padding"]))
    conv.set("CUDNN_ATTR_CONVOLUTION_POST_PADDINGS", list(p["post_padding"]))
    conv.set("CUDNN_ATTR_CONVOLUTION_DILATIONS", list(p["dilation"]))
    conv.set("CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES", list(p["stride"]))
    return conv.finalize()


def _lower(node: Any, tensors: Any) -> list[Descriptor]:
    kind, prefix, ins, outs = _OPS[node.op]
    op = Descriptor(kind)
    for port, attr in {**ins, **outs}.items():
        t = node.inputs[port] if port in ins else node.outputs[port]
        op.set(prefix + attr, tensors(t))
    op.set(prefix + "CONV_DESC", convolution_descriptor(node.params))
    op.set(prefix + "ALPHA", 1.0, type="CUDNN_TYPE_FLOAT")
    op.set(prefix + "BETA", 0.0, type="CUDNN_TYPE_FLOAT")
    return [op.finalize()]


for _kind in _OPS:
    lowers(_kind)(_lower)
