"""Cold start (issue #29): the first build of a graph in a fresh process, and import-to-first-execute, with
cudnn_py's disk cache cold and warm, against the official frontend (``import cudnn``; left out when it is absent)
and against cudnn_py with the cache off (``CUDNN_PY_CACHE=0``: what a fresh process paid before the cache).

Cases (both libraries get the same calls): SDPA forward and backward at benchmarks/attention.py's main case (bf16,
b=2 h=16 s=4096 d=128, causal), a conv fprop + bias + relu (benchmarks/convnorm.py's conv shape, NHWC bf16), a
layernorm backward (convnorm's 8192 x 4096) and a bf16 matmul (4096^3).

Every cell is its own fresh process (a subprocess with a timeout; one that fails or hangs is reported in the table
and the others go on), run in rounds: official, cudnn_py without the cache, cudnn_py cold (a new empty
``CUDNN_PY_CACHE_DIR``), cudnn_py warm (the directory the cold process just filled). The driver's JIT cache is
off (``CUDA_CACHE_DISABLE=1``) so that no process inherits another's compilation. Each process measures, after
``import torch`` and a CUDA context (the same for both libraries):

* ``first build``: ``validate() .. build_plans()`` of its one graph (heuristics [A, FALLBACK]);
* ``import to first execute``: from just before ``import cudnn_py`` / ``import cudnn`` until the first execute's
  results are on the device (synchronized).

Figures are medians over ``--processes`` rounds (default 2). Ratios: warm / official, cold / official, and
cold / cudnn_py without the cache (the issue's goals: warm first build <= 0.1x the official's; cold no slower
than without the cache). 5 cases x 4 cells x 2 rounds = 40 processes of 2-4 s each: about 2 min on an H200
(``--processes 3``: about 3 min).

    python benchmarks/cold_start.py [--processes 2] [--cases sdpa_fwd,matmul] [--json FILE] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T_START = time.perf_counter()
ROOT = Path(__file__).resolve().parent.parent
CASES = ("sdpa_fwd", "sdpa_bwd", "conv_bias_relu", "layernorm_bwd", "matmul")
CELLS = ("official", "nocache", "cold", "warm")
CHILD_TIMEOUT = 120  # s per process: a cold SDPA backward builds in about a second, torch imports in a few


# ---- the child: one case, one library, one fresh process -----------------------------------------------------------
def _sdpa(lib, handle, torch, backward):
    from benchmarks.attention import CASES as ATTENTION
    from benchmarks.attention import backward_graph, forward_graph, shapes

    case = ATTENTION["causal"]
    t = {n: torch.randn(*d, device="cuda", dtype=torch.bfloat16) for n, d in shapes(case).items()}
    t["stats"] = torch.randn(*shapes(case)["stats"], device="cuda", dtype=torch.float32)
    t.update({"dQ": torch.empty_like(t["q"]), "dK": torch.empty_like(t["k"]), "dV": torch.empty_like(t["v"])})
    layouts = {n: (list(x.shape), list(x.stride())) for n, x in t.items()}
    g, names = (backward_graph if backward else forward_graph)(lib, handle, case, layouts)
    return g, {tensor: t[n] for tensor, n in names.items()}


def _conv_bias_relu(lib, handle, torch):
    from benchmarks.convnorm import CONV_KW, HW, C, K, N

    x = torch.randn(N, C, HW, HW, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(K, C, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    bias = torch.randn(1, K, 1, 1, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    y = torch.empty(N, K, HW, HW, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    BF16, FP32 = lib.data_type.BFLOAT16, lib.data_type.FLOAT
    g = lib.pygraph(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32, handle=handle)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(bias)
    Y = g.relu(g.add(g.conv_fprop(X, W, **CONV_KW, name="conv"), B))
    Y.set_output(True).set_data_type(BF16).set_dim(list(y.shape)).set_stride(list(y.stride()))
    return g, {X: x, W: w, B: bias, Y: y}


def _layernorm_bwd(lib, handle, torch):
    from benchmarks.convnorm import EPS, HIDDEN, ROWS, norm_graph

    x = torch.randn(ROWS, HIDDEN, 1, 1, device="cuda", dtype=torch.bfloat16)
    s = torch.randn(1, HIDDEN, 1, 1, device="cuda", dtype=torch.float32)
    xd = x.double()
    mean = xd.mean(dim=1, keepdim=True)
    inv = 1 / torch.sqrt(((xd - mean) ** 2).mean(dim=1, keepdim=True) + EPS)
    t = {"x": x, "s": s, "b": torch.randn_like(s), "dy": torch.randn_like(x), "mean": mean.float(),
         "inv": inv.float(), "dx": torch.empty_like(x), "ds": torch.empty_like(s), "db": torch.empty_like(s)}
    return norm_graph(lib, handle, "layernorm_bwd", t)


def _matmul(lib, handle, torch):
    n = 4096
    a = torch.randn(1, n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1, n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(1, n, n, device="cuda", dtype=torch.bfloat16)
    BF16, FP32 = lib.data_type.BFLOAT16, lib.data_type.FLOAT
    g = lib.pygraph(io_data_type=BF16, intermediate_data_type=FP32, compute_data_type=FP32, handle=handle)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C_ = g.matmul(A, B, name="mm")
    C_.set_output(True).set_data_type(BF16)
    return g, {A: a, B: b, C_: c}


def child(lib_name: str, case: str) -> None:
    import torch

    torch.cuda.set_device(0)
    torch.empty(1, device="cuda")  # the CUDA context: the same cost for both libraries, not counted
    torch.cuda.synchronize()
    from benchmarks.build_stages import stage_times  # (imports no library: not in the figures)

    t_import = time.perf_counter()
    if lib_name == "cudnn_py":
        import cudnn_py as lib
    else:
        import cudnn as lib
    handle = lib.create_handle()
    lib.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    make = {"sdpa_fwd": lambda: _sdpa(lib, handle, torch, False), "sdpa_bwd": lambda: _sdpa(lib, handle, torch, True),
            "conv_bias_relu": lambda: _conv_bias_relu(lib, handle, torch),
            "layernorm_bwd": lambda: _layernorm_bwd(lib, handle, torch), "matmul": lambda: _matmul(lib, handle, torch)}
    g, pack = make[case]()
    stages = stage_times(lib, g)
    build_ms = sum(stages.values())
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    g.execute(pack, ws, handle=handle)
    torch.cuda.synchronize()
    first_execute_ms = (time.perf_counter() - t_import) * 1e3
    out = {"build_ms": build_ms, "import_to_first_execute_ms": first_execute_ms, "stages_ms": stages}
    if lib_name == "cudnn_py":
        session = g.session
        out["plan_source"] = session.plan().source
        out["disk"] = list(session.disk.lines)
    print("RESULT " + json.dumps(out), flush=True)


# ---- the parent ----------------------------------------------------------------------------------------------------
def _official_available() -> bool:
    r = subprocess.run([sys.executable, "-c", "import cudnn; cudnn.pygraph"], capture_output=True, timeout=60)
    return r.returncode == 0


def _run(cell: str, case: str, cache_dir: str, timeout: float = CHILD_TIMEOUT) -> dict:
    env = {**os.environ, "CUDA_CACHE_DISABLE": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    env.pop("CUDNN_PY_TRACE", None)
    env["CUDNN_PY_CACHE_DIR"] = cache_dir
    env["CUDNN_PY_CACHE"] = "0" if cell == "nocache" else "1"
    lib = "official" if cell == "official" else "cudnn_py"
    try:
        r = subprocess.run([sys.executable, __file__, "--child", lib, "--case", case], capture_output=True,
                           text=True, env=env, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    if r.returncode != 0 or line is None:
        tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:])[-400:]
        return {"error": f"exit {r.returncode}: {tail}"}
    return json.loads(line[len("RESULT "):])


def _median(runs: list[dict], metric: str) -> float | None:
    values = [r[metric] for r in runs if metric in r]
    return statistics.median(values) if values else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.3f}x" if a is not None and b else "-"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=2, help="rounds: fresh processes per cell")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {', '.join(CASES)}")
    ap.add_argument("--json", help="also write the runs and medians to this file")
    ap.add_argument("--out", help="a directory for cold_start.md (and cold_start.json)")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds for the whole run: no process starts after it, each gets what is left (default: none)")
    ap.add_argument("--child-timeout", type=float, default=CHILD_TIMEOUT, help="seconds per process")
    ap.add_argument("--child", choices=("official", "cudnn_py"), help=argparse.SUPPRESS)
    ap.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.case)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")
    cells = CELLS if _official_available() else CELLS[1:]
    runs: dict[str, dict[str, list[dict]]] = {c: {cell: [] for cell in cells} for c in cases}
    scratch = tempfile.mkdtemp(prefix="cudnn_py-cold-start-")
    try:
        for i in range(args.processes):
            for case in cases:
                cache_dir = os.path.join(scratch, f"{case}-{i}")  # new and empty for this round's cold process
                for cell in cells:
                    left = args.budget - (time.perf_counter() - T_START) if args.budget else args.child_timeout
                    if left < 5:
                        print(f"# {case} {cell} round {i}: not run (the --budget is spent)", flush=True)
                        continue
                    t0 = time.perf_counter()
                    r = _run(cell, case, cache_dir, min(left, args.child_timeout))
                    runs[case][cell].append(r)
                    # one line per process as it ends, so that a run cut short still shows what it measured
                    what = r["error"] if "error" in r else (f"build {_ms(r.get('build_ms'))} ms, import to first "
                                                            f"execute {_ms(r.get('import_to_first_execute_ms'))} ms, "
                                                            f"plan {r.get('plan_source', '-')}; "
                                                            f"disk: {' / '.join(r.get('disk', [])) or '-'}")
                    print(f"# {case} {cell} round {i}: {what} ({time.perf_counter() - t0:.1f} s)", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    rows = ["| case | metric | official ms | cudnn_py no cache ms | cold ms | warm ms | warm / official | "
            "cold / official | cold / no cache |", "|---|---|---|---|---|---|---|---|---|"]
    doc: dict = {"processes": args.processes, "official": "official" in cells, "cases": {}}
    for case in cases:
        doc["cases"][case] = {"runs": runs[case]}
        for metric, label in (("build_ms", "first build"), ("import_to_first_execute_ms", "import to first execute")):
            m = {cell: _median(runs[case][cell], metric) for cell in cells}
            doc["cases"][case][metric] = m
            rows.append(f"| {case} | {label} | {_ms(m.get('official'))} | {_ms(m['nocache'])} | {_ms(m['cold'])} | "
                        f"{_ms(m['warm'])} | {_ratio(m['warm'], m.get('official'))} | "
                        f"{_ratio(m['cold'], m.get('official'))} | {_ratio(m['cold'], m['nocache'])} |")
        warm_sources = {r.get("plan_source") for r in runs[case]["warm"] if "error" not in r}
        doc["cases"][case]["warm_plan_sources"] = sorted(s for s in warm_sources if s)
    notes = []
    for case in cases:
        # a hit answers the heuristics query from the entry; its plan is rebuilt from the entry's JSON when that
        # carries compiled kernels, else finalized from its config (plans/disk_planning.py): the disk lines say
        missed = [r.get("disk") for r in runs[case]["warm"]
                  if "error" not in r and not any(line.startswith("hit (") for line in r.get("disk", []))]
        errors = sum("error" in r for cell in cells for r in runs[case][cell])
        if missed:
            notes.append(f"- {case}: {len(missed)} warm process(es) did not hit the disk cache ({missed[0]}): "
                         f"the warm figure is not a hit's")
        if errors:
            notes.append(f"- {case}: {errors} process(es) failed (stderr above, and the JSON's runs)")
    head = (f"# Cold start: first build and import-to-first-execute in fresh processes ({args.processes} per cell, "
            f"medians; CUDA_CACHE_DISABLE=1{'' if 'official' in cells else '; the official module is absent'})")
    text = "\n".join([head, "", *rows, *([""] + notes if notes else []),
                      "", f"(whole run: {time.perf_counter() - T_START:.0f} s)"])
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cold_start.md").write_text(text + "\n")
        (out / "cold_start.json").write_text(json.dumps(doc, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
