"""Partial determinization (``fsa/nfa_subsets.py``) against brute force: the language of random
NFAs over a small alphabet, every string up to length 6, is unchanged; at most one edge of the
mask leaves each state; the JSON whitespace gaps that meet share one loop."""

from __future__ import annotations

import itertools
import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tractable.fsa import nfa as N
from tractable.fsa.json_schema import json_schema_to_nfa
from tractable.fsa.nfa_subsets import merge_parallel

ALPHA = b" ab"
WS = N.mask_of(b" \n")
MASKS = [WS, N.mask_of(b"a"), N.mask_of(b"b"), N.mask_of(b" a"), N.mask_of(b"ab")]


@st.composite
def nfas(draw):
    n = draw(st.integers(1, 7))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(MASKS),
                                    st.integers(0, n - 1)), max_size=20))
    finals = draw(st.frozensets(st.integers(0, n - 1), min_size=1))
    return N.ByteNFA(n, 0, finals, tuple(edges))


def _language(a: N.ByteNFA, k: int = 6) -> set[bytes]:
    return {bytes(w) for n in range(k + 1) for w in itertools.product(ALPHA, repeat=n)
            if N.matches(a, bytes(w))}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nfas())
def test_same_language_and_one_mask_edge_per_state(a):
    b = merge_parallel(a, WS)
    assert _language(b) == _language(a)
    seen = set()
    for s, m, _ in b.edges:
        if m == WS:
            assert s not in seen
            seen.add(s)


def test_json_gaps_share_one_whitespace_loop():
    """``[true , true ]``: after an item one space leaves the automaton in one state (before:
    the gap of ``ws ","`` and the gap of ``ws "]"``, two loops)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = json_schema_to_nfa({"type": "array", "items": {"type": "boolean"}},
                               whitespace="any")
    ws = N.mask_of(b" \t\n\r")
    per_state: dict[int, int] = {}
    for s, m, _ in a.edges:
        if m & ws:
            assert m == ws
            per_state[s] = per_state.get(s, 0) + 1
    assert per_state and max(per_state.values()) == 1
    for text in [b"[]", b"[ ]", b" [ true ,\n\tfalse ] ", b"[true,false]"]:
        assert N.matches(a, text)
    for text in [b"[ , ]", b"[true,]", b"[true false]"]:
        assert not N.matches(a, text)


def test_bounded_subsets():
    """``max_new`` bounds the subset states; past it the input comes back unchanged."""
    n = 6
    edges = tuple((0, WS, d) for d in range(1, n)) + tuple(
        (d, WS, (d % (n - 1)) + 1) for d in range(1, n)) + tuple(
        (d, N.mask_of(b"a"), d) for d in range(1, n))
    a = N.finalize(N.ByteNFA(n, 0, frozenset({n - 1}), edges))
    assert merge_parallel(a, WS, max_new=0) is a
    b = merge_parallel(a, WS)
    assert _language(b) == _language(a)
