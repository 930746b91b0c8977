"""GPU: cudnn.ops.norm.rms_norm and layer_norm (torch custom operators on cudnn_py's norm graphs) against float64
references computed with torch on the GPU: the forward (training, with the saved statistics checked too, and
inference), the gradients through autograd against F.rms_norm / F.layer_norm's in float64, fp16 / bf16 / fp32.
Fresh seeded random inputs on every test; the operators allocate their outputs, so torch's caching allocator is
poisoned first (NaN-filled blocks of the outputs' sizes freed just before the call, which the outputs then reuse):
an element left unwritten reads NaN. Also: torch.library.opcheck on CUDA tensors, torch.compile(fullgraph=True)
over a small block (forward and gradients as eager), the graph caches, a side stream, offset (unaligned) views.

    python -m pytest -q tests/test_gpu_torch_norm_ops.py
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
F = torch.nn.functional

import cudnn_py as cudnn  # noqa: E402

ops = cudnn.ops.norm
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
TOL = {"float16": 5e-3, "bfloat16": 2e-2, "float32": 1e-4}  # the output rounding of the io type
STATS_TOL = 1e-4  # the statistics are fp32 outputs of fp32 arithmetic
SHAPES = [(4, 33, 384), (1024, 1024), (7, 4096)]


def rel_err(out, ref):
    assert torch.isfinite(out).all(), "not every element was written (NaN poison left)"
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def poison_allocator(*like):
    """Fill blocks of the sizes of ``like`` (tensors or (numel, dtype)) with NaN and free them: torch's caching
    allocator hands them to the next allocations of those sizes (the operators' outputs)."""
    blocks = []
    for t in like:
        numel, dtype = (t.numel(), t.dtype) if isinstance(t, torch.Tensor) else t
        blocks.append(torch.full((numel,), float("nan"), dtype=dtype, device="cuda"))
    del blocks


def gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def randn(g, shape, dtype, grad=False):
    return torch.randn(shape, generator=g, device="cuda").to(dtype).requires_grad_(grad)


def rms_ref(x, w, b, eps):
    x, w = x.double(), w.double()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    return y if b is None else y + b.double()


def case_id(c):
    return "-".join(str(v) for v in c)


RMS = [(dt, shape, bias) for dt in DTYPES for shape in SHAPES for bias in (False, True)]


@pytest.mark.parametrize("dt,shape,bias", RMS, ids=[case_id(c) for c in RMS])
def test_rms_norm_forward_and_gradients(dt, shape, bias):
    dtype = DTYPES[dt]
    g = gen(RMS.index((dt, shape, bias)))
    x = randn(g, shape, dtype, True)
    w = (torch.rand(shape[-1], generator=g, device="cuda") + 0.5).to(dtype).requires_grad_()
    b = randn(g, shape[-1], dtype, True) if bias else None
    eps = 1e-5
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    bd = b.detach().double().requires_grad_() if bias else None
    ref = F.rms_norm(xd, (shape[-1],), wd, eps) + (bd if bias else 0)
    assert rel_err(rms_ref(x, w, b, eps), ref) < 1e-12  # (the reference is torch's)

    poison_allocator(x, x)
    y = ops.rms_norm(x, w, b, eps)
    assert y.shape == x.shape and y.dtype == dtype
    assert rel_err(y, ref) < TOL[dt]
    dy = randn(g, shape, dtype)
    ref.backward(dy.double())
    poison_allocator(x, w, w)
    y.backward(dy)
    assert rel_err(x.grad, xd.grad) < TOL[dt] * 2
    assert rel_err(w.grad, wd.grad) < TOL[dt] * 2
    if bias:
        assert rel_err(b.grad, bd.grad) < TOL[dt] * 2

    with torch.no_grad():  # the inference graph (no statistics)
        poison_allocator(x)
        assert rel_err(ops.rms_norm(x, w, b, eps), ref.detach()) < TOL[dt]


LN = [(dt, shape, params) for dt in DTYPES for shape in SHAPES for params in ("none", "io", "fp32")
      if not (params == "fp32" and dt == "float32")]


@pytest.mark.parametrize("dt,shape,params", LN, ids=[case_id(c) for c in LN])
def test_layer_norm_forward_and_gradients(dt, shape, params):
    dtype = DTYPES[dt]
    g = gen(100 + LN.index((dt, shape, params)))
    h = shape[-1]
    x = randn(g, shape, dtype, True)
    pdtype = torch.float32 if params == "fp32" else dtype
    w = b = None
    if params != "none":
        w = (torch.rand(h, generator=g, device="cuda") + 0.5).to(pdtype).requires_grad_()
        b = randn(g, h, pdtype, True)
    eps = 1e-5
    xd = x.detach().double().requires_grad_()
    wd = w.detach().double().requires_grad_() if w is not None else None
    bd = b.detach().double().requires_grad_() if b is not None else None
    ref = F.layer_norm(xd, (h,), wd, bd, eps)

    poison_allocator(x, x)
    y = ops.layer_norm(x, (h,), w, b, eps)
    assert y.shape == x.shape and y.dtype == dtype
    assert rel_err(y, ref) < TOL[dt]
    dy = randn(g, shape, dtype)
    ref.backward(dy.double())
    poison_allocator(x, (h, pdtype), (h, pdtype))
    y.backward(dy)
    assert rel_err(x.grad, xd.grad) < TOL[dt] * 2
    if w is not None:
        ptol = TOL["float32"] * 10 if pdtype == torch.float32 else TOL[dt] * 2
        assert w.grad.dtype == pdtype and rel_err(w.grad, wd.grad) < ptol
        assert b.grad.dtype == pdtype and rel_err(b.grad, bd.grad) < ptol

    with torch.inference_mode():
        poison_allocator(x)
        assert rel_err(ops.layer_norm(x, (h,), w, b, eps), ref.detach()) < TOL[dt]


@pytest.mark.parametrize("dt", list(DTYPES))
def test_training_operators_save_the_statistics(dt):
    dtype, g = DTYPES[dt], gen(7)
    rows, h, eps = 96, 768, 1e-6
    x = randn(g, (rows, h, 1, 1), dtype)
    xd = x.double().reshape(rows, h)
    s = randn(g, (1, h, 1, 1), dtype)
    poison_allocator(x, (rows, torch.float32))
    y, inv = torch.ops.cudnn_py.rmsnorm(x, s, eps)
    assert inv.shape == (rows, 1, 1, 1) and inv.dtype == torch.float32
    assert rel_err(inv.reshape(rows), torch.rsqrt(xd.pow(2).mean(-1) + eps)) < STATS_TOL
    sf, bf = s.float(), randn(g, (1, h, 1, 1), torch.float32)
    poison_allocator(x, (rows, torch.float32), (rows, torch.float32))
    y, mean, inv = torch.ops.cudnn_py.layernorm(x, sf, bf, eps)
    assert rel_err(mean.reshape(rows), xd.mean(-1)) < STATS_TOL
    assert rel_err(inv.reshape(rows), torch.rsqrt(xd.var(-1, unbiased=False) + eps)) < STATS_TOL
    ref = F.layer_norm(xd, (h,), sf.double().reshape(h), bf.double().reshape(h), eps)
    assert rel_err(y.reshape(rows, h), ref) < TOL[dt]


def test_opcheck_on_cuda_tensors():
    g = gen(3)
    x = randn(g, (64, 256, 1, 1), torch.bfloat16, True)
    s, b = randn(g, (1, 256, 1, 1), torch.bfloat16, True), randn(g, (1, 256, 1, 1), torch.bfloat16, True)
    sf, bf = s.detach().float().requires_grad_(), b.detach().float().requires_grad_()
    d = torch.ops.cudnn_py
    for op, args in [(d.rmsnorm, (x, s, 1e-5, b)), (d.rmsnorm, (x, s, 1e-5)),
                     (d.rmsnorm_inference, (x.detach(), s.detach(), 1e-5)), (d.layernorm, (x, sf, bf, 1e-5)),
                     (d.layernorm_inference, (x.detach(), sf.detach(), bf.detach(), 1e-5))]:
        result = torch.library.opcheck(op.default, args)
        assert set(result.values()) == {"SUCCESS"}, (op, result)


class Block(torch.nn.Module):
    """Pre-norm residual MLP: x + W2 gelu(W1 layer_norm(rms_norm(x)))."""

    def __init__(self, h):
        super().__init__()
        self.rms_w = torch.nn.Parameter(torch.rand(h, device="cuda", dtype=torch.bfloat16) + 0.5)
        self.ln_w = torch.nn.Parameter(torch.rand(h, device="cuda", dtype=torch.float32) + 0.5)
        self.ln_b = torch.nn.Parameter(torch.randn(h, device="cuda", dtype=torch.float32))
        self.up = torch.nn.Linear(h, 2 * h, device="cuda", dtype=torch.bfloat16)
        self.down = torch.nn.Linear(2 * h, h, device="cuda", dtype=torch.bfloat16)

    def forward(self, x):
        t = ops.rms_norm(x, self.rms_w, eps=1e-6)
        t = ops.layer_norm(t, (x.shape[-1],), self.ln_w, self.ln_b)
        return x + self.down(F.gelu(self.up(t)))


def test_torch_compile_fullgraph_over_a_block():
    torch.manual_seed(0)
    block = Block(256)
    x = torch.randn(4, 64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    eager = block(x)
    eager.backward(dy)
    grads = [p.grad.clone() for p in (x, *block.parameters())]
    for p in (x, *block.parameters()):
        p.grad = None
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    out = compiled(x)
    out.backward(dy)
    assert rel_err(out, eager) < 1e-2
    for got, want in zip([p.grad for p in (x, *block.parameters())], grads):
        assert rel_err(got, want) < 2e-2
    with torch.no_grad():
        assert rel_err(compiled(x), eager) < 1e-2  # (recompiled for no-grad: the inference operators)


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_half_layer_norm_parameters_are_not_cast(dt):
    """A half model's layer_norm weights go to the graphs in their own type: no FLOAT copy of the weight and bias
    (and no cast of their gradients back) on each call. The cached forward and backward graphs say which type they
    take (FLOAT would mean the running cuDNN refused the half one, and the cast path served)."""
    from cudnn_py.ops.norm._common import CACHES

    dtype, h = DTYPES[dt], 1024
    x = torch.randn(64, h, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.ones(h, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.zeros(h, device="cuda", dtype=dtype, requires_grad=True)
    ops.layer_norm(x, (h,), w, b).sum().backward()
    for op in ("cudnn_py::layernorm", "cudnn_py::layernorm_bwd"):
        entries = [e for k, e in CACHES[op]._entries.items() if k[1] == dtype and k[2] == dtype]
        assert entries and all(e.param_dtype == dtype for e in entries), (op, entries)
    assert w.grad.dtype == dtype and b.grad.dtype == dtype
    assert x.grad_fn is None and torch.allclose(b.grad.float(), torch.full((h,), 64.0, device="cuda"))


def test_graphs_are_cached_per_shape_dtype_and_eps():
    from cudnn_py.ops.norm._common import CACHES

    x = torch.randn(8, 512, device="cuda", dtype=torch.float16)
    w = torch.ones(512, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        ops.rms_norm(x, w)
        c = CACHES["cudnn_py::rmsnorm_inference"]
        n, hits = len(c), c.hits
        ops.rms_norm(x.clone(), w)
        assert (len(c), c.hits) == (n, hits + 1)
        ops.rms_norm(x, w, eps=1e-3)  # eps is carried by the graph: another graph
        ops.rms_norm(x[:4], w)
        assert len(c) == n + 2


def test_side_stream_and_offset_views():
    g = gen(11)
    base = randn(g, (8 * 384 + 1,), torch.bfloat16)
    x = base[1:].view(8, 384)  # 2 bytes past an allocation: not 16-byte aligned
    assert x.data_ptr() % 16
    w = randn(g, 384, torch.bfloat16)
    ref = rms_ref(x, w, None, 1e-5)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        y = ops.rms_norm(x, w)
        z = ops.layer_norm(x.t().contiguous().t(), (384,))
    torch.cuda.current_stream().wait_stream(side)
    assert rel_err(y, ref) < TOL["bfloat16"]
    assert rel_err(z, F.layer_norm(x.double(), (384,))) < TOL["bfloat16"]
    xt = randn(g, (384, 8), torch.bfloat16, True)  # a transposed (non-contiguous) input
    y = ops.rms_norm(xt.t(), w)
    y.sum().backward()
    xd = xt.detach().double().requires_grad_()
    F.rms_norm(xd.t(), (384,), w.double(), 1e-5).sum().backward()
    assert rel_err(xt.grad, xd.grad) < 2 * TOL["bfloat16"]


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_the_operators_run_the_engine_the_placement_table_puts_first(dt):
    """#38: the torch norm operators plan with the default modes, so they run what the placement table puts first
    on this GPU (cudnn_py's norm engine on sm_90 for bf16 / fp16), and still match float64."""
    from cudnn_py.engines import placement
    from cudnn_py.engines.engine_ids import NORM_FORWARD_ENGINE_ID
    from cudnn_py.ops.norm._common import CACHES

    dtype = DTYPES[dt]
    major, minor = torch.cuda.get_device_capability()
    x = randn(gen(3), (256, 1024), dtype)
    w = randn(gen(4), (1024,), dtype)
    for name, call, op in (("rmsnorm", lambda: ops.rms_norm(x, w), "cudnn_py::rmsnorm_inference"),
                           ("layernorm", lambda: ops.layer_norm(x, (1024,), w, w), "cudnn_py::layernorm_inference")):
        with torch.no_grad():
            y = call()
        graphs = [e.graph for e in CACHES[op]._entries.values()]
        ours = [g.selected_engine is not None and g.selected_engine.engine_id == NORM_FORWARD_ENGINE_ID
                for g in graphs]
        want = placement.lookup(name, "bf16" if dt == "bfloat16" else "fp16", major * 10 + minor) == placement.OURS
        assert ours and any(ours) == want, (name, [g.plans for g in graphs])
        ref = rms_ref(x, w, None, 1e-5) if name == "rmsnorm" else F.layer_norm(
            x.double(), (1024,), w.double(), w.double(), 1e-5)
        assert rel_err(y, ref) < TOL[dt]


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_eager_calls_skip_the_dispatcher_and_match_the_operators(op, monkeypatch):
    """In eager mode the public functions run the operators' kernels through their autograd Function (no
    torch.library dispatch); under a dispatch mode they go through the registered operators. Both give the same
    output and gradients (the same graphs), bit for bit; under create_graph both refuse a second derivative alike."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from cudnn_py.ops.norm import _common

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(str(func))
            return func(*args, **(kwargs or {}))

    g = gen(99)
    x = randn(g, (256, 768), torch.bfloat16, True)
    w = (torch.rand(768, generator=g, device="cuda") + 0.5).to(torch.bfloat16).requires_grad_()
    b = randn(g, 768, torch.bfloat16, True)
    dy = randn(g, (256, 768), torch.bfloat16)
    fn = (lambda: ops.rms_norm(x, w, b)) if op == "rms_norm" else (lambda: ops.layer_norm(x, (768,), w, b))
    applied = []
    real = _common.eager_call
    monkeypatch.setattr(_common, "eager_call", lambda tensors: applied.append(real(tensors)) or applied[-1])

    def run(mode):
        for t in (x, w, b):
            t.grad = None
        with mode:
            y = fn()
            y.backward(dy)
        return y.detach(), [t.grad.clone() for t in (x, w, b)]

    import contextlib
    import warnings

    eager_y, eager_grads = run(contextlib.nullcontext())
    assert applied == [True]
    seen = Seen()
    op_y, op_grads = run(seen)
    assert applied[-1] is False and any(name.startswith("cudnn_py.") for name in seen.ops), seen.ops
    assert torch.equal(eager_y, op_y)
    for got, want in zip(eager_grads, op_grads):
        assert torch.equal(got, want)
    outcomes = []
    for mode in (contextlib.nullcontext(), Seen()):  # a second derivative: whatever the operator does, both alike
        with mode, warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            y = fn()
            (gx,) = torch.autograd.grad(y, (x,), dy.clone().requires_grad_(), create_graph=True)
            try:
                gx.float().sum().backward()
                outcomes.append(("no error", gx.requires_grad, len(said) > 0))
            except RuntimeError as exc:
                outcomes.append((type(exc).__name__, gx.requires_grad, len(said) > 0))
    assert outcomes[0] == outcomes[1], outcomes
