"""Forward normalizations (``node_lowering.md`` §5.2): one OPERATION_NORM_FORWARD with the mode and phase; no
compute type is set (cuDNN's norm engines choose their own, as in the frontend)."""
from __future__ import annotations

from typing import Any

from ...backend import Descriptor
from ...enums import to_backend_data_type
from ...lowering.registry import lowers

# batchnorm inference takes MEAN / INV_VARIANCE as inputs (kept as one op only before relu_backward ->
# batchnorm_backward; decomposed into pointwise ops otherwise: ops/norms/spec.py); the training forms produce them
_PORTS = {"X": "XDESC", "SCALE": "SCALE_DESC", "BIAS": "BIAS_DESC", "EPSILON": "EPSILON_DESC", "MEAN": "MEAN_DESC",
          "INV_VARIANCE": "INV_VARIANCE_DESC", "PREV_RUNNING_MEAN": "INPUT_RUNNING_MEAN_DESC",
          "PREV_RUNNING_VAR": "INPUT_RUNNING_VAR_DESC", "MOMENTUM": "EXP_AVG_FACTOR_DESC"}
_OUT_PORTS = {"Y": "YDESC", "MEAN": "MEAN_DESC", "INV_VARIANCE": "INV_VARIANCE_DESC",
              "NEXT_RUNNING_MEAN": "OUTPUT_RUNNING_MEAN_DESC", "NEXT_RUNNING_VAR": "OUTPUT_RUNNING_VAR_DESC"}


def _lower(node: Any, tensors: Any, kind: str, prefix: str, ins: dict, outs: dict, extra: dict) -> list[Descriptor]:
    op = Descriptor(kind)
    for attr, value in extra.items():
        op.set(prefix + attr, value)
    for port, attr in ins.items():
        if port in node.inputs:
            op.set(prefix + attr, tensors(node.inputs[port]))
    for port, attr in outs.items():
        if port in node.outputs:
            op.set(prefix + attr, tensors(node.outputs[port]))
    peers = node.list_input("PEER_STATS")
    if peers:  # batchnorm across GPUs: the other devices' statistics buffers
        op.set(prefix + "PEER_STAT_DESCS", [tensors(t) for t in peers])
    return [op.finalize()]


@lowers("norm_forward")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    phase = f"CUDNN_NORM_FWD_{node.params['norm_forward_phase'].name}"
    return _lower(node, tensors, "CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR", "CUDNN_ATTR_OPERATION_NORM_FWD_",
                  _PORTS, _OUT_PORTS, {"MODE": node.params["mode"], "PHASE": phase})


_BWD_IN = {"X": "XDESC", "DY": "DYDESC", "SCALE": "SCALE_DESC", "MEAN": "MEAN_DESC",
           "INV_VARIANCE": "INV_VARIANCE_DESC"}
_BWD_OUT = {"DX": "DXDESC", "DSCALE": "DSCALE_DESC", "DBIAS": "DBIAS_DESC"}


@lowers("norm_backward")
def lower_backward(node: Any, tensors: Any) -> list[Descriptor]:
    return _lower(node, tensors, "CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR", "CUDNN_ATTR_OPERATION_NORM_BWD_",
                  _BWD_IN, _BWD_OUT, {"MODE": node.params["mode"]})


@lowers("genstats")
def lower_genstats(node: Any, tensors: Any) -> list[Descriptor]:
    x = node.inputs["X"]
    op = Descriptor("CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_GENSTATS_MODE", "CUDNN_GENSTATS_SUM_SQSUM")
    # the frontend sets X's data type as the math precision, not the compute type (node_lowering.md §5.2)
    op.set("CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC", to_backend_data_type(x.data_type))
    op.set("CUDNN_ATTR_OPERATION_GENSTATS_XDESC", tensors(x))
    op.set("CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC", tensors(node.outputs["SUM"]))
    op.set("CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC", tensors(node.outputs["SQ_SUM"]))
    return [op.finalize()]
