"""Regular approximations of a :class:`~.cfg.CFG` as byte NFAs (never determinized).

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

from .. import nfa as N
from ..errors import GrammarError, InvalidArgumentError
from ..nfa_bisim import bisim_reduce
from ..nfa_determinize import SubsetDFA, subset_construction
from .builder import _Builder, _TooBig
from .cfg import CFG, START, Expr, PreparedCFG, prepare, seq
from .scc import _analyse, _positions, _SCCInfo

__all__ = [
    "approximate",
    "bisim_reduce",
    "subset_construction",
    "SubsetDFA",
    "MAX_BYTE_STATES",
]

#: Largest byte NFA (states before finalization) an approximation may build; lifting a 2M-state
#: NFA over the 128k-token Llama-3 vocabulary is already minutes of work.
MAX_BYTE_STATES = 2_000_000

#: "over": copy every sub-automaton (exact, the best superset this construction gives) while
#: the nonterminal automata built sum to at most this many states; past it, share (see
#: :meth:`_Approx.classify`).  Every grammar in shared/data but rfc.lark and calflow.ebnf stays
#: below it (largest: geo_query.ebnf, 60,593); calflow.ebnf needs 162,025 (41,148 states in the
#: result), rfc.lark more than 2,000,000.
SHARE_BUDGET = 100_000
#: "over" with sharing: a nonterminal whose automaton exceeds this many states is shared.
SHARE_MIN = 2_000
#: "over" with sharing: the "copy" automata :meth:`_Approx.classify` finalizes sum to at most
#: this many states; past it, rules that would be copies are laid out inline ("expand") or
#: shared.  Without it a chain of rules each growing the last (``r{i} ::= r{i+1} "a"``)
#: finalized a copy of every size up to SHARE_MIN: 2M states, 29 s for 10k rules.  The five
#: grammars of tests/data and shared/data that reach sharing copy at most 16,413 states
#: (fuzzing-old/sql.ebnf), so none is affected.
COPY_BUDGET = 100_000
#: "over" with sharing: a lexicalized rule (a terminal) used more than once is shared when its
#: automaton has more than this many states.
SHARE_TERMINAL_MIN = 64
#: prefix of the hub keys of shared terminals (no nonterminal name starts with a NUL)
_TERM = "\x00t:"
#: Merge bisimilar states of every "under" nonterminal automaton larger than this (smaller ones
#: cost more in numpy overhead than they save).
_BISIM_MIN = 64
#: "over" with sharing: deepest nesting of expanded rules inside one expanded rule.
_EXPAND_MAX_DEPTH = 50


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
        Mohri–Nederhof treatment, a superset).  ``$start`` is always shared.  Once the copies
        finalized so far pass :data:`COPY_BUDGET` states, a rule that would be a copy is
        expanded instead (or shared when recursive): the same language for a rule used once,
        a superset only where a shared one has several callers."""
        cls: dict[str, str] = {}
        cost: dict[str, int] = {}  # states one occurrence costs (a call costs 2)
        copied = 0  # states of the "copy" automata finalized so far (COPY_BUDGET)
        xdepth: dict[str, int] = {}  # nesting of "expand" rules inside an expanded rule

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
            spent = not dirty and copied + est > COPY_BUDGET
            if START in members:
                pass
            elif not dirty and not spent and est <= share_min:
                sizes = [self.nt(a).num_states for a in comp]
                if max(sizes) <= share_min:
                    how = "copy"
                    copied += sum(sizes)
                    for a, n in zip(comp, sizes):
                        cost[a] = n
            elif (dirty or spent) and not self.pc.recursive[i] and est <= share_min:
                # expansions nest (an expanded rule lays out the expanded rules it uses):
                # bounded, so that laying out never recurses down a long chain of rules
                d = 1 + max((xdepth.get(e[1], 0) for e, _m in outside if e[0] == "n"),
                            default=0)
                if d <= _EXPAND_MAX_DEPTH:
                    how = "expand"
                    cost[comp[0]] = est
                    xdepth[comp[0]] = d
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


def _warm(ap: _Approx) -> None:
    """Build the automata of the non-recursive rules callees first (:meth:`_Approx.nt` is
    memoized), so that ``nt(START)`` never recurses down a long chain of rules: the same
    automata, built in another order, with recursion depth bounded by the bracket nesting."""
    for i, comp in enumerate(ap.pc.sccs):
        if not ap.pc.recursive[i] and comp[0] != START:
            ap.nt(comp[0])


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
                _warm(ap)
                nfa = N.finalize(ap.nt(START), reduce=nfa_reduce)
            except _TooBig:
                ap = _Approx(pc, mode, max_depth, max_states, ap.info)
                nfa = N.finalize(ap.shared_nfa(SHARE_MIN), reduce=nfa_reduce)
                shared = True
        else:
            ap = _Approx(pc, mode, max_depth, max_states)
            _warm(ap)
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

