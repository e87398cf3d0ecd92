"""Speculative decoding: check a draft of k tokens against an automaton state in one call.

A draft model (or n-gram lookup, or jump-forward) proposes tokens ``d_1 … d_k``; the target model
scores them in one forward pass; the constraint must say how many of them it allows.
:func:`verify_draft` answers with the longest allowed prefix, under the same rule as the masks
(paper 002 eq. 2 with the budget convention of :mod:`.state`): with ``r`` tokens remaining before
``d_1``, token ``d_i`` is allowed iff it is in ``allowed(state_{i-1}, r - i + 1, mode)``, i.e.

* a text token: the set it leads to is non-empty and (GCD) has a state within ``r - i`` tokens
  of acceptance (``distance_to_accept() <= r - i``; LCD: only ``r - i + 1 >= 1``);
* an EOS id: ``state_{i-1}`` is accepting and ``r - i + 1 >= 1``.  EOS ends the draft: the
  tokens after it are never accepted, and the state after it is the empty (dead) set, as
  :func:`tractable.fsa.masks.advance` gives.

So a walk that takes the accepted prefix keeps the GCD invariant (it ends accepted within the
budget), exactly as if each token had been sampled under its mask.

Rollback
--------
States are immutable (:class:`~.state.AutomatonState`): nothing is undone.  Keep the state you
had before the draft; the returned ``states[j]`` is the state after the ``j`` first tokens
(``j = 0``: the input state itself), so "roll back to after ``n`` tokens" is ``states[n]``, and
the state to continue from after a partial acceptance is ``states[accepted]``.  The KV cache of
the model is rolled back by the caller (truncate to ``prefix + accepted`` positions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .errors import InvalidArgumentError
from .state import AutomatonState

#: Mask modes (as in the masks): budget-aware ``"gcd"`` and greedy ``"lcd"``.
MODES = ("gcd", "lcd")


def _remaining_list(remaining, B: int) -> list:
    """``remaining`` as B ints (or Nones)."""
    if remaining is None:
        return [None] * B
    t = torch.as_tensor(remaining)
    if t.dim() == 0:
        return [int(t)] * B
    if tuple(t.shape) != (B,):
        raise InvalidArgumentError(
            f"remaining has shape {tuple(t.shape)}; expected an int or [{B}]")
    return [int(x) for x in t.tolist()]

__all__ = ["DraftVerification", "verify_draft"]


@dataclass(frozen=True)
class DraftVerification:
    """What :func:`verify_draft` found, for a batch of B drafts of at most k tokens.

    Attributes:
        accepted: int64 [B] — the number of leading draft tokens allowed (0..length of row b).
        state: the state after the accepted tokens (batch B; row b after ``accepted[b]``).
        states: ``k + 1`` states, ``states[j]`` row b the state after ``min(j, accepted[b])``
            tokens of row b (rollback points; ``states[0]`` is the input state).
    """

    accepted: torch.Tensor
    state: AutomatonState
    states: list[AutomatonState]


def verify_draft(
    automaton,
    state: AutomatonState,
    draft_tokens: torch.Tensor | Sequence[int] | Sequence[Sequence[int]],
    remaining: int | torch.Tensor | Sequence[int] | None,
    mode: str = "gcd",
    *,
    lengths: torch.Tensor | Sequence[int] | None = None,
) -> DraftVerification:
    """How many tokens of each draft the constraint allows, and the state after them.

    Args:
        automaton: a :class:`~.automaton.TokenAutomaton` (anything with ``advance``,
            ``distance_to_accept`` and ``eos_token_ids``).
        state: the batch of B state sets before the drafts (unchanged).
        draft_tokens: LongTensor [B, k] (or nested lists; a flat list is one draft, B = 1).
        remaining: tokens that may still be generated before ``d_1``, EOS included (an int, a
            LongTensor/list [B], or None: no budget).
        mode: ``"gcd"`` or ``"lcd"`` (module docstring).
        lengths: the number of real tokens of each row (default k for every row); entries past
            a row's length are ignored.

    Returns:
        :class:`DraftVerification` (``accepted``, ``state``, ``states``).

    Raises:
        InvalidArgumentError: a bad mode, shapes that disagree with the batch.

    Cost: k batched ``advance`` calls (each a cached set transition per row) and a distance
    lookup; no mask is built.
    """
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
    d = torch.as_tensor(draft_tokens, dtype=torch.long)
    if d.dim() == 1:
        d = d.unsqueeze(0)
    B = state.batch_size
    if d.dim() != 2 or d.shape[0] != B:
        raise InvalidArgumentError(
            f"draft_tokens has shape {tuple(d.shape)}; expected [{B}, k] for a batch of {B}")
    k = int(d.shape[1])
    lens = [k] * B if lengths is None else [int(x) for x in torch.as_tensor(lengths).tolist()]
    if len(lens) != B or any(not 0 <= x <= k for x in lens):
        raise InvalidArgumentError(f"lengths {lens} must be {B} values in 0..{k}")
    rem = _remaining_list(remaining, B)
    dist = automaton.distance_to_accept().cpu()
    eos = torch.tensor(sorted(int(e) for e in automaton.eos_token_ids), dtype=torch.long)
    alive = torch.ones(B, dtype=torch.bool)
    accepted = torch.zeros(B, dtype=torch.long)
    states = [state]
    cur = state
    for i in range(k):
        toks = d[:, i]
        live = alive & (torch.tensor(lens) > i)
        r_i = torch.tensor([(1 << 62) if r is None else r - i for r in rem], dtype=torch.long)
        is_eos = torch.isin(toks, eos)
        acc_now = cur.is_accepting().cpu()
        nxt = automaton.advance(cur, torch.where(live, toks, torch.zeros_like(toks)))
        act = nxt.active.cpu()
        if mode == "gcd":
            big = torch.iinfo(torch.long).max
            best = torch.where(act, dist.unsqueeze(0), torch.full_like(act, big, dtype=torch.long))
            ok_text = best.min(dim=1).values <= r_i - 1
        else:
            ok_text = act.any(dim=1) & (r_i >= 1)
        ok = torch.where(is_eos, acc_now & (r_i >= 1), ok_text) & live
        accepted += ok.long()
        alive = ok & ~is_eos
        # rows that stop keep their state: select between the old and the new set per row
        idx = torch.where(ok, torch.arange(B) + B, torch.arange(B))
        cur = AutomatonState.cat([cur, nxt]).select(idx) if B > 1 else (nxt if bool(ok[0])
                                                                          else cur)
        states.append(cur)
        if not bool(alive.any()):
            states.extend([cur] * (k - 1 - i))
            break
    return DraftVerification(accepted, cur, states)
