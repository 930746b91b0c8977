"""Reduction: Y = reduce(X) over the axes where Y's dim is 1."""
from __future__ import annotations

from typing import Any

from ..._generated.names import desc
from ...enums import reduction_mode
from ...errors import NotImplementedOptionError, shape_error
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, member, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register


def infer(node: Node, ctx: InferenceContext) -> None:
    op = "reduction"
    x, y = node.inputs["X"], node.outputs["Y"]
    require_dims(op, node, x)
    if not y.dim:
        y._infer_set("dim", list(x.dim))  # frontend behaviour: no reduction unless the user sets Y's dims
    elif len(y.dim) != len(x.dim) or any(yd not in (1, xd) for yd, xd in zip(y.dim, x.dim)):
        if not _grouped(node, x, y):
            raise shape_error(op, node.name, y, f"dims {list(y.dim)} are not a reduction of X {list(x.dim)} "
                              "(same rank; each dim equal to X's or 1)")
    if not y.stride:
        y._infer_set("stride", layout.strides_from_order(y.dim, layout.nhwc_order(len(y.dim))))
    fill_data_types(node, ctx, x)


def _grouped(node: Node, x: Any, y: Any) -> bool:
    """A decomposition's grouped reduction (attention's GQA head sums): Y's dim divides X's on one axis, which
    sums consecutive groups (the internal ``grouped_reduction``)."""
    if not node.params.get("grouped") or len(y.dim) != len(x.dim):
        return False
    odd = [(int(yd), int(xd)) for yd, xd in zip(y.dim, x.dim) if yd not in (1, xd)]
    return len(odd) == 1 and odd[0][1] % odd[0][0] == 0


_MODE = member(reduction_mode, exclude=(reduction_mode.NOT_SET,))


def _no_group_offset(v: Any) -> None:
    if v is not None:
        raise NotImplementedOptionError("reduction(group_offset=...) is not implemented yet")


REDUCTION = OpSpec(
    method="reduction", kind="reduction",
    inputs=(Port("X", "input"),), outputs=(Output("Y"),), infer=infer,
    params=(Param("mode", convert=_MODE),
            Param("is_deterministic", False, convert=bool, keyword_only=True),
            Param("group_offset", None, convert=_no_group_offset, keyword_only=True)),
    order=("input", "mode", "compute_data_type", "name"), varargs=True, out_dims=True,
    requires=(desc.OPERATION_REDUCTION_DESCRIPTOR,),
    doc="reduction(input, mode) -> Y. The reduced axes are the ones where the output dims (out_dims= or "
        "Y.set_dim) are 1; unset output dims copy the input's (frontend behaviour).",
)
def _internal_reduction(method: str, fixed: dict, doc: str) -> OpSpec:
    """A reduction the decompositions build, lowered like the public one (kind "reduction") with fixed params."""
    return OpSpec(
        method=method, kind="reduction", public=False,
        inputs=(Port("X", "input"),), outputs=(Output("Y"),), infer=infer,
        params=(Param("mode", convert=_MODE),), fixed={"is_deterministic": False, **fixed},
        order=("input", "mode", "compute_data_type", "name"),
        requires=(desc.OPERATION_REDUCTION_DESCRIPTOR,), doc=doc)


# A reduction whose output dim may divide the input's on one axis (consecutive groups reduce to one): attention's
# GQA / MQA gradient head sums, as the frontend builds them (a FLOAT full-head gradient, then a sum per kv head).
GROUPED_REDUCTION = _internal_reduction(
    "grouped_reduction", {"grouped": True},
    "grouped_reduction(input, mode) -> Y (internal: Y's dims are X's, 1, or a divisor on one axis).")
# Attention backwards' dSink reduction, as the frontend builds it: REDUCE_ADD of
# exp(sink - Stats) · D over (b, s_q) straight into the user's dSink. The fused backward engine writes the NEGATED
# sum there, the true gradient -Σ p_sink · D ("The backend kernel applies the negative sign internally", the
# frontend's sdpa_fp8_bwd.h); a graph that NEGs the sum itself into dSink gets dSink left unwritten (H200, cuDNN
# 9.19). Internal, the same lowering as any reduction; the reference engine negates (``negated_by_engine``).
DSINK_REDUCTION = _internal_reduction(
    "dsink_reduction", {"negated_by_engine": True},
    "dsink_reduction(input, mode) -> Y (internal: the fused attention backward writes -reduce(X) into Y).")
register(REDUCTION, GROUPED_REDUCTION, DSINK_REDUCTION)
