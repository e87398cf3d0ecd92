"""The raw automata the JSON Schema compiler writes state by state, and embeds without copying.

:class:`_Builder` writes an NFA edge by edge and embeds whole automata (property values, array
items, brackets) into it.  An embedded automaton is not copied: the builder keeps a *block*
(the automaton, its state offset, and whether its start is replaced by the entry state), and
:meth:`_Builder.build` returns a :class:`_LazyNFA` whose ``edges``/``epsilons`` are written out on
first access, in one pass over the whole tree of blocks, each edge written once at its final
number.  Copying at every embed wrote each edge once per nesting level, and a Kubernetes pod
spec nests definitions six deep: 0.4 s and ~300 MB of edge tuples on ``kb_1007`` (of ~5 s),
measured here.  The edges come out in exactly the order the copying builder wrote them, so the
automata built from them are the same.
"""

from __future__ import annotations

from .. import nfa as N
from ..errors import InvalidArgumentError
from ..nfa import ByteNFA, _start_entered


class _LazyNFA(ByteNFA):
    """A :class:`ByteNFA` whose ``edges`` and ``epsilons`` are written out on first access.

    Built only by :meth:`_Builder.build`; immutable like any ByteNFA (the segments it keeps
    until then are never changed).  Pickles as a plain :class:`ByteNFA`.
    """

    @property
    def edges(self) -> tuple:  # type: ignore[override]
        return self._materialize()[0]

    @property
    def epsilons(self) -> tuple:  # type: ignore[override]
        return self._materialize()[1]

    def _materialize(self) -> tuple[tuple, tuple]:
        """(edges, epsilons), written on the first call."""
        got = self.__dict__.get("_out")
        if got is not None:
            return got
        edges: list = []
        eps: list = []
        _flatten(self, 0, -1, -1, edges, eps)
        got = (tuple(edges), tuple(eps))
        object.__setattr__(self, "_out", got)
        object.__setattr__(self, "_segs", None)  # the blocks are no longer needed
        return got

    def __reduce__(self) -> tuple:
        return (ByteNFA, (self.num_states, self.start, self.finals, self.edges, self.epsilons))


def _lazy(n: int, start: int, finals: frozenset[int], segs: list, entered: bool) -> _LazyNFA:
    """A :class:`_LazyNFA` (``segs``: see :func:`_flatten`); ``entered``: whether an edge or
    epsilon enters ``start`` (see :meth:`_Builder._enters`)."""
    a = object.__new__(_LazyNFA)
    object.__setattr__(a, "num_states", n)
    object.__setattr__(a, "start", start)
    object.__setattr__(a, "finals", finals)
    object.__setattr__(a, "_cache", {"start_entered": entered})
    object.__setattr__(a, "_segs", segs)
    object.__setattr__(a, "_out", None)
    return a


def _flatten(a: ByteNFA, off: int, sp: int, tgt: int, edges: list, eps: list) -> None:
    """Append ``a``'s edges and epsilons to ``edges``/``eps``, state ``q`` renamed ``tgt`` when
    ``q == sp``, else ``q + off``.

    An unwritten :class:`_LazyNFA` is walked segment by segment: ``("e", edges, eps)`` lists
    written by the builder, ``("b", child, child_off, entry)`` a block: the child's states
    shifted by ``child_off``, its start renamed ``entry`` where ``entry >= 0``.
    """
    segs = a.__dict__.get("_segs") if type(a) is _LazyNFA else None
    if segs is None:
        _flatten_local(a.edges, a.epsilons, off, sp, tgt, edges, eps)
        return
    for seg in segs:
        if seg[0] == "e":
            _flatten_local(seg[1], seg[2], off, sp, tgt, edges, eps)
        else:
            _, child, c_off, entry = seg
            if entry < 0:
                _flatten(child, off + c_off, -1, -1, edges, eps)
            else:
                mapped = tgt if entry == sp else entry + off
                _flatten(child, off + c_off, child.start, mapped, edges, eps)


def _flatten_local(le, lp, off: int, sp: int, tgt: int, edges: list, eps: list) -> None:
    """Append the edges ``le`` and epsilons ``lp`` renamed as in :func:`_flatten`."""
    if off == 0 and sp < 0:
        edges.extend(le)
        eps.extend(lp)
    elif sp < 0:
        edges.extend([(s + off, m, d + off) for s, m, d in le])
        eps.extend([(s + off, d + off) for s, d in lp])
    else:
        edges.extend([(tgt if s == sp else s + off, m, tgt if d == sp else d + off)
                      for s, m, d in le])
        eps.extend([(tgt if s == sp else s + off, tgt if d == sp else d + off) for s, d in lp])


class _Builder:
    """A raw NFA written state by state (digit comparisons, modular automata, objects, arrays).

    ``edges``/``eps``: the edges and epsilons written since the last :meth:`embed` (callers
    append to ``eps`` directly); ``finals``: the accepting states (callers may replace it).
    """

    def __init__(self) -> None:
        self.n = 0
        self.edges: list[tuple[int, int, int]] = []
        self.eps: list[tuple[int, int]] = []
        self.finals: set[int] = set()
        self._segs: list[tuple] = []  # closed segments, in writing order (see _flatten)
        self._own: list[tuple[list, list]] = []  # the builder's own edge/epsilon lists

    def state(self) -> int:
        self.n += 1
        return self.n - 1

    def edge(self, s: int, mask: int, d: int) -> None:
        if mask:
            self.edges.append((s, mask, d))

    def chain(self, s: int, text: str, d: int | None = None) -> int:
        for i, ch in enumerate(text):
            nxt = d if (d is not None and i == len(text) - 1) else self.state()
            self.edge(s, 1 << ord(ch), nxt)
            s = nxt
        return s

    def _close(self) -> None:
        """End the current segment of the builder's own edges and epsilons."""
        if self.edges or self.eps:
            self._segs.append(("e", self.edges, self.eps))
            self._own.append((self.edges, self.eps))
            self.edges, self.eps = [], []

    def embed(self, a: ByteNFA | tuple[ByteNFA, ...], src: int) -> frozenset[int]:
        """Embed ``a``, entered from ``src``; returns its finals.  When nothing enters
        ``a``'s start, ``src`` takes its out-moves instead of an epsilon to it (the same
        paths; the epsilon closures of the final pass shrink).  A tuple of automata is their
        concatenation, each embedded once.  ``a`` is not copied (see the module docstring)."""
        if isinstance(a, tuple):
            finals = frozenset({src})
            for part in a:
                if len(finals) == 1:
                    (at,) = finals
                else:
                    at = self.state()
                    self.eps.extend([(f, at) for f in finals])
                finals = self.embed(part, at)
            return finals
        off = self.n
        self.n += a.num_states
        st = a.start
        if _start_entered(a):
            self._close()
            self._segs.append(("b", a, off, -1))
            self.eps.append((src, st + off))
            return frozenset(f + off for f in a.finals)
        self._close()
        self._segs.append(("b", a, off, src))
        return frozenset(src if f == st else f + off for f in a.finals)

    def embed_shifted(self, a: ByteNFA) -> int:
        """Embed ``a`` with its own start (nothing else entered from outside): returns the
        offset of its states."""
        off = self.n
        self.n += a.num_states
        self._close()
        self._segs.append(("b", a, off, -1))
        return off

    def build(self, start: int = 0) -> ByteNFA:
        """The automaton written so far, started at ``start`` (a :class:`_LazyNFA` when
        something was embedded; ``start`` must then be one of the builder's own states, see
        :meth:`_enters`).  The builder may go on being written to: the automaton returned
        keeps only the segments closed here."""
        finals = frozenset(self.finals)
        if not self._segs:
            return ByteNFA(self.n, start, finals, tuple(self.edges), tuple(self.eps))
        self._close()
        return _lazy(self.n, start, finals, list(self._segs), self._enters(start))

    def _enters(self, start: int) -> bool:
        """Whether an edge or epsilon written so far enters ``start``, a state of the builder's
        own: only its own edges and epsilons can (a block's edges enter fresh states of the
        block, never its entry state).

        Raises:
            InvalidArgumentError: ``start`` is a state of an embedded block.
        """
        for seg in self._segs:
            if seg[0] == "b" and seg[2] <= start < seg[2] + seg[1].num_states:
                raise InvalidArgumentError(
                    f"builder start {start} lies inside an embedded automaton's states")
        return any(d == start for le, _ in self._own for _, _, d in le) or any(
            d == start for _, lp in self._own for _, d in lp)

def union(*parts: ByteNFA) -> ByteNFA:
    """:func:`~.nfa.union` without copying the parts: the same states, edges and epsilons in the
    same order (a new start 0 with an epsilon to each part's start), written out lazily."""
    if len(parts) < 2:
        return N.union(*parts)
    b = _Builder()
    b.state()
    finals: set[int] = set()
    for p in parts:
        off = b.embed_shifted(p)
        b.eps.append((0, p.start + off))
        finals.update([f + off for f in p.finals])
    b.finals = finals
    out = b.build(0)
    out._cache["union_of"] = parts  # emptiness from the parts' (._automata._is_empty)
    return out
