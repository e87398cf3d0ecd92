"""Real-LM rows recorded once and replayed as an LM (tests and benches of exact samplers).

Enumerating a task's posterior with a real model (SmolLM2) visits every prefix the samplers can
reach; :class:`RecordingLM` keeps each row it returns, and :class:`PrefixTableLM` serves them
back, so that hundreds of sampler runs cost no forward passes and see the exact float32 rows
:class:`~tractable.decode.lm.HFCausalLM` returned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from tractable.decode.lm import LanguageModel

__all__ = ["PrefixRows", "PrefixTableLM", "RecordingLM"]


class PrefixRows:
    """An LM state that is only the generated prefixes: ``prefixes[b]`` is a tuple of ids."""

    def __init__(self, prefixes: list[tuple[int, ...]]) -> None:
        self.prefixes = prefixes

    @property
    def batch_size(self) -> int:
        return len(self.prefixes)

    def select(self, idx: torch.Tensor) -> PrefixRows:
        return PrefixRows([self.prefixes[int(i)] for i in idx.tolist()])


class RecordingLM(LanguageModel):
    """Wraps an LM and keeps every row it returns: ``table`` {generated prefix: float32 [V]}.
    The wrapped LM's states must have ``prefixes`` (as HFCausalLM's and RestrictedLM's do)."""

    def __init__(self, base: LanguageModel) -> None:
        self.base = base
        self.vocab_size = base.vocab_size
        self.eos_token_ids = base.eos_token_ids
        self.table: dict[tuple[int, ...], torch.Tensor] = {}

    def start(self, prompt_ids: Sequence[int], batch_size: int = 1):
        return self.base.start(prompt_ids, batch_size)

    def logprobs(self, state) -> torch.Tensor:
        lp = self.base.logprobs(state)
        for p, row in zip(state.prefixes, lp):
            self.table[tuple(p)] = row.clone()
        return lp

    def advance(self, state, tokens: torch.Tensor):
        return self.base.advance(state, tokens)


class PrefixTableLM(LanguageModel):
    """The recorded rows as an LM (the prompt is fixed; rows are keyed by generated prefix).

    Finished rows (their prefix holds an EOS id) get an EOS-only row; any other unknown prefix
    raises ``KeyError`` (the sampler left the enumerated tree).  ``calls`` and ``rows`` count
    forward passes and rows served."""

    def __init__(self, table: dict, vocab_size: int, eos_token_ids: Sequence[int]) -> None:
        self.table = table
        self.vocab_size = int(vocab_size)
        self.eos_token_ids = tuple(int(e) for e in eos_token_ids)
        self.calls = 0
        self.rows = 0
        self._eos_row = torch.full((self.vocab_size,), -math.inf)
        self._eos_row[self.eos_token_ids[0]] = 0.0

    def start(self, prompt_ids: Sequence[int], batch_size: int = 1) -> PrefixRows:
        return PrefixRows([()] * batch_size)

    def logprobs(self, state: PrefixRows) -> torch.Tensor:
        self.calls += 1
        self.rows += state.batch_size
        out = []
        for p in state.prefixes:
            row = self.table.get(p)
            if row is None:
                if not any(t in self.eos_token_ids for t in p):
                    raise KeyError(f"prefix {p} was not enumerated")
                row = self._eos_row
            out.append(row)
        return torch.stack(out)

    def advance(self, state: PrefixRows, tokens: torch.Tensor) -> PrefixRows:
        return PrefixRows([p + (int(t),) for p, t in zip(state.prefixes, tokens.tolist())])
