"""Arrays: the compiler's :class:`_ArraysMixin` (``prefixItems``/``items``, Draft 4-7
``items``/``additionalItems``, ``minItems``/``maxItems``, ``contains``/``minContains``; the
``uniqueItems`` hook of :mod:`.unique_compile`)."""

from __future__ import annotations

from ..errors import UnsupportedSchemaError
from ..nfa import ByteNFA
from ._automata import _is_empty, _wrapped
from ._base import _CompilerBase
from ._nodes import _ptr
from .unique_compile import unique_array


class _ArraysMixin(_CompilerBase):
    """Array values of a conjunction."""

    def _array(self, flat, stack) -> ByteNFA | None:
        """Arrays: explicit positions 0..N-1 (prefixItems, minItems, or all of maxItems), then a
        loop of ``items`` when unbounded; ``contains``/``minContains`` add a saturating count of
        matching elements (each element is nondeterministically "counted" or not)."""
        from ._builder import _Builder

        lo, hi = 0, None
        per_node = []
        contains = []
        for s, p in flat:
            if "minItems" in s:
                lo = max(lo, int(s["minItems"]))
            if "maxItems" in s:
                hi = int(s["maxItems"]) if hi is None else min(hi, int(s["maxItems"]))
            if self.draft >= 2020:
                pre, rest = s.get("prefixItems", []), s.get("items", True)
                pk, rk = "prefixItems", "items"
                if self.strict and "prefixItems" in s and "items" not in s:
                    rest = False  # strict: no items beyond the listed positions
                    self.strict_used = True
            else:
                it = s.get("items", True)
                if isinstance(it, list):
                    pre, rest, pk, rk = it, s.get("additionalItems", True), "items", \
                        "additionalItems"
                    if self.strict and "additionalItems" not in s:
                        rest = False
                        self.strict_used = True
                else:
                    pre, rest, pk, rk = [], it, "items", "items"
            per_node.append((pre, rest, p, pk, rk))
            if "contains" in s:
                mc = int(s.get("minContains", 1))
                if mc > 0:
                    contains.append((s["contains"], _ptr(p, "contains"), mc))
        if hi is not None and hi < lo:
            return None
        if len(contains) > 1:
            self._unsupported("contains", contains[1][1], "several contains in one conjunction")
            contains = contains[:1]
        P = max((len(pre) for pre, *_ in per_node), default=0)

        def elem_items(i: int):
            out = []
            for pre, rest, p, pk, rk in per_node:
                if i < len(pre):
                    out.append((pre[i], _ptr(p, pk, i)))
                else:
                    out.append((rest, _ptr(p, rk)))
            return out

        uq = unique_array(self, flat, lo, hi, P, bool(contains), elem_items, stack)
        if isinstance(uq, ByteNFA):
            return uq
        comma, brackets = (self.COMMA, None) if uq is None else (uq[0], uq[1:])

        N_exp = max(P, lo, 1) if hi is None else hi
        cache: dict[tuple[int, bool], ByteNFA] = {}

        def el(i: int, match: bool) -> ByteNFA:
            j = min(i, P)
            key = (j, match)
            if key not in cache:
                its = elem_items(j)
                if match:
                    its = its + [(contains[0][0], contains[0][1])]
                cache[key] = self.compile_items(its, stack)
            return cache[key]

        mc = contains[0][2] if contains else 0
        # the size before the work: one copy of an element (and its comma) per explicit
        # position and count of contains matches (minItems 100000 ran to 571 MB before its
        # error; a free-value item is ~6,000 states)
        per = el(max(0, min(N_exp - 1, P)), False).num_states + comma.num_states + 2
        estimate = N_exp * per * (mc + 1)
        if estimate > self.max_states:
            if per * (mc + 1) * 2 > self.max_states:  # the items themselves are too large
                word, what = "items", "one item"
            else:
                word = ("maxItems" if hi is not None and hi >= max(lo, P)
                        else "minItems" if lo >= P else "prefixItems")
                what = f"{word} {({'maxItems': hi, 'minItems': lo}.get(word, P)):,}"
            where = next((_ptr(p, word) for s, p in flat if word in s), flat[0][1])
            raise UnsupportedSchemaError(
                word, where, f"{what} needs ~{estimate:,} automaton states "
                f"({N_exp:,} positions x ~{per:,} states per item; max_states="
                f"{self.max_states:,})")
        b = _Builder()
        states: dict[tuple[int, int], int] = {}

        def st(i: int, c: int) -> int:
            if (i, c) not in states:
                states[(i, c)] = b.state()
            return states[(i, c)]

        start = st(0, 0)
        todo = [(0, 0)]
        seen = {(0, 0)}
        el_entry: dict[tuple, int] = {}
        comma_entry: dict[tuple, int] = {}
        while todo:
            i, c = todo.pop()
            src = states[(i, c)]
            if i >= lo and c >= mc:
                b.finals.add(src)
            if hi is not None and i >= hi:
                continue
            ni = i + 1 if i < N_exp else i
            for match in ((False, True) if c < mc else (False,)):
                a = el(i, match)
                if _is_empty(a):
                    continue
                nc = c + 1 if match else c
                dst = st(ni, nc)
                # one copy of the element per (element, destination), entered from every
                # source that needs it (the last explicit position and the loop share it)
                ekey = (min(i, P), match, dst)
                entry = el_entry.get(ekey)
                if entry is None:
                    entry = el_entry[ekey] = b.state()
                    for f in b.embed(a, entry):
                        b.eps.append((f, dst))
                if i > 0:
                    centry = comma_entry.get(ekey)
                    if centry is None:
                        centry = comma_entry[ekey] = b.state()
                        for f in b.embed(comma, centry):
                            b.eps.append((f, entry))
                    entry = centry
                b.eps.append((src, entry))
                if (ni, nc) not in seen:
                    seen.add((ni, nc))
                    todo.append((ni, nc))
            if b.n > self.max_states:
                word = "maxItems" if hi is not None else "minItems" if lo >= P else "items"
                raise UnsupportedSchemaError(word, flat[0][1], "array automaton too large "
                                             f"(over max_states={self.max_states:,} states)")
        return _wrapped(b, start, *(brackets or self._brackets("[", "]")))
