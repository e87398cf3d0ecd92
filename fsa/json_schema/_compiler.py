"""The compiler core: :class:`JsonSchemaCompiler` (options, meta-validation, ``$ref``
resolution, the caches of leaves and value automata, and ``build``), made of the mixins of
the other modules of this package."""

from __future__ import annotations

import json
import re
import sys
import warnings
from typing import Any

from .. import nfa as N
from ..errors import InvalidArgumentError, InvalidSchemaError, UnsupportedSchemaError
from ..nfa import ByteNFA
from ..nfa_subsets import merge_parallel
from ._arrays import _ArraysMixin
from ._builder import union as _union
from ._cache import _cached, _share
from ._constants import (
    _ANNOTATIONS,
    _SUPPORTED,
    _UNSUPPORTED,
    _VALIDATION,
    _WHITESPACE,
    _WS_ANY,
    _WS_MASK,
    FREE_VALUE_DEPTH,
    MAX_COMBINATIONS,
    MAX_SCHEMA_DEPTH,
    MAX_STATES,
    MAX_VALUE_NESTING,
    UNLISTED_VALUE_DEPTH,
)
from ._free import _FreeValuesMixin
from ._leaf import _LeafMixin
from ._logic import _LogicMixin
from ._meta import (
    _json_value_problem,
    _meta_ok,
    _meta_schema,
    _meta_validator,
    _too_deep,
    _validator_name,
)
from ._negation import _NegationMixin
from ._nodes import _UNLISTED, _Leaf, _ptr, _Synth
from ._numbers import _NumbersMixin
from ._objects import _ObjectsMixin
from ._serialize import _SerializeMixin
from ._strings import _StringsMixin
from ._values import _ValuesMixin
from .refs import RefResolver

#: A value automaton built for one use is left raw: ``build`` finalizes everything around it
#: in one pass (finalizing each nested part as it was built re-walked inner states once per
#: nesting level: 63 -> 30 ms of ``_canonical`` over ten Github_medium schemas, the same token
#: automata).  One used again (a definition ``$ref``-ed twice) is finalized at its second use,
#: from MIN_FINALIZE_REUSED states (smaller ones are mostly glue) up to MAX_FINALIZE_REUSED
#: (Github_ultra/o13934: 170 uses of one definition); larger ones are left to ``build``
#: (finalizing six nested ~10^5-state levels of a Kubernetes pod spec took 9.5 of its 15 s).
MIN_FINALIZE_REUSED = 64
MAX_FINALIZE_REUSED = 250_000


def _schema_of(schema: Any) -> Any:
    """``schema`` itself, or the JSON Schema a pydantic model class (or instance) or
    ``TypeAdapter`` generates: duck-typed (``model_json_schema()``, else ``json_schema()``),
    so pydantic stays an optional dependency that this module never imports.

    A generated schema is *closed* where the model ignores extra keys: pydantic writes
    ``additionalProperties: false`` for ``extra="forbid"``, ``true`` for ``extra="allow"`` and
    nothing for ``extra="ignore"`` (its default), whose keys ``model_validate_json`` drops.  Such
    objects get ``additionalProperties: false``: the texts generated for a model are those
    ``model_dump_json`` can write (in every spelling), each parsing to the same object.  Pass
    ``Model.model_json_schema()`` to compile the JSON Schema's own open objects instead."""
    if isinstance(schema, (dict, bool, str, bytes, list, int, float)) or schema is None:
        return schema
    for name in ("model_json_schema", "json_schema"):
        make = getattr(schema, name, None)
        if callable(make):
            return _close_ignored_extras(make())
    return schema


def _keyword_of(pointer: str) -> str:
    """The last schema keyword named on ``pointer`` (``"properties"`` for
    ``#/properties/a/properties/b``), or ``"$schema"`` where none is."""
    words = _SUPPORTED | _UNSUPPORTED | _ANNOTATIONS
    for seg in reversed(pointer.split("/")[1:]):
        seg = seg.replace("~1", "/").replace("~0", "~")
        if seg in words:
            return seg
    return "$schema"


def _close_ignored_extras(node: Any) -> Any:
    """A copy of a pydantic-generated schema with ``additionalProperties: false`` on every
    object schema that lists ``properties`` and says nothing about other keys."""
    if isinstance(node, list):
        return [_close_ignored_extras(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _close_ignored_extras(v) for k, v in node.items()}
    if ("properties" in out and "additionalProperties" not in out
            and "patternProperties" not in out and "unevaluatedProperties" not in out):
        out["additionalProperties"] = False
    return out


class JsonSchemaCompiler(
    _LogicMixin,
    _NegationMixin,
    _LeafMixin,
    _FreeValuesMixin,
    _ValuesMixin,
    _NumbersMixin,
    _StringsMixin,
    _ArraysMixin,
    _ObjectsMixin,
    _SerializeMixin,
):
    """Compiles one (root) schema.  Use :func:`json_schema_to_nfa`/:func:`compile_json_schema`.

    The compiler is assembled from mixins, one per concern: :class:`~._logic._LogicMixin`
    (``allOf``/``$ref``/``anyOf``/``oneOf``/``if``/dependencies),
    :class:`~._negation._NegationMixin` (``not``), :class:`~._leaf._LeafMixin` (one
    conjunction by JSON type), :class:`~._free._FreeValuesMixin`,
    :class:`~._values._ValuesMixin` (``enum``/``const``), :class:`~._numbers._NumbersMixin`,
    :class:`~._strings._StringsMixin`, :class:`~._arrays._ArraysMixin`,
    :class:`~._objects._ObjectsMixin` and :class:`~._serialize._SerializeMixin`; this class
    holds the options, ``$ref`` resolution, the caches and :meth:`build`."""

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
        max_states: int | None = None,
    ):
        if whitespace is None:
            whitespace = "compact" if canonical else "any"
        if whitespace not in _WHITESPACE:
            raise InvalidArgumentError(
                f"whitespace must be one of {_WHITESPACE}, not {whitespace!r}")
        if property_order not in ("schema", "any"):
            raise InvalidArgumentError(
                f"property_order must be 'schema' or 'any', not {property_order!r}")
        if max_recursion_depth < 0 or max_whitespace < 0:
            raise InvalidArgumentError("max_recursion_depth and max_whitespace must be >= 0")
        if free_value_depth is not None and free_value_depth < 0:
            raise InvalidArgumentError("free_value_depth must be >= 0")
        if max_states is not None and (isinstance(max_states, bool) or
                                       not isinstance(max_states, int) or max_states < 1):
            raise InvalidArgumentError(f"max_states must be an int >= 1, not {max_states!r}")
        self.max_states = MAX_STATES if max_states is None else max_states
        schema = _schema_of(schema)
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise InvalidSchemaError(f"not JSON: {e}") from None
            except RecursionError:  # json's decoder recurses per nesting level
                raise UnsupportedSchemaError(
                    "$schema", "#", "the JSON text is nested too deep for Python's json "
                    f"parser (the compiler accepts at most MAX_SCHEMA_DEPTH={MAX_SCHEMA_DEPTH} "
                    "levels)") from None
        if not isinstance(schema, (dict, bool)):
            raise InvalidSchemaError(
                f"a schema is an object or a boolean, not {type(schema).__name__}")
        bad = _json_value_problem(schema)
        if bad is not None:
            raise InvalidSchemaError(*bad)
        deep = _too_deep(schema, MAX_SCHEMA_DEPTH)
        if deep is not None:  # before anything recurses over the document (issue 23)
            raise UnsupportedSchemaError(
                _keyword_of(deep), deep,
                f"the schema is nested more than MAX_SCHEMA_DEPTH={MAX_SCHEMA_DEPTH} levels of "
                "objects/arrays deep here (checked before validation: deeper documents "
                "exhaust Python's recursion in jsonschema and in this compiler)")
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
            raise InvalidArgumentError("max_exponent must be >= 0")
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
        elif self.draft == 3:
            # draft-03's own keywords (required: true in a property schema, disallow,
            # extends, divisibleBy, type as schemas) would be read with draft-04 semantics:
            # required: true ignored, an invalid instance accepted (JSON-Schema-Test-Suite
            # draft3: 70 accepted-invalid texts, 116 crashes)
            self._unsupported("$schema", "#/$schema", "draft-03 (draft-04 and later are "
                              "compiled; its required: true, disallow and extends are not)")
        self._cache: dict[tuple, list[_Leaf]] = {}
        self._nfa_cache: dict[tuple, ByteNFA] = {}
        self._neg_cache: dict[str, tuple[Any]] = {}
        self._oneof_exact: dict[str, bool] = {}  # oneOf pointer -> compiled as B_i & not B_j
        self._reach: dict[str, frozenset[str]] = {}
        self._states = 0
        self._nesting = 0  # compile_items calls in progress (values nested so far)
        self._path: list[str] = []  # their pointers
        self._deepest: tuple[int, str] = (0, "#")  # the deepest nesting reached, its pointer
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

            from .refs import jsonschema_registry

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
        root schema, ``<URI>#/...`` in a registry document): see :mod:`.refs`.  Raises
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

    # ------------------------------------------------------------------ compile

    def _stack_key(self, ptrs: tuple[str, ...], stack: tuple[str, ...], nodes) -> tuple:
        if not stack:
            return ()
        reach: set[str] = set()
        for node, p in nodes:
            reach |= self._reachable_refs(node, p)
        return tuple(sorted((t, stack.count(t)) for t in set(stack) if t in reach))

    def compile_items(self, items, stack: tuple[str, ...] = ()) -> ByteNFA:
        """The value automaton of the conjunction of ``items`` ((schema, pointer) pairs)."""
        ptrs = tuple(p for _, p in items)
        key = (ptrs, self._stack_key(ptrs, stack, items))
        hit = self._nfa_cache.get(key)
        if hit is not None:
            return self._reused(hit, key)
        if self._nesting >= MAX_VALUE_NESTING:
            self._too_deep_values(ptrs, stack)
        self._nesting += 1
        self._path.append(ptrs[-1] if ptrs else "#")
        if self._nesting > self._deepest[0]:
            self._deepest = (self._nesting, self._path[-1])
        try:
            return self._compile_items(items, stack, key)
        finally:
            self._nesting -= 1
            self._path.pop()

    def _too_deep_values(self, ptrs: tuple[str, ...], stack: tuple[str, ...]) -> None:
        """Raise the typed error for values nested past :data:`MAX_VALUE_NESTING`."""
        again = sorted({t for t in stack if stack.count(t) > 1})  # recursion being unrolled
        why = (f"; max_recursion_depth={self.max_depth} unrolls the recursive $ref(s) "
               f"{', '.join(again[:3])} that deep: lower it" if again else "")
        raise UnsupportedSchemaError(
            "$ref" if again else _keyword_of(ptrs[-1] if ptrs else "#"),
            ptrs[-1] if ptrs else "#",
            f"values nested more than MAX_VALUE_NESTING={MAX_VALUE_NESTING} levels deep{why}")

    def _compile_items(self, items, stack: tuple[str, ...], key: tuple) -> ByteNFA:
        ex = self._expand(items, stack)
        fkey = self._flat_key(ex)
        hit = self._nfa_cache.get(fkey)
        if hit is not None:  # the same conjunction reached through other $refs / pointers
            return self._reused(hit, key, fkey)
        leaves = self._leaves(items, stack, ex)
        depth = next((d for d in (self.free_depth, self.unlisted_depth) if len(leaves) == 1
                      and leaves[0] is _cached(("any", d, self._ws_key))), None)
        if depth is not None:
            # an unconstrained value: the same automaton for every compiler
            skey = ("any-value", depth, self._ws_key)
            out = _cached(skey)
            if out is None:
                out = _share(skey, N.finalize(N.union(*leaves[0].parts.values())))
            self._nfa_cache[key] = self._nfa_cache[fkey] = out
            return out
        parts = [a for lf in leaves for a in lf.parts.values()]
        out = _union(*parts) if parts else N.nothing()
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

    def _brackets(self, open_: str, close: str) -> tuple[ByteNFA, ByteNFA]:
        """The opening and closing automata of an array or object (with the whitespace
        setting's padding inside the brackets)."""
        if not self.ws:
            return N.literal(open_), N.literal(close)
        return N.concat(N.literal(open_), self.ws), N.concat(self.ws, N.literal(close))

    # ------------------------------------------------------------------ entry

    def build(self) -> ByteNFA:
        try:
            out = self.compile_items([(self.root, "#")], ())
        except RecursionError:
            # a safety net under MAX_SCHEMA_DEPTH/MAX_VALUE_NESTING (a caller already deep in
            # its own stack): a typed error naming the deepest value being built
            depth, where = self._deepest
            raise UnsupportedSchemaError(
                _keyword_of(where), where,
                f"the schema nests too deep for Python's recursion limit "
                f"({sys.getrecursionlimit()}) here; values were nested {depth} deep"
            ) from None
        if self.ws is _WS_ANY:  # a JSON text: ws value ws (RFC 8259 §2)
            out = N.concat(_WS_ANY, out, _WS_ANY)
        out = N.finalize(out)
        if self.ws is not None:
            # gaps that meet (`ws ","` | `ws "]"` after an item) share one whitespace loop
            out = merge_parallel(out, _WS_MASK)
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
