"""The exact side of a grammar constraint: :class:`Checker`, incremental membership and
viability over bytes (an Earley recognizer, :mod:`.earley`), the black-box constraint of AWRS
and the potential of SMC."""

from __future__ import annotations

from .cfg import CFG
from .compile import _as_cfg, no_recursion_error
from .earley import EarleyChecker

__all__ = ["Checker"]


class Checker:
    """Exact incremental membership / viability for a context-free grammar.

    ``viable(prefix)`` — can ``prefix`` (bytes or str) be completed to a sentence?
    ``accepts(text)`` — is ``text`` a sentence?  Both reuse the Earley columns of every prefix
    seen before (a trie keyed by bytes), so probing many continuations of one prefix costs one
    column per new byte.  Duck-typed as the black-box constraint of AWRS / potential of SMC.

    Args:
        grammar: grammar source or :class:`CFG`.
        syntax, start: see :func:`~.compile.parse_grammar`.
        max_columns: cached Earley columns kept before the cache is reset.
        limits: ``max_nesting``, ``max_rules``, ``max_symbols`` (:mod:`.limits`).

    Raises:
        GrammarError, GrammarLimitError, EmptyLanguageError.
    """

    @no_recursion_error
    def __init__(
        self,
        grammar: str | CFG,
        *,
        syntax: str = "auto",
        start: str | None = None,
        max_columns: int = 500_000,
        **limits,
    ):
        self.cfg = _as_cfg(grammar, syntax, start, limits)
        self._earley = EarleyChecker(self.cfg, max_columns=max_columns)

    def viable(self, prefix: bytes | str) -> bool:
        return self._earley.viable(prefix)

    def accepts(self, text: bytes | str) -> bool:
        return self._earley.accepts(text)

    def clear_cache(self) -> None:
        """Drop the cached Earley columns."""
        self._earley.clear_cache()

    @property
    def stats(self) -> dict:
        """Cache counters: ``columns`` (cached now), ``hits`` (columns reused)."""
        e = self._earley
        return {"columns": e.num_columns, "hits": e.hits,
                "rule_states": e.num_rule_states, "terminals": len(e.term_names)}

    def __repr__(self) -> str:
        return f"Checker({self.cfg!r})"
