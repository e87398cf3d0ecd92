"""Lark grammar front end → :class:`~.grammar_cfg.CFG`.

Supported (the dialect of Lark 1.x used by the Spider SQL, SMILES, CARS and llguidance grammars):

* rules ``name: expansions`` with the ``?name`` / ``!name`` modifiers and ``name.prio``
  priorities (both change the parse tree, not the language, and are ignored), aliases
  ``-> name`` (ignored), continuation lines starting with ``|``;
* terminals ``NAME: expansions`` (``NAME.prio`` too), compiled to one byte NFA each;
* items: rule and terminal names, ``"literal"``, ``"literal"i`` (case-insensitive),
  ``/regex/flags`` (Python ``re`` syntax through :func:`~.regex.regex_to_nfa`; flags
  ``i m s x u l``), ranges ``"a".."z"``, groups ``( )``, optionals ``[ ]``, ``? * +``,
  ``item ~ n`` and ``item ~ n..m``;
* templates ``name{a, b}: ...`` and their uses ``name{x, y}`` (expanded by substitution);
* ``%import common.NAME [-> ALIAS]`` and ``%import common (A, B)`` — the ``common`` terminals are
  defined in this module (:data:`COMMON_LARK`); ``%ignore`` (names, literals or regexes);
  ``%override`` and ``%extend``.  ``%declare`` (terminals fed by a custom lexer) and imports of
  other files raise :class:`~.errors.GrammarError`.

Semantics: the language is the *scannerless* one — a sentence is a derivation whose terminals
match byte substrings with ``%ignore`` material allowed between any two terminals and at both
ends; this is what Lark's Earley parser with ``lexer="dynamic_complete"`` accepts.  (Lark's
default ``"dynamic"`` lexer only tries the regex engine's preferred match of each terminal at
each position, which can reject sentences of the grammar.)

``ESCAPED_STRING`` in :data:`COMMON_LARK` is ``/"(?:[^"\\\\\\n]|\\\\[^\\n])*"/``: Lark's own
definition uses a lookbehind and a lazy ``.*?``, whose shortest match (what the Lark lexer
takes) is exactly this language.
"""

from __future__ import annotations

import re

from . import nfa as N
from .errors import GrammarError, InvalidRegexError, UnsupportedRegexError
from .grammar_cfg import CFG, EPS, NOTHING, Expr, alt, rep, seq, symbols_of
from .nfa import ByteNFA
from .regex import regex_to_nfa

__all__ = ["parse_lark", "COMMON_LARK"]

#: The ``%import common.*`` terminals (Lark's ``common.lark``, without lookbehind).
COMMON_LARK = r"""
DIGIT: "0".."9"
HEXDIGIT: "a".."f"|"A".."F"|DIGIT
INT: DIGIT+
SIGNED_INT: ["+"|"-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e"|"E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+"|"-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+"|"-"] NUMBER
_STRING_INNER: /.*?/
ESCAPED_STRING : /"(?:[^"\\\n]|\\[^\n])*"/
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_"|LETTER) ("_"|LETTER|DIGIT)*
WS_INLINE: (" "|/\t/)+
WS: /[ \t\f\r\n]/+
CR : /\r/
LF : /\n/
NEWLINE: (CR? LF)+
SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: "/*" /(.|\n)*?/ "*/"
SQL_COMMENT: /--[^\n]*/
"""

_TOKEN_RE = re.compile(
    r"""
    (?P<nl>\r?\n)
  | (?P<ws>[ \t\f\r]+)
  | (?P<cont>\\[ ]*\r?\n)
  | (?P<comment>//[^\n]*|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"i?)
  | (?P<regexp>/(?!/)(?:\\/|\\\\|[^/\n])*?/[imslux]*)
  | (?P<arrow>->)
  | (?P<dotdot>\.\.)
  | (?P<directive>%[a-z]+)
  | (?P<name>[_a-zA-Z][_a-zA-Z0-9]*)
  | (?P<number>-?\d+)
  | (?P<op>[:|()\[\]{},?*+!~.])
    """,
    re.VERBOSE,
)


class _Tok:
    __slots__ = ("kind", "text", "line")

    def __init__(self, kind: str, text: str, line: int):
        self.kind, self.text, self.line = kind, text, line

    def __repr__(self) -> str:
        return f"{self.kind}:{self.text!r}@{self.line}"


def _tokenize(src: str) -> list[list[_Tok]]:
    """Tokens grouped into logical lines (a newline before ``|`` or inside brackets joins)."""
    toks: list[_Tok] = []
    pos, line = 0, 1
    while pos < len(src):
        m = _TOKEN_RE.match(src, pos)
        if m is None:
            raise GrammarError(f"unexpected character {src[pos]!r}", None, line)
        kind = m.lastgroup
        if kind == "nl":
            toks.append(_Tok("nl", "\n", line))
            line += 1
        elif kind == "cont":  # backslash-newline: the logical line goes on
            line += 1
        elif kind not in ("ws", "comment"):
            toks.append(_Tok(kind, m.group(), line))
        pos = m.end()
    lines: list[list[_Tok]] = []
    cur: list[_Tok] = []
    depth = 0
    for i, t in enumerate(toks):
        if t.kind == "nl":
            nxt = next((u for u in toks[i + 1 :] if u.kind != "nl"), None)
            if depth > 0 or (nxt is not None and nxt.kind == "op" and nxt.text == "|"):
                continue
            if cur:
                lines.append(cur)
            cur = []
            continue
        if t.kind == "op" and t.text in "([{":
            depth += 1
        elif t.kind == "op" and t.text in ")]}":
            depth = max(0, depth - 1)
        cur.append(t)
    if cur:
        lines.append(cur)
    return lines


def _is_terminal_name(name: str) -> bool:
    return name.lstrip("_")[:1].isupper()


def _unescape(body: str, line: int) -> str:
    """Lark's ``eval_escaping`` of a string literal body."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(body):
            raise GrammarError("literal ended unexpectedly (bad escaping)", None, line)
        d = body[i + 1]
        if d == "\\":
            out.append("\\")
            i += 2
        elif d == '"':
            out.append('"')
            i += 2
        elif d in "nftr":
            out.append({"n": "\n", "f": "\f", "t": "\t", "r": "\r"}[d])
            i += 2
        elif d in "xuU":
            w = {"x": 2, "u": 4, "U": 8}[d]
            digits = body[i + 2 : i + 2 + w]
            try:
                out.append(chr(int(digits, 16)))
            except ValueError:
                raise GrammarError(f"bad escape \\{d}{digits}", None, line) from None
            i += 2 + w
        else:
            out.append("\\" + d)
            i += 2
    return "".join(out)


_FLAGS = {"i": re.I, "m": re.M, "s": re.S, "x": re.X, "u": 0, "l": 0}


class _Def:
    __slots__ = ("name", "params", "body", "line", "is_terminal")

    def __init__(self, name, params, body, line, is_terminal):
        self.name, self.params, self.body, self.line = name, params, body, line
        self.is_terminal = is_terminal


class _Parser:
    """Parses one logical line's expansions into an AST:

    ("lit", text, ci) | ("re", pattern, flags) | ("range", a, b) | ("ref", name)
    | ("tmpl", name, args) | ("seq", items) | ("alt", items) | ("rep", x, lo, hi)
    """

    def __init__(self, toks: list[_Tok], rule: str | None):
        self.toks, self.pos, self.rule = toks, 0, rule

    def peek(self):
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def err(self, msg: str):
        t = self.peek() or self.toks[-1]
        raise GrammarError(msg, self.rule, t.line)

    def is_op(self, s: str) -> bool:
        t = self.peek()
        return t is not None and t.kind == "op" and t.text == s

    def expect_op(self, s: str):
        if not self.is_op(s):
            t = self.peek()
            self.err(f"expected {s!r} but found {t.text if t else 'end of line'!r}")
        self.pos += 1

    def expansions(self):
        alts = [self.alias()]
        while self.is_op("|"):
            self.pos += 1
            alts.append(self.alias())
        return alts[0] if len(alts) == 1 else ("alt", alts)

    def alias(self):
        items = []
        while True:
            t = self.peek()
            if t is None or (t.kind == "op" and t.text in "|)]},") or t.kind == "arrow":
                break
            items.append(self.expr())
        if self.peek() is not None and self.peek().kind == "arrow":
            self.pos += 1
            t = self.peek()
            if t is None or t.kind != "name":
                self.err("expected an alias name after '->'")
            self.pos += 1
        return items[0] if len(items) == 1 else ("seq", items)

    def expr(self):
        a = self.atom()
        while True:
            t = self.peek()
            if t is None or t.kind != "op":
                return a
            if t.text == "?":
                a = ("rep", a, 0, 1)
            elif t.text == "*":
                a = ("rep", a, 0, None)
            elif t.text == "+":
                a = ("rep", a, 1, None)
            elif t.text == "~":
                self.pos += 1
                n = self.peek()
                if n is None or n.kind != "number":
                    self.err("expected a number after '~'")
                lo = hi = int(n.text)
                if self.pos + 2 < len(self.toks) and self.toks[self.pos + 1].kind == "dotdot":
                    hi = int(self.toks[self.pos + 2].text)
                    self.pos += 2
                if lo < 0 or hi < lo:
                    self.err(f"bad repetition ~ {lo}..{hi}")
                a = ("rep", a, lo, hi)
            else:
                return a
            self.pos += 1

    def atom(self):
        t = self.peek()
        if t is None:
            self.err("unexpected end of line")
        self.pos += 1
        if t.kind == "op" and t.text == "(":
            e = self.expansions()
            self.expect_op(")")
            return e
        if t.kind == "op" and t.text == "[":
            e = self.expansions()
            self.expect_op("]")
            return ("rep", e, 0, 1)
        if t.kind == "string":
            ci = t.text.endswith("i")
            body = t.text[1:-2] if ci else t.text[1:-1]
            text = _unescape(body, t.line)
            if self.peek() is not None and self.peek().kind == "dotdot":
                self.pos += 1
                u = self.peek()
                if u is None or u.kind != "string":
                    self.err("expected a string after '..'")
                self.pos += 1
                hi = _unescape(u.text[1:-1], u.line)
                if len(text) != 1 or len(hi) != 1:
                    self.err(f"range {t.text}..{u.text} needs one-character strings")
                if ord(hi) < ord(text):
                    self.err(f"reversed range {t.text}..{u.text}")
                return ("range", text, hi)
            return ("lit", text, ci)
        if t.kind == "regexp":
            end = t.text.rindex("/")
            pattern = t.text[1:end].replace("\\/", "/")
            flags = 0
            for f in t.text[end + 1 :]:
                flags |= _FLAGS[f]
            return ("re", pattern, flags)
        if t.kind == "name":
            if self.is_op("{"):
                self.pos += 1
                args = [self.expansions()]
                while self.is_op(","):
                    self.pos += 1
                    args.append(self.expansions())
                self.expect_op("}")
                return ("tmpl", t.text, args)
            return ("ref", t.text)
        self.pos -= 1
        self.err(f"unexpected {t.text!r}")


def _parse_defs(src: str) -> tuple[dict[str, _Def], list, list[tuple[str, str, int]], str]:
    """Returns (definitions, ignore ASTs with lines, imports (module.name, alias, line))."""
    defs: dict[str, _Def] = {}
    ignores: list[tuple] = []
    imports: list[tuple[str, str, int]] = []
    for toks in _tokenize(src):
        head = toks[0]
        if head.kind == "directive":
            d = head.text
            if d == "%ignore":
                p = _Parser(toks[1:], None)
                if not toks[1:]:
                    raise GrammarError("%ignore needs an argument", None, head.line)
                ignores.append((p.expansions(), head.line))
                if p.peek() is not None:
                    p.err(f"unexpected {p.peek().text!r} after %ignore")
            elif d == "%import":
                texts = [t.text for t in toks[1:]]
                if not texts:
                    raise GrammarError("%import needs a path", None, head.line)
                path = []
                i = 0
                while i < len(texts) and texts[i] not in ("(", "->"):
                    path.append(texts[i])
                    i += 1
                dotted = "".join(path)
                if i < len(texts) and texts[i] == "(":
                    names = [x for x in texts[i + 1 :] if x not in (",", ")")]
                    for nm in names:
                        imports.append((dotted + "." + nm, nm, head.line))
                else:
                    alias = texts[i + 1] if i + 1 < len(texts) and texts[i] == "->" else None
                    nm = dotted.rsplit(".", 1)[-1]
                    imports.append((dotted, alias or nm, head.line))
            elif d in ("%override", "%extend"):
                sub = _parse_defs_line(toks[1:], head.line)
                if d == "%override":
                    if sub.name not in defs:
                        raise GrammarError("%override of an undefined name", sub.name, head.line)
                    defs[sub.name] = sub
                else:
                    old = defs.get(sub.name)
                    if old is None:
                        raise GrammarError("%extend of an undefined name", sub.name, head.line)
                    old.body = ("alt", [old.body, sub.body])
            elif d == "%declare":
                names = " ".join(t.text for t in toks[1:])
                raise GrammarError(
                    f"%declare {names}: declared terminals come from a custom lexer and have no "
                    "byte language", None, head.line
                )
            else:
                raise GrammarError(f"unknown directive {d}", None, head.line)
            continue
        d = _parse_defs_line(toks, head.line)
        if d.name in defs:
            raise GrammarError("rule defined twice", d.name, head.line)
        defs[d.name] = d
    return defs, ignores, imports, src


def _parse_defs_line(toks: list[_Tok], line: int) -> _Def:
    i = 0
    while i < len(toks) and toks[i].kind == "op" and toks[i].text in "?!":
        i += 1
    if i >= len(toks) or toks[i].kind != "name":
        raise GrammarError(f"expected a rule or terminal name, found {toks[i].text!r}"
                           if i < len(toks) else "expected a definition", None, line)
    name = toks[i].text
    i += 1
    params: list[str] = []
    if i < len(toks) and toks[i].kind == "op" and toks[i].text == "{":
        i += 1
        while i < len(toks) and not (toks[i].kind == "op" and toks[i].text == "}"):
            if toks[i].kind == "name":
                params.append(toks[i].text)
            i += 1
        i += 1
    if i < len(toks) and toks[i].kind == "op" and toks[i].text == ".":
        i += 2  # priority
    if i >= len(toks) or toks[i].kind != "op" or toks[i].text != ":":
        raise GrammarError("expected ':' after the name", name, line)
    p = _Parser(toks[i + 1 :], name)
    if p.peek() is None:
        body = ("seq", [])
    else:
        body = p.expansions()
    if p.peek() is not None:
        p.err(f"unexpected {p.peek().text!r}")
    return _Def(name, params, body, line, _is_terminal_name(name))


_COMMON_CACHE: dict = {}


def _common() -> _Compiler:
    c = _COMMON_CACHE.get("c")
    if c is None:
        defs, _, _, _ = _parse_defs(COMMON_LARK)
        c = _COMMON_CACHE["c"] = _Compiler(defs, {})
    return c


class _Compiler:
    def __init__(self, defs: dict[str, _Def], imported: dict[str, ByteNFA]):
        self.defs = defs
        self.imported = imported
        self.term_nfa: dict[str, ByteNFA] = {}
        self.busy: set[str] = set()
        self.anon: dict[str, ByteNFA] = {}
        self.rules: dict[str, Expr] = {}
        self.lines: dict[str, int] = {}
        self.instances: dict[str, tuple] = {}

    # ---- terminals
    def terminal(self, name: str, rule: str | None, line: int | None) -> ByteNFA:
        if name in self.term_nfa:
            return self.term_nfa[name]
        if name in self.imported:
            return self.imported[name]
        d = self.defs.get(name)
        if d is None or not d.is_terminal:
            raise GrammarError(f"undefined terminal {name!r}", rule, line)
        if name in self.busy:
            raise GrammarError("terminal definitions are recursive", name, d.line)
        self.busy.add(name)
        out = self.term_expr(d.body, name, d.line)
        self.busy.discard(name)
        self.term_nfa[name] = out
        return out

    def leaf_nfa(self, ast, rule, line) -> ByteNFA:
        tag = ast[0]
        if tag == "lit":
            text, ci = ast[1], ast[2]
            if not ci:
                return N.literal(text.encode("utf-8"))
            return regex_to_nfa(re.escape(text), flags=re.I)
        if tag == "range":
            return N.codepoints([(ord(ast[1]), ord(ast[2]))])
        if tag == "re":
            try:
                # a lookaround in a terminal would see past the terminal: refused
                return regex_to_nfa(ast[1], flags=ast[2], lookaround=False)
            except (InvalidRegexError, UnsupportedRegexError) as e:
                raise GrammarError(f"regex /{ast[1]}/: {e}", rule, line) from e
        raise AssertionError(tag)

    def term_expr(self, ast, rule, line) -> ByteNFA:
        tag = ast[0]
        if tag in ("lit", "range", "re"):
            return self.leaf_nfa(ast, rule, line)
        if tag == "ref":
            if not _is_terminal_name(ast[1]):
                raise GrammarError(
                    f"terminal refers to rule {ast[1]!r} (terminals may only use terminals)",
                    rule, line,
                )
            return self.terminal(ast[1], rule, line)
        if tag == "seq":
            return N.concat(*(self.term_expr(x, rule, line) for x in ast[1]))
        if tag == "alt":
            return N.union(*(self.term_expr(x, rule, line) for x in ast[1]))
        if tag == "rep":
            return N.repeat(self.term_expr(ast[1], rule, line), ast[2], ast[3])
        raise GrammarError("templates cannot be used inside terminals", rule, line)

    # ---- rules
    def anon_terminal(self, ast, rule, line) -> Expr:
        if ast[0] == "lit" and ast[1] == "":
            return EPS
        key = (
            '"' + ast[1] + '"' + ("i" if ast[2] else "") if ast[0] == "lit"
            else f'"{ast[1]}".."{ast[2]}"' if ast[0] == "range"
            else f"/{ast[1]}/{ast[2] or ''}"
        )
        if key not in self.anon:
            self.anon[key] = self.leaf_nfa(ast, rule, line)
        return ("t", key)

    def rule_expr(self, ast, rule, line, env: dict) -> Expr:
        tag = ast[0]
        if tag in ("lit", "range", "re"):
            return self.anon_terminal(ast, rule, line)
        if tag == "ref":
            name = ast[1]
            if name in env:
                return env[name]
            if _is_terminal_name(name):
                self.terminal(name, rule, line)
                return ("t", name)
            d = self.defs.get(name)
            if d is None or d.is_terminal:
                raise GrammarError(f"undefined rule {name!r}", rule, line)
            if d.params:
                raise GrammarError(f"template {name!r} used without arguments", rule, line)
            self.rule(name)
            return ("n", name)
        if tag == "tmpl":
            name, args = ast[1], ast[2]
            d = self.defs.get(name)
            if d is None or not d.params:
                raise GrammarError(f"undefined template {name!r}", rule, line)
            if len(args) != len(d.params):
                raise GrammarError(
                    f"template {name!r} takes {len(d.params)} arguments, got {len(args)}",
                    rule, line,
                )
            vals = [self.rule_expr(a, rule, line, env) for a in args]
            inst = f"{name}{{{', '.join(map(repr, vals))}}}"
            if inst not in self.rules and inst not in self.instances:
                self.instances[inst] = ()
                self.rules[inst] = NOTHING
                self.lines[inst] = d.line
                self.rules[inst] = self.rule_expr(d.body, name, d.line, dict(zip(d.params, vals)))
            return ("n", inst)
        if tag == "seq":
            return seq(*(self.rule_expr(x, rule, line, env) for x in ast[1]))
        if tag == "alt":
            return alt(*(self.rule_expr(x, rule, line, env) for x in ast[1]))
        return rep(self.rule_expr(ast[1], rule, line, env), ast[2], ast[3])

    def rule(self, name: str) -> None:
        if name in self.rules:
            return
        d = self.defs[name]
        self.rules[name] = NOTHING  # placeholder for recursion
        self.lines[name] = d.line
        self.rules[name] = self.rule_expr(d.body, name, d.line, {})


def parse_lark(text: str, *, start: str | None = None) -> CFG:
    """Parse a Lark grammar (see the module docstring) into a :class:`CFG`.

    Raises:
        GrammarError: syntax errors, undefined names, recursive terminals, unsupported
            directives, bad regexes — with the rule and line.
    """
    defs, ignores, imports, _ = _parse_defs(text)
    imported: dict[str, ByteNFA] = {}
    for dotted, alias, line in imports:
        parts = dotted.split(".")
        if len(parts) != 2 or parts[0] != "common":
            raise GrammarError(
                f"%import {dotted}: only the 'common' module is available", None, line
            )
        nm = parts[1]
        com = _common()
        if nm not in com.defs:
            raise GrammarError(f"%import {dotted}: common has no {nm!r}", None, line)
        if not _is_terminal_name(nm):
            raise GrammarError(f"%import {dotted}: only terminals can be imported", None, line)
        if alias in defs:
            continue  # a local definition overrides the import
        imported[alias] = com.terminal(nm, None, line)
    c = _Compiler(defs, imported)
    start = start or "start"
    if start not in defs or defs[start].is_terminal:
        raise GrammarError(f"no start rule {start!r} defined", start)
    c.rule(start)
    # compile every other rule and terminal too, so errors anywhere are reported
    for name, d in defs.items():
        if d.params:
            continue
        if d.is_terminal:
            c.terminal(name, None, d.line)
        else:
            c.rule(name)
    ignore = None
    if ignores:
        parts = [c.term_expr(ast, "%ignore", line) for ast, line in ignores]
        ignore = N.union(*parts)
        if N.finalize(ignore).start in N.finalize(ignore).finals:
            raise GrammarError("%ignore material must not match the empty string", "%ignore")
    # only rules reachable from the start matter; keep the terminals they use
    reach = {start}
    stack = [start]
    while stack:
        x = stack.pop()
        for k, s in symbols_of(c.rules[x]):
            if k == "n" and s not in reach:
                reach.add(s)
                stack.append(s)
    rules = {a: e for a, e in c.rules.items() if a in reach}
    terminals: dict[str, ByteNFA] = {}
    for e in rules.values():
        for k, s in symbols_of(e):
            if k == "t" and s not in terminals:
                terminals[s] = c.anon[s] if s in c.anon else c.terminal(s, None, None)
    lines = dict(c.lines)
    for name, d in defs.items():
        lines.setdefault(name, d.line)
    return CFG(rules, terminals, start, ignore, lines, "lark")
