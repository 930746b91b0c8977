"""What the GPU fuzzers share: worker processes that run cases and report one JSON line per case, and the parent
that spreads cases over them, notices a worker that died inside a case (a signal, a broken CUDA context) and starts
a fresh one for the rest.

A fuzzer module gives ``make_case(seed, case) -> spec`` and ``run_case(spec) -> result dict``, and names the spec
field each record carries as its category (``tag``: "kind", "direction").

A case that hangs (no record ``--case-timeout`` seconds after it started) is a failure ("timeout") with its case
printed; the parent reads every worker's pipe as it comes, so no worker waits on another.
"""
from __future__ import annotations

import argparse
import json
import os
import selectors
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


FAILURES = ("wrong", "died", "error", "timeout")  # the outcomes a run fails on (and its summary lists)
CASE_TIMEOUT_S = 180.0  # one case (the first one: CUDA, cuDNN and heuristics start-up) and no result yet: hung


def add_run_args(ap: argparse.ArgumentParser, out: str) -> None:
    """The parent's options every fuzzer takes (and the worker's hidden ones)."""
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--out", default=out)
    ap.add_argument("--timeout", type=float, default=480.0, help="seconds before no new worker is started")
    ap.add_argument("--case-timeout", type=float, default=CASE_TIMEOUT_S,
                    help="seconds one case may run before its worker is killed and the case counts as hung")
    ap.add_argument("--case", type=int, help="run one case in this process and print it")
    ap.add_argument("--show", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ids", default="", help=argparse.SUPPRESS)


def failures(out_path: str) -> int:
    """How many records of a run's output failed."""
    with open(out_path) as f:
        return sum(1 for line in f if json.loads(line)["outcome"] in FAILURES)


class _Worker:
    """One worker process, its cases, what it has said so far and the case it is in."""

    def __init__(self, proc: subprocess.Popen, cases: list[int]) -> None:
        self.proc, self.cases = proc, cases
        self.pending = b""  # the bytes of a line not yet ended
        self.started: int | None = None  # the case it is in (a "start" line without its record yet)
        self.since = time.monotonic()  # when that case started (or the worker, before its first case)
        self.killed = False


def run_all(module: str, make_case: Callable[[int, int], dict], tag: str, seed: int, n: int, workers: int,
            out_path: str | None, timeout: float, case_timeout: float = CASE_TIMEOUT_S,
            command: Callable[[list[int]], list[str]] | None = None) -> dict[int, dict]:
    """Cases 0..n-1 over ``workers`` processes of ``python -m <module> --worker`` (or ``command(cases)``); returns
    case -> record (and writes them as JSON lines to ``out_path``). No new worker starts after ``timeout``
    seconds. The workers' output is read as it comes (one selector over every pipe, so a chatty worker stalls no
    other); a case that has no record ``case_timeout`` seconds after it started is killed with its worker and
    recorded as "timeout" (printed on stderr), and the worker's other cases go to a fresh one."""
    chunks = [list(range(n))[i::workers] for i in range(workers)]
    results: dict[int, dict] = {}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sel = selectors.DefaultSelector()

    def default_command(cases: list[int]) -> list[str]:
        return [sys.executable, "-m", module, "--worker", "--seed", str(seed), "--ids", ",".join(map(str, cases))]

    def spawn(cases: list[int]) -> None:
        if cases:
            proc = subprocess.Popen((command or default_command)(cases), stdout=subprocess.PIPE, env=env)
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            sel.register(proc.stdout, selectors.EVENT_READ, _Worker(proc, cases))

    def failed(case: int, outcome: str, reason: str) -> None:
        results[case] = {"case": case, tag: make_case(seed, case)[tag], "outcome": outcome, "reason": reason}

    def on_line(w: _Worker, line: bytes) -> None:
        try:
            rec = json.loads(line)
        except ValueError:  # not a record (a library writing to stdout): not ours to parse
            return
        if not isinstance(rec, dict):
            return
        if "start" in rec:
            w.started, w.since = rec["start"], time.monotonic()
        elif "case" in rec:
            results[rec["case"]] = rec
            w.started, w.since = None, time.monotonic()

    def finish(w: _Worker) -> None:
        assert w.proc.stdout is not None
        sel.unregister(w.proc.stdout)
        w.proc.stdout.close()
        rc = w.proc.wait()
        if w.started is not None and w.started not in results:  # it died inside this case
            failed(w.started, "died", f"worker exit status {rc}")
        rest = [c for c in w.cases if c not in results]
        if rest and time.monotonic() < deadline:
            spawn(rest)

    def kill_if_hung(w: _Worker) -> None:
        if w.killed or time.monotonic() - w.since <= case_timeout:
            return
        case = w.started if w.started is not None else next((c for c in w.cases if c not in results), None)
        w.killed = True
        w.proc.kill()  # its pipe ends: finish() hands the other cases to a fresh worker
        if case is None:
            return
        why = (f"no result {case_timeout:g} s after it started" if w.started is not None else
               f"its worker said nothing for {case_timeout:g} s before starting it")
        failed(case, "timeout", f"{why}: the worker was killed")
        print(f"fuzz: case {case} ({tag} {results[case][tag]}) timed out: {why}; worker pid {w.proc.pid} killed",
              file=sys.stderr, flush=True)

    for chunk in chunks:
        spawn(chunk)
    deadline = time.monotonic() + timeout
    while sel.get_map():
        for key, _ in sel.select(timeout=min(1.0, case_timeout)):
            w = key.data
            try:
                data = os.read(key.fd, 1 << 16)
            except BlockingIOError:  # woken with nothing to read after all
                continue
            if not data:
                if w.pending:
                    on_line(w, w.pending)
                finish(w)
                continue
            *lines, w.pending = (w.pending + data).split(b"\n")
            for line in lines:
                on_line(w, line)
        for key in list(sel.get_map().values()):
            kill_if_hung(key.data)
    sel.close()
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
        if r["outcome"] in FAILURES:
            lines.append(f"  case {r['case']} ({describe(r)}): {r['outcome']}: {r.get('reason')} {r.get('plan', '')}")
    return "\n".join(lines)


def without_a_gpu() -> None:
    """Make cuDNN finalize descriptors on a machine with no driver, as the CPU tests do: the test-only libcuda stub
    of ``tests/support`` (source tree; nothing is done where a real driver loads). For the deviceless runs."""
    from tests.support.libcuda_stub import ensure_driver

    ensure_driver()


def deviceless(make_case: Callable[[int, int], dict], run_deviceless: Callable[[dict], dict], tag: str, seed: int,
               n: int) -> int:
    """Cases 0..n-1 in this process, build + validate() only: ``CASE <id>`` before and ``RESULT <id> <tag>
    <outcome> <reason>`` after each (a crash is pinned to the last CASE line)."""
    without_a_gpu()
    for case in range(n):
        spec = make_case(seed, case)
        print(f"CASE {case}", flush=True)
        result = run_deviceless(spec)
        print(f"RESULT {case} {spec[tag]} {result['outcome']} {result.get('reason', '')}".rstrip(), flush=True)
    return 0


def main(module: str, argv: list[str] | None, doc: str | None, out: str, make_case: Callable[[int, int], dict],
         run_case: Callable[[dict], dict], run_deviceless: Callable[[dict], dict], tag: str,
         summary: Callable[[int, str], str], describe: Callable[[dict], str] | None = None) -> int:
    """A fuzzer's command line: the parent run (the default), ``--worker``, ``--deviceless``, ``--case N``."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    add_run_args(ap, out=out)
    ap.add_argument("--deviceless", action="store_true", help="CPU: build and validate() only, in this process")
    args = ap.parse_args(argv)
    if args.worker:
        worker(make_case, run_case, tag, args.seed, [int(x) for x in args.ids.split(",") if x])
        return 0
    if args.deviceless:
        return deviceless(make_case, run_deviceless, tag, args.seed, args.cases)
    if args.case is not None:
        spec = make_case(args.seed, args.case)
        if args.show:
            if describe is not None:
                print(describe(spec))
            print(json.dumps(spec, indent=1))
        print(json.dumps(run_case(spec)))
        return 0
    run_all(module, make_case, tag, args.seed, args.cases, args.workers, args.out, args.timeout, args.case_timeout)
    print(summary(args.seed, args.out))
    return 1 if failures(args.out) else 0
