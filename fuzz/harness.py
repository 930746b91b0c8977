"""What the GPU fuzzers share: worker processes that run cases and report one JSON line per case, and the parent
that spreads cases over them, notices a worker that died inside a case (a signal, a broken CUDA context) and starts
a fresh one for the rest.

A fuzzer module gives ``make_case(seed, case) -> spec`` and ``run_case(spec) -> result dict``, and names the spec
field each record carries as its category (``tag``: "kind", "direction").
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable


def worker(make_case: Callable[[int, int], dict], run_case: Callable[[dict], dict], tag: str, seed: int,
           cases: list[int]) -> None:
    """Run cases in order, one JSON line before ("start") and after each; exit at the first CUDA error."""
    for case in cases:
        print(json.dumps({"start": case}), flush=True)
        spec = make_case(seed, case)
        t0 = time.perf_counter()
        fatal = False
        try:
            result = run_case(spec)
        except Exception as e:
            text = str(e)
            fatal = "CUDA" in text or "EXECUTION_FAILED" in text or "illegal" in text.lower()
            result = {"outcome": "died" if fatal else "error", "reason": f"{type(e).__name__}: {text[:200]}"}
        print(json.dumps({"case": case, tag: spec[tag], "ms": _ms(t0), **result}), flush=True)
        if fatal:
            os._exit(3)  # the CUDA context may be broken: the parent starts a fresh worker


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 1)


def run_all(module: str, make_case: Callable[[int, int], dict], tag: str, seed: int, n: int, workers: int,
            out_path: str | None, timeout: float) -> dict[int, dict]:
    """Cases 0..n-1 over ``workers`` processes of ``python -m <module> --worker``; returns case -> record (and
    writes them as JSON lines to ``out_path``). No new worker starts after ``timeout`` seconds."""
    chunks = [list(range(n))[i::workers] for i in range(workers)]
    procs: list[tuple[subprocess.Popen, list[int]]] = []
    results: dict[int, dict] = {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def spawn(cases: list[int]) -> None:
        if cases:
            p = subprocess.Popen([sys.executable, "-m", module, "--worker", "--seed", str(seed),
                                  "--ids", ",".join(map(str, cases))], stdout=subprocess.PIPE, text=True, env=env)
            procs.append((p, cases))

    for chunk in chunks:
        spawn(chunk)
    deadline = time.time() + timeout
    while procs:
        p, cases = procs.pop(0)
        started = None
        assert p.stdout is not None
        for line in p.stdout:
            rec = json.loads(line)
            if "start" in rec:
                started = rec["start"]
            else:
                results[rec["case"]] = rec
                started = None
        rc = p.wait()
        if started is not None and started not in results:  # it died inside this case
            results[started] = {"case": started, tag: make_case(seed, started)[tag], "outcome": "died",
                                "reason": f"worker exit status {rc}"}
        rest = [c for c in cases if c not in results]
        if rest and time.time() < deadline:
            spawn(rest)
    if out_path:
        with open(out_path, "w") as f:
            for case in sorted(results):
                f.write(json.dumps(results[case]) + "\n")
    return results


def reason(e: Exception, keys: tuple[str, ...]) -> str:
    """A short, countable refusal reason: the erratum's id, else the first of ``keys`` the message contains (with
    what follows it up to a colon), else the exception's type and first line."""
    text = str(e)
    for key in ("erratum ",) + keys:
        if key in text:
            start = text.index(key)
            return text[start:start + 60].split(":")[0] if key != "erratum " else text[start:].split(" ")[1]
    return f"{type(e).__name__}: {text.splitlines()[0][:80] if text else ''}"


def summary(title: str, seed: int, out_path: str, tag: str, categories: tuple[str, ...],
            describe: Callable[[dict], str]) -> str:
    """The outcome counts, per category (the ``tag`` field), the refusals by reason and every case that went wrong
    (``describe(record)`` names it)."""
    recs = [json.loads(line) for line in open(out_path)]
    by = Counter(r["outcome"] for r in recs)
    lines = [f"{title}, seed {seed}: {len(recs)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(by.items()))]
    for category in categories:
        c = Counter(r["outcome"] for r in recs if r[tag] == category)
        lines.append(f"  {category}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    reasons = Counter(r.get("reason", "") for r in recs if r["outcome"] == "refused")
    lines.append("  refusals by reason: " + "; ".join(f"{k} x{v}" for k, v in reasons.most_common(12)))
    for r in recs:
        if r["outcome"] in ("wrong", "died", "error"):
            lines.append(f"  case {r['case']} ({describe(r)}): {r['outcome']}: {r.get('reason')} {r.get('plan', '')}")
    return "\n".join(lines)
