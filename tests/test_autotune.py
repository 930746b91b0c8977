"""CPU: selection by measurement (issue #38 item 5) driven by fake timings: the selection logic
(cudnn_py/engines/selection.py), the placement table (engines/placement.py), the internal autotune and
build_plans(ALL)'s measurement at the next execute (facade/autotune.py), and remembered winners (sealed records).
The real timer (CUDA events) and cuDNN's plans as candidates run in tests/test_gpu_autotune.py."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py import cache_trust
from cudnn_py.cache_trust import CacheWarning
from cudnn_py.engines import PYTHON_ENGINE_ID_BASE, placement, selection
from cudnn_py.engines.selection import CUDNN, OURS, Candidate
from cudnn_py.facade import autotune
from tests.test_engines import ToyEngine, small_graph
from tests.test_norm_engines import norm_graph

B = PYTHON_ENGINE_ID_BASE


def cand(label, kind=OURS, index=0, run=lambda: None):
    return Candidate(label, kind, index, {"engine_id": 1, "knobs": {}}, run)


# ---- the selection logic --------------------------------------------------------------------------------------------
def test_fastest_of_fake_timings_ties_to_the_earlier():
    cands = [cand("a", run=lambda: "a"), cand("b", CUDNN, run=lambda: "b"), cand("c", run=lambda: "c")]
    seen = []

    def timer(run, stream):
        seen.append(stream)
        return {"a": 2.0, "b": 1.0, "c": 1.0}[run()]

    m = selection.measure(cands, timer, 7)
    assert [x.ms for x in m] == [2.0, 1.0, 1.0] and seen == [7, 7, 7]
    assert selection.fastest(m).candidate.label == "b"  # (c is as fast: the earlier wins)


def test_a_failing_candidate_is_left_out():
    def boom():
        raise RuntimeError("cannot run here")

    answers = {"nan": float("nan"), "ok": 3.0, "neg": -1.0}
    cands = [cand("bad", run=boom), cand("nan", run=lambda: "nan"), cand("neg", run=lambda: "neg"),
             cand("ok", run=lambda: "ok")]
    m = selection.measure(cands, lambda run, s: answers[run()], 0)
    assert m[0].ms is None and "cannot run here" in m[0].error and "failed" in m[0].line()
    assert m[1].ms is None and m[2].ms is None and selection.fastest(m).candidate.label == "ok"
    assert selection.fastest([]) is None and selection.median_of([3, 1, 2, 10, 0]) == 2


# ---- the placement table --------------------------------------------------------------------------------------------
def test_placement_table_follows_the_benchmark():
    for op in ("layernorm", "rmsnorm"):
        for dt in ("bf16", "fp16"):
            assert placement.lookup(op, dt, 90) == placement.OURS
    assert placement.lookup("layernorm", "fp16", 100) == placement.CUDNN  # no row: cuDNN first
    assert placement.lookup("layernorm", "fp32", 90) == placement.CUDNN
    from cudnn_py.engines.norms.match import match

    assert placement.ours_first(match(norm_graph()), 90) and placement.ours_first(match(norm_graph(rms=True)), 90)
    assert not placement.ours_first(match(norm_graph()), 80)
    assert placement.norm_key(match(norm_graph(io=cudnn.data_type.HALF, wdt=cudnn.data_type.HALF)), 90) == \
        ("layernorm", "fp16", 90)
    cited = open(os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results",
                              "norm-sweep-2026-12-06-h100.txt")).read()  # the figures the table's docstring cites
    assert "ln  8192x4096: copy 2853 torch 2140 cudnn 2628" in cited and "v8_t128_r2_i4_hints_full_occ3 2790" in cited


# ---- autotune on a graph (python engines; cuDNN's plans need a GPU) -------------------------------------------------
class Timed:
    """A fake timer by plan: the toy engines' plans record executes; time = table[name of the plan last run]."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def __call__(self, run, stream):
        run()
        name = run.args[0]._plans[self._index(run)].name if hasattr(run, "args") else None
        self.calls.append(name)
        return self.table[name]

    @staticmethod
    def _index(run):
        g = run.args[0]
        plan = run.func.__self__
        return next(i for i, p in g._compiled.items() if p is plan)


def planned(*engines, modes=(cudnn.heur_mode.OPENSOURCE, cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK)):
    """A planned graph; by default with OPENSOURCE among the modes: the caller asked for our engines, so
    build_plans(ALL) measures."""
    g, x, y = small_graph(*engines)
    g.create_execution_plans(list(modes))
    return g, {x: np.ones((2, 3)), y: np.zeros((2, 3))}


@pytest.fixture
def no_cudnn(monkeypatch):
    """cuDNN's plans are not candidates here (no GPU): what the facade gets is what it skips."""
    monkeypatch.setattr(autotune, "_cudnn", lambda graph, skipped: skipped.append("cuDNN's plans: no GPU") or [])


def test_autotune_picks_the_fastest(no_cudnn):
    a, b = ToyEngine(B + 7, n_plans=2), ToyEngine(B + 8)
    g, pack = planned(a, b)
    timer = Timed({"toy16777223_0": 3.0, "toy16777223_1": 1.5, "toy16777224_0": 2.0})
    r = autotune.autotune(g, pack, timer=timer)
    assert sorted(timer.calls) == sorted(timer.table) and r.winner.candidate.label == "toy16777223_1"
    assert g._plan_index == 1 and g.selected_engine is a and "cuDNN's plans: no GPU" in r.skipped
    assert any("<- chosen" in line for line in r.lines())
    a.executed.clear()
    b.executed.clear()
    g.execute(pack)
    assert len(a.executed) == 1 and not b.executed


def test_autotune_refuses_aliased_buffers(no_cudnn):
    g, pack = planned(ToyEngine(B + 7, n_plans=2))
    shared = np.ones((2, 3))
    r = autotune.autotune(g, {k: shared for k in pack}, timer=lambda run, s: 1.0)
    assert r.winner is None and "share memory" in r.reason and g._plan_index == 0


def test_build_plans_all_measures_at_the_next_execute_once(no_cudnn, monkeypatch):
    a = ToyEngine(B + 7, n_plans=3)
    g, pack = planned(a)
    timer = Timed({"toy16777223_0": 3.0, "toy16777223_1": 2.0, "toy16777223_2": 1.0})
    monkeypatch.setattr(selection, "TIMER", timer)
    g.build_plans(cudnn.build_plan_policy.ALL)
    assert len(a.builds) == 3 and g._plan_index == 0 and not timer.calls  # all built; nothing measured yet
    g.execute(pack)
    assert len(timer.calls) == 3 and g._plan_index == 2
    g.execute(pack)
    assert len(timer.calls) == 3  # once


def test_build_plans_all_measures_only_where_opensource_was_asked(no_cudnn, monkeypatch):
    """Without OPENSOURCE the graph plans as the official module's does: ALL builds, nothing is measured, the
    default plan stays the first."""
    a = ToyEngine(B + 7, n_plans=3)
    g, pack = planned(a, modes=(cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK))
    timer = Timed({"toy16777223_0": 3.0, "toy16777223_1": 2.0, "toy16777223_2": 1.0})
    monkeypatch.setattr(selection, "TIMER", timer)
    g.build_plans(cudnn.build_plan_policy.ALL)
    g.execute(pack)
    assert not timer.calls and g._plan_index == 0


def test_build_plans_all_without_our_engines_is_the_classic_path(monkeypatch):
    from types import SimpleNamespace

    from cudnn_py.engines.base import BACKEND_PLAN

    called = []
    monkeypatch.setattr(autotune, "_ours", lambda *a: called.append(1) or [])
    assert not autotune.build_all(SimpleNamespace(_plans=[BACKEND_PLAN], _engines=[]), None) and not called


def test_winners_are_remembered_sealed_and_recalled(no_cudnn, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDNN_PY_CACHE", "1")
    monkeypatch.setenv("CUDNN_PY_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(autotune, "_record_name", lambda graph: "a" * 64 + ".json")
    g, pack = planned(ToyEngine(B + 7, n_plans=3))
    r = autotune.autotune(g, pack, timer=Timed({"toy16777223_0": 3.0, "toy16777223_1": 1.0, "toy16777223_2": 2.0}))
    assert r.remembered and (tmp_path / "c" / "choices" / ("a" * 64 + ".json")).is_file()
    # a fresh graph: build_plans(ALL) takes the remembered winner, nothing is measured
    g2, pack2 = planned(ToyEngine(B + 7, n_plans=3))
    monkeypatch.setattr(selection, "TIMER", lambda run, s: pytest.fail("measured although a winner is remembered"))
    g2.build_plans(cudnn.build_plan_policy.ALL)
    assert g2._plan_index == 1
    g2.execute(pack2)
    # a record naming no candidate of the graph (another engine) is ignored: measured at the next execute
    g3, pack3 = planned(ToyEngine(B + 9, n_plans=2))
    monkeypatch.setattr(selection, "TIMER", Timed({"toy16777225_0": 2.0, "toy16777225_1": 1.0}))
    g3.build_plans(cudnn.build_plan_policy.ALL)
    assert g3._plan_index == 0
    g3.execute(pack3)
    assert g3._plan_index == 1
    # a tampered record: a CacheWarning, and measurement again
    f = tmp_path / "c" / "choices" / ("a" * 64 + ".json")
    f.write_text(f.read_text().replace('"format": 1', '"format": 1 '))
    g4, _ = planned(ToyEngine(B + 9, n_plans=2))
    with pytest.warns(CacheWarning, match="keyed checksum"):
        g4.build_plans(cudnn.build_plan_policy.ALL)
    assert g4.__dict__.get(autotune._PENDING)


def test_no_record_where_the_cache_is_off(no_cudnn, monkeypatch):
    monkeypatch.setenv("CUDNN_PY_CACHE", "0")
    g, pack = planned(ToyEngine(B + 7, n_plans=2))
    g._session = type("S", (), {"disk": type("D", (), {"key": object()})()})()
    assert autotune._record_name(g) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert autotune.recalled(g) is None and cache_trust.read_record is not None


def test_no_measurement_inside_a_capture(no_cudnn, monkeypatch):
    a = ToyEngine(B + 7, n_plans=2)
    g, pack = planned(a)
    timer = Timed({"toy16777223_0": 3.0, "toy16777223_1": 1.0})
    monkeypatch.setattr(selection, "TIMER", timer)
    g.build_plans(cudnn.build_plan_policy.ALL)
    monkeypatch.setattr(selection, "capturing", lambda stream: True)
    g.execute(pack)
    assert not timer.calls and g.__dict__.get(autotune._PENDING) and g._plan_index == 0
    monkeypatch.setattr(selection, "capturing", lambda stream: False)
    g.execute(pack)
    assert len(timer.calls) == 2 and g._plan_index == 1
    monkeypatch.undo()
    assert not selection.capturing(0)  # (the real check: False without a device)
