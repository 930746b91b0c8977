"""Build time of a graph whose key was built before (GPU), in one process: the official frontend, cudnn_py of this
tree and an older cudnn_py (``.ab/cudnn_py_old``, as in host_ab.py), fresh graphs built in rotating order, every
contender once per round, so that the host's drift hits all alike (run.py's figure is a median of 4, one of
them the key's first build: too few to tell 2 ms from 3). Per stage and total, the median over ``ROUNDS`` rounds
and the median of the per-round new/old ratios; then a profile of one more warm build of each cudnn_py (where a
difference lives).

    PYTHONPATH=. OLD=.ab ROUNDS=41 python benchmarks/build_ab.py     # writes $OUT/ab_build.json (OUT default .)

Cases: ``matmul`` (run.py's bf16 16x1024x1024x128), ``add`` (run.py's tiny fp16 add), ``sdpa`` (attention.py's
causal forward). CASES picks them.
"""
from __future__ import annotations

import collections
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import time

from benchmarks.build_stages import STAGES, stage_times
from benchmarks.host_ab import contenders

# garbage collections seen during the timed builds: (library, stage, generation) -> [count, ms]
COLLECTIONS: dict = collections.defaultdict(lambda: [0, 0.0])
_now: list = [None, None, 0.0]  # [library, stage, start of the collection in progress]


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _now[2] = time.perf_counter()
    elif _now[0] is not None:
        c = COLLECTIONS[(_now[0], _now[1], info["generation"])]
        c[0] += 1
        c[1] += (time.perf_counter() - _now[2]) * 1e3


def stage_ms(lib, g, name=None) -> dict[str, float]:
    """build_stages.stage_times, with the total, the collections during it counted for library ``name``."""
    def entering(stage: str) -> None:
        _now[0], _now[1] = name, stage

    out = stage_times(lib, g, on_stage=entering)
    _now[0] = None
    out["total"] = sum(out.values())
    return out


def matmul(lib, handle, torch):
    a = torch.randn(16, 1024, 128, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(16, 128, 1024, device="cuda", dtype=torch.bfloat16)

    def make():
        g = lib.pygraph(io_data_type=lib.data_type.BFLOAT16, intermediate_data_type=lib.data_type.FLOAT,
                        compute_data_type=lib.data_type.FLOAT, handle=handle)
        c = g.matmul(g.tensor_like(a), g.tensor_like(b), name="mm")
        c.set_output(True).set_data_type(lib.data_type.BFLOAT16)
        return g
    return make


def add(lib, handle, torch):
    x = torch.randn(4, 64, device="cuda", dtype=torch.float16)

    def make():
        g = lib.pygraph(io_data_type=lib.data_type.HALF, compute_data_type=lib.data_type.FLOAT, handle=handle)
        y = g.add(g.tensor_like(x), g.tensor_like(x), name="add")
        y.set_output(True)
        return g
    return make


def sdpa(lib, handle, torch):
    from benchmarks.attention import CASES, forward_graph, shapes

    case = CASES["causal"]
    layouts = {n: (d, [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1]) for n, d in shapes(case).items()}
    return lambda: forward_graph(lib, handle, case, layouts)[0]


def profile(lib, make, top=22) -> str:
    g = make()
    p = cProfile.Profile()
    p.enable()
    stage_ms(lib, g)
    p.disable()
    s = io.StringIO()
    pstats.Stats(p, stream=s).sort_stats("tottime").print_stats(top)
    return s.getvalue()


def main() -> None:
    libs = contenders()
    import torch

    rounds = int(os.environ.get("ROUNDS", "41"))
    torch.cuda.set_device(0)
    handles = {n: lib.create_handle() for n, lib in libs.items()}
    results, profiles = {}, {}
    gc.callbacks.append(_on_gc)
    for case in os.environ.get("CASES", "matmul add sdpa").split():
        makers = {n: globals()[case](lib, handles[n], torch) for n, lib in libs.items()}
        for n, lib in libs.items():  # the key's first build (kernels compiled, caches filled), untimed
            stage_ms(lib, makers[n]())
        samples = {n: [] for n in libs}
        order = list(libs)
        for r in range(rounds):
            for n in order[r % 3:] + order[:r % 3]:
                samples[n].append(stage_ms(libs[n], makers[n](), n))
        med = {n: {k: statistics.median(s[k] for s in samples[n]) for k in (*STAGES, "total")} for n in libs}
        paired = statistics.median(a["total"] / b["total"] for a, b in zip(samples["new"], samples["old"]))
        results[case] = {"median_ms": med, "paired_new_over_old": paired,
                         "totals": {n: [s["total"] for s in samples[n]] for n in libs}}
        print(f"{case:7s} total ms: official {med['official']['total']:7.3f} | new {med['new']['total']:7.3f} | "
              f"old {med['old']['total']:7.3f} | new/old {med['new']['total'] / med['old']['total']:.3f} "
              f"(paired {paired:.3f})", flush=True)
        for n in ("new", "old"):
            print(f"    {n}: " + ", ".join(f"{k} {med[n][k]:.3f}" for k in STAGES), flush=True)
            gcs = {k: v for k, v in COLLECTIONS.items() if k[0] == n}
            print(f"    {n} collections per stage and generation (count, ms): " + ", ".join(
                f"{s} g{g} {c} {ms:.1f}" for (_, s, g), (c, ms) in sorted(gcs.items())), flush=True)
        COLLECTIONS.clear()
        for n in ("new", "old"):
            profiles[f"{case} {n}"] = profile(libs[n], makers[n])
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "ab_build.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out, "ab_build_profiles.txt"), "w") as f:
        for k, v in profiles.items():
            f.write(f"===== {k}\n{v}\n")


if __name__ == "__main__":
    main()
