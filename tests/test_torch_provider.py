"""cudnn_py.torch on the CPU, torch faked (torch is not installed here; a fake ``torch`` in ``sys.modules`` stands in,
as in test_execute_correctness.py): importing cudnn_py imports no torch; install / uninstall put the original
function object back (direct override, and through a fake attention registry); the configuration key; the fallback
decisions and their once-per-configuration log; the LRU bound; the graphs a configuration builds validate
deviceless on cuDNN."""
from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import types

import pytest

import cudnn_py as cudnn
import cudnn_py.torch as ct


# ------------------------------------------------------------------------------------------------- fake torch
class DType:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"torch.{self.name}"


class Device:
    def __init__(self, type_="cuda", index=0):
        self.type, self.index = type_, index

    def __eq__(self, other):
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        return f"{self.type}:{self.index}"


def contiguous(shape):
    return ct.row_major(shape)


class Tensor:
    def __init__(self, shape, dtype, device=None, stride=None, requires_grad=False, ptr=0x10000):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device or Device()
        self._stride = tuple(stride) if stride is not None else contiguous(self.shape)
        self.requires_grad = requires_grad
        self.is_nested = False
        self._ptr = ptr

    def dim(self):
        return len(self.shape)

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def stride(self, i=None):
        return self._stride if i is None else self._stride[i]

    def data_ptr(self):
        return self._ptr

    def unsqueeze(self, d):
        assert d == 0
        st = (self.shape[0] * self._stride[0]) if self.shape else 1
        return Tensor((1, *self.shape), self.dtype, self.device, (st, *self._stride), self.requires_grad, self._ptr)


Tensor.__module__ = "torch"


def make_fake_torch(registry=False):
    torch = types.ModuleType("torch")
    torch.__version__ = "0.fake"
    torch.Tensor = Tensor
    for name in ("float16", "bfloat16", "float32", "float64", "bool"):
        setattr(torch, name, DType(name))
    torch.half = torch.float16
    torch.grad_enabled = True
    torch.is_grad_enabled = lambda: torch.grad_enabled
    torch.are_deterministic_algorithms_enabled = lambda: False
    torch.autocast_on = False
    torch.is_autocast_enabled = lambda device_type=None: torch.autocast_on
    torch.get_autocast_dtype = lambda device_type: torch.bfloat16
    torch.overrides = types.SimpleNamespace(has_torch_function=lambda ts: False)
    torch.compiling = False
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: torch.compiling)
    torch.cuda = types.SimpleNamespace(device=lambda d: contextlib.nullcontext())
    torch.calls = []

    def original_sdpa(*args, **kwargs):
        torch.calls.append((args, kwargs))
        return "torch's result"

    functional = types.ModuleType("torch.nn.functional")
    functional.scaled_dot_product_attention = original_sdpa
    attention = types.ModuleType("torch.nn.attention")
    if registry:
        impls, active = {}, {"name": None, "handle": None}

        def register_flash_attention_impl(impl, *, register_fn):
            impls[impl] = register_fn

        def activate_flash_attention_impl(impl):
            active["handle"] = impls[impl]()
            active["name"] = impl

        def restore_flash_attention_impl():
            if active["handle"] is not None:
                active["handle"].remove()
            active.update(name=None, handle=None)

        attention.register_flash_attention_impl = register_flash_attention_impl
        attention.activate_flash_attention_impl = activate_flash_attention_impl
        attention.restore_flash_attention_impl = restore_flash_attention_impl
        attention.current_flash_attention_impl = lambda: active["name"]
        attention.impls = impls
    nn = types.ModuleType("torch.nn")
    nn.functional, nn.attention = functional, attention
    torch.nn = nn
    torch.original_sdpa = original_sdpa
    return torch, {"torch": torch, "torch.nn": nn, "torch.nn.functional": functional,
                   "torch.nn.attention": attention}


@pytest.fixture
def torch(monkeypatch):
    t, modules = make_fake_torch()
    for name, mod in modules.items():
        monkeypatch.setitem(sys.modules, name, mod)
    yield t
    ct.uninstall()


@pytest.fixture
def torch_with_registry(monkeypatch):
    t, modules = make_fake_torch(registry=True)
    for name, mod in modules.items():
        monkeypatch.setitem(sys.modules, name, mod)
    yield t
    ct.uninstall()


def qkv(torch, b=2, h=4, h_kv=4, s=100, s_kv=None, d=64, dtype=None, requires_grad=False, **kw):
    dtype = dtype or torch.float16
    s_kv = s_kv or s
    return (Tensor((b, h, s, d), dtype, requires_grad=requires_grad, **kw),
            Tensor((b, h_kv, s_kv, d), dtype, requires_grad=requires_grad, **kw),
            Tensor((b, h_kv, s_kv, d), dtype, requires_grad=requires_grad, **kw))


# ------------------------------------------------------------------------------------------------- imports
def test_importing_cudnn_py_imports_no_torch():
    code = "import sys, cudnn_py, cudnn_py.torch; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# ------------------------------------------------------------------------------------------------- install
def test_install_and_uninstall_restore_the_original_function_object(torch, caplog):
    F = torch.nn.functional
    original = F.scaled_dot_product_attention
    with caplog.at_level(logging.INFO, logger="cudnn_py.torch"):
        assert ct.install() == "override"
    assert any("no attention-implementation registry" in r.getMessage() for r in caplog.records)
    assert F.scaled_dot_product_attention is not original
    assert F.scaled_dot_product_attention.__wrapped__ is original
    assert ct.installed() == "override" and ct.provider() is not None
    assert ct.install() == "override"  # twice: a no-op
    ct.uninstall()
    assert F.scaled_dot_product_attention is original
    assert ct.installed() is None and ct.provider() is None
    ct.uninstall()  # twice: a no-op
    assert F.scaled_dot_product_attention is original


def test_install_through_the_attention_registry(torch_with_registry, caplog):
    torch = torch_with_registry
    F, attention = torch.nn.functional, torch.nn.attention
    original = F.scaled_dot_product_attention
    with caplog.at_level(logging.INFO, logger="cudnn_py.torch"):
        assert ct.install() == "registry"
    assert any("has the attention-implementation registry" in r.getMessage() for r in caplog.records)
    assert ct.PROVIDER_NAME in attention.impls
    assert attention.current_flash_attention_impl() == ct.PROVIDER_NAME
    assert F.scaled_dot_product_attention.cudnn_py_provider is ct.provider()
    ct.uninstall()
    assert F.scaled_dot_product_attention is original
    assert attention.current_flash_attention_impl() is None


def test_reinstalling_through_the_registry_registers_once(torch_with_registry):
    torch = torch_with_registry
    calls = []
    register = torch.nn.attention.register_flash_attention_impl

    def register_once(impl, *, register_fn):
        if impl in torch.nn.attention.impls:
            raise ValueError(f"{impl} is already registered")
        calls.append(impl)
        register(impl, register_fn=register_fn)

    torch.nn.attention.register_flash_attention_impl = register_once
    for _ in range(3):
        assert ct.install() == "registry"
        assert torch.nn.functional.scaled_dot_product_attention.cudnn_py_provider is ct.provider()
        ct.uninstall()
        assert torch.nn.functional.scaled_dot_product_attention is torch.original_sdpa
    assert calls == [ct.PROVIDER_NAME]
    with pytest.raises(RuntimeError, match="activated by cudnn_py.torch.install"):
        torch.nn.attention.activate_flash_attention_impl(ct.PROVIDER_NAME)  # outside install(): refused


def test_the_override_can_be_asked_for_where_the_registry_exists(torch_with_registry):
    torch = torch_with_registry
    assert ct.install(mechanism="override") == "override"
    assert torch.nn.attention.current_flash_attention_impl() is None
    ct.uninstall()
    assert torch.nn.functional.scaled_dot_product_attention is torch.original_sdpa


def test_registry_mechanism_refused_without_a_registry(torch):
    with pytest.raises(RuntimeError, match="no attention-implementation registry"):
        ct.install(mechanism="registry")
    assert torch.nn.functional.scaled_dot_product_attention is torch.original_sdpa
    with pytest.raises(ValueError):
        ct.install(mechanism="bogus")


def test_a_failing_registry_falls_back_to_the_override(torch_with_registry, caplog):
    torch = torch_with_registry

    def refuse(impl):
        raise ValueError(f"unknown implementation {impl}")

    torch.nn.attention.activate_flash_attention_impl = refuse
    with caplog.at_level(logging.WARNING, logger="cudnn_py.torch"):
        assert ct.install() == "override"
    assert any("activation through torch's attention registry failed" in r.getMessage() for r in caplog.records)
    ct.uninstall()
    assert torch.nn.functional.scaled_dot_product_attention is torch.original_sdpa


def test_paused_gives_torchs_function_back_for_a_block(torch):
    F = torch.nn.functional
    with ct.paused():  # not installed: nothing to do
        assert F.scaled_dot_product_attention is torch.original_sdpa
    ct.install()
    ours, prov = F.scaled_dot_product_attention, ct.provider()
    with ct.paused():
        assert F.scaled_dot_product_attention is torch.original_sdpa
    assert F.scaled_dot_product_attention is ours and ct.provider() is prov
    ct.uninstall()
    assert F.scaled_dot_product_attention is torch.original_sdpa


def test_uninstall_leaves_a_later_wrapper_alone(torch, caplog):
    ct.install()
    later = lambda *a, **k: None  # noqa: E731
    torch.nn.functional.scaled_dot_product_attention = later
    with caplog.at_level(logging.WARNING, logger="cudnn_py.torch"):
        ct.uninstall()
    assert torch.nn.functional.scaled_dot_product_attention is later
    assert any("replaced by someone else" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------------------- the key
def test_the_configuration_key(torch):
    q, k, v = qkv(torch, h=8, h_kv=2, s=100, s_kv=150)
    cfg = ct.decide(torch, q, k, v, is_causal=True, enable_gqa=True)
    assert cfg.q == ((2, 8, 100, 64), (8 * 100 * 64, 100 * 64, 64, 1))
    assert cfg.k == ((2, 2, 150, 64), (2 * 150 * 64, 150 * 64, 64, 1))
    assert (cfg.dtype, cfg.device, cfg.causal, cfg.gqa, cfg.requires_grad, cfg.bias) == \
        ("float16", 0, True, True, False, None)
    assert cfg.scale == pytest.approx(0.125)
    assert cfg.o_dims == (2, 8, 100, 64)
    # every part of the key separates configurations
    assert ct.decide(torch, q, k, v, is_causal=False, enable_gqa=True) != cfg
    assert ct.decide(torch, q, k, v, is_causal=True, enable_gqa=True, scale=0.1).scale == 0.1
    bf = qkv(torch, h=8, h_kv=2, s=100, s_kv=150, dtype=torch.bfloat16)
    assert ct.decide(torch, *bf, is_causal=True, enable_gqa=True).dtype == "bfloat16"
    g = qkv(torch, h=8, h_kv=2, s=100, s_kv=150, requires_grad=True)
    assert ct.decide(torch, *g, is_causal=True, enable_gqa=True).requires_grad
    torch.grad_enabled = False
    assert not ct.decide(torch, *g, is_causal=True, enable_gqa=True).requires_grad
    torch.grad_enabled = True
    bshd = Tensor((2, 8, 100, 64), torch.float16, stride=(100 * 8 * 64, 64, 8 * 64, 1))  # a (b, s, h, d) transposed
    cfg2 = ct.decide(torch, bshd, k, v, is_causal=True, enable_gqa=True)
    assert cfg2.q[1] == (100 * 8 * 64, 64, 8 * 64, 1) and cfg2 != cfg
    other = qkv(torch, h=8, h_kv=2, s=100, s_kv=150, device=Device("cuda", 1))
    assert ct.decide(torch, *other, is_causal=True, enable_gqa=True).device == 1
    assert hash(cfg) == hash(ct.decide(torch, q, k, v, is_causal=True, enable_gqa=True))


def test_a_float_mask_is_a_bias_in_the_key(torch):
    q, k, v = qkv(torch, s=100, s_kv=120)
    mask = Tensor((100, 120), torch.float16)
    cfg = ct.decide(torch, q, k, v, attn_mask=mask)
    assert cfg.bias == ((1, 1, 100, 120), (100 * 120, 100 * 120, 120, 1))
    assert ct.as_4d(mask).shape == (1, 1, 100, 120) and ct.as_4d(mask).stride() == cfg.bias[1]
    per_head = Tensor((2, 4, 100, 120), torch.float16)
    assert ct.decide(torch, q, k, v, attn_mask=per_head).bias[0] == (2, 4, 100, 120)


def test_gradient_layouts():
    assert ct.grad_strides((2, 8, 100, 64), ct.row_major((2, 8, 100, 64))) == ct.row_major((2, 8, 100, 64))
    bshd = (100 * 8 * 64, 64, 8 * 64, 1)
    assert ct.grad_strides((2, 8, 100, 64), bshd) == bshd  # a BSHD view's gradient stays BSHD
    packed = (100 * 3 * 8 * 64, 64, 3 * 8 * 64, 1)  # q sliced out of a packed (b, s, 3, h, d) qkv: not dense
    assert ct.grad_strides((2, 8, 100, 64), packed) == ct.row_major((2, 8, 100, 64))
    assert ct.grad_strides((1, 8, 100, 64), (0, 6400, 64, 1)) == (51200, 6400, 64, 1)


# ------------------------------------------------------------------------------------------------- fallbacks
FALLBACKS = {
    "dropout": (dict(dropout_p=0.1), "dropout RNG"),
    "float32": (dict(dtype="float32"), "only float16 / bfloat16"),
    "cpu": (dict(device=Device("cpu", None)), "one CUDA device"),
    "bool mask": (dict(mask="bool"), "boolean attn_mask"),
    "mask and causal": (dict(mask="float16", is_causal=True), "together with is_causal"),
    "mask of another dtype": (dict(mask="float32"), "an attn_mask of torch.float32"),
    "heads without gqa": (dict(h_kv=2), "without enable_gqa=True"),
    "heads not a multiple": (dict(h_kv=3, enable_gqa=True), "not a multiple"),
    "strided head dim": (dict(stride=(100 * 4 * 64 * 2, 100 * 64 * 2, 64 * 2, 2)), "stride other than 1"),
    "misaligned": (dict(ptr=0x10008), "aligned to 16 bytes"),
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_fallback_decisions(torch, case):
    opts, reason = FALLBACKS[case]
    opts = dict(opts)
    call = {n: opts.pop(n) for n in ("dropout_p", "is_causal", "enable_gqa") if n in opts}
    mask = opts.pop("mask", None)
    if "dtype" in opts:
        opts["dtype"] = getattr(torch, opts["dtype"])
    q, k, v = qkv(torch, **opts)
    if mask is not None:
        call["attn_mask"] = Tensor((100, 100), getattr(torch, mask))
    with pytest.raises(ct.Fallback, match=reason):
        ct.decide(torch, q, k, v, **call)


def test_subclasses_modes_and_autocast_fall_back(torch):
    q, k, v = qkv(torch)

    class Sub(Tensor):
        pass

    sub = Sub(q.shape, q.dtype)
    with pytest.raises(ct.Fallback, match="plain torch.Tensor"):
        ct.decide(torch, sub, k, v)
    torch.overrides.has_torch_function = lambda ts: True
    with pytest.raises(ct.Fallback, match="__torch_function__"):
        ct.decide(torch, q, k, v)
    torch.overrides.has_torch_function = lambda ts: False
    torch.autocast_on = True
    with pytest.raises(ct.Fallback, match="autocast to torch.bfloat16"):
        ct.decide(torch, q, k, v)
    bf = qkv(torch, dtype=torch.bfloat16)
    assert ct.decide(torch, *bf).dtype == "bfloat16"  # autocast to the inputs' own dtype: served


def test_a_fallback_calls_torch_with_the_callers_arguments_and_logs_once(torch, caplog):
    ct.install()
    F = torch.nn.functional
    q, k, v = qkv(torch)
    with caplog.at_level(logging.WARNING, logger="cudnn_py.torch"):
        for _ in range(3):
            assert F.scaled_dot_product_attention(q, k, v, None, 0.1, is_causal=True) == "torch's result"
    assert torch.calls == [((q, k, v, None, 0.1), {"is_causal": True})] * 3
    said = [r for r in caplog.records if r.name == "cudnn_py.torch"]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert "dropout_p=0.1" in said[0].getMessage() and "RNG" in said[0].getMessage()
    assert said[0].levelno == logging.WARNING
    # another configuration: said once more
    q2, k2, v2 = qkv(torch, s=50)
    with caplog.at_level(logging.WARNING, logger="cudnn_py.torch"):
        F.scaled_dot_product_attention(q2, k2, v2, dropout_p=0.1)
        F.scaled_dot_product_attention(q2, k2, v2, dropout_p=0.1)
    assert len([r for r in caplog.records if r.name == "cudnn_py.torch"]) == 2
    assert ct.provider().fallbacks == 5 and ct.provider().served == 0


def test_bad_arguments_and_compilation_go_to_torch_unlogged(torch, caplog):
    ct.install()
    F = torch.nn.functional
    q, k, v = qkv(torch)
    with caplog.at_level(logging.DEBUG, logger="cudnn_py.torch"):
        F.scaled_dot_product_attention(q, k, v, bogus=1)  # torch raises its own TypeError (the fake does not)
        F.scaled_dot_product_attention(q, k)
        torch.compiling = True
        F.scaled_dot_product_attention(q, k, v)
    assert len(torch.calls) == 3
    assert not [r for r in caplog.records if r.name == "cudnn_py.torch"]


def test_a_refused_graph_falls_back_once_and_is_not_rebuilt(torch, caplog):
    ct.install()
    prov = ct.provider()
    builds = []

    def refuse(cfg):
        builds.append(cfg)
        raise cudnn.cudnnGraphNotSupportedError("no engine for this")

    prov._build = refuse
    q, k, v = qkv(torch)
    with caplog.at_level(logging.WARNING, logger="cudnn_py.torch"):
        for _ in range(3):
            assert torch.nn.functional.scaled_dot_product_attention(q, k, v) == "torch's result"
    assert len(builds) == 1
    said = [r.getMessage() for r in caplog.records if r.name == "cudnn_py.torch"]
    assert len(said) == 1 and "cudnnGraphNotSupportedError: no engine for this" in said[0]


def test_served_calls_go_to_the_cached_entry(torch):
    ct.install()
    prov = ct.provider()
    built, ran = [], []
    prov._build = lambda cfg: built.append(cfg) or ct.Entry(cfg, None, {})
    prov.forward = lambda entry, q, k, v, bias: ran.append((entry.cfg, bias)) or ("O", None)
    q, k, v = qkv(torch)
    F = torch.nn.functional
    assert F.scaled_dot_product_attention(q, k, v, is_causal=True) == "O"
    assert F.scaled_dot_product_attention(q, k, v, is_causal=True) == "O"
    assert len(built) == 1 and len(ran) == 2 and not torch.calls
    assert prov.cache.hits == 1 and prov.cache.misses == 1 and prov.served == 2


# ------------------------------------------------------------------------------------------------- the LRU bound
def test_the_graph_cache_is_bounded(torch):
    ct.install(cache_size=3)
    prov = ct.provider()
    prov._build = lambda cfg: ct.Entry(cfg, None, {})
    prov.forward = lambda entry, q, k, v, bias: ("O", None)
    F = torch.nn.functional
    keys = []
    for s in (16, 32, 48, 64):
        q, k, v = qkv(torch, s=s)
        F.scaled_dot_product_attention(q, k, v)
        keys.append(ct.decide(torch, q, k, v))
    assert len(prov.cache) == 3 and prov.cache.evictions == 1
    assert keys[0] not in prov.cache and all(key in prov.cache for key in keys[1:])
    # a hit refreshes: s=32 used again, then a new one evicts s=48 (the least recently used)
    q, k, v = qkv(torch, s=32)
    F.scaled_dot_product_attention(q, k, v)
    q, k, v = qkv(torch, s=80)
    F.scaled_dot_product_attention(q, k, v)
    assert keys[1] in prov.cache and keys[2] not in prov.cache
    with pytest.raises(ValueError):
        ct.LRU(0)


def test_lru_map():
    lru = ct.LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1
    lru.put("c", 3)
    assert lru.keys() == ["a", "c"] and lru.get("b") is None
    assert (lru.hits, lru.misses, lru.evictions) == (1, 1, 1)


# ------------------------------------------------------------------------------------------------- the graphs
GRAPH_CASES = {
    "causal": dict(causal=True),
    "non-causal": dict(),
    "gqa": dict(h=8, h_kv=2, causal=True),
    "s 100 over 150": dict(s=100, s_kv=150),
    "bias": dict(bias=True),
    "bshd": dict(bshd=True),
    "bf16": dict(dtype="bfloat16"),
}


def config(h=4, h_kv=4, s=128, s_kv=None, d=64, causal=False, bias=False, bshd=False, dtype="float16",
           requires_grad=True):
    s_kv = s_kv or s

    def layout(h_, s_):
        dims = (2, h_, s_, d)
        return dims, ((s_ * h_ * d, d, h_ * d, 1) if bshd else ct.row_major(dims))

    b_layout = ((1, h, s, s_kv), ct.row_major((1, h, s, s_kv))) if bias else None
    return ct.Config(q=layout(h, s), k=layout(h_kv, s_kv), v=layout(h_kv, s_kv), bias=b_layout, dtype=dtype,
                     device=0, causal=causal, scale=d ** -0.5, gqa=h != h_kv, requires_grad=requires_grad)


@pytest.mark.parametrize("case", list(GRAPH_CASES))
def test_the_graphs_of_a_configuration_validate_deviceless(case):
    cfg = config(**GRAPH_CASES[case])
    g, ts = ct.forward_graph(cudnn, cfg)
    g.validate()
    assert ts["o"].get_dim() == list(cfg.o_dims) and ts["o"].get_stride() == list(ct.row_major(cfg.o_dims))
    b, h, s_q, _ = cfg.q[0]
    assert ts["stats"].get_dim() == [b, h, s_q, 1]
    gb, tb = ct.backward_graph(cudnn, cfg)
    gb.validate()
    for name, like in (("dQ", cfg.q), ("dK", cfg.k), ("dV", cfg.v)):
        assert tb[name].get_dim() == list(like[0])
        assert tb[name].get_stride() == list(ct.grad_strides(*like))
    # a dO of other (dense) strides: its own backward graph
    bshd = (s_q * h * cfg.o_dims[3], cfg.o_dims[3], h * cfg.o_dims[3], 1)
    gb2, tb2 = ct.backward_graph(cudnn, cfg, bshd)
    gb2.validate()
    assert tb2["dO"].get_stride() == list(bshd)


def test_an_inference_configuration_has_no_stats():
    g, ts = ct.forward_graph(cudnn, config(requires_grad=False))
    g.validate()
    assert "stats" not in ts
