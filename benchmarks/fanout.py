"""Operation-graph finalize time against the number of operations reading only non-virtual tensors (issue #27).

Case n: one non-virtual [1, 8, 16] float tensor read by n RELU_FWD pointwise operations, each writing a non-virtual
output, then the OPERATIONGRAPH finalized. Each case runs in a fresh process with a timeout; an implementation that
times out at n is not run at larger n (it only gets slower). Implementations:

* ``raw``: the backend calls alone (cudnn_py's ``Descriptor``: tensors, POINTWISE, OPERATION_POINTWISE,
  OPERATIONGRAPH finalized without a handle, or with one under ``--handle``): the reproducer of the erratum
  ``opgraph-finalize-source-op-fanout`` (``cudnn_py/plans/errata.py``), which bypasses it;
* ``cudnn_py``: ``pygraph.validate()`` (refused from ``SOURCE_OPS_LIMIT`` ops where the erratum applies: the
  refusal's time is shown, marked ``refused``);
* ``official``: the official frontend (``import cudnn``), ``validate()`` + ``build_operation_graph()`` (needs a GPU),
  where importable.

With no driver library (CPU), the test-only libcuda stand-in (``tests/support/libcuda_stub.py``) is loaded. The
whole run stays under ``--budget`` seconds (default 55).

    python benchmarks/fanout.py [--n 4,6,8,9,10,11,12,13,14] [--timeout 8] [--impl raw,cudnn_py,official] [--handle]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPE, STRIDE = [1, 8, 16], [128, 16, 1]


def _driver() -> str:
    sys.path.insert(0, str(ROOT))
    from tests.support.libcuda_stub import ensure_driver

    return ensure_driver()


def case_raw(n: int, handle: bool) -> float:
    from cudnn_py.backend import Descriptor

    h = None
    if handle:
        from cudnn_py.backend.handle import create_handle

        h = create_handle()

    def tensor(uid: int) -> Descriptor:
        t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
        t.set("CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_DATA_FLOAT")
        t.set("CUDNN_ATTR_TENSOR_DIMENSIONS", SHAPE)
        t.set("CUDNN_ATTR_TENSOR_STRIDES", STRIDE)
        t.set("CUDNN_ATTR_TENSOR_UNIQUE_ID", uid)
        t.set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16)
        return t.finalize()

    x = tensor(1)
    ops = []
    for i in range(n):
        pw = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR")
        pw.set("CUDNN_ATTR_POINTWISE_MODE", "CUDNN_POINTWISE_RELU_FWD")
        pw.set("CUDNN_ATTR_POINTWISE_MATH_PREC", "CUDNN_DATA_FLOAT")
        pw.finalize()
        op = Descriptor("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR")
        op.set("CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR", pw)
        op.set("CUDNN_ATTR_OPERATION_POINTWISE_XDESC", x)
        op.set("CUDNN_ATTR_OPERATION_POINTWISE_YDESC", tensor(2 + i))
        ops.append(op.finalize())
    og = Descriptor("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR")
    og.set("CUDNN_ATTR_OPERATIONGRAPH_OPS", ops)
    if h is not None:
        og.set("CUDNN_ATTR_OPERATIONGRAPH_HANDLE", int(h))
    t0 = time.perf_counter()
    og.finalize()
    return time.perf_counter() - t0


def _pygraph_case(cudnn, n: int, official: bool) -> float:
    F = cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    x = g.tensor(name="x", dim=SHAPE, stride=STRIDE, data_type=F)
    for i in range(n):
        g.relu(x, name=f"relu{i}").set_output(True)
    t0 = time.perf_counter()
    g.validate()
    if official:
        g.build_operation_graph()
    return time.perf_counter() - t0


def _warm(impl: str, handle: bool) -> None:
    """Load the library and its sub-libraries first (a one-op graph): the case then times the finalize alone."""
    if impl == "raw":
        case_raw(1, handle)
    elif impl == "cudnn_py":
        import cudnn_py

        _pygraph_case(cudnn_py, 1, False)
    else:
        import cudnn

        _pygraph_case(cudnn, 1, True)


def child(impl: str, n: int, handle: bool) -> None:
    driver = _driver()
    _warm(impl, handle)
    refused = ""
    if impl == "raw":
        s = case_raw(n, handle)
    elif impl == "cudnn_py":
        import cudnn_py

        t0 = time.perf_counter()
        try:
            s = _pygraph_case(cudnn_py, n, False)
        except cudnn_py.cudnnGraphNotSupportedError as e:
            s, refused = time.perf_counter() - t0, str(e)[:160]
    else:
        import cudnn

        s = _pygraph_case(cudnn, n, True)
    from cudnn_py.backend import loader

    lib = loader.load_library()
    print(json.dumps({"impl": impl, "n": n, "s": s, "refused": refused, "cudnn": lib.version_string,
                      "driver": "real" if driver == "real" else "stub"}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", default="4,6,8,9,10,11,12,13,14")
    ap.add_argument("--timeout", type=float, default=8.0, help="seconds per case (default 8)")
    ap.add_argument("--budget", type=float, default=55.0, help="seconds for the whole run (default 55)")
    ap.add_argument("--impl", default="raw,cudnn_py,official")
    ap.add_argument("--handle", action="store_true", help="raw: finalize with a handle (needs a GPU)")
    ap.add_argument("--child", nargs=2, metavar=("IMPL", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), a.handle)
        return
    impls = [i for i in a.impl.split(",") if i]
    if "official" in impls:
        probe = subprocess.run([sys.executable, "-c", "import cudnn; cudnn.pygraph"], capture_output=True)
        if probe.returncode != 0:
            print("official: `import cudnn` fails here: skipped")
            impls.remove("official")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start, rows = time.perf_counter(), []
    print(f"{'impl':9} {'n':>3} {'seconds':>9}  note")
    for impl in impls:
        for n in [int(x) for x in a.n.split(",")]:
            left = a.budget - (time.perf_counter() - start)
            if left < 1:
                print(f"{impl:9} {n:>3} {'-':>9}  skipped: the run's budget of {a.budget:.0f} s is spent")
                continue
            limit = min(a.timeout, left)
            cmd = [sys.executable, __file__, "--child", impl, str(n)] + (["--handle"] if a.handle else [])
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=min(limit + 5, left))  # + start-up
            except subprocess.TimeoutExpired:
                rows.append({"impl": impl, "n": n, "s": None, "timeout": limit})
                print(f"{impl:9} {n:>3} {'>' + format(limit, '.0f'):>9}  timed out: larger n not run")
                break
            if r.returncode != 0:
                rows.append({"impl": impl, "n": n, "s": None, "error": r.stderr.strip()[-300:]})
                print(f"{impl:9} {n:>3} {'-':>9}  failed: {r.stderr.strip().splitlines()[-1:]}")
                break
            row = json.loads(r.stdout.strip().splitlines()[-1])
            rows.append(row)
            note = f"cuDNN {row['cudnn']}, driver {row['driver']}" + (f"; refused: {row['refused']}"
                                                                       if row["refused"] else "")
            over = " (over the per-case timeout)" if row["s"] > limit else ""
            print(f"{impl:9} {n:>3} {row['s']:>9.3f}  {note}{over}")
            if row["s"] > limit:
                break
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
