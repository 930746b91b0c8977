"""The RNG op (``node_lowering.md`` §8): an RNG descriptor (BERNOULLI, its probability) and an OPERATION_RNG
writing Y from the seed and offset tensors."""
from __future__ import annotations

from typing import Any

from ...backend import Descriptor
from ...lowering.registry import lowers


@lowers("rng")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    rng = Descriptor("CUDNN_BACKEND_RNG_DESCRIPTOR")
    rng.set("CUDNN_ATTR_RNG_DISTRIBUTION", "CUDNN_RNG_DISTRIBUTION_BERNOULLI")
    rng.set("CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY", float(node.params["bernoulli_probability"]),
            type="CUDNN_TYPE_DOUBLE")
    rng.finalize()
    op = Descriptor("CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_RNG_YDESC", tensors(node.outputs["Y"]))
    op.set("CUDNN_ATTR_OPERATION_RNG_DESC", rng)
    op.set("CUDNN_ATTR_OPERATION_RNG_SEED", tensors(node.inputs["SEED"]), type="CUDNN_TYPE_BACKEND_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC", tensors(node.inputs["OFFSET"]))
    op.finalize()
    return [op]
