"""Memoized lifting (components, templates, entry walks) equals the direct trie walk.

The direct walk (``lift._USE_COMPONENTS = False``) is itself checked against brute force in
test_automaton.py; here every automaton built through component templates and entry walks must
have the same states, edges, final states and token set on every edge.  Cases: random byte
NFAs over a tiny vocabulary (where multi-byte masks form loops and single-byte edges cut them),
and JSON Schemas over Llama-3 covering string contents with escapes, arrays of strings, keys
that must differ from the listed names (additional properties), patterns, numbers and formats.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from test_nfa import nfas
from tractable.fsa import lift as L
from tractable.fsa import nfa as N
from tractable.fsa.automaton import TokenAutomaton
from tractable.fsa.errors import EmptyLanguageError
from tractable.fsa.json_schema import json_schema_to_nfa
from tractable.fsa.vocabulary import TokenVocabulary

TINY = ["a", "b", "c", "ab", "bc", "abc", "ca", "a", b"\xc3", None, None, b"\xa9", "é", "cc",
        "x", "xa", "\"", "a\"", "\"b"]


def _build(nfa: N.ByteNFA, vocab: TokenVocabulary, components: bool):
    old = L._USE_COMPONENTS
    L._USE_COMPONENTS = components
    try:
        lifted = L.lift(nfa, vocab)
        return TokenAutomaton._from_lifted(lifted, vocab, {}), lifted
    finally:
        L._USE_COMPONENTS = old


def _assert_same(A: TokenAutomaton, B: TokenAutomaton) -> None:
    assert A.num_states == B.num_states
    assert bool((A.edge_src == B.edge_src).all()) and bool((A.edge_dst == B.edge_dst).all())
    assert bool((A.final == B.final).all())
    la = A.labels.numpy()[A.edge_label.numpy()]
    lb = B.labels.numpy()[B.edge_label.numpy()]
    assert np.array_equal(la, lb)
    # labels stay exactly deduplicated
    assert len({r.tobytes() for r in A.labels.numpy()}) == A.num_labels


def _compare(nfa: N.ByteNFA, vocab: TokenVocabulary):
    try:
        ref, _ = _build(nfa, vocab, False)
    except EmptyLanguageError:
        with pytest.raises(EmptyLanguageError):
            _build(nfa, vocab, True)
        return None
    got, lifted = _build(nfa, vocab, True)
    _assert_same(got, ref)
    return lifted


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nfas)
def test_random_nfas_match_the_direct_walk(case):
    vocab = TokenVocabulary.from_token_bytes(TINY, eos_token_ids=[9], name="tiny-lift")
    nfa, _ = case
    # wrap in quotes so that single-byte edges cut loops into components, as in JSON
    _compare(N.concat(N.literal('"'), nfa, N.literal('"'), N.star(nfa)), vocab)


SCHEMAS = [
    {"type": "string"},
    {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    {"type": "object", "properties": {"name": {"type": "string"}, "note": {"type": "string"},
                                      "n": {"type": "integer"}},
     "required": ["name"]},  # additional properties allowed: keys other than the names
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "ab"},
                                      "when": {"type": "string", "format": "date-time"},
                                      "x": {"type": "number"}},
     "additionalProperties": False},
    {"type": "object", "patternProperties": {"^k[0-9]+$": {"type": "string"}},
     "additionalProperties": False, "maxProperties": 3},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"enum": ["x", "y\"z"]}},
                                      "s": {"type": "string", "maxLength": 3}}},
]


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_json_schemas_match_the_direct_walk(i, llama3_vocab):
    nfa = N.finalize(json_schema_to_nfa(SCHEMAS[i]))
    lifted = _compare(nfa, llama3_vocab)
    assert lifted is not None and lifted.components >= 1


def test_templates_are_reused_across_compiles(llama3_vocab):
    a = N.finalize(json_schema_to_nfa({"type": "object", "properties": {
        "p": {"type": "string"}, "q": {"type": "string"}}, "additionalProperties": False}))
    b = N.finalize(json_schema_to_nfa({"type": "object", "properties": {
        "zz": {"type": "string"}, "w": {"type": "string"}}, "additionalProperties": False}))
    _compare(a, llama3_vocab)
    lifted = _compare(b, llama3_vocab)
    assert lifted.components >= 2 and lifted.templates_built == 0
