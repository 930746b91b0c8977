"""The bound execute (``Executor.fast``'s ``run``), generated: one template with the operand re-check inlined.

Why generated. The bound execute is one Python frame per call (``pygraph`` installs it as its ``execute``), and
what it costs per call is most of cudnn_py's host time per execute. Its operand re-check is described once, as
data (``execute_checks.TORCH_TERMS``), and shared with the other tiers; calling a shared resolver from here cost
the general fast path a frame and a ``(pointers, placement)`` result per call (+5-10% on ``benchmarks/hot_path.py
--fake``, issue #30). So the function is written once below as source, ``_RUN_TEMPLATE``, with its placeholder line
``<<operands>>`` replaced by the re-check's lines (``execute_checks.fast_operand_lines``): no call and no tuple
per execute, and no second copy of the check. Everything else of the bound execute (the hot path, the workspace,
the handle, its stream and context, the binding and variant-pack cache, capture and launch) is written once, in
the template, for the same reason: it is straight-line code in one frame.

The template is compiled once per shape of the closure (with or without data bound at build time and views) and
per description of the terms, in the namespace of ``plans/execute.py`` (its module globals: the names the template
reads there, ``_hot_state``, ``_get_stream``, ``trace``, ``error_for``, ..., are looked up there at call time, as
they were when ``run`` was written in that module; tests replace some). ``make`` is called once per
``Executor.fast`` with that call's tables and returns ``run``, a closure over them. Tracebacks name the source
``<cudnn_py.plans.execute_fast: run>``; ``bound_execute_source`` shows it.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .execute_checks import TORCH_TERMS, Term, call_check_expr, fast_operand_lines, split_operand_lines

# The bound execute. `make`'s parameters are what `Executor.fast` reads once (the executor's tables, the plan's
# fields, the driver's and cuDNN's functions). A line `<<operands>>` is replaced by the operand re-check's lines
# (execute_checks.fast_operand_lines), indented as the placeholder is; `<<name(args)>>` by the expression of the
# call check `name` (execute_checks.CALL_CHECKS) over those names. A line `<<logged>>` is nothing, or, while the
# frontend log is on, a return to the checked execute (`slow`), which logs every call: the classic keywords are
# dispatched as here, and nothing is replayed. Read with plans/execute.py, whose names it uses.
_RUN_TEMPLATE = r'''
def make(*, plan, classic, executor, slots, checked, template, bound_items, aliases, extras, backend_execute,
         plan_ptr, plan_ws, plan_id, default_handles, ws_buffers, getters, graph_handle, live_handles, buffer_ptr,
         ctx_get, executed, replays, find_replay, is_capturing, graph_launch, cudnn_get_stream, slow,
         checked_slots=(), trusted_slots=()):
    slots_get = slots.get
    vp_get, vp_move = executor._vp_cache.get, executor._vp_cache.move_to_end
    # The steady state of a replayed call, made when the general path launches the recording the executor
    # launched last (two launches of it in a row: bindings, handles or plans taking turns never pay for making
    # it; see _hot_state): one tuple, replaced whole, None when there is none; it holds its recording weakly.
    # `tried`: the id of the recording a state was last made (or found impossible) for, so that is tried once
    # per run. An id, not a reference: a recording dropped or evicted is destroyed at once (its graph exec with
    # it); an id reused by a later recording only skips one attempt.
    hot: tuple | None = None
    tried = 0

    def run(variant_pack: dict, workspace: Any = None, handle: Any = None, override_uids: Any = None,
            override_shapes: Any = None, override_strides: Any = None, tensor_uids: Any = None) -> None:
        nonlocal hot, tried
        if override_uids is not None or override_shapes is not None or override_strides is not None or \
                tensor_uids is not None:
            if classic is None:
                raise InvalidTypeError(f"plan {plan.name}'s execute takes no override_uids, override_shapes, "
                                "override_strides or tensor_uids")
            return classic(variant_pack, workspace, handle, override_uids, override_shapes, override_strides,
                           tensor_uids)
        <<logged>>
        state_now = hot
        if state_now is not None:
            # The hot path: the same keys in the same order as the steady state's call, every operand a
            # row-major torch tensor re-checked as the general path re-checks it (class, shape, dtype, device,
            # contiguity) with the same pointers, the same workspace pointer (and size), handle registry record,
            # binding and recording. Anything else clears the state and takes the general path below, which
            # checks everything again; nothing is launched here that the general path would not launch.
            keys, rows, hot_rec, ws_cls, replay_ref, matches = state_now
            if matches(variant_pack, keys, rows):  # (execute_checks.hot_matcher)
                hot_replay = replay_ref()  # still recorded and launched last: its binding is the state's
                if hot_replay is replays.last and hot_replay is not None:
                    # the workspace's pointer as the general path reads it; -1: the general path decides
                    if workspace.__class__ is ws_cls:
                        ws = workspace.data_ptr() if workspace.nbytes >= plan_ws else -1
                    elif workspace is None:
                        ws = 0 if not plan_ws else -1  # (workspace=None with a workspace: the general path)
                    elif workspace.__class__ is int:
                        ws = workspace
                    else:
                        ws = -1
                    h = graph_handle if handle is None else handle
                    binding = hot_replay.binding
                    if ws == binding[1] and executor._last is binding and live_handles.get(h) is hot_rec \
                            and trace.active is None:
                        try:
                            out = executed.params
                        except AttributeError:  # this thread's first call: the general path sends it on
                            out = None
                        ctx = hot_rec.context
                        if out is not None and (ctx_get is None or ctx is None or (
                                (got := ctx_get())[0] == 0 and int(got[1]) == ctx)) and \
                                cudnn_get_stream(h, out.stream) == 0:
                            stream = out.stream.value or 0
                            if stream < 2 or ((got := is_capturing(stream))[0] == 0 and got[1] == 0):
                                if graph_launch(hot_replay.exec, stream) == 0:
                                    hot_replay.launches += 1
                                    return None
                                # (the general path below launches it once more, and drops it if that fails)
            hot, tried = None, 0
        <<operands>>
        try:
            out = executed.params
        except AttributeError:  # this thread's first call: the slow path makes its buffers (and gives it a context)
            return slow(variant_pack, workspace, handle)
        graph_device = executor.device  # read per call: set_device may come after this closure was made
        stream = state = None
        owner: Any  # the handle's registry record, or this thread's default-handle state: what a replay is for
        if handle is not None or graph_handle is not None:
            h = graph_handle if handle is None else handle  # `handle` stays the caller's: the slow path gets it
            rec = live_handles.get(h)
            # not live, or of another device than the graph's: the slow path raises, naming why
            if rec is None or not <<handle_on_device(rec, graph_device)>>:
                return slow(variant_pack, workspace, handle)
            ctx, owner = rec.context, rec
        else:
            if placement is None:
                placement = NO_FRAMEWORK
            state = default_handles.get((get_ident(), placement.device if graph_device is None else graph_device))
            if not <<default_handle_live(state, live_handles)>>:  # (destroyed: a new one)
                return slow(variant_pack, workspace, handle)
            stream = placement.current_stream()
            if not <<stream_bound(state, stream)>>:  # the slow path binds the new stream
                return slow(variant_pack, workspace, handle)
            h, ctx, owner = state.handle, state.context, state
        if ctx_get is not None and ctx is not None:  # cuCtxGetCurrent, inlined: no call frame
            got = ctx_get()
            if got[0] != 0 or int(got[1]) != ctx:  # the slow path switches contexts
                return slow(variant_pack, workspace, handle)
        if workspace is None:
            ws = 0
            if plan_ws:
                if placement is None:
                    placement = NO_FRAMEWORK
                if stream is None:
                    stream = _get_stream(h)
                # held until cuDNN returns
                ws_entry = ws_buffers.get((placement.device if graph_device is None else graph_device, stream))
                if ws_entry is None or ws_entry[0] < plan_ws:
                    return slow(variant_pack, workspace, handle)
                ws = ws_entry[1]
        elif workspace.__class__ is int:
            ws = workspace
        else:
            getter = getters.get(workspace.__class__)
            nbytes = getattr(workspace, "nbytes", None)
            if nbytes is None and getter is buffer_ptr:  # a cuda.core Buffer knows its size in bytes
                nbytes = workspace.size
            if getter is None or nbytes is None or nbytes < plan_ws:  # the slow path checks and reports
                return slow(variant_pack, workspace, handle)
            ws = getter(workspace)
        binding = executor._last  # read once; holding it keeps its variant pack alive
        if trace.active is not None:
            return slow(variant_pack, workspace, handle)
        if not <<binding_matches(binding, plan, ws, ptrs)>>:
            # Other pointers than the last call's (a framework's fresh output tensors at every call): where a
            # variant pack was built for these before, execute does no more than this path has done (every
            # operand re-checked against its slot's signature, the handle, stream, context and workspace as
            # above) before it takes that pack from its cache (_binding_for: no check on a hit). So does this,
            # and goes on as for the last call's binding: its recording launched, or recorded when it comes back
            # within its owner's last few calls (a training step's outputs, at the same addresses every other
            # step). Pointers never seen go to execute, which checks them in full, and so does a caller's
            # workspace object (execute checks its device).
            if workspace is not None and workspace.__class__ is not int:
                return slow(variant_pack, workspace, handle)
            # (the pack cache read without a frame or a lock: a get and a move_to_end are each one C call
            # of the OrderedDict, atomic under the interpreter; a binding evicted between them is still whole, and
            # held here: it executes, and is published as the last binding as the cache's own lookup would.)
            key = (plan_id, ws, *ptrs)
            binding = vp_get(key)
            if binding is None:
                return slow(variant_pack, workspace, handle)
            try:
                vp_move(key)
            except KeyError:
                pass
            executor._last = binding
        if replays.on:  # replay.py: a recorded binding is launched as a CUDA graph
            if stream is None:
                if cudnn_get_stream(h, out.stream) != 0:
                    return slow(variant_pack, workspace, handle)
                stream = out.stream.value or 0
            replay = replays.last  # the one launched last, else the one recorded for this binding and handle
            again = replay is not None and replay.binding is binding and replay.owner is owner
            if not again:
                replay = find_replay(binding, owner)
            if replay is not None:
                # not while the caller captures this stream: its capture records the execute instead. The
                # legacy default stream (0, or CU_STREAM_LEGACY: 1) cannot be captured: no query for it
                if stream < 2 or ((got := is_capturing(stream))[0] == 0 and got[1] == 0):
                    status = graph_launch(replay.exec, stream)
                    if status == 0:
                        replay.launches += 1
                        if again and tried != id(replay):  # the second launch in a row: a steady state?
                            tried = id(replay)
                            if state is None and not extras and not trusted_slots:
                                hot = _hot_state(variant_pack, workspace, ptrs, checked, slots, rec, replay)
                        return None
                    replays.drop(replay, f"plan {plan.name}: cuGraphLaunch failed with CUresult {status}")
            elif replays.consider(binding, owner, h, stream, backend_execute):
                return None
        status = backend_execute(h, plan_ptr, binding[3])
        if status != 0:
            raise error_for(status, "cudnnBackendExecute", kind=_PLAN_KIND,
                            detail=f"plan {plan.name}")

    return run
'''

_PLACEHOLDER = re.compile(r"^( *)<<(\w+)>>$", re.MULTILINE)
_CHECK = re.compile(r"<<(\w+)\(([\w, ]*)\)>>")


def bound_execute_source(extras: bool, terms: tuple[Term, ...] = TORCH_TERMS, logged: bool = False,
                         trusted: bool = False) -> str:
    """The source of ``make`` for an executor with (``extras``) or without data bound at build time or views;
    ``logged``: every call through the checked execute (while the frontend log is on); ``trusted``: the split
    form, a sequence of operands partly re-checked, partly guaranteed by the caller (``Executor.fast_trusted``)."""
    blocks = {"operands": split_operand_lines(terms) if trusted else fast_operand_lines(extras, terms),
              "logged": ["return slow(variant_pack, workspace, handle)"] if logged else []}
    source = _PLACEHOLDER.sub(lambda m: "\n".join(m[1] + line for line in blocks[m[2]]), _RUN_TEMPLATE)
    return _CHECK.sub(lambda m: call_check_expr(m[1], [a.strip() for a in m[2].split(",")]), source)


_made: dict[tuple[tuple[Term, ...], bool, int, bool, bool], Callable[..., Any]] = {}


def bound_execute(extras: bool, namespace: dict[str, Any], terms: tuple[Term, ...] = TORCH_TERMS,
                  logged: bool = False, trusted: bool = False) -> Callable[..., Any]:
    """``make`` (see the template) compiled in ``namespace`` (plans/execute.py's globals), once per shape."""
    key = (terms, extras, id(namespace), logged, trusted)
    made = _made.get(key)
    if made is None:
        code = compile(bound_execute_source(extras, terms, logged, trusted), "<cudnn_py.plans.execute_fast: run>",
                       "exec")
        names: dict[str, Any] = {}
        exec(code, namespace, names)  # (the functions' globals are `namespace`; `make` lands in `names`)
        made = _made[key] = names["make"]
    return made
