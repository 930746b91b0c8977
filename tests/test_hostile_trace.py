"""Hostile trace files (issue #27): ``python -m cudnn_py trace summary`` and ``replay`` open regular files only (a FIFO,
/dev/zero or a directory is refused without blocking), read at most trace.MAX_TRACE_BYTES (a 40 GiB sparse file is
refused unread), and a file that is not a trace ends in exit status 2 with file:line, never a traceback. The tracer
never follows a symbolic link."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_py.backend import trace
from tests.support.traces import small_trace

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("CUDNN_PY_TRACE", None)
    return subprocess.run([sys.executable, "-m", "cudnn_py", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)  # a hang fails the test (TimeoutExpired)


def special_files(tmp_path: Path) -> dict[str, str]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(40 << 30)  # sparse
    return {"fifo": str(fifo), "dev-zero": "/dev/zero", "sparse-40GiB": str(big), "directory": str(tmp_path)}


@pytest.mark.parametrize("command", [["trace", "summary"], ["replay"], ["trace", "replay"]])
def test_special_files_are_refused_without_blocking(tmp_path, command):
    for name, path in special_files(tmp_path).items():
        r = cli(*command, path)
        assert r.returncode == 2, (name, r.returncode, r.stdout, r.stderr)
        text = r.stdout + r.stderr
        assert "Traceback" not in text and ("not a regular file" in text or "over the limit of" in text), (name, text)


MALFORMED = {
    "list": ("[1, 2]\n", "a JSON list"),
    "unhashable-kind": ('{"fn": "cudnnBackendFinalize", "kind": [1]}\n', "kind must be a string"),
    "us-not-a-number": ('{"fn": "cudnnBackendFinalize", "us": "abc"}\n', "us must be a non-negative number"),
    "us-overflow": ('{"fn": "cudnnBackendFinalize", "us": 1e400}\n', "us must be"),
    "status-float": ('{"fn": "cudnnBackendFinalize", "status": 1.5}\n', "status must be an integer"),
    "text": ("hello\nworld\n", "not a JSON trace record"),
    "bad-phase": ('{"phase": "middle", "fn": "x"}\n', "phase 'middle'"),
    "no-fn": ('{"phase": "begin", "seq": 1}\n', "without a function name"),
    "empty": ("", "no trace record"),
    "binary": ("\udcff\udcfe\n", "not a JSON trace record"),
    "second-line": ('{"phase": "start", "seq": 0, "pid": 1}\n{"fn": 5}\n', ":2: a call record without"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_traces_end_in_exit_2_with_file_and_line(tmp_path, case):
    text, message = MALFORMED[case]
    path = tmp_path / f"{case}.jsonl"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    r = cli("trace", "summary", str(path))
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and f"{path}:" in r.stderr and message in r.stderr, r.stderr


def test_a_real_trace_still_summarizes(tmp_path):
    path = small_trace(tmp_path)
    r = cli("trace", "summary", str(path))
    assert r.returncode == 0, r.stderr
    assert len(trace.read_checked(path)) == 1


def test_the_tracer_refuses_a_symbolic_link(tmp_path):
    target = tmp_path / "target"
    target.write_text("precious\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(OSError, match="a symbolic link"):
        trace.open_trace_file(link)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(OSError, match="a symbolic link"):
        trace.open_trace_file(dangling)
    assert target.read_text() == "precious\n" and not (tmp_path / "nowhere").exists()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO"):
        trace.open_trace_file(fifo)
    stream = trace.open_trace_file(tmp_path / "new.jsonl")  # a new file, and appending to a regular one, still work
    stream.write("x\n")
    stream.close()
    assert (tmp_path / "new.jsonl").read_text() == "x\n"


def test_read_file_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(trace, "MAX_TRACE_BYTES", 10)
    p = tmp_path / "t"
    p.write_text("x" * 11)
    with pytest.raises(OSError, match="11 bytes, over the limit of 10 bytes for a trace file"):
        trace.read_file(p)
