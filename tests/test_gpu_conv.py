"""GPU: convolution fprop / dgrad / wgrad (2-D and 3-D, NHWC and NCHW strides, both padding forms, stride,
dilation, groups, depthwise, CONVOLUTION and CROSS_CORRELATION, fp16 / bf16 / fp32, int8) and the fusions users
build (conv + bias + relu, conv + scale + bias + relu, dgrad + drelu, conv + genstats, conv + reduction,
scale + bias + relu + wgrad), against float64 torch references (autograd of a float64 ``conv{2,3}d`` for the
backward ones). Inputs are fresh seeded random values, every output and the workspace are poisoned before the
run. A few cases also run the float64 ReferenceEngine on the same inputs: it must agree with the GPU."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.enums import convolution_mode  # not re-exported at the top level (as in the classic module)
from cudnn_py.ir.layout import nhwc_strides, row_major_strides

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
DT = cudnn.data_type
H, BF, F = DT.HALF, DT.BFLOAT16, DT.FLOAT
TORCH = {"HALF": torch.float16, "BFLOAT16": torch.bfloat16, "FLOAT": torch.float32, "INT8": torch.int8,
         "INT32": torch.int32}
# relative error bounds: the output rounding of the io type (fp32 io may run as TF32 on tensor cores)
TOL = {"HALF": 5e-3, "BFLOAT16": 2e-2, "FLOAT": 5e-3}
KW = dict(padding=[1, 1], stride=[1, 1], dilation=[1, 1])


# ---- helpers ------------------------------------------------------------------------------------------------------
def rel_err(out, ref):
    assert torch.isfinite(out).all(), "not every element was written (NaN poison left)"
    return ((out.double() - ref).norm() / ref.norm()).item()


def strides_for(dims, layout):
    return nhwc_strides(dims) if layout == "nhwc" else row_major_strides(dims)


def random_tensor(gen, dims, layout, dtype):
    """Fresh seeded random values (never zeros) laid out as ``layout``; int8 in [-8, 8)."""
    numel = int(np.prod(dims))
    if dtype == torch.int8:
        flat = torch.randint(-8, 8, (numel,), generator=gen, device="cuda", dtype=torch.int8)
    else:
        flat = torch.randn(numel, generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    return flat.as_strided(tuple(dims), tuple(strides_for(dims, layout)))


def poisoned(t):
    """NaN-filled (int: 0x7f-filled) device memory laid out as graph tensor ``t`` (its dims, strides, type)."""
    dims, strides = tuple(t.get_dim()), tuple(t.get_stride())
    dtype = TORCH[t.get_data_type().name]
    size = 1 + sum((d - 1) * st for d, st in zip(dims, strides))
    fill = float("nan") if dtype.is_floating_point else 0x7F
    return torch.full((size,), fill, device="cuda", dtype=dtype).as_strided(dims, strides)


def build_and_run(g, pack):
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    ws = torch.full((max(1, g.get_workspace_size()),), 255, device="cuda", dtype=torch.uint8)  # poisoned
    g.execute(pack, ws)
    torch.cuda.synchronize()


def graph(io):
    return cudnn.pygraph(io_data_type=io, intermediate_data_type=F, compute_data_type=F)


def torch_fprop(x, w, pre, post, stride, dilation, groups, mode):
    """Float64 conv: explicit (possibly asymmetric) zero padding, kernel flipped for true CONVOLUTION."""
    x = x.double()
    w = w.double()
    if mode == "CONVOLUTION":
        w = torch.flip(w, dims=list(range(2, w.dim())))
    pad = []
    for a, b in zip(reversed(pre), reversed(post)):  # F.pad takes the last axis first
        pad += [a, b]
    conv = torch.nn.functional.conv2d if x.dim() == 4 else torch.nn.functional.conv3d
    return conv(torch.nn.functional.pad(x, pad), w, stride=stride, dilation=dilation, groups=groups)


def torch_dgrad(dy, w, x_dims, *conv_args):
    x = torch.zeros(x_dims, device="cuda", dtype=torch.float64, requires_grad=True)
    (dx,) = torch.autograd.grad(torch_fprop(x, w, *conv_args), x, dy.double())
    return dx


def torch_wgrad(x, dy, w_dims, *conv_args):
    w = torch.zeros(w_dims, device="cuda", dtype=torch.float64, requires_grad=True)
    (dw,) = torch.autograd.grad(torch_fprop(x, w, *conv_args), w, dy.double())
    return dw


def out_dims(x_dims, w_dims, pre, post, stride, dilation):
    return [x_dims[0], w_dims[0]] + [1 + (x + a + b - d * (r - 1) - 1) // s for x, r, a, b, s, d in
                                     zip(x_dims[2:], w_dims[2:], pre, post, stride, dilation)]


# ---- the conv cases: (id, direction, io type, layout, x dims, w dims, pre, post, stride, dilation, mode, form) -----
XC, CV = "CROSS_CORRELATION", "CONVOLUTION"
CASES = [
    # 2-D, the three directions, the three float types, both layouts
    ("fprop_nhwc_half", "fprop", "HALF", "nhwc", [4, 32, 16, 16], [64, 32, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("fprop_nhwc_bf16", "fprop", "BFLOAT16", "nhwc", [4, 32, 16, 16], [64, 32, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("fprop_nhwc_fp32", "fprop", "FLOAT", "nhwc", [2, 16, 12, 12], [32, 16, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("fprop_nchw_half", "fprop", "HALF", "nchw", [4, 32, 16, 16], [64, 32, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("fprop_nchw_fp32", "fprop", "FLOAT", "nchw", [2, 16, 12, 12], [32, 16, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("fprop_stride2_dil2_asym_pad", "fprop", "HALF", "nhwc", [2, 32, 17, 15], [32, 32, 3, 3], [2, 1], [1, 2], [2, 2], [2, 2], XC, "pre_post"),
    ("fprop_convolution_mode", "fprop", "HALF", "nhwc", [2, 16, 10, 10], [32, 16, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], CV, "padding"),
    ("fprop_grouped4", "fprop", "HALF", "nhwc", [2, 64, 12, 12], [64, 16, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("fprop_depthwise", "fprop", "HALF", "nhwc", [2, 32, 14, 14], [32, 1, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("fprop_unaligned_c3", "fprop", "HALF", "nhwc", [2, 3, 20, 20], [16, 3, 5, 5], [2, 2], [2, 2], [2, 2], [1, 1], XC, "padding"),
    ("fprop_1x1", "fprop", "BFLOAT16", "nhwc", [4, 64, 8, 8], [128, 64, 1, 1], [0, 0], [0, 0], [1, 1], [1, 1], XC, "padding"),
    ("dgrad_nhwc_half", "dgrad", "HALF", "nhwc", [4, 32, 16, 16], [64, 32, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("dgrad_nhwc_bf16", "dgrad", "BFLOAT16", "nhwc", [4, 32, 16, 16], [64, 32, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("dgrad_nchw_fp32", "dgrad", "FLOAT", "nchw", [2, 16, 12, 12], [32, 16, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("dgrad_stride2", "dgrad", "HALF", "nhwc", [2, 32, 16, 16], [32, 32, 3, 3], [1, 1], [1, 1], [2, 2], [1, 1], XC, "pre_post"),
    ("dgrad_dilated_convolution_mode", "dgrad", "HALF", "nhwc", [2, 16, 12, 12], [32, 16, 3, 3], [2, 2], [2, 2], [1, 1], [2, 2], CV, "padding"),
    ("dgrad_grouped2", "dgrad", "HALF", "nhwc", [2, 32, 10, 10], [32, 16, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("wgrad_nhwc_half", "wgrad", "HALF", "nhwc", [4, 32, 16, 16], [64, 32, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("wgrad_nhwc_bf16", "wgrad", "BFLOAT16", "nhwc", [4, 32, 16, 16], [64, 32, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("wgrad_nchw_fp32", "wgrad", "FLOAT", "nchw", [2, 16, 12, 12], [32, 16, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], XC, "padding"),
    ("wgrad_stride2_asym_pad", "wgrad", "HALF", "nhwc", [2, 32, 15, 15], [32, 32, 3, 3], [1, 0], [0, 1], [2, 2], [1, 1], XC, "pre_post"),
    ("wgrad_depthwise_convolution_mode", "wgrad", "HALF", "nhwc", [2, 32, 12, 12], [32, 1, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], CV, "padding"),
    # 3-D
    ("fprop3d_ndhwc_half", "fprop", "HALF", "nhwc", [2, 16, 8, 8, 8], [32, 16, 3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1], XC, "padding"),
    ("fprop3d_ncdhw_fp32", "fprop", "FLOAT", "nchw", [2, 8, 6, 7, 6], [16, 8, 3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 2, 1], [1, 1, 1], XC, "padding"),
    ("fprop3d_bf16_dilated", "fprop", "BFLOAT16", "nhwc", [2, 16, 9, 9, 9], [16, 16, 3, 3, 3], [2, 2, 2], [2, 2, 2], [1, 1, 1], [2, 2, 2], XC, "pre_post"),
    ("dgrad3d_ndhwc_half", "dgrad", "HALF", "nhwc", [2, 16, 8, 8, 8], [32, 16, 3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1], XC, "padding"),
    ("wgrad3d_ndhwc_half", "wgrad", "HALF", "nhwc", [2, 16, 8, 8, 8], [32, 16, 3, 3, 3], [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1], XC, "padding"),
]


def _conv_kwargs(case):
    *_, pre, post, stride, dilation, mode, form = case
    kw = dict(stride=stride, dilation=dilation, convolution_mode=convolution_mode[mode])
    if form == "padding":
        assert pre == post
        kw["padding"] = pre
    else:
        kw.update(pre_padding=pre, post_padding=post)
    return kw


def conv_graph(case, g, operands):
    """The case's single-conv graph on ``g``; ``operands`` maps each input role to a torch tensor (declared by
    ``tensor_like``) or to (dims, strides, data type). Returns (graph tensors by role, the output)."""
    _, direction, _, layout, x_dims, w_dims, pre, post, stride, dilation, *_ = case
    kw = _conv_kwargs(case)
    ts = {role: g.tensor_like(v) if hasattr(v, "data_ptr") else g.tensor(*v, name=role)
          for role, v in operands.items()}
    if direction == "fprop":
        out = g.conv_fprop(ts["x"], ts["w"], **kw)
        dims = out_dims(x_dims, w_dims, pre, post, stride, dilation)
    elif direction == "dgrad":
        out, dims = g.conv_dgrad(ts["dy"], ts["w"], **kw, out_dims=x_dims), x_dims
    else:
        out, dims = g.conv_wgrad(ts["x"], ts["dy"], **kw, out_dims=w_dims), w_dims
    out.set_output(True).set_stride(strides_for(dims, layout))
    return ts, out


def conv_operands(case, seed):
    """Fresh random operands of the case and the torch float64 reference of its output."""
    _, direction, io, layout, x_dims, w_dims, pre, post, stride, dilation, mode, _ = case
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tdt = TORCH[io]
    y_dims = out_dims(x_dims, w_dims, pre, post, stride, dilation)
    conv_args = (pre, post, stride, dilation, x_dims[1] // w_dims[1], mode)
    if direction == "fprop":
        x, w = random_tensor(gen, x_dims, layout, tdt), random_tensor(gen, w_dims, layout, tdt)
        return {"x": x, "w": w}, torch_fprop(x, w, *conv_args)
    if direction == "dgrad":
        dy, w = random_tensor(gen, y_dims, layout, tdt), random_tensor(gen, w_dims, layout, tdt)
        return {"dy": dy, "w": w}, torch_dgrad(dy, w, x_dims, *conv_args)
    x, dy = random_tensor(gen, x_dims, layout, tdt), random_tensor(gen, y_dims, layout, tdt)
    return {"x": x, "dy": dy}, torch_wgrad(x, dy, w_dims, *conv_args)


def run_conv_case(case, seed):
    """Build and run one case on the GPU; returns (output buffer, float64 reference, operands)."""
    operands, ref = conv_operands(case, seed)
    g = graph(DT[case[2]])
    ts, out = conv_graph(case, g, operands)
    g.validate()
    buf = poisoned(out)
    build_and_run(g, {**{ts[k]: v for k, v in operands.items()}, out: buf})
    return buf, ref, operands


def tolerance(case):
    return TOL[case[2]] * (2 if case[1] == "wgrad" else 1)  # wgrad sums over N and every pixel


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_conv(index):
    case = CASES[index]
    buf, ref, _ = run_conv_case(case, seed=100 + index)
    assert rel_err(buf, ref) < tolerance(case), case[0]


def reference_engine_run(case, operands):
    """The same case on the float64 ReferenceEngine (on the host), from the same operand values."""
    g = cudnn.pygraph(io_data_type=DT.DOUBLE, compute_data_type=DT.DOUBLE, backends=[ReferenceEngine()])
    specs = {k: (list(v.shape), list(v.stride()), DT.DOUBLE) for k, v in operands.items()}
    ts, out = conv_graph(case, g, specs)
    g.validate_ir()
    host = np.zeros(tuple(out.get_dim()))
    g.execute({**{ts[k]: v.double().cpu().numpy() for k, v in operands.items()}, out: host})
    return torch.from_numpy(host).cuda()


@pytest.mark.parametrize("name", ["fprop_stride2_dil2_asym_pad", "fprop_convolution_mode", "fprop_grouped4",
                                  "dgrad_dilated_convolution_mode", "wgrad_depthwise_convolution_mode",
                                  "fprop3d_ncdhw_fp32"])
def test_reference_engine_agrees_with_the_gpu(name):
    case = next(c for c in CASES if c[0] == name)
    buf, ref, operands = run_conv_case(case, seed=7)
    engine = reference_engine_run(case, operands)
    assert ((engine - ref).norm() / ref.norm()).item() < 1e-10  # both float64, from the same inputs
    assert rel_err(buf, engine) < tolerance(case)


def test_int8_conv_runs_exactly_or_is_refused_clearly():
    """int8 x int8 -> float, INT32 compute: exact (the sums fit fp32), or a cudnnGraphNotSupportedError that says
    why (reported as xfail, so the run tells which it was)."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = random_tensor(gen, [2, 32, 12, 12], "nhwc", torch.int8)
    w = random_tensor(gen, [32, 32, 3, 3], "nhwc", torch.int8)
    g = cudnn.pygraph(io_data_type=DT.INT8, intermediate_data_type=F, compute_data_type=DT.INT32)
    X, W = g.tensor_like(x), g.tensor_like(w)
    Y = g.conv_fprop(X, W, **KW).set_output(True).set_data_type(F)
    try:
        g.validate()
        y = poisoned(Y)
        build_and_run(g, {X: x, W: w, Y: y})
    except cudnn.cudnnGraphNotSupportedError as e:
        assert str(e).strip(), "a refusal must say why"
        pytest.xfail(f"cuDNN {cudnn.backend_version()} refuses int8 conv fprop here: {str(e)[:300]}")
    ref = torch_fprop(x, w, [1, 1], [1, 1], [1, 1], [1, 1], 1, XC)
    assert rel_err(y, ref) < 1e-7  # integer sums: exact in fp32


# ---- fusions ------------------------------------------------------------------------------------------------------
def nhwc_random(gen, dims, dtype=torch.half):
    return random_tensor(gen, dims, "nhwc", dtype)


@pytest.mark.parametrize("io", ["HALF", "BFLOAT16"])
def test_conv_fprop_bias_relu(io):
    gen = torch.Generator(device="cuda").manual_seed(11)
    tdt = TORCH[io]
    x, w, b = nhwc_random(gen, [4, 32, 16, 16], tdt), nhwc_random(gen, [64, 32, 3, 3], tdt), \
        nhwc_random(gen, [1, 64, 1, 1], tdt)
    g = graph(DT[io])
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.bias(g.conv_fprop(X, W, **KW), B)).set_output(True).set_data_type(DT[io])
    g.validate()
    y = poisoned(Y)
    build_and_run(g, {X: x, W: w, B: b, Y: y})
    ref = torch.relu(torch_fprop(x, w, [1, 1], [1, 1], [1, 1], [1, 1], 1, XC) + b.double())
    assert rel_err(y, ref) < TOL[io]


def test_conv_fprop_scale_bias_relu():
    gen = torch.Generator(device="cuda").manual_seed(12)
    x, w = nhwc_random(gen, [4, 32, 16, 16]), nhwc_random(gen, [64, 32, 3, 3])
    s, b = nhwc_random(gen, [1, 64, 1, 1]), nhwc_random(gen, [1, 64, 1, 1])
    g = graph(H)
    X, W, S, B = (g.tensor_like(t) for t in (x, w, s, b))
    Y = g.relu(g.bias(g.scale(g.conv_fprop(X, W, **KW), S), B)).set_output(True).set_data_type(H)
    g.validate()
    y = poisoned(Y)
    build_and_run(g, {X: x, W: w, S: s, B: b, Y: y})
    ref = torch.relu(torch_fprop(x, w, [1, 1], [1, 1], [1, 1], [1, 1], 1, XC) * s.double() + b.double())
    assert rel_err(y, ref) < TOL["HALF"]


def test_conv_dgrad_drelu():
    gen = torch.Generator(device="cuda").manual_seed(13)
    dy, w, x = nhwc_random(gen, [4, 64, 16, 16]), nhwc_random(gen, [64, 32, 3, 3]), nhwc_random(gen, [4, 32, 16, 16])
    g = graph(H)
    DY, W, X = g.tensor_like(dy), g.tensor_like(w), g.tensor_like(x)
    DX = g.conv_dgrad(DY, W, **KW, out_dims=[4, 32, 16, 16])
    OUT = g.relu_backward(DX, X).set_output(True).set_data_type(H)
    g.validate()
    out = poisoned(OUT)
    build_and_run(g, {DY: dy, W: w, X: x, OUT: out})
    ref = torch_dgrad(dy, w, [4, 32, 16, 16], [1, 1], [1, 1], [1, 1], [1, 1], 1, XC) * (x.double() > 0)
    assert rel_err(out, ref) < TOL["HALF"]


@pytest.mark.parametrize("prologue", ["none", "scale_bias_relu"])
def test_conv_genstats(prologue):
    """The ConvBN pattern: [relu(x * s + b) ->] conv -> Y (stored) and its per-channel sum / sum of squares."""
    gen = torch.Generator(device="cuda").manual_seed(14)
    x, w = nhwc_random(gen, [4, 32, 16, 16]), nhwc_random(gen, [64, 32, 3, 3])
    s, b = nhwc_random(gen, [1, 32, 1, 1]), nhwc_random(gen, [1, 32, 1, 1])
    g = graph(H)
    X, W = g.tensor_like(x), g.tensor_like(w)
    pack = {X: x, W: w}
    inp = X
    if prologue == "scale_bias_relu":
        S, B = g.tensor_like(s), g.tensor_like(b)
        pack.update({S: s, B: b})
        inp = g.relu(g.bias(g.scale(X, S), B))
    Y = g.conv_fprop(inp, W, **KW).set_output(True).set_data_type(H)
    SUM, SQ = g.genstats(Y)
    for t in (SUM, SQ):
        t.set_output(True).set_data_type(F)
    g.validate()
    y, total, sq = poisoned(Y), poisoned(SUM), poisoned(SQ)
    build_and_run(g, {**pack, Y: y, SUM: total, SQ: sq})
    xin = torch.relu(x.double() * s.double() + b.double()) if prologue == "scale_bias_relu" else x
    ref = torch_fprop(xin, w, [1, 1], [1, 1], [1, 1], [1, 1], 1, XC)
    assert rel_err(y, ref) < TOL["HALF"]
    assert rel_err(total, ref.sum(dim=(0, 2, 3), keepdim=True)) < 1e-2
    assert rel_err(sq, (ref * ref).sum(dim=(0, 2, 3), keepdim=True)) < 5e-3


def test_conv_reduction_per_channel():
    gen = torch.Generator(device="cuda").manual_seed(15)
    x, w = nhwc_random(gen, [4, 32, 16, 16]), nhwc_random(gen, [64, 32, 3, 3])
    g = graph(H)
    X, W = g.tensor_like(x), g.tensor_like(w)
    R = g.reduction(g.conv_fprop(X, W, **KW), cudnn.reduction_mode.ADD).set_output(True)
    R.set_dim([1, 64, 1, 1]).set_stride(nhwc_strides([1, 64, 1, 1])).set_data_type(F)
    g.validate()
    r = poisoned(R)
    build_and_run(g, {X: x, W: w, R: r})
    ref = torch_fprop(x, w, [1, 1], [1, 1], [1, 1], [1, 1], 1, XC).sum(dim=(0, 2, 3), keepdim=True)
    assert rel_err(r, ref) < 1e-2


def test_scale_bias_relu_wgrad():
    gen = torch.Generator(device="cuda").manual_seed(16)
    x, dy = nhwc_random(gen, [4, 32, 16, 16]), nhwc_random(gen, [4, 64, 16, 16])
    s, b = nhwc_random(gen, [1, 32, 1, 1]), nhwc_random(gen, [1, 32, 1, 1])
    g = graph(H)
    X, DY, S, B = (g.tensor_like(t) for t in (x, dy, s, b))
    DW = g.conv_wgrad(g.relu(g.bias(g.scale(X, S), B)), DY, **KW, out_dims=[64, 32, 3, 3]).set_output(True)
    DW.set_stride(nhwc_strides([64, 32, 3, 3])).set_data_type(H)
    g.validate()
    dw = poisoned(DW)
    build_and_run(g, {X: x, DY: dy, S: s, B: b, DW: dw})
    xin = torch.relu(x.double() * s.double() + b.double())
    ref = torch_wgrad(xin, dy, [64, 32, 3, 3], [1, 1], [1, 1], [1, 1], [1, 1], 1, XC)
    assert rel_err(dw, ref) < 2 * TOL["HALF"]
