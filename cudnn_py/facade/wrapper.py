"""1.32's ``cudnn.Graph`` (the ``cudnn.wrapper`` module): a :class:`~cudnn_py.facade.pygraph.pygraph` driven from
framework tensors, with the boilerplate done for the caller.

``with Graph(...) as graph:`` makes the pygraph (the keywords other than the wrapper's own go to ``pygraph``; torch
dtypes given as ``io_data_type`` / ``intermediate_data_type`` / ``compute_data_type`` are converted). Inside, every
op method of the pygraph is reached through the wrapper: a framework tensor (anything with ``__dlpack__``) given
where a graph tensor goes becomes a graph tensor like it (one per framework object; ``requires_grad`` tensors are
detached first), each node is named ``<method>.<n>`` unless named by the caller (a name used twice is a
``ValueError``), and the node's graph-tensor arguments and outputs are recorded by name (``<node>::<argument>``,
``<node>::<position>``; outputs by their own name). On exit the graph is validated and built (operation graph,
plans for the heuristic modes, default ``[A, FALLBACK]``, support check, plan build) and, unless
``workspace_alloc=False``, a torch workspace of the graph's size is allocated. A failure inside the block drops the
graph and propagates.

``set_io_tuples(inputs, outputs)`` fixes the positional order (tensors found by canonical name, assigned name, uid,
graph tensor or the framework tensor used when building): ``graph(x, w)`` then returns the output (a list for
several) allocated with ``torch.empty_strided`` like the graph's output tensors. ``graph({name: tensor})`` fills a
variant pack by canonical name, graph tensor, assigned name or uid, allocates the outputs not given into the dict
and returns the dict. ``handle=`` / ``workspace=`` keywords of a call go to ``pygraph.execute``; without them the
graph's handle (``handle="auto"``: :func:`get_default_handle`, this thread's handle of the current device bound to
torch's current stream) and workspace are used, and a graph made without a handle refuses to run.

The pygraph's build and execute methods are refused through the wrapper (``RuntimeError``); a few queries pass
through as they are. torch is never imported by this module: only when torch is needed (workspace, outputs, the
default handle) is it taken from ``sys.modules``, or imported then.
"""
from __future__ import annotations

import atexit
import importlib
import importlib.util
import inspect
import itertools
import logging
import sys
import threading
from collections import OrderedDict
from typing import Any

from .. import dtypes
from ..enums import data_type, heur_mode
from ..errors import InvalidTypeError, InvalidValueError, UsageError
from ..ir import Tensor
from .pygraph import pygraph

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..backend import Handle

__all__ = ["Graph", "data_type", "heur_mode", "cudnn"]  # noqa: F822  (`cudnn`: the module __getattr__)



def __getattr__(name: str) -> Any:
    """1.32's module exports ``cudnn`` (the package it belongs to): here the ``cudnn_py`` package, whichever module
    was imported first (``import cudnn_py`` imports this module only when first used)."""
    if name == "cudnn":
        return sys.modules[__name__.split(".")[0]]
    if name in _BACKEND_NAMES:
        return _from_backend(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# the raw layer's handle functions (and 1.32's ``CudnnHandle``), imported on first use, not with the module (reading
# `cudnn_py.pygraph` imports this module): module attributes through ``__getattr__``, kept once read
_BACKEND_NAMES = frozenset({"CudnnHandle", "Handle", "backend_version", "create_handle", "destroy_handle",
                            "set_stream"})


def _from_backend(name: str) -> Any:
    """The raw layer's ``name`` as this module's attribute (a test's monkeypatched value included)."""
    value = globals().get(name)
    if value is None:
        from .. import backend

        value = getattr(backend, "Handle" if name == "CudnnHandle" else name)
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_BACKEND_NAMES, "cudnn"})


_GRAPH_TENSOR_TYPES = (Tensor,)

logger = logging.getLogger(__name__)

# the pygraph attributes reached through the wrapper unchanged, and those it refuses (1.32's lists)
_PASS_THROUGH = frozenset({"get_workspace_size", "get_workspace_size_plan_at_index", "serialize", "deserialize",
                           "query_tensor_attributes_of_uid"})
_BLOCKED = frozenset({
    "build", "build_operation_graph", "build_plan_at_index", "build_plans", "check_support", "create_execution_plan",
    "create_execution_plans", "deselect_behavior_notes", "deselect_engines", "deselect_numeric_notes",
    "deselect_workspace_greater_than", "execute", "execute_plan_at_index", "get_behavior_notes",
    "get_behavior_notes_for_plan_at_index", "get_engine_count", "get_execution_plan_count", "get_knobs_for_engine",
    "get_plan_name_at_index", "key", "populate_cuda_graph", "query_tensor_attributes_of_uid",
    "select_behavior_notes", "select_numeric_notes", "update_cuda_graph", "validate"})
_DTYPE_KEYWORDS = ("io_data_type", "intermediate_data_type", "compute_data_type")
_TORCH_DTYPE_NAMES = ("float16", "half", "bfloat16", "float32", "float", "float64", "double", "int8", "int32",
                      "int64", "uint8", "bool", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn_x2")


# ---- torch, without importing it early -------------------------------------------------------------------------------
def _torch_available() -> bool:
    return "torch" in sys.modules or importlib.util.find_spec("torch") is not None


def _torch() -> Any:
    """The torch module: the one the caller imported, else imported now (only where torch must make something)."""
    torch = sys.modules.get("torch")
    if torch is None:
        if not _torch_available():
            raise UsageError("PyTorch is not available")
        torch = importlib.import_module("torch")
    return torch


def _is_torch_dtype(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(getattr(torch, "dtype", None), type) and isinstance(x, torch.dtype)


def _torch_to_cudnn(x: Any) -> Any:
    """The data_type of a torch dtype 1.32 maps, else None."""
    if not _is_torch_dtype(x):
        return None
    name = dtypes.framework_dtype_name(x)
    row = dtypes.BY_FRAMEWORK_NAME.get(name or "") if name in _TORCH_DTYPE_NAMES else None
    return None if row is None else data_type[row.name]


def _cudnn_to_torch(torch: Any, dt: Any) -> Any:
    if not isinstance(dt, data_type):
        return None
    for name in dtypes.BY_NAME[dt.name].names:
        candidate = getattr(torch, name, None)
        if name in _TORCH_DTYPE_NAMES and candidate is not None:
            return candidate
    return None


def _is_framework_tensor(obj: Any) -> bool:
    return hasattr(obj, "__dlpack__") and not isinstance(obj, _GRAPH_TENSOR_TYPES)


def _graph_tensor(g: Any, obj: Any) -> Tensor:
    """A graph tensor like the framework tensor ``obj`` (a tensor that requires grad is detached first)."""
    if getattr(obj, "requires_grad", False):
        obj = obj.detach()
    return g.tensor_like(obj)


def _tensor_like(t: Tensor) -> Any:
    """A torch tensor on the current CUDA device with the dims, strides and data type of graph tensor ``t``."""
    if not _torch_available():
        raise UsageError("PyTorch is not available")
    torch = _torch()
    dtype = _cudnn_to_torch(torch, t.get_data_type())
    if dtype is None:
        raise InvalidTypeError(f"cuDNN uses an unsupported data type in PyTorch: {t.get_data_type()}")
    return torch.empty_strided(t.get_dim(), t.get_stride(), device="cuda", dtype=dtype)


# ---- the default handle: one per (thread, device), bound to the stream of each call ---------------------------------
_default_handles = threading.local()
_default_handle_registry: list[Handle] = []
_default_handle_lock = threading.Lock()


def get_default_handle(stream: Any = None) -> Handle:
    """This thread's cuDNN handle for the stream's device (the current device for a raw stream int), bound to
    ``stream`` (default: torch's current stream). Kept until :func:`destroy_default_handle` or interpreter exit."""
    if not _torch_available():
        raise UsageError("PyTorch is not available")
    torch = _torch()
    if stream is None:
        stream = torch.cuda.current_stream()
    if isinstance(stream, int):
        device, raw = int(torch.cuda.current_device()), int(stream)
    else:
        index = getattr(stream, "device_index", None)
        device = int(index if index is not None else stream.device.index)
        raw = int(stream.cuda_stream)
    by_device = getattr(_default_handles, "by_device", None)
    if by_device is None:
        by_device = _default_handles.by_device = {}
    handle = by_device.get(device)
    if handle is None or handle.backend_handle is None:
        handle = _from_backend("create_handle")(device)
        by_device[device] = handle
        # kept beyond the thread: a thread ending must not destroy CUDA resources under another one's capture
        with _default_handle_lock:
            _default_handle_registry.append(handle)
    _from_backend("set_stream")(handle=handle, stream=raw)
    return handle


def destroy_default_handle() -> None:
    """Destroy the handles :func:`get_default_handle` made (later calls make new ones). A handle that fails to be
    destroyed stays registered and the first error is raised."""
    with _default_handle_lock:
        handles, _default_handle_registry[:] = list(_default_handle_registry), []
    failed, first_error = [], None
    for handle in handles:
        try:
            _from_backend("destroy_handle")(handle)
        except Exception as error:
            failed.append(handle)
            first_error = first_error or error
    if failed:
        with _default_handle_lock:
            _default_handle_registry.extend(failed)
        assert first_error is not None
        raise first_error


atexit.register(destroy_default_handle)


# ---- lookups ---------------------------------------------------------------------------------------------------------
def _find_tensor(key: Any, tensor_map: dict[str, Tensor], framework_map: dict[int, Tensor]) -> str:
    """The name under which ``key`` (canonical or assigned name, uid, graph tensor, or a framework tensor used to
    build the graph) is in ``tensor_map``."""
    if isinstance(key, str):
        if key in tensor_map:
            return key
        for name, t in tensor_map.items():
            if t.get_name() == key:
                return name
    elif isinstance(key, int):
        for name, t in tensor_map.items():
            if t.get_uid() == key:
                return name
    elif isinstance(key, _GRAPH_TENSOR_TYPES):
        for name, t in tensor_map.items():
            if t is key:
                return name
    elif hasattr(key, "__dlpack__") and id(key) in framework_map:
        target = framework_map[id(key)]
        for name, t in tensor_map.items():
            if t is target:
                return name
    raise InvalidValueError("Input not found in tensor map")


def _extract_tensor(name: str, t: Tensor, given: dict) -> Any:
    """The caller's buffer for graph tensor ``t`` (recorded as ``name``): by canonical name, graph tensor, assigned
    name or uid; None when absent."""
    for key in (name, t, t.get_name(), t.get_uid()):
        if key in given:
            return given[key]
    return None


class Graph:
    """``with cudnn.Graph(handle=..., heuristics=[...], io_data_type=...) as graph:`` build ops from torch tensors;
    on exit the graph is validated and built. Then ``graph.set_io_tuples(inputs, outputs)`` and ``graph(x, w)``,
    or ``graph({name: tensor})``."""

    # class-level defaults: attribute reads never reach __getattr__ (which forwards to the pygraph), even on an
    # instance whose __init__ raised
    __graph: Any = None
    __handle: Any = None  # None: none given (a call needs handle=); "auto": get_default_handle(); else the handle
    __workspace: Any = None  # None: allocated on exit; False: the caller passes workspace= to every call
    __input_tuples: Any = None
    __output_tuples: Any = None

    def __init__(self, *, handle: Any = None, inputs: Any = None, outputs: Any = None, heuristics: Any = None,
                 workspace_alloc: bool = True, **kwargs: Any) -> None:
        if not _torch_available():
            raise UsageError("PyTorch is not available")
        if inputs and not isinstance(inputs, (list, tuple)):
            raise InvalidValueError("inputs must be a list or tuple")
        if outputs and not isinstance(outputs, (list, tuple)):
            raise InvalidValueError("outputs must be a list or tuple")
        if heuristics and not isinstance(heuristics, (list, tuple)):
            raise InvalidValueError("heuristics must be a list or tuple")
        if _from_backend("backend_version")() < 91200:
            raise UsageError("cuDNN version 9.12.0 or higher is required")
        for key in _DTYPE_KEYWORDS:  # torch dtypes become cuDNN ones
            if key in kwargs:
                kwargs[key] = _torch_to_cudnn(kwargs[key]) or kwargs[key]
        self.__kwargs = kwargs
        self.__tensor_map: dict[int, Tensor] = {}  # id(framework tensor) -> its graph tensor
        self.__tensor_in: OrderedDict[str, Tensor] = OrderedDict()  # "<node>::<argument>" -> graph tensor
        self.__tensor_out: OrderedDict[str, Tensor] = OrderedDict()  # output name -> graph tensor
        self.__tensor_unknown: list[Tensor] = []  # made by graph.tensor() / graph.tensor_like()
        self.__node_count: dict[str, int] = {}
        self.__node_names: set[str] = set()
        self.__inputs = inputs or []  # set_io_tuples() on exit
        self.__outputs = outputs or []
        self.__heuristics = list(heuristics) if heuristics else [heur_mode.A, heur_mode.FALLBACK]
        if not workspace_alloc:
            self.__workspace = False
        if handle:
            self.__handle = handle

    def __del__(self) -> None:
        pass  # the handle is the caller's (or the thread's default); the workspace goes with the object

    # ---- building ----------------------------------------------------------------------------------------------------
    def __enter__(self) -> Graph:
        if self.__graph is not None:
            raise UsageError("Graph already created")
        given = {} if self.__handle in ("auto", None) else {"handle": self.__handle}
        self.__graph = pygraph(**given, **self.__kwargs)
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, tb: Any) -> Any:
        """Validate and build the graph (operation graph, plans for the heuristic modes, support check, plans),
        allocate the workspace and apply the io tuples given at construction; on an exception, drop the graph."""
        if exc_type is not None:
            logger.error("Exception during graph construction: %s", exc_value)
            self.__graph = None
            return False
        g = self.__graph
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans(self.__heuristics)
        g.check_support()
        g.build_plans()
        if self.__workspace is None:
            torch = _torch()
            self.__workspace = torch.empty(g.get_workspace_size(), device="cuda", dtype=torch.uint8)
        if self.__inputs or self.__outputs:
            self.set_io_tuples(self.__inputs, self.__outputs)
        del self.__inputs, self.__outputs
        logger.debug("Inputs: %s", self.__tensor_in)
        logger.debug("Outputs: %s", self.__tensor_out)
        logger.debug("Node count: %s", self.__node_count)
        return g

    def __getattr__(self, name: str) -> Any:
        """The pygraph's attribute ``name``: op methods wrapped (framework tensors become graph tensors, nodes
        named, arguments and outputs recorded), ``tensor`` / ``tensor_like`` recorded, build and execute methods
        refused."""
        g = self.__graph
        if g is None:
            raise AttributeError(f"'Graph' has no pygraph to take {name!r} from: use it inside `with cudnn.Graph() "
                                 "as graph:`")
        if name in _PASS_THROUGH:
            return getattr(g, name)
        if name in _BLOCKED:
            raise UsageError(f"Calling {name} via wrapper is not allowed")
        attr = getattr(g, name)
        if not inspect.ismethod(attr):
            return attr
        if name in ("tensor", "tensor_like"):
            def tensor_capture(*args: Any, **kwargs: Any) -> Any:
                out = attr(*args, **kwargs)
                self.__tensor_unknown.append(out)
                return out

            return tensor_capture

        def op(*args: Any, **kwargs: Any) -> Any:
            count = self.__node_count[name] = self.__node_count.get(name, 0) + 1
            if "name" in kwargs:
                node_name = kwargs["name"]
            else:
                node_name = kwargs["name"] = f"{name}.{count - 1}"
            if node_name in self.__node_names:
                raise InvalidValueError(f"Node name {node_name} already used")
            self.__node_names.add(node_name)
            call_args = [self.__argument(f"{node_name}::{i}", v) for i, v in enumerate(args)]
            call_kwargs = {k: self.__argument(f"{node_name}::{k}", v) for k, v in kwargs.items()}
            out = attr(*call_args, **call_kwargs)
            outs = [out] if isinstance(out, _GRAPH_TENSOR_TYPES) else out if isinstance(out, (list, tuple)) else []
            for i, t in enumerate(outs):
                if isinstance(t, _GRAPH_TENSOR_TYPES):
                    self.__tensor_out[t.get_name() or f"{node_name}::{i}"] = t
            return out

        return op

    def __as_graph_tensor(self, obj: Any) -> Any:
        if _is_framework_tensor(obj):
            t = self.__tensor_map.get(id(obj))
            if t is None:
                t = self.__tensor_map[id(obj)] = _graph_tensor(self.__graph, obj)
            return t
        return obj

    def __argument(self, key: str, value: Any) -> Any:
        """One op argument with framework tensors replaced by graph tensors, its graph tensors recorded as
        inputs under ``key`` (a tuple's elements under ``key::j``, as sdpa's dropout tuple; a list's converted
        framework tensors likewise)."""
        if isinstance(value, tuple):
            items = [self.__as_graph_tensor(v) for v in value]
            for j, v in enumerate(items):
                if isinstance(v, _GRAPH_TENSOR_TYPES):
                    self.__tensor_in[f"{key}::{j}"] = v
            return tuple(items)
        if isinstance(value, list) and any(_is_framework_tensor(v) for v in value):
            items = list(value)
            for j, v in enumerate(value):
                if _is_framework_tensor(v):
                    items[j] = self.__tensor_in[f"{key}::{j}"] = self.__as_graph_tensor(v)
            return items
        value = self.__as_graph_tensor(value)
        if isinstance(value, _GRAPH_TENSOR_TYPES):
            self.__tensor_in[key] = value
        return value

    # ---- the io order ------------------------------------------------------------------------------------------------
    def set_io_tuples(self, inputs: Any, outputs: Any) -> None:
        """The order of the positional inputs and of the outputs returned (tensors or names). Inside the ``with``
        block it is kept and applied on exit. Every non-virtual tensor of the graph must be in one of them."""
        if not isinstance(inputs, (list, tuple)):
            raise InvalidValueError("inputs must be a list or tuple")
        if not isinstance(outputs, (list, tuple)):
            raise InvalidValueError("outputs must be a list or tuple")
        if self.__graph is None:
            raise AttributeError("'NoneType' object has no attribute 'get_execution_plan_count'")
        if not self.__graph.get_execution_plan_count():
            self.__inputs, self.__outputs = inputs, outputs
            return
        found: set[int] = set()
        input_tensors = self.__resolve("Input", inputs, self.__tensor_in, found)
        output_tensors = self.__resolve("Output", outputs, self.__tensor_out, found)
        for i, t in enumerate(input_tensors):
            if t.get_is_virtual():
                raise InvalidValueError(f"Input at index {i} is a virtual tensor")
        for name, t in self.__tensor_out.items():
            if not t.get_is_virtual() and not any(t is o for o in output_tensors):
                raise InvalidValueError(f"Node output {name} is a non-virtual tensor but not specified as output")
        for name, t in self.__tensor_in.items():
            if not t.get_is_virtual() and id(t) not in found:
                raise InvalidValueError(f"Node input {name} is a non-virtual tensor but not specified as input or "
                                        f"output")
        self.__input_tuples = tuple(input_tensors)
        self.__output_tuples = tuple(output_tensors)

    def __resolve(self, what: str, keys: Any, table: dict[str, Tensor], found: set[int]) -> list[Tensor]:
        out = []
        for i, key in enumerate(keys):
            if any(key is u for u in self.__tensor_unknown):
                out.append(key)  # made by graph.tensor(): taken as it is (1.32 does not mark it found)
                continue
            try:
                name = _find_tensor(key, table, self.__tensor_map)
            except ValueError:
                raise InvalidValueError(f"{what} at index {i} ({key}) not found in tensor map") from None
            t = table[name]
            if id(t) in found:  # (1.32 reports a duplicate as not found)
                raise InvalidValueError(f"{what} at index {i} ({name}) not found in tensor map")
            found.add(id(t))
            out.append(t)
        return out

    # ---- running -----------------------------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``graph(x, w, ...)`` after set_io_tuples(): the output, or a list of outputs; ``graph({key: tensor})``:
        the dict, with the outputs it lacked added. Keywords (``handle``, ``workspace``, ...) go to execute."""
        if self.__graph is None:
            raise UsageError("Graph not created")
        if not self.__graph.get_execution_plan_count():
            raise UsageError("You should not invoke the graph before the context exits")
        if len(args) == 1 and isinstance(args[0], dict):
            return self.__call_with_dict(args[0], kwargs)
        if args and not self.__input_tuples:
            raise InvalidValueError("You should not invoke the graph with positional arguments before running "
                             "set_io_tuples()")
        if self.__input_tuples is None:
            raise InvalidTypeError("object of type 'NoneType' has no len()")
        if len(args) != len(self.__input_tuples):
            raise InvalidValueError(f"Number of arguments ({len(args)}) does not match number of inputs "
                             f"({len(self.__input_tuples)})")
        pack = {t.get_uid(): a for t, a in zip(self.__input_tuples, args)}
        results = [_tensor_like(t) for t in self.__output_tuples]
        pack.update((t.get_uid(), r) for t, r in zip(self.__output_tuples, results))
        self.__execute(pack, kwargs)
        return results[0] if len(results) == 1 else results

    def __call_with_dict(self, given: dict, kwargs: dict) -> dict:
        pack: dict[int, Any] = {}
        missing: dict[int, tuple[Tensor, str]] = {}
        for name, t in itertools.chain(self.__tensor_in.items(), self.__tensor_out.items()):
            if t.get_uid() in pack or t.get_is_virtual():
                continue
            buffer = _extract_tensor(name, t, given)
            if buffer is None:
                missing[id(t)] = (t, name)  # the last name it was recorded under
                continue
            if not hasattr(buffer, "__dlpack__"):
                raise UsageError(f"Tensor {name} is not provided as a dlpack tensor")
            pack[t.get_uid()] = buffer
        missing_inputs, added = [], []
        for t, name in missing.values():
            if t.get_uid() in pack:
                continue
            if name in self.__tensor_out:
                pack[t.get_uid()] = given[name] = _tensor_like(t)
                added.append(name)
            else:
                missing_inputs.append(name)
        if missing_inputs:
            raise UsageError(f"Non-virtual input tensors not found in variant pack: {missing_inputs}")
        if added:
            logger.debug("Added output tensors: %s", added)
        self.__execute(pack, kwargs)
        return given

    def __execute(self, pack: dict[int, Any], kwargs: dict) -> None:
        kwargs = dict(kwargs)
        if "handle" not in kwargs:
            if self.__handle is None:
                raise UsageError("Need to specify cudnn handle to execute graph")
            kwargs["handle"] = get_default_handle() if self.__handle == "auto" else self.__handle
        if "workspace" not in kwargs:
            if self.__workspace is False:
                raise UsageError("Need to specify workspace to execute graph")
            kwargs["workspace"] = self.__workspace
        self.__graph.execute(pack, **kwargs)
