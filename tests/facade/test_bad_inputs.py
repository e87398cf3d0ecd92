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


# ---------------------------------------------------------------- empty languages (issue 23)

EMPTY = [
    ({"type": "number", "minimum": 5, "maximum": 1}, "minimum", "#", "maximum"),
    ({"type": "object", "required": ["x"],
      "properties": {"x": {"type": "integer", "minimum": 5, "maximum": 1}}},
     "minimum", "#/properties/x", "maximum=1"),
    ({"allOf": [{"type": "string"}, {"minLength": 3}, {"type": "integer"}]},
     "allOf", "#", "allOf/0 and allOf/2 have no instance in common"),
    ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
     "$ref", "#/$defs/b/$ref", "cycle #/$defs/a -> #/$defs/b -> #/$defs/a"),
    ({"$ref": "#"}, "$ref", "#/$ref", "no value in between"),
    ({"type": "object", "properties": {"c": {"$ref": "#"}}, "required": ["c"]},
     "$ref", "#/properties/c/$ref", "nest without end"),
    ({"enum": []}, "enum", "#", "enum lists no value"),
    ({"type": "object", "properties": {"a": {"enum": []}}, "required": ["a"]},
     "enum", "#/properties/a", "enum lists no value"),
    ({"type": "string", "enum": [1, 2]}, "enum", "#", "no value of enum"),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"],
      "additionalProperties": False}, "required", "#", "additionalProperties=False"),
    ({"type": "array", "minItems": 3, "maxItems": 2}, "minItems", "#", "maxItems=2"),
    ({"type": "array", "prefixItems": [{}, {"not": {}}], "minItems": 2},
     "not", "#/prefixItems/1", "not={}"),
    (False, "false", "#", "accepts no instance"),
]


@pytest.mark.parametrize("schema,keyword,pointer,why", EMPTY)
def test_empty_schema_names_the_smallest_empty_subschema(gpt2_vocab, schema, keyword, pointer,
                                                         why):
    """Issue 23: EmptyLanguageError said only "accepts no token sequence".  Now it is an
    EmptySchemaError (still an EmptyLanguageError) with the keyword and pointer of the smallest
    empty sub-schema, found before any lifting."""
    from tractable.fsa.errors import EmptyLanguageError, EmptySchemaError

    with pytest.raises(EmptySchemaError) as e:
        compile_json_schema(schema, gpt2_vocab)
    assert isinstance(e.value, EmptyLanguageError)
    assert (e.value.keyword, e.value.pointer) == (keyword, pointer), str(e.value)
    assert why in str(e.value) and pointer in str(e.value)


def test_empty_schema_diagnosis_agrees_with_brute_force():
    """The keywords named are exactly those whose removal gives the node an instance, checked
    against jsonschema on a pool of candidate instances (the brute-force reference)."""
    import jsonschema
    from tractable.fsa.json_schema import JsonSchemaCompiler
    from tractable.fsa.json_schema._empty import explain_empty

    pool = [None, True, 0, 1, 3, 5, 2.5, -7, "", "a", "abcd", [], [1], [1, 2, 3], {},
            {"a": 1}, {"b": 2}]
    for schema, keyword, pointer, _ in EMPTY[:2] + EMPTY[9:11]:
        c = JsonSchemaCompiler(schema)
        c.build()
        kw, ptr, detail = explain_empty(c)
        assert (kw, ptr) == (keyword, pointer)
        node = schema
        for part in ptr.split("/")[1:]:
            node = node[part]
        assert not any(jsonschema.Draft202012Validator(node).is_valid(x) for x in pool)
        named = [k for k in node if f"{k}=" in detail]
        assert kw in named
        for k in node:
            if k == "type":  # named only when nothing else explains the emptiness
                continue
            rest = {x: v for x, v in node.items() if x != k}
            sat = any(jsonschema.Draft202012Validator(rest).is_valid(x) for x in pool)
            assert sat == (k in named), (schema, k, detail)


# ---------------------------------------------------------------- nesting (issue 23)

def _nest(kind: str, n: int):
    s: object = {"type": "integer"}
    for _ in range(n):
        s = {"props": lambda x: {"type": "object", "properties": {"a": x}},
             "items": lambda x: {"type": "array", "items": x},
             "allOf": lambda x: {"allOf": [x]},
             "anyOf": lambda x: {"anyOf": [x, {"type": "null"}]},
             "not": lambda x: {"not": x}}[kind](s)
    return s


TREE = {"type": "object", "properties": {"v": {"type": "integer"}, "c": {"$ref": "#"}}}


@pytest.mark.parametrize("schema,kwargs,keyword", [
    (_nest("props", 500), {}, "properties"),
    (_nest("items", 2000), {}, "items"),
    (_nest("allOf", 2000), {}, "allOf"),
    (_nest("anyOf", 500), {}, "anyOf"),
    (_nest("not", 500), {}, "not"),
    ("[" * 100_000 + "]" * 100_000, {}, "$schema"),
    (TREE, {"max_recursion_depth": 200}, "$ref"),
    ({"$defs": {**{f"d{i}": {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}}
                   for i in range(300)}, "d300": {"type": "integer"}}, "$ref": "#/$defs/d0"},
     {}, "items"),  # deep through a chain of distinct $refs: no recursion to blame
])
def test_deep_schemas_are_typed_errors_within_a_second(schema, kwargs, keyword):
    """Issue 23: RecursionError on schemas nested 500 deep (jsonschema's meta-schema check),
    arrays nested 2,000 deep, max_recursion_depth=200.  Now an iterative depth check
    (MAX_SCHEMA_DEPTH JSON levels) runs before anything recurses, and the compiler counts the
    values it nests (MAX_VALUE_NESTING): UnsupportedSchemaError naming keyword, pointer and
    limit.  Measured 0.1-0.3 s each (the whole process); the bound here allows a loaded
    machine."""
    import time

    from tractable.fsa.errors import UnsupportedSchemaError

    t0 = time.perf_counter()
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_nfa(schema, **kwargs)
    assert time.perf_counter() - t0 < 5
    assert e.value.keyword == keyword and e.value.pointer.startswith("#"), str(e.value)
    assert "MAX_SCHEMA_DEPTH" in str(e.value) or "MAX_VALUE_NESTING" in str(e.value)
    assert ("max_recursion_depth" in str(e.value)) == bool(kwargs)


def test_nesting_below_the_limits_compiles_exactly_from_a_deep_caller():
    """Just under the limits the result is exact (the tree's depth-d instance is accepted, one
    level deeper is not), also when the caller is already 150 frames deep."""
    from tractable.fsa import nfa as N

    def nested(d):
        return '{"v":1' + ',"c":{"v":1' * d + "}" * d + "}"

    def deep_call(n):
        return json_schema_to_nfa(TREE, max_recursion_depth=60) if n == 0 else deep_call(n - 1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = N.finalize(deep_call(150))
    assert N.matches(a, nested(60).encode()) and not N.matches(a, nested(61).encode())
    b = N.finalize(json_schema_to_nfa(_nest("items", 90)))
    assert N.matches(b, ("[" * 90 + "7" + "]" * 90).encode())
    assert not N.matches(b, ("[" * 91 + "7" + "]" * 91).encode())


# ---------------------------------------------------------------- resource limits (issue 23)

@pytest.mark.parametrize("schema,keyword,pointer", [
    ({"type": "array", "minItems": 100_000}, "minItems", "#/minItems"),
    ({"type": "array", "maxItems": 100_000}, "maxItems", "#/maxItems"),
    ({"type": "array", "items": {"type": "integer"}, "prefixItems": [{}] * 100_000},
     "prefixItems", "#/prefixItems"),
    ({"type": "object", "minProperties": 100_000}, "minProperties", "#/minProperties"),
    ({"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(2000)}},
     "properties", "#/properties"),
])
def test_array_and_object_sizes_refused_before_the_work(schema, keyword, pointer):
    """Issue 23: minItems 100000 was reported as 'maxItems' after 0.8 s and 571 MB;
    minProperties 100000 ran out of 6 GB after 14 s; 2,000 optional properties ran out of
    8 GB while lifting (500 took 48 s and 2.8 GB over Llama-3).  Now each is estimated
    before building and refused naming the keyword, its pointer and the estimate."""
    import time

    from tractable.fsa.errors import UnsupportedSchemaError

    t0 = time.perf_counter()
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_nfa(schema)
    assert time.perf_counter() - t0 < 5
    assert (e.value.keyword, e.value.pointer) == (keyword, pointer), str(e.value)
    assert "max_states=2,000,000" in str(e.value) and "needs ~" in str(e.value)


def test_max_states_is_configurable():
    """``max_states`` moves the limit both ways.  It bounds the states built before
    finalization: here 678 of them (the least max_states that compiles) for 322 finalized."""
    from tractable.fsa.errors import InvalidArgumentError, UnsupportedSchemaError

    schema = {"type": "array", "items": {"type": "boolean"}, "maxItems": 40}
    size = json_schema_to_nfa(schema).num_states
    with pytest.raises(UnsupportedSchemaError, match="maxItems 40 needs ~"):
        json_schema_to_nfa(schema, max_states=size // 4)
    assert json_schema_to_nfa(schema, max_states=3 * size).num_states == size
    with pytest.raises(InvalidArgumentError):
        json_schema_to_nfa(schema, max_states=0)


def test_any_order_message_names_estimate_and_way_out():
    from tractable.fsa.errors import UnsupportedSchemaError

    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(40)}}
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_nfa(schema, property_order="any")
    msg = str(e.value)
    assert "2^40" in msg and "1.1e+12" in msg and "MAX_ANY_ORDER_PROPERTIES=8" in msg
    assert "property_order='schema'" in msg


@pytest.mark.parametrize("pattern,position,what", [
    ("a" * 1_000_000, None, "pattern of 1,000,000 characters"),
    ("x" * 1000 + "(abc){300000,}", 1005, "repetition {300000,}"),
    ("(abc){0,300000}", 5, "repetition {0,300000}"),
    ("((a{100}){100}){100}", 3, "needs ~3,020,201 states"),
    (r"\w{0,20000}", 2, "repetition {0,20000}"),
])
def test_regex_sizes_refused_before_the_work(pattern, position, what):
    """Issue 23: a 1 MB regex literal took 9 s and 1.9 GB peak (Llama-3) to compile.  Now the
    parse tree's size is estimated before building (a pattern longer than max_states before
    parsing: re's parser took 7 s over 1 MB) and refused naming position and estimate."""
    import time

    from tractable.fsa.errors import UnsupportedRegexError
    from tractable.fsa.regex import regex_to_nfa

    t0 = time.perf_counter()
    with pytest.raises(UnsupportedRegexError) as e:
        regex_to_nfa(pattern)
    assert time.perf_counter() - t0 < 5
    assert e.value.position == position and what in str(e.value), str(e.value)
    assert "max_states=500,000" in str(e.value) and len(str(e.value)) < 400


def test_regex_estimate_bounds_the_built_automaton():
    """The estimate never refuses what fits: for each pattern the NFA built has at most the
    estimated states, so max_states=<built size> compiles it."""
    from tractable.fsa.regex import _estimate, regex_to_nfa

    try:
        from re import _parser as P
    except ImportError:  # pragma: no cover
        import sre_parse as P
    patterns = ["abc", "a{3,7}", "(ab|cde){2,}", "[a-z]{1,1000}", r"\d{4}-\d{2}", "(?i)ab{2}c",
                "x(y(z{3}){2})?", ".{0,30}", "é{5}", "(a|bc|[^d]){10}", "a*b+c?"]
    for p in patterns:
        est = _estimate(list(P.parse(p, 0)), 0)[0]
        n = regex_to_nfa(p).num_states
        assert n <= est, (p, n, est)
        assert regex_to_nfa(p, max_states=est).num_states == n


def test_regex_messages_are_truncated_around_the_position():
    """Issue 23: regex errors embedded the whole pattern (20 kB messages).  The message shows
    the text around the position; the ``pattern`` attribute keeps all of it."""
    from tractable.fsa.errors import InvalidRegexError, UnsupportedRegexError
    from tractable.fsa.regex import regex_to_nfa

    for pattern, cls, pos in [("a" * 20000 + "(" + "b" * 20000, InvalidRegexError, 20000),
                              ("a" * 20000 + r"\b" + "b" * 20000, UnsupportedRegexError,
                               20000)]:
        with pytest.raises(cls) as e:
            regex_to_nfa(pattern, max_states=10**6)
        msg = str(e.value)
        assert len(msg) < 250 and e.value.pattern == pattern and e.value.position == pos
        assert "a" * 30 + repr(pattern[pos:pos + 3])[1:-1] in msg
        assert f"{len(pattern):,} characters" in msg
    with pytest.raises(InvalidRegexError) as e:
        regex_to_nfa("ab(")
    assert str(e.value).endswith("in regex 'ab('")  # short patterns are shown whole


def test_embedded_id_resources_found_by_fuzzing():
    """Found by tests/fsa/json_schema/test_fuzz_json_schema.py: a sub-schema with its own
    ``$id`` whose
    ``$ref`` points into its own ``$defs``.  serialize_instance picked anyOf branches with
    jsonschema evolved at the root's base (PointerToNowhere); now the enclosing resources are
    entered.  Checking enum/const values under an ``if`` holding such a resource fails inside
    jsonschema itself (its ``if``/``contains`` do not enter embedded resources): a typed
    UnsupportedSchemaError now, not jsonschema's exception."""
    from tractable.fsa import nfa as N
    from tractable.fsa.errors import UnsupportedSchemaError
    from tractable.fsa.json_schema import serialize_instance

    emb = {"$id": "urn:t:1", "$defs": {"d": {"type": "object", "properties": {
        "b": {}, "a": {}}}}, "$ref": "#/$defs/d"}
    schema = {"anyOf": [{"type": "null"}, emb]}
    text = serialize_instance({"a": 1, "b": 2}, schema)
    assert text == '{"b":2,"a":1}'  # the branch's key order: the branch was found valid
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert N.matches(N.finalize(json_schema_to_nfa(schema)), text.encode())
    bad = {"type": "array", "contains": {
        "if": {"$id": "urn:t:2", "$defs": {"d": {"type": "boolean"}}, "$ref": "#/$defs/d"},
        "then": {"const": 1}, "else": {"const": -1.5}}}
    with pytest.raises(UnsupportedSchemaError, match="jsonschema failed"):
        json_schema_to_nfa(bad)


@pytest.mark.parametrize("wrap", [lambda x: [x], lambda x: {"a": x}])
def test_serialize_instance_deep_instances_are_typed_errors(wrap):
    """serialize_instance on an instance nested 3,000 deep raised RecursionError; now an
    InvalidArgumentError naming the pointer at the limit, found without recursion.  100 levels
    (the most any compiled automaton holds) still serialize."""
    from tractable.fsa.errors import InvalidArgumentError
    from tractable.fsa.json_schema import MAX_VALUE_NESTING, serialize_instance

    ok: object = 1
    for _ in range(MAX_VALUE_NESTING):
        ok = wrap(ok)
    text = serialize_instance(ok, {})
    assert json.loads(text) == ok
    deep = ok
    for _ in range(3000 - MAX_VALUE_NESTING):
        deep = wrap(deep)
    with pytest.raises(InvalidArgumentError, match="MAX_VALUE_NESTING") as e:
        serialize_instance(deep, {})
    assert isinstance(e.value, ValueError)
    assert str(e.value).count("/") == MAX_VALUE_NESTING
