"""The Python part of cudnn_py.torch's per-call host time, on a machine without a GPU: a CPU build of torch, its
tensors passed off as CUDA device 0's (is_cuda, device), the graphs validated deviceless and their bound execute
(``Executor.fast``, as pygraph installs it) running with cuDNN's execute replaced by a stub that returns success
(the variant packs are real descriptors, finalized on the CPU). What this leaves out is what a GPU adds: the
execute call itself, the CUDA caching allocator, kernel launches. Back-to-back F.scaled_dot_product_attention calls
(b4 s1024 h16 d64 causal bf16) with and without grad; the median over rounds of the mean per call.

    pip install torch   # a CPU build is enough
    python benchmarks/torch_provider_cpu.py [--root CHECKOUT]   # --root: measure another checkout's cudnn_py
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import sys
import time
from pathlib import Path


def main() -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    sys.path.insert(0, args.root)

    import torch

    cuda0 = torch.device("cuda", 0)
    torch.Tensor.is_cuda = property(lambda self: True)  # CPU tensors pass for device 0's
    torch.Tensor.device = property(lambda self: cuda0)
    if not hasattr(torch._C, "_cuda_getCurrentRawStream"):
        torch._C._cuda_getCurrentRawStream = lambda device: 0

    class Stream:
        cuda_stream = 0

    torch.cuda.current_stream = lambda device=None: Stream()
    torch.cuda.device = lambda device: contextlib.nullcontext()
    empty, empty_strided = torch.empty, torch.empty_strided
    torch.empty = lambda *a, device=None, **kw: empty(*a, **kw)  # (workspaces: allocated on the host)
    torch.empty_strided = lambda *a, device=None, **kw: empty_strided(*a, **kw)

    import cudnn_py as cudnn
    import cudnn_py.torch as ct
    from cudnn_py.backend import live
    from cudnn_py.plans import execute as execute_mod
    from cudnn_py.plans import execute_defaults

    streams: dict = {}

    def new_handle(device):
        h = 0x1000 + len(streams)
        streams[h] = 0
        live.register(h, None, owned=False, origin="adopt_handle")
        return h

    execute_defaults._new_default_handle = new_handle
    execute_defaults._set_stream = lambda h, s: streams.__setitem__(int(h), int(s))
    execute_mod._get_stream = lambda h: streams.get(int(h), 0)
    execute_defaults._context_of = lambda h: None
    ids = itertools.count(10_000)
    executes = [0]

    def stub_execute(handle, plan, vp):
        executes[0] += 1
        return 0

    class Plan:
        def __init__(self, workspace):
            self.id, self.ptr, self.name, self.workspace = next(ids), 0xDEAD0000, "stub", workspace

    def stubbed(g):
        g.validate()
        ex = g.session.executor
        ex._backend_execute = stub_execute
        g.execute = ex.fast(Plan(ex.scratch_bytes))  # what pygraph installs as its execute after the first one
        return g

    def build(cfg):
        g, ts = ct.forward_graph(cudnn, cfg)
        entry = ct.Entry(cfg, stubbed(g), ts)
        if cfg.requires_grad:
            gb, tb = ct.backward_graph(cudnn, cfg)
            entry.bwd[None] = (stubbed(gb), tb)
        return entry

    ct.install(mechanism="override")
    prov = ct.provider()
    prov._build = build
    F = torch.nn.functional
    q, k, v = (torch.randn(4, 16, 1024, 64, dtype=torch.bfloat16) for _ in range(3))
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    result = {}
    for grad in (True, False):
        call_args = leaves if grad else (q, k, v)
        with contextlib.nullcontext() if grad else torch.no_grad():
            for _ in range(5):
                F.scaled_dot_product_attention(*call_args, is_causal=True)
            samples = []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    F.scaled_dot_product_attention(*call_args, is_causal=True)
                samples.append((time.perf_counter() - t0) / args.calls * 1e6)
        result["with_grad" if grad else "no_grad"] = statistics.median(samples)
    assert prov.fallbacks == 0 and executes[0] == prov.served, (prov.fallbacks, executes[0], prov.served)
    ct.uninstall()
    print(f"torch {torch.__version__} (CPU), cudnn_py from {args.root}: host us per attention call (Python part, "
          f"cuDNN's execute stubbed): with grad {result['with_grad']:.1f}, no grad {result['no_grad']:.1f}")
    return result


if __name__ == "__main__":
    main()
