"""GBNF (llama.cpp) and transformers-CFG EBNF front end → :class:`~.cfg.CFG`.

The syntax (llama.cpp ``grammars/README.md``; transformers-CFG uses the same notation)::

    name ::= alternatives            # a rule; the start rule is ``root``
    "literal"  [a-z0-9_]  [^"\\]  .  # terminals: strings, character classes, any character
    ( ... )  a | b  x*  x+  x?  x{m}  x{m,}  x{m,n}
    # comment to the end of the line

Escapes in strings and classes: ``\\n \\r \\t \\\\ \\" \\[ \\] \\xHH \\uHHHH``
``\\UHHHHHHHH`` (any other escaped character stands for itself).  Characters are Unicode
code points matched as UTF-8.
A rule's body runs until the next ``name ::=``, so rules may span lines freely.  Each string,
class or ``.`` becomes a terminal (a byte NFA).

Errors raise :class:`~.errors.GrammarError` naming the rule and the line.
"""

from __future__ import annotations

from .. import nfa as N
from ..errors import GrammarError
from ..nfa import ByteNFA
from .cfg import CFG, EPS, Expr, alt, rep, seq, symbols_of
from .limits import DEFAULT_MAX_NESTING, DEFAULT_MAX_RULES, check_limit

__all__ = ["parse_gbnf"]

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_SIMPLE_ESC = {"n": 10, "r": 13, "t": 9, "f": 12, "v": 11, "0": 0, "a": 7, "b": 8}


class _Tok:
    __slots__ = ("kind", "value", "line", "text")

    def __init__(self, kind: str, value, line: int, text: str):
        self.kind, self.value, self.line, self.text = kind, value, line, text

    def __repr__(self) -> str:
        return f"{self.kind}:{self.text!r}@{self.line}"


def _escape(src: str, i: int, line: int, rule: str | None = None) -> tuple[int, int]:
    """Decode the escape at ``src[i] == '\\\\'``; return (code point, next index)."""
    if i + 1 >= len(src):
        raise GrammarError("dangling backslash at end of grammar", rule, line)
    c = src[i + 1]
    if c in _SIMPLE_ESC:
        return _SIMPLE_ESC[c], i + 2
    width = {"x": 2, "u": 4, "U": 8}.get(c)
    if width is not None:
        digits = src[i + 2 : i + 2 + width]
        if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise GrammarError(f"bad \\{c} escape {src[i:i + 2 + width]!r}", rule, line)
        cp = int(digits, 16)
        if cp > 0x10FFFF:
            raise GrammarError(f"escape {src[i:i + 2 + width]!r} is beyond U+10FFFF", rule, line)
        return cp, i + 2 + width
    return ord(c), i + 2


def _tokenize(src: str, max_nesting: int = DEFAULT_MAX_NESTING) -> list[_Tok]:
    """Tokens with the line each starts on; brackets nested deeper than ``max_nesting`` are a
    :class:`~.limits.GrammarLimitError` at the line of the bracket that crossed it."""
    toks: list[_Tok] = []
    cur: list = [None]  # the rule being defined, for error messages
    i, n, line = 0, len(src), 1
    depth = 0
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r\f\v":
            i += 1
        elif c == "#":
            while i < n and src[i] != "\n":
                i += 1
        elif src.startswith("::=", i):
            if toks and toks[-1].kind == "name":
                cur[0] = toks[-1].value
            toks.append(_Tok("def", None, line, "::="))
            depth = 0
            i += 3
        elif c == '"':
            j = i + 1
            cps: list[int] = []
            while True:
                if j >= n or src[j] == "\n":
                    raise GrammarError("unterminated string literal", cur[0], line)
                if src[j] == '"':
                    break
                if src[j] == "\\":
                    cp, j = _escape(src, j, line, cur[0])
                else:
                    cp, j = ord(src[j]), j + 1
                cps.append(cp)
            toks.append(_Tok("str", cps, line, src[i : j + 1]))
            i = j + 1
        elif c == "[":
            j = i + 1
            neg = j < n and src[j] == "^"
            if neg:
                j += 1
            ranges: list[tuple[int, int]] = []
            while True:
                if j >= n:
                    raise GrammarError("unterminated character class", cur[0], line)
                if src[j] == "]":
                    break
                if src[j] == "\\":
                    lo, j = _escape(src, j, line, cur[0])
                else:
                    lo, j = ord(src[j]), j + 1
                hi = lo
                if j + 1 < n and src[j] == "-" and src[j + 1] != "]":
                    if src[j + 1] == "\\":
                        hi, j = _escape(src, j + 1, line, cur[0])
                    else:
                        hi, j = ord(src[j + 1]), j + 2
                    if hi < lo:
                        raise GrammarError(
                            f"reversed range in character class {src[i:j + 1]!r}", None, line
                        )
                ranges.append((lo, hi))
            toks.append(_Tok("class", (neg, ranges), line, src[i : j + 1]))
            line += src.count("\n", i, j + 1)  # a raw newline inside the class
            i = j + 1
        elif c == "{":
            j = src.find("}", i)
            if j < 0:
                raise GrammarError("unterminated {m,n} repetition", cur[0], line)
            body = src[i + 1 : j].replace(" ", "")
            parts = body.split(",")
            try:
                if len(parts) == 1:
                    lo = hi = int(parts[0])
                elif len(parts) == 2:
                    lo = int(parts[0]) if parts[0] else 0
                    hi = int(parts[1]) if parts[1] else None
                else:
                    raise ValueError
            except ValueError:
                raise GrammarError(f"bad repetition {src[i:j + 1]!r}", cur[0], line) from None
            if hi is not None and hi < lo:
                raise GrammarError(f"bad repetition bounds {src[i:j + 1]!r}", cur[0], line)
            toks.append(_Tok("count", (lo, hi), line, src[i : j + 1]))
            line += src.count("\n", i, j + 1)
            i = j + 1
        elif c in "()|*+?.":
            if c == "(":
                depth += 1
                check_limit("bracket nesting", "max_nesting", max_nesting, depth, cur[0], line)
            elif c == ")":
                depth = max(0, depth - 1)
            toks.append(_Tok(c, None, line, c))
            i += 1
        elif c in _NAME_CHARS:
            j = i
            while j < n and src[j] in _NAME_CHARS:
                j += 1
            toks.append(_Tok("name", src[i:j], line, src[i:j]))
            i = j
        else:
            raise GrammarError(f"unexpected character {c!r}", cur[0], line)
    return toks


def _cp_nfa(ranges: list[tuple[int, int]], neg: bool) -> ByteNFA:
    rs = sorted(ranges)
    if neg:
        comp = []
        nxt = 0
        for lo, hi in rs:
            if lo > nxt:
                comp.append((nxt, lo - 1))
            nxt = max(nxt, hi + 1)
        if nxt <= N.MAX_CODEPOINT:
            comp.append((nxt, N.MAX_CODEPOINT))
        rs = comp
    return N.codepoints(rs)


class _Parser:
    def __init__(self, toks: list[_Tok], syntax: str):
        self.toks = toks
        self.pos = 0
        self.rule = None
        self.terminals: dict[str, ByteNFA] = {}
        self.syntax = syntax

    def peek(self, k: int = 0) -> _Tok | None:
        j = self.pos + k
        return self.toks[j] if j < len(self.toks) else None

    def at_rule_start(self) -> bool:
        a, b = self.peek(), self.peek(1)
        return a is not None and a.kind == "name" and b is not None and b.kind == "def"

    def err(self, msg: str, tok: _Tok | None = None):
        t = tok or self.peek() or (self.toks[-1] if self.toks else None)
        raise GrammarError(msg, self.rule, t.line if t else None)

    def parse(self) -> tuple[dict[str, Expr], dict[str, int]]:
        rules: dict[str, Expr] = {}
        lines: dict[str, int] = {}
        while self.peek() is not None:
            if not self.at_rule_start():
                self.err(f"expected 'name ::=' but found {self.peek().text!r}")
            name_tok = self.toks[self.pos]
            self.rule = name_tok.value
            self.pos += 2
            body = self.alternatives(top=True)
            if self.rule in rules:
                # llama.cpp appends alternatives of a repeated definition
                rules[self.rule] = alt(rules[self.rule], body)
            else:
                rules[self.rule] = body
                lines[self.rule] = name_tok.line
        return rules, lines

    def alternatives(self, top: bool) -> Expr:
        alts = [self.sequence(top)]
        while self.peek() is not None and self.peek().kind == "|":
            self.pos += 1
            alts.append(self.sequence(top))
        return alt(*alts)

    def sequence(self, top: bool) -> Expr:
        items: list[Expr] = []
        while True:
            t = self.peek()
            if t is None or t.kind in ("|", ")") or (top and self.at_rule_start()):
                break
            items.append(self.postfix(self.atom()))
        return seq(*items) if items else EPS

    def atom(self) -> Expr:
        t = self.peek()
        self.pos += 1
        if t.kind == "name":
            return ("n", t.value)
        if t.kind == "str":
            if not t.value:
                return EPS
            name = t.text
            if name not in self.terminals:
                self.terminals[name] = N.literal("".join(map(chr, t.value)).encode("utf-8"))
            return ("t", name)
        if t.kind == "class":
            neg, ranges = t.value
            if not ranges and not neg:
                self.err(f"empty character class {t.text}", t)
            name = t.text
            if name not in self.terminals:
                self.terminals[name] = _cp_nfa(ranges, neg)
            return ("t", name)
        if t.kind == ".":
            if "." not in self.terminals:
                self.terminals["."] = N.any_codepoint()
            return ("t", ".")
        if t.kind == "(":
            inner = self.alternatives(top=False)
            close = self.peek()
            if close is None or close.kind != ")":
                self.err("missing ')'", t)
            self.pos += 1
            return inner
        self.err(f"unexpected {t.text!r}", t)

    def postfix(self, e: Expr) -> Expr:
        while True:
            t = self.peek()
            if t is None:
                return e
            if t.kind == "*":
                e = rep(e, 0, None)
            elif t.kind == "+":
                e = rep(e, 1, None)
            elif t.kind == "?":
                e = rep(e, 0, 1)
            elif t.kind == "count":
                e = rep(e, t.value[0], t.value[1])
            else:
                return e
            self.pos += 1


def parse_gbnf(text: str, *, start: str | None = None, syntax: str = "gbnf",
               max_nesting: int = DEFAULT_MAX_NESTING,
               max_rules: int = DEFAULT_MAX_RULES) -> CFG:
    """Parse a GBNF / transformers-CFG EBNF grammar (see the module docstring).

    Args:
        text: the grammar source.
        start: the start rule (default ``root``).
        syntax: recorded in ``CFG.syntax`` (``"gbnf"`` or ``"ebnf"``).

    Raises:
        GrammarError: syntax errors, undefined rules, a missing start rule (rule and line).
        GrammarLimitError: more than ``max_nesting`` nested parentheses or ``max_rules`` rules.
    """
    p = _Parser(_tokenize(text, max_nesting), syntax)
    rules, lines = p.parse()
    check_limit("rules and terminals defined", "max_rules", max_rules,
                len(rules) + len(p.terminals))
    if not rules:
        raise GrammarError("the grammar defines no rule")
    start = start or "root"
    if start not in rules:
        raise GrammarError(f"no start rule {start!r} defined", start)
    for name, e in rules.items():
        for k, s in symbols_of(e):
            if k == "n" and s not in rules:
                raise GrammarError(f"undefined rule {s!r}", name, lines.get(name))
    return CFG(rules, p.terminals, start, None, lines, syntax)
