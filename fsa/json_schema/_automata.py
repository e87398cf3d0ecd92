"""Byte-automaton helpers of the JSON Schema compiler: emptiness and byte tests, tries,
complements of finite literal sets, and bracketing a builder's automaton in place."""

from __future__ import annotations

from typing import Any

from .. import nfa as N
from ..nfa import ByteNFA

#: Every byte (a 256-bit mask).
_ALL_BYTES = (1 << 256) - 1


def _first_bytes(a: ByteNFA) -> int:
    f = N.finalize(a)
    m = 0
    for s, mask, _ in f.edges:
        if s == f.start:
            m |= mask
    return m


def _is_empty(a: ByteNFA) -> bool:
    """Whether no final state is reachable (epsilons included): O(states + edges)."""
    if not a.finals:
        return True
    hit = a._cache.get("is_empty")
    if hit is not None:
        return hit
    f = a._cache.get(("finalize", True)) or a._cache.get(("finalize", False))
    if f is not None:  # finalized: trimmed, so empty iff it has no accepting state
        return not f.finals
    parts = a._cache.get("union_of")
    if parts is not None:  # a lazy union (._builder.union): empty iff every part is
        hit = a._cache["is_empty"] = all(_is_empty(p) for p in parts)
        return hit
    succ: dict[int, list[int]] = {}
    for s, _m, d in a.edges:
        succ.setdefault(s, []).append(d)
    for s, d in a.epsilons:
        succ.setdefault(s, []).append(d)
    seen = {a.start}
    stack = [a.start]
    out = True
    while stack:
        x = stack.pop()
        if x in a.finals:
            out = False
            break
        for y in succ.get(x, ()):
            if y not in seen:
                seen.add(y)
                stack.append(y)
    a._cache["is_empty"] = out
    return out


def _has_byte(a: ByteNFA, byte: int) -> bool:
    """Whether some edge carries ``byte`` (conservative: unreachable edges count too)."""
    bit = 1 << byte
    return any(m & bit for _, m, _ in a.edges)


def _may_hold_object(a: ByteNFA) -> bool:
    """Whether a value automaton may accept a value with an object in it, whose serialization
    depends on a key order (conservative): a first byte ``{``, or ``[`` and a ``{`` anywhere.
    A string value may contain ``{`` characters and still has one serialization."""
    f = N.finalize(a)
    first = 0
    for s, m, _ in f.edges:
        if s == f.start:
            first |= m
    return bool(first >> 0x7B & 1) or bool(first >> 0x5B & 1) and _has_byte(f, 0x7B)


def _trie(seqs) -> tuple[list[dict[Any, int]], set[int]]:
    """Trie of the sequences: per node its children by symbol; the nodes that end a sequence."""
    children: list[dict[Any, int]] = [{}]
    ends: set[int] = set()
    for seq in seqs:
        st = 0
        for sym in seq:
            nxt = children[st].get(sym)
            if nxt is None:
                nxt = len(children)
                children.append({})
                children[st][sym] = nxt
            st = nxt
        ends.add(st)
    return children, ends


def _not_literals(lits: list[bytes]) -> ByteNFA:
    """Byte strings that are none of ``lits``: a complete trie DFA (a sink for deviations) whose
    accepting states are every node that does not end a literal, and the sink."""
    children, ends = _trie(lits)  # over bytes
    sink = len(children)
    edges = [(sink, _ALL_BYTES, sink)]
    for st, kids in enumerate(children):
        used = 0
        for byte, d in kids.items():
            edges.append((st, 1 << byte, d))
            used |= 1 << byte
        if _ALL_BYTES & ~used:
            edges.append((st, _ALL_BYTES & ~used, sink))
    finals = frozenset(x for x in range(sink + 1) if x not in ends)
    return ByteNFA(sink + 1, 0, finals, tuple(edges))


def _wrapped(b: Any, start: int, open_: ByteNFA, close: ByteNFA) -> ByteNFA:
    """``open_ · L · close`` where L is the builder's automaton from ``start`` to its finals,
    built in place (no copy of the possibly 10^6-state inside).  The builders only create
    states reachable through nonempty parts, so the result is empty iff L has no final state;
    that is recorded for :func:`_is_empty`."""
    finals = set(b.finals)
    s0 = b.state()
    for f in b.embed(open_, s0):
        b.eps.append((f, start))
    entry = b.state()
    for f in finals:
        b.eps.append((f, entry))
    end = b.state()
    for f in b.embed(close, entry):
        b.eps.append((f, end))
    b.finals = {end}
    out = b.build(s0)
    out._cache["is_empty"] = not finals
    return out
