"""The construction half of the IR graph: tensor creation, argument conversion, and one builder method per op
spec (``spec.SPECS``), generated with the spec's classic signature.

Op arguments may be graph tensors, python / numpy scalars (fused pass-by-value scalars) or framework arrays
(bound data: `graph._data_bindings[uid]` feeds them to execute). A classic 1.23 positional call (compute_data_type
before name) is recognised and bound in its own order (``OpSpec.bind``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..enums import data_type, from_any_dtype, scalar_type
from ..errors import InvalidTypeError, InvalidValueError, NotImplementedOptionError
from . import layout
from .node import Node
from .signatures import builder_doc, call_forms, surface_signature
from .spec import SPECS, OpSpec
from .tensor import Tensor, checked_uid, int_list

# module-level aliases: some methods have parameters named like these enums (classic keyword names)
_NOT_SET = data_type.NOT_SET
_COMPILE_TIME_CONST = scalar_type.COMPILE_TIME_CONST


class BuilderMixin:
    """The construction half of the IR graph. It uses the graph's uid registry (_register, _check_mutable,
    _invalidate) and its _nodes / _data_bindings / _bound_ids."""

    _nodes: list[Node]
    _data_bindings: dict[int, Any]  # uid -> framework tensor given directly to an op
    _bound_ids: dict[int, Tensor]  # id(framework object) -> its tensor

    if TYPE_CHECKING:  # provided by Graph
        def _register(self, t: Tensor, uid: int | None = None) -> Tensor: ...
        def _check_mutable(self, what: str) -> None: ...
        def _invalidate(self) -> None: ...

    # ---- tensor creation --------------------------------------------------------------------------------------------
    def tensor(self, dim: Sequence[int], stride: Sequence[int] | None = None, data_type: Any = None,
               is_virtual: bool = False, is_pass_by_value: bool = False, ragged_offset: Tensor | None = None,
               reordering_type: Any = None, name: str = "", uid: int | None = None,
               ragged_offset_multiplier: int = 1, alignment_value: int = 1, **kwargs: Any) -> Tensor:
        """A graph input (or a user-declared virtual tensor). `stride` defaults to row-major; `uid` -1/None = auto.
        Extra keywords: alignment (byte alignment, default 16), vector_count, vector_dimension,
        is_compile_time_constant, pass_by_value. `alignment_value` (1.32) other than 1 is refused (not yet
        implemented)."""
        self._check_mutable("create a tensor")
        if alignment_value != 1:
            raise NotImplementedOptionError("tensor(alignment_value=...) is not implemented yet; use alignment= "
                                            "(the tensor's byte alignment)")
        allowed = {"alignment", "vector_count", "vector_dimension", "is_compile_time_constant", "pass_by_value"}
        unknown = set(kwargs) - allowed
        if unknown:
            raise InvalidTypeError(f"tensor() got unexpected keyword arguments {sorted(unknown)}")
        chosen = None if uid is None else checked_uid(uid, low=-1)  # ints only: "5", 5.7, True refused (TypeError)
        dt = from_any_dtype(data_type)
        user = ["dim"] + (["stride"] if stride is not None else []) + (["data_type"] if dt is not _NOT_SET else [])
        dims = list(int_list(dim, "dim"))
        strides = stride if stride is not None else layout.row_major_strides(dims)
        t = Tensor(_user=tuple(user), name=name, dim=dims, stride=strides,
                   data_type=dt, is_virtual=is_virtual, is_pass_by_value=is_pass_by_value,
                   ragged_offset=self._adopt(ragged_offset) if ragged_offset is not None else None,
                   reordering_type=reordering_type, ragged_offset_multiplier=ragged_offset_multiplier, **kwargs)
        return self._register(t, None if chosen is None or chosen == -1 else chosen)

    def tensor_like(self, template: Any, name: str = "", is_virtual: bool = False) -> Tensor:
        """Copy a graph tensor's attributes (not its uid or name), or describe any array / DLPack object:
        dims, element strides and dtype from the object; a CPU object becomes pass-by-value (classic rule)."""
        self._check_mutable("create a tensor")
        if isinstance(template, Tensor):
            copied = {k: getattr(template, k) for k in ("dim", "stride", "data_type", "is_pass_by_value",
                                                         "pass_by_value", "is_compile_time_constant", "ragged_offset",
                                                         "ragged_offset_multiplier", "reordering_type", "alignment",
                                                         "vector_count", "vector_dimension")}
            user = tuple(a for a in ("dim", "stride", "data_type") if template.is_user_set(a))
            return self._register(Tensor(_user=user, name=name, is_virtual=is_virtual, **copied))
        dims, strides, dt, on_cpu = _describe(template)
        return self._register(Tensor(_user=("dim", "stride", "data_type"), name=name, dim=dims, stride=strides,
                                     data_type=dt, is_virtual=is_virtual, is_pass_by_value=on_cpu))

    def tensor_scalar(self, value: Any, scalar_type: Any, name: str = "") -> Tensor:
        """A pass-by-value scalar carrying `value`; COMPILE_TIME_CONST bakes it into the plan (9.22+)."""
        self._check_mutable("create a tensor")
        t = self._fused_scalar(value, name)
        t._raw_set("is_compile_time_constant", scalar_type is _COMPILE_TIME_CONST)
        return t

    def _fused_scalar(self, value: Any, name: str) -> Tensor:
        dt, host = _scalar_type_of(value)
        return self._register(Tensor(_user=("data_type",), name=name, dim=[1], stride=[1], data_type=dt,
                                     is_pass_by_value=True, pass_by_value=host))

    def _adopt(self, t: Tensor) -> Tensor:
        """A tensor used by this graph: ours as is; a detached `cudnn.tensor()` joins the graph."""
        owner = t.owner
        if owner is self:
            return t
        if owner is not None:
            raise InvalidValueError(f"tensor {t.name!r} (uid {t.uid}) belongs to another graph")
        self._check_mutable("add a tensor")
        return self._register(t, t.uid if t.uid_assigned else None)

    def _as_input(self, value: Any, label: str) -> Tensor:
        """Anything an op accepts as a tensor argument: graph tensors, python/numpy scalars (fused pass-by-value
        scalars) and framework arrays (bound data: the array is fed to execute automatically)."""
        if isinstance(value, Tensor):
            t = self._adopt(value)
            if not t.name:
                t._raw_set("name", label)  # frontend rule: unnamed inputs take "<node>::<port>"
            return t
        if _is_scalar(value):
            return self._fused_scalar(value, label)
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            known = self._bound_ids.get(id(value))
            if known is not None and self._data_bindings.get(known.uid) is value:
                return known
            dims, strides, dt, on_cpu = _describe(value)
            if not dims:  # 0-d array: a one-element tensor
                dims, strides = [1], [1]
            numel = 1
            for d in dims:
                numel *= d
            # a CPU array is data for a python engine; only a one-element CPU array is a by-value scalar
            t = self._register(Tensor(_user=("dim", "stride", "data_type"), name=label, dim=dims, stride=strides,
                                      data_type=dt, is_pass_by_value=on_cpu and numel == 1))
            self._data_bindings[t.uid] = value
            self._bound_ids[id(value)] = t
            return t
        raise InvalidTypeError(f"{label}: cannot use a {type(value).__name__} as a graph tensor")

    # ---- op builders -------------------------------------------------------------------------------------------------
    def _build_op(self, spec: OpSpec, args: tuple, kwargs: dict[str, Any]) -> Tensor | list[Tensor | None]:
        """Bind a classic call to ``spec``, add its node, return its output(s)."""
        values = spec.bind(args, kwargs)
        self._check_mutable(f"add a {spec.method} op")
        name = values["name"]
        if not isinstance(name, str):
            raise InvalidTypeError(f"{spec.method}(): name must be a str, got {name!r}")
        params = spec.node_params(values)
        # frontend rule: an unnamed node is named after its index
        node = Node(spec.kind, name or str(len(self._nodes)), params, from_any_dtype(values["compute_data_type"]),
                    spec)
        node.inputs = {port: self._as_input(v, f"{node.name}::{port}")
                       for p in spec.inputs if values.get(p.arg) is not None for port, v in p.ports_of(values[p.arg])}
        ports = spec.output_ports(params, values)
        outs: list[Tensor | None] = [
            self._output_tensor(spec, port, node, values) if port is not None else None for port in ports]
        node.outputs = {port: t for port, t in zip(ports, outs) if port is not None and t is not None}
        outs = [t for o, t in zip(spec.outputs, outs) if not o.adopt]  # adopted outputs are the caller's already
        self._nodes.append(node)
        self._invalidate()
        out_dims = values.get("out_dims")
        if out_dims is not None and outs and outs[0] is not None:
            outs[0].set_dim(out_dims)
        if len(outs) == 1 and not spec.returns_list:
            return outs[0]  # type: ignore[return-value]
        return outs

    def _output_tensor(self, spec: OpSpec, port: str, node: Node, values: dict[str, Any]) -> Tensor:
        """A new virtual output tensor, or the caller's tensor for an output that adopts an argument."""
        arg = spec.adopted_output(port)
        if not arg:
            return self._register(Tensor(name=spec.output_label(port, node.name), is_virtual=True))
        given = values[arg]
        if not isinstance(given, Tensor):
            raise InvalidTypeError(f"{spec.method}(): {arg} must be a graph tensor, got {type(given).__name__}")
        return self._adopt(given)


def _make_builder(spec: OpSpec):
    def builder(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._build_op(spec, args, kwargs)

    builder.__name__ = spec.method
    builder.__qualname__ = f"pygraph.{spec.method}"
    forms = call_forms(spec)
    builder.__signature__ = surface_signature(spec, forms)  # type: ignore[attr-defined]
    builder.__doc__ = builder_doc(spec, forms)
    return builder


class MadeOnFirstRead:
    """A class attribute standing for a method not made yet: its first read makes it (:meth:`method`) and puts the
    plain function on ``owner`` under ``name`` in its place, so every later read is an ordinary method's. For
    methods whose making costs import time (the builders here, the facade's mirrored methods in
    ``facade/mirror.py``)."""

    __slots__ = ()
    owner: type
    name: str

    def method(self) -> Any:
        raise NotImplementedError

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        method = self.method()
        setattr(self.owner, self.name, method)  # from now on a plain method of the class
        return method if obj is None else method.__get__(obj, owner)


class _LazyBuilder(MadeOnFirstRead):
    """A builder method not made yet: its signature and docstring (``surface_signature``, ``builder_doc``) cost
    about 0.2 ms an op, so each is made on its first read, not for every op when the IR is imported."""

    __slots__ = ("spec", "owner", "name")

    def __init__(self, spec: OpSpec, owner: type) -> None:
        self.spec, self.owner, self.name = spec, owner, spec.method

    def method(self) -> Any:
        return _make_builder(self.spec)


def install_builders(cls: type) -> None:
    """Give ``cls`` one method per registered op spec (done once, when the op families are imported; each method
    is made on its first read)."""
    for spec in SPECS.values():
        if spec.public:
            setattr(cls, spec.method, _LazyBuilder(spec, cls))


# ---- helpers ---------------------------------------------------------------------------------------------------------
def _is_scalar(value: Any) -> bool:
    if isinstance(value, (bool, int, float)):
        return True
    # numpy scalars (np.float16(1)) have a dtype and shape () but, unlike 0-d arrays, no __dlpack__
    return hasattr(value, "dtype") and getattr(value, "shape", None) == () and not hasattr(value, "__dlpack__")


def _scalar_type_of(value: Any) -> tuple:
    """(data_type, python value) of a fused scalar: float -> FLOAT, int -> INT32 (INT64 if it does not fit),
    numpy scalars keep their dtype."""
    if isinstance(value, float):
        return data_type.FLOAT, value
    if isinstance(value, int):  # bool included
        return (data_type.INT32 if -2**31 <= value < 2**31 else data_type.INT64), int(value)
    try:
        return from_any_dtype(value.dtype), value.item()
    except (TypeError, AttributeError):
        raise InvalidTypeError(f"cannot use {value!r} as a scalar") from None


def _describe(obj: Any) -> tuple:
    """(dims, element strides, data_type, on_cpu) of an array or DLPack object, without importing frameworks."""
    dims = [int(d) for d in obj.shape]
    strides = None
    if callable(getattr(obj, "stride", None)):  # torch: element strides
        strides = [int(s) for s in obj.stride()]
    elif getattr(obj, "strides", None) is not None and getattr(obj, "itemsize", None):  # numpy / cupy: bytes
        strides = [int(s) // int(obj.itemsize) for s in obj.strides]
    if strides is None or len(strides) != len(dims):
        strides = layout.row_major_strides(dims)
    try:
        dt = from_any_dtype(obj.dtype)
    except TypeError:
        dt = data_type.NOT_SET  # classic: DLPack dtypes it does not know become NOT_SET
    return dims, strides, dt, _on_cpu(obj)


def _on_cpu(obj: Any) -> bool:
    device = getattr(obj, "__dlpack_device__", None)
    if callable(device):
        try:
            return int(device()[0]) == 1  # kDLCPU
        except Exception:
            pass
    dev = getattr(obj, "device", None)
    kind = getattr(dev, "type", None)
    if kind is not None:
        return bool(kind == "cpu")
    return type(obj).__module__ == "numpy"
