"""The erratum opgraph-finalize-source-op-fanout (issue #27): a graph with many operations reading only non-virtual
tensors is refused before cuDNN's operation-graph finalize, which would not return in practice. The child's
timeout is the hang guard; how long finalize takes per operation count is benchmarks/fanout.py's."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASE = """
    import io, sys
    sys.path.insert(0, ROOT_PATH)
    from tests.support.libcuda_stub import ensure_driver
    ensure_driver()
    import cudnn_py as cudnn
    from cudnn_py.backend import trace
    from cudnn_py.plans import errata
    F = cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor([1, 8, 16], name="x")
    for i in range(NUM_OPS):
        g.relu(x).set_output(True)
    out = io.StringIO()
    try:
        with trace.tracing(out):
            g.validate()
        print("ACCEPTED")
    except cudnn.cudnnGraphNotSupportedError as e:
        print("REFUSED"); print(e)
    finalized = {c["kind"] for c in trace.read(out.getvalue().splitlines()) if c["fn"] == "cudnnBackendFinalize"}
    limit = errata.SOURCE_OPS_LIMIT if cudnn.backend_version() >= 92800 else errata.SOURCE_OPS_LIMIT_9_19
    print("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR" in finalized, limit)
"""


def run_case(n: int) -> list[str]:
    code = textwrap.dedent(CASE).replace("ROOT_PATH", repr(ROOT)).replace("NUM_OPS", str(n))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip().splitlines()


def test_twenty_relus_of_one_input_are_refused_before_the_operation_graph_is_finalized():
    out = run_case(20)
    assert out[0] == "REFUSED", out
    msg = out[1]
    assert "opgraph-finalize-source-op-fanout" in msg and "20 operations" in msg
    finalized, limit = out[-1].split()
    assert "tensor 'x' has a fan-out of 20" in msg and f"{limit} or more are refused" in msg
    assert finalized == "False" and int(limit) in (12, 14)  # 14 on cuDNN 9.19 - 9.27


def test_four_relus_of_one_input_are_accepted():
    out = run_case(4)
    assert out[0] == "ACCEPTED" and out[-1].split()[0] == "True"  # (the trace sees the finalize where there is one)


def test_the_limit_is_in_the_source():
    from cudnn_py.plans import errata

    e = next(e for e in errata.ERRATA if e.id == "opgraph-finalize-source-op-fanout")
    assert "benchmarks/fanout.py --impl raw" in e.source
    assert errata.SOURCE_OPS_LIMIT - 1 == 11  # the largest count the CPU suite builds (MXFP8 attention backward)


def test_on_9_19_the_limit_is_the_one_measured_there():
    """cuDNN 9.19 on the H200 (2026-12-03): 14 source operations took 7.8 s, 13 took 2.5 s; the 9.19 entry refuses
    from 14, the 9.28 entry does not apply there."""
    import pytest

    import cudnn_py as cudnn
    from cudnn_py.ir.passes import PassOptions, prepare
    from cudnn_py.plans import errata

    def program(n):
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
        x = g.tensor([1, 8, 16], name="x")
        for _ in range(n):
            g.relu(x).set_output(True)
        g.validate_ir()
        return g, prepare(g, PassOptions(available=lambda f, at_least=0: True))

    g13, p13 = program(13)
    errata.check(p13, 91900)  # not refused (the 9.28 limit, 12, is not 9.19's)
    g14, p14 = program(14)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"opgraph-finalize-source-op-fanout-9\.19.*14 operations"):
        errata.check(p14, 91900)
