"""GPU: the disk cache across processes (plans/disk_planning.py, issue #29). Every case runs fresh processes (a child
script, each bounded by a timeout) sharing a temporary ``CUDNN_PY_CACHE_DIR``: the first builds the graph (a miss:
heuristics queried, the plan finalized from its engine config, the entry written), the second must build it from
the entry - no heuristics query (no ENGINEHEUR descriptor in its trace); a plan of a runtime-compiled engine
rebuilt from its JSON, which carries the kernels (no plan finalized from an engine config: nothing compiled), with
``explain()`` naming the disk cache; a precompiled engine's plan finalized from its config - and compute what the first computed: seeded inputs, output and workspace poisoned (NaN / 0xFF), both
against float64, and the two outputs bit for bit. A tampered entry is dropped and the graph built normally; an
entry of another device kind or cuDNN is a miss. The CPU side (keys, hostile entries, the wiring with stand-ins):
tests/test_disk_planning.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_py import cache_trust
from cudnn_py.plans import disk_cache, disk_planning

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT = 300  # s: a cold SDPA build compiles for about a second on an H200; torch's import takes a few

CHILD = r'''
import hashlib, json, math, sys, time
import torch
import cudnn_py as cudnn
from cudnn_py.backend import trace

case, trace_path = sys.argv[1], sys.argv[2]
torch.manual_seed(1234)
torch.cuda.set_device(0)
torch.empty(1, device="cuda")
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT
MODES = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]


def matmul():
    m, k, n = 256, 512, 192
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, name="mm")
    A = g.tensor(name="A", dim=[1, m, k], stride=[m * k, k, 1], data_type=H)
    B = g.tensor(name="B", dim=[1, k, n], stride=[k * n, n, 1], data_type=H)
    C = g.matmul(A, B, name="mm").set_output(True).set_data_type(F)
    a = torch.randn(1, m, k, device="cuda", dtype=torch.half)
    b = torch.randn(1, k, n, device="cuda", dtype=torch.half)
    out = torch.full((1, m, n), float("nan"), device="cuda", dtype=torch.float)
    return g, {A: a, B: b, C: out}, out, a.double() @ b.double(), 2e-3


def sdpa():
    b, h, s, d = 2, 3, 256, 64
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, name="attn")
    T = {n: g.tensor(name=n, dim=[b, h, s, d], stride=[h * s * d, s * d, d, 1], data_type=H) for n in "qkv"}
    o, _ = g.sdpa(name="attn", q=T["q"], k=T["k"], v=T["v"], generate_stats=False, attn_scale=1 / math.sqrt(d),
                  use_causal_mask=True)
    o.set_output(True).set_dim([b, h, s, d]).set_stride([h * s * d, s * d, d, 1])
    x = {n: torch.randn(b, h, s, d, device="cuda", dtype=torch.half) for n in "qkv"}
    out = torch.full((b, h, s, d), float("nan"), device="cuda", dtype=torch.half)
    sc = x["q"].double() @ x["k"].double().transpose(-1, -2) / math.sqrt(d)
    sc = sc.masked_fill(~torch.ones(s, s, dtype=torch.bool, device="cuda").tril(), float("-inf"))
    ref = torch.softmax(sc, -1) @ x["v"].double()
    return g, {T["q"]: x["q"], T["k"]: x["k"], T["v"]: x["v"], o: out}, out, ref, 1e-2


g, pack, out, ref, tol = {"matmul": matmul, "sdpa": sdpa}[case]()
with trace.tracing(trace_path):
    t0 = time.perf_counter()
    g.build(MODES)
    build_ms = (time.perf_counter() - t0) * 1e3
report = json.loads(g.explain("json"))  # (after the trace: explain asks the deferred heuristics modes)
ws = torch.full((max(1, g.get_workspace_size()),), 255, device="cuda", dtype=torch.uint8)
g.execute(pack, ws)
torch.cuda.synchronize()
o64 = out.double()
finite = bool(torch.isfinite(o64).all())
rel = ((o64 - ref).norm() / ref.norm()).item() if finite else float("inf")
calls = trace.calls(trace_path)
made = lambda kind: sum(1 for c in calls if c["fn"] == "cudnnBackendCreateDescriptor" and c.get("kind") == kind)
sets = lambda attr: sum(1 for c in calls if c["fn"] == "cudnnBackendSetAttribute" and c.get("attr") == attr)
default = report["engine_configs"][report["default_plan"]]
print("RESULT " + json.dumps({
    "build_ms": build_ms, "finite": finite, "rel_err": rel, "tol": tol,
    "out_sha": hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest(),
    "plan_origin": default.get("plan_origin"), "plan_name": default["name"],
    "disk_lines": report.get("disk_cache", []),
    "engineheur": made("CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR"),
    "plans_from_config": sets("CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG"),
    "plans_from_json": sets("CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION"),
    "disk_events": [c.get("event") for c in calls if c["fn"] == "cudnn_py.disk_cache"],
}))
'''


def run_child(case: str, cache_dir: Path, tmp_path: Path, tag: str) -> dict:
    """One fresh process building and executing ``case``; its RESULT record (the test fails naming the process's
    output if it crashed, hung or printed none)."""
    env = {**os.environ, "CUDNN_PY_CACHE": "1", "CUDNN_PY_CACHE_DIR": str(cache_dir),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("CUDNN_PY_TRACE", None)
    trace_path = tmp_path / f"{case}-{tag}.jsonl"
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, case, str(trace_path)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{case} ({tag}) did not finish in {CHILD_TIMEOUT} s: {str(e.stderr)[-3000:]}")
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"{case} ({tag}) exit {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    r = json.loads(lines[-1][len("RESULT "):])
    assert r["finite"], f"{case} ({tag}): the output has NaN / Inf: not every element was written ({r})"
    assert r["rel_err"] < r["tol"], f"{case} ({tag}) against float64: {r}"
    return r


def assert_built(r: dict, case: str) -> None:
    assert r["plan_origin"] == "built", r
    assert r["engineheur"] >= 1 and r["plans_from_config"] >= 1, r


def assert_from_disk(r: dict, compiled: bool = True) -> None:
    """A build from the entry: no heuristics query; a plan with compiled kernels rebuilt from its JSON (nothing
    compiled), one without finalized from its config (its JSON would only name the engine and knobs)."""
    assert r["engineheur"] == 0, f"a heuristics query was made: {r}"
    assert r["disk_events"] == ["hit"], r
    if compiled:
        assert r["plan_origin"] == "disk cache", r
        assert r["plans_from_config"] == 0, f"a plan was finalized from an engine config (a compile): {r}"
        assert r["plans_from_json"] == 1, r
    else:
        assert r["plan_origin"] == "built" and r["plans_from_config"] == 1 and r["plans_from_json"] == 0, r
        assert any("finalized from its config" in line for line in r["disk_lines"]), r


def entry_carries_kernels(cache: Path) -> bool:
    (stored,) = disk_cache.DiskCache(cache).entries()
    plan = json.loads(Path(stored.path).read_text())["payload"]["plan"]["json"]
    return disk_planning.carries_kernels(json.loads(plan))


@pytest.mark.parametrize("case", ["matmul", "sdpa"])
def test_a_second_process_builds_from_the_disk_cache_and_computes_the_same(case, tmp_path):
    cache = tmp_path / "cache"
    cold = run_child(case, cache, tmp_path, "cold")
    assert_built(cold, case)
    assert cold["disk_events"][0] == "miss" and "stored" in cold["disk_events"], cold
    assert len(list(cache.glob("*.entry"))) == 1 and disk_cache.DiskCache(cache).verify() == []
    compiled = entry_carries_kernels(cache)
    assert compiled or case != "sdpa", "an SDPA plan is compiled at run time: its JSON carries the kernels"
    warm = run_child(case, cache, tmp_path, "warm")
    assert_from_disk(warm, compiled)
    assert warm["plan_name"] == cold["plan_name"]
    assert warm["out_sha"] == cold["out_sha"], "the plan rebuilt from the disk computed other bits"
    print(f"{case}: first build cold {cold['build_ms']:.1f} ms, warm {warm['build_ms']:.1f} ms")


def _rewrite(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    h = cache_trust.home(str(path.parent))  # (this user's cudnn_py: the directory's key seals it)
    assert h is not None
    doc["checksum"] = disk_cache.seal(doc, h.key)
    path.write_text(json.dumps(doc))


def _other_workspace(doc):
    doc["payload"]["plan"]["workspace"] += 256  # schema-valid: only the check after the rebuild catches it


def _other_tensors(doc):
    plan = json.loads(doc["payload"]["plan"]["json"])
    for t in plan["operationGraph"]["tensors"]:  # a plan for longer sequences: refused before cuDNN sees it
        t["dim"] = [x * 2 if i == 2 else x for i, x in enumerate(t["dim"])]
    doc["payload"]["plan"]["json"] = json.dumps(plan)


TAMPER = {"workspace": lambda p: _rewrite(p, _other_workspace), "other-tensors": lambda p: _rewrite(p, _other_tensors),
          "corrupt": lambda p: p.write_bytes(p.read_bytes()[:-40] + b"x" * 40)}


@pytest.mark.parametrize("how", sorted(TAMPER))
def test_a_tampered_entry_is_dropped_and_the_result_still_right(how, tmp_path):
    cache = tmp_path / "cache"
    run_child("sdpa", cache, tmp_path, "cold")
    (path,) = cache.glob("*.entry")
    TAMPER[how](path)
    r = run_child("sdpa", cache, tmp_path, "tampered")  # right against float64 (run_child checks)
    assert r["plan_origin"] == "built", r
    assert any(line.startswith("dropped") for line in r["disk_lines"]) and "dropped" in r["disk_events"], r
    assert r["disk_lines"][-1].startswith("stored"), r  # written afresh from the plan built
    assert_from_disk(run_child("sdpa", cache, tmp_path, "again"))


@pytest.mark.parametrize("field", ["compute_capability", "cudnn_version"])
def test_an_entry_of_another_device_kind_or_cudnn_is_a_miss(field, tmp_path):
    cache = tmp_path / "cache"
    run_child("matmul", cache, tmp_path, "cold")
    store = disk_cache.DiskCache(cache)
    (stored,) = store.entries()
    doc = json.loads(Path(stored.path).read_text())
    key = disk_cache.Key.from_fields(doc["key"])
    entry = store.get(key)
    assert entry is not None
    other = disk_cache.Key(**{**{f: getattr(key, f) for f in ("fingerprint", "cudnn_version", "compute_capability",
                                                              "sm_count", "options")},
                              field: getattr(key, field) + 1})
    assert store.put(other, entry)
    os.unlink(stored.path)  # only the entry of the other device kind / cuDNN is left
    r = run_child("matmul", cache, tmp_path, "other")
    assert r["plan_origin"] == "built" and r["disk_events"][0] == "miss", r
