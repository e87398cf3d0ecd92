"""Token-level samplers (paper 000 Defs. 1-2, App. H) against the exact local posterior.

Every statistical test uses a fixed seed, and each is paired with a deliberately wrong sampler
or estimator that the same test must reject (so the test can fail)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tractable.decode.constraints import AutomatonConstraint, PrefixConstraint, RegexConstraint
from tractable.decode.samplers import (
    awrs,
    awrs_batched,
    awrs_clipped,
    rejection_sample,
    wrs,
)

from tractable.testing.samplers import (
    chisquare_pvalue,
    local_posterior,
    random_local_problem,
    z_score,
)

N = 8000  # draws per sequential test (~3 s each); batched tests use 20000
P_OK = 1e-3  # chi-square must not reject at this level (fixed seeds: deterministic)
Z_OK = 4.0  # |mean - Z| within 4 standard errors


@pytest.fixture(scope="module")
def problem():
    lp, valid = random_local_problem(30, 3, alpha=0.3, valid_frac=0.3)
    p, Z = local_posterior(lp, valid)
    assert 0.1 < Z < 0.5  # rejections happen, and matter for the estimators
    probs = {i: float(p[i]) for i in range(30) if p[i] > 0}
    return lp, valid, probs, Z


def _tempered(probs: dict, beta: float) -> dict:
    q = {k: v ** beta for k, v in probs.items()}
    s = sum(q.values())
    return {k: v / s for k, v in q.items()}


def test_chisquare_has_power(problem):
    """The chi-square helper rejects a slightly wrong distribution at our sample size."""
    _, _, probs, _ = problem
    g = np.random.default_rng(1)
    keys = list(probs)
    wrong = _tempered(probs, 0.85)
    draws = g.choice(len(keys), size=N, p=[wrong[k] for k in keys])
    assert chisquare_pvalue([keys[i] for i in draws], probs) < 1e-6
    right = g.choice(len(keys), size=N, p=[probs[k] for k in keys])
    assert chisquare_pvalue([keys[i] for i in right], probs) > P_OK


def test_rejection_sampling_exact(problem):
    lp, valid, probs, _ = problem
    g = np.random.default_rng(2)
    d = [rejection_sample(lp, lambda t: bool(valid[t]), rng=g) for _ in range(N)]
    assert chisquare_pvalue([x.token for x in d], probs) > P_OK


@pytest.mark.parametrize("L", [1, 3])
def test_wrs_exact_and_unbiased(problem, L):
    lp, valid, probs, Z = problem
    g = np.random.default_rng(10 + L)
    d = [wrs(lp, lambda t: bool(valid[t]), L=L, rng=g) for _ in range(N)]
    assert chisquare_pvalue([x.token for x in d], probs) > P_OK
    zs = np.array([x.z for x in d])
    assert abs(z_score(zs, Z)) < Z_OK
    # the naive estimator 1 / (trials per success) is biased: the same test rejects it
    naive = np.array([(L + 1) / (x.rejections + L + 1) for x in d])
    assert abs(z_score(naive, Z)) > 2 * Z_OK


def test_wrs_needs_L():
    with pytest.raises(ValueError, match="L >= 1"):
        wrs(torch.zeros(3), lambda t: True, L=0)


def test_awrs_exact_and_unbiased(problem):
    lp, valid, probs, Z = problem
    g = np.random.default_rng(20)
    d = [awrs(lp, lambda t: bool(valid[t]), rng=g) for _ in range(N)]
    assert chisquare_pvalue([x.token for x in d], probs) > P_OK
    zs = np.array([x.z for x in d])
    assert abs(z_score(zs, Z)) < Z_OK
    # proper weighting (Def. 3): E[Ẑ 1{x = v}] = p0(v) 1_C(v) for every v
    p0 = torch.softmax(lp, -1).numpy()
    for v in [v for v in probs if probs[v] > 0.02]:
        wv = np.array([x.z if x.token == v else 0.0 for x in d])
        assert abs(z_score(wv, p0[v])) < Z_OK + 0.5
    # AWRS never checks a token twice and never more tokens than exist
    assert max(x.checks for x in d) <= 30
    # wrong estimators that forget the adaptive mass or the second loop are rejected
    no_psi = np.array([1.0 / (x.rejections + 1) for x in d])
    assert abs(z_score(no_psi, Z)) > 2 * Z_OK


def test_awrs_first_loop_only_is_biased(problem):
    """ψ0-corrected but without the second loop ((1-ψ0)/(n0+1)): biased — the test sees it."""
    lp, valid, _, Z = problem
    g = np.random.default_rng(21)
    p0 = torch.softmax(lp, -1).numpy()
    vals = []
    for _ in range(N):
        p = p0.copy()
        psi, n0 = 0.0, 0
        while True:
            y = int(g.choice(30, p=p / p.sum()))
            if valid[y]:
                break
            psi += p[y]
            n0 += 1
            p[y] = 0.0
        vals.append((1 - psi) / (n0 + 1))
    assert abs(z_score(vals, Z)) > 2 * Z_OK


@pytest.mark.parametrize("chunk", [1, 5])
def test_awrs_gumbel_batched(problem, chunk):
    lp, valid, probs, Z = problem
    g = np.random.default_rng(30 + chunk)
    B = 5000
    toks, zs = [], []
    for _ in range(4):
        tk, lz, checks, _ = awrs_batched(lp.expand(B, -1), lambda r, t: valid[t], chunk=chunk,
                                         rng=g)
        toks += tk.tolist()
        zs += np.exp(lz.numpy()).tolist()
        assert int(checks.max()) <= 30
    assert chisquare_pvalue(toks, probs) > P_OK
    assert abs(z_score(zs, Z)) < Z_OK


def test_awrs_batched_sequential_check_count(problem):
    """chunk=1 makes exactly as many checks as the sequential algorithm in expectation."""
    lp, valid, _, _ = problem
    g = np.random.default_rng(40)
    _, _, checks, _ = awrs_batched(lp.expand(4000, -1), lambda r, t: valid[t], chunk=1, rng=g)
    seq = [awrs(lp, lambda t: bool(valid[t]), rng=g).checks for _ in range(4000)]
    a, b = checks.double().numpy(), np.array(seq, dtype=float)
    se = math.sqrt(a.var() / a.size + b.var() / b.size)
    assert abs(a.mean() - b.mean()) < 4 * se


def test_awrs_dead_when_nothing_valid():
    lp = torch.log(torch.tensor([0.5, 0.5, 0.0]))
    d = awrs(lp, lambda t: t == 2, rng=0)  # the only valid token has probability 0
    assert d.token == -1 and d.log_z == -math.inf
    tk, lz, _, _ = awrs_batched(lp.view(1, -1), lambda r, t: t == 2, rng=0)
    assert int(tk[0]) == -1 and float(lz[0]) == -math.inf


def test_awrs_clipped_properly_weighted(problem):
    lp, valid, probs, Z = problem
    g = np.random.default_rng(50)
    d = [awrs_clipped(lp, lambda t: bool(valid[t]), theta0=0.3, theta1=0.6, rng=g)
         for _ in range(N)]
    zs = np.array([x.z for x in d])
    assert (zs == 0).mean() > 0.05  # clipping happened
    assert abs(z_score(zs, Z)) < Z_OK
    p0 = torch.softmax(lp, -1).numpy()
    for v in [v for v in probs if probs[v] > 0.02]:
        wv = np.array([x.z if x.token == v else 0.0 for x in d])
        assert abs(z_score(wv, p0[v])) < Z_OK + 0.5
    # ignoring the (n1 + 1) factor of a clipped first loop biases Ẑ low
    wrong = np.array([x.z / (x.rejections + 1) if x.z > 0 else 0.0 for x in d])
    assert z_score(wrong, Z) < -Z_OK


def test_awrs_clipped_thresholds():
    with pytest.raises(ValueError):
        awrs_clipped(torch.zeros(3), lambda t: True, theta0=0.9, theta1=0.5)


def test_awrs_with_other_proposal(problem):
    """AWRS on q (a superset mask of the LM) weighted by p0/q is properly weighted for p0 1_C."""
    lp, valid, probs, Z = problem
    g = np.random.default_rng(60)
    coarse = valid.clone()
    coarse[torch.nonzero(~valid).view(-1)[::2]] = True  # a looser mask, like LCD vs GCD
    lq = lp.masked_fill(~coarse, -math.inf) * 0.7  # and tempered: q is not p0 on its support
    d = [awrs(lp, lambda t: bool(valid[t]), rng=g, proposal_logq=lq) for _ in range(N)]
    zs = np.array([x.z for x in d])
    assert abs(z_score(zs, Z)) < Z_OK
    p0 = torch.softmax(lp, -1).numpy()
    for v in [v for v in probs if probs[v] > 0.02]:
        wv = np.array([x.z if x.token == v else 0.0 for x in d])
        assert abs(z_score(wv, p0[v])) < Z_OK + 0.5
    # unweighted, the tokens follow q 1_C, not p: the chi-square test rejects them
    assert chisquare_pvalue([x.token for x in d], probs) < 1e-6


# ----------------------------------------------------------------------------- constraints


def _regex_automaton(pattern, vocab):
    from tractable.fsa.regex import compile_regex

    return compile_regex(pattern, vocab)


def test_automaton_constraint_matches_native_masks(gpt2_vocab):
    """Our set-state masks and per-token checks equal TokenAutomaton.allowed (budget-aware)."""
    A = _regex_automaton(r"(ab|cd)+[0-9]{1,3}", gpt2_vocab)
    if not hasattr(A, "allowed"):
        pytest.skip("masks not available")
    C = AutomatonConstraint(A)
    g = np.random.default_rng(0)
    st = C.start(1)
    nst = A.start(1)
    for step in range(6):
        for r in (1, 2, 3, 8):
            for mode in ("gcd", "lcd"):
                ours = C.allowed(st, r, mode)
                native = A.allowed(nst, r, mode=mode, on_unsatisfiable="empty")
                assert torch.equal(ours, native.cpu()), (step, r, mode)
            toks = torch.from_numpy(g.integers(0, A.vocab_size, 200))
            toks = torch.cat([toks, torch.nonzero(ours[0]).view(-1)[:50]])
            chk = C.check(st, torch.zeros(toks.numel(), dtype=torch.long), toks, 8, "lcd")
            assert torch.equal(chk, ours[0, toks])
        allowed = torch.nonzero(C.allowed(st, 8, "gcd")[0]).view(-1)
        allowed = allowed[~torch.isin(allowed, torch.tensor(A.eos_token_ids))]
        if allowed.numel() == 0:
            break
        t = allowed[int(g.integers(allowed.numel()))].view(1)
        st = C.advance(st, t)
        nst = A.advance(nst, t)


def test_regex_constraint_agrees_with_automaton(gpt2_vocab):
    """`regex` partial matching gives the same LCD masks as the compiled automaton on tokens
    that end on a UTF-8 character boundary, and a superset elsewhere (a trailing partial
    character is assumed viable: a false positive, allowed by the LCD contract)."""
    pat = r"[a-c]{2}x?[0-9]+"
    A = _regex_automaton(pat, gpt2_vocab)
    CA = AutomatonConstraint(A)
    CR = RegexConstraint(pat, gpt2_vocab)
    sa, sr = CA.start(1), CR.start(1)
    ids = [gpt2_vocab.token_bytes.index(b) for b in (b"ab", b"x", b"12")]
    whole = torch.tensor([b is not None and _utf8_ok(b) for b in gpt2_vocab.token_bytes])
    for t in [None] + ids:
        if t is not None:
            sa = CA.advance(sa, torch.tensor([t]))
            sr = CR.advance(sr, torch.tensor([t]))
        ma, mr = CA.allowed(sa, 50, "lcd"), CR.allowed(sr, 50, "lcd")
        assert torch.equal(ma[0, whole], mr[0, whole])
        assert not bool((ma & ~mr).any())
    assert bool(CR.is_accepting(sr)[0]) and bool(CA.is_accepting(sa)[0])


def _utf8_ok(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_prefix_constraint_budget_last_step():
    """Black-box predicates: at r = 1 a text token must complete the string."""
    lang = {(0, 1), (0,)}
    pre = {(), (0,), (0, 1)}
    C = PrefixConstraint(lambda p: p in pre, lambda p: p in lang, 3, [2])
    st = C.start(1)
    assert C.allowed(st, 1, "gcd")[0].tolist() == [True, False, False]
    assert C.allowed(st, 2, "gcd")[0].tolist() == [True, False, False]
    st = C.advance(st, torch.tensor([0]))
    assert C.allowed(st, 1, "gcd")[0].tolist() == [False, True, True]
    assert C.allowed(st, 0, "gcd")[0].tolist() == [False, False, False]
