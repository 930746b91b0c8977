"""The RNG op: an RNG descriptor (BERNOULLI, its probability) and an OPERATION_RNG
writing Y from the seed and offset tensors."""
from __future__ import annotations

from typing import Any

from ..._generated.names import RngDistribution, attr, atype, desc
from ...backend import Descriptor
from ...lowering.registry import lowers


@lowers("rng")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    rng = Descriptor(desc.RNG_DESCRIPTOR)
    rng.set(attr.RNG_DISTRIBUTION, RngDistribution.BERNOULLI)
    rng.set(attr.RNG_BERNOULLI_DIST_PROBABILITY, float(node.params["bernoulli_probability"]),
            type=atype.DOUBLE)
    rng.finalize()
    op = Descriptor(desc.OPERATION_RNG_DESCRIPTOR)
    op.set(attr.OPERATION_RNG_YDESC, tensors(node.outputs["Y"]))
    op.set(attr.OPERATION_RNG_DESC, rng)
    op.set(attr.OPERATION_RNG_SEED, tensors(node.inputs["SEED"]), type=atype.BACKEND_DESCRIPTOR)
    op.set(attr.OPERATION_RNG_OFFSET_DESC, tensors(node.inputs["OFFSET"]))
    op.finalize()
    return [op]
