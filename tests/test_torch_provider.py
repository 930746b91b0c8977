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
from tests import test_execute_correctness as harness

registered_fake_handles = harness.registered_fake_handles  # (the harness's fake handles as live, where asked for)

# ------------------------------------------------------------------------------------------------- fake torch
# The fake tensors, dtypes and devices of the execute harness (test_execute_correctness.py): one fake of torch's
# tensor for the whole suite. The fake module below is the provider's view of torch (grad mode, autocast, the
# attention registry), which the execute harness's FakeTorch (streams, the allocator) does not need.
Device = harness.FakeDevice
CUDA0 = harness.CUDA0


def Tensor(shape, dtype, device=None, stride=None, requires_grad=False, ptr=0x10000):  # (a constructor)
    return harness.Tensor(shape, stride, dtype, device or CUDA0, ptr, requires_grad)


def contiguous(shape):
    return ct.row_major(shape)


def make_fake_torch(registry=False):
    torch = types.ModuleType("torch")
    torch.__version__ = "0.fake"
    torch.Tensor = harness.Tensor
    for name in ("float16", "bfloat16", "float32", "float64"):
        setattr(torch, name, getattr(harness, name))
    torch.bool = harness.bool_
    torch.half = torch.float16
    torch.grad_enabled = True
    torch.is_grad_enabled = lambda: torch.grad_enabled
    torch.deterministic = False
    torch.are_deterministic_algorithms_enabled = lambda: torch.deterministic
    torch.autocast_on = False
    torch.is_autocast_enabled = lambda device_type=None: torch.autocast_on
    torch.get_autocast_dtype = lambda device_type: torch.bfloat16
    torch.tf_on = False  # a __torch_function__ mode active (read through the function torch has, as torch's is)
    torch.overrides = types.SimpleNamespace(has_torch_function=lambda ts: torch.tf_on)
    torch.compiling = False
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: torch.compiling)
    torch.functorch_on = False
    torch._C = types.SimpleNamespace(_are_functorch_transforms_active=lambda: torch.functorch_on,
                                     _cuda_getCurrentRawStream=lambda device: 0)
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

    class Sub(harness.Tensor):
        pass

    sub = Sub(q.shape, None, q.dtype)
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


# ------------------------------------------------------------------------------------------------- the steady state
@pytest.fixture
def served(torch, monkeypatch):
    """Installed, with builds and runs recorded instead of cuDNN's: (provider, builds, runs, decides). A call with
    gradients enters the autograd Function as recorded too (the fake torch has no autograd)."""
    ct.install()
    prov = ct.provider()
    builds, runs, decides = [], [], []
    prov._build = lambda cfg: builds.append(cfg) or ct.Entry(cfg, None, {})
    prov.forward = lambda entry, q, k, v, bias: runs.append((entry, q, k, v, bias)) or ("O", None)
    prov._autograd_apply = lambda: lambda q, k, v, bias, entry, p: runs.append((entry, q, k, v, bias)) or "O(grad)"
    real = ct.decide
    monkeypatch.setattr(ct.serving, "decide", lambda *a, **kw: decides.append(a[1:]) or real(*a, **kw))  # read there
    return prov, builds, runs, decides


def test_the_steady_state_decides_once_per_key(served, torch):
    prov, builds, runs, decides = served
    F = torch.nn.functional
    for i in range(5):  # fresh tensors (other addresses) of one layout: one decide, one build, the same entry
        q, k, v = qkv(torch, ptr=0x100000 * (i + 1))
        assert F.scaled_dot_product_attention(q, k, v, is_causal=True) == "O"
        assert runs[-1][1] is q
    assert len(decides) == 1 and len(builds) == 1 and len(runs) == 5 and len(prov.by_key) == 1
    assert len({id(r[0]) for r in runs}) == 1
    assert (prov.cache.hits, prov.cache.misses, prov.served) == (4, 1, 5)
    # the same call spelled otherwise (positional is_causal; an explicit default): the key holds the bound values,
    # so the same key; an explicit scale equal to the default is another key, decided once, the same Config
    q, k, v = qkv(torch)
    for _ in range(2):
        F.scaled_dot_product_attention(q, k, v, None, 0.0, True)
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=False)
        F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.125)
    assert len(decides) == 2 and len(builds) == 1 and all(r[0] is runs[0][0] for r in runs)


def _changed(torch, change):
    """(q, k, v) like qkv(torch)'s with one thing changed, and what the Config then says."""
    if change == "strides":  # a (b, s, h, d) buffer seen as (b, h, s, d)
        bshd = (100 * 4 * 64, 64, 4 * 64, 1)
        return [Tensor((2, 4, 100, 64), torch.float16, stride=bshd) for _ in range(3)], lambda c: c.q[1] == bshd
    if change == "dtype":
        return qkv(torch, dtype=torch.bfloat16), lambda c: c.dtype == "bfloat16"
    if change == "shape":
        return qkv(torch, s=64), lambda c: c.q[0] == (2, 4, 64, 64)
    if change == "device":
        return qkv(torch, device=Device("cuda", 1)), lambda c: c.device == 1
    if change == "requires_grad":
        return qkv(torch, requires_grad=True), lambda c: c.requires_grad
    raise AssertionError(change)


@pytest.mark.parametrize("change", ["strides", "dtype", "shape", "device", "requires_grad"])
def test_a_changed_operand_is_decided_again(served, torch, change):
    """Another layout, dtype, shape, device or requires_grad on one operand set: not the steady state's key, so
    decided in full and served by a configuration of its own; the first one's key still finds its entry."""
    prov, builds, runs, decides = served
    F = torch.nn.functional
    base = qkv(torch)
    F.scaled_dot_product_attention(*base, is_causal=True)
    first = runs[-1][0]
    other, says = _changed(torch, change)
    for _ in range(2):
        F.scaled_dot_product_attention(*other, is_causal=True)
    assert len(decides) == 2 and len(builds) == 2
    assert runs[-1][0] is not first and says(runs[-1][0].cfg) and not says(first.cfg)
    F.scaled_dot_product_attention(*base, is_causal=True)
    assert runs[-1][0] is first and len(decides) == 2


def test_grad_mode_determinism_and_the_mask_are_in_the_key(served, torch):
    prov, builds, runs, decides = served
    F = torch.nn.functional
    q, k, v = qkv(torch, requires_grad=True)
    assert F.scaled_dot_product_attention(q, k, v) == "O(grad)"
    torch.grad_enabled = False
    assert F.scaled_dot_product_attention(q, k, v) == "O"  # no_grad: the inference configuration
    assert not runs[-1][0].cfg.requires_grad
    torch.grad_enabled = True
    torch.deterministic = True
    F.scaled_dot_product_attention(q, k, v)
    assert runs[-1][0].cfg.deterministic and len(builds) == 3
    torch.deterministic = False
    F.scaled_dot_product_attention(q, k, v)
    assert not runs[-1][0].cfg.deterministic and len(builds) == 3  # the first entry again
    mask = Tensor((100, 100), torch.float16)
    F.scaled_dot_product_attention(q, k, v, mask)
    F.scaled_dot_product_attention(q, k, v, attn_mask=Tensor((1, 4, 100, 100), torch.float16))
    assert len(builds) == 5 and runs[-1][0].cfg.bias[0] == (1, 4, 100, 100)
    assert runs[-2][4].shape == (1, 1, 100, 100)  # the 2-D mask bound as 4-D
    grad_mask = Tensor((100, 100), torch.float16, requires_grad=True)
    assert F.scaled_dot_product_attention(q, k, v, grad_mask) == "torch's result"  # a mask needing grad: torch's


STATE = {  # torch's state that the steady state checks at every call, as decide() does: (set it, the log says)
    "subclass": (None, "plain torch.Tensor"),
    "__torch_function__": (lambda t: setattr(t, "tf_on", True), "__torch_function__"),
    "functorch": (lambda t: setattr(t, "functorch_on", True), "functorch transform"),
    "autocast": (lambda t: setattr(t, "autocast_on", True), "autocast to torch.bfloat16"),
    "misaligned": (None, "aligned to 16 bytes"),
    "compiling": (lambda t: setattr(t, "compiling", True), None),  # torch's own op, unlogged (dynamo traces it)
}


@pytest.mark.parametrize("state", list(STATE))
def test_torchs_state_is_checked_at_every_call(served, torch, state, caplog):
    """A configuration in its steady state (decided, keyed) still goes to torch when torch's state or the operand
    object says so, at the first call of that state and at every call after; it is served again afterwards."""
    prov, builds, runs, decides = served
    F = torch.nn.functional
    set_state, said = STATE[state]
    q, k, v = qkv(torch)
    for _ in range(2):
        F.scaled_dot_product_attention(q, k, v)
    served_before = prov.served
    args = (q, k, v)
    if state == "subclass":
        class Sub(harness.Tensor):
            pass

        args = (Sub(q.shape, None, q.dtype, ptr=q.data_ptr()), k, v)
    elif state == "misaligned":
        args = (Tensor(q.shape, q.dtype, ptr=0x10008), k, v)
    else:
        set_state(torch)
    with caplog.at_level(logging.WARNING, logger="cudnn_py.torch"):
        for _ in range(3):
            assert F.scaled_dot_product_attention(*args) == "torch's result"
    assert prov.served == served_before and len(torch.calls) == 3
    logged = [r.getMessage() for r in caplog.records if r.name == "cudnn_py.torch"]
    if said is None:
        assert logged == []
    else:
        assert len(logged) == 1 and said in logged[0], logged
    torch.tf_on = torch.functorch_on = torch.autocast_on = torch.compiling = False  # torch's state as it was
    F.scaled_dot_product_attention(q, k, v)
    assert prov.served == served_before + 1 and len(builds) == 1


def test_a_fallback_is_decided_once_per_key_and_logged_once(served, torch, caplog):
    prov, builds, runs, decides = served
    F = torch.nn.functional
    q, k, v = qkv(torch)
    with caplog.at_level(logging.WARNING, logger="cudnn_py.torch"):
        for _ in range(4):
            assert F.scaled_dot_product_attention(q, k, v, dropout_p=0.2) == "torch's result"
    assert len(decides) == 1 and prov.fallbacks == 4 and not builds
    assert isinstance(next(iter(prov.by_key.values())), ct.Unsupported)
    assert len([r for r in caplog.records if r.name == "cudnn_py.torch"]) == 1


def test_odd_arguments_go_to_torch_without_a_crash(served, torch):
    prov, builds, runs, decides = served
    F = torch.nn.functional
    q, k, v = qkv(torch)
    assert F.scaled_dot_product_attention(q, k, v, scale=[0.1]) == "torch's result"  # unhashable: not keyed
    assert F.scaled_dot_product_attention(q, k, v, scale="0.1") == "torch's result"
    assert F.scaled_dot_product_attention(q, k, v, None, 0.0, False, 1) == "torch's result"  # a 7th positional
    assert F.scaled_dot_product_attention(q, k, v, 0.0, attn_mask=None) == "torch's result"  # given twice
    assert not builds and prov.served == 0


def test_the_key_map_keeps_no_entry_the_cache_dropped_and_use_keeps_an_entry(torch):
    ct.install(cache_size=2)
    prov = ct.provider()
    builds = []
    prov._build = lambda cfg: builds.append(cfg.q[0][2]) or ct.Entry(cfg, None, {})
    prov.forward = lambda entry, q, k, v, bias: ("O", None)
    F = torch.nn.functional
    call = lambda s: F.scaled_dot_product_attention(*qkv(torch, s=s))  # noqa: E731
    call(16)
    call(32)
    call(16)  # a steady-state hit: 16 is the most recently used now
    call(48)  # evicts 32 (not 16), and clears the key map
    assert prov.cache.evictions == 1 and len(prov.by_key) == 1
    call(16)
    call(32)  # rebuilt: the cache dropped it
    assert builds == [16, 32, 48, 32]
    assert all(e.cfg in prov.cache for e in prov.by_key.values())


def harnessed_provider(monkeypatch, offered: list | None = None):
    """The installed provider building real forward graphs (validated on cuDNN, deviceless) whose bound execute
    (``Executor.fast``, as pygraph installs it) records what cuDNN would run (the execute harness's Recorder); with
    ``offered``, each graph also offers its split execute (``Executor.fast_trusted``, as pygraph does once the plan
    is bound), noting in ``offered`` whether one was made. Returns (provider, the graphs' executors in build order)."""
    from cudnn_py import interop

    harness.fake_default_handles(monkeypatch)
    monkeypatch.setattr(interop, "_placements", {})
    ct.install()
    prov = ct.provider()
    graphs: list = []

    def build(cfg):
        g, ts = ct.forward_graph(cudnn, cfg)
        g.validate()
        ex = g.session.executor
        ex._backend_execute = harness.Recorder()
        plan = harness.FakePlan()
        g.execute = ex.fast(plan)  # what pygraph installs as its execute after the first one
        if offered is not None:
            def split(checked, allocated):
                run = ex.fast_trusted(plan, checked, allocated)
                offered.append(run is not None)
                return run

            g._trusted_execute = split
        graphs.append(ex)
        return ct.Entry(cfg, g, ts)

    prov._build = build
    return prov, graphs


@pytest.mark.usefixtures("registered_fake_handles")
def test_the_steady_state_executes_through_the_checked_bound_execute(torch, monkeypatch):
    """End to end with the execute harness: real forward graphs (validated on cuDNN, deviceless), their bound
    execute (``Executor.fast``, as pygraph installs it) recording what cuDNN would run. Every call executes with its
    own fresh output; and an entry of another layout under a call's key (which the key rules out) is still refused
    by the execute's operand check: the provider's key is not what makes an operand safe."""
    prov, graphs = harnessed_provider(monkeypatch)
    torch.grad_enabled = False
    F = torch.nn.functional
    q, k, v = qkv(torch, ptr=None)
    outs = [F.scaled_dot_product_attention(q, k, v, is_causal=True) for _ in range(3)]
    (ex,) = graphs
    assert len({o.data_ptr() for o in outs}) == 3
    for o, (_handle, ptrs, _ws) in zip(outs, ex._backend_execute.calls):
        assert {t.data_ptr() for t in (q, k, v, o)} <= set(ptrs)  # (beside the graph's own scalars)
    assert len(ex._backend_execute.calls) == 3
    # an entry built for (b, s, h, d) strides, served under the contiguous call's key: refused, nothing executed
    bshd = [Tensor((2, 4, 100, 64), torch.float16, stride=(100 * 4 * 64, 64, 4 * 64, 1), ptr=None) for _ in range(3)]
    F.scaled_dot_product_attention(*bshd, is_causal=True)
    (key, entry), (other_key, other) = prov.by_key.items()
    prov.by_key[key] = other
    with pytest.raises(ValueError, match=r"tensor 'q' \(uid \d+\).*strides"):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert len(graphs[1]._backend_execute.calls) == 1


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


@pytest.mark.usefixtures("registered_fake_handles")
def test_after_the_first_call_the_split_execute_serves_and_still_rechecks_q(torch, monkeypatch):
    """End to end with the execute harness, as above, with the graphs' split execute offered (on a GPU pygraph
    offers it once the plan is bound): the first call of an entry goes through the checked execute, the later ones
    through the split form with exactly their own pointers (O fresh each time, not re-checked); q, k and v are still
    re-checked, so an entry of another layout served under a call's key is refused and nothing executes."""
    offered: list = []
    prov, graphs = harnessed_provider(monkeypatch, offered)
    torch.grad_enabled = False
    F = torch.nn.functional
    q, k, v = qkv(torch, ptr=None)
    outs = [F.scaled_dot_product_attention(q, k, v, is_causal=True) for _ in range(4)]
    (ex,) = graphs
    assert offered == [True]  # made once, after the first (checked) call
    (entry,) = prov.cache.values()
    assert entry.fwd_trusted is not None and entry.fwd_trusted[0] is entry.fwd.__dict__["execute"]
    assert len(ex._backend_execute.calls) == 4
    for o, (_handle, ptrs, _ws) in zip(outs, ex._backend_execute.calls):
        assert {t.data_ptr() for t in (q, k, v, o)} <= set(ptrs)
    bshd = [Tensor((2, 4, 100, 64), torch.float16, stride=(100 * 4 * 64, 64, 4 * 64, 1), ptr=None) for _ in range(3)]
    for _ in range(2):  # its own entry; its split form made after its first call
        F.scaled_dot_product_attention(*bshd, is_causal=True)
    (key, _), (other_key, other) = prov.by_key.items()
    prov.by_key[key] = other  # a key map gone wrong: the BSHD entry under the BHSD call's key
    assert other.fwd_trusted is not None
    with pytest.raises(ValueError, match=r"tensor 'q' \(uid \d+\).*strides"):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert len(graphs[1]._backend_execute.calls) == 2
