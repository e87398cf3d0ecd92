"""Grammar source → :class:`~.cfg.CFG` → regular approximation → token automaton (the public
entry points; :class:`~.checker.Checker` is the exact side).

Every entry point takes the front-end limits of :mod:`.limits` (``max_nesting``,
``max_rules``, ``max_symbols``) and the approximation's ``max_states``; a grammar past one is a
:class:`~.limits.GrammarLimitError` raised before the expensive work.  Recursion is bounded by
those limits; should Python's recursion limit still be reached, that too is a
``GrammarLimitError``, never a ``RecursionError``.
"""

from __future__ import annotations

import functools
import re
import time
import warnings
from typing import Any

from ..automaton import TokenAutomaton
from ..errors import InvalidArgumentError
from ..gc_pause import paused_gc
from ..nfa import ByteNFA
from ..progress import compile_stage
from ..vocabulary import TokenVocabulary, require_vocabulary
from .approx import MAX_BYTE_STATES, approximate
from .cfg import CFG, symbols_of
from .gbnf import parse_gbnf
from .lark import parse_lark
from .limits import (
    DEFAULT_MAX_NESTING,
    DEFAULT_MAX_RULES,
    DEFAULT_MAX_SYMBOLS,
    GrammarLimitError,
    check_limit,
)

__all__ = [
    "parse_grammar",
    "grammar_to_nfa",
    "compile_grammar",
    "detect_syntax",
    "DEFAULT_MAX_DEPTH",
]

#: Default nesting depth of the "under" approximation.
DEFAULT_MAX_DEPTH = 2

_GBNF_DEF = re.compile(r"^\s*[A-Za-z0-9_-]+\s*::=", re.M)


def detect_syntax(text: str) -> str:
    """``"gbnf"`` when some line starts with ``name ::=``, else ``"lark"``."""
    return "gbnf" if _GBNF_DEF.search(text) else "lark"


def no_recursion_error(fn):
    """Turn a ``RecursionError`` escaping ``fn`` into a :class:`GrammarLimitError`."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RecursionError:
            import sys

            raise GrammarLimitError(
                "rules or brackets nested deeper than Python's recursion limit allows "
                "(bracket nesting is bounded by max_nesting; a chain of thousands of rules "
                "inside one self-embedding cycle is unrolled recursively)", "recursion_limit",
                sys.getrecursionlimit(), None,
                hint="lower max_nesting, use approximation='over', or raise "
                "sys.setrecursionlimit") from None

    return wrapper


def _grammar_size(cfg: CFG) -> int:
    return sum(1 for e in cfg.rules.values() for _ in symbols_of(e))


@no_recursion_error
def parse_grammar(
    text: str,
    *,
    syntax: str = "auto",
    start: str | None = None,
    max_nesting: int = DEFAULT_MAX_NESTING,
    max_rules: int = DEFAULT_MAX_RULES,
    max_symbols: int = DEFAULT_MAX_SYMBOLS,
) -> CFG:
    """Parse grammar source into a :class:`CFG`.

    Args:
        text: grammar source.
        syntax: ``"auto"``, ``"lark"``, ``"gbnf"`` or ``"ebnf"`` (transformers-CFG; GBNF syntax).
        start: start rule (default ``start`` for Lark, ``root`` for GBNF/EBNF).
        max_nesting, max_rules, max_symbols: see :mod:`.limits`.

    Raises:
        GrammarError: with the rule and the line where the construct starts.
        GrammarLimitError: a limit is exceeded (names the limit and the size found).
        LarkNotInstalledError: Lark syntax without the ``lark`` package.
        InvalidArgumentError: ``syntax`` or ``text`` of the wrong kind.
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"grammar text must be a str, not {type(text).__name__}")
    if syntax == "auto":
        syntax = detect_syntax(text)
    if syntax == "lark":
        cfg = parse_lark(text, start=start, max_nesting=max_nesting, max_rules=max_rules)
    elif syntax in ("gbnf", "ebnf"):
        cfg = parse_gbnf(text, start=start, syntax=syntax, max_nesting=max_nesting,
                         max_rules=max_rules)
    else:
        raise InvalidArgumentError(
            f"syntax must be 'auto', 'lark', 'gbnf' or 'ebnf', not {syntax!r}")
    check_limit("symbol occurrences in the right-hand sides", "max_symbols", max_symbols,
                _grammar_size(cfg))
    return cfg


def _as_cfg(grammar: str | CFG, syntax: str, start: str | None, limits: dict) -> CFG:
    if isinstance(grammar, CFG):
        if start is not None and start != grammar.start:
            return CFG(grammar.rules, grammar.terminals, start, grammar.ignore, grammar.lines,
                       grammar.syntax)
        return grammar
    return parse_grammar(grammar, syntax=syntax, start=start, **limits)


@no_recursion_error
def grammar_to_nfa(
    grammar: str | CFG,
    *,
    syntax: str = "auto",
    approximation: str = "over",
    max_depth: int = DEFAULT_MAX_DEPTH,
    start: str | None = None,
    max_states: int = MAX_BYTE_STATES,
    **limits,
) -> ByteNFA:
    """The byte-level NFA of the regular approximation (finalized; never determinized).

    ``"under"`` warns (``UserWarning``) with the depth it unrolled self-embedding recursion to,
    when the grammar has any.  Sizes: ``nfa.num_states`` / ``nfa.num_edges``.  ``limits``:
    ``max_nesting``, ``max_rules``, ``max_symbols`` (:mod:`.limits`).

    Raises:
        GrammarError: parse errors; the automaton would exceed ``max_states``.
        GrammarLimitError: a front-end limit is exceeded.
        EmptyLanguageError: the grammar derives no string.
    """
    nfa, _ = _approx(grammar, syntax, approximation, max_depth, start, max_states, limits)
    return nfa


def _approx(grammar, syntax, approximation, max_depth, start, max_states, limits):
    cfg = _as_cfg(grammar, syntax, start, limits)
    nfa, info = approximate(cfg, approximation, max_depth, max_states=max_states)
    if approximation == "under" and info["self_embedding"]:
        names = ", ".join(sorted(a for comp in info["self_embedding"] for a in comp)[:8])
        warnings.warn(
            f"grammar approximated from below: self-embedding recursion ({names}"
            f"{', …' if sum(map(len, info['self_embedding'])) > 8 else ''}) unrolled to nesting "
            f"depth {max_depth}; deeper sentences are rejected",
            UserWarning,
            stacklevel=4,
        )
    return nfa, info


@no_recursion_error
def compile_grammar(
    grammar: str | CFG,
    vocab: TokenVocabulary,
    *,
    syntax: str = "auto",
    approximation: str = "under",
    max_depth: int = DEFAULT_MAX_DEPTH,
    start: str | None = None,
    max_states: int = MAX_BYTE_STATES,
    **limits,
) -> TokenAutomaton:
    """Compile a grammar's regular approximation to a :class:`TokenAutomaton` over ``vocab``.

    Args:
        grammar: grammar source (Lark / GBNF / EBNF) or a parsed :class:`CFG`.
        vocab: the tokenizer vocabulary.
        syntax: see :func:`parse_grammar`.
        approximation: ``"under"`` (subset; default, GCD-safe) or ``"over"`` (superset).
        max_depth: nesting depth of self-embedding recursion for ``"under"``.
        start: start rule.
        max_states: bound on the byte NFA's size.
        limits: ``max_nesting``, ``max_rules``, ``max_symbols`` (:mod:`.limits`).

    Returns:
        A token automaton; ``meta`` holds ``kind="grammar"``, ``approximation``, ``max_depth``,
        ``byte_states``, ``byte_edges``, ``token_states``, ``token_edges``,
        ``self_embedding`` and ``nfa_seconds`` (the lift time is ``compile_seconds``).

    Raises:
        GrammarError, GrammarLimitError, EmptyLanguageError: see :func:`grammar_to_nfa`.
    """
    with compile_stage(), paused_gc():
        require_vocabulary(vocab)
        t0 = time.perf_counter()
        nfa, info = _approx(grammar, syntax, approximation, max_depth, start, max_states, limits)
        t1 = time.perf_counter()
        meta: dict[str, Any] = {"kind": "grammar", **info, "nfa_seconds": t1 - t0}
        out = TokenAutomaton.from_byte_nfa(nfa, vocab, meta=meta)
        out.meta["token_states"] = int(out.num_states)
        out.meta["token_edges"] = int(out.num_edges)
        return out
