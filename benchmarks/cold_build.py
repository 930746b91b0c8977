"""Cold SDPA builds: each library in fresh processes, the attention cases of benchmarks/attention.py built in order,
each case's first build timed (validate .. build_plans: cuDNN compiles its kernels then, hundreds of ms) and then a
second one (kernels compiled, caches warm). This is the build the official frontend's 444 ms figure
(the project's baseline of the official frontend) measured: a process's first graph of its kind.

Fresh processes because the two libraries share one libcudnn and its compiled kernels: in one process, whichever
built a case first would pay for both. The driver's JIT cache is disabled (``CUDA_CACHE_DISABLE=1``) so that no
process inherits another's compilation from disk. The processes alternate (official, cudnn_py, cudnn_py, official);
each case's figure is the median over a library's processes.

    python3 benchmarks/cold_build.py --out DIR [--processes 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(lib_name: str) -> None:
    import torch

    if lib_name == "cudnn_py":
        import cudnn_py as lib
    else:
        import cudnn as lib
    from benchmarks.attention import BACKWARD_CASES, CASES, backward_graph, forward_graph, shapes
    from benchmarks.build_stages import stage_times

    torch.cuda.set_device(0)
    torch.empty(1, device="cuda")
    handle = lib.create_handle()
    lib.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    out = {}
    todo = [(n, False) for n in CASES] + [(n, True) for n in BACKWARD_CASES]
    for name, backward in todo:
        case = CASES[name]
        t = {n: torch.empty(*d, device="cuda", dtype=torch.bfloat16) for n, d in shapes(case).items()}
        layouts = {n: (list(x.shape), list(x.stride())) for n, x in t.items()}
        make = backward_graph if backward else forward_graph
        times = []
        for _ in range(2):
            g = make(lib, handle, case, layouts)[0]
            times.append(sum(stage_times(lib, g).values()))
        out[f"sdpa_{'bwd' if backward else 'fwd'}_{name}"] = {"first_ms": times[0], "second_ms": times[1]}
    print("RESULT " + json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--processes", type=int, default=3, help="fresh processes per library")
    ap.add_argument("--child", choices=("official", "cudnn_py"))
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    env = {**os.environ, "CUDA_CACHE_DISABLE": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    order = []
    for i in range(args.processes):
        order += ["official", "cudnn_py"] if i % 2 == 0 else ["cudnn_py", "official"]
    runs: dict[str, list[dict]] = {"official": [], "cudnn_py": []}
    for name in order:
        r = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True, env=env,
                           timeout=280)
        line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
        if r.returncode != 0 or line is None:
            raise SystemExit(f"{name} child failed (rc {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
        runs[name].append(json.loads(line[len("RESULT "):]))
    cases = list(runs["official"][0])
    rows = ["| case | build | official ms | cudnn_py ms | cudnn_py / official |", "|---|---|---|---|---|"]
    doc = {}
    for c in cases:
        for which in ("first_ms", "second_ms"):
            o = statistics.median(r[c][which] for r in runs["official"])
            p = statistics.median(r[c][which] for r in runs["cudnn_py"])
            doc[f"{c}_{which}"] = {"official": o, "cudnn_py": p, "ratio": p / o,
                                   "all": {n: [r[c][which] for r in runs[n]] for n in runs}}
            label = "first in a fresh process (kernels compiled)" if which == "first_ms" else "second (same key)"
            rows.append(f"| {c} | {label} | {o:.1f} | {p:.1f} | {p / o:.2f}x |")
    text = "\n".join(rows)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cold_build.md").write_text(
        f"# Cold SDPA builds, {args.processes} fresh processes per library (CUDA_CACHE_DISABLE=1)\n\n{text}\n")
    (out / "cold_build.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
