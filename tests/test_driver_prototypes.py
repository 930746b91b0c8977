"""The raw libcuda entry points get their ctypes types from one catalog (cuda/driver.py's PROTOTYPES): ctypes shares
one function object per name in a process, so each user's argument forms must pass the one prototype. Once, the
replay's memset rewrite typed cuModuleLoadData's image as char* and the norm engine (which passes a void*) was
refused after it, in the same process."""
from __future__ import annotations

import ast
import ctypes
from pathlib import Path

from cudnn_py.cuda import driver

ROOT = Path(__file__).resolve().parent.parent / "cudnn_py"


def accepts(name: str, *args) -> bool:
    try:
        for argtype, arg in zip(driver.PROTOTYPES[name], args, strict=True):
            argtype.from_param(arg)
    except (TypeError, ctypes.ArgumentError):
        return False
    return True


def test_each_users_argument_forms_pass_the_one_prototype():
    out = ctypes.c_void_p()
    image = ctypes.create_string_buffer(b"\x7fELF", 4)
    assert accepts("cuModuleLoadData", ctypes.byref(out), ctypes.cast(image, ctypes.c_void_p))  # the norm engine
    assert accepts("cuModuleLoadData", ctypes.byref(out), b"// ptx\0")  # the memset rewrite (PTX bytes)
    assert accepts("cuModuleGetFunction", ctypes.byref(out), out, b"kernel")  # both, a module object
    assert accepts("cuModuleGetFunction", ctypes.byref(out), 0x1000, b"kernel")  # a module as an int
    params = (ctypes.c_void_p * 2)()
    assert accepts("cuLaunchKernel", 0x1000, 1, 1, 1, 128, 1, 1, 0, None, params, None)
    assert accepts("cuGraphLaunch", 0x1000, 0)
    assert not accepts("cuModuleLoadData", ctypes.byref(out), 1.5)  # (the check itself can fail)


def test_every_typed_call_names_catalogued_entry_points():
    """No module passes its own prototypes: every driver.typed(...) call names entry points of the catalog."""
    calls = 0
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "typed":
                calls += 1
                names = node.args[1]
                assert not isinstance(names, ast.Dict), f"{path}: driver.typed given its own prototypes"
                for elt in getattr(names, "elts", []):
                    if isinstance(elt, ast.Constant):
                        assert elt.value in driver.PROTOTYPES, f"{path}: {elt.value} is not catalogued"
    assert calls >= 3  # capture.py, graph_memsets.py, engines/runtime/modules.py


def test_typed_types_nothing_where_an_entry_point_is_missing():
    class Entry:
        argtypes = restype = "untouched"

    class Lib:
        cuGraphLaunch = Entry()

    assert not driver.typed(Lib(), ("cuGraphLaunch", "cuModuleLoadData"))
    assert Lib.cuGraphLaunch.argtypes == Lib.cuGraphLaunch.restype == "untouched"
    assert driver.typed(Lib(), ("cuGraphLaunch",)) and Lib.cuGraphLaunch.argtypes == driver.PROTOTYPES["cuGraphLaunch"]
