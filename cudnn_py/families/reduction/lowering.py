"""Reduction nodes: a REDUCTION descriptor (operator, compute type, determinism on
the cuDNN versions that have it) and an OPERATION_REDUCTION over X → Y. The reduced axes are those where Y's dim
is 1."""
from __future__ import annotations

from typing import Any

from ..._generated.names import attr, desc
from ...backend import Descriptor, versions
from ...enums import to_backend_data_type, to_backend_reduction_mode
from ...lowering.registry import lowers

DETERMINISM = attr.REDUCTION_IS_DETERMINISTIC


@lowers("reduction")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    p = node.params
    red = Descriptor(desc.REDUCTION_DESCRIPTOR)
    red.set(attr.REDUCTION_COMP_TYPE, to_backend_data_type(p["compute_data_type"]))
    red.set(attr.REDUCTION_OPERATOR, to_backend_reduction_mode(p["mode"]))
    deterministic = bool(p.get("is_deterministic", False))
    if deterministic:
        versions.require(DETERMINISM, what=f"reduction {node.name!r} with is_deterministic=True")
    if versions.available(DETERMINISM):
        red.set(DETERMINISM, deterministic)
    red.finalize()
    op = Descriptor(desc.OPERATION_REDUCTION_DESCRIPTOR)
    op.set(attr.OPERATION_REDUCTION_XDESC, tensors(node.inputs["X"]))
    op.set(attr.OPERATION_REDUCTION_YDESC, tensors(node.outputs["Y"]))
    op.set(attr.OPERATION_REDUCTION_DESC, red)
    op.finalize()
    return [op]
