"""Partial determinization: one successor per state on the edges of one exact byte mask.

JSON's whitespace (RFC 8259 ``ws = *( %x20 / %x09 / %x0A / %x0D )``) sits in every gap, and the
gaps of a JSON grammar meet: after an array item the text may go on with ``ws ","`` or with
``ws "]"``; after ``"["`` with ``ws "]"`` or ``ws item``.  Built by concatenation, each gap is its
own whitespace loop, so after the item one space already leaves the NFA in two states, and
every whitespace token of a vocabulary becomes two token-level edges (Llama-3, Kubernetes
schema #6 of the bench subset, canonical with ``whitespace="any"``: 2,336 loop states and half
of all explicit token pairs).

:func:`merge_parallel` applies the subset construction to the edges whose mask is exactly
``mask`` and to nothing else::

    for s in states:
        T = {d : (s, mask, d) is an edge}
        if |T| >= 2: replace those edges by one edge (s, mask, [T])
    [T] is a new state: final iff some t in T is; its edges are every edge of every t in T
    whose mask is not ``mask``, and one edge (mask, [U]) with U = the union of the ``mask``
    targets of T (built the same way, once per distinct set).

Exact: ``[T]`` has, byte for byte, the futures of the set T, which is what the replaced edges
reached.  Edges whose mask merely overlaps ``mask`` are left alone (still exact: the union of
targets on a byte is unchanged).  Bounded: at most ``max_new`` new states, else the input is
returned unchanged.
"""

from __future__ import annotations

from .nfa import ByteNFA, finalize

__all__ = ["merge_parallel"]


def merge_parallel(nfa: ByteNFA, mask: int, *, max_new: int | None = None) -> ByteNFA:
    """``nfa`` with at most one ``mask``-edge out of every state (module docstring).

    Args:
        nfa: any byte NFA (finalized first: epsilon-free).
        mask: the exact 256-bit edge mask to determinize on (e.g. JSON whitespace).
        max_new: most subset states to add (default: the number of states); past it the
            finalized input is returned unchanged.
    Returns:
        A finalized ByteNFA accepting the same language.  ``nfa`` is not mutated.
    """
    f = finalize(nfa)
    S = f.num_states
    limit = S if max_new is None else max_new
    other: list[list[tuple[int, int]]] = [[] for _ in range(S)]
    on_mask: list[set[int]] = [set() for _ in range(S)]
    for s, m, d in f.edges:
        if m == mask:
            on_mask[s].add(d)
        else:
            other[s].append((m, d))
    if all(len(t) < 2 for t in on_mask):
        return f
    ids: dict[frozenset[int], int] = {}
    todo: list[frozenset[int]] = []

    def target(t: frozenset[int]) -> int:
        if len(t) == 1:
            return next(iter(t))
        hit = ids.get(t)
        if hit is None:
            hit = ids[t] = S + len(ids)
            todo.append(t)
        return hit

    edges: list[tuple[int, int, int]] = []
    for s in range(S):
        edges.extend((s, m, d) for m, d in other[s])
        if on_mask[s]:
            edges.append((s, mask, target(frozenset(on_mask[s]))))
    finals = set(f.finals)
    while todo:
        if len(ids) > limit:
            return f
        t = todo.pop()
        q = ids[t]
        union: set[int] = set()
        for x in t:
            edges.extend((q, m, d) for m, d in other[x])
            union |= on_mask[x]
        if union:
            edges.append((q, mask, target(frozenset(union))))
        if finals.intersection(t):
            finals.add(q)
    return finalize(ByteNFA(S + len(ids), f.start, frozenset(finals), tuple(edges)))
