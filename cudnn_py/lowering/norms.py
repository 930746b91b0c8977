"""Forward normalizations (``node_lowering.md`` §5.2): one OPERATION_NORM_FORWARD with the mode and phase; no
compute type is set (cuDNN's norm engines choose their own, as in the frontend)."""
from __future__ import annotations

from typing import Any

from ..backend import Descriptor
from .registry import lowers

_PORTS = {"X": "XDESC", "SCALE": "SCALE_DESC", "BIAS": "BIAS_DESC", "EPSILON": "EPSILON_DESC"}
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
