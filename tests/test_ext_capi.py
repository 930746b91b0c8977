"""The C-API families outside the graph API (cudnn_subquadratic_ops.h, cudnn_gnn_ops.h), CPU only: the generated
prototypes and structs, the gating on the loaded library, every argument refusal before any call into cuDNN, and real
calls into libcudnn_ext on this GPU-less machine (in a child process: a signal is a failure)."""
from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import pytest

import cudnn_py as cudnn
from cudnn_py._generated.functions import FUNCTIONS, STRUCTS
from cudnn_py.backend import ext_checks, ext_loader, ext_subquadratic
from cudnn_py.errors import BadParamError, FeatureVersionError, InvalidTypeError, InvalidValueError

SUBQ = ("cudnnSubquadraticOpsVersionCheck", "cudnnCausalConv1dForward", "cudnnCausalConv1dBackward",
        "cudnnCausalConv1dNwhForward", "cudnnCausalConv1dNwhBackward", "cudnnB2BCausalConv1dForward",
        "cudnnB2BCausalConv1dBackward", "cudnnFFTCausalConv1dForward", "cudnnFFTCausalConv1dBackward",
        "cudnnLongFFTCausalConv1dGetBufferSizes", "cudnnLongFFTCausalConv1dForward",
        "cudnnLongFFTCausalConv1dBackward")
GNN = ("cudnnGnnAggSimpleForward", "cudnnGnnAggSimpleBackward", "cudnnGnnMhaGatForward", "cudnnGnnMhaGatBackward",
       "cudnnGnnMhaGatV2Forward", "cudnnGnnMhaGatV2Backward")


def test_generated_tables():
    assert ext_loader.family_functions("cudnn_subquadratic_ops.h") == SUBQ
    assert ext_loader.family_functions("cudnn_gnn_ops.h") == GNN
    assert FUNCTIONS["cudnnCausalConv1dForward"][3] == 92200 and FUNCTIONS["cudnnFFTCausalConv1dForward"][3] == 92600
    assert all(FUNCTIONS[n][3] is None for n in GNN)  # no @since in the header (overrides.json header_since)
    assert set(STRUCTS) == {"cudnnGnnCscGraph_t", "cudnnGnnMhaParams_t"}
    assert ctypes.sizeof(ext_loader.GnnCscGraph) == 72 and ext_loader.GnnCscGraph.idxType.offset == 56
    assert ctypes.sizeof(ext_loader.GnnMhaParams) == 16


def test_struct_header_override_checks(tmp_path):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "bindings"))
    import generate
    import header_parser

    hs = header_parser.parse_headers(generate.pinned_include_dir())
    for bad in ({"nope.h": {"since": None, "reason": "x"}}, {"cudnn_gnn_ops.h": {"since": None}},
                {"cudnn_subquadratic_ops.h": {"since": 92200, "reason": "x"}}):
        with pytest.raises(generate.GenerateError):
            generate.header_since(hs, {"header_since": bad})


def _refuses(exc, fn, *args, match=None):
    with pytest.raises(exc, match=match):
        fn(*args)


@pytest.fixture
def no_call(monkeypatch):
    """Any call reaching cuDNN fails the test: the refusals come first."""
    def boom(name):
        raise AssertionError(f"{name} was called")
    monkeypatch.setattr(ext_checks, "function", boom)


GOOD_FWD = dict(stream=0, x=256, weight=512, bias=768, y=1024, batch=2, dim=4, seq_len=8, kernel_size=4,
                data_type=0, activation=1)


@pytest.mark.parametrize("arg,value,exc", [
    ("x", 0, InvalidValueError), ("weight", None, InvalidValueError), ("bias", 0, InvalidValueError),
    ("y", -1, InvalidValueError), ("y", 2**64, InvalidValueError), ("x", 1.5, InvalidTypeError),
    ("x", True, InvalidTypeError), ("stream", -5, InvalidValueError), ("stream", "s", InvalidTypeError),
    ("batch", 0, InvalidValueError), ("dim", 2**31, InvalidValueError), ("seq_len", -1, InvalidValueError),
    ("kernel_size", 9, InvalidValueError), ("kernel_size", 1, InvalidValueError),
    ("data_type", 4, InvalidValueError), ("data_type", 99, InvalidValueError), ("data_type", "f", InvalidTypeError),
    ("activation", 2, InvalidValueError),
])
def test_causal_forward_refusals(no_call, arg, value, exc):
    kw = dict(GOOD_FWD, **{arg: value})
    with pytest.raises(exc, match=arg):
        cudnn.causal_conv1d_forward(**kw)
    with pytest.raises(exc, match=arg):
        cudnn.causal_conv1d_nwh_forward(**kw)


def test_backward_and_fft_refusals(no_call):
    bwd = dict(stream=0, x=16, weight=16, bias=16, dy=16, dx=16, dweight=16, dbias=0, batch=1, dim=1, seq_len=1,
               kernel_size=4, data_type=2, dw_data_type=0, activation=0)
    _refuses(InvalidValueError, lambda: cudnn.causal_conv1d_backward(**bwd), match="dbias")
    _refuses(InvalidValueError, lambda: cudnn.causal_conv1d_backward(**dict(bwd, dbias=16, dw_data_type=2)),
             match="dw_data_type")
    _refuses(InvalidValueError, lambda: cudnn.causal_conv1d_nwh_backward(**dict(bwd, dbias=16, data_type=1)),
             match="dw_data_type must be CUDNN_DATA_DOUBLE")
    fft = dict(stream=0, x=32, weight=32, y=32, batch=1, dim=1, seq_len=256, kernel_size=128, data_type=0)
    _refuses(InvalidValueError, lambda: cudnn.fft_causal_conv1d_forward(**dict(fft, x=40)), match="aligned")
    _refuses(InvalidValueError, lambda: cudnn.fft_causal_conv1d_forward(**dict(fft, kernel_size=192)),
             match="power of two")
    _refuses(InvalidValueError, lambda: cudnn.fft_causal_conv1d_forward(**dict(fft, kernel_size=64)),
             match="kernel_size")
    _refuses(InvalidValueError, lambda: cudnn.fft_causal_conv1d_forward(**dict(fft, seq_len=200)), match="multiple")
    _refuses(InvalidValueError, lambda: cudnn.long_fft_causal_conv1d_get_buffer_sizes(1, 1, 8192, 4096, 0),
             match="equal")
    b2b = dict(stream=0, x=16, weights_proj=16, weights_mixer=16, skip_bias=16, y=16, y_gated=0, batch=1, dim=1,
               seq_len=1, kernel_size_proj=3, kernel_size_mixer=3, data_type=0)
    _refuses(InvalidValueError, lambda: cudnn.b2b_causal_conv1d_forward(**b2b), match="y_gated")


AGG = dict(stream=0, csc_offsets=64, csc_indices=64, map_csc_to_coo=0, n_src_nodes=4, n_dst_nodes=3, n_indices=5,
           idx_type=4, node_features=64, edge_features=0, concat_features=0, output=64, out_positions=0,
           node_feat_dim=8, edge_feat_dim=0, concat_feat_dim=0, data_type=0, agg_op=0)


@pytest.mark.parametrize("change,match", [
    ({"csc_offsets": 0}, "csc_offsets"), ({"idx_type": 0}, "idx_type"), ({"n_src_nodes": -1}, "n_src_nodes"),
    ({"node_features": 0}, "node_features"), ({"edge_features": 64}, "edge_features"),
    ({"concat_feat_dim": 2}, "concat_features"), ({"node_feat_dim": 0}, "at least one"),
    ({"agg_op": 2}, "out_positions"), ({"out_positions": 64}, "out_positions"), ({"agg_op": 7}, "agg_op"),
    ({"data_type": 1}, "data_type"), ({"output": 0}, "output"),
])
def test_gnn_agg_refusals(no_call, change, match):
    with pytest.raises((InvalidValueError, InvalidTypeError), match=match):
        cudnn.gnn_agg_simple_forward(**dict(AGG, **change))


def test_gnn_enums_match_headers():
    from cudnn_py._generated.enums import ENUMS
    assert [(m.name, int(m)) for m in cudnn.gnn_agg_op] == [(n[len("CUDNN_GNN_AGG_"):], v)
                                                              for n, v, _s, _d in ENUMS["cudnnGnnAggOp_t"]]
    assert [(m.name, int(m)) for m in cudnn.gnn_activation_op] == [
        (n[len("CUDNN_GNN_ACT_"):], v) for n, v, _s, _d in ENUMS["cudnnGnnActivationOp_t"]]


@pytest.fixture
def fresh_ext(monkeypatch):
    ext_loader._reset_for_tests()
    yield
    ext_loader._reset_for_tests()


def test_gate_on_loaded_version(old_cudnn):
    with pytest.raises(FeatureVersionError, match=r"cudnnCausalConv1dForward .* needs cuDNN 9\.22\.0 .* 9\.19\.0"):
        ext_loader.function("cudnnCausalConv1dForward")
    with pytest.raises(FeatureVersionError, match=r"cudnnLongFFTCausalConv1dGetBufferSizes .* needs cuDNN 9\.26\.0"):
        cudnn.long_fft_causal_conv1d_get_buffer_sizes(1, 1, 4096, 4096, 0)


def test_gate_without_symbol_or_library(monkeypatch, recent_cudnn):  # (past the version gate, any cuDNN)
    monkeypatch.setattr(ext_loader, "_ext", ext_loader.ExtLibrary("/x/libcudnn_ext.so.9", ctypes.CDLL(None), "",
                                                                  {"cudnnGnnAggSimpleForward"}))
    with pytest.raises(FeatureVersionError, match="cudnnGnnAggSimpleForward.*not exported by /x/libcudnn_ext.so.9.*"
                                                  "gives no @since"):
        ext_loader.function("cudnnGnnAggSimpleForward")
    monkeypatch.setattr(ext_loader, "_ext", ext_loader.ExtLibrary("", None, "no libcudnn_ext.so.9 beside /y"))
    with pytest.raises(FeatureVersionError, match="no libcudnn_ext.so.9 beside /y"):
        ext_subquadratic.subquadratic_ops_version_check()
    assert not ext_loader.available("cudnnCausalConv1dForward")
    assert "libcudnn_ext" in ext_loader.why_unavailable("cudnnCausalConv1dForward")
    with pytest.raises(KeyError):
        ext_loader.function("cudnnBackendExecute")


def test_ext_library_vetted_refusal(monkeypatch, fresh_ext, tmp_path):
    """A libcudnn_ext.so.9 beside the core library whose trial load died is refused, not loaded. (The core and the
    ext file are stand-ins in tmp_path: the test holds wherever the loaded cuDNN has an ext library or none, as
    cuDNN 9.19 does.)"""
    real = ext_loader.load_library()
    core = tmp_path / "libcudnn.so.9"
    core.write_bytes(b"")
    (tmp_path / ext_loader.EXT_SONAME).write_bytes(b"")
    monkeypatch.setattr(ext_loader, "load_library", lambda: type(real)(str(core), real.found_via, real.cdll,
                                                                      real.version))
    monkeypatch.setattr(ext_loader, "mapped_libraries", lambda prefix: [])
    vetted = []
    monkeypatch.setattr(ext_loader, "_vet_ext",
                        lambda core, path: vetted.append(path) or "a trial load died of SIGSEGV in dlopen")
    lib = ext_loader.ext_library()
    assert lib.cdll is None and "SIGSEGV" in lib.why
    assert vetted == [str(tmp_path / ext_loader.EXT_SONAME)]


_CHILD = textwrap.dedent("""
    import ctypes, cudnn_py as cudnn
    from cudnn_py.backend import ext_loader
    from cudnn_py.errors import CudnnError
    ext_loader.function("cudnnSubquadraticOpsVersionCheck")
    print("ext", ext_loader.ext_library().path)
    print("sizes", cudnn.long_fft_causal_conv1d_get_buffer_sizes(2, 4, 4096, 4096, 0))
    for name, args in (("cudnnCausalConv1dForward", (None,) * 5 + (1, 1, 8, 4, 0, 0)),
                       ("cudnnGnnAggSimpleForward", (None,) * 7 + (8, 0, 0, 0, 0))):
        status = ext_loader.function(name)(*args)  # NULL pointers straight into cuDNN: its status, no crash
        try:
            from cudnn_py.backend.ext_checks import call
            from cudnn_py.backend import ext_checks
            ext_checks.function = lambda n, s=status: (lambda *a: s)
            call(name)
        except CudnnError as e:
            print("status", name, type(e).__name__, e.status)
        else:
            print("status", name, "ok", status)
""")


def test_real_calls_in_a_child_process():
    """The families' real entry points called with NULL operands (their status, no crash). Skipped, saying why,
    where the loaded cuDNN has no libcudnn_ext.so.9 or lacks the functions (cuDNN 9.19 on the GPU machine)."""
    for name in ("cudnnSubquadraticOpsVersionCheck", "cudnnCausalConv1dForward", "cudnnGnnAggSimpleForward",
                 "cudnnLongFFTCausalConv1dGetBufferSizes"):
        if not ext_loader.available(name):
            pytest.skip(f"{name}: {ext_loader.why_unavailable(name)}")
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"child died ({proc.returncode}): {proc.stderr[-2000:]}"
    out = proc.stdout
    assert "libcudnn_ext.so.9" in out and "sizes (" in out
    for name in ("cudnnCausalConv1dForward", "cudnnGnnAggSimpleForward"):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"status {name}"))
        assert "ok" not in line.split()[2], line  # cuDNN refused NULL operands with a status, as our exception


def test_bad_param_class_is_ours():
    assert issubclass(BadParamError, Exception)
