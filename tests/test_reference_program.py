"""ReferenceEngine(program=True) prepares the graph's program once (routing's check_support and build_plan share
it) and prepares it again after an edit of the graph."""
from __future__ import annotations

import numpy as np

import cudnn_py as cudnn
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.ir import passes

D = cudnn.data_type.DOUBLE
AI = cudnn.attention_implementation
RNG = np.random.default_rng(11)


def _counting_prepare(monkeypatch) -> list:
    calls: list = []
    real = passes.prepare

    def counting(graph, options):
        calls.append(graph)
        return real(graph, options)
    monkeypatch.setattr(passes, "prepare", counting)
    return calls


def test_the_program_is_prepared_once_per_graph(monkeypatch):
    calls = _counting_prepare(monkeypatch)
    engine = ReferenceEngine(program=True)
    g = cudnn.pygraph(io_data_type=D, compute_data_type=D, backends=[engine])
    x = g.tensor([2, 6, 6], name="x")
    y = g.diagonal_band_mask(x, right_bound=0, implementation=AI.COMPOSITE).set_output(True)
    g.validate_ir()
    xs, out = RNG.standard_normal((2, 6, 6)) + 2.0, np.full((2, 6, 6), np.nan)
    g.execute({x: xs, y: out})  # routes, checks support, builds and runs
    g.check_support()
    g.execute({x: xs, y: out})
    np.testing.assert_array_equal(out, np.where(np.tril(np.ones((6, 6), bool)), xs, -np.inf))
    assert calls == [g]


def test_an_edit_before_the_freeze_drops_the_prepared_program(monkeypatch):
    calls = _counting_prepare(monkeypatch)
    engine = ReferenceEngine(program=True)
    g = cudnn.pygraph(io_data_type=D, compute_data_type=D)
    x = g.tensor([2, 6, 6], name="x")
    g.diagonal_band_mask(x, right_bound=0, implementation=AI.COMPOSITE).set_output(True)
    g.validate_ir()
    engine.check_support(g)
    engine.check_support(g)
    before = len(engine._nodes(g))
    assert len(calls) == 1
    g.relu(x).set_output(True)  # an edit: the program is stale
    g.validate_ir()
    engine.check_support(g)
    assert len(calls) == 2 and len(engine._nodes(g)) == before + 1 and len(calls) == 2
