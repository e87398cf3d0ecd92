"""Hostile grammars (issue 23): long rule chains, deep nesting, huge sequences — each a correct
result or a typed GrammarLimitError naming the limit and the size found, never a RecursionError
or a hang; limits configurable; error lines right after multi-line tokens.
(bench/grammar_bench.py limits measures time and peak RSS of each in a subprocess.)"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from tractable.fsa import nfa as N
from tractable.fsa.errors import GrammarError, TractableError
from tractable.fsa.grammar import GrammarLimitError

from tractable.grammar import Checker, grammar_to_nfa, parse_grammar

DATA = Path(__file__).resolve().parents[2] / "data" / "grammars"


def _lark_chain(n: int) -> str:
    return "start: r0\n" + "".join(f"r{i}: r{i + 1}\n" for i in range(n - 1)) + \
        f'r{n - 1}: "x" | "(" r0 ")"\n'


def _gbnf_chain(n: int, suffix: str = "") -> str:
    last = '"x"' if suffix else '"x" | "(" root ")"'
    return "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}{suffix}\n" for i in range(n - 1)) + \
        f"r{n - 1} ::= {last}\n"


@pytest.mark.parametrize("syntax", ["lark", "gbnf"])
def test_chain_of_10k_rules_gives_the_right_language(syntax):
    """Recursive at the bottom: one SCC of 10,000 rules (the hand-written Lark parser of
    before recursed once per rule: RecursionError)."""
    t = time.perf_counter()
    text = _lark_chain(10_000) if syntax == "lark" else _gbnf_chain(10_000)
    c = Checker(text)
    over = grammar_to_nfa(c.cfg, approximation="over")
    for s in [b"x", b"((x))"]:
        assert c.accepts(s) and N.matches(over, s), s
    for s in [b"", b"(x", b"xx", b"x)"]:
        assert not c.accepts(s), s
    assert not N.matches(over, b"") and not N.matches(over, b"xx")  # over: (* x )*
    # "under" unrolls the 10,000-rule cycle recursively: a typed error, not a RecursionError
    with pytest.raises(GrammarLimitError) as ei:
        grammar_to_nfa(c.cfg, approximation="under", max_depth=2)
    assert ei.value.limit == "recursion_limit" and "approximation='over'" in str(ei.value)
    with pytest.warns(UserWarning, match="depth 2"):
        under = grammar_to_nfa(_lark_chain(100), approximation="under", max_depth=2)
    assert N.matches(under, b"((x))") and not N.matches(under, b"(((x)))")
    assert time.perf_counter() - t < 120  # a few seconds on an idle core (see the bench)


def test_chain_of_copies_is_exact():
    """300 non-recursive rules, each the one below plus "a": exact in both approximations."""
    text = _gbnf_chain(300, ' "a"')
    c = Checker(text)
    good = b"x" + b"a" * 299
    for mode in ("over", "under"):
        nfa = grammar_to_nfa(c.cfg, approximation=mode)
        assert N.matches(nfa, good) and not N.matches(nfa, good[:-1]), mode
    assert c.accepts(good) and not c.accepts(good + b"a")


def test_long_chain_of_copies_finalizes_a_bounded_number_of_states(monkeypatch):
    """2,500 rules each the one below plus "a" (issue 23: the 10k-rule chain took 29-40 s,
    finalizing a copy of every size up to SHARE_MIN = 2,000 — 2M states).  The finalized
    states are now at most the lexicalization (LEX_TOTAL_STATES), the all-copies attempt
    (SHARE_BUDGET), COPY_BUDGET and the result, and the language is still exact."""
    from tractable.fsa.grammar import approx, cfg

    n = 2_500
    finalized = []
    real = N._canonical

    def counted(nfa, reduce):
        out = real(nfa, reduce)
        finalized.append(out.num_states)
        return out

    monkeypatch.setattr(N, "_canonical", counted)
    over = grammar_to_nfa(_gbnf_chain(n, ' "a"'), approximation="over")
    good = b"x" + b"a" * (n - 1)
    assert N.matches(over, good)
    assert not N.matches(over, good[:-1]) and not N.matches(over, good + b"a")
    assert over.num_states == n + 1
    bound = (cfg.LEX_TOTAL_STATES + approx.SHARE_BUDGET + approx.COPY_BUDGET
             + 3 * approx.SHARE_MIN + 4 * n)
    assert sum(finalized) <= bound
    assert sum(finalized) > approx.SHARE_BUDGET  # the all-copies attempt did run


@pytest.mark.parametrize("syntax, text", [
    ("lark", "start: " + "(" * 3000 + '"x"' + ")" * 3000 + "\n"),
    ("gbnf", "root ::= " + "(" * 3000 + '"x"' + ")" * 3000 + "\n"),
    ("lark", 'start: a\na: "y"\n  | ' + '["x" ' * 3000 + "]" * 3000 + "\n"),
])
def test_deep_nesting_is_a_limit_error_at_the_construct(syntax, text):
    t = time.perf_counter()
    with pytest.raises(GrammarLimitError) as ei:
        Checker(text, syntax=syntax)
    e = ei.value
    assert isinstance(e, GrammarError) and isinstance(e, TractableError)
    assert e.limit == "max_nesting" and e.value == 100 and e.estimate > 100
    assert e.line in (1, 2) and e.rule in ("start", "root", "a")
    assert "max_nesting=100" in str(e)
    assert time.perf_counter() - t < 30


@pytest.mark.parametrize("syntax", ["lark", "gbnf"])
def test_nesting_limit_is_configurable(syntax):
    k = 150
    head = "start: " if syntax == "lark" else "root ::= "
    text = head + '("a"? ' * k + '"x"' + ")" * k + "\n"
    with pytest.raises(GrammarLimitError):
        parse_grammar(text, syntax=syntax)
    c = Checker(text, syntax=syntax, max_nesting=200)
    assert c.accepts("x") and c.accepts("aaax") and not c.accepts("xa")
    over = grammar_to_nfa(text, syntax=syntax, max_nesting=200)
    assert N.matches(over, b"aax") and not N.matches(over, b"ax x")


def test_recursion_limit_is_a_typed_error_not_recursion_error():
    text = "root ::= " + '("a" ' * 400 + '"x"' + ")*" * 400 + "\n"
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(600)
    try:
        with pytest.raises(GrammarLimitError, match="recursion limit") as ei:
            grammar_to_nfa(text, max_nesting=10_000)
    finally:
        sys.setrecursionlimit(old)
    assert ei.value.limit == "recursion_limit" and ei.value.value == 600


def test_symbol_and_rule_limits():
    seq = "root ::= " + " ".join('"a"' if i % 2 else "[b-c]" for i in range(50_000)) + "\n"
    g = parse_grammar(seq)  # the default limits allow it
    assert len(g.rules["root"][1]) == 50_000
    with pytest.raises(GrammarLimitError) as ei:
        parse_grammar(seq, max_symbols=10_000)
    assert ei.value.limit == "max_symbols" and ei.value.estimate == 50_000
    assert "50,000" in str(ei.value)
    with pytest.raises(GrammarLimitError) as ei:
        parse_grammar(_gbnf_chain(1_000), max_rules=500)
    assert ei.value.limit == "max_rules" and ei.value.estimate > 1_000
    with pytest.raises(GrammarLimitError) as ei:
        parse_grammar(_lark_chain(1_000), max_rules=500)
    assert ei.value.limit == "max_rules" and ei.value.estimate == 1_001  # start + r0..r999


def test_long_sequence_compiles_exactly():
    k = 5_000
    text = "root ::= " + " ".join('"a"' if i % 2 else "[b-c]" for i in range(k)) + "\n"
    nfa = grammar_to_nfa(text)
    s = b"ba" * (k // 2)
    assert N.matches(nfa, s) and not N.matches(nfa, s[:-1]) and not N.matches(nfa, b"a" + s[1:])


def test_c_gbnf_byte_automata_in_seconds():
    """llama.cpp's c.gbnf: the "under" automaton at the default depth 2 (3,771 byte states)
    and the "over" one; the token-level lift of the former is the slow part (see the bench)."""
    import warnings

    text = (DATA / "c.gbnf").read_text()
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        under = grammar_to_nfa(text, approximation="under", max_depth=2)
    over = grammar_to_nfa(text, approximation="over")
    assert time.perf_counter() - t < 60
    assert under.num_states == 3771 and over.num_states == 315
    c = Checker(text)
    prog = b"int main(){x = f(1, ( 2+y )*3);while(x<10){x = x+1;}return x;}"
    assert c.accepts(prog) and N.matches(under, prog) and N.matches(over, prog)


@pytest.mark.parametrize("text, rule, line", [
    # a raw newline inside a character class or a {m,n} no longer shifts later lines
    ('root ::= [a\nb]\nx ::= y\n', "x", 3),
    ('root ::= "a"{1,\n2}\nx ::= y\n', "x", 3),
    ('root ::= x\nx ::= ( "a"\n  | "b"\n', "x", 2),  # missing ')': at the '(' that opened
])
def test_gbnf_error_lines(text, rule, line):
    with pytest.raises(GrammarError) as ei:
        parse_grammar(text, syntax="gbnf")
    assert (ei.value.rule, ei.value.line) == (rule, line), str(ei.value)
