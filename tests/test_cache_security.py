"""The cache directory's trust (issue #37, classes 1-3): a directory is used only if it is this user's and
cudnn_py's (marker and key, owner, mode, no other user's symbolic link on the way); entries and kept loader verdicts
are sealed with the directory's key; only this user's regular files of cudnn_py's names are deleted (reads,
eviction, clear); the cache commands answer every OSError with one line and an exit status.

Run as root (as here), the tests give files to another uid (``os.chown`` to 65534) and run the cache commands as
that uid (``os.setuid`` in the child); without root those tests are skipped."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

from cudnn_py import cache_trust
from cudnn_py.cache_trust import MARKER, CacheWarning
from cudnn_py.plans import disk_cache as dc
from cudnn_py.plans.disk_cache import DiskCache, Entry
from tests.test_disk_cache import HEUR, entry, key

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
ROOT_ONLY = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                               reason="needs root: files of another uid, a child as another uid")


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def refused(path: Path, match: str) -> str:
    """Using the directory as planning does gives one CacheWarning matching ``match`` and stores nothing."""
    with pytest.warns(CacheWarning, match=match):
        c = DiskCache(path, 1 << 30)
        assert not c.put(key(), entry()) and c.get(key()) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the refusal holds for the process, without a second warning
        assert not DiskCache(path, 1 << 30).put(key(), entry())
    assert c.disabled is not None
    return c.disabled


# ---- the directory ------------------------------------------------------------------------------------------------
def test_directories_made_are_0700_at_every_level_with_a_private_marker(tmp_path):
    old = os.umask(0o022)
    try:
        c = DiskCache(tmp_path / "a" / "b" / "cache", 1 << 30)
        assert c.put(key(), entry())
    finally:
        os.umask(old)
    for d in ("a", "a/b", "a/b/cache"):
        assert mode(tmp_path / d) == 0o700, d
    marker = tmp_path / "a/b/cache" / MARKER
    assert mode(marker) == 0o600 and marker.read_text().startswith("cudnn_py cache directory")
    assert all(mode(Path(s.path)) == 0o600 for s in c.entries())


def test_an_empty_directory_is_adopted_and_a_non_empty_one_without_the_marker_is_not(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o755)
    assert DiskCache(empty, 1 << 30).put(key(), entry()) and (empty / MARKER).exists()
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    why = refused(home, "not empty and has no .cudnn_py-cache marker")
    assert "point CUDNN_PY_CACHE_DIR" in why and sorted(os.listdir(home)) == ["notes.txt"]


@pytest.mark.parametrize("spoil,match", [
    (lambda m: m.chmod(0o644), "readable by others"),
    (lambda m: m.write_text("cudnn_py cache directory\nkey 12\n"), "damaged"),
    (lambda m: (m.unlink(), m.symlink_to("/etc/hostname")), "not a regular file"),
])
def test_a_marker_that_is_not_this_users_secret_refuses_the_directory(tmp_path, spoil, match):
    d = tmp_path / "cache"
    assert DiskCache(d, 1 << 30).put(key(), entry())
    spoil(d / MARKER)
    cache_trust._homes.pop(str(d))  # (as a fresh process would)
    refused(d, match)


@pytest.mark.parametrize("how", ["group-writable", "world-writable"])
def test_a_directory_writable_by_others_is_refused(tmp_path, how):
    d = tmp_path / "cache"
    d.mkdir()
    d.chmod(0o770 if how == "group-writable" else 0o707)
    refused(d, "writable by")
    assert os.listdir(d) == []  # no marker written


@ROOT_ONLY
def test_a_directory_or_marker_of_another_user_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    refused(d, f"owned by uid {NOBODY}")
    assert os.listdir(d) == []
    mine = tmp_path / "mine"
    assert DiskCache(mine, 1 << 30).put(key(), entry())
    os.chown(mine / MARKER, NOBODY, NOBODY)
    cache_trust._homes.pop(str(mine))
    refused(mine, f"owned by uid {NOBODY}")


@ROOT_ONLY
@pytest.mark.parametrize("where", ["the directory", "an ancestor"])
def test_a_symlink_of_another_user_on_the_way_is_refused_and_ones_own_is_followed(tmp_path, where):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    path = link if where == "the directory" else link / "cache"
    os.lchown(link, NOBODY, NOBODY)
    refused(path, f"symbolic link owned by uid {NOBODY}")
    assert list(real.iterdir()) == []  # nothing made through the link
    own = tmp_path / "own"
    own.symlink_to(real)  # this user's link (e.g. ~/.cache on a scratch disk): followed
    assert DiskCache(own if where == "the directory" else own / "cache", 1 << 30).put(key(), entry())


# ---- entries ------------------------------------------------------------------------------------------------------
def _one_entry(d: Path) -> Path:
    c = DiskCache(d, 1 << 30)
    assert c.put(key(), entry())
    return Path(c.entries()[0].path)


def test_an_entry_copied_from_another_directory_fails_its_keyed_checksum(tmp_path):
    theirs = _one_entry(tmp_path / "theirs")  # e.g. another user's cache, copied: another key
    mine = DiskCache(tmp_path / "mine", 1 << 30)
    assert mine.put(key(1), entry(1))
    shutil.copy(theirs, tmp_path / "mine" / theirs.name)
    problems: list[str] = []
    with pytest.warns(CacheWarning, match="checksum mismatch"):
        assert mine.get(key(), problems) is None
    assert "not sealed with this cache directory's key" in problems[0]
    assert not (tmp_path / "mine" / theirs.name).exists()  # this user's file: deleted
    assert mine.get(key(1)) == entry(1)


def test_an_entry_writable_by_others_is_not_used(tmp_path):
    path = _one_entry(tmp_path / "c")
    path.chmod(0o666)
    problems: list[str] = []
    with pytest.warns(CacheWarning, match="writable by group and others"):
        assert DiskCache(tmp_path / "c").get(key(), problems) is None
    assert "writable by group and others" in problems[0] and not path.exists()


@ROOT_ONLY
def test_a_planted_entry_of_another_user_is_refused_and_survives_get_eviction_and_clear(tmp_path):
    d = tmp_path / "c"
    path = _one_entry(d)
    os.chown(path, NOBODY, NOBODY)  # planted: another user's file, with a (for the test) valid seal
    c = DiskCache(d, 1 << 30)
    problems: list[str] = []
    with pytest.warns(CacheWarning, match=f"owned by uid {NOBODY}"):
        assert c.get(key(), problems) is None
    assert "left in place" in problems[0] and path.exists()
    assert not c.put(key(), entry()) and path.stat().st_uid == NOBODY  # never replaced either
    assert [p for p, _ in c.verify()] == [str(path)] and c.entries() == []  # not counted as this user's
    small = DiskCache(d, 1)
    for i in range(1, 4):
        small.put(key(i), Entry(heuristics=HEUR))  # each too big for the limit: evicts down to nothing
    assert small.evict() == 0 and path.exists()
    left: list = []
    assert c.clear(left) == 0 and path.exists() and left == [(str(path), f"owned by uid {NOBODY}, not by this user "
                                                               f"(uid 0): not cudnn_py's to delete")]


@ROOT_ONLY
def test_clear_and_eviction_delete_only_this_users_entries_and_dead_writers_temp_files(tmp_path):
    d = tmp_path / "c"
    c = DiskCache(d, 1 << 30)
    for i in range(3):
        assert c.put(key(i), entry(i))
    old = time.time() - 2 * cache_trust.STALE_TMP_SECONDS
    foreign_entry = d / ("f" * 64 + ".entry")
    foreign_entry.write_text("{}")
    os.chown(foreign_entry, NOBODY, NOBODY)
    foreign_tmp = d / f"{cache_trust.TMP_PREFIX}1-{'0' * 16}.part"  # cudnn_py's name, another user's file
    foreign_tmp.write_text("x")
    os.chown(foreign_tmp, NOBODY, NOBODY)
    os.utime(foreign_tmp, (old, old))
    dead = d / f"{cache_trust.TMP_PREFIX}999999999-{'1' * 16}.part"  # this user's, of a writer that is gone
    dead.write_text("x")
    os.utime(dead, (old, old))
    live = d / f"{cache_trust.TMP_PREFIX}{os.getpid()}-{'2' * 16}.part"  # this user's, of a live writer
    live.write_text("x")
    lookalike = d / ".tmp-abc"  # the old prefix alone: not a name only cudnn_py makes
    lookalike.write_text("x")
    (d / "notes.txt").write_text("not an entry")
    (d / ("e" * 64 + ".entry")).mkdir()
    c.max_bytes = 1
    assert c.evict() == 3 and not dead.exists()
    survivors = sorted(os.listdir(d))
    assert survivors == sorted([MARKER, foreign_entry.name, foreign_tmp.name, live.name, lookalike.name,
                                "notes.txt", "e" * 64 + ".entry"])
    left: list = []
    assert c.clear(left) == 0 and sorted(os.listdir(d)) == survivors
    assert sorted(os.path.basename(p) for p, _ in left) == ["e" * 64 + ".entry", foreign_entry.name]


WRITER = """
import os, sys, time
sys.path.insert(0, ROOT)
from tests.test_disk_cache import key, entry
from cudnn_py.plans.disk_cache import DiskCache
if sys.argv[2] == "stall":  # the temp file written whole, then stopped before its rename
    real = os.replace
    os.replace = lambda *a, **k: (print("stalled", flush=True), time.sleep(600))
c = DiskCache(sys.argv[1], 1 << 30)
i = 0
while True:
    c.put(key(i % 7), entry(i))
    i += 1
    if i == 20:
        print("going", flush=True)
"""


def test_writers_killed_mid_write_leave_a_consistent_cache(tmp_path):
    d = tmp_path / "c"
    assert DiskCache(d, 1 << 30).put(key(0), entry(0))  # (the marker made once, before the race)
    script = WRITER.replace("ROOT", repr(str(ROOT)))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(d), how], stdout=subprocess.PIPE, text=True)
             for how in ("write", "write", "write", "stall")]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() in ("going", "stalled")
    for p in procs:
        p.send_signal(signal.SIGKILL)
        p.wait(60)
    c = DiskCache(d, 1 << 30)
    assert c.verify() == []
    assert all(c.get(key(i)) is not None for i in range(7))  # every key written whole by someone
    leftovers = [n for n in os.listdir(d) if cache_trust.is_temporary_name(n)]
    assert leftovers, "the stalled writer's temp file"
    c.evict()  # within the grace period: kept (its writer might be in another pid space)
    assert all((d / n).exists() for n in leftovers)
    for n in leftovers:
        os.utime(d / n, (time.time() - 60, time.time() - 60))
    c.evict()  # past the grace period, its writer gone: removed
    assert not [n for n in os.listdir(d) if cache_trust.is_temporary_name(n)]


# ---- the loader's kept verdicts -----------------------------------------------------------------------------------
PLANT = """
import json, os, shutil, sys
sys.path.insert(0, ROOT_PATH)
from tests.support.libcuda_stub import ensure_driver
ensure_driver()
from cudnn_py import cache_trust
from cudnn_py.backend import loader, vetting
path, how, other = sys.argv[1], sys.argv[2], sys.argv[3]
key = vetting._verdict_key(path)
name = vetting._verdict_file(key)
good = json.dumps({"key": key, "version": 91900, "check": 0})
if how == "sealed":  # this user's cudnn_py kept it: the trial is skipped (the control)
    assert cache_trust.write_record("vetted", name, good)
elif how == "unsealed":  # written by hand, as an attacker would (who cannot read the key)
    h = cache_trust.home()
    h.subdir("vetted", True)
    with open(os.path.join(h.path, "vetted", name), "w") as f:
        f.write(good)
else:  # sealed, but for another directory (another user's cache): copied here
    mine = os.environ["CUDNN_PY_CACHE_DIR"]
    os.environ["CUDNN_PY_CACHE_DIR"] = other
    assert cache_trust.write_record("vetted", name, good)
    os.environ["CUDNN_PY_CACHE_DIR"] = mine
    cache_trust.home().subdir("vetted", True)
    shutil.copy(os.path.join(other, "vetted", name), os.path.join(mine, "vetted", name))
try:
    loader.load_library()
    print("LOADED")
except Exception as e:
    print(type(e).__name__, e)
""".replace("ROOT_PATH", repr(str(ROOT)))


@pytest.mark.parametrize("how", ["unsealed", "another-directory", "sealed"])
def test_a_planted_verdict_does_not_skip_the_trial_load(tmp_path, how):
    from tests.support.fake_libcudnn import fake_libcudnn

    lib = fake_libcudnn(tmp_path, "CRASH_IN_CUDART")  # a library that kills the process that loads it
    env = {**os.environ, "CUDNN_PY_CACHE": "1", "CUDNN_PY_CACHE_DIR": str(tmp_path / "cache"),
           "CUDNN_PY_LIBRARY_VETTED": "", "CUDNN_PY_LIBRARY": str(lib), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", PLANT, str(lib), how, str(tmp_path / "other")], capture_output=True,
                       text=True, env=env, timeout=120)
    if how == "sealed":  # the control: the verdict's key is this library's, and a trusted verdict skips the trial
        assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stdout, r.stderr[-2000:])
        return
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])  # the trial ran, in a child: this process lives
    assert r.stdout.startswith("CudnnLibraryNotFoundError") and "died of SIGSEGV" in r.stdout, r.stdout
    assert "CacheWarning" in r.stderr and "keyed checksum does not match" in r.stderr, r.stderr


# ---- the cache commands -------------------------------------------------------------------------------------------
AS_NOBODY = """
import argparse, json, os, shutil, sys, time
from cudnn_py import __main__ as cli, cache_trust
from cudnn_py.plans import disk_cache, disk_planning
cli._parser().parse_args(["cache", "show"])  # (what the command imports, loaded before the uid changes)
os.setgroups([]); os.setgid(NOBODY); os.setuid(NOBODY)  # (the interpreter may live where that uid cannot read)
sys.exit(cli.main(sys.argv[1:]))
""".replace("NOBODY", str(NOBODY))


def cli(*args: str, env: dict | None = None, user: int | None = None) -> subprocess.CompletedProcess:
    """``python -m cudnn_py ARGS``; ``user``: as uid 65534 (privileges dropped before the command runs)."""
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    head = ["-c", AS_NOBODY] if user is not None else ["-m", "cudnn_py"]
    return subprocess.run([sys.executable, *head, *args], capture_output=True, text=True, env=e, timeout=60,
                          cwd="/")


def one_line(r: subprocess.CompletedProcess, code: int, *words: str) -> str:
    assert r.returncode == code and "Traceback" not in r.stderr, (r.returncode, r.stdout, r.stderr)
    (line,) = r.stderr.splitlines()
    assert all(w in line for w in words), line
    return line


def test_an_empty_dir_argument_is_refused(tmp_path):
    for action in ("show", "verify", "clear"):
        one_line(cli("cache", action, "--dir", ""), 2, "--dir is empty", "current directory is never assumed")


def test_clear_of_a_directory_that_is_not_a_cudnn_py_cache_deletes_nothing(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("mine")
    (home / ("a" * 64 + ".entry")).write_text("looks like an entry")
    (home / ".tmp-x").write_text("")
    before = sorted(os.listdir(home))
    for action in ("show", "verify", "clear"):
        one_line(cli("cache", action, env={"CUDNN_PY_CACHE_DIR": str(home)}), 2, "no .cudnn_py-cache marker")
    assert sorted(os.listdir(home)) == before


@ROOT_ONLY
def test_a_directory_of_another_user_is_refused_by_every_command(tmp_path):
    d = tmp_path / "theirs"
    assert DiskCache(d, 1 << 30).put(key(), entry())
    os.chown(d, NOBODY, NOBODY)
    for action in ("show", "verify", "clear"):
        one_line(cli("cache", action, "--dir", str(d)), 2, f"owned by uid {NOBODY}")
    assert len(list(d.glob("*.entry"))) == 1


@pytest.fixture
def nobodys_cache():
    """A cache of three entries owned by uid 65534, in a directory that uid can reach."""
    top = Path(tempfile.mkdtemp(prefix="cudnn_py-nobody-"))
    top.chmod(0o755)
    d = top / "cache"
    c = DiskCache(d, 1 << 30)
    for i in range(3):
        assert c.put(key(i), entry(i))
    for p in [d, *d.iterdir()]:
        os.chown(p, NOBODY, NOBODY)
    yield d
    shutil.rmtree(top, ignore_errors=True)


@ROOT_ONLY
def test_clear_of_a_read_only_directory_exits_1_naming_what_was_left(nobodys_cache):
    d = nobodys_cache
    d.chmod(0o500)
    r = cli("cache", "clear", "--dir", str(d), user=NOBODY)
    assert r.returncode == 1 and "Traceback" not in r.stderr and "removed 0 entries" in r.stdout, r
    lines = r.stderr.splitlines()
    assert len(lines) == 4 and all("not removed" in x and "Permission denied" in x for x in lines[:3]), lines
    assert "3 file(s) left" in lines[3] and len(list(d.glob("*.entry"))) == 3
    d.chmod(0o700)
    r = cli("cache", "clear", "--dir", str(d), user=NOBODY)
    assert r.returncode == 0 and "removed 3 entries" in r.stdout and r.stderr == "", r


@ROOT_ONLY
@pytest.mark.parametrize("action", ["show", "verify", "clear"])
def test_an_unreadable_directory_is_one_line_and_status_2(nobodys_cache, action):
    nobodys_cache.chmod(0o000)
    one_line(cli("cache", action, "--dir", str(nobodys_cache), user=NOBODY), 2, "Permission denied")


def test_the_cache_commands_on_a_good_cache(tmp_path):
    d = tmp_path / "c"
    c = DiskCache(d, 1 << 30)
    for i in range(2):
        assert c.put(key(i), entry(i))
    assert cli("cache", "show", "--dir", str(d)).stdout.count("entries: 2") == 1
    r = cli("cache", "clear", "--dir", str(d))
    assert r.returncode == 0 and "removed 2 entries" in r.stdout and r.stderr == ""
    assert sorted(os.listdir(d)) == [MARKER]  # the marker stays: still cudnn_py's directory
    assert json.loads(json.dumps(dc.FORMAT_VERSION)) == 2
