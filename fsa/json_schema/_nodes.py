"""The compiler's own objects: the schema nodes it writes (:class:`_Synth`), a conjunction's
automaton split by JSON type (:class:`_Leaf`), the exceptions of negation, and JSON
pointers."""

from __future__ import annotations

from typing import Any

from ..nfa import ByteNFA


def _ptr(base: str, *parts: Any) -> str:
    out = base
    for p in parts:
        out += "/" + str(p).replace("~", "~0").replace("/", "~1")
    return out


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
