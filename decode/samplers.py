"""Token-level samplers from the local posterior (paper 000, eq. 1):

    p(x) = p0(x) 1_C(x) / Z,      Z = sum_x p0(x) 1_C(x)

``p0``: the LM's next-token distribution (log-probabilities float [V]); ``1_C``: a black-box check
``check(token) -> bool`` (or, for the batched variant, ``check_many(rows, tokens) -> bool [k]``).

* :func:`rejection_sample` — draw from p0 until a token passes (exact, no Z estimate);
* :func:`wrs` — Def. 1, weighted rejection sampling with L >= 1 extra loops; Ẑ = L / (n + L);
* :func:`awrs` — Def. 2, adaptive weighted rejection sampling (rejections are removed; one extra
  loop); Ẑ = (1 - ψ0) / (n + 1).  With ``proposal_logq`` it runs on another proposal q (e.g. the
  GCD-masked LM) and multiplies Ẑ by p0(x) / q(x), which keeps the pair properly weighted for
  p0 1_C (App. B: E[w f(x)] = Z E_p[f]);
* :func:`awrs_batched` — App. H.1: sampling without replacement by sorting Gumbel-perturbed
  log-probabilities, constraint checks issued in chunks, B rows at once (SMC);
* :func:`awrs_clipped` — App. H.2 (Def. 7): early stop at rejected mass θ0 / θ1; properly weighted
  but may return a dead draw (Ẑ = 0).

Every sampler returns the token, log Ẑ (``-inf`` for a dead draw: no token of positive probability
passes), and counts: ``checks`` (distinct constraint evaluations), ``rejections`` (n).
Randomness: a ``numpy.random.Generator`` (or a seed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..fsa.errors import InvalidArgumentError

__all__ = [
    "TokenDraw",
    "rejection_sample",
    "wrs",
    "awrs",
    "awrs_batched",
    "awrs_clipped",
]


@dataclass(frozen=True)
class TokenDraw:
    """One draw: ``token`` (-1 when dead), ``log_z`` (log Ẑ; ``-inf`` dead; ``nan`` when the
    sampler gives no estimate), ``checks`` (distinct constraint calls), ``rejections`` (n)."""

    token: int
    log_z: float
    checks: int
    rejections: int

    @property
    def z(self) -> float:
        return math.exp(self.log_z) if not math.isnan(self.log_z) else math.nan


def _rng(rng) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _probs(logp) -> np.ndarray:
    lp = logp.detach().double().cpu().numpy() if isinstance(logp, torch.Tensor) else \
        np.asarray(logp, dtype=np.float64)
    p = np.exp(lp - np.max(lp))
    p[~np.isfinite(lp)] = 0.0
    return p / p.sum()


class _Checker:
    """Memoized check (a token is evaluated at most once per draw)."""

    def __init__(self, check: Callable[[int], bool]) -> None:
        self.check = check
        self.memo: dict[int, bool] = {}

    def __call__(self, t: int) -> bool:
        v = self.memo.get(t)
        if v is None:
            v = self.memo[t] = bool(self.check(t))
        return v

    @property
    def calls(self) -> int:
        return len(self.memo)


def _draw(p: np.ndarray, total: float, g: np.random.Generator) -> int:
    """Index drawn with probability p[i] / total (p with zeros for removed entries)."""
    c = np.cumsum(p)
    u = g.random() * c[-1]
    i = int(np.searchsorted(c, u, side="right"))
    return min(i, p.size - 1)


def rejection_sample(logp0, check: Callable[[int], bool], *, rng=None,
                     max_draws: int = 1_000_000) -> TokenDraw:
    """Simple rejection sampling: x ~ p0 until ``check(x)``.  Exact; runtime ~ 1/Z draws.

    Dead (-1) when every token of positive probability has been checked and failed, or after
    ``max_draws`` draws."""
    g = _rng(rng)
    p = _probs(logp0)
    chk = _Checker(check)
    support = int((p > 0).sum())
    c = np.cumsum(p)
    n = 0
    for _ in range(max_draws):
        x = min(int(np.searchsorted(c, g.random() * c[-1], side="right")), p.size - 1)
        if chk(x):
            return TokenDraw(x, math.nan, chk.calls, n)
        n += 1
        if chk.calls >= support:
            break
    return TokenDraw(-1, -math.inf, chk.calls, n)


def wrs(logp0, check: Callable[[int], bool], *, L: int = 1, rng=None,
        max_draws: int = 1_000_000) -> TokenDraw:
    """Weighted rejection sampling (paper 000, Def. 1).

    Loop 0 draws x ~ p0 (with replacement) until it passes; L >= 1 more loops count their
    rejections n_1..n_L; Ẑ = L / (n + L) with n = n_0 + ... + n_L (unbiased negative-binomial
    estimator, Prop. 1).  Checks are memoized, so ``checks`` counts distinct tokens.

    Raises:
        ValueError: L < 1.
    """
    if L < 1:
        raise InvalidArgumentError(f"WRS needs L >= 1 extra loops for an unbiased Ẑ (got L={L})")
    g = _rng(rng)
    p = _probs(logp0)
    c = np.cumsum(p)
    support = int((p > 0).sum())
    chk = _Checker(check)
    n = 0
    x = -1
    draws = 0
    for loop in range(L + 1):
        while True:
            y = min(int(np.searchsorted(c, g.random() * c[-1], side="right")), p.size - 1)
            draws += 1
            if chk(y):
                if loop == 0:
                    x = y
                break
            n += 1
            if draws >= max_draws or (chk.calls >= support and not any(chk.memo.values())):
                return TokenDraw(-1, -math.inf, chk.calls, n)
    return TokenDraw(x, math.log(L) - math.log(n + L), chk.calls, n)


def awrs(logp0, check: Callable[[int], bool], *, rng=None, proposal_logq=None) -> TokenDraw:
    """Adaptive weighted rejection sampling (paper 000, Def. 2; Listing 2).

    Loop 0 draws without replacement among not-yet-rejected tokens until ``x`` passes; ψ0 = p0
    mass of its rejections.  Loop 1 continues from the same reduced set (``x`` stays in it) until
    a token passes.  Ẑ = (1 - ψ0) / (n0 + n1 + 1) (Prop. 3: E[Ẑ] = Z, x ~ p).

    ``proposal_logq``: run the loops on q instead of p0 (support of q must cover p0 1_C) and
    return log Ẑ_q + log p0(x) - log q(x) — properly weighted for p0 1_C, but x then follows
    q 1_C, not p.

    A dead draw (-1, -inf) when every token of positive probability fails.
    """
    g = _rng(rng)
    p = _probs(logp0 if proposal_logq is None else proposal_logq)
    chk = _Checker(check)
    removed = 0.0
    n = 0
    x = -1
    psi0 = 0.0
    for loop in range(2):
        while True:
            if p.sum() <= 0.0:
                return TokenDraw(-1, -math.inf, chk.calls, n)
            y = _draw(p, 1.0 - removed, g)
            if chk(y):
                if loop == 0:
                    x = y
                break
            n += 1
            removed += p[y]
            if loop == 0:
                psi0 += p[y]
            p[y] = 0.0
    log_z = math.log(max(1.0 - psi0, 0.0) or 1e-300) - math.log(n + 1)
    if proposal_logq is not None:
        lp0 = float(logp0[x])
        lq = float(torch.log_softmax(torch.as_tensor(proposal_logq, dtype=torch.float64), -1)[x])
        log_z += lp0 - lq
    return TokenDraw(x, log_z, chk.calls, n)


def awrs_clipped(logp0, check: Callable[[int], bool], *, theta0: float = 0.9,
                 theta1: float = 0.99, rng=None) -> TokenDraw:
    """Clipped AWRS (paper 000, App. H.2, Def. 7): loop 0 stops at an acceptance or once the
    rejected mass exceeds θ0; loop 1 at an acceptance or once the total rejected mass exceeds θ1.

    Ẑ = (n1 + 1)^{1[ψ0 > θ0]} (1 - ψ0) / (n + 1); when loop 0 was clipped, x* is one more draw from
    the remaining tokens and Ẑ = 0 (dead) if it fails.  Not an exact sampler of p, but properly
    weighted (the returned pair, with Ẑ as weight, is unbiased for p0 1_C).

    Raises:
        ValueError: unless 0 < θ0 < θ1 < 1.
    """
    if not 0.0 < theta0 < theta1 < 1.0:
        raise InvalidArgumentError(f"need 0 < theta0 < theta1 < 1 (got {theta0}, {theta1})")
    g = _rng(rng)
    p = _probs(logp0)
    chk = _Checker(check)
    psi0 = 0.0
    n0 = 0
    x = -1
    clipped = False
    while True:
        if p.sum() <= 0.0:
            return TokenDraw(-1, -math.inf, chk.calls, n0)
        y = _draw(p, 1.0, g)
        if chk(y):
            x = y
            break
        n0 += 1
        psi0 += p[y]
        p[y] = 0.0
        if psi0 > theta0:
            clipped = True
            break
    if clipped:
        if p.sum() <= 0.0:
            return TokenDraw(-1, -math.inf, chk.calls, n0)
        y = _draw(p, 1.0, g)
        if not chk(y):
            return TokenDraw(y, -math.inf, chk.calls, n0)
        x = y
    # loop 1
    n1 = 0
    mass = psi0
    while True:
        if p.sum() <= 0.0:
            break
        y = _draw(p, 1.0, g)
        if chk(y):
            break
        n1 += 1
        mass += p[y]
        p[y] = 0.0
        if mass > theta1:
            break
    n = n0 + n1
    log_z = math.log(max(1.0 - psi0, 1e-300)) - math.log(n + 1)
    if clipped:
        log_z += math.log(n1 + 1)
    return TokenDraw(x, log_z, chk.calls, n)


def awrs_batched(logp0: torch.Tensor, check_many: Callable[[torch.Tensor, torch.Tensor],
                 torch.Tensor], *, chunk: int = 8, rng=None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """AWRS for B rows at once with Gumbel keys (paper 000, App. H.1, Def. 6).

    Each loop sorts ``log p0 + Gumbel`` (rejected tokens excluded) in descending order — the order
    of sampling without replacement — and checks tokens in that order, ``chunk`` per row per
    round, all rows' pending checks in one ``check_many(rows, tokens)`` call.  Results past the
    first acceptance are kept (a token is never checked twice in one draw).  Loop 1 draws fresh
    keys over the tokens not rejected in loop 0, so x may be drawn again.

    Args:
        logp0: float [B, V] log-probabilities (``-inf`` = impossible).
        check_many: ``(rows int64 [k], tokens int64 [k]) -> bool [k]``.
        chunk: checks per row per round (1 = the sequential algorithm's exact call count).

    Returns:
        ``(tokens int64 [B], log_z float64 [B], checks int64 [B], rejections int64 [B])``; dead rows
        have token -1 and log_z -inf.
    """
    g = _rng(rng)
    lp = logp0.detach().double().cpu().numpy()
    B, V = lp.shape
    lp = lp - np.logaddexp.reduce(np.where(np.isfinite(lp), lp, -np.inf), axis=1, keepdims=True)
    p = np.exp(lp)
    known: list[dict[int, bool]] = [dict() for _ in range(B)]
    removed = np.zeros((B, V), dtype=bool)
    psi0 = np.zeros(B)
    n = np.zeros(B, dtype=np.int64)
    x = np.full(B, -1, dtype=np.int64)
    dead = np.zeros(B, dtype=bool)
    for loop in range(2):
        keys = lp + g.gumbel(size=(B, V))
        keys[removed | ~np.isfinite(lp)] = -np.inf
        order = np.argsort(-keys, axis=1, kind="stable")
        nfin = np.isfinite(keys).sum(axis=1)
        pos = np.zeros(B, dtype=np.int64)
        done = dead.copy()
        while not done.all():
            rows_q: list[int] = []
            toks_q: list[int] = []
            for b in np.nonzero(~done)[0]:
                k = 0
                j = pos[b]
                while j < nfin[b] and k < chunk:
                    t = int(order[b, j])
                    if t in known[b]:
                        if known[b][t]:
                            break
                    else:
                        rows_q.append(int(b))
                        toks_q.append(t)
                        k += 1
                    j += 1
            if rows_q:
                res = check_many(torch.tensor(rows_q, dtype=torch.long),
                                 torch.tensor(toks_q, dtype=torch.long))
                for b, t, v in zip(rows_q, toks_q, res.tolist()):
                    known[b][t] = bool(v)
            # advance each row along its order through known results
            for b in np.nonzero(~done)[0]:
                j = pos[b]
                while j < nfin[b]:
                    t = int(order[b, j])
                    v = known[b].get(t)
                    if v is None:
                        break
                    if v:
                        if loop == 0:
                            x[b] = t
                        done[b] = True
                        break
                    n[b] += 1
                    removed[b, t] = True
                    if loop == 0:
                        psi0[b] += p[b, t]
                    j += 1
                pos[b] = j
                if not done[b] and j >= nfin[b]:
                    dead[b] = True
                    done[b] = True
    log_z = np.log(np.maximum(1.0 - psi0, 1e-300)) - np.log(n + 1.0)
    log_z[dead] = -np.inf
    x[dead] = -1
    checks = np.array([len(k) for k in known], dtype=np.int64)
    return (torch.from_numpy(x), torch.from_numpy(log_z), torch.from_numpy(checks),
            torch.from_numpy(n))
