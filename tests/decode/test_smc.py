"""SMC (paper 000 Alg. 1-2, paper 004) against exact posteriors by enumeration.

What is exact for every particle count M: the importance-weighted estimates Ĝ (of G) and
P̃̂(x) = (1/M) Σ w_m 1[x_m = x] (of P̃(x) = G P(x | L)) are unbiased — tested with z-scores over
many runs.  What improves with M: the weighted ensemble's distribution, whose mean over runs
approaches P(· | L) (KL falls).  LCD alone is biased (paper 002 App. A), and the tests show it."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from tractable.decode.smc import SMC, Potential, resample_indices

from tractable.testing.samplers import (
    chisquare_pvalue,
    enumerate_posterior,
    kl_divergence,
    local_sampler_distribution,
    paper000_example1,
    paper002_example,
    random_toy,
    total_variation,
    z_score,
)

Z_OK = 4.0


def _runs(ex, proposal, M, R, seed, **kw):
    s = SMC(ex.lm, ex.constraint, proposal=proposal, max_new_tokens=ex.max_new_tokens, **kw)
    g = np.random.default_rng(seed)
    return [s.run([], M, seed=g) for _ in range(R)]


def _check_unbiased(runs, post, G):
    """Ĝ and every P̃̂(x) with P(x) >= 0.05 are within Z_OK standard errors of the truth."""
    gs = np.array([math.exp(r.log_G) for r in runs])
    assert abs(z_score(gs, G)) < Z_OK, (gs.mean(), G)
    for x, px in post.items():
        if px < 0.05:
            continue
        vals = np.array([r.unnormalized().get(x, 0.0) for r in runs])
        assert abs(z_score(vals, G * px)) < Z_OK + 0.5, (x, vals.mean(), G * px)


def _mean_ensemble(runs):
    out: dict = {}
    for r in runs:
        for k, v in r.posterior().items():
            out[k] = out.get(k, 0.0) + v / len(runs)
    return out


def test_paper002_lcd_bias_exact():
    """Paper 002 App. A: LCD gives 1/4, 1/4, 1/2; the target is 1/3 each; G = 3/8."""
    ex = paper002_example()
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    assert G == pytest.approx(3 / 8)
    for x in [(0, 0, 1), (0, 1, 0), (1, 0, 0)]:
        assert post[x] == pytest.approx(1 / 3)
    lcd = local_sampler_distribution(ex.lm, ex.constraint, [], ex.max_new_tokens, "lcd")
    assert lcd == pytest.approx({(0, 0, 1): 0.25, (0, 1, 0): 0.25, (1, 0, 0): 0.5})


def test_paper000_example1_target():
    ex = paper000_example1()
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    assert post[(0, 0)] == pytest.approx(0.083333, abs=1e-6)
    assert post[(1, 0)] == pytest.approx(0.916667, abs=1e-6)
    assert G == pytest.approx(0.108)
    lcd = local_sampler_distribution(ex.lm, ex.constraint, [], ex.max_new_tokens, "lcd")
    assert lcd == pytest.approx({(0, 0): 0.9, (1, 0): 0.1})


@pytest.mark.parametrize("example", [paper002_example, paper000_example1])
@pytest.mark.parametrize("proposal", ["lcd", "gcd", "awrs", "lm"])
def test_smc_paper_examples(example, proposal):
    """SMC reaches the target; LCD samples (M = 1, weights ignored) fail the same test."""
    ex = example()
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    runs = _runs(ex, proposal, 8, 200, seed=1)
    _check_unbiased(runs, post, G)
    # the weighted ensemble at large M is close to the target (LCD alone: TV 1/6 and 0.82)
    big = _runs(ex, proposal, 256, 12, seed=3)
    assert total_variation(post, _mean_ensemble(big)) < 0.04
    if proposal in ("lcd", "gcd"):
        lcd_draws = [tuple(r.particles[0]) for r in _runs(ex, proposal, 1, 300, seed=4)]
        assert chisquare_pvalue(lcd_draws, post) < 1e-4  # LCD without weights: rejected


@pytest.mark.parametrize("seed", [0, 1])
def test_smc_kl_falls_with_particles(seed):
    """Random LM + random language + budget: KL(P ‖ E[P̂_M]) decreases in M; Ĝ unbiased at
    every M (even M = 1, where SMC is importance sampling with the GCD proposal)."""
    ex = random_toy(seed, num_tokens=3, max_len=3)
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    gcd = local_sampler_distribution(ex.lm, ex.constraint, [], ex.max_new_tokens, "gcd")
    kls = []
    for M in (1, 4, 32):
        runs = _runs(ex, "gcd", M, 300, seed=10 + M)
        _check_unbiased(runs, post, G)
        kls.append(kl_divergence(post, _mean_ensemble(runs)))
    assert kl_divergence(post, gcd) > 0.02  # the problem is hard for GCD alone
    assert kls[0] > kls[1] > kls[2]
    assert kls[2] < 0.2 * kls[0]


@pytest.mark.parametrize("proposal", ["lcd", "awrs", "lm"])
@pytest.mark.parametrize("resampling", ["multinomial", "stratified", "systematic"])
def test_smc_unbiased_resampling(proposal, resampling):
    """Resampling at every step (τ = 1) keeps Ĝ and P̃̂ unbiased, with a budget that LCD can
    run out of (dead particles)."""
    ex = random_toy(5, num_tokens=3, max_len=3)
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    runs = _runs(ex, proposal, 8, 300, seed=20, ess_threshold=1.0, resampling=resampling)
    _check_unbiased(runs, post, G)


def test_smc_weightless_lcd_is_caught():
    """The unbiasedness test fails for LCD's samples weighted as if exact (w = 1)."""
    ex = random_toy(0, num_tokens=3, max_len=3)
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    runs = _runs(ex, "lcd", 8, 300, seed=21)
    for r in runs:
        r.log_weights = torch.where(torch.isfinite(r.log_weights), 0.0, -math.inf).double()
        r.log_G = float(np.log(np.mean(np.exp(r.log_weights.numpy())))) + math.log(G)
    with pytest.raises(AssertionError):
        _check_unbiased(runs, post, G)


class _TablePotential(Potential):
    """A random positive twist φ(prefix) (any φ > 0 keeps SMC unbiased)."""

    def __init__(self, V: int, eos: int, seed: int) -> None:
        self.V, self.eos = V, eos
        self.g = np.random.default_rng(seed)
        self.table: dict = {}

    def _phi(self, p):
        if p not in self.table:
            self.table[p] = float(self.g.uniform(-1.5, 1.5))
        return self.table[p]

    def start(self, batch_size):
        return _Rows([()] * batch_size)

    def advance(self, state, tokens):
        return _Rows([p if t == self.eos else p + (t,) for p, t in
                      zip(state.rows, tokens.tolist())])

    def log_value(self, state, remaining):
        return torch.tensor([self._phi(p) for p in state.rows], dtype=torch.float64)

    def log_next(self, state, remaining):
        out = torch.tensor([[self._phi(p + (v,)) for v in range(self.V)] for p in state.rows],
                           dtype=torch.float64)
        out[:, self.eos] = 0.0
        return out


class _Rows:
    def __init__(self, rows):
        self.rows = rows
        self.batch_size = len(rows)

    def select(self, idx):
        return _Rows([self.rows[int(i)] for i in idx.tolist()])


@pytest.mark.parametrize("proposal", ["gcd", "pgcd", "twist"])
def test_smc_with_potential_unbiased(proposal):
    """A user potential (twist) and the proposals q ∝ p · φ(x v) over the GCD mask."""
    ex = random_toy(3, num_tokens=3, max_len=3)
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    pot = _TablePotential(4, 3, seed=7)
    runs = _runs(ex, proposal, 8, 300, seed=30, potential=pot)
    _check_unbiased(runs, post, G)


def test_smc_callable_proposal_unbiased():
    """Any proposal q (here a tempered LM over the GCD mask) gets the weight p/q."""
    ex = random_toy(4, num_tokens=3, max_len=3)
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    runs = _runs(ex, lambda lp, ctx: 0.5 * lp, 8, 300, seed=40)
    _check_unbiased(runs, post, G)


def test_resample_indices_unbiased():
    g = np.random.default_rng(0)
    w = np.array([0.5, 0.3, 0.15, 0.05])
    for method in ("multinomial", "stratified", "systematic"):
        counts = np.zeros(4)
        for _ in range(2000):
            counts += np.bincount(resample_indices(w, 8, method, g), minlength=4)
        assert np.allclose(counts / (2000 * 8), w, atol=0.01), method
    with pytest.raises(ValueError):
        resample_indices(w, 4, "residual", g)


def test_smc_result_fields():
    ex = paper002_example()
    r = SMC(ex.lm, ex.constraint, proposal="gcd", max_new_tokens=4).run([], 8, seed=0)
    assert len(r.particles) == 8 and r.weights.sum().item() == pytest.approx(1.0)
    assert r.sample >= 0 and tuple(r.sample_tokens) in ex.language
    assert all(r.eos)
    assert r.stats["lm_calls"] >= 3


# ----------------------------------------------------------------------------- SmolLM2


@pytest.fixture(scope="module")
def smol_restricted():
    from tractable.models import ModelNotInstalledError, load_smollm2

    try:
        model, tok = load_smollm2()
    except (ModelNotInstalledError, ImportError) as e:  # pragma: no cover - env dependent
        pytest.skip(f"SmolLM2 unavailable: {e}")
    from tractable.decode.lm import HFCausalLM, RestrictedLM
    from tractable.fsa.regex import compile_regex

    from tractable.models import smollm2_vocabulary

    vocab = smollm2_vocabulary(tok, model)
    words = ["a", "b", "ab", "ba", "1", "2", "aa", "x"]
    ids = [vocab.token_bytes.index(w.encode()) for w in words]
    base = HFCausalLM(model, tok, eos_token_ids=vocab.eos_token_ids)
    lm = RestrictedLM(base, ids)
    A = compile_regex(r"[ab]{2,4}[12]", vocab)
    msg = "Write a code of 2 to 4 letters a or b followed by 1 or 2, like ab1."
    prompt = tok.apply_chat_template([{"role": "user", "content": msg}],
                                     add_generation_prompt=True, tokenize=True)
    if not isinstance(prompt, list):
        prompt = list(prompt["input_ids"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 threads on a loaded 2-core machine: a forward is ~14x slower
    yield lm, A, prompt
    torch.set_num_threads(threads)


@pytest.mark.model
def test_smollm2_restricted_smc(smol_restricted):
    """SmolLM2 over 8 tokens + EOS, budget 4: AWRS-SMC and GCD-SMC estimates are unbiased and
    their ensembles beat GCD alone."""
    from tractable.decode.constraints import AutomatonConstraint

    lm, A, prompt = smol_restricted
    C = AutomatonConstraint(A)
    post, G = enumerate_posterior(lm, C, prompt, 4, prune=True)
    assert len(post) >= 5 and 0 < G < 1
    for proposal in ("gcd", "awrs"):
        s = SMC(lm, C, proposal=proposal, max_new_tokens=4)
        g = np.random.default_rng(0)
        runs = [s.run(prompt, 8, seed=g) for _ in range(30)]
        gs = np.array([math.exp(r.log_G) for r in runs])
        assert abs(z_score(gs, G)) < Z_OK
        ens = _mean_ensemble(runs)
        assert set(ens) <= set(post)  # every output is valid
        assert kl_divergence(post, ens) < 0.5


def test_smc_with_pgcd_object_unbiased():
    """The real P-GCD (hmm/pgcd.py: random HMM × regex automaton over a tiny vocabulary) as
    proposal and potential, and as the proposal alone: Ĝ and P̃̂ stay unbiased (any HMM is a
    valid proposal; a good one only lowers variance)."""
    pgcd_mod = pytest.importorskip("tractable.hmm.pgcd")
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.decode.lm import TableLM
    from tractable.fsa.regex import compile_regex
    from tractable.fsa.vocabulary import TokenVocabulary
    from tractable.hmm.model import HMM

    vocab = TokenVocabulary.from_token_bytes(["a", "b", "ab", None], eos_token_ids=[3])
    A = compile_regex(r"(a|b)+b", vocab)
    C = AutomatonConstraint(A)
    g = np.random.default_rng(11)
    rows: dict = {}

    def nxt(p):
        if p not in rows:
            rows[p] = g.dirichlet([0.8] * 4).tolist()
        return rows[p]

    lm = TableLM(nxt, 4, 3)
    N = 4
    post, G = enumerate_posterior(lm, C, [], N)
    hmm = HMM.random(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pg = pgcd_mod.PGCD(A, hmm, N, w=0.5)
    for pot in (pg, pg.proposal_only()):  # proposal + potential, the proposal alone
        s = SMC(lm, C, proposal="pgcd", potential=pot, max_new_tokens=N)
        gg = np.random.default_rng(12)
        runs = [s.run([], 8, seed=gg) for _ in range(300)]
        _check_unbiased(runs, post, G)
    # without the potential a run's first weights are p_lm / q only: no p_hmm(C) factor
    only = pg.proposal_only()
    st = only.start(2)
    assert torch.equal(only.log_value(st), torch.zeros(2, dtype=torch.float64))
    assert float(pg.log_value(pg.start(1))[0]) < 0 and only.log_next(st) is None


def test_smc_pgcd_potential_scale():
    """Issue 20 in miniature: an HMM that has not seen the "prompt" (p_hmm(C) ≈ e^-9) but
    predicts well what follows an answer.  The P-GCD potential p_hmm(C | x) must be on the scale
    of a finished output's (1): with p_hmm(C | x) / p_hmm(C) on unfinished particles only, every
    resampling over-weights them by 1 / p_hmm(C) (here: Ẑ mean 0.032 at M = 4, z = −18;
    ensemble TV 0.35 → 0.70 from M = 4 to 16; on one scale 0.032 → 0.008).  Ids: 0 "Yes",
    1 "No", 2 ".", 3 and 4 filler, 5 EOS."""
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.decode.lm import TableLM
    from tractable.hmm.model import HMM
    from tractable.hmm.pgcd import PGCD

    from tractable.testing.hmm import automaton_from_edges

    A = automaton_from_edges(3, [(0, 1, [0, 1]), (1, 2, [2])], finals=[1, 2], vocab_size=6,
                             eos_token_ids=[5])  # (Yes|No)\.?
    C = AutomatonConstraint(A)
    after_answer = [0.01, 0.01, 0.25, 0.07, 0.06, 0.6]

    def nxt(p):
        if not p:
            return [0.02, 0.04, 0.04, 0.45, 0.45, 0.0]
        if p[-1] in (0, 1):
            return after_answer
        if p[-1] == 2:
            return [0.01, 0.01, 0.02, 0.03, 0.03, 0.9]
        return [0.1, 0.1, 0.1, 0.2, 0.2, 0.3]

    lm = TableLM(nxt, 6, 5)
    N = 4
    post, G = enumerate_posterior(lm, C, [], N)
    assert G == pytest.approx(0.0495)
    B = torch.tensor([[1e-6, 1e-6, 0.01, 0.49, 0.49, 0.01], after_answer], dtype=torch.float64)
    hmm = HMM(torch.tensor([0.99, 0.01], dtype=torch.float64),
              torch.tensor([[0.02, 0.98], [0.1, 0.9]], dtype=torch.float64),
              B / B.sum(1, keepdim=True))
    pg = PGCD(A, hmm, N, w=0.5)
    assert pg.product.log_gamma < -8
    tvs = []
    for M in (4, 16):
        s = SMC(lm, C, proposal="pgcd", potential=pg, max_new_tokens=N)
        g = np.random.default_rng(50 + M)
        runs = [s.run([], M, seed=g) for _ in range(300)]
        _check_unbiased(runs, post, G)
        tvs.append(total_variation(post, _mean_ensemble(runs)))
    assert tvs[1] < tvs[0] and tvs[1] < 0.03, tvs


@pytest.mark.parametrize("proposal,N", [("lcd", 3), ("lm", 3), ("lm", 4)])
def test_smc_pgcd_potential_with_budget_blind_proposal(proposal, N):
    """Regression: LCD (its mask ignores the budget) and the plain LM propose tokens after which
    no accepted output fits in the budget (``a{3}b`` over "a", "b", "ab": "aaa" at step 3 of 3),
    and SMC feeds EOS to the dead particles.  The P-GCD potential must give such a particle
    weight 0 (log value −inf) instead of raising TokenError, and Ĝ and P̃̂ stay unbiased."""
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.decode.lm import TableLM
    from tractable.fsa.regex import compile_regex
    from tractable.fsa.vocabulary import TokenVocabulary
    from tractable.hmm.model import HMM
    from tractable.hmm.pgcd import PGCD

    class CountingPGCD(PGCD):
        deaths = 0

        def advance(self, state, tokens, **kw):
            out = super().advance(state, tokens, **kw)
            died = torch.isneginf(self.log_value(out)) & ~torch.isneginf(self.log_value(state))
            CountingPGCD.deaths += int(died.sum())
            return out

    vocab = TokenVocabulary.from_token_bytes(["a", "b", "ab", None], eos_token_ids=[3])
    A = compile_regex(r"a{3}b", vocab)
    C = AutomatonConstraint(A)
    g = np.random.default_rng(60 + N)
    rows: dict = {}

    def nxt(p):
        if p not in rows:
            rows[p] = g.dirichlet([1.0] * 4).tolist()
        return rows[p]

    lm = TableLM(nxt, 4, 3)
    post, G = enumerate_posterior(lm, C, [], N)
    assert G > 0 and set(post) <= {(0, 0, 2), (0, 0, 0, 1)}
    hmm = HMM.random(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pg = CountingPGCD(A, hmm, N, w=0.5)
    s = SMC(lm, C, proposal=proposal, potential=pg, max_new_tokens=N)
    gg = np.random.default_rng(70 + N)
    runs = [s.run([], 8, seed=gg) for _ in range(300)]
    _check_unbiased(runs, post, G)
    assert CountingPGCD.deaths > 100  # the bug's path was taken, and the runs went on
    assert all(tuple(p) in post for r in runs for p, lw in
               zip(r.particles, r.log_weights.tolist()) if lw > -math.inf)


# ----------------------------------------------------------------------------- jump-forward


def _forced_toy():
    """Tokens 0-3 + EOS 4; every string opens with the forced (2, 3) (a schema's fixed
    opening), then branches, with a forced middle on one branch; budget 7."""
    from tractable.decode.lm import TableLM

    from tractable.testing.samplers import ToyProblem, language_constraint

    g = np.random.default_rng(3)
    rows: dict = {}

    def nxt(p):
        if p not in rows:
            rows[p] = g.dirichlet([0.7] * 5).tolist()
        return rows[p]

    lang = {(2, 3) + s for s in [(0, 1, 1), (1, 0), (0, 0), (1, 1, 1, 0), (0, 1, 2, 2, 2)]}
    return ToyProblem(TableLM(nxt, 5, 4), language_constraint(lang, 5, 4), 7, lang)


def test_advance_many_matches_token_by_token():
    from tractable.decode.lm import LanguageModel

    ex = _forced_toy()
    toks = torch.tensor([[2, 3, 0], [2, 3, 1]])
    st, lp = ex.lm.advance_many(ex.lm.start([], 2), toks)
    st2, lp2 = LanguageModel.advance_many(ex.lm, ex.lm.start([], 2), toks)  # the default loop
    assert st.prefixes == st2.prefixes == [(2, 3, 0), (2, 3, 1)]
    assert torch.allclose(lp, lp2, atol=1e-6) and lp.dtype == torch.float64
    want = [float(ex.lm.next_logprobs(())[2]), float(ex.lm.next_logprobs((2,))[3]),
            float(ex.lm.next_logprobs((2, 3))[0])]
    assert torch.allclose(lp[0], torch.tensor(want, dtype=torch.float64))


@pytest.mark.parametrize("proposal", ["gcd", "lcd", "awrs", "lm"])
def test_smc_jump_forward_is_exact_and_saves_calls(proposal):
    """Forced runs (every live particle has one allowed token) are appended without proposing
    and scored in one advance_many: Ĝ and P̃̂ stay unbiased, with fewer LM calls."""
    ex = _forced_toy()
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    jf = _runs(ex, proposal, 4, 300, seed=31, jump_forward=True, ess_threshold=1.0)
    _check_unbiased(jf, post, G)
    assert all(r.stats["forced_tokens"] >= 2 for r in jf)  # the opening, at least
    plain = _runs(ex, proposal, 4, 300, seed=31, ess_threshold=1.0)
    calls_jf = np.mean([r.stats["lm_calls"] for r in jf])
    calls = np.mean([r.stats["lm_calls"] for r in plain])
    if proposal != "lm":  # (plain "lm" particles die at the opening: ~1 call per run)
        assert calls_jf <= calls - 1.0, (calls_jf, calls)
    assert all(tuple(r.particles[i]) in ex.language for r in jf for i in range(4)
               if np.isfinite(r.log_weights[i].item()))


def test_smc_jump_forward_with_potential_unbiased():
    """With a potential, each forced step still moves it (before/after)."""
    ex = _forced_toy()
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    pot = _TablePotential(5, 4, seed=9)
    runs = _runs(ex, "gcd", 4, 300, seed=41, jump_forward=True, potential=pot)
    _check_unbiased(runs, post, G)
    assert all(r.stats["forced_tokens"] >= 2 for r in runs)


@pytest.mark.model
def test_hf_advance_many_matches_token_by_token(smollm2):
    """One forward pass over k known tokens = k single-token steps (log-probs and the state
    after them), on SmolLM2 with a 2-row batch."""
    from tractable.decode.lm import HFCausalLM

    model, tok = smollm2
    lm = HFCausalLM(model, tok)
    prompt = tok.encode("The capital of France is")
    toks = torch.tensor([tok.encode(" Paris, a city")[:4], tok.encode(" Lyon and then a town")[:4]])
    st, lp = lm.advance_many(lm.start(prompt, 2), toks)
    st2 = lm.start(prompt, 2)
    ref = []
    for j in range(toks.shape[1]):
        ref.append(lm.logprobs(st2).double().gather(1, toks[:, j:j + 1]).view(-1))
        st2 = lm.advance(st2, toks[:, j])
    assert torch.allclose(lp, torch.stack(ref, 1), atol=2e-4)
    assert torch.allclose(lm.logprobs(st), lm.logprobs(st2), atol=2e-4)
    assert st.prefixes == st2.prefixes


@pytest.mark.model
def test_smc_canonical_jump_forward_on_a_function_call(smollm2, monkeypatch):
    """``jump_forward="canonical"`` on SmolLM2: the call's fixed opening is appended in one
    forward pass; every particle is accepted; fewer model calls than without forcing."""
    from tractable.decode.lm import HFCausalLM
    from tractable.decode.smc import smc
    from tractable.fsa.errors import InvalidArgumentError
    from tractable.fsa.json_schema import compile_json_schema

    from tractable.models import smollm2_vocabulary

    model, tok = smollm2
    vocab = smollm2_vocabulary(tok, model)
    schema = {"type": "object", "properties": {
        "name": {"const": "get_weather"},
        "arguments": {"type": "object", "properties": {"city": {"type": "string",
                                                                  "maxLength": 12}},
                      "required": ["city"], "additionalProperties": False}},
        "required": ["name", "arguments"], "additionalProperties": False}
    A = compile_json_schema(schema, vocab)
    N = A.min_tokens_to_accept() + 6
    msg = "What is the weather in Paris? Answer with a JSON function call to get_weather."
    with pytest.raises(InvalidArgumentError, match="canonical"):
        SMC(HFCausalLM(model, tok), A, jump_forward="canonical").run([1], 2)
    monkeypatch.setattr(sys.modules["tractable.decode.smc"], "_WARNED_CANONICAL", False)
    with pytest.warns(UserWarning, match="canonical"):
        jf = smc(model, tok, msg, A, n_particles=3, max_new_tokens=N, chat_template=True,
                 seed=0, vocab=vocab, jump_forward="canonical")
    plain = smc(model, tok, msg, A, n_particles=3, max_new_tokens=N, chat_template=True,
                seed=0, vocab=vocab)
    assert jf.stats["forced_tokens"] >= 8  # {"name": "get_weather", "arguments": {"city": "
    for p, w in zip(jf.particles, jf.log_weights.tolist()):
        if math.isfinite(w):
            assert A.accepts(p)
    assert jf.sample >= 0
    assert jf.stats["lm_calls"] < plain.stats["lm_calls"]



class _ExactTwist(Potential):
    """φ*(x) = P(an accepted output extends x | x), from the enumeration: G Σ_{y ⊒ x} P(y | C)
    / p_lm(x) for an unfinished prefix, 1 for a finished accepted output (``log_final`` = 0)."""

    def __init__(self, ex, post, G, N: int) -> None:
        self.lm, self.N, self.eos = ex.lm, N, ex.lm.eos_token_ids[0]
        self.accepted = set(post)
        self.mass: dict = {}
        for y, p in post.items():
            for k in range(len(y) + 1):
                self.mass[y[:k]] = self.mass.get(y[:k], 0.0) + G * p

    def _phi(self, x) -> float:
        """log φ*(x) of an unfinished prefix x."""
        m = self.mass.get(x, 0.0)
        if m <= 0:
            return -math.inf
        logp = sum(float(self.lm.next_logprobs(x[:k])[x[k]]) for k in range(len(x)))
        return math.log(m) - logp

    def start(self, batch_size):
        return _Rows([((), False)] * batch_size)

    def advance(self, state, tokens):
        return _Rows([(x, True) if done or t == self.eos else (x + (t,), len(x) + 1 == self.N)
                      for (x, done), t in zip(state.rows, tokens.tolist())])

    def log_value(self, state, remaining=None):
        return torch.tensor([0.0 if done else self._phi(x) for x, done in state.rows],
                            dtype=torch.float64)

    def log_next(self, state, remaining=None):
        out = torch.full((len(state.rows), self.lm.vocab_size), -math.inf, dtype=torch.float64)
        for b, (x, done) in enumerate(state.rows):
            if done or x in self.accepted:
                out[b, self.eos] = 0.0
            if done:
                continue
            for v in range(self.lm.vocab_size):
                y = x + (v,)
                if v == self.eos:
                    continue
                if len(y) == self.N:
                    out[b, v] = 0.0 if y in self.accepted else -math.inf
                else:
                    out[b, v] = self._phi(y)
        return out


def test_twist_proposal_with_exact_twist_is_exact():
    """With φ = the exact look-ahead P(C | x), the "twist" proposal q ∝ p_lm(v | x) φ(x v) makes
    every incremental weight equal (Σ_v p_lm(v | x) φ(x v) = φ(x)): each run's Ĝ is G to
    rounding, even at M = 1, and single-particle runs are exact posterior draws (chi-square);
    the "gcd" proposal with the same potential is unbiased but its Ĝ varies."""
    ex = random_toy(6, num_tokens=3, max_len=3)
    N = ex.max_new_tokens
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], N)
    pot = _ExactTwist(ex, post, G, N)
    runs = _runs(ex, "twist", 1, 400, seed=50, potential=pot)
    # float32 LM log-probs in the sampler vs float64 here: equal to ~1e-6 per step
    assert max(abs(r.log_G - math.log(G)) for r in runs) < 1e-5
    draws = [tuple(r.particles[0]) for r in runs]
    assert set(draws) <= set(post) and chisquare_pvalue(draws, post) > 1e-3
    gcd = _runs(ex, "gcd", 1, 400, seed=51, potential=pot)
    spread = np.std([math.exp(r.log_G) for r in gcd])
    assert spread > 0.05 * G  # not exact without the twisted proposal
    _check_unbiased(gcd, post, G)
    # a proposal that needs log_next is refused without a potential
    with pytest.raises(ValueError, match="twist"):
        SMC(ex.lm, ex.constraint, proposal="twist", max_new_tokens=N)
