"""GPU: 1.32's module-level layer end to end: graphs made with ``cudnn.graph`` and built by ``cudnn.jit`` (over
``cudnn.graph_cache``), executed by the uids ``jit`` returns against float64 torch references (a conv + channel
reduction, and a rope written with pointwise ops), outputs poisoned first; and the handle model on a real GPU."""
from __future__ import annotations

import pytest

import cudnn_py as cudnn

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def rel_err(out, ref):
    assert torch.isfinite(out).all(), "not every element was written (NaN poison left)"
    return ((out.double() - ref).norm() / ref.norm()).item()


BODIES: list = []


def _conv_key(handle, x, w):
    return tuple(x.shape), tuple(x.stride()), tuple(w.shape), tuple(w.stride()), x.dtype, w.dtype


@cudnn.jit(heur_modes=[cudnn.heur_mode.A, cudnn.heur_mode.B])
@cudnn.graph_cache(key_fn=_conv_key)
def conv_reduce(handle, x, w):
    BODIES.append(tuple(x.shape))
    with cudnn.graph(handle) as (g, _):
        X, W = g.tensor_like(x), g.tensor_like(w)
        y = g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1])
        Y = g.reduction(y, mode=cudnn.reduction_mode.ADD)
        n, _, h, wd = X.get_dim()
        Y.set_output(True).set_dim([n, 1, h, wd]).set_data_type(cudnn.data_type.FLOAT)
    return g, [X, W, Y]


def test_conv_reduction_through_jit_and_graph_cache(handle):
    gen = torch.Generator(device="cuda").manual_seed(0)
    n, k, c, h, w = 4, 32, 16, 32, 32

    def inputs():
        x = torch.randn(n, c, h, w, device="cuda", generator=gen).half().to(memory_format=torch.channels_last)
        wt = torch.randn(k, c, 3, 3, device="cuda", generator=gen).half().to(memory_format=torch.channels_last)
        return x, wt

    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    x, wt = inputs()
    g, (xu, wu, yu) = conv_reduce(handle, x, wt)
    x2, wt2 = inputs()
    g2, uids2 = conv_reduce(handle, x2, wt2)
    assert g2 is g and uids2 == [xu, wu, yu] and BODIES.count((n, c, h, w)) == 1
    assert g.get_execution_plan_count() > 0
    workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
    for xi, wi in ((x, wt), (x2, wt2)):
        y = torch.full((n, 1, h, w), float("nan"), device="cuda").to(memory_format=torch.channels_last)
        g.execute({xu: xi, wu: wi, yu: y}, workspace, handle=handle)
        torch.cuda.synchronize()
        ref = torch.nn.functional.conv2d(xi.double(), wi.double(), padding=1).sum(dim=1, keepdim=True)
        assert rel_err(y, ref) < 5e-3


@cudnn.jit(heur_modes=[cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
def rope_graph(handle, x1, x2, cos1, cos2, sin1, sin2):
    with cudnn.graph(handle, intermediate_data_type=cudnn.data_type.FLOAT,
                     compute_data_type=cudnn.data_type.FLOAT) as (g, _):
        X1, X2 = g.tensor_like(x1), g.tensor_like(x2)
        C1, C2, S1, S2 = (g.tensor_like(t) for t in (cos1, cos2, sin1, sin2))
        Y1 = g.sub(a=g.mul(a=X1, b=C1), b=g.mul(a=X2, b=S1))
        Y1.set_output(True).set_data_type(torch.float16)
        Y2 = g.add(a=g.mul(a=X2, b=C2), b=g.mul(a=X1, b=S2))
        Y2.set_output(True).set_data_type(torch.float16)
    return g, [X1, X2, C1, C2, S1, S2, Y1, Y2]


def test_rope_with_pointwise_ops_through_jit(handle):
    b, heads, seq, d = 2, 4, 64, 64
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(b, heads, seq, d, device="cuda", generator=gen).half()
    theta = 1.0 / (10000 ** (torch.arange(0, d, 2, device="cuda", dtype=torch.float64) / d))
    angles = torch.outer(torch.arange(seq, device="cuda", dtype=torch.float64), theta).repeat(1, 2)
    cos, sin = angles.cos(), angles.sin()
    half = d // 2
    x1, x2 = x[..., :half], x[..., half:]  # strided views of x
    c1, c2 = cos[:, :half].float().contiguous()[None, None], cos[:, half:].float().contiguous()[None, None]
    s1, s2 = sin[:, :half].float().contiguous()[None, None], sin[:, half:].float().contiguous()[None, None]
    g, uids = rope_graph(handle, x1, x2, c1, c2, s1, s2)
    y = torch.full_like(x, float("nan"))
    y1, y2 = y[..., :half], y[..., half:]
    g.execute(dict(zip(uids, (x1, x2, c1, c2, s1, s2, y1, y2))), handle=handle)
    torch.cuda.synchronize()
    xd = x.double()
    ref = xd * cos + torch.cat((-xd[..., half:], xd[..., :half]), dim=-1) * sin
    assert rel_err(y, ref) < 5e-3


def test_the_handle_model_on_a_gpu():
    h = cudnn.create_handle()
    try:
        assert isinstance(h, cudnn.Handle) and h.backend_handle == int(h) and h.stream == 0
        assert h.device.compute_capability == torch.cuda.get_device_capability(h.ordinal)
        assert h.device.sm_count == torch.cuda.get_device_properties(h.ordinal).multi_processor_count
        assert h.device.device_name == torch.cuda.get_device_name(h.ordinal)
        s = torch.cuda.Stream()
        cudnn.set_stream(h, s.cuda_stream)
        assert h.stream == s.cuda_stream == cudnn.get_stream(h) == cudnn.get_stream(int(h))
        with cudnn.graph(h) as (g, _):
            a = g.tensor(name="A", dim=[1, 16, 32], stride=[512, 32, 1])
            b = g.tensor(name="B", dim=[1, 32, 8], stride=[256, 8, 1])
            c = g.matmul(a, b)
            c.set_output(True).set_data_type(cudnn.data_type.FLOAT)
        g.build([cudnn.heur_mode.A])
        A, B = torch.randn(1, 16, 32, device="cuda").half(), torch.randn(1, 32, 8, device="cuda").half()
        C = torch.full((1, 16, 8), float("nan"), device="cuda")
        with torch.cuda.stream(s):
            g.execute({a: A, b: B, c: C}, handle=h)
        s.synchronize()
        assert rel_err(C, A.double() @ B.double()) < 5e-3
    finally:
        cudnn.destroy_handle(h)
    assert h.backend_handle is None and h.stream is None
    cudnn.destroy_handle(h)  # cleared: nothing happens
