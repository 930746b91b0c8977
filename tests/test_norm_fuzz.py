"""The normalization family under a deviceless fuzz (fuzz/norm_fuzz.py), in a child process: no signal, every case
answered; malformed shapes always refused by the IR, well-formed ones never refused by it (cuDNN may still say
NOT_SUPPORTED, which must then be a NotSupported error carrying cuDNN's message)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_norm_fuzz_has_no_deaths_and_refuses_exactly_the_malformed():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    n = 300
    program = ("from tests.support.libcuda_stub import ensure_driver; ensure_driver()\n"  # deviceless finalize
               f"from fuzz.norm_fuzz import main; main(['--cases', '{n}', '--seed', '20261201'])")
    p = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    running = [ln for ln in p.stdout.splitlines() if ln.startswith("CASE ")]
    if p.returncode:
        how = signal.Signals(-p.returncode).name if p.returncode < 0 else f"exit {p.returncode}"
        raise AssertionError(f"norm fuzz died ({how}) in {running[-1] if running else 'the prelude'}:\n"
                             f"{p.stderr[-3000:]}")
    results = [ln.split(" ", 4)[1:] for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(results) == n
    outcomes = Counter((quality, verdict.split(" ")[0]) for _, quality, _, verdict in results)
    assert outcomes[("bad", "ok")] == 0 and outcomes[("bad", "refused-cudnn")] == 0, outcomes
    assert outcomes[("good", "refused-ir")] == 0, [r for r in results if r[1] == "good" and "refused-ir" in r[3]]
    assert outcomes[("good", "ok")] > n // 2 and outcomes[("bad", "refused-ir")] > n // 10, outcomes
    for _, _, method, verdict in results:
        if verdict.startswith("refused-cudnn"):
            assert "NOT_SUPPORTED" in verdict or "cuDNN erratum" in verdict, (method, verdict)
