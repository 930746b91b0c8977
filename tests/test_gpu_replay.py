"""GPU: the repeated execute replayed as a CUDA graph (plans/execute_replay.py). Every case runs the graph several times with
fresh random inputs written in place and outputs poisoned (NaN) before each run, against float64 references; the
replay statistics say what was recorded and launched, so a case that never replays cannot pass as one that does.
"""
from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys

import pytest

import cudnn_py as cudnn
from cudnn_py.backend import trace

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

F, BF16 = cudnn.data_type.FLOAT, cudnn.data_type.BFLOAT16
TOL = 2e-2  # bf16 attention against float64


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    assert torch.isfinite(out).all(), "output has NaN/Inf: not every element was written"
    return ((out - ref).norm() / ref.norm()).item()


def attention_reference(q, k, v, causal=True):
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def sdpa_forward(b=2, h=4, s=160, d=64, handle=None):
    """A causal bf16 sdpa graph, built; returns (graph, {name: graph tensor}, {name: buffer})."""
    bufs = {n: torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for n in ("q", "k", "v")}
    bufs["o"] = torch.empty_like(bufs["q"])
    kw = {"handle": handle} if handle is not None else {}
    g = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=F, compute_data_type=F, **kw)
    ts = {n: g.tensor_like(bufs[n]) for n in ("q", "k", "v")}
    ts["o"], _ = g.sdpa(q=ts["q"], k=ts["k"], v=ts["v"], generate_stats=False, attn_scale=1 / math.sqrt(d),
                        use_causal_mask=True)
    ts["o"].set_output(True).set_dim([b, h, s, d]).set_stride(list(bufs["o"].stride()))
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, ts, bufs


def refresh(bufs, outs=("o",)):
    """Fresh random inputs, written in place (same pointers); outputs poisoned."""
    for n, t in bufs.items():
        if n in outs:
            t.fill_(float("nan"))
        else:
            t.copy_(torch.randn_like(t))


def stats(g):
    return g.session.executor.replays.stats()


def run_and_check(g, ts, bufs, calls, **execute_kw):
    pack = {ts[n]: bufs[n] for n in ts}
    for _ in range(calls):
        refresh(bufs)
        g.execute(pack, **execute_kw)
        torch.cuda.synchronize()
        assert rel_err(bufs["o"], attention_reference(bufs["q"], bufs["k"], bufs["v"])) < TOL


@pytest.mark.parametrize("with_handle", [False, True], ids=["default-handle", "explicit-handle"])
def test_repeated_execute_is_recorded_once_and_replayed(with_handle):
    h = cudnn.create_handle() if with_handle else None
    if h is not None:
        cudnn.set_stream(handle=h, stream=torch.cuda.current_stream().cuda_stream)
    g, ts, bufs = sdpa_forward(handle=h)
    # call 1 takes the checked path, call 2 the fast path (which notes the binding), call 3 records and launches it
    run_and_check(g, ts, bufs, 6)
    st = stats(g)
    assert st["enabled"] and st["failures"] == [], st
    assert (st["captures"], st["recorded"], st["launches"]) == (1, 1, 4), st


def test_backward_is_replayed_and_correct():
    b, h, s, d = 1, 2, 128, 64
    x = {n: torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for n in ("q", "k", "v", "dO")}
    g = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=F, compute_data_type=F)
    T = {n: g.tensor_like(x[n]) for n in ("q", "k", "v", "dO")}
    x["o"] = torch.empty_like(x["q"])
    x["stats"] = torch.empty(b, h, s, 1, device="cuda", dtype=torch.float32)
    T["o"], T["stats"] = g.tensor_like(x["o"]), g.tensor_like(x["stats"])
    dq, dk, dv = g.sdpa_backward(q=T["q"], k=T["k"], v=T["v"], o=T["o"], dO=T["dO"], stats=T["stats"],
                                 attn_scale=1 / math.sqrt(d), use_causal_mask=True)
    grads = {"dQ": dq, "dK": dk, "dV": dv}
    for n, t in grads.items():
        x[n] = torch.empty_like(x["q"])
        t.set_output(True).set_dim([b, h, s, d]).set_stride(list(x[n].stride()))
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    pack = {**{T[n]: x[n] for n in T}, **{grads[n]: x[n] for n in grads}}
    for _ in range(5):
        leaves = [torch.randn(b, h, s, d, device="cuda", dtype=torch.float64, requires_grad=True) for _ in range(3)]
        for n, leaf in zip(("q", "k", "v"), leaves):
            x[n].copy_(leaf.detach())
        x["dO"].copy_(torch.randn_like(x["dO"]))
        qd, kd, vd = (x[n].double().requires_grad_() for n in ("q", "k", "v"))
        sc = qd @ kd.transpose(-1, -2) / math.sqrt(d)
        sc = sc.masked_fill(~torch.ones(s, s, dtype=torch.bool, device="cuda").tril(), float("-inf"))
        o = torch.softmax(sc, -1) @ vd
        x["o"].copy_(o.detach())
        x["stats"].copy_(torch.logsumexp(sc, -1, keepdim=True).detach())
        ref = dict(zip(("dQ", "dK", "dV"), torch.autograd.grad(o, (qd, kd, vd), x["dO"].double())))
        for n in grads:
            x[n].fill_(float("nan"))
        g.execute(pack)
        torch.cuda.synchronize()
        for n in grads:
            assert rel_err(x[n], ref[n]) < TOL, n
    st = stats(g)
    assert st["captures"] == 1 and st["launches"] == 3, st


def test_other_pointers_are_recorded_apart():
    g, ts, bufs = sdpa_forward()
    other = torch.empty_like(bufs["o"])
    first = bufs["o"]
    for out in (first, first, first, other, other, other, first, first):
        bufs["o"] = out
        run_and_check(g, ts, bufs, 1)
    st = stats(g)
    assert (st["captures"], st["recorded"]) == (2, 2), st
    # the 3rd and 6th call record (and launch); the 7th (other pointers than the call before, a variant pack of
    # the cache) and the 8th launch the first recording
    assert st["launches"] == 4, st


def test_set_stream_takes_effect_for_a_recorded_binding():
    """The replay launches on the handle's stream of the call: work queued ahead of it on that stream (a long
    kernel chain, then fresh inputs) is waited for. Launched on the old stream, it would read stale inputs."""
    h = cudnn.create_handle()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    cudnn.set_stream(handle=h, stream=s1.cuda_stream)
    g, ts, bufs = sdpa_forward(handle=h)
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)  # one for both streams
    pack = {ts[n]: bufs[n] for n in ts}
    with torch.cuda.stream(s1):
        for _ in range(3):
            g.execute(pack, ws, handle=h)
    torch.cuda.synchronize()
    assert stats(g)["captures"] == 1
    cudnn.set_stream(handle=h, stream=s2.cuda_stream)
    with torch.cuda.stream(s2):
        m = torch.randn(4096, 4096, device="cuda") / 64
        for _ in range(8):
            m = m @ m  # keeps s2 busy
        refresh(bufs)  # fresh inputs written on s2, after the chain
        g.execute(pack, ws, handle=h)
    torch.cuda.synchronize()
    assert stats(g)["launches"] == 2
    assert rel_err(bufs["o"], attention_reference(bufs["q"], bufs["k"], bufs["v"])) < TOL


def test_the_callers_stream_capture_records_the_execute_not_a_replay():
    """Inside torch.cuda.graph the call executes normally (launching a graph into a capturing stream would
    invalidate the caller's capture), and the caller's graph then computes the attention of new inputs."""
    h = cudnn.create_handle()
    cudnn.set_stream(handle=h, stream=torch.cuda.current_stream().cuda_stream)
    g, ts, bufs = sdpa_forward(handle=h)
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    run_and_check(g, ts, bufs, 3, workspace=ws, handle=h)
    assert stats(g)["launches"] == 1
    pack = {ts[n]: bufs[n] for n in ts}
    torch_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(torch_graph):
        cudnn.set_stream(handle=h, stream=torch.cuda.current_stream().cuda_stream)
        g.execute(pack, ws, handle=h)
    cudnn.set_stream(handle=h, stream=torch.cuda.current_stream().cuda_stream)
    assert stats(g)["launches"] == 1  # not replayed inside the capture
    for _ in range(2):
        refresh(bufs)
        torch_graph.replay()
        torch.cuda.synchronize()
        assert rel_err(bufs["o"], attention_reference(bufs["q"], bufs["k"], bufs["v"])) < TOL
    run_and_check(g, ts, bufs, 1, workspace=ws, handle=h)  # and replay works after it
    assert stats(g)["launches"] == 2


def test_a_new_handle_at_a_reused_address_does_not_get_the_old_recording():
    h1 = cudnn.create_handle()
    cudnn.set_stream(handle=h1, stream=torch.cuda.current_stream().cuda_stream)
    g, ts, bufs = sdpa_forward()  # planned with the default handle: h1 only executes it
    run_and_check(g, ts, bufs, 3, handle=h1)
    assert stats(g)["launches"] == 1
    cudnn.destroy_handle(h1)
    h2 = cudnn.create_handle()
    cudnn.set_stream(handle=h2, stream=torch.cuda.current_stream().cuda_stream)
    run_and_check(g, ts, bufs, 1, handle=h2)
    assert stats(g)["launches"] == 1  # the recording belongs to h1's registry record, whatever h2's address
    run_and_check(g, ts, bufs, 1, handle=h2)
    assert (stats(g)["captures"], stats(g)["launches"]) == (2, 2)


def test_tracing_turns_replay_off():
    g, ts, bufs = sdpa_forward()
    run_and_check(g, ts, bufs, 3)
    assert stats(g)["launches"] == 1
    out = io.StringIO()
    with trace.tracing(out):
        run_and_check(g, ts, bufs, 3)
        text = out.getvalue()
    executes = [r for r in map(json.loads, text.splitlines())
                if r.get("fn") == "cudnnBackendExecute" and r.get("phase") == "begin"]
    assert len(executes) == 3  # every call a real, traced cudnnBackendExecute
    assert stats(g)["launches"] == 1


def test_a_graph_with_a_callers_host_scalar_is_never_replayed():
    """layernorm's epsilon given as a host (pass-by-value) tensor at each call: a replay would keep the value of
    its recording, so the executor does not replay, and a changed epsilon changes the output."""
    x = torch.randn(16, 256, 1, 1, device="cuda")
    s, b = torch.randn(1, 256, 1, 1, device="cuda"), torch.randn(1, 256, 1, 1, device="cuda")
    eps = torch.full((1, 1, 1, 1), 1e-5, dtype=torch.float32)
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F)
    X, S, B, E = g.tensor_like(x), g.tensor_like(s), g.tensor_like(b), g.tensor_like(eps)
    y, _, _ = g.layernorm(cudnn.norm_forward_phase.INFERENCE, X, S, B, E)
    y.set_output(True)
    g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    out = torch.empty_like(x)
    for value in (1e-5, 1e-5, 1e-5, 4.0, 4.0, 1e-5):
        eps.fill_(value)  # in place: the same host pointer
        out.fill_(float("nan"))
        g.execute({X: x, S: s, B: b, E: eps, y: out})
        torch.cuda.synchronize()
        ref = torch.nn.functional.layer_norm(x.double(), (256, 1, 1), s.double().reshape(256, 1, 1),
                                             b.double().reshape(256, 1, 1), value)
        assert rel_err(out, ref) < 5e-3, value
    st = stats(g)
    assert not st["enabled"] and "pass-by-value" in st["refusal"] and st["launches"] == 0, st


def test_the_environment_variable_turns_replay_off():
    script = (
        "import math, torch, cudnn_py as cudnn\n"
        "from tests.test_gpu_replay import sdpa_forward, run_and_check, stats\n"
        "g, ts, bufs = sdpa_forward()\n"
        "run_and_check(g, ts, bufs, 4)\n"
        "print(stats(g))\n")
    env = {**os.environ, "CUDNN_PY_REPLAY": "0"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "'enabled': False" in r.stdout and "CUDNN_PY_REPLAY=0" in r.stdout and "'launches': 0" in r.stdout, r.stdout


def test_a_dropped_graph_releases_plans_packs_and_recordings_at_once():
    """A built graph, executed until replayed, then dropped with the cyclic collector off: its descriptors (the
    operation graph, plans, variant packs) are destroyed and its recorded CUDA graph execs go at once (no reference
    cycle runs through a graph or its session)."""
    import weakref

    from cudnn_py.backend import descriptor as descriptor_mod
    from tests.support.collector import collector_off

    g, ts, bufs = sdpa_forward()  # first: what the process keeps for any graph (default handle, caches) is made
    run_and_check(g, ts, bufs, 4)
    del g, ts, bufs
    with collector_off():
        before = set(descriptor_mod._live)
        g, ts, bufs = sdpa_forward()
        run_and_check(g, ts, bufs, 4)
        replays = list(g.session.executor.replays.recorded.values())
        assert replays, stats(g)
        recorded, alive = weakref.ref(replays[0]), weakref.ref(g)
        made = set(descriptor_mod._live) - before
        assert made
        del g, ts, replays
        assert alive() is None and recorded() is None
        assert not set(descriptor_mod._live) - before, "descriptors of the dropped graph are still alive"


def test_a_recording_destroyed_while_its_launch_is_in_flight_still_completes():
    """A recording forgotten right after its launch, while the launch still waits in the stream (queued behind a
    GPU sleep): its CUDA graph exec is destroyed at once (cuGraphExecDestroy frees an in-flight exec when its
    launch completes), the launched work completes and is correct, and the next calls record the binding again."""
    import weakref

    from tests.support.collector import collector_off

    g, ts, bufs = sdpa_forward(s=1024)
    run_and_check(g, ts, bufs, 3)  # the third call is recorded and launched
    replays = g.session.executor.replays
    assert (replays.stats()["recorded"], replays.stats()["launches"]) == (1, 1), replays.stats()
    refresh(bufs)
    ref = attention_reference(bufs["q"], bufs["k"], bufs["v"])
    pack = {ts[n]: bufs[n] for n in ts}
    torch.cuda.synchronize()
    with collector_off():  # its collection (~0.1 s in a suite's heap) comes before the sleep, not inside it
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time ahead of the launch
        g.execute(pack)
        assert replays.stats()["launches"] == 2, replays.stats()
        recorded = weakref.ref(next(iter(replays.recorded.values())))
        replays.recorded.clear()
        replays.last = None
        assert recorded() is None, "the recording is still referenced: its exec was not destroyed"
    assert not torch.cuda.current_stream().query(), "the launch was not in flight when its exec was destroyed"
    torch.cuda.synchronize()
    assert rel_err(bufs["o"], ref) < TOL
    run_and_check(g, ts, bufs, 3)  # recorded again on the second fast call in a row, and correct
    assert replays.stats()["captures"] == 2, replays.stats()


def test_a_thread_that_did_no_cuda_work_launches_the_recording_too():
    """A worker thread that has done no CUDA work has no current context, and with one device the fast path does
    not read it. Its first execute (the slow path) makes the handle's context current there; its next ones launch
    the recording made on the main thread, correctly, and the plan keeps its replay."""
    import threading

    from cudnn_py.backend.handle import context_of
    from cudnn_py.cuda import context

    if torch.cuda.device_count() > 1:
        pytest.skip("with several devices each call on a thread without the handle's context takes the slow path")
    h = cudnn.create_handle()
    g, ts, bufs = sdpa_forward(handle=h)
    run_and_check(g, ts, bufs, 4, handle=h)  # recorded on this thread
    refresh(bufs)
    ref = attention_reference(bufs["q"], bufs["k"], bufs["v"])
    torch.cuda.synchronize()
    before = stats(g)
    pack = {ts[n]: bufs[n] for n in ts}
    seen: dict = {}

    def work():
        seen["context before"] = context.current()
        try:
            for _ in range(4):
                g.execute(pack, None, handle=h)
        except Exception as e:  # reported by the main thread
            seen["error"] = repr(e)
        seen["context after"] = context.current()

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(60)
    torch.cuda.synchronize()
    assert "error" not in seen, seen
    assert seen["context before"] == 0 and seen["context after"] == context_of(h), seen
    assert rel_err(bufs["o"], ref) < TOL
    after = stats(g)
    # the first call took the slow path (and made the context current), the next three launched the recording; a
    # version that took "this thread has out-parameters" for "this thread has executed" (this test's own
    # context.current() makes them) launched with no context and dropped the recording (seen on the H200)
    assert after["launches"] - before["launches"] == 3 and not after["failures"], after
    assert after["refused_plans"] == {}, after


def test_the_steady_states_hot_path_rechecks_every_operand():
    """Once a recording is launched by two calls in a row, later calls take the hot path of Executor.fast: with
    fresh inputs each call the output stays right, and an operand changed in place (same tensor object, same
    pointer: `t.data = t.view(...)` and `as_strided_`) is still refused with nothing launched."""
    h = cudnn.create_handle()
    g, ts, bufs = sdpa_forward(handle=h)
    ws = torch.empty(max(1, g.get_workspace_size()), device="cuda", dtype=torch.uint8)
    run_and_check(g, ts, bufs, 8, workspace=ws, handle=h)
    before = stats(g)
    assert before["launches"] >= 5 and before["failures"] == [], before
    pack = {ts[n]: bufs[n] for n in ts}
    q = bufs["q"]
    saved = q.data
    # (a same-size dtype, or a dense operand of another shape, is read as a buffer as the official module reads it;
    # another element size and a view with gaps are refused)
    for change, match in ((lambda t: setattr(t, "data", t.data.view(torch.float32)), "BFLOAT16|dtype"),
                          (lambda t: t.as_strided_((t.shape[0], t.shape[1], t.shape[2], t.shape[3] // 2),
                                                   (t.stride(0), t.stride(1), t.stride(2), 1)), "shape")):
        change(q)
        bufs["o"].fill_(float("nan"))
        with pytest.raises(ValueError, match=match):
            g.execute(pack, ws, handle=h)
        torch.cuda.synchronize()
        assert torch.isnan(bufs["o"]).all(), "something ran with the changed operand"
        q.data = saved
    assert stats(g)["launches"] == before["launches"]
    run_and_check(g, ts, bufs, 3, workspace=ws, handle=h)
    assert stats(g)["launches"] == before["launches"] + 3
