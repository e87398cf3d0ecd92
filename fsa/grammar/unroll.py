"""The grammar whose language the ``"under"`` approximation accepts, written out as a CFG."""

from __future__ import annotations

from .cfg import CFG, NOTHING, START, Expr, alt, prepare, rep, seq, symbols_of
from .scc import _analyse

__all__ = ["unroll"]


def unroll(cfg: CFG, max_depth: int) -> CFG:
    """The grammar whose language the ``"under"`` approximation accepts, written out as a CFG:
    each member ``A`` of a self-embedding SCC becomes ``A@0 … A@k``; occurrences in the SCC's
    linear direction stay at the same level, the others go one level down (dropped at level 0).
    (Used by the tests to check the automaton against the Earley checker.)"""
    pc = prepare(cfg)
    info = _analyse(pc)
    se = {a: i for i, s in enumerate(info) if s.recursive and s.linear is None for a in s.members}
    rules: dict[str, Expr] = {}

    def name(a: str, d: int) -> str:
        return f"{a}@{d}" if a in se else a

    def tr(e: Expr, home: str | None, d: int, head: bool, tail: bool) -> Expr:
        tag = e[0]
        if tag == "t":
            return e
        if tag == "n":
            a = e[1]
            if a not in se:
                return e
            if home is None or se[a] != se[home]:
                return ("n", name(a, max_depth))
            how = info[se[a]].call(home, a, head, tail)
            if how in ("keep", "dag"):
                return ("n", name(a, d))
            return ("n", name(a, d - 1)) if d > 0 else NOTHING
        if tag == "seq":
            items = e[1]
            return seq(
                *(
                    tr(p, home, d, head and j == 0, tail and j == len(items) - 1)
                    for j, p in enumerate(items)
                )
            )
        if tag == "alt":
            return alt(*(tr(p, home, d, head, tail) for p in e[1]))
        single = e[3] == 1
        return rep(tr(e[1], home, d, head and single, tail and single), e[2], e[3])

    for a, e in pc.rules.items():
        if a == START:
            continue
        if a in se:
            for d in range(max_depth + 1):
                rules[name(a, d)] = tr(e, a, d, True, True)
        else:
            rules[a] = tr(e, None, 0, True, True)
    start_expr = pc.rules[START]
    start_name = "$unrolled_start"
    rules[start_name] = tr(start_expr, None, 0, True, True)
    # drop the synthetic ignore prefix terminal into the new grammar's terminals unchanged
    terms = dict(pc.terminals)
    used = {s for e in rules.values() for k, s in symbols_of(e) if k == "t"}
    return CFG(rules, {k: v for k, v in terms.items() if k in used}, start_name, None, {},
               cfg.syntax + "+unrolled")
