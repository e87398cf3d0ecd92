"""Per-vocabulary tables of the lift (see :mod:`.lift`), class tries, and the vocabulary caches.

Per-vocabulary tables, cached in ``vocab._memo`` (:func:`prepare` builds them up front): each
byte-trie node's and each token's first byte, and the byte-trie nodes under each first byte and
under each two-byte prefix (read by the lift's walk-size estimates).  Per trie:
:func:`_subtree_sizes` (each node's subtree size, any BFS-numbered trie) and :func:`_token_node`
(the node of each listed token, cached per trie).

Class tries (:func:`_class_trie`): the vocabulary trie quotiented by an NFA's byte classes.
Tokens that read the same sequence of byte classes behave identically in every state of the
automaton, so they share one node (a :class:`_ClassTrie` node lists all their ids); a branch
entering the dead class 0 (bytes no edge reads) is dropped with its subtree, since no state can
read it.  :func:`_byte_nodes_of` maps class-trie nodes back to their byte-trie nodes.

Caches: class tries (:func:`_cached_class_trie`, one per byte partition) and the lift's
component and entry walks are kept in per-vocabulary dicts capped by their total array bytes,
the oldest entries evicted first (:func:`_remember`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .arrays import ranges as _ranges
from .arrays import stable_argsort
from .arrays import unique_inverse as _unique_inverse
from .lift_subsets import _SubsetTable
from .vocabulary import TokenVocabulary

__all__ = ["prepare"]


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
