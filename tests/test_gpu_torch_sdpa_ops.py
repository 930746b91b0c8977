"""GPU: cudnn_py.sdpa_torch (torch.ops.cudnn_py.sdpa_fwd / sdpa_bwd) and the aten overrides against a float64
attention written from its definition (padding by per-batch lengths, a band [i + shift - left, i + shift + right]
with shift = l_kv - l_q bottom-right, a sink logit per head in every row's softmax): dense BHSD (causal, windows,
bottom-right, GQA, a BSHD view, sinks, padded batches), THD / varlen with cu_seqlens, the LSE, autograd gradients
(dense and THD), torch.compile(fullgraph=True) over a block, a refusal raised as cudnnGraphNotSupportedError, and
torch.nn.functional.scaled_dot_product_attention under the CUDNN backend routed through ours by
install_sdpa_overrides(). Fresh seeded random inputs; torch's caching allocator is poisoned with NaN before each
call, so an element left unwritten reads NaN. (Written without a GPU; first run on the device by the lead.)

    python -m pytest -q tests/test_gpu_torch_sdpa_ops.py
"""
from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
F = torch.nn.functional

import cudnn_py as cudnn  # noqa: E402
import cudnn_py.torch as ct  # noqa: E402

sdpa = cudnn.sdpa_torch
DTYPES = {"fp16": (torch.float16, 1e-2, 2e-2), "bf16": (torch.bfloat16, 2e-2, 3e-2)}  # (dtype, fwd tol, grad tol)
LSE_TOL = 2e-2  # absolute, natural log: the scores of fp16 / bf16 inputs accumulated in fp32


def poison(*numels_dtypes):
    blocks = [torch.full((n,), float("nan"), dtype=dt, device="cuda") for n, dt in numels_dtypes]
    del blocks


def rel_err(got, ref):
    got, ref = got.double(), ref.double()
    assert torch.isfinite(got).all(), "not every element was written (NaN poison left)"
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def reference(q, k, v, scale, *, left=None, right=None, bottom_right=False, sinks=None, lq=None, lkv=None):
    """(O, LSE (b, h, s_q)) in float64 of (b, h, s, d) tensors; a fully masked row gives O = 0."""
    q, k, v = q.double(), k.double(), v.double()
    b, h, s_q, _ = q.shape
    s_kv = k.shape[2]
    k, v = k.repeat_interleave(h // k.shape[1], 1), v.repeat_interleave(h // v.shape[1], 1)
    s = q @ k.transpose(-1, -2) * scale
    rows = torch.arange(s_q, device=q.device).view(1, 1, -1, 1)
    cols = torch.arange(s_kv, device=q.device).view(1, 1, 1, -1)
    lq = (torch.full((b,), s_q) if lq is None else lq.cpu()).to(q.device).view(b, 1, 1, 1)
    lkv = (torch.full((b,), s_kv) if lkv is None else lkv.cpu()).to(q.device).view(b, 1, 1, 1)
    keep = (rows < lq) & (cols < lkv)
    shift = (lkv - lq) if bottom_right else 0
    if right is not None:
        keep &= cols <= rows + shift + right
    if left is not None:
        keep &= cols > rows + shift - left
    s = s.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.double().view(1, h, 1, 1).expand(b, h, s_q, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0).unsqueeze(-1))
    if sinks is not None:
        p = p[..., :-1]
    return p @ v, lse


def bounds(is_causal=False, window_left=-1, window_right=-1):
    right = window_right if window_right >= 0 else (0 if is_causal else None)
    return (window_left if window_left >= 0 else None), right


def gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def randn(g, *shape, dtype):
    return torch.randn(shape, generator=g, device="cuda").to(dtype)


DENSE = {
    "causal": dict(is_causal=True),
    "none": dict(),
    "gqa-causal": dict(h_k=2, is_causal=True),
    "window": dict(is_causal=True, window_left=40),
    "band": dict(window_left=24, window_right=8),
    "bottom-right": dict(s_q=64, s_kv=160, is_causal=True, causal_bottom_right=True),
    "bottom-right-window": dict(s_q=64, s_kv=160, is_causal=True, causal_bottom_right=True, window_left=48),
    "bshd": dict(bshd=True, is_causal=True),
    "s100-over-150": dict(s_q=100, s_kv=150),
    "d128": dict(d=128, is_causal=True),
    "sinks": dict(sinks=True, is_causal=True, grad=False),
    "padded": dict(padded=True, is_causal=True, grad=False),
    "padded-bottom-right": dict(padded=True, s_q=96, s_kv=160, is_causal=True, causal_bottom_right=True, grad=False),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(DENSE))
def test_dense_against_float64(dtype, case):
    kw = dict(DENSE[case])
    tdtype, fwd_tol, grad_tol = DTYPES[dtype]
    b, h_q, h_k = 2, 4, kw.pop("h_k", 4)
    s_q, s_kv, d = kw.pop("s_q", 128), kw.pop("s_kv", None), kw.pop("d", 64)
    s_kv = s_kv or s_q
    grad, bshd = kw.pop("grad", True), kw.pop("bshd", False)
    g = gen(list(DENSE).index(case) * 10 + len(dtype))

    def make(h, s):
        return randn(g, b, s, h, d, dtype=tdtype).transpose(1, 2) if bshd else randn(g, b, h, s, d, dtype=tdtype)

    q, k, v = make(h_q, s_q), make(h_k, s_kv), make(h_k, s_kv)
    extra = {}
    lq = lkv = None
    if kw.pop("sinks", False):
        extra["sinks"] = torch.randn(h_q, generator=g, device="cuda")
    if kw.pop("padded", False):
        lq = torch.randint(1, s_q + 1, (b,), generator=g, device="cuda", dtype=torch.int32)
        lkv = torch.randint(1, s_kv + 1, (b,), generator=g, device="cuda", dtype=torch.int32)
        lq[0], lkv[0] = s_q, s_kv
        if kw.get("causal_bottom_right"):
            lkv = torch.maximum(lkv, lq)  # (bottom-right: every query row has its diagonal)
        extra.update(seq_len_q=lq, seq_len_kv=lkv)
    leaves = [t.detach().clone().requires_grad_(grad) for t in (q, k, v)]
    scale = 1 / math.sqrt(d)
    poison((b * h_q * s_q * d, tdtype), (b * h_q * s_q, torch.float32))
    o, lse = sdpa(*leaves, return_lse=True, **kw, **extra)
    assert o.shape == (b, h_q, s_q, d) and o.dtype == tdtype and lse.shape == (b, h_q, s_q, 1)
    assert o.stride() == ct.config.like_layout(o.shape, q.stride())  # O takes q's layout
    left, right = bounds(kw.get("is_causal", False), kw.get("window_left", -1), kw.get("window_right", -1))
    ref_leaves = [t.detach().double().requires_grad_(grad) for t in (q, k, v)]
    o_ref, lse_ref = reference(*ref_leaves, scale, left=left, right=right, sinks=extra.get("sinks"),
                               bottom_right=kw.get("causal_bottom_right", False), lq=lq, lkv=lkv)
    if lq is not None:  # rows past a batch's length are not the reference's to say
        for n in range(b):
            n_rows = int(lq[n])
            assert rel_err(o[n, :, :n_rows], o_ref[n, :, :n_rows]) < fwd_tol, f"batch {n}"
            assert (lse[n, :, :n_rows, 0].double() - lse_ref[n, :, :n_rows]).abs().max() < LSE_TOL
        return
    assert rel_err(o, o_ref) < fwd_tol
    assert (lse[..., 0].double() - lse_ref).abs().max() < LSE_TOL
    if grad:
        d_o = randn(g, *o.shape, dtype=tdtype)
        grads = torch.autograd.grad(o, leaves, d_o)
        grads_ref = torch.autograd.grad(o_ref, ref_leaves, d_o.double())
        for name, gr, gr_ref, leaf in zip(("dq", "dk", "dv"), grads, grads_ref, leaves):
            assert gr.shape == leaf.shape and gr.stride() == ct.config.like_layout(leaf.shape, leaf.stride())
            assert rel_err(gr, gr_ref) < grad_tol, name


def test_output_only_without_lse_and_the_refused_lse_backward():
    q, k, v = (torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    o = sdpa(q, k, v, is_causal=True)
    assert isinstance(o, torch.Tensor) and o.shape == q.shape
    assert rel_err(o, reference(q, k, v, 1 / 8, right=0)[0]) < 1e-2
    with pytest.raises(RuntimeError, match="requires return_lse=True"):
        o.sum().backward()


def test_a_refusal_is_the_officials_class():
    """Bottom-right causal with more query rows than keys and no lengths: refused (cuDNN leaves it undefined)."""
    q = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.float16)
    k = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError):
        sdpa(q, k, k, is_causal=True, causal_bottom_right=True)


def pack(x, lens):
    """(b, h, s, d) -> the (Σ lens, h, d) THD buffer of each batch's first lens[b] rows."""
    return torch.cat([x[n, :, : int(lens[n])].transpose(0, 1) for n in range(x.shape[0])]).contiguous()


THD = {
    "causal": dict(is_causal=True),
    "none": dict(),
    "window": dict(is_causal=True, window_left=20),
    "gqa": dict(h_k=2, is_causal=True),
}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(THD))
def test_thd_against_float64(dtype, case):
    kw = dict(THD[case])
    tdtype, fwd_tol, grad_tol = DTYPES[dtype]
    b, h_q, h_k, d = 3, 4, kw.pop("h_k", 4), 64
    g = gen(100 + list(THD).index(case) * 10 + len(dtype))
    lq = torch.randint(1, 100, (b,), generator=g, device="cuda")
    # self-attention lengths (cu serves q and kv): causal and windows per sequence, top-left
    s_max = int(lq.max())
    cu = torch.zeros(b + 1, dtype=torch.int32, device="cuda")
    cu[1:] = torch.cumsum(lq, 0)
    qd, kd, vd = (randn(g, b, h, s_max, d, dtype=tdtype) for h in (h_q, h_k, h_k))
    q, k, v = (pack(x, lq).requires_grad_() for x in (qd, kd, vd))
    total = int(cu[-1])
    poison((total * h_q * d, tdtype), (total * h_q, torch.float32))
    o, lse = sdpa(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=s_max, max_seqlen_kv=s_max,
                  return_lse=True, **kw)
    assert o.shape == (total, h_q, d) and o.is_contiguous() and lse.shape == (total, h_q, 1)
    d_o = randn(g, total, h_q, d, dtype=tdtype)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    left, right = bounds(kw.get("is_causal", False), kw.get("window_left", -1))
    for n in range(b):
        a, z = int(cu[n]), int(cu[n + 1])
        leaves = [t.detach()[a:z].transpose(0, 1).unsqueeze(0).double().requires_grad_() for t in (q, k, v)]
        o_ref, lse_ref = reference(*leaves, 1 / math.sqrt(d), left=left, right=right)
        assert rel_err(o[a:z], o_ref[0].transpose(0, 1)) < fwd_tol, f"sequence {n}"
        assert (lse[a:z, :, 0].double() - lse_ref[0].transpose(0, 1)).abs().max() < LSE_TOL, f"sequence {n}"
        grads_ref = torch.autograd.grad(o_ref, leaves, d_o[a:z].transpose(0, 1).unsqueeze(0).double())
        for name, gr, gr_ref in zip(("dq", "dk", "dv"), grads, grads_ref):
            assert rel_err(gr[a:z], gr_ref[0].transpose(0, 1)) < grad_tol, f"sequence {n}, {name}"


def test_torch_compile_fullgraph_block_matches_eager():
    b, s, h, d = 2, 96, 4, 64
    g = gen(7)
    x = randn(g, b, s, h * d, dtype=torch.bfloat16).requires_grad_()
    w = (randn(g, h * d, 3 * h * d, dtype=torch.bfloat16) / math.sqrt(h * d)).requires_grad_()

    def block(x, w):
        q, k, v = (t.view(b, s, h, d).transpose(1, 2) for t in (x @ w).chunk(3, dim=-1))
        o, _ = cudnn.sdpa_torch(q, k, v, is_causal=True, window_left=32, return_lse=True)  # (autograd needs the LSE)
        return o.transpose(1, 2).reshape(b, s, h * d)

    compiled = torch.compile(block, fullgraph=True)
    eager_out = block(x, w)
    eager_grads = torch.autograd.grad(eager_out.float().square().mean(), (x, w))
    out = compiled(x, w)
    grads = torch.autograd.grad(out.float().square().mean(), (x, w))
    assert rel_err(out, eager_out) < 1e-2
    for gr, ge in zip(grads, eager_grads):
        assert rel_err(gr, ge) < 2e-2


# ---- the aten overrides --------------------------------------------------------------------------------------------
@pytest.fixture
def overrides():
    import cudnn_py.torch.overrides as ov

    if not ov.worker_ops_present():
        pytest.skip(f"torch {torch.__version__} has no aten::_cudnn_attention_forward (the overrides' fallback)")
    handle = ct.install_sdpa_overrides()
    try:
        yield ct.calls
    finally:
        handle.remove()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("causal", [True, False])
def test_the_cudnn_backend_of_torchs_function_is_ours(overrides, dtype, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tdtype, fwd_tol, grad_tol = DTYPES[dtype]
    g = gen(200 + causal)
    q, k, v = (randn(g, 2, 4, 160, 64, dtype=tdtype).requires_grad_() for _ in range(3))
    before = dict(overrides)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert overrides["fwd"] == before["fwd"] + 1, overrides
    d_o = randn(g, *o.shape, dtype=tdtype)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    assert overrides["bwd"] == before["bwd"] + 1, overrides
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref, _ = reference(*ref_leaves, 1 / 8, right=0 if causal else None)
    grads_ref = torch.autograd.grad(o_ref, ref_leaves, d_o.double())
    assert rel_err(o, o_ref) < fwd_tol
    for name, gr, gr_ref in zip(("dq", "dk", "dv"), grads, grads_ref):
        assert rel_err(gr, gr_ref) < grad_tol, name


def test_a_bias_goes_to_torchs_kernel(overrides):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    bias = torch.randn(2, 4, 128, 128, device="cuda", dtype=torch.float16)
    before = dict(overrides)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert overrides["fwd_cpp"] == before["fwd_cpp"] + 1 and overrides["fwd"] == before["fwd"]
    q64, k64, v64 = q.double(), k.double(), v.double()
    want = torch.softmax(q64 @ k64.transpose(-1, -2) / 8 + bias.double(), -1) @ v64
    assert rel_err(o, want) < 1e-2


def test_varlen_attn_is_ours_where_torch_has_it(overrides):
    varlen = pytest.importorskip("torch.nn.attention.varlen")
    g = gen(300)
    lens = torch.tensor([37, 64, 90], device="cuda")
    cu = torch.zeros(4, dtype=torch.int32, device="cuda")
    cu[1:] = torch.cumsum(lens, 0)
    total, s_max = int(cu[-1]), int(lens.max())
    q, k, v = (randn(g, total, 4, 64, dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    before = dict(overrides)
    o = varlen.varlen_attn(q, k, v, cu, cu, s_max, s_max, window_size=(-1, 0))
    if dict(overrides) == before:  # (seen with torch 2.11: its varlen_attn reached none of the replaced ops)
        pytest.xfail(f"torch {torch.__version__}'s varlen_attn does not reach the ops the overrides replace")
    assert overrides["fwd"] == before["fwd"] + 1, overrides
    d_o = randn(g, *o.shape, dtype=torch.bfloat16)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    assert overrides["bwd"] == before["bwd"] + 1, overrides
    for n in range(3):
        a, z = int(cu[n]), int(cu[n + 1])
        leaves = [t.detach()[a:z].transpose(0, 1).unsqueeze(0).double().requires_grad_() for t in (q, k, v)]
        o_ref, _ = reference(*leaves, 1 / 8, right=0)
        assert rel_err(o[a:z], o_ref[0].transpose(0, 1)) < 2e-2
        grads_ref = torch.autograd.grad(o_ref, leaves, d_o[a:z].transpose(0, 1).unsqueeze(0).double())
        for gr, gr_ref in zip(grads, grads_ref):
            assert rel_err(gr[a:z], gr_ref[0].transpose(0, 1)) < 3e-2
    assert all(isinstance(name, str) for name in ct.served_plan_names())
