"""Components of a byte NFA for the lift, and the records of their walks (see :mod:`.lift`).

A JSON Schema repeats the same loop many times (the content of every ``"type": "string"`` value,
every number's digit loop).  :func:`_components` cuts the byte NFA into *components*: strongly
connected pieces of the graph without the single-ASCII-byte edges (:func:`_is_cut`: ``"``,
``,``, ``\\`` ...), and acyclic cut-free pieces of at least ``_MIN_CHAIN`` states (chains); each
also takes in its satellites, the free states entered only from it and leaving only into it
(:func:`_absorb_satellites`: escape sequences inside a JSON string).  Each copy is numbered
canonically (:class:`_Component`), so that isomorphic copies have equal ``sig``; the component
with its outgoing edges redirected to placeholder sinks (exit k: relative state ``n + k``) is a
*template*, walked once per vocabulary and shape and reused for every copy by renaming states.

Records of those walks (made by :func:`~.lift._component_walks`, cached per vocabulary):
:class:`_Template` (:func:`_template_of`), the template's token rows per (relative source,
destination) and the continuations that leave it by an exit at some byte-trie node;
:class:`_Entry`, the tokens reaching each state from one entry state by any first byte, listed
by first byte; :class:`_EntryMask` (:func:`_entry_mask`), the part of an entry walk that an
outside edge reading the byte mask m contributes (its tokens whose first byte is in m).
:func:`_crossings`: where the copies' tokens cross out of their components (the lift's walk
frontier).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .arrays import first_of_distinct, sorted_unique
from .arrays import ranges as _ranges
from .arrays import run_starts as _run_starts
from .class_trie import _byte_nodes_of
from .lift_subsets import _edge_arrays
from .nfa import ByteNFA
from .token_rows import _pack_sets, _row_hashes, dedup_sets, pack_rows
from .vocabulary import TokenVocabulary

__all__: list[str] = []


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


# below this many edges the worklist version is faster (each frontier round of the array version
# costs ~50 us of numpy calls, and a literal key's chain is one round per byte); above it the
# array version wins: Kubernetes kb_1004's 500k edges, 0.45 + 0.31 s -> 0.08 + 0.08 s
_ABSORB_ARRAYS_EDGES = 20_000


def _absorb_satellites(region: list[int], src: np.ndarray, dst: np.ndarray, S: int,
                       start: int) -> list[int]:
    """Satellites joined to their region (see :func:`_components`): ``region`` per state
    (-1: free) -> the same with satellites joined.  Not mutated.

    Two fixpoints: a free state other than ``start`` whose predecessors (one per edge) all lie
    in one region joins it (least fixpoint); then a joined state with a successor outside its
    region leaves it again (greatest fixpoint).  Both are unique, so the two implementations
    (a worklist below ``_ABSORB_ARRAYS_EDGES`` edges, frontier rounds on arrays above) return
    the same list."""
    if src.size >= _ABSORB_ARRAYS_EDGES:
        return _absorb_satellites_arrays(region, src, dst, S, start)
    return _absorb_satellites_worklist(region, src, dst, S, start)


def _absorb_satellites_worklist(region: list[int], src: np.ndarray, dst: np.ndarray, S: int,
                                start: int) -> list[int]:
    """:func:`_absorb_satellites` with Python worklists (small NFAs)."""
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
    grown = _join_worklist([q for q in range(S) if rl[q] >= 0], rl, seen_r, seen_n, npred,
                           sptr, succs, start)
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


def _csr(keys: np.ndarray, values: np.ndarray, S: int) -> tuple[np.ndarray, np.ndarray]:
    """``values`` grouped by ``keys`` (stable): (row pointers int64 [S + 1], grouped values)."""
    order = np.argsort(keys, kind="stable")
    return np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=S))]), values[order]


def _neighbours(f: np.ndarray, ptr: np.ndarray, adj: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """For states ``f``: (index into ``f``, neighbour) over every edge of each, int64 [k] each."""
    cnt = ptr[f + 1] - ptr[f]
    return np.repeat(np.arange(f.size), cnt), adj[_ranges(ptr[f], cnt)]


def _absorb_satellites_arrays(region: list[int], src: np.ndarray, dst: np.ndarray, S: int,
                              start: int) -> list[int]:
    """:func:`_absorb_satellites` by frontier rounds on arrays: the states that joined in one
    round are the sources of the next; work O(edges) in numpy calls, rounds = the longest
    satellite chain."""
    rl = np.array(region, dtype=np.int64)
    npred = np.bincount(dst, minlength=S)
    sptr, succ = _csr(src, dst, S)
    pptr, pred = _csr(dst, src, S)
    seen_r = np.full(S, -1, dtype=np.int64)  # region of a free state's predecessors; -2: several
    seen_n = np.zeros(S, dtype=np.int64)  # how many of its predecessors (edges) are in it
    grown = []
    frontier = np.flatnonzero(rl >= 0)
    while frontier.size:
        if frontier.size < _ABSORB_NARROW:
            grown.append(_join_tail(frontier, rl, seen_r, seen_n, npred, sptr, succ, start))
            break
        i, x = _neighbours(frontier, sptr, succ)
        r = rl[frontier][i]
        ok = (rl[x] == -1) & (x != start) & (seen_r[x] != -2)
        x, r = x[ok], r[ok]
        if not x.size:
            break
        o = np.lexsort((r, x))  # per target x: the regions reaching it this round
        x, r = x[o], r[o]
        first = _run_starts(x)
        ux = x[first]
        last = np.concatenate([first[1:], [x.size]])
        rmin, rmax = r[first], r[last - 1]
        prev = seen_r[ux]
        conflict = (rmin != rmax) | ((prev >= 0) & (prev != rmin))
        seen_r[ux] = np.where(conflict, -2, rmin)
        seen_n[ux] += np.where(conflict, 0, last - first)
        join = ~conflict & (seen_n[ux] == npred[ux])
        frontier = ux[join]
        rl[frontier] = rmin[join]
        grown.append(frontier)
    g = np.concatenate(grown) if grown else np.empty(0, dtype=np.int64)
    if g.size:
        is_grown = np.zeros(S, dtype=bool)
        is_grown[g] = True
        i, x = _neighbours(g, sptr, succ)
        bad = np.zeros(g.size, dtype=bool)
        np.logical_or.at(bad, i, rl[x] != rl[g][i])
        leave = g[bad]
        while leave.size:  # a leaver's grown predecessors now have a successor outside
            if leave.size < _ABSORB_NARROW:
                _leave_tail(leave, rl, is_grown, pptr, pred)
                break
            is_grown[leave] = False
            rl[leave] = -1
            _, p = _neighbours(leave, pptr, pred)
            leave = sorted_unique(p[is_grown[p]])
    return rl.tolist()


# A frontier round of the array version costs ~70 us of numpy calls; below this many states the
# rest of the fixpoint runs as a worklist (Python, ~1 us a state).  A string's maxLength 1000
# in the every-serialization language is a chain: 12k rounds of 1-2 states each, 0.88 s of
# rounds (measured here); as a worklist tail ~20 ms.
_ABSORB_NARROW = 32


def _join_tail(work: np.ndarray, rl: np.ndarray, seen_r: np.ndarray, seen_n: np.ndarray,
               npred: np.ndarray, sptr: np.ndarray, succ: np.ndarray, start: int) -> np.ndarray:
    """The join fixpoint of :func:`_absorb_satellites_arrays` finished by a worklist from
    ``work`` (states that joined but whose out-edges are not counted yet), as
    :func:`_absorb_satellites_worklist` does it.  Mutates ``rl``, ``seen_r``, ``seen_n``;
    returns the states that joined here (int64)."""
    rl_l, sr, sn = rl.tolist(), seen_r.tolist(), seen_n.tolist()
    joined = _join_worklist(work.tolist(), rl_l, sr, sn, npred.tolist(), sptr.tolist(),
                            succ.tolist(), start)
    rl[:], seen_r[:], seen_n[:] = rl_l, sr, sn
    return np.array(joined, dtype=np.int64)


def _join_worklist(todo: list[int], rl: list[int], seen_r: list[int], seen_n: list[int],
                   npred: list[int], sptr: list[int], succs: list[int], start: int) -> list[int]:
    """The join fixpoint as a worklist (Python lists): ``todo`` holds joined states whose
    out-edges are not counted yet (it grows); a free state other than ``start`` joins the
    region of its predecessors once all of them (one per edge) lie in that one region.  Mutates
    ``todo``, ``rl``, ``seen_r`` (-1: none seen, -2: several regions), ``seen_n``; returns the
    states that joined, in order."""
    joined: list[int] = []
    for p in todo:  # grows while iterating
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
                joined.append(x)
                todo.append(x)
    return joined


def _leave_tail(leave: np.ndarray, rl: np.ndarray, is_grown: np.ndarray, pptr: np.ndarray,
                pred: np.ndarray) -> None:
    """The leave fixpoint of :func:`_absorb_satellites_arrays` finished by a worklist from
    ``leave``: each leaver and, transitively, its grown predecessors become free.  Mutates
    ``rl`` and ``is_grown``."""
    ig, pp, pr = is_grown.tolist(), pptr.tolist(), pred.tolist()
    todo = leave.tolist()
    for x in todo:
        ig[x] = False
    out: list[int] = []
    for x in todo:  # grows while iterating
        out.append(x)
        for p in pr[pp[x]:pp[x + 1]]:
            if ig[p]:
                ig[p] = False
                todo.append(p)
    rl[out] = -1
    is_grown[:] = ig


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


def _crossings(parts, single: np.ndarray, byte_node: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where tokens cross out of components: int64 [k] (start state, trie node, subset id).

    ``parts``: per template (or entry group) ``(start_map [copies, *], exit_map [copies, *],
    rel_start [c], byte [c], exit_col [c])``: copy ``i``'s crossing ``j`` starts at
    ``start_map[i, rel_start[j]]``, reads ``byte[j]`` (the trie node under the root:
    ``byte_node[byte]`` on the class trie, where a node may be missing: -1, dropped) and lands
    in the singleton of ``exit_map[i, exit_col[j]]``.  Bytes of one class share a class-trie
    node, so each template's crossings are deduplicated before they are copied (Kubernetes
    kb_1004: 9.2M copied crossings were 1.6M distinct; 0.8 s of gathers and filters on the
    copies before)."""
    cs, cb, cd = [], [], []
    for start_map, exit_map, rel, byte, col in parts:
        node = byte if byte_node is None else byte_node[byte]
        ok = node >= 0
        if not ok.all():
            rel, node, col = rel[ok], node[ok], col[ok]
        if node.size > 1:
            first = first_of_distinct(rel, node, col)
            rel, node, col = rel[first], node[first], col[first]
        copies = exit_map.shape[0]
        cs.append(np.repeat(start_map[:, 0], rel.size) if start_map.shape[1] == 1
                  else start_map[:, rel].reshape(-1))
        cb.append(np.tile(node, copies))
        cd.append(single[exit_map[:, col]].reshape(-1))
    return np.concatenate(cs), np.concatenate(cb), np.concatenate(cd)
