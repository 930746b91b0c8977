"""The unified attention forward (``node_lowering.md`` §14.8): one OPERATION_SDPA_FWD over the untransposed Q, K,
V and O, with the statistics, the scale, the block mask, the sequence lengths (the backend applies the padding
mask whenever both are given), the page tables of a paged K / V and dropout attached. The composite form needs
no lowering: the decompose pass expanded it."""
from __future__ import annotations

from typing import Any

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

_PREFIX = "CUDNN_ATTR_OPERATION_SDPA_FWD_"
_TENSOR_PORTS = (("Q", "QDESC"), ("K", "KDESC"), ("V", "VDESC"), ("ATTN_SCALE", "SCALEDESC"))


@lowers("sdpa")
def lower(node: Any, tensors: Any) -> list[Descriptor]:
    ins, p = node.inputs, node.params
    where = f"sdpa node {node.name!r}"
    op = Descriptor("CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR")
    for port, attribute in _TENSOR_PORTS:
        if port in ins:
            op.set(_PREFIX + attribute, tensors(ins[port]))
    op.set(_PREFIX + "ODESC", tensors(node.outputs["O"]))
    if "Stats" in node.outputs:
        op.set(_PREFIX + "STATSDESC", tensors(node.outputs["Stats"]))
    if "BLOCK_MASK" in ins:
        versions.require(BLOCK_MASK_ATTRIBUTE, what=f"{where}: block mask", at_least=BLOCK_MASK_MIN_VERSION)
        op.set(BLOCK_MASK_ATTRIBUTE, tensors(ins["BLOCK_MASK"]))
    if "SEQ_LEN_Q" in ins:
        versions.require(_PREFIX + "SEQ_LEN_QDESC", what=f"{where}: padding mask", at_least=SEQ_LEN_MIN_VERSION)
        op.set(_PREFIX + "SEQ_LEN_QDESC", tensors(ins["SEQ_LEN_Q"]))
        op.set(_PREFIX + "SEQ_LEN_KVDESC", tensors(ins["SEQ_LEN_KV"]))
    for port in ("K", "V"):  # a paged K / V: its descriptor above is the page container (num_blocks, h, bs, d)
        if f"PAGE_TABLE_{port}" in ins:
            attribute = f"{_PREFIX}PAGE_TABLE_{port}DESC"
            versions.require(attribute, what=f"{where}: paged attention", at_least=PAGED_UNIFIED_MIN_VERSION)
            op.set(attribute, tensors(ins[f"PAGE_TABLE_{port}"]))
    dropout = rng_probability(p)  # the unified op takes no mask (refused before lowering)
    if dropout is not None:
        versions.require(_PREFIX + "DROPOUT_PROBABILITY", what=f"{where}: dropout", at_least=DROPOUT_MIN_VERSION)
        op.set(_PREFIX + "DROPOUT_PROBABILITY", float(dropout))
        op.set(_PREFIX + "DROPOUT_SEED_DESC", tensors(ins["DROPOUT_SEED"]))
        op.set(_PREFIX + "DROPOUT_OFFSET_DESC", tensors(ins["DROPOUT_OFFSET"]))
        if "RNG_DUMP" in node.outputs:
            op.set(_PREFIX + "DROPOUT_RNG_DUMP_DESC", tensors(node.outputs["RNG_DUMP"]))
    if p.get("unfuse_fma"):
        versions.require(_PREFIX + "UNFUSE_FMA", what=f"{where}: unfuse_fma")
        op.set(_PREFIX + "UNFUSE_FMA", True)
    op.finalize()
    return [op]
