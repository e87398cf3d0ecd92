"""P-GCD messages of the product HMM (paper 002, Thm. 4.4, Algorithm 1, eq. 5), factored.

The product of a language-model HMM ``(π_h [H], A_h [H, H], B_h [H, V])`` and the automaton's
edge HMM (Def. 4.2: ``A_f = T_in T_out`` [E, E], ``B_f`` [E, V] = packed labels, edge-lifted
``π_f = initial[edge_src]``, ``f = final[edge_dst]``) has hidden states ``(h, e)``; messages
are [H, E] matrices (``u[h, e]`` ↔ ``vec(u)[h * E + e]``).  Nothing here materializes
``A_h ⊗ A_f``, ``A_f`` itself, ``B_f`` dense, or any [H, E, V] tensor.

Eq. 5, ``(A_h ⊗ A_f) u = A_h u A_fᵀ``, is evaluated through the states: ``A_f[e, e'] = 1`` iff
``dst(e) = src(e')``, so (``seg_src`` / ``seg_dst`` = sum of the edge columns leaving /
entering each state, an [.., E] → [.., S] segment sum)::

    (A_h ⊗ A_f)  u  = (A_h  @ seg_src(u))[:, edge_dst]         # backward: β_{k-1}
    (A_h ⊗ A_f)ᵀ u  = (A_hᵀ @ seg_dst(u))[:, edge_src]         # forward:  α_t

which costs O(H·E + H²·S) per step instead of O(H²E + HE²); the torch forward step keeps only
the S' states entered by an edge whose label set holds the realized token (O(H·E + H²·S'); the
other columns are zero).  The loops implemented::

    emission_marginal:  Y[h, l] = Σ_{v ∈ label l} B_h[h, v]                    [H, L]
                        (Algorithm 1's ``input = B_h B_fᵀ`` is Y[:, edge_label], [H, E])
    hmm_forward_step:   for b:  x = tokens[b]
                            u[h, e] = α[b, h, e] · B_h[h, x] · [x ∈ label(e)]
                            α'[b] = (A_h ⊗ A_f)ᵀ u ;  z[b] = Σ α'[b] ;  return α'/z, log z
    hmm_backward_messages:  β_n = 1_H fᵀ
                            for k = n .. 2:  β_{k-1} = (A_h ⊗ A_f)(input ∘ β_k), rescaled
    emission_term:      out[b, v] = Σ_h Σ_{e : v ∈ label(e)} B_h[h, v] · X[b, h, e]
                        (Algorithm 1's return value with X = α_t ∘ β_t)

``emission_term`` first sums X over edges that share a label set (Y[b, h, l], [B, H, L]), then
uses *token classes* (:class:`TokenClasses`, built once per label table and cached): tokens in
exactly the same label sets form one class, ``cls`` int64 [V], ``M`` 0/1 [L, C] (``M[l, c]``:
class c ⊆ label set l), so ``Σ_l bit(l, v) · Y[b, h, l] = Z[b, h, cls(v)]`` with ``Z = Y @ M``
[B, H, C] and::

    out[b, v] = Σ_h B_h[h, v] · Z[b, h, cls(v)]

O(H·V + H·L·C) per row instead of the O(L·H·V) of walking every label set (the JSON-schema
automaton of bench/kernel_bench.py over Llama-3: L = 288 label sets, C = 264 classes, one class
holds 87% of the 128,256 tokens).  ``emission_term_ref`` keeps the literal label-set loop.

Scaling: messages are returned divided by a positive scalar per message with its natural log
beside them (scaled arithmetic, as in Ctrl-G / pyjuice); the true message is
``msg * exp(log_scale)``.  A zero message (impossible token) has ``log_scale = -inf`` and is
all zeros.

Triton kernels: ``_segment_sum`` (CSR segment sums over edges with the emission factors fused:
deterministic, no atomics), ``_emission_marginal`` (``tl.dot`` tiles with
``input_precision="ieee"``, so float32 results are not TF32-rounded) and ``_emission_term`` (one
read of ``B_h``, ``Z`` gathered by class).  The dense ``A_h`` products and ``Z = Y @ M`` are
matmuls through torch on every backend.  Inputs are never mutated.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch

from ..fsa.errors import InvalidArgumentError
from ._triton import build, resolve_backend

__all__ = [
    "EdgeCSR",
    "edge_csr",
    "TokenClasses",
    "kron_transition",
    "emission_marginal",
    "emission_marginal_ref",
    "emission_term",
    "emission_term_ref",
    "hmm_forward_step",
    "hmm_forward_step_ref",
    "hmm_backward_messages",
    "hmm_backward_messages_ref",
]


@dataclass(frozen=True, eq=False)
class EdgeCSR:
    """Edges grouped by source and by destination state (CSR): ``out_ptr``/``in_ptr`` int64
    [S + 1], ``out_idx``/``in_idx`` int64 [E] (edge ids, ascending within a state)."""

    out_ptr: torch.Tensor
    out_idx: torch.Tensor
    in_ptr: torch.Tensor
    in_idx: torch.Tensor
    edge_src: torch.Tensor
    edge_dst: torch.Tensor
    num_states: int


def edge_csr(edge_src: torch.Tensor, edge_dst: torch.Tensor, num_states: int) -> EdgeCSR:
    """Build the :class:`EdgeCSR` once per automaton (on the edges' device)."""
    dev = edge_src.device
    S = int(num_states)

    def csr(key):
        order = torch.argsort(key, stable=True)
        counts = torch.bincount(key, minlength=S)
        ptr = torch.zeros(S + 1, dtype=torch.int64, device=dev)
        ptr[1:] = torch.cumsum(counts, 0)
        return ptr, order.to(torch.int64)

    op, oi = csr(edge_src.to(torch.int64))
    ip, ii = csr(edge_dst.to(torch.int64))
    return EdgeCSR(op, oi, ip, ii, edge_src.to(torch.int64), edge_dst.to(torch.int64), S)


# tokens per chunk of the torch emission path: [H, 512] slices of B_h; the Llama-3 JSON-schema
# automaton has 11 distinct classes per 512-token chunk on average (9 per 256, 14 per 1,024;
# 512 and 1,024 timed the same, 128 ~20% slower at H = 1,024 on one CPU thread)
_TC_CHUNK = 512
# chunks with more distinct classes than this gather Z per token instead of one GEMM row per
# class (a class row costs H·chunk multiply-adds at GEMM speed, the gather ~ 4 H-long passes)
_TC_MAX_ROWS = 64


def _partition(rows, n_rows: int, n: int, device) -> torch.Tensor:
    """int64 [n]: ids of the distinct columns of the 0/1 matrix [n_rows, n] whose rows
    ``rows(l0, l1)`` returns (ids ordered by column value; exact: each round appends
    ≤ 62 − log2(n) rows to the ids and renumbers them with a 1-D ``torch.unique``)."""
    ids = torch.zeros(n, dtype=torch.int64, device=device)
    step = max(1, 62 - max(1, n).bit_length())
    for l0 in range(0, n_rows, step):
        l1 = min(n_rows, l0 + step)
        w = (rows(l0, l1).to(torch.int64)
             << torch.arange(l1 - l0, dtype=torch.int64, device=device)[:, None]).sum(0)
        _, ids = torch.unique((ids << (l1 - l0)) | w, return_inverse=True)
    return ids


def _chunk_plan(token_class: torch.Tensor, C: int, chunk: int):
    """Distinct classes per chunk of ``chunk`` tokens, skipping tokens of class -1:
    ``(ptr`` int64 CPU [n_chunks + 1], ``classes`` [ptr[-1]], ``local`` int64 [V] (0 for skipped
    tokens), ``kept`` int64 CPU [n_chunks] tokens kept per chunk)."""
    V = token_class.numel()
    dev = token_class.device
    n_chunks = -(-V // chunk)
    idx = torch.nonzero(token_class >= 0).reshape(-1)
    cid = idx // chunk
    ukey, inv = torch.unique(cid * max(1, C) + token_class[idx], return_inverse=True)
    ptr = torch.zeros(n_chunks + 1, dtype=torch.int64, device=dev)
    ptr[1:] = torch.cumsum(torch.bincount(ukey // max(1, C), minlength=n_chunks), 0)
    local = torch.zeros(V, dtype=torch.int64, device=dev)
    local[idx] = inv - ptr[cid]
    kept = torch.bincount(cid, minlength=n_chunks)
    return ptr.cpu(), ukey % max(1, C), local, kept.cpu()


@dataclass(frozen=True, eq=False)
class TokenClasses:
    """Tokens grouped by the label sets containing them (built once per label table).

    Fields: ``token_class`` int64 [V] (class id of each token, ids ordered by membership),
    ``membership`` bool [L, C] (``membership[l, c]``: the tokens of class c are in label set l;
    a token in no label set has an all-false column), ``num_classes`` C, ``vocab_size`` V;
    for the torch path, the vocabulary cut in chunks of ``chunk`` tokens: ``chunk_ptr`` int64
    [n_chunks + 1] into ``chunk_classes`` int64 (the distinct classes of each chunk, ascending)
    and ``chunk_local`` int64 [V] (the position of ``token_class[v]`` among its chunk's classes).
    """

    token_class: torch.Tensor
    membership: torch.Tensor
    num_classes: int
    vocab_size: int
    chunk: int
    chunk_ptr: torch.Tensor
    chunk_classes: torch.Tensor
    chunk_local: torch.Tensor

    @classmethod
    def from_labels(cls, labels: torch.Tensor, vocab_size: int, *,
                    chunk: int = _TC_CHUNK) -> TokenClasses:
        """Classes of packed labels int32 [L, ceil(V/32)] (on their device).  Exact: tokens are
        refined by ≤ 62 − log2(V) label bits at a time with a 1-D ``torch.unique`` (~1 s for
        L = 288, V = 128,256 on the shared CPU).  Raises ValueError if ``labels`` does not fit
        ``vocab_size``."""
        V = int(vocab_size)
        L, W = labels.shape
        if W != (V + 31) // 32:
            raise InvalidArgumentError(f"TokenClasses: labels [L, {W}] do not match V = {V}")
        if chunk < 1:
            raise InvalidArgumentError(f"TokenClasses: chunk must be >= 1, got {chunk}")
        dev = labels.device
        shifts = torch.arange(32, dtype=torch.int32, device=dev)

        def rows(l0, l1):
            return ((labels[l0:l1, :, None] >> shifts) & 1).reshape(l1 - l0, -1)[:, :V]

        ids = _partition(rows, L, V, dev)
        C = int(ids.max()) + 1 if V else 0
        rep = torch.full((C,), V, dtype=torch.int64, device=dev).scatter_reduce_(
            0, ids, torch.arange(V, dtype=torch.int64, device=dev), "amin")
        membership = ((labels[:, rep >> 5] >> (rep & 31).to(torch.int32)) & 1).bool()
        ptr, classes, local, _ = _chunk_plan(ids, C, chunk)
        return cls(ids, membership, C, V, int(chunk), ptr, classes, local)


# per-process cache of TokenClasses for label tables passed without ``classes=``: keyed by the
# tensor's identity, checked against a weak reference and its in-place version counter
_CLASS_CACHE: OrderedDict = OrderedDict()
_CLASS_CACHE_SIZE = 8


def _classes_for(labels: torch.Tensor, V: int) -> TokenClasses:
    key = (id(labels), V)
    hit = _CLASS_CACHE.get(key)
    if hit is not None:
        ref, version, tc = hit
        if ref() is labels and version == labels._version:
            _CLASS_CACHE.move_to_end(key)
            return tc
    tc = TokenClasses.from_labels(labels, V)
    _CLASS_CACHE[key] = (weakref.ref(labels), labels._version, tc)
    while len(_CLASS_CACHE) > _CLASS_CACHE_SIZE:
        _CLASS_CACHE.popitem(last=False)
    return tc


def _unpack_float(labels: torch.Tensor, w0: int, w1: int, V: int, dtype) -> torch.Tensor:
    """Label bits of words [w0, w1) as ``dtype`` [L, min(32*w1, V) - 32*w0]."""
    shifts = torch.arange(32, dtype=torch.int32, device=labels.device)
    bits = (labels[:, w0:w1, None] >> shifts) & 1
    bits = bits.reshape(labels.shape[0], -1)[:, : max(0, min(32 * w1, V) - 32 * w0)]
    return bits.to(dtype)


def _token_bits(labels, edge_label, tokens, V) -> torch.Tensor:
    """float-able int [B, E]: ``tokens[b] ∈ label(e)`` (0 for ids outside [0, V))."""
    tok = tokens.to(torch.int64).reshape(-1)
    valid = (tok >= 0) & (tok < V)
    t = torch.where(valid, tok, 0)
    words = labels[edge_label[None, :], (t >> 5)[:, None]]
    return ((words >> (t & 31).to(torch.int32)[:, None]) & 1) * valid[:, None]


# ---------------------------------------------------------------------------- torch references


def emission_marginal_ref(B_h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Pure-torch :func:`emission_marginal` → ``Y`` [H, L] (``V = B_h.shape[1]``)."""
    H, V = B_h.shape
    L, W = labels.shape
    out = torch.zeros(H, L, dtype=B_h.dtype, device=B_h.device)
    step = max(1, (1 << 22) // max(1, L * 32))  # ≤ 4M label-bit entries unpacked at a time
    for w0 in range(0, W, step):
        w1 = min(W, w0 + step)
        D = _unpack_float(labels, w0, w1, V, B_h.dtype)
        out += B_h[:, 32 * w0: 32 * w0 + D.shape[1]] @ D.T
    return out


def _label_sums(X: torch.Tensor, edge_label: torch.Tensor, L: int) -> torch.Tensor:
    """[B, H, E] → [B, H, L]: sum of the edge columns of each label set."""
    Y = torch.zeros(*X.shape[:-1], L, dtype=X.dtype, device=X.device)
    return Y.index_add_(-1, edge_label, X)


def emission_term_ref(
    X: torch.Tensor, B_h: torch.Tensor, edge_label: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """Pure-torch :func:`emission_term`: X [B, H, E] (or [H, E]) → [B, V] (or [V])."""
    squeeze = X.dim() == 2
    X3 = X[None] if squeeze else X
    Bn, H, _ = X3.shape
    V = B_h.shape[1]
    L, W = labels.shape
    Y = _label_sums(X3, edge_label, L)  # [B, H, L]
    out = torch.zeros(Bn, V, dtype=X.dtype, device=X.device)
    step = max(1, (1 << 22) // max(1, Bn * L * 32))
    for w0 in range(0, W, step):
        w1 = min(W, w0 + step)
        D = _unpack_float(labels, w0, w1, V, X.dtype)  # [L, Vc]
        v0, vc = 32 * w0, D.shape[1]
        T = torch.einsum("bhl,hv->blv", Y, B_h[:, v0: v0 + vc])
        out[:, v0: v0 + vc] = (T * D[None]).sum(1)
    return out[0] if squeeze else out


def _emission_term_classes(
    Y: torch.Tensor, B_h: torch.Tensor, tc: TokenClasses
) -> torch.Tensor:
    """Torch class path: Y [B, H, L] → out [B, V] = Σ_h B_h[h, v] · (Y @ M)[b, h, cls(v)].

    When some label sets have ``Y == 0`` (edges without mass: the forward message of a real
    request is zero off the edges leaving its states), classes are merged by their membership
    in the others and the tokens of no such set are skipped (their output is 0): a per-call
    re-plan (~V log V).  Per chunk of ``tc.chunk`` tokens with k distinct classes: one GEMM
    ``Z_kᵀ [B·k, H] @ B_h[:, chunk]`` and a gather of each token's row (k ≤ ``_TC_MAX_ROWS``),
    else ``Σ_h`` of ``Z`` gathered per token times ``B_h``.  Temporaries: [B, H, C] and
    [B·k, chunk]."""
    Bn, H, L = Y.shape
    V = B_h.shape[1]
    out = torch.zeros(Bn, V, dtype=Y.dtype, device=Y.device)
    if Bn == 0 or V == 0 or H == 0:
        return out
    act = (Y != 0).reshape(-1, L).any(0)  # [L]
    if bool(act.all()):
        M, tcls = tc.membership, tc.token_class
        ptr, classes, local = tc.chunk_ptr, tc.chunk_classes, tc.chunk_local
        kept = None
    else:
        Mr = tc.membership[act]  # [La, C]
        cmap = _partition(lambda a, b: Mr[a:b], Mr.shape[0], tc.num_classes, Y.device)
        C2 = int(cmap.max()) + 1 if tc.num_classes else 0
        rep = torch.zeros(C2, dtype=torch.int64, device=Y.device).scatter_(
            0, cmap, torch.arange(tc.num_classes, device=Y.device))
        M = Mr[:, rep]  # [La, C2]
        tcls = torch.where(Mr.any(0), cmap, -1)[tc.token_class]  # -1: in no active set
        ptr, classes, local, kept = _chunk_plan(tcls, C2, tc.chunk)
        kept = kept.tolist()
        Y = Y[..., act]
    Z = Y @ M.to(Y.dtype)  # [B, H, C]
    ZT = Z.transpose(1, 2).contiguous()  # [B, C, H]
    ptr = ptr.tolist()
    for i, lo in enumerate(range(0, V, tc.chunk)):
        hi = min(V, lo + tc.chunk)
        n = hi - lo
        if kept is not None and kept[i] == 0:
            continue
        Bc = B_h[:, lo:hi]
        k = ptr[i + 1] - ptr[i]
        if k <= _TC_MAX_ROWS:
            rows = classes[ptr[i]: ptr[i + 1]]
            T = (ZT.index_select(1, rows).reshape(Bn * k, H) @ Bc).reshape(Bn, k, n)
            val = T.gather(1, local[lo:hi].expand(Bn, n)[:, None, :])[:, 0]
        else:
            val = (Z.index_select(2, tcls[lo:hi].clamp(min=0)) * Bc[None]).sum(1)
        if kept is not None and kept[i] < n:
            val = torch.where(tcls[lo:hi] >= 0, val, 0.0)
        out[:, lo:hi] = val
    return out


def _seg_sum_ref(u, ptr_key, S):
    out = torch.zeros(*u.shape[:-1], S, dtype=u.dtype, device=u.device)
    return out.index_add_(-1, ptr_key, u)


def _normalize(msg: torch.Tensor):
    """Divide each leading-index message by its sum; (scaled, log of the sum)."""
    z = msg.sum(dim=tuple(range(1, msg.dim())))
    safe = torch.where(z > 0, z, torch.ones_like(z))
    scaled = msg / safe.reshape(-1, *([1] * (msg.dim() - 1)))
    return scaled, torch.where(z > 0, torch.log(safe), torch.full_like(z, float("-inf")))


def kron_transition(
    u: torch.Tensor, A_h: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
    num_states: int, *, transpose: bool = False,
) -> torch.Tensor:
    """Eq. 5 in torch: ``(A_h ⊗ A_f) u`` (or ``(A_h ⊗ A_f)ᵀ u``) for u [..., H, E]."""
    if transpose:
        c = _seg_sum_ref(u, edge_dst, num_states)
        return (A_h.T @ c)[..., edge_src]
    c = _seg_sum_ref(u, edge_src, num_states)
    return (A_h @ c)[..., edge_dst]


def hmm_forward_step_ref(
    alpha: torch.Tensor, tokens: torch.Tensor, A_h: torch.Tensor, B_h: torch.Tensor,
    edge_src: torch.Tensor, edge_dst: torch.Tensor, edge_label: torch.Tensor,
    labels: torch.Tensor, num_states: int,
):
    """Pure-torch :func:`hmm_forward_step` → (α' [B, H, E] scaled, log_scale [B])."""
    V = B_h.shape[1]
    tok = tokens.to(torch.int64).reshape(-1)
    valid = (tok >= 0) & (tok < V)
    emit_h = B_h[:, torch.where(valid, tok, 0)].T * valid[:, None]  # [B, H]
    bits = _token_bits(labels, edge_label, tok, V).to(alpha.dtype)  # [B, E]
    u = alpha * bits[:, None, :] * emit_h[:, :, None]
    return _normalize(kron_transition(u, A_h, edge_src, edge_dst, num_states, transpose=True))


def hmm_backward_messages_ref(
    n: int, A_h: torch.Tensor, emission: torch.Tensor, edge_src: torch.Tensor,
    edge_dst: torch.Tensor, final: torch.Tensor, num_states: int,
):
    """Pure-torch :func:`hmm_backward_messages` → (β [n, H, E] scaled, log_scale [n])."""
    H, E = emission.shape
    beta = torch.empty(n, H, E, dtype=emission.dtype, device=emission.device)
    logs = torch.empty(n, dtype=emission.dtype, device=emission.device)
    b = final.to(emission.dtype)[edge_dst].expand(H, E)[None]
    b, ls = _normalize(b)
    beta[n - 1], logs[n - 1] = b[0], ls[0]
    for k in range(n - 1, 0, -1):
        nxt = kron_transition(emission * beta[k], A_h, edge_src, edge_dst, num_states)
        b, ls = _normalize(nxt[None])
        beta[k - 1], logs[k - 1] = b[0], ls[0] + logs[k]
    return beta, logs


def _hmm_forward_step_torch(
    alpha, tokens, A_h, B_h, edge_src, edge_dst, edge_label, labels, num_states,
):
    """Torch path of :func:`hmm_forward_step`: the reference restricted to the edges that can
    emit a realized token and to their destination states, so the dense product is
    ``A_hᵀ [H, H] @ c [B, H, S']`` over the S' states those edges enter (83 of 1,572 states for
    a token of the bench's JSON-schema automaton) instead of all S; exact (the columns left out
    are zeros)."""
    Bn, H, E = alpha.shape
    V = B_h.shape[1]
    tok = tokens.to(torch.int64).reshape(-1)
    valid = (tok >= 0) & (tok < V)
    emit_h = B_h[:, torch.where(valid, tok, 0)].T * valid[:, None]  # [B, H]
    bits = _token_bits(labels, edge_label, tok, V).to(alpha.dtype)  # [B, E]
    act = torch.nonzero(bits.any(0)).reshape(-1)
    # states entered by an emitting edge, and the edges leaving them (the only nonzero columns)
    states, pos = torch.unique(edge_dst[act], return_inverse=True)
    where = torch.full((num_states,), -1, dtype=torch.int64, device=alpha.device)
    where[states] = torch.arange(states.numel(), device=alpha.device)
    out_e = torch.nonzero(where[edge_src] >= 0).reshape(-1)
    u = alpha[:, :, act] * bits[:, None, act] * emit_h[:, :, None]  # [B, H, E']
    c = torch.zeros(Bn, H, states.numel(), dtype=alpha.dtype, device=alpha.device)
    small, ls = _normalize((A_h.T @ c.index_add_(-1, pos, u))[..., where[edge_src[out_e]]])
    out = torch.zeros(Bn, H, E, dtype=alpha.dtype, device=alpha.device)
    out[:, :, out_e] = small
    return out, ls


# ---------------------------------------------------------------------------- Triton


def _kernels(triton, tl):
    @triton.jit
    def _segment_sum(
        u_ptr, wbe_ptr, whe_ptr, rs_ptr, ptr_ptr, idx_ptr, out_ptr, H, E, S,
        HAS_WBE: tl.constexpr, HAS_WHE: tl.constexpr, HAS_RS: tl.constexpr,
        BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
    ):
        # out[b, h, s] = rs[b, h] * Σ_{k in ptr[s]..ptr[s+1]} u[b, h, e] wbe[b, e] whe[h, e]
        b = tl.program_id(0).to(tl.int64)
        s = tl.program_id(1)
        ho = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
        hm = ho < H
        start = tl.load(ptr_ptr + s)
        end = tl.load(ptr_ptr + s + 1)
        acc = tl.zeros([BLOCK_H, BLOCK_K], dtype=tl.float32)
        for k0 in range(start, end, BLOCK_K):
            ko = k0 + tl.arange(0, BLOCK_K)
            km = ko < end
            e = tl.load(idx_ptr + ko, mask=km, other=0)
            m2 = hm[:, None] & km[None, :]
            t = tl.load(u_ptr + (b * H + ho[:, None]) * E + e[None, :], mask=m2, other=0.0)
            if HAS_WBE:
                t = t * tl.load(wbe_ptr + b * E + e, mask=km, other=0.0)[None, :]
            if HAS_WHE:
                t = t * tl.load(whe_ptr + ho[:, None].to(tl.int64) * E + e[None, :], mask=m2,
                                other=0.0)
            acc += t
        r = tl.sum(acc, axis=1)
        if HAS_RS:
            r = r * tl.load(rs_ptr + b * H + ho, mask=hm, other=0.0)
        tl.store(out_ptr + (b * H + ho) * S + s, r, mask=hm)

    @triton.jit
    def _emission_marginal(
        bh_ptr, labels_ptr, out_ptr, H, V, L, W,
        BLOCK_H: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_V: tl.constexpr,
    ):
        # out[h, l] = Σ_v B_h[h, v] · bit(l, v)
        ho = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)
        lo = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
        hm = ho < H
        lm = lo < L
        acc = tl.zeros([BLOCK_H, BLOCK_L], dtype=tl.float32)
        for v0 in range(0, V, BLOCK_V):
            vo = v0 + tl.arange(0, BLOCK_V)
            vm = vo < V
            words = tl.load(labels_ptr + lo[None, :].to(tl.int64) * W + (vo >> 5)[:, None],
                            mask=vm[:, None] & lm[None, :], other=0)
            if tl.max(tl.max((words != 0).to(tl.int32), axis=1), axis=0) > 0:
                bits = ((words >> (vo & 31)[:, None]) & 1).to(tl.float32)  # [BV, BL]
                bh = tl.load(bh_ptr + ho[:, None].to(tl.int64) * V + vo[None, :],
                             mask=hm[:, None] & vm[None, :], other=0.0)
                acc += tl.dot(bh, bits, input_precision="ieee")
        tl.store(out_ptr + ho[:, None].to(tl.int64) * L + lo[None, :], acc,
                 mask=hm[:, None] & lm[None, :])

    @triton.jit
    def _emission_term(
        z_ptr, bh_ptr, cls_ptr, out_ptr, H, V, C,
        BLOCK_H: tl.constexpr, BLOCK_V: tl.constexpr,
    ):
        # out[b, v] = Σ_h B_h[h, v] Z[b, h, cls[v]]   (Z = Y @ M [B, H, C])
        b = tl.program_id(0).to(tl.int64)
        vo = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
        vm = vo < V
        c = tl.load(cls_ptr + vo, mask=vm, other=0)
        acc = tl.zeros([BLOCK_H, BLOCK_V], dtype=tl.float32)
        for h0 in range(0, H, BLOCK_H):
            ho = h0 + tl.arange(0, BLOCK_H)
            m2 = (ho < H)[:, None] & vm[None, :]
            z = tl.load(z_ptr + (b * H + ho[:, None]) * C + c[None, :], mask=m2, other=0.0)
            bh = tl.load(bh_ptr + ho[:, None].to(tl.int64) * V + vo[None, :], mask=m2,
                         other=0.0)
            acc += z * bh
        tl.store(out_ptr + b * V + vo, tl.sum(acc, axis=0), mask=vm)

    return _segment_sum, _emission_marginal, _emission_term


# tile sizes: tl.dot needs every side >= 16; 32 x 64 x 64 float32 tiles keep the emission
# kernels under 64 KiB of registers per program (retune on a GPU with bench/kernel_bench.py)
_SEG_BLOCK_H = 64
_SEG_BLOCK_K = 16
_EM_BLOCK_H = 32
_EM_BLOCK_L = 16
_EM_BLOCK_V = 64
# emission term: [32, 128] float32 tiles of B_h and of the gathered Z
_ET_BLOCK_H = 32
_ET_BLOCK_V = 128


def _need_f32(op: str, *ts: torch.Tensor) -> None:
    for t in ts:
        if t.dtype != torch.float32:
            raise InvalidArgumentError(f"{op}: the Triton path computes in float32, got {t.dtype} "
                                       "(use backend='torch' for other dtypes)")


def _seg_sum_triton(u, ptr, idx, S, *, wbe=None, whe=None, rs=None):
    seg, _, _ = build("hmm_product", _kernels)
    Bn, H, E = u.shape
    out = torch.empty(Bn, H, S, dtype=torch.float32, device=u.device)
    if Bn == 0 or H == 0 or S == 0:
        return out
    dummy = u
    seg[(Bn, S, -(-H // _SEG_BLOCK_H))](
        u.contiguous(), dummy if wbe is None else wbe.contiguous(),
        dummy if whe is None else whe.contiguous(), dummy if rs is None else rs.contiguous(),
        ptr, idx, out, H, E, S,
        HAS_WBE=wbe is not None, HAS_WHE=whe is not None, HAS_RS=rs is not None,
        BLOCK_H=_SEG_BLOCK_H, BLOCK_K=_SEG_BLOCK_K,
    )
    return out


# ---------------------------------------------------------------------------- public ops


def emission_marginal(
    B_h: torch.Tensor, labels: torch.Tensor, edge_label: torch.Tensor | None = None, *,
    backend: str = "auto",
) -> torch.Tensor:
    """``Y[h, l] = Σ_{v ∈ label l} B_h[h, v]`` → [H, L]; with ``edge_label`` given, Algorithm
    1's ``input = B_h B_fᵀ`` → [H, E] (``Y[:, edge_label]``)."""
    be = resolve_backend(backend, B_h, labels, op="emission_marginal")
    H, V = B_h.shape
    L, W = labels.shape
    if W != (V + 31) // 32:
        raise InvalidArgumentError(f"emission_marginal: labels [L, {W}] do not match V = {V}")
    if be == "torch":
        Y = emission_marginal_ref(B_h, labels)
    else:
        _need_f32("emission_marginal", B_h)
        _, em, _ = build("hmm_product", _kernels)
        Y = torch.zeros(H, L, dtype=torch.float32, device=B_h.device)
        if H and L:
            em[(-(-H // _EM_BLOCK_H), -(-L // _EM_BLOCK_L))](
                B_h.contiguous(), labels.contiguous(), Y, H, V, L, W,
                BLOCK_H=_EM_BLOCK_H, BLOCK_L=_EM_BLOCK_L, BLOCK_V=_EM_BLOCK_V,
            )
    return Y if edge_label is None else Y[:, edge_label]


def emission_term(
    X: torch.Tensor, B_h: torch.Tensor, edge_label: torch.Tensor, labels: torch.Tensor, *,
    classes: TokenClasses | None = None, backend: str = "auto",
) -> torch.Tensor:
    """``out[b, v] = Σ_h Σ_{e: v ∈ label(e)} B_h[h, v] X[b, h, e]``: X [B, H, E] → [B, V]
    (X [H, E] → [V]).  With ``X = α_t ∘ β_t`` this is Algorithm 1's return value
    ``p_prod(x_t = v, x_<t)`` up to the messages' scales.

    Computed through token classes (module docstring): ``classes`` is
    ``TokenClasses.from_labels(labels, V)`` (on X's device); when not given it is built on the
    first call for this ``labels`` tensor and cached (a small per-process cache keyed by the
    tensor's identity and version).  Raises ValueError on mismatched shapes."""
    be = resolve_backend(backend, X, B_h, labels, op="emission_term")
    H, V = B_h.shape
    L, W = labels.shape
    if X.shape[-2] != H or X.shape[-1] != edge_label.shape[0] or X.dim() not in (2, 3):
        raise InvalidArgumentError(f"emission_term: X must be [B, {H}, {edge_label.shape[0]}] or "
                                   f"[{H}, {edge_label.shape[0]}], got {tuple(X.shape)}")
    if W != (V + 31) // 32:
        raise InvalidArgumentError(f"emission_term: labels [L, {W}] do not match V = {V}")
    tc = classes if classes is not None else _classes_for(labels, V)
    if tc.vocab_size != V or tc.membership.shape[0] != L:
        raise InvalidArgumentError(f"emission_term: classes are for V = {tc.vocab_size}, "
                                   f"L = {tc.membership.shape[0]}; got V = {V}, L = {L}")
    squeeze = X.dim() == 2
    X3 = X[None] if squeeze else X
    Bn = X3.shape[0]
    Y = _label_sums(X3, edge_label, L)  # [B, H, L]
    if be == "torch":
        out = _emission_term_classes(Y, B_h, tc)
        return out[0] if squeeze else out
    _need_f32("emission_term", X, B_h)
    out = torch.zeros(Bn, V, dtype=torch.float32, device=X.device)
    if Bn and V and H:
        Z = (Y @ tc.membership.to(torch.float32)).contiguous()  # [B, H, C]
        _, _, et = build("hmm_product", _kernels)
        et[(Bn, -(-V // _ET_BLOCK_V))](
            Z, B_h.contiguous(), tc.token_class, out, H, V, tc.num_classes,
            BLOCK_H=_ET_BLOCK_H, BLOCK_V=_ET_BLOCK_V,
        )
    return out[0] if squeeze else out


def hmm_forward_step(
    alpha: torch.Tensor, tokens: torch.Tensor, A_h: torch.Tensor, B_h: torch.Tensor,
    edge_src: torch.Tensor, edge_dst: torch.Tensor, edge_label: torch.Tensor,
    labels: torch.Tensor, num_states: int, *, csr: EdgeCSR | None = None,
    backend: str = "auto",
):
    """Emit the realized tokens, then transition (Algorithm 1, Step 2, ``t > 1``):
    ``α'[b] = (A_h ⊗ A_f)ᵀ (α[b] ∘ B(:, tokens[b]))``.

    Args:
        alpha: [B, H, E] (scaled) forward messages; tokens: int [B].
        csr: :func:`edge_csr` of the automaton (built here if not given).
    Returns:
        ``(α' / z, log z)`` with ``z[b] = Σ α'[b]`` ([B, H, E], [B]); an id in no label set of
        an edge with mass (EOS, out of range) gives zeros and ``-inf``.
    """
    be = resolve_backend(backend, alpha, A_h, B_h, labels, op="hmm_forward_step")
    if alpha.dim() != 3:
        raise InvalidArgumentError(
            f"hmm_forward_step: alpha must be [B, H, E], got {tuple(alpha.shape)}")
    if be == "torch":
        return _hmm_forward_step_torch(alpha, tokens, A_h, B_h, edge_src, edge_dst, edge_label,
                                       labels, num_states)
    _need_f32("hmm_forward_step", alpha, A_h, B_h)
    csr = csr or edge_csr(edge_src, edge_dst, num_states)
    V = B_h.shape[1]
    tok = tokens.to(torch.int64).reshape(-1)
    valid = (tok >= 0) & (tok < V)
    emit_h = (B_h[:, torch.where(valid, tok, 0)].T * valid[:, None]).contiguous()
    bits = _token_bits(labels, edge_label, tok, V).to(torch.float32)
    c = _seg_sum_triton(alpha, csr.in_ptr, csr.in_idx, num_states, wbe=bits, rs=emit_h)
    return _normalize((A_h.T @ c)[..., csr.edge_src])


def hmm_backward_messages(
    n: int, A_h: torch.Tensor, emission: torch.Tensor, edge_src: torch.Tensor,
    edge_dst: torch.Tensor, final: torch.Tensor, num_states: int, *,
    csr: EdgeCSR | None = None, backend: str = "auto",
):
    """Algorithm 1, Step 1: ``β_n = 1_H fᵀ``, ``β_{k-1} = (A_h ⊗ A_f)(input ∘ β_k)``.

    Args:
        n: the budget (>= 1); emission: ``input = B_h B_fᵀ`` [H, E] (see
            :func:`emission_marginal`); final: bool [S] accepting states.
    Returns:
        ``(beta, log_scale)``: [n, H, E] and [n]; ``β_k = beta[k - 1] * exp(log_scale[k - 1])``
        for k = 1..n (memory: ``n · H · E`` floats).
    """
    if n < 1:
        raise InvalidArgumentError(f"hmm_backward_messages: n must be >= 1, got {n}")
    be = resolve_backend(backend, A_h, emission, final, op="hmm_backward_messages")
    if be == "torch":
        return hmm_backward_messages_ref(n, A_h, emission, edge_src, edge_dst, final,
                                         num_states)
    _need_f32("hmm_backward_messages", A_h, emission)
    csr = csr or edge_csr(edge_src, edge_dst, num_states)
    H, E = emission.shape
    emission = emission.contiguous()
    beta = torch.empty(n, H, E, dtype=torch.float32, device=emission.device)
    logs = torch.empty(n, dtype=torch.float32, device=emission.device)
    b, ls = _normalize(final.to(torch.float32)[edge_dst].expand(H, E)[None])
    beta[n - 1], logs[n - 1] = b[0], ls[0]
    for k in range(n - 1, 0, -1):
        c = _seg_sum_triton(beta[k][None], csr.out_ptr, csr.out_idx, num_states, whe=emission)
        b, ls = _normalize((A_h @ c[0])[:, csr.edge_dst][None])
        beta[k - 1], logs[k - 1] = b[0], ls[0] + logs[k]
    return beta, logs
