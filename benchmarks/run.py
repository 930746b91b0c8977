"""cudnn_py vs the official nvidia-cudnn-frontend (`cudnn`) vs torch, in one process, on the same tensors.

Run on a GPU machine (the official wheel importable as `cudnn`):
    PYTHONPATH=. python benchmarks/run.py [--out benchmarks/results]
Measures, as the project's baseline of the official frontend did: host overhead per execute() of a tiny pointwise graph (torch
tensors and int pointers), graph build time (validate .. build_plans), and kernel time (CUDA events, median
after warm-up) for matmul 8192^3 bf16 and a batched small matmul, with the plan each library picked; then the
convolution and normalization cases of benchmarks/convnorm.py (conv fprop/dgrad/wgrad TFLOP/s, layernorm /
rmsnorm forward and backward GB/s with the best of build_plans(ALL)), and the attention cases of
benchmarks/attention.py (SDPA forward / backward TFLOP/s, host time, build time; --skip-attention leaves them
out, --only-attention runs them alone).
Writes results-<date>.json and .md; prints the table last.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time

import cudnn  # the official frontend, first: cudnn_py reuses the libcudnn it loaded
import torch
from cuda_timing import per_call_ms  # this script's folder is on sys.path

import cudnn_py

dev = torch.device("cuda")
torch.cuda.set_device(0)
LIBS = {"official": cudnn, "cudnn_py": cudnn_py}
HANDLES = {name: lib.create_handle() for name, lib in LIBS.items()}
for name, lib in LIBS.items():
    lib.set_stream(handle=HANDLES[name], stream=torch.cuda.current_stream().cuda_stream)


def bench_gpu(fn, reps=50, warm=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    return statistics.median(per_call_ms(torch, fn) for _ in range(reps))


def rel_err(out, ref) -> float:
    """||out - ref|| / ||ref||, in the reference's precision; inf where an output element is not finite (the NaN
    poison left where a kernel did not write, or an overflow)."""
    out = out.to(ref.dtype)
    if not bool(out.isfinite().all()):
        return math.inf
    return ((out - ref).norm() / ref.norm()).item()


STAGES: dict = {}  # cudnn_py build time per stage, per case (where the build time goes)
BUILD_REPEATS = 4


def bench_interleaved(fns: dict, rounds=12, reps=5, warm=5) -> dict:
    """Median kernel time of each callable, measured in interleaved rounds so that clock and thermal drift over
    the run hit every contender alike (one block after another favoured whoever ran first)."""
    for fn in fns.values():
        for _ in range(warm):
            fn()
    torch.cuda.synchronize()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            times[k] += (per_call_ms(torch, fn) for _ in range(reps))
    return {k: statistics.median(v) for k, v in times.items()}


def build(lib, g, case=None):
    from build_stages import stage_times  # benchmarks/build_stages.py (run.py runs from benchmarks/)

    stages = stage_times(lib, g)
    if case is not None and lib is cudnn_py:
        STAGES[case] = {k: round(v, 3) for k, v in stages.items()}
    return sum(stages.values())


def matmul_graph(lib, a, b):
    BF16, FP32 = lib.data_type.BFLOAT16, lib.data_type.FLOAT
    g = lib.pygraph(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32, handle=HANDLES[lib_name(lib)])
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.matmul(A, B, name="mm")
    C.set_output(True).set_data_type(BF16)
    return g, A, B, C


def lib_name(lib):
    return "official" if lib is cudnn else "cudnn_py"


def matmul_case(results, B_, M, N, K):
    a = torch.randn(B_, M, K, device=dev, dtype=torch.bfloat16)
    b = torch.randn(B_, K, N, device=dev, dtype=torch.bfloat16)
    ref = torch.matmul(a.double(), b.double())
    row, runs, outs = {}, {}, {}
    case = f"matmul_{B_}x{M}x{N}x{K}"
    # build time: fresh graphs built in alternating order (one-off costs such as a handle's first use land on
    # whoever builds first), the median of BUILD_REPEATS each
    builds = {name: [] for name in LIBS}
    for r in range(BUILD_REPEATS):
        for name, lib in (LIBS.items() if r % 2 == 0 else reversed(list(LIBS.items()))):
            builds[name].append(build(lib, matmul_graph(lib, a, b)[0], case))
    for name, lib in LIBS.items():
        c = torch.full((B_, M, N), float("nan"), device=dev, dtype=torch.bfloat16)
        g, A, B, C = matmul_graph(lib, a, b)
        build(lib, g)
        row[f"{name}_build_ms"] = statistics.median(builds[name])
        row[f"{name}_build_ms_all"] = builds[name]
        ws = torch.empty(max(1, g.get_workspace_size()), device=dev, dtype=torch.uint8)
        pack, h = {A: a, B: b, C: c}, HANDLES[name]
        runs[name] = (lambda g=g, pack=pack, ws=ws, h=h: g.execute(pack, ws, handle=h))
        outs[name] = c
        row[f"{name}_plan0"] = g.get_plan_name_at_index(0)
        row[f"{name}_plans"] = g.get_execution_plan_count()
    c_torch = torch.empty(B_, M, N, device=dev, dtype=torch.bfloat16)
    runs["torch"] = lambda: torch.matmul(a, b, out=c_torch)
    for k, ms in bench_interleaved(runs).items():
        row[f"{k}_ms"] = ms
    torch.cuda.synchronize()
    for name in LIBS:
        row[f"{name}_rel_err"] = rel_err(outs[name], ref)
    fl = 2 * B_ * M * N * K
    for k in ("official", "cudnn_py", "torch"):
        row[f"{k}_tflops"] = fl / row[f"{k}_ms"] / 1e9
    row["throughput_ratio_vs_official"] = row["official_ms"] / row["cudnn_py_ms"]
    row["build_ratio_vs_official"] = row["cudnn_py_build_ms"] / row["official_build_ms"]
    row["same_engine"] = row["official_plan0"] == row["cudnn_py_plan0"]
    results[f"matmul_{B_}x{M}x{N}x{K}_bf16"] = row


def _per_call_us(fn, n: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def overhead_case(results, n=2000, rounds=7):
    """Host time per execute() of a tiny graph. Every contender runs in each of `rounds` interleaved rounds;
    the median round counts (the machine's own noise moves all of them alike)."""
    x = torch.randn(1, 1, 8, device=dev, dtype=torch.float16)
    y = torch.randn(1, 1, 8, device=dev, dtype=torch.float16)
    row, calls, outs = {}, {}, {}
    for name, lib in LIBS.items():
        z = torch.full_like(x, float("nan"))
        g = lib.pygraph(io_data_type=lib.data_type.HALF, intermediate_data_type=lib.data_type.FLOAT,
                        compute_data_type=lib.data_type.FLOAT, handle=HANDLES[name])
        X, Y = g.tensor_like(x), g.tensor_like(y)
        Z = g.add(X, Y)
        Z.set_output(True).set_data_type(lib.data_type.HALF)
        row[f"{name}_build_ms"] = build(lib, g, "pointwise_add")
        ws = torch.empty(max(1, g.get_workspace_size()), device=dev, dtype=torch.uint8)
        h = HANDLES[name]
        pack = {X: x, Y: y, Z: z}
        upack = {X.get_uid(): x.data_ptr(), Y.get_uid(): y.data_ptr(), Z.get_uid(): z.data_ptr()}
        wsp = ws.data_ptr()
        calls[f"{name}_us"] = lambda g=g, pack=pack, ws=ws, h=h: g.execute(pack, ws, handle=h)
        calls[f"{name}_us_int_ptrs"] = lambda g=g, upack=upack, wsp=wsp, h=h: g.execute(upack, wsp, handle=h)
        outs[name] = (g, z)
        if lib is cudnn_py:  # the floor: cudnnBackendExecute through ctypes with cudnn_py's plan and variant pack
            g.execute(pack, ws, handle=h)
            ex = g.session.executor
            raw, args = ex._backend_execute, (int(h), ex._last[0].ptr, ex._last[3])
            calls["raw_ctypes_execute_us"] = lambda raw=raw, args=args: raw(*args)
    zt = torch.empty_like(x)
    calls["torch_add_us"] = lambda: torch.add(x, y, out=zt)
    for fn in calls.values():
        for _ in range(200):
            fn()
    samples = {k: [] for k in calls}
    for _ in range(rounds):
        for k, fn in calls.items():
            samples[k].append(_per_call_us(fn, n))
    for k, v in samples.items():
        row[k] = statistics.median(v)
    torch.cuda.synchronize()
    for name, (g, z) in outs.items():
        row[f"{name}_correct"] = bool(torch.allclose(z, x + y))
    row["overhead_ratio_vs_official"] = row["cudnn_py_us"] / row["official_us"]
    row["cudnn_py_python_us"] = row["cudnn_py_us"] - row["raw_ctypes_execute_us"]
    row["official_above_raw_us"] = row["official_us"] - row["raw_ctypes_execute_us"]
    row["overhead_ratio_vs_official_int_ptrs"] = row["cudnn_py_us_int_ptrs"] / row["official_us_int_ptrs"]
    row["build_ratio_vs_official"] = row["cudnn_py_build_ms"] / row["official_build_ms"]
    results["host_overhead_pointwise_add_fp16"] = row


def environment() -> dict:
    from cudnn_py.backend import loader

    props = torch.cuda.get_device_properties(0)
    drv = os.popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader").read().strip()
    return {"gpu": props.name, "driver": drv, "cudnn_backend": cudnn_py.backend_version_string(),
            "cudnn_library": loader.loaded().path, "official_frontend": getattr(cudnn, "__version__", "?"),
            "torch": torch.__version__, "python": platform.python_version(),
            "date": datetime.date.today().isoformat()}


def markdown(env: dict, results: dict) -> str:
    lines = [f"# cudnn_py benchmarks ({env['date']})", "",
             f"{env['gpu']}, driver {env['driver']}, cuDNN {env['cudnn_backend']}, official frontend "
             f"{env['official_frontend']}, torch {env['torch']}, Python {env['python']}", "",
             "| case | metric | official | cudnn_py | torch | cudnn_py / official |", "|---|---|---|---|---|---|"]
    o = results.get("host_overhead_pointwise_add_fp16")
    if o:
        lines.append(f"| tiny add fp16 | µs per execute (torch tensors) | {o['official_us']:.2f} | {o['cudnn_py_us']:.2f} | "
                     f"{o['torch_add_us']:.2f} | {o['overhead_ratio_vs_official']:.2f}x |")
        lines.append(f"| tiny add fp16 | µs per execute (int pointers) | {o['official_us_int_ptrs']:.2f} | "
                     f"{o['cudnn_py_us_int_ptrs']:.2f} | | {o['overhead_ratio_vs_official_int_ptrs']:.2f}x |")
        lines.append(f"| tiny add fp16 | build ms (first graph: includes NVRTC compiling the kernel) | {o['official_build_ms']:.1f} | {o['cudnn_py_build_ms']:.1f} | | "
                     f"{o['build_ratio_vs_official']:.2f}x |")
        lines.append(f"| tiny add fp16 | raw ctypes cudnnBackendExecute, same plan + variant pack (the floor) | | "
                     f"{o['raw_ctypes_execute_us']:.2f} | | |")
        lines.append(f"| tiny add fp16 | µs above that floor | {o['official_above_raw_us']:.2f} | "
                     f"{o['cudnn_py_python_us']:.2f} | | {o['cudnn_py_python_us'] / o['official_above_raw_us']:.2f}x |")
    for k, r in results.items():
        if not k.startswith("matmul"):
            continue
        lines.append(f"| {k} | ms per execute, CUDA events (median) | {r['official_ms']:.4f} | {r['cudnn_py_ms']:.4f} | {r['torch_ms']:.4f} | "
                     f"throughput {r['throughput_ratio_vs_official']:.3f}x |")
        lines.append(f"| {k} | TFLOP/s | {r['official_tflops']:.0f} | {r['cudnn_py_tflops']:.0f} | {r['torch_tflops']:.0f} | |")
        lines.append(f"| {k} | build ms (median of {BUILD_REPEATS}, alternating order; cudnn_py: the key built before, heuristics and plan from its caches) | {r['official_build_ms']:.1f} | "
                     f"{r['cudnn_py_build_ms']:.1f} | | "
                     f"{r['build_ratio_vs_official']:.2f}x |")
        lines.append(f"| {k} | plan 0 / same engine | {r['official_plan0']} | {r['cudnn_py_plan0']} | | "
                     f"{r['same_engine']} |")
        lines.append(f"| {k} | rel. error vs float64 | {r['official_rel_err']:.2e} | {r['cudnn_py_rel_err']:.2e} | | |")
    import convnorm  # benchmarks/convnorm.py (imported after the libraries: the official frontend loads cuDNN first)

    lines += convnorm.markdown_rows(results, BUILD_REPEATS)
    import attention  # benchmarks/attention.py

    lines += attention.markdown_rows(results)
    import norm_table  # benchmarks/norm_table.py

    lines += norm_table.markdown_rows(results)
    lines += ["", "cudnn_py build time by stage (ms):", ""]
    for case, stages in STAGES.items():
        lines.append(f"- {case}: " + ", ".join(f"{k} {v}" for k, v in stages.items()))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--skip-convnorm", action="store_true", help="only the host-overhead and matmul cases")
    ap.add_argument("--skip-attention", action="store_true", help="without the SDPA cases of attention.py")
    ap.add_argument("--only-attention", action="store_true", help="the SDPA cases alone (about 2 minutes)")
    ap.add_argument("--only-norms", action="store_true", help="the norm forward table of norm_table.py alone")
    ap.add_argument("--norm-shapes", default="", help="e.g. 8192x4096,65536x2048 (default: the table's five)")
    args = ap.parse_args()
    results: dict = {}
    ctx = sys.modules[__name__]  # LIBS, HANDLES, build, bench_interleaved, BUILD_REPEATS
    if args.only_norms:
        args.skip_attention = True
    if not args.only_attention and not args.only_norms:
        overhead_case(results)
        if not args.skip_large:
            matmul_case(results, 1, 8192, 8192, 8192)
        matmul_case(results, 16, 1024, 1024, 128)
        if not args.skip_convnorm:
            import convnorm  # benchmarks/convnorm.py: the conv and norm cases

            convnorm.conv_cases(results, ctx)
            convnorm.norm_cases(results, ctx)
    if args.only_norms or not (args.only_attention or args.skip_convnorm):
        import norm_table  # benchmarks/norm_table.py: norm forward GB/s and build times, ours beside cuDNN's

        shapes = [tuple(map(int, s.split("x"))) for s in args.norm_shapes.split(",") if s] or norm_table.SHAPES
        norm_table.norm_table(results, ctx, shapes)
    if not args.skip_attention:
        import attention  # benchmarks/attention.py: the SDPA forward and backward cases

        attention.attention_cases(results, ctx)
    env = environment()
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"results-{env['date']}")
    with open(stem + ".json", "w") as f:
        json.dump({"environment": env, "results": results, "cudnn_py_build_stages_ms": STAGES}, f, indent=1)
    md = markdown(env, results)
    with open(stem + ".md", "w") as f:
        f.write(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
