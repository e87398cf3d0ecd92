"""Exact incremental Earley recognizer over bytes for a :class:`~.cfg.CFG`.

Semantics, as a loop::

    accepts(text)  == text ∈ L(G)                         (G with %ignore made explicit)
    viable(prefix) == any(prefix + w ∈ L(G) for w in all byte strings)

**Algorithm.**  Earley's recognizer (Earley 1970) with two twists:

* right-hand sides are regular (the CFG is extended), so an item is ``(g, origin)`` where ``g``
  is a state of the nonterminal's right-hand-side automaton over symbols ("RTN-Earley");
* terminals are byte languages: a terminal predicted at column ``j`` becomes a *scanning item*
  ``(terminal, dfa_state, j)`` that steps byte by byte through the terminal's automaton
  (determinized lazily, one subset per visited state, cached per terminal).  When it reaches an
  accepting state at column ``i`` the items of column ``j`` waiting on the terminal advance into
  column ``i``.  A token boundary inside a terminal is therefore no problem.

Empty derivations use the Aycock–Horspool rule (a predicted nullable symbol is also skipped).
Unproductive symbols are removed beforehand (:func:`~.cfg.prepare`) and right-hand-side
automata are trimmed, so *every* item in a column lies on a derivation of a sentence: a prefix is
viable iff its column is non-empty.

**Incrementality.**  Columns are immutable once built and link to their parent; they form a
trie keyed by bytes (``column.children[byte]``).  ``viable(p + t)`` walks the trie along ``p``
(built already by an earlier probe) and builds only the columns for ``t``'s bytes, so the many
probes AWRS makes from one prefix cost one column per new byte.  The trie is dropped and rebuilt
when it holds more than ``max_columns`` columns.
"""

from __future__ import annotations

from collections import deque

from .cfg import CFG, START, Expr, PreparedCFG, prepare

__all__ = ["EarleyChecker"]


class _LazyDFA:
    """Subset construction of an epsilon-free byte NFA, one state at a time."""

    __slots__ = ("out", "sets", "index", "trans", "final", "finals_nfa")

    def __init__(self, nfa):
        self.out: list[list[tuple[int, int]]] = [[] for _ in range(nfa.num_states)]
        for s, m, d in nfa.edges:
            self.out[s].append((m, d))
        self.finals_nfa = nfa.finals
        self.sets: list[frozenset[int]] = []
        self.index: dict[frozenset[int], int] = {}
        self.trans: list[dict[int, int]] = []
        self.final: list[bool] = []
        self._add(frozenset((nfa.start,)))

    def _add(self, s: frozenset[int]) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.sets)
            self.sets.append(s)
            self.trans.append({})
            self.final.append(bool(s & self.finals_nfa))
        return i

    def step(self, d: int, b: int) -> int:
        bit = 1 << b
        nxt = frozenset(q for p in self.sets[d] for m, q in self.out[p] if m & bit)
        r = self._add(nxt) if nxt else -1
        self.trans[d][b] = r
        return r


class _Column:
    __slots__ = ("parent", "depth", "items", "waiting", "terms", "children", "accepting")

    def __init__(self, parent, depth: int):
        self.parent = parent
        self.depth = depth
        self.items: set = set()
        self.waiting: dict[int, list] = {}
        self.terms: dict = {}
        self.children: dict[int, _Column] = {}
        self.accepting = False

    @property
    def alive(self) -> bool:
        return bool(self.items) or bool(self.terms)


def _sym_nfa(e: Expr, sym_id) -> tuple[int, list[tuple[int, int, int]], set[int]]:
    """Epsilon-free trimmed automaton over symbol ids for one right-hand side.

    Returns (num_states, edges (src, sym, dst), finals); the start state is 0.
    """
    edges: list[tuple[int, int, int]] = []
    eps: list[tuple[int, int]] = []
    count = [2]

    def new() -> int:
        count[0] += 1
        return count[0] - 1

    def build(x: Expr, s: int, t: int) -> None:
        tag = x[0]
        if tag in ("t", "n"):
            edges.append((s, sym_id(x), t))
        elif tag == "seq":
            items = x[1]
            if not items:
                eps.append((s, t))
                return
            cur = s
            for i, p in enumerate(items):
                nxt = t if i == len(items) - 1 else new()
                build(p, cur, nxt)
                cur = nxt
        elif tag == "alt":
            for p in x[1]:
                build(p, s, t)
        else:
            body, lo, hi = x[1], x[2], x[3]
            cur = s
            for _ in range(lo):
                nxt = new()
                build(body, cur, nxt)
                cur = nxt
            if hi is None:
                m = new()
                eps.append((cur, m))
                build(body, m, m)
                eps.append((m, t))
            else:
                for _ in range(hi - lo):
                    eps.append((cur, t))
                    nxt = new()
                    build(body, cur, nxt)
                    cur = nxt
                eps.append((cur, t))

    build(e, 0, 1)
    n = count[0]
    esucc: list[list[int]] = [[] for _ in range(n)]
    for s, d in eps:
        esucc[s].append(d)
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for s, y, d in edges:
        out[s].append((y, d))
    new_edges = set()
    finals = set()
    for s in range(n):
        seen = {s}
        stack = [s]
        while stack:
            x = stack.pop()
            for y in esucc[x]:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        if 1 in seen:
            finals.add(s)
        for q in seen:
            for y, d in out[q]:
                new_edges.add((s, y, d))
    # trim: accessible from 0 and co-accessible to a final
    fwd: dict[int, set[int]] = {}
    bwd: dict[int, set[int]] = {}
    for s, _y, d in new_edges:
        fwd.setdefault(s, set()).add(d)
        bwd.setdefault(d, set()).add(s)
    acc = {0}
    stack = [0]
    while stack:
        x = stack.pop()
        for y in fwd.get(x, ()):
            if y not in acc:
                acc.add(y)
                stack.append(y)
    co = {f for f in finals if f in acc}
    stack = list(co)
    while stack:
        x = stack.pop()
        for y in bwd.get(x, ()):
            if y in acc and y not in co:
                co.add(y)
                stack.append(y)
    keep = [0] + sorted(co - {0}) if 0 in co else [0]
    ren = {s: i for i, s in enumerate(keep)}
    out_edges = sorted(
        (ren[s], y, ren[d]) for s, y, d in new_edges if s in ren and d in ren and 0 in co
    )
    return len(keep), out_edges, {ren[f] for f in finals if f in ren and 0 in co}


class EarleyChecker:
    """Exact recognizer for a :class:`CFG` (see the module docstring).

    Args:
        cfg: the grammar.
        max_columns: cached columns kept before the prefix trie is dropped.
    """

    def __init__(self, cfg: CFG, *, max_columns: int = 500_000):
        self.cfg = cfg
        pc: PreparedCFG = prepare(cfg)
        self.prepared = pc
        nts = sorted(pc.rules)
        terms = sorted(pc.terminals)
        self.nt_names = nts
        self.term_names = terms
        nt_id = {a: i for i, a in enumerate(nts)}
        nn = len(nts)
        t_id = {t: nn + i for i, t in enumerate(terms)}
        self.num_nt = nn

        def sym_id(x: Expr) -> int:
            return nt_id[x[1]] if x[0] == "n" else t_id[x[1]]

        owner: list[int] = []
        final: list[bool] = []
        out: list[list[tuple[int, int]]] = []
        nt_start = [0] * nn
        for a in nts:
            n, edges, finals = _sym_nfa(pc.rules[a], sym_id)
            base = len(owner)
            nt_start[nt_id[a]] = base
            for s in range(n):
                owner.append(nt_id[a])
                final.append(s in finals)
                out.append([])
            for s, y, d in edges:
                out[base + s].append((y, base + d))
        self.owner, self.final, self.out, self.nt_start = owner, final, out, nt_start
        self.num_rule_states = len(owner)
        # nullable symbols (fixpoint over the right-hand-side automata)
        nullable = [False] * (nn + len(terms))
        for t in terms:
            nullable[t_id[t]] = pc.nullable_terminal(t)
        # worklist: a rule is re-checked only when a symbol it reads became nullable
        users: dict[int, set[int]] = {}
        for g, row in enumerate(out):
            for y, _g2 in row:
                users.setdefault(y, set()).add(owner[g])
        queue = deque(range(nn))
        queued = set(queue)
        while queue:
            i = queue.popleft()
            queued.discard(i)
            if nullable[i]:
                continue
            g0 = nt_start[i]
            seen = {g0}
            stack = [g0]
            hit = False
            while stack and not hit:
                g = stack.pop()
                if final[g]:
                    hit = True
                    break
                for y, g2 in out[g]:
                    if nullable[y] and g2 not in seen:
                        seen.add(g2)
                        stack.append(g2)
            if hit:
                nullable[i] = True
                for u in users.get(i, ()):
                    if not nullable[u] and u not in queued:
                        queue.append(u)
                        queued.add(u)
        self.nullable = nullable
        self.dfas = [_LazyDFA(pc.terminals[t]) for t in terms]
        self.start_id = nt_id[START]
        self.max_columns = max_columns
        self.num_columns = 0
        self.hits = 0
        self.root = self._new_root()

    # ------------------------------------------------------------------ core
    def _new_root(self) -> _Column:
        col = _Column(None, 0)
        self._close(col, [(self.nt_start[self.start_id], col)], col)
        self.num_columns = 1
        return col

    def _close(self, col: _Column, seeds: list, root: _Column) -> None:
        items = col.items
        waiting = col.waiting
        terms = col.terms
        owner, final, out, nt_start = self.owner, self.final, self.out, self.nt_start
        nullable = self.nullable
        nn = self.num_nt
        agenda = []
        for it in seeds:
            if it not in items:
                items.add(it)
                agenda.append(it)
        predicted: set[int] = set()
        while agenda:
            g, org = agenda.pop()
            if final[g]:
                a = owner[g]
                if a == self.start_id and org is root:
                    col.accepting = True
                for it in list(org.waiting.get(a, ())):
                    if it not in items:
                        items.add(it)
                        agenda.append(it)
            for y, g2 in out[g]:
                nxt = (g2, org)
                w = waiting.get(y)
                if w is None:
                    waiting[y] = [nxt]
                else:
                    w.append(nxt)
                if y < nn:
                    if y not in predicted:
                        predicted.add(y)
                        it = (nt_start[y], col)
                        if it not in items:
                            items.add(it)
                            agenda.append(it)
                else:
                    key = (y - nn, col)
                    if key not in terms:
                        terms[key] = 0
                if nullable[y] and nxt not in items:
                    items.add(nxt)
                    agenda.append(nxt)

    def _advance(self, col: _Column, b: int) -> _Column:
        child = col.children.get(b)
        if child is not None:
            self.hits += 1
            return child
        new = _Column(col, col.depth + 1)
        seeds: list = []
        terms = new.terms
        dfas = self.dfas
        nn = self.num_nt
        for key, d in col.terms.items():
            dfa = dfas[key[0]]
            d2 = dfa.trans[d].get(b)
            if d2 is None:
                d2 = dfa.step(d, b)
            if d2 < 0:
                continue
            terms[key] = d2
            if dfa.final[d2]:
                seeds.extend(key[1].waiting[key[0] + nn])
        if seeds:
            self._close(new, seeds, self.root)
        if self.num_columns >= self.max_columns:
            self.root.children.clear()
            self.num_columns = 0
        col.children[b] = new
        self.num_columns += 1
        return new

    def column(self, prefix: bytes | str) -> _Column:
        """The Earley column after ``prefix`` (built incrementally, cached in the trie)."""
        if isinstance(prefix, str):
            prefix = prefix.encode("utf-8")
        col = self.root
        for b in prefix:
            if not col.alive:
                return col
            col = self._advance(col, b)
        return col

    def viable(self, prefix: bytes | str) -> bool:
        return self.column(prefix).alive

    def accepts(self, text: bytes | str) -> bool:
        return self.column(text).accepting

    def clear_cache(self) -> None:
        self.root = self._new_root()
