"""``uniqueItems: true`` in the JSON Schema compiler: an exact regular automaton where the item
domain is small and finite, and *marked* arrays for the token-level checker everywhere else.

:func:`unique_array` is the hook that :meth:`~.json_schema.JsonSchemaCompiler._array` calls for
every array conjunction.  It returns None unless the conjunction has ``uniqueItems: true`` and
``maxItems`` > 1 (then the array is built exactly as before: schemas without ``uniqueItems``
compile to bit-identical automata).  Otherwise, one of two routes, chosen per array:

* **Exact (regular)**: the items (no ``prefixItems``, no ``contains``) take at most
  :data:`MAX_EXACT_VALUES` distinct values, read from ``enum``/``const``, ``boolean``/``null``
  types or a bounded ``integer`` range (each value checked against the item schema with
  ``jsonschema``), and the automaton over the *sets of values used so far* has at most
  :data:`MAX_EXACT_COPIES` item copies.  Each state is a set U of values already in the
  array; an item v outside U leads to U + {v}; ``minItems``/``maxItems`` count |U|.  Item v is
  every serialization of v that the compiler allows (``_value_nfa``), so equal values in
  different spellings are one value.  The automaton is the exact language: the budget masks
  of :mod:`.state` keep their guarantee unchanged (a walk within the budget never dead-ends).
* **Marked (checker)**: the array is built by the ordinary construction with its structural
  bytes replaced by bytes that never occur in UTF-8 text: :data:`OPEN` for ``[``, :data:`SEP`
  for the item separator ``,`` and :data:`CLOSE` for ``]``.  The markers travel through every
  later combinator and through :func:`~.nfa.finalize`: states inside a unique array have
  different futures from states inside any other array, so finalize never merges them.
  :func:`demark` maps the markers back to the real bytes *without renumbering states*; the
  token automaton is lifted from that (the language without uniqueness), and
  :mod:`.unique_items` reads the marked NFA to know, state by state and byte by byte, where a
  unique array opens, where an item ends and where the array closes.  The compiler sets
  ``marked = True``; only :func:`~.compile_json_schema` (which sets
  ``unique_items = True`` on its compiler) accepts marked arrays:
  :func:`~.json_schema.json_schema_to_nfa` (a byte NFA: regular languages only) raises
  :class:`~.errors.UnsupportedSchemaError` for them, as before.

Analyses that look at bytes (``oneOf`` disjointness by intersection, "may hold an object")
read :func:`demark`-ed automata: ignoring uniqueness over-approximates the values, so a
disjointness proof stays sound; ``not``/``enum`` exclusions of array values from a marked array
are refused (UnsupportedSchemaError naming the pointer), as is ``not: {uniqueItems: true}``
(unchanged: no exact negation).
"""

from __future__ import annotations

import json
import math

from .. import nfa as N
from ..errors import InvalidArgumentError
from ..nfa import ByteNFA
from .scan import value_key

__all__ = [
    "OPEN", "SEP", "CLOSE", "MARKERS", "REAL_BYTE", "MAX_EXACT_VALUES", "MAX_EXACT_COPIES",
    "has_markers", "demark", "lift_view", "unique_array", "finite_values",
]

#: Marker bytes (never in UTF-8): a unique array's ``[``, item separator ``,`` and ``]``.
OPEN, SEP, CLOSE = 0xF8, 0xF9, 0xFA
#: The three marker bits of a 256-bit edge mask.
MARKERS = (1 << OPEN) | (1 << SEP) | (1 << CLOSE)
#: Marker byte -> the JSON byte it stands for.
REAL_BYTE = {OPEN: 0x5B, SEP: 0x2C, CLOSE: 0x5D}
#: Most distinct item values for the exact (regular) route.
MAX_EXACT_VALUES = 12
#: Most embedded item copies (sum over reachable value sets U of the values outside U).
MAX_EXACT_COPIES = 4096
#: Widest integer range enumerated for the exact route.
MAX_INT_SPAN = 64


def has_markers(a: ByteNFA | None) -> bool:
    """Whether some edge of ``a`` carries a marker byte (cached on ``a``)."""
    if a is None:
        return False
    hit = a._cache.get("has_markers")
    if hit is None:
        hit = a._cache["has_markers"] = any(m & MARKERS for _, m, _ in a.edges)
    return hit


def _relabel(m: int) -> int:
    if not m & MARKERS:
        return m
    out = m & ~MARKERS
    for mk, real in REAL_BYTE.items():
        if m >> mk & 1:
            out |= 1 << real
    return out


def demark(a: ByteNFA) -> ByteNFA:
    """``a`` with each marker byte read as the byte it stands for, same states and epsilons
    (``a`` itself when it has no marker; cached on ``a``).  Its language is the marked
    language without uniqueness."""
    if not has_markers(a):
        return a
    hit = a._cache.get("demarked")
    if hit is None:
        hit = a._cache["demarked"] = ByteNFA(
            a.num_states, a.start, a.finals,
            tuple((s, _relabel(m), d) for s, m, d in a.edges), a.epsilons)
    return hit


def lift_view(t: ByteNFA) -> ByteNFA:
    """The demarked copy of a *finalized* marked NFA ``t``, numbered like ``t`` and recorded as
    its own finalized form, so that :func:`~.lift.lift` (which finalizes first) lifts it without
    merging or renumbering states: token state i of the lifted automaton is then byte state
    ``_memo["byte_states"][i]`` of ``t`` itself (recorded by ``TokenAutomaton._from_lifted``).

    Raises:
        ValueError: ``t`` has epsilons or a start other than 0 (not finalized)."""
    if t.epsilons or t.start != 0:
        raise InvalidArgumentError("lift_view() needs a finalized NFA")
    r = ByteNFA(t.num_states, 0, t.finals, tuple((s, _relabel(m), d) for s, m, d in t.edges))
    r._cache[("finalize", True)] = r
    r._cache[("finalize", False)] = r
    return r


# ----------------------------------------------------------------------------- the hook


def _marked_parts(comp) -> tuple[ByteNFA, ByteNFA, ByteNFA]:
    hit = comp.__dict__.get("_unique_marked_parts")
    if hit is None:
        sep, op, cl = (N.literal(bytes([x])) for x in (SEP, OPEN, CLOSE))
        if comp.ws:
            sep = N.concat(comp.ws, sep, comp.ws)
            op = N.concat(op, comp.ws)
            cl = N.concat(comp.ws, cl)
        hit = comp.__dict__["_unique_marked_parts"] = (sep, op, cl)
    return hit


def unique_array(comp, flat, lo: int, hi: int | None, P: int, contains: bool, elem_items,
                 stack) -> None | ByteNFA | tuple[ByteNFA, ByteNFA, ByteNFA]:
    """What :meth:`~.json_schema.JsonSchemaCompiler._array` builds for the array conjunction
    ``flat`` ((schema, pointer) pairs) with item bounds ``lo``..``hi`` (None: unbounded),
    ``P`` prefixItems positions, ``contains`` (a minContains count applies) and
    ``elem_items(i)`` (the item conjunction at position i):

    * None: no uniqueness to enforce (no ``uniqueItems: true``, or ``maxItems`` <= 1) -- or it
      was refused under ``lenient`` (dropped with a warning);
    * a ByteNFA: the exact array automaton (module docstring, exact route);
    * ``(separator, open, close)``: the marked parts to build the array with (checker route).

    Raises:
        UnsupportedSchemaError: the checker route is needed but the compiler was not created by
            :func:`~.compile_json_schema` (``unique_items`` unset), or the array's
            values are also excluded by a ``not``/``enum`` (pointer of ``uniqueItems``).
    """
    ptr = None
    for s, p in flat:
        if isinstance(s, dict) and s.get("uniqueItems") is True:
            ptr = p + "/uniqueItems"
            break
    if ptr is None or (hi is not None and hi <= 1):
        return None
    if P == 0 and not contains:
        exact = _exact_array(comp, elem_items(0), lo, hi, stack)
        if exact is not None:
            return exact
    for s, _p in flat:
        excl = s.get("$not-enum") if isinstance(s, dict) else None
        if excl and any(isinstance(v, list) for v in excl[0]):
            comp._unsupported("uniqueItems", ptr, "array values excluded by not/enum from a "
                              "uniqueItems array (checked at token level) cannot be removed")
            return None
    if not getattr(comp, "unique_items", False):
        comp._unsupported("uniqueItems", ptr, "uniqueItems over an infinite or large item "
                          "domain is not regular: compile_json_schema enforces it at token "
                          "level; json_schema_to_nfa cannot")
        return None
    comp.marked = True
    return _marked_parts(comp)


# ----------------------------------------------------------------------------- exact route


def _types_of(flat) -> set[str] | None:
    """The JSON types allowed by every ``type`` in ``flat`` (None: no ``type`` keyword)."""
    out: set[str] | None = None
    for s, _p in flat:
        t = s.get("type")
        if t is None:
            continue
        names = {t} if isinstance(t, str) else set(t)
        if "number" in names:
            names.add("integer")
        out = names if out is None else out & names
    return out


def _int_bounds(flat) -> tuple[int | None, int | None]:
    lo = hi = None
    for s, _p in flat:
        for k in ("minimum", "exclusiveMinimum"):
            v = s.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                b = math.floor(v) + 1 if k == "exclusiveMinimum" else math.ceil(v)
                lo = b if lo is None else max(lo, b)
        for k in ("maximum", "exclusiveMaximum"):
            v = s.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                b = math.ceil(v) - 1 if k == "exclusiveMaximum" else math.floor(v)
                hi = b if hi is None else min(hi, b)
    return lo, hi


def finite_values(comp, items, stack) -> list | None:
    """The distinct JSON values valid against the item conjunction ``items`` when they are
    read off the schema (``enum``/``const``, ``boolean``/``null`` types, a bounded ``integer``
    range of at most :data:`MAX_INT_SPAN` values) and number at most
    :data:`MAX_EXACT_VALUES`; else None.  Every candidate is checked with ``jsonschema``
    against each conjunct (so ``minimum``, ``multipleOf``, ``not`` ... all apply)."""
    from ._nodes import _Synth
    from ._values import _enum_values

    ex = comp._expand(items, stack)
    if ex is None:
        return []
    flat, disj, _st = ex
    if disj or any(isinstance(s, _Synth) for s, _ in flat):
        return None
    cands = _enum_values(flat)
    if cands is None:
        types = _types_of(flat)
        if types is None or not types <= {"boolean", "null", "integer"}:
            return None
        cands = []
        if "boolean" in types:
            cands += [True, False]
        if "null" in types:
            cands.append(None)
        if "integer" in types:
            a, b = _int_bounds(flat)
            if a is None or b is None or b - a + 1 > MAX_INT_SPAN:
                return None
            cands += list(range(a, b + 1))
    out: list = []
    keys: set = set()
    validator = comp._validator
    for v in cands:
        try:
            k = value_key(json.dumps(v))
        except (TypeError, ValueError):
            continue
        if k in keys:
            continue
        ok = True
        for s, p in flat:
            sub = {x: y for x, y in s.items() if x not in ("allOf", "anyOf", "oneOf", "$ref")}
            try:  # with the $id resources enclosing p entered (see _jsonschema_valid)
                valid = comp._jsonschema_valid(sub, p, v)
            except Exception:  # noqa: BLE001 - jsonschema's own failure
                valid = validator.evolve(schema=sub).is_valid(v)
            if not valid:
                ok = False
                break
        if ok:
            keys.add(k)
            out.append(v)
            if len(out) > MAX_EXACT_VALUES:
                return None
    return out


def _copies(K: int, lo: int, hi: int | None) -> int:
    m = K if hi is None else min(K, hi)
    return sum(math.comb(K, j) * (K - j) for j in range(m))


def _exact_array(comp, items, lo: int, hi: int | None, stack) -> ByteNFA | None:
    """The exact automaton of arrays of distinct values of ``items`` (None: not this route)."""
    from ._automata import _wrapped
    from ._builder import _Builder

    values = finite_values(comp, items, stack)
    if values is None or _copies(len(values), lo, hi) > MAX_EXACT_COPIES:
        return None
    parts = [comp._value_nfa(v, comp._integers_plain) for v in values]
    K = len(parts)
    b = _Builder()
    state: dict[int, int] = {0: b.state()}
    start = state[0]
    todo = [0]
    while todo:
        used = todo.pop()
        src = state[used]
        n = bin(used).count("1")
        if n >= lo:
            b.finals.add(src)
        if hi is not None and n >= hi:
            continue
        for j in range(K):
            if used >> j & 1:
                continue
            nxt = used | 1 << j
            dst = state.get(nxt)
            if dst is None:
                dst = state[nxt] = b.state()
                todo.append(nxt)
            entry = b.state()
            for f in b.embed(parts[j], entry):
                b.eps.append((f, dst))
            if n:
                centry = b.state()
                for f in b.embed(comp.COMMA, centry):
                    b.eps.append((f, entry))
                entry = centry
            b.eps.append((src, entry))
    return _wrapped(b, start, *comp._brackets("[", "]"))
