"""JSON strings: canonical escapes, string bodies (:data:`_CHAR`, :data:`_BODY`), decoded
contents (:data:`_CONTENT`) and the escaping of content automata (:func:`_escape_subst`),
string keys that avoid a set of names, complements of contents, and the compiler's
:class:`_StringsMixin` (``minLength``/``maxLength``, ``pattern``, ``format``)."""

from __future__ import annotations

import functools
import re

from .. import nfa as N
from ..nfa import ByteNFA
from ._automata import _is_empty, _trie
from ._base import _CompilerBase
from ._cache import _cached, _share
from ._constants import _CHECKED_FORMATS, MAX_COMPLEMENT_STATES
from ._ecma import _ecma_to_python
from ._nodes import _ptr, _Synth
from .formats import FORMATS, format_nfa
from .string_spellings import all_spellings

_RAW_RANGES = [(0x20, 0x21), (0x23, 0x5B), (0x5D, N.MAX_CODEPOINT)]
_SPECIAL_BYTES = list(range(0x20)) + [0x22, 0x5C]
_SHORT_ESC = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r",
              0x09: "\\t"}


def _esc(b: int) -> bytes:
    return (_SHORT_ESC.get(b) or f"\\u{b:04x}").encode()


def _escapes(specials: list[int]) -> ByteNFA:
    """Union of the canonical escapes of the given special bytes, as a small trie."""
    if not specials:
        return N.nothing()
    trie: dict[bytes, None] = {_esc(b): None for b in specials}
    b = _Trie()
    for e in trie:
        b.add(e)
    return b.nfa()


class _Trie:
    def __init__(self) -> None:
        self.children: list[dict[int, int]] = [{}]
        self.ends: set[int] = set()

    def add(self, data: bytes) -> None:
        s = 0
        for byte in data:
            nxt = self.children[s].get(byte)
            if nxt is None:
                nxt = len(self.children)
                self.children.append({})
                self.children[s][byte] = nxt
            s = nxt
        self.ends.add(s)

    def nfa(self) -> ByteNFA:
        edges = tuple((s, 1 << byte, d) for s, ch in enumerate(self.children)
                      for byte, d in ch.items())
        return ByteNFA(len(self.children), 0, frozenset(self.ends), edges)


_CHAR = N.finalize(N.union(N.codepoints(_RAW_RANGES), _escapes(_SPECIAL_BYTES)))
_BODY = N.finalize(N.star(_CHAR))
_QUOTE = N.literal('"')
_CONTENT = N.finalize(N.star(N.any_codepoint()))  # decoded string contents (valid UTF-8)


@functools.cache
def _spelled_char() -> ByteNFA:
    """Every JSON spelling of one character (:data:`_CHAR`'s canonical spelling), finalized."""
    return N.finalize(all_spellings(_CHAR))


def _escape_subst(a: ByteNFA) -> ByteNFA:
    """Rewrite an automaton over decoded UTF-8 content into one over canonical JSON string
    bodies: the special bytes (``"``, ``\\``, controls) of an edge become the trie of their
    escape sequences, entered at the edge's source and leaving into its destination (the
    escapes are prefix-free, so every trie leaf ends one escape): about 6 new states per edge
    that carries special bytes (one chain per byte was up to 34 x 5)."""
    a = N.finalize(a, reduce=False)
    special = N.mask_of(_SPECIAL_BYTES)
    edges = []
    n = a.num_states
    for s, m, d in a.edges:
        safe = m & ~special
        if safe:
            edges.append((s, safe, d))
        sp = m & special
        if not sp:
            continue
        trie = _ESC_TRIES.get(sp)
        if trie is None:
            children, _ends = _trie(_esc(b) for b in range(256) if sp >> b & 1)
            trie = _ESC_TRIES[sp] = [[(byte, c) for byte, c in kids.items()]
                                     for kids in children]
        ids = {0: s}  # the root is s, inner trie nodes get new states, leaves are d
        for t, kids in enumerate(trie):
            for byte, c in kids:
                if not trie[c]:
                    dst = d
                elif c in ids:
                    dst = ids[c]
                else:
                    dst = ids[c] = n
                    n += 1
                edges.append((ids[t], 1 << byte, dst))
    return ByteNFA(n, a.start, a.finals, tuple(edges))


#: Escape tries by special-byte mask: per trie node, its (byte, child) moves.
_ESC_TRIES: dict[int, list[list[tuple[int, int]]]] = {}


def _format_content(name: str) -> ByteNFA:
    """Decoded content of format ``name`` (finalized once per process)."""
    key = ("format-content", name)
    hit = _cached(key)
    if hit is None:
        hit = _share(key, format_nfa(name))
    return hit


def _escaped_format(name: str) -> ByteNFA:
    """Canonical string bodies of format ``name`` (finalized once per process)."""
    key = ("format", name)
    hit = _cached(key)
    if hit is None:
        hit = _share(key, N.finalize(_escape_subst(_format_content(name))))
    return hit


def _body_excluding(names: list[str]) -> ByteNFA:
    """Canonical string bodies whose decoded value is none of ``names`` (exact, O(total length))."""
    if not names:
        return _BODY
    children, ends = _trie(names)  # over characters
    n_trie = len(children)
    edges: list[tuple[int, int, int]] = []
    eps: list[tuple[int, int]] = []
    # one shared copy of the free body: after a deviation, any body
    n = n_trie
    body = _BODY.shifted(n)
    n += _BODY.num_states
    edges.extend(body.edges)
    free = body.start
    finals = set(body.finals)
    # _BODY's start loops on the single-byte raw characters and enters its own states for
    # multi-byte characters and escapes: a node whose children are all single-byte raw
    # characters deviates straight into the shared copy (no per-node deviation automaton)
    first = [(m, d + n_trie) for s, m, d in _BODY.edges if s == _BODY.start]
    for s in range(n_trie):
        if s not in ends:
            finals.add(s)
        kids = children[s]
        if all(0x20 <= ord(c) < 0x80 and c not in '"\\' for c in kids):
            kid_mask = N.mask_of(ord(c) for c in kids)
            for m, d in first:
                if d == free:
                    m &= ~kid_mask
                if m:
                    edges.append((s, m, d))
        else:
            raw_excl = sorted(ord(c) for c in kids if ord(c) >= 0x20 and c not in '"\\')
            ranges = []
            for lo, hi in _RAW_RANGES:
                cur = lo
                for x in raw_excl:
                    if lo <= x <= hi and x >= cur:
                        if x > cur:
                            ranges.append((cur, x - 1))
                        cur = x + 1
                if cur <= hi:
                    ranges.append((cur, hi))
            spec = [b for b in _SPECIAL_BYTES if chr(b) not in kids]
            dev = N.union(N.codepoints(ranges), _escapes(spec))
            dev = dev.shifted(n)
            n += dev.num_states
            edges.extend(dev.edges)
            eps.extend(dev.epsilons)
            eps.append((s, dev.start))
            eps.extend((f, free) for f in dev.finals)
        for ch, child in kids.items():
            o = ord(ch)
            enc = _esc(o) if o < 0x20 or ch in '"\\' else ch.encode()
            prev = s
            for i, byte in enumerate(enc):
                nxt = child if i == len(enc) - 1 else n
                if nxt == n:
                    n += 1
                edges.append((prev, 1 << byte, nxt))
                prev = nxt
    return ByteNFA(n, 0, frozenset(finals), tuple(edges), tuple(eps))


def _complement_content(a: ByteNFA) -> ByteNFA | None:
    """Decoded strings (valid UTF-8) NOT in L(a), by subset construction of ``a`` over its
    byte classes; None above :data:`MAX_COMPLEMENT_STATES` subsets.  Cached on ``a``."""
    if "complement" in a._cache:
        return a._cache["complement"]
    f = N.finalize(a)
    cls, ncls = N.byte_classes([m for _, m, _ in f.edges])
    reps: dict[int, int] = {}
    cmask = [0] * ncls
    for byte, c in enumerate(cls):
        reps.setdefault(c, byte)
        cmask[c] |= 1 << byte
    out_edges: list[list[tuple[int, int]]] = [[] for _ in range(f.num_states)]
    for s, m, d in f.edges:
        out_edges[s].append((m, d))
    start = frozenset({f.start})
    ids = {start: 0}
    todo = [start]
    edges = []
    while todo:
        S = todo.pop()
        for c in range(ncls):
            bit = 1 << reps[c]
            T = frozenset(d for s in S for m, d in out_edges[s] if m & bit)
            if T not in ids:
                if len(ids) >= MAX_COMPLEMENT_STATES:
                    a._cache["complement"] = None
                    return None
                ids[T] = len(ids)
                todo.append(T)
            edges.append((ids[S], cmask[c], ids[T]))
    finals = frozenset(i for S, i in ids.items() if not (S & f.finals))
    res = N.intersect(ByteNFA(len(ids), 0, finals, tuple(edges)), _CONTENT)
    a._cache["complement"] = res
    return res


def _universal_content(a: ByteNFA) -> bool:
    """Whether ``a`` accepts every decoded string (e.g. the search automaton of a pattern that
    matches the empty string, such as ``([A-Z]+)?``): then it constrains nothing and is left
    out of products (an exact shortcut; unknown -- too many subsets -- counts as not)."""
    hit = a._cache.get("universal")
    if hit is None:
        c = _complement_content(a) if a.num_states <= 256 else None
        hit = a._cache["universal"] = c is not None and _is_empty(c)
    return hit


class _StringsMixin(_CompilerBase):
    """String values: canonical bodies under length bounds, ECMA-262 patterns (and their
    complements) and formats, and every spelling of canonical strings."""

    def _spell(self, a: ByteNFA) -> ByteNFA:
        """Every spelling of the canonical quoted strings ``a`` (itself when ``canonical``);
        cached on ``a`` and, by its finalized shape, across compilers (keys, enum literals,
        formats and bodies recur across schemas: each is spelled once per process)."""
        if self.canonical:
            return a
        hit = a._cache.get("spelled")
        if hit is None and "length" in a._cache:
            # a quoted length-bounded body (no pattern or format): every spelling of c{lo,hi}
            # is (every spelling of c){lo,hi} (spellings are per character), so one character
            # is spelled instead of the hi-state chain (maxLength 1000: ~0.25 s of per-state
            # spelling) and the repetition stays one body (the lift's periodic template)
            lo, hi = a._cache["length"]
            key = ("spelled-length", lo, hi)
            hit = _cached(key)
            if hit is None:
                hit = _share(key, N.concat(_QUOTE, N.finalize(N.repeat(_spelled_char(), lo, hi)),
                                           _QUOTE))
            a._cache["spelled"] = hit
        if hit is None:
            f = N.finalize(a, reduce=False)
            key = ("spelled", f.num_states, f.start, f.finals, f.edges)
            hit = _cached(key)
            if hit is None:
                hit = _share(key, all_spellings(f))
            a._cache["spelled"] = hit
        return hit

    def _pattern(self, pattern: str, p: str) -> ByteNFA | None:
        """Decoded-content automaton for ECMA-262 ``pattern`` with search semantics."""
        hit = _cached(("pattern", pattern))
        if hit is not None:
            return hit
        from ..errors import InvalidRegexError, UnsupportedRegexError
        from ..regex import regex_to_nfa

        try:
            py = _ecma_to_python(pattern)
            a = N.finalize(regex_to_nfa(py, flags=re.ASCII, search=True))
        except UnsupportedRegexError as e:
            self._unsupported("pattern", p, str(e))
            return None
        except (InvalidRegexError, ValueError, re.error) as e:
            self._unsupported("pattern", p, f"cannot translate ECMA-262 regex: {e}")
            return None
        _share(("pattern", pattern), a)
        return a

    def _string_content(self, flat) -> ByteNFA:
        """Canonical string *bodies* (between the quotes) allowed by the flat nodes."""
        lo, hi = 0, None
        pats: list[ByteNFA] = []
        fmts: list[str] = []
        for s, p in flat:
            if "minLength" in s:
                lo = max(lo, int(s["minLength"]))
            if "maxLength" in s:
                hi = int(s["maxLength"]) if hi is None else min(hi, int(s["maxLength"]))
            if "pattern" in s and not isinstance(s, _Synth):
                a = self._pattern(s["pattern"], _ptr(p, "pattern"))
                if a is not None and not _universal_content(a):
                    pats.append(a)
            if "$not-pattern" in s and isinstance(s, _Synth):
                pat, pp = s["$not-pattern"]
                a = self._pattern(pat, pp)
                if a is not None:
                    a = self._complement(a, pp, "not")
                    if a is not None:
                        pats.append(a)
            f = s.get("format")
            if isinstance(f, str) and self.assert_formats:
                if f in FORMATS:
                    fmts.append(f)
                elif f in _CHECKED_FORMATS:
                    self._unsupported("format", _ptr(p, "format"), f"format {f!r}")
                else:
                    self.ignored.add(f"format:{f}")
        if hi is not None and hi < lo:
            return N.nothing()
        if not self.assert_formats:
            fmts = []
        fmts = list(dict.fromkeys(fmts))
        only_formats = bool(fmts) and not pats
        if pats:
            # conjunctions over decoded content, escaped once: escaping is injective, so
            # esc(A & B) = esc(A) & esc(B), and the content products are far smaller (no
            # escape tries inside them): 7 overlapping oneOf patterns went from 30 s to <1 s
            parts = sorted([_format_content(f) for f in fmts] + pats, key=lambda x: x.num_states)
            content = parts[0]
            for c in parts[1:]:
                content = N.intersect(content, c)
            constraints: list[ByteNFA] = [_escape_subst(content)]
        else:
            constraints = [_escaped_format(f) for f in fmts]
        if lo == 0 and hi is None:
            length = _BODY
        else:
            if hi is not None and hi * _CHAR.num_states > self.max_states:
                self._unsupported("maxLength", flat[0][1],
                                  f"maxLength {hi:,} is too large (~{hi * _CHAR.num_states:,} "
                                  f"states; max_states={self.max_states:,})")
                hi = None
            if lo * _CHAR.num_states > self.max_states:
                # checked before the work, as maxLength is (minLength 1e6 ran out of 4 GiB)
                self._unsupported("minLength", flat[0][1],
                                  f"minLength {lo} is too large (~{lo * _CHAR.num_states:,} "
                                  f"states; max_states={self.max_states:,})")
                lo = 0
            lkey = ("length", lo, hi)
            length = _cached(lkey)
            if length is None:
                length = _share(lkey, N.finalize(N.repeat(_CHAR, lo, hi)))
                length._cache["length"] = (lo, hi)
        if not constraints:
            return length
        out = constraints[0]
        for c in constraints[1:]:
            out = N.intersect(out, c)
        if only_formats and lo == 0 and hi is None:
            return out  # format automata are valid bodies already
        return N.intersect(out, length)

    def _string(self, flat, stack) -> ByteNFA:
        body = self._string_content(flat)
        if _is_empty(body):
            return N.nothing()
        hit = body._cache.get("quoted")  # shared bodies (length bounds, formats): one copy
        if hit is None:
            hit = body._cache["quoted"] = N.concat(_QUOTE, body, _QUOTE)
            if "length" in body._cache:  # see _spell
                hit._cache["length"] = body._cache["length"]
        return hit

    def _complement(self, a: ByteNFA, ptr: str, keyword: str = "patternProperties"
                    ) -> ByteNFA | None:
        """Decoded strings NOT in L(a) (a small pattern automaton), by subset construction
        (cached on ``a``)."""
        res = _complement_content(a)
        if res is None:
            self._unsupported(keyword, ptr, "the pattern's complement needs too many states")
        return res
