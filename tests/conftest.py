"""Shared test setup.

- On a machine without an NVIDIA driver, the test-only libcuda stub (tests/support) is preloaded before any
  test runs, so cuDNN can finalize descriptors on the CPU.
- Tests marked ``gpu`` are skipped cleanly unless a CUDA device is usable.
"""
from __future__ import annotations

import functools
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cudnn_py.families  # noqa: F401  (the op families register into the cores, as the facade does)
from tests.support.libcuda_stub import ensure_driver

DRIVER = ensure_driver()


def _private_disk_cache() -> None:
    """The disk cache (plans/disk_planning.py) is on by default and lives in the user's cache home: the tests
    never touch that one. Every test process (and the subprocesses it starts, which inherit the environment) gets
    a directory of its own, removed at exit, and planning's use of the cache is off unless a test turns it on
    (``CUDNN_PY_CACHE=1``): tests that empty the in-process caches to see a fresh build must not be answered from
    an entry an earlier test wrote."""
    import atexit
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="cudnn_py-test-cache-")
    atexit.register(shutil.rmtree, path, True)
    os.environ["CUDNN_PY_CACHE_DIR"] = path
    os.environ["CUDNN_PY_CACHE"] = "0"


_private_disk_cache()


@functools.cache
def gpu_available() -> bool:
    if DRIVER != "real":
        return False
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return False
        err, n = driver.cuDeviceGetCount()
        return int(err) == 0 and n > 0
    except Exception:
        return False


NO_GPU = "needs an NVIDIA GPU (none usable here)"


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason=NO_GPU)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A GPU test module (``test_gpu_*.py``) skipped at import (``pytest.importorskip("torch")``) on a machine
    without a GPU is skipped for that reason: the missing GPU, not the missing torch."""
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and isinstance(collector, pytest.Module) and collector.path.name.startswith("test_gpu_")
            and not gpu_available() and isinstance(report.longrepr, tuple)):
        path, lineno, message = report.longrepr
        report.longrepr = (path, lineno, f"Skipped: {NO_GPU}; also: {message.removeprefix('Skipped: ')}")


@pytest.fixture
def old_cudnn(monkeypatch):
    """The real loaded cuDNN, reporting itself as 9.19 (the GPU machine's, older than the C-API families of
    libcudnn_ext): the version gates refuse as they would there."""
    yield from _cudnn_reporting(monkeypatch, 91900)


@pytest.fixture
def recent_cudnn(monkeypatch):
    """The real loaded cuDNN, reporting itself as 9.28 (it has every C-API family of libcudnn_ext): what the gates
    say past the version check, whichever cuDNN the machine has."""
    yield from _cudnn_reporting(monkeypatch, 92800)


def _cudnn_reporting(monkeypatch, version: int):
    from cudnn_py.backend import ext_loader

    ext_loader._reset_for_tests()
    real = ext_loader.load_library()
    monkeypatch.setattr(ext_loader, "load_library", lambda: type(real)(real.path, real.found_via, real.cdll, version))
    yield
    ext_loader._reset_for_tests()


@pytest.fixture(scope="session")
def handle():
    """A cuDNN handle on device 0 (GPU tests only)."""
    import cudnn_py

    h = cudnn_py.create_handle()
    yield h
    cudnn_py.destroy_handle(h)


@pytest.fixture(autouse=True)
def _no_replay_for_test_doubles(request, monkeypatch):
    """CPU tests drive executors with fake handles, tensors and execute calls. On a machine whose driver can
    capture streams, replaying repeated executes (plans/execute_replay.py) would hand those fakes to the driver and to
    cuDNN (cudnnGetStream on a fake handle: a segfault), so it is off there; GPU tests replay with real ones
    (tests/test_gpu_replay.py)."""
    if "gpu" not in request.keywords:
        monkeypatch.setenv("CUDNN_PY_REPLAY", "0")
