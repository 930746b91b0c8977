"""The paged cache load from its definition: row s of batch b is row s % block_size of page
page_table[b, 0, s // block_size, 0]. Rows at or past the batch's sequence length are 0 (their page-table
entries need not name a page)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference
from ...errors import InvalidValueError


def gather_pages(container: np.ndarray, table: np.ndarray, lengths: np.ndarray, s_kv: int,
                 owned: np.ndarray | None = None) -> np.ndarray:
    """(num_blocks, h, block_size, d) pages -> the (b, h, s_kv, d) cache of each sequence. ``owned``: for a
    packed table, how many entries each batch owns (its offsets' differences)."""
    n_blocks, heads, block, d = container.shape
    b = table.shape[0]
    out = np.zeros((b, heads, s_kv, d))
    pages = table.reshape(b, -1).astype(np.int64)
    lengths = lengths.reshape(-1).astype(np.int64)
    for n in range(b):
        rows = min(s_kv, int(lengths[n]))
        if owned is not None and -(-rows // block) > int(owned[n]):
            raise InvalidValueError(f"paged cache: batch {n} reads {-(-rows // block)} page(s) for its {rows} rows, "
                                    f"but "
                             f"its packed page-table entries (offsets) hold {int(owned[n])}")
        for s in range(rows):
            page = int(pages[n, s // block])
            if not 0 <= page < n_blocks:
                raise InvalidValueError(f"paged cache: page table entry {page} of batch {n} (row {s}) is not a page of "
                                 f"the {n_blocks} in the container")
            out[n, :, s, :] = container[page, :, s % block, :]
    return out


def owned_entries(table: Any, read: Read) -> np.ndarray | None:
    """How many entries each batch owns in a packed page table (its offsets' differences); None if unpacked."""
    if table.ragged_offset is None:
        return None
    return np.diff(read(table.ragged_offset).reshape(-1) * int(table.ragged_offset_multiplier))


@reference("paged_cache_load")
def _paged_cache_load(node: Any, read: Read) -> np.ndarray:
    y = node.outputs["Y"]
    transposed = int(y.stride[2]) == 1
    s_kv = int(y.dim[3] if transposed else y.dim[2])
    table = node.inputs["PAGE_TABLE"]
    cache = gather_pages(read(node.inputs["CONTAINER"]), read(table), read(node.inputs["SEQ_LEN"]), s_kv,
                         owned_entries(table, read))
    return np.swapaxes(cache, -1, -2) if transposed else cache
