"""Serialized plans of the norm forward engine: what ``serialize()`` keeps of a plan on it, and how
``deserialize()`` makes that plan again in another process.

The record is the matched problem (``match.NormProblem``: the op, the phase, which tensor plays which role, the
fusions, epsilon, the SiLU's beta). The graph is not read back from a document of nodes: :func:`rebuild` makes it
again with ``pygraph``'s own builders from the problem and the serialized tensor records (uid, name, dims, strides,
data type, alignment, by-value scalar), infers and checks it, and matches it again; the rebuilt graph's problem must
equal the recorded one field for field. So a blob edited by hand can only describe a graph that the builders,
inference and the matcher accept, and the kernel the plan then compiles (or finds in the kernel files) is the one
that graph needs. The engine's version (a hash of the kernel source) is checked by the caller before anything is
rebuilt.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from ...backend import json_check
from ...enums import data_type, norm_forward_phase
from ...errors import InvalidValueError
from .match import NormProblem, match

ROLES = ("x", "r", "s", "w", "b", "y", "z")  # the operands, as NormProblem names them
_STATS = ("mean", "rstd")
_FIELDS = ("rms", "train", "n", "rows", *ROLES, *_STATS, "eps_uid", "eps_value", "eps_on_device", "beta")


def record(problem: NormProblem) -> dict[str, Any]:
    """The problem as JSON values (what the record holds and what a rebuilt graph must match)."""
    return json.loads(json.dumps(dataclasses.asdict(problem)))


def _checked(doc: Any, tensors: dict[int, Any]) -> dict[str, Any]:
    """The record's fields, typed and pointing only at serialized tensors (before any builder sees them)."""
    c = json_check.Checker("serialized plan: engine record")
    doc = c.obj(doc, "record", _FIELDS)
    for key in doc:
        if key not in _FIELDS:
            raise c.fail(json_check.join("record", key), "unknown field")
    out: dict[str, Any] = {"rms": c.bool_(doc["rms"], "record.rms"), "train": c.bool_(doc["train"], "record.train")}

    def uid(v: Any, path: str) -> int:
        u = c.int_(v, path, 0, json_check.INT64_MAX)
        if u not in tensors:
            raise c.fail(path, f"uid {u} has no tensor record")
        return u

    for role in ROLES:
        v = doc[role]
        if v is None:
            if role in ("x", "w"):
                raise c.fail(f"record.{role}", "missing")
            out[role] = None
            continue
        v = c.obj(v, f"record.{role}", ("uid",))
        out[role] = uid(v["uid"], f"record.{role}.uid")
    for stat in _STATS:
        out[stat] = None if doc[stat] is None else uid(doc[stat], f"record.{stat}")
    out["eps_uid"] = uid(doc["eps_uid"], "record.eps_uid")
    out["eps_on_device"] = c.bool_(doc["eps_on_device"], "record.eps_on_device")
    beta = c.number(doc["beta"], "record.beta")
    if not math.isfinite(beta):
        raise c.fail("record.beta", f"{beta} is not finite")
    out["beta"] = beta
    return out


def rebuild(graph: Any, doc: Any, tensors: dict[int, Any]) -> None:
    """Build the recorded norm graph into the empty ``graph`` (a ``pygraph``) from ``tensors`` (uid ->
    ``plans.serialize.TensorRecord``) and validate it; InvalidValueError where the rebuilt graph is not the
    recorded problem."""
    r = _checked(doc, tensors)

    def declared(uid: int, *, output: Any = None) -> Any:
        t = tensors[uid]
        kw = dict(name=t.name, dim=list(t.dim), stride=list(t.stride), data_type=t.data_type, uid=uid,
                  alignment=t.alignment)
        if output is None:
            if t.is_pass_by_value:
                kw["is_pass_by_value"] = True
                if t.pass_by_value is not None:
                    kw["pass_by_value"] = t.pass_by_value
            return graph.tensor(**kw)
        output.set_output(True).set_name(t.name).set_dim(list(t.dim)).set_stride(list(t.stride))
        output.set_data_type(t.data_type).set_uid(uid).set_alignment(t.alignment)
        return output

    fp32 = data_type.FLOAT
    x = declared(r["x"])
    h = x
    if r["r"] is not None:
        h = graph.add(x, declared(r["r"]), compute_data_type=fp32)
        if r["s"] is not None:
            declared(r["s"], output=h)
        else:
            h.set_data_type(fp32)
    phase = norm_forward_phase.TRAINING if r["train"] else norm_forward_phase.INFERENCE
    w = declared(r["w"])
    b = declared(r["b"]) if r["b"] is not None else None
    eps = declared(r["eps_uid"])
    norm = graph.rmsnorm if r["rms"] else graph.layernorm
    outs = norm(phase, h, w, b, eps, compute_data_type=fp32)
    y = outs[0]
    stats = [t for t in outs[1:] if t is not None]
    wanted = [u for u in (r["mean"], r["rstd"]) if u is not None] if not r["rms"] else [r["rstd"]]
    if r["train"] and len(stats) == len(wanted):
        for t, u in zip(stats, wanted):
            if u is not None:
                declared(u, output=t)
    if r["y"] is not None:
        declared(r["y"], output=y)
    else:
        y.set_data_type(fp32)
    if r["z"] is not None:
        declared(r["z"], output=graph.swish(y, swish_beta=r["beta"], compute_data_type=fp32))
    graph.validate_ir()  # (not cuDNN's validation: the graph runs on this engine, which matches it next)
    rebuilt = record(match(graph))
    if rebuilt != json.loads(json.dumps(doc)):
        diff = sorted(k for k in _FIELDS if rebuilt.get(k) != doc.get(k))
        raise InvalidValueError(f"serialized plan: the engine record does not describe the graph its tensors make "
                                f"(fields {diff} differ)")
