"""A flat ε-NFA under construction that shares exact copies of sub-automata
(used by :mod:`.approx`)."""

from __future__ import annotations

from ..nfa import ByteNFA

__all__: list[str] = []


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

    def embed(self, a: ByteNFA, s: int, t: int, key=None) -> None:
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

    def _copy(self, a: ByteNFA) -> int:
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

