"""Convolution fuzz on the GPU: seeded cases, reproducible by case id, run in worker processes so that one case's
CUDA error cannot take the others (or the run) down.

    python -m fuzz.conv_fuzz --cases 500 --workers 8 --out conv_fuzz.jsonl      # the whole run, a summary at the end
    python -m fuzz.conv_fuzz --case 123 --show                                  # one case again, verbosely
    python -m fuzz.conv_fuzz --deviceless --cases 40                            # CPU: build + validate() only

Each case is one convolution drawn from ``random.Random(seed * 1_000_003 + case)``: fprop, dgrad or wgrad; 2-D
(70 %) or 3-D; N, C, K, spatial sizes and R/S(/T) kernels; channel counts aligned (multiples of 8) or not;
groups of 1, grouped (2 or 4) or depthwise; symmetric (``padding``) or asymmetric (``pre_padding`` /
``post_padding``) padding, stride 1-3, dilation 1-2; CROSS_CORRELATION or CONVOLUTION; NHWC or NCHW strides;
fp16 / bf16 / fp32 io with fp32 compute, and int8 fprop (INT32 compute, fp32 output).

Every output and the workspace are poisoned (NaN / 0xFF bytes) before the run; the result is compared with the
float64 reference engine (``cudnn_py.engines.reference``) on the same inputs, relative error within the io type's
tolerance. Each case ends **ok**, **refused** (a cudnnGraphNotSupportedError or ValueError raised before anything
ran: its reason is recorded), **wrong** (the run finished but the result is off, or not every element was
written), **error** (any other exception) or **died** (the worker died or the CUDA context broke in that case). A
worker writes a "start" line before each case, so a death is pinned to its case; the parent starts a fresh worker.

``--deviceless`` runs the cases in this process without torch or a GPU: the graph is built and ``validate()``d
(cuDNN 9.28 finalizes conv operation graphs without a device; load the test-only libcuda stand-in first on a
machine without a driver, as tests/test_conv_fuzz.py does). It prints ``CASE <id>`` before and ``RESULT <id>
<direction> <outcome> <reason>`` after each case.
"""
from __future__ import annotations

import random
import sys
from typing import Any

from fuzz import harness

TOL = {"FLOAT": 1e-2, "HALF": 1e-2, "BFLOAT16": 4e-2, "INT8": 1e-6}  # fp32 io may run as TF32; int8 is exact


# ---- case generation (no torch needed: cases are plain dicts, reproducible from (seed, id)) ------------------------
def make_case(seed: int, case: int) -> dict:
    r = random.Random(seed * 1_000_003 + case)
    direction = r.choice(["fprop", "dgrad", "wgrad"])
    spatial = 2 if r.random() < 0.7 else 3
    dtype = r.choice(["HALF", "HALF", "BFLOAT16", "FLOAT"])
    if direction == "fprop" and r.random() < 0.08:
        dtype = "INT8"
    aligned = r.random() < 0.6
    grouping = r.choices(["none", "grouped", "depthwise"], [0.7, 0.15, 0.15])[0]
    groups = {"none": 1, "grouped": r.choice([2, 4]), "depthwise": 0}[grouping]
    per_group = r.choice([8, 16, 32]) if aligned else r.randint(1, 24)
    if grouping == "depthwise":
        c = groups = r.choice([8, 16, 32]) if aligned else r.randint(2, 24)
        k = c * r.choice([1, 1, 2])
    else:
        c = per_group * groups
        k = (r.choice([8, 16, 32, 64]) if aligned else r.randint(1, 40)) * groups
    while True:  # draw geometry until the output is non-empty
        size = [r.randint(1, 20 if spatial == 2 else 9) for _ in range(spatial)]
        kernel = [r.choice([1, 1, 3, 3, 5] if spatial == 2 else [1, 3, 3]) for _ in range(spatial)]
        stride = [r.choice([1, 1, 2, 3]) for _ in range(spatial)]
        dilation = [r.choice([1, 1, 2]) for _ in range(spatial)]
        symmetric = r.random() < 0.7
        pre = [r.randint(0, kr // 2 * d) for kr, d in zip(kernel, dilation)]
        post = list(pre) if symmetric else [r.randint(0, kr // 2 * d) for kr, d in zip(kernel, dilation)]
        out = output_size(size, kernel, pre, post, stride, dilation)
        if all(o >= 1 for o in out):
            break
    return {"id": case, "seed": seed, "direction": direction, "dtype": dtype, "n": r.randint(1, 4), "c": c, "k": k,
            "groups": groups, "size": size, "kernel": kernel, "pre": pre, "post": post, "stride": stride,
            "dilation": dilation, "padding_form": "padding" if symmetric else "pre_post",
            "mode": "CONVOLUTION" if r.random() < 0.2 else "CROSS_CORRELATION",
            "layout": "nhwc" if dtype == "INT8" or r.random() < 0.7 else "nchw", "aligned": aligned}


def output_size(size: list, kernel: list, pre: list, post: list, stride: list, dilation: list) -> list[int]:
    return [1 + (x + a + b - d * (r - 1) - 1) // s for x, r, a, b, s, d in zip(size, kernel, pre, post, stride,
                                                                             dilation)]


def dims_of(spec: dict) -> dict[str, list[int]]:
    """The dims of x, w and y (dy) of a case."""
    out = output_size(spec["size"], spec["kernel"], spec["pre"], spec["post"], spec["stride"], spec["dilation"])
    return {"x": [spec["n"], spec["c"]] + spec["size"], "w": [spec["k"], spec["c"] // spec["groups"]] + spec["kernel"],
            "y": [spec["n"], spec["k"]] + out}


def strides_of(dims: list[int], layout: str) -> list[int]:
    from cudnn_py.ir.layout import nhwc_strides, row_major_strides

    return nhwc_strides(dims) if layout == "nhwc" else row_major_strides(dims)


ROLES = {"fprop": ("x", "w"), "dgrad": ("y", "w"), "wgrad": ("x", "y")}
OUTPUT = {"fprop": "y", "dgrad": "x", "wgrad": "w"}


def build_graph(cudnn: Any, spec: dict, io: str | None = None, backends: list | None = None) -> tuple:
    """The case's graph (io type ``io``, default the case's); returns (graph, input tensors by role, output)."""
    from cudnn_py.enums import convolution_mode

    dt = cudnn.data_type
    io = io or spec["dtype"]
    compute = dt.INT32 if io == "INT8" else (dt.DOUBLE if io == "DOUBLE" else dt.FLOAT)
    kwargs: dict[str, Any] = {"backends": backends} if backends else {}
    g = cudnn.pygraph(io_data_type=dt[io], intermediate_data_type=dt.DOUBLE if io == "DOUBLE" else dt.FLOAT,
                      compute_data_type=compute, **kwargs)
    dims = dims_of(spec)
    ins = {role: g.tensor(dims[role], strides_of(dims[role], spec["layout"]), dt[io], name=role)
           for role in ROLES[spec["direction"]]}
    kw: dict[str, Any] = {"stride": spec["stride"], "dilation": spec["dilation"],
                          "convolution_mode": convolution_mode[spec["mode"]]}
    if spec["padding_form"] == "padding":
        kw["padding"] = spec["pre"]
    else:
        kw.update(pre_padding=spec["pre"], post_padding=spec["post"])
    out_role = OUTPUT[spec["direction"]]
    if spec["direction"] == "fprop":
        out = g.conv_fprop(ins["x"], ins["w"], **kw)
    elif spec["direction"] == "dgrad":
        out = g.conv_dgrad(ins["y"], ins["w"], **kw, out_dims=dims["x"])
    else:
        out = g.conv_wgrad(ins["x"], ins["y"], **kw, out_dims=dims["w"])
    out.set_output(True).set_stride(strides_of(dims[out_role], spec["layout"]))
    if io == "INT8":
        out.set_data_type(dt.FLOAT)
    return g, ins, out


# ---- running one case ---------------------------------------------------------------------------------------------
def reason(e: Exception) -> str:
    return harness.reason(e, ("No valid engine configs", "No execution plans support", "needs cuDNN", "NOT_SUPPORTED",
                                 "filtered out", "do not match", "do not divide"))


def run_case_deviceless(spec: dict) -> dict:
    import cudnn_py as cudnn

    g, _, out = build_graph(cudnn, spec)
    try:
        g.validate()
    except (cudnn.cudnnGraphNotSupportedError, ValueError) as e:
        return {"outcome": "refused", "reason": reason(e)}
    return {"outcome": "validated", "out_dims": list(out.get_dim())}


def run_case(spec: dict) -> dict:
    import numpy as np
    import torch

    import cudnn_py as cudnn
    from cudnn_py.engines.reference import ReferenceEngine

    gen = torch.Generator(device="cuda").manual_seed(spec["seed"] * 7919 + spec["id"])
    tdt = {"HALF": torch.float16, "BFLOAT16": torch.bfloat16, "FLOAT": torch.float32, "INT8": torch.int8}
    g, ins, out = build_graph(cudnn, spec)
    try:
        g.validate()
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    except (cudnn.cudnnGraphNotSupportedError, ValueError) as e:
        return {"outcome": "refused", "reason": reason(e)}
    values = {}
    for role, t in ins.items():
        dims, strides = tuple(t.get_dim()), tuple(t.get_stride())
        numel = int(np.prod(dims))
        if spec["dtype"] == "INT8":
            flat = torch.randint(-8, 8, (numel,), generator=gen, device="cuda", dtype=torch.int8)
        else:
            flat = torch.randn(numel, generator=gen, device="cuda").to(tdt[spec["dtype"]])
        values[role] = flat.as_strided(dims, strides)
    out_dims, out_strides = tuple(out.get_dim()), tuple(out.get_stride())
    out_type = torch.float32 if spec["dtype"] == "INT8" else tdt[spec["dtype"]]
    y = torch.full((int(np.prod(out_dims)),), float("nan"), device="cuda", dtype=out_type).as_strided(
        out_dims, out_strides)
    ws = torch.full((max(1, g.get_workspace_size()),), 255, device="cuda", dtype=torch.uint8)  # poisoned
    g.execute({**{ins[k]: v for k, v in values.items()}, out: y}, ws)
    torch.cuda.synchronize()
    plan = g.get_plan_name_at_index(0) if g.get_execution_plan_count() else "?"
    # the float64 reference: the same case as a DOUBLE graph on the reference engine, the same input values
    rg, rins, rout = build_graph(cudnn, spec, io="DOUBLE", backends=[ReferenceEngine()])
    rg.validate_ir()
    ref = np.zeros(out_dims)
    rg.execute({**{rins[k]: v.double().cpu().numpy() for k, v in values.items()}, rout: ref})
    got = y.double().cpu().numpy()
    if np.isnan(got).any():
        return {"outcome": "wrong", "reason": f"{int(np.isnan(got).sum())} element(s) not written (NaN)", "plan": plan}
    err = float(np.linalg.norm(got - ref) / (np.linalg.norm(ref) or 1.0))
    tol = TOL[spec["dtype"]]
    if not err <= tol:
        return {"outcome": "wrong", "reason": f"relative error {err:.3g} > {tol}", "plan": plan}
    return {"outcome": "ok", "rel_err": err, "plan": plan}


# ---- the parent's summary and the command line (fuzz/harness.py runs the workers) -----------------------------------
def summary(seed: int, out_path: str) -> str:
    def describe(r: dict) -> str:
        spec = make_case(seed, r["case"])
        return f"{spec['direction']} {spec['dtype']} {spec['layout']} groups {spec['groups']}"

    return harness.summary("conv fuzz", seed, out_path, "direction", ("fprop", "dgrad", "wgrad"), describe)


def deviceless(seed: int, n: int) -> int:
    return harness.deviceless(make_case, run_case_deviceless, "direction", seed, n)


def main(argv: list[str] | None = None) -> int:
    return harness.main("fuzz.conv_fuzz", argv, __doc__, "conv_fuzz.jsonl", make_case, run_case, run_case_deviceless,
                        "direction", summary, None)


if __name__ == "__main__":
    sys.exit(main())
