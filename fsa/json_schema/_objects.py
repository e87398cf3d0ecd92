"""Objects: the compiler's :class:`_ObjectsMixin` (``properties``, ``required``,
``additionalProperties``, ``patternProperties``, ``propertyNames``,
``minProperties``/``maxProperties``, negated ``additionalProperties`` witnesses), in schema
order or in any order."""

from __future__ import annotations

from .. import nfa as N
from ..errors import UnsupportedSchemaError
from ..nfa import ByteNFA
from ._automata import _is_empty, _wrapped
from ._base import _CompilerBase
from ._constants import (
    MAX_ANY_ORDER_PROPERTIES,
    MAX_PATTERN_PROPERTIES,
    MAX_WITNESSES,
)
from ._nodes import _UNLISTED, _ptr, _Synth
from ._strings import _QUOTE, _body_excluding, _escape_subst
from ._values import _json_str

#: Byte-state equivalents charged per (state, later optional property) pair of an ordered
#: object against ``max_states`` (see :meth:`_ObjectsMixin._check_object_size`): 2,000,000 /
#: 12 = 166,000 pairs, ~400 optional properties in a row (the largest run in JSONSchemaBench:
#: 311; measured ~11 KB of peak memory per pair over Llama-3).
PAIR_COST = 12


class _ObjectsMixin(_CompilerBase):
    """Object values of a conjunction: declared keys in canonical order, additional keys, and
    the object discriminators of its leaf."""

    def _key_items(self, flat, key: str):
        """The (schema, pointer) constraints on the value of ``key`` from each flat node."""
        out = []
        for s, p in flat:
            props = s.get("properties") or {}
            matched = False
            for pat, sub in (s.get("patternProperties") or {}).items():
                a = self._pattern(pat, _ptr(p, "patternProperties", pat))
                if a is not None and N.matches(a, key.encode()):
                    out.append((sub, _ptr(p, "patternProperties", pat)))
                    matched = True
            if key in props:
                out.append((props[key], _ptr(p, "properties", key)))
            elif not matched and "additionalProperties" in s:
                out.append((s["additionalProperties"], _ptr(p, "additionalProperties")))
        return out

    def _declared(self, flat) -> tuple[list[str], set[str]]:
        """Declared names in canonical order: ``properties`` in order of first appearance,
        then keys only ``required``; names only the compiler's own nodes mention (negations,
        dependencies) come after the schema's."""
        order: dict[str, None] = {}
        required: set[str] = set()
        for synth in (False, True):
            for s, _ in flat:
                if isinstance(s, _Synth) == synth:
                    for k in s.get("properties") or {}:
                        order.setdefault(k, None)
                    for k in s["$extra"][0] if synth and "$extra" in s else ():
                        order.setdefault(k, None)  # a witness key is none of these
            for s, _ in flat:
                if isinstance(s, _Synth) == synth:
                    for k in s.get("required") or []:
                        order.setdefault(k, None)
                        required.add(k)
        return list(order), required

    def _object(self, flat, stack):
        names, required = self._declared(flat)
        lo_p, hi_p = 0, None
        for s, _ in flat:
            if "minProperties" in s:
                lo_p = max(lo_p, int(s["minProperties"]))
            if "maxProperties" in s:
                hi_p = (int(s["maxProperties"]) if hi_p is None
                        else min(hi_p, int(s["maxProperties"])))
        if hi_p is not None and (hi_p < lo_p or hi_p < len(required)):
            return None
        pnames = [(s["propertyNames"], _ptr(p, "propertyNames")) for s, p in flat
                  if "propertyNames" in s]
        pn_nfa = self.compile_items(pnames, stack) if pnames else None
        # witnesses (negated additionalProperties): some key outside names_j whose value
        # satisfies n_j; bit j of the state records that one was written
        wit = [s["$extra"] for s, _ in flat if isinstance(s, _Synth) and "$extra" in s]
        if len(wit) > MAX_WITNESSES:
            self._unsupported("not", wit[MAX_WITNESSES][2], f"more than {MAX_WITNESSES} "
                              "negated additionalProperties in one object conjunction")
            wit = wit[:MAX_WITNESSES]
        wfull = (1 << len(wit)) - 1

        def with_witnesses(k: str | None):
            # (extra constraints, bits) for each nonempty set of witnesses key k can satisfy
            for T in range(1, wfull + 1):
                js = [j for j in range(len(wit)) if T >> j & 1]
                if k is None or all(k not in wit[j][0] for j in js):
                    yield [(wit[j][1], wit[j][2]) for j in js], T

        slots: list[tuple[str, list[tuple[ByteNFA, int]], bool]] = []
        required_values: dict[str, ByteNFA] = {}
        key_values: dict[str, ByteNFA] = {}
        for k in names:
            ok = pn_nfa is None or N.matches(pn_nfa, _json_str(k).encode())
            its = self._key_items(flat, k)
            v = self.compile_items(its, stack) if ok else N.nothing()
            key_values[k] = v
            if _is_empty(v):
                if k in required:
                    return None
                continue
            key = self._spell(N.literal(_json_str(k)))
            variants = [((key, self.COLON, v), 0)]  # concatenated by _Builder.embed
            for also, T in with_witnesses(k):
                vt = self.compile_items(its + also, stack)
                if not _is_empty(vt):
                    variants.append(((key, self.COLON, vt), T))
            slots.append((k, variants, k in required))
            if k in required:
                required_values[k] = v
        extra = self._extras(flat, names, pn_nfa, stack)
        extras = [] if extra is None else [(extra, 0)]
        if extra is not None:
            for also, T in with_witnesses(None):
                et = self._extras(flat, names, pn_nfa, stack, also)
                if et is not None:
                    extras.append((et, T))
        wrap = self._brackets("{", "}")
        self._check_object_size(slots, extras, lo_p, hi_p, wfull, flat)
        if self.property_order == "any":
            out = self._object_any(slots, extras, lo_p, hi_p, flat, wfull, wrap)
        else:
            out = self._object_ordered(slots, extras, lo_p, hi_p, wfull, wrap)
        if out is None:
            return None
        self._count(out, flat[0][1] if flat else "#")
        # closed (no undeclared key can appear): the keys it can have at all
        keys = frozenset(k for k, _, _ in slots) if extra is None else None
        return out, required_values, keys, key_values

    def _extras(self, flat, names, pn_nfa, stack, also=()) -> ByteNFA | None:
        """key:value automaton for one additional (undeclared) property, or None.

        With ``patternProperties``, the undeclared keys are split into regions by the set T of
        patterns they match (``∩_{p∈T} L_p ∩ ∩_{p∉T} ¬L_p``; the complements are of the small
        pattern automata, built by subset construction, at most :data:`MAX_COMPLEMENT_STATES`
        states); a key in region T takes the schemas of T, or ``additionalProperties`` when T
        is empty.  At most :data:`MAX_PATTERN_PROPERTIES` patterns per conjunction."""
        pats = []  # (content nfa, schema, pointer, node index)
        for idx, (s, p) in enumerate(flat):
            for pat, sub in (s.get("patternProperties") or {}).items():
                a = self._pattern(pat, _ptr(p, "patternProperties", pat))
                if a is not None:
                    pats.append((a, sub, _ptr(p, "patternProperties", pat), idx))
        if len(pats) > MAX_PATTERN_PROPERTIES:
            self._unsupported("patternProperties", pats[MAX_PATTERN_PROPERTIES][2],
                              f"more than {MAX_PATTERN_PROPERTIES} patterns in one object")
            pats = pats[:MAX_PATTERN_PROPERTIES]
        body = None  # _body_excluding(names), built when a region needs it
        out = []
        for T in range(1 << len(pats)):
            constraints = []
            strict_here = False
            for idx, (s, p) in enumerate(flat):
                mine = [(sub, ptr) for j, (_a, sub, ptr, i) in enumerate(pats)
                        if i == idx and T >> j & 1]
                if mine:
                    constraints += mine
                elif "additionalProperties" in s:
                    constraints.append((s["additionalProperties"], _ptr(p, "additionalProperties")))
                elif self.strict and ("properties" in s or "patternProperties" in s) and (
                        not isinstance(s, _Synth)):
                    # strict: properties the schema does not list are not generated
                    constraints.append((False, _ptr(p, "additionalProperties")))
                    strict_here = True
            if not constraints:
                listing = [p for s, p in flat if not isinstance(s, _Synth)
                           and ("properties" in s or "patternProperties" in s)]
                if listing:  # the value of a property the object does not list
                    constraints.append((_UNLISTED, _ptr(listing[0], "~unlisted")))
            closed = any(c is False for c, _ in constraints)
            if closed and not pats and pn_nfa is None:
                # the keys other than the (finitely many) names are never none: nothing to build
                self.strict_used |= strict_here
                continue
            if closed and (self.strict_used or not strict_here):
                # a closed region only tells whether strict=True dropped keys, known already
                # (Github_medium o10297: the complement regions of three ^\d+$-keyed objects);
                # its keys are not built, nor its patterns' complements
                continue
            content = None
            ok = True
            for j, (a, _sub, ptr, _) in enumerate(pats):
                if T >> j & 1:
                    c = a
                else:
                    c = self._complement(a, ptr)
                    if c is None:
                        ok = False
                        break
                content = c if content is None else N.intersect(content, c)
            if not ok:
                continue
            if content is not None and _is_empty(content):
                continue
            ck = ("key", tuple(names), self.canonical)
            key = content._cache.get(ck) if content is not None and pn_nfa is None else None
            if key is None:
                if body is None:
                    body = _body_excluding(names)
                kb = body if content is None else N.intersect(_escape_subst(content), body)
                key = N.concat(_QUOTE, kb, _QUOTE)
                if pn_nfa is not None:
                    key = self._spell(N.intersect(key, pn_nfa))
                else:
                    key = self._spell(key)
                    if content is not None:
                        # a pattern's keys, shared by the objects that list the same names
                        # (Github_medium o10297: ^\d+$ in two objects; 0.2 ms each)
                        content._cache[ck] = key
            if _is_empty(key):
                continue
            self.strict_used |= strict_here
            if closed:
                continue
            v = self.compile_items(constraints + list(also), stack)
            if _is_empty(v):
                continue
            out.append(N.concat(key, self.COLON, v))
        return N.union(*out) if out else None

    def _object_ordered(self, slots, extras, lo_p, hi_p, wfull, wrap) -> ByteNFA | None:
        """Declared slots in order, then additional properties.  A state is (c, w): the count c
        tracked only as far as min/maxProperties need (c saturates at max(1, minProperties)
        without a maximum) and the witnesses w written so far (accepting: w == wfull).  Each
        slot and the additional properties come as variants (key:value automaton, or its
        pieces for :meth:`~.formats._Builder.embed`; witness bits); without witnesses, one
        variant each."""
        from ._builder import _Builder

        K = hi_p if hi_p is not None else max(1, lo_p)

        def inc(c):
            if hi_p is not None:
                return c + 1 if c + 1 <= hi_p else None
            return min(c + 1, K)

        b = _Builder()
        layer = {(0, 0): b.state()}
        start = layer[(0, 0)]

        def emit(srcs: dict, kv, bits: int, dests: dict) -> None:
            # one copy of kv per destination state
            by_dest: dict[tuple[int, int], list[tuple[int, int]]] = {}
            for c, w in srcs:
                d = inc(c)
                if d is not None:
                    by_dest.setdefault((d, w | bits), []).append((c, w))
            for dk, cs in by_dest.items():
                if dk not in dests:
                    dests[dk] = b.state()
                entry = b.state()
                for ck in cs:
                    if ck[0] == 0:
                        b.eps.append((srcs[ck], entry))
                    else:
                        for f in b.embed(self.COMMA, srcs[ck]):
                            b.eps.append((f, entry))
                for f in b.embed(kv, entry):
                    b.eps.append((f, dests[dk]))

        for _name, variants, req in slots:
            nxt: dict[tuple[int, int], int] = {}
            if not req:
                for ck, st in layer.items():
                    nxt[ck] = b.state()
                    b.eps.append((st, nxt[ck]))
            for kv, bits in variants:
                emit(layer, kv, bits, nxt)
            layer = nxt
            if not layer:
                return None
        if extras:
            # every state reachable by adding properties, then one copy of each variant per
            # destination state, shared by all the states that lead there
            todo = sorted(layer)
            while todo:
                c, w = todo.pop()
                d = inc(c)
                if d is None:
                    continue
                for _kv, bits in extras:
                    if (d, w | bits) not in layer:
                        layer[(d, w | bits)] = b.state()
                        todo.append((d, w | bits))
            srcs = dict(layer)
            for kv, bits in extras:
                emit(srcs, kv, bits, layer)
        for (c, w), st in layer.items():
            if c >= lo_p and w == wfull:
                b.finals.add(st)
        return _wrapped(b, start, *wrap)

    def _object_any(self, slots, extras, lo_p, hi_p, flat, wfull, wrap) -> ByteNFA | None:
        """Declared properties in any order, each at most once; additional properties anywhere.
        States: (subset of declared properties written, count) — exponential in the number of
        declared properties, so refused above :data:`MAX_ANY_ORDER_PROPERTIES`."""
        from ._builder import _Builder

        n = len(slots)
        if n > MAX_ANY_ORDER_PROPERTIES:
            self._unsupported("properties", flat[0][1],
                              f"property_order='any' with {n:,} declared properties tracks "
                              f"which were written: ~2^{n} = {2 ** n:.3g} states; at most "
                              f"MAX_ANY_ORDER_PROPERTIES={MAX_ANY_ORDER_PROPERTIES} properties "
                              "(property_order='schema' has no such limit)")
            return self._object_ordered(slots, extras, lo_p, hi_p, wfull, wrap)
        K = hi_p if hi_p is not None else max(1, lo_p)
        req_mask = sum(1 << i for i, (_, _, r) in enumerate(slots) if r)
        # hub state: (declared properties written S, count c, witnesses w)
        b = _Builder()
        hubs: dict[tuple[int, int, int], int] = {}

        def hub(S, c, w):
            key = (S, c, w)
            if key not in hubs:
                hubs[key] = b.state()
            return hubs[key]

        start = hub(0, 0, 0)
        todo = [(0, 0, 0)]
        seen = {(0, 0, 0)}
        entries: dict[tuple, int] = {}  # (kv index, variant, dest S, c, w) -> entry
        while todo:
            S, c, w = todo.pop()
            src = hubs[(S, c, w)]
            if c >= lo_p and (S & req_mask) == req_mask and w == wfull:
                b.finals.add(src)
            nc = c + 1 if hi_p is not None else min(c + 1, K)
            if hi_p is not None and nc > hi_p:
                continue
            moves = [(i, vi, S | (1 << i), kv, bits) for i, (_, variants, _) in enumerate(slots)
                     if not S & (1 << i) for vi, (kv, bits) in enumerate(variants)]
            moves += [(-1, vi, S, kv, bits) for vi, (kv, bits) in enumerate(extras)]
            for i, vi, S2, kv, bits in moves:
                w2 = w | bits
                ekey = (i, vi, S2, nc, w2)
                entry = entries.get(ekey)
                if entry is None:
                    entry = entries[ekey] = b.state()
                    for f in b.embed(kv, entry):
                        b.eps.append((f, hub(S2, nc, w2)))
                if c == 0:
                    b.eps.append((src, entry))
                else:
                    for f in b.embed(self.COMMA, src):
                        b.eps.append((f, entry))
                if (S2, nc, w2) not in seen:
                    seen.add((S2, nc, w2))
                    todo.append((S2, nc, w2))
            if b.n > self.max_states:
                raise UnsupportedSchemaError("properties", flat[0][1],
                                             "property_order='any' automaton too large")
        return _wrapped(b, start, *wrap)

    def _check_object_size(self, slots, extras, lo_p, hi_p, wfull, flat) -> None:
        """Refuse before the work an object automaton of :meth:`_object_ordered` estimated
        over ``max_states`` byte states: one copy of each key:value variant per count
        (and witness set) it can lead to, the additional properties' once per count
        (``minProperties: 100000`` beside additional properties ran out of memory after 14 s).
        """
        def size(kv) -> int:
            parts = kv if isinstance(kv, tuple) else (kv,)
            return sum(getattr(x, "num_states", 0) for x in parts) + 2

        K = hi_p if hi_p is not None else max(1, lo_p)
        comma = self.COMMA.num_states
        estimate = 0
        for i, (_name, variants, _req) in enumerate(slots):
            # one copy per destination count (saturating at K) and witness set
            dests = min(i + 1, K) * (wfull + 1)
            estimate += dests * (sum(size(kv) for kv, _ in variants) + comma * len(variants))
        estimate += K * (wfull + 1) * sum(size(kv) + comma for kv, _ in extras)
        # optional properties in a row: after epsilon removal each state before one of them
        # leads straight into every later one (500 optional properties: 250k such pairs, 48 s
        # and 2.8 GB to lift over Llama-3; 2,000 ran out of 8 GB): PAIR_COST states per pair
        pairs = run = 0
        for i, (_name, _variants, req) in enumerate(slots):
            run = 0 if req else run + 1
            pairs += run * min(i + 1, K + 1) * (wfull + 1)
        estimate += pairs * PAIR_COST
        if estimate > self.max_states:
            word = ("maxProperties" if hi_p is not None and K == hi_p and hi_p > len(slots)
                    else "minProperties" if lo_p > len(slots) else "properties")
            where = next((_ptr(p, word) for s, p in flat if word in s), flat[0][1])
            skip = (f", {pairs:,} (state, later optional property) pairs x {PAIR_COST}"
                    if pairs * PAIR_COST * 2 > estimate else "")
            if skip and word == "properties":
                where = next((_ptr(p, "properties") for s, p in flat if "properties" in s),
                             where)
            raise UnsupportedSchemaError(
                word, where, f"the object automaton needs ~{estimate:,} states ("
                f"{len(slots):,} declared properties, counts up to {K:,}"
                f"{', additional properties' if extras else ''}{skip}; max_states="
                f"{self.max_states:,})")

    def _count(self, a: ByteNFA, ptr: str = "#") -> None:
        if a.num_states > self.max_states:
            raise UnsupportedSchemaError("<size>", ptr, "object automaton exceeds "
                                         f"max_states={self.max_states:,} byte states")
