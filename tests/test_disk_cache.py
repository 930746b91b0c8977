"""The disk cache's store (issue #29, storage half): round trip, atomic writes under concurrent processes and
threads, LRU eviction under a size bound, hostile entries dropped with a reason, an unwritable directory, the CLI."""
from __future__ import annotations

import json
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from cudnn_py import cache_trust
from cudnn_py.errors import CudnnPyError
from cudnn_py.plans import disk_cache as dc
from cudnn_py.plans.disk_cache import DiskCache, Entry, Key, PlanRecord

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "serialized"
PLAN = json.loads((DATA / "plan_conv_cudnn91900.json").read_text())["plan"]["json"]
KC = (DATA / "kernel_cache_conv_cudnn91900.json").read_text()
HEUR = json.dumps({"configs": [{"engine": 3, "knobs": [[1, 2]], "mode": "CUDNN_HEUR_MODE_A"}],
                   "per_mode": [["CUDNN_HEUR_MODE_A", "1 config(s), 1 new"]],
                   "ranked": [["CUDNN_HEUR_MODE_A", [0]]], "pending": ["CUDNN_HEUR_MODE_FALLBACK"]})
LOGGER = "cudnn_py.plans.disk_cache"


def key(i: int = 0, version: int = 91900) -> Key:
    return Key(f"fp{i}", version, 90, 132, {"sm_count_target": None, "modes": "A,FALLBACK"})


def entry(i: int = 0) -> Entry:
    return Entry(HEUR, PlanRecord(PLAN, 3 + i % 7, {1: i}, 1024 * i), KC)


def drops(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and "dropped" in r.getMessage()]


def test_round_trip(tmp_path):
    c = DiskCache(tmp_path, 1 << 30)
    assert c.get(key()) is None
    assert c.put(key(), entry())
    got = c.get(key())
    assert got == entry() and got.created > 0 and got.last_used >= got.created
    assert c.get(key(1)) is None and c.get(key(0, 92800)) is None  # another fingerprint / cuDNN: a miss
    assert Entry(heuristics=HEUR) != entry()
    assert c.put(key(), Entry(heuristics=HEUR)) and c.get(key()) == Entry(heuristics=HEUR)  # replaced
    assert len(c.entries()) == 1 and c.size() == c.entries()[0].size and c.verify() == []
    assert c.clear() == 1 and c.entries() == [] and c.get(key()) is None


def test_key_and_entry_validate():
    assert Key("a", 1, 90, 1, {"b": 1, "a": "x"}).options == (("a", "x"), ("b", 1))
    for bad in (lambda: Key("", 91900, 90, 132), lambda: Key("a b", 91900, 90, 132),
                lambda: Key("a", True, 90, 132), lambda: Key("a", 91900, 90, 0),
                lambda: Key("a", 91900, 90, 132, {"x": 1.5}), lambda: Key("a", 91900, 90, 132, {"1x": 1}),
                lambda: Key("a", 91900, 90, 132, 5), lambda: Entry(), lambda: Entry(heuristics=b"x"),
                lambda: PlanRecord(PLAN, -1), lambda: PlanRecord(PLAN, 1, [(1, 2), (1, 3)]),
                lambda: PlanRecord(PLAN, 1, workspace=1 << 70), lambda: Entry(plan="x")):
        with pytest.raises(CudnnPyError):
            bad()


def _writer(path: str, worker: int, n: int) -> None:
    c = DiskCache(path, 1 << 30)
    for i in range(n):
        k = (i + worker) % 10  # overlapping keys: every key written by every process
        assert c.put(key(k), entry(k * 100 + worker))
        got = c.get(key((i * 3) % 10))
        assert got is None or got.plan is not None


def _check_all_valid(path) -> None:
    c = DiskCache(path, 1 << 30)
    assert c.verify() == []
    for k in range(10):
        got = c.get(key(k))
        assert got is not None and got.plan is not None and got.plan.knobs[0][1] // 100 == k
    assert not [n for n in os.listdir(path) if n.startswith(dc.TMP_PREFIX)]


def test_concurrent_writers_in_several_processes(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, 50)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    _check_all_valid(tmp_path)


def test_concurrent_writers_in_threads(tmp_path):
    errors: list[BaseException] = []

    def run(w: int) -> None:
        try:
            _writer(str(tmp_path), w, 30)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _check_all_valid(tmp_path)


def test_lru_eviction_order_and_size_bound(tmp_path):
    small = Entry(heuristics=HEUR)
    one = len(dc.encode(key(0), small, 1.0, bytes(32)))  # (any key: the seal's length is fixed)
    c = DiskCache(tmp_path, 3 * one + one // 2)  # room for three
    for i in range(3):
        assert c.put(key(i), small)
    assert c.get(key(0)) is not None  # 0 used: 1 is now the least recently used
    assert c.put(key(3), small)
    assert c.get(key(1)) is None and all(c.get(key(i)) for i in (0, 2, 3))
    assert c.size() <= c.max_bytes
    for i in range(4, 20):
        c.put(key(i), small)
        assert c.size() <= c.max_bytes
    assert {c.get(key(i)) is not None for i in (17, 18, 19)} == {True} and len(c.entries()) == 3
    assert not DiskCache(tmp_path, one // 2).put(key(99), small)  # bigger than the whole limit: not stored


def test_limit_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(dc.MAX_BYTES_ENV, "12345")
    monkeypatch.setenv(dc.DIR_ENV, str(tmp_path / "x"))
    c = DiskCache()
    assert c.max_bytes == 12345 and c.path == str(tmp_path / "x")
    monkeypatch.setenv(dc.MAX_BYTES_ENV, "lots")
    assert DiskCache().max_bytes == dc.DEFAULT_MAX_BYTES
    monkeypatch.delenv(dc.DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert DiskCache().path == str(tmp_path / "xdg" / "cudnn_py")


def _envelope(path: Path) -> dict:
    return json.loads(path.read_bytes())


def secret(directory: Path) -> bytes:
    """The directory's key (in its marker): what this user's cudnn_py seals entries with."""
    h = cache_trust.home(str(directory))
    assert h is not None
    return h.key


def _rewrite(path: Path, doc: dict, fix_checksum: bool = True) -> None:
    """Write an edited envelope back, sealed again with the directory's key when ``fix_checksum`` (what a bug of
    this user's cudnn_py could leave: only the schemas stand in the way)."""
    if fix_checksum:
        doc["checksum"] = dc.seal(doc, secret(path.parent))
    path.write_text(json.dumps(doc))


def _tamper_payload(doc):
    doc["payload"]["heuristics"] = doc["payload"]["heuristics"].replace("3", "4")


def _hostile_cases():
    """(name, how to spoil the file at path, the reason logged)"""
    def edit(f, fix=True):
        return lambda p: _apply(p, f, fix)
    return [
        ("truncated", lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]), "not JSON"),
        ("empty", lambda p: p.write_bytes(b""), "empty"),
        ("garbage", lambda p: p.write_bytes(os.urandom(300)), "entry"),
        ("not an object", lambda p: p.write_text("[1, 2]"), "not an object"),
        ("tampered payload", edit(_tamper_payload, False), "checksum"),
        ("foreign format version", edit(lambda d: d.update(version=3)), "format version 3"),
        ("another format", edit(lambda d: d.update(format="pickle")), "not a cudnn_py"),
        ("foreign cuDNN in the key", edit(lambda d: d["key"].update(cudnn_version=92800)), "another key"),
        ("foreign device in the key", edit(lambda d: d["key"].update(compute_capability=100)), "another key"),
        ("key of wrong type", edit(lambda d: d["key"].update(sm_count="132")), "key"),
        ("huge number", edit(lambda d: d["payload"]["plan"].update(workspace=10**40)), "workspace"),
        ("huge time", edit(lambda d: d.update(created=1e300)), "created"),
        ("NaN", lambda p: p.write_text(p.read_text().replace('"created":', '"created":NaN,"x":')), "NaN"),
        ("bool engine", edit(lambda d: d["payload"]["plan"].update(engine=True)), "engine"),
        ("payload field wrong type", edit(lambda d: d["payload"].update(kernel_cache=7)), "kernel_cache"),
        ("extra field", edit(lambda d: d.update(extra=1)), "fields"),
        ("deep nesting", lambda p: p.write_text("[" * 100000 + "]" * 100000), "deep"),
        ("hostile plan JSON", edit(lambda d: d["payload"]["plan"].update(
            json=d["payload"]["plan"]["json"].replace('"dim":[4,16,8,8]', '"dim":[4,16,8,"x"]'))), "dim"),
        ("hostile kernel cache", edit(lambda d: d["payload"].update(
            kernel_cache=json.dumps({"cudnnVersion": 91900, "operationGraph": {"tensors": 7, "nodes": []}}))),
         "tensors"),
        ("kernel cache of another cuDNN", edit(lambda d: d["payload"].update(
            kernel_cache=(DATA / "kernel_cache_conv_cudnn92800.json").read_text())), "written by cuDNN 92800"),
        ("bad heuristics", edit(lambda d: d["payload"].update(heuristics=HEUR.replace("[0]]]", "[5]]]"))),
         "ranked"),
        ("oversized", lambda p: p.write_bytes(b" " * (dc.MAX_ENTRY_BYTES + 1)), "over the"),
    ]


def _apply(p: Path, f, fix: bool) -> None:
    doc = _envelope(p)
    f(doc)
    _rewrite(p, doc, fix)


@pytest.mark.parametrize("name,spoil,reason", _hostile_cases(), ids=[c[0] for c in _hostile_cases()])
def test_hostile_entries_are_dropped_with_a_reason(tmp_path, caplog, name, spoil, reason):
    c = DiskCache(tmp_path, 1 << 30)
    assert c.put(key(), entry(1))
    path = Path(c.entries()[0].path)
    spoil(path)
    bad = c.verify()
    assert len(bad) == 1 and reason in bad[0][1], bad  # verify names it, deletes nothing
    assert path.exists()
    with caplog.at_level(logging.WARNING, LOGGER), warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        assert c.get(key()) is None
    # a keyed checksum that fails is a trust failure (someone else's entry): also a CacheWarning; the rest is logged
    cache_warnings = [str(w.message) for w in warned if w.category is cache_trust.CacheWarning]
    assert len(cache_warnings) == (name == "tampered payload"), cache_warnings
    assert all(f"entry {path.name} is not used: checksum mismatch" in m for m in cache_warnings)
    logged = drops(caplog)
    assert len(logged) == 1 and reason in logged[0] and "\n" not in logged[0], logged
    assert not path.exists()
    assert c.put(key(), entry(1)) and c.get(key()) == entry(1)  # the slot is usable again


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_special_files_in_place_of_an_entry(tmp_path, caplog, kind):
    c = DiskCache(tmp_path / "cache", 1 << 30)
    assert c.put(key(), entry())
    path = Path(c.entries()[0].path)
    path.unlink()
    target = tmp_path / "target"
    target.write_bytes(dc.encode(key(), entry(), 1.0, secret(path.parent)))  # a valid entry: still refused behind a link
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to(target)
    else:
        path.mkdir()
    assert len(c.verify()) == 1
    with caplog.at_level(logging.WARNING, LOGGER), pytest.warns(cache_trust.CacheWarning, match="not used"):
        assert c.get(key()) is None  # never blocks on the FIFO, never follows the link
    # not a regular file of this user: not cudnn_py's to delete or replace (issue #37): a miss, left in place
    (dropped,) = drops(caplog)
    assert "left in place" in dropped and os.path.lexists(path) and target.exists()
    assert not c.put(key(), entry()) and os.path.lexists(path) and c.get(key()) is None
    left: list = []
    assert c.clear(left) == 0 and [os.path.basename(p) for p, _ in left] == [path.name] and os.path.lexists(path)


def test_a_directory_under_a_regular_file_disables_the_store_with_one_warning(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with caplog.at_level(logging.WARNING, LOGGER):
        for _ in range(3):
            c = DiskCache(blocker / "cache", 1 << 30)
            assert not c.put(key(), entry()) and c.get(key()) is None and c.disabled
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "off in this process" in warnings[0].getMessage()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes through chmod 500")
def test_an_unwritable_directory_disables_the_store(tmp_path, caplog):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with caplog.at_level(logging.WARNING, LOGGER):
            assert not DiskCache(d).put(key(), entry()) and DiskCache(d).get(key()) is None
        assert len([r for r in caplog.records if r.name == LOGGER]) == 1
    finally:
        d.chmod(0o700)


def test_vanishing_files_during_eviction_and_listing(tmp_path, monkeypatch):
    small = Entry(heuristics=HEUR)
    c = DiskCache(tmp_path, 1 << 30)
    for i in range(5):
        c.put(key(i), small)
    stored = c.entries()
    os.unlink(stored[0].path)  # another process evicted it after the listing
    monkeypatch.setattr(c, "entries", lambda: stored)
    c.max_bytes = stored[-1].size + stored[-2].size  # room for the two newest (entry sizes differ by a few bytes)
    assert c.evict() == 2  # the vanished one is skipped, not counted
    monkeypatch.undo()
    assert len(c.entries()) == 2


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "cudnn_py", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_cli_show_verify_clear(tmp_path):
    c = DiskCache(tmp_path, 1 << 30)
    for i in range(3):
        c.put(key(i), entry(i))
    r = cli("cache", "show", "--dir", str(tmp_path))
    assert r.returncode == 0 and str(tmp_path) in r.stdout and "entries: 3" in r.stdout, r.stdout + r.stderr
    assert "least recently used" in r.stdout and "limit" in r.stdout
    r = cli("cache", "verify", "--dir", str(tmp_path))
    assert r.returncode == 0 and "0 bad" in r.stdout, r.stdout + r.stderr
    bad = Path(c.entries()[0].path)
    bad.write_text("{")
    r = cli("cache", "verify", "--dir", str(tmp_path))
    assert r.returncode == 1 and bad.name in r.stdout and "1 bad" in r.stdout and bad.exists(), r.stdout
    r = cli("cache", "clear", "--dir", str(tmp_path))
    assert r.returncode == 0 and "removed 3 entries" in r.stdout and c.entries() == []
    r = cli("cache", "show", "--dir", str(tmp_path / "nowhere"))
    assert r.returncode == 0 and "entries: 0" in r.stdout and not (tmp_path / "nowhere").exists()
    for action in ("show", "verify", "clear"):
        r = cli("cache", action, "--help")
        assert r.returncode == 0 and "--dir" in r.stdout
