"""Layout ops."""
from __future__ import annotations

from typing import Any

import numpy as np

from .registry import Read, reference


@reference("transpose")
def _transpose(node: Any, read: Read) -> np.ndarray:
    return np.transpose(read(node.inputs["X"]), node.params["permutation"])


@reference("concatenate")
def _concatenate(node: Any, read: Read) -> np.ndarray:
    return np.concatenate([read(t) for t in node.list_input("X")], axis=node.params["axis"])
