"""A :class:`~tractable.fsa.json_schema.unique_items.UniqueItemsAutomaton` (JSON Schema
``uniqueItems`` checked per request) as a :class:`~.constraints.Constraint`, for SMC, AWRS and CARS.

:func:`~.constraints.as_constraint` returns this adapter for such an automaton (through its
``as_constraint()``), so ``tractable.smc(model, tok, prompt, compile_json_schema(schema,
vocab))`` works unchanged.  Semantics are the :mod:`.constraints` ones: ``advance`` leaves a
row unchanged on EOS (it is finished); ``allowed`` is the automaton's mask (bool [B, V]); a
row whose every continuation would repeat an item gets an empty mask (its particle dies with
weight 0) instead of :class:`~tractable.fsa.json_schema.unique_items.UniqueItemsDeadEndError`.
"""

from __future__ import annotations

import numpy as np
import torch

from .constraints import Constraint, _rem

__all__ = ["UniqueItemsConstraint"]


class UniqueItemsConstraint(Constraint):
    """The constraint of a :class:`~tractable.fsa.json_schema.unique_items.UniqueItemsAutomaton`.

    State: :class:`~tractable.fsa.json_schema.unique_items.UniqueItemsState` (batched,
    ``select``-able).
    ``check`` builds the mask of the rows it is asked about (one mask per distinct
    (row, remaining) pair) and reads the tokens' bits.
    """

    def __init__(self, automaton) -> None:
        self.automaton = automaton
        self.vocab_size = int(automaton.vocab_size)
        self.eos_token_ids = tuple(int(e) for e in automaton.eos_token_ids)
        self.checks = 0
        self.mask_calls = 0

    def start(self, batch_size: int = 1):
        return self.automaton.start(batch_size)

    def advance(self, state, tokens: torch.Tensor):
        """Rows reading an EOS id keep their state (finished); the others advance."""
        toks = np.asarray(torch.as_tensor(tokens).cpu(), dtype=np.int64).reshape(-1)
        eos = self._is_eos(toks)
        if not eos.any():
            return self.automaton.advance(state, torch.from_numpy(toks))
        moved = self.automaton.advance(state, torch.from_numpy(np.where(eos, 0, toks)))
        B = len(toks)
        # rows 0..B-1 of `moved` then of `state`: pick the old row where EOS was read
        both = type(state).cat([moved, state])
        pick = np.where(eos, np.arange(B) + B, np.arange(B))
        return both.select(torch.from_numpy(pick))

    def allowed(self, state, remaining, mode: str = "gcd") -> torch.Tensor:
        from ..fsa.automaton import unpack_bits

        B = state.batch_size
        r = _rem(remaining, B)
        packed = self.automaton.allowed_packed(state, torch.from_numpy(r), mode,
                                               on_dead_end="empty", on_unsatisfiable="empty")
        self.mask_calls += B
        return unpack_bits(packed, self.vocab_size)

    def check(self, state, rows: torch.Tensor, tokens: torch.Tensor, remaining,
              mode: str = "gcd") -> torch.Tensor:
        rr = np.asarray(torch.as_tensor(rows).cpu(), dtype=np.int64).reshape(-1)
        tt = np.asarray(torch.as_tensor(tokens).cpu(), dtype=np.int64).reshape(-1)
        r = _rem(remaining, rr.size)
        self.checks += int(tt.size)
        out = np.zeros(tt.size, dtype=bool)
        if not tt.size:
            return torch.from_numpy(out)
        pairs = sorted({(int(a), int(q)) for a, q in zip(rr, r)})
        index = {p: i for i, p in enumerate(pairs)}
        sub = state.select(torch.tensor([a for a, _ in pairs], dtype=torch.long))
        packed = self.automaton.allowed_packed(
            sub, torch.tensor([q for _, q in pairs], dtype=torch.long), mode,
            on_dead_end="empty", on_unsatisfiable="empty").cpu().numpy().view(np.uint32)
        for i, (a, t, q) in enumerate(zip(rr.tolist(), tt.tolist(), r.tolist())):
            if 0 <= t < self.vocab_size:
                out[i] = bool(packed[index[(a, q)], t >> 5] >> np.uint32(t & 31) & 1)
        return torch.from_numpy(out)

    def is_accepting(self, state) -> torch.Tensor:
        return state.is_accepting().cpu()

    def min_tokens_to_accept(self) -> int:
        return self.automaton.min_tokens_to_accept()
