"""Serialization of instances: the compiler's :class:`_SerializeMixin`, which writes an
instance the way the compiled automaton spells it (declared key order, the ``anyOf``/``oneOf``
branch the instance satisfies)."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidSchemaError, UnsupportedSchemaError
from ._base import _CompilerBase
from ._nodes import _ptr
from ._values import _dumps, _json_eq, _json_str, _kind


class _SerializeMixin(_CompilerBase):
    """Canonical serialization of instances against the compiler's root schema."""

    def _branch_valid(self, node: Any, ptr: str, instance: Any) -> bool:
        """Whether ``instance`` satisfies the ``anyOf``/``oneOf`` branch ``node`` at ``ptr``;
        False where ``jsonschema`` cannot tell (the first branch is then used)."""
        try:
            return self._jsonschema_valid(node, ptr, instance)
        except Exception:  # noqa: BLE001 - serialization falls back to the first branch
            return False

    def _jsonschema_valid(self, node: Any, ptr: str, instance: Any) -> bool:
        """Whether ``instance`` satisfies the sub-schema ``node`` at ``ptr`` (``jsonschema``),
        resolving its ``$ref`` against the resources (``$id``) enclosing it, as ``jsonschema``
        does when it descends there: evolving the root's validator alone kept the root's base,
        and ``{"$id": "urn:x", "$defs": {...}, "$ref": "#/$defs/d"}`` inside an ``anyOf``
        raised PointerToNowhere (found by tests/fsa/json_schema/test_fuzz_json_schema.py).
        Raises what
        ``jsonschema`` raises (its ``if`` and ``contains`` do not enter embedded resources
        either, jsonschema 4.26)."""
        v = self._validator
        cache = self.__dict__.setdefault("_sub_validators", {})
        key = (ptr, tuple(node) if isinstance(node, dict) else node)
        hit = cache.get(key)
        if hit is not None and (hit[0] is node or hit[0] == node):
            return hit[1].is_valid(instance)
        import referencing.jsonschema as rj
        from jsonschema.validators import validator_for

        spec = validator_for(self.root, default=type(v)).META_SCHEMA.get("$schema")
        specification = rj.specification_with(spec or rj.DRAFT202012.id,
                                              default=rj.DRAFT202012)
        resolver = v._resolver
        chain = [self.root]
        if ptr.startswith("#/"):
            cur = self.root
            for seg in ptr[2:].split("/"):
                seg = seg.replace("~1", "/").replace("~0", "~")
                if isinstance(cur, dict) and seg in cur:
                    cur = cur[seg]
                elif isinstance(cur, list) and seg.isdigit() and int(seg) < len(cur):
                    cur = cur[int(seg)]
                else:
                    break
                chain.append(cur)
        for x in chain[1:-1] + [node]:
            if isinstance(x, dict) and isinstance(x.get("$id", x.get("id")), str):
                resolver = resolver.in_subresource(specification.create_resource(x))
        sub = v.evolve(schema=node, _resolver=resolver)
        cache[key] = (node, sub)
        return sub.is_valid(instance)

    def serialize(self, instance: Any, items=None, stack: tuple[str, ...] = ()) -> str:
        """The canonical serialization of ``instance`` (see :mod:`tractable.fsa.json_schema`)."""
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
                if self._validator is None or self._branch_valid(b[0], b[1], instance):
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
