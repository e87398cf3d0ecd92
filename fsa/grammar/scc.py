"""Strongly connected components of a grammar's nonterminal graph, classified for the regular
approximations (:mod:`.approx`) and :func:`.unroll.unroll`.

An SCC is *left-linear* (every recursive occurrence is the first symbol of its right-hand side),
*right-linear* (every one is the last) or *self-embedding*.  A self-embedding SCC is split into
**groups** — cycles of first-symbol calls, then cycles of last-symbol calls, then singletons —
and a small feedback arc set of the group graph (:func:`_feedback_arcs`) marks the **back-edge**
calls, the ones that go one nesting level down in the ``"under"`` approximation.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cfg import CFG, Expr, PreparedCFG, _sccs, prepare, symbols_of

__all__ = ["scc_report"]

#: Largest number of groups for the feedback-arc local search (SQL's SCC has 32).
_FAS_SEARCH_MAX = 80

@dataclass
class _SCCInfo:
    members: list[str]
    recursive: bool
    linear: str | None  # "left" | "right" | None (self-embedding)
    group: dict  # member -> group id (groups of members linked by kept linear calls)
    kind: dict  # group id -> "left" | "right"
    back: set  # (group, group) pairs whose non-kept calls go one level down
    n_left: int
    n_right: int
    n_other: int

    def call(self, a: str, b: str, head: bool, tail: bool) -> str:
        """How the occurrence of member ``b`` in member ``a``'s rule is compiled: "keep" (a shared
        call: linear recursion), "back" (one nesting level down) or "dag" (same level, inlined)."""
        ga, gb = self.group[a], self.group[b]
        if ga == gb and (head if self.kind[ga] == "left" else tail):
            return "keep"
        return "back" if (ga, gb) in self.back else "dag"


def _positions(e: Expr, members: set[str], head: bool, tail: bool, acc: list) -> None:
    """Collect (name, head, tail) for every occurrence of a member in ``e``."""
    tag = e[0]
    if tag == "n":
        if e[1] in members:
            acc.append((e[1], head, tail))
    elif tag == "t":
        return
    elif tag == "seq":
        items = e[1]
        for i, p in enumerate(items):
            _positions(p, members, head and i == 0, tail and i == len(items) - 1, acc)
    elif tag == "alt":
        for p in e[1]:
            _positions(p, members, head, tail, acc)
    else:
        single = e[3] == 1
        _positions(e[1], members, head and single, tail and single, acc)


def _cyclic_sccs(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    return [c for c in _sccs(nodes, edges) if len(c) > 1 or c[0] in edges.get(c[0], ())]


def _analyse(pc: PreparedCFG) -> list[_SCCInfo]:
    out = []
    # entry order: members referenced from outside their SCC, in rule order
    for i, comp in enumerate(pc.sccs):
        members = set(comp)
        if not pc.recursive[i]:
            out.append(_SCCInfo(comp, False, "right", {a: 0 for a in comp}, {0: "right"},
                                set(), 0, 0, 0))
            continue
        occ: dict[str, list] = {}
        for a in comp:
            acc: list = []
            _positions(pc.rules[a], members, True, True, acc)
            occ[a] = acc
        allocc = [o for a in comp for o in occ[a]]
        n_left = sum(1 for _, h, _t in allocc if h)
        n_right = sum(1 for _, _h, t in allocc if t)
        n_other = sum(1 for _, h, t in allocc if not h and not t)
        linear = None
        if all(t for _, _h, t in allocc):
            linear = "right"
        elif all(h for _, h, _t in allocc):
            linear = "left"
        if linear is not None:
            out.append(_SCCInfo(comp, True, linear, {a: 0 for a in comp}, {0: linear}, set(),
                                n_left, n_right, n_other))
            continue
        # self-embedding: groups of left-linear (head) cycles, then right-linear (tail) cycles
        group: dict[str, int] = {}
        kind: dict[int, str] = {}
        head_g = {a: {b for b, h, _t in occ[a] if h} for a in comp}
        for c in _cyclic_sccs(comp, head_g):
            gid = len(kind)
            kind[gid] = "left"
            for a in c:
                group[a] = gid
        rest = [a for a in comp if a not in group]
        tail_g = {a: {b for b, _h, t in occ[a] if t and b not in group} for a in rest}
        for c in _cyclic_sccs(rest, tail_g):
            gid = len(kind)
            kind[gid] = "right"
            for a in c:
                group[a] = gid
        for a in comp:
            if a not in group:
                gid = len(kind)
                kind[gid] = "right"
                group[a] = gid
        info = _SCCInfo(comp, True, None, group, kind, set(), n_left, n_right, n_other)
        # group graph of the non-kept calls; DFS back edges (and self-loops) are "back"
        weight: dict[tuple[int, int], int] = {}
        for a in comp:
            for b, h, t in occ[a]:
                ga, gb = group[a], group[b]
                if ga == gb and (h if kind[ga] == "left" else t):
                    continue
                weight[ga, gb] = weight.get((ga, gb), 0) + 1
        entries = [a for a in pc.rules if pc.scc_of[a] != i
                   and any(k == "n" and s in members for k, s in _syms(pc.rules[a]))]
        first = []
        for a in entries:
            for k, s in _syms(pc.rules[a]):
                if k == "n" and s in members and group[s] not in first:
                    first.append(group[s])
        info.back = _feedback_arcs(sorted(kind), weight, first)
        out.append(info)
    return out


def _feedback_arcs(nodes: list[int], weight: dict, first: list[int]) -> set:
    """A small feedback arc set of the weighted group graph: self-loops plus the arcs that go
    backwards in an ordering of the groups found by local search.

    Cost of an ordering: (total weight of backward arcs, where weight = number of call
    occurrences; then the number of backward arcs that do not return towards the entry, i.e.
    whose target is not closer (BFS) to the groups entered from outside, ``first``).  Cutting
    few occurrences keeps the unrolling small (each cut occurrence embeds a copy of the level
    below), and the tie-break makes depth count the calls a grammar writer calls nesting: on the
    Spider SQL grammar the cut arcs are the bracketed ones (``subquery → query_expr``,
    ``AGGREGATION expression_math ")"``, ``CASE … WHEN``, parenthesized boolean expressions), not
    the 35 ``comparison → expression_math`` calls a depth-first search closes cycles on.
    """
    back = {(a, b) for (a, b) in weight if a == b}
    arcs = [(a, b, w) for (a, b), w in weight.items() if a != b]
    if not arcs:
        return back
    succ: dict[int, list[int]] = {g: [] for g in nodes}
    for a, b, _w in arcs:
        succ[a].append(b)
    big = len(nodes) + 1
    dist = {g: big for g in nodes}
    frontier = [g for g in first if g in dist]
    for g in frontier:
        dist[g] = 0
    while frontier:
        nxt = []
        for g in frontier:
            for h in succ[g]:
                if dist[h] == big:
                    dist[h] = dist[g] + 1
                    nxt.append(h)
        frontier = nxt
    # an arc cut "against" the BFS direction costs one extra unit (weights are scaled by M)
    M = 4 * len(arcs) + 1
    cost_arc = [(a, b, w * M + (0 if dist[b] < dist[a] else 1)) for a, b, w in arcs]

    def cost(order: list[int]) -> int:
        pos = {g: k for k, g in enumerate(order)}
        return sum(c for a, b, c in cost_arc if pos[b] < pos[a])

    order = sorted(nodes, key=lambda g: (dist[g], g))
    best = cost(order)
    # local search costs O(groups² · arcs) per sweep: skip it on huge SCCs (BFS order is a
    # valid, if larger, feedback arc set)
    improved = len(nodes) <= _FAS_SEARCH_MAX
    while improved:  # move one group to its best position until no move helps
        improved = False
        for g in list(order):
            rest = [x for x in order if x != g]
            for k in range(len(rest) + 1):
                cand = rest[:k] + [g] + rest[k:]
                c = cost(cand)
                if c < best:
                    best, order, improved = c, cand, True
    pos = {g: k for k, g in enumerate(order)}
    back |= {(a, b) for a, b, _w in arcs if pos[b] < pos[a]}
    return back


def _syms(e: Expr):
    return symbols_of(e)


def scc_report(cfg: CFG) -> list[dict]:
    """Per recursive SCC: members, whether it is left/right-linear or self-embedding, and the
    counts of first/last/inner recursive occurrences (for the coverage tables)."""
    pc = prepare(cfg)
    return [
        {
            "members": s.members,
            "kind": (s.linear + "-linear") if s.linear else "self-embedding",
            "groups": len(s.kind),
            "back_edges": len(s.back),
            "first": s.n_left,
            "last": s.n_right,
            "inner": s.n_other,
        }
        for s in _analyse(pc)
        if s.recursive
    ]

