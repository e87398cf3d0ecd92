"""P-GCD: probabilistic globally constrained decoding (paper 002 §4.3).

Given an HMM that imitates the LM and a token automaton for the constraint C, within a budget
of ``n`` new tokens (EOS convention of :mod:`tractable.hmm.product`):

* **proposal**  ``q(x_t | x_<t) ∝ p_lm(x_t | x_<t)^w · p_hmm(x_t | x_<t, C)^(1−w)``, zero
  exactly where the GCD mask is (``p_hmm(· | x_<t, C)`` is Algorithm 1's next-token
  distribution; tokens with no accepted completion within the budget get ``−inf`` for every
  ``w``, including ``w = 1``, so the proposal is always budget-safe);
* **potential** ``φ(x_{1:t}) ∝ p_lm(x_{1:t}) · p_hmm(C | x_{1:t})``: this module computes the
  HMM factor ``log φ_hmm(x_{1:t}) = log p_hmm(C | x_{1:t})`` (:meth:`PGCD.log_potential`;
  the sampler adds ``log p_lm(x_{1:t})``).  Finished and unfinished prefixes are on one scale:
  ``log p_hmm(C)`` at ``t = 0``, exactly 0 for a finished accepted output (``p_hmm(C | x) = 1``,
  equal to :meth:`PGCD.log_final`): SMC starts from the weight ``φ_hmm(∅) = p_hmm(C)``, the
  twist telescopes away (Ẑ estimates Z), and finished and unfinished particles compete on equal
  terms at every resampling.  (The paper's second form ``p_hmm(x_{1:t} | C) / p_hmm(x_{1:t})``
  differs by the constant ``1 / p_hmm(C)``; applied to unfinished prefixes but not to finished
  outputs, whose potential is 1, it over-weights every unfinished particle by ``1 / p_hmm(C)``
  at each resampling — ~e^15 for a distilled HMM — and SMC's estimates become heavy-tailed.)

:class:`PGCD` holds the compiled product (shared, immutable); its state is a
:class:`~tractable.hmm.product.ProductState` (batched; ``select`` reorders it for SMC
resampling).  It also speaks the ``decode.smc.Potential`` protocol (``start``, ``advance``,
``select``, ``log_value``, ``log_final``, ``log_next``).

:func:`pgcd_logits_processor` wraps it for Hugging Face ``generate``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ..fsa.errors import InvalidArgumentError, TokenError, VocabularyError
from .model import HMM
from .product import HMMAutomatonProduct, ProductState

try:  # transformers is optional: the processor works as a plain callable without it
    from transformers import LogitsProcessor as _LogitsProcessorBase
except ImportError:  # pragma: no cover
    _LogitsProcessorBase = object

__all__ = ["PGCD", "PGCDProposalOnly", "PGCDLogitsProcessor", "pgcd_logits_processor",
           "pgcd_proposal"]

_NEG_INF = float("-inf")


def pgcd_proposal(lm_logprobs: torch.Tensor, hmm_logprobs: torch.Tensor, w: float) -> torch.Tensor:
    """float64 [B, V]: ``log q`` normalized, ``q ∝ p_lm^w · p_hmm(·|x_<t, C)^(1−w)`` (§4.3).

    ``lm_logprobs``: log p_lm (or raw logits: only differences within a row matter) [B, V];
    ``hmm_logprobs``: ``log p_hmm(x_t = v | x_<t, C)`` [B, V].  Entries where ``hmm_logprobs``
    is ``−inf`` stay ``−inf`` for any ``w`` (the GCD mask).  A row where every entry is ``−inf``
    stays all ``−inf``."""
    if not 0.0 <= w <= 1.0:
        raise InvalidArgumentError(f"P-GCD weight w must be in [0, 1], got {w}")
    lm = torch.log_softmax(lm_logprobs.double(), dim=-1)
    hm = hmm_logprobs.double()
    allowed = hm > _NEG_INF
    lq = w * lm + (1.0 - w) * torch.where(allowed, hm, torch.zeros_like(hm))
    lq = lq.masked_fill(~allowed, _NEG_INF)
    z = torch.logsumexp(lq, dim=-1, keepdim=True)
    return torch.where(torch.isfinite(z), lq - z, lq)


class PGCD:
    """P-GCD for one (automaton, HMM, budget) triple; see the module docstring.

    Args:
        automaton: :class:`~tractable.fsa.automaton.TokenAutomaton` over the LM's vocabulary.
        hmm: :class:`~tractable.hmm.model.HMM` with the same vocabulary.
        max_new_tokens: the budget ``n`` (EOS included).
        w: default proposal weight (``1`` = LM with the GCD mask, ``0`` = the HMM product).
        dtype: compute dtype (default the HMM's).

    Raises:
        VocabularyMismatchError, UnsatisfiableBudgetError: see
        :class:`~tractable.hmm.product.HMMAutomatonProduct`.
    """

    def __init__(self, automaton: Any, hmm: HMM, max_new_tokens: int, w: float = 0.5, *,
                 dtype: torch.dtype | None = None):
        if not 0.0 <= w <= 1.0:
            raise InvalidArgumentError(f"P-GCD weight w must be in [0, 1], got {w}")
        self.product = HMMAutomatonProduct(hmm, automaton, max_new_tokens, dtype=dtype)
        self.automaton = automaton
        self.hmm = self.product.hmm
        self.max_new_tokens = int(max_new_tokens)
        self.w = float(w)

    @property
    def vocab_size(self) -> int:
        return self.hmm.vocab_size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.product.eos_ids

    # ------------------------------------------------------------------ state

    def start(self, batch_size: int = 1) -> ProductState:
        """State before any generated token, ``batch_size`` rows."""
        return self.product.start(batch_size)

    def advance(self, state: ProductState, tokens: torch.Tensor, *,
                strict: bool = False) -> ProductState:
        """Consume one token per row (int64 [B]); see :meth:`HMMAutomatonProduct.advance`.

        A token with which no accepted output within the budget continues (a budget-blind
        proposal such as LCD or the plain LM draws one; SMC then feeds EOS to the dead
        particle) makes its row dead: :meth:`log_value` and :meth:`log_final` are ``−inf`` for
        it from then on — weight 0 in SMC — and later advances ignore its tokens.

        Raises:
            TokenError: a live row's token id is outside the vocabulary; with ``strict=True``,
                also a live row's token of product probability 0 (the row would be dead).
            ValueError: ``tokens`` does not hold exactly one id per row.
            UnsatisfiableBudgetError: the budget is already used up (``t == max_new_tokens``).
        """
        return self.product.advance(state, tokens, strict=strict)

    def select(self, state: ProductState, indices: torch.Tensor) -> ProductState:
        return state.select(indices)

    # ------------------------------------------------------------------ proposal

    def next_token_logprobs(self, state: ProductState) -> torch.Tensor:
        """float64 [B, V]: ``log p_hmm(x_t = v | x_<t, C)`` (Algorithm 1)."""
        return self.product.next_token_logprobs(state)

    def proposal_logprobs(self, lm_logprobs: torch.Tensor, state: ProductState,
                          w: float | None = None) -> torch.Tensor:
        """float64 [B, V]: the P-GCD proposal ``log q`` (normalized; −inf where masked)."""
        return pgcd_proposal(lm_logprobs, self.next_token_logprobs(state),
                             self.w if w is None else w)

    # ------------------------------------------------------------------ potential

    def log_potential(self, state: ProductState) -> torch.Tensor:
        """float64 [B]: ``log φ_hmm(x_{1:t}) = log p_hmm(C | x_{1:t})`` (the HMM factor of
        ``φ_pgcd(x_{1:t}) ∝ p_lm(x_{1:t}) · p_hmm(C | x_{1:t})``, §4.3; add
        ``log p_lm(x_{1:t})`` for φ itself).  ``log p_hmm(C)`` at t = 0; exactly 0 for a
        finished accepted row (EOS emitted, or the budget used up); ``−inf`` for a dead row
        (:attr:`~tractable.hmm.product.ProductState.dead`); see
        :meth:`~tractable.hmm.product.HMMAutomatonProduct.log_constraint_prob`."""
        return self.product.log_constraint_prob(state)

    def log_potential_increment(self, prev: ProductState, new: ProductState) -> torch.Tensor:
        """float64 [B]: ``log φ_hmm(x_{1:t+1}) − log φ_hmm(x_{1:t})`` between two states of the
        same rows (``new = advance(prev, ·)``)."""
        return self.log_potential(new) - self.log_potential(prev)

    # ------------------------------------------------------------------ decode.smc.Potential

    def _check_remaining(self, state: ProductState, remaining) -> None:
        if remaining is None:
            return
        r = int(remaining) if not torch.is_tensor(remaining) else int(remaining.reshape(-1)[0])
        if r != self.max_new_tokens - state.t:
            raise InvalidArgumentError(
                f"P-GCD was built for a budget of {self.max_new_tokens} tokens; at step "
                f"{state.t} it expects remaining={self.max_new_tokens - state.t}, got {r}")

    def log_value(self, state: ProductState, remaining=None) -> torch.Tensor:
        """``Potential.log_value``: float64 [B] :meth:`log_potential`, ``log p_hmm(C | x)``
        (``−inf`` for a dead row).

        Raises:
            ValueError: ``remaining`` is given and is not ``max_new_tokens − t``.
        """
        self._check_remaining(state, remaining)
        return self.log_potential(state)

    def log_final(self, state: ProductState) -> torch.Tensor:
        """``Potential.log_final``: float64 [B] zeros — ``log p_hmm(C | x) = 0`` for a complete
        accepted output (the value :meth:`log_value` gives it), so the twist is removed at the
        end and the SMC target stays ``p_lm · 1_C``; acceptance itself is the constraint's
        job.  ``−inf`` for a dead row (:attr:`~tractable.hmm.product.ProductState.dead`), as
        :meth:`log_value`."""
        return torch.where(state.dead.cpu(), _NEG_INF, 0.0).to(torch.float64)

    def log_next(self, state: ProductState, remaining=None) -> torch.Tensor:
        """``Potential.log_next``: float64 [B, V] ``log φ_hmm(x_{1:t} v) = log p_hmm(C | x v)``
        for every v, on the scale of :meth:`log_value` (``log_next(x)[v] ==
        log_value(advance(x, v))``): ``log p_hmm(v | x, C) − log p_hmm(v | x) + log φ_hmm(x)``
        for a text token; exactly 0 where ``x v`` is finished and accepted (v an EOS id, or
        ``t + 1 = n``); −inf where masked.  A row that emitted EOS gives 0 at its first EOS id
        and −inf elsewhere; a dead row is −inf everywhere.

        Raises:
            ValueError: ``remaining`` is given and is not ``max_new_tokens − t``.
            UnsatisfiableBudgetError: the budget is used up (``t == max_new_tokens``).
        """
        self._check_remaining(state, remaining)
        lc = self.next_token_logprobs(state)
        allowed = lc > _NEG_INF
        if state.t + 1 == self.max_new_tokens:  # every extension is a complete output
            return torch.where(allowed, 0.0, _NEG_INF).to(torch.float64)
        lu = torch.log(state.a.double() @ self.hmm.emission.double())  # p_hmm(v | x) [B, V]
        out = lc - lu + self.log_potential(state)[:, None]
        eos = list(self.eos_token_ids)
        if eos:
            out[:, eos] = 0.0
        out = out.masked_fill(~allowed, _NEG_INF)
        if bool(state.done.any()):
            out[state.done] = lc[state.done]  # 0 at the first EOS id, −inf elsewhere (dead: all)
        return out

    def proposal_only(self) -> PGCDProposalOnly:
        """This P-GCD as the ``"pgcd"`` SMC proposal *without* its potential (weights p_lm / q,
        no look-ahead twist): pass it as ``potential=`` to :class:`~tractable.decode.smc.SMC`
        with ``proposal="pgcd"``."""
        return PGCDProposalOnly(self)

    def __repr__(self) -> str:
        return (f"PGCD(w={self.w}, max_new_tokens={self.max_new_tokens}, hmm={self.hmm!r}, "
                f"automaton={self.automaton!r})")


class PGCDProposalOnly:
    """A :class:`PGCD` as the ``"pgcd"`` proposal only (:meth:`PGCD.proposal_only`): its product
    state rides along as the potential state (SMC advances and reorders it), but the twist is 1
    — ``log_value`` and ``log_final`` are 0 (−inf only for a dead row), ``log_next`` is None — so
    SMC weights are the plain importance weights p_lm / q.  Immutable; shares the product."""

    def __init__(self, pgcd: PGCD) -> None:
        self.pgcd = pgcd

    def start(self, batch_size: int) -> ProductState:
        return self.pgcd.start(batch_size)

    def advance(self, state: ProductState, tokens: torch.Tensor) -> ProductState:
        return self.pgcd.advance(state, tokens)

    def select(self, state: ProductState, indices: torch.Tensor) -> ProductState:
        return self.pgcd.select(state, indices)

    def log_value(self, state: ProductState, remaining=None) -> torch.Tensor:
        return self.pgcd.log_final(state)

    def log_final(self, state: ProductState) -> torch.Tensor:
        return self.pgcd.log_final(state)

    def log_next(self, state: ProductState, remaining=None) -> None:
        return None

    def proposal_logprobs(self, lm_logprobs: torch.Tensor, state: ProductState,
                          w: float | None = None) -> torch.Tensor:
        return self.pgcd.proposal_logprobs(lm_logprobs, state, w)


class PGCDLogitsProcessor(_LogitsProcessorBase):
    """``transformers.LogitsProcessor`` returning the P-GCD proposal ``log q`` as scores.

    Conventions mirror :class:`tractable.decode.processor.GCDLogitsProcessor`: the prompt
    width ``P`` is fixed at the first call, each row's generated suffix is ``input_ids[b, P:]``,
    and a dictionary *generated prefix → state row* from the previous call lets each row advance
    from its parent prefix by its last token (rows may be reordered or expanded between calls;
    an unseen prefix is replayed from the start).  Rows that generated an EOS id put all their
    mass on EOS (and ``pad_token_id`` if given).  ``scores`` is not mutated.

    Put it last in the processor list (``q`` uses the scores it receives as ``p_lm``; a
    temperature or top-k processor before it changes ``p_lm``).

    Raises (on a call): :class:`~tractable.fsa.errors.VocabularyError` when ``scores`` is not
    ``[B, V]``; :class:`~tractable.fsa.errors.TokenError` when a generated prefix holds a token
    that the constraint does not allow within the budget (something other than this processor
    chose it) or an id outside the vocabulary.
    """

    def __init__(self, automaton: Any, hmm: HMM, max_new_tokens: int, w: float = 0.5, *,
                 pad_token_id: int | None = None, dtype: torch.dtype | None = None):
        self.pgcd = PGCD(automaton, hmm, max_new_tokens, w, dtype=dtype)
        self.max_new_tokens = int(max_new_tokens)
        self.w = float(w)
        V = automaton.vocab_size
        if pad_token_id is not None and not 0 <= int(pad_token_id) < V:
            raise VocabularyError(f"pad_token_id {pad_token_id} is outside 0..{V - 1}")
        self.pad_token_id = pad_token_id
        self._stop = sorted(set(self.pgcd.eos_token_ids) | (
            {int(pad_token_id)} if pad_token_id is not None else set()))
        self.reset()

    def reset(self) -> None:
        """Forget the previous generate call."""
        self.prompt_length: int | None = None
        self._keys: dict[tuple[int, ...], int] = {}
        self._state: ProductState | None = None
        self.calls = 0
        self.seconds = 0.0

    def _replay(self, key: tuple[int, ...]) -> ProductState:
        st = self.pgcd.start(1)
        for tok in key:
            st = self.pgcd.advance(st, torch.tensor([tok]), strict=True)
        return st

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        V = self.pgcd.vocab_size
        if scores.dim() != 2 or scores.shape[-1] != V:
            raise VocabularyError(
                f"scores have shape {tuple(scores.shape)} but the automaton and HMM have a "
                f"vocabulary of {V} ids")
        B, L = input_ids.shape
        if self.prompt_length is None:
            self.prompt_length = L
        P = self.prompt_length
        n = L - P
        if n < 0:
            raise InvalidArgumentError(
                "a PGCDLogitsProcessor serves one generate() call (call reset())")
        gen = input_ids[:, P:].tolist() if n else [[] for _ in range(B)]
        eos = set(self.pgcd.eos_token_ids)
        prev_keys = self._keys
        new_keys: dict[tuple[int, ...], int] = {}
        row_code = [0] * B
        parents: list[int] = []
        toks: list[int] = []
        replays: dict[int, ProductState] = {}
        for b in range(B):
            key = tuple(gen[b])
            if key in new_keys:
                row_code[b] = new_keys[key]
                continue
            if any(t in eos for t in key):
                code = -1  # finished
            elif n == 0:
                code = len(parents)
                parents.append(-1)
                toks.append(-1)
            else:
                parent = prev_keys.get(key[:-1])
                code = len(parents)
                if parent is None or parent < 0:
                    replays[code] = self._replay(key)
                    parents.append(-1)
                    toks.append(-1)
                else:
                    parents.append(parent)
                    toks.append(key[-1])
            new_keys[key] = code
            row_code[b] = code
        U = len(parents)
        state = None
        if U:
            if n == 0:
                state = self.pgcd.start(U)
            elif not replays:
                state = self.pgcd.advance(self._state.select(torch.tensor(parents)),
                                          torch.tensor(toks), strict=True)
            else:
                rows = []
                for u in range(U):
                    if u in replays:
                        rows.append(replays[u])
                    else:
                        rows.append(self.pgcd.advance(
                            self._state.select(torch.tensor([parents[u]])),
                            torch.tensor([toks[u]]), strict=True))
                state = _cat(rows)
            hmm_lp = self.pgcd.next_token_logprobs(state)  # [U, V], one per unique prefix
        out = torch.full((B, V), _NEG_INF, dtype=torch.float64)
        idx = torch.tensor(row_code)
        live = idx >= 0
        if U:
            sc = scores.detach().to(device="cpu", dtype=torch.float64)
            out[live] = pgcd_proposal(sc[live], hmm_lp[idx[live]], self.w)
        if bool((~live).any()):
            if not self._stop:
                raise TokenError("a row ended but the vocabulary has no EOS id")
            out[~live, self._stop[0]] = 0.0
        self._keys = new_keys
        self._state = state
        self.calls += 1
        self.seconds += time.perf_counter() - t0
        return out.to(device=scores.device, dtype=scores.dtype)


def _cat(states: list[ProductState]) -> ProductState:
    s0 = states[0]
    return ProductState(
        s0.t, torch.cat([s.a for s in states]), torch.cat([s.f for s in states]),
        torch.cat([s.c for s in states]), torch.cat([s.log_c_scale for s in states]),
        torch.cat([s.log_p_hmm for s in states]), torch.cat([s.done for s in states]),
        torch.cat([s.log_weight_done for s in states]))


def pgcd_logits_processor(automaton: Any, hmm: HMM, max_new_tokens: int, w: float = 0.5, *,
                          pad_token_id: int | None = None,
                          dtype: torch.dtype | None = None) -> PGCDLogitsProcessor:
    """A logits processor for ``model.generate(..., max_new_tokens=max_new_tokens,
    logits_processor=[proc], do_sample=True)`` that samples from the P-GCD proposal
    ``q ∝ p_lm^w · p_hmm(·|x_<t, C)^(1−w)`` (§4.3); every output is accepted by ``automaton``
    when generation stops (at EOS or when the budget runs out).

    Raises:
        UnsatisfiableBudgetError: no accepted output fits in ``max_new_tokens``.
        VocabularyMismatchError: the HMM and the automaton have different vocabularies.
        ValueError: ``w`` outside [0, 1].
    """
    return PGCDLogitsProcessor(automaton, hmm, max_new_tokens, w, pad_token_id=pad_token_id,
                               dtype=dtype)
