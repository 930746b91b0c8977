"""Graph fuzz on the GPU: seeded cases, reproducible by case id, run in worker processes so that one case's CUDA
error cannot take the others (or the run) down.

    python -m fuzz.graph_fuzz --cases 2000 --workers 8 --out fuzz.jsonl      # the whole run, a summary at the end
    python -m fuzz.graph_fuzz --case 1234 --show                               # one case again, verbosely

Each case is a small graph drawn from ``random.Random(seed * 1_000_003 + case)``:

* **matmul** (fp32 / fp16 / bf16; int8 and fp16 through a widening cast): batch none / equal / broadcast, M, N, K
  aligned or not, A and B packed, column-major or with padded row strides, an epilogue of none / bias / relu / gelu
  / bias + relu;
* **pointwise** chains of 1-4 ops (unary, binary with broadcast operands and python scalars), rank 1-4;
* **reduction** (ADD / MAX / MIN / AMAX) of a channels-last 4-D tensor, per channel, per pixel or all.

Every output and the workspace are poisoned (NaN / 0xFF bytes) before the run; results are compared with the
float64 reference engine (``cudnn_py.engines.reference``), relative error within the data type's tolerance. Each
case ends as **ok**, **refused** (a cudnnGraphNotSupportedError or ValueError raised before anything ran: the reason
is recorded), **wrong** (the run finished but the result is off, or not every element was written) or **died** (the
worker process died or the CUDA context broke in that case). A worker writes a "start" line before each case, so a
death is pinned to its case; the parent starts a fresh worker after it.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from typing import Any

from fuzz import harness

TOL = {"FLOAT": 1e-2, "HALF": 1e-2, "BFLOAT16": 4e-2}  # fp32 io may run as TF32 on tensor cores


# ---- case generation (no torch needed: cases are plain dicts, reproducible from (seed, id)) --------------------------
def make_case(seed: int, case: int) -> dict:
    r = random.Random(seed * 1_000_003 + case)
    kind = r.choices(["matmul", "pointwise", "reduction"], [0.6, 0.25, 0.15])[0]
    return {"id": case, "seed": seed, "kind": kind, **{"matmul": _matmul, "pointwise": _pointwise,
                                                       "reduction": _reduction}[kind](r)}


def _dim(r: random.Random, aligned: bool) -> int:
    return r.choice([16, 32, 64, 96, 128]) if aligned else r.randint(1, 100)


def _matmul(r: random.Random) -> dict:
    aligned = r.random() < 0.6
    batch = r.choice([[], [1], [3], [4]])
    b_batch = batch if not batch or r.random() < 0.7 else [1]  # broadcast B over A's batch
    dt = r.choice(["HALF", "BFLOAT16", "FLOAT"])
    cast = r.random() < 0.15
    src = r.choice(["INT8", "HALF"]) if cast else dt
    if cast and src == "HALF":
        dt = "FLOAT"
    if cast and src == "INT8":
        dt = r.choice(["HALF", "FLOAT"])
    return {"M": _dim(r, aligned), "N": _dim(r, aligned), "K": _dim(r, aligned), "batch": batch, "b_batch": b_batch,
            "dtype": dt, "cast_from": src if cast else None, "cast_port": r.choice(["A", "B"]),
            "a_layout": r.choice(["packed", "packed", "colmajor", "padded"]),
            "b_layout": r.choice(["packed", "packed", "colmajor", "padded"]),
            "epilogue": r.choice(["none", "bias", "relu", "gelu", "bias_relu"])}


_UNARY = ["relu", "tanh", "sigmoid", "abs", "neg", "exp_small", "sqrt_abs"]
_BINARY = ["add", "mul", "sub", "max", "min"]


def _pointwise(r: random.Random) -> dict:
    rank = r.randint(1, 4)
    shape = [r.choice([1, 2, 3, 4, 8, 16, 33, 64]) for _ in range(rank)]
    ops: list[dict[str, Any]] = []
    for _ in range(r.randint(1, 4)):
        if r.random() < 0.5:
            ops.append({"op": r.choice(_UNARY)})
        else:
            other = r.choice(["tensor", "broadcast", "scalar"])
            bshape = [d if r.random() < 0.5 else 1 for d in shape] if other == "broadcast" else shape
            ops.append({"op": r.choice(_BINARY), "other": other, "shape": bshape, "scalar": round(r.uniform(-2, 2), 3)})
    return {"shape": shape, "dtype": r.choice(["HALF", "BFLOAT16", "FLOAT"]), "ops": ops}


def _reduction(r: random.Random) -> dict:
    return {"shape": [r.choice([1, 2, 4]), r.choice([8, 16, 32, 64]), r.choice([1, 4, 8]), r.choice([1, 4, 8])],
            "mode": r.choice(["ADD", "MAX", "MIN", "AMAX"]), "axes": r.choice(["channel", "pixel", "all"]),
            "dtype": r.choice(["HALF", "FLOAT"])}


# ---- running one case (needs torch and a GPU) ------------------------------------------------------------------------
def run_case(spec: dict) -> dict:
    import numpy as np
    import torch

    import cudnn_py as cudnn
    from cudnn_py.engines.reference import ReferenceEngine

    torch.manual_seed(spec["seed"] * 7919 + spec["id"])
    build, make_inputs = {"matmul": _build_matmul, "pointwise": _build_pointwise,
                          "reduction": _build_reduction}[spec["kind"]](spec)
    tdt = {"HALF": torch.float16, "BFLOAT16": torch.bfloat16, "FLOAT": torch.float32, "INT8": torch.int8}
    inputs = make_inputs(torch, tdt)
    g, ins, out = build(cudnn)
    try:
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    except (cudnn.cudnnGraphNotSupportedError, ValueError) as e:
        return {"outcome": "refused", "reason": _reason(e)}
    y = torch.full(tuple(out.get_dim()), float("nan"), device="cuda", dtype=tdt[out.get_data_type().name])
    y = torch.as_strided(y, tuple(out.get_dim()), tuple(out.get_stride())) if out.get_stride() else y
    ws = torch.full((max(1, g.get_workspace_size()),), 255, device="cuda", dtype=torch.uint8)  # poisoned
    g.execute({**dict(zip(ins, inputs)), out: y}, ws)
    torch.cuda.synchronize()
    # the float64 reference, from the same graph definition
    rg, rins, rout = build(cudnn)
    rg.register_backend(ReferenceEngine())
    rg.validate()
    ref = np.zeros(tuple(rout.get_dim()))
    rg.execute({**{t: x.cpu().double().numpy() for t, x in zip(rins, inputs)}, rout: ref})
    got = y.double().cpu().numpy()
    if np.isnan(got).any():
        return {"outcome": "wrong", "reason": f"{int(np.isnan(got).sum())} element(s) not written (NaN)"}
    denom = np.linalg.norm(ref) or 1.0
    err = float(np.linalg.norm(got - ref) / denom)
    tol = TOL[out.get_data_type().name]
    plan = g.get_plan_name_at_index(0) if g.get_execution_plan_count() else "?"
    if not err <= tol:
        return {"outcome": "wrong", "reason": f"relative error {err:.3g} > {tol}", "plan": plan}
    return {"outcome": "ok", "rel_err": err, "plan": plan}


def _reason(e: Exception) -> str:
    return harness.reason(e, ("No valid engine configs", "No execution plans support", "needs cuDNN", "does not match",
                                 "do not broadcast", "filtered out"))


def _layout(shape: list, kind: str) -> tuple:
    """(dims, strides, storage numel) of a [..., r, c] operand in the given layout."""
    *b, rows, cols = shape
    if kind == "colmajor":
        inner = [1, rows]  # column-major matrices, packed batches
        mat = rows * cols
    elif kind == "padded":
        inner = [cols + 3, 1]
        mat = rows * (cols + 3)
    else:
        inner = [cols, 1]
        mat = rows * cols
    strides: list[int] = []
    acc = mat
    for d in reversed(b):
        strides.insert(0, acc)
        acc *= d
    return shape, strides + inner, acc


def _strided(torch: Any, shape: list, strides: list, numel: int, dtype: Any) -> Any:
    if dtype == torch.int8:
        base = torch.randint(-8, 8, (numel,), device="cuda", dtype=torch.int8)
    else:
        base = (torch.randn(numel, device="cuda") * 0.5).to(dtype)
    return torch.as_strided(base, shape, strides)


def _build_matmul(s: dict):
    a_shape = s["batch"] + [s["M"], s["K"]]
    b_shape = s["b_batch"] + [s["K"], s["N"]]
    a_dims, a_str, a_n = _layout(a_shape, s["a_layout"])
    b_dims, b_str, b_n = _layout(b_shape, s["b_layout"])
    if not s["batch"]:
        a_dims, a_str, b_dims, b_str = [1] + a_dims, [a_n] + a_str, [1] + b_dims, [b_n] + b_str
    io = s["dtype"]
    a_type = s["cast_from"] if s["cast_from"] and s["cast_port"] == "A" else io
    b_type = s["cast_from"] if s["cast_from"] and s["cast_port"] == "B" else io
    bias_shape = [1] * (len(a_dims) - 1) + [s["N"]]

    def build(cudnn: Any):
        dt = cudnn.data_type
        g = cudnn.pygraph(io_data_type=dt[io], intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
        A = g.tensor(a_dims, a_str, dt[a_type], name="A")
        B = g.tensor(b_dims, b_str, dt[b_type], name="B")
        ins = [A, B]
        a, b = A, B
        if s["cast_from"]:
            if s["cast_port"] == "A":
                a = g.identity(A).set_data_type(dt[io])
            else:
                b = g.identity(B).set_data_type(dt[io])
        y = g.matmul(a, b, name="mm")
        if s["epilogue"] in ("bias", "bias_relu"):
            bias = g.tensor(bias_shape, None, dt[io], name="bias")
            ins.append(bias)
            y = g.add(y, bias)
        if s["epilogue"] in ("relu", "bias_relu"):
            y = g.relu(y)
        if s["epilogue"] == "gelu":
            y = g.gelu(y)
        y.set_output(True).set_data_type(dt[io])
        return g, ins, y

    def inputs(torch: Any, tdt: dict) -> list:
        xs = [_strided(torch, a_dims, a_str, a_n, tdt[a_type]), _strided(torch, b_dims, b_str, b_n, tdt[b_type])]
        if s["epilogue"] in ("bias", "bias_relu"):
            xs.append((torch.randn(bias_shape, device="cuda") * 0.5).to(tdt[io]))
        return xs

    return build, inputs


def _build_pointwise(s: dict):
    def build(cudnn: Any):
        dt = cudnn.data_type
        g = cudnn.pygraph(io_data_type=dt[s["dtype"]], intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
        x = g.tensor(s["shape"], None, dt[s["dtype"]], name="x")
        ins, y = [x], x
        for i, op in enumerate(s["ops"]):
            name = op["op"]
            if name == "exp_small":
                y = g.exp(g.mul(y, 0.25))
            elif name == "sqrt_abs":
                y = g.sqrt(g.abs(y))
            elif name in _UNARY:
                y = getattr(g, name)(y)
            else:
                if op["other"] == "scalar":
                    other: Any = float(op["scalar"])
                else:
                    other = g.tensor(op["shape"], None, dt[s["dtype"]], name=f"in{i}")
                    ins.append(other)
                y = getattr(g, name)(y, other)
        if y is x:
            y = g.identity(x)
        y.set_output(True).set_data_type(dt[s["dtype"]])
        return g, ins, y

    def inputs(torch: Any, tdt: dict) -> list:
        xs = [torch.randn(s["shape"], device="cuda").to(tdt[s["dtype"]])]
        for op in s["ops"]:
            if op.get("other") in ("tensor", "broadcast"):
                xs.append(torch.randn(op["shape"], device="cuda").to(tdt[s["dtype"]]))
        return xs

    return build, inputs


def _build_reduction(s: dict):
    n, c, h, w = s["shape"]
    axes = {"channel": (0, 2, 3), "pixel": (1,), "all": (0, 1, 2, 3)}[s["axes"]]
    ydim = [1 if i in axes else d for i, d in enumerate(s["shape"])]
    x_str = [c * h * w, 1, w * c, c]  # channels-last

    def y_strides() -> list:
        yn, yc, yh, yw = ydim
        return [yc * yh * yw, 1, yw * yc, yc]

    def build(cudnn: Any):
        dt = cudnn.data_type
        g = cudnn.pygraph(io_data_type=dt[s["dtype"]], intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)
        x = g.tensor(s["shape"], x_str, dt[s["dtype"]], name="x")
        y = g.reduction(x, getattr(cudnn.reduction_mode, s["mode"]))
        y.set_output(True).set_dim(ydim).set_stride(y_strides()).set_data_type(dt.FLOAT)
        return g, [x], y

    def inputs(torch: Any, tdt: dict) -> list:
        base = torch.randn(n, h, w, c, device="cuda").to(tdt[s["dtype"]])
        return [base.permute(0, 3, 1, 2)]  # NCHW dims over NHWC memory

    return build, inputs


# ---- workers and the parent ---------------------------------------------------------------------------------------
def worker(seed: int, cases: list[int]) -> None:
    harness.worker(make_case, run_case, "kind", seed, cases)


def run_all(seed: int, n: int, workers: int, out_path: str | None, timeout: float,
            case_timeout: float = harness.CASE_TIMEOUT_S) -> Counter:
    results = harness.run_all("fuzz.graph_fuzz", make_case, "kind", seed, n, workers, out_path, timeout,
                              case_timeout)
    return Counter((r["kind"], r["outcome"]) for r in results.values())


def summary(seed: int, out_path: str) -> str:
    return harness.summary("graph fuzz", seed, out_path, "kind", ("matmul", "pointwise", "reduction"),
                           lambda r: r["kind"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    harness.add_run_args(ap, out="fuzz.jsonl")
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.seed, [int(x) for x in args.ids.split(",") if x])
        return 0
    if args.case is not None:
        spec = make_case(args.seed, args.case)
        if args.show:
            print(json.dumps(spec, indent=1))
        print(json.dumps(run_case(spec)))
        return 0
    run_all(args.seed, args.cases, args.workers, args.out, args.timeout, args.case_timeout)
    print(summary(args.seed, args.out))
    return 1 if harness.failures(args.out) else 0


if __name__ == "__main__":
    sys.exit(main())
