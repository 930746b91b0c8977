"""Attention cases of benchmarks/run.py (imported by it; same process, same tensors: the official frontend vs
cudnn_py vs torch's SDPA backends flash / efficient / cudnn):

* forward, bf16, b=2 h=16 s=4096 d=128, causal and non-causal, a GQA case (4 kv heads, causal) and a decode case
  (s_q = 1 over s_kv = 4096); inference graphs (no statistics), as the official frontend's baseline measured them;
* backward (dQ, dK, dV from O and the statistics), the same shapes but decode;
* per case: TFLOP/s (CUDA events, median of interleaved rounds), the plan each library picked (same engine?),
  build time per graph (validate .. build_plans, median of fresh graphs in alternating order), host time per
  execute (wall time of back-to-back execute() calls that do not fill the launch queue, every contender once per
  round in alternating order; the ratio of the medians and, paired by round, the median of the per-round ratios;
  cudnn_py's with its replay as a CUDA graph and, on a second graph, with replay off), relative error against
  an fp32 reference (TF32 off; float64 of 2 x 16 x 4096² scores would take seconds).

FLOPs: forward 4 b h s_q s_kv d (halved when causal), backward 2.5x that (its five matmuls against two).

The graph builders take (dims, strides) layouts, not torch tensors, so that the CPU tests validate the very graphs
benchmarked here deviceless (tests/test_attention_benchmark.py). Both libraries get the same keyword calls.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

B, H, S, D = 2, 16, 4096, 128
CASES: dict[str, dict[str, Any]] = {
    "causal": dict(b=B, h_q=H, h_kv=H, s_q=S, s_kv=S, d=D, causal=True),
    "non_causal": dict(b=B, h_q=H, h_kv=H, s_q=S, s_kv=S, d=D, causal=False),
    "gqa4_causal": dict(b=B, h_q=H, h_kv=4, s_q=S, s_kv=S, d=D, causal=True),
    "decode": dict(b=B, h_q=H, h_kv=H, s_q=1, s_kv=S, d=D, causal=False),
}
BACKWARD_CASES = ("causal", "non_causal", "gqa4_causal")  # decode trains nothing (and s_q = 1 has no backward)
BUILD_REPEATS = 10  # after one warm-up build per library: 10 timed ones per library and case (builds vary by +-30%)
HOST_CALLS = 40  # back-to-back executes per sample: well under the launch queue's depth
HOST_ROUNDS = 31  # samples per contender (the host ratio of 15 moved by +-0.05 between cases of one run)
_LIKE = {"o": "o", "dQ": "q", "dK": "k", "dV": "v"}  # each output's buffer is laid out as this input


def shapes(case: dict[str, Any]) -> dict[str, list[int]]:
    b, hq, hk, sq, skv, d = (case[x] for x in ("b", "h_q", "h_kv", "s_q", "s_kv", "d"))
    return {"q": [b, hq, sq, d], "k": [b, hk, skv, d], "v": [b, hk, skv, d], "o": [b, hq, sq, d],
            "dO": [b, hq, sq, d], "stats": [b, hq, sq, 1]}


def flops(case: dict[str, Any], backward: bool = False) -> float:
    fl = 4.0 * case["b"] * case["h_q"] * case["s_q"] * case["s_kv"] * case["d"]
    if case["causal"]:
        fl *= 0.5
    return fl * (2.5 if backward else 1.0)


# ---- graphs (one builder for both libraries) -----------------------------------------------------------------------
def _graph(lib, handle):
    kw = dict(io_data_type=lib.data_type.BFLOAT16, intermediate_data_type=lib.data_type.FLOAT,
              compute_data_type=lib.data_type.FLOAT)
    if handle is not None:
        kw["handle"] = handle
    return lib.pygraph(**kw)


def _tensor(g, lib, name, layout, dtype=None):
    dims, strides = layout
    return g.tensor(name=name, dim=list(dims), stride=list(strides),
                    data_type=dtype if dtype is not None else lib.data_type.BFLOAT16)


def forward_graph(lib, handle, case, layouts):
    """Inference SDPA (no statistics). Returns (graph, {graph tensor: layout name})."""
    g = _graph(lib, handle)
    q, k, v = (_tensor(g, lib, n, layouts[n]) for n in ("q", "k", "v"))
    o, _ = g.sdpa(name="sdpa", q=q, k=k, v=v, generate_stats=False, attn_scale=case["d"] ** -0.5,
                  use_causal_mask=case["causal"])
    o.set_output(True).set_dim(list(layouts["o"][0])).set_stride(list(layouts["o"][1]))
    return g, {q: "q", k: "k", v: "v", o: "o"}


def backward_graph(lib, handle, case, layouts):
    """dQ, dK, dV from O, dO and the statistics. Returns (graph, {graph tensor: layout name})."""
    g = _graph(lib, handle)
    ins = {n: _tensor(g, lib, n, layouts[n]) for n in ("q", "k", "v", "o", "dO")}
    ins["stats"] = _tensor(g, lib, "stats", layouts["stats"], lib.data_type.FLOAT)
    dq, dk, dv = g.sdpa_backward(name="sdpa_backward", q=ins["q"], k=ins["k"], v=ins["v"], o=ins["o"],
                                 dO=ins["dO"], stats=ins["stats"], attn_scale=case["d"] ** -0.5,
                                 use_causal_mask=case["causal"])
    names = {t: n for n, t in ins.items()}
    for t, n, like in ((dq, "dQ", "q"), (dk, "dK", "k"), (dv, "dV", "v")):
        t.set_output(True).set_dim(list(layouts[like][0])).set_stride(list(layouts[like][1]))
        names[t] = n
    return g, names


# ---- measuring (GPU only: torch is imported here, not at module import) ------------------------------------------
def host_us(fns: dict, rounds=HOST_ROUNDS, calls=HOST_CALLS) -> tuple[dict, dict]:
    """Host wall time per execute(): ``calls`` calls back to back, a sync between samples; every contender once
    per round, the order reversed every other round (no contender always first after the sync). Returns (the
    median sample of each, the samples). benchmarks/host_split.py and host_ab.py measure with it too."""
    import torch

    out: dict = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in (names if r % 2 == 0 else names[::-1]):
            fn = fns[k]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out[k].append((time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
    return {k: statistics.median(v) for k, v in out.items()}, out


def paired_ratio(samples: dict, name: str, against: str = "official") -> float:
    """The median over rounds of ``name``'s sample over ``against``'s in the same round: the host's drift between
    rounds (which moves both libraries' figures by tens of percent within a run) cancels within a round."""
    return statistics.median(a / b for a, b in zip(samples[name], samples[against]))


def _reference(t, case, with_grads):
    """fp32 attention from its definition, one (batch, head) at a time: O, the LSE statistics and, with_grads,
    (dQ, dK, dV) for t['dO'] (GQA: each q head against its kv head, kv gradients summed per group)."""
    import torch

    q, k, v = t["q"].float(), t["k"].float(), t["v"].float()
    b, hq, sq, _ = q.shape
    group, scale = hq // k.shape[1], case["d"] ** -0.5
    o, lse = torch.empty_like(q), torch.empty(b, hq, sq, 1, device=q.device)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    keep = None
    if case["causal"]:
        keep = torch.ones(sq, k.shape[2], device=q.device, dtype=torch.bool).tril()
    for n in range(b):
        for h in range(hq):
            qh, kh, vh = q[n, h], k[n, h // group], v[n, h // group]
            s = qh @ kh.T * scale
            if keep is not None:
                s = s.masked_fill(~keep, float("-inf"))
            lse[n, h] = torch.logsumexp(s, dim=-1, keepdim=True)
            p = torch.exp(s - lse[n, h])
            o[n, h] = p @ vh
            if with_grads:
                d_o = t["dO"][n, h].float()
                dv[n, h // group] += p.T @ d_o
                d_p = d_o @ vh.T
                d_s = p * (d_p - (d_o * o[n, h]).sum(-1, keepdim=True))
                dq[n, h] = scale * d_s @ kh
                dk[n, h // group] += scale * d_s.T @ qh
    return o, lse, (dq, dk, dv)


def _torch_runs(t, case, backward):
    """torch's SDPA per backend (flash / efficient / cudnn), on the same tensors; a backend that refuses the
    case is left out (its reason kept)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional
    gqa = case["h_kv"] != case["h_q"]
    runs, refused = {}, {}
    for name, backend in (("torch_flash", SDPBackend.FLASH_ATTENTION), ("torch_efficient",
                                                                          SDPBackend.EFFICIENT_ATTENTION),
                          ("torch_cudnn", SDPBackend.CUDNN_ATTENTION)):
        kw = dict(is_causal=case["causal"], scale=case["d"] ** -0.5, enable_gqa=gqa)
        try:
            with sdpa_kernel(backend):
                if backward:
                    leaves = [t[n].detach().requires_grad_() for n in ("q", "k", "v")]
                    out = F.scaled_dot_product_attention(*leaves, **kw)

                    def run(out=out, leaves=leaves):
                        torch.autograd.grad(out, leaves, t["dO"], retain_graph=True)
                else:
                    def run(backend=backend, kw=kw):
                        with sdpa_kernel(backend):
                            F.scaled_dot_product_attention(t["q"], t["k"], t["v"], **kw)
                run()
            torch.cuda.synchronize()
            runs[name] = run
        except Exception as ex:  # a backend that cannot run this case is reported, not fatal
            refused[name] = f"{type(ex).__name__}: {str(ex).splitlines()[0][:120] if str(ex) else ''}"
    return runs, refused


def _case(results, ctx, key, case, backward):
    import torch

    layout_dims = shapes(case)
    t = {n: torch.randn(*dims, device="cuda", dtype=torch.bfloat16) for n, dims in layout_dims.items()
         if n in ("q", "k", "v", "dO")}
    o_ref, lse_ref, grads_ref = _reference(t, case, backward)
    t["o"] = o_ref.to(torch.bfloat16)  # the backward's saved forward: the same for every contender
    t["stats"] = lse_ref.contiguous()
    outs = ("dQ", "dK", "dV") if backward else ("o",)
    refs = dict(zip(outs, grads_ref)) if backward else {"o": o_ref}
    layouts = {n: (list(x.shape), list(x.stride())) for n, x in t.items()}
    make = backward_graph if backward else forward_graph
    row: dict = {"case": case, "direction": "backward" if backward else "forward"}
    builds: dict = {name: [] for name in ctx.LIBS}
    # The first build of a case compiles its kernels (NVRTC, hundreds of ms) for whichever library comes first, and
    # both libraries share one libcudnn and its kernel cache: so one untimed build each first, then fresh graphs in
    # alternating order, all with the kernels compiled. (Without the warm-up the median of whichever library built
    # first carried the compilation: the official frontend's, in benchmarks/results/attention-2026-12-01b.md.)
    first_ms = {name: ctx.build(lib, make(lib, ctx.HANDLES[name], case, layouts)[0]) for name, lib in ctx.LIBS.items()}
    # cudnn_py's heuristics query cache (plans/heuristics.py) answers a graph of a key queried before, and its plan
    # cache (plans/plan_cache.py) rebuilds a plan finalized before from its JSON (entries are made by the second
    # build of a key: one more untimed build). Timed both ways, in two phases (a cleared cache would make the next
    # "cached" build a second one again): the key built before, then both caches emptied before each build (a graph
    # built for the first time); the official frontend's builds alternate with cudnn_py's in both.
    from cudnn_py.plans import heuristics, plan_cache

    ours = ctx.LIBS["cudnn_py"]
    ctx.build(ours, make(ours, ctx.HANDLES["cudnn_py"], case, layouts)[0])
    uncached: list = []
    for phase in ("cached", "uncached"):
        for r in range(BUILD_REPEATS):
            order = list(ctx.LIBS.items()) if r % 2 == 0 else list(reversed(list(ctx.LIBS.items())))
            for name, lib in order:
                if name == "cudnn_py" and phase == "uncached":
                    heuristics.clear_cache()
                    plan_cache.clear_cache()
                    uncached.append(ctx.build(lib, make(lib, ctx.HANDLES[name], case, layouts)[0]))
                else:
                    builds[name].append(ctx.build(lib, make(lib, ctx.HANDLES[name], case, layouts)[0], key))
    row["first_build_ms"] = first_ms  # (the first one of the run includes the compilation)
    row["cudnn_py_uncached_build_ms"] = statistics.median(uncached)
    row["cudnn_py_uncached_build_ms_all"] = uncached
    row["uncached_build_ratio_vs_official"] = row["cudnn_py_uncached_build_ms"] / statistics.median(builds["official"])
    runs, bufs, floor = {}, {}, {}
    for name, lib in ctx.LIBS.items():
        h = ctx.HANDLES[name]
        g, names = make(lib, h, case, layouts)
        ctx.build(lib, g)
        mine = {n: torch.full_like(t[_LIKE[n]], float("nan")) for n in outs}  # poisoned before the checked run
        pack = {gt: (mine[n] if n in mine else t[n]) for gt, n in names.items()}
        ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
        runs[name] = lambda g=g, pack=pack, ws=ws, h=h: g.execute(pack, ws, handle=h)
        if name == "cudnn_py":
            replay_stats = g.session.executor.replays.stats
        bufs[name] = mine
        row[f"{name}_plan0"] = g.get_plan_name_at_index(0)
        row[f"{name}_build_ms"] = statistics.median(builds[name])
        row[f"{name}_build_ms_all"] = builds[name]
        runs[name]()
        if name == "cudnn_py":  # the floor: cudnnBackendExecute through ctypes with cudnn_py's plan and variant pack
            ex = g.session.executor
            raw, args = ex._backend_execute, (int(h), ex._last[0].ptr, ex._last[3])
            floor["raw_ctypes"] = lambda raw=raw, args=args: raw(*args)
            # the same graph once more with replay off (plans/execute_replay.py): every call a cudnnBackendExecute
            g2, names2 = make(lib, h, case, layouts)
            ctx.build(lib, g2)
            g2.session.executor.replays.on = False
            pack2 = {gt: (torch.empty_like(mine[n]) if n in mine else t[n]) for gt, n in names2.items()}
            floor["cudnn_py_executed"] = lambda g2=g2, pack2=pack2, ws=ws, h=h: g2.execute(pack2, ws, handle=h)
            floor["cudnn_py_executed"]()
    torch.cuda.synchronize()
    for name in ctx.LIBS:
        row[f"{name}_rel_err"] = max(ctx.rel_err(bufs[name][n], refs[n]) for n in outs)
    host, host_samples = host_us({**{name: runs[name] for name in ctx.LIBS}, **floor})
    row["host_ratio_paired"] = paired_ratio(host_samples, "cudnn_py")
    row["host_samples_us"] = host_samples
    for name in ctx.LIBS:
        row[f"{name}_host_us"] = host[name]
        row[f"{name}_above_floor_us"] = host[name] - host["raw_ctypes"]
    row["raw_ctypes_host_us"] = host["raw_ctypes"]
    row["cudnn_py_executed_host_us"] = host["cudnn_py_executed"]
    row["executed_ratio_vs_official"] = host["cudnn_py_executed"] / host["official"]
    for n in outs:  # the replayed call's output, checked as the first one was
        bufs["cudnn_py"][n].fill_(float("nan"))
    runs["cudnn_py"]()
    torch.cuda.synchronize()
    row["cudnn_py_replayed_rel_err"] = max(ctx.rel_err(bufs["cudnn_py"][n], refs[n]) for n in outs)
    row["cudnn_py_replay"] = replay_stats()
    row["above_floor_ratio_vs_official"] = row["cudnn_py_above_floor_us"] / row["official_above_floor_us"]
    torch_runs, refused = _torch_runs(t, case, backward)
    row["torch_refused"] = refused
    for k, ms in ctx.bench_interleaved({**runs, **torch_runs}, rounds=8, reps=5, warm=3).items():
        row[f"{k}_ms"] = ms
        row[f"{k}_tflops"] = flops(case, backward) / ms / 1e9
    row["throughput_ratio_vs_official"] = row["official_ms"] / row["cudnn_py_ms"]
    row["build_ratio_vs_official"] = row["cudnn_py_build_ms"] / row["official_build_ms"]
    row["host_ratio_vs_official"] = row["cudnn_py_host_us"] / row["official_host_us"]
    row["same_engine"] = row["official_plan0"] == row["cudnn_py_plan0"]
    results[key] = row


def attention_cases(results, ctx, only=None):
    """Every forward case, then every backward case; ``only`` restricts to the given case names. A case that
    fails (a library refusing it, say) is recorded with its error and the run goes on."""
    import torch

    todo = [(name, False) for name in CASES] + [(name, True) for name in BACKWARD_CASES]
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # an fp32 reference
    try:
        for name, backward in todo:
            if only is not None and name not in only:
                continue
            case = CASES[name]
            key = (f"sdpa_{'bwd' if backward else 'fwd'}_{name}_bf16_b{case['b']}h{case['h_q']}kv{case['h_kv']}"
                   f"sq{case['s_q']}skv{case['s_kv']}d{case['d']}")
            try:
                _case(results, ctx, key, case, backward)
            except Exception as ex:  # reported in the table, not fatal to the other cases
                results[key] = {"case": case, "error": f"{type(ex).__name__}: {ex}"}
                torch.cuda.synchronize()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def markdown_rows(results):
    lines = []
    for k, r in results.items():
        if not k.startswith(("sdpa_fwd_", "sdpa_bwd_")):
            continue
        if "error" in r:
            lines.append(f"| {k} | failed | | | | {r['error'][:200]} |")
            continue
        backends = "; ".join(f"{n[6:]} {r[f'{n}_tflops']:.0f}" for n in ("torch_flash", "torch_efficient",
                                                                          "torch_cudnn") if f"{n}_tflops" in r)
        lines.append(f"| {k} | TFLOP/s (CUDA events, median) | {r['official_tflops']:.0f} | "
                     f"{r['cudnn_py_tflops']:.0f} | {backends} | throughput {r['throughput_ratio_vs_official']:.3f}x |")
        lines.append(f"| {k} | host µs per execute (cudnn_py: replayed as a CUDA graph) | {r['official_host_us']:.1f} | {r['cudnn_py_host_us']:.1f} | | "
                     f"{r['host_ratio_vs_official']:.2f}x (paired by round: {r['host_ratio_paired']:.2f}x) |")
        lines.append(f"| {k} | host µs per execute, cudnn_py with replay off (every call a cudnnBackendExecute) | "
                     f"{r['official_host_us']:.1f} | {r['cudnn_py_executed_host_us']:.1f} | | "
                     f"{r['executed_ratio_vs_official']:.2f}x |")
        lines.append(f"| {k} | host µs above the floor (raw ctypes cudnnBackendExecute, same plan + pack: "
                     f"{r['raw_ctypes_host_us']:.1f}) | {r['official_above_floor_us']:.1f} | "
                     f"{r['cudnn_py_above_floor_us']:.1f} | | {r['above_floor_ratio_vs_official']:.2f}x |")
        lines.append(f"| {k} | build ms, kernels compiled (median of {BUILD_REPEATS}, official {2 * BUILD_REPEATS}, after a warm-up, alternating; "
                     "cudnn_py: heuristics and plan cached) | "
                     f"{r['official_build_ms']:.1f} | "
                     f"{r['cudnn_py_build_ms']:.1f} | | {r['build_ratio_vs_official']:.2f}x |")
        lines.append(f"| {k} | build ms, cudnn_py with its heuristics and plan caches emptied first | "
                     f"{r['official_build_ms']:.1f} | {r['cudnn_py_uncached_build_ms']:.1f} | | "
                     f"{r['uncached_build_ratio_vs_official']:.2f}x |")
        lines.append(f"| {k} | plan 0 / same engine | {r['official_plan0']} | {r['cudnn_py_plan0']} | | "
                     f"{r['same_engine']} |")
        lines.append(f"| {k} | rel. error vs fp32 reference (worst output; cudnn_py: first call / replayed) | "
                     f"{r['official_rel_err']:.2e} | {r['cudnn_py_rel_err']:.2e} / {r['cudnn_py_replayed_rel_err']:.2e} "
                     f"| | replay: {r['cudnn_py_replay']['captures']} recorded, {r['cudnn_py_replay']['launches']} "
                     f"launches, memset nodes as kernels: {r['cudnn_py_replay'].get('memsets_as_kernels')} |")
        if r["torch_refused"]:
            lines.append(f"| {k} | torch backends refused | | | {'; '.join(r['torch_refused'])} | |")
    return lines
