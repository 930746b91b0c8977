"""benchmarks/attention.py on the CPU: the module imports without torch or a GPU, and the very graphs it
benchmarks (the same builders and keyword calls, small shapes) validate deviceless with cudnn_py on cuDNN 9.28."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import cudnn_py as cudnn
from cudnn_py.ir.layout import row_major_strides

_SPEC = importlib.util.spec_from_file_location(  # benchmarks/ is not a package
    "benchmarks_attention", Path(__file__).resolve().parent.parent / "benchmarks" / "attention.py")
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def small(case):
    return {**case, "b": 1, "h_q": case["h_q"] // 4, "h_kv": max(1, case["h_kv"] // 4),
            "s_q": min(case["s_q"], 256), "s_kv": 256, "d": 64}


@pytest.mark.parametrize("name", list(bench.CASES))
def test_benchmarked_forward_graphs_validate_deviceless(name):
    case = small(bench.CASES[name])
    layouts = {n: (dims, row_major_strides(dims)) for n, dims in bench.shapes(case).items()}
    g, names = bench.forward_graph(cudnn, None, case, layouts)
    g.validate()
    assert sorted(names.values()) == ["k", "o", "q", "v"]
    out = next(t for t, n in names.items() if n == "o")
    assert out.get_dim() == layouts["o"][0]


@pytest.mark.parametrize("name", bench.BACKWARD_CASES)
def test_benchmarked_backward_graphs_validate_deviceless(name):
    case = small(bench.CASES[name])
    layouts = {n: (dims, row_major_strides(dims)) for n, dims in bench.shapes(case).items()}
    g, names = bench.backward_graph(cudnn, None, case, layouts)
    g.validate()
    grads = {n: t for t, n in names.items() if n.startswith("d") and n != "dO"}
    assert [grads[n].get_dim() for n in ("dQ", "dK", "dV")] == [layouts[x][0] for x in ("q", "k", "v")]


def test_flop_counts():
    causal, full = bench.CASES["causal"], bench.CASES["non_causal"]
    assert bench.flops(full) == 4 * 2 * 16 * 4096 * 4096 * 128
    assert bench.flops(causal) == bench.flops(full) / 2
    assert bench.flops(causal, backward=True) == 2.5 * bench.flops(causal)
    assert bench.CASES["decode"]["s_q"] == 1 and bench.CASES["gqa4_causal"]["h_kv"] < bench.CASES["gqa4_causal"]["h_q"]


def test_the_paired_host_ratio_is_the_median_of_per_round_ratios():
    # the host slows down in rounds 2-3 for both contenders: the ratio of medians moves, the paired one does not
    samples = {"official": [20.0, 40.0, 40.0, 20.0, 20.0], "cudnn_py": [9.0, 18.0, 18.0, 9.0, 9.0]}
    assert bench.paired_ratio(samples, "cudnn_py") == 0.45
    samples["cudnn_py"][0] = 30.0  # one outlier round
    assert bench.paired_ratio(samples, "cudnn_py") == 0.45
