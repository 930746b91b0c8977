"""cudnn_py.torch against torch's own SDPA, and against the official module's provider, inside a training step: a
small bf16 transformer block (pre-norm causal attention, b=4 s=1024 dim=1024 16 heads of 64, + an MLP), forward +
backward + SGD step.

Contenders, all in this one process, on the same block and inputs:
* torch: F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.CUDNN_ATTENTION) (torch's cuDNN backend)
  where that runs this block, else SDPBackend.FLASH_ATTENTION;
* official: nvidia-cudnn-frontend 1.32's own provider (``cudnn.torch``: its Python implementations of the CUDA
  kernels of aten::_scaled_dot_product_cudnn_attention and its backward, registered through torch.library by
  ``install_sdpa_overrides()``, which returns the handle that removes them; where that fails on this torch, the aten
  half alone, which is what its ``install()`` registers), under sdpa_kernel(CUDNN_ATTENTION); installed for its
  turns only. Left out, saying why, where the official wheel is not importable as ``cudnn`` or its provider does
  not install or serve on this torch;
* cudnn_py: the same block, unmodified, with cudnn_py.torch installed.

Printed: the step time of each (CUDA events over a few steps, median of rounds in alternating order), the GPU time
of the attention's forward + backward alone (CUDA events), and the host time per attention call (wall time of
back-to-back F.scaled_dot_product_attention calls on inputs that need gradients, and without grad), each as ratios
to torch's (below 1: faster than torch) and cudnn_py / official; the largest difference of each provider's attention
output from torch's. JSON to $OUT/torch_sdpa_provider.json when $OUT is set. About a minute on an H200.

    python benchmarks/torch_sdpa_provider.py
    # with the official provider (its wheel and looseversion installed into a folder on PYTHONPATH):
    site=$(mktemp -d); python -m pip install -q --no-index --no-deps --target $site \\
        .conformance/whl/nvidia_cudnn_frontend*.whl .conformance/whl/looseversion*.whl
    PYTHONPATH=$site python benchmarks/torch_sdpa_provider.py
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

from cuda_timing import per_call_ms  # this script's folder is on sys.path
from official_module import official


def _official():
    """(the official module's sdpa_provider module, None) or (None, why not)."""
    return official("torch.sdpa_provider")


OFFICIAL, OFFICIAL_WHY = _official()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cudnn_py.torch as ct  # noqa: E402

B, S, DIM, HEADS = 4, 1024, 1024, 16
ROUNDS, STEPS_PER_ROUND = 7, 5
ATTN_ROUNDS, ATTN_ITERS = 7, 10
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


def official_installer():
    """How to install the official provider for a turn (a callable returning a handle with remove()), or None and
    why. install_sdpa_overrides() first; where it fails here (it also overrides torch_attn's varlen ops, which
    older torch lacks), the aten half alone."""
    if OFFICIAL is None:
        return None, OFFICIAL_WHY
    full = getattr(OFFICIAL, "install_sdpa_overrides", None)
    try:
        full().remove()
        return full, None
    except Exception as exc:
        first = f"install_sdpa_overrides() failed ({type(exc).__name__}: {str(exc)[:200]})"

    def aten_only():
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("_scaled_dot_product_cudnn_attention", OFFICIAL._fwd, "CUDA")
        lib.impl("_scaled_dot_product_cudnn_attention_backward", OFFICIAL._bwd, "CUDA")
        return OFFICIAL.SdpaOverrides(lib)

    try:
        aten_only().remove()
    except Exception as exc:
        return None, f"{first}; the aten overrides alone failed too ({type(exc).__name__}: {str(exc)[:200]})"
    print(f"official provider: {first}; using its aten overrides alone (what its install() registers)")
    return aten_only, None


def main():
    logging.basicConfig(level=logging.WARNING)  # a fallback of cudnn_py.torch says why
    warnings.filterwarnings("ignore", message=".*[Oo]verrid.*previously registered.*")  # the official's per turn
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
    mechanism = ct.install()  # once: each contender below runs with it, torch's and the official inside ct.paused()
    install_official, official_why = official_installer()

    @contextlib.contextmanager
    def contender(name):
        if name == "torch":
            with ct.paused(), sdpa_kernel([backend]):
                yield
        elif name == "official":
            with ct.paused(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                handle = install_official()
                try:
                    yield
                finally:
                    handle.remove()
        else:
            yield

    names = ["torch", "cudnn_py"] + (["official"] if install_official is not None else [])
    for name in list(names):  # warm-up: graphs built, allocator warm, kernels loaded; each provider serves
        try:
            with contender(name):
                for _ in range(3):
                    step()
                torch.cuda.synchronize()
        except Exception as exc:
            if name != "official":
                raise
            official_why = f"its training step failed ({type(exc).__name__}: {str(exc)[:300]})"
            names.remove(name)
            continue
        if name == "cudnn_py":
            served = ct.provider().served
            assert served > 0 and ct.provider().fallbacks == 0, "cudnn_py.torch served nothing: see its log"
        if name == "official" and OFFICIAL.calls["fwd"] == 0:
            official_why = f"it served no forward on its Python path (its counts: {dict(OFFICIAL.calls)})"
            names.remove(name)
    if "official" not in names:
        print(f"official provider left out: {official_why}")

    def rotations(r):  # every contender once per round, the order rotated round by round
        return names[r % len(names):] + names[:r % len(names)]

    outputs = {}
    with torch.no_grad():
        for name in names:
            with contender(name):
                outputs[name] = F.scaled_dot_product_attention(q, k, v, is_causal=True).float()
    max_diff = {n: (outputs[n] - outputs["torch"]).abs().max().item() for n in names if n != "torch"}

    step_ms: dict = {n: [] for n in names}
    for r in range(ROUNDS):
        for name in rotations(r):
            with contender(name):
                step()
                torch.cuda.synchronize()
                step_ms[name].append(per_call_ms(torch, step, STEPS_PER_ROUND))

    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    d_o = torch.randn_like(q)

    attn_ms: dict = {n: [] for n in names}  # the attention's forward + backward alone, on the GPU
    for r in range(ATTN_ROUNDS):
        for name in rotations(r):
            with contender(name):
                def attention():
                    torch.autograd.grad(F.scaled_dot_product_attention(*leaves, is_causal=True), leaves, d_o)
                attention()
                torch.cuda.synchronize()
                attn_ms[name].append(per_call_ms(torch, attention, ATTN_ITERS))

    def host_us(grad):
        samples: dict = {n: [] for n in names}
        for r in range(HOST_ROUNDS):
            for name in rotations(r):
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
    counts = {"served": prov.served, "fallbacks": prov.fallbacks, "graphs_cached": len(prov.cache),
              "keys": len(prov.by_key)}
    official_counts = dict(OFFICIAL.calls) if "official" in names else None
    ct.uninstall()

    def paired(samples, a, b):  # median of the per-round ratios a / b (rounds pair their samples)
        return statistics.median(x / y for x, y in zip(samples[a], samples[b]))

    pairs = [(n, "torch") for n in names if n != "torch"] + ([("cudnn_py", "official")] if "official" in names else [])

    def ratios(samples):
        return {f"{a}/{b}": paired(samples, a, b) for a, b in pairs}

    result = {
        "shape": dict(b=B, s=S, dim=DIM, heads=HEADS, head_dim=DIM // HEADS, dtype="bfloat16", causal=True),
        "torch_backend": str(backend), "mechanism": mechanism, "provider_calls": counts,
        "official": {"included": "official" in names, "why_not": None if "official" in names else official_why,
                     "calls": official_counts},
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
        "max_abs_diff_from_torch": max_diff,
        "step_ms": {n: statistics.median(v) for n, v in step_ms.items()}, "step_ratio": ratios(step_ms),
        "attention_fwd_bwd_gpu_ms": {n: statistics.median(v) for n, v in attn_ms.items()},
        "attention_ratio": ratios(attn_ms),
        "host_us_per_attention_call": {k: {n: statistics.median(v) for n, v in s.items()} for k, s in host.items()},
        "host_ratio": {k: ratios(s) for k, s in host.items()},
    }
    print(f"torch {torch.__version__}, {result['gpu']}; torch's SDPA backend: {backend}; cudnn_py.torch installed "
          f"through {mechanism}, {counts}; official provider: "
          + (f"included, its counts {official_counts}" if "official" in names else f"left out ({official_why})"))
    print("largest |output - torch's|: " + ", ".join(f"{n} {d:.3g}" for n, d in max_diff.items()))

    def line(what, values, unit, fmt, rat):
        cells = ", ".join(f"{n} {values[n]:{fmt}} {unit}" for n in names)
        return f"{what}: {cells} -> " + ", ".join(f"{p} {r:.3f}" for p, r in rat.items())

    print(line("training step", result["step_ms"], "ms", ".3f", result["step_ratio"]))
    print(line("attention fwd+bwd (GPU)", result["attention_fwd_bwd_gpu_ms"], "ms", ".3f", result["attention_ratio"]))
    for k, v in result["host_us_per_attention_call"].items():
        print(line(f"host time per attention call ({k})", v, "us", ".1f", result["host_ratio"][k]))
    out = os.environ.get("OUT")
    if out:
        Path(out, "torch_sdpa_provider.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
