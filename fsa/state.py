"""Per-request automaton state (paper 002 eq. 3): :class:`AutomatonState`.

A request's state is the *set* of automaton states reached by its prefix — the realized column
``α_t(·, x_t)`` of eq. 3.  :class:`AutomatonState` holds one such set per batch row (``active``:
bool [B, S]); it is small, immutable and reorderable (:meth:`AutomatonState.select` is an
``index_select``: beam search, SMC resampling).  The automaton that made a state
(``start``/``advance``) is recorded in it, and another automaton refuses it
(:class:`~.errors.ForeignStateError`).

An automaton's identity token (:class:`AutomatonIdentity`, :func:`identity`) is what a state's
engine carries to tell its automaton from another one.  The masks read from a state (GCD / LCD,
the budget and EOS convention) are in :mod:`.masks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .errors import ForeignStateError, InvalidArgumentError

__all__ = ["AutomatonState", "AutomatonIdentity", "identity"]


@dataclass(frozen=True, eq=False)
class AutomatonState:
    """A batch of state sets, one per request (eq. 3's realized column ``α_t(·, x_t)``).

    Attributes:
        active: bool [B, S] — row b is the set of automaton states reached by request b's
            prefix.  An all-false row is *dead* (after EOS, or an id the automaton cannot read).
        final: bool [S] — the automaton's accepting states (shared, not copied).
        set_ids: int64 numpy [B] or None — ids of the rows in the automaton's set interner (a
            cache key; rebuilt from ``active`` when absent).

    The automaton that made the state is kept by reference (``_engine``: its mask engine, whose
    ``owner`` is the automaton's identity token); :meth:`select`, :meth:`cat` and :meth:`to`
    keep it.  A state built by hand (``AutomatonState(active, final)``) has no owner and is
    checked by shape only.

    Immutable: :meth:`select`, :meth:`to` and the automaton's ``advance`` return new objects.
    Do not write into ``active`` in place: batch-1 states share one cached tensor per set.
    """

    active: torch.Tensor
    final: torch.Tensor
    set_ids: np.ndarray | None = None
    _engine: Any = field(default=None, repr=False, compare=False)

    @property
    def batch_size(self) -> int:
        return int(self.active.shape[0])

    @property
    def num_states(self) -> int:
        return int(self.active.shape[1])

    @property
    def device(self) -> torch.device:
        return self.active.device

    def select(self, indices: torch.Tensor | np.ndarray | list[int]) -> AutomatonState:
        """Rows ``indices`` (LongTensor [K], repeats allowed): beam reordering, SMC resampling.

        Raises:
            InvalidArgumentError: ``indices`` is not 1-D.
            IndexError: an index outside ``0..B-1``.
        """
        idx = torch.as_tensor(indices, dtype=torch.long).cpu()
        if idx.dim() != 1:
            raise InvalidArgumentError(
                f"select() takes a 1-D index tensor, got shape {tuple(idx.shape)}")
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.batch_size):
            raise IndexError(f"select() index out of range for batch size {self.batch_size}")
        ids = None if self.set_ids is None else self.set_ids[idx.numpy()]
        return AutomatonState(
            self.active.index_select(0, idx.to(self.active.device)), self.final, ids, self._engine
        )

    @staticmethod
    def cat(states: list[AutomatonState]) -> AutomatonState:
        """Concatenate batches (same automaton) along the batch dimension.

        Raises:
            InvalidArgumentError: no states.
            ForeignStateError: the states were made by different automata.
        """
        if not states:
            raise InvalidArgumentError("cat() needs at least one state")
        engines = [s._engine for s in states]
        owned = [e for e in engines if e is not None]
        owner = getattr(owned[0], "owner", None) if owned else None
        for e in owned:
            if getattr(e, "owner", None) is not owner:
                raise ForeignStateError(
                    "cat() got states of different automata; a batch holds states of one")
        eng = engines[0]
        same = all(e is eng for e in engines) and all(s.set_ids is not None for s in states)
        ids = np.concatenate([s.set_ids for s in states]) if same else None
        return AutomatonState(
            torch.cat([s.active for s in states]), states[0].final, ids,
            eng if same else (owned[0] if owned else None),
        )

    def is_accepting(self) -> torch.Tensor:
        """bool [B]: the set contains an accepting state (stopping here is valid)."""
        return (self.active & self.final.to(self.active.device)).any(dim=1)

    def is_dead(self) -> torch.Tensor:
        """bool [B]: the set is empty (EOS was read, or a token outside the language)."""
        return ~self.active.any(dim=1)

    def to(self, device: str | torch.device) -> AutomatonState:
        return AutomatonState(
            self.active.to(device), self.final.to(device), self.set_ids, self._engine
        )

    def __repr__(self) -> str:
        sizes = self.active.sum(dim=1).tolist()
        return f"AutomatonState(batch={self.batch_size}, states={self.num_states}, sizes={sizes})"


def _remaining_list(remaining: int | torch.Tensor | None, B: int) -> list:
    """Per-row budgets as a list of B ints (or Nones): ``remaining`` is an int, a tensor (0-d
    or [B]), a sequence of B ints, or None (no budget).  Raises InvalidArgumentError on a
    length mismatch."""
    if remaining is None:
        return [None] * B
    if isinstance(remaining, torch.Tensor):
        if remaining.dim() == 0:
            return [int(remaining)] * B
        if remaining.shape != (B,):
            raise InvalidArgumentError(
                f"remaining has shape {tuple(remaining.shape)}; expected an int or [{B}]"
            )
        return remaining.tolist()
    if isinstance(remaining, (list, tuple, np.ndarray)):
        if len(remaining) != B:
            raise InvalidArgumentError(f"remaining has {len(remaining)} entries; the batch has {B}")
        return [int(x) for x in remaining]
    return [int(remaining)] * B


class AutomatonIdentity:
    """Identity token of one automaton (shared by its ``to(device)`` copies).  States keep a
    reference to it (through their engine), so checking a state's owner is one ``is``."""

    __slots__ = ("summary",)

    def __init__(self, summary: str):
        self.summary = summary

    def __repr__(self) -> str:
        return f"<automaton {self.summary} at {id(self):#x}>"


def identity(A: Any) -> AutomatonIdentity:
    """The identity token of automaton ``A`` (created on first use, kept in ``A._memo``)."""
    tok = A._memo.get("identity")
    if tok is None:
        tok = A._memo.setdefault("identity", AutomatonIdentity(
            f"states={A.num_states}, edges={A.num_edges}, vocab={A.vocab_size}"))
    return tok
