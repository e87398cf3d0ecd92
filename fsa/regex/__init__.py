"""Regular expressions → byte-level NFAs → token automata (paper 002, §5.1): the regex front end.

Patterns are read by Python's own ``re`` parser, so syntax and meaning are exactly ``re``'s;
the semantics, anchors, lookaround and size limits are documented in :mod:`.compile`.

Modules
-------
* :mod:`.compile` — the parser walk and Thompson-style construction: :func:`regex_to_nfa`
  (a pattern → a finalized :class:`~tractable.fsa.nfa.ByteNFA`) and :func:`compile_regex`
  (→ a cached :class:`~tractable.fsa.automaton.TokenAutomaton` over a vocabulary).
* :mod:`.lookaround` — lookahead/lookbehind compiled exactly, as a product with the marked
  pattern automaton (used by :mod:`.compile`).

The import path ``tractable.fsa.regex`` is the public one; the submodules are implementation.
"""

from __future__ import annotations

from .compile import (
    MAX_NFA_STATES,
    _estimate,  # noqa: F401 - the size estimate, read by the bad-input tests
    clear_regex_cache,
    compile_regex,
    regex_to_nfa,
)

__all__ = ["regex_to_nfa", "compile_regex", "clear_regex_cache", "MAX_NFA_STATES"]
