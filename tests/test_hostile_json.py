"""Hostile serialized JSON (issue #27): kernel cache JSON, the raw KERNEL_CACHE_JSON_REPRESENTATION attribute,
device properties JSON and serialized plan blobs are checked against schemas written from cuDNN's own output
(cudnn_py/backend/json_check.py) before cuDNN reads them. The seeded fuzz starts from real output (cuDNN 9.19 on
the H200 and 9.28 here, tests/data/serialized, plus a kernel cache captured in the child) and runs in child
processes: a signal or a timeout fails the test, every case ends in a clean ValueError / CudnnError or success."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_py.backend import json_check
from cudnn_py.errors import SerializedJSONError
from cudnn_py.plans import serialize

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "serialized"


def run_fuzz(seed: int, count: int, timeout: float = 60, module: str = "tests.support.json_fuzz") -> dict[str, int]:
    """Run the fuzz child ``module`` (CASE / RESULT / END lines) and tally its results; a signal, a hang, an
    unexpected exception class or a missing END fails the test."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, "-m", module, str(seed), str(count)], cwd=ROOT,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"the fuzz child hung; last lines:\n{out[-2000:]}")
    running = [ln for ln in out.splitlines() if ln.startswith("CASE ")][-1:]
    if p.returncode != 0:
        how = signal.Signals(-p.returncode).name if p.returncode < 0 else f"exit status {p.returncode}"
        pytest.fail(f"fuzz child died ({how}) while running {running}\n{err[-3000:]}")
    assert out.rstrip().endswith("END"), out[-2000:]
    results = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert len(results) == count
    errors = [ln for ln in results if " error " in ln]
    assert not errors, errors[:10]
    tally: dict[str, int] = {}
    for ln in results:
        key = ln.split(" ", 2)[2]
        tally[key] = tally.get(key, 0) + 1
    return tally


@pytest.mark.parametrize("seed", [1, 2])
def test_seeded_fuzz_of_real_serialized_output(seed):
    tally = run_fuzz(seed, 300)
    assert tally.get("refused SerializedJSONError", 0) > 100, tally  # the schema refuses most mutations itself


# ---- the schemas accept cuDNN's own output of both versions ----------------------------------------------------------
@pytest.mark.parametrize("path", sorted(DATA.glob("*.json")) + [ROOT / "tests/data/deviceprop_sm90_cudnn91900.json"],
                         ids=lambda p: p.name)
def test_real_output_is_accepted(path):
    text = path.read_text()
    if path.name.startswith("plan_"):
        json_check.check_execution_plan(json.loads(text)["plan"]["json"])
    elif path.name.startswith("deviceprop"):
        json_check.check_device_properties(text)
    else:
        json_check.check_kernel_cache(text)


def kc_doc() -> dict:
    return json.loads((DATA / "kernel_cache_matmul_relu_cudnn91900.json").read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["operationGraph"].update(tensors=7), r"operationGraph.tensors: 7 is not a list"),
    (lambda d: d["operationGraph"].update(nodes="x"), r"operationGraph.nodes: \"x\" is not a list"),
    (lambda d: d.update(kernel_cache=[1, 2]), r"kernel_cache\[0\]: 1 is not an object"),
    (lambda d: d["operationGraph"]["nodes"][0].update(matA="x"), r"nodes\[0\].matA: \"x\" is not a decimal"),
    (lambda d: d["operationGraph"]["nodes"][0].update(matA="99"), r"\"99\" names no tensor"),
    (lambda d: d["operationGraph"]["tensors"][0].update(stride=[2 ** 62] * 3), r"tensors\[0\].*over 2\*\*63"),
    (lambda d: d["operationGraph"]["tensors"][1].update(stride=[1, 2 ** 80, 1]),
     r"operationGraph.tensors\[1\].stride\[1\]: 2\*\*80 exceeds 2\*\*62"),
    (lambda d: d["operationGraph"]["tensors"][0].update(vectCount=-1), r"vectCount: -1 is below 1"),
    (lambda d: d["operationGraph"]["tensors"][0].update(name="12x"), r"name: \"12x\" is not a decimal"),
    (lambda d: d["operationGraph"]["tensors"][0].update(dataType="CUDNN_NOPE"), r"not a member of cudnnDataType_t"),
    (lambda d: d["kernel_cache"][0]["value"][0]["kernelParams"]["offsets"][0].update(value=10 ** 6),
     r"offsets\[0\].value: 1000000 exceeds"),
    (lambda d: d["kernel_cache"][0]["value"][0].update(cubin="!!"), r"cubin: not base64"),
])
def test_kernel_cache_refusals_name_the_field(edit, message):
    doc = kc_doc()
    edit(doc)
    with pytest.raises(SerializedJSONError, match=message):
        json_check.check_kernel_cache(json.dumps(doc))


def test_size_depth_and_constants_are_bounded_before_parsing(monkeypatch):
    with pytest.raises(SerializedJSONError, match="nested 100000 levels deep"):
        json_check.check_kernel_cache("[" * 100000 + "]" * 100000)
    with pytest.raises(SerializedJSONError, match="NaN is not JSON"):
        json_check.check_kernel_cache('{"cudnnVersion": NaN}')
    monkeypatch.setattr(json_check, "MAX_JSON_BYTES", 100)
    with pytest.raises(SerializedJSONError, match="at most 100 are read"):
        json_check.check_kernel_cache(" " * 101)


def test_the_raw_attribute_is_checked_in_descriptor_set():
    from tests.support.libcuda_stub import ensure_driver

    ensure_driver()
    from cudnn_py.backend import Descriptor

    d = Descriptor("CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR")
    doc = kc_doc()
    doc["operationGraph"]["tensors"] = 7
    with pytest.raises(SerializedJSONError, match="CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION: operationGraph"):
        d.set("CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION", json.dumps(doc))


def test_a_plan_json_is_checked_at_set_unless_its_caller_checked_it(monkeypatch):
    """Descriptor.set checks an execution plan's JSON; a caller that checked it already (serialize.load, the disk
    cache's decode) or that holds cuDNN's own (the plan cache) says so and the ~2 ms parse is not paid twice."""
    from tests.support.libcuda_stub import ensure_driver

    ensure_driver()
    from cudnn_py.backend import Descriptor

    text = json.loads((DATA / "plan_sdpa_cudnn91900.json").read_text())["plan"]["json"]
    checked = []
    real = json_check.check_attribute
    monkeypatch.setattr(json_check, "check_attribute", lambda a, data: checked.append(a) or real(a, data))
    attr_name = "CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION"
    Descriptor("CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR").set(attr_name, text)
    assert checked == [attr_name]
    Descriptor("CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR").set(attr_name, text, json_checked=True)
    assert checked == [attr_name]  # not again
    doc = json.loads(text)
    doc["operationGraph"]["tensors"] = 7
    with pytest.raises(SerializedJSONError, match=f"{attr_name}: operationGraph.tensors: 7 is not a list"):
        Descriptor("CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR").set(attr_name, json.dumps(doc))


@pytest.mark.parametrize("field, value, message", [
    ("warpSize", 0, r"warpSize: 0 is below 1"), ("multiProcessorCount", -1, r"multiProcessorCount: -1 is below 1"),
    ("maxGridSize", ["a", "b", "c"], r"maxGridSize\[0\]: \"a\" is not an integer"),
    ("deviceName", 5, r"deviceName: 5 is not a string"),
])
def test_device_properties_json_refusals(field, value, message):
    import cudnn_py as cudnn

    doc = json.loads((ROOT / "tests/data/deviceprop_sm90_cudnn91900.json").read_text())
    doc[field] = value
    with pytest.raises(SerializedJSONError, match=message):
        cudnn.create_device_properties(json.dumps(doc))


# ---- serialized plan blobs ----------------------------------------------------------------------------------------
@pytest.fixture
def load_blob(monkeypatch):
    """serialize.load against the captured 9.19 blob, the cuDNN calls replaced (the parser and checks only)."""
    from cudnn_py.backend import versions

    class FakePlan:
        workspace = 256

    monkeypatch.setattr(serialize.ExecutionPlan, "from_json",
                        classmethod(lambda cls, text, handle, json_checked: FakePlan()))
    doc = json.loads((DATA / "plan_sdpa_cudnn91900.json").read_text())
    doc["cudnn_version"] = versions.runtime_version()

    def load(edit=lambda d: None):
        d = json.loads(json.dumps(doc))
        edit(d)
        return serialize.load(json.dumps(d).encode(), 0)
    return load


def test_a_real_blob_loads(load_blob):
    plan, records, scratch = load_blob()
    assert [r.uid for r in records] == [1, 2, 3, 4, 5, 11] and scratch == {}


def _rec(i, **kw):
    return lambda d: d["tensors"][i].update(**kw)


@pytest.mark.parametrize("edit, message", [
    (_rec(0, dim=[-5, 3, 64, 64]), r"tensors\[0\].dim\[0\]: -5 is below 1"),
    (_rec(0, dim=[2 ** 63, 2 ** 63, 1, 1]), r"dim\[0\]: 2\*\*63 exceeds 2\*\*62"),
    (_rec(0, stride=[2 ** 80, 1, 1, 1]), r"stride\[0\]: 2\*\*80 exceeds"),
    (_rec(0, stride=[1]), r"tensors\[0\].stride: 1 element\(s\); 4..4 allowed"),
    (_rec(0, uid=1.9), r"uid: 1.9 is not an integer"), (_rec(0, uid="12"), r"uid: \"12\" is not an integer"),
    (_rec(0, uid=2 ** 70), r"uid: 2\*\*70 exceeds"),
    (_rec(0, is_pass_by_value="false"), r"is_pass_by_value: \"false\" is not a boolean"),
    (_rec(0, alignment=-16), r"alignment: -16 is below 1"),
    (_rec(1, uid=1), r"uid 1 appears twice"),
    (lambda d: d["tensors"].extend([d["tensors"][0]] * 200000), r"tensors: 200006 element\(s\)"),
    (lambda d: d.update(cudnn_version=float(d["cudnn_version"])), r"cudnn_version: .* is not an integer"),
    (_rec(0, dim=[1, 2, 64, 32]), r"tensors\[0\]: dims .* span 16320 bytes; the plan's tensor 1 .* reads 16384"),
    (_rec(0, data_type="FLOAT"), r"FLOAT does not match the plan's CUDNN_DATA_HALF"),
    (lambda d: d["tensors"].pop(2), r"the plan's tensor 3 has no record"),
    (lambda d: d["plan"].update(workspace=16), r"plan.workspace: 16 bytes; cuDNN says the plan needs 256"),
    (lambda d: d["plan"].update(json='{"cudnnVersion": 1, "operationGraph": {"tensors": 7, "nodes": []}, '
                                     '"engine": {"engineId": 0}}'), r"plan.json: operationGraph.tensors: 7"),
])
def test_blob_refusals(load_blob, edit, message):
    with pytest.raises(SerializedJSONError, match=message):
        load_blob(edit)


def test_a_nested_blob_is_a_clean_error():
    with pytest.raises(ValueError, match="nested .* levels deep"):
        serialize.load(b"[" * 200000, 0)


def test_a_kernel_without_kernel_params_is_cudnns_own_output():
    """cuDNN 9.19 writes some runtime-compiled kernels without ``kernelParams`` (the layernorm backward's plan on the
    H200, 2026-12-04: the disk cache dropped every such entry until the schema allowed it); a kernelParams that is
    there is still checked."""
    doc = json.loads(json.loads((DATA / "plan_pointwise_cudnn91900.json").read_text())["plan"]["json"])
    kernel = doc["engine"]["payload"]["kernels"][0]
    params = kernel.pop("kernelParams")
    json_check.check_execution_plan(json.dumps(doc))
    kernel["kernelParams"] = {"offsets": params["offsets"]}
    with pytest.raises(SerializedJSONError, match=r"kernels\[0\].kernelParams.rawData: missing"):
        json_check.check_execution_plan(json.dumps(doc))
