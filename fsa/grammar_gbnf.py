"""GBNF (llama.cpp) and transformers-CFG EBNF front end → :class:`~.grammar_cfg.CFG`.

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

from . import nfa as N
from .errors import GrammarError
from .grammar_cfg import CFG, EPS, Expr, alt, rep, seq
from .nfa import ByteNFA

__all__ = ["parse_gbnf", "to_gbnf"]

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


def _tokenize(src: str) -> list[_Tok]:
    toks: list[_Tok] = []
    cur: list = [None]  # the rule being defined, for error messages
    i, n, line = 0, len(src), 1
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
            i = j + 1
        elif c in "()|*+?.":
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


def parse_gbnf(text: str, *, start: str | None = None, syntax: str = "gbnf") -> CFG:
    """Parse a GBNF / transformers-CFG EBNF grammar (see the module docstring).

    Args:
        text: the grammar source.
        start: the start rule (default ``root``).
        syntax: recorded in ``CFG.syntax`` (``"gbnf"`` or ``"ebnf"``).

    Raises:
        GrammarError: syntax errors, undefined rules, a missing start rule (rule and line).
    """
    p = _Parser(_tokenize(text), syntax)
    rules, lines = p.parse()
    if not rules:
        raise GrammarError("the grammar defines no rule")
    start = start or "root"
    if start not in rules:
        raise GrammarError(f"no start rule {start!r} defined", start)
    for name, e in rules.items():
        from .grammar_cfg import symbols_of

        for k, s in symbols_of(e):
            if k == "n" and s not in rules:
                raise GrammarError(f"undefined rule {s!r}", name, lines.get(name))
    return CFG(rules, p.terminals, start, None, lines, syntax)


# --------------------------------------------------------------------------- export


def _runs(mask: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """Maximal runs of set bits of ``mask`` within ``[lo, hi]``."""
    out: list[tuple[int, int]] = []
    b = lo
    while b <= hi:
        if (mask >> b) & 1:
            e = b
            while e + 1 <= hi and (mask >> (e + 1)) & 1:
                e += 1
            out.append((b, e))
            b = e + 1
        else:
            b += 1
    return out


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _cp_char(c: int) -> str:
    if 0x20 < c < 0x7F and chr(c) not in '\\]^-["':
        return chr(c)
    return f"\\x{c:02X}" if c < 0x80 else (f"\\u{c:04X}" if c <= 0xFFFF else f"\\U{c:08X}")


def _codepoint_edges(f: ByteNFA) -> dict[int, dict[int, list[tuple[int, int]]]]:
    """Per state ``p``: target state → code-point ranges read by one UTF-8 character from ``p``
    (paths through continuation-byte states are followed; invalid sequences are dropped)."""
    out_edges: dict[int, list[tuple[int, int]]] = {}
    for s, m, d in f.edges:
        out_edges.setdefault(s, []).append((m, d))
    res: dict[int, dict[int, list[tuple[int, int]]]] = {}
    memo: dict[tuple[int, int], dict[int, list[tuple[int, int]]]] = {}

    def tail(q: int, left: int) -> dict[int, list[tuple[int, int]]]:
        # reading `left` continuation bytes from q: target -> ranges of their 6*left low bits
        key = (q, left)
        hit = memo.get(key)
        if hit is not None:
            return hit
        acc: dict[int, list[tuple[int, int]]] = {}
        for m, d in out_edges.get(q, ()):
            for lo, hi in _runs(m, 0x80, 0xBF):
                if left == 1:
                    acc.setdefault(d, []).append((lo & 0x3F, hi & 0x3F))
                    continue
                sub = tail(d, left - 1)
                width = 6 * (left - 1)
                for c in range(lo & 0x3F, (hi & 0x3F) + 1):
                    for r, rs in sub.items():
                        acc.setdefault(r, []).extend(((c << width) | x, (c << width) | y)
                                                     for x, y in rs)
        memo[key] = out = {d: _merge(r) for d, r in acc.items()}
        return out

    def follow(q: int, base: int, left: int, acc: dict) -> None:
        width = 6 * left
        for r, rs in tail(q, left).items():
            acc.setdefault(r, []).extend(((base << width) | x, (base << width) | y)
                                         for x, y in rs)

    for p in range(f.num_states):
        acc: dict[int, list[tuple[int, int]]] = {}
        for m, d in out_edges.get(p, ()):
            for lo, hi in _runs(m, 0, 0x7F):
                acc.setdefault(d, []).append((lo, hi))
            for b in range(0xC2, 0xF5):
                if (m >> b) & 1:
                    n = 1 if b < 0xE0 else (2 if b < 0xF0 else 3)
                    follow(d, b & (0x1F if n == 1 else (0x0F if n == 2 else 0x07)), n, acc)
        res[p] = {d: _merge(r) for d, r in acc.items()}
    return res


def to_gbnf(cfg: CFG, *, root: str = "root") -> str:
    """Write ``cfg`` as a GBNF grammar (llama.cpp / xgrammar syntax) with the same language.

    Nonterminals keep their right-hand sides (``( | ) * + ? {m,n}``); every terminal (a byte
    NFA, ``%ignore`` already appended by :func:`~.grammar_cfg.prepare`) becomes right-linear
    rules over code points, one rule per NFA state, its UTF-8 byte paths folded into character
    classes.  Names are renamed to ``r<i>`` / ``t<i>_<state>``.  Used to give the grammars of
    other front ends (Lark) to engines that read only GBNF/EBNF (xgrammar).
    """
    from .grammar_cfg import START, prepare

    pc = prepare(cfg, lexicalize=False)
    rname = {a: f"r{i}" for i, a in enumerate(pc.rules)}
    tname = {t: f"t{i}" for i, t in enumerate(pc.terminals)}
    lines = [f"{root} ::= {rname[START]}"]

    def ex(e: Expr) -> str:
        tag = e[0]
        if tag == "t":
            return f"{tname[e[1]]}_0"
        if tag == "n":
            return rname[e[1]]
        if tag == "seq":
            return "(" + " ".join(ex(p) for p in e[1]) + ")" if e[1] else '""'
        if tag == "alt":
            return "(" + " | ".join(ex(p) for p in e[1]) + ")" if e[1] else "[^\\x00-\\U0010FFFF]"
        body, lo, hi = ex(e[1]), e[2], e[3]
        if not body.isidentifier() and not (body.startswith("(") and body.endswith(")")):
            body = "(" + body + ")"
        elif body.endswith(("*", "+", "?", "}")):
            body = "(" + body + ")"
        if (lo, hi) == (0, None):
            return body + "*"
        if (lo, hi) == (1, None):
            return body + "+"
        if (lo, hi) == (0, 1):
            return body + "?"
        return body + "{" + str(lo) + "," + ("" if hi is None else str(hi)) + "}"

    for a, e in pc.rules.items():
        lines.append(f"{rname[a]} ::= {ex(e)}")
    for t, nfa in pc.terminals.items():
        f = N.finalize(nfa, reduce=False)
        # finalize numbers the start 0, which ``ex`` relies on
        for p, row in _codepoint_edges(f).items():
            alts = []
            for d, ranges in sorted(row.items()):
                cls = "".join(_cp_char(lo) if lo == hi else f"{_cp_char(lo)}-{_cp_char(hi)}"
                              for lo, hi in ranges)
                alts.append(f"[{cls}] {tname[t]}_{d}")
            if p in f.finals:
                alts.append('""')
            lines.append(f"{tname[t]}_{p} ::= " + (" | ".join(alts) if alts
                                                    else "[^\\x00-\\U0010FFFF]"))
    return "\n".join(lines) + "\n"
