"""Where cudnn_py.torch's attention time goes, beside torch's own cuDNN attention: the GPU kernels of one forward +
backward (names, count, time) from torch.profiler, and the host functions of the per-call path from cProfile.

The inputs are the training block's of ``benchmarks/torch_sdpa_provider.py``: q / k / v as views of one fused QKV
projection (b=4, s=1024, 16 heads of 64, bf16, causal), so strides are not packed.

    python benchmarks/sdpa_breakdown.py [--iters 20]
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cudnn_py.torch as ct

B, S, DIM, HEADS = 4, 1024, 1024, 16


def inputs():
    qkv = torch.randn(B, S, 3 * DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    q, k, v = qkv.view(B, S, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
    return qkv, (q, k, v)


@contextlib.contextmanager
def contender(name):
    if name == "torch":
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            yield
    else:
        ct.install()
        try:
            yield
        finally:
            ct.uninstall()


def step(qkv, qkv_views, d_o):
    o = F.scaled_dot_product_attention(*qkv_views, is_causal=True)
    (g,) = torch.autograd.grad(o, qkv, d_o)
    return g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    qkv, views = inputs()
    d_o = torch.randn(B, HEADS, S, DIM // HEADS, device="cuda", dtype=torch.bfloat16)
    for name in ("torch", "cudnn_py"):
        with contender(name):
            for _ in range(5):
                step(qkv, views, d_o)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
                for _ in range(args.iters):
                    step(qkv, views, d_o)
                torch.cuda.synchronize()
            print(f"\n=== {name}: GPU kernels of {args.iters} forward+backward ===")
            rows = []
            for e in prof.key_averages():
                dev = getattr(e, "device_time_total", None)
                if dev is None:
                    dev = getattr(e, "cuda_time_total", 0)
                if dev and e.device_type.name == "CUDA":
                    rows.append((dev, e.count, e.key))
            total = sum(r[0] for r in rows)
            for dev, count, key in sorted(rows, reverse=True)[:14]:
                print(f"{dev / args.iters:9.1f} us/step  x{count // args.iters:<3} {key[:150]}")
            print(f"{total / args.iters:9.1f} us/step  total GPU")
            # host: the forward with grad (the provider's per-call path), profiled
            with torch.no_grad():
                pass
            for _ in range(20):
                F.scaled_dot_product_attention(*views, is_causal=True)
            torch.cuda.synchronize()
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(400):
                F.scaled_dot_product_attention(*views, is_causal=True)
            pr.disable()
            torch.cuda.synchronize()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
            print(f"--- {name}: host, 400 forward calls with grad (cProfile, tottime) ---")
            print("\n".join(s.getvalue().splitlines()[:40]))
    prov = ct.provider()
    if prov is not None:
        for key, entry in list(getattr(prov, "by_key", {}).items())[:4]:
            print("entry:", repr(entry)[:400])


if __name__ == "__main__":
    main()
