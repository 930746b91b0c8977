"""The examples in docs/ (and README.md) run as a user runs them, and print what the pages say they print.

**Blocks.** Every ```python block is marked `runnable` (run here, on any machine), `gpu` (run on a GPU machine) or
`norun` (with the reason in the block); ```bash blocks marked `runnable` run too (install commands and the like stay
unmarked). The blocks of one page run in order, each in a fresh process, in one directory per page (a later block
may read a file an earlier one wrote).

Nothing is preloaded: a block that validates a graph needs cuDNN's engine libraries, which link against the NVIDIA
driver's ``libcuda.so.1`` (no GPU is needed), and carries the tag `driver` besides `runnable`. On a machine without
a driver library such a block runs twice: first with cudnn_py's deviceless stand-in for the driver refused
(``CUDNN_PY_DRIVER_STANDIN=0``), when it must fail saying so (the ``NO_DRIVER`` error the docs show; a replay, which
reports statuses rather than raising, exits non-zero with cuDNN's ``SUBLIBRARY_LOADING_FAILED``), then as a user
runs it, when the loader loads that stand-in by itself and the block must pass.

**Outputs.** A ```text block tagged `output` shows the output of the run block just before it (nothing but prose
between them; one run block may have several) and is compared with what that block printed:

* ```` ```text output ````: its stdout; add `stderr` for its stderr (e.g. logging);
* add `nodriver` for what it prints on a machine without a driver library with the stand-in refused (its first,
  failing run; compared only on such a machine);
* where it is compared: the output of a `runnable` block was captured on a machine without a GPU (cuDNN 9.28, the
  deviceless driver stand-in for `driver` blocks) and is compared where no GPU is usable (a GPU machine runs these blocks,
  with its own cuDNN, but does not compare them); that of a `gpu` block is compared on the GPU.

Every ```text block right after a run block (nothing but prose between) must be tagged `output`: what a page shows
after a block is checked. On a mismatch the test fails with a diff and the whole actual output, normalised, ready
to paste.

**Normalisation**, the only differences allowed:

* in the actual output: this checkout's path is replaced by ``<checkout>``, the interpreter's environment
  (``sys.prefix``) by ``<venv>``, the page's working directory by ``<tmp>``; trailing spaces and trailing empty
  lines are dropped (in the shown text too);
* in the shown text: a line that is only ``...`` stands for any number of lines (none included); ``...`` inside a
  line for any text on that line; ``<ms>`` for a time (a number: ms or µs), ``<n>`` for any other number that
  varies from run to run (a pid, a count of compiled kernels), ``<addr>`` for an address (``0x...``), ``<version>``
  for a version (``9.28.0``, ``3.11.7``, ``3.11``). Nothing else is a placeholder (``<Descriptor ...>`` is text).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cudnn_py.backend.loader import NO_DRIVER

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```(?P<lang>[a-z]*)(?P<tags>[^\n]*)\n(?P<code>.*?)^```\s*$", re.M | re.S)
MARKS = {"runnable", "gpu", "norun"}
OUTPUT_TAGS = {"output", "stderr", "nodriver"}

# without a driver library, a `driver` block raises an error saying NO_DRIVER, or (a replay, which reports the
# statuses it got rather than raising) prints cuDNN's own status for the engine library that did not load
REPORTED_MISSING = "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED"


@dataclass
class Output:
    line: int
    text: str
    stderr: bool = False  # compared with the block's stderr, not its stdout
    nodriver: bool = False  # what the block prints without a driver library


@dataclass
class Block:
    line: int
    lang: str
    mark: str
    code: str
    driver: bool = False
    outputs: list[Output] = field(default_factory=list)


def page_blocks(page: Path) -> list[Block]:
    """Every ```python block and every marked ```bash block of a page, each with the outputs shown after it."""
    text = page.read_text()
    out: list[Block] = []
    last = None  # the run block the previous fence was, if it was one (or was one of its outputs)
    for m in FENCE.finditer(text):
        lang, tags = m.group("lang"), m.group("tags").split()
        line = text.count("\n", 0, m.start()) + 1
        where = f"{page.name}:{line}"
        if lang == "text":
            if last is None:
                assert "output" not in tags, f"{where}: an `output` block follows no run block"
                continue
            assert "output" in tags, (f"{where}: a ```text block right after the block at line {last.line} is its "
                                      "output: tag it `output` (tests/test_docs.py compares it)")
            assert set(tags) <= OUTPUT_TAGS, f"{where}: unknown tags {sorted(set(tags) - OUTPUT_TAGS)}"
            assert "nodriver" not in tags or last.driver, f"{where}: `nodriver` output of a block not tagged `driver`"
            last.outputs.append(Output(line, m.group("code"), "stderr" in tags, "nodriver" in tags))
            continue
        last = None
        marks = set(tags) & MARKS
        if lang not in ("python", "bash") or (lang == "bash" and not marks):
            continue
        assert len(marks) == 1, f"{where}: mark the {lang} block with one of {sorted(MARKS)}, got {tags}"
        mark = marks.pop()
        block = Block(line, lang, mark, m.group("code"), driver="driver" in tags)
        assert not block.driver or lang == "python", f"{where}: only python blocks can be tagged `driver`"
        out.append(block)
        if mark != "norun":
            last = block
    return out


def python_blocks(page: Path) -> list[tuple[int, str, str]]:
    return [(b.line, b.mark, b.code) for b in page_blocks(page) if b.lang == "python"]


# -- comparing outputs --------------------------------------------------------------------------------------------

TOKENS = {"...": r"[^\n]*?", "<ms>": r"\d+(?:\.\d+)?", "<n>": r"\d+(?:\.\d+)?", "<addr>": r"0x[0-9a-fA-F]+",
          "<version>": r"\d+(?:\.\d+)+"}
TOKEN = re.compile("|".join(re.escape(t) for t in TOKENS))


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def normalised(actual: str, cwd: Path) -> str:
    """The actual output with the paths that differ by machine replaced by their placeholders."""
    for path, name in ((cwd, "<tmp>"), (sys.prefix, "<venv>"), (ROOT, "<checkout>")):
        actual = actual.replace(str(Path(path).resolve()), name).replace(str(path), name)
    return "\n".join(_lines(actual))


def _line_pattern(line: str) -> str:
    pieces, tokens = TOKEN.split(line), TOKEN.findall(line)
    return "".join(re.escape(p) + (TOKENS[t] if t else "") for p, t in zip(pieces, tokens + [""]))


def pattern(shown: str) -> re.Pattern[str]:
    """The regular expression a shown output stands for (the placeholders of the module docstring)."""
    return re.compile("".join(r"(?:[^\n]*\n)*?" if line.strip() == "..." else _line_pattern(line) + r"\n"
                              for line in _lines(shown)))


def _diff(shown: list[str], actual: list[str]) -> list[str]:
    """A line diff that knows the placeholders: a shown line matching the printed one is not a difference, a
    ``...`` line stands for the printed lines it covers (the fewest differences; outputs are short)."""
    pats = [None if s.strip() == "..." else re.compile(_line_pattern(s)) for s in shown]
    n, m = len(shown), len(actual)
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n, -1, -1):
        for j in range(m, -1, -1):
            if i == n:
                cost[i][j] = m - j
            elif pats[i] is None:
                cost[i][j] = min(cost[i + 1][j], cost[i][j + 1] if j < m else cost[i + 1][j])
            else:
                best = 1 + cost[i + 1][j]
                if j < m:
                    best = min(best, 1 + cost[i][j + 1])
                    if pats[i].fullmatch(actual[j]):
                        best = min(best, cost[i + 1][j + 1])
                cost[i][j] = best
    out, i, j = [], 0, 0
    while i < n or j < m:
        p = pats[i] if i < n else None
        if i < n and p is None:
            if j == m or cost[i][j] == cost[i + 1][j]:
                out.append("  ...")
                i += 1
            else:
                j += 1  # covered by the `...`
        elif i < n and j < m and p.fullmatch(actual[j]) and cost[i][j] == cost[i + 1][j + 1]:
            out.append("  " + actual[j])
            i, j = i + 1, j + 1
        elif i < n and cost[i][j] == 1 + cost[i + 1][j]:
            out.append("- " + shown[i])
            i += 1
        else:
            out.append("+ " + actual[j])
            j += 1
    return out


def mismatch(shown: str, actual: str) -> str | None:
    """None when the normalised ``actual`` is what ``shown`` stands for, else a diff (``-`` shown, ``+`` printed)
    and the actual output in full."""
    if pattern(shown).fullmatch(actual + "\n" if actual else ""):
        return None
    diff = "\n".join(_diff(_lines(shown), actual.splitlines()))
    return f"{diff}\n--- printed (normalised), in full:\n{actual}"


def check_outputs(page: Path, block: Block, r: subprocess.CompletedProcess, cwd: Path, *, nodriver: bool) -> None:
    for o in block.outputs:
        if o.nodriver != nodriver:
            continue
        problem = mismatch(o.text, normalised(r.stderr if o.stderr else r.stdout, cwd))
        assert problem is None, (f"{page.name}:{o.line}: the output shown for the block at line {block.line} is not "
                                 f"what it printed ({'stderr' if o.stderr else 'stdout'}):\n{problem}")


# -- running ------------------------------------------------------------------------------------------------------

def has_driver() -> bool:
    r = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"], capture_output=True)
    return r.returncode == 0


def run_blocks(page: Path, marks: set[str], tmp_path: Path, compare: set[str]) -> int:
    """Run the page's blocks of ``marks`` in order; compare the outputs shown for the blocks of ``compare``."""
    ran = 0
    # `python` in a bash block is this interpreter; no LD_PRELOAD / LD_LIBRARY_PATH of the test run reaches a block,
    # nor a variable cudnn_py reads (the test fixtures set CUDNN_PY_REPLAY=0): the blocks see a user's defaults
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH") and not k.startswith("CUDNN_PY_")}
    env.update(PYTHONPATH=str(ROOT), PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    driver = has_driver()
    for b in page_blocks(page):
        if b.mark not in marks:
            continue
        cmd = [sys.executable, "-c", b.code] if b.lang == "python" else ["bash", "-euo", "pipefail", "-c", b.code]
        # each block a first run: its own empty cache home (what a process keeps there - planning's disk cache, the
        # loader's verdicts - would change what later blocks print, and the test must not write the user's cache)
        env["XDG_CACHE_HOME"] = str(tmp_path.parent / f"{tmp_path.name}-cache-{b.line}")
        if b.driver and not driver:
            # as a user without the driver library runs it, in a copy of the page's directory: what it leaves there
            # (a trace it began) is not what the later blocks read
            scratch = tmp_path.parent / f"{tmp_path.name}-nodriver"
            shutil.rmtree(scratch, ignore_errors=True)
            shutil.copytree(tmp_path, scratch)
            refused = {**env, "CUDNN_PY_DRIVER_STANDIN": "0"}
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=scratch, env=refused, timeout=600)
            says_so = NO_DRIVER in r.stderr or ("Traceback" not in r.stderr and REPORTED_MISSING in r.stdout)
            assert r.returncode != 0 and says_so, (f"{page.name}:{b.line} (driver) should fail without a driver "
                                                   f"library and its stand-in, saying so:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
            if b.mark in compare:
                check_outputs(page, b, r, scratch, nodriver=True)
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
        assert r.returncode == 0, f"{page.name}:{b.line} ({b.mark}) failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
        if b.mark in compare:
            check_outputs(page, b, r, tmp_path, nodriver=False)
        ran += 1
    return ran


def test_every_python_block_is_marked():
    blocks = [b for page in PAGES for b in python_blocks(page)]
    assert blocks, "docs/ has no python examples"
    assert {mark for _, mark, _ in blocks} <= MARKS


def test_outputs_are_shown_somewhere():
    """The comparison has something to compare, on both kinds of machine's pages."""
    shown = [(b.mark, o) for page in PAGES for b in page_blocks(page) for o in b.outputs]
    assert any(mark == "runnable" for mark, _ in shown) and any(mark == "gpu" for mark, _ in shown)
    assert any(o.stderr for _, o in shown) and any(o.nodriver for _, o in shown)


@pytest.mark.parametrize("page", [p for p in PAGES if any(b.mark == "runnable" for b in page_blocks(p))],
                         ids=lambda p: p.name)
def test_runnable_blocks(page, tmp_path):
    from tests.conftest import gpu_available

    # the shown outputs of runnable blocks were captured without a GPU: compared where there is none
    assert run_blocks(page, {"runnable"}, tmp_path, compare=set() if gpu_available() else {"runnable"}) > 0


@pytest.mark.gpu
@pytest.mark.parametrize("page", [p for p in PAGES if any(m == "gpu" for _, m, _ in python_blocks(p))],
                         ids=lambda p: p.name)
def test_gpu_blocks(page, tmp_path):
    """On the GPU machine: the runnable blocks too, in page order, since a GPU block may follow one; the outputs
    shown for the GPU blocks are compared."""
    assert run_blocks(page, {"runnable", "gpu"}, tmp_path, compare={"gpu"}) > 0


# -- the comparison itself ----------------------------------------------------------------------------------------

def test_placeholders():
    assert mismatch("a\n...\nz", "a\nz") is None
    assert mismatch("a\n...\nz", "a\nb\nc\nz") is None
    assert mismatch("took <ms> ms at <addr>, pid <n>", "took 3.25 ms at 0x7f00ab, pid 4242") is None
    assert mismatch("cuDNN <version> (...)", "cuDNN 9.28.0 (anything (at all))") is None
    assert mismatch("<venv>/lib/python<version>/x", "<venv>/lib/python3.12/x") is None
    assert mismatch("a  \n\n", "a") is None
    assert mismatch("<Descriptor #1>", "<Descriptor #1>") is None
    for shown, actual in [("a\n...\nz", "a\nb"), ("took <ms> ms", "took fast ms"), ("x", "x\ny"), ("x", ""),
                          ("a ... z", "a b\nz"), ("<version>", "9"), ("a.b", "axb")]:
        assert mismatch(shown, actual) is not None, (shown, actual)
    problem = mismatch("one\n...\ntook <ms> ms\ntwo", "one\nx\ny\ntook 2 ms\nthree")
    assert problem.startswith("  one\n  ...\n  took 2 ms\n- two\n+ three\n--- printed")
    assert problem.endswith("one\nx\ny\ntook 2 ms\nthree")
    cwd = Path("/tmp/page")
    assert normalised(f"{ROOT}/x {sys.prefix}/bin {cwd}/f  \n\n", cwd) == "<checkout>/x <venv>/bin <tmp>/f"


def test_outputs_pair_with_their_blocks(tmp_path):
    """Outputs attach to the block just before them; any ```text after a run block must be an output; a GPU block's
    output is compared when GPU blocks run (here a GPU block that needs no GPU, run as test_gpu_blocks runs it)."""
    page = tmp_path / "page.md"
    page.write_text("```python gpu\nimport sys\nprint('out'); print('err', file=sys.stderr)\n```\n\nprints\n\n"
                    "```text output\nout\n```\n\n```text output stderr\nerr\n```\n\n"
                    "```bash runnable\necho 'took 12.5 ms'\n```\n```text output\ntook <ms> ms\n```\n")
    blocks = page_blocks(page)
    assert [(b.mark, [(o.line, o.stderr) for o in b.outputs]) for b in blocks] == \
        [("gpu", [(8, False), (12, True)]), ("runnable", [(19, False)])]
    assert run_blocks(page, {"runnable", "gpu"}, tmp_path, compare={"gpu", "runnable"}) == 2
    page.write_text(page.read_text().replace("output\nout", "output\nstale"))
    with pytest.raises(AssertionError, match=r"(?s)page.md:8: the output shown.*- stale\n\s*\+ out"):
        run_blocks(page, {"gpu"}, tmp_path, compare={"gpu"})
    assert run_blocks(page, {"gpu"}, tmp_path, compare={"runnable"}) == 1  # a GPU block's output, not compared
    for bad, why in [("```python runnable\nprint(1)\n```\n```text\n1\n```\n", "tag it `output`"),
                     ("text\n```text output\n1\n```\n", "follows no run block"),
                     ("```python norun\nprint(1)\n```\n```text output\n1\n```\n", "follows no run block"),
                     ("```python runnable\nprint(1)\n```\n```text output nodriver\n1\n```\n", "not tagged `driver`")]:
        page.write_text(bad)
        with pytest.raises(AssertionError, match=re.escape(why)):
            page_blocks(page)


@pytest.mark.parametrize("page", ["ARCHITECTURE.md", "docs/internals.md"])
def test_every_path_a_developer_page_names_exists(page):
    """The architecture pages name modules by path: each must exist (from the repository root, from cudnn_py/, or,
    for a family's facet or a ``<family>`` pattern, in a real family folder), so that a move cannot leave them stale."""
    text = (ROOT / page).read_text()
    names = set(re.findall(r"`([\w./*<>-]+)`", text)) | set(re.findall(r"\]\(([^)#]+)", text))
    missing = []
    for n in sorted(names):
        if n.startswith("include/") or not ("/" in n or n.endswith((".py", ".md", ".json", ".pyi"))):
            continue  # (the official frontend's C++ headers; bare words)
        n = n.replace("<family>", "matmul")
        here = (ROOT / page).parent
        candidates = [here / n, ROOT / n, ROOT / "cudnn_py" / n, ROOT / "cudnn_py" / "_generated" / n]
        if n in ("spec.py", "lowering.py", "reference.py"):
            candidates.append(ROOT / "cudnn_py" / "families" / "matmul" / n)
        if not any(glob.glob(str(c)) for c in candidates):
            missing.append(n)
    assert not missing, f"{page} names paths that do not exist: {missing}"
