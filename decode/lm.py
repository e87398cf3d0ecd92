"""A small batched language-model interface for the samplers (SMC, AWRS, CARS).

The samplers only need next-token log-probabilities for a batch of prefixes that all extend
one prompt, a way to append one token per row, and a way to reorder rows (SMC resampling is
an ``index_select``, never a recomputation)::

    st = lm.start(prompt_ids, batch_size=B)     # LMState, B rows, all holding the prompt
    logp = lm.logprobs(st)                      # float32 [B, V]: log p(x_t | prompt, x_<t)
    st = lm.advance(st, tokens)                 # tokens: int64 [B]; returns a new state
    st = st.select(idx)                         # idx: int64 [B'] rows (may repeat)
    st, lp = lm.advance_many(st, toks)          # toks: int64 [B, k]; lp float64 [B, k]:
                                                # log p of each appended token (one forward
                                                # pass for HFCausalLM: SMC jump-forward)

``V`` is the model's logits width (``lm.vocab_size``); ``lm.eos_token_ids`` are the ids that end
a sequence.  ``lm.calls`` counts forward passes (one batched call counts once) and
``lm.rows`` the rows they computed.

Adapters:

* :class:`HFCausalLM` — any Hugging Face causal LM with a KV cache (SmolLM2 in the tests);
* :class:`TableLM` — a toy LM whose next-token distribution is a Python function of the prefix
  (the paper examples; exact posteriors by enumeration);
* :class:`RestrictedLM` — an LM renormalized onto a handful of token ids (SmolLM2 over ~8 tokens,
  small enough to enumerate).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..fsa.errors import InvalidArgumentError

__all__ = ["LMState", "LanguageModel", "HFCausalLM", "TableLM", "RestrictedLM"]


class LMState:
    """Per-request LM state for ``B`` rows.  :meth:`select` returns the state of rows ``idx``
    (repeats allowed).  Implementations may *consume* ``self`` in :meth:`select` and in
    :meth:`LanguageModel.advance` (the KV cache is reordered in place); keep using the
    returned object only."""

    batch_size: int
    prefixes: list[tuple[int, ...]]  # generated token ids per row (prompt excluded)

    def select(self, idx: torch.Tensor) -> LMState:  # pragma: no cover - interface
        raise NotImplementedError


class LanguageModel:
    """Interface (see the module docstring)."""

    vocab_size: int
    eos_token_ids: tuple[int, ...]
    calls: int = 0
    rows: int = 0

    def start(self, prompt_ids: Sequence[int], batch_size: int = 1) -> LMState:
        raise NotImplementedError

    def logprobs(self, state: LMState) -> torch.Tensor:
        """float32 [B, V] next-token log-probabilities of each row (log-softmax)."""
        raise NotImplementedError

    def advance(self, state: LMState, tokens: torch.Tensor) -> LMState:
        """Append ``tokens`` (int64 [B]) to every row; returns the new state."""
        raise NotImplementedError

    def advance_many(self, state: LMState, tokens: torch.Tensor
                     ) -> tuple[LMState, torch.Tensor]:
        """Append ``tokens`` (int64 [B, k]) to every row, left to right.  Returns the new
        state and float64 [B, k]: ``log p(tokens[b, j] | prefix_b, tokens[b, :j])``.

        This default is ``k`` rounds of :meth:`logprobs` + :meth:`advance`; adapters that can
        score ``k`` known tokens in one forward pass override it."""
        out = []
        for j in range(int(tokens.shape[1])):
            t = tokens[:, j].to(torch.long)
            lp = self.logprobs(state)
            out.append(lp.double().gather(1, t.view(-1, 1).to(lp.device)).view(-1).cpu())
            state = self.advance(state, t)
        return state, torch.stack(out, 1) if out else torch.zeros(tokens.shape[0], 0,
                                                                   dtype=torch.float64)

    @property
    def eos(self) -> int:
        """The first EOS id (the one fed to finished rows)."""
        return int(self.eos_token_ids[0])


# ----------------------------------------------------------------------------- toy LM


@dataclass
class _TableState(LMState):
    prefixes: list[tuple[int, ...]]

    @property
    def batch_size(self) -> int:  # type: ignore[override]
        return len(self.prefixes)

    def select(self, idx: torch.Tensor) -> _TableState:
        return _TableState([self.prefixes[int(i)] for i in idx.tolist()])


class TableLM(LanguageModel):
    """A language model given as a table: ``next_probs(prefix) -> probabilities [V]``.

    Args:
        next_probs: a callable ``tuple[int, ...] -> sequence of V floats`` or a mapping from
            prefixes to such sequences (missing prefixes: ``default``).  Rows are normalized here;
            zeros become ``-inf`` log-probabilities.
        vocab_size: V.
        eos_token_id: the id that ends a sequence.
        default: distribution for prefixes missing from a mapping (default: EOS with prob. 1).

    The prompt is ignored (``prefix`` is the generated part only).  Values are memoized.
    """

    def __init__(
        self,
        next_probs: Callable[[tuple[int, ...]], Sequence[float]] | Mapping,
        vocab_size: int,
        eos_token_id: int,
        *,
        default: Sequence[float] | None = None,
    ) -> None:
        self.vocab_size = int(vocab_size)
        self.eos_token_ids = (int(eos_token_id),)
        if isinstance(next_probs, Mapping):
            table = {tuple(k): v for k, v in next_probs.items()}
            dflt = default
            if dflt is None:
                dflt = [0.0] * self.vocab_size
                dflt[eos_token_id] = 1.0

            def fn(p: tuple[int, ...]) -> Sequence[float]:
                return table.get(p, dflt)

            self._fn = fn
        else:
            self._fn = next_probs
        self._memo: dict[tuple[int, ...], torch.Tensor] = {}
        self.calls = 0
        self.rows = 0

    def next_logprobs(self, prefix: tuple[int, ...]) -> torch.Tensor:
        """float64 [V] log-probabilities after ``prefix`` (memoized)."""
        out = self._memo.get(prefix)
        if out is None:
            p = torch.as_tensor(list(self._fn(tuple(prefix))), dtype=torch.float64)
            if p.shape != (self.vocab_size,) or bool((p < 0).any()) or float(p.sum()) <= 0:
                raise InvalidArgumentError(
                    f"TableLM: bad distribution after prefix {prefix}: {p.tolist()}")
            out = torch.log(p / p.sum())
            self._memo[prefix] = out
        return out

    def start(self, prompt_ids: Sequence[int] = (), batch_size: int = 1) -> _TableState:
        return _TableState([()] * batch_size)

    def logprobs(self, state: _TableState) -> torch.Tensor:
        self.calls += 1
        self.rows += state.batch_size
        return torch.stack([self.next_logprobs(p) for p in state.prefixes]).float()

    def logprobs64(self, state: _TableState) -> torch.Tensor:
        """float64 [B, V] (exact references use this)."""
        return torch.stack([self.next_logprobs(p) for p in state.prefixes])

    def advance(self, state: _TableState, tokens: torch.Tensor) -> _TableState:
        toks = tokens.tolist()
        return _TableState([p + (int(t),) for p, t in zip(state.prefixes, toks)])

    def advance_many(self, state: _TableState, tokens: torch.Tensor
                     ) -> tuple[_TableState, torch.Tensor]:
        """Counted as one call of ``B * k`` rows (as a forward pass over k known tokens)."""
        self.calls += 1
        toks = tokens.tolist()
        lp = torch.zeros(len(toks), len(toks[0]) if toks else 0, dtype=torch.float64)
        prefixes = []
        for b, (p, row) in enumerate(zip(state.prefixes, toks)):
            for j, t in enumerate(row):
                lp[b, j] = self.next_logprobs(p)[int(t)]
                p = p + (int(t),)
            prefixes.append(p)
        self.rows += int(tokens.numel())
        return _TableState(prefixes), lp


# ----------------------------------------------------------------------------- Hugging Face


@dataclass
class _HFState(LMState):
    cache: Any  # transformers Cache (batch B) or None before the first token
    logp: torch.Tensor  # float32 [B, V]
    prefixes: list[tuple[int, ...]]

    @property
    def batch_size(self) -> int:  # type: ignore[override]
        return int(self.logp.shape[0])

    def select(self, idx: torch.Tensor) -> _HFState:
        """Rows ``idx``: the KV cache is reordered with ``index_select`` (in place: this
        state is consumed)."""
        idx = idx.to(torch.long)
        if self.cache is not None:
            self.cache.reorder_cache(idx.to(_cache_device(self.cache)))
        return _HFState(self.cache, self.logp.index_select(0, idx.to(self.logp.device)),
                        [self.prefixes[int(i)] for i in idx.tolist()])


def _cache_device(cache) -> torch.device:
    try:
        return cache.layers[0].keys.device
    except (AttributeError, IndexError):  # pragma: no cover - older cache classes
        return torch.device("cpu")


class HFCausalLM(LanguageModel):
    """A Hugging Face causal LM (``AutoModelForCausalLM``) behind the batched interface.

    The prompt is prefilled once per distinct prompt (memoized, batch 1) and its KV cache copied
    and repeated to ``batch_size`` rows by :meth:`start`; every :meth:`advance` is one forward
    pass over ``[B, 1]`` new tokens.  All rows share the prompt and have the same length, so no
    padding or attention mask is needed.

    Args:
        model: the causal LM (eval mode).
        tokenizer: optional; gives EOS ids when ``eos_token_ids`` is None (its EOS plus
            ``<|im_end|>`` when present, as :func:`tractable.models.smollm2_vocabulary`).
        eos_token_ids: ids that end a sequence.
        vocab_size: logits width (default ``model.config.vocab_size``).
    """

    def __init__(self, model, tokenizer=None, *, eos_token_ids: Sequence[int] | None = None,
                 vocab_size: int | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.vocab_size = int(vocab_size or model.config.vocab_size)
        if eos_token_ids is None:
            eos: list[int] = []
            if tokenizer is not None:
                e = getattr(tokenizer, "eos_token_id", None)
                if isinstance(e, int):
                    eos.append(e)
                im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
                if isinstance(im_end, int) and im_end >= 0 and im_end != tokenizer.unk_token_id:
                    eos.append(im_end)
            if not eos:
                raise InvalidArgumentError(
                    "HFCausalLM: pass eos_token_ids (no tokenizer EOS found)")
            eos_token_ids = sorted(set(eos))
        self.eos_token_ids = tuple(int(e) for e in eos_token_ids)
        self.device = next(model.parameters()).device
        self._prefill: dict[tuple[int, ...], tuple[Any, torch.Tensor]] = {}
        self.calls = 0
        self.rows = 0

    def _logp(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits[:, -1, : self.vocab_size].float(), dim=-1)

    @torch.inference_mode()
    def start(self, prompt_ids: Sequence[int], batch_size: int = 1) -> _HFState:
        key = tuple(int(t) for t in prompt_ids)
        if not key:
            raise InvalidArgumentError(
                "HFCausalLM.start: the prompt must hold at least one token (BOS)")
        hit = self._prefill.get(key)
        if hit is None:
            ids = torch.tensor([key], dtype=torch.long, device=self.device)
            out = self.model(input_ids=ids, use_cache=True)
            self.calls += 1
            self.rows += 1
            hit = (out.past_key_values, self._logp(out.logits))
            if len(self._prefill) > 8:
                self._prefill.clear()
            self._prefill[key] = hit
        cache = copy.deepcopy(hit[0])
        if batch_size != 1:
            cache.batch_repeat_interleave(batch_size)
        return _HFState(cache, hit[1].expand(batch_size, -1).clone(), [()] * batch_size)

    def logprobs(self, state: _HFState) -> torch.Tensor:
        return state.logp

    @torch.inference_mode()
    def advance(self, state: _HFState, tokens: torch.Tensor) -> _HFState:
        ids = tokens.to(torch.long).view(-1, 1).to(self.device)
        out = self.model(input_ids=ids, past_key_values=state.cache, use_cache=True)
        self.calls += 1
        self.rows += int(ids.shape[0])
        return _HFState(out.past_key_values, self._logp(out.logits),
                        [p + (int(t),) for p, t in zip(state.prefixes, tokens.tolist())])

    @torch.inference_mode()
    def advance_many(self, state: _HFState, tokens: torch.Tensor
                     ) -> tuple[_HFState, torch.Tensor]:
        """One forward pass over the ``[B, k]`` known tokens (all rows have the same length:
        no padding).  The first token is scored by the state's stored distribution, token
        ``j`` by the logits at position ``j - 1``."""
        ids = tokens.to(torch.long).to(self.device)
        B, k = ids.shape
        if k == 0:
            return state, torch.zeros(B, 0, dtype=torch.float64)
        out = self.model(input_ids=ids, past_key_values=state.cache, use_cache=True)
        self.calls += 1
        self.rows += B * k
        logits = out.logits[:, :, : self.vocab_size].float()
        lp_all = torch.log_softmax(logits, dim=-1)  # [B, k, V]
        first = state.logp.to(ids.device).gather(1, ids[:, :1])
        rest = lp_all[:, :-1].gather(2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        lp = torch.cat([first, rest], 1).double().cpu()
        toks = ids.tolist()
        return (_HFState(out.past_key_values, lp_all[:, -1].contiguous(),
                         [p + tuple(int(t) for t in row)
                          for p, row in zip(state.prefixes, toks)]), lp)


# ----------------------------------------------------------------------------- restriction


@dataclass
class _RestrictedState(LMState):
    inner: LMState

    @property
    def batch_size(self) -> int:  # type: ignore[override]
        return self.inner.batch_size

    @property
    def prefixes(self) -> list[tuple[int, ...]]:  # type: ignore[override]
        return self.inner.prefixes

    def select(self, idx: torch.Tensor) -> _RestrictedState:
        return _RestrictedState(self.inner.select(idx))


class RestrictedLM(LanguageModel):
    """``base`` renormalized onto ``token_ids`` (plus its EOS ids): ``p(v) / sum_{u in T} p(u)``
    for ``v`` in T, ``-inf`` elsewhere.  Ids keep their meaning (width stays ``base.vocab_size``),
    so automata compiled for the base vocabulary apply unchanged.  Small enough restrictions make
    exact posteriors enumerable with a real model."""

    def __init__(self, base: LanguageModel, token_ids: Sequence[int]) -> None:
        self.base = base
        self.vocab_size = base.vocab_size
        self.eos_token_ids = base.eos_token_ids
        keep = sorted(set(int(t) for t in token_ids) | set(base.eos_token_ids))
        self.token_ids = tuple(keep)
        self._keep = torch.zeros(self.vocab_size, dtype=torch.bool)
        self._keep[list(keep)] = True

    @property
    def calls(self) -> int:  # type: ignore[override]
        return self.base.calls

    @property
    def rows(self) -> int:  # type: ignore[override]
        return self.base.rows

    def start(self, prompt_ids: Sequence[int], batch_size: int = 1) -> _RestrictedState:
        return _RestrictedState(self.base.start(prompt_ids, batch_size))

    def logprobs(self, state: _RestrictedState) -> torch.Tensor:
        lp = self.base.logprobs(state.inner)
        keep = self._keep.to(lp.device)
        lp = lp.masked_fill(~keep, float("-inf"))
        return lp - torch.logsumexp(lp, dim=-1, keepdim=True)

    def advance(self, state: _RestrictedState, tokens: torch.Tensor) -> _RestrictedState:
        return _RestrictedState(self.base.advance(state.inner, tokens))
