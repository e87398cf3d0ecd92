"""JSON Schema → byte NFA → :class:`~.automaton.TokenAutomaton` (paper 002, §5.2 and §5.5).

With ``canonical=False`` the automaton accepts *every serialization* (RFC 8259) of the instances
that are valid against the schema; with ``canonical=True`` (the default for now) only their
*canonical serializations* (below).  Either way the instances are those valid against the
schema (Draft 2020-12 semantics; Draft 7/6/4 documents are accepted and read with their own
``items``/``additionalItems``/``$ref``/``exclusiveMaximum`` rules; Draft 3 documents are refused,
``UnsupportedSchemaError`` at ``#/$schema``).  It is built compositionally
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
  lookahead and lookbehind are compiled exactly (:mod:`..regex.lookaround`; lookbehind must be
  fixed-width, as in ``re``).
* Numbers: canonical decimals without exponent (``1.0`` → ``1``, ``1e-05`` → ``0.00001``; see
  :mod:`.formats`).  ``integer`` is "a number with zero fractional part", so ``1.0`` *is* an
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
  :mod:`.string_spellings` applied to each canonical string leaf; ``minLength``/``maxLength``,
  ``pattern``, ``format``, ``enum``/``const`` and property names apply to the decoded string.
  Lone surrogates (``"\\ud800"``) are not generated.
* Numbers: every spelling (fraction, trailing zeros, exponent, ``-0``) with bounds,
  ``integer`` and ``multipleOf`` decided on the value (:mod:`.number_spellings`); where the
  exponent can change the verdict its value is bounded by ``max_exponent`` (a documented
  subset: ``1e-05`` and ``2.5e3`` are generated, ``1e-99`` under ``maximum: 1`` is not).
  Under draft-04 an ``integer`` has no fraction or exponent (``3``, not ``3.0``
  or ``3e0``), as that draft defines it; there, integral numbers inside ``enum``/``const``
  arrays and objects are also written without them (a subset: the item schemas are not
  consulted), while a top-level ``enum: [3]`` without ``type: integer`` still takes ``3.0``.
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
  never the network): :mod:`.refs`.  Recursive ``$ref`` (also through other documents) is
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

Limits (checked before the work; :class:`UnsupportedSchemaError` naming keyword, pointer and
the estimate or limit, never dropped by ``lenient``)
--------------------------------------------------------------------------------------------
* A document nested more than :data:`MAX_SCHEMA_DEPTH` (128) levels of objects/arrays, found
  by an iterative walk before ``jsonschema``'s meta-schema check (which recursed out of
  Python's stack at 164 nested ``properties``); values nested (``$ref`` unrolling included)
  more than :data:`MAX_VALUE_NESTING` (100) deep while building.
* ``max_states`` (default :data:`MAX_STATES`): the estimated byte states of an array
  (positions x item), an object (a copy of each property per count it can lead to, and a
  charge per (state, later optional property) pair: 500 optional properties took 48 s and
  2.8 GB to lift over Llama-3), a string length bound; ``enum`` of more than
  :data:`MAX_ENUM_VALUES` values.
* A schema no instance satisfies is :class:`~.errors.EmptySchemaError` from
  :func:`compile_json_schema`, naming the smallest empty sub-schema and the keywords that
  empty it (:mod:`._empty`).

Modules, in pipeline order
--------------------------
* reading the schema: :mod:`._meta` (meta-validation, depth check), :mod:`.refs` (``$ref``
  resolution, ``registry``), :mod:`._constants` (limits and keyword tables);
* the compiler: :mod:`._compiler` (:class:`JsonSchemaCompiler`, options, the build loop) on
  :mod:`._base`, with one mixin per concern — :mod:`._logic` (``allOf``/``anyOf``/``oneOf``,
  ``if``), :mod:`._negation` (``not``), :mod:`._leaf` (one flat conjunction), :mod:`._free`
  (free values), :mod:`._numbers`, :mod:`._strings` and :mod:`._ecma` (``pattern``),
  :mod:`._arrays`, :mod:`._objects`, :mod:`._serialize` (:func:`serialize_instance`);
  its own objects in :mod:`._nodes` and :mod:`._values`, shared automata in :mod:`._cache`,
  byte-automaton helpers in :mod:`._automata`, the builder that embeds automata without
  copying them in :mod:`._builder`, empty schemas explained by :mod:`._empty`;
* value automata: :mod:`.formats` (canonical numbers, ``multipleOf``, string formats),
  :mod:`.formats_uri` and :mod:`.formats_regex` (the URI family, the ``regex`` format);
* every serialization: :mod:`.number_spellings` and :mod:`.string_spellings`;
* ``uniqueItems``: :mod:`.unique_compile` (regular where the item domain is finite) and
  :mod:`.unique_items` (exact at token level per request, with the scanner of :mod:`.scan`).
"""

from __future__ import annotations

import warnings
from typing import Any

from ..errors import InvalidArgumentError
from ..gc_pause import paused_gc
from ..nfa import ByteNFA
from ..progress import compile_stage
from ..vocabulary import require_vocabulary

# The package is split by concern (the docstring's module list).  Besides the public API, the
# names below are imported from here
# by other modules and tests.  Reading them here is fine; to *replace* one (monkeypatch), patch
# the module that uses it: ``_compiler`` for MIN/MAX_FINALIZE_REUSED, ``_cache`` for _SHARED.
from ._automata import _is_empty, _wrapped  # noqa: F401
from ._cache import _SHARED, MAX_SHARED  # noqa: F401
from ._compiler import (  # noqa: F401
    MAX_FINALIZE_REUSED,
    MIN_FINALIZE_REUSED,
    JsonSchemaCompiler,
    _schema_of,
)
from ._constants import (  # noqa: F401
    FREE_VALUE_DEPTH,
    MAX_ANY_ORDER_PROPERTIES,
    MAX_COMBINATIONS,
    MAX_COMPLEMENT_STATES,
    MAX_ENUM_VALUES,
    MAX_PATTERN_PROPERTIES,
    MAX_SCHEMA_DEPTH,
    MAX_STATES,
    MAX_VALUE_NESTING,
    MAX_WITNESSES,
    UNLISTED_VALUE_DEPTH,
)
from ._ecma import _ECMA_SPACE, _ECMA_SPACE_RANGES, _ecma_to_python  # noqa: F401
from ._meta import _meta_format_ok, _meta_ok, _meta_validator  # noqa: F401
from ._nodes import _Leaf, _NoNegation, _ptr, _Synth  # noqa: F401
from ._strings import (  # noqa: F401
    _BODY,
    _CHAR,
    _CONTENT,
    _QUOTE,
    _body_excluding,
    _escape_subst,
)
from ._values import _dumps, _enum_values, _json_eq, _json_str  # noqa: F401

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
    max_states: int | None = None,
) -> ByteNFA:
    """The byte NFA of every serialization of ``schema``'s valid instances (see the module
    docstring), or only of their canonical serializations with ``canonical=True``.

    Args:
        schema: a JSON Schema (dict, bool, or JSON text), or a pydantic model class or
            ``TypeAdapter`` (anything with ``model_json_schema()`` or ``json_schema()``: its
            schema, with ``additionalProperties: false`` where the model ignores extra keys,
            pydantic's default, so that no key the model would drop is generated; pydantic
            itself is not imported).
        canonical: ``True`` (the default, for now): accept only the canonical serialization
            of each instance (what :func:`serialize_instance` writes; compact unless
            ``whitespace`` says otherwise).  ``False``: every RFC 8259 serialization of each
            valid instance (see "Every serialization" in the module docstring).
        max_exponent: where a number's exponent can change whether its value is valid
            (bounds, ``integer``, ``multipleOf``), exponents up to this absolute value are
            generated (a documented subset; :mod:`.number_spellings`).
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
        max_states: the largest automaton the compiler builds, in byte states estimated
            *before* building each array, object and string length bound (default
            :data:`MAX_STATES`); a larger estimate is :class:`UnsupportedSchemaError` naming
            the keyword, its pointer and the estimate.

    Returns:
        The byte NFA (not finalized); ``finalize`` it or lift it with
        :meth:`TokenAutomaton.from_byte_nfa`.

    Raises:
        InvalidSchemaError: not a valid JSON Schema (with the pointer of the offending part).
        UnsupportedSchemaError: a keyword this compiler cannot express exactly (keyword, pointer).
        UnresolvedReferenceError: a ``$ref`` to a document not in ``registry`` (its URI and the
            pointer of the ``$ref``).
    """
    with paused_gc():
        return JsonSchemaCompiler(
            schema, canonical=canonical, max_exponent=max_exponent, whitespace=whitespace,
            max_whitespace=max_whitespace,
            property_order=property_order, max_recursion_depth=max_recursion_depth,
            lenient=lenient, validate=validate, free_value_depth=free_value_depth,
            strict=strict, registry=registry, max_states=max_states,
        ).build()


def serialize_instance(instance: Any, schema: Any, *, validate: bool = False,
                       registry: Any = None) -> str:
    """The canonical serialization of ``instance`` for ``schema`` (what the compiled automaton
    accepts when the instance is valid): compact separators, canonical numbers and string
    escapes, object keys in the schema's declared order (anyOf/oneOf: the first branch the
    instance satisfies), additional keys after them in the instance's order.

    Raises :class:`~.errors.InvalidArgumentError` naming the JSON pointer for an instance
    nested more than :data:`MAX_VALUE_NESTING` levels (no compiled automaton holds deeper
    values; checked iteratively, before the recursive writer)."""
    _check_instance_depth(instance)
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


def _check_instance_depth(instance: Any, limit: int = MAX_VALUE_NESTING) -> None:
    """Raise :class:`~.errors.InvalidArgumentError` at the first array/object nested deeper
    than ``limit`` levels (an explicit stack: never recursion on the instance's depth)."""
    stack = [(instance, "", 0)]
    while stack:
        x, ptr, depth = stack.pop()
        if isinstance(x, dict):
            children = [(v, _ptr(ptr, k)) for k, v in x.items()]
        elif isinstance(x, (list, tuple)):
            children = [(v, _ptr(ptr, i)) for i, v in enumerate(x)]
        else:
            continue
        if depth >= limit:
            raise InvalidArgumentError(
                f"instance nested more than MAX_VALUE_NESTING={limit} levels deep at "
                f"'{ptr or '/'}': no compiled automaton accepts values that deep")
        stack.extend((v, p, depth + 1) for v, p in children)


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
    max_states: int | None = None,
):
    """Compile a JSON Schema to a :class:`~.automaton.TokenAutomaton` over ``vocab``.

    Same arguments as :func:`json_schema_to_nfa`.  ``meta`` records the options, the byte NFA
    size, dropped keywords (lenient) and ignored unknown keywords.  ``uniqueItems: true`` is
    exact: an automaton over sets of values where the item domain is small, otherwise a
    :class:`~.unique_items.UniqueItemsAutomaton` (the same methods; the state carries each
    open unique array's item values; see :mod:`.unique_items`).

    Raises:
        InvalidSchemaError, UnsupportedSchemaError: see :func:`json_schema_to_nfa`.
        EmptySchemaError: no instance is valid (an :class:`~.errors.EmptyLanguageError`
            naming the smallest empty sub-schema's pointer and the keywords that empty it).
        EmptyLanguageError: no token sequence over ``vocab`` is accepted.
    """
    with compile_stage(), paused_gc():
        require_vocabulary(vocab)
        from ..automaton import TokenAutomaton

        comp = JsonSchemaCompiler(
            schema, canonical=canonical, max_exponent=max_exponent, whitespace=whitespace,
            max_whitespace=max_whitespace,
            property_order=property_order, max_recursion_depth=max_recursion_depth,
            lenient=lenient, free_value_depth=free_value_depth, strict=strict, registry=registry,
            max_states=max_states,
        )
        comp.unique_items = True  # uniqueItems over large domains: marked arrays (.unique_compile)
        nfa = comp.build()  # already finalized
        if _is_empty(nfa):  # say which sub-schema is empty, and why, before any lifting
            from ..errors import EmptySchemaError
            from ._empty import explain_empty

            raise EmptySchemaError(*explain_empty(comp))
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
