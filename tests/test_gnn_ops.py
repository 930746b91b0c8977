"""``cudnn.gnn`` on the CPU: the official signatures and torch schemas, the lazy export, ``CscGraph``, every operand
refusal of the operators (the official's message and exception class, in its order: driven with fake CUDA tensors,
which need no GPU), the dispatcher's refusal of CPU operands (as for the official's CUDA-only operators), and the
GNN C API's checked wrappers and version gate on the real loaded cuDNN."""
from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_py.backend import ext_gnn, ext_loader
from cudnn_py.errors import CApiUnavailableError, FeatureVersionError, InvalidTypeError, InvalidValueError

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import cudnn_py as cudnn  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SURFACE = json.loads((ROOT / "tests" / "data" / "ops_surface_1_32.json").read_text())
OFFICIAL = os.environ.get("CUDNN_OFFICIAL_DIR", "/tmp/official/cudnn")
KIND = {inspect.Parameter.POSITIONAL_OR_KEYWORD: "POSITIONAL_OR_KEYWORD",
        inspect.Parameter.KEYWORD_ONLY: "KEYWORD_ONLY", inspect.Parameter.POSITIONAL_ONLY: "POSITIONAL_ONLY"}


def signature(fn) -> list:
    out = []
    for p in inspect.signature(fn).parameters.values():
        default = None if p.default is inspect.Parameter.empty else repr(p.default)
        out.append([p.name, KIND[p.kind], default])
    return out


def test_the_record_is_the_official_sources_where_they_are_at_hand():
    if not Path(OFFICIAL, "gnn", "mha_gat.py").is_file():
        pytest.skip(f"no official 1.32 sources at {OFFICIAL} (CUDNN_OFFICIAL_DIR): the vendored record is checked")
    from tests.support.ops_surface import record

    assert record(Path(OFFICIAL)) == SURFACE


@pytest.mark.parametrize("name", ["agg_simple", "mha_gat", "mha_gat_v2"])
def test_gnn_functions_have_the_official_signature(name):
    assert signature(getattr(cudnn.gnn, name)) == SURFACE["gnn"][name]


def test_csc_graph_fields_and_package_names():
    import dataclasses

    fields = [[f.name, None if f.default is dataclasses.MISSING else repr(f.default)]
              for f in dataclasses.fields(cudnn.gnn.CscGraph)]
    assert fields == SURFACE["CscGraph"]
    assert cudnn.gnn.__all__ == SURFACE["gnn_all"]
    assert dataclasses.is_dataclass(cudnn.gnn.CscGraph) and cudnn.gnn.CscGraph.__dataclass_params__.frozen


def test_torch_schemas_are_the_officials_in_our_namespace():
    assert cudnn.gnn.__name__ == "cudnn_py.gnn"  # (a lazy attribute: its first read defines the torch ops)
    for schema in SURFACE["gnn_schemas"]:
        name = schema.split("(", 1)[0]
        ours = str(getattr(torch.ops.cudnn_py, name).default._schema)
        assert ours == f"cudnn_py::{schema}", (ours, schema)


def test_import_cudnn_py_imports_no_torch_and_gnn_is_lazy():
    code = ("import sys, cudnn_py; assert 'torch' not in sys.modules; assert 'gnn' in dir(cudnn_py) or True; "
            "g = cudnn_py.gnn; assert 'torch' in sys.modules; print(g.__name__, sorted(g.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "cudnn_py.gnn ['CscGraph', 'agg_simple', 'mha_gat', 'mha_gat_v2']" in out.stdout


def test_csc_graph_refusals():
    off, idx = torch.tensor([0, 1]), torch.tensor([0])
    with pytest.raises(InvalidTypeError, match="num_src_nodes must be an int"):
        cudnn.gnn.CscGraph(off, idx, 2.0)
    with pytest.raises(InvalidValueError, match="num_src_nodes must be positive"):
        cudnn.gnn.CscGraph(off, idx, 0)
    with pytest.raises(InvalidValueError, match="provided together"):
        cudnn.gnn.CscGraph(off, idx, 2, csc_rev_offsets=off)
    g = cudnn.gnn.CscGraph(off, idx, 2)
    assert (g.num_dst_nodes, g.num_edges, g.num_indices, g.has_reverse_csc) == (1, 1, 1, False)
    with pytest.raises(InvalidValueError, match="must be CUDA tensors"):  # validated before it builds anything
        g.with_reverse_csc()


def test_cpu_operands_are_refused_by_the_dispatcher_as_the_officials_are():
    g = cudnn.gnn.CscGraph(torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0], dtype=torch.int32), 2)
    with pytest.raises(NotImplementedError, match="CPU"):
        cudnn.gnn.agg_simple(g, node_features=torch.ones(2, 3))
    with pytest.raises(NotImplementedError, match="CPU"):
        cudnn.gnn.mha_gat(g, torch.ones(2, 4), torch.ones(8))
    with pytest.raises(NotImplementedError, match="CPU"):
        cudnn.gnn.mha_gat_v2(g, torch.ones(2, 4), torch.ones(4))


# ---- the operators' checks, on fake CUDA tensors ---------------------------------------------------------------------
def _graph(idx_dtype=None, **kw):
    dt = idx_dtype or torch.int32
    off = torch.tensor([0, 2, 3, 5], dtype=dt).to("cuda")
    ind = torch.tensor([0, 1, 2, 0, 3], dtype=dt).to("cuda")
    return cudnn.gnn.CscGraph(off, ind, 4, **kw)


AGG_CASES = [
    (lambda g: dict(), InvalidValueError, "at least one of node_features or edge_features"),
    (lambda g: dict(node_features=torch.empty(4, 8, device="cuda"), aggr="prod"), InvalidValueError,
     "Unsupported aggregation 'prod'. Supported: sum, mean, max, min."),
    (lambda g: dict(node_features=torch.empty(4, 8, device="cuda", dtype=torch.float64)), InvalidTypeError,
     "float32, float16, or bfloat16"),
    (lambda g: dict(node_features=torch.empty(4, 8, 1, device="cuda")), InvalidValueError, "must be rank 2"),
    (lambda g: dict(node_features=torch.empty(3, 8, device="cuda")), InvalidValueError, "node_features must have 4 rows"),
    (lambda g: dict(node_features=torch.empty(4, 8, device="cuda"), edge_features=torch.empty(4, 2, device="cuda")),
     InvalidValueError, "edge_features must have 5 rows"),
    (lambda g: dict(node_features=torch.empty(4, 8, device="cuda"), concat_features=torch.empty(3, 2, device="cuda",
                                                                                                 dtype=torch.half)),
     InvalidTypeError, "all feature tensors must have dtype torch.float32"),
    (lambda g: dict(node_features=torch.empty(4, 0, device="cuda")), InvalidValueError, "cannot both have zero"),
]


@pytest.mark.parametrize("case,exc,match", AGG_CASES)
def test_agg_simple_refusals(case, exc, match):
    with FakeTensorMode():
        g = _graph()
        with pytest.raises(exc, match=match.replace("(", r"\(").replace(".", r"\.")):
            cudnn.gnn.agg_simple(g, **case(g))


def test_agg_simple_graph_refusals_and_shapes():
    with FakeTensorMode():
        x = torch.empty(4, 8, device="cuda")
        g = _graph()
        assert cudnn.gnn.agg_simple(g, node_features=x, concat_features=torch.empty(3, 2, device="cuda")).shape == \
            (3, 10)
        bad = cudnn.gnn.CscGraph(g.offsets.long(), g.indices, 4)
        with pytest.raises(InvalidTypeError, match="indices dtype torch.int32 must match offsets dtype torch.int64"):
            cudnn.gnn.agg_simple(bad, node_features=x)
        empty = cudnn.gnn.CscGraph(torch.zeros(3, dtype=torch.int32, device="cuda"),
                                   torch.empty(0, dtype=torch.int32, device="cuda"), 4)
        with pytest.raises(InvalidValueError, match="nonempty destination set with zero edges"):
            cudnn.gnn.agg_simple(empty, node_features=x)
        with pytest.raises(InvalidValueError, match=r"map_csc_to_coo must have shape \(5,\)"):
            cudnn.gnn.agg_simple(cudnn.gnn.CscGraph(g.offsets, g.indices, 4, map_csc_to_coo=g.indices[:4]),
                                 node_features=x)
        with pytest.raises(InvalidValueError, match="must contain at least one element"):
            cudnn.gnn.agg_simple(cudnn.gnn.CscGraph(g.offsets[:0], g.indices, 4), node_features=x)


def _mha_call(module: str, **change):
    """The operator's CUDA implementation (the checks it runs), with a valid GAT / GATv2 call changed by
    ``change``; fake CUDA tensors throughout."""
    v2 = module.endswith("v2")
    g = _graph()
    dim = 8
    args = dict(offsets=g.offsets, indices=g.indices, map_csc_to_coo=None,
                src_features=torch.empty(4, dim, device="cuda"), dst_features=torch.empty(3, dim, device="cuda"),
                edge_features=None, attn_weights=torch.empty(dim if v2 else 2 * dim, device="cuda"),
                dropout_mask=None, num_src_nodes=4, num_heads=2, concat_heads=True, activation="leaky_relu",
                activation_alpha=0.2, return_attention_weights=False, csc_rev_offsets=None, map_rev_to_coo=None,
                deterministic=False)
    args.update(dict(grad_dtype=torch.float32) if v2 else dict(feature_grad_dtype=torch.float32,
                                                               weight_grad_dtype=torch.float32))
    args.update(change)
    return importlib.import_module(f"cudnn_py.gnn.{module}")._forward(**args)


MHA_CASES = [
    (dict(num_heads=True), InvalidTypeError, "num_heads must be an int, got bool"),
    (dict(num_heads=0), InvalidValueError, "num_heads must be positive"),
    (dict(concat_heads=1), InvalidTypeError, "concat_heads must be a bool"),
    (dict(activation="gelu"), InvalidValueError, "Unsupported activation 'gelu'"),
    (dict(activation_alpha="0.2"), InvalidTypeError, "activation_alpha must be a real number"),
    (dict(num_heads=3), InvalidValueError, "node feature dimension 8 must be positive and divisible by num_heads"),
    (dict(dst_features=lambda: torch.empty(2, 8)), InvalidValueError, "dst_features must have shape"),
    (dict(num_src_nodes=5), InvalidValueError, "src_features must have shape"),
    (dict(return_attention_weights=1), InvalidTypeError, "return_attention_weights must be a bool"),
    (dict(deterministic=True), InvalidValueError, "deterministic backward requires graph.csc_rev_offsets"),
    (dict(dropout_mask=lambda: torch.empty(2, 4)), InvalidValueError, "dropout_mask must have shape"),
    (dict(dropout_mask=lambda: torch.empty(2, 5, dtype=torch.half)), InvalidTypeError, "dropout_mask must have dtype float32"),
    (dict(attn_weights=lambda: torch.empty(3)), InvalidValueError, "attn_weights must have shape"),
    (dict(edge_features=lambda: torch.empty(5, 0)), InvalidValueError, "edge_features cannot have zero feature dimension"),
]


@pytest.mark.parametrize("module", ["mha_gat", "mha_gat_v2"])
@pytest.mark.parametrize("change,exc,match", MHA_CASES)
def test_mha_refusals(module, change, exc, match):
    with FakeTensorMode():
        change = {k: (v().to("cuda") if callable(v) else v) for k, v in change.items()}
        with pytest.raises(exc, match=match.replace("(", r"\(")):
            _mha_call(module, **change)


def test_mha_variant_specific_refusals():
    with FakeTensorMode():
        with pytest.raises(InvalidValueError, match="edge feature dimension 3 must be divisible by num_heads"):
            _mha_call("mha_gat", edge_features=torch.empty(5, 3, device="cuda"),
                      attn_weights=torch.empty(19, device="cuda"))
        with pytest.raises(InvalidValueError, match="GATv2 edge feature dimension must equal node feature dimension"):
            _mha_call("mha_gat_v2", edge_features=torch.empty(5, 4, device="cuda"))
        with pytest.raises(InvalidValueError, match="feature_grad_dtype=torch.float32 requires weight_grad_dtype"):
            _mha_call("mha_gat", feature_grad_dtype=torch.float32, weight_grad_dtype=torch.float16,
                      src_features=torch.empty(4, 8, device="cuda", dtype=torch.half),
                      dst_features=torch.empty(3, 8, device="cuda", dtype=torch.half),
                      attn_weights=torch.empty(16, device="cuda", dtype=torch.half))
        with pytest.raises(InvalidValueError, match="grad_dtype must be torch.float16 or torch.float32"):
            _mha_call("mha_gat_v2", grad_dtype=torch.bfloat16,
                      src_features=torch.empty(4, 8, device="cuda", dtype=torch.half),
                      dst_features=torch.empty(3, 8, device="cuda", dtype=torch.half),
                      attn_weights=torch.empty(8, device="cuda", dtype=torch.half))


def test_public_mha_argument_refusals():
    with FakeTensorMode():
        g = _graph()
        x = torch.empty(4, 8, device="cuda")
        with pytest.raises(InvalidTypeError, match=r"features must be a Tensor or a \(src_features, dst_features\)"):
            cudnn.gnn.mha_gat(g, [x, x], torch.empty(16, device="cuda"))
        with pytest.raises(InvalidValueError, match="high_precision_dgrad=True requires high_precision_wgrad=True"):
            cudnn.gnn.mha_gat(g, x, torch.empty(16, device="cuda"), high_precision_dgrad=True)
        with pytest.raises(InvalidTypeError, match="high_precision_grad must be a bool"):
            cudnn.gnn.mha_gat_v2(g, x, torch.empty(8, device="cuda"), high_precision_grad=1)
        out, att = cudnn.gnn.mha_gat(g, x, torch.empty(16, device="cuda"), num_heads=2, concat_heads=False,
                                     return_attention_weights=True)  # the fake: shapes only
        assert out.shape == (3, 4) and att.shape == (2, 5) and att.dtype == torch.float32
        assert cudnn.gnn.mha_gat_v2(g, (x, x[:3]), torch.empty(8, device="cuda")).shape == (3, 8)


# ---- the C API's checked wrappers and the gate -------------------------------------------------------------------
MHA_FWD = dict(stream=0, csc_offsets=256, csc_indices=256, map_csc_to_coo=0, n_src_nodes=4, n_dst_nodes=3,
               n_indices=5, idx_type=4, src_features=256, dst_features=256, edge_features=0, attn_weights=256,
               dropout_mask=0, output=256, sm_scores=256, dim_node=8, dim_edge=0, activation=6, activation_alpha=0.2,
               num_heads=2, concat_heads=True, data_type=0)
MHA_BWD = dict({k: v for k, v in MHA_FWD.items() if k != "output"}, grad_output=256, grad_attention=0,
               grad_src_features=256, grad_dst_features=256, grad_edge_features=0, grad_weights=256,
               grad_sm_scores=256, csc_rev_offsets=0, map_rev_to_coo=0, grad_workspace_features=0,
               grad_workspace_weights=0, grad_data_type=0, grad_weight_type=0)


@pytest.fixture
def no_call(monkeypatch):
    from cudnn_py.backend import ext_checks

    def boom(name):
        raise AssertionError(f"{name} was called")
    monkeypatch.setattr(ext_checks, "function", boom)


@pytest.mark.parametrize("fn,change,exc,match", [
    ("gnn_mha_gat_forward", {"src_features": 0}, InvalidValueError, "src_features must not be NULL"),
    ("gnn_mha_gat_forward", {"dim_node": 9}, InvalidValueError, "multiple of num_heads"),
    ("gnn_mha_gat_forward", {"dim_edge": 2}, InvalidValueError, "edge_features must be NULL exactly when"),
    ("gnn_mha_gat_forward", {"activation": 9}, InvalidValueError, "activation"),
    ("gnn_mha_gat_forward", {"activation_alpha": float("nan")}, InvalidValueError, "finite"),
    ("gnn_mha_gat_forward", {"activation_alpha": "x"}, InvalidTypeError, "activation_alpha"),
    ("gnn_mha_gat_forward", {"n_indices": 0}, InvalidValueError, "destination nodes and edges"),
    ("gnn_mha_gat_forward", {"data_type": 1}, InvalidValueError, "data_type"),
    ("gnn_mha_gat_backward", {"grad_workspace_features": 256}, InvalidValueError, "both be given"),
    ("gnn_mha_gat_backward", {"grad_workspace_features": 256, "grad_workspace_weights": 256}, InvalidValueError,
     "csc_rev_offsets"),
    ("gnn_mha_gat_backward", {"grad_data_type": 2}, InvalidValueError, "grad_data_type must be data_type"),
    ("gnn_mha_gat_backward", {"grad_sm_scores": 0}, InvalidValueError, "grad_sm_scores must not be NULL"),
])
def test_mha_c_api_refusals(no_call, fn, change, exc, match):
    base = MHA_FWD if fn.endswith("forward") else MHA_BWD
    with pytest.raises(exc, match=match):
        getattr(cudnn, fn)(**dict(base, **change))


def test_mha_v2_c_api_refusals(no_call):
    fwd = dict({k: v for k, v in MHA_FWD.items() if k != "dim_edge"}, act_scores=256)
    with pytest.raises(InvalidValueError, match="act_scores must not be NULL"):
        cudnn.gnn_mha_gat_v2_forward(**dict(fwd, act_scores=0))
    bwd = dict({k: v for k, v in MHA_BWD.items() if k not in ("dim_edge", "grad_data_type", "grad_weight_type")},
               act_scores=256, grad_type=0)
    with pytest.raises(InvalidValueError, match="grad_edge_features must be NULL exactly when edge_features"):
        cudnn.gnn_mha_gat_v2_backward(**dict(bwd, edge_features=256))
    with pytest.raises(InvalidValueError, match="grad_type"):
        cudnn.gnn_mha_gat_v2_backward(**dict(bwd, grad_type=9))




def test_gnn_c_api_gate_on_the_loaded_version(monkeypatch):
    ext_loader._reset_for_tests()
    lib = ext_loader.ext_library()
    if lib.cdll is None:
        pytest.skip(f"no libcudnn_ext here: {lib.why}")
    monkeypatch.setattr(ext_loader, "_ext", ext_loader.ExtLibrary(lib.path, lib.cdll, "", {"cudnnGnnMhaGatForward"}))
    with pytest.raises(CApiUnavailableError, match="cudnnGnnMhaGatForward .*not exported by") as info:
        ext_gnn.gnn_mha_gat_forward(**MHA_FWD)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, FeatureVersionError)
    ext_loader._reset_for_tests()


def test_gnn_c_api_on_a_cudnn_lacking_libcudnn_ext(old_cudnn, monkeypatch):
    monkeypatch.setattr(ext_loader, "_ext", ext_loader.ExtLibrary("", None, "no libcudnn_ext.so.9 beside the loaded "
                                                                            "libcudnn.so.9"))
    for fn, kw in (("gnn_mha_gat_forward", MHA_FWD), ("gnn_mha_gat_backward", MHA_BWD)):
        with pytest.raises(RuntimeError, match=r"needs cuDNN 9\.28\.0 or newer; the loaded cuDNN is 9\.19\.0"):
            getattr(ext_gnn, fn)(**kw)


@pytest.mark.parametrize("v2", [False, True])
@pytest.mark.parametrize("with_edge", [False, True])
@pytest.mark.parametrize("attention", [False, True])
def test_mha_autograd_hands_each_leaf_its_gradient(v2, with_edge, attention):
    """The shared autograd glue (``_mha.register_autograd``) on meta tensors (the operators' fake implementations;
    autograd on fake CUDA tensors needs a CUDA device here): every leaf - features, edge features, attention
    weights - gets a gradient of its own shape, and the attention coefficients, when returned, carry gradient."""
    if True:
        g = cudnn.gnn.CscGraph(torch.tensor([0, 2, 3, 5], dtype=torch.int32, device="meta"),
                               torch.tensor([0, 1, 2, 0, 3], dtype=torch.int32, device="meta"), 4)
        dim, dim_edge = 8, 8 if v2 else 4
        x = torch.empty(4, dim, device="meta", dtype=torch.half, requires_grad=True)
        edge = torch.empty(5, dim_edge, device="meta", dtype=torch.half, requires_grad=True) if with_edge else None
        w = torch.empty(dim if v2 else 2 * dim + (dim_edge if with_edge else 0), device="meta", dtype=torch.half,
                        requires_grad=True)
        fn = cudnn.gnn.mha_gat_v2 if v2 else cudnn.gnn.mha_gat
        hp = dict(high_precision_grad=True) if v2 else dict(high_precision_dgrad=True, high_precision_wgrad=True)
        out = fn(g, x, w, edge_features=edge, num_heads=2, return_attention_weights=attention, **hp)
        if attention:
            out, coefficients = out
            assert coefficients.requires_grad and coefficients.shape == (2, 5)
            (out.float().sum() + coefficients.sum()).backward()
        else:
            out.float().sum().backward()
        for leaf in (x, w) + ((edge,) if with_edge else ()):
            assert leaf.grad is not None and leaf.grad.shape == leaf.shape, leaf.shape
        # float32 gradients (high precision) are accumulated into the half leaves' .grad as torch does
        assert x.grad.dtype == torch.half


@pytest.mark.parametrize("v2", [False, True])
def test_mha_autograd_hands_the_backward_its_arguments_by_name(v2):
    """``_mha.register_autograd`` around an operator of the real forward schema (the real fake forward behind it)
    and a recording backward: each argument the backward operator is given, bound to the real backward schema's
    names, is the tensor or option of that name (told apart by shape: every one here has its own)."""
    from cudnn_py.gnn import _mha

    real = torch.ops.cudnn_py.gnn_mha_gat_v2_fwd if v2 else torch.ops.cudnn_py.gnn_mha_gat_fwd
    name = f"fwd_{'v2' if v2 else 'v1'}"
    lib = torch.library.Library("cudnn_py_gat_glue_test", "FRAGMENT")
    lib.define(name + "(" + str(real.default._schema).split("(", 1)[1])
    module = importlib.import_module(f"cudnn_py.gnn.mha_gat{'_v2' if v2 else ''}")
    lib.impl(name, module._fake_forward, "Meta")
    bwd_names = [a.name for a in (torch.ops.cudnn_py.gnn_mha_gat_v2_bwd if v2 else
                                  torch.ops.cudnn_py.gnn_mha_gat_bwd).default._schema.arguments]
    seen = {}

    def recorder(*args):
        seen.update(zip(bwd_names, args, strict=True))
        return module._fake_backward(*args)

    _mha.register_autograd(getattr(torch.ops.cudnn_py_gat_glue_test, name).default, recorder)
    meta = dict(device="meta")
    heads, n_src, n_dst, edges, dim, dim_edge = 2, 6, 3, 5, 8, 8 if v2 else 4
    t = dict(offsets=torch.empty(n_dst + 1, dtype=torch.int32, **meta),
             indices=torch.empty(edges, dtype=torch.int32, **meta),
             map_csc_to_coo=torch.empty(edges, dtype=torch.int64, **meta),
             src_features=torch.empty(n_src, dim, requires_grad=True, **meta),
             dst_features=torch.empty(n_dst, dim, requires_grad=True, **meta),
             edge_features=torch.empty(edges, dim_edge, requires_grad=True, **meta),
             attn_weights=torch.empty(dim if v2 else 2 * dim + dim_edge, requires_grad=True, **meta),
             dropout_mask=torch.empty(heads, edges, **meta), num_src_nodes=n_src, num_heads=heads,
             concat_heads=False, activation="elu", activation_alpha=0.5, return_attention_weights=True,
             csc_rev_offsets=torch.empty(n_src + 1, dtype=torch.int32, **meta),
             map_rev_to_coo=torch.empty(edges, dtype=torch.int16, **meta), deterministic=True)
    t.update(dict(grad_dtype=torch.float32) if v2 else dict(feature_grad_dtype=torch.float32,
                                                            weight_grad_dtype=torch.float32))
    outputs = getattr(torch.ops.cudnn_py_gat_glue_test, name)(**t)
    out, attention = outputs[0], outputs[1]
    (out.sum() + attention.sum()).backward()
    for key, want in t.items():
        if key != "return_attention_weights":
            got = seen[key]
            assert (got.shape, got.dtype) == (want.shape, want.dtype) if isinstance(want, torch.Tensor) \
                else got == want, key
    assert seen["sm_scores"].shape == outputs[2].shape
    if v2:
        assert seen["act_scores"].shape == outputs[3].shape
    assert seen["grad_output"].shape == out.shape and seen["grad_attention"].shape == attention.shape
    for leaf in ("src_features", "dst_features", "edge_features", "attn_weights"):
        assert t[leaf].grad is not None and t[leaf].grad.shape == t[leaf].shape, leaf
