"""Sequential Monte Carlo for constrained generation (paper 000 Alg. 1-2, paper 004 Alg. 1,
paper 002 §2 and §4.3).

Target over complete outputs (``N = max_new_tokens``; an output ends with EOS or after N tokens):

    P̃(x) = P0(x) · 1_L(x) · Φ(x),    P0(x) = P_lm(x EOS) if |x| < N else P_lm(x)

and G = Σ_x P̃(x).  Intermediate targets use the twist ψ(x) = P0(x) · φ_C(x) · φ(x) (φ_C: the
constraint's viability of the prefix within the remaining budget, φ: an optional
:class:`Potential`, e.g. the P-GCD look-ahead).  Each step a proposal draws x' for every active
particle and returns a log weight increment properly weighted for ψ(x x') / ψ(x):

* ``"lm"``   — x' ~ p_lm; increment log 1_C(x') (the constraint as a twist; "twisted SMC");
* ``"lcd"``  — x' ~ p_lm · mask_lcd / Z; increment log Z (mask ignores the budget);
* ``"gcd"``  — x' ~ p_lm · mask_gcd / Z; increment log Z (budget-aware mask: never runs out);
* ``"awrs"`` — x' and Ẑ from :func:`~.samplers.awrs_batched` (black-box checks); increment log Ẑ;
* ``"twist"`` — x' ~ p_lm · φ(x x') · mask_gcd (the potential's ``log_next``): the locally
  optimal proposal for the twisted target; same generic increment as below;
* ``"pgcd"`` or any callable ``(logp_lm [B,V], ctx) -> log q [B,V]`` — x' ~ q · mask_gcd;
  increment log p_lm(x') - log q(x') + log φ(x x') - log φ(x) + log Z_q (generic importance weight).

Particles whose weight estimate falls below ``ess_threshold · M`` (ESS) are resampled
(multinomial, stratified or systematic); resampling reorders the LM's KV cache and the constraint
state with index_select and sets every weight to the mean (so Ĝ = mean of final weights stays an
unbiased estimate of G).  :func:`smc` is the one-call entry point; :class:`SMC` the lower level.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..fsa.errors import InvalidArgumentError
from .constraints import Constraint, as_constraint
from .lm import HFCausalLM, LanguageModel
from .samplers import awrs_batched

__all__ = ["SMC", "SMCResult", "Potential", "smc", "resample_indices", "PROPOSALS",
           "categorical_draw", "log_mean_exp", "normalize_log_weights"]

_WARNED_CANONICAL = False  # SMC jump_forward="canonical" warns once per process

PROPOSALS = ("lm", "lcd", "gcd", "awrs", "pgcd", "twist")


class Potential:
    """A twist φ over prefixes (batched, reorderable).  ``log_value(state, remaining)`` →
    float [B] = log φ(prefix); complete outputs are judged by ``log_final(state)`` (default 0 =
    no extra factor).  ``log_next(state, remaining)`` → float [B, V] = log φ(prefix + v), used by
    the ``"pgcd"`` proposal; return None if unavailable.

    A run starts from the weight φ(∅) and a particle's twist telescopes to ``log_final`` when it
    completes, so Ĝ is unbiased for any scale of φ; but ``log_value`` must be on the scale of
    ``log_final`` (φ of a complete output = its final factor), or every resampling step between
    finished and unfinished particles is skewed by the ratio of the two scales."""

    def start(self, batch_size: int) -> Any:
        raise NotImplementedError

    def advance(self, state, tokens: torch.Tensor) -> Any:
        raise NotImplementedError

    def select(self, state, idx: torch.Tensor) -> Any:
        return state.select(idx)

    def log_value(self, state, remaining) -> torch.Tensor:
        raise NotImplementedError

    def log_final(self, state) -> torch.Tensor:
        return torch.zeros(_batch(state), dtype=torch.float64)

    def log_next(self, state, remaining) -> torch.Tensor | None:
        return None


def _batch(state) -> int:
    b = getattr(state, "batch_size", None)
    return int(b) if b is not None else len(state)


def resample_indices(weights: np.ndarray, n: int, method: str, g: np.random.Generator
                     ) -> np.ndarray:
    """Ancestor indices int64 [n] drawn ∝ ``weights`` (normalized float [M]).

    ``multinomial``: i.i.d.; ``stratified``: one uniform per stratum [k/n, (k+1)/n);
    ``systematic``: one shared uniform offset.  All three are unbiased (E[count_i] = n w_i).
    """
    c = np.cumsum(weights)
    c[-1] = 1.0
    if method == "multinomial":
        u = np.sort(g.random(n))
    elif method == "stratified":
        u = (np.arange(n) + g.random(n)) / n
    elif method == "systematic":
        u = (np.arange(n) + g.random()) / n
    else:
        raise InvalidArgumentError(
            f"resampling must be multinomial, stratified or systematic: {method!r}")
    return np.minimum(np.searchsorted(c, u, side="right"), len(weights) - 1).astype(np.int64)


@dataclass
class SMCResult:
    """Output of one SMC run.

    ``particles``: token ids per particle (EOS removed); ``log_weights``: float64 [M] final
    unnormalized log weights; ``weights``: normalized float64 [M]; ``log_G``: log Ĝ, the
    marginal-likelihood estimate (log of the mean weight; -inf when every particle died);
    ``sample``: index of the particle drawn from the weighted ensemble (-1 if none);
    ``eos``: whether each particle ended with EOS (else by budget); ``texts``: decoded
    particles when a tokenizer was given.
    """

    particles: list[list[int]]
    log_weights: torch.Tensor
    weights: torch.Tensor
    log_G: float
    sample: int
    eos: list[bool]
    texts: list[str] | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def sample_tokens(self) -> list[int] | None:
        return None if self.sample < 0 else self.particles[self.sample]

    @property
    def sample_text(self) -> str | None:
        return None if self.sample < 0 or self.texts is None else self.texts[self.sample]

    def posterior(self) -> dict[tuple[int, ...], float]:
        """The weighted ensemble P̂ as {token tuple: probability} (weights of equal particles
        summed)."""
        out: dict[tuple[int, ...], float] = {}
        for p, w in zip(self.particles, self.weights.tolist()):
            if w > 0:
                out[tuple(p)] = out.get(tuple(p), 0.0) + w
        return out

    def unnormalized(self) -> dict[tuple[int, ...], float]:
        """P̃̂(x) = (1/M) Σ_m w_m 1[x_m = x] (unbiased for P̃(x), paper 000 Alg. 1 line 14)."""
        M = len(self.particles)
        out: dict[tuple[int, ...], float] = {}
        for p, lw in zip(self.particles, self.log_weights.tolist()):
            if lw > -math.inf:
                out[tuple(p)] = out.get(tuple(p), 0.0) + math.exp(lw) / M
        return out


class SMC:
    """SMC over a batched LM (:class:`~.lm.LanguageModel`) and a :class:`~.constraints.Constraint`.

    Args:
        lm: the language model (KV-cached, reorderable).
        constraint: the constraint (or anything :func:`~.constraints.as_constraint` takes).
        proposal: ``"lm" | "lcd" | "gcd" | "awrs" | "pgcd" | "twist"`` or a callable
            ``(logp_lm float [B, V], ctx: dict) -> log q [B, V]`` (unnormalized OK; masked by GCD).
            ``"twist"`` (needs ``potential`` with ``log_next``): q(v) ∝ p_lm(v | x) · φ(x v) over
            the GCD mask, the locally optimal proposal for the twisted target p_lm · φ (the
            incremental weight Σ_v p_lm(v | x) φ(x v) / φ(x) does not depend on the drawn v;
            with φ = the exact look-ahead p_lm(C | x), every run is an exact posterior draw
            and Ĝ = G).  With P-GCD's φ = p_hmm(C | x) it is GeLaTo / Ctrl-G's
            p_lm(x_t | x_<t) · p_hmm(C | x_≤t): the LM's next-token distribution tilted only by
            the HMM's look-ahead ratio, where ``"pgcd"`` (paper 002 §4.3) mixes in the HMM's
            own next-token distribution.
        potential: optional :class:`Potential` (extra twist φ; for ``"pgcd"`` its ``log_next``
            shapes the proposal: q ∝ p_lm^w · φ(x v)^(1-w) over the GCD mask, paper 002 §4.3).
        max_new_tokens: N, the budget (EOS included).
        ess_threshold: resample when ESS < τ M (τ = 1: every step; τ = 0: never).
        resampling: ``"multinomial" | "stratified" | "systematic"``.
        awrs_chunk: constraint checks per row per round for ``"awrs"``.
        pgcd_weight: w of the P-GCD proposal (None: the potential's own w, or 0).  A
            :class:`tractable.hmm.pgcd.PGCD` object is both the ``"pgcd"`` proposal (its
            ``proposal_logprobs``) and the potential (paper 002 §4.3).
        jump_forward: ``True`` / ``"exact"``: where the GCD mask of *every* live particle
            holds exactly one token (not EOS), append those tokens without proposing and score
            the whole forced run with one :meth:`~.lm.LanguageModel.advance_many` (one forward
            pass for :class:`~.lm.HFCausalLM`).  Exact: no tokenization is imposed; a forced
            step's proposal puts probability 1 on the only token the target allows, so its
            weight is ``p_lm(token)`` as a GCD step's is (Ẑ stays unbiased).  Rare on JSON:
            forced *text* can usually be spelled by several token sequences.
            ``"canonical"`` (automaton constraints; ``vocab=`` here, ``tokenizer=`` to
            :meth:`run`): where every live particle has forced text, append its canonical
            tokenization (:mod:`tractable.fsa.jump_forward`, as ``generate(jump_forward=
            True)``), the same number of tokens per particle, scored the same way; the target
            becomes p(x | C, forced text spelled canonically) (warns once).  Both cost one
            check per step and save model calls where particles are in step (a schema's fixed
            opening, copies after resampling).  ``stats["forced_tokens"]`` counts forced steps.
    """

    def __init__(self, lm: LanguageModel, constraint, *, proposal: str | Callable = "gcd",
                 potential: Potential | None = None, max_new_tokens: int = 32,
                 ess_threshold: float = 0.5, resampling: str = "multinomial",
                 awrs_chunk: int = 8, pgcd_weight: float | None = None, vocab=None,
                 jump_forward: bool | str = False) -> None:
        if isinstance(proposal, str) and proposal not in PROPOSALS:
            raise InvalidArgumentError(
                f"proposal must be one of {PROPOSALS} or a callable: {proposal!r}")
        if proposal in ("pgcd", "twist") and (potential is None):
            raise InvalidArgumentError(
                f"proposal={proposal!r} needs potential= (a P-GCD potential with log_next)")
        if max_new_tokens < 1:
            raise InvalidArgumentError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
        self.lm = lm
        self.constraint: Constraint = as_constraint(constraint, vocab)
        if self.constraint.vocab_size != lm.vocab_size:
            raise InvalidArgumentError(
                f"constraint vocabulary size {self.constraint.vocab_size} != LM "
                f"logits width {lm.vocab_size}")
        self.proposal = proposal
        self.potential = potential
        self.max_new_tokens = int(max_new_tokens)
        self.ess_threshold = float(ess_threshold)
        self.resampling = resampling
        self.awrs_chunk = int(awrs_chunk)
        self.pgcd_weight = pgcd_weight
        if jump_forward not in (False, True, "exact", "canonical"):
            raise InvalidArgumentError(
                f'jump_forward must be False, True ("exact") or "canonical": {jump_forward!r}')
        self.jump_forward = {False: None, True: "exact"}.get(jump_forward, jump_forward)
        self.vocab = vocab

    # ------------------------------------------------------------------ proposals

    def _propose(self, logp: torch.Tensor, cst, pst, rows: np.ndarray, r: int,
                 g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Tokens int64 [k] and log increments float64 [k] for the active ``rows``."""
        C = self.constraint
        lp = logp[torch.from_numpy(rows)].double()
        prop = self.proposal
        if prop == "lm":
            tok = categorical_draw(lp, g)
            ok = C.check(cst, torch.from_numpy(rows), torch.from_numpy(tok), r, "gcd").numpy()
            return tok, np.where(ok, 0.0, -np.inf)
        if prop in ("lcd", "gcd"):
            mask = C.allowed(cst.select(torch.from_numpy(rows)), r, prop)
            lq = lp.masked_fill(~mask, -math.inf)
            logz = torch.logsumexp(lq, dim=-1)
            tok = categorical_draw(lq, g)
            return tok, logz.numpy()
        if prop == "awrs":
            sub = torch.from_numpy(rows)

            def check_many(rr, tt):
                return C.check(cst, sub[rr], tt, r, "gcd")

            tok, log_z, checks, _ = awrs_batched(lp, check_many, chunk=self.awrs_chunk, rng=g)
            self._awrs_checks.extend(checks.tolist())
            return tok.numpy(), log_z.numpy()
        # pgcd or a callable proposal: generic importance weight over the GCD mask
        sub = torch.from_numpy(rows)
        mask = C.allowed(cst.select(sub), r, "gcd")
        if prop in ("pgcd", "twist"):
            ps = self.potential.select(pst, sub)
            f = getattr(self.potential, "proposal_logprobs", None) if prop == "pgcd" else None
            if f is not None:  # tractable.hmm.pgcd.PGCD: q ∝ p_lm^w p_hmm(v | x, C)^(1-w)
                lq = f(lp, ps, self.pgcd_weight).double()
            else:  # "twist", or a generic potential: q ∝ p_lm^w (p_lm φ(x v))^(1-w)
                ln = self.potential.log_next(ps, r)
                if ln is None:
                    raise InvalidArgumentError(
                        f"the potential gives no log_next: cannot build the {prop!r} proposal")
                w = 0.0 if prop == "twist" else (self.pgcd_weight or 0.0)
                lq = lp + (1.0 - w) * ln.double()
        else:
            lq = torch.as_tensor(prop(lp, {"rows": rows, "remaining": r, "constraint_state": cst,
                                           "potential_state": pst}), dtype=torch.float64)
        lq = lq.masked_fill(~mask, -math.inf)
        lq = lq - torch.logsumexp(lq, dim=-1, keepdim=True)
        tok = categorical_draw(lq, g)
        ti = torch.from_numpy(tok).clamp(min=0).view(-1, 1)
        inc = (lp.gather(1, ti) - lq.gather(1, ti)).view(-1).numpy()
        inc = np.where(tok < 0, -np.inf, inc)
        return tok, inc

    # ------------------------------------------------------------------ jump-forward

    def _jump_forward_of(self, tokenizer):
        """The :class:`~tractable.fsa.jump_forward.JumpForward` of ``jump_forward="canonical"``
        (warns once: it fixes the spelling of forced text)."""
        global _WARNED_CANONICAL
        from ..fsa.jump_forward import JumpForward

        A = getattr(self.constraint, "automaton", None)
        if A is None or self.vocab is None or tokenizer is None:
            raise InvalidArgumentError(
                'jump_forward="canonical" needs an automaton constraint, vocab= (to SMC) and '
                "tokenizer= (to run): it spells forced bytes with the tokenizer")
        if not _WARNED_CANONICAL:
            _WARNED_CANONICAL = True
            warnings.warn('SMC jump_forward="canonical": forced text is appended in its '
                          "canonical tokenization, so the target is p(x | C, forced text "
                          "spelled canonically), not p(x | C); jump_forward=True is exact",
                          UserWarning, stacklevel=3)
        return JumpForward(A, self.vocab, lambda x: tokenizer.encode(x, add_special_tokens=False))

    def _forced_columns(self, cst, active: np.ndarray, r: int, most: int, jf
                        ) -> list[np.ndarray]:
        """Forced tokens of the ``active`` rows, as columns (int64 [len(active)] each, at most
        ``most``): ``"exact"`` while every row's GCD mask holds one non-EOS token;
        ``"canonical"`` the shortest of the rows' canonical forced spellings
        (:meth:`~tractable.fsa.jump_forward.JumpForward.tokens`).  ``cst`` is not mutated."""
        C = self.constraint
        cols: list[np.ndarray] = []
        if most <= 0:
            return cols
        eos = list(C.eos_token_ids)
        if self.jump_forward == "exact":
            sub = cst.select(torch.from_numpy(active))
            while len(cols) < most:
                mask = C.allowed(sub, r - len(cols), "gcd")
                if not bool((mask.sum(1) == 1).all()):
                    break
                tok = mask.to(torch.uint8).argmax(1).numpy().astype(np.int64)
                if np.isin(tok, eos).any():
                    break
                cols.append(tok)
                sub = C.advance(sub, torch.from_numpy(tok))
            return cols
        from ..fsa.state import AutomatonState

        final = C.automaton.final
        spans = []
        for i in active.tolist():
            st = AutomatonState(torch.from_numpy(np.ascontiguousarray(cst.active[i:i + 1])),
                                final)
            f = jf.tokens(st, r, "gcd")
            if not f:
                return cols
            spans.append(f)
        k = min(most, min(len(f) for f in spans))
        return [np.array([f[j] for f in spans], dtype=np.int64) for j in range(k)]

    # ------------------------------------------------------------------ main loop

    def run(self, prompt_ids: Sequence[int], n_particles: int = 16, *, seed=None,
            tokenizer=None, progress: Callable[[int, int], None] | None = None) -> SMCResult:
        """One SMC run from ``prompt_ids`` with M = ``n_particles``.  ``progress(t, N)`` is
        called before each step t = 0 .. N-1 (e.g. a CLI's progress line)."""
        t0 = time.perf_counter()
        g = np.random.default_rng(seed)
        M = int(n_particles)
        lm, C, pot = self.lm, self.constraint, self.potential
        calls0 = lm.calls
        checks0 = C.checks
        self._awrs_checks: list[int] = []
        eos_id = lm.eos
        eos_set = set(lm.eos_token_ids) | set(C.eos_token_ids)
        lst = lm.start(prompt_ids, M)
        cst = C.start(M)
        pst = pot.start(M) if pot is not None else None
        logw = np.zeros(M)
        if pot is not None:
            logw += pot.log_value(pst, self.max_new_tokens).double().numpy()
        seqs: list[list[int]] = [[] for _ in range(M)]
        done = np.zeros(M, dtype=bool)
        ended_eos = np.zeros(M, dtype=bool)
        n_resample = 0
        ess_hist: list[float] = []
        forced_steps = 0
        jf = self._jump_forward_of(tokenizer) if self.jump_forward == "canonical" else None
        t = -1
        while t + 1 < self.max_new_tokens:
            t += 1
            if progress is not None:
                progress(t, self.max_new_tokens)
            active = np.nonzero(~done & np.isfinite(logw))[0]
            # particles with weight 0 are finished (dead) without further work
            dead_now = ~done & ~np.isfinite(logw)
            done |= dead_now
            if active.size == 0:
                break
            r = self.max_new_tokens - t
            if self.jump_forward:
                # every live particle has forced tokens: append them without proposing, then
                # score the run with one advance_many (a forced step's weight is p(token))
                cols = self._forced_columns(cst, active, r, self.max_new_tokens - 1 - t, jf)
                for tok in cols:
                    tokens = np.full(M, eos_id, dtype=np.int64)
                    tokens[active] = tok
                    if pot is not None:
                        before = pot.log_value(pst, r).double().numpy()
                    cst = C.advance(cst, torch.from_numpy(tokens))
                    if pot is not None:
                        pst = pot.advance(pst, torch.from_numpy(tokens))
                        after = pot.log_value(pst, r - 1).double().numpy()
                        logw[active] += after[active] - before[active]
                    for i in active.tolist():
                        seqs[i].append(int(tokens[i]))
                    t += 1
                    r -= 1
                    if progress is not None:
                        progress(t, self.max_new_tokens)
                if cols:
                    run = np.full((M, len(cols)), eos_id, dtype=np.int64)
                    run[active] = np.stack(cols, 1)
                    lst, lp = lm.advance_many(lst, torch.from_numpy(run))
                    logw[active] += lp.numpy()[active].sum(1)
                    forced_steps += len(cols)
                    active = active[np.isfinite(logw[active])]
                    if active.size == 0:
                        break
            logp = lm.logprobs(lst)
            tok, inc = self._propose(logp, cst, pst, active, r, g)
            tokens = np.full(M, eos_id, dtype=np.int64)
            tok = np.where(tok < 0, eos_id, tok)
            tokens[active] = tok
            logw[active] += inc
            is_eos = np.isin(tokens, list(eos_set))
            if pot is not None:
                before = pot.log_value(pst, r).double().numpy()
            cst = C.advance(cst, torch.from_numpy(tokens))
            if pot is not None:
                pst = pot.advance(pst, torch.from_numpy(tokens))
            for i in active.tolist():
                if is_eos[i]:
                    done[i] = True
                    ended_eos[i] = True
                else:
                    seqs[i].append(int(tokens[i]))
            if pot is not None:
                fin = pot.log_final(pst).double().numpy()
                last = t + 1 == self.max_new_tokens
                after = fin if last else pot.log_value(pst, r - 1).double().numpy()
                # active rows only: a dead particle's potential is −inf before and after
                # (−inf − −inf would be NaN); an active row's `before` is finite
                logw[active] += np.where(is_eos, fin, after)[active] - before[active]
            if t + 1 == self.max_new_tokens:
                # budget reached: complete without EOS; valid iff accepted
                budget_end = active[~is_eos[active]]
                if budget_end.size:
                    acc = C.is_accepting(cst).numpy()
                    logw[budget_end] += np.where(acc[budget_end], 0.0, -np.inf)
                    done[budget_end] = True
                break
            if (~done & np.isfinite(logw)).any():
                lst = lm.advance(lst, torch.from_numpy(tokens))
                # resample
                if np.isfinite(logw).any():
                    wn = normalize_log_weights(logw)
                    ess = 1.0 / float((wn ** 2).sum())
                    ess_hist.append(ess)
                    if ess < self.ess_threshold * M:
                        idx = resample_indices(wn, M, self.resampling, g)
                        mean = log_mean_exp(logw)
                        logw = np.full(M, mean)
                        ti = torch.from_numpy(idx)
                        lst = lst.select(ti)
                        cst = cst.select(ti)
                        if pot is not None:
                            pst = pot.select(pst, ti)
                        seqs = [list(seqs[j]) for j in idx]
                        done = done[idx]
                        ended_eos = ended_eos[idx]
                        n_resample += 1
        log_G = log_mean_exp(logw)
        if np.isfinite(logw).any():
            wn = normalize_log_weights(logw)
            sample = int(g.choice(M, p=wn))
        else:
            wn = np.zeros(M)
            sample = -1
        texts = None
        if tokenizer is not None:
            texts = [tokenizer.decode(s, skip_special_tokens=False) for s in seqs]
        stats = {
            "seconds": time.perf_counter() - t0,
            "lm_calls": lm.calls - calls0,
            "constraint_checks": C.checks - checks0,
            "resampling_steps": n_resample,
            "ess": ess_hist,
            "forced_tokens": forced_steps,
        }
        if self._awrs_checks:
            stats["awrs_checks_per_token"] = list(self._awrs_checks)
        return SMCResult(seqs, torch.from_numpy(logw), torch.from_numpy(wn), float(log_G),
                         sample, [bool(e) for e in ended_eos], texts, stats)


def categorical_draw(logits: torch.Tensor, g: np.random.Generator) -> np.ndarray:
    """One index per row ∝ exp(logits) (float [k, V], unnormalized): int64 [k], -1 for rows
    with no finite entry.  Consumes one uniform per row of ``g`` (inverse CDF)."""
    lp = logits.double().numpy()
    mx = np.max(lp, axis=1, keepdims=True)
    ok = np.isfinite(mx[:, 0])
    p = np.exp(lp - np.where(np.isfinite(mx), mx, 0.0))
    p[~np.isfinite(lp)] = 0.0
    c = np.cumsum(p, axis=1)
    u = g.random(lp.shape[0]) * c[:, -1]
    idx = np.array([min(int(np.searchsorted(c[i], u[i], side="right")), lp.shape[1] - 1)
                    for i in range(lp.shape[0])], dtype=np.int64)
    return np.where(ok, idx, -1)


def log_mean_exp(x: np.ndarray) -> float:
    """log((1/M) Σ_m exp(x_m)) of float [M] log weights (log Ẑ); -inf if no entry is finite."""
    m = np.max(x)
    if not np.isfinite(m):
        return -math.inf
    return float(m + np.log(np.mean(np.exp(x - m))))


def normalize_log_weights(logw: np.ndarray) -> np.ndarray:
    """float [M] log weights -> normalized weights float64 [M] (needs a finite entry)."""
    m = np.max(logw)
    w = np.exp(logw - m)
    return w / w.sum()


def smc(model, tokenizer, prompt, automaton_or_constraint, *, n_particles: int = 8,
        proposal: str | Callable = "gcd", max_new_tokens: int = 32, ess_threshold: float = 0.5,
        resampling: str = "multinomial", potential: Potential | None = None, seed=None,
        chat_template: bool = False, vocab=None, awrs_chunk: int = 8,
        pgcd_weight: float | None = None, jump_forward: bool | str = False) -> SMCResult:
    """Sample from ``model`` conditioned on a constraint with SMC.

    Args:
        model: a Hugging Face causal LM, or a :class:`~.lm.LanguageModel`.
        tokenizer: the HF tokenizer (encodes ``prompt``, decodes particles); may be None when
            ``prompt`` is a list of ids.
        prompt: text, or token ids.
        automaton_or_constraint: a TokenAutomaton, a Constraint, a regex string or a
            viable/accepts checker (the last two need ``vocab``).
        n_particles: M.  proposal: see :class:`SMC`.  max_new_tokens: the budget N.
        chat_template: wrap a text prompt in the tokenizer's chat template (user turn).
        jump_forward: ``True`` (exact) or ``"canonical"``: see :class:`SMC`.

    Returns:
        :class:`SMCResult` (particles, normalized weights, log Ĝ, a drawn sample, texts).
    """
    lm = model if isinstance(model, LanguageModel) else HFCausalLM(model, tokenizer)
    if isinstance(prompt, str):
        if tokenizer is None:
            raise InvalidArgumentError("a text prompt needs a tokenizer")
        if chat_template:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
        else:
            ids = tokenizer.encode(prompt)
    else:
        ids = list(prompt)
    sampler = SMC(lm, automaton_or_constraint, proposal=proposal, potential=potential,
                  max_new_tokens=max_new_tokens, ess_threshold=ess_threshold,
                  resampling=resampling, awrs_chunk=awrs_chunk, vocab=vocab,
                  pgcd_weight=pgcd_weight, jump_forward=jump_forward)
    return sampler.run(ids, n_particles, seed=seed, tokenizer=tokenizer)
