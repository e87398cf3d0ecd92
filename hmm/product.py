"""The product of an HMM and a token automaton (paper 002, Thm. 4.4 and Algorithm 1).

``p_prod(x) ∝ p_hmm(x) · #accepting paths of x`` over the sequences allowed by a token budget
``n``; for a DFA this is ``p_hmm(x | C)`` (Thm. 4.3: one accepting path per accepted string).
:class:`HMMAutomatonProduct` computes, for a batch of prefixes, the next-token distribution
``p_prod(x_t = v | x_<t)`` for every ``v`` (Algorithm 1), the look-ahead
``p_hmm(C | x_{1:t})`` of the P-GCD potential (§4.3, :meth:`~HMMAutomatonProduct.
log_constraint_prob`) and the prefix weight ``p_hmm(x_{1:t} | C) / p_hmm(x_{1:t}) =
p_hmm(C | x_{1:t}) / p_hmm(C)`` (:meth:`~HMMAutomatonProduct.log_constraint_weight`).

Budget and EOS convention (the same as the GCD masks, ``/tmp/team`` "Budget convention"):
a sequence is ``k ≤ n`` text tokens accepted by the automaton, followed by one EOS id when
``k < n`` (generation stops at EOS; stopping because the budget ran out needs no EOS).  This is
the paper's "length exactly n" target for the automaton augmented with an EOS edge from every
accepting state into an absorbing state that emits any token: the HMM mass of the wildcard tail
is 1, so ``p_prod(x_{1:k} EOS) ∝ p_hmm(x_{1:k}, x_{k+1} = EOS) · #paths(x_{1:k})`` and
``p_prod(x_{1:n}) ∝ p_hmm(x_{1:n}) · #paths(x_{1:n})``.  A token then has positive probability
iff the GCD mask allows it (for an HMM with positive emissions).  An automaton without EOS ids
targets exactly ``n`` tokens (the paper's setting).

Messages (H hidden states, S automaton states, E edges, L label sets, K token classes):

* **Backward** (Step 1 of Algorithm 1, once per budget ``n``; stored for k = 1..n)::

      R_n[h, s] = final[s]
      Q_k[h, s] = final[s] · B_eos[h]  +  Σ_{e: src(e)=s} P[h, label(e)] · R_k[h, dst(e)]
      R_{k-1}   = A_h @ Q_k                                   # [H, H] @ [H, S]

  ``R_k[h, s]`` is the mass of the continuations ``x_{k+1..}`` given ``z_k = h`` (the HMM state
  that emitted ``x_k``) and automaton state ``s`` after ``x_k``; ``P = B_h B_f^T`` [H, L] is the
  emission marginalized over each label set ("input" in Algorithm 1) and ``B_eos[h] = Σ_eos
  B_h[h, eos]``.  The paper's edge message ``β_k`` [H, E] is ``β_k[h, e] = R_k[h, dst(e)]``, and
  the recursion above is its ``β_{k-1} = (A_f (A_h (input ∘ β_k)^T))^T`` (eq. 5) with
  ``A_f = T_in T_out`` applied by index operations: ``T_out`` is the scatter-add over
  ``edge_src`` (``index_add_``) and ``T_in`` the gather at ``edge_dst``; multiplying by ``A_h``
  *between* them, on [H, S] instead of [H, E], costs ``O(H² S + H E)`` per step instead of
  ``O(H² E + H E²)`` — the Kronecker product is never formed.  Each column is rescaled to max 1
  with its log scale ``ρ_k[s]`` kept apart, so nothing underflows at 1,000 steps.

* **Forward** (Step 2, per request, incremental): because the prefix is observed, the forward
  message of Algorithm 1 factorizes, ``α_t[h, e] = a_t[h] · c_t[src(e)]`` with
  ``a_t = p_hmm(z_t | x_<t)`` [B, H] (the HMM filter) and ``c_t[s]`` [B, S] the number of
  automaton paths reading ``x_<t`` into ``s`` (both rescaled, log scales kept).

* **Next token** (the ``diag(B_f^T (B_h^T (α_t ∘ β_t)))`` line), without an H·E·V term.
  First the edges are summed per label set (only edges leaving states with ``c_t > 0`` —
  "active" edges ``E_a`` with ``L_u`` distinct label sets)::

      M[b, h, l] = Σ_{e: label(e)=l} c_t[b, src(e)] · R_t[h, dst(e)]     O(B·H·E_a)
      mass[b, eos] = (Σ_s c_t[b, s] final[s]) · Σ_h a_t[b, h] B_h[h, eos]

  then one of two exact paths (``emission_path="auto"`` takes "labels" when ``L_u ≤ 16``):

  - "labels": ``mass[b, v] = Σ_{l active} bit(l, v) · ((a ∘ M)^T B_h)[b, l, v]`` — one GEMM
    ``[B·L_u, H] @ [H, V]`` plus a masked sum, ``O(B·L_u·H·V)`` at GEMM speed (a DFA in a
    JSON schema has one or two active label sets per state);
  - "classes": tokens with the same membership in all ``L`` label sets share a class (computed
    once, ``K ≤ min(V, 2^L)``); ``N[b, h, k] = Σ_{l ∋ k} M[b, h, l]`` (``O(B·H·L·K)``) and
    ``mass[b, v] = Σ_h a_t[b, h] · B_h[h, v] · N[b, h, class(v)]`` (``O(B·H·V)`` elementwise,
    in vocabulary chunks) — independent of how many label sets are active.

One decoding step therefore costs ``O(B·(H² + H·E + min(L_u·H·V, H·L·K + H·V)))`` after the
one-time ``O(n·(H²·S + H·E))`` backward pass; memory ``O(n·H·S)`` for the stored backward
messages.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ..fsa.automaton import TokenAutomaton, unpack_bits
from ..fsa.errors import (
    InvalidArgumentError,
    TokenError,
    UnsatisfiableBudgetError,
    VocabularyMismatchError,
)
from .model import HMM

__all__ = ["HMMAutomatonProduct", "ProductState", "token_classes"]

_NEG_INF = float("-inf")


def token_classes(
    automaton: TokenAutomaton, exclude: tuple[int, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """Partition the vocabulary by label membership.

    Returns ``(cls int64 [V], member bool [L, K])``: token ``v`` is in label set ``l`` iff
    ``member[l, cls[v]]``.  Ids in ``exclude`` (EOS) are put in a class that belongs to no set.
    Cost: one unpack of the ``L × V`` label bits and one ``np.unique`` over ``V`` rows of
    ``ceil(L/8)`` bytes."""
    V = automaton.vocab_size
    bits = unpack_bits(automaton.labels.cpu(), V).numpy()  # [L, V] bool
    if exclude:
        bits = bits.copy()
        bits[:, list(exclude)] = False
    cols = np.packbits(bits.T, axis=1)  # [V, ceil(L/8)] uint8
    uniq, inv = np.unique(cols, axis=0, return_inverse=True)
    member = np.unpackbits(uniq, axis=1)[:, : bits.shape[0]].T.astype(bool)  # [L, K]
    return torch.from_numpy(inv.reshape(-1).astype(np.int64)), torch.from_numpy(member)


@dataclass(frozen=True, eq=False)
class ProductState:
    """Per-request forward state of :class:`HMMAutomatonProduct` (batched, reorderable).

    Fields (B rows, all at the same step ``t`` = tokens consumed so far):

    * ``a`` [B, H]: ``p_hmm(z_{t+1} | x_{1:t})`` (predictive filter);
    * ``f`` [B, H]: ``p_hmm(z_t | x_{1:t})`` (filter after the last emission; = π at t = 0);
    * ``c`` [B, S]: automaton path counts into each state, rescaled to max 1;
    * ``log_c_scale`` [B]: log of that rescaling (log #paths when the counts are 1-hot);
    * ``log_p_hmm`` [B]: ``log p_hmm(x_{1:t})``;
    * ``done`` bool [B]: the row is finished — it emitted EOS, or it is dead (below);
      ``log_weight_done`` [B]: its final ``log p_hmm(x | C) − log p_hmm(x)``
      (``= log #accepting paths − log p_hmm(C)``), ``−inf`` for a dead row.

    A *dead* row (:attr:`dead`: ``done`` with ``log_weight_done = −inf``) consumed a token of
    product probability 0 — no accepted sequence within the budget continues with it (an SMC
    proposal that ignores the budget, e.g. LCD, draws such tokens).  It has weight 0:
    :meth:`HMMAutomatonProduct.log_constraint_prob` and ``log_constraint_weight`` are ``−inf``
    for it, later advances ignore its tokens, and its other fields keep their values from
    before the fatal token (except ``log_p_hmm``, which includes it).
    """

    t: int
    a: torch.Tensor
    f: torch.Tensor
    c: torch.Tensor
    log_c_scale: torch.Tensor
    log_p_hmm: torch.Tensor
    done: torch.Tensor
    log_weight_done: torch.Tensor

    @property
    def batch_size(self) -> int:
        return int(self.a.shape[0])

    @property
    def dead(self) -> torch.Tensor:
        """bool [B]: the row consumed a token of product probability 0 (weight 0 for good)."""
        return self.done & torch.isneginf(self.log_weight_done)

    def select(self, indices: torch.Tensor) -> ProductState:
        """Rows ``indices`` (int64 [B']) — SMC resampling is this index_select."""
        idx = indices.to(self.a.device)
        return ProductState(self.t, self.a[idx], self.f[idx], self.c[idx], self.log_c_scale[idx],
                            self.log_p_hmm[idx], self.done[idx], self.log_weight_done[idx])


_HMM_ZERO_WARNED = False


def _warn_hmm_zero(tok: int) -> None:
    """Warn once per process: the HMM cannot emit a token the constraint allows."""
    global _HMM_ZERO_WARNED
    if _HMM_ZERO_WARNED:
        return
    _HMM_ZERO_WARNED = True
    warnings.warn(
        f"the HMM gives probability 0 to token id {tok} or to every accepted continuation "
        "after it, which the constraint allows: the row gets P-GCD weight 0 (SMC with this "
        "potential never returns such outputs, a bias towards what the HMM can emit); smooth "
        "the HMM's emissions (warned once)",
        stacklevel=3,
    )


class HMMAutomatonProduct:
    """``p_prod ∝ p_hmm · p_fa`` for sequences within a budget of ``max_tokens`` tokens.

    Args:
        hmm: the HMM (its ``vocab_size`` must equal the automaton's; when both carry a
            vocabulary fingerprint they must agree).
        automaton: the constraint.
        max_tokens: the budget ``n`` (tokens that may be generated, EOS included).
        dtype: compute dtype (default: the HMM's; float64 for exactness checks).

    Raises:
        VocabularyMismatchError: different vocabularies.
        UnsatisfiableBudgetError: no accepted sequence fits in ``max_tokens`` tokens (or all of
            them have HMM probability 0).

    Attributes:
        log_gamma: ``log p_hmm(C)`` (float; ``C`` weighted by accepting-path counts for an
            NFA), the normalizer of ``p_prod`` from the backward pass.

    The object is immutable after construction and may be shared by requests with the same
    budget; per-request state lives in :class:`ProductState`.
    """

    def __init__(self, hmm: HMM, automaton: TokenAutomaton, max_tokens: int, *,
                 dtype: torch.dtype | None = None, chunk: int = 8192,
                 emission_path: str = "auto", max_label_path: int = 16):
        if emission_path not in ("auto", "labels", "classes"):
            raise InvalidArgumentError(
                f"emission_path must be auto, labels or classes: {emission_path!r}")
        self.emission_path = emission_path
        self.max_label_path = int(max_label_path)
        self._rows_cache: dict[int, torch.Tensor] = {}
        if hmm.vocab_size != automaton.vocab_size:
            raise VocabularyMismatchError(
                f"V={automaton.vocab_size}", f"V={hmm.vocab_size}", what="HMM vocabulary size")
        if hmm.fingerprint is not None and automaton.fingerprint and \
                hmm.fingerprint != automaton.fingerprint:
            raise VocabularyMismatchError(automaton.fingerprint, hmm.fingerprint, what="HMM")
        if max_tokens < 0:
            raise UnsatisfiableBudgetError(max_tokens, 0)
        self.hmm = hmm if dtype is None else hmm.to(dtype=dtype)
        self.automaton = automaton
        self.n = int(max_tokens)
        self.chunk = int(chunk)
        dev, dt = self.hmm.device, self.hmm.dtype
        self.device, self.dtype = dev, dt
        V = automaton.vocab_size
        self.eos_ids = tuple(int(e) for e in automaton.eos_token_ids if 0 <= int(e) < V)
        cls, member = token_classes(automaton, exclude=self.eos_ids)
        self.cls = cls.to(dev)
        self.member = member.to(dev)  # [L, K] bool
        self.member_f = member.to(dev, dt)
        K = member.shape[1]
        self.src = automaton.edge_src.to(dev)
        self.dst = automaton.edge_dst.to(dev)
        self.lab = automaton.edge_label.to(dev)
        self.final = automaton.final.to(dev)
        self.S = automaton.num_states
        self.E = automaton.num_edges
        self.L = automaton.num_labels
        self.K = K
        B = self.hmm.emission
        H = self.hmm.hidden_size
        # P = B_h B_f^T via classes: Bc[h, k] = Σ_{v: cls(v)=k} B[h, v]; P = Bc @ member^T
        Bc = torch.zeros((H, K), dtype=dt, device=dev).index_add_(1, self.cls, B)
        self.P = Bc @ self.member_f.T  # [H, L]
        eos = torch.tensor(self.eos_ids, dtype=torch.long, device=dev)
        self.eos_t = eos
        self.B_eos_each = B[:, eos]  # [H, n_eos]
        self.B_eos = self.B_eos_each.sum(1)  # [H]
        self._backward()

    def _label_rows(self, lab_act: torch.Tensor) -> torch.Tensor:
        """[Lu, V] 0/1 rows (HMM dtype) of the label sets ``lab_act`` (EOS ids cleared),
        unpacked once per label set and cached."""
        V = self.automaton.vocab_size
        missing = [int(x) for x in lab_act.tolist() if int(x) not in self._rows_cache]
        if missing:
            rows = unpack_bits(self.automaton.labels[missing].cpu(), V)
            if self.eos_ids:
                rows[:, list(self.eos_ids)] = False
            rows = rows.to(self.device, self.dtype)
            for i, l in enumerate(missing):
                self._rows_cache[l] = rows[i]
        return torch.stack([self._rows_cache[int(x)] for x in lab_act.tolist()]) if \
            lab_act.numel() else torch.zeros((0, V), dtype=self.dtype, device=self.device)

    # ------------------------------------------------------------------ Step 1: backward

    def _backward(self) -> None:
        n, H, S = self.n, self.hmm.hidden_size, self.S
        dev, dt = self.device, self.dtype
        A = self.hmm.transition
        fin = self.final.to(dt)
        has_eos = len(self.eos_ids) > 0
        R = torch.zeros((n + 1, H, S), dtype=dt, device=dev)
        rho = torch.full((n + 1, S), _NEG_INF, dtype=torch.float64, device=dev)
        R[n] = fin[None, :].expand(H, S)
        rho[n] = torch.where(self.final, 0.0, _NEG_INF).double()
        Pe = self.P[:, self.lab]  # [H, E]
        log_gamma = _NEG_INF
        for k in range(n, 0, -1):
            # Q_k from R_k (R index k = continuation after step k)
            Qh, sigma = self._q_from_r(R[k], rho[k], Pe, fin, has_eos)
            if k == 1:
                g = float((self.hmm.initial.to(dt) @ Qh[:, 0]).double())
                log_gamma = float(sigma[0]) + (math.log(g) if g > 0 else _NEG_INF)
                break
            Rk = A @ Qh
            m = Rk.amax(0)
            ok = m > 0
            R[k - 1] = Rk / torch.where(ok, m, torch.ones_like(m))[None, :]
            log_m = torch.log(torch.where(ok, m, 1).double())
            rho[k - 1] = torch.where(ok, sigma + log_m, _NEG_INF)
        if n == 0:
            # nothing may be generated: accepted iff the initial state is final
            log_gamma = 0.0 if bool(self.final[0]) else _NEG_INF
        self.R, self.rho = R, rho
        self.log_gamma = log_gamma
        if not math.isfinite(log_gamma):
            minimum = self.automaton.min_tokens_to_accept() if hasattr(
                self.automaton, "min_tokens_to_accept") else -1
            raise UnsatisfiableBudgetError(self.n, int(minimum))

    def _q_from_r(self, Rk, rho_k, Pe, fin, has_eos):
        """Scaled ``Q`` from scaled ``R`` (see the module docstring): returns ``(Q̂ [H, S],
        σ [S] float64)`` with ``Q = Q̂ · exp(σ)`` per column."""
        S = self.S
        dev = self.device
        r_dst = rho_k[self.dst]  # [E]
        sigma = torch.full((S,), _NEG_INF, dtype=torch.float64, device=dev)
        if self.E:
            sigma = sigma.scatter_reduce(0, self.src, r_dst, reduce="amax", include_self=True)
        if has_eos:
            sigma = torch.where(self.final, torch.clamp(sigma, min=0.0), sigma)
        ok = torch.isfinite(sigma)
        sig_safe = torch.where(ok, sigma, 0.0)
        w = torch.exp(r_dst - sig_safe[self.src]).to(self.dtype)  # [E]; 0 where rho=-inf
        Qh = torch.zeros((Pe.shape[0], S), dtype=self.dtype, device=dev)
        if self.E:
            Qh.index_add_(1, self.src, Pe * Rk[:, self.dst] * w[None, :])
        if has_eos:
            # final states have σ ≥ 0, so exp(-σ) ≤ 1; others contribute nothing (and their
            # exp(-σ) may overflow: never evaluate it there)
            eos_w = torch.where(self.final, torch.exp(-torch.where(self.final, sig_safe, 0.0)), 0.0)
            Qh += self.B_eos[:, None] * eos_w.to(self.dtype)[None, :]
        return Qh, sigma

    # ------------------------------------------------------------------ Step 2: forward

    def start(self, batch_size: int = 1) -> ProductState:
        """State before any token (``t = 0``) for ``batch_size`` rows."""
        dev, dt = self.device, self.dtype
        H = self.hmm.hidden_size
        pi = self.hmm.initial.to(dt)
        c = torch.zeros((batch_size, self.S), dtype=dt, device=dev)
        c[:, 0] = 1
        z = torch.zeros(batch_size, dtype=torch.float64, device=dev)
        return ProductState(0, pi.expand(batch_size, H).clone(), pi.expand(batch_size, H).clone(),
                            c, z.clone(), z.clone(), torch.zeros(batch_size, dtype=torch.bool,
                                                                 device=dev), z.clone())

    def advance(self, state: ProductState, tokens: torch.Tensor, *,
                strict: bool = False) -> ProductState:
        """Consume one token per row (int64 [B]); rows already finished (EOS or dead) ignore
        theirs, whatever the id.

        A live row whose token has probability 0 under the product — the constraint does not
        allow it at all, or no accepted sequence within the budget continues with it (EOS in a
        state that does not accept; a text token from which acceptance is out of reach in the
        remaining budget; at ``t + 1 = n``, a text token that does not end accepted), or the HMM
        cannot emit it — becomes a dead row (:attr:`ProductState.dead`: weight 0, log
        look-ahead ``−inf``, and so on forever), unless ``strict``.

        Raises:
            TokenError: a live row's token id is outside the vocabulary ``0..V-1``; with
                ``strict=True``, also a live row's token of product probability 0.
            ValueError: ``tokens`` does not hold exactly one id per row.
            UnsatisfiableBudgetError: the budget is already used up (``t == n``).
        """
        if state.t >= self.n:
            raise UnsatisfiableBudgetError(self.n, state.t + 1)
        dev, dt = self.device, self.dtype
        tok = tokens.to(dev).long().reshape(-1)
        Bn = state.batch_size
        if tok.shape[0] != Bn:
            raise InvalidArgumentError(f"advance: {tok.shape[0]} tokens for a batch of {Bn}")
        live = ~state.done
        V = self.hmm.vocab_size
        bad = live & ((tok < 0) | (tok >= V))
        if bool(bad.any()):
            i = int(tok[bad][0])
            raise TokenError(f"token id {i} is outside the vocabulary 0..{V - 1}", i)
        safe = torch.where(live, tok, torch.zeros_like(tok))
        is_eos = live & torch.isin(safe, self.eos_t) if self.eos_ids else torch.zeros_like(live)
        # HMM filter
        u = state.a * self.hmm.emission.T[safe]  # [B, H]
        p = u.sum(-1)
        f_new = u / torch.where(p > 0, p, 1)[:, None]
        a_new = f_new @ self.hmm.transition
        log_p = state.log_p_hmm + torch.where(live, torch.log(p.double()), 0.0)
        # automaton path counts (text rows)
        k = self.cls[safe]  # [B]
        on_edge = self.member[self.lab][:, k].T  # [B, E]  token ∈ label(e)
        contrib = state.c[:, self.src] * on_edge.to(dt)
        c_new = torch.zeros_like(state.c).index_add_(1, self.dst, contrib)
        m = c_new.amax(1)
        text = live & ~is_eos
        # EOS rows: accepted-path weight
        acc = (state.c * self.final.to(dt)[None, :]).sum(1)
        auto_dead = (text & (m <= 0)) | (is_eos & (acc <= 0))
        hmm_zero = live & ~(p > 0) & ~auto_dead
        if bool(hmm_zero.any()) and not strict:
            _warn_hmm_zero(int(tok[int(torch.nonzero(hmm_zero)[0])]))
        dead = auto_dead | hmm_zero
        m_safe = torch.where(m > 0, m, 1)
        c_next = torch.where(text[:, None], c_new / m_safe[:, None], state.c)
        log_cs = state.log_c_scale + torch.where(text, torch.log(m_safe.double()), 0.0)
        lw_done = torch.where(
            is_eos,
            torch.log(torch.where(acc > 0, acc, 1).double()) + state.log_c_scale - self.log_gamma,
            state.log_weight_done)
        out = ProductState(
            state.t + 1,
            torch.where(live[:, None], a_new, state.a),
            torch.where(live[:, None], f_new, state.f),
            c_next, log_cs, log_p, state.done | is_eos, lw_done,
        )
        # a text token whose state cannot reach acceptance within the remaining budget
        late = text & ~dead & ~torch.isfinite(self._weight(out))
        if bool(late.any()) and not strict and hasattr(self.automaton, "distance_to_accept"):
            # the automaton alone still reaches acceptance in time: the HMM's zeros killed it
            dist = self.automaton.distance_to_accept().to(dev)
            left = self.n - state.t - 1
            can = ((c_next > 0) & (dist[None, :] <= left)).any(1)
            if bool((late & can).any()):
                _warn_hmm_zero(int(tok[int(torch.nonzero(late & can)[0])]))
        dead = dead | late
        if not bool(dead.any()):
            return out
        if strict:
            b = int(torch.nonzero(dead)[0])
            raise TokenError(
                f"token id {int(tok[b])} at step {state.t + 1} (row {b}) is not allowed: no "
                f"accepted sequence within the budget of {self.n} tokens continues with it",
                int(tok[b]))
        # dead rows: weight 0 for good; keep the (finite) fields from before the token
        d1 = dead[:, None]
        return ProductState(
            out.t,
            torch.where(d1, state.a, out.a),
            torch.where(d1, state.f, out.f),
            torch.where(d1, state.c, out.c),
            torch.where(dead, state.log_c_scale, out.log_c_scale),
            out.log_p_hmm,
            out.done | dead,
            torch.where(dead, _NEG_INF, out.log_weight_done),
        )

    # ------------------------------------------------------------------ queries

    def next_token_logprobs(self, state: ProductState) -> torch.Tensor:
        """float [B, V]: ``log p_prod(x_{t+1} = v | x_{1:t})`` (Algorithm 1's output, normalized).

        ``−inf`` exactly where no accepted sequence within the budget continues with ``v``.
        Rows that emitted EOS put all their mass on their first EOS id (or are all ``−inf`` if
        the automaton has no EOS id); dead rows (:attr:`ProductState.dead`) are all ``−inf``.

        Raises:
            UnsatisfiableBudgetError: the budget is used up (``t == n``).
        """
        t1 = state.t + 1
        if t1 > self.n:
            raise UnsatisfiableBudgetError(self.n, t1)
        dev, dt = self.device, self.dtype
        Bn, H, V = state.batch_size, self.hmm.hidden_size, self.hmm.vocab_size
        Rt, rho = self.R[t1], self.rho[t1]  # [H, S], [S]
        logc = torch.log(state.c.double())  # [B, S]
        logw = logc[:, self.src] + rho[self.dst][None, :]  # [B, E]
        mx = logw.amax(1) if self.E else torch.full((Bn,), _NEG_INF, dtype=torch.float64,
                                                    device=dev)
        mx_safe = torch.where(torch.isfinite(mx), mx, 0.0)
        w = torch.exp(logw - mx_safe[:, None]).to(dt)  # [B, E]
        out = torch.empty((Bn, V), dtype=torch.float64, device=dev)
        Bm = self.hmm.emission
        # label sets on edges with a nonzero weight for some row (those leaving reachable states)
        act_e = torch.nonzero((w > 0).any(0)).reshape(-1)
        lab_act, lab_pos = torch.unique(self.lab[act_e], return_inverse=True)
        Lu = int(lab_act.numel())
        path = self.emission_path
        if path == "auto":
            path = "labels" if Lu <= self.max_label_path else "classes"
        Wt = w[:, None, act_e] * Rt[:, self.dst[act_e]][None, :, :]  # [B, H, E_act]
        if path == "labels":
            # mass[b, v] = Σ_{l active} bit(l, v) · Σ_h a[b,h] M[b,h,l] B[h,v]: one GEMM
            # [B·Lu, H] @ [H, V] (cost B·Lu·H·V at GEMM speed) + a masked sum over Lu
            M = torch.zeros((Bn, H, Lu), dtype=dt, device=dev).index_add_(2, lab_pos, Wt)
            Y = (state.a[:, :, None] * M).transpose(1, 2).reshape(Bn * Lu, H)
            G = (Y @ Bm).reshape(Bn, Lu, V)
            mass = (G * self._label_rows(lab_act)[None]).sum(1)
            out[:] = torch.log(mass.double()) + mx_safe[:, None]
        else:
            # token classes: N[b,h,k] = Σ_{l ∋ k} M[b,h,l]; mass[b,v] = Σ_h a B N[.., cls(v)]
            M = torch.zeros((Bn, H, self.L), dtype=dt, device=dev).index_add_(
                2, self.lab[act_e], Wt)
            N = M @ self.member_f  # [B, H, K]
            Z = state.a[:, :, None] * N  # [B, H, K]
            for lo in range(0, V, self.chunk):
                hi = min(V, lo + self.chunk)
                zz = Z[:, :, self.cls[lo:hi]]  # [B, H, c]
                mass = (zz * Bm[None, :, lo:hi]).sum(1)
                out[:, lo:hi] = torch.log(mass.double()) + mx_safe[:, None]
        out = torch.where(torch.isfinite(mx)[:, None], out, torch.full_like(out, _NEG_INF))
        if self.eos_ids:
            acc = (state.c * self.final.to(dt)[None, :]).sum(1).double()  # [B]
            pe = (state.a @ self.B_eos_each).double()  # [B, n_eos]
            out[:, self.eos_t] = torch.log(acc[:, None] * pe)
        out = out - torch.logsumexp(out, dim=1, keepdim=True)
        if bool(state.done.any()):
            d = torch.full((V,), _NEG_INF, dtype=torch.float64, device=dev)
            if self.eos_ids:
                d[self.eos_ids[0]] = 0.0
            out[state.done] = d
            dead = state.dead
            if bool(dead.any()):
                out[dead] = _NEG_INF
        return out

    def log_constraint_prob(self, state: ProductState) -> torch.Tensor:
        """float64 [B]: ``log p_hmm(C | x_{1:t})``, the HMM look-ahead of the P-GCD potential
        ``φ_pgcd(x_{1:t}) ∝ p_lm(x_{1:t}) · p_hmm(C | x_{1:t})`` (paper 002 §4.3), on one scale
        for every row:

        * ``t = 0``: ``log p_hmm(C)`` (:attr:`log_gamma`);
        * an unfinished row: ``log Σ_{y ⊒ x_{1:t}} p_hmm(y) · #paths(y) − log p_hmm(x_{1:t})``
          over the complete sequences ``y`` within the budget (EOS convention of the module
          docstring; ``#paths = 1`` for a DFA, so this is ``p_hmm(C | x_{1:t}) ≤ 1``; an NFA
          weights ``C`` by accepting-path counts, Thm. 4.4, and the value may exceed 0);
        * a finished row — it emitted EOS, or ``t = n`` (the budget is used up): exactly 0
          (``p_hmm(C | x) = 1``) when ``x`` is accepted, ``−inf`` when it is not;
        * a dead row (:attr:`ProductState.dead`: it consumed a token with which no accepted
          sequence within the budget continues): ``−inf``, at every later step too.

        ``log_constraint_prob = log_constraint_weight + log p_hmm(C)`` on unfinished rows.
        Cost O(B·H·S)."""
        val = self._weight(state) + self.log_gamma
        fin = state.done
        if state.t == self.n:
            fin = torch.ones_like(fin)
        if bool(fin.any()):
            acc = (state.c * self.final.to(state.c.dtype)[None, :]).sum(1) > 0
            end = torch.where(state.done | acc, 0.0, _NEG_INF).to(torch.float64)
            val = torch.where(fin, end, val)
            val = torch.where(state.dead, _NEG_INF, val)
        return val

    def log_constraint_weight(self, state: ProductState) -> torch.Tensor:
        """float64 [B]: ``log p_hmm(x_{1:t} | C) − log p_hmm(x_{1:t})``
        (``= log p_hmm(C | x_{1:t}) − log p_hmm(C)``, the prefix weight of Algorithm 1's
        ``p_prod``; ``C`` weighted by path counts for an NFA).  0 at ``t = 0``; for a finished
        row, the value at its EOS (``log #paths − log p_hmm(C)``); ``−inf`` for a dead row
        (:attr:`ProductState.dead`).  The P-GCD potential uses
        :meth:`log_constraint_prob` instead (the same up to ``log p_hmm(C)`` on unfinished
        rows, and 0 on finished ones).  Cost O(B·H·S)."""
        return self._weight(state)

    def _weight(self, state: ProductState) -> torch.Tensor:
        if state.t == 0:
            return torch.zeros(state.batch_size, dtype=torch.float64, device=self.device)
        Rt, rho = self.R[state.t], self.rho[state.t]
        logc = torch.log(state.c.double())
        # Σ_{h,s} f[h] c[s] R_t[h, s]: per state s: (f @ R̂_t)[s] · exp(ρ[s]) · c[s]
        fr = torch.log((state.f @ Rt).double()) + rho[None, :] + logc  # [B, S]
        val = torch.logsumexp(fr, dim=1) + state.log_c_scale - self.log_gamma
        return torch.where(state.done, state.log_weight_done, val)

    def log_prefix_prob(self, state: ProductState) -> torch.Tensor:
        """float64 [B]: ``log p_prod(x_{1:t})`` (the prefix marginal of Algorithm 1)."""
        return state.log_p_hmm + self.log_constraint_weight(state)
