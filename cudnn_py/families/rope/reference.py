"""RoPE: refused. The rotation pairing of cuDNN's ROPE op (interleaved pairs or the two halves of the rotated
slots) is not documented in the header or the shared references; a reference that guessed could agree with a
wrong lowering."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference
from ...errors import cudnnGraphNotSupportedError

_UNPINNED = ("{op} is not computed by the reference engine: which slots cuDNN's ROPE op rotates together "
             "(interleaved pairs or the two halves) is not documented. Run {op} graphs on cuDNN's engines (a "
             "pygraph without ReferenceEngine in its backends, on a GPU whose cuDNN has the ROPE operation), or "
             "apply the rotation in your own code before the graph")


def _refuse(op: str):
    def check(node: Any) -> str:
        return _UNPINNED.format(op=op)

    def run(node: Any, read: Read) -> np.ndarray:
        # reached only by a plan built around check_support(): refused as routing would have
        raise cudnnGraphNotSupportedError(f"reference engine: {_UNPINNED.format(op=op)} (node {node.name!r})")
    return check, run


for _op in ("rope", "rope_backward"):
    _check, _run = _refuse(_op)
    reference(_op, check=_check)(_run)
