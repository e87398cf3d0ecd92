"""Bisimulation reduction of finalized byte NFAs (:func:`bisim_reduce`).

Merges states with the same future (forward bisimulation: finality and the same byte masks into
each block) and states with the same past (backward: start-ness and the same masks from each
block); either merge leaves the language unchanged.  Unlike :func:`~.nfa.reduce_states`, which
merges only identical rows (a least fixpoint), this computes the coarsest partition (greatest
fixpoint) by hashed signature refinement in numpy, so copies of a sub-automaton with loops merge
too.  The grammar approximations (:mod:`.grammar.approx`) use it to shrink every "under"
nonterminal automaton.
"""

from __future__ import annotations

from . import nfa as N

__all__ = ["bisim_reduce"]

_M64 = (1 << 64) - 1


def _mix(x):
    """splitmix64 finalizer on a uint64 array (wrapping arithmetic)."""
    import numpy as np

    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _bisim_blocks(S: int, src, dst, words, init):
    """Coarsest partition of ``S`` states refining ``init`` such that states in one block have,
    for every block ``B``, the same union of byte masks on their edges into ``B`` (a forward
    bisimulation for the edge list ``src → dst``).  Signatures are hashed to 128 bits (two
    independent 64-bit hashes; a false merge has probability below S² · 2⁻¹²⁸)."""
    import numpy as np

    block = np.unique(init, return_inverse=True)[1].reshape(-1).astype(np.int64)
    nb = int(block.max()) + 1 if S else 0
    order = np.argsort(src, kind="stable")
    src, dst, words = src[order], dst[order], words[order]
    with np.errstate(over="ignore"):
        while True:
            # union of masks per (src, block of dst)
            key = src * (nb + 1) + block[dst]
            o = np.argsort(key, kind="stable")
            k = key[o]
            starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
            w = np.bitwise_or.reduceat(words[o], starts, axis=0)
            gsrc = src[o][starts]
            gblk = block[dst[o][starts]].astype(np.uint64)
            sig = []
            for seed in (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xD1B54A32D192ED03)):
                h = _mix(gblk + seed)
                for j in range(w.shape[1]):
                    h = _mix(h ^ w[:, j])
                tot = np.zeros(S, dtype=np.uint64)
                np.add.at(tot, gsrc, h)
                sig.append(tot)
            allsig = np.stack([block.astype(np.uint64), sig[0], sig[1]], axis=1)
            new = np.unique(allsig, axis=0, return_inverse=True)[1].reshape(-1)
            m = int(new.max()) + 1
            block = new.astype(np.int64)
            if m == nb:
                return block, m
            nb = m


def bisim_reduce(nfa: N.ByteNFA, *, rounds: int = 2) -> N.ByteNFA:
    """Merge bisimilar states in both directions, on a finalized NFA:

    * forward (same future: finality and the same masks into each block) — common suffixes;
    * backward (same past: start-ness and the same masks from each block) — common prefixes:
      two states reached by the same strings may be merged, each then continuing as either
      did, so the language is unchanged (``E "=" E | E "<" E`` shares its first ``E``).

    Unlike :func:`~.nfa.reduce_states` (which only merges identical rows, a least fixpoint)
    this is the coarsest partition (greatest fixpoint), so copies of a sub-automaton with loops
    merge too.  Alternates directions up to ``rounds`` times.
    """
    import numpy as np

    f = nfa
    for _ in range(rounds):
        n0 = f.num_states
        for backward in (False, True):
            S = f.num_states
            if S <= 1 or not f.edges:
                continue
            src = np.fromiter((e[0] for e in f.edges), np.int64, len(f.edges))
            dst = np.fromiter((e[2] for e in f.edges), np.int64, len(f.edges))
            words = np.array([[(e[1] >> (64 * j)) & _M64 for j in range(4)] for e in f.edges],
                             dtype=np.uint64)
            init = np.zeros(S, dtype=np.int64)
            if backward:
                init[f.start] = 1
                block, nb = _bisim_blocks(S, dst, src, words, init)
            else:
                init[list(f.finals)] = 1
                block, nb = _bisim_blocks(S, src, dst, words, init)
            if nb == S:
                continue
            merged: dict[tuple[int, int], int] = {}
            for (s, m, d) in f.edges:
                k = (int(block[s]), int(block[d]))
                merged[k] = merged.get(k, 0) | m
            flat = tuple((s, m, d) for (s, d), m in merged.items())
            f = N.finalize(N.ByteNFA(nb, int(block[f.start]),
                                     frozenset(int(block[x]) for x in f.finals), flat),
                           reduce=False)
        if f.num_states == n0:
            break
    return f
