"""1.32's ``cudnn.Graph`` (``cudnn.wrapper``) on the CPU: its surface, graphs built from fake torch tensors and
validated by the real cuDNN without a GPU, set_io_tuples, the two call forms, the default handle, and what the
wrapper refuses.

torch is not installed here: the fake ``torch`` module of ``tests/test_execute_correctness.py`` stands in for it
in ``sys.modules`` (its tensors carry ``__dlpack__``, which is what makes an argument a framework tensor for the
wrapper). The graph is validated and
its operation graph finalized for real (deviceless); the plan stages (heuristics need a GPU) and execute are
replaced by recorders, so the tests see which modes were asked for and which variant pack would have run.
The GPU runs are in tests/test_gpu_graph_wrapper.py."""
from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import threading
from pathlib import Path

import pytest

import cudnn_py as cudnn
from cudnn_py.facade import wrapper as wrapper_mod
from tests import test_execute_correctness as harness
from tests.test_execute_correctness import FakeTorchStream as Stream
from tests.test_execute_correctness import Tensor

ROOT = Path(__file__).resolve().parents[1]
SURFACE = json.loads((ROOT / "tests" / "data" / "module_surface_1_32.json").read_text())
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT


# the execute tests' fake torch (tests/test_execute_correctness.py): its tensors, streams, allocator and fixture
torch = harness.torch


class Planning:
    """The plan stages of pygraph replaced by recorders. validate and build_operation_graph stay real, run
    deviceless: the graph's handle (a fake one, which must never reach cuDNN) is hidden from them."""

    def __init__(self, monkeypatch, workspace_size=4096):
        self.calls: list = []
        self.packs: list = []
        rec = self
        real_validate, real_opgraph = cudnn.pygraph.validate, cudnn.pygraph.build_operation_graph

        def deviceless(g, real):
            handle, g._handle = g._handle, None
            try:
                real(g)
            finally:
                g._handle = handle

        def validate(g):
            rec.calls.append("validate")
            deviceless(g, real_validate)

        def build_operation_graph(g):
            rec.calls.append("build_operation_graph")
            deviceless(g, real_opgraph)

        def create_execution_plans(g, heuristics=None):
            rec.calls.append(("create_execution_plans", list(heuristics)))
            g._fake_plans = 2

        def execute(g, pack, **kwargs):
            rec.packs.append((dict(pack), kwargs))

        monkeypatch.setattr(cudnn.pygraph, "validate", validate)
        monkeypatch.setattr(cudnn.pygraph, "build_operation_graph", build_operation_graph)
        monkeypatch.setattr(cudnn.pygraph, "create_execution_plans", create_execution_plans)
        monkeypatch.setattr(cudnn.pygraph, "check_support", lambda g: rec.calls.append("check_support"))
        monkeypatch.setattr(cudnn.pygraph, "build_plans", lambda g, *a, **k: rec.calls.append("build_plans"))
        monkeypatch.setattr(cudnn.pygraph, "get_execution_plan_count", lambda g: getattr(g, "_fake_plans", 0))
        monkeypatch.setattr(cudnn.pygraph, "get_workspace_size", lambda g, *a, **k: workspace_size)
        monkeypatch.setattr(cudnn.pygraph, "execute", execute)


@pytest.fixture
def planning(monkeypatch):
    return Planning(monkeypatch)


HANDLE = 0x5A5A_0000


def conv_relu(torch, **graph_kwargs):
    """conv_fprop + relu from NHWC fake tensors viewed as NCHW (as the official example does)."""
    x = Tensor((8, 56, 56, 64)).permute(0, 3, 1, 2)
    w = Tensor((32, 3, 3, 64)).permute(0, 3, 1, 2)
    with cudnn.Graph(**graph_kwargs) as graph:
        conv = graph.conv_fprop(image=x, weight=w, padding=[1, 1], stride=[1, 1], dilation=[1, 1],
                                compute_data_type=cudnn.data_type.FLOAT, name="conv2d")
        y = graph.relu(conv)
        y.set_output(True).set_data_type(cudnn.data_type.HALF)
    return graph, x, w, conv, y


# ------------------------------------------------------------------------------------------------- the surface
def _params(fn):
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self":
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            out.append([("**" if p.kind == p.VAR_KEYWORD else "*") + p.name, None, None])
        else:
            out.append([p.name, p.kind.name, None if p.default is p.empty else str(p.default)])
    return out


def test_graph_has_the_official_signatures():
    assert _params(cudnn.Graph.__init__) == SURFACE["Graph"]["__init__"]
    assert _params(cudnn.Graph.set_io_tuples) == SURFACE["Graph"]["set_io_tuples"]


def test_wrapper_is_a_module_with_the_official_names():
    import cudnn_py.wrapper as w
    from cudnn_py.wrapper import Graph, destroy_default_handle, get_default_handle

    assert w is cudnn.wrapper is wrapper_mod and Graph is cudnn.Graph
    assert set(w.__all__) == {"Graph", "data_type", "heur_mode", "cudnn"}
    assert w.cudnn is cudnn and w.data_type is cudnn.data_type and w.heur_mode is cudnn.heur_mode
    assert callable(get_default_handle) and callable(destroy_default_handle)
    assert list(inspect.signature(get_default_handle).parameters) == ["stream"]


def test_graph_without_torch_is_refused():
    if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is importable in this environment")
    with pytest.raises(RuntimeError, match="PyTorch is not available"):
        cudnn.Graph()


def test_constructor_argument_checks(torch):
    for bad in ({"inputs": "x"}, {"outputs": "y"}, {"heuristics": cudnn.heur_mode.A}):
        with pytest.raises(ValueError, match="must be a list or tuple"):
            cudnn.Graph(**bad)
    g = cudnn.Graph(no_such_pygraph_option=1)  # goes to pygraph, which refuses it when the graph is made
    with pytest.raises(TypeError, match="unexpected keyword"):
        g.__enter__()


# ------------------------------------------------------------------------------------------------- building
def test_conv_relu_from_framework_tensors_validates_and_builds_on_exit(torch, planning):
    graph, x, w, conv, y = conv_relu(torch, handle=HANDLE, io_data_type=torch.float16,
                                     compute_data_type=torch.float32)
    assert planning.calls == ["validate", "build_operation_graph",
                              ("create_execution_plans", [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]),
                              "check_support", "build_plans"]
    g = graph._Graph__graph
    assert isinstance(g, cudnn.pygraph) and g.handle == HANDLE
    # torch dtypes became cuDNN ones; the real cuDNN finalized the operation graph without a GPU
    assert (g.context.io_data_type, g.context.compute_data_type) == (H, F)
    assert g.session.lowered.operation_graph.finalized
    # the framework tensors became graph tensors like them (dims, strides, dtype), named after the node's ports
    X, W = g.find_tensor("conv2d::X"), g.find_tensor("conv2d::W")
    assert (X.get_dim(), X.get_stride(), X.get_data_type()) == ([8, 64, 56, 56], [200704, 1, 3584, 64], H)
    assert (W.get_dim(), W.get_stride()) == ([32, 64, 3, 3], [576, 1, 192, 64])
    assert not X.get_is_virtual() and y.get_dim() == [8, 32, 56, 56]
    assert conv.get_is_virtual() and conv.get_name() == "conv2d::Y" and y.get_name() == "relu.0::OUT_0"
    # the wrapper's names: "<node>::<keyword>" / "<node>::<position>"; unnamed nodes are "<method>.<n>"
    graph.set_io_tuples(["conv2d::weight", x], [y])
    out = graph(w, x)
    assert planning.packs[-1][0] == {W.get_uid(): w, X.get_uid(): x, y.get_uid(): out}
    with pytest.raises(ValueError, match="virtual tensor"):
        graph.set_io_tuples(["conv2d::image", "conv2d::weight", "relu.0::0"], [y])
    # the workspace was allocated with torch at the graph's size
    assert torch.allocated[0] == ("empty", 4096, "cuda", torch.uint8)
    assert torch.allocated[1] == ("empty_strided", [8, 32, 56, 56], [100352, 1, 1792, 32], "cuda", torch.float16)
    assert graph.get_workspace_size() == 4096  # passed through


def test_the_same_framework_tensor_is_one_graph_tensor_and_grad_tensors_are_detached(torch, planning):
    a = Tensor((1, 16, 32), requires_grad=True)
    with cudnn.Graph(handle=HANDLE, workspace_alloc=False) as graph:
        s = graph.add(a, a)  # positional: recorded as add.0::0 and add.0::1
        s.set_output(True)
    g = graph._Graph__graph
    inputs = [t for t in g._by_uid.values() if not t.get_is_virtual() and t is not s]
    assert len(inputs) == 1 and inputs[0].get_dim() == [1, 16, 32]
    graph.set_io_tuples([a], [s])  # found by the framework tensor it was built from
    out = graph(a, workspace=0)
    pack, _ = planning.packs[-1]
    assert pack == {inputs[0].get_uid(): a, s.get_uid(): out}
    assert [a[0] for a in torch.allocated] == ["empty_strided"]  # workspace_alloc=False: no workspace
    assert inputs[0].get_dim() == [1, 16, 32] and a.requires_grad  # made from a detached view


def test_heuristics_and_io_tuples_given_at_construction(torch, planning):
    x = Tensor((2, 16, 32))
    y = Tensor((2, 32, 8))
    with cudnn.Graph(handle=HANDLE, heuristics=[cudnn.heur_mode.B], inputs=["mm::A", y], outputs=["mm::C"],
                     io_data_type=cudnn.data_type.HALF, compute_data_type=cudnn.data_type.FLOAT) as graph:
        c = graph.matmul(A=x, B=y, name="mm")
        c.set_output(True)
    assert ("create_execution_plans", [cudnn.heur_mode.B]) in planning.calls
    out = graph(x, y, workspace=123)
    assert torch.allocated[-1] == ("empty_strided", [2, 16, 8], [128, 8, 1], "cuda", torch.float16)
    pack, kwargs = planning.packs[-1]
    assert list(pack.values()) == [x, y, out] and kwargs == {"handle": HANDLE, "workspace": 123}


def test_set_io_tuples_inside_the_block_applies_on_exit_and_lookups_by_name_and_uid(torch, planning):
    x, y = Tensor((2, 16, 32)), Tensor((2, 32, 8))
    with cudnn.Graph(handle=HANDLE) as graph:
        c = graph.matmul(x, y, name="mm")
        c.set_output(True).set_name("C")
        graph.set_io_tuples(["mm::1", "mm::0"], ["C"])  # canonical names of positional arguments
    out = graph(y, x)
    pack, _ = planning.packs[-1]
    A, B = graph._Graph__graph.find_tensor("mm::A"), graph._Graph__graph.find_tensor("mm::B")
    assert pack == {B.get_uid(): y, A.get_uid(): x, c.get_uid(): out}
    graph.set_io_tuples([A.get_uid(), B], [c.get_uid()])  # by uid and by graph tensor
    graph(x, y)
    assert list(planning.packs[-1][0]) == [A.get_uid(), B.get_uid(), c.get_uid()]


def test_user_created_tensors_are_recorded_and_taken_by_name(torch, planning):
    with cudnn.Graph(handle=HANDLE) as graph:
        a = graph.tensor(name="A", dim=[2, 16, 32], stride=[512, 32, 1], data_type=H)
        b = graph.tensor_like(Tensor((2, 32, 8)))
        c = graph.matmul(a, b, name="mm")
        c.set_output(True)
    graph.set_io_tuples(["A", "mm::1"], [c])
    xa, xb = Tensor((2, 16, 32)), Tensor((2, 32, 8))
    out = graph(xa, xb)
    assert planning.packs[-1][0] == {a.get_uid(): xa, b.get_uid(): xb, c.get_uid(): out}
    # a graph.tensor() object is taken as it is but not marked found (as in 1.32): its node input is then missing
    with pytest.raises(ValueError, match=r"Node input mm::0 is a non-virtual tensor but not specified"):
        graph.set_io_tuples([a, "mm::1"], [c])


def test_several_outputs_come_back_as_a_list(torch, planning):
    x = Tensor((4, 8))
    with cudnn.Graph(handle=HANDLE) as graph:
        r = graph.relu(x, name="r")
        s = graph.sigmoid(x, name="s")
        r.set_output(True)
        s.set_output(True)
    graph.set_io_tuples([x], ["s::OUT_0", r])
    outs = graph(x)
    assert isinstance(outs, list) and len(outs) == 2
    X = graph._Graph__graph.find_tensor("r::IN_0")  # one graph tensor for x, named by its first use
    assert planning.packs[-1][0] == {X.get_uid(): x, s.get_uid(): outs[0], r.get_uid(): outs[1]}


# ------------------------------------------------------------------------------------------------- set_io_tuples errors
@pytest.fixture
def matmul_graph(torch, planning):
    x, y = Tensor((2, 16, 32)), Tensor((2, 32, 8))
    with cudnn.Graph(handle=HANDLE) as graph:
        t = graph.matmul(x, y, name="mm")
        c = graph.relu(t, name="act")
        c.set_output(True)
    return graph, x, y, t, c


@pytest.mark.parametrize("inputs, outputs, message", [
    ("mm::0", ["act::OUT_0"], "inputs must be a list or tuple"),
    (["mm::0", "mm::1"], "act::OUT_0", "outputs must be a list or tuple"),
    (["mm::0", "nope"], ["act::OUT_0"], r"Input at index 1 \(nope\) not found in tensor map"),
    (["mm::0", "mm::0"], ["act::OUT_0"], r"Input at index 1 \(mm::0\) not found in tensor map"),  # a duplicate
    (["mm::0", "mm::1"], ["nope"], r"Output at index 0 \(nope\) not found in tensor map"),
    (["mm::0", "mm::1", "act::0"], ["act::OUT_0"], "Input at index 2 is a virtual tensor"),
    (["mm::0", "mm::1", "act::OUT_0"], [], r"Input at index 2 \(act::OUT_0\) not found"),  # an output is no input
    (["mm::0", "mm::1", "mm::C"], ["act::OUT_0"], "Input at index 2 is a virtual tensor"),  # by assigned name
    (["mm::0", "mm::1"], [], "Node output act::OUT_0 is a non-virtual tensor but not specified as output"),
    (["mm::0"], ["act::OUT_0"], "Node input mm::1 is a non-virtual tensor but not specified as input or output"),
])
def test_set_io_tuples_errors(matmul_graph, inputs, outputs, message):
    graph = matmul_graph[0]
    with pytest.raises(ValueError, match=message):
        graph.set_io_tuples(inputs, outputs)


def test_set_io_tuples_by_framework_tensor_not_used(matmul_graph):
    graph = matmul_graph[0]
    with pytest.raises(ValueError, match="Input at index 0 .* not found in tensor map"):
        graph.set_io_tuples([Tensor((2, 16, 32))], ["act::OUT_0"])


# ------------------------------------------------------------------------------------------------- calls
def test_positional_call_checks(matmul_graph):
    graph, x, y, _, _ = matmul_graph
    with pytest.raises(ValueError, match="before running set_io_tuples"):
        graph(x, y)
    graph.set_io_tuples([x, y], ["act::OUT_0"])
    with pytest.raises(ValueError, match=r"Number of arguments \(1\) does not match number of inputs \(2\)"):
        graph(x)


def test_dict_call_fills_the_pack_allocates_missing_outputs_and_returns_the_dict(matmul_graph, planning, torch):
    graph, x, y, t, c = matmul_graph
    given = {"mm::0": x, graph._Graph__graph.find_tensor("mm::B").get_uid(): y}  # canonical name, uid
    out = graph(given, workspace=7)
    assert out is given and set(given) == {"mm::0", graph._Graph__graph.find_tensor("mm::B").get_uid(),
                                           "act::OUT_0"}
    assert torch.allocated[-1] == ("empty_strided", [2, 16, 8], [128, 8, 1], "cuda", torch.float16)
    pack, kwargs = planning.packs[-1]
    assert pack[c.get_uid()] is given["act::OUT_0"] and t.get_uid() not in pack  # virtual: not in the pack
    assert kwargs == {"handle": HANDLE, "workspace": 7}
    mine = Tensor((2, 16, 8))
    graph({"mm::0": x, "mm::1": y, c: mine})  # outputs given (by graph tensor) are used as they are
    assert planning.packs[-1][0][c.get_uid()] is mine


def test_dict_call_errors(matmul_graph):
    graph, x, y, _, _ = matmul_graph
    with pytest.raises(RuntimeError, match=r"Non-virtual input tensors not found in variant pack: \['mm::1'\]"):
        graph({"mm::0": x})
    with pytest.raises(RuntimeError, match="Tensor mm::1 is not provided as a dlpack tensor"):
        graph({"mm::0": x, "mm::1": 0x1234})


def test_handle_and_workspace_rules(torch, planning, monkeypatch):
    x = Tensor((4, 8))
    with cudnn.Graph(workspace_alloc=False) as graph:  # no handle
        graph.relu(x, name="r").set_output(True)
    graph.set_io_tuples([x], ["r::OUT_0"])
    with pytest.raises(RuntimeError, match="Need to specify cudnn handle to execute graph"):
        graph(x)
    with pytest.raises(RuntimeError, match="Need to specify workspace to execute graph"):
        graph(x, handle=HANDLE)
    graph(x, handle=HANDLE, workspace=99)
    assert planning.packs[-1][1] == {"handle": HANDLE, "workspace": 99}
    # handle="auto": the thread's default handle, bound to torch's current stream
    made, bound = [], []
    monkeypatch.setattr(wrapper_mod, "create_handle", lambda device: made.append(device) or
                        cudnn.Handle(None, device))
    monkeypatch.setattr(wrapper_mod, "set_stream", lambda handle, stream: bound.append((handle, stream)))
    monkeypatch.setattr(wrapper_mod, "_default_handle_registry", [])
    monkeypatch.setattr(wrapper_mod, "_default_handles", threading.local())
    monkeypatch.setattr(wrapper_mod.Graph, "_Graph__handle", None)
    with cudnn.Graph(handle="auto") as auto:
        auto.relu(x, name="r").set_output(True)
    assert auto._Graph__graph.handle is None  # "auto" is not given to pygraph
    auto.set_io_tuples([x], ["r::OUT_0"])
    torch.current[0] = 0xABC
    auto(x)
    assert made == [0] and bound[-1][1] == 0xABC and planning.packs[-1][1]["handle"] is bound[-1][0]


def test_default_handle_per_thread_and_device(torch, monkeypatch):
    made, bound = [], []

    class H:
        def __init__(self, device):
            self.device, self.backend_handle = device, 1

    monkeypatch.setattr(wrapper_mod, "create_handle", lambda device: made.append(H(device)) or made[-1])
    monkeypatch.setattr(wrapper_mod, "set_stream", lambda handle, stream: bound.append((handle, stream)))
    monkeypatch.setattr(wrapper_mod, "destroy_handle", lambda h: setattr(h, "backend_handle", None))
    monkeypatch.setattr(wrapper_mod, "_default_handle_registry", [])
    monkeypatch.setattr(wrapper_mod, "_default_handles", threading.local())
    h0 = wrapper_mod.get_default_handle()
    assert wrapper_mod.get_default_handle(0x77) is h0 and bound[-1] == (h0, 0x77)  # raw stream: current device
    h1 = wrapper_mod.get_default_handle(Stream(0x88, 1))
    assert h1.device == 1 and h1 is not h0 and bound[-1] == (h1, 0x88)
    other = []
    th = threading.Thread(target=lambda: other.append(wrapper_mod.get_default_handle()))
    th.start()
    th.join()
    assert other[0] is not h0 and len(wrapper_mod._default_handle_registry) == 3
    wrapper_mod.destroy_default_handle()
    assert wrapper_mod._default_handle_registry == [] and h0.backend_handle is None
    assert wrapper_mod.get_default_handle() is not h0  # a destroyed one is made again


# ------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("name", ["validate", "build_operation_graph", "create_execution_plans", "check_support",
                                  "build_plans", "build", "execute", "execute_plan_at_index",
                                  "get_execution_plan_count", "deselect_engines", "select_numeric_notes",
                                  "populate_cuda_graph", "update_cuda_graph", "get_engine_count"])
def test_build_and_execute_methods_are_refused(matmul_graph, name):
    graph = matmul_graph[0]
    with pytest.raises(RuntimeError, match=f"Calling {name} via wrapper is not allowed"):
        getattr(graph, name)


def test_refusals_around_the_block(torch, planning):
    graph = cudnn.Graph(handle=HANDLE)
    with pytest.raises(AttributeError):  # no pygraph before the block
        graph.relu  # noqa: B018
    with pytest.raises(RuntimeError, match="Graph not created"):
        graph()
    with pytest.raises(AttributeError):
        graph.set_io_tuples([], [])
    x = Tensor((4, 8))
    with graph:
        with pytest.raises(RuntimeError, match="Graph already created"):
            graph.__enter__()
        graph.relu(x, name="r").set_output(True)
        with pytest.raises(ValueError, match="Node name r already used"):
            graph.sigmoid(x, name="r")
        with pytest.raises(RuntimeError, match="before the context exits"):
            graph({"r::input": x})
        assert graph.name == "test_graph"  # attributes that are not methods pass through
    with pytest.raises(RuntimeError, match="Graph already created"):
        graph.__enter__()


def test_an_error_in_the_block_drops_the_graph(torch, planning):
    graph = cudnn.Graph(handle=HANDLE)
    with pytest.raises(KeyError, match="boom"):
        with graph:
            graph.relu(Tensor((4, 8)), name="r")
            raise KeyError("boom")
    assert "validate" not in planning.calls
    with pytest.raises(RuntimeError, match="Graph not created"):
        graph({})


def test_an_invalid_graph_fails_on_exit(torch, planning):
    graph = cudnn.Graph(handle=HANDLE)
    with pytest.raises(Exception, match="matmul"):
        with graph:
            graph.matmul(Tensor((2, 16, 32)), Tensor((2, 31, 8)), name="mm").set_output(True)
    assert planning.calls == ["validate"]


def test_exit_without_plans_propagates_the_heuristics_error(torch):
    """Unpatched on the CPU: validation and the operation graph work deviceless, the heuristics query cannot."""
    from tests.conftest import gpu_available

    if gpu_available():
        pytest.skip("a GPU is usable here: heuristics succeed")
    graph = cudnn.Graph(handle=None, workspace_alloc=False)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="heuristics need a device"):
        with graph:
            graph.relu(Tensor((4, 8)), name="r").set_output(True)
