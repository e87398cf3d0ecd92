"""JSON Schema compiler, compile-time shapes: schemas of JSONSchemaBench that once timed out
(escape tries, overlapping oneOf patterns, universal patterns, one definition behind many
``$ref``s, deferred finalization), the path sampler, ECMA ``\\s``, exact lookaround (split from
``test_json_schema.py``)."""

from __future__ import annotations

import itertools
import json
import random
import warnings

import pytest
from test_json_schema import _agree, _nfa, _samples_valid, _valid
from tractable.fsa import json_schema as JS
from tractable.fsa import nfa as N
from tractable.fsa.json_schema import compile_json_schema, serialize_instance

from tractable.testing.json_schema import PathSampler

# --------------------------------------------------------------------------- compile-time shapes
# Shapes of JSONSchemaBench schemas that timed out (Github_hard/o12278, o12409,
# Github_ultra/o13934): each now compiles fast and still agrees with jsonschema.

_CHARS = ["A", "B", "C", "\"", "\\", "\n", "\x01", "\x7f", "é", "€"]


def _strings(alphabet, max_len):
    for n in range(max_len + 1):
        for t in itertools.product(alphabet, repeat=n):
            yield "".join(t)


def test_escape_subst_tries_are_exact():
    """Escaping a content automaton (special bytes -> tries of their escapes) accepts exactly
    the canonical bodies json.dumps writes for the decoded strings the content accepts, and
    no other spelling (``\\u0022``, raw controls, upper-case hex)."""
    from tractable.fsa.json_schema import _CONTENT, _escape_subst

    contents = {
        "all": _CONTENT,
        "no-quote-first": N.concat(N.codepoints([(0, 0x21), (0x23, N.MAX_CODEPOINT)]),
                                   N.star(N.any_codepoint())),
        "specials": N.star(N.codepoints([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])),
    }
    for name, c in contents.items():
        e = N.finalize(_escape_subst(c))
        for w in _strings(_CHARS, 2):
            body = json.dumps(w, ensure_ascii=False)[1:-1].encode()
            assert N.matches(e, body) == N.matches(c, w.encode()), (name, w)
        for bad in [b"\\u0022", b"\n", b"\x01", b"\\u001F", b"\\/", b"\\"]:
            assert not N.matches(e, bad), (name, bad)


def test_overlapping_oneof_patterns_compile_fast_and_exact():
    """Seven overlapping oneOf patterns (search semantics, Github_hard/o12278's ``state``):
    the products are taken over decoded content and escaped once (was 50 s, now well under
    a second); the language is exactly "matches exactly one pattern"."""
    import time

    pats = ["NEW", "AB", "BC", "CA", "ABC", "B$", "^C"]
    schema = {"type": "string", "oneOf": [{"pattern": p} for p in pats]}
    t0 = time.perf_counter()
    a = _nfa(schema)
    assert time.perf_counter() - t0 < 20  # generous: 0.3 s here, 50 s before
    for w in _strings("ABCN\"", 5):
        assert N.matches(a, json.dumps(w).encode()) == _valid(schema, w), w


def test_universal_patterns_are_left_out():
    """A pattern every string contains (``([A-Z]+)?`` matches the empty string) constrains
    nothing: no product with a long maxLength body (Github_hard/o12409), same automaton."""
    with_pat = {"type": "string", "maxLength": 3, "pattern": "([A-Z]+)?"}
    a = _nfa(with_pat)
    assert a.num_states == _nfa({"type": "string", "maxLength": 3}).num_states
    for w in _strings(["A", "a", "\"", "é"], 4):
        assert N.matches(a, json.dumps(w, ensure_ascii=False).encode()) == _valid(with_pat, w)
    anchored = {"type": "string", "pattern": "^([A-Z]+)?$"}  # not universal: kept
    b = _nfa(anchored)
    assert N.matches(b, b'"AB"') and not N.matches(b, b'"Ab"')


def test_one_definition_many_refs_compiled_once():
    """Many properties ``$ref``-ing one definition (Github_ultra/o13934: 170 x a 230-property
    object) share one compiled value automaton instead of compiling it per property."""
    from tractable.fsa.json_schema import JsonSchemaCompiler

    rec = {"type": "object", "properties": {f"f{i}": {"type": "array", "maxItems": 2,
                                                      "items": {"type": "string"}}
                                           for i in range(6)}}
    schema = {"$schema": "http://json-schema.org/draft-04/schema#",
              "definitions": {"rec": rec, "alias": {"$ref": "#/definitions/rec"}},
              "type": "object",
              "properties": {f"p{i}": {"$ref": "#/definitions/alias" if i % 2 else
                                       "#/definitions/rec"} for i in range(8)}}
    comp = JsonSchemaCompiler(schema)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = comp.build()
    values = {id(comp.compile_items([(schema["properties"][f"p{i}"], f"#/properties/p{i}")]))
              for i in range(8)}
    assert len(values) == 1
    for inst in [{}, {"p0": {"f1": ["x"]}, "p3": {}}, {"p7": {"f5": ["a", "b"]}},
                 {"p1": {"f0": ["a", "b", "c"]}}, {"p2": {"f0": [1]}}]:
        text = serialize_instance(inst, schema)
        assert N.matches(a, text.encode()) == _valid(schema, inst), text


def test_path_sampler_uniform_per_length():
    """PathSampler draws each accepted string of a length with equal probability (chi-square
    against the exact uniform law on a small automaton with unequal branching)."""
    from scipy.stats import chisquare

    a = N.finalize(N.union(N.concat(N.byteset(N.mask_of(b"abc")), N.literal("x")),
                           N.concat(N.literal("d"), N.byteset(N.mask_of(b"xyz01"))),
                           N.literal("ee")))
    words = sorted({bytes([c, 120]) for c in b"abc"} | {bytes([100, c]) for c in b"xyz01"}
                   | {b"ee"})
    s = PathSampler(a, 3)
    assert s.lengths == [2]
    rng = random.Random(1)
    counts = {w: 0 for w in words}
    for _ in range(2700):
        counts[s.sample(rng)] += 1
    assert chisquare(list(counts.values())).pvalue > 1e-4, counts


def test_path_sampler_survives_underflow():
    """A long fixed prefix beside free strings: the prefix's count underflows against the
    layer's largest in linear scaling, so the sampler redoes the counts in log space and
    still knows that length 301 is accepted (the bench's 10^5-state schemas needed it)."""
    a = N.finalize(N.union(N.literal(b"x" * 300 + b"a"),
                           N.concat(N.literal("z" + "q" * 400), N.star(N.any_codepoint()))))
    s = PathSampler(a, 302)
    assert s._log and s.lengths == [301]
    rng = random.Random(0)
    assert s.sample(rng) == b"x" * 300 + b"a"


@pytest.mark.parametrize("lo, hi", [(0, 0), (0, 10**9), (10**9, 10**9)])
def test_deferred_finalization_keeps_the_language(lo, hi, monkeypatch):
    """Leaving parts raw until ``build`` (or finalizing them at their second use) changes sizes
    of intermediate automata only: the finalized result is the same automaton, and strings sampled
    from it validate."""

    schema = {"type": "object", "$defs": {"p": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": 3}, "y": {"enum": ["a", "bc"]},
        "z": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
        "required": ["x"], "additionalProperties": False}},
        "properties": {"a": {"$ref": "#/$defs/p"}, "b": {"$ref": "#/$defs/p"},
                       "c": {"items": {"$ref": "#/$defs/p"}, "type": "array", "maxItems": 2}},
        "additionalProperties": False}
    want = _nfa(schema)
    monkeypatch.setattr(JS._compiler, "MIN_FINALIZE_REUSED", lo)
    monkeypatch.setattr(JS._compiler, "MAX_FINALIZE_REUSED", hi)
    monkeypatch.setattr(JS._cache, "_SHARED", {})
    got = _nfa(schema)
    assert (got.num_states, got.finals, got.edges) == (want.num_states, want.finals, want.edges)
    _samples_valid(schema, n=15, max_len=60)


def test_ecma_space_class_and_ranges_agree():
    """The two spellings of ECMA-262 white space (class text for ``\\s``, ranges for ``\\S``
    inside classes) name the same code points."""
    import re


    cls = re.compile(f"[{JS._ECMA_SPACE}]")
    for cp in range(0x10000):
        want = any(lo <= cp <= hi for lo, hi in JS._ECMA_SPACE_RANGES)
        assert bool(cls.fullmatch(chr(cp))) == want, hex(cp)


@pytest.mark.parametrize("pattern, instances", [
    ("^(?!.*\\.\\.)[a-z.]+$", ["a.b", "a..b", "abc", "..", ".a.", "", "a.b..", "A.b", "x"]),
    ("(?=.*\\d)^(?!-)[a-z0-9-]{1,8}(?<!-)$", ["a1", "ab", "-a1", "a1-", "a-1", "1", "a12345678"]),
])
def test_pattern_lookaround_is_exact(llama3_vocab, llama3_tokenizer, pattern, instances):
    """ECMA-262 lookahead/lookbehind in ``pattern`` is compiled exactly, never ignored."""
    schema = {"type": "string", "pattern": pattern}
    A = compile_json_schema(schema, llama3_vocab)
    for inst in instances:
        ids = llama3_tokenizer.encode(serialize_instance(inst, schema),
                                      add_special_tokens=False).ids
        assert A.accepts(ids) == _valid(schema, inst), (pattern, inst)
    _agree(schema, instances)
