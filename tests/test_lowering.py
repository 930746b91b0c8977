"""IR -> backend descriptors on the CPU, against the real cuDNN (the test libcuda stub lets it finalize):
deviceless validate(), what each descriptor carries, every pointwise mode, error paths, and the variant-pack
binding — everything short of heuristics, plans and execution, which need the GPU."""
from __future__ import annotations

import io

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.ir.spec import SPECS
from tests.conftest import gpu_available

POINTWISE = {m: s for m, s in SPECS.items() if s.kind == "pointwise"}
# The classic method -> backend mode mapping, written out from the official frontend's pointwise bindings
# (not derived from the specs, so a wrong spec fails here): checked against what the trace shows reaching
# cudnnBackendSetAttribute.
EXPECTED_MODE = {
    "add": "ADD", "add_square": "ADD_SQUARE", "bias": "ADD", "scale": "MUL", "mul": "MUL", "sub": "SUB",
    "div": "DIV", "max": "MAX", "min": "MIN", "mod": "MOD", "pow": "POW", "sqrt": "SQRT", "rsqrt": "RSQRT",
    "reciprocal": "RECIPROCAL", "exp": "EXP", "log": "LOG", "neg": "NEG", "abs": "ABS", "ceil": "CEIL",
    "floor": "FLOOR", "sin": "SIN", "cos": "COS", "tan": "TAN", "erf": "ERF", "identity": "IDENTITY",
    "relu": "RELU_FWD", "leaky_relu": "RELU_FWD", "tanh": "TANH_FWD", "sigmoid": "SIGMOID_FWD", "elu": "ELU_FWD",
    "gelu": "GELU_FWD", "gelu_approx_tanh": "GELU_APPROX_TANH_FWD", "softplus": "SOFTPLUS_FWD",
    "swish": "SWISH_FWD", "relu_backward": "RELU_BWD", "leaky_relu_backward": "RELU_BWD",
    "tanh_backward": "TANH_BWD", "sigmoid_backward": "SIGMOID_BWD", "elu_backward": "ELU_BWD",
    "gelu_backward": "GELU_BWD", "gelu_approx_tanh_backward": "GELU_APPROX_TANH_BWD",
    "softplus_backward": "SOFTPLUS_BWD", "swish_backward": "SWISH_BWD", "cmp_eq": "CMP_EQ", "cmp_neq": "CMP_NEQ",
    "cmp_gt": "CMP_GT", "cmp_ge": "CMP_GE", "cmp_lt": "CMP_LT", "cmp_le": "CMP_LE", "logical_and": "LOGICAL_AND",
    "logical_or": "LOGICAL_OR", "logical_not": "LOGICAL_NOT", "binary_select": "BINARY_SELECT",
    "gen_index": "GEN_INDEX",
}

H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT


def graph(io_type=H):
    return cudnn.pygraph(io_data_type=io_type, intermediate_data_type=F, compute_data_type=F)


def lowered(g):
    g.validate()
    return g.session.lowered


def test_matmul_bias_relu_validates_without_a_device():
    g = graph()
    A = g.tensor(dim=[4, 64, 32], stride=[2048, 32, 1], name="A")
    B = g.tensor(dim=[4, 32, 16], stride=[512, 16, 1], name="B")
    bias = g.tensor(dim=[1, 1, 16], stride=[16, 16, 1], name="bias")
    Y = g.relu(g.bias(g.matmul(A, B), bias))
    Y.set_output(True)
    low = lowered(g)
    og = low.operation_graph
    assert og.finalized and low.handle is None  # no handle: deviceless validation
    assert og.get("CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT") > 0
    kinds = [d.kind.name for d in low.operations]
    assert kinds == ["CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR", "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR",
                     "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR"]
    # uid ownership: every backend tensor carries its IR uid; inferred dims/strides match what was lowered
    for uid, desc in low.tensors.by_uid.items():
        t = low.tensors.ir_by_uid[uid]
        assert desc.get("CUDNN_ATTR_TENSOR_UNIQUE_ID") == uid == t.uid
        assert desc.get("CUDNN_ATTR_TENSOR_DIMENSIONS") == list(t.dim)
        assert desc.get("CUDNN_ATTR_TENSOR_STRIDES") == list(t.stride)
        assert desc.get("CUDNN_ATTR_TENSOR_IS_VIRTUAL") == bool(t.is_virtual)
    assert list(Y.get_dim()) == [4, 64, 16] and list(Y.get_stride()) == [1024, 16, 1]
    mm_c = low.operations[0].get("CUDNN_ATTR_OPERATION_MATMUL_CDESC")
    assert mm_c.get("CUDNN_ATTR_TENSOR_IS_VIRTUAL") is True
    assert mm_c.get("CUDNN_ATTR_TENSOR_DATA_TYPE").name == "CUDNN_DATA_FLOAT"  # intermediate type
    assert low.tensors.by_uid[Y.get_uid()].get("CUDNN_ATTR_TENSOR_DATA_TYPE").name == "CUDNN_DATA_HALF"


@pytest.mark.parametrize("method", sorted(POINTWISE))
def test_every_pointwise_mode_lowers(method):
    op = POINTWISE[method]
    mode = "CUDNN_POINTWISE_" + EXPECTED_MODE[method]
    g = graph(F)
    ins = [g.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name=f"in{i}") for i in range(len(op.inputs))]
    if method == "binary_select":
        ins[-1].set_data_type(cudnn.data_type.BOOLEAN)
    kwargs = {p.arg: t for p, t in zip(op.inputs, ins)}
    if method.startswith("leaky_relu"):
        kwargs["negative_slope"] = 0.25
    if method == "gen_index":
        kwargs["axis"] = 1
    out = getattr(g, method)(**kwargs)
    out.set_output(True)
    if method.startswith(("cmp_", "logical_")):
        out.set_data_type(cudnn.data_type.BOOLEAN)
    buf = io.StringIO()
    with cudnn.backend.tracing(buf):
        low = lowered(g)
    (desc,) = low.operations
    assert desc.kind.name == "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR" and desc.finalized
    sent = cudnn.backend.trace.read(buf.getvalue().splitlines())
    modes = [r["values"] for r in sent if r.get("attr") == "CUDNN_ATTR_POINTWISE_MODE"]
    assert modes == [[mode]]  # what reached the backend
    ports = {r["attr"] for r in sent if r.get("kind") == "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR" and "attr" in r}
    expected_ports = {"XDESC", "YDESC"} if len(op.inputs) == 1 else {"XDESC", "BDESC", "YDESC"}
    if len(op.inputs) == 3:
        expected_ports.add("TDESC")
    if method.endswith("_backward"):
        expected_ports = {"XDESC", "DYDESC", "DXDESC"}
    assert {p for p in ports if p.endswith("DESC") and "PW_" not in p} == \
        {f"CUDNN_ATTR_OPERATION_POINTWISE_{p}" for p in expected_ports}


def test_backward_activation_ports_and_relu_parameters():
    g = graph(F)
    dy = g.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="dy")
    x = g.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="x")
    dx = g.relu_backward(loss=dy, input=x, negative_slope=0.1, lower_clip=-1.0, upper_clip=6.0)
    dx.set_output(True)
    low = lowered(g)
    op = low.operations[0].attributes
    assert op["CUDNN_ATTR_OPERATION_POINTWISE_DYDESC"] and op["CUDNN_ATTR_OPERATION_POINTWISE_DXDESC"]
    assert "CUDNN_ATTR_OPERATION_POINTWISE_YDESC" not in op
    by_desc = {d.id: uid for uid, d in low.tensors.by_uid.items()}
    dy_id = int(op["CUDNN_ATTR_OPERATION_POINTWISE_DYDESC"].split(":")[0][1:])
    x_id = int(op["CUDNN_ATTR_OPERATION_POINTWISE_XDESC"].split(":")[0][1:])
    assert by_desc[dy_id] == dy.get_uid() and by_desc[x_id] == x.get_uid()


def test_scalars_are_pass_by_value_and_carried_by_the_graph():
    g = graph(F)
    x = g.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="x")
    y = g.add(g.mul(x, 0.5), 3.0)
    y.set_output(True)
    low = lowered(g)
    scalars = [t for t in low.tensors.ir_by_uid.values() if t.is_pass_by_value]
    assert len(scalars) == 2
    for t in scalars:
        d = low.tensors.by_uid[t.uid]
        assert d.get("CUDNN_ATTR_TENSOR_IS_BY_VALUE") is True
        assert d.get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [1, 1, 1]  # reshaped to the rank of x
    ex = g.session.executor
    ptrs = ex.pointers({x: 0x10000, y: 0x20000})  # scalars need no key: the graph holds their host values
    values = sorted(float(v.value) for v in ex._fixed.values())
    assert values == [0.5, 3.0] and 0 not in ptrs


def test_rank_two_tensors_are_padded_and_gen_index_axis_follows():
    g = graph(F)
    x = g.tensor(dim=[3, 40], stride=[40, 1], name="x")
    i = g.gen_index(x, axis=1)
    i.set_output(True).set_data_type(cudnn.data_type.INT32)
    low = lowered(g)
    d = low.tensors.by_uid[x.get_uid()]
    assert d.get("CUDNN_ATTR_TENSOR_DIMENSIONS") == [1, 3, 40]
    assert d.get("CUDNN_ATTR_TENSOR_STRIDES") == [120, 40, 1]
    assert list(x.get_dim()) == [3, 40]  # the IR keeps the rank the user chose


def test_reduction_lowering():
    g = graph(F)
    x = g.tensor(dim=[4, 32, 8, 8], stride=[2048, 1, 256, 32], name="x")
    y = g.reduction(x, mode=cudnn.reduction_mode.AMAX)
    y.set_output(True).set_dim([1, 32, 1, 1])
    low = lowered(g)
    red = low.operations[0].get("CUDNN_ATTR_OPERATION_REDUCTION_DESC")
    assert red.get("CUDNN_ATTR_REDUCTION_OPERATOR").name == "CUDNN_REDUCE_TENSOR_AMAX"


def test_backend_rejections_name_the_graph():
    g = graph(F)
    a = g.tensor(dim=[1, 8, 16], stride=[128, 16, 1], name="a")
    b = g.tensor(dim=[1, 16, 4], stride=[64, 4, 1], name="b")
    c = g.matmul(a, b)
    c.set_output(True).set_dim([1, 8, 5]).set_stride([40, 5, 1])  # N disagrees with B
    with pytest.raises((ValueError, RuntimeError)) as ei:
        g.validate()
    assert "matmul" in str(ei.value).lower() or "dim" in str(ei.value).lower()


def test_planning_without_gpu_says_why():
    if gpu_available():
        pytest.skip("a GPU is present")
    g = graph(F)
    x = g.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="x")
    g.relu(x).set_output(True)
    g.build_operation_graph()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="no GPU/handle"):
        g.create_execution_plans([cudnn.heur_mode.A])


def test_variant_pack_binding_errors():
    g = graph(F)
    x = g.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="x")
    w = g.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="w")
    y = g.add(x, w, name="sum")
    y.set_output(True).set_name("y")
    g.validate()
    ex = g.session.executor
    assert ex.pointers({x: 16, "w": 32, y.get_uid(): 48}) == [16, 32, 48]
    with pytest.raises(ValueError, match=r"missing tensor 'w' \(uid"):
        ex.pointers({x: 16, y: 48})
    with pytest.raises(ValueError, match="not a non-virtual tensor of this graph"):
        ex.pointers({x: 16, w: 32, y: 48, graph(F).tensor(dim=[1], stride=[1]): 64})
    with pytest.raises(ValueError, match="not a non-virtual tensor"):
        ex.pointers({x: 16, w: 32, y: 48, "nope": 1})


def test_inputs_no_operation_reads_are_accepted_and_skipped():
    """A tensor of the graph that no operation reads (dropout's seed when the probability is 0) may be in the
    pack: it is the caller's graph's tensor, so it is skipped rather than refused."""
    g = graph(F)
    x = g.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="x")
    spare = g.tensor(dim=[1, 1, 1], stride=[1, 1, 1], name="spare")
    y = g.relu(x)
    y.set_output(True)
    g.validate()
    ex = g.session.executor
    for key in (spare, spare.get_uid(), "spare"):
        assert ex.pointers({x: 16, y: 48, key: 64}) == [16, 48]
    with pytest.raises(ValueError, match="not a non-virtual tensor"):  # another graph's tensor still is refused
        ex.pointers({x: 16, y: 48, graph(F).tensor(dim=[1], stride=[1]): 64})



def _add_graph(dims=(2, 4, 8)):
    g = graph(F)
    strides = [dims[1] * dims[2], dims[2], 1]
    x = g.tensor(dim=list(dims), stride=strides, name="x")
    w = g.tensor(dim=list(dims), stride=strides, name="w")
    y = g.add(x, w, name="sum")
    y.set_output(True).set_name("y")
    g.validate()
    return g, x, w, y


def test_another_graphs_tensors_are_keys_by_their_uids():
    """As in the official module, which keys a variant pack by uid: a tensor of another graph is taken for this
    graph's tensor of its uid (a graph deserialized from another's blob, or built again alike, runs with the first
    graph's tensors), unless it declares other dims, strides or data type (the uids of two graphs meet by chance:
    each counts from 1). Once frozen, it is kept among the keys the bound execute resolves at once."""
    g1, x1, w1, y1 = _add_graph()
    g2 = _add_graph()[0]
    ex = g2.session.executor
    assert ex.pointers({x1: 16, w1: 32, y1: 48}) == [16, 32, 48]
    assert x1 not in ex._fast_slots  # g1 not frozen: its tensors' uids may still change
    g1._freeze()
    assert ex.pointers({y1: 48, w1: 32, x1: 16}) == [16, 32, 48]
    assert all(t in ex._fast_slots for t in (x1, w1, y1))
    stranger = _add_graph((2, 4, 4))[1]  # uid 1, as x's
    with pytest.raises(ValueError, match=r"'x' \(uid 1\) is not a non-virtual tensor of this graph: a tensor of "
                                         r"another graph, taken by its uid for this graph's tensor 'x' \(uid 1\), "
                                         r"which has dims \[2, 4, 8\] \(the key declares \[2, 4, 4\]\)"):
        ex.pointers({stranger: 16, w1: 32, y1: 48})
    other = graph(F)
    half = other.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="x", data_type=cudnn.data_type.HALF)
    with pytest.raises(ValueError, match=r"which has data type data_type.FLOAT \(the key declares "
                                         r"data_type.HALF\)"):
        ex.pointers({half: 16, w1: 32, y1: 48})
    lost = other.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="lost", uid=99)
    with pytest.raises(ValueError, match=r"'lost' \(uid 99\) is not a non-virtual tensor of this graph \(expected "
                                         r"one of uids \[1, 2, 3\]\)"):
        ex.pointers({x1: 16, w1: 32, y1: 48, lost: 64})
    # the python engines' variant pack (pygraph._variant_pack) takes them the same way
    assert g2._variant_pack({x1: "a", w1: "b", y1: "c"}, None) == {x1.uid: "a", w1.uid: "b", y1.uid: "c"}
    with pytest.raises(ValueError, match=r"not a tensor of this graph: a tensor of another graph.*dims"):
        g2._variant_pack({stranger: "a"}, None)
    with pytest.raises(ValueError, match="not a tensor of this graph"):
        g2._variant_pack({lost: "a"}, None)


def test_a_graph_deserialized_from_anothers_blob_takes_its_tensors_as_keys(monkeypatch):
    """deserialize() of another graph's blob, then its tensors as keys: the loaded graph's slots are records of that
    graph's tensors (plans/serialize.py), and a tensor is taken by its uid, as in the official module. The plan
    rebuild needs a GPU (stubbed here); executing it: tests/test_gpu_plans.py."""
    from types import SimpleNamespace

    from cudnn_py.plans import serialize
    from cudnn_py.plans import session as session_mod

    g1, x1, w1, y1 = _add_graph()
    records = [serialize.TensorRecord.of(t) for t in g1.session.bound_tensors]
    plan = SimpleNamespace(id=1, ptr=0, name="stub", workspace=0, config=SimpleNamespace(name="stub"))
    monkeypatch.setattr(serialize, "parse", lambda blob: {"format": serialize.FORMAT})
    monkeypatch.setattr(serialize, "load", lambda blob, handle: (plan, records, {}))
    monkeypatch.setattr(session_mod, "context_of", lambda handle: None)
    monkeypatch.setattr(session_mod.PlanningSession, "_bind_device", lambda s, handle: None)
    loaded = cudnn.pygraph()
    loaded.deserialize(1, b"(stubbed)")
    ex = loaded.session.executor
    assert ex.pointers({x1: 16, w1: 32, y1: 48}) == ex.pointers({"x": 16, 2: 32, "y": 48}) == [16, 32, 48]
    g1._freeze()
    assert ex.pointers({x1: 16, w1: 32, y1: 48}) == [16, 32, 48] and x1 in ex._fast_slots
    with pytest.raises(ValueError, match=r"not a non-virtual tensor of this graph: a tensor of another graph"):
        ex.pointers({_add_graph((2, 4, 4))[1]: 16, w1: 32, y1: 48})

def test_operand_checks():
    from cudnn_py.interop import operand_info
    from cudnn_py.plans.execute import _check_operand

    g = graph(F)
    x = g.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="x")
    g.relu(x).set_output(True)
    host = np.zeros((2, 4, 8), np.float32)
    with pytest.raises(ValueError, match="lives on the GPU: got a host"):
        _check_operand(x, operand_info(host))
    g.validate()
    ex = g.session.executor
    for key in (x, x.get_uid(), "x"):  # the checked path resolves every key form
        with pytest.raises(ValueError, match=r"tensor 'x' \(uid \d+\) lives on the GPU"):
            ex._check_operands({key: host}, [0, 0])


def test_validate_is_traced(tmp_path):
    buf = io.StringIO()
    g = graph(F)
    x = g.tensor(dim=[2, 4, 8], stride=[32, 8, 1], name="x")
    g.sigmoid(x).set_output(True)
    with cudnn.backend.tracing(buf):
        g.validate()
    recs = cudnn.backend.trace.read(buf.getvalue().splitlines())
    finals = [r for r in recs if r["fn"] == "cudnnBackendFinalize"]
    assert finals[-1]["kind"] == "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR" and finals[-1]["status"] == 0


def test_tensor_options_reach_the_descriptor():
    """Accepted tensor options are lowered, not stored and ignored: vector count/dimension, ragged offsets with
    their multiplier (cuDNN >= 9.24), reordering, alignment."""
    from cudnn_py.backend import versions
    from cudnn_py.lowering import lower_tensor

    g = graph(cudnn.data_type.INT8)
    v = g.tensor(dim=[2, 8, 4, 4], stride=[128, 1, 32, 8], data_type=cudnn.data_type.INT8, name="v", vector_count=4,
                 vector_dimension=1)
    d = lower_tensor(v, 16)
    assert d.get("CUDNN_ATTR_TENSOR_VECTOR_COUNT") == 4 and d.get("CUDNN_ATTR_TENSOR_VECTORIZED_DIMENSION") == 1
    offsets = g.tensor(dim=[3, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.INT32, name="off")
    r = g.tensor(dim=[2, 4, 8, 16], data_type=H, name="r", ragged_offset=offsets, ragged_offset_multiplier=2)
    if versions.runtime_version() >= versions.since("CUDNN_ATTR_TENSOR_RAGGED_OFFSET_MULTIPLIER"):
        d = lower_tensor(r, 16, lower_tensor(offsets, 16))
        assert d.get("CUDNN_ATTR_TENSOR_RAGGED_OFFSET_MULTIPLIER") == 2
        assert d.attributes["CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC"]
    else:
        with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="ragged_offset_multiplier"):
            lower_tensor(r, 16, lower_tensor(offsets, 16))
    a = g.tensor(dim=[4, 4], data_type=H, name="a", alignment=8)
    assert g.tensor_like(a).get_alignment() == 8
