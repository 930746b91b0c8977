"""GPU: selection by measurement (issue #38 item 5) with the real timer (CUDA events on the plan's stream): the
internal autotune over our norm engine's plans and cuDNN's, picking the faster of two candidates that differ only
by a known delay; build_plans(ALL) measuring at the first execute; the winner remembered on disk and taken by a
fresh graph without measuring. The selection logic itself is CPU-tested on fake timings (tests/test_autotune.py)."""
from __future__ import annotations

import pytest

import cudnn_py as cudnn
from cudnn_py.engines import PYTHON_ENGINE_ID_BASE, BaseEngine, CompiledPlan, PlanConfig, selection
from cudnn_py.engines.engine_ids import NORM_FORWARD_ENGINE_ID
from cudnn_py.engines.selection import CUDNN, OURS
from cudnn_py.facade import autotune
from tests.test_gpu_norm_engines import EPS, TOL, buffer, build, reference, rel_err

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
DT = cudnn.data_type
P = cudnn.norm_forward_phase
ROWS, N = 8192, 4096


def layernorm_case(modes):
    g, t = build(ROWS, N, DT.BFLOAT16, False, P.TRAINING, True)
    g.validate()
    g.create_execution_plans(modes)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, w, b = buffer((ROWS, N), torch.bfloat16, gen), buffer((N,), torch.float32, gen), buffer((N,), torch.float32, gen)
    pack = {t["X"]: x, t["W"]: w, t["B"]: b, t["E"]: torch.full((1, 1, 1, 1), EPS),
            t["Y"]: buffer((ROWS, N), torch.bfloat16, fill=float("nan"))}
    for s in t["stats"]:
        pack[s] = buffer((ROWS, 1), torch.float32, fill=float("nan"))
    return g, t, pack, (x, w, b)


def check_output(g, t, pack, xwb, keys=None):
    """Run ``g`` on ``pack`` (or on ``keys``, the same buffers under other keys) with its outputs poisoned, and
    compare Y with the float64 reference."""
    for s in t["stats"]:
        pack[s].fill_(float("nan"))
    pack[t["Y"]].fill_(float("nan"))
    g.execute(pack if keys is None else keys, None)
    torch.cuda.synchronize()
    _, _, _, y, _ = reference(xwb[0], None, xwb[1], xwb[2], False, False)
    assert rel_err(pack[t["Y"]], y) < TOL[DT.BFLOAT16]


def test_autotune_times_ours_and_cudnns_plans_and_runs_the_winner():
    g, t, pack, xwb = layernorm_case([cudnn.heur_mode.A, cudnn.heur_mode.OPENSOURCE])
    r = autotune.autotune(g, pack, remember=False)
    kinds = {m.candidate.kind for m in r.measured}
    assert kinds == {OURS, CUDNN}, r.lines()
    assert all(m.ms is not None and m.ms > 0 for m in r.measured), r.lines()
    best = min(m.ms for m in r.measured)
    assert r.winner is not None and r.winner.ms == best, r.lines()
    if r.winner.candidate.kind == OURS:
        assert g.selected_engine is not None and g.selected_engine.engine_id == NORM_FORWARD_ENGINE_ID
    else:
        assert g.selected_engine is None and g._session.plan_list.candidate == r.winner.candidate.index
    print("\n".join(r.lines()))
    check_output(g, t, pack, xwb)


class _DelayedPlan(CompiledPlan):
    """torch's layer norm into Y, after ``cycles`` of GPU sleep on the current stream (0: none)."""

    def __init__(self, t, cycles):
        self.t, self.cycles = t, cycles

    def execute(self, graph, buffers, ctx):
        if self.cycles:
            torch.cuda._sleep(self.cycles)
        x, w, b = (buffers[self.t[k].uid] for k in ("X", "W", "B"))
        y = torch.nn.functional.layer_norm(x.float(), (N,), w, b, EPS)
        buffers[self.t["Y"].uid].copy_(y)


class _DelayedEngine(BaseEngine):
    def __init__(self, engine_id, t, cycles):
        self.engine_id, self.name, self.t, self.cycles = engine_id, f"delay{cycles}", t, cycles

    def check_support(self, graph):
        pass

    def plan_configs(self, graph):
        return [PlanConfig(self.engine_id, self.name, {})]

    def build_plan(self, graph, config, ctx):
        return _DelayedPlan(self.t, self.cycles)


def test_autotune_picks_the_faster_candidate():
    g, t = build(ROWS, N, DT.BFLOAT16, False, P.TRAINING, True)
    slow, fast = _DelayedEngine(PYTHON_ENGINE_ID_BASE + 101, t, 20_000_000), _DelayedEngine(PYTHON_ENGINE_ID_BASE +
                                                                                              102, t, 0)
    g.register_backend(slow)
    g.register_backend(fast)
    g.validate()
    g.create_execution_plans([cudnn.heur_mode.OPENSOURCE])  # (ours and the two delayed engines; no cuDNN)
    gen = torch.Generator(device="cuda").manual_seed(0)
    pack = {t["X"]: buffer((ROWS, N), torch.bfloat16, gen), t["W"]: buffer((N,), torch.float32, gen),
            t["B"]: buffer((N,), torch.float32, gen), t["E"]: torch.full((1, 1, 1, 1), EPS),
            t["Y"]: buffer((ROWS, N), torch.bfloat16, fill=0.0)}
    for s in t["stats"]:
        pack[s] = buffer((ROWS, 1), torch.float32, fill=0.0)
    r = autotune.autotune(g, pack, remember=False, timer=selection.cuda_event_timer(warmup=2, iters=5))
    times = {m.candidate.label: m.ms for m in r.measured}
    assert times["delay20000000"] > 2 * times["delay0"], r.lines()
    assert r.winner is not None and r.winner.candidate.label != "delay20000000", r.lines()
    assert g.selected_engine is not slow


MEASURED = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK, cudnn.heur_mode.OPENSOURCE]


def test_build_plans_all_measures_once_and_remembers(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDNN_PY_CACHE", "1")
    monkeypatch.setenv("CUDNN_PY_CACHE_DIR", str(tmp_path / "cache"))
    # cuDNN's entry first, ours after it: OPENSOURCE among the modes is what makes build_plans(ALL) measure
    g, t, pack, xwb = layernorm_case(MEASURED)
    assert any(p.engine_id == NORM_FORWARD_ENGINE_ID for p in g.plans)
    g.build_plans(cudnn.build_plan_policy.ALL)
    assert g.__dict__.get(autotune._PENDING)
    check_output(g, t, pack, xwb)  # measures first, on these buffers
    r = g.__dict__["_autotune_result"]
    assert r.winner is not None and not g.__dict__.get(autotune._PENDING)
    if not r.remembered:
        pytest.skip(f"the graph has no disk-cache key here ({g._session.disk.lines}): nothing to remember")
    assert list((tmp_path / "cache" / "choices").glob("*.json"))
    g2, t2, pack2, xwb2 = layernorm_case(MEASURED)
    monkeypatch.setattr(selection, "TIMER", lambda run, s: pytest.fail("measured although a winner is remembered"))
    g2.build_plans(cudnn.build_plan_policy.ALL)
    assert not g2.__dict__.get(autotune._PENDING), (autotune.recalled(g2), autotune._record_name(g2),
                                                    autotune._record_name(g), r.winner.candidate.identity)
    w = r.winner.candidate
    if w.kind == OURS:
        assert g2._plan_index == w.index
    else:
        assert g2.selected_engine is None and g2._session.plan_list.candidate == w.index
    check_output(g2, t2, pack2, xwb2)


@pytest.mark.parametrize("knob", [0, 2])
def test_serialize_round_trip_of_a_plan_on_our_engine(knob):
    """A plan on our norm engine serializes; a fresh graph deserializes it (the graph rebuilt, matched again, the
    same knobs) and computes the same, keyed by the first graph's tensors or by uids."""
    g, t, pack, xwb = layernorm_case([cudnn.heur_mode.OPENSOURCE])
    g.select_plan(knob)
    g.build_plans()
    blob = g.serialize()
    g2 = cudnn.pygraph()
    g2.deserialize(blob)
    assert g2.selected_engine is not None and g2.selected_engine.engine_id == NORM_FORWARD_ENGINE_ID
    assert g2.plans[g2._plan_index].knobs == g.plans[knob].knobs
    check_output(g2, t, pack, xwb)  # keyed by g's tensors (uids match)
    check_output(g2, t, pack, xwb, keys={k.uid: v for k, v in pack.items()})  # and by uid


def test_a_serialized_engine_plan_of_another_kernel_version_is_refused():
    import json

    g, t, pack, xwb = layernorm_case([cudnn.heur_mode.OPENSOURCE])
    g.build_plans()
    doc = json.loads(bytes(g.serialize()))
    doc["engine"]["version"] = "0" * 16
    with pytest.raises(ValueError, match="kernel changed"):
        cudnn.pygraph().deserialize(json.dumps(doc).encode())
