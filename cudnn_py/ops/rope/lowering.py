"""RoPE (``cudnn_graph.h`` 9.28: OPERATION_ROPE_FWD since 9.24, OPERATION_ROPE_BWD since 9.25; the spec's
``requires`` gates them)."""
from __future__ import annotations

from typing import Any

from ...backend import Descriptor
from ...lowering.registry import lowers


def _lower(node: Any, tensors: Any, kind: str, prefix: str, x_port: str, x_attr: str, y_port: str,
           y_attr: str) -> list[Descriptor]:
    x = node.inputs[x_port]
    rope_dim = node.params["rope_dim"]
    op = Descriptor(kind)
    op.set(f"{prefix}_{x_attr}", tensors(x))
    op.set(f"{prefix}_{y_attr}", tensors(node.outputs[y_port]))
    op.set(f"{prefix}_FREQSDESC", tensors(node.inputs["FREQS"]))
    op.set(f"{prefix}_OUTPUT_SCALE", float(node.params["output_scale"]))
    op.set(f"{prefix}_ROPE_DIM", int(rope_dim if rope_dim is not None else x.dim[-1]))
    return [op.finalize()]


@lowers("rope")
def lower_rope(node: Any, tensors: Any) -> list[Descriptor]:
    return _lower(node, tensors, "CUDNN_BACKEND_OPERATION_ROPE_FWD_DESCRIPTOR", "CUDNN_ATTR_OPERATION_ROPE_FWD",
                  "X", "XDESC", "Y", "YDESC")


@lowers("rope_backward")
def lower_rope_backward(node: Any, tensors: Any) -> list[Descriptor]:
    return _lower(node, tensors, "CUDNN_BACKEND_OPERATION_ROPE_BWD_DESCRIPTOR", "CUDNN_ATTR_OPERATION_ROPE_BWD",
                  "DY", "DYDESC", "DX", "DXDESC")
