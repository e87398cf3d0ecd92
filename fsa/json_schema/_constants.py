"""Limits and keyword tables of the JSON Schema compiler: how far it unrolls, combines and
builds, which keywords it supports, ignores or refuses, which keywords constrain which JSON
type, and the whitespace settings."""

from __future__ import annotations

from .. import nfa as N

#: Nesting depth of the arrays/objects generated for an unconstrained value (schema ``true``,
#: ``{}``, open ``additionalProperties``/``items``) by default; configuration files nest 6-9
#: levels inside such values.  Exact depth-d JSON needs ~2^d states (one per stack of open
#: brackets; no NFA does better), and every occurrence is its own copy (an ``items: {}`` with
#: ``maxItems: 10`` holds ten).  Byte states of one free value, canonical (any whitespace and
#: spelling): depth 2: 314 (549), 4: 1,418 (2,505), 6: 5,834 (10,329), 8: 23,498 (41,625).
#: Depth 8 made the Test Suite's fast subset 3.4 -> 72 s and a three-property schema with two
#: free values 118k byte states, 3.2 s per Llama-3 compile (6: 21 s, 29k states, 0.7 s).  A
#: deeper ``free_value_depth`` can be asked for (no warning); a shallower one warns.
FREE_VALUE_DEPTH = 6
#: ... and of the values of the properties an object does not list (``additionalProperties``
#: unspecified beside ``properties``/``patternProperties``: what ``strict=True`` drops).  Every
#: such object carries its own copy of a free value: every pydantic model, most objects of
#: real schemas.  An explicit ``free_value_depth`` applies to these too.
UNLISTED_VALUE_DEPTH = 2
#: Most anyOf/oneOf leaves one schema node may distribute into.
MAX_COMBINATIONS = 256
#: Most declared properties an object may have under ``property_order="any"`` (2^n subsets).
MAX_ANY_ORDER_PROPERTIES = 8
#: Most patternProperties patterns per object (additional keys split into 2^n regions).
MAX_PATTERN_PROPERTIES = 4
#: Most "some property outside these names fails this schema" witnesses (negated
#: additionalProperties) per object conjunction: each property has up to 2^n variants.
MAX_WITNESSES = 2
#: Largest subset construction for the complement of a patternProperties pattern.
MAX_COMPLEMENT_STATES = 4000
#: Largest byte NFA (states, before finalization) the compiler builds before refusing.
MAX_STATES = 2_000_000
#: Most values one ``enum`` may list (checked before any work; larger ones are
#: UnsupportedSchemaError, or dropped with ``lenient=True``).  Measured (byte NFA, one process):
#: 1,000 string values 0.17 s, 5,000 2.8 s, 20,000 41 s.
MAX_ENUM_VALUES = 5_000
#: Deepest JSON nesting of a schema document (objects and arrays, enum/const values included).
#: Checked iteratively before anything recurses over the document: ``jsonschema``'s
#: meta-schema check recursed out of Python's stack at 164 nested ``properties`` (328 JSON
#: levels) and the compiler at 164 nested ``items``; the deepest of the 9,557 JSONSchemaBench
#: schemas is 28 levels, its hand-written extras 63.
MAX_SCHEMA_DEPTH = 128
#: Deepest nesting of values (arrays/objects, ``$ref`` unrolling included) the compiler builds:
#: each level costs ~6 Python frames of its recursion.  A recursive ``$ref`` unrolled
#: ``max_recursion_depth`` times nests that deep (or deeper, for a cycle through several
#: values).
MAX_VALUE_NESTING = 100

_ALL_TYPES = frozenset({"null", "boolean", "integer", "fraction", "string", "array", "object"})
_TYPE_MAP = {
    "null": {"null"},
    "boolean": {"boolean"},
    "integer": {"integer"},
    "number": {"integer", "fraction"},
    "string": {"string"},
    "array": {"array"},
    "object": {"object"},
}
_SUPPORTED = {
    "type", "enum", "const", "properties", "required", "additionalProperties",
    "patternProperties", "propertyNames", "minProperties", "maxProperties", "items",
    "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "anyOf", "oneOf", "allOf", "$ref", "contains", "minContains", "not",
    "dependentRequired", "dependentSchemas", "dependencies", "if", "then", "else",
}
_ANNOTATIONS = {
    "title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
    "writeOnly", "$schema", "$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor",
    "$vocabulary", "$defs", "definitions", "contentEncoding", "contentMediaType",
    "contentSchema",
}
_UNSUPPORTED = {
    "uniqueItems", "maxContains", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef", "extends", "disallow", "divisibleBy",
}
#: Formats the ``jsonschema`` package can check (with its optional dependencies) but that have no
#: automaton here: refusing them keeps the compiler sound against a format-checking validator.
_CHECKED_FORMATS = {"idn-email", "idn-hostname", "color"}

_WS_MASK = N.mask_of(b" \t\n\r")
#: Whitespace settings: none, up to ``max_whitespace`` characters per gap, any (RFC 8259 ws).
_WHITESPACE = ("compact", "flexible", "any")
_WS_ANY = N.star(N.byteset(_WS_MASK))
#: Keywords that constrain only instances of one JSON type (part name); every other keyword of
#: _VALIDATION but ``type`` may constrain any type.
_ONLY_FOR = {
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
               "$fraction", "divisibleBy"},
    "string": {"minLength", "maxLength", "pattern", "format", "$not-pattern"},
    "array": {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "contains",
              "minContains", "maxContains", "uniqueItems", "unevaluatedItems"},
    "object": {"properties", "required", "additionalProperties", "patternProperties",
               "propertyNames", "minProperties", "maxProperties", "dependentRequired",
               "dependentSchemas", "dependencies", "$extra", "unevaluatedProperties"},
}
#: Keywords that constrain instances (a node with none of these accepts everything).
_VALIDATION = (_SUPPORTED | _UNSUPPORTED
               | {"$fraction", "$not-enum", "$not-pattern", "$extra"}) - {
    "allOf", "anyOf", "oneOf", "$ref"}
