"""The op families. Importing this package registers every op spec (``cudnn_py.ir.spec.SPECS``).

To add an op: write its spec (and inference) in its family's module here, its lowering in
``cudnn_py/lowering/<family>.py`` (``@lowers(kind)``) and its float64 reference in
``cudnn_py/engines/reference/<family>.py`` (``@reference(kind)``); ARCHITECTURE.md walks through it.
"""
from . import (  # noqa: F401  (registration)
    attention,
    attention_backward,
    attention_fp8,
    attention_mxfp8,
    conv,
    layout_ops,
    masks,
    matmul,
    moe,
    norms,
    paged_cache,
    pointwise,
    quantize,
    reduction,
    rng,
    rope,
)
from .common import InferenceContext, check_tensor

__all__ = ["InferenceContext", "check_tensor"]
