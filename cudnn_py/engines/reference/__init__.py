"""A float64 numpy interpreter: one reference function per IR node kind, registered with ``@reference(kind)``.

It is the ground truth the other engines are tested against, so it favours obvious code over speed: every
value is computed in float64 on the host and cast only when written into an output buffer. Buffers may be
numpy arrays, host scalars, or framework tensors (torch / cupy / any DLPack object); framework tensors cross
over through the small `_host` adapter below, so the engine itself only ever sees numpy.

Composites have a reference of their own, written from their definition rather than from their decomposition,
so ``ReferenceEngine(program=True)`` (which interprets the graph *after* the IR passes) checks a decomposition
against it.
"""
from __future__ import annotations

from . import (  # noqa: F401  (they register their kinds)
    attention,
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
    rope,
)
from .engine import ReferenceEngine, ReferencePlan
from .registry import REFERENCES, Read, WithExtra, reference, scalar

__all__ = ["REFERENCES", "Read", "ReferenceEngine", "ReferencePlan", "WithExtra", "reference", "scalar"]
