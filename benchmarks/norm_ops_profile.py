"""Where the time of cudnn_py's torch norm operators goes (``benchmarks/torch_norm_ops.py``'s forward + backward of
one bf16 call, and the forward under no_grad), beside F.rms_norm / F.layer_norm: host microseconds per call without
a profiler, then torch.profiler (GPU kernels per call, synchronisations and copies per call, the busiest host
operators) and cProfile (the Python functions of cudnn_py's path, by own time).

    python benchmarks/norm_ops_profile.py [--op rms_norm|layer_norm] [--rows 8192] [--hidden 4096]
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cudnn_py

EPS = 1e-5


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="rms_norm", choices=("rms_norm", "layer_norm"))
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=4096)
    args = ap.parse_args()
    rows, h = args.rows, args.hidden
    x = torch.randn(rows, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.zeros(h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    ours = cudnn_py.ops.norm
    if args.op == "rms_norm":
        fns = {"torch": lambda: F.rms_norm(x, (h,), w, EPS), "cudnn_py": lambda: ours.rms_norm(x, w, None, EPS)}
    else:
        fns = {"torch": lambda: F.layer_norm(x, (h,), w, b, EPS),
               "cudnn_py": lambda: ours.layer_norm(x, (h,), w, b, EPS)}

    def fwd_bwd(fn):
        x.grad = w.grad = b.grad = None
        fn().backward(dy)

    def fwd(fn):
        with torch.no_grad():
            fn()

    for mode, run in (("fwd_bwd", fwd_bwd), ("fwd_no_grad", fwd)):
        for name, fn in fns.items():
            for _ in range(5):
                run(fn)
            torch.cuda.synchronize()
            n = 50
            t0 = time.perf_counter()
            for _ in range(n):
                run(fn)
                torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / n * 1e6
            host = []
            for _ in range(n):
                t0 = time.perf_counter()
                run(fn)
                host.append(time.perf_counter() - t0)
                torch.cuda.synchronize()
            host.sort()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    run(fn)
                torch.cuda.synchronize()
            gpu, cpu, syncs = collections.Counter(), collections.Counter(), collections.Counter()
            for e in prof.key_averages():
                if e.device_type.name == "CUDA":
                    gpu[e.key[:90]] += getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
                else:
                    cpu[e.key[:60]] += e.self_cpu_time_total
                    if any(s in e.key for s in ("Synchronize", "Memcpy", "memcpy", "item", "_local_scalar")):
                        syncs[e.key] += e.count
            print(f"\n=== {args.op} {rows}x{h} {mode} {name}: synced wall {wall:.1f} us/call, host (median) "
                  f"{host[len(host) // 2] * 1e6:.1f} us/call, GPU kernels {sum(gpu.values()) / 10:.1f} us/call")
            print("  kernels (us/call): " + "; ".join(f"{k} {v / 10:.1f}" for k, v in gpu.most_common(6)))
            print("  syncs / copies per call: " + (", ".join(f"{k} {c / 10:.1f}" for k, c in syncs.items()) or "none"))
            print("  busiest host ops (self us/call): " + ", ".join(f"{k} {v / 10:.1f}" for k, v in cpu.most_common(10)))
            if name == "cudnn_py":
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(50):
                    run(fn)
                pr.disable()
                torch.cuda.synchronize()
                s = io.StringIO()
                pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(16)
                print("  cProfile of 50 calls (tottime):\n" + "\n".join(
                    "    " + line for line in s.getvalue().splitlines()[4:30] if line.strip()))


if __name__ == "__main__":
    main()
