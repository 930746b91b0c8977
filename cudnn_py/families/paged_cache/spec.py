"""Paged cache load: the internal op the composite attention reads a paged K or V
cache with. ``paged_cache_load(container, seq_len, page_table) -> Y``.

The container holds the cache in ``num_blocks`` pages of (H, block_size, D); row ``s`` of batch ``b`` lives in
page ``page_table[b, 0, s // block_size, 0]`` at row ``s % block_size``. Y is the virtual (b, H, S, D) cache (or
its (b, H, D, S) Kᵀ view, recognised by stride[2] == 1) that the decomposition creates with its dims and strides.
"""
from __future__ import annotations

from ..._generated.names import desc
from ...enums import data_type
from ...errors import cudnnGraphNotSupportedError, shape_error, version_string
from ...ir.inference import InferenceContext, fill_data_types, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Port, register
from ...ir.tensor import Tensor

OP = "paged_cache_load"
MIN_VERSION = 90500  # the frontend's gate (the descriptor exists since 9.4.0)
PACKED_MIN_VERSION = 91002  # packed page tables (a ragged offset on the table): the frontend's gate


def page_count(s_kv: int, block_size: int) -> int:
    return -(-s_kv // block_size)


def check_page_table(op: str, node: Node, table: Tensor, b: int, s_kv: int, block_size: int) -> None:
    """A page table is INT32 (b, 1, ceil(s_kv / block_size), 1): one page index per block of each sequence.

    A packed one carries a ragged offset ((b + 1, 1, 1, 1) INT32 / INT64, in elements): batch b's page indices
    are the entries offset[b] .. offset[b + 1] of its buffer, as many as its sequence needs (cuDNN >= 9.10.2);
    its dims are then (b, 1, pages, 1) for the longest sequence's page count (the frontend checks no more)."""
    dims = [int(x) for x in table.dim]
    off = table.ragged_offset
    packed = off is not None
    want = [b, 1, page_count(s_kv, block_size), 1]
    if not packed and dims != want:
        raise shape_error(op, node.name, table, f"a page table needs dims [b, 1, ceil(s_kv / block_size), 1] = "
                          f"{want} (s_kv {s_kv}, block_size {block_size}), got {dims}")
    if packed and (len(dims) != 4 or dims[0] != b or dims[1] != 1 or dims[3] != 1 or dims[2] < 1):
        raise shape_error(op, node.name, table, f"a packed page table needs dims [b, 1, pages, 1] with b = {b}, "
                          f"got {dims}")
    dt = table.data_type
    if dt not in (data_type.INT32, data_type.NOT_SET):
        raise shape_error(op, node.name, table, f"a page table must be INT32, got {dt.name}")
    if off is None:
        return
    if [int(x) for x in off.dim] != [b + 1, 1, 1, 1] or off.data_type not in (data_type.INT32, data_type.INT64):
        raise shape_error(op, node.name, table, f"the packed page table's ragged offset {off.name!r} needs dims "
                          f"[b + 1, 1, 1, 1] = {[b + 1, 1, 1, 1]}, INT32 or INT64 (got {list(off.dim)}, "
                          f"{off.data_type.name})")
    from ...backend import versions  # the loader, only for a packed page table (not at import)

    if versions.runtime_version() < PACKED_MIN_VERSION:
        raise cudnnGraphNotSupportedError(f"{op} node {node.name!r}: packed page tables (a ragged offset on "
                                          f"{table.name!r}) need cuDNN >= 9.10.2; the loaded cuDNN is "
                                          f"{version_string(versions.runtime_version())}")


def infer(node: Node, ctx: InferenceContext) -> None:
    container, y = node.inputs["CONTAINER"], node.outputs["Y"]
    for t in (container, y, node.inputs["PAGE_TABLE"], node.inputs["SEQ_LEN"]):
        require_dims(OP, node, t)
    if len(container.dim) != 4:
        raise shape_error(OP, node.name, container, f"a page container needs 4 dims (num_blocks, h, block_size, d), "
                          f"got {list(container.dim)}")
    if not y.stride or len(y.dim) != 4:
        raise shape_error(OP, node.name, y, "the loaded cache needs 4 dims and strides set by its producer")
    transposed = int(y.stride[2]) == 1
    s_kv = int(y.dim[3] if transposed else y.dim[2])
    heads, d = int(y.dim[1]), int(y.dim[2] if transposed else y.dim[3])
    if [int(container.dim[1]), int(container.dim[3])] != [heads, d]:
        raise shape_error(OP, node.name, container, f"heads and head dim {[container.dim[1], container.dim[3]]} "
                          f"differ from the loaded cache's {[heads, d]}")
    check_page_table(OP, node, node.inputs["PAGE_TABLE"], int(y.dim[0]), s_kv, int(container.dim[2]))
    fill_data_types(node, ctx, container)


PAGED_CACHE_LOAD = OpSpec(
    method="paged_cache_load", kind="paged_cache_load", public=False,
    inputs=(Port("CONTAINER", "container"), Port("SEQ_LEN", "seq_len"), Port("PAGE_TABLE", "page_table")),
    outputs=(Output("Y"),), infer=infer, params=(),
    order=("container", "seq_len", "page_table", "name", "compute_data_type"),
    requires=(desc.OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR,), min_version=MIN_VERSION,
    doc="paged_cache_load(container, seq_len, page_table) -> Y: a K / V cache gathered through its page table "
        "(internal, SDPA's composite).",
)
register(PAGED_CACHE_LOAD)
