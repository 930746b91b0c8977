"""Hand-written lexer/parser for the cuDNN C headers (no libclang).

It extracts what the bindings need and nothing more:

* ``#define NAME <integer expression>`` constants (function-like macros, floats and empty macros are skipped);
* ``typedef enum { ... } Name;`` enums with each member's value (literal, expression, or implicit), its doc comments
  (trailing ``/**< ... */`` and leading ``/** ... */``), ``@since`` and deprecation;
* typedefs (opaque handle pointers, ``void *`` aliases, function pointers, structs) so parameter types can be mapped;
* function prototypes with their leading doc comment, ``@since`` and deprecation.

The input is the set of headers reachable from ``cudnn.h`` through ``#include "..."``, in include order.
Preprocessor conditionals are ignored: the cuDNN headers only use them for include guards, the version ``#error``
check, and the ``CUDNNWINAPI`` / ``CUDNN_DEPRECATED`` attribute macros, which the parser knows about.

Everything that does not fit the expected shapes raises ``HeaderParseError`` naming the file and line.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "HeaderParseError",
    "Token",
    "EnumMember",
    "Enum",
    "Param",
    "Function",
    "Typedef",
    "HeaderSet",
    "parse_headers",
    "parse_since",
    "header_files",
]

# Macros that expand to nothing (or to a calling convention / attribute) in a Linux build.
ATTRIBUTE_MACROS = {"CUDNNWINAPI", "CUDNN_DEPRECATED", "CUDNN_DEPRECATED_ENUM"}

_SINCE_RE = re.compile(r"@since\s+cuDNN\s+(\d+)\.(\d+)(?:\.(\d+))?")


class HeaderParseError(Exception):
    """A construct in a header that the parser does not understand."""


def parse_since(text: str | None) -> int | None:
    """``"... @since cuDNN 9.23.0 ..."`` -> 92300 (first tag), or None."""
    if not text:
        return None
    m = _SINCE_RE.search(text)
    if not m:
        return None
    return int(m.group(1)) * 10000 + int(m.group(2)) * 100 + int(m.group(3) or 0)


def _has_deprecated_tag(text: str | None) -> bool:
    return bool(text) and "@deprecated" in text


# --------------------------------------------------------------------------------------------------------------------
# Lexer
# --------------------------------------------------------------------------------------------------------------------

@dataclass
class Token:
    kind: str  # "id", "num", "punct", "str", "doc" (/** */), "tdoc" (/**< */), "comment", "pp"
    text: str
    file: str
    line: int

    def where(self) -> str:
        return f"{self.file}:{self.line}"


_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r\f\v]+)
  | (?P<nl>\n)
  | (?P<tdoc>/\*\*<.*?\*/)
  | (?P<doc>/\*\*(?!/).*?\*/)
  | (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<str>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
  | (?P<num>(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)[uUlLfF]*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<punct><<|>>|->|&&|\|\||==|!=|<=|>=|\.\.\.|[{}()\[\];,=*&|^~!<>+\-/%?:.\#])
    """,
    re.S | re.X,
)


def tokenize(text: str, filename: str) -> list[Token]:
    """Tokenize a header. Each preprocessor directive becomes one ``pp`` token (continuation lines joined)."""
    tokens: list[Token] = []
    pos = 0
    line = 1
    at_line_start = True
    n = len(text)
    while pos < n:
        if at_line_start:
            m = re.match(r"[ \t]*#", text[pos:pos + 200])
            if m:
                # Directive: runs to the end of line, honouring backslash continuations. Comments inside are kept
                # in the text (they are stripped when the directive is interpreted).
                end = pos
                start_line = line
                while True:
                    nl = text.find("\n", end)
                    if nl == -1:
                        nl = n
                    # a block comment that starts on this line may span lines
                    seg = text[end:nl]
                    open_c = seg.rfind("/*")
                    if open_c != -1 and seg.find("*/", open_c) == -1:
                        close = text.find("*/", end + open_c)
                        if close == -1:
                            raise HeaderParseError(f"{filename}:{line}: unterminated comment in directive")
                        line += text.count("\n", nl, close)
                        nl = text.find("\n", close)
                        if nl == -1:
                            nl = n
                    if text[end:nl].rstrip().endswith("\\") and nl < n:
                        end = nl + 1
                        line += 1
                        continue
                    break
                tokens.append(Token("pp", text[pos:nl], filename, start_line))
                pos = nl
                continue
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise HeaderParseError(f"{filename}:{line}: cannot tokenize {text[pos:pos + 40]!r}")
        kind = m.lastgroup
        tok_text = m.group(kind)
        if kind == "nl":
            line += 1
            at_line_start = True
        elif kind == "ws":
            pass
        else:
            tokens.append(Token(kind, tok_text, filename, line))
            line += tok_text.count("\n")
            at_line_start = False
        pos = m.end()
    return tokens


def clean_doc(text: str) -> str:
    """Strip the comment markers and leading ``*`` columns of a doc comment; keep line structure and indentation."""
    body = text
    for prefix in ("/**<", "/**", "/*"):
        if body.startswith(prefix):
            body = body[len(prefix):]
            break
    if body.endswith("*/"):
        body = body[:-2]
    lines = body.split("\n")
    out = []
    for ln in lines:
        s = ln.rstrip()
        m = re.match(r"^\s*\*(?!/)\s?", s)
        if m:
            s = s[m.end():]
        out.append(s)
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def one_line(text: str | None) -> str:
    """Collapse a doc text onto one line."""
    return " ".join((text or "").split())


# --------------------------------------------------------------------------------------------------------------------
# Integer constant expressions
# --------------------------------------------------------------------------------------------------------------------

_ALLOWED_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: int(a / b),  # C truncating division
    ast.Mod: lambda a, b: a - int(a / b) * b,
    ast.LShift: lambda a, b: a << b,
    ast.RShift: lambda a, b: a >> b,
    ast.BitOr: lambda a, b: a | b,
    ast.BitAnd: lambda a, b: a & b,
    ast.BitXor: lambda a, b: a ^ b,
}


class NotAnInteger(Exception):
    pass


def eval_int_expr(tokens: list[Token], names: dict[str, int]) -> int:
    """Evaluate a C integer constant expression given as tokens; names resolve through ``names``.

    Casts of the form ``(typename)`` are dropped. Raises NotAnInteger for anything else (floats, strings, unknown
    names, function-like forms)."""
    parts: list[str] = []
    toks = [t for t in tokens if t.kind not in ("comment", "doc", "tdoc")]
    i = 0
    while i < len(toks):
        t = toks[i]
        # drop a cast like (cudnnStatus_t) or (int)
        if t.text == "(" and i + 2 < len(toks) and toks[i + 1].kind == "id" and toks[i + 2].text == ")" \
                and toks[i + 1].text not in names and i + 3 < len(toks) and toks[i + 3].text not in (")", "+", "-", "*"):
            i += 3
            continue
        if t.kind == "num":
            lit = t.text.rstrip("uUlL")
            if re.fullmatch(r"0[xX][0-9a-fA-F]+", lit):
                parts.append(str(int(lit, 16)))
            elif re.fullmatch(r"0[0-7]+", lit):
                parts.append(str(int(lit, 8)))
            elif re.fullmatch(r"\d+", lit):
                parts.append(lit)
            else:
                raise NotAnInteger(t.text)
        elif t.kind == "id":
            if t.text not in names:
                raise NotAnInteger(t.text)
            parts.append(f"({names[t.text]})")
        elif t.kind == "punct" and t.text in ("(", ")", "+", "-", "*", "/", "%", "<<", ">>", "|", "&", "^", "~"):
            parts.append("//" if t.text == "/" else t.text)
        else:
            raise NotAnInteger(t.text)
        i += 1
    if not parts:
        raise NotAnInteger("empty")
    try:
        tree = ast.parse(" ".join(parts), mode="eval")
    except SyntaxError as exc:
        raise NotAnInteger(str(exc)) from None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            if isinstance(node.op, ast.USub):
                return -v
            if isinstance(node.op, ast.UAdd):
                return v
            if isinstance(node.op, ast.Invert):
                return ~v
        if isinstance(node, ast.BinOp) and type(node.op) in _ALLOWED_BINOPS:
            return _ALLOWED_BINOPS[type(node.op)](ev(node.left), ev(node.right))
        raise NotAnInteger(ast.dump(node))

    return ev(tree)


# --------------------------------------------------------------------------------------------------------------------
# Parsed entities
# --------------------------------------------------------------------------------------------------------------------

@dataclass
class EnumMember:
    name: str
    value: int
    value_kind: str  # "literal" | "expression" | "implicit"
    doc: str  # trailing /**< */ doc (cleaned), "" if none
    leading_doc: str  # leading /** */ doc block (cleaned), "" if none
    since: int | None  # own @since (None if the member has none)
    deprecated: bool  # CUDNN_DEPRECATED_ENUM or @deprecated in its own docs
    line: int


@dataclass
class Enum:
    name: str
    file: str
    line: int
    doc: str
    since: int | None
    deprecated: bool  # CUDNN_DEPRECATED after the typedef name, or @deprecated in the enum doc
    members: list[EnumMember] = field(default_factory=list)

    def effective_since(self) -> int:
        """The enum's own @since, else its first member's, else 90000."""
        if self.since is not None:
            return self.since
        for m in self.members:
            if m.since is not None:
                return m.since
        return 90000


@dataclass
class Param:
    name: str
    base: str  # the type name without qualifiers/pointers, e.g. "int64_t", "cudnnHandle_t", "void"
    pointer_depth: int  # number of '*' (and [] arrays)
    is_const: bool
    c_decl: str  # the declaration as written (normalized whitespace)


@dataclass
class Function:
    name: str
    file: str
    line: int
    doc: str
    ret: Param
    params: list[Param]
    since: int | None
    deprecated: bool


@dataclass
class Typedef:
    name: str
    kind: str  # "opaque_ptr" (struct X *), "void_ptr", "func_ptr", "struct" (struct body), "opaque_struct" (struct X X)
    file: str
    line: int
    fields: list[tuple[str, str]] = field(default_factory=list)  # for "struct": (type text, field name)


@dataclass
class HeaderSet:
    include_dir: Path
    files: list[str]  # header file names in include order
    file_since: dict[str, int | None]
    defines: dict[str, int]  # integer-valued object-like macros, in header order
    skipped_defines: dict[str, str]  # macro name -> why it is not an integer constant
    enums: dict[str, Enum]
    typedefs: dict[str, Typedef]
    functions: dict[str, Function]

    def enum_member_values(self) -> dict[str, int]:
        return {m.name: m.value for e in self.enums.values() for m in e.members}


# --------------------------------------------------------------------------------------------------------------------
# Header discovery
# --------------------------------------------------------------------------------------------------------------------

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def header_files(include_dir: Path, root: str = "cudnn.h") -> list[str]:
    """Headers reachable from ``root`` via ``#include "..."``, depth-first in include order (each once)."""
    seen: list[str] = []

    def visit(name: str) -> None:
        if name in seen:
            return
        path = include_dir / name
        if not path.is_file():
            raise HeaderParseError(f"{name}: included header not found in {include_dir}")
        seen.append(name)
        for ln in path.read_text(encoding="utf-8").splitlines():
            m = _INCLUDE_RE.match(ln)
            if m:
                visit(m.group(1))

    # cudnn.h itself only includes the others; keep the included headers first so that cudnn_version.h
    # (the defines every other header uses) is parsed before them.
    visit(root)
    return [f for f in seen if f != root] + [root]


# --------------------------------------------------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------------------------------------------------

class _Parser:
    def __init__(self) -> None:
        self.defines: dict[str, int] = {}
        self.skipped_defines: dict[str, str] = {}
        self.enums: dict[str, Enum] = {}
        self.typedefs: dict[str, Typedef] = {}
        self.functions: dict[str, Function] = {}
        self.names: dict[str, int] = {}  # enum members + integer defines, for expression evaluation
        self.file_since: dict[str, int | None] = {}

    # ---- driver ----------------------------------------------------------------------------------------------------
    def parse_file(self, name: str, text: str) -> None:
        tokens = tokenize(text, name)
        m = re.search(r"@file\s+\S+.*?\*/", text, re.S)
        self.file_since[name] = parse_since(m.group(0)) if m else None
        stmt: list[Token] = []
        pending_doc: Token | None = None  # last /** */ block seen at top level before the current statement
        depth = 0
        for tok in tokens:
            if tok.kind == "pp":
                if depth:
                    raise HeaderParseError(f"{tok.where()}: preprocessor directive inside braces is not supported")
                self._directive(tok)
                if not stmt:
                    pending_doc = None
                continue
            if depth == 0 and not stmt:
                if tok.kind == "doc":
                    pending_doc = tok
                    continue
                if tok.kind in ("comment", "tdoc"):
                    continue
                if tok.kind == "punct" and tok.text in ("}", ";"):
                    continue  # closing of extern "C" {, stray semicolons
                if tok.kind == "str":
                    continue  # extern "C"
            if tok.kind == "id" and tok.text == "extern" and depth == 0 and not stmt:
                continue
            if tok.kind == "punct" and tok.text == "{":
                depth += 1
            elif tok.kind == "punct" and tok.text == "}":
                depth -= 1
                if depth < 0:
                    raise HeaderParseError(f"{tok.where()}: unbalanced '}}'")
            if tok.kind == "punct" and tok.text == "{" and depth == 1 and not stmt:
                # `extern "C" {` : the opening brace of a linkage block has no statement before it
                depth = 0
                continue
            stmt.append(tok)
            if depth == 0 and tok.kind == "punct" and tok.text == ";":
                self._statement(stmt, pending_doc)
                stmt = []
                pending_doc = None
        if stmt and any(t.kind not in ("comment", "doc", "tdoc") for t in stmt):
            raise HeaderParseError(f"{stmt[0].where()}: unterminated declaration at end of file")

    # ---- preprocessor ----------------------------------------------------------------------------------------------
    def _directive(self, tok: Token) -> None:
        text = re.sub(r"\\\n", " ", tok.text)
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//.*", "", text)
        m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)(\(?)(.*)$", text, re.S)
        if not m:
            return
        name, paren, body = m.group(1), m.group(2), m.group(3).strip()
        if paren:
            self.skipped_defines[name] = "function-like macro"
            return
        if not body:
            self.skipped_defines.setdefault(name, "no value")
            return
        if name in ATTRIBUTE_MACROS:
            self.skipped_defines[name] = "attribute macro"
            return
        body_tokens = [t for t in tokenize(body, tok.file) if t.kind != "pp"]
        try:
            value = eval_int_expr(body_tokens, self.names)
        except NotAnInteger:
            self.skipped_defines[name] = f"not an integer constant: {body}"
            return
        if name in self.defines and self.defines[name] != value:
            raise HeaderParseError(f"{tok.where()}: {name} redefined with a different value")
        self.defines[name] = value
        self.names[name] = value

    # ---- statements ------------------------------------------------------------------------------------------------
    def _statement(self, stmt: list[Token], doc: Token | None) -> None:
        code = [t for t in stmt if t.kind not in ("comment", "doc", "tdoc")]
        if not code:
            return
        first = code[0]
        if first.text == "typedef":
            if len(code) > 1 and code[1].text == "enum":
                self._enum(stmt, doc)
            else:
                self._typedef(code, doc)
            return
        if first.text == "struct" and len(code) == 3 and code[2].text == ";":
            return  # forward declaration `struct cudnnContext;`
        if any(t.text == "(" for t in code):
            self._function(code, doc)
            return
        raise HeaderParseError(f"{first.where()}: unrecognized top-level declaration: "
                               f"{' '.join(t.text for t in code)[:120]}")

    def _typedef(self, code: list[Token], doc: Token | None) -> None:
        where = code[0].where()
        words = [t.text for t in code[1:-1] if t.text not in ATTRIBUTE_MACROS]
        line = code[0].line
        fname = code[0].file
        if words and words[0] == "struct":
            if "{" in words:
                close = len(words) - 1 - words[::-1].index("}")
                name = words[close + 1] if close + 1 < len(words) else None
                if not name:
                    raise HeaderParseError(f"{where}: struct typedef without a name")
                body = words[words.index("{") + 1:close]
                fields = []
                cur: list[str] = []
                for w in body:
                    if w == ";":
                        if cur:
                            fields.append((" ".join(cur[:-1]), cur[-1]))
                        cur = []
                    else:
                        cur.append(w)
                self.typedefs[name] = Typedef(name, "struct", fname, line, fields)
                return
            # typedef struct X *Name;  /  typedef struct X Name;
            if len(words) == 4 and words[2] == "*":
                self.typedefs[words[3]] = Typedef(words[3], "opaque_ptr", fname, line)
                return
            if len(words) == 3:
                self.typedefs[words[2]] = Typedef(words[2], "opaque_struct", fname, line)
                return
        if words[:2] == ["void", "*"] and len(words) == 3:
            self.typedefs[words[2]] = Typedef(words[2], "void_ptr", fname, line)
            return
        if len(words) > 4 and words[1:3] == ["(", "*"]:
            # typedef R (*Name)(args);
            self.typedefs[words[3]] = Typedef(words[3], "func_ptr", fname, line)
            return
        raise HeaderParseError(f"{where}: unrecognized typedef: {' '.join(words)[:120]}")

    # ---- enums -----------------------------------------------------------------------------------------------------
    def _enum(self, stmt: list[Token], doc: Token | None) -> None:
        start = stmt[0]
        try:
            lb = next(i for i, t in enumerate(stmt) if t.text == "{")
            rb = max(i for i, t in enumerate(stmt) if t.text == "}")
        except (StopIteration, ValueError):
            raise HeaderParseError(f"{start.where()}: enum typedef without a body") from None
        tail = [t for t in stmt[rb + 1:] if t.kind not in ("comment", "doc", "tdoc")]
        tail_words = [t.text for t in tail]
        if not tail_words or tail_words[-1] != ";":
            raise HeaderParseError(f"{start.where()}: malformed enum typedef tail {tail_words}")
        names = [w for w in tail_words[:-1] if w not in ATTRIBUTE_MACROS]
        if len(names) != 1:
            raise HeaderParseError(f"{start.where()}: cannot find the enum typedef name in {tail_words}")
        ename = names[0]
        enum_doc = clean_doc(doc.text) if doc else ""
        enum = Enum(
            name=ename,
            file=start.file,
            line=start.line,
            doc=enum_doc,
            since=parse_since(enum_doc),
            deprecated="CUDNN_DEPRECATED" in tail_words or _has_deprecated_tag(enum_doc),
        )
        # Split the body into members. Trailing docs attach to the member being built, or to the previous one
        # when the current one has no tokens yet (the usual `X = 1, /**< doc */`). Leading docs attach to the next.
        raw: list[dict] = []
        cur = {"tokens": [], "tdoc": [], "ldoc": None}
        pending_leading: Token | None = None
        for tok in stmt[lb + 1:rb]:
            if tok.kind == "comment":
                continue
            if tok.kind == "tdoc":
                if cur["tokens"]:
                    cur["tdoc"].append(tok)
                elif raw:
                    raw[-1]["tdoc"].append(tok)
                else:
                    raise HeaderParseError(f"{tok.where()}: trailing doc comment before the first enum member")
                continue
            if tok.kind == "doc":
                if cur["tokens"]:
                    raise HeaderParseError(f"{tok.where()}: leading doc comment inside an enum member")
                pending_leading = tok
                continue
            if tok.text == ",":
                if not cur["tokens"]:
                    raise HeaderParseError(f"{tok.where()}: empty enum member in {ename}")
                raw.append(cur)
                cur = {"tokens": [], "tdoc": [], "ldoc": None}
                continue
            if not cur["tokens"]:
                cur["ldoc"] = pending_leading
                pending_leading = None
            cur["tokens"].append(tok)
        if cur["tokens"]:
            raw.append(cur)
        if pending_leading is not None:
            raise HeaderParseError(f"{pending_leading.where()}: leading doc comment after the last member of {ename}")

        next_value = 0
        for r in raw:
            toks = r["tokens"]
            if toks[0].kind != "id":
                raise HeaderParseError(f"{toks[0].where()}: bad enum member start {toks[0].text!r}")
            mname = toks[0].text
            rest = toks[1:]
            deprecated = False
            while rest and rest[0].text in ATTRIBUTE_MACROS:
                deprecated = deprecated or rest[0].text == "CUDNN_DEPRECATED_ENUM"
                rest = rest[1:]
            if rest:
                if rest[0].text != "=":
                    raise HeaderParseError(f"{rest[0].where()}: expected '=' after enum member {mname}")
                expr = rest[1:]
                try:
                    value = eval_int_expr(expr, self.names)
                except NotAnInteger as exc:
                    raise HeaderParseError(f"{toks[0].where()}: cannot evaluate value of {mname}: {exc}") from None
                lit = [t for t in expr if t.kind not in ("comment", "doc", "tdoc")]
                is_num = bool(lit) and lit[-1].kind == "num" and (len(lit) == 1 or (len(lit) == 2 and lit[0].text == "-"))
                kind = "literal" if is_num else "expression"
            else:
                value = next_value
                kind = "implicit"
            next_value = value + 1
            tdoc = "\n".join(clean_doc(t.text) for t in r["tdoc"])
            ldoc = clean_doc(r["ldoc"].text) if r["ldoc"] else ""
            since = parse_since(tdoc)
            if since is None:
                since = parse_since(ldoc)
            deprecated = deprecated or _has_deprecated_tag(tdoc)
            if mname in self.names:
                raise HeaderParseError(f"{toks[0].where()}: enum member {mname} defined twice")
            self.names[mname] = value
            enum.members.append(EnumMember(mname, value, kind, tdoc, ldoc, since, deprecated, toks[0].line))
        if not enum.members:
            raise HeaderParseError(f"{start.where()}: enum {ename} has no members")
        if ename in self.enums:
            raise HeaderParseError(f"{start.where()}: enum {ename} defined twice")
        self.enums[ename] = enum

    # ---- functions -------------------------------------------------------------------------------------------------
    @staticmethod
    def _decl(tokens: list[Token], where: str, need_name: bool) -> Param:
        words = [t.text for t in tokens if t.text not in ATTRIBUTE_MACROS]
        c_decl = " ".join(words).replace(" *", " *").replace("* ", "*")
        is_const = "const" in words
        words = [w for w in words if w not in ("const", "struct", "enum", "volatile", "restrict")]
        depth = 0
        # trailing array brackets: `int dimA[]` / `int x[CUDNN_DIM_MAX]`
        while words and words[-1] == "]":
            lb = len(words) - 1 - words[::-1].index("[")
            words = words[:lb]
            depth += 1
        name = ""
        if need_name and words and re.fullmatch(r"[A-Za-z_]\w*", words[-1]) and len(words) >= 2:
            name = words[-1]
            words = words[:-1]
        depth += words.count("*")
        base_words = [w for w in words if w != "*"]
        if not base_words:
            raise HeaderParseError(f"{where}: cannot find the type in {c_decl!r}")
        base = " ".join(base_words)
        if base in ("unsigned", "unsigned int"):
            base = "unsigned int"
        return Param(name, base, depth, is_const, c_decl)

    def _function(self, code: list[Token], doc: Token | None) -> None:
        where = code[0].where()
        words = [t.text for t in code]
        if words[-1] != ";":
            raise HeaderParseError(f"{where}: function declaration does not end with ';'")
        lp = words.index("(")
        rp = len(words) - 1 - words[::-1].index(")")
        if rp != len(words) - 2:
            raise HeaderParseError(f"{where}: unexpected tokens after the parameter list: {words[rp + 1:]}")
        head = code[:lp]
        deprecated = any(t.text == "CUDNN_DEPRECATED" for t in head)
        head = [t for t in head if t.text not in ATTRIBUTE_MACROS]
        if not head or head[-1].kind != "id":
            raise HeaderParseError(f"{where}: cannot find the function name")
        name = head[-1].text
        ret = self._decl(head[:-1], where, need_name=False)
        params: list[Param] = []
        inner = code[lp + 1:rp]
        chunks: list[list[Token]] = [[]]
        d = 0
        for t in inner:
            if t.text in ("(", "["):
                d += 1
            elif t.text in (")", "]"):
                d -= 1
            if t.text == "," and d == 0:
                chunks.append([])
            else:
                chunks[-1].append(t)
        if not (len(chunks) == 1 and [t.text for t in chunks[0]] in ([], ["void"])):
            for i, ch in enumerate(chunks):
                if not ch:
                    raise HeaderParseError(f"{where}: empty parameter in {name}")
                if any(t.text == "(" for t in ch):
                    raise HeaderParseError(f"{where}: function-pointer parameter in {name} is not supported")
                p = self._decl(ch, where, need_name=True)
                if not p.name:
                    p.name = f"arg{i}"
                params.append(p)
        fdoc = clean_doc(doc.text) if doc else ""
        fn = Function(name, code[0].file, code[0].line, fdoc, ret, params, parse_since(fdoc),
                      deprecated or _has_deprecated_tag(fdoc))
        if name in self.functions:
            raise HeaderParseError(f"{where}: function {name} declared twice")
        self.functions[name] = fn


def parse_headers(include_dir: Path | str, root: str = "cudnn.h") -> HeaderSet:
    include_dir = Path(include_dir)
    files = header_files(include_dir, root)
    p = _Parser()
    for f in files:
        p.parse_file(f, (include_dir / f).read_text(encoding="utf-8"))
    return HeaderSet(include_dir, files, p.file_since, p.defines, p.skipped_defines, p.enums, p.typedefs,
                     p.functions)
