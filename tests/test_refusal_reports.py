"""CPU: a GPU test whose graph was refused must be reported as a skip or an xfail with the refusal's words
(tests/support/refusals.py), never as a pass. Scans the GPU test modules for the ways a refusal became a pass: a
handler of cudnnGraphNotSupportedError (or FeatureVersionError) that returns, or neither re-raises nor reports the
test; and ``with pytest.raises(<refusal>)``, or a call of a helper of the module that holds one, followed by
``return`` (the test done, its feature never run)."""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REFUSALS = {"cudnnGraphNotSupportedError", "FeatureVersionError"}
REPORTS = {"skip", "xfail", "fail", "skip_refused", "xfail_refused", "expect_refusal"}


def _names(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node)
            if isinstance(n, (ast.Name, ast.Attribute))}


def _walk(body: list[ast.stmt]):
    """The nodes of ``body``, not entering nested functions."""
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        yield node
        todo.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, (ast.FunctionDef, ast.Lambda)))


def _reports_or_raises(body: list[ast.stmt]) -> bool:
    for node in _walk(body):
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, ast.Call):
            fn = node.func
            if (fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")) in REPORTS:
                return True
    return False


def _expects_refusal(stmt: ast.AST) -> bool:
    return isinstance(stmt, ast.With) and any(
        isinstance(item.context_expr, ast.Call) and "raises" in _names(item.context_expr.func)
        and bool(REFUSALS & _names(item.context_expr)) for item in stmt.items)


def refusals_counted_as_passes(source: str, name: str = "<test>") -> list[str]:
    """Where ``source`` lets a refusal pass: a refusal handler that returns, or does not re-raise or report; a
    return after a ``pytest.raises`` of a refusal (or a call of a function of ``source`` that holds one) in the
    same block."""
    tree = ast.parse(source)
    helpers = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
               and any(_expects_refusal(n) for n in _walk(f.body))}

    def expects(stmt: ast.stmt) -> bool:
        return _expects_refusal(stmt) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                                          and getattr(stmt.value.func, "id", None) in helpers)

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None and REFUSALS & _names(node.type):
            if any(isinstance(n, ast.Return) for n in _walk(node.body)) or not _reports_or_raises(node.body):
                found.append(f"{name}:{node.lineno}: except {ast.unparse(node.type)} returns, or neither "
                             "re-raises nor reports the test (tests/support/refusals.py)")
        for block in (getattr(node, f, None) for f in ("body", "orelse", "finalbody")):
            if not isinstance(block, list):
                continue
            for i, stmt in enumerate(block):
                if expects(stmt) and any(isinstance(s, ast.Return) for s in block[i + 1:]):
                    found.append(f"{name}:{stmt.lineno}: a refusal expected, then return: the test passes without "
                                 "its feature (use tests.support.refusals.expect_refusal)")
    return found


def test_no_gpu_test_counts_a_refusal_as_a_pass():
    modules = sorted(TESTS.glob("test_gpu_*.py"))
    assert len(modules) > 20
    found = [f for path in modules for f in refusals_counted_as_passes(path.read_text(), path.name)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("source", [
    """
    def test_x():
        try:
            g.build()
        except cudnn.cudnnGraphNotSupportedError as e:
            assert str(e)
            return
    """,
    """
    def _try(g):
        try:
            g.build()
        except cudnn.cudnnGraphNotSupportedError as e:
            return str(e)
    """,
    """
    def test_x():
        try:
            g.validate()
        except cudnnGraphNotSupportedError:
            pass
    """,
    """
    def test_x():
        if old:
            with pytest.raises(FeatureVersionError, match="needs"):
                g.validate()
            return
        run(g)
    """,
    """
    def _refused():
        with pytest.raises(cudnn.cudnnGraphNotSupportedError):
            run()
        outcome("refused")
        return True
    """,
    """
    def _run_or_none():
        try:
            return run()
        except cudnn.cudnnGraphNotSupportedError as e:
            if "No valid engine" not in str(e):
                raise
            return None
    """,
    """
    def expect_refusal(build):
        with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="Blackwell-only"):
            build()

    def test_x():
        if not blackwell():
            expect_refusal(lambda: g.build())
            return
        run(g)
    """,
], ids=["except-return", "helper-returns-the-refusal", "except-pass", "raises-then-return", "helper-returns-done",
        "except-raise-or-return-none", "local-helper-then-return"])
def test_the_scan_finds_the_old_patterns(source):
    assert refusals_counted_as_passes(textwrap.dedent(source))


@pytest.mark.parametrize("source", [
    """
    def test_x():
        try:
            g.build()
        except cudnn.cudnnGraphNotSupportedError as e:
            xfail_refused("x", e)
    """,
    """
    def test_x():
        try:
            g.build()
        except cudnn.cudnnGraphNotSupportedError as e:
            if "No valid engine" not in str(e):
                raise
            pytest.xfail(f"no engine: {e}")
    """,
    """
    def test_lone_genstats_is_refused():
        with pytest.raises(cudnn.cudnnGraphNotSupportedError):
            g.validate()
    """,
    """
    def test_x():
        if old:
            expect_refusal(g.validate, "needs", "x", error=FeatureVersionError)
        run(g)
    """,
], ids=["reported", "re-raised-or-xfailed", "a-test-of-the-refusal-itself", "expect-refusal"])
def test_the_scan_accepts_reported_refusals(source):
    assert refusals_counted_as_passes(textwrap.dedent(source)) == []


def test_the_helpers_report_the_refusal_with_the_running_cudnn():
    import cudnn_py as cudnn
    from cudnn_py.errors import version_string
    from tests.support import refusals

    def refused():
        raise cudnn.cudnnGraphNotSupportedError("No valid engine configs for this graph")

    with pytest.raises(pytest.skip.Exception) as info:
        refusals.expect_refusal(refused, "No valid engine", "a graph")
    running = version_string(cudnn.backend_version())
    assert str(info.value.msg).startswith(f"a graph: refused on cuDNN {running}")
    assert str(info.value.msg).endswith("cudnnGraphNotSupportedError: No valid engine configs for this graph")
    with pytest.raises(pytest.xfail.Exception, match=f"a graph: refused on cuDNN {running}"):
        refusals.expect_refusal(refused, "No valid engine", "a graph", report=refusals.xfail_refused)
    with pytest.raises(pytest.fail.Exception):  # a refusal that did not come fails the test
        refusals.expect_refusal(lambda: None, "No valid engine", "a graph")
    with pytest.raises(AssertionError, match="a refusal must say why"):
        refusals.skip_refused("a graph", cudnn.cudnnGraphNotSupportedError(""))
