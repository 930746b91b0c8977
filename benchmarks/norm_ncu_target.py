"""One launch each of the rmsnorm / layernorm forward kernels to compare under Nsight Compute: torch's, cuDNN's
plan, a plain copy of the same bytes, and cudnn_py's variants named on the command line (``variants.Variant``
labels as ``norm_sweep.py`` prints them, e.g. ``v8_t256_r1_i2_pipe_hints``), inside an NVTX range ``prof`` so
that only these are profiled:

    ncu --nvtx --nvtx-include "prof/" --section SpeedOfLight --section Occupancy --section LaunchStats \\
        python benchmarks/norm_ncu_target.py --shape 8192x4096 --op rms v8_t256_r1_i2 v8_t256_r1_i2_pipe_hints
"""
from __future__ import annotations

import argparse
import re
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, ".")
import cudnn_py as cudnn
from benchmarks.norm_sweep import EPS, graph
from cudnn_py.engines.base import EngineIdentity
from cudnn_py.engines.norms import engine as norm_engine
from cudnn_py.engines.norms import source, variants
from cudnn_py.engines.norms.match import match
from cudnn_py.engines.runtime import modules

LABEL = re.compile(r"v(\d+)_t(\d+)_r(\d+)_i(\d+)((?:_pipe)?)((?:_hints)?)(?:_(full|persist))?$")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8192x4096")
    ap.add_argument("--op", default="rms")
    ap.add_argument("labels", nargs="*")
    args = ap.parse_args()
    rows, cols = map(int, args.shape.split("x"))
    rms = args.op == "rms"
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    b = None if rms else torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    g, X, W, B, E, Y = graph(rows, cols, rms)
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.build_plans()
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    pack = {X: x, W: w, E: torch.full((1, 1, 1, 1), EPS), Y: y}
    if B is not None:
        pack[B] = b
    target = modules.current_target()
    problem = match(g)
    launches = []
    for label in args.labels:
        m_ = LABEL.match(label)
        if not m_:
            raise SystemExit(f"not a variant label: {label}")
        vec, tpr, rpc, iters = map(int, m_.groups()[:4])
        v = variants.Variant(vec, tpr, rpc, iters, False, bool(m_.group(5)), bool(m_.group(6)))
        c = modules.compiled(source.SOURCE, "norm_fwd.cu", variants.options(problem, v), target.cc)
        m = modules.module(c, source.KERNEL_NAME)
        groups = -(-rows // v.rpc)
        grid = groups if m_.group(7) == "full" else min(groups, target.sms * m.occupancy(v.threads))
        plan = norm_engine.NormPlan(EngineIdentity(0, "sweep"), m, problem, v, grid)
        prm = plan._params
        prm.eps, prm.eps_ptr = EPS, None
        prm.x, prm.w, prm.y = x.data_ptr(), w.data_ptr(), y.data_ptr()
        prm.b = b.data_ptr() if b is not None else None
        launches.append((label, m, grid, v.threads, prm, plan))
    torch.cuda.synchronize()
    tf = (lambda: F.rms_norm(x, (cols,), w, EPS)) if rms else (lambda: F.layer_norm(x, (cols,), w, b, EPS))
    for fn in (lambda: y.copy_(x), tf, lambda: g.execute(pack, ws)):
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream().cuda_stream
    torch.cuda.nvtx.range_push("prof")
    y.copy_(x)
    tf()
    g.execute(pack, ws)
    for label, m, grid, threads, prm, _plan in launches:
        modules.launch(m, grid, threads, stream, prm)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print("profiled: copy, torch, cudnn, " + ", ".join(label for label, *_ in launches))


if __name__ == "__main__":
    main()
