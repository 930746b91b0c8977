"""Lower a whole program: every node's operations, then the finalized OPERATIONGRAPH.

The handle is optional. cuDNN >= 9.8 finalizes an operation graph without one - that is what makes deviceless
validation possible - but heuristics on such a graph see no device (smVersion 0) and return no configs (seen on
cuDNN 9.19 / H200: mode A gives 0 configs without a handle, 5 with one). So planning re-finalizes the graph with
the handle; the tensor and operation descriptors are reused.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import frontend_log as _fe
from .._generated.names import attr, desc
from ..backend import Descriptor, versions
from ..errors import CudnnError, InvalidValueError, not_supported
from .registry import LOWERINGS
from .tensors import TensorTable

MAX_OPGRAPH_OPS = 50
OVERRIDE_SHAPE_MIN_VERSION = 92100  # the frontend's runtime gate ("requires cudnn 9.21.0")


@dataclass
class LoweredGraph:
    tensors: TensorTable
    operations: list[Descriptor] = field(default_factory=list)
    op_names: list[str] = field(default_factory=list)  # the IR node each operation came from
    operation_graph: Descriptor | None = None
    handle: int | None = None  # the handle the operation graph was finalized with, if any
    dynamic_shapes: bool = False
    override_shapes: bool = False  # shapes and strides given per execute (OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED)

    def engine_count(self) -> int:
        assert self.operation_graph is not None
        return int(self.operation_graph.get(attr.OPERATIONGRAPH_ENGINE_GLOBAL_COUNT))

    def descriptors(self) -> list[Descriptor]:
        """Every descriptor of the lowered graph: tensors, operations, the operation graph."""
        out = list(self.tensors.by_uid.values()) + list(self.operations)
        return out + ([self.operation_graph] if self.operation_graph is not None else [])


def check_gates(node: Any) -> None:
    """The catalog features the node's spec needs, against the running cuDNN (FeatureVersionError if missing)."""
    spec = node.spec
    if spec is None:
        return
    for feature in spec.requires:
        versions.require(feature, what=f"{spec.method}() (node {node.name!r})", at_least=spec.min_version)


def lower_program(program: Any, alignments: dict[int, int] | None = None, handle: int | None = None,
                  dynamic_shapes: bool = False, override_shapes: bool = False) -> LoweredGraph:
    table = TensorTable(alignments)
    lowered = LoweredGraph(tensors=table, dynamic_shapes=dynamic_shapes, override_shapes=override_shapes)
    if override_shapes:  # before any descriptor: a cuDNN without the attribute refuses the graph as a whole
        versions.require(attr.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED,
                         what="pygraph(is_override_shape_enabled=True)", at_least=OVERRIDE_SHAPE_MIN_VERSION)
    for node in program.nodes:
        fn = LOWERINGS.get(node.op)
        if fn is None:
            # the official module's GRAPH_NOT_SUPPORTED at validate(): cuDNN has no operation for it
            raise not_supported(node.op, node.name, "no backend lowering for this op kind (cuDNN has no operation "
                                                    "for it; a python engine such as ReferenceEngine may run it)")
        check_gates(node)
        try:
            ops = fn(node, table)
        except CudnnError as e:
            e.args = (f"lowering {node.op} node {node.name!r}: {e.args[0]}",)
            raise
        lowered.operations.extend(ops)
        lowered.op_names.extend([node.name] * len(ops))
    if not lowered.operations:
        # only ops that lower to nothing on this cuDNN (their spec's view_only_without: slices before 9.22)
        for feature, what in dict.fromkeys(n.spec.view_only_without for n in program.nodes
                                           if n.spec is not None and n.spec.view_only_without):
            versions.require(feature, what=what)
        raise InvalidValueError("the graph has no operations")
    if len(lowered.operations) > MAX_OPGRAPH_OPS:
        raise InvalidValueError(f"the graph lowers to {len(lowered.operations)} operations; cuDNN takes at most "
                         f"{MAX_OPGRAPH_OPS}")
    finalize_operation_graph(lowered, handle)
    return lowered


def finalize_operation_graph(lowered: LoweredGraph, handle: int | None) -> Descriptor:
    """(Re)build the OPERATIONGRAPH over the lowered operations, with ``handle`` when given."""
    og = Descriptor(desc.OPERATIONGRAPH_DESCRIPTOR)
    og.set(attr.OPERATIONGRAPH_OPS, lowered.operations)
    if handle:
        og.set(attr.OPERATIONGRAPH_HANDLE, int(handle))
    if lowered.dynamic_shapes:
        og.set(attr.OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED, True)
    if lowered.override_shapes:
        og.set(attr.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED, True)
    try:
        og.finalize()
    except CudnnError as e:
        e.args = (f"operation graph of {', '.join(dict.fromkeys(lowered.op_names))}: {e.args[0]}",)
        raise
    if lowered.operation_graph is not None:
        lowered.operation_graph.destroy()
    lowered.operation_graph = og
    lowered.handle = int(handle) if handle else None
    if _fe.ENABLED:
        _fe.operation_graph(lowered.op_names, lowered.handle)
    return og
