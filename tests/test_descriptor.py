"""Descriptor set/get/finalize against the real cuDNN on the CPU (with the test libcuda stub), every error path,
ownership, and tracing/replay."""
from __future__ import annotations

import gc
import io

import pytest

import cudnn_py
from cudnn_py import backend
from cudnn_py.backend import Descriptor, DescriptorError, UnsupportedAttributeError, enums, trace, tracing
from cudnn_py.errors import BadParamError, CudnnError, NotSupportedError


def tensor(uid=1, dims=(1, 4, 8), dtype="CUDNN_DATA_FLOAT", virtual=False, finalize=True):
    strides, acc = [], 1
    for d in reversed(dims):
        strides.insert(0, acc)
        acc *= d
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    t.set("CUDNN_ATTR_TENSOR_DATA_TYPE", dtype).set("CUDNN_ATTR_TENSOR_DIMENSIONS", list(dims))
    t.set("CUDNN_ATTR_TENSOR_STRIDES", strides).set("CUDNN_ATTR_TENSOR_UNIQUE_ID", uid)
    t.set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16)
    if virtual:
        t.set("CUDNN_ATTR_TENSOR_IS_VIRTUAL", True)
    return t.finalize() if finalize else t


def test_enum_str_and_unknown_values():
    k = enums.enum_class("cudnnBackendDescriptorType_t")
    assert str(k.CUDNN_BACKEND_TENSOR_DESCRIPTOR) == "cudnnBackendDescriptorType_t.CUDNN_BACKEND_TENSOR_DESCRIPTOR"
    note = enums.enum_class("cudnnBackendNumericalNote_t")(4242)  # a value only a newer cuDNN knows
    assert note.name == "UNKNOWN_4242" and int(note) == 4242
    assert enums.member("CUDNN_DATA_HALF") == 2


def test_tensor_round_trip_and_repr():
    t = tensor(uid=7, dims=(2, 3, 5))
    assert t.get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [2, 3, 5]
    assert t.get("CUDNN_ATTR_TENSOR_STRIDES") == [15, 5, 1]
    assert t.get("CUDNN_ATTR_TENSOR_UNIQUE_ID") == 7
    assert t.get("CUDNN_ATTR_TENSOR_DATA_TYPE").name == "CUDNN_DATA_FLOAT"
    assert t.get("CUDNN_ATTR_TENSOR_IS_VIRTUAL") is False
    r = repr(t)
    assert "CUDNN_BACKEND_TENSOR_DESCRIPTOR" in r and "finalized" in r and "CUDNN_ATTR_TENSOR_DIMENSIONS=[2, 3, 5]" in r


def test_enum_member_and_int_values_accepted():
    t = Descriptor(enums.enum_class("cudnnBackendDescriptorType_t").CUDNN_BACKEND_TENSOR_DESCRIPTOR)
    dt = enums.enum_class("cudnnDataType_t")
    t.set(enums.enum_class("cudnnBackendAttributeName_t").CUDNN_ATTR_TENSOR_DATA_TYPE, dt.CUDNN_DATA_HALF)
    assert t.attributes["CUDNN_ATTR_TENSOR_DATA_TYPE"] == "CUDNN_DATA_HALF"


def test_operations_and_operation_graph_finalize_without_gpu():
    a, b = tensor(1, (1, 8, 16)), tensor(2, (1, 16, 4))
    c = tensor(3, (1, 8, 4), virtual=True)
    y = tensor(4, (1, 8, 4))
    mm = Descriptor("CUDNN_BACKEND_MATMUL_DESCRIPTOR").set("CUDNN_ATTR_MATMUL_COMP_TYPE", "CUDNN_DATA_FLOAT").finalize()
    op_mm = Descriptor("CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR")
    op_mm.set("CUDNN_ATTR_OPERATION_MATMUL_ADESC", a).set("CUDNN_ATTR_OPERATION_MATMUL_BDESC", b)
    op_mm.set("CUDNN_ATTR_OPERATION_MATMUL_CDESC", c).set("CUDNN_ATTR_OPERATION_MATMUL_DESC", mm).finalize()
    pw = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR")
    pw.set("CUDNN_ATTR_POINTWISE_MODE", "CUDNN_POINTWISE_RELU_FWD").set("CUDNN_ATTR_POINTWISE_MATH_PREC", "CUDNN_DATA_FLOAT")
    pw.finalize()
    op_pw = Descriptor("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR")
    op_pw.set("CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR", pw)
    op_pw.set("CUDNN_ATTR_OPERATION_POINTWISE_XDESC", c).set("CUDNN_ATTR_OPERATION_POINTWISE_YDESC", y).finalize()
    red = Descriptor("CUDNN_BACKEND_REDUCTION_DESCRIPTOR")
    red.set("CUDNN_ATTR_REDUCTION_OPERATOR", "CUDNN_REDUCE_TENSOR_ADD").set("CUDNN_ATTR_REDUCTION_COMP_TYPE", "CUDNN_DATA_FLOAT")
    red.finalize()
    assert red.get("CUDNN_ATTR_REDUCTION_OPERATOR").name == "CUDNN_REDUCE_TENSOR_ADD"
    og = Descriptor("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR").set("CUDNN_ATTR_OPERATIONGRAPH_OPS", [op_mm, op_pw])
    og.finalize()
    assert og.get("CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT") > 0
    # descriptor arrays come back as new owned Descriptors of the catalog's kind
    back = op_mm.get("CUDNN_ATTR_OPERATION_MATMUL_ADESC")
    assert back.kind.name == "CUDNN_BACKEND_TENSOR_DESCRIPTOR" and back.get("CUDNN_ATTR_TENSOR_UNIQUE_ID") == 1


def test_backend_rejects_with_status_and_last_error():
    a, b = tensor(1, (1, 8, 16)), tensor(2, (1, 15, 4))
    c = tensor(3, (1, 8, 4))
    mm = Descriptor("CUDNN_BACKEND_MATMUL_DESCRIPTOR").set("CUDNN_ATTR_MATMUL_COMP_TYPE", "CUDNN_DATA_FLOAT").finalize()
    op = Descriptor("CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_MATMUL_ADESC", a).set("CUDNN_ATTR_OPERATION_MATMUL_BDESC", b)
    op.set("CUDNN_ATTR_OPERATION_MATMUL_CDESC", c).set("CUDNN_ATTR_OPERATION_MATMUL_DESC", mm)
    with pytest.raises(BadParamError) as ei:
        op.finalize()
    e = ei.value
    assert isinstance(e, CudnnError) and isinstance(e, RuntimeError)
    assert e.status_name.startswith("CUDNN_STATUS_BAD_PARAM") and e.function == "cudnnBackendFinalize"
    assert e.kind == "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR"
    # the wording differs between cuDNN versions ("Matmul dim mismatch ..." on 9.28, the failed condition on 9.19)
    assert e.last_error and e.last_error[:40] in str(e)
    assert "dim" in e.last_error.lower()


def test_reduction_norm2_is_not_supported_category():
    red = Descriptor("CUDNN_BACKEND_REDUCTION_DESCRIPTOR")
    red.set("CUDNN_ATTR_REDUCTION_OPERATOR", "CUDNN_REDUCE_TENSOR_NORM2").set("CUDNN_ATTR_REDUCTION_COMP_TYPE", "CUDNN_DATA_FLOAT")
    with pytest.raises(NotSupportedError):
        red.finalize()


@pytest.mark.parametrize("attr,value,fragment", [
    ("CUDNN_ATTR_TENSOR_DIMENSIONS", [1.5, 2], "cannot convert"),          # wrong value type
    ("CUDNN_ATTR_TENSOR_UNIQUE_ID", [1, 2], "takes 1 element"),            # wrong count
    ("CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_POINTWISE_ADD", "not a member"),  # wrong enum
    ("CUDNN_ATTR_MATMUL_COMP_TYPE", "CUDNN_DATA_FLOAT", "belongs to CUDNN_BACKEND_MATMUL_DESCRIPTOR"),  # wrong owner
    ("CUDNN_ATTR_NOT_A_THING", 1, "unknown or untyped attribute"),
])
def test_set_checks_before_backend(attr, value, fragment):
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    with pytest.raises(DescriptorError, match=fragment):
        t.set(attr, value)


def test_explicit_type_must_be_accepted():
    pw = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR")
    pw.set("CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP", 0.5, type="CUDNN_TYPE_FLOAT")
    with pytest.raises(DescriptorError, match="does not accept CUDNN_TYPE_INT64"):
        pw.set("CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP", 1, type="CUDNN_TYPE_INT64")


def test_descriptor_elements_are_checked_for_kind_and_finalization():
    op = Descriptor("CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR")
    mm = Descriptor("CUDNN_BACKEND_MATMUL_DESCRIPTOR").set("CUDNN_ATTR_MATMUL_COMP_TYPE", "CUDNN_DATA_FLOAT").finalize()
    with pytest.raises(DescriptorError, match="is a CUDNN_BACKEND_MATMUL_DESCRIPTOR"):  # backend would SIGSEGV
        op.set("CUDNN_ATTR_OPERATION_MATMUL_ADESC", mm)
    with pytest.raises(DescriptorError, match="not finalized"):
        op.set("CUDNN_ATTR_OPERATION_MATMUL_ADESC", tensor(finalize=False))
    with pytest.raises(DescriptorError, match="must be a Descriptor"):
        op.set("CUDNN_ATTR_OPERATION_MATMUL_ADESC", 1234)
    dead = tensor()
    dead.destroy()
    with pytest.raises(DescriptorError, match="destroyed"):
        op.set("CUDNN_ATTR_OPERATION_MATMUL_ADESC", dead)


def test_read_only_and_set_after_finalize():
    t = tensor()
    with pytest.raises(DescriptorError, match="already finalized"):
        t.set("CUDNN_ATTR_TENSOR_UNIQUE_ID", 3)
    with pytest.raises(DescriptorError, match="already finalized"):
        t.finalize()
    plan = Descriptor("CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR")
    with pytest.raises(DescriptorError, match="read-only"):
        plan.set("CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE", 0)


def test_attribute_newer_than_library(monkeypatch):
    import cudnn_py.backend.descriptor as d

    monkeypatch.setattr(d, "runtime_version", lambda: 91900)  # as on a cuDNN 9.19 machine
    og = Descriptor("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR")
    with pytest.raises(UnsupportedAttributeError, match=r"needs cuDNN 9\.23\.0 or newer; the loaded cuDNN is 9\.19\.0") as e:
        og.set("CUDNN_ATTR_OPERATIONGRAPH_MODE", "CUDNN_OPERATIONGRAPH_MODE_AUTO")
    # one typed error: a ValueError (misuse of the descriptor) and the classic "not supported" error
    assert isinstance(e.value, ValueError) and isinstance(e.value, cudnn_py.cudnnGraphNotSupportedError)
    assert (e.value.feature, e.value.needed, e.value.loaded) == ("CUDNN_ATTR_OPERATIONGRAPH_MODE", 92300, 91900)


def test_destroy_exactly_once():
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    t.destroy()
    assert t.destroyed
    with pytest.raises(DescriptorError, match="already destroyed"):
        t.destroy()
    with pytest.raises(DescriptorError, match="was destroyed"):
        t.set("CUDNN_ATTR_TENSOR_UNIQUE_ID", 1)
    with pytest.raises(DescriptorError, match="was destroyed"):
        t.finalize()
    with Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR") as c:
        pass
    assert c.destroyed


def test_garbage_collection_destroys(tmp_path):
    path = tmp_path / "t.jsonl"
    with tracing(str(path)):
        t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
        desc_id = t.id
        del t
        gc.collect()
    recs = trace.calls(path)
    destroyed = [r for r in recs if r["fn"] == "cudnnBackendDestroyDescriptor" and r["desc"] == desc_id]
    assert len(destroyed) == 1 and destroyed[0]["status"] == 0


def test_trace_records_and_replay(tmp_path):
    path = tmp_path / "calls.jsonl"
    with tracing(str(path)):
        tensor(5)
        op = Descriptor("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR")
        pw = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR").set("CUDNN_ATTR_POINTWISE_MODE", "CUDNN_POINTWISE_ADD")
        pw.set("CUDNN_ATTR_POINTWISE_MATH_PREC", "CUDNN_DATA_FLOAT").finalize()
        op.set("CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR", pw)
        try:
            Descriptor("CUDNN_BACKEND_REDUCTION_DESCRIPTOR").set(
                "CUDNN_ATTR_REDUCTION_OPERATOR", "CUDNN_REDUCE_TENSOR_NORM2").finalize()
        except NotSupportedError:
            pass
    recs = trace.calls(path)
    fns = {r["fn"] for r in recs}
    assert {"cudnnBackendCreateDescriptor", "cudnnBackendSetAttribute", "cudnnBackendFinalize"} <= fns
    dims = next(r for r in recs if r.get("attr") == "CUDNN_ATTR_TENSOR_DIMENSIONS")
    assert dims["values"] == [1, 4, 8] and dims["type"] == "CUDNN_TYPE_INT64" and dims["count"] == 3
    setpw = next(r for r in recs if r.get("attr") == "CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR")
    assert setpw["values"][0]["desc"] == pw.id and setpw["values"][0]["ptr"].startswith("0x")
    failed = [r for r in recs if r["fn"] == "cudnnBackendFinalize" and r["status"] != 0]
    assert failed and failed[0]["status_name"].startswith("CUDNN_STATUS_NOT_SUPPORTED")
    assert all("us" in r and "seq" in r for r in recs)
    out = io.StringIO()
    from cudnn_py.tools.trace_replay import replay

    assert replay(str(path), out=out) == 0, out.getvalue()
    assert "0 status mismatch" in out.getvalue()


def test_tracing_off_by_default():
    from cudnn_py.backend import trace

    assert trace.active is None


def test_handle_needs_a_gpu_and_says_so():
    from tests.conftest import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError, match="CUDA driver|GPU|cudaGetDeviceCount"):
        backend.create_handle()


def test_tracing_survives_a_finalizer_during_a_record():
    """GC can destroy a descriptor (and record that) while the tracer is writing another record on the same
    thread; that once deadlocked the whole test suite. Run it in a thread so a regression fails, not hangs."""
    import threading

    class Stream(io.StringIO):
        def __init__(self):
            super().__init__()
            self.victim = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
            self.victim_id = self.victim.id

        def write(self, s):
            victim, self.victim = self.victim, None
            del victim  # the finalizer runs here, inside the outer record's write
            return super().write(s)

    stream = Stream()
    done = threading.Event()

    def run():
        with tracing(stream):
            Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR").set("CUDNN_ATTR_TENSOR_UNIQUE_ID", 1)
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    assert done.is_set(), "tracing deadlocked on a nested record"
    recs = trace.read(stream.getvalue().splitlines())
    destroyed = [r for r in recs if r["fn"] == "cudnnBackendDestroyDescriptor" and r["desc"] == stream.victim_id]
    assert len(destroyed) == 1
    seqs = [r["seq"] for r in recs]
    assert len(set(seqs)) == len(seqs)


def test_set_on_a_destroyed_finalized_descriptor_says_destroyed():
    t = (Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR").set("CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_DATA_FLOAT")
         .set("CUDNN_ATTR_TENSOR_DIMENSIONS", [2, 3]).set("CUDNN_ATTR_TENSOR_STRIDES", [3, 1])
         .set("CUDNN_ATTR_TENSOR_UNIQUE_ID", 1).set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16).finalize())
    t.destroy()
    with pytest.raises(DescriptorError, match="was destroyed"):
        t.set("CUDNN_ATTR_TENSOR_UNIQUE_ID", 2)


def test_scalar_reader_reads_what_get_reads_and_is_traced(tmp_path):
    from cudnn_py.backend.descriptor import ScalarReader

    knob_type, knob_value = (ScalarReader(f"CUDNN_ATTR_KNOB_CHOICE_KNOB_{a}") for a in ("TYPE", "VALUE"))
    built = Descriptor("CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR")
    built.set("CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE", 3).set("CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE", 2).finalize()
    copy = Descriptor("CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR")
    holder = Descriptor("CUDNN_BACKEND_ENGINECFG_DESCRIPTOR")  # a descriptor cuDNN fills: the fast path
    copy._filled = True
    path = tmp_path / "r.jsonl"
    with tracing(str(path)):
        assert (knob_type(built), knob_value(built)) == (3, int(built.get("CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE")))
    gets = [r for r in trace.calls(path) if r["fn"] == "cudnnBackendGetAttribute"]
    assert [r["attr"] for r in gets] == ["CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE", "CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE",
                                         "CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE"]
    with pytest.raises(DescriptorError, match="belongs to CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR"):
        knob_value(holder)  # another kind: get()'s checks answer
    with pytest.raises(DescriptorError, match="reads one number"):
        ScalarReader("CUDNN_ATTR_ENGINECFG_ENGINE")
    copy.destroy()
    with pytest.raises(DescriptorError, match="destroyed"):
        knob_value(copy)


def test_array_types_are_made_once_per_element_type_and_short_length():
    """ctypes frees an array type with its last array, so ``ct * n`` would build a new class per set: the
    converters reuse one per (element type, length) up to CACHED_ARRAY_LENGTH, and make longer ones each time."""
    import ctypes
    import weakref

    from cudnn_py.backend import values

    made = weakref.ref(values.array_type(ctypes.c_int64, 5))
    plain = weakref.ref(ctypes.c_int64 * 5 * 3)  # what ctypes alone does: gone with its last user
    gc.collect()
    assert made() is not None and plain() is None
    assert values.array_type(ctypes.c_int64, 5) is made()
    assert values.array_type(ctypes.c_int64, 5) is not values.array_type(ctypes.c_int32, 5)
    long = values.CACHED_ARRAY_LENGTH + 1
    assert (ctypes.c_double, long) not in values._ARRAY_TYPES
    values.array_type(ctypes.c_double, long)
    assert (ctypes.c_double, long) not in values._ARRAY_TYPES
    assert list(values.int_array("CUDNN_ATTR_TENSOR_DIMENSIONS", "CUDNN_TYPE_INT64", [2, 3, 4])) == [2, 3, 4]
