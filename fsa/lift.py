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

Periodic components (:mod:`.lift_periodic`).  A counted repetition (``maxLength: N``, ``{m,n}``)
is one component of N copies of a body; its template is one walk of the body's states over
copies ``0..C`` of it (C = the longest token in bytes), cached per vocabulary and body, and
every copy takes the body's token rows, renamed.  Llama-3, ``maxLength`` 1000: 14,003 template
starts walked (34 s) become 14 (about 2 s for the whole compile; bench/results/
compile_repetition.md).

Modules: :mod:`.arrays` (integer-array primitives), :mod:`.token_rows` (packed token-set rows,
their hashing and exact dedup),
:mod:`.lift_subsets` (the interned subset table), :mod:`.class_trie` (per-vocabulary tables,
class tries and the per-vocabulary caches), :mod:`.lift_components` (the component split and the
records of template and entry walks).  This module walks (the trie walk, the component walks)
and lifts (:func:`lift`); it re-exports the names other code imports from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arrays import arange_view as _arange
from .arrays import ranges as _ranges
from .arrays import run_starts as _run_starts
from .arrays import sorted_unique
from .arrays import stable_argsort as stable_argsort
from .class_trie import (
    _byte_nodes_of,
    _cached_class_trie,
    _ClassTrie,
    _depth2_pairs,
    _depth2_subtree_sizes,
    _first_byte_of_node,
    _first_byte_of_token,
    _remember,
    _root_subtree_sizes,
    _subtree_sizes,
)
from .class_trie import _class_trie as _class_trie
from .class_trie import prepare as prepare
from .errors import LiftSizeError
from .lift_budget import charge, current_budget, lift_budget, release
from .lift_components import (
    _ALL_BYTES,
    _Component,
    _components,
    _crossings,
    _Entry,
    _entry_mask,
    _Template,
    _template_of,
)
from .lift_periodic import body_component, expand_template, merge_templates, periodic_structure
from .lift_subsets import (
    _edge_arrays,
    _expand_members,
    _expand_missing,
    _member_arrays,
    _SubsetTable,
)
from .nfa import ByteNFA, byte_classes, finalize
from .progress import report
from .token_rows import SparseRows, _new_rows, _pack_sets, _row_hashes, dedup_sets, pack_rows
from .token_rows import dedup_rows as dedup_rows
from .token_rows import take_rows as take_rows
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
    periodic: int = 0  # components lifted from one walk of a periodic body (.lift_periodic)


# The plain walk uses a class trie once its estimated byte-trie walk (the two-level bound of
# _plain_walk_estimate) exceeds this many walks of the whole trie.  Building a class trie over
# Llama-3 costs ~30 ms (one pass over 275k nodes plus ~2 ms of fixed work); a byte walk costs
# ~16 ns per estimated node (Github_medium o11670: estimate 2.1M, byte walk 34 ms, class trie
# 30 ms + 18 ms walk; o10618: 0.73M, 15 ms vs 30 + 10 ms; measured here, 2 cores busy).
_USE_CLASS_TRIE = True
_CLASS_TRIE_WORK = 3.0


# starts counted per chunk by _plain_walk_estimate(stop_at=...)
_ESTIMATE_CHUNK = 4096


def _plain_walk_estimate(subsets: _SubsetTable, start_sets: np.ndarray,
                         vocab: TokenVocabulary, stop_at: int | None = None) -> int:
    """Byte-trie nodes a plain walk from the subsets ``start_sets`` can touch, bounded below the
    second byte: for each start, each readable first byte b counts 1, and each second byte b2
    readable after it counts the whole subtree of (b, b2).

    A literal key (``"name"``) reads one byte per state, so its walk dies within a level or two
    where a first-byte bound counts every token starting with ``n`` (~10k Llama-3 nodes).
    Llama-3, 23 Github_medium schemas with warm component caches: the first-byte bound chose
    the class trie for most; with this bound the median compile went 60 -> 41 ms (2 cores busy).
    ``stop_at``: return as soon as the count reaches it (the starts are counted in chunks; the
    count returned is then a lower bound >= ``stop_at``: Kubernetes kb_1004's 130k starts
    took 0.16 s to count in full).  Mutates ``subsets`` (expands the rows of the subsets
    reached by one byte)."""
    one = _depth2_subtree_sizes(vocab)[0]
    b1, b2, size2 = _depth2_pairs(vocab)
    cob = subsets.class_of_byte
    C = subsets.num_classes
    # per class: first-byte nodes; per pair of classes: the depth-2 subtree sizes summed over
    # their bytes (one bincount over the ~10^4 two-byte prefixes; a [C, 256] x [256, 256]
    # product took ~0.6 ms)
    cnt1 = np.bincount(cob, weights=one, minlength=C)
    sub_cc = np.bincount(cob[b1] * C + cob[b2], weights=size2, minlength=C * C).reshape(C, C)
    total = 0
    step = start_sets.size if stop_at is None else _ESTIMATE_CHUNK
    for i in range(0, start_sets.size, max(step, 1)):
        nxt = subsets.table[start_sets[i:i + step]]  # [chunk, C]
        s_idx, c_idx = np.nonzero(nxt > 0)
        t = nxt[s_idx, c_idx]
        _expand_missing(subsets, t)
        live2 = subsets.table[t] != 0  # [pairs, C]
        total += int(cnt1[c_idx].sum() + (sub_cc[c_idx] * live2).sum())
        if stop_at is not None and total >= stop_at:
            break
    return total


def _degrees(trie) -> tuple[np.ndarray, np.ndarray]:
    """(children int64 [N], whether tokens end bool [N]) per node of ``trie``, kept on the trie
    (a vocabulary's tries are walked once per chunk of every lift: one gather per step instead
    of two gathers and a subtraction over the frontier)."""
    got = trie.__dict__.get("_walk_degrees")
    if got is None:
        got = (np.diff(trie.child_ptr), np.diff(trie.term_ptr) > 0)
        object.__setattr__(trie, "_walk_degrees", got)  # a cache, not a field (frozen tries)
    return got


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
    nchild, has_term = _degrees(trie)
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
            i0, d0 = np.repeat(i0, cnt), np.repeat(nxt[i0, k0].astype(np.int64), cnt)
            o = np.argsort(i0 * (r1 - r0) + j0, kind="stable")
            s0, c0, d0 = starts[i0[o]], r0 + j0[o], d0[o]
            starts, node, dstate = starts[n0:], node[n0:], dstate[n0:]
        else:
            s0 = None
        cs = child_ptr[node]
        counts = nchild[node]
        total = int(counts.sum())
        if total == 0 and s0 is None:
            break
        # children of every frontier entry, contiguous in the BFS-numbered trie
        child = np.repeat(cs - (np.cumsum(counts) - counts), counts)
        child += _arange(total)
        src_state = np.repeat(dstate, counts)
        _expand_missing(subsets, src_state)
        cc = node_cls[child] if node_cls is not None else subsets.class_of_byte[trie.byte[child]]
        nd = subsets.table[src_state, cc]  # int32 subset ids; the walk's arrays are int64
        keep = nd != 0
        starts = np.repeat(starts, counts)[keep]
        node = child[keep]
        dstate = nd[keep].astype(np.int64)
        if s0 is not None:
            starts = np.concatenate([s0, starts])
            node = np.concatenate([c0, node])
            dstate = np.concatenate([d0, dstate])
        if dedup and starts.size > _DEDUP_MIN:
            # continuations of one start met at one node with one subset: walk them once (keys
            # as bit fields: shifts and masks instead of int64 divisions, same sorted order)
            bn = max(trie_nodes - 1, 1).bit_length()
            bd = max(len(subsets.members) - 1, 1).bit_length()
            if int(starts.max()).bit_length() + bn + bd <= 62:
                k = sorted_unique((starts << bn | node) << bd | dstate)
                if k.size < starts.size:
                    dstate = k & ((1 << bd) - 1)
                    node = (k >> bd) & ((1 << bn) - 1)
                    starts = k >> (bn + bd)
        # the frontier (3 int64 each) is transient: checked against what is left; the records
        # kept are charged (lift_budget)
        _check_frontier(int(starts.size))
        if visits:
            charge(24 * int(starts.size), f"trie-walk records at depth {steps}")
            rs.append(starts)
            rn.append(node)
            rd.append(dstate)
        else:
            term = has_term[node]
            if term.any():
                charge(24 * int(np.count_nonzero(term)), f"trie-walk records at depth {steps}")
                rs.append(starts[term])
                rn.append(node[term])
                rd.append(dstate[term])
    empty = np.zeros(0, dtype=np.int64)
    if not rs:
        return empty, empty, empty, steps
    return np.concatenate(rs), np.concatenate(rn), np.concatenate(rd), steps


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
                     template: bool = True,
                     starts: int | None = None) -> tuple[_Template | None, list[_Entry]]:
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
    same either way.  ``starts``: int64, the relative states the template walks from (default:
    all; a periodic body's, or the states before it, :mod:`.lift_periodic`)."""
    n = int(comp.states.size)
    K = int(comp.targets.size)
    x = n + K
    R = len(rels)
    T = ByteNFA(x + R, 0, frozenset(),
                comp.edges + tuple((x + i, _ALL_BYTES, r) for i, r in enumerate(rels)))
    # the component's own byte classes: x reads every class, the dead one (bytes no component
    # edge reads) included, and so the template's class trie serves the entries
    sub = _SubsetTable(T, classes=byte_classes(m for _, m, _ in comp.edges))
    # starts 0..n0-1: the template's (relative states st); n0 + i: rel i's
    st = np.arange(n, dtype=np.int64) if starts is None else starts
    n0 = int(st.size) if template else 0
    single = sub.intern_singletons(n)[st[:n0]] if starts is not None else \
        sub.intern_singletons(n0)
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
        tmpl = _template_of(comp, ct, st[s_all[sel]], m_all[sel], node_all[sel], vocab)
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
    release(24 * int(vs.size))  # the walk records (charged in _walk) are rows and entries now
    return tmpl, out


# Periodic components (counted repetitions): one walk of the body for every copy.
_USE_PERIODIC = True


def _periodic_template(comp: _Component, rels: list[int], vocab: TokenVocabulary
                       ) -> tuple[_Template, list[_Entry]] | None:
    """The component's template from one walk of its periodic body (:mod:`.lift_periodic`),
    with the walks of the states before the body and the entry walks into ``rels``; None when
    it is not periodic.  The body walk is cached on ``vocab`` (equal bodies and exits share it:
    ``maxLength`` 50 and 1000 walk once); mutates ``vocab``'s private memo."""
    per = periodic_structure(comp)
    if per is None:
        return None
    C = max(1, int(vocab.trie.max_depth))  # a token crosses at most one copy per byte
    cache = vocab._memo.setdefault("lift_templates", {})
    key = ("periodic", per.key, C)
    tmb = cache.get(key)
    if tmb is None:
        tmb = _component_walks(body_component(per, C), [], vocab,
                               starts=np.arange(per.P, dtype=np.int64))[0]
        _remember(cache, key, tmb)
    tm = expand_template(per, int(comp.states.size), tmb, C)
    ents: list[_Entry] = []
    if per.outside.size:  # the states before the body, walked as they are, beside the entries
        pre, ents = _component_walks(comp, rels, vocab, starts=per.outside)
        tm = merge_templates(tm, pre)
    elif rels:
        ents = _entries(comp, rels, vocab)
    return tm, ents


# Components: walk each distinct template once (cached per vocabulary) instead of every copy.
# Llama-3, first 8 GlaiveAI schemas: lift 9.7 s -> see bench/results/json_schema_compile_time.md.
_USE_COMPONENTS = True


def _check_frontier(size: int) -> None:
    """Raise :class:`LiftSizeError` when a walk frontier of ``size`` entries (3 int64 each)
    would not fit in what is left of the lift's budget (:mod:`.lift_budget`)."""
    b = current_budget()
    if b is not None and b.used + 24 * size > b.limit:
        raise LiftSizeError(f"a trie-walk frontier of {size:,} entries", b.used + 24 * size,
                            b.limit)


def lift(nfa: ByteNFA, vocab: TokenVocabulary) -> LiftedEdges:
    """Lift a byte NFA to token-level edges; see the module docstring.

    ``nfa`` is finalized first (epsilon-free, trimmed).  Returns a :class:`LiftedEdges`.
    Mutates ``vocab``'s private memo (class tries and component walks are cached there).
    Raises :class:`~.errors.LiftSizeError` past the lift's memory budget
    (:mod:`.lift_budget`; charged to an enclosing :func:`~.lift_budget.lift_budget`, else to
    a new one of :data:`~.lift_budget.MAX_LIFT_BYTES`).
    """
    with lift_budget():
        return _lift(nfa, vocab)


def _lift(nfa: ByteNFA, vocab: TokenVocabulary) -> LiftedEdges:
    report("lift: finalizing the byte NFA")
    nfa = finalize(nfa)
    S = nfa.num_states
    W = (vocab.size + 31) // 32
    report(f"lift: components of {S:,} byte states")
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
    report("lift: state-set table")
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
    # crossings out of components, per template (its relative starts, first bytes, exits) with
    # the copies' state maps: expanded once the trie is chosen (_crossings)
    c_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    built = 0
    periodic = 0
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
    for k, comp in enumerate(comps):
        report("lift: component walks", k, len(comps))
        if comp.sig not in local:
            tm = cache.get(comp.sig)
            if tm is None:
                rels = missing.pop(comp.sig, [])
                got = _periodic_template(comp, rels, vocab) if _USE_PERIODIC else None
                if got is None:
                    tm, ents = _component_walks(comp, rels, vocab)
                    _remember(cache, comp.sig, tm)
                else:  # rebuilt from the cached body walk: not kept (its arrays grow with n)
                    tm, ents = got
                    periodic += 1
                built += 1 + len(rels)
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
        c_parts.append((dm, dm, tm.c_r, tm.c_b, n + tm.c_k))
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
                c_parts.append((qs[:, None], dmaps, np.zeros_like(em.c_b), em.c_b,
                                n_rel + em.c_k))
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
                 and _plain_walk_estimate(subsets, single[wf], vocab, stop_at=bar) >= bar)
    if use_class:
        trie = _cached_class_trie(vocab, subsets)
        node_cls = trie.cls
    else:
        trie = vocab.trie
        node_cls = None
    starts = [wf]
    nodes = [np.zeros(wf.size, dtype=np.int64)]
    states = [single[wf]]
    if c_parts:
        cs, cb, cd = _crossings(c_parts, single, trie.byte_node if use_class else None)
        if cs.size:
            nn, ns = trie.num_nodes, len(subsets.members)
            k = sorted_unique((cs * nn + cb) * ns + cd)
            cs, cb, cd = k // ns // nn, k // ns % nn, k % ns
        starts.append(cs)
        nodes.append(cb)
        states.append(cd)
    f_s, f_n, f_d = np.concatenate(starts), np.concatenate(nodes), np.concatenate(states)
    # Walk the frontier in chunks of source states so that each chunk's records stay within
    # memory: records are bounded by the trie nodes below each entry (for a plain start, below
    # the first bytes it reads).  SQL "over" grammar of llguidance's lark.lark: 172M records in
    # one walk.  A chunk is a range of *source* states (a shadow start counts as its plain
    # state), so the chunks' (src, dst, group) keys are disjoint and ascending: their
    # concatenation is sorted and unique with no final sort (Kubernetes kb_1004: ~0.4-0.8 s of
    # sorting 9.2M int64 keys, four fresh 73 MB arrays, before).
    chunk_of = None  # one chunk
    if f_s.size > _DEDUP_MIN:
        below = _subtree_sizes(trie) - 1
        est_e = below[f_n].astype(np.float64)
        root = f_n == 0
        est_root = np.zeros(S + n_shadow, dtype=np.float64)
        est_root[wf] = per_first
        est_e[root] = est_root[f_s[root]]
        src_of = start_of[f_s]
        per_src = np.bincount(src_of, weights=est_e, minlength=S)
        chunk_of_src = (np.cumsum(per_src) - per_src) // _WALK_RECORDS
        chunk_of = chunk_of_src[src_of].astype(np.int64)
    final = np.zeros(S, dtype=bool)
    final[list(nfa.finals)] = True
    G = trie.term_ptr.shape[0] - 1
    empty = np.zeros(0, dtype=np.int64)
    if S * S * max(G, 1) >= 2**62:
        raise LiftSizeError(f"keys of {S:,} byte states x {G:,} token groups (over 2^62)",
                            S * S * max(G, 1), 2**62)
    # key = (src, dst, group) in mixed radix; bit fields where they fit in 62 bits (shifts and
    # masks: kb_1004's ~15M keys split in ~20 ms instead of ~0.2 s of int64 divisions), else
    # multiplied out (same order either way: both sort as (src, dst, group))
    bs, bg = max(S - 1, 1).bit_length(), max(G - 1, 1).bit_length()
    shifts = 2 * bs + bg <= 62
    keys: list[np.ndarray] = []
    seen_rows: dict[int, list[tuple[int, int, int]]] = {}  # see _new_rows
    listed = 0
    steps = 0
    if chunk_of is None:
        bounds = [0, f_s.size]
        by_chunk = None
    else:  # the entries of chunk i: by_chunk[bounds[i]:bounds[i + 1]] (one sort, not a pass
        # over all entries per chunk: 66 ms for kb_1004's 54 chunks, line-profiled)
        by_chunk = np.argsort(chunk_of, kind="stable")
        bounds = np.flatnonzero(np.diff(chunk_of[by_chunk], prepend=-1, append=-1)).tolist()
    chunks = len(bounds) - 1
    for ci in range(chunks):
        report("lift: vocabulary walk", ci, chunks)
        sel = slice(None) if chunks == 1 else by_chunk[bounds[ci]:bounds[ci + 1]]
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
            h = _row_hashes(packed, np.arange(packed.shape[0], dtype=np.int64))
            gid, keep = _new_rows(packed, h, rows, seen_rows, n_rows)
            r_src.append(src_)
            r_dst.append(dst_)
            r_id.append(gid[rid])
            if keep.size < packed.shape[0]:  # rows an earlier chunk already holds: dropped
                release(4 * W * int(packed.shape[0] - keep.size))
                packed, h = packed[keep], h[keep]
            rows.append(packed)
            row_hash.append(h)
            n_rows += packed.shape[0]
        else:
            listed += n_exp
            idx, p_dst = _expand_members(subsets, r_state)
            p_src = start_of[r_start[idx]]
            # One int64 key per (src, dst, group) and a plain sort (np.lexsort on three keys is
            # ~15x slower: 22 ms vs 1.4 ms for 130k entries); unique: entries may repeat.
            keys.append(sorted_unique(((p_src << bs | p_dst) << bg | r_node[idx]) if shifts
                                      else (p_src * S + p_dst) * G + r_node[idx]))
        # this chunk's walk records are rows or keys now (lift_budget: charged in _walk)
        release(24 * int(r_start.size))
        del r_start, r_node, r_state
    # chunks are ascending ranges of sources (above): their sorted keys concatenate in order
    key = (keys[0] if len(keys) == 1 else np.concatenate(keys)) if keys else empty
    del keys
    if shifts:
        pair_src, pair_dst = key >> (bs + bg), (key >> bg) & ((1 << bs) - 1)
        pair_grp = key & ((1 << bg) - 1)
    else:
        pair = key // G
        pair_src, pair_dst, pair_grp = pair // S, pair % S, key % G
    if len(rows) > 1:
        charge(4 * W * sum(int(r.shape[0]) for r in rows), "the lift's token rows, concatenated")
    return LiftedEdges(
        S, final, pair_src, pair_dst, pair_grp, trie.term_ptr, trie.term_tokens,
        subsets.expanded, steps,
        np.concatenate(r_src) if r_src else empty,
        np.concatenate(r_dst) if r_dst else empty,
        np.concatenate(r_id) if r_id else empty,
        np.concatenate(rows) if rows else np.zeros((0, W), dtype=np.uint32),
        len(comps), built,
        np.concatenate(row_hash) if row_hash else np.zeros(0, dtype=np.uint64),
        periodic,
    )


# Above this many (src, dst, token group) triples the plain walk's result is packed per
# (start, subset) instead of listed per triple.  Spider SQL "over" on Llama-3: 64M walk records
# would list 144M triples (> 9 GiB in the sort); they are 21M distinct (start, subset, group)
# entries of 91k (start, subset) pairs.  JSON Schemas stay far below (GitHub-medium max ~3M).
_EXPAND_LIMIT = 20_000_000
# Records per walk chunk (an upper bound from subtree sizes; 3 int64 each, ~0.1 GB at 4M).
# Smaller chunks keep each step's arrays small enough for the allocator to reuse freed memory
# instead of mapping fresh pages: Kubernetes kb_1004-1011, 30M -> 4M: 60-160k -> 36-130k page
# faults and 0.2-0.9 s less per compile on this VM, where a fresh page costs ~10 us and ~30 us
# after the process idled (measured here); schemas below 4M records walk in one chunk as before.
_WALK_RECORDS = 4_000_000
# Walk frontiers above this size are deduplicated per depth.  Spider SQL "over", Llama-3: 64M
# records of which 21M distinct (continuations reaching one node by several paths).
_DEDUP_MIN = 100_000


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
        raise LiftSizeError(f"keys of {ns:,} subsets x {N:,} token groups (over 2^62)",
                            ns * max(N, 1) * (int(start_of.size) + 1), 2**62)
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
