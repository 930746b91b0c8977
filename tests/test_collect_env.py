"""``cudnn.collect_env`` (cudnn_py/collect_env.py): the official module's environment report, from cudnn_py's own
facts (``info``). CPU only: the keys of the report, ``python -m cudnn_py.collect_env`` (text and --json), and no torch
imported where torch is not installed."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import cudnn_py as cudnn

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["cuDNN Frontend", "Python / Platform", "GPU / Driver", "CUDA Toolkit", "Frameworks",
            "GPU Libraries: loaded", "Relevant Packages", "Environment Variables"]


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "cudnn_py.collect_env", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_public_names_are_the_official_modules():
    from cudnn_py import collect_env

    assert cudnn.collect_env is collect_env
    for name in ("collect_env_info", "format_report", "main"):
        assert callable(getattr(collect_env, name))


def test_the_report_has_the_sections_and_the_facts_of_info(monkeypatch):
    monkeypatch.setenv("CUDNN_FRONTEND_LOG_INFO", "0")
    report = cudnn.collect_env.collect_env_info()
    assert list(report) == SECTIONS
    assert all(isinstance(v, dict) and "error" not in v for v in report.values()), report
    fe = report["cuDNN Frontend"]
    assert fe["cudnn_py"] == cudnn.__version__
    assert fe["cudnn backend (loaded)"].startswith(cudnn.backend_version_string())
    assert fe["libcudnn"].endswith(".so.9") and fe["found via"]
    assert {"works here: gpu_execution", "works here: deviceless_validation", "works here: reference_engine"} <= set(fe)
    assert "nvidia-cudnn-cu12" in report["Relevant Packages"] or "nvidia-cudnn-cu13" in report["Relevant Packages"]
    assert report["Environment Variables"]["CUDNN_FRONTEND_LOG_INFO"] == "0"
    assert report["Environment Variables"]["CUDNN_PY_CACHE"] == "0"  # (the suite's own)
    assert "libcudnn" in report["GPU Libraries: loaded"]
    assert set(report["Frameworks"]) >= {"torch", "numpy"}
    text = cudnn.collect_env.format_report(report)
    assert text.startswith("### cuDNN frontend environment report")
    for title in SECTIONS:
        assert f"==== {title} ====" in text


def test_a_failing_probe_is_a_value_not_an_exception(monkeypatch):
    from cudnn_py import collect_env

    def broken():
        raise OSError("no such thing")

    monkeypatch.setattr(collect_env, "_toolkit", broken)
    report = collect_env.collect_env_info()
    assert "OSError: no such thing" in report["CUDA Toolkit"]["error"]
    assert "CUDA Toolkit" in collect_env.format_report(report)


def test_runs_as_a_module():
    r = run()
    assert r.returncode == 0, r.stderr
    assert "==== cuDNN Frontend ====" in r.stdout and "==== Environment Variables ====" in r.stdout
    r = run("--json")
    assert r.returncode == 0, r.stderr
    assert list(json.loads(r.stdout)) == SECTIONS


def test_torch_is_imported_only_where_it_is_installed():
    script = ("import sys, cudnn_py\nr = cudnn_py.collect_env.collect_env_info()\n"
              "print('torch' in sys.modules, r['Frameworks']['torch'])")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    imported, state = r.stdout.strip().split(" ", 1)
    if importlib.util.find_spec("torch") is None:
        assert imported == "False" and state == "not installed"
    else:
        assert state != "not installed"
