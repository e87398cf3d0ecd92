"""JSON Schema compiler inputs: ``$ref`` across documents (``registry=``), pydantic models, free
values and their depth, and the start-up cost of the first compile (split from
``test_json_schema.py``)."""

from __future__ import annotations

import json
import warnings

import jsonschema
import pytest
from test_json_schema import _nfa
from tractable.fsa import nfa as N
from tractable.fsa.errors import InvalidSchemaError, UnsupportedSchemaError
from tractable.fsa.json_schema import (
    compile_json_schema,
    json_schema_to_nfa,
    serialize_instance,
)

# --------------------------------------------------------------------------- $ref across documents

_DEFS_DOC = {"$id": "https://example.com/schemas/defs.json", "$defs": {
    "pos": {"type": "integer", "minimum": 0, "maximum": 9},
    "tag": {"$anchor": "tag", "enum": ["x", "y"]}}}
_REMOTE_ROOT = {"$id": "https://example.com/schemas/root.json", "type": "object", "properties": {
    "a": {"$ref": "defs.json#/$defs/pos"},  # relative to the root's $id
    "b": {"$ref": "https://example.com/schemas/defs.json#tag"}},  # absolute, to an anchor
    "required": ["a"], "additionalProperties": False}


def _remote_registry(kind):
    docs = {"https://example.com/schemas/defs.json": _DEFS_DOC}
    if kind == "dict":
        return docs
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    return Registry().with_resources((u, DRAFT202012.create_resource(d))
                                     for u, d in docs.items())


@pytest.mark.parametrize("kind", ["dict", "referencing"])
def test_registry_resolves_remote_refs(kind):
    a = _nfa(_REMOTE_ROOT, registry=_remote_registry(kind))
    for text, ok in [('{"a":3}', True), ('{"a":9,"b":"y"}', True), ('{"a":10}', False),
                     ('{"a":3,"b":"z"}', False), ('{"b":"x"}', False)]:
        assert N.matches(a, text.encode()) == ok, text


def test_relative_refs_against_nested_ids():
    """A ``$ref`` resolves against the nearest enclosing ``$id``: ``#/$defs/d`` inside the
    resource ``item.json`` is that resource's ``$defs``, not the root's; ``item.json`` and
    ``common.json`` resolve against the root's base URI (the second from the registry)."""
    schema = {"$id": "https://example.com/s/root.json", "type": "object", "properties": {
        "i": {"$ref": "item.json"}, "c": {"$ref": "common.json#/$defs/small"}},
        "$defs": {"d": {"type": "string"}, "item": {
            "$id": "item.json", "$ref": "#/$defs/d", "$defs": {"d": {"type": "boolean"}}}},
        "additionalProperties": False}
    reg = {"https://example.com/s/common.json": {"$defs": {"small": {"maximum": 2,
                                                                     "type": "integer"}}}}
    a = _nfa(schema, registry=reg)
    assert N.matches(a, b'{"i":true,"c":2}')
    assert not N.matches(a, b'{"i":"s"}')  # the root's #/$defs/d is not the one meant
    assert not N.matches(a, b'{"c":3}')


def test_draft4_ignores_dollar_id_and_later_drafts_ignore_id():
    """Draft 4 names resources by ``id``; a ``$id`` there is an unknown keyword and does not
    move the base URI (``jsonschema``'s Draft4Validator agrees); from draft 6 on it is the
    other way round."""
    d4 = "http://json-schema.org/draft-04/schema#"
    d7 = "http://json-schema.org/draft-07/schema#"
    for draft, ignored, used in ((d4, "$id", "id"), (d7, "id", "$id")):
        inner = {"type": "object", "properties": {"y": {"$ref": "#/definitions/a"}}}
        ok = {"$schema": draft, "definitions": {"a": {"type": "string"}}, "type": "object",
              "properties": {"x": dict(inner, **{ignored: "/x"})}}
        a = _nfa(ok)
        for inst, want in (({"x": {"y": "s"}}, True), ({"x": {"y": 1}}, False)):
            assert N.matches(a, json.dumps(inst, separators=(",", ":")).encode()) is want
            assert jsonschema.validators.validator_for(ok)(ok).is_valid(inst) is want
        moved = dict(ok, properties={"x": dict(inner, **{used: "/x"})})
        with pytest.raises(InvalidSchemaError, match="does not resolve"):
            _nfa(moved)


def test_draft3_is_refused_not_read_as_draft4():
    # draft-03's required: true (in the property schema) means nothing in draft 4: compiled
    # as draft 4, {} would be accepted although Draft3Validator rejects it
    d3 = {"$schema": "http://json-schema.org/draft-03/schema#", "type": "object",
          "properties": {"a": {"type": "integer", "required": True}}}
    assert not jsonschema.Draft3Validator(d3).is_valid({})
    with pytest.raises(UnsupportedSchemaError, match="draft-03") as e:
        _nfa(d3)
    assert (e.value.keyword, e.value.pointer) == ("$schema", "#/$schema")
    # draft-03 type lists may hold schemas: the meta-schema check used to crash on them
    with pytest.raises(UnsupportedSchemaError, match="draft-03"):
        _nfa({"$schema": d3["$schema"], "items": {"type": ["integer", {"type": "string"}]}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        json_schema_to_nfa(d3, lenient=True)  # asked for: a superset, with a warning
    assert any("draft-03" in str(w.message) for w in caught)


def test_remote_recursive_ref_is_unrolled():
    tree = {"type": "object", "properties": {"v": {"type": "integer"},
                                             "kids": {"type": "array", "items": {"$ref": "#"}}},
            "additionalProperties": False}
    reg = {"https://example.com/tree.json": tree}
    with pytest.warns(UserWarning, match=r"unrolled to depth 2 at https://example\.com/tree"):
        a = N.finalize(json_schema_to_nfa({"$ref": "https://example.com/tree.json"},
                                          registry=reg, max_recursion_depth=2))
    assert N.matches(a, b'{"v":1,"kids":[{"kids":[]}]}')
    assert not N.matches(a, b'{"kids":[{"kids":[{"kids":[]}]}]}')  # deeper than 2: dropped


def test_missing_document_is_a_typed_error_naming_uri_and_pointer():
    from tractable.fsa.errors import UnresolvedReferenceError

    schema = {"$id": "https://example.com/schemas/root.json",
              "properties": {"a": {"$ref": "other.json#/$defs/x"}}}
    for reg in (None, {"https://example.com/schemas/defs.json": _DEFS_DOC}):
        with pytest.raises(UnresolvedReferenceError) as e:
            json_schema_to_nfa(schema, registry=reg)
        assert e.value.uri == "https://example.com/schemas/other.json"
        assert e.value.pointer == "#/properties/a/$ref"
        assert "https://example.com/schemas/other.json" in str(e.value)
        assert "#/properties/a/$ref" in str(e.value)
        assert isinstance(e.value, UnsupportedSchemaError)


def test_remote_refs_never_touch_the_network(monkeypatch):
    """Neither the compiler nor the ``jsonschema`` validator it builds fetches a document:
    a missing one is an error, a registry one comes from the registry."""
    import socket

    import referencing.exceptions
    from tractable.fsa.errors import UnresolvedReferenceError
    from tractable.fsa.json_schema import JsonSchemaCompiler

    def no_network(*a, **k):
        raise AssertionError("network access")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    missing = {"anyOf": [{"$ref": "http://localhost:1234/x.json"}, {"type": "null"}]}
    with pytest.raises(UnresolvedReferenceError):
        json_schema_to_nfa(missing)
    with pytest.raises(referencing.exceptions.Unresolvable):
        JsonSchemaCompiler(missing)._validator.is_valid(1)  # jsonschema would urlopen it
    reg = _remote_registry("dict")
    c = JsonSchemaCompiler(_REMOTE_ROOT, registry=reg)
    assert c._validator.is_valid({"a": 3}) and not c._validator.is_valid({"a": 11})
    one_of = {"anyOf": [{"$ref": "https://example.com/schemas/defs.json#tag"},
                        {"type": "object", "properties": {"z": {"type": "integer"}}}]}
    assert serialize_instance({"z": 1}, one_of, registry=reg) == '{"z":1}'


# --------------------------------------------------------------------------- pydantic


def _pydantic_models():
    pydantic = pytest.importorskip("pydantic")
    from enum import Enum
    from typing import Literal, Optional

    from pydantic import BaseModel, Field

    class Color(str, Enum):
        red = "red"
        green = "green"

    class Address(BaseModel):
        street: str = Field(max_length=40)
        zip_code: int = Field(ge=0, le=99999)

    class Person(BaseModel):
        name: str = Field(max_length=50)
        age: int = Field(ge=0, le=150)
        height: float
        nickname: Optional[str] = None  # noqa: UP045 - what pydantic users write
        address: Address
        tags: list[str]
        color: Color
        kind: Literal["user", "admin"]
        scores: dict[str, int]

    return pydantic, Person, Address


def test_pydantic_model_compiles_without_warning(llama3_vocab, llama3_tokenizer):
    """An ordinary model compiles with no warning (issue 19): the keys a model ignores
    (pydantic's default extra="ignore") are not generated, as model_dump_json never writes
    them; the model's JSON Schema as a dict keeps its open objects (and their one warning)."""
    pydantic, Person, Address = _pydantic_models()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        A = compile_json_schema(Person, llama3_vocab)
        B = compile_json_schema(pydantic.TypeAdapter(list[Address]), llama3_vocab)
        E = compile_json_schema(Person, llama3_vocab, canonical=False)
    with pytest.warns(UserWarning, match="values of properties the schema does not list"):
        json_schema_to_nfa(Person.model_json_schema())
    p = Person(name="Ann", age=30, height=1.5, address={"street": "Main St", "zip_code": 123},
               tags=["a", "b"], color="red", kind="user", scores={"x": 1, "y": 22})
    # through serialize_instance: the model's own float spelling is not the point here
    text = serialize_instance(p.model_dump(mode="json"), Person)
    assert A.accepts(llama3_tokenizer.encode(text, add_special_tokens=False).ids)
    for bad in [dict(p.model_dump(mode="json"), age=151), dict(p.model_dump(mode="json"),
                                                                kind="root")]:
        text = serialize_instance(bad, Person)
        assert not A.accepts(llama3_tokenizer.encode(text, add_special_tokens=False).ids)
    extra = dict(p.model_dump(mode="json"), extra_key=1)
    assert Person.model_validate(extra) == p  # ignored by the model: not generated
    text = serialize_instance(extra, Person.model_json_schema())
    assert not A.accepts(llama3_tokenizer.encode(text, add_special_tokens=False).ids)
    with pytest.warns(UserWarning, match="values of properties"):
        open_nfa = N.finalize(json_schema_to_nfa(Person.model_json_schema()))
    assert N.matches(open_nfa, text.encode())
    # every serialization: what model_dump_json writes (floats as Python writes them), and
    # json.dumps' defaults (", ", ": ", \u escapes) and indent=2
    q = p.model_copy(update={"height": 2.0, "name": "Zoë", "scores": {"x": 1}})
    for text in [q.model_dump_json(), q.model_dump_json(indent=2),
                 json.dumps(q.model_dump(mode="json")),
                 json.dumps(q.model_dump(mode="json"), indent=2)]:
        assert E.accepts(llama3_tokenizer.encode(text, add_special_tokens=False).ids), text
        assert Person.model_validate_json(text) == q
    addrs = [Address(street="A", zip_code=1), Address(street="Bb", zip_code=99999)]
    text = pydantic.TypeAdapter(list[Address]).dump_json(addrs).decode()
    assert B.accepts(llama3_tokenizer.encode(text, add_special_tokens=False).ids)
    # what model_dump_json writes (compact, no floats here) is accepted as it is
    text = Address(street="Elm", zip_code=4242).model_dump_json()
    C = compile_json_schema(Address, llama3_vocab)
    assert C.accepts(llama3_tokenizer.encode(text, add_special_tokens=False).ids)
    assert not C.accepts(llama3_tokenizer.encode(text.replace("4242", "100000"),
                                                 add_special_tokens=False).ids)


def test_pydantic_strict_warns_only_where_objects_are_open():
    pydantic, Person, Address = _pydantic_models()

    class Closed(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")
        n: int = pydantic.Field(ge=0, le=5)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = N.finalize(json_schema_to_nfa(Closed, strict=True))  # no open object: no warning
    assert N.matches(a, b'{"n":5}') and not N.matches(a, b'{"n":5,"m":1}')
    with warnings.catch_warnings():  # a model: keys it ignores are not generated anyway
        warnings.simplefilter("error")
        json_schema_to_nfa(Address, strict=True)
    with pytest.warns(UserWarning, match="strict=True"):  # its schema dict: open objects
        json_schema_to_nfa(Address.model_json_schema(), strict=True)


# --------------------------------------------------------------------------- free values

_CONFIG = {"type": "object", "properties": {"name": {"type": "string"}, "cfg": {}},
           "additionalProperties": False}
# six levels of arrays/objects inside the free value "cfg"
_DEEP = b'{"name":"n","cfg":{"a":{"b":[{"c":{"d":[1,null,"x"]}}]}}}'


def test_free_values_default_depth_without_warning():
    from tractable.fsa.json_schema import FREE_VALUE_DEPTH

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = N.finalize(json_schema_to_nfa(_CONFIG))
        N.finalize(json_schema_to_nfa(_CONFIG, free_value_depth=FREE_VALUE_DEPTH))
    assert FREE_VALUE_DEPTH >= 6
    assert N.matches(a, _DEEP)
    d = FREE_VALUE_DEPTH
    assert N.matches(a, b'{"cfg":' + b"[" * d + b"1" + b"]" * d + b"}")
    assert not N.matches(a, b'{"cfg":' + b"[" * (d + 1) + b"1" + b"]" * (d + 1) + b"}")


def test_lowered_free_value_depth_warns_once():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = N.finalize(json_schema_to_nfa(_CONFIG, free_value_depth=3))
    msgs = [str(w.message) for w in caught if "free_value_depth" in str(w.message)]
    assert len(msgs) == 1 and "free_value_depth=3" in msgs[0], msgs
    assert N.matches(a, b'{"cfg":{"a":[{"b":1}]}}') and not N.matches(a, _DEEP)


def test_unlisted_property_values_are_shallow_unless_asked():
    """Values of properties an object does not list (additionalProperties unspecified beside
    properties: every pydantic model) are generated UNLISTED_VALUE_DEPTH deep by default (each
    open object carries a copy of the free value, ~2^depth states), an explicit
    free_value_depth applies to them too."""
    from tractable.fsa.json_schema import UNLISTED_VALUE_DEPTH

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    shallow = b'{"a":1,"x":{"y":[1]}}'
    deep = b'{"a":1,"x":{"y":{"z":[1]}}}'
    with pytest.warns(UserWarning, match="values of properties the schema does not list"):
        a = N.finalize(json_schema_to_nfa(schema))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = N.finalize(json_schema_to_nfa(schema, free_value_depth=6))
    assert UNLISTED_VALUE_DEPTH == 2
    assert N.matches(a, shallow) and not N.matches(a, deep)
    assert N.matches(b, deep)
    assert a.num_states < b.num_states / 10


# --------------------------------------------------------------------------- start-up cost


def test_meta_validation_does_not_import_jsonschema():
    """Importing jsonschema costs ~1 s where its format extras are installed (rfc3987-syntax
    builds 39 Lark parsers at import): the first compile of a valid schema must not pay it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from tractable.fsa.json_schema import json_schema_to_nfa\n"
        "json_schema_to_nfa({'$id': 'https://example.com/s.json', '$defs': {'A': {'type': "
        "'object', 'properties': {'p': {'type': 'string', 'pattern': '^[a-z]+$'}, 'e': "
        "{'enum': ['x', 'y'], 'type': 'string', 'title': 'E'}}, 'required': ['p']}}, "
        "'type': 'object', 'properties': {'a': {'$ref': '#/$defs/A'}, 'n': {'anyOf': "
        "[{'type': 'integer', 'minimum': 0}, {'type': 'null'}], 'default': None}}}, "
        "free_value_depth=2)\n"
        "print('jsonschema' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False", out


def test_meta_format_fast_check_is_conservative():
    """The URI checks of the fast meta-validation accept only what jsonschema's checker
    accepts (whatever checker library is installed)."""
    from tractable.fsa.json_schema import _meta_format_ok

    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    cases = ["#", "#/$defs/A", "#foo", "defs.json#/$defs/pos", "https://example.com/a/b.json",
             "http://localhost:1234/draft2020-12/tree", "urn:uuid:deadbeef-1234-ffff-ffff-4321",
             "//host/p", "/abs/path", "a:b", "a b", "#/a b", "http://[::1]/x", "%zz", "é",
             "http://example.com/x#frag?q", "tree", "node#", "../x.json", "\\x", "",
             "https://json-schema.org/draft/2020-12/schema", "x:", "1a:b", ":x", "a/b:c",
             "[", "(unclosed", "^[a-z]+$"]
    for fmt in ("uri", "uri-reference", "regex"):
        for x in cases:
            if _meta_format_ok(x, fmt):
                assert checker.conforms(x, fmt), (fmt, x)
    assert _meta_format_ok("#/$defs/A", "uri-reference")
    assert _meta_format_ok("https://json-schema.org/draft/2020-12/schema", "uri")
