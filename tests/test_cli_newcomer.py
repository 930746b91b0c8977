"""A newcomer's first hour (#28): `python -m cudnn_py --version`, `info --json`, exit statuses for what cannot be
read, no traceback when the output is piped into `head`, help on every argument; and the package's hygiene (one
version, no references outside the repository, no install hints for a package that is not published)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import cudnn_py
from cudnn_py import __main__ as cli_module
from cudnn_py import _version
from tests.support.traces import small_trace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cudnn_py", *args], capture_output=True, text=True, env=_env(**env),
                          timeout=300, cwd=ROOT)


def _graph_script(tmp_path) -> str:
    path = tmp_path / "make_graph.py"
    path.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        from tests.support.libcuda_stub import ensure_driver
        ensure_driver()
        import cudnn_py as cudnn
        F = cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=F, compute_data_type=F)
        g.sigmoid(g.tensor([8, 16], name="x"), name="s").set_output(True)
    """))
    return str(path)


def _trace(tmp_path) -> str:
    return str(small_trace(tmp_path))


# ------------------------------------------------------------------------------------------------- version
def test_version_flag_prints_the_package_version():
    r = cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"cudnn_py {cudnn_py.__version__}"


def test_one_version_source():
    """cudnn_py/_version.py is the one place: the package attribute (the official module's classic
    ``cudnn.__version__``, which the 1.32 surface test requires), pyproject's dynamic version, and the installed
    metadata when the installed distribution is this checkout."""
    assert cudnn_py.__version__ == _version.__version__ and re.fullmatch(r"\d+\.\d+\.\d+\S*", cudnn_py.__version__)
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "cudnn_py._version.__version__"}
    from importlib import metadata

    try:
        dist = metadata.distribution("cudnn-py")
    except metadata.PackageNotFoundError:
        return
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct.get("url", "").rstrip("/") == "file://" + ROOT:  # pip show reads this metadata
        assert dist.version == cudnn_py.__version__


# ------------------------------------------------------------------------------------------------- info
def test_info_json_is_one_object_with_the_facts_of_info():
    text, as_json = cli("info", "--errata"), cli("info", "--json")
    assert text.returncode == 0 and as_json.returncode == 0, (text.stderr, as_json.stderr)
    facts = json.loads(as_json.stdout)
    assert facts["cudnn_py"]["version"] == cudnn_py.__version__
    assert f"cudnn_py {cudnn_py.__version__} ({facts['cudnn_py']['path']})" in text.stdout
    assert facts["python"]["version"] in text.stdout and facts["python"]["executable"] == sys.executable
    lib = facts["libcudnn"]
    assert lib["found"] and f"libcudnn: {lib['path']}" in text.stdout and lib["version"].startswith("9.")
    assert f"version: {lib['version']} ({lib['version_number']})" in text.stdout
    assert set(facts["libraries"]) == {"cublasLt", "nvrtc"}
    assert set(facts["frameworks"]) == {"torch", "cupy", "cuda.core", "numpy"}
    assert facts["frameworks"]["numpy"]["installed"] and not facts["frameworks"]["torch"]["imported"]
    assert set(facts["driver"]) == {"cuda_driver_api", "nvidia_driver"} and isinstance(facts["gpus"], list)
    if not facts["gpus"]:
        assert f"GPU: {facts['gpus_missing']}" in text.stdout
    assert facts["errata"] and all({"id", "versions", "gpus", "applies_to_gpus_here", "seen_on", "effect",
                                    "workaround", "source"} <= set(e) for e in facts["errata"])
    assert f"errata for cuDNN {lib['version']}: {len(facts['errata'])} " in text.stdout
    assert all(f"  {e['id']} (cuDNN {e['versions']}" in text.stdout for e in facts["errata"])
    assert isinstance(facts["wheels"], dict) and isinstance(facts["warnings"], list)
    assert set(facts["capabilities"]) == {"gpu_execution", "deviceless_validation", "reference_engine"}
    for c in facts["capabilities"].values():
        assert set(c) == {"works", "reason"} and c["works"] in (True, False, None) and c["reason"]
        assert f"{({True: 'yes', False: 'no', None: 'unknown'})[c['works']]} ({c['reason']})" in text.stdout


def test_info_hides_the_errata_paragraphs_behind_a_flag():
    plain = cli("info")
    assert plain.returncode == 0, plain.stderr
    assert "info --errata` lists them" in plain.stdout
    assert "  gen-index-in-batched-matmul-epilogue (" not in plain.stdout


@pytest.mark.parametrize("as_json", [False, True])
def test_info_exits_1_when_no_libcudnn_loads(tmp_path, as_json):
    missing = str(tmp_path / "libcudnn.so.9")
    r = cli("info", *(["--json"] if as_json else []), CUDNN_PY_LIBRARY=missing)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    if as_json:
        lib = json.loads(r.stdout)["libcudnn"]
        assert lib["found"] is False and missing in lib["error"] and "errata" not in json.loads(r.stdout)
    else:
        assert "libcudnn: NOT LOADED" in r.stdout and missing in r.stdout
        assert "frameworks (versions from package metadata" in r.stdout  # the rest is still reported


# ------------------------------------------------------------------------------------------------- unreadable input
NOT_TRACES = {
    "empty": (b"", "no trace record"),
    "blank-lines": (b"\n\n  \n", "no trace record"),
    "text": (b"hello world\n", "not a JSON trace record"),
    "json-object": (b'{"a": 1}\n', 'without a function name'),
    "python": (b"import cudnn_py\nprint(1)\n", "not a JSON trace record"),
    "binary": (b"\x7fELF\x02\x01\x01\x00\x00\x00", "not a JSON trace record"),
}


@pytest.mark.parametrize("case", sorted(NOT_TRACES))
def test_trace_summary_of_a_file_that_is_not_a_trace_exits_2_with_the_reason(tmp_path, case):
    data, reason = NOT_TRACES[case]
    path = tmp_path / f"{case}.jsonl"
    path.write_bytes(data)
    r = cli("trace", "summary", str(path))
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr)
    assert f"not a trace: {path}:" in r.stderr and reason in r.stderr, r.stderr


@pytest.mark.parametrize("command", [("trace", "summary"), ("trace", "replay"), ("replay",)])
def test_trace_commands_on_an_empty_or_missing_file_exit_2(tmp_path, command):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    for path in (str(empty), str(tmp_path / "missing.jsonl")):
        r = cli(*command, path)
        assert r.returncode == 2, (command, path, r.stdout, r.stderr)
        assert "Traceback" not in r.stdout + r.stderr and path in r.stdout + r.stderr


def test_explain_of_a_script_it_cannot_run_prints_one_line_and_exits_2(tmp_path):
    not_python = tmp_path / "notes.txt"
    not_python.write_text("Notes: hello world\n")
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x00\x01\x02")
    cases = {"missing.py": "cannot run missing.py: no such file",
             str(not_python): f"cannot run {not_python}: not a Python script (line 1)",
             str(binary): f"cannot run {binary}: not a Python script",
             str(tmp_path): f"cannot run {tmp_path}: a directory without a __main__.py"}
    for script, message in cases.items():
        r = cli("explain", script)
        assert r.returncode == 2, (script, r.stderr)
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(message), r.stderr


# ------------------------------------------------------------------------------------------------- pipes
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("args", [("info",), ("info", "--json"), ("--help",), ("--version",), ("explain", "--help"),
                                  ("explain", "SCRIPT"), ("trace", "summary", "TRACE"),
                                  ("trace", "summary", "TRACE", "--json")])
def test_output_into_a_closed_pipe_ends_quietly_with_status_1(tmp_path, args, unbuffered):
    """`python -m cudnn_py ... | head -1`, the reader gone before anything is written: no BrokenPipeError traceback
    (also not from the interpreter's last flush), exit status 1 for every command, argparse's own --help and
    --version included (their output was lost as much as any other), whether stdout is buffered or not: the child's
    PYTHONUNBUFFERED is set here, never inherited (#40: the README's test command was red in a plain shell)."""
    args = tuple(_graph_script(tmp_path) if a == "SCRIPT" else _trace(tmp_path) if a == "TRACE" else a for a in args)
    env = {k: v for k, v in _env().items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([sys.executable, "-m", "cudnn_py", *args], stdout=write_end, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=300, cwd=ROOT)
    finally:
        os.close(write_end)
    assert r.returncode == 1, (args, r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr and "Exception ignored" not in r.stderr


def test_output_into_a_pipe_closed_after_the_first_line(tmp_path):
    """The reader takes one line and goes (as `head -1` does) while the command still writes: more output than a
    pipe holds, so the write after the reader left fails."""
    script = tmp_path / "many_graphs.py"
    script.write_text(open(_graph_script(tmp_path)).read() + textwrap.dedent("""
        for i in range(60):
            globals()[f"g{i}"] = cudnn.pygraph(io_data_type=F, compute_data_type=F)
            globals()[f"g{i}"].sigmoid(globals()[f"g{i}"].tensor([8, 16], name="x")).set_output(True)
    """))
    p = subprocess.Popen([sys.executable, "-m", "cudnn_py", "explain", str(script)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=_env(), cwd=ROOT)
    assert p.stdout is not None and p.stderr is not None
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 1, err
    assert first.startswith(b"====") and "Traceback" not in err and "BrokenPipeError" not in err


# ------------------------------------------------------------------------------------------------- help
def _subparsers(ap: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in ap._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_command_and_argument_has_help():
    ap = cli_module._parser()
    commands = _subparsers(ap)
    assert set(commands) == {"info", "replay", "trace", "explain", "cache"}
    cache_actions = _subparsers(commands["cache"])
    assert set(cache_actions) == {"show", "verify", "clear"}
    commands.update({f"cache {k}": v for k, v in cache_actions.items()})
    (sub_action,) = [a for a in ap._actions if isinstance(a, argparse._SubParsersAction)]
    assert all(choice.help for choice in sub_action._choices_actions)  # each command in the top-level list
    for name, parser in [("", ap), *commands.items()]:
        assert parser.description, name
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            assert action.help, (name, action.dest)


@pytest.mark.parametrize("command", [(), ("info",), ("replay",), ("trace",), ("explain",), ("cache",),
                                     ("cache", "verify")])
def test_help_of_each_command(command):
    r = cli(*command, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m cudnn_py"), r.stderr
    if not command:
        assert "--version" in r.stdout and all(c in r.stdout for c in ("info", "replay", "trace", "explain"))
    if command == ("info",):
        assert "--json" in r.stdout and "Exit status 1" in " ".join(r.stdout.split())


# ------------------------------------------------------------------------------------------------- hygiene
SCANNED = ["cudnn_py", "docs", "README.md", "examples"]
OUTSIDE = re.compile(r"(?<![\w.-])(?:\.\./)*shared/|/work/|/tmp/|(?<![\w.])\.dev/")
UNPUBLISHED = re.compile(r"cudnn-py\[|pip install ['\"]?cudnn[-_]py")


def _scanned_files():
    for entry in SCANNED:
        path = os.path.join(ROOT, entry)
        if os.path.isfile(path):
            yield path
        for base, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for f in files:
                yield os.path.join(base, f)


def test_no_references_outside_the_repository_and_no_unpublished_install_hints():
    """Paths into the development machine (shared/, /work, /tmp, .dev/) mean nothing in a clone, and
    `pip install 'cudnn-py[...]'` installs nothing while no such package is published."""
    found = []
    files = list(_scanned_files())
    assert len(files) > 50
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except UnicodeDecodeError:
            continue
        for i, line in enumerate(lines, 1):
            for rx in (OUTSIDE, UNPUBLISHED):
                m = rx.search(line)
                if m:
                    found.append(f"{os.path.relpath(path, ROOT)}:{i}: {m.group(0)!r} in {line.strip()[:100]}")
    assert not found, "\n".join(found)


def test_the_scan_finds_what_it_looks_for():
    hits = ["see shared/reference/errata.md #2", "../shared/bench", "/work/main/.venv", "/tmp/x.json", "(.dev/probe.py)"]
    assert all(OUTSIDE.search(h) for h in hits)
    assert not any(OUTSIDE.search(h) for h in ["a shared virtual tensor", "shared_memory/", "docs/x.md"])
    assert UNPUBLISHED.search("pip install 'cudnn-py[cu12]'") and UNPUBLISHED.search("pip install cudnn_py")
    assert not UNPUBLISHED.search('pip install ".[cu12]"')


def test_license_and_changelog_are_there():
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "the cudnn_py authors" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    with open(os.path.join(ROOT, "CHANGELOG.md")) as f:
        assert "## [Unreleased]" in f.read()


def test_package_metadata_says_what_runs_where():
    """Classifiers for the Python versions, CPython, Linux and CUDA 12 / 13; the license as an SPDX expression (PEP
    639: setuptools refuses a license classifier beside it); no project URL the project does not have."""
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    classifiers = set(project["classifiers"])
    assert {f"Programming Language :: Python :: 3.{v}" for v in range(10, 14)} <= classifiers
    assert {"Programming Language :: Python :: Implementation :: CPython", "Operating System :: POSIX :: Linux",
            "Environment :: GPU :: NVIDIA CUDA :: 12", "Environment :: GPU :: NVIDIA CUDA :: 13"} <= classifiers
    assert project["license"] == "Apache-2.0" and not any(c.startswith("License ::") for c in classifiers)
    assert project["requires-python"] == ">=3.10" and "urls" not in project


def test_user_facing_messages_point_only_at_what_the_wheel_carries():
    """A wheel has no docs/ folder: the errors, and the docstrings help() shows, name none of its pages."""
    from cudnn_py.backend.loader import NO_DRIVER, no_driver_hint

    assert "docs/" not in NO_DRIVER and "docs/" not in no_driver_hint()
    assert "python -m cudnn_py info" in no_driver_hint()
    assert "docs/" not in (cudnn_py.pygraph.__doc__ or "")
    for name in ("matmul", "sdpa", "add"):
        assert "docs/" not in (getattr(cudnn_py.pygraph, name).__doc__ or "")


def test_the_package_description_has_no_link_that_breaks_on_an_index_page():
    """The wheel's long description (pyproject's readme) is shown on a package index, where a link relative to the
    source tree leads nowhere: it has none, and its install and info commands are the README's."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    readme = re.search(r'^readme = "([^"]+)"', open(os.path.join(root, "pyproject.toml")).read(), re.M).group(1)
    text = open(os.path.join(root, readme)).read()
    assert not re.findall(r"\]\((?!https?://)[^)]*\)", text)
    assert "python -m cudnn_py info" in text and "python -m cudnn_py info" in open(os.path.join(root, "README.md")).read()
