"""GPU: the plan cache (plans/plan_cache.py). A graph built a third time gets its plan rebuilt from the JSON of the
plan an identical graph finalized; it must compute what a finalized plan computes: fresh random inputs, outputs
and workspace poisoned (NaN / 0xFF), float64 references, and the rebuilt plan's output against the finalized one's.
Each case checks where every plan came from (``ExecutionPlan.source``), so a case the cache never served cannot
pass as one it did; a bad entry (corrupt JSON, a workspace that does not match) is dropped and the plan finalized.
"""
from __future__ import annotations

import dataclasses
import logging
import math

import pytest

import cudnn_py as cudnn
from cudnn_py.plans import heuristics, plan_cache

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

F, H = cudnn.data_type.FLOAT, cudnn.data_type.HALF
MODES = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
TOL = 1e-2  # fp16 attention against float64
FINALIZED = "finalized"


@pytest.fixture(autouse=True)
def empty_caches():
    torch.empty(1, device="cuda")  # a current context before the first plan is built
    heuristics.clear_cache()
    plan_cache.clear_cache()
    before = dict(plan_cache.stats)
    yield lambda: {k: plan_cache.stats[k] - before[k] for k in before}
    plan_cache.clear_cache()


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    assert torch.isfinite(out).all(), "output has NaN/Inf: not every element was written"
    return ((out - ref).norm() / ref.norm()).item()


def source(g) -> str:
    return g.session.plan().source


def workspace(g):
    return torch.full((max(1, g.get_workspace_size()),), 255, device="cuda", dtype=torch.uint8)


def scores(q, k, d, causal):
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(d)
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device="cuda").tril(), float("-inf"))
    return s


def forward_graph(b=2, h=3, s=192, d=64, causal=True, handle=None):
    kw = {"handle": handle} if handle is not None else {}
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, **kw)
    T = {n: g.tensor(name=n, dim=[b, h, s, d], stride=[h * s * d, s * d, d, 1], data_type=H) for n in "qkv"}
    o, _ = g.sdpa(name="attn", q=T["q"], k=T["k"], v=T["v"], generate_stats=False, attn_scale=1 / math.sqrt(d),
                  use_causal_mask=causal)
    o.set_output(True).set_dim([b, h, s, d]).set_stride([h * s * d, s * d, d, 1])
    T["o"] = o
    g.build(MODES)
    return g, T


def run_forward(g, T, x, causal=True):
    """Execute with ``x``'s inputs and a poisoned output and workspace; the output, checked against float64."""
    out = torch.full_like(x["q"], float("nan"))
    g.execute({T["q"]: x["q"], T["k"]: x["k"], T["v"]: x["v"], T["o"]: out}, workspace(g))
    torch.cuda.synchronize()
    ref = torch.softmax(scores(x["q"], x["k"], x["q"].shape[-1], causal), -1) @ x["v"].double()
    assert rel_err(out, ref) < TOL
    return out


def fresh_inputs(b=2, h=3, s=192, d=64):
    return {n: torch.randn(b, h, s, d, device="cuda", dtype=torch.half) for n in "qkv"}


def test_the_third_build_rebuilds_the_plan_and_computes_the_same(empty_caches):
    graphs = [forward_graph() for _ in range(3)]
    # the first build is a new key (nothing cached), the second finalizes and records, the third is rebuilt
    assert [source(g) for g, _ in graphs] == [FINALIZED, FINALIZED, plan_cache.REBUILT]
    assert empty_caches() == {"hits": 1, "entries_made": 1, "rebuilds_refused": 0}
    assert graphs[2][0].get_plan_name_at_index(0) == graphs[0][0].get_plan_name_at_index(0)
    assert graphs[2][0].get_workspace_size() == graphs[0][0].get_workspace_size()
    assert "plan cache" in graphs[2][0].explain()
    for _ in range(2):
        x = fresh_inputs()
        first, rebuilt = run_forward(*graphs[0], x), run_forward(*graphs[2], x)
        assert torch.equal(first, rebuilt), "the rebuilt plan computed something else than the finalized one"


def test_backward_with_workspace_intermediates_rebuilt_and_serialized(empty_caches):
    """The composite backward keeps row sums (and the dQ accumulator) at the start of the workspace: a rebuilt plan
    and a deserialized one must place them exactly as the finalized plan does."""
    b, h, s, d = 1, 2, 160, 64

    def backward_graph():
        g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        T = {n: g.tensor(name=n, dim=[b, h, s, d], stride=[h * s * d, s * d, d, 1], data_type=H)
             for n in ("q", "k", "v", "o", "dO")}
        T["stats"] = g.tensor(name="stats", dim=[b, h, s, 1], stride=[h * s, s, 1, 1], data_type=F)
        grads = g.sdpa_backward(name="attn_bwd", q=T["q"], k=T["k"], v=T["v"], o=T["o"], dO=T["dO"],
                                stats=T["stats"], attn_scale=1 / math.sqrt(d), use_causal_mask=True)
        for n, t in zip(("dQ", "dK", "dV"), grads):
            t.set_output(True).set_dim([b, h, s, d]).set_stride([h * s * d, s * d, d, 1]).set_name(n)
            T[n] = t
        g.build(MODES)
        return g, T

    graphs = [backward_graph() for _ in range(3)]
    assert [source(g) for g, _ in graphs] == [FINALIZED, FINALIZED, plan_cache.REBUILT]
    assert graphs[2][0].session.executor.scratch_bytes > 0, "this graph was meant to keep intermediates in the workspace"
    loaded = cudnn.pygraph()
    loaded.deserialize(graphs[2][0].serialize())
    assert loaded.get_workspace_size() == graphs[2][0].get_workspace_size()

    x = {n: torch.randn(b, h, s, d, device="cuda", dtype=torch.half) for n in ("q", "k", "v", "dO")}
    qd, kd, vd = (x[n].double().requires_grad_() for n in "qkv")
    sc = scores(qd, kd, d, True)
    o = torch.softmax(sc, -1) @ vd
    x["o"] = o.detach().half()
    x["stats"] = torch.logsumexp(sc, -1, keepdim=True).detach().float()
    ref = dict(zip(("dQ", "dK", "dV"), torch.autograd.grad(o, (qd, kd, vd), x["dO"].double())))
    for g, T in graphs + [(loaded, None)]:
        out = {n: torch.full_like(x["q"], float("nan")) for n in ref}
        if T is None:  # the deserialized graph takes its operands by name
            g.execute({**{n: x[n] for n in x}, **out}, workspace(g))
        else:
            g.execute({**{T[n]: x[n] for n in x}, **{T[n]: out[n] for n in out}}, workspace(g))
        torch.cuda.synchronize()
        for n in ref:
            assert rel_err(out[n], ref[n]) < TOL, (n, source(g))


def test_another_handle_or_another_graph_is_not_served_anothers_plan(empty_caches):
    forward_graph(), forward_graph()  # an entry for the default handle
    other = cudnn.create_handle()
    cudnn.set_stream(handle=other, stream=torch.cuda.current_stream().cuda_stream)
    g_other, T_other = forward_graph(handle=other)  # the heuristics key is the same; the plan key is not
    assert source(g_other) == FINALIZED
    g_longer, T_longer = forward_graph(s=256)
    assert source(g_longer) == FINALIZED
    g_full, T_full = forward_graph(causal=False)
    assert source(g_full) == FINALIZED
    assert empty_caches()["hits"] == 0
    run_forward(g_other, T_other, fresh_inputs())
    run_forward(g_longer, T_longer, fresh_inputs(s=256))
    run_forward(g_full, T_full, fresh_inputs(), causal=False)
    assert source(forward_graph(handle=other)[0]) == plan_cache.REBUILT  # its own entry, made by g_other


@pytest.mark.parametrize("damage", ["json", "workspace"])
def test_a_bad_entry_is_dropped_and_the_plan_finalized(empty_caches, caplog, damage):
    forward_graph(), forward_graph()
    [(key, entry)] = plan_cache._cache.items()
    bad = (dataclasses.replace(entry, json='{"not": "a plan"}') if damage == "json" else
           dataclasses.replace(entry, workspace=entry.workspace + 256))
    plan_cache._cache[key] = bad
    with caplog.at_level(logging.WARNING, logger="cudnn_py.plans.plan_cache"):
        g, T = forward_graph()
    assert source(g) == FINALIZED
    assert empty_caches()["rebuilds_refused"] == 1
    assert "could not be rebuilt" in caplog.text
    run_forward(g, T, fresh_inputs())
    assert plan_cache._cache[key] != bad  # the finalized plan made a good entry again
    assert source(forward_graph()[0]) == plan_cache.REBUILT


def test_the_environment_variable_turns_it_off(empty_caches, monkeypatch):
    monkeypatch.setenv(plan_cache.PLAN_CACHE_ENV, "0")
    assert [source(forward_graph()[0]) for _ in range(3)] == [FINALIZED] * 3
    assert empty_caches() == {"hits": 0, "entries_made": 0, "rebuilds_refused": 0}


def test_a_matmul_graph_is_rebuilt_and_correct(empty_caches):
    def matmul_bias(m=96, k=80, n=72):
        g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
        A = g.tensor(name="A", dim=[1, m, k], stride=[m * k, k, 1], data_type=H)
        B = g.tensor(name="B", dim=[1, k, n], stride=[k * n, n, 1], data_type=H)
        bias = g.tensor(name="bias", dim=[1, 1, n], stride=[n, n, 1], data_type=H)
        C = g.add(g.matmul(A, B), bias).set_output(True).set_data_type(H)
        g.build(MODES)
        return g, A, B, bias, C

    graphs = [matmul_bias() for _ in range(3)]
    assert [g.session.plan().source for g, *_ in graphs] == [FINALIZED, FINALIZED, plan_cache.REBUILT]
    g, A, B, bias, C = graphs[2]
    a, b_, c = (torch.randn(t.get_dim(), device="cuda", dtype=torch.half) for t in (A, B, bias))
    out = torch.full(C.get_dim(), float("nan"), device="cuda", dtype=torch.half)
    g.execute({A: a, B: b_, bias: c, C: out}, workspace(g))
    torch.cuda.synchronize()
    assert rel_err(out, a.double() @ b_.double() + c.double()) < 5e-3
