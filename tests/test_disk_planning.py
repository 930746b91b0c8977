"""CPU: planning's use of the disk cache (plans/disk_planning.py, issue #29). The key (a portable fingerprint the same
in two fresh processes; each option changes it), and the wiring through a real PlanningSession whose GPU parts are
stand-ins: heuristics queries, plan builds and rebuilds from JSON need a device, so they are replaced by doubles
that record their calls, while the session, the store, the checks and explain() are the real ones. A second
"process" is the same one with its in-process caches emptied. Hostile entries (corrupt, truncated, of another
cuDNN or device, a tampered plan) are dropped with a logged reason and the graph is built normally. The real
thing, on a GPU and across processes: tests/test_gpu_disk_cache.py."""
from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cudnn_py as cudnn
from cudnn_py import cache_trust
from cudnn_py.backend import trace, versions
from cudnn_py.errors import NoCudaDeviceError
from cudnn_py.plans import disk_cache, disk_planning, heuristics, plan_cache
from cudnn_py.plans import session as session_mod
from cudnn_py.plans.engine_config import EngineConfig
from cudnn_py.plans.heuristics import HeuristicsResult

ROOT = Path(__file__).resolve().parents[1]
H, F = cudnn.data_type.HALF, cudnn.data_type.FLOAT
MODES = [cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK]
DATA = ROOT / "tests" / "data" / "serialized"


def plan_json(version: int | None = None, rows: int = 64, kernels: bool = True) -> str:
    """A plan JSON cuDNN wrote (conv, 9.19), claiming the version given (the store checks it is the key's), its
    tensors those of :func:`matmul`'s graph (a rebuild checks the plan is for the graph's tensors); ``kernels``:
    with the compiled kernel of a runtime-compiled engine (an SDPA plan's, 9.19), as an NVRTC-compiled plan has."""
    doc = json.loads(json.loads((DATA / "plan_conv_cudnn91900.json").read_text())["plan"]["json"])
    doc["cudnnVersion"] = versions.runtime_version() if version is None else version
    if kernels:
        compiled = json.loads(json.loads((DATA / "plan_sdpa_cudnn91900.json").read_text())["plan"]["json"])
        doc["engine"]["payload"] = compiled["engine"]["payload"]
    base = doc["operationGraph"]["tensors"][0]
    shapes = {"1": ([1, rows, 32], [rows * 32, 32, 1], "CUDNN_DATA_HALF"), "2": ([1, 32, 16], [512, 16, 1],
              "CUDNN_DATA_HALF"), "3": ([1, rows, 16], [rows * 16, 16, 1], "CUDNN_DATA_FLOAT")}
    doc["operationGraph"]["tensors"] = [{**base, "name": n, "dim": d, "stride": st, "dataType": t}
                                        for n, (d, st, t) in shapes.items()]
    return json.dumps(doc)


def matmul(n: int = 64):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, name="mm")
    a = g.tensor(name="a", dim=[1, n, 32], stride=[n * 32, 32, 1], data_type=H)
    b = g.tensor(name="b", dim=[1, 32, 16], stride=[512, 16, 1], data_type=H)
    g.matmul(a, b, name="mm").set_output(True).set_data_type(F)
    return g


# ---- the key -----------------------------------------------------------------------------------------------------
_CHILD = r"""
import math, sys
sys.path.insert(0, sys.argv[1])
from tests.support.libcuda_stub import ensure_driver
ensure_driver()
import cudnn_py as cudnn
from cudnn_py.plans import disk_planning
from tests.test_disk_planning import matmul, sdpa
if sys.argv[2] == "perturbed":  # another history: other graphs (uids, descriptor ids) made first
    for n in (8, 16, 24):
        matmul(n).validate()
out = []
for make in (sdpa, matmul):
    g = make()
    g.validate()
    out.append(disk_planning.portable_fingerprint(g.session.lowered.operation_graph.fingerprint()))
print("FP", *out)
"""


def sdpa(s: int = 128, d: int = 64):
    g = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, name="attn")
    T = {n: g.tensor(name=n, dim=[1, 2, s, d], stride=[2 * s * d, s * d, d, 1], data_type=H) for n in "qkv"}
    o, _ = g.sdpa(q=T["q"], k=T["k"], v=T["v"], generate_stats=False, attn_scale=0.125, use_causal_mask=True)
    o.set_output(True)
    return g


def test_two_fresh_processes_make_the_same_key():
    env = {**os.environ, "PYTHONHASHSEED": "random"}  # (dict / set order must not matter)
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(ROOT), how], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for how in ("plain", "perturbed")]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
        outs.append(next(line.split()[1:] for line in out.splitlines() if line.startswith("FP ")))
    assert outs[0] == outs[1]
    assert all(fp.startswith("og1-") and len(fp) == 68 for fp in outs[0])
    g = sdpa()
    g.validate()
    here = disk_planning.portable_fingerprint(g.session.lowered.operation_graph.fingerprint())
    assert here == outs[0][0]  # and this process, which built other graphs before
    other = sdpa(s=256)
    other.validate()
    assert disk_planning.portable_fingerprint(other.session.lowered.operation_graph.fingerprint()) != here


def test_the_handle_is_left_out_and_a_pointer_or_no_fingerprint_is_not_portable():
    base = (("CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR", (("CUDNN_ATTR_OPERATIONGRAPH_OPS",
                                                          "CUDNN_TYPE_BACKEND_DESCRIPTOR", (1,)),)),
            ("CUDNN_BACKEND_TENSOR_DESCRIPTOR", (("CUDNN_ATTR_TENSOR_UNIQUE_ID", "CUDNN_TYPE_INT64", (1,)),)))
    with_handle = ((base[0][0], base[0][1] + (("CUDNN_ATTR_OPERATIONGRAPH_HANDLE", "shown", "0x5555dead"),)),
                   base[1])
    assert disk_planning.portable_fingerprint(with_handle) == disk_planning.portable_fingerprint(base)
    pointer = (base[0], (base[1][0], base[1][1] + (("CUDNN_ATTR_SOME_POINTER", "shown", "0x7f00"),)))
    with pytest.raises(disk_planning.NotPortable, match="address"):
        disk_planning.portable_fingerprint(pointer)
    with pytest.raises(disk_planning.NotPortable, match="no fingerprint"):
        disk_planning.portable_fingerprint(None)
    odd = (base[0], (base[1][0], base[1][1] + (("X", "CUDNN_TYPE_INT64", (object(),)),)))
    with pytest.raises(disk_planning.NotPortable):
        disk_planning.portable_fingerprint(odd)
    floats = [(("P", (("A", "CUDNN_TYPE_FLOAT", (v,)),)),) for v in ("0x0.0p+0", "-0x0.0p+0")]
    assert disk_planning.portable_fingerprint(floats[0]) != disk_planning.portable_fingerprint(floats[1])


def test_each_part_of_the_key_changes_it(monkeypatch):
    facts = {"d": (90, 132)}
    monkeypatch.setattr(disk_planning, "device_facts", lambda device: facts["d"])
    modes = ["CUDNN_HEUR_MODE_A", "CUDNN_HEUR_MODE_FALLBACK"]

    def digest(fp="og1-x", version=92800, modes=modes, sm=None):
        return disk_planning.make_key(fp, version, 0, modes, sm).digest()

    base = digest()
    assert digest() == base
    changed = [digest(fp="og1-y"), digest(version=91900), digest(modes=modes[:1]), digest(modes=modes[::-1]),
               digest(sm=66)]
    facts["d"] = (100, 132)
    changed.append(digest())
    facts["d"] = (90, 114)
    changed.append(digest())
    assert len({base, *changed}) == len(changed) + 1
    facts["d"] = (90, 132)
    monkeypatch.setattr(disk_planning, "__version__", "9.9.9")
    assert digest() != base  # another cudnn_py release starts cold


# ---- the wiring, GPU parts stood in for ----------------------------------------------------------------------------
class _Config(EngineConfig):
    def __init__(self, index, knobs, source):  # a config as heuristics name it, without descriptors
        self.engine_index, self._knobs, self.source = index, list(knobs), source


class _Plan:
    _ids = iter(range(1, 1 << 30))

    def __init__(self, config, workspace, text=None, source="finalized"):
        self.config, self.workspace, self.source = config, workspace, source
        self.id = next(self._ids)
        self.text = text if text is not None else plan_json()

    @property
    def name(self):
        return self.config.name

    def to_json(self):
        return self.text


class CudnnStandIn:
    """The stand-ins for cuDNN's GPU calls and what they were asked: heuristics queries, plans built, plans rebuilt
    from JSON (what the tests check is cudnn_py's logic around them, not cuDNN)."""

    def __init__(self, monkeypatch, tmp_path):
        self.queries: list = []
        self.built: list = []
        self.rebuilt: list = []
        self.json_checked: list = []  # per rebuild: whether the caller vouched for the JSON (checked already)
        self.rebuilt_as = None  # (engine, knobs, workspace) a rebuild returns; None: what was built
        self.plan_text = None  # the JSON of a plan built (None: plan_json(), with a compiled kernel)
        self.facts = (90, 132)
        self.dir = tmp_path / "cache"
        monkeypatch.setenv("CUDNN_PY_CACHE", "1")
        monkeypatch.setenv("CUDNN_PY_CACHE_DIR", str(self.dir))
        monkeypatch.setattr(session_mod.PlanningSession, "planning_handle", lambda s: 0xBEEF)

        def bind(s, handle):
            s.device, s.context = 0, None

        monkeypatch.setattr(session_mod.PlanningSession, "_bind_device", bind)
        monkeypatch.setattr(session_mod, "finalize_operation_graph",
                            lambda lowered, handle: setattr(lowered, "handle", handle))
        monkeypatch.setattr(session_mod.device_gates, "check", lambda *a, **k: None)
        monkeypatch.setattr(disk_planning, "device_facts", lambda device: self.facts)

        def query(og, modes, sm_count, device_properties, seen=None):
            self.queries.append(tuple(modes))
            cfg = _Config(3 if modes[0].endswith("_A") else 5, [(24, 2)], modes[0])
            return HeuristicsResult(configs=[cfg], per_mode=[(m, "1 config(s), 1 new") for m in modes],
                                    ranked=[(modes[0], [cfg])])

        def build(config, **kw):
            self.built.append(config.name)
            return _Plan(config, 4096, self.plan_text)

        def from_json(text, handle, json_checked=False):
            self.rebuilt.append((text, handle))
            self.json_checked.append(json_checked)
            engine, knobs, ws = self.rebuilt_as or (3, [(24, 2), (14, -1)], 4096)  # (-1: a knob at its default)
            return _Plan(_Config(engine, knobs, "deserialized"), ws, text, "deserialized")

        monkeypatch.setattr(heuristics, "_query", query)
        monkeypatch.setattr(session_mod.ExecutionPlan, "build", staticmethod(build))
        monkeypatch.setattr(plan_cache.ExecutionPlan, "from_json", staticmethod(from_json))
        self.new_process()

    def new_process(self):
        """What a fresh process starts with: empty in-process caches, nothing written by it yet."""
        heuristics.clear_cache()
        plan_cache.clear_cache()
        disk_planning.forget_stored()
        self.queries.clear()
        self.built.clear()
        self.rebuilt.clear()
        self.json_checked.clear()

    def build(self, g=None, modes=(cudnn.heur_mode.A,)):
        g = g if g is not None else matmul()
        g.build(list(modes))
        return g

    def entry_files(self):
        return sorted(self.dir.glob("*.entry"))


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    g = CudnnStandIn(monkeypatch, tmp_path)
    yield g
    heuristics.clear_cache()
    plan_cache.clear_cache()
    disk_planning.forget_stored()


def test_a_miss_stores_and_the_next_process_builds_from_the_entry_without_heuristics(stand_in):
    g = stand_in.build()
    assert stand_in.queries == [("CUDNN_HEUR_MODE_A",)] and stand_in.built == ["eng3_k24=2"]
    assert any(line.startswith("miss") for line in g.session.disk.lines)
    assert any(line.startswith("stored") for line in g.session.disk.lines)
    (path,) = stand_in.entry_files()
    stored = json.loads(path.read_text())
    assert stored["payload"]["plan"]["engine"] == 3 and stored["payload"]["plan"]["knobs"] == [[24, 2]]
    assert stored["payload"]["plan"]["workspace"] == 4096
    assert json.loads(stored["payload"]["heuristics"])["configs"] == [
        {"engine": 3, "knobs": [[24, 2]], "mode": "CUDNN_HEUR_MODE_A"}]
    assert stored["key"]["options"]["modes"] == "CUDNN_HEUR_MODE_A"

    stand_in.new_process()
    out = io.StringIO()
    with trace.tracing(out):
        g2 = stand_in.build()
    assert stand_in.queries == [] and stand_in.built == []  # no heuristics query, no plan built
    assert len(stand_in.rebuilt) == 1 and stand_in.rebuilt[0] == (stored["payload"]["plan"]["json"], 0xBEEF)
    assert stand_in.json_checked == [True]  # the entry's decode checked the plan JSON: set does not parse it again
    plan = g2.session.plan()
    assert plan.source == disk_planning.DISK
    events = [c for c in trace.read(out.getvalue().splitlines()) if c["fn"] == disk_planning.TRACE_FN]
    assert [e["event"] for e in events] == ["hit"] and events[0]["key"] == path.name[:-len(".entry")]
    report = json.loads(g2.explain("json"))
    assert report["engine_configs"][0]["plan_origin"] == "disk cache"
    assert report["heuristics"][0]["result"].endswith("(from the disk cache)")
    text = g2.explain()
    assert "disk cache (plans built by earlier processes):" in text and "-> built [disk cache]" in text
    # the third build of this "process": from memory, the disk not read again
    before = path.stat().st_mtime_ns
    g3 = stand_in.build()
    assert g3.session.plan().source == plan_cache.REBUILT and len(stand_in.rebuilt) == 2
    assert stand_in.json_checked == [True, True]  # the plan cache's entry: the JSON the disk entry's decode checked
    assert g3.session.disk.lines == [] and path.stat().st_mtime_ns == before


def test_a_plan_without_compiled_kernels_is_finalized_from_its_config_with_the_stored_answer(stand_in):
    # its JSON would only repeat the engine and knobs, and cuDNN parses it more slowly than it finalizes the config
    stand_in.plan_text = plan_json(kernels=False)
    stand_in.build()
    stand_in.new_process()
    g = stand_in.build()
    assert stand_in.queries == [] and stand_in.rebuilt == [] and stand_in.built == ["eng3_k24=2"]
    assert "plan eng3_k24=2 finalized from its config (its JSON carries no compiled kernels)" in g.session.disk.lines
    report = json.loads(g.explain("json"))
    assert report["engine_configs"][0]["plan_origin"] == "built"
    assert report["heuristics"][0]["result"].endswith("(from the disk cache)")
    assert len(stand_in.entry_files()) == 1  # a hit: nothing written again


def test_explain_says_built_for_a_plan_built_here(stand_in):
    g = stand_in.build()
    assert json.loads(g.explain("json"))["engine_configs"][0]["plan_origin"] == "built"


def test_switched_off_nothing_is_read_or_written(stand_in, monkeypatch):
    monkeypatch.setenv("CUDNN_PY_CACHE", "off")
    g = stand_in.build()
    assert stand_in.entry_files() == [] and not stand_in.dir.exists()
    assert g.session.disk.lines == ["not used: off (CUDNN_PY_CACHE=off)"]
    assert "not used: off (CUDNN_PY_CACHE=off)" in g.explain()


def test_no_device_visible_for_the_key_builds_without_the_disk_cache(stand_in, monkeypatch):
    """The key's device facts raise the project's device error (a NotImplementedError too, as in 1.32): the build
    goes on without the disk cache and says why."""
    def no_device(device):
        raise NoCudaDeviceError("cudnn_py: no CUDA device visible")

    monkeypatch.setattr(disk_planning, "device_facts", no_device)
    g = stand_in.build()
    assert stand_in.built == ["eng3_k24=2"] and stand_in.entry_files() == []
    assert g.session.disk.lines == ["not used: the device's compute capability / SM count: cudnn_py: no CUDA device "
                                    "visible"]


def test_an_unwritable_directory_builds_normally_with_one_warning(stand_in, monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CUDNN_PY_CACHE_DIR", str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger="cudnn_py.plans.disk_cache"):
        for _ in range(2):
            stand_in.new_process()
            g = stand_in.build()
            assert stand_in.built == ["eng3_k24=2"]
    assert len([r for r in caplog.records if "not a writable directory" in r.getMessage()]) == 1
    assert any("not writable" in line for line in g.session.disk.lines)


def test_a_filter_that_bars_the_stored_plans_config_builds_another_and_keeps_the_entry(stand_in):
    stand_in.build()
    (path,) = stand_in.entry_files()
    before = path.read_bytes()
    stand_in.new_process()
    g = matmul()
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(MODES)
    g.deselect_engines(["eng3"])
    g.check_support()  # the FALLBACK query, deferred until now: a config the entry's answer does not have
    g.build_plans()
    assert stand_in.rebuilt == [] and stand_in.built == ["eng5_k24=2"]
    assert g.session.plan().source == "finalized"
    assert path.read_bytes() == before  # a hit: not overwritten by a filtered build


def _rewrite(path: Path, edit) -> None:
    """Edit an entry's envelope and write it back with a valid checksum (what an attacker with write access to
    the directory, or a bug, could leave): only the schemas and the checks after the rebuild stand in the way."""
    doc = json.loads(path.read_text())
    edit(doc)
    h = cache_trust.home(str(path.parent))  # (this user's cudnn_py: the directory's key seals it)
    assert h is not None
    doc["checksum"] = disk_cache.seal(doc, h.key)
    path.write_text(json.dumps(doc))


def _tamper_plan(doc):
    plan = json.loads(doc["payload"]["plan"]["json"])
    plan["operationGraph"]["tensors"] = 7  # (crashes cuDNN when read: the schema refuses it)
    doc["payload"]["plan"]["json"] = json.dumps(plan)


def _foreign() -> int:
    """A cuDNN version that is not the loaded one (9.19 on the CPU machine's 9.28, 9.28 on the H200's 9.19)."""
    return 91900 if versions.runtime_version() != 91900 else 92800


def _foreign_version(doc):
    doc["key"]["cudnn_version"] = _foreign()
    doc["payload"]["plan"]["json"] = plan_json(_foreign())


def _other_device(doc):
    doc["key"]["compute_capability"] = 100


def _unknown_mode(doc):
    answer = json.loads(doc["payload"]["heuristics"])
    answer["configs"][0]["mode"] = "CUDNN_HEUR_MODE_B"
    doc["payload"]["heuristics"] = json.dumps(answer)


HOSTILE = {
    "corrupt": lambda p: p.write_bytes(p.read_bytes().replace(b'"engine":3', b'"engine":4')),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "not-json": lambda p: p.write_bytes(b"\x00\xff" * 64),
    "tampered-plan-json": lambda p: _rewrite(p, _tamper_plan),
    "foreign-cudnn-version": lambda p: _rewrite(p, _foreign_version),
    "another-device": lambda p: _rewrite(p, _other_device),
    "answer-of-other-modes": lambda p: _rewrite(p, _unknown_mode),
    "a-directory": lambda p: (p.unlink(), p.mkdir()),
}
WHY = {"corrupt": "checksum", "truncated": "", "not-json": "", "tampered-plan-json": "tensors",
       "foreign-cudnn-version": "another key", "another-device": "another key",
       "answer-of-other-modes": "not asked", "a-directory": "directory"}


@pytest.mark.parametrize("how", sorted(HOSTILE))
def test_a_hostile_entry_is_dropped_with_a_reason_and_the_graph_built_normally(stand_in, how, caplog):
    stand_in.build()
    (path,) = stand_in.entry_files()
    HOSTILE[how](path)
    stand_in.new_process()
    with caplog.at_level(logging.WARNING, logger="cudnn_py.plans"):
        g = stand_in.build()
    assert stand_in.queries == [("CUDNN_HEUR_MODE_A",)] and stand_in.built == ["eng3_k24=2"] and stand_in.rebuilt == []
    assert g.session.plan().source == "finalized"
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 1 and WHY[how] in dropped[0], dropped
    lines = g.session.disk.lines
    assert any(line.startswith("dropped") and WHY[how] in line for line in lines), lines  # explain() shows it
    if how == "a-directory":  # not a file of this user's cudnn_py: never deleted nor replaced (issue #37)
        assert lines[-1] == "not stored (see the log)" and path.is_dir(), lines
        assert [p for p, _ in disk_cache.DiskCache(stand_in.dir).verify()] == [str(path)]
        return
    assert lines[-1].startswith("stored"), lines
    assert disk_cache.DiskCache(stand_in.dir).verify() == []  # stored afresh, and good
    stand_in.new_process()
    assert stand_in.build().session.plan().source == disk_planning.DISK


@pytest.mark.parametrize("rebuilt_as", [(4, [(24, 2)], 4096), (3, [(24, 1)], 4096), (3, [(24, 2)], 8192)],
                         ids=["other-engine", "other-knobs", "other-workspace"])
def test_a_plan_that_rebuilds_differently_is_dropped_and_built(stand_in, rebuilt_as, caplog):
    stand_in.build()
    stand_in.new_process()
    stand_in.rebuilt_as = rebuilt_as
    with caplog.at_level(logging.WARNING, logger="cudnn_py.plans"):
        g = stand_in.build()
    assert len(stand_in.rebuilt) == 1 and stand_in.built == ["eng3_k24=2"]
    assert stand_in.queries == []  # the heuristics answer was good; only the plan is built
    assert g.session.plan().source == "finalized"
    assert any("did not rebuild as recorded" in r.getMessage() for r in caplog.records)
    assert any(line.startswith("dropped: its plan eng3_k24=2 did not rebuild") for line in g.session.disk.lines)
    assert "dropped: its plan" in g.explain()
    assert g.session.disk.lines[-1].startswith("stored")  # written again, from the plan built now
    stand_in.new_process()
    stand_in.rebuilt_as = None
    assert stand_in.build().session.plan().source == disk_planning.DISK


def test_a_plan_json_of_other_tensors_is_dropped_before_it_is_rebuilt(stand_in, caplog):
    """An entry whose plan JSON describes other tensors is dropped by cudnn_py's check: the (stood-in) rebuild from
    JSON is never asked."""
    stand_in.build()
    (path,) = stand_in.entry_files()

    def other_graph(doc):  # a well-formed plan of a larger matmul, put there on purpose (a valid checksum)
        doc["payload"]["plan"]["json"] = plan_json(rows=4096)

    _rewrite(path, other_graph)
    stand_in.new_process()
    with caplog.at_level(logging.WARNING, logger="cudnn_py.plans"):
        g = stand_in.build()
    assert stand_in.rebuilt == [] and stand_in.built == ["eng3_k24=2"] and g.session.plan().source == "finalized"
    assert any("describes other tensors" in line for line in g.session.disk.lines)
    assert any("describes other tensors" in r.getMessage() for r in caplog.records)


def test_an_entry_whose_plan_json_fails_to_rebuild_is_dropped_and_built(stand_in, monkeypatch):
    """The stand-in's rebuild from JSON raises a CudnnError, as a refusal by cuDNN would: the entry is dropped and
    the plan finalized from its config."""
    from cudnn_py.errors import CudnnError

    stand_in.build()
    stand_in.new_process()

    def refuse(text, handle, json_checked=False):
        raise CudnnError(3000, "cudnnBackendFinalize", detail="refused by the test")

    monkeypatch.setattr(plan_cache.ExecutionPlan, "from_json", staticmethod(refuse))
    g = stand_in.build()
    assert stand_in.built == ["eng3_k24=2"] and g.session.plan().source == "finalized"
    assert any("did not rebuild" in line for line in g.session.disk.lines)


def test_a_device_of_another_kind_or_another_cudnn_is_a_miss(stand_in, monkeypatch):
    stand_in.build()
    stand_in.new_process()
    stand_in.facts = (100, 148)
    g = stand_in.build()
    assert stand_in.queries and stand_in.built and g.session.disk.lines[0].startswith("miss")
    stand_in.new_process()
    foreign = _foreign()
    monkeypatch.setattr(versions, "runtime_version", lambda: foreign)
    g = stand_in.build()
    assert stand_in.queries and g.session.disk.lines[0].startswith("miss")
    assert len(stand_in.entry_files()) == 3  # one entry per (device kind, cuDNN)


def test_configs_of_a_stored_answer_that_do_not_build_drop_the_entry(stand_in, monkeypatch):
    from cudnn_py.errors import CudnnError

    stand_in.build()
    stand_in.new_process()
    stand_in.rebuilt_as = (9, [], 0)  # the stored plan does not fit either

    def build(config, **kw):
        stand_in.built.append(config.name)
        if config.source != "CUDNN_HEUR_MODE_A" or stand_in.queries == []:
            raise CudnnError(3000, "cudnnBackendFinalize", detail="not supported here")
        return _Plan(config, 4096)

    monkeypatch.setattr(session_mod.ExecutionPlan, "build", staticmethod(build))
    g = stand_in.build()
    assert stand_in.queries == [("CUDNN_HEUR_MODE_A",)]  # asked afresh after the stored configs failed
    assert any("configs of its heuristics answer did not build" in line for line in g.session.disk.lines)
    assert g.session.disk.lines[-1].startswith("stored")


def test_graphs_the_cache_leaves_alone(stand_in):
    kc = cudnn.create_kernel_cache()
    g2 = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, kernel_cache=kc)
    a = g2.tensor(name="a", dim=[1, 64, 32], stride=[2048, 32, 1], data_type=H)
    b = g2.tensor(name="b", dim=[1, 32, 16], stride=[512, 16, 1], data_type=H)
    g2.matmul(a, b).set_output(True).set_data_type(F)
    try:
        g2.build([cudnn.heur_mode.A])
    except Exception:  # (the kernel cache binds to a real operation graph: may refuse the stand-in)
        pass
    lines = g2.session.disk.lines
    assert lines == [] or "kernel cache" in lines[0], lines
    assert stand_in.entry_files() == []


def test_storing_costs_little_and_happens_once_per_key(stand_in, monkeypatch):
    calls = []
    real_put = disk_cache.DiskCache.put
    monkeypatch.setattr(disk_cache.DiskCache, "put", lambda self, k, e: calls.append(k) or real_put(self, k, e))
    g = stand_in.build()
    assert g.session.disk.lines[-1].startswith("stored")
    for path in stand_in.entry_files():  # (evicted by another process, say)
        path.unlink()
    heuristics.clear_cache()  # the same process planning the graph afresh: a miss, but written once per process
    plan_cache.clear_cache()
    g = stand_in.build()
    assert g.session.disk.lines[0].startswith("miss") and len(calls) == 1 and stand_in.entry_files() == []
