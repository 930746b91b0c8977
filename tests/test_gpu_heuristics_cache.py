"""GPU: the heuristics query cache (plans/heuristics.py). A graph with the key of one queried before gets its
configs from the cache, builds the same plan and computes correctly (fresh inputs, poisoned outputs, float64
reference); other graphs query cuDNN; a cached answer whose configs do not build is forgotten and queried afresh.
"""
from __future__ import annotations

import math

import pytest

import cudnn_py as cudnn
from cudnn_py.plans import heuristics

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

F, BF16 = cudnn.data_type.FLOAT, cudnn.data_type.BFLOAT16
MODES = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


def attention_graph(s=160, causal=True):
    b, h, d = 2, 4, 64
    x = {n: torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for n in ("q", "k", "v")}
    g = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=F, compute_data_type=F)
    T = {n: g.tensor_like(x[n]) for n in x}
    o, _ = g.sdpa(q=T["q"], k=T["k"], v=T["v"], generate_stats=False, attn_scale=1 / math.sqrt(d),
                  use_causal_mask=causal)
    x["o"] = torch.full_like(x["q"], float("nan"))
    o.set_output(True).set_dim(list(x["o"].shape)).set_stride(list(x["o"].stride()))
    T["o"] = o
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(MODES)
    return g, T, x


def check_runs(g, T, x, causal=True):
    g.check_support()
    g.build_plans()
    g.execute({T[n]: x[n] for n in T})
    torch.cuda.synchronize()
    q, k, v = (x[n].double() for n in ("q", "k", "v"))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device="cuda").tril(), float("-inf"))
    ref = torch.softmax(s, -1) @ v
    out = x["o"].double()
    assert torch.isfinite(out).all()
    assert ((out - ref).norm() / ref.norm()).item() < 2e-2


def report(g):
    return [r for _, r in g.session.heuristics_report]


def names(g):
    return [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]


def test_a_graph_of_a_key_queried_before_is_answered_from_the_cache():
    heuristics.clear_cache()
    g1, T1, x1 = attention_graph()
    assert not any("cached" in r for r in report(g1))
    g2, T2, x2 = attention_graph()
    assert g2.key() == g1.key()
    assert report(g2) and all(r.endswith("(cached)") for r in report(g2)), report(g2)
    assert names(g2) == names(g1)
    assert [g2.session.configs[i].workspace for i in range(len(names(g2)))] == \
        [g1.session.configs[i].workspace for i in range(len(names(g1)))]
    check_runs(g1, T1, x1)
    check_runs(g2, T2, x2)
    assert g2.get_plan_name_at_index(0) == g1.get_plan_name_at_index(0)
    assert g2.session.plans[g2.session.candidate].name == g1.session.plans[g1.session.candidate].name


def test_another_graph_queries_cudnn():
    heuristics.clear_cache()
    attention_graph(s=160)
    g, T, x = attention_graph(s=96)
    assert not any("cached" in r for r in report(g))
    check_runs(g, T, x)
    g, T, x = attention_graph(s=160, causal=False)
    assert not any("cached" in r for r in report(g))
    check_runs(g, T, x, causal=False)


def test_filters_read_cached_configs():
    heuristics.clear_cache()
    attention_graph()
    g, T, x = attention_graph()
    assert g.session.cached_queries
    first = names(g)[0]
    g.deselect_engines([first])  # by name, then by workspace: the second reads the lazily built configs
    g.deselect_workspace_greater_than(1 << 40)
    check_runs(g, T, x)
    assert g.session.plans[g.session.candidate].name != first


def test_a_cached_answer_whose_configs_do_not_build_is_queried_afresh():
    """A cached answer that does not fit the graph (which a key collision would give) fails to build; the
    session forgets it, queries cuDNN and builds from what cuDNN answers, and says so in its report."""
    heuristics.clear_cache()
    attention_graph()
    (key, answer), = heuristics._cache.items()
    heuristics._cache[key] = heuristics._Answer(tuple((10_000 + i, knobs, mode) for i, (_, knobs, mode)
                                                      in enumerate(answer.configs)), answer.per_mode, answer.ranked)
    g, T, x = attention_graph()
    assert all(r.endswith("(cached)") for r in report(g))
    check_runs(g, T, x)
    assert any("queried afresh" in r for r in report(g)), report(g)
    assert heuristics._cache[key].configs == answer.configs  # the fresh answer is cached again


def test_fallback_is_queried_only_when_the_whole_list_is_needed():
    """create_execution_plans([A, FALLBACK]) asks A; FALLBACK waits until something needs every config (here the
    plan count) and then gives the list one query of both modes gives, in the same order."""
    heuristics.clear_cache()
    g, T, x = attention_graph()
    s = g.session
    assert s._deferred is not None and s._deferred.pending == ["CUDNN_HEUR_MODE_FALLBACK"]
    assert [m for m, _ in s.heuristics_report] == ["CUDNN_HEUR_MODE_A"]
    check_runs(g, T, x)  # A's first config built and ran: FALLBACK still not asked
    assert s._deferred is not None
    listed = names(g)  # the count needs every config
    assert s._deferred is None
    assert [m for m, _ in s.heuristics_report] == ["CUDNN_HEUR_MODE_A", "CUDNN_HEUR_MODE_FALLBACK"]
    assert report(g)[1].endswith("(deferred: queried when first needed)")
    both = heuristics.query(s.operation_graph, ["CUDNN_HEUR_MODE_A", "CUDNN_HEUR_MODE_FALLBACK"])
    assert listed == [c.name for c in both.configs]
    assert len(set(listed)) == len(listed)  # deduplicated across the deferred boundary too


def test_build_plans_asks_the_deferred_mode_when_no_config_so_far_builds(monkeypatch):
    """Every config of mode A fails to build (injected): build_plans queries FALLBACK then and builds from it."""
    from cudnn_py.errors import CudnnError
    from cudnn_py.plans import session as session_module

    heuristics.clear_cache()
    g, T, x = matmul_graph()
    s = g.session
    a_configs = len(s._configs)
    assert s._deferred is not None
    real = session_module.ExecutionPlan.build

    def build(config, kernel_cache=None):
        if config.source == "CUDNN_HEUR_MODE_A":
            raise CudnnError(3000, "cudnnBackendFinalize", detail="injected: mode A's configs do not build")
        return real(config, kernel_cache)

    monkeypatch.setattr(session_module.ExecutionPlan, "build", staticmethod(build))
    g.check_support()
    g.build_plans()
    assert s._deferred is None and len(s._configs) > a_configs
    assert s.candidate >= a_configs and s._configs[s.candidate].source == "CUDNN_HEUR_MODE_FALLBACK"
    assert all(i in s.failures for i in range(a_configs))
    monkeypatch.undo()
    check_matmul(g, T, x)


def matmul_graph():
    x = {"a": torch.randn(2, 96, 80, device="cuda", dtype=torch.float16),
         "b": torch.randn(2, 80, 112, device="cuda", dtype=torch.float16)}
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=F)
    A = g.tensor_like(x["a"])
    B = g.tensor_like(x["b"])
    C = g.matmul(A, B)
    C.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    x["c"] = torch.full((2, 96, 112), float("nan"), device="cuda", dtype=torch.float32)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(MODES)
    return g, (A, B, C), x


def check_matmul(g, T, x):
    A, B, C = T
    ws = torch.full((max(1, g.get_workspace_size()),), 0xFF, device="cuda", dtype=torch.uint8)
    g.execute({A: x["a"], B: x["b"], C: x["c"]}, ws)
    torch.cuda.synchronize()
    ref = x["a"].double() @ x["b"].double()
    assert ((x["c"].double() - ref).norm() / ref.norm()).item() < 1e-3
