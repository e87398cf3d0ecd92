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

Components (memoized walks).  A JSON Schema repeats the same loop many times — the content of
every ``"type": "string"`` value, every number's digit loop — and each copy's walk covers most of
the vocabulary.  The byte NFA is cut into *components*: strongly connected pieces of the graph
without the single-ASCII-byte edges (``"``, ``,``, ``\\`` … : the structure between loops).  A
component with its outgoing edges redirected to placeholder sinks is a *template*; its walk
(over its own, much smaller, class trie) is computed once per vocabulary and shape, and reused
for every copy by renaming states.  Exactness: a path out of a component either stays on its
internal edges (the template's records) or leaves it by a first outgoing edge at some byte; that
byte's trie node and the real destination are handed to the ordinary walk, which continues in
the real NFA (so re-entering the component later is also exact).  Llama-3, GlaiveAI schemas:
the walks of ~60 string-content states shrink to one template walk plus the few thousand trie
nodes where a token crosses a closing quote.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .nfa import ByteNFA, byte_classes, finalize
from .vocabulary import TokenVocabulary

__all__ = ["LiftedEdges", "SparseRows", "lift"]


@dataclass(frozen=True)
class LiftedEdges:
    """Token-level edges over the byte NFA's state numbering (before token-level trimming).

    Two kinds of label contributions; an edge's token set is the union of both.

    * Explicit: sets of *token groups* (the tokens ending at one trie node, which read the same
      class string and so behave identically everywhere).  Groups are disjoint and non-empty, so
      two different group sets are two different token sets.  ``pair_src``, ``pair_dst``,
      ``pair_grp``: int64 [P], one entry per (edge, group), sorted by (src, dst, group).
      ``grp_ptr`` int64 [G+1] / ``grp_tokens`` int64: the token ids of group g are
      ``grp_tokens[grp_ptr[g]:grp_ptr[g+1]]``.
    * Shared rows (from component templates): ``row_src``, ``row_dst``, ``row_id`` int64 [R]:
      edge (src, dst) contains the token set ``rows[row_id]`` (uint32 [Lr, ceil(V/32)], bit v&31
      of word v>>5).  (src, dst) pairs may repeat here and may also appear among the explicit
      pairs.

    ``num_states``: byte NFA states; ``final``: bool [num_states].
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
    row_src: np.ndarray
    row_dst: np.ndarray
    row_id: np.ndarray
    rows: np.ndarray
    components: int = 0
    templates_built: int = 0
    row_hash: np.ndarray | None = None  # uint64 [Lr]: _row_hashes of ``rows``, when known


def _edge_arrays(nfa: ByteNFA) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    """(source, destination, mask id) int64 [E] of ``nfa.edges`` and the distinct masks in order
    of first use (mask id i is ``masks[i]``); cached on the NFA.  The component split, the
    subset table and the lift's edge split read these instead of each turning the edge tuples
    into arrays."""
    hit = nfa._cache.get("edge_arrays")
    if hit is None:
        ids: dict[int, int] = {}
        if nfa.edges:
            s, m, d = zip(*nfa.edges)
        else:
            s = m = d = ()
        mid = [ids.setdefault(x, len(ids)) for x in m]
        hit = nfa._cache["edge_arrays"] = (
            np.array(s, dtype=np.int64), np.array(d, dtype=np.int64),
            np.array(mid, dtype=np.int64), list(ids))
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
        self.table = np.full((max(64, nfa.num_states + 1), ncls), -1, dtype=np.int64)
        self.table[0, :] = 0  # the dead set goes nowhere
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
            if i >= self.table.shape[0]:
                grow = np.full((self.table.shape[0], self.num_classes), -1, dtype=np.int64)
                self.table = np.concatenate([self.table, grow])
        return i

    def intern_singletons(self, n: int) -> np.ndarray:
        """int64 [n]: the ids of the subsets ``(0,) .. (n-1,)``, interned in bulk when the
        table holds only the dead set (ids 1..n), else one by one."""
        if len(self.members) != 1:
            return np.array([self.intern((q,)) for q in range(n)], dtype=np.int64)
        new = [(q,) for q in range(n)]
        self._single_n = n  # ids 1..n are the singletons (see _member_arrays)
        self.members.extend(new)
        self.ids.update(zip(new, range(1, n + 1)))
        if n >= self.table.shape[0]:
            grow = np.full((n + 1 - self.table.shape[0], self.num_classes), -1, dtype=np.int64)
            self.table = np.concatenate([self.table, grow])
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
        row = np.zeros(self.num_classes, dtype=np.int64)
        for c, x in nxt.items():
            row[c] = self.intern(tuple(sorted(x)) if len(x) > 1 else (next(iter(x)),))
        self.table[sid, :] = row
        self.expanded += 1

    def expand_singletons(self, single: np.ndarray) -> None:
        """Fill the rows of every singleton subset at once: ``single`` int64 [num states] is
        the interned id of ``(q,)`` for each NFA state q.  Same rows as :meth:`expand` (a
        class read by several edges to distinct destinations is interned by a Python call,
        the rest by array ops: 330 rows of a Github_medium schema in 0.2 ms, where one
        :meth:`expand` call per row took 1 ms, measured here)."""
        n, C = single.size, self.num_classes
        todo = self.table[single, 0] < 0
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
            dl = dst.tolist()
            ids, intern = self.ids, self.intern
            got = []
            for a, k in zip(first[multi].tolist(), cnt[multi].tolist()):
                t = tuple(dl[a:a + k])
                i = ids.get(t)
                got.append(intern(t) if i is None else i)
            val[multi] = got
        rows = np.zeros((n, C), dtype=np.int64)
        rows.reshape(-1)[sc[first]] = val
        q = np.nonzero(todo)[0]
        self.table[single[q]] = rows[q]
        self.expanded += int(q.size)


# The plain walk uses a class trie once its estimated byte-trie walk (the two-level bound of
# _plain_walk_estimate) exceeds this many walks of the whole trie.  Building a class trie over
# Llama-3 costs ~30 ms (one pass over 275k nodes plus ~2 ms of fixed work); a byte walk costs
# ~16 ns per estimated node (Github_medium o11670: estimate 2.1M, byte walk 34 ms, class trie
# 30 ms + 18 ms walk; o10618: 0.73M, 15 ms vs 30 + 10 ms; measured here, 2 cores busy).
_USE_CLASS_TRIE = True
_CLASS_TRIE_WORK = 3.0


def _first_byte_of_node(vocab: TokenVocabulary) -> np.ndarray:
    """int64 [byte-trie nodes]: the first byte of each node's path (0 for the root; cached)."""
    anc = vocab._memo.get("first_byte_of_node")
    if anc is None:
        trie = vocab.trie
        anc = np.zeros(trie.num_nodes, dtype=np.int64)
        lp = trie.level_ptr
        if trie.num_nodes > 1:
            anc[lp[1]:lp[2]] = trie.byte[lp[1]:lp[2]]
            for d in range(2, trie.max_depth + 1):
                lo, hi = int(lp[d]), int(lp[d + 1])
                anc[lo:hi] = anc[trie.parent[lo:hi]]
        vocab._memo["first_byte_of_node"] = anc
    return anc


def _first_byte_of_token(vocab: TokenVocabulary) -> np.ndarray:
    """int64 [V]: first byte of each text token, -1 for tokens without text (cached)."""
    out = vocab._memo.get("first_byte_of_token")
    if out is None:
        out = np.array([b[0] if b else -1 for b in vocab.token_bytes], dtype=np.int64)
        vocab._memo["first_byte_of_token"] = out
    return out


def _root_subtree_sizes(vocab: TokenVocabulary) -> np.ndarray:
    """int64 [256]: byte-trie nodes under each first byte (cached on the vocabulary)."""
    out = vocab._memo.get("root_subtree_sizes")
    if out is None:
        out = np.bincount(_first_byte_of_node(vocab)[1:], minlength=256).astype(np.int64)
        vocab._memo["root_subtree_sizes"] = out
    return out


def prepare(vocab: TokenVocabulary) -> None:
    """Build the per-vocabulary tables the lift reads (the byte trie, each node's and token's
    first byte, subtree sizes under one and two bytes) now rather than inside the first
    compile that needs them (~5 ms over Llama-3, measured here); idempotent, cached on
    ``vocab`` like xgrammar's ``TokenizerInfo``.  Mutates ``vocab``'s private memo."""
    _ = vocab.trie
    _first_byte_of_node(vocab)
    _first_byte_of_token(vocab)
    _root_subtree_sizes(vocab)
    _depth2_pairs(vocab)


def _depth2_subtree_sizes(vocab: TokenVocabulary) -> tuple[np.ndarray, np.ndarray]:
    """(int64 [256]: 1 where a depth-1 node exists for the byte, int64 [256, 256]: byte-trie
    nodes in the subtree of the depth-2 node (b1, b2), itself included), cached on the
    vocabulary."""
    out = vocab._memo.get("depth2_subtree_sizes")
    if out is None:
        trie = vocab.trie
        lp = trie.level_ptr
        one = np.zeros(256, dtype=np.int64)
        two = np.zeros((256, 256), dtype=np.int64)
        if trie.max_depth >= 1:
            one[trie.byte[lp[1]:lp[2]]] = 1
        if trie.max_depth >= 2:
            size = _subtree_sizes(trie)
            lo, hi = int(lp[2]), int(lp[3])
            b1 = trie.byte[trie.parent[lo:hi]].astype(np.int64)
            two[b1, trie.byte[lo:hi]] = size[lo:hi]
        out = vocab._memo["depth2_subtree_sizes"] = (one, two)
    return out


def _depth2_pairs(vocab: TokenVocabulary) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The two-byte prefixes (b1, b2) of the vocabulary trie, int64 each, and float64 the
    nodes in their subtrees (the nonzero entries of :func:`_depth2_subtree_sizes`; cached)."""
    out = vocab._memo.get("depth2_pairs")
    if out is None:
        two = _depth2_subtree_sizes(vocab)[1]
        b1, b2 = np.nonzero(two)
        out = vocab._memo["depth2_pairs"] = (b1.astype(np.int64), b2.astype(np.int64),
                                             two[b1, b2].astype(np.float64))
    return out


def _plain_walk_estimate(subsets: _SubsetTable, start_sets: np.ndarray,
                         vocab: TokenVocabulary) -> int:
    """Byte-trie nodes a plain walk from the subsets ``start_sets`` can touch, bounded below the
    second byte: for each start, each readable first byte b counts 1, and each second byte b2
    readable after it counts the whole subtree of (b, b2).

    A literal key (``"name"``) reads one byte per state, so its walk dies within a level or two
    where a first-byte bound counts every token starting with ``n`` (~10k Llama-3 nodes).
    Llama-3, 23 Github_medium schemas with warm component caches: the first-byte bound chose
    the class trie for most; with this bound the median compile went 60 -> 41 ms (2 cores busy).
    Mutates ``subsets`` (expands the rows of the subsets reached by one byte)."""
    one = _depth2_subtree_sizes(vocab)[0]
    b1, b2, size2 = _depth2_pairs(vocab)
    cob = subsets.class_of_byte
    C = subsets.num_classes
    # per class: first-byte nodes; per pair of classes: the depth-2 subtree sizes summed over
    # their bytes (one bincount over the ~10^4 two-byte prefixes; a [C, 256] x [256, 256]
    # product took ~0.6 ms)
    cnt1 = np.bincount(cob, weights=one, minlength=C)
    sub_cc = np.bincount(cob[b1] * C + cob[b2], weights=size2, minlength=C * C).reshape(C, C)
    nxt = subsets.table[start_sets]  # [S', C]
    s_idx, c_idx = np.nonzero(nxt > 0)
    t = nxt[s_idx, c_idx]
    _expand_missing(subsets, t)
    live2 = subsets.table[t] != 0  # [pairs, C]
    return int(cnt1[c_idx].sum() + (sub_cc[c_idx] * live2).sum())


@dataclass(frozen=True)
class _ClassTrie:
    """The vocabulary trie quotiented by the NFA's byte classes (see :func:`_class_trie`).

    BFS-numbered like :class:`~.vocabulary.VocabTrie`: children of node n are
    ``child_ptr[n]:child_ptr[n+1]``; ``cls`` [N] is the byte class on the edge into a node;
    ``term_ptr``/``term_tokens`` list the token ids ending at each node; ``byte_node`` int64
    [byte-trie nodes] maps each byte-trie node to its class node (-1: dropped, unreadable);
    ``alive`` int64 (ascending) lists the byte-trie nodes kept, ``alive_node`` their class nodes
    (``byte_node[alive]``: a digit loop keeps a few hundred of Llama-3's 275k nodes).
    """

    child_ptr: np.ndarray
    cls: np.ndarray
    term_ptr: np.ndarray
    term_tokens: np.ndarray
    byte_node: np.ndarray
    alive: np.ndarray
    alive_node: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.cls.shape[0])


def _class_trie(trie, class_of_byte: np.ndarray, num_classes: int, *,
                first_all: bool = False) -> _ClassTrie:
    """Merge byte-trie nodes whose paths read the same class string; drop dead branches.

    Tokens that read the same sequence of byte classes behave identically in every state of the
    automaton, so they share one node.  A branch entering the dead class (bytes no edge reads)
    is dropped with its subtree: no state can read it.  Llama-3: 275k byte-trie nodes become
    6.8k for JSON-string content classes and 1.3k for an email local part.

    ``first_all``: the first level keeps the dead class too (a node labelled 0), for a
    component's walks: its template walk (the dead node dies at once) and its entry walks
    (:func:`_entries`), whose first byte is read by a virtual edge of any byte.  One trie serves
    both; a digit loop's then holds a few hundred Llama-3 nodes (any byte, then digits).
    """
    n = trie.num_nodes
    cob = np.asarray(class_of_byte, dtype=np.int64)
    cid = np.full(n, -1, dtype=np.int64)
    cid[0] = 0
    parents = [np.array([-1], dtype=np.int64)]
    classes = [np.zeros(1, dtype=np.int64)]
    alive_nodes = [np.zeros(1, dtype=np.int64)]
    frontier = alive_nodes[0]  # live byte-trie nodes of the previous level
    nxt = 1
    lp = trie.level_ptr
    d = 0
    while frontier.size and d < trie.max_depth:
        d += 1
        lo, hi = int(lp[d]), int(lp[d + 1])
        if d == 1 and first_all:
            ch = np.arange(lo, hi)
            pc = np.zeros(hi - lo, dtype=np.int64)
            bc = cob[trie.byte[lo:hi]]
        elif 4 * frontier.size >= int(lp[d] - lp[d - 1]):
            # most of the previous level lives: scan the whole level
            pc = cid[trie.parent[lo:hi]]
            bc = cob[trie.byte[lo:hi]]
            keep = (pc >= 0) & (bc != 0)
            if keep.all():  # a JSON-string partition: every node of most levels lives
                ch = np.arange(lo, hi)
            else:
                idx = np.flatnonzero(keep)
                ch = lo + idx
                pc = pc[idx]
                bc = bc[idx]
        else:
            # only the children of live nodes: a partition with a small alphabet (a literal
            # key, an enum) touches a few thousand of Llama-3's 275k byte-trie nodes
            clo = trie.child_ptr[frontier]
            cnt = trie.child_ptr[frontier + 1] - clo
            ch = _ranges(clo, cnt)
            bc = cob[trie.byte[ch]]
            keep = bc != 0
            ch = ch[keep]
            bc = bc[keep]
            pc = np.repeat(cid[frontier], cnt)[keep]
        if ch.size == 0:
            break
        base = nxt - int(classes[-1].size)  # the previous level's class nodes: [base, nxt)
        key = (pc - base) * num_classes + bc
        uniq, inv = _unique_inverse(key, int(classes[-1].size) * num_classes)
        cid[ch] = nxt + inv
        parents.append(uniq // num_classes + base)
        classes.append(uniq % num_classes)
        alive_nodes.append(ch)
        frontier = ch
        nxt += uniq.size
    parent = np.concatenate(parents)
    cls = np.concatenate(classes)
    child_ptr = np.zeros(nxt + 1, dtype=np.int64)
    child_ptr[1:] = np.cumsum(np.bincount(parent[1:], minlength=nxt))
    child_ptr += 1
    child_ptr[0] = 1
    # tokens: live byte node -> class node (in byte-node order, as the byte trie lists them)
    alive = np.concatenate(alive_nodes)  # ascending: levels in order, each level ascending
    if 4 * alive.size >= n:
        # most nodes live: one gather over all tokens (a JSON-string trie: 7 -> 3 ms)
        tc = cid[_token_node(trie)]
        keep = tc >= 0
        toks = trie.term_tokens[keep]
        tc = tc[keep]
    else:
        tcount = trie.term_ptr[alive + 1] - trie.term_ptr[alive]
        toks = trie.term_tokens[_ranges(trie.term_ptr[alive], tcount)]
        tc = np.repeat(cid[alive], tcount)
    order = stable_argsort(tc, nxt)
    term_ptr = np.zeros(nxt + 1, dtype=np.int64)
    term_ptr[1:] = np.cumsum(np.bincount(tc, minlength=nxt))
    return _ClassTrie(child_ptr, cls, term_ptr, toks[order], cid, alive, cid[alive])


def _byte_nodes_of(ct, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The byte-trie nodes behind the nodes ``nodes`` (int64) of a class trie ``ct`` (or of the
    byte trie itself: each node is its own): ``(count, byte)``, int64, with ``count[i]`` the
    byte-trie nodes of ``nodes[i]``, listed in ``byte`` in that order (ascending within each).
    Reads the class trie's kept nodes only, not the whole byte trie (0.2 ms per call over
    Llama-3's 275k nodes, for a digit loop's few hundred; measured here)."""
    if not isinstance(ct, _ClassTrie):
        return np.ones(nodes.size, dtype=np.int64), nodes
    N = ct.num_nodes
    need = np.zeros(N, dtype=bool)
    need[nodes] = True
    sel = need[ct.alive_node]
    owner = ct.alive_node[sel]
    byte = ct.alive[sel][np.argsort(owner, kind="stable")]
    ptr = np.zeros(N + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(np.bincount(owner, minlength=N))
    cnt = ptr[nodes + 1] - ptr[nodes]
    return cnt, byte[_ranges(ptr[nodes], cnt)]


_TOKEN_NODE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _token_node(trie) -> np.ndarray:
    """int64 [T]: the byte-trie node of each entry of ``trie.term_tokens`` (cached per trie)."""
    out = _TOKEN_NODE.get(trie)
    if out is None:
        out = np.repeat(np.arange(trie.num_nodes, dtype=np.int64), np.diff(trie.term_ptr))
        _TOKEN_NODE[trie] = out
    return out


def stable_argsort(key: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` for int keys in ``[0, bound)``, by radix passes over
    16-bit digits (numpy radix-sorts 16-bit ints; int64 gets a merge sort): 128k keys in 4 ms
    per digit where the int64 sort takes 22 ms (measured here)."""
    if bound <= 1 << 16:
        return key.astype(np.uint16).argsort(kind="stable")
    if bound > 1 << 32:
        return np.argsort(key, kind="stable")
    order = (key & 0xFFFF).astype(np.uint16).argsort(kind="stable")
    high = (key[order] >> 16).astype(np.uint16)
    return order[high.argsort(kind="stable")]


def _unique_inverse(key: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True)`` for keys in ``[0, bound)``.

    Below ``_DENSE_UNIQUE`` a presence table and a rank table replace the sort: the class
    trie of a JSON-string partition over Llama-3 (~660 calls on 275k byte-trie nodes) drops from
    49 ms to 37 ms per partition (measured here, 2 cores busy)."""
    if bound > _DENSE_UNIQUE:
        return np.unique(key, return_inverse=True)
    present = np.zeros(bound, dtype=bool)
    present[key] = True
    uniq = np.flatnonzero(present)
    rank = np.empty(bound, dtype=np.int64)
    rank[uniq] = np.arange(uniq.size)
    return uniq, rank[key]


# Largest key range _unique_inverse scans densely (a bool table and an int64 rank: 9 MB).
_DENSE_UNIQUE = 1 << 20

# Class tries kept per vocabulary, by total array bytes (each holds a byte-trie-sized map:
# ~2.5 MB over Llama-3; 58 Github_medium schemas build 140 distinct tries, and a cap of 8 tries
# rebuilt 33 of them).
_CLASS_TRIE_CACHE_BYTES = 192 << 20
# Component and entry walks kept per vocabulary, by total array bytes (a JSON string's entry
# walk over Llama-3 is ~6 MB: token lists of ~120k ids per destination).
_TEMPLATE_CACHE_BYTES = 256 << 20


def _nbytes(x) -> int:
    return sum(v.nbytes for v in vars(x).values() if isinstance(v, np.ndarray))


def _remember(cache: dict, key, value, cap: int = _TEMPLATE_CACHE_BYTES) -> None:
    """Insert into a vocabulary's cache, evicting the oldest entries past ``cap`` bytes."""
    size = _nbytes(value)
    total = cache.get("__bytes__", 0)
    while total + size > cap and len(cache) > 1:
        old = next(k for k in cache if k != "__bytes__")
        total -= _nbytes(cache.pop(old))
    cache[key] = value
    cache["__bytes__"] = total + size


def _cached_class_trie(vocab: TokenVocabulary, subsets: _SubsetTable,
                       first_all: bool = False, build: bool = True) -> _ClassTrie | None:
    """The class trie of ``subsets``' byte classes (cached on ``vocab``); None when not
    cached and not ``build``."""
    memo = vocab._memo.setdefault("class_tries", {})
    key = (subsets.num_classes, subsets.class_of_byte.tobytes(), first_all)
    ct = memo.get(key)
    if ct is None and build:
        ct = _class_trie(vocab.trie, subsets.class_of_byte, subsets.num_classes,
                         first_all=first_all)
        _remember(memo, key, ct, _CLASS_TRIE_CACHE_BYTES)
    return ct


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for each (s, c), vectorized."""
    return np.arange(int(counts.sum())) + np.repeat(starts - (np.cumsum(counts) - counts), counts)


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """The distinct values of an int64 array, sorted (== ``np.unique(a)``).

    A sort and a neighbour comparison: numpy 2.4's ``np.unique`` hashes, which takes 7.4 s on 9M
    distinct int64 keys where this takes 0.15 s (measured here).
    """
    s = np.sort(a)
    return s[_run_starts(s)]


def _run_starts(s: np.ndarray) -> np.ndarray:
    """int64: the index of the first element of each run of equal values in sorted ``s``."""
    if s.size == 0:
        return np.zeros(0, dtype=np.int64)
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return np.flatnonzero(keep)


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
    W = (vocab_size + 31) // 32
    if num_rows == 0 or row.size == 0:
        return np.zeros((num_rows, W), dtype=np.uint32)
    key = row.astype(np.int64, copy=False) * W + (tok >> 5)
    ordered = key.size < 2 or bool((key[1:] >= key[:-1]).all())
    if key.size > _PACK_SPARSE_MAX or (not ordered and key.size * 20 > num_rows * W):
        words = np.bincount(key, weights=np.left_shift(1, tok & 31).astype(np.float64),
                            minlength=num_rows * W)
        return words.astype(np.uint32).reshape(num_rows, W)
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


_ROW_HASH: dict[int, np.ndarray] = {}


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
        return (_mix64(table.view(np.uint64)) @ R)[rows]  # most rows: the table in place
    buf = np.zeros((min(rows.size, chunk), 2 * R.size), dtype=np.uint32)
    for c0 in range(0, rows.size, chunk):
        c1 = min(rows.size, c0 + chunk)
        part = buf[:c1 - c0]
        part[:, :W] = table[rows[c0:c1]]
        h[c0:c1] = _mix64(part.view(np.uint64)) @ R
    return h


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
    if len(parts) == 1 and not isinstance(parts[0], SparseRows):
        return parts[0][idx]
    W = parts[0].width if isinstance(parts[0], SparseRows) else parts[0].shape[1]
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
    if d.size:
        eq[d] = (take_rows(parts, a[d]) == take_rows(parts, b[d])).all(axis=1)
    return eq


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


def dedup_sets(tok: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """Exact dedup of the sorted id sets ``tok[starts[i]:ends[i]]``.

    Sets are grouped by (size, random 64-bit hash); every member is then compared element-wise
    with its group's representative in one vectorized pass, and any set that differs (a hash
    collision) gets its own label through an exact fallback.  Returns (label id per set, list of
    (start, end) of each distinct set's representative).
    """
    n = starts.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    counts = ends - starts
    h1 = _token_hashes(int(tok.max()) + 1 if tok.size else 1)
    vals = h1[tok] if tok.size else np.zeros(0, dtype=np.int64)
    csum = np.concatenate([[0], np.cumsum(vals, dtype=np.int64)])  # wraps: fine for hashing
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
        c = counts[check]
        a = tok[_ranges(starts[check], c)]
        b = tok[_ranges(starts[rep_of[check]], c)]
        same = a == b
        bounds = np.concatenate([[0], np.cumsum(c)[:-1]])
        good = np.ones(check.size, dtype=bool)
        nz = c > 0
        good[nz] = np.logical_and.reduceat(same, bounds[nz])
        ok[check] = good
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


def _expand_missing(subsets: _SubsetTable, sids: np.ndarray) -> None:
    """Fill the table rows of the subsets in ``sids`` not yet expanded."""
    miss = subsets.table[sids, 0] < 0
    if miss.any():
        # distinct subset ids by a flag array: np.unique hashed tens of millions of entries
        # per step on the largest schemas (540 s of 770 s on 30 Github_medium schemas)
        seen = np.zeros(len(subsets.members), dtype=bool)
        seen[sids[miss]] = True
        for sid in np.nonzero(seen)[0]:
            subsets.expand(int(sid))


def _walk(trie, node_cls, subsets: _SubsetTable, starts, node, dstate, *, visits: bool = False,
          dedup: bool = False):
    """Breadth-first walk of ``trie`` below frontier entries (start, trie node, subset id).

    All int64 [F].  Returns ``(start, node, subset, steps)`` for every trie node reached
    strictly below a frontier node with a non-empty subset: every such node when ``visits``,
    else only nodes where tokens end.  ``dedup``: drop repeated (start, node, subset) entries at
    each depth (continuations of one start converge).  Mutates ``subsets`` (expands rows on
    demand).
    """
    child_ptr = trie.child_ptr
    trie_nodes = int(child_ptr.shape[0]) - 1
    tp = trie.term_ptr
    rs: list[np.ndarray] = []
    rn: list[np.ndarray] = []
    rd: list[np.ndarray] = []
    steps = 0
    while starts.size:
        steps += 1
        n0 = int(np.count_nonzero(node == 0)) if steps == 1 else 0
        if n0 and not node[:n0].any():
            # entries at the root first (plain and template walks): their children are the
            # root's, so one [entries, root children] gather of the class table replaces the
            # per-child expansion below (~2/3 of the first step's work)
            _expand_missing(subsets, dstate[:n0])
            r0, r1 = int(child_ptr[0]), int(child_ptr[1])
            rc = node_cls[r0:r1] if node_cls is not None else subsets.class_of_byte[
                trie.byte[r0:r1]]
            # per entry, the classes it reads, then the root children of each such class, in
            # (entry, child) order: a [entries, classes] gather where [entries, root children]
            # took ~4x longer (300 plain starts of a Github_medium schema; measured here)
            by_cls = np.argsort(rc, kind="stable")
            ccnt = np.bincount(rc, minlength=subsets.num_classes)
            nxt = subsets.table[dstate[:n0]]  # [n0, classes]
            i0, k0 = np.nonzero(nxt)
            cnt = ccnt[k0]
            j0 = by_cls[_ranges(np.cumsum(ccnt)[k0] - cnt, cnt)]
            i0, d0 = np.repeat(i0, cnt), np.repeat(nxt[i0, k0], cnt)
            o = np.argsort(i0 * (r1 - r0) + j0, kind="stable")
            s0, c0, d0 = starts[i0[o]], r0 + j0[o], d0[o]
            starts, node, dstate = starts[n0:], node[n0:], dstate[n0:]
        else:
            s0 = None
        cs = child_ptr[node]
        counts = child_ptr[node + 1] - cs
        total = int(counts.sum())
        if total == 0 and s0 is None:
            break
        # children of every frontier entry, contiguous in the BFS-numbered trie
        child = np.arange(total) + np.repeat(cs - (np.cumsum(counts) - counts), counts)
        src_state = np.repeat(dstate, counts)
        _expand_missing(subsets, src_state)
        cc = node_cls[child] if node_cls is not None else subsets.class_of_byte[trie.byte[child]]
        nd = subsets.table[src_state, cc]
        keep = nd != 0
        starts = np.repeat(starts, counts)[keep]
        node = child[keep]
        dstate = nd[keep]
        if s0 is not None:
            starts = np.concatenate([s0, starts])
            node = np.concatenate([c0, node])
            dstate = np.concatenate([d0, dstate])
        if dedup and starts.size > _DEDUP_MIN:
            # continuations of one start met at one node with one subset: walk them once
            ns = len(subsets.members)
            if (int(starts.max()) + 1) * trie_nodes * ns < 2**62:
                k = sorted_unique((starts * trie_nodes + node) * ns + dstate)
                if k.size < starts.size:
                    dstate = k % ns
                    k //= ns
                    starts, node = k // trie_nodes, k % trie_nodes
        if visits:
            rs.append(starts)
            rn.append(node)
            rd.append(dstate)
        else:
            term = tp[node + 1] > tp[node]
            if term.any():
                rs.append(starts[term])
                rn.append(node[term])
                rd.append(dstate[term])
    empty = np.zeros(0, dtype=np.int64)
    if not rs:
        return empty, empty, empty, steps
    return np.concatenate(rs), np.concatenate(rn), np.concatenate(rd), steps


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
    idx = np.repeat(np.arange(sid.size, dtype=np.int64), k)
    return idx, flat[_ranges(ptr[sid], k)]


# ------------------------------------------------------------------------ components

def _is_cut(mask: int) -> bool:
    """Single-ASCII-byte edges (JSON punctuation, literal keys) separate components."""
    return mask & (mask - 1) == 0 and mask < (1 << 128)


# Acyclic pieces of at least this many states become templates (chains).  Llama-3, strict, one
# process each: GitHub-medium o1053 (strings of maxLength 255) lift 56 -> 8.8 s, o1050 20 -> 9.6 s
# (0.5 s for o1053 once o1050's chain shape is cached).
_MIN_CHAIN = 16


class _Component(NamedTuple):
    """One copy of a template: ``states[r]`` is the real state of relative state r;
    ``targets[k]`` the real destination of exit k.  ``sig`` identifies the template.  A named
    tuple: a schema splits into ~50-130 of them, and a frozen dataclass took ~3 us each to
    build (measured here)."""

    sig: tuple
    states: np.ndarray
    targets: np.ndarray
    edges: tuple  # template edges (r, mask, r' or n + k)
    dmap: np.ndarray  # states then targets: relative state or n + exit -> real state


def _absorb_satellites(region: list[int], src: np.ndarray, dst: np.ndarray, S: int,
                       start: int) -> list[int]:
    """Satellites joined to their region (see :func:`_components`): ``region`` per state
    (-1: free) -> the same with satellites joined.  Not mutated."""
    order_d = np.argsort(dst, kind="stable")
    order_s = np.argsort(src, kind="stable")
    pcount = np.bincount(dst, minlength=S)
    scount = np.bincount(src, minlength=S)
    pptr = np.concatenate([[0], np.cumsum(pcount)]).tolist()
    sptr = np.concatenate([[0], np.cumsum(scount)]).tolist()
    preds = src[order_d].tolist()
    succs = dst[order_s].tolist()
    rl = list(region)
    npred = pcount.tolist()
    seen_r = [-1] * S  # the region seen among a free state's predecessors so far (-2: several)
    seen_n = [0] * S
    grown: list[int] = []
    work = [q for q in range(S) if rl[q] >= 0]
    for p in work:  # grows while iterating
        r = rl[p]
        for x in succs[sptr[p]:sptr[p + 1]]:
            if rl[x] != -1 or x == start or seen_r[x] == -2:
                continue
            if seen_r[x] == -1:
                seen_r[x] = r
            elif seen_r[x] != r:
                seen_r[x] = -2
                continue
            seen_n[x] += 1
            if seen_n[x] == npred[x]:
                rl[x] = r
                grown.append(x)
                work.append(x)
    if grown:
        is_grown = [False] * S
        for x in grown:
            is_grown[x] = True
        leave = [x for x in grown if any(rl[d] != rl[x] for d in succs[sptr[x]:sptr[x + 1]])]
        for x in leave:
            is_grown[x] = False
        for x in leave:  # grows while iterating
            r = rl[x]
            rl[x] = -1
            for p in preds[pptr[x]:pptr[x + 1]]:
                if is_grown[p] and rl[p] == r:
                    is_grown[p] = False
                    leave.append(p)
    return rl


def _components(nfa: ByteNFA) -> list[_Component]:
    """Strongly connected components of the byte NFA without its cut edges, each with at least
    one internal edge, and large acyclic pieces (see ``_MIN_CHAIN``), in a canonical relative
    numbering (breadth-first from the entry states, out-edges by (mask, destination)); two
    copies with equal ``sig`` are isomorphic."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    S = nfa.num_states
    if not nfa.edges:
        return []
    src, dst, mid, masks = _edge_arrays(nfa)
    keep = np.array([not _is_cut(m) for m in masks], dtype=bool)[mid]

    def graph(sel: np.ndarray):
        """The edges ``sel`` as a CSR matrix; built directly from the (source, destination)
        order of a finalized NFA's edges (the COO route cost ~70 us more per call).  float64
        data and int32 indices, the types ``connected_components`` works in: with int8 data
        it converted first (600 states, 1,500 edges: strong 115 -> 20 us, weak 180 -> 90 us;
        measured here)."""
        s_, d_ = src[sel], dst[sel]
        ones = np.ones(s_.size, dtype=np.float64)
        if s_.size > 1 and (s_[1:] < s_[:-1]).any():
            return csr_matrix((ones, (s_, d_)), shape=(S, S))
        return csr_matrix((ones, d_.astype(np.int32),
                           np.searchsorted(s_, np.arange(S + 1)).astype(np.int32)),
                          shape=(S, S))

    g = graph(keep)
    _, lab = connected_components(g, directed=True, connection="strong")
    inner = keep & (lab[src] == lab[dst])
    loops: set[int] = set(np.unique(lab[src[inner]]).tolist())
    region = [c if c in loops else -1 for c in lab.tolist()]
    # Absorb satellites: states entered only from a loop's (chain's) region and leaving only
    # into it (escape sequences inside a JSON string: `\\`, `\\u` and four hex digits).  They
    # are part of every copy's walk anyway; as members they stop costing a walk each.
    # Two worklists over the edges: a free state (not the start) whose predecessors all lie in
    # one region joins it (least fixpoint); then joined states with a successor outside their
    # region leave it again (greatest fixpoint).  O(edges); the round-by-round array version
    # took one round per state of a literal key chain (~1 ms per Github_medium schema).
    # Before chains, so that an escape's states (every spelling: ~30 cut-free states after
    # `\\u`) join their string loop instead of becoming a chain whose exit back into the loop
    # costs every copy a walk (Kubernetes kb_... : 6.5M of 6.7M explicit token pairs); and again
    # after, for the chains' own satellites.
    region = _absorb_satellites(region, src, dst, S, nfa.start)
    # Chains: the other states joined by cut-free edges, when there are many of them (a string
    # of at most 255 characters is 255 positions in a row).  Each position's walk covers the
    # whole vocabulary; as one template they are walked over the chain's own coarse class trie,
    # once per shape.
    free = np.array([c < 0 for c in region], dtype=bool)
    ce = keep & free[src] & free[dst]
    if np.count_nonzero(ce) >= _MIN_CHAIN - 1:  # fewer edges join no _MIN_CHAIN states
        gc = graph(ce)
        _, wl = connected_components(gc, directed=True, connection="weak")
        size = np.bincount(wl[free], minlength=int(wl.max()) + 1)
        base = int(lab.max()) + 1
        for q in np.nonzero(free & (size[wl] >= _MIN_CHAIN))[0].tolist():
            region[q] = base + int(wl[q])
            loops.add(region[q])
    rl = _absorb_satellites(region, src, dst, S, nfa.start)
    reg = np.array(rl, dtype=np.int64)
    region = reg.tolist()
    if not loops:
        return []
    # reg: a state's loop region, -1 - state for the others (each its own piece)
    reg = np.where(reg >= 0, reg, -1 - np.arange(S, dtype=np.int64))
    in_loop = reg >= 0  # every region left is a loop (or chain) region
    members: dict[int, list[int]] = {}
    for q, c in zip(np.nonzero(in_loop)[0].tolist(), reg[in_loop].tolist()):
        members.setdefault(c, []).append(q)
    out_edges: dict[int, list[tuple[int, int]]] = {}
    for i in np.nonzero(in_loop[src])[0].tolist():
        e = nfa.edges[i]
        out_edges.setdefault(e[0], []).append((e[1], e[2]))
    entry = set() if nfa.start not in range(S) else {nfa.start}
    entry.update(dst[in_loop[dst] & (reg[src] != reg[dst])].tolist())
    result = []
    for qs in members.values():
        if len(qs) == 1:  # one state (a digit loop): its self-loops and exits
            q = qs[0]
            internal = [(0, m, 0) for m, d in out_edges.get(q, ()) if d == q]
            exits = [(0, m, d) for m, d in out_edges.get(q, ()) if d != q]
            internal.sort()
            exits.sort()
            sig = (1, tuple(internal), tuple([(r, m) for r, m, _ in exits]))
            edges = tuple(internal) + tuple([(0, m, 1 + k) for k, (_, m, _) in enumerate(exits)])
            dmap = np.array([q] + [d for _, _, d in exits], dtype=np.int64)
            result.append(_Component(sig, dmap[:1], dmap[1:], edges, dmap))
            continue
        inside = set(qs)
        # breadth-first from the entry states (the order list is the queue)
        order: list[int] = []
        seen: set[int] = set()
        for e in sorted(q for q in qs if q in entry) or [qs[0]]:
            if e in seen:
                continue
            seen.add(e)
            i = len(order)
            order.append(e)
            while i < len(order):
                oe = out_edges.get(order[i])
                i += 1
                if oe:
                    for _m, d in sorted(oe):
                        if d in inside and d not in seen:
                            seen.add(d)
                            order.append(d)
        if len(order) < len(qs):
            order.extend(q for q in qs if q not in seen)
        rel = {q: i for i, q in enumerate(order)}
        internal = []
        exits = []
        for q in order:
            rq = rel[q]
            for m, d in out_edges.get(q, ()):
                if d in inside:
                    internal.append((rq, m, rel[d]))
                else:
                    exits.append((rq, m, d))
        internal.sort()
        exits.sort()
        n = len(order)
        sig = (n, tuple(internal), tuple([(r, m) for r, m, _ in exits]))
        edges = tuple(internal) + tuple([(r, m, n + k) for k, (r, m, _) in enumerate(exits)])
        dmap = np.array(order + [d for _, _, d in exits], dtype=np.int64)
        result.append(_Component(sig, dmap[:n], dmap[n:], edges, dmap))
    return result


@dataclass(frozen=True)
class _Template:
    """A component's walk over relative states, with its exits as sinks (see
    :func:`_component_walks` and :func:`_template_of`).

    Edge contributions: relative source ``e_r``, destination ``e_d`` (relative state, or
    ``n + k`` for exit k) and row ``e_row`` of ``rows`` (uint32 [L, W]; ``row_hash`` uint64
    [L] their :func:`_row_hashes`, computed once with the walk).  Continuations: from relative
    start ``c_r`` the path left by exit ``c_k`` at byte-trie node ``c_b``.
    """

    e_r: np.ndarray
    e_d: np.ndarray
    e_row: np.ndarray
    rows: np.ndarray
    c_r: np.ndarray
    c_k: np.ndarray
    c_b: np.ndarray
    row_hash: np.ndarray


def _template_of(comp: _Component, ct, r: np.ndarray, m: np.ndarray,
                 node: np.ndarray, vocab: TokenVocabulary) -> _Template:
    """The :class:`_Template` of the template walk's records: relative start ``r``, member
    state ``m`` of the subset reached (relative state, or ``n + k`` for exit k) at node ``node``
    of the trie walked (``ct``: a :class:`_ClassTrie`, or the byte trie), int64 each."""
    n = int(comp.states.size)
    K = int(comp.targets.size)
    # token sets per (r, destination): a start reaches each node once, so (r, m, node) is unique
    tp = ct.term_ptr
    term = tp[node + 1] > tp[node]
    N = ct.num_nodes
    # one entry per (r, destination, group node), sorted; distinct group sets packed once (a
    # chain of 255 string positions has ~50k (r, destination) pairs but a few hundred sets)
    k3 = np.sort((r[term] * (n + K) + m[term]) * N + node[term])
    key, tnode = k3 // N, k3 % N
    first = _run_starts(key)
    ukey = key[first]
    e_row, reps = dedup_sets(tnode, first, np.append(first[1:], key.size))
    rows = _pack_sets(tnode, reps, tp, ct.term_tokens, vocab.size)
    # continuations: class nodes reached with an exit in the subset -> their byte-trie nodes
    c = m >= n
    c_r, c_k, c_node = r[c], m[c] - n, node[c]
    cnt, c_b = _byte_nodes_of(ct, c_node)
    return _Template(ukey // (n + K), ukey % (n + K), e_row, rows, np.repeat(c_r, cnt),
                     np.repeat(c_k, cnt), c_b,
                     _row_hashes(rows, np.arange(rows.shape[0], dtype=np.int64)))


@dataclass(frozen=True)
class _Entry:
    """Walks into a component through one entry state, by any first byte (see :func:`_entries`).

    For destination j (relative state, or ``n + k`` for exit k) ``dest[j]``: ``full[j]`` uint32
    [W] is every token reaching it; ``tok[ptr[j, b]:ptr[j, b + 1]]`` those whose first byte is b.
    Continuations (exit ``c_k`` left at byte-trie node ``c_b``) are sorted by first byte:
    ``c_ptr`` int64 [257].
    """

    dest: np.ndarray
    full: np.ndarray
    ptr: np.ndarray
    tok: np.ndarray
    c_k: np.ndarray
    c_b: np.ndarray
    c_ptr: np.ndarray


_ALL_BYTES = (1 << 256) - 1

# A component walks over the byte trie itself, not its class trie, when the class trie is not
# cached and the walk's estimate (_plain_walk_estimate: byte-trie nodes below the first two
# bytes) is at most this.  Llama-3, the component walks of 90 bench schemas (GlaiveAI,
# Github_medium, Kubernetes), each timed both ways: up to an estimate of 1.1e5 (digit loops,
# short chains) the byte walk took 1.1-4.8 ms where building the class trie and walking it
# took 1.4-13 ms; from 1.8e5 up the class trie won (9.5 vs 16 ms and more).  Measured here.
_COMPONENT_BYTE_WALK = 150_000


def _entries(comp: _Component, rels: list[int], vocab: TokenVocabulary) -> list[_Entry]:
    """The entry walks into relative states ``rels`` of a component, one :class:`_Entry` each
    (see :func:`_component_walks`)."""
    return _component_walks(comp, rels, vocab, template=False)[1]


def _component_walks(comp: _Component, rels: list[int], vocab: TokenVocabulary, *,
                     template: bool = True) -> tuple[_Template | None, list[_Entry]]:
    """A component's template (when ``template``) and its entry walks into relative states
    ``rels``, from one subset table and one walk: over the component's class trie, or over the
    byte trie itself when that walk is small and the class trie not cached
    (:data:`_COMPONENT_BYTE_WALK`).  Mutates ``vocab``'s private memo (the class trie).

    Entry walks: for each rel, a virtual state x with one edge reading any byte into it (exits
    as sinks): token b·w reaches q iff some path reads b then w.  An outside state s with an
    edge (m, d) into the component then reaches, through that edge, exactly the tokens recorded
    here whose first byte is in m.  All rels share one class trie and one walk (one virtual
    state each): a JSON string entered at 13 states took 13 walks of 1-3 ms.  The template's
    starts (its relative states) walk beside them: a new digit loop's template and entry walks
    took 1.4 + 0.7 ms apart (Github_medium o10297, measured here); each start's records are the
    same either way."""
    n = int(comp.states.size)
    K = int(comp.targets.size)
    x = n + K
    R = len(rels)
    T = ByteNFA(x + R, 0, frozenset(),
                comp.edges + tuple((x + i, _ALL_BYTES, r) for i, r in enumerate(rels)))
    # the component's own byte classes: x reads every class, the dead one (bytes no component
    # edge reads) included, and so the template's class trie serves the entries
    sub = _SubsetTable(T, classes=byte_classes(m for _, m, _ in comp.edges))
    n0 = n if template else 0  # starts 0..n0-1: the template's; n0 + i: rel i's
    single = sub.intern_singletons(n0)
    sx = np.array([sub.intern((x + i,)) for i in range(R)], dtype=np.int64)
    d0 = np.concatenate([single, sx])
    # the byte trie itself where the walk stays small and the class trie is not built yet
    ct = _cached_class_trie(vocab, sub, first_all=True, build=False)
    if ct is None:
        _expand_missing(sub, d0)
        if _plain_walk_estimate(sub, d0, vocab) > _COMPONENT_BYTE_WALK:
            ct = _cached_class_trie(vocab, sub, first_all=True)
    if ct is None:
        ct = vocab.trie
    vs, vn, vd, _ = _walk(ct, ct.cls if isinstance(ct, _ClassTrie) else None, sub,
                          np.arange(n0 + R, dtype=np.int64), np.zeros(n0 + R, dtype=np.int64),
                          d0, visits=True)
    idx, m_all = _expand_members(sub, vd)
    s_all, node_all = vs[idx], vn[idx]
    tmpl = None
    if template:
        sel = s_all < n0
        tmpl = _template_of(comp, ct, s_all[sel], m_all[sel], node_all[sel], vocab)
        # the entries' records apart once, not a pass over the template's records per rel
        sel = ~sel
        s_all, m_all, node_all = s_all[sel], m_all[sel], node_all[sel]
    tp = ct.term_ptr
    first_tok = _first_byte_of_token(vocab)
    first_node = _first_byte_of_node(vocab)
    out = []
    for i in range(R):
        sel = s_all == n0 + i
        m, node = m_all[sel], node_all[sel]
        term = tp[node + 1] > tp[node]
        tnode, tm = node[term], m[term]
        gsize = tp[tnode + 1] - tp[tnode]
        toks = ct.term_tokens[_ranges(tp[tnode], gsize)]
        tdst = np.repeat(tm, gsize)
        dest, j = np.unique(tdst, return_inverse=True)
        j = j.reshape(-1)
        fb = first_tok[toks]
        order = np.lexsort((fb, j))
        J = int(dest.size)
        ptr = np.zeros((J, 257), dtype=np.int64)
        cnt = np.bincount(j * 256 + fb, minlength=J * 256).reshape(J, 256)
        ptr[:, 1:] = np.cumsum(cnt, axis=1)
        ptr += np.concatenate([[0], np.cumsum(cnt.sum(axis=1))[:-1]])[:, None]
        full = pack_rows(j, toks, J, vocab.size)
        # continuations: class nodes reached with an exit in the subset -> byte-trie nodes
        c = m >= n
        c_k, c_node = m[c] - n, node[c]
        ccnt, c_b = _byte_nodes_of(ct, c_node)
        c_k = np.repeat(c_k, ccnt)
        c_fb = first_node[c_b]
        o = np.argsort(c_fb, kind="stable")
        c_ptr = np.zeros(257, dtype=np.int64)
        c_ptr[1:] = np.cumsum(np.bincount(c_fb, minlength=256))
        out.append(_Entry(dest, full, ptr, toks[order], c_k[o], c_b[o], c_ptr))
    return tmpl, out


@dataclass(frozen=True)
class _EntryMask:
    """What an outside edge with mask m into a component's entry state contributes (see
    :func:`_entry_mask`): token rows ``rows`` (uint32 [J, W], ``row_hash`` their
    :func:`_row_hashes`) to relative destinations ``dest`` int64 [J], and continuations (exit
    ``c_k`` left at byte-trie node ``c_b``)."""

    dest: np.ndarray
    rows: np.ndarray
    row_hash: np.ndarray
    c_k: np.ndarray
    c_b: np.ndarray


def _entry_mask(ent: _Entry, m: int, V: int) -> _EntryMask:
    """The tokens of entry walk ``ent`` whose first byte is in mask ``m``, one row per
    destination, and its continuations by those first bytes.  Cached per (template, entry
    state, mask) with the templates: the ~13 kinds of entering edges of a Github_medium schema
    recur from schema to schema (packing and hashing their rows took ~0.4 ms per compile)."""
    inb = _mask_bytes(m)
    # more than half the bytes: complement the few first bytes m does not read
    comp_side = inb.size > 128
    bs = _mask_bytes(~m & _ALL_BYTES) if comp_side else inb
    # one token set per entry destination j: the tokens whose first byte is in bs, all j at once
    lo = ent.ptr[:, bs]  # [J, |bs|]
    cnt = ent.ptr[:, bs + 1] - lo
    tot = cnt.sum(axis=1)
    js = np.arange(tot.size) if comp_side else np.nonzero(tot)[0]
    toks = ent.tok[_ranges(lo[js].reshape(-1), cnt[js].reshape(-1))]
    packed = pack_rows(np.repeat(np.arange(js.size, dtype=np.int64), tot[js]), toks, js.size, V)
    if comp_side:
        packed = ent.full[js] & ~packed
    lo = ent.c_ptr[inb]
    sel = _ranges(lo, ent.c_ptr[inb + 1] - lo)
    return _EntryMask(ent.dest[js], packed, _row_hashes(packed, np.arange(js.size, dtype=np.int64)),
                      ent.c_k[sel], ent.c_b[sel])


_MASK_BYTES: dict[int, np.ndarray] = {}


def _mask_bytes(mask: int) -> np.ndarray:
    """int64 array of the bytes in a 256-bit mask (cached)."""
    out = _MASK_BYTES.get(mask)
    if out is None:
        out = np.array([b for b in range(256) if mask >> b & 1], dtype=np.int64)
        if len(_MASK_BYTES) < 4096:
            _MASK_BYTES[mask] = out
    return out


# Components: walk each distinct template once (cached per vocabulary) instead of every copy.
# Llama-3, first 8 GlaiveAI schemas: lift 9.7 s -> see bench/results/json_schema_compile_time.md.
_USE_COMPONENTS = True


def lift(nfa: ByteNFA, vocab: TokenVocabulary) -> LiftedEdges:
    """Lift a byte NFA to token-level edges; see the module docstring.

    ``nfa`` is finalized first (epsilon-free, trimmed).  Returns a :class:`LiftedEdges`.
    Mutates ``vocab``'s private memo (class tries and component walks are cached there).
    """
    nfa = finalize(nfa)
    S = nfa.num_states
    W = (vocab.size + 31) // 32
    comps = _components(nfa) if _USE_COMPONENTS else []
    src, dst, mid, masks = _edge_arrays(nfa)
    comp_of = np.full(S, -1, dtype=np.int64)  # templated state -> component (-1: plain)
    rel_of = np.zeros(S, dtype=np.int64)  # templated state -> its relative state
    if comps:
        cs_ = [c.states for c in comps]
        comp_of[np.concatenate(cs_)] = np.repeat(np.arange(len(comps), dtype=np.int64),
                                                 [c.size for c in cs_])
        rel_of[np.concatenate(cs_)] = np.concatenate([np.arange(c.size) for c in cs_])
    # A plain state's edges into components are lifted from entry walks; its other edges are
    # walked from a shadow copy of the state that has only those edges.
    plain_src = comp_of[src] < 0
    into = comp_of[dst] >= 0
    ent_i = np.nonzero(plain_src & into)[0]  # entering edges (plain state -> component)
    rest_i = np.nonzero(plain_src & ~into)[0]
    entering = np.zeros(S, dtype=bool)
    entering[src[ent_i]] = True
    has_rest = np.zeros(S, dtype=bool)
    has_rest[src[rest_i]] = True
    # walk start per plain state: itself, or a shadow (numbered S, S+1, ... in state order)
    # for an entering state with other edges; entering states without them are not walked
    plain_of = np.nonzero((comp_of < 0) & (~entering | has_rest))[0]
    shadowed = entering[plain_of]
    n_shadow = int(np.count_nonzero(shadowed))
    sh_id = S + np.cumsum(shadowed) - 1
    wf = np.where(shadowed, sh_id, plain_of)
    if n_shadow:
        sh_of = np.full(S, -1, dtype=np.int64)
        sh_of[plain_of[shadowed]] = sh_id[shadowed]
        sh_i = rest_i[entering[src[rest_i]]]  # sorted by source: the shadows' edges in order
        sh_src = sh_of[src[sh_i]]
        ext = ByteNFA(S + n_shadow, nfa.start, nfa.finals, nfa.edges + tuple(
            (s_, nfa.edges[i][1], nfa.edges[i][2]) for s_, i in zip(sh_src.tolist(),
                                                                   sh_i.tolist())))
        arrays = (np.concatenate([src, sh_src]), np.concatenate([dst, dst[sh_i]]),
                  np.concatenate([mid, mid[sh_i]]), masks)
    else:
        ext, arrays = nfa, None
    subsets = _SubsetTable(ext, arrays=arrays)
    single = subsets.intern_singletons(S + n_shadow)
    cache = vocab._memo.setdefault("lift_templates", {})
    local: dict[tuple, tuple[_Template, int]] = {}
    rows: list[np.ndarray] = []
    row_hash: list[np.ndarray] = []  # per part of ``rows``
    n_rows = 0
    r_src: list[np.ndarray] = []
    r_dst: list[np.ndarray] = []
    r_id: list[np.ndarray] = []
    c_start: list[np.ndarray] = []
    c_byte: list[np.ndarray] = []
    c_state: list[np.ndarray] = []
    built = 0
    # the entry walks this NFA needs: cached ones held here (inserting the new ones may evict
    # them from the cache), the others all rels of one template in one walk, with the
    # template's own walk when that is new too
    needed: dict[tuple, _Entry] = {}
    missing: dict[tuple, list[int]] = {}
    groups: dict[tuple, list[tuple[int, int]]] = {}
    if ent_i.size:
        # group the entering edges by (template, entry state, mask): one token-set lookup per
        # group, then every member copy's edges and continuations at once (Kubernetes kb_1004:
        # 80k entering edges in 31 groups; a Python loop per edge took 8 s)
        for q, mi, ci, rel in zip(src[ent_i].tolist(), mid[ent_i].tolist(),
                                  comp_of[dst[ent_i]].tolist(), rel_of[dst[ent_i]].tolist()):
            groups.setdefault((comps[ci].sig, rel, masks[mi]), []).append((q, ci))
        for sig, rel, _ in groups:
            key = ("entry", sig, rel)
            if key in needed:
                continue
            hit = cache.get(key)
            if hit is not None:
                needed[key] = hit
            elif rel not in missing.setdefault(sig, []):
                missing[sig].append(rel)
    copies: dict[tuple, list[_Component]] = {}  # per template, its copies in this NFA
    for comp in comps:
        if comp.sig not in local:
            tm = cache.get(comp.sig)
            if tm is None:
                rels = missing.pop(comp.sig, [])
                tm, ents = _component_walks(comp, rels, vocab)
                built += 1 + len(rels)
                _remember(cache, comp.sig, tm)
                for rel, ent in zip(rels, ents):
                    needed[("entry", comp.sig, rel)] = ent
                    _remember(cache, ("entry", comp.sig, rel), ent)
            local[comp.sig] = (tm, n_rows)
            rows.append(tm.rows)
            row_hash.append(tm.row_hash)
            n_rows += tm.rows.shape[0]
        copies.setdefault(comp.sig, []).append(comp)
    # every copy of a template at once (copies share n and the exits, so their maps stack)
    for sig, cl in copies.items():
        tm, off = local[sig]
        dm = np.stack([c.dmap for c in cl]) if len(cl) > 1 else cl[0].dmap[None, :]
        n = int(cl[0].states.size)
        r_src.append(dm[:, tm.e_r].reshape(-1))
        r_dst.append(dm[:, tm.e_d].reshape(-1))
        r_id.append(np.tile(tm.e_row + off, len(cl)))
        c_start.append(dm[:, tm.c_r].reshape(-1))
        c_byte.append(np.tile(tm.c_b, len(cl)))
        c_state.append(single[dm[:, n + tm.c_k]].reshape(-1))
    # entries: tokens by first byte from the component's entry walk
    if ent_i.size:
        # entries of templates cached without them (one copy of the template walks for all)
        for sig, rels in missing.items():
            for rel, ent in zip(rels, _entries(copies[sig][0], rels, vocab)):
                needed[("entry", sig, rel)] = ent
                built += 1
                _remember(cache, ("entry", sig, rel), ent)
        for (sig, rel, m), members in groups.items():
            ekey = ("entry-mask", sig, rel, m)
            em = cache.get(ekey)
            if em is None:
                em = _entry_mask(needed[("entry", sig, rel)], m, vocab.size)
                _remember(cache, ekey, em)
            qs = np.array([q for q, _ in members], dtype=np.int64)
            # [members, n + K]: each copy's relative state / exit -> real state
            dmaps = np.stack([comps[ci].dmap for _, ci in members])
            n_rel = comps[members[0][1]].states.size
            J = int(em.dest.size)
            if J:
                rows.append(em.rows)
                row_hash.append(em.row_hash)
                r_src.append(np.repeat(qs, J))
                r_dst.append(dmaps[:, em.dest].reshape(-1))
                r_id.append(np.tile(n_rows + np.arange(J, dtype=np.int64), qs.size))
                n_rows += J
            if em.c_b.size:
                c_start.append(np.repeat(qs, em.c_b.size))
                c_byte.append(np.tile(em.c_b, qs.size))
                c_state.append(single[dmaps[:, n_rel + em.c_k]].reshape(-1))
    start_of = np.arange(S + n_shadow, dtype=np.int64)
    start_of[wf] = plain_of
    subsets.expand_singletons(single)
    # Estimated byte-trie walk of the plain starts: for each, the trie nodes under the first
    # bytes it can read (an upper bound: deeper bytes may die).  The class trie's build costs
    # about one full walk.
    # (per class: the nodes under its bytes; an [S', classes] table, not [S', 256])
    cls_size = np.bincount(subsets.class_of_byte, weights=_root_subtree_sizes(vocab),
                           minlength=subsets.num_classes)
    per_first = (subsets.table[single[wf]] != 0) @ cls_size  # float64 [S']
    est = int(per_first.sum())
    bar = _CLASS_TRIE_WORK * vocab.trie.num_nodes
    use_class = (_USE_CLASS_TRIE and est >= bar
                 and _plain_walk_estimate(subsets, single[wf], vocab) >= bar)
    if use_class:
        trie = _cached_class_trie(vocab, subsets)
        node_cls = trie.cls
    else:
        trie = vocab.trie
        node_cls = None
    starts = [wf]
    nodes = [np.zeros(wf.size, dtype=np.int64)]
    states = [single[wf]]
    if c_start:
        cs, cb, cd = np.concatenate(c_start), np.concatenate(c_byte), np.concatenate(c_state)
        if use_class:
            cb = trie.byte_node[cb]
            ok = cb >= 0
            cs, cb, cd = cs[ok], cb[ok], cd[ok]
        if cs.size:
            nn, ns = trie.num_nodes, len(subsets.members)
            k = sorted_unique((cs * nn + cb) * ns + cd)
            cs, cb, cd = k // ns // nn, k // ns % nn, k % ns
        starts.append(cs)
        nodes.append(cb)
        states.append(cd)
    f_s, f_n, f_d = np.concatenate(starts), np.concatenate(nodes), np.concatenate(states)
    # Walk the frontier in chunks of starts so that each chunk's records stay within memory:
    # records are bounded by the trie nodes below each entry (for a plain start, below the first
    # bytes it reads).  SQL "over" grammar of llguidance's lark.lark: 172M records in one walk.
    chunk_of = None  # one chunk
    if f_s.size > _DEDUP_MIN:
        below = _subtree_sizes(trie) - 1
        est_e = below[f_n].astype(np.float64)
        root = f_n == 0
        est_root = np.zeros(S + n_shadow, dtype=np.float64)
        est_root[wf] = per_first
        est_e[root] = est_root[f_s[root]]
        per_start = np.bincount(f_s, weights=est_e, minlength=S + n_shadow)
        chunk_of_start = (np.cumsum(per_start) - per_start) // _WALK_RECORDS
        chunk_of = chunk_of_start[f_s].astype(np.int64)
    final = np.zeros(S, dtype=bool)
    final[list(nfa.finals)] = True
    G = trie.term_ptr.shape[0] - 1
    empty = np.zeros(0, dtype=np.int64)
    if S * S * max(G, 1) >= 2**62:
        raise OverflowError(f"automaton too large to lift: {S} byte states x {G} token groups")
    keys: list[np.ndarray] = []
    listed = 0
    steps = 0
    chunks = [0] if chunk_of is None else sorted_unique(chunk_of).tolist()
    for c in chunks:
        sel = np.nonzero(chunk_of == c)[0] if len(chunks) > 1 else slice(None)
        r_start, r_node, r_state, st = _walk(trie, node_cls, subsets, f_s[sel], f_n[sel], f_d[sel],
                                             dedup=True)
        steps = max(steps, st)
        sizes = _member_arrays(subsets)[0]
        n_exp = int(sizes[r_state].sum())
        if listed + n_exp > _EXPAND_LIMIT:
            # Too many (src, dst, group) triples to list: one packed row per distinct group set
            # of a (start, subset) pair instead, contributed to each member (_rows_by_subset).
            src_, dst_, rid, packed = _rows_by_subset(r_start, r_node, r_state, start_of,
                                                      subsets, trie, vocab.size)
            r_src.append(src_)
            r_dst.append(dst_)
            r_id.append(n_rows + rid)
            rows.append(packed)
            row_hash.append(_row_hashes(packed, np.arange(packed.shape[0], dtype=np.int64)))
            n_rows += packed.shape[0]
        else:
            listed += n_exp
            idx, p_dst = _expand_members(subsets, r_state)
            p_src = start_of[r_start[idx]]
            # One int64 key per (src, dst, group) and a plain sort (np.lexsort on three keys is
            # ~15x slower: 22 ms vs 1.4 ms for 130k entries); unique: entries may repeat.
            keys.append(sorted_unique((p_src * S + p_dst) * G + r_node[idx]))
    key = (keys[0] if len(keys) == 1 else sorted_unique(np.concatenate(keys))) if keys else empty
    pair = key // G
    pair_src, pair_dst, pair_grp = pair // S, pair % S, key % G
    return LiftedEdges(
        S, final, pair_src, pair_dst, pair_grp, trie.term_ptr, trie.term_tokens,
        subsets.expanded, steps,
        np.concatenate(r_src) if r_src else empty,
        np.concatenate(r_dst) if r_dst else empty,
        np.concatenate(r_id) if r_id else empty,
        np.concatenate(rows) if rows else np.zeros((0, W), dtype=np.uint32),
        len(comps), built,
        np.concatenate(row_hash) if row_hash else np.zeros(0, dtype=np.uint64),
    )


# Above this many (src, dst, token group) triples the plain walk's result is packed per
# (start, subset) instead of listed per triple.  Spider SQL "over" on Llama-3: 64M walk records
# would list 144M triples (> 9 GiB in the sort); they are 21M distinct (start, subset, group)
# entries of 91k (start, subset) pairs.  JSON Schemas stay far below (GitHub-medium max ~3M).
_EXPAND_LIMIT = 20_000_000
# Records per walk chunk (an upper bound from subtree sizes; 3 int64 each, ~0.7 GB at 30M).
_WALK_RECORDS = 30_000_000
# Walk frontiers above this size are deduplicated per depth.  Spider SQL "over", Llama-3: 64M
# records of which 21M distinct (continuations reaching one node by several paths).
_DEDUP_MIN = 100_000
# rows packed per chunk (a float64 bincount of chunk x W words: 64 MB at V = 128k)
_PACK_CHUNK = 2048


def _pack_sets(node: np.ndarray, reps, term_ptr, term_tokens, V: int) -> np.ndarray:
    """uint32 [len(reps), ceil(V/32)]: row i holds the tokens ending at the trie nodes
    ``node[a:b]``, ``reps[i] = (a, b)``; packed in chunks of ``_PACK_CHUNK`` rows."""
    packed = np.empty((len(reps), (V + 31) // 32), dtype=np.uint32)
    for c0 in range(0, len(reps), _PACK_CHUNK):
        chunk = reps[c0:c0 + _PACK_CHUNK]
        a = np.array([r[0] for r in chunk], dtype=np.int64)
        cnt = np.array([r[1] - r[0] for r in chunk], dtype=np.int64)
        g = node[_ranges(a, cnt)]
        gsize = term_ptr[g + 1] - term_ptr[g]
        toks = term_tokens[_ranges(term_ptr[g], gsize)]
        local = np.repeat(np.repeat(np.arange(len(chunk), dtype=np.int64), cnt), gsize)
        packed[c0:c0 + len(chunk)] = pack_rows(local, toks, len(chunk), V)
    return packed


def _subtree_sizes(trie) -> np.ndarray:
    """int64 [N]: nodes in each node's subtree (itself included) of a BFS-numbered trie."""
    cp = trie.child_ptr
    N = int(cp.shape[0]) - 1
    levels = [(0, 1)]
    while True:
        lo, hi = levels[-1]
        a, b = int(cp[lo]), int(cp[hi])
        if a >= b:
            break
        levels.append((a, b))
    parent = np.repeat(np.arange(N, dtype=np.int64), np.diff(cp))  # parent of node j is [j-1]
    size = np.ones(N, dtype=np.int64)
    for (plo, phi), (lo, hi) in zip(reversed(levels[:-1]), reversed(levels[1:])):
        size[plo:phi] += np.bincount(parent[lo - 1:hi - 1] - plo, weights=size[lo:hi],
                                     minlength=phi - plo).astype(np.int64)
    return size


def _rows_by_subset(r_start, r_node, r_state, start_of, subsets: _SubsetTable, trie, V: int):
    """The walk's records (start, group node, subset) as shared rows.

    The token set read from ``start`` into subset X is the union of the groups recorded with X;
    every member of X gets that set.  Returns int64 arrays ``src``, ``dst``, ``row`` (one entry
    per (start, subset, member)) and the distinct sets packed, uint32 [D, ceil(V/32)].  An edge
    (src, dst) may get several rows (one per subset containing dst); the automaton ORs them.
    """
    ns = len(subsets.members)
    N = trie.term_ptr.shape[0] - 1
    if ns * max(N, 1) * (int(start_of.size) + 1) >= 2**62:
        raise OverflowError(f"automaton too large to lift: {ns} subsets x {N} token groups")
    key = sorted_unique((r_start * ns + r_state) * N + r_node)
    ss = key // N
    node = key % N
    del key
    first = _run_starts(ss)
    ends = np.append(first[1:], ss.size)
    set_of, reps = dedup_sets(node, first, ends)
    packed = _pack_sets(node, reps, trie.term_ptr, trie.term_tokens, V)
    pair = ss[first]
    idx, dst = _expand_members(subsets, pair % ns)
    return start_of[pair[idx] // ns], dst, set_of[idx], packed
