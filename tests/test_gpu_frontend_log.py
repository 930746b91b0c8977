"""GPU: the frontend log's planning and execute lines (CUDNN_FRONTEND_LOG_INFO / CUDNN_FRONTEND_LOG_FILE,
cudnn_py/frontend_log.py), in a fresh process (the variables are read once per process): heuristics queries, engine
configs, a filter, check_support, the plans built, the candidate, and every execute logged, with correct results
(outputs poisoned first). The validate-time lines are tests/test_frontend_log.py's, on the CPU."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "[cudnn_frontend] "

SCRIPT = textwrap.dedent("""
    import torch
    import cudnn_py as cudnn

    H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, name="mm_log")
    a = g.tensor(name="a", dim=[2, 64, 128], stride=[64 * 128, 128, 1])
    b = g.tensor(name="b", dim=[2, 128, 32], stride=[128 * 32, 32, 1])
    c = g.matmul(a, b, name="mm")
    c.set_output(True).set_data_type(H).set_name("c")
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.deselect_workspace_greater_than(1 << 40)
    g.check_support()
    g.build_plans()
    A = torch.randn(2, 64, 128, device="cuda", dtype=torch.half)
    B = torch.randn(2, 128, 32, device="cuda", dtype=torch.half)
    ref = (A.double() @ B.double())
    for _ in range(3):
        C = torch.full((2, 64, 32), float("nan"), device="cuda", dtype=torch.half)
        ws = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        g.execute({a: A, b: B, c: C}, ws)
        torch.cuda.synchronize()
        err = ((C.double() - ref).norm() / ref.norm()).item()
        assert torch.isfinite(C).all() and err < 5e-3, err
    print("ok")
""")


def test_planning_and_execute_are_logged(tmp_path):
    log = tmp_path / "fe.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               CUDNN_FRONTEND_LOG_INFO="1", CUDNN_FRONTEND_LOG_FILE=str(log))
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    lines = log.read_text().splitlines()
    assert all(line.startswith(PREFIX) for line in lines)
    body = [line[len(PREFIX):] for line in lines]
    text = "\n".join(body)
    assert "||| === VALIDATING GRAPH === |||" in body
    assert "Heuristic query for mode CUDNN_HEUR_MODE_A has " in text
    assert "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR : eng" in text
    assert "(finalized with a handle 0x" in text or "finalized with handle 0x" in text
    assert "INFO: Check support for index 0 passed with cfg eng" in text
    assert "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : Tag: eng" in text and " workspace: " in text
    assert "INFO: Candidate set as " in text
    executing = [line for line in body if line.startswith("INFO: Executing eng")]
    executed = [line for line in body if line.startswith("INFO: Executed eng")]
    assert len(executing) == len(executed) == 3  # every call through the checked execute, none replayed
    # in the order of the flow
    order = [text.index(s) for s in ("VALIDATING GRAPH", "Heuristic query", "Check support", "EXECUTION_PLAN",
                                     "Candidate set as", "Executing eng")]
    assert order == sorted(order)
