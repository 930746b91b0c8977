"""RoPE (``cudnn_graph.h`` 9.28: OPERATION_ROPE_FWD since 9.24, OPERATION_ROPE_BWD since 9.25; the spec's
``requires`` gates them)."""
from __future__ import annotations

from typing import Any

from ..._generated.names import attr, desc
from ...backend import Descriptor
from ...lowering.registry import lowers


def _lower(node: Any, tensors: Any, kind: str, x_port: str, y_port: str, attrs: tuple[str, ...]) -> list[Descriptor]:
    """``attrs``: the operation's x, y, freqs, output-scale and rope-dim attributes."""
    x_attr, y_attr, freqs, output_scale, rope_dim_attr = attrs
    x = node.inputs[x_port]
    rope_dim = node.params["rope_dim"]
    op = Descriptor(kind)
    op.set(x_attr, tensors(x))
    op.set(y_attr, tensors(node.outputs[y_port]))
    op.set(freqs, tensors(node.inputs["FREQS"]))
    op.set(output_scale, float(node.params["output_scale"]))
    op.set(rope_dim_attr, int(rope_dim if rope_dim is not None else x.dim[-1]))
    return [op.finalize()]


_FWD = (attr.OPERATION_ROPE_FWD_XDESC, attr.OPERATION_ROPE_FWD_YDESC, attr.OPERATION_ROPE_FWD_FREQSDESC,
        attr.OPERATION_ROPE_FWD_OUTPUT_SCALE, attr.OPERATION_ROPE_FWD_ROPE_DIM)
_BWD = (attr.OPERATION_ROPE_BWD_DYDESC, attr.OPERATION_ROPE_BWD_DXDESC, attr.OPERATION_ROPE_BWD_FREQSDESC,
        attr.OPERATION_ROPE_BWD_OUTPUT_SCALE, attr.OPERATION_ROPE_BWD_ROPE_DIM)


@lowers("rope")
def lower_rope(node: Any, tensors: Any) -> list[Descriptor]:
    return _lower(node, tensors, desc.OPERATION_ROPE_FWD_DESCRIPTOR, "X", "Y", _FWD)


@lowers("rope_backward")
def lower_rope_backward(node: Any, tensors: Any) -> list[Descriptor]:
    return _lower(node, tensors, desc.OPERATION_ROPE_BWD_DESCRIPTOR, "DY", "DX", _BWD)
