"""GPU: the examples run as scripts (a fresh process each, as a user runs them) and report their error against
the float64 reference; each asserts its own bound and exits non-zero past it."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("script", ["first_graph.py", "conv_bias_relu.py", "layernorm_train.py", "with_torch.py",
                                    "sdpa_train_step.py"])
def test_example_runs_and_reports_its_error(script):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(ROOT / "examples" / script)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, f"{script} failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    errors = [float(v) for v in re.findall(r"relative error.*?([0-9.]+e[-+]\d+)", p.stdout)]
    assert errors and all(e < 5e-2 for e in errors), p.stdout
