"""The documented call forms of the op builders, derived from the op specs (``spec.SPECS``) and nothing else.

One spec gives, through this module:

* ``surface_signature(spec)``: the builder's ``__signature__`` (what ``inspect.signature(pygraph.<method>)``
  shows): its first call form, annotated, as the type stub declares it (the official wrapper's
  ``(*args, **kwargs)`` surface, which the API parity check compares, is ``OpSpec.signature()``);
* ``call_forms(spec)``: the real call forms (the classic positional order, and the 1.23 order where a call may
  still use it), annotated: what the docstring, the type stub (``facade/_builder_api.pyi``) and ``docs/api.md`` show.
  For the ops whose classic surface is ``(*args, name=, compute_data_type=, **kwargs)`` (the official module
  overloads them) these are where the parameters are spelled out;
* ``builder_doc(spec)``: ``spec.doc``, the call forms and an "Arguments:" list of the ports and params.

Annotations are strings (as in a module with ``from __future__ import annotations``), written in the names the stub
imports: ``Tensor``, ``ArrayLike`` (anything with ``shape`` and ``dtype``: a framework array or a numpy scalar),
the classic enums, builtins and ``Sequence`` / ``Callable``. A tensor argument also takes a python scalar (a fused
pass-by-value scalar) or a framework array (bound data), so its annotation says so.
"""
from __future__ import annotations

import enum
import inspect
from typing import Any

from .spec import REQUIRED, OpSpec, Param, Port

TENSOR_ARG = "Tensor | float | ArrayLike"  # what a tensor port accepts (int and bool are floats to a type checker)
_P = inspect.Parameter
_BUILTIN_CONVERTERS = {bool: "bool", float: "float", int: "int", str: "str"}


def param_annotation(p: Param) -> str | None:
    """The type of a non-tensor argument, where the spec knows it: a builtin converter, an enum converter
    (``member(enum)``), a converter's return annotation, or the default's type; None where it does not."""
    ann: str | None = None
    conv = p.convert
    if conv in _BUILTIN_CONVERTERS:
        ann = _BUILTIN_CONVERTERS[conv]
    elif conv is not None and conv.__qualname__.startswith("member.") and conv.__closure__:
        ann = next((c.cell_contents.__name__ for c in conv.__closure__
                    if isinstance(c.cell_contents, type) and issubclass(c.cell_contents, enum.Enum)), None)
    elif conv is not None:
        ret = getattr(conv, "__annotations__", {}).get("return")
        if isinstance(ret, str) and ret != "Any":
            # the converters take any sequence; builtins.slice: a builder is named slice
            ann = ret.replace("list[int]", "Sequence[int]").replace("[slice,", "[builtins.slice,")
    if ann is None and p.default is not REQUIRED and p.default is not None:
        if isinstance(p.default, enum.Enum):
            ann = type(p.default).__name__
        elif type(p.default) in _BUILTIN_CONVERTERS:
            ann = _BUILTIN_CONVERTERS[type(p.default)]
    if ann is not None and p.default is None and "None" not in ann.split(" | "):
        ann += " | None"
    return ann


def port_annotation(p: Port) -> str:
    ann = f"Sequence[{TENSOR_ARG}]" if p.is_list else TENSOR_ARG
    return f"{ann} | None" if p.optional else ann


def return_annotation(spec: OpSpec) -> str:
    outs = [o for o in spec.outputs if not o.adopt]
    if len(outs) == 1 and not spec.returns_list:
        return "Tensor"
    maybe_absent = any(o.when is not None or o.given for o in outs)
    return "list[Tensor | None]" if maybe_absent else "list[Tensor]"


def arg_annotations(spec: OpSpec) -> dict[str, str]:
    """{argument: annotation} for every argument of ``spec`` whose type is known."""
    anns = {p.arg: port_annotation(p) for p in spec.inputs}
    for p in spec.params:
        ann = param_annotation(p)
        if ann is not None:
            anns[p.arg] = ann
    anns["name"] = "str"
    if spec.out_dims:
        anns["out_dims"] = "Sequence[int] | None"
    return anns


def _annotate(sig: inspect.Signature, spec: OpSpec) -> inspect.Signature:
    anns = arg_annotations(spec)
    params = [p.replace(annotation=anns[p.name]) if p.name in anns and p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)
              else p for p in sig.parameters.values()]
    return inspect.Signature(params, return_annotation=return_annotation(spec), __validate_parameters__=False)


def surface_signature(spec: OpSpec, forms: list[inspect.Signature] | None = None) -> inspect.Signature:
    """The builder's ``__signature__`` (what ``inspect.signature``, ``help()``, IPython and Jupyter show): its first
    call form (the classic positional order, the order of the official module's pybind11 signature), annotated, as
    the type stub declares it. The official Python wrapper shows ``(*args, name=, compute_data_type=, **kwargs)``
    for most builders (``OpSpec.signature()``, what the API parity check compares); the parameters are spelled out
    here instead. A default before a required positional parameter (sdpa_mxfp8's) is left out, as in the stub: a
    bound method's signature could not hold it."""
    return declarable((forms or call_forms(spec))[0])


def declarable(sig: inspect.Signature) -> inspect.Signature:
    """``sig`` as Python can declare it: an optional positional parameter before a required one loses its default
    (``format_call(stub=True)`` writes the same form)."""
    values = list(sig.parameters.values())
    last_required = max((i for i, p in enumerate(values) if p.kind is _P.POSITIONAL_OR_KEYWORD
                         and p.default is _P.empty), default=-1)
    params = [p.replace(default=_P.empty) if i < last_required and p.kind is _P.POSITIONAL_OR_KEYWORD else p
              for i, p in enumerate(values)]
    return inspect.Signature(params, return_annotation=sig.return_annotation)


def _call_signature(spec: OpSpec, order: tuple[str, ...]) -> inspect.Signature:
    # an argument the binder knows but the spec does not type (one its ``unpack`` reads) is None when not given
    defaults = {**dict.fromkeys(order, None), "out_dims": None, **spec._defaults()}
    required = {p.arg for p in spec.inputs if not p.optional} | {p.arg for p in spec.params if p.default is REQUIRED}
    for arg in required:
        defaults.pop(arg, None)
    params = [_P("self", _P.POSITIONAL_OR_KEYWORD)]
    params += [_P(arg, _P.POSITIONAL_OR_KEYWORD, default=defaults.get(arg, REQUIRED)) for arg in order]
    rest = [p.arg for p in spec.inputs] + [p.arg for p in spec.params] + ["name", "compute_data_type"]
    rest += ["out_dims"] if spec.out_dims else []
    params += [_P(arg, _P.KEYWORD_ONLY, default=defaults.get(arg, REQUIRED))
               for arg in dict.fromkeys(rest) if arg not in order]
    # the classic order may put a required argument after an optional one (layernorm's epsilon after bias): a call
    # form Python could not declare, kept as it is (``format_call(stub=True)`` writes a declarable one)
    return _annotate(inspect.Signature(params, __validate_parameters__=False), spec)


def call_forms(spec: OpSpec) -> list[inspect.Signature]:
    """The real call forms: the classic positional order, then the 1.23 order where it differs."""
    forms = [_call_signature(spec, spec.order)]
    if spec.legacy_order is not None and tuple(spec.legacy_order) != tuple(spec.order):
        forms.append(_call_signature(spec, tuple(spec.legacy_order)))
    return forms


def format_default(value: Any) -> str:
    """A default as source text (an enum member as ``enum.MEMBER``); ``...`` where it has no stable text."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if type(value) is float and value != value * 0:  # inf, nan: no literal
        return "..."
    if value is None or type(value) in (bool, int, float, str):
        return repr(value)
    if isinstance(value, (tuple, list)) and all(v is None or type(v) in (bool, int, float, str) for v in value):
        return repr(value)
    return "..."


def format_call(method: str, sig: inspect.Signature, annotated: bool = False, stub: bool = False) -> str:
    """``method(a, b, *, x=1) -> Tensor``: a signature as a line of text (no self; annotations when asked).
    ``stub``: a form Python can declare: an optional positional argument before a required one is written
    without its default."""
    parts: list[str] = []
    star = False
    values = list(sig.parameters.values())
    last_required = max((i for i, p in enumerate(values) if p.kind is _P.POSITIONAL_OR_KEYWORD
                         and p.default is _P.empty), default=-1)
    for i, p in enumerate(values):
        if p.name == "self":
            continue
        if p.kind is _P.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            star = True
            continue
        if p.kind is _P.VAR_KEYWORD:
            parts.append(f"**{p.name}")
            continue
        if p.kind is _P.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text = p.name
        if annotated and p.annotation is not _P.empty:
            text += f": {p.annotation}"
        if p.default is not _P.empty and not (stub and i < last_required):
            text += (" = " if annotated and p.annotation is not _P.empty else "=") + format_default(p.default)
        parts.append(text)
    ret = sig.return_annotation
    return f"{method}({', '.join(parts)})" + (f" -> {ret}" if ret is not inspect.Signature.empty else "")


def builder_doc(spec: OpSpec, forms: list[inspect.Signature] | None = None) -> str:
    """The builder's docstring: ``spec.doc``, the call forms (``call_forms(spec)`` unless given), and the arguments
    with their types and ports."""
    lines = [spec.doc.strip() or f"{spec.method}: the {spec.kind} op.", "", "Call forms:"]
    forms = forms or call_forms(spec)
    for i, sig in enumerate(forms):
        lines.append(f"    {format_call(spec.method, sig)}" + ("    (also accepted: the 1.23 order)" if i else ""))
    lines += ["", "Arguments:"]
    params = {p.arg: p for p in spec.params}
    ports = {p.arg: p for p in spec.inputs}
    for p in forms[0].parameters.values():
        if p.name == "self":
            continue
        ann = "" if p.annotation is _P.empty else f" ({p.annotation})"
        if p.name in ports:
            port = ports[p.name]
            what = (f"tensors, node ports {port.port}_0, {port.port}_1, ..." if port.is_list
                    else f"tensor, node port {port.port}") + (", optional" if port.optional else "")
        elif p.name in params:
            what = "required" if params[p.name].default is REQUIRED else f"default {format_default(p.default)}"
        elif p.name == "name":
            what = "the node's name; '' names it after its index"
        elif p.name == "compute_data_type":
            what = "the node's compute data type (a data_type or a framework dtype); None: the graph's"
        elif p.name == "out_dims":
            what = "the first output's dims, or None"
        else:
            what = ""
        lines.append(f"    {p.name}{ann}: {what}")
    lines += ["", f"Returns: {forms[0].return_annotation}."]
    return "\n".join(lines)
