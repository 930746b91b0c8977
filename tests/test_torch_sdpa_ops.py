"""cudnn_py.sdpa_torch and the official cudnn.torch names on the CPU: the lazy exports (importing cudnn_py or
cudnn_py.torch imports no torch; without torch they are ImportErrors naming it); and, where torch is installed, the
operators' schemas in the ``cudnn_py`` namespace, their fake implementations (FakeTensorMode, meta tensors,
``torch.library.opcheck``), autograd on meta tensors (and its refusals: sinks, padded dense, no LSE), a strict
``torch.export`` (the full-graph trace ``torch.compile(fullgraph=True)`` makes), the official operators' argument
checks (their exception classes, raised before any graph is built), the graphs the operators ask for validated
deviceless on cuDNN, the packed-to-padded LSE, the aten overrides' registration and removal and their fallback
routing, and ``install(mechanism="aten")``. GPU runs: tests/test_gpu_torch_sdpa_ops.py."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from cudnn_py.errors import CudnnPyError
from tests.support.child import run_json

ROOT = Path(__file__).resolve().parents[1]




# ---- no torch needed -----------------------------------------------------------------------------------------------
def test_importing_imports_no_torch_and_the_names_are_not_starred():
    out = run_json("import sys, json\n"
               "import cudnn_py as c, cudnn_py.torch as ct\n"
               "print(json.dumps(['sdpa_torch' in c.__all__, 'install_sdpa_overrides' in ct.__all__,"
               " sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))]))")
    assert out == [False, True, []]


def test_without_torch_the_names_are_import_errors_naming_torch():
    out = run_json("import sys, json\n"
               "sys.modules['torch'] = None  # as if not installed\n"
               "import cudnn_py as c, cudnn_py.torch as ct\n"
               "msgs = []\n"
               "for get in (lambda: c.sdpa_torch, lambda: ct.install_sdpa_overrides, lambda: ct.calls):\n"
               "    try:\n"
               "        get()\n"
               "    except ImportError as e:\n"
               "        msgs.append(str(e))\n"
               "print(json.dumps(msgs))")
    assert len(out) == 3
    assert out[0].startswith("sdpa_torch requires the 'torch' module")
    assert all("requires torch" in m for m in out[1:]), out


# ---- torch needed --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def so(torch):
    import cudnn_py.torch.sdpa_ops as so

    return so


FWD_SCHEMA = ("cudnn_py::sdpa_fwd(Tensor q, Tensor k, Tensor v, float attn_scale, bool is_causal=False, "
              "bool causal_bottom_right=False, int window_left=-1, int window_right=-1, Tensor? sinks=None, "
              "Tensor? seq_len_q=None, Tensor? seq_len_kv=None, Tensor? cu_seqlens_q=None, "
              "Tensor? cu_seqlens_kv=None, int max_seqlen_q=0, int max_seqlen_kv=0, bool return_lse=True) -> "
              "(Tensor, Tensor)")
BWD_SCHEMA = ("cudnn_py::sdpa_bwd(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, "
              "float attn_scale, bool is_causal=False, bool causal_bottom_right=False, int window_left=-1, "
              "int window_right=-1, Tensor? sinks=None, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_kv=None, "
              "int max_seqlen_q=0, int max_seqlen_kv=0, bool is_deterministic=False) -> (Tensor, Tensor, Tensor)")


def test_the_operators_and_the_function(torch, so):
    import cudnn_py as cudnn

    assert cudnn.sdpa_torch is so.sdpa
    assert str(torch.ops.cudnn_py.sdpa_fwd.default._schema) == FWD_SCHEMA
    assert str(torch.ops.cudnn_py.sdpa_bwd.default._schema) == BWD_SCHEMA
    params = inspect.signature(so.sdpa).parameters
    assert list(params) == ["query", "key", "value", "scale", "is_causal", "causal_bottom_right", "window_left",
                            "window_right", "sinks", "seq_len_q", "seq_len_kv", "cu_seqlens_q", "cu_seqlens_kv",
                            "max_seqlen_q", "max_seqlen_kv", "return_lse"]
    assert [p.kind for p in params.values()][3:] == [inspect.Parameter.KEYWORD_ONLY] * 13
    assert [params[n].default for n in ("scale", "window_left", "max_seqlen_q", "return_lse")] == [None, -1, 0,
                                                                                                    False]


def _meta(torch, *shape, dtype=None, grad=False):
    return torch.empty(shape, device="meta", dtype=dtype or torch.bfloat16, requires_grad=grad)


def test_fake_outputs_have_the_kernels_layouts(torch, so):
    from torch._subclasses import FakeTensorMode

    with FakeTensorMode():
        cuda = lambda *s, dtype=torch.float16: torch.empty(s, device="cuda", dtype=dtype)  # noqa: E731
        q = cuda(2, 4, 96, 64)
        o, lse = torch.ops.cudnn_py.sdpa_fwd(q, q, q, 0.125, return_lse=True)
        assert o.shape == (2, 4, 96, 64) and o.stride() == q.stride() and lse.shape == (2, 4, 96, 1)
        assert lse.dtype == torch.float32
        bshd = cuda(2, 96, 4, 64).transpose(1, 2)  # O takes q's layout
        o, lse = torch.ops.cudnn_py.sdpa_fwd(bshd, bshd, cuda(2, 4, 96, 32), 0.1, return_lse=False)
        assert o.shape == (2, 4, 96, 32) and o.stride() == (96 * 4 * 32, 32, 4 * 32, 1) and lse.shape == (0,)
        t = cuda(300, 8, 64)
        cu = torch.empty(4, device="cuda", dtype=torch.int32)
        o, lse = torch.ops.cudnn_py.sdpa_fwd(t, cuda(200, 2, 64), cuda(200, 2, 64), 0.1, cu_seqlens_q=cu,
                                             cu_seqlens_kv=cu, max_seqlen_q=128, max_seqlen_kv=100)
        assert o.shape == (300, 8, 64) and o.is_contiguous() and lse.shape == (300, 8, 1)
        dq, dk, dv = torch.ops.cudnn_py.sdpa_bwd(o, bshd, bshd, bshd, o, lse, 0.1)
        assert dq.stride() == bshd.stride() and dk.stride() == bshd.stride() and dq.dtype == torch.float16


def test_fake_implementations_pass_opcheck(torch, so):
    q = _meta(torch, 2, 4, 64, 64, grad=True)
    cu = torch.tensor([0, 10, 30], dtype=torch.int32, device="meta")
    t = _meta(torch, 30, 4, 64, grad=True)
    lse = _meta(torch, 2, 4, 64, 1, dtype=torch.float32)
    cases = [(torch.ops.cudnn_py.sdpa_fwd, (q, q, q, 0.125), {"is_causal": True}),
             (torch.ops.cudnn_py.sdpa_fwd, (q, q, q, 0.125), {"window_left": 8, "causal_bottom_right": True,
                                                                "window_right": 0, "return_lse": False}),
             (torch.ops.cudnn_py.sdpa_fwd, (t, t, t, 0.125), {"cu_seqlens_q": cu, "cu_seqlens_kv": cu,
                                                               "max_seqlen_q": 20, "max_seqlen_kv": 20}),
             (torch.ops.cudnn_py.sdpa_bwd, tuple(x.detach() for x in (q, q, q, q, q)) + (lse, 0.125), {})]
    for op, args, kwargs in cases:
        result = torch.library.opcheck(op.default, args, kwargs)
        assert set(result.values()) == {"SUCCESS"}, (op, kwargs, result)


def test_autograd_on_meta_tensors(torch, so):
    q, k, v = (_meta(torch, 2, 4, 64, 32, grad=True) for _ in range(3))
    o, lse = so.sdpa(q, k, v, is_causal=True, return_lse=True)
    assert not lse.requires_grad  # cuDNN's backward makes no LSE gradient: marked non-differentiable
    o.sum().backward()
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    t = _meta(torch, 30, 4, 64, grad=True)
    cu = torch.zeros(3, dtype=torch.int32, device="meta")
    o, _ = so.sdpa(t, t, t, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20, max_seqlen_kv=20, return_lse=True)
    o.sum().backward()
    assert t.grad.shape == t.shape


def test_autograd_refusals_are_the_officials(torch, so):
    q = _meta(torch, 2, 4, 64, 32, grad=True)
    sinks = _meta(torch, 4, dtype=torch.float32)
    lens = torch.zeros(2, dtype=torch.int32, device="meta")
    cases = [(dict(sinks=sinks, return_lse=True), NotImplementedError, "attention sinks"),
             (dict(seq_len_q=lens, seq_len_kv=lens, return_lse=True), NotImplementedError, "padded dense"),
             (dict(return_lse=False), RuntimeError, "requires return_lse=True")]
    for kw, cls, words in cases:
        out = so.sdpa(q, q, q, **kw)
        o = out[0] if isinstance(out, tuple) else out
        with pytest.raises(cls, match=words) as info:
            o.sum().backward()
        assert isinstance(info.value, CudnnPyError)


def test_export_traces_a_block_in_one_graph(torch, so):
    """torch.export (strict) traces through dynamo with fullgraph semantics: the block is one graph holding the
    operator, no graph break."""
    from torch._subclasses import FakeTensorMode

    import cudnn_py as cudnn

    class Block(torch.nn.Module):
        def forward(self, x):
            b, s, _ = x.shape
            q = x.view(b, s, 4, 32).transpose(1, 2)
            o = cudnn.sdpa_torch(q, q, q, is_causal=True, window_left=16)
            return o.transpose(1, 2).reshape(b, s, 128) * 2

    with FakeTensorMode(allow_non_fake_inputs=True):
        exported = torch.export.export(Block(), (torch.empty(2, 64, 128, dtype=torch.bfloat16, device="cuda"),),
                                       strict=True)
    targets = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    assert "cudnn_py.sdpa_fwd.default" in targets, targets


# ---- the argument checks (the CUDA kernels', before any graph: called here on host tensors) -------------------------
def test_forward_checks_are_the_officials(torch, so):
    h = lambda *s, dtype=torch.float16: torch.zeros(s, dtype=dtype)  # noqa: E731
    q4, q3 = h(2, 4, 64, 32), h(30, 4, 32)
    cu = torch.tensor([0, 10, 30], dtype=torch.int32)
    f = so._fwd_impl
    cases = [
        (lambda: f(h(2, 4, 64, 32, dtype=torch.float32), q4, q4, 0.1), ValueError, "sdpa_fwd: unsupported dtype"),
        (lambda: f(q4, q4, h(2, 4, 64, 32, dtype=torch.bfloat16), 0.1), ValueError,
         "sdpa_fwd: all io tensors must share one dtype"),
        (lambda: f(q4, q4, q4, 0.1, causal_bottom_right=True), ValueError,
         "causal_bottom_right only re-anchors an active diagonal band"),
        (lambda: f(q4, q4, q4, 0.1, is_causal=True, window_right=3), ValueError,
         "is_causal masks every future column but window_right=3 admits some"),
        (lambda: f(q3, q3, q3, 0.1, cu_seqlens_q=cu), ValueError, "varlen path needs cu_seqlens_q, cu_seqlens_kv"),
        (lambda: f(q3, q3, q3, 0.1, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20), ValueError,
         "varlen path needs"),
        (lambda: f(q4, q4, q4, 0.1, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20, max_seqlen_kv=20),
         ValueError, "varlen path expects packed (T, H, D) tensors, got q.ndim=4"),
        (lambda: f(q3, q3, q3, 0.1, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20, max_seqlen_kv=20,
                   seq_len_q=cu), ValueError, "varlen path derives seq lens from cu_seqlens"),
        (lambda: f(q3, h(30, 4, 16), q3, 0.1, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20, max_seqlen_kv=20),
         ValueError, "k shape (30, 4, 16) must be (T_kv=30, H_k, D_qk=32)"),
        (lambda: f(q3, h(30, 3, 32), h(30, 3, 32), 0.1, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20,
                   max_seqlen_kv=20), ValueError, "GQA head counts must divide H_q=4; got H_k=3, H_v=3"),
        (lambda: f(q3, q3, q3, 0.1, cu_seqlens_q=cu, cu_seqlens_kv=cu[:2], max_seqlen_q=20, max_seqlen_kv=20),
         ValueError, "cu_seqlens_q (3,) and cu_seqlens_kv (2,)"),
        (lambda: f(q3, q3, q3, 0.1), ValueError, "dense path expects BHSD tensors, got q.ndim=3"),
        (lambda: f(q4, h(2, 4, 64, 16), q4, 0.1), ValueError, "k shape (2, 4, 64, 16) must be (B=2, H_k, S_kv=64, "
                                                             "D_qk=32)"),
        (lambda: f(q4, q4, h(3, 4, 64, 32), 0.1), ValueError, "k shape (2, 4, 64, 32) must be (B=2"),
        (lambda: f(q4, h(2, 3, 64, 32), h(2, 3, 64, 32), 0.1), ValueError, "GQA head counts must divide H_q=4"),
        (lambda: f(q4, q4, q4, 0.1, seq_len_q=cu[:2]), ValueError, "padded path needs both seq_len_q and seq_len_kv"),
    ]
    for call, cls, message in cases:
        with pytest.raises(cls) as info:
            call()
        assert isinstance(info.value, CudnnPyError) and str(info.value).startswith(message), (message, info.value)


def test_backward_checks_are_the_officials(torch, so):
    h = lambda *s, dtype=torch.float16: torch.zeros(s, dtype=dtype)  # noqa: E731
    q4, q3, lse = h(2, 4, 64, 32), h(30, 4, 32), h(2, 4, 64, 1, dtype=torch.float32)
    cu = torch.tensor([0, 10, 30], dtype=torch.int32)
    b = so._bwd_impl
    cases = [
        (lambda: b(q4, q4, q4, q4, q4, lse, 0.1, sinks=h(4, dtype=torch.float32)), NotImplementedError,
         "sdpa_bwd does not support attention sinks"),
        (lambda: b(q4, q4, q4, q4, q4, lse, 0.1, is_causal=True, window_right=1), ValueError,
         "is_causal masks every future column"),
        (lambda: b(q3, q3, q3, q3, q3, lse, 0.1, cu_seqlens_q=cu), ValueError, "varlen path needs"),
        (lambda: b(q4, q4, q4, q4, q4, lse, 0.1, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20,
                   max_seqlen_kv=20), ValueError, "varlen path expects packed (T, H, D) tensors"),
        (lambda: b(q3, q3, q3, q3, q3, lse, 0.1), ValueError, "dense path expects BHSD tensors"),
        (lambda: b(q4, q4, q4, q4, h(2, 4, 64, 32, dtype=torch.bfloat16), lse, 0.1), ValueError,
         "sdpa_bwd: all io tensors must share one dtype"),
        (lambda: b(q4, q4, q4, q4, h(2, 4, 64, 16), lse, 0.1), ValueError, "o (2, 4, 64, 16) / grad_out"),
        (lambda: b(q4, q4, q4, q4, q4, lse.half(), 0.1), ValueError, "lse must be float32, got torch.float16"),
        (lambda: b(q3, q3, q3, h(30, 4, 16), q3, lse, 0.1, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=20,
                   max_seqlen_kv=20), ValueError, "o (30, 4, 32) / grad_out (30, 4, 32) must be (T_q=30, H_q=4, D_v=16)"),
    ]
    for call, cls, message in cases:
        with pytest.raises(cls) as info:
            call()
        assert isinstance(info.value, CudnnPyError) and str(info.value).startswith(message), (message, info.value)


def test_packed_lse_to_padded(torch, so):
    cu = torch.tensor([0, 3, 3, 8], dtype=torch.int64)
    lse = torch.randn(9, 2)  # one token past the last sequence: dropped
    padded = so.thd_lse_to_padded(lse, cu, 6)
    want = torch.zeros(3, 2, 6, 1)
    for n in range(3):
        for j, t in enumerate(range(int(cu[n]), int(cu[n + 1]))):
            want[n, :, j, 0] = lse[t]
    assert torch.equal(padded, want)


# ---- the graphs the operators ask for, deviceless ------------------------------------------------------------------
def _fwd_config(torch, so, thd=False, **kw):
    import cudnn_py.torch.sdpa_ops as ops

    q = _meta(torch, 2, 4, 96, 64) if not thd else _meta(torch, 150, 4, 64)
    k = _meta(torch, 2, 2, 128, 64) if not thd else _meta(torch, 200, 2, 64)
    if not thd:
        o = ops.like_layout((2, 4, 96, 64), q.stride())
        return ops._config(q, k, k, o, 0.125, kw.pop("causal", False), kw.pop("bottom_right", False),
                           kw.pop("left", -1), kw.pop("right", -1), **kw)
    dims = ((2, 4, 96, 64), (2, 2, 128, 64), (2, 2, 128, 64))
    layouts = (ops._thd_layout(q, 96), ops._thd_layout(k, 128), ops._thd_layout(k, 128))
    return ops._config(q, k, k, ops._packed(4, 96, 64), 0.125, kw.pop("causal", False), False, kw.pop("left", -1),
                       -1, dims=dims, ragged=((192, 256), layouts), **kw)


GRAPH_CASES = {
    "causal-lse": dict(causal=True, lse=True),
    "band-bottom-right": dict(causal=True, bottom_right=True, left=32, lse=True),
    "sinks": dict(sinks=True, lse=True),
    "padded": dict(padded=True, causal=True),
    "thd": dict(thd=True, causal=True, lse=True),
    "thd-window": dict(thd=True, left=24, lse=True),
}


@pytest.mark.parametrize("case", list(GRAPH_CASES))
def test_the_operators_graphs_validate_deviceless(torch, so, case):
    import cudnn_py as cudnn
    import cudnn_py.torch as ct

    cfg = _fwd_config(torch, so, **GRAPH_CASES[case])
    g, ts = ct.forward_graph(cudnn, cfg)
    g.validate()
    assert ("stats" in ts) == cfg.lse and ("sinks" in ts) == cfg.sinks
    assert ("ragged_o" in ts) == (cfg.ragged is not None) and ("seq_len_q" in ts) == (cfg.padded or bool(cfg.ragged))
    if not cfg.sinks:
        gb, tb = ct.backward_graph(cudnn, cfg)
        gb.validate()
        assert ("ragged_dQ" in tb) == (cfg.ragged is not None)


def test_a_sink_backward_graph_is_refused(torch, so):
    import cudnn_py as cudnn
    import cudnn_py.torch as ct

    with pytest.raises(NotImplementedError):
        ct.backward_graph(cudnn, _fwd_config(torch, so, sinks=True))


# ---- the aten overrides --------------------------------------------------------------------------------------------
def _kernel_file(torch, op: str) -> str:
    for line in torch._C._dispatch_dump(op).splitlines():
        if line.startswith("CUDA:"):
            return line
    return ""


def test_install_sdpa_overrides_registers_and_removes(torch):
    import cudnn_py.torch as ct
    import cudnn_py.torch.overrides as ov

    if not ov.worker_ops_present():
        with pytest.raises(RuntimeError, match="no aten::_cudnn_attention_forward"):
            ct.install_sdpa_overrides()
        return
    assert set(ct.calls) == {"fwd", "bwd", "fwd_cpp", "bwd_cpp", "fwd_fa2", "bwd_fa2"}
    handle = ct.install_sdpa_overrides()
    try:
        assert isinstance(handle, ct.SdpaOverrides) and handle.active
        for op in ("aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_cudnn_attention_backward"):
            assert "cudnn_py/torch/overrides.py" in _kernel_file(torch, op), op
        if ov._varlen_ops_present():
            assert "cudnn_py/torch/overrides.py" in _kernel_file(torch, "torch_attn::_varlen_attn")
    finally:
        handle.remove()
    handle.remove()  # (again: a no-op)
    assert not handle.active
    assert "cudnn_py/torch/overrides.py" not in _kernel_file(torch, "aten::_scaled_dot_product_cudnn_attention")
    assert ct.served_plan_names() == [] or all(isinstance(n, str) for n in ct.served_plan_names())


def test_install_with_the_aten_mechanism(torch):
    import cudnn_py.torch as ct
    import cudnn_py.torch.overrides as ov

    if not ov.worker_ops_present():
        pytest.skip("this torch has no cuDNN attention worker ops")
    with pytest.raises(ValueError, match="cache_size applies to the provider"):
        ct.install(mechanism="aten", cache_size=3)
    assert ct.install(mechanism="aten") == "aten" and ct.installed() == "aten" and ct.provider() is None
    try:
        assert ct.install() == "aten"  # installing twice: the mechanism in use
        op = "aten::_scaled_dot_product_cudnn_attention"
        assert "cudnn_py/torch/overrides.py" in _kernel_file(torch, op)
        with ct.paused():
            assert "cudnn_py/torch/overrides.py" not in _kernel_file(torch, op)
        assert "cudnn_py/torch/overrides.py" in _kernel_file(torch, op)
    finally:
        ct.uninstall()
    assert ct.installed() is None
    assert "cudnn_py/torch/overrides.py" not in _kernel_file(torch, "aten::_scaled_dot_product_cudnn_attention")


def test_unserved_aten_calls_go_to_torchs_kernels(torch, monkeypatch):
    """An attention bias, dropout or a debug mask: the aten worker op (torch's own cuDNN kernel), counted; a
    padded dense backward too; the varlen windows and their flash fallbacks as the official module maps them."""
    import cudnn_py.torch.overrides as ov

    seen = []
    monkeypatch.setattr(torch.ops.aten, "_cudnn_attention_forward", lambda *a, **k: seen.append("fwd") or "native")
    monkeypatch.setattr(torch.ops.aten, "_cudnn_attention_backward", lambda *a, **k: seen.append("bwd") or "native")
    q = torch.zeros(1, 2, 8, 16, dtype=torch.float16)
    before = dict(ov.calls)
    assert ov._fwd(q, q, q, q[:, :, :, :8], True) == "native"
    assert ov._fwd(q, q, q, None, True, dropout_p=0.1) == "native"
    assert ov._fwd(q, q, q, None, True, return_debug_mask=True) == "native"
    assert ov._bwd(q, q, q, q, q, q, q, q, None, q, q, 8, 8, 0.0, False) == "native"
    assert seen == ["fwd", "fwd", "fwd", "bwd"]
    assert ov.calls["fwd_cpp"] == before["fwd_cpp"] + 3 and ov.calls["bwd_cpp"] == before["bwd_cpp"] + 1
    assert [ov._left(w) for w in (-1, 0, 5)] == [-1, 1, 6]
    assert [ov._right(False, w) for w in (-1, 0, 4)] == [(False, -1), (True, -1), (False, 4)]
    assert not ov._served(q, seqused_k=q) and not ov._served(q, num_splits=2) and not ov._served(None)
    assert ov._served(q, num_splits=1)
    with pytest.raises(ValueError, match="window_size must have length 2, got 3"):
        ov._window((1, 2, 3))
