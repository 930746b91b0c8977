"""GPU: convolution fprop / dgrad / wgrad (NHWC, fp16 io, fp32 compute) and conv + bias + relu, against float64
torch references. (Written with the conv family; first run on the device next session.)"""
from __future__ import annotations

import pytest

import cudnn_py as cudnn

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT
KW = dict(padding=[1, 1], stride=[1, 1], dilation=[1, 1])


def rel_err(out, ref):
    assert torch.isfinite(out).all(), "not every element was written"
    return ((out.double() - ref).norm() / ref.norm()).item()


def nhwc(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)


def poisoned_like(t):
    return torch.full_like(t, float("nan")).to(memory_format=torch.channels_last)


def build_and_run(g, pack):
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    ws = torch.full((max(1, g.get_workspace_size()),), 255, device="cuda", dtype=torch.uint8)
    g.execute(pack, ws)
    torch.cuda.synchronize()


def test_conv_fprop_bias_relu():
    x, w, b = nhwc(4, 32, 16, 16), nhwc(64, 32, 3, 3), nhwc(1, 64, 1, 1)
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    Y = g.relu(g.add(g.conv_fprop(X, W, **KW), B)).set_output(True)
    g.validate()
    y = poisoned_like(torch.empty(tuple(Y.get_dim()), device="cuda", dtype=torch.half))
    build_and_run(g, {X: x, W: w, B: b, Y: y})
    ref = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), padding=1) + b.double())
    assert rel_err(y, ref) < 5e-3


def test_conv_dgrad_and_wgrad():
    dy, w, x = nhwc(4, 64, 16, 16), nhwc(64, 32, 3, 3), nhwc(4, 32, 16, 16)
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    DY, W = g.tensor_like(dy), g.tensor_like(w)
    DX = g.conv_dgrad(DY, W, **KW, out_dims=[4, 32, 16, 16]).set_output(True)
    g.validate()
    DX.set_stride(list(x.stride()))
    dx = poisoned_like(x)
    build_and_run(g, {DY: dy, W: w, DX: dx})
    ref = torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), padding=1)
    assert rel_err(dx, ref) < 5e-3
    g2 = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    X2, DY2 = g2.tensor_like(x), g2.tensor_like(dy)
    DW = g2.conv_wgrad(X2, DY2, **KW, out_dims=[64, 32, 3, 3]).set_output(True).set_stride(list(w.stride()))
    dw = poisoned_like(w)
    build_and_run(g2, {X2: x, DY2: dy, DW: dw})
    ref_w = torch.nn.grad.conv2d_weight(x.double(), w.shape, dy.double(), padding=1)
    assert rel_err(dw, ref_w) < 1e-2
