"""GB/s of layernorm / rmsnorm forward (inference) on the GPU: cuDNN's plan through cudnn_py, torch
(F.layer_norm / F.rms_norm) and each plan config of cudnn_py's runtime-compiled norm engine (heur_mode.OPENSOURCE),
for the shapes of issue 38, bf16 and fp16, in one process.

Each candidate is captured into a CUDA graph of REPS back-to-back calls (host launch cost out of the numbers; a
candidate that cannot be captured is timed eagerly and marked ``*``), replayed WARMUP times, then timed with CUDA
events over N replays; the median is reported. Bytes = X read + Y written + scale (+ bias) read, each once.

    python benchmarks/norm_engines.py [--quick] [--n 15]
"""
from __future__ import annotations

import argparse
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, ".")
import cudnn_py as cudnn

SHAPES = [(8192, 4096), (32768, 1024), (4096, 8192), (65536, 2048), (16384, 12288)]
DT = cudnn.data_type
TORCH = {DT.BFLOAT16: torch.bfloat16, DT.HALF: torch.float16}
EPS = 1e-5
REPS = 10


def graph(rows, n, io, rms):
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    X = g.tensor(dim=[rows, n, 1, 1], stride=[n, 1, n, n], data_type=io)
    W = g.tensor(dim=[1, n, 1, 1], stride=[n, 1, n, n], data_type=io)
    B = None if rms else g.tensor(dim=[1, n, 1, 1], stride=[n, 1, n, n], data_type=io)
    E = g.tensor(dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT, is_pass_by_value=True)
    f = g.rmsnorm if rms else g.layernorm
    y = f(cudnn.norm_forward_phase.INFERENCE, X, W, B, E)[0]
    y.set_output(True).set_data_type(io)
    return g, X, W, B, E, y


def timed(fn, n):
    """Median ms per call of fn over n measurements (graph of REPS calls, or eager when capture fails)."""
    fn()
    torch.cuda.synchronize()
    captured = True
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        cg = torch.cuda.CUDAGraph()
        with torch.cuda.graph(cg):
            for _ in range(REPS):
                fn()
        run = cg.replay
    except Exception:
        captured = False
        torch.cuda.synchronize()

        def run():
            for _ in range(REPS):
                fn()
    for _ in range(3):
        run()
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / REPS)
    return statistics.median(times), captured


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="rmsnorm and layernorm, bf16 and fp16, fewer samples")
    ap.add_argument("--n", type=int, default=0)
    args = ap.parse_args()
    n = args.n or (7 if args.quick else 25)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, cudnn_py engines vs cuDNN "
          f"{cudnn.backend_version()}; GB/s, median of {n}; * = not captured (eager)")
    for io in (DT.BFLOAT16, DT.HALF):
        for rms in (True, False):
            for rows, cols in SHAPES:
                res = measure(rows, cols, io, rms, n)
                print(f"{'rms' if rms else 'ln '} {io.name[:4]:4} {rows:6}x{cols:<6} "
                      + "  ".join(f"{k}={v.strip()}" for k, v in res.items()), flush=True)
                torch.cuda.empty_cache()


def measure(rows, cols, io, rms, n):
    dt = TORCH[io]
    x = torch.randn(rows, cols, device="cuda", dtype=dt)
    w = torch.randn(cols, device="cuda", dtype=dt)
    b = None if rms else torch.randn(cols, device="cuda", dtype=dt)
    y = torch.empty_like(x)
    nbytes = (2 * x.numel() + w.numel() * (1 if rms else 2)) * x.element_size()
    res = {}
    try:
        tf = (lambda: F.rms_norm(x, (cols,), w, EPS)) if rms else (lambda: F.layer_norm(x, (cols,), w, b, EPS))
        ms, cap = timed(tf, n)
        res["torch"] = f"{nbytes / ms / 1e6:7.0f}{'' if cap else '*'}"
    except Exception as e:
        res["torch"] = f"err:{type(e).__name__}"
    for label, modes in (("cudnn", [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]),
                         ("ours", [cudnn.heur_mode.OPENSOURCE])):
        try:
            g, X, W, B, E, Y = graph(rows, cols, io, rms)
            g.validate()
            g.create_execution_plans(modes)
            for i in [i for i, p in enumerate(g.plans) if p.is_backend == (label == "cudnn")]:
                g.select_plan(i)
                g.build_plans()
                ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
                pack = {X: x, W: w, E: torch.full((1, 1, 1, 1), EPS), Y: y}
                if B is not None:
                    pack[B] = b
                ms, cap = timed(lambda pack=pack, ws=ws, g=g: g.execute(pack, ws), n)
                name = "cudnn" if label == "cudnn" else f"e{g.plans[i].knobs['elems']}({g._compiled[i].variant.label()})"
                res[name] = f"{nbytes / ms / 1e6:7.0f}{'' if cap else '*'}"
        except Exception as e:
            res[label] = f"err:{type(e).__name__}:{str(e)[:80]}"
    return res

if __name__ == "__main__":
    main()
