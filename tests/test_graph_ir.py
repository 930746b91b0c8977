"""The graph IR: enums, tensors, uid/name rules, freeze, inference, errors, the classic facade's phases and
options. Planning that needs a GPU is not tested here (tests/test_gpu_graph.py); graphs are planned on the
float64 reference engine where a frozen graph is needed."""
from __future__ import annotations

import inspect
import json
import os

import numpy as np
import pytest

from cudnn_py import enums
from cudnn_py.engines import Router
from cudnn_py.engines.reference import ReferenceEngine
from cudnn_py.enums import (
    behavior_note,
    data_type,
    heur_mode,
    knob_type,
    numerical_note,
    reduction_mode,
    scalar_type,
    tensor_reordering,
)
from cudnn_py.errors import NotImplementedOptionError, PhaseError
from cudnn_py.facade import cudnnGraphNotSupportedError, pygraph, tensor
from cudnn_py.families.pointwise.spec import DBL_MAX, FLT_MAX
from cudnn_py.ir.spec import SPECS
from cudnn_py.plans.session import Phase, PlanningSession, SessionOptions

POINTWISE = {m: s for m, s in SPECS.items() if s.kind == "pointwise"}

F, H = data_type.FLOAT, data_type.HALF


def mm_graph(**ctx):
    g = pygraph(io_data_type=ctx.get("io", H), intermediate_data_type=F, compute_data_type=F)
    a = g.tensor([2, 8, 16], [128, 16, 1], name="A")
    b = g.tensor([2, 16, 4], [64, 4, 1], name="B")
    return g, a, b


# ---- enums ---------------------------------------------------------------------------------------------------------
# the recorded official 1.32 surface, vendored (tests/data/compat/README.md)
_SURFACE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "compat", "reference_surface.json")
with open(_SURFACE) as _f:
    REFERENCE = json.load(_f)


@pytest.mark.parametrize("enum_name", sorted(REFERENCE["enums"]))
def test_enum_members_and_str_match_reference(enum_name):
    cls = getattr(enums, enum_name)
    got = {name: str(member) for name, member in cls.__members__.items()}
    assert got == REFERENCE["enums"][enum_name]
    assert cls.__name__ == enum_name and cls.__module__.startswith("cudnn")


def test_enum_behaves_like_pybind():
    assert f"{data_type.HALF}" == "data_type.HALF" and str(heur_mode.A) == "heur_mode.A"
    assert {knob_type.SWIZZLE: 1}[knob_type.SWIZZLE] == 1
    assert data_type.FLOAT != reduction_mode.MUL  # no cross-enum int equality
    assert int(data_type.HALF) == data_type.HALF.value


def test_backend_names():
    for dt in data_type:
        if dt is data_type.NOT_SET:
            with pytest.raises(ValueError):
                enums.to_backend_data_type(dt)
        else:
            assert enums.to_backend_data_type(dt) == f"CUDNN_DATA_{dt.name}"
    assert enums.to_backend_reduction_mode(reduction_mode.MUL_NO_ZEROS) == "CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS"
    assert [enums.to_backend_heur_mode(m) for m in (heur_mode.A, heur_mode.B, heur_mode.FALLBACK)] == \
        ["CUDNN_HEUR_MODE_A", "CUDNN_HEUR_MODE_B", "CUDNN_HEUR_MODE_FALLBACK"]
    with pytest.raises(ValueError):
        enums.to_backend_heur_mode(heur_mode.OPENSOURCE)
    for note in numerical_note:
        assert enums.numerical_note_from_backend(enums.to_backend_numerical_note(note)) is note
    for note in behavior_note:
        assert enums.behavior_note_from_backend(enums.to_backend_behavior_note(note)) is note
    assert enums.to_backend_knob_type(knob_type.KERNEL_CFG) == "CUDNN_KNOB_TYPE_KERNEL_CFG"
    assert enums.knob_type_from_backend("CUDNN_KNOB_TYPE_TILE_M") is knob_type.TILE_M
    assert enums.knob_type_from_backend("CUDNN_KNOB_TYPE_SPLIT_K") is knob_type.NOT_SET  # deprecated in the backend
    with pytest.raises(ValueError):
        enums.to_backend_knob_type(knob_type.SCHED_POLICY)  # frontend-only band


def test_from_any_dtype():
    assert enums.from_any_dtype(data_type.INT8) is data_type.INT8
    assert enums.from_any_dtype(np.float16) is H and enums.from_any_dtype(np.dtype("float64")) is data_type.DOUBLE
    assert enums.from_any_dtype("torch.bfloat16") is data_type.BFLOAT16
    assert enums.from_any_dtype("torch.float8_e4m3fn") is data_type.FP8_E4M3
    assert enums.from_any_dtype((2, 32)) is F and enums.from_any_dtype((6, 8)) is data_type.BOOLEAN
    assert enums.from_any_dtype(None) is data_type.NOT_SET
    with pytest.raises(TypeError):
        enums.from_any_dtype(np.complex64)


# ---- tensors -------------------------------------------------------------------------------------------------------
def test_tensor_setters_chain_and_getters():
    g = pygraph()
    t = g.tensor([1, 2, 3], [6, 3, 1], H, name="x")
    assert t.set_output(True).set_dim([4, 5]).set_stride([5, 1]).set_data_type(np.float32) is t
    assert (t.get_dim(), t.get_stride(), t.get_data_type(), t.get_is_virtual()) == ([4, 5], [5, 1], F, False)
    t.set_is_virtual(True).set_name("y").set_reordering_type(tensor_reordering.F16x16).set_alignment(32)
    assert (t.get_name(), t.get_is_virtual(), t.get_reordering_type(), t.get_alignment()) == \
        ("y", True, tensor_reordering.F16x16, 32)
    assert t.set_data_type("torch.float16").get_data_type() is H
    assert json.loads(repr(t))["name"] == "y"
    detached = tensor()
    assert detached.get_dim() == [] and detached.get_data_type() is data_type.NOT_SET and detached.get_alignment() == 16


def test_tensor_defaults_and_classic_sentinels():
    g = pygraph()
    t = g.tensor(dim=(2, 3), data_type=data_type.NOT_SET, reordering_type=tensor_reordering.NONE, uid=-1)
    assert t.get_stride() == [3, 1]  # row-major default
    assert not t.uid_assigned and t.get_uid() > 0
    with pytest.raises(TypeError):
        g.tensor([1], nonsense=1)


def test_tensor_like_copies_attributes_not_identity():
    g = pygraph()
    a = g.tensor([2, 3], [1, 2], H, name="a", uid=40)
    b = g.tensor_like(a)
    assert (b.dim, b.stride, b.data_type) == ([2, 3], [1, 2], H)
    assert b.uid != a.uid and b.name == "" and not b.uid_assigned
    arr = np.zeros((4, 6), np.float32)[:, ::2]  # non-contiguous view
    c = g.tensor_like(arr)
    assert (c.dim, c.stride, c.data_type, c.is_pass_by_value) == ([4, 3], [6, 2], F, True)  # CPU -> by value


def test_tensor_scalar():
    g = pygraph()
    s = g.tensor_scalar(0.5, scalar_type.RUNTIME_PARAM)
    c = g.tensor_scalar(3, scalar_type.COMPILE_TIME_CONST, name="three")
    assert (s.data_type, s.pass_by_value, s.is_pass_by_value, s.is_compile_time_constant) == (F, 0.5, True, False)
    assert (c.data_type, c.pass_by_value, c.get_has_compile_time_constant(), c.name) == (data_type.INT32, 3, True, "three")


# ---- uids and names ------------------------------------------------------------------------------------------------
def test_auto_uids_are_eager_and_unique():
    g, a, b = mm_graph()
    c = g.matmul(a, b)
    uids = [a.uid, b.uid, c.uid]
    assert len(set(uids)) == 3 and all(u > 0 for u in uids)


def test_user_uid_wins_and_renumbers_the_auto_holder():
    g = pygraph()
    x = np.ones((2, 2), np.float32)
    auto = g.identity(x)  # the bound input holds an auto uid
    bound = g.nodes[0].inputs["IN_0"]
    taken = bound.uid
    user = g.tensor([2, 2], name="user").set_uid(taken)
    assert user.uid == taken and user.uid_assigned
    assert bound.uid != taken and g.find_tensor(bound.uid) is bound
    assert g._data_bindings[bound.uid] is x and g._data_bindings.get(taken) is None  # binding followed its tensor
    assert auto.uid not in (taken, bound.uid)


def test_duplicate_user_uids_raise():
    g = pygraph()
    g.tensor([1], uid=5)
    with pytest.raises(ValueError, match="uid 5"):
        g.tensor([1], uid=5)
    t = g.tensor([1])
    with pytest.raises(ValueError, match="uid 5"):
        t.set_uid(5)
    t.set_uid(t.uid)  # same value: fine, now user-owned
    assert t.uid_assigned


def test_auto_allocation_skips_user_uids():
    g = pygraph()
    g.tensor([1], uid=1)
    g.tensor([1], uid=2)
    assert g.tensor([1]).uid == 3


def test_names_are_labels():
    g = pygraph()
    w1 = g.tensor([1], name="weight")
    w2 = g.tensor([1], name="weight")
    assert w1.uid != w2.uid
    with pytest.raises(ValueError, match="weight"):
        g.find_tensor("weight")
    assert g.find_tensor(w2.uid) is w2 and g.find_tensor("missing") is None
    assert g.tensors[w1.uid] is w1  # shared names are keyed by uid
    w2.set_name("other")
    assert g.find_tensor("weight") is w1 and g.tensors["other"] is w2


def test_default_names():
    g, a, b = mm_graph()
    x = g.tensor([2, 8, 4])
    c = g.matmul(a, b, name="mm")
    d = g.add(c, x)
    y = g.reduction(d, reduction_mode.ADD)
    assert (c.name, d.name, y.name) == ("mm::C", "1::OUT_0", "2::Y")
    assert x.name == "1::IN_1"  # an unnamed input takes <node>::<port>
    assert [n.name for n in g.nodes] == ["mm", "1", "2"]
    assert g.get_node("mm").op == "matmul" and g.get_node("nope") is None


# ---- ops: table, signatures, params ----------------------------------------------------------------------------------
@pytest.mark.parametrize("method", sorted(POINTWISE))
def test_every_pointwise_method_builds(method):
    spec = POINTWISE[method]
    g = pygraph(io_data_type=F)
    ins = [g.tensor([2, 3], name=f"t{i}") for i in range(len(spec.inputs))]
    extra = {p.arg: 1 for p in spec.params if p.default is inspect.Parameter.empty}
    out = getattr(g, method)(**{p.arg: t for p, t in zip(spec.inputs, ins)}, **extra, name="n")
    node = g.nodes[-1]
    assert node.op == "pointwise" and node.spec is spec and node.params["mode"].startswith("CUDNN_POINTWISE_")
    assert [node.inputs[f"IN_{i}"] for i in range(len(ins))] == ins
    assert node.outputs == {"OUT_0": out} and out.name == "n::OUT_0" and out.is_virtual
    out.set_output(True)
    g.validate_ir()
    assert out.dim == [2, 3] and node.params["compute_data_type"] is F


def test_pointwise_params_and_defaults():
    g = pygraph(io_data_type=H, compute_data_type=F)
    x = g.tensor([4], name="x")
    g.relu(x, negative_slope=0.1, lower_clip=-1.0)
    g.leaky_relu(x, 0.2)
    g.swish(x)
    g.swish_backward(x, x, swish_beta=2.0)
    g.elu(x)
    g.softplus_backward(x, x)
    g.gen_index(x, 0)
    g.relu(x, compute_data_type=data_type.DOUBLE).set_output(True)
    g.validate_ir()
    p = [n.params for n in g.nodes]
    assert (p[0]["relu_lower_clip_slope"], p[0]["relu_lower_clip"], p[0]["relu_upper_clip"]) == (0.1, -1.0, FLT_MAX)
    assert (p[1]["mode"], p[1]["relu_lower_clip_slope"], p[1]["relu_lower_clip"]) == ("CUDNN_POINTWISE_RELU_FWD", 0.2, 0.0)
    assert p[2]["swish_beta"] == 1.0 and p[3]["swish_beta"] == 2.0
    assert p[4]["elu_alpha"] == 1.0 and p[5]["softplus_beta"] == 1.0 and p[6]["axis"] == 0
    assert p[7]["relu_upper_clip"] == DBL_MAX and p[7]["compute_data_type"] is data_type.DOUBLE
    assert "axis" not in p[0]


def test_classic_positional_calls():
    g = pygraph(io_data_type=F)
    x = g.tensor([4], name="x")
    g.add(x, x, H, "add_pos")  # 1.23: (a, b, compute_data_type, name)
    g.relu(x, None, None, None, H, "relu_pos")  # 1.23: compute_data_type before name
    g.swish_backward(x, x, H, 3.0, "sb_pos")  # 1.23: compute_data_type before swish_beta
    g.relu(x, 0.5, None, None, "relu_new")  # 1.32 order
    g.matmul(g.tensor([2, 2]), g.tensor([2, 2]), H, 0.0, "mm_pos")
    g.reduction(x, reduction_mode.MAX, H, "red_pos")
    names = [n.name for n in g.nodes]
    assert names == ["add_pos", "relu_pos", "sb_pos", "relu_new", "mm_pos", "red_pos"]
    assert all(n.requested_compute_data_type is H for n in g.nodes if n.name != "relu_new")
    assert g.nodes[2].params["swish_beta"] == 3.0 and g.nodes[3].params["relu_lower_clip_slope"] == 0.5


def test_builder_argument_errors():
    g = pygraph(io_data_type=F)
    x = g.tensor([4], name="x")
    with pytest.raises(TypeError, match="negative_slope"):
        g.leaky_relu(x)
    with pytest.raises(TypeError, match="axis"):
        g.gen_index(input=x)
    with pytest.raises(TypeError, match="unexpected"):
        g.add(a=x, c=x)
    with pytest.raises(TypeError, match="missing"):
        g.add(x)
    with pytest.raises(TypeError, match="reduction_mode"):
        g.reduction(x, "ADD")
    with pytest.raises(TypeError):
        g.add(x, object())


def test_surface_signatures():
    init = list(inspect.signature(pygraph.__init__).parameters)
    assert init[1:14] == ["name", "io_data_type", "intermediate_data_type", "compute_data_type", "handle",
                          "sm_count", "sm_version", "kernel_cache", "device_property", "is_dynamic_shape_enabled",
                          "is_override_shape_enabled", "cuda_graph_retention", "is_cuda_graph_replay_expected"]
    assert list(inspect.signature(pygraph.relu).parameters)[1:] == \
        ["input", "negative_slope", "lower_clip", "upper_clip", "name", "compute_data_type"]
    # the official wrapper shows (*args, name, compute_data_type, **kwargs); cudnn_py spells the parameters out
    assert list(inspect.signature(pygraph.add).parameters)[1:] == ["a", "b", "compute_data_type", "name"]


def test_scalars_and_arrays_as_op_arguments():
    g = pygraph(io_data_type=F)
    x = g.tensor([2, 3, 4], name="x")
    arr = np.ones((2, 3, 4), np.float32)
    y = g.mul(x, 2.0)
    z = g.add(y, arr)
    w = g.add(z, arr).set_output(True)  # the same array binds once
    s = g.nodes[0].inputs["IN_1"]
    bound = g.nodes[1].inputs["IN_1"]
    assert g.nodes[2].inputs["IN_1"] is bound and g._data_bindings[bound.uid] is arr
    assert not bound.is_pass_by_value  # a CPU array fed to an op is data, not a by-value scalar
    g.validate()
    assert (s.dim, s.stride, s.data_type, s.pass_by_value) == ([1], [1], F, 2.0)  # the user's graph: as built
    lowered = g.session.program.tensors[s.uid]  # the legalize pass gives the scalar the rank of x
    assert (lowered.dim, lowered.stride) == ([1, 1, 1], [1, 1, 1])
    assert w.dim == [2, 3, 4]
    one = g.add(w, np.float16(1)).set_output(True)
    g.validate()
    assert g.nodes[-1].inputs["IN_1"].data_type is H and one.dim == [2, 3, 4]


# ---- inference -------------------------------------------------------------------------------------------------------
def test_pointwise_broadcast_and_strides():
    g = pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    a = g.tensor([4, 1, 3], [3, 3, 1], name="a")
    b = g.tensor([5, 1], [1, 1], name="b")
    c = g.add(a, b)  # virtual: dense in IN_0's stride order
    d = g.add(g.tensor([4, 5, 3], [1, 12, 4], name="nhwc"), c)  # the first input with the output dims wins
    g.add(d, 1.0).set_output(True)
    g.validate_ir()
    assert c.dim == [4, 5, 3] and c.stride == [15, 3, 1]
    assert d.stride == [1, 12, 4]
    assert (c.data_type, d.data_type) == (F, F)  # virtual -> intermediate
    d.set_output(True)
    g.validate_ir()
    assert d.data_type is H  # re-inferred: real output -> io


def test_pointwise_nonvirtual_output_without_matching_input_needs_a_stride():
    g = pygraph(io_data_type=H)
    out = g.add(g.tensor([4, 1], name="a"), g.tensor([1, 5], name="b"), name="bad").set_output(True)
    with pytest.raises(ValueError, match=r"pointwise node 'bad'.*bad::OUT_0.*stride"):
        g.validate()
    out.set_stride([5, 1])
    g.validate()


def test_shape_errors_name_op_node_and_tensor():
    g = pygraph(io_data_type=H)
    g.add(g.tensor([4, 3], name="a"), g.tensor([5, 3], name="b"), name="sum")
    with pytest.raises(ValueError, match=r"pointwise node 'sum': tensor 'b'"):
        g.validate()
    g2, a, _ = mm_graph()
    g2.matmul(a, g2.tensor([2, 15, 4], name="Bbad"), name="mm")
    with pytest.raises(ValueError, match=r"matmul node 'mm': tensor 'Bbad'.*inner"):
        g2.validate()
    g3 = pygraph(io_data_type=H)
    g3.reduction(g3.tensor([2, 3], name="X"), reduction_mode.ADD, name="r", out_dims=[2, 2])
    with pytest.raises(ValueError, match=r"reduction node 'r': tensor 'r::Y'"):
        g3.validate()
    g4 = pygraph(io_data_type=H)
    g4.gen_index(g4.tensor([2, 3], name="X"), 2, name="gi")
    with pytest.raises(ValueError, match="gen_index axis 2"):
        g4.validate()


def test_matmul_batch_broadcast():
    g = pygraph(io_data_type=H, compute_data_type=F)
    c = g.matmul(g.tensor([3, 1, 8, 16], name="A"), g.tensor([5, 16, 4], name="B")).set_output(True)
    g.validate_ir()  # IR inference only: cuDNN 9.28 has no matmul for this 4-D broadcast
    assert c.dim == [3, 5, 8, 4] and c.stride == [160, 32, 4, 1]
    g2 = pygraph(io_data_type=H)
    g2.matmul(g2.tensor([3, 8, 16]), g2.tensor([5, 16, 4], name="B5"), name="mm")
    with pytest.raises(ValueError, match="batch dims"):
        g2.validate()


def test_reduction_inference():
    g = pygraph(io_data_type=H, compute_data_type=F)
    x = g.tensor([2, 4, 6, 8], name="X")
    same = g.reduction(x, reduction_mode.MAX)
    y = g.reduction(x, reduction_mode.ADD, out_dims=[2, 1, 6, 8]).set_output(True)
    g.validate_ir()
    assert same.dim == [2, 4, 6, 8]  # unset output dims copy X (frontend behaviour)
    assert y.stride == [48, 1, 8, 1] and y.dim == [2, 1, 6, 8]  # NHWC order
    assert g.nodes[1].params == {"mode": reduction_mode.ADD, "is_deterministic": False, "group_offset": None,
                                 "compute_data_type": F}


def test_data_type_fill_and_fallbacks():
    g = pygraph(io_data_type=H)  # 1.32: intermediate and compute fall back to io
    assert (g.context.intermediate_data_type, g.context.compute_data_type) == (H, H)
    g2 = pygraph()
    x = g2.tensor([2], data_type=data_type.INT32, name="x")
    y = g2.neg(x).set_output(True)
    g2.validate()
    assert y.data_type is data_type.INT32 and g2.nodes[0].params["compute_data_type"] is F
    g3 = pygraph()
    g3.neg(g3.tensor([2], name="untyped")).set_output(True)
    with pytest.raises(ValueError, match="untyped.*data type"):
        g3.validate()


def test_user_choices_survive_reinference():
    g = pygraph(io_data_type=H)
    x = g.tensor([2, 3], name="x")
    y = g.exp(x).set_data_type(F).set_output(True)
    g.validate()
    x.set_dim([4, 3])
    assert not g.is_validated
    g.validate()
    assert y.dim == [4, 3] and x.stride == [3, 1] and y.data_type is F


def test_virtual_input_must_be_produced():
    g = pygraph(io_data_type=H)
    g.exp(g.tensor([2], is_virtual=True, name="ghost"))
    with pytest.raises(ValueError, match="ghost"):
        g.validate()


# ---- freeze ----------------------------------------------------------------------------------------------------------
def planned_graph():
    g, a, b = mm_graph()
    g.register_backend(ReferenceEngine())  # plans without a GPU
    c = g.matmul(a, b, name="mm").set_output(True)
    g.create_execution_plans([heur_mode.A])
    return g, a, c


def test_freeze_after_planning():
    g, a, c = planned_graph()
    with pytest.raises(RuntimeError, match=r"dim of tensor 'A'"):
        a.set_dim([1, 2, 3])
    with pytest.raises(RuntimeError, match="data_type"):
        c.data_type = F
    with pytest.raises(RuntimeError, match="uid"):
        c.set_uid(999)
    with pytest.raises(RuntimeError):
        g.exp(a)
    with pytest.raises(RuntimeError):
        g.tensor([1])
    with pytest.raises(RuntimeError):
        g.context.io_data_type = F
    with pytest.raises(TypeError):
        g.nodes[0].params["padding"] = 1.0
    with pytest.raises(RuntimeError):
        g.nodes[0].name = "x"
    with pytest.raises((TypeError, AttributeError)):
        c.dim.append(1)
    c.set_uid(c.uid)  # same value: no change, allowed
    a.set_name("renamed")  # names are labels
    assert g.find_tensor("renamed") is a
    with pytest.raises(RuntimeError, match="one-shot"):
        g.create_execution_plans()


# ---- inspection ------------------------------------------------------------------------------------------------------
def test_inspect_repr_inputs_outputs_key():
    g, a, b = mm_graph()
    c = g.matmul(a, b, name="mm")
    d = g.relu(c, name="act").set_output(True)
    doc = json.loads(repr(g))
    assert [n["name"] for n in doc["nodes"]] == ["mm", "act"] and doc["context"]["io_data_type"] == "data_type.HALF"
    assert g.get_inputs() == [a, b] and g.get_outputs() == [d]
    assert isinstance(g.key(), int)
    q = g.query_tensor_attributes_of_uid(a.uid)
    assert q is not a and (q.uid, q.dim, q.name) == (a.uid, a.dim, "A")


def test_key_includes_what_decides_the_plan_and_ignores_the_rest():
    def build(dims=(2, 8, 16), act="relu", dynamic=False, out_type=None):
        g = pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, is_dynamic_shape_enabled=dynamic)
        a = g.tensor(list(dims), name="A")
        b = g.tensor([dims[0], dims[2], 4], name="B")
        y = getattr(g, act)(g.matmul(a, b, name="mm"), name="act").set_output(True)
        if out_type is not None:
            y.set_data_type(out_type)
        return g

    base = build().key()
    assert build().key() == base  # a separately built, identical graph
    assert build(dims=(2, 8, 32)).key() != base  # dims
    assert build(act="tanh").key() != base  # the op
    assert build(out_type=F).key() != base  # a data type
    assert build(dynamic=True).key() != base  # dynamic-shape graphs are another family
    assert build(dims=(4, 8, 32), dynamic=True).key() == build(dynamic=True).key()  # dims ignored when dynamic
    g = build()
    g.validate()
    assert g.key() == base  # validation (inference) does not change what the user built
    g.nodes[0].outputs["C"].set_name("renamed")
    assert g.key() == base  # names are labels
    g.tensors["A"].set_uid(77)
    assert g.key() != base  # uids bind the variant pack


# ---- the classic facade over the planning session ------------------------------------------------------------------
def test_validate_runs_the_passes_and_lowers_without_a_device():
    g, a, b = mm_graph()
    g.matmul(a, b).set_output(True)
    assert g.session.phase is Phase.BUILT
    g.validate()
    s = g.session
    assert s.phase is Phase.VALIDATED and g.is_validated
    assert s.lowered.operation_graph.finalized and [n.op for n in s.program.nodes] == ["matmul"]
    g.validate()
    assert g.session is s  # nothing changed: the same session
    a.set_dim([2, 8, 16])  # any write invalidates, even an equal value
    assert not g.is_validated and g._session is None
    g.validate()
    assert g.session is not s


def test_calls_out_of_phase_name_the_phase_they_need():
    g, a, b = mm_graph()
    g.matmul(a, b).set_output(True)
    for call in (g.build_plans, g.check_support, g.get_workspace_size, lambda: g.get_plan_name_at_index(0),
                 lambda: g.deselect_engines(["eng0"]), lambda: g.execute_plan_at_index({}, None, 0)):
        with pytest.raises(PhaseError, match=r"call create_execution_plans\(\) before"):
            call()
    assert issubclass(PhaseError, RuntimeError)  # the classic exception type
    session = PlanningSession(g, SessionOptions())
    with pytest.raises(PhaseError, match=r"validate the IR first"):
        session.validate()
    g.validate_ir()
    with pytest.raises(PhaseError, match=r"build_plans\(\) needs the ENGINE_CONFIGS phase, and the graph is at "
                                         r"BUILT: call create_execution_plans\(\) first"):
        session.build_plans()
    with pytest.raises(PhaseError, match=r"needs the VALIDATED phase"):
        session.build_operation_graph()
    session.validate()
    with pytest.raises(PhaseError, match=r"get_engine_count\(\) needs the OPERATION_GRAPH phase"):
        session.get_engine_count()
    session.build_operation_graph()
    assert session.phase is Phase.OPERATION_GRAPH and session.get_engine_count() > 0
    with pytest.raises(PhaseError, match=r"execute\(\) needs the EXECUTABLE phase"):
        session.execute({}, None)


def test_staged_build_without_a_gpu_stops_at_heuristics():
    from tests.conftest import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    g, a, b = mm_graph()
    g.matmul(a, b).set_output(True)
    g.build()  # classic no-arg overload: validate + build_operation_graph only
    assert g.session.phase is Phase.OPERATION_GRAPH and not g.is_frozen
    assert g.get_engine_count() > 0 and g.get_execution_plan_count() == 0
    with pytest.raises(cudnnGraphNotSupportedError, match="no GPU/handle"):
        g.build([heur_mode.A])


def test_unknown_and_unimplemented_options_are_refused():
    with pytest.raises(TypeError, match="io_datatype"):
        pygraph(io_datatype=H)  # a typo must not silently leave every data type NOT_SET
    for option, value in (("cuda_graph_retention", 1), ("is_cuda_graph_replay_expected", True)):
        with pytest.raises(NotImplementedOptionError, match=rf"pygraph\({option}=...\) is not implemented yet"):
            pygraph(**{option: value})
    assert issubclass(NotImplementedOptionError, RuntimeError)
    with pytest.raises(ValueError, match="sm_count"):
        pygraph(sm_count=-1)
    g = pygraph(io_data_type=H)
    with pytest.raises(NotImplementedOptionError, match="alignment_value"):
        g.tensor([2], alignment_value=16)
    x = g.tensor([2], name="x")
    with pytest.raises(NotImplementedOptionError, match="group_offset"):
        g.reduction(x, reduction_mode.ADD, group_offset=x)
    with pytest.raises(NotImplementedOptionError, match="include_kernels=False"):
        g.serialize(include_kernels=False)


def test_serialize_and_deserialize_refuse_what_they_cannot_do():
    g, a, b = mm_graph()
    g.matmul(a, b).set_output(True)
    with pytest.raises(PhaseError, match=r"create_execution_plans\(\) before serialize"):
        g.serialize()
    with pytest.raises(RuntimeError, match="fresh pygraph"):
        g.deserialize(b"{}")
    fresh = pygraph(handle=1)  # a handle given: nothing touches a device before the blob is read
    for blob, why in ((b"not json", "not a serialized cudnn_py plan"), (b'{"format": "x"}', "format tag"),
                      (b'{"format": "cudnn_py.plan", "version": 99}', "format version 99"),
                      (b'{"format": "cudnn_py.plan", "version": 1, "cudnn_version": 80000}', r"cuDNN 8\.0\.0")):
        with pytest.raises(ValueError, match=why):
            fresh.deserialize(blob)
    with pytest.raises(TypeError, match="blob"):
        fresh.deserialize()


def test_every_classic_method_works_or_is_absent():
    """A method of the classic surface that exists must do something: none is a stub whose body only raises."""
    import ast
    import textwrap

    assert REFERENCE["pygraph"]
    present = [m for m in REFERENCE["pygraph"] if m != "__init__" and hasattr(pygraph, m)]
    for method in present:
        fn = getattr(pygraph, method)
        if not inspect.isfunction(fn) or fn.__name__ != method:  # generated builders: tested per op spec
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body
        body = [st for st in body if not (isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant))]
        assert not (len(body) == 1 and isinstance(body[0], ast.Raise)), f"pygraph.{method} only raises"


def test_python_engine_receives_resolved_keys_and_bound_data():
    from cudnn_py.engines import PYTHON_ENGINE_ID_BASE, BaseEngine, CompiledPlan

    seen = []

    class Recording(CompiledPlan):
        def execute(self, graph, buffers, ctx):
            seen.append((dict(buffers), ctx.workspace, ctx.handle))

    class Engine(BaseEngine):
        engine_id = PYTHON_ENGINE_ID_BASE + 7

        def check_support(self, graph):
            pass

        def build_plan(self, graph, config, ctx):
            return Recording()

    g, a, b = mm_graph()
    bias = np.zeros((2, 8, 4), np.float16)
    c = g.add(g.matmul(a, b), bias).set_output(True)
    g.register_backend(Engine())
    g.set_router(Router(include_backend=False))
    g.execute({a: "bufA", "B": "bufB", c.uid: "bufC", None: "skipped"}, "ws")
    bias_uid = g.nodes[1].inputs["IN_1"].uid
    assert seen[-1] == ({a.uid: "bufA", b.uid: "bufB", c.uid: "bufC", bias_uid: bias}, "ws", None)
    g.execute([1, 2], None, 77, tensor_uids=[a.uid, c.uid])
    assert seen[-1][0][a.uid] == 1 and seen[-1][0][c.uid] == 2 and seen[-1][2] == 77
    with pytest.raises(ValueError, match="no tensor named"):
        g.execute({"nope": 1})
    with pytest.raises(ValueError, match="uid 4242"):
        g.execute({4242: 1})
    with pytest.raises(NotImplementedOptionError, match="shape overrides"):
        g.execute({a: 1}, override_uids=[a.uid])
    assert g._session is None  # a graph routed to python engines never lowers to cuDNN


def test_not_supported_error_is_plain_exception():
    assert issubclass(cudnnGraphNotSupportedError, Exception)
    assert not issubclass(cudnnGraphNotSupportedError, (RuntimeError, ValueError))


def test_one_element_by_value_tensors_take_the_operand_rank():
    g = pygraph(io_data_type=F)
    x = g.tensor([2, 8, 16], name="x")
    s = g.tensor_like(np.array([1.75], np.float32))  # CPU -> by value, value given at execute
    g.mul(x, s).set_output(True)
    g.validate()
    assert (s.dim, s.stride, s.pass_by_value) == ([1], [1], None)
    lowered = g.session.program.tensors[s.uid]
    assert (lowered.dim, lowered.stride) == ([1, 1, 1], [1, 1, 1])


def test_the_ir_refuses_what_it_should():
    # no outputs: nothing would be computed
    g = pygraph(io_data_type=H)
    g.exp(g.tensor([2, 3], name="x"))
    with pytest.raises(ValueError, match="has no outputs"):
        g.validate()
    with pytest.raises(ValueError, match="has no operations"):
        pygraph().validate()
    # dims and strides are ints: no silent conversion of strings and floats
    for bad in ("234", [2.7, 3], [True, 2], 5):
        with pytest.raises(TypeError, match="sequence of ints"):
            pygraph().tensor(bad)
    assert pygraph().tensor([np.int64(2), 3]).get_dim() == [2, 3]
    # no in-place edits that bypass the graph's bookkeeping
    g = pygraph(io_data_type=H)
    x = g.tensor([2, 3], name="x")
    g.exp(x).set_output(True)
    g.validate()
    for edit in (lambda: x.dim.__setitem__(0, 7), lambda: x.dim.append(1), lambda: x.stride.reverse()):
        with pytest.raises(TypeError, match="in place"):
            edit()
    assert g.is_validated and list(x.dim) == [2, 3]
    x.set_dim([7, 3])
    assert not g.is_validated  # the supported way invalidates
    # an output whose elements would overwrite each other
    g = pygraph(io_data_type=H)
    x = g.tensor([4, 3], name="x")
    g.exp(x, name="e").set_output(True).set_stride([0, 0])
    with pytest.raises(ValueError, match=r"exp|pointwise node 'e': output tensor 'e::OUT_0' \(uid \d+\) has stride 0"):
        g.validate()
    # a cycle made by editing node inputs is named as one
    g = pygraph(io_data_type=H)
    x = g.tensor([2, 3], name="x")
    a = g.exp(x, name="a")
    b = g.neg(a, name="b").set_output(True)
    g.nodes[0].inputs = {"IN_0": b}
    with pytest.raises(ValueError, match=r"node 'a' reads tensor 'b::OUT_0'.*node 'b' writes after it.*cycle"):
        g.validate()
    g.nodes[0].inputs = {"IN_0": g.nodes[0].outputs["OUT_0"]}
    with pytest.raises(ValueError, match="writes itself.*cycle"):
        g.validate()



def test_a_dropped_graph_frees_its_descriptors_at_once():
    """No reference cycle runs through a graph (its observers, its session and the lowered program refer to it
    weakly): its last reference going destroys the lowered descriptors there and then, as the frontend's C++
    objects are, not whenever the cyclic collector next runs (with torch's heap: rarely). The collector is off
    here: a cycle would leave them alive. A session kept by the caller outlives its graph and keeps its own
    descriptors; what needs the graph then says it is gone."""
    import weakref

    from cudnn_py.backend import descriptor as descriptor_mod
    from tests.support.collector import collector_off

    def lowered():
        g, a, b = mm_graph()
        g.matmul(a, b).set_output(True)
        g.validate()
        return g

    with collector_off():
        before = set(descriptor_mod._live)
        g = lowered()
        made = set(descriptor_mod._live) - before
        assert len(made) >= 4, "validate() lowered nothing"  # A, B, C, the matmul, the operation graph
        alive = weakref.ref(g)
        del g
        assert alive() is None and not set(descriptor_mod._live) - before

        g = lowered()
        session, alive = g.session, weakref.ref(g)
        del g
        assert alive() is None  # the session refers to its graph weakly
        assert len(set(descriptor_mod._live) - before) >= 4  # and owns what it lowered
        with pytest.raises(RuntimeError, match=r"graph this planning session belongs to was garbage-collected"):
            _ = session.graph
        del session
        assert not set(descriptor_mod._live) - before


def test_override_shape_enabled_reaches_the_operation_graph_and_is_gated_on_9_21(monkeypatch):
    from cudnn_py.backend import versions
    from cudnn_py.errors import FeatureVersionError, cudnnGraphNotSupportedError

    def graph():
        g = pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, is_override_shape_enabled=True)
        a, b = g.tensor([1, 16, 32], name="a"), g.tensor([1, 32, 8], name="b")
        g.matmul(a, b).set_output(True)
        return g

    if versions.runtime_version() >= 92100:
        g = graph()
        g.validate()  # finalized deviceless with the attribute set
        og = g._session.lowered.operation_graph
        assert og.get("CUDNN_ATTR_OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED") in (True, 1)
    monkeypatch.setattr(versions, "runtime_version", lambda: 91900)  # as on the H200
    with pytest.raises(FeatureVersionError, match=r"is_override_shape_enabled=True.*9\.21\.0") as info:
        graph().validate()
    assert isinstance(info.value, cudnnGraphNotSupportedError)  # callers skip it as a configuration
