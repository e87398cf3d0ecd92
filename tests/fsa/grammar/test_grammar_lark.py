"""The Lark front end on lark's own grammar loader (tractable.fsa.grammar.lark / lark_load):
full Lark syntax (%import common.*, %ignore, priorities, templates, %override / %extend),
checked against Lark's own Earley parser (``lexer="dynamic_complete"``, the scannerless
semantics) on random strings; typed errors with the line where the construct starts."""

from __future__ import annotations

import random
import sys

import pytest
from tractable.fsa import nfa as N
from tractable.fsa.errors import GrammarError, TractableError

from tractable.grammar import Checker, grammar_to_nfa, parse_grammar
from tractable.testing.grammar import brute_cfg_accepts, lark_accepts, lark_parser, mutations

pytest.importorskip("lark")


def _agree(text: str, sentences: list[str], alphabet: bytes, *, n_random: int = 300,
           seed: int = 0, max_len: int = 8) -> int:
    """Checker.accepts == Lark's Earley parser on the sentences, their mutations and random
    strings; the "over" automaton contains every accepted one.  Returns how many Lark accepted
    (so that a test can require both verdicts to occur)."""
    c, lp = Checker(text), lark_parser(text)
    over = grammar_to_nfa(text, approximation="over")
    rng = random.Random(seed)
    strings = [x.encode() for x in sentences]
    for x in sentences:
        strings += mutations(x.encode(), rng, 20, alphabet)
    strings += [bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, max_len)))
                for _ in range(n_random)]
    accepted = 0
    for s in strings:
        want = lark_accepts(lp, s.decode())
        assert c.accepts(s) == want, s
        if want:
            assert N.matches(over, s), s
        accepted += want
    for x in sentences:
        assert lark_accepts(lp, x), x
    return accepted


def test_import_common_number_and_signed():
    text = "start: NUMBER (\",\" SIGNED_NUMBER)*\n%import common.NUMBER\n" \
           "%import common.SIGNED_NUMBER\n"
    acc = _agree(text, ["1", "1.5", "2e10,-3.25E-2", ".5,+1", "10.,3"], b"0123.,eE+-",
                 n_random=400)
    assert 20 < acc < 700


def test_import_common_ws_ignore_and_escaped_string():
    text = r"""
start: pair ("," pair)*
pair: ESCAPED_STRING ":" (INT | CNAME)
%import common.ESCAPED_STRING
%import common (INT, CNAME)
%import common.WS
%ignore WS
"""
    acc = _agree(text, ['"a": 1', ' "x\\"y" :foo_1 , "" : 22 ', '"\\\\":x'],
                 b'"\\a: ,1x_', n_random=400, seed=1)
    assert acc > 10


def test_priorities_aliases_modifiers_and_templates():
    text = r"""
start: item+
!item.2: WORD -> word | "kw"i | RANGE | tmpl{NUM, ";"} | maybe_x
?maybe_x.1: ["x" "x"]
tmpl{x, sep}: "[" x (sep x)* "]"
RANGE.3: "a".."c" "x"
WORD: /[d-f]+/i
NUM: DIGIT ~ 1..2
%import common.DIGIT
%import common.WS_INLINE
%ignore WS_INLINE
"""
    acc = _agree(text, ["KW ax", "[1;22] deF", "[7] xx bx"], b"abcdefxKW[];12 ", seed=2)
    assert acc > 5


def test_override_and_extend():
    text = r"""
start: a
a: "x"
A: "q"
%override a: "y" A
%extend a: "z"
"""
    c, lp = Checker(text), lark_parser(text)
    for s in ["x", "yq", "z", "y", ""]:
        assert c.accepts(s) == lark_accepts(lp, s), s
    assert c.accepts("yq") and c.accepts("z") and not c.accepts("x")


def test_grammar_of_grammars_from_lark_stdlib_is_refused_but_unicode_is_fine():
    text = "start: WS\n%import unicode.WS\n"
    c = Checker(text)
    assert c.accepts(" \t") and c.accepts("\xa0") and not c.accepts("")
    with pytest.raises(GrammarError, match="standard modules") as ei:
        parse_grammar("start: NAME\n%import python.NAME\n", syntax="lark")
    assert ei.value.line == 2
    with pytest.raises(GrammarError, match="never read"):  # relative imports read no file
        parse_grammar("start: X\n%import .other.X\n", syntax="lark")


def test_random_lark_grammars_agree_with_brute_force():
    """The translation to the internal CFG against the definition of the language (no Earley,
    no lark): every string of length <= 5 over {a, b}."""
    import itertools

    rng = random.Random(3)
    strings = [bytes(w) for n in range(6) for w in itertools.product(b"ab", repeat=n)]
    checked, verdicts = 0, set()
    for _ in range(6):
        names = [f"r{i}" for i in range(rng.randint(1, 4))]
        lines = ["start: r0"]
        for nm in names:
            alts = []
            for _ in range(rng.randint(1, 3)):
                syms = [rng.choice(['"a"', '"b"', '"ab"i', "/a+/", *names, "(r0)?", "B"])
                        for _ in range(rng.randint(0, 3))]
                alts.append(" ".join(syms))
            lines.append(f"{nm}: " + " | ".join(alts))
        lines.append('B: "b" ~ 1..2')
        text = "\n".join(lines) + "\n"
        try:
            c = Checker(text)
        except TractableError:  # an empty language is a typed error
            continue
        lp = lark_parser(text)
        checked += 1
        for s in strings:
            want = brute_cfg_accepts(c.cfg, s)
            assert c.accepts(s) == want, (text, s)
            assert lark_accepts(lp, s.decode()) == want, (text, s)
            verdicts.add(want)
    assert checked >= 4 and verdicts == {True, False}


@pytest.mark.parametrize(
    "text, rule, line, what",
    [
        # the error is inside a definition that spans lines 2-4: its start line is reported
        ('start: a\na: "x"\n  | "y" (\n  | "z"\nb: "q"\n', "a", 2, "unexpected"),
        ('start: a\n\na: "x"\n  | B\n', "a", 3, "undefined terminal"),
        # a bad leaf (regex, literal) is reported at its own line
        ('start: A\nA: "x"\n  | /a(?<=b)/\n', "A", 3, "lookbehind"),
        ('start: a\na: "x" "".."b"\n', "a", 2, "range"),
        ("start: X\n%import common.X\n", None, 2, "X"),
        ("start: a\n%ignore \"\"\na: \"x\"\n", "%ignore", 2, "empty"),
    ],
)
def test_errors_point_at_the_construct_start(text, rule, line, what):
    with pytest.raises(GrammarError) as ei:
        parse_grammar(text, syntax="lark")
    assert ei.value.line == line, str(ei.value)
    assert ei.value.rule == rule, str(ei.value)
    assert what in str(ei.value)


def test_missing_lark_is_a_typed_error(monkeypatch):
    from tractable.fsa.grammar import LarkNotInstalledError

    monkeypatch.setitem(sys.modules, "lark", None)
    monkeypatch.setitem(sys.modules, "lark.load_grammar", None)
    with pytest.raises(LarkNotInstalledError, match="tractable\\[grammar\\]") as ei:
        parse_grammar("start: \"x\"\n", syntax="lark")
    assert isinstance(ei.value, TractableError) and isinstance(ei.value, ImportError)
    # GBNF needs no lark
    assert Checker('root ::= "x"\n').accepts("x")
