"""Host cost of one CUDA driver call made through ctypes (how cudnn_py's execute hot path calls the driver) against
the same call through cuda.bindings (how the rest of cudnn_py does): why the three hot-path calls stay raw
(``cudnn_py/cuda/driver.py``'s docstring quotes these figures).

    python benchmarks/driver_calls.py            # a machine with an NVIDIA driver: the real libcuda
    python benchmarks/driver_calls.py --stand-in # a CPU machine: a compiled stand-in libcuda (needs cc)

The stand-in (compiled here, loaded as ``libcuda.so.1`` before cuda.bindings looks for it) implements the measured
entry points as functions that return at once, plus ``cuGetProcAddress_v2`` (how cuda.bindings finds them): what
it measures is the binding's own overhead, the part a faster driver cannot remove. On the real driver each call
also costs the driver's own work (same in both columns). Prints one JSON line: microseconds per call, the median
of 7 rounds, for ``cuCtxGetCurrent``, ``cuStreamIsCapturing`` and ``cuGraphLaunch`` (the stand-in only: on a
real driver a launch needs a graph) each way, and for the fast path's calling convention (ctypes with a
preallocated per-thread out-parameter, as ``cudnn_py/backend/out_params.py`` did).
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

STAND_IN = r"""
#include <dlfcn.h>
#include <string.h>
typedef int CUresult;
CUresult cuInit(unsigned f) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 12090; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = (void *)0x1000; return 0; }
CUresult cuStreamIsCapturing(void *s, int *status) { *status = 0; return 0; }
CUresult cuGraphLaunch(void *exec, void *s) { return 0; }
CUresult cuGetProcAddress_v2(const char *name, void **fn, int version, unsigned long long flags, int *status) {
    *fn = dlsym(RTLD_DEFAULT, name);  /* NULL for the rest: cuda.bindings then says "not found" if called */
    if (status) *status = *fn ? 0 : 1;
    return *fn ? 0 : 500;
}
"""


def per_call_us(fn, n=100_000, rounds=7) -> float:
    for _ in range(1000):
        fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return round(statistics.median(out), 3)


def load_stand_in() -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("--stand-in needs a C compiler (set CC)")
    so = os.path.join(tempfile.mkdtemp(), "libcuda_stand_in.so")
    src = so[:-3] + ".c"
    with open(src, "w") as f:
        f.write(STAND_IN)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wl,-soname,libcuda.so.1", "-o", so, src, "-ldl"], check=True)
    ctypes.CDLL(so, mode=ctypes.RTLD_GLOBAL)


def main() -> None:
    stand_in = "--stand-in" in sys.argv
    if stand_in:
        load_stand_in()
    from cuda.bindings import driver

    (err,) = driver.cuInit(0)
    assert int(err) == 0, err
    if not stand_in:
        err, ctx = driver.cuCtxGetCurrent()
        if not int(ctx):  # a context, so that the calls do what they do in a process that executes
            from cuda.core import Device

            Device(0).set_current()
    lib = ctypes.CDLL("libcuda.so.1")
    vp = ctypes.c_void_p
    for name, argtypes in {"cuCtxGetCurrent": [vp], "cuStreamIsCapturing": [vp, vp],
                           "cuGraphLaunch": [vp, vp]}.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    ctx_out, status_out = ctypes.c_void_p(), ctypes.c_int()
    ctx_addr, status_addr = ctypes.addressof(ctx_out), ctypes.addressof(status_out)
    get, capturing, launch = lib.cuCtxGetCurrent, lib.cuStreamIsCapturing, lib.cuGraphLaunch
    stream = 0  # the legacy default stream: valid on a real driver too
    got = {
        "driver": "stand-in (returns at once)" if stand_in else "real libcuda.so.1",
        "cuCtxGetCurrent_ctypes_preallocated": per_call_us(lambda: get(ctx_addr) == 0 and ctx_out.value),
        "cuCtxGetCurrent_ctypes_byref": per_call_us(lambda: get(ctypes.byref(ctx_out)) == 0 and ctx_out.value),
        "cuCtxGetCurrent_bindings": per_call_us(lambda: int(driver.cuCtxGetCurrent()[1])),
        "cuStreamIsCapturing_ctypes_preallocated": per_call_us(lambda: capturing(stream, status_addr) == 0
                                                              and status_out.value),
        "cuStreamIsCapturing_bindings": per_call_us(lambda: driver.cuStreamIsCapturing(stream)[1] == 0),
    }
    if stand_in:
        got["cuGraphLaunch_ctypes"] = per_call_us(lambda: launch(0x2000, stream))
        got["cuGraphLaunch_bindings"] = per_call_us(lambda: driver.cuGraphLaunch(0x2000, stream))
    print(json.dumps(got))


if __name__ == "__main__":
    main()
