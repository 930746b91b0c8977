"""Convolution fprop / dgrad / wgrad.

Each takes the classic two overloads: ``padding`` (both sides), or ``pre_padding`` + ``post_padding``; then
``stride``, ``dilation``, ``convolution_mode`` (default CROSS_CORRELATION). A positional call whose fifth argument
is a list binds to the second overload, as pybind11's overload resolution does. Tensors are N, C, spatial... (the
layout is given by the strides: NHWC / NDHWC or NCHW); grouped and depthwise convolutions through the dims
(X's C a multiple of W's C).

* fprop: Y = conv(X, W); Y's dims are inferred (``Y[d] = 1 + (X[d] + pre + post - dil * (W[d] - 1) - 1) // stride``);
* dgrad: DX = conv_transpose(DY, W); DX's dims must be set (``out_dims=`` or ``set_dim``): they are ambiguous;
* wgrad: DW = conv_weight_grad(X, DY); DW's dims must be set (the kernel size is not implied).
``validate()`` checks what the official frontend lets through: channels of X and W that do not fit together,
output dims that do not match the formula.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._generated.names import desc
from ...enums import convolution_mode
from ...errors import InvalidTypeError, InvalidValueError, shape_error
from ...ir import layout
from ...ir.inference import InferenceContext, fill_data_types, require_dims
from ...ir.node import Node
from ...ir.spec import OpSpec, Output, Param, Port, register
from ...ir.tensor import int_list


def _ints(v: Any) -> list[int] | None:
    return None if v is None else list(int_list(v, "a padding, stride or dilation"))


def _mode(v: Any) -> Any:
    if v is None:
        return convolution_mode.CROSS_CORRELATION
    if not isinstance(v, convolution_mode):
        raise InvalidTypeError(f"needs a convolution_mode member, got {v!r}")
    return v


def _finish(params: dict[str, Any]) -> None:
    """Resolve the two padding overloads; every list non-empty and of one length (the spatial dims)."""
    pad, pre, post = params.pop("padding"), params["pre_padding"], params["post_padding"]
    if pad is not None and (pre is not None or post is not None):
        raise InvalidValueError("give padding, or pre_padding and post_padding, not both")
    if pad is not None:
        pre, post = list(pad), list(pad)
    params["pre_padding"], params["post_padding"] = pre, post
    lists = {k: params[k] for k in ("pre_padding", "post_padding", "stride", "dilation")}
    empty = [k for k, v in lists.items() if not v]
    if empty:
        raise InvalidValueError(f"{', '.join(empty)} must be given (a list with one value per spatial dimension)")
    lengths = {k: len(v) for k, v in lists.items()}
    if len(set(lengths.values())) != 1:
        raise InvalidValueError(f"padding, stride and dilation need one value per spatial dimension, got {lengths}")
    if any(s <= 0 for s in params["stride"]) or any(d <= 0 for d in params["dilation"]):
        raise InvalidValueError(f"stride and dilation must be positive, got {params['stride']}, {params['dilation']}")
    if any(p < 0 for p in pre + post):
        raise InvalidValueError(f"paddings must be >= 0, got {pre}, {post}")


def _spatial(node: Node) -> int:
    return len(node.params["stride"])


def _check_image_and_filter(op: str, node: Node, image: Any, filt: Any, image_channels_port: str) -> int:
    """X (or DY's counterpart) and W agree: rank, spatial dims, channels (groups). Returns the group count."""
    s = _spatial(node)
    for t in (image, filt):
        require_dims(op, node, t)
        if len(t.dim) != s + 2:
            raise shape_error(op, node.name, t, f"needs rank {s + 2} (N, C and {s} spatial dims for {s} "
                              f"paddings/strides), got dims {list(t.dim)}")
    c, wc = int(image.dim[1]), int(filt.dim[1])
    if c % wc:
        raise shape_error(op, node.name, filt, f"input channels {wc} do not divide the {image_channels_port}'s "
                          f"channels {c} (dims {list(image.dim)} and {list(filt.dim)})")
    groups = c // wc
    if int(filt.dim[0]) % groups:
        raise shape_error(op, node.name, filt, f"{filt.dim[0]} output channels are not a multiple of the "
                          f"{groups} groups that {c} / {wc} channels make")
    return groups


def conv_output_dims(x: Any, w: Any, p: Mapping[str, Any]) -> list[int]:
    dims = [int(x.dim[0]), int(w.dim[0])]
    for i, (pre, post, st, dil) in enumerate(zip(p["pre_padding"], p["post_padding"], p["stride"], p["dilation"])):
        dims.append(1 + (int(x.dim[i + 2]) + pre + post - dil * (int(w.dim[i + 2]) - 1) - 1) // st)
    return dims


def _set_output(op: str, node: Node, out: Any, expected: list[int] | None, what: str) -> None:
    if not out.dim:
        if expected is None:
            raise shape_error(op, node.name, out, f"{what} dims cannot be inferred (output dimension inferencing is "
                              "not possible): set them with out_dims= or set_dim")
        out._infer_set("dim", expected)
    elif expected is not None and list(out.dim) != expected:
        raise shape_error(op, node.name, out, f"dims {list(out.dim)} do not match the convolution's {expected}")
    if any(d <= 0 for d in out.dim):
        raise shape_error(op, node.name, out, f"the convolution leaves no output (dims {list(out.dim)})")
    if not out.stride:
        out._infer_set("stride", layout.nhwc_strides(out.dim))  # the frontend's default: channels-last


def _check_dy(op: str, node: Node, dy: Any, image: Any, filt: Any, image_name: str, filt_name: str) -> None:
    """DY of a backward convolution must be the fprop output of the image and the filter."""
    expected = conv_output_dims(image, filt, node.params)
    if list(dy.dim) != expected:
        raise shape_error(op, node.name, dy, f"dims {list(dy.dim)} are not the fprop output {expected} of "
                          f"{image_name} {list(image.dim)} and {filt_name} {list(filt.dim)}")


def infer_fprop(node: Node, ctx: InferenceContext) -> None:
    op = "conv_fprop"
    x, w, y = node.inputs["X"], node.inputs["W"], node.outputs["Y"]
    _check_image_and_filter(op, node, x, w, "image")
    _set_output(op, node, y, conv_output_dims(x, w, node.params), "Y")
    fill_data_types(node, ctx, x)


def infer_dgrad(node: Node, ctx: InferenceContext) -> None:
    op = "conv_dgrad"
    dy, w, dx = node.inputs["DY"], node.inputs["W"], node.outputs["DX"]
    _set_output(op, node, dx, None, "DX")
    _check_image_and_filter(op, node, dx, w, "DX")
    _check_dy(op, node, dy, dx, w, "DX", "W")
    fill_data_types(node, ctx, dy)


def infer_wgrad(node: Node, ctx: InferenceContext) -> None:
    op = "conv_wgrad"
    x, dy, dw = node.inputs["X"], node.inputs["DY"], node.outputs["DW"]
    _set_output(op, node, dw, None, "DW")
    _check_image_and_filter(op, node, x, dw, "image")
    _check_dy(op, node, dy, x, dw, "X", "DW")
    fill_data_types(node, ctx, x)


_PARAMS = (Param("padding", None, convert=_ints), Param("pre_padding", None, convert=_ints),
           Param("post_padding", None, convert=_ints), Param("stride", None, convert=_ints),
           Param("dilation", None, convert=_ints), Param("convolution_mode", None, convert=_mode))
_TAIL = ("stride", "dilation", "convolution_mode", "compute_data_type", "name")


def _second_overload(values: Mapping[str, Any]) -> bool:
    """(x, w, pre, post, stride, dilation, ...): the first overload would get a list as its convolution_mode."""
    return isinstance(values.get("convolution_mode"), (list, tuple))


def _conv(method: str, kind: str, ports: tuple[Port, Port], out: str, infer: Any, requires: str) -> OpSpec:
    args = tuple(p.arg for p in ports)
    return OpSpec(
        method=method, kind=kind, inputs=ports, outputs=(Output(out),), infer=infer, params=_PARAMS,
        order=args + ("padding",) + _TAIL, legacy_order=args + ("pre_padding", "post_padding") + _TAIL,
        legacy_when=_second_overload, varargs=True, out_dims=True, finish=_finish,
        requires=(desc.CONVOLUTION_DESCRIPTOR, requires), doc=f"{method}({', '.join(args)}) -> {out}.")


CONV_FPROP = _conv("conv_fprop", "conv_fprop", (Port("X", "image"), Port("W", "weight")), "Y", infer_fprop,
                   desc.OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)
CONV_DGRAD = _conv("conv_dgrad", "conv_dgrad", (Port("DY", "loss"), Port("W", "filter")), "DX", infer_dgrad,
                   desc.OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR)
CONV_WGRAD = _conv("conv_wgrad", "conv_wgrad", (Port("X", "image"), Port("DY", "loss")), "DW", infer_wgrad,
                   desc.OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR)
register(CONV_FPROP, CONV_DGRAD, CONV_WGRAD)
