"""CPU: what keys the plan cache (``Descriptor.fingerprint`` of lowered graphs and of raw descriptors), the checks a
rebuilt plan must pass before it is used, and the serialized scratch record. The cache serving real plans, and
their results, is tests/test_gpu_plan_cache.py."""
from __future__ import annotations

import ctypes
import json
import math

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import Descriptor
from cudnn_py.plans import plan_cache, serialize
from cudnn_py.plans.engine_config import EngineConfig

H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def attention(s=128, d=64, scale=None, causal=True, q_stride=None, uid=None):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    T = {n: g.tensor(name=n, dim=[1, 2, s, d], stride=[2 * s * d, s * d, d, 1], data_type=H) for n in "qkv"}
    if q_stride is not None:
        T["q"].set_stride(q_stride)
    if uid is not None:
        T["v"].set_uid(uid)
    o, _ = g.sdpa(q=T["q"], k=T["k"], v=T["v"], generate_stats=False,
                  attn_scale=scale if scale is not None else 1 / math.sqrt(d), use_causal_mask=causal)
    o.set_output(True)
    g.validate()
    return g.session.lowered.operation_graph.fingerprint()


def test_identical_graphs_have_equal_fingerprints_and_any_difference_shows():
    base = attention()
    assert base is not None and base == attention() and hash(base) == hash(attention())
    for changed in (attention(s=192), attention(d=128), attention(causal=False),
                    attention(q_stride=[2 * 128 * 64, 64, 128, 1]), attention(uid=4242)):
        assert changed != base
    # the scale is a pass-by-value scalar: its value is in the variant pack, not the plan (the same plan serves)
    assert attention(scale=0.5) == base


def tensor(uid, dims=(2, 3), data_type="CUDNN_DATA_FLOAT"):
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    t.set("CUDNN_ATTR_TENSOR_UNIQUE_ID", uid).set("CUDNN_ATTR_TENSOR_DATA_TYPE", data_type)
    t.set("CUDNN_ATTR_TENSOR_DIMENSIONS", list(dims)).set("CUDNN_ATTR_TENSOR_STRIDES", [dims[1], 1])
    t.set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16)
    return t.finalize()


def add(x, y, out, alpha=1.0):
    pw = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR")
    pw.set("CUDNN_ATTR_POINTWISE_MODE", "CUDNN_POINTWISE_ADD").set("CUDNN_ATTR_POINTWISE_MATH_PREC", "CUDNN_DATA_FLOAT")
    pw.finalize()
    op = Descriptor("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR", pw).set("CUDNN_ATTR_OPERATION_POINTWISE_XDESC", x)
    op.set("CUDNN_ATTR_OPERATION_POINTWISE_BDESC", y).set("CUDNN_ATTR_OPERATION_POINTWISE_YDESC", out)
    op.set("CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1", alpha, "CUDNN_TYPE_FLOAT")
    return op


def test_a_shared_tensor_is_not_two_equal_ones():
    x = tensor(1)
    shared = add(x, x, tensor(3)).fingerprint()
    separate = add(tensor(1), tensor(1), tensor(3)).fingerprint()  # the same attributes, two descriptors
    assert shared != separate
    assert separate == add(tensor(1), tensor(1), tensor(3)).fingerprint()


def test_floats_by_bits():
    assert add(tensor(1), tensor(2), tensor(3), 0.0).fingerprint() != \
        add(tensor(1), tensor(2), tensor(3), -0.0).fingerprint()


def test_constants_by_value():
    from cudnn_py.backend import versions

    if not versions.available("CUDNN_ATTR_TENSOR_CONSTANT_VALUE"):
        pytest.skip("TENSOR_CONSTANT_VALUE needs cuDNN 9.22")

    def constant(value):
        t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
        t.set("CUDNN_ATTR_TENSOR_UNIQUE_ID", 9).set("CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_DATA_FLOAT")
        t.set("CUDNN_ATTR_TENSOR_IS_BY_VALUE", True).set("CUDNN_ATTR_TENSOR_CONSTANT_VALUE", value)
        return t

    assert constant(ctypes.c_float(2.0)).fingerprint() == constant(ctypes.c_float(2.0)).fingerprint()
    assert constant(ctypes.c_float(2.0)).fingerprint() != constant(ctypes.c_float(3.0)).fingerprint()
    kept = ctypes.c_float(2.0)
    assert constant(ctypes.addressof(kept)).fingerprint() is None  # an address: what it points at may change


def test_a_repr_does_not_change_the_descriptor_references():
    x = tensor(1)
    op = add(x, x, tensor(3))
    before = op.fingerprint()
    repr(op), op._attr("CUDNN_ATTR_OPERATION_POINTWISE_XDESC")  # described for display
    assert op.fingerprint() == before


def test_a_descriptor_marked_filled_in_has_no_fingerprint():
    """The mark get() copies and JSON-loaded descriptors carry (set by hand here) leaves the graph uncacheable."""
    t = tensor(1)
    t._filled = True  # as get() copies and JSON-loaded descriptors are marked
    assert add(t, tensor(2), tensor(3)).fingerprint() is None


class _Config(EngineConfig):
    def __init__(self, index, knobs):  # an engine config as heuristics name it, without descriptors
        self.engine_index, self._knobs, self.source = index, list(knobs), "test"


class _Plan:
    def __init__(self, index, knobs, workspace):
        self.config, self.workspace, self.source = _Config(index, knobs), workspace, "deserialized"


@pytest.fixture
def one_entry(monkeypatch):
    plan_cache.clear_cache()
    key = plan_cache.key(("graph",), _Config(6, [(24, 26)]), None, 0, 1234)
    plan_cache._cache[key] = plan_cache._Entry('{"plan": 1}', 6, {24: 26}, 4096)
    yield key
    plan_cache.clear_cache()


@pytest.mark.parametrize("rebuilt", [(7, [(24, 26)], 4096), (6, [(24, 25)], 4096), (6, [(24, 26)], 0)],
                         ids=["other-engine", "other-knobs", "other-workspace"])
def test_a_rebuilt_plan_that_differs_from_its_entry_is_refused(one_entry, monkeypatch, rebuilt):
    monkeypatch.setattr(plan_cache.ExecutionPlan, "from_json",
                        staticmethod(lambda text, handle, checked: _Plan(*rebuilt)))
    refused = plan_cache.stats["rebuilds_refused"]
    assert plan_cache.rebuild(one_entry, _Config(6, [(24, 26)]), 1234) is None
    assert plan_cache.stats["rebuilds_refused"] == refused + 1 and one_entry not in plan_cache._cache


def test_a_matching_rebuild_is_served_with_the_graphs_own_config(one_entry, monkeypatch):
    calls = []
    # read back from JSON, a plan lists the engine's other knobs at -1 (their default): the same choices
    monkeypatch.setattr(plan_cache.ExecutionPlan, "from_json", staticmethod(
        lambda text, handle, checked: calls.append((text, handle, checked))
        or _Plan(6, [(14, -1), (24, 26)], 4096)))
    mine = _Config(6, [(24, 26)])
    plan = plan_cache.rebuild(one_entry, mine, 1234)
    # (an entry's JSON is cuDNN's own or was checked when it came from the disk: not checked at every hit)
    assert calls == [('{"plan": 1}', 1234, True)]
    assert plan is not None and plan.config is mine and plan.source == plan_cache.REBUILT


def test_keys():
    cfg = _Config(6, [(24, 26)])
    assert plan_cache.key(None, cfg, None, 0, 1) is None  # no fingerprint
    assert plan_cache.key(("g",), cfg, None, None, 1) is None  # no device
    assert plan_cache.key(("g",), cfg, None, 0, 1) != plan_cache.key(("g",), _Config(6, [(24, 27)]), None, 0, 1)
    assert plan_cache.key(("g",), cfg, None, 0, 1) != plan_cache.key(("g",), cfg, 66, 0, 1)  # SM count target
    assert plan_cache.key(("g",), cfg, None, 0, 1) != plan_cache.key(("g",), cfg, None, 0, 2)  # handle
    assert plan_cache.key(("g",), cfg, None, 0, 1) != plan_cache.key(("h",), cfg, None, 0, 1)  # fingerprint
    # the engine: the same knob choices on another engine are another plan
    assert plan_cache.key(("g",), cfg, None, 0, 1) != plan_cache.key(("g",), _Config(7, [(24, 26)]), None, 0, 1)
    assert plan_cache.key(("g",), cfg, None, 0, 1) != plan_cache.key(("g",), cfg, None, 1, 1)  # the device


@pytest.mark.parametrize("config, device", [(_Config(7, [(24, 26)]), 0), (_Config(6, [(24, 26)]), 1)],
                         ids=["other-engine", "other-device"])
def test_an_entry_is_not_looked_up_for_another_engine_or_device(one_entry, monkeypatch, config, device):
    """The plan of engine 6 on device 0 is not rebuilt for engine 7 (same knobs), nor on device 1 (same handle
    value): the key misses, and no JSON is rebuilt."""
    monkeypatch.setattr(plan_cache.ExecutionPlan, "from_json", staticmethod(
        lambda text, handle, checked: pytest.fail("an entry of another engine or device was rebuilt")))
    other = plan_cache.key(("graph",), config, None, device, 1234)
    assert other != one_entry and plan_cache.rebuild(other, config, 1234) is None
    assert one_entry in plan_cache._cache  # (the entry itself stays)


@pytest.mark.parametrize("scratch", [{"5": 0}, {"1": 64}, ["5"], {"x": 8}])
def test_a_serialized_plans_scratch_record_is_checked(scratch):
    from cudnn_py.backend import versions

    doc = {"format": serialize.FORMAT, "version": serialize.VERSION, "cudnn_version": versions.runtime_version(),
           "plan": {"json": "{}"}, "scratch": scratch,
           "tensors": [{"uid": 1, "name": "x", "dim": [1], "stride": [1], "data_type": "FLOAT", "alignment": 16,
                        "is_pass_by_value": False, "pass_by_value": None}]}
    with pytest.raises(ValueError, match="scratch"):
        serialize.load(json.dumps(doc).encode(), 0)


@pytest.mark.parametrize("collector_on", [True, False])
def test_a_build_pauses_the_garbage_collector_and_restores_it(monkeypatch, collector_on):
    import gc

    from cudnn_py.plans.session import PlanningSession

    seen = []
    real = PlanningSession.validate

    def validate(self):
        seen.append(gc.isenabled())
        if len(seen) == 2:
            raise RuntimeError("a failing validate")
        return real(self)

    monkeypatch.setattr(PlanningSession, "validate", validate)
    was = gc.isenabled()
    (gc.enable if collector_on else gc.disable)()
    try:
        attention()  # validates
        assert seen == [False] and gc.isenabled() is collector_on
        with pytest.raises(RuntimeError, match="a failing validate"):
            attention()
        assert gc.isenabled() is collector_on
    finally:
        (gc.enable if was else gc.disable)()


def _traced_validate(spec):
    """(the operation graph's fingerprint, the Set calls that built it: descriptors by order of creation)."""
    import io

    from cudnn_py.backend import trace
    from fuzz import sdpa_fuzz

    g, _, _ = sdpa_fuzz.build_graph(cudnn, spec)
    buf = io.StringIO()
    with trace.tracing(buf):
        try:
            g.validate()
        except (cudnn.cudnnGraphNotSupportedError, ValueError):
            return None, None
    order: dict = {}
    calls = []
    for line in buf.getvalue().splitlines():
        rec = json.loads(line)
        if rec.get("phase") != "begin" or rec["fn"] != "cudnnBackendSetAttribute":
            continue
        values = rec.get("values")
        if isinstance(values, list):
            values = [order.setdefault(v["desc"], len(order)) if isinstance(v, dict) else v for v in values]
        calls.append((order.setdefault(rec["desc"], len(order)), rec["attr"], rec["type"], json.dumps(values)))
    return g.session.lowered.operation_graph.fingerprint(), tuple(calls)


def test_equal_fingerprints_exactly_when_cudnn_got_the_same_calls():
    """The plan cache's soundness: over seeded attention cases (every mask and option the sdpa fuzz draws), each
    built twice, two operation graphs have equal fingerprints exactly when the Set calls that built them are the
    same (descriptors by order of creation, values as traced). Equal calls, equal cuDNN input, the same plan."""
    from fuzz import sdpa_fuzz

    # each case also with one thing changed: only strides, only the data type, only one dim, only one flag, only
    # the batch (calls that differ in an attribute or two)
    variants = {"layout": lambda sp: {"layout": "bshd" if sp["layout"] == "bhsd" else "bhsd"},
                "dtype": lambda sp: {"dtype": "HALF" if sp["dtype"] == "BFLOAT16" else "BFLOAT16"},
                "s_kv": lambda sp: {"s_kv": sp["s_kv"] + 1, "window": None, "bottom_right": False},
                "padding": lambda sp: {"padding": not sp["padding"]},
                "b": lambda sp: {"b": sp["b"] + 1}}
    seen: dict = {}
    built = 0
    for case in range(30):
        spec = sdpa_fuzz.make_case(20261204, case)
        fp, calls = _traced_validate(spec)
        if fp is None:
            continue
        built += 1
        again, calls_again = _traced_validate(spec)
        assert again == fp and calls_again == calls, f"case {case}: the same graph built twice differs"
        entries = {f"{case}": (fp, calls)}
        for name, change in variants.items():
            fpv, callsv = _traced_validate({**spec, **change(spec)})
            if fpv is not None:
                entries[f"{case} {name}"] = (fpv, callsv)
        for key, (fp1, calls1) in entries.items():
            for other, (fp2, calls2) in seen.items():
                assert (fp1 == fp2) == (calls1 == calls2), f"{key} and {other}"
            seen[key] = (fp1, calls1)
    assert built >= 20, f"only {built} of 30 cases validated deviceless"
    assert len(seen) >= 4 * built, "the variants mostly failed to validate: the test compares too little"


def test_the_lowering_corpus_is_deterministic_and_tells_differences():
    from fuzz import lowering_corpus

    a, b = lowering_corpus.corpus(4), lowering_corpus.corpus(4)
    assert a == b and sum(isinstance(v, list) for v in a.values()) >= 10
    changed = dict(b, **{"conv 0": ["0" * 16, 1]})
    assert lowering_corpus.differences(a, changed) == ["conv 0"]


def test_a_compile_time_constant_is_fingerprinted_by_value():
    """A COMPILE_TIME_CONST scalar reaches cuDNN as TENSOR_CONSTANT_VALUE (cuDNN >= 9.22): its value, not the address
    of the host copy, is part of the fingerprint, so two graphs differing only in it are two plans."""
    from cudnn_py.backend import versions

    if not versions.available("CUDNN_ATTR_TENSOR_CONSTANT_VALUE"):
        pytest.skip("TENSOR_CONSTANT_VALUE needs cuDNN 9.22")

    def scaled(by):
        g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
        x = g.tensor(name="x", dim=[1, 4, 8], stride=[32, 8, 1], data_type=F)
        y = g.mul(x, g.tensor_scalar(by, cudnn.scalar_type.COMPILE_TIME_CONST, name="by"))
        y.set_output(True).set_data_type(F)
        g.validate()
        return g.session.lowered.operation_graph.fingerprint()

    two = scaled(2.0)
    assert two is not None and two == scaled(2.0) and two != scaled(3.0)


def test_the_environment_variable_turns_the_plan_cache_off(monkeypatch):
    # the same words as CUDNN_PY_REPLAY (plans/switches.py), read per build
    for value in ("0", "off", "False", " no "):
        monkeypatch.setenv(plan_cache.PLAN_CACHE_ENV, value)
        assert not plan_cache.enabled()
    for value in ("1", "yes", "on", ""):
        monkeypatch.setenv(plan_cache.PLAN_CACHE_ENV, value)
        assert plan_cache.enabled()
    monkeypatch.delenv(plan_cache.PLAN_CACHE_ENV)
    assert plan_cache.enabled()
