"""The backend attribute schema: doc-comment parsing and the docs -> probe -> overrides merge.

The doc block in front of each ``cudnnBackendDescriptorType_t`` member lists the attributes of that descriptor in one
of four formats (read from the 9.28 headers in ``bindings/headers``):

* **A**  ``- CUDNN_ATTR_X (CUDNN_TYPE_Y[/CUDNN_TYPE_Z| or CUDNN_TYPE_Z][, <count>])`` then indented prose;
* **A0** ``- CUDNN_ATTR_X`` alone, type only (sometimes) in the prose ("Sets the CUDNN_TYPE_GENSTATS_MODE ...");
* **B**  an indented ``CUDNN_ATTR_X`` line (several consecutive names share one entry), prose, then sub-bullets
  ``- CUDNN_TYPE_Y; one element [of descriptor type CUDNN_BACKEND_Z][ or CUDNN_TYPE_W; ...]``, ``- Required attribute.``;
* **C**  a ``NOTE`` listing ``- CUDNN_ATTR_X   (1620)`` names with their enum values and no types.

The attribute section starts at ``Supported attributes...:`` or ``Attributes:`` and ends at the next non-bullet line at
indentation 0 (``Finalization:``, ``Notes on ...``, ``Note:``, ``@since`` ...).

Name typos in the docs, the undefined count macro ``CUDNN_MAX_DIMS`` and misspelled type names are not guessed: each
must be listed in ``overrides.json`` (the near-typo matcher below only *suggests* the mapping in the error message).
Owners of undocumented attributes are inferred from the name prefix, which agrees with the documented owner for every
documented attribute (checked on every run and reported).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from header_parser import Enum, HeaderSet

ATTR_NAME_ENUM = "cudnnBackendAttributeName_t"
ATTR_TYPE_ENUM = "cudnnBackendAttributeType_t"
DESC_TYPE_ENUM = "cudnnBackendDescriptorType_t"
BACKEND_DESCRIPTOR = "CUDNN_TYPE_BACKEND_DESCRIPTOR"


class SchemaError(Exception):
    """The attribute schema cannot be built; the message names the offending entry."""


# --------------------------------------------------------------------------------------------------------------------
# Doc entries (the "header" layer)
# --------------------------------------------------------------------------------------------------------------------

@dataclass
class Alternative:
    type: str  # CUDNN_TYPE_* (after type-name repair)
    count_text: str  # the count wording as written ("" when none)
    min_count: int | None  # None when the docs give no count
    max_count: int | None
    kinds: tuple[str, ...]  # descriptor kinds for BACKEND_DESCRIPTOR, from the spec or the prose


@dataclass
class DocEntry:
    doc_name: str  # the name as written in the docs
    name: str  # the enum member it maps to
    owner: str  # the descriptor whose doc block lists it
    style: str  # "A" | "A0" | "B" | "C"
    spec: str  # the raw type spec ("" if none)
    body: str  # the prose (one line)
    alternatives: list[Alternative] = field(default_factory=list)
    read_only: bool = False
    notes: list[str] = field(default_factory=list)


_SECTION_RE = re.compile(r"^(Supported attributes\b.*:|Attributes:)\s*$")
_A_ENTRY_RE = re.compile(r"^- (CUDNN_ATTR_\w+)\s*(?:\((.*)\))?\s*$")
_B_NAME_RE = re.compile(r"^(\s+)(CUDNN_ATTR_\w+)\s*$")
_C_ENTRY_RE = re.compile(r"^\s*- (CUDNN_ATTR_\w+)\s+\((\d+)\)\s*$")
_TYPE_TOKEN_RE = re.compile(r"CUDNN_TYPE_\w+")
_KIND_RE = re.compile(r"CUDNN_BACKEND_[A-Z0-9_*]+_DESCRIPTOR")
_READ_ONLY_RE = re.compile(r"\b(Read-only attribute|Get-only attribute)\b")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _join_bullets(lines: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split an entry body into (prose lines, bullets). A bullet ``- text`` absorbs the following lines that are more
    indented than its dash and are not bullets themselves."""
    prose: list[str] = []
    bullets: list[str] = []
    cur: list | None = None  # [indent, text]
    for ln in lines:
        if not ln.strip():
            cur = None
            continue
        s = ln.strip()
        if s.startswith("- "):
            cur = [_indent(ln), s[2:].strip()]
            bullets.append(cur)  # type: ignore[arg-type]
        elif cur is not None and _indent(ln) > cur[0]:
            cur[1] += " " + s
        else:
            cur = None
            prose.append(s)
    return prose, [b[1] for b in bullets]  # type: ignore[index]


class DocParser:
    """Parses the descriptor doc blocks into DocEntry objects."""

    def __init__(self, hs: HeaderSet, overrides: dict) -> None:
        self.hs = hs
        self.attr_enum: Enum = hs.enums[ATTR_NAME_ENUM]
        self.attr_values = {m.name: m.value for m in self.attr_enum.members}
        self.type_names = [m.name for m in hs.enums[ATTR_TYPE_ENUM].members]
        self.desc_names = [m.name for m in hs.enums[DESC_TYPE_ENUM].members]
        self.type_fixes: dict[str, dict] = overrides.get("type_names", {})
        self.name_fixes: dict[str, dict] = overrides.get("doc_names", {})
        self.count_macros: dict[str, dict] = overrides.get("count_macros", {})
        self.used_type_fixes: set = set()
        self.used_name_fixes: set = set()
        self.used_count_macros: set = set()
        self.dropped: dict[str, str] = {}  # doc name -> reason (names that map to no attribute)
        self.irregularities: list[str] = []

    # ---- name / type repair ----------------------------------------------------------------------------------------
    def resolve_name(self, doc_name: str, owner: str) -> str | None:
        if doc_name in self.attr_values:
            return doc_name
        fix = self.name_fixes.get(doc_name)
        if fix is None:
            hint = suggest_name(doc_name, self.attr_values)
            raise SchemaError(
                f"{owner}: the docs name {doc_name}, which is not a member of {ATTR_NAME_ENUM}"
                + (f" (near-typo of {hint}?)" if hint else "")
                + "; add it to overrides.json \"doc_names\" with maps_to (or null) and a reason")
        self.used_name_fixes.add(doc_name)
        target = fix.get("maps_to")
        if target is None:
            self.dropped[doc_name] = fix["reason"]
            return None
        if target not in self.attr_values:
            raise SchemaError(f"overrides.json doc_names[{doc_name!r}] maps to unknown attribute {target}")
        self.irregularities.append(f"{owner}: doc name {doc_name} read as {target} ({fix['reason']})")
        return target

    def resolve_type(self, doc_type: str, where: str) -> str:
        if doc_type in self.type_names:
            return doc_type
        fix = self.type_fixes.get(doc_type)
        if fix is None:
            raise SchemaError(f"{where}: type {doc_type} is not a member of {ATTR_TYPE_ENUM}; "
                              f"add it to overrides.json \"type_names\" if it is a doc typo")
        target = fix.get("maps_to")
        if target not in self.type_names:
            raise SchemaError(f"overrides.json type_names[{doc_type!r}] maps to {target!r}, "
                              f"which is not a member of {ATTR_TYPE_ENUM}")
        self.used_type_fixes.add(doc_type)
        self.irregularities.append(f"{where}: type {doc_type} read as {target} ({fix['reason']})")
        return target

    def expand_kinds(self, text: str, where: str) -> tuple[str, ...]:
        kinds: list[str] = []
        for k in _KIND_RE.findall(text):
            if "*" in k:
                pat = re.compile("^" + re.escape(k).replace(r"\*", r"[A-Z0-9_]+") + "$")
                matched = [d for d in self.desc_names if pat.match(d)]
                if not matched:
                    raise SchemaError(f"{where}: descriptor wildcard {k} matches nothing")
                kinds.extend(matched)
            elif k in self.desc_names:
                kinds.append(k)
            else:
                raise SchemaError(f"{where}: {k} is not a member of {DESC_TYPE_ENUM}")
        out: list[str] = []
        for k in kinds:
            if k not in out:
                out.append(k)
        return tuple(out)

    # ---- counts ----------------------------------------------------------------------------------------------------
    def macro_value(self, name: str, where: str) -> int:
        if name in self.hs.defines:
            return self.hs.defines[name]
        alias = self.count_macros.get(name)
        if alias is None or alias.get("define") not in self.hs.defines:
            raise SchemaError(f"{where}: count uses {name}, which the headers do not define; "
                              f"add it to overrides.json \"count_macros\"")
        self.used_count_macros.add(name)
        return self.hs.defines[alias["define"]]

    def parse_count(self, text: str, where: str) -> tuple[int | None, int | None]:
        """Normalize the count wording to (min, max); (None, None) when there is no count."""
        t = " ".join(text.split())
        t = re.sub(r"\s+of\s+(descriptor\s+)?(type\s+)?CUDNN_BACKEND_\S+", "", t).strip().rstrip(".")
        if not t:
            return None, None
        m = re.fullmatch(r"(1|one) elements?", t)
        if m:
            return 1, 1
        if re.fullmatch(r"0\+ elements?", t):
            return 0, None
        if re.fullmatch(r"(1\+|one or more) elements?", t):
            return 1, None
        if re.fullmatch(r"(many|elementCount) elements?", t):
            return 1, None
        m = re.fullmatch(r"(\d+)\.\.(\w+) elements?", t)
        if m:
            return int(m.group(1)), self._count_term(m.group(2), where)
        m = re.fullmatch(r"at most (\w+)(?:\s*-\s*(\d+))?(?: elements?)?", t)
        if m:
            hi = self._count_term(m.group(1), where) - int(m.group(2) or 0)
            return 1, hi
        raise SchemaError(f"{where}: cannot read the element count {text!r}")

    def _count_term(self, term: str, where: str) -> int:
        return int(term) if term.isdigit() else self.macro_value(term, where)

    # ---- spec ------------------------------------------------------------------------------------------------------
    def parse_spec(self, spec: str, where: str) -> list[Alternative]:
        """``TYPE[/TYPE| or TYPE][, count]`` (style A) or ``TYPE; count[ of ...][ or TYPE; count ...]`` (style B)."""
        spec = " ".join(spec.split()).rstrip(".")
        pieces = re.split(r"\s*(?:/|\bor\b)\s*(?=CUDNN_TYPE_)", spec)
        raw: list[tuple[str, str]] = []
        for piece in pieces:
            m = re.match(r"(CUDNN_TYPE_\w+)\s*[;,]?\s*(.*)$", piece)
            if not m:
                raise SchemaError(f"{where}: cannot read the type spec {spec!r}")
            raw.append((m.group(1), m.group(2).strip()))
        # a type without its own count shares the next one's ("DOUBLE/FLOAT, 1 element")
        alts: list[Alternative] = []
        for i, (tname, count_text) in enumerate(raw):
            if not count_text:
                count_text = next((c for _, c in raw[i + 1:] if c), "")
            lo, hi = self.parse_count(count_text, where)
            alts.append(Alternative(self.resolve_type(tname, where), count_text, lo, hi,
                                    self.expand_kinds(count_text, where)))
        return alts

    # ---- descriptor blocks -----------------------------------------------------------------------------------------
    def parse_all(self) -> dict[str, DocEntry]:
        entries: dict[str, DocEntry] = {}
        for m in self.hs.enums[DESC_TYPE_ENUM].members:
            for e in self.parse_block(m.name, m.leading_doc):
                if e.name in entries:
                    raise SchemaError(f"{e.name} is documented under both {entries[e.name].owner} and {e.owner}")
                entries[e.name] = e
        unused = set(self.name_fixes) - self.used_name_fixes
        if unused:
            raise SchemaError(f"overrides.json doc_names lists names the docs no longer use: {sorted(unused)}")
        unused = set(self.type_fixes) - self.used_type_fixes
        if unused:
            raise SchemaError(f"overrides.json type_names lists types the docs no longer use: {sorted(unused)}")
        return entries

    def parse_block(self, owner: str, doc: str) -> list[DocEntry]:
        lines = doc.split("\n")
        start = next((i for i, ln in enumerate(lines) if _SECTION_RE.match(ln)), None)
        if start is None:
            # style C: names (with their enum values) listed in a NOTE
            out = []
            for ln in lines:
                m = _C_ENTRY_RE.match(ln)
                if m:
                    name = self.resolve_name(m.group(1), owner)
                    if name is None:
                        continue
                    if self.attr_values[name] != int(m.group(2)):
                        raise SchemaError(f"{owner}: NOTE lists {name} as ({m.group(2)}), "
                                          f"the enum says {self.attr_values[name]}")
                    out.append(DocEntry(m.group(1), name, owner, "C", "", ""))
            return out
        end = len(lines)
        for i in range(start + 1, len(lines)):
            ln = lines[i]
            if ln.strip() and _indent(ln) == 0 and not _A_ENTRY_RE.match(ln):
                end = i
                break
        section = lines[start + 1:end]
        # group into entries: a style-A bullet line, or a run of consecutive style-B name lines, starts an entry
        groups: list[tuple[str, list[str], str, list[str]]] = []  # (style, names, spec, body lines)
        i = 0
        while i < len(section):
            ln = section[i]
            ma = _A_ENTRY_RE.match(ln)
            mb = _B_NAME_RE.match(ln)
            if ma:
                groups.append(("A" if ma.group(2) is not None else "A0", [ma.group(1)], ma.group(2) or "", []))
            elif mb and (not groups or groups[-1][0] != "B" or groups[-1][3] or _indent(ln) <= 2):
                names = [mb.group(2)]
                while i + 1 < len(section) and _B_NAME_RE.match(section[i + 1]):
                    i += 1
                    names.append(_B_NAME_RE.match(section[i]).group(2))
                groups.append(("B", names, "", []))
            elif groups:
                groups[-1][3].append(ln)
            elif ln.strip():
                raise SchemaError(f"{owner}: unexpected text before the first attribute: {ln.strip()!r}")
            i += 1
        out: list[DocEntry] = []
        for style, names, spec, body_lines in groups:
            where = f"{owner} / {names[0]}"
            if style == "B":
                prose, bullets = _join_bullets(body_lines)
                type_bullets = [b for b in bullets if b.startswith("CUDNN_TYPE_")]
                if len(type_bullets) > 1:
                    raise SchemaError(f"{where}: several type bullets {type_bullets}")
                spec = type_bullets[0] if type_bullets else ""
                other = [b for b in bullets if not b.startswith("CUDNN_TYPE_")]
                body = " ".join(prose + other)
            else:
                body = " ".join(s.strip() for s in body_lines if s.strip())
            alts = self.parse_spec(spec, where) if spec else []
            notes: list[str] = []
            if style == "A0":
                # the only typed A0 entry names its type in the prose ("Sets the CUDNN_TYPE_GENSTATS_MODE of ...")
                m = re.match(r"Sets the (CUDNN_TYPE_\w+) of\b", body)
                if m:
                    alts = [Alternative(self.resolve_type(m.group(1), where), "", None, None, ())]
                    notes.append("type read from the prose")
            for a in alts:
                if a.type == BACKEND_DESCRIPTOR and not a.kinds:
                    # "Descriptor type CUDNN_BACKEND_X." or "(CUDNN_BACKEND_X) instance" in the prose
                    m = re.search(r"Descriptor type\s+(CUDNN_BACKEND_\w+_DESCRIPTOR)", body) or \
                        re.search(r"\((CUDNN_BACKEND_\w+_DESCRIPTOR)\) instance", body)
                    if m:
                        a.kinds = self.expand_kinds(m.group(1), where)
                        notes.append("descriptor kind read from the prose")
            read_only = bool(_READ_ONLY_RE.search(body))
            for doc_name in names:
                name = self.resolve_name(doc_name, owner)
                if name is None:
                    continue
                out.append(DocEntry(doc_name, name, owner, style, spec, body,
                                    [Alternative(a.type, a.count_text, a.min_count, a.max_count, a.kinds)
                                     for a in alts], read_only, list(notes)))
        return out


def suggest_name(doc_name: str, known: dict[str, int]) -> str | None:
    """A near-typo match: one token added/removed, or one token replaced by a token within edit distance 2."""
    toks = doc_name.split("_")
    cands = []
    for k in known:
        kt = k.split("_")
        if len(kt) == len(toks) + 1 and any(kt[:i] + kt[i + 1:] == toks for i in range(len(kt))):
            cands.append(k)
        elif len(kt) + 1 == len(toks) and any(toks[:i] + toks[i + 1:] == kt for i in range(len(toks))):
            cands.append(k)
        elif len(kt) == len(toks):
            diff = [(a, b) for a, b in zip(toks, kt) if a != b]
            if len(diff) == 1 and _edit_distance(*diff[0]) <= 2:
                cands.append(k)
    return cands[0] if len(cands) == 1 else None


def _edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


# --------------------------------------------------------------------------------------------------------------------
# Owner inference
# --------------------------------------------------------------------------------------------------------------------

def _owner_keys(desc: str) -> list[list[str]]:
    key = desc[len("CUDNN_BACKEND_"):-len("_DESCRIPTOR")]
    variants = {key, key.replace("FORWARD", "FWD").replace("BACKWARD", "BWD"), key.replace("GEN_STATS", "GENSTATS")}
    return [v.split("_") for v in sorted(variants)]


def infer_owner(attr: str, descriptors: Sequence[str]) -> str:
    """Owner by name prefix: the longest descriptor key that is a whole-token prefix of the attribute name, else the
    descriptor sharing the longest whole-token prefix (at least two tokens)."""
    toks = attr[len("CUDNN_ATTR_"):].split("_")
    best, best_len = None, 0
    for d in descriptors:
        for kt in _owner_keys(d):
            if toks[:len(kt)] == kt and len(kt) < len(toks) and len(kt) > best_len:
                best, best_len = d, len(kt)
    if best:
        return best
    best, best_len, tie = None, 1, False
    for d in descriptors:
        for kt in _owner_keys(d):
            n = 0
            while n < min(len(kt), len(toks)) and kt[n] == toks[n]:
                n += 1
            if n > best_len:
                best, best_len, tie = d, n, False
            elif n == best_len and best is not None and d != best:
                tie = True
    if best is None or tie:
        raise SchemaError(f"cannot infer the owner descriptor of {attr}")
    return best


# --------------------------------------------------------------------------------------------------------------------
# The merged catalog
# --------------------------------------------------------------------------------------------------------------------

@dataclass
class Attr:
    name: str
    value: int
    owner: str
    types: tuple[str, ...]
    min_count: int
    max_count: int | None
    element_kinds: tuple[str, ...]
    get_type: str | None
    readable: bool
    settable: bool
    since: int
    deprecated: bool
    source: str


@dataclass
class Catalog:
    total: int
    attributes: dict[str, Attr] = field(default_factory=dict)
    untyped: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, list[str]] = field(default_factory=dict)  # attr -> notes on how each field was decided
    irregularities: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    doc_entries: dict[str, DocEntry] = field(default_factory=dict)

    def source_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.attributes.values():
            out[a.source] = out.get(a.source, 0) + 1
        return out

    def report(self) -> str:
        lines = [f"attributes typed: {len(self.attributes)}/{self.total}  sources: {self.source_counts()}"]
        docs_typed = sum(1 for e in self.doc_entries.values() if e.alternatives)
        lines.append(f"documented: {len(self.doc_entries)} entries, {docs_typed} with a type")
        for name, reason in self.untyped.items():
            lines.append(f"  UNTYPED {name}: {reason}")
        for d in self.disagreements:
            lines.append(f"  DISAGREE {d}")
        for i in self.irregularities:
            lines.append(f"  NOTE {i}")
        return "\n".join(lines)


_OVERRIDE_FIELDS = {"owner", "types", "min_count", "max_count", "element_kinds", "get_type", "readable", "settable",
                    "reason", "untyped"}


def _type_order(types: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for t in types:
        if t not in out:
            out.append(t)
    return tuple(out)


def build_catalog(hs: HeaderSet, probe: dict, overrides: dict) -> Catalog:
    attr_enum = hs.enums[ATTR_NAME_ENUM]
    type_names = [m.name for m in hs.enums[ATTR_TYPE_ENUM].members]
    desc_names = [m.name for m in hs.enums[DESC_TYPE_ENUM].members]
    parser = DocParser(hs, overrides)
    entries = parser.parse_all()
    unused_macros = set(parser.count_macros) - parser.used_count_macros
    if unused_macros:
        raise SchemaError(f"overrides.json count_macros lists macros the docs no longer use: {sorted(unused_macros)}")
    cat = Catalog(total=len(attr_enum.members), doc_entries=entries)
    cat.irregularities.extend(parser.irregularities)
    for doc_name, reason in sorted(parser.dropped.items()):
        cat.irregularities.append(f"doc name {doc_name} ignored: {reason}")

    attr_over: dict[str, dict] = overrides.get("attributes", {})
    for name, ov in attr_over.items():
        if name not in {m.name for m in attr_enum.members}:
            raise SchemaError(f"overrides.json attributes: {name} is not a member of {ATTR_NAME_ENUM}")
        bad = set(ov) - _OVERRIDE_FIELDS
        if bad:
            raise SchemaError(f"overrides.json attributes[{name}]: unknown fields {sorted(bad)}")
        if not ov.get("reason"):
            raise SchemaError(f"overrides.json attributes[{name}]: missing \"reason\"")
        for t in list(ov.get("types", [])) + ([ov["get_type"]] if ov.get("get_type") else []):
            if t not in type_names:
                raise SchemaError(f"overrides.json attributes[{name}]: {t} is not a member of {ATTR_TYPE_ENUM}")
        for k in list(ov.get("element_kinds", [])) + ([ov["owner"]] if ov.get("owner") else []):
            if k not in desc_names:
                raise SchemaError(f"overrides.json attributes[{name}]: {k} is not a member of {DESC_TYPE_ENUM}")

    probe_attrs: dict[str, dict] = probe.get("attributes", {}) if probe else {}
    for name in probe_attrs:
        if name not in {m.name for m in attr_enum.members}:
            cat.irregularities.append(f"probe_results.json has {name}, which these headers do not define")

    for m in attr_enum.members:
        name = m.name
        prov: list[str] = []
        entry = entries.get(name)
        ov = attr_over.get(name, {})
        pr = probe_attrs.get(name)
        since = m.since if m.since is not None else attr_enum.effective_since()
        deprecated = m.deprecated or attr_enum.deprecated

        # ---- owner
        inferred = infer_owner(name, desc_names)
        if entry is not None:
            owner = entry.owner
            if inferred != owner:
                cat.irregularities.append(f"{name}: documented under {owner}, the name suggests {inferred}")
        else:
            owner = inferred
            prov.append("owner inferred from the name")
        if ov.get("owner"):
            owner = ov["owner"]
            prov.append("owner from overrides")

        # ---- header layer
        types: list[str] = []
        lo: int | None = None
        hi: int | None = None
        kinds: list[str] = []
        settable = True
        source = None
        if entry is not None:
            counted = [a for a in entry.alternatives if a.min_count is not None]
            for a in entry.alternatives:
                types.append(a.type)
                kinds.extend(k for k in a.kinds if k not in kinds)
            if counted:
                lo = min(a.min_count for a in counted)
                hi = None if any(a.max_count is None for a in counted) else max(a.max_count for a in counted)
            if entry.read_only:
                settable = False
            if types:
                source = "header"
                prov.append(f"types from the docs (style {entry.style})")

        # ---- probe layer
        if pr is not None:
            accepted = [t for t in pr.get("accepted", []) if t in type_names]
            named = [t for t in pr.get("named", []) if t in type_names]
            no_check = bool(pr.get("no_type_check"))
            if types:
                if no_check:
                    prov.append("probe: the library does no type check on Set")
                else:
                    lib_types = accepted or named
                    if lib_types and types[0] not in lib_types and not pr.get("not_settable"):
                        cat.disagreements.append(f"{name}: docs say {types}, the library accepts {lib_types}")
                    extra = [t for t in accepted if t not in types]
                    if extra:
                        prov.append(f"probe: the library also accepts {extra}")
                        types.extend(extra)
            elif not no_check and (accepted or named):
                first = [t for t in named if t in accepted] or named or accepted
                types = list(_type_order(list(first) + accepted))
                source = "probe"
                prov.append(f"types from the probe ({pr.get('method')})")
            c = pr.get("count") or {}
            if lo is None and c.get("min") is not None:
                lo, hi = c.get("min"), c.get("max")
                prov.append(f"count from the probe ({c.get('note', '')})")
            elif lo is not None and c.get("max") == 1 and hi != 1:
                # the library rejects 2 elements with "1 != elemCount": it is a scalar whatever the docs say
                cat.disagreements.append(f"{name}: docs say {lo}..{hi} elements, the library takes exactly 1 "
                                         f"(the library wins)")
                lo, hi = 1, 1
                prov.append("count: the library rejects 2 elements ('1 != elemCount')")
            if pr.get("kind_required") and pr["kind_required"] not in kinds:
                if kinds:
                    cat.disagreements.append(f"{name}: docs say kinds {kinds}, the library demands "
                                             f"{pr['kind_required']} (the library wins)")
                kinds = [pr["kind_required"]]
                prov.append("descriptor kind from the library's error message")
            if pr.get("not_settable") and settable:
                settable = False
                prov.append("probe: Set returns NOT_SUPPORTED for every type (not settable)")

        # ---- override layer
        if "types" in ov:
            if list(ov["types"]) != types:
                source = "override"
            types = list(ov["types"])
        if "min_count" in ov:
            lo = ov["min_count"]
        if "max_count" in ov:
            hi = ov["max_count"]
        if "element_kinds" in ov:
            kinds = list(ov["element_kinds"])
        if "settable" in ov:
            settable = ov["settable"]
        readable = ov.get("readable", True)
        get_type = ov.get("get_type")
        if ov:
            prov.append(f"override: {ov['reason']}")

        if ov.get("untyped"):
            cat.untyped[name] = ov["reason"]
            cat.provenance[name] = prov
            continue
        if not types:
            cat.untyped[name] = _untyped_reason(entry, pr, m.doc)
            cat.provenance[name] = prov
            continue
        for t in types:
            if t not in type_names:
                raise SchemaError(f"{name}: type {t} is not a member of {ATTR_TYPE_ENUM}")
        if BACKEND_DESCRIPTOR in types and not kinds:
            raise SchemaError(f"{name}: takes CUDNN_TYPE_BACKEND_DESCRIPTOR but no descriptor kind is known; "
                              f"add element_kinds to overrides.json")
        if BACKEND_DESCRIPTOR not in types:
            kinds = []
        if lo is None:
            lo, hi = 1, 1
            prov.append("count: none documented or probed, assumed scalar (1 element)")
        if get_type == types[0]:
            get_type = None
        cat.attributes[name] = Attr(name, m.value, owner, tuple(types), lo, hi, tuple(kinds), get_type, readable,
                                    settable, since, deprecated, source or "override")
        cat.provenance[name] = prov
    return cat


def _untyped_reason(entry: DocEntry | None, pr: dict | None, enum_doc: str) -> str:
    import header_parser

    comment = header_parser._SINCE_RE.sub("", header_parser.one_line(enum_doc)).strip()
    parts = []
    if entry is None:
        parts.append("not documented under any descriptor")
    else:
        parts.append(f"documented without a type (style {entry.style}: {entry.body[:80]!r})")
    if comment:
        parts.append(f"enum comment {comment!r}")
    if pr is None:
        parts.append("not probed")
    elif "cudnnBackendCreateDescriptor" in (pr.get("error") or ""):
        parts.append("the owner descriptor cannot be created by user code "
                     f"({pr['error'].split(' -> ')[-1].split(' ')[0]} from cudnnBackendCreateDescriptor), so it cannot be probed")
    elif pr.get("not_settable"):
        parts.append("the library returns NOT_SUPPORTED for every type at Set, so the probe cannot tell the type")
    else:
        parts.append(f"probe: {pr.get('method', 'no result')}")
        if pr.get("error"):
            parts.append(f"last error {pr['error']!r}")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------------------------------
# Helpers shared with probe_types.py
# --------------------------------------------------------------------------------------------------------------------

def attribute_owners(hs: HeaderSet, overrides: dict) -> dict[str, tuple[str, str]]:
    """attr -> (owner, how): "doc" (listed in that descriptor's docs), "inferred" (name prefix) or "override"."""
    entries = DocParser(hs, overrides).parse_all()
    desc_names = [m.name for m in hs.enums[DESC_TYPE_ENUM].members]
    attr_over = overrides.get("attributes", {})
    out: dict[str, tuple[str, str]] = {}
    for m in hs.enums[ATTR_NAME_ENUM].members:
        if attr_over.get(m.name, {}).get("owner"):
            out[m.name] = (attr_over[m.name]["owner"], "override")
        elif m.name in entries:
            out[m.name] = (entries[m.name].owner, "doc")
        else:
            out[m.name] = (infer_owner(m.name, desc_names), "inferred")
    return out


def type_c_names(hs: HeaderSet) -> dict[str, str]:
    """CUDNN_TYPE_* -> the C type named in its header comment ("cudnnDataType_t value." -> "cudnnDataType_t");
    "" when the comment names no typedef (BOOLEAN, INT64, FLOAT, DOUBLE, VOID_PTR, INT32, CHAR)."""
    out: dict[str, str] = {}
    for m in hs.enums[ATTR_TYPE_ENUM].members:
        mm = re.match(r"\s*(cudnn\w+_t) value\b", m.doc)
        out[m.name] = mm.group(1) if mm else ""
    return out


def documented_kinds(hs: HeaderSet, overrides: dict) -> dict[str, list[str]]:
    """attr -> the descriptor kinds the docs (or overrides.json) give for its BACKEND_DESCRIPTOR value."""
    entries = DocParser(hs, overrides).parse_all()
    out: dict[str, list[str]] = {}
    for name, e in entries.items():
        kinds = [k for a in e.alternatives for k in a.kinds]
        if kinds:
            out[name] = kinds
    for name, ov in overrides.get("attributes", {}).items():
        if ov.get("element_kinds"):
            out[name] = list(ov["element_kinds"])
    return out
