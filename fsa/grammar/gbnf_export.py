"""Export a :class:`~.cfg.CFG` as GBNF text (llama.cpp / xgrammar syntax) with the same language,
for engines that read only GBNF (the grammar benchmarks give Lark grammars to xgrammar this way).
"""

from __future__ import annotations

from .. import nfa as N
from ..nfa import ByteNFA
from .cfg import CFG, START, Expr, prepare

__all__ = ["to_gbnf"]


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
    NFA, ``%ignore`` already appended by :func:`~.cfg.prepare`) becomes right-linear
    rules over code points, one rule per NFA state, its UTF-8 byte paths folded into character
    classes.  Names are renamed to ``r<i>`` / ``t<i>_<state>``.  Used to give the grammars of
    other front ends (Lark) to engines that read only GBNF/EBNF (xgrammar).
    """
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
