"""Reliability of tracing, replay and the loader: tracing can neither hang nor break the traced program, a crashed
program's trace ends with the call that crashed and replay reports the crash (in a child), replay refuses malformed
or crafted traces before any backend call, and a broken libcudnn install is vetted in a child process instead of
killing the process that loads it."""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import gc
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest

from cudnn_py.backend import Descriptor, loader, trace, tracing
from cudnn_py.tools import trace_replay as replay
from tests.conftest import DRIVER

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WHEEL_LIB = os.path.dirname(loader.load_library().path)


def child_env(**env: str) -> dict[str, str]:
    e = dict(os.environ)
    for k in ("CUDNN_PY_LIBRARY", "CUDNN_PY_TRACE", "CUDNN_PY_LIBRARY_VETTED"):
        e.pop(k, None)
    if DRIVER != "real":  # the test-only libcuda stub, so that cuDNN finalizes descriptors in the child too
        e["LD_PRELOAD"] = DRIVER
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env)
    return e


def run(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=child_env(**env), timeout=timeout)


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudnn_py", *args], capture_output=True, text=True,
                          env=child_env(**env), timeout=180)


def tensor(uid: int = 1) -> Descriptor:
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    t.set("CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_DATA_FLOAT").set("CUDNN_ATTR_TENSOR_DIMENSIONS", [1, 4, 8])
    t.set("CUDNN_ATTR_TENSOR_STRIDES", [32, 8, 1]).set("CUDNN_ATTR_TENSOR_UNIQUE_ID", uid)
    t.set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16)
    return t.finalize()


def lines_of(path) -> list[dict]:
    return [json.loads(x) for x in open(path).read().splitlines()]


# =================================================================================================== tracing
@pytest.mark.parametrize("target", ["fifo", "directory", "device", "not-a-directory", "missing-directory"])
def test_bad_trace_env_warns_once_and_runs_untraced(tmp_path, target):
    """CUDNN_PY_TRACE at a FIFO once hung `import cudnn_py`; at a directory it raised a bare OSError."""
    path = {"fifo": tmp_path / "fifo", "directory": tmp_path, "device": "/dev/null",
            "not-a-directory": tmp_path / "file" / "t.jsonl", "missing-directory": tmp_path / "no" / "t.jsonl"}[target]
    if target == "fifo":
        os.mkfifo(path)
    if target == "not-a-directory":
        (tmp_path / "file").write_text("x")
    r = run("""
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            import cudnn_py
            from cudnn_py.backend import Descriptor, trace
            d = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR").set("CUDNN_ATTR_TENSOR_UNIQUE_ID", 1)
        print(trace.active is None, len(w))
        for x in w:
            print(x.category.__name__, x.message)
    """, timeout=60, CUDNN_PY_TRACE=str(path))
    assert r.returncode == 0, r.stderr
    first, *warned = r.stdout.splitlines()
    assert first == "True 1", r.stdout
    assert warned[0].startswith("RuntimeWarning") and "CUDNN_PY_TRACE" in warned[0] and str(path) in warned[0]
    assert "untraced" in warned[0]
    if target == "fifo":
        assert "FIFO" in warned[0]


def test_explicit_trace_target_that_is_not_a_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (fifo, tmp_path):  # neither blocks: the FIFO is refused before it is opened
        with pytest.raises(OSError, match="not a regular file"):
            with tracing(str(target)):
                pass
    assert trace.active is None


class FailingStream(io.StringIO):
    """A text stream whose n-th write raises (ENOSPC), like a full disk."""

    def __init__(self, fail_at: int):
        super().__init__()
        self.fail_at, self.writes = fail_at, 0

    def write(self, s):
        self.writes += 1
        if self.writes >= self.fail_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(s)


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4, 6])
def test_failing_trace_write_never_breaks_the_call_nor_leaks_the_descriptor(fail_at):
    stream = FailingStream(fail_at)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with tracing(stream):
            d = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")  # create: records 1-3 (start, begin, end)
            d.set("CUDNN_ATTR_TENSOR_UNIQUE_ID", 7)
            t = tensor(2)
        assert trace.active is None
    stopped = [x for x in w if "stopped" in str(x.message)]
    assert len(stopped) == 1 and issubclass(stopped[0].category, RuntimeWarning), [str(x.message) for x in w]
    assert "ENOSPC" in str(stopped[0].message) or "No space" in str(stopped[0].message)
    # the descriptor created while the trace failed is owned: live, destroyable exactly once
    assert not d.destroyed and d.ptr and t.finalized
    assert d._ptr in __import__("cudnn_py.backend.descriptor").backend.descriptor._live
    d.destroy()
    assert d.destroyed


def test_disk_full_and_closed_streams():
    full = open("/dev/full", "w")  # every flush fails with ENOSPC
    try:
        with pytest.warns(RuntimeWarning, match="tracing to /dev/full stopped"), tracing(full):
            tensor()
            tensor()
    finally:
        with contextlib.suppress(OSError):
            full.close()
    closed = io.StringIO()
    with pytest.warns(RuntimeWarning, match="stopped"):
        with tracing(closed):
            tensor()
            closed.close()
            tensor()  # a write to the closed stream: warned once, the call succeeds
            tensor()


def test_failing_trace_where_warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tracing(FailingStream(1)):
            tensor()  # the warning cannot be raised into the traced call either


def test_tracing_blocks_exited_out_of_order(tmp_path):
    """Exiting the outer block first once left the closed outer tracer active: the next call raised ValueError."""
    a_path, b_path = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a, b = tracing(str(a_path)), tracing(str(b_path))
    ta = a.__enter__()
    tb = b.__enter__()
    assert trace.active is tb
    a.__exit__(None, None, None)  # out of order
    assert trace.active is tb
    d1 = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    b.__exit__(None, None, None)
    assert trace.active is None and not ta.alive and not tb.alive
    d2 = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")  # untraced, no error
    assert [r["desc"] for r in trace.calls(b_path) if r["fn"] == "cudnnBackendCreateDescriptor"] == [d1.id]
    assert d2.id not in [r.get("desc") for r in trace.calls(a_path)]
    # a nested block still restores the one outside it
    with tracing(io.StringIO()) as outer:
        with tracing(io.StringIO()) as inner:
            assert trace.active is inner
        assert trace.active is outer
    assert trace.active is None


def test_record_format_begin_end_start_stop(tmp_path):
    path = tmp_path / "t.jsonl"
    with tracing(str(path)):
        t = tensor()
        t.get("CUDNN_ATTR_TENSOR_DIMENSIONS")
        t.destroy()
    recs = lines_of(path)
    assert recs[0]["phase"] == "start" and recs[0]["pid"] == os.getpid()
    assert recs[-1]["phase"] == "stop" and recs[-1]["open"] == []
    body = recs[1:-1]
    seqs = sorted({r["seq"] for r in body})
    assert seqs == list(range(1, len(seqs) + 1))
    for s in seqs:
        b, e = (r for r in body if r["seq"] == s)  # exactly two lines a call: the begin first
        assert b["phase"] == "begin" and e["phase"] == "end" and b["fn"] == e["fn"]
        assert "status" not in b and e["status"] == 0 and e["us"] >= 0
    dims = next(r for r in body if r.get("attr") == "CUDNN_ATTR_TENSOR_DIMENSIONS" and r["phase"] == "begin")
    assert dims["values"] == [1, 4, 8] and dims["count"] == 3  # inputs are written ahead of the call
    got = trace.calls(path)
    read = next(r for r in got if r["fn"] == "cudnnBackendGetAttribute" and r["count"] == 3)
    assert read["values"] == [1, 4, 8] and read["returned"] == 3  # outputs come with the end record
    created = next(r for r in got if r["fn"] == "cudnnBackendCreateDescriptor")
    assert created["ptr"].startswith("0x") and "open" not in created


def test_gc_destroy_during_a_write_keeps_begin_and_end_paired():
    class Stream(io.StringIO):
        def __init__(self):
            super().__init__()
            self.victim: Descriptor | None = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")

        def write(self, s):
            # once: a collection per write is quadratic once earlier tests left thousands of descriptors in
            # cyclic garbage (each destroyed one writes two more lines; minutes on the GPU suite's heap)
            if self.victim is not None:
                victim, self.victim = self.victim, None
                del victim
                gc.collect()
            return super().write(s)

    s = Stream()
    victim = s.victim.id
    with tracing(s):
        keep = tensor()
    assert keep.finalized
    calls = trace.read(s.getvalue().splitlines())
    assert not [c for c in calls if c.get("open")]
    assert [c["desc"] for c in calls if c["fn"] == "cudnnBackendDestroyDescriptor"].count(victim) == 1


def test_forked_child_traces_a_new_run_even_if_the_lock_was_held(tmp_path):
    """A fork while another thread holds the tracer's lock must not deadlock the child's first traced call."""
    path = tmp_path / "fork.jsonl"
    r = run("""
        import os, threading
        from cudnn_py.backend import Descriptor, trace
        d = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
        held, release = threading.Event(), threading.Event()
        def hold():
            with trace.active._lock:
                held.set(); release.wait()
        threading.Thread(target=hold, daemon=True).start(); held.wait()
        pid = os.fork()
        if pid == 0:
            Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
            os._exit(0)
        release.set()
        _, status = os.waitpid(pid, 0)
        print("child exit", status)
    """, timeout=60, CUDNN_PY_TRACE=str(path))
    assert r.returncode == 0 and "child exit 0" in r.stdout, r
    starts = [x for x in lines_of(path) if x["phase"] == "start"]
    assert len(starts) == 2 and starts[0]["pid"] != starts[1]["pid"]
    # the two processes' lines interleave in one file; pid keeps their runs apart
    calls = trace.calls(path)
    assert len(calls) == 3 and not [c for c in calls if c.get("open")]
    assert replay.load(str(path)).crashed_at is None
    rp = cli("replay", str(path))
    assert rp.returncode == 0 and "replayed 3 call(s)" in rp.stdout, rp


# =================================================================================================== crash + replay
CRASH = """
    import ctypes
    from cudnn_py.backend import Descriptor, api, trace
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR").set("CUDNN_ATTR_TENSOR_UNIQUE_ID", 1)
    plan = Descriptor("CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR")
    call = trace.begin("cudnnBackendFinalize", desc=plan.id, kind=plan.kind.name)
    print("calling", flush=True)
    api.lib().cudnnBackendFinalize(plan.ptr)   # raw ctypes: no attribute set; crashes cuDNN 9.28
    call.end(0)
    print("survived", flush=True)
"""


def test_crashed_process_trace_ends_with_the_crashing_call_and_replay_reports_it(tmp_path):
    path = tmp_path / "crash.jsonl"
    r = run(CRASH, CUDNN_PY_TRACE=str(path))
    if r.returncode >= 0:
        pytest.skip(f"finalizing an empty EXECUTION_PLAN did not crash this cuDNN (rc {r.returncode}): {r.stdout}")
    assert "calling" in r.stdout and "survived" not in r.stdout
    last = lines_of(path)[-1]
    assert last["phase"] == "begin" and last["fn"] == "cudnnBackendFinalize"
    assert last["kind"] == "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR"
    rp = cli("replay", str(path))
    out = rp.stdout
    assert rp.returncode >= 0, rp  # the replaying command itself does not die
    assert f"the trace ends inside seq {last['seq']}" in out
    if rp.returncode == 3:  # the crash reproduced (in the replay's child process)
        assert f"replay of {path} crashed at record {last['seq']}" in out and "cudnnBackendFinalize" in out
        assert "with signal SIGSEGV" in out or "with signal SIGABRT" in out or "with signal SIGBUS" in out
        assert "the traced process died at the same call" in out
    else:  # the checked layer refuses the call that crashed the raw one
        assert rp.returncode == 1 and "refused" in out, out


def test_crash_outside_cudnn_is_not_blamed_on_replay(tmp_path):
    path = tmp_path / "sim.jsonl"
    r = run("""
        import ctypes
        from cudnn_py.backend import Descriptor, trace
        t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
        trace.begin("cudnnBackendFinalize", desc=t.id, kind=t.kind.name)
        ctypes.string_at(0)  # the process dies inside the traced region
    """, CUDNN_PY_TRACE=str(path))
    assert r.returncode == -signal.SIGSEGV
    rp = cli("replay", str(path))
    # the replayed call does not crash: cuDNN answers it, or the checked layer refuses it (a tensor descriptor with
    # nothing set cannot be finalized: required attributes are checked first)
    assert "crashed" not in rp.stdout, rp.stdout
    assert ("the traced process died in this call; here it returned CUDNN_STATUS_" in rp.stdout
            or "refused 1" in rp.stdout), rp.stdout


def test_replay_of_a_good_trace_in_a_child(tmp_path):
    import cudnn_py as cudnn

    path = tmp_path / "good.jsonl"
    with tracing(str(path)):
        F = cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=F, compute_data_type=F)
        A = g.tensor(dim=[4, 64, 32], stride=[2048, 32, 1], name="A")
        B = g.tensor(dim=[4, 32, 16], stride=[512, 16, 1], name="B")
        g.relu(g.matmul(A, B)).set_output(True)
        g.validate()
        og = g.session.lowered.operation_graph
        assert og.get("CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT") > 0
        with pytest.raises(cudnn.backend.NotSupportedError):  # a descriptor Get (its count), failing: replayed too
            og.get("CUDNN_ATTR_OPERATIONGRAPH_OPS", kind="CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR")
        t = tensor(1)
        assert t.get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [1, 4, 8]
        t.destroy()
    out = io.StringIO()
    assert replay.replay(str(path), out=out) == 0, out.getvalue()
    assert "0 status mismatch" in out.getvalue() and "refused 0" in out.getvalue()
    rp = cli("replay", str(path))
    assert rp.returncode == 0 and "0 status mismatch" in rp.stdout, rp


def _good_lines(tmp_path) -> list[str]:
    path = tmp_path / "base.jsonl"
    with tracing(str(path)):
        tensor(1)
        tensor(2)
    return open(path).read().splitlines()


def test_malformed_line_is_an_error_with_file_and_line(tmp_path):
    lines = _good_lines(tmp_path)
    lines.insert(3, '{"seq": 2, "phase": "begin", "fn": ')
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    gc.collect()  # (no garbage of earlier tests destroyed, and traced, inside the block)
    with tracing(io.StringIO()) as t:  # replaying in-process: any backend call would show in this trace
        rc = replay.replay(str(path), out=out, isolate=False)
    assert rc == 2 and f"{path}:4: not valid JSON" in out.getvalue() and "nothing replayed" in out.getvalue()
    assert t._started is False  # not one backend call was made
    assert cli("replay", str(path)).returncode == 2


def test_truncated_last_line_replays_everything_before_it(tmp_path):
    lines = _good_lines(tmp_path)
    body = [x for x in lines if '"phase":"stop"' not in x]
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(body[:-1]) + "\n" + body[-1][: len(body[-1]) // 2])  # died mid-write
    out = io.StringIO()
    rc = replay.replay(str(path), out=out)
    text = out.getvalue()
    assert rc == 0, text
    assert f"{path}:{len(body)}: the last line is truncated" in text
    complete = len(trace.read(body[:-1]))
    assert f"replayed {complete} call(s)" in text


def _crafted(tmp_path, name: str, records: list[dict]) -> str:
    path = tmp_path / f"{name}.jsonl"
    lines = [{"phase": "start", "seq": 0, "pid": 1}]
    for i, r in enumerate(records, 1):
        status = r.pop("status", 0)
        lines.append({"seq": i, "phase": "begin", **r})
        lines.append({"seq": i, "phase": "end", "fn": r["fn"], "status": status, **({"ptr": "0x1"} if
                      r["fn"] == "cudnnCreate" else {})})
    lines.append({"phase": "stop", "seq": len(records), "open": []})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def C(desc, kind):
    return {"fn": "cudnnBackendCreateDescriptor", "desc": desc, "kind": f"CUDNN_BACKEND_{kind}_DESCRIPTOR"}


def S(desc, kind, attr, type_, values, count=None, **kw):
    return {"fn": "cudnnBackendSetAttribute", "desc": desc, "kind": f"CUDNN_BACKEND_{kind}_DESCRIPTOR",
            "attr": f"CUDNN_ATTR_{attr}", "type": f"CUDNN_TYPE_{type_}",
            "count": len(values) if count is None else count, "values": values, **kw}


def F(desc, kind, **kw):
    return {"fn": "cudnnBackendFinalize", "desc": desc, "kind": f"CUDNN_BACKEND_{kind}_DESCRIPTOR", **kw}


TENSOR = [C(1, "TENSOR"), S(1, "TENSOR", "TENSOR_DATA_TYPE", "DATA_TYPE", ["CUDNN_DATA_FLOAT"]),
          S(1, "TENSOR", "TENSOR_DIMENSIONS", "INT64", [1, 4, 8]), S(1, "TENSOR", "TENSOR_STRIDES", "INT64", [32, 8, 1]),
          S(1, "TENSOR", "TENSOR_UNIQUE_ID", "INT64", [1]), S(1, "TENSOR", "TENSOR_BYTE_ALIGNMENT", "INT64", [16]),
          F(1, "TENSOR")]
PW = [C(2, "POINTWISE"), S(2, "POINTWISE", "POINTWISE_MODE", "POINTWISE_MODE", ["CUDNN_POINTWISE_RELU_FWD"]),
      S(2, "POINTWISE", "POINTWISE_MATH_PREC", "DATA_TYPE", ["CUDNN_DATA_FLOAT"]), F(2, "POINTWISE")]

MALFORMED = {
    "count-larger-than-values": (TENSOR[:2] + [S(1, "TENSOR", "TENSOR_DIMENSIONS", "INT64", [1, 4, 8], count=5)],
                                 "count 5 but 3 value(s) given"),
    "attribute-of-another-kind": (TENSOR[:1] + [S(1, "TENSOR", "POINTWISE_MODE", "POINTWISE_MODE",
                                                  ["CUDNN_POINTWISE_ADD"])], "belongs to CUDNN_BACKEND_POINTWISE"),
    "type-not-accepted": (TENSOR[:1] + [S(1, "TENSOR", "TENSOR_DIMENSIONS", "CHAR", "abc")], "does not take"),
    "huge-count": (TENSOR[:1] + [S(1, "TENSOR", "TENSOR_DIMENSIONS", "INT64", [1], count=10**12)], "out of range"),
    "int-out-of-range": (TENSOR[:1] + [S(1, "TENSOR", "TENSOR_UNIQUE_ID", "INT64", [2**70])], "out of range"),
    "bad-enum": (TENSOR[:1] + [S(1, "TENSOR", "TENSOR_DATA_TYPE", "DATA_TYPE", ["CUDNN_DATA_NOPE"])],
                 "not a member of cudnnDataType_t"),
    "string-for-a-number": ([C(3, "POINTWISE"), S(3, "POINTWISE", "POINTWISE_RELU_LOWER_CLIP", "DOUBLE", ["x"])],
                            "must be a number"),
    "zero-denominator": ([C(3, "RESAMPLE"), S(3, "RESAMPLE", "RESAMPLE_STRIDES", "FRACTION", [[1, 0]])],
                         "has denominator 0"),
    "kind-changed": (TENSOR[:1] + [F(1, "POINTWISE")], "was created as CUDNN_BACKEND_TENSOR_DESCRIPTOR"),
    "unknown-kind": ([C(1, "NOT_A_KIND")], "unknown descriptor kind"),
    "not-an-object": ([], "a record must be a JSON object"),
    "nested-too-deep": ([], "not valid JSON"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_records_are_refused_before_any_backend_call(tmp_path, name):
    records, message = MALFORMED[name]
    path = _crafted(tmp_path, name, [dict(r) for r in records])
    if name == "not-an-object":
        with open(path, "a") as f:
            f.write("[1, 2]\n")
    if name == "nested-too-deep":
        with open(path, "a") as f:
            f.write("[" * 100000 + "]" * 100000 + "\n")
    out = io.StringIO()
    gc.collect()
    with tracing(io.StringIO()) as t:
        rc = replay.replay(path, out=out, isolate=False)
    assert rc == 2, out.getvalue()
    assert message in out.getvalue() and f"{path}:" in out.getvalue()
    assert t._started is False


CRAFTED = {
    # raw, each of these handed cuDNN something it dereferences or trusts
    "wrong-element-kind": TENSOR + PW + [C(4, "OPERATION_POINTWISE"),
                                         S(4, "OPERATION_POINTWISE", "OPERATION_POINTWISE_XDESC", "BACKEND_DESCRIPTOR",
                                           [{"desc": 2}]),
                                         S(4, "OPERATION_POINTWISE", "OPERATION_POINTWISE_PW_DESCRIPTOR",
                                           "BACKEND_DESCRIPTOR", [{"desc": 1}]),
                                         F(4, "OPERATION_POINTWISE")],
    "unfinalized-element": [C(2, "POINTWISE"), C(4, "OPERATION_POINTWISE"),
                            S(4, "OPERATION_POINTWISE", "OPERATION_POINTWISE_PW_DESCRIPTOR", "BACKEND_DESCRIPTOR",
                              [{"desc": 2}]), F(4, "OPERATION_POINTWISE")],
    "unknown-descriptor": [C(4, "OPERATION_POINTWISE"),
                           S(4, "OPERATION_POINTWISE", "OPERATION_POINTWISE_XDESC", "BACKEND_DESCRIPTOR",
                             [{"desc": 99}]), F(99, "TENSOR")],
    "bogus-handle": TENSOR + [C(5, "OPERATIONGRAPH"), S(5, "OPERATIONGRAPH", "OPERATIONGRAPH_HANDLE", "HANDLE",
                                                        ["0xdeadbeef"]), F(5, "OPERATIONGRAPH")],
    "bogus-constant-pointer": [C(1, "TENSOR"), S(1, "TENSOR", "TENSOR_DATA_TYPE", "DATA_TYPE", ["CUDNN_DATA_FLOAT"]),
                               S(1, "TENSOR", "TENSOR_DIMENSIONS", "INT64", [1, 1, 1]),
                               S(1, "TENSOR", "TENSOR_STRIDES", "INT64", [1, 1, 1]),
                               S(1, "TENSOR", "TENSOR_UNIQUE_ID", "INT64", [1]),
                               S(1, "TENSOR", "TENSOR_BYTE_ALIGNMENT", "INT64", [16]),
                               S(1, "TENSOR", "TENSOR_IS_BY_VALUE", "BOOLEAN", [True]),
                               S(1, "TENSOR", "TENSOR_CONSTANT_VALUE", "VOID_PTR", ["0x10"]), F(1, "TENSOR")],
    "handles-streams-execute": TENSOR + [{"fn": "cudnnBackendExecute", "handle": "0x1", "plan": 1},
                                       {"fn": "cudnnSetStream", "handle": "0x1", "stream": "0x2"},
                                       {"fn": "cudnnCreate"}, {"fn": "cudnnDestroy", "handle": "0x1"}],
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_trace_cannot_crash_replay(tmp_path, name):
    path = _crafted(tmp_path, name, [dict(r) for r in CRAFTED[name]])
    r = run(f"""
        import sys
        from cudnn_py.tools import trace_replay as replay
        sys.exit(replay.replay({path!r}, isolate=False))   # in-process: a crash would kill this child
    """)
    assert r.returncode in (0, 1), (r.returncode, r.stdout, r.stderr)
    out = r.stdout
    if name == "wrong-element-kind":
        assert "refused by the checked layer" in out and "must be one of" in out
    if name == "unfinalized-element":
        assert "is not finalized" in out
    if name == "unknown-descriptor":
        assert "on a descriptor this replay did not create" in out and "names a descriptor" in out
    if name == "bogus-handle":
        assert "a handle that could not be created here" in out
    if name == "handles-streams-execute":
        assert "cudnnBackendExecute" in out and "cudnnSetStream" in out
    rp = cli("replay", path)
    assert rp.returncode in (0, 1), rp


def test_old_one_line_format_still_replays(tmp_path):
    path = tmp_path / "old.jsonl"
    recs = [dict(r, seq=i, status=0) for i, r in enumerate(TENSOR, 1)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = io.StringIO()
    assert replay.replay(str(path), out=out, isolate=False) == 0, out.getvalue()
    assert f"replayed {len(TENSOR)} call(s)" in out.getvalue()


# =================================================================================================== loader
SUBLIBS = [n for n in os.listdir(WHEEL_LIB) if n.startswith("libcudnn_")]


def _truncated(tmp_path) -> str:
    d = tmp_path / "truncated"
    d.mkdir()
    data = open(os.path.join(WHEEL_LIB, "libcudnn.so.9"), "rb").read()
    (d / "libcudnn.so.9").write_bytes(data[: len(data) // 2])
    for n in SUBLIBS:  # the sub-libraries are fine: only the main file is cut
        os.symlink(os.path.join(WHEEL_LIB, n), d / n)
    return str(d / "libcudnn.so.9")


def _lone(tmp_path) -> str:
    d = tmp_path / "lone"
    d.mkdir()
    shutil.copy(os.path.join(WHEEL_LIB, "libcudnn.so.9"), d / "libcudnn.so.9")
    return str(d / "libcudnn.so.9")


FIRST_CALL = """
    import cudnn_py
    from cudnn_py.backend import api, loader
    for attempt in range(2):
        try:
            cudnn_py.backend_version()
        except Exception as e:
            print(type(e).__name__); print(e)
    print("bound:", loader.loaded(), api._cdll)
"""


@pytest.mark.parametrize("broken, why", [(_truncated, "libcudnn.so.9 is truncated"),
                                         (_lone, "died of SIGABRT in cudnnGetVersion")])
def test_broken_install_first_call_and_info(tmp_path, broken, why):
    path = broken(tmp_path)
    r = run(FIRST_CALL, CUDNN_PY_LIBRARY=path)
    assert r.returncode == 0, (r.returncode, r.stderr)
    out = r.stdout
    if broken is _lone and "CudnnLibraryNotFoundError" not in out:
        # seen on the H200 machine: its dynamic loader finds another cuDNN's sub-libraries system-wide, so a lone
        # copy is not broken there (and was loaded after a successful trial load)
        assert "vetted='in a child process" in out, out
        pytest.skip("this machine resolves cuDNN's sub-libraries system-wide: a lone copy loads")
    assert out.splitlines()[0] == "CudnnLibraryNotFoundError" and out.count("CudnnLibraryNotFoundError") == 2
    assert "Places searched" in out and f"CUDNN_PY_LIBRARY: {path}: " in out and why in out  # truncated: no trial
    assert "bound: None None" in out
    if broken is _lone:
        assert "libcudnn_graph.so.9" in out and "not beside it" in out
    i = cli("info", CUDNN_PY_LIBRARY=path)
    assert i.returncode == 1, (i.returncode, i.stderr)  # info exits 1 when no libcudnn loads
    assert "libcudnn: NOT LOADED" in i.stdout and why in i.stdout and path in i.stdout


@pytest.mark.parametrize("vetted", ["0", "1"])
def test_not_a_cudnn_library_is_not_found_not_attribute_error(tmp_path, vetted):
    libm = ctypes.util.find_library("m") or "libm.so.6"
    full = next((os.path.join(d, libm) for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                                                 "/usr/lib64", "/lib") if os.path.exists(os.path.join(d, libm))), None)
    if full is None:
        pytest.skip("no libm found")
    r = run(FIRST_CALL, CUDNN_PY_LIBRARY=full, CUDNN_PY_LIBRARY_VETTED=vetted)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "CudnnLibraryNotFoundError", r.stdout
    assert "not a cuDNN library (does not export cudnnGetVersion" in r.stdout and "AttributeError" not in r.stdout
    assert "bound: None None" in r.stdout
    # a library nobody else had mapped is unloaded again after it is rejected
    own = tmp_path / "libnotcudnn.so"
    shutil.copy(DRIVER if DRIVER != "real" else full, own)
    r = run(textwrap.dedent(FIRST_CALL) + f"\nprint('mapped:', any({str(own)!r} in l for l in open('/proc/self/maps')))",
            CUDNN_PY_LIBRARY=str(own), CUDNN_PY_LIBRARY_VETTED=vetted)
    assert "not a cuDNN library" in r.stdout and "mapped: False" in r.stdout, (r.stdout, r.stderr)


def test_vetting_opt_out_and_already_loaded_skip_the_child():
    r = run("""
        import subprocess
        import cuda.pathfinder  # (its import runs ldconfig)
        def boom(*a, **k):
            raise AssertionError("a vetting child was started")
        subprocess.Popen = boom
        from cudnn_py.backend import loader
        print(loader.load_library().vetted)
    """, CUDNN_PY_LIBRARY_VETTED="1")
    assert r.returncode == 0 and r.stdout.strip() == "skipped (CUDNN_PY_LIBRARY_VETTED=1)", r
    r = run(f"""
        import ctypes, subprocess
        import cuda.pathfinder
        ctypes.CDLL({os.path.join(WHEEL_LIB, "libcudnn.so.9")!r})   # as torch would
        subprocess.Popen = None
        from cudnn_py.backend import loader
        info = loader.load_library()
        print(info.found_via, "|", info.vetted)
    """)
    assert r.returncode == 0 and r.stdout.strip() == "already loaded in this process | skipped (already loaded)", r
    r = run("""
        from cudnn_py.backend import loader
        info = loader.load_library()
        print(info.vetted)
    """)
    assert r.returncode == 0 and r.stdout.startswith("in a child process before loading"), r


def test_verdicts_are_cached_per_path_mtime_and_size(tmp_path):
    d = tmp_path / "copy"
    d.mkdir()
    for n in ["libcudnn.so.9", *SUBLIBS]:
        os.symlink(os.path.join(WHEEL_LIB, n), d / n)
    path = str(d / "libcudnn.so.9")
    v1 = loader.vet(path)
    assert v1.ok and v1.version == loader.load_library().version, v1
    assert loader.vet(path) is v1
    link = d / "libcudnn.so.9"
    os.unlink(link)
    shutil.copy(os.path.join(WHEEL_LIB, "libcudnn.so.9"), link)  # a new file at the same path: vetted again
    v2 = loader.vet(path)
    assert v2 is not v1 and v2.ok
