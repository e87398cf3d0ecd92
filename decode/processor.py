"""Budget-aware constrained decoding inside Hugging Face ``generate``: :func:`gcd_logits_processor`.

    A = tractable.compile_regex(r"(19|20)\\d\\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])", vocab)
    proc = tractable.gcd_logits_processor(A, max_new_tokens=8)
    out = model.generate(**inputs, max_new_tokens=8, logits_processor=[proc], do_sample=True)

Semantics (paper 002 §3.2, the masks of :mod:`tractable.fsa.masks`): at every step, for each row
with generated suffix ``x`` of length ``t``, the scores of tokens outside
``A.allowed(state(x), remaining=max_new_tokens - t, mode)`` are set to ``-inf``.  With
``mode="gcd"`` every output is accepted by the automaton when generation stops (at EOS, or when
the ``max_new_tokens`` budget runs out in an accepting state); ``mode="lcd"`` is the greedy
masking of other engines (any viable continuation; the output may be cut off unfinished).

How rows are tracked: the processor fixes the prompt length ``P`` at its first call
(``input_ids.shape[1]``; with left padding that is the padded width) and reads each row's
generated suffix ``input_ids[b, P:]``.  The automaton state depends only on that suffix, so the
processor keeps a dictionary *generated prefix → state row* from the previous call and advances
each row from its parent prefix by its last token.  This is correct whatever ``generate`` does to
the rows between calls — beam search reordering and pruning, ``num_return_sequences`` expansion,
batches of different prompts — and identical suffixes share one state and one mask.

Rows that generated an EOS id are finished: ``generate`` keeps feeding them padding, and the
processor allows only the EOS ids (and ``pad_token_id`` if given) there, so the row's
distribution stays well defined.

Errors, all raised before a wrong token could reach the output:

* :class:`~tractable.fsa.errors.UnsatisfiableBudgetError` at construction when no accepted
  output fits in ``max_new_tokens``;
* none when ``generate`` asks for a token past ``max_new_tokens`` for a row that has not
  finished (``generate(max_new_tokens=...)`` larger than the processor's): that row is given EOS
  (its score 0, every other -inf; counted in ``budget_ended_rows``), so the batch survives and,
  under GCD, the row ends accepted.  :class:`BudgetExceededError` only where the automaton has
  no EOS id.  The other mismatch, a ``generate`` budget *smaller* than the processor's, cannot be
  seen from inside a processor (Hugging Face passes it no budget): rows are then cut where
  ``generate`` stops, possibly unfinished.  :func:`tractable.generate` takes one budget for both;
* :class:`~tractable.fsa.errors.TokenError` when a row continued with a token the previous mask
  did not allow (another processor after this one re-enabled it, or a sampler ignored ``-inf``),
  naming the row and the token id.  In beam search such rows are legitimate — a beam whose
  accumulated score is ``-inf``, chosen only to fill ``num_beams`` slots, which can never be
  returned — so by default (``on_violation="auto"``) rows chosen inside ``generate``'s beam
  search are pruned (only EOS allowed) instead;
* :class:`~tractable.fsa.errors.VocabularyError` when the scores' width differs from the
  automaton's vocabulary size (compile against ``TokenVocabulary.from_huggingface(tok,
  vocab_size=model.config.vocab_size)``).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import torch

from ..fsa.errors import BudgetExceededError, InvalidArgumentError, TokenError, VocabularyError
from .token_bitmask import (
    apply_token_bitmask,
    apply_token_bitmask_inplace,
    unpack_token_bitmask,
)

try:  # transformers is optional: the class works as a plain callable without it
    from transformers import LogitsProcessor as _LogitsProcessorBase
except ImportError:  # pragma: no cover - exercised only without transformers
    _LogitsProcessorBase = object

__all__ = [
    "GCDLogitsProcessor",
    "gcd_logits_processor",
    "BudgetExceededError",
    "apply_token_bitmask",
    "apply_token_bitmask_inplace",
    "unpack_token_bitmask",
]

_MODES = ("gcd", "lcd")
# dictionary values for rows that no longer have an automaton state
_FINISHED = -2  # an EOS id was generated (valid end)
_PRUNED = -1  # a disallowed token was chosen in beam search (score -inf; never returned)
_BUDGET_END = -3  # generate went past max_new_tokens: the row is given EOS now


def _called_from_beam_search(max_depth: int = 12) -> bool:
    """Whether a ``generate`` beam-search loop is on the call stack (checked only on a mask
    violation, never on the fast path)."""
    f = sys._getframe(2)
    for _ in range(max_depth):
        if f is None:
            return False
        if "beam" in f.f_code.co_name and "transformers" in f.f_code.co_filename:
            return True
        f = f.f_back
    return False


class GCDLogitsProcessor(_LogitsProcessorBase):
    """A ``transformers.LogitsProcessor`` that applies the automaton's GCD (or LCD) mask.

    Build with :func:`gcd_logits_processor`; use one per ``generate`` call (or call
    :meth:`reset`).  ``__call__(input_ids LongTensor [B, L], scores float [B, V]) -> float
    [B, V]`` returns a new tensor and does not mutate ``scores`` (with ``inplace=True`` it masks
    ``scores`` in place and returns it).  Processor state (the prefix
    dictionary, the previous masks) is mutated by each call.

    Attributes (read-only):
        automaton, max_new_tokens, mode, pad_token_id, on_violation, inplace.
        prompt_length: the prompt width fixed at the first call (None before).
        calls: number of calls; mask_seconds: time spent in them (advance + masks + apply).
        pruned_rows: beam rows pruned after taking a masked (-inf) token (beam search only).
        budget_ended_rows: live rows given EOS because ``generate`` went past ``max_new_tokens``.
        history: list of (input_ids, bool [B, V] masks) per call when ``record=True``.
    """

    def __init__(
        self,
        automaton: Any,
        max_new_tokens: int,
        mode: str = "gcd",
        *,
        pad_token_id: int | None = None,
        on_violation: str = "auto",
        record: bool = False,
        inplace: bool = False,
    ):
        if mode not in _MODES:
            raise InvalidArgumentError(f"mode must be one of {_MODES}, got {mode!r}")
        if on_violation not in ("auto", "raise", "prune"):
            raise InvalidArgumentError(
                f"on_violation must be 'auto', 'raise' or 'prune', got {on_violation!r}"
            )
        if int(max_new_tokens) != max_new_tokens or max_new_tokens < 0:
            raise InvalidArgumentError(
                f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
        self.automaton = automaton
        self.max_new_tokens = int(max_new_tokens)
        self.mode = mode
        self.on_violation = on_violation
        automaton.check_budget(self.max_new_tokens)
        V = int(automaton.vocab_size)
        self.pad_token_id = pad_token_id
        stop = set(int(e) for e in automaton.eos_token_ids)
        if pad_token_id is not None:
            if not 0 <= int(pad_token_id) < V:
                raise VocabularyError(f"pad_token_id {pad_token_id} is outside 0..{V - 1}")
            stop.add(int(pad_token_id))
        self._eos = frozenset(int(e) for e in automaton.eos_token_ids)
        W = (V + 31) // 32
        end_row = np.zeros(W, dtype=np.uint32)
        for e in stop:
            end_row[e >> 5] |= np.uint32(1) << np.uint32(e & 31)
        self._end_row: np.ndarray | None = end_row.view(np.int32)
        if not stop:
            # a vocabulary without EOS: finished rows cannot occur (no id ends a row)
            self._end_row = None
        self.record = record
        self.inplace = bool(inplace)
        self.reset()

    def reset(self) -> None:
        """Forget the previous generate call (prompt length, prefixes)."""
        self.prompt_length: int | None = None
        self._keys: dict[tuple[int, ...], int] = {}
        self._state = None
        self._packed: torch.Tensor | None = None
        self.calls = 0
        self.pruned_rows = 0
        self.budget_ended_rows = 0
        self.mask_seconds = 0.0
        self.history: list[tuple[torch.Tensor, torch.Tensor]] = []

    # ------------------------------------------------------------------ helpers

    def _bit(self, packed_row: torch.Tensor, tok: int) -> bool:
        if not 0 <= tok < self.automaton.vocab_size:
            return False
        return bool((int(packed_row[tok >> 5]) >> (tok & 31)) & 1)

    def _violation(self, row: int, tok: int, generated: int, pruning: list[bool]) -> int:
        """Handle a row that continued with a token the previous mask did not allow."""
        if not pruning:
            prune = self.on_violation == "prune" or (
                self.on_violation == "auto" and _called_from_beam_search()
            )
            pruning.append(prune)
        if pruning[0]:
            self.pruned_rows += 1
            return _PRUNED
        raise TokenError(
            f"row {row} continued with a token that the {self.mode.upper()} mask did not allow "
            f"at generated position {generated - 1} (another logits processor after this one "
            "re-enabled it, or the sampler ignored -inf); the output would violate the "
            "constraint",
            tok,
        )

    def _replay(self, key: tuple[int, ...], row: int, pruning: list[bool]):
        """State of a prefix never seen before, recomputed from the start (slow path: e.g. a
        processor created mid-generation or assisted decoding).  Returns a status code or a
        1-row AutomatonState."""
        A = self.automaton
        st = A.start(1)
        for j, tok in enumerate(key):
            if self.max_new_tokens - j <= 0:  # past the budget: no token was allowed there
                return self._violation(row, tok, j + 1, pruning)
            packed = A.allowed_packed(st, self.max_new_tokens - j, self.mode)[0]
            if not self._bit(packed, tok):
                return self._violation(row, tok, j + 1, pruning)
            if tok in self._eos:
                return _FINISHED
            st = A.advance(st, torch.tensor([tok], dtype=torch.long))
        return st

    # ------------------------------------------------------------------ the call

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        A = self.automaton
        V = int(A.vocab_size)
        if scores.dim() != 2 or scores.shape[-1] != V:
            raise VocabularyError(
                f"scores have shape {tuple(scores.shape)} but the automaton was compiled for a "
                f"vocabulary of {V} ids; compile it against TokenVocabulary.from_huggingface("
                "tokenizer, vocab_size=model.config.vocab_size)"
            )
        B, L = input_ids.shape
        if scores.shape[0] != B:
            raise InvalidArgumentError(f"input_ids has {B} rows but scores has {scores.shape[0]}")
        if self.prompt_length is None:
            self.prompt_length = L
        P = self.prompt_length
        n = L - P
        if n < 0:
            raise InvalidArgumentError(
                f"input_ids has {L} columns, fewer than the prompt length {P} fixed at the first "
                "call: a GCDLogitsProcessor serves one generate() call (create a new one, or "
                "call reset())"
            )
        remaining = self.max_new_tokens - n
        gen = input_ids[:, P:].tolist() if n else [[] for _ in range(B)]

        prev_keys, prev_packed = self._keys, self._packed
        new_keys: dict[tuple[int, ...], int] = {}
        row_code = [0] * B  # >= 0: index of the row's unique live prefix; < 0: ended row
        sources: list[Any] = []  # per unique live prefix: "start", an int k (k-th advanced
        adv_parent: list[int] = []  # row), or a 1-row AutomatonState (replayed prefix)
        adv_tok: list[int] = []
        pruning: list[bool] = []
        ended_now: set[tuple[int, ...]] = set()  # prefixes given EOS at this call
        for b in range(B):
            key = tuple(gen[b])
            code = new_keys.get(key)
            if code is None:
                src: Any = None
                if n == 0:
                    src = "start"
                else:
                    parent = prev_keys.get(key[:-1])
                    tok = key[-1]
                    if parent is None:  # unseen prefix: recompute it
                        src = self._replay(key, b, pruning)
                        if isinstance(src, int):
                            code, src = src, None
                    elif parent < 0:  # stays finished / pruned
                        code = parent
                    elif not self._bit(prev_packed[parent], tok):
                        code = self._violation(b, tok, n, pruning)
                    elif tok in self._eos:
                        code = _FINISHED
                    else:
                        src = len(adv_parent)
                        adv_parent.append(parent)
                        adv_tok.append(tok)
                if src is not None and remaining <= 0:
                    # generate's budget is larger than ours: end the row here (GCD kept it
                    # within 0 tokens of acceptance at the last step, so it is accepted now)
                    if not self._eos:
                        raise BudgetExceededError(self.max_new_tokens, n, b)
                    ended_now.add(key)
                    code, src = _BUDGET_END, None
                if src is not None:
                    code = len(sources)
                    sources.append(src)
                new_keys[key] = code
            row_code[b] = code
            if key in ended_now:
                self.budget_ended_rows += 1

        # batched forward step (eq. 3) for the unique live prefixes, then their masks
        U = len(sources)
        state = packed_u = None
        if U:
            if adv_parent:
                adv = A.advance(self._state.select(adv_parent), torch.tensor(adv_tok))
            if len(adv_parent) == U:
                state = adv  # the common case: sources == [0, 1, ..., U-1]
            elif all(isinstance(s, str) for s in sources):
                state = A.start(U)
            else:
                parts = [A.start(1) if isinstance(s, str)
                         else adv.select([s]) if isinstance(s, int) else s for s in sources]
                state = type(parts[0]).cat(parts)  # AutomatonState or a subclass
            packed_u = A.allowed_packed(state, remaining, self.mode)

        # full [B, W] mask: live rows take their prefix's mask, ended rows only EOS/pad
        if U and min(row_code) >= 0:
            if U == B and row_code == list(range(B)):
                packed = packed_u
            else:
                packed = torch.from_numpy(np.take(packed_u.cpu().numpy(), row_code, axis=0))
        else:
            if self._end_row is None:
                raise TokenError("a row ended but the automaton's vocabulary has no EOS id")
            table = self._end_row[None, :]
            if U:
                table = np.concatenate([packed_u.cpu().numpy(), table])
            sel = [c if c >= 0 else U for c in row_code]
            packed = torch.from_numpy(np.take(table, sel, axis=0))

        self._keys = new_keys
        self._state = state
        self._packed = packed_u
        if self.inplace:
            out = apply_token_bitmask_inplace(scores, packed)
        else:
            out = apply_token_bitmask(scores, packed)
        if _BUDGET_END in row_code:
            # rows past the budget are given EOS whatever earlier processors did to its score
            rows = [b for b in range(B) if row_code[b] == _BUDGET_END]
            eos = min(self._eos)
            out[rows] = float("-inf")
            out[rows, eos] = 0.0
        self.calls += 1
        self.mask_seconds += time.perf_counter() - t0
        if self.record:
            self.history.append(
                (input_ids.detach().cpu().clone(), unpack_token_bitmask(packed.cpu(), V))
            )
        return out

    def __repr__(self) -> str:
        return (
            f"GCDLogitsProcessor(mode={self.mode!r}, max_new_tokens={self.max_new_tokens}, "
            f"automaton={self.automaton!r})"
        )


def gcd_logits_processor(
    automaton: Any,
    max_new_tokens: int,
    mode: str = "gcd",
    *,
    pad_token_id: int | None = None,
    on_violation: str = "auto",
    record: bool = False,
    inplace: bool = False,
) -> GCDLogitsProcessor:
    """A logits processor for ``model.generate(..., max_new_tokens=max_new_tokens,
    logits_processor=[proc])`` that keeps every row inside ``automaton``'s language.

    Args:
        automaton: a :class:`~tractable.fsa.automaton.TokenAutomaton` compiled against the
            model's vocabulary (its ``vocab_size`` must equal the logits width).
        max_new_tokens: the generation budget; pass the same value to ``generate``.
        mode: ``"gcd"`` (budget-aware: every output is accepted when generation stops) or
            ``"lcd"`` (locally valid only; what other engines do).
        pad_token_id: also allowed in rows that already ended (``generate`` pads them).
        on_violation: what to do when a row continued with a token the mask did not allow:
            ``"raise"`` (:class:`~tractable.fsa.errors.TokenError`), ``"prune"`` (treat the row
            as a dead beam: only EOS), or ``"auto"`` (prune inside beam search, else raise).
        record: keep every call's input ids and bool masks in ``proc.history`` (tests).
        inplace: write the masked scores into the ``scores`` tensor ``generate`` passes (as
            xgrammar's and llguidance's processors do) instead of returning a new one: saves
            allocating and writing a [B, V] tensor per step (batch 16, Llama-3: ~8 MB), but
            ``generate(output_logits=True)`` then records the masked logits, and an earlier
            processor's output is overwritten.  Default False (Hugging Face's convention).

    Raises:
        UnsatisfiableBudgetError: ``max_new_tokens`` is below ``automaton.min_tokens_to_accept()``.
        ValueError: unknown ``mode``.

    One processor serves one ``generate`` call (it fixes the prompt length at its first call).
    """
    return GCDLogitsProcessor(
        automaton,
        max_new_tokens,
        mode,
        pad_token_id=pad_token_id,
        on_violation=on_violation,
        record=record,
        inplace=inplace,
    )
