"""create_kernel_cache / create_device_properties on the CPU (cuDNN 9.28, libcuda stand-in): the kernel cache
binds to a deviceless operation graph and round-trips its JSON; device properties need a GPU or cuDNN's own JSON,
so here only their refusals and the planning wiring (what the session hands to heuristics, engines and plans)
are checked. Plans with a kernel cache and deviceless (AoT) builds run in tests/test_gpu_kernel_cache.py."""
from __future__ import annotations

import gc
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import Descriptor, descriptor, trace, tracing, versions
from cudnn_py.errors import CudnnError, FeatureVersionError, PhaseError
from cudnn_py.plans import backend_json, device_gates
from cudnn_py.plans import session as session_mod
from cudnn_py.plans.device_properties import DeviceProperties
from cudnn_py.plans.heuristics import HeuristicsResult
from cudnn_py.plans.kernel_cache import KernelCache
from tests.conftest import gpu_available

H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def live() -> int:
    gc.collect()
    return len(descriptor._live)


def matmul_relu(m=8, **options):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, **options)
    a, b = g.tensor([2, m, 16], name="a"), g.tensor([2, 16, 4], name="b")
    g.relu(g.matmul(a, b)).set_output(True)
    return g


def entries(text: str) -> list:
    return json.loads(text)["kernel_cache"]


# ---- the kernel cache ---------------------------------------------------------------------------------------------
def test_a_new_kernel_cache_is_unbound():
    kc = cudnn.create_kernel_cache()
    assert isinstance(kc, KernelCache) and kc.descriptor is None
    if versions.runtime_version() >= 92700:
        assert (kc.size(), kc.revision()) == (0, 0)
    else:  # ENTRY_COUNT / REVISION are 9.27's
        with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"kernel_cache.size\(\).*needs cuDNN 9\.27"):
            kc.size()
    with pytest.raises(PhaseError, match=r"kernel_cache.serialize\(\): the cache is empty and unbound"):
        kc.serialize()
    assert "unbound" in repr(kc)


def test_the_first_graph_binds_the_cache_once_and_dynamic_shapes_are_on(tmp_path):
    kc = cudnn.create_kernel_cache()
    path = tmp_path / "t.jsonl"
    with tracing(str(path)):
        g1 = matmul_relu(kernel_cache=kc)
        assert g1.is_dynamic_shape_enabled and g1.kernel_cache is kc  # the classic module turns them on too
        g1.build_operation_graph()
        first = kc.descriptor
        g2 = matmul_relu(m=24, kernel_cache=kc)
        g2.build_operation_graph()
    assert kc.descriptor is first and first.finalized
    recs = trace.calls(path)
    created = [r for r in recs if r["fn"] == "cudnnBackendCreateDescriptor"
               and r["kind"] == "CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR"]
    assert len(created) == 1  # the second graph reuses the bound cache
    bound = [r for r in recs if r.get("attr") == "CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH"]
    og = g1.session.lowered.operation_graph
    assert len(bound) == 1 and bound[0]["values"][0]["desc"] == og.id and bound[0]["status"] == 0
    dynamic = [r for r in recs if r.get("attr") == "CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED"]
    # once per graph, and once more per graph where a GPU re-finalizes its operation graph with the handle
    assert len(dynamic) >= 2 and all(r["values"] == [True] for r in dynamic)
    assert entries(kc.serialize()) == []  # no plan has been built: no kernel yet


def test_kernel_cache_json_round_trip_and_a_loaded_cache_is_not_rebound():
    kc = cudnn.create_kernel_cache()
    matmul_relu(kernel_cache=kc).build_operation_graph()
    text = kc.serialize()
    doc = json.loads(text)
    assert doc["cudnnVersion"] == versions.runtime_version() and "operationGraph" in doc
    loaded = cudnn.create_kernel_cache()
    loaded.deserialize(text)
    assert loaded.descriptor is not None and loaded.descriptor.finalized
    back = json.loads(loaded.serialize())
    # (cuDNN 9.28 writes FLT_MAX back one double ulp off - the relu's upperClip - so the floats are not compared)
    assert back["kernel_cache"] == doc["kernel_cache"] == [] and back["cudnnVersion"] == doc["cudnnVersion"]
    assert back["operationGraph"]["tensors"] == doc["operationGraph"]["tensors"]
    if versions.runtime_version() >= 92700:
        assert loaded.size() == 0
    desc = loaded.descriptor
    matmul_relu(kernel_cache=loaded).build_operation_graph()
    assert loaded.descriptor is desc  # loaded from JSON: finalized there, not bound again
    with pytest.raises(RuntimeError, match="this kernel cache is not empty"):
        loaded.deserialize(text)
    with pytest.raises(RuntimeError, match="this kernel cache is not empty"):
        kc.deserialize(text)  # a bound one neither


def test_kernel_cache_deserialize_refusals():
    kc = cudnn.create_kernel_cache()
    with pytest.raises(ValueError, match=r"kernel_cache.deserialize\(\): kernel cache JSON: cudnnVersion: missing"):
        kc.deserialize("{}")
    assert kc.descriptor is None  # a refused JSON leaves the cache empty
    with pytest.raises(ValueError, match="the JSON is empty"):
        kc.deserialize("")
    with pytest.raises(TypeError, match="not int"):
        kc.deserialize(3)


def _size_insufficient() -> CudnnError:
    return CudnnError(2006, "cudnnBackendGetAttribute", kind="CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR",
                      attribute="CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION")


def test_json_read_counts_again_when_the_cache_grows_between_count_and_fill(monkeypatch):
    kc = cudnn.create_kernel_cache()
    matmul_relu(kernel_cache=kc).build_operation_graph()
    expected = kc.serialize()
    real_get, calls = Descriptor.get, []

    def growing(self, attr, *args, **kwargs):
        if attr == "CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION":
            calls.append(attr)
            if len(calls) <= 2:
                raise _size_insufficient()
        return real_get(self, attr, *args, **kwargs)

    monkeypatch.setattr(Descriptor, "get", growing)
    assert kc.serialize() == expected and len(calls) == 3

    def always(self, attr, *args, **kwargs):
        raise _size_insufficient()

    monkeypatch.setattr(Descriptor, "get", always)
    with pytest.raises(CudnnError, match=r"kernel_cache.serialize\(\): the JSON kept growing.*4 attempts"):
        kc.serialize()

    def other(self, attr, *args, **kwargs):
        calls.append("other")
        raise CudnnError(2000, "cudnnBackendGetAttribute")

    calls.clear()
    monkeypatch.setattr(Descriptor, "get", other)
    with pytest.raises(CudnnError, match="CUDNN_STATUS_BAD_PARAM "):
        backend_json.read_json_attribute(kc.descriptor, "CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION", "x")
    assert calls == ["other"]  # any other failure is not retried


def test_kernel_cache_and_its_graphs_free_their_descriptors():
    def cycle():
        kc = cudnn.create_kernel_cache()
        g = matmul_relu(kernel_cache=kc)
        g.build_operation_graph()
        del g  # the cache outlives its first graph
        text = kc.serialize()
        loaded = cudnn.create_kernel_cache()
        loaded.deserialize(text)
        with pytest.raises(ValueError):
            cudnn.create_kernel_cache().deserialize("{}")

    cycle()
    base = live()
    for _ in range(5):
        cycle()
    assert live() == base


def test_kernel_cache_version_gates(monkeypatch):
    kc = cudnn.create_kernel_cache()
    matmul_relu(kernel_cache=kc).build_operation_graph()
    monkeypatch.setattr(versions, "_runtime_version", 92600)
    with pytest.raises(FeatureVersionError, match=r"kernel_cache.size\(\).*needs cuDNN 9\.27\.0"):
        kc.size()
    with pytest.raises(FeatureVersionError, match=r"kernel_cache.revision\(\).*needs cuDNN 9\.27\.0"):
        kc.revision()
    monkeypatch.setattr(versions, "_runtime_version", 90900)
    with pytest.raises(FeatureVersionError, match=r"kernel_cache.serialize\(\).*needs cuDNN 9\.10\.0.*9\.9\.0"):
        kc.serialize()
    with pytest.raises(FeatureVersionError, match=r"kernel_cache.deserialize\(\).*needs cuDNN 9\.10\.0"):
        cudnn.create_kernel_cache().deserialize("{}")
    monkeypatch.setattr(versions, "_runtime_version", 90300)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"create_kernel_cache\(\).*needs cuDNN 9\.4\.0"):
        cudnn.create_kernel_cache()


def test_a_cache_bound_on_one_device_refuses_another():
    kc = cudnn.create_kernel_cache()
    g = matmul_relu(kernel_cache=kc)
    g.validate()
    og = g.session.lowered.operation_graph
    kc.bind(og, 0)
    assert kc.bind(og, None) is kc.descriptor and kc.bind(og, 0) is kc.descriptor
    with pytest.raises(ValueError, match="holds kernels loaded for device 0; a graph planned for device 1"):
        kc.bind(og, 1)


# ---- device properties ----------------------------------------------------------------------------------------------
@pytest.mark.skipif(gpu_available(), reason="the refusal without a GPU")
def test_device_properties_from_a_device_need_that_gpu():
    before = live()
    with pytest.raises(RuntimeError, match=r"create_device_properties\(0\): cuDNN could not read the properties of "
                                           r"CUDA device 0.*NOT_INITIALIZED"):
        cudnn.create_device_properties(0)
    assert live() == before  # the refused descriptor is freed


def test_device_properties_argument_and_json_refusals():
    for bad in (1.5, True, None, [0]):
        with pytest.raises(TypeError, match=r"create_device_properties\(\) takes a device id \(int\) or the JSON"):
            cudnn.create_device_properties(bad)
    with pytest.raises(ValueError, match="non-negative int32"):
        cudnn.create_device_properties(-1)
    with pytest.raises(ValueError, match="the JSON is empty"):
        cudnn.create_device_properties("")
    before = live()
    # cuDNN wants every field of its own schema: a hand-written JSON is refused, naming the first one missing
    with pytest.raises(ValueError, match=r"device properties JSON: maxGridSize: missing"):
        cudnn.create_device_properties('{"smVersion": 90}')
    assert live() == before


def test_device_properties_version_gate(monkeypatch):
    monkeypatch.setattr(versions, "_runtime_version", 90700)
    with pytest.raises(FeatureVersionError, match=r"create_device_properties\(\).*needs cuDNN 9\.8\.0.*9\.7\.0"):
        cudnn.create_device_properties(0)


# ---- pygraph options --------------------------------------------------------------------------------------------
def fake_device_properties() -> DeviceProperties:
    """A DeviceProperties that never reaches cuDNN (the wiring tests replace the calls that would use it)."""
    return DeviceProperties(SimpleNamespace(id=0), None)  # type: ignore[arg-type]


def test_pygraph_planning_option_checks():
    with pytest.raises(TypeError, match=r"kernel_cache=...\) takes what cudnn.create_kernel_cache\(\) returns"):
        cudnn.pygraph(kernel_cache=object())
    with pytest.raises(TypeError, match=r"device_property=...\) takes what cudnn.create_device_properties"):
        cudnn.pygraph(device_property="{}")
    for bad in (9, 1000, True, "90", 9.0):
        with pytest.raises(ValueError, match=r"sm_version=...\) is an architecture as major \* 10 \+ minor"):
            cudnn.pygraph(sm_version=bad)
    with pytest.raises(ValueError, match="plans without a handle.*give one or the other"):
        cudnn.pygraph(handle=1, device_property=fake_device_properties())
    g = cudnn.pygraph(sm_version=100, device_property=fake_device_properties())
    assert g.sm_version == 100 and g.device_property is not None and g.handle is None
    assert not g.is_dynamic_shape_enabled  # only a kernel cache turns dynamic shapes on


class _FakeConfig:
    engine_index, name, source, workspace = 3, "eng3", "CUDNN_HEUR_MODE_A", 0


class _FakePlan:
    workspace = 0


def test_planning_hands_the_device_properties_and_the_kernel_cache_to_the_stood_in_calls(monkeypatch):
    """Deviceless planning: no handle is asked for, heuristics and explicit engines get the DEVICEPROP descriptor,
    every plan the kernel cache (the calls are stand-ins recording their arguments; the backend calls themselves
    need a GPU: tests/test_gpu_kernel_cache.py)."""
    dp, kc = fake_device_properties(), cudnn.create_kernel_cache()
    seen: dict = {}

    def no_handle(*_a, **_k):
        raise AssertionError("a deviceless graph must not ask for a handle")

    def query(og, modes, sm_count=None, device_properties=None, defer=False):
        seen["heuristics"] = (og, modes, sm_count, device_properties)
        return HeuristicsResult(configs=[_FakeConfig()], per_mode=[(modes[0], "1 config(s), 1 new")])

    def build(config, kernel_cache=None):
        seen["plan"] = (config, kernel_cache)
        return _FakePlan()

    def explicit(og, engine, knobs, device_properties=None):
        seen["explicit"] = (engine, device_properties)
        return _FakeConfig()

    monkeypatch.setattr(session_mod, "default_handle", no_handle)
    monkeypatch.setattr(session_mod.heuristics, "query", query)
    monkeypatch.setattr(session_mod.ExecutionPlan, "build", build)
    monkeypatch.setattr(session_mod.EngineConfig, "explicit", explicit)
    g = matmul_relu(kernel_cache=kc, device_property=dp, sm_count=8)
    g.build([cudnn.heur_mode.A])
    s = g.session
    assert s.lowered.handle is None and s.lowered.operation_graph.finalized  # no handle on the operation graph
    og, modes, sm_count, props = seen["heuristics"]
    assert og is s.lowered.operation_graph and modes == ["CUDNN_HEUR_MODE_A"] and sm_count == 8
    assert props is dp.descriptor
    config, cache = seen["plan"]
    assert isinstance(config, _FakeConfig) and cache is kc.descriptor and cache.finalized
    g.create_execution_plan(0, {})
    assert seen["explicit"] == (0, dp.descriptor)
    assert g.get_execution_plan_count() == 2


def test_no_configs_deviceless_names_the_device_properties(monkeypatch):
    monkeypatch.setattr(session_mod.heuristics, "query",
                        lambda og, modes, sm_count=None, device_properties=None, defer=False:
                        HeuristicsResult(per_mode=[(modes[0], "0 config(s), 0 new")]))
    g = matmul_relu(device_property=fake_device_properties())
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"No valid engine configs.*deviceless, for "
                                                                r"<device_properties from JSON"):
        g.build([cudnn.heur_mode.A])


def test_sm_version_is_the_architecture_the_device_rules_check(monkeypatch):
    from cudnn_py.ir.spec import SPECS

    class Node:
        spec, name = SPECS["block_scale_quantize"], "q"

    def unreadable(device):
        raise AssertionError("sm_version given: the device is not read")

    monkeypatch.setattr(device_gates, "compute_capability", unreadable)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError,
                       match=r"block_scale_quantize\(\) \(node 'q'\) needs a GPU of compute capability 10\.0 or "
                             r"newer.*the target sm_version 90 is 9\.0"):
        device_gates.check([Node()], None, 90)
    device_gates.check([Node()], None, 100)


def test_deviceless_planning_checks_the_device_rules_against_sm_version(monkeypatch):
    seen = []
    monkeypatch.setattr(session_mod.device_gates, "check", lambda nodes, handle, sm_version=None:
                        seen.append((handle, sm_version)))
    g = matmul_relu(device_property=fake_device_properties(), sm_version=90)
    g.build_operation_graph()
    assert seen == [(None, 90)]
    seen.clear()
    matmul_relu(device_property=fake_device_properties()).build_operation_graph()
    assert seen == []  # neither a GPU nor a target architecture: cuDNN's own support checks decide


def test_module_functions_have_the_classic_signatures():
    import inspect

    assert list(inspect.signature(cudnn.create_kernel_cache).parameters) == []
    assert len(inspect.signature(cudnn.create_device_properties).parameters) == 1  # device id or JSON
    for method in ("serialize", "deserialize", "size", "revision"):
        assert callable(getattr(KernelCache, method))
    assert callable(DeviceProperties.serialize)


def test_deferred_checks_say_how_device_rules_are_checked_when_planning_ahead_of_time(monkeypatch):
    from cudnn_py.ir.spec import SPECS

    class Node:
        spec, name = SPECS["block_scale_quantize"], "q"

    for options, expected in (({"sm_version": 100}, "at build_operation_graph, against sm_version 100"),
                              ({}, "never: deviceless planning without sm_version")):
        g = matmul_relu(device_property=fake_device_properties(), **options)
        g.validate()
        monkeypatch.setattr(g.session, "_gated_nodes", lambda: [Node()])
        assert any(expected in c for c in g.session._checks_validate_cannot_run())


# device 0's DEVICEPROP JSON, written on the H200 by cuDNN 9.19.0 (tests/test_gpu_kernel_cache.py with
# CUDNN_PY_DEVICEPROP_JSON_OUT): the JSON does not say which cuDNN wrote it, so the file name does
GPU_JSON, GPU_JSON_CUDNN = Path(__file__).with_name("data") / "deviceprop_sm90_cudnn91900.json", 91900


def test_a_deviceprop_json_of_another_cudnn_is_refused_clearly():
    """cuDNN reads only its own release's DEVICEPROP JSON: 9.28 refuses the keys 9.19 wrote (seen here), and
    the refusal is a ValueError naming what cuDNN said, not a crash."""
    if versions.runtime_version() == GPU_JSON_CUDNN:
        pytest.skip("the JSON's own cuDNN: it loads (test_deviceless_planning_on_the_cpu_from_a_gpu_json)")
    with pytest.raises(ValueError, match=r"create_device_properties\(json\): cuDNN refused the JSON.*HasMember"):
        cudnn.create_device_properties(GPU_JSON.read_text())


@pytest.mark.skipif(versions.runtime_version() != GPU_JSON_CUDNN,
                    reason="the DEVICEPROP JSON was written by cuDNN 9.19.0, which only that release reads")
def test_deviceless_planning_on_the_cpu_from_a_gpu_json():
    """The AoT promise on this CPU machine: device properties rebuilt from an H200's JSON, heuristics ranking
    engines for it with no GPU here, and a plan finalized without a handle."""
    dp = cudnn.create_device_properties(GPU_JSON.read_text())
    assert json.loads(dp.serialize()).keys() == json.loads(GPU_JSON.read_text()).keys()
    g = matmul_relu(device_property=dp, sm_version=90)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    assert g.get_execution_plan_count() >= 1 and g.session.plans
    assert g.session.lowered.handle is None
