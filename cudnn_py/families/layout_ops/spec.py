"""Layout ops: reshape (VIEW_ONLY: the same memory seen through Y's dims and strides;
LOGICAL: the elements in row-major order, as numpy's reshape), transpose (a view with permuted dims and strides),
slice (a view: Y's strides are X's times the steps, and Y's memory is X's from the first selected element on) and
concatenate (along one axis; the output dims are inferred, where the official frontend requires them set).
"""
from __future__ import annotations

from typing import Any

from ..._generated.names import desc
from ...enums import data_type, dtype_info, reshape_mode
from ...errors import InvalidTypeError, shape_error
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, fill_or_check_dims, int_at_least, member, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register
from ...ir.tensor import int_list


def _int_list(v: Any) -> list[int]:
    return list(int_list(v, "permutation"))


def _slices(v: Any) -> tuple[slice, ...]:
    if isinstance(v, slice):
        v = [v]
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise InvalidTypeError(f"needs a list of Python slice objects, got {v!r}")
    items = tuple(v)
    for s in items:
        if not isinstance(s, slice):
            raise InvalidTypeError(f"needs a list of Python slice objects (one per leading axis), got {s!r}")
        for part in (s.start, s.stop, s.step):
            if part is not None and (isinstance(part, bool) or not hasattr(part, "__index__")):
                raise InvalidTypeError(f"slice {s!r}: start, stop and step must be ints or None")
    return items


def infer_reshape(node: Node, ctx: InferenceContext) -> None:
    op = "reshape"
    x, y = node.inputs["X"], node.outputs["Y"]
    require_dims(op, node, x)
    if not y.dim:
        raise shape_error(op, node.name, y, "dims are not set: a reshape's output dims must be given (set_dim on "
                          "the output, or out_dims=)")
    if layout.numel(y.dim) != layout.numel(x.dim):
        raise shape_error(op, node.name, y, f"dims {list(y.dim)} hold {layout.numel(y.dim)} elements, the input "
                          f"{x.name!r} dims {list(x.dim)} hold {layout.numel(x.dim)}: a reshape keeps the element "
                          "count")
    if not y.stride:  # the frontend's default: channels-last order
        y._infer_set("stride", layout.strides_from_order(y.dim, layout.nhwc_order(len(y.dim))))
    if node.params["reshape_mode"] is reshape_mode.VIEW_ONLY:
        last_y, last_x = (sum((int(d) - 1) * int(st) for d, st in zip(t.dim, t.stride)) for t in (y, x))
        if last_y > last_x:
            raise shape_error(op, node.name, y, f"dims {list(y.dim)} with strides {list(y.stride)} reach element "
                              f"{last_y} of the input's memory, which ends at element {last_x} (dims {list(x.dim)}, "
                              f"strides {list(x.stride)}): a VIEW_ONLY reshape reads X's memory through Y's strides")
    _output_type_from_input(node, ctx, x, y)
    if node.params["reshape_mode"] is reshape_mode.LOGICAL and y.data_type is not x.data_type:
        raise shape_error(op, node.name, y, f"data type {y.data_type} differs from the input's {x.data_type}: a "
                          "LOGICAL reshape keeps the data type (only VIEW_ONLY may relabel it)")


def _output_type_from_input(node: Node, ctx: InferenceContext, x: Any, y: Any) -> None:
    """The frontend's rule for the view ops: an unset output type is the input's, not the graph's intermediate
    type that fill_data_types gives a virtual tensor."""
    if x.data_type is data_type.NOT_SET:
        x._infer_set("data_type", ctx.intermediate_data_type if x.is_virtual else ctx.io_data_type)
    if y.data_type is data_type.NOT_SET:
        y._infer_set("data_type", x.data_type)
    fill_data_types(node, ctx, x)


def slice_ranges(slices: tuple[slice, ...], dims: list[int]) -> list[tuple[int, int, int]]:
    """(start, stop, step) per axis, Python's normalisation (negative indices, clamping); axes past the slices
    are taken whole."""
    out = [s.indices(int(d)) for s, d in zip(slices, dims)]
    return out + [(0, int(d), 1) for d in dims[len(slices):]]


def infer_slice(node: Node, ctx: InferenceContext) -> None:
    op = "slice"
    x, y = node.inputs["X"], node.outputs["Y"]
    require_dims(op, node, x)
    slices = node.params["slices"]
    if len(slices) > len(x.dim):
        raise shape_error(op, node.name, x, f"{len(slices)} slices for the {len(x.dim)} axes of dims {list(x.dim)}")
    for axis, s in enumerate(slices):
        if s.step is not None and s.step <= 0:
            raise shape_error(op, node.name, x, f"axis {axis}: step {s.step} is not supported: cuDNN's SLICE op and "
                              "the pointer-offset view both need a positive step")
    ranges = slice_ranges(slices, list(x.dim))
    expected = [max(0, -(-(stop - start) // step)) for start, stop, step in ranges]
    if any(d == 0 for d in expected):
        raise shape_error(op, node.name, x, f"slices {list(slices)} select no element of dims {list(x.dim)} "
                          f"(output dims would be {expected})")
    node.params["ranges"] = ranges
    fill_or_check_dims(op, node, y, expected, "the slice's")
    strides = [int(st) * step for st, (_, _, step) in zip(x.stride, ranges)]
    if not y.stride:
        y._infer_set("stride", strides)
    elif any(d > 1 and int(a) != b for d, a, b in zip(y.dim, y.stride, strides)):
        raise shape_error(op, node.name, y, f"strides {list(y.stride)} are not the view's {strides} (X's strides "
                          "times the steps): a slice's output aliases its input's memory")
    _output_type_from_input(node, ctx, x, y)
    if y.data_type is not x.data_type:
        raise shape_error(op, node.name, y, f"data type {y.data_type} differs from the input's {x.data_type}")
    if x.is_virtual or x.is_pass_by_value:
        raise shape_error(op, node.name, x, f"is {'virtual' if x.is_virtual else 'pass-by-value'}: a slice's output "
                          "is a view into its input's device memory, so the input must be a graph input (or a "
                          "non-virtual output); to slice a slice, compose the two into one")
    offset = slice_offset_elements(ranges, list(x.stride))
    if offset and dtype_info(x.data_type).bits % 8:
        raise shape_error(op, node.name, x, f"a {x.data_type} slice starting at element {offset} does not start "
                          "on a byte: sub-byte types can only be sliced from their first element")


def slice_offset_elements(ranges: list[tuple[int, int, int]], strides: list[int]) -> int:
    """How many elements into X's memory the slice's first element lies (Slice_attributes::get_offset)."""
    return sum(start * int(st) for (start, _, _), st in zip(ranges, strides))


def slice_offset_bytes(node: Node) -> int:
    """Byte offset of a slice's first element in X's memory (inference refused sub-byte offsets). On a program
    node too: legalize only prepends axes, so X's last strides are the user's."""
    x, ranges = node.inputs["X"], node.params["ranges"]
    user_strides = list(x.stride)[len(x.stride) - len(ranges):]
    return slice_offset_elements(ranges, user_strides) * dtype_info(x.data_type).bits // 8


def slice_view(node: Node) -> dict[int, tuple[int, int]]:
    """The slice's output is a view of its input: {Y's uid: (X's uid, byte offset)} (the spec's ``aliases``)."""
    return {node.outputs["Y"].uid: (node.inputs["X"].uid, slice_offset_bytes(node))}


NATIVE_SLICE = desc.OPERATION_SLICE_DESCRIPTOR  # cuDNN >= 9.22; before, a slice is its view alone


def infer_transpose(node: Node, ctx: InferenceContext) -> None:
    op = "transpose"
    x, y = node.inputs["X"], node.outputs["Y"]
    require_dims(op, node, x)
    perm = node.params["permutation"]
    if sorted(perm) != list(range(len(x.dim))):
        raise shape_error(op, node.name, x, f"permutation {perm} is not a permutation of the {len(x.dim)} axes of "
                          f"dims {list(x.dim)}")
    expected = [int(x.dim[p]) for p in perm]
    fill_or_check_dims(op, node, y, expected, f"X's {list(x.dim)} permuted by {perm}:")
    if not y.stride:
        y._infer_set("stride", [int(x.stride[p]) for p in perm])
    _output_type_from_input(node, ctx, x, y)
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
    fill_or_check_dims(op, node, y, expected, "the concatenation's")
    if not y.stride:
        y._infer_set("stride", layout.strides_from_order(
            y.dim, layout.order_preserving_format(xs[0].stride, len(y.dim))))
    node.params["rank"] = rank  # the lowering shifts the axis by the leading axes legalize adds
    index = node.params["in_place_index"]
    if index is not None and not 0 <= index < len(xs):
        raise shape_error(op, node.name, y, f"in_place_index {index} is not one of the {len(xs)} inputs")
    fill_data_types(node, ctx, xs[0])


RESHAPE = OpSpec(
    method="reshape", kind="reshape", inputs=(Port("X", "input"),), outputs=(Output("Y"),),
    infer=infer_reshape, params=(Param("reshape_mode", reshape_mode.VIEW_ONLY, convert=member(reshape_mode)),),
    # 1.32 binds reshape(input, reshape_mode); 1.23 bound reshape(input, name, reshape_mode)
    order=("input", "reshape_mode", "name"), legacy_order=("input", "name", "reshape_mode"),
    legacy_when=lambda values: isinstance(values.get("reshape_mode"), str), varargs=True, out_dims=True,
    requires=(desc.OPERATION_RESHAPE_DESCRIPTOR,),
    doc="reshape(input, reshape_mode=reshape_mode.VIEW_ONLY) -> Y; Y's dims must be set (set_dim or out_dims=). "
        "VIEW_ONLY reads X's memory through Y's dims and strides; LOGICAL (cuDNN >= 9.22) keeps the row-major "
        "element order.")

SLICE = OpSpec(
    method="slice", kind="slice", inputs=(Port("X", "input"),), outputs=(Output("Y"),),
    infer=infer_slice, params=(Param("slices", (), convert=_slices),),
    order=("input", "slices", "compute_data_type", "name"), varargs=True, out_dims=True,
    aliases=slice_view,
    view_only_without=(NATIVE_SLICE, "a graph of slices alone (before cuDNN 9.22 a slice is a view with no "
                       "operation: give it an op that reads it)"),
    doc="slice(input, slices=[]) -> Y = input[slices] (Python slices, negative indices, positive steps). Y is a "
        "view: it aliases input's memory. cuDNN >= 9.22 lowers it to the SLICE op, older ones to the view alone.")

TRANSPOSE = OpSpec(
    method="transpose", kind="transpose", inputs=(Port("X", "input"),), outputs=(Output("Y"),),
    infer=infer_transpose, params=(Param("permutation", convert=_int_list),),
    order=("input", "permutation", "compute_data_type", "name"), varargs=True, out_dims=True,
    requires=(desc.OPERATION_TRANSPOSE_DESCRIPTOR,),
    doc="transpose(input, permutation) -> Y with Y.dim[i] = X.dim[permutation[i]] (a view: strides permuted alike).")

CONCATENATE = OpSpec(
    method="concatenate", kind="concatenate", inputs=(Port("X", "inputs", is_list=True),), outputs=(Output("Y"),),
    infer=infer_concatenate, params=(Param("axis", convert=int_at_least(None)), Param("in_place_index", None,
                                                                          convert=int_at_least(None, optional=True))),
    order=("inputs", "axis", "in_place_index", "name"), varargs=True, out_dims=True,
    requires=(desc.OPERATION_CONCAT_DESCRIPTOR,),
    doc="concatenate(inputs, axis, in_place_index=None) -> Y (output dims inferred).")
register(RESHAPE, SLICE, TRANSPOSE, CONCATENATE)
