"""Property-based fuzzing of the JSON Schema front end (issue 23).

Random schemas from a small grammar of keywords (types, numeric/string/array/object keywords,
``enum``/``const``, ``allOf``/``anyOf``/``oneOf``/``not``/``if``, ``$ref`` to ``$defs``) and
random instances (small JSON values, plus texts sampled from the compiled automaton itself).
For each instance, ``jsonschema`` (Draft 2020-12, formats checked) is the reference:

* the canonical automaton (``json_schema_to_nfa(schema)``) on ``serialize_instance``'s text,
* the every-serialization automaton (``canonical=False``) on that text in every style of
  :func:`tractable.testing.json_schema.serializations` (compact, ``json.dumps``'s default,
  ``indent=2``, Python floats),
* every text sampled from the canonical automaton must be valid JSON valid against the schema.

Outcomes (:func:`check_schema` records them; :mod:`bench.fuzz_bench` counts them over many
examples): ``accepted_invalid`` and ``untyped`` (an exception that is not a
``TractableError``) are bugs; ``rejected_valid`` is a bug unless the compile warned that it
builds a documented subset (free-value depth, recursion unrolling); ``refused`` (a typed
``UnsupportedSchemaError``/``InvalidSchemaError``) is documented behaviour.  The CI run is
derandomized (fixed examples) and short; ``bench/fuzz_bench.py`` runs the long one.
"""

from __future__ import annotations

import json
import random
import time
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: Seconds one example (both compiles and every check) may take before it counts as a hang.
EXAMPLE_LIMIT_S = 30.0
#: free_value_depth of the fuzz compiles: unconstrained values nest at most this deep (the
#: default 6 costs ~6k states per free value, ~1 s per every-serialization compile here);
#: instances nested deeper are the documented subset.
FREE_DEPTH = 3

_KEYS = ["a", "b", "c"]
_PATTERNS = ["^a", "b$", "^[a-c]*$", "a|b", "^[0-9]+$", "^.{0,2}$"]
_SCALARS = [None, True, False, 0, 1, -2, 3, 0.5, -1.5, 10, "", "a", "ab", "é", "b1"]
_NUMBERS = [-3, -1, 0, 0.5, 1, 2, 2.5, 5, 10]


@st.composite
def _leaf(draw) -> dict:
    t = draw(st.sampled_from(["null", "boolean", "integer", "number", "string", None, None,
                              ["string", "integer"], ["null", "number"]]))
    s: dict[str, Any] = {} if t is None else {"type": t}
    ts = {t} if isinstance(t, str) else set(t or ["integer", "string"])
    if ts & {"integer", "number"}:
        for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if draw(st.integers(0, 3)) == 0:
                s[k] = draw(st.sampled_from(_NUMBERS))
        if draw(st.integers(0, 4)) == 0:
            s["multipleOf"] = draw(st.sampled_from([1, 2, 3, 0.5]))
    if "string" in ts:
        if draw(st.booleans()):
            s["minLength"] = draw(st.integers(0, 3))
        if draw(st.booleans()):
            s["maxLength"] = draw(st.integers(0, 4))
        if draw(st.integers(0, 2)) == 0:
            s["pattern"] = draw(st.sampled_from(_PATTERNS))
        if draw(st.integers(0, 8)) == 0:
            s["format"] = "date"
    if draw(st.integers(0, 5)) == 0:
        s["enum"] = draw(st.lists(st.sampled_from(_SCALARS), min_size=0, max_size=4))
    elif draw(st.integers(0, 8)) == 0:
        s["const"] = draw(st.sampled_from(_SCALARS))
    return s


def _extend(inner):
    props = st.dictionaries(st.sampled_from(_KEYS), inner, max_size=3)
    return st.one_of(
        st.builds(lambda it, lo, hi: {"type": "array", "items": it, **lo, **hi}, inner,
                  st.sampled_from([{}, {"minItems": 1}, {"minItems": 2}]),
                  st.sampled_from([{}, {"maxItems": 2}, {"maxItems": 3}])),
        st.builds(lambda pre, rest: {"type": "array", "prefixItems": pre, **rest},
                  st.lists(inner, min_size=1, max_size=2),
                  st.sampled_from([{}, {"items": False}, {"items": {"type": "integer"}}])),
        st.builds(lambda c, mc: {"type": "array", "contains": c, **mc}, inner,
                  st.sampled_from([{}, {"minContains": 2}, {"maxItems": 3}])),
        st.builds(lambda p, req, add, mm: {"type": "object", "properties": p,
                                           "required": sorted(set(req) & set(p)), **add, **mm},
                  props, st.lists(st.sampled_from(_KEYS), max_size=2),
                  st.sampled_from([{}, {"additionalProperties": False},
                                   {"additionalProperties": {"type": "integer"}}]),
                  st.sampled_from([{}, {"minProperties": 1}, {"maxProperties": 1}])),
        st.builds(lambda xs: {"allOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda x: {"not": x}, inner),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, inner, inner, inner),
        st.builds(lambda x, k: {"$id": f"urn:fuzz:{k}", "$defs": {"d": x},
                                "$ref": "#/$defs/d"}, inner, st.integers(0, 10**9)),
        st.builds(lambda x, y: {**x, **y}, inner, _leaf()),
    )


def schemas(max_leaves: int = 5):
    """Hypothesis strategy: small JSON Schemas from the grammar above."""
    return st.recursive(_leaf(), _extend, max_leaves=max_leaves)


def instances(max_leaves: int = 6):
    """Hypothesis strategy: small JSON values (the keys and scalars the schemas mention)."""
    scalar = st.one_of(st.sampled_from(_SCALARS), st.integers(-5, 12),
                       st.sampled_from([0.25, 1.5, -2.5, 7.5, 1e-3, 100.125]),
                       st.text(alphabet="abc1-é", max_size=4))
    return st.recursive(scalar, lambda c: st.lists(c, max_size=3)
                        | st.dictionaries(st.sampled_from(_KEYS + ["d"]), c, max_size=3),
                        max_leaves=max_leaves)


def _valid(schema: Any, x: Any) -> bool:
    import jsonschema

    cls = jsonschema.Draft202012Validator
    return cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(x)


def depth(x: Any) -> int:
    """Nesting depth of arrays/objects in a JSON value (a scalar: 0)."""
    if isinstance(x, dict):
        return 1 + max((depth(v) for v in x.values()), default=0)
    if isinstance(x, list):
        return 1 + max((depth(v) for v in x), default=0)
    return 0


def _reference(rec: dict, fn):
    """``fn()`` (a ``jsonschema`` verdict), or None where ``jsonschema`` itself fails: its
    ``contains`` keyword does not enter an embedded ``$id`` resource (PointerToNowhere on
    ``{"contains": {"$id": "urn:x", "$defs": {"d": ...}, "$ref": "#/$defs/d"}}``, jsonschema
    4.26), which is no verdict on the compiler; recorded in ``reference_errors``."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the reference's own failure
        rec["reference_errors"].append(f"{type(e).__name__}: {e}"[:200])
        return None


def check_schema(schema: Any, xs: list, *, seed: int = 0, samples: int = 4,
                 every_style: bool = True, free_value_depth: int = FREE_DEPTH) -> dict:
    """Run every check on ``schema`` and the instances ``xs``; return the record: ``status``
    (``ok`` / ``refused`` / ``untyped``), ``error``, ``checks`` (instance checks made),
    ``accepted_invalid`` and ``rejected_valid`` (lists of (style, text)),
    ``rejected_documented`` (valid instances outside a documented subset the compile warned
    about: nested deeper than ``free_value_depth``, or past a recursive ``$ref``'s
    unrolling), ``reference_errors`` (instances ``jsonschema`` itself failed on: skipped),
    ``seconds``."""
    from tractable.fsa import nfa as N
    from tractable.fsa.errors import TractableError
    from tractable.fsa.json_schema import json_schema_to_nfa, serialize_instance

    from tractable.testing.json_schema import PathSampler, check_instance_text, serializations

    rec: dict[str, Any] = {"schema": schema, "status": "ok", "error": "", "checks": 0,
                           "accepted_invalid": [], "rejected_valid": [],
                           "rejected_documented": [], "reference_errors": []}
    t0 = time.perf_counter()
    opts = {"free_value_depth": free_value_depth}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            canon = N.finalize(json_schema_to_nfa(schema, **opts))
            every = (N.finalize(json_schema_to_nfa(schema, canonical=False, **opts))
                     if every_style else None)
        said = " ".join(str(w.message) for w in caught)
        unrolled = "unrolled" in said

        def verdict(x, valid, accepted, style, text):
            if accepted == valid:
                return
            if not valid:
                rec["accepted_invalid"].append((style, text))
            elif unrolled or depth(x) > free_value_depth:
                rec["rejected_documented"].append((style, text))
            else:
                rec["rejected_valid"].append((style, text))

        for x in xs:
            valid = _reference(rec, lambda x=x: _valid(schema, x))
            if valid is None:
                continue
            text = serialize_instance(x, schema)
            rec["checks"] += 1
            verdict(x, valid, N.matches(canon, text.encode()), "canonical", text)
            if every is None:
                continue
            for style, t in serializations(text).items():
                rec["checks"] += 1
                verdict(x, valid, N.matches(every, t.encode()), f"every/{style}", t)
        if samples and canon.finals:
            sampler = PathSampler(canon, max_len=40)
            rng = random.Random(seed)
            for _ in range(samples if sampler.lengths else 0):
                text = sampler.sample(rng)
                why = _reference(rec, lambda t=text: check_instance_text(t, schema))
                if why is None:
                    continue
                rec["checks"] += 1
                if why:
                    rec["accepted_invalid"].append(("sampled", text.decode("utf-8", "replace")
                                                    + f"  [{why}]"))
    except TractableError as e:
        rec["status"], rec["error"] = "refused", f"{type(e).__name__}: {e}"[:300]
    except Exception as e:  # noqa: BLE001 - an untyped exception is what is being counted
        rec["status"], rec["error"] = "untyped", f"{type(e).__name__}: {e}"[:300]
    rec["seconds"] = time.perf_counter() - t0
    return rec


def assert_clean(rec: dict) -> None:
    """The CI verdict on one record: no untyped exception, no hang, nothing accepted that is
    invalid, nothing valid rejected outside the documented subsets."""
    where = json.dumps(rec["schema"])
    assert rec["status"] != "untyped", (rec["error"], where)
    assert rec["seconds"] < EXAMPLE_LIMIT_S, (rec["seconds"], where)
    assert not rec["accepted_invalid"], (rec["accepted_invalid"][:3], where)
    assert not rec["rejected_valid"], (rec["rejected_valid"][:3], where)


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(schemas(), st.lists(instances(), min_size=1, max_size=5), st.integers(0, 2**16))
def test_fuzz_json_schema_against_jsonschema(schema, xs, seed):
    assert_clean(check_schema(schema, xs, seed=seed))


@pytest.mark.parametrize("schema,instance", [
    ({"type": "number", "multipleOf": 0.5, "exclusiveMaximum": 2.5}, 2),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, 1.5),
    ({"type": "array", "contains": {"type": "string"}, "minContains": 2}, ["a", 1, "b"]),
    ({"not": {"type": "object", "required": ["a"]}}, {"b": 1}),
    ({"if": {"type": "string"}, "then": {"maxLength": 1}, "else": {"type": "integer"}}, "ab"),
])
def test_fuzz_checks_can_fail(schema, instance, monkeypatch):
    """The harness catches what it is for: a checker that lies about validity turns each of
    these into an accepted-invalid or rejected-valid record."""
    assert not check_schema(schema, [instance], samples=0)["accepted_invalid"]
    monkeypatch.setattr(__import__(__name__), "_valid", lambda s, x: not _real_valid(s, x))
    rec = check_schema(schema, [instance], samples=0)
    assert rec["accepted_invalid"] or rec["rejected_valid"]


_real_valid = _valid
