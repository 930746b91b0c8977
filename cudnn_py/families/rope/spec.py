"""Rotary position embedding (frontend 1.32's ``rope`` / ``rope_backward``; the backend ROPE_FWD (cuDNN 9.24) and
ROPE_BWD (9.25) operations). What is pinned down, from the 9.28 header: X / dY and Y / dX are [B, H, S, D],
``freqs`` holds rotation angles [S, 1, 1, D] (the kernel takes their sin / cos), ``output_scale`` (host fp32,
default 1.0) multiplies cos / sin and the pass-through slots, and ``rope_dim`` (default D) rotates the last
rope_dim slots of D. Which slots pair up in a rotation (interleaved or the two halves) is not documented, so the
reference engine does not compute it.
"""
from __future__ import annotations

from ..._generated.names import desc
from ...errors import shape_error
from ...ir.inference import InferenceContext, as_float, fill_data_types, int_at_least, like_input, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register


def _infer(op: str, x_port: str, y_port: str):
    def infer(node: Node, ctx: InferenceContext) -> None:
        x, freqs, y = node.inputs[x_port], node.inputs["FREQS"], node.outputs[y_port]
        require_dims(op, node, x)
        require_dims(op, node, freqs)
        if len(x.dim) != 4:
            raise shape_error(op, node.name, x, f"dims {list(x.dim)} are not [B, H, S, D]")
        _, _, s, d = (int(v) for v in x.dim)
        if [int(v) for v in freqs.dim] != [s, 1, 1, d]:
            raise shape_error(op, node.name, freqs, f"dims {list(freqs.dim)} are not [S, 1, 1, D] = {[s, 1, 1, d]} "
                              f"for {x.name!r} of dims {list(x.dim)}")
        rope_dim = node.params["rope_dim"]
        if rope_dim is not None and not (0 < rope_dim <= d and rope_dim % 2 == 0):
            raise shape_error(op, node.name, x, f"rope_dim {rope_dim} is not an even width in (0, D = {d}]")
        like_input(op, node, y, x, f"{x.name!r}'s")
        fill_data_types(node, ctx, x)
    return infer


def _params() -> tuple[Param, ...]:
    return (Param("output_scale", 1.0, convert=as_float(1.0)),
            Param("rope_dim", None, convert=int_at_least(None, optional=True)))


ROPE = OpSpec(
    method="rope", kind="rope", inputs=(Port("X", "input"), Port("FREQS", "freqs")), outputs=(Output("Y"),),
    infer=_infer("rope", "X", "Y"), params=_params(), order=("input", "freqs", "output_scale", "rope_dim"),
    varargs=True, out_dims=True, requires=(desc.OPERATION_ROPE_FWD_DESCRIPTOR,),
    doc="rope(input, freqs, output_scale=1.0, rope_dim=None) -> Y: input [B, H, S, D] rotated by the angles freqs "
        "[S, 1, 1, D] (cuDNN >= 9.24).")

ROPE_BACKWARD = OpSpec(
    method="rope_backward", kind="rope_backward", inputs=(Port("DY", "dY"), Port("FREQS", "freqs")),
    outputs=(Output("DX"),), infer=_infer("rope_backward", "DY", "DX"), params=_params(),
    order=("dY", "freqs", "output_scale", "rope_dim"), varargs=True, out_dims=True,
    requires=(desc.OPERATION_ROPE_BWD_DESCRIPTOR,),
    doc="rope_backward(dY, freqs, output_scale=1.0, rope_dim=None) -> dX (cuDNN >= 9.25).")
register(ROPE, ROPE_BACKWARD)

