"""The dropout's RNG: no python engine reproduces cuDNN's Philox bits, so the reference refuses it (check_support)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...engines.reference.registry import Read, reference


@reference("rng", lambda node: "rng: cuDNN's Philox bits cannot be reproduced by a python engine")
def _rng(node: Any, read: Read) -> np.ndarray:
    raise AssertionError("unreachable: check_support refuses rng nodes")
