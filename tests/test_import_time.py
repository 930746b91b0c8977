"""`import cudnn_py` loads nothing heavy: the package's public names are imported on first use (its module
``__getattr__``), so a bare import costs about what `import logging` costs. Each check runs in a fresh interpreter."""
from __future__ import annotations

from pathlib import Path

from tests.support.child import run_json

ROOT = Path(__file__).resolve().parents[1]

# what a bare `import cudnn_py` must not import: any module of the package but the package itself and its version (the planning
# session, the op specs, the loader, the generated tables, the facade, cudnn_py.torch, ...), ctypes, numpy, the
# frameworks, and the stdlib modules the package's modules pull in
HEAVY = ["ctypes", "numpy", "torch", "cupy", "cuda", "dataclasses", "inspect", "typing", "subprocess", "hashlib",
         "importlib.util"]


def _run(code: str) -> dict:
    return run_json(code, timeout=120)


def test_bare_import_loads_no_submodule_and_nothing_heavy():
    out = _run("import sys; before = set(sys.modules); import cudnn_py, json; "
               "print(json.dumps(sorted(set(sys.modules) - before)))")
    new = set(out) - {"json", "json.decoder", "json.encoder", "json.scanner", "_json", "re", "enum"}
    ours = sorted(m for m in new if m.split(".")[0] == "cudnn_py")
    assert ours == ["cudnn_py", "cudnn_py._version"], ours  # the version string's one module, and nothing else
    heavy = sorted(m for m in new if m in HEAVY or m.split(".")[0] in {"numpy", "torch", "cupy", "cuda"})
    assert heavy == [], heavy


def test_lazy_names_load_on_first_use_and_stay():
    out = _run("import sys, json; import cudnn_py as c; g = c.pygraph; e = c.data_type.HALF; "
               "import cudnn_py.wrapper as w; "
               "print(json.dumps([c.__dict__.get('pygraph') is g, c.handle is c.Handle, w is c.wrapper, "
               "c.wrapper.cudnn is c, 'pygraph' in dir(c), 'cudnn_py.facade.pygraph' in sys.modules, "
               "'cudnn_py.torch' in sys.modules]))")
    assert out == [True, True, True, True, True, True, False]


def test_unknown_name_is_an_attribute_error():
    out = _run("import json, cudnn_py\ntry:\n    cudnn_py.no_such_name\nexcept AttributeError as e:\n"
               "    print(json.dumps(str(e)))")
    assert "no_such_name" in out


def test_every_lazy_name_resolves():
    out = _run("import json, cudnn_py as c; print(json.dumps([n for n in c.__all__ if getattr(c, n) is None]))")
    assert out == []


def test_sublibrary_loading_failure_without_a_driver_says_what_is_missing(monkeypatch):
    from cudnn_py.backend import api, loader

    monkeypatch.setattr(api, "driver_library_missing", lambda: True)
    e = api.error_for(1008, "cudnnBackendFinalize", kind="CUDNN_BACKEND_MATMUL_DESCRIPTOR")
    assert str(e).startswith(loader.NO_DRIVER) and "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED" in str(e)
    monkeypatch.setattr(api, "driver_library_missing", lambda: False)
    assert loader.NO_DRIVER not in str(api.error_for(1008, "cudnnBackendFinalize"))
    assert loader.NO_DRIVER not in str(api.error_for(2000, "cudnnBackendFinalize"))


def test_every_classic_enum_is_a_lazy_name():
    # the package lists its lazy names by hand (deriving them would import cudnn_py.enums at `import cudnn_py`)
    import cudnn_py
    from cudnn_py import enums

    assert {n for n, source in cudnn_py._LAZY.items() if source == ".enums"} == set(enums.__all__)
