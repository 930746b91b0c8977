"""cudnn.gemm.ops.moe_grouped_matmul on the CPU: the lazy exports (importing cudnn_py.gemm / cudnn_py.gemm.ops
imports no torch; without torch the name is an ImportError naming it), the official alias
``cudnn.experimental.ops.moe_grouped_matmul``, the checks with the official operator's messages and classes in its
order (they run before any GPU work), the fake implementation, and the graph each mode builds validated deviceless
on cuDNN. GPU runs: tests/test_gpu_gemm_moe_op.py."""
from __future__ import annotations

from pathlib import Path

import pytest

import cudnn_py as cudnn
from cudnn_py.errors import CudnnPyError
from tests.support.child import run_json

ROOT = Path(__file__).resolve().parents[1]
HAS_MOE = cudnn.backend_version() >= 91800




def test_importing_the_gemm_namespaces_imports_no_torch():
    out = run_json("import sys, json\n"
               "import cudnn_py as c\n"
               "import cudnn_py.gemm, cudnn_py.gemm.ops\n"
               "print(json.dumps([c.gemm is sys.modules['cudnn_py.gemm'], c.gemm.ops is "
               "sys.modules['cudnn_py.gemm.ops'], sorted(c.gemm.ops.__all__), 'moe_grouped_matmul' in dir(c.gemm), "
               "sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))]))")
    assert out == [True, True, ["moe_grouped_matmul", "situ_mlp", "swiglu_mlp", "swiglu_moe"], True, []]


def test_without_torch_it_is_an_import_error_naming_torch():
    out = run_json("import sys, json\n"
               "sys.modules['torch'] = None\n"
               "import cudnn_py as c\n"
               "msgs = []\n"
               "for get in (lambda: c.gemm.ops.moe_grouped_matmul, lambda: c.experimental.ops.moe_grouped_matmul):\n"
               "    try:\n"
               "        get()\n"
               "    except ImportError as e:\n"
               "        msgs.append(str(e))\n"
               "print(json.dumps(msgs))")
    assert len(out) == 2 and all(m.startswith("moe_grouped_matmul requires the 'torch' module") for m in out)


def test_the_kernels_not_built_are_import_errors_saying_so():
    import cudnn_py.gemm as gemm
    import cudnn_py.gemm.ops as ops

    for name in ("swiglu_mlp", "situ_mlp", "swiglu_moe"):
        with pytest.raises(ImportError, match=rf"{name} is not implemented in cudnn_py yet"):
            getattr(ops, name)
    with pytest.raises(ImportError, match="mhc_projection_backward is not implemented in cudnn_py yet"):
        gemm.mhc_projection_backward  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_op"):
        ops.no_such_op  # noqa: B018


# ---- torch needed --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def mod(torch):
    import importlib

    # (``import cudnn_py.gemm.ops.moe_grouped_matmul as m`` gives the function: the package's public name)
    return importlib.import_module("cudnn_py.gemm.ops.moe_grouped_matmul")


@pytest.mark.parametrize("order", ["experimental first", "gemm first"])
def test_the_experimental_alias_is_the_function(torch, order):
    first, second = ("experimental", "gemm") if order == "experimental first" else ("gemm", "experimental")
    out = run_json("import json, cudnn_py as c, cudnn_py.experimental.ops, cudnn_py.gemm.ops\n"
               f"a = c.{first}.ops.moe_grouped_matmul\n"
               f"b = c.{second}.ops.moe_grouped_matmul\n"
               "import sys\n"
               "print(json.dumps([a is b, callable(a), a is c.gemm.moe_grouped_matmul, "
               "sys.modules['cudnn_py.experimental.ops.moe_grouped_matmul'] is "
               "sys.modules['cudnn_py.gemm.ops.moe_grouped_matmul']]))")
    assert out == [True, True, True, True]


def test_signature_is_the_officials(mod):
    import inspect

    sig = inspect.signature(mod.moe_grouped_matmul)
    assert list(sig.parameters) == ["token", "weight", "first_token_offset", "token_index", "token_ks", "mode",
                                    "top_k"]
    assert [sig.parameters[p].default for p in ("token_index", "token_ks", "mode", "top_k")] == [None, None,
                                                                                                 "none", 1]


def _operands(torch, t=16, k=8, n=4, e=2, offsets=None, dtype=None, device="cpu"):
    dtype = dtype or torch.float16
    tok = torch.zeros(1, t, k, dtype=dtype, device=device)
    w = torch.zeros(e, k, n, dtype=dtype, device=device)
    off = torch.zeros(offsets or e, 1, 1, dtype=torch.int32, device=device)
    idx = torch.zeros(1, t, 1, dtype=torch.int32, device=device)
    return tok, w, off, idx


# the official checks, in its order: all run before the device check, so CPU tensors reach them
@pytest.mark.parametrize("kw, offsets, e, match", [
    (dict(mode="NONE"), None, 2, r"^Invalid mode 'NONE'\. Must be one of: none, gather, scatter$"),
    (dict(mode="combine"), None, 2, r"^Invalid mode 'combine'"),
    (dict(mode="scatter", idx=True), None, 2, r"^SCATTER mode requires both token_index and token_ks$"),
    (dict(mode="gather"), None, 2, r"^GATHER mode requires token_index$"),
    (dict(off_shape=(2, 1)), None, 2, r"^first_token_offset must have shape \[G,1,1\] or \[G\+1,1,1\]$"),
    (dict(off_shape=(2, 2, 1)), None, 2, r"^first_token_offset must have shape \[G,1,1\] or \[G\+1,1,1\]$"),
    (dict(), 1, 1, r"^first_token_offset must contain G starts or G\+1 boundaries, where G is a positive multiple "
                   r"of the expert count \(E=1 requires G\+1\)$"),
    (dict(), 5, 3, r"^first_token_offset must contain G starts"),
])
def test_the_official_checks(torch, mod, kw, offsets, e, match):
    tok, w, off, idx = _operands(torch, e=e, offsets=offsets)
    if "off_shape" in kw:
        off = torch.zeros(*kw.pop("off_shape"), dtype=torch.int32)
    index = idx if kw.pop("idx", False) else None
    with pytest.raises(ValueError, match=match) as info:
        mod.moe_grouped_matmul(tok, w, off, token_index=index, **kw)
    assert isinstance(info.value, CudnnPyError)


def test_top_k_is_not_checked_outside_scatter_and_cpu_tensors_are_refused_next(torch, mod):
    tok, w, off, idx = _operands(torch)
    for kw in (dict(), dict(top_k=0), dict(top_k=-3), dict(mode="gather", token_index=idx, top_k=7)):
        with pytest.raises(ValueError, match=r"moe_grouped_matmul: all tensors must be CUDA tensors; got .*'cpu'"):
            mod.moe_grouped_matmul(tok, w, off, **kw)


@pytest.fixture
def on_cuda(mod, monkeypatch):
    """The checks that follow the device check, reached with CPU tensors (no GPU here)."""
    monkeypatch.setattr(mod, "require_cuda", lambda *a, **k: None)
    monkeypatch.setattr(mod, "require_same_device", lambda *a, **k: None)


@pytest.mark.parametrize("case, error, match", [
    ("float64 token", KeyError, r"unsupported token dtype torch\.float64"),
    ("weight dtype", TypeError, r"weight dtype torch\.bfloat16 must be token's, torch\.float16"),
    ("offsets int64", TypeError, r"first_token_offset must be torch\.int32, got torch\.int64"),
    ("index int64", TypeError, r"token_index must be torch\.int32, got torch\.int64"),
    ("token rank 2", ValueError, r"token must be rank 3, got shape \(16, 8\)"),
    ("batched groups", cudnn.cudnnGraphNotSupportedError, r"4 groups for 2 experts.*not batched groups"),
])
def test_cudnn_py_checks_after_the_device(torch, mod, on_cuda, case, error, match):
    tok, w, off, idx = _operands(torch, offsets=4 if case == "batched groups" else None)
    kw: dict = {}
    if case == "float64 token":
        tok, w = tok.double(), w.double()
    elif case == "weight dtype":
        w = w.bfloat16()
    elif case == "offsets int64":
        off = off.long()
    elif case == "index int64":
        kw = dict(mode="gather", token_index=idx.long())
    elif case == "token rank 2":
        tok = tok[0]
    with pytest.raises(error, match=match):
        mod.moe_grouped_matmul(tok, w, off, **kw)


def test_offsets_boundaries_become_starts(torch, mod, on_cuda):
    tok, w, off, idx = _operands(torch, e=2, offsets=3)
    assert tuple(mod.validate(tok, w, off, None, None, "none").shape) == (2, 1, 1)
    tok, w, off, idx = _operands(torch, e=1, offsets=2)
    got = mod.validate(tok, w, off, None, None, "none")
    assert tuple(got.shape) == (1, 1, 1) and got.data_ptr() == off.data_ptr()  # a view: no copy, no GPU work
    tok, w, off, idx = _operands(torch, e=2, offsets=2)
    assert mod.validate(tok, w, off, None, None, "none") is off


@pytest.mark.parametrize("mode, rows", [("none", 16), ("gather", 32), ("scatter", 16)])
def test_fake_implementation(torch, mod, mode, rows):
    with torch.device("meta"):
        tok, w, off, _ = _operands(torch, device="meta")
        idx = torch.zeros(1, rows, 1, dtype=torch.int32)
        out = torch.ops.cudnn_py.moe_grouped_matmul(tok, w, off, idx, idx, mode, 2)
    assert tuple(out.shape) == (1, rows, 4) and out.dtype == torch.float16
    assert "cudnn_py::moe_grouped_matmul" in str(torch.ops.cudnn_py.moe_grouped_matmul.default._schema)


def _layout(shape, stride=None):
    if stride is None:
        stride, acc = [], 1
        for d in reversed(shape):
            stride.insert(0, acc)
            acc *= d
    return tuple(shape), tuple(stride)


@pytest.mark.skipif(not HAS_MOE, reason="needs cuDNN >= 9.18")
@pytest.mark.parametrize("mode", ["none", "gather", "scatter"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_each_mode_builds_a_graph_that_validates_deviceless(torch, mod, mode, dtype):
    t, k, n, e, top_k = 256, 64, 32, 4, 2
    rows = t * top_k if mode == "gather" else t
    idx = _layout((1, rows, 1)) if mode != "none" else None
    ks = _layout((1, t, 1)) if mode == "scatter" else None
    weight = _layout((e, k, n), (k * n, 1, k))  # column-major inner dims, the official layout
    b = mod.build_graph(_layout((1, t, k)), weight, _layout((e, 1, 1)), idx, ks, getattr(torch, dtype), mode,
                        top_k)
    b.graph.validate()  # deviceless: cuDNN finalizes the tensors, the operation and the operation graph
    (op,) = b.graph.session.lowered.operations
    prefix = "CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_"
    assert op.attributes[prefix + "MODE"] == f"CUDNN_MOE_GROUPED_MATMUL_MODE_{mode.upper()}"
    assert op.attributes[prefix + "MATH_PREC"] == "CUDNN_DATA_FLOAT"
    assert op.attributes.get(prefix + "TOP_K") == (top_k if mode == "scatter" else None)
    assert b.output.get_dim() == [1, rows, n] and b.output.get_stride() == [rows * n, n, 1]
