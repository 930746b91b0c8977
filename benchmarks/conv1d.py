"""The causal depthwise conv1d, three ways, for a few shapes: cudnn_py's ``cudnn_py.ops.causal_conv1d`` (cuDNN's C
API, libcudnn_ext: 9.22 or newer), the official module's ``cudnn.ops.causal_conv1d`` (when its wheel is importable
as ``cudnn``), and torch (``F.conv1d`` with left padding and ``groups = dim``, the reference everyone is compared to).

For each shape: the forward alone, and forward + backward (x, weight and bias need gradients), bf16 and fp32, SiLU.
Timing: CUDA events around ``ITERS`` back-to-back calls after warm-up, the median of ``ROUNDS`` rounds, contenders
in alternating order. Printed: milliseconds per call, each contender's ratio to torch (below 1: faster than torch),
cudnn_py / official, and the largest difference of each output from torch's. A side that cannot run here says why
in one line (cudnn_py on a cuDNN before 9.22 refuses: the refusal is printed) and its columns read "-". JSON to
$OUT/conv1d.json when $OUT is set.

    python benchmarks/conv1d.py
    # with the official module (its wheel installed into a folder on PYTHONPATH):
    site=$(mktemp -d); python -m pip install -q --no-index --no-deps --target $site nvidia_cudnn_frontend*.whl
    PYTHONPATH=$site python benchmarks/conv1d.py
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from cuda_timing import per_call_ms  # this script's folder is on sys.path
from official_module import official

SHAPES = [(4, 1024, 2048, 4), (8, 2048, 4096, 4), (2, 4096, 8192, 16)]  # batch, dim, seq_len, width
ITERS, ROUNDS, WARMUP = 20, 7, 3


def _official():
    """(the official module's causal_conv1d, None) or (None, why not)."""
    ops, why = official("ops", "causal_conv1d")
    return (ops.causal_conv1d, None) if ops is not None else (None, why)


def _ours():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from cudnn_py.backend import ext_loader

    try:
        why = ext_loader.why_unavailable("cudnnCausalConv1dForward")
    except Exception as exc:  # no libcudnn at all
        return None, f"cudnn_py cannot load cuDNN ({type(exc).__name__}: {exc})"
    if why:
        return None, f"cudnn_py refuses on this cuDNN: {why}"
    import cudnn_py

    return cudnn_py.ops.causal_conv1d, None


def _torch_ref(F):
    def conv(x, w, b, activation):
        y = F.conv1d(F.pad(x, (w.shape[1] - 1, 0)), w.unsqueeze(1), b, groups=x.shape[1])
        return F.silu(y) if activation == "silu" else y
    return conv


def _time(torch, fn, backward: bool) -> float:
    """Milliseconds per call: the median over ROUNDS of ITERS back-to-back calls."""
    def once():
        y = fn()
        if backward:
            y.backward(torch.ones_like(y))
    for _ in range(WARMUP):
        once()
    return statistics.median(per_call_ms(torch, once, ITERS) for _ in range(ROUNDS))


def _ratio(med: dict, a: str, c: str) -> str:
    return f"{med[a] / med[c]:.2f}" if a in med and c in med else "-"


def main() -> int:
    official, official_why = _official()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as exc:
        print(f"benchmarks/conv1d.py needs torch: {exc}")
        return 2
    if not torch.cuda.is_available():
        print("benchmarks/conv1d.py needs a CUDA GPU: torch sees none")
        return 2
    ours, ours_why = _ours()
    reference = _torch_ref(F)
    contenders = {"torch": reference, "cudnn_py": ours, "official": official}
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    for name, why in (("cudnn_py", ours_why), ("official", official_why)):
        if why:
            print(f"{name}: unavailable - {why}")
    rows = []
    header = f"{'shape (B,D,T,W)':>22} {'dtype':>6} {'pass':>8} {'torch ms':>9} {'ours/torch':>10} " \
             f"{'off/torch':>9} {'ours/off':>8} {'max|ours-torch|':>15} {'max|off-torch|':>14}"
    print(header)
    for b, d, t, k in SHAPES:
        for dtype in (torch.bfloat16, torch.float32):
            x = torch.randn(b, d, t, device="cuda", dtype=dtype)
            w = torch.randn(d, k, device="cuda", dtype=dtype) / k
            bias = torch.randn(d, device="cuda", dtype=dtype)
            want = reference(x, w, bias, "silu")
            diffs, skipped = {}, {}
            for name, fn in contenders.items():
                if fn is None or name == "torch":
                    continue
                try:
                    diffs[name] = float((fn(x, w, bias, "silu").float() - want.float()).abs().max())
                except Exception as exc:  # a side that refuses this shape says so and is left out
                    skipped[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            for name, why in skipped.items():
                print(f"{name}: ({b},{d},{t},{k}) {dtype}: {why}")
            for backward in (False, True):
                leaves = [v.detach().requires_grad_(backward) for v in (x, w, bias)]
                ms = {}
                for name in ("torch", "cudnn_py", "official", "torch"):  # torch first and last: alternating order
                    fn = contenders[name]
                    if fn is None or name in skipped:
                        continue
                    ctx = torch.enable_grad() if backward else torch.no_grad()
                    with ctx:
                        ms.setdefault(name, []).append(_time(torch, lambda f=fn, a=leaves: f(*a, "silu"), backward))
                med = {n: statistics.median(v) for n, v in ms.items()}

                row = dict(shape=[b, d, t, k], dtype=str(dtype), backward=backward, ms=med, diffs=diffs)
                rows.append(row)
                print(f"{str((b, d, t, k)):>22} {str(dtype)[6:]:>6} {'fwd+bwd' if backward else 'fwd':>8} "
                      f"{med['torch']:9.3f} {_ratio(med, 'cudnn_py', 'torch'):>10} "
                      f"{_ratio(med, 'official', 'torch'):>9} {_ratio(med, 'cudnn_py', 'official'):>8} {diffs.get('cudnn_py', float('nan')):15.3g} "
                      f"{diffs.get('official', float('nan')):14.3g}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "conv1d.json").write_text(json.dumps(
            dict(unavailable={"cudnn_py": ours_why, "official": official_why}, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
