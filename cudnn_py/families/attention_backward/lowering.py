"""The attention backward's own op: ``attention_view`` (the decomposition's transposed views of K, V and the
scores) as an OPERATION_RESHAPE. ``sdpa_backward`` itself has no lowering: the decompose pass always expands it."""
from __future__ import annotations

from typing import Any

from ..._generated.names import ReshapeMode, attr, desc
from ...backend import Descriptor, versions
from ...lowering.registry import lowers


@lowers("attention_view")
def lower_view(node: Any, tensors: Any) -> list[Descriptor]:
    """The backward's transposed views: an OPERATION_RESHAPE from X to Y (same memory, Y's dims and strides)."""
    op = Descriptor(desc.OPERATION_RESHAPE_DESCRIPTOR)
    op.set(attr.OPERATION_RESHAPE_XDESC, tensors(node.inputs["X"]))
    op.set(attr.OPERATION_RESHAPE_YDESC, tensors(node.outputs["Y"]))
    if versions.available(attr.OPERATION_RESHAPE_MODE):  # 9.22+: name the view (before: always one)
        op.set(attr.OPERATION_RESHAPE_MODE, ReshapeMode.VIEW_ONLY)
    op.finalize()
    return [op]
