"""Op builders for `pygraph`: tensor creation, argument conversion, matmul, reduction, and the pointwise methods
generated from ops.POINTWISE with the reference surface's signatures.

Op arguments may be graph tensors, python / numpy scalars (fused pass-by-value scalars) or framework arrays
(bound data: `graph._data_bindings[uid]` feeds them to execute). A classic 1.23 positional call (compute_data_type
before name) is recognised and bound in its own order.
"""
from __future__ import annotations

import inspect as _inspect
from typing import Any, Dict, List, Optional, Sequence

from ..enums import data_type, from_any_dtype, reduction_mode, scalar_type
from . import ops
from .node import Node
from .tensor import Tensor

# module-level aliases: some methods have parameters named like these enums (classic keyword names)
_NOT_SET = data_type.NOT_SET
_COMPILE_TIME_CONST = scalar_type.COMPILE_TIME_CONST


class BuilderMixin:
    """The construction half of pygraph. It uses pygraph's uid registry (_register, _check_mutable,
    _invalidate) and its _nodes / _data_bindings / _bound_ids."""

    # ---- tensor creation --------------------------------------------------------------------------------------------
    def tensor(self, dim: Sequence[int], stride: Optional[Sequence[int]] = None, data_type: Any = None,
               is_virtual: bool = False, is_pass_by_value: bool = False, ragged_offset: Optional[Tensor] = None,
               reordering_type: Any = None, name: str = "", uid: Optional[int] = None,
               ragged_offset_multiplier: int = 1, alignment_value: int = 1, **kwargs: Any) -> Tensor:
        """A graph input (or a user-declared virtual tensor). `stride` defaults to row-major; `uid` -1/None = auto.
        Extra keywords: alignment (byte alignment, default 16), vector_count, vector_dimension,
        is_compile_time_constant, pass_by_value. `alignment_value` (1.32) is accepted and not interpreted."""
        self._check_mutable("create a tensor")
        allowed = {"alignment", "vector_count", "vector_dimension", "is_compile_time_constant", "pass_by_value"}
        unknown = set(kwargs) - allowed
        if unknown:
            raise TypeError(f"tensor() got unexpected keyword arguments {sorted(unknown)}")
        dt = from_any_dtype(data_type)
        user = ["dim"] + (["stride"] if stride is not None else []) + (["data_type"] if dt is not _NOT_SET else [])
        dims = list(dim)
        t = Tensor(_user=tuple(user), name=name, dim=dims, stride=stride if stride is not None else ops.row_major_strides(dims),
                   data_type=dt, is_virtual=is_virtual, is_pass_by_value=is_pass_by_value,
                   ragged_offset=self._adopt(ragged_offset) if ragged_offset is not None else None,
                   reordering_type=reordering_type, ragged_offset_multiplier=ragged_offset_multiplier, **kwargs)
        t._alignment_value = alignment_value
        return self._register(t, None if uid is None or uid == -1 else int(uid))

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
            raise ValueError(f"tensor {t.name!r} (uid {t.uid}) belongs to another graph")
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
        raise TypeError(f"{label}: cannot use a {type(value).__name__} as a graph tensor")

    # ---- op builders --------------------------------------------------------------------------------------------------
    def _new_node(self, op: str, name: Any, compute_data_type: Any, params: Dict[str, Any]) -> Node:
        self._check_mutable(f"add a {op} op")
        if not isinstance(name, str):
            raise TypeError(f"{op}: name must be a str, got {name!r}")
        # frontend rule: an unnamed node is named after its index
        return Node(op, name or str(len(self._nodes)), params, from_any_dtype(compute_data_type))

    def _add_node(self, node: Node, inputs: Dict[str, Any], outputs: Sequence[str]) -> List[Tensor]:
        node.inputs = {port: self._as_input(v, f"{node.name}::{port}") for port, v in inputs.items()}
        outs = [self._register(Tensor(name=f"{node.name}::{port}", is_virtual=True)) for port in outputs]
        node.outputs = dict(zip(outputs, outs))
        self._nodes.append(node)
        self._invalidate()
        return outs

    def _pointwise(self, spec: ops.PointwiseOp, tensors: Sequence[Any], attrs: Dict[str, Any], name: Any,
                   compute_data_type: Any) -> Tensor:
        for a in spec.attrs:
            if a.required and attrs.get(a.arg) is None:
                raise TypeError(f"{spec.method}() missing required argument {a.arg!r}")
        params = ops.pointwise_params(spec.mode, {a.param: attrs.get(a.arg) for a in spec.attrs})
        node = self._new_node("pointwise", name, compute_data_type, params)
        (out,) = self._add_node(node, {f"IN_{i}": t for i, t in enumerate(tensors)}, ["OUT_0"])
        return out

    def matmul(self, A: Any, B: Any, compute_data_type: Any = None, padding: float = 0.0, name: str = "") -> Tensor:
        """C = A @ B with broadcast batch dims; output `<name>::C`."""
        node = self._new_node("matmul", name, compute_data_type, {"padding": float(padding)})
        (c,) = self._add_node(node, {"A": A, "B": B}, ["C"])
        return c

    def reduction(self, *args: Any, name: str = "", compute_data_type: Any = None, out_dims: Any = None,
                  **kwargs: Any) -> Tensor:
        """reduction(input, mode, compute_data_type=None, name="") -> Y. The reduced axes are the ones where the
        output dims (out_dims= or Y.set_dim) are 1; unset output dims copy the input's (frontend behaviour).
        Keyword `is_deterministic` (bool) is forwarded to the backend."""
        values = _bind_positional("reduction", ("input", "mode", "compute_data_type", "name"), args, kwargs,
                                  {"name": name, "compute_data_type": compute_data_type})
        if "group_offset" in kwargs:
            raise NotImplementedError("reduction(group_offset=...) is not supported yet")
        deterministic = bool(kwargs.pop("is_deterministic", False))
        if kwargs:
            raise TypeError(f"reduction() got unexpected keyword arguments {sorted(kwargs)}")
        mode = values.get("mode")
        if not isinstance(mode, reduction_mode) or mode is reduction_mode.NOT_SET:
            raise TypeError(f"reduction() needs a reduction_mode member as mode, got {mode!r}")
        if "input" not in values:
            raise TypeError("reduction() missing required argument 'input'")
        node = self._new_node("reduction", values["name"], values["compute_data_type"],
                              {"mode": mode, "is_deterministic": deterministic})
        (y,) = self._add_node(node, {"X": values["input"]}, ["Y"])
        if out_dims is not None:
            y.set_dim(out_dims)
        return y



# ---- pointwise builders, generated from the op table ----------------------------------------------------------------
def _is_dtype_like(v: Any) -> bool:
    return isinstance(v, data_type) or type(v).__module__.startswith("torch")


def _bind_pointwise(spec: ops.PointwiseOp, sig: _inspect.Signature, graph: Any, args: tuple,
                    kwargs: dict) -> Dict[str, Any]:
    """Map a call onto {argument: value}. Accepts the 1.32 signature and the classic 1.23 positional order
    (compute_data_type before name, and swish_backward's compute_data_type before swish_beta)."""
    n = len(spec.args)
    if spec.explicit:
        try:
            values = sig.bind(graph, *args, **kwargs).arguments
        except TypeError as exc:
            raise TypeError(f"{spec.method}(): {exc}") from None
        values.pop("self", None)
        attr_values = [values.get(a.arg) for a in spec.attrs]
        classic = len(args) > n and (not isinstance(values.get("name", ""), str) or any(map(_is_dtype_like, attr_values)))
        if not classic:
            kwargs.clear()  # all consumed by the signature
            return {**{a.arg: None for a in spec.attrs}, "name": "", "compute_data_type": None, **values}
    return _bind_positional(spec.method, spec.args + spec.classic_tail, args, kwargs,
                            {**{a.arg: None for a in spec.attrs}, "name": "", "compute_data_type": None})


def _bind_positional(method: str, order: Sequence[str], args: tuple, kwargs: dict, defaults: dict) -> Dict[str, Any]:
    """Bind positionals to `order`, then keywords named in `order`; keywords outside it stay in kwargs."""
    if len(args) > len(order):
        raise TypeError(f"{method}() takes at most {len(order)} positional arguments ({', '.join(order)})")
    values = dict(defaults)
    values.update(zip(order, args))
    for key in order[len(args):]:
        if key in kwargs:
            values[key] = kwargs.pop(key)
    duplicated = [k for k in order[: len(args)] if k in kwargs]
    if duplicated:
        raise TypeError(f"{method}() got multiple values for {duplicated}")
    return values


def _make_pointwise(spec: ops.PointwiseOp):
    sig = spec.signature()

    def builder(self: Any, *args: Any, **kwargs: Any) -> Tensor:
        kwargs = dict(kwargs)
        values = _bind_pointwise(spec, sig, self, args, kwargs)
        if kwargs:
            raise TypeError(f"{spec.method}() got unexpected keyword arguments {sorted(kwargs)}; "
                            f"its tensor arguments are {spec.args}")
        missing = [a for a in spec.args if a not in values]
        if missing:
            raise TypeError(f"{spec.method}() missing tensor arguments {missing}")
        return self._pointwise(spec, [values[a] for a in spec.args], values, values["name"],
                               values["compute_data_type"])

    builder.__name__ = spec.method
    builder.__qualname__ = f"pygraph.{spec.method}"
    builder.__signature__ = sig
    builder.__doc__ = f"{spec.method}({', '.join(spec.args)}) -> OUT_0, pointwise mode {spec.mode}."
    return builder


for _spec in ops.POINTWISE.values():
    setattr(BuilderMixin, _spec.method, _make_pointwise(_spec))
del _spec


# ---- helpers ----------------------------------------------------------------------------------------------------------
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
        raise TypeError(f"cannot use {value!r} as a scalar") from None


def _describe(obj: Any) -> tuple:
    """(dims, element strides, data_type, on_cpu) of an array or DLPack object, without importing frameworks."""
    dims = [int(d) for d in obj.shape]
    strides = None
    if callable(getattr(obj, "stride", None)):  # torch: element strides
        strides = [int(s) for s in obj.stride()]
    elif getattr(obj, "strides", None) is not None and getattr(obj, "itemsize", None):  # numpy / cupy: bytes
        strides = [int(s) // int(obj.itemsize) for s in obj.strides]
    if strides is None or len(strides) != len(dims):
        strides = ops.row_major_strides(dims)
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
        except Exception:  # noqa: BLE001 - a broken producer: fall through to the other probes
            pass
    dev = getattr(obj, "device", None)
    if getattr(dev, "type", None) is not None:
        return dev.type == "cpu"
    return type(obj).__module__ == "numpy"
