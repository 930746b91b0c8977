"""Every file cudnn_py reads goes through one bounded reader, ``cudnn_py/bounded_read.py`` (issue #37, class 4):
regular files only (a FIFO, a device, a directory refused without blocking on them or reading them), a size cap
checked before reading (a sparse 8 GiB file is refused unread), links followed only where the caller says so.
Every file input of the command line (``explain``, ``trace summary``, ``trace replay``, ``replay``) is tried in a
subprocess with a timeout (a hang is a failure): one line on stderr, exit status 2, never a traceback. And every
OSError a command meets, also writing its output, is one line and an exit status."""
from __future__ import annotations

import ast
import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cudnn_py import bounded_read, cache_home
from cudnn_py.backend import mapped, trace
from cudnn_py.bounded_read import read_regular
from cudnn_py.errors import CudnnPyError, FileRefusedError
from tests.support.traces import small_trace

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, timeout: float = 60, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("CUDNN_PY_TRACE", None)
    return subprocess.run([sys.executable, "-m", "cudnn_py", *args], cwd=ROOT, env=env, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)  # a hang fails (TimeoutExpired)


# ------------------------------------------------------------------------------------------------- the reader
def test_a_regular_file_is_read_whole(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(b"x" * 100)
    data, st = read_regular(p, 100)
    assert data == b"x" * 100 and st.st_size == 100


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "sparse"])
def test_what_is_not_a_small_regular_file_is_refused_unread(tmp_path, kind):
    if kind == "fifo":
        path, code, reason = tmp_path / "fifo", errno.EINVAL, "a FIFO (named pipe), not a regular file"
        os.mkfifo(path)  # no writer: a blocking open would wait forever
    elif kind == "dev-zero":
        path, code, reason = Path("/dev/zero"), errno.EINVAL, "a character device, not a regular file"
    elif kind == "directory":
        path, code, reason = tmp_path, errno.EINVAL, "a directory, not a regular file"
    else:
        path = tmp_path / "sparse"
        with open(path, "wb") as f:
            f.truncate(8 << 30)  # sparse: no block written
        code, reason = errno.EFBIG, f"{8 << 30} bytes, over the limit of 4096 bytes for a test file"
    for follow in (False, True):
        with pytest.raises(FileRefusedError) as e:
            read_regular(path, 4096, "a test file", follow_links=follow)
        assert isinstance(e.value, OSError) and isinstance(e.value, CudnnPyError) and e.value.errno == code and str(e.value) == reason
        assert e.value.filename == str(path)


def test_links_are_followed_only_when_asked(tmp_path):
    target = tmp_path / "target"
    target.write_text("data")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(FileRefusedError, match="a symbolic link, not followed for an entry") as e:
        read_regular(link, 100, "an entry")
    assert e.value.errno == errno.ELOOP
    assert read_regular(link, 100, follow_links=True)[0] == b"data"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    to_fifo = tmp_path / "to-fifo"
    to_fifo.symlink_to(fifo)
    with pytest.raises(FileRefusedError, match="a FIFO"):
        read_regular(to_fifo, 100, follow_links=True)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        read_regular(dangling, 100, follow_links=True)
    with pytest.raises(FileRefusedError, match="a symbolic link"):
        read_regular(dangling, 100)


def test_at_most_the_cap_plus_one_byte_is_read(tmp_path):
    """A file whose size says 0 (a /proc file) or that grows while read: reading stops past the cap."""
    p = tmp_path / "f"
    p.write_bytes(b"y" * 10)
    with pytest.raises(FileRefusedError, match="10 bytes, over the limit of 9 bytes"):
        read_regular(p, 9)
    assert read_regular("/proc/self/status", 1 << 20, follow_links=True)[0].startswith(b"Name:")
    with pytest.raises(FileRefusedError, match="over the limit of 8 bytes for a file \\(read past it\\)") as e:
        read_regular("/proc/self/status", 8, follow_links=True)  # st_size 0: refused by what was read
    assert e.value.errno == errno.EFBIG


def test_the_other_readers_are_this_one(tmp_path):
    assert cache_home.Refused is FileRefusedError
    link = tmp_path / "link"
    link.symlink_to(small_trace(tmp_path))
    with pytest.raises(FileRefusedError, match="symbolic link"):
        cache_home.read_regular(str(link), 1 << 20)  # the cache's files: no link followed
    assert trace.read_file(link).startswith(b'{"phase"')  # a trace the user names: the link is followed
    assert mapped.mapped_libraries("libpython") or mapped.mapped_libraries("python")


# Where the package opens files: os.open only in these modules, each for writing or through the reader's checks;
# builtin open(), io.open, Path.read_bytes / read_text / open nowhere (the bounded reader reads).
_OS_OPEN_ALLOWED = {
    "cudnn_py/bounded_read.py",  # the reader itself
    "cudnn_py/backend/trace.py",  # the tracer's append-only, O_NOFOLLOW | O_NONBLOCK output file
    # CUDNN_FRONTEND_LOG_FILE: opened once, O_TRUNC | O_NOFOLLOW | O_NONBLOCK, lstat- and fstat-checked (regular only)
    "cudnn_py/frontend_log.py",
    "cudnn_py/tools/trace_replay.py",  # the replay's progress file, written (O_NOFOLLOW | O_NONBLOCK, checked)
    "cudnn_py/__main__.py",  # /dev/null over a closed stdout
    "cudnn_py/capabilities.py",  # /dev/null over fd 2 while a trial validation runs
    "cudnn_py/backend/driver_standin.py",  # the stand-in written O_EXCL | O_NOFOLLOW into a fresh 0700 directory
    # the cache store: its directories held open (O_DIRECTORY), temp files created O_EXCL | O_NOFOLLOW, and the
    # marker opened O_NOFOLLOW | O_NONBLOCK and fstat-checked before a bounded read; entries and verdicts are read
    # through the reader (dir_fd=, refuse=)
    "cudnn_py/cache_trust.py",
}


def _file_opens(path: Path, rel: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id == "open":
            found.append(f"open() at line {node.lineno}")
        elif isinstance(f, ast.Attribute) and f.attr in ("read_bytes", "read_text", "fromfile", "loadtxt"):
            found.append(f".{f.attr}() at line {node.lineno}")
        elif isinstance(f, ast.Attribute) and f.attr == "open" and isinstance(f.value, ast.Name):
            if f.value.id == "io" or (f.value.id == "os" and rel not in _OS_OPEN_ALLOWED):
                found.append(f"{f.value.id}.open() at line {node.lineno}")
    return found


def test_the_package_reads_files_only_through_the_bounded_reader():
    offenders = {p.relative_to(ROOT).as_posix(): found for p in sorted((ROOT / "cudnn_py").rglob("*.py"))
                 if "_generated" not in p.parts and (found := _file_opens(p, p.relative_to(ROOT).as_posix()))}
    assert offenders == {}, offenders


def test_the_guard_sees_a_plain_open(tmp_path):
    src = tmp_path / "x.py"
    src.write_text("import io, os\nopen('f')\nio.open('f')\nos.open('f', 0)\nPath('f').read_text()\n")
    assert len(_file_opens(src, "cudnn_py/x.py")) == 4
    assert len(_file_opens(src, "cudnn_py/bounded_read.py")) == 3  # os.open allowed there


# ------------------------------------------------------------------------------------------------- the CLI
COMMANDS = {"explain": ("explain",), "trace summary": ("trace", "summary"), "trace replay": ("trace", "replay"),
            "replay": ("replay",), "replay --in-process": ("replay", "--in-process")}


def hostile_inputs(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (path, what the one line on stderr must say)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sparse = tmp_path / "sparse.py"
    with open(sparse, "wb") as f:
        f.truncate(8 << 30)  # 8 GiB, no block written
    to_fifo = tmp_path / "to-fifo"
    to_fifo.symlink_to(fifo)
    to_zero = tmp_path / "to-zero"
    to_zero.symlink_to("/dev/zero")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    return {"fifo": (str(fifo), "a FIFO (named pipe), not a regular file"),
            "dev-zero": ("/dev/zero", "a character device, not a regular file"),
            "sparse-8GiB": (str(sparse), f"{8 << 30} bytes, over the limit of"),
            "link-to-fifo": (str(to_fifo), "a FIFO (named pipe), not a regular file"),
            "link-to-dev-zero": (str(to_zero), "a character device, not a regular file"),
            "dangling-link": (str(dangling), "No such file or directory"),
            "missing": (str(tmp_path / "missing"), "No such file or directory")}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_file_input_of_the_cli_refuses_hostile_files_in_one_line(tmp_path, command):
    for name, (path, reason) in hostile_inputs(tmp_path).items():
        r = cli(*COMMANDS[command], path)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 2, (name, r.returncode, r.stdout, r.stderr)
        if command == "explain" and name in ("missing", "dangling-link"):
            reason = "no such file"
        assert "Traceback" not in r.stdout + r.stderr and len(lines) == 1, (name, r.stdout, r.stderr)
        assert path in lines[0] and reason in lines[0], (name, lines)


@pytest.mark.parametrize("command", ["explain", "trace summary", "replay"])
def test_a_directory_is_refused(tmp_path, command):
    r = cli(*COMMANDS[command], str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert ("a directory without a __main__.py" if command == "explain" else "a directory, not a regular file") \
        in r.stderr


def test_explain_of_a_directory_whose_main_is_a_fifo_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "__main__.py")
    r = cli("explain", str(tmp_path))
    assert r.returncode == 2 and r.stderr.strip() == \
        f"cannot run {tmp_path}: {tmp_path / '__main__.py'}: a FIFO (named pipe), not a regular file", r.stderr


_GRAPH_SCRIPT = textwrap.dedent("""
    import sys
    import cudnn_py as cudnn
    F = cudnn.data_type.FLOAT
    g = cudnn.pygraph(io_data_type=F, name="linked")
    g.relu(g.tensor([1, 8, 16], name="a")).set_output(True)
    assert __name__ == "__main__" and sys.argv[0] == __file__, (__name__, sys.argv, __file__)
""")


def test_a_link_the_user_gives_to_a_regular_file_is_followed(tmp_path):
    script = tmp_path / "make.py"
    script.write_text(_GRAPH_SCRIPT)
    link = tmp_path / "link.py"
    link.symlink_to(script)
    r = cli("explain", str(link), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert '"graph": "linked"' in r.stdout
    trace_link = tmp_path / "trace-link"
    trace_link.symlink_to(small_trace(tmp_path))
    r = cli("trace", "summary", str(trace_link))
    assert r.returncode == 0 and "cudnnBackendCreateDescriptor" in r.stdout, r.stderr


def test_explain_runs_a_directory_with_a_main(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 3\n")
    (tmp_path / "__main__.py").write_text(_GRAPH_SCRIPT + "import helper\nassert helper.VALUE == 3\n")
    r = cli("explain", str(tmp_path), "--format", "json")
    assert r.returncode == 0 and '"graph": "linked"' in r.stdout, r.stderr


def test_a_script_that_exits_still_has_its_graphs_explained(tmp_path):
    script = tmp_path / "exits.py"
    script.write_text(_GRAPH_SCRIPT + "sys.exit(0)\n")
    r = cli("explain", str(script), "--format", "json")
    assert r.returncode == 0 and '"graph": "linked"' in r.stdout, r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", [("trace", "summary", "TRACE"), ("trace", "summary", "TRACE", "--json"),
                                  ("--help",)])
def test_output_to_a_full_disk_is_one_line_and_exit_2(tmp_path, args):
    args = tuple(str(small_trace(tmp_path)) if a == "TRACE" else a for a in args)
    with open("/dev/full", "w") as full:
        r = cli(*args, stdout=full)
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    if args == ("--help",):  # argparse's own exit (0) after printing: its text is lost, quietly
        assert r.returncode in (0, 2), r.stderr
        return
    assert r.returncode == 2 and r.stderr.strip() == "python -m cudnn_py: No space left on device", r.stderr


def test_an_oserror_the_explained_script_raises_is_one_line(tmp_path):
    script = tmp_path / "reads.py"
    script.write_text(f"open({str(tmp_path / 'absent')!r})\n")
    r = cli("explain", str(script))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == f"python -m cudnn_py: {tmp_path / 'absent'}: No such file or directory"


def test_replay_refuses_a_fifo_as_its_progress_file(tmp_path):
    fifo = tmp_path / "progress"
    os.mkfifo(fifo)
    good = tmp_path / "replayable.jsonl"  # one create, replayable without a GPU
    good.write_text('{"phase": "start", "seq": 0, "pid": 1, "cudnn_py": "0"}\n'
                    '{"seq": 1, "phase": "begin", "pid": 1, "fn": "cudnnBackendCreateDescriptor", '
                    '"kind": "CUDNN_BACKEND_TENSOR_DESCRIPTOR", "desc": 1}\n'
                    '{"seq": 1, "phase": "end", "pid": 1, "fn": "cudnnBackendCreateDescriptor", "status": 0, '
                    '"status_name": "CUDNN_STATUS_SUCCESS", "us": 3.5, "desc": 1}\n')
    r = cli("replay", "--in-process", str(good))
    assert r.returncode == 0 and "replayed 1 call(s)" in r.stdout, (r.stdout, r.stderr)
    r = cli("replay", "--in-process", "--progress", str(fifo), str(good))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{fifo}: a FIFO (named pipe), not a regular file" in r.stderr


def test_describe_names_the_file():
    assert bounded_read.describe(FileNotFoundError(errno.ENOENT, "No such file or directory", "x")) == \
        "x: No such file or directory"
    assert bounded_read.describe(OSError("plain")) == "plain"
