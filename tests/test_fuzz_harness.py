"""fuzz/harness.py's parent on the CPU, with fake workers (python children, no cuDNN): a hung case is killed after
the per-case timeout and recorded with its case printed, a chatty worker stalls no other, a dying worker's case
counts as died, and the cases a killed worker had left run in a fresh one."""
from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from fuzz import harness

FAKE_WORKER = textwrap.dedent("""
    import json, os, sys, time
    cases = [int(c) for c in sys.argv[1].split(",") if c]
    for case in cases:
        print(json.dumps({"start": case}), flush=True)
        if case == 1:
            open(sys.argv[2], "w").write(str(os.getpid()))
            time.sleep(60)  # hangs (for long enough: a harness that did not kill it fails the test, after 60 s)
        if case == 2:
            for _ in range(4000):  # chatty: ~200 KB of lines that are not records
                print("cuDNN says: " + "x" * 40)
        if case == 5:
            os._exit(7)  # dies inside the case
        print(json.dumps({"case": case, "kind": "fake", "outcome": "ok"}), flush=True)
""")


def test_a_hung_case_times_out_and_the_rest_still_run(tmp_path, capsys):
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    out = tmp_path / "run.jsonl"
    hung_pid = tmp_path / "hung.pid"
    results = harness.run_all("unused", lambda seed, case: {"kind": "fake"}, "kind", 0, 8, 2, str(out),
                              timeout=60.0, case_timeout=2.0,
                              command=lambda cases: [sys.executable, str(script), ",".join(map(str, cases)),
                                                     str(hung_pid)])
    pid = int(hung_pid.read_text())
    with pytest.raises(ProcessLookupError):  # the hung worker was killed (and reaped), not waited out
        os.kill(pid, 0)
    assert sorted(results) == list(range(8))
    assert results[1]["outcome"] == "timeout" and "no result 2 s after it started" in results[1]["reason"]
    assert results[5]["outcome"] == "died" and "exit status 7" in results[5]["reason"]
    assert all(results[c]["outcome"] == "ok" for c in (0, 2, 3, 4, 6, 7))  # 3, 5, 7 after case 1 in a fresh worker
    assert f"fuzz: case 1 (kind fake) timed out: no result 2 s after it started; worker pid {pid} killed" in \
        capsys.readouterr().err
    assert harness.failures(str(out)) == 2
    assert [json.loads(line)["case"] for line in out.read_text().splitlines()] == list(range(8))
