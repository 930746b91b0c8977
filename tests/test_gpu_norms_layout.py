"""GPU: layernorm / rmsnorm / instancenorm forward (TRAINING) against float64 torch references. (Written with the
families; first run on the device next session.) The layout ops are in test_gpu_layout.py."""
from __future__ import annotations

import pytest

import cudnn_py as cudnn

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT
P = cudnn.norm_forward_phase


def rel_err(out, ref):
    assert torch.isfinite(out).all(), "not every element was written"
    return ((out.double() - ref).norm() / ref.norm()).item()


def poisoned(t, dtype):
    """NaN-filled device memory laid out as the graph tensor ``t`` (its dims and strides)."""
    dims, strides = tuple(t.get_dim()), tuple(t.get_stride())
    size = 1 + sum((d - 1) * st for d, st in zip(dims, strides))
    return torch.full((size,), float("nan"), device="cuda", dtype=dtype).as_strided(dims, strides)


@pytest.mark.parametrize("method", ["layernorm", "rmsnorm"])
def test_norm_forward_training(method):
    x = torch.randn(8, 256, 1, 1, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    s = torch.randn(1, 256, 1, 1, device="cuda", dtype=torch.float).to(memory_format=torch.channels_last)
    b = torch.randn(1, 256, 1, 1, device="cuda", dtype=torch.float).to(memory_format=torch.channels_last)
    eps = torch.full((1, 1, 1, 1), 1e-5, dtype=torch.float)  # a host scalar: pass-by-value
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    X, S, B, E = g.tensor_like(x), g.tensor_like(s), g.tensor_like(b), g.tensor_like(eps)
    outs = getattr(g, method)(P.TRAINING, X, S, B, E)
    for t in outs:
        t.set_output(True)
    g.validate()
    bufs = [poisoned(t, torch.half if t is outs[0] else torch.float) for t in outs]
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({X: x, S: s, B: b, E: eps, **dict(zip(outs, bufs))}, None)
    torch.cuda.synchronize()
    xd = x.double()
    mean = xd.mean(dim=(1, 2, 3), keepdim=True) if method == "layernorm" else torch.zeros_like(xd[:, :1])
    inv = 1 / torch.sqrt(((xd - mean) ** 2).mean(dim=(1, 2, 3), keepdim=True) + 1e-5)
    assert rel_err(bufs[0], (xd - mean) * inv * s.double() + b.double()) < 5e-3
    assert rel_err(bufs[-1], inv) < 1e-3


def test_instancenorm_forward_training():
    x = torch.randn(4, 32, 8, 8, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    s = torch.randn(1, 32, 1, 1, device="cuda", dtype=torch.float).to(memory_format=torch.channels_last)
    b = torch.randn(1, 32, 1, 1, device="cuda", dtype=torch.float).to(memory_format=torch.channels_last)
    eps = torch.full((1, 1, 1, 1), 1e-5, dtype=torch.float)
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    X, S, B, E = g.tensor_like(x), g.tensor_like(s), g.tensor_like(b), g.tensor_like(eps)
    outs = g.instancenorm(P.TRAINING, X, S, B, E)
    for t in outs:
        t.set_output(True)
    g.validate()
    bufs = [poisoned(t, torch.half if t is outs[0] else torch.float) for t in outs]
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({X: x, S: s, B: b, E: eps, **dict(zip(outs, bufs))}, None)
    torch.cuda.synchronize()
    xd = x.double()
    mean = xd.mean(dim=(2, 3), keepdim=True)
    inv = 1 / torch.sqrt(((xd - mean) ** 2).mean(dim=(2, 3), keepdim=True) + 1e-5)
    assert rel_err(bufs[0], (xd - mean) * inv * s.double() + b.double()) < 5e-3
    assert rel_err(bufs[1], mean) < 1e-3
    assert rel_err(bufs[2], inv) < 1e-3


def test_adalayernorm_forward_training():
    if cudnn.backend_version() < 90900:
        pytest.skip("ADA_LAYER_NORM needs cuDNN 9.9.0")
    x = torch.randn(2, 128, 64, device="cuda", dtype=torch.half)
    s = torch.randn(2, 1, 64, device="cuda", dtype=torch.float)
    b = torch.randn(2, 1, 64, device="cuda", dtype=torch.float)
    eps = torch.full((1, 1, 1), 1e-5, dtype=torch.float)
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    X, S, B, E = g.tensor_like(x), g.tensor_like(s), g.tensor_like(b), g.tensor_like(eps)
    outs = g.adalayernorm(P.TRAINING, X, S, B, E)
    for t in outs:
        t.set_output(True)
    g.validate()
    bufs = [poisoned(t, torch.half if t is outs[0] else torch.float) for t in outs]
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({X: x, S: s, B: b, E: eps, **dict(zip(outs, bufs))}, None)
    torch.cuda.synchronize()
    xd = x.double()
    mean = xd.mean(dim=2, keepdim=True)
    inv = 1 / torch.sqrt(((xd - mean) ** 2).mean(dim=2, keepdim=True) + 1e-5)
    assert rel_err(bufs[0], (xd - mean) * inv * s.double() + b.double()) < 5e-3
    assert rel_err(bufs[1], mean) < 1e-3
    assert rel_err(bufs[2], inv) < 1e-3


def test_genstats():
    x = torch.randn(4, 64, 16, 16, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    X = g.tensor_like(x)
    outs = g.genstats(X)
    for t in outs:
        t.set_output(True).set_data_type(F)
    g.validate()
    bufs = [poisoned(t, torch.float) for t in outs]
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({X: x, **dict(zip(outs, bufs))}, None)
    torch.cuda.synchronize()
    xd = x.double()
    assert rel_err(bufs[0], xd.sum(dim=(0, 2, 3), keepdim=True)) < 1e-3
    assert rel_err(bufs[1], (xd * xd).sum(dim=(0, 2, 3), keepdim=True)) < 1e-3


def test_batchnorm_training_with_running_statistics():
    x = torch.randn(8, 32, 16, 16, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    per_c = [torch.randn(1, 32, 1, 1, device="cuda").to(memory_format=torch.channels_last) for _ in range(3)]
    s, b, rm = per_c
    rv = (torch.rand(1, 32, 1, 1, device="cuda") + 0.5).to(memory_format=torch.channels_last)
    eps, mom = torch.full((1, 1, 1, 1), 1e-5), torch.full((1, 1, 1, 1), 0.1)
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    X, S, B, RM, RV, E, M = (g.tensor_like(t) for t in (x, s, b, rm, rv, eps, mom))
    outs = g.batchnorm(X, S, B, RM, RV, E, M)
    for t in outs:
        t.set_output(True)
    g.validate()
    bufs = [poisoned(t, torch.half if t is outs[0] else torch.float) for t in outs]
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.execute({X: x, S: s, B: b, RM: rm, RV: rv, E: eps, M: mom, **dict(zip(outs, bufs))}, None)
    torch.cuda.synchronize()
    xd = x.double()
    mean = xd.mean(dim=(0, 2, 3), keepdim=True)
    var = xd.var(dim=(0, 2, 3), keepdim=True, unbiased=False)
    inv = 1 / torch.sqrt(var + 1e-5)
    n = x.numel() // 32
    want = [(xd - mean) * inv * s.double() + b.double(), mean, inv, 0.9 * rm.double() + 0.1 * mean,
            0.9 * rv.double() + 0.1 * var * n / (n - 1)]
    for got, ref, tol in zip(bufs, want, (5e-3, 1e-3, 1e-3, 1e-3, 1e-3)):
        assert rel_err(got, ref) < tol
