"""The conv1d torch functions of ``cudnn.ops`` on the CPU (``causal_conv1d_nwh``, ``b2b_causal_conv1d``,
``causal_conv1d_update``, ``fft_causal_conv1d``): the official signatures, the lazy exports, every operand refusal
(the official's message and exception class, in its order; fake CUDA tensors stand in for a GPU), the refusal of the
decode update (the official runs it on a CuTe DSL kernel), the dispatcher's refusal of CPU operands, and the version
gate on the real loaded cuDNN (reporting itself older)."""
from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from cudnn_py.errors import (
    CApiUnavailableError,
    InvalidTypeError,
    InvalidValueError,
    NotImplementedOptionError,
    UsageError,
)

torch = pytest.importorskip("torch")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import cudnn_py as cudnn  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SURFACE = json.loads((ROOT / "tests" / "data" / "ops_surface_1_32.json").read_text())
KIND = {inspect.Parameter.POSITIONAL_OR_KEYWORD: "POSITIONAL_OR_KEYWORD",
        inspect.Parameter.KEYWORD_ONLY: "KEYWORD_ONLY", inspect.Parameter.POSITIONAL_ONLY: "POSITIONAL_ONLY"}
NAMES = ["causal_conv1d_nwh", "b2b_causal_conv1d", "causal_conv1d_update", "fft_causal_conv1d"]


def _esc(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize("name", NAMES)
def test_official_signature_and_lazy_export(name):
    fn = getattr(cudnn.ops, name)
    got = [[p.name, KIND[p.kind], None if p.default is inspect.Parameter.empty else repr(p.default)]
           for p in inspect.signature(fn).parameters.values()]
    assert got == SURFACE["ops"][name]
    assert name in cudnn.ops.__all__ and callable(fn)


def test_cpu_operands_are_refused_by_the_dispatcher():
    with pytest.raises(NotImplementedError, match="CPU"):
        cudnn.ops.causal_conv1d_nwh(torch.ones(1, 8, 4), torch.ones(4, 4))
    with pytest.raises(NotImplementedError, match="CPU"):
        cudnn.ops.b2b_causal_conv1d(torch.ones(1, 6, 8), torch.ones(6, 3), torch.ones(2, 3), torch.ones(2))


@pytest.mark.parametrize("args,exc,match", [
    (lambda: (torch.empty(1, 8, 4), torch.empty(4, 4), torch.empty(3)), InvalidValueError,
     "Bias mismatch: x has dim=4"),
    (lambda: (torch.empty(1, 8, 4), torch.empty(4, 5), torch.empty(4)), InvalidValueError,
     "Channel mismatch: x has dim=4"),
    (lambda: (torch.empty(1, 8, 4), torch.empty(4, 4, dtype=torch.half), torch.empty(4)), InvalidTypeError,
     "Dtype mismatch"),
    (lambda: (torch.empty(8, 4), torch.empty(4, 4), torch.empty(4)), InvalidValueError, "Expected x(3D)"),
])
def test_nwh_refusals(args, exc, match):
    with FakeTensorMode():
        x, w, b = (t.to("cuda") for t in args())
        from cudnn_py.ops._causal_conv1d_nwh import _fwd_primitive

        with pytest.raises(exc, match=_esc(match)):
            _fwd_primitive._init_fn(x, w, b, "identity")
        with pytest.raises(InvalidValueError, match="Unsupported activation 'gelu'"):
            cudnn.ops.causal_conv1d_nwh(x, w, b, "gelu")


def test_nwh_public_shapes_and_default_bias():
    with FakeTensorMode():
        x, w = torch.empty(2, 16, 8, device="cuda"), torch.empty(4, 8, device="cuda")
        assert cudnn.ops.causal_conv1d_nwh(x, w).shape == (2, 16, 8)


@pytest.mark.parametrize("shapes,exc,match", [
    (((1, 7, 8), (6, 3), (2, 3), (2,)), InvalidValueError, "Expected x.shape[1] divisible by 3; got 7"),
    (((1, 6, 8), (6, 3), (2, 3), (2, 1)), InvalidValueError, "Expected weights_proj(2D: 3*dim,K_proj)"),
    (((1, 6, 8), (5, 3), (2, 3), (2,)), InvalidValueError, "Channel mismatch: x has 3*dim=6"),
    (((1, 6, 8), (6, 3), (3, 3), (2,)), InvalidValueError, "Channel mismatch: x has dim=2 but weights_mixer"),
    (((1, 6, 8), (6, 3), (2, 3), (3,)), InvalidValueError, "Channel mismatch: x has dim=2 but skip_bias"),
])
def test_b2b_refusals(shapes, exc, match):
    from cudnn_py.ops._b2b_causal_conv1d import _fwd_primitive

    with FakeTensorMode():
        tensors = [torch.empty(s, device="cuda") for s in shapes]
        with pytest.raises(exc, match=_esc(match)):
            _fwd_primitive._init_fn(*tensors)
        tensors[2] = tensors[2].half()
        if match.startswith("Expected x.shape") or match.startswith("Expected weights"):
            return
        with pytest.raises(InvalidTypeError, match="Dtype mismatch: x.dtype=torch.float32, weights_proj"):
            _fwd_primitive._init_fn(*tensors)


def test_b2b_public_shape():
    with FakeTensorMode():
        y = cudnn.ops.b2b_causal_conv1d(torch.empty(2, 12, 16, device="cuda"), torch.empty(12, 3, device="cuda"),
                                        torch.empty(4, 5, device="cuda"), torch.empty(4, device="cuda"))
        assert y.shape == (2, 4, 16)


# ---- causal_conv1d_update: checked as the official checks it, then refused ---------------------------------------
def _update_args(**change):
    bf = torch.bfloat16
    args = dict(x=torch.empty(2, 8, dtype=bf, device="cuda"), conv_state=torch.empty(2, 8, 3, dtype=bf, device="cuda"),
                weight=torch.empty(8, 4, dtype=bf, device="cuda"), bias=None, activation=None)
    args.update(change)
    return args


@pytest.mark.parametrize("change,exc,match", [
    (dict(activation="gelu"), InvalidValueError, "activation must be None, 'identity', 'silu', or 'swish', got 'gelu'"),
    (dict(x=lambda: torch.empty(2, 8, 1, dtype=torch.bfloat16)), InvalidValueError, "x must have shape [N, D]"),
    (dict(weight=lambda: torch.empty(7, 4, dtype=torch.bfloat16)), InvalidValueError,
     "weight must have shape [D, W] with D=8"),
    (dict(conv_state=lambda: torch.empty(2, 8, 2, dtype=torch.bfloat16)), InvalidValueError,
     "conv_state length L must satisfy L >= W - 1"),
    (dict(conv_state=lambda: torch.empty(1, 8, 3, dtype=torch.bfloat16)), InvalidValueError,
     "conv_state needs at least N slots"),
    (dict(x=lambda: torch.empty(2, 8)), InvalidTypeError, "x must have dtype torch.bfloat16, got torch.float32"),
    (dict(x=lambda: torch.empty(8, 2, dtype=torch.bfloat16).t()), InvalidValueError,
     "x must have row-major strides (ld, 1)"),
    (dict(conv_state_indices=lambda: torch.empty(2, dtype=torch.int64)), InvalidTypeError,
     "conv_state_indices must have dtype torch.int32"),
    (dict(weight=lambda: torch.empty(8, 3, dtype=torch.bfloat16)), NotImplementedOptionError,
     "the current native causal_conv1d_update kernel supports only"),
    (dict(cache_seqlens=lambda: torch.empty(2, dtype=torch.int32)), NotImplementedOptionError,
     "cache_seqlens=present"),
    (dict(), NotImplementedOptionError, "CuTe DSL decode kernel"),
])
def test_update_refusals(change, exc, match):
    with FakeTensorMode(), torch.no_grad():
        change = {k: (v().to("cuda") if callable(v) else v) for k, v in change.items()}
        with pytest.raises(exc, match=_esc(match)):
            cudnn.ops.causal_conv1d_update(**_update_args(**change))


def test_update_type_grad_and_device_refusals():
    with pytest.raises(InvalidTypeError, match="conv_state must be a torch.Tensor, got list"):
        cudnn.ops.causal_conv1d_update(torch.empty(2, 8), [], torch.empty(8, 4))
    with pytest.raises(InvalidValueError, match="x must be a CUDA tensor, got cpu"):
        cudnn.ops.causal_conv1d_update(torch.empty(2, 8), torch.empty(2, 8, 3), torch.empty(8, 4))
    meta = dict(x=torch.empty(2, 8, dtype=torch.bfloat16, device="meta"),
                conv_state=torch.empty(2, 8, 3, dtype=torch.bfloat16, device="meta"),
                weight=torch.empty(8, 4, dtype=torch.bfloat16, device="meta"))
    out = cudnn.ops.causal_conv1d_update(**meta)  # the official's fake: the shape, on the meta device
    assert out.shape == (2, 8) and out.device.type == "meta"
    with pytest.raises(UsageError, match="inference-only"):
        cudnn.ops.causal_conv1d_update(**dict(meta, weight=meta["weight"].requires_grad_()))
    assert issubclass(UsageError, RuntimeError) and issubclass(NotImplementedOptionError, NotImplementedError)


# ---- fft_causal_conv1d ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shapes,dtype,exc,match", [
    (((2, 4, 64), (4,)), torch.float32, InvalidValueError, "Expected x(3D) and weight(2D)"),
    (((2, 4, 64), (3, 8)), torch.float32, InvalidValueError, "Channel mismatch: x has dim=4, but weight.shape[0]=3."),
    (((2, 4, 0), (4, 8)), torch.float32, InvalidValueError, "All tensor dimensions must be positive"),
    (((2, 4, 64), (4, 8)), torch.int32, InvalidValueError, "Unsupported dtype torch.int32."),
])
def test_fft_refusals(shapes, dtype, exc, match):
    with FakeTensorMode():
        x, w = (torch.empty(s, device="cuda", dtype=dtype) for s in shapes)
        with pytest.raises(exc, match=_esc(match)):
            cudnn.ops.fft_causal_conv1d(x, w)


def test_fft_shape_checks_of_the_primitives():
    from cudnn_py.ops import _fft_causal_conv1d as fft

    with pytest.raises(InvalidValueError, match=_esc("Medium FFT kernel_size must be a power of two in [128, 16384]")):
        fft._validate_medium_shape(256, 192)
    with pytest.raises(InvalidValueError, match="seq_len % kernel_size == 0"):
        fft._validate_medium_shape(200, 128)
    with pytest.raises(InvalidValueError, match="Long FFT requires power-of-two seq_len == kernel_size"):
        fft._validate_long_shape(8192, 4096, torch.float32, torch.device("cuda"))
    with pytest.raises(InvalidValueError, match="Long FFT FP64 supports kernel_size through 8388608"):
        fft._validate_long_shape(1 << 24, 1 << 24, torch.float64, torch.device("cuda"))
    assert fft._compatible_filter_length(5) == 128 and fft._compatible_filter_length(300) == 512




def test_fft_primitives_refuse_an_old_cudnn_first(old_cudnn):
    """The official checks the cuDNN version before the operands in each FFT primitive: a RuntimeError."""
    from cudnn_py.ops import _fft_causal_conv1d as fft

    for prim, args in ((fft._medium_fwd, (object(), object())), (fft._long_bwd, (None,) * 4)):
        with pytest.raises(CApiUnavailableError, match=r"needs cuDNN 9\.26\.0 or newer; the loaded cuDNN is 9\.19\.0"):
            prim._init_fn(*args)
    assert issubclass(CApiUnavailableError, RuntimeError)


def test_nwh_and_b2b_c_api_range_checks():
    """The official bindings' kernel width ranges: NWH up to 128, B2B projection 2 - 32, mixer 2 - 256."""
    base = dict(stream=0, x=256, weight=256, bias=256, y=256, batch=1, dim=4, seq_len=8, data_type=0, activation=0)
    with pytest.raises(InvalidValueError, match="kernel_size must be one of"):
        cudnn.causal_conv1d_nwh_forward(**base, kernel_size=256)
    b2b = dict(stream=0, x=256, weights_proj=256, weights_mixer=256, skip_bias=256, y=256, y_gated=256, batch=1,
               dim=1, seq_len=8, data_type=0)
    with pytest.raises(InvalidValueError, match=_esc("kernel_size_proj must be in [2, 32]")):
        cudnn.b2b_causal_conv1d_forward(**b2b, kernel_size_proj=33, kernel_size_mixer=3)
    with pytest.raises(InvalidValueError, match=_esc("kernel_size_mixer must be in [2, 256]")):
        cudnn.b2b_causal_conv1d_forward(**b2b, kernel_size_proj=3, kernel_size_mixer=1)
