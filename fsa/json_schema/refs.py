"""``$ref`` resolution for the JSON Schema compiler (:mod:`.json_schema`).

A reference is resolved the way Draft 2020-12 (and, for ``id``/``$id`` anchors, Drafts 4-7)
resolves it: against the base URI in effect where the ``$ref`` stands (the nearest enclosing
``$id``, resolved against the one above it), to an absolute URI whose document part names a
schema resource — the root schema, a subschema with that ``$id``, or a document of the
``registry`` — and whose fragment is empty, a JSON pointer into that resource or an anchor
(``$anchor``, ``$dynamicAnchor``, Draft 6/7 ``"$id": "#name"``) declared in it.

Documents outside the root come only from the registry: a ``referencing.Registry`` (the
library ``jsonschema`` resolves with; one without a ``retrieve`` function never fetches) or a
plain mapping URI -> schema.  Nothing is fetched from the network; a document that is not
there raises :class:`~.errors.UnresolvedReferenceError` naming its URI and the pointer of the
``$ref``.

Every schema node is named by a pointer string: ``#/a/b`` inside the root schema (as before),
``<document URI>#/a/b`` inside a registry document.  The compiler keys its caches and its
recursion unrolling on these strings, so a recursive reference through another document is
unrolled exactly like a local one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from ..errors import InvalidSchemaError, UnresolvedReferenceError

__all__ = ["RefResolver", "jsonschema_registry"]

#: Keywords whose values are instances, not schemas: never searched for ``$id``/anchors.
_DATA_KEYWORDS = ("enum", "const", "default", "examples")


def _ptr(base: str, *parts: Any) -> str:
    out = base
    for p in parts:
        out += "/" + str(p).replace("~", "~0").replace("/", "~1")
    return out


def _join(base: str, ref: str) -> str:
    """``ref`` resolved against ``base`` (RFC 3986; a fragment-only reference keeps the base's
    document even for URNs, which ``urljoin`` does not resolve against)."""
    if not base:
        return ref
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    return urljoin(base, ref)


class RefResolver:
    """Resolves ``$ref`` strings to ``(node, pointer)`` for one root schema.

    Args:
        root: the root schema.
        registry: ``None``, a ``referencing.Registry`` or a mapping URI -> schema.
        draft: the root schema's draft (4, 6, 7, 2019 or 2020): ``id`` instead of ``$id``
            before Draft 6.
    """

    def __init__(self, root: Any, registry: Any = None, draft: int = 2020):
        self.registry = registry
        self.draft = draft
        #: document key ("" = the root schema, else its retrieval URI) -> contents
        self.docs: dict[str, Any] = {}
        #: absolute URI of a schema resource (no fragment) -> (node, pointer)
        self._ids: dict[str, tuple[Any, str]] = {}
        #: pointer of a resource's root (a node with an ``$id`` or a document) -> its base URI
        self._bases: dict[str, str] = {}
        #: (base URI, anchor name) -> (node, pointer)
        self._anchors: dict[tuple[str, str], tuple[Any, str]] = {}
        self._cache: dict[tuple[str, str], tuple[Any, str]] = {}
        self._load("", root)
        if isinstance(registry, Mapping) and not hasattr(registry, "get_or_retrieve"):
            # a plain mapping: index every document now, so that a subschema's own $id is
            # known before the document holding it is first referenced
            for uri in registry:
                key = urldefrag(str(uri))[0]
                if key not in self.docs:
                    self._load(key, _contents(registry[uri]))

    # ------------------------------------------------------------------ indexing

    def _load(self, key: str, contents: Any) -> None:
        self.docs[key] = contents
        if key:
            self._ids.setdefault(key, (contents, key + "#"))
        self._index(contents, key + "#", key, root=True)

    def _own_id(self, node: Any) -> str | None:
        if not isinstance(node, dict):
            return None
        if self.draft <= 7 and "$ref" in node:
            return None  # before 2019-09 every sibling of $ref is ignored, $id included
        # draft 4 and earlier name a resource by "id" only ("$id" is not a keyword there and
        # must not move the base URI: JsonSchemaStore's cryproj schemas); later drafts by "$id"
        v = node.get("id" if self.draft <= 4 else "$id")
        return v if isinstance(v, str) else None

    def _index(self, node: Any, ptr: str, base: str, root: bool = False) -> None:
        if isinstance(node, dict):
            own = self._own_id(node)
            if own is not None:
                if own.startswith("#"):  # Draft 6/7 plain-name anchor
                    self._anchors.setdefault((base, own[1:]), (node, ptr))
                else:
                    uri, frag = urldefrag(_join(base, own))
                    base = uri
                    self._ids.setdefault(uri, (node, ptr))
                    if frag and not frag.startswith("/"):
                        self._anchors.setdefault((base, frag), (node, ptr))
                    self._bases[ptr] = base
            if root:
                self._bases[ptr] = base
            for kw in ("$anchor", "$dynamicAnchor"):
                name = node.get(kw)
                if isinstance(name, str):
                    self._anchors.setdefault((base, name), (node, ptr))
            for k, v in node.items():
                if k not in _DATA_KEYWORDS and isinstance(v, (dict, list)):
                    self._index(v, _ptr(ptr, k), base)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                if isinstance(v, (dict, list)):
                    self._index(v, _ptr(ptr, i), base)

    def _base_at(self, pointer: str) -> str:
        """The base URI in effect at ``pointer`` (the nearest enclosing resource root)."""
        doc, _, path = pointer.partition("#")
        parts = path.split("/")
        for i in range(len(parts), 0, -1):
            hit = self._bases.get(doc + "#" + "/".join(parts[:i]))
            if hit is not None:
                return hit
        return self._bases.get(doc + "#", doc)

    # ------------------------------------------------------------------ resolution

    def resolve(self, ref: str, pointer: str) -> tuple[Any, str]:
        """The node ``ref`` (the value of the ``$ref`` at ``pointer``) names, and its pointer."""
        key = (ref, pointer)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._resolve(ref, pointer)
        return hit

    def _resolve(self, ref: str, pointer: str) -> tuple[Any, str]:
        target = _join(self._base_at(pointer), ref)
        uri, frag = urldefrag(target)
        if not uri:  # no base URI anywhere above: the document the $ref stands in
            doc = pointer.partition("#")[0]
            node, rptr = self.docs[doc], doc + "#"
        else:
            found = self._ids.get(uri)
            if found is None:
                found = self._fetch(uri, ref, pointer)
            node, rptr = found
        if frag and not frag.startswith("/"):
            rbase = self._bases.get(rptr, uri)
            found = self._anchors.get((rbase, frag)) or self._anchors.get((uri, frag))
            if found is None:
                raise InvalidSchemaError(f"$ref {ref!r}: no $anchor {frag!r}", pointer)
            return found
        parts = [unquote(p).replace("~1", "/").replace("~0", "~")
                 for p in frag.split("/")[1:]] if frag else []
        for p in parts:
            if isinstance(node, dict) and p in node:
                node = node[p]
            elif isinstance(node, list) and p.isdigit() and int(p) < len(node):
                node = node[int(p)]
            else:
                raise InvalidSchemaError(f"$ref {ref!r} does not resolve", pointer)
        return node, _ptr(rptr, *parts)

    def _fetch(self, uri: str, ref: str, pointer: str) -> tuple[Any, str]:
        """Load document ``uri`` from the registry (never the network)."""
        contents = _lookup(self.registry, uri)
        if contents is _MISSING:
            raise UnresolvedReferenceError(uri, ref, pointer)
        if not isinstance(contents, (dict, bool)):
            raise InvalidSchemaError(
                f"registry document {uri!r} is not a schema (an object or a boolean)", pointer)
        self._load(uri, contents)
        return self._ids[uri]


_MISSING = object()


def _contents(value: Any) -> Any:
    """A registry entry's schema: a ``referencing.Resource``'s contents, parsed JSON text, or
    the value itself."""
    if hasattr(value, "contents") and not isinstance(value, (dict, bool)):
        return value.contents
    if isinstance(value, (str, bytes)):
        return json.loads(value)
    return value


def _lookup(registry: Any, uri: str) -> Any:
    if registry is None:
        return _MISSING
    keys = (uri, uri + "#") if not uri.endswith("#") else (uri, uri.rstrip("#"))
    if hasattr(registry, "get_or_retrieve"):  # referencing.Registry
        from referencing.exceptions import NoSuchResource, Unresolvable, Unretrievable

        for k in keys:
            try:
                return registry.get_or_retrieve(k).value.contents
            except (NoSuchResource, Unretrievable, Unresolvable):
                continue
        return _MISSING
    for k in keys:
        if k in registry:
            return _contents(registry[k])
    return _MISSING


def jsonschema_registry(registry: Any, root: Any):
    """The ``referencing.Registry`` for ``jsonschema``'s validator of ``root``: ``registry``
    itself, or a mapping's documents as resources; an empty one (which never retrieves) when
    ``registry`` is None, so that validation never fetches from the network either."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012, specification_with

    if hasattr(registry, "get_or_retrieve"):
        return registry
    out = Registry()
    if registry:
        default = DRAFT202012
        ms = root.get("$schema") if isinstance(root, dict) else None
        if isinstance(ms, str):
            default = specification_with(ms, default=DRAFT202012)
        out = out.with_resources(
            (str(uri), Resource.from_contents(_contents(v), default_specification=default))
            for uri, v in registry.items())
    return out
