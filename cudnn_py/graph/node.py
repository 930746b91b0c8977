"""A graph node: one op with named input/output ports and a parameter dict.

The shape is deliberately generic (op string + three dicts) so lowering and python engines can read every op
family the same way:
  * `op`      - "matmul" | "pointwise" | "reduction" (other families register their own op strings);
  * `inputs`  - port -> Tensor, e.g. matmul "A","B"; pointwise "IN_0".."IN_2"; reduction "X";
  * `outputs` - port -> Tensor, e.g. matmul "C"; pointwise "OUT_0"; reduction "Y";
  * `params`  - op attributes; `compute_data_type` is always present (filled by inference).
After the graph freezes, the dicts become read-only views and attribute writes raise.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Dict, Mapping

from ..enums import data_type
from .errors import frozen_error
from .tensor import Tensor


class Node:
    def __init__(self, op: str, name: str, params: Dict[str, Any] | None = None,
                 compute_data_type: Any = data_type.NOT_SET) -> None:
        self._frozen = False
        self.op = op
        self.name = name
        # what the caller asked for; params["compute_data_type"] is the inferred value (re-derived each validate)
        self.requested_compute_data_type = compute_data_type
        self.inputs: Mapping[str, Tensor] = {}
        self.outputs: Mapping[str, Tensor] = {}
        self.params: Mapping[str, Any] = {**(params or {}), "compute_data_type": compute_data_type}

    def __setattr__(self, attr: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise frozen_error(f"set {attr} of node {self.name!r}")
        object.__setattr__(self, attr, value)

    def _freeze(self) -> None:
        for attr in ("inputs", "outputs", "params"):
            object.__setattr__(self, attr, MappingProxyType(dict(getattr(self, attr))))
        object.__setattr__(self, "_frozen", True)

    @property
    def compute_data_type(self) -> Any:
        return self.params.get("compute_data_type", data_type.NOT_SET)

    def tensors(self):
        """Every tensor the node touches, inputs first (with their ragged-offset tensors)."""
        for t in list(self.inputs.values()) + list(self.outputs.values()):
            if t.ragged_offset is not None:
                yield t.ragged_offset
            yield t

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "op": self.op,
            "inputs": {port: t.uid for port, t in self.inputs.items()},
            "outputs": {port: t.uid for port, t in self.outputs.items()},
            "params": {k: (str(v) if not isinstance(v, (bool, int, float, str, type(None))) else v)
                       for k, v in self.params.items()},
        }

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op})"
