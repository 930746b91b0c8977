"""Attention fuzz on the GPU: seeded sdpa / sdpa_backward cases, reproducible by case id, each in a worker
process (``fuzz/harness.py``) so that a case that breaks the CUDA context cannot take the run down.

    python -m fuzz.sdpa_fuzz --cases 300 --workers 8 --out sdpa_fuzz.jsonl     # the whole run, a summary at the end
    python -m fuzz.sdpa_fuzz --case 17 --show                                  # one case again, verbosely
    python -m fuzz.sdpa_fuzz --deviceless --cases 40                           # CPU: build + validate() only

Each case is drawn from ``random.Random(seed * 1_000_003 + case)``: forward (70 %) or backward; fp16 or bf16;
batch 1-3; q heads 1-8 with kv heads dividing them (GQA / MQA); s_q and s_kv 1-300, mostly not multiples of 64
(decode, s_q = 1, in the forward); head dim 64 or 128 (sometimes 32 or 256: the engines may refuse); BHSD or BSHD
strides; the masks and options users combine: causal, bottom-right causal, a sliding window, padding through
seq_len_q / seq_len_kv, a bias (with dBias in the backward), alibi, a sink token, a dropout mask, attn_scale as a
float or a tensor; implementation AUTO, COMPOSITE or UNIFIED.

Inputs are fresh normal values; every output and the workspace are poisoned (NaN / 0xFF) before the run. The
result is compared with the float64 reference engine (``cudnn_py.engines.reference``: attention from its
definition) on the same rounded inputs: O (and dQ, dK, dV, dBias) within the io type's tolerance, Stats within
2e-3; rows past a batch's seq_len_q are padding and not compared. Outcomes as in the conv fuzz: **ok**, **refused**
(a cudnnGraphNotSupportedError / ValueError before anything ran, with its reason), **wrong**, **error**, **died**.

Every case that runs is then built twice more: the third build's plan is rebuilt by the plan cache
(``plans/plan_cache.py``) from the JSON of the second's, executed on the same inputs and checked the same way; a
forward must also equal the first plan's output bit for bit (``plan_cache`` in the record says whether it was).
"""
from __future__ import annotations

import math
import random
import sys
from typing import Any

from fuzz import harness

TOL = {"HALF": 1e-2, "BFLOAT16": 2e-2}
STATS_TOL = 2e-3


# ---- case generation (plain dicts, reproducible from (seed, id)) --------------------------------------------------
def make_case(seed: int, case: int) -> dict:
    r = random.Random(seed * 1_000_003 + case)
    direction = "forward" if r.random() < 0.7 else "backward"
    h_q = r.choice([1, 2, 4, 4, 6, 8])
    h_k = r.choice([x for x in range(1, h_q + 1) if h_q % x == 0])
    s_q = 1 if direction == "forward" and r.random() < 0.12 else r.choice([r.randint(1, 300), 64, 128])
    s_kv = r.choice([r.randint(1, 300), 128, 256])
    spec = {"id": case, "seed": seed, "direction": direction, "dtype": r.choice(["HALF", "BFLOAT16"]),
            "b": r.randint(1, 3), "h_q": h_q, "h_k": h_k, "s_q": s_q, "s_kv": s_kv,
            "d": r.choice([64, 64, 128, 128, 32, 256]), "layout": r.choice(["bhsd", "bshd"]),
            "implementation": r.choice(["AUTO", "AUTO", "AUTO", "COMPOSITE", "COMPOSITE", "UNIFIED"])
            if direction == "forward" else None,
            "scale_tensor": r.random() < 0.2}
    mask = r.choices(["none", "causal", "bottom_right", "window"], [0.36, 0.44, 0.12, 0.08])[0]
    spec["causal"] = mask in ("causal", "window")
    spec["bottom_right"] = mask == "bottom_right"
    spec["window"] = r.randint(1, 64) if mask == "window" else None
    spec["padding"] = r.random() < 0.3
    spec["bias"] = r.random() < 0.2 and not spec["bottom_right"]
    spec["alibi"] = spec["causal"] and not spec["window"] and r.random() < 0.15
    spec["sink"] = r.random() < 0.1
    spec["drop_mask"] = r.random() < 0.08 and not spec["bottom_right"]
    if spec["bottom_right"] and s_q > s_kv and not spec["padding"]:
        spec["s_q"], spec["s_kv"] = s_kv, s_q  # the rule: s_q <= s_kv without padding
    return spec


def _strides(dims: list[int], layout: str) -> list[int]:
    b, h, s, d = dims
    return [h * s * d, d, h * d, 1] if layout == "bshd" else [h * s * d, s * d, d, 1]


# ---- graphs ---------------------------------------------------------------------------------------------------------
def build_graph(cudnn: Any, spec: dict, backends: list | None = None) -> tuple[Any, dict, dict]:
    """The case's graph; returns (graph, inputs by role, outputs by role). Roles: q k v (o dO stats) bias sq skv
    sink dmask dscale (dscale_inv) scale | O Stats (dQ dK dV dBias dSink)."""
    dt = cudnn.data_type
    io = dt[spec["dtype"]]
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT,
                      **({"backends": backends} if backends else {}))
    b, h_q, h_k, s_q, s_kv, d = (spec[k] for k in ("b", "h_q", "h_k", "s_q", "s_kv", "d"))
    shapes = {"q": [b, h_q, s_q, d], "k": [b, h_k, s_kv, d], "v": [b, h_k, s_kv, d]}
    ins = {role: g.tensor(dims, _strides(dims, spec["layout"]), io, name=role) for role, dims in shapes.items()}
    kw: dict[str, Any] = {}
    if spec["scale_tensor"]:
        ins["scale"] = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], dt.FLOAT, name="scale")
        ins["scale"].set_is_pass_by_value(True)
        kw["attn_scale"] = ins["scale"]
    else:
        kw["attn_scale"] = 1 / math.sqrt(d)
    if spec["bias"]:
        ins["bias"] = g.tensor([1, h_q, s_q, s_kv], name="bias")
        kw["bias"] = ins["bias"]
    if spec["padding"]:
        ins["sq"], ins["skv"] = (g.tensor([b, 1, 1, 1], [1, 1, 1, 1], dt.INT32, name=n) for n in ("sq", "skv"))
        kw.update(use_padding_mask=True, seq_len_q=ins["sq"], seq_len_kv=ins["skv"])
    if spec["causal"]:
        kw["use_causal_mask"] = True
    if spec["bottom_right"]:
        kw["use_causal_mask_bottom_right"] = True
    if spec["window"]:
        kw["sliding_window_length"] = spec["window"]
    if spec["alibi"]:
        kw["use_alibi_mask"] = True
    if spec["sink"]:
        ins["sink"] = g.tensor([1, h_q, 1, 1], data_type=dt.FLOAT, name="sink")
        kw["sink_token"] = ins["sink"]
    if spec["drop_mask"]:
        ins["dmask"] = g.tensor([b, h_q, s_q, s_kv], name="dmask")
        ins["dscale"] = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], dt.FLOAT, name="dscale").set_is_pass_by_value(True)
        kw["dropout"] = (ins["dmask"], ins["dscale"])
    outs: dict[str, Any] = {}
    if spec["direction"] == "forward":
        impl = cudnn.attention_implementation[spec["implementation"]]
        o, stats = g.sdpa(ins["q"], ins["k"], ins["v"], generate_stats=True, implementation=impl, **kw)
        outs["O"], outs["Stats"] = o, stats
        o.set_output(True).set_dim(shapes["q"]).set_stride(_strides(shapes["q"], spec["layout"]))
        stats.set_output(True).set_data_type(dt.FLOAT)
        return g, ins, outs
    ins["o"] = g.tensor(shapes["q"], _strides(shapes["q"], spec["layout"]), io, name="o")
    ins["dO"] = g.tensor(shapes["q"], _strides(shapes["q"], spec["layout"]), io, name="dO")
    ins["stats"] = g.tensor([b, h_q, s_q, 1], data_type=dt.FLOAT, name="stats")
    if spec["bias"]:
        outs["dBias"] = kw["dBias"] = g.tensor([1, h_q, s_q, s_kv], name="dBias")
    if spec["sink"]:
        outs["dSink"] = kw["dSink_token"] = g.tensor([1, h_q, 1, 1], data_type=dt.FLOAT, name="dSink")
    if spec["drop_mask"]:  # the backward's dropout is (mask, scale, scale_inv)
        ins["dscale_inv"] = g.tensor([1, 1, 1, 1], [1, 1, 1, 1], dt.FLOAT, name="dscale_inv")
        ins["dscale_inv"].set_is_pass_by_value(True)
        kw["dropout"] = (ins["dmask"], ins["dscale"], ins["dscale_inv"])
    d_q, d_k, d_v = g.sdpa_backward(ins["q"], ins["k"], ins["v"], ins["o"], ins["dO"], ins["stats"], **kw)
    for role, t, like in (("dQ", d_q, "q"), ("dK", d_k, "k"), ("dV", d_v, "v")):
        outs[role] = t.set_dim(shapes[like]).set_stride(_strides(shapes[like], spec["layout"]))
    for t in outs.values():
        t.set_output(True)
    return g, ins, outs


# ---- running one case ---------------------------------------------------------------------------------------------
def reason(e: Exception) -> str:
    return harness.reason(e, ("No valid engine configs", "No execution plans support", "needs cuDNN", "NOT_SUPPORTED",
                              "implementation=UNIFIED is not supported", "needs", "must", "excludes"))


def run_case_deviceless(spec: dict) -> dict:
    import cudnn_py as cudnn

    g, _, _ = build_graph(cudnn, spec)
    try:
        g.validate()
    except (cudnn.cudnnGraphNotSupportedError, ValueError) as e:
        return {"outcome": "refused", "reason": reason(e)}
    return {"outcome": "validated"}


def _inputs(torch: Any, spec: dict, ins: dict, gen: Any) -> dict:
    """Fresh values for every input role (device tensors; pass-by-value scalars on the host)."""
    tdt = {"HALF": torch.float16, "BFLOAT16": torch.bfloat16}[spec["dtype"]]
    values: dict[str, Any] = {}
    for role, t in ins.items():
        dims, strides = tuple(t.get_dim()), tuple(t.get_stride())
        span = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
        if role in ("sq", "skv"):
            top = spec["s_q"] if role == "sq" else spec["s_kv"]
            x = torch.randint(1, top + 1, (spec["b"],), generator=gen, device="cuda", dtype=torch.int32)
            x[0] = top  # one full-length sequence
            values[role] = x.reshape(dims)
        elif role == "scale":
            values[role] = torch.full(dims, 1 / math.sqrt(spec["d"]) * 1.25, dtype=torch.float32)
        elif role in ("dscale", "dscale_inv"):
            values[role] = torch.full(dims, 1 / 0.8 if role == "dscale" else 0.8, dtype=torch.float32)
        elif role == "dmask":
            values[role] = (torch.rand(dims, generator=gen, device="cuda") > 0.2).to(tdt)
        elif role in ("sink", "stats"):
            values[role] = torch.randn(dims, generator=gen, device="cuda", dtype=torch.float32)
        else:
            flat = torch.randn(span, generator=gen, device="cuda").to(tdt)
            values[role] = flat.as_strided(dims, strides)
    if spec["padding"] and spec["bottom_right"]:  # every valid query keeps a key (else the row is fully masked):
        # seq_len_kv >= seq_len_q, within s_kv (a length past its dim is undefined, and the reference refuses it)
        values["sq"] = torch.clamp(values["sq"], max=spec["s_kv"])
        values["skv"] = torch.maximum(values["skv"], values["sq"])
    return values


def _reference(cudnn: Any, spec: dict, values: dict, roles: list[str]) -> dict:
    """The case on the float64 reference engine, from the same (rounded) input values."""
    import numpy as np

    from cudnn_py.engines.reference import ReferenceEngine

    rg, rins, routs = build_graph(cudnn, spec, backends=[ReferenceEngine()])
    rg.validate_ir()
    bufs = {role: np.full(tuple(routs[role].get_dim()), np.nan) for role in roles}
    rg.execute({**{rins[k]: v.double().cpu().numpy() for k, v in values.items()},
                **{routs[k]: b for k, b in bufs.items()}})
    return bufs


def run_case(spec: dict) -> dict:
    import numpy as np
    import torch

    import cudnn_py as cudnn
    from cudnn_py.plans import plan_cache

    gen = torch.Generator(device="cuda").manual_seed(spec["seed"] * 7919 + spec["id"])
    g, ins, outs = build_graph(cudnn, spec)
    try:
        g.validate()
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    except (cudnn.cudnnGraphNotSupportedError, ValueError) as e:
        return {"outcome": "refused", "reason": reason(e)}
    values = _inputs(torch, spec, ins, gen)
    if spec["direction"] == "backward":  # O and Stats of the forward, from the reference, in the graph's types
        fwd = dict(spec, direction="forward", implementation="COMPOSITE")
        ref_fwd = _reference(cudnn, fwd, {k: v for k, v in values.items() if k not in ("o", "dO", "stats",
                                                                                    "dscale_inv")}, ["O", "Stats"])
        o = torch.from_numpy(ref_fwd["O"]).to("cuda", values["q"].dtype)
        values["o"] = torch.empty_strided(o.shape, tuple(ins["o"].get_stride()), dtype=o.dtype, device="cuda")
        values["o"].copy_(torch.nan_to_num(o))
        values["stats"] = torch.from_numpy(np.nan_to_num(ref_fwd["Stats"], neginf=0.0)).to("cuda", torch.float32)
    got = _execute(torch, g, ins, outs, values)
    plan = g.get_plan_name_at_index(0) if g.get_execution_plan_count() else "?"
    ref = _reference(cudnn, spec, values, list(outs))
    valid = None
    if spec["padding"]:
        lens = values["sq"].reshape(-1).cpu().numpy()
        valid = np.arange(spec["s_q"]).reshape(1, 1, -1, 1) < lens.reshape(-1, 1, 1, 1)
    wrong, worst, detail = _check(spec, got, ref, valid)
    if wrong is not None:
        return {"outcome": "wrong", "reason": wrong, "plan": plan, "errors": detail}
    # the plan cache (plans/plan_cache.py): the same graph built twice more, the third plan rebuilt from the JSON of
    # the second's; it must compute what the first computed (a forward bit for bit; a backward, whose atomics do
    # not repeat bitwise, within the same tolerance of the reference)
    for _ in range(2):
        g2, ins2, outs2 = build_graph(cudnn, spec)
        g2.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    source = g2.session.plan().source if g2.selected_engine is None else "python engine"
    cached = "rebuilt" if source == plan_cache.REBUILT else f"not rebuilt ({source})"
    if source == plan_cache.REBUILT:
        got2 = _execute(torch, g2, ins2, outs2, values)
        wrong, _, _ = _check(spec, got2, ref, valid)
        if wrong is None and spec["direction"] == "forward":
            differ = [r for r in got if not torch.equal(torch.nan_to_num(got[r]), torch.nan_to_num(got2[r]))]
            if differ:
                wrong = f"{', '.join(differ)}: the rebuilt plan's output differs from the finalized plan's"
        if wrong is not None:
            return {"outcome": "wrong", "reason": f"plan cache: {wrong}", "plan": plan, "errors": detail}
    return {"outcome": "ok", "worst_of_tolerance": round(worst, 3), "errors": detail, "plan": plan,
            "plan_cache": cached}


def _execute(torch: Any, g: Any, ins: dict, outs: dict, values: dict) -> dict:
    """Execute with NaN-poisoned outputs and a 0xFF-poisoned workspace; the outputs."""
    tdt = values["q"].dtype
    got = {}
    for role, t in outs.items():
        dims, strides = tuple(t.get_dim()), tuple(t.get_stride())
        span = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
        dtype = torch.float32 if role in ("Stats", "dSink") else tdt
        got[role] = torch.full((span,), float("nan"), device="cuda", dtype=dtype).as_strided(dims, strides)
    ws = torch.full((max(1, g.get_workspace_size()),), 255, device="cuda", dtype=torch.uint8)  # poisoned
    g.execute({**{ins[k]: v for k, v in values.items()}, **{outs[k]: v for k, v in got.items()}}, ws)
    torch.cuda.synchronize()
    return got


def _check(spec: dict, got: dict, ref: dict, valid: Any) -> tuple[str | None, float, list[str]]:
    """(what is wrong or None, the worst error as a fraction of its tolerance, per-output errors)."""
    import numpy as np

    worst = 0.0
    detail: list[str] = []
    for role, out in got.items():
        x, want = out.double().cpu().numpy(), ref[role]
        rows = None
        if valid is not None and role in ("O", "Stats", "dQ"):  # padded query rows are undefined
            rows = np.broadcast_to(valid, x.shape)
        elif valid is not None and role == "dBias":
            rows = np.broadcast_to(valid[:1], x.shape)
        if rows is not None:
            x, want = np.where(rows, x, 0.0), np.where(rows, want, 0.0)
        if role == "Stats":  # a fully masked row's statistic is -inf in the definition
            finite = np.isfinite(want)
            x, want = np.where(finite, x, 0.0), np.where(finite, want, 0.0)
        if not np.isfinite(x).all():
            return (f"{role}: {int((~np.isfinite(x)).sum())} element(s) not finite (NaN poison left, or NaN / inf "
                    "written)", worst, detail)
        err = float(np.linalg.norm(x - want) / (np.linalg.norm(want) or 1.0))
        tol = STATS_TOL if role == "Stats" else TOL[spec["dtype"]] * (2 if spec["direction"] == "backward" else 1)
        detail.append(f"{role} {err:.2e}")
        worst = max(worst, err / tol)
        if not err <= tol:
            return f"{role}: relative error {err:.3g} > {tol}", worst, detail
    return None, worst, detail


# ---- the parent's summary and the command line (fuzz/harness.py runs the workers) -----------------------------------
def describe(spec: dict) -> str:
    opts = [k for k in ("causal", "bottom_right", "padding", "bias", "alibi", "sink", "drop_mask", "scale_tensor")
            if spec[k]] + ([f"window {spec['window']}"] if spec["window"] else [])
    return (f"{spec['direction']} {spec['implementation'] or ''} {spec['dtype']} {spec['layout']} b{spec['b']} "
            f"h{spec['h_q']}/{spec['h_k']} s{spec['s_q']}x{spec['s_kv']} d{spec['d']} {' '.join(opts)}")


def summary(seed: int, out_path: str) -> str:
    return harness.summary("sdpa fuzz", seed, out_path, "direction", ("forward", "backward"),
                           lambda r: describe(make_case(seed, r["case"])))


def deviceless(seed: int, n: int) -> int:
    return harness.deviceless(make_case, run_case_deviceless, "direction", seed, n)


def main(argv: list[str] | None = None) -> int:
    return harness.main("fuzz.sdpa_fuzz", argv, __doc__, "sdpa_fuzz.jsonl", make_case, run_case, run_case_deviceless,
                        "direction", summary, describe)


if __name__ == "__main__":
    sys.exit(main())
