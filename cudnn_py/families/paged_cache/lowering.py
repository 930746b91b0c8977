"""The paged cache load: one OPERATION_PAGED_CACHE_LOAD from the page container, the
page table and the sequence lengths into the virtual cache."""
from __future__ import annotations

from typing import Any

from ..._generated.names import attr, desc
from ...backend import Descriptor
from ...lowering.registry import lowers


@lowers("paged_cache_load")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    op = Descriptor(desc.OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR)
    op.set(attr.OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, tensors(node.inputs["CONTAINER"]))
    op.set(attr.OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, tensors(node.inputs["PAGE_TABLE"]))
    op.set(attr.OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, tensors(node.inputs["SEQ_LEN"]))
    op.set(attr.OPERATION_PAGED_CACHE_LOAD_YDESC, tensors(node.outputs["Y"]))
    op.finalize()
    return [op]
