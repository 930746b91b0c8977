"""Where a replayed SDPA execute's host time goes (GPU): the whole call against its parts, one process. Committed from the
probe of 2026-12-02 (its figures: benchmarks/results/attention-2026-12-02g.README.md); not yet run in this form.

    PYTHONPATH=. python benchmarks/host_split.py [causal|non_causal|gqa4_causal|decode ...]

For each forward case of ``benchmarks/attention.py`` (handle and workspace given, as ``run.py`` calls it): the
replayed ``g.execute``; the recording's ``cuGraphLaunch`` alone; ``cudnnGetStream`` alone; the operands' torch
re-checks alone (shape, dtype, get_device, is_contiguous, data_ptr); and those three in a bare loop (the C calls
every safe call makes, with no bookkeeping). The difference between the first and the last is cudnn_py's own work.
40 calls per sample, every variant once per round in alternating order, medians (and minimums) of 41 rounds.
"""
from __future__ import annotations

import statistics
import sys


def split(case_name: str, rounds: int = 41, calls: int = 40) -> dict[str, tuple[float, float]]:
    """{variant: (median, minimum) µs per call} for the forward case ``case_name``."""
    import torch

    import cudnn_py as cudnn
    from benchmarks.attention import CASES, forward_graph, host_us, shapes
    from cudnn_py.backend import out_params
    from cudnn_py.backend.api import lib
    from cudnn_py.cuda import capture

    torch.cuda.set_device(0)
    h = cudnn.create_handle()
    cudnn.set_stream(handle=h, stream=torch.cuda.current_stream().cuda_stream)
    case = CASES[case_name]
    t = {n: torch.randn(*d, device="cuda", dtype=torch.bfloat16) for n, d in shapes(case).items()}
    layouts = {n: (list(x.shape), list(x.stride())) for n, x in t.items()}
    g, names = forward_graph(cudnn, h, case, layouts)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    o = torch.empty_like(t["q"])
    pack = {gt: (o if n == "o" else t[n]) for gt, n in names.items()}
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    for _ in range(5):
        g.execute(pack, ws, handle=h)
    torch.cuda.synchronize()
    replay = g.session.executor.replays.last
    if replay is None:
        raise RuntimeError(f"{case_name}: not replayed ({g.session.executor.replays.stats()})")
    launch, get_stream, out = capture.driver().cuGraphLaunch, lib().cudnnGetStream, out_params.this_thread()
    operands = [(v, v.shape, v.dtype, v.get_device()) for v in pack.values()]

    def checks():
        for v, shape, dtype, device in operands:
            if v.shape != shape or v.dtype is not dtype or v.get_device() != device or not v.is_contiguous():
                raise AssertionError("an operand changed")
            v.data_ptr()

    def c_calls_only():
        checks()
        get_stream(h, out.stream)
        launch(replay.exec, out.stream.value or 0)

    variants = {
        "g.execute (replayed)": lambda: g.execute(pack, ws, handle=h),
        "operand checks + cudnnGetStream + cuGraphLaunch": c_calls_only,
        "cuGraphLaunch alone": lambda: launch(replay.exec, 0),
        "cudnnGetStream alone": lambda: get_stream(h, out.stream),
        f"{len(operands)} torch operand re-checks": checks,
        "empty lambda": lambda: None,
    }
    _, samples = host_us(variants, rounds, calls)
    if g.session.executor.replays.stats()["failures"]:
        raise RuntimeError(f"replay failures: {g.session.executor.replays.stats()['failures']}")
    return {k: (statistics.median(v), min(v)) for k, v in samples.items()}


if __name__ == "__main__":
    for name in sys.argv[1:] or ["causal", "decode"]:
        print(f"forward {name}: µs per call, median (min)")
        for k, (med, low) in split(name).items():
            print(f"  {k:50s} {med:7.2f} ({low:.2f})")
