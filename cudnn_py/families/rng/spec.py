"""Random numbers: the internal ``rng`` op SDPA's dropout decomposes into.

``rng(seed, offset, probability, dims)`` writes a Bernoulli mask (1 with ``probability``, else 0) of ``dims``
(row-major) from cuDNN's Philox generator, keyed by the seed and offset tensors. Only BERNOULLI is lowered, as in
the frontend. No python engine can reproduce the generator's bits: the reference engine refuses it.
"""
from __future__ import annotations

from typing import Any

from ..._generated.names import RngDistribution, desc
from ...errors import InvalidValueError
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, fill_or_check_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register


def _probability(v: Any) -> float:
    p = float(v)
    if not 0.0 <= p <= 1.0:
        raise InvalidValueError(f"a Bernoulli probability must lie in [0, 1], got {p}")
    return p


def _dims(v: Any) -> list[int]:
    dims = [int(d) for d in v]
    if not dims or any(d <= 0 for d in dims):
        raise InvalidValueError(f"needs positive dims, got {dims}")
    return dims


def infer(node: Node, ctx: InferenceContext) -> None:
    y, dims = node.outputs["Y"], node.params["dims"]
    fill_or_check_dims("rng", node, y, list(dims), "the requested")
    if not y.stride:
        y._infer_set("stride", layout.row_major_strides(y.dim))
    fill_data_types(node, ctx, None)


RNG = OpSpec(
    method="rng", kind="rng", public=False,
    inputs=(Port("SEED", "seed"), Port("OFFSET", "offset")), outputs=(Output("Y"),), infer=infer,
    params=(Param("bernoulli_probability", convert=_probability), Param("dims", convert=_dims)),
    order=("seed", "offset", "bernoulli_probability", "dims", "name", "compute_data_type"),
    requires=(desc.OPERATION_RNG_DESCRIPTOR, RngDistribution.BERNOULLI),
    doc="rng(seed, offset, bernoulli_probability, dims) -> Y: a Bernoulli mask (internal, SDPA dropout).",
)
register(RNG)
