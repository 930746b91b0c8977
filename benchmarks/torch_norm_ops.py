"""cudnn_py's torch norm operators (``cudnn_py.ops.norm.rms_norm`` / ``layer_norm``) against torch's own
(``F.rms_norm`` / ``F.layer_norm``) and, when importable, the official module's (``cudnn.ops.norm.*``): forward +
backward of one call on bf16 inputs that need gradients (input, weight and, for layer_norm, bias), and the forward
alone under no_grad (cudnn_py runs its inference graphs there), shapes 8192 x 4096 and 16384 x 12288.

Timing: CUDA events around ``ITERS`` back-to-back calls (forward, then ``backward`` of the output with a fixed
gradient, the inputs' .grad cleared between calls), after warm-up; the median of ``ROUNDS`` rounds, contenders in
alternating order. Printed per shape and op: milliseconds per call and the ratio to torch's (below 1: faster than
torch), and cudnn_py / official; the largest difference of each output from torch's. JSON to
$OUT/torch_norm_ops.json when $OUT is set. About a minute on an H100.

    python benchmarks/torch_norm_ops.py
    # with the official operators (its wheel and looseversion installed into a folder on PYTHONPATH):
    site=$(mktemp -d); python -m pip install -q --no-index --no-deps --target $site \\
        .conformance/whl/nvidia_cudnn_frontend*.whl .conformance/whl/looseversion*.whl
    PYTHONPATH=$site python benchmarks/torch_norm_ops.py
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from cuda_timing import per_call_ms  # this script's folder is on sys.path
from official_module import official


def _official():
    """(the official module's cudnn.ops.norm, None) or (None, why not)."""
    return official("ops.norm", "rms_norm", "layer_norm")


OFFICIAL, OFFICIAL_WHY = _official()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cudnn_py  # noqa: E402

OURS = cudnn_py.ops.norm
SHAPES = [(8192, 4096), (16384, 12288)]
DTYPE, EPS = torch.bfloat16, 1e-5
WARMUP, ITERS, ROUNDS = 5, 20, 7


def contenders(op: str) -> dict:
    """name -> f(x, w, b=None) for op ("rms_norm" or "layer_norm")."""
    if op == "rms_norm":
        c = {"torch": lambda x, w, b=None: F.rms_norm(x, (x.shape[-1],), w, EPS),
             "cudnn_py": lambda x, w, b=None: OURS.rms_norm(x, w, None, EPS)}
        if OFFICIAL is not None:
            c["official"] = lambda x, w, b=None: OFFICIAL.rms_norm(x, w, None, EPS)
    else:
        c = {"torch": lambda x, w, b=None: F.layer_norm(x, (x.shape[-1],), w, b, EPS),
             "cudnn_py": lambda x, w, b=None: OURS.layer_norm(x, (x.shape[-1],), w, b, EPS)}
        if OFFICIAL is not None:
            c["official"] = lambda x, w, b=None: OFFICIAL.layer_norm(x, (x.shape[-1],), w, b, EPS)
    return c


def time_calls(fn, inputs, dy, grad: bool) -> float:
    """Milliseconds per call (forward + backward where ``grad``, else the forward under no_grad)."""
    def once():
        if grad:
            for t in inputs:
                t.grad = None
            fn(*inputs).backward(dy)
        else:
            with torch.no_grad():
                fn(*inputs)

    for _ in range(WARMUP):
        once()
    torch.cuda.synchronize()
    return per_call_ms(torch, once, ITERS)


def measure(op: str, shape: tuple) -> dict:
    g = torch.Generator(device="cuda").manual_seed(0)
    rows, h = shape
    x = torch.randn(shape, generator=g, device="cuda").to(DTYPE).requires_grad_()
    w = (torch.rand(h, generator=g, device="cuda") + 0.5).to(DTYPE).requires_grad_()
    b = torch.randn(h, generator=g, device="cuda").to(DTYPE).requires_grad_()
    inputs = (x, w, b) if op == "layer_norm" else (x, w)
    dy = torch.randn(shape, generator=g, device="cuda").to(DTYPE)
    fns = contenders(op)
    result: dict = {"op": op, "shape": list(shape), "dtype": str(DTYPE)}
    with torch.no_grad():
        want = fns["torch"](x, w, b).float()
        result["max_abs_diff_vs_torch"] = {n: (f(x, w, b).float() - want).abs().max().item()
                                           for n, f in fns.items() if n != "torch"}
    for mode, grad in (("fwd_bwd", True), ("fwd_no_grad", False)):
        times: dict = {n: [] for n in fns}
        names = list(fns)
        for r in range(ROUNDS):
            for n in (names if r % 2 == 0 else names[::-1]):
                times[n].append(time_calls(fns[n], inputs, dy, grad))
        ms = {n: statistics.median(v) for n, v in times.items()}
        result[mode] = {"ms": ms, "ratio_to_torch": {n: ms[n] / ms["torch"] for n in ms if n != "torch"}}
        if "official" in ms:
            result[mode]["cudnn_py_over_official"] = ms["cudnn_py"] / ms["official"]
    return result


def main() -> None:
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; cudnn_py {cudnn_py.__version__}, "
          f"cuDNN {cudnn_py.backend_version()}")
    if OFFICIAL is None:
        print(f"official operators left out: {OFFICIAL_WHY}")
    results = []
    for shape in SHAPES:
        for op in ("rms_norm", "layer_norm"):
            r = measure(op, shape)
            results.append(r)
            for mode in ("fwd_bwd", "fwd_no_grad"):
                m = r[mode]
                parts = [f"{n} {v:.3f} ms" for n, v in m["ms"].items()]
                ratios = [f"{n}/torch {v:.3f}x" for n, v in m["ratio_to_torch"].items()]
                if "cudnn_py_over_official" in m:
                    ratios.append(f"cudnn_py/official {m['cudnn_py_over_official']:.3f}x")
                print(f"{op:10s} {shape[0]}x{shape[1]} {mode:11s}: {', '.join(parts)}; {', '.join(ratios)}")
            print(f"{'':10s} max |diff| vs torch: {r['max_abs_diff_vs_torch']}")
    out = os.environ.get("OUT")
    if out:
        Path(out, "torch_norm_ops.json").write_text(json.dumps({
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": cudnn_py.backend_version(),
            "official": OFFICIAL_WHY or "included", "results": results}, indent=1))


if __name__ == "__main__":
    main()
