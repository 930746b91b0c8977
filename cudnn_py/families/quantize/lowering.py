"""Block-scale quantize / dequantize: raw BLOCK_SCALE_QUANTIZE / _DEQUANTIZE operations.
``axis`` and ``transpose`` are not lowered (they only shaped the inferred strides); NEG_SCALE is set from cuDNN
9.14 on, as the frontend does, and a negative scale on an older cuDNN is refused rather than dropped."""
from __future__ import annotations

from typing import Any

from ..._generated.names import attr, atype, desc
from ...backend import Descriptor, versions
from ...enums import to_backend_data_type
from ...errors import CudnnError
from ...lowering.registry import lowers
from .spec import NEG_SCALE_MIN_VERSION

_NEG_SCALE = attr.OPERATION_BLOCK_SCALE_DEQUANTIZE_NEG_SCALE


@lowers("block_scale_quantize")
def lower_quantize(node: Any, tensors: Any) -> list[Descriptor]:
    op = Descriptor(desc.OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR)
    op.set(attr.OPERATION_BLOCK_SCALE_QUANTIZE_XDESC, tensors(node.inputs["X"]))
    op.set(attr.OPERATION_BLOCK_SCALE_QUANTIZE_YDESC, tensors(node.outputs["Y"]))
    op.set(attr.OPERATION_BLOCK_SCALE_QUANTIZE_SCALE_DESC, tensors(node.outputs["SCALE"]))
    op.set(attr.OPERATION_BLOCK_SCALE_QUANTIZE_MATH_PREC, to_backend_data_type(node.params["compute_data_type"]))
    op.set(attr.OPERATION_BLOCK_SCALE_QUANTIZE_BLOCK_SIZE, int(node.params["block_size"]), type=atype.INT32)
    try:
        return [op.finalize()]
    except CudnnError as e:
        if node.outputs["SCALE"].reordering_type.name == "NONE":  # cuDNN's own message garbles this rule
            e.args = (f"{e.args[0]} (hint: cuDNN 9.28 quantizes rank-3 tensors only with a scale tensor "
                      "reordered F8_128x4: scale.set_reordering_type(tensor_reordering.F8_128x4))",)
        raise


@lowers("block_scale_dequantize")
def lower_dequantize(node: Any, tensors: Any) -> list[Descriptor]:
    op = Descriptor(desc.OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR)
    op.set(attr.OPERATION_BLOCK_SCALE_DEQUANTIZE_XDESC, tensors(node.inputs["X"]))
    op.set(attr.OPERATION_BLOCK_SCALE_DEQUANTIZE_SCALE_DESC, tensors(node.inputs["SCALE"]))
    op.set(attr.OPERATION_BLOCK_SCALE_DEQUANTIZE_YDESC, tensors(node.outputs["Y"]))
    op.set(attr.OPERATION_BLOCK_SCALE_DEQUANTIZE_MATH_PREC, to_backend_data_type(node.params["compute_data_type"]))
    # a decomposition may give the backend the frontend's block size where it differs from the logical one (MXFP8
    # attention: {1, 32} for every operand, whichever axis the scale blocks; ops/attention_mxfp8/spec.py)
    sizes = node.params.get("backend_block_size", node.params["block_size"])
    op.set(attr.OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE, [int(b) for b in sizes], type=atype.INT32)
    negative = bool(node.params["is_negative_scale"])
    if negative or versions.runtime_version() >= NEG_SCALE_MIN_VERSION:
        if negative:
            versions.require(_NEG_SCALE, what=f"block_scale_dequantize(is_negative_scale=True) (node {node.name!r})",
                             at_least=NEG_SCALE_MIN_VERSION)
        op.set(_NEG_SCALE, negative, type=atype.BOOLEAN)
    return [op.finalize()]
