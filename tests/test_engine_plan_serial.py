"""CPU: serialized plans of cudnn_py's norm forward engine (``engines/norms/serial.py``, ``plans/serialize.py``):
the record rebuilds the same graph with the builders (the matcher agrees field for field), and a blob edited by
hand is refused with the field it got wrong before any builder or compiler sees it. (The round trip of a built
plan, which needs a GPU, is in tests/test_gpu_autotune.py.)"""
from __future__ import annotations

import json

import pytest

import cudnn_py as cudnn
from cudnn_py.backend.json_check import SerializedJSONError
from cudnn_py.engines.norms import serial
from cudnn_py.engines.norms.match import match
from cudnn_py.errors import InvalidValueError
from cudnn_py.plans import serialize as plan_serial

DT = cudnn.data_type
P = cudnn.norm_forward_phase


def norm_graph(rms=False, phase=P.TRAINING, residual=False, silu=False, bias=True):
    g = cudnn.pygraph(io_data_type=DT.BFLOAT16, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    X = g.tensor(name="X", dim=[8, 256, 1, 1], stride=[256, 1, 256, 256], data_type=DT.BFLOAT16)
    R = g.tensor(name="R", dim=[8, 256, 1, 1], stride=[256, 1, 256, 256], data_type=DT.BFLOAT16) if residual else None
    W = g.tensor(name="W", dim=[1, 256, 1, 1], stride=[256, 1, 256, 256], data_type=DT.FLOAT)
    B = g.tensor(name="B", dim=[1, 256, 1, 1], stride=[256, 1, 256, 256], data_type=DT.FLOAT) if bias else None
    h = g.add(X, R) if residual else X
    if residual:
        h.set_output(True).set_data_type(DT.BFLOAT16)
    outs = (g.rmsnorm if rms else g.layernorm)(phase, h, W, B, 1e-5)
    y = outs[0]
    for s in outs[1:]:
        if s is not None:
            s.set_output(True)
    y.set_output(True).set_data_type(DT.BFLOAT16)
    if silu:
        g.swish(y, swish_beta=1.5).set_output(True).set_data_type(DT.BFLOAT16)
    g.validate_ir()  # (cuDNN's own validation refuses some of these fusions; the engine does not need it)
    return g


def doc_of(g):
    """What serialize() writes for a plan on the norm engine (without the build: the record and the tensors)."""
    tensors = [t for t in g._by_uid.values() if not t.is_virtual]
    ident = {"engine_id": 1, "name": "norm_forward", "version": "x", "knobs": {"elems": 16}}
    return json.loads(plan_serial.dump_engine(ident, serial.record(match(g)), tensors, {}))


CASES = [dict(), dict(rms=True), dict(phase=P.INFERENCE), dict(residual=True, silu=True), dict(rms=True, bias=False,
                                                                                               silu=True)]


@pytest.mark.parametrize("kw", CASES)
def test_the_record_rebuilds_the_same_problem(kw):
    g = norm_graph(**kw)
    doc = plan_serial.load_engine(doc_of(g))
    g2 = cudnn.pygraph()
    serial.rebuild(g2, doc.record, doc.tensors)
    assert match(g2) == match(g)
    assert {t.uid: (t.name, list(t.dim), t.data_type) for t in g2._by_uid.values() if not t.is_virtual} == \
        {t.uid: (t.name, list(t.dim), t.data_type) for t in g._by_uid.values() if not t.is_virtual}


def edited(doc, path, value):
    d = json.loads(json.dumps(doc))
    at = d
    for k in path[:-1]:
        at = at[k]
    if value is KeyError:
        del at[path[-1]]
    else:
        at[path[-1]] = value
    return d


@pytest.mark.parametrize("path,value,error,words", [
    (("record", "x", "uid"), 999, SerializedJSONError, "uid 999 has no tensor record"),
    (("record", "rms"), "yes", SerializedJSONError, "record.rms"),
    (("record", "beta"), float("nan"), SerializedJSONError, "not finite"),
    (("record", "n"), 255, InvalidValueError, "fields \\['n'\\]"),
    (("record", "rows"), 7, InvalidValueError, "fields \\['rows'\\]"),
    (("record", "x"), None, SerializedJSONError, "record.x"),
    (("record", "train"), False, InvalidValueError, "does not describe"),
    (("record", "extra"), 1, SerializedJSONError, "unknown field"),
    (("tensors", 0, "dim"), [8, 255, 1, 1], InvalidValueError, "."),
])
def test_an_edited_record_is_refused(path, value, error, words):
    doc = doc_of(norm_graph())
    bad = edited(doc, path, value)
    with pytest.raises(error, match=words):
        d = plan_serial.load_engine(bad)
        serial.rebuild(cudnn.pygraph(), d.record, d.tensors)


@pytest.mark.parametrize("path,value", [(("engine", "knobs"), {"elems": True}), (("engine", "engine_id"), -1),
                                        (("tensors",), []), (("engine",), KeyError)])
def test_an_edited_engine_identity_is_refused(path, value):
    with pytest.raises(SerializedJSONError):
        plan_serial.load_engine(edited(doc_of(norm_graph()), path, value))


def test_deserialize_refuses_an_unknown_engine_and_another_kernel_version():
    doc = doc_of(norm_graph())
    doc["engine"]["engine_id"] = 123456789
    with pytest.raises(InvalidValueError, match="not one of this cudnn_py's engines"):
        cudnn.pygraph().deserialize(json.dumps(doc).encode())
    doc = doc_of(norm_graph())
    from cudnn_py.engines.engine_ids import NORM_FORWARD_ENGINE_ID

    doc["engine"]["engine_id"] = NORM_FORWARD_ENGINE_ID
    with pytest.raises(InvalidValueError, match="kernel changed"):
        cudnn.pygraph().deserialize(json.dumps(doc).encode())


def test_a_cudnn_plan_loader_refuses_an_engine_blob():
    with pytest.raises(InvalidValueError, match="cudnn_py engine"):
        plan_serial.load(json.dumps(doc_of(norm_graph())).encode(), 0)
