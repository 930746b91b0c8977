"""A graph shared by threads (issue #37, class 5): validate / build_operation_graph from 8 threads at once on the
same graph, deviceless, with no error in any of them. Before the fix, one thread's inference read another's
half-inferred tensors ("dims are not set", "stride [] and dims [...] differ in rank") and, in a fresh process, a
thread read the lowering registry while another was still filling it ("no backend lowering for this op kind")."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from cudnn_py import registry

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = r"""
import collections, json, sys, threading
sys.path.insert(0, sys.argv[1])
from tests.support.libcuda_stub import ensure_driver
ensure_driver()
import cudnn_py as cudnn

sys.setswitchinterval(1e-6)  # switch threads as often as possible: the races show within a few graphs
errors, validated = collections.Counter(), 0
for trial in range(int(sys.argv[2])):
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT,
                      intermediate_data_type=cudnn.data_type.FLOAT)
    A = g.tensor(dim=[4, 64, 32], stride=[2048, 32, 1], name="A")
    B = g.tensor(dim=[4, 32, 16], stride=[512, 16, 1], name="B")
    bias = g.tensor(dim=[4, 64, 16], stride=[1024, 16, 1], name="bias")
    g.add(g.relu(g.matmul(A, B, name="mm"), name="r"), bias, name="out").set_output(True)
    barrier = threading.Barrier(8)

    def work(step):
        barrier.wait()
        try:
            g.validate() if step % 2 else g.build_operation_graph()
        except Exception as e:
            errors[f"{type(e).__name__}: {str(e)[:160]}"] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    validated += g.is_validated
print(json.dumps({"errors": dict(errors), "validated": validated}))
"""


def test_eight_threads_validating_one_graph_all_succeed():
    env = dict(os.environ)
    env.pop("CUDNN_PY_TRACE", None)
    # a fresh process: the first lowering of a process fills the lowering registry, and that is one of the races
    r = subprocess.run([sys.executable, "-c", _SCRIPT, str(ROOT), "40"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)  # a deadlock fails the test (TimeoutExpired)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result == {"errors": {}, "validated": 40}, result


def test_a_registry_is_read_only_once_filled(monkeypatch):
    """A thread reading a registry another thread is filling waits for the whole of it (it once got a partial
    one: the lowering of the op it looked up was not there yet)."""
    reg: registry.Registry[int] = registry.Registry(registry.LOWERING, "test entry")
    started, release = threading.Event(), threading.Event()

    def filler(facet: str) -> None:  # like the families' filler: importing is idempotent, so is this
        started.set()
        assert release.wait(60)
        if "op" not in reg._entries:
            reg.add("op", 7)

    monkeypatch.setattr(registry, "_filler", filler)
    first = threading.Thread(target=reg.fill)
    first.start()
    assert started.wait(60)
    seen: list = []
    second = threading.Thread(target=lambda: seen.append(reg.get("op")))
    second.start()
    second.join(0.2)  # with the fix it waits for the filler whatever the time; without, it read None at once
    release.set()
    first.join(60)
    second.join(60)
    assert seen == [7] and reg["op"] == 7


def test_a_family_reading_its_own_registry_while_it_loads_does_not_recurse(monkeypatch):
    reg: registry.Registry[int] = registry.Registry(registry.REFERENCE, "test entry")
    calls = []

    def filler(facet: str) -> None:
        calls.append(facet)
        reg.add("a", 1)
        assert reg.get("b") is None and dict(reg) == {"a": 1}  # what was added so far, no second fill
        reg.add("b", 2)

    monkeypatch.setattr(registry, "_filler", filler)
    assert dict(reg) == {"a": 1, "b": 2} and calls == [registry.REFERENCE]
    assert reg.get("b") == 2 and calls == [registry.REFERENCE]  # filled once
