"""Every JSON spelling of a string: the escape transduction (RFC 8259 §7).

The JSON Schema compiler builds string languages in *canonical* form (what ``json.dumps(s,
ensure_ascii=False)`` writes: ``\\"``, ``\\\\``, ``\\b \\f \\n \\r \\t``, ``\\u00xx`` for the other
control characters, everything else raw UTF-8), where every decoded string has exactly one spelling.
That makes exclusions, complements and ``oneOf`` disjointness exact on byte languages.  Models, and
``json.dumps`` with its default ``ensure_ascii=True``, write other spellings of the same strings:
``"Z\\u00fcrich"``, ``"\\/"``, ``"\\uD83D\\uDE00"``.

:func:`all_spellings` maps a canonical automaton to the automaton of *every* spelling of the
same decoded strings.  Because each spelling decodes to one string, the map is injective on
sets (the images of different strings are disjoint), so it commutes with intersection, union
and difference: the compiler may keep working on canonical automata and spell each string
leaf once at the end, exactly.

Spellings of a code point c (every one RFC 8259 allows):

* raw UTF-8, unless c is ``"``, ``\\`` or a control character below U+0020;
* the short escape, where c has one: ``\\" \\\\ \\/ \\b \\f \\n \\r \\t``;
* ``\\uXXXX`` with hex digits in either case, for c in the BMP (surrogates excluded: a lone
  surrogate is not a Unicode scalar value, so ``"\\ud800"`` is not generated — a subset of
  RFC 8259's syntax, and not a string that a UTF-8 validator or ``jsonschema`` could compare);
* the UTF-16 surrogate pair ``\\uHHHH\\uLLLL`` (either case) for c above U+FFFF.

Construction.  Walk the canonical automaton character by character from its start: a
*boundary* state is one reached after whole characters.  From a boundary state p, a character
path is a raw byte (ASCII), a multi-byte UTF-8 sequence (lead byte, continuation bytes), or a
canonical escape (``\\`` then one of ``"\\/bfnrt`` or ``u00`` and two hex digits); the code
points of all paths from p to a boundary state q form a set C(p, q) of intervals.  The output
keeps every raw path (a ``"`` byte outside an escape is a delimiter and is kept as is) and
replaces the canonical escapes by one sub-automaton from p to q: ``\\`` then the short escapes
of C(p, q), or ``u`` then the hex spellings of C(p, q)'s BMP intervals (a digit-range
decomposition, O(4) blocks per interval) and of its astral intervals (at most three
high-surrogate × low-surrogate boxes per interval).  A state reached both at a boundary and
inside a character cannot occur in an automaton built by the compiler (escape states are
fresh); it is detected and raises ``ValueError`` rather than being mistranslated.
"""

from __future__ import annotations

import functools

from .. import nfa as N
from ..errors import InvalidArgumentError
from ..nfa import ByteNFA

__all__ = ["all_spellings", "hex4"]

_BACKSLASH = 0x5C
_QUOTE = 0x22
_SHORT = {0x22: 0x22, 0x5C: 0x5C, 0x2F: 0x2F, 0x08: 0x62, 0x0C: 0x66, 0x0A: 0x6E, 0x0D: 0x72,
          0x09: 0x74}  # code point -> the letter after the backslash
_SHORT_INV = {v: k for k, v in _SHORT.items()}
_HEX_LOWER = b"0123456789abcdef"


def _hexmask(v: int) -> int:
    """Mask of the bytes spelling hex digit ``v`` (either case)."""
    if v < 10:
        return 1 << (0x30 + v)
    return (1 << (0x61 + v - 10)) | (1 << (0x41 + v - 10))


_ANY_HEX = 0
for _v in range(16):
    _ANY_HEX |= _hexmask(_v)


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _blocks(lo: int, hi: int, width: int) -> list[tuple[list[tuple[int, int]], int]]:
    """Decompose [lo, hi] of ``width``-digit hex numbers into blocks: a list of per-digit
    ranges for the leading digits, then a count of free digits."""
    if lo > hi:
        return []
    if width == 0:
        return [([], 0)]
    unit = 16 ** (width - 1)
    dlo, dhi = lo // unit, hi // unit
    rlo, rhi = lo % unit, hi % unit
    if rlo == 0 and rhi == unit - 1:
        return [([(dlo, dhi)], width - 1)]
    if dlo == dhi:
        return [([(dlo, dlo)] + p, k) for p, k in _blocks(rlo, rhi, width - 1)]
    out = []
    first, last = dlo, dhi
    if rlo != 0:
        out += [([(dlo, dlo)] + p, k) for p, k in _blocks(rlo, unit - 1, width - 1)]
        first = dlo + 1
    mid_hi = dhi if rhi == unit - 1 else dhi - 1
    if first <= mid_hi:
        out.append(([(first, mid_hi)], width - 1))
    if rhi != unit - 1:
        out += [([(dhi, dhi)] + p, k) for p, k in _blocks(0, rhi, width - 1)]
    del last
    return out


class _Out:
    """Edges of the output automaton, with fresh states allocated past ``n``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.edges: list[tuple[int, int, int]] = []
        self._free: dict[tuple[int, int], int] = {}

    def state(self) -> int:
        self.n += 1
        return self.n - 1

    def free(self, k: int, dst: int) -> int:
        """A state from which exactly ``k`` hex digits lead to ``dst``."""
        if k == 0:
            return dst
        hit = self._free.get((k, dst))
        if hit is None:
            nxt = self.free(k - 1, dst)
            hit = self._free[(k, dst)] = self.state()
            self.edges.append((hit, _ANY_HEX, nxt))
        return hit

    def hex_intervals(self, src: int, intervals: list[tuple[int, int]], dst: int) -> None:
        """Paths src -> dst spelling 4 hex digits of a value in ``intervals``."""
        for lo, hi in intervals:
            for prefix, k in _blocks(lo, hi, 4):
                s = src
                for i, (a, b) in enumerate(prefix):
                    m = 0
                    for v in range(a, b + 1):
                        m |= _hexmask(v)
                    d = self.free(k, dst) if i == len(prefix) - 1 else self.state()
                    self.edges.append((s, m, d))
                    s = d


def hex4(intervals: list[tuple[int, int]]) -> ByteNFA:
    """Automaton of the 4-hex-digit spellings (either case) of the values in ``intervals``
    (within [0, 0xFFFF])."""
    o = _Out(2)
    o.hex_intervals(0, _merge(intervals), 1)
    return ByteNFA(o.n, 0, frozenset({1}), tuple(o.edges))


def _escape_into(o: _Out, src: int, cps: list[tuple[int, int]], dst: int) -> None:
    """Every escape spelling (``\\`` ...) of the code points ``cps`` from src to dst."""
    if not cps:
        return
    bs = o.state()
    o.edges.append((src, 1 << _BACKSLASH, bs))
    short = 0
    for c, letter in _SHORT.items():
        if any(lo <= c <= hi for lo, hi in cps):
            short |= 1 << letter
    if short:
        o.edges.append((bs, short, dst))
    bmp = []
    astral = []
    for lo, hi in cps:
        for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), min(hi, 0xFFFF))):
            if a <= b:
                bmp.append((a, b))
        if hi >= 0x10000:
            astral.append((max(lo, 0x10000), hi))
    u = o.state()
    o.edges.append((bs, 1 << 0x75, u))
    if bmp:
        o.hex_intervals(u, bmp, dst)
    for lo, hi in astral:
        hl, hh = 0xD800 + ((lo - 0x10000) >> 10), 0xD800 + ((hi - 0x10000) >> 10)
        ll, lh = 0xDC00 + ((lo - 0x10000) & 0x3FF), 0xDC00 + ((hi - 0x10000) & 0x3FF)
        if hl == hh:
            boxes = [((hl, hl), (ll, lh))]
        else:
            boxes = [((hl, hl), (ll, 0xDFFF))]
            if hl + 1 <= hh - 1:
                boxes.append(((hl + 1, hh - 1), (0xDC00, 0xDFFF)))
            boxes.append(((hh, hh), (0xDC00, lh)))
            # adjacent boxes with the same low range are one box: all of U+10000..U+10FFFF is
            # D800-DBFF x DC00-DFFF (one path of 4 + 4 hex digits where three boxes took 21
            # states of every free string's escape)
            merged = [boxes[0]]
            for (a, b), low in boxes[1:]:
                (pa, _pb), plow = merged[-1]
                if plow == low:
                    merged[-1] = ((pa, b), low)
                else:
                    merged.append(((a, b), low))
            boxes = merged
        for hrange, lrange in boxes:
            mid = o.state()
            o.hex_intervals(u, [hrange], mid)
            b2 = o.state()
            o.edges.append((mid, 1 << _BACKSLASH, b2))
            u2 = o.state()
            o.edges.append((b2, 1 << 0x75, u2))
            o.hex_intervals(u2, [lrange], dst)


@functools.cache
def _ascii_runs(mask: int) -> tuple[tuple[int, int], ...]:
    """Runs of the ASCII code points in ``mask`` other than ``"`` (cached: one mask per
    character class, read at every boundary state of a string)."""
    return tuple(_merge([(b, b) for b in range(0x80) if mask >> b & 1 and b != _QUOTE]))


@functools.cache
def _short_letters(mask: int) -> tuple[int, ...]:
    """The short-escape letters (after ``\\``) in ``mask``, ascending (cached)."""
    return tuple(x for x in range(0x80) if mask >> x & 1 and x in _SHORT_INV)


@functools.cache
def _hex_digits(mask: int) -> tuple[int, ...]:
    """The values of the lowercase hex digits in ``mask``, ascending (cached)."""
    return tuple(di for di, ch in enumerate(_HEX_LOWER) if mask >> ch & 1)


@functools.cache
def _cont_payload_runs(mask: int) -> tuple[tuple[int, int], ...]:
    """Runs of 6-bit payloads of the continuation bytes in ``mask`` (cached: a handful of
    distinct masks, ~10k calls per Kubernetes schema)."""
    vals = [b & 0x3F for b in range(0x80, 0xC0) if mask >> b & 1]
    return tuple(_merge([(v, v) for v in vals]))


def all_spellings(a: ByteNFA) -> ByteNFA:
    """Every JSON spelling of the strings that ``a`` spells canonically.

    Args:
        a: a byte automaton of canonical JSON string bodies, or of quoted canonical strings
            (a ``"`` byte outside an escape is a delimiter and is kept).  Nothing else: any
            other raw byte is read as a character of a string.
    Returns:
        A new automaton (not finalized) accepting every spelling of the same strings.
    Raises:
        ValueError: a state is reached both between characters and inside one (never for the
            compiler's automata; see the module docstring).
    """
    f = N.finalize(a, reduce=False)
    out: list[list[tuple[int, int]]] = [[] for _ in range(f.num_states)]
    for s, m, d in f.edges:
        out[s].append((m, d))
    o = _Out(f.num_states)
    phase = {f.start: 0}  # 0: boundary, >0: inside a multi-byte char / escape
    boundary = [f.start]
    seen_b = {f.start}
    kept_mid: set[int] = set()
    memo: dict = {}

    def mark(q: int, ph: int) -> None:
        old = phase.get(q)
        if old is None:
            phase[q] = ph
        elif (old == 0) != (ph == 0):
            raise InvalidArgumentError(f"state {q} is reached both between and inside characters")
        if ph == 0 and q not in seen_b:
            seen_b.add(q)
            boundary.append(q)

    i = 0
    while i < len(boundary):
        p = boundary[i]
        i += 1
        cps: dict[int, list[tuple[int, int]]] = {}
        for m, d in out[p]:
            ascii_m = m & ((1 << 0x80) - 1) & ~(1 << _BACKSLASH)
            if ascii_m:
                o.edges.append((p, ascii_m, d))
                mark(d, 0)
                runs = _ascii_runs(ascii_m)
                if runs:
                    cps.setdefault(d, []).extend(runs)
            if m >> _BACKSLASH & 1:
                _escape_paths(out, d, p, cps, mark)
            for lead_lo, lead_hi, k in ((0xC2, 0xDF, 1), (0xE0, 0xEF, 2), (0xF0, 0xF4, 3)):
                lm = m & (((1 << (lead_hi + 1)) - 1) & ~((1 << lead_lo) - 1))
                if not lm:
                    continue
                o.edges.append((p, lm, d))
                mark(d, k)
                leads = [b for b in range(lead_lo, lead_hi + 1) if lm >> b & 1]
                _utf8_paths(out, d, k, leads, cps, mark, kept_mid, o, memo)
        for q, iv in cps.items():
            _escape_into(o, p, _merge(iv), q)
    finals = frozenset(q for q in f.finals if phase.get(q, 0) == 0)
    return ByteNFA(o.n, f.start, finals, tuple(o.edges))


def _utf8_paths(out, mid: int, k: int, leads: list[int], cps, mark, kept_mid, o,
                memo: dict) -> None:
    """Follow the ``k`` continuation bytes after a lead byte into ``mid``; record the code
    points per boundary destination and keep the raw continuation edges (once per state).
    ``memo``: (state, bytes left, high-bit intervals) -> the (destination, code points) found,
    shared by the boundary states whose multi-byte paths meet (each node of a key trie reads
    every other character through the same continuation states)."""
    lead_bits = {1: 5, 2: 4, 3: 3}[k]
    lead_payload = _merge([(b & ((1 << lead_bits) - 1),) * 2 for b in leads])

    def walk(state: int, left: int, prefixes: list[tuple[int, int]]):
        # prefixes: intervals of the code point's high bits read so far
        key = (state, left, tuple(prefixes))
        hit = memo.get(key)
        if hit is not None:
            return hit
        if state not in kept_mid:
            kept_mid.add(state)
            for m, d in out[state]:
                o.edges.append((state, m, d))
        found: list[tuple[int, list[tuple[int, int]]]] = []
        for m, d in out[state]:
            runs = _cont_payload_runs(m)
            if not runs:
                continue
            mark(d, left - 1)
            nxt: list[tuple[int, int]] = []
            full = runs == ((0, 63),)
            for lo, hi in prefixes:
                if full:
                    nxt.append((lo << 6, (hi << 6) | 63))
                else:
                    for v in range(lo, hi + 1):
                        nxt.extend(((v << 6) | a, (v << 6) | b) for a, b in runs)
            nxt = _merge(nxt)
            if left == 1:
                found.append((d, nxt))
            else:
                found.extend(walk(d, left - 1, nxt))
        memo[key] = found
        return found

    for d, iv in walk(mid, k, lead_payload):
        cps.setdefault(d, []).extend(iv)


def _escape_paths(out, s1: int, p: int, cps, mark) -> None:
    """Canonical escapes from ``p`` (``\\`` read, now at ``s1``): record their code points per
    destination.  Their edges are not kept: :func:`_escape_into` re-adds every spelling."""
    mark(s1, 1)
    for m, d in out[s1]:
        for letter in _short_letters(m):
            mark(d, 0)
            c = _SHORT_INV[letter]
            cps.setdefault(d, []).append((c, c))
        if not m >> 0x75 & 1:
            continue
        # u 0 0 h h (canonical: lowercase, controls only)
        frontier = [(d, 0)]
        for _ in range(4):
            nxt = []
            for st, val in frontier:
                mark(st, 1)
                for m2, d2 in out[st]:
                    for di in _hex_digits(m2):
                        nxt.append((d2, val * 16 + di))
            frontier = nxt
        for st, val in frontier:
            mark(st, 0)
            cps.setdefault(st, []).append((val, val))
