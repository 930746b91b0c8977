"""The unified attention forward: one OPERATION_SDPA_FWD over the untransposed Q, K,
V and O, with the statistics, the scale, the block mask, the sequence lengths (the backend applies the padding
mask whenever both are given), the page tables of a paged K / V and dropout attached. The composite form needs
no lowering: the decompose pass expanded it."""
from __future__ import annotations

from typing import Any

from ..._generated.names import attr, desc
from ...backend import Descriptor, versions
from ...lowering.registry import lowers
from .spec import (
    BLOCK_MASK_ATTRIBUTE,
    BLOCK_MASK_MIN_VERSION,
    DROPOUT_MIN_VERSION,
    PAGED_UNIFIED_MIN_VERSION,
    SEQ_LEN_MIN_VERSION,
    rng_probability,
)

_TENSOR_PORTS = (("Q", attr.OPERATION_SDPA_FWD_QDESC), ("K", attr.OPERATION_SDPA_FWD_KDESC),
                 ("V", attr.OPERATION_SDPA_FWD_VDESC), ("ATTN_SCALE", attr.OPERATION_SDPA_FWD_SCALEDESC))
_PAGE_TABLES = {"K": attr.OPERATION_SDPA_FWD_PAGE_TABLE_KDESC, "V": attr.OPERATION_SDPA_FWD_PAGE_TABLE_VDESC}


@lowers("sdpa")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    ins, p = node.inputs, node.params
    where = f"sdpa node {node.name!r}"
    op = Descriptor(desc.OPERATION_SDPA_FWD_DESCRIPTOR)
    for port, attribute in _TENSOR_PORTS:
        if port in ins:
            op.set(attribute, tensors(ins[port]))
    op.set(attr.OPERATION_SDPA_FWD_ODESC, tensors(node.outputs["O"]))
    if "Stats" in node.outputs:
        op.set(attr.OPERATION_SDPA_FWD_STATSDESC, tensors(node.outputs["Stats"]))
    if "BLOCK_MASK" in ins:
        versions.require(BLOCK_MASK_ATTRIBUTE, what=f"{where}: block mask", at_least=BLOCK_MASK_MIN_VERSION)
        op.set(BLOCK_MASK_ATTRIBUTE, tensors(ins["BLOCK_MASK"]))
    if "SEQ_LEN_Q" in ins:
        versions.require(attr.OPERATION_SDPA_FWD_SEQ_LEN_QDESC,
                         what=f"{where}: padding mask", at_least=SEQ_LEN_MIN_VERSION)
        op.set(attr.OPERATION_SDPA_FWD_SEQ_LEN_QDESC, tensors(ins["SEQ_LEN_Q"]))
        op.set(attr.OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, tensors(ins["SEQ_LEN_KV"]))
    for port in ("K", "V"):  # a paged K / V: its descriptor above is the page container (num_blocks, h, bs, d)
        if f"PAGE_TABLE_{port}" in ins:
            attribute = _PAGE_TABLES[port]
            versions.require(attribute, what=f"{where}: paged attention", at_least=PAGED_UNIFIED_MIN_VERSION)
            op.set(attribute, tensors(ins[f"PAGE_TABLE_{port}"]))
    dropout = rng_probability(p)  # the unified op takes no mask (refused before lowering)
    if dropout is not None:
        versions.require(attr.OPERATION_SDPA_FWD_DROPOUT_PROBABILITY,
                         what=f"{where}: dropout", at_least=DROPOUT_MIN_VERSION)
        op.set(attr.OPERATION_SDPA_FWD_DROPOUT_PROBABILITY, float(dropout))
        op.set(attr.OPERATION_SDPA_FWD_DROPOUT_SEED_DESC, tensors(ins["DROPOUT_SEED"]))
        op.set(attr.OPERATION_SDPA_FWD_DROPOUT_OFFSET_DESC, tensors(ins["DROPOUT_OFFSET"]))
        if "RNG_DUMP" in node.outputs:
            op.set(attr.OPERATION_SDPA_FWD_DROPOUT_RNG_DUMP_DESC, tensors(node.outputs["RNG_DUMP"]))
    if p.get("unfuse_fma"):
        versions.require(attr.OPERATION_SDPA_FWD_UNFUSE_FMA, what=f"{where}: unfuse_fma")
        op.set(attr.OPERATION_SDPA_FWD_UNFUSE_FMA, True)
    op.finalize()
    return [op]
