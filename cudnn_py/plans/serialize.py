"""Serialized plans: everything needed to execute a built cuDNN plan again, in another process, without the
graph that made it.

The blob is UTF-8 JSON (cudnn_py's own format, not the frontend's UBJSON):

* ``format`` / ``version`` - "cudnn_py.plan", 1;
* ``cudnn_version`` - the ``cudnnGetVersion()`` that built it (a plan only loads into the same cuDNN);
* ``plan`` - its name, ``CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION`` and workspace size;
* ``tensors`` - every variant-pack slot: uid, name, dims, strides, data type, alignment, and for pass-by-value
  scalars the value the graph carried, so a deserialized graph checks operands exactly as the original did;
* ``scratch`` - the intermediates the program keeps at the start of the workspace (uid -> bytes; the composite
  attention backward's row sums and dQ accumulator): the variant pack must point them there again;
* ``graph`` - the IR as built (``pygraph.inspect()``), for the record.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..backend import json_check, versions
from ..dtypes import BY_NAME
from ..enums import data_type
from ..errors import InvalidValueError, version_string
from .plan import ExecutionPlan

FORMAT, VERSION = "cudnn_py.plan", 1


@dataclass(eq=False)  # hashed by identity, like IR tensors (the executor keys slots by tensor)
class TensorRecord:
    """What the executor needs of a tensor: a deserialized graph has no IR tensors."""

    uid: int
    name: str
    dim: tuple
    stride: tuple
    data_type: Any
    alignment: int = 16
    is_pass_by_value: bool = False
    pass_by_value: Any = None
    is_virtual: bool = False
    is_compile_time_constant: bool = False

    def to_dict(self) -> dict:
        return {"uid": self.uid, "name": self.name, "dim": list(self.dim), "stride": list(self.stride),
                "data_type": self.data_type.name, "alignment": self.alignment,
                "is_pass_by_value": self.is_pass_by_value, "pass_by_value": self.pass_by_value}

    @classmethod
    def of(cls, t: Any) -> TensorRecord:
        return cls(int(t.uid), str(t.name), tuple(int(d) for d in t.dim), tuple(int(s) for s in t.stride),
                   t.data_type, int(getattr(t, "alignment", 16) or 16), bool(t.is_pass_by_value), t.pass_by_value)

    @classmethod
    def from_dict(cls, d: Any, c: json_check.Checker | None = None, path: str = "tensors[?]") -> TensorRecord:
        """A record of a serialized plan, every field checked for type and range (a blob may be hostile)."""
        c = c or json_check.Checker("serialized plan")
        d = c.obj(d, path, _RECORD_FIELDS)
        for key in d:
            if key not in _RECORD_FIELDS:
                raise c.fail(json_check.join(path, key), "unknown field")
        uid = c.int_(d["uid"], f"{path}.uid", 0, json_check.INT64_MAX)
        name = c.str_(d["name"], f"{path}.name")
        dims = c.list_(d["dim"], f"{path}.dim", 1, json_check.MAX_DIMS)
        for i, x in enumerate(dims):
            c.int_(x, f"{path}.dim[{i}]", 1, json_check.MAX_DIM)
        strides = c.list_(d["stride"], f"{path}.stride", len(dims), len(dims))
        for i, x in enumerate(strides):
            c.int_(x, f"{path}.stride[{i}]", 1, json_check.MAX_DIM)
        dt = BY_NAME.get(d["data_type"]) if isinstance(d["data_type"], str) else None
        if dt is None or dt.backend is None or dt.bits <= 0:
            raise c.fail(f"{path}.data_type", f"{json_check.fmt(d['data_type'])} is not a storage data type")
        if json_check.byte_span(dims, strides, json_check.element_bytes(dt.backend)) > json_check.INT64_MAX:
            raise c.fail(path, f"dims {dims} with strides {strides} span more than 2**63 bytes")
        alignment = c.int_(d["alignment"], f"{path}.alignment", 1, json_check.MAX_ALIGNMENT)
        by_value = c.bool_(d["is_pass_by_value"], f"{path}.is_pass_by_value")
        value = d["pass_by_value"]
        if by_value and value is not None:  # (None: a runtime scalar, given at execute)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise c.fail(f"{path}.pass_by_value", f"{json_check.fmt(value)} is not a number")
            if isinstance(value, int):
                c.int_(value, f"{path}.pass_by_value")
        elif value is not None:
            raise c.fail(f"{path}.pass_by_value", "set on a tensor that is not pass-by-value")
        return cls(uid, name, tuple(dims), tuple(strides), data_type[dt.name], alignment, by_value, value)


_RECORD_FIELDS = ("uid", "name", "dim", "stride", "data_type", "alignment", "is_pass_by_value", "pass_by_value")
MAX_RECORDS = 4096  # variant-pack slots of one plan


def _records(c: json_check.Checker, raw: Any, at_least: int) -> list[TensorRecord]:
    """A blob's tensor records, each checked, no uid twice."""
    records = [TensorRecord.from_dict(d, c, f"tensors[{i}]")
               for i, d in enumerate(c.list_(raw, "tensors", at_least, MAX_RECORDS))]
    seen: set[int] = set()
    for i, r in enumerate(records):
        if r.uid in seen:
            raise c.fail(f"tensors[{i}].uid", f"uid {r.uid} appears twice")
        seen.add(r.uid)
    return records


def dump(plan: ExecutionPlan, tensors: list, graph_doc: dict, scratch: dict[int, int] | None = None) -> bytes:
    doc = {"format": FORMAT, "version": VERSION, "cudnn_version": versions.runtime_version(),
           "plan": {"name": plan.name, "json": plan.to_json(), "workspace": plan.workspace},
           "tensors": [TensorRecord.of(t).to_dict() for t in tensors], "graph": graph_doc,
           "scratch": {str(uid): int(n) for uid, n in (scratch or {}).items()}}
    return json.dumps(doc, sort_keys=True, default=str).encode()


def parse(blob: Any) -> dict:
    """A serialized plan's document: bytes, a list of byte values as ``serialize()`` returns, or str, parsed within
    the bounds of ``json_check`` and carrying this format's tag and version (its fields are checked by
    :func:`load` or :func:`load_engine`)."""
    c = json_check.Checker("serialized plan")
    if isinstance(blob, str):
        blob = blob.encode("utf-8", "surrogatepass")
    if isinstance(blob, (list, tuple)) and len(blob) > json_check.MAX_JSON_BYTES:
        raise c.fail("", f"{len(blob)} bytes; at most {json_check.MAX_JSON_BYTES} are read")
    try:
        data = bytes(blob)
    except (TypeError, ValueError) as e:
        raise InvalidValueError(f"not a serialized cudnn_py plan: {e}") from None
    try:
        doc = json_check.parse(data, "serialized plan", allow_constants=True)  # (pass-by-value -inf is written so)
    except ValueError as e:
        raise type(e)(f"not a serialized cudnn_py plan: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise InvalidValueError("not a serialized cudnn_py plan (no 'cudnn_py.plan' format tag)")
    if doc.get("version") != VERSION or isinstance(doc.get("version"), bool):
        raise InvalidValueError(f"serialized plan format version {doc.get('version')!r}; this cudnn_py reads {VERSION}")
    return doc


def load(blob: Any, handle: int) -> tuple[ExecutionPlan, list[TensorRecord], dict[int, int]]:
    """Parse a blob (bytes, a list of byte values as ``serialize()`` returns, or str) and rebuild its plan.

    Everything is checked before cuDNN reads the plan's JSON: the blob's size and nesting (``json_check``), every
    field's type and range, the plan JSON against cuDNN's schema, and the records against the plan's own operation
    graph (each record a non-virtual tensor of it, of the same element size and by-value flag, spanning no fewer
    bytes; every
    non-virtual tensor of it a record or scratch; scratch large enough), and the workspace size against the one
    cuDNN reports for the rebuilt plan - so an edited blob cannot make execute accept undersized buffers."""
    c = json_check.Checker("serialized plan")
    doc = blob if isinstance(blob, dict) else parse(blob)
    if "engine" in doc:
        raise InvalidValueError("this serialized plan runs on a cudnn_py engine, not on a cuDNN plan")
    c.obj(doc, "", ("cudnn_version",))
    built_with, running = c.int_(doc["cudnn_version"], "cudnn_version", 0, 10**7), versions.runtime_version()
    if built_with != running:
        raise InvalidValueError(f"the plan was serialized with cuDNN {version_string(built_with)}; the loaded cuDNN is "
                         f"{version_string(running)} (a serialized plan loads only into the cuDNN that built it)")
    c.obj(doc, "", ("plan", "tensors"))
    records = _records(c, doc["tensors"], at_least=0)
    by_uid = {r.uid: r for r in records}
    raw_scratch = c.obj(doc.get("scratch", {}), "scratch")
    if len(raw_scratch) > MAX_RECORDS:
        raise c.fail("scratch", f"{len(raw_scratch)} entries")
    scratch = {c.uid_name(k, f"scratch.{k}"): c.int_(n, f"scratch.{k}", 1) for k, n in raw_scratch.items()}
    if set(scratch) & set(by_uid):
        raise InvalidValueError(f"serialized plan: bad scratch record {scratch!r} (sizes must be positive, uids not "
                         "those of bound tensors)")
    plan_doc = c.obj(doc["plan"], "plan", ("json", "workspace"))
    c.str_(plan_doc.get("name", ""), "plan.name")
    workspace = c.int_(plan_doc["workspace"], "plan.workspace", 0)
    plan_json = c.str_(plan_doc["json"], "plan.json", json_check.MAX_JSON_BYTES)
    og = json_check.check_execution_plan(plan_json, "serialized plan: plan.json")["operationGraph"]
    graph_tensors = {int(t["name"]): t for t in og["tensors"]}
    for i, r in enumerate(records):  # against the plan's own operation graph
        t = graph_tensors.get(r.uid)
        p = f"tensors[{i}]"
        if t is None or t.get("isVirtual", False):
            raise c.fail(p, f"uid {r.uid} is no non-virtual tensor of the plan's operation graph")
        # (the program may show a tensor in another layout - a transposed view, a padded rank - over the same bytes)
        size = json_check.element_bytes(BY_NAME[r.data_type.name].backend or "")
        if size != json_check.element_bytes(t["dataType"]) or r.is_pass_by_value != t.get("isByValue", False):
            raise c.fail(p, f"{r.data_type.name}{' by value' if r.is_pass_by_value else ''} does not match the "
                            f"plan's {t['dataType']}{' by value' if t.get('isByValue') else ''} tensor {r.uid}")
        have = json_check.byte_span(list(r.dim), list(r.stride), size)
        need = json_check.byte_span(t["dim"], t["stride"], size)
        if have < need:
            raise c.fail(p, f"dims {list(r.dim)} / strides {list(r.stride)} span {have} bytes; the plan's tensor "
                            f"{r.uid} (dims {t['dim']}, strides {t['stride']}) reads {need}")
    for uid, t in graph_tensors.items():
        if not t.get("isVirtual", False) and uid not in by_uid and uid not in scratch:
            raise c.fail("tensors", f"the plan's tensor {uid} has no record (nor scratch)")
    for uid, n in scratch.items():
        t = graph_tensors.get(uid)
        if t is None or t.get("isVirtual", False):
            raise c.fail(f"scratch.{uid}", "no non-virtual tensor of the plan's operation graph")
        need = json_check.byte_span(t["dim"], t["stride"], json_check.element_bytes(t["dataType"]))
        if n < need:
            raise c.fail(f"scratch.{uid}", f"{n} bytes; the tensor spans {need}")
    plan = ExecutionPlan.from_json(plan_json, handle, json_checked=True)  # (check_execution_plan above)
    if workspace < plan.workspace:  # (the blob's includes the scratch; the session adds it to cuDNN's again)
        raise c.fail("plan.workspace", f"{workspace} bytes; cuDNN says the plan needs {plan.workspace}")
    return plan, records, scratch


# ---- plans of cudnn_py's own engines ------------------------------------------------------------------------------
@dataclass
class EngineDoc:
    """A serialized plan of one of cudnn_py's runtime-compiled engines: the engine's identity (id, name, the
    version of its kernel source, the plan's knobs), its own record of the problem (checked by the engine's
    ``rebuild``) and the tensor records it is rebuilt from."""

    engine_id: int
    name: str
    version: str
    knobs: dict[str, Any]
    record: Any
    tensors: dict[int, TensorRecord]


def dump_engine(identity: dict[str, Any], record: dict[str, Any], tensors: list, graph_doc: dict) -> bytes:
    doc = {"format": FORMAT, "version": VERSION, "engine": identity, "record": record,
           "tensors": [TensorRecord.of(t).to_dict() for t in tensors], "graph": graph_doc}
    return json.dumps(doc, sort_keys=True, default=str).encode()


def load_engine(doc: dict) -> EngineDoc:
    """The fields of an engine plan's document, each checked for type and range (the document may be hostile)."""
    c = json_check.Checker("serialized plan")
    c.obj(doc, "", ("engine", "record", "tensors"))
    ident = c.obj(doc["engine"], "engine", ("engine_id", "name", "version", "knobs"))
    knobs = c.obj(ident["knobs"], "engine.knobs")
    if len(knobs) > 64:
        raise c.fail("engine.knobs", f"{len(knobs)} knobs")
    for k, v in knobs.items():
        c.word(k, f"engine.knobs.{k}")
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise c.fail(f"engine.knobs.{k}", f"{json_check.fmt(v)} is not an int or a string")
        if isinstance(v, int):
            c.int_(v, f"engine.knobs.{k}")
    by_uid = {r.uid: r for r in _records(c, doc["tensors"], at_least=1)}
    return EngineDoc(c.int_(ident["engine_id"], "engine.engine_id", 0, json_check.INT64_MAX),
                     c.str_(ident["name"], "engine.name", 256), c.str_(ident["version"], "engine.version", 256),
                     dict(knobs), doc["record"], by_uid)
