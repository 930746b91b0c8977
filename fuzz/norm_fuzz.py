"""Deviceless fuzz of the normalization family on the CPU: random (often wrong) shapes through every norm builder,
then ``validate()``, which finalizes the operation graph on the cuDNN that is loaded (the libcuda stand-in is
enough). It runs in a child process: a signal there, or any exception other than the refusals below, is a failure.

    python -m fuzz.norm_fuzz --cases 400 --seed 1                # one line per case: CASE <id>, then RESULT <id> ...

(On a machine without a driver, load the test-only libcuda stand-in first, as tests/test_norm_fuzz.py does.)

A case ends **ok** (validated), or **refused** with ValueError / TypeError (the IR's checks) or a
cudnnGraphNotSupportedError / CudnnError from cuDNN's finalize (the backend's own refusal, with its message). The
well-formed cases (``bad`` false) are never refused by the IR (cuDNN may still say NOT_SUPPORTED, e.g. for an
adaptive layer norm over a unit sequence); the malformed ones are always refused by the IR, before any finalize.
"""
from __future__ import annotations

import argparse
import random
import sys
from typing import Any

METHODS = ("layernorm", "rmsnorm", "instancenorm", "adalayernorm", "batchnorm", "genstats", "layernorm_backward",
           "rmsnorm_backward", "instancenorm_backward", "adalayernorm_backward", "batchnorm_backward",
           "batchnorm_inference")


def make_case(seed: int, case: int) -> dict:
    r = random.Random(seed * 1_000_003 + case)
    method = r.choice(METHODS)
    rank = r.choice((3, 4, 4, 5)) if method != "adalayernorm" and "adalayernorm" not in method else 3
    x = [r.choice((1, 2, 3, 4, 8, 16, 32, 64)) for _ in range(rank)]
    if method.startswith(("batchnorm", "instancenorm", "genstats")):
        scale = [1, x[1]] + [1] * (rank - 2)
    elif method.startswith("adalayernorm"):
        scale = [x[0], 1, x[2]]
    else:
        scale = [1] + x[1:]
    bad = r.random() < 0.3 and method != "genstats"  # genstats takes no scale
    if bad:  # one wrong axis: a size neither 1 nor X's, or a rank mismatch
        if r.random() < 0.5:
            i = r.randrange(rank)
            scale[i] = x[i] + r.choice((1, 3))
        else:
            scale = scale[:-1]
    return {"case": case, "method": method, "x": x, "scale": scale, "bad": bad,
            "layout": r.choice(("packed", "channels_last")), "io": r.choice(("HALF", "BFLOAT16", "FLOAT"))}


def _strides(dims: list, layout: str) -> list:
    from cudnn_py.ir.layout import nhwc_strides, row_major_strides

    return nhwc_strides(dims) if layout == "channels_last" else row_major_strides(dims)


def build(c: dict):
    import cudnn_py as cudnn

    F = cudnn.data_type.FLOAT
    P = cudnn.norm_forward_phase
    io = getattr(cudnn.data_type, c["io"])
    g: Any = cudnn.pygraph(io_data_type=io, intermediate_data_type=F, compute_data_type=F)
    x_dims, s_dims, m = c["x"], c["scale"], c["method"]
    x = g.tensor(x_dims, _strides(x_dims, c["layout"]), name="x")

    def per_scale(name: str):
        return g.tensor(s_dims, _strides(s_dims, c["layout"]), data_type=F, name=name)

    def stats(name: str):
        from cudnn_py.families.norms.spec import normalized_stats_dims

        mode = {"rmsnorm": "CUDNN_RMS_NORM", "instancenorm": "CUDNN_INSTANCE_NORM",
                "adalayernorm": "CUDNN_ADA_LAYER_NORM", "batchnorm": "CUDNN_BATCH_NORM"}.get(m.split("_")[0],
                                                                                            "CUDNN_LAYER_NORM")
        dims = normalized_stats_dims(mode, [d if d <= x_dims[i] else 1 for i, d in enumerate(s_dims)], x_dims) \
            if len(s_dims) == len(x_dims) else [1] * len(x_dims)
        return g.tensor(dims, _strides(dims, c["layout"]), data_type=F, name=name)

    eps = g.tensor([1] * len(x_dims), data_type=F, is_pass_by_value=True, name="eps")
    if m in ("layernorm", "rmsnorm", "instancenorm", "adalayernorm"):
        outs = getattr(g, m)(P.TRAINING, x, per_scale("s"), per_scale("b"), eps)
    elif m == "batchnorm":
        mom = g.tensor([1] * len(x_dims), data_type=F, is_pass_by_value=True, name="mom")
        outs = g.batchnorm(x, per_scale("s"), per_scale("b"), per_scale("rm"), per_scale("rv"), eps, mom)
    elif m == "batchnorm_inference":
        outs = [g.batchnorm_inference(x, per_scale("m"), per_scale("iv"), per_scale("s"), per_scale("b"))]
    elif m == "genstats":
        outs = g.genstats(x)
    else:
        dy = g.tensor(x_dims, _strides(x_dims, c["layout"]), name="dy")
        if m == "rmsnorm_backward":
            outs = g.rmsnorm_backward(dy, x, per_scale("s"), stats("iv"), True)
        else:
            outs = getattr(g, m)(dy, x, per_scale("s"), stats("m"), stats("iv"))
    for t in outs:
        if t is not None:
            t.set_output(True)
            if t.get_data_type() is cudnn.data_type.NOT_SET:
                t.set_data_type(F)
    return g


def run_case(c: dict) -> str:
    import cudnn_py as cudnn
    from cudnn_py.errors import CudnnError

    try:
        build(c).validate()
    except (ValueError, TypeError) as e:
        return f"refused-ir {type(e).__name__}: {' '.join(str(e).split())[:200]}"
    except (cudnn.cudnnGraphNotSupportedError, CudnnError) as e:
        return f"refused-cudnn {type(e).__name__}: {' '.join(str(e).split())[:200]}"
    return "ok"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", type=int, default=400)
    a = ap.parse_args(argv)
    for i in range(a.cases):
        c = make_case(a.seed, i)
        print(f"CASE {i}", flush=True)
        print(f"RESULT {i} {'bad' if c['bad'] else 'good'} {c['method']} {run_case(c)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
