"""Where a warm-key build's time goes, stage by stage, for this cudnn_py and an older one (``.ab/cudnn_py_old``,
as in host_ab.py): cProfile of ``N`` builds of a graph whose key was built before, per stage, cumulative times.

    PYTHONPATH=. OLD=.ab N=30 python benchmarks/build_profile.py sdpa matmul    # writes $OUT/build_profile.txt
"""
from __future__ import annotations

import cProfile
import importlib
import io
import os
import pstats
import sys

from benchmarks.build_ab import STAGES, add, matmul, sdpa, stage_ms


def main() -> None:
    import cudnn  # noqa: F401  (the official frontend first: the others reuse the libcudnn it loaded)
    import torch

    import cudnn_py

    sys.path.insert(0, os.path.abspath(os.environ.get("OLD", ".ab")))
    libs = {"new": cudnn_py, "old": importlib.import_module("cudnn_py_old")}
    n = int(os.environ.get("N", "30"))
    out = io.StringIO()
    makers = {"sdpa": sdpa, "matmul": matmul, "add": add}
    for case in sys.argv[1:] or ["sdpa"]:
        for name, lib in libs.items():
            h = lib.create_handle()
            make = makers[case](lib, h, torch)
            stage_ms(lib, make())
            profiles = {s: cProfile.Profile() for s in STAGES}
            for _ in range(n):
                g = make()
                for s in STAGES:
                    p = profiles[s]
                    p.enable()
                    if s == "create_execution_plans":
                        g.create_execution_plans([lib.heur_mode.A, lib.heur_mode.FALLBACK])
                    else:
                        getattr(g, s)()
                    p.disable()
            for s, p in profiles.items():
                out.write(f"===== {case} {name} {s} ({n} builds)\n")
                pstats.Stats(p, stream=out).sort_stats("cumulative").print_stats(40)
    with open(os.path.join(os.environ.get("OUT", "."), "build_profile.txt"), "w") as f:
        f.write(out.getvalue())


if __name__ == "__main__":
    main()
