"""Where a warm-key build's time goes, stage by stage, for this cudnn_py and an older one (``.ab/cudnn_py_old``,
as in host_ab.py): cProfile of ``N`` builds of a graph whose key was built before, per stage, cumulative times.

    PYTHONPATH=. OLD=.ab N=30 python benchmarks/build_profile.py sdpa matmul    # writes $OUT/build_profile.txt
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys

from benchmarks.build_ab import add, matmul, sdpa
from benchmarks.build_stages import STAGES, run_stage, stage_times
from benchmarks.host_ab import contenders


def main() -> None:
    libs = {n: lib for n, lib in contenders().items() if n != "official"}
    import torch

    n = int(os.environ.get("N", "30"))
    out = io.StringIO()
    makers = {"sdpa": sdpa, "matmul": matmul, "add": add}
    for case in sys.argv[1:] or ["sdpa"]:
        for name, lib in libs.items():
            h = lib.create_handle()
            make = makers[case](lib, h, torch)
            stage_times(lib, make())  # the key's first build, not profiled
            profiles = {s: cProfile.Profile() for s in STAGES}
            for _ in range(n):
                g = make()
                for s in STAGES:
                    profiles[s].runcall(run_stage, lib, g, s)
            for s, p in profiles.items():
                out.write(f"===== {case} {name} {s} ({n} builds)\n")
                pstats.Stats(p, stream=out).sort_stats("cumulative").print_stats(40)
    with open(os.path.join(os.environ.get("OUT", "."), "build_profile.txt"), "w") as f:
        f.write(out.getvalue())


if __name__ == "__main__":
    main()
