"""P-GCD (HMM × automaton, paper 002 Thm. 4.3–4.4, Algorithm 1, §4.3) against brute force."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tractable.fsa import nfa as N
from tractable.fsa.automaton import TokenAutomaton
from tractable.fsa.errors import TokenError, UnsatisfiableBudgetError, VocabularyMismatchError
from tractable.fsa.vocabulary import TokenVocabulary
from tractable.hmm import HMM, PGCD, HMMAutomatonProduct, pgcd_logits_processor, pgcd_proposal

from tractable.testing.hmm import (
    algorithm1_literal,
    automaton_from_edges,
    brute_force_constraint_weight,
    brute_force_next_token_probs,
    enumerate_complete_sequences,
    hmm_prefix_prob,
)
from tractable.testing.masks import tiny_automata

# ----------------------------------------------------------------------------- automata


def _vocab5() -> TokenVocabulary:
    # ids: 0 "a", 1 "b", 2 "ab", 3 "c", 4 EOS
    return TokenVocabulary.from_token_bytes(["a", "b", "ab", "c", None], eos_token_ids=[4])


def dfa_ab_star_c() -> TokenAutomaton:
    """(a|b)*c over tokens a, b, ab, c (lifted from a byte NFA; token "ab" reads two bytes).
    Every accepted token string has exactly one path (deterministic at token level)."""
    v = _vocab5()
    nfa = N.concat(N.star(N.union(N.literal("a"), N.literal("b"))), N.literal("c"))
    return TokenAutomaton.from_byte_nfa(nfa, v)


def dfa_even_a() -> TokenAutomaton:
    """Byte strings over {a, b} with an even number of a's, lifted (state parity)."""
    v = _vocab5()
    b = N.star(N.literal("b"))
    nfa = N.concat(b, N.star(N.concat(N.literal("a"), b, N.literal("a"), b)))
    return TokenAutomaton.from_byte_nfa(nfa, v)


def nfa_ambiguous() -> TokenAutomaton:
    """A hand-built NFA with strings of several accepting paths: 0 -{0,1,2}-> 0, 0 -{2}-> 1,
    1 -{0,3}-> 2, 0 -{3}-> 2, 2 -{1}-> 2; finals {1, 2}; EOS = 4."""
    return automaton_from_edges(
        3, [(0, 0, [0, 1, 2]), (0, 1, [2]), (1, 2, [0, 3]), (0, 2, [3]), (2, 2, [1])],
        finals=[1, 2], vocab_size=5, eos_token_ids=[4])


def nfa_no_eos() -> TokenAutomaton:
    """An NFA without EOS ids (the paper's exactly-n target): (0|1)* with a 2-path branch."""
    return automaton_from_edges(
        2, [(0, 0, [0, 1]), (0, 1, [1, 2]), (1, 1, [0, 2]), (1, 0, [1])],
        finals=[0, 1], vocab_size=4)


AUTOMATA = {
    "dfa_ab_star_c": dfa_ab_star_c,
    "dfa_even_a": dfa_even_a,
    "nfa_ambiguous": nfa_ambiguous,
    "nfa_no_eos": nfa_no_eos,
}


def _hmm(H: int, V: int, seed: int, sharpness: float = 1.0) -> HMM:
    g = torch.Generator().manual_seed(seed)
    return HMM.random(H, V, generator=g, sharpness=sharpness, dtype=torch.float64)


def _check_all_prefixes(hmm, A, n, max_prefixes=400, rng=None, path="auto"):
    """Walk prefixes of complete sequences (all, or a random subset) and compare next-token
    probabilities and the potential factor with brute force.  Returns the enumeration."""
    complete = enumerate_complete_sequences(hmm, A, n)
    prod = HMMAutomatonProduct(hmm, A, n, emission_path=path)
    prefixes = sorted({y[:k] for y, _, _ in complete for k in range(len(y))})
    if rng is not None and len(prefixes) > max_prefixes:
        idx = rng.choice(len(prefixes), max_prefixes, replace=False)
        prefixes = [prefixes[i] for i in sorted(idx)]
    V = A.vocab_size
    for pre in prefixes:
        st_ = prod.start(1)
        for x in pre:
            st_ = prod.advance(st_, torch.tensor([x]))
        got = prod.next_token_logprobs(st_).exp()[0].numpy()
        ref = brute_force_next_token_probs(complete, pre, V)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12, err_msg=f"prefix {pre}")
        # support == brute-force support exactly (no tiny leaks)
        assert ((got > 0) == (ref > 0)).all(), pre
        w = float(prod.log_constraint_weight(st_).exp())
        np.testing.assert_allclose(w, brute_force_constraint_weight(hmm, complete, pre),
                                   rtol=1e-9)
    return complete


# ----------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("name", sorted(AUTOMATA))
@pytest.mark.parametrize("H", [1, 2, 4])
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_next_token_and_potential_match_enumeration(name, H, n):
    A = AUTOMATA[name]()
    hmm = _hmm(H, A.vocab_size, seed=H * 31 + n)
    path = "labels" if (H + n) % 2 else "classes"  # both emission-term paths
    try:
        complete = _check_all_prefixes(hmm, A, n, rng=np.random.default_rng(n), path=path)
    except UnsatisfiableBudgetError:
        assert not enumerate_complete_sequences(hmm, A, n)
        return
    weights = {w for _, _, w in complete}
    if name.startswith("dfa"):
        assert weights == {1}  # Thm. 4.3: one accepting path per accepted string
    elif n >= 3:
        assert max(weights) > 1  # the NFA case really weights strings by path counts


@pytest.mark.parametrize("name", ["dfa_ab_star_c", "nfa_ambiguous"])
def test_n6_exact(name):
    """The largest size of the issue: V = 5, n = 6, H = 4 (random subset of prefixes)."""
    A = AUTOMATA[name]()
    _check_all_prefixes(_hmm(4, 5, seed=6), A, 6, max_prefixes=150,
                        rng=np.random.default_rng(0))


def test_dfa_equals_hmm_conditional():
    """For a DFA, P-GCD's next token is p_hmm(x_t | x_<t, C) with C the accepted set (the
    corollary of Thm. 4.4): computed here directly as a ratio of sums of p_hmm over C."""
    A = dfa_ab_star_c()
    hmm = _hmm(3, 5, seed=3)
    n = 4
    complete = enumerate_complete_sequences(hmm, A, n)
    C = {y: p for y, p, _ in complete}  # p_hmm of each complete sequence (DFA: weight 1)
    prod = HMMAutomatonProduct(hmm, A, n)
    for pre in [(), (0,), (1, 2), (2, 0, 1)]:
        st_ = prod.start(1)
        for x in pre:
            st_ = prod.advance(st_, torch.tensor([x]))
        got = prod.next_token_logprobs(st_).exp()[0].numpy()
        den = sum(p for y, p in C.items() if y[:len(pre)] == pre)
        for v in range(5):
            num = sum(p for y, p in C.items() if y[:len(pre) + 1] == pre + (v,))
            assert got[v] == pytest.approx(num / den, rel=1e-10, abs=1e-14)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.filter_too_much])
@given(data=tiny_automata(max_vocab=5, max_states=4), H=st.integers(1, 4),
       n=st.integers(1, 4), seed=st.integers(0, 2**16),
       path=st.sampled_from(["labels", "classes"]))
def test_random_automata_match_enumeration(data, H, n, seed, path):
    _, _, A = data
    hmm = _hmm(H, A.vocab_size, seed)
    if not enumerate_complete_sequences(hmm, A, n):
        with pytest.raises(UnsatisfiableBudgetError):
            HMMAutomatonProduct(hmm, A, n)
        return
    _check_all_prefixes(hmm, A, n, max_prefixes=60, rng=np.random.default_rng(seed), path=path)


@pytest.mark.parametrize("name", sorted(AUTOMATA))
def test_matches_literal_algorithm1(name):
    """The factored implementation equals Algorithm 1 with dense Kronecker-free matrices
    (eq. 5 written as A_h X A_f^T on the EOS-augmented automaton)."""
    A = AUTOMATA[name]()
    hmm = _hmm(3, A.vocab_size, seed=11)
    n = 6
    prod = HMMAutomatonProduct(hmm, A, n)
    rng = np.random.default_rng(1)
    st_ = prod.start(1)
    pre: list[int] = []
    for _ in range(n):
        got = prod.next_token_logprobs(st_).exp()[0].numpy()
        np.testing.assert_allclose(got, algorithm1_literal(hmm, A, n, pre), rtol=1e-9, atol=1e-14)
        v = int(rng.choice(len(got), p=got / got.sum()))
        if v in A.eos_token_ids:
            break
        pre.append(v)
        st_ = prod.advance(st_, torch.tensor([v]))


def test_support_equals_gcd_mask_on_real_vocab(gpt2_vocab):
    """On GPT-2's vocabulary (V = 50257) with a regex automaton: the product's support is the
    GCD mask (HMM emissions are positive), probabilities sum to 1, and they equal the literal
    Algorithm 1 (dense, small E)."""
    from tractable.fsa.regex import compile_regex

    A = compile_regex(r"(ab|a|[0-9]{1,3}-)+c?", gpt2_vocab)
    hmm = HMM.random(4, gpt2_vocab.size, generator=torch.Generator().manual_seed(0),
                     dtype=torch.float64, fingerprint=gpt2_vocab.fingerprint)
    n = 6
    prod = HMMAutomatonProduct(hmm, A, n)
    prod_cls = HMMAutomatonProduct(hmm, A, n, emission_path="classes")
    ast = A.start(1)
    pst = prod.start(1)
    rng = np.random.default_rng(0)
    pre: list[int] = []
    for t in range(n):
        p = prod.next_token_logprobs(pst).exp()[0]
        np.testing.assert_allclose(prod_cls.next_token_logprobs(pst).exp()[0].numpy(), p.numpy(),
                                   rtol=1e-9, atol=1e-15)
        mask = A.allowed(ast, n - t, "gcd")[0]
        assert torch.equal(p > 0, mask)
        assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(p.numpy(), algorithm1_literal(hmm, A, n, pre), rtol=1e-8,
                                   atol=1e-15)
        v = int(rng.choice(p.shape[0], p=(p / p.sum()).numpy()))
        if v in A.eos_token_ids:
            break
        pre.append(v)
        pst = prod.advance(pst, torch.tensor([v]))
        ast = A.advance(ast, torch.tensor([v]))


# ----------------------------------------------------------------------------- potential


def test_potential_is_ratio_of_prefix_marginals():
    """Π_t p_hmm(x_t | x_<t, C) = p_hmm(x_{1:t} | C) = p_hmm(x_{1:t}) · p_hmm(C | x_{1:t}) /
    p_hmm(C), and the potential's increments telescope from log φ_hmm(∅) = log p_hmm(C)."""
    A = nfa_ambiguous()
    hmm = _hmm(3, 5, seed=5)
    n = 5
    pg = PGCD(A, hmm, n, w=0.3)
    st_ = pg.start(2)
    log_gamma = pg.product.log_gamma
    assert pg.log_potential(st_).tolist() == [log_gamma, log_gamma]
    rng = np.random.default_rng(3)
    lp_c = torch.zeros(2, dtype=torch.float64)
    total_inc = torch.zeros(2, dtype=torch.float64)
    seqs: list[list[int]] = [[], []]
    for _ in range(n):
        lc = pg.next_token_logprobs(st_)
        toks = torch.tensor([int(rng.choice(5, p=lc[b].exp().numpy())) for b in range(2)])
        lp_c += lc[torch.arange(2), toks]
        new = pg.advance(st_, toks)
        total_inc += pg.log_potential_increment(st_, new)
        st_ = new
        for b in range(2):
            seqs[b].append(int(toks[b]))
        if bool(st_.done.any()):
            break
    for b in range(2):
        lp_hmm = math.log(hmm_prefix_prob(hmm, seqs[b]))
        assert float(st_.log_p_hmm[b]) == pytest.approx(lp_hmm, rel=1e-10)
        w = float(pg.product.log_constraint_weight(st_)[b])
        assert float(lp_c[b]) == pytest.approx(lp_hmm + w, rel=1e-9)
        phi = float(pg.log_potential(st_)[b])
        assert float(total_inc[b]) == pytest.approx(phi - log_gamma, rel=1e-9)
        if bool(st_.done[b]) or st_.t == n:
            assert phi == 0.0  # a finished accepted output: p_hmm(C | x) = 1
        else:
            assert phi == pytest.approx(w + log_gamma, rel=1e-9)


def test_log_next_is_potential_of_extension():
    A = dfa_ab_star_c()
    hmm = _hmm(2, 5, seed=9)
    pg = PGCD(A, hmm, 4)
    st_ = pg.advance(pg.start(1), torch.tensor([1]))
    ln = pg.log_next(st_, remaining=3)[0]
    for v in range(5):
        nxt = pg.advance(st_, torch.tensor([v]))
        if ln[v] == -math.inf:  # a dead row (weight 0); strict=True refuses the token
            assert float(pg.log_value(nxt)[0]) == -math.inf and bool(nxt.dead[0])
            with pytest.raises(TokenError):
                pg.advance(st_, torch.tensor([v]), strict=True)
            continue
        assert float(pg.log_value(nxt)[0]) == pytest.approx(float(ln[v]), rel=1e-9, abs=1e-12)
    with pytest.raises(ValueError):
        pg.log_value(st_, remaining=2)


def _brute_constraint_prob(hmm, complete: list, prefix: tuple, n: int, eos) -> float:
    """``p_hmm(C | prefix)`` by enumeration: ``Σ_{y ⊒ prefix} p_hmm(y) · #paths(y) /
    p_hmm(prefix)`` over the complete sequences ``y``; 1 or 0 for a finished prefix (it ends
    with EOS or has ``n`` tokens) that is or is not accepted."""
    k = len(prefix)
    if k and (prefix[-1] in eos or k == n):
        return 1.0 if any(y == prefix for y, _, _ in complete) else 0.0
    num = sum(p * w for y, p, w in complete if y[:k] == prefix)
    return num / hmm_prefix_prob(hmm, prefix)


@pytest.mark.parametrize("name", sorted(AUTOMATA))
@pytest.mark.parametrize("H,n", [(1, 3), (3, 4), (2, 5)])
def test_potential_is_constraint_prob_by_enumeration(name, H, n):
    """The P-GCD potential on one scale (§4.3: φ_hmm(x) = p_hmm(C | x)), against brute force
    over every prefix of every complete sequence (finished ones included): log p_hmm(C) at
    t = 0, Σ over completions for unfinished prefixes, exactly 0 = log_final for finished
    accepted outputs; ``log_next(x)[v] == log_value(x v)`` for every v (−inf ⇔ not allowed:
    ``advance`` then gives a dead row, which ``strict=True`` refuses)."""
    A = AUTOMATA[name]()
    hmm = _hmm(H, A.vocab_size, seed=7 * H + n)
    try:
        pg = PGCD(A, hmm, n)
    except UnsatisfiableBudgetError:
        pytest.skip("no accepted sequence within the budget")
    complete = enumerate_complete_sequences(hmm, A, n)
    eos = set(A.eos_token_ids)
    Z = sum(p * w for _, p, w in complete)
    assert pg.product.log_gamma == pytest.approx(math.log(Z), rel=1e-10)
    prefixes = sorted({y[:k] for y, _, _ in complete for k in range(len(y) + 1)})
    V = A.vocab_size
    for pre in prefixes:
        st_ = pg.start(1)
        for x in pre:
            st_ = pg.advance(st_, torch.tensor([x]))
        got = float(pg.log_value(st_, remaining=n - len(pre))[0])
        ref = _brute_constraint_prob(hmm, complete, pre, n, eos)
        assert math.exp(got) == pytest.approx(ref, rel=1e-9), pre
        if not pre:
            assert got == pg.product.log_gamma
        finished = bool(st_.done[0]) or len(pre) == n
        if finished:
            assert got == 0.0 and float(pg.log_final(st_)[0]) == 0.0  # the same scale
            continue
        if name.startswith("dfa"):
            assert got <= 1e-12  # a probability: p_hmm(C | x) ≤ 1
        ln = pg.log_next(st_, remaining=n - len(pre))[0]
        for v in range(V):
            nxt = pg.log_value(pg.advance(st_, torch.tensor([v])))[0]
            if ln[v] == -math.inf:
                assert float(nxt) == -math.inf, (pre, v)
                with pytest.raises(TokenError):
                    pg.advance(st_, torch.tensor([v]), strict=True)
                continue
            assert float(nxt) == pytest.approx(float(ln[v]), rel=1e-9, abs=1e-12), (pre, v)


def test_constraint_prob_of_rejected_finished_row():
    """A finished row that is not accepted (a hand-built state here; ``advance`` marks such
    rows dead instead) has p_hmm(C | x) = 0; an accepted one 1."""
    import dataclasses

    A = dfa_ab_star_c()
    prod = HMMAutomatonProduct(_hmm(2, 5, seed=3), A, 2)
    st_ = prod.advance(prod.advance(prod.start(2), torch.tensor([0, 0])), torch.tensor([3, 3]))
    assert prod.log_constraint_prob(st_).tolist() == [0.0, 0.0]  # "ac": accepted at t = n
    start = prod.start(2)  # state 0 ("(a|b)*", not final) with t = n: rejected
    bad = dataclasses.replace(start, t=2)
    assert prod.log_constraint_prob(bad).tolist() == [-math.inf, -math.inf]


# ----------------------------------------------------------------------------- proposal


def test_proposal_formula():
    A = nfa_ambiguous()
    hmm = _hmm(3, 5, seed=2)
    pg = PGCD(A, hmm, 4)
    st_ = pg.start(1)
    lm = torch.log_softmax(torch.randn(1, 5, generator=torch.Generator().manual_seed(0),
                                       dtype=torch.float64), -1)
    lc = pg.next_token_logprobs(st_)
    allowed = lc > -math.inf
    for w in (0.0, 0.25, 1.0):
        lq = pg.proposal_logprobs(lm, st_, w)
        ref = (w * lm + (1 - w) * lc.masked_fill(~allowed, 0)).masked_fill(~allowed, -math.inf)
        ref = ref - torch.logsumexp(ref, -1, keepdim=True)
        assert torch.allclose(lq, ref)
        assert torch.equal(lq > -math.inf, allowed)  # masked even at w = 1
    assert torch.allclose(pg.proposal_logprobs(lm, st_, 0.0), lc)
    with pytest.raises(ValueError):
        pgcd_proposal(lm, lc, 1.5)


# ----------------------------------------------------------------------------- numerics, state


def test_no_underflow_1000_steps():
    """n = 1000 with a float32 HMM and an NFA without EOS (exactly n tokens; total mass
    ~1e-100, path counts ~2^k): probabilities stay normalized and match float64."""
    A = nfa_no_eos()
    hmm32 = HMM.random(8, 4, generator=torch.Generator().manual_seed(4), sharpness=2.0)
    n = 1000
    p32 = HMMAutomatonProduct(hmm32, A, n)
    p64 = HMMAutomatonProduct(hmm32, A, n, dtype=torch.float64)
    assert math.isfinite(p32.log_gamma) and abs(p32.log_gamma) > 50
    assert p32.log_gamma == pytest.approx(p64.log_gamma, rel=1e-4)
    # a language with one string 0^n: γ = p_hmm(0^1000) ≈ e^-1000, below even float64's range
    one = automaton_from_edges(1, [(0, 0, [0])], finals=[0], vocab_size=4)
    p1 = HMMAutomatonProduct(hmm32, one, n)
    ll = float(hmm32.to(dtype=torch.float64).log_likelihood(torch.zeros(n, dtype=torch.long)))
    assert ll < -750 and p1.log_gamma == pytest.approx(ll, rel=1e-4)
    s32, s64 = p32.start(1), p64.start(1)
    rng = np.random.default_rng(0)
    for t in range(n):
        q64 = p64.next_token_logprobs(s64).exp()[0]
        if t % 97 == 0 or t > n - 4:
            q32 = p32.next_token_logprobs(s32).exp()[0]
            assert float(q32.sum()) == pytest.approx(1.0, abs=1e-9)
            np.testing.assert_allclose(q32.numpy(), q64.numpy(), atol=2e-4)
        v = int(rng.choice(4, p=(q64 / q64.sum()).numpy()))
        s32 = p32.advance(s32, torch.tensor([v]))
        s64 = p64.advance(s64, torch.tensor([v]))
    assert s64.t == n and float(s64.log_c_scale[0]) > 50  # path counts beyond float32 range
    w32, w64 = p32.log_constraint_weight(s32), p64.log_constraint_weight(s64)
    assert torch.isfinite(w64).all() and float(w32[0]) == pytest.approx(float(w64[0]), rel=1e-3)
    assert float(s32.log_p_hmm[0]) == pytest.approx(float(s64.log_p_hmm[0]), rel=1e-4)


def test_float32_long_forced_prefix_with_eos():
    """Regression: states whose continuation mass is below float32's range (a forced chain of
    150 tokens before the accepting state, EOS allowed there) must not turn into NaN."""
    chain = [(i, i + 1, [0]) for i in range(150)] + [(150, 150, [1, 2])]
    A = automaton_from_edges(151, chain, finals=[150], vocab_size=4, eos_token_ids=[3])
    hmm = HMM.random(4, 4, generator=torch.Generator().manual_seed(0))
    p32 = HMMAutomatonProduct(hmm, A, 200)
    p64 = HMMAutomatonProduct(hmm, A, 200, dtype=torch.float64)
    assert p32.log_gamma < -150 and p32.log_gamma == pytest.approx(p64.log_gamma, rel=1e-4)
    s32, s64 = p32.start(1), p64.start(1)
    for _ in range(151):
        q32 = p32.next_token_logprobs(s32).exp()[0]
        q64 = p64.next_token_logprobs(s64).exp()[0]
        np.testing.assert_allclose(q32.numpy(), q64.numpy(), atol=1e-5)
        v = int(q64.argmax())
        s32, s64 = p32.advance(s32, torch.tensor([v])), p64.advance(s64, torch.tensor([v]))


def test_select_reorders_rows():
    A = nfa_ambiguous()
    hmm = _hmm(3, 5, seed=8)
    prod = HMMAutomatonProduct(hmm, A, 5)
    st_ = prod.advance(prod.start(3), torch.tensor([0, 2, 3]))
    sel = st_.select(torch.tensor([2, 2, 0]))
    a = prod.next_token_logprobs(st_)
    b = prod.next_token_logprobs(sel)
    assert torch.equal(b, a[[2, 2, 0]])


def test_errors():
    A = dfa_ab_star_c()
    hmm = _hmm(2, 5, seed=0)
    with pytest.raises(VocabularyMismatchError):
        HMMAutomatonProduct(_hmm(2, 6, seed=0), A, 3)
    bad = HMM(hmm.initial, hmm.transition, hmm.emission, fingerprint="0" * 64)
    with pytest.raises(VocabularyMismatchError):
        HMMAutomatonProduct(bad, A, 3)
    with pytest.raises(UnsatisfiableBudgetError):
        HMMAutomatonProduct(hmm, A, 0)  # needs at least "c"
    prod = HMMAutomatonProduct(hmm, A, 2)
    st_ = prod.start(1)
    with pytest.raises(TokenError):
        prod.advance(st_, torch.tensor([4]), strict=True)  # EOS before anything is accepted
    assert prod.log_constraint_prob(prod.advance(st_, torch.tensor([4]))).tolist() == [-math.inf]
    for bad_id in (5, -1):
        with pytest.raises(TokenError):
            prod.advance(st_, torch.tensor([bad_id]))  # outside the vocabulary: always raises
    with pytest.raises(ValueError):
        prod.advance(st_, torch.tensor([0, 0]))  # two tokens for one row
    st_ = prod.advance(st_, torch.tensor([0]))
    with pytest.raises(TokenError):
        prod.advance(st_, torch.tensor([0]), strict=True)  # "aa" can't be finished in 2 tokens
    assert prod.advance(st_, torch.tensor([0])).dead.tolist() == [True]
    st_ = prod.advance(st_, torch.tensor([3]))
    with pytest.raises(UnsatisfiableBudgetError):
        prod.next_token_logprobs(st_)


def test_done_rows_and_eos_weight():
    A = dfa_ab_star_c()
    hmm = _hmm(2, 5, seed=1)
    n = 4
    prod = HMMAutomatonProduct(hmm, A, n)
    complete = enumerate_complete_sequences(hmm, A, n)
    st_ = prod.start(2)
    st_ = prod.advance(st_, torch.tensor([3, 0]))
    st_ = prod.advance(st_, torch.tensor([4, 3]))  # row 0: "c" EOS (done)
    assert st_.done.tolist() == [True, False]
    lp = prod.next_token_logprobs(st_)
    assert lp[0, 4] == 0 and torch.isinf(lp[0, :4]).all()
    w = float(prod.log_constraint_weight(st_)[0].exp())
    assert w == pytest.approx(brute_force_constraint_weight(hmm, complete, (3, 4)), rel=1e-10)
    st2 = prod.advance(st_, torch.tensor([0, 4]))  # row 0 ignores its token
    assert float(prod.log_constraint_weight(st2)[0].exp()) == pytest.approx(w)


# ----------------------------------------------------------------------------- processor


def test_logits_processor_outputs_are_accepted():
    """A fake generate loop (random LM scores, rows expanded and reordered between calls): every
    finished output is accepted, and the returned scores equal the PGCD proposal."""
    A = nfa_ambiguous()
    hmm = _hmm(3, 5, seed=4)
    n = 5
    proc = pgcd_logits_processor(A, hmm, n, w=0.5)
    pg = PGCD(A, hmm, n, w=0.5)
    g = torch.Generator().manual_seed(0)
    prompt = torch.tensor([[1, 1], [0, 0]])
    ids = prompt.repeat_interleave(3, dim=0)  # 6 rows
    for _ in range(n):
        scores = torch.randn(ids.shape[0], 5, generator=g)
        out = proc(ids, scores)
        for b in range(ids.shape[0]):
            gen = ids[b, 2:].tolist()
            if any(x == 4 for x in gen):
                assert out[b, 4] == 0
                continue
            st_ = pg.start(1)
            for x in gen:
                st_ = pg.advance(st_, torch.tensor([x]))
            ref = pg.proposal_logprobs(scores[b:b + 1].double(), st_)[0].float()
            assert torch.allclose(out[b], ref, atol=1e-5)
        nxt = torch.multinomial(out.exp(), 1, generator=g)
        ids = torch.cat([ids, nxt], dim=1)
        perm = torch.randperm(ids.shape[0], generator=g)
        ids = ids[perm]
    for row in ids[:, 2:].tolist():
        toks = row[: row.index(4) + 1] if 4 in row else row
        assert A.accepts(toks), row


@pytest.mark.slow
@pytest.mark.model
def test_logits_processor_with_smollm2_generate():
    """End to end with SmolLM2's generate (random HMM over its vocabulary): outputs match the
    regex within the budget."""
    import re

    from tractable.fsa.regex import compile_regex

    from tractable.models import load_smollm2, smollm2_vocabulary

    model, tok = load_smollm2()
    vocab = smollm2_vocabulary(tok, model)
    A = compile_regex(r"[0-9]{1,4}-[0-9]{2}", vocab)
    hmm = HMM.random(16, vocab.size, generator=torch.Generator().manual_seed(0),
                     fingerprint=vocab.fingerprint)
    n = 8
    proc = pgcd_logits_processor(A, hmm, n, w=0.7, pad_token_id=tok.pad_token_id)
    inp = tok(["The date code is "], return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**inp, max_new_tokens=n, do_sample=True, logits_processor=[proc],
                         num_return_sequences=3, pad_token_id=tok.pad_token_id)
    for row in out[:, inp["input_ids"].shape[1]:].tolist():
        ids = [x for x in row if x not in vocab.eos_token_ids]
        text = tok.decode(ids, skip_special_tokens=True)
        assert re.fullmatch(r"[0-9]{1,4}-[0-9]{2}", text), text


# ----------------------------------------------------------------------------- dead rows


def _ab_or_a4b() -> TokenAutomaton:
    """``ab|a{4}b`` over "a", "b", "ab", EOS (ids 0-3): after "a" "a" (t = 2) the shortest
    completion is "a" "ab", so within a budget of 3 no accepted output continues with it."""
    from tractable.fsa.regex import compile_regex

    vocab = TokenVocabulary.from_token_bytes(["a", "b", "ab", None], eos_token_ids=[3])
    return compile_regex(r"ab|a{4}b", vocab)


def test_token_without_accepted_continuation_gives_dead_row():
    """A token with no accepted continuation within the budget (SMC with a budget-blind
    proposal draws one, and then feeds EOS to the dead particle) makes that row dead: log value
    −inf for that row only, and every later advance keeps it −inf without raising.  Only
    ``strict=True`` raises; an id outside the vocabulary or a wrong batch shape always raise."""
    A = _ab_or_a4b()
    hmm = _hmm(3, 4, seed=4)
    n = 3
    pg = PGCD(A, hmm, n)
    prod = pg.product
    st1 = pg.advance(pg.start(4), torch.tensor([0, 0, 2, 0]))
    # row 0: "a" "b"; row 1: "a" "a" (budget); row 2: "ab" "a" (no path); row 3: "a" EOS
    st2 = pg.advance(st1, torch.tensor([1, 0, 0, 3]))
    ref = pg.advance(pg.start(1), torch.tensor([0]))
    ref = pg.advance(ref, torch.tensor([1]))  # row 0 alone
    lv = pg.log_value(st2, remaining=n - 2)
    assert lv[1:].tolist() == [-math.inf] * 3
    assert math.isfinite(float(lv[0])) and float(lv[0]) == float(pg.log_value(ref)[0])
    assert st2.dead.tolist() == [False, True, True, True]
    assert prod.log_constraint_weight(st2)[1:].tolist() == [-math.inf] * 3
    assert prod.log_prefix_prob(st2)[1:].tolist() == [-math.inf] * 3
    assert pg.log_final(st2)[1:].tolist() == [-math.inf] * 3
    lp = pg.next_token_logprobs(st2)
    assert torch.equal(lp[0], pg.next_token_logprobs(ref)[0])
    assert bool(torch.isneginf(lp[1:]).all())  # no continuation of a dead row has mass
    assert bool(torch.isneginf(pg.log_next(st2, remaining=n - 2)[1:]).all())
    # later advances (EOS, as SMC feeds dead particles, or any token) keep it dead
    st3 = pg.advance(st2, torch.tensor([3, 3, 1, 0]))
    assert st3.t == n and st3.done.all()
    assert pg.log_value(st3)[1:].tolist() == [-math.inf] * 3
    assert float(pg.log_value(st3)[0]) == 0.0 == float(pg.log_final(st3)[0])  # "ab" EOS
    sel = st3.select(torch.tensor([2, 0, 2]))
    assert pg.log_value(sel).tolist() == [-math.inf, 0.0, -math.inf]
    # the budget-blind path SMC takes: at t = n, a text token that is not accepted
    end = pg.advance(pg.advance(st1, torch.tensor([0, 0, 1, 0])), torch.tensor([0, 2, 3, 1]))
    assert pg.log_value(end).tolist() == [-math.inf] * 4
    # strict mode keeps the old contract; genuinely invalid input always raises
    with pytest.raises(TokenError):
        pg.advance(st1, torch.tensor([1, 0, 0, 3]), strict=True)
    with pytest.raises(TokenError):
        pg.advance(st1, torch.tensor([1, 4, 1, 1]))  # id outside the vocabulary
    with pytest.raises(TokenError):
        pg.advance(st1, torch.tensor([1, -1, 1, 1]))
    with pytest.raises(ValueError):
        pg.advance(st1, torch.tensor([1, 1]))  # 2 tokens for 4 rows
    pg.advance(st2, torch.tensor([1, 7, -3, 9]))  # finished rows ignore their tokens


def test_dead_rows_match_enumeration():
    """Every token at every prefix: log_value(advance(x, v)) == log_next(x)[v], −inf exactly
    for the tokens outside the GCD mask, and the dead row stays −inf to the end of the
    budget whatever it is fed."""
    A = _ab_or_a4b()
    n = 4
    hmm = _hmm(2, 4, seed=1)
    pg = PGCD(A, hmm, n)
    complete = enumerate_complete_sequences(hmm, A, n)
    prefixes = sorted({y[:k] for y, _, _ in complete for k in range(len(y))})
    for pre in prefixes:
        st_ = pg.start(1)
        for x in pre:
            st_ = pg.advance(st_, torch.tensor([x]))
        if bool(st_.done[0]):
            continue
        batch = pg.select(st_, torch.zeros(4, dtype=torch.long))
        ln = pg.log_next(st_, remaining=n - len(pre))[0]
        nxt = pg.advance(batch, torch.arange(4))
        got = pg.log_value(nxt)
        for v in range(4):
            if ln[v] == -math.inf:
                assert got[v] == -math.inf and bool(nxt.dead[v]), (pre, v)
            else:
                assert float(got[v]) == pytest.approx(float(ln[v]), rel=1e-9, abs=1e-12)
        while nxt.t < n:
            nxt = pg.advance(nxt, torch.tensor([3, 0, 1, 2]))
            assert bool(torch.isneginf(pg.log_value(nxt)[ln == -math.inf]).all())


def test_hmm_that_cannot_emit_an_allowed_token_warns_once(monkeypatch):
    """A token the constraint allows but the HMM gives probability 0 kills the row (weight 0:
    a bias of SMC with such a potential, not an error of the caller): warned once."""
    from tractable.hmm import product as prod_mod

    monkeypatch.setattr(prod_mod, "_HMM_ZERO_WARNED", False)
    A = _ab_or_a4b()
    h = _hmm(3, 4, seed=5)
    em = h.emission.clone()
    em[:, 1] = 0.0  # "b" never emitted
    em = em / em.sum(1, keepdim=True)
    hmm = HMM(h.initial, h.transition, em)
    pg = PGCD(A, hmm, 3)
    with pytest.warns(UserWarning, match="gives probability 0 to token id 0 or to every"):
        st = pg.advance(pg.start(2), torch.tensor([0, 2]))  # "a": only "ab" / "a..ab" follow
    assert st.dead.tolist() == [True, False]  # "ab" itself is emitted as one token: alive
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pg.advance(pg.start(1), torch.tensor([0]))  # once per process
    # the same without zeros: no warning, both rows alive
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pg2 = PGCD(A, h, 3)
        assert pg2.advance(pg2.start(2), torch.tensor([0, 2])).dead.tolist() == [False, False]
