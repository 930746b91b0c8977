"""Which graphs the norm forward engine runs: the pattern matcher (pure: it reads the graph, nothing else).

Accepted, and nothing else (any other node, port or layout declines with the reason):

* one ``norm_forward`` node of mode LAYER_NORM or RMS_NORM, phase TRAINING (fp32 MEAN / INV_VARIANCE out; RMS
  has no MEAN) or INFERENCE, with SCALE, optional BIAS and EPSILON (a pass-by-value scalar, or a device fp32);
* optionally before it, a pointwise ADD of two tensors of X's dims and strides whose output is the norm's X (the
  residual add; its sum is written when that tensor is not virtual);
* optionally after it, a pointwise SWISH_FWD (SiLU when ``swish_beta`` is 1) reading the norm's Y (Y is written
  as well when it is not virtual).

Layout: X's normalized axes (where SCALE is not 1) are its innermost ones, and X is packed, so each row is ``n``
contiguous elements; every other tensor of X's shape has X's strides, SCALE / BIAS are packed the same way over
the normalized axes, and the statistics are packed in X's row order. Data types: fp16 / bf16 / fp32 for the
tensors, fp32 statistics, fp32 compute.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..._generated.names import NormMode, PointwiseMode
from ...enums import data_type, norm_forward_phase
from ...errors import cudnnGraphNotSupportedError

KERNEL_TYPES = {data_type.FLOAT: ("float", 4), data_type.HALF: ("f16_t", 2), data_type.BFLOAT16: ("bf16_t", 2)}
_NORM_PORTS_IN, _NORM_PORTS_OUT = {"X", "SCALE", "BIAS", "EPSILON"}, {"Y", "MEAN", "INV_VARIANCE"}


@dataclass(frozen=True)
class Operand:
    uid: int
    ctype: str  # the kernel's type name
    size: int  # bytes per element
    alignment: int  # declared (the tensor's alignment)


@dataclass(frozen=True)
class NormProblem:
    rms: bool
    train: bool
    n: int  # elements per row
    rows: int
    x: Operand
    w: Operand
    r: Operand | None = None  # residual (the add's other input)
    s: Operand | None = None  # the sum, when written
    b: Operand | None = None
    y: Operand | None = None  # the norm's Y, when written
    z: Operand | None = None  # the SiLU's output
    mean: int | None = None  # uids of the fp32 statistics (training)
    rstd: int | None = None
    eps_uid: int = 0
    eps_value: float | None = None  # known at planning (pass-by-value with a value), else read at execute
    eps_on_device: bool = False
    beta: float = 1.0

    def operands(self) -> list[Operand]:
        return [o for o in (self.x, self.r, self.s, self.w, self.b, self.y, self.z) if o is not None]

    @property
    def fusions(self) -> str:
        return "+".join(f for f, on in (("residual", self.r is not None), ("silu", self.z is not None)) if on) or "-"


def decline(why: str) -> cudnnGraphNotSupportedError:
    return cudnnGraphNotSupportedError(f"norm forward engine: {why}")


def _operand(t: Any, what: str) -> Operand:
    kt = KERNEL_TYPES.get(t.data_type)
    if kt is None:
        raise decline(f"{what} has data type {t.data_type.name} (fp16, bf16 or fp32 only)")
    return Operand(t.uid, kt[0], kt[1], int(getattr(t, "alignment", 16) or 16))


def _mode(node: Any) -> str:
    return str(node.params.get("mode", ""))


def _fp32_compute(node: Any) -> None:
    cdt = node.params.get("compute_data_type", data_type.NOT_SET)
    if cdt not in (data_type.FLOAT, data_type.NOT_SET, None):
        raise decline(f"node {node.name!r} computes in {getattr(cdt, 'name', cdt)} (fp32 only)")


def _dense_order(dims: list[int], strides: list[int]) -> list[int] | None:
    """X's axes of extent > 1, outermost first, when X is packed; else None."""
    axes = sorted((i for i, d in enumerate(dims) if d > 1), key=lambda i: -strides[i])
    expect = 1
    for i in reversed(axes):
        if strides[i] != expect:
            return None
        expect *= dims[i]
    return axes


def _same_layout(t: Any, x: Any, what: str) -> None:
    if [int(d) for d in t.dim] != [int(d) for d in x.dim] or any(
            int(d) > 1 and int(a) != int(b) for d, a, b in zip(x.dim, t.stride, x.stride)):
        raise decline(f"{what} is not laid out as X (dims {list(t.dim)}, strides {list(t.stride)})")


def match(graph: Any) -> NormProblem:
    nodes = list(graph.nodes)
    norms = [n for n in nodes if n.op == "norm_forward"]
    if len(norms) != 1:
        raise decline("the graph needs exactly one layernorm / rmsnorm forward node")
    norm = norms[0]
    mode = _mode(norm)
    if mode not in (NormMode.LAYER_NORM, NormMode.RMS_NORM):
        raise decline(f"norm mode {mode} (layernorm and rmsnorm only)")
    phase = norm.params.get("norm_forward_phase")
    if phase not in (norm_forward_phase.TRAINING, norm_forward_phase.INFERENCE):
        raise decline(f"norm phase {phase!r}")
    if set(norm.inputs) - _NORM_PORTS_IN or set(norm.outputs) - _NORM_PORTS_OUT:
        raise decline("the norm node has ports besides X, SCALE, BIAS, EPSILON, Y, MEAN, INV_VARIANCE")
    _fp32_compute(norm)
    x_t, y_t = norm.inputs["X"], norm.outputs["Y"]
    add = swish = None
    for n in nodes:
        if n is norm:
            continue
        if n.op != "pointwise":
            raise decline(f"node {n.name!r} ({n.op}) is neither the norm nor a fused add / SiLU")
        _fp32_compute(n)
        if _mode(n) == PointwiseMode.ADD and n.outputs["OUT_0"] is x_t and add is None:
            add = n
        elif _mode(n) == PointwiseMode.SWISH_FWD and n.inputs.get("IN_0") is y_t and swish is None:
            swish = n
        else:
            raise decline(f"pointwise node {n.name!r} ({_mode(n)}) is not a residual add feeding the norm's X "
                          "or a SiLU of its Y")
    dims, strides = [int(d) for d in x_t.dim], [int(s) for s in x_t.stride]
    order = _dense_order(dims, strides)
    if order is None:
        raise decline(f"X is not packed (dims {dims}, strides {strides})")
    scale = norm.inputs["SCALE"]
    normalized = [i for i, d in enumerate(scale.dim) if int(d) != 1 and dims[i] > 1]
    k = len(normalized)
    if sorted(normalized) != sorted(order[len(order) - k:]):
        raise decline("the normalized axes (where SCALE is not 1) are not X's innermost")
    n = 1
    for i in normalized:
        n *= dims[i]
    numel = 1
    for d in dims:
        numel *= d
    rows = numel // n if n else 0
    if n < 1 or rows < 1 or numel >= 2 ** 31 * 64 or n >= 2 ** 31:
        raise decline(f"unsupported extent ({rows} rows of {n})")
    for port in ("SCALE", "BIAS"):
        t = norm.inputs.get(port)
        if t is not None and any(int(t.stride[i]) != strides[i] for i in normalized):
            raise decline(f"{port} is not packed like X's normalized axes")
    if x_t.is_virtual and add is None:
        raise decline("X is virtual")
    r = s = None
    x_op: Operand
    if add is not None:
        a, b = add.inputs.get("IN_0"), add.inputs.get("IN_1")
        if a is None or b is None or a.is_virtual or b.is_virtual:
            raise decline("the residual add needs two tensors in memory")
        _same_layout(a, x_t, "the add's first input")
        _same_layout(b, x_t, "the add's second input")
        x_op, r = _operand(a, "the add's first input"), _operand(b, "the add's second input")
        if not x_t.is_virtual:
            _same_layout(x_t, x_t, "the sum")
            s = _operand(x_t, "the sum")
    else:
        x_op = _operand(x_t, "X")
    y = z = None
    beta = 1.0
    if swish is not None:
        out = swish.outputs["OUT_0"]
        if out.is_virtual:
            raise decline("the SiLU's output is virtual")
        _same_layout(out, x_t, "the SiLU's output")
        z = _operand(out, "the SiLU's output")
        beta = float(swish.params.get("swish_beta", 1.0) or 1.0)
        if not y_t.is_virtual:
            y = _operand(y_t, "Y")
    else:
        if y_t.is_virtual:
            raise decline("Y is virtual and nothing reads it")
        _same_layout(y_t, x_t, "Y")
        y = _operand(y_t, "Y")
    w = _operand(scale, "SCALE")
    bias = norm.inputs.get("BIAS")
    bo = _operand(bias, "BIAS") if bias is not None else None
    train = phase is norm_forward_phase.TRAINING
    rms = mode == NormMode.RMS_NORM
    mean = rstd = None
    if train:
        row_axes = [i for i in order if i not in normalized]
        for port in ("MEAN", "INV_VARIANCE") if not rms else ("INV_VARIANCE",):
            t = norm.outputs.get(port)
            if t is None:
                raise decline(f"training without {port}")
            if t.data_type is not data_type.FLOAT or t.is_virtual:
                raise decline(f"{port} must be an fp32 tensor in memory")
            if any(int(t.stride[i]) * n != strides[i] for i in row_axes):
                raise decline(f"{port} is not packed in X's row order")
        mean = norm.outputs["MEAN"].uid if not rms else None
        rstd = norm.outputs["INV_VARIANCE"].uid
    eps = norm.inputs["EPSILON"]
    if any(int(d) != 1 for d in eps.dim):
        raise decline("EPSILON is not a scalar")
    on_device = not eps.is_pass_by_value
    if on_device and eps.data_type is not data_type.FLOAT:
        raise decline("a device EPSILON must be fp32")
    value = None if eps.pass_by_value is None else float(eps.pass_by_value)
    return NormProblem(rms, train, n, rows, x_op, w, r, s, bo, y, z, mean, rstd, eps.uid, value, on_device, beta)
