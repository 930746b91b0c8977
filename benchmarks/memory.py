"""Process memory per graph build: N matmul graphs built and executed (each dropped after use), host RSS and device
memory before and after, for cudnn_py and for the official frontend, each in a fresh process.

    PYTHONPATH=. python benchmarks/memory.py [--n 1371] [--lib cudnn_py|official|both]

Prints one JSON line per library: RSS growth (MB), device memory growth (MB), live cudnn_py descriptors at the end.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run(lib_name: str, n: int) -> dict:
    import torch

    lib = __import__("cudnn" if lib_name == "official" else "cudnn_py")
    handle = lib.create_handle()
    shapes = [(b, m, k, nn) for b in (1, 4) for m in (64, 128, 96) for k in (64, 32) for nn in (32, 64)]

    def one(i: int) -> None:
        b, m, k, nn = shapes[i % len(shapes)]
        a = torch.randn(b, m, k, device="cuda", dtype=torch.half)
        w = torch.randn(b, k, nn, device="cuda", dtype=torch.half)
        g = lib.pygraph(io_data_type=lib.data_type.HALF, intermediate_data_type=lib.data_type.FLOAT,
                        compute_data_type=lib.data_type.FLOAT, handle=handle)
        A, B = g.tensor_like(a), g.tensor_like(w)
        C = g.relu(g.matmul(A, B))
        C.set_output(True).set_data_type(lib.data_type.HALF)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([lib.heur_mode.A, lib.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        c = torch.empty(b, m, nn, device="cuda", dtype=torch.half)
        ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
        g.execute({A: a, B: w, C: c}, ws, handle=handle)

    for i in range(len(shapes)):  # warm-up: every shape once (engines, NVRTC kernels, allocator pools)
        one(i)
    torch.cuda.synchronize()
    gc.collect()
    free0, _ = torch.cuda.mem_get_info()
    rss0 = rss_mb()
    for i in range(n):
        one(i)
    torch.cuda.synchronize()
    gc.collect()
    free1, _ = torch.cuda.mem_get_info()
    out = {"lib": lib_name, "builds": n, "rss_growth_mb": round(rss_mb() - rss0, 1),
           "device_growth_mb": round((free0 - free1) / 2**20, 1)}
    if lib_name == "cudnn_py":
        from cudnn_py.backend import descriptor

        out["live_descriptors"] = len(descriptor._live)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1371)
    ap.add_argument("--lib", default="both")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run(args.lib, args.n)), flush=True)
        return
    for lib in (["cudnn_py", "official"] if args.lib == "both" else [args.lib]):
        r = subprocess.run([sys.executable, __file__, "--child", "--lib", lib, "--n", str(args.n)],
                           capture_output=True, text=True, env=os.environ)
        print(r.stdout.strip() or f'{{"lib": "{lib}", "error": {json.dumps(r.stderr[-500:])}}}', flush=True)


if __name__ == "__main__":
    main()
