"""Context-free grammars: front ends, regular approximations as token automata, exact checker.

A CFG is not regular, so a grammar constraint has two faces (paper 002 §5; paper 000 App. H):

* a **regular approximation** compiled to a :class:`~.automaton.TokenAutomaton` for GCD / P-GCD:
  ``approximation="under"`` (nesting depth ≤ ``max_depth``: every accepted string is grammatical,
  so GCD's "valid at stop" guarantee holds) or ``"over"`` (a Mohri–Nederhof superset: never
  rejects a grammatical string, so it is a valid AWRS/SMC proposal) — see
  :mod:`.grammar_approx`;
* the **exact checker** :class:`Checker` (an incremental Earley recognizer over bytes, see
  :mod:`.grammar_earley`) that AWRS and SMC use as the constraint / potential.

Front ends (one internal :class:`~.grammar_cfg.CFG`): Lark (:mod:`.grammar_lark`), GBNF and
transformers-CFG EBNF (:mod:`.grammar_gbnf`).  ``syntax="auto"`` picks GBNF when the text
contains ``::=`` and Lark otherwise.

Example::

    A = compile_grammar(open("sql.lark").read(), vocab, approximation="over")
    chk = Checker(open("sql.lark").read())
    chk.viable(b"SELECT name FROM") ; chk.accepts(b"SELECT name FROM singer")
"""

from __future__ import annotations

import re
import time
import warnings
from typing import Any

from .automaton import TokenAutomaton
from .errors import InvalidArgumentError
from .grammar_approx import MAX_BYTE_STATES, approximate, scc_report, unroll
from .grammar_cfg import CFG, prepare
from .grammar_earley import EarleyChecker
from .grammar_gbnf import parse_gbnf, to_gbnf
from .grammar_lark import parse_lark
from .nfa import ByteNFA
from .vocabulary import TokenVocabulary, require_vocabulary

__all__ = [
    "CFG",
    "Checker",
    "parse_grammar",
    "grammar_to_nfa",
    "compile_grammar",
    "unroll",
    "scc_report",
    "to_gbnf",
    "DEFAULT_MAX_DEPTH",
]

#: Default nesting depth of the "under" approximation.
DEFAULT_MAX_DEPTH = 2

_GBNF_DEF = re.compile(r"^\s*[A-Za-z0-9_-]+\s*::=", re.M)


def detect_syntax(text: str) -> str:
    """``"gbnf"`` when some line starts with ``name ::=``, else ``"lark"``."""
    return "gbnf" if _GBNF_DEF.search(text) else "lark"


def parse_grammar(text: str, *, syntax: str = "auto", start: str | None = None) -> CFG:
    """Parse grammar source into a :class:`CFG`.

    Args:
        text: grammar source.
        syntax: ``"auto"``, ``"lark"``, ``"gbnf"`` or ``"ebnf"`` (transformers-CFG; GBNF syntax).
        start: start rule (default ``start`` for Lark, ``root`` for GBNF/EBNF).

    Raises:
        GrammarError: with the rule and line of the problem.
    """
    if syntax == "auto":
        syntax = detect_syntax(text)
    if syntax == "lark":
        return parse_lark(text, start=start)
    if syntax in ("gbnf", "ebnf"):
        return parse_gbnf(text, start=start, syntax=syntax)
    raise InvalidArgumentError(f"syntax must be 'auto', 'lark', 'gbnf' or 'ebnf', not {syntax!r}")


def _as_cfg(grammar: str | CFG, syntax: str, start: str | None) -> CFG:
    if isinstance(grammar, CFG):
        if start is not None and start != grammar.start:
            return CFG(grammar.rules, grammar.terminals, start, grammar.ignore, grammar.lines,
                       grammar.syntax)
        return grammar
    return parse_grammar(grammar, syntax=syntax, start=start)


def grammar_to_nfa(
    grammar: str | CFG,
    *,
    syntax: str = "auto",
    approximation: str = "over",
    max_depth: int = DEFAULT_MAX_DEPTH,
    start: str | None = None,
    max_states: int = MAX_BYTE_STATES,
) -> ByteNFA:
    """The byte-level NFA of the regular approximation (finalized; never determinized).

    ``"under"`` warns (``UserWarning``) with the depth it unrolled self-embedding recursion to,
    when the grammar has any.  Sizes: ``nfa.num_states`` / ``nfa.num_edges``.

    Raises:
        GrammarError: parse errors; the automaton would exceed ``max_states``.
        EmptyLanguageError: the grammar derives no string.
    """
    nfa, _ = _approx(grammar, syntax, approximation, max_depth, start, max_states)
    return nfa


def _approx(grammar, syntax, approximation, max_depth, start, max_states):
    cfg = _as_cfg(grammar, syntax, start)
    nfa, info = approximate(cfg, approximation, max_depth, max_states=max_states)
    if approximation == "under" and info["self_embedding"]:
        names = ", ".join(sorted(a for comp in info["self_embedding"] for a in comp)[:8])
        warnings.warn(
            f"grammar approximated from below: self-embedding recursion ({names}"
            f"{', …' if sum(map(len, info['self_embedding'])) > 8 else ''}) unrolled to nesting "
            f"depth {max_depth}; deeper sentences are rejected",
            UserWarning,
            stacklevel=3,
        )
    return nfa, info


def compile_grammar(
    grammar: str | CFG,
    vocab: TokenVocabulary,
    *,
    syntax: str = "auto",
    approximation: str = "under",
    max_depth: int = DEFAULT_MAX_DEPTH,
    start: str | None = None,
    max_states: int = MAX_BYTE_STATES,
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

    Returns:
        A token automaton; ``meta`` holds ``kind="grammar"``, ``approximation``, ``max_depth``,
        ``byte_states``, ``byte_edges``, ``token_states``, ``token_edges``,
        ``self_embedding`` and ``nfa_seconds`` (the lift time is ``compile_seconds``).

    Raises:
        GrammarError, EmptyLanguageError: see :func:`grammar_to_nfa`.
    """
    require_vocabulary(vocab)
    t0 = time.perf_counter()
    nfa, info = _approx(grammar, syntax, approximation, max_depth, start, max_states)
    t1 = time.perf_counter()
    meta: dict[str, Any] = {"kind": "grammar", **info, "nfa_seconds": t1 - t0}
    out = TokenAutomaton.from_byte_nfa(nfa, vocab, meta=meta)
    out.meta["token_states"] = int(out.num_states)
    out.meta["token_edges"] = int(out.num_edges)
    return out


class Checker:
    """Exact incremental membership / viability for a context-free grammar.

    ``viable(prefix)`` — can ``prefix`` (bytes or str) be completed to a sentence?
    ``accepts(text)`` — is ``text`` a sentence?  Both reuse the Earley columns of every prefix
    seen before (a trie keyed by bytes), so probing many continuations of one prefix costs one
    column per new byte.  Duck-typed as the black-box constraint of AWRS / potential of SMC.

    Args:
        grammar: grammar source or :class:`CFG`.
        syntax, start: see :func:`parse_grammar`.
        max_columns: cached Earley columns kept before the cache is reset.

    Raises:
        GrammarError, EmptyLanguageError.
    """

    def __init__(
        self,
        grammar: str | CFG,
        *,
        syntax: str = "auto",
        start: str | None = None,
        max_columns: int = 500_000,
    ):
        self.cfg = _as_cfg(grammar, syntax, start)
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


# keep prepare importable from here for advanced users
prepare = prepare
