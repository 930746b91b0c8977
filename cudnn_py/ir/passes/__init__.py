"""IR passes: from the user's graph to the graph that is lowered.

``prepare(graph, options)`` copies the validated user graph into a :class:`~cudnn_py.ir.program.Program` and runs,
in order:

1. :mod:`.decompose` - composite ops (those whose spec has ``expand``) become primitive nodes, chosen per option
   (e.g. ``implementation``) and per the running cuDNN;
2. :mod:`.legalize` - layouts the engines accept: fused scalars get the rank of the tensors they meet, every
   tensor at least rank 3 (GEN_INDEX axes shifted to match), long 1-D pointwise graphs folded to 3-D.

The user's graph is never modified; ``Program.log`` records what each pass did.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..program import Program
from . import decompose, legalize


@dataclass(frozen=True)
class PassOptions:
    """What the passes may depend on besides the graph."""

    # available(feature, at_least=0) -> bool: whether the running cuDNN has a catalog feature (see
    # cudnn_py.backend.versions.available); the IR does not load the library itself.
    available: Callable[..., bool]
    # require(feature, what=, at_least=0): raise FeatureVersionError unless the running cuDNN has it (see
    # cudnn_py.backend.versions.require), for a composite whose every form needs a newer cuDNN (MXFP8 attention).
    # The default gates nothing: python engines interpret the program whatever cuDNN is loaded.
    require: Callable[..., None] = lambda feature, what="", at_least=0: None


def prepare(graph: Any, options: PassOptions) -> Program:
    program = Program.from_graph(graph)
    decompose.run(program, options)
    legalize.run(program, options)
    program.check()
    return program


__all__ = ["PassOptions", "Program", "prepare"]
