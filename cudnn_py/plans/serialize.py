"""Serialized plans: everything needed to execute a built cuDNN plan again, in another process, without the
graph that made it (``graph_flow.md`` §5.1).

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

from ..backend import versions
from ..enums import data_type
from ..errors import version_string
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
    def from_dict(cls, d: dict) -> TensorRecord:
        try:
            return cls(int(d["uid"]), str(d["name"]), tuple(int(x) for x in d["dim"]),
                       tuple(int(x) for x in d["stride"]), data_type[d["data_type"]], int(d["alignment"]),
                       bool(d["is_pass_by_value"]), d["pass_by_value"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"serialized plan: bad tensor record {d!r}: {e}") from None


def dump(plan: ExecutionPlan, tensors: list, graph_doc: dict, scratch: dict[int, int] | None = None) -> bytes:
    doc = {"format": FORMAT, "version": VERSION, "cudnn_version": versions.runtime_version(),
           "plan": {"name": plan.name, "json": plan.to_json(), "workspace": plan.workspace},
           "tensors": [TensorRecord.of(t).to_dict() for t in tensors], "graph": graph_doc,
           "scratch": {str(uid): int(n) for uid, n in (scratch or {}).items()}}
    return json.dumps(doc, sort_keys=True, default=str).encode()


def load(blob: Any, handle: int) -> tuple[ExecutionPlan, list[TensorRecord], dict[int, int]]:
    """Parse a blob (bytes, a list of byte values as ``serialize()`` returns, or str) and rebuild its plan."""
    if isinstance(blob, str):
        blob = blob.encode()
    try:
        doc = json.loads(bytes(blob).decode())
    except (TypeError, ValueError) as e:
        raise ValueError(f"not a serialized cudnn_py plan: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError("not a serialized cudnn_py plan (no 'cudnn_py.plan' format tag)")
    if doc.get("version") != VERSION:
        raise ValueError(f"serialized plan format version {doc.get('version')!r}; this cudnn_py reads {VERSION}")
    built_with, running = int(doc.get("cudnn_version", 0)), versions.runtime_version()
    if built_with != running:
        raise ValueError(f"the plan was serialized with cuDNN {version_string(built_with)}; the loaded cuDNN is "
                         f"{version_string(running)} (a serialized plan loads only into the cuDNN that built it)")
    records = [TensorRecord.from_dict(d) for d in doc.get("tensors", [])]
    try:
        scratch = {int(uid): int(n) for uid, n in doc.get("scratch", {}).items()}
    except (AttributeError, TypeError, ValueError) as e:
        raise ValueError(f"serialized plan: bad scratch record {doc.get('scratch')!r}: {e}") from None
    if any(n <= 0 for n in scratch.values()) or set(scratch) & {r.uid for r in records}:
        raise ValueError(f"serialized plan: bad scratch record {scratch!r} (sizes must be positive, uids not "
                         "those of bound tensors)")
    plan = ExecutionPlan.from_json(doc["plan"]["json"], handle)
    return plan, records, scratch
