"""Record the official 1.32 module's GNN operators (``cudnn.gnn``) and conv1d torch functions (``cudnn.ops``), from
the wheel's Python sources, read with ``ast`` (the wheel's compiled extension cannot be imported here).

usage: python -m tests.support.ops_surface /path/to/unpacked/cudnn > tests/data/ops_surface_1_32.json

What is recorded: each public function's signature (as :mod:`tests.support.module_surface` writes them), the
``CscGraph`` dataclass's fields and defaults, ``cudnn.gnn.__all__``, and the ``torch.library`` schemas the GNN
modules define (the op name without its namespace). tests/test_gnn_ops.py and tests/test_conv1d_ops.py check
cudnn_py against the record, and against the sources again where they are at hand (``CUDNN_OFFICIAL_DIR``).
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from tests.support.module_surface import signature

GNN = {"agg_simple.py": "agg_simple", "mha_gat.py": "mha_gat", "mha_gat_v2.py": "mha_gat_v2"}
OPS = {"causal_conv1d.py": ("causal_conv1d_nwh", "b2b_causal_conv1d"),
       "_causal_conv1d_update.py": ("causal_conv1d_update",), "fft_causal_conv1d.py": ("fft_causal_conv1d",)}


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _schemas(tree: ast.Module) -> list[str]:
    """The strings passed to ``_lib.define(...)``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "define":
            out.append(ast.literal_eval(node.args[0]))
    return out


def record(src: Path) -> dict:
    gnn = src / "gnn"
    funcs: dict[str, list] = {}
    schemas: list[str] = []
    for file, name in GNN.items():
        tree = ast.parse((gnn / file).read_text())
        funcs[name] = signature(_functions(tree)[name])
        schemas += _schemas(tree)
    graph = next(n for n in ast.parse((gnn / "graph.py").read_text()).body
                 if isinstance(n, ast.ClassDef) and n.name == "CscGraph")
    fields = [[n.target.id, None if n.value is None else ast.unparse(n.value)] for n in graph.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    init = ast.parse((gnn / "__init__.py").read_text())
    gnn_all = next(ast.literal_eval(n.value) for n in init.body if isinstance(n, ast.Assign)
                   and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "__all__")
    ops: dict[str, list] = {}
    for file, names in OPS.items():
        defined = _functions(ast.parse((src / "ops" / file).read_text()))
        for name in names:
            ops[name] = signature(defined[name])
    return {"version": "1.32.0", "gnn": funcs, "CscGraph": fields, "gnn_all": gnn_all, "gnn_schemas": schemas,
            "ops": ops}


if __name__ == "__main__":
    print(json.dumps(record(Path(sys.argv[1])), indent=1))
