"""``not``: the compiler's :class:`_NegationMixin`, which rewrites the negation of a schema
into a positive schema by De Morgan (never by complementing a value automaton)."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidSchemaError
from ._base import _CompilerBase
from ._constants import _ALL_TYPES, _CHECKED_FORMATS, _SUPPORTED, _TYPE_MAP, _UNSUPPORTED
from ._nodes import _NoNegation, _ptr, _Synth
from .formats import FORMATS


class _NegationMixin(_CompilerBase):
    """Negated schemas (``not``, the negated branches of an exact ``oneOf``, ``not if``) as
    positive :class:`_Synth` schemas."""

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
