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
