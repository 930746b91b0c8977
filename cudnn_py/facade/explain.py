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

A graph not yet validated is validated by ``explain()`` (as ``build_operation_graph()`` and
``create_execution_plans()`` do), so that the report can show inference, the lowering and where it stopped; the
report says so (``validated_by_explain``, and a line of the text), since validating creates the planning session.

``explain()`` returns text; ``explain("json")`` a JSON string; ``explain("dot")`` Graphviz text of the IR and of
the lowered graph. ``render_dot(path)`` writes an image when Graphviz's ``dot`` is installed.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from .._generated.names import attr, desc
from ..errors import InvalidValueError, UsageError


def report(g: Any) -> dict:
    """The explain document of a pygraph (a dict of plain values)."""
    from ..backend import versions
    from ..errors import version_string
    from ..plans.errata import applicable, op_kinds

    doc: dict[str, Any] = {"graph": g.name}
    try:
        if not g.is_validated:
            doc["validated_by_explain"] = True
            g.validate()
    except Exception as e:
        doc["error"] = f"validate: {type(e).__name__}: {e}"
    doc["ir"] = g.inspect()  # after validation: with the inferred dims and types
    engines = [dict(e) for e in getattr(g, "_engine_report", [])]
    for i, plan in getattr(g, "_compiled", {}).items():  # built python plans: their identity and layout
        describe = getattr(plan, "describe", None)
        if describe is not None:
            engines.append({"engine": plan.name, "built_plan": i, **describe()})
    if engines:
        doc["python_engines"] = engines
    session = g._session
    known: list = []  # the errata of the loaded cuDNN
    try:
        version = versions.runtime_version()
        known = applicable(version)
        # those about the graph's ops (the user's nodes and, once prepared, the program's)
        kinds = op_kinds(g, getattr(session, "program", None))
        errata = [{"id": x.id, "versions": x.versions, "effect": x.effect} for x in known if x.concerns(kinds)]
        doc["cudnn"] = {"version": version, "version_string": version_string(version), "errata": errata,
                        "errata_about_other_ops": len(known) - len(errata)}
    except Exception as e:
        doc["cudnn"] = {"error": str(e)}
    if session is None:
        return doc
    doc["phase"] = session.phase.name
    doc["not_checked_by_validate"] = list(session.deferred_checks)
    if session.program is not None:
        doc["lowered_ir"] = session.program.to_dict()
        # read, not re-run: which errata of the loaded cuDNN this program matches (validate refuses the first)
        try:
            doc["cudnn"]["errata_matched"] = [{"id": x.id, "where": where, "gpus": x.gpus} for x in known
                                              if (where := x.match(session.program)) is not None]
        except Exception as e:
            doc["cudnn"]["errata_matched_error"] = str(e)
    if session.lowered is not None:
        doc["descriptors"] = [_descriptor(d) for d in _all_descriptors(session.lowered)]
        doc["operation_graph_handle"] = session.lowered.handle
        doc["backend_operations"] = [{"id": d.id, "node": name}
                                     for d, name in zip(session.lowered.operations, session.lowered.op_names)]
    configs = list(session.configs)  # first: the heuristics modes a query deferred are asked now (plans/session.py)
    doc["heuristics"] = [{"mode": m, "result": r} for m, r in session.heuristics_report]
    ranked = [(m, [c.name for c in by_mode]) for m, by_mode in getattr(session, "heuristics_ranked", [])]
    for h in doc["heuristics"]:
        h["configs"] = next((names for m, names in ranked if m == h["mode"]), [])
    doc["engine_configs"] = [_config(session, i, c) for i, c in enumerate(configs)]
    for c in doc["engine_configs"]:  # the rank each mode gave it (a config several modes returned is kept once)
        c["rank_by_mode"] = {m: names.index(c["name"]) for m, names in ranked if c["name"] in names}
    disk = getattr(session, "disk", None)  # plans/disk_planning.py: what the disk cache gave this graph
    if disk is not None and disk.lines:
        doc["disk_cache"] = list(disk.lines)
    doc["default_plan"] = session.candidate
    if session.candidate is not None and session.candidate < len(configs):
        doc["default_plan_name"] = configs[session.candidate].name
    if session.executor is not None:  # plans/execute_replay.py: whether repeated executes are replayed, and how often
        doc["execute_replay"] = session.executor.replays.stats()
    return doc


def _all_descriptors(lowered: Any) -> list:
    """Every descriptor reachable from the lowered graph, in a stable order (tensors, operations, their parts)."""
    # a loop over a stack, not a recursive nested function: that one refers to itself through its closure cell,
    # a cycle that kept every descriptor it had seen alive until the cyclic collector ran
    seen: dict[int, Any] = {}
    stack = list(lowered.descriptors())
    while stack:  # (the order of the visit does not matter: the result is sorted)
        d = stack.pop()
        if d.id in seen:
            continue
        seen[d.id] = d
        for kept in d._keepalive.values():
            stack.extend(x for x in (kept if isinstance(kept, list) else [kept])
                         if hasattr(x, "kind") and hasattr(x, "_keepalive"))
    return sorted(seen.values(), key=lambda d: d.id)


def _descriptor(d: Any) -> dict:
    return {"id": d.id, "kind": d.kind.name, "finalized": d.finalized, "destroyed": d.destroyed,
            "attributes": dict(d.attributes)}


def _knob_name(knob_type: int) -> str:
    from ..backend.enums import enum_class

    try:
        return enum_class("cudnnBackendKnobType_t")(knob_type).name
    except ValueError:  # a knob newer than the bindings
        return str(knob_type)


def _config(session: Any, i: int, c: Any) -> dict:
    entry = {"rank": i, "name": c.name, "source": c.source, "engine_id": c.engine_index,
             "knobs": {_knob_name(t): v for t, v in c.knobs}}
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
        entry["plan_source"] = plan.source  # finalized, deserialized, or rebuilt by the plan cache / disk cache
        entry["plan_origin"] = _origin(plan.source)
    return entry


def _origin(source: str) -> str:
    """Where a plan came from, in a few words: built, in-process plan cache, disk cache, deserialized."""
    from ..plans import disk_planning, plan_cache

    return {"finalized": "built", plan_cache.REBUILT: "in-process plan cache", disk_planning.DISK: "disk cache"}.get(
        source, source)


def formatted(doc: dict, format: str) -> str:
    """The report as ``format``: "text", "json" or "dot" (Graphviz)."""
    if format == "json":
        return json.dumps(doc, indent=1, default=str)
    if format == "dot":
        return dot(doc)
    if format != "text":
        raise InvalidValueError(f"explain(format=...) takes 'text', 'json' or 'dot', not {format!r}")
    return text(doc)


def text(doc: dict) -> str:
    out = [f"graph {doc['graph']!r}"]
    cud = doc.get("cudnn", {})
    if "version" in cud:
        other = cud.get("errata_about_other_ops", 0)
        out.append(f"cuDNN {cud['version_string']}; errata about this graph's ops: " +
                   (", ".join(e["id"] for e in cud["errata"]) or "none") +
                   (f" ({other} more about other ops: python -m cudnn_py info --errata)" if other else ""))
    for m in cud.get("errata_matched", []):
        gpus = "" if m.get("gpus", "every GPU") == "every GPU" else f" (on {m['gpus']})"
        out.append(f"erratum {m['id']} matches this graph{gpus}: {m['where']}")
    if doc.get("validated_by_explain"):
        out.append("not validated before explain(): explain() ran validate()")
    if "error" in doc:
        out.append(f"STOPPED: {doc['error']}")
    if "phase" in doc:
        out.append(f"phase: {doc['phase']}")
    if doc.get("python_engines"):
        out.append("cudnn_py engines (runtime-compiled):")
        for e in doc["python_engines"]:
            if "built_plan" in e:
                out.append(f"  plan {e['built_plan']}: {e['engine']} {e.get('identity')}, {e.get('rows')} rows of "
                           f"{e.get('n')}, fusions {e.get('fusions')}, grid {e.get('grid')} x {e.get('threads')}")
            else:
                state = f"declined: {e['declined']}" if "declined" in e else f"plans {', '.join(e['plans'])}"
                out.append(f"  {e['engine']} (id {e['engine_id']}, version {e['version']}): {state}")
    if doc.get("not_checked_by_validate"):
        out.append("not checked by validate() (later phases run these):")
        out += [f"  - {line}" for line in doc["not_checked_by_validate"]]
    out.append("\nIR as built:")
    by_uid = {t["uid"]: t for t in doc["ir"]["tensors"]}  # once per list: a node line looks its tensors up
    out += [f"  {_node_line(n, by_uid)}" for n in doc["ir"]["nodes"]]
    low = doc.get("lowered_ir")
    if low:
        out.append("\nIR as lowered (after the passes):")
        low_by_uid = {t["uid"]: t for t in low["tensors"]}
        out += [f"  {_node_line(n, low_by_uid)}" for n in low["nodes"]]
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
    if doc.get("disk_cache"):
        out.append("\ndisk cache (plans built by earlier processes):")
        out += [f"  {line}" for line in doc["disk_cache"]]
    if doc.get("engine_configs"):
        out.append("\nengine configs (rank: name (mode#rank in that mode), workspace, notes, knobs -> plan):")
        for c in doc["engine_configs"]:
            notes = ",".join(c.get("numerical_notes", []) + c.get("behavior_notes", []))
            default = "  <- default" if c["rank"] == doc.get("default_plan") else ""
            why = c.get("failure") or c.get("filtered_because") or ""
            knobs = ",".join(f"{k.replace('CUDNN_KNOB_TYPE_', '')}={v}" for k, v in c["knobs"].items())
            ranks = ", ".join(f"{m.replace('CUDNN_HEUR_MODE_', '')}#{r}" for m, r in c.get("rank_by_mode", {}).items())
            out.append(f"  {c['rank']}: {c['name']} ({ranks or c['source']}), ws {c.get('workspace', '?')}, "
                       f"[{notes}], knobs {{{knobs}}} -> {c['plan']}{': ' + why if why else ''}"
                       f"{' [' + c['plan_origin'] + ']' if c.get('plan_origin', 'built') != 'built' else ''}"
                       f"{default}")
    if doc.get("default_plan") is not None:
        out.append(f"\ndefault plan: {doc['default_plan']} ({doc.get('default_plan_name', '?')})")
    replay = doc.get("execute_replay")
    if replay is not None:
        if replay["enabled"]:
            memsets = replay.get("memsets_as_kernels")
            line = (f"on: {replay['captures']} recorded, {replay['launches']} launches"
                    + (f", memset nodes as kernel nodes: {memsets}" if memsets else "")
                    + (f", memset nodes kept ({replay['memsets_off']})" if replay.get("memsets_off") else "")
                    + "".join(f"; {why}" for why in replay["refused_plans"].values())
                    + "".join(f"; memsets kept: {why}" for why in replay.get("memsets_kept", ())))
        else:
            line = f"off: {replay['refusal']}"
        out.append(f"\nexecute replay (a repeated execute launched as a CUDA graph): {line}")
    return "\n".join(out)


def _node_line(n: dict, by_uid: dict) -> str:

    def t(uid: int) -> str:
        x = by_uid.get(uid, {})
        kind = "virtual " if x.get("is_virtual") else ("scalar " if x.get("is_pass_by_value") else "")
        return f"{x.get('name') or uid}#{uid}:{kind}{x.get('data_type', '?').replace('data_type.', '')}{x.get('dim')}"

    ins = ", ".join(f"{p}={t(u)}" for p, u in n["inputs"].items())
    outs = ", ".join(f"{p}={t(u)}" for p, u in n["outputs"].items())
    mode = n["params"].get("mode", "")
    return f"{n['name']}: {n.get('method') or n['op']}{' ' + str(mode) if mode else ''}({ins}) -> {outs}"


def _tensor_refs(value: Any) -> list[int]:
    """Descriptor ids of the TENSOR descriptors an attribute value (as shown: "#12:TENSOR") refers to."""
    values = value if isinstance(value, list) else [value]
    return [int(v[1:].split(":")[0]) for v in values if isinstance(v, str) and v.startswith("#") and
            v.endswith(":TENSOR")]


def backend_graph(doc: dict) -> dict:
    """The lowered operation graph as cuDNN sees it: every operation descriptor (in OPERATIONGRAPH_OPS order) with
    the tensor descriptors it reads and writes, by attribute. A tensor is written by an operation when it is an
    output of the IR node the operation was lowered from, or, for tensors internal to a node lowered to several
    operations, by the first operation that refers to it."""
    by_id = {d["id"]: d for d in doc.get("descriptors", [])}
    nodes = {n["name"]: n for n in doc.get("lowered_ir", {}).get("nodes", [])}
    tensors = {i: d for i, d in by_id.items() if d["kind"] == desc.TENSOR_DESCRIPTOR}
    seen: set[int] = set()
    ops = []
    for op in doc.get("backend_operations", []):
        d = by_id[op["id"]]
        node = nodes.get(op["node"], {"inputs": {}, "outputs": {}})
        node_in, node_out = set(node["inputs"].values()), set(node["outputs"].values())
        reads, writes = {}, {}
        for name, value in d["attributes"].items():
            for ref in _tensor_refs(value):
                uid = tensors[ref]["attributes"].get(attr.TENSOR_UNIQUE_ID) if ref in tensors else None
                short = name.rsplit("_", 1)[-1] if name.endswith("DESC") else name.replace("CUDNN_ATTR_OPERATION_", "")
                if uid in node_out or (uid not in node_in and ref not in seen):
                    writes[short] = ref
                else:
                    reads[short] = ref
                seen.add(ref)
        ops.append({"id": d["id"], "kind": d["kind"], "node": op["node"], "reads": reads, "writes": writes})
    return {"operations": ops, "tensors": {i: {"uid": t["attributes"].get(attr.TENSOR_UNIQUE_ID),
                                               "virtual": bool(t["attributes"].get(attr.TENSOR_IS_VIRTUAL)),
                                               "data_type": t["attributes"].get(attr.TENSOR_DATA_TYPE),
                                               "dims": t["attributes"].get(attr.TENSOR_DIMENSIONS)}
                                           for i, t in tensors.items()}}


def _backend_cluster(doc: dict) -> list[str]:
    graph = backend_graph(doc)
    if not graph["operations"]:
        return []
    lines = ['  subgraph cluster_o { label="backend operation graph (descriptors)";']
    used = {ref for op in graph["operations"] for ref in [*op["reads"].values(), *op["writes"].values()]}
    for ref in sorted(used):
        t = graph["tensors"].get(ref, {})
        style = "shape=ellipse" + (", style=dashed" if t.get("virtual") else "")
        dtype = str(t.get("data_type", "?")).replace("CUDNN_DATA_", "")
        label = f"#{ref} uid {t.get('uid')}\n{dtype}{t.get('dims')}"
        lines.append(f"    od{ref} [{style}, label={json.dumps(label)}];")
    for op in graph["operations"]:
        kind = op["kind"].removeprefix("CUDNN_BACKEND_OPERATION_").removesuffix("_DESCRIPTOR")
        label = f"#{op['id']} {kind}\n({op['node']})"
        lines.append(f"    od{op['id']} [shape=box, style=filled, fillcolor=lightblue, label={json.dumps(label)}];")
        lines += [f"    od{ref} -> od{op['id']} [label={json.dumps(a)}];" for a, ref in op["reads"].items()]
        lines += [f"    od{op['id']} -> od{ref} [label={json.dumps(a)}];" for a, ref in op["writes"].items()]
    lines.append("  }")
    return lines


def dot(doc: dict) -> str:
    """Graphviz text: the IR as built and, where they exist, the IR as lowered and the backend operation graph (its
    operation and tensor descriptors), as three clusters."""
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
    lines += _backend_cluster(doc)
    lines.append("}")
    return "\n".join(lines)


def render_dot(doc: dict, path: str) -> str:
    """Write the Graphviz rendering to ``path`` (the format from its extension); needs Graphviz's ``dot``."""
    exe = shutil.which("dot")
    if exe is None:
        raise UsageError("Graphviz's `dot` is not installed: use explain('dot') for the text")
    fmt = path.rsplit(".", 1)[-1] if "." in path else "svg"
    cmd = [exe, f"-T{fmt}", "-o", path]
    try:
        done = subprocess.run(cmd, input=dot(doc), text=True, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UsageError(f"render_dot: `{' '.join(cmd)}` did not run: {e}") from None
    if done.returncode != 0:
        raise UsageError(f"render_dot: `{' '.join(cmd)}` failed with exit status {done.returncode}: "
                           f"{done.stderr.strip() or '(no message on stderr)'}")
    return path
