"""Token lifting: a byte-level NFA and a vocabulary → the token-level NFA's edges.

Semantics (the loop this module vectorizes)::

    for s in byte_states:                      # every state of the finalized byte NFA
        for v in vocabulary (text tokens):
            Q = delta*({s}, bytes(v))          # NFA states reached after all of v's bytes
            for q in Q: label(s, q) |= {v}

Cost: not S × V × len.  The vocabulary's byte trie (:class:`~.vocabulary.VocabTrie`) is walked
breadth-first for all start states at once, one numpy step per trie depth, and a branch is pruned
as soon as its state set is empty, so a restrictive state (a digit position of a date) touches a
handful of trie nodes and a permissive one (inside a JSON string) touches each node once.

The state set reached from ``{s}`` is kept as an interned subset id with a lazily filled
transition table over byte *classes* (bytes no edge distinguishes share a class).  Subsets only
ever arise from token-length walks out of a single state; the automaton itself is never
determinized: the output is an NFA edge per (source, destination) pair.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .nfa import ByteNFA, byte_classes, finalize
from .vocabulary import TokenVocabulary

__all__ = ["LiftedEdges", "lift"]


@dataclass(frozen=True)
class LiftedEdges:
    """Token-level edges over the byte NFA's state numbering (before token-level trimming).

    Labels are sets of *token groups*: the tokens ending at one trie node, which read the same
    class string and so behave identically everywhere.  Groups are disjoint and non-empty, so
    two different group sets are two different token sets.

    ``pair_src``, ``pair_dst``, ``pair_grp``: int64 [P], one entry per (edge, group), sorted by
    (src, dst, group).  ``grp_ptr`` int64 [G+1] / ``grp_tokens`` int64: the token ids of group g
    are ``grp_tokens[grp_ptr[g]:grp_ptr[g+1]]``.  ``num_states``: byte NFA states; ``final``:
    bool [num_states].
    """

    num_states: int
    final: np.ndarray
    pair_src: np.ndarray
    pair_dst: np.ndarray
    pair_grp: np.ndarray
    grp_ptr: np.ndarray
    grp_tokens: np.ndarray
    subsets_expanded: int
    trie_steps: int


class _SubsetTable:
    """Interned sets of byte-NFA states with a lazily filled class-transition table."""

    def __init__(self, nfa: ByteNFA):
        masks = [m for _, m, _ in nfa.edges]
        cls, ncls = byte_classes(masks)
        self.class_of_byte = np.array(cls, dtype=np.int64)
        self.num_classes = ncls
        rep_mask = 0  # one representative byte per class
        seen: set[int] = set()
        for b in range(256):
            if cls[b] not in seen:
                seen.add(cls[b])
                rep_mask |= 1 << b
        # per NFA state: list of (classes covered, dst); only the covered classes are visited
        self.out: list[list[tuple[tuple[int, ...], int]]] = [[] for _ in range(nfa.num_states)]
        for s, m, d in nfa.edges:
            covered = []
            mm = m & rep_mask
            while mm:
                low = mm & -mm
                covered.append(cls[low.bit_length() - 1])
                mm ^= low
            self.out[s].append((tuple(covered), d))
        self.members: list[tuple[int, ...]] = [()]
        self.ids: dict[tuple[int, ...], int] = {(): 0}
        self.table = np.full((max(64, nfa.num_states + 1), ncls), -1, dtype=np.int64)
        self.table[0, :] = 0  # the dead set goes nowhere
        self.expanded = 0

    def intern(self, states: tuple[int, ...]) -> int:
        i = self.ids.get(states)
        if i is None:
            i = self.ids[states] = len(self.members)
            self.members.append(states)
            if i >= self.table.shape[0]:
                grow = np.full((self.table.shape[0], self.num_classes), -1, dtype=np.int64)
                self.table = np.concatenate([self.table, grow])
        return i

    def expand(self, sid: int) -> None:
        nxt: list[set[int]] = [set() for _ in range(self.num_classes)]
        for q in self.members[sid]:
            for covered, d in self.out[q]:
                for c in covered:
                    nxt[c].add(d)
        row = [self.intern(tuple(sorted(x))) for x in nxt]
        self.table[sid, :] = row
        self.expanded += 1


# The class trie pays once the estimated byte-trie walk of all start states exceeds about one and
# a half walks of the whole trie: building it costs about one walk (plus ~2 ms of fixed work),
# after which every walk is over a trie tens of times smaller.  Llama-3, one loaded run: email
# (3 permissive states) 106 -> 64 ms, "[^"\\]{0,40}" inside a JSON object (40 such states)
# 3958 -> 1020 ms; an ISO date-time (30 digit states, small subtrees) 1 -> 23 ms had it been used.
_USE_CLASS_TRIE = True
_CLASS_TRIE_WORK = 1.5


def _root_subtree_sizes(vocab: TokenVocabulary) -> np.ndarray:
    """int64 [256]: byte-trie nodes under each first byte (cached on the vocabulary)."""
    out = vocab._memo.get("root_subtree_sizes")
    if out is None:
        trie = vocab.trie
        anc = np.zeros(trie.num_nodes, dtype=np.int64)
        lp = trie.level_ptr
        if trie.num_nodes > 1:
            anc[lp[1]:lp[2]] = trie.byte[lp[1]:lp[2]]
            for d in range(2, trie.max_depth + 1):
                lo, hi = int(lp[d]), int(lp[d + 1])
                anc[lo:hi] = anc[trie.parent[lo:hi]]
        out = np.bincount(anc[1:], minlength=256).astype(np.int64)
        vocab._memo["root_subtree_sizes"] = out
    return out


@dataclass(frozen=True)
class _ClassTrie:
    """The vocabulary trie quotiented by the NFA's byte classes (see :func:`_class_trie`).

    BFS-numbered like :class:`~.vocabulary.VocabTrie`: children of node n are
    ``child_ptr[n]:child_ptr[n+1]``; ``cls`` [N] is the byte class on the edge into a node;
    ``term_ptr``/``term_tokens`` list the token ids ending at each node.
    """

    child_ptr: np.ndarray
    cls: np.ndarray
    term_ptr: np.ndarray
    term_tokens: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.cls.shape[0])


def _class_trie(trie, class_of_byte: np.ndarray, num_classes: int) -> _ClassTrie:
    """Merge byte-trie nodes whose paths read the same class string; drop dead branches.

    Tokens that read the same sequence of byte classes behave identically in every state of the
    automaton, so they share one node.  A branch entering the dead class (bytes no edge reads)
    is dropped with its subtree: no state can read it.  Llama-3: 275k byte-trie nodes become
    6.8k for JSON-string content classes and 1.3k for an email local part.
    """
    n = trie.num_nodes
    bc = class_of_byte[trie.byte.astype(np.int64)]
    cid = np.full(n, -1, dtype=np.int64)
    cid[0] = 0
    lp = trie.level_ptr
    parents = [np.array([-1], dtype=np.int64)]
    classes = [np.zeros(1, dtype=np.int64)]
    nxt = 1
    for d in range(1, trie.max_depth + 1):
        lo, hi = int(lp[d]), int(lp[d + 1])
        pc = cid[trie.parent[lo:hi]]
        alive = (pc >= 0) & (bc[lo:hi] != 0)
        idx = np.nonzero(alive)[0]
        if idx.size == 0:
            break
        key = pc[idx] * num_classes + bc[lo:hi][idx]
        uniq, inv = np.unique(key, return_inverse=True)
        cid[lo + idx] = nxt + inv
        parents.append(uniq // num_classes)
        classes.append(uniq % num_classes)
        nxt += uniq.size
    parent = np.concatenate(parents)
    cls = np.concatenate(classes)
    child_ptr = np.zeros(nxt + 1, dtype=np.int64)
    child_ptr[1:] = np.cumsum(np.bincount(parent[1:], minlength=nxt))
    child_ptr += 1
    child_ptr[0] = 1
    # tokens: byte node -> class node
    tcount = trie.term_ptr[1:] - trie.term_ptr[:-1]
    tnode = np.repeat(np.arange(n, dtype=np.int64), tcount)
    tc = cid[tnode]
    keep = tc >= 0
    tc = tc[keep]
    toks = trie.term_tokens[keep]
    order = np.argsort(tc, kind="stable")
    term_ptr = np.zeros(nxt + 1, dtype=np.int64)
    term_ptr[1:] = np.cumsum(np.bincount(tc, minlength=nxt))
    return _ClassTrie(child_ptr, cls, term_ptr, toks[order])


def lift(nfa: ByteNFA, vocab: TokenVocabulary) -> LiftedEdges:
    """Lift a byte NFA to token-level (src, dst, token) triples; see the module docstring.

    ``nfa`` is finalized first (epsilon-free, trimmed).  Returns a :class:`LiftedEdges`.
    """
    nfa = finalize(nfa)
    subsets = _SubsetTable(nfa)
    S = nfa.num_states
    single = np.array([subsets.intern((s,)) for s in range(S)], dtype=np.int64)
    for sid in np.unique(single):
        subsets.expand(int(sid))
    # Estimated byte-trie walk: for each start, the trie nodes under the first bytes it can read
    # (an upper bound: deeper bytes may die).  The class trie's build costs about one full walk.
    first = subsets.table[single][:, subsets.class_of_byte] != 0  # [S, 256]
    est = int((first * _root_subtree_sizes(vocab)[None, :]).sum())
    use_class = _USE_CLASS_TRIE and est >= _CLASS_TRIE_WORK * vocab.trie.num_nodes
    if use_class:
        trie = _class_trie(vocab.trie, subsets.class_of_byte, subsets.num_classes)
        node_cls = trie.cls
    else:
        trie = vocab.trie
        node_cls = None
    tp_all = trie.term_ptr
    rec_start: list[np.ndarray] = []
    rec_node: list[np.ndarray] = []
    rec_state: list[np.ndarray] = []
    steps = 0
    starts = np.arange(S, dtype=np.int64)
    dstate = single[starts]
    node = np.zeros(starts.size, dtype=np.int64)
    child_ptr = trie.child_ptr
    while starts.size:
        steps += 1
        cs = child_ptr[node]
        counts = child_ptr[node + 1] - cs
        total = int(counts.sum())
        if total == 0:
            break
        # children of every frontier entry, contiguous in the BFS-numbered trie
        child = np.arange(total) + np.repeat(cs - (np.cumsum(counts) - counts), counts)
        src_state = np.repeat(dstate, counts)
        miss = subsets.table[src_state, 0] < 0
        if miss.any():
            for sid in np.unique(src_state[miss]):
                subsets.expand(int(sid))
        cc = node_cls[child] if node_cls is not None else subsets.class_of_byte[trie.byte[child]]
        nd = subsets.table[src_state, cc]
        keep = nd != 0
        starts = np.repeat(starts, counts)[keep]
        node = child[keep]
        dstate = nd[keep]
        term = tp_all[node + 1] > tp_all[node]
        if term.any():
            rec_start.append(starts[term])
            rec_node.append(node[term])
            rec_state.append(dstate[term])
    final = np.zeros(S, dtype=bool)
    final[list(nfa.finals)] = True
    G = trie.term_ptr.shape[0] - 1
    if not rec_start:
        empty = np.zeros(0, dtype=np.int64)
        return LiftedEdges(S, final, empty, empty, empty, trie.term_ptr, trie.term_tokens,
                           subsets.expanded, steps)
    r_start = np.concatenate(rec_start)
    r_node = np.concatenate(rec_node)
    r_state = np.concatenate(rec_state)
    # expand each record by the members of its destination subset
    sizes = np.array([len(m) for m in subsets.members], dtype=np.int64)
    flat_members = np.array([q for m in subsets.members for q in m], dtype=np.int64)
    mem_ptr = np.concatenate([[0], np.cumsum(sizes)])
    k = sizes[r_state]
    base = mem_ptr[r_state] - (np.cumsum(k) - k)
    e_dst = flat_members[np.arange(int(k.sum())) + np.repeat(base, k)]
    e_src = np.repeat(r_start, k)
    e_grp = np.repeat(r_node, k)
    # One int64 key per (src, dst, group) and a plain sort (np.lexsort on three keys is ~15x
    # slower: 22 ms vs 1.4 ms for 130k entries).
    if S * S * max(G, 1) >= 2**62:
        raise OverflowError(f"automaton too large to lift: {S} byte states x {G} token groups")
    key = np.sort((e_src * S + e_dst) * G + e_grp)
    pair = key // G
    return LiftedEdges(S, final, pair // S, pair % S, key % G, trie.term_ptr, trie.term_tokens,
                       subsets.expanded, steps)
