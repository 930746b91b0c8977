"""What works on this machine, each a yes or no with the reason: running graphs on a GPU, validating them against
cuDNN without one (deviceless validation), and the float64 reference engine on the CPU.

Nothing is assumed: each answer comes from trying the thing in a small way (the driver's device count, the
validation of an 8x8 matmul, a 2x3 graph on the reference engine), so it follows the machine and the installed
packages. ``python -m cudnn_py info`` prints them (``--json``: ``"capabilities"``); ``examples/first_graph.py`` asks
:func:`gpu_execution` before it runs.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Capability:
    """``works``: True, False, or None where it cannot be told (e.g. cuda-bindings not installed); ``reason``: why,
    in one line."""

    works: bool | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"works": self.works, "reason": self.reason}

    def line(self) -> str:
        word = {True: "yes", False: "no", None: "unknown"}[self.works]
        return f"{word} ({self.reason})"


def _nvidia_driver_version() -> str | None:
    """The kernel driver's version (e.g. 580.159.04), read where the driver publishes it."""
    from .bounded_read import read_regular

    try:
        data, _ = read_regular("/proc/driver/nvidia/version", 1 << 16, "the driver's version file", follow_links=True)
    except OSError:
        return None
    words = data.decode("utf-8", "replace").split("\n", 1)[0].split()
    return next((w for w in words if w.count(".") >= 1 and w.replace(".", "").isdigit()), None)


def gpu_facts() -> dict[str, Any]:
    """The CUDA driver and the GPUs it shows: ``gpus`` (index, name, compute capability), or ``missing``, why none
    was listed."""
    facts: dict[str, Any] = {"cuda_driver_api": None, "nvidia_driver": None, "gpus": [], "missing": None}
    try:
        from cuda.bindings import driver

        from .plans.device_gates import compute_capability
    except ImportError as e:
        facts["missing"] = f"unknown (cuda-bindings not installed: {e})"
        return facts
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:
        facts["missing"] = f"none (no CUDA driver: {e})"
        return facts
    if int(err) != 0:
        facts["missing"] = f"none (cuInit: {err!r})"
        return facts
    err, ver = driver.cuDriverGetVersion()
    facts["cuda_driver_api"] = f"{ver // 1000}.{ver % 1000 // 10}"
    facts["nvidia_driver"] = _nvidia_driver_version()
    err, n = driver.cuDeviceGetCount()
    for i in range(n):
        _, dev = driver.cuDeviceGet(i)
        _, name = driver.cuDeviceGetName(256, dev)
        major, minor = divmod(compute_capability(i), 10)
        label = bytes(name).split(b"\x00", 1)[0].decode()
        facts["gpus"].append({"index": i, "name": label, "compute_capability": f"{major}.{minor}"})
    if not facts["gpus"]:
        facts["missing"] = "none (0 devices)"
    return facts


def _libcudnn() -> tuple[Any, str | None]:
    """The loaded libcudnn, or None and why it does not load (its first line)."""
    from .backend import loader

    try:
        return loader.load_library(), None
    except Exception as e:
        return None, f"no libcudnn loads: {str(e).splitlines()[0] if str(e) else type(e).__name__}"


def _driver_library() -> str | None:
    """The file this process loaded as libcuda.so.1 (the NVIDIA driver's, or a stand-in), or None."""
    from .backend.mapped import loaded_path_of

    return loaded_path_of("libcuda.so.1")


def gpu_execution(facts: dict[str, Any] | None = None) -> Capability:
    """Whether graphs can run on a GPU here: a libcudnn loads and the CUDA driver shows at least one GPU."""
    facts = gpu_facts() if facts is None else facts
    if facts["gpus"]:
        gpus = ", ".join(f"GPU {g['index']}: {g['name']} (sm{g['compute_capability'].replace('.', '')})"
                         for g in facts["gpus"])
        lib, why = _libcudnn()
        if lib is None:
            return Capability(False, f"{why}; {gpus}")
        return Capability(True, f"{gpus}; cuDNN {lib.version_string}, CUDA driver {facts['cuda_driver_api']}")
    missing = facts["missing"] or "none"
    if missing.startswith("unknown"):
        return Capability(None, "cannot tell: cuda-bindings is not installed (it comes with the [cu12] / [cu13] "
                                "extra)")
    from .backend import driver_standin
    from .backend.loader import driver_library_missing

    if driver_library_missing() or driver_standin.loaded() is not None:  # (the stand-in is no driver)
        return Capability(False, "no NVIDIA driver here (libcuda.so.1 does not load), so no GPU")
    inner = missing[len("none ("):-1] if missing.startswith("none (") and missing.endswith(")") else missing
    return Capability(False, f"no GPU: {inner}")


@contextmanager
def _quiet_stderr():
    """File descriptor 2 sent to /dev/null for the block: cuDNN prints 'Unable to load any of
    {libcudnn_engines_runtime_compiled.so...}' there when its engine library cannot load (the same cause a trial's
    exception names)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):
        yield
        return
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def deviceless_validation() -> Capability:
    """Whether ``validate()`` checks a graph against cuDNN here: tried on an 8x8 matmul (about 0.2 s the first
    time in a process). cuDNN's engine libraries load ``libcuda.so.1``, so this works on a machine without a GPU
    only where that library (the NVIDIA driver's, or a stand-in) loads."""
    lib, why = _libcudnn()
    if lib is None:
        return Capability(False, why or "no libcudnn loads")
    from .enums import data_type
    from .errors import NotInitializedError
    from .facade.pygraph import pygraph

    g = pygraph(io_data_type=data_type.FLOAT, compute_data_type=data_type.FLOAT)
    a = g.tensor(name="a", dim=[1, 8, 8], stride=[64, 8, 1])
    b = g.tensor(name="b", dim=[1, 8, 8], stride=[64, 8, 1])
    g.matmul(a, b).set_output(True)
    try:
        with _quiet_stderr():
            g.validate()
    except NotInitializedError as e:
        from .backend.loader import driver_library_missing

        if driver_library_missing():
            return Capability(False, "cuDNN's engine libraries need libcuda.so.1 (the NVIDIA driver's user-space "
                                     "library; no GPU is needed), which does not load here")
        return Capability(False, f"a matmul's validation failed: {str(e).splitlines()[0]}")
    except Exception as e:
        return Capability(False, f"a matmul's validation failed: {type(e).__name__}: {str(e).splitlines()[0]}")
    driver = _driver_library()
    from .backend import driver_standin

    if driver is not None and driver == driver_standin.loaded():
        where = "cudnn_py's deviceless libcuda.so.1 stand-in: no driver needed"
    else:
        where = f"libcuda.so.1 from {driver}" if driver else "libcuda.so.1"
    return Capability(True, f"a matmul validated against cuDNN {lib.version_string} ({where})")


def reference_engine() -> Capability:
    """Whether the float64 reference engine runs here (numpy on the CPU; no GPU, driver or libcudnn): tried on a
    2x3 graph."""
    try:
        import numpy as np

        from .engines.reference import ReferenceEngine
        from .engines.router import Router
        from .enums import data_type
        from .facade.pygraph import pygraph

        g = pygraph(io_data_type=data_type.FLOAT, backends=[ReferenceEngine()], router=Router(include_backend=False))
        x = g.tensor(name="x", dim=[2, 3], stride=[3, 1])
        y = g.exp(x)
        y.set_output(True)
        out = np.zeros((2, 3))
        g.execute({x: np.ones((2, 3)), y: out})
        if not np.allclose(out, np.e):
            return Capability(False, "a 2x3 graph gave wrong results")
    except Exception as e:
        return Capability(False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return Capability(True, f"float64 numpy {np.__version__} on the CPU: pygraph(..., backends=[ReferenceEngine()]) "
                            "from cudnn_py.engines.reference")


def capabilities(facts: dict[str, Any] | None = None) -> dict[str, Capability]:
    """The three answers, keyed as ``info --json`` keys them."""
    return {"gpu_execution": gpu_execution(facts), "deviceless_validation": deviceless_validation(),
            "reference_engine": reference_engine()}
