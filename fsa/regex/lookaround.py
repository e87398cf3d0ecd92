"""Lookahead and lookbehind, compiled exactly (used by :mod:`.compile` for patterns that have them).

The pattern is first compiled by :mod:`.compile` with a *marker* edge (bit ``MARKER_SHIFT + k``
above the 256 byte bits) wherever lookaround ``k`` is tested, and each body is compiled the same
way (nested lookarounds are markers too).  Anchors other than the no-op leading ``^`` and
trailing ``$`` become lookarounds on this path (``\\A`` = ``(?<![\\s\\S])``, ``$`` =
``(?![^\\n]|\\n[\\s\\S])``, ...).  :func:`lookaround_product` then intersects that marked language
with the regular language "at every marker of kind k the rest of the string is in B_k·Σ*
(lookahead) / the prefix is in Σ*·B_k (lookbehind), or is not (negative)" and erases the markers,
on the fly, as one product automaton over bytes whose states are

* ``r``, the state of the marked pattern (nondeterministic);
* for each lookbehind, the *set* of states of Σ*·B_k reached by the prefix (deterministic:
  the subset construction, so a negative lookbehind is a complement);
* ``P``: the pending positive lookaheads, one guessed run ``(k, q)`` of B_k each (an obligation
  is dropped when its run reaches a final state: the rest is Σ*);
* ``N``: the pending negative lookaheads, the *set* of every run of their bodies (the subset
  construction again): the product state dies as soon as one of them has matched.

Runs carry what they owe: a run of a body that passes a nested positive lookahead adds an
obligation to its own ``P``, a nested negative one to its own ``N``; a run inside ``N`` is an
*element* ``(k, q, P, N)`` that counts as a match once ``q`` is final (``q`` becomes ``None``),
its ``P`` is empty and its ``N`` cannot match any more (at the end of the string) — so negation
nests to any depth, and a lookahead inside a lookbehind is a lookbehind run carrying obligations
on the rest of the string.  Nested lookbehinds read the global subset of the current position
(lookbehinds are numbered inner first, and updated in that order).  Bodies match whole code
points from code-point boundaries (markers only occur there), so the byte-level runs are exact.

Everything is exact; the only limit is size: more than :data:`MAX_LOOKAROUND_STATES` product
states (or one subset that large) raises :class:`UnsupportedRegexError` naming the lookaround
whose component took the most distinct values, its position and the count reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product as _cartesian

from .. import nfa as N
from ..errors import UnsupportedRegexError
from ..nfa import ALL_BYTES, ByteNFA

__all__ = ["Lookaround", "lookaround_product", "MARKER_SHIFT", "MAX_LOOKAROUND_STATES"]

#: Most states of the lookaround product (and elements of one run set) before
#: :class:`UnsupportedRegexError`: 2^15 subsets of one negative lookahead took 2.4 s here, so
#: this many take 5-10 s (and the token automaton lifted from them is large).
MAX_LOOKAROUND_STATES = 100_000

#: Lookaround ``k`` is tested where an edge carries bit ``MARKER_SHIFT + k`` (above the byte bits
#: and the anchor markers of :mod:`.compile`).
MARKER_SHIFT = 264

_EMPTY: frozenset = frozenset()


@dataclass(frozen=True)
class Lookaround:
    """One lookaround (or anchor) of a pattern: ``body`` is its marked byte NFA."""

    behind: bool
    negative: bool
    body: ByteNFA
    construct: str  # "lookahead", "negative lookbehind", "anchor $", ...
    position: int | None


class _Auto:
    """A finalized marked NFA, split into byte transitions per byte class and marker edges."""

    __slots__ = ("start", "finals", "bytes_out", "marks", "rows")

    def __init__(self, nfa: ByteNFA):
        f = N.finalize(nfa)
        self.start = f.start
        self.finals = f.finals
        self.bytes_out: list[list[tuple[int, int]]] = [[] for _ in range(f.num_states)]
        self.marks: list[list[tuple[int, int]]] = [[] for _ in range(f.num_states)]
        self.rows: list = [None] * f.num_states
        for s, m, d in f.edges:
            if m & ALL_BYTES:
                self.bytes_out[s].append((m & ALL_BYTES, d))
            hi = m >> MARKER_SHIFT
            if m >> 256 and not hi:
                raise AssertionError("anchor marker on the lookaround path")
            while hi:
                low = hi & -hi
                self.marks[s].append((low.bit_length() - 1, d))
                hi ^= low


class _Product:
    def __init__(self, main: ByteNFA, looks: list[Lookaround], pattern: str):
        self.looks = looks
        self.pattern = pattern
        autos = [_Auto(main)]
        for lk in looks:
            body = N.concat(N.star(N.any_codepoint()), lk.body) if lk.behind else lk.body
            autos.append(_Auto(body))
        self.autos = autos
        self.finals = [a.finals for a in autos]
        masks = {m for a in autos for row in a.bytes_out for m, _ in row}
        cls, ncls = N.byte_classes(masks)
        self.cmask = [0] * ncls
        for b, c in enumerate(cls):
            self.cmask[c] |= 1 << b
        self.classes = [c for c in range(1, ncls)]  # class 0: bytes on no edge at all
        self.behind = [k for k, lk in enumerate(looks) if lk.behind]
        self.tpos = {k: i for i, k in enumerate(self.behind)}
        self.memo_close: dict = {}
        self.memo_step: dict = {}
        self.memo_stepP: dict = {}
        self.memo_track: dict = {}
        self.memo_safe: dict = {}

    # -- automata
    def trans(self, a: int, q: int, c: int) -> tuple[int, ...]:
        au = self.autos[a]
        row = au.rows[q]
        if row is None:
            cm = self.cmask
            row = au.rows[q] = [tuple(d for m, d in au.bytes_out[q] if m & cm[c0])
                                for c0 in range(len(cm))]
        return row[c]

    def discharge(self, P: frozenset) -> frozenset:
        fin = self.finals
        if any(q in fin[a] for a, q in P):
            return frozenset(x for x in P if x[1] not in fin[x[0]])
        return P

    # -- markers
    def apply(self, k: int, P: frozenset, Ns: frozenset, T: tuple) -> list:
        """The (P, N) pairs after testing lookaround ``k`` here ([] when it fails)."""
        lk = self.looks[k]
        a = k + 1
        if not lk.behind:
            st = self.autos[a].start
            if not lk.negative:
                return [(P if st in self.finals[a] else P | {(a, st)}, Ns)]
            new = self.close(frozenset({(a, st, _EMPTY, _EMPTY)}), T, True)
            return [] if new is None else [(P, Ns | new)]
        fin = [e for e in T[self.tpos[k]] if e[1] in self.finals[a]]
        if not lk.negative:
            return [(P | e[2], Ns | e[3]) for e in fin]
        if any(not e[2] and not e[3] for e in fin):
            return []
        return [(P, Ns | frozenset((a, None, e[2], e[3]) for e in fin))]

    def moves(self, a: int, q: int | None, P: frozenset, Ns: frozenset, T: tuple) -> list:
        """Configurations one marker move away (by the run itself or by one of its P runs)."""
        out = []
        if q is not None:
            for k, d in self.autos[a].marks[q]:
                for P2, N2 in self.apply(k, P, Ns, T):
                    out.append((a, d, self.discharge(P2), N2))
        for item in P:
            b, p = item
            for k, d in self.autos[b].marks[p]:
                rest = (P - {item}) | {(b, d)}
                for P2, N2 in self.apply(k, rest, Ns, T):
                    out.append((a, q, self.discharge(P2), N2))
        return out

    def close(self, S: frozenset, T: tuple, neg: bool) -> frozenset | None:
        """Close a set of runs under marker moves.  ``neg``: the runs of negative lookaheads
        (a run with a final ``q`` is done, ``q = None``; None is returned when one has matched)."""
        key = (S, T, neg)
        hit = self.memo_close.get(key, key)
        if hit is not key:
            return hit
        out: set = set()
        stack = list(S)
        fin = self.finals
        while stack:
            a, q, P, Ns = stack.pop()
            if neg and q is not None and q in fin[a]:
                q = None
            e = (a, q, P, Ns)
            if e in out:
                continue
            if neg and q is None and not P and not Ns:
                self.memo_close[key] = None
                return None
            out.add(e)
            if len(out) > MAX_LOOKAROUND_STATES:
                self.too_big(len(out), runs=out)
            stack.extend(self.moves(a, q, P, Ns, T))
        res = frozenset(out)
        self.memo_close[key] = res
        return res

    # -- bytes
    def step_P(self, P: frozenset, c: int) -> list:
        key = (P, c)
        hit = self.memo_stepP.get(key)
        if hit is None:
            if not P:
                hit = [_EMPTY]
            else:
                choices = [[(a, d) for d in self.trans(a, q, c)] for a, q in P]
                alts = {self.discharge(frozenset(x)) for x in _cartesian(*choices)}
                # a choice that owes a superset of another's obligations accepts less: drop it
                hit = [x for x in alts if not any(y < x for y in alts)]
            self.memo_stepP[key] = hit
        return hit

    def step_set(self, S: frozenset, c: int, T: tuple, neg: bool) -> frozenset | None:
        """The closed set of runs after one byte of class ``c`` (``T``: the lookbehind subsets
        after that byte)."""
        if not S:
            return S
        key = (S, c, T, neg)
        hit = self.memo_step.get(key, key)
        if hit is not key:
            return hit
        nxt = set()
        for a, q, P, Ns in S:
            qs = (None,) if q is None else self.trans(a, q, c)
            if not qs:
                continue
            Ps = self.step_P(P, c)
            if not Ps:
                continue
            N2 = self.step_set(Ns, c, T, True)
            if N2 is None:
                continue
            nxt.update((a, q2, P2, N2) for q2 in qs for P2 in Ps)
        res = self.close(frozenset(nxt), T, neg)
        self.memo_step[key] = res
        return res

    def step_trackers(self, T: tuple, c: int) -> tuple:
        key = (T, c)
        hit = self.memo_track.get(key)
        if hit is None:
            new = list(T)
            for i in range(len(T)):  # inner lookbehinds first: a closure reads only those
                new[i] = self.step_set(T[i], c, tuple(new), False)
            hit = self.memo_track[key] = tuple(new)
        return hit

    def end_safe(self, Ns: frozenset) -> bool:
        """No run of a negative lookahead matches once the string ends here."""
        hit = self.memo_safe.get(Ns)
        if hit is None:
            hit = not any(q is None and not P and self.end_safe(M) for _a, q, P, M in Ns)
            self.memo_safe[Ns] = hit
        return hit

    # -- the product
    def build(self) -> ByteNFA:
        T: list = []
        for k in self.behind:
            s0 = frozenset({(k + 1, self.autos[k + 1].start, _EMPTY, _EMPTY)})
            T.append(self.close(s0, tuple(T), False))
        init = (self.autos[0].start, tuple(T), _EMPTY, _EMPTY)
        ids = {init: 0}
        order = [init]
        edges: dict[tuple[int, int], int] = {}
        eps: list[tuple[int, int]] = []
        finals = []
        main_fin = self.finals[0]

        def get(st) -> int:
            i = ids.get(st)
            if i is None:
                i = ids[st] = len(order)
                order.append(st)
                if i >= MAX_LOOKAROUND_STATES:
                    self.too_big(i + 1, states=order)
            return i

        for src, (r, T, P, Ns) in enumerate(order):  # grows while iterating
            if r in main_fin and not P and self.end_safe(Ns):
                finals.append(src)
            for _a, r2, P2, N2 in self.moves(0, r, P, Ns, T):
                eps.append((src, get((r2, T, P2, N2))))
            for c in self.classes:
                rs = self.trans(0, r, c)
                if not rs:
                    continue
                Ps = self.step_P(P, c)
                if not Ps:
                    continue
                T2 = self.step_trackers(T, c)
                N2 = self.step_set(Ns, c, T2, True)
                if N2 is None:
                    continue
                m = self.cmask[c]
                for r2 in rs:
                    for P2 in Ps:
                        key = (src, get((r2, T2, P2, N2)))
                        edges[key] = edges.get(key, 0) | m
        out = ByteNFA(len(order), 0, frozenset(finals),
                      tuple((s, m, d) for (s, d), m in edges.items()), tuple(eps))
        return N.finalize(out)

    def too_big(self, count: int, states: list = (), runs: set = ()):
        """Raise for the lookaround whose part of the product state took the most distinct
        values (or, for one oversized set of ``runs``, the lookaround most of them belong to)."""
        seen: list[set] = [set() for _ in self.looks]
        for _r, T, P, Ns in states:
            for k, lk in enumerate(self.looks):
                a = k + 1
                seen[k].add((frozenset(x for x in P if x[0] == a),
                             frozenset(e for e in Ns if e[0] == a),
                             T[self.tpos[k]] if lk.behind else None))
        for e in runs:
            seen[e[0] - 1].add(e)
        k = max(range(len(self.looks)), key=lambda i: len(seen[i]))
        lk = self.looks[k]
        raise UnsupportedRegexError(
            f"{lk.construct} (compiling it exactly needs more than MAX_LOOKAROUND_STATES="
            f"{MAX_LOOKAROUND_STATES} states: {count} reached, {len(seen[k])} distinct states of "
            "this lookaround's runs)",
            self.pattern, lk.position,
        )


def lookaround_product(main: ByteNFA, looks: list[Lookaround], pattern: str) -> ByteNFA:
    """The byte NFA of the marked pattern ``main`` with every lookaround of ``looks`` enforced
    and the markers erased (finalized).  See the module docstring.

    Raises:
        UnsupportedRegexError: the product exceeds :data:`MAX_LOOKAROUND_STATES`.
    """
    return _Product(main, looks, pattern).build()
