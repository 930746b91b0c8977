"""The paged cache load (``node_lowering.md`` §11): one OPERATION_PAGED_CACHE_LOAD from the page container, the
page table and the sequence lengths into the virtual cache."""
from __future__ import annotations

from typing import Any

from ...backend import Descriptor
from ...lowering.registry import lowers

_PREFIX = "CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_"


@lowers("paged_cache_load")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    op = Descriptor("CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR")
    op.set(_PREFIX + "CONTAINER_DESC", tensors(node.inputs["CONTAINER"]))
    op.set(_PREFIX + "PAGE_TABLE_DESC", tensors(node.inputs["PAGE_TABLE"]))
    op.set(_PREFIX + "SEQUENCE_DESC", tensors(node.inputs["SEQ_LEN"]))
    op.set(_PREFIX + "YDESC", tensors(node.outputs["Y"]))
    op.finalize()
    return [op]
