"""The lowering corpus: every backend call that ``validate()`` makes for seeded fuzz graphs (sdpa, conv,
matmul / pointwise / reduction, norms), canonicalized (descriptors by order of creation, values as traced) and
hashed per case. Two corpora with the same hashes mean cuDNN got the same input: how a change meant to make the
lowering faster, not different, is checked on the CPU (it needs no GPU: the cases validate deviceless).

    python -m fuzz.lowering_corpus --out before.json          # (on the old code)
    python -m fuzz.lowering_corpus --out after.json --compare before.json

Run from the source tree: without a driver it loads the test-only libcuda stub first (``harness.without_a_gpu``), as
the CPU tests do.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from typing import Any

from fuzz import harness

SEED = 777


def canonical(trace_text: str) -> tuple[str, int]:
    """(hash, number of calls) of a trace's create / set / finalize calls."""
    order: dict[int, int] = {}
    out: list[tuple] = []
    for line in trace_text.splitlines():
        r = json.loads(line)
        if r.get("phase") != "begin":
            continue
        fn = r["fn"]
        if fn == "cudnnBackendCreateDescriptor":
            out.append(("C", order.setdefault(r["desc"], len(order)), r["kind"]))
        elif fn == "cudnnBackendSetAttribute":
            v = r.get("values")
            if isinstance(v, list):
                v = [order.get(x["desc"], -1) if isinstance(x, dict) else x for x in v]
            out.append(("S", order.get(r["desc"], -1), r["attr"], r["type"], json.dumps(v)))
        elif fn == "cudnnBackendFinalize":
            out.append(("F", order.get(r["desc"], -1)))
        elif fn != "cudnnBackendDestroyDescriptor":
            out.append((fn,))
    return hashlib.sha256(repr(out).encode()).hexdigest()[:16], len(out)


def _lowered(build: Any) -> Any:
    import cudnn_py  # noqa: F401  (the graph builders use it)
    from cudnn_py.backend import trace

    buf = io.StringIO()
    try:
        g = build()
        with trace.tracing(buf):
            g.validate()
    except Exception as e:  # a refused case is part of the corpus too
        return f"refused {type(e).__name__}: {str(e)[:80]}"
    return list(canonical(buf.getvalue()))


def corpus(cases: int = 80) -> dict[str, Any]:
    import cudnn_py as cudnn
    from fuzz import conv_fuzz, graph_fuzz, norm_fuzz, sdpa_fuzz

    out: dict[str, Any] = {}
    for i in range(cases * 2):
        spec = sdpa_fuzz.make_case(SEED, i)
        out[f"sdpa {i}"] = _lowered(lambda spec=spec: sdpa_fuzz.build_graph(cudnn, spec)[0])
    for i in range(cases):
        spec = conv_fuzz.make_case(SEED, i)
        out[f"conv {i}"] = _lowered(lambda spec=spec: conv_fuzz.build_graph(cudnn, spec)[0])
    builders = {"matmul": graph_fuzz._build_matmul, "pointwise": graph_fuzz._build_pointwise,
                "reduction": graph_fuzz._build_reduction}
    for i in range(cases):
        spec = graph_fuzz.make_case(SEED, i)
        build = builders[spec["kind"]](spec)[0]
        out[f"graph {i}"] = _lowered(lambda build=build: build(cudnn)[0])
    for i in range(cases):
        spec = norm_fuzz.make_case(SEED, i)
        out[f"norm {i}"] = _lowered(lambda spec=spec: norm_fuzz.build(spec))
    return out


def differences(a: dict, b: dict) -> list[str]:
    return [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", type=int, default=80)
    ap.add_argument("--compare", help="a corpus written before: list the cases whose calls differ")
    args = ap.parse_args(argv)
    harness.without_a_gpu()
    got = corpus(args.cases)
    with open(args.out, "w") as f:
        json.dump(got, f, indent=0, sort_keys=True)
    lowered = [v for v in got.values() if isinstance(v, list)]
    print(f"{len(got)} cases, {len(lowered)} lowered, {sum(v[1] for v in lowered)} backend calls -> {args.out}")
    if args.compare:
        with open(args.compare) as f:
            diff = differences(json.load(f), got)
        print(f"differ from {args.compare}: {len(diff)}" + (f" ({', '.join(diff[:10])})" if diff else ""))
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
