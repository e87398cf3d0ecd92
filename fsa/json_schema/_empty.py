"""Why a schema accepts nothing: the smallest empty sub-schema and the keywords that empty it
(issue 23: ``EmptyLanguageError`` used to name neither keyword nor pointer).

Used by :func:`~.compile_json_schema` when the byte automaton it built is empty, before any
token lifting.  Starting at the root, :func:`explain_empty` descends into a sub-schema that is
itself empty and that the instances of its parent must satisfy (a ``$ref`` target, an
``allOf`` branch, the value of a ``required`` property, an array position ``minItems``
requires, ``contains``; ``anyOf``/``oneOf`` when every branch is empty), as long as there is
one.  In the node where it stops, each keyword is dropped in turn (the node recompiled by a
fresh compiler with the same root, so that ``$ref`` resolves as before): the keywords whose
removal makes the node satisfiable are the culprits (``minimum`` and ``maximum``; ``required``
and ``additionalProperties``).  Where that finds none (three keywords conflicting pairwise)
all the node's validation keywords are named.  A ``$ref`` cycle that consumes no value
(``{"$ref": "#"}``, ``a -> b -> a``) is named as such.  At most :data:`MAX_PROBES`
recompilations: the diagnosis costs a bounded fraction of a compile.
"""

from __future__ import annotations

from typing import Any

from ..errors import TractableError
from ._automata import _is_empty
from ._constants import _VALIDATION
from ._nodes import _ptr

__all__ = ["explain_empty", "MAX_PROBES"]

#: Most sub-schema compilations one diagnosis makes.
MAX_PROBES = 64

_LOGIC = ("allOf", "anyOf", "oneOf", "$ref", "not", "if", "then", "else")
#: Descent steps that go into a value (an array item or property value).
_VALUE_STEPS = ("properties", "prefixItems", "items", "contains")


def explain_empty(comp: Any) -> tuple[str, str, str]:
    """(keyword, pointer, detail) for a compiler ``comp`` whose root compiled to an empty
    automaton.  Never raises: a diagnosis that cannot proceed names what it has."""
    probes = [0]

    def empty(node: Any, ptr: str, fresh: bool = False) -> bool | None:
        """Whether ``node`` (at ``ptr``) accepts nothing; None if it could not be told."""
        if node is False:
            return True
        if node is True or probes[0] >= MAX_PROBES:
            return None if node is not True else False
        probes[0] += 1
        try:
            c = _fresh(comp) if fresh else comp
            return _is_empty(c.compile_items([(node, ptr)], ()))
        except (TractableError, RecursionError):
            return None

    node, ptr = comp.root, "#"
    path = [ptr]
    vias: list[str] = []  # the keyword of each step of the descent
    while True:
        if node is False:
            return "false", ptr, "the schema false accepts no instance"
        if not isinstance(node, dict):
            break
        nxt = None
        for child, cptr, via in _children(comp, node, ptr):
            if cptr in path:  # a $ref cycle
                i = path.index(cptr)
                cycle = " -> ".join(path[i:] + [cptr])
                if any(v in _VALUE_STEPS for v in vias[i:] + [via]):
                    why = ("every instance would nest without end (the values these "
                           "keywords require contain themselves; generated only to "
                           f"max_recursion_depth={comp.max_depth})")
                else:
                    why = ("with no value in between: a schema that refers to itself "
                           "without nesting accepts nothing")
                return "$ref", _ptr(ptr, "$ref") if via == "$ref" else cptr, (
                    f"$ref cycle {cycle}: {why}")
            if empty(child, cptr):
                nxt = (child, cptr, via)
                break
        if nxt is None:
            break
        node, ptr, via = nxt
        path.append(ptr)
        vias.append(via)
    if not isinstance(node, dict):
        return "type", ptr, "this schema accepts no instance"
    words = [k for k in node if k in _VALIDATION or k in _LOGIC]
    culprits: list[str] = []
    # "type" last, and only if nothing else explains it: without it {"type": "number",
    # "minimum": 5, "maximum": 1} accepts strings, but minimum/maximum are what conflict
    for group in ([k for k in words if k != "type"], [k for k in words if k == "type"]):
        for k in group:
            rest = {kk: v for kk, v in node.items() if kk != k}
            if empty(rest, ptr, fresh=True) is False:
                culprits.append(k)
        if culprits:
            break
    if not culprits:
        culprits = words or ["type"]
    detail = _describe(comp, node, ptr, culprits, empty)
    return culprits[0], ptr, detail


def _fresh(comp: Any) -> Any:
    """A compiler with ``comp``'s root and options and empty caches (a modified node compiled
    under its old pointer must not hit the caches)."""
    from ._compiler import JsonSchemaCompiler

    c = JsonSchemaCompiler(
        comp.root, validate=False, lenient=True, property_order=comp.property_order,
        max_recursion_depth=comp.max_depth, free_value_depth=comp.free_depth,
        strict=comp.strict, registry=comp.registry, max_states=comp.max_states)
    c.unique_items = getattr(comp, "unique_items", False)
    return c


def _children(comp: Any, node: dict, ptr: str):
    """(sub-schema, pointer, keyword) that every instance of ``node`` must satisfy (or, for
    ``anyOf``/``oneOf``, whose emptiness the caller checks all together), in the order the
    descent tries them."""
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            yield (*comp._resolve(ref, _ptr(ptr, "$ref")), "$ref")
        except TractableError:
            pass
    for j, sub in enumerate(node.get("allOf") or ()):
        yield sub, _ptr(ptr, "allOf", j), "allOf"
    props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
    for k in node.get("required") or ():
        if isinstance(k, str) and k in props:
            yield props[k], _ptr(ptr, "properties", k), "properties"
    lo = node.get("minItems", 0)
    lo = lo if isinstance(lo, int) else 0
    pre = node.get("prefixItems")
    if isinstance(pre, list):
        for i, sub in enumerate(pre[:lo]):
            yield sub, _ptr(ptr, "prefixItems", i), "prefixItems"
        if lo > len(pre) and "items" in node:
            yield node["items"], _ptr(ptr, "items"), "items"
    elif isinstance(node.get("items"), list):  # Draft 4-7 tuple form
        for i, sub in enumerate(node["items"][:lo]):
            yield sub, _ptr(ptr, "items", i), "items"
    elif lo > 0 and "items" in node:
        yield node["items"], _ptr(ptr, "items"), "items"
    if "contains" in node and node.get("minContains", 1) != 0:
        yield node["contains"], _ptr(ptr, "contains"), "contains"
    for kind in ("anyOf", "oneOf"):
        branches = node.get(kind)
        if isinstance(branches, list) and len(branches) == 1:
            yield branches[0], _ptr(ptr, kind, 0), kind


def _describe(comp: Any, node: dict, ptr: str, culprits: list[str], empty) -> str:
    """A sentence for the keywords ``culprits`` of ``node`` that leave it empty."""
    if culprits == ["enum"] and node.get("enum") == []:
        return "enum lists no value"
    if culprits == ["enum"] or culprits == ["const"]:
        return f"no value of {culprits[0]} satisfies the other keywords of this schema"
    if culprits == ["allOf"]:
        branches = node.get("allOf") or []
        if len(branches) <= 8:
            for i in range(len(branches)):
                for j in range(i + 1, len(branches)):
                    if empty({"allOf": [branches[i], branches[j]]}, ptr, fresh=True):
                        return (f"allOf/{i} and allOf/{j} have no instance in common "
                                f"({_ptr(ptr, 'allOf', i)}, {_ptr(ptr, 'allOf', j)})")
        return "no instance satisfies all the allOf branches together"
    if culprits[0] in ("anyOf", "oneOf") and len(culprits) == 1:
        return f"no {culprits[0]} branch has an instance that satisfies this schema"
    shown = ", ".join(f"{k}={_short(node.get(k))}" for k in culprits)
    return f"no instance satisfies these keywords together: {shown}"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
