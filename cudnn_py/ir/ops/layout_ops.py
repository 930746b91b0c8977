"""Layout ops (``node_lowering.md`` §7): transpose (a view with permuted dims and strides) and concatenate
(along one axis; the output dims are inferred, where the official frontend requires them set).

reshape and slice are not here yet: slice's output aliases its input's memory (a variant-pack replacement), and
reshape's VIEW_ONLY semantics are to be pinned down against the GPU first.
"""
from __future__ import annotations

import operator
from typing import Any

from ...errors import shape_error
from .. import layout
from ..node import Node
from ..spec import OpSpec, Output, Param, Port, register
from ..tensor import int_list
from .common import InferenceContext, fill_data_types, require_dims


def _int_list(v: Any) -> list[int]:
    return list(int_list(v, "permutation"))


def _index(v: Any) -> int:
    if isinstance(v, bool):
        raise TypeError(f"needs an int, got {v!r}")
    return operator.index(v)


def _optional_index(v: Any) -> int | None:
    return None if v is None else _index(v)


def infer_transpose(node: Node, ctx: InferenceContext) -> None:
    op = "transpose"
    x, y = node.inputs["X"], node.outputs["Y"]
    require_dims(op, node, x)
    perm = node.params["permutation"]
    if sorted(perm) != list(range(len(x.dim))):
        raise shape_error(op, node.name, x, f"permutation {perm} is not a permutation of the {len(x.dim)} axes of "
                          f"dims {list(x.dim)}")
    expected = [int(x.dim[p]) for p in perm]
    if not y.dim:
        y._infer_set("dim", expected)
    elif list(y.dim) != expected:
        raise shape_error(op, node.name, y, f"dims {list(y.dim)} are not X's {list(x.dim)} permuted by {perm}")
    if not y.stride:
        y._infer_set("stride", [int(x.stride[p]) for p in perm])
    fill_data_types(node, ctx, x)
    if y.data_type is not x.data_type:
        raise shape_error(op, node.name, y, f"data type {y.data_type} differs from the input's {x.data_type}")


def infer_concatenate(node: Node, ctx: InferenceContext) -> None:
    op = "concatenate"
    xs = node.list_input("X")
    y = node.outputs["Y"]
    for t in xs:
        require_dims(op, node, t)
    rank = len(xs[0].dim)
    axis = node.params["axis"]
    if not 0 <= axis < rank:
        raise shape_error(op, node.name, xs[0], f"axis {axis} is outside [0, {rank - 1}]")
    for t in xs[1:]:
        if len(t.dim) != rank or any(int(a) != int(b) for i, (a, b) in enumerate(zip(t.dim, xs[0].dim))
                                     if i != axis):
            raise shape_error(op, node.name, t, f"dims {list(t.dim)} differ from {list(xs[0].dim)} outside axis "
                              f"{axis}")
    expected = list(xs[0].dim)
    expected[axis] = sum(int(t.dim[axis]) for t in xs)
    if not y.dim:
        y._infer_set("dim", expected)
    elif list(y.dim) != expected:
        raise shape_error(op, node.name, y, f"dims {list(y.dim)} are not the concatenation's {expected}")
    if not y.stride:
        y._infer_set("stride", layout.strides_from_order(
            y.dim, layout.order_preserving_format(xs[0].stride, len(y.dim))))
    index = node.params["in_place_index"]
    if index is not None and not 0 <= index < len(xs):
        raise shape_error(op, node.name, y, f"in_place_index {index} is not one of the {len(xs)} inputs")
    fill_data_types(node, ctx, xs[0])


TRANSPOSE = OpSpec(
    method="transpose", kind="transpose", inputs=(Port("X", "input"),), outputs=(Output("Y"),),
    infer=infer_transpose, params=(Param("permutation", convert=_int_list),),
    order=("input", "permutation", "compute_data_type", "name"), varargs=True, out_dims=True,
    requires=("CUDNN_BACKEND_OPERATION_TRANSPOSE_DESCRIPTOR",),
    doc="transpose(input, permutation) -> Y with Y.dim[i] = X.dim[permutation[i]] (a view: strides permuted alike).")

CONCATENATE = OpSpec(
    method="concatenate", kind="concatenate", inputs=(Port("X", "inputs", is_list=True),), outputs=(Output("Y"),),
    infer=infer_concatenate, params=(Param("axis", convert=_index), Param("in_place_index", None,
                                                                          convert=_optional_index)),
    order=("inputs", "axis", "in_place_index", "name"), varargs=True, out_dims=True,
    requires=("CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR",),
    doc="concatenate(inputs, axis, in_place_index=None) -> Y (output dims inferred).")
register(TRANSPOSE, CONCATENATE)
