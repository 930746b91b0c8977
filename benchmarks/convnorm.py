"""Convolution and normalization cases of benchmarks/run.py (imported by it; same process, same tensors, the
official frontend vs cudnn_py vs torch):

* conv fprop / dgrad / wgrad, 3x3, NHWC, bf16, N=32 C=256 H=W=56 K=256, padding 1: TFLOP/s (CUDA events, median
  of interleaved rounds), the plan each library's heuristics picked (same engine?), build time;
* layernorm forward (TRAINING) and backward, rmsnorm forward (TRAINING) and backward, 8192 x 4096 bf16 (fp32
  scale / bias / statistics): GB/s of the bytes each op must move, the heuristic pick, and the best plan of
  ``build_plans(ALL)`` timed one by one (what autotuning would gain), build time.

Both libraries build the same graph with the same classic calls; ``ctx`` carries run.py's libraries, handles,
build and timing helpers.
"""
from __future__ import annotations

import statistics

import torch

N, C, HW, K = 32, 256, 56, 256
ROWS, HIDDEN, EPS = 8192, 4096, 1e-5
CONV_KW = dict(padding=[1, 1], stride=[1, 1], dilation=[1, 1])


def _channels_last(*shape):
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)


# ---- graphs (one builder for both libraries) -----------------------------------------------------------------------
def conv_graph(lib, handle, direction, t):
    BF16, FP32 = lib.data_type.BFLOAT16, lib.data_type.FLOAT
    g = lib.pygraph(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32, handle=handle)
    if direction == "fprop":
        X, W = g.tensor_like(t["x"]), g.tensor_like(t["w"])
        out = g.conv_fprop(X, W, **CONV_KW, name="conv")
        ins, out_name = {X: "x", W: "w"}, "y"
    elif direction == "dgrad":
        DY, W = g.tensor_like(t["dy"]), g.tensor_like(t["w"])
        out = g.conv_dgrad(DY, W, **CONV_KW, name="conv")
        ins, out_name = {DY: "dy", W: "w"}, "dx"
    else:
        X, DY = g.tensor_like(t["x"]), g.tensor_like(t["dy"])
        out = g.conv_wgrad(X, DY, **CONV_KW, name="conv")
        ins, out_name = {X: "x", DY: "dy"}, "dw"
    out.set_output(True).set_data_type(BF16).set_dim(list(t[out_name].shape)).set_stride(list(t[out_name].stride()))
    return g, {tensor: t[k] for tensor, k in ins.items()} | {out: t[out_name]}


def norm_graph(lib, handle, case, t):
    BF16, FP32 = lib.data_type.BFLOAT16, lib.data_type.FLOAT
    g = lib.pygraph(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32, handle=handle)
    X, S = g.tensor_like(t["x"]), g.tensor_like(t["s"])
    pack = {X: t["x"], S: t["s"]}
    if case.endswith("fwd"):
        E = g.tensor_like(t["eps"])
        pack[E] = t["eps"]
        if case == "layernorm_fwd":
            B = g.tensor_like(t["b"])
            pack[B] = t["b"]
            outs = g.layernorm(X, S, B, E, norm_forward_phase=lib.norm_forward_phase.TRAINING)  # both modules
            names = ("y", "mean", "inv")
        else:
            outs = g.rmsnorm(X, S, None, E, norm_forward_phase=lib.norm_forward_phase.TRAINING)
            names = ("y", "inv")
    else:
        DY, IV = g.tensor_like(t["dy"]), g.tensor_like(t["inv"])
        pack.update({DY: t["dy"], IV: t["inv"]})
        if case == "layernorm_bwd":
            M = g.tensor_like(t["mean"])
            pack[M] = t["mean"]
            outs = g.layernorm_backward(DY, X, S, M, IV)
            names = ("dx", "ds", "db")
        else:
            outs = g.rmsnorm_backward(DY, X, S, IV, False)[:2]
            names = ("dx", "ds")
    for out, name in zip(outs, names):
        out.set_output(True).set_dim(list(t[name].shape)).set_stride(list(t[name].stride()))
        out.set_data_type(FP32 if t[name].dtype == torch.float32 else BF16)
        pack[out] = t[name]
    return g, pack


# ---- measuring -----------------------------------------------------------------------------------------------------
def _builds(ctx, case, make):
    """Median build time of fresh graphs, built in alternating order (first-use costs hit both alike)."""
    times = {name: [] for name in ctx.LIBS}
    for r in range(ctx.BUILD_REPEATS):
        order = list(ctx.LIBS.items()) if r % 2 == 0 else list(reversed(list(ctx.LIBS.items())))
        for name, lib in order:
            times[name].append(ctx.build(lib, make(lib, ctx.HANDLES[name])[0], case))
    return times


def _contenders(ctx, row, case, make):
    """Build one graph per library, record its plan 0; returns the execute callables."""
    runs = {}
    for name, lib in ctx.LIBS.items():
        h = ctx.HANDLES[name]
        g, pack = make(lib, h)
        ctx.build(lib, g)
        ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
        runs[name] = lambda g=g, pack=pack, ws=ws, h=h: g.execute(pack, ws, handle=h)
        row[f"{name}_plan0"] = g.get_plan_name_at_index(0)
        row[f"{name}_plans"] = g.get_execution_plan_count()
    return runs


def _best_of_all_plans(ctx, lib, handle, make, reps=20):
    """build_plans(ALL), then every plan timed on its own: (best ms, its name, plans built)."""
    g, pack = make(lib, handle)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([lib.heur_mode.A, lib.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans(lib.build_plan_policy.ALL)
    best = (float("inf"), "", 0)
    count = g.get_execution_plan_count()
    for i in range(count):
        ws = torch.empty(max(1, g.get_workspace_size_plan_at_index(i)), device="cuda", dtype=torch.uint8)
        try:
            ms = ctx.bench_gpu(lambda i=i, ws=ws: g.execute_plan_at_index(pack, ws, i, handle=handle), reps, warm=3)
        except Exception:  # a plan that built but does not execute is not a candidate
            continue
        if ms < best[0]:
            best = (ms, g.get_plan_name_at_index(i), count)
    return best[0], best[1], count


def _finish(ctx, row, builds, runs):
    for k, ms in ctx.bench_interleaved(runs).items():
        row[f"{k}_ms"] = ms
    for name in ctx.LIBS:
        row[f"{name}_build_ms"] = statistics.median(builds[name])
        row[f"{name}_build_ms_all"] = builds[name]
    row["throughput_ratio_vs_official"] = row["official_ms"] / row["cudnn_py_ms"]
    row["build_ratio_vs_official"] = row["cudnn_py_build_ms"] / row["official_build_ms"]
    row["same_engine"] = row["official_plan0"] == row["cudnn_py_plan0"]


# ---- conv ----------------------------------------------------------------------------------------------------------
def conv_cases(results, ctx):
    t = {"x": _channels_last(N, C, HW, HW), "w": _channels_last(K, C, 3, 3), "dy": _channels_last(N, K, HW, HW)}
    for k, shape in (("y", (N, K, HW, HW)), ("dx", (N, C, HW, HW)), ("dw", (K, C, 3, 3))):
        t[k] = torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16).to(
            memory_format=torch.channels_last)
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # an fp32 reference (float64 convs of this size take seconds)
    try:
        x32, w32, dy32 = t["x"].float(), t["w"].float(), t["dy"].float()
        grads = torch.ops.aten.convolution_backward(dy32, x32, w32, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                    [True, True, False])
        refs = {"fprop": torch.nn.functional.conv2d(x32, w32, padding=1), "dgrad": grads[0], "wgrad": grads[1]}
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    flops = 2 * N * K * C * 9 * HW * HW
    for direction, out in (("fprop", "y"), ("dgrad", "dx"), ("wgrad", "dw")):
        case = f"conv_{direction}_3x3_nhwc_bf16_n{N}c{C}hw{HW}k{K}"
        row: dict = {}

        def make(lib, handle, direction=direction):
            return conv_graph(lib, handle, direction, t)

        builds = _builds(ctx, case, make)
        runs = _contenders(ctx, row, case, make)
        errs = {}
        for name, run in runs.items():
            t[out].fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            errs[name] = ctx.rel_err(t[out], refs[direction])
        if direction == "fprop":
            runs["torch"] = lambda: torch.nn.functional.conv2d(t["x"], t["w"], padding=1)
        else:
            mask = [direction == "dgrad", direction == "wgrad", False]
            runs["torch"] = lambda mask=mask: torch.ops.aten.convolution_backward(
                t["dy"], t["x"], t["w"], None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)
        _finish(ctx, row, builds, runs)
        for name in ctx.LIBS:
            row[f"{name}_rel_err"] = errs[name]
        for k in ("official", "cudnn_py", "torch"):
            row[f"{k}_tflops"] = flops / row[f"{k}_ms"] / 1e9
        results[case] = row


# ---- norms ---------------------------------------------------------------------------------------------------------
def norm_cases(results, ctx):
    x = torch.randn(ROWS, HIDDEN, 1, 1, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    s = torch.randn(1, HIDDEN, 1, 1, device="cuda", dtype=torch.float32)
    b = torch.randn_like(s)
    x2, dy2 = x.view(ROWS, HIDDEN), dy.view(ROWS, HIDDEN)
    s_bf, b_bf = s.view(HIDDEN).bfloat16(), b.view(HIDDEN).bfloat16()
    xd = x.double()
    mean = xd.mean(dim=1, keepdim=True)
    inv = 1 / torch.sqrt(((xd - mean) ** 2).mean(dim=1, keepdim=True) + EPS)
    rms_inv = 1 / torch.sqrt((xd * xd).mean(dim=1, keepdim=True) + EPS)
    refs = _norm_references(xd, dy.double(), s.double(), b.double())
    io_bytes = ROWS * HIDDEN * 2
    for case in ("layernorm_fwd", "layernorm_bwd", "rmsnorm_fwd", "rmsnorm_bwd"):
        rms = case.startswith("rmsnorm")
        t = {"x": x, "s": s, "b": b, "dy": dy, "eps": torch.full((1, 1, 1, 1), EPS, dtype=torch.float32),
             "mean": mean.float(), "inv": (rms_inv if rms else inv).float()}
        if case.endswith("fwd"):
            t.update({"y": torch.empty_like(x), "mean": torch.empty_like(t["mean"]),
                      "inv": torch.empty_like(t["inv"])})
            moved = 2 * io_bytes + (1 if rms else 2) * ROWS * 4  # x in, y out, statistics out
        else:
            t.update({"dx": torch.empty_like(x), "ds": torch.empty_like(s), "db": torch.empty_like(b)})
            moved = 3 * io_bytes + (1 if rms else 2) * ROWS * 4  # dy, x in, dx out, statistics in
        row: dict = {"bytes": moved}

        def make(lib, handle, case=case, t=t):
            return norm_graph(lib, handle, case, t)

        builds = _builds(ctx, case, make)
        runs = _contenders(ctx, row, case, make)
        out = "y" if case.endswith("fwd") else "dx"
        for name, run in runs.items():  # the main output of each library against float64
            t[out].fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            row[f"{name}_rel_err"] = ctx.rel_err(t[out], refs[case])
        runs["torch"] = _torch_norm(case, x2, dy2, s_bf, b_bf)
        _finish(ctx, row, builds, runs)
        for name, lib in ctx.LIBS.items():
            ms, plan, count = _best_of_all_plans(ctx, lib, ctx.HANDLES[name], make)
            row[f"{name}_best_of_all_ms"], row[f"{name}_best_of_all_plan"] = ms, plan
            row[f"{name}_all_plans"] = count
            row[f"{name}_best_of_all_gbps"] = moved / ms / 1e6
        for k in ("official", "cudnn_py", "torch"):
            row[f"{k}_gbps"] = moved / row[f"{k}_ms"] / 1e6
        results[f"{case}_{ROWS}x{HIDDEN}_bf16"] = row


def _norm_references(xd, dyd, sd, bd):
    """Float64 y of each forward and dx of each backward (autograd)."""
    refs = {}
    for case in ("layernorm", "rmsnorm"):
        x = xd.clone().requires_grad_()
        if case == "layernorm":
            y = torch.nn.functional.layer_norm(x, x.shape[1:], sd.reshape(x.shape[1:]), bd.reshape(x.shape[1:]), EPS)
        else:
            y = x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + EPS) * sd
        (dx,) = torch.autograd.grad(y, x, dyd)
        refs[f"{case}_fwd"], refs[f"{case}_bwd"] = y.detach(), dx
    return refs


def _torch_norm(case, x2, dy2, w, b):
    if case == "layernorm_fwd":
        return lambda: torch.native_layer_norm(x2, [HIDDEN], w, b, EPS)
    if case == "layernorm_bwd":
        _, mean, rstd = torch.native_layer_norm(x2, [HIDDEN], w, b, EPS)  # statistics in torch's own type
        return lambda: torch.ops.aten.native_layer_norm_backward(dy2, x2, [HIDDEN], mean, rstd, w, b,
                                                                 [True, True, True])
    if case == "rmsnorm_fwd":
        return lambda: torch.nn.functional.rms_norm(x2, [HIDDEN], w, EPS)
    xg, wg = x2.detach().requires_grad_(), w.detach().requires_grad_()
    y = torch.nn.functional.rms_norm(xg, [HIDDEN], wg, EPS)
    return lambda: torch.autograd.grad(y, (xg, wg), dy2, retain_graph=True)  # torch has no public rms backward op


# ---- the table -----------------------------------------------------------------------------------------------------
def markdown_rows(results, build_repeats):
    lines = []
    for k, r in results.items():
        if k.startswith("conv_"):
            unit, key = "TFLOP/s", "tflops"
        elif k.startswith(("layernorm_", "rmsnorm_")):
            unit, key = "GB/s", "gbps"
        else:
            continue
        lines.append(f"| {k} | {unit} (CUDA events, median) | {r[f'official_{key}']:.0f} | {r[f'cudnn_py_{key}']:.0f} | "
                     f"{r[f'torch_{key}']:.0f} | throughput {r['throughput_ratio_vs_official']:.3f}x |")
        if key == "gbps":
            lines.append(f"| {k} | GB/s, best of build_plans(ALL) timed one by one | "
                         f"{r['official_best_of_all_gbps']:.0f} ({r['official_all_plans']} plans) | "
                         f"{r['cudnn_py_best_of_all_gbps']:.0f} ({r['cudnn_py_all_plans']} plans) | | "
                         f"{r['cudnn_py_best_of_all_plan']} |")
        lines.append(f"| {k} | build ms (median of {build_repeats}, alternating order; cudnn_py: the key built before, heuristics and plan from its caches) | {r['official_build_ms']:.1f} | "
                     f"{r['cudnn_py_build_ms']:.1f} | | {r['build_ratio_vs_official']:.2f}x |")
        lines.append(f"| {k} | plan 0 / same engine | {r['official_plan0']} | {r['cudnn_py_plan0']} | | "
                     f"{r['same_engine']} |")
        if "cudnn_py_rel_err" in r:
            what = "fp32" if key == "tflops" else "float64"
            lines.append(f"| {k} | rel. error vs {what} reference | {r['official_rel_err']:.2e} | "
                         f"{r['cudnn_py_rel_err']:.2e} | | |")
    return lines
