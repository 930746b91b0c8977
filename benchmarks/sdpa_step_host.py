"""Where the host time of ``benchmarks/torch_sdpa_provider.py``'s training step goes, without a profiler: the wall
time of the block's forward, of ``loss.backward()`` and of the optimizer (a synchronisation after each step, none
inside it, so each is the time to enqueue), per contender, medians over steps of rounds in rotated order; the
attention call itself timed inside the step for each contender; for cudnn_py also how often each stage of its
per-call path ran per step (provider forward / backward, the graphs' bound execute, the checked execute, new variant
packs, replay recordings) and its mean time.

Contenders: torch (its cuDNN attention); torch with an identity ``autograd.Function`` written in Python around the
attention's output (what a Python node alone costs the step on this machine); cudnn_py.torch; and an experiment,
cudnn_py's graphs as the CUDA kernels of aten's cuDNN attention ops under torch's own C++ autograd node
(``AtenKernels``: does leaving out the Python Function pay?).

    python benchmarks/sdpa_step_host.py [--rounds 15] [--steps 4]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import functools
import gc
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch_sdpa_provider as tsp

import cudnn_py.torch as ct
from cudnn_py.backend import api as _api
from cudnn_py.cuda import capture as _capture
from cudnn_py.plans import execute as _execute
from cudnn_py.plans import execute_replay as _replay
from cudnn_py.torch import serving as _serving


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g


class AtenKernels:
    """An experiment: cudnn_py's graphs as the CUDA kernels of aten::_scaled_dot_product_cudnn_attention and its
    backward (torch's own C++ autograd node around them, no Python Function), keyed by a tuple of cheap reads."""

    def __init__(self):
        from cudnn_py.torch.config import decide

        self.decide, self.entries, self.lib = decide, {}, None
        self.provider = _serving.Provider(torch, F.scaled_dot_product_attention)

    def key(self, q, k, v, is_causal, scale, lse):
        return (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, is_causal, scale, lse)

    def fwd(self, query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
            return_debug_mask=False, *, scale=None):
        assert attn_bias is None and dropout_p == 0.0 and not return_debug_mask
        entry = self.entries.get(self.key(query, key, value, is_causal, scale, compute_log_sumexp))
        if entry is None:
            cfg = dataclasses.replace(self.decide(torch, query, key, value, is_causal=is_causal, scale=scale),
                                      requires_grad=compute_log_sumexp)
            entry = _serving.build_entry(torch, cfg)
            self.entries[self.key(query, key, value, is_causal, scale, compute_log_sumexp)] = entry
        o, stats = self.provider.forward(entry, query, key, value, None)
        seed = torch.empty((), dtype=torch.long, device=query.device)
        return o, stats, None, None, query.shape[2], key.shape[2], seed, seed, None

    def bwd(self, grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q,
            cum_seq_k, max_q, max_k, dropout_p, is_causal, *, scale=None):
        entry = self.entries[self.key(query, key, value, is_causal, scale, True)]
        return self.provider.backward(entry, query, key, value, out, logsumexp, None, grad_out)

    def install(self):
        self.lib = torch.library.Library("aten", "IMPL")
        self.lib.impl("_scaled_dot_product_cudnn_attention", self.fwd, "CUDA")
        self.lib.impl("_scaled_dot_product_cudnn_attention_backward", self.bwd, "CUDA")

    def remove(self):
        self.lib._destroy()


TIMES: dict = collections.defaultdict(list)  # label -> the durations of its calls (seconds)


def instrument(owner, name, label):
    setattr(owner, name, timed(getattr(owner, name), label))


def timed(fn, label):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[label].append(time.perf_counter() - t0)

    return wrapped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--steps", type=int, default=4, help="steps per contender and round, timed")
    ap.add_argument("--warm", type=int, default=3, help="steps per contender and round before those, not timed")
    args = ap.parse_args()
    torch.manual_seed(0)
    block = tsp.Block().cuda().to(torch.bfloat16)
    opt = torch.optim.SGD(block.parameters(), lr=1e-4)
    x = torch.randn(tsp.B, tsp.S, tsp.DIM, device="cuda", dtype=torch.bfloat16)
    sdpa = F.scaled_dot_product_attention

    def phases():
        t0 = time.perf_counter()
        loss = block(x).float().square().mean()
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2

    entry_points = _capture.driver()  # the replay's driver calls, timed (read by each graph's bound execute when made)
    if entry_points is not None:
        for name in ("cuGraphLaunch", "cuStreamIsCapturing"):
            setattr(entry_points, name, timed(getattr(entry_points, name), f"driver {name}"))
    cudnn_lib = _api.lib()  # cuDNN's execute, timed (read by each executor when made)
    cudnn_lib.cudnnBackendExecute = timed(cudnn_lib.cudnnBackendExecute, "cudnnBackendExecute")
    ct.install()
    for owner, name, label in ((_serving.Provider, "forward", "provider.forward"),
                               (_serving.Provider, "backward", "provider.backward"),
                               (_execute.Executor, "execute", "checked execute (slow path)"),
                               (_execute.Executor, "_variant_pack", "new variant pack"),
                               (_replay.Replays, "consider", "replay considered")):
        instrument(owner, name, label)

    @contextlib.contextmanager
    def contender(name):
        # the attention call timed (whatever serves it), inside each contender's own state
        with contextlib.ExitStack() as stack:
            if name != "cudnn_py":
                stack.enter_context(ct.paused())
                stack.enter_context(sdpa_kernel([SDPBackend.CUDNN_ATTENTION]))
            if name == "cudnn_py aten kernels":
                aten.install()
                stack.callback(aten.remove)
            served = F.scaled_dot_product_attention
            if name == "torch + python identity":
                def served(*a, **k):
                    return Identity.apply(sdpa(*a, **k))
            F.scaled_dot_product_attention = timed(served, f"{name}: the attention call (forward)")
            try:
                yield
            finally:
                F.scaled_dot_product_attention = served if name == "cudnn_py" else sdpa

    names = ("torch", "torch + python identity", "cudnn_py", "cudnn_py aten kernels")
    aten = AtenKernels()
    for name in names:  # warm-up: graphs, recordings, allocator
        with contender(name):
            for _ in range(6):
                phases()
            torch.cuda.synchronize()
    timed_graphs = 0
    for entry in list(ct.provider().cache.values()) + list(aten.entries.values()):  # the bound executes, timed
        for g in [entry.fwd] + [b[0] for b in entry.bwd.values() if b is not None]:
            if g is not None:
                g.execute = timed(g.execute, "graph execute (bound)")
                timed_graphs += 1
    samples: dict = {n: [] for n in names}
    times: dict = {n: collections.defaultdict(list) for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # the order rotated round by round
            with contender(name):
                for _ in range(args.warm):  # back to this contender's steady state (its allocator pattern)
                    phases()
                torch.cuda.synchronize()
                TIMES.clear()
                for _ in range(args.steps):
                    samples[name].append(phases())
                    torch.cuda.synchronize()
                for label, got in TIMES.items():
                    times[name][label] += got
    steps = args.rounds * args.steps
    print(f"host time per step, medians of {steps} steps in {args.rounds} rotated rounds ({torch.cuda.get_device_name()})")
    for name in names:
        fwd, bwd, optim = (statistics.median(s[i] for s in samples[name]) * 1e6 for i in range(3))
        print(f"{name:>24}: forward {fwd:7.1f} us, backward {bwd:7.1f} us, optimizer {optim:7.1f} us, "
              f"total {fwd + bwd + optim:7.1f} us")
        for label in sorted(times[name]):
            got = times[name][label]
            print(f"{'':>26}{label}: {len(got) / steps:.2f} per step, median {statistics.median(got) * 1e6:.1f} us, "
                  f"mean {statistics.mean(got) * 1e6:.1f} us")
    replays = [o for o in gc.get_objects() if isinstance(o, _replay.Replays)]
    total: collections.Counter = collections.Counter()
    for rep in replays:
        st = rep.stats()
        total.update(captures=st["captures"], recorded=st["recorded"], launches=st["launches"])
    print(f"replays of {len(replays)} executors ({timed_graphs} graphs timed): {dict(total)}")
    ct.uninstall()


if __name__ == "__main__":
    main()
