"""Boolean structure: the compiler's :class:`_LogicMixin`, which flattens conjunctions
(sibling keywords, ``allOf``, ``$ref``, ``not``, ``if``/``then``/``else``, dependencies) and
distributes ``anyOf``/``oneOf`` over them, deciding when ``oneOf`` branches are disjoint."""

from __future__ import annotations

from typing import Any

from .. import nfa as N
from ..errors import InvalidSchemaError
from ._automata import _has_byte, _is_empty, _may_hold_object
from ._base import _CompilerBase
from ._constants import _ANNOTATIONS, _SUPPORTED, _UNSUPPORTED, MAX_COMBINATIONS
from ._nodes import _Leaf, _NoNegation, _ptr, _Synth
from .unique_compile import demark


class _LogicMixin(_CompilerBase):
    """Conjunctions and disjunctions of schema nodes: expansion into flat nodes and
    disjunctions, their distribution into leaves, and ``oneOf``."""

    # ------------------------------------------------------------------ expansion

    def _check_keywords(self, s: dict, p: str) -> None:
        for k, v in s.items():
            if k in ("if", "then", "else") and self.draft < 7:
                self.ignored.add(k)  # not a keyword before draft 7
                continue
            if k in _SUPPORTED or k in _ANNOTATIONS:
                continue
            if k in _UNSUPPORTED:
                if k == "uniqueItems":
                    continue  # enforced by _array (see .unique_compile)
                if k == "maxContains" and "contains" not in s:
                    continue
                if k in ("unevaluatedProperties", "unevaluatedItems") and v is True:
                    continue
                if k == "$recursiveRef":
                    self._unsupported(k, _ptr(p, k))
                    continue
                self._unsupported(k, _ptr(p, k))
                continue
            self.ignored.add(k)

    def _expand(self, items, stack: tuple[str, ...]):
        """Flatten ``allOf``/``$ref``; return (flat nodes, disjunctions, stack) or None (false)."""
        work = list(items)
        flat: list[tuple[dict, str]] = []
        disj: list[tuple[str, list, str]] = []
        i = 0
        while i < len(work):
            s, p = work[i]
            i += 1
            if s is True:
                continue
            if s is False:
                return None
            if not isinstance(s, dict):
                raise InvalidSchemaError("a schema is an object or a boolean", p)
            synth = isinstance(s, _Synth)
            if not synth:
                self._check_keywords(s, p)
            ref = s.get("$ref")
            if isinstance(ref, str):
                target, tp = self._resolve(ref, _ptr(p, "$ref"))
                if tp in self._reachable_refs(target, tp):  # recursive
                    if stack.count(tp) >= self.max_depth:
                        self.truncated.add(tp)
                        return None
                stack = stack + (tp,)
                work.append((target, tp))
                if self.draft <= 7:
                    continue
            flat.append((s, p))
            ptrs = s.get("$ptrs") if synth else None
            for j, sub in enumerate(s.get("allOf", ()) or ()):
                work.append((sub, ptrs[j] if ptrs else _ptr(p, "allOf", j)))
            for kind in ("anyOf", "oneOf"):
                if kind in s:
                    branches = [(b, _ptr(p, kind, j)) for j, b in enumerate(s[kind])]
                    disj.append((kind, branches, _ptr(p, kind)))
            if synth:
                continue  # its "not" (for jsonschema) is carried by the internal keys
            if "not" in s:
                neg = self._negation(s["not"], _ptr(p, "not"))
                if neg is False:
                    return None
                if neg is not True:
                    work.append((neg, _ptr(p, "not") + "/~neg"))
            if "if" in s and self.draft >= 7 and ("then" in s or "else" in s):
                # (if & then) | (not if & else): two disjoint branches, the negation built as
                # for "not"
                ip = _ptr(p, "if")
                try:
                    neg = self._negate(s["if"], ip)
                except _NoNegation as e:
                    self._unsupported("if", ip, f"the instances failing 'if' cannot be written "
                                      f"({e.detail} at {e.pointer})")
                    neg = None
                if neg is not None:
                    yes = _Synth(allOf=[s["if"], s.get("then", True)],
                                 **{"$ptrs": [ip, _ptr(p, "then")]})
                    no = _Synth(allOf=[neg, s.get("else", True)],
                                **{"$ptrs": [ip + "/~neg", _ptr(p, "else")]})
                    disj.append(("anyOf", [(yes, ip + "/~then"), (no, ip + "/~else")], ip))
            for kw in ("dependentRequired", "dependentSchemas", "dependencies"):
                for k, dep in (s.get(kw) or {}).items() if isinstance(s.get(kw), dict) else ():
                    dp = _ptr(p, kw, k)
                    if kw == "dependencies" and self.draft >= 2019:
                        self.legacy_dependencies.add(dp)
                    if isinstance(dep, list):
                        if not dep or all(r == k for r in dep):
                            continue
                        present: Any = _Synth(type="object", required=[k, *dep])
                    elif dep is True:
                        continue
                    elif dep is False:
                        present = False
                    elif isinstance(dep, dict):
                        present = _Synth(type="object", required=[k], allOf=[dep], **{
                            "$ptrs": [dp]})
                    else:
                        raise InvalidSchemaError(f"{kw} values are arrays or schemas", dp)
                    # if k is present the object also satisfies dep: (k absent) | (k present
                    # & dep), two disjoint branches (non-objects satisfy the first)
                    absent = _Synth(properties={k: False})
                    if present is False:
                        work.append((absent, dp + "/~absent"))
                    else:
                        disj.append(("anyOf", [(absent, dp + "/~absent"),
                                               (present, dp + "/~present")], dp))
        return flat, disj, stack

    # ------------------------------------------------------------------ anyOf / oneOf

    def _distribute(self, flat, disj, stack) -> list[_Leaf]:
        if not disj:
            leaf = self._leaf(flat, stack)
            return [leaf] if leaf.parts else []
        kind, branches, dptr = disj[0]
        per_branch: list[list[_Leaf]] = []
        for b in branches:
            ex = self._expand([b], stack)
            if ex is None:
                per_branch.append([])
                continue
            f2, d2, st2 = ex
            per_branch.append(self._distribute(flat + f2, disj[1:] + d2, st2))
        if kind == "oneOf":
            why = self._check_disjoint(per_branch)
            if why:
                by_type = self._one_of_by_type(per_branch)
                if by_type is not None:
                    self._oneof_exact.setdefault(dptr, False)
                    return by_type
            self._oneof_exact.setdefault(dptr, bool(why))
            if why:
                try:
                    return self._one_of_exact(flat, branches, disj[1:], stack, dptr)
                except _NoNegation as e:
                    self._oneof_exact[dptr] = False
                    self._unsupported(
                        "oneOf", dptr, f"{why}, and {e.detail} at {e.pointer} cannot be "
                        "expressed; lenient mode compiles them as anyOf")
        return [lf for br in per_branch for lf in br]

    def _one_of_by_type(self, per_branch: list[list[_Leaf]]) -> list[_Leaf] | None:
        """``oneOf`` decided one JSON type at a time, when for each type t either the branches
        accepting some t are pairwise disjoint on t (each keeps its values), or at least two
        branches accept every value of type t (no value of type t is in exactly one branch: t
        is dropped).  Exact; None when some type is neither.  A typical case: two closed
        object branches told apart by a key, with no ``type`` keyword, so that both accept
        every non-object."""
        dropped: set[str] = set()
        for t in ("null", "boolean", "number", "string", "array", "object"):
            having = [i for i, br in enumerate(per_branch) if any(t in lf.parts for lf in br)]
            if len(having) < 2:
                continue
            free = [i for i in having if any(t in lf.free_types for lf in per_branch[i])]
            if len(free) >= 2:
                dropped.add(t)
                continue
            for x in range(len(having)):
                for y in range(x + 1, len(having)):
                    for a in per_branch[having[x]]:
                        for b in per_branch[having[y]]:
                            if t in a.parts and t in b.parts and self._overlap_type(a, b, t):
                                return None
        out = []
        for br in per_branch:
            for lf in br:
                parts = {t: a for t, a in lf.parts.items() if t not in dropped}
                if parts:
                    obj = "object" in parts
                    out.append(_Leaf(parts, lf.required_values if obj else {},
                                     lf.object_keys if obj else None,
                                     lf.free_types - dropped, lf.key_values if obj else None))
        return out

    def _check_disjoint(self, per_branch: list[list[_Leaf]]) -> str:
        for i in range(len(per_branch)):
            for j in range(i + 1, len(per_branch)):
                for a in per_branch[i]:
                    for b in per_branch[j]:
                        why = self._overlap(a, b)
                        if why:
                            return f"branches {i} and {j} are not provably disjoint ({why})"
        return ""

    def _one_of_exact(self, flat, branches, rest, stack, dptr) -> list[_Leaf]:
        """Overlapping ``oneOf`` branches B_i, exactly: the union over i of B_i and not B_j
        for every j != i (the negations by :meth:`_negate`), at most
        :data:`MAX_COMBINATIONS` leaves.  Raises :class:`_NoNegation`."""
        negs = [self._negate(b, bp) for b, bp in branches]

        def width(x):
            return len(x["anyOf"]) if isinstance(x, _Synth) and "anyOf" in x else 1

        combos = 0
        for i in range(len(branches)):
            c = 1
            for j, n in enumerate(negs):
                if j != i:
                    c *= width(n)
            combos += c
        if combos > MAX_COMBINATIONS:
            raise _NoNegation("oneOf", dptr, f"more than {MAX_COMBINATIONS} combinations of "
                              "branches and negated branches")
        out: list[_Leaf] = []
        for i, (b, bp) in enumerate(branches):
            others = [(n, bp2 + "/~neg") for j, (n, (_b2, bp2)) in enumerate(zip(negs, branches))
                      if j != i]
            if any(n is False for n, _ in others):
                continue
            conj = [(b, bp)] + [(n, np) for n, np in others if n is not True]
            ex = self._expand(conj, stack)
            if ex is None:
                continue
            f2, d2, st2 = ex
            out += self._distribute(flat + f2, rest + d2, st2)
        return out

    def _overlap(self, a: _Leaf, b: _Leaf) -> str:
        for t in set(a.parts) & set(b.parts):
            why = self._overlap_type(a, b, t)
            if why:
                return why
        return ""

    def _overlap_type(self, a: _Leaf, b: _Leaf, t: str) -> str:
        """Why the type-t parts of two leaves may share an instance ("" when provably not)."""
        x, y = a.parts[t], b.parts[t]
        if getattr(self, "marked", False):  # uniqueItems arrays: compare the plain languages
            x, y = demark(x), demark(y)
        if t == "object":
            if self._excluded(a, b) or self._excluded(b, a):
                return ""
            return "objects without a discriminating required property"
        if t == "array" and (_has_byte(x, 0x7B) or _has_byte(y, 0x7B)):
            return "arrays that may contain objects"
        if not _is_empty(N.intersect(x, y)):
            return f"both accept some {t}"
        return ""

    @staticmethod
    def _excluded(a: _Leaf, b: _Leaf) -> bool:
        """Some key every object of ``a`` has, that no object of ``b`` has with such a value:
        ``b`` is closed without the key, or declares it with disjoint values (compared as
        strings only for values without objects, whose serialization is unique)."""
        for k, x in a.required_values.items():
            if b.object_keys is not None and k not in b.object_keys:
                return True
            y = b.key_values.get(k)
            if y is None or _may_hold_object(demark(x)) or _may_hold_object(demark(y)):
                continue
            x, y = demark(x), demark(y)
            if _is_empty(N.intersect(x, y)):
                return True
        return False
