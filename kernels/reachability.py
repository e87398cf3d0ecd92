"""State-set reachability: the forward advance (eq. 3 for realized tokens) and the backward
budget tables (eq. 4), plus the distance vector the GCD mask reads.

Semantics as loops (S states, E edges, L label sets, W = ceil(V / 32); ``has(l, v)`` is bit
``v & 31`` of ``labels[l, v >> 5]``; ``nonempty(e)`` = label set of edge ``e`` has a token
``< V``)::

    # advance: active bool [B, S], tokens int64 [B]  ->  bool [B, S]   (eq. 3, realized x_t)
    for b in range(B):
        for e in range(E):
            if active[b, src[e]] and 0 <= tokens[b] < V and has(label[e], tokens[b]):
                new[b, dst[e]] = 1          # EOS / special / out-of-range ids: empty set

    # backward_reachability: n  ->  bool [n + 1, S]                    (eq. 4)
    beta[0] = final
    for r in range(1, n + 1):
        for e in range(E):
            if nonempty(e) and beta[r - 1, dst[e]]:
                beta[r, src[e]] = 1         # accept in exactly r tokens
        if cumulative: beta[r] |= beta[r - 1]   # accept within r tokens

    # distance_to_accept:  ->  int64 [S]  (fewest tokens to an accepting state)
    distance[s] = min{r : beta[r, s]}, or UNREACHABLE if there is none

With the budget convention of the masks (``remaining`` tokens left, EOS included), a text token
is allowed iff it enters a state with ``distance <= remaining - 1``, i.e. the *cumulative*
table row ``remaining - 1``; the exact table is the paper's eq. 4 for fixed-length decoding.

Triton: ``_advance`` (grid ``(B, ceil(E/BLOCK_E))``) scatters 1s into a zeroed [B, S] buffer
(all writers write the same value, so the result is deterministic).  ``_backward`` and
``_distance`` run as one program that sweeps the edges once per budget step / BFS level with a
block barrier between sweeps (the automaton is small next to a GPU; one launch replaces
``n`` launches).  Inputs are never mutated.
"""

from __future__ import annotations

import torch

from ..fsa.errors import InvalidArgumentError
from ._common import UNREACHABLE
from ._triton import build, resolve_backend

__all__ = [
    "UNREACHABLE",
    "advance",
    "advance_ref",
    "backward_reachability",
    "backward_reachability_ref",
    "distance_to_accept",
    "distance_to_accept_ref",
    "label_nonempty",
]


def label_nonempty(labels: torch.Tensor, vocab_size: int | None = None) -> torch.Tensor:
    """bool [L]: whether each label set holds a token (``< vocab_size`` when given)."""
    lab = labels
    if vocab_size is not None and labels.shape[1]:
        r = vocab_size - 32 * (labels.shape[1] - 1)
        if r < 32:
            lab = labels.clone()
            lab[:, -1] &= (1 << r) - 1
    return (lab != 0).any(1)


def _edge_nonempty(edge_label, labels, vocab_size) -> torch.Tensor:
    if labels.shape[0] == 0:
        return torch.zeros(edge_label.shape[0], dtype=torch.bool, device=labels.device)
    return label_nonempty(labels, vocab_size)[edge_label]


# ---------------------------------------------------------------------------- torch references


def advance_ref(
    active: torch.Tensor, tokens: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
    edge_label: torch.Tensor, labels: torch.Tensor, vocab_size: int,
) -> torch.Tensor:
    """Pure-torch :func:`advance` → bool [B, S]."""
    B, S = active.shape
    tok = tokens.to(torch.int64).reshape(-1)
    valid = (tok >= 0) & (tok < vocab_size)
    t = torch.where(valid, tok, 0)
    words = labels[edge_label[None, :], (t >> 5)[:, None]]  # [B, E]
    bit = ((words >> (t & 31).to(torch.int32)[:, None]) & 1).bool()
    hit = active.bool()[:, edge_src] & bit & valid[:, None]
    out = torch.zeros(B, S, dtype=torch.uint8, device=active.device)
    out.scatter_reduce_(1, edge_dst.expand(B, -1), hit.to(torch.uint8), reduce="amax")
    return out.bool()


def backward_reachability_ref(
    edge_src: torch.Tensor, edge_dst: torch.Tensor, edge_label: torch.Tensor,
    labels: torch.Tensor, final: torch.Tensor, n: int, *, vocab_size: int | None = None,
    cumulative: bool = False,
) -> torch.Tensor:
    """Pure-torch :func:`backward_reachability` → bool [n + 1, S]."""
    S = final.shape[0]
    ne = _edge_nonempty(edge_label, labels, vocab_size)
    src, dst = edge_src[ne], edge_dst[ne]
    out = torch.zeros(n + 1, S, dtype=torch.uint8, device=final.device)
    out[0] = final.to(torch.uint8)
    for r in range(1, n + 1):
        out[r].scatter_reduce_(0, src, out[r - 1][dst], reduce="amax")
        if cumulative:
            out[r] |= out[r - 1]
    return out.bool()


def distance_to_accept_ref(
    edge_src: torch.Tensor, edge_dst: torch.Tensor, edge_label: torch.Tensor,
    labels: torch.Tensor, final: torch.Tensor, *, vocab_size: int | None = None,
) -> torch.Tensor:
    """Pure-torch :func:`distance_to_accept` → int64 [S] (BFS by levels)."""
    S = final.shape[0]
    ne = _edge_nonempty(edge_label, labels, vocab_size)
    src, dst = edge_src[ne], edge_dst[ne]
    dist = torch.full((S,), UNREACHABLE, dtype=torch.int64, device=final.device)
    dist[final.bool()] = 0
    reached = final.bool().clone()
    k = 0
    while True:
        k += 1
        step = torch.zeros(S, dtype=torch.uint8, device=final.device)
        step.scatter_reduce_(0, src, reached[dst].to(torch.uint8), reduce="amax")
        new = step.bool() & ~reached
        if not bool(new.any()):
            return dist
        dist[new] = k
        reached |= new


# ---------------------------------------------------------------------------- Triton


def _kernels(triton, tl):
    @triton.jit
    def _advance(
        active_ptr, tok_ptr, src_ptr, dst_ptr, lab_ptr, labels_ptr, out_ptr, S, E, W, V,
        BLOCK_E: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        offs = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
        m = offs < E
        tok = tl.zeros([BLOCK_E], dtype=tl.int64) + tl.load(tok_ptr + b)
        ok = m & (tok >= 0) & (tok < V)
        t = tl.where(ok, tok, 0)
        src = tl.load(src_ptr + offs, mask=m, other=0)
        ok = ok & (tl.load(active_ptr + b * S + src, mask=ok, other=0) != 0)
        lab = tl.load(lab_ptr + offs, mask=ok, other=0)
        word = tl.load(labels_ptr + lab * W + (t >> 5), mask=ok, other=0)
        ok = ok & (((word >> (t & 31).to(tl.int32)) & 1) != 0)
        dst = tl.load(dst_ptr + offs, mask=ok, other=0)
        tl.store(out_ptr + b * S + dst, tl.full([BLOCK_E], 1, tl.uint8), mask=ok)

    @triton.jit
    def _backward(
        src_ptr, dst_ptr, ne_ptr, out_ptr, S, E, n,
        CUMULATIVE: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_S: tl.constexpr,
    ):
        # out[0] = final was written by the launcher; one program sweeps r = 1..n
        prev = out_ptr
        for _r in range(1, n + 1):
            cur = prev + S  # 64-bit pointer arithmetic: no int32 overflow at large n * S
            for e0 in range(0, E, BLOCK_E):
                offs = e0 + tl.arange(0, BLOCK_E)
                m = offs < E
                ok = m & (tl.load(ne_ptr + offs, mask=m, other=0) != 0)
                dst = tl.load(dst_ptr + offs, mask=ok, other=0)
                ok = ok & (tl.load(prev + dst, mask=ok, other=0, volatile=True) != 0)
                src = tl.load(src_ptr + offs, mask=ok, other=0)
                tl.store(cur + src, tl.full([BLOCK_E], 1, tl.uint8), mask=ok)
            if CUMULATIVE:
                tl.debug_barrier()
                for s0 in range(0, S, BLOCK_S):
                    so = s0 + tl.arange(0, BLOCK_S)
                    sm = so < S
                    p = tl.load(prev + so, mask=sm, other=0, volatile=True)
                    c = tl.load(cur + so, mask=sm, other=0, volatile=True)
                    tl.store(cur + so, p | c, mask=sm)
            tl.debug_barrier()
            prev = cur

    @triton.jit
    def _distance(
        src_ptr, dst_ptr, ne_ptr, dist_ptr, E, BIG,
        BLOCK_E: tl.constexpr,
    ):
        # dist holds 0 on final states and BIG elsewhere; level k sets dist[src] = k where
        # dist[dst] == k - 1 (writes of k never match k - 1, so one sweep per level is exact)
        k = 1
        changed = 1
        while changed != 0:
            hits = tl.zeros([BLOCK_E], dtype=tl.int32)
            for e0 in range(0, E, BLOCK_E):
                offs = e0 + tl.arange(0, BLOCK_E)
                m = offs < E
                ok = m & (tl.load(ne_ptr + offs, mask=m, other=0) != 0)
                kk = tl.zeros([BLOCK_E], dtype=tl.int64) + k
                dst = tl.load(dst_ptr + offs, mask=ok, other=0)
                dd = tl.load(dist_ptr + dst, mask=ok, other=0, volatile=True)
                ok = ok & (dd == kk - 1)
                src = tl.load(src_ptr + offs, mask=ok, other=0)
                ds = tl.load(dist_ptr + src, mask=ok, other=0, volatile=True)
                ok = ok & (ds == BIG)
                tl.store(dist_ptr + src, kk, mask=ok)
                hits = hits | ok.to(tl.int32)
            changed = tl.max(hits, axis=0)
            k += 1
            tl.debug_barrier()

    return _advance, _backward, _distance


# 1024 edges per sweep step: one block covers most JSON-schema automata (E ~ 10^2..10^3)
_BLOCK_E_SWEEP = 1024
_BLOCK_E = 256
_BLOCK_S = 1024


# ---------------------------------------------------------------------------- public ops


def advance(
    active: torch.Tensor, tokens: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
    edge_label: torch.Tensor, labels: torch.Tensor, vocab_size: int, *, backend: str = "auto",
) -> torch.Tensor:
    """Forward state-set advance for one realized token per request (eq. 3).

    ``active``: bool/uint8 [B, S]; ``tokens``: int [B] (ids outside ``[0, vocab_size)`` and ids
    in no label — EOS, special — give an empty row).  Returns a new bool [B, S].
    """
    be = resolve_backend(backend, active, tokens, labels, op="advance")
    if active.dim() != 2 or tokens.reshape(-1).shape[0] != active.shape[0]:
        raise InvalidArgumentError(f"advance: active [B, S] and tokens [B] expected, got "
                                   f"{tuple(active.shape)} and {tuple(tokens.shape)}")
    if be == "torch":
        return advance_ref(active, tokens, edge_src, edge_dst, edge_label, labels, vocab_size)
    adv, _, _ = build("reachability", _kernels)
    B, S = active.shape
    E = int(edge_src.shape[0])
    out = torch.zeros(B, S, dtype=torch.bool, device=active.device)
    if B and E:
        act = active.to(torch.uint8).contiguous()
        adv[(B, -(-E // _BLOCK_E))](
            act, tokens.to(torch.int64).reshape(-1).contiguous(), edge_src.contiguous(),
            edge_dst.contiguous(), edge_label.contiguous(), labels.contiguous(),
            out.view(torch.uint8), S, E, labels.shape[1], vocab_size, BLOCK_E=_BLOCK_E,
        )
    return out


def backward_reachability(
    edge_src: torch.Tensor, edge_dst: torch.Tensor, edge_label: torch.Tensor,
    labels: torch.Tensor, final: torch.Tensor, n: int, *, vocab_size: int | None = None,
    cumulative: bool = False, backend: str = "auto",
) -> torch.Tensor:
    """bool [n + 1, S]: row ``r`` = states that accept in exactly ``r`` tokens (eq. 4), or
    within ``r`` tokens with ``cumulative=True``.  Raises ``ValueError`` if ``n < 0``."""
    if n < 0:
        raise InvalidArgumentError(f"backward_reachability: n must be >= 0, got {n}")
    be = resolve_backend(backend, final, labels, op="backward_reachability")
    if be == "torch":
        return backward_reachability_ref(edge_src, edge_dst, edge_label, labels, final, n,
                                         vocab_size=vocab_size, cumulative=cumulative)
    _, bwd, _ = build("reachability", _kernels)
    S = final.shape[0]
    E = int(edge_src.shape[0])
    out = torch.zeros(n + 1, S, dtype=torch.uint8, device=final.device)
    out[0] = final.to(torch.uint8)
    if n and S:
        ne = _edge_nonempty(edge_label, labels, vocab_size).to(torch.uint8)
        bwd[(1,)](edge_src.contiguous(), edge_dst.contiguous(), ne, out, S, E, n,
                  CUMULATIVE=cumulative, BLOCK_E=_BLOCK_E_SWEEP, BLOCK_S=_BLOCK_S)
    return out.bool()


def distance_to_accept(
    edge_src: torch.Tensor, edge_dst: torch.Tensor, edge_label: torch.Tensor,
    labels: torch.Tensor, final: torch.Tensor, *, vocab_size: int | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """int64 [S]: fewest tokens from each state to an accepting state (0 on final states,
    :data:`UNREACHABLE` where none is reachable).  Edges with empty label sets are skipped."""
    be = resolve_backend(backend, final, labels, op="distance_to_accept")
    if be == "torch":
        return distance_to_accept_ref(edge_src, edge_dst, edge_label, labels, final,
                                      vocab_size=vocab_size)
    _, _, dist_k = build("reachability", _kernels)
    S = final.shape[0]
    E = int(edge_src.shape[0])
    dist = torch.where(final.bool(), 0, UNREACHABLE).to(torch.int64)
    if S and E:
        ne = _edge_nonempty(edge_label, labels, vocab_size).to(torch.uint8)
        dist_k[(1,)](edge_src.contiguous(), edge_dst.contiguous(), ne, dist, E, UNREACHABLE,
                     BLOCK_E=_BLOCK_E_SWEEP)
    return dist
