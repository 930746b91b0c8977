"""The paged cache load from its definition: row s of batch b is row s % block_size of page
page_table[b, 0, s // block_size, 0]. Rows at or past the batch's sequence length are 0 (their page-table
entries need not name a page)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .registry import Read, reference


def gather_pages(container: np.ndarray, table: np.ndarray, lengths: np.ndarray, s_kv: int) -> np.ndarray:
    """(num_blocks, h, block_size, d) pages -> the (b, h, s_kv, d) cache of each sequence."""
    n_blocks, heads, block, d = container.shape
    b = table.shape[0]
    out = np.zeros((b, heads, s_kv, d))
    pages = table.reshape(b, -1).astype(np.int64)
    lengths = lengths.reshape(-1).astype(np.int64)
    for n in range(b):
        for s in range(min(s_kv, int(lengths[n]))):
            page = int(pages[n, s // block])
            if not 0 <= page < n_blocks:
                raise ValueError(f"paged cache: page table entry {page} of batch {n} (row {s}) is not a page of "
                                 f"the {n_blocks} in the container")
            out[n, :, s, :] = container[page, :, s % block, :]
    return out


@reference("paged_cache_load")
def _paged_cache_load(node: Any, read: Read) -> np.ndarray:
    y = node.outputs["Y"]
    transposed = int(y.stride[2]) == 1
    s_kv = int(y.dim[3] if transposed else y.dim[2])
    cache = gather_pages(read(node.inputs["CONTAINER"]), read(node.inputs["PAGE_TABLE"]),
                         read(node.inputs["SEQ_LEN"]), s_kv)
    return np.swapaxes(cache, -1, -2) if transposed else cache
