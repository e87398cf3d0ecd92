"""Periodic components (counted repetitions lifted from one walk of the body) equal the direct
walk.

The direct walk (``lift._USE_COMPONENTS = False``) is checked against brute force in
test_automaton.py.  Here automata built with :mod:`tractable.fsa.lift_periodic` must have the
same states, edges, final states and token set on every edge: random bodies repeated
``{lo,hi}`` times over a tiny vocabulary (with every edge cut-free, so that whole repetitions
become components, and a low size bar, so that short ones are tried), hand-made automata where
the structure must be refused (a missing middle state that a path would cross), and JSON
Schema bounded strings over Llama-3 in both serializations.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lift import TINY, _assert_same, _build
from test_nfa import nfas
from tractable.fsa import lift as L
from tractable.fsa import lift_components as LC
from tractable.fsa import lift_periodic as LP
from tractable.fsa import nfa as N
from tractable.fsa.errors import EmptyLanguageError
from tractable.fsa.json_schema import json_schema_to_nfa
from tractable.fsa.vocabulary import TokenVocabulary


def _periodic_vs_direct(nfa: N.ByteNFA, vocab: TokenVocabulary, monkeypatch,
                        cut_free: bool = False, min_periodic: int = 2):
    """The automaton through components with periodic templates equals the direct walk's;
    returns the components' LiftedEdges (None for an empty language)."""
    monkeypatch.setattr(LP, "_MIN_PERIODIC", min_periodic)
    if cut_free:
        # only `"` and `x` cut: a repetition is one component (a chain from 2 states on)
        monkeypatch.setattr(LC, "_is_cut", lambda m: m in _CUTS)
        monkeypatch.setattr(LC, "_MIN_CHAIN", 2)
    vocab._memo.pop("lift_templates", None)
    try:
        ref, _ = _build(nfa, vocab, False)
    except EmptyLanguageError:
        with pytest.raises(EmptyLanguageError):
            _build(nfa, vocab, True)
        return None
    got, lifted = _build(nfa, vocab, True)
    _assert_same(got, ref)
    return lifted


_CUTS = (N.mask_of(b'"'), N.mask_of(b"x"))


def _tiny() -> TokenVocabulary:
    return TokenVocabulary.from_token_bytes(
        TINY + ["aa", "aaa", "aaaa", "ba", "abab", "\"a", "a\"a"], eos_token_ids=[9],
        name="tiny-periodic")


_MASKS = [N.mask_of(b"a"), N.mask_of(b"b"), N.mask_of(b"c"), N.mask_of(b"ab"),
          N.mask_of(b"bc"), N.mask_of(b"\xc3")]


@st.composite
def _dags(draw):
    """A small acyclic byte NFA over a, b, c and \\xc3: states 0..k-1, edges forward, state
    k-1 final (the bodies of counted repetitions whose copies form one chain)."""
    k = draw(st.integers(2, 4))
    edges = {(0, draw(st.sampled_from(_MASKS)), k - 1)}
    for i in range(k - 1):
        for j in range(i + 1, k):
            for m in draw(st.lists(st.sampled_from(_MASKS), max_size=2, unique=True)):
                edges.add((i, m, j))
    return N.finalize(N.ByteNFA(k, 0, frozenset({k - 1}), tuple(sorted(edges))))


_seen = {"periodic": 0, "cases": 0}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(_dags(), nfas.map(lambda t: t[0])), st.integers(0, 3), st.integers(0, 7),
       st.sampled_from(["end", "quote", "star"]))
def test_random_repetitions_match_the_direct_walk(monkeypatch, body, lo, extra, tail):
    rep = N.repeat(body, lo, lo + extra)
    after = {"end": N.empty(), "quote": N.literal('"'), "star": N.star(body)}[tail]
    nfa = N.concat(N.literal('"'), rep, after, N.literal("x"))
    lifted = _periodic_vs_direct(nfa, _tiny(), monkeypatch, cut_free=True)
    _seen["cases"] += 1
    if lifted is not None:
        _seen["periodic"] += lifted.periodic


def test_random_repetitions_were_periodic():
    """The random test above exercised the periodic path (not only its refusals)."""
    if _seen["cases"] == 0:
        pytest.skip("run with test_random_repetitions_match_the_direct_walk")
    assert _seen["periodic"] >= 30, _seen


def _chain(copies: int, skip: set[int]) -> N.ByteNFA:
    """Copies of a body e -a-> u -b-> e' with a bypass e -c-> e'; copy i lacks u for i in
    ``skip``.  The state after the last copy reads `"` to the final state."""
    edges = []
    e = list(range(copies + 1))
    nxt = copies + 1
    for i in range(copies):
        edges.append((e[i], N.mask_of(b"c"), e[i + 1]))
        if i not in skip:
            u = nxt
            nxt += 1
            edges.append((e[i], N.mask_of(b"a"), u))
            edges.append((u, N.mask_of(b"b"), e[i + 1]))
    fin = nxt
    edges.append((e[copies], N.mask_of(b'"'), fin))
    return N.ByteNFA(fin + 1, 0, frozenset({fin}), tuple(edges))


def test_a_missing_middle_state_is_refused(monkeypatch):
    """Copy 2 lacks u: the periodic automaton reads `ab` from copy 2's entry to copy 3's, the
    real one does not.  Copies 0-1 and 2-6 as one period are refused (not path-convex) and the
    lift is exact; forcing them accepts `ab` there, and the lift then differs from the direct
    walk (so the convexity check is what keeps it exact)."""
    vocab = TokenVocabulary.from_token_bytes(["a", "b", "c", "ab", "cab", "abab", "\"", "b\"",
                                              None], eos_token_ids=[8], name="tiny-hole")
    nfa = _chain(6, {2})
    _periodic_vs_direct(nfa, vocab, monkeypatch, cut_free=True)
    monkeypatch.setattr(LP, "_crossed_hole", lambda *a: -1)
    ref, _ = _build(nfa, vocab, False)
    vocab._memo.pop("lift_templates", None)
    got, lifted = _build(nfa, vocab, True)
    assert lifted.periodic >= 1
    with pytest.raises((AssertionError, RuntimeError)):  # other edges, or more of them
        _assert_same(got, ref)


@pytest.mark.parametrize("skip", [set(), {5}, {0}, {1, 4}])
def test_chains_with_missing_states(skip, monkeypatch):
    """Every copy whole: periodic (the last copy keeps only its entry state, after every
    labelled state).  Copies without u: exact however they are split (periods that would
    cross a missing u are refused)."""
    vocab = TokenVocabulary.from_token_bytes(["a", "b", "c", "ab", "cab", "abab", "bc", "\"",
                                              "b\"", None], eos_token_ids=[9], name="tiny-whole")
    lifted = _periodic_vs_direct(_chain(6, skip), vocab, monkeypatch, cut_free=True)
    assert lifted.periodic >= 1 or skip


LLAMA_SCHEMAS = [
    {"type": "string", "maxLength": 40},
    {"type": "string", "minLength": 20, "maxLength": 30},
    {"type": "string", "minLength": 24},
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 12},
                                      "b": {"type": "string", "maxLength": 30}},
     "required": ["a"], "additionalProperties": False},
    {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    {"type": "string", "pattern": "^[a-z]*$", "maxLength": 60},
    {"type": "string", "pattern": "^[A-Z][a-z0-9_]*$", "maxLength": 60},
]


@pytest.mark.parametrize("canonical", [True, False])
@pytest.mark.parametrize("i", range(len(LLAMA_SCHEMAS)))
def test_bounded_json_strings_match_the_direct_walk(i, canonical, llama3_vocab, monkeypatch):
    nfa = N.finalize(json_schema_to_nfa(LLAMA_SCHEMAS[i], canonical=canonical))
    lifted = _periodic_vs_direct(nfa, llama3_vocab, monkeypatch, min_periodic=48)
    assert lifted.periodic >= 1


def test_bounds_share_one_body_walk(llama3_vocab):
    """maxLength 60 and 400 walk the body once: the second lift builds only its entry walk,
    and its template keeps a few hundred token rows, however long the chain."""
    def lift(n):
        return L.lift(N.finalize(json_schema_to_nfa({"type": "string", "maxLength": n})),
                      llama3_vocab)

    a = lift(60)
    keys = {k for k in llama3_vocab._memo["lift_templates"] if k[0] == "periodic"}
    b = lift(400)
    assert a.periodic == b.periodic == 1
    assert {k for k in llama3_vocab._memo["lift_templates"] if k[0] == "periodic"} == keys
    assert b.rows.shape[0] < 2000 and np.unique(b.row_id).size <= b.rows.shape[0]
