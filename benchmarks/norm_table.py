"""The norm forward table of benchmarks/run.py (issue #38's measure): layernorm / rmsnorm forward, training and
inference, bf16 and fp16, five shapes, GB/s of the official frontend's heuristic plan, torch (F.layer_norm /
F.rms_norm), cudnn_py's default choice (``create_execution_plans([A, FALLBACK])`` then ``build_plans()``: what a
user gets without asking) and each plan config of cudnn_py's own norm engine (``heur_mode.OPENSOURCE``); then the
build time of one graph per op: the official's, cudnn_py's with cuDNN's plan, and cudnn_py's engine with a cold
kernel cache (a fresh cache directory and an empty in-process store: NVRTC compiles), a warm one on disk (an empty
in-process store: the kernel file is read back) and a warm process.

Every contender runs eagerly (the official's execute cannot be captured into torch's CUDA graphs: its handle keeps
the stream it was given), ``CALLS`` calls back to back between two CUDA events, so the GPU stays busy after the
first call as long as a call's host time is below its kernel time (it is: the smallest case moves 128 MB, about 45
µs at 2.8 TB/s); samples of the contenders interleaved round by round, the median reported. Bytes = X read and Y
written once, plus scale / bias, plus the fp32 statistics in training. Every output is checked against a float64
reference first (outputs poisoned with NaN).

    PYTHONPATH=. python benchmarks/run.py --only-norms            # this table alone
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time

import torch
from cuda_timing import interleaved_ms  # this script's folder is on sys.path

SHAPES = [(8192, 4096), (32768, 1024), (4096, 8192), (65536, 2048), (16384, 12288)]
EPS = 1e-5
CALLS, ROUNDS = 20, 7
TORCH_DT = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _graph(lib, handle, op, phase, dtype, rows, cols, modes):
    io = lib.data_type.BFLOAT16 if dtype == "bf16" else lib.data_type.HALF
    fp32 = lib.data_type.FLOAT
    g = lib.pygraph(io_data_type=io, intermediate_data_type=fp32, compute_data_type=fp32, handle=handle)
    X = g.tensor(dim=[rows, cols, 1, 1], stride=[cols, 1, cols, cols], data_type=io)
    W = g.tensor(dim=[1, cols, 1, 1], stride=[cols, 1, cols, cols], data_type=io)
    B = g.tensor(dim=[1, cols, 1, 1], stride=[cols, 1, cols, cols], data_type=io) if op == "layernorm" else None
    E = g.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=fp32, is_pass_by_value=True)
    ph = lib.norm_forward_phase.TRAINING if phase == "training" else lib.norm_forward_phase.INFERENCE
    f = g.layernorm if op == "layernorm" else g.rmsnorm
    outs = f(norm_forward_phase=ph, input=X, scale=W, bias=B, epsilon=E)
    Y = outs[0]
    Y.set_output(True).set_data_type(io)
    stats = [o for o in outs[1:] if o is not None]
    for s in stats:
        s.set_output(True).set_data_type(fp32)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(modes)
    g.check_support()
    return g, X, W, B, E, Y, stats


def _tensors(op, phase, dtype, rows, cols):
    dt = TORCH_DT[dtype]
    t = {"x": torch.randn(rows, cols, device="cuda", dtype=dt), "w": torch.randn(cols, device="cuda", dtype=dt),
         "b": torch.randn(cols, device="cuda", dtype=dt) if op == "layernorm" else None,
         "y": torch.empty(rows, cols, device="cuda", dtype=dt), "eps": torch.full((1, 1, 1, 1), EPS)}
    n_stats = (0 if phase == "inference" else 1 if op == "rmsnorm" else 2)
    t["stats"] = [torch.empty(rows, 1, 1, 1, device="cuda", dtype=torch.float32) for _ in range(n_stats)]
    return t


def _pack(t, X, W, B, E, Y, stats):
    pack = {X: t["x"], W: t["w"], E: t["eps"], Y: t["y"]}
    if B is not None:
        pack[B] = t["b"]
    for s, buf in zip(stats, t["stats"]):
        pack[s] = buf
    return pack


def _reference(op, t):
    x = t["x"].double()
    mean = torch.zeros_like(x[:, :1]) if op == "rmsnorm" else x.mean(dim=1, keepdim=True)
    inv = 1 / torch.sqrt(((x - mean) ** 2).mean(dim=1, keepdim=True) + EPS)
    y = (x - mean) * inv * t["w"].double()
    return y + t["b"].double() if t["b"] is not None else y


def _timed(fns: dict) -> dict:
    """Median ms per call of each callable (CALLS back to back between events), rounds interleaved."""
    return interleaved_ms(torch, fns, ROUNDS, CALLS)


def _executor(g, pack):
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    return lambda: g.execute(pack, ws)


def _case(ctx, op, phase, dtype, rows, cols) -> dict:
    cudnn_py = ctx.LIBS["cudnn_py"]
    t = _tensors(op, phase, dtype, rows, cols)
    ref = _reference(op, t)
    nbytes = (2 * rows * cols + cols * (1 if op == "rmsnorm" else 2)) * t["x"].element_size() \
        + 4 * rows * len(t["stats"])
    row: dict = {"bytes": nbytes}
    fns, errs = {}, {}
    for name, lib in ctx.LIBS.items():
        A, FB = lib.heur_mode.A, lib.heur_mode.FALLBACK
        try:
            g, *ts = _graph(lib, ctx.HANDLES[name], op, phase, dtype, rows, cols, [A, FB])
            g.build_plans()
            label = "official" if name == "official" else "cudnn_py_default"
            fns[label] = (g, _executor(g, _pack(t, *ts)))
            if name == "cudnn_py":  # which candidate the default took: ours (by name) or cuDNN's
                row["cudnn_py_default_plan"] = str(getattr(g, "selected_engine", None) or g.plans[0].name)
        except Exception as e:  # a refusal is a row entry, not a crash of the table
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e)[:160]}"
    try:
        g, *ts = _graph(cudnn_py, ctx.HANDLES["cudnn_py"], op, phase, dtype, rows, cols,
                        [cudnn_py.heur_mode.OPENSOURCE])
        for i, plan in enumerate(g.plans):
            g2, *ts2 = _graph(cudnn_py, ctx.HANDLES["cudnn_py"], op, phase, dtype, rows, cols,
                              [cudnn_py.heur_mode.OPENSOURCE])
            g2.select_plan(i)
            g2.build_plans()
            fns[f"ours_e{plan.knobs['elems']}"] = (g2, _executor(g2, _pack(t, *ts2)))
    except Exception as e:
        row["ours_error"] = f"{type(e).__name__}: {str(e)[:160]}"
    run = {}
    for label, (_g, fn) in fns.items():
        t["y"].fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        y = t["y"].double()
        errs[label] = float("inf") if not bool(y.isfinite().all()) else ((y - ref).norm() / ref.norm()).item()
        run[label] = fn
    import torch.nn.functional as F

    x, w, b = t["x"], t["w"], t["b"]
    run["torch"] = ((lambda: F.rms_norm(x, (cols,), w, EPS)) if op == "rmsnorm"
                    else (lambda: F.layer_norm(x, (cols,), w, b, EPS)))
    yt = run["torch"]().double()
    errs["torch"] = ((yt - ref).norm() / ref.norm()).item()
    ms = _timed(run)
    for label, v in ms.items():
        row[f"{label}_gbps"] = nbytes / v / 1e6
        row[f"{label}_rel_err"] = errs[label]
    ours = [v for k, v in row.items() if k.startswith("ours_e") and k.endswith("_gbps")]
    if ours:
        row["ours_best_gbps"] = max(ours)
    return row


def _build_ms(make) -> float:
    t0 = time.perf_counter()
    g = make()
    g.build_plans()
    return (time.perf_counter() - t0) * 1e3


def build_times(ctx, op, dtype, rows=8192, cols=4096, repeats=5) -> dict:
    """First and warm build times of one graph (validate .. build_plans), ms."""
    from cudnn_py.engines.runtime import modules
    from cudnn_py.engines.runtime.store import STORE

    cudnn_py = ctx.LIBS["cudnn_py"]
    out: dict = {}
    for name, lib in ctx.LIBS.items():
        def make(lib=lib, name=name):
            return _graph(lib, ctx.HANDLES[name], op, "training", dtype, rows, cols,
                          [lib.heur_mode.A, lib.heur_mode.FALLBACK])[0]
        label = "official" if name == "official" else "cudnn_py_cudnn_plan"
        out[f"{label}_first_ms"] = _build_ms(make)
        out[f"{label}_warm_ms"] = statistics.median(_build_ms(make) for _ in range(repeats))

    def ours():
        return _graph(cudnn_py, ctx.HANDLES["cudnn_py"], op, "training", dtype, rows, cols,
                      [cudnn_py.heur_mode.OPENSOURCE])[0]
    saved = os.environ.get("CUDNN_PY_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cold:
        os.environ["CUDNN_PY_CACHE_DIR"] = os.path.join(cold, "cache")
        try:
            STORE.memory.clear()
            before = modules.COMPILES["count"]
            out["ours_cold_kernel_cache_ms"] = _build_ms(ours)
            out["ours_cold_compiles"] = modules.COMPILES["count"] - before
            disk = []
            for _ in range(repeats):
                STORE.memory.clear()
                disk.append(_build_ms(ours))
            out["ours_warm_disk_ms"] = statistics.median(disk)
            out["ours_warm_process_ms"] = statistics.median(_build_ms(ours) for _ in range(repeats))
            out["ours_warm_compiles"] = modules.COMPILES["count"] - before - out["ours_cold_compiles"]
        finally:
            if saved is None:
                os.environ.pop("CUDNN_PY_CACHE_DIR", None)
            else:
                os.environ["CUDNN_PY_CACHE_DIR"] = saved
    return out


def norm_table(results: dict, ctx, shapes=SHAPES) -> None:
    for op in ("layernorm", "rmsnorm"):
        for dtype in ("bf16", "fp16"):
            results[f"norm_build_{op}_{dtype}"] = build_times(ctx, op, dtype)
            print(f"build {op} {dtype}: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                         results[f"norm_build_{op}_{dtype}"].items()), flush=True)
            for phase in ("training", "inference"):
                for rows, cols in shapes:
                    row = _case(ctx, op, phase, dtype, rows, cols)
                    results[f"norm_{op}_{phase}_{dtype}_{rows}x{cols}"] = row
                    print(line(op, phase, dtype, rows, cols, row), flush=True)
                    torch.cuda.empty_cache()


def line(op, phase, dtype, rows, cols, row) -> str:
    cells = [f"{k[:-5]} {v:.0f}" for k, v in row.items() if k.endswith("_gbps")]
    bad = [f"{k[:-8]} err {v:.1e}" for k, v in row.items() if k.endswith("_rel_err") and not v < 2e-2]
    errors = [f"{k}: {v}" for k, v in row.items() if k.endswith("_error")]
    return f"{op:9} {phase:9} {dtype} {rows}x{cols}: " + ", ".join(cells + bad + errors)


def markdown_rows(results: dict) -> list[str]:
    """The table's markdown: one line per case, GB/s and ratios to torch and to the official."""
    out = ["", "### Norm forward (GB/s; ratios: cudnn_py default / torch, best of ours / torch, default / official)",
           "", "| op | phase | dtype | shape | official | torch | cudnn_py default | ours (each config) | "
           "default/torch | ours best/torch | default/official |", "|---|---|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for key, row in results.items():
        if not key.startswith("norm_") or key.startswith("norm_build_"):
            continue
        _, op, phase, dtype, shape = key.split("_")
        g = {k[:-5]: v for k, v in row.items() if k.endswith("_gbps")}
        ours = " / ".join(f"{k[5:]} {v:.0f}" for k, v in g.items() if k.startswith("ours_e"))

        def r(a, b, g=g):
            return f"{g[a] / g[b]:.2f}" if a in g and b in g else "-"
        out.append(f"| {op} | {phase} | {dtype} | {shape} | {g.get('official', 0):.0f} | {g.get('torch', 0):.0f} | "
                   f"{g.get('cudnn_py_default', 0):.0f} | {ours} | {r('cudnn_py_default', 'torch')} | "
                   f"{r('ours_best', 'torch')} | {r('cudnn_py_default', 'official')} |")
    out += ["", "### Norm forward build (ms, 8192x4096, training)", "",
            "| op | dtype | official first / warm | cudnn_py cuDNN plan first / warm | ours cold kernel cache | "
            "ours warm disk | ours warm process |", "|---|---|---:|---:|---:|---:|---:|"]
    for key, b in results.items():
        if key.startswith("norm_build_"):
            _, _, op, dtype = key.split("_")
            out.append(f"| {op} | {dtype} | {b['official_first_ms']:.1f} / {b['official_warm_ms']:.2f} | "
                       f"{b['cudnn_py_cudnn_plan_first_ms']:.1f} / {b['cudnn_py_cudnn_plan_warm_ms']:.2f} | "
                       f"{b['ours_cold_kernel_cache_ms']:.1f} ({b['ours_cold_compiles']} compiles) | "
                       f"{b['ours_warm_disk_ms']:.2f} | {b['ours_warm_process_ms']:.2f} |")
    return out
