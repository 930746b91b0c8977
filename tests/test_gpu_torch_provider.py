"""GPU: cudnn_py.torch serving torch.nn.functional.scaled_dot_product_attention, forward and autograd gradients
(dq, dk, dv), against an explicit float64 softmax(q kᵀ · scale + mask) v; causal (top-left) and not, GQA through
enable_gqa, sequence lengths that are not multiples of 64, s_q != s_kv, BSHD views, a float mask as bias, fp16 and
bf16; fresh random inputs. A dropout call falls back to torch (the same result as torch's own under the same seed)
and says so once; uninstall restores torch's function object. (Written without a GPU or torch; first run on the
device by the lead.)"""
from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cudnn_py.torch as ct

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)
F = torch.nn.functional
DTYPES = {"fp16": (torch.float16, 1e-2, 2e-2), "bf16": (torch.bfloat16, 2e-2, 3e-2)}  # (dtype, fwd tol, grad tol)


@pytest.fixture(params=["auto", "override"])
def installed(request):
    original = F.scaled_dot_product_attention
    used = ct.install(mechanism=request.param)
    assert used in ("registry", "override")
    try:
        yield ct.provider()
    finally:
        ct.uninstall()
    assert F.scaled_dot_product_attention is original


def reference(q, k, v, scale, causal=False, mask=None):
    """float64 attention from its definition (GQA: each query head reads key / value head h // group)."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = q @ k.transpose(-1, -2) * scale
    if mask is not None:
        s = s + mask.double()
    if causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()  # top-left, as torch defines it
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def rel_err(got, ref):
    got, ref = got.double(), ref.double()
    assert torch.isfinite(got).all()
    return ((got - ref).norm() / ref.norm()).item()


def inputs(dtype, b, h_q, h_kv, s_q, s_kv, d, bshd=False):
    def make(h, s):
        if bshd:  # (b, s, h, d) memory seen as (b, h, s, d): what a projection's .view().transpose(1, 2) gives
            return torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2)
        return torch.randn(b, h, s, d, device="cuda", dtype=dtype)

    return make(h_q, s_q), make(h_kv, s_kv), make(h_kv, s_kv)


CASES = {
    "causal": dict(causal=True),
    "non-causal": dict(),
    "gqa-causal": dict(h_q=8, h_kv=2, causal=True),
    "gqa": dict(h_q=8, h_kv=4),
    "s100": dict(s_q=100, s_kv=100, causal=True),  # not a multiple of 64
    "s100-over-150": dict(s_q=100, s_kv=150),
    "s100-over-150-causal": dict(s_q=100, s_kv=150, causal=True),  # top-left
    "bshd": dict(bshd=True, causal=True),
    "d128": dict(d=128, causal=True),
    "scale": dict(scale=0.3),
    "float-mask": dict(mask=True),
}


def run_case(dtype_name, provider, b=2, h_q=4, h_kv=4, s_q=192, s_kv=None, d=64, causal=False, bshd=False,
             scale=None, mask=False):
    dtype, fwd_tol, grad_tol = DTYPES[dtype_name]
    s_kv = s_kv or s_q
    q, k, v = inputs(dtype, b, h_q, h_kv, s_q, s_kv, d, bshd)
    attn_mask = torch.randn(1, h_q, s_q, s_kv, device="cuda", dtype=dtype) if mask else None
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    served = provider.served
    kw = dict(is_causal=causal, enable_gqa=h_q != h_kv)
    if scale is not None:
        kw["scale"] = scale
    o = F.scaled_dot_product_attention(*leaves, attn_mask=attn_mask, **kw)
    assert provider.served == served + 1, "not served by cudnn_py (see the cudnn_py.torch log)"
    assert o.dtype == dtype and o.shape == (b, h_q, s_q, d)
    # O in q's dimension order, as torch's own attention lays it out (a BSHD q: a BSHD O)
    assert o.transpose(1, 2).is_contiguous() if bshd else o.is_contiguous()
    d_o = torch.randn_like(o)
    grads = torch.autograd.grad(o, leaves, d_o)
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o_ref = reference(*ref_leaves, scale if scale is not None else 1 / math.sqrt(d), causal, attn_mask)
    grads_ref = torch.autograd.grad(o_ref, ref_leaves, d_o.double())
    assert rel_err(o, o_ref) < fwd_tol
    for name, g, g_ref, leaf in zip(("dq", "dk", "dv"), grads, grads_ref, leaves):
        assert g.shape == leaf.shape
        err = rel_err(g, g_ref)
        assert err < grad_tol, f"{name}: relative error {err:.3e}"
    return o


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(CASES))
def test_forward_and_gradients_against_float64(installed, dtype, case):
    run_case(dtype, installed, **CASES[case])


def test_inference_without_grad_and_the_cache(installed):
    q, k, v = inputs(torch.float16, 2, 4, 4, 130, 130, 64)
    with torch.no_grad():
        o1 = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o2 = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert installed.served == 2 and len(installed.cache) == 1 and installed.cache.hits == 1
    assert torch.equal(o1, o2)
    assert rel_err(o1, reference(q, k, v, 1 / 8, causal=True)) < 1e-2
    (cfg,) = installed.cache.keys()
    assert not cfg.requires_grad and cfg.causal


def test_create_graph_returns_the_gradients_and_refuses_to_differentiate_them(installed):
    """cuDNN's backward is not differentiable: under create_graph=True the gradients come back (correct), and
    differentiating them (here through dO, which requires grad) raises torch's once_differentiable error; without
    create_graph the same gradients."""
    q, k, v = (t.requires_grad_() for t in inputs(torch.bfloat16, 2, 4, 4, 96, 96, 64))
    d_o = torch.randn(2, 4, 96, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    grads = torch.autograd.grad(o, (q, k, v), d_o, create_graph=True)
    plain = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), d_o.detach())
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    grads_ref = torch.autograd.grad(reference(*ref_leaves, 1 / 8, causal=True), ref_leaves, d_o.detach().double())
    for g, p, g_ref in zip(grads, plain, grads_ref):
        assert rel_err(g, g_ref) < 3e-2 and rel_err(p, g_ref) < 3e-2
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grads[0].float().sum().backward()


def test_a_non_contiguous_output_gradient(installed):
    """dO as a transposed view (the gradient of o.transpose(1, 2) in a block): its own backward graph."""
    q, k, v = (t.requires_grad_() for t in inputs(torch.bfloat16, 2, 4, 4, 96, 96, 64))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    d_o = torch.randn(2, 96, 4, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    grads_ref = torch.autograd.grad(reference(*ref_leaves, 1 / 8, causal=True), ref_leaves, d_o.double())
    for g, g_ref in zip(grads, grads_ref):
        assert rel_err(g, g_ref) < 3e-2


def test_training_steps_replay_the_cached_graphs(installed):
    q, k, v = (t.requires_grad_() for t in inputs(torch.float16, 2, 4, 4, 128, 128, 64))
    for _ in range(3):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.float().square().mean().backward()
    assert installed.served == 3 and len(installed.cache) == 1 and installed.cache.misses == 1


@pytest.mark.parametrize("grad", [True, False])
def test_repeated_calls_in_the_steady_state_against_float64(installed, grad):
    """The steady state: one configuration called again and again with fresh random inputs, each call's output
    fresh too (kept alive on some calls, so the allocator hands out other addresses, and some seen before), the
    forward (and the gradients) of every call against float64; decided and built once."""
    dtype, fwd_tol, grad_tol = DTYPES["bf16"]
    served, misses = installed.served, installed.cache.misses
    kept = []
    for i in range(8):
        q, k, v = inputs(dtype, 2, 4, 2, 160, 160, 64)
        leaves = [t.detach().clone().requires_grad_(grad) for t in (q, k, v)]
        with torch.set_grad_enabled(grad):
            o = F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True)
        ref_leaves = [t.detach().double().requires_grad_(grad) for t in (q, k, v)]
        with torch.set_grad_enabled(grad):
            o_ref = reference(*ref_leaves, 1 / 8, causal=True)
        assert rel_err(o, o_ref) < fwd_tol, f"call {i}"
        if grad:
            d_o = torch.randn_like(o)
            grads = torch.autograd.grad(o, leaves, d_o)
            grads_ref = torch.autograd.grad(o_ref, ref_leaves, d_o.double())
            for name, g, g_ref in zip(("dq", "dk", "dv"), grads, grads_ref):
                assert rel_err(g, g_ref) < grad_tol, f"call {i}, {name}"
        if i % 3 == 1:
            kept.append(o)
    assert installed.served == served + 8 and installed.cache.misses == misses + 1
    assert len(installed.by_key) == 1


def test_dropout_falls_back_to_torch_and_says_so_once(installed, caplog):
    q, k, v = inputs(torch.float16, 2, 4, 4, 128, 128, 64)
    with caplog.at_level(logging.WARNING, logger="cudnn_py.torch"):
        torch.manual_seed(1234)
        ours = [F.scaled_dot_product_attention(q, k, v, dropout_p=0.3) for _ in range(3)]
    said = [r.getMessage() for r in caplog.records if r.name == "cudnn_py.torch"]
    assert len(said) == 1 and "dropout_p=0.3" in said[0], said
    assert installed.served == 0 and installed.fallbacks == 3
    original = F.scaled_dot_product_attention.__wrapped__
    torch.manual_seed(1234)
    theirs = [original(q, k, v, dropout_p=0.3) for _ in range(3)]
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_a_boolean_mask_falls_back_with_torchs_result(installed):
    q, k, v = inputs(torch.bfloat16, 2, 4, 4, 64, 64, 64)
    keep = torch.rand(64, 64, device="cuda") > 0.3
    keep.fill_diagonal_(True)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    want = F.scaled_dot_product_attention.__wrapped__(q, k, v, attn_mask=keep)
    assert installed.served == 0 and torch.equal(got, want)


def test_uninstall_restores_torch():
    original = F.scaled_dot_product_attention
    ct.install()
    assert F.scaled_dot_product_attention is not original
    ct.uninstall()
    assert F.scaled_dot_product_attention is original
    q, k, v = inputs(torch.float16, 1, 2, 2, 64, 64, 64)
    assert F.scaled_dot_product_attention(q, k, v).shape == (1, 2, 64, 64)


def test_the_example_trains_an_unmodified_block():
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(root / "examples" / "torch_sdpa_provider.py")], cwd=root, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"exit {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    assert "step 4: loss" in p.stdout and "served by cudnn_py: 10, fallen back: 0" in p.stdout, p.stdout


def test_repeated_calls_take_the_split_execute_and_stay_right(installed):
    """After a graph's first call (every operand checked in full) the provider executes through the split form
    (q, k, v and dO re-checked, its own allocations not): forward and backward are still right at every call, with
    fresh inputs each time, and a call whose q has other strides than the entry's still gets its own graph."""
    for _ in range(4):
        run_case("bf16", installed, causal=True)
    entries = list(installed.cache.values())
    assert entries and all(e.fwd_trusted is not None and e.bwd_trusted.get(None) is not None for e in entries)
    run_case("bf16", installed, causal=True, bshd=True)  # another layout: its own entry, checked in full first
    run_case("bf16", installed, causal=True, bshd=True)
    assert len(installed.cache) == len(entries) + 1
