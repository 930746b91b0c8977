"""Host time per SDPA execute in one process (GPU): the official frontend, cudnn_py of this tree and an older
cudnn_py, on the same tensors, every contender once per round in alternating order (benchmarks/attention.py's
host measure): an A/B of two versions of the execute path on one host, where leases differ by 2x.

    git worktree add /tmp/old <rev> && mkdir -p .ab && cp -r /tmp/old/cudnn_py .ab/cudnn_py_old
    PYTHONPATH=. OLD=.ab ROUNDS=51 python benchmarks/host_ab.py        # writes $OUT/ab_host.json (OUT default .)

The older package is imported as ``cudnn_py_old`` (cudnn_py imports itself only relatively, so a renamed copy
loads beside this one; both use the libcudnn the official frontend loaded). CASES picks the cases (fwd_<case>,
bwd_<case> of attention.py). Results: benchmarks/results/host-ab-2026-12-02.md (made with this script's first
form, an uncommitted script then; this form has not run yet).
"""
from __future__ import annotations

import importlib
import json
import os
import sys

CALLS = 40
DEFAULT_CASES = "fwd_causal fwd_non_causal fwd_gqa4_causal fwd_decode bwd_causal"


def contenders() -> dict:
    """{"official": cudnn, "new": cudnn_py, "old": cudnn_py_old}: the official frontend imported first (the others
    reuse the libcudnn it loaded), the older package from ``$OLD`` (default ``.ab``)."""
    import cudnn

    import cudnn_py

    sys.path.insert(0, os.path.abspath(os.environ.get("OLD", ".ab")))
    return {"official": cudnn, "new": cudnn_py, "old": importlib.import_module("cudnn_py_old")}


def main() -> None:
    libs = contenders()
    import torch

    from benchmarks.attention import _LIKE, CASES, backward_graph, forward_graph, host_us, paired_ratio, shapes
    from benchmarks.build_stages import stage_times

    rounds = int(os.environ.get("ROUNDS", "31"))
    torch.cuda.set_device(0)
    handles = {n: lib.create_handle() for n, lib in libs.items()}
    for n, lib in libs.items():
        lib.set_stream(handle=handles[n], stream=torch.cuda.current_stream().cuda_stream)
    rows = []
    for key in os.environ.get("CASES", DEFAULT_CASES).split():
        direction, name = key.split("_", 1)
        case, backward = CASES[name], direction == "bwd"
        t = {n: torch.randn(*d, device="cuda", dtype=torch.bfloat16) for n, d in shapes(case).items()}
        t["stats"] = torch.randn(*shapes(case)["stats"], device="cuda", dtype=torch.float32)
        layouts = {n: (list(x.shape), list(x.stride())) for n, x in t.items()}
        make = backward_graph if backward else forward_graph
        outs = ("dQ", "dK", "dV") if backward else ("o",)
        runs, keep = {}, []
        for n, lib in libs.items():
            g, names = make(lib, handles[n], case, layouts)
            stage_times(lib, g)
            mine = {o: torch.empty_like(t[_LIKE[o]]) for o in outs}
            pack = {gt: (mine[x] if x in mine else t[x]) for gt, x in names.items()}
            ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
            keep.append(g)
            runs[n] = lambda g=g, pack=pack, ws=ws, h=handles[n]: g.execute(pack, ws, handle=h)
            for _ in range(3):
                runs[n]()
        torch.cuda.synchronize()
        med, samples = host_us(runs, rounds, CALLS)
        # paired by round: the host's drift between rounds cancels within a round
        paired = {n: paired_ratio(samples, n) for n in ("new", "old")}
        launches = {n: keep[i].session.executor.replays.stats()["launches"] for i, n in enumerate(libs) if i}
        row = {"case": key, "us": med, "ratio_new": med["new"] / med["official"],
               "ratio_old": med["old"] / med["official"], "round_ratio_new": paired["new"],
               "round_ratio_old": paired["old"], "launches": launches}
        rows.append(row)
        print(f"{key:16s} official {med['official']:6.2f} us | new {med['new']:6.2f} ({row['ratio_new']:.3f}x, "
              f"paired {paired['new']:.3f}x) | old {med['old']:6.2f} ({row['ratio_old']:.3f}x, paired "
              f"{paired['old']:.3f}x) | new/old {med['new'] / med['old']:.3f} | launches {launches}", flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "ab_host.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
