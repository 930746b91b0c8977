"""pygraph.explain() on the CPU: the IR as built and as lowered, the backend descriptors read from the lowered
graph, the passes' log, errata, and where validation stopped; JSON and Graphviz forms. (Engine configs and plans
need a GPU: tests/test_gpu_plans.py.)"""
from __future__ import annotations

import json
import shutil

import pytest

import cudnn_py as cudnn

H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT
AI = cudnn.attention_implementation


def graph(batch=1):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    a, b = g.tensor([batch, 8, 16], name="a"), g.tensor([batch, 16, 4], name="b")
    g.diagonal_band_mask(g.relu(g.matmul(a, b)), right_bound=0, implementation=AI.COMPOSITE,
                         name="mask").set_output(True)
    return g


def test_explain_text_shows_both_irs_the_descriptors_and_the_passes():
    g = graph()
    report = g.explain()
    assert "phase: VALIDATED" in report
    built, lowered = report.split("IR as built:")[1].split("IR as lowered (after the passes):")
    assert "mask: diagonal_band_mask" in built and "gen_index" not in built  # the user's graph as built
    assert "gen_index" in lowered and "binary_select" in lowered and "pass: decompose" in lowered
    assert "OPERATION_MATMUL_DESCRIPTOR (finalized)" in report and "MATMUL_COMP_TYPE=CUDNN_DATA_FLOAT" in report
    assert "POINTWISE_MODE=CUDNN_POINTWISE_GEN_INDEX" in report


def test_explain_json_lists_every_descriptor_the_graph_holds():
    g = graph()
    doc = json.loads(g.explain("json"))
    kinds = [d["kind"] for d in doc["descriptors"]]
    assert kinds.count("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR") == 1
    assert "CUDNN_BACKEND_MATMUL_DESCRIPTOR" in kinds  # reached through the operation's attributes
    assert len(doc["descriptors"]) == len({d["id"] for d in doc["descriptors"]})
    assert doc["lowered_ir"]["log"] and doc["cudnn"]["version"] > 0 and doc["engine_configs"] == []


def test_explain_says_whether_repeated_executes_are_replayed():
    g = graph()
    doc = json.loads(g.explain("json"))
    # conftest turns replay off for the CPU tests: the executor says so, and why
    assert doc["execute_replay"]["enabled"] is False
    assert doc["execute_replay"]["refusal"] == "CUDNN_PY_REPLAY=0"
    assert "execute replay (a repeated execute launched as a CUDA graph): off: CUDNN_PY_REPLAY=0" in g.explain()


def test_explain_reports_where_validation_stopped():
    report = graph(batch=2).explain()  # hits an erratum (GEN_INDEX after a batched matmul)
    assert "STOPPED: validate: cudnnGraphNotSupportedError: cuDNN erratum gen-index-in-batched-matmul-epilogue" in report
    assert "IR as lowered" in report  # the program the erratum was found in is still shown


def test_explain_dot_and_render():
    text = graph().explain("dot")
    assert text.startswith("digraph cudnn_py {") and "cluster_b" in text and "cluster_l" in text
    assert text.count("{") == text.count("}")
    with pytest.raises(ValueError, match="'text', 'json' or 'dot'"):
        graph().explain("yaml")
    if shutil.which("dot") is None:
        with pytest.raises(RuntimeError, match="Graphviz"):
            graph().render_dot("/tmp/never.svg")
