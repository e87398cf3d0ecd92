"""Full determinization of a byte NFA, only to *count* DFA states.

:func:`subset_construction` determinizes (numpy, byte classes, with a state cap and a time
limit) only to *count* DFA states for the size tables; tractable never runs a DFA.  With
``minimize=True``, Moore partition refinement (:func:`_moore`) also counts the states of the
minimal DFA.  The result is a :class:`SubsetDFA`.  (:mod:`.nfa_subsets` is the bounded,
*partial* determinization that compilation does apply.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from . import nfa as N
from .errors import InvalidArgumentError

__all__ = ["subset_construction", "SubsetDFA"]


@dataclass
class SubsetDFA:
    """Result of :func:`subset_construction` (for size tables only: tractable never runs a
    DFA).

    Attributes:
        num_states: DFA states built (reachable non-empty subsets; no dead state), or the count
            reached when the construction stopped.
        finished: ``False`` when ``max_states`` or ``timeout_s`` stopped it: the DFA then has
            *more than* ``num_states`` states.
        reason: ``""``, ``"max_states"`` or ``"timeout"``.
        seconds: wall time of the construction.
        num_classes: byte classes (bytes no edge distinguishes share a column).
        delta: int32 ``[num_states, num_classes]`` successor table (-1 = dead), when finished.
        final: bool ``[num_states]``, when finished.
        class_of_byte: int ``[256]``.
        minimal_states: states of the minimal DFA (Moore refinement, dead state excluded), when
            finished and ``minimize=True``.
    """

    num_states: int
    finished: bool
    reason: str
    seconds: float
    num_classes: int
    delta: object = None
    final: object = None
    class_of_byte: object = None
    minimal_states: int | None = None

    def accepts(self, data: bytes) -> bool:
        if not self.finished:
            raise InvalidArgumentError("the construction did not finish")
        q = 0
        for byte in data:
            q = int(self.delta[q, self.class_of_byte[byte]])
            if q < 0:
                return False
        return bool(self.final[q])


def subset_construction(
    nfa: N.ByteNFA, *, max_states: int = 1_000_000, timeout_s: float = 600.0,
    minimize: bool = True,
) -> SubsetDFA:
    """Determinize ``nfa`` by the subset construction over byte classes (numpy), to *count*
    DFA states for the paper-002 Table 5 analog.  Stops honestly: past ``max_states`` states
    or ``timeout_s`` seconds it returns ``finished=False`` and the count so far (a lower
    bound).  Each subset's successors for all classes come from one numpy pass over the
    (class, destination) pairs of its members.  ``minimize`` adds Moore partition refinement
    (``minimal_states``).
    """
    import numpy as np

    t0 = time.perf_counter()
    f = N.finalize(nfa, reduce=False)
    cls_of, ncls = N.byte_classes([m for _s, m, _d in f.edges])
    cls_of = np.asarray(cls_of, dtype=np.int64)
    # per class, the byte mask of the class
    cmask = [0] * ncls
    for b in range(256):
        cmask[cls_of[b]] |= 1 << b
    pairs: list[list[tuple[int, int]]] = [[] for _ in range(f.num_states)]
    for s, m, d in f.edges:
        for c in range(ncls):
            if m & cmask[c]:
                pairs[s].append((c, d))
    ptr = np.zeros(f.num_states + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(p) for p in pairs])
    flat = [x for p in pairs for x in p]
    pc = np.array([c for c, _ in flat], dtype=np.int64)
    pd = np.array([d for _, d in flat], dtype=np.int64)
    is_final = np.zeros(f.num_states, dtype=bool)
    is_final[list(f.finals)] = True
    n = max(f.num_states, 1)

    ids: dict[bytes, int] = {}
    subsets: list[bytes] = []  # int32 state ids; the dict keys themselves (no second copy)
    rows: list[np.ndarray] = []

    def intern(arr: np.ndarray) -> int:
        key = arr.astype(np.int32).tobytes()
        j = ids.get(key)
        if j is None:
            j = ids[key] = len(subsets)
            subsets.append(key)
        return j

    intern(np.array([f.start], dtype=np.int64))
    k = 0
    reason = ""
    while k < len(subsets):
        if len(subsets) > max_states:
            reason = "max_states"
            break
        if (k & 255) == 0 and time.perf_counter() - t0 > timeout_s:
            reason = "timeout"
            break
        q = np.frombuffer(subsets[k], dtype=np.int32)
        starts, ends = ptr[q], ptr[q + 1]
        lens = ends - starts
        row = np.full(ncls, -1, dtype=np.int32)
        tot = int(lens.sum())
        if tot:
            idx = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(tot)
            key = np.unique(pc[idx] * n + pd[idx])
            c = key // n
            d = key % n
            cuts = np.flatnonzero(np.diff(c)) + 1
            for cc, dd in zip(c[np.r_[0, cuts]], np.split(d, cuts)):
                row[cc] = intern(dd)
        rows.append(row)
        k += 1
    seconds = time.perf_counter() - t0
    if reason:
        return SubsetDFA(len(subsets), False, reason, seconds, ncls)
    delta = np.stack(rows) if rows else np.zeros((0, ncls), dtype=np.int32)
    final = np.array([bool(is_final[np.frombuffer(s, dtype=np.int32)].any()) for s in subsets])
    out = SubsetDFA(len(subsets), True, "", seconds, ncls, delta, final, cls_of)
    if minimize:
        out.minimal_states = _moore(delta, final)
        out.seconds = time.perf_counter() - t0
    return out


def _moore(delta, final) -> int:
    """Number of blocks of the coarsest partition of a partial DFA's states (Moore rounds in
    numpy); states that cannot reach a final state are dropped first (no dead state)."""
    import numpy as np

    S, C = delta.shape
    # co-accessible states
    live = final.copy()
    src = np.repeat(np.arange(S), C)
    dst = delta.reshape(-1)
    ok = dst >= 0
    src, dst = src[ok], dst[ok]
    while True:
        new = live.copy()
        new[src[live[dst]]] = True
        if new.sum() == live.sum():
            break
        live = new
    d = np.where((delta >= 0) & live[np.maximum(delta, 0)], delta, -1)
    block = final.astype(np.int64) + 2 * (~live)
    nb = len(np.unique(block))
    while True:
        succ = np.where(d >= 0, block[np.maximum(d, 0)], -1)
        sig = np.concatenate([block[:, None], succ], axis=1)
        _, block = np.unique(sig, axis=0, return_inverse=True)
        block = block.reshape(-1)
        m = len(np.unique(block))
        if m == nb:
            return int(len(np.unique(block[live])))
        nb = m
