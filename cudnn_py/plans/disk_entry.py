"""A disk cache entry: what the store (:mod:`.disk_cache`) keeps per key, its envelope, the checks on reading it.

What it stores, per :class:`Key` (the operation graph's fingerprint as a string, the cuDNN version, the device's
compute capability and SM count, and the planning options that change the result), one :class:`Entry`: the
heuristics answer (JSON, :func:`check_heuristics_answer`'s schema), the finalized plan (:class:`PlanRecord`: cuDNN's
plan JSON with the engine, knob choices and workspace a rebuild must reproduce) and the kernel cache JSON.

Each entry file holds a self-describing envelope (JSON, :func:`encode`)::

    {"format": "cudnn_py disk cache", "version": 2, "key": {...the key's fields...},
     "created": <unix time>, "last_used": <unix time when written>,
     "payload": {"heuristics": str | null, "plan": {"json", "engine", "knobs", "workspace"} | null,
                 "kernel_cache": str | null},
     "checksum": "hmac-sha256:<hex>"}

The checksum is keyed (:func:`seal`): an HMAC-SHA256 of the canonical envelope without it, with the cache
directory's secret key (``cudnn_py/cache_trust.py``: in the directory's marker, 0600, this user's). It catches
corruption, and an entry that this user's cudnn_py did not write for this directory: one planted by another user
(who cannot read the key) or copied from another user's cache. The schemas stay: they keep hostile text from cuDNN
even if the key leaked.

:func:`decode` checks what is read back before anything uses it: the JSON is parsed with ``json_check.parse`` (size
and depth bounded first); the envelope's fields are checked; the keyed checksum must match (:class:`Unsealed`
otherwise); the key in the envelope must be the key asked for; the plan and kernel cache JSON pass ``json_check``'s
schemas and name the key's cuDNN version. Anything wrong raises :class:`EntryProblem` (or ``SerializedJSONError``)
naming it.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..backend import json_check
from ..errors import InvalidTypeError, InvalidValueError

FORMAT = "cudnn_py disk cache"
FORMAT_VERSION = 2  # 2: the checksum is keyed (issue #37)
MAX_ENTRY_BYTES = 64 << 20  # one entry: a kernel cache of one graph is KBs to a few MB
MAX_TIME = float(1 << 40)  # unix seconds: far beyond any real date, far below float trouble
_FINGERPRINT = re.compile(r"[0-9A-Za-z_.:+/=-]{1,256}")
_OPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
MAX_OPTIONS = 64
MAX_CONFIGS = 4096
MAX_KNOBS = 64

OptionValue = str | int | bool | None


class EntryProblem(InvalidValueError):
    """Why a stored entry is not used (internal: never escapes ``get``)."""


class Unsealed(EntryProblem):
    """The entry's keyed checksum does not match: not written by this user's cudnn_py for this directory (or
    altered since)."""


def _int(v: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidTypeError(f"{what}: {v!r} is not an integer")
    if not lo <= v <= hi:
        raise InvalidValueError(f"{what}: {v} is outside {lo}..{hi}")
    return v


def _str(v: Any, what: str, max_len: int) -> str:
    if not isinstance(v, str):
        raise InvalidTypeError(f"{what}: {type(v).__name__} is not a string")
    if len(v) > max_len:
        raise InvalidValueError(f"{what}: {len(v)} characters, at most {max_len}")
    return v


@dataclass(frozen=True)
class Key:
    """What an entry is for. ``fingerprint``: the operation graph's fingerprint as a string (a digest the caller
    makes; ``[0-9A-Za-z_.:+/=-]``, at most 256 characters); ``options``: the planning options that change the
    result (names to str / int / bool / None; given as a mapping or pairs, kept as sorted pairs)."""

    fingerprint: str
    cudnn_version: int
    compute_capability: int  # major * 10 + minor: 90 on an H200
    sm_count: int
    options: tuple[tuple[str, OptionValue], ...] = ()

    def __post_init__(self) -> None:
        if not _FINGERPRINT.fullmatch(_str(self.fingerprint, "Key.fingerprint", 256)):
            raise InvalidValueError(f"Key.fingerprint: {self.fingerprint!r} is not 1..256 of [0-9A-Za-z_.:+/=-]")
        _int(self.cudnn_version, "Key.cudnn_version", 1, 10**7)
        _int(self.compute_capability, "Key.compute_capability", 10, 10**4)
        _int(self.sm_count, "Key.sm_count", 1, 1 << 16)
        raw = self.options
        pairs = list(raw.items()) if isinstance(raw, Mapping) else list(raw) if isinstance(raw, (tuple, list)) \
            else None
        if pairs is None:
            raise InvalidTypeError(f"Key.options: a mapping or pairs, not {type(raw).__name__}")
        if len(pairs) > MAX_OPTIONS:
            raise InvalidValueError(f"Key.options: {len(pairs)} options, at most {MAX_OPTIONS}")
        options: dict[str, OptionValue] = {}
        for pair in pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise InvalidTypeError(f"Key.options: {pair!r} is not a (name, value) pair")
            name, value = pair
            if not isinstance(name, str) or not _OPTION_NAME.fullmatch(name):
                raise InvalidValueError(f"Key.options: {name!r} is not an identifier of at most 64 characters")
            if name in options:
                raise InvalidValueError(f"Key.options: {name!r} given twice")
            if isinstance(value, str):
                _str(value, f"Key.options[{name!r}]", 256)
            elif isinstance(value, int) and not isinstance(value, bool):
                _int(value, f"Key.options[{name!r}]", -(1 << 63), (1 << 63) - 1)
            elif value is not None and not isinstance(value, bool):
                raise InvalidTypeError(f"Key.options[{name!r}]: {type(value).__name__}; str, int, bool or None")
            options[name] = value
        object.__setattr__(self, "options", tuple(sorted(options.items())))

    def fields(self) -> dict[str, Any]:
        """The key as the envelope writes it."""
        return {"fingerprint": self.fingerprint, "cudnn_version": self.cudnn_version,
                "compute_capability": self.compute_capability, "sm_count": self.sm_count,
                "options": dict(self.options)}

    def digest(self) -> str:
        """sha256 (hex) of the key's canonical JSON: the entry's file name."""
        return hashlib.sha256(_canonical({"version": FORMAT_VERSION, **self.fields()})).hexdigest()

    @classmethod
    def from_fields(cls, d: Any) -> Key:
        if not isinstance(d, dict) or set(d) != {"fingerprint", "cudnn_version", "compute_capability", "sm_count",
                                                  "options"}:
            raise InvalidValueError("key: not an object of exactly fingerprint, cudnn_version, compute_capability, "
                                    "sm_count, options")
        if not isinstance(d["options"], dict):
            raise InvalidTypeError("key.options: not an object")
        return cls(d["fingerprint"], d["cudnn_version"], d["compute_capability"], d["sm_count"],
                   tuple(d["options"].items()))


@dataclass(frozen=True)
class PlanRecord:
    """A finalized plan: cuDNN's ``EXECUTION_PLAN_JSON_REPRESENTATION`` and what the plan rebuilt from it must have
    (engine global index, knob choices as applied, cuDNN's workspace size), as ``plan_cache`` checks a rebuild."""

    json: str
    engine: int
    knobs: tuple[tuple[int, int], ...] = ()
    workspace: int = 0
    # ``json`` parsed, where :func:`decode` parsed it for its check: the plan's user does not parse it again (not
    # stored, not compared)
    doc: dict | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _str(self.json, "PlanRecord.json", MAX_ENTRY_BYTES)
        _int(self.engine, "PlanRecord.engine", 0, (1 << 31) - 1)
        _int(self.workspace, "PlanRecord.workspace", 0, (1 << 63) - 1)
        knobs = self.knobs.items() if isinstance(self.knobs, Mapping) else self.knobs
        if not isinstance(knobs, (tuple, list, type({}.items()))):
            raise InvalidTypeError(f"PlanRecord.knobs: pairs, not {type(knobs).__name__}")
        pairs = []
        for pair in knobs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise InvalidTypeError(f"PlanRecord.knobs: {pair!r} is not a (knob type, value) pair")
            pairs.append((_int(pair[0], "PlanRecord.knobs: knob type", 0, 1 << 16),
                          _int(pair[1], "PlanRecord.knobs: value", -(1 << 63), (1 << 63) - 1)))
        if len(pairs) > MAX_KNOBS or len({t for t, _ in pairs}) != len(pairs):
            raise InvalidValueError(f"PlanRecord.knobs: {len(pairs)} choices (at most {MAX_KNOBS}, each knob once)")
        object.__setattr__(self, "knobs", tuple(sorted(pairs)))


@dataclass(frozen=True)
class Entry:
    """What is stored for a key: any of the heuristics answer (JSON text), the plan, the kernel cache (JSON text);
    at least one. ``created`` / ``last_used`` (unix seconds) are filled in when read back."""

    heuristics: str | None = None
    plan: PlanRecord | None = None
    kernel_cache: str | None = None
    created: float = field(default=0.0, compare=False)
    last_used: float = field(default=0.0, compare=False)
    # ``heuristics`` parsed, where :func:`decode` parsed it for its check (not stored, not compared)
    heuristics_doc: dict | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.heuristics is None and self.plan is None and self.kernel_cache is None:
            raise InvalidValueError("Entry: holds nothing (give heuristics, plan or kernel_cache)")
        for name in ("heuristics", "kernel_cache"):
            v = getattr(self, name)
            if v is not None:
                _str(v, f"Entry.{name}", MAX_ENTRY_BYTES)
        if self.plan is not None and not isinstance(self.plan, PlanRecord):
            raise InvalidTypeError(f"Entry.plan: a PlanRecord, not {type(self.plan).__name__}")
        for name in ("created", "last_used"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_TIME:
                raise InvalidValueError(f"Entry.{name}: {v!r} is not a time in 0..2**40")

    def payload(self) -> dict[str, Any]:
        plan = None if self.plan is None else {"json": self.plan.json, "engine": self.plan.engine,
                                               "knobs": [list(k) for k in self.plan.knobs],
                                               "workspace": self.plan.workspace}
        return {"heuristics": self.heuristics, "plan": plan, "kernel_cache": self.kernel_cache}



def _canonical(v: Any) -> bytes:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def seal(doc: dict[str, Any], secret: bytes) -> str:
    """The keyed checksum of an envelope (``doc``, its ``checksum`` field left out) with the directory's key."""
    body = _canonical({k: v for k, v in doc.items() if k != "checksum"})
    return "hmac-sha256:" + hmac.new(secret, body, hashlib.sha256).hexdigest()


# ---- the heuristics answer ---------------------------------------------------------------------------------------
def check_heuristics_answer(text: Any, what: str = "heuristics answer JSON") -> dict:
    """The schema of a stored heuristics answer (``heuristics._Answer`` as JSON)::

        {"configs": [{"engine": int, "knobs": [[knob type, value], ...], "mode": "CUDNN_HEUR_MODE_*"}, ...],
         "per_mode": [[mode, report], ...], "ranked": [[mode, [index into configs, ...]], ...],
         "pending": [mode, ...]}
    """
    c = json_check.Checker(what)
    doc = c.obj(json_check.parse(text, what), "", ("configs", "per_mode", "ranked", "pending"))
    mode = lambda v, p: c.enum(v, p, "cudnnBackendHeurMode_t")  # noqa: E731
    configs = c.list_(doc["configs"], "configs", 0, MAX_CONFIGS)
    for i, cfg in enumerate(configs):
        p = f"configs[{i}]"
        cfg = c.obj(cfg, p, ("engine", "knobs", "mode"))
        c.int_(cfg["engine"], f"{p}.engine", 0, (1 << 31) - 1)
        for j, pair in enumerate(c.list_(cfg["knobs"], f"{p}.knobs", 0, MAX_KNOBS)):
            q = f"{p}.knobs[{j}]"
            pair = c.list_(pair, q, 2, 2)
            c.int_(pair[0], f"{q}[0]", 0, 1 << 16)
            c.int_(pair[1], f"{q}[1]")
        mode(cfg["mode"], f"{p}.mode")
        c.fields(cfg, p, {"engine": json_check._skip, "knobs": json_check._skip, "mode": json_check._skip})
    for i, row in enumerate(c.list_(doc["per_mode"], "per_mode", 0, 64)):
        row = c.list_(row, f"per_mode[{i}]", 2, 2)
        mode(row[0], f"per_mode[{i}][0]")
        c.str_(row[1], f"per_mode[{i}][1]")
    for i, row in enumerate(c.list_(doc["ranked"], "ranked", 0, 64)):
        row = c.list_(row, f"ranked[{i}]", 2, 2)
        mode(row[0], f"ranked[{i}][0]")
        for j, index in enumerate(c.list_(row[1], f"ranked[{i}][1]", 0, MAX_CONFIGS)):
            c.int_(index, f"ranked[{i}][1][{j}]", 0, len(configs) - 1)
    for i, m in enumerate(c.list_(doc["pending"], "pending", 0, 64)):
        mode(m, f"pending[{i}]")
    c.fields(doc, "", dict.fromkeys(("configs", "per_mode", "ranked", "pending"), json_check._skip))
    return doc


# ---- the envelope ------------------------------------------------------------------------------------------------
def _time(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= MAX_TIME:
        raise EntryProblem(f"{what}: {json_check.fmt(v)} is not a time")
    return float(v)


def _opt_str(v: Any, what: str) -> str | None:
    if v is not None and not isinstance(v, str):
        raise EntryProblem(f"{what}: {type(v).__name__}, not a string or null")
    return v


def decode(data: bytes, key: Key | None, digest: str | None = None, *, secret: bytes) -> Entry:
    """The entry in an envelope's bytes, checked in full (see the module's docstring); ``key``: the key asked for
    (None: the envelope's own, checked against ``digest``, the file's name); ``secret``: the directory's key.
    Raises EntryProblem (Unsealed: the keyed checksum) or SerializedJSONError naming what is wrong."""
    doc = json_check.parse(data, "entry")
    if not isinstance(doc, dict):
        raise EntryProblem(f"the envelope is a {type(doc).__name__}, not an object")
    if doc.get("format") != FORMAT:
        raise EntryProblem(f"not a cudnn_py disk cache entry (format {json_check.fmt(doc.get('format'))})")
    if doc.get("version") != FORMAT_VERSION:
        raise EntryProblem(f"format version {json_check.fmt(doc.get('version'))}, this cudnn_py reads "
                           f"{FORMAT_VERSION}")
    fields = {"format", "version", "key", "created", "last_used", "payload", "checksum"}
    if set(doc) != fields:
        raise EntryProblem(f"envelope fields {sorted(doc)}, expected {sorted(fields)}")
    mac = doc["checksum"]
    try:
        expected = seal(doc, secret)
    except (ValueError, TypeError) as e:  # (json_check.parse refuses NaN and the like first: belt and braces)
        raise EntryProblem(f"the envelope has no canonical form: {e}") from None
    if not isinstance(mac, str) or not hmac.compare_digest(mac.encode("utf-8", "replace"), expected.encode()):
        raise Unsealed("checksum mismatch: not sealed with this cache directory's key (written by another user or "
                       "for another directory, or altered)")
    try:
        stored_key = Key.from_fields(doc["key"])
    except (InvalidValueError, InvalidTypeError) as e:
        raise EntryProblem(f"key: {e}") from None
    if key is not None and stored_key != key:
        raise EntryProblem(f"holds the entry of another key ({_describe(stored_key)}; asked: {_describe(key)})")
    if digest is not None and stored_key.digest() != digest:
        raise EntryProblem(f"holds the entry of another key ({_describe(stored_key)}) than its file name's")
    created, last_used = _time(doc["created"], "created"), _time(doc["last_used"], "last_used")
    payload = doc["payload"]
    if not isinstance(payload, dict) or set(payload) != {"heuristics", "plan", "kernel_cache"}:
        raise EntryProblem("payload: not an object of exactly heuristics, plan, kernel_cache")
    heuristics = _opt_str(payload["heuristics"], "payload.heuristics")
    kernel_cache = _opt_str(payload["kernel_cache"], "payload.kernel_cache")
    plan = None
    if payload["plan"] is not None:
        p = payload["plan"]
        if not isinstance(p, dict) or set(p) != {"json", "engine", "knobs", "workspace"}:
            raise EntryProblem("payload.plan: not an object of exactly json, engine, knobs, workspace")
        try:
            plan = PlanRecord(p["json"], p["engine"], p["knobs"], p["workspace"])
        except (InvalidValueError, InvalidTypeError) as e:
            raise EntryProblem(f"payload.plan: {e}") from None
    try:
        entry = Entry(heuristics, plan, kernel_cache, created, last_used)
    except (InvalidValueError, InvalidTypeError) as e:
        raise EntryProblem(f"payload: {e}") from None
    version = stored_key.cudnn_version
    heuristics_doc = None if heuristics is None else check_heuristics_answer(heuristics, "payload.heuristics")
    if plan is not None:
        plan_doc = json_check.check_execution_plan(plan.json, "payload.plan.json")
        _same_version(plan_doc, version, "payload.plan.json")
        plan = replace(plan, doc=plan_doc)
    if kernel_cache is not None:
        _same_version(json_check.check_kernel_cache(kernel_cache, "payload.kernel_cache"), version,
                      "payload.kernel_cache")
    # what the checks parsed goes with the entry: its user (disk_planning) does not parse the same JSON again
    return replace(entry, plan=plan, heuristics_doc=heuristics_doc)


def _same_version(doc: dict, version: int, what: str) -> None:
    if doc["cudnnVersion"] != version:
        raise EntryProblem(f"{what}: written by cuDNN {doc['cudnnVersion']}, the key says {version}")


def encode(key: Key, entry: Entry, now: float, secret: bytes) -> bytes:
    """The envelope of ``entry`` for ``key``, sealed with the directory's key ``secret``."""
    doc: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION, "key": key.fields(), "created": now,
                           "last_used": now, "payload": entry.payload()}
    doc["checksum"] = seal(doc, secret)
    return _canonical(doc)


def _describe(key: Key) -> str:
    return f"cuDNN {key.cudnn_version}, sm{key.compute_capability} x {key.sm_count} SMs"

