"""Packed token-set rows: pack, hash, compare, gather and deduplicate them (for the lift).

A token set over a vocabulary of V tokens is a row of ``ceil(V/32)`` uint32 words, token v at bit
``v & 31`` of word ``v >> 5``: :func:`pack_rows` packs (row, token) pairs, :func:`_pack_sets` the
tokens of groups of trie nodes, and :class:`SparseRows` holds such rows by their nonzero words
(hashed, compared and scattered without being made dense).  :func:`take_rows` gathers rows
numbered across several parts (dense arrays or :class:`SparseRows`).

Exact dedup: :func:`dedup_rows` groups rows by :func:`_row_hashes` (a random 64-bit hash; equal
rows hash equal, rows differing in one word never collide), compares each row word for word with
the first of its group, and settles collisions by the rows' bytes.  :func:`dedup_sets` does the
same for sorted id sets (hashed by :func:`_token_hashes`, compared element-wise, collisions by an
exact fallback).  Hashes only group candidates; equality is always checked exactly.

The integer-array primitives these are built with live in :mod:`.arrays` (re-exported here
under their former names).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arrays import ranges as _ranges
from .arrays import run_starts as _run_starts
from .arrays import sorted_unique, stable_argsort
from .lift_budget import charge, release

__all__ = [
    "SparseRows",
    "dedup_rows",
    "dedup_sets",
    "pack_rows",
    "sorted_unique",
    "stable_argsort",
    "take_rows",
]


#: pack_rows takes the sparse path up to this many pairs; more pairs fill most words anyway.
_PACK_SPARSE_MAX = 1 << 16


def pack_rows(row: np.ndarray, tok: np.ndarray, num_rows: int, vocab_size: int) -> np.ndarray:
    """uint32 [num_rows, ceil(V/32)]: bit ``t & 31`` of word ``t >> 5`` of row ``row[i]`` set for
    each pair (``row[i]``, ``tok[i]``).  Pairs must be distinct.

    Up to ``_PACK_SPARSE_MAX`` pairs (sorted by (row, token) first when they do not come so
    and are few per word): the bits of each word are OR-ed by one ``reduceat`` and only the
    words that get a bit are written, so the cost follows the pairs: 294 small label sets of a
    Github_medium schema in 0.5 ms, where a ``bincount`` over every word took 5 ms.  More
    pairs (token sets listed in trie order, up to ~10^6 of them): distinct tokens of one word
    have distinct bits, so summing bit values equals OR-ing them, one ``bincount`` pass
    (sorting them first took ~30x longer; measured here).
    """
    charge(4 * ((vocab_size + 31) // 32) * int(num_rows), f"{int(num_rows):,} packed token rows")
    return _pack_rows(row, tok, num_rows, vocab_size)


def _pack_rows(row: np.ndarray, tok: np.ndarray, num_rows: int, vocab_size: int) -> np.ndarray:
    """:func:`pack_rows` without charging the lift budget (a caller charged the whole array)."""
    W = (vocab_size + 31) // 32
    if num_rows == 0 or row.size == 0:
        return np.zeros((num_rows, W), dtype=np.uint32)
    key = row.astype(np.int64, copy=False) * W + (tok >> 5)
    ordered = key.size < 2 or bool((key[1:] >= key[:-1]).all())
    if key.size > _PACK_SPARSE_MAX or (not ordered and key.size * 20 > num_rows * W):
        charge(8 * W * int(num_rows), f"a float64 bincount of {int(num_rows):,} token rows")
        words = np.bincount(key, weights=np.left_shift(1, tok & 31).astype(np.float64),
                            minlength=num_rows * W)
        out = words.astype(np.uint32).reshape(num_rows, W)
        del words
        release(8 * W * int(num_rows))
        return out
    if not ordered:
        # few pairs out of order (label rows list tokens group by group): one sort of
        # row * 32W + token; 9k pairs of 300 rows in 1.3 ms where the bincount over every
        # word took 1.9 ms, 2k pairs 0.4 vs 1.0 ms (measured here; per pair the sort costs
        # about 20 words of the bincount)
        full = np.sort(row.astype(np.int64, copy=False) * (W * 32) + tok)
        key, tok = full >> 5, full & 31
    out = np.zeros(num_rows * W, dtype=np.uint32)
    bits = np.left_shift(np.uint32(1), (tok & 31).astype(np.uint32))
    first = _run_starts(key)
    out[key[first]] = np.bitwise_or.reduceat(bits, first)
    return out.reshape(num_rows, W)


# rows packed per chunk (a float64 bincount of chunk x W words: 64 MB at V = 128k)
_PACK_CHUNK = 2048


def _pack_sets(node: np.ndarray, reps, term_ptr, term_tokens, V: int) -> np.ndarray:
    """uint32 [len(reps), ceil(V/32)]: row i holds the tokens ending at the trie nodes
    ``node[a:b]``, ``reps[i] = (a, b)``; packed in chunks of ``_PACK_CHUNK`` rows."""
    charge(4 * ((V + 31) // 32) * len(reps), f"{len(reps):,} packed token sets")
    packed = np.empty((len(reps), (V + 31) // 32), dtype=np.uint32)
    for c0 in range(0, len(reps), _PACK_CHUNK):
        chunk = reps[c0:c0 + _PACK_CHUNK]
        a = np.array([r[0] for r in chunk], dtype=np.int64)
        cnt = np.array([r[1] - r[0] for r in chunk], dtype=np.int64)
        g = node[_ranges(a, cnt)]
        gsize = term_ptr[g + 1] - term_ptr[g]
        toks = term_tokens[_ranges(term_ptr[g], gsize)]
        local = np.repeat(np.repeat(np.arange(len(chunk), dtype=np.int64), cnt), gsize)
        packed[c0:c0 + len(chunk)] = _pack_rows(local, toks, len(chunk), V)
    return packed


_ROW_HASH: dict[int, np.ndarray] = {}
#: rows hashed per block by :func:`_row_hashes` (64 MiB: ~4k Llama-3 rows)
_HASH_BLOCK_BYTES = 64 << 20


def _hash_weights(W: int) -> np.ndarray:
    """uint64 [ceil(W/2)]: the odd random weights of :func:`_row_hashes` for rows of W words."""
    W2 = (W + 1) // 2
    R = _ROW_HASH.get(W2)
    if R is None:
        R = _ROW_HASH[W2] = np.random.default_rng(0x5EED).integers(
            0, 2**63, size=W2, dtype=np.int64).view(np.uint64) | np.uint64(1)
    return R


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on uint64 (a bijection with 0 -> 0)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _row_hashes(table: np.ndarray, rows: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """uint64 [len(rows)]: a random hash of each row ``table[rows[i]]`` (uint32), its words
    read in pairs as uint64: sum over words w of ``R[w] * mix(word w)`` mod 2**64, odd weights
    R and a bijective mix with mix(0) = 0.  Rows differing in one word always hash apart; other
    collisions are rare and settled by the caller.  (Without the mix, rows of one token at bit
    63 of different words, ids 63 mod 64, all collided: 14 of 434 Github_medium o11515 rows.)"""
    W = table.shape[1]
    R = _hash_weights(W)
    h = np.zeros(rows.size, dtype=np.uint64)
    if W == 0 or rows.size == 0:
        return h
    if W % 2 == 0 and table.flags.c_contiguous and 2 * rows.size >= table.shape[0]:
        # most rows: the table in place, a block of rows at a time (the mix makes ~3
        # temporaries of what it is given: of a whole 97,528-row Llama-3 table, 4.4 GiB)
        t64 = table.view(np.uint64)
        every = np.empty(t64.shape[0], dtype=np.uint64)
        step = max(1, _HASH_BLOCK_BYTES // max(1, 8 * t64.shape[1]))
        for a in range(0, t64.shape[0], step):
            every[a:a + step] = _hash_block(t64[a:a + step], R)
        return every[rows]
    buf = np.zeros((min(rows.size, chunk), 2 * R.size), dtype=np.uint32)
    for c0 in range(0, rows.size, chunk):
        c1 = min(rows.size, c0 + chunk)
        part = buf[:c1 - c0]
        part[:, :W] = table[rows[c0:c1]]
        h[c0:c1] = _hash_block(part.view(np.uint64), R)
    return h


def _hash_block(t64: np.ndarray, R: np.ndarray) -> np.ndarray:
    """uint64 [k]: ``_mix64(t64) @ R`` for a block uint64 [k, W2] of rows.  Label rows are mostly
    zero words, and mix(0) = 0: where at most 1/32 of the words are non-zero only those are mixed
    and summed per row (the same sums mod 2**64).  3,000 Llama-3 rows: 50 ms dense (a matrix
    product and ~3 temporaries of the block), ~10 ms sparse at 0.1-1 % non-zero words, as slow as
    dense past ~2 %; counting them first costs ~3 ms (measured here)."""
    nz = t64 != 0
    if 32 * np.count_nonzero(nz) > t64.size:
        return _mix64(t64) @ R
    pos = np.flatnonzero(nz)  # on a bool array: ~3x faster than np.nonzero of the words
    r, w = np.divmod(pos, t64.shape[1])
    out = np.zeros(t64.shape[0], dtype=np.uint64)
    if r.size:
        vals = _mix64(t64.reshape(-1)[pos]) * R[w]
        first = _run_starts(r)
        out[r[first]] = np.add.reduceat(vals, first)
    return out


@dataclass(frozen=True)
class SparseRows:
    """Bit-packed rows (uint32 words, ``width`` per row) given by their nonzero words: row r
    has word ``word[i]`` = ``val[i]`` for i in ``ptr[r]:ptr[r+1]``, words ascending.

    The label sets a lift lists token by token are a few tokens each (Github_medium o11515:
    355 rows, 1,411 tokens in 761 nonzero words of 1.4M): kept sparse, they are hashed and
    deduplicated without writing 16 KB per row (:func:`dedup_rows`)."""

    num_rows: int
    width: int
    ptr: np.ndarray  # int64 [num_rows + 1]
    word: np.ndarray  # int64 [nnz]
    val: np.ndarray  # uint32 [nnz]

    @classmethod
    def from_pairs(cls, row: np.ndarray, tok: np.ndarray, num_rows: int,
                   vocab_size: int) -> SparseRows:
        """Rows holding the tokens of the distinct pairs (``row[i]``, ``tok[i]``), int64."""
        W = (vocab_size + 31) // 32
        full = np.sort(row.astype(np.int64, copy=False) * (W * 32) + tok)
        key = full >> 5
        first = _run_starts(key)
        val = np.bitwise_or.reduceat(
            np.left_shift(np.uint32(1), (full & 31).astype(np.uint32)), first) \
            if first.size else np.zeros(0, dtype=np.uint32)
        key = key[first]
        ptr = np.searchsorted(key, np.arange(num_rows + 1, dtype=np.int64) * W)
        return cls(num_rows, W, ptr, key % W if W else key, val)

    def hashes(self) -> np.ndarray:
        """uint64 [num_rows]: :func:`_row_hashes` of the dense rows (uint32 words 2k and
        2k + 1 of a row form its uint64 word k)."""
        R = _hash_weights(self.width)
        h = np.zeros(self.num_rows, dtype=np.uint64)
        if self.val.size:
            row = np.repeat(np.arange(self.num_rows, dtype=np.int64), np.diff(self.ptr))
            k64 = row * R.size + (self.word >> 1)  # ascending: words are sorted per row
            v64 = np.left_shift(self.val.astype(np.uint64),
                                ((self.word & 1) << 5).astype(np.uint64))
            first = _run_starts(k64)
            k64 = k64[first]
            part = R[k64 % R.size] * _mix64(np.bitwise_or.reduceat(v64, first))
            r = k64 // R.size
            rf = _run_starts(r)
            h[r[rf]] = np.add.reduceat(part, rf)
        return h

    def scatter(self, out: np.ndarray, rows: np.ndarray, slots: np.ndarray) -> None:
        """OR row ``rows[i]`` into ``out[slots[i]]`` (uint32 [n, width], C-contiguous;
        mutated)."""
        cnt = self.ptr[rows + 1] - self.ptr[rows]
        pos = _ranges(self.ptr[rows], cnt)
        flat = out.reshape(-1)
        at = np.repeat(slots.astype(np.int64, copy=False) * self.width, cnt) + self.word[pos]
        flat[at] |= self.val[pos]  # one row per slot: no index repeats


def _num_rows(part) -> int:
    return part.num_rows if isinstance(part, SparseRows) else int(part.shape[0])


def take_rows(parts: list, idx: np.ndarray) -> np.ndarray:
    """``np.concatenate(parts)[idx]`` without concatenating the parts (each uint32 [n, W] or
    :class:`SparseRows` of width W); uint32 [len(idx), W]."""
    W = parts[0].width if isinstance(parts[0], SparseRows) else parts[0].shape[1]
    charge(4 * W * int(idx.size), f"{int(idx.size):,} gathered token rows")
    if len(parts) == 1 and not isinstance(parts[0], SparseRows):
        return parts[0][idx]
    offs = np.cumsum([0] + [_num_rows(p) for p in parts])
    sparse = any(isinstance(p, SparseRows) for p in parts)
    out = (np.zeros if sparse else np.empty)((idx.size, W), dtype=np.uint32)
    part_of = np.searchsorted(offs[1:], idx, side="right")
    for k, p in enumerate(parts):
        m = np.nonzero(part_of == k)[0]
        if m.size:
            if isinstance(p, SparseRows):
                p.scatter(out, idx[m] - offs[k], m)
            else:
                out[m] = p[idx[m] - offs[k]]
    return out


def _rows_equal(parts: list, offs: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """bool [len(a)]: whether rows ``a[i]`` and ``b[i]`` (numbered across ``parts``, which
    start at ``offs``) are equal.  Pairs within one :class:`SparseRows` part compare their
    nonzero words; the others are made dense (30 duplicate sparse label rows of Github_medium
    o10297: 0.27 ms dense, where each pair is two 16 KB rows; measured here)."""
    eq = np.zeros(a.size, dtype=bool)
    pa = np.searchsorted(offs[1:], a, side="right")
    pb = np.searchsorted(offs[1:], b, side="right")
    dense = np.ones(a.size, dtype=bool)
    for k, p in enumerate(parts):
        if not isinstance(p, SparseRows):
            continue
        m = np.nonzero((pa == k) & (pb == k))[0]
        if not m.size:
            continue
        dense[m] = False
        ra, rb = a[m] - offs[k], b[m] - offs[k]
        ca = p.ptr[ra + 1] - p.ptr[ra]
        same = ca == p.ptr[rb + 1] - p.ptr[rb]
        s_ = np.nonzero(same)[0]
        if s_.size:
            c = ca[s_]
            ia, ib = _ranges(p.ptr[ra[s_]], c), _ranges(p.ptr[rb[s_]], c)
            w_eq = (p.word[ia] == p.word[ib]) & (p.val[ia] == p.val[ib])
            ok = np.ones(s_.size, dtype=bool)
            nz = c > 0
            if nz.any():
                bounds = (np.cumsum(c) - c)[nz]
                ok[nz] = np.logical_and.reduceat(w_eq, bounds)
            same[s_] = ok
        eq[m] = same
    d = np.nonzero(dense)[0]
    # in chunks of rows: kb_1004 compares ~2.9k dense pairs, 2 x 46 MB gathered at once (fresh
    # pages each time on this VM) where 2 x 4 MB chunks reuse the same memory
    for i in range(0, d.size, _EQUAL_CHUNK_ROWS):
        di = d[i:i + _EQUAL_CHUNK_ROWS]
        eq[di] = (take_rows(parts, a[di]) == take_rows(parts, b[di])).all(axis=1)
    return eq


_EQUAL_CHUNK_ROWS = 256


def dedup_rows(table, refs, hashes: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact dedup of the rows ``table[r]`` for ``r`` in ``refs`` (ints); ``table`` is a
    uint32 [L, W] array or a list of parts (arrays or :class:`SparseRows`, rows numbered across
    them), ``hashes`` optionally the parts' :func:`_row_hashes` (uint64 per row, or None).

    Returns (the distinct rows, numbered by first use, uint32 [K, W]; int64 [len(refs)]: the
    number of each ref's row).  Rows are grouped by :func:`_row_hashes` and each is compared
    word for word with the first row of its group; rows that differ from it (a hash collision)
    are settled by their bytes.  Only the distinct rows are written out: a lift's sparse label
    rows are never made dense twice (with the cached template hashes, the label merge and
    dedup of Github_medium o11515 went 2.5 -> 1.5 ms, o10518 4.7 -> 2.5 ms; measured here).
    """
    parts = table if isinstance(table, list) else [table]
    refs = np.asarray(refs, dtype=np.int64)
    if refs.size == 0:
        return take_rows(parts, refs), np.zeros(0, dtype=np.int64)
    u, first, inv = np.unique(refs, return_index=True, return_inverse=True)
    by_use = np.argsort(first, kind="stable")
    used = u[by_use]  # distinct rows in order of first use
    rank = np.empty(u.size, dtype=np.int64)
    rank[by_use] = np.arange(u.size)
    offs = np.cumsum([0] + [_num_rows(p) for p in parts])
    part_of = np.searchsorted(offs[1:], used, side="right")
    h = np.empty(u.size, dtype=np.uint64)
    for k, p in enumerate(parts):
        m = np.nonzero(part_of == k)[0]
        if not m.size:
            continue
        local = used[m] - offs[k]
        if hashes is not None and hashes[k] is not None:
            h[m] = hashes[k][local]
        elif isinstance(p, SparseRows):
            h[m] = p.hashes()[local]
        else:
            h[m] = _row_hashes(p, local)
    _, hfirst, hinv = np.unique(h, return_index=True, return_inverse=True)
    rep = hfirst[hinv.reshape(-1)]  # the first row (by use) with the same hash
    dup = np.nonzero(rep != np.arange(u.size))[0]
    if dup.size:
        bad = dup[~_rows_equal(parts, offs, used[dup], used[rep[dup]])]
        if bad.size:  # collisions: compare bytes with the kept rows of the same hash
            kept: dict[bytes, int] = {}
            for i in bad.tolist():
                j = int(rep[i])
                kept.setdefault(take_rows(parts, used[j:j + 1]).tobytes(), j)
                rep[i] = kept.setdefault(take_rows(parts, used[i:i + 1]).tobytes(), i)
    keep = np.nonzero(rep == np.arange(u.size))[0]
    num = np.empty(u.size, dtype=np.int64)
    num[keep] = np.arange(keep.size)
    return take_rows(parts, used[keep]), num[rep][rank[inv.reshape(-1)]]


_HASHES: dict[int, np.ndarray] = {}


def _token_hashes(n: int) -> np.ndarray:
    """Fixed random int64 per id for ids < n, for hashing id sets (cached per power of two)."""
    size = 1 << max(10, (n - 1).bit_length())
    h = _HASHES.get(size)
    if h is None:
        rng = np.random.default_rng(0x7AC7)
        h = _HASHES[size] = rng.integers(0, 2**63, size=size, dtype=np.int64)
    return h


def _chunk_bounds(ends: np.ndarray, step: int) -> np.ndarray:
    """Consecutive groups with cumulative sizes ``ends`` (int64 [G], increasing) cut into chunks
    of about ``step`` elements: int64 [k+1] group bounds from 0 to G (a group larger than
    ``step`` is a chunk of its own; every chunk holds at least one group)."""
    if ends.size == 0:
        return np.zeros(1, dtype=np.int64)
    marks = np.arange(step, int(ends[-1]), step)
    return sorted_unique(np.concatenate([[0], np.searchsorted(ends, marks, side="right"),
                                         [ends.size]]))


# Elements compared per pass in dedup_sets' verification (1M: ~40 MB of temporaries).
_VERIFY_CHUNK = 1 << 20


def dedup_sets(tok: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """Exact dedup of the sorted id sets ``tok[starts[i]:ends[i]]``.

    Sets are grouped by (size, random 64-bit hash); every member is then compared element-wise
    with its group's representative (vectorized, :data:`_VERIFY_CHUNK` elements per pass), and
    any set that differs (a hash collision) gets its own label through an exact fallback.
    Returns (label id per set, list of (start, end) of each distinct set's representative).
    """
    n = starts.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    counts = ends - starts
    h1 = _token_hashes(int(tok.max()) + 1 if tok.size else 1)
    # prefix sums of the ids' hashes (int64, wrapping: fine for hashing), filled a chunk at a
    # time: kb_1004's 9M ids took 3 arrays of 73 MB at once (hashes, sums, a copy), ~0.2 s
    csum = np.empty(tok.size + 1, dtype=np.int64)
    csum[0] = 0
    for a in range(0, tok.size, _VERIFY_CHUNK):
        b = min(a + _VERIFY_CHUNK, tok.size)
        part = csum[a + 1:b + 1]
        np.cumsum(h1[tok[a:b]], dtype=np.int64, out=part)
        part += csum[a]
    hashes = csum[ends] - csum[starts]
    # one int64 key (size mixed into the hash; equal keys are verified below): np.unique on a
    # 1-D key is several times faster than on [n, 2] rows
    keys = hashes ^ (counts * np.int64(0x9E3779B97F4A7C15 - 2**64))
    _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    rep_of = first[inv]  # the representative set of each set's group
    ok = np.ones(n, dtype=bool)
    check = np.nonzero(rep_of != np.arange(n))[0]
    if check.size:
        # element-wise against the representative, a bounded number of elements at a time
        # (kb_1007: 6M elements of copies at once held ~230 MB of index and id arrays)
        check = check[counts[check] > 0]
        c = counts[check]
        cuts = _chunk_bounds(np.cumsum(c), _VERIFY_CHUNK)
        for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            ch, cc = check[lo:hi], c[lo:hi]
            same = tok[_ranges(starts[ch], cc)] == tok[_ranges(starts[rep_of[ch]], cc)]
            ok[ch] = np.logical_and.reduceat(same, np.cumsum(cc) - cc)
    label_of = inv.astype(np.int64, copy=True)  # group j's representative is set first[j]
    reps: list[tuple[int, int]] = list(zip(starts[first].tolist(), ends[first].tolist()))
    for i in np.nonzero(~ok)[0].tolist():  # hash collisions: exact, slow path
        t = tok[starts[i]:ends[i]]
        for li, (ra, rb) in enumerate(reps):
            if rb - ra == t.size and np.array_equal(t, tok[ra:rb]):
                label_of[i] = li
                break
        else:
            label_of[i] = len(reps)
            reps.append((int(starts[i]), int(ends[i])))
    return label_of, reps


# Rows gathered per reduceat in _or_groups (the shared-row ORs of automaton._merge_rows): 256
# Llama-3 rows are 4 MB (kb_1007: 8,724 rows of 2,329 combinations were gathered at once, 140 MB
# of fresh pages; 0.19 s -> 0.08 s in chunks, measured here).
_OR_CHUNK_ROWS = 256


def _or_groups(rows: np.ndarray, ref: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """uint32 [len(starts), W]: the OR of ``rows[ref[starts[i]:starts[i+1]]]`` per group ``i``
    (``starts`` increasing from 0, every group non-empty), gathering a bounded number of rows
    at a time."""
    out = np.empty((starts.size, rows.shape[1]), dtype=rows.dtype)
    ends = np.append(starts[1:], ref.size)
    cuts = _chunk_bounds(ends, _OR_CHUNK_ROWS)
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        lo, hi = int(starts[a]), int(ends[b - 1])
        np.bitwise_or.reduceat(rows[ref[lo:hi]], starts[a:b] - lo, axis=0, out=out[a:b])
    return out


def _new_rows(packed: np.ndarray, h: np.ndarray, parts: list[np.ndarray],
              seen: dict[int, list[tuple[int, int, int]]], n_rows: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Number a walk chunk's packed rows (uint32 [P, W], hashes ``h``) after the rows of the
    chunks before (``parts``, ``n_rows`` in all): a row equal to an earlier one gets its number,
    the others new numbers in order.  Returns (number per row int64 [P], indices of the new
    rows).  ``seen`` (hash -> (number, part, row)) is updated.  Chunks of one walk share many
    rows (the starts of one component copy fall in different chunks): 4M-record chunks of an
    every-serialization Kubernetes schema held 38k rows, over the lift's budget, where one
    chunk's rows were deduplicated only among themselves."""
    gid = np.empty(packed.shape[0], dtype=np.int64)
    keep: list[int] = []
    part = len(parts)
    for i, hv in enumerate(h.tolist()):
        got = None
        for g, pi, li in seen.get(hv, ()):
            other = parts[pi][li] if pi < part else packed[keep[li]]
            if np.array_equal(other, packed[i]):
                got = g
                break
        if got is None:
            got = n_rows + len(keep)
            seen.setdefault(hv, []).append((got, part, len(keep)))  # its row once kept
            keep.append(i)
        gid[i] = got
    return gid, np.array(keep, dtype=np.int64)
