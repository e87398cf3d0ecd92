"""Regular approximations of a :class:`~.grammar_cfg.CFG` as byte NFAs (never determinized).

Both approximations build one automaton per strongly connected component (SCC) ``M`` of the
nonterminal graph.  Every ``A ∈ M`` gets an *entry* state ``in(A)`` and an *exit* state
``out(A)``; ``A``'s right-hand side is laid out between them (Thompson construction), symbols
outside ``M`` are inlined as copies of their own automata, and an occurrence of ``B ∈ M`` is a
**call**: an ε-move to ``in(B)`` and an ε-move back from ``out(B)`` — back to *every* call site
of ``B``, i.e. the stack is forgotten.

* ``"over"`` — every occurrence inside ``M`` is a call.  This is the Mohri–Nederhof
  approximation (Mohri & Nederhof 2001, "Regular approximation of context-free grammars through
  transformation": ``A → α0 B1 α1 … Bm αm`` becomes ``A → α0 B1; B1' → α1 B2; …; Bm' → αm A'``):
  a regular **superset** of ``L(G)``.  It is exact on SCCs that are left-linear (every
  occurrence is the first symbol of its right-hand side) or right-linear (every occurrence is
  the last), so regular recursion stays exact.

* ``"under"`` — SCCs that are left- or right-linear are compiled exactly as above (loops).
  A *self-embedding* SCC is split into **groups**: cycles of first-symbol (left-linear) calls,
  then cycles of last-symbol (right-linear) calls, then singletons.  Calls inside a group in its
  linear direction stay shared calls (exact loops: ``expr: expr "+" term`` is not unrolled).  The
  remaining calls form a graph between groups; a depth-first search from the groups entered
  from outside marks its back edges (and every call from a group to itself).  A back-edge call
  enters the automaton one **nesting level** down, other calls inline the callee at the same
  level, and level 0 has no back-edge calls.  ``max_depth = k`` is the top level.  This is
  exactly the grammar :func:`unroll` writes out (nonterminals ``A@d``), so the language is a
  **subset** of ``L(G)`` containing every sentence with a derivation that nests at most ``k``
  back-edge calls.  Its size grows like (back-edge calls)^k: :data:`MAX_BYTE_STATES` bounds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import nfa as N
from .errors import GrammarError
from .grammar_cfg import CFG, NOTHING, START, Expr, PreparedCFG, alt, prepare, rep, seq

__all__ = ["approximate", "unroll", "scc_report", "MAX_BYTE_STATES"]

#: Largest byte NFA (states before finalization) an approximation may build; lifting a 2M-state
#: NFA over the 128k-token Llama-3 vocabulary is already minutes of work.
MAX_BYTE_STATES = 2_000_000


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
    from .grammar_cfg import _sccs

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
        gsucc: dict[int, list[int]] = {}
        for a in comp:
            for b, h, t in occ[a]:
                ga, gb = group[a], group[b]
                if ga == gb and (h if kind[ga] == "left" else t):
                    continue
                gsucc.setdefault(ga, [])
                if gb not in gsucc[ga]:
                    gsucc[ga].append(gb)
        entries = [a for a in pc.rules if pc.scc_of[a] != i
                   and any(k == "n" and s in members for k, s in _syms(pc.rules[a]))]
        order = []
        for a in entries:
            for k, s in _syms(pc.rules[a]):
                if k == "n" and s in members and group[s] not in order:
                    order.append(group[s])
        order += [g for g in sorted(kind) if g not in order]
        state: dict[int, int] = {}
        for root in order:
            if root in state:
                continue
            state[root] = 1
            stack = [(root, iter(gsucc.get(root, ())))]
            while stack:
                g, it = stack[-1]
                for h in it:
                    st = state.get(h)
                    if st is None:
                        state[h] = 1
                        stack.append((h, iter(gsucc.get(h, ()))))
                        break
                    if st == 1:
                        info.back.add((g, h))
                else:
                    state[g] = 2
                    stack.pop()
        out.append(info)
    return out


def _syms(e: Expr):
    from .grammar_cfg import symbols_of

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


class _Builder:
    def __init__(self, limit: int):
        self.n = 0
        self.edges: list[tuple[int, int, int]] = []
        self.eps: list[tuple[int, int]] = []
        self.limit = limit

    def new(self) -> int:
        self.n += 1
        if self.n > self.limit:
            raise _TooBig()
        return self.n - 1

    def embed(self, a: N.ByteNFA, s: int, t: int) -> None:
        """Copy ``a`` (finalized) between ``s`` and ``t``."""
        if not a.finals:
            return
        k = self.n
        self.n += a.num_states
        if self.n > self.limit:
            raise _TooBig()
        self.edges.extend((p + k, m, q + k) for p, m, q in a.edges)
        self.eps.append((s, a.start + k))
        self.eps.extend((f + k, t) for f in a.finals)


class _TooBig(Exception):
    pass


class _Approx:
    def __init__(self, pc: PreparedCFG, mode: str, depth: int, limit: int):
        self.pc = pc
        self.mode = mode
        self.depth = depth
        self.info = _analyse(pc)
        self.memo: dict = {}
        self.limit = limit
        self.total = 0

    def unrolled(self, i: int) -> bool:
        info = self.info[i]
        return self.mode == "under" and info.recursive and info.linear is None

    def nt(self, a: str, level: int | None = None) -> N.ByteNFA:
        """Finalized NFA of nonterminal ``a`` (at unrolling ``level``; default: full depth)."""
        i = self.pc.scc_of[a]
        info = self.info[i]
        if level is None or not self.unrolled(i):
            level = self.depth
        key = (a, level)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        grp = info.group[a] if self.unrolled(i) else 0
        n, ins, outs, edges, eps = self.block(i, grp, level)
        res = N.finalize(N.ByteNFA(n, ins[a], frozenset((outs[a],)), edges, eps), reduce=False)
        self.total += res.num_states
        if self.total > self.limit:
            raise _TooBig()
        self.memo[key] = res
        return res

    def block(self, i: int, grp: int, level: int):
        """The automaton of one group of SCC ``i`` (the whole SCC unless unrolling) at ``level``:
        (num_states, in-states, out-states, edges, epsilons)."""
        key = ("block", i, grp, level)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        info = self.info[i]
        unroll_here = self.unrolled(i)
        mine = [a for a in info.members if not unroll_here or info.group[a] == grp]
        members = set(info.members)
        b = _Builder(self.limit)
        ins = {a: b.new() for a in mine}
        outs = {a: b.new() for a in mine}
        caller = [""]

        def emit(e: Expr, s: int, t: int, head: bool, tail: bool) -> None:
            tag = e[0]
            if tag == "t":
                b.embed(self.pc.terminals[e[1]], s, t)
            elif tag == "n":
                name = e[1]
                if name not in members:
                    b.embed(self.nt(name), s, t)
                    return
                how = info.call(caller[0], name, head, tail) if unroll_here else "keep"
                if how == "keep":
                    b.eps.append((s, ins[name]))
                    b.eps.append((outs[name], t))
                elif how == "dag":
                    b.embed(self.nt(name, level), s, t)
                elif level > 0:
                    b.embed(self.nt(name, level - 1), s, t)
            elif tag == "seq":
                items = e[1]
                if not items:
                    b.eps.append((s, t))
                    return
                cur = s
                for j, p in enumerate(items):
                    nxt = t if j == len(items) - 1 else b.new()
                    emit(p, cur, nxt, head and j == 0, tail and j == len(items) - 1)
                    cur = nxt
            elif tag == "alt":
                for p in e[1]:
                    emit(p, s, t, head, tail)
            else:
                body, lo, hi = e[1], e[2], e[3]
                single = hi == 1
                h, tl = head and single, tail and single
                cur = s
                for _ in range(lo):
                    nxt = b.new()
                    emit(body, cur, nxt, h, tl)
                    cur = nxt
                if hi is None:
                    m = b.new()
                    b.eps.append((cur, m))
                    emit(body, m, m, h, tl)
                    b.eps.append((m, t))
                else:
                    for _ in range(hi - lo):
                        b.eps.append((cur, t))
                        nxt = b.new()
                        emit(body, cur, nxt, h, tl)
                        cur = nxt
                    b.eps.append((cur, t))

        for a in mine:
            caller[0] = a
            emit(self.pc.rules[a], ins[a], outs[a], True, True)
        res = (b.n, ins, outs, tuple(b.edges), tuple(b.eps))
        self.memo[key] = res
        return res


def approximate(
    cfg: CFG, mode: str = "over", max_depth: int = 2, *, max_states: int = MAX_BYTE_STATES,
    nfa_reduce: bool = False,
) -> tuple[N.ByteNFA, dict]:
    """Regular approximation of ``cfg`` as a finalized byte NFA (see the module docstring).

    Returns ``(nfa, info)`` with ``info`` = {"approximation", "max_depth", "self_embedding"
    (names of the unrolled / approximated SCCs' members), "byte_states", "byte_edges"}.

    Raises:
        GrammarError: the automaton would exceed ``max_states`` states (lower ``max_depth``).
    """
    if mode not in ("over", "under"):
        raise ValueError(f"approximation must be 'over' or 'under', not {mode!r}")
    if max_depth < 0:
        raise ValueError("max_depth must be >= 0")
    pc = prepare(cfg)
    ap = _Approx(pc, mode, max_depth, max_states)
    try:
        nfa = N.finalize(ap.nt(START), reduce=nfa_reduce)
    except _TooBig:
        raise GrammarError(
            f"the {mode!r} approximation needs more than {max_states} byte states"
            + (f" at max_depth={max_depth}; use a smaller max_depth" if mode == "under" else ""),
            cfg.start,
        ) from None
    se = [s.members for s in ap.info if s.recursive and s.linear is None]
    info = {
        "approximation": mode,
        "max_depth": max_depth if mode == "under" else None,
        "self_embedding": se,
        "byte_states": nfa.num_states,
        "byte_edges": nfa.num_edges,
    }
    return nfa, info


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
    from .grammar_cfg import symbols_of

    # drop the synthetic ignore prefix terminal into the new grammar's terminals unchanged
    terms = dict(pc.terminals)
    used = {s for e in rules.values() for k, s in symbols_of(e) if k == "t"}
    return CFG(rules, {k: v for k, v in terms.items() if k in used}, start_name, None, {},
               cfg.syntax + "+unrolled")
