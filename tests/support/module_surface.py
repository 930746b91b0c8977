"""Record (or read) the module-level surface of the official ``cudnn`` 1.32 module, from the wheel's Python sources.

usage: python -m tests.support.module_surface /path/to/unpacked/cudnn > tests/data/module_surface_1_32.json

The wheel's compiled extension cannot be imported here, so the sources are read with ``ast``: the public names
(``__all__``: the compiled symbols, the Python-defined ones, ``Graph`` and ``wrapper``) and, for what the Python
files define, the signatures (parameter name, kind, default as written, with the ``cudnn.`` prefix dropped so that it
reads like ``str()`` of a cudnn_py member), the members of ``NodeType``, the fields of ``GraphContext`` and the
public attributes of ``Handle`` and ``DeviceInfo``. tests/test_python_layer.py checks cudnn_py against the record.
"""
from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

KINDS = {"posonlyargs": "POSITIONAL_ONLY", "args": "POSITIONAL_OR_KEYWORD", "kwonlyargs": "KEYWORD_ONLY"}


def _default(node: ast.expr | None) -> str | None:
    if node is None:
        return None
    text = ast.unparse(node)
    return text[len("cudnn."):] if text.startswith("cudnn.") else text


def signature(fn: ast.FunctionDef) -> list:
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = []
    for arg, d in zip(positional, defaults):
        if arg.arg not in ("self", "cls"):
            kind = "POSITIONAL_ONLY" if arg in a.posonlyargs else "POSITIONAL_OR_KEYWORD"
            out.append([arg.arg, kind, _default(d)])
    if a.vararg:
        out.append(["*" + a.vararg.arg, None, None])
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append([arg.arg, "KEYWORD_ONLY", _default(d)])
    if a.kwarg:
        out.append(["**" + a.kwarg.arg, None, None])
    return out


def _tree(src: Path, name: str) -> ast.Module:
    return ast.parse((src / name).read_text())


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def record(src: Path) -> dict:
    init = _tree(src, "__init__.py")
    names: list[str] = []
    for node in init.body:  # symbols_to_import = [...]; _EAGER_PUBLIC_NAMES = (...); __all__ = [...]
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if target == "symbols_to_import":
                names += [e.value for e in node.value.elts]  # type: ignore[attr-defined]
            elif target == "_EAGER_PUBLIC_NAMES":
                names += [e.value for e in node.value.elts if isinstance(e, ast.Constant)]  # type: ignore[attr-defined]
            elif target == "__all__":
                names += [e.value for e in node.value.elts if isinstance(e, ast.Constant)]  # type: ignore[attr-defined]
    funcs = {}
    init_funcs = _functions(init)
    for f in ("sdpa_capabilities", "create_handle", "set_stream", "get_stream", "destroy_handle"):
        funcs[f] = signature(init_funcs[f])
    graph_funcs = _functions(_tree(src, "graph.py"))
    for f in ("graph", "jit", "graph_cache"):
        funcs[f] = signature(graph_funcs[f])
    dt = _functions(_tree(src, "datatypes.py"))
    datatypes = {f: signature(dt[f]) for f in ("is_torch_available", "is_cutlass_available", "torch_to_cudnn_data_type")}
    handle = _class(_tree(src, "_handle.py"), "Handle")
    device_cls = _class(_tree(src, "_device.py"), "DeviceInfo")
    device_attrs = sorted(m for m in _methods(device_cls) if not m.startswith("_")) + ["ordinal"]
    node_type = _class(_tree(src, "graph_types.py"), "NodeType")
    members = [t.id for n in node_type.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    ctx = _class(_tree(src, "_pygraph.py"), "GraphContext")
    fields = [n.target.id for n in ctx.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    node = _class(_tree(src, "nodes.py"), "Node")
    wrapper = _class(_tree(src, "wrapper.py"), "Graph")
    return {
        "version": "1.32.0",
        "names": sorted(set(names)),
        "funcs": funcs,
        "datatypes": datatypes,
        "Handle": {"__init__": signature(_methods(handle)["__init__"]), "attributes": ["backend_handle", "device", "stream"]},
        "DeviceInfo": {"__init__": signature(_methods(device_cls)["__init__"]), "attributes": sorted(device_attrs)},
        "NodeType": members,
        "GraphContext": fields,
        "Node": {"__init__": signature(_methods(node)["__init__"]), "attributes": ["name", "node_type", "inputs", "outputs", "params", "compute_data_type"]},
        "Graph": {"__init__": signature(_methods(wrapper)["__init__"]), "set_io_tuples": signature(_methods(wrapper)["set_io_tuples"])},
    }


if __name__ == "__main__":
    print(json.dumps(record(Path(sys.argv[1])), indent=1))
