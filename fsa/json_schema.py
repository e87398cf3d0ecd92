"""JSON Schema → byte NFA → :class:`~.automaton.TokenAutomaton` (paper 002, §5.2 and §5.5).

With ``canonical=False`` the automaton accepts *every serialization* (RFC 8259) of the instances
that are valid against the schema; with ``canonical=True`` (the default for now) only their
*canonical serializations* (below).  Either way the instances are those valid against the
schema (Draft 2020-12 semantics; Draft 7/6/4 documents are accepted and read with their own
``items``/``additionalItems``/``$ref``/``exclusiveMaximum`` rules).  It is built compositionally
from the :mod:`.nfa` primitives — literals, code-point classes, concatenation,
union, bounded repetition and, for ``allOf``-style conjunctions of string/number constraints, the
product :func:`~.nfa.intersect` — and is never determinized.  Sub-automata are shared: every
(sub-schema conjunction, recursion context) is compiled once and the same :class:`ByteNFA` object
is reused wherever it occurs; automata that do not depend on the schema (free values, escaped
formats, translated patterns, length-bounded bodies) are built and finalized once per process.

Canonical serialization (what :func:`serialize_instance` writes and the automaton accepts)
----------------------------------------------------------------------------------------
* Compact separators, like ``json.dumps(x, separators=(",", ":"), ensure_ascii=False)``.  With
  ``whitespace="flexible"``, each gap inside an object or array (after ``{``/``[``, around ``:``
  and ``,``, before ``}``/``]``) may hold up to ``max_whitespace`` characters of ``[ \\t\\n\\r]``:
  bounded, never unbounded.
* Strings: exactly the escapes ``json.dumps(..., ensure_ascii=False)`` produces: ``\\"``, ``\\\\``,
  ``\\b \\f \\n \\r \\t``, and ``\\u00xx`` (lowercase hex) for the other control characters;
  every other character (including U+007F and non-ASCII) is written raw as UTF-8.  So every
  string has one serialization, ``minLength``/``maxLength`` count code points, and
  ``pattern``/``format`` apply to the decoded characters: the pattern's or format's byte
  automaton (over decoded UTF-8; formats such as ``iri`` or ``json-pointer`` have non-ASCII,
  quotes, backslashes and control characters too) is rewritten so that each ``"``, ``\\`` or
  control byte on an edge becomes its escape sequence — exact, because those characters are
  single ASCII bytes that never occur inside a multi-byte UTF-8 sequence.  A ``pattern`` is
  ECMA-262 with search semantics, translated to Python ``re`` (:func:`_ecma_to_python`); its
  lookahead and lookbehind are compiled exactly (:mod:`.regex_lookaround`; lookbehind must be
  fixed-width, as in ``re``).
* Numbers: canonical decimals without exponent (``1.0`` → ``1``, ``1e-05`` → ``0.00001``; see
  :mod:`.json_formats`).  ``integer`` is "a number with zero fractional part", so ``1.0`` *is* an
  integer and is written ``1``.
* Object keys: with ``property_order="schema"`` (default), the declared properties in schema order
  (``properties`` of the merged conjunction in order of first appearance, then keys that are only
  ``required``), then any additional keys.  With ``property_order="any"``: any order.  Values of
  ``enum``/``const`` are written with the key order they have in the schema.

Every serialization (``canonical=False``)
------------------------------------------
* Whitespace: ``[ \\t\\n\\r]*`` in every gap between tokens and around the value (RFC 8259's
  ``ws``; ``whitespace="flexible"`` bounds each gap at ``max_whitespace`` characters instead).
  Unbounded gaps leave the GCD guarantee intact: distances to acceptance never count a
  whitespace loop, so a walk within the budget still always closes the value.
* Strings: every character raw (where JSON allows) or escaped in every way RFC 8259 allows
  (``\\/``, ``\\uXXXX`` in either case, surrogate pairs), by the exact transduction of
  :mod:`.json_strings` applied to each canonical string leaf; ``minLength``/``maxLength``,
  ``pattern``, ``format``, ``enum``/``const`` and property names apply to the decoded string.
  Lone surrogates (``"\\ud800"``) are not generated.
* Numbers: every spelling (fraction, trailing zeros, exponent, ``-0``) with bounds,
  ``integer`` and ``multipleOf`` decided on the value (:mod:`.json_numbers`); where the
  exponent can change the verdict its value is bounded by ``max_exponent`` (a documented
  subset: ``1e-05`` and ``2.5e3`` are generated, ``1e-99`` under ``maximum: 1`` is not).
* Everything else (keyword semantics, property order) is as below: the canonical automaton is
  built first and each string and number leaf is spelled, which is exact because the spellings
  of different values are disjoint.  ``not`` of an enum/const removes every spelling (numbers
  by the open intervals between the values; arrays of numbers are refused: a number has
  spellings with any exponent).

Semantics of keywords
---------------------
* Sibling keywords, ``allOf`` and ``$ref`` (siblings of ``$ref`` ignored before 2019-09) form a
  *conjunction* that is merged before building (object constraints by property; string and
  number constraints by automaton product).  ``anyOf``/``oneOf`` are distributed over the
  conjunction (at most :data:`MAX_COMBINATIONS` leaves per schema).
* ``oneOf`` is exact when its branches are provably disjoint: different JSON types, disjoint
  non-object languages (empty :func:`~.nfa.intersect`), or objects with a required property that
  the other branch cannot have (closed) or declares with disjoint values (a discriminator).
  Type by type: a JSON type on which the branches are disjoint keeps their values, and a type
  that two branches accept whole (no keyword of theirs applies to it) has no value in exactly
  one branch and is dropped.  Otherwise it is compiled exactly as the union
  over i of (B_i and not B_j for every j != i), the negations as for ``not`` below, when they
  exist and give at most :data:`MAX_COMBINATIONS` leaves; otherwise
  :class:`UnsupportedSchemaError`, or, with ``lenient=True``, ``anyOf`` and a warning.
* ``not`` is rewritten structurally into a positive schema (never by complementing a value
  automaton that may hold several serializations of one instance): by De Morgan the negation of
  a conjunction of keywords is the disjunction of their negations, and a keyword that applies to
  one JSON type t fails only on instances of type t (``not {"required": ["a"]}`` = an object
  without ``a``; ``not {"minItems": 2}`` = an array of at most 1 item; ``not {"items": S}`` = an
  array that ``contains`` ``not S``; ``not {"properties": {"a": S}}`` = an object whose ``a``
  fails S; ``not {"additionalProperties": S}`` = an object with a key outside ``properties``
  whose value fails S, tracked by a witness bit in the object automaton).  Scalar complements
  are automaton complements where serializations are unique: ``not {"pattern"}`` by subset
  construction of the pattern automaton (at most :data:`MAX_COMPLEMENT_STATES` states),
  ``not {"enum"/"const"}`` by removing the literals (scalars, arrays of scalars),
  ``not {"type": "integer"}`` keeps the numbers with a fraction.  Refused: negated ``format``
  (format automata may be documented subsets), ``multipleOf``, ``patternProperties``,
  ``propertyNames``, ``uniqueItems``, ``oneOf``, ``if``, dependencies, recursive ``$ref``.
* ``dependentRequired``/``dependentSchemas`` (and Draft 4-7 ``dependencies``, enforced in every
  draft: a schema that uses it means it) become, for each key k, the disjoint union of
  "k absent" and "k present and the dependency holds" (``required: [k, ...]`` or the dependent
  subschema): exact, and a dependency on an undeclared key makes it a declared (ordered) key.
* ``if``/``then``/``else`` (Draft 7 on; earlier drafts ignore the words) is the disjoint union
  ``(if & then) | (not if & else)``, ``not if`` built as for ``not`` (refused where that has
  no exact form).
* ``$ref`` resolves against ``$id`` base URIs, to JSON pointers and anchors, in the schema or
  in the documents of ``registry`` (a ``referencing.Registry`` or a mapping URI -> schema;
  never the network): :mod:`.json_refs`.  Recursive ``$ref`` (also through other documents) is
  unrolled ``max_recursion_depth`` times; deeper occurrences are dropped (the automaton accepts
  a *subset*: instances nested deeper are not generated), with a warning.
* Unconstrained values (``true``, open ``additionalProperties``/``items``) are any JSON with
  arrays/objects nested at most ``free_value_depth`` (:data:`FREE_VALUE_DEPTH` = 6) levels,
  the values of properties an object does not list (``additionalProperties`` unspecified beside
  ``properties``) :data:`UNLISTED_VALUE_DEPTH` = 2 levels: a subset, which warns when those
  unlisted values are built, or when ``free_value_depth`` is lowered below the default.
* ``patternProperties`` is supported for declared keys, and for additional keys when the patterns
  are pairwise disjoint and ``additionalProperties`` is ``false`` (or the pattern schemas are
  trivially true) — otherwise the key language needs a regex complement.
* Additional (undeclared) keys exclude all declared names.  They cannot be made pairwise distinct
  by a finite automaton: two *additional* keys may repeat (declared keys never do).
* ``uniqueItems: true`` is exact (:mod:`.unique_compile`): small finite item domains give a
  regular automaton over the sets of values used; other arrays are built with marker bytes and
  checked per request at token level (:mod:`.unique_items`), which only
  :func:`compile_json_schema` does (:func:`json_schema_to_nfa` refuses them).
* Not supported (:class:`UnsupportedSchemaError`; dropped with a warning under ``lenient``):
  the ``not`` forms above that have no exact negation (also as the negation of an ``if``),
  ``contains`` with ``maxContains``,
  ``unevaluated*`` (other than ``true``), ``$dynamicRef``, ``$ref`` to a document
  not in ``registry`` (:class:`~.errors.UnresolvedReferenceError`), formats the
  ``jsonschema`` package checks that have no automaton here (``idn-email``, ``idn-hostname``,
  ``color``).  Other unknown keywords are
  annotations by the JSON Schema spec and are ignored; ``meta["ignored_keywords"]`` lists them.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from decimal import Decimal
from typing import Any

from . import nfa as N
from .errors import InvalidSchemaError, UnsupportedSchemaError
from .json_formats import (
    FORMATS,
    canonical_number,
    format_nfa,
    multiple_of,
    number_nfa,
    number_range,
    to_decimal,
)
from .json_numbers import MAX_NUMBER_STATES, number_language
from .json_refs import RefResolver
from .json_strings import all_spellings
from .nfa import ByteNFA
from .unique_compile import demark, unique_array

__all__ = [
    "compile_json_schema",
    "json_schema_to_nfa",
    "serialize_instance",
    "JsonSchemaCompiler",
    "MAX_COMBINATIONS",
    "MAX_ANY_ORDER_PROPERTIES",
    "FREE_VALUE_DEPTH",
    "UNLISTED_VALUE_DEPTH",
]

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
#: A value automaton built for one use is left raw: ``build`` finalizes everything around it
#: in one pass (finalizing each nested part as it was built re-walked inner states once per
#: nesting level: 63 -> 30 ms of ``_canonical`` over ten Github_medium schemas, the same token
#: automata).  One used again (a definition ``$ref``-ed twice) is finalized at its second use,
#: from MIN_FINALIZE_REUSED states (smaller ones are mostly glue) up to MAX_FINALIZE_REUSED
#: (Github_ultra/o13934: 170 uses of one definition); larger ones are left to ``build``
#: (finalizing six nested ~10^5-state levels of a Kubernetes pod spec took 9.5 of its 15 s).
MIN_FINALIZE_REUSED = 64
MAX_FINALIZE_REUSED = 250_000
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

# --------------------------------------------------------------------------- strings

_RAW_RANGES = [(0x20, 0x21), (0x23, 0x5B), (0x5D, N.MAX_CODEPOINT)]
_SPECIAL_BYTES = list(range(0x20)) + [0x22, 0x5C]
_SHORT_ESC = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r",
              0x09: "\\t"}


def _esc(b: int) -> bytes:
    return (_SHORT_ESC.get(b) or f"\\u{b:04x}").encode()


def _escapes(specials: list[int]) -> ByteNFA:
    """Union of the canonical escapes of the given special bytes, as a small trie."""
    if not specials:
        return N.nothing()
    trie: dict[bytes, None] = {_esc(b): None for b in specials}
    b = _Trie()
    for e in trie:
        b.add(e)
    return b.nfa()


class _Trie:
    def __init__(self) -> None:
        self.children: list[dict[int, int]] = [{}]
        self.ends: set[int] = set()

    def add(self, data: bytes) -> None:
        s = 0
        for byte in data:
            nxt = self.children[s].get(byte)
            if nxt is None:
                nxt = len(self.children)
                self.children.append({})
                self.children[s][byte] = nxt
            s = nxt
        self.ends.add(s)

    def nfa(self) -> ByteNFA:
        edges = tuple((s, 1 << byte, d) for s, ch in enumerate(self.children)
                      for byte, d in ch.items())
        return ByteNFA(len(self.children), 0, frozenset(self.ends), edges)


#: Immutable automata shared by all compilers (keys name their inputs): free values per
#: (depth, whitespace), escaped format contents, translated patterns, length-bounded bodies.
_SHARED: dict[tuple, Any] = {}
#: Most entries kept in :data:`_SHARED` (oldest dropped first): patterns and length bounds come
#: from user schemas, so a long-running process must not keep all of them.
MAX_SHARED = 4096


def _share(key: tuple, value: Any) -> Any:
    if len(_SHARED) >= MAX_SHARED:
        for k in list(_SHARED)[: MAX_SHARED // 4]:
            del _SHARED[k]
    _SHARED[key] = value
    return value

_CHAR = N.finalize(N.union(N.codepoints(_RAW_RANGES), _escapes(_SPECIAL_BYTES)))
_BODY = N.finalize(N.star(_CHAR))
_QUOTE = N.literal('"')
_CONTENT = N.finalize(N.star(N.any_codepoint()))  # decoded string contents (valid UTF-8)


def _escape_subst(a: ByteNFA) -> ByteNFA:
    """Rewrite an automaton over decoded UTF-8 content into one over canonical JSON string
    bodies: the special bytes (``"``, ``\\``, controls) of an edge become the trie of their
    escape sequences, entered at the edge's source and leaving into its destination (the
    escapes are prefix-free, so every trie leaf ends one escape): about 6 new states per edge
    that carries special bytes (one chain per byte was up to 34 x 5)."""
    a = N.finalize(a, reduce=False)
    special = N.mask_of(_SPECIAL_BYTES)
    edges = []
    n = a.num_states
    for s, m, d in a.edges:
        safe = m & ~special
        if safe:
            edges.append((s, safe, d))
        sp = m & special
        if not sp:
            continue
        trie = _ESC_TRIES.get(sp)
        if trie is None:
            children, _ends = _trie(_esc(b) for b in range(256) if sp >> b & 1)
            trie = _ESC_TRIES[sp] = [[(byte, c) for byte, c in kids.items()]
                                     for kids in children]
        ids = {0: s}  # the root is s, inner trie nodes get new states, leaves are d
        for t, kids in enumerate(trie):
            for byte, c in kids:
                if not trie[c]:
                    dst = d
                elif c in ids:
                    dst = ids[c]
                else:
                    dst = ids[c] = n
                    n += 1
                edges.append((ids[t], 1 << byte, dst))
    return ByteNFA(n, a.start, a.finals, tuple(edges))


#: Escape tries by special-byte mask: per trie node, its (byte, child) moves.
_ESC_TRIES: dict[int, list[list[tuple[int, int]]]] = {}


def _format_content(name: str) -> ByteNFA:
    """Decoded content of format ``name`` (finalized once per process)."""
    key = ("format-content", name)
    hit = _SHARED.get(key)
    if hit is None:
        hit = _share(key, format_nfa(name))
    return hit


def _escaped_format(name: str) -> ByteNFA:
    """Canonical string bodies of format ``name`` (finalized once per process)."""
    key = ("format", name)
    hit = _SHARED.get(key)
    if hit is None:
        hit = _share(key, N.finalize(_escape_subst(_format_content(name))))
    return hit


def _trie(seqs) -> tuple[list[dict[Any, int]], set[int]]:
    """Trie of the sequences: per node its children by symbol; the nodes that end a sequence."""
    children: list[dict[Any, int]] = [{}]
    ends: set[int] = set()
    for seq in seqs:
        st = 0
        for sym in seq:
            nxt = children[st].get(sym)
            if nxt is None:
                nxt = len(children)
                children.append({})
                children[st][sym] = nxt
            st = nxt
        ends.add(st)
    return children, ends


def _body_excluding(names: list[str]) -> ByteNFA:
    """Canonical string bodies whose decoded value is none of ``names`` (exact, O(total length))."""
    if not names:
        return _BODY
    children, ends = _trie(names)  # over characters
    n_trie = len(children)
    edges: list[tuple[int, int, int]] = []
    eps: list[tuple[int, int]] = []
    # one shared copy of the free body: after a deviation, any body
    n = n_trie
    body = _BODY.shifted(n)
    n += _BODY.num_states
    edges.extend(body.edges)
    free = body.start
    finals = set(body.finals)
    # _BODY's start loops on the single-byte raw characters and enters its own states for
    # multi-byte characters and escapes: a node whose children are all single-byte raw
    # characters deviates straight into the shared copy (no per-node deviation automaton)
    first = [(m, d + n_trie) for s, m, d in _BODY.edges if s == _BODY.start]
    for s in range(n_trie):
        if s not in ends:
            finals.add(s)
        kids = children[s]
        if all(0x20 <= ord(c) < 0x80 and c not in '"\\' for c in kids):
            kid_mask = N.mask_of(ord(c) for c in kids)
            for m, d in first:
                if d == free:
                    m &= ~kid_mask
                if m:
                    edges.append((s, m, d))
        else:
            raw_excl = sorted(ord(c) for c in kids if ord(c) >= 0x20 and c not in '"\\')
            ranges = []
            for lo, hi in _RAW_RANGES:
                cur = lo
                for x in raw_excl:
                    if lo <= x <= hi and x >= cur:
                        if x > cur:
                            ranges.append((cur, x - 1))
                        cur = x + 1
                if cur <= hi:
                    ranges.append((cur, hi))
            spec = [b for b in _SPECIAL_BYTES if chr(b) not in kids]
            dev = N.union(N.codepoints(ranges), _escapes(spec))
            dev = dev.shifted(n)
            n += dev.num_states
            edges.extend(dev.edges)
            eps.extend(dev.epsilons)
            eps.append((s, dev.start))
            eps.extend((f, free) for f in dev.finals)
        for ch, child in kids.items():
            o = ord(ch)
            enc = _esc(o) if o < 0x20 or ch in '"\\' else ch.encode()
            prev = s
            for i, byte in enumerate(enc):
                nxt = child if i == len(enc) - 1 else n
                if nxt == n:
                    n += 1
                edges.append((prev, 1 << byte, nxt))
                prev = nxt
    return ByteNFA(n, 0, frozenset(finals), tuple(edges), tuple(eps))


def _json_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


# --------------------------------------------------------------------------- ECMA-262 patterns

_ECMA_SPACE = ("\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f"
               "\\u3000\\ufeff")


def _class_ranges(excluded: list[tuple[int, int]]) -> str:
    """Class-item text for every code point outside the sorted ``excluded`` ranges: how ``\\S``
    and ``\\D`` are written inside a class (``[\\S ]``, ``[^\\D.]``), where no negation
    is available."""
    out, cur = [], 0
    for lo, hi in excluded + [(0x110000, 0x110000)]:
        if lo > cur:
            out.append(f"\\U{cur:08x}-\\U{lo - 1:08x}")
        cur = hi + 1
    return "".join(out)


_ECMA_SPACE_RANGES = [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680),
                      (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
                      (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
_NOT_SPACE_ITEMS = _class_ranges(_ECMA_SPACE_RANGES)
_NOT_DIGIT_ITEMS = _class_ranges([(0x30, 0x39)])


def _ecma_to_python(pattern: str) -> str:
    """Rewrite the ECMA-262 constructs whose Python meaning differs: ``$`` (end of input only),
    ``.`` (not a line terminator), ``\\s``/``\\S`` (ECMA white space); ``\\d``/``\\w`` are made
    ASCII by the caller with ``re.ASCII``."""
    out = []
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "s":
                out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
            elif nxt == "S":
                out.append(_NOT_SPACE_ITEMS if in_class else f"[^{_ECMA_SPACE}]")
            elif nxt == "d":
                out.append("0-9" if in_class else "[0-9]")
            elif nxt == "D":
                out.append(_NOT_DIGIT_ITEMS if in_class else "[^0-9]")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            out.append(c)
        elif c == "[":
            in_class = True
            out.append(c)
            if pattern[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if pattern[i + 1:i + 2] == "]":  # ECMA "[]" is an empty class; Python: a literal "]"
                raise ValueError("empty character class")
        elif c == "$":
            out.append(r"\Z")
        elif c == ".":
            out.append("[^\\n\\r\\u2028\\u2029]")
        else:
            out.append(c)
        i += 1
    return "".join(out)


# --------------------------------------------------------------------------- helpers


def _json_eq(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true != 1; objects by key set, arrays by position."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        try:
            return Decimal(repr(a) if isinstance(a, float) else a) == Decimal(
                repr(b) if isinstance(b, float) else b)
        except Exception:
            return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_eq(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_eq(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _enum_values(flat) -> list | None:
    """The values the ``enum``/``const`` keywords of the conjunction ``flat`` allow (their
    intersection, by JSON equality), or None when no node has either keyword."""
    out: list | None = None
    for s, _p in flat:
        vals = None
        if "const" in s:
            vals = [s["const"]]
        if "enum" in s:
            ev = s["enum"]
            vals = list(ev) if vals is None else [v for v in vals
                                                  if any(_json_eq(v, e) for e in ev)]
        if vals is not None:
            out = list(vals) if out is None else [v for v in out
                                                  if any(_json_eq(v, e) for e in vals)]
    return out


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{v!r} is not a JSON value")
        return "integer" if v == int(v) else "fraction"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise TypeError(f"not a JSON value: {v!r}")


def _dumps(v: Any, order_like: Any = None) -> str:
    """Canonical compact serialization of ``v`` (object keys in ``v``'s own order, or in the
    order of the JSON-equal value ``order_like``)."""
    if isinstance(v, dict):
        keys = list(order_like.keys()) if isinstance(order_like, dict) else list(v.keys())
        keys = [k for k in keys if k in v] + [k for k in v if k not in keys]
        return "{" + ",".join(
            _json_str(k) + ":" + _dumps(v[k], order_like.get(k) if isinstance(order_like, dict)
                                          else None) for k in keys) + "}"
    if isinstance(v, list):
        ol = order_like if isinstance(order_like, list) else [None] * len(v)
        return "[" + ",".join(_dumps(x, o) for x, o in zip(v, ol)) + "]"
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, (int, float)):
        return canonical_number(v)
    if isinstance(v, str):
        return _json_str(v)
    raise TypeError(f"not a JSON value: {v!r}")


def _ptr(base: str, *parts: Any) -> str:
    out = base
    for p in parts:
        out += "/" + str(p).replace("~", "~0").replace("/", "~1")
    return out


def _first_bytes(a: ByteNFA) -> int:
    f = N.finalize(a)
    m = 0
    for s, mask, _ in f.edges:
        if s == f.start:
            m |= mask
    return m


def _is_empty(a: ByteNFA) -> bool:
    """Whether no final state is reachable (epsilons included): O(states + edges)."""
    if not a.finals:
        return True
    hit = a._cache.get("is_empty")
    if hit is not None:
        return hit
    f = a._cache.get(("finalize", True)) or a._cache.get(("finalize", False))
    if f is not None:  # finalized: trimmed, so empty iff it has no accepting state
        return not f.finals
    succ: dict[int, list[int]] = {}
    for s, _m, d in a.edges:
        succ.setdefault(s, []).append(d)
    for s, d in a.epsilons:
        succ.setdefault(s, []).append(d)
    seen = {a.start}
    stack = [a.start]
    out = True
    while stack:
        x = stack.pop()
        if x in a.finals:
            out = False
            break
        for y in succ.get(x, ()):
            if y not in seen:
                seen.add(y)
                stack.append(y)
    a._cache["is_empty"] = out
    return out


def _has_byte(a: ByteNFA, byte: int) -> bool:
    """Whether some edge carries ``byte`` (conservative: unreachable edges count too)."""
    bit = 1 << byte
    return any(m & bit for _, m, _ in a.edges)


def _may_hold_object(a: ByteNFA) -> bool:
    """Whether a value automaton may accept a value with an object in it, whose serialization
    depends on a key order (conservative): a first byte ``{``, or ``[`` and a ``{`` anywhere.
    A string value may contain ``{`` characters and still has one serialization."""
    f = N.finalize(a)
    first = 0
    for s, m, _ in f.edges:
        if s == f.start:
            first |= m
    return bool(first >> 0x7B & 1) or bool(first >> 0x5B & 1) and _has_byte(f, 0x7B)


class _Leaf:
    """One conjunction's automaton split by JSON type, plus the object discriminators:
    ``required_values`` (required key -> its value automaton), ``key_values`` (the same for
    every declared key) and ``object_keys`` (the only keys its objects can have, when no
    undeclared key is allowed; None: not known to be closed)."""

    __slots__ = ("parts", "required_values", "object_keys", "key_values", "free_types")

    def __init__(self, parts: dict[str, ByteNFA], required_values: dict[str, ByteNFA],
                 object_keys: frozenset[str] | None = None,
                 free_types: frozenset[str] = frozenset(),
                 key_values: dict[str, ByteNFA] | None = None):
        self.parts = parts
        self.required_values = required_values
        self.object_keys = object_keys
        #: every declared key -> the values its objects can hold there (empty: never present)
        self.key_values = key_values or {}
        #: JSON types (part names) whose every value the conjunction accepts: no keyword of it
        #: applies to the type (the automaton may still be a depth-limited subset)
        self.free_types = free_types


class _Truncated(Exception):
    pass


class _Synth(dict):
    """A schema node the compiler wrote (the negation of a ``not``, a branch of a dependency or
    of an exact ``oneOf``): a real JSON Schema with the same meaning for ``jsonschema``, plus
    internal keys only this compiler reads (``$fraction``: numbers with a fractional part only;
    ``$not-enum``: (values, pointer), none of these values; ``$not-pattern``: (pattern,
    pointer), strings the ECMA-262 pattern does not match; ``$ptrs``: the real pointers of the
    ``allOf`` entries).  Never checked for keywords, never closed by ``strict``."""

    __slots__ = ()


#: The schema of the value of a property an object does not list (``additionalProperties``
#: unspecified): free, generated :data:`UNLISTED_VALUE_DEPTH` deep by default.
_UNLISTED = _Synth({"$unlisted": True})


class _NoNegation(Exception):
    """A ``not``/overlapping ``oneOf`` operand this compiler cannot negate exactly."""

    def __init__(self, keyword: str, pointer: str, detail: str):
        super().__init__(keyword, pointer, detail)
        self.keyword, self.pointer, self.detail = keyword, pointer, detail


#: Key bytes: the canonical numbers with a fractional part are those containing ``.``.
_ALL_BYTES = (1 << 256) - 1
_HAS_DOT = ByteNFA(2, 0, frozenset({1}), ((0, _ALL_BYTES & ~(1 << 0x2E), 0), (0, 1 << 0x2E, 1),
                                          (1, _ALL_BYTES, 1)))


def _scalars(v: Any):
    """The scalars inside a JSON value (depth first)."""
    if isinstance(v, (list, tuple)):
        for x in v:
            yield from _scalars(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _scalars(x)
    else:
        yield v


#: The exponent bound :func:`~.json_numbers.number_language` uses for ``integer`` by default.
_INTEGER_MAX_EXPONENT = 16


def _bounded_numbers(max_exponent: int) -> ByteNFA:
    """The number spellings :func:`~.json_numbers.number_language` can generate for
    ``integer`` with this exponent bound: a zero mantissa with any exponent, a scientific
    mantissa (one nonzero integer digit) with an exponent of value at most ``max_exponent``,
    any other mantissa with an exponent of value 0.  A complement of number spellings is
    taken within it, so that it is exact."""
    key = ("bounded-numbers", max_exponent)
    hit = _SHARED.get(key)
    if hit is None:
        from .regex import regex_to_nfa

        exp = "|".join(str(i) for i in range(max_exponent + 1))
        hit = _share(key, N.finalize(regex_to_nfa(
            rf"-?0(\.0+)?([eE][+-]?[0-9]+)?"
            rf"|-?[1-9](\.[0-9]+)?[eE][+-]?0*({exp})"
            rf"|-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?0+)?")))
    return hit


def _non_integral(max_exponent: int | None) -> ByteNFA:
    """Spellings of numbers with a nonzero fractional value (``not: {type: integer}``), exact
    for exponents within ``max_exponent``: the bounded spellings minus the integral ones."""
    key = ("non-integral", max_exponent)
    hit = _SHARED.get(key)
    if hit is None:
        max_exponent = _INTEGER_MAX_EXPONENT if max_exponent is None else max_exponent
        ints = number_language(None, False, None, False, True, (), max_exponent)
        hit = _share(key, N.finalize(N.intersect(_bounded_numbers(max_exponent),
                                                 _complement_content(ints))))
    return hit


def _not_literals(lits: list[bytes]) -> ByteNFA:
    """Byte strings that are none of ``lits``: a complete trie DFA (a sink for deviations) whose
    accepting states are every node that does not end a literal, and the sink."""
    children, ends = _trie(lits)  # over bytes
    sink = len(children)
    edges = [(sink, _ALL_BYTES, sink)]
    for st, kids in enumerate(children):
        used = 0
        for byte, d in kids.items():
            edges.append((st, 1 << byte, d))
            used |= 1 << byte
        if _ALL_BYTES & ~used:
            edges.append((st, _ALL_BYTES & ~used, sink))
    finals = frozenset(x for x in range(sink + 1) if x not in ends)
    return ByteNFA(sink + 1, 0, finals, tuple(edges))


def _complement_content(a: ByteNFA) -> ByteNFA | None:
    """Decoded strings (valid UTF-8) NOT in L(a), by subset construction of ``a`` over its
    byte classes; None above :data:`MAX_COMPLEMENT_STATES` subsets.  Cached on ``a``."""
    if "complement" in a._cache:
        return a._cache["complement"]
    f = N.finalize(a)
    cls, ncls = N.byte_classes([m for _, m, _ in f.edges])
    reps: dict[int, int] = {}
    cmask = [0] * ncls
    for byte, c in enumerate(cls):
        reps.setdefault(c, byte)
        cmask[c] |= 1 << byte
    out_edges: list[list[tuple[int, int]]] = [[] for _ in range(f.num_states)]
    for s, m, d in f.edges:
        out_edges[s].append((m, d))
    start = frozenset({f.start})
    ids = {start: 0}
    todo = [start]
    edges = []
    while todo:
        S = todo.pop()
        for c in range(ncls):
            bit = 1 << reps[c]
            T = frozenset(d for s in S for m, d in out_edges[s] if m & bit)
            if T not in ids:
                if len(ids) >= MAX_COMPLEMENT_STATES:
                    a._cache["complement"] = None
                    return None
                ids[T] = len(ids)
                todo.append(T)
            edges.append((ids[S], cmask[c], ids[T]))
    finals = frozenset(i for S, i in ids.items() if not (S & f.finals))
    res = N.intersect(ByteNFA(len(ids), 0, finals, tuple(edges)), _CONTENT)
    a._cache["complement"] = res
    return res


def _universal_content(a: ByteNFA) -> bool:
    """Whether ``a`` accepts every decoded string (e.g. the search automaton of a pattern that
    matches the empty string, such as ``([A-Z]+)?``): then it constrains nothing and is left
    out of products (an exact shortcut; unknown -- too many subsets -- counts as not)."""
    hit = a._cache.get("universal")
    if hit is None:
        c = _complement_content(a) if a.num_states <= 256 else None
        hit = a._cache["universal"] = c is not None and _is_empty(c)
    return hit


def _wrapped(b: Any, start: int, open_: ByteNFA, close: ByteNFA) -> ByteNFA:
    """``open_ · L · close`` where L is the builder's automaton from ``start`` to its finals,
    built in place (no copy of the possibly 10^6-state inside).  The builders only create
    states reachable through nonempty parts, so the result is empty iff L has no final state;
    that is recorded for :func:`_is_empty`."""
    finals = set(b.finals)
    s0 = b.state()
    for f in b.embed(open_, s0):
        b.eps.append((f, start))
    entry = b.state()
    for f in finals:
        b.eps.append((f, entry))
    end = b.state()
    for f in b.embed(close, entry):
        b.eps.append((f, end))
    b.finals = {end}
    out = b.build(s0)
    out._cache["is_empty"] = not finals
    return out


_META: dict = {}


def _inline_definitions(meta: dict) -> dict:
    """``meta`` with every ``{"$ref": "#/definitions/X"}`` / ``{"$ref": "#/$defs/X"}`` (a bare
    reference) replaced by X's schema, itself inlined; references that recur into themselves
    stay references, and the definitions stay for them.  A bare ``$ref`` applies exactly its
    target, so verdicts and errors (message, instance path, order) are unchanged; each reference
    resolution it saves cost ~0.02 ms per validated node (check_schema: Draft 4 1.5 -> 1.05 ms,
    flattened Draft 2020-12 4.0 -> 2.5 ms per Github/GlaiveAI/Kubernetes schema, measured here).
    """
    defs = {**meta.get("definitions", {}), **meta.get("$defs", {})}

    def go(x, stack):
        if isinstance(x, dict):
            ref = x.get("$ref")
            if len(x) == 1 and isinstance(ref, str) and ref.startswith(("#/definitions/",
                                                                        "#/$defs/")):
                name = ref.split("/", 2)[2]
                if name in defs and "/" not in name and name not in stack:
                    return go(defs[name], stack | {name})
                return x
            return {k: v if k in ("definitions", "$defs") else go(v, stack)
                    for k, v in x.items()}
        if isinstance(x, list):
            return [go(v, stack) for v in x]
        return x

    return go(meta, frozenset())


def _meta_validator(cls):
    """A validator of ``cls``'s meta-schema with its definitions inlined
    (:func:`_inline_definitions`); for Draft 2020-12, of the flattened meta-schema
    (:func:`_draft2020_meta_schema`).  Same verdicts and first errors as ``cls.check_schema``.
    Built once per process and draft."""
    v = _META.get(cls)
    if v is None:
        v = _META[cls] = cls(_meta_schema(cls.__name__), format_checker=cls.FORMAT_CHECKER)
    return v


#: ``$schema`` URIs (normalized as ``jsonschema``'s ``validator_for`` does: no empty fragment)
#: -> name of the ``jsonschema`` validator class, and of the meta-schema in
#: ``jsonschema_specifications``.
_DIALECTS = {
    "http://json-schema.org/draft-03/schema": "Draft3Validator",
    "http://json-schema.org/draft-04/schema": "Draft4Validator",
    "http://json-schema.org/draft-06/schema": "Draft6Validator",
    "http://json-schema.org/draft-07/schema": "Draft7Validator",
    "https://json-schema.org/draft/2019-09/schema": "Draft201909Validator",
    "https://json-schema.org/draft/2020-12/schema": "Draft202012Validator",
}


def _validator_name(schema: Any) -> str | None:
    """Name of the ``jsonschema`` class ``validator_for(schema, default=Draft 2020-12)`` picks,
    without importing ``jsonschema``; None for a ``$schema`` it does not know."""
    if not isinstance(schema, dict) or "$schema" not in schema:
        return "Draft202012Validator"
    ms = schema["$schema"]
    if not isinstance(ms, str):
        return None
    return _DIALECTS.get(ms[:-1] if ms.endswith("#") else ms)


def _meta_schema(name: str) -> dict:
    """The meta-schema (definitions inlined; Draft 2020-12 flattened) of validator class
    ``name``, read from ``jsonschema_specifications`` (what ``cls.META_SCHEMA`` is) without
    importing ``jsonschema``: importing it costs ~1 s where its optional format checkers are
    installed (``rfc3987-syntax`` builds 39 Lark parsers at import).  Once per process."""
    meta = _META.get(name)
    if meta is None:
        if name == "Draft202012Validator":
            raw = _draft2020_meta_schema()
        else:
            from jsonschema_specifications import REGISTRY

            uri = next(u for u, n in _DIALECTS.items() if n == name)
            raw = REGISTRY.contents(uri + ("#" if "draft-0" in uri else ""))
        meta = _META[name] = _inline_definitions(raw)
    return meta


_PCHAR = r"(?:[A-Za-z0-9_.~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})"
_QUERY = r"(?:[A-Za-z0-9_.~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*"
_AUTH = r"(?:[A-Za-z0-9_.~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*(?::[0-9]*)?"
_PATHS = (rf"(?://{_AUTH}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"
          rf"|{_PCHAR}+(?:/{_PCHAR}*)*|)")
_TAIL = rf"(?:\?{_QUERY})?(?:#{_QUERY})?"
#: Conservative subsets of RFC 3986 ``URI`` and ``URI-reference`` (no user info, no IP
#: literals, ASCII only): a string they match is valid under every checker ``jsonschema`` may
#: use (rfc3987, rfc3986-validator, or none).  A string they miss is not shown valid here and
#: goes to ``jsonschema``.
_URI_RE = re.compile(rf"[A-Za-z][A-Za-z0-9+.-]*:{_PATHS}{_TAIL}")
_URI_REF_RE = re.compile(
    rf"(?:[A-Za-z][A-Za-z0-9+.-]*:{_PATHS}|(?://{_AUTH}(?:/{_PCHAR}*)*"
    rf"|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|(?:[A-Za-z0-9_.~!$&'()*+,;=@-]|%[0-9A-Fa-f]{{2}})+"
    rf"(?:/{_PCHAR}*)*|)){_TAIL}")


def _meta_format_ok(x: Any, fmt: str) -> bool:
    """True only if ``x`` conforms to the meta-schemas' ``format`` ``fmt`` (``regex``, ``uri``,
    ``uri-reference``) under ``jsonschema``'s format checker, whatever checker libraries are
    installed; False means "not shown here"."""
    if not isinstance(x, str):
        return True  # formats apply to strings only
    if fmt == "regex":
        try:
            re.compile(x)  # what jsonschema's checker does
        except re.error:
            return False
        return True
    if fmt == "uri":
        return _URI_RE.fullmatch(x) is not None
    if fmt == "uri-reference":
        return _URI_REF_RE.fullmatch(x) is not None
    return False


#: Meta-schema keywords :func:`_meta_ok` ignores (annotations and definition containers).
_META_ANNOTATIONS = frozenset({
    "$schema", "$id", "id", "title", "description", "default", "$comment", "deprecated",
    "definitions", "$defs", "examples", "readOnly", "writeOnly"})
_META_TYPES = {
    "object": lambda x: isinstance(x, dict), "array": lambda x: isinstance(x, list),
    "string": lambda x: isinstance(x, str), "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
    "integer": lambda x: isinstance(x, int) and not isinstance(x, bool),
    "number": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
}


def _meta_ok(meta: Any, x: Any, root: dict, cls) -> bool:
    """True only if ``x`` is valid against the meta-schema node ``meta`` (``root``: the
    meta-schema :func:`_meta_validator` validates with, ``cls``: its validator class or that
    class's name); False means "not shown valid here", and the caller asks ``jsonschema`` for
    the verdict and the
    first error.  A direct interpreter of the few keywords meta-schemas use; any other keyword,
    a non-local ``$ref`` or a value outside the cases handled gives False.  Same verdict on every
    schema where it returns True (all 9,557 JSONSchemaBench schemas and the Test Suite under
    Drafts 4/6/7/2020-12, 11,189 checks: never True on an invalid one, True on 11,020 of the
    11,058 valid ones; test_meta_validator_agrees_with_check_schema); 0.27 ms per schema on
    average where jsonschema takes 1.7 ms (measured here)."""
    if meta is True or meta == {}:
        return True
    if not isinstance(meta, dict):
        return False
    for k, v in meta.items():
        if k in _META_ANNOTATIONS:
            continue
        if k == "type":
            if isinstance(v, str):
                t = _META_TYPES.get(v)
                if t is None or not t(x):
                    return False
            elif not any(_META_TYPES[t](x) if t in _META_TYPES else False for t in v):
                return False
        elif k == "$ref":
            name = cls if isinstance(cls, str) else cls.__name__
            if len(meta) > 1 and name in ("Draft4Validator", "Draft6Validator",
                                          "Draft7Validator", "Draft3Validator"):
                return False  # siblings of $ref are ignored before 2019-09: not handled here
            if v == "#":
                if not _meta_ok(root, x, root, cls):
                    return False
            elif isinstance(v, str) and v.startswith(("#/definitions/", "#/$defs/")):
                part, name = v[2:].split("/", 1)
                target = root.get(part, {}).get(name)
                if target is None or not _meta_ok(target, x, root, cls):
                    return False
            else:
                return False
        elif k == "properties":
            if isinstance(x, dict):
                for name, sub in v.items():
                    if name in x and not _meta_ok(sub, x[name], root, cls):
                        return False
        elif k == "additionalProperties":
            if "patternProperties" in meta:
                return False
            if isinstance(x, dict):
                known = meta.get("properties", {})
                for name, val in x.items():
                    if name not in known and (v is False or not _meta_ok(v, val, root, cls)):
                        return False
        elif k == "propertyNames":
            if isinstance(x, dict) and not all(_meta_ok(v, name, root, cls) for name in x):
                return False
        elif k == "items":
            if isinstance(x, list):
                if not isinstance(v, (dict, bool)):
                    return False
                if not all(_meta_ok(v, y, root, cls) for y in x):
                    return False
        elif k in ("allOf", "anyOf"):
            ok = (all if k == "allOf" else any)(_meta_ok(s, x, root, cls) for s in v)
            if not ok:
                return False
        elif k == "enum":
            if not (isinstance(x, str) and x in v):
                return False
        elif k in ("minItems", "uniqueItems"):
            if isinstance(x, list):
                if k == "minItems" and len(x) < v:
                    return False
                if k == "uniqueItems" and v:
                    # primitives distinct as Python values are distinct JSON values too
                    if (not all(isinstance(y, (str, int, float)) or y is None for y in x)
                            or len(set(x)) != len(x)):
                        return False
        elif k in ("minimum", "exclusiveMinimum"):
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                if isinstance(v, bool):  # Draft 4: a flag on minimum
                    if v and not x > meta["minimum"]:
                        return False
                elif x < v or (k == "exclusiveMinimum" and x == v):
                    return False
                elif k == "minimum" and meta.get("exclusiveMinimum") is True and x == v:
                    return False
        elif k == "format":
            if not _meta_format_ok(x, v):
                return False
        elif k == "pattern":
            if isinstance(x, str) and re.search(v, x) is None:  # re caches the compiled v
                return False
        elif k == "dependencies":
            if isinstance(x, dict):
                for name, dep in v.items():
                    if name in x:
                        if not isinstance(dep, list) or not all(d in x for d in dep):
                            return False
        else:
            return False
    return True


def _draft2020_meta_schema() -> dict:
    """The Draft 2020-12 meta-schema, flattened: its seven vocabulary meta-schemas merged into
    one (their property names and ``$defs`` names are disjoint) and every ``{"$dynamicRef":
    "#meta"}`` read as ``{"$ref": "#"}``, which is where it resolves when the standard
    meta-schema is the whole dynamic scope.  Same verdicts and first errors as
    ``Draft202012Validator.check_schema`` (all 5,074 Draft 2020-12 schemas of JSONSchemaBench and
    the Test Suite: 0 differences), ~5x faster: the ``allOf`` of vocabularies and the dynamic
    scope lookups cost 13 ms per schema there, 2.6 ms flattened (measured here, loaded
    machine)."""
    from jsonschema_specifications import REGISTRY

    base = "https://json-schema.org/draft/2020-12/"
    root = REGISTRY[base + "schema"].contents

    def flat(x):
        if isinstance(x, dict):
            if x == {"$dynamicRef": "#meta"}:
                return {"$ref": "#"}
            ref = x.get("$ref")
            if isinstance(ref, str) and ref.startswith("meta/"):  # meta/core#/$defs/...
                x = dict(x, **{"$ref": "#" + ref.split("#", 1)[1]})
            return {k: flat(v) for k, v in x.items()}
        if isinstance(x, list):
            return [flat(v) for v in x]
        return x

    props: dict = {}
    defs: dict = {}
    for part in [REGISTRY[base + a["$ref"]].contents for a in root["allOf"]] + [root]:
        for k, v in part.get("properties", {}).items():
            assert k not in props, k
            props[k] = v
        for k, v in part.get("$defs", {}).items():
            assert k not in defs, k
            defs[k] = v
    return flat({"$schema": base + "schema", "$id": "urn:tractable:draft2020-12-flat",
                 "type": ["object", "boolean"], "properties": props, "$defs": defs})


class JsonSchemaCompiler:
    """Compiles one (root) schema.  Use :func:`json_schema_to_nfa`/:func:`compile_json_schema`."""

    def __init__(
        self,
        schema: Any,
        *,
        whitespace: str | None = None,
        max_whitespace: int = 4,
        property_order: str = "schema",
        max_recursion_depth: int = 3,
        lenient: bool = False,
        validate: bool = True,
        assert_formats: bool = True,
        canonical: bool = True,
        max_exponent: int | None = None,
        free_value_depth: int | None = None,
        strict: bool = False,
        registry: Any = None,
    ):
        if whitespace is None:
            whitespace = "compact" if canonical else "any"
        if whitespace not in _WHITESPACE:
            raise ValueError(f"whitespace must be one of {_WHITESPACE}, not {whitespace!r}")
        if property_order not in ("schema", "any"):
            raise ValueError(f"property_order must be 'schema' or 'any', not {property_order!r}")
        if max_recursion_depth < 0 or max_whitespace < 0:
            raise ValueError("max_recursion_depth and max_whitespace must be >= 0")
        if free_value_depth is not None and free_value_depth < 0:
            raise ValueError("free_value_depth must be >= 0")
        schema = _schema_of(schema)
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise InvalidSchemaError(f"not JSON: {e}") from None
        if not isinstance(schema, (dict, bool)):
            raise InvalidSchemaError(
                f"a schema is an object or a boolean, not {type(schema).__name__}")
        self.root = schema
        self.lenient = lenient
        self.assert_formats = assert_formats
        self.property_order = property_order
        self.strict = strict
        self.strict_used = False
        self.legacy_dependencies: set[str] = set()
        self.max_depth = max_recursion_depth
        self.free_depth = FREE_VALUE_DEPTH if free_value_depth is None else free_value_depth
        self.unlisted_depth = (min(self.free_depth, UNLISTED_VALUE_DEPTH)
                               if free_value_depth is None else self.free_depth)
        self.dropped: list[tuple[str, str, str]] = []
        self.ignored: set[str] = set()
        self.truncated: set[str] = set()
        self.canonical = canonical
        if max_exponent is not None and max_exponent < 0:
            raise ValueError("max_exponent must be >= 0")
        self.max_exponent = max_exponent
        flexible = whitespace == "flexible" and max_whitespace > 0
        if whitespace == "any":
            self.ws = _WS_ANY
        else:
            self.ws = N.repeat(N.byteset(_WS_MASK), 0, max_whitespace) if flexible else None
        # shared automata (free values) depend on the whitespace and the spelling
        self._ws_key = (whitespace, max_whitespace if flexible else 0, canonical)
        self.registry = registry
        self._make_validator(schema, validate)
        self.draft = self._draft(schema)
        self._refs = RefResolver(schema, registry, self.draft)
        ms = schema.get("$schema") if isinstance(schema, dict) else None
        if isinstance(ms, str) and not re.match(
                r"https?://json-schema\.org/(draft-0[3467]/schema|draft/20(19-09|20-12)/schema)#?$",
                ms):
            self._unsupported("$schema", "#/$schema", f"custom meta-schema {ms!r}")
        self._cache: dict[tuple, list[_Leaf]] = {}
        self._nfa_cache: dict[tuple, ByteNFA] = {}
        self._neg_cache: dict[str, tuple[Any]] = {}
        self._oneof_exact: dict[str, bool] = {}  # oneOf pointer -> compiled as B_i & not B_j
        self._reach: dict[str, frozenset[str]] = {}
        self._states = 0
        self.free_depth_used = False
        self.unlisted_used = False
        tok = (lambda s: N.concat(self.ws, N.literal(s), self.ws)) if self.ws else N.literal
        self.COMMA = tok(",")
        self.COLON = tok(":")

    # ------------------------------------------------------------------ setup

    @staticmethod
    def _draft(schema: Any) -> int:
        s = schema.get("$schema", "") if isinstance(schema, dict) else ""
        for key, d in (("draft-03", 3), ("draft-04", 4), ("draft-06", 6), ("draft-07", 7),
                       ("2019-09", 2019)):
            if key in s:
                return d
        return 2020

    @staticmethod
    def _make_validator(schema: Any, validate: bool) -> None:
        """Check ``schema`` against its meta-schema: :class:`InvalidSchemaError` with the
        pointer of ``jsonschema``'s first error.  :func:`_meta_ok` on the meta-schema read
        without importing ``jsonschema`` (:func:`_meta_schema`) shows most valid schemas valid
        in well under a millisecond; the others get ``jsonschema``'s verdict."""
        if not validate:
            return
        name = _validator_name(schema)
        if name is not None:
            meta = _meta_schema(name)
            if _meta_ok(meta, schema, meta, name):
                return
        import jsonschema
        from jsonschema.validators import validator_for

        cls = validator_for(schema, default=jsonschema.Draft202012Validator)
        meta_v = _meta_validator(cls)
        error = next(meta_v.iter_errors(schema), None)
        if error is not None:
            path = "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1")
                                 for p in error.path)
            raise InvalidSchemaError(error.message, path)

    @property
    def _validator(self):
        """``jsonschema``'s validator of the root schema (enum values, serialization), built on
        first use, resolving ``$ref`` with the same registry as the compiler: it never fetches
        from the network either."""
        v = self.__dict__.get("_jsv")
        if v is None:
            import jsonschema
            from jsonschema.validators import validator_for

            from .json_refs import jsonschema_registry

            cls = validator_for(self.root, default=jsonschema.Draft202012Validator)
            v = self._jsv = cls(self.root, format_checker=cls.FORMAT_CHECKER,
                                registry=jsonschema_registry(self.registry, self.root))
        return v

    # ------------------------------------------------------------------ errors

    def _unsupported(self, keyword: str, pointer: str, detail: str = "") -> None:
        if not self.lenient:
            raise UnsupportedSchemaError(keyword, pointer, detail)
        self.dropped.append((keyword, pointer, detail))

    # ------------------------------------------------------------------ references

    def _resolve(self, ref: str, pointer: str) -> tuple[Any, str]:
        """The node the ``$ref`` ``ref`` at ``pointer`` names and its pointer (``#/...`` in the
        root schema, ``<URI>#/...`` in a registry document): see :mod:`.json_refs`.  Raises
        :class:`~.errors.UnresolvedReferenceError` for a document not in the registry."""
        return self._refs.resolve(ref, pointer)

    def _reachable_refs(self, node: Any, ptr: str) -> frozenset[str]:
        """Ref targets reachable from ``node`` (transitively)."""
        hit = self._reach.get(ptr)
        if hit is not None:
            return hit
        self._reach[ptr] = frozenset()  # cycle guard
        out: set[str] = set()
        stack = [(node, ptr)]
        while stack:
            x, p = stack.pop()
            if isinstance(x, dict):
                for k, v in x.items():
                    if k == "$ref" and isinstance(v, str):
                        try:
                            t, tp = self._resolve(v, p)
                        except Exception:
                            continue
                        if tp not in out:
                            out.add(tp)
                            out |= self._reachable_refs(t, tp)
                    elif k not in ("enum", "const", "default", "examples"):
                        stack.append((v, _ptr(p, k)))
            elif isinstance(x, list):
                stack.extend((v, _ptr(p, i)) for i, v in enumerate(x))
        res = frozenset(out)
        self._reach[ptr] = res
        return res

    # ------------------------------------------------------------------ expansion

    def _check_keywords(self, s: dict, p: str) -> None:
        for k, v in s.items():
            if k in ("if", "then", "else") and self.draft < 7:
                self.ignored.add(k)  # not a keyword before draft 7
                continue
            if k in _SUPPORTED or k in _ANNOTATIONS:
                continue
            if k in _UNSUPPORTED:
                if k == "uniqueItems":
                    continue  # enforced by _array (see .unique_compile)
                if k == "maxContains" and "contains" not in s:
                    continue
                if k in ("unevaluatedProperties", "unevaluatedItems") and v is True:
                    continue
                if k == "$recursiveRef":
                    self._unsupported(k, _ptr(p, k))
                    continue
                self._unsupported(k, _ptr(p, k))
                continue
            self.ignored.add(k)

    def _expand(self, items, stack: tuple[str, ...]):
        """Flatten ``allOf``/``$ref``; return (flat nodes, disjunctions, stack) or None (false)."""
        work = list(items)
        flat: list[tuple[dict, str]] = []
        disj: list[tuple[str, list, str]] = []
        i = 0
        while i < len(work):
            s, p = work[i]
            i += 1
            if s is True:
                continue
            if s is False:
                return None
            if not isinstance(s, dict):
                raise InvalidSchemaError("a schema is an object or a boolean", p)
            synth = isinstance(s, _Synth)
            if not synth:
                self._check_keywords(s, p)
            ref = s.get("$ref")
            if isinstance(ref, str):
                target, tp = self._resolve(ref, _ptr(p, "$ref"))
                if tp in self._reachable_refs(target, tp):  # recursive
                    if stack.count(tp) >= self.max_depth:
                        self.truncated.add(tp)
                        return None
                stack = stack + (tp,)
                work.append((target, tp))
                if self.draft <= 7:
                    continue
            flat.append((s, p))
            ptrs = s.get("$ptrs") if synth else None
            for j, sub in enumerate(s.get("allOf", ()) or ()):
                work.append((sub, ptrs[j] if ptrs else _ptr(p, "allOf", j)))
            for kind in ("anyOf", "oneOf"):
                if kind in s:
                    branches = [(b, _ptr(p, kind, j)) for j, b in enumerate(s[kind])]
                    disj.append((kind, branches, _ptr(p, kind)))
            if synth:
                continue  # its "not" (for jsonschema) is carried by the internal keys
            if "not" in s:
                neg = self._negation(s["not"], _ptr(p, "not"))
                if neg is False:
                    return None
                if neg is not True:
                    work.append((neg, _ptr(p, "not") + "/~neg"))
            if "if" in s and self.draft >= 7 and ("then" in s or "else" in s):
                # (if & then) | (not if & else): two disjoint branches, the negation built as
                # for "not"
                ip = _ptr(p, "if")
                try:
                    neg = self._negate(s["if"], ip)
                except _NoNegation as e:
                    self._unsupported("if", ip, f"the instances failing 'if' cannot be written "
                                      f"({e.detail} at {e.pointer})")
                    neg = None
                if neg is not None:
                    yes = _Synth(allOf=[s["if"], s.get("then", True)],
                                 **{"$ptrs": [ip, _ptr(p, "then")]})
                    no = _Synth(allOf=[neg, s.get("else", True)],
                                **{"$ptrs": [ip + "/~neg", _ptr(p, "else")]})
                    disj.append(("anyOf", [(yes, ip + "/~then"), (no, ip + "/~else")], ip))
            for kw in ("dependentRequired", "dependentSchemas", "dependencies"):
                for k, dep in (s.get(kw) or {}).items() if isinstance(s.get(kw), dict) else ():
                    dp = _ptr(p, kw, k)
                    if kw == "dependencies" and self.draft >= 2019:
                        self.legacy_dependencies.add(dp)
                    if isinstance(dep, list):
                        if not dep or all(r == k for r in dep):
                            continue
                        present: Any = _Synth(type="object", required=[k, *dep])
                    elif dep is True:
                        continue
                    elif dep is False:
                        present = False
                    elif isinstance(dep, dict):
                        present = _Synth(type="object", required=[k], allOf=[dep], **{
                            "$ptrs": [dp]})
                    else:
                        raise InvalidSchemaError(f"{kw} values are arrays or schemas", dp)
                    # if k is present the object also satisfies dep: (k absent) | (k present
                    # & dep), two disjoint branches (non-objects satisfy the first)
                    absent = _Synth(properties={k: False})
                    if present is False:
                        work.append((absent, dp + "/~absent"))
                    else:
                        disj.append(("anyOf", [(absent, dp + "/~absent"),
                                               (present, dp + "/~present")], dp))
        return flat, disj, stack

    # ------------------------------------------------------------------ negation

    def _negation(self, schema: Any, ptr: str) -> Any:
        """``not`` at ``ptr``: the negated schema, or True where it cannot be negated exactly
        (lenient: dropped with a warning; otherwise :class:`UnsupportedSchemaError`)."""
        try:
            return self._negate(schema, ptr)
        except _NoNegation as e:
            self._unsupported(e.keyword, ptr if e.keyword == "not" else e.pointer, e.detail)
            return True

    def _negate(self, schema: Any, ptr: str) -> Any:
        """A schema valid on exactly the instances ``schema`` rejects (True, False or a
        :class:`_Synth`), built structurally by De Morgan: the negation of a conjunction of
        keywords is the disjunction of the keywords' negations, and a keyword that applies to
        one JSON type t is false only on instances of type t (``not {"required": ["a"]}`` is
        "an object without a").  Exact forms: type, enum/const (scalar values and arrays of
        scalars), allOf/anyOf/not, required, properties, min/maxProperties, items (via
        contains), contains, min/maxItems, min/maxLength, pattern (complement of the pattern
        automaton), minimum/maximum/exclusive*.  Anything else raises :class:`_NoNegation`."""
        hit = self._neg_cache.get(ptr)
        if hit is not None:
            return hit[0]
        out = self._or(self._neg_disjuncts(schema, ptr, frozenset()))
        self._neg_cache[ptr] = (out,)
        return out

    @staticmethod
    def _or(ds: list) -> Any:
        if any(d is True for d in ds):
            return True
        ds = [d for d in ds if d is not False]
        if not ds:
            return False
        return ds[0] if len(ds) == 1 else _Synth(anyOf=ds)

    def _neg_disjuncts(self, s: Any, ptr: str, refs: frozenset) -> list:
        if s is True:
            return [False]
        if s is False:
            return [True]
        if not isinstance(s, dict):
            raise InvalidSchemaError("a schema is an object or a boolean", ptr)
        out: list = []
        ref = s.get("$ref")
        if isinstance(ref, str):
            target, tp = self._resolve(ref, _ptr(ptr, "$ref"))
            if tp in refs or tp in self._reachable_refs(target, tp):
                raise _NoNegation("not", ptr, f"negation of the recursive $ref {ref!r}")
            out += self._neg_disjuncts(target, tp, refs | {tp})
            if self.draft <= 7:
                return out
        for k, v in s.items():
            kp = _ptr(ptr, k)
            if k == "type":
                names = [v] if isinstance(v, str) else list(v)
                allowed: set[str] = set()
                for name in names:
                    if name not in _TYPE_MAP and name != "any":
                        raise InvalidSchemaError(f"unknown type {name!r}", kp)
                    allowed |= _ALL_TYPES if name == "any" else _TYPE_MAP[name]
                out.append(self._types_schema(_ALL_TYPES - allowed))
            elif k in ("enum", "const"):
                vals = [v] if k == "const" else list(v)
                out.append(_Synth({"not": {"enum": vals}, "$not-enum": (vals, kp)}))
            elif k == "allOf":
                for j, sub in enumerate(v):
                    out += self._neg_disjuncts(sub, _ptr(kp, j), refs)
            elif k == "anyOf":
                parts = [self._or(self._neg_disjuncts(sub, _ptr(kp, j), refs))
                         for j, sub in enumerate(v)]
                if any(x is False for x in parts):
                    out.append(False)
                else:
                    parts = [x for x in parts if x is not True]
                    out.append(_Synth(allOf=parts) if parts else True)
            elif k == "not":
                out.append(_Synth(allOf=[v], **{"$ptrs": [kp]}))  # not not v = v
            elif k == "required":
                out += [_Synth(type="object", properties={name: False}) for name in v]
            elif k == "properties":
                for name, sub in v.items():
                    n = self._or(self._neg_disjuncts(sub, _ptr(kp, name), refs))
                    if n is not False:
                        out.append(_Synth(type="object", required=[name], properties={name: n}))
            elif k in ("minProperties", "maxProperties", "minItems", "maxItems", "minLength",
                       "maxLength"):
                n = int(v)
                t = {"P": "object", "I": "array", "L": "string"}[k[3]]
                if k.startswith("min"):
                    out.append(_Synth({"type": t, "max" + k[3:]: n - 1}) if n > 0 else False)
                else:
                    out.append(_Synth({"type": t, "min" + k[3:]: n + 1}))
            elif k == "pattern":
                out.append(_Synth({"type": "string", "not": {"pattern": v},
                                   "$not-pattern": (v, kp)}))
            elif k in ("minimum", "maximum"):
                # x >= m fails where x < m; x > m (draft 4: exclusiveMinimum true) where x <= m
                excl = s.get("exclusive" + k[0].upper() + k[1:]) is True
                other = "maximum" if k == "minimum" else "minimum"
                out.append(self._bound(other, v, not excl))
            elif k in ("exclusiveMinimum", "exclusiveMaximum"):
                if isinstance(v, bool):
                    continue  # draft 4: read with minimum/maximum
                out.append(self._bound("maximum" if k == "exclusiveMinimum" else "minimum", v,
                                       False))
            elif k == "items" and not isinstance(v, list) and (
                    self.draft < 2020 or "prefixItems" not in s):
                n = self._or(self._neg_disjuncts(v, kp, refs))
                if n is not False:  # some item fails v
                    out.append(_Synth(type="array", contains=n))
            elif k == "contains":
                if "maxContains" in s or int(s.get("minContains", 1)) > 1:
                    raise _NoNegation("not", ptr, "negation of contains with min/maxContains")
                if int(s.get("minContains", 1)) == 0:
                    continue
                n = self._or(self._neg_disjuncts(v, kp, refs))
                if n is not True:  # no item satisfies v
                    out.append(_Synth(type="array", items=n) if n is not False
                               else _Synth(type="array", maxItems=0))
                else:
                    out.append(_Synth(type="array"))
            elif k == "additionalProperties":
                if "patternProperties" in s:
                    raise _NoNegation("not", ptr, "negation of additionalProperties with "
                                      "patternProperties")
                n = self._or(self._neg_disjuncts(v, kp, refs))
                if n is not False:  # some key outside properties has a value failing v
                    names = list(s.get("properties") or {})
                    out.append(_Synth({
                        "type": "object",
                        "not": {"properties": {x: True for x in names}, "additionalProperties": v},
                        "$extra": (names, n, kp + "/~neg")}))
            elif k in ("if", "then", "else") and self.draft < 7:
                continue
            elif k in ("minContains", "maxContains", "$ref") or (
                    k == "uniqueItems" and v is False) or (
                    k in ("additionalProperties", "additionalItems") and v is True):
                continue
            elif k == "format":
                if (self.assert_formats and isinstance(v, str)
                        and (v in FORMATS or v in _CHECKED_FORMATS)):
                    raise _NoNegation("not", ptr, f"negation of format {v!r} (format automata "
                                      "may be documented subsets)")
            elif k in _SUPPORTED or k in _UNSUPPORTED:
                raise _NoNegation("not", ptr, f"negation of {k!r}")
        return out

    def _bound(self, kw: str, v: Any, strict: bool) -> _Synth:
        """Numbers with ``kw`` (minimum/maximum) ``v``, exclusive if ``strict``, written in
        the draft's own form."""
        if not strict:
            return _Synth({"type": "number", kw: v})
        if self.draft <= 4:
            return _Synth({"type": "number", kw: v, "exclusive" + kw[0].upper() + kw[1:]: True})
        return _Synth({"type": "number", "exclusive" + kw[0].upper() + kw[1:]: v})

    @staticmethod
    def _types_schema(types: set[str]) -> Any:
        """A schema of exactly the internal types ``types`` (``fraction`` = a non-integer
        number: ``{"type": "number", "not": {"type": "integer"}}`` for jsonschema)."""
        if not types:
            return False
        if types == _ALL_TYPES:
            return True
        names = sorted(t for t in types if t not in ("integer", "fraction"))
        if "integer" in types and "fraction" in types:
            return _Synth(type=names + ["number"])
        if "integer" in types:
            return _Synth(type=names + ["integer"])
        if "fraction" not in types:
            return _Synth(type=names)
        frac = _Synth({"type": "number", "not": {"type": "integer"}, "$fraction": True})
        return frac if not names else _Synth(anyOf=[_Synth(type=names), frac])

    def _stack_key(self, ptrs: tuple[str, ...], stack: tuple[str, ...], nodes) -> tuple:
        if not stack:
            return ()
        reach: set[str] = set()
        for node, p in nodes:
            reach |= self._reachable_refs(node, p)
        return tuple(sorted((t, stack.count(t)) for t in set(stack) if t in reach))

    # ------------------------------------------------------------------ compile

    def compile_items(self, items, stack: tuple[str, ...] = ()) -> ByteNFA:
        """The value automaton of the conjunction of ``items`` ((schema, pointer) pairs)."""
        ptrs = tuple(p for _, p in items)
        key = (ptrs, self._stack_key(ptrs, stack, items))
        hit = self._nfa_cache.get(key)
        if hit is not None:
            return self._reused(hit, key)
        ex = self._expand(items, stack)
        fkey = self._flat_key(ex)
        hit = self._nfa_cache.get(fkey)
        if hit is not None:  # the same conjunction reached through other $refs / pointers
            return self._reused(hit, key, fkey)
        leaves = self._leaves(items, stack, ex)
        depth = next((d for d in (self.free_depth, self.unlisted_depth) if len(leaves) == 1
                      and leaves[0] is _SHARED.get(("any", d, self._ws_key))), None)
        if depth is not None:
            # an unconstrained value: the same automaton for every compiler
            skey = ("any-value", depth, self._ws_key)
            out = _SHARED.get(skey)
            if out is None:
                out = _share(skey, N.finalize(N.union(*leaves[0].parts.values())))
            self._nfa_cache[key] = self._nfa_cache[fkey] = out
            return out
        parts = [a for lf in leaves for a in lf.parts.values()]
        out = N.union(*parts) if parts else N.nothing()
        known = [x._cache.get("is_empty") for x in parts]
        if len(parts) > 1 and None not in known:
            out._cache["is_empty"] = all(known)
        self._nfa_cache[key] = self._nfa_cache[fkey] = out
        return out

    def _reused(self, hit: ByteNFA, *keys) -> ByteNFA:
        """A cached value automaton used again: finalized now if it was left raw (see
        :data:`MIN_FINALIZE_REUSED`), and recorded under ``keys``."""
        if MIN_FINALIZE_REUSED < hit.num_states <= MAX_FINALIZE_REUSED:
            hit = N.finalize(hit)
        for k in keys:
            self._nfa_cache[k] = hit
        return hit

    def _flat_key(self, ex) -> tuple:
        """A cache key for an expanded conjunction: the pointers of its flat nodes that
        constrain anything (a node holding only ``$ref`` and annotations adds nothing beyond
        its target, which is in ``flat`` too), its disjunctions, and the recursion counts of
        the refs reachable from it.  One conjunction reached by many paths (170 properties
        ``$ref``-ing one definition) is compiled once."""
        if ex is None:
            return ("flat", None)
        flat, disj, st = ex
        fp = tuple(p for s, p in flat if isinstance(s, _Synth) or set(s) & _VALIDATION)
        return ("flat", fp, tuple(d[2] for d in disj),
                self._stack_key(fp, st, [(s, p) for s, p in flat]))

    def _leaves(self, items, stack, ex: Any = False) -> list[_Leaf]:
        ptrs = tuple(p for _, p in items)
        key = ("leaves", ptrs, self._stack_key(ptrs, stack, items))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if ex is False:
            ex = self._expand(items, stack)
        fkey = ("leaves",) + self._flat_key(ex)
        hit = self._cache.get(fkey)
        if hit is not None:
            self._cache[key] = hit
            return hit
        if ex is None:
            out: list[_Leaf] = []
        else:
            flat, disj, st = ex
            if not disj and all(not (set(s) & _VALIDATION) for s, _ in flat):
                unlisted = flat and all(s is _UNLISTED for s, _ in flat)
                depth = self.unlisted_depth if unlisted else self.free_depth
                if unlisted and depth < self.free_depth:
                    self.unlisted_used = True
                self._cache[key] = self._cache[fkey] = out = [self._any_leaf(depth)]
                return out
            combos = 1
            for _, br, dp in disj:
                combos *= max(1, len(br))
                if combos > MAX_COMBINATIONS:
                    raise UnsupportedSchemaError(
                        "anyOf" if "anyOf" in dp.rsplit("/", 1)[-1] else "oneOf", dp,
                        f"more than {MAX_COMBINATIONS} combinations of anyOf/oneOf branches")
            out = self._distribute(flat, disj, st)
        self._cache[key] = self._cache[fkey] = out
        return out

    def _distribute(self, flat, disj, stack) -> list[_Leaf]:
        if not disj:
            leaf = self._leaf(flat, stack)
            return [leaf] if leaf.parts else []
        kind, branches, dptr = disj[0]
        per_branch: list[list[_Leaf]] = []
        for b in branches:
            ex = self._expand([b], stack)
            if ex is None:
                per_branch.append([])
                continue
            f2, d2, st2 = ex
            per_branch.append(self._distribute(flat + f2, disj[1:] + d2, st2))
        if kind == "oneOf":
            why = self._check_disjoint(per_branch)
            if why:
                by_type = self._one_of_by_type(per_branch)
                if by_type is not None:
                    self._oneof_exact.setdefault(dptr, False)
                    return by_type
            self._oneof_exact.setdefault(dptr, bool(why))
            if why:
                try:
                    return self._one_of_exact(flat, branches, disj[1:], stack, dptr)
                except _NoNegation as e:
                    self._oneof_exact[dptr] = False
                    self._unsupported(
                        "oneOf", dptr, f"{why}, and {e.detail} at {e.pointer} cannot be "
                        "expressed; lenient mode compiles them as anyOf")
        return [lf for br in per_branch for lf in br]

    def _one_of_by_type(self, per_branch: list[list[_Leaf]]) -> list[_Leaf] | None:
        """``oneOf`` decided one JSON type at a time, when for each type t either the branches
        accepting some t are pairwise disjoint on t (each keeps its values), or at least two
        branches accept every value of type t (no value of type t is in exactly one branch: t
        is dropped).  Exact; None when some type is neither.  A typical case: two closed
        object branches told apart by a key, with no ``type`` keyword, so that both accept
        every non-object."""
        dropped: set[str] = set()
        for t in ("null", "boolean", "number", "string", "array", "object"):
            having = [i for i, br in enumerate(per_branch) if any(t in lf.parts for lf in br)]
            if len(having) < 2:
                continue
            free = [i for i in having if any(t in lf.free_types for lf in per_branch[i])]
            if len(free) >= 2:
                dropped.add(t)
                continue
            for x in range(len(having)):
                for y in range(x + 1, len(having)):
                    for a in per_branch[having[x]]:
                        for b in per_branch[having[y]]:
                            if t in a.parts and t in b.parts and self._overlap_type(a, b, t):
                                return None
        out = []
        for br in per_branch:
            for lf in br:
                parts = {t: a for t, a in lf.parts.items() if t not in dropped}
                if parts:
                    obj = "object" in parts
                    out.append(_Leaf(parts, lf.required_values if obj else {},
                                     lf.object_keys if obj else None,
                                     lf.free_types - dropped, lf.key_values if obj else None))
        return out

    def _check_disjoint(self, per_branch: list[list[_Leaf]]) -> str:
        for i in range(len(per_branch)):
            for j in range(i + 1, len(per_branch)):
                for a in per_branch[i]:
                    for b in per_branch[j]:
                        why = self._overlap(a, b)
                        if why:
                            return f"branches {i} and {j} are not provably disjoint ({why})"
        return ""

    def _one_of_exact(self, flat, branches, rest, stack, dptr) -> list[_Leaf]:
        """Overlapping ``oneOf`` branches B_i, exactly: the union over i of B_i and not B_j
        for every j != i (the negations by :meth:`_negate`), at most
        :data:`MAX_COMBINATIONS` leaves.  Raises :class:`_NoNegation`."""
        negs = [self._negate(b, bp) for b, bp in branches]

        def width(x):
            return len(x["anyOf"]) if isinstance(x, _Synth) and "anyOf" in x else 1

        combos = 0
        for i in range(len(branches)):
            c = 1
            for j, n in enumerate(negs):
                if j != i:
                    c *= width(n)
            combos += c
        if combos > MAX_COMBINATIONS:
            raise _NoNegation("oneOf", dptr, f"more than {MAX_COMBINATIONS} combinations of "
                              "branches and negated branches")
        out: list[_Leaf] = []
        for i, (b, bp) in enumerate(branches):
            others = [(n, bp2 + "/~neg") for j, (n, (_b2, bp2)) in enumerate(zip(negs, branches))
                      if j != i]
            if any(n is False for n, _ in others):
                continue
            conj = [(b, bp)] + [(n, np) for n, np in others if n is not True]
            ex = self._expand(conj, stack)
            if ex is None:
                continue
            f2, d2, st2 = ex
            out += self._distribute(flat + f2, rest + d2, st2)
        return out

    def _overlap(self, a: _Leaf, b: _Leaf) -> str:
        for t in set(a.parts) & set(b.parts):
            why = self._overlap_type(a, b, t)
            if why:
                return why
        return ""

    def _overlap_type(self, a: _Leaf, b: _Leaf, t: str) -> str:
        """Why the type-t parts of two leaves may share an instance ("" when provably not)."""
        x, y = a.parts[t], b.parts[t]
        if getattr(self, "marked", False):  # uniqueItems arrays: compare the plain languages
            x, y = demark(x), demark(y)
        if t == "object":
            if self._excluded(a, b) or self._excluded(b, a):
                return ""
            return "objects without a discriminating required property"
        if t == "array" and (_has_byte(x, 0x7B) or _has_byte(y, 0x7B)):
            return "arrays that may contain objects"
        if not _is_empty(N.intersect(x, y)):
            return f"both accept some {t}"
        return ""

    @staticmethod
    def _excluded(a: _Leaf, b: _Leaf) -> bool:
        """Some key every object of ``a`` has, that no object of ``b`` has with such a value:
        ``b`` is closed without the key, or declares it with disjoint values (compared as
        strings only for values without objects, whose serialization is unique)."""
        for k, x in a.required_values.items():
            if b.object_keys is not None and k not in b.object_keys:
                return True
            y = b.key_values.get(k)
            if y is None or _may_hold_object(demark(x)) or _may_hold_object(demark(y)):
                continue
            x, y = demark(x), demark(y)
            if _is_empty(N.intersect(x, y)):
                return True
        return False

    # ------------------------------------------------------------------ free values

    def _any_leaf(self, depth: int) -> _Leaf:
        """An unconstrained value (schema ``true``), with arrays/objects nested at most
        ``depth`` levels (JSON of unbounded depth is not regular): a subset, with a warning."""
        self.free_depth_used = True
        key = ("any", depth, self._ws_key)
        hit = _SHARED.get(key)
        if hit is not None:
            return hit
        from .json_formats import _Builder

        string = self._spell(N.concat(_QUOTE, _BODY, _QUOTE))
        parts = {
            "null": N.literal("null"),
            "boolean": N.union(N.literal("true"), N.literal("false")),
            "number": number_nfa(False) if self.canonical else self._numbers(
                None, False, None, False),
            "string": string,
        }
        open_a = N.concat(N.literal("["), self.ws) if self.ws else N.literal("[")
        close_a = N.concat(self.ws, N.literal("]")) if self.ws else N.literal("]")
        open_o = N.concat(N.literal("{"), self.ws) if self.ws else N.literal("{")
        close_o = N.concat(self.ws, N.literal("}")) if self.ws else N.literal("}")
        if depth <= 0:
            parts["array"] = N.concat(open_a, close_a)
            parts["object"] = N.concat(open_o, close_o)
        else:
            sub = self._any_leaf(depth - 1)
            v = N.union(*sub.parts.values())
            for t, op, cl, item in (("array", open_a, close_a, v),
                                    ("object", open_o, close_o,
                                     N.concat(string, self.COLON, v))):
                # one shared copy of the item: open (item (COMMA item)*)? close
                b = _Builder()
                s0 = b.state()
                opened = b.state()
                for f in b.embed(op, s0):
                    b.eps.append((f, opened))
                item_in = b.state()
                after = b.state()
                b.eps.append((opened, item_in))
                for f in b.embed(item, item_in):
                    b.eps.append((f, after))
                for f in b.embed(self.COMMA, after):
                    b.eps.append((f, item_in))
                end = b.state()
                b.finals.add(end)
                for src in (opened, after):
                    for f in b.embed(cl, src):
                        b.eps.append((f, end))
                parts[t] = b.build(s0)
        # shared by every compiler with these whitespace settings: finalize once
        out = _Leaf({t: N.finalize(a) for t, a in parts.items()}, {})
        return _share(key, out)

    # ------------------------------------------------------------------ leaf

    def _leaf(self, flat, stack) -> _Leaf:
        types = set(_ALL_TYPES)
        for s, p in flat:
            t = s.get("type")
            if t is None:
                continue
            names = [t] if isinstance(t, str) else list(t)
            allowed: set[str] = set()
            for name in names:
                if name == "any":
                    allowed |= _ALL_TYPES
                elif name in _TYPE_MAP:
                    allowed |= _TYPE_MAP[name]
                else:
                    raise InvalidSchemaError(f"unknown type {name!r}", _ptr(p, "type"))
            types &= allowed
            if s.get("$fraction") is True and isinstance(s, _Synth):
                types &= {"fraction"}
        enum_values = _enum_values(flat)
        if enum_values is not None:
            return self._enum_leaf(flat, types, enum_values)
        parts: dict[str, ByteNFA] = {}
        required_values: dict[str, ByteNFA] = {}
        if "null" in types:
            parts["null"] = N.literal("null")
        if "boolean" in types:
            parts["boolean"] = N.union(N.literal("true"), N.literal("false"))
        if "integer" in types or "fraction" in types:
            a = self._number(flat, integer="fraction" not in types)
            if "integer" not in types:
                a = N.intersect(a, _HAS_DOT if self.canonical else self._non_integral())
            if not _is_empty(a):
                parts["number"] = a
        if "string" in types:
            a = self._string(flat, stack)
            if not _is_empty(a):
                parts["string"] = a
        if "array" in types:
            a = self._array(flat, stack)
            if a is not None:
                parts["array"] = a
        object_keys = key_values = None
        if "object" in types:
            r = self._object(flat, stack)
            if r is not None:
                parts["object"], required_values, object_keys, key_values = r
        for s, _p in flat:
            if isinstance(s, _Synth) and "$not-enum" in s:
                self._exclude_values(parts, *s["$not-enum"])
        if "string" in parts:
            parts["string"] = self._spell(parts["string"])
        return _Leaf(parts, required_values, object_keys, self._free_types(flat, types, parts),
                     key_values)

    def _non_integral(self) -> ByteNFA:
        return _non_integral(self.max_exponent)

    def _spell(self, a: ByteNFA) -> ByteNFA:
        """Every spelling of the canonical quoted strings ``a`` (itself when ``canonical``);
        cached on ``a`` (shared bodies, keys and formats are spelled once)."""
        if self.canonical:
            return a
        hit = a._cache.get("spelled")
        if hit is None:
            hit = a._cache["spelled"] = all_spellings(a)
        return hit

    @staticmethod
    def _free_types(flat, types: set[str], parts: dict[str, ByteNFA]) -> frozenset[str]:
        """The part names t whose every value the conjunction ``flat`` accepts: t is wholly in
        ``types`` (numbers: integers and fractions) and no keyword of the conjunction can
        reject a value of type t."""
        used: set[str] = set()
        for s, _p in flat:
            used.update(k for k in s if k in _VALIDATION and k != "type")
        out = set()
        for t in parts:
            whole = {"integer", "fraction"} <= types if t == "number" else t in types
            others = set().union(*(v for k, v in _ONLY_FOR.items() if k != t))
            if whole and used <= others:
                out.add(t)
        return frozenset(out)

    def _exclude_values(self, parts: dict[str, ByteNFA], values: list, ptr: str) -> None:
        """Remove ``values`` from ``parts`` (``not`` of an enum/const), before strings are
        spelled: canonical literals where a value has one serialization there (null, booleans,
        strings; everything when canonical and compact), otherwise by complement of the
        values' spellings; refused for values containing objects (any key order)."""
        lits: dict[str, list[Any]] = {}
        for v in values:
            try:
                k = _kind(v)
            except (TypeError, ValueError):
                continue
            t = "number" if k in ("integer", "fraction") else k
            if t not in parts:
                continue
            text = _dumps(v)
            if t == "object" or "{" in text:
                self._unsupported("not", ptr, "enum/const values containing objects have "
                                  "serializations in every key order")
                continue
            lits.setdefault(t, []).append(v)
        for t, vs in lits.items():
            if t in ("null", "boolean", "string") or (
                    self.canonical and (t != "array" or self.ws is None)):
                a = N.intersect(parts[t], _not_literals([_dumps(v).encode() for v in vs]))
            else:
                # every spelling of the values: remove them by complement (number spellings
                # have bounded exponents everywhere, so the complement is exact on them)
                if t == "array" and any(isinstance(x, (int, float)) and not isinstance(x, bool)
                                        for x in _scalars(vs)):
                    self._unsupported("not", ptr, "enum/const arrays of numbers: a number has "
                                      "spellings with any exponent")
                    continue
                if t == "number":  # x != v1, ..., vk: the open intervals between them
                    cuts = sorted({to_decimal(v) for v in vs})
                    bounds = [None, *cuts, None]
                    c = N.union(*[self._numbers(bounds[i], True, bounds[i + 1], True)
                                  for i in range(len(cuts) + 1)])
                else:
                    c = _complement_content(N.union(*[self._value_nfa(v) for v in vs]))
                if c is None:
                    self._unsupported("not", ptr, "the complement of the enum/const values "
                                      f"needs over {MAX_COMPLEMENT_STATES} states")
                    continue
                a = N.intersect(parts[t], c)
            if _is_empty(a):
                del parts[t]
            else:
                parts[t] = a

    def _valid_flat(self, v: Any, flat) -> bool:
        for s, _ in flat:
            sub = {k: x for k, x in s.items() if k not in ("enum", "const", "anyOf", "oneOf",
                                                           "allOf", "$ref")}
            if self.draft >= 6 and all(k == "type" or k in _ANNOTATIONS for k in sub):
                continue  # the caller keeps only values of the conjunction's types
            if not self._validator.evolve(schema=sub).is_valid(v):
                return False
        return True

    def _enum_leaf(self, flat, types, values) -> _Leaf:
        parts: dict[str, list[ByteNFA]] = {}
        seen: list = []
        for v in values:
            try:
                k = _kind(v)
            except (TypeError, ValueError):
                continue
            if k not in types or any(_json_eq(v, w) for w in seen):
                continue
            if any(_json_eq(v, w) for s, _ in flat if isinstance(s, _Synth)
                   for w in s.get("$not-enum", ((),))[0]):
                continue
            if not self._valid_flat(v, flat):
                continue
            seen.append(v)
            t = "number" if k in ("integer", "fraction") else k
            parts.setdefault(t, []).append(self._value_nfa(v))
        return _Leaf({t: N.union(*ls) for t, ls in parts.items()}, {})

    def _value_nfa(self, v: Any) -> ByteNFA:
        """Every serialization of the JSON value ``v`` that this compiler's language allows
        (objects keep ``v``'s key order): the canonical literal when ``canonical`` and compact,
        otherwise built structurally (whitespace gaps, number and string spellings)."""
        if self.canonical and self.ws is None:
            return N.literal(_dumps(v))
        if isinstance(v, dict):
            open_, close = self._brackets("{", "}")
            items = [N.concat(self._spell(N.literal(_json_str(k))), self.COLON,
                              self._value_nfa(x)) for k, x in v.items()]
        elif isinstance(v, list):
            open_, close = self._brackets("[", "]")
            items = [self._value_nfa(x) for x in v]
        elif isinstance(v, str):
            return self._spell(N.literal(_json_str(v)))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and not self.canonical:
            return self._number_value(to_decimal(v))
        else:
            return N.literal(_dumps(v))
        seq: list[ByteNFA] = [open_]
        for i, it in enumerate(items):
            if i:
                seq.append(self.COMMA)
            seq.append(it)
        seq.append(close)
        return N.concat(*seq)

    # ------------------------------------------------------------------ numbers

    def _number_value(self, d: Decimal) -> ByteNFA:
        """Every spelling of the number ``d`` (exponents as :func:`number_language` bounds)."""
        return self._numbers(d, False, d, False)

    def _numbers(self, lower, lstrict, upper, ustrict, integer=False, mults=()) -> ByteNFA | None:
        """:func:`~.json_numbers.number_language` with this compiler's exponent bound, shared
        by all compilers (None: too large)."""
        key = ("numbers", lower, lstrict, upper, ustrict, integer, tuple(sorted(mults)),
               self.max_exponent)
        hit = _SHARED.get(key, False)
        if hit is False:
            hit = _share(key, number_language(lower, lstrict, upper, ustrict, integer, mults,
                                              self.max_exponent))
        return hit

    def _number(self, flat, integer: bool) -> ByteNFA:
        lower: Decimal | None = None
        lstrict = False
        upper: Decimal | None = None
        ustrict = False
        mults: list[tuple[Decimal, str]] = []

        def dec(x, p):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise InvalidSchemaError("expected a number", p)
            return Decimal(repr(x)) if isinstance(x, float) else Decimal(x)

        def lo(x, strict):
            nonlocal lower, lstrict
            if lower is None or x > lower or (x == lower and strict):
                lower, lstrict = x, strict

        def hi(x, strict):
            nonlocal upper, ustrict
            if upper is None or x < upper or (x == upper and strict):
                upper, ustrict = x, strict

        for s, p in flat:
            if "minimum" in s:
                lo(dec(s["minimum"], _ptr(p, "minimum")),
                   s.get("exclusiveMinimum") is True)
            if "maximum" in s:
                hi(dec(s["maximum"], _ptr(p, "maximum")),
                   s.get("exclusiveMaximum") is True)
            em, eM = s.get("exclusiveMinimum"), s.get("exclusiveMaximum")
            if em is not None and not isinstance(em, bool):
                lo(dec(em, _ptr(p, "exclusiveMinimum")), True)
            if eM is not None and not isinstance(eM, bool):
                hi(dec(eM, _ptr(p, "exclusiveMaximum")), True)
            if "multipleOf" in s:
                m = dec(s["multipleOf"], _ptr(p, "multipleOf"))
                if m <= 0:
                    raise InvalidSchemaError("multipleOf must be > 0", _ptr(p, "multipleOf"))
                mults.append((m, _ptr(p, "multipleOf")))
        if not self.canonical:
            a = self._numbers(lower, lstrict, upper, ustrict, integer, [m for m, _ in mults])
            if a is None:
                p = mults[0][1] if mults else flat[0][1]
                self._unsupported("multipleOf" if mults else "type", p,
                                  f"the number automaton would exceed {MAX_NUMBER_STATES} "
                                  "states")
                a = self._numbers(lower, lstrict, upper, ustrict, integer)
            return a
        if lower is None and upper is None:
            a = number_nfa(integer)  # built once per process
        else:
            a = number_range(lower, lstrict, upper, ustrict, integer)
        for m, p in mults:
            mo = multiple_of(m, integer)
            if mo is None:
                self._unsupported("multipleOf", p, f"modulus automaton for {m} is too large")
                continue
            a = N.intersect(a, mo)
        return a

    # ------------------------------------------------------------------ strings

    def _pattern(self, pattern: str, p: str) -> ByteNFA | None:
        """Decoded-content automaton for ECMA-262 ``pattern`` with search semantics."""
        hit = _SHARED.get(("pattern", pattern))
        if hit is not None:
            return hit
        from .errors import InvalidRegexError, UnsupportedRegexError
        from .regex import regex_to_nfa

        try:
            py = _ecma_to_python(pattern)
            a = N.finalize(regex_to_nfa(py, flags=re.ASCII, search=True))
        except UnsupportedRegexError as e:
            self._unsupported("pattern", p, str(e))
            return None
        except (InvalidRegexError, ValueError, re.error) as e:
            self._unsupported("pattern", p, f"cannot translate ECMA-262 regex: {e}")
            return None
        _share(("pattern", pattern), a)
        return a

    def _string_content(self, flat) -> ByteNFA:
        """Canonical string *bodies* (between the quotes) allowed by the flat nodes."""
        lo, hi = 0, None
        pats: list[ByteNFA] = []
        fmts: list[str] = []
        for s, p in flat:
            if "minLength" in s:
                lo = max(lo, int(s["minLength"]))
            if "maxLength" in s:
                hi = int(s["maxLength"]) if hi is None else min(hi, int(s["maxLength"]))
            if "pattern" in s and not isinstance(s, _Synth):
                a = self._pattern(s["pattern"], _ptr(p, "pattern"))
                if a is not None and not _universal_content(a):
                    pats.append(a)
            if "$not-pattern" in s and isinstance(s, _Synth):
                pat, pp = s["$not-pattern"]
                a = self._pattern(pat, pp)
                if a is not None:
                    a = self._complement(a, pp, "not")
                    if a is not None:
                        pats.append(a)
            f = s.get("format")
            if isinstance(f, str) and self.assert_formats:
                if f in FORMATS:
                    fmts.append(f)
                elif f in _CHECKED_FORMATS:
                    self._unsupported("format", _ptr(p, "format"), f"format {f!r}")
                else:
                    self.ignored.add(f"format:{f}")
        if hi is not None and hi < lo:
            return N.nothing()
        if not self.assert_formats:
            fmts = []
        fmts = list(dict.fromkeys(fmts))
        only_formats = bool(fmts) and not pats
        if pats:
            # conjunctions over decoded content, escaped once: escaping is injective, so
            # esc(A & B) = esc(A) & esc(B), and the content products are far smaller (no
            # escape tries inside them): 7 overlapping oneOf patterns went from 30 s to <1 s
            parts = sorted([_format_content(f) for f in fmts] + pats, key=lambda x: x.num_states)
            content = parts[0]
            for c in parts[1:]:
                content = N.intersect(content, c)
            constraints: list[ByteNFA] = [_escape_subst(content)]
        else:
            constraints = [_escaped_format(f) for f in fmts]
        if lo == 0 and hi is None:
            length = _BODY
        else:
            if hi is not None and hi * _CHAR.num_states > MAX_STATES:
                self._unsupported("maxLength", flat[0][1], f"maxLength {hi} is too large")
                hi = None
            lkey = ("length", lo, hi)
            length = _SHARED.get(lkey)
            if length is None:
                length = _share(lkey, N.finalize(N.repeat(_CHAR, lo, hi)))
        if not constraints:
            return length
        out = constraints[0]
        for c in constraints[1:]:
            out = N.intersect(out, c)
        if only_formats and lo == 0 and hi is None:
            return out  # format automata are valid bodies already
        return N.intersect(out, length)

    def _string(self, flat, stack) -> ByteNFA:
        body = self._string_content(flat)
        if _is_empty(body):
            return N.nothing()
        hit = body._cache.get("quoted")  # shared bodies (length bounds, formats): one copy
        if hit is None:
            hit = body._cache["quoted"] = N.concat(_QUOTE, body, _QUOTE)
        return hit

    # ------------------------------------------------------------------ arrays

    def _array(self, flat, stack) -> ByteNFA | None:
        """Arrays: explicit positions 0..N-1 (prefixItems, minItems, or all of maxItems), then a
        loop of ``items`` when unbounded; ``contains``/``minContains`` add a saturating count of
        matching elements (each element is nondeterministically "counted" or not)."""
        from .json_formats import _Builder

        lo, hi = 0, None
        per_node = []
        contains = []
        for s, p in flat:
            if "minItems" in s:
                lo = max(lo, int(s["minItems"]))
            if "maxItems" in s:
                hi = int(s["maxItems"]) if hi is None else min(hi, int(s["maxItems"]))
            if self.draft >= 2020:
                pre, rest = s.get("prefixItems", []), s.get("items", True)
                pk, rk = "prefixItems", "items"
                if self.strict and "prefixItems" in s and "items" not in s:
                    rest = False  # strict: no items beyond the listed positions
                    self.strict_used = True
            else:
                it = s.get("items", True)
                if isinstance(it, list):
                    pre, rest, pk, rk = it, s.get("additionalItems", True), "items", \
                        "additionalItems"
                    if self.strict and "additionalItems" not in s:
                        rest = False
                        self.strict_used = True
                else:
                    pre, rest, pk, rk = [], it, "items", "items"
            per_node.append((pre, rest, p, pk, rk))
            if "contains" in s:
                mc = int(s.get("minContains", 1))
                if mc > 0:
                    contains.append((s["contains"], _ptr(p, "contains"), mc))
        if hi is not None and hi < lo:
            return None
        if len(contains) > 1:
            self._unsupported("contains", contains[1][1], "several contains in one conjunction")
            contains = contains[:1]
        P = max((len(pre) for pre, *_ in per_node), default=0)

        def elem_items(i: int):
            out = []
            for pre, rest, p, pk, rk in per_node:
                if i < len(pre):
                    out.append((pre[i], _ptr(p, pk, i)))
                else:
                    out.append((rest, _ptr(p, rk)))
            return out

        uq = unique_array(self, flat, lo, hi, P, bool(contains), elem_items, stack)
        if isinstance(uq, ByteNFA):
            return uq
        comma, brackets = (self.COMMA, None) if uq is None else (uq[0], uq[1:])

        N_exp = max(P, lo, 1) if hi is None else hi
        cache: dict[tuple[int, bool], ByteNFA] = {}

        def el(i: int, match: bool) -> ByteNFA:
            j = min(i, P)
            key = (j, match)
            if key not in cache:
                its = elem_items(j)
                if match:
                    its = its + [(contains[0][0], contains[0][1])]
                cache[key] = self.compile_items(its, stack)
            return cache[key]

        mc = contains[0][2] if contains else 0
        b = _Builder()
        states: dict[tuple[int, int], int] = {}

        def st(i: int, c: int) -> int:
            if (i, c) not in states:
                states[(i, c)] = b.state()
            return states[(i, c)]

        start = st(0, 0)
        todo = [(0, 0)]
        seen = {(0, 0)}
        el_entry: dict[tuple, int] = {}
        comma_entry: dict[tuple, int] = {}
        while todo:
            i, c = todo.pop()
            src = states[(i, c)]
            if i >= lo and c >= mc:
                b.finals.add(src)
            if hi is not None and i >= hi:
                continue
            ni = i + 1 if i < N_exp else i
            for match in ((False, True) if c < mc else (False,)):
                a = el(i, match)
                if _is_empty(a):
                    continue
                nc = c + 1 if match else c
                dst = st(ni, nc)
                # one copy of the element per (element, destination), entered from every
                # source that needs it (the last explicit position and the loop share it)
                ekey = (min(i, P), match, dst)
                entry = el_entry.get(ekey)
                if entry is None:
                    entry = el_entry[ekey] = b.state()
                    for f in b.embed(a, entry):
                        b.eps.append((f, dst))
                if i > 0:
                    centry = comma_entry.get(ekey)
                    if centry is None:
                        centry = comma_entry[ekey] = b.state()
                        for f in b.embed(comma, centry):
                            b.eps.append((f, entry))
                    entry = centry
                b.eps.append((src, entry))
                if (ni, nc) not in seen:
                    seen.add((ni, nc))
                    todo.append((ni, nc))
            if b.n > MAX_STATES:
                raise UnsupportedSchemaError("maxItems", flat[0][1], "array automaton too large")
        return _wrapped(b, start, *(brackets or self._brackets("[", "]")))

    # ------------------------------------------------------------------ objects

    def _key_items(self, flat, key: str):
        """The (schema, pointer) constraints on the value of ``key`` from each flat node."""
        out = []
        for s, p in flat:
            props = s.get("properties") or {}
            matched = False
            for pat, sub in (s.get("patternProperties") or {}).items():
                a = self._pattern(pat, _ptr(p, "patternProperties", pat))
                if a is not None and N.matches(a, key.encode()):
                    out.append((sub, _ptr(p, "patternProperties", pat)))
                    matched = True
            if key in props:
                out.append((props[key], _ptr(p, "properties", key)))
            elif not matched and "additionalProperties" in s:
                out.append((s["additionalProperties"], _ptr(p, "additionalProperties")))
        return out

    def _declared(self, flat) -> tuple[list[str], set[str]]:
        """Declared names in canonical order: ``properties`` in order of first appearance,
        then keys only ``required``; names only the compiler's own nodes mention (negations,
        dependencies) come after the schema's."""
        order: dict[str, None] = {}
        required: set[str] = set()
        for synth in (False, True):
            for s, _ in flat:
                if isinstance(s, _Synth) == synth:
                    for k in s.get("properties") or {}:
                        order.setdefault(k, None)
                    for k in s["$extra"][0] if synth and "$extra" in s else ():
                        order.setdefault(k, None)  # a witness key is none of these
            for s, _ in flat:
                if isinstance(s, _Synth) == synth:
                    for k in s.get("required") or []:
                        order.setdefault(k, None)
                        required.add(k)
        return list(order), required

    def _object(self, flat, stack):
        names, required = self._declared(flat)
        lo_p, hi_p = 0, None
        for s, _ in flat:
            if "minProperties" in s:
                lo_p = max(lo_p, int(s["minProperties"]))
            if "maxProperties" in s:
                hi_p = (int(s["maxProperties"]) if hi_p is None
                        else min(hi_p, int(s["maxProperties"])))
        if hi_p is not None and (hi_p < lo_p or hi_p < len(required)):
            return None
        pnames = [(s["propertyNames"], _ptr(p, "propertyNames")) for s, p in flat
                  if "propertyNames" in s]
        pn_nfa = self.compile_items(pnames, stack) if pnames else None
        # witnesses (negated additionalProperties): some key outside names_j whose value
        # satisfies n_j; bit j of the state records that one was written
        wit = [s["$extra"] for s, _ in flat if isinstance(s, _Synth) and "$extra" in s]
        if len(wit) > MAX_WITNESSES:
            self._unsupported("not", wit[MAX_WITNESSES][2], f"more than {MAX_WITNESSES} "
                              "negated additionalProperties in one object conjunction")
            wit = wit[:MAX_WITNESSES]
        wfull = (1 << len(wit)) - 1

        def with_witnesses(k: str | None):
            # (extra constraints, bits) for each nonempty set of witnesses key k can satisfy
            for T in range(1, wfull + 1):
                js = [j for j in range(len(wit)) if T >> j & 1]
                if k is None or all(k not in wit[j][0] for j in js):
                    yield [(wit[j][1], wit[j][2]) for j in js], T

        slots: list[tuple[str, list[tuple[ByteNFA, int]], bool]] = []
        required_values: dict[str, ByteNFA] = {}
        key_values: dict[str, ByteNFA] = {}
        for k in names:
            ok = pn_nfa is None or N.matches(pn_nfa, _json_str(k).encode())
            its = self._key_items(flat, k)
            v = self.compile_items(its, stack) if ok else N.nothing()
            key_values[k] = v
            if _is_empty(v):
                if k in required:
                    return None
                continue
            key = self._spell(N.literal(_json_str(k)))
            variants = [((key, self.COLON, v), 0)]  # concatenated by _Builder.embed
            for also, T in with_witnesses(k):
                vt = self.compile_items(its + also, stack)
                if not _is_empty(vt):
                    variants.append(((key, self.COLON, vt), T))
            slots.append((k, variants, k in required))
            if k in required:
                required_values[k] = v
        extra = self._extras(flat, names, pn_nfa, stack)
        extras = [] if extra is None else [(extra, 0)]
        if extra is not None:
            for also, T in with_witnesses(None):
                et = self._extras(flat, names, pn_nfa, stack, also)
                if et is not None:
                    extras.append((et, T))
        wrap = self._brackets("{", "}")
        if self.property_order == "any":
            out = self._object_any(slots, extras, lo_p, hi_p, flat, wfull, wrap)
        else:
            out = self._object_ordered(slots, extras, lo_p, hi_p, wfull, wrap)
        if out is None:
            return None
        self._count(out, flat[0][1] if flat else "#")
        # closed (no undeclared key can appear): the keys it can have at all
        keys = frozenset(k for k, _, _ in slots) if extra is None else None
        return out, required_values, keys, key_values

    def _extras(self, flat, names, pn_nfa, stack, also=()) -> ByteNFA | None:
        """key:value automaton for one additional (undeclared) property, or None.

        With ``patternProperties``, the undeclared keys are split into regions by the set T of
        patterns they match (``∩_{p∈T} L_p ∩ ∩_{p∉T} ¬L_p``; the complements are of the small
        pattern automata, built by subset construction, at most :data:`MAX_COMPLEMENT_STATES`
        states); a key in region T takes the schemas of T, or ``additionalProperties`` when T
        is empty.  At most :data:`MAX_PATTERN_PROPERTIES` patterns per conjunction."""
        pats = []  # (content nfa, schema, pointer, node index)
        for idx, (s, p) in enumerate(flat):
            for pat, sub in (s.get("patternProperties") or {}).items():
                a = self._pattern(pat, _ptr(p, "patternProperties", pat))
                if a is not None:
                    pats.append((a, sub, _ptr(p, "patternProperties", pat), idx))
        if len(pats) > MAX_PATTERN_PROPERTIES:
            self._unsupported("patternProperties", pats[MAX_PATTERN_PROPERTIES][2],
                              f"more than {MAX_PATTERN_PROPERTIES} patterns in one object")
            pats = pats[:MAX_PATTERN_PROPERTIES]
        body = None  # _body_excluding(names), built when a region needs it
        out = []
        for T in range(1 << len(pats)):
            constraints = []
            strict_here = False
            for idx, (s, p) in enumerate(flat):
                mine = [(sub, ptr) for j, (_a, sub, ptr, i) in enumerate(pats)
                        if i == idx and T >> j & 1]
                if mine:
                    constraints += mine
                elif "additionalProperties" in s:
                    constraints.append((s["additionalProperties"], _ptr(p, "additionalProperties")))
                elif self.strict and ("properties" in s or "patternProperties" in s) and (
                        not isinstance(s, _Synth)):
                    # strict: properties the schema does not list are not generated
                    constraints.append((False, _ptr(p, "additionalProperties")))
                    strict_here = True
            if not constraints:
                listing = [p for s, p in flat if not isinstance(s, _Synth)
                           and ("properties" in s or "patternProperties" in s)]
                if listing:  # the value of a property the object does not list
                    constraints.append((_UNLISTED, _ptr(listing[0], "~unlisted")))
            closed = any(c is False for c, _ in constraints)
            if closed and not pats and pn_nfa is None:
                # the keys other than the (finitely many) names are never none: nothing to build
                self.strict_used |= strict_here
                continue
            if closed and (self.strict_used or not strict_here):
                # a closed region only tells whether strict=True dropped keys, known already
                # (Github_medium o10297: the complement regions of three ^\d+$-keyed objects);
                # its keys are not built, nor its patterns' complements
                continue
            content = None
            ok = True
            for j, (a, _sub, ptr, _) in enumerate(pats):
                if T >> j & 1:
                    c = a
                else:
                    c = self._complement(a, ptr)
                    if c is None:
                        ok = False
                        break
                content = c if content is None else N.intersect(content, c)
            if not ok:
                continue
            if content is not None and _is_empty(content):
                continue
            ck = ("key", tuple(names), self.canonical)
            key = content._cache.get(ck) if content is not None and pn_nfa is None else None
            if key is None:
                if body is None:
                    body = _body_excluding(names)
                kb = body if content is None else N.intersect(_escape_subst(content), body)
                key = N.concat(_QUOTE, kb, _QUOTE)
                if pn_nfa is not None:
                    key = self._spell(N.intersect(key, pn_nfa))
                else:
                    key = self._spell(key)
                    if content is not None:
                        # a pattern's keys, shared by the objects that list the same names
                        # (Github_medium o10297: ^\d+$ in two objects; 0.2 ms each)
                        content._cache[ck] = key
            if _is_empty(key):
                continue
            self.strict_used |= strict_here
            if closed:
                continue
            v = self.compile_items(constraints + list(also), stack)
            if _is_empty(v):
                continue
            out.append(N.concat(key, self.COLON, v))
        return N.union(*out) if out else None

    def _complement(self, a: ByteNFA, ptr: str, keyword: str = "patternProperties"
                    ) -> ByteNFA | None:
        """Decoded strings NOT in L(a) (a small pattern automaton), by subset construction
        (cached on ``a``)."""
        res = _complement_content(a)
        if res is None:
            self._unsupported(keyword, ptr, "the pattern's complement needs too many states")
        return res

    def _object_ordered(self, slots, extras, lo_p, hi_p, wfull, wrap) -> ByteNFA | None:
        """Declared slots in order, then additional properties.  A state is (c, w): the count c
        tracked only as far as min/maxProperties need (c saturates at max(1, minProperties)
        without a maximum) and the witnesses w written so far (accepting: w == wfull).  Each
        slot and the additional properties come as variants (key:value automaton, or its
        pieces for :meth:`~.json_formats._Builder.embed`; witness bits); without witnesses, one
        variant each."""
        from .json_formats import _Builder

        K = hi_p if hi_p is not None else max(1, lo_p)

        def inc(c):
            if hi_p is not None:
                return c + 1 if c + 1 <= hi_p else None
            return min(c + 1, K)

        b = _Builder()
        layer = {(0, 0): b.state()}
        start = layer[(0, 0)]

        def emit(srcs: dict, kv, bits: int, dests: dict) -> None:
            # one copy of kv per destination state
            by_dest: dict[tuple[int, int], list[tuple[int, int]]] = {}
            for c, w in srcs:
                d = inc(c)
                if d is not None:
                    by_dest.setdefault((d, w | bits), []).append((c, w))
            for dk, cs in by_dest.items():
                if dk not in dests:
                    dests[dk] = b.state()
                entry = b.state()
                for ck in cs:
                    if ck[0] == 0:
                        b.eps.append((srcs[ck], entry))
                    else:
                        for f in b.embed(self.COMMA, srcs[ck]):
                            b.eps.append((f, entry))
                for f in b.embed(kv, entry):
                    b.eps.append((f, dests[dk]))

        for _name, variants, req in slots:
            nxt: dict[tuple[int, int], int] = {}
            if not req:
                for ck, st in layer.items():
                    nxt[ck] = b.state()
                    b.eps.append((st, nxt[ck]))
            for kv, bits in variants:
                emit(layer, kv, bits, nxt)
            layer = nxt
            if not layer:
                return None
        if extras:
            # every state reachable by adding properties, then one copy of each variant per
            # destination state, shared by all the states that lead there
            todo = sorted(layer)
            while todo:
                c, w = todo.pop()
                d = inc(c)
                if d is None:
                    continue
                for _kv, bits in extras:
                    if (d, w | bits) not in layer:
                        layer[(d, w | bits)] = b.state()
                        todo.append((d, w | bits))
            srcs = dict(layer)
            for kv, bits in extras:
                emit(srcs, kv, bits, layer)
        for (c, w), st in layer.items():
            if c >= lo_p and w == wfull:
                b.finals.add(st)
        return _wrapped(b, start, *wrap)

    def _object_any(self, slots, extras, lo_p, hi_p, flat, wfull, wrap) -> ByteNFA | None:
        """Declared properties in any order, each at most once; additional properties anywhere.
        States: (subset of declared properties written, count) — exponential in the number of
        declared properties, so refused above :data:`MAX_ANY_ORDER_PROPERTIES`."""
        from .json_formats import _Builder

        n = len(slots)
        if n > MAX_ANY_ORDER_PROPERTIES:
            self._unsupported("properties", flat[0][1],
                              f"property_order='any' with {n} properties needs 2^{n} states "
                              f"(limit {MAX_ANY_ORDER_PROPERTIES})")
            return self._object_ordered(slots, extras, lo_p, hi_p, wfull, wrap)
        K = hi_p if hi_p is not None else max(1, lo_p)
        req_mask = sum(1 << i for i, (_, _, r) in enumerate(slots) if r)
        # hub state: (declared properties written S, count c, witnesses w)
        b = _Builder()
        hubs: dict[tuple[int, int, int], int] = {}

        def hub(S, c, w):
            key = (S, c, w)
            if key not in hubs:
                hubs[key] = b.state()
            return hubs[key]

        start = hub(0, 0, 0)
        todo = [(0, 0, 0)]
        seen = {(0, 0, 0)}
        entries: dict[tuple, int] = {}  # (kv index, variant, dest S, c, w) -> entry
        while todo:
            S, c, w = todo.pop()
            src = hubs[(S, c, w)]
            if c >= lo_p and (S & req_mask) == req_mask and w == wfull:
                b.finals.add(src)
            nc = c + 1 if hi_p is not None else min(c + 1, K)
            if hi_p is not None and nc > hi_p:
                continue
            moves = [(i, vi, S | (1 << i), kv, bits) for i, (_, variants, _) in enumerate(slots)
                     if not S & (1 << i) for vi, (kv, bits) in enumerate(variants)]
            moves += [(-1, vi, S, kv, bits) for vi, (kv, bits) in enumerate(extras)]
            for i, vi, S2, kv, bits in moves:
                w2 = w | bits
                ekey = (i, vi, S2, nc, w2)
                entry = entries.get(ekey)
                if entry is None:
                    entry = entries[ekey] = b.state()
                    for f in b.embed(kv, entry):
                        b.eps.append((f, hub(S2, nc, w2)))
                if c == 0:
                    b.eps.append((src, entry))
                else:
                    for f in b.embed(self.COMMA, src):
                        b.eps.append((f, entry))
                if (S2, nc, w2) not in seen:
                    seen.add((S2, nc, w2))
                    todo.append((S2, nc, w2))
            if b.n > MAX_STATES:
                raise UnsupportedSchemaError("properties", flat[0][1],
                                             "property_order='any' automaton too large")
        return _wrapped(b, start, *wrap)

    def _brackets(self, open_: str, close: str) -> tuple[ByteNFA, ByteNFA]:
        """The opening and closing automata of an array or object (with the whitespace
        setting's padding inside the brackets)."""
        if not self.ws:
            return N.literal(open_), N.literal(close)
        return N.concat(N.literal(open_), self.ws), N.concat(self.ws, N.literal(close))

    def _count(self, a: ByteNFA, ptr: str = "#") -> None:
        if a.num_states > MAX_STATES:
            raise UnsupportedSchemaError("<size>", ptr, f"object automaton exceeds {MAX_STATES} "
                                         "byte states")

    # ------------------------------------------------------------------ entry

    def build(self) -> ByteNFA:
        out = self.compile_items([(self.root, "#")], ())
        if self.ws is _WS_ANY:  # a JSON text: ws value ws (RFC 8259 §2)
            out = N.concat(_WS_ANY, out, _WS_ANY)
        out = N.finalize(out)
        if self.truncated:
            warnings.warn(
                f"recursive $ref unrolled to depth {self.max_depth} at "
                f"{', '.join(sorted(self.truncated))}: deeper nesting is not generated "
                "(the automaton accepts a subset of the schema's instances)",
                stacklevel=3,
            )
        if self.legacy_dependencies:
            warnings.warn(
                "Draft 4-7 'dependencies' enforced (as dependentRequired/dependentSchemas) in a "
                "schema read as Draft 2019-09/2020-12, whose validators ignore it, at "
                f"{', '.join(sorted(self.legacy_dependencies))}: instances violating it are "
                "not generated (a subset of what a 2020-12 validator accepts)",
                stacklevel=3,
            )
        if self.strict_used:
            warnings.warn(
                "strict=True: properties (items) the schema does not list are not generated "
                "where additionalProperties (items) is unspecified: a subset of the valid "
                "instances",
                stacklevel=3,
            )
        if self.unlisted_used:
            warnings.warn(
                "values of properties the schema does not list (additionalProperties "
                f"unspecified beside properties) are generated at most {self.unlisted_depth} "
                "levels deep: a subset of the valid instances (free_value_depth=N to go deeper, "
                "strict=True not to generate such properties)",
                stacklevel=3,
            )
        if self.free_depth_used and self.free_depth < FREE_VALUE_DEPTH:
            # the default depth is the documented behaviour; only a lowered one is news
            warnings.warn(
                f"free_value_depth={self.free_depth} (default {FREE_VALUE_DEPTH}): "
                "unconstrained JSON values (schema true, open additionalProperties/items) are "
                f"generated with arrays/objects nested at most {self.free_depth} levels deep: "
                "a subset of the valid instances",
                stacklevel=3,
            )
        if self.dropped:
            listing = "; ".join(f"{k} at {p}" + (f" ({d})" if d else "")
                                for k, p, d in self.dropped)
            warnings.warn(
                f"lenient mode dropped unsupported JSON Schema constraints: {listing}. The "
                "automaton accepts a SUPERSET of the valid instances for these keywords: its "
                "outputs are not guaranteed to validate (not sound)",
                stacklevel=3,
            )
        return out

    # ------------------------------------------------------------------ serialization

    def serialize(self, instance: Any, items=None, stack: tuple[str, ...] = ()) -> str:
        """The canonical serialization of ``instance`` (see the module docstring)."""
        if items is None:
            items = [(self.root, "#")]
        kind = _kind(instance)
        if kind not in ("object", "array"):
            return _dumps(instance)
        ex = None
        try:
            ex = self._expand(items, stack)
        except (UnsupportedSchemaError, InvalidSchemaError):
            ex = None
        if ex is None:
            return _dumps(instance)
        flat, disj, st = ex
        # choose anyOf/oneOf branches that the instance satisfies (first valid; else first)
        while disj:
            kind_, branches, dptr = disj.pop(0)
            chosen = branches[0] if branches else None
            for b in branches:
                if self._validator is None or self._validator.evolve(schema=b[0]).is_valid(
                        instance):
                    chosen = b
                    break
            if chosen is None:
                break
            conj = [chosen]
            if kind_ == "oneOf" and self._oneof_exact.get(dptr):
                # compiled as B_i & (not B_j for j != i): the same nodes, so the same key order
                for b, bp in branches:
                    if b is not chosen[0]:
                        n = self._negate(b, bp)
                        if n is not True and n is not False:
                            conj.append((n, bp + "/~neg"))
            e2 = self._expand(conj, st)
            if e2 is None:
                break
            flat = flat + e2[0]
            disj = disj + e2[1]
            st = e2[2]
        for s, _ in flat:
            for v in ([s["const"]] if "const" in s else []) + list(s.get("enum", []) or []):
                if _json_eq(v, instance):
                    return _dumps(instance, v)
        sep_c, sep_k = ",", ":"
        if isinstance(instance, list):
            parts = []
            per_node = []
            for s, p in flat:
                if self.draft >= 2020:
                    per_node.append((s.get("prefixItems", []), s.get("items", True), p,
                                     "prefixItems", "items"))
                else:
                    it = s.get("items", True)
                    if isinstance(it, list):
                        per_node.append((it, s.get("additionalItems", True), p, "items",
                                         "additionalItems"))
                    else:
                        per_node.append(([], it, p, "items", "items"))
            for i, x in enumerate(instance):
                sub = []
                for pre, rest, p, pk, rk in per_node:
                    sub.append((pre[i], _ptr(p, pk, i)) if i < len(pre) else (rest, _ptr(p, rk)))
                parts.append(self.serialize(x, sub, st))
            return "[" + sep_c.join(parts) + "]"
        names, _ = self._declared(flat)
        keys = [k for k in names if k in instance] + [k for k in instance if k not in names]
        parts = []
        for k in keys:
            parts.append(_json_str(k) + sep_k + self.serialize(instance[k],
                                                                self._key_items(flat, k), st))
        return "{" + sep_c.join(parts) + "}"


def _schema_of(schema: Any) -> Any:
    """``schema`` itself, or the JSON Schema a pydantic model class (or instance) or
    ``TypeAdapter`` generates: duck-typed (``model_json_schema()``, else ``json_schema()``),
    so pydantic stays an optional dependency that this module never imports."""
    if isinstance(schema, (dict, bool, str, bytes, list, int, float)) or schema is None:
        return schema
    for name in ("model_json_schema", "json_schema"):
        make = getattr(schema, name, None)
        if callable(make):
            return make()
    return schema


def json_schema_to_nfa(
    schema: Any,
    *,
    canonical: bool = True,
    max_exponent: int | None = None,
    whitespace: str | None = None,
    max_whitespace: int = 4,
    property_order: str = "schema",
    max_recursion_depth: int = 3,
    lenient: bool = False,
    validate: bool = True,
    free_value_depth: int | None = None,
    strict: bool = False,
    registry: Any = None,
) -> ByteNFA:
    """The byte NFA of every serialization of ``schema``'s valid instances (see the module
    docstring), or only of their canonical serializations with ``canonical=True``.

    Args:
        schema: a JSON Schema (dict, bool, or JSON text), or a pydantic model class or
            ``TypeAdapter`` (anything with ``model_json_schema()`` or ``json_schema()``: its
            schema; pydantic itself is not imported).
        canonical: ``True`` (the default, for now): accept only the canonical serialization
            of each instance (what :func:`serialize_instance` writes; compact unless
            ``whitespace`` says otherwise).  ``False``: every RFC 8259 serialization of each
            valid instance (see "Every serialization" in the module docstring).
        max_exponent: where a number's exponent can change whether its value is valid
            (bounds, ``integer``, ``multipleOf``), exponents up to this absolute value are
            generated (a documented subset; :mod:`.json_numbers`).
        whitespace: ``"any"`` (RFC 8259: ``[ \\t\\n\\r]*`` in every gap and around the
            value; the default with ``canonical=False``), ``"compact"`` (no whitespace; the
            default with ``canonical=True``) or ``"flexible"`` (up to ``max_whitespace``
            characters of ``[ \\t\\n\\r]`` in each gap inside objects and arrays).
        property_order: ``"schema"`` (declared order) or ``"any"`` (any order, no duplicates).
        max_recursion_depth: how many times a recursive ``$ref`` is unrolled (warning).
        free_value_depth: nesting depth of arrays/objects generated for unconstrained values
            (schema ``true``, open ``additionalProperties``/``items``); default
            :data:`FREE_VALUE_DEPTH` (6; :data:`UNLISTED_VALUE_DEPTH` (2) for the values of
            properties an object does not list).  JSON of unbounded depth is not regular, and
            exact depth d costs ~2^d states per free value; a depth below the default warns.
        lenient: turn :class:`UnsupportedSchemaError` into a warning listing what was dropped
            (the automaton then accepts a superset: not sound).
        validate: check ``schema`` against its meta-schema first (``jsonschema``).
        strict: where an object lists ``properties``/``patternProperties`` and leaves
            ``additionalProperties`` unspecified, generate no other property; where an array
            lists ``prefixItems`` (draft 7: an ``items`` array) and leaves ``items``
            (``additionalItems``) unspecified, generate no further item.  The default of
            xgrammar (``strict_mode``) and of outlines; a subset of the valid instances
            (warning when it applies).

    Returns:
        The byte NFA (not finalized); ``finalize`` it or lift it with
        :meth:`TokenAutomaton.from_byte_nfa`.

    Raises:
        InvalidSchemaError: not a valid JSON Schema (with the pointer of the offending part).
        UnsupportedSchemaError: a keyword this compiler cannot express exactly (keyword, pointer).
        UnresolvedReferenceError: a ``$ref`` to a document not in ``registry`` (its URI and the
            pointer of the ``$ref``).
    """
    return JsonSchemaCompiler(
        schema, canonical=canonical, max_exponent=max_exponent, whitespace=whitespace,
        max_whitespace=max_whitespace,
        property_order=property_order, max_recursion_depth=max_recursion_depth,
        lenient=lenient, validate=validate, free_value_depth=free_value_depth, strict=strict,
        registry=registry,
    ).build()


def serialize_instance(instance: Any, schema: Any, *, validate: bool = False,
                       registry: Any = None) -> str:
    """The canonical serialization of ``instance`` for ``schema`` (what the compiled automaton
    accepts when the instance is valid): compact separators, canonical numbers and string
    escapes, object keys in the schema's declared order (anyOf/oneOf: the first branch the
    instance satisfies), additional keys after them in the instance's order."""
    schema = _schema_of(schema)
    c = JsonSchemaCompiler(schema, validate=validate, lenient=True, registry=registry)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if _has_key(schema, "oneOf"):
            try:  # which oneOf were compiled as B_i & not B_j decides the key order
                c.build()
            except Exception:  # noqa: BLE001 - serialization does not need the automaton
                pass
        return c.serialize(instance)


def _has_key(node: Any, key: str) -> bool:
    if isinstance(node, dict):
        return key in node or any(_has_key(v, key) for v in node.values())
    if isinstance(node, list):
        return any(_has_key(v, key) for v in node)
    return False


def compile_json_schema(
    schema: Any,
    vocab,
    *,
    canonical: bool = True,
    max_exponent: int | None = None,
    whitespace: str | None = None,
    max_whitespace: int = 4,
    property_order: str = "schema",
    max_recursion_depth: int = 3,
    lenient: bool = False,
    free_value_depth: int | None = None,
    strict: bool = False,
    registry: Any = None,
):
    """Compile a JSON Schema to a :class:`~.automaton.TokenAutomaton` over ``vocab``.

    Same arguments as :func:`json_schema_to_nfa`.  ``meta`` records the options, the byte NFA
    size, dropped keywords (lenient) and ignored unknown keywords.  ``uniqueItems: true`` is
    exact: an automaton over sets of values where the item domain is small, otherwise a
    :class:`~.unique_items.UniqueItemsAutomaton` (the same methods; the state carries each
    open unique array's item values; see :mod:`.unique_items`).

    Raises:
        InvalidSchemaError, UnsupportedSchemaError: see :func:`json_schema_to_nfa`.
        EmptyLanguageError: no token sequence over ``vocab`` is accepted.
    """
    from .automaton import TokenAutomaton

    comp = JsonSchemaCompiler(
        schema, canonical=canonical, max_exponent=max_exponent, whitespace=whitespace,
        max_whitespace=max_whitespace,
        property_order=property_order, max_recursion_depth=max_recursion_depth,
        lenient=lenient, free_value_depth=free_value_depth, strict=strict, registry=registry,
    )
    comp.unique_items = True  # uniqueItems over large domains: marked arrays (.unique_compile)
    nfa = comp.build()  # already finalized
    meta = {
        "kind": "json_schema",
        "canonical": canonical,
        "max_exponent": None if canonical else max_exponent,
        "whitespace": whitespace or ("compact" if canonical else "any"),
        "max_whitespace": max_whitespace,
        "property_order": property_order,
        "max_recursion_depth": max_recursion_depth,
        "free_value_depth": comp.free_depth,
        "lenient": lenient,
        "strict": strict,
        "byte_states": nfa.num_states,
        "byte_edges": nfa.num_edges,
        "dropped": [list(x) for x in comp.dropped],
        "ignored_keywords": sorted(comp.ignored),
        "truncated_refs": sorted(comp.truncated),
    }
    if getattr(comp, "marked", False):  # uniqueItems checked at token level
        from .unique_items import UniqueItemsAutomaton

        return UniqueItemsAutomaton.from_marked_nfa(nfa, vocab, meta)
    return TokenAutomaton.from_byte_nfa(nfa, vocab, meta=meta)
