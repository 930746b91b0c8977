"""Decomposition: every composite node (a spec with ``expand``) whose expansion applies is replaced, in place in
the node order, by the primitive nodes its ``expand`` builds through a :class:`~cudnn_py.ir.program.Rewriter`.
Expansions may emit composites themselves; those are expanded in turn."""
from __future__ import annotations

from typing import Any

from ...errors import UsageError
from ..node import Node
from ..program import Program, Rewriter

MAX_DEPTH = 8  # nested composites deeper than this are a bug in a decomposition, not a graph


def run(program: Program, options: Any) -> None:
    program.nodes = _expand_all(program, program.nodes, options, 0)


def _expand_all(program: Program, nodes: list[Node], options: Any, depth: int) -> list[Node]:
    out: list[Node] = []
    for node in nodes:
        spec = node.spec
        if spec is None or spec.expand is None:
            out.append(node)
            continue
        if depth >= MAX_DEPTH:
            raise UsageError(f"{node.op} node {node.name!r}: decompositions nest deeper than {MAX_DEPTH}")
        rw = Rewriter(program, node)
        if not spec.expand(node, rw, options):
            out.append(node)  # this composite is lowered as one op (e.g. the unified descriptor)
            program.log.append(f"decompose: {node.name!r} ({spec.method}) kept as one op")
            continue
        program.log.append(f"decompose: {node.name!r} ({spec.method}) -> "
                           f"{', '.join(n.spec.method for n in rw.emitted if n.spec is not None)}")
        out.extend(_expand_all(program, rw.emitted, options, depth + 1))
    return out
