"""A graph node: one op with named input/output ports and a parameter dict.

The shape is deliberately generic (op kind + three dicts) so lowering and python engines can read every op
family the same way:
  * `op`      - the spec's kind: "matmul" | "pointwise" | "reduction" | ... (lowering and the reference engine
                dispatch on it); `spec` is the OpSpec the node was built from (its method, ports, inference);
  * `inputs`  - port -> Tensor, e.g. matmul "A","B"; pointwise "IN_0".."IN_2"; reduction "X";
  * `outputs` - port -> Tensor, e.g. matmul "C"; pointwise "OUT_0"; reduction "Y";
  * `params`  - op attributes; `compute_data_type` is always present (filled by inference).
After the graph freezes, the dicts become read-only views and attribute writes raise.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..enums import data_type
from ..errors import frozen_error
from .spec import list_port_key
from .tensor import Tensor

if TYPE_CHECKING:
    from .spec import OpSpec


class NodeType(enum.Enum):
    """1.32's ``cudnn.NodeType``: the operation kind of a node (``Node.node_type``). Members in 1.32's order; the
    linear-attention kinds (GDN, KDA, MAMBA2, ...) exist for parity, cudnn_py builds no such node."""

    COMPOSITE = 1
    CONV_FPROP = 2
    CONV_DGRAD = 3
    CONV_WGRAD = 4
    GENSTATS = 5
    RESHAPE = 6
    SLICE = 7
    CONCATENATE = 8
    TRANSPOSE = 9
    ROPE = 10
    ROPE_BWD = 11
    MOE_GROUPED_MATMUL_BWD = 12
    MATMUL = 13
    MATMUL_FP8 = 14
    POINTWISE = 15
    REDUCTION = 16
    RMSNORM = 17
    RMSNORM_BWD = 18
    LAYERNORM = 19
    LAYERNORM_BWD = 20
    ADALAYERNORM = 21
    ADALAYERNORM_BWD = 22
    INSTANCENORM = 23
    INSTANCENORM_BWD = 24
    BATCHNORM = 25
    BATCHNORM_INFERENCE = 26
    BATCHNORM_BWD = 27
    SDPA = 28
    SDPA_BWD = 29
    SDPA_FP8 = 30
    SDPA_FP8_BWD = 31
    SDPA_MXFP8 = 32
    SDPA_MXFP8_BWD = 33
    GDN = 34
    GDN_BWD = 35
    KDA = 36
    KDA_BWD = 37
    GDN2 = 38
    GDN2_BWD = 39
    MOE_GROUPED_MATMUL = 40
    BLOCK_SCALE_QUANTIZE = 41
    BLOCK_SCALE_DEQUANTIZE = 42
    GDP = 43
    GDP_BWD = 44
    GDN_SUMMARY = 45
    KDA_SUMMARY = 46
    GDN2_SUMMARY = 47
    GDP_SUMMARY = 48
    GDN_SUMMARY_BWD = 49
    KDA_SUMMARY_BWD = 50
    GDN2_SUMMARY_BWD = 51
    GDP_SUMMARY_BWD = 52
    MAMBA2 = 53
    MAMBA2_BWD = 54
    MAMBA2_SUMMARY = 55
    MAMBA2_SUMMARY_BWD = 56


def node_type_of(op: str, method: str | None, declared: str = "") -> NodeType:
    """The NodeType of a node of kind ``op`` built by the method ``method``: the one its spec declares
    (``node_type``: POINTWISE for every pointwise method), else the method's name in capitals (``_backward`` as
    ``_BWD``), COMPOSITE for what 1.32 has no kind for."""
    if declared:
        return NodeType[declared]
    name = (method or op).upper()
    if name.endswith("_BACKWARD"):
        name = name[: -len("_BACKWARD")] + "_BWD"
    return NodeType.__members__.get(name, NodeType.COMPOSITE)


class Node:
    _frozen: bool
    op: str
    spec: OpSpec | None
    name: str
    requested_compute_data_type: Any
    inputs: Mapping[str, Tensor]
    outputs: Mapping[str, Tensor]
    params: dict[str, Any]
    built_params: Mapping[str, Any]

    def __init__(self, op: str, name: str, params: dict[str, Any] | None = None,
                 compute_data_type: Any = data_type.NOT_SET, spec: OpSpec | None = None) -> None:
        init = object.__setattr__  # a new node is not frozen: no check per field (the passes make hundreds)
        init(self, "_frozen", False)
        init(self, "op", op)
        init(self, "spec", spec)
        init(self, "name", name)
        # what the caller asked for; params["compute_data_type"] is the inferred value (re-derived each validate)
        init(self, "requested_compute_data_type", compute_data_type)
        init(self, "inputs", {})
        init(self, "outputs", {})
        params = {**(params or {}), "compute_data_type": compute_data_type}
        init(self, "params", params)
        # the params as built, before inference resolved defaults into `params` (what graph.key() hashes)
        init(self, "built_params", MappingProxyType(dict(params)))

    def __setattr__(self, attr: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise frozen_error(f"set {attr} of node {self.name!r}")
        object.__setattr__(self, attr, value)

    def _freeze(self) -> None:
        for attr in ("inputs", "outputs", "params"):
            object.__setattr__(self, attr, MappingProxyType(dict(getattr(self, attr))))
        object.__setattr__(self, "_frozen", True)

    @property
    def node_type(self) -> NodeType:
        """1.32's ``Node.node_type``."""
        spec = self.spec
        return node_type_of(self.op, spec.method if spec is not None else None, spec.node_type if spec else "")

    @property
    def compute_data_type(self) -> Any:
        return self.params.get("compute_data_type", data_type.NOT_SET)

    def list_input(self, port: str) -> list[Tensor]:
        """The tensors of a list port (node ports ``<port>_0``, ``<port>_1``, ...), in order; [] if none."""
        out: list[Tensor] = []
        while list_port_key(port, len(out)) in self.inputs:
            out.append(self.inputs[list_port_key(port, len(out))])
        return out

    def tensors(self):
        """Every tensor the node touches, inputs first (with their ragged-offset tensors)."""
        for t in list(self.inputs.values()) + list(self.outputs.values()):
            if t.ragged_offset is not None:
                yield t.ragged_offset
            yield t

    def clone(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> Node:
        """A mutable copy of this node over other tensors (the passes rewrite copies, never the user's graph)."""
        twin = Node(self.op, self.name, dict(self.params), self.requested_compute_data_type, self.spec)
        twin.params["compute_data_type"] = self.params.get("compute_data_type", data_type.NOT_SET)
        twin.inputs = dict(inputs)
        twin.outputs = dict(outputs)
        return twin

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "op": self.op,
            "method": self.spec.method if self.spec is not None else None,
            "inputs": {port: t.uid for port, t in self.inputs.items()},
            "outputs": {port: t.uid for port, t in self.outputs.items()},
            "params": {k: (str(v) if not isinstance(v, (bool, int, float, str, type(None))) else v)
                       for k, v in self.params.items()},
        }

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op})"
