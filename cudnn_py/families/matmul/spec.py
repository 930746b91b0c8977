"""Matmul: C = A @ B over the last two axes, batch axes broadcast."""
from __future__ import annotations

from ..._generated.names import attr, desc
from ...errors import shape_error
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register


def infer(node: Node, ctx: InferenceContext) -> None:
    op = "matmul"
    a, b, c = node.inputs["A"], node.inputs["B"], node.outputs["C"]
    for t in (a, b):
        require_dims(op, node, t)
        if len(t.dim) < 2:
            raise shape_error(op, node.name, t, f"needs rank >= 2, got dims {list(t.dim)}")
    if a.dim[-1] != b.dim[-2]:
        raise shape_error(op, node.name, b, f"inner dimensions differ: A is {list(a.dim)}, B is {list(b.dim)}")
    batch = layout.broadcast([a.dim[:-2], b.dim[:-2]])
    if batch is None and c.dim and grouped_batch(a.dim[:-2], b.dim[:-2], c.dim[:-2]):
        batch = list(c.dim[:-2])  # grouped heads (attention's GQA): each input batch dim divides the output's
    if batch is None:
        raise shape_error(op, node.name, b, f"batch dims {list(b.dim[:-2])} do not broadcast with A's "
                          f"{list(a.dim[:-2])}")
    expected = batch + [a.dim[-2], b.dim[-1]]
    if not c.dim:
        c._infer_set("dim", expected)
    elif len(c.dim) != len(expected) or list(c.dim[-2:]) != expected[-2:] or \
            not layout.broadcastable_to(batch, c.dim[:-2]):
        raise shape_error(op, node.name, c, f"dims {list(c.dim)} do not match A {list(a.dim)} x B {list(b.dim)} "
                          f"(expected {expected})")
    if not c.stride:
        c._infer_set("stride", layout.row_major_strides(c.dim))
    fill_data_types(node, ctx, a)


def grouped_batch(a: list, b: list, c: list) -> bool:
    """Every batch dim of A and B divides C's (the grouped-query form the frontend's attention uses)."""
    return len(a) == len(b) == len(c) and all(int(x) % int(y) == 0 for x, y in zip(c, a)) and \
        all(int(x) % int(y) == 0 for x, y in zip(c, b))


# Optional node ports a decomposition may attach (not part of the classic surface): the GEMM M / N / K override
# tensors (per-batch sequence lengths: the composite attention bounds its matmuls by SEQ_LEN_Q / SEQ_LEN_KV)
OVERRIDE_PORTS = {"M_OVERRIDE": attr.OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
                  "N_OVERRIDE": attr.OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
                  "K_OVERRIDE": attr.OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC}


MATMUL = OpSpec(
    method="matmul", kind="matmul",
    inputs=(Port("A", "A"), Port("B", "B")), outputs=(Output("C"),), infer=infer,
    params=(Param("padding", 0.0, convert=float),),
    order=("A", "B", "compute_data_type", "padding", "name"),
    requires=(desc.OPERATION_MATMUL_DESCRIPTOR,),
    doc="matmul(A, B) -> C = A @ B with broadcast batch dims.",
)
register(MATMUL)
