"""A float64 numpy interpreter: one reference function per IR node kind, registered with ``@reference(kind)`` in
the families' ``cudnn_py/families/<family>/reference.py``.

It is the ground truth the other engines are tested against, so it favours obvious code over speed: every
value is computed in float64 on the host and cast only when written into an output buffer. Buffers may be
numpy arrays, host scalars, or framework tensors (torch / cupy / any DLPack object); framework tensors cross
over through the small `_host` adapter in ``engine.py``, so the engine itself only ever sees numpy.

Composites have a reference of their own, written from their definition rather than from their decomposition,
so ``ReferenceEngine(program=True)`` (which interprets the graph *after* the IR passes) checks a decomposition
against it.

The family references are imported when :data:`REFERENCES` is first read (the registry asks the filler that
``cudnn_py.families`` installed; ``cudnn_py/registry.py``), so numpy and the references load only for a graph that
uses this engine, and the engine never names a family.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .registry import Read, WithExtra, reference, scalar

if TYPE_CHECKING:
    from .engine import ReferenceEngine, ReferencePlan
    from .registry import REFERENCES

__all__ = ["REFERENCES", "Read", "ReferenceEngine", "ReferencePlan", "WithExtra", "reference", "scalar"]


def __getattr__(name: str) -> Any:
    if name in ("ReferenceEngine", "ReferencePlan", "REFERENCES"):
        from . import engine  # numpy and the engine, on first use

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
