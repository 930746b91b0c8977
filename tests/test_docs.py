"""The examples in docs/ run: every ```python block is marked `runnable` (run here, on any machine), `gpu` (run on
a GPU machine) or `norun` (with the reason in the block). The blocks of one page run in order, each in a fresh
process, in one directory per page (a later block may read a file an earlier one wrote)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(?P<lang>[a-z]*)(?P<tags>[^\n]*)\n(?P<code>.*?)^```\s*$", re.M | re.S)
MARKS = {"runnable", "gpu", "norun"}

# on a machine without an NVIDIA driver the blocks get the test-only libcuda stand-in, as the test suite does
PRELUDE = f"""import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.support.libcuda_stub import ensure_driver
ensure_driver()
del sys.path[0]
"""


def python_blocks(page: Path) -> list[tuple[int, str, str]]:
    """(line, mark, code) of every ```python block of a page."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        if m.group("lang") != "python":
            continue
        tags = set(m.group("tags").split())
        line = text.count("\n", 0, m.start()) + 1
        marks = tags & MARKS
        assert len(marks) == 1, f"{page.name}:{line}: mark the python block with one of {sorted(MARKS)}, got {tags}"
        out.append((line, marks.pop(), m.group("code")))
    return out


def run_blocks(page: Path, marks: set[str], tmp_path: Path) -> int:
    ran = 0
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for line, mark, code in python_blocks(page):
        if mark not in marks:
            continue
        r = subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True, text=True, cwd=tmp_path,
                           env=env, timeout=600)
        assert r.returncode == 0, f"{page.name}:{line} ({mark}) failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
        ran += 1
    return ran


def test_every_python_block_is_marked():
    blocks = [b for page in PAGES for b in python_blocks(page)]
    assert blocks, "docs/ has no python examples"
    assert {mark for _, mark, _ in blocks} <= MARKS


@pytest.mark.parametrize("page", [p for p in PAGES if any(m == "runnable" for _, m, _ in python_blocks(p))],
                         ids=lambda p: p.name)
def test_runnable_blocks(page, tmp_path):
    assert run_blocks(page, {"runnable"}, tmp_path) > 0


@pytest.mark.gpu
@pytest.mark.parametrize("page", [p for p in PAGES if any(m == "gpu" for _, m, _ in python_blocks(p))],
                         ids=lambda p: p.name)
def test_gpu_blocks(page, tmp_path):
    """On the GPU machine: the runnable blocks too, in page order, since a GPU block may follow one."""
    assert run_blocks(page, {"runnable", "gpu"}, tmp_path) > 0
