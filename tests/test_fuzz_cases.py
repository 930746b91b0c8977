"""The graph fuzzer's case generator (fuzz/graph_fuzz.py) on the CPU: cases are reproducible by id and cover what
the fuzzer promises; the GPU run itself is tests/test_gpu_fuzz.py and `python -m fuzz.graph_fuzz`."""
from __future__ import annotations

from collections import Counter

import pytest

from fuzz.graph_fuzz import make_case


def test_cases_are_reproducible_by_id():
    assert make_case(7, 123) == make_case(7, 123)
    assert make_case(7, 123) != make_case(8, 123)


def test_the_case_mix_covers_what_the_fuzzer_promises():
    cases = [make_case(20261201, i) for i in range(2000)]
    kinds = Counter(c["kind"] for c in cases)
    assert set(kinds) == {"matmul", "pointwise", "reduction"} and kinds["matmul"] > 900
    mm = [c for c in cases if c["kind"] == "matmul"]
    assert {c["dtype"] for c in mm} == {"HALF", "BFLOAT16", "FLOAT"}
    assert {c["cast_from"] for c in mm} >= {None, "INT8", "HALF"}
    assert {c["a_layout"] for c in mm} == {"packed", "colmajor", "padded"}
    assert {c["epilogue"] for c in mm} == {"none", "bias", "relu", "gelu", "bias_relu"}
    assert any(c["K"] % 4 for c in mm) and any(c["b_batch"] != c["batch"] for c in mm)
    assert {len(c["shape"]) for c in cases if c["kind"] == "pointwise"} == {1, 2, 3, 4}
    assert {c["axes"] for c in cases if c["kind"] == "reduction"} == {"channel", "pixel", "all"}


@pytest.mark.gpu
def test_a_short_fuzz_run_has_no_deaths_and_no_wrong_results(tmp_path):
    import os
    import subprocess
    import sys

    out = tmp_path / "fuzz.jsonl"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-m", "fuzz.graph_fuzz", "--cases", "48", "--workers", "4", "--out", str(out)],
                       cwd=root, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([root] + sys.path)})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
