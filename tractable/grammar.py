"""Public facade for context-free grammar constraints (see :mod:`tractable.fsa.grammar`).

    from tractable.grammar import Checker, compile_grammar
    chk = Checker(lark_text)  # exact, incremental: chk.viable(b"SELECT"), chk.accepts(...)
    A = compile_grammar(lark_text, vocab, approximation="over")   # regular superset as NFA
"""

from __future__ import annotations

from tractable.fsa.grammar import (
    CFG,
    DEFAULT_MAX_DEPTH,
    Checker,
    GrammarLimitError,
    LarkNotInstalledError,
    compile_grammar,
    grammar_to_nfa,
    parse_grammar,
    scc_report,
    to_gbnf,
    unroll,
)

__all__ = [
    "CFG",
    "Checker",
    "GrammarLimitError",
    "LarkNotInstalledError",
    "compile_grammar",
    "grammar_to_nfa",
    "parse_grammar",
    "scc_report",
    "to_gbnf",
    "unroll",
    "DEFAULT_MAX_DEPTH",
]
