"""Leaves: the compiler's :class:`_LeafMixin`, which builds the automaton of one flat
conjunction split by JSON type (null, boolean, number, string, array, object)."""

from __future__ import annotations

from .. import nfa as N
from ..errors import InvalidSchemaError
from ..nfa import ByteNFA
from ._automata import _is_empty
from ._base import _CompilerBase
from ._constants import _ALL_TYPES, _ONLY_FOR, _TYPE_MAP, _VALIDATION, MAX_ENUM_VALUES
from ._nodes import _Leaf, _ptr, _Synth
from ._numbers import _HAS_DOT
from ._values import _enum_values


class _LeafMixin(_CompilerBase):
    """One conjunction without disjunctions: its parts by JSON type, and the types whose every
    value it accepts."""

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
        for s, p in flat:
            ev = s.get("enum")
            if isinstance(ev, list) and len(ev) > MAX_ENUM_VALUES:
                # checked before any work: 5,000 string values took 2.8 s, 20,000 took 41 s
                self._unsupported("enum", _ptr(p, "enum"),
                                  f"enum of {len(ev):,} values (limit {MAX_ENUM_VALUES:,})")
                flat = [(x if x is not s else {k: v for k, v in s.items() if k != "enum"}, q)
                        for x, q in flat]
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
