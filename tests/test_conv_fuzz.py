"""The conv fuzzer (fuzz/conv_fuzz.py) on the CPU: its cases are reproducible and cover the space it claims, and a
few of them run deviceless (build + validate() against the real cuDNN) in a child process: no signal, every case
answered, none refused by the IR (every case is well-formed), a cuDNN refusal only with its reason. The GPU run
(outputs, workspace poisoned, float64 reference engine) is ``python -m fuzz.conv_fuzz`` on the device."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from fuzz.conv_fuzz import dims_of, make_case, output_size

ROOT = Path(__file__).resolve().parent.parent
SEED = 20261201


def test_cases_are_reproducible_well_formed_and_cover_the_space():
    cases = [make_case(SEED, i) for i in range(300)]
    assert cases[17] == make_case(SEED, 17) and cases[17] != make_case(SEED + 1, 17)
    seen: Counter = Counter()
    for s in cases:
        d = dims_of(s)
        assert all(o >= 1 for o in d["y"][2:]) and d["y"][2:] == output_size(
            s["size"], s["kernel"], s["pre"], s["post"], s["stride"], s["dilation"])
        assert s["c"] % s["groups"] == 0 and s["k"] % s["groups"] == 0
        seen.update([s["direction"], s["dtype"], s["layout"], s["mode"], s["padding_form"], len(s["size"]),
                     "dense" if s["groups"] == 1 else ("depthwise" if s["groups"] == s["c"] else "grouped"),
                     "aligned" if s["aligned"] else "unaligned",
                     "strided" if max(s["stride"]) > 1 else "unit", "dilated" if max(s["dilation"]) > 1 else "-"])
    for key in ("fprop", "dgrad", "wgrad", "HALF", "BFLOAT16", "FLOAT", "INT8", "nhwc", "nchw", "CONVOLUTION",
                "CROSS_CORRELATION", "padding", "pre_post", 2, 3, "grouped", "depthwise", "dense", "aligned",
                "unaligned", "strided", "dilated"):
        assert seen[key] > 0, key


def test_conv_fuzz_deviceless_has_no_deaths_and_no_ir_refusals():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    n = 60
    program = ("from tests.support.libcuda_stub import ensure_driver; ensure_driver()\n"  # deviceless finalize
               f"from fuzz.conv_fuzz import main; main(['--deviceless', '--cases', '{n}', '--seed', '{SEED}'])")
    p = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    running = [ln for ln in p.stdout.splitlines() if ln.startswith("CASE ")]
    if p.returncode:
        how = signal.Signals(-p.returncode).name if p.returncode < 0 else f"exit {p.returncode}"
        raise AssertionError(f"conv fuzz died ({how}) in {running[-1] if running else 'the prelude'}:\n"
                             f"{p.stderr[-3000:]}")
    results = [ln.split(" ", 4)[1:] for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(results) == n
    outcomes = Counter(r[2] for r in results)
    assert set(outcomes) <= {"validated", "refused"}, outcomes
    assert outcomes["validated"] > n // 2, outcomes
    for case, direction, outcome, *why in results:
        if outcome == "refused":  # only cuDNN may refuse a well-formed case, and it must say why
            assert why and why[0] and not why[0].startswith(("ValueError", "TypeError")), (case, direction, why)
