"""Forward normalizations: one OPERATION_NORM_FORWARD with the mode and phase; no
compute type is set (cuDNN's norm engines choose their own, as in the frontend)."""
from __future__ import annotations

from typing import Any

from ..._generated.names import GenStatsMode, attr, desc
from ...backend import Descriptor
from ...enums import to_backend_data_type
from ...lowering.registry import lowers

# batchnorm inference takes MEAN / INV_VARIANCE as inputs (kept as one op only before relu_backward ->
# batchnorm_backward; decomposed into pointwise ops otherwise: ops/norms/spec.py); the training forms produce them
_PORTS = {"X": attr.OPERATION_NORM_FWD_XDESC, "SCALE": attr.OPERATION_NORM_FWD_SCALE_DESC,
          "BIAS": attr.OPERATION_NORM_FWD_BIAS_DESC, "EPSILON": attr.OPERATION_NORM_FWD_EPSILON_DESC,
          "MEAN": attr.OPERATION_NORM_FWD_MEAN_DESC, "INV_VARIANCE": attr.OPERATION_NORM_FWD_INV_VARIANCE_DESC,
          "PREV_RUNNING_MEAN": attr.OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC,
          "PREV_RUNNING_VAR": attr.OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC,
          "MOMENTUM": attr.OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC}
_OUT_PORTS = {"Y": attr.OPERATION_NORM_FWD_YDESC, "MEAN": attr.OPERATION_NORM_FWD_MEAN_DESC,
              "INV_VARIANCE": attr.OPERATION_NORM_FWD_INV_VARIANCE_DESC,
              "NEXT_RUNNING_MEAN": attr.OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC,
              "NEXT_RUNNING_VAR": attr.OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC}


def _lower(node: Any, tensors: Any, kind: str, ins: dict, outs: dict, extra: dict, peer_stats: str) -> list[Descriptor]:
    op = Descriptor(kind)
    for attribute, value in extra.items():
        op.set(attribute, value)
    for port, attribute in ins.items():
        if port in node.inputs:
            op.set(attribute, tensors(node.inputs[port]))
    for port, attribute in outs.items():
        if port in node.outputs:
            op.set(attribute, tensors(node.outputs[port]))
    peers = node.list_input("PEER_STATS")
    if peers:  # batchnorm across GPUs: the other devices' statistics buffers
        op.set(peer_stats, [tensors(t) for t in peers])
    return [op.finalize()]


@lowers("norm_forward")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    phase = f"CUDNN_NORM_FWD_{node.params['norm_forward_phase'].name}"
    return _lower(node, tensors, desc.OPERATION_NORM_FORWARD_DESCRIPTOR, _PORTS, _OUT_PORTS,
                  {attr.OPERATION_NORM_FWD_MODE: node.params["mode"], attr.OPERATION_NORM_FWD_PHASE: phase},
                  attr.OPERATION_NORM_FWD_PEER_STAT_DESCS)


_BWD_IN = {"X": attr.OPERATION_NORM_BWD_XDESC, "DY": attr.OPERATION_NORM_BWD_DYDESC,
           "SCALE": attr.OPERATION_NORM_BWD_SCALE_DESC, "MEAN": attr.OPERATION_NORM_BWD_MEAN_DESC,
           "INV_VARIANCE": attr.OPERATION_NORM_BWD_INV_VARIANCE_DESC}
_BWD_OUT = {"DX": attr.OPERATION_NORM_BWD_DXDESC, "DSCALE": attr.OPERATION_NORM_BWD_DSCALE_DESC,
            "DBIAS": attr.OPERATION_NORM_BWD_DBIAS_DESC}


@lowers("norm_backward")
def lower_backward(node: Any, tensors: Any) -> list[Descriptor]:
    return _lower(node, tensors, desc.OPERATION_NORM_BACKWARD_DESCRIPTOR, _BWD_IN, _BWD_OUT,
                  {attr.OPERATION_NORM_BWD_MODE: node.params["mode"]}, attr.OPERATION_NORM_BWD_PEER_STAT_DESCS)


@lowers("genstats")
def lower_genstats(node: Any, tensors: Any) -> list[Descriptor]:
    x = node.inputs["X"]
    op = Descriptor(desc.OPERATION_GEN_STATS_DESCRIPTOR)
    op.set(attr.OPERATION_GENSTATS_MODE, GenStatsMode.GENSTATS_SUM_SQSUM)
    # the frontend sets X's data type as the math precision, not the compute type
    op.set(attr.OPERATION_GENSTATS_MATH_PREC, to_backend_data_type(x.data_type))
    op.set(attr.OPERATION_GENSTATS_XDESC, tensors(x))
    op.set(attr.OPERATION_GENSTATS_SUMDESC, tensors(node.outputs["SUM"]))
    op.set(attr.OPERATION_GENSTATS_SQSUMDESC, tensors(node.outputs["SQ_SUM"]))
    return [op.finalize()]
