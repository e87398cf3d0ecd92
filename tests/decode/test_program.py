"""Programmable SMC (decode/program.py, paper 004 §2.3) against decode/smc.py and exact
enumeration.

(a) A program written with sample/observe/condition/twist reproduces :class:`SMC` draw for
    draw (same seed → same particles, log weights, log Ẑ and drawn sample) where both express
    the same target: every proposal (LM + condition, LCD, GCD, AWRS, P-GCD), every resampling
    rule, with a P-GCD potential and with a generic potential, on toy LMs, on SmolLM2
    restricted to 8 tokens and on the real SmolLM2 yes/no task of tests/decode/test_smc_real.py.
(b) On enumerable targets that SMC cannot express — prompt intersection (a product of two
    LMs, both proposals of the seed), a mixture drawn with ``sample(Categorical, proposal)``,
    a user twist — Ẑ and P̃̂ are unbiased (|z| < 3 over 200 runs) and the weighted ensemble's
    TV to the exact posterior falls with the number of particles.
(c) The three examples run on SmolLM2 at a small size, and their weights are checked against
    direct forward passes.
(d) The seed's K-expansion with without-replacement down-sampling (Alg. 1): the down-sampler
    keeps each particle with probability min(1, c* ŵ) (c* by bisection) and an unbiased
    weight; SMC with it gives unbiased Ẑ and P̃̂; K = 1 is SMC without resampling.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from tractable.decode.lm import TableLM
from tractable.decode.program import Categorical, Model, run_smc
from tractable.decode.program_examples import ConstrainedGeneration, PromptIntersection
from tractable.decode.program_proposals import gcd_proposal
from tractable.decode.smc import SMC, Potential
from tractable.fsa.errors import InvalidArgumentError

from tractable.testing.samplers import (
    enumerate_posterior,
    paper000_example1,
    paper002_example,
    random_toy,
    total_variation,
    z_score,
)

Z_MAX = 3.0


def _same(r_smc, r_prog) -> None:
    """Same particles, EOS flags, log weights, log Ẑ and drawn sample."""
    assert [list(p.key()) for p in r_prog.particles] == r_smc.particles
    eos = [bool(p.ctx.tokens) and p.ctx.tokens[-1] in p.eos for p in r_prog.particles]
    assert eos == r_smc.eos
    a, b = r_prog.log_weights, r_smc.log_weights
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    assert torch.allclose(a[torch.isfinite(a)], b[torch.isfinite(b)], rtol=0, atol=1e-12)
    if math.isfinite(r_smc.log_G):
        assert r_prog.log_Z == pytest.approx(r_smc.log_G, abs=1e-12)
    else:
        assert r_prog.log_Z == r_smc.log_G
    assert r_prog.sample == r_smc.sample


def _compare(lm, C, N, proposal, seeds, M=8, prompt=(), potential=None, ess_threshold=0.5,
             resampling="multinomial") -> int:
    """Run SMC and the program for each seed (``potential``: a factory, one fresh object per
    run); returns how many SMC runs resampled at least once."""
    resampled = 0
    for seed in seeds:
        r1 = SMC(lm, C, proposal=proposal, potential=potential and potential(),
                 max_new_tokens=N, ess_threshold=ess_threshold, resampling=resampling
                 ).run(list(prompt), M, seed=seed)
        m = ConstrainedGeneration(lm, list(prompt), C, max_new_tokens=N, proposal=proposal,
                                  potential=potential and potential())
        r2 = run_smc(m, M, seed=seed, ess_threshold=ess_threshold, resampling=resampling)
        _same(r1, r2)
        assert r2.stats["resampling_steps"] == r1.stats["resampling_steps"]
        # one batched LM call per step, as SMC (SMC's first run also pays the prompt prefill)
        assert 0 <= r1.stats["lm_calls"] - r2.stats["lm_calls"] <= 1
        resampled += r1.stats["resampling_steps"] > 0
    return resampled


# ----------------------------------------------------------------------------- (a) toy


@pytest.mark.parametrize("proposal", ["lm", "lcd", "gcd", "awrs"])
@pytest.mark.parametrize("resampling,tau", [("multinomial", 0.5), ("stratified", 1.0),
                                            ("systematic", 1.0)])
def test_program_reproduces_smc_toy(proposal, resampling, tau):
    """Random LMs and languages with a budget (LCD and the LM run out of it; dead particles)
    and the paper examples: identical runs for 15 seeds each, most of them resampling."""
    resampled = 0
    for ex in (random_toy(5, num_tokens=3, max_len=3), random_toy(1, num_tokens=3, max_len=3),
               paper002_example(), paper000_example1()):
        resampled += _compare(ex.lm, ex.constraint, ex.max_new_tokens, proposal, range(15),
                              ess_threshold=tau, resampling=resampling)
    assert resampled >= 8  # of 60 runs (τ = 0.5 resamples in ~10; τ = 1 in all)


class _TablePotential(Potential):
    """A random positive twist φ(prefix) with log_next (the generic P-GCD-style proposal)."""

    def __init__(self, V: int, eos: int, seed: int) -> None:
        self.V, self.eos = V, eos
        g = np.random.default_rng(seed)
        self.table = {(): 0.3}
        for n in range(1, 5):
            for p in np.ndindex(*(V - 1,) * n):
                self.table[tuple(int(t) for t in p)] = float(g.uniform(-1.5, 1.5))

    def start(self, batch_size):
        return _Rows([()] * batch_size)

    def advance(self, state, tokens):
        return _Rows([p if t == self.eos else p + (t,) for p, t in
                      zip(state.rows, tokens.tolist())])

    def log_value(self, state, remaining):
        return torch.tensor([self.table[p] for p in state.rows], dtype=torch.float64)

    def log_next(self, state, remaining):
        out = torch.tensor([[self.table.get(p + (v,), 0.0) for v in range(self.V)]
                            for p in state.rows], dtype=torch.float64)
        out[:, self.eos] = 0.0
        return out


class _Rows:
    def __init__(self, rows):
        self.rows = rows
        self.batch_size = len(rows)

    def select(self, idx):
        return _Rows([self.rows[int(i)] for i in idx.tolist()])


@pytest.mark.parametrize("proposal", ["gcd", "pgcd", "twist", "lm"])
def test_program_reproduces_smc_generic_potential(proposal):
    ex = random_toy(3, num_tokens=3, max_len=3)
    pot = _TablePotential(4, 3, seed=7)
    assert _compare(ex.lm, ex.constraint, ex.max_new_tokens, proposal, range(20),
                    potential=lambda: pot, ess_threshold=1.0) >= 15


@pytest.mark.parametrize("pattern,N", [(r"(a|b)+b", 4), (r"a{3}b", 3)])
@pytest.mark.parametrize("proposal", ["pgcd", "twist", "gcd", "lcd", "lm", "awrs"])
def test_program_reproduces_smc_pgcd(pattern, N, proposal):
    """The real P-GCD (random HMM × regex automaton) as proposal and as twist; with
    ``a{3}b`` at N = 3 the budget-blind proposals kill particles through the potential."""
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.fsa.regex import compile_regex
    from tractable.fsa.vocabulary import TokenVocabulary
    from tractable.hmm.model import HMM
    from tractable.hmm.pgcd import PGCD

    vocab = TokenVocabulary.from_token_bytes(["a", "b", "ab", None], eos_token_ids=[3])
    A = compile_regex(pattern, vocab)
    C = AutomatonConstraint(A)
    g = np.random.default_rng(11)
    rows = {p: g.dirichlet([0.8] * 4).tolist() for n in range(N + 1)
            for p in (tuple(int(t) for t in q) for q in np.ndindex(*(4,) * n))}
    lm = TableLM(lambda p: rows.get(p, [0, 0, 0, 1.0]), 4, 3)
    hmm = HMM.random(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    _compare(lm, C, N, proposal, range(20), potential=lambda: PGCD(A, hmm, N, w=0.5))


# ----------------------------------------------------------------------------- (a) SmolLM2


def _chat(tok, text):
    ids = tok.apply_chat_template([{"role": "user", "content": text}],
                                  add_generation_prompt=True, tokenize=True)
    return list(ids) if isinstance(ids, list) else list(ids["input_ids"])


@pytest.mark.model
def test_program_reproduces_smc_smollm2(smollm2):
    """The yes/no task of tests/decode/test_smc_real.py with the real model (KV cache reordered by
    resampling): GCD at M = 4 and AWRS at M = 2 give identical runs; and SmolLM2 restricted to
    8 tokens with ``[ab]{2,4}[12]`` (LM + condition and GCD)."""
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.decode.lm import HFCausalLM, RestrictedLM
    from tractable.fsa.regex import compile_regex

    from tractable.models import smollm2_vocabulary

    model, tok = smollm2
    vocab = smollm2_vocabulary(tok, model)
    lm = HFCausalLM(model, tok, eos_token_ids=vocab.eos_token_ids)
    C = AutomatonConstraint(compile_regex(r"(Yes|No|Maybe)\.?", vocab))
    prompt = _chat(tok, "Is the sky blue? Answer with one word: yes, no or maybe.")
    assert _compare(lm, C, 7, "gcd", range(3), M=4, prompt=prompt, ess_threshold=1.0) >= 2
    _compare(lm, C, 7, "awrs", [0], M=2, prompt=prompt, ess_threshold=1.0)
    ids = [vocab.token_bytes.index(w.encode()) for w in ["a", "b", "ab", "ba", "1", "2", "aa",
                                                         "x"]]
    rlm = RestrictedLM(lm, ids)
    C2 = AutomatonConstraint(compile_regex(r"[ab]{2,4}[12]", vocab))
    prompt2 = _chat(tok, "Write a code of 2 to 4 letters a or b followed by 1 or 2, like ab1.")
    for proposal in ("lm", "gcd"):
        _compare(rlm, C2, 4, proposal, range(2), M=4, prompt=prompt2, ess_threshold=1.0)


# ----------------------------------------------------------------------------- (b) unbiased


def _strings(K, n):
    return [tuple(int(t) for t in q) for q in np.ndindex(*(K,) * n)] if n else [()]


def _product_target(lms, K, N):
    """Exact P̃(x) = Π_i P_i(x) over outputs x (EOS-terminated below N tokens, or N tokens)."""
    eos = K
    out = {}
    for n in range(N + 1):
        for x in _strings(K, n):
            lw = 0.0
            for lm in lms:
                lw += sum(float(lm.next_logprobs(x[:t])[x[t]]) for t in range(n))
                if n < N:
                    lw += float(lm.next_logprobs(x)[eos])
            out[x] = math.exp(lw)
    Z = sum(out.values())
    return {k: v / Z for k, v in out.items()}, Z


def _table_lm(seed, K, N, alpha=0.7):
    g = np.random.default_rng(seed)
    rows = {p: g.dirichlet([alpha] * (K + 1)).tolist() for n in range(N + 1)
            for p in _strings(K, n)}
    return TableLM(lambda p: rows.get(p, [0.0] * K + [1.0]), K + 1, K)


def _mean_ensemble(runs):
    out: dict = {}
    for r in runs:
        for k, v in r.ensemble().items():
            out[k] = out.get(k, 0.0) + v / len(runs)
    return out


def _check_unbiased(runs, post, Z, min_p=0.05):
    zs = np.array([math.exp(r.log_Z) for r in runs])
    assert abs(z_score(zs, Z)) < Z_MAX, (zs.mean(), Z)
    for x, px in post.items():
        if px >= min_p:
            vals = np.array([r.unnormalized().get(x, 0.0) for r in runs])
            assert abs(z_score(vals, Z * px)) < Z_MAX + 0.5, (x, vals.mean(), Z * px)


@pytest.mark.parametrize("proposal", ["first", "product"])
def test_prompt_intersection_unbiased(proposal):
    """P(s) ∝ P_1(s) P_2(s) with two random table LMs (3 tokens + EOS, N = 3): Ẑ and P̃̂
    unbiased at M = 4 (200 runs); the ensemble's TV to the target falls from M = 1 to 16."""
    K, N = 3, 3
    lms = [_table_lm(1, K, N), _table_lm(2, K, N)]
    post, Z = _product_target(lms, K, N)
    assert 0 < Z < 0.5
    tvs = []
    for M in (1, 4, 16):
        g = np.random.default_rng(100 + M)
        runs = [run_smc(PromptIntersection(lms[0], [[0], [0]], max_new_tokens=N,
                                           proposal=proposal, lms=lms), M, seed=g)
                for _ in range(200)]
        _check_unbiased(runs, post, Z)
        tvs.append(float(np.mean([total_variation(post, r.ensemble()) for r in runs])))
    assert tvs[0] > tvs[1] > tvs[2], tvs
    assert tvs[2] < 0.6 * tvs[0], tvs


class _Mixture(Model):
    """k ~ Categorical(π) drawn from a uniform proposal, then x ~ LM_k conditioned on the
    language with GCD (the other context is abandoned, i.e. stale).  Target π_k P̃_k(x)."""

    def __init__(self, problems, pi, N):
        super().__init__()
        self.ctxs = [self.new_context(ex.lm, []) for ex in problems]
        self.cs = [c.constrain(ex.constraint, budget=N) for c, ex in zip(self.ctxs, problems)]
        self.pi = pi
        self.k = None
        self.N = N

    def key(self):
        c = self.ctxs[self.k]
        return (self.k,) + tuple(t for t in c.tokens if t not in c.eos_token_ids)

    async def step(self):
        if self.k is None:
            self.k = await self.sample(Categorical.from_probs([0, 1], self.pi),
                                       proposal=Categorical.from_probs([0, 1], [0.5, 0.5]))
        ctx, c = self.ctxs[self.k], self.cs[self.k]
        tok = await self.sample(ctx.next_token(), proposal=gcd_proposal(c))
        if tok in ctx.eos_token_ids:
            self.finish()
        elif ctx.length == self.N:
            self.condition(c.accepting())
            self.finish()


def test_mixture_with_categorical_unbiased():
    """sample(Categorical, proposal=Categorical) weights π(k)/q(k); particles that pick
    different contexts in the same step leave the other context stale."""
    probs = [random_toy(0, num_tokens=3, max_len=3), random_toy(4, num_tokens=3, max_len=3)]
    pi = [0.3, 0.7]
    post, Z = {}, 0.0
    for k, ex in enumerate(probs):
        pk, Gk = enumerate_posterior(ex.lm, ex.constraint, [], 3)
        Z += pi[k] * Gk
        for x, v in pk.items():
            post[(k,) + x] = pi[k] * Gk * v
    post = {x: v / Z for x, v in post.items()}
    g = np.random.default_rng(5)
    runs = [run_smc(_Mixture(probs, pi, 3), 4, seed=g, ess_threshold=1.0) for _ in range(200)]
    _check_unbiased(runs, post, Z)
    assert sum(r.stats["resampling_steps"] for r in runs) > 100


class _TwistedLM(Model):
    """x ~ p_lm, condition on the constraint at every token (seed's M_t, G_t = 1_C) and an
    arbitrary user twist set_twist(φ(prefix)); a final soft factor score(ψ(x))."""

    def __init__(self, ex, phi, psi):
        super().__init__()
        self.ctx = self.new_context(ex.lm, [])
        self.c = self.ctx.constrain(ex.constraint, budget=ex.max_new_tokens)
        self.N = ex.max_new_tokens
        self.phi, self.psi = phi, psi

    async def step(self):
        tok = await self.sample(self.ctx.next_token())
        self.condition(self.c.check(tok))
        x = self.key()
        if tok in self.ctx.eos_token_ids or self.ctx.length == self.N:
            if self.ctx.length == self.N:
                self.condition(self.c.accepting())
            self.finish()
            self.score(self.psi(x))
        else:
            self.set_twist(self.phi(x))


def test_user_twist_and_score_unbiased():
    """Any twist is divided out at the end: Ẑ estimates Σ_x P̃(x) e^ψ(x) for every φ."""
    ex = random_toy(2, num_tokens=3, max_len=3)
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], 3)
    rng = np.random.default_rng(9)
    phi_t = {x: float(rng.uniform(-2, 2)) for n in range(4) for x in _strings(3, n)}
    psi_t = {x: float(rng.uniform(-1, 1)) for x in _strings(3, 1) + _strings(3, 2)
             + _strings(3, 3)}
    tilde = {x: G * p * math.exp(psi_t[x]) for x, p in post.items()}
    Z = sum(tilde.values())
    post2 = {x: v / Z for x, v in tilde.items()}
    g = np.random.default_rng(6)
    runs = [run_smc(_TwistedLM(ex, phi_t.__getitem__, lambda x: psi_t.get(x, 0.0)), 8, seed=g)
            for _ in range(200)]
    _check_unbiased(runs, post2, Z)
    # the twist matters while running: without untwisting at finish the estimate is off
    assert any(r.stats["resampling_steps"] for r in runs)


class _ViableTwist(ConstrainedGeneration):
    """The LM proposal with the constraint as a 0/-inf twist (``c.log_potential()``) instead of
    ``condition(c.check(tok))``; also checks the trackers' views against direct computation."""

    async def step(self):
        c, pot = self.c, self.pot
        assert c.remaining == self.N - self.ctx.length
        mask = c.allowed()
        assert mask.tolist() == [c.check(v) for v in range(mask.numel())]
        before, nxt = pot.log_value(), pot.log_next()
        if self.ctx.length == 0:
            self.twist(before)
        tok = await self.sample(self.ctx.next_token())
        self.twist(c.log_potential())
        assert c.viable() == bool(mask[tok])
        eos = tok in self.eos
        if eos or self.ctx.length == self.N:
            if not eos:
                self.condition(c.accepting())
            self.finish()
            self.score(pot.log_final())
        else:
            after = pot.log_value()
            assert after == pytest.approx(float(nxt[tok]), abs=1e-9) or after == float(nxt[tok])
            self.twist(after - before)


def test_constraint_and_pgcd_as_twists():
    """The constraint as a twist reproduces SMC's "lm" proposal (x ~ p_lm, weight 1_C(x)) with
    the P-GCD potential as a second twist; the trackers' mask, checks, budget and log_next
    agree with the states the step sees."""
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.fsa.regex import compile_regex
    from tractable.fsa.vocabulary import TokenVocabulary
    from tractable.hmm.model import HMM
    from tractable.hmm.pgcd import PGCD

    vocab = TokenVocabulary.from_token_bytes(["a", "b", "ab", None], eos_token_ids=[3])
    A = compile_regex(r"(a|b)+b", vocab)
    C = AutomatonConstraint(A)
    lm = _table_lm(4, 3, 4, alpha=0.8)
    hmm = HMM.random(3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    resampled = 0
    for seed in range(15):
        r1 = SMC(lm, C, proposal="lm", potential=PGCD(A, hmm, 4), max_new_tokens=4,
                 ess_threshold=1.0).run([], 6, seed=seed)
        m = _ViableTwist(lm, [], C, max_new_tokens=4, proposal="lm", potential=PGCD(A, hmm, 4))
        r2 = run_smc(m, 6, seed=seed, ess_threshold=1.0)
        _same(r1, r2)
        resampled += r2.stats["resampling_steps"]
    assert resampled >= 15


def test_max_steps_cuts_unfinished_particles():
    ex = paper002_example()
    m = ConstrainedGeneration(ex.lm, [], ex.constraint, max_new_tokens=4)
    r = run_smc(m, 4, seed=0, max_steps=2)
    assert r.stats["steps"] == 2 and r.stats["unfinished"] == 4
    assert all(len(p.ctx.tokens) == 2 and not p.done for p in r.particles)
    assert math.isfinite(r.log_Z)


# ----------------------------------------------------------------------------- misuse


class _Twice(Model):
    def __init__(self, lm):
        super().__init__()
        self.ctx = self.new_context(lm, [])

    async def step(self):
        await self.sample(self.ctx.next_token())
        await self.sample(self.ctx.next_token())


class _Stale(Model):
    """Particle 1 extends context b instead of a at step 2, then returns to a (stale)."""

    def __init__(self, lm):
        super().__init__()
        self.a = self.new_context(lm, [])
        self.b = self.new_context(lm, [])
        self.t = 0

    async def step(self):
        self.t += 1
        ctx = self.b if (self._index == 1 and self.t == 2) else self.a
        await self.sample(ctx.next_token())
        if self.t == 3:
            self.finish()


class _AwaitsOther(Model):
    def __init__(self, lm):
        super().__init__()
        self.ctx = self.new_context(lm, [])

    async def step(self):
        import asyncio

        await asyncio.sleep(0)


def _uniform_lm():
    return TableLM(lambda p: [0.5, 0.5, 0.0], 3, 2)


def test_program_misuse_is_typed():
    ex = paper002_example()
    with pytest.raises(InvalidArgumentError, match="already extended"):
        run_smc(_Twice(ex.lm), 2, seed=0)
    with pytest.raises(InvalidArgumentError, match="stale"):
        run_smc(_Stale(_uniform_lm()), 2, seed=0, ess_threshold=0.0)
    with pytest.raises(InvalidArgumentError, match="only self.sample"):
        run_smc(_AwaitsOther(ex.lm), 2, seed=0)
    with pytest.raises(InvalidArgumentError, match="n_particles"):
        run_smc(_Twice(ex.lm), 0)
    with pytest.raises(InvalidArgumentError, match="resampling"):
        run_smc(_Twice(ex.lm), 2, resampling="residual")
    with pytest.raises(InvalidArgumentError, match="proposal"):
        ConstrainedGeneration(ex.lm, [], ex.constraint, max_new_tokens=3, proposal="beam")
    from tractable.decode.program_proposals import PGCDProposal, ProductProposal
    from tractable.fsa.errors import InvalidArgumentTypeError

    m = ConstrainedGeneration(ex.lm, [], ex.constraint, max_new_tokens=4)
    with pytest.raises(InvalidArgumentTypeError, match="needs a ConstraintTracker, got Context"):
        gcd_proposal(m.ctx)
    with pytest.raises(InvalidArgumentTypeError, match="needs a PotentialTracker"):
        PGCDProposal(m.c, m.c)
    with pytest.raises(InvalidArgumentTypeError, match="needs a Context"):
        ProductProposal([m.c])
    with pytest.raises(InvalidArgumentError, match="at least one context"):
        ProductProposal([])
    with pytest.raises(InvalidArgumentError, match="__init__"):
        m._runner = object()
        m.new_context(ex.lm, [])


def test_template_is_reusable_and_unchanged():
    ex = paper002_example()
    m = ConstrainedGeneration(ex.lm, [], ex.constraint, max_new_tokens=4)
    r1 = run_smc(m, 8, seed=3)
    r2 = run_smc(m, 8, seed=3)
    assert [p.key() for p in r1.particles] == [p.key() for p in r2.particles]
    assert m.log_weight == 0.0 and not m.finished and m._runner is None
    assert r1.ensemble() and sum(r1.ensemble().values()) == pytest.approx(1.0)
    assert set(r1.ensemble()) <= ex.language


# ----------------------------------------------------------------------------- (c) examples


@pytest.mark.model
def test_example_constrained(smollm2):
    """No word longer than five letters after "The Fed says": every live particle matches."""
    from tractable.decode.program_examples import SHORT_WORDS, run_example

    model, tok = smollm2
    for proposal in ("gcd", "lm"):
        res, texts = run_example("constrained", model, tok, n_particles=3, max_new_tokens=6,
                                 proposal=proposal, seed=1)
        live = [t for t, lw in zip(texts, res.log_weights.tolist()) if lw > -math.inf]
        assert all(re.fullmatch(SHORT_WORDS, t) for t in live), texts
        if proposal == "gcd":
            assert len(live) == 3 and math.isfinite(res.log_Z) and res.log_Z < 0


@pytest.mark.model
def test_example_contains_word(smollm2):
    from tractable.decode.program_examples import run_example

    model, tok = smollm2
    res, texts = run_example("contains_word", model, tok, n_particles=3, max_new_tokens=10,
                             seed=0)
    assert all("whale" in t for t in texts), texts  # the automaton fits it in the budget
    live = [t for t, lw in zip(texts, res.log_weights.tolist()) if lw > -math.inf]
    assert live and all(re.search(r"\bwhale\b", t) for t in live), texts


@pytest.mark.model
@pytest.mark.parametrize("proposal", ["first", "product"])
def test_example_intersection_weights(smollm2, proposal):
    """M = 1 (no resampling): the weight is Σ_t log p(w_t | x_2 s_<t) ("first") or
    Σ_t log Σ_w p(w | x_1 s_<t) p(w | x_2 s_<t) ("product"), recomputed here with one full
    forward pass per prompt."""
    from tractable.decode.program_examples import run_example

    model, tok = smollm2
    res, texts = run_example("intersection", model, tok, n_particles=1, max_new_tokens=5,
                             proposal=proposal, seed=2)
    p = res.particles[0]
    s = list(p.x[0].tokens)
    assert p.x[1].tokens == p.x[0].tokens and 1 <= len(s) <= 5
    lps = []
    for prompt in (p.x[0].prompt_ids, p.x[1].prompt_ids):
        ids = torch.tensor([list(prompt) + s])
        with torch.inference_mode():
            logits = model(input_ids=ids).logits[0].float()
        lp = torch.log_softmax(logits[:, : model.config.vocab_size], -1)
        lps.append(lp[len(prompt) - 1: len(prompt) - 1 + len(s)].double())
    steps = torch.arange(len(s))
    if proposal == "first":
        want = float(lps[1][steps, torch.tensor(s)].sum())
    else:
        want = float(torch.logsumexp(lps[0] + lps[1], -1).sum())
    assert float(res.log_weights[0]) == pytest.approx(want, abs=2e-3)
    assert res.log_Z == pytest.approx(float(res.log_weights[0]))


# ----------------------------------------------------------------------------- without replacement


def _c_star(w, n):
    """c* of Σ_i min(1, c w_i) = n by bisection (the definition, paper 004 Alg. 1 line 19)."""
    lo, hi = 0.0, 1e12
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.minimum(1.0, mid * w).sum() < n else (lo, mid)
    return hi


@pytest.mark.parametrize("case", range(4))
def test_without_replacement_indices_against_definition(case):
    """Alg. 1 lines 18-30: n distinct indices; index i is kept with probability
    min(1, c* ŵ_i) (c* by bisection) and its kept weight has mean (n/N') w_i; with at most
    n positive weights all of them are kept, deterministically."""
    from tractable.decode.program import without_replacement_indices

    g0 = np.random.default_rng(case)
    N2, n = [(12, 4), (9, 3), (7, 5), (10, 6)][case]
    logw = g0.normal(0.0, [0.5, 2.0, 1.0, 3.0][case], N2)
    logw[g0.choice(N2, 2, replace=False)] = -np.inf
    w = np.exp(logw)
    p_keep = np.minimum(1.0, _c_star(w / w.sum(), n) * w / w.sum())
    assert p_keep.sum() == pytest.approx(n)
    g = np.random.default_rng(50 + case)
    R = 4000
    kept = np.zeros((R, N2))
    for r in range(R):
        idx, lw = without_replacement_indices(logw, n, g)
        assert idx.size == n and np.all(np.diff(idx) > 0) and np.isfinite(lw).all()
        kept[r, idx] = np.exp(lw)
    freq = (kept > 0).mean(0)
    for i in range(N2):
        if p_keep[i] in (0.0, 1.0):
            assert freq[i] == p_keep[i]
            assert np.all(kept[:, i] == pytest.approx(n / N2 * w[i]))
        else:
            assert abs(z_score(kept[:, i] > 0, p_keep[i])) < Z_MAX, (i, freq[i], p_keep[i])
            assert abs(z_score(kept[:, i], n / N2 * w[i])) < Z_MAX, i
    few = np.array([-np.inf, 0.3, -np.inf, -1.0, -np.inf])
    idx, lw = without_replacement_indices(few, 3, np.random.default_rng(0))
    assert idx.tolist() == [0, 1, 3] and lw[1:] == pytest.approx(few[[1, 3]] + math.log(3 / 5))


@pytest.mark.parametrize("K", [2, 3])
def test_without_replacement_smc_unbiased(K):
    """The seed's K-expansion + without-replacement down-sampling: Ẑ and P̃̂ unbiased over
    200 runs at M = 3 (LM + condition, dead particles; GCD; prompt intersection)."""
    ex = random_toy(5, num_tokens=3, max_len=3)
    post, G = enumerate_posterior(ex.lm, ex.constraint, [], ex.max_new_tokens)
    lms = [_table_lm(1, 3, 3), _table_lm(2, 3, 3)]
    post2, Z2 = _product_target(lms, 3, 3)
    steps = 0
    for i, (make, post_i, Z) in enumerate([
            (lambda: ConstrainedGeneration(ex.lm, [], ex.constraint, proposal="lm",
                                           max_new_tokens=ex.max_new_tokens), post, G),
            (lambda: ConstrainedGeneration(ex.lm, [], ex.constraint, proposal="gcd",
                                           max_new_tokens=ex.max_new_tokens), post, G),
            (lambda: PromptIntersection(lms[0], [[0], [0]], max_new_tokens=3, lms=lms),
             post2, Z2)]):
        g = np.random.default_rng(10 * K + i)
        runs = [run_smc(make(), 3, seed=g, resampling="without_replacement", expansion=K)
                for _ in range(200)]
        assert all(len(r.particles) == 3 for r in runs)
        _check_unbiased(runs, post_i, Z)
        steps += sum(r.stats["resampling_steps"] for r in runs)
    assert steps >= 600


def test_without_replacement_k1_never_resamples():
    """K = 1: N' = M, every particle is kept with its weight: the run is draw for draw the
    run without resampling (ess_threshold = 0)."""
    ex = paper002_example()
    for seed in range(5):
        m = ConstrainedGeneration(ex.lm, [], ex.constraint, max_new_tokens=4, proposal="lm")
        r1 = run_smc(m, 4, seed=seed, ess_threshold=0.0)
        r2 = run_smc(m, 4, seed=seed, resampling="without_replacement", expansion=1)
        assert [p.key() for p in r1.particles] == [p.key() for p in r2.particles]
        assert torch.equal(r1.log_weights, r2.log_weights) and r1.sample == r2.sample
        assert r2.stats["resampling_steps"] == 0
    with pytest.raises(InvalidArgumentError, match="expansion"):
        run_smc(m, 4, expansion=2)
    with pytest.raises(InvalidArgumentError, match="expansion"):
        run_smc(m, 4, resampling="without_replacement", expansion=0)


class _Trace(Model):
    """x ~ p_lm, weight × p_lm(x)^0.5 (unequal weights); records log p_lm(token) as the
    particle's context gave it (a list: copied with the particle)."""

    def __init__(self, lm, prompt, N):
        super().__init__()
        self.ctx = self.new_context(lm, prompt)
        self.trace, self.N = [], N

    async def step(self):
        lp = self.ctx.next_token().logprobs()
        tok = await self.sample(self.ctx.next_token())
        self.trace.append(float(lp[tok]))
        self.score(0.5 * self.trace[-1])
        if tok in self.ctx.eos_token_ids or self.ctx.length == self.N:
            self.finish()


@pytest.mark.model
def test_without_replacement_kv_cache_smollm2(smollm2):
    """Expansion to N' = K·M rows and down-sampling reorder SmolLM2's KV cache: every
    particle's next-token log-probabilities equal a fresh forward pass over its tokens."""
    from tractable.decode.lm import HFCausalLM

    model, tok = smollm2
    lm = HFCausalLM(model, tok)
    prompt = tok.encode("The three largest oceans are")
    r = run_smc(_Trace(lm, prompt, 5), 3, seed=4, resampling="without_replacement")
    assert r.stats["resampling_steps"] == 5 and len({p.key() for p in r.particles}) > 1
    for p in r.particles:
        s = list(p.ctx.tokens)
        with torch.inference_mode():
            lp = torch.log_softmax(model(input_ids=torch.tensor([prompt + s])).logits[0]
                                   .float(), -1)
        want = [float(lp[len(prompt) - 1 + t, s[t]]) for t in range(len(s))]
        assert p.trace == pytest.approx(want, abs=2e-3)
