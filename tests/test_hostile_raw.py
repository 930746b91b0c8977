"""Hostile inputs at the raw layer: what used to crash cuDNN 9.28 (SIGSEGV / SIGABRT) or slip through silently is now
refused by ``Descriptor`` and the handle functions with a DescriptorError / ValueError naming the problem.

Anything that could crash runs in a child process (a signal there fails the test and names it): the crash
regressions below, and a fuzz over every settable attribute of the generated catalog that the loaded library has.
The rest runs in-process.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import pytest

from cudnn_py._generated.attributes import ATTRIBUTES
from cudnn_py._generated.enums import ENUMS
from cudnn_py.backend import Descriptor, DescriptorError, handle, live, requirements, values
from cudnn_py.backend.versions import available, runtime_version, since

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------------- child processes
PRELUDE = '''
import ctypes, sys
from tests.support.libcuda_stub import ensure_driver
ensure_driver()
from cudnn_py.backend import Descriptor, handle
from cudnn_py.backend.versions import available
from cudnn_py.errors import CudnnError, DescriptorError

class Skip(Exception):
    pass

def need(feature):
    if not available(feature):
        raise Skip(f"{feature} is not in the loaded cuDNN")

def tensor(uid=1, dims=(1, 4, 8), virtual=False, finalize=True):
    strides, acc = [], 1
    for d in reversed(dims):
        strides.insert(0, acc); acc *= d
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    t.set("CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_DATA_FLOAT").set("CUDNN_ATTR_TENSOR_DIMENSIONS", list(dims))
    t.set("CUDNN_ATTR_TENSOR_STRIDES", strides).set("CUDNN_ATTR_TENSOR_UNIQUE_ID", uid)
    t.set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16)
    if virtual:
        t.set("CUDNN_ATTR_TENSOR_IS_VIRTUAL", True)
    return t.finalize() if finalize else t

def relu_op(x_uid=1, y_uid=2):
    pw = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR").set("CUDNN_ATTR_POINTWISE_MODE", "CUDNN_POINTWISE_RELU_FWD")
    pw.set("CUDNN_ATTR_POINTWISE_MATH_PREC", "CUDNN_DATA_FLOAT").finalize()
    op = Descriptor("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR").set("CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR", pw)
    op.set("CUDNN_ATTR_OPERATION_POINTWISE_XDESC", tensor(x_uid)).set("CUDNN_ATTR_OPERATION_POINTWISE_YDESC", tensor(y_uid))
    return op.finalize()

def matmul_op():
    a, b, c = tensor(1, (1, 8, 16)), tensor(2, (1, 16, 4)), tensor(3, (1, 8, 4))
    mm = Descriptor("CUDNN_BACKEND_MATMUL_DESCRIPTOR").set("CUDNN_ATTR_MATMUL_COMP_TYPE", "CUDNN_DATA_FLOAT").finalize()
    op = Descriptor("CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_MATMUL_ADESC", a).set("CUDNN_ATTR_OPERATION_MATMUL_BDESC", b)
    op.set("CUDNN_ATTR_OPERATION_MATMUL_CDESC", c).set("CUDNN_ATTR_OPERATION_MATMUL_DESC", mm)
    return op.finalize()

def graph_with_mode(mode, ops):
    need("CUDNN_ATTR_OPERATIONGRAPH_MODE")
    og = Descriptor("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR").set("CUDNN_ATTR_OPERATIONGRAPH_OPS", ops)
    og.set("CUDNN_ATTR_OPERATIONGRAPH_MODE", mode)
    return og.finalize()
'''


def child_program(cases: list[tuple[str, str]]) -> str:
    """A child running each (name, body) in turn; before each it prints ``CASE name``, after it one line
    ``RESULT name REFUSED <exception class> <message>`` / ``ACCEPTED`` / ``SKIP <why>``."""
    prog = [PRELUDE]
    for i, (_name, body) in enumerate(cases):
        prog.append(f"def case_{i}():\n" + textwrap.indent(textwrap.dedent(body).strip(), "    "))
    prog.append("for name, fn in [" + ", ".join(f"({n!r}, case_{i})" for i, (n, _b) in enumerate(cases)) + "]:")
    prog.append(textwrap.indent(textwrap.dedent('''
        print("CASE", name, flush=True)
        try:
            fn()
        except Skip as e:
            res = "SKIP " + str(e)
        except (DescriptorError, CudnnError, ValueError) as e:
            # cudnn_py's category, or the classic type a caller catches for cudnn_py's plain refusals
            kind = type(e).__name__ if type(e).__name__ != "InvalidValueError" else "ValueError"
            res = "REFUSED " + kind + " " + " ".join(str(e).split())
        else:
            res = "ACCEPTED"
        print("RESULT", name, res, flush=True)
    '''), "    "))
    return "\n".join(prog) + "\n"


def start_child(program: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-c", program] if program else [sys.executable, *args]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def case_results(p: subprocess.Popen, timeout: float = 180) -> tuple[dict[str, str], str | None, str]:
    """{case: result} of a child_program child, and how it ended: None, or the signal / exit code plus the case
    it was running."""
    out, err = p.communicate(timeout=timeout)
    results, running = {}, None
    for ln in out.splitlines():
        if ln.startswith("CASE "):
            running = ln[5:]
        elif ln.startswith("RESULT "):
            name, res = ln[7:].split(" ", 1)
            results[name], running = res, None
    death = None
    if p.returncode != 0:
        how = signal.Signals(-p.returncode).name if p.returncode < 0 else f"exit status {p.returncode}"
        death = f"{how} while running {running or 'the prelude'}\n{err[-3000:]}"
    return results, death, out


def check_case(children: dict, case: str) -> str:
    res = children["results"](case)
    if res.startswith("SKIP"):
        pytest.skip(res)
    return res


# Each listed crash of the issue, as (case, child body, expected exception class, fragment of its message).
# Before this change every one of them killed the child (the signal is in the case name).
CRASHES = [
    ("enginecfg-empty-SIGSEGV", "Descriptor('CUDNN_BACKEND_ENGINECFG_DESCRIPTOR').finalize()",
     "DescriptorError", "missing required attribute(s) CUDNN_ATTR_ENGINECFG_ENGINE"),
    ("enginecfg-only-knob-choices-SIGSEGV", """
        d = Descriptor('CUDNN_BACKEND_ENGINECFG_DESCRIPTOR').set('CUDNN_ATTR_ENGINECFG_KNOB_CHOICES', [])
        d.finalize()""", "DescriptorError", "CUDNN_ATTR_ENGINECFG_ENGINE"),
    ("plan-empty-SIGSEGV", "Descriptor('CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR').finalize()",
     "DescriptorError", "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG or CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION"),
    ("plan-only-run-only-uids-SIGSEGV", """
        d = Descriptor('CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR')
        d.set('CUDNN_ATTR_EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS', 1).finalize()""",
     "DescriptorError", "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG"),
    ("plan-only-cuda-graph-retention-SIGSEGV", """
        need('CUDNN_ATTR_EXECUTION_PLAN_CUDA_GRAPH_RETENTION')
        d = Descriptor('CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR')
        d.set('CUDNN_ATTR_EXECUTION_PLAN_CUDA_GRAPH_RETENTION', 0).finalize()""",
     "DescriptorError", "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG"),
    ("graph-mode-conv-forward-SIGSEGV", "graph_with_mode('CUDNN_OPERATIONGRAPH_MODE_CONV_FORWARD', [relu_op()])",
     "DescriptorError", "needs an operation of kind CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR"),
    ("graph-mode-conv-bwd-data-SIGSEGV", "graph_with_mode('CUDNN_OPERATIONGRAPH_MODE_CONV_BWD_DATA', [matmul_op()])",
     "DescriptorError", "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR"),
    ("graph-mode-conv-bwd-filter-SIGSEGV", "graph_with_mode('CUDNN_OPERATIONGRAPH_MODE_CONV_BWD_FILTER', [relu_op()])",
     "DescriptorError", "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR"),
    ("graph-mode-norm-bwd-with-pointwise-SIGSEGV", "graph_with_mode('CUDNN_OPERATIONGRAPH_MODE_NORM_BWD', [relu_op()])",
     "DescriptorError", "CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR"),
    ("ragged-offset-get-unset-SIGSEGV", "tensor().get('CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC')",
     "DescriptorError", "never set"),
    ("ragged-offset-get-on-copy-SIGSEGV", """
        a = matmul_op().get('CUDNN_ATTR_OPERATION_MATMUL_ADESC')   # a copy cuDNN filled in
        a.get('CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC')""", "DescriptorError", "cuDNN filled this descriptor in"),
    ("operationgraph-handle-int-SIGSEGV", """
        og = Descriptor('CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR').set('CUDNN_ATTR_OPERATIONGRAPH_OPS', [relu_op()])
        og.set('CUDNN_ATTR_OPERATIONGRAPH_HANDLE', 12345).finalize()""", "DescriptorError", "0x3039 is not a handle"),
    ("deviceprop-handle-int-SIGSEGV", """
        need('CUDNN_ATTR_DEVICEPROP_HANDLE')
        Descriptor('CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR').set('CUDNN_ATTR_DEVICEPROP_HANDLE', 1).finalize()""",
     "DescriptorError", "0x1 is not a handle"),
    ("destroy-handle-int-SIGSEGV", "handle.destroy_handle(1)", "ValueError", "0x1 is not a handle"),
    ("get-stream-int-SIGSEGV", "handle.get_stream(1)", "ValueError", "get_stream: 0x1 is not a handle"),
    ("set-stream-int-SIGSEGV", "handle.set_stream(1, 0)", "ValueError", "set_stream: 0x1 is not a handle"),
    ("override-shapes-int-SIGABRT", """
        need('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES')
        Descriptor('CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR').set('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES', 12345)""",
     "DescriptorError", "takes rows of ints"),
    ("override-shapes-descriptor-SIGABRT", """
        need('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES')
        Descriptor('CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR').set('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES', tensor())""",
     "DescriptorError", "takes rows of ints"),
    ("override-strides-int-SIGABRT", """
        need('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_STRIDES')
        Descriptor('CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR').set('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_STRIDES', 7)""",
     "DescriptorError", "takes rows of ints"),
    ("override-strides-descriptor-SIGABRT", """
        need('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_STRIDES')
        Descriptor('CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR').set('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_STRIDES', tensor())""",
     "DescriptorError", "takes rows of ints"),
    ("constant-value-int-SIGSEGV", """
        need('CUDNN_ATTR_TENSOR_CONSTANT_VALUE')
        t = tensor(dims=(1, 1, 1), finalize=False).set('CUDNN_ATTR_TENSOR_IS_BY_VALUE', True)
        t.set('CUDNN_ATTR_TENSOR_CONSTANT_VALUE', 3)""", "DescriptorError", "cannot be a host address"),
]

# What must still work, next to the refusals (also in children: these reach the backend with our memory)
ACCEPTED = [
    ("override-shapes-rows-are-read-by-cudnn", """
        need('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES')
        def pack():
            p = Descriptor('CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR').set('CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS', [1, 2])
            p.set('CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS', [0x7f0000010000, 0x7f0000020000])
            return p.set('CUDNN_ATTR_VARIANT_PACK_WORKSPACE', None)
        v = pack()
        v.set('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_UNIQUE_IDS', [1, 2])
        v.set('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES', [[2, 3, 4], [8, 16, 1]])
        v.set('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_STRIDES', [[12, 4, 1], [16, 1, 1]])
        v.finalize()
        bad = pack()
        bad.set('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_UNIQUE_IDS', [1, 2])
        bad.set('CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES', [[2, 3, 4]])   # one row for two uids: cuDNN counts rows
        try:
            bad.finalize()
        except CudnnError as e:
            assert 'override' in str(e).lower(), e
        else:
            raise AssertionError('cuDNN did not see the single row')
        """),
    ("constant-value-ctypes-scalar", """
        need('CUDNN_ATTR_TENSOR_CONSTANT_VALUE')
        t = tensor(dims=(1, 1, 1), finalize=False).set('CUDNN_ATTR_TENSOR_IS_BY_VALUE', True)
        t.set('CUDNN_ATTR_TENSOR_CONSTANT_VALUE', ctypes.c_float(2.5)).finalize()
        u = tensor(uid=2, dims=(1, 1, 1), finalize=False).set('CUDNN_ATTR_TENSOR_IS_BY_VALUE', True)
        v = ctypes.c_float(1.0)
        u.set('CUDNN_ATTR_TENSOR_CONSTANT_VALUE', ctypes.addressof(v)).finalize()   # the lowering's int address
        """),
    ("graph-mode-matching-op-finalizes", """
        need('CUDNN_ATTR_OPERATIONGRAPH_MODE')
        graph_with_mode('CUDNN_OPERATIONGRAPH_MODE_GENERIC_MATMUL_FUSION', [matmul_op()])
        graph_with_mode('CUDNN_OPERATIONGRAPH_MODE_AUTO', [relu_op()])
        """),
]


CHILD_GROUPS = 3  # the cases run in this many children, side by side (a child costs ~0.5 s of start-up)


@pytest.fixture(scope="module")
def children():
    """Every case of CRASHES and ACCEPTED, in CHILD_GROUPS children started at once."""
    cases = [(c[0], c[1]) for c in CRASHES + ACCEPTED]
    groups = [cases[i::CHILD_GROUPS] for i in range(CHILD_GROUPS)]
    procs = [start_child(child_program(g)) for g in groups]
    done: dict[int, tuple] = {}

    def results(case: str) -> str:
        i = next(k for k, g in enumerate(groups) if any(name == case for name, _b in g))
        if i not in done:
            done[i] = case_results(procs[i])
        res, death, out = done[i]
        if case in res:
            return res[case]
        if death and f"while running {case}\n" in death + "\n":
            pytest.fail(f"{case}: the child process died by {death}")
        pytest.fail(f"{case}: not reached — the child ended with {death or 'no result'}\n{out[-2000:]}")

    yield {"results": results}
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("case,body,exc,fragment", CRASHES, ids=[c[0] for c in CRASHES])
def test_former_crash_is_refused(children, case, body, exc, fragment):
    res = check_case(children, case)
    assert res.startswith(f"REFUSED {exc} "), res
    assert fragment in res, res


@pytest.mark.parametrize("case,body", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_legal_input_still_reaches_cudnn(children, case, body):
    res = check_case(children, case)
    assert res == "ACCEPTED", res


# --------------------------------------------------------------------------------------------------- in-process
def tensor(uid=1, dims=(1, 4, 8), finalize=True, **extra):
    strides, acc = [], 1
    for d in reversed(dims):
        strides.insert(0, acc)
        acc *= d
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    t.set("CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_DATA_FLOAT").set("CUDNN_ATTR_TENSOR_DIMENSIONS", list(dims))
    t.set("CUDNN_ATTR_TENSOR_STRIDES", strides).set("CUDNN_ATTR_TENSOR_UNIQUE_ID", uid)
    t.set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16)
    for k, v in extra.items():
        t.set(k, v)
    return t.finalize() if finalize else t


@pytest.mark.parametrize("attr,value,fragment", [
    ("CUDNN_ATTR_TENSOR_DIMENSIONS", [2 ** 64 + 2, 3], "out of range for CUDNN_TYPE_INT64"),  # finalized as [2, 3]
    ("CUDNN_ATTR_TENSOR_UNIQUE_ID", 2 ** 64 + 1, "out of range"),  # collided with uid 1
    ("CUDNN_ATTR_TENSOR_UNIQUE_ID", -(2 ** 63) - 1, "out of range"),
    ("CUDNN_ATTR_TENSOR_UNIQUE_ID", True, "cannot convert bool"),
    ("CUDNN_ATTR_TENSOR_DIMENSIONS", ["2", 3], "cannot convert str"),
    ("CUDNN_ATTR_TENSOR_IS_VIRTUAL", None, "CUDNN_TYPE_BOOLEAN takes True/False"),  # was read as False
    ("CUDNN_ATTR_TENSOR_IS_VIRTUAL", "no", "CUDNN_TYPE_BOOLEAN takes True/False"),  # was read as True
    ("CUDNN_ATTR_TENSOR_IS_VIRTUAL", {}, "CUDNN_TYPE_BOOLEAN takes True/False"),
    ("CUDNN_ATTR_TENSOR_IS_VIRTUAL", 2, "CUDNN_TYPE_BOOLEAN takes True/False"),
    ("CUDNN_ATTR_TENSOR_DATA_TYPE", 9999, "9999 is not a value of cudnnDataType_t"),  # was passed as is
    ("CUDNN_ATTR_TENSOR_DATA_TYPE", -1, "is not a value of cudnnDataType_t"),
    ("CUDNN_ATTR_TENSOR_DATA_TYPE", True, "is not a member of cudnnDataType_t"),
    ("CUDNN_ATTR_TENSOR_DATA_TYPE", 1.0, "is not a member of cudnnDataType_t"),
])
def test_values_that_used_to_be_converted_silently(attr, value, fragment):
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    with pytest.raises(DescriptorError, match=fragment):
        t.set(attr, value)
    assert attr not in t.attributes


def test_an_enum_member_of_another_enum_is_refused():
    from cudnn_py.backend import enums

    heur = enums.enum_class("cudnnBackendHeurMode_t").CUDNN_HEUR_MODE_B  # == 1 == CUDNN_DATA_DOUBLE
    t = Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR")
    with pytest.raises(DescriptorError, match="is a member of cudnnBackendHeurMode_t, not of cudnnDataType_t"):
        t.set("CUDNN_ATTR_TENSOR_DATA_TYPE", heur)


def test_enum_members_newer_than_the_loaded_library_are_refused(monkeypatch):
    newest = max((s, n) for n, _v, s, _d in ENUMS["cudnnPointwiseMode_t"])
    if newest[0] <= 90000:
        pytest.skip("every pointwise mode is as old as 9.0")
    monkeypatch.setattr(values, "runtime_version", lambda: newest[0] - 100)
    pw = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR")
    with pytest.raises(DescriptorError, match=f"{newest[1]} needs cuDNN"):
        pw.set("CUDNN_ATTR_POINTWISE_MODE", newest[1])
    pw.set("CUDNN_ATTR_POINTWISE_MODE", "CUDNN_POINTWISE_ADD")  # a 9.0 member is fine


def test_int32_range():
    heur = Descriptor("CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR")
    with pytest.raises(DescriptorError, match=r"out of range for CUDNN_TYPE_INT32"):
        heur.set("CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET", 2 ** 31)
    heur.set("CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET", 2 ** 31 - 1)


def test_numpy_scalars_are_accepted_where_they_fit():
    np = pytest.importorskip("numpy")
    t = tensor(np.int64(7), dims=(np.int32(2), 3, 5), finalize=False)
    t.set("CUDNN_ATTR_TENSOR_IS_VIRTUAL", np.bool_(True)).finalize()
    assert t.get("CUDNN_ATTR_TENSOR_UNIQUE_ID") == 7 and t.get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [2, 3, 5]
    assert t.get("CUDNN_ATTR_TENSOR_IS_VIRTUAL") is True
    with pytest.raises(DescriptorError, match="out of range"):
        Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR").set("CUDNN_ATTR_TENSOR_DIMENSIONS", [np.uint64(2 ** 64 - 1)])
    with pytest.raises(DescriptorError, match="out of range"):  # an array goes through tolist()
        Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR").set("CUDNN_ATTR_TENSOR_DIMENSIONS",
                                                          np.array([2 ** 64 - 1], dtype=np.uint64))


@pytest.mark.parametrize("attr,value,type_,fragment", [
    ("CUDNN_ATTR_POINTWISE_ELU_ALPHA", math.nan, "CUDNN_TYPE_DOUBLE", "NaN"),
    ("CUDNN_ATTR_POINTWISE_SWISH_BETA", math.inf, "CUDNN_TYPE_DOUBLE", "a finite value is required"),
    ("CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA", 1e39, "CUDNN_TYPE_FLOAT", "overflows CUDNN_TYPE_FLOAT"),
    ("CUDNN_ATTR_POINTWISE_ELU_ALPHA", "1.0", "CUDNN_TYPE_DOUBLE", "cannot convert str"),
    ("CUDNN_ATTR_POINTWISE_ELU_ALPHA", None, "CUDNN_TYPE_DOUBLE", "cannot convert NoneType"),
    ("CUDNN_ATTR_POINTWISE_ELU_ALPHA", True, "CUDNN_TYPE_DOUBLE", "cannot convert bool"),
])
def test_float_checks(attr, value, type_, fragment):
    with pytest.raises(DescriptorError, match=fragment):
        Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR").set(attr, value, type=type_)


def test_infinite_clips_and_paddings_stay_legal():
    pw = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR")
    pw.set("CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP", math.inf, type="CUDNN_TYPE_DOUBLE")
    pw.set("CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP", -math.inf, type="CUDNN_TYPE_FLOAT")
    mm = Descriptor("CUDNN_BACKEND_MATMUL_DESCRIPTOR")
    mm.set("CUDNN_ATTR_MATMUL_PADDING_VALUE", -math.inf, type="CUDNN_TYPE_DOUBLE")


def test_fraction_checks():
    if not available("CUDNN_ATTR_RESAMPLE_STRIDES"):
        pytest.skip("no resample")
    rs = Descriptor("CUDNN_BACKEND_RESAMPLE_DESCRIPTOR")
    for bad, fragment in [((1, 0), "CUDNN_TYPE_FRACTION takes"), ("1/2", "CUDNN_TYPE_FRACTION takes"),
                          (Fraction(2 ** 70, 3), "does not fit cudnnFraction_t"), (math.nan, "CUDNN_TYPE_FRACTION")]:
        with pytest.raises(DescriptorError, match=fragment):  # (1, 0) was a ZeroDivisionError, "1/2" a ValueError
            rs.set("CUDNN_ATTR_RESAMPLE_STRIDES", bad, type="CUDNN_TYPE_FRACTION")
    rs.set("CUDNN_ATTR_RESAMPLE_STRIDES", [(1, 2), Fraction(3, 4)], type="CUDNN_TYPE_FRACTION")
    assert rs.attributes["CUDNN_ATTR_RESAMPLE_STRIDES"] == ["1/2", "3/4"]


def test_descriptor_kind_must_be_a_member():
    Descriptor(1), Descriptor(17)  # kinds looked up before: a cached lookup must not accept True or 1.0 for them
    for bad in (2 ** 40, -1, 51 + 1000, True, 1.0, 17.0, "CUDNN_BACKEND_NOT_A_KIND"):
        with pytest.raises(DescriptorError, match="descriptor kind"):  # 2**40 used to create a POINTWISE descriptor
            Descriptor(bad)
    from cudnn_py.backend import enums

    with pytest.raises(DescriptorError, match="is not a descriptor kind"):
        Descriptor(enums.member("CUDNN_DATA_HALF"))
    assert Descriptor(17).kind.name == "CUDNN_BACKEND_TENSOR_DESCRIPTOR"


def test_descriptors_are_not_pointers():
    t = tensor()
    vp = Descriptor("CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR")
    with pytest.raises(DescriptorError, match="takes a memory address, not a Descriptor"):  # was silently t.ptr
        vp.set("CUDNN_ATTR_VARIANT_PACK_WORKSPACE", t)
    with pytest.raises(DescriptorError, match="element 1 takes a memory address, not a Descriptor"):
        vp.set("CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS", [0x10000, t])
    for bad in (-1, 2 ** 64, 1.5, True, "0x1000"):
        with pytest.raises(DescriptorError):
            vp.set("CUDNN_ATTR_VARIANT_PACK_WORKSPACE", bad)
    vp.set("CUDNN_ATTR_VARIANT_PACK_WORKSPACE", None).set("CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS", [0x7F0000001000])
    plan = Descriptor("CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR")
    with pytest.raises(DescriptorError, match="a handle is an int"):  # was silently t.ptr as a handle
        plan.set("CUDNN_ATTR_EXECUTION_PLAN_HANDLE", t)


def test_constant_value_type_checks():
    if not available("CUDNN_ATTR_TENSOR_CONSTANT_VALUE"):
        pytest.skip("no compile-time constants before 9.22")
    t = tensor(dims=(1, 1, 1), finalize=False).set("CUDNN_ATTR_TENSOR_IS_BY_VALUE", True)
    with pytest.raises(DescriptorError, match="has 1 byte"):  # cuDNN would read 4 bytes from a 1-byte object
        t.set("CUDNN_ATTR_TENSOR_CONSTANT_VALUE", ctypes.c_int8(1))
    with pytest.raises(DescriptorError, match="takes the host address of the scalar"):
        t.set("CUDNN_ATTR_TENSOR_CONSTANT_VALUE", 2.5)
    with pytest.raises(DescriptorError, match="not a Descriptor"):  # was silently the descriptor's address
        t.set("CUDNN_ATTR_TENSOR_CONSTANT_VALUE", tensor(uid=9))


def test_override_rows_are_checked():
    if not available("CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES"):
        pytest.skip("no override shapes before 9.18")
    vp = Descriptor("CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR")
    for bad, fragment in [([1, 2], "row 0 must be a list of ints"), ([[1, "2"]], "cannot convert str"),
                          ([[2 ** 64]], "out of range"), ("[[1]]", "takes rows of ints"), (None, "takes rows")]:
        with pytest.raises(DescriptorError, match=fragment):
            vp.set("CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES", bad)


@pytest.mark.parametrize("kind,attrs,missing", [
    ("CUDNN_BACKEND_TENSOR_DESCRIPTOR", {"CUDNN_ATTR_TENSOR_DATA_TYPE": "CUDNN_DATA_FLOAT",
                                         "CUDNN_ATTR_TENSOR_DIMENSIONS": [2, 3], "CUDNN_ATTR_TENSOR_STRIDES": [3, 1],
                                         "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT": 16},
     "CUDNN_ATTR_TENSOR_UNIQUE_ID"),  # finalized with uid -1
    ("CUDNN_BACKEND_TENSOR_DESCRIPTOR", {"CUDNN_ATTR_TENSOR_UNIQUE_ID": 1, "CUDNN_ATTR_TENSOR_DIMENSIONS": [2, 3],
                                         "CUDNN_ATTR_TENSOR_STRIDES": [3, 1], "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT": 16,
                                         "CUDNN_ATTR_TENSOR_VECTOR_COUNT": 4},
     "CUDNN_ATTR_TENSOR_DATA_TYPE; CUDNN_ATTR_TENSOR_VECTORIZED_DIMENSION"),  # finalized as FLOAT
    ("CUDNN_BACKEND_POINTWISE_DESCRIPTOR", {"CUDNN_ATTR_POINTWISE_MODE": "CUDNN_POINTWISE_ADD"},
     "CUDNN_ATTR_POINTWISE_MATH_PREC"),
    ("CUDNN_BACKEND_ENGINE_DESCRIPTOR", {"CUDNN_ATTR_ENGINE_GLOBAL_INDEX": 0}, "CUDNN_ATTR_ENGINE_OPERATION_GRAPH"),
])
def test_required_attributes_are_named(kind, attrs, missing):
    d = Descriptor(kind)
    for k, v in attrs.items():
        d.set(k, v)
    with pytest.raises(DescriptorError, match=f"missing required attribute\\(s\\) {missing} "):
        d.finalize()
    assert not d.finalized


def test_operations_missing_their_parameters_are_refused():
    a, b, c = tensor(1, (1, 8, 16)), tensor(2, (1, 16, 4)), tensor(3, (1, 8, 4))
    op = Descriptor("CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_MATMUL_ADESC", a).set("CUDNN_ATTR_OPERATION_MATMUL_BDESC", b)
    op.set("CUDNN_ATTR_OPERATION_MATMUL_CDESC", c)
    with pytest.raises(DescriptorError, match="CUDNN_ATTR_OPERATION_MATMUL_DESC"):  # finalized, graph too
        op.finalize()
    pw = Descriptor("CUDNN_BACKEND_POINTWISE_DESCRIPTOR").set("CUDNN_ATTR_POINTWISE_MODE", "CUDNN_POINTWISE_RELU_FWD")
    pw.set("CUDNN_ATTR_POINTWISE_MATH_PREC", "CUDNN_DATA_FLOAT").finalize()
    op_pw = Descriptor("CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR").set(
        "CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR", pw)
    with pytest.raises(DescriptorError, match="CUDNN_ATTR_OPERATION_POINTWISE_XDESC or "
                                              "CUDNN_ATTR_OPERATION_POINTWISE_DYDESC"):
        op_pw.finalize()
    with pytest.raises(DescriptorError, match="is filled in by cuDNN"):  # finalized, read uninitialized memory
        Descriptor("CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR").finalize()


def test_reads_cudnn_cannot_answer_are_refused():
    a, b, c = tensor(1, (1, 8, 16)), tensor(2, (1, 16, 4)), tensor(3, (1, 8, 4))
    mm = Descriptor("CUDNN_BACKEND_MATMUL_DESCRIPTOR").set("CUDNN_ATTR_MATMUL_COMP_TYPE", "CUDNN_DATA_FLOAT").finalize()
    op = Descriptor("CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR")
    op.set("CUDNN_ATTR_OPERATION_MATMUL_ADESC", a).set("CUDNN_ATTR_OPERATION_MATMUL_BDESC", b)
    op.set("CUDNN_ATTR_OPERATION_MATMUL_CDESC", c).set("CUDNN_ATTR_OPERATION_MATMUL_DESC", mm).finalize()
    with pytest.raises(DescriptorError, match="never set on descriptor"):
        op.get("CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC")
    back = op.get("CUDNN_ATTR_OPERATION_MATMUL_ADESC")
    assert back.get("CUDNN_ATTR_TENSOR_UNIQUE_ID") == 1  # a copy still answers what cuDNN always knows
    with pytest.raises(DescriptorError, match="is not read as CUDNN_TYPE_INT64"):
        op.get("CUDNN_ATTR_OPERATION_MATMUL_ADESC", type="CUDNN_TYPE_INT64")
    with pytest.raises(DescriptorError, match="it holds CUDNN_BACKEND_TENSOR_DESCRIPTOR"):
        op.get("CUDNN_ATTR_OPERATION_MATMUL_ADESC", kind="CUDNN_BACKEND_MATMUL_DESCRIPTOR")
    with pytest.raises(DescriptorError, match="into\\[0\\] is a CUDNN_BACKEND_MATMUL_DESCRIPTOR"):
        op.get("CUDNN_ATTR_OPERATION_MATMUL_ADESC", into=[Descriptor("CUDNN_BACKEND_MATMUL_DESCRIPTOR")])
    with pytest.raises(DescriptorError, match="count must be an int"):
        a.get("CUDNN_ATTR_TENSOR_DIMENSIONS", count=-1)


# --------------------------------------------------------------------------------------------------- handles
class FakeLib:
    """cudnnCreate/Destroy/SetStream/GetStream without a GPU: only the registry logic is under test here."""

    def __init__(self):
        self.next, self.alive, self.destroyed, self.streams = 0x5000_0000, set(), [], {}

    def cudnnCreate(self, out):
        self.next += 0x1000
        out._obj.value = self.next
        self.alive.add(self.next)
        return 0

    def cudnnDestroy(self, h):
        assert h in self.alive, f"double free of {h:#x}"  # what the registry prevents
        self.alive.discard(h)
        self.destroyed.append(h)
        return 0

    def cudnnSetStream(self, h, s):
        assert h in self.alive
        self.streams[h] = s
        return 0

    def cudnnGetStream(self, h, out):
        assert h in self.alive
        out._obj.value = self.streams.get(h, 0) or None
        return 0


@pytest.fixture
def fake_handles(monkeypatch):
    fake = FakeLib()
    monkeypatch.setattr(handle, "lib", lambda: fake)
    monkeypatch.setattr(handle, "ensure_context", lambda device=None: 0 if device is None else device)
    # on a GPU machine earlier tests left real default handles: the fake library must not see (or destroy) them
    monkeypatch.setattr(handle, "_defaults", {})
    yield fake
    for rec in live.live_handles():  # leave the registry and the default handles as they were
        if rec.ptr in fake.alive or rec.ptr in fake.destroyed or rec.origin == "adopt_handle":
            live.unregister(rec.ptr, destroyed=False)
    for key, h in list(handle._defaults.items()):
        if int(h) in fake.alive or int(h) in fake.destroyed:
            del handle._defaults[key]


def test_destroy_twice_raises_instead_of_double_freeing(fake_handles):
    h = handle.create_handle()
    handle.set_stream(h, 0x1234)
    assert handle.get_stream(h) == 0x1234
    handle.destroy_handle(h)
    assert h.backend_handle is None and h.stream is None  # the Handle is cleared (1.32)
    with pytest.raises(ValueError, match=f"handle {int(h):#x} was destroyed by destroy_handle"):
        handle.destroy_handle(int(h))  # the pointer value: refused
    handle.destroy_handle(h)  # the cleared Handle: nothing to do (1.32), nothing reaches cuDNN
    assert fake_handles.destroyed == [int(h)]  # cudnnDestroy ran once
    for call in (lambda: handle.get_stream(h), lambda: handle.set_stream(h, 0)):
        with pytest.raises(ValueError, match="was destroyed"):
            call()
    og = Descriptor("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR")
    with pytest.raises(DescriptorError, match="was destroyed by destroy_handle"):
        og.set("CUDNN_ATTR_OPERATIONGRAPH_HANDLE", h)


def test_default_handles_are_live_until_destroyed(fake_handles):
    h = handle.default_handle(0)
    assert live.lookup(h) is not None and handle.live_handle(h) == int(h)
    handle.destroy_handle(h)
    assert handle.default_handle(0) != h  # a new default after the old one was destroyed
    handle.destroy_handle(handle.default_handle(0))


def test_adopted_handles(fake_handles):
    foreign = 0x7777_0000
    with pytest.raises(ValueError, match="is not a handle created by cudnn_py"):
        handle.get_stream(foreign)
    h = handle.adopt_handle(foreign)
    fake_handles.alive.add(foreign)  # "created by another library"
    assert int(h) == foreign and handle.get_stream(foreign) == 0
    assert handle.adopt_handle(foreign) == h  # idempotent
    with pytest.raises(ValueError, match="was adopted"):
        handle.destroy_handle(h)
    handle.forget_handle(h)
    with pytest.raises(ValueError, match="is not a handle"):
        handle.get_stream(h)
    owned = handle.adopt_handle(foreign, owned=True)
    handle.destroy_handle(owned)
    assert fake_handles.destroyed == [foreign]
    for bad in (None, "0x10", 1.5, -1, 0, 2 ** 64, True):
        with pytest.raises(ValueError):
            handle.adopt_handle(bad)


def test_handle_attribute_takes_only_live_handles(fake_handles, monkeypatch):
    h = handle.create_handle()
    og = Descriptor("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR")
    t = tensor()
    sent = []
    monkeypatch.setattr(Descriptor, "_raw_set", lambda self, spec, t, n, arr, traced=None: sent.append(arr[0]))
    og.set("CUDNN_ATTR_OPERATIONGRAPH_HANDLE", h)  # the fake handle must not reach the real cuDNN
    og.set("CUDNN_ATTR_OPERATIONGRAPH_HANDLE", int(h))
    og.set("CUDNN_ATTR_OPERATIONGRAPH_HANDLE", ctypes.c_void_p(int(h)))
    assert sent == [int(h)] * 3
    for bad, fragment in [(0, "NULL"), (None, "None"), (1, "0x1 is not a handle"), (1.0, "not float"),
                          (t, "not Descriptor")]:
        with pytest.raises(DescriptorError, match=fragment):
            og.set("CUDNN_ATTR_OPERATIONGRAPH_HANDLE", bad)
    handle.destroy_handle(h)


@pytest.mark.gpu
def test_real_handle_double_destroy_and_stale_use():
    h = handle.create_handle()
    ptr = int(h)
    handle.destroy_handle(h)
    assert h.backend_handle is None
    handle.destroy_handle(h)  # a cleared Handle: nothing to do, as in 1.32
    with pytest.raises(ValueError, match="was destroyed"):
        handle.destroy_handle(ptr)  # the raw pointer of it: a double free, refused
    with pytest.raises(ValueError, match="was destroyed"):
        handle.set_stream(h, 0)
    with pytest.raises(ValueError, match="was destroyed"):
        handle.set_stream(ptr, 0)


# --------------------------------------------------------------------------------------------------- the catalog
def _attribute_members() -> dict[str, int]:
    return {n: s for n, _v, s, _d in ENUMS["cudnnBackendAttributeName_t"]}


def test_requirement_catalog_names_real_attributes_of_their_kind():
    members = _attribute_members()
    kinds = {n for n, *_ in ENUMS["cudnnBackendDescriptorType_t"]}
    for kind, reqs in requirements.REQUIRED.items():
        assert kind in kinds, kind
        assert reqs, kind
        for req in reqs:
            assert req.source and req.any_of, (kind, req)
            for a in req.any_of + ((req.when,) if req.when else ()):
                assert a in members, (kind, a)
                if a in ATTRIBUTES:
                    assert ATTRIBUTES[a].owner == kind, (kind, a, ATTRIBUTES[a].owner)
                    assert ATTRIBUTES[a].settable, (kind, a)
    for kind in requirements.BACKEND_FILLED_KINDS:
        assert kind in kinds and not any(s.settable for s in ATTRIBUTES.values() if s.owner == kind)
    modes = {n for n, *_ in ENUMS["cudnnBackendOperationGraphMode_t"]}
    assert set(requirements.GRAPH_MODE_NEEDS) == modes - {"CUDNN_OPERATIONGRAPH_MODE_AUTO"}
    for mode, (ops, source) in requirements.GRAPH_MODE_NEEDS.items():
        assert source and ops and all(k in kinds for k in ops), mode
    for table in (requirements.GET_CRASHES_WHEN_UNSET, requirements.NONFINITE_ALLOWED,
                  requirements.HOST_POINTER_ATTRIBUTES):
        assert all(a in ATTRIBUTES for a in table), table
    assert all(a in ATTRIBUTES for a in requirements.FILLED_FROM_JSON)
    assert all(what and why for what, why in requirements.RAW_ERRATA)


def test_requirements_of_attributes_the_library_lacks_are_skipped(monkeypatch):
    from cudnn_py.backend import checks

    kc = "CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR"
    if runtime_version() >= since("CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION"):
        assert checks.missing_requirements(kc, {}) == [
            "CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH or CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION"]
    monkeypatch.setattr(checks, "runtime_version", lambda: 90400)  # 9.4: neither attribute exists yet
    assert checks.missing_requirements(kc, {}) == []
    assert checks.missing_requirements("CUDNN_BACKEND_ENGINECFG_DESCRIPTOR", {}) == ["CUDNN_ATTR_ENGINECFG_ENGINE"]


# --------------------------------------------------------------------------------------------------- the fuzz
FUZZ_BATCHES = 8


def _fuzz_attributes() -> list[str]:
    rv = runtime_version()
    return [a for a, s in ATTRIBUTES.items() if s.settable and s.since <= rv]


def test_fuzz_every_settable_attribute_with_bad_values():
    """Every settable attribute the loaded cuDNN has × the bad values of tests/support/raw_fuzz.py (wrong Python
    types, out-of-range ints, None, huge lists, descriptors of the wrong kind, destroyed and unfinalized ones),
    then finalize and a read back — in FUZZ_BATCHES child processes running side by side. No child may die, and
    every refusal must be a DescriptorError or a CudnnError."""
    attrs = _fuzz_attributes()
    batches = [attrs[i::FUZZ_BATCHES] for i in range(FUZZ_BATCHES)]
    procs = [start_child("", "-m", "tests.support.raw_fuzz", *b) for b in batches]
    outcomes: dict[str, int] = {}
    bad: list[dict] = []
    sets = 0
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=120)
        recs = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
        if p.returncode != 0:
            started = [r for r in recs if r["outcome"] == "start"]
            sig = signal.Signals(-p.returncode).name if p.returncode < 0 else f"exit {p.returncode}"
            pytest.fail(f"fuzz batch {i} died ({sig}) during {started[-1] if started else 'startup'}\n{err[-3000:]}")
        assert recs and recs[-1]["outcome"] == "end", f"batch {i} did not finish\n{err[-2000:]}"
        for r in recs:
            if r["outcome"] in ("start", "end"):
                continue
            kind = r["outcome"].split(":")[0] if r["outcome"].startswith("error") else r["outcome"]
            outcomes[kind] = outcomes.get(kind, 0) + 1
            sets += r["case"] not in ("create", "finalize", "get")
            if r["outcome"].startswith("error"):
                bad.append(r)
    assert not bad, "refusals that are neither DescriptorError nor CudnnError:\n" + "\n".join(map(str, bad[:20]))
    assert sets >= 10 * len(attrs), (sets, len(attrs))  # every attribute got its bad values
    assert outcomes.get("refused:DescriptorError", 0) > 0.9 * sets, outcomes  # refused before reaching cuDNN


def test_reading_a_set_ragged_offset_never_asks_cudnn():
    """Get of TENSOR_RAGGED_OFFSET_DESC crashes cuDNN 9.28 even when one is set: the descriptor set here is the
    answer (checked in a child process: a signal there fails the test)."""
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, ROOT)
        from tests.support.libcuda_stub import ensure_driver
        ensure_driver()
        from cudnn_py.backend import Descriptor

        def tensor(uid, dims, dt, ragged=None):
            strides, acc = [1] * len(dims), 1
            for i in range(len(dims) - 1, -1, -1):
                strides[i], acc = acc, acc * dims[i]
            d = (Descriptor("CUDNN_BACKEND_TENSOR_DESCRIPTOR").set("CUDNN_ATTR_TENSOR_DATA_TYPE", dt)
                 .set("CUDNN_ATTR_TENSOR_DIMENSIONS", dims).set("CUDNN_ATTR_TENSOR_STRIDES", strides)
                 .set("CUDNN_ATTR_TENSOR_UNIQUE_ID", uid).set("CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT", 16))
            if ragged is not None:
                d.set("CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC", ragged)
            return d.finalize()

        offsets = tensor(1, [3, 1, 1, 1], "CUDNN_DATA_INT32")
        t = tensor(2, [2, 4, 8, 16], "CUDNN_DATA_HALF", offsets)
        assert t.get("CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC") is offsets
        print("ok")
    """).replace("ROOT", repr(str(ROOT)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.strip().splitlines()[-1] == "ok"
