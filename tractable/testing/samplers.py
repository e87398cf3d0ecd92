"""Brute-force references for the samplers: toy LMs, exact posteriors by enumeration, and the
statistical tests (chi-square, unbiasedness of Ẑ / Ĝ) the sampler tests share.

Toy problems (token ids 0..K-1 are text, K is EOS):

* :func:`paper002_example` — paper 002 App. A: uniform bits, length 3, exactly one 1.  Target 1/3
  each of 001/010/100; LCD gives 1/4, 1/4, 1/2.
* :func:`paper000_example1` — paper 000 Example 1: L = {aa, ba}, prior P(a) = .9; target
  P(aa) = .0833, P(ba) = .9167.
* :func:`random_toy` — a random table LM and a random finite language (seeded).

Exact references: :func:`enumerate_posterior` (P(· | L) with the budget semantics of
:mod:`tractable.decode.smc`), :func:`local_sampler_distribution` (the output distribution of
LCD/GCD ancestral sampling, to exhibit LCD's bias exactly), :func:`local_posterior`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch

from tractable.decode.constraints import Constraint, PrefixConstraint
from tractable.decode.lm import LanguageModel, TableLM

__all__ = [
    "ToyProblem",
    "language_constraint",
    "paper002_example",
    "paper000_example1",
    "random_toy",
    "enumerate_posterior",
    "local_sampler_distribution",
    "local_posterior",
    "random_local_problem",
    "chisquare_pvalue",
    "z_score",
    "kl_divergence",
    "total_variation",
]


class ToyProblem:
    """``lm`` (TableLM), ``constraint``, ``max_new_tokens``, ``language`` (set of tuples)."""

    def __init__(self, lm: TableLM, constraint: Constraint, max_new_tokens: int,
                 language: set[tuple[int, ...]]) -> None:
        self.lm = lm
        self.constraint = constraint
        self.max_new_tokens = max_new_tokens
        self.language = language


def language_constraint(language: Iterable[Sequence[int]], vocab_size: int, eos: int
                        ) -> PrefixConstraint:
    """A :class:`PrefixConstraint` accepting exactly the token tuples in ``language``."""
    lang = {tuple(s) for s in language}
    prefixes = {s[:i] for s in lang for i in range(len(s) + 1)}
    return PrefixConstraint(lambda p: p in prefixes, lambda p: p in lang, vocab_size, [eos])


def paper002_example() -> ToyProblem:
    """Paper 002 App. A: p(0) = p(1) = 1/2 for 3 steps, then EOS; L = strings with one 1."""

    def nxt(p):
        return [0.5, 0.5, 0.0] if len(p) < 3 else [0.0, 0.0, 1.0]

    lm = TableLM(nxt, 3, 2)
    lang = {(0, 0, 1), (0, 1, 0), (1, 0, 0)}
    return ToyProblem(lm, language_constraint(lang, 3, 2), 4, lang)


def paper000_example1() -> ToyProblem:
    """Paper 000 Example 1 (a = 0, b = 1, EOS = 2)."""
    table = {
        (): [0.9, 0.1, 0.0],
        (0,): [0.01, 0.99, 0.0],
        (1,): [0.99, 0.01, 0.0],
    }

    def nxt(p):
        return table.get(p, [0.0, 0.0, 1.0])

    lm = TableLM(nxt, 3, 2)
    lang = {(0, 0), (1, 0)}
    return ToyProblem(lm, language_constraint(lang, 3, 2), 3, lang)


def random_toy(seed: int, *, num_tokens: int = 3, max_len: int = 3, density: float = 0.3,
               alpha: float = 0.7) -> ToyProblem:
    """A random table LM over ``num_tokens`` text tokens + EOS (Dirichlet(α) rows, so some are
    peaked) and a random language: each string of length 1..max_len kept with prob. ``density``
    (at least two).  Budget N = max_len (an output may end by budget without EOS)."""
    g = np.random.default_rng(seed)
    K = num_tokens
    rows: dict[tuple[int, ...], list[float]] = {}

    def nxt(p):
        if p not in rows:
            rows[p] = g.dirichlet([alpha] * (K + 1)).tolist()
        return rows[p]

    strings = [s for n in range(1, max_len + 1) for s in _all_strings(K, n)]
    lang = {s for s in strings if g.random() < density}
    while len(lang) < 2:
        lang.add(strings[int(g.integers(len(strings)))])
    # materialize the table now so that it does not depend on query order
    for n in range(max_len + 1):
        for s in _all_strings(K, n):
            nxt(s)
    lm = TableLM(lambda p: rows.get(p, [0.0] * K + [1.0]), K + 1, K)
    return ToyProblem(lm, language_constraint(lang, K + 1, K), max_len, lang)


def _all_strings(K: int, n: int):
    if n == 0:
        yield ()
        return
    for s in _all_strings(K, n - 1):
        for t in range(K):
            yield s + (t,)


def _logp64(lm: LanguageModel, st) -> torch.Tensor:
    f = getattr(lm, "logprobs64", None)
    return (f(st) if f is not None else lm.logprobs(st)).double()


def enumerate_posterior(lm: LanguageModel, constraint: Constraint, prompt_ids: Sequence[int],
                        max_new_tokens: int, *, prune: bool = False, tokens: Sequence[int] | None
                        = None, max_prefixes: int = 200_000
                        ) -> tuple[dict[tuple[int, ...], float], float]:
    """Exact P(x | L) over complete outputs and G = Σ P̃.

    Output x ends with EOS (probability P(x EOS)) or after ``max_new_tokens`` tokens (probability
    P(x)); it is valid iff the constraint accepts it.  Expands, level by level and batched, every
    prefix of positive probability (only ``tokens`` if given; only GCD-allowed tokens with
    ``prune=True``, which is sound because the mask never removes a completable prefix).

    Returns ``({x: P(x | L)}, G)``.
    """
    eos = set(lm.eos_token_ids)
    N = max_new_tokens
    tilde: dict[tuple[int, ...], float] = {}
    lst = lm.start(prompt_ids, 1)
    cst = constraint.start(1)
    logpre = np.zeros(1)
    prefixes: list[tuple[int, ...]] = [()]
    allow_ids = None if tokens is None else np.asarray(sorted(set(tokens) - eos), dtype=np.int64)
    for t in range(N):
        lp = _logp64(lm, lst).numpy()
        acc = constraint.is_accepting(cst).numpy()
        r = N - t
        mask = constraint.allowed(cst, r, "gcd").numpy() if prune else None
        par: list[int] = []
        toks: list[int] = []
        for b, pre in enumerate(prefixes):
            for e in eos:
                if acc[b] and lp[b, e] > -math.inf:
                    tilde[pre] = tilde.get(pre, 0.0) + math.exp(logpre[b] + lp[b, e])
            cand = np.nonzero(np.isfinite(lp[b]))[0] if allow_ids is None else allow_ids
            for v in cand.tolist():
                if v in eos or not np.isfinite(lp[b, v]):
                    continue
                if mask is not None and not mask[b, v]:
                    continue
                par.append(b)
                toks.append(v)
        if not par:
            return _normalized(tilde)
        if len(par) > max_prefixes:
            raise MemoryError(f"enumeration would expand {len(par)} prefixes")
        idx = torch.tensor(par, dtype=torch.long)
        tk = torch.tensor(toks, dtype=torch.long)
        logpre = logpre[par] + lp[par, toks]
        prefixes = [prefixes[b] + (v,) for b, v in zip(par, toks)]
        cst = constraint.advance(cst.select(idx), tk)
        if t + 1 == N:
            acc = constraint.is_accepting(cst).numpy()
            for b, pre in enumerate(prefixes):
                if acc[b]:
                    tilde[pre] = tilde.get(pre, 0.0) + math.exp(logpre[b])
            break
        lst = lm.advance(lst.select(idx), tk)
    return _normalized(tilde)


def _normalized(tilde: dict) -> tuple[dict, float]:
    G = float(sum(tilde.values()))
    if G <= 0:
        return {}, 0.0
    return {k: v / G for k, v in tilde.items()}, G


def local_sampler_distribution(lm: LanguageModel, constraint: Constraint,
                               prompt_ids: Sequence[int], max_new_tokens: int, mode: str = "lcd"
                               ) -> dict[tuple[int, ...], float]:
    """Exact output distribution of ancestral sampling from p_lm · mask / Z (LCD with
    ``mode="lcd"``, GCD with ``"gcd"``), by enumeration.  Outputs that end invalid (LCD out of
    budget, or a prefix with Z = 0) are keyed ``("invalid",) + x``."""
    eos = set(lm.eos_token_ids)
    N = max_new_tokens
    out: dict[tuple, float] = {}

    def rec(lst, cst, pre, logq, t):
        r = N - t
        lp = _logp64(lm, lst)[0]
        mask = constraint.allowed(cst, r, mode)[0]
        lq = lp.masked_fill(~mask, -math.inf)
        z = torch.logsumexp(lq, 0)
        if not torch.isfinite(z):
            out[("invalid",) + pre] = out.get(("invalid",) + pre, 0.0) + math.exp(logq)
            return
        lq = lq - z
        for v in torch.nonzero(torch.isfinite(lq)).view(-1).tolist():
            lv = logq + float(lq[v])
            if v in eos:
                out[pre] = out.get(pre, 0.0) + math.exp(lv)
                continue
            tk = torch.tensor([v])
            c2 = constraint.advance(cst, tk)
            if t + 1 == N:
                key = pre + (v,) if bool(constraint.is_accepting(c2)[0]) else ("invalid",) + pre \
                    + (v,)
                out[key] = out.get(key, 0.0) + math.exp(lv)
                continue
            rec(lm.advance(lst.select(torch.tensor([0])), tk), c2, pre + (v,), lv, t + 1)

    rec(lm.start(prompt_ids, 1), constraint.start(1), (), 0.0, 0)
    return out


def local_posterior(logp0: torch.Tensor, valid: torch.Tensor) -> tuple[np.ndarray, float]:
    """(p [V] = p0 1_C / Z, Z) in float64."""
    p0 = torch.softmax(logp0.double(), -1).numpy()
    v = valid.numpy().astype(bool)
    Z = float(p0[v].sum())
    return np.where(v, p0, 0.0) / Z, Z


def random_local_problem(V: int, seed: int, *, alpha: float = 0.3, valid_frac: float = 0.3
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p0 float64 [V] from Dirichlet(α), valid bool [V] with ~valid_frac valid, >= 1)."""
    g = np.random.default_rng(seed)
    p0 = g.dirichlet([alpha] * V)
    p0 = np.maximum(p0, 1e-12)
    p0 /= p0.sum()
    valid = g.random(V) < valid_frac
    if not valid.any():
        valid[int(g.integers(V))] = True
    return torch.from_numpy(np.log(p0)), torch.from_numpy(valid)


def chisquare_pvalue(samples: Iterable, probs: Mapping, *, min_expected: float = 5.0) -> float:
    """Pearson chi-square p-value of ``samples`` (hashable outcomes) against ``probs``.

    Outcomes with expected count < ``min_expected`` are pooled into one bin; a sample outside
    the support of ``probs`` gives p = 0."""
    from scipy.stats import chisquare

    samples = list(samples)
    n = len(samples)
    counts: dict = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    if any(probs.get(k, 0.0) <= 0.0 for k in counts):
        return 0.0
    obs, exp = [], []
    pool_o, pool_e = 0.0, 0.0
    for k, p in probs.items():
        e = n * p
        o = counts.get(k, 0)
        if e < min_expected:
            pool_o += o
            pool_e += e
        else:
            obs.append(o)
            exp.append(e)
    if pool_e > 0:
        obs.append(pool_o)
        exp.append(pool_e)
    if len(obs) < 2:
        return 1.0
    exp_arr = np.asarray(exp, dtype=np.float64)
    exp_arr *= n / exp_arr.sum()
    return float(chisquare(np.asarray(obs, dtype=np.float64), exp_arr).pvalue)


def z_score(values: Sequence[float], target: float) -> float:
    """(mean - target) / (sd / sqrt(n)): how many standard errors the mean is from ``target``."""
    v = np.asarray(values, dtype=np.float64)
    se = v.std(ddof=1) / math.sqrt(v.size)
    if se == 0:
        return 0.0 if abs(v.mean() - target) < 1e-12 else math.inf
    return float((v.mean() - target) / se)


def kl_divergence(p: Mapping, q: Mapping, eps: float = 1e-12) -> float:
    """KL(p ‖ q) over p's support (q floored at ``eps``)."""
    return float(sum(pv * math.log(pv / max(q.get(k, 0.0), eps)) for k, pv in p.items() if pv > 0))


def total_variation(p: Mapping, q: Mapping) -> float:
    keys = set(p) | set(q)
    return 0.5 * float(sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in keys))
