"""The examples in docs/ run as a user runs them: every ```python block is marked `runnable` (run here, on any
machine), `gpu` (run on a GPU machine) or `norun` (with the reason in the block); ```bash blocks marked `runnable`
run too (install commands and the like stay unmarked). The blocks of one page run in order, each in a fresh
process, in one directory per page (a later block may read a file an earlier one wrote).

Nothing is preloaded: a block that validates a graph needs the NVIDIA driver's ``libcuda.so.1`` (cuDNN's engine
libraries link against it; no GPU is needed) and carries the tag `driver` besides `runnable`. On a machine without
a driver library such a block must fail with the one-sentence ``NO_DRIVER`` error the docs show, and then runs a
second time with the test suite's libcuda stand-in, so that what it checks is still checked here."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cudnn_py.backend.loader import NO_DRIVER

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(?P<lang>[a-z]*)(?P<tags>[^\n]*)\n(?P<code>.*?)^```\s*$", re.M | re.S)
MARKS = {"runnable", "gpu", "norun"}

# for a `driver` block on a machine without an NVIDIA driver, after it failed as a user's would: the test-only
# libcuda stand-in, as the test suite uses it
STAND_IN = f"""import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.support.libcuda_stub import ensure_driver
ensure_driver()
del sys.path[0]
"""


def blocks(page: Path) -> list[tuple[int, str, str, str]]:
    """(line, language, mark, code) of every ```python block and every marked ```bash block of a page."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        lang, tags = m.group("lang"), set(m.group("tags").split())
        line = text.count("\n", 0, m.start()) + 1
        marks = tags & MARKS
        if lang == "bash" and not marks:
            continue
        if lang not in ("python", "bash"):
            continue
        assert len(marks) == 1, f"{page.name}:{line}: mark the {lang} block with one of {sorted(MARKS)}, got {tags}"
        out.append((line, lang, marks.pop(), m.group("code")))
    return out


def python_blocks(page: Path) -> list[tuple[int, str, str]]:
    return [(line, mark, code) for line, lang, mark, code in blocks(page) if lang == "python"]


def driver_tagged(page: Path) -> set[int]:
    """The lines of the blocks of a page tagged `driver`."""
    text = page.read_text()
    return {text.count("\n", 0, m.start()) + 1 for m in FENCE.finditer(text) if "driver" in m.group("tags").split()}


def has_driver() -> bool:
    r = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"], capture_output=True)
    return r.returncode == 0


def run_blocks(page: Path, marks: set[str], tmp_path: Path) -> int:
    ran = 0
    # `python` in a bash block is this interpreter; no LD_PRELOAD / LD_LIBRARY_PATH of the test run reaches a block
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")}
    env.update(PYTHONPATH=str(ROOT), PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    driver, needs_driver = has_driver(), driver_tagged(page)
    for line, lang, mark, code in blocks(page):
        if mark not in marks:
            continue
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
        if line in needs_driver and not driver:
            assert r.returncode != 0 and NO_DRIVER in r.stderr, \
                f"{page.name}:{line} (driver) should fail without a driver library, saying so:\n{r.stderr[-3000:]}"
            assert lang == "python"
            r = subprocess.run([sys.executable, "-c", STAND_IN + code], capture_output=True, text=True, cwd=tmp_path,
                               env=env, timeout=600)
        assert r.returncode == 0, f"{page.name}:{line} ({mark}) failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
        ran += 1
    return ran


def test_every_python_block_is_marked():
    blocks = [b for page in PAGES for b in python_blocks(page)]
    assert blocks, "docs/ has no python examples"
    assert {mark for _, mark, _ in blocks} <= MARKS


@pytest.mark.parametrize("page", [p for p in PAGES if any(m == "runnable" for _, _, m, _ in blocks(p))],
                         ids=lambda p: p.name)
def test_runnable_blocks(page, tmp_path):
    assert run_blocks(page, {"runnable"}, tmp_path) > 0


@pytest.mark.gpu
@pytest.mark.parametrize("page", [p for p in PAGES if any(m == "gpu" for _, m, _ in python_blocks(p))],
                         ids=lambda p: p.name)
def test_gpu_blocks(page, tmp_path):
    """On the GPU machine: the runnable blocks too, in page order, since a GPU block may follow one."""
    assert run_blocks(page, {"runnable", "gpu"}, tmp_path) > 0
