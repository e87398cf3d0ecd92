"""Property-based fuzzing of the grammar front ends (hypothesis; short here, issue 23).

* random small GBNF grammars over {a, b}: the exact checker agrees with membership by the
  definition (:func:`~tractable.testing.grammar.brute_cfg_accepts`) on every string of length
  <= 4, "over" accepts every sentence, "under" accepts only sentences, every prefix of a
  sentence is viable;
* random small Lark grammars: the checker agrees with Lark's own Earley parser;
* random mutations of grammar source: every failure is a ``TractableError`` (never an untyped
  exception), in both syntaxes.
"""

from __future__ import annotations

import itertools
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tractable.fsa import nfa as N
from tractable.fsa.errors import TractableError

from tractable.grammar import Checker, grammar_to_nfa, parse_grammar
from tractable.testing.grammar import brute_cfg_accepts, lark_accepts, lark_parser

STRINGS = [bytes(w) for n in range(5) for w in itertools.product(b"ab", repeat=n)]
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def gbnf_grammars(draw) -> str:
    n = draw(st.integers(1, 4))
    names = ["root"] + [f"r{i}" for i in range(1, n)]
    atom = st.sampled_from(['"a"', '"b"', '"ab"', "[ab]", "[^b]", '""', *names])

    def item():
        a = draw(atom)
        if draw(st.integers(0, 5)) == 0:  # a group
            a = "(" + " ".join(draw(atom) for _ in range(draw(st.integers(1, 2)))) + \
                draw(st.sampled_from(["", " | " + draw(atom)])) + ")"
        return a + draw(st.sampled_from(["", "", "", "*", "+", "?", "{1,2}", "{2}"]))

    lines = []
    for nm in names:
        alts = [" ".join(item() for _ in range(draw(st.integers(0, 3))))
                for _ in range(draw(st.integers(1, 3)))]
        lines.append(f"{nm} ::= " + " | ".join(a or '""' for a in alts))
    return "\n".join(lines) + "\n"


@SETTINGS
@given(gbnf_grammars())
def test_random_gbnf_checker_and_approximations_against_the_definition(text):
    try:
        c = Checker(text)
    except TractableError:  # e.g. an empty language
        return
    over = grammar_to_nfa(c.cfg, approximation="over")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        under = grammar_to_nfa(c.cfg, approximation="under", max_depth=1)
    for s in STRINGS:
        want = brute_cfg_accepts(c.cfg, s)
        assert c.accepts(s) == want, (text, s)
        if want:
            assert N.matches(over, s), (text, s)
            assert all(c.viable(s[:i]) for i in range(len(s) + 1)), (text, s)
        if N.matches(under, s):
            assert want, (text, s)


@st.composite
def lark_grammars(draw) -> str:
    n = draw(st.integers(1, 3))
    names = [f"r{i}" for i in range(n)]
    atom = st.sampled_from(['"a"', '"b"', '"ab"', '"A"i', "/a+/", "/[ab]/", "T", *names])

    def item():
        a = draw(atom)
        if draw(st.integers(0, 5)) == 0:
            a = "(" + draw(atom) + " " + draw(atom) + ")"
        return a + draw(st.sampled_from(["", "", "*", "+", "?", " ~ 1..2"]))

    lines = ["start: r0"]
    for nm in names:
        alts = [" ".join(item() for _ in range(draw(st.integers(1, 3))))
                for _ in range(draw(st.integers(1, 2)))]
        if draw(st.booleans()):
            alts.append('"b"')
        lines.append(f"{nm}: " + " | ".join(alts))
    lines.append('T: "b" "a"?')
    return "\n".join(lines) + "\n"


@SETTINGS
@given(lark_grammars())
def test_random_lark_checker_against_lark(text):
    pytest.importorskip("lark")
    try:
        c = Checker(text)
    except TractableError:
        return
    lp = lark_parser(text)
    for s in STRINGS:
        assert c.accepts(s) == lark_accepts(lp, s.decode()), (text, s)


_SEEDS = [
    'root ::= "a" x* | [a-c]{1,3}\nx ::= ("b" | "c")+ "d"?\n',
    'start: a+ B\na: "x" | /y+/i | "(" a ")"\nB: "b".."d"\n%import common.WS\n%ignore WS\n',
]


@SETTINGS
@given(st.sampled_from(_SEEDS), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 2),
                                                    st.sampled_from(list('"()[]{}|*+?:=\\/.%~-a'
                                                                         'Z0 \n#'))),
                                          min_size=1, max_size=4))
def test_mutated_grammar_source_fails_only_with_typed_errors(seed, edits):
    text = seed
    for pos, op, ch in edits:
        pos = pos % (len(text) + 1)
        if op == 0:
            text = text[:pos] + text[pos + 1:]
        elif op == 1:
            text = text[:pos] + ch + text[pos:]
        else:
            text = text[:pos] + ch + text[pos + 1:]
    for syntax in ("auto", "gbnf", "lark"):
        try:
            g = parse_grammar(text, syntax=syntax)
            c = Checker(g)
            c.accepts("ab")
            grammar_to_nfa(g, approximation="over", max_states=20_000)
        except TractableError:
            pass
