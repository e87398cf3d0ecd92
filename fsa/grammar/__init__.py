"""Context-free grammars: front ends, regular approximations as token automata, exact checker.

A CFG is not regular, so a grammar constraint has two faces (paper 002 §5; paper 000 App. H):

* a **regular approximation** compiled to a :class:`~tractable.fsa.automaton.TokenAutomaton`
  for GCD / P-GCD: ``approximation="under"`` (nesting depth ≤ ``max_depth``: every accepted
  string is grammatical, so GCD's "valid at stop" guarantee holds) or ``"over"`` (a
  Mohri–Nederhof superset: never rejects a grammatical string, so it is a valid AWRS/SMC
  proposal);
* the **exact checker** :class:`Checker` (an incremental Earley recognizer over bytes) that AWRS
  and SMC use as the constraint / potential.

Modules, in pipeline order:

* front ends → :class:`CFG`: :mod:`.lark` (Lark, through the ``lark`` package's own grammar
  loader, :mod:`.lark_load`), :mod:`.gbnf` (GBNF and transformers-CFG EBNF); resource limits
  of both in :mod:`.limits`; ``syntax="auto"`` picks GBNF when a line starts with ``name ::=``;
* :mod:`.cfg` — the internal extended CFG and :func:`~.cfg.prepare` (``%ignore`` made explicit,
  lexicalization, productivity, SCCs);
* :mod:`.scc` — SCC classification (left/right-linear, self-embedding, back-edge calls);
* :mod:`.approx` (with :mod:`.builder`) — the "under" / "over" byte NFAs; :mod:`.unroll` — the
  grammar the "under" automaton accepts, written out;
* :mod:`.compile` — :func:`parse_grammar`, :func:`grammar_to_nfa`, :func:`compile_grammar`;
* :mod:`.earley`, :mod:`.checker` — the exact recognizer and :class:`Checker`;
* :mod:`.gbnf_export` — :func:`to_gbnf`, any CFG as GBNF text for other engines.

Example::

    A = compile_grammar(open("sql.lark").read(), vocab, approximation="over")
    chk = Checker(open("sql.lark").read())
    chk.viable(b"SELECT name FROM") ; chk.accepts(b"SELECT name FROM singer")
"""

from __future__ import annotations

from .approx import MAX_BYTE_STATES
from .cfg import CFG, prepare
from .checker import Checker
from .compile import (
    DEFAULT_MAX_DEPTH,
    compile_grammar,
    detect_syntax,
    grammar_to_nfa,
    parse_grammar,
)
from .gbnf_export import to_gbnf
from .lark_load import LarkNotInstalledError
from .limits import (
    DEFAULT_MAX_NESTING,
    DEFAULT_MAX_RULES,
    DEFAULT_MAX_SYMBOLS,
    GrammarLimitError,
)
from .scc import scc_report
from .unroll import unroll

__all__ = [
    "CFG",
    "Checker",
    "parse_grammar",
    "grammar_to_nfa",
    "compile_grammar",
    "detect_syntax",
    "unroll",
    "scc_report",
    "to_gbnf",
    "prepare",
    "DEFAULT_MAX_DEPTH",
    "MAX_BYTE_STATES",
    "DEFAULT_MAX_NESTING",
    "DEFAULT_MAX_RULES",
    "DEFAULT_MAX_SYMBOLS",
    "GrammarLimitError",
    "LarkNotInstalledError",
]
