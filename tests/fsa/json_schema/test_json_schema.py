"""JSON Schema compiler: keyword semantics against the ``jsonschema`` package, sampling, errors."""

from __future__ import annotations

import itertools
import json
import random
import warnings
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest
from tractable.fsa import nfa as N
from tractable.fsa.errors import InvalidSchemaError, UnsupportedSchemaError
from tractable.fsa.json_schema import (
    compile_json_schema,
    json_schema_to_nfa,
    serialize_instance,
)
from tractable.fsa.json_schema.formats import canonical_number, multiple_of, number_range
from tractable.fsa.vocabulary import TokenVocabulary

from tractable.testing.json_schema import PathSampler, check_instance_text


def _nfa(schema, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return N.finalize(json_schema_to_nfa(schema, **kw))


def _valid(schema, inst) -> bool:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(inst)


def _agree(schema, instances, **kw):
    a = _nfa(schema, **kw)
    for inst in instances:
        text = serialize_instance(inst, schema)
        assert N.matches(a, text.encode()) == _valid(schema, inst), (schema, text)
    return a


def _samples_valid(schema, n=40, max_len=40, seed=0, **kw):
    a = _nfa(schema, **kw)
    sampler = PathSampler(a, max_len)
    rng = random.Random(seed)
    for _ in range(n):
        text = sampler.sample(rng)
        why = check_instance_text(text, schema)
        assert why == "", (schema, text, why)


# --------------------------------------------------------------------------- numbers

_NUMS = sorted({canonical_number(Decimal(s) * sgn) for s in
                ["0", "1", "2", "2.5", "3", "0.05", "0.5", "9.99", "10", "10.01", "99", "100",
                 "101", "7", "14", "0.25", "1.75", "12.5"] for sgn in (1, -1)},
               key=Decimal)


@pytest.mark.parametrize("integer", [True, False])
def test_number_range_brute_force(integer):
    bounds = [None, Decimal(0), Decimal("2.5"), Decimal(-3), Decimal(10), Decimal("0.05")]
    for lo, hi in itertools.product(bounds, bounds):
        for ls, us in itertools.product([False, True], repeat=2):
            a = N.finalize(number_range(lo, ls, hi, us, integer))
            for c in _NUMS:
                x = Decimal(c)
                want = "." not in c or not integer
                if lo is not None:
                    want = want and (x > lo if ls else x >= lo)
                if hi is not None:
                    want = want and (x < hi if us else x <= hi)
                assert N.matches(a, c.encode()) == want, (lo, ls, hi, us, c)


@pytest.mark.parametrize("m", ["3", "7", "0.5", "0.25", "1.5", "0.01"])
def test_multiple_of_brute_force(m):
    m = Decimal(m)
    for integer in (True, False):
        a = N.finalize(multiple_of(m, integer))
        for c in _NUMS:
            x = Decimal(c)
            want = (x / m) == int(x / m) and ("." not in c or not integer)
            assert N.matches(a, c.encode()) == want, (m, integer, c)


def test_canonical_numbers():
    assert canonical_number(1.0) == "1"
    assert canonical_number(-0.0) == "0"
    assert canonical_number(1e-05) == "0.00001"
    assert canonical_number(2.50) == "2.5"
    a = _nfa({"type": "number"})
    for bad in ["01", "-0", "1.0", "1e5", "1.", ".5", "+1", "1.50"]:
        assert not N.matches(a, bad.encode()), bad


# --------------------------------------------------------------------------- keywords

CASES = [
    ({"type": "integer", "minimum": -3, "exclusiveMaximum": 12},
     [-4, -3, 0, 11, 12, 5.0, 1.5, "1"]),
    ({"type": "number", "multipleOf": 0.5, "maximum": 3}, [0, 0.5, 1.25, 3, 3.5, -2.5, True]),
    ({"type": "integer", "multipleOf": 3}, [0, 3, -9, 4, 300, 301]),
    ({"type": ["string", "null"], "minLength": 2, "maxLength": 3},
     ["a", "ab", "abc", "abcd", None, "é\"", "\n\t", 3]),
    ({"type": "string", "pattern": "^[a-c]+x?$"}, ["abc", "abx", "abd", "", "x"]),
    ({"type": "string", "pattern": "b\\d"}, ["ab1", "b", "xxb9yy", "bd"]),
    ({"enum": [1, "a", None, [1, 2], {"k": True}]},
     [1, 1.0, "a", None, [1, 2], [2, 1], {"k": True}, {"k": 1}, True, 2]),
    ({"const": {"a": [1, {"b": None}]}}, [{"a": [1, {"b": None}]}, {"a": [1]}]),
    ({"type": "boolean"}, [True, False, 0, None]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
      "required": ["b"], "additionalProperties": False},
     [{"b": "x"}, {"a": 1, "b": "y"}, {"a": 1}, {"b": "x", "c": 1}, {"a": "1", "b": "x"}, {}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "boolean"}},
     [{"a": 1, "z": True}, {"z": 1}, {"a": 1, "q": False, "r": True}]),
    ({"type": "object", "minProperties": 1, "maxProperties": 2,
      "properties": {"a": {"type": "null"}, "b": {"type": "null"}},
      "additionalProperties": {"type": "null"}},
     [{}, {"a": None}, {"a": None, "b": None}, {"a": None, "b": None, "c": None}, {"c": None}]),
    ({"type": "object", "patternProperties": {"^x-": {"type": "integer"}},
      "additionalProperties": False},
     [{"x-a": 1}, {"x-a": "1"}, {"y": 1}, {}]),
    ({"type": "object", "patternProperties": {"^n": {"type": "integer"}},
      "additionalProperties": {"type": "string"}},
     [{"n1": 1}, {"n1": "1"}, {"s": "x"}, {"s": 1}]),
    ({"type": "object", "propertyNames": {"maxLength": 2},
      "additionalProperties": {"type": "integer"}}, [{"ab": 1}, {"abc": 1}, {}]),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
     [[], [1], [1, 2, 3], [1, 2, 3, 4], ["a"]]),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}], "items": False},
     [[], ["a"], ["a", None], ["a", None, 1], [1]]),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5},
      "minContains": 2}, [[5, 6], [5], [1, 5, 2, 9], []]),
    ({"anyOf": [{"type": "integer", "minimum": 10}, {"type": "string", "maxLength": 1}]},
     [10, 9, "a", "ab", None]),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, [1, "a", None, 1.5]),
    ({"allOf": [{"type": "string", "minLength": 2}, {"maxLength": 3}, {"pattern": "^a"}]},
     ["ab", "a", "abcd", "ba"]),
    ({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]},
     [{"a": 1, "b": 2}, {"a": 1}, {"b": 2, "a": 1}]),
    ({"$defs": {"pos": {"type": "integer", "exclusiveMinimum": 0}},
      "type": "array", "items": {"$ref": "#/$defs/pos"}}, [[1, 2], [0], []]),
    ({"type": "string", "format": "date"}, ["2024-02-29", "2023-02-29", "2024-04-31", "24-1-1"]),
    ({"type": "string", "format": "ipv4"}, ["1.2.3.4", "256.1.1.1", "01.1.1.1"]),
    ({"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000", "123"]),
    ({"type": "string", "format": "date-time"}, ["2020-01-01T00:00:00Z", "2020-01-01 00:00"]),
    ({"type": "string", "format": "email"}, ["a@b.co", "ab", "a.b@[127.0.0.1]"]),
]


@pytest.mark.parametrize("schema,instances", CASES, ids=[json.dumps(c[0])[:60] for c in CASES])
def test_keywords_agree_with_jsonschema(schema, instances):
    _agree(schema, instances)


@pytest.mark.parametrize("schema,instances", CASES, ids=[json.dumps(c[0])[:60] for c in CASES])
def test_samples_validate(schema, instances):
    _samples_valid(schema, n=25, max_len=50)


def test_samples_validate_formats():
    for f in ["date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6",
              "uuid", "uri"]:
        _samples_valid({"type": "string", "format": f}, n=30, max_len=45, seed=1)


def test_string_escapes_are_canonical():
    a = _nfa({"type": "string"})
    for s in ['"\\u0001"', '"\\n"', '"\\""', '"é"', '"\x7f"']:
        assert N.matches(a, s.encode()), s
    for s in ['"\\/"', '"\\u00e9"', '"\\u000a"', '"\n"', '"\\U0001"']:
        assert not N.matches(a, s.encode()), s
    # lengths count decoded code points: "\n" is one character
    b = _nfa({"type": "string", "maxLength": 1})
    assert N.matches(b, b'"\\n"') and N.matches(b, '"é"'.encode())
    assert not N.matches(b, b'"ab"')


def test_pattern_applies_to_decoded_content():
    a = _nfa({"type": "string", "pattern": '^a"b$'})
    assert N.matches(a, b'"a\\"b"')
    assert not N.matches(a, b'"a"b"')
    c = _nfa({"type": "string", "pattern": "^x\\ny$"})
    assert N.matches(c, b'"x\\ny"')


def test_ecma_dollar_and_dot():
    a = _nfa({"type": "string", "pattern": "^ab$"})
    assert not N.matches(a, b'"ab\\n"')  # Python's $ would allow a final newline; ECMA does not
    d = _nfa({"type": "string", "pattern": "^.$"})
    assert not N.matches(d, b'"\\r"') and N.matches(d, b'"x"')


@pytest.mark.parametrize("pattern, yes, no", [
    ("^[\\S ]+$", ["a b", "\u00e9 x", "\U0001f600"], ["a\tb", "x\u00a0", "\ufeff", ""]),
    ("^[^\\S\\n]+$", [" ", "\t\u3000", "\u2028"], ["\n", "a", " a"]),
    ("^[\\D.]+$", ["ab.", "x-y", "\u0663"], ["a5", "0"]),
    ("^[^\\D]$", ["7"], ["a", "\u0663"]),
])
def test_negated_escapes_inside_classes(pattern, yes, no):
    """ECMA ``\\S`` and ``\\D`` inside a class (GitHub_medium/o1: ``[\\S]``) are written
    as the complement's code-point ranges: ECMA white space (incl. U+00A0, U+FEFF, U+2028) and
    ASCII digits only (U+0663 ARABIC-INDIC THREE is not ``\\d``)."""
    a = _nfa({"type": "string", "pattern": pattern})
    for x in yes:
        assert N.matches(a, json.dumps(x, ensure_ascii=False).encode()), (pattern, x)
    for x in no:
        assert not N.matches(a, json.dumps(x, ensure_ascii=False).encode()), (pattern, x)


def test_property_order_schema_and_any():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"], "additionalProperties": False}
    s = _nfa(schema)
    assert N.matches(s, b'{"a":1,"b":2}') and not N.matches(s, b'{"b":2,"a":1}')
    a = _nfa(schema, property_order="any")
    assert N.matches(a, b'{"a":1,"b":2}') and N.matches(a, b'{"b":2,"a":1}')
    assert not N.matches(a, b'{"a":1,"a":2}') and not N.matches(a, b'{"a":1}')


def test_any_order_refuses_many_properties():
    schema = {"type": "object", "properties": {f"p{i}": {"type": "null"} for i in range(12)}}
    with pytest.raises(UnsupportedSchemaError) as e:
        _nfa(schema, property_order="any")
    assert e.value.keyword == "properties"


def test_flexible_whitespace_is_bounded():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "null"}}}}
    a = _nfa(schema, whitespace="flexible", max_whitespace=2)
    assert N.matches(a, b'{ "a" :\n[ null , null ] }')
    assert N.matches(a, b'{"a":[null]}')
    assert not N.matches(a, b'{   "a":[]}')  # 3 > max_whitespace


def test_oneof_disjointness():
    ok = {"oneOf": [{"type": "object", "properties": {"k": {"const": "a"}}, "required": ["k"]},
                    {"type": "object", "properties": {"k": {"const": "b"}, "x": {}},
                     "required": ["k"]}]}
    _agree(ok, [{"k": "a"}, {"k": "b", "x": 1}, {"k": "c"}])
    # overlapping branches whose negation is not expressible (patternProperties)
    bad = {"oneOf": [{"type": "object"},
                     {"patternProperties": {"^x": {}}, "additionalProperties": False}]}
    with pytest.raises(UnsupportedSchemaError) as e:
        _nfa(bad)
    assert e.value.keyword == "oneOf" and e.value.pointer == "#/oneOf"
    assert "patternProperties" in e.value.detail
    with pytest.warns(UserWarning, match="SUPERSET"):
        json_schema_to_nfa(bad, lenient=True)


def test_pattern_complement_only_where_keys_outside_the_patterns_are_allowed():
    """Keys matching no pattern need the patterns' complements only when some schema admits
    them: with ``additionalProperties: false`` a pattern whose complement is too large for the
    subset construction (2^13 subsets: the 13th character from the end is ``a``) compiles,
    exactly; with a schema for the other keys it is refused, naming the pattern."""
    pat = "a.{12}$"
    closed = {"type": "object", "patternProperties": {pat: {"type": "integer"}},
              "additionalProperties": False}
    _agree(closed, [{"xa123456789012": 1}, {"xa12345678901": 1}, {"xa123456789012": "1"}, {},
                    {"a123456789012": 2, "bab12345678901": 3}])
    opened = dict(closed, additionalProperties={"type": "string"})
    with pytest.raises(UnsupportedSchemaError) as e:
        _nfa(opened)
    assert e.value.keyword == "patternProperties"
    assert e.value.pointer == f"#/patternProperties/{pat}"
    assert "complement" in e.value.detail


def test_unsupported_pointer_and_lenient():
    schema = {"properties": {"items": {"anyOf": [{"type": "null"}, {"type": "string"},
                                                 {"not": {"multipleOf": 2}}]}}}
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_nfa(schema)
    assert e.value.keyword == "not"
    assert e.value.pointer == "#/properties/items/anyOf/2/not"
    with pytest.warns(UserWarning, match=r"not at #/properties/items/anyOf/2/not"):
        json_schema_to_nfa(schema, lenient=True)


def test_invalid_schema():
    with pytest.raises(InvalidSchemaError) as e:
        json_schema_to_nfa({"type": "object", "properties": {"a": {"type": 5}}})
    assert "properties/a/type" in str(e.value)
    with pytest.raises(InvalidSchemaError):
        json_schema_to_nfa({"minLength": -1})
    with pytest.raises(InvalidSchemaError):
        json_schema_to_nfa({"$ref": "#/$defs/missing"})


_BAD_SCHEMAS = [
    {"type": "strin"}, {"minLength": -1}, {"properties": {"a": {"maxItems": 1.5}}},
    {"$defs": {"x": {"required": "a"}}}, {"items": {"enum": 3}}, {"allOf": []},
    {"dependentSchemas": {"a": {"type": ["string", "string"]}}},
    {"pattern": "(unclosed"}, {"$id": "x#frag"}, {"not": {"multipleOf": 0}},
    {"patternProperties": {"[": {}}}, {"definitions": {"a": {"type": 1}}},
    {"dependencies": {"a": [1]}}, {"prefixItems": [{"minContains": "2"}]},
    {"contentSchema": {"uniqueItems": "yes"}}, {"required": []}, {"enum": []},
    {"items": [{"type": "nul"}]}, {"additionalItems": {"minItems": -2}},
    {"properties": {"a": {"properties": {"b": {"type": ["integer", 3]}}}}},
    {"anyOf": [{}, {"maxProperties": "1"}]}, {"exclusiveMinimum": True},
    {"format": 3}, {"$ref": 3}, {"if": {"const": 1}, "then": {"minimum": "0"}},
]


@pytest.mark.parametrize("draft", ["draft2020-12", "draft7", "draft6", "draft4"])
def test_meta_validator_agrees_with_check_schema(draft):
    """The meta-schema validators (definitions inlined; Draft 2020-12 flattened too) give
    check_schema's verdict and first error on every schema of the Test Suite
    (data/json_schema_test_suite) and on invalid ones at depth (through properties, $defs,
    items, allOf, dependentSchemas, formats of the meta-schema), under each draft; and the
    fast pre-check (_meta_ok) shows valid only schemas check_schema accepts."""
    from tractable.fsa.json_schema import _meta_ok, _meta_validator

    cls = {"draft2020-12": jsonschema.Draft202012Validator, "draft7": jsonschema.Draft7Validator,
           "draft6": jsonschema.Draft6Validator, "draft4": jsonschema.Draft4Validator}[draft]
    suite = Path(__file__).resolve().parents[2] / "data" / "json_schema_test_suite"
    schemas = [g["schema"] for f in sorted(suite.glob("*.json")) if f.name != "LICENSE"
               for g in json.loads(f.read_text())]
    assert len(schemas) > 300
    v = _meta_validator(cls)
    invalid = fast = tested = 0
    for sch in schemas + _BAD_SCHEMAS:
        if isinstance(sch, dict) and "$schema" in sch:  # checked under this draft instead
            sch = {k: x for k, x in sch.items() if k != "$schema"}
        tested += 1
        try:
            cls.check_schema(sch)
            want = None
        except jsonschema.SchemaError as e:
            want = (e.message, list(e.path))
        err = next(v.iter_errors(sch), None)
        assert (None if err is None else (err.message, list(err.path))) == want, sch
        invalid += want is not None
        # the fast pre-check never calls an invalid schema valid, and settles most valid ones
        shown = _meta_ok(v.schema, sch, v.schema, cls)
        assert not (shown and want is not None), sch
        fast += shown
    assert invalid >= 10
    assert fast >= 0.9 * (tested - invalid)


def test_recursion_unrolled_with_warning():
    schema = {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "additionalProperties": False}}, "$ref": "#/$defs/node"}
    with pytest.warns(UserWarning, match="unrolled to depth 2"):
        a = N.finalize(json_schema_to_nfa(schema, max_recursion_depth=2))
    assert N.matches(a, b'{"v":1,"kids":[{"kids":[]}]}')
    assert not N.matches(a, b'{"kids":[{"kids":[{"kids":[]}]}]}')  # deeper than 2: dropped


def test_annotations_ignored_and_unknown_recorded(tiny_vocab):
    schema = {"title": "t", "description": "d", "default": 1, "examples": [1], "x-custom": 3,
              "type": "integer", "minimum": 0, "maximum": 3}
    A = compile_json_schema(schema, tiny_vocab)
    assert A.meta["ignored_keywords"] == ["x-custom"]


@pytest.fixture(scope="module")
def tiny_vocab():
    toks = [chr(c) for c in range(32, 127)] + ['{"', '":', '",', "null", "true", "false", "\\n",
                                               "\\\"", "é"]
    return TokenVocabulary.from_token_bytes(toks, name="tiny")


def test_token_level_tiny_vocab(tiny_vocab):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                     "maximum": 20}},
              "required": ["n"], "additionalProperties": False}
    A = compile_json_schema(schema, tiny_vocab)
    tb = tiny_vocab.token_bytes
    index = {t: i for i, t in enumerate(tb)}

    def ids(s):
        return [index[bytes([b])] for b in s.encode()]

    assert A.accepts(ids('{"n":7}'))
    assert A.accepts([index[b'{"'], *ids("n"), index[b'":'], *ids("20}")])
    assert not A.accepts(ids('{"n":21}'))
    assert not A.accepts(ids('{"n":7'))


def test_token_level_llama3(llama3_vocab, llama3_tokenizer):
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20},
        "date": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
        "required": ["name", "date"], "additionalProperties": False}
    A = compile_json_schema(schema, llama3_vocab)
    good = {"name": "Zoë \"Z\"", "date": "2024-02-29", "tags": ["a", "b"]}
    text = serialize_instance(good, schema)
    ids = llama3_tokenizer.encode(text, add_special_tokens=False).ids
    assert A.accepts(ids)
    for bad in [{"name": "x", "date": "2023-02-29"}, {"name": "x" * 21, "date": "2024-01-01"},
                {"name": "x", "date": "2024-01-01", "tags": ["c"]}]:
        ids = llama3_tokenizer.encode(serialize_instance(bad, schema),
                                      add_special_tokens=False).ids
        assert not A.accepts(ids)


# Declared names with ASCII, special (escaped) and multi-byte characters: the additional-key
# automaton deviates from the trie of names through a shared body copy (ASCII children) or a
# per-node deviation automaton (escaped or multi-byte children); both must exclude exactly the
# declared names.
_NAMES = ["ab", "abc", "a\"b", "a\\b", "a\nb", "a\x01", "é", "éa", "日本", "x", "a\x7f"]


def test_additional_keys_exclude_exactly_the_declared_names():
    schema = {"type": "object", "properties": {k: {"type": "string"} for k in _NAMES},
              "additionalProperties": {"type": "integer"}}
    keys = set(_NAMES)
    for k in _NAMES:
        keys |= {k[:-1], k + "a", k + "\"", k + "é", "z" + k, k[:-1] + "\\", k[:-1] + "\t"}
        keys |= {k[:i] + c + k[i + 1:] for i in range(len(k)) for c in "a\"\\\né本\x7f"}
    _agree(schema, [{k: 1} for k in sorted(keys)] + [{k: "s"} for k in sorted(keys)])


def test_array_loop_shares_one_element_copy():
    """An unbounded array of objects holds one copy of the element automaton (the first
    element and the loop share it), so nesting arrays does not double the size."""
    obj = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "number"}},
           "required": ["a"], "additionalProperties": False}
    one = _nfa(obj).num_states
    arr = _agree({"type": "array", "items": obj},
                 [[], [{"a": "x"}], [{"a": "x"}, {"a": "y", "b": 1}], [{"b": 1}], [1]])
    assert arr.num_states <= one + 8


def test_strict_drops_unlisted_properties_and_items():
    obj = {"type": "object", "properties": {"a": {"type": "integer"}},
           "patternProperties": {"^x": {"type": "boolean"}}}
    arr = {"type": "array", "prefixItems": [{"type": "integer"}]}
    free = {"type": "object"}  # lists nothing: strict leaves it open (as xgrammar does)
    cases = [
        (obj, b'{"a":1}', True, True), (obj, b'{"a":1,"b":2}', True, False),
        (obj, b'{"a":1,"xy":true}', True, True), (obj, b'{"a":1,"xy":1}', False, False),
        (arr, b"[1]", True, True), (arr, b'[1,"s"]', True, False),
        (free, b'{"b":2}', True, True),
    ]
    for schema, text, default_ok, strict_ok in cases:
        assert N.matches(_nfa(schema), text) == default_ok, (schema, text)
        assert N.matches(_nfa(schema, strict=True), text) == strict_ok, (schema, text)
    with pytest.warns(UserWarning, match="strict=True"):
        json_schema_to_nfa(obj, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        json_schema_to_nfa({"type": "object", "properties": {"a": {"type": "integer"}},
                            "additionalProperties": False}, strict=True)
    # strict is a subset: every sample validates against the schema
    _samples_valid(obj, strict=True)
    _samples_valid(arr, strict=True)


# --------------------------------------------------------------------------- not, dependencies,
# overlapping oneOf (exact rewrites: negation by De Morgan, dependencies as a disjoint union,
# oneOf as the union of B_i and not B_j)

D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"

NOT_CASES = [
    ({"not": {"type": "object"}}, [1, 1.5, "a", None, {}, {"a": 1}, [], True]),
    ({"not": {"type": "integer"}}, [1, 1.5, -0.25, "a", None, {}, [], True]),
    ({"type": "number", "minimum": -100, "maximum": 100, "not": {"type": "integer"}},
     [1, 1.5, -0.25, "a", 3.0]),
    ({"type": "string", "not": {"enum": ["logs", "x"]}}, ["logs", "x", "log", "logsx", "", 1]),
    ({"not": {"enum": [1, "a", None, True, [1, 2]]}},
     [1, 1.0, 2, "a", "b", None, True, False, [1, 2], [1], [2, 1], {}]),
    ({"not": {"const": 2.5}}, [2.5, 2, 3, "2.5"]),
    ({"items": {"not": {"enum": ["logs"]}}}, [[], ["logs"], ["a", "logs"], ["a"]]),
    ({"not": {"required": ["a"]}}, [{}, {"a": 1}, {"b": 1}, 1, "x"]),
    ({"type": "object", "properties": {"a": {"not": {}}, "b": {"type": "integer"}}},
     [{}, {"a": 1}, {"b": 1}, {"c": 1}]),
    ({"not": {"anyOf": [{"required": ["a", "b"]}, {"required": ["a", "c"]}]}},
     [{}, {"a": 1}, {"a": 1, "b": 1}, {"a": 1, "c": 2}, {"b": 1, "c": 1}, 3]),
    ({"type": "object", "not": {"allOf": [{"required": ["site"]}, {"required": ["app"]}]}},
     [{}, {"site": 1}, {"app": 1}, {"site": 1, "app": 2}]),
    ({"type": "string", "not": {"pattern": "ghlint|plugin"}},
     ["abc", "ghlint", "xpluginx", "plugi", "é\"ghlin"]),
    ({"type": "string", "not": {"pattern": "^[a-c]+$"}, "maxLength": 3}, ["", "ab", "abd", "d"]),
    ({"not": {"properties": {"f": {"maxItems": 0}, "g": {"maxItems": 0}}}},
     [{}, {"f": []}, {"f": [1]}, {"g": [1], "f": []}, {"f": 1}, 5]),
    ({"not": {"minimum": 3}}, [2, 3, 2.5, "a", 4]),
    ({"not": {"exclusiveMaximum": 3, "type": "integer"}}, [2, 3, 2.5, "a", 4]),
    ({"$schema": D4, "not": {"maximum": 3, "exclusiveMaximum": True}}, [2, 3, 2.5, "a", 4]),
    ({"$schema": D4, "not": {"minimum": 3}}, [2, 3, 2.5, "a", 4]),
    ({"not": {"minLength": 2, "maxLength": 3}}, ["", "a", "ab", "abc", "abcd", 1]),
    ({"not": {"items": {"type": "integer"}}}, [[], [1], [1, "a"], ["a"], 1]),
    ({"not": {"contains": {"type": "integer"}}}, [[], [1], [1, "a"], ["a"], 1]),
    ({"not": {"minItems": 1, "maxItems": 2}}, [[], [1], [1, 2], [1, 2, 3], "x"]),
    ({"not": {"not": {"type": "integer"}}}, [1, "a", 1.5]),
    ({"not": {"minProperties": 1}}, [{}, {"a": 1}, 1]),
    ({"properties": {"a": {}, "b": {}, "c": {}}, "additionalProperties": False,
      "not": {"maxProperties": 1}}, [{}, {"a": 1}, {"a": 1, "b": 2}, 1]),
    ({"not": {"properties": {"a": {}}, "additionalProperties": {"type": "integer"}}},
     [{}, {"a": "x"}, {"b": 1}, {"b": "s"}, {"a": 1, "b": "s"}, 3]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {}},
      "not": {"properties": {"a": {}}, "additionalProperties": False}},
     [{}, {"a": 1}, {"b": 1}, {"a": 1, "c": 2}, {"c": 1}, {"a": 1, "b": 2}]),
    ({"$defs": {"s": {"type": "string"}}, "not": {"$ref": "#/$defs/s"}}, ["a", 1, None]),
    ({"not": False}, [1, "a", None]),
]

DEP_CASES = [
    ({"$schema": D7, "type": "object", "properties": {"a": {"type": "integer"},
                                                      "b": {"type": "integer"}},
      "dependencies": {"a": ["b"]}}, [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {"c": 1, "a": 1}]),
    # a dependency on an undeclared (additional) property
    ({"$schema": D7, "type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": {"type": "integer"}, "dependencies": {"a": ["zz"]}},
     [{}, {"a": 1}, {"zz": 1}, {"a": 1, "zz": 2}, {"c": 1, "a": 1, "zz": 3}, {"a": 1, "zz": "s"}]),
    ({"$schema": D7, "properties": {"a": {}}, "additionalProperties": False,
      "dependencies": {"a": ["zz"]}}, [{}, {"a": 1}, {"zz": 1}, 3]),
    ({"type": "object", "dependentRequired": {"a": ["b", "c"], "b": ["a"]}},
     [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2, "c": 3}, {"a": 1, "c": 3}, {"c": 1}]),
    ({"dependentRequired": {"a": ["b"]}}, [1, "x", {"a": 1}, {"a": 1, "b": 1}]),
    ({"type": "object", "properties": {"a": {}, "b": {"type": "integer"}},
      "dependentSchemas": {"a": {"properties": {"b": {"minimum": 3}}, "required": ["b"]}}},
     [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 3}, {"b": 3}]),
    ({"$schema": D7, "type": "object", "dependencies": {"x": {"not": {"required": ["y"]}},
                                                       "y": False}},
     [{}, {"x": 1}, {"y": 1}, {"x": 1, "y": 2}, {"z": 1}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "dependentSchemas": {"a": {"maxProperties": 1}}},
     [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 1, "c": 2}]),
]

ONEOF_CASES = [
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 2, 3, 2.5, 1.5, "a"]),
    ({"$schema": D4, "type": "object", "oneOf": [
        {"type": "object", "required": ["id", "win"],
         "properties": {"id": {"type": "string"}, "handleWinResponse": {"type": "object"}}},
        {"type": "object", "required": ["id", "lose"],
         "properties": {"id": {"type": "string"}, "lose": {"type": "object"}}}]},
     [{"id": "a", "win": 1}, {"id": "a", "lose": {}}, {"id": "a", "win": 1, "lose": {}},
      {"id": "a", "win": 1, "lose": 2}, {"id": 1, "win": 1}, {}]),
    ({"type": "object", "oneOf": [
        {"additionalProperties": False, "properties": {"next": {"type": "string"}}},
        {"additionalProperties": False, "properties": {"previous": {"type": "string"}}}]},
     [{}, {"next": "a"}, {"previous": "b"}, {"next": "a", "previous": "b"}, {"x": 1},
      {"next": 1}]),
    ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}, {"maxProperties": 1}]},
     [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 1}, {"a": 1, "c": 1}, {"c": 1, "d": 1}, 5]),
    ({"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "maxLength": 2}]},
     ["a", "ab", "abc", "b", "bcd", 1]),
    # by type: closed objects told apart by a key one requires and the other cannot have; no
    # `type`, so both accept every non-object, which the oneOf then rejects
    ({"oneOf": [
        {"properties": {"locks": {"type": "array", "items": {
            "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}},
            "next": {"type": "string"}}, "additionalProperties": False, "required": ["locks"]},
        {"properties": {"locks": {"type": "null"}, "error": {"type": "string"}},
         "additionalProperties": False, "required": ["error"]}]},
     [{"locks": []}, {"error": "x"}, {"locks": None, "error": "x"}, {"locks": [], "error": "x"},
      {"locks": [{"id": "a"}], "next": "n"}, {"locks": [{}]}, {}, 5, "s", None, [1], True]),
    ({"oneOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"],
                 "additionalProperties": False},
                {"properties": {"b": {}}, "required": ["b"], "additionalProperties": False},
                {"type": "string"}]},
     [{"a": 1}, {"b": "x"}, {"a": 1, "b": 2}, {}, {"a": "x"}, "s", "", 1, None, [], [{}]]),
    # disjoint: a required key whose values the other branch declares (not required) apart
    ({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a{"}},
                 "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"const": "b"},
                                                  "x": {"type": "integer"}}, "required": ["x"]}]},
     [{"kind": "a{"}, {"x": 1}, {"kind": "a{", "x": 1}, {"kind": "b", "x": 1}, {"kind": "b"},
      {"kind": "a{", "x": 1, "y": 2}, {}]),
    # one branch accepts every number, the other some: numbers stay (those below 5)
    ({"oneOf": [{"properties": {"a": {}}, "required": ["a"], "additionalProperties": False},
                {"minimum": 5, "properties": {"b": {}}, "required": ["b"],
                 "additionalProperties": False}]},
     [3, 7, 4.5, {"a": 1}, {"b": 1}, {"a": 1, "b": 1}, "s", None]),
]


IF_CASES = [
    ({"if": {"properties": {"kind": {"const": "n"}}, "required": ["kind"]},
      "then": {"properties": {"v": {"type": "integer"}}},
      "else": {"properties": {"v": {"type": "string"}}}},
     [{"kind": "n", "v": 1}, {"kind": "n", "v": "a"}, {"kind": "s", "v": "a"}, {"v": 1},
      {"v": "a"}, {}, 3, "x"]),
    ({"type": "integer", "if": {"minimum": 10}, "then": {"multipleOf": 5}},
     [5, 10, 12, 15, 3, "a"]),
    ({"type": "string", "if": {"maxLength": 2}, "else": {"pattern": "^a"}},
     ["", "b", "bc", "bcd", "abc", 1]),
    ({"type": "array", "items": {"type": "integer"}, "if": {"contains": {"const": 0}},
      "then": {"maxItems": 2}}, [[], [0], [0, 1], [0, 1, 2], [1, 2, 3], [1, "a"]]),
]


@pytest.mark.parametrize("schema,instances", NOT_CASES + DEP_CASES + ONEOF_CASES + IF_CASES,
                         ids=[json.dumps(c[0])[:60]
                              for c in NOT_CASES + DEP_CASES + ONEOF_CASES + IF_CASES])
@pytest.mark.parametrize("order", ["schema", "any"])
def test_not_dependencies_oneof_agree_and_sample(schema, instances, order):
    _agree(schema, instances, property_order=order)
    _samples_valid(schema, n=20, max_len=30, property_order=order)


def test_if_without_exact_negation_is_refused_and_old_drafts_ignore_it():
    schema = {"if": {"format": "date"}, "then": {"type": "string"}}
    with pytest.raises(UnsupportedSchemaError) as e:
        _nfa(schema)
    assert e.value.keyword == "if" and e.value.pointer == "#/if"
    assert "format" in e.value.detail
    # before draft 7 "if" is no keyword: every instance passes
    _agree({"$schema": D4, "type": "integer", "if": {"minimum": 3}, "then": False}, [1, 5])


def test_not_forms_without_exact_negation_are_refused():
    for schema, detail in [
        ({"not": {"multipleOf": 2}}, "multipleOf"),
        ({"not": {"format": "date"}}, "format"),
        ({"not": {"uniqueItems": True}}, "uniqueItems"),
        ({"not": {"enum": [{"a": 1}]}}, "objects"),
        ({"$defs": {"t": {"properties": {"k": {"$ref": "#/$defs/t"}}}},
          "not": {"$ref": "#/$defs/t"}}, "recursive"),
        ({"not": {"patternProperties": {"^x": {}}}}, "patternProperties"),
    ]:
        with pytest.raises(UnsupportedSchemaError) as e:
            _nfa(schema)
        assert e.value.keyword == "not" and detail in e.value.detail, (schema, e.value)
        assert e.value.pointer.startswith("#/not"), e.value.pointer
    with pytest.warns(UserWarning, match="SUPERSET"):
        json_schema_to_nfa({"not": {"multipleOf": 2}}, lenient=True)
    assert not _nfa({"type": "object", "not": True}).finals  # not true: nothing

def test_negation_nodes_are_not_closed_by_strict():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}},
              "additionalProperties": True, "not": {"required": ["b"]},
              "dependentRequired": {"a": ["c"]}}
    a = _nfa(schema, strict=True)
    assert N.matches(a, b'{"a":1,"c":2}') and N.matches(a, b'{"d":1}')
    assert not N.matches(a, b'{"a":1}') and not N.matches(a, b'{"b":1}')


def test_dependencies_in_2020_schema_enforced():
    """``dependencies`` left Draft 2019-09; an undrafted schema that uses it means it (it is
    enforced: the automaton accepts the Draft 7 reading, a subset of the 2020-12 one)."""
    a = _nfa({"type": "object", "dependencies": {"a": ["b"]}})
    assert N.matches(a, b'{"a":1,"b":2}') and not N.matches(a, b'{"a":1}')


def test_no_new_keywords_no_new_states():
    """Schemas without the new keywords build the same automaton as before (no witness or
    presence states): an object with optional properties and free extras stays small."""
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in "abcdef"},
              "additionalProperties": {"type": "boolean"}}
    assert _nfa(schema).num_states <= 87  # 87 before not/dependencies/oneOf rewrites existed
