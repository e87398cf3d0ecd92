"""Per-state prefix rows of the GCD masks (paper 002 eq. 2): :class:`PrefixRows`.

For a state s, sort its out-edges by the distance to acceptance of their destination; the
states' *levels* are the distinct distances.  The GCD mask of {s} for threshold d = r − 1 is the
OR of the label rows of the edges up to the last level <= d — a *prefix* of that list — and the
mask of a set X is the OR of its members' prefix rows (:meth:`PrefixRows.union_into`).  The
prefix rows of all states are built when the engine is made if they fit in
``_EAGER_PREFIX_BYTES`` (so a first walk after compile unions ready rows; measured: 10 MB for
bench/'s 345-state json_object regex at 128k ids), else per state on first use.  Used by
:class:`~.masks.MaskEngine`, which calls :meth:`~PrefixRows.fill` / ``union_into`` under its
lock (this class takes none).  An accepting state's prefix rows include the EOS ids (given
``final`` and ``eos_row``): the mask of a one-member accepting set is then a ready row too
(measured: the cold EOS step of bench/'s walks took 16-20 us to OR a table row).
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

__all__ = ["PrefixRows"]

# Prefix rows are built for every state up front when they fit in this many bytes.
_EAGER_PREFIX_BYTES = 16 << 20
# Sets of at most this many members take the plain-Python union (bisect per member); larger
# ones one vectorized searchsorted.
_SMALL_SET = 8


class PrefixRows:
    """Prefix rows of one automaton's states (module docstring).

    Attributes: ``pair_key`` int64 [P] = state * K + level over the (state, level) pairs,
    ascending; ``pair_ptr`` int64 [S + 1]: pairs of state s are ``pair_ptr[s]:pair_ptr[s+1]``
    (``pair_ptr_list``: the same as a list; ``pair_level_list``: each pair's level, a list);
    ``rows[s]``: int32 [k_s, W] (row j = OR of the labels of the edges of s's first j + 1
    levels) or None until filled; ``live[s]``: row j non-empty? (a label row is never empty
    in a built or loaded automaton; one made by hand may be).  Mutated only by ``fill`` (and
    ``union_into``, which fills on demand): callers serialize those calls.
    """

    def __init__(self, S: int, W: int, out_ptr: np.ndarray, out_edge: np.ndarray,
                 dst: np.ndarray, label: np.ndarray, labels: np.ndarray, dist: np.ndarray,
                 *, final: np.ndarray | None = None, eos_row: np.ndarray | None = None):
        """Index the (state, level) pairs of the CSR out-edges (``out_ptr`` int64 [S + 1],
        ``out_edge`` edge ids grouped by source; ``dst``/``label`` per edge; ``labels`` int32
        [L, W] label rows; ``dist`` int64 [S] distances to acceptance): one lexsort over the
        edges; ``pair_labels`` holds the edges' label ids sorted by (source, level) and
        ``pair_edge_hi`` each pair's end in it.  Fills every state's rows when they fit in
        ``_EAGER_PREFIX_BYTES``.  ``final`` (bool-like [S]) and ``eos_row`` (int32 [W]): the
        rows of accepting states are OR-ed with ``eos_row`` (None: never).  Nothing passed in
        is mutated."""
        self.S, self.W = S, W
        self._final = final if eos_row is not None else None
        self._eos_row = eos_row
        self.out_ptr, self.labels = out_ptr, labels
        deg = np.diff(out_ptr)
        srcs = np.repeat(np.arange(S, dtype=np.int64), deg)
        e = out_edge
        dd = dist[dst[e]] if e.size else np.zeros(0, dtype=np.int64)
        order = np.lexsort((dd, srcs))
        srcs, dd = srcs[order], dd[order]
        self.pair_labels = label[e[order]]
        E = srcs.size
        new = np.ones(E, dtype=bool)
        if E:
            new[1:] = (srcs[1:] != srcs[:-1]) | (dd[1:] != dd[:-1])
        start = np.nonzero(new)[0]
        self._K = int(dd.max()) + 2 if E else 2
        self.pair_key = srcs[start] * self._K + dd[start]
        self.pair_edge_hi = np.append(start[1:], E).astype(np.int64)
        self.pair_ptr = np.searchsorted(srcs[start], np.arange(S + 1)).astype(np.int64)
        self.state_edge_lo = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
        self._pair_start = start
        self.pair_ptr_list = self.pair_ptr.tolist()
        self.pair_level_list = dd[start].tolist()
        self.rows: list[np.ndarray | None] = [None] * S
        self.live: list[list[bool] | None] = [None] * S  # prefix row j non-empty?
        P = start.size
        if P and P * self.W * 4 <= _EAGER_PREFIX_BYTES:
            block = np.empty((P, self.W), dtype=np.int32)
            for s in np.nonzero(deg)[0].tolist():
                a, b = int(self.pair_ptr[s]), int(self.pair_ptr[s + 1])
                self.fill(s, block[a:b])

    def fill(self, s: int, out: np.ndarray | None = None) -> np.ndarray:
        """Fill (and keep) state ``s``'s prefix rows int32 [k_s, W] (into ``out`` if given)."""
        a, b = int(self.pair_ptr[s]), int(self.pair_ptr[s + 1])
        lo = int(self.state_edge_lo[s])
        labs = self.pair_labels[lo:int(self.pair_edge_hi[b - 1])]
        if out is None:
            out = np.empty((b - a, self.W), dtype=np.int32)
        if b - a == 1:
            np.bitwise_or.reduce(self.labels[labs], axis=0, out=out[0])
        else:
            np.bitwise_or.reduceat(self.labels[labs], self._pair_start[a:b] - lo, axis=0,
                                   out=out)
            np.bitwise_or.accumulate(out, axis=0, out=out)
        if self._final is not None and self._final[s]:
            np.bitwise_or(out, self._eos_row, out=out)
        # (a label row is never empty in a built or loaded automaton; one made by hand may be)
        self.live[s] = (np.count_nonzero(out, axis=1) > 0).tolist()
        self.rows[s] = out
        return out

    def union_into(self, buf: np.ndarray, members: np.ndarray, d: int,
                   full: bool) -> np.ndarray | None:
        """The union of the prefix rows of ``members`` at level ``d`` (``full``: d >= every
        level, i.e. each member's last prefix row): None when it is empty (no member has a
        non-empty label on an edge at distance <= d); the member's own prefix row (int32 [W],
        not copied: read it, never write it) when exactly one member contributes; else ``buf``
        (int32 [W], overwritten) holding the OR.  ``buf`` is unspecified unless returned."""
        prefix = self.rows
        if members.size <= _SMALL_SET:  # the common case (often one member): no arrays
            ptr = self.pair_ptr_list
            levels = self.pair_level_list
            live = self.live
            got = None
            for s in members.tolist():
                a, b = ptr[s], ptr[s + 1]
                j = b - 1 if full else bisect_right(levels, d, a, b) - 1
                if j < a:
                    continue
                rows = prefix[s]
                if rows is None:
                    rows = self.fill(s)
                if not live[s][j - a]:
                    continue
                if got is None:
                    got = rows[j - a]
                elif got is buf:
                    np.bitwise_or(buf, rows[j - a], out=buf)
                else:
                    np.bitwise_or(got, rows[j - a], out=buf)
                    got = buf
            return got
        if full:
            ms = members[self.pair_ptr[members + 1] > self.pair_ptr[members]]
            js = self.pair_ptr[ms + 1] - self.pair_ptr[ms] - 1
        else:
            q = np.searchsorted(self.pair_key, members * self._K + d, side="right") - 1
            ok = (q >= 0) & (q >= self.pair_ptr[members]) & (q < self.pair_ptr[members + 1])
            ms = members[ok]
            js = q[ok] - self.pair_ptr[ms]
        got = None
        for s, j in zip(ms.tolist(), js.tolist()):
            rows = prefix[s]
            if rows is None:
                rows = self.fill(s)
            if not self.live[s][j]:
                continue
            if got is None:
                got = rows[j]
            elif got is buf:
                np.bitwise_or(buf, rows[j], out=buf)
            else:
                np.bitwise_or(got, rows[j], out=buf)
                got = buf
        return got
