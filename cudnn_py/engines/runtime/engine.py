"""The contract of a runtime-compiled engine (its kernels compiled by NVRTC when a plan is built).

Beyond :class:`~cudnn_py.engines.base.BaseEngine`:

* **Support** is decided in two steps, both pure (no compile, no allocation, nothing enqueued): the graph
  (:meth:`RuntimeEngine.check_graph`, the engine's own matcher) and the target (an NVRTC that can make a cubin for
  the device's exact architecture: :meth:`RuntimeEngine.check_target`). Each declines with
  ``cudnnGraphNotSupportedError`` and the reason, which ``explain()`` shows.
* **Identity**: ``engine_id`` from the fixed block of ``engine_ids.py``; ``version`` a hash of the kernel source
  (``SOURCE``), so a changed kernel is a new version; the config's knobs (public, stable names).
* **Plans** (:class:`RuntimePlan`) hold their loaded module (``modules.py``), report their workspace, and execute
  on the caller's stream with one kernel launch: no synchronisation and no allocation, so capturable in a CUDA
  graph.
"""
from __future__ import annotations

import abc
from typing import Any

from ...errors import cudnnGraphNotSupportedError
from ..base import BaseEngine, CompiledPlan, EngineIdentity
from . import nvrtc
from .modules import Target, current_target


class RuntimeEngine(BaseEngine):
    """``target`` (a :class:`Target`) and ``toolchain`` (an ``nvrtc.Toolchain`` or a reason string) replace the
    device and NVRTC probes: tests use them to plan for a GPU that is not there."""

    def __init__(self, target: Target | None = None, toolchain: nvrtc.Toolchain | str | None = None) -> None:
        self._target = target
        self._toolchain = toolchain

    @abc.abstractmethod
    def check_graph(self, graph: Any) -> Any:
        """What the engine would run for ``graph``, or cudnnGraphNotSupportedError saying why not."""

    def claims(self, graph: Any) -> bool:
        """A cheap first look (node kinds only): False when the engine certainly cannot run ``graph``. Without
        ``heur_mode.OPENSOURCE`` only claimed graphs are checked, so others never probe NVRTC or the device."""
        return True

    def toolchain(self) -> nvrtc.Toolchain | str:
        return self._toolchain if self._toolchain is not None else nvrtc.toolchain()

    def target(self) -> Target | str:
        return self._target if self._target is not None else current_target()

    def check_target(self) -> Target:
        tc = self.toolchain()
        if isinstance(tc, str):
            raise cudnnGraphNotSupportedError(f"{self.name}: {tc}")
        target = self.target()
        if isinstance(target, str):
            raise cudnnGraphNotSupportedError(f"{self.name}: {target}")
        why = tc.supports(target.cc)
        if why:
            raise cudnnGraphNotSupportedError(f"{self.name}: {why}")
        return target

    def check_support(self, graph: Any) -> Any:
        """What :meth:`check_graph` answered (the target checked too)."""
        checked = self.check_graph(graph)
        self.check_target()
        return checked

    def plan_record(self, plan: Any) -> dict[str, Any] | None:
        """What ``serialize()`` keeps of a built plan of this engine so that :meth:`rebuild` can make it again
        (plain JSON values), or None where this engine's plans do not serialize."""
        return None

    def rebuild(self, graph: Any, record: Any, tensors: dict[int, Any]) -> None:
        """Build the graph a :meth:`plan_record` describes into the empty ``graph`` from the serialized tensor
        records (uid -> record) and validate it; ``record`` comes from a file: check everything."""
        raise cudnnGraphNotSupportedError(f"{self.name}: its plans do not serialize")

    def preferred(self, graph: Any, checked: Any = None) -> bool:
        """Whether the placement table (``engines/placement.py``) expects this engine to beat cuDNN's plan on
        ``graph`` on the current device, so it comes first without ``heur_mode.OPENSOURCE``. Only asked after
        :meth:`check_support` accepted the graph (``checked``: what it answered, when the caller has it); False
        where the engine has no measured row."""
        return False


class RuntimePlan(CompiledPlan):
    """A built plan of a runtime-compiled engine: holds its module (unloaded when the last plan using it goes)."""

    def __init__(self, identity: EngineIdentity, module: Any = None, workspace_size: int = 0) -> None:
        self.identity = identity
        self.engine_id = identity.engine_id
        self.name = identity.name
        self.module = module
        self.workspace_size = workspace_size
