"""Resource limits of the grammar front ends, checked before the expensive work.

Every limit is a keyword argument of :func:`~.compile.parse_grammar` and of the functions that
call it (:func:`~.compile.grammar_to_nfa`, :func:`~.compile.compile_grammar`,
:class:`~.checker.Checker`); exceeding one raises :class:`GrammarLimitError` (a
:class:`~tractable.fsa.errors.GrammarError`) naming the limit, its value and the size found.
A ``RecursionError`` that still escapes (a self-embedding cycle of thousands of rules unrolled
by ``approximation="under"``) is a ``GrammarLimitError`` with ``limit="recursion_limit"``.

* ``max_nesting`` — brackets ``( [ {`` nested inside one rule or terminal.  The compilers walk
  right-hand sides recursively; real grammars nest fewer than 20 levels.
* ``max_rules`` — rules and terminals defined (template instances included).
* ``max_symbols`` — symbol occurrences in all right-hand sides together (the size of the
  grammar; a 50,000-symbol sequence is 50,000).

The byte-NFA size of an approximation is bounded separately by ``max_states``
(:data:`~.approx.MAX_BYTE_STATES`).
"""

from __future__ import annotations

from ..errors import GrammarError

__all__ = [
    "GrammarLimitError",
    "DEFAULT_MAX_NESTING",
    "DEFAULT_MAX_RULES",
    "DEFAULT_MAX_SYMBOLS",
    "check_limit",
]

#: Deepest bracket nesting inside one right-hand side.
DEFAULT_MAX_NESTING = 100
#: Most rules + terminals (+ template instances) in one grammar.
DEFAULT_MAX_RULES = 100_000
#: Most symbol occurrences in all right-hand sides together.
DEFAULT_MAX_SYMBOLS = 1_000_000


class GrammarLimitError(GrammarError):
    """A grammar exceeds a resource limit.

    Attributes: ``limit`` (the keyword argument, e.g. ``"max_nesting"``), ``value`` (its value),
    ``estimate`` (the size found or estimated; ``None`` when only known to exceed), plus
    ``rule`` and ``line`` where known.
    """

    def __init__(self, what: str, limit: str, value: int, estimate: int | None,
                 rule: str | None = None, line: int | None = None, hint: str | None = None):
        size = f"{estimate:,}" if estimate is not None else "more"
        super().__init__(
            f"{what}: {size} exceeds the limit {limit}={value:,} "
            f"({hint or f'pass a larger {limit}= to allow it'})", rule, line)
        self.limit = limit
        self.value = value
        self.estimate = estimate


def check_limit(what: str, limit: str, value: int, estimate: int,
                rule: str | None = None, line: int | None = None) -> None:
    """Raise :class:`GrammarLimitError` when ``estimate > value``."""
    if estimate > value:
        raise GrammarLimitError(what, limit, value, estimate, rule, line)
