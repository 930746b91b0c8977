"""Compact table of probe.jsonl: one row per (case, library, graph)."""
from __future__ import annotations

import json
import sys

rows = [json.loads(line, strict=False) for line in open(sys.argv[1]) if line.strip()]
order: dict[str, int] = {}
for r in rows:
    order.setdefault(r["case"], len(order))
rows.sort(key=lambda r: (order[r["case"]], r["lib"]))
print(f"{'case':34} {'lib':15} {'graph':9} {'outcome':8} {'rel_err':44} plan / reason")
last = None
for r in rows:
    if r["case"] != last:
        chk = next((x.get("erratum_check") for x in rows if x["case"] == r["case"] and x["lib"] == "ours"), None)
        print(f"--- {r['case']}  [erratum {r.get('erratum')}]" + (f"  ours' table: {chk}" if chk else ""))
        last = r["case"]
    graphs = r.get("graphs") or {"-": {"status": r.get("outcome"), "reason": r.get("reason", "")}}
    for tag, g in graphs.items():
        errs = " ".join(f"{k}={v:.3g}" for k, v in (g.get("rel_err") or {}).items())
        if g.get("unwritten"):
            errs += " NaN:" + ",".join(f"{k}={v}" for k, v in g["unwritten"].items())
        info = g.get("plan") or ""
        if g.get("engine"):
            info += f"  {g['engine']}"
        if g.get("per_slice"):
            info += "  per-batch " + " ".join(f"{v:.2g}" for s in g["per_slice"].values() for v in s)
        if g.get("reason") or r.get("reason"):
            info += "  " + (g.get("reason") or r.get("reason"))[:220]
        lib = r["lib"] + (f"[e{r['forced_engine']}]" if r.get("forced_engine") is not None else "")
        print(f"{'':34} {lib:15} {tag:9} {g.get('status', r.get('outcome')):8} {errs:44} {info}")
