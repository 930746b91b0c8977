"""Classic API parity of the graph layer, measured with the shared compat checker in a subprocess.

Scope of this test: the enums, the exception, the tensor methods, pygraph's constructor, tensor creation,
matmul / every pointwise op / reduction, the layout ops (reshape, transpose, slice, concatenate), rope and
rope_backward, block-scale quantize / dequantize, MoE grouped matmul, and the build / plan / execute / filter /
introspection methods. Module functions (create_handle, ...) and the other op families (conv, norms, sdpa) are
reported in the printed figure but not asserted here."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the checker and the 1.32 reference surface, vendored (tests/data/compat/README.md): the test runs in any clone
COMPAT = ROOT / "tests" / "data" / "compat"
OTHER_FAMILIES = re.compile(
    r"pygraph lacks method (conv_|batchnorm|layernorm|adalayernorm|instancenorm|rmsnorm|genstats|sdpa)")


def _module_to_check(tmp_path: Path) -> tuple[str, str]:
    """cudnn_py itself once its __init__ exports the graph layer; else a shim exporting exactly that layer."""
    probe = subprocess.run([sys.executable, "-c", "import cudnn_py; cudnn_py.pygraph; cudnn_py.data_type"],
                           cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
    if probe.returncode == 0:
        return "cudnn_py", str(ROOT)
    (tmp_path / "cudnn_py_graph_shim.py").write_text(
        "from cudnn_py.enums import *\nfrom cudnn_py.facade import pygraph, tensor, cudnnGraphNotSupportedError\n")
    return "cudnn_py_graph_shim", f"{ROOT}{os.pathsep}{tmp_path}"


def test_graph_layer_parity(tmp_path):
    module, path = _module_to_check(tmp_path)
    env = {**os.environ, "PYTHONPATH": path}
    surface = subprocess.run([sys.executable, str(COMPAT / "api_surface.py"), module], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True).stdout
    (tmp_path / "surface.json").write_text(surface)
    assert '"tensor_error"' not in surface, surface
    result = subprocess.run([sys.executable, str(COMPAT / "api_parity.py"), str(COMPAT / "reference_surface.json"),
                             str(tmp_path / "surface.json")], cwd=ROOT, env=env, capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    figure = lines[-1]
    print(f"\n{module}: {figure}")
    in_scope = [p for p in lines[:-1] if not p.startswith("missing function") and not OTHER_FAMILIES.match(p)]
    assert in_scope == [], "\n".join(in_scope)
    assert re.fullmatch(r"parity: \d+/\d+", figure)
