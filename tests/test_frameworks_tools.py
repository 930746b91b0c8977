"""On the CPU: the `cudnn_py` logger (silent by default; builds, cache hits and misses, workspace allocations),
`python -m cudnn_py info`'s frameworks and errata, explain's additions (errata matched, the backend operation
graph, --render) and the examples' framework choice with torch blocked. GPU counterparts:
tests/test_gpu_frameworks.py."""
from __future__ import annotations

import json
import logging
import os
import py_compile
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cudnn_py as cudnn
from cudnn_py.facade import explain
from cudnn_py.plans import workspace as workspace_mod

ROOT = Path(__file__).resolve().parents[1]
F, H = cudnn.data_type.FLOAT, cudnn.data_type.HALF
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


def matmul_bias_relu(batch=1):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    a = g.tensor([batch, 16, 8], name="a")
    b = g.tensor([batch, 8, 4], name="b")
    bias = g.tensor([1, 1, 4], name="bias")
    y = g.relu(g.bias(g.matmul(a, b, name="mm"), bias, name="add_bias"), name="act")
    y.set_output(True).set_data_type(H).set_name("y")
    return g


# ------------------------------------------------------------------------------------------------- logging
def test_the_cudnn_py_logger_is_silent_by_default():
    r = run_python("""
        import logging, sys
        sys.path.insert(0, ".")
        from tests.support.libcuda_stub import ensure_driver
        ensure_driver()
        import cudnn_py as cudnn
        assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("cudnn_py").handlers)
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)
        g.sigmoid(g.tensor([4, 8], name="x")).set_output(True)
        g.validate()
        logging.getLogger("cudnn_py.plans.session").warning("would reach stderr without the NullHandler")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "" and r.stdout == ""


def test_validate_logs_the_build_and_its_time(caplog):
    g = matmul_bias_relu()
    with caplog.at_level(logging.INFO, logger="cudnn_py"):
        g.validate()
    [msg] = [r.getMessage() for r in caplog.records if r.name == "cudnn_py.plans.session"]
    assert f"graph {g.name!r} validated in " in msg and " ms: 3 node(s) after the passes, 3 backend operation(s)" in msg


def test_variant_pack_cache_hits_and_misses_are_logged_at_debug(caplog):
    g = cudnn.pygraph(io_data_type=F, compute_data_type=F)
    g.sigmoid(g.tensor([4, 8], name="x")).set_output(True)
    g.validate()
    executor = g.session.executor

    class Plan:  # what _binding_for reads of a plan (building a real one needs a GPU)
        id, name, workspace = 1, "eng_fake", 0

    with caplog.at_level(logging.DEBUG, logger="cudnn_py.plans.execute"):
        executor._binding_for(Plan, {}, 0, [0x1000, 0x2000], checked=True)
        executor._binding_for(Plan, {}, 0, [0x1000, 0x2000], checked=True)
        executor._binding_for(Plan, {}, 0, [0x1000, 0x3000], checked=True)
    kinds = [r.getMessage().split(":")[0] for r in caplog.records]
    assert kinds == ["variant pack cache miss", "variant pack cache hit", "variant pack cache miss"]
    assert "plan eng_fake, 2 pointer(s)" in caplog.records[0].getMessage()


def test_workspace_allocations_and_evictions_are_logged(caplog, monkeypatch):
    class Owner:  # a stand-in for a cuda.core Buffer (allocating one needs a GPU)
        def __init__(self, size):
            self.handle, self.size = 0x10000 * size, size

    monkeypatch.setattr(workspace_mod, "_allocate", lambda framework, device, stream, size: Owner(size))
    monkeypatch.setattr(workspace_mod, "_retire", lambda owner, device: None)
    cache = workspace_mod.WorkspaceCache()
    with caplog.at_level(logging.INFO, logger="cudnn_py.plans.workspace"):
        cache.get(256, "", 0, 7)
        cache.get(128, "", 0, 7)  # fits: no allocation
        cache.get(512, "", 0, 7)  # grows
        for stream in range(100, 100 + workspace_mod.MAX_STREAMS):
            cache.get(64, "", 0, stream)
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs[0] == "workspace: 256 bytes at 0x1000000 from cuda.core Device.allocate on device 0, stream 0x7"
    assert msgs[1].startswith("workspace: 512 bytes") and msgs[1].endswith("(replaces 256 bytes)")
    assert len([m for m in msgs if m.startswith("workspace: 64 bytes")]) == workspace_mod.MAX_STREAMS
    assert msgs[-1] == f"workspace: evicting 512 bytes of stream 0x7 (more than {workspace_mod.MAX_STREAMS} streams)"


# ------------------------------------------------------------------------------------------------- info
def test_info_lists_frameworks_without_importing_them_and_the_errata_with_their_gpus():
    r = run_python("""
        import sys
        sys.path.insert(0, ".")
        from tests.support.libcuda_stub import ensure_driver
        ensure_driver()
        from cudnn_py.__main__ import main
        main(["info", "--errata"])
        assert "torch" not in sys.modules and "cupy" not in sys.modules, "info imported a framework"
    """)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "frameworks (versions from package metadata; torch and cupy are not imported):" in out
    for fw in ("torch", "cupy", "cuda.core", "numpy"):
        assert f"\n  {fw}: " in out
    assert "operands: torch tensors and cupy arrays run on their framework's current stream" in out
    assert "workspace=None from cuda.core" in out  # the fallback allocator, and whether it is installed
    assert "errata for cuDNN 9." in out and "GPUs here:" in out and "seen on H200 (sm90)" in out


def test_errata_lines_name_the_gpus_here():
    from cudnn_py.__main__ import errata_lines

    lines = errata_lines(91900, "9.19.0", [(9, 0), (9, 0)])
    assert lines[0].startswith("errata for cuDNN 9.19.0: ") and "GPUs here: sm90)" in lines[0]
    assert any(line.startswith("  gen-index-in-batched-matmul-epilogue (cuDNN 9.19.0 - ") for line in lines[1:])
    assert errata_lines(90000, "9.0.0", [])[0].endswith("GPUs here: no GPU found)")


def test_info_says_when_cuda_core_is_missing(monkeypatch):
    from cudnn_py import __main__ as cli

    monkeypatch.setattr(cli, "_framework_version", lambda m: None if m == "cuda.core" else "1.0 (x)")
    lines = cli.framework_lines()
    assert "  cuda.core: not installed" in lines
    assert lines[-1].endswith("cuda.core, WHICH IS NOT INSTALLED: pass a workspace, or pip install cuda-core")


# ------------------------------------------------------------------------------------------------- explain
def test_explain_lists_only_the_errata_about_the_graphs_ops():
    from cudnn_py.plans.errata import ERRATA

    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    y = g.relu(g.matmul(g.tensor([1, 8, 16], name="a"), g.tensor([1, 16, 4], name="b")))
    y.set_output(True).set_data_type(H)
    doc = json.loads(g.explain("json"))["cudnn"]
    ids = {e["id"] for e in doc["errata"]}
    every_graph = {e.id for e in ERRATA if not e.ops}
    assert ids <= every_graph | {"matmul-widening-cast-unaligned", "matmul-cast-of-strided-input"}, ids
    assert not ids & {"pointwise-broadcast", "sdpa-backward-dropout-mask", "wgrad-post-padding-engines-1-20",
                      "gen-index-in-batched-matmul-epilogue"}
    assert doc["errata_about_other_ops"] > 0 and "more about other ops: python -m cudnn_py info --errata" in g.explain()
    g2 = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    g2.gen_index(g2.matmul(g2.tensor([2, 8, 16], name="a"), g2.tensor([2, 16, 4], name="b")), axis=1).set_output(
        True).set_data_type(cudnn.data_type.INT32)
    assert "gen-index-in-batched-matmul-epilogue" in {e["id"] for e in json.loads(g2.explain("json"))["cudnn"]["errata"]}
    p = cudnn.pygraph(io_data_type=F, compute_data_type=F)
    p.add(p.tensor([8, 33, 64], name="x"), p.tensor([1, 1, 64], name="y")).set_output(True)
    assert "pointwise-broadcast" in {e["id"] for e in json.loads(p.explain("json"))["cudnn"]["errata"]}


def test_errata_concern_the_kinds_they_name():
    from cudnn_py.plans.errata import ERRATA

    by_id = {e.id: e for e in ERRATA}
    assert by_id["sdpa-fp8-9.10.0"].concerns({"sdpa_fp8_backward"})
    assert not by_id["sdpa-fp8-9.10.0"].concerns({"sdpa"})
    assert by_id["pointwise-broadcast"].concerns({"pointwise", "pointwise:x"})
    assert not by_id["pointwise-broadcast"].concerns({"pointwise", "matmul"})
    assert by_id["opgraph-finalize-source-op-fanout"].concerns(set())


def test_explain_names_the_erratum_a_graph_matches():
    report = matmul_bias_relu(batch=1).explain()
    assert "matches this graph" not in report
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F)
    a, b = g.tensor([2, 8, 16], name="a"), g.tensor([2, 16, 4], name="b")
    g.gen_index(g.matmul(a, b, name="mm"), axis=1, name="idx").set_output(True).set_data_type(cudnn.data_type.INT32)
    doc = json.loads(g.explain("json"))
    [hit] = doc["cudnn"]["errata_matched"]
    assert hit["id"] == "gen-index-in-batched-matmul-epilogue" and "'mm'" in hit["where"]
    assert "erratum gen-index-in-batched-matmul-epilogue matches this graph: GEN_INDEX node 'idx'" in g.explain()


def test_explain_backend_operation_graph_reads_and_writes():
    g = matmul_bias_relu()
    doc = json.loads(g.explain("json"))
    graph = explain.backend_graph(doc)
    mm, add, act = graph["operations"]
    assert (mm["node"], add["node"], act["node"]) == ("mm", "add_bias", "act")
    assert mm["kind"] == "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR"
    assert set(mm["reads"]) == {"ADESC", "BDESC"} and set(mm["writes"]) == {"CDESC"}
    assert set(add["reads"]) == {"XDESC", "BDESC"} and set(add["writes"]) == {"YDESC"}
    assert add["reads"]["XDESC"] == mm["writes"]["CDESC"]  # the virtual tensor between them
    assert act["reads"]["XDESC"] == add["writes"]["YDESC"]
    tensors = {int(k): v for k, v in graph["tensors"].items()}
    assert tensors[mm["writes"]["CDESC"]]["virtual"] and not tensors[act["writes"]["YDESC"]]["virtual"]
    text = g.explain("dot")
    assert 'subgraph cluster_o { label="backend operation graph (descriptors)";' in text
    assert f'od{mm["id"]} -> od{mm["writes"]["CDESC"]} [label="CDESC"];' in text
    assert text.count("{") == text.count("}")


def test_explain_reports_an_ir_error_before_any_lowering():
    g = cudnn.pygraph(io_data_type=F, compute_data_type=F)
    x = g.tensor([4, 8], name="x")
    g.add(x, g.tensor([5, 8], name="y")).set_output(True)  # shapes that do not broadcast
    report = g.explain()
    assert "STOPPED: validate:" in report and "IR as built:" in report


def test_explain_command_render_needs_graphviz_and_one_graph(tmp_path):
    script = tmp_path / "two_graphs.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from tests.support.libcuda_stub import ensure_driver
        ensure_driver()
        import cudnn_py as cudnn
        F = cudnn.data_type.FLOAT
        g1 = cudnn.pygraph(io_data_type=F, compute_data_type=F)
        g1.sigmoid(g1.tensor([4, 8], name="x")).set_output(True)
        g2 = cudnn.pygraph(io_data_type=F, compute_data_type=F)
        g2.exp(g2.tensor([4, 8], name="x")).set_output(True)
    """))
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "cudnn_py", "explain", str(script), *args], capture_output=True,
                              text=True, env=env, timeout=120)

    both = cli("--render", str(tmp_path / "g.svg"))
    assert both.returncode == 2 and "pick one of ['g1', 'g2'] with --graph" in both.stderr
    one = cli("--graph", "g1", "--format", "dot", "--render", str(tmp_path / "g.svg"))
    assert one.stdout.startswith("digraph cudnn_py {")
    if shutil.which("dot") is None:
        assert one.returncode == 2 and "Graphviz's `dot` is not installed" in one.stderr
    else:
        assert one.returncode == 0 and (tmp_path / "g.svg").read_text().lstrip().startswith("<")


# ------------------------------------------------------------------------------------------------- examples
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_compile(path, tmp_path):
    py_compile.compile(str(path), cfile=str(tmp_path / "x.pyc"), doraise=True)


def test_first_graph_picks_cuda_core_when_torch_and_cupy_are_blocked():
    r = run_python("""
        import sys
        sys.modules["torch"] = sys.modules["cupy"] = None  # as if neither were installed
        sys.path.insert(0, "examples")
        import first_graph
        print(first_graph.available_framework())
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "cuda.core"


def test_first_graph_cli_offers_every_framework():
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "first_graph.py"), "--help"], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "{torch,cupy,cuda.core}" in r.stdout


def _first_graph(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    """examples/first_graph.py as a user runs it (after ``prelude``, run in the same process)."""
    code = (f"{prelude}\nimport runpy, sys\nsys.argv = ['first_graph.py', *{list(args)!r}]\n"
            "runpy.run_path('examples/first_graph.py', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def _gpu_here() -> bool:
    from cudnn_py.capabilities import gpu_execution

    return gpu_execution().works is not False


def test_first_graph_without_a_gpu_says_so_in_one_line():
    if _gpu_here():
        pytest.skip("a GPU is here: the example runs")
    for prelude in ("", "from tests.support.libcuda_stub import ensure_driver\nensure_driver()"):
        r = _first_graph(prelude=prelude)  # without a driver library, then with the tests' stand-in for it
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr  # no traceback, no cuDNN loader line
        assert r.stderr.startswith("first_graph.py needs a GPU: ") and "no GPU" in r.stderr
        assert "--reference" in r.stderr and "python -m cudnn_py info" in r.stderr


def test_first_graph_reference_runs_the_graph_on_the_cpu():
    r = _first_graph("--reference")
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr  # nothing from cuDNN: the reference run makes no cuDNN call
    first, second = r.stdout.splitlines()
    assert first.startswith("float64 reference engine (numpy arrays, on the CPU; no cuDNN): output Y [4, 256, 64]")
    assert re.fullmatch(r"relative error against float64 numpy: \d\.\d{3}e-0[4-9] \(ok\)", second), second
    assert "--reference" in _first_graph("--help").stdout


def test_explain_engine_configs_with_ranks_per_mode_knobs_and_failures():
    """The engine-config part of explain, from a session filled as heuristics and plans fill it on a GPU (the CPU
    cannot run heuristics): ranks per mode, knobs by name, notes, workspace, the failure reason, the default."""
    from types import SimpleNamespace

    g = matmul_bias_relu()
    g.validate()
    s = g.session
    note = SimpleNamespace(name="CUDNN_NUMERICAL_NOTE_TENSOR_CORE")

    def config(name, engine, knobs, ws):
        return SimpleNamespace(name=name, source="CUDNN_HEUR_MODE_A", engine_index=engine, knobs=knobs,
                               numerical_notes=[note], behavior_notes=[], workspace=ws)

    s.configs = [config("eng7_k24=41", 7, [(24, 41)], 0), config("eng1_k2=3", 1, [(2, 3)], 4096)]
    s.heuristics_report = [("CUDNN_HEUR_MODE_A", "2 config(s), 2 new"), ("CUDNN_HEUR_MODE_FALLBACK", "1 config(s), 0 new")]
    s.heuristics_ranked = [("CUDNN_HEUR_MODE_A", list(s.configs)), ("CUDNN_HEUR_MODE_FALLBACK", [s.configs[1]])]
    s.failures = {0: "CUDNN_STATUS_NOT_SUPPORTED: no kernel"}
    s.plans = {1: SimpleNamespace(workspace=4096, source="finalized")}
    s.candidate = 1
    doc = json.loads(g.explain("json"))
    first, second = doc["engine_configs"]
    assert first["rank_by_mode"] == {"CUDNN_HEUR_MODE_A": 0}
    assert second["rank_by_mode"] == {"CUDNN_HEUR_MODE_A": 1, "CUDNN_HEUR_MODE_FALLBACK": 0}
    assert doc["heuristics"][1]["configs"] == ["eng1_k2=3"]
    assert doc["default_plan"] == 1 and doc["default_plan_name"] == "eng1_k2=3"
    text = g.explain()
    configs = text.split("engine configs")[1]
    assert ("0: eng7_k24=41 (A#0), ws 0, [CUDNN_NUMERICAL_NOTE_TENSOR_CORE], knobs {" in configs
            and "-> failed: CUDNN_STATUS_NOT_SUPPORTED: no kernel" in configs)
    assert "1: eng1_k2=3 (A#1, FALLBACK#0), ws 4096" in configs and "-> built  <- default" in configs
    assert "default plan: 1 (eng1_k2=3)" in text
    knob_24 = cudnn.backend.enums.enum_class("cudnnBackendKnobType_t")(24).name.removeprefix("CUDNN_KNOB_TYPE_")
    assert f"knobs {{{knob_24}=41}}" in configs


# ------------------------------------------------------------------------------------------------- Buffer workspace
class FakeBuffer:
    """The interface of a cuda.core Buffer (a real one needs the driver to say where it lives)."""

    handle = size = 0
    device_id, is_device_accessible = 0, True

    def __init__(self, handle: int, size: int):
        self.handle, self.size = handle, size


FakeBuffer.__module__ = "cuda.core._memory._buffer"


def test_a_buffer_workspace_takes_the_fast_path_and_is_size_checked(monkeypatch):
    from cudnn_py.backend import live
    from cudnn_py.plans import execute as execute_mod
    from cudnn_py.plans import execute_defaults
    from tests.test_execute_correctness import FakePlan, new_address, square_matmul

    handle = 0x77
    monkeypatch.setattr(live, "_live", dict(live._live))
    monkeypatch.setattr(execute_mod, "_live_handles", live._live)
    monkeypatch.setattr(execute_defaults, "_live_handles", live._live)
    live.register(handle, None, owned=False, origin="adopt_handle")
    ex, A, B, C = square_matmul()
    slow_calls = []
    slow = ex.execute
    monkeypatch.setattr(ex, "execute", lambda *a: (slow_calls.append(a), slow(*a))[1])
    fast = ex.fast(FakePlan(workspace=4096))
    pack = {A: new_address(), B: new_address(), C: new_address()}
    ws = FakeBuffer(new_address(), 4096)
    for _ in range(3):
        fast(pack, ws, handle)
    assert len(slow_calls) == 1 and len(ex._backend_execute.calls) == 3  # only the first call binds
    assert ex._backend_execute.calls[-1][2] == ws.handle
    with pytest.raises(ValueError, match="workspace too small: plan fake_plan needs 4096 bytes, got 16"):
        fast(pack, FakeBuffer(ws.handle, 16), handle)  # the same address, a smaller buffer
    assert len(ex._backend_execute.calls) == 3
