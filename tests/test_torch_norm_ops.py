"""cudnn.ops.norm (rms_norm, layer_norm) and cudnn.experimental.ops on the CPU: the lazy exports (importing the
namespaces imports no torch; a missing torch or an operator not built yet is an ImportError saying so, never an
AttributeError); and, where torch is installed, the operators' schemas in the ``cudnn_py`` namespace, their fake
implementations (FakeTensorMode, meta tensors, ``torch.library.opcheck``), autograd on meta tensors, tracing
through dynamo (``torch.export``, strict: the full-graph trace ``torch.compile(fullgraph=True)`` makes), the
operand checks with the official operators' exception classes and messages (they run before any GPU work), the
graphs each operator builds validated deviceless on cuDNN, and the bounded graph cache. GPU runs:
tests/test_gpu_torch_norm_ops.py."""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from cudnn_py.errors import CudnnPyError
from tests.support.child import run_json

ROOT = Path(__file__).resolve().parents[1]




# ---- the lazy namespaces (no torch needed) -------------------------------------------------------------------------
def test_importing_the_namespaces_imports_no_torch():
    out = run_json("import sys, json\n"
               "import cudnn_py as c\n"
               "import cudnn_py.ops, cudnn_py.ops.norm, cudnn_py.experimental, cudnn_py.experimental.ops\n"
               "print(json.dumps([c.experimental.ops is sys.modules['cudnn_py.experimental.ops'], c.ops.norm is "
               "sys.modules['cudnn_py.ops.norm'], sorted(c.ops.norm.__all__), sorted(c.experimental.ops.__all__), "
               "'rms_norm' in dir(c.ops.norm), 'layer_norm' in dir(c.experimental.ops), "
               "sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))]))")
    assert out == [True, True, ["layer_norm", "rms_norm"], ["layer_norm", "moe_grouped_matmul", "rms_norm",
                                                            "swiglu_mlp"], True, True, []]


def test_operators_not_built_yet_are_import_errors_saying_so():
    import cudnn_py.experimental.ops as eo

    for name in ("swiglu_mlp",):  # moe_grouped_matmul is built: tests/test_gemm_moe_op.py
        with pytest.raises(ImportError, match=rf"{name} is not implemented in cudnn_py yet .*cudnn_py\.gemm\.ops"):
            getattr(eo, name)
        with pytest.raises(ImportError):
            exec(f"from cudnn_py.experimental.ops import {name}", {})
    with pytest.raises(AttributeError, match="no_such_op"):
        eo.no_such_op  # noqa: B018
    import cudnn_py.ops.norm as norm

    with pytest.raises(AttributeError, match="no_such_op"):
        norm.no_such_op  # noqa: B018


def test_without_torch_the_operators_are_import_errors_naming_torch():
    out = run_json("import sys, json\n"
               "sys.modules['torch'] = None  # as if not installed: `import torch` raises ModuleNotFoundError\n"
               "import cudnn_py as c\n"
               "msgs = []\n"
               "for get in (lambda: c.ops.norm.rms_norm, lambda: c.experimental.ops.layer_norm):\n"
               "    try:\n"
               "        get()\n"
               "    except ImportError as e:\n"
               "        msgs.append(str(e))\n"
               "print(json.dumps(msgs))")
    assert len(out) == 2
    assert out[0].startswith("rms_norm requires the 'torch' module, which is not installed.")
    assert out[1].startswith("layer_norm requires the 'torch' module, which is not installed.")


# ---- the operators (torch needed) ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def ops(torch):
    import cudnn_py as cudnn

    assert cudnn.ops.norm.rms_norm and cudnn.ops.norm.layer_norm  # (the operators register on first read)
    return cudnn.ops.norm


SCHEMAS = {
    "rmsnorm": "cudnn_py::rmsnorm(Tensor x, Tensor scale, float eps, Tensor? bias=None) -> (Tensor, Tensor)",
    "rmsnorm_bwd": "cudnn_py::rmsnorm_bwd(Tensor dy, Tensor x, Tensor scale, Tensor inv_var, bool has_dbias=False) "
                   "-> (Tensor, Tensor, Tensor)",
    "rmsnorm_inference": "cudnn_py::rmsnorm_inference(Tensor x, Tensor scale, float eps, Tensor? bias=None) -> Tensor",
    "layernorm": "cudnn_py::layernorm(Tensor x, Tensor scale, Tensor bias, float eps) -> (Tensor, Tensor, Tensor)",
    "layernorm_bwd": "cudnn_py::layernorm_bwd(Tensor dy, Tensor x, Tensor scale, Tensor mean, Tensor inv_var) -> "
                     "(Tensor, Tensor, Tensor)",
    "layernorm_inference": "cudnn_py::layernorm_inference(Tensor x, Tensor scale, Tensor bias, float eps) -> Tensor",
}


def test_operators_are_registered_with_their_schemas(torch, ops):
    for name, schema in SCHEMAS.items():
        assert str(getattr(torch.ops.cudnn_py, name).default._schema) == schema
    import cudnn_py.experimental.ops as eo

    assert eo.rms_norm is ops.rms_norm and eo.layer_norm is ops.layer_norm
    assert sys.modules["cudnn_py.experimental.ops.rms_norm"] is sys.modules["cudnn_py.ops.norm.rmsnorm"]
    import inspect

    assert str(inspect.signature(ops.rms_norm)) == \
        "(input: 'torch.Tensor', weight: 'torch.Tensor', bias: 'torch.Tensor | None' = None, eps: 'float' = 1e-05) " \
        "-> 'torch.Tensor'"
    params = inspect.signature(ops.layer_norm).parameters
    assert list(params) == ["input", "normalized_shape", "weight", "bias", "eps"]
    assert [params[n].default for n in ("weight", "bias", "eps")] == [None, None, 1e-5]


def _meta(torch, *shape, dtype=None, grad=False):
    return torch.empty(shape, device="meta", dtype=dtype or torch.bfloat16, requires_grad=grad)


def test_fake_implementations_pass_opcheck(torch, ops):
    rows, h = 6, 64
    x, s, b = _meta(torch, rows, h, 1, 1, grad=True), _meta(torch, 1, h, 1, 1, grad=True), \
        _meta(torch, 1, h, 1, 1, grad=True)
    sf, bf = _meta(torch, 1, h, 1, 1, dtype=torch.float32, grad=True), _meta(torch, 1, h, 1, 1, dtype=torch.float32,
                                                                              grad=True)
    stats = _meta(torch, rows, 1, 1, 1, dtype=torch.float32)
    d = torch.ops.cudnn_py
    cases = [(d.rmsnorm, (x, s, 1e-5, b)), (d.rmsnorm, (x, s, 1e-6)), (d.rmsnorm_inference, (x.detach(), s.detach(),
                                                                                            1e-5)),
             (d.rmsnorm_bwd, (x.detach(), x.detach(), s.detach(), stats, True)),
             (d.layernorm, (x, sf, bf, 1e-5)), (d.layernorm_inference, (x.detach(), sf.detach(), bf.detach(), 1e-5)),
             (d.layernorm_bwd, (x.detach(), x.detach(), sf.detach(), stats, stats))]
    for op, args in cases:
        result = torch.library.opcheck(op.default, args)
        assert set(result.values()) == {"SUCCESS"}, (op, result)


def test_fake_shapes_and_dtypes(torch, ops):
    from torch._subclasses import FakeTensorMode

    with FakeTensorMode():
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            x = torch.empty(2, 3, 5, 64, device="cuda", dtype=dtype)
            w, b = torch.empty(64, device="cuda", dtype=dtype), torch.empty(64, device="cuda", dtype=dtype)
            for y in (ops.rms_norm(x, w), ops.rms_norm(x, w, b, eps=1e-6), ops.layer_norm(x, (64,)),
                      ops.layer_norm(x, [64], w, b), ops.layer_norm(x, (64,), w.float() if dtype != torch.float32
                                                                    else w, None)):
                assert (tuple(y.shape), y.dtype, y.device.type) == ((2, 3, 5, 64), dtype, "cuda")
        x4 = torch.empty(30, 64, 1, 1, device="cuda", dtype=torch.bfloat16)
        s = torch.empty(1, 64, 1, 1, device="cuda", dtype=torch.bfloat16)
        y, inv = torch.ops.cudnn_py.rmsnorm(x4, s, 1e-5)
        assert (tuple(inv.shape), inv.dtype) == ((30, 1, 1, 1), torch.float32)
        dx, ds, db = torch.ops.cudnn_py.rmsnorm_bwd(x4, x4, s, inv, False)
        assert (tuple(dx.shape), tuple(ds.shape), ds.dtype, tuple(db.shape)) == ((30, 64, 1, 1), (1, 64, 1, 1),
                                                                                  torch.bfloat16, (0,))
        sf = s.float()
        y, mean, inv = torch.ops.cudnn_py.layernorm(x4, sf, sf, 1e-5)
        assert (tuple(mean.shape), mean.dtype, tuple(inv.shape)) == ((30, 1, 1, 1), torch.float32, (30, 1, 1, 1))
        dx, ds, db = torch.ops.cudnn_py.layernorm_bwd(x4, x4, sf, mean, inv)
        assert (dx.dtype, ds.dtype, db.dtype, tuple(db.shape)) == (torch.bfloat16, torch.float32, torch.float32,
                                                                    (1, 64, 1, 1))


def test_autograd_through_the_operators_on_meta_tensors(torch, ops):
    x, s, b = _meta(torch, 6, 64, 1, 1, grad=True), _meta(torch, 1, 64, 1, 1, grad=True), \
        _meta(torch, 1, 64, 1, 1, grad=True)
    y, inv = torch.ops.cudnn_py.rmsnorm(x, s, 1e-5, b)
    assert not inv.requires_grad  # the statistics are not differentiable
    y.sum().backward()
    assert [(tuple(t.grad.shape), t.grad.dtype) for t in (x, s, b)] == [
        ((6, 64, 1, 1), torch.bfloat16), ((1, 64, 1, 1), torch.bfloat16), ((1, 64, 1, 1), torch.bfloat16)]
    x.grad = s.grad = None
    y, _ = torch.ops.cudnn_py.rmsnorm(x, s, 1e-5)
    y.sum().backward()
    assert x.grad is not None and s.grad is not None
    sf, bf = _meta(torch, 1, 64, 1, 1, dtype=torch.float32, grad=True), _meta(torch, 1, 64, 1, 1,
                                                                               dtype=torch.float32, grad=True)
    x.grad = None
    y, mean, inv = torch.ops.cudnn_py.layernorm(x, sf, bf, 1e-5)
    assert not mean.requires_grad and not inv.requires_grad
    y.sum().backward()
    assert (x.grad.dtype, sf.grad.dtype, bf.grad.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    x.grad = None
    _, mean, _ = torch.ops.cudnn_py.layernorm(x, sf, bf, 1e-5)  # y unused: no gradient flows, none is computed
    assert not mean.requires_grad


def _traced_ops(torch, fn, *args):
    from torch._subclasses import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        fake = [torch.empty(a.shape, dtype=a.dtype, device="cuda", requires_grad=a.requires_grad) for a in args]
        gm = make_fx(fn)(*fake)
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "cudnn_py" in str(n.target)]


def test_training_and_inference_operators_are_chosen_by_grad_mode(torch, ops):
    x, w = torch.empty(4, 64, dtype=torch.bfloat16), torch.empty(64, dtype=torch.bfloat16)
    block = lambda x, w: ops.layer_norm(ops.rms_norm(x, w), (64,), w)  # noqa: E731
    assert _traced_ops(torch, block, x, w) == ["cudnn_py.rmsnorm_inference.default",
                                               "cudnn_py.layernorm_inference.default"]
    with torch.enable_grad():
        assert _traced_ops(torch, block, x, w.requires_grad_()) == ["cudnn_py.rmsnorm.default",
                                                                     "cudnn_py.layernorm.default"]


def test_dynamo_traces_a_block_in_one_graph(torch, ops):
    """torch.export (strict) traces through dynamo with fullgraph semantics: the block is one graph holding the
    training operators (the weight is a parameter), no graph break."""
    from torch._subclasses import FakeTensorMode

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.empty(64, dtype=torch.bfloat16, device="cuda"))
            self.b = torch.nn.Parameter(torch.empty(64, dtype=torch.bfloat16, device="cuda"))

        def forward(self, x):
            return ops.layer_norm(ops.rms_norm(x, self.w, self.b) * 2, (64,), self.w, self.b, eps=1e-6)

    with FakeTensorMode(allow_non_fake_inputs=True):
        exported = torch.export.export(Block(), (torch.empty(2, 3, 64, dtype=torch.bfloat16, device="cuda"),),
                                       strict=True)
    targets = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    assert "cudnn_py.rmsnorm.default" in targets and "cudnn_py.layernorm.default" in targets


# ---- the operand checks: the official operators' classes and messages ----------------------------------------------
def test_public_functions_check_their_operands_like_the_official(torch, ops):
    cpu = torch.empty(4, 64, dtype=torch.bfloat16)
    w = torch.empty(64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^input must be a CUDA tensor, got cpu$"):
        ops.rms_norm(cpu, w)
    with pytest.raises(ValueError, match=r"^input must be a CUDA tensor, got cpu$"):
        ops.layer_norm(cpu, (64,))
    with pytest.raises(ValueError, match=r"^input must have at least one dimension$"):
        ops.rms_norm(torch.tensor(1.0), w)
    with pytest.raises(NotImplementedError, match=r"^only a one-dimensional normalized_shape is supported, got "
                                                  r"\(8, 8\)$"):
        ops.layer_norm(cpu, (8, 8))
    from torch._subclasses import FakeTensorMode

    with FakeTensorMode():
        cuda = lambda *s, dtype=torch.bfloat16: torch.empty(s, device="cuda", dtype=dtype)  # noqa: E731
        x, w = cuda(4, 64), cuda(64)
        cases = [
            (lambda: ops.rms_norm(cuda(4, 64, dtype=torch.float64), w), TypeError,
             "unsupported input dtype: torch.float64"),
            (lambda: ops.layer_norm(cuda(4, 64, dtype=torch.int32), (64,)), TypeError,
             "unsupported input dtype: torch.int32"),
            (lambda: ops.rms_norm(cuda(4, 0), cuda(0)), ValueError, "input's final dimension must be positive, got 0"),
            (lambda: ops.rms_norm(x, cuda(32)), ValueError, "weight must have shape (64,), got (32,)"),
            (lambda: ops.rms_norm(x, cuda(64, dtype=torch.float32)), ValueError,
             "weight must have the same device and dtype as input"),
            (lambda: ops.rms_norm(x, w, cuda(32)), ValueError,
             "bias must have the same shape, device, and dtype as weight"),
            (lambda: ops.rms_norm(cuda(0, 64), w), ValueError, "input must contain at least one normalization row"),
            (lambda: ops.layer_norm(x, (0,)), ValueError,
             "normalized_shape must contain a positive dimension, got (0,)"),
            (lambda: ops.layer_norm(x, (32,)), ValueError, "input's final dimension must be 32, got 64"),
            (lambda: ops.layer_norm(x, (64,), cuda(32)), ValueError,
             "weight must match normalized_shape and be on the input device"),
            (lambda: ops.layer_norm(x, (64,), None, cuda(64, dtype=torch.float16)), TypeError,
             "bias dtype must be one of"),
            (lambda: ops.layer_norm(x, (64,), cuda(64), cuda(64, dtype=torch.float32)), TypeError,
             "weight and bias must have the same dtype, got torch.bfloat16 and torch.float32"),
            (lambda: ops.layer_norm(cuda(4, 64, dtype=torch.float32), (64,), cuda(64, dtype=torch.bfloat16)),
             TypeError, "weight dtype must be one of {torch.float32}, got torch.bfloat16"),
            (lambda: ops.layer_norm(cuda(0, 64), (64,)), ValueError,
             "input must contain at least one normalization row"),
        ]
        for call, cls, message in cases:
            with pytest.raises(cls) as info:
                call()
            assert isinstance(info.value, CudnnPyError) and str(info.value).startswith(message), (message, info.value)


def test_operators_check_their_operands_like_the_official(torch, ops):
    """The operators' own checks (called with tensors the public functions would not make): the official's
    messages, naming our operators (cudnn_py::rmsnorm where the official says cudnn::rmsnorm)."""
    from torch._subclasses import FakeTensorMode

    from cudnn_py.ops.norm import layernorm, rmsnorm

    with FakeTensorMode():
        cuda = lambda *s, dtype=torch.bfloat16: torch.empty(s, device="cuda", dtype=dtype)  # noqa: E731
        x, s, st = cuda(8, 64, 1, 1), cuda(1, 64, 1, 1), cuda(8, 1, 1, 1, dtype=torch.float32)
        f = s.float()
        cases = [
            (lambda: rmsnorm.validate_forward(cuda(8, 64), s, None), ValueError,
             "cudnn_py::rmsnorm: expected x with shape (rows, hidden_size, 1, 1), got (8, 64)"),
            (lambda: rmsnorm.validate_forward(cuda(8, 64, 1, 1, dtype=torch.float64), s, None), TypeError,
             "cudnn_py::rmsnorm: unsupported input dtype torch.float64"),
            (lambda: rmsnorm.validate_forward(x.transpose(0, 1).reshape(8, 64, 1, 1).as_strided(
                (8, 64, 1, 1), (1, 8, 1, 1)), s, None), ValueError, "x: expected a contiguous tensor"),
            (lambda: rmsnorm.validate_forward(x, cuda(1, 32, 1, 1), None), ValueError,
             "scale: expected shape (1, 64, 1, 1), got (1, 32, 1, 1)"),
            (lambda: rmsnorm.validate_forward(x, f, None), TypeError,
             "scale: expected dtype torch.bfloat16, got torch.float32"),
            (lambda: rmsnorm.validate_forward(x, s, f), TypeError,
             "bias: expected dtype torch.bfloat16, got torch.float32"),
            (lambda: rmsnorm.validate_backward(cuda(8, 32, 1, 1), x, s, st), ValueError,
             "dy: expected shape (8, 64, 1, 1), got (8, 32, 1, 1)"),
            (lambda: rmsnorm.validate_backward(x, x, s, cuda(8, 1, 1, 1)), TypeError,
             "inv_var: expected dtype torch.float32, got torch.bfloat16"),
            (lambda: rmsnorm.validate_backward(x, x, s, cuda(4, 1, 1, 1, dtype=torch.float32)), ValueError,
             "inv_var: expected contiguous shape (8, 1, 1, 1), got (4, 1, 1, 1)"),
            # layernorm's scale and bias: FLOAT (the official operators') or x's own type, the two alike
            (lambda: layernorm.validate_forward(x, s, f), TypeError,
             "bias: expected dtype torch.bfloat16, got torch.float32"),
            (lambda: layernorm.validate_forward(x, s.half(), s.half()), TypeError,
             "scale: expected dtype torch.float32, got torch.float16"),
            (lambda: layernorm.validate_backward(x, x, f, st, cuda(8, 1, 1, 1)), TypeError,
             "inv_var: expected dtype torch.float32, got torch.bfloat16"),
            (lambda: layernorm.validate_backward(x, x, f, cuda(8, 2, 1, 1, dtype=torch.float32), st), ValueError,
             "mean: expected contiguous shape (8, 1, 1, 1), got (8, 2, 1, 1)"),
        ]
        for call, cls, message in cases:
            with pytest.raises(cls) as info:
                call()
            assert isinstance(info.value, CudnnPyError) and str(info.value) == message, (message, info.value)
    cpu = torch.empty(8, 64, 1, 1, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^cudnn_py::rmsnorm: all tensors must be CUDA tensors; got \{'x': 'cpu', "
                                         r"'scale': 'cpu'\}$"):
        rmsnorm.validate_forward(cpu, cpu[:1], None)
    with pytest.raises(ValueError, match=r"^cudnn_py::layernorm: all tensors must be CUDA tensors"):
        layernorm.validate_forward(cpu, cpu[:1].float(), cpu[:1].float())


# ---- the graphs, deviceless ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_every_graph_validates_deviceless(torch, ops, dtype):
    from cudnn_py.ops.norm import layernorm, rmsnorm

    dt = getattr(torch, dtype)
    built = [rmsnorm.forward_graph(32, 384, dt, 1e-5, bias, training) for bias in (False, True)
             for training in (False, True)]
    built += [rmsnorm.backward_graph(32, 384, dt, dbias) for dbias in (False, True)]
    built += [layernorm.forward_graph(32, 384, dt, 1e-5, training) for training in (False, True)]
    built += [layernorm.backward_graph(32, 384, dt)]
    for b in built:
        b.graph.validate()
    f = rmsnorm.forward_graph(32, 384, dt, 1e-3, True, True)
    assert f.inv_var.get_dim() == [32, 1, 1, 1] and f.y.get_stride() == [384, 1, 1, 1]
    eps = f.graph.nodes[0].inputs["EPSILON"]
    assert eps.is_pass_by_value and eps.pass_by_value == 1e-3  # carried by the graph (eps is in the cache key)
    assert rmsnorm.forward_graph(32, 384, dt, 1e-5, False, False).inv_var is None
    assert rmsnorm.backward_graph(32, 384, dt, False).dbias is None


def test_graph_cache_is_a_bounded_lru_building_once(torch):
    from cudnn_py.ops.norm._common import GraphCache

    c = GraphCache(maxsize=2)
    built = []
    get = lambda k: c.get(k, lambda: built.append(k) or f"graph {k}")  # noqa: E731
    assert [get("a"), get("b"), get("a"), get("c")] == ["graph a", "graph b", "graph a", "graph c"]
    assert c.keys() == ["a", "c"] and built == ["a", "b", "c"] and (c.hits, c.misses, c.evictions) == (1, 3, 1)
    slow = threading.Event()

    def build():
        slow.wait(0.2)
        built.append("d")
        return "graph d"

    threads = [threading.Thread(target=c.get, args=("d", build)) for _ in range(4)]
    for t in threads:
        t.start()
    slow.set()
    for t in threads:
        t.join()
    assert built.count("d") == 1 and len(c) == 2


def test_a_refused_inference_graph_gives_way_to_the_training_graph(torch, monkeypatch, caplog):
    import logging

    from cudnn_py.errors import cudnnGraphNotSupportedError
    from cudnn_py.ops.norm import _common, rmsnorm

    def planned(built, device):
        if built.inv_var is None:
            raise cudnnGraphNotSupportedError("no engine for the INFERENCE phase")
        return built

    monkeypatch.setattr(_common, "planned", planned)
    make = lambda training: rmsnorm.forward_graph(8, 64, torch.bfloat16, 1e-5, False, training)  # noqa: E731
    with caplog.at_level(logging.INFO, logger="cudnn_py.ops"):
        f = _common.planned_forward(make, False, "cuda")
    assert f.inv_var is not None  # the training graph: the caller allocates its statistics and drops them
    assert "the inference graph was refused (cudnnGraphNotSupportedError: no engine" in caplog.text
    assert _common.planned_forward(make, True, "cuda").inv_var is not None


def test_the_eager_route_is_taken_only_for_plain_eager_calls():
    """The public functions skip torch.library's dispatch (their operators' autograd Function over the kernels)
    only where nothing would see the operators: plain tensors, no dispatch or __torch_function__ mode, no functorch
    transform, not compiling; anything else goes through the registered operators."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    from cudnn_py.ops.norm._common import eager_call

    x, w = torch.ones(2, 3), torch.ones(3)
    assert eager_call((x, w, None))

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Mode():
        assert not eager_call((x, w, None))

    class FunctionMode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with FunctionMode():
        assert not eager_call((x, w, None))

    class Sub(torch.Tensor):
        pass

    assert not eager_call((x.as_subclass(Sub), w, None))
    seen = []
    torch.func.vmap(lambda row: seen.append(eager_call((row, w))) or row)(x)
    assert seen == [False]
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
        assert not eager_call((fake, w, None))


def test_the_eager_function_is_the_registered_autograd_over_the_kernels():
    """register_autograd's Function (what eager calls run) saves, marks and differentiates as the registered
    operator's autograd does: CPU stand-in kernels y = x * scale + bias, statistic mean(x); the gradients of both
    routes agree, the statistic gets none, and an absent bias gets none."""
    torch = pytest.importorskip("torch")
    from cudnn_py.ops.norm._common import register_autograd

    lib = torch.library.Library("cudnn_py_eager_test", "DEF")  # (destroyed at the end: the test leaves nothing)
    try:
        lib.define("fwd(Tensor x, Tensor scale, Tensor? bias, float eps) -> (Tensor, Tensor)")
        lib.define("bwd(Tensor dy, Tensor x, Tensor scale, Tensor mean, bool has_bias) -> (Tensor, Tensor, Tensor)")

        def fwd(x, scale, bias, eps):
            y = x * scale + (bias if bias is not None else 0) + eps
            return y, x.mean(-1, keepdim=True)

        def bwd(dy, x, scale, mean, has_bias):
            return dy * scale, (dy * x).sum(0, keepdim=True), dy.sum(0, keepdim=True)

        lib.impl("fwd", fwd, "CPU")
        lib.impl("bwd", bwd, "CPU")
        calls = []
        eager = register_autograd("cudnn_py_eager_test::fwd", torch.ops.cudnn_py_eager_test.bwd, bias_at=2,
                                  pass_has_bias=True, eager_forward=lambda *a: calls.append("f") or fwd(*a),
                                  eager_backward=lambda *a: calls.append("b") or bwd(*a))
        for with_bias in (True, False):
            x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
            s = torch.randn(1, 3, dtype=torch.float64, requires_grad=True)
            b = torch.randn(1, 3, dtype=torch.float64, requires_grad=True) if with_bias else None
            dy = torch.randn(4, 3, dtype=torch.float64)
            grads = []
            for route in (eager.apply, torch.ops.cudnn_py_eager_test.fwd):
                y, mean = route(x, s, b, 0.5)
                assert not mean.requires_grad  # the statistic is not differentiable
                leaves = (x, s) + ((b,) if with_bias else ())
                grads.append(torch.autograd.grad(y, leaves, dy))
            for got, want in zip(*grads):
                assert torch.equal(got, want)
        assert calls == ["f", "b", "f", "b"]  # the eager route ran the kernels themselves, the op route did not
    finally:
        lib._destroy()


def test_a_refused_half_parameter_graph_gives_way_to_the_float_one(torch, caplog):
    """layernorm's graphs take half scale / bias in their own type; where the running cuDNN refuses such a graph,
    the FLOAT one is planned instead (the kernels then cast the parameters and the gradients), and the log says so
    once. A refusal of the FLOAT graph itself is raised, not retried."""
    import logging

    from cudnn_py.errors import cudnnGraphNotSupportedError
    from cudnn_py.ops.norm import layernorm

    asked = []

    def plan(dtype):
        asked.append(dtype)
        if dtype != torch.float32:
            raise cudnnGraphNotSupportedError("no engine for BFLOAT16 scale")
        return "the FLOAT graph"

    with caplog.at_level(logging.INFO, logger="cudnn_py.ops"):
        assert layernorm._in_param_dtype(plan, torch.bfloat16, "backward") == "the FLOAT graph"
    assert asked == [torch.bfloat16, torch.float32]
    assert "layernorm backward with torch.bfloat16 scale and bias was refused" in caplog.text
    assert layernorm._in_param_dtype(lambda d: d, torch.float16, "forward") == torch.float16  # taken as asked

    def refuse(dtype):
        raise cudnnGraphNotSupportedError("no engine at all")

    with pytest.raises(cudnnGraphNotSupportedError, match="no engine at all"):
        layernorm._in_param_dtype(refuse, torch.float32, "forward")
