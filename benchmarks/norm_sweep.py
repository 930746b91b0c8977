"""The layout space of cudnn_py's norm forward kernel, measured: which (threads per row, rows per CTA, elements per
thread, prefetch, cache hints, grid) is fastest per shape, beside torch, cuDNN's plan and a plain copy of the same
bytes (the ceiling a norm forward can reach: it reads X once and writes Y once).

This is the data behind ``cudnn_py/engines/norms/variants.py``'s choice and the placement table; it launches the
kernel directly (no graph execute), so host cost is out, and every candidate runs as a CUDA graph of REPS launches.

    python benchmarks/norm_sweep.py [--ops rms,ln] [--shapes 8192x4096,...] [--n 7] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from cuda_timing import per_call_ms  # this script's folder is on sys.path

sys.path.insert(0, ".")
import cudnn_py as cudnn
from cudnn_py.engines.base import EngineIdentity
from cudnn_py.engines.norms import engine as norm_engine
from cudnn_py.engines.norms import source, variants
from cudnn_py.engines.norms.match import match
from cudnn_py.engines.runtime import modules

SHAPES = [(8192, 4096), (32768, 1024), (4096, 8192), (65536, 2048), (16384, 12288)]
DT = cudnn.data_type
EPS = 1e-5
REPS = 10


def timed(fn, n):
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    cg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cg):
        for _ in range(REPS):
            fn()
    for _ in range(3):
        cg.replay()
    return statistics.median(per_call_ms(torch, cg.replay) / REPS for _ in range(n))


def graph(rows, n, rms):
    io = DT.BFLOAT16
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    X = g.tensor(dim=[rows, n, 1, 1], stride=[n, 1, n, n], data_type=io)
    W = g.tensor(dim=[1, n, 1, 1], stride=[n, 1, n, n], data_type=io)
    B = None if rms else g.tensor(dim=[1, n, 1, 1], stride=[n, 1, n, n], data_type=io)
    E = g.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT, is_pass_by_value=True)
    f = g.rmsnorm if rms else g.layernorm
    y = f(cudnn.norm_forward_phase.INFERENCE, X, W, B, E)[0]
    y.set_output(True).set_data_type(io)
    g.validate()
    return g, X, W, B, E, y


def candidates(n, vec, sms_cap):
    chunks = n // vec
    out = []
    for tpr in (32, 64, 128, 256, 512):
        iters = -(-chunks // tpr)
        if iters * vec > 48 or (iters * vec < 8 and tpr > 32):
            continue
        for rpc in (1, 2, 4, 8):
            if tpr * rpc > 512 or tpr * rpc < 64:
                continue
            for hints in (False, True):
                for pipe, grid in ((False, "full"), (False, "persist"), (True, "persist")):
                    out.append((variants.Variant(vec, tpr, rpc, iters, False, pipe, hints), grid))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="rms,ln")
    ap.add_argument("--shapes", default=",".join(f"{r}x{c}" for r, c in SHAPES))
    ap.add_argument("--n", type=int, default=7)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.zeros(1, device="cuda")
    target = modules.current_target()
    print(f"device: {torch.cuda.get_device_name()}, cuDNN {cudnn.backend_version()}, target {target}; GB/s, "
          f"median of {args.n} CUDA graphs of {REPS}", flush=True)
    results = []
    for op in args.ops.split(","):
        rms = op == "rms"
        for shape in args.shapes.split(","):
            rows, cols = map(int, shape.split("x"))
            results.append(sweep(rows, cols, rms, args.n, target))
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def sweep(rows, cols, rms, n, target):
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    b = None if rms else torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    nbytes = (2 * x.numel() + w.numel() * (1 if rms else 2)) * 2
    gbs = lambda ms: nbytes / ms / 1e6  # noqa: E731
    res = {"op": "rms" if rms else "ln", "rows": rows, "cols": cols}
    res["copy"] = gbs(timed(lambda: y.copy_(x), n))
    tf = (lambda: F.rms_norm(x, (cols,), w, EPS)) if rms else (lambda: F.layer_norm(x, (cols,), w, b, EPS))
    res["torch"] = gbs(timed(tf, n))
    g, X, W, B, E, Y = graph(rows, cols, rms)
    pack = {X: x, W: w, E: torch.full((1, 1, 1, 1), EPS), Y: y}
    if B is not None:
        pack[B] = b
    try:
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.build_plans()
        ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
        res["cudnn"] = gbs(timed(lambda: g.execute(pack, ws), n))
    except Exception as e:
        res["cudnn"] = f"err {type(e).__name__}"
    problem = match(g)
    vec = variants.vector_width(problem)
    default = variants.choose(cols, vec)
    ours = {}
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    buffers = {X.get_uid(): x, W.get_uid(): w, Y.get_uid(): y}
    if B is not None:
        buffers[B.get_uid()] = b
    for v, gridmode in candidates(cols, vec, target.sms) + [(default, "default")]:
        try:
            c = modules.compiled(source.SOURCE, "norm_fwd.cu", variants.options(problem, v), target.cc)
            m = modules.module(c, source.KERNEL_NAME)
            groups = -(-rows // v.rpc)
            occ = m.occupancy(v.threads)
            grid = groups if gridmode == "full" else max(1, min(groups, target.sms * occ))
            plan = norm_engine.NormPlan(EngineIdentity(0, "sweep"), m, problem, v, grid)
            prm = plan._params
            prm.eps = EPS
            for field, o in (("x", problem.x), ("w", problem.w), ("b", problem.b), ("y", problem.y)):
                setattr(prm, field, buffers[o.uid].data_ptr() if o is not None else None)
            prm.eps_ptr = None

            def run(m=m, grid=grid, v=v, prm=prm):
                modules.launch(m, grid, v.threads, stream(), prm)
            y.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            ref = tf()
            err = ((y.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            label = f"{v.label()}_{gridmode}_occ{occ}"
            ours[label] = (gbs(timed(run, n)), err)
        except Exception as e:
            ours[f"{v.label()}_{gridmode}"] = (0.0, f"{type(e).__name__}: {str(e)[:100]}")
    best = sorted(ours.items(), key=lambda kv: -kv[1][0])
    res["ours"] = {k: v[0] for k, v in ours.items()}
    res["errors"] = {k: v[1] for k, v in ours.items() if not isinstance(v[1], float) or not v[1] < 0.02}
    dflt = [v for k, v in ours.items() if "_default_" in k]
    print(f"{res['op']:3} {rows}x{cols}: copy {res['copy']:.0f} torch {res['torch']:.0f} cudnn {res['cudnn'] if isinstance(res['cudnn'], str) else round(res['cudnn'])} "
          f"default {dflt[0][0]:.0f} | best: " + ", ".join(f"{k} {v[0]:.0f}" for k, v in best[:6]), flush=True)
    if res["errors"]:
        print(f"    errors: {res['errors']}", flush=True)
    return res


if __name__ == "__main__":
    main()
