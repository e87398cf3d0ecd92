"""Per-request automaton state and budget-aware masks (filled in by the masks work)."""

from __future__ import annotations

__all__ = ["MaskMixin"]


class MaskMixin:
    """Methods of :class:`~tractable.fsa.automaton.TokenAutomaton` that deal with requests."""
