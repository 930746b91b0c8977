"""Replaying an execute as a CUDA graph: the repeated call with the same operands costs a ``cuGraphLaunch``
(about 3 us on an H200) instead of a ``cudnnBackendExecute`` (8-32 us for attention on cuDNN 9.19).

**What is replayed.** A *binding* (plan, workspace pointer, every operand pointer; ``execute.py``) executed by the
fast path again with the same handle within that handle's last ``RECENT`` calls (twice in a row; or every other
call, as a training step's fresh outputs come back from torch's caching allocator) is recorded once: its handle
is pointed at this thread's private capture stream (``cuda/capture.py``), ``cudnnBackendExecute`` runs under a
thread-local stream capture (which enqueues nothing), the handle gets its stream back, and the instantiated graph
is launched on that stream, now and on every later call with the same binding and handle. A replayed graph runs
the very kernels, with the very arguments, that the execute it recorded enqueued; the operands' *contents* are
read when it runs, as they are by an execute. What an execute re-reads on the host at every call a replay would
not, so it is excluded:

* a graph with a pass-by-value scalar the caller provides (a host value read at each call): never replayed;
* a stream being captured by the caller (``torch.cuda.graph``, ...): the call executes normally, so the caller's
  capture records it (launching a graph into a capturing stream invalidates that capture: seen on the H200);
* tracing on: every call is a real ``cudnnBackendExecute`` in the trace;
* another handle, or a handle destroyed and another created at the same address: the replay belongs to the
  registry record of the handle it was recorded with (compared by identity);
* the stream is read from the handle at every call (``cudnnGetStream``), so ``set_stream`` takes effect at once.

A plan whose execute cannot be captured (cuDNN returns an error under capture, or the capture is invalidated) is
executed normally from then on; the reason is logged and kept in :meth:`Replays.stats`. Backward attention
kernels accumulate with atomics, so neither two executes nor an execute and a replay are bitwise equal there;
both are equally correct.

**Cheaper launches.** cuDNN's attention executes begin with a 4-byte memset. A recording instantiates such small
memset nodes as kernel nodes that write the same bytes (``cuda/graph_memsets.py``: the same graph launches about
1 us faster on the H200; the kernel is PTX, compiled by the driver once per context). A graph whose memsets cannot
be rewritten is launched as captured, and :meth:`Replays.stats` says why (``memsets_kept``).
``CUDNN_PY_REPLAY_MEMSET_KERNELS=0`` keeps every recording's memset nodes.

``CUDNN_PY_REPLAY=0`` turns replay off: every call executes. Both switches are read when a graph's executor is made.
"""
from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..backend import handle as _handle_mod
from ..cuda import capture
from .switches import switched_off

REPLAY_ENV = "CUDNN_PY_REPLAY"
MEMSET_KERNELS_ENV = "CUDNN_PY_REPLAY_MEMSET_KERNELS"
CACHE_SIZE = 8  # recorded bindings kept per executor (least recently recorded dropped first)
PENDING_OWNERS = 64  # handles whose last bindings are remembered (to record a binding that comes back)
RECENT = 4  # a binding executed again within this many calls of its owner is recorded (at most RECENT recordings
# per owner's cycle: within CACHE_SIZE, so a cycle never evicts its own recordings)
_log = logging.getLogger(__name__)


def environment_refusal() -> str | None:
    """Why replay is off for executors made now (the environment, the driver), or None."""
    off = switched_off(REPLAY_ENV)
    if off is not None:
        return off
    if capture.driver() is None:
        return "no CUDA driver with stream capture"
    return None


class Replay:
    """One recorded binding: the graph exec, what it was recorded for, and how often it ran."""

    __slots__ = ("binding", "owner", "exec", "launches", "__weakref__")

    def __init__(self, binding: tuple, owner: Any, exec_: int):
        self.binding, self.owner, self.exec, self.launches = binding, owner, exec_, 0
        weakref.finalize(self, capture.destroy_exec, exec_)


class Replays:
    """The recorded bindings of one executor, and the policy of when to record."""

    def __init__(self, refusal: str | None):
        self.refusal = refusal  # why this executor never replays; None: it may
        self.on = refusal is None
        # (id(binding), id(owner)) -> its Replay (which holds both, so neither id can be reused while recorded): each
        # handle (a thread's default one, say) has its own recording of a binding
        self.recorded: OrderedDict[tuple[int, int], Replay] = OrderedDict()
        # the replay launched last (one of `recorded`, or None): the fast path compares it with its binding and
        # handle before it looks the pair up (see find)
        self.last: Replay | None = None
        # id(owner) -> (owner, the bindings its last RECENT calls executed, newest last): a binding found there again
        # is recorded (a training step's fresh outputs come back at the same addresses every step or every few)
        self._pending: dict[int, tuple] = {}
        self._refused_plans: dict[int, str] = {}  # plan id -> why its execute cannot be captured
        self.captures = 0
        # small memset nodes of a recording instantiated as kernel nodes (cuda/graph_memsets.py) unless
        # CUDNN_PY_REPLAY_MEMSET_KERNELS=0 (the "VARIABLE=value" that turned it off, else None)
        self.memsets_off = switched_off(MEMSET_KERNELS_ENV)
        self.memsets_replaced = 0
        self.memsets_kept: list[str] = []  # the latest few reasons a recording kept its memset nodes
        self.dropped_launches = 0  # launches of replays no longer recorded
        self.failures: list[str] = []  # the latest few reasons a capture or a launch failed

    def _fail(self, why: str) -> None:
        self.failures = _latest(self.failures, why)
        _log.info("replay: %s", why)

    def find(self, binding: tuple, owner: Any) -> Replay | None:
        """The recording of ``binding`` with ``owner``, or None; it becomes :attr:`last`."""
        replay = self.recorded.get((id(binding), id(owner)))
        if replay is not None and (replay.binding is not binding or replay.owner is not owner):
            replay = None
        self.last = replay
        return replay

    def consider(self, binding: tuple, owner: Any, handle: int, stream: int,
                 backend_execute: Callable[..., int]) -> bool:
        """A fast-path call about to execute ``binding`` normally: when ``owner`` (the handle's registry record)
        executed it within its last RECENT calls (the second call in a row; or a binding that comes back every few
        calls, as the fresh outputs of a training step do when the caching allocator hands out the same blocks
        every other step), record it and launch the recording. True: the call's work is enqueued."""
        pending = self._pending.get(id(owner))
        if pending is None or pending[0] is not owner or not any(b is binding for b in pending[1]):
            if pending is None or pending[0] is not owner:
                if len(self._pending) >= PENDING_OWNERS:
                    self._pending.clear()  # handles come and go: forget the old ones' last calls
                pending = self._pending[id(owner)] = (owner, [])
            recent = pending[1]
            recent.append(binding)
            if len(recent) > RECENT:
                del recent[0]
            return False
        plan = binding[0]
        if plan.id in self._refused_plans:
            return False
        lib = capture.driver()
        if lib is None or (got := lib.cuStreamIsCapturing(stream))[0] != 0 \
                or got[1] != capture.CU_STREAM_CAPTURE_STATUS_NONE:
            return False  # the caller is capturing this stream: it records the execute itself
        try:
            side = capture.side_stream()
        except RuntimeError as e:
            self._refuse(plan, str(e))
            return False
        _handle_mod.set_stream(handle, side)
        try:
            got = capture.capture(side, lambda: backend_execute(handle, plan.ptr, binding[3]),
                                  memsets_as_kernels=self.memsets_off is None)
        finally:
            _handle_mod.set_stream(handle, stream)
        exec_ = got.exec
        if not exec_:
            self._refuse(plan, f"plan {plan.name}: its execute could not be captured ({got.why}); it executes "
                         "normally")
            return False
        replay = Replay(binding, owner, exec_)
        self.captures += 1
        self.memsets_replaced += got.memsets_replaced
        if got.memsets_kept:
            self.memsets_kept = _latest(self.memsets_kept, f"plan {plan.name}: {got.memsets_kept}")
            _log.info("replay: plan %s keeps its memset nodes: %s", plan.name, got.memsets_kept)
        status = lib.cuGraphLaunch(exec_, stream)
        if status != 0:
            self._refuse(plan, f"plan {plan.name}: cuGraphLaunch failed with CUresult {status}; it executes normally")
            return False
        replay.launches = 1
        # (a recorded key is launched, never considered again: no recording to replace)
        self.recorded[(id(binding), id(owner))] = replay
        self.last = replay
        while len(self.recorded) > CACHE_SIZE:
            _, old = self.recorded.popitem(last=False)
            self.dropped_launches += old.launches
        _log.debug("replay: recorded plan %s (%d recorded)", plan.name, len(self.recorded))
        return True

    def _refuse(self, plan: Any, why: str) -> None:
        self._refused_plans[plan.id] = why
        self._fail(why)

    def drop(self, replay: Replay, why: str) -> None:
        """Forget a recording whose launch failed (the call then executes normally)."""
        key = (id(replay.binding), id(replay.owner))
        if self.recorded.get(key) is replay:
            del self.recorded[key]
            self.dropped_launches += replay.launches
        if self.last is replay:
            self.last = None
        self._refuse(replay.binding[0], why)

    def stats(self) -> dict[str, Any]:
        """Whether this executor replays (and why not), recordings made, launches of recordings, failures."""
        return {"enabled": self.on, "refusal": self.refusal, "captures": self.captures,
                "recorded": len(self.recorded),
                "launches": self.dropped_launches + sum(r.launches for r in self.recorded.values()),
                "refused_plans": dict(self._refused_plans), "failures": list(self.failures),
                "memsets_as_kernels": self.memsets_replaced, "memsets_off": self.memsets_off,
                "memsets_kept": list(self.memsets_kept)}


def _latest(reasons: list[str], why: str) -> list[str]:
    """``reasons`` with ``why`` added, the latest few kept (the stats' lists of reasons)."""
    return (reasons + [why])[-8:]
