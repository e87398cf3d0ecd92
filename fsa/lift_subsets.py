"""Interned sets of byte-NFA states, the lift's walk state (see :mod:`.lift`).

The state set reached from a start state ``{s}`` after some bytes is kept as an interned subset
id in a :class:`_SubsetTable`: ``members[i]`` is subset i's sorted tuple of NFA states (id 0 the
empty, dead set) and ``table[i, c]`` (int32) the subset reached from i by a byte of class c
(bytes no edge distinguishes share a class), -1 until row i is expanded.  Rows are filled on demand
(:meth:`_SubsetTable.expand`, :meth:`_SubsetTable.expand_singletons`, :func:`_expand_missing`).
Subsets only ever arise from token-length walks out of a single state; the automaton itself is
never determinized.

:func:`_edge_arrays`: an NFA's edges as arrays (cached on the NFA).  :func:`_member_arrays` and
:func:`_expand_members`: the members of the subsets interned so far as flat arrays, to turn
walk records (start, node, subset) into one entry per member state.
"""

from __future__ import annotations

import numpy as np

from .arrays import ranges as _ranges
from .arrays import run_starts as _run_starts
from .arrays import sorted_unique
from .nfa import ByteNFA, byte_classes

__all__: list[str] = []


def _edge_arrays(nfa: ByteNFA) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """(source, destination, mask id) int64 [E] of ``nfa.edges`` and the distinct masks in order
    of first use (mask id i is ``masks[i]``); cached on the NFA.  The component split, the
    subset table and the lift's edge split read these instead of each turning the edge tuples
    into arrays."""
    hit = nfa._cache.get("edge_arrays")
    if hit is None:
        if nfa.edges:
            s, m, d = zip(*nfa.edges)
        else:
            s = m = d = ()
        masks = list(dict.fromkeys(m))  # distinct, in order of first use
        ids = {x: i for i, x in enumerate(masks)}
        hit = nfa._cache["edge_arrays"] = (
            np.array(s, dtype=np.int64), np.array(d, dtype=np.int64),
            np.fromiter(map(ids.__getitem__, m), dtype=np.int64, count=len(m)), masks)
    return hit


class _SubsetTable:
    """Interned sets of byte-NFA states with a lazily filled class-transition table."""

    def __init__(self, nfa: ByteNFA, classes: tuple[list[int], int] | None = None,
                 arrays: tuple | None = None):
        """``classes``: a byte partition to use instead of ``nfa``'s own (it must not merge
        bytes that some edge tells apart); ``arrays``: ``nfa``'s :func:`_edge_arrays` when the
        caller has them."""
        # per distinct mask: the classes it covers (a schema's ~1,000 edges carry ~100 masks)
        src, dst, mid_a, masks = arrays if arrays is not None else _edge_arrays(nfa)
        cls, ncls = classes if classes is not None else byte_classes(masks)
        self.class_of_byte = np.array(cls, dtype=np.int64)
        self.num_classes = ncls
        rep_mask = 0  # one representative byte per class (its smallest)
        for b in np.unique(self.class_of_byte, return_index=True)[1].tolist():
            rep_mask |= 1 << b
        covers: list[tuple[int, ...]] = []
        for m in masks:
            covered = []
            mm = m & rep_mask
            while mm:
                low = mm & -mm
                covered.append(cls[low.bit_length() - 1])
                mm ^= low
            covers.append(tuple(covered))
        E = int(src.size)
        ccount = np.array([len(c) for c in covers], dtype=np.int64)
        cflat = np.fromiter((c for cv in covers for c in cv), dtype=np.int64,
                            count=int(ccount.sum()))
        cptr = np.cumsum(ccount) - ccount
        k = ccount[mid_a] if E else np.zeros(0, dtype=np.int64)
        # one (source, class, destination) per class an edge covers
        self._e_src = np.repeat(src, k)
        self._e_cls = cflat[_ranges(cptr[mid_a], k)] if E else np.zeros(0, dtype=np.int64)
        self._e_dst = np.repeat(dst, k)
        # per NFA state: list of (classes covered, dst), built on first use by expand()
        self._covers = covers
        self._mid = mid_a
        self._dst = dst
        order = np.argsort(src, kind="stable")
        self._by_src = order
        self._src_ptr = np.searchsorted(src[order], np.arange(nfa.num_states + 1)).tolist()
        self._out: dict[int, list[tuple[tuple[int, ...], int]]] = {}
        self.members: list[tuple[int, ...]] = [()]
        self.ids: dict[tuple[int, ...], int] = {(): 0}
        # rows are allocated by intern_singletons (every caller's next step; at least one per
        # NFA state, as here before) or grown by intern: allocating them here as well cost a
        # second [states, classes] array (kb_1004: 86 MB)
        self._rows_hint = max(64, nfa.num_states + 1)
        # int32: half the memory of int64 (kb_1004: 53 MB instead of 107 MB, each page touched
        # first in the compile) and of the walks' random gathers; ids stay below _MAX_SUBSETS
        self.table = np.full((64, ncls), -1, dtype=_TABLE_DTYPE)
        self.table[0, :] = 0  # the dead set goes nowhere
        # whether each row is filled: the walks test this for every frontier entry, and a
        # byte per subset stays in cache where the table's first column did not (kb_1004)
        self.done = np.zeros(64, dtype=bool)
        self.done[0] = True
        self.expanded = 0
        self._arrays: tuple | None = None  # see _member_arrays
        self._single_n = 0

    def _out_of(self, q: int) -> list[tuple[tuple[int, ...], int]]:
        """(classes covered, destination) per out-edge of state ``q``, in edge order."""
        out = self._out.get(q)
        if out is None:
            ix = self._by_src[self._src_ptr[q]:self._src_ptr[q + 1]]
            covers = self._covers
            out = self._out[q] = [
                (covers[i], d) for i, d in zip(self._mid[ix].tolist(), self._dst[ix].tolist())]
        return out

    def intern(self, states: tuple[int, ...]) -> int:
        i = self.ids.get(states)
        if i is None:
            i = self.ids[states] = len(self.members)
            self.members.append(states)
            rows = self.table.shape[0]
            if i >= rows:
                self.reserve(rows + max(rows // 4, 64))
        return i

    def reserve(self, rows: int) -> None:
        """Grow :attr:`table` to at least ``rows`` rows (new rows -1).  Growth copies the
        table (int64 [rows, classes]: 86 MB for Kubernetes ``kb_1004``'s 145k singletons), so
        :meth:`intern_singletons` allocates it once with headroom and one-by-one interning
        (:meth:`intern`) grows it by a quarter, not a doubling (doubling that table and filling
        its new half took 0.3-0.6 s, measured in that compile)."""
        old = self.table
        if rows <= old.shape[0]:
            return
        _check_subsets(rows)
        new = np.empty((rows, self.num_classes), dtype=_TABLE_DTYPE)
        new[:old.shape[0]] = old
        new[old.shape[0]:] = -1
        self.table = new
        done = np.zeros(rows, dtype=bool)
        done[:self.done.size] = self.done
        self.done = done

    def intern_singletons(self, n: int) -> np.ndarray:
        """int64 [n]: the ids of the subsets ``(0,) .. (n-1,)``, interned in bulk when the
        table holds only the dead set (ids 1..n), else one by one."""
        if len(self.members) != 1:
            return np.array([self.intern((q,)) for q in range(n)], dtype=np.int64)
        new = [(q,) for q in range(n)]
        self._single_n = n  # ids 1..n are the singletons (see _member_arrays)
        self.members.extend(new)
        self.ids.update(zip(new, range(1, n + 1)))
        # headroom for the subsets the walks intern next (kb_1004: 11 % more than n); the table
        # holds only the dead set's row, so it is allocated afresh rather than copied
        rows = max(n + 1 + n // 4, self._rows_hint)
        if rows > self.table.shape[0]:
            _check_subsets(rows)
            self.table = np.full((rows, self.num_classes), -1, dtype=_TABLE_DTYPE)
            self.table[0, :] = 0
            self.done = np.zeros(rows, dtype=bool)
            self.done[0] = True
        return np.arange(1, n + 1, dtype=np.int64)

    def expand(self, sid: int) -> None:
        """Fill the transition row of subset ``sid`` (one interned subset per class)."""
        nxt: dict[int, set[int]] = {}
        for q in self.members[sid]:
            for covered, d in self._out_of(q):
                for c in covered:
                    x = nxt.get(c)
                    if x is None:
                        nxt[c] = {d}
                    else:
                        x.add(d)
        row = np.zeros(self.num_classes, dtype=_TABLE_DTYPE)
        for c, x in nxt.items():
            row[c] = self.intern(tuple(sorted(x)) if len(x) > 1 else (next(iter(x)),))
        self.table[sid, :] = row
        self.done[sid] = True
        self.expanded += 1

    def expand_singletons(self, single: np.ndarray) -> None:
        """Fill the rows of every singleton subset at once: ``single`` int64 [num states] is
        the interned id of ``(q,)`` for each NFA state q.  Same rows as :meth:`expand` (a
        class read by several edges to distinct destinations is interned by a Python call,
        the rest by array ops: 330 rows of a Github_medium schema in 0.2 ms, where one
        :meth:`expand` call per row took 1 ms, measured here)."""
        n, C = single.size, self.num_classes
        todo = ~self.done[single]
        if not todo.any():
            return
        sel = todo[self._e_src]
        src, c, d = self._e_src[sel], self._e_cls[sel], self._e_dst[sel]
        key = sorted_unique((src * C + c) * n + d)  # distinct (source, class, destination)
        sc, dst = key // n, key % n
        first = _run_starts(sc)
        cnt = np.diff(np.append(first, sc.size))
        val = single[dst[first]]
        multi = np.nonzero(cnt > 1)[0]
        if multi.size:  # interned in the same order as one call per row would
            fm, km = first[multi], cnt[multi]
            dl = dst[_ranges(fm, km)].tolist()  # the multi runs' destinations, run after run
            ids, intern = self.ids, self.intern
            got = []
            a = 0
            for k in km.tolist():
                t = tuple(dl[a:a + k])
                a += k
                i = ids.get(t)
                got.append(intern(t) if i is None else i)
            val[multi] = got
        q = np.nonzero(todo)[0]
        table = self.table  # (read after interning: it may have grown)
        table[single[q]] = 0
        self.done[single[q]] = True  # (read after interning too)
        s0 = sc[first]
        table.reshape(-1)[single[s0 // C] * C + s0 % C] = val
        self.expanded += int(q.size)


# The subset table's entries (subset ids).  int32 holds 2^31 - 1 subsets: a table of that
# many rows would take 8 GiB per byte class, far past the lift's memory budget (lift_budget).
_TABLE_DTYPE = np.int32
_MAX_SUBSETS = 2**31 - 1


def _check_subsets(rows: int) -> None:
    """Raise :class:`~.errors.LiftSizeError` where ``rows`` subset ids would not fit the
    table's int32 entries."""
    if rows > _MAX_SUBSETS:
        from .errors import LiftSizeError

        raise LiftSizeError(f"{rows:,} interned state sets (int32 subset table)", rows,
                            _MAX_SUBSETS)


def _expand_missing(subsets: _SubsetTable, sids: np.ndarray) -> None:
    """Fill the table rows of the subsets in ``sids`` not yet expanded."""
    miss = ~subsets.done[sids]
    if miss.any():
        # distinct subset ids by a flag array: np.unique hashed tens of millions of entries
        # per step on the largest schemas (540 s of 770 s on 30 Github_medium schemas)
        seen = np.zeros(len(subsets.members), dtype=bool)
        seen[sids[miss]] = True
        for sid in np.nonzero(seen)[0]:
            subsets.expand(int(sid))


def _member_arrays(subsets: _SubsetTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sizes int64 [n], ptr int64 [n+1], flat members) of the subsets interned so far, kept on
    the table and extended with the subsets interned since the last call."""
    n = len(subsets.members)
    have = subsets._arrays
    if have is not None and have[0] == n:
        return have[1:]
    if have is None and subsets._single_n:  # the dead set, then the bulk-interned singletons
        k = subsets._single_n
        have = (k + 1, np.append(np.zeros(1, dtype=np.int64), np.ones(k, dtype=np.int64)),
                None, np.arange(k, dtype=np.int64))
    old = 0 if have is None else have[0]
    new = subsets.members[old:]
    sizes = np.fromiter((len(m) for m in new), dtype=np.int64, count=len(new))
    flat = np.fromiter((q for m in new for q in m), dtype=np.int64, count=int(sizes.sum()))
    if have is not None:
        sizes = np.concatenate([have[1], sizes])
        flat = np.concatenate([have[3], flat])
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    subsets._arrays = (n, sizes, ptr, flat)
    return sizes, ptr, flat


def _expand_members(subsets: _SubsetTable, sid: np.ndarray):
    """(index into ``sid``, member state) for every member of every subset ``sid[i]``."""
    sizes, ptr, flat = _member_arrays(subsets)
    k = sizes[sid]
    n = sid.size
    one = k == 1
    n_one = int(np.count_nonzero(one))
    if n_one == n:  # singletons only (most walks' records)
        return np.arange(n, dtype=np.int64), flat[ptr[sid]]
    idx = np.repeat(np.arange(n, dtype=np.int64), k)
    if 8 * n_one < 7 * n:
        return idx, flat[_ranges(ptr[sid], k)]
    # mostly singletons (kb_1004: 4.2M records, 0.06 % of them larger sets): one gather for
    # them and ranges only for the others, in the same order (0.37 s of ranges before)
    at = np.cumsum(k) - k  # where each record's members start
    out = np.empty(idx.size, dtype=flat.dtype)
    o = np.flatnonzero(one)
    out[at[o]] = flat[ptr[sid[o]]]
    m = np.flatnonzero(k > 1)
    km = k[m]
    out[_ranges(at[m], km)] = flat[_ranges(ptr[sid[m]], km)]
    return idx, out
