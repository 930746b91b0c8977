"""cudnn_py.torch against torch's own SDPA inside a training step: a small bf16 transformer block (pre-norm causal
attention, b=4 s=1024 dim=1024 16 heads of 64, + an MLP), forward + backward + SGD step.

* torch: F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION) (torch's cuDNN backend)
  where that runs this block, else SDPBackend.FLASH_ATTENTION;
* cudnn_py: the same block, unmodified, with cudnn_py.torch installed.

Printed: the step time of each (CUDA events over a few steps, median of interleaved rounds) and the host time per
attention call (wall time of back-to-back F.scaled_dot_product_attention calls on inputs that need gradients, and
without grad, every contender once per round in alternating order), as cudnn_py / torch ratios (below 1: cudnn_py
faster). JSON to $OUT/torch_sdpa_provider.json when $OUT is set. Under a minute on an H200.

    python benchmarks/torch_sdpa_provider.py
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cudnn_py.torch as ct

B, S, DIM, HEADS = 4, 1024, 1024, 16
ROUNDS, STEPS_PER_ROUND = 7, 5
HOST_ROUNDS, HOST_CALLS = 15, 40


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, DIM))
        return x + self.mlp(self.norm2(x))


def torch_backend(step):
    """SDPBackend.CUDNN_ATTENTION where torch's cuDNN backend runs the block's training step, else FLASH_ATTENTION."""
    try:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            step()
        torch.cuda.synchronize()
        return SDPBackend.CUDNN_ATTENTION
    except RuntimeError as exc:
        print(f"torch's cuDNN SDPA backend does not run this block ({str(exc).splitlines()[0][:120]}); using flash")
        return SDPBackend.FLASH_ATTENTION


def main():
    logging.basicConfig(level=logging.WARNING)  # a fallback of cudnn_py.torch says why
    torch.manual_seed(0)
    block = Block().cuda().to(torch.bfloat16)
    opt = torch.optim.SGD(block.parameters(), lr=1e-4)
    x = torch.randn(B, S, DIM, device="cuda", dtype=torch.bfloat16)
    q, k, v = (torch.randn(B, HEADS, S, DIM // HEADS, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def step():
        loss = block(x).float().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    backend = torch_backend(step)
    mechanism = ct.install()  # once: each contender below runs with it, torch's inside ct.paused()

    @contextlib.contextmanager
    def contender(name):
        if name == "torch":
            with ct.paused(), sdpa_kernel([backend]):
                yield
        else:
            yield

    names = ["torch", "cudnn_py"]
    for name in names:  # warm-up: graphs built, allocator warm, kernels loaded
        with contender(name):
            for _ in range(3):
                step()
            if name == "cudnn_py":
                served = ct.provider().served
                assert served > 0 and ct.provider().fallbacks == 0, "cudnn_py.torch served nothing: see its log"
    step_ms: dict = {n: [] for n in names}
    for r in range(ROUNDS):
        for name in (names if r % 2 == 0 else names[::-1]):
            with contender(name):
                step()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                start.record()
                for _ in range(STEPS_PER_ROUND):
                    step()
                end.record()
                torch.cuda.synchronize()
                step_ms[name].append(start.elapsed_time(end) / STEPS_PER_ROUND)

    leaves = [t.detach().requires_grad_() for t in (q, k, v)]

    def host_us(grad):
        samples: dict = {n: [] for n in names}
        for r in range(HOST_ROUNDS):
            for name in (names if r % 2 == 0 else names[::-1]):
                with contender(name), (contextlib.nullcontext() if grad else torch.no_grad()):
                    args = leaves if grad else (q, k, v)
                    for _ in range(3):
                        F.scaled_dot_product_attention(*args, is_causal=True)
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(HOST_CALLS):
                        F.scaled_dot_product_attention(*args, is_causal=True)
                    samples[name].append((time.perf_counter() - t0) / HOST_CALLS * 1e6)
                    torch.cuda.synchronize()
        return samples

    host = {"with_grad": host_us(True), "no_grad": host_us(False)}
    prov = ct.provider()
    counts = {"served": prov.served, "fallbacks": prov.fallbacks, "graphs_cached": len(prov.cache)}
    ct.uninstall()

    def paired(samples):
        return statistics.median(a / b for a, b in zip(samples["cudnn_py"], samples["torch"]))

    result = {
        "shape": dict(b=B, s=S, dim=DIM, heads=HEADS, head_dim=DIM // HEADS, dtype="bfloat16", causal=True),
        "torch_backend": str(backend), "mechanism": mechanism, "provider_calls": counts, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
        "step_ms": {n: statistics.median(v) for n, v in step_ms.items()},
        "step_ratio": paired(step_ms),
        "host_us_per_attention_call": {k: {n: statistics.median(v) for n, v in s.items()} for k, s in host.items()},
        "host_ratio": {k: paired(s) for k, s in host.items()},
    }
    print(f"torch {torch.__version__}, {result['gpu']}; torch's SDPA backend: {backend}; cudnn_py.torch installed "
          f"through {mechanism}, {counts}")
    print(f"training step: torch {result['step_ms']['torch']:.3f} ms, cudnn_py {result['step_ms']['cudnn_py']:.3f} ms"
          f" -> ratio cudnn_py/torch {result['step_ratio']:.3f}")
    for k, v in result["host_us_per_attention_call"].items():
        print(f"host time per attention call ({k}): torch {v['torch']:.1f} us, cudnn_py {v['cudnn_py']:.1f} us "
              f"-> ratio cudnn_py/torch {result['host_ratio'][k]:.3f}")
    out = os.environ.get("OUT")
    if out:
        Path(out, "torch_sdpa_provider.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
