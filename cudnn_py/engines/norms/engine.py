"""The norm forward engine: layernorm / rmsnorm forward (+ residual add, + SiLU) compiled at run time by NVRTC.

``check_support`` is pure (``match.py`` on the graph, then the toolchain and the device's architecture);
``plan_configs`` offers one config per value of the ``elems`` knob (``variants.py``), the default first;
``build_plan`` compiles (or finds in the cubin store) the one variant the problem needs and loads it;
``NormPlan.execute`` launches it once on the caller's stream.
"""
from __future__ import annotations

import ctypes
from typing import Any

from ... import interop
from ...errors import InvalidValueError
from .. import placement
from ..base import CompiledPlan, ExecutionContext, PlanConfig
from ..engine_ids import NORM_FORWARD_ENGINE_ID
from ..runtime import modules
from ..runtime.engine import RuntimeEngine, RuntimePlan
from . import serial, source, variants
from .match import NormProblem, match

_MAX_GRID_X = 2**31 - 1
_POINTERS = ("x", "r", "s", "w", "b", "y", "z", "mean", "rstd", "eps_ptr")


class _Params(ctypes.Structure):  # source.SOURCE's Params, field for field
    _fields_ = [*((name, ctypes.c_void_p) for name in _POINTERS), ("eps", ctypes.c_float), ("beta", ctypes.c_float),
                ("inv_n", ctypes.c_float), ("n", ctypes.c_int), ("rows", ctypes.c_longlong)]


class NormForwardEngine(RuntimeEngine):
    engine_id = NORM_FORWARD_ENGINE_ID
    name = "norm_forward"
    version = source.VERSION

    def claims(self, graph: Any) -> bool:
        return any(n.op == "norm_forward" for n in graph.nodes)

    def check_graph(self, graph: Any) -> NormProblem:
        return match(graph)

    def plan_record(self, plan: Any) -> dict[str, Any] | None:
        return serial.record(plan.problem)

    def rebuild(self, graph: Any, record: Any, tensors: dict[int, Any]) -> None:
        serial.rebuild(graph, record, tensors)

    def preferred(self, graph: Any, checked: Any = None) -> bool:
        target = self.target()
        return not isinstance(target, str) and placement.ours_first(checked or match(graph), target.cc)

    def plan_configs(self, graph: Any) -> list[PlanConfig]:
        return [PlanConfig(self.engine_id, f"{self.name}[elems={e}]", {"elems": e}) for e in variants.ELEMS_CHOICES]

    def variant(self, problem: NormProblem, config: PlanConfig) -> variants.Variant:
        elems = int(config.knobs.get("elems", variants.ELEMS_CHOICES[0]))
        if elems not in variants.ELEMS_CHOICES:
            raise InvalidValueError(f"{self.name}: knob elems={elems} (one of {variants.ELEMS_CHOICES})")
        return variants.choose(problem.n, variants.vector_width(problem), elems)

    def build_plan(self, graph: Any, config: PlanConfig, ctx: ExecutionContext) -> CompiledPlan:
        problem = match(graph)
        target = self.check_target()
        v = self.variant(problem, config)
        problems: list[str] = []  # why a kept kernel file was not used (explain() shows it)
        c = modules.compiled(source.SOURCE, "norm_fwd.cu", variants.options(problem, v), target.cc,
                             problems=problems)
        m = modules.module(c, source.KERNEL_NAME)
        # one CTA per row group (the kernel's loop covers what a grid's x-extent cannot hold)
        grid = max(1, min(-(-problem.rows // v.rpc), _MAX_GRID_X))
        kernel = {"cubin_key": c.key, "compiled_now": c.fresh, "kernel_file_problems": problems}
        return NormPlan(self.identity(config), m, problem, v, grid, kernel)


class NormPlan(RuntimePlan):
    def __init__(self, identity: Any, module: Any, problem: NormProblem, variant: variants.Variant,
                 grid: int, kernel: dict[str, Any] | None = None) -> None:
        super().__init__(identity, module)
        self.problem, self.variant, self.grid = problem, variant, grid
        self.name = f"{identity.name}[{variant.label()}]"
        self._params = _Params()  # filled per execute; the launch copies it (cuLaunchKernel reads it at the call)
        self._params.inv_n = 1.0 / problem.n
        self._params.n = problem.n
        self._params.rows = problem.rows
        self._params.beta = problem.beta
        if problem.eps_value is not None:
            self._params.eps = problem.eps_value
        self._align = {o.uid: min(16, variant.vec * o.size) for o in problem.operands()}
        p = problem
        # what the kernel dereferences: its operands, statistics and an epsilon in device memory (see
        # CompiledPlan.device_operands; a pass-by-value epsilon is read on the host, by _host_scalar)
        self.device_operands = tuple(o.uid for o in p.operands()) + tuple(
            u for u in (p.mean, p.rstd) if u is not None) + ((p.eps_uid,) if p.eps_on_device else ())
        self.kernel = dict(kernel or {})  # where the cubin came from: its key, compiled now, kernel-file problems

    def describe(self) -> dict[str, Any]:
        p, v = self.problem, self.variant
        return {"identity": self.identity.as_dict() if self.identity else None, "variant": v.label(),
                "rows": p.rows, "n": p.n, "fusions": p.fusions, "grid": self.grid, "threads": v.threads,
                "kernel": dict(self.kernel)}

    def _ptr(self, buffers: dict[int, Any], uid: int) -> int:
        data = buffers.get(uid)
        if data is None:
            raise InvalidValueError(f"{self.name}: no buffer for tensor uid {uid}")
        ptr = interop.data_ptr(data)
        align = self._align.get(uid, 4)
        if ptr % align:
            raise _misaligned(self.name, uid, ptr, align)
        return ptr

    def pointer_launcher(self, slot_uids: Any) -> Any:
        p, prm = self.problem, self._params
        if p.eps_value is None and not p.eps_on_device:
            return None  # a pass-by-value epsilon the caller gives at each execute: read on the general path
        at = {u: i for i, u in enumerate(slot_uids)}
        pointers = self._fields()
        fields = tuple((name, at[u], self._align.get(u, 4)) for name, u in pointers if u is not None)
        absent = tuple(name for name, u in pointers if u is None)
        module, grid, threads, name = self.module, self.grid, self.variant.threads, self.name

        def launch(ptrs: Any, stream: int) -> None:
            for field, i, align in fields:
                ptr = ptrs[i]
                if ptr % align:
                    raise _misaligned(name, slot_uids[i], ptr, align)
                setattr(prm, field, ptr)
            for field in absent:
                setattr(prm, field, None)
            modules.launch(module, grid, threads, stream, prm)

        return launch

    def _fields(self) -> tuple[tuple[str, int | None], ...]:
        """(kernel pointer parameter, the uid whose device pointer it takes, None where the problem has none), in
        ``_POINTERS``' order."""
        p = self.problem
        uids = [op.uid if op is not None else None for op in (p.x, p.r, p.s, p.w, p.b, p.y, p.z)]
        return tuple(zip(_POINTERS, (*uids, p.mean, p.rstd, p.eps_uid if p.eps_on_device else None), strict=True))

    def execute(self, graph: Any, buffers: dict[int, Any], ctx: ExecutionContext) -> None:
        p, prm = self.problem, self._params
        x_data = buffers.get(p.x.uid)
        info = interop.operand_info(x_data) if x_data is not None else None
        if info is not None and info.on_host:
            raise InvalidValueError(f"{self.name}: operands must be in device memory")
        for field, uid in self._fields():
            setattr(prm, field, self._ptr(buffers, uid) if uid is not None else None)
        if not p.eps_on_device and p.eps_value is None:
            prm.eps = _host_scalar(buffers.get(p.eps_uid), self.name)
        stream = ctx.stream
        if stream is None:
            placement = interop.placement_of(x_data, info) if info is not None else None
            stream = placement.current_stream() if placement is not None else 0
        modules.launch(self.module, self.grid, self.variant.threads, interop.stream_ptr(stream), prm)


def _misaligned(plan: str, uid: int, ptr: int, align: int) -> InvalidValueError:
    return InvalidValueError(f"{plan}: the buffer of tensor uid {uid} (0x{ptr:x}) is not aligned to {align} bytes, "
                             "as its tensor's alignment promised; declare a smaller alignment on the tensor for the "
                             "scalar path")


def _host_scalar(data: Any, who: str) -> float:
    if data is None:
        raise InvalidValueError(f"{who}: no value for the pass-by-value EPSILON")
    if isinstance(data, (int, float)):
        return float(data)
    try:
        return float(data.reshape(-1)[0])  # numpy, torch CPU tensors
    except Exception as e:
        raise InvalidValueError(f"{who}: EPSILON must be a host scalar, got {type(data).__name__}") from e
