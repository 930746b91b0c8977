"""Where the training step of ``benchmarks/torch_sdpa_provider.py`` spends its time with cudnn_py.torch installed,
beside torch's own cuDNN attention: torch.profiler over a few steps of the same block, per contender: wall time per
step, GPU kernel time per step, host synchronisations and copies per step (a sync drains the GPU's queue: a
launch-bound step then pays host and GPU time in series), the busiest host operators, and the kernels only one
contender launches.

    python benchmarks/sdpa_step_profile.py [--steps 8]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch_sdpa_provider as tsp

import cudnn_py.torch as ct


@contextlib.contextmanager
def contender(name):
    if name == "torch":
        with ct.paused(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            yield
    else:
        yield


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    torch.manual_seed(0)
    block = tsp.Block().cuda().to(torch.bfloat16)
    opt = torch.optim.SGD(block.parameters(), lr=1e-4)
    x = torch.randn(tsp.B, tsp.S, tsp.DIM, device="cuda", dtype=torch.bfloat16)

    def step():
        loss = block(x).float().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    ct.install()
    kernels = {}
    for name in ("torch", "cudnn_py"):
        with contender(name):
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            host = (time.perf_counter() - t0) / args.steps * 1e3
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / args.steps * 1e3
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(args.steps):
                    step()
                torch.cuda.synchronize()
        gpu = collections.Counter()
        cpu_self = collections.Counter()
        syncs = collections.Counter()
        for e in prof.key_averages():
            dev = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
            if e.device_type.name == "CUDA":
                gpu[e.key] += dev
            else:
                cpu_self[e.key] += e.self_cpu_time_total
                if any(w in e.key for w in ("Synchronize", "Memcpy", "memcpy", "EventQuery", "item", "_local_scalar")):
                    syncs[e.key] += e.count
        kernels[name] = gpu
        n = args.steps
        print(f"\n=== {name}: host {host:.3f} ms/step (no sync), wall {wall:.3f} ms/step, GPU kernels "
              f"{sum(gpu.values()) / n / 1e3:.3f} ms/step")
        print("  syncs / copies per step: " + (", ".join(f"{k} {c / n:.1f}" for k, c in syncs.most_common(8)) or "none"))
        print("  busiest host ops (self ms/step): " + ", ".join(f"{k[:60]} {v / n / 1e3:.3f}"
                                                            for k, v in cpu_self.most_common(12)))
    for a, b in (("torch", "cudnn_py"), ("cudnn_py", "torch")):
        only = {k: v for k, v in kernels[a].items() if k not in kernels[b]}
        print(f"\nkernels only under {a} (us/step): " + "; ".join(
            f"{k[:100]} {v / args.steps:.1f}" for k, v in sorted(only.items(), key=lambda kv: -kv[1])[:8]))
    ct.uninstall()


if __name__ == "__main__":
    main()
