"""plans/heuristics.py's query cache on the CPU: what is kept, what a hit returns, what is never cached. cuDNN's
heuristics need a GPU, so the query itself is replaced by one returning configs of known engines and knobs; the
cache's use by real graphs (and a cached answer that does not build) is tests/test_gpu_heuristics_cache.py."""
from __future__ import annotations

import pytest

from cudnn_py.plans import heuristics
from cudnn_py.plans.engine_config import CachedEngineConfig, EngineConfig


class _Config:
    """What the cache reads from a config: engine index, knobs, source."""

    def __init__(self, index: int, knobs: list, source: str):
        self.engine_index, self.knobs, self.source = index, knobs, source


_SEEN: list = []  # the configs each query was told were returned before (heuristics._query's ``seen``)


@pytest.fixture
def queries(monkeypatch):
    calls: list = []
    _SEEN.clear()

    def fake_query(operation_graph, modes, sm_count, device_properties, seen=None):
        calls.append((operation_graph, tuple(modes)))
        _SEEN.append(list(seen or []))
        if operation_graph == "no engine":
            return heuristics.HeuristicsResult(per_mode=[(modes[0], "0 config(s), 0 new")])
        a, b = _Config(2, [(24, 7)], modes[0]), _Config(1, [], modes[-1])
        return heuristics.HeuristicsResult(configs=[a, b], per_mode=[(m, "1 config(s), 1 new") for m in modes],
                                           ranked=[(modes[0], [a]), (modes[-1], [b, a])])

    monkeypatch.setattr(heuristics, "_query", fake_query)
    heuristics.clear_cache()
    yield calls
    heuristics.clear_cache()


def test_a_second_query_of_a_key_is_answered_from_the_cache(queries):
    modes = ["CUDNN_HEUR_MODE_A", "CUDNN_HEUR_MODE_FALLBACK"]
    first = heuristics.query("graph 1", modes, cache_key="k")
    assert not first.cached and len(queries) == 1
    again = heuristics.query("graph 2", modes, cache_key="k")
    assert again.cached and len(queries) == 1  # cuDNN not asked
    assert all(isinstance(c, CachedEngineConfig) for c in again.configs)
    assert [(c.engine_index, c.knobs, c.source) for c in again.configs] == \
        [(2, [(24, 7)], "CUDNN_HEUR_MODE_A"), (1, [], "CUDNN_HEUR_MODE_FALLBACK")]
    assert [c.name for c in again.configs] == ["eng2_k24=7", "eng1"]
    assert again.configs[0]._operation_graph == "graph 2"  # built for the graph asking, when first needed
    assert again.configs[0]._made is None
    assert [(m, [c.name for c in r]) for m, r in again.ranked] == \
        [("CUDNN_HEUR_MODE_A", ["eng2_k24=7"]), ("CUDNN_HEUR_MODE_FALLBACK", ["eng1", "eng2_k24=7"])]
    assert again.ranked[1][1][1] is again.configs[0]  # a config two modes returned is one object, as in a query
    assert [r for _, r in again.per_mode] == ["1 config(s), 1 new (cached)"] * 2


def test_what_is_never_cached(queries):
    heuristics.query("graph", ["CUDNN_HEUR_MODE_A"])  # no key
    heuristics.query("graph", ["CUDNN_HEUR_MODE_A"], device_properties=object(), cache_key="k")  # deviceless
    heuristics.query("no engine", ["CUDNN_HEUR_MODE_A"], cache_key="empty")  # nothing to build from
    assert not heuristics._cache
    for _ in range(2):
        assert not heuristics.query("no engine", ["CUDNN_HEUR_MODE_A"], cache_key="empty").cached
    assert len(queries) == 5


def test_forget_and_the_size_bound(queries, monkeypatch):
    heuristics.query("g", ["CUDNN_HEUR_MODE_A"], cache_key="k")
    heuristics.forget("k")
    assert not heuristics.query("g", ["CUDNN_HEUR_MODE_A"], cache_key="k").cached
    monkeypatch.setattr(heuristics, "HEURISTICS_CACHE_SIZE", 3)
    heuristics.clear_cache()
    for key in ("a", "b", "c"):
        heuristics.query("g", ["CUDNN_HEUR_MODE_A"], cache_key=key)
    assert heuristics.query("g", ["CUDNN_HEUR_MODE_A"], cache_key="a").cached  # "a" is now the most recent
    heuristics.query("g", ["CUDNN_HEUR_MODE_A"], cache_key="d")  # drops "b", the least recently used
    assert list(heuristics._cache) == ["c", "a", "d"]


def test_a_cached_config_builds_its_descriptors_when_first_needed(monkeypatch):
    made = []

    def explicit(operation_graph, engine_index, knobs, device_properties=None):
        made.append((operation_graph, engine_index, knobs))
        return type("Made", (), {"cfg": "cfg descriptor", "engine": "engine descriptor"})()

    monkeypatch.setattr(EngineConfig, "explicit", staticmethod(explicit))
    c = CachedEngineConfig("graph", 6, [(24, 26)], "CUDNN_HEUR_MODE_A")
    assert c.name == "eng6_k24=26" and made == []  # naming, ranking and errata read no descriptor
    assert c.cfg == "cfg descriptor" and c.engine == "engine descriptor"
    assert made == [("graph", 6, {24: 26})]  # made once, for this graph, with the cached knobs


A, FALLBACK = "CUDNN_HEUR_MODE_A", "CUDNN_HEUR_MODE_FALLBACK"


def test_a_deferred_query_asks_the_later_modes_only_when_resumed(queries):
    res = heuristics.query("graph", [A, FALLBACK], cache_key="k", defer=True)
    assert queries == [("graph", (A,))] and res.pending == [FALLBACK]
    assert heuristics._cache.lookup("k").pending == (FALLBACK,)  # the partial answer is cached as such
    first = list(res.configs)
    added = heuristics.resume(res)
    assert queries[-1] == ("graph", (FALLBACK,)) and _SEEN[-1] == first  # deduplicated against A's configs
    assert res.configs == first + added.configs and not res.pending
    assert [r for _, r in added.per_mode] == ["1 config(s), 1 new (deferred: queried when first needed)"]
    whole = heuristics._cache.lookup("k")
    assert whole.pending == () and len(whole.configs) == len(res.configs)  # the whole answer replaced it
    assert heuristics.resume(res).configs == [] and len(queries) == 2  # nothing left to ask


def test_a_deferred_query_goes_on_while_no_mode_returned_a_config(queries):
    res = heuristics.query("no engine", [A, FALLBACK], defer=True)
    assert queries == [("no engine", (A,)), ("no engine", (FALLBACK,))] and res.pending == []


def test_a_partial_cached_answer(queries):
    heuristics.query("g1", [A, FALLBACK], cache_key="k", defer=True)
    hit = heuristics.query("g2", [A, FALLBACK], cache_key="k", defer=True)
    assert hit.cached and hit.pending == [FALLBACK] and len(queries) == 1
    whole = heuristics.query("g3", [A, FALLBACK], cache_key="k")  # not deferred: the pending mode is asked now
    assert not whole.pending and queries[-1] == ("g3", (FALLBACK,))
    assert [c.engine_index for c in _SEEN[-1]] == [2, 1] and all(isinstance(c, CachedEngineConfig) for c in _SEEN[-1])
    again = heuristics.query("g4", [A, FALLBACK], cache_key="k", defer=True)
    assert again.cached and not again.pending and len(queries) == 2 and len(again.configs) == 4
