"""The attention fuzzer (fuzz/sdpa_fuzz.py) on the CPU: its cases are reproducible and cover the options it claims,
and some run deviceless (build + validate() against the real cuDNN) in a child process: no signal, every case
answered, a refusal only with its reason. The GPU run (poisoned outputs and workspace, the float64 reference
engine) is ``python -m fuzz.sdpa_fuzz`` on the device."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from fuzz.sdpa_fuzz import make_case

ROOT = Path(__file__).resolve().parent.parent
SEED = 20261201


def test_cases_are_reproducible_and_cover_the_options():
    cases = [make_case(SEED, i) for i in range(400)]
    assert cases[17] == make_case(SEED, 17) and cases[17] != make_case(SEED + 1, 17)
    seen: Counter = Counter()
    for s in cases:
        assert s["h_q"] % s["h_k"] == 0
        assert not (s["bottom_right"] and s["s_q"] > s["s_kv"] and not s["padding"])
        seen.update([s["direction"], s["dtype"], s["layout"], s["implementation"], s["d"],
                     "gqa" if s["h_k"] < s["h_q"] else "mha", "decode" if s["s_q"] == 1 else "prefill",
                     "odd" if s["s_kv"] % 64 else "aligned"])
        seen.update(k for k in ("causal", "bottom_right", "window", "padding", "bias", "alibi", "sink", "drop_mask",
                                "scale_tensor") if s[k])
    for key in ("forward", "backward", "HALF", "BFLOAT16", "bhsd", "bshd", "AUTO", "COMPOSITE", "UNIFIED", 64, 128,
                256, "gqa", "mha", "decode", "odd", "aligned", "causal", "bottom_right", "window", "padding", "bias",
                "alibi", "sink", "drop_mask", "scale_tensor"):
        assert seen[key] > 0, key


def test_sdpa_fuzz_deviceless_has_no_deaths_and_says_why_it_refuses():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    n = 40
    program = ("from tests.support.libcuda_stub import ensure_driver; ensure_driver()\n"
               f"from fuzz.sdpa_fuzz import main; main(['--deviceless', '--cases', '{n}', '--seed', '{SEED}'])")
    p = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    running = [ln for ln in p.stdout.splitlines() if ln.startswith("CASE ")]
    if p.returncode:
        how = signal.Signals(-p.returncode).name if p.returncode < 0 else f"exit {p.returncode}"
        raise AssertionError(f"sdpa fuzz died ({how}) in {running[-1] if running else 'the prelude'}:\n"
                             f"{p.stderr[-3000:]}")
    results = [ln.split(" ", 4)[1:] for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(results) == n
    outcomes = Counter(r[2] for r in results)
    assert set(outcomes) <= {"validated", "refused"}, outcomes
    assert outcomes["validated"] > n // 3, outcomes
    for case, direction, outcome, *why in results:
        if outcome == "refused":
            assert why and why[0].strip(), (case, direction)
