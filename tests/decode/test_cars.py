"""CARS (paper 001) and its special cases RS / ARS / RSFT: exact samples of P(· | L), checked by
chi-square against the posterior enumerated exactly; LCD fails the same test.  Also at a valid
mass Z far below float64's resolution of 1 (1e-20, 2e-22), where p_u must be re-summed, not
subtracted from 1."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from tractable.decode.cars import CARS
from tractable.decode.lm import TableLM

from tractable.testing.samplers import (
    ToyProblem,
    chisquare_pvalue,
    enumerate_posterior,
    language_constraint,
    local_sampler_distribution,
    paper000_example1,
    paper002_example,
    random_toy,
)

P_OK = 1e-3


def _lcd_draws(ex, n, seed):
    dist = local_sampler_distribution(ex.lm, ex.constraint, [], ex.max_new_tokens, "lcd")
    keys = list(dist)
    g = np.random.default_rng(seed)
    idx = g.choice(len(keys), size=n, p=np.array([dist[k] for k in keys]) / sum(dist.values()))
    return [keys[i] for i in idx]


def _tiny_chain(eps: float = 1e-5) -> ToyProblem:
    """Tokens 0, 1, EOS = 2; P(1) = eps at each of 4 steps, then EOS; L = {1111}: Z = eps^4."""
    lm = TableLM(lambda p: [1 - eps, eps, 0.0] if len(p) < 4 else [0.0, 0.0, 1.0], 3, 2)
    lang = {(1, 1, 1, 1)}
    return ToyProblem(lm, language_constraint(lang, 3, 2), 5, lang)


def _tiny_four(seed: int = 1, delta: float = 1e-5) -> ToyProblem:
    """Tokens 0, 1, 2, EOS = 3.  After each prefix of length < 4, tokens 1, 2 and EOS share mass
    ``delta`` (seeded Dirichlet(2) split), token 0 the rest; after 4 tokens EOS.  L = four strings
    of length 4 over {1, 2}: Z ~ delta^4 (2.3e-22 for seed 1), posterior ~ .15/.25/.14/.46."""
    g = np.random.default_rng(seed)
    rows = {}
    for n in range(4):
        for s in itertools.product(range(3), repeat=n):
            d = g.dirichlet([2.0] * 3) * delta
            rows[s] = [1 - d.sum(), *d]
    lm = TableLM(lambda p: rows.get(p, [0.0, 0.0, 0.0, 1.0]), 4, 3)
    lang = {(1, 1, 2, 1), (1, 2, 2, 2), (2, 1, 1, 2), (2, 2, 1, 1)}
    return ToyProblem(lm, language_constraint(lang, 4, 3), 5, lang)


def _check_trie(c: CARS, ex: ToyProblem) -> None:
    """Every node's p_u equals its definition Σ_a P(a|u) [ua ∉ W] p_ua (unexplored: 1) over the
    row CARS saw (float32 log-probabilities, normalized), to 1e-9 relative; W holds only prefixes
    that no string of L extends (W is sound)."""
    prefixes = {s[:i] for s in ex.language for i in range(len(s) + 1)}
    eos = ex.lm.eos

    def row(pre):
        p = torch.exp(ex.lm.next_logprobs(pre).float().double()).numpy()
        return p / p.sum()

    def brute(nd, pre):
        p0, tot = row(pre), 0.0
        for a in range(ex.lm.vocab_size):
            if nd.dead is not None and nd.dead[a]:
                assert pre not in ex.language if a == eos else pre + (a,) not in prefixes
                continue
            ch = nd.children.get(a)
            tot += p0[a] * (1.0 if ch is None else brute(ch, pre + (a,)))
        assert nd.value == pytest.approx(tot, rel=1e-9, abs=0)
        return tot

    brute(c.root, ())


@pytest.mark.parametrize("example", [paper002_example, paper000_example1])
def test_cars_paper_examples(example):
    ex = example()
    post, _ = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    c = CARS(ex.lm, ex.constraint, max_new_tokens=ex.max_new_tokens, seed=0, batch_size=8)
    draws = [tuple(x) for x in c.sample(1500)]
    assert chisquare_pvalue(draws, post) > P_OK
    assert chisquare_pvalue(_lcd_draws(ex, 1500, 1), post) < 1e-6  # LCD is biased


@pytest.mark.parametrize("update", ["cars", "ars", "rsft", "rs"])
@pytest.mark.parametrize("seed", [0, 2])
def test_update_rules_exact(update, seed):
    """Every update rule samples P(· | L) exactly (random LM, random language, budget)."""
    ex = random_toy(seed, num_tokens=3, max_len=3)
    post, _ = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    c = CARS(ex.lm, ex.constraint, max_new_tokens=ex.max_new_tokens, update=update, seed=seed,
             batch_size=8)
    draws = [tuple(x) for x in c.sample(1500)]
    assert chisquare_pvalue(draws, post) > P_OK
    assert chisquare_pvalue(_lcd_draws(ex, 1500, 3), post) < 1e-6
    _check_trie(c, ex)


def test_cars_frozen_trie_still_exact():
    ex = random_toy(1, num_tokens=3, max_len=3)
    post, _ = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    c = CARS(ex.lm, ex.constraint, max_new_tokens=ex.max_new_tokens, seed=5, batch_size=8)
    c.sample(20)
    c.freeze()
    nodes = c.stats["trie_nodes"]
    bound = c.acceptance_bound
    draws = [tuple(x) for x in c.sample(1500)]
    assert c.stats["trie_nodes"] == nodes and c.acceptance_bound == bound
    assert chisquare_pvalue(draws, post) > P_OK


def test_cars_acceptance_bound_converges_to_G():
    """p_ε decreases monotonically towards G (Thm. 1) and never below it."""
    ex = random_toy(2, num_tokens=3, max_len=3)
    _, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    c = CARS(ex.lm, ex.constraint, max_new_tokens=ex.max_new_tokens, seed=0)
    prev = 1.0
    for _ in range(40):
        c.sample(5)
        assert G * (1 - 1e-5) <= c.acceptance_bound <= prev + 1e-12
        prev = c.acceptance_bound
    assert c.acceptance_bound == pytest.approx(G, rel=0.05)


def test_attempts_per_sample_ordering():
    """CARS needs no more attempts per valid sample than ARS, ARS no more than RS."""
    ex = random_toy(0, num_tokens=4, max_len=4, density=0.05)
    _, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    cost = {}
    for update in ("rs", "ars", "cars"):
        c = CARS(ex.lm, ex.constraint, max_new_tokens=ex.max_new_tokens, update=update, seed=1,
                 batch_size=8)
        c.sample(300)
        cost[update] = c.cost_per_sample()["attempts"]
    assert cost["cars"] <= cost["ars"] <= cost["rs"]
    assert cost["rs"] == pytest.approx(1 / G, rel=0.25)
    assert cost["cars"] < 0.5 * cost["rs"]


@pytest.mark.parametrize("update", ["cars", "ars"])
def test_cars_tiny_Z_single_string(update):
    """Regression: L = {1111} with P(1) = 1e-5 per step (Z = 1e-20).  Mass subtraction from 1
    cancelled Z to 0 and raised "every sequence is known invalid" after 3 attempts; re-summation
    keeps p_ε = Z to float32-row precision and samples 1111 every time once W is learned."""
    ex = _tiny_chain()
    _, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    assert G == pytest.approx(1e-20, rel=1e-9)
    c = CARS(ex.lm, ex.constraint, max_new_tokens=ex.max_new_tokens, update=update, seed=0)
    assert c.sample(20) == [[1, 1, 1, 1]] * 20
    assert c.stats["attempts"] <= 20 + 4  # at most one rejection per step of the chain
    assert c.acceptance_bound == pytest.approx(G, rel=1e-5)  # float32 log-probs: ~5e-7 a step
    _check_trie(c, ex)


@pytest.mark.parametrize(("update", "delta"), [("cars", 1e-5), ("ars", 1e-5), ("cars", 1e-3)])
def test_cars_tiny_Z_exact_posterior(update, delta):
    """Four strings, Z = 2.3e-22 (delta 1e-5) or 2.3e-14 (delta 1e-3; mass subtraction did not
    fail there but sampled a wrong distribution, chi-square p = 0: float32 LM rows summing to
    1 ± 1e-7 left ~1e-10 of spurious mass).  Chi-square of 1500 CARS samples against the
    enumerated posterior; LCD's samples fail the same test (so it has power here); p_u at every
    node equals its definition, and with the full update rule p_ε reaches Z."""
    ex = _tiny_four(delta=delta)
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    assert G == pytest.approx(2.2618e-22 * (delta / 1e-5) ** 4, rel=1e-4)
    assert len(post) == 4 and min(post.values()) > 0.1
    c = CARS(ex.lm, ex.constraint, max_new_tokens=ex.max_new_tokens, update=update, seed=0,
             batch_size=8)
    draws = [tuple(x) for x in c.sample(1500)]
    assert chisquare_pvalue(draws, post) > P_OK
    assert chisquare_pvalue(_lcd_draws(ex, 1500, 1), post) < 1e-6  # LCD is biased
    assert c.stats["attempts"] < 1.1 * 1500  # RS would need 1 / Z attempts per sample
    _check_trie(c, ex)
    if update == "cars":
        assert c.acceptance_bound == pytest.approx(G, rel=1e-5)


def test_resum_is_the_normalized_definition():
    """PrefixTrie.resum (CARS's update): Σ_a P(a|u) [a not dead] value(u·a) over the row
    normalized to 1; an untouched node stays exactly 1.0; bad rows and a frozen trie raise."""
    from tractable.decode.prefix_trie import PrefixTrie, TrieFrozenError
    from tractable.fsa.errors import InvalidArgumentError

    t = PrefixTrie(4)
    row = np.array([0.5, 0.25, 0.125, 0.125]) * (1 + 3e-7)  # float32-like row sum error
    c = t.child(t.root, 1, float(row[1]))
    assert t.resum(c, row) == 1.0 and t.resum(t.root, row) == 1.0
    t.mark_dead(c, [0, 3])
    assert t.resum(c, row) == pytest.approx(0.375, rel=1e-15)
    t.mark_dead(t.root, [2])
    assert t.resum(t.root, row) == pytest.approx(0.5 + 0.25 * 0.375 + 0.125, rel=1e-15)
    t.mark_dead(c, [1, 2])  # nothing valid below c: value 0, and the root loses all of it
    assert t.resum(c, row) == 0.0
    assert t.resum(t.root, row) == pytest.approx(0.625, rel=1e-15)
    with pytest.raises(InvalidArgumentError, match=r"p0 must be \[4\]"):
        t.resum(c, row[:3])
    with pytest.raises(InvalidArgumentError, match="sums to"):
        t.resum(c, np.zeros(4))
    t.freeze()
    with pytest.raises(TrieFrozenError):
        t.resum(c, row)


def test_cars_bad_update_rule():
    ex = paper002_example()
    with pytest.raises(ValueError, match="update"):
        CARS(ex.lm, ex.constraint, update="mcmc")


@pytest.mark.model
def test_smollm2_restricted_cars():
    """SmolLM2 over 8 tokens + EOS, budget 4, regex [ab]{2,4}[12]: CARS samples pass chi-square
    against the enumerated posterior."""
    from tractable.models import ModelNotInstalledError, load_smollm2

    try:
        model, tok = load_smollm2()
    except (ModelNotInstalledError, ImportError) as e:  # pragma: no cover
        pytest.skip(f"SmolLM2 unavailable: {e}")
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.decode.lm import HFCausalLM, RestrictedLM
    from tractable.fsa.regex import compile_regex

    from tractable.models import smollm2_vocabulary

    vocab = smollm2_vocabulary(tok, model)
    ids = [vocab.token_bytes.index(w.encode()) for w in ["a", "b", "ab", "ba", "1", "2", "aa",
                                                         "x"]]
    lm = RestrictedLM(HFCausalLM(model, tok, eos_token_ids=vocab.eos_token_ids), ids)
    C = AutomatonConstraint(compile_regex(r"[ab]{2,4}[12]", vocab))
    msg = "Write a code of 2 to 4 letters a or b followed by 1 or 2, like ab1."
    prompt = tok.apply_chat_template([{"role": "user", "content": msg}],
                                     add_generation_prompt=True, tokenize=True)
    if not isinstance(prompt, list):
        prompt = list(prompt["input_ids"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 threads on a loaded 2-core machine: a forward is ~14x slower
    try:
        post, G = enumerate_posterior(lm, C, prompt, 4, prune=True)
        c = CARS(lm, C, prompt, max_new_tokens=4, seed=0, batch_size=32)
        draws = [tuple(x) for x in c.sample(300)]
    finally:
        torch.set_num_threads(threads)
    assert chisquare_pvalue(draws, post) > P_OK
    assert c.cost_per_sample()["attempts"] < 0.75 / G  # plain RS needs 1/G attempts
