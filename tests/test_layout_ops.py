"""The layout ops and rope on the CPU: inference and checks (a permutation that is not one; concatenation infers
its output dims; reshape keeps the element count; slice's Python slices), deviceless lowering where the running
cuDNN has the op (and the refusals, naming the version, where it has not), the slice view's pointer in the
variant pack, and the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.engines.reference import REFERENCES, ReferenceEngine
from cudnn_py.errors import FeatureVersionError, NotImplementedOptionError
from cudnn_py.plans import execute as execute_mod
from cudnn_py.plans import execute_defaults

F, D = cudnn.data_type.FLOAT, cudnn.data_type.DOUBLE
RNG = np.random.default_rng(5)


def test_transpose_is_a_view_and_checks_the_permutation():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([2, 3, 4], name="x")
    y = g.transpose(x, [2, 0, 1], name="t").set_output(True)
    g.validate_ir()
    assert list(y.dim) == [4, 2, 3] and list(y.stride) == [1, 12, 4]
    g2 = cudnn.pygraph(io_data_type=F)
    g2.transpose(g2.tensor([2, 3, 4], name="x"), [0, 0, 1], name="t").set_output(True)
    with pytest.raises(ValueError, match=r"transpose node 't'.*permutation \[0, 0, 1\] is not a permutation"):
        g2.validate_ir()
    if versions.runtime_version() >= versions.since("CUDNN_BACKEND_OPERATION_TRANSPOSE_DESCRIPTOR"):
        g.validate()
        assert {d.kind.name for d in g.session.lowered.operations} == {"CUDNN_BACKEND_OPERATION_TRANSPOSE_DESCRIPTOR"}


def test_concatenate_infers_its_output_and_checks_its_inputs():
    g = cudnn.pygraph(io_data_type=F)
    a, b = g.tensor([2, 3, 4], name="a"), g.tensor([2, 5, 4], name="b")
    y = g.concatenate([a, b], 1, name="cat").set_output(True)
    g.validate_ir()
    assert list(y.dim) == [2, 8, 4] and g.nodes[0].inputs == {"X_0": a, "X_1": b}
    g.validate()  # cuDNN finalizes it (deviceless on 9.28)
    assert {d.kind.name for d in g.session.lowered.operations} == {"CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR"}
    g2 = cudnn.pygraph(io_data_type=F)
    g2.concatenate([g2.tensor([2, 3, 4], name="a"), g2.tensor([2, 5, 6], name="b")], 1, name="cat").set_output(True)
    with pytest.raises(ValueError, match=r"concatenate node 'cat': tensor 'b'.*differ from \[2, 3, 4\] outside axis 1"):
        g2.validate_ir()
    with pytest.raises(TypeError, match="list of tensors"):
        cudnn.pygraph().concatenate(g2.tensor([1]), 0)


def test_layout_references():
    g = cudnn.pygraph(io_data_type=D, backends=[ReferenceEngine()])
    a, b = g.tensor([2, 3, 4], name="a"), g.tensor([2, 2, 4], name="b")
    y = g.transpose(g.concatenate([a, b], 1), [2, 1, 0]).set_output(True)
    g.validate_ir()
    xa, xb = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 2, 4))
    out = np.zeros(tuple(y.dim))
    g.execute({a: xa, b: xb, y: out})
    np.testing.assert_array_equal(out, np.transpose(np.concatenate([xa, xb], 1), [2, 1, 0]))


# ---- reshape -------------------------------------------------------------------------------------------------------
def test_reshape_needs_output_dims_and_keeps_the_element_count():
    g = cudnn.pygraph(io_data_type=F)
    g.reshape(g.tensor([4, 6, 8], name="x"), name="r").set_output(True)
    with pytest.raises(ValueError, match=r"reshape node 'r': tensor 'r::Y'.*dims are not set.*out_dims="):
        g.validate_ir()
    g = cudnn.pygraph(io_data_type=F)
    g.reshape(g.tensor([4, 6, 8], name="x"), name="r", out_dims=[4, 50]).set_output(True)
    with pytest.raises(ValueError, match=r"reshape node 'r'.*dims \[4, 50\] hold 200 elements, the input 'x' dims "
                                         r"\[4, 6, 8\] hold 192"):
        g.validate_ir()
    g = cudnn.pygraph(io_data_type=F)
    y = g.reshape(g.tensor([4, 6, 8], name="x"), cudnn.reshape_mode.LOGICAL, name="r", out_dims=[4, 48])
    y.set_output(True).set_data_type(cudnn.data_type.HALF)
    with pytest.raises(ValueError, match="a LOGICAL reshape keeps the data type"):
        g.validate_ir()


def test_reshape_binds_both_classic_orders_and_lowers_its_mode():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([4, 6, 8], name="x")
    y = g.reshape(x, "legacy_name", cudnn.reshape_mode.LOGICAL)  # 1.23: reshape(input, name, reshape_mode)
    assert g.nodes[0].name == "legacy_name" and g.nodes[0].params["reshape_mode"] is cudnn.reshape_mode.LOGICAL
    y.set_dim([24, 8]).set_output(True)
    if not versions.available("CUDNN_ATTR_OPERATION_RESHAPE_MODE"):  # cuDNN < 9.22 (the GPU machine's 9.19)
        with pytest.raises(FeatureVersionError, match="needs cuDNN 9.22"):
            g.validate()
    else:
        g.validate()
        assert list(y.stride) == [8, 1]
        (op,) = g.session.lowered.operations
        assert op.kind.name == "CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR"
        assert op.attributes["CUDNN_ATTR_OPERATION_RESHAPE_MODE"] == "CUDNN_RESHAPE_LOGICAL"
    g2 = cudnn.pygraph(io_data_type=F)
    g2.reshape(g2.tensor([4, 6, 8], name="x"), cudnn.reshape_mode.VIEW_ONLY, name="n")
    assert g2.nodes[0].name == "n"
    with pytest.raises(TypeError, match="reshape_mode member"):
        g2.reshape(x, 3)


def test_reshape_before_9_22(monkeypatch):
    """No RESHAPE_MODE attribute before 9.22: VIEW_ONLY lowers without it, LOGICAL is refused naming the version."""
    monkeypatch.setattr(versions, "_runtime_version", 91900)
    g = cudnn.pygraph(io_data_type=F)
    g.reshape(g.tensor([4, 6, 8], name="x"), name="v", out_dims=[24, 8]).set_output(True)
    g.validate()
    assert "CUDNN_ATTR_OPERATION_RESHAPE_MODE" not in g.session.lowered.operations[0].attributes
    g = cudnn.pygraph(io_data_type=F)
    g.reshape(g.tensor([4, 6, 8], name="x"), cudnn.reshape_mode.LOGICAL, name="l", out_dims=[24, 8]).set_output(True)
    with pytest.raises(FeatureVersionError, match=r"reshape node 'l' with reshape_mode.LOGICAL.*needs cuDNN 9.22"):
        g.validate()


def test_reshape_references():
    x = RNG.standard_normal((4, 6, 8))
    g = cudnn.pygraph(io_data_type=D, backends=[ReferenceEngine()])
    X = g.tensor([4, 6, 8], name="x")
    Y = g.reshape(X, cudnn.reshape_mode.LOGICAL, out_dims=[8, 24]).set_output(True)
    out = np.full((8, 24), np.nan)
    g.execute({X: x, Y: out})
    np.testing.assert_array_equal(out, x.reshape(8, 24))
    # VIEW_ONLY: X's memory read through Y's strides - here a transposed view of the last two axes
    g = cudnn.pygraph(io_data_type=D, backends=[ReferenceEngine()])
    X = g.tensor([4, 6, 8], name="x")
    Y = g.reshape(X, out_dims=[4, 8, 6]).set_stride([48, 1, 8]).set_output(True)
    out = np.full((4, 8, 6), np.nan)
    g.execute({X: x, Y: out})
    np.testing.assert_array_equal(out, np.swapaxes(x, 1, 2))
    g = cudnn.pygraph(io_data_type=D, backends=[ReferenceEngine()])
    X = g.tensor([4, 6, 8], name="x")
    g.reshape(X, name="bad", out_dims=[4, 8, 6]).set_stride([60, 1, 8]).set_output(True)  # past X's end
    with pytest.raises(ValueError, match=r"reshape node 'bad'.*reach element 227 of the input's memory, which ends "
                                         r"at element 191"):
        g.validate_ir()
    g = cudnn.pygraph(io_data_type=D, backends=[ReferenceEngine()])
    X = g.tensor([4, 6, 8], stride=[0, 8, 1], name="x")  # broadcast: its memory holds each element 4 times
    view = g.reshape(X, name="overlap", out_dims=[4, 48]).set_stride([0, 1])
    g.relu(view).set_output(True).set_stride([48, 1])
    g.validate_ir()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"reads memory its input .* does not hold.*'overlap'"):
        ReferenceEngine().check_support(g)


# ---- slice ---------------------------------------------------------------------------------------------------------
def test_slice_infers_a_view_of_its_input():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([4, 6, 8], name="x")
    y = g.slice(x, [slice(1, 3), slice(None, None, 2), slice(-3, None)], name="s").set_output(True)
    g.validate_ir()
    assert list(y.dim) == [2, 3, 3] and list(y.stride) == [48, 16, 1]
    assert g.nodes[0].params["ranges"] == [(1, 3, 1), (0, 6, 2), (5, 8, 1)]
    y2 = g.slice(x, [slice(-100, 100, 3)], name="clamped")  # Python's clamping; later axes whole
    g.validate_ir()
    assert list(y2.dim) == [2, 6, 8] and list(y2.stride) == [144, 8, 1]


@pytest.mark.parametrize("slices, message", [
    ([slice(None, None, -1)], r"axis 0: step -1 is not supported.*positive step"),
    ([slice(None)] * 4, r"4 slices for the 3 axes"),
    ([slice(2, 2)], r"select no element"),
])
def test_slice_refuses_what_it_cannot_express(slices, message):
    g = cudnn.pygraph(io_data_type=F)
    g.slice(g.tensor([4, 6, 8], name="x"), slices, name="s")
    with pytest.raises(ValueError, match=r"slice node 's': tensor 'x'.*" + message):
        g.validate_ir()


def test_slice_argument_and_input_checks():
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([4, 6, 8], name="x")
    with pytest.raises(TypeError, match=r"slice\(\): argument 'slices'.*Python slice objects.*got 1"):
        g.slice(x, [1])
    with pytest.raises(TypeError, match="start, stop and step must be ints"):
        g.slice(x, [slice(0.5, 2)])
    h = g.relu(x, name="act")  # virtual: no memory for a view
    g.slice(h, [slice(0, 2)], name="s").set_output(True)
    with pytest.raises(ValueError, match=r"slice node 's': tensor 'act::OUT_0'.*is virtual"):
        g.validate_ir()


def test_slice_lowers_to_the_native_op_with_indices_for_the_legalized_rank():
    if not versions.available("CUDNN_BACKEND_OPERATION_SLICE_DESCRIPTOR"):
        pytest.skip("the SLICE op needs cuDNN 9.22")
    g = cudnn.pygraph(io_data_type=F)
    x = g.tensor([6, 8], name="x")
    g.slice(x, [slice(1, None, 2), slice(-3, None)], name="s")  # left virtual: the view is non-virtual anyway
    b = g.tensor([1, 3, 5], name="b")
    g.matmul(g.nodes[0].outputs["Y"], b, name="mm").set_output(True)
    g.validate()
    ops = g.session.lowered.operations
    assert [o.kind.name for o in ops] == ["CUDNN_BACKEND_OPERATION_SLICE_DESCRIPTOR",
                                          "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR"]
    attrs = ops[0].attributes  # rank 2 -> 3: a leading unit axis taken whole
    assert attrs["CUDNN_ATTR_OPERATION_SLICE_START_INDICES"] == [0, 1, 5]
    assert attrs["CUDNN_ATTR_OPERATION_SLICE_LIMIT_INDICES"] == [1, 6, 8]
    assert attrs["CUDNN_ATTR_OPERATION_SLICE_STRIDES"] == [1, 2, 1]


def _sliced_matmul(g):
    """Y = X[:, 2:6, 1:] (a view 2 * 9 + 1 = 19 elements = 76 bytes into X), then C = Y @ B."""
    x = g.tensor([2, 8, 9], name="x")
    y = g.slice(x, [slice(None), slice(2, 6), slice(1, None)], name="s")
    b = g.tensor([2, 8, 4], name="b")
    c = g.matmul(y, b, name="mm").set_output(True)
    return x, y, b, c


@pytest.mark.parametrize("native", [True, False], ids=["native_slice", "before_9_22"])
def test_slice_view_pointer_is_the_inputs_plus_the_offset(native, monkeypatch):
    from cudnn_py.backend import live
    from tests.test_execute_correctness import HANDLE, FakePlan, Recorder, new_address

    if native and not versions.available("CUDNN_BACKEND_OPERATION_SLICE_DESCRIPTOR"):
        pytest.skip("the SLICE op needs cuDNN 9.22")
    if not native:  # as on cuDNN 9.19: no SLICE op, the matmul reads the view
        real = versions.available
        monkeypatch.setattr(versions, "available",
                            lambda f: False if f == "CUDNN_BACKEND_OPERATION_SLICE_DESCRIPTOR" else real(f))
    monkeypatch.setattr(live, "_live", dict(live._live))
    monkeypatch.setattr(execute_mod, "_live_handles", live._live)
    monkeypatch.setattr(execute_defaults, "_live_handles", live._live)
    live.register(HANDLE, None, owned=False, origin="adopt_handle")
    g = cudnn.pygraph(io_data_type=F)
    x, y, b, c = _sliced_matmul(g)
    g.validate()
    kinds = [o.kind.name for o in g.session.lowered.operations]
    assert ("CUDNN_BACKEND_OPERATION_SLICE_DESCRIPTOR" in kinds) is native
    view = g.session.lowered.tensors.by_uid[y.uid]
    assert view.attributes["CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT"] == 4  # 76 bytes in: 4-byte aligned, not 16
    assert "CUDNN_ATTR_TENSOR_IS_VIRTUAL" not in view.attributes  # the user left it virtual; a view has memory
    ex = g.session.executor
    ex._backend_execute = Recorder()
    px, pb, pc = new_address(), new_address(), new_address()
    ex.execute(FakePlan(), {x: px, b: pb, c: pc}, None, HANDLE)
    (_, ptrs, _), = ex._backend_execute.calls
    by_uid = dict(zip(ex._uids, ptrs))
    assert by_uid[x.uid] == px and by_uid[y.uid] == px + 76 and by_uid[c.uid] == pc
    with pytest.raises(ValueError, match=r"'s::Y'.*is a view of tensor 'x'.*bind the source"):
        ex.execute(FakePlan(), {x: px, y: px, b: pb, c: pc}, None, HANDLE)
    with pytest.raises(ValueError, match=r"variant pack is missing tensor 'x'"):
        ex.execute(FakePlan(), {b: pb, c: pc}, None, HANDLE)
    fast = ex.fast(FakePlan())
    fast({x: px, b: pb, c: pc}, None, HANDLE)
    fast({x: px, b: pb, c: pc}, None, HANDLE)
    assert all(dict(zip(ex._uids, call[1]))[y.uid] == px + 76 for call in ex._backend_execute.calls)


def test_slice_references():
    g = cudnn.pygraph(io_data_type=D, backends=[ReferenceEngine()])
    X = g.tensor([5, 7], name="x")
    Y = g.slice(X, [slice(-4, None, 2), slice(1, 6, 3)]).set_output(True)
    g.validate_ir()
    x = RNG.standard_normal((5, 7))
    out = np.full(tuple(Y.dim), np.nan)
    g.execute({X: x, Y: out})
    np.testing.assert_array_equal(out, x[-4::2, 1:6:3])


def test_layout_references_after_the_rank_padding():
    """ReferenceEngine(program=True) runs the legalized program (2-D tensors padded to 3-D): the axis-indexed
    params still address the user's axes."""
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((2, 4))
    g = cudnn.pygraph(io_data_type=D, backends=[ReferenceEngine(program=True)])
    A, B = g.tensor([3, 4], name="a"), g.tensor([2, 4], name="b")
    cat = g.concatenate([A, B], 0)
    T = g.transpose(cat, [1, 0]).set_output(True)
    S = g.slice(A, [slice(1, None), slice(None, None, 2)]).set_output(True)
    g.validate_ir()
    outs = np.full((4, 5), np.nan), np.full(tuple(S.dim), np.nan)
    g.execute({A: a, B: b, T: outs[0], S: outs[1]})
    np.testing.assert_array_equal(outs[0], np.concatenate([a, b], 0).T)
    np.testing.assert_array_equal(outs[1], a[1:, ::2])


def test_transpose_and_concatenate_axes_follow_the_rank_padding():
    g = cudnn.pygraph(io_data_type=F)
    a, b = g.tensor([3, 4], name="a"), g.tensor([2, 4], name="b")
    g.concatenate([a, b], 0, name="cat").set_output(True)
    g.validate()
    assert g.session.lowered.operations[0].attributes["CUDNN_ATTR_OPERATION_CONCAT_AXIS"] == 1
    if versions.available("CUDNN_BACKEND_OPERATION_TRANSPOSE_DESCRIPTOR"):
        g = cudnn.pygraph(io_data_type=F)
        g.transpose(g.tensor([3, 4], name="a"), [1, 0], name="t").set_output(True)
        g.validate()
        assert g.session.lowered.operations[0].attributes["CUDNN_ATTR_OPERATION_TRANSPOSE_PERMUTATION"] == [0, 2, 1]


# ---- rope ----------------------------------------------------------------------------------------------------------
def _rope_graph(method="rope", **kwargs):
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, compute_data_type=F)
    x = g.tensor([2, 4, 16, 64], name="x")
    freqs = g.tensor([16, 1, 1, 64], name="freqs", data_type=F)
    y = getattr(g, method)(x, freqs, name="r", **kwargs).set_output(True)
    return g, y


@pytest.mark.parametrize("method, kind, needs", [
    ("rope", "CUDNN_BACKEND_OPERATION_ROPE_FWD_DESCRIPTOR", "9.24"),
    ("rope_backward", "CUDNN_BACKEND_OPERATION_ROPE_BWD_DESCRIPTOR", "9.25")])
def test_rope_lowers_where_the_backend_has_it(method, kind, needs, monkeypatch):
    g, y = _rope_graph(method, output_scale=0.5, rope_dim=32)
    g.validate_ir()
    assert list(y.dim) == [2, 4, 16, 64] and g.nodes[0].params["rope_dim"] == 32
    if versions.available(kind):
        g.validate()
        attrs = g.session.lowered.operations[0].attributes
        prefix = "CUDNN_ATTR_OPERATION_ROPE_" + ("FWD" if method == "rope" else "BWD")
        assert attrs[f"{prefix}_OUTPUT_SCALE"] == 0.5 and attrs[f"{prefix}_ROPE_DIM"] == 32
    monkeypatch.setattr(versions, "_runtime_version", 91900)  # the H200's cuDNN
    g, _ = _rope_graph(method)
    with pytest.raises(FeatureVersionError, match=rf"{method}\(\) \(node 'r'\).*needs cuDNN {needs}"):
        g.validate()


def test_rope_checks_its_shapes_and_the_reference_refuses():
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF)
    g.rope(g.tensor([2, 4, 16, 64], name="x"), g.tensor([16, 1, 1, 32], name="freqs"), name="r")
    with pytest.raises(ValueError, match=r"rope node 'r': tensor 'freqs'.*not \[S, 1, 1, D\] = \[16, 1, 1, 64\]"):
        g.validate_ir()
    g, _ = _rope_graph(rope_dim=7)
    with pytest.raises(ValueError, match=r"rope_dim 7 is not an even width in \(0, D = 64\]"):
        g.validate_ir()
    g = cudnn.pygraph(io_data_type=D, backends=[ReferenceEngine()])
    g.rope(g.tensor([1, 1, 2, 4], name="x"), g.tensor([2, 1, 1, 4], name="freqs"), name="r").set_output(True)
    g.validate_ir()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"rope is not computed by the reference engine.*"
                                                                r"Run rope graphs on cuDNN's engines.*\(node 'r'\)"):
        ReferenceEngine().check_support(g)
    run = REFERENCES["rope"][0]  # a plan built around the check refuses the same way, never NotImplementedError
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match=r"rope is not computed.*Run rope graphs on cuDNN's"):
        run(g.nodes[0], lambda t: None)


def test_view_outputs_take_their_inputs_type_and_a_lone_slice_before_9_22_is_refused(monkeypatch):
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=F)
    x = g.tensor([4, 6, 8], name="x")
    views = [g.slice(x, [slice(1, 3)]), g.reshape(x, out_dims=[24, 8]), g.transpose(x, [2, 1, 0])]
    views[0].set_output(True)
    g.validate_ir()
    assert [v.data_type for v in views] == [cudnn.data_type.HALF] * 3  # not the intermediate FLOAT
    monkeypatch.setattr(versions, "_runtime_version", 91900)  # the H200's cuDNN
    g = cudnn.pygraph(io_data_type=F)
    g.slice(g.tensor([4, 6], name="x"), [slice(1, 3)], name="s").set_output(True)
    with pytest.raises(FeatureVersionError, match=r"a graph of slices alone.*give it an op that reads it.*9.22"):
        g.validate()


def test_slice_graphs_are_not_serialized():
    """A serialized plan would lose the view's pointer offset: refused rather than replayed wrong."""
    g = cudnn.pygraph(io_data_type=F)
    _sliced_matmul(g)
    g.validate()
    with pytest.raises(NotImplementedOptionError, match="serialize.*slice.*pointer offset"):
        g.session.serialize({})


@pytest.mark.parametrize("pattern", ["concatenate", "reshape_view", "slice", "transpose"])
def test_the_gpu_patterns_finalize_deviceless(pattern):
    """What tests/test_gpu_layout.py runs on the device (a layout op feeding a matmul) passes cuDNN's own checks
    here first."""
    op = {"concatenate": "CONCAT", "reshape_view": "RESHAPE", "slice": "SLICE", "transpose": "TRANSPOSE"}[pattern]
    if not versions.available(f"CUDNN_BACKEND_OPERATION_{op}_DESCRIPTOR"):
        pytest.skip(f"{op} needs a newer cuDNN")
    g = cudnn.pygraph(io_data_type=cudnn.data_type.HALF, intermediate_data_type=F, compute_data_type=F)
    if pattern == "concatenate":
        a = g.concatenate([g.tensor([2, 16, 64], name="a"), g.tensor([2, 48, 64], name="b")], 1).set_data_type(
            cudnn.data_type.HALF)
    elif pattern == "reshape_view":
        a = g.reshape(g.tensor([2, 64, 64], name="a"), out_dims=[2, 64, 64]).set_stride([4096, 1, 64])
    elif pattern == "slice":
        a = g.slice(g.tensor([2, 128, 64], name="x"), [slice(None), slice(0, None, 2)])
    else:
        a = g.transpose(g.tensor([2, 64, 64], name="a"), [0, 2, 1])
    g.matmul(a, g.tensor([2, 64, 32], name="w")).set_output(True).set_data_type(cudnn.data_type.HALF)
    g.validate()
    assert [o.kind.name for o in g.session.lowered.operations] == [
        f"CUDNN_BACKEND_OPERATION_{op}_DESCRIPTOR", "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR"]
