"""One declarative spec per op.

An :class:`OpSpec` says everything the layers above need to know about an op, once:

* the classic surface: method name, positional order (and the 1.23 order where it differed), keyword names and
  defaults, whether the surface shows it as ``(*args, name=, compute_data_type=, **kwargs)``;
* its ports: tensor arguments (required or optional) and outputs (and when an output exists);
* its attributes (:class:`Param`: default, the ``node.params`` key, a converter that validates);
* shape and data-type inference (``infer``);
* the catalog features its lowering needs (``requires``: attribute / descriptor / enum names whose ``since`` is
  the minimum cuDNN version, checked against the running library);
* for a composite, ``expand``: the decomposition into primitive IR nodes (run by the decompose pass).

The builder methods of ``pygraph`` are generated from the specs (:mod:`.builders`), with the real signatures.
Each family's folder (``cudnn_py/families/<family>/``) holds its specs, its lowerings (``@lowers(kind)``) and its
float64 references (``@reference(kind)``); ``tests/test_op_families.py`` checks that every spec has both (or
declares ``decomposed``). The hooks at the end of :class:`OpSpec` are what the generic passes ask of an op.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidTypeError, InvalidValueError
from ..registry import SPEC, Registry


def list_port_key(port: str, index: int) -> str:
    """The node port of a list port's index-th tensor."""
    return f"{port}_{index}"

REQUIRED: Any = inspect.Parameter.empty  # a Param or Port without a default


@dataclass(frozen=True)
class Port:
    """A tensor argument: the IR port it lands in and the classic keyword name."""

    port: str  # IR port name, e.g. "A", "IN_0", "X"
    arg: str  # classic keyword name, e.g. "A", "input"
    optional: bool = False
    is_list: bool = False  # takes a list of tensors: node ports "<port>_0", "<port>_1", ... in order

    def ports_of(self, value: Any) -> list[tuple[str, Any]]:
        """(node port, value) pairs of a bound argument."""
        if not self.is_list:
            return [(self.port, value)]
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise InvalidTypeError(f"{self.arg} must be a list of tensors, got {type(value).__name__}")
        items = list(value)
        if not items and not self.optional:
            raise InvalidValueError(f"{self.arg} must hold at least one tensor")
        return [(list_port_key(self.port, i), v) for i, v in enumerate(items)]


@dataclass(frozen=True)
class Param:
    """A non-tensor argument and the node param it lands in."""

    arg: str  # classic keyword name, e.g. "negative_slope"
    default: Any = REQUIRED
    key: str = ""  # node.params key; "" = arg
    convert: Callable[[Any], Any] | None = None  # normalise and validate (raise TypeError / ValueError)
    keyword_only: bool = False  # not part of the positional order (an extra keyword of the classic surface)

    @property
    def param(self) -> str:
        return self.key or self.arg


@dataclass(frozen=True)
class Output:
    port: str
    when: Callable[[Mapping[str, Any]], bool] | None = None  # params -> does the output exist
    label: str = "{node}::{port}"  # the output tensor's default name (the frontend's, which a few ops vary)
    given: tuple[str, ...] = ()  # classic arguments that must all be given (not None) for the output to exist
    # the classic argument whose tensor *is* this output (SDPA's rng_dump, dBias): the caller's tensor is adopted
    # instead of a new one, and it is not part of the returned list. It implies ``given``: without the caller's
    # tensor there is nothing to adopt, so the output does not exist
    adopt: str = ""

    def __post_init__(self) -> None:
        if self.adopt and self.adopt not in self.given:
            object.__setattr__(self, "given", (*self.given, self.adopt))

    def exists(self, params: Mapping[str, Any], values: Mapping[str, Any] | None = None) -> bool:
        if self.given and (values is None or any(values.get(arg) is None for arg in self.given)):
            return False
        return self.when is None or bool(self.when(params))


@dataclass(frozen=True)
class OpSpec:
    method: str  # the classic pygraph method name
    kind: str  # the IR node kind; lowering and the reference engine dispatch on it (a family may share one)
    inputs: tuple[Port, ...]
    outputs: tuple[Output, ...]
    infer: Callable[..., None]  # infer(node, ctx): fill output dims/strides/dtypes, raise shape errors
    params: tuple[Param, ...] = ()
    fixed: Mapping[str, Any] = field(default_factory=dict)  # params every node of this spec carries (e.g. mode)
    order: tuple[str, ...] = ()  # classic positional order: tensor args, params, "name", "compute_data_type"
    legacy_order: tuple[str, ...] | None = None  # the 1.23 order (or a second overload), when a call needs it
    # decides when a positional call binds to legacy_order (default: a data type where a scalar attribute goes)
    legacy_when: Callable[[Mapping[str, Any]], bool] | None = None
    # decides from the raw call (positional args, keywords) that it is in legacy_order, before any binding
    legacy_call: Callable[[Sequence[Any], Mapping[str, Any]], bool] | None = None
    varargs: bool = False  # the classic surface shows (*args, name="", compute_data_type=None, **kwargs)
    out_dims: bool = False  # accepts out_dims= (the first output's dims)
    requires: tuple[str, ...] = ()  # catalog features the lowering needs (their `since` is the minimum version)
    min_version: int = 0  # a stricter minimum than the catalog's (a version with a known problem), or 0
    # device gates, checked when planning meets a GPU (plans/device_gates.py); deviceless validation skips them
    min_compute_capability: int = 0  # the lowest GPU architecture with engines for it (100 = SM 10.0), or 0
    min_cublaslt: int = 0  # the lowest cuBLASLt its engines need (MAJOR*10000 + MINOR*100 + PATCH), or 0
    # (node, compute capability, cuDNN version) -> why the GPU cannot run this node (e.g. FP8 attention's head
    # dims per architecture), or None; checked with the gates above, for composites too
    device_rules: Callable[[Any, int, int], str | None] | None = None
    public: bool = True  # False: an internal op that decompositions emit; no pygraph method
    lowered_rank: int = 0  # the rank its backend op needs (the legalize pass pads the graph to it), or 0
    finish: Callable[[dict[str, Any]], None] | None = None  # cross-parameter defaults / checks, in place
    expand: Callable[..., bool] | None = None  # composite: expand(node, rewriter, options) -> decomposed?
    returns_list: bool = False  # the method returns a list (None for absent outputs) even for one output
    # unpack(values) rewrites the bound call in place before ports and params are read (e.g. SDPA's dropout
    # tuple into its tensor ports); it raises for arguments that cannot be honoured
    unpack: Callable[[dict[str, Any]], None] | None = None
    doc: str = ""
    # ---- hooks: what the generic passes, lowering and planning ask of an op (none of them tests an op's name) -------
    # always decomposed by ``expand``: no lowering of its own (tests/test_op_families.py holds the spec to it)
    decomposed: bool = False
    # the classic ``NodeType`` member of its nodes ("" = the method's name in capitals, COMPOSITE if there is none)
    node_type: str = ""
    # each output element is a function of the inputs' elements at the same (broadcast) position, and of the
    # position itself where ``axis_param`` names an axis: the legalize pass may fold a long vector and merge leading
    # axes of a graph made of such ops alone
    elementwise: bool = False
    # (node) -> (param, output port) where a node param indexes an axis of that output (GEN_INDEX's axis), which the
    # legalize pass moves with the output's axes when it pads or merges them, else None
    axis_param: Callable[[Any], tuple[str, str] | None] | None = None
    # (node) -> {output uid: (input uid, byte offset)}: outputs that are views into an input's memory (a slice's);
    # the legalize pass makes them non-virtual with the alignment the offset leaves, and the executor binds each as
    # its input's pointer plus the offset (the frontend's variant-pack replacement)
    aliases: Callable[[Any], Mapping[int, tuple[int, int]]] | None = None
    # (feature, what): where the running cuDNN lacks the catalog feature its lowering emits no operation (the node is
    # its view alone), and a graph of such nodes alone is refused naming ``what``
    view_only_without: tuple[str, str] | None = None
    # (node) -> whether AUTO kept the node as one backend op with the composite to fall back to: planning lowers the
    # graph again as the composite when the one op finds no engine (sdpa's unified SDPA_FWD op)
    composite_fallback: Callable[[Any], bool] | None = None

    # ---- the classic call ------------------------------------------------------------------------------------------
    @property
    def tensor_args(self) -> tuple[str, ...]:
        return tuple(p.arg for p in self.inputs)

    def signature(self) -> inspect.Signature:
        """The signature the official module's Python wrapper shows (``(*args, name=, compute_data_type=,
        **kwargs)`` where it overloads the method): what the API parity check compares. cudnn_py's builders show
        their first call form instead (``ir/signatures.py``, ``surface_signature``)."""
        P = inspect.Parameter
        params = [P("self", P.POSITIONAL_OR_KEYWORD)]
        if self.varargs:
            params += [P("args", P.VAR_POSITIONAL), P("name", P.KEYWORD_ONLY, default=""),
                       P("compute_data_type", P.KEYWORD_ONLY, default=None)]
            if self.out_dims:
                params.append(P("out_dims", P.KEYWORD_ONLY, default=None))
            params.append(P("kwargs", P.VAR_KEYWORD))
            return inspect.Signature(params)
        defaults = self._defaults()
        for arg in self.order:
            params.append(P(arg, P.POSITIONAL_OR_KEYWORD, default=defaults.get(arg, REQUIRED)))
        for p in self.params:
            if p.keyword_only:
                params.append(P(p.arg, P.KEYWORD_ONLY, default=p.default))
        if self.out_dims:
            params.append(P("out_dims", P.KEYWORD_ONLY, default=None))
        return inspect.Signature(params)

    def _defaults(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": "", "compute_data_type": None}
        d.update({p.arg: None for p in self.inputs if p.optional})
        d.update({p.arg: p.default for p in self.params if p.default is not REQUIRED})
        return d

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Map a call onto {argument: value} (defaults filled in). Accepts the current order and, where it
        differed, the classic 1.23 positional order. Unknown keywords and missing arguments raise TypeError."""
        if self.legacy_order is not None and self.legacy_call is not None and self.legacy_call(args, kwargs):
            values = self._bind(self.legacy_order, args, kwargs)
        else:
            values = self._bind(self.order, args, kwargs)
            looks_legacy = self.legacy_when if self.legacy_when is not None else self._looks_legacy
            if self.legacy_order is not None and len(args) > len(self.inputs) and looks_legacy(values):
                values = self._bind(self.legacy_order, args, kwargs)
        missing = [p.arg for p in self.inputs if not p.optional and values.get(p.arg) is None]
        missing += [p.arg for p in self.params if p.default is REQUIRED and values.get(p.arg) is None]
        if missing:
            raise InvalidTypeError(f"{self.method}() missing required arguments {missing}")
        if self.unpack is not None:
            self.unpack(values)
        return values

    def _bind(self, order: Sequence[str], args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        if len(args) > len(order):
            raise InvalidTypeError(f"{self.method}() takes at most {len(order)} positional arguments "
                            f"({', '.join(order)}), got {len(args)}")
        known = set(order) | {p.arg for p in self.params} | {"name", "compute_data_type"}
        if self.out_dims:
            known.add("out_dims")
        values = self._defaults()
        values.update(zip(order, args))
        for key, value in kwargs.items():
            if key not in known:
                raise InvalidTypeError(f"{self.method}() got an unexpected keyword argument {key!r}; it takes "
                                f"{', '.join(sorted(known))}")
            if key in order[: len(args)]:
                raise InvalidTypeError(f"{self.method}() got multiple values for argument {key!r}")
            values[key] = value
        return values

    def _looks_legacy(self, values: Mapping[str, Any]) -> bool:
        """A positional call in the 1.23 order puts a data type where 1.32 has a scalar attribute, or a
        non-string where 1.32 has the name."""
        name = values.get("name", "")
        attrs = [values.get(p.arg) for p in self.params]
        return not isinstance(name, str) or any(_is_dtype_like(v) for v in attrs)

    def node_params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The node params for bound call values: fixed params, then each Param converted."""
        params: dict[str, Any] = dict(self.fixed)
        for p in self.params:
            value = values.get(p.arg, p.default)
            if p.convert is not None:
                try:
                    value = p.convert(value)
                except (TypeError, ValueError) as e:
                    raise type(e)(f"{self.method}(): argument {p.arg!r}: {e}") from None
            params[p.param] = value
        if self.finish is not None:
            self.finish(params)
        return params

    def output_ports(self, params: Mapping[str, Any], values: Mapping[str, Any] | None = None
                     ) -> tuple[str | None, ...]:
        """Each declared output's port, or None where it does not exist for these params and call values."""
        return tuple(o.port if o.exists(params, values) else None for o in self.outputs)

    def adopted_output(self, port: str) -> str:
        """The classic argument an output adopts, or ""."""
        return next((o.adopt for o in self.outputs if o.port == port), "")

    def output_label(self, port: str, node_name: str) -> str:
        label = next(o.label for o in self.outputs if o.port == port)
        return label.format(node=node_name, port=port)


def _is_dtype_like(v: Any) -> bool:
    from ..enums import data_type

    return isinstance(v, data_type) or type(v).__module__.startswith("torch")


# ---- the registry ---------------------------------------------------------------------------------------------------
# method name -> spec, in registration order; the families' spec modules fill it (cudnn_py/registry.py)
SPECS: Registry[OpSpec] = Registry(SPEC, "op spec")


def register(*specs: OpSpec) -> None:
    for spec in specs:
        SPECS.add(spec.method, spec)


def specs_of_kind(kind: str) -> list[OpSpec]:
    return [s for s in SPECS.values() if s.kind == kind]


def kinds() -> list[str]:
    return list(dict.fromkeys(s.kind for s in SPECS.values()))
