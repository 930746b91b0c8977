"""The official frontend's log variables, CUDNN_FRONTEND_LOG_INFO and CUDNN_FRONTEND_LOG_FILE (cudnn_py/frontend_log.py):
each case a fresh process (the variables are read once per process) that validates a matmul graph without a GPU.
Planning and execute lines: tests/test_gpu_frontend_log.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from cudnn_py import frontend_log

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "[cudnn_frontend] "

SCRIPT = textwrap.dedent("""
    import cudnn_py as cudnn

    half, flt = cudnn.data_type.HALF, cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=half, intermediate_data_type=flt, compute_data_type=flt, name="mm_relu")
    a = g.tensor(name="a", dim=[1, 64, 32], stride=[2048, 32, 1])
    b = g.tensor(name="b", dim=[1, 32, 16], stride=[512, 16, 1])
    y = g.relu(g.matmul(a, b, name="mm"), name="act")
    y.set_output(True).set_data_type(half).set_name("y")
    g.validate()
    print("validated")
""")


def run(log_info: str | None = "1", log_file: str | None = None, timeout: float = 120,
        script: str = SCRIPT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for name, value in (("CUDNN_FRONTEND_LOG_INFO", log_info), ("CUDNN_FRONTEND_LOG_FILE", log_file)):
        env.pop(name, None)
        if value is not None:
            env[name] = value
    env.pop("CUDNN_PY_TRACE", None)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)  # a hang fails (TimeoutExpired)


def check_log(text: str) -> None:
    lines = text.splitlines()
    assert lines and all(line.startswith(PREFIX) for line in lines), lines[:5]
    body = [line[len(PREFIX):] for line in lines]
    i = body.index("||| === VALIDATING GRAPH === |||")
    assert body[i - 1] == body[i + 1] == "=" * 128
    docs = [line.split("(cudnn_py's graph JSON): ", 1)[1] for line in body if "(cudnn_py's graph JSON): " in line]
    assert len(docs) == 1
    doc = json.loads(docs[0])
    assert doc["name"] == "mm_relu"
    assert {t["name"] for t in doc["tensors"]} == {"a", "b", "mm::C", "y"}
    assert [n["name"] for n in doc["nodes"]] == ["mm", "act"]
    for name, uid in (("a", 1), ("b", 2), ("y", 4)):
        assert f"INFO: Backend Tensor named '{name}' with UID {uid} being created" in body
    assert any(line.startswith("INFO: CUDNN_BACKEND_TENSOR_DESCRIPTOR : Datatype: HALF Id: 1 ") for line in body)
    assert any("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR has 2 operations" in line for line in body)
    # the order of the flow: banner, then the tensors, then the operation graph, then the cudnn_py logger's record
    created = body.index("INFO: Backend Tensor named 'a' with UID 1 being created")
    opgraph = next(k for k, line in enumerate(body) if "OPERATIONGRAPH_DESCRIPTOR" in line)
    validated = next(k for k, line in enumerate(body) if "cudnn_py.plans.session: graph 'mm_relu' validated" in line)
    assert i < created < opgraph < validated


def test_a_file_gets_the_log_truncated(tmp_path):
    log = tmp_path / "fe.log"
    log.write_text("stale content\n" * 100)
    r = run(log_file=str(log))
    assert r.returncode == 0, r.stderr
    assert "validated" in r.stdout and PREFIX not in r.stdout and PREFIX not in r.stderr
    text = log.read_text()
    assert "stale content" not in text
    check_log(text)
    assert oct(log.stat().st_mode & 0o777) in ("0o600", "0o644")  # created 0600 (here it existed before)
    fresh = tmp_path / "fresh.log"
    assert run(log_file=str(fresh)).returncode == 0
    assert fresh.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("dest", ["stdout", "stderr"])
def test_stdout_and_stderr(dest):
    r = run(log_file=dest)
    assert r.returncode == 0, r.stderr
    out = r.stdout if dest == "stdout" else r.stderr
    check_log("\n".join(line for line in out.splitlines() if line.startswith(PREFIX)))
    other = r.stderr if dest == "stdout" else r.stdout
    assert PREFIX not in other


@pytest.mark.parametrize("log_info, log_file", [("1", None), ("0", "stderr"), (None, "stderr"), ("x", "stderr"),
                                                ("-1", "stderr"), ("1", "")])
def test_off_unless_both_say_on(log_info, log_file):
    r = run(log_info=log_info, log_file=log_file)
    assert r.returncode == 0, r.stderr
    assert "validated" in r.stdout
    assert PREFIX not in r.stdout + r.stderr


def test_any_positive_level_turns_it_on():
    r = run(log_info="3", log_file="stderr")
    assert r.returncode == 0 and PREFIX in r.stderr


def test_a_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no reader: a blocking open for writing would wait forever
    r = run(log_file=str(fifo), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "validated" in r.stdout
    assert "RuntimeWarning" in r.stderr and "a FIFO (named pipe), not a regular file" in r.stderr
    assert "the frontend log is off" in r.stderr and PREFIX not in r.stdout + r.stderr


@pytest.mark.parametrize("kind", ["missing-dir", "directory", "symlink", "device"])
def test_an_unwritable_destination_is_one_warning_and_no_log(tmp_path, kind):
    if kind == "missing-dir":
        path, why = tmp_path / "nowhere" / "fe.log", "No such file or directory"
    elif kind == "directory":
        path, why = tmp_path, "a directory, not a regular file"
    elif kind == "symlink":
        path, why = tmp_path / "link", "a symbolic link, not a regular file"
        path.symlink_to(tmp_path / "target")
    else:
        path, why = Path("/dev/null"), "a character device, not a regular file"
    r = run(log_file=str(path))
    assert r.returncode == 0, r.stderr
    assert "validated" in r.stdout
    assert r.stderr.count("CUDNN_FRONTEND_LOG_FILE") == 1 and why in r.stderr, r.stderr
    assert PREFIX not in r.stdout + r.stderr
    if kind == "symlink":
        assert not (tmp_path / "target").exists()  # the link's target is never created


def test_the_application_handlers_see_what_they_saw_before(tmp_path):
    """The cudnn_py logger's INFO records go to the log, not to an application's WARNING-level root handler."""
    script = "import logging\nlogging.basicConfig(format='APP %(name)s %(message)s')\n" + SCRIPT
    r = run(log_file=str(tmp_path / "fe.log"), script=script)
    assert r.returncode == 0, r.stderr
    assert "APP cudnn_py" not in r.stderr
    assert "cudnn_py.plans.session: graph 'mm_relu' validated" in (tmp_path / "fe.log").read_text()
    script = ("import logging\nlogging.basicConfig(format='APP %(name)s %(message)s', level=logging.INFO)\n"
              + SCRIPT)
    r = run(log_file=str(tmp_path / "fe2.log"), script=script)
    assert "APP cudnn_py.plans.session graph 'mm_relu' validated" in r.stderr


def test_destination_semantics():
    d = frontend_log.destination
    assert d({"CUDNN_FRONTEND_LOG_INFO": "1", "CUDNN_FRONTEND_LOG_FILE": "stdout"}) == "stdout"
    assert d({"CUDNN_FRONTEND_LOG_INFO": " 2 ", "CUDNN_FRONTEND_LOG_FILE": "/tmp/x"}) == "/tmp/x"
    assert d({"CUDNN_FRONTEND_LOG_INFO": "1"}) is None
    assert d({"CUDNN_FRONTEND_LOG_FILE": "stderr"}) is None
    assert d({"CUDNN_FRONTEND_LOG_INFO": "0", "CUDNN_FRONTEND_LOG_FILE": "stderr"}) is None
    assert d({"CUDNN_FRONTEND_LOG_INFO": "yes", "CUDNN_FRONTEND_LOG_FILE": "stderr"}) is None


def test_a_failed_write_turns_the_log_off_with_one_warning(tmp_path, monkeypatch):
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT, 0o600)  # written to: EBADF
    try:
        monkeypatch.setattr(frontend_log, "ENABLED", True)
        monkeypatch.setattr(frontend_log, "_fd", fd)
        monkeypatch.setattr(frontend_log, "_where", str(tmp_path / "f"))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            frontend_log.write("one")
            frontend_log.write("two")
        assert frontend_log.ENABLED is False and frontend_log._fd is None
        assert len(caught) == 1 and "the frontend log is off" in str(caught[0].message)
    finally:
        try:
            os.close(fd)
        except OSError:
            pass  # (closed by the log)


def test_off_in_this_process_and_the_hot_path_untouched():
    """The suite runs without the variables: the log is off, and the bound execute is the generated one."""
    assert frontend_log.destination() is None and frontend_log.ENABLED is False


def test_while_the_log_is_on_the_bound_execute_takes_the_checked_execute(monkeypatch):
    """The bound execute made while the log is on (execute_fast's template with its `<<logged>>` line) sends every
    call to the checked Executor.execute, which logs it, and the classic keywords to the classic execute, as the
    generated one does; the log off, the same executor's bound execute is the template without that line."""
    import cudnn_py as cudnn
    from cudnn_py.plans import execute_fast

    assert "return slow(variant_pack, workspace, handle)" in execute_fast.bound_execute_source(False, logged=True)
    assert "<<" not in execute_fast.bound_execute_source(True, logged=True)
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT)
    x = g.tensor(dim=[1, 1, 8], stride=[8, 8, 1], name="X")
    g.add(x, g.tensor(dim=[1, 1, 8], stride=[8, 8, 1], name="Y")).set_output(True)
    g.validate()
    executor = g.session.executor

    class Plan:
        id, ptr, name, workspace = 7, 0x7000, "fake", 0

    plan, checked, classic = Plan(), [], []
    monkeypatch.setattr(executor, "execute", lambda *args: checked.append(args))
    monkeypatch.setattr(frontend_log, "ENABLED", True)
    run = executor.fast(plan, lambda *args: classic.append(args))
    pack = {x: 16}  # (never resolved here: the checked execute, stubbed, would check it)
    run(pack, 0x100, 5)
    run(pack)
    run(pack, None, None, tensor_uids=[1])
    assert checked == [(plan, pack, 0x100, 5), (plan, pack, None, None)]
    assert classic == [(pack, None, None, None, None, None, [1])]
    with pytest.raises(TypeError, match="takes no override_uids"):
        executor.fast(plan)(pack, override_uids=[1])
