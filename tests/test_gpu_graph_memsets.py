"""GPU: cuda/graph_memsets.py's kernel nodes write what the memset nodes they replace would have written. Memsets
of each element size, 1D and 2D (pitched rows), captured into a graph on a private stream and instantiated with
their memsets as kernel nodes; the buffer around the rows (poisoned 0xAB) must stay as it was. Then a replayed
attention forward: its recording's memset became a kernel node and its output equals the executed call's, bit for
bit (the same kernels with the same inputs)."""
from __future__ import annotations

import ctypes
import math

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import versions
from cudnn_py.cuda import capture, context, driver

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

POISON = 0xAB
FILLS = {  # element size -> (driver entry point, its value's ctypes type, the value)
    1: ("cuMemsetD2D8Async", ctypes.c_ubyte, 0x5A),
    2: ("cuMemsetD2D16Async", ctypes.c_ushort, 0xBEEF),
    4: ("cuMemsetD2D32Async", ctypes.c_uint, 0x12345678),
}


def driver_call(name, *argtypes):
    """The raw entry point (an int status back, as capture() expects of the call it captures)."""
    fn = getattr(driver.raw(), name)
    fn.argtypes, fn.restype = list(argtypes), ctypes.c_int
    return fn


@pytest.mark.parametrize("size", [1, 2, 4])
@pytest.mark.parametrize("width, height, pitch", [(4, 1, 0), (1000, 1, 0), (37, 5, 512), (3, 300, 16)])
def test_a_memset_as_a_kernel_node_writes_the_same_bytes(size, width, height, pitch):
    torch.cuda.init()
    name, value_type, value = FILLS[size]
    fill = driver_call(name, ctypes.c_uint64, ctypes.c_size_t, value_type, ctypes.c_size_t, ctypes.c_size_t,
                       ctypes.c_void_p)
    row = pitch or width * size
    buf = torch.full((row * height + 256,), POISON, device="cuda", dtype=torch.uint8)
    dst = buf.data_ptr() + 64  # not at the start of the buffer: the bytes before it must stay too
    torch.cuda.synchronize()
    stream = capture.side_stream()
    got = capture.capture(stream, lambda: fill(dst, row, value, width, height, stream), memsets_as_kernels=True)
    assert got.exec and (got.memsets_replaced, got.memsets_kept) == (1, ""), got
    try:
        torch.cuda.synchronize()
        assert buf.eq(POISON).all()  # captured, the memset enqueued nothing
        assert capture.driver().cuGraphLaunch(got.exec, stream) == 0
        torch.cuda.synchronize()
    finally:
        capture.destroy_exec(got.exec)
    expected = torch.full_like(buf, POISON).cpu()
    element = torch.tensor(list(value.to_bytes(size, "little")), dtype=torch.uint8)
    for r in range(height):
        start = 64 + r * row
        expected[start:start + width * size] = element.repeat(width)
    assert torch.equal(buf.cpu(), expected)


def test_a_replayed_attention_forward_launches_kernel_nodes_and_equals_the_execute(monkeypatch):
    from cudnn_py.plans import execute_replay as replay

    monkeypatch.delenv(replay.MEMSET_KERNELS_ENV, raising=False)  # on by default
    b, h, s, d = 2, 4, 256, 64
    bufs = {n: torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for n in ("q", "k", "v")}
    g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT)
    ts = {n: g.tensor_like(bufs[n]) for n in ("q", "k", "v")}
    o, _ = g.sdpa(q=ts["q"], k=ts["k"], v=ts["v"], generate_stats=False, attn_scale=1 / math.sqrt(d),
                  use_causal_mask=True)
    o.set_output(True).set_dim([b, h, s, d]).set_stride([h * s * d, s * d, d, 1])
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    out = torch.empty_like(bufs["q"])
    pack = {**{ts[n]: bufs[n] for n in ts}, o: out}
    outputs = []
    for _ in range(4):  # executed, executed (noted), recorded and launched, launched
        out.fill_(float("nan"))
        g.execute(pack)
        torch.cuda.synchronize()
        outputs.append(out.clone())
    st = g.session.executor.replays.stats()
    assert (st["captures"], st["launches"]) == (1, 2), st
    assert st["memsets_kept"] == [], st
    if versions.runtime_version() // 100 == 919:  # seen there: the forward starts with a 4-byte memset
        assert st["memsets_as_kernels"] == 1, st
    assert torch.isfinite(outputs[0]).all()
    for replayed in outputs[2:]:
        assert torch.equal(replayed, outputs[0])


def test_the_current_context_has_an_id_that_stays_while_it_lives():
    """What the memset kernels and the capture streams are cached by (context.current_id)."""
    torch.zeros(1, device="cuda")  # the primary context current on this thread
    ctx_id = context.current_id()
    assert isinstance(ctx_id, int) and ctx_id == context.current_id()
