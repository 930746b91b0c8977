"""Matmul nodes: a MATMUL descriptor (compute type, optional padding) and an
OPERATION_MATMUL over A, B → C."""
from __future__ import annotations

from typing import Any

from ..._generated.names import attr, atype, desc
from ...backend import Descriptor
from ...enums import to_backend_data_type
from ...lowering.registry import lowers
from .spec import OVERRIDE_PORTS


@lowers("matmul")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    p = node.params
    mm = Descriptor(desc.MATMUL_DESCRIPTOR)
    mm.set(attr.MATMUL_COMP_TYPE, to_backend_data_type(p["compute_data_type"]))
    padding = float(p.get("padding") or 0.0)
    if padding != 0.0:
        mm.set(attr.MATMUL_PADDING_VALUE, padding, type=atype.DOUBLE)
    mm.finalize()
    op = Descriptor(desc.OPERATION_MATMUL_DESCRIPTOR)
    op.set(attr.OPERATION_MATMUL_ADESC, tensors(node.inputs["A"]))
    op.set(attr.OPERATION_MATMUL_BDESC, tensors(node.inputs["B"]))
    op.set(attr.OPERATION_MATMUL_CDESC, tensors(node.outputs["C"]))
    op.set(attr.OPERATION_MATMUL_DESC, mm)
    for port, attribute in OVERRIDE_PORTS.items():
        if port in node.inputs:
            op.set(attribute, tensors(node.inputs[port]))
    op.finalize()
    return [op]
