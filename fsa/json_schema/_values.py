"""JSON values: kinds, equality, canonical literals (:func:`_dumps`), the values an
``enum``/``const`` conjunction allows, and the compiler's :class:`_ValuesMixin` (automata of
given values, and of everything but given values)."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

from .. import nfa as N
from ..errors import InvalidArgumentError, InvalidArgumentTypeError, UnsupportedSchemaError
from ..nfa import ByteNFA
from ._automata import _is_empty, _not_literals
from ._base import _CompilerBase
from ._constants import _ANNOTATIONS, MAX_COMPLEMENT_STATES
from ._nodes import _Leaf, _Synth
from ._strings import _complement_content
from .formats import canonical_number, to_decimal


def _json_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


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
            raise InvalidArgumentError(f"{v!r} is not a JSON value")
        return "integer" if v == int(v) else "fraction"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise InvalidArgumentTypeError(f"not a JSON value: {v!r}")


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
    raise InvalidArgumentTypeError(f"not a JSON value: {v!r}")


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


class _ValuesMixin(_CompilerBase):
    """Given values: the leaf of an ``enum``/``const`` conjunction, the automaton of one value's
    serializations, and the removal of values (``not`` of an ``enum``/``const``)."""

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
        for s, p in flat:
            sub = {k: x for k, x in s.items() if k not in ("enum", "const", "anyOf", "oneOf",
                                                           "allOf", "$ref")}
            if self.draft >= 6 and all(k == "type" or k in _ANNOTATIONS for k in sub):
                continue  # the caller keeps only values of the conjunction's types
            try:
                ok = self._jsonschema_valid(sub, p, v)
            except Exception as e:  # noqa: BLE001 - jsonschema's own failure, made typed
                raise UnsupportedSchemaError(
                    "$ref", p, "checking the enum/const values against the other keywords "
                    f"here, jsonschema failed: {type(e).__name__}: {str(e)[:160]}") from None
            if not ok:
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
            # draft-04: integral numbers inside arrays/objects always plain (a subset: the
            # item schemas are not consulted), at the top level where the types demand it
            plain = self._integers_plain and (t != "number" or "fraction" not in types)
            parts.setdefault(t, []).append(self._value_nfa(v, plain))
        return _Leaf({t: N.union(*ls) for t, ls in parts.items()}, {})

    def _value_nfa(self, v: Any, plain: bool = False) -> ByteNFA:
        """Every serialization of the JSON value ``v`` that this compiler's language allows
        (objects keep ``v``'s key order): the canonical literal when ``canonical`` and compact,
        otherwise built structurally (whitespace gaps, number and string spellings).
        ``plain``: integral numbers (at any depth) without fraction or exponent only."""
        if self.canonical and self.ws is None:
            return N.literal(_dumps(v))
        if isinstance(v, dict):
            open_, close = self._brackets("{", "}")
            items = [N.concat(self._spell(N.literal(_json_str(k))), self.COLON,
                              self._value_nfa(x, plain)) for k, x in v.items()]
        elif isinstance(v, list):
            open_, close = self._brackets("[", "]")
            items = [self._value_nfa(x, plain) for x in v]
        elif isinstance(v, str):
            return self._spell(N.literal(_json_str(v)))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and not self.canonical:
            return self._number_value(to_decimal(v), plain)
        else:
            return N.literal(_dumps(v))
        seq: list[ByteNFA] = [open_]
        for i, it in enumerate(items):
            if i:
                seq.append(self.COMMA)
            seq.append(it)
        seq.append(close)
        return N.concat(*seq)
