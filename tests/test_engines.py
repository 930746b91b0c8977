"""Python engines beside cuDNN: id regions, registration, the Router, plan selection, and the float64 reference
engine's results on numpy arrays (checked against independent numpy formulas and finite differences)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cudnn_py.engines import (
    BACKEND_HEURISTIC_ENGINE_ID,
    PYTHON_ENGINE_ID_BASE,
    BaseEngine,
    CompiledPlan,
    ExecutionContext,
    PlanConfig,
    Router,
    is_python_engine,
)
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.enums import behavior_note, data_type, heur_mode, reduction_mode
from cudnn_py.facade import cudnnGraphNotSupportedError, pygraph

D = data_type.DOUBLE
RNG = np.random.default_rng(0)


class ToyPlan(CompiledPlan):
    workspace_size = 256
    behavior_notes = (behavior_note.RUNTIME_COMPILATION,)

    def __init__(self, engine, ctx):
        self.engine, self.ctx = engine, ctx

    def execute(self, graph, buffers, ctx):
        self.engine.executed.append((dict(buffers), ctx))


class ToyEngine(BaseEngine):
    def __init__(self, engine_id=PYTHON_ENGINE_ID_BASE + 7, supports=True, n_plans=1):
        self.engine_id, self.name, self._supports, self._n = engine_id, f"toy{engine_id}", supports, n_plans
        self.builds, self.executed = [], []

    def check_support(self, graph):
        if not self._supports:
            raise cudnnGraphNotSupportedError("toy says no")

    def plan_configs(self, graph):
        return [PlanConfig(self.engine_id, f"{self.name}_{i}", {"variant": i}) for i in range(self._n)]

    def build_plan(self, graph, config, ctx):
        self.builds.append(config)
        return ToyPlan(self, ctx)


def small_graph(*engines, **kw):
    g = pygraph(io_data_type=D, backends=list(engines), **kw)
    x = g.tensor([2, 3], name="x")
    y = g.exp(x, name="e").set_output(True)
    return g, x, y


# ---- ids and registration --------------------------------------------------------------------------------------------
def test_engine_id_regions():
    assert is_python_engine(PYTHON_ENGINE_ID_BASE) and not is_python_engine(PYTHON_ENGINE_ID_BASE - 1)
    assert not is_python_engine(BACKEND_HEURISTIC_ENGINE_ID) and not is_python_engine(True)
    assert ReferenceEngine.engine_id >= PYTHON_ENGINE_ID_BASE


def test_register_backend_rules():
    g, _, _ = small_graph()
    with pytest.raises(ValueError, match="engine_id"):
        g.register_backend(ToyEngine(engine_id=3))  # in the cuDNN region
    g.register_backend(ToyEngine())
    with pytest.raises(ValueError, match="already registered"):
        g.register_backend(ToyEngine())
    g.create_execution_plans()
    with pytest.raises(RuntimeError):
        g.register_backend(ToyEngine(engine_id=PYTHON_ENGINE_ID_BASE + 8))
    with pytest.raises(RuntimeError):
        g.set_router(Router())


# ---- routing ---------------------------------------------------------------------------------------------------------
def test_default_router_ranks_python_engines_first():
    no, yes = ToyEngine(PYTHON_ENGINE_ID_BASE + 1, supports=False), ToyEngine(PYTHON_ENGINE_ID_BASE + 2, n_plans=2)
    g, _, _ = small_graph(no, yes)
    g.create_execution_plans()
    assert [p.engine_id for p in g.plans] == [yes.engine_id, yes.engine_id, BACKEND_HEURISTIC_ENGINE_ID]
    assert g.selected_engine is yes and g.plans[1].knobs == {"variant": 1}


def test_router_options_and_custom_routers():
    toy = ToyEngine()
    g, _, _ = small_graph(toy)
    plans = Router(backend_first=True).plan(g, [toy])
    assert plans[0].is_backend and [p.engine_id for p in plans[1:]] == [toy.engine_id]
    g2, _, _ = small_graph(toy, router=Router(include_backend=False))
    g2.create_execution_plans()
    assert [p.engine_id for p in g2.plans] == [toy.engine_id]
    assert g2.get_execution_plan_count() == 0 and g2.backend_plan_entries() == []  # no cuDNN plans
    g3, _, _ = small_graph(toy)
    g3.set_router(lambda graph, engines: [PlanConfig(PYTHON_ENGINE_ID_BASE + 99)])
    with pytest.raises(ValueError, match="unknown engine_id"):
        g3.create_execution_plans()
    g4, _, _ = small_graph(ToyEngine(supports=False), router=Router(include_backend=False))
    with pytest.raises(cudnnGraphNotSupportedError):
        g4.create_execution_plans()


def test_select_plan_and_compile_once():
    a, b = ToyEngine(PYTHON_ENGINE_ID_BASE + 1), ToyEngine(PYTHON_ENGINE_ID_BASE + 2)
    g, x, y = small_graph(a, b, handle=11)
    g.build([heur_mode.A])
    assert g.selected_engine is a and len(a.builds) == 1 and a.builds[0].name == f"{a.name}_0"
    assert g.get_workspace_size() == 256 and g.get_behavior_notes() == [behavior_note.RUNTIME_COMPILATION]
    g.execute({x: 1, y: 2}, "ws")
    g.execute({x: 3, y: 4})
    assert len(a.builds) == 1  # compiled once, cached
    buffers, ctx = a.executed[0]
    assert buffers == {x.uid: 1, y.uid: 2} and ctx.workspace == "ws" and ctx.handle == 11
    g.select_plan(1)
    assert g.selected_engine is b and not g.is_built
    g.execute({"x": 5, "e::OUT_0": 6}, handle=12)
    assert len(b.builds) == 1 and b.executed[0][1].handle == 12 and b.executed[0][0] == {x.uid: 5, y.uid: 6}
    with pytest.raises(IndexError):
        g.select_plan(3)


def test_build_ctx_reaches_the_engine():
    toy = ToyEngine()
    g, _, _ = small_graph(toy)
    g.create_execution_plans()
    ctx = ExecutionContext(handle=5)
    g.build_plans(ctx=ctx)
    assert g._compiled[0].ctx is ctx


def test_python_graph_is_not_lowered():
    g, x, y = small_graph(ReferenceEngine())
    g.validate()
    g.build_operation_graph()
    assert g._session is None  # no cuDNN work for a graph routed to python engines
    assert g.get_execution_plan_count() == 0


# ---- reference engine: pointwise -------------------------------------------------------------------------------------
def run(method, *arrays, out_dtype=np.float64, **attrs):
    g = pygraph(io_data_type=D, backends=[ReferenceEngine()])
    ts = [g.tensor(list(a.shape), name=f"in{i}") for i, a in enumerate(arrays)]
    out = getattr(g, method)(*ts, **attrs).set_output(True)
    result = np.zeros(np.broadcast_shapes(*(a.shape for a in arrays)), out_dtype)
    g.execute({**dict(zip(ts, arrays)), out: result})
    return result


def rand(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, shape)


_erf = np.vectorize(math.erf)
_sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
UNARY = {
    "sqrt": (np.sqrt, (0.1, 3)), "exp": (np.exp, None), "log": (np.log, (0.1, 3)), "neg": (np.negative, None),
    "abs": (np.abs, None), "ceil": (np.ceil, None), "floor": (np.floor, None), "rsqrt": (lambda x: x ** -0.5, (0.1, 3)),
    "reciprocal": (lambda x: 1 / x, (0.5, 3)), "sin": (np.sin, None), "cos": (np.cos, None), "tan": (np.tan, (-1, 1)),
    "erf": (_erf, None), "identity": (lambda x: x, None), "tanh": (np.tanh, None), "sigmoid": (_sig, None),
    "elu": (lambda x: np.where(x > 0, x, np.exp(x) - 1), None),
    "gelu": (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), None),
    "gelu_approx_tanh": (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), None),
    "softplus": (lambda x: np.log1p(np.exp(x)), None), "swish": (lambda x: x * _sig(x), None),
    "relu": (lambda x: np.maximum(x, 0), None),
    "logical_not": (lambda x: (x == 0).astype(float), None),
}


@pytest.mark.parametrize("method", sorted(UNARY))
def test_unary(method):
    fn, rng = UNARY[method]
    lo, hi = rng or (-2, 2)
    x = rand(3, 4, lo=lo, hi=hi)
    if method == "logical_not":
        x[0, :2] = 0
    np.testing.assert_allclose(run(method, x), fn(x), rtol=1e-12, atol=1e-12)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "add_square": lambda a, b: a + b * b,
    "max": np.maximum, "min": np.minimum, "mod": np.fmod, "pow": lambda a, b: np.abs(a) ** b,
    "bias": np.add, "scale": np.multiply,
    "cmp_eq": np.equal, "cmp_neq": np.not_equal, "cmp_gt": np.greater, "cmp_ge": np.greater_equal,
    "cmp_lt": np.less, "cmp_le": np.less_equal,
    "logical_and": lambda a, b: (a != 0) & (b != 0), "logical_or": lambda a, b: (a != 0) | (b != 0),
}


@pytest.mark.parametrize("method", sorted(BINARY))
def test_binary_with_broadcast(method):
    a, b = rand(2, 3, 4), rand(3, 1)
    if method == "pow":
        a = np.abs(a)
    if method.startswith(("cmp", "logical")):
        a, b = np.round(a), np.round(b)
    np.testing.assert_allclose(run(method, a, b), BINARY[method](a, b).astype(float), rtol=1e-12)


def test_relu_variants_and_select_and_gen_index():
    x = np.linspace(-3, 3, 13)
    np.testing.assert_allclose(run("relu", x, negative_slope=0.1, lower_clip=-1.0, upper_clip=2.0),
                               np.where(x < -1, -1 + 0.1 * (x + 1), np.minimum(x, 2.0)))
    np.testing.assert_allclose(run("leaky_relu", x, negative_slope=0.2), np.where(x < 0, 0.2 * x, x))
    np.testing.assert_allclose(run("swish", x, swish_beta=1.5), x * _sig(1.5 * x))
    a, b, m = rand(2, 3), rand(2, 3), (rand(2, 3) > 0).astype(float)
    np.testing.assert_allclose(run("binary_select", a, b, m), np.where(m != 0, a, b))
    idx = run("gen_index", rand(2, 3, 4), axis=1, out_dtype=np.int32)
    assert idx.dtype == np.int32 and (idx == np.arange(3)[None, :, None]).all()


BACKWARD = {  # backward method -> (forward function, attributes)
    "tanh_backward": (np.tanh, {}), "sigmoid_backward": (_sig, {}), "elu_backward": (UNARY["elu"][0], {}),
    "gelu_backward": (UNARY["gelu"][0], {}), "gelu_approx_tanh_backward": (UNARY["gelu_approx_tanh"][0], {}),
    "softplus_backward": (UNARY["softplus"][0], {}), "swish_backward": (lambda x: x * _sig(2 * x), {"swish_beta": 2.0}),
    "relu_backward": (lambda x: np.where(x < 0, 0.1 * x, x), {"negative_slope": 0.1}),
    "leaky_relu_backward": (lambda x: np.where(x < 0, 0.3 * x, x), {"negative_slope": 0.3}),
}


@pytest.mark.parametrize("method", sorted(BACKWARD))
def test_backward_matches_finite_differences(method):
    fwd, attrs = BACKWARD[method]
    x = rand(4, 5)
    x[np.abs(x) < 1e-3] = 0.5  # keep away from the kinks
    dy = rand(4, 5)
    h = 1e-6
    expected = dy * (fwd(x + h) - fwd(x - h)) / (2 * h)
    np.testing.assert_allclose(run(method, dy, x, **attrs), expected, rtol=1e-6, atol=1e-8)


# ---- reference engine: matmul and reduction --------------------------------------------------------------------------
def test_matmul_batch_broadcast_and_chain():
    A, B, bias = rand(3, 1, 4, 5), rand(2, 5, 6), rand(6)
    g = pygraph(io_data_type=D, backends=[ReferenceEngine()])
    a, b = g.tensor(list(A.shape), name="A"), g.tensor(list(B.shape), name="B")
    c = g.matmul(a, b)
    out = g.relu(g.add(c, bias), name="act").set_output(True)
    result = np.zeros((3, 2, 4, 6))
    g.execute({a: A, b: B, out: result})
    np.testing.assert_allclose(result, np.maximum(A @ B + bias, 0), rtol=1e-12)


REDUCE = {
    reduction_mode.ADD: lambda x, ax: x.sum(ax, keepdims=True),
    reduction_mode.MUL: lambda x, ax: x.prod(ax, keepdims=True),
    reduction_mode.MIN: lambda x, ax: x.min(ax, keepdims=True),
    reduction_mode.MAX: lambda x, ax: x.max(ax, keepdims=True),
    reduction_mode.AMAX: lambda x, ax: np.abs(x).max(ax, keepdims=True),
    reduction_mode.AVG: lambda x, ax: x.mean(ax, keepdims=True),
    reduction_mode.NORM1: lambda x, ax: np.abs(x).sum(ax, keepdims=True),
    reduction_mode.NORM2: lambda x, ax: np.sqrt((x ** 2).sum(ax, keepdims=True)),
    reduction_mode.MUL_NO_ZEROS: lambda x, ax: np.where(x == 0, 1, x).prod(ax, keepdims=True),
}


@pytest.mark.parametrize("mode", list(REDUCE), ids=str)
def test_reduction_modes(mode):
    X = rand(2, 3, 4)
    X[0, 0, 0] = 0.0
    g = pygraph(io_data_type=D, backends=[ReferenceEngine()])
    x = g.tensor([2, 3, 4], name="X")
    y = g.reduction(x, mode, out_dims=[2, 1, 1]).set_output(True)
    Y = np.zeros((2, 1, 1))
    g.execute({x: X, y: Y})
    np.testing.assert_allclose(Y, REDUCE[mode](X, (1, 2)), rtol=1e-12)


# ---- reference engine: buffers and binding ---------------------------------------------------------------------------
def test_output_dtypes_are_cast_on_write():
    a, b = rand(8), rand(8)
    half = run("mul", a, b, out_dtype=np.float16)
    np.testing.assert_array_equal(half, (a * b).astype(np.float16))
    mask = run("cmp_gt", a, b, out_dtype=bool)
    assert mask.dtype == bool and (mask == (a > b)).all()


def test_arrays_and_scalars_given_to_ops_directly():
    A, B = rand(3, 4).astype(np.float32), rand(4, 2).astype(np.float32)
    g = pygraph(backends=[ReferenceEngine()])
    out = g.mul(g.matmul(A, B), 0.5).set_output(True)
    result = np.zeros((3, 2), np.float32)
    g.execute({out: result})  # A and B come from the graph's data bindings
    np.testing.assert_allclose(result, 0.5 * (A @ B), rtol=1e-6)
    assert out.data_type is data_type.FLOAT  # no io type: the output follows its first input


def test_flat_buffers_follow_tensor_strides():
    X = rand(2, 3)
    g = pygraph(io_data_type=D, backends=[ReferenceEngine()])
    x = g.tensor([2, 3], [1, 2], name="x")  # column-major input
    y = g.neg(x).set_output(True).set_stride([1, 2])
    flat_in = np.asfortranarray(X).ravel(order="K")
    flat_out = np.zeros(6)
    g.execute({x: flat_in, y: flat_out})
    np.testing.assert_allclose(flat_out.reshape(3, 2).T, -X)


def test_list_buffers_with_tensor_uids_and_auto_build():
    g, x, y = small_graph(ReferenceEngine())
    X, Y = rand(2, 3), np.zeros((2, 3))
    g.execute([X, Y], tensor_uids=[x.uid, y.uid])
    np.testing.assert_allclose(Y, np.exp(X))
    assert g.is_built and g.is_frozen


def test_missing_buffers_raise_value_error():
    g, x, y = small_graph(ReferenceEngine())
    with pytest.raises(ValueError, match="output tensor 'e::OUT_0'"):
        g.execute({x: rand(2, 3)})
    with pytest.raises(ValueError, match="input tensor 'x'"):
        g.execute({y: np.zeros((2, 3))})


def test_reference_engine_refuses_unknown_ops():
    g, x, y = small_graph(ReferenceEngine())
    g._nodes[0].params["mode"] = "CUDNN_POINTWISE_ATAN2"
    with pytest.raises(cudnnGraphNotSupportedError, match="ATAN2"):
        ReferenceEngine().check_support(g)


# ---- GPU: the reference engine on CUDA tensors agrees with cuDNN -----------------------------------------------------
def _cuda_cases(torch):
    """(builder(graph, *inputs) -> (graph inputs, output), torch inputs, output shape, output dtype)."""
    def mm_bias_gelu(g, a, b, bias):
        A, B, Bias = g.tensor_like(a), g.tensor_like(b), g.tensor_like(bias)
        return [A, B, Bias], g.gelu(g.bias(g.matmul(A, B), Bias))

    def pointwise_chain(g, x, y):
        X, Y = g.tensor_like(x), g.tensor_like(y)
        mixed = g.tanh(g.add(g.mul(X, 0.5), Y))
        return [X, Y], g.binary_select(mixed, g.neg(X), g.cmp_gt(X, Y))

    def channel_max(g, x):  # cuDNN: channels-last input, a row/column/all reduction, FLOAT output
        X = g.tensor_like(x)
        return [X], g.reduction(X, reduction_mode.MAX, out_dims=[1, x.shape[1], 1, 1]).set_data_type(data_type.FLOAT)

    r = lambda *s: torch.randn(*s, device="cuda", dtype=torch.float16)  # noqa: E731
    return [
        (mm_bias_gelu, [r(4, 64, 32), r(4, 32, 48), r(1, 1, 48)], (4, 64, 48), torch.float16),
        (pointwise_chain, [r(8, 16, 32), r(8, 16, 32)], (8, 16, 32), torch.float16),
        (channel_max, [r(4, 6, 5, 32).permute(0, 3, 1, 2)], (1, 32, 1, 1), torch.float32),  # NHWC strides
    ]


@pytest.mark.gpu
def test_reference_engine_on_cuda_tensors_matches_cudnn():
    torch = pytest.importorskip("torch")
    for build, inputs, shape, out_dtype in _cuda_cases(torch):
        results = []
        for engines in ([], [ReferenceEngine()]):
            g = pygraph(io_data_type=data_type.HALF, intermediate_data_type=data_type.FLOAT,
                        compute_data_type=data_type.FLOAT, backends=engines)
            tensors, out = build(g, *inputs)
            out.set_output(True)
            result = torch.full(shape, float("nan"), device="cuda", dtype=out_dtype)
            g.build([heur_mode.A, heur_mode.FALLBACK])
            assert (g.selected_engine is None) == (not engines)
            g.execute({**dict(zip(tensors, inputs)), out: result}, None)
            torch.cuda.synchronize()
            results.append(result.double())
        cudnn_out, reference_out = results
        assert torch.isfinite(cudnn_out).all() and torch.isfinite(reference_out).all(), build.__name__
        err = ((cudnn_out - reference_out).norm() / reference_out.norm()).item()
        assert err < 5e-3, f"{build.__name__}: relative error {err}"


def test_a_graph_run_by_the_reference_engine_goes_when_dropped():
    """No reference cycle through a graph its python engine planned and ran (the plan keeps no reference to the
    graph; the execute reads through one _Reader object, not closures that refer to each other): dropped, it goes
    at once (the cyclic collector is off)."""
    import weakref

    from tests.support.collector import collector_off

    def ran():
        g, x, y = small_graph(ReferenceEngine())
        out = np.zeros((2, 3))
        xs = rand(2, 3)
        g.execute({x: xs, y: out})
        assert np.allclose(out, np.exp(xs))
        return weakref.ref(g)

    with collector_off():
        assert ran()() is None
