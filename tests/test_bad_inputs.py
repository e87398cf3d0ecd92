"""Bad input is a typed ``TractableError`` naming what and where (issue 23, first classes):
documents that are not JSON values (non-finite numbers, non-string keys, other Python types)
and a vocabulary argument of the wrong type."""

from __future__ import annotations

import json
import warnings

import pytest
from tractable.fsa.errors import InvalidSchemaError, TractableError, VocabularyError
from tractable.fsa.grammar import compile_grammar
from tractable.fsa.json_schema import compile_json_schema, json_schema_to_nfa
from tractable.fsa.regex import compile_regex

NOT_JSON = [
    ({"type": "number", "minimum": float("inf")}, "#/minimum", "inf is not a JSON number"),
    ({"type": "number", "maximum": float("nan")}, "#/maximum", "nan is not a JSON number"),
    ({"type": "integer", "multipleOf": float("inf")}, "#/multipleOf", "not a JSON number"),
    ({"exclusiveMinimum": float("-inf")}, "#/exclusiveMinimum", "not a JSON number"),
    ({"enum": [1, float("nan")]}, "#/enum/1", "nan is not a JSON number"),
    ({"const": {"a/b": [float("inf")]}}, "#/const/a~1b/0", "not a JSON number"),
    ({"properties": {1: {}}}, "#/properties", "object key 1 is not a string"),
    ({"default": {1, 2}}, "#/default", "a set is not a JSON value"),
    ('{"minimum": Infinity}', "#/minimum", "inf is not a JSON number"),  # json.loads reads it
]


@pytest.mark.parametrize("schema,pointer,what", NOT_JSON)
def test_documents_that_are_not_json_values(schema, pointer, what):
    with pytest.raises(InvalidSchemaError) as e:
        json_schema_to_nfa(schema)
    assert e.value.pointer == pointer and what in str(e.value)
    assert isinstance(e.value, TractableError) and isinstance(e.value, ValueError)


def test_deep_documents_checked_without_recursion():
    """The JSON-value check walks with an explicit stack: a document nested 5,000 deep is
    checked (here: refused for its Infinity at the bottom) without RecursionError."""
    doc: object = float("inf")
    for _ in range(5000):
        doc = [doc]
    with pytest.raises(InvalidSchemaError, match="not a JSON number") as e:
        json_schema_to_nfa({"const": doc})
    assert e.value.pointer.count("/0") == 5000


@pytest.mark.parametrize("bad", ["notavocab", None, {"size": 3}, 42])
def test_vocabulary_of_the_wrong_type(bad):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for compile_ in (lambda: compile_regex("abc", bad),
                         lambda: compile_json_schema({"type": "boolean"}, bad),
                         lambda: compile_grammar('start: "a"', bad)):
            with pytest.raises(VocabularyError, match="must be a TokenVocabulary"):
                compile_()


def test_valid_documents_pass_the_check():
    schema = {"type": "object", "properties": {"x": {"type": "number", "minimum": -1.5,
                                                     "maximum": 1e300}},
              "examples": [{"x": 0.5}, None, True], "enum": [{"x": 1}, {"x": -1.5}]}
    assert json_schema_to_nfa(json.dumps(schema)).num_states > 0


def test_api_misuse_is_a_tractable_error(gpt2_vocab):
    """Issue 23: misuse (a mode, a batch size, a shape) is an InvalidArgumentError — a
    TractableError and still the ValueError callers catch."""
    import torch
    from tractable.fsa.errors import InvalidArgumentError

    A = compile_regex("[ab]+", gpt2_vocab)
    st = A.start(2)
    cases = [
        lambda: A.allowed(st, 3, mode="xyz"),
        lambda: A.start(-1),
        lambda: A.advance(st, torch.tensor([1, 2, 3])),
        lambda: st.select(torch.zeros((1, 1), dtype=torch.long)),
        lambda: compile_json_schema({"type": "boolean"}, gpt2_vocab, whitespace="tabs"),
    ]
    for call in cases:
        with pytest.raises(InvalidArgumentError) as e:
            call()
        assert isinstance(e.value, TractableError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("schema,keyword", [
    ({"enum": [f"v{i}" for i in range(100_000)]}, "enum"),
    ({"type": "string", "minLength": 1_000_000}, "minLength"),
    ({"type": "string", "maxLength": 1_000_000}, "maxLength"),
])
def test_resource_limits_refuse_before_the_work(schema, keyword):
    """Issue 23: a 100k-value enum (> 110 s before) and minLength 1e6 (MemoryError at 4 GiB
    after 40 s) are refused within a second, naming the keyword and its pointer."""
    from tractable.fsa.errors import UnsupportedSchemaError

    with pytest.raises(UnsupportedSchemaError) as e:  # before the work (0.3 s measured here)
        json_schema_to_nfa(schema)
    assert e.value.keyword == keyword and e.value.pointer.startswith("#")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        json_schema_to_nfa(schema, lenient=True)  # lenient: dropped (recorded), no blow-up
