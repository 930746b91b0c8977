"""``pygraph.explain()``: everything cudnn_py did with a graph, for people debugging backend behaviour.

One report, built from what the graph and its planning session hold (nothing is re-run):

* the IR as built (nodes, tensors) and as lowered (the program after the IR passes, with the passes' log);
* every backend descriptor of the lowered graph - tensors, operations and the descriptors they reference - with
  the attributes set on it;
* the heuristics queries (per mode), and every engine config: its rank, the mode it came from, engine id, knobs,
  numerical and behavior notes, workspace, and whether its plan built, failed (the backend's reason) or was
  filtered out (and why); the default plan;
* the errata of the loaded cuDNN and whether one refused the graph;
* where validation or planning stopped, the error.

``explain()`` returns text; ``explain("json")`` a JSON string; ``explain("dot")`` Graphviz text of the IR and of
the lowered graph. ``render_dot(path)`` writes an image when Graphviz's ``dot`` is installed.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any


def report(g: Any) -> dict:
    """The explain document of a pygraph (a dict of plain values)."""
    from ..backend import versions
    from ..errors import version_string
    from ..plans.errata import applicable

    doc: dict[str, Any] = {"graph": g.name}
    try:
        if not g.is_validated:
            g.validate()
    except Exception as e:
        doc["error"] = f"validate: {type(e).__name__}: {e}"
    doc["ir"] = g.inspect()  # after validation: with the inferred dims and types
    session = g._session
    try:
        version = versions.runtime_version()
        errata = [{"id": x.id, "versions": x.versions, "effect": x.effect} for x in applicable(version)]
        doc["cudnn"] = {"version": version, "version_string": version_string(version), "errata": errata}
    except Exception as e:
        doc["cudnn"] = {"error": str(e)}
    if session is None:
        return doc
    doc["phase"] = session.phase.name
    if session.program is not None:
        doc["lowered_ir"] = session.program.to_dict()
    if session.lowered is not None:
        doc["descriptors"] = [_descriptor(d) for d in _all_descriptors(session.lowered)]
        doc["operation_graph_handle"] = session.lowered.handle
    doc["heuristics"] = [{"mode": m, "result": r} for m, r in session.heuristics_report]
    doc["engine_configs"] = [_config(session, i, c) for i, c in enumerate(session.configs)]
    doc["default_plan"] = session.candidate
    return doc


def _all_descriptors(lowered: Any) -> list:
    """Every descriptor reachable from the lowered graph, in a stable order (tensors, operations, their parts)."""
    seen: dict[int, Any] = {}

    def visit(d: Any) -> None:
        if d.id in seen:
            return
        seen[d.id] = d
        for kept in d._keepalive.values():
            for x in kept if isinstance(kept, list) else [kept]:
                if hasattr(x, "kind") and hasattr(x, "_keepalive"):
                    visit(x)

    for d in lowered.descriptors():
        visit(d)
    return sorted(seen.values(), key=lambda d: d.id)


def _descriptor(d: Any) -> dict:
    return {"id": d.id, "kind": d.kind.name, "finalized": d.finalized, "destroyed": d.destroyed,
            "attributes": dict(d.attributes)}


def _config(session: Any, i: int, c: Any) -> dict:
    entry = {"rank": i, "name": c.name, "source": c.source, "engine_id": c.engine_index,
             "knobs": {str(t): v for t, v in c.knobs}}
    try:
        entry["numerical_notes"] = [n.name for n in c.numerical_notes]
        entry["behavior_notes"] = [n.name for n in c.behavior_notes]
        entry["workspace"] = c.workspace
    except Exception as e:
        entry["notes_error"] = str(e)
    plan = session.plans.get(i)
    entry["plan"] = ("built" if plan is not None else "failed" if i in session.failures else
                     "filtered out" if i in session.barred else "not built")
    if i in session.failures:
        entry["failure"] = session.failures[i]
    if i in session.barred:
        entry["filtered_because"] = session.barred[i]
    if plan is not None:
        entry["plan_workspace"] = plan.workspace
    return entry


def text(doc: dict) -> str:
    out = [f"graph {doc['graph']!r}"]
    cud = doc.get("cudnn", {})
    if "version" in cud:
        out.append(f"cuDNN {cud['version_string']}; errata that apply: " +
                   (", ".join(e["id"] for e in cud["errata"]) or "none"))
    if "error" in doc:
        out.append(f"STOPPED: {doc['error']}")
    if "phase" in doc:
        out.append(f"phase: {doc['phase']}")
    out.append("\nIR as built:")
    out += [f"  {_node_line(n, doc['ir']['tensors'])}" for n in doc["ir"]["nodes"]]
    low = doc.get("lowered_ir")
    if low:
        out.append("\nIR as lowered (after the passes):")
        out += [f"  {_node_line(n, low['tensors'])}" for n in low["nodes"]]
        out += [f"  pass: {line}" for line in low["log"]]
    if doc.get("descriptors"):
        out.append(f"\nbackend descriptors ({len(doc['descriptors'])}):")
        for d in doc["descriptors"]:
            attrs = ", ".join(f"{k.replace('CUDNN_ATTR_', '')}={v}" for k, v in d["attributes"].items())
            state = "finalized" if d["finalized"] else "not finalized"
            out.append(f"  #{d['id']} {d['kind'].replace('CUDNN_BACKEND_', '')} ({state}): {attrs}")
    if doc.get("heuristics"):
        out.append("\nheuristics:")
        out += [f"  {h['mode']}: {h['result']}" for h in doc["heuristics"]]
    if doc.get("engine_configs"):
        out.append("\nengine configs (rank: name, from, workspace, notes -> plan):")
        for c in doc["engine_configs"]:
            notes = ",".join(c.get("numerical_notes", []) + c.get("behavior_notes", []))
            default = "  <- default" if c["rank"] == doc.get("default_plan") else ""
            why = c.get("failure") or c.get("filtered_because") or ""
            out.append(f"  {c['rank']}: {c['name']} ({c['source']}), ws {c.get('workspace', '?')}, [{notes}] -> "
                       f"{c['plan']}{': ' + why if why else ''}{default}")
    return "\n".join(out)


def _node_line(n: dict, tensors: list) -> str:
    by_uid = {t["uid"]: t for t in tensors}

    def t(uid: int) -> str:
        x = by_uid.get(uid, {})
        kind = "virtual " if x.get("is_virtual") else ("scalar " if x.get("is_pass_by_value") else "")
        return f"{x.get('name') or uid}#{uid}:{kind}{x.get('data_type', '?').replace('data_type.', '')}{x.get('dim')}"

    ins = ", ".join(f"{p}={t(u)}" for p, u in n["inputs"].items())
    outs = ", ".join(f"{p}={t(u)}" for p, u in n["outputs"].items())
    mode = n["params"].get("mode", "")
    return f"{n['name']}: {n.get('method') or n['op']}{' ' + str(mode) if mode else ''}({ins}) -> {outs}"


def dot(doc: dict) -> str:
    """Graphviz text: the IR as built and, where it exists, as lowered, as two clusters."""
    lines = ["digraph cudnn_py {", "  rankdir=LR; node [fontname=Helvetica, fontsize=10];"]
    for key, label in (("ir", "IR as built"), ("lowered_ir", "IR as lowered")):
        part = doc.get(key)
        if not part:
            continue
        p = "b" if key == "ir" else "l"
        lines.append(f"  subgraph cluster_{p} {{ label={json.dumps(label)};")
        for t in part["tensors"]:
            style = "shape=ellipse" + (", style=dashed" if t.get("is_virtual") else "")
            text_ = f"{t.get('name') or t['uid']}\n{t['data_type'].replace('data_type.', '')}{t['dim']}"
            lines.append(f"    {p}t{t['uid']} [{style}, label={json.dumps(text_)}];")
        for i, n in enumerate(part["nodes"]):
            label = f"{n['name']}\n{n.get('method') or n['op']}"
            lines.append(f"    {p}n{i} [shape=box, style=filled, fillcolor=lightgrey, label={json.dumps(label)}];")
            lines += [f"    {p}t{u} -> {p}n{i} [label={json.dumps(port)}];" for port, u in n["inputs"].items()]
            lines += [f"    {p}n{i} -> {p}t{u};" for u in n["outputs"].values()]
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


def render_dot(doc: dict, path: str) -> str:
    """Write the Graphviz rendering to ``path`` (the format from its extension); needs Graphviz's ``dot``."""
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError("Graphviz's `dot` is not installed: use explain('dot') for the text")
    fmt = path.rsplit(".", 1)[-1] if "." in path else "svg"
    subprocess.run([exe, f"-T{fmt}", "-o", path], input=dot(doc), text=True, check=True, timeout=60)
    return path
