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
  remaining calls form a weighted graph between groups; a small feedback arc set of it
  (:func:`_feedback_arcs`: fewest cut call occurrences, ties cut towards the entry, plus every
  call from a group to itself) are the **back-edge** calls.  A back-edge call enters the
  automaton one **nesting level** down, other calls inline the callee at the same level, and
  level 0 has no back-edge calls.  ``max_depth = k`` is the top level.  This is exactly the
  grammar :func:`unroll` writes out (nonterminals ``A@d``), so the language is a **subset** of
  ``L(G)`` containing every sentence with a derivation that nests at most ``k`` back-edge calls.
  On the Spider SQL grammar the back edges are the bracketed calls (sub-queries, aggregate
  arguments, ``CASE``, parenthesized conditions), so depth 0 is flat ``SELECT … WHERE …``.

Size: the automaton is built bottom-up, one finalized automaton per (nonterminal, level).
Copies of one sub-automaton share common prefixes and suffixes (:class:`_Builder`, the
``seq``/``alt`` factoring in :meth:`_Approx.block`), and every "under" nonterminal's automaton
is reduced by bisimulation in both directions (:func:`~.nfa_bisim.bisim_reduce`).  On the Spider
SQL grammar at depth 0 this took the automaton from 404,782 byte states (plain inlining) to
3,549.  The size still grows like (back-edge call sites)^k: :data:`MAX_BYTE_STATES` bounds it.

:func:`~.nfa_determinize.subset_construction` (re-exported here, with :class:`SubsetDFA` and
:func:`bisim_reduce`) determinizes only to *count* DFA states for the size tables; tractable
never runs a DFA.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import nfa as N
from .errors import GrammarError, InvalidArgumentError
from .grammar_cfg import CFG, NOTHING, START, Expr, PreparedCFG, alt, prepare, rep, seq
from .nfa_bisim import bisim_reduce
from .nfa_determinize import SubsetDFA, subset_construction

__all__ = [
    "approximate",
    "unroll",
    "scc_report",
    "bisim_reduce",
    "subset_construction",
    "SubsetDFA",
    "MAX_BYTE_STATES",
]

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


#: "over": copy every sub-automaton (exact, the best superset this construction gives) while
#: the nonterminal automata built sum to at most this many states; past it, share (see
#: :meth:`_Approx.classify`).  Every grammar in shared/data but rfc.lark and calflow.ebnf stays
#: below it (largest: geo_query.ebnf, 60,593); calflow.ebnf needs 162,025 (41,148 states in the
#: result), rfc.lark more than 2,000,000.
SHARE_BUDGET = 100_000
#: "over" with sharing: a nonterminal whose automaton exceeds this many states is shared.
SHARE_MIN = 2_000
#: "over" with sharing: a lexicalized rule (a terminal) used more than once is shared when its
#: automaton has more than this many states.
SHARE_TERMINAL_MIN = 64
#: prefix of the hub keys of shared terminals (no nonterminal name starts with a NUL)
_TERM = "\x00t:"
#: Largest number of groups for the feedback-arc local search (SQL's SCC has 32).
_FAS_SEARCH_MAX = 80
#: Merge bisimilar states of every "under" nonterminal automaton larger than this (smaller ones
#: cost more in numpy overhead than they save).
_BISIM_MIN = 64


class _Builder:
    """A flat ε-NFA under construction.  :meth:`embed` copies a finalized automaton between two
    states and shares an earlier copy of the same automaton when that is exact:

    * same target ``t`` and the earlier copy exits only to ``t``: enter it from ``s`` too
      (common suffix: ``… E | … E`` ending at one state);
    * same source ``s`` and the earlier copy is entered only from ``s``: let it exit to ``t``
      too (common prefix: ``E "=" … | E "<" …`` starting at one state).

    A copy with several entries and one exit (or one entry and several exits) reads exactly
    ``L(a)`` from each entry to each exit, so the language is unchanged.
    """

    def __init__(self, limit: int):
        self.n = 0
        self.edges: list[tuple[int, int, int]] = []
        self.eps: list[tuple[int, int]] = []
        self.limit = limit
        self._by_target: dict = {}
        self._by_source: dict = {}
        self._copies: list[list] = []  # [hub_in, hub_out, entries set, exits set]

    def new(self) -> int:
        self.n += 1
        if self.n > self.limit:
            raise _TooBig()
        return self.n - 1

    def embed(self, a: N.ByteNFA, s: int, t: int, key=None) -> None:
        """Copy ``a`` (finalized) between ``s`` and ``t`` (sharing a copy with the same ``key``
        when exact, see the class docstring)."""
        if not a.finals:
            return
        if key is None:
            k = self._copy(a)
            self.eps.append((s, a.start + k))
            self.eps.extend((f + k, t) for f in a.finals)
            return

        def build(hin: int, hout: int) -> None:
            k = self._copy(a)
            self.eps.append((hin, a.start + k))
            self.eps.extend((f + k, hout) for f in a.finals)

        self.share(key, s, t, build)

    def _copy(self, a: N.ByteNFA) -> int:
        k = self.n
        self.n += a.num_states
        if self.n > self.limit:
            raise _TooBig()
        self.edges.extend((p + k, m, q + k) for p, m, q in a.edges)
        return k

    def share(self, key, s: int, t: int, build) -> None:
        """Connect ``s`` to ``t`` through a piece whose language depends only on ``key``:
        reuse an earlier piece with the same key when exact (see the class docstring), else
        ``build(hub_in, hub_out)`` a new one between two fresh hub states."""
        c = self._by_target.get((key, t))
        if c is not None and len(c[3]) == 1:
            c[2].add(s)
            self.eps.append((s, c[0]))
            return
        c = self._by_source.get((key, s))
        if c is not None and len(c[2]) == 1:
            c[3].add(t)
            self.eps.append((c[1], t))
            return
        hin, hout = self.new(), self.new()
        build(hin, hout)
        self.eps.append((s, hin))
        self.eps.append((hout, t))
        c = [hin, hout, {s}, {t}]
        self._by_target[key, t] = c
        self._by_source[key, s] = c


class _TooBig(Exception):
    pass


class _Approx:
    def __init__(self, pc: PreparedCFG, mode: str, depth: int, limit: int,
                 info: list[_SCCInfo] | None = None):
        self.pc = pc
        self.mode = mode
        self.depth = depth
        self.info = _analyse(pc) if info is None else info
        self.memo: dict = {}
        self.limit = limit
        self.total = 0
        #: nonterminals laid out inline at every occurrence ("over" with sharing only)
        self.expand: set[str] = set()
        #: terminals laid out once and called ("over" with sharing only)
        self.shared_terms: set[str] = set()

    # ----------------------------------------------------------------- "over" with sharing

    def _occurrences(self, e: Expr, mult: int, acc: list) -> None:
        """(symbol, copies) for every leaf of ``e``: how many times the layout copies it
        (``x{lo,hi}`` lays ``x`` out ``hi`` times, ``lo + 1`` times when unbounded)."""
        tag = e[0]
        if tag in ("t", "n"):
            acc.append((e, mult))
        elif tag in ("seq", "alt"):
            for p in e[1]:
                self._occurrences(p, mult, acc)
        else:
            k = e[3] if e[3] is not None else e[2] + 1
            self._occurrences(e[1], mult * max(k, 1), acc)

    def classify(self, share_min: int) -> dict[str, str]:
        """Decide, bottom-up over the SCCs, how each nonterminal is compiled by
        :meth:`shared_nfa`: ``"copy"`` (a finalized automaton of at most ``share_min`` states
        that calls nothing shared: copied at each occurrence, exact), ``"expand"`` (a
        non-recursive rule that calls something shared and costs at most ``share_min`` states
        to lay out: laid out inline at each occurrence) or ``"share"`` (one copy in the whole
        automaton, entered from every occurrence and left to every return point — the
        Mohri–Nederhof treatment, a superset).  ``$start`` is always shared."""
        cls: dict[str, str] = {}
        cost: dict[str, int] = {}  # states one occurrence costs (a call costs 2)

        # lexicalized rules are terminals: share the big ones used more than once too
        uses: dict[str, int] = {}
        for e in self.pc.rules.values():
            acc: list = []
            self._occurrences(e, 1, acc)
            for x, m in acc:
                if x[0] == "t":
                    uses[x[1]] = uses.get(x[1], 0) + m
        self.shared_terms = {
            "<" + a + ">" for a in self.pc.lexicalized
            if uses.get("<" + a + ">", 0) > 1
            and self.pc.terminals["<" + a + ">"].num_states > SHARE_TERMINAL_MIN
        }

        def leaf_cost(e: Expr, in_place: bool) -> int:
            if e[0] == "t":
                if in_place and e[1] in self.shared_terms:
                    return 2
                return self.pc.terminals[e[1]].num_states
            return cost[e[1]]

        for i, comp in enumerate(self.pc.sccs):
            members = set(comp)
            occ: list = []
            for a in comp:
                self._occurrences(self.pc.rules[a], 1, occ)
            outside = [(e, m) for e, m in occ if e[0] == "t" or e[1] not in members]
            dirty = any(e[0] == "n" and cls[e[1]] != "copy" for e, _m in outside)
            est = sum(m * leaf_cost(e, dirty) for e, m in outside) + len(occ)
            how = "share"
            if START in members:
                pass
            elif not dirty and est <= share_min:
                sizes = [self.nt(a).num_states for a in comp]
                if max(sizes) <= share_min:
                    how = "copy"
                    for a, n in zip(comp, sizes):
                        cost[a] = n
            elif dirty and not self.pc.recursive[i] and est <= share_min:
                how = "expand"
                cost[comp[0]] = est
            for a in comp:
                cls[a] = how
                if how == "share":
                    cost[a] = 2
        self.expand = {a for a, c in cls.items() if c == "expand"}
        return cls

    def shared_nfa(self, share_min: int) -> N.ByteNFA:
        """The "over" automaton with big sub-automata shared (see :meth:`classify`): one
        builder holds every shared nonterminal ``A`` once, between ``in(A)`` and ``out(A)``;
        each occurrence of ``A`` anywhere is an ε-move to ``in(A)`` and one back from
        ``out(A)``.  Size: at most about ``share_min`` states per rule occurrence."""
        cls = self.classify(share_min)
        mine = [a for a in self.pc.rules if cls[a] == "share"]
        b = _Builder(self.limit)
        ins = {a: b.new() for a in mine}
        outs = {a: b.new() for a in mine}
        for t in sorted(self.shared_terms):
            ins[_TERM + t], outs[_TERM + t] = b.new(), b.new()
            b.embed(self.pc.terminals[t], ins[_TERM + t], outs[_TERM + t])
        self._layout(b, mine, ins, outs, set(mine), None, self.depth, set())
        return N.finalize(N.ByteNFA(b.n, ins[START], frozenset((outs[START],)), tuple(b.edges),
                                    tuple(b.eps)), reduce=False)

    def unrolled(self, i: int) -> bool:
        info = self.info[i]
        return self.mode == "under" and info.recursive and info.linear is None

    def plain(self, i: int) -> set[str]:
        """Members of self-embedding SCC ``i`` that are alone in their group and never call
        their group in its linear direction (no loop of their own): safe to lay out inline."""
        hit = self.memo.get(("plain", i))
        if hit is not None:
            return hit
        info = self.info[i]
        members = set(info.members)
        out = set()
        for a in info.members:
            g = info.group[a]
            if sum(1 for x in info.members if info.group[x] == g) != 1:
                continue
            acc: list = []
            _positions(self.pc.rules[a], members, True, True, acc)
            if all(info.call(a, b, h, t) != "keep" for b, h, t in acc):
                out.add(a)
        self.memo[("plain", i)] = out
        return out

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
        if self.mode == "under" and res.num_states > _BISIM_MIN:
            res = bisim_reduce(res)
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
        b = _Builder(self.limit)
        ins = {a: b.new() for a in mine}
        outs = {a: b.new() for a in mine}
        plain = self.plain(i) if unroll_here else set()
        self._layout(b, mine, ins, outs, set(info.members), info if unroll_here else None,
                     level, plain)
        res = (b.n, ins, outs, tuple(b.edges), tuple(b.eps))
        self.memo[key] = res
        return res

    def _layout(self, b: _Builder, mine: list[str], ins: dict, outs: dict, members: set,
                info: _SCCInfo | None, level: int, plain: set) -> None:
        """Lay out the rules of ``mine`` between ``ins[a]`` and ``outs[a]`` in ``b``.  An
        occurrence of a name in ``members`` is a call (``info is None``) or is compiled as
        ``info.call`` says (unrolling); a name in ``self.expand`` is laid out inline; any other
        name is a copy of its finalized automaton (:meth:`nt`)."""
        unroll_here = info is not None
        caller = [""]

        seq_memo: dict[tuple[int, tuple], int] = {}

        def leaf(e: Expr, head: bool, tail: bool) -> tuple:
            """How a symbol occurrence compiles: ("embed", nfa-thunk, key), ("keep", name),
            ("inline", name) or ("drop",)."""
            if e[0] == "t":
                if _TERM + e[1] in ins:
                    return ("keep", _TERM + e[1])
                return ("embed", lambda: self.pc.terminals[e[1]], ("t", e[1]))
            name = e[1]
            if name not in members:
                if name in self.expand:
                    return ("inline", name)
                return ("embed", lambda: self.nt(name), ("n", name, self.depth))
            how = info.call(caller[0], name, head, tail) if unroll_here else "keep"
            if how == "keep":
                return ("keep", name)
            if how == "dag" and name in plain:
                return ("inline", name)
            if how == "dag":
                return ("embed", lambda: self.nt(name, level), ("n", name, level))
            if level > 0:
                return ("embed", lambda: self.nt(name, level - 1), ("n", name, level - 1))
            return ("drop",)

        def emit(e: Expr, s: int, t: int, head: bool, tail: bool) -> None:
            tag = e[0]
            if tag in ("t", "n"):
                how = leaf(e, head, tail)
                if how[0] == "embed":
                    b.embed(how[1](), s, t, how[2])
                elif how[0] == "keep":
                    b.eps.append((s, ins[how[1]]))
                    b.eps.append((outs[how[1]], t))
                elif how[0] == "inline":
                    # a member without linear self-calls: lay its rule out here, so that its
                    # calls can share copies with this rule's (common prefixes / suffixes)
                    saved = caller[0]
                    caller[0] = how[1]
                    emit(self.pc.rules[how[1]], s, t, True, True)
                    caller[0] = saved
            elif tag == "seq":
                items = e[1]
                if not items:
                    b.eps.append((s, t))
                    return
                cur = s
                for j, p in enumerate(items):
                    h, tl = head and j == 0, tail and j == len(items) - 1
                    if j == len(items) - 1:
                        emit(p, cur, t, h, tl)
                        break
                    # common prefixes: the state after reading one embedded symbol from `cur`
                    # is shared by every sequence that reads it there (it has no other entry)
                    key = None
                    if p[0] in ("t", "n"):
                        how = leaf(p, h, tl)
                        if how[0] in ("embed", "inline"):
                            key = (cur, how[2] if how[0] == "embed" else how)
                            hit = seq_memo.get(key)
                            if hit is not None:
                                cur = hit
                                continue
                    nxt = b.new()
                    emit(p, cur, nxt, h, tl)
                    if key is not None:
                        seq_memo[key] = nxt
                    cur = nxt
            elif tag == "alt":
                # common suffixes: alternatives ending in the same symbol (compiled the same
                # way) read their prefixes into one state, then that symbol once:
                # ``B | A "and" B | A "or" B`` lays ``B`` out once, not three times
                groups: dict = {}
                for p in e[1]:
                    items = p[1] if p[0] == "seq" else (p,)
                    if items and items[-1][0] in ("t", "n"):
                        how = leaf(items[-1], head and len(items) == 1, tail)
                        if how[0] in ("embed", "inline"):
                            k = how[2] if how[0] == "embed" else how
                            groups.setdefault(k, []).append((p, items))
                            continue
                    emit(p, s, t, head, tail)
                for grp in groups.values():
                    if len(grp) == 1:
                        emit(grp[0][0], s, t, head, tail)
                        continue
                    mid = b.new()
                    for _p, items in grp:
                        emit(seq(*items[:-1]), s, mid, head, False)
                    last = grp[0][1]
                    emit(last[-1], mid, t, head and len(last) == 1, tail)
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
        raise InvalidArgumentError(f"approximation must be 'over' or 'under', not {mode!r}")
    if max_depth < 0:
        raise InvalidArgumentError("max_depth must be >= 0")
    pc = prepare(cfg)
    shared = False
    try:
        if mode == "over":
            # exact copies of every sub-automaton while that stays small; else share
            ap = _Approx(pc, mode, max_depth, min(max_states, SHARE_BUDGET))
            try:
                nfa = N.finalize(ap.nt(START), reduce=nfa_reduce)
            except _TooBig:
                ap = _Approx(pc, mode, max_depth, max_states, ap.info)
                nfa = N.finalize(ap.shared_nfa(SHARE_MIN), reduce=nfa_reduce)
                shared = True
        else:
            ap = _Approx(pc, mode, max_depth, max_states)
            nfa = N.finalize(ap.nt(START), reduce=nfa_reduce)
    except _TooBig:
        raise GrammarError(
            f"the {mode!r} approximation needs more than {max_states} byte states"
            + ((f" at max_depth={max_depth}; use a smaller max_depth" if max_depth > 0 else
                " even at max_depth=0 (no self-embedding at all: the non-recursive expansion "
                "alone is that large); raise max_states or use approximation='over'")
               if mode == "under" else ""),
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
    if mode == "over":
        info["shared"] = shared
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
