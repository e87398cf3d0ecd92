"""The base of the compiler's mixins: the state :class:`~.JsonSchemaCompiler` sets up in its
constructor and every part of the compiler reads."""

from __future__ import annotations

from typing import Any

from ..nfa import ByteNFA
from ._nodes import _Leaf
from .refs import RefResolver


class _CompilerBase:
    """Attributes shared by the mixins of :class:`~.JsonSchemaCompiler` (declared here, set by
    its ``__init__``).  :func:`~.compile_json_schema` and :mod:`.unique_compile` may also set
    ``unique_items`` and ``marked`` (read with ``getattr``: absent means False)."""

    #: the root schema (a dict or a boolean)
    root: Any
    lenient: bool
    assert_formats: bool
    #: "schema" or "any"
    property_order: str
    strict: bool
    #: whether ``strict`` removed anything (warned about by ``build``)
    strict_used: bool
    #: pointers of Draft 4-7 ``dependencies`` enforced in a 2019-09/2020-12 schema
    legacy_dependencies: set[str]
    #: how many times a recursive ``$ref`` is unrolled
    max_depth: int
    #: nesting depth of free values, and of the values of unlisted properties
    free_depth: int
    unlisted_depth: int
    #: (keyword, pointer, detail) dropped under ``lenient``
    dropped: list[tuple[str, str, str]]
    #: unknown keywords and formats that were ignored
    ignored: set[str]
    #: recursive ``$ref`` targets cut at ``max_depth``
    truncated: set[str]
    canonical: bool
    max_exponent: int | None
    #: whitespace allowed in each gap (None: compact)
    ws: ByteNFA | None
    #: the whitespace and spelling settings that shared automata depend on
    _ws_key: tuple
    registry: Any
    #: 3, 4, 6, 7, 2019 or 2020
    draft: int
    _refs: RefResolver
    #: leaves and value automata per (pointers, recursion counts) or flat key
    _cache: dict[tuple, list[_Leaf]]
    _nfa_cache: dict[tuple, ByteNFA]
    #: ``not`` pointer -> (negated schema,)
    _neg_cache: dict[str, tuple[Any]]
    #: ``oneOf`` pointer -> compiled as B_i & not B_j
    _oneof_exact: dict[str, bool]
    #: ``$ref`` targets reachable from a pointer
    _reach: dict[str, frozenset[str]]
    _states: int
    #: largest automaton (byte states, estimated before building) the compiler builds
    max_states: int
    free_depth_used: bool
    unlisted_used: bool
    #: separators (with the whitespace setting's padding)
    COMMA: ByteNFA
    COLON: ByteNFA
