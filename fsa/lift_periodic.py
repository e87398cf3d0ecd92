"""Periodic components: a counted repetition lifted from one walk of its body (see :mod:`.lift`).

A bounded repetition finalizes into a chain of copies of one body: ``maxLength: N`` is
``repeat(char, 0, N)``, N copies of a JSON string character's ~14 byte states (UTF-8
continuations, escapes), each copy's entry state linked to the next copy's by the character's
last byte.  A token read from copy c of a body state lands where the same token read from copy 0
lands, shifted by c copies; so one walk of the body's states over a long enough periodic
automaton (:func:`body_component`: copies ``0..C`` of the body, C = the longest token in bytes,
each copy's exits its own sinks) gives every copy's token rows by renaming
(:func:`expand_template`).  Llama-3, ``maxLength`` 300: 4,203 template walks over the class trie
become 14, and the cost of a longer bound is index arithmetic.

Structure (:func:`periodic_structure`).  Over a component's relative states, with edges merged
per (source, destination) and keyed by mask (where one state reads one mask into several
states, by mask and a hash of the destination's next masks): copy 0 is the body ``B``, the
states reachable from an entry ``e0`` (one of the first states) and not from ``e1`` (a later
state reading the same masks), numbered breadth-first.  Body edges are ``(b, mask, b', dc)``:
into copy 0 (dc = 0) or into copy 1's entry (an edge to ``e1``: b' = 0, dc = 1).  Labels
``copy * P + b`` follow body edges from copy 0, each real out-edge matched to the body edge with
its key.  Every other out-edge of a labelled state is an *exit edge*: out of the component, into
a state the copies share (the state after a top-level string's closing quote), or on past a
copy where the structure breaks (the last copies, which ``finalize`` merges: labelling stops
before the first copy that breaks a condition below, then retries).  Live states left unlabelled
(before the body, after the copies) are walked as they are (:func:`~.lift._component_walks` from
those starts) and merged in (:func:`merge_templates`).

Exactness.  Let G be the infinite periodic automaton: copies 0, 1, ... of the body, and for each
body state b and each mask of an exit edge of any copy of b, an edge into a sink (copy, b,
mask).  R, the labelled states, is used only when (1) the labels are injective; (2) every edge
between labelled states that is not an exit edge is a body edge of G between their labels
(masks equal); (3) every G body edge between two labelled states is a real edge (R is an
induced subgraph: copies are cut only by missing states, as the last copy of ``repeat`` keeps
only its entry); (4) R is path-convex in G: no G path leaves R and comes back (checked over the
holes, the unlabelled (copy, b) up to the last labelled copy).  Then, treating the exit edges as
edges into sinks, a path from x reads w to labelled y iff G's path from label(x) does (G paths
never go back a copy, so a path between labelled states stays within the copies they span, and
by (4) within R), and by periodicity iff G's path from (0, b(x)) reads w to (c(y) - c(x), b(y)).
A token's edges from x are therefore the body walk's, shifted and restricted to labelled
destinations; a sink (c', b, mask) means the real exit edges with that mask of the state
labelled (c(x) + c', b): a token ending there is an edge to the exit edge's destination, one
going on is handed, at its trie node, to the ordinary walk from that destination (the
continuations of :mod:`.lift_components`), which is exact whatever the destination is.  A
token of at most C bytes crosses at most C copies, so copies ``0..C`` suffice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arrays import ranges as _ranges
from .lift_components import _Component, _Template

__all__: list[str] = []

# Components with fewer states are walked as they are (a JSON string loop has ~15 states).
_MIN_PERIODIC = 48
# Candidates tried for the first and for the second copy's entry state.
_TRIES = 3
# Steps of the future that tell apart the destinations of one state under one mask.
_FUTURE = 4


@dataclass(frozen=True)
class _Periodic:
    """A component seen as copies of a body (see :func:`periodic_structure`).

    ``P`` body states; ``body``: the body edges ``(b, mask, b', dc)``, sorted; ``kinds[b]``: the
    exit masks of body state b (sorted), numbered globally from ``koff[b]`` (``koff`` int64
    [P + 1]); ``lab`` int64 [n]: ``copy * P + b`` of each relative state (-1: a state without
    out-edges, not copied); per exit edge (an edge out of the component, or into a state
    without out-edges), int64 each: ``exit_kind`` its global kind, ``exit_src`` its relative
    source, ``exit_dst`` its destination (``n + k`` for exit k, else the relative state).
    ``key``: what identifies the body walk (equal keys, equal walks)."""

    P: int
    body: tuple
    kinds: tuple
    koff: np.ndarray
    lab: np.ndarray
    exit_kind: np.ndarray
    exit_src: np.ndarray
    exit_dst: np.ndarray
    outside: np.ndarray
    live: np.ndarray

    @property
    def key(self) -> tuple:
        return (self.P, self.body, self.kinds)

    @property
    def kind_b(self) -> np.ndarray:
        """int64 [J]: the body state of each global exit kind."""
        return np.repeat(np.arange(self.P, dtype=np.int64), np.diff(self.koff))

    def exit_index(self, J: int) -> tuple[np.ndarray, np.ndarray]:
        """The exit edges by (relative source y, global kind g): (ptr int64 [n * J + 1] over
        ``y * J + g``, the edges' indices in that order)."""
        n = int(self.lab.size)
        ek = self.exit_src * J + self.exit_kind
        ptr = np.zeros(n * J + 1, dtype=np.int64)
        if ek.size:
            ptr[1:] = np.cumsum(np.bincount(ek, minlength=n * J))
        return ptr, np.argsort(ek, kind="stable")


def periodic_structure(comp: _Component) -> _Periodic | None:
    """The component as copies of one body, or None when it is not (or not provably) one; see
    the module docstring for the conditions checked.  O(edges) Python steps per try."""
    n = int(comp.states.size)
    if n < _MIN_PERIODIC:
        return None
    live = np.zeros(n, dtype=bool)  # states with out-edges
    live[[r for r, _, _ in comp.edges]] = True
    out: list[dict[int, int]] = [{} for _ in range(n)]  # destination (r' or n + k) -> mask
    for r, m, d in comp.edges:
        o = out[r]
        o[d] = o.get(d, 0) | m
    # edges are matched by mask; where one state reads one mask into several states (the
    # surrogate escapes of every spelling: `\\uD` then `[89AB]` or `[CDEF]`; `\\u00` then
    # `6` or `7` for `a-z`), by mask and a hash of the destination's next masks
    keyed: list[dict] = []
    memo: dict[tuple[int, int], int] = {}

    def future(d: int, depth: int) -> int:
        """A hash of the masks read from d in the next ``depth`` steps (states unnamed)."""
        if d >= n or depth == 0:
            return -1
        h = memo.get((d, depth))
        if h is None:
            h = memo[(d, depth)] = hash(tuple(sorted(
                (m, future(d2, depth - 1)) for d2, m in out[d].items())))
        return h

    for o in out:
        ms = list(o.values())
        if len(set(ms)) == len(ms):
            keyed.append({m: d for d, m in o.items()})
            continue
        dup = {m for m in ms if ms.count(m) > 1}
        kd = {(m, future(d, _FUTURE)) if m in dup else m: d for d, m in o.items()}
        if len(kd) < len(o):
            return None
        keyed.append(kd)
    # candidates for the second copy's entry: the same masks into live states
    sig = [frozenset(m for d, m in o.items() if d < n and live[d]) for o in out]
    # the first copy's entry: state 0, or a state soon after it (`[A-Z][a-z]*` within a
    # length bound: the first character is not periodic); the second's: a later state with
    # the same masks
    for e0 in range(min(n, _TRIES)):
        if not live[e0]:
            continue
        tries = 0
        for e1 in range(e0 + 1, n):
            if sig[e1] != sig[e0] or not live[e1]:
                continue
            # a bad copy (the last copies of a chain, merged by finalize): up to the one before
            limit = n
            for _ in range(_TRIES):
                per = _try(out, keyed, live, n, e0, e1, limit)
                if not isinstance(per, int):
                    break
                limit = per - 1
                per = None
            if per is not None:
                return per
            tries += 1
            if tries >= _TRIES:
                break
    return None


def _edge_order(item: tuple) -> tuple[int, int]:
    """Sort key of a ``keyed`` item (key, ...): (mask, the destination's future hash or 0)."""
    k = item[0]
    return k if isinstance(k, tuple) else (k, 0)


def _mask(key) -> int:
    return key[0] if isinstance(key, tuple) else key


def _try(out, keyed, live: np.ndarray, n: int, e0: int, e1: int,
         limit: int) -> _Periodic | int | None:
    """The structure with copy 0 entered at ``e0``, copy 1 at ``e1`` and copies after
    ``limit`` left outside; None when there is none, or the first copy that breaks it (when
    it is at least 2)."""
    seen1 = {e1}  # reachable from e1: copy 1 and what the copies share
    work = [e1]
    for x in work:  # grows while iterating
        for d in out[x]:
            if d < n and d not in seen1:
                seen1.add(d)
                work.append(d)
    if e0 in seen1:
        return None
    # the body: reachable from e0 and not from e1, breadth-first, out-edges by key
    bidx = {e0: 0}
    B = [e0]
    for x in B:  # grows while iterating
        for _, d in sorted(keyed[x].items(), key=_edge_order):
            if d < n and d not in seen1 and d not in bidx:
                bidx[d] = len(B)
                B.append(d)
    P = len(B)
    n_live = int(np.count_nonzero(live))
    if 2 * P > n_live:
        return None
    # body edges by key: into copy 0 (dc 0) or copy 1's entry (dc 1); other keys are exits
    bl: list[dict] = [{} for _ in range(P)]
    for x in B:
        row = bl[bidx[x]]
        for key, d in keyed[x].items():
            if d == e1:
                row[key] = (0, 1)
            elif d in bidx:
                row[key] = (bidx[d], 0)
    # labels by following body edges from copy 0, each real edge matched by key
    lab = [-1] * n
    inv: dict[int, int] = {}
    for b, x in enumerate(B):
        lab[x] = b
        inv[b] = x
    queue = list(B)
    trunc: list[tuple[int, int]] = []  # (copy, label) of body edges a state lacks
    exits: list[tuple[int, int, int]] = []  # (source, mask, destination), labelled sources
    for x in queue:  # grows while iterating
        c, b = divmod(lab[x], P)
        bm = bl[b]
        for key, d in keyed[x].items():
            t = bm.get(key)
            # an exit edge: no body edge, or one out of the component or past ``limit`` (the
            # body goes on in the last copy of a minLength chain, but the chain stops)
            if t is None or d >= n or c + t[1] > limit:
                exits.append((x, _mask(key), d))
                continue
            tl = (c + t[1]) * P + t[0]
            ld = lab[d]
            if ld == -1:
                if tl in inv:
                    return _bad(c)  # (1): two states, one label
                lab[d] = tl
                inv[tl] = d
                queue.append(d)
            elif ld != tl:
                return _bad(c)  # (1): one state, two labels
        trunc.extend((c, (c + dc) * P + b2) for key, (b2, dc) in bm.items()
                     if keyed[x].get(key, n) >= n)
    bad = [c for c, t in trunc if t in inv]
    if bad:
        return _bad(min(bad))  # (3): a missing edge between two labelled states
    # live states no body edge reaches are walked as they are: a few, or it is not periodic
    outside = [x for x in range(n) if lab[x] < 0 and live[x]]
    if 2 * len(outside) > n_live:
        return None
    body = tuple(sorted((b, _mask(key), b2, dc) for b in range(P)
                        for key, (b2, dc) in bl[b].items()))
    hole = _crossed_hole(body, inv, P, max(lab) // P)
    if hole >= 0:
        return _bad(hole)  # (4)
    kinds_s: list[set[int]] = [set() for _ in range(P)]
    for r, m, _ in exits:
        kinds_s[lab[r] % P].add(m)
    kinds = tuple(tuple(sorted(k)) for k in kinds_s)
    koff = np.zeros(P + 1, dtype=np.int64)
    koff[1:] = np.cumsum([len(k) for k in kinds])
    pos = [{m: j for j, m in enumerate(k)} for k in kinds]
    exit_kind = np.array([koff[lab[r] % P] + pos[lab[r] % P][m] for r, m, _ in exits],
                         dtype=np.int64)
    exit_src = np.array([r for r, _, _ in exits], dtype=np.int64)
    exit_dst = np.array([d for _, _, d in exits], dtype=np.int64)
    return _Periodic(P, body, kinds, koff, np.array(lab, dtype=np.int64), exit_kind, exit_src,
                     exit_dst, np.array(outside, dtype=np.int64), live)


def _bad(c: int) -> int | None:
    """Copy c breaks the structure: retry up to the copy before it, if two copies remain."""
    return c if c >= 2 else None


def _crossed_hole(body: tuple, inv: dict[int, int], P: int, last: int) -> int:
    """The first copy with a hole on a path between labelled states, or -1 when the labelled
    states ``inv`` are path-convex in the periodic automaton: no hole (an unlabelled (copy, b)
    with copy <= ``last``) is both reachable from a labelled state and able to reach one.
    Paths never go back a copy, so holes past the last labelled copy cannot lie between two
    labelled states."""
    holes = [h for h in range((last + 1) * P) if h not in inv]
    if not holes:
        return -1
    succ: list[list[tuple[int, int]]] = [[] for _ in range(P)]
    pred: list[list[tuple[int, int]]] = [[] for _ in range(P)]
    for b, _m, b2, dc in body:
        succ[b].append((b2, dc))
        pred[b2].append((b, dc))
    hole = set(holes)
    top = (last + 1) * P

    def nbrs(h: int, step: list[list[tuple[int, int]]], sign: int):
        """(copy, b) next to hole h by ``step`` (sign -1: predecessors, 1: successors)."""
        c, b = divmod(h, P)
        for b2, dc in step[b]:
            o = (c + sign * dc) * P + b2
            if 0 <= o < top:
                yield o

    def joined(sign: int) -> set[int]:
        """Holes joined to a labelled state by a path: sign 1, from one (a hole with a labelled
        predecessor, then onward by successors); -1, to one."""
        into, onward = (pred, succ) if sign == 1 else (succ, pred)
        got = {h for h in holes if any(o in inv for o in nbrs(h, into, -sign))}
        work = list(got)
        for h in work:  # grows while iterating
            for o in nbrs(h, onward, sign):
                if o in hole and o not in got:
                    got.add(o)
                    work.append(o)
        return got

    crossed = joined(1) & joined(-1)
    return min(crossed) // P if crossed else -1


def body_component(per: _Periodic, C: int) -> _Component:
    """Copies ``0..C`` of the body as a component to walk: state ``c * P + b``; exit (sink)
    ``c * J + koff[b] + j`` for the j-th exit mask of body state b in copy c (J = all kinds).
    Edges into copy C + 1 are dropped (no token of at most C bytes reaches it)."""
    P = per.P
    J = int(per.koff[-1])
    nG = (C + 1) * P
    edges = []
    for c in range(C + 1):
        base = c * P
        for b, m, b2, dc in per.body:
            if c + dc <= C:
                edges.append((base + b, m, base + dc * P + b2))
        for b in range(P):
            k0 = nG + c * J + int(per.koff[b])
            for j, m in enumerate(per.kinds[b]):
                edges.append((base + b, m, k0 + j))
    return _Component(None, np.arange(nG, dtype=np.int64),
                      np.arange((C + 1) * J, dtype=np.int64), tuple(edges), None)


def expand_template(per: _Periodic, n: int, tmB: _Template, C: int) -> _Template:
    """The component's :class:`_Template` (relative states ``0..n-1``, exit k as ``n + k``)
    from the body walk ``tmB`` over :func:`body_component` ``(per, C)``: each relative state
    takes its body state's records, destinations shifted by its copy and kept where labelled.
    Token rows are the body walk's (shared); only index arrays grow with the copies."""
    P = per.P
    J = int(per.koff[-1])
    nG = (C + 1) * P
    copied = np.nonzero(per.lab >= 0)[0]
    lab = per.lab[copied]
    inv = np.full((int(lab.max()) // P + C + 2) * P, -1, dtype=np.int64)
    inv[lab] = copied
    # members: every copied state takes its body state's records
    mem = np.nonzero(tmB.e_d < nG)[0]
    x, i = _per_start(tmB.e_r[mem], lab % P, P)
    i = mem[i]
    d = tmB.e_d[i]
    y = inv[(lab[x] // P + d // P) * P + d % P]
    ok = y >= 0
    m_src, m_dst, m_row = copied[x[ok]], y[ok], tmB.e_row[i[ok]]
    # sinks: the exit edges behind them (into a state without out-edges, or out of the
    # component)
    snk = np.nonzero(tmB.e_d >= nG)[0]
    xs, ds, j = _through_exits(per, tmB.e_r[snk], tmB.e_d[snk] - nG, inv, copied, J)
    # continuations: on from the exit edge's destination (``n + k``: out of the component,
    # then exit k = c_k; a relative state: c_k = state - n, as ``dmap[n + c_k]`` reads it),
    # unless it has no out-edges
    cx, cd, cj = _through_exits(per, tmB.c_r, tmB.c_k, inv, copied, J)
    go = np.ones(cd.size, dtype=bool)
    inner = cd < n
    go[inner] = per.live[cd[inner]]
    return _Template(np.concatenate([m_src, xs]), np.concatenate([m_dst, ds]),
                     np.concatenate([m_row, tmB.e_row[snk[j]]]), tmB.rows, cx[go],
                     cd[go] - n, tmB.c_b[cj[go]], tmB.row_hash)


def _per_start(bsrc: np.ndarray, bod: np.ndarray, P: int) -> tuple[np.ndarray, np.ndarray]:
    """(index into ``bod``, index into the records) for every state (body state ``bod``) and
    every record of its body state (records' body states ``bsrc``), int64 each."""
    o = np.argsort(bsrc, kind="stable")
    ptr = np.zeros(P + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(np.bincount(bsrc, minlength=P))
    cnt = ptr[bod + 1] - ptr[bod]
    return np.repeat(np.arange(bod.size, dtype=np.int64), cnt), o[_ranges(ptr[bod], cnt)]


def _through_exits(per: _Periodic, bsrc: np.ndarray, code: np.ndarray, inv: np.ndarray,
                   copied: np.ndarray, J: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Body records that reach sink ``code`` (copy ``code // J``, global kind ``code % J``) from
    body state ``bsrc``, as real exit edges: (relative source, exit destination ``n + k`` or a
    relative state, index into the records), int64 each, one per (copied state, record, exit
    edge) whose state exists.  Driven from the side with fewer candidates: every copied state
    (a ``maxLength`` chain: each copy's closing quote) or every exit edge (a ``minLength``
    chain: only the last copy leaves)."""
    P = per.P
    cs, g = np.divmod(code, J)
    lab = per.lab
    cnt_b = np.bincount(bsrc, minlength=P)
    cnt_g = np.bincount(g, minlength=J)
    by_start = int(cnt_b[lab[copied] % P].sum())
    by_exit = int(cnt_g[per.exit_kind].sum()) if per.exit_kind.size else 0
    if by_exit <= by_start:
        o = np.argsort(g, kind="stable")
        gptr = np.zeros(J + 1, dtype=np.int64)
        gptr[1:] = np.cumsum(cnt_g)
        cnt = cnt_g[per.exit_kind]
        e = np.repeat(np.arange(per.exit_kind.size, dtype=np.int64), cnt)
        rec = o[_ranges(gptr[per.exit_kind], cnt)]
        c0 = lab[per.exit_src[e]] // P - cs[rec]
        ok = np.nonzero(c0 >= 0)[0]
        src = inv[c0[ok] * P + bsrc[rec[ok]]]
        got = src >= 0
        return src[got], per.exit_dst[e[ok[got]]], rec[ok[got]]
    # from each copied state: its records, then the exit edges of the state they reach
    xi, rec = _per_start(bsrc, lab[copied] % P, P)
    y = inv[(lab[copied[xi]] // P + cs[rec]) * P + per.kind_b[g[rec]]]
    ok = np.nonzero(y >= 0)[0]
    key = y[ok] * J + g[rec[ok]]
    ptr, order = per.exit_index(J)
    cnt = ptr[key + 1] - ptr[key]
    sel = np.repeat(ok, cnt)
    return copied[xi[sel]], per.exit_dst[order[_ranges(ptr[key], cnt)]], rec[sel]


def merge_templates(a: _Template, b: _Template) -> _Template:
    """One template with the records of both (walks from disjoint starts of one component)."""
    off = int(a.rows.shape[0])
    return _Template(np.concatenate([a.e_r, b.e_r]), np.concatenate([a.e_d, b.e_d]),
                     np.concatenate([a.e_row, b.e_row + off]),
                     np.concatenate([a.rows, b.rows]), np.concatenate([a.c_r, b.c_r]),
                     np.concatenate([a.c_k, b.c_k]), np.concatenate([a.c_b, b.c_b]),
                     np.concatenate([a.row_hash, b.row_hash]))
