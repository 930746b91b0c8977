"""Forward normalizations (``node_lowering.md`` §5.2): one OPERATION_NORM_FORWARD with the mode and phase; no
compute type is set (cuDNN's norm engines choose their own, as in the frontend)."""
from __future__ import annotations

from typing import Any

from ..backend import Descriptor
from .registry import lowers

# batchnorm inference takes MEAN / INV_VARIANCE as inputs; the training forms produce them
_PORTS = {"X": "XDESC", "SCALE": "SCALE_DESC", "BIAS": "BIAS_DESC", "EPSILON": "EPSILON_DESC", "MEAN": "MEAN_DESC",
          "INV_VARIANCE": "INV_VARIANCE_DESC"}
_OUT_PORTS = {"Y": "YDESC", "MEAN": "MEAN_DESC", "INV_VARIANCE": "INV_VARIANCE_DESC"}


@lowers("norm_forward")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    op = Descriptor("CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_NORM_FWD_MODE", node.params["mode"])
    op.set("CUDNN_ATTR_OPERATION_NORM_FWD_PHASE", f"CUDNN_NORM_FWD_{node.params['norm_forward_phase'].name}")
    for port, attr in _PORTS.items():
        if port in node.inputs:
            op.set(f"CUDNN_ATTR_OPERATION_NORM_FWD_{attr}", tensors(node.inputs[port]))
    for port, attr in _OUT_PORTS.items():
        if port in node.outputs:
            op.set(f"CUDNN_ATTR_OPERATION_NORM_FWD_{attr}", tensors(node.outputs[port]))
    return [op.finalize()]


_BWD_IN = {"X": "XDESC", "DY": "DYDESC", "SCALE": "SCALE_DESC", "MEAN": "MEAN_DESC",
           "INV_VARIANCE": "INV_VARIANCE_DESC"}
_BWD_OUT = {"DX": "DXDESC", "DSCALE": "DSCALE_DESC", "DBIAS": "DBIAS_DESC"}


@lowers("norm_backward")
def lower_backward(node: Any, tensors: Any) -> list[Descriptor]:
    op = Descriptor("CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_NORM_BWD_MODE", node.params["mode"])
    for port, attr in _BWD_IN.items():
        if port in node.inputs:
            op.set(f"CUDNN_ATTR_OPERATION_NORM_BWD_{attr}", tensors(node.inputs[port]))
    for port, attr in _BWD_OUT.items():
        if port in node.outputs:
            op.set(f"CUDNN_ATTR_OPERATION_NORM_BWD_{attr}", tensors(node.outputs[port]))
    return [op.finalize()]
