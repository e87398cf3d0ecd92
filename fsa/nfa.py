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
:func:`to_automata_lib` and :func:`from_automata_lib`, whose input symbols are one-character
strings (a byte ``b`` is ``chr(b)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

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
    "to_automata_lib",
    "from_automata_lib",
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
            frozenset(f + k for f in self.finals),
            tuple((s + k, m, d + k) for s, m, d in self.edges),
            tuple((s + k, d + k) for s, d in self.epsilons),
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
        raise ValueError(f"byte range [{lo}, {hi}] is outside 0..255")
    return byteset(((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1))


def literal(data: bytes | str) -> ByteNFA:
    """Exactly ``data`` (a ``str`` is UTF-8 encoded)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    n = len(data)
    return ByteNFA(n + 1, 0, frozenset({n}), tuple((i, 1 << b, i + 1) for i, b in enumerate(data)))


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
            raise ValueError(f"code-point range [{lo:#x}, {hi:#x}] is outside Unicode")
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


def any_codepoint() -> ByteNFA:
    """Any one Unicode scalar value (valid UTF-8 only)."""
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
        q = p.shifted(offset)
        edges.extend(q.edges)
        eps.extend(q.epsilons)
        if i == 0:
            start = q.start
        else:
            eps.extend((f, q.start) for f in prev_finals)
        prev_finals = q.finals
        offset += p.num_states
    return ByteNFA(offset, start, prev_finals, tuple(edges), tuple(eps))


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
        q = p.shifted(offset)
        edges.extend(q.edges)
        eps.extend(q.epsilons)
        eps.append((0, q.start))
        finals |= q.finals
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
        raise ValueError(f"bad repetition bounds {{{lo},{hi}}}")
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


def trim(nfa: ByteNFA) -> ByteNFA:
    """Keep only states reachable from the start that can reach a final state; renumber so the
    start is state 0; merge parallel edges (one edge per (src, dst) with the union mask).

    The NFA must be epsilon-free.  An empty language gives a 1-state NFA with no finals.
    """
    if nfa.epsilons:
        raise ValueError("trim() needs an epsilon-free NFA; call remove_epsilons() first")
    fwd: dict[int, list[int]] = {}
    bwd: dict[int, list[int]] = {}
    for s, m, d in nfa.edges:
        if m:
            fwd.setdefault(s, []).append(d)
            bwd.setdefault(d, []).append(s)
    acc = {nfa.start}
    stack = [nfa.start]
    while stack:
        x = stack.pop()
        for y in fwd.get(x, ()):
            if y not in acc:
                acc.add(y)
                stack.append(y)
    coacc = set(f for f in nfa.finals if f in acc)
    stack = list(coacc)
    while stack:
        x = stack.pop()
        for y in bwd.get(x, ()):
            if y in acc and y not in coacc:
                coacc.add(y)
                stack.append(y)
    if nfa.start not in coacc:
        return nothing()
    order = [nfa.start] + sorted(coacc - {nfa.start})
    new = {s: i for i, s in enumerate(order)}
    merged: dict[tuple[int, int], int] = {}
    for s, m, d in nfa.edges:
        if m and s in new and d in new:
            key = (new[s], new[d])
            merged[key] = merged.get(key, 0) | m
    edges = tuple((s, m, d) for (s, d), m in sorted(merged.items()))
    finals = frozenset(new[f] for f in nfa.finals if f in new)
    return ByteNFA(len(order), 0, finals, edges)


def reduce_states(nfa: ByteNFA) -> ByteNFA:
    """Merge states with identical finality and identical outgoing edges, until none remain.

    Such states have the same right language, so merging is exact.  This is not
    determinization: it only ever shrinks the NFA.  Input must be trimmed (see :func:`trim`).
    Each round merges on the current representatives; the NFA is trimmed once at the end.
    """
    S = nfa.num_states
    out: list[list[tuple[int, int]]] = [[] for _ in range(S)]
    for s, m, d in nfa.edges:
        out[s].append((d, m))
    rep = list(range(S))

    def find(x: int) -> int:
        root = x
        while rep[root] != root:
            root = rep[root]
        while rep[x] != root:
            rep[x], x = root, rep[x]
        return root

    alive = list(range(S))
    while True:
        sig_to_rep: dict[tuple, int] = {}
        merged = False
        for s in alive:
            row: dict[int, int] = {}
            for d, m in out[s]:
                r = find(d)
                row[r] = row.get(r, 0) | m
            sig = (s in nfa.finals, tuple(sorted(row.items())))
            r = sig_to_rep.setdefault(sig, s)
            if r != s:
                rep[s] = r
                merged = True
        if not merged:
            break
        alive = [s for s in alive if rep[s] == s]
    if len(alive) == S:
        return nfa
    edges: dict[tuple[int, int], int] = {}
    for s in alive:
        for d, m in out[s]:
            key = (s, find(d))
            edges[key] = edges.get(key, 0) | m
    finals = frozenset(find(f) for f in nfa.finals)
    flat = tuple((s, m, d) for (s, d), m in edges.items())
    return trim(ByteNFA(S, find(nfa.start), finals, flat))


def finalize(nfa: ByteNFA, *, reduce: bool = True) -> ByteNFA:
    """Canonical form: epsilon-free, trimmed, start = 0, parallel edges merged, and (when
    ``reduce``) states with identical futures merged.  Cached on the instance."""
    key = ("finalize", reduce)
    hit = nfa._cache.get(key)
    if hit is not None:
        return hit
    out = trim(remove_epsilons(nfa))
    if reduce:
        out = reduce_states(out)
    nfa._cache[key] = out
    out._cache[key] = out
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
    out: list[list[tuple[int, int]]] = [[] for _ in range(f.num_states)]
    for s, m, d in f.edges:
        out[s].append((m, d))
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
    Bytes in no mask at all form class 0 when there are any (the "dead" class).
    """
    sigs: list[list[int]] = [[] for _ in range(256)]
    for i, m in enumerate(sorted(set(masks))):
        while m:
            low = m & -m
            sigs[low.bit_length() - 1].append(i)
            m ^= low
    table: dict[tuple[int, ...], int] = {(): 0}
    cls = []
    for b in range(256):
        key = tuple(sigs[b])
        c = table.get(key)
        if c is None:
            c = table[key] = len(table)
        cls.append(c)
    return cls, len(table)


# --------------------------------------------------------------------------- automata-lib


def to_automata_lib(nfa: ByteNFA, *, deterministic: bool = False):
    """Export to an automata-lib ``NFA`` (or, with ``deterministic=True``, its ``DFA``).

    Input symbols are one-character strings ``chr(b)`` for the bytes used.  Determinizing is
    exponential in the worst case: use it on small automata only (tests, benchmarks).
    """
    from automata.fa.dfa import DFA
    from automata.fa.nfa import NFA

    f = finalize(nfa, reduce=False)
    symbols: set[str] = set()
    trans: dict[str, dict[str, set[str]]] = {f"q{s}": {} for s in range(f.num_states)}
    for s, m, d in f.edges:
        row = trans[f"q{s}"]
        mm = m
        while mm:
            low = mm & -mm
            ch = chr(low.bit_length() - 1)
            symbols.add(ch)
            row.setdefault(ch, set()).add(f"q{d}")
            mm ^= low
    if not symbols:
        symbols.add(chr(0))
    out = NFA(
        states=set(trans),
        input_symbols=symbols,
        transitions=trans,
        initial_state=f"q{f.start}",
        final_states={f"q{s}" for s in f.finals},
    )
    return DFA.from_nfa(out) if deterministic else out


def from_automata_lib(fa) -> ByteNFA:
    """Import an automata-lib ``NFA`` or ``DFA``.

    Each input symbol must be a one-character ``str`` (or a 1-byte ``bytes``) or a longer
    string, which is read as its UTF-8 bytes.  Epsilon moves (symbol ``""``) are kept.
    """
    from automata.fa.dfa import DFA

    names: dict = {}

    def sid(x) -> int:
        if x not in names:
            names[x] = len(names)
        return names[x]

    sid(fa.initial_state)
    for s in sorted(fa.states, key=repr):
        sid(s)
    parts_edges: list[tuple[int, int, int]] = []
    eps: list[tuple[int, int]] = []
    extra = len(names)
    chains: list[tuple[int, bytes, int]] = []
    for s, row in fa.transitions.items():
        for sym, dsts in row.items():
            if isinstance(fa, DFA):
                dsts = (dsts,)
            for d in dsts:
                if sym == "":
                    eps.append((sid(s), sid(d)))
                    continue
                data = sym if isinstance(sym, bytes) else sym.encode("utf-8")
                if len(data) == 1:
                    parts_edges.append((sid(s), 1 << data[0], sid(d)))
                else:
                    chains.append((sid(s), data, sid(d)))
    n = extra
    for s, data, d in chains:
        prev = s
        for i, byte in enumerate(data):
            nxt = d if i == len(data) - 1 else n
            if nxt == n:
                n += 1
            parts_edges.append((prev, 1 << byte, nxt))
            prev = nxt
    finals = frozenset(sid(f) for f in fa.final_states)
    return ByteNFA(n, sid(fa.initial_state), finals, tuple(parts_edges), tuple(eps))
