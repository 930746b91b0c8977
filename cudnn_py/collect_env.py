"""``cudnn.collect_env``: the environment report to paste into a bug report, as the official module's.

``python -m cudnn_py.collect_env`` (``--json``: the same report as one JSON object); from code,
:func:`collect_env_info` (an ordered ``{section: {key: value}}`` dict), :func:`format_report` (its text) and
:func:`main`. The sections are the official report's, filled from cudnn_py's own facts: what ``python -m cudnn_py
info`` knows (``info_facts()`` in ``cudnn_py/__main__.py``: the libcudnn loaded and how it was found, the wheels,
the driver and GPUs, the frameworks, what works here), the libraries mapped into this process, the relevant
installed packages and the environment variables that matter (``CUDNN_*``, ``CUDA_*``, ``LD_LIBRARY_PATH``, ...).

Every probe is guarded: a failure is a value in the report, never an exception, and the report always prints.
torch is imported only where it is installed (its section reads its cuDNN); nothing else is imported for the
report but cudnn_py itself. Nothing is written and nothing is fetched.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from typing import Any

_PACKAGE_PATTERNS = (r"^nvidia-", r"^cudnn", r"^cuda-", r"^torch", r"^triton", r"^jax", r"^cupy",
                     r"^transformer-engine", r"^numpy$")
_ENV_PREFIXES = ("CUDNN_", "CUDA_", "NVIDIA_", "TORCH_", "PYTORCH_")
_ENV_EXACT = ("LD_LIBRARY_PATH", "LD_PRELOAD", "PATH", "VIRTUAL_ENV", "CONDA_PREFIX")
# the libraries whose loaded copies the report lists (a file name fragment each)
_LIBRARIES = {"libcudnn": "libcudnn", "libcublasLt": "libcublasLt", "libnvrtc": "libnvrtc",
              "libcuda (driver)": "libcuda.so"}


def _guard(fn: Callable[[], Any], default: str = "<probe failed>") -> Any:
    try:
        return fn()
    except Exception as e:
        return f"{default}: {type(e).__name__}: {e}"


_facts_cache: dict[str, Any] = {}


def _facts() -> dict[str, Any]:
    """``info``'s facts, gathered once per report."""
    if "facts" not in _facts_cache:
        from .__main__ import info_facts

        _facts_cache["facts"] = info_facts()
    return _facts_cache["facts"]


def _installed() -> dict[str, str]:
    from importlib import metadata

    out: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (getattr(dist, "name", None) or "").strip()
        if name:
            out[re.sub(r"[-_.]+", "-", name).lower()] = dist.version
    return out


def _frontend() -> dict[str, Any]:
    facts = _facts()
    info: dict[str, Any] = {"cudnn_py": facts["cudnn_py"]["version"], "cudnn_py file": facts["cudnn_py"]["path"],
                            "nvidia-cudnn-frontend (pip)": _installed().get("nvidia-cudnn-frontend",
                                                                            "not installed")}
    lib = facts["libcudnn"]
    if lib["found"]:
        info["cudnn backend (loaded)"] = f"{lib['version']} ({lib['version_number']})"
        info["libcudnn"] = lib["path"]
        info["found via"] = lib["found_via"]
        info["vetted"] = lib["vetted"]
        info["built with CUDA runtime"] = lib["cudart_version"]
        info["bindings generated from"] = f"cuDNN {lib['bindings_headers']} headers"
        info["errata known for it"] = len(facts.get("errata", []))
        info["cuDNN wheels"] = ", ".join(f"{d}=={v}" for d, v in facts["wheels"].items()) or "none"
        for dep, d in facts.get("libraries", {}).items():
            info[dep] = f"{d['path']} (found via {d['found_via']})" if d["found"] else d["error"]
    else:
        info["cudnn backend (loaded)"] = f"NOT LOADED: {lib['error']}"
    for key, c in facts["capabilities"].items():
        info[f"works here: {key}"] = f"{({True: 'yes', False: 'no', None: 'unknown'})[c['works']]} ({c['reason']})"
    for i, w in enumerate(facts["warnings"]):
        info[f"WARNING {i + 1}"] = w
    return info


def _platform() -> dict[str, Any]:
    import platform

    py = _facts()["python"]
    info: dict[str, Any] = {"Python": sys.version.replace("\n", " "), "Python executable": py["executable"]}
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix):
        info["Virtual env"] = sys.prefix
    info["Platform"] = py["platform"]
    info["libc"] = " ".join(v for v in platform.libc_ver() if v) or "n/a"
    return info


def _gpu() -> dict[str, Any]:
    facts = _facts()
    driver = facts["driver"]
    info: dict[str, Any] = {"Driver version": driver.get("nvidia_driver") or "<unknown>",
                            "CUDA driver API": driver.get("cuda_driver_api") or "<none>",
                            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")}
    for g in facts["gpus"]:
        info[f"GPU {g['index']} (CUDA order)"] = f"{g['name']} | SM{g['compute_capability'].replace('.', '')}"
    if facts["gpus_missing"]:
        info["GPUs"] = facts["gpus_missing"]
    return info


def _toolkit() -> dict[str, Any]:
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    return {"nvcc on PATH": shutil.which("nvcc") or "not found", "CUDA_HOME (env)": cuda_home or "<unset>"}


def _frameworks() -> dict[str, Any]:
    info: dict[str, Any] = {}
    for name, f in _facts()["frameworks"].items():
        info[name] = (f["version"] + (", imported" if f["imported"] else "")) if f["installed"] else "not installed"
    if not info.get("torch", "not installed").startswith("not installed"):
        info.update(_torch())
    return info


def _torch() -> dict[str, Any]:
    """torch's own CUDA and cuDNN, next to the libcudnn cudnn_py loaded (torch is installed: it is imported)."""
    try:
        import torch
    except Exception as e:
        return {"torch import": f"<import failed: {type(e).__name__}: {e}>"}
    info: dict[str, Any] = {"torch.version.cuda": str(torch.version.cuda)}
    theirs = _guard(lambda: torch.backends.cudnn.version(), "<probe failed>")
    line = str(theirs)
    lib = _facts()["libcudnn"]
    if isinstance(theirs, int) and lib["found"] and theirs != lib["version_number"]:
        line += f"  (differs from the libcudnn cudnn_py loaded: {lib['version_number']})"
    info["torch.backends.cudnn.version()"] = line
    return info


def _loaded_libraries() -> dict[str, Any]:
    from .backend.mapped import mapped_libraries

    info: dict[str, Any] = {}
    for label, fragment in _LIBRARIES.items():
        paths = sorted({os.path.realpath(p) for p in mapped_libraries(fragment)})
        dirs = sorted({os.path.dirname(p) for p in paths})
        header = label + ("  (LOADED FROM SEVERAL DIRECTORIES)" if len(dirs) > 1 else "")
        info[header] = ("\n" + "\n".join(f"    LOADED  {p}" for p in paths)) if paths else "not loaded"
    return info


def _packages() -> dict[str, Any]:
    pats = [re.compile(p) for p in _PACKAGE_PATTERNS]
    return {name: v for name, v in sorted(_installed().items()) if any(p.search(name) for p in pats)} or \
        {"(none)": ""}


def _environment() -> dict[str, Any]:
    info = {k: os.environ[k] for k in sorted(os.environ) if k.startswith(_ENV_PREFIXES) or k in _ENV_EXACT}
    return info or {"(none set)": ""}


def collect_env_info() -> dict[str, dict[str, Any]]:
    """Everything, as an ordered ``{section: {key: value}}`` dict (a section that failed: ``{"error": why}``)."""
    _facts_cache.clear()
    sections: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("cuDNN Frontend", _frontend),
        ("Python / Platform", _platform),
        ("GPU / Driver", _gpu),
        ("CUDA Toolkit", _toolkit),
        ("Frameworks", _frameworks),
        ("GPU Libraries: loaded", _loaded_libraries),
        ("Relevant Packages", _packages),
        ("Environment Variables", _environment),
    ]
    report: dict[str, dict[str, Any]] = {}
    for title, fn in sections:
        result = _guard(fn, "<section failed>")
        report[title] = result if isinstance(result, dict) else {"error": str(result)}
    return report


def format_report(report: dict[str, dict[str, Any]]) -> str:
    """The report as text for an issue: one ``==== section ====`` block per section, keys aligned."""
    lines = ["### cuDNN frontend environment report (cudnn_py)",
             "<!-- generated by `python -m cudnn_py.collect_env`; paste into your issue -->"]
    for title, entries in report.items():
        if not entries:
            continue
        lines += ["", f"==== {title} ===="]
        width = max((len(str(k)) for k in entries), default=0)
        for k, v in entries.items():
            v = str(v)
            lines.append(f"{k}:{v}" if v.startswith("\n") else f"{str(k):<{width}} : {v}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cudnn_py.collect_env",
                                     description="Collect environment information for cuDNN frontend bug reports.")
    parser.add_argument("--json", action="store_true", help="emit JSON")
    args = parser.parse_args(argv)
    report = collect_env_info()
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
