"""Byte-level NFAs and the combinators the compilers build them with.

A :class:`ByteNFA` is an immutable automaton over the 256 byte values with epsilon moves.
Its edges carry *byte sets* (a Python ``int`` used as a 256-bit mask: bit ``b`` set iff byte
``b`` labels the edge), so a character class is one edge, not 256.  Everything is built by
composition (Thompson's construction): :func:`literal`, :func:`byteset`, :func:`codepoints`
(UTF-8 encoded code-point ranges), :func:`concat`, :func:`union`, :func:`star`, :func:`plus`,
:func:`optional`, :func:`repeat`, and :func:`intersect` (product).  Nothing here determinizes:
sizes stay linear in the size of the expression (paper 002, §5.5).

:func:`finalize` turns a built NFA into the canonical form the token lifter consumes:
epsilon-free, trimmed to accessible and co-accessible states, one start state numbered 0,
edges merged per (source, destination) pair, and states with identical futures merged.

Interop with automata-lib (``automata.fa.nfa.NFA`` / ``automata.fa.dfa.DFA``) is through
:mod:`.nfa_automata_lib` (``to_automata_lib`` / ``from_automata_lib``; this module does not
import it: no import cycle), whose input symbols are one-character strings (a byte ``b`` is
``chr(b)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from operator import itemgetter

from .errors import InvalidArgumentError

_SECOND, _THIRD = itemgetter(1), itemgetter(2)

__all__ = [
    "ALL_BYTES",
    "ByteNFA",
    "literal",
    "byteset",
    "byte_range",
    "codepoints",
    "any_codepoint",
    "empty",
    "nothing",
    "concat",
    "union",
    "star",
    "plus",
    "optional",
    "repeat",
    "intersect",
    "remove_epsilons",
    "trim",
    "reduce_states",
    "finalize",
    "matches",
    "byte_classes",
    "utf8_sequences",
    "mask_of",
]

#: The mask with all 256 bits set.
ALL_BYTES = (1 << 256) - 1
MAX_CODEPOINT = 0x10FFFF


def mask_of(values: Iterable[int]) -> int:
    """256-bit mask with the bits of ``values`` (bytes 0..255) set."""
    m = 0
    for b in values:
        m |= 1 << b
    return m


@dataclass(frozen=True, eq=False)
class ByteNFA:
    """An NFA over bytes.

    Attributes:
        num_states: states are ``0 .. num_states - 1``.
        start: the start state.
        finals: accepting states.
        edges: ``(src, mask, dst)`` triples; ``mask`` is a nonzero 256-bit int.
        epsilons: ``(src, dst)`` epsilon moves.

    Instances are immutable and may be shared between the NFAs built from them.
    """

    num_states: int
    start: int
    finals: frozenset[int]
    edges: tuple[tuple[int, int, int], ...] = ()
    epsilons: tuple[tuple[int, int], ...] = ()
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_edges(self) -> int:
        return len(self.edges)

    def shifted(self, k: int) -> ByteNFA:
        """The same NFA with every state number increased by ``k``."""
        if k == 0:
            return self
        return ByteNFA(
            self.num_states,
            self.start + k,
            frozenset([f + k for f in self.finals]),
            tuple([(s + k, m, d + k) for s, m, d in self.edges]),
            tuple([(s + k, d + k) for s, d in self.epsilons]),
        )

    def __repr__(self) -> str:
        return (
            f"ByteNFA(states={self.num_states}, edges={len(self.edges)}, "
            f"epsilons={len(self.epsilons)}, finals={len(self.finals)})"
        )


# --------------------------------------------------------------------------- primitives


def empty() -> ByteNFA:
    """The language {ε}."""
    return ByteNFA(1, 0, frozenset({0}))


def nothing() -> ByteNFA:
    """The empty language."""
    return ByteNFA(1, 0, frozenset())


def byteset(mask: int) -> ByteNFA:
    """One byte from ``mask`` (a 256-bit int).  An empty mask gives the empty language."""
    if mask == 0:
        return nothing()
    return ByteNFA(2, 0, frozenset({1}), ((0, mask & ALL_BYTES, 1),))


def byte_range(lo: int, hi: int) -> ByteNFA:
    """One byte in ``[lo, hi]``."""
    if not 0 <= lo <= hi <= 255:
        raise InvalidArgumentError(f"byte range [{lo}, {hi}] is outside 0..255")
    return byteset(((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1))


def literal(data: bytes | str) -> ByteNFA:
    """Exactly ``data`` (a ``str`` is UTF-8 encoded)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    n = len(data)
    return ByteNFA(n + 1, 0, frozenset({n}), tuple((i, 1 << b, i + 1) for i, b in enumerate(data)),
                   _cache={"start_entered": False})


def _start_entered(a: ByteNFA) -> bool:
    """Whether some edge or epsilon of ``a`` enters its start (cached on ``a``)."""
    hit = a._cache.get("start_entered")
    if hit is None:
        st = a.start
        hit = a._cache["start_entered"] = (st in map(_THIRD, a.edges)
                                           or st in map(_SECOND, a.epsilons))
    return hit


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Split the code-point range ``[lo, hi]`` into UTF-8 byte-range sequences.

    Returns a list of sequences; each is a list of ``(byte_lo, byte_hi)`` pairs, one per byte
    position, whose cartesian product is exactly the UTF-8 encodings of a sub-range.  Surrogates
    (U+D800..U+DFFF) are excluded: they have no UTF-8 encoding.
    """
    out: list[list[tuple[int, int]]] = []
    stack = [(lo, hi)]
    while stack:
        a, b = stack.pop()
        if a > b:
            continue
        if a <= 0xDFFF and b >= 0xD800:
            stack.append((a, 0xD7FF))
            stack.append((0xE000, b))
            continue
        split = False
        for bound in (0x7F, 0x7FF, 0xFFFF):
            if a <= bound < b:
                stack.append((a, bound))
                stack.append((bound + 1, b))
                split = True
                break
        if split:
            continue
        if b <= 0x7F:
            out.append([(a, b)])
            continue
        for i in range(1, 4):
            m = (1 << (6 * i)) - 1
            if (a & ~m) != (b & ~m):
                if a & m != 0:
                    stack.append((a, a | m))
                    stack.append(((a | m) + 1, b))
                    split = True
                    break
                if b & m != m:
                    stack.append((a, (b & ~m) - 1))
                    stack.append((b & ~m, b))
                    split = True
                    break
        if split:
            continue
        ea, eb = chr(a).encode("utf-8"), chr(b).encode("utf-8")
        out.append(list(zip(ea, eb)))
    out.sort()
    return out


def codepoints(ranges: Iterable[tuple[int, int]]) -> ByteNFA:
    """One Unicode scalar value from the union of inclusive code-point ``ranges``, UTF-8 encoded.

    Sequences sharing a prefix share states, and all share one final state, so a class such as
    "any character but a quote or backslash" costs a handful of states.
    """
    seqs: list[list[tuple[int, int]]] = []
    for lo, hi in ranges:
        if lo > hi:
            continue
        if not 0 <= lo <= hi <= MAX_CODEPOINT:
            raise InvalidArgumentError(f"code-point range [{lo:#x}, {hi:#x}] is outside Unicode")
        seqs.extend(utf8_sequences(lo, hi))
    if not seqs:
        return nothing()
    # Build a trie over the byte-range sequences; the last range of each goes to a shared final.
    final = 1
    n = 2
    children: dict[tuple[int, tuple[int, int]], int] = {}
    edge_masks: dict[tuple[int, int], int] = {}
    for seq in seqs:
        state = 0
        for pos, (blo, bhi) in enumerate(seq):
            rng = (blo, bhi)
            if pos == len(seq) - 1:
                dst = final
            else:
                key = (state, rng)
                dst = children.get(key)
                if dst is None:
                    dst = n
                    n += 1
                    children[key] = dst
            m = ((1 << (bhi + 1)) - 1) ^ ((1 << blo) - 1)
            edge_masks[(state, dst)] = edge_masks.get((state, dst), 0) | m
            state = dst
    edges = tuple((s, m, d) for (s, d), m in edge_masks.items())
    return ByteNFA(n, 0, frozenset({final}), edges)


@cache
def any_codepoint() -> ByteNFA:
    """Any one Unicode scalar value (valid UTF-8 only).  Built once and shared (NFAs are
    immutable): each build took ~60 us, twice per searched regex (measured here)."""
    return codepoints([(0, MAX_CODEPOINT)])


# --------------------------------------------------------------------------- combinators


def concat(*parts: ByteNFA) -> ByteNFA:
    """The concatenation of ``parts`` (ε for none)."""
    if not parts:
        return empty()
    if len(parts) == 1:
        return parts[0]
    edges: list[tuple[int, int, int]] = []
    eps: list[tuple[int, int]] = []
    offset = 0
    prev_finals: frozenset[int] = frozenset()
    start = 0
    for i, p in enumerate(parts):
        k = offset  # p's states shifted by k (without building the shifted NFA)
        if k:
            edges.extend([(s + k, m, d + k) for s, m, d in p.edges])
            eps.extend([(s + k, d + k) for s, d in p.epsilons])
        else:
            edges.extend(p.edges)
            eps.extend(p.epsilons)
        if i == 0:
            start = p.start + k
        else:
            eps.extend([(f, p.start + k) for f in prev_finals])
        prev_finals = [f + k for f in p.finals]
        offset += p.num_states
    return ByteNFA(offset, start, frozenset(prev_finals), tuple(edges), tuple(eps))


def union(*parts: ByteNFA) -> ByteNFA:
    """The union of ``parts`` (the empty language for none)."""
    if not parts:
        return nothing()
    if len(parts) == 1:
        return parts[0]
    edges: list[tuple[int, int, int]] = []
    eps: list[tuple[int, int]] = []
    finals: set[int] = set()
    offset = 1
    for p in parts:
        k = offset
        edges.extend([(s + k, m, d + k) for s, m, d in p.edges])
        eps.extend([(s + k, d + k) for s, d in p.epsilons])
        eps.append((0, p.start + k))
        finals.update([f + k for f in p.finals])
        offset += p.num_states
    return ByteNFA(offset, 0, frozenset(finals), tuple(edges), tuple(eps))


def optional(a: ByteNFA) -> ByteNFA:
    """``a?``."""
    q = a.shifted(1)
    return ByteNFA(
        a.num_states + 1, 0, q.finals | {0}, q.edges, q.epsilons + ((0, q.start),)
    )


def plus(a: ByteNFA) -> ByteNFA:
    """``a+`` (finals loop back to the start by epsilon)."""
    if a.finals == frozenset({a.start}) and not a.edges:
        return a
    return ByteNFA(
        a.num_states,
        a.start,
        a.finals,
        a.edges,
        a.epsilons + tuple((f, a.start) for f in a.finals if f != a.start),
    )


def star(a: ByteNFA) -> ByteNFA:
    """``a*``."""
    return optional(plus(a))


def repeat(a: ByteNFA, lo: int, hi: int | None) -> ByteNFA:
    """``a{lo,hi}``; ``hi=None`` means unbounded.  O(hi · |a|) states and edges.

    Copy ``k`` is entered through a fresh state ``e_k`` (nothing inside the copy leads back to
    it, so re-entering the copy's own start cannot skip to the exit), and ``e_k → exit`` for
    ``k >= lo`` stops after ``k`` copies.
    """
    if lo < 0 or (hi is not None and hi < lo):
        raise InvalidArgumentError(f"bad repetition bounds {{{lo},{hi}}}")
    if hi is None:
        if lo == 0:
            return star(a)
        return concat(*([a] * (lo - 1)), plus(a))
    if hi == 0:
        return empty()
    if lo == hi == 1:
        return a
    n = a.num_states
    stride = n + 1
    exit_ = hi * stride
    edges: list[tuple[int, int, int]] = []
    eps: list[tuple[int, int]] = []
    for k in range(hi):
        base = k * stride  # e_k = base; the copy's states are base + 1 ...
        off = base + 1
        edges.extend((s + off, m, d + off) for s, m, d in a.edges)
        eps.extend((s + off, d + off) for s, d in a.epsilons)
        eps.append((base, a.start + off))
        nxt = exit_ if k == hi - 1 else base + stride
        eps.extend((f + off, nxt) for f in a.finals)
        if k >= lo:
            eps.append((base, exit_))
    return ByteNFA(exit_ + 1, 0, frozenset({exit_}), tuple(edges), tuple(eps))


# --------------------------------------------------------------------------- normal forms


def _eps_closures(nfa: ByteNFA) -> list[frozenset[int]] | None:
    if not nfa.epsilons:
        return None
    succ: dict[int, list[int]] = {}
    for s, d in nfa.epsilons:
        succ.setdefault(s, []).append(d)
    closures: list[frozenset[int]] = []
    for s in range(nfa.num_states):
        if s not in succ:
            closures.append(frozenset((s,)))
            continue
        seen = {s}
        stack = [s]
        while stack:
            x = stack.pop()
            for y in succ.get(x, ()):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        closures.append(frozenset(seen))
    return closures


def remove_epsilons(nfa: ByteNFA) -> ByteNFA:
    """An equivalent NFA without epsilon moves (same states; unreachable ones kept)."""
    closures = _eps_closures(nfa)
    if closures is None:
        return nfa
    out_edges: dict[int, list[tuple[int, int]]] = {}
    for s, m, d in nfa.edges:
        out_edges.setdefault(s, []).append((m, d))
    edges: list[tuple[int, int, int]] = []
    finals = set()
    for s in range(nfa.num_states):
        cl = closures[s]
        if cl & nfa.finals:
            finals.add(s)
        for q in cl:
            for m, d in out_edges.get(q, ()):
                edges.append((s, m, d))
    return ByteNFA(nfa.num_states, nfa.start, frozenset(finals), tuple(edges))


def _canonical(nfa: ByteNFA, reduce: bool) -> ByteNFA:
    """:func:`finalize`'s work in one pass over the reachable part.

    1. Epsilon removal from the start: only the start and targets of reachable byte edges
       become states (Thompson glue entered by epsilons only never does); ``rows[s]`` maps each
       destination to the union of the masks to it (parallel edges merged).
    2. Trim: keep the states that reach an accepting one.
    3. ``reduce``: :func:`_merge_futures`.
    4. :func:`_renumber`: breadth-first numbering from the start.
    """
    n = nfa.num_states
    start = nfa.start
    finals = nfa.finals
    out: list = [None] * n
    for e in nfa.edges:
        lst = out[e[0]]
        if lst is None:
            out[e[0]] = [e]
        else:
            lst.append(e)
    eps: list = [None] * n
    for s, d in nfa.epsilons:
        lst = eps[s]
        if lst is None:
            eps[s] = [d]
        else:
            lst.append(d)
    # epsilon removal over the reachable part: rows[s] = {dst: mask}
    rows: list = [None] * n
    rows[start] = {}
    order = [start]
    acc = set()
    for s in order:  # grows while iterating
        row = rows[s]
        if eps[s] is None:
            if s in finals:
                acc.add(s)
            for _, m, d in out[s] or ():
                if d in row:
                    row[d] |= m
                else:
                    row[d] = m
                    if rows[d] is None:
                        rows[d] = {}
                        order.append(d)
            continue
        seen = {s}
        closure = [s]
        for q in closure:
            for y in eps[q] or ():
                if y not in seen:
                    seen.add(y)
                    closure.append(y)
        for q in closure:
            if q in finals:
                acc.add(s)
            for _, m, d in out[q] or ():
                if d in row:
                    row[d] |= m
                else:
                    row[d] = m
                    if rows[d] is None:
                        rows[d] = {}
                        order.append(d)
    # co-accessible states
    preds: list = [None] * n
    for s in order:
        for d in rows[s]:
            lst = preds[d]
            if lst is None:
                preds[d] = [s]
            else:
                lst.append(s)
    live = set(acc)
    todo = list(acc)
    for x in todo:
        for p in preds[x] or ():
            if p not in live:
                live.add(p)
                todo.append(p)
    if start not in live:
        return nothing()
    if len(live) < len(order):
        dead = [s for s in order if s not in live]
        order = [s for s in order if s in live]
        # only the live neighbours of dead states have rows / predecessor lists to filter
        touched = {p for x in dead for p in preds[x] or () if p in live}
        touched.update(d for x in dead for d in rows[x] if d in live)
        for s in touched:
            row = rows[s]
            if any(d not in live for d in row):
                rows[s] = {d: m for d, m in row.items() if d in live}
            ps = preds[s]
            if ps is not None and any(p not in live for p in ps):
                preds[s] = [p for p in ps if p in live]
    if reduce:
        start = _merge_futures(rows, preds, order, acc, start, n)
    return _renumber(rows, acc, start)


def _merge_futures(
    rows: list, preds: list, order: list[int], acc: set[int], start: int, n: int
) -> int:
    """Merge states with identical finality and identical outgoing edges (destination
    representative -> union mask) until no two states share a signature; ``rows`` is updated
    in place and the start's representative returned.

    A worklist version of the round-based merge: states are signed deepest-discovered first,
    and when a state is merged only its predecessors are signed again.  Same fixpoint as
    re-signing every state per round (merging is exact: merged states have the same right
    language), at about O(edges) instead of O(edges x rounds).
    """
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict = {}
    cur: dict = {}
    queued = set(order)
    dirty: set[int] = set()  # states whose rows may name a merged-away state
    work = list(order)  # popped from the end: deepest-discovered first
    while work:
        x = work.pop()
        queued.discard(x)
        if parent[x] != x:
            continue
        row = rows[x]
        if x in dirty:
            dirty.discard(x)
            new = {}
            for d, m in row.items():
                d = find(d)
                new[d] = new.get(d, 0) | m
            rows[x] = row = new
        if len(row) == 1:
            ((d, m),) = row.items()
            sig = (x in acc, d, m)
        else:
            sig = (x in acc, frozenset(row.items()))
        old = cur.get(x)
        if old == sig:
            continue
        if old is not None and owner.get(old) == x:
            del owner[old]
        other = owner.get(sig)
        if other is None or parent[other] != other:
            owner[sig] = x
            cur[x] = sig
            continue
        keep, drop = (x, other) if other == start else (other, x)
        parent[drop] = keep
        owner[sig] = keep
        cur[keep] = sig
        moved = preds[drop]
        if moved:
            pk = preds[keep]
            if pk is None:
                preds[keep] = list(moved)
            else:
                pk.extend(moved)
            dirty.update(moved)
            for p in moved:
                if p not in queued:
                    queued.add(p)
                    work.append(p)
    # every state made dirty was queued and resolved when popped; only merged-away ones remain
    return find(start)


def _renumber(rows: list, acc: set[int], start: int) -> ByteNFA:
    """Number the states breadth-first from the start (start = 0), each state's out-edges
    visited in order of (mask, previous id); edges come out sorted by (source, destination).
    Edges with equal masks are ordered by their destinations' finality and out-masks, and only
    then by previous id.  So the numbering depends on the automaton's shape (and on the
    construction order only to break ties that remain), and copies of one sub-automaton entered
    at one state are numbered alike wherever they occur."""
    new = {start: 0}
    order = [start]
    edges = []
    finals = []
    for i, s in enumerate(order):
        if s in acc:
            finals.append(i)
        row = rows[s]
        if len(row) == 1:
            for d, m in row.items():
                j = new.get(d)
                if j is None:
                    j = new[d] = len(order)
                    order.append(d)
                edges.append((i, m, j))
            continue
        es = []
        items = sorted([(m, d) for d, m in row.items()])
        if len(set(row.values())) < len(items):
            # equal masks: order by the destinations' own shape before their previous ids
            items.sort(key=lambda md: (md[0], md[1] in acc,
                                       sorted(rows[md[1]].values()), md[1]))
        for m, d in items:
            j = new.get(d)
            if j is None:
                j = new[d] = len(order)
                order.append(d)
            es.append((j, m))
        es.sort()
        edges.extend([(i, m, j) for j, m in es])
    return ByteNFA(len(order), 0, frozenset(finals), tuple(edges))


def trim(nfa: ByteNFA) -> ByteNFA:
    """Keep only states reachable from the start that can reach a final state; renumber
    breadth-first so the start is state 0 (see :func:`finalize`); merge parallel edges (one
    edge per (src, dst) with the union mask).

    The NFA must be epsilon-free.  An empty language gives a 1-state NFA with no finals.
    """
    if nfa.epsilons:
        raise InvalidArgumentError("trim() needs an epsilon-free NFA; call remove_epsilons() first")
    return _canonical(nfa, reduce=False)


def reduce_states(nfa: ByteNFA) -> ByteNFA:
    """Merge states with identical finality and identical outgoing edges, until none remain.

    Such states have the same right language, so merging is exact.  This is not
    determinization: it only ever shrinks the NFA.  A worklist (see :func:`_merge_futures`):
    a merge re-signs only the merged state's predecessors.  The result is trimmed and
    numbered like :func:`finalize`'s.
    """
    return _canonical(nfa, reduce=True)


def finalize(nfa: ByteNFA, *, reduce: bool = True) -> ByteNFA:
    """Canonical form: epsilon-free, trimmed, start = 0, parallel edges merged, and (when
    ``reduce``) states with identical futures merged.  Cached on the instance.

    States are numbered breadth-first from the start, each state's out-edges taken in order of
    mask (see :func:`_renumber` for ties), and edges are sorted by (source, destination): the
    numbering depends on the automaton's shape, so copies of one sub-automaton (entered at one
    state) get the same relative numbering wherever they occur.  About O(reachable states +
    edges), plus the epsilon closures of the reachable states (the futures merge re-signs a
    state when one of its successors merges)."""
    key = ("finalize", reduce)
    hit = nfa._cache.get(key)
    if hit is not None:
        return hit
    out = _canonical(nfa, reduce)
    nfa._cache[key] = out
    out._cache[key] = out
    if reduce:
        out._cache[("finalize", False)] = out
    return out


def intersect(a: ByteNFA, b: ByteNFA) -> ByteNFA:
    """The product automaton: strings accepted by both ``a`` and ``b`` (only reachable pairs)."""
    a = finalize(a, reduce=False)
    b = finalize(b, reduce=False)
    aout: list[list[tuple[int, int]]] = [[] for _ in range(a.num_states)]
    for s, m, d in a.edges:
        aout[s].append((m, d))
    bout: list[list[tuple[int, int]]] = [[] for _ in range(b.num_states)]
    for s, m, d in b.edges:
        bout[s].append((m, d))
    ids = {(a.start, b.start): 0}
    stack = [(a.start, b.start)]
    edges = []
    while stack:
        pa, pb = stack.pop()
        src = ids[(pa, pb)]
        for ma, da in aout[pa]:
            for mb, db in bout[pb]:
                m = ma & mb
                if not m:
                    continue
                key = (da, db)
                dst = ids.get(key)
                if dst is None:
                    dst = ids[key] = len(ids)
                    stack.append(key)
                edges.append((src, m, dst))
    finals = frozenset(i for (pa, pb), i in ids.items() if pa in a.finals and pb in b.finals)
    return finalize(ByteNFA(len(ids), 0, finals, tuple(edges)), reduce=False)


# --------------------------------------------------------------------------- queries


def matches(nfa: ByteNFA, data: bytes, *, partial: bool = False) -> bool:
    """Whether ``data`` is accepted (``partial=False``) or is a prefix of an accepted string
    (``partial=True``).  A reference simulation for tests; not fast."""
    f = finalize(nfa, reduce=False)
    out = f._cache.get("out_edges")
    if out is None:  # built once per automaton: 10^6-state automata are matched many times
        out = [[] for _ in range(f.num_states)]
        for s, m, d in f.edges:
            out[s].append((m, d))
        f._cache["out_edges"] = out
    if not f.finals:
        return False
    cur = {f.start}
    for byte in data:
        bit = 1 << byte
        cur = {d for s in cur for m, d in out[s] if m & bit}
        if not cur:
            return False
    return True if partial else bool(cur & f.finals)


def byte_classes(masks: Iterable[int]) -> tuple[list[int], int]:
    """Partition the 256 bytes so that bytes in one class are in exactly the same masks.

    Returns ``(class_of_byte, num_classes)`` where ``class_of_byte`` is a list of 256 ints.
    Class 0 is the bytes in no mask at all (counted in ``num_classes`` even when every byte is
    in some mask); the others are numbered by their smallest byte.  Each byte's set of masks
    is read off one bit matrix [masks, 256] (120 random masks: 0.15 ms, where a Python pass
    over each mask's bits took 1.1 ms; 10 masks: 0.06 vs 0.15 ms; measured here).
    """
    import numpy as np

    ms = sorted(set(masks))
    if not ms:
        return [0] * 256, 1
    raw = np.frombuffer(b"".join(m.to_bytes(32, "little") for m in ms), dtype=np.uint8)
    bits = np.unpackbits(raw.reshape(len(ms), 32), axis=1, bitorder="little")  # [k, 256]
    kb = (len(ms) + 7) // 8
    sig = np.packbits(bits.T, axis=1).tobytes()  # per byte: its set of masks, kb bytes
    table = {bytes(kb): 0}
    cls = [table.setdefault(sig[i:i + kb], len(table)) for i in range(0, 256 * kb, kb)]
    return cls, len(table)
