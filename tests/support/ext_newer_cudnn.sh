#!/bin/bash
# The libcudnn_ext GPU tests and benchmarks/conv1d.py on a device whose own cuDNN predates libcudnn_ext (the
# device's 9.19: causal conv1d needs 9.22, the FFT paths 9.26, the GNN ops 9.28). A newer cuDNN's core, graph and ext
# libraries travel xz-compressed in .cudnn928/ (ignored by git; carry it), taken from the nvidia-cudnn-cu13 wheel:
#     pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_27_x86_64 \
#         -d /tmp/w nvidia-cudnn-cu13==9.28.0.42
#     unzip -q /tmp/w/*.whl 'nvidia/cudnn/lib/libcudnn.so.9' 'nvidia/cudnn/lib/libcudnn_graph.so.9' \
#         'nvidia/cudnn/lib/libcudnn_ext.so.9' -d /tmp/w && mkdir -p .cudnn928 && \
#         for f in /tmp/w/nvidia/cudnn/lib/*.so.9; do xz -7 -c "$f" > .cudnn928/$(basename "$f").xz; done
# cudnn_py and the official module load that cuDNN (CUDNN_PY_LIBRARY; the official module reads LD_LIBRARY_PATH).
# torch's own cuDNN is switched off in these processes: three libraries are not a whole cuDNN, and two libcudnn of
# different releases in one process share sub-libraries by soname, so torch's references take its native kernels.
# Needs .conformance/whl for the official module (carry both). Logs into $OUT. With arguments: pytest runs those
# instead of the C-API test files, and the benchmark is left out.
#     bash tests/support/ext_newer_cudnn.sh [pytest arguments]
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=$(realpath "${OUT:-.}")
lib=$(mktemp -d)
for f in .cudnn928/*.xz; do xz -dc "$f" > "$lib/$(basename "$f" .xz)"; done
site=$(python3 -c "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))")
# the ext library compiles its FFT kernels with NVRTC, which it dlopens by soname
export CUDNN_PY_LIBRARY=$lib/libcudnn.so.9 LD_LIBRARY_PATH=$site/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
official=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$official" .conformance/whl/*.whl
run() {  # run [-m module | script] args...: cudnn_py's cuDNN loaded first, torch's cuDNN off, then the script
  python3 - "$@" <<EOF
import os, runpy, sys
from cudnn_py.backend import load_library
lib = load_library()
print("cudnn_py loads", lib.path, "version", lib.version, flush=True)
import torch
torch.backends.cudnn.enabled = False
os.environ["LD_LIBRARY_PATH"] = "$lib:" + os.environ.get("LD_LIBRARY_PATH", "")
if sys.argv[1] == "-m":
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
EOF
}
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/test_ext_capi_gpu.py tests/test_gpu_gnn_conv1d_ops.py tests/test_ext_capi.py
                                 tests/test_conv1d_ops.py tests/test_gnn_ops.py)
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  run -m pytest -q -p no:cacheprovider -rs "${tests[@]}" 2>&1
} | tee "$OUT/ext_tests.txt"
[ $# -gt 0 ] || ( cd benchmarks && PYTHONPATH=$official:$PYTHONPATH OUT=$OUT run conv1d.py 2>&1 ) \
  | tee "$OUT/ext_conv1d.txt"
