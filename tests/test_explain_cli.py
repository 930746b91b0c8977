"""explain's reporting contract: one report per graph (also with --render), one JSON document for several graphs,
a failing Graphviz ``dot`` named with its stderr, and a graph not yet validated says that explain() validated it."""
from __future__ import annotations

import json
import os
import stat
import textwrap

import pytest

import cudnn_py as cudnn
from cudnn_py import __main__ as cli
from cudnn_py.facade import explain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
F, H = cudnn.data_type.FLOAT, cudnn.data_type.HALF


def _script(tmp_path, graphs=("g",)):
    body = "".join(f"""
        {n} = cudnn.pygraph(io_data_type=H, intermediate_data_type=F, compute_data_type=F, name={n!r})
        {n}.relu({n}.matmul({n}.tensor([1, 8, 16], name="a"), {n}.tensor([1, 16, 4], name="b"))).set_output(True)
    """ for n in graphs)
    path = tmp_path / "make_graphs.py"
    path.write_text(textwrap.dedent("""
        import cudnn_py as cudnn
        F, H = cudnn.data_type.FLOAT, cudnn.data_type.HALF
    """) + textwrap.dedent(body))
    return str(path)


def _fake_dot(tmp_path, monkeypatch, body: str) -> str:
    exe = tmp_path / "dot"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(explain.shutil, "which", lambda name: str(exe) if name == "dot" else None)
    return str(exe)


def test_json_of_several_graphs_is_one_document(tmp_path, capsys):
    assert cli.explain_command(_script(tmp_path, ("g1", "g2")), None, "json") == 0
    docs = json.loads(capsys.readouterr().out)
    assert sorted(docs) == ["g1", "g2"] and docs["g1"]["graph"] == "g1" and docs["g2"]["phase"] == "VALIDATED"
    assert cli.explain_command(_script(tmp_path, ("g1", "g2")), "g2", "json") == 0
    assert json.loads(capsys.readouterr().out)["graph"] == "g2"


def test_render_builds_the_report_once(tmp_path, monkeypatch, capsys):
    _fake_dot(tmp_path, monkeypatch, 'for a; do case "$a" in -o) next=1;; *) [ -n "$next" ] && out="$a"; next=;; '
                                     'esac; done; cat > "$out"\n')
    calls = []
    real = explain.report
    monkeypatch.setattr(explain, "report", lambda g: calls.append(g) or real(g))
    image = tmp_path / "g.svg"
    assert cli.explain_command(_script(tmp_path), None, "text", str(image)) == 0
    assert len(calls) == 1
    assert image.read_text().startswith("digraph cudnn_py {") and "IR as built:" in capsys.readouterr().out


def test_a_failing_dot_names_the_command_and_its_stderr(tmp_path, monkeypatch):
    exe = _fake_dot(tmp_path, monkeypatch, 'echo "Error: syntax error in line 3" >&2\nexit 1\n')
    g = cudnn.pygraph(io_data_type=F)
    g.sigmoid(g.tensor([8, 16], name="x")).set_output(True)
    with pytest.raises(RuntimeError, match=rf"`{exe} -Tpng -o .*g.png` failed with exit status 1: Error: syntax "
                                           r"error in line 3"):
        g.render_dot(str(tmp_path / "g.png"))


def test_explain_says_when_it_validated_the_graph():
    g = cudnn.pygraph(io_data_type=F)
    g.sigmoid(g.tensor([8, 16], name="x")).set_output(True)
    assert not g.is_validated
    report = g.explain()
    assert "not validated before explain(): explain() ran validate()" in report and g.is_validated
    assert "not validated before" not in g.explain()  # validated now: nothing to say
    assert "validated_by_explain" not in json.loads(g.explain("json"))
    with pytest.raises(ValueError, match="'text', 'json' or 'dot'"):
        cudnn.pygraph(io_data_type=F).explain("yaml")
