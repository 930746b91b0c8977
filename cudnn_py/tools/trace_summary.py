"""``python -m cudnn_py trace summary FILE``: what a trace says, at a glance.

Calls by C function and by descriptor kind, the time spent per phase of a graph's life (build: tensor, operation
and operation-graph descriptors and handles; heuristics: ENGINEHEUR queries and reading engine configs; plan
finalize: EXECUTION_PLAN finalizes, where kernels compile; execute), and every failed call with the backend's own
message (``cudnnGetLastErrorString``, which cudnn_py records after a failure). A call with no end record is the
one a crashed process died in.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from .._generated.names import desc

_HEURISTICS_KINDS = {desc.ENGINEHEUR_DESCRIPTOR, desc.ENGINECFG_DESCRIPTOR,
                     desc.ENGINE_DESCRIPTOR, desc.KNOB_CHOICE_DESCRIPTOR,
                     desc.KNOB_INFO_DESCRIPTOR}

_D_EXECUTION_PLAN_DESCRIPTOR = desc.EXECUTION_PLAN_DESCRIPTOR  # compared per call: bound once


def phase_of(call: dict) -> str:
    fn, kind = call.get("fn", ""), call.get("kind", "")
    if fn == "cudnnBackendExecute":
        return "execute"
    if kind == _D_EXECUTION_PLAN_DESCRIPTOR and fn == "cudnnBackendFinalize":
        return "plan finalize"
    if kind in _HEURISTICS_KINDS:
        return "heuristics"
    if fn == "cudnnGetLastErrorString":
        return "errors"
    return "build"


def summarize(calls: list[dict]) -> dict[str, Any]:
    by_fn: Counter = Counter()
    by_kind: Counter = Counter()
    us: dict[str, float] = defaultdict(float)
    failures, open_calls = [], []
    for i, c in enumerate(calls):
        fn = c.get("fn", "?")
        if fn == "cudnnGetLastErrorString":
            continue
        by_fn[fn] += 1
        if c.get("kind"):
            by_kind[c["kind"]] += 1
        us[phase_of(c)] += float(c.get("us") or 0.0)
        if c.get("open"):
            open_calls.append({"seq": c.get("seq"), "fn": fn, "kind": c.get("kind"), "attr": c.get("attr")})
        status = c.get("status")
        if status not in (None, 0):
            nxt = calls[i + 1] if i + 1 < len(calls) else {}
            message = nxt.get("message") if nxt.get("fn") == "cudnnGetLastErrorString" else None
            failures.append({"seq": c.get("seq"), "fn": fn, "kind": c.get("kind"), "attr": c.get("attr"),
                             "status": c.get("status_name", status), "message": message})
    return {"calls": sum(by_fn.values()), "by_function": dict(by_fn.most_common()),
            "by_kind": dict(by_kind.most_common()), "us_by_phase": {k: round(v, 1) for k, v in us.items()},
            "failures": failures, "open": open_calls}


def text(summary: dict[str, Any], name: str = "") -> str:
    out = [f"trace {name}: {summary['calls']} backend call(s)"]
    out.append("time by phase (ms): " + ", ".join(f"{k} {v / 1e3:.3f}" for k, v in summary["us_by_phase"].items()))
    out.append("calls by function:")
    out += [f"  {n:6d}  {fn}" for fn, n in summary["by_function"].items()]
    out.append("calls by descriptor kind:")
    out += [f"  {n:6d}  {k.replace('CUDNN_BACKEND_', '')}" for k, n in summary["by_kind"].items()]
    out.append(f"failures: {len(summary['failures'])}")
    for f in summary["failures"]:
        where = " ".join(x for x in (f["kind"], f["attr"]) if x)
        out.append(f"  #{f['seq']} {f['fn']}({where}): {f['status']}" + (f"; cuDNN says: {f['message']}"
                                                                           if f["message"] else ""))
    if summary["open"]:
        out.append("calls that never returned (the process died in the last one):")
        out += [f"  #{c['seq']} {c['fn']} {c['kind'] or ''} {c['attr'] or ''}".rstrip() for c in summary["open"]]
    return "\n".join(out)
