"""RoPE: refused. The rotation pairing of cuDNN's ROPE op (interleaved pairs or the two halves of the rotated
slots) is not documented in the header or the shared references; a reference that guessed could agree with a
wrong lowering."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference

_UNPINNED = ("{op} is not computed by the reference engine: which slots cuDNN's ROPE op rotates together "
             "(interleaved pairs or the two halves) is not documented")


def _refuse(op: str):
    def check(node: Any) -> str:
        return _UNPINNED.format(op=op)

    def run(node: Any, read: Read) -> np.ndarray:
        raise NotImplementedError(_UNPINNED.format(op=op))
    return check, run


for _op in ("rope", "rope_backward"):
    _check, _run = _refuse(_op)
    reference(_op, check=_check)(_run)
