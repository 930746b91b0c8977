"""Exceptions of the graph IR.

The classic module maps frontend error codes onto three Python types (python_api.md §1.4):
  * ValueError                  - bad attributes, shape deduction failures, bad tensor names / variant packs;
  * cudnnGraphNotSupportedError - no engine / plan supports the graph;
  * RuntimeError                - everything else (backend call failures, misuse such as mutating a frozen graph).
The IR raises only these, so classic `except` clauses keep working.
"""
from __future__ import annotations

from typing import Any


class cudnnGraphNotSupportedError(Exception):
    """No engine or execution plan supports the graph (a subclass of Exception only, like the pybind original)."""


def shape_error(op: str, node: str, tensor: Any, message: str) -> ValueError:
    """A ValueError that names the op, the node and the tensor, so a failing build says where to look."""
    tname = getattr(tensor, "name", None) or f"uid {getattr(tensor, 'uid', '?')}"
    return ValueError(f"{op} node {node!r}: tensor {tname!r}: {message}")


def frozen_error(what: str) -> RuntimeError:
    return RuntimeError(
        f"cannot {what}: the graph is frozen after planning (create_execution_plans) - build a new graph to change it"
    )
