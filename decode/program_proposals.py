"""Token proposals of programmable SMC (:mod:`.program`; paper 004 §2.2, the kernels M'_t).

``tok = await self.sample(ctx.next_token(), proposal=q)`` draws the token from ``q`` and
multiplies the particle's weight by a properly weighted estimate of p(tok) / q(tok) (paper 000
App. B): E[w f(x)] = Σ_v p(v) f(v) over the tokens the target allows.  The runner batches the
particles whose proposals have equal :meth:`TokenProposal.key` into one :meth:`~TokenProposal.draw`.

* :func:`lcd_proposal`, :func:`gcd_proposal` — x ~ p · mask / Z, weight Z (seed §2.2: M'_t and
  G'_t = Σ_w p(w) 1_C(s w)); GCD's mask is budget-aware (paper 002 eqs. 3-4);
* :class:`AWRSProposal` — adaptive weighted rejection sampling (paper 000), weight Ẑ;
* :class:`PGCDProposal` — P-GCD (paper 002 §4.3), weight p/q over the GCD mask;
* :class:`ProductProposal` — the normalized product of several contexts' next-token
  distributions (prompt intersection's locally optimal M'_t, seed Fig. 2), weight p/q.

This module does not import :mod:`.program`: the trackers and contexts a proposal is built on
are the handles ``ctx.constrain(...)`` / ``ctx.track(...)`` / ``self.new_context(...)`` return,
and ``draw`` reads the runner's batched slots through the few members listed in
:meth:`TokenProposal.draw`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..fsa.errors import InvalidArgumentError, InvalidArgumentTypeError
from .samplers import awrs_batched
from .smc import categorical_draw

__all__ = [
    "TokenProposal", "MaskedProposal", "lcd_proposal", "gcd_proposal", "AWRSProposal",
    "PGCDProposal", "ProductProposal",
]

_NEG_INF = -math.inf


def _handle(obj, who: str, what: str, needs: str) -> Any:
    """``obj`` if it is a runner handle with method ``needs`` (duck-typed: this module cannot
    import :mod:`.program`), else :class:`InvalidArgumentTypeError`."""
    if not (hasattr(obj, "_slot") and callable(getattr(obj, needs, None))):
        raise InvalidArgumentTypeError(f"{who} needs a {what}, got {type(obj).__name__}")
    return obj


class TokenProposal:
    """A properly weighted proposal for a :class:`~.program.NextToken` (paper 000 App. B).
    ``draw`` returns for k particles at once tokens x and log weights with E[w f(x)] =
    Σ_v p(v) f(v) over the tokens the target allows; ``key()`` groups the particles drawn
    together (equal keys: one batched draw).  A proposal is copied with its particle."""

    def key(self) -> tuple:
        raise NotImplementedError

    def draw(self, runner, rows: np.ndarray, lp: torch.Tensor,
             g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``rows``: particle indices int64 [k]; ``lp``: float64 [k, V] log p of the target;
        ``g`` is consumed.  ``runner`` (the run's ``_Runner``) gives ``slots[handle._slot]``
        (``.obj``: the LM / Constraint / Potential, ``.state``: its batched state over all
        particles), ``logprobs(context_slot)`` float [M, V], ``remaining_rows(slot, rows)``
        int64 [k] and the list ``awrs_checks``.  Returns tokens int64 [k] (-1: no token
        possible; the particle dies) and log weights float64 [k]."""
        raise NotImplementedError

    @staticmethod
    def _mask(runner, tracker, rows: np.ndarray, mode: str = "gcd") -> torch.Tensor:
        """bool [k, V]: the ``tracker``'s mask for ``rows`` at the start of the step."""
        s = runner.slots[tracker._slot]
        return s.obj.allowed(s.state.select(torch.from_numpy(rows)),
                             runner.remaining_rows(s, rows), mode)


class MaskedProposal(TokenProposal):
    """x ~ p · mask / Z with the ``"lcd"`` or ``"gcd"`` (budget-aware) mask of a
    :class:`~.program.ConstraintTracker`; log weight log Z (seed §2.2: M'_t, G'_t =
    Σ_w p(w) 1_C(s w)).

    Raises:
        InvalidArgumentError: ``mode`` is not "lcd" or "gcd".
        InvalidArgumentTypeError: ``tracker`` is not a ConstraintTracker.
    """

    def __init__(self, tracker, mode: str = "gcd") -> None:
        if mode not in ("lcd", "gcd"):
            raise InvalidArgumentError(f"mode must be 'lcd' or 'gcd': {mode!r}")
        self.tracker = _handle(tracker, "MaskedProposal", "ConstraintTracker", "allowed")
        self.mode = mode

    def key(self) -> tuple:
        return ("mask", self.tracker._slot, self.mode)

    def draw(self, runner, rows, lp, g):
        lq = lp.masked_fill(~self._mask(runner, self.tracker, rows, self.mode), _NEG_INF)
        return categorical_draw(lq, g), torch.logsumexp(lq, dim=-1).numpy()


def lcd_proposal(tracker) -> MaskedProposal:
    """Greedy masking (the mask ignores the budget) on a ConstraintTracker."""
    return MaskedProposal(tracker, "lcd")


def gcd_proposal(tracker) -> MaskedProposal:
    """Budget-aware masking (GCD, paper 002 eqs. 3-4) on a ConstraintTracker."""
    return MaskedProposal(tracker, "gcd")


class AWRSProposal(TokenProposal):
    """Adaptive weighted rejection sampling (paper 000 Def. 2, batched as App. H.1) with the
    tracker's black-box ``check`` (GCD budget); log weight log Ẑ.  ``chunk``: checks per row
    per round.  Appends the checks per token to ``runner.awrs_checks``."""

    def __init__(self, tracker, chunk: int = 8) -> None:
        self.tracker = _handle(tracker, "AWRSProposal", "ConstraintTracker", "check")
        self.chunk = int(chunk)

    def key(self) -> tuple:
        return ("awrs", self.tracker._slot, self.chunk)

    def draw(self, runner, rows, lp, g):
        s = runner.slots[self.tracker._slot]
        sub, rem = torch.from_numpy(rows), runner.remaining_rows(s, rows)

        def check_many(rr, tt):
            return s.obj.check(s.state, sub[rr], tt, rem[rr.numpy()], "gcd")

        tok, log_z, checks, _ = awrs_batched(lp, check_many, chunk=self.chunk, rng=g)
        runner.awrs_checks.extend(checks.tolist())
        return tok.numpy(), log_z.numpy()


class PGCDProposal(TokenProposal):
    """P-GCD (paper 002 §4.3): q ∝ p_lm^w · p_hmm(· | x, C)^(1-w) over the GCD mask of
    ``tracker`` (a ``PGCD``'s ``proposal_logprobs`` on the PotentialTracker ``potential``;
    for another potential, q ∝ p_lm · φ(x v)^(1-w) from its ``log_next``); with
    ``twist=True`` always q ∝ p_lm · φ(x v) from ``log_next`` (SMC's ``"twist"``: the locally
    optimal proposal for the potential).  Log weight log p(x) - log q(x).  Raises
    InvalidArgumentError at the draw if the potential gives neither."""

    def __init__(self, tracker, potential, w: float | None = None, *,
                 twist: bool = False) -> None:
        self.tracker = _handle(tracker, "PGCDProposal", "ConstraintTracker", "allowed")
        self.potential = _handle(potential, "PGCDProposal", "PotentialTracker", "log_next")
        self.w = 0.0 if twist else w
        self.twist = bool(twist)

    def key(self) -> tuple:
        return ("pgcd", self.tracker._slot, self.potential._slot, self.w, self.twist)

    def draw(self, runner, rows, lp, g):
        ps = runner.slots[self.potential._slot]
        pst = ps.obj.select(ps.state, torch.from_numpy(rows))
        if hasattr(ps.obj, "proposal_logprobs") and not self.twist:
            lq = ps.obj.proposal_logprobs(lp, pst, self.w).double()
        elif (ln := ps.obj.log_next(pst, None)) is not None:
            lq = lp + (1.0 - (self.w or 0.0)) * ln.double()
        else:
            raise InvalidArgumentError("the potential gives neither proposal_logprobs nor "
                                       "log_next: cannot build a P-GCD proposal")
        return _importance_draw(lp, lq, self._mask(runner, self.tracker, rows), g)


class ProductProposal(TokenProposal):
    """q ∝ Π_j p_j over several contexts' next-token distributions (GCD-masked by the
    ConstraintTracker ``tracker`` if given): prompt intersection's locally optimal proposal
    (seed §2.2, M'_t); log weight log p(x) - log q(x) for the sampled target p (``observe``
    the others for G'_t).

    Raises:
        InvalidArgumentError: no context.
        InvalidArgumentTypeError: a context or the tracker of the wrong kind.
    """

    def __init__(self, contexts: Sequence, tracker=None) -> None:
        self.contexts = [_handle(c, "ProductProposal", "Context", "next_token")
                         for c in contexts]
        if not self.contexts:
            raise InvalidArgumentError("ProductProposal needs at least one context")
        self.tracker = (None if tracker is None else
                        _handle(tracker, "ProductProposal", "ConstraintTracker", "allowed"))

    def key(self) -> tuple:
        t = None if self.tracker is None else self.tracker._slot
        return ("product", tuple(c._slot for c in self.contexts), t)

    def draw(self, runner, rows, lp, g):
        sub = torch.from_numpy(rows)
        lq = sum(runner.logprobs(c._slot)[sub].double() for c in self.contexts)
        mask = (torch.ones_like(lq, dtype=torch.bool) if self.tracker is None
                else self._mask(runner, self.tracker, rows))
        return _importance_draw(lp, lq, mask, g)


def _importance_draw(lp: torch.Tensor, lq: torch.Tensor, mask: torch.Tensor,
                     g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """x ~ normalize(exp(lq) · mask) per row (float64 [k, V], bool [k, V]); log weight
    lp(x) - log q(x) float64 [k] (-inf and token -1 where the mask is empty)."""
    lq = lq.masked_fill(~mask, _NEG_INF)
    lq = lq - torch.logsumexp(lq, dim=-1, keepdim=True)
    tok = categorical_draw(lq, g)
    ti = torch.from_numpy(tok).clamp(min=0).view(-1, 1)
    inc = (lp.gather(1, ti) - lq.gather(1, ti)).view(-1).numpy()
    return tok, np.where(tok < 0, _NEG_INF, inc)
