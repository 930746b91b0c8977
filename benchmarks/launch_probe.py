"""What a replayed SDPA forward's graph launch costs, and whether the GPU's state changes it (GPU; one process).

    PYTHONPATH=. python benchmarks/launch_probe.py [causal|non_causal|gqa4_causal|decode ...]   # $OUT/launch_probe.json

For each forward case of ``benchmarks/attention.py``: two cudnn_py graphs and the official frontend's, built on the
same tensors and replayed / executed 5 times; then the recording's ``cuGraphLaunch`` alone (40 back to back; two
recordings taking turns; after a 10 ms ``torch.cuda._sleep`` on the GPU), one launch timed alone (GPU idle; GPU
running another library's kernel; the same or the other recording still pending), and each library's ``execute``
the same ways. Medians of 31 samples (40 calls) or 301 single calls. Results: benchmarks/results/launch_probe-2026-12-02.json and
launch_probe-2026-12-02b.json, read with attention-2026-12-02j.README.md (H200, cuDNN 9.19): a launch costs 1.8-3.8
us by lease, the causal recording (a counter-zeroing kernel node and the attention node) as the decode one (the
attention node alone) on one lease; a pending launch does not slow it; a first launch while another library's
kernel still runs costs 5-10x one on an idle GPU, for both libraries' execute alike.
"""
import json
import os
import statistics
import sys
import time


def per_call(fn, calls=40, rounds=31, pre=None) -> float:
    """Median µs per call of ``calls`` back-to-back calls (``pre()`` after the sync before each sample)."""
    import torch

    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        if pre:
            pre()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(out), 2)


def single(fn, n=301, pre=None) -> float:
    """Median µs of one call timed alone (``pre()`` after the sync before it)."""
    return per_call(fn, calls=1, rounds=n, pre=pre)


def probe(name: str) -> dict[str, float]:
    import cudnn  # the official frontend first: cudnn_py reuses the libcudnn it loaded
    import torch

    import cudnn_py
    from benchmarks.attention import CASES, forward_graph, shapes
    from cudnn_py.cuda import capture

    launch = capture.driver().cuGraphLaunch

    def busy():
        torch.cuda._sleep(20_000_000)  # about 10 ms of spinning on the GPU

    case = CASES[name]
    t = {n: torch.randn(*d, device="cuda", dtype=torch.bfloat16) for n, d in shapes(case).items()}
    layouts = {n: (list(x.shape), list(x.stride())) for n, x in t.items()}
    execs, fns, keep = [], {}, []
    for lib, tag in ((cudnn_py, "py1"), (cudnn_py, "py2"), (cudnn, "official")):
        h = lib.create_handle()
        lib.set_stream(handle=h, stream=torch.cuda.current_stream().cuda_stream)
        g, names = forward_graph(lib, h, case, layouts)
        g.build([lib.heur_mode.A, lib.heur_mode.FALLBACK])
        o = torch.empty_like(t["q"])
        pack = {gt: (o if n == "o" else t[n]) for gt, n in names.items()}
        ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
        fns[tag] = lambda g=g, pack=pack, ws=ws, h=h: g.execute(pack, ws, handle=h)
        keep.append(g)
        for _ in range(5):
            fns[tag]()
        torch.cuda.synchronize()
        if lib is cudnn_py:
            execs.append(g.session.executor.replays.last.exec)
    e1, e2 = execs
    r = {"launch b2b": per_call(lambda: launch(e1, 0)),
         "launch b2b, two execs alternated": per_call(lambda: (launch(e1, 0), launch(e2, 0))) / 2,
         "launch b2b after a 10 ms GPU sleep": per_call(lambda: launch(e1, 0), pre=busy),
         "launch single, GPU idle": single(lambda: launch(e1, 0)),
         "launch single, GPU asleep (other work)": single(lambda: launch(e1, 0), pre=busy),
         "launch single, own exec pending": single(lambda: launch(e1, 0), pre=lambda: launch(e1, 0)),
         "launch single, other exec pending": single(lambda: launch(e1, 0), pre=lambda: launch(e2, 0))}
    for tag in ("py1", "official"):
        fn = fns[tag]
        r[f"{tag} execute b2b"] = per_call(fn)
        r[f"{tag} execute b2b after sleep"] = per_call(fn, pre=busy)
        r[f"{tag} execute single idle"] = single(fn)
        r[f"{tag} execute single asleep"] = single(fn, pre=busy)
    return r


if __name__ == "__main__":
    import torch

    torch.cuda.set_device(0)
    res = {}
    for case_name in sys.argv[1:] or ["causal", "decode"]:
        res[case_name] = probe(case_name)
        print(case_name, json.dumps(res[case_name], indent=1), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "launch_probe.json"), "w") as f:
        json.dump(res, f, indent=1)
