"""The ``torch.library`` namespace every cudnn_py torch operator is defined in (``torch.ops.cudnn_py.<op>``), and
how an operator is defined there: its schema, its CUDA kernel and its fake (meta) implementation.

Not the official module's ``cudnn`` namespace: it defines ``cudnn::rmsnorm``, ``cudnn::gnn_agg_simple_fwd``, ...
itself, and torch refuses a second definition of an op name, so sharing it would make importing both packages in one
process fail (or shadow one package's kernels with the other's). FRAGMENT: each operator module adds its ops.
A schema is written as the official operator's, so torch's dispatcher treats a call as it treats the official's
(CPU operands of a CUDA-only op, wrong argument types) before any of our checks run.

Importing this module imports torch.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

NAMESPACE = "cudnn_py"
LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")

register_fake = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract  # torch < 2.4


def define(schema: str, cuda: Callable, fake: Callable, *, exact_strides: bool = True) -> str:
    """Define ``schema`` in the namespace with its CUDA kernel and fake (meta) implementation; returns the op's
    qualified name. ``exact_strides``: the kernel takes the contiguous operands it is given (inductor must not pass
    other strides)."""
    name = schema.split("(", 1)[0]
    tag = getattr(torch.Tag, "needs_exact_strides", None) or getattr(torch.Tag, "needs_fixed_stride_order", None)
    LIBRARY.define(schema, tags=(tag,) if tag is not None and exact_strides else ())
    LIBRARY.impl(name, cuda, "CUDA")
    qualified = f"{NAMESPACE}::{name}"
    register_fake(qualified, fake)
    return qualified
