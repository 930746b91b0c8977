"""NVRTC through cuda-python: the compiler of the runtime-compiled engines, with no CUDA toolkit installed.

``libnvrtc`` comes from the NVRTC wheel of the ``cu12`` / ``cu13`` extras (``cuda.bindings.nvrtc`` finds it through
cuda-pathfinder). :func:`toolchain` probes it once per process and answers either a :class:`Toolchain` (its
version and the architectures it targets) or the reason there is none; the engines decline with that reason, which
``explain()`` shows, and cuDNN's plans serve instead.

:func:`compile_cubin` compiles one header-free source to a cubin for one exact architecture (``sm_90a`` on
Hopper: ``--gpu-architecture=sm_90a`` yields a cubin directly), with ptxas' resource report in the log
(``--ptxas-options=-v``): :func:`resources` reads registers, stack frame and spill bytes from it, which the CPU
tests check for every kernel variant.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from ...errors import CudnnPyError, InvalidValueError, cudnnGraphNotSupportedError

MIN_VERSION = (12, 0)  # sm_90a cubins; sm_100a needs 12.8 (checked per architecture by `supports`)
_ARCH_MIN = {100: (12, 8), 101: (12, 8), 103: (12, 9), 120: (12, 8), 121: (12, 9)}


@dataclass(frozen=True)
class Toolchain:
    version: tuple[int, int]
    archs: tuple[int, ...]  # what nvrtcGetSupportedArchs lists (e.g. 80, 90, 100)

    def supports(self, cc: int) -> str | None:
        """None when a cubin for compute capability ``cc`` (e.g. 90) can be made, else why not."""
        if cc < 80:
            return f"needs compute capability 8.0 or newer (the device is {cc // 10}.{cc % 10})"
        if cc not in self.archs or self.version < _ARCH_MIN.get(cc, MIN_VERSION):
            return (f"NVRTC {self.version[0]}.{self.version[1]} cannot compile for sm_{cc} (it targets "
                    f"{', '.join(f'sm_{a}' for a in self.archs)})")
        return None


_probe: Toolchain | str | None = None
_lock = threading.Lock()


def _nvrtc() -> Any:
    from cuda.bindings import nvrtc

    return nvrtc


class CompileError(CudnnPyError, RuntimeError):
    """NVRTC refused a source, or one of its calls failed."""


def _check(result: Any, what: str) -> Any:
    err, *rest = result
    if int(err) != 0:
        raise CompileError(f"{what} failed: {err!r}")
    return rest[0] if len(rest) == 1 else tuple(rest)


def toolchain() -> Toolchain | str:
    """The process's NVRTC, or the reason there is none usable (probed once)."""
    global _probe
    if _probe is None:
        with _lock:
            if _probe is None:
                _probe = _find()
    return _probe


def _find() -> Toolchain | str:
    try:
        nvrtc = _nvrtc()
        major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
        archs = tuple(int(a) for a in _check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))
    except ImportError:
        return "NVRTC is not available: cuda-bindings is not installed (install cudnn_py[cu12] or [cu13])"
    except Exception as e:  # no libnvrtc found, or one that fails to load
        return f"NVRTC is not available: {type(e).__name__}: {e}"
    if (major, minor) < MIN_VERSION:
        return f"NVRTC {major}.{minor} is too old (runtime-compiled engines need {MIN_VERSION[0]}.{MIN_VERSION[1]}+)"
    return Toolchain((int(major), int(minor)), archs)


def require() -> Toolchain:
    """The toolchain, or cudnnGraphNotSupportedError with the reason."""
    tc = toolchain()
    if isinstance(tc, str):
        raise cudnnGraphNotSupportedError(tc)
    return tc


def arch_flag(cc: int) -> str:
    """The exact target: the 'a' variant (all of the chip's instructions) where one exists."""
    return f"sm_{cc}a" if cc in (90, 100, 101, 103, 120, 121) else f"sm_{cc}"


def compile_cubin(source: str, name: str, options: tuple[str, ...], cc: int) -> tuple[bytes, str]:
    """Compile ``source`` for compute capability ``cc``: (cubin, the compiler's log with ptxas' report)."""
    nvrtc = _nvrtc()
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch_flag(cc)}", "--std=c++17", "--ptxas-options=-v", *options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        log = b" " * size
        _check((nvrtc.nvrtcGetProgramLog(prog, log)[0], None), "nvrtcGetProgramLog")
        text = log.rstrip(b"\x00 ").decode(errors="replace")
        if int(err) != 0:
            raise CompileError(f"NVRTC could not compile {name} for {arch_flag(cc)}: {err!r}\n{text}")
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check((nvrtc.nvrtcGetCUBIN(prog, cubin)[0], None), "nvrtcGetCUBIN")
        return bytes(cubin), text
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@dataclass(frozen=True)
class Resources:
    registers: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int


_USED = re.compile(r"Used (\d+) registers")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def resources(log: str) -> Resources:
    """Registers, stack frame and spills from ptxas' ``-v`` report (of the one kernel compiled)."""
    used, stack = _USED.search(log), _STACK.search(log)
    if used is None or stack is None:
        raise InvalidValueError(f"no ptxas resource report in the compiler log:\n{log}")
    return Resources(int(used.group(1)), int(stack.group(1)), int(stack.group(2)), int(stack.group(3)))
