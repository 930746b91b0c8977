"""The code's shape, checked: the import layering (import-linter), ruff and mypy clean on the whole package, and no
hand-written module longer than a sitting's reading (issue #30). The tools come with the test extra; where one is
missing (a bare checkout) its test skips."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    exe = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(exe).exists():
        pytest.skip(f"{name} is not installed (pip install '.[test]')")
    return exe


def _run(args: list, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_import_layers_are_kept():
    r = _run([_tool("lint-imports")])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "BROKEN" not in r.stdout and "KEPT" in r.stdout


def test_import_linter_catches_an_upward_import(tmp_path):
    """The contract is not vacuous: a lazy import of the facade from a family's lowering breaks it."""
    exe = _tool("lint-imports")
    shutil.copytree(ROOT / "cudnn_py", tmp_path / "cudnn_py")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    matmul = tmp_path / "cudnn_py" / "families" / "matmul" / "lowering.py"
    matmul.write_text(matmul.read_text() + "\n\ndef _upward():\n    from ...facade import pygraph  # noqa\n")
    r = _run([exe], cwd=tmp_path)
    assert r.returncode != 0 and "cudnn_py.families.matmul.lowering -> cudnn_py.facade" in r.stdout, r.stdout[-3000:]


def test_ruff_is_clean():
    r = _run([_tool("ruff"), "check", "cudnn_py", "tests", "benchmarks", "examples", "bindings", "fuzz"])
    assert r.returncode == 0, r.stdout[-4000:]


def test_mypy_is_clean():
    r = _run([_tool("mypy")])
    assert r.returncode == 0, r.stdout[-4000:]


MAX_MODULE_LINES = 600  # a module read in one sitting; past it, split it by job (ARCHITECTURE.md)


def test_no_hand_written_module_is_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "cudnn_py").rglob("*.py"))
            if "_generated" not in p.parts and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these by job (lines): {long}"


def _import_graph():
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (pip install '.[test]')")
    return grimp.build_graph("cudnn_py", include_external_packages=False)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    """Every import the package makes (lazy ones and those under TYPE_CHECKING included), module by module:
    no module reaches itself. A package's ``__init__`` importing its own submodules is not a cycle."""
    graph = _import_graph()
    edges = {m: {n for n in graph.find_modules_directly_imported_by(m)
                 if not (m.startswith(n + ".") or n.startswith(m + "."))} for m in graph.modules}
    assert not _cycles(edges), _cycles(edges)


def test_no_import_cycle_between_packages():
    """The same graph with each module folded into its package two levels down (``cudnn_py.plans``,
    ``cudnn_py.families.attention``): no package reaches itself through another."""
    graph = _import_graph()

    def package(m: str) -> str:
        return ".".join(m.split(".")[:3]) if m.startswith("cudnn_py.families.") else ".".join(m.split(".")[:2])

    edges: dict[str, set[str]] = {}
    for m in graph.modules:
        targets = {package(n) for n in graph.find_modules_directly_imported_by(m)} - {package(m)}
        edges.setdefault(package(m), set()).update(t for t in targets if t != "cudnn_py")
    assert not _cycles(edges), _cycles(edges)
