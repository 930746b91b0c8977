"""New-key SDPA builds stage by stage: where a build of a graph cudnn_py has not seen before spends its time, against
the official frontend's build of the same graph, in one process.

Each case's kernels are compiled first (one untimed build per library: both share one libcudnn and its kernel
cache); then ``--repeats`` fresh graphs per library, the libraries alternating, cudnn_py's heuristics and plan
caches emptied before each of its builds (every build a new key for it, as for the official frontend, which has
no such caches). Each stage (validate .. build_plans) is timed; the median per stage and of the totals is reported.
Then one more cudnn_py build traced: how much of it is in cuDNN's backend calls (the rest is Python).

    python3 benchmarks/build_stages.py --out DIR [--repeats 8] [fwd_causal bwd_causal ...]
"""
from __future__ import annotations

import argparse
import collections
import io
import json
import statistics
import time
from pathlib import Path

STAGES = ("validate", "build_operation_graph", "create_execution_plans", "check_support", "build_plans")
DEFAULT_CASES = ("fwd_causal", "fwd_non_causal", "bwd_causal", "bwd_gqa4_causal")


def run_stage(lib, graph, stage: str) -> None:
    """One build stage of ``graph`` as every benchmark runs it (heuristics modes A and FALLBACK)."""
    if stage == "create_execution_plans":
        graph.create_execution_plans([lib.heur_mode.A, lib.heur_mode.FALLBACK])
    else:
        getattr(graph, stage)()


def stage_times(lib, graph, before=None, on_stage=None) -> dict[str, float]:
    """ms per stage of one build (``before`` runs first, untimed: emptying cudnn_py's caches; ``on_stage(stage)``
    is called, untimed, before each stage)."""
    if before is not None:
        before()
    out = {}
    for stage in STAGES:
        if on_stage is not None:
            on_stage(stage)
        t0 = time.perf_counter()
        run_stage(lib, graph, stage)
        out[stage] = (time.perf_counter() - t0) * 1e3
    return out


def summary(builds: list[dict[str, float]]) -> dict[str, float]:
    """The median of each stage and of the totals (the total's median is not the sum of the stages')."""
    out = {s: statistics.median(b[s] for b in builds) for s in STAGES}
    out["total"] = statistics.median(sum(b.values()) for b in builds)
    return out


def in_cudnn_ms(trace_text: str) -> dict[str, tuple[int, float]]:
    """Backend calls of a trace (JSON lines): function -> (calls, ms)."""
    sums: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    for line in trace_text.splitlines():
        rec = json.loads(line)
        if rec.get("phase") == "end":
            sums[rec["fn"]][0] += 1
            sums[rec["fn"]][1] += rec.get("us", 0) / 1e3
    return {k: (c, ms) for k, (c, ms) in sums.items()}


def table(results: dict[str, dict]) -> str:
    rows = ["| case | library | total ms | " + " | ".join(STAGES) + " |", "|---|---|---|" + "---|" * len(STAGES)]
    for key, r in results.items():
        for name in ("official", "cudnn_py"):
            s = r[name]
            rows.append(f"| {key} | {name} | {s['total']:.1f} | " + " | ".join(f"{s[x]:.2f}" for x in STAGES) + " |")
        rows.append(f"| {key} | cudnn_py / official | {r['cudnn_py']['total'] / r['official']['total']:.2f}x | "
                    + " | ".join("" for _ in STAGES) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=list(DEFAULT_CASES), help="fwd_<case> or bwd_<case> of attention.py")
    ap.add_argument("--out", default=".")
    ap.add_argument("--repeats", type=int, default=8, help="timed builds per library and case")
    args = ap.parse_args()

    import cudnn
    import torch

    import cudnn_py
    from benchmarks.attention import CASES, backward_graph, forward_graph, shapes
    from cudnn_py.backend import trace
    from cudnn_py.plans import heuristics, plan_cache

    def empty_caches() -> None:
        heuristics.clear_cache()
        plan_cache.clear_cache()

    torch.cuda.set_device(0)
    libs = {"official": cudnn, "cudnn_py": cudnn_py}
    handles = {n: lib.create_handle() for n, lib in libs.items()}
    for n, lib in libs.items():
        lib.set_stream(handle=handles[n], stream=torch.cuda.current_stream().cuda_stream)
    results: dict[str, dict] = {}
    for key in args.cases:
        direction, name = key.split("_", 1)
        case = CASES[name]
        t = {n: torch.empty(*d, device="cuda", dtype=torch.bfloat16) for n, d in shapes(case).items()}
        layouts = {n: (list(x.shape), list(x.stride())) for n, x in t.items()}
        make = backward_graph if direction == "bwd" else forward_graph
        before = {"official": None, "cudnn_py": empty_caches}
        for n, lib in libs.items():  # kernels compiled (untimed)
            stage_times(lib, make(lib, handles[n], case, layouts)[0], before[n])
        builds: dict[str, list] = {n: [] for n in libs}
        for r in range(args.repeats):
            order = list(libs.items()) if r % 2 == 0 else list(reversed(list(libs.items())))
            for n, lib in order:
                builds[n].append(stage_times(lib, make(lib, handles[n], case, layouts)[0], before[n]))
        row = {n: summary(b) for n, b in builds.items()}
        traced = io.StringIO()
        graph = make(cudnn_py, handles["cudnn_py"], case, layouts)[0]
        empty_caches()
        t0 = time.perf_counter()
        with trace.tracing(traced):
            stage_times(cudnn_py, graph)
        calls = in_cudnn_ms(traced.getvalue())
        row["cudnn_py_traced"] = {"wall_ms": (time.perf_counter() - t0) * 1e3,
                                  "in_cudnn_ms": sum(ms for _, ms in calls.values()),
                                  "calls": {k: {"count": c, "ms": ms} for k, (c, ms) in calls.items()}}
        row["all"] = builds
        results[key] = row
        print(f"{key}: official {row['official']['total']:.1f} ms, cudnn_py {row['cudnn_py']['total']:.1f} ms; "
              f"traced cudnn_py build {row['cudnn_py_traced']['wall_ms']:.1f} ms, "
              f"{row['cudnn_py_traced']['in_cudnn_ms']:.1f} ms of it in cuDNN", flush=True)
    text = table(results)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "build_stages.md").write_text(
        f"# New-key SDPA builds by stage ({args.repeats} per library, alternating; cudnn_py's caches emptied "
        f"before each; kernels compiled)\n\n{text}\n\n" + "\n".join(
            f"- {k}: one traced cudnn_py build {r['cudnn_py_traced']['wall_ms']:.1f} ms, "
            f"{r['cudnn_py_traced']['in_cudnn_ms']:.1f} ms in cuDNN's backend calls (tracing adds to both)"
            for k, r in results.items()) + "\n")
    (out / "build_stages.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
