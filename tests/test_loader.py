"""Loader tests. Each runs in a fresh interpreter: dlopen state is process-global."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(code: str, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("CUDNN_PY_LIBRARY", None)
    e.update(env)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                          timeout=120)


def test_import_loads_nothing():
    r = run("""
        import sys, cudnn_py
        from cudnn_py.backend import loader
        assert loader.loaded() is None
        assert not any('libcudnn' in l for l in open('/proc/self/maps'))
        assert 'torch' not in sys.modules and 'cupy' not in sys.modules
        print('ok')
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_version_and_how_found():
    r = run("""
        import json, cudnn_py
        from cudnn_py.backend import loader
        v = cudnn_py.backend_version()
        info = loader.loaded()
        print(json.dumps([v, cudnn_py.backend_version_string(), info.found_via, info.path, info.cudart_version]))
    """)
    assert r.returncode == 0, r.stderr
    v, s, how, path, cudart = json.loads(r.stdout)
    assert v // 10000 == 9 and s == f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    assert how.startswith("cuda.pathfinder") and path.endswith("libcudnn.so.9")
    assert cudart > 0


def test_override_is_used_and_bad_override_is_explained(tmp_path):
    good = run("""
        import cudnn_py
        from cudnn_py.backend import loader
        print(loader.load_library().path); print(loader.loaded().found_via)
    """)
    path = good.stdout.splitlines()[0]
    r = run("""
        from cudnn_py.backend import loader
        info = loader.load_library(); print(info.found_via)
    """, CUDNN_PY_LIBRARY=path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "CUDNN_PY_LIBRARY"
    missing = str(tmp_path / "libcudnn.so.9")
    r = run("""
        import cudnn_py
        try:
            cudnn_py.backend_version()
        except cudnn_py.backend.CudnnLibraryNotFoundError as e:
            print(e)
    """, CUDNN_PY_LIBRARY=missing)
    assert "CUDNN_PY_LIBRARY" in r.stdout and missing in r.stdout and "no such file" in r.stdout


def test_not_installed_lists_every_place_searched(tmp_path):
    # Hide the wheels: run with an isolated sys.path that has cudnn_py but no nvidia packages, and no pathfinder.
    r = run(f"""
        import sys, importlib.abc
        import numpy  # noqa: F401  (the package's own deps stay importable)
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == 'cuda' or name.startswith('cuda.'):
                    raise ImportError('blocked for the test: ' + name)
        for m in [m for m in sys.modules if m == 'cuda' or m.startswith('cuda.')]:
            del sys.modules[m]
        sys.meta_path.insert(0, Block())
        sys.path[:] = [p for p in sys.path if 'site-packages' not in p] + [{ROOT!r}]
        import cudnn_py
        try:
            cudnn_py.backend_version()
        except Exception as e:
            print(type(e).__name__); print(e)
    """)
    out = r.stdout
    assert out.splitlines()[0] == "CudnnLibraryNotFoundError", r.stderr
    for place in ("already loaded in this process", "cuda.pathfinder", "sys.path scan", "CUDNN_PY_LIBRARY"):
        assert place in out


def test_reuses_a_copy_already_loaded():
    r = run("""
        import ctypes, cudnn_py
        from cudnn_py.backend import loader
        from cuda import pathfinder
        p = pathfinder.load_nvidia_dynamic_lib('cudnn').abs_path
        ctypes.CDLL(p)   # as torch would
        print(loader.load_library().found_via)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "already loaded in this process"


def test_info_command_runs_without_gpu():
    e = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "cudnn_py", "info"], capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "libcudnn:" in r.stdout and "found via" in r.stdout and "version:" in r.stdout
    assert "cublasLt:" in r.stdout and "nvrtc:" in r.stdout and "GPU" in r.stdout


def test_building_validating_and_running_never_import_a_framework():
    """Importing, building, validating (cuDNN, deviceless where there is no GPU), explaining and running the float64
    reference engine on numpy arrays import neither torch nor cupy: only the caller's own objects bring them in."""
    r = run("""
        import sys
        sys.path.insert(0, ROOT_PATH)
        from tests.support.libcuda_stub import ensure_driver
        ensure_driver()
        import numpy as np
        import cudnn_py as cudnn
        from cudnn_py.engines.reference import ReferenceEngine
        F = cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
        a, b = g.tensor([1, 8, 16], name="a"), g.tensor([1, 16, 4], name="b")
        y = g.relu(g.matmul(a, b)).set_output(True)
        g.validate()
        g.explain()
        r = cudnn.pygraph(io_data_type=F, backends=[ReferenceEngine()])
        x = r.tensor([2, 3], name="x")
        z = r.exp(x).set_output(True)
        out = np.zeros((2, 3))
        r.execute({x: np.ones((2, 3)), z: out})
        assert np.allclose(out, np.e)
        assert 'torch' not in sys.modules and 'cupy' not in sys.modules, [m for m in sys.modules if m in ('torch', 'cupy')]
        print('ok')
    """.replace("ROOT_PATH", repr(ROOT)))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "ok"


def test_one_load_checks_the_version_once():
    r = run("""
        from cudnn_py.backend import loader
        calls = []
        real = loader._check_version
        loader._check_version = lambda *a: (calls.append(a), real(*a))[1]
        loader.load_library()
        loader.load_library()
        print(len(calls), calls[0][2])
    """, CUDNN_PY_LIBRARY_VETTED="1")  # vetting checks the child's verdict too, before the library is mapped
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "0"]


# ---- broken installs: the parent survives with a clean exception (issue #27) ----------------------------------------
import pytest  # noqa: E402

from tests.support.fake_libcudnn import fake_libcudnn, truncated_install  # noqa: E402

LOAD = """
    import sys
    sys.path.insert(0, ROOT_PATH)
    from tests.support.libcuda_stub import ensure_driver
    ensure_driver()  # as in the other CPU tests: the runtime-compiled engines (and engines_tensor_ir) load
    from cudnn_py.backend import loader
    PATCH
    try:
        loader.load_library()
        print("LOADED")
    except Exception as e:
        print(type(e).__name__); print(e)
""".replace("ROOT_PATH", repr(ROOT))


def load_with(path: str, patch: str = "") -> tuple[str, str]:
    r = run(LOAD.replace("PATCH", patch), CUDNN_PY_LIBRARY=path)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])  # the parent survived
    first, _, rest = r.stdout.partition("\n")
    return first, rest


SUBS = ["libcudnn_engines_precompiled.so.9", "libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9",
        "libcudnn_engines_tensor_ir.so.9"]


@pytest.mark.parametrize("sub", SUBS)
def test_truncated_sublibrary_is_named(tmp_path, sub):
    lib = truncated_install(tmp_path, sub)
    if not (tmp_path / sub).exists():
        pytest.skip(f"this cuDNN has no {sub}")
    kind, msg = load_with(str(lib))
    assert kind == "CudnnLibraryNotFoundError", msg
    assert f"{tmp_path / sub} is truncated" in msg


@pytest.mark.parametrize("sub", SUBS)
def test_truncated_sublibrary_dies_in_the_child_not_here(tmp_path, sub):
    """Without the ELF size check, the trial's first finalize dies of SIGBUS - in the child."""
    lib = truncated_install(tmp_path, sub)
    if not (tmp_path / sub).exists():
        pytest.skip(f"this cuDNN has no {sub}")
    kind, msg = load_with(str(lib), "from cudnn_py.backend import vetting; vetting.truncated_libraries = lambda path: []")
    assert kind == "CudnnLibraryNotFoundError", msg
    assert "died of SIGBUS in finalize" in msg and sub in msg


def test_a_crash_in_cudart_version_is_caught(tmp_path):
    lib = fake_libcudnn(tmp_path, "CRASH_IN_CUDART")
    kind, msg = load_with(str(lib))
    assert kind == "CudnnLibraryNotFoundError", msg
    assert "died of SIGSEGV in cudnnGetCudartVersion" in msg


def test_cudnn_8_is_reported_as_8_9_7(tmp_path):
    lib = fake_libcudnn(tmp_path, "VERSION=8907")
    kind, msg = load_with(str(lib))
    assert kind == "CudnnVersionError", msg
    assert "cuDNN 8.9.7;" in msg and "0.89" not in msg


@pytest.mark.parametrize("what", ["directory", "fifo", "/dev/zero"])
def test_override_that_is_not_a_file_is_named(tmp_path, what):
    if what == "directory":
        path, expect = str(tmp_path), "is a directory"
    elif what == "fifo":
        path, expect = str(tmp_path / "pipe"), "is a FIFO (named pipe)"
        os.mkfifo(path)
    else:
        path, expect = "/dev/zero", "is a character device"
    kind, msg = load_with(path)
    assert kind == "CudnnLibraryNotFoundError", msg
    assert f"{path}: {expect}, not a library file" in msg and "no such file" not in msg


def test_version_strings():
    from cudnn_py.errors import version_string

    assert version_string(8907) == "8.9.7" and version_string(8100) == "8.1.0"
    assert version_string(92800) == "9.28.0" and version_string(90000) == "9.0.0"


def test_the_verdict_is_cached_per_file(tmp_path):
    """The first vet of a file runs the trial in a child; the second returns the same verdict without one (the
    time a trial costs is benchmarks/cold_start.py's)."""
    r = run("""
        from cudnn_py.backend import loader, vetting
        children = []
        trial = vetting._run_vet_child
        vetting._run_vet_child = lambda *a, **k: children.append(a) or trial(*a, **k)
        p = loader._pathfinder_candidate()
        v1 = loader.vet(p)
        after_first = len(children)
        v2 = loader.vet(p)
        assert v1.ok and v1 is v2, (v1, v2)
        print(after_first, len(children))
    """, CUDNN_PY_CACHE="0")  # no verdict kept by an earlier process: the first vet is a trial
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "1"]


# ---- a good verdict kept across processes (issue #29: the trial is 100-150 ms of every fresh process) ----------------
VET = """
    import sys
    sys.path.insert(0, ROOT_PATH)
    from tests.support.libcuda_stub import ensure_driver
    ensure_driver()
    from cuda import pathfinder
    pathfinder.load_nvidia_dynamic_lib("cublasLt")  # (a copy of libcudnn away from its wheel finds it only so)
    from cudnn_py.backend import loader, vetting
    loader.load_library()
    print(vetting.vetting_ms)
""".replace("ROOT_PATH", repr(ROOT))


def test_a_good_verdict_is_kept_across_processes_until_a_library_changes(tmp_path):
    install = tmp_path / "install"
    install.mkdir()
    lib = truncated_install(install, "no-such-sublibrary")  # a copy of libcudnn.so.9, its sub-libraries linked
    cache = tmp_path / "cache"
    env = dict(CUDNN_PY_CACHE="1", CUDNN_PY_CACHE_DIR=str(cache), CUDNN_PY_LIBRARY_VETTED="", CUDNN_PY_LIBRARY=str(lib))

    def vetting_ms(**more) -> float:
        r = run(VET, **dict(env, **more))
        assert r.returncode == 0, r.stderr[-2000:]
        return float(r.stdout.split()[-1])

    assert vetting_ms() > 0  # tried in a child, and kept
    (record,) = (cache / "vetted").glob("*.json")
    assert vetting_ms() == 0  # an earlier process's verdict: no child
    os.utime(lib, ns=(record.stat().st_mtime_ns, lib.stat().st_mtime_ns + 10**9))  # the library replaced
    assert vetting_ms() > 0
    assert vetting_ms() == 0
    for record in (cache / "vetted").glob("*.json"):
        record.write_text('{"key": "another", "version": 92800, "check": 0}')  # not this library's: ignored
    assert vetting_ms() > 0
    assert vetting_ms(CUDNN_PY_CACHE="0") > 0  # the cache off: always tried


def test_a_bad_verdict_is_not_kept(tmp_path):
    lib = truncated_install(tmp_path, "libcudnn_heuristic.so.9")
    cache = tmp_path / "cache"
    kind, _ = load_with(str(lib))
    assert kind == "CudnnLibraryNotFoundError"
    r = run(VET, CUDNN_PY_CACHE="1", CUDNN_PY_CACHE_DIR=str(cache), CUDNN_PY_LIBRARY_VETTED="", CUDNN_PY_LIBRARY=str(lib))
    assert r.returncode != 0 and not (cache / "vetted").exists()
