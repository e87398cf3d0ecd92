"""Regular expressions → byte-level NFAs → token automata.

Semantics (what :func:`regex_to_nfa` accepts, as a loop)::

    for data in all byte strings:
        accepted(data) == (data is valid UTF-8
                           and re.fullmatch(pattern, data.decode("utf-8"), flags) is not None)
        # search=True: re.search(...) instead of re.fullmatch(...)

Characters are Unicode scalar values encoded as UTF-8, so a token that ends in the middle of a
character (GPT-2 splits emoji and CJK) lifts correctly.  The automaton is an NFA built by
Thompson-style composition (:mod:`.nfa`) and is never determinized: its size is linear in the
pattern's (a counted repetition ``x{lo,hi}`` costs ``hi`` copies of ``x``).

**Parser.**  Patterns are parsed by Python's own ``re`` parser (``re._parser``, the code
``re.compile`` runs), so the syntax and meaning are *exactly* Python ``re``'s: escapes
(``\\uXXXX``, ``\\x..``, octal), ``]`` first in a class, inline and scoped flags (``(?i)``,
``(?s:...)``, ``(?x)``), Unicode ``\\d \\w \\s`` (or ASCII ones under ``re.ASCII``), and
``re.IGNORECASE`` with Python's case-folding rules.  (interegular's parser was tried first:
it rejects ``^``/``$``/``\\uXXXX``, reads ``\\d`` as ASCII-only, misparses ``[]a]``, and keeps no
positions; see ``tests/fsa/test_regex.py::test_interegular_divergences``.)  Character classes that
involve a Unicode category (``\\d``, ``\\w``, ``\\s``) or case folding are *computed by* ``re``: the
class is matched once against the string of all code points (about 10 ms, cached per class and
flags), so they agree with ``re`` by construction.

**Anchors.**  ``^``, ``\\A`` at the start and ``$``, ``\\Z`` at the end are no-ops under full-match
semantics.  Anchors elsewhere are supported exactly: they are compiled to marker edges and the
NFA is multiplied by a ≤12-state automaton that tracks "nothing consumed yet", "last character
was a newline" and the pending end-of-string constraint.  Python's ``$`` (without MULTILINE)
also matches *before a final newline*: ``re.fullmatch("a$", "a\\n")`` is ``None`` (the match must
end at the end of the string), but ``re.fullmatch("a$\\n", "a\\n")`` and ``re.search("a$", "a\\n")``
match — and so do these automata.  ``re.MULTILINE`` ``^``/``$`` work at line boundaries.

**Search mode** (``search=True``): ``re.search`` semantics, the language ``Σ* P Σ*`` with Σ any
code point, except that a leading ``^``/``\\A`` drops the ``Σ*`` prefix, a trailing ``\\Z`` drops
the suffix, and a trailing ``$`` leaves only an optional final ``"\\n"`` (Python ``re``).  JSON
Schema ``pattern`` (ECMA-262) differs from Python in ``$`` (no final newline), ``\\d``/``\\w``
(ASCII) and ``\\s``: call with ``flags=re.ASCII`` for ASCII ``\\d``/``\\w``.

**Lookaround** (``(?=...)``, ``(?!...)``, ``(?<=...)``, ``(?<!...)``, nested to any depth, inside
quantified groups, beside anchors) is compiled exactly, with ``re``'s meaning: a lookahead sees
the whole rest of the string (past the end of the match, under search semantics too), a
lookbehind the whole prefix.  Patterns that have one take a second path (patterns without keep
the automaton described above, edge for edge): the pattern is compiled with a marker edge at
each lookaround (anchors become lookarounds there too), then multiplied by the automaton that
checks every marker's condition, tracking the *set* of runs where a negation needs it (a subset
construction) — see :mod:`.lookaround`.  Only its size is limited
(:data:`~.lookaround.MAX_LOOKAROUND_STATES` states, else :class:`UnsupportedRegexError`
naming the lookaround and its position).  Variable-width lookbehind is an
:class:`InvalidRegexError`, as in ``re``.  ``lookaround=False`` refuses lookaround, for patterns
that are pieces of a longer text (grammar terminals).

**Unsupported** (raise :class:`UnsupportedRegexError` with the construct's position):
backreferences, conditionals ``(?(1)...)``, word boundaries ``\\b``/``\\B``, atomic groups
``(?>...)`` and possessive quantifiers.  A pattern whose NFA is estimated (from the parse
tree, before anything is built) over ``max_states`` (:data:`MAX_NFA_STATES`) states is
refused the same way, naming its largest part (a literal, a counted repetition) and the
estimate; so is a pattern longer than ``max_states`` characters, before parsing.  Messages
show the pattern around the position only (:func:`~.errors.pattern_excerpt`).  Syntax
errors raise :class:`InvalidRegexError` with ``re``'s message and position.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from functools import lru_cache

import numpy as np

from .. import nfa as N
from ..automaton import TokenAutomaton
from ..errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidRegexError,
    UnsupportedRegexError,
)
from ..gc_pause import paused_gc
from ..nfa import ByteNFA
from ..progress import compile_stage
from ..vocabulary import TokenVocabulary, require_vocabulary
from .lookaround import MARKER_SHIFT, Lookaround, lookaround_product

try:  # Python >= 3.11
    from re import _constants as _C
    from re import _parser as _P
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _C  # type: ignore[no-redef]
    import sre_parse as _P  # type: ignore[no-redef]

__all__ = ["regex_to_nfa", "compile_regex", "clear_regex_cache", "MAX_NFA_STATES"]

#: Largest byte NFA (states, before finalization) a pattern may produce by default, estimated
#: from the parse tree before anything is built (``max_states=`` raises or lowers it).  Measured
#: (Llama-3 vocabulary, whole compile, peak RSS of the process): a 250k-character literal 2.0 s,
#: 609 MB; a 1M-character literal 9 s, 1.9 GB; ``[a-z]{1,100000}`` (~300k states) 2.4 s, 926 MB;
#: ``[a-z]{1,200000}`` 12 s, 1.6 GB.  (The lifted size also grows with the tokens a repeated
#: class admits: ``.{0,20000}`` has only ~10^5 byte states but ran out of 6 GB.)
MAX_NFA_STATES = 500_000

_MAXCP = N.MAX_CODEPOINT
_I = re.IGNORECASE
_M = re.MULTILINE
_S = re.DOTALL
_A = re.ASCII

# Marker bits (above the 256 byte bits) for zero-width anchors; removed by _anchor_product.
_BEG = 1 << 256  # \A, or ^ without MULTILINE: position 0
_BOL = 1 << 257  # ^ with MULTILINE: position 0 or after "\n"
_END = 1 << 258  # $ without MULTILINE: end, or before a final "\n"
_EOL = 1 << 259  # $ with MULTILINE: end, or before any "\n"
_ENDZ = 1 << 260  # \Z: end of string
_MARKERS = _BEG | _BOL | _END | _EOL | _ENDZ
_NL = 1 << 0x0A

_UNSUPPORTED_AT = {
    _C.AT_BOUNDARY: "word boundary \\b",
    _C.AT_NON_BOUNDARY: "non-word-boundary \\B",
}

_LOOK_KINDS = ("lookahead", "negative lookahead", "lookbehind", "negative lookbehind")


# --------------------------------------------------------------------------- code-point sets
# A set of code points is a tuple of disjoint, sorted, non-adjacent inclusive ranges.

Ranges = tuple[tuple[int, int], ...]


def _norm(ranges) -> Ranges:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1][1] = hi
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def _complement(ranges: Ranges) -> Ranges:
    out = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= _MAXCP:
        out.append((nxt, _MAXCP))
    return tuple(out)


_UNIVERSE: str | None = None
_UNIVERSE_LOCK = threading.Lock()


def _universe() -> str:
    """Every Unicode scalar value once, in order (surrogates left out: no UTF-8 encoding)."""
    global _UNIVERSE
    with _UNIVERSE_LOCK:
        if _UNIVERSE is None:
            cps = np.concatenate([np.arange(0xD800), np.arange(0xE000, 0x110000)])
            _UNIVERSE = cps.astype("<u4").tobytes().decode("utf-32-le")
    return _UNIVERSE


def _index_to_cp(i: int) -> int:
    return i if i < 0xD800 else i + 0x800


@lru_cache(maxsize=4096)
def _scan_class(src: str, flags: int) -> Ranges:
    """The code points ``re`` matches with the one-character pattern ``src`` under ``flags``,
    found by matching ``(?:src)+`` against the string of all code points (exact by
    construction; about 10 ms)."""
    rx = re.compile(f"(?:{src})+", flags & (_I | _A))
    runs = [(_index_to_cp(m.start()), _index_to_cp(m.end() - 1)) for m in rx.finditer(_universe())]
    return _norm(runs)


_CATEGORY_SRC = {
    _C.CATEGORY_DIGIT: r"\d",
    _C.CATEGORY_NOT_DIGIT: r"\D",
    _C.CATEGORY_SPACE: r"\s",
    _C.CATEGORY_NOT_SPACE: r"\S",
    _C.CATEGORY_WORD: r"\w",
    _C.CATEGORY_NOT_WORD: r"\W",
}


def _cp_src(c: int) -> str:
    return f"\\U{c:08x}"


def _class_ranges(items, flags: int) -> Ranges:
    """Code points of an ``IN`` node's items (``LITERAL``, ``RANGE``, ``CATEGORY``, ``NEGATE``)."""
    needs_re = bool(flags & _I) or any(op is _C.CATEGORY for op, _ in items)
    if needs_re:
        parts = []
        for op, av in items:
            if op is _C.NEGATE:
                parts.insert(0, "^")
            elif op is _C.LITERAL:
                parts.append(_cp_src(av))
            elif op is _C.RANGE:
                parts.append(f"{_cp_src(av[0])}-{_cp_src(av[1])}")
            elif op is _C.CATEGORY:
                parts.append(_CATEGORY_SRC[av])
            else:  # pragma: no cover - the parser produces nothing else inside a class
                raise AssertionError(f"unexpected class item {op}")
        return _scan_class("[" + "".join(parts) + "]", flags)
    negate = False
    rngs = []
    for op, av in items:
        if op is _C.NEGATE:
            negate = True
        elif op is _C.LITERAL:
            rngs.append((av, av))
        elif op is _C.RANGE:
            rngs.append((av[0], av[1]))
        else:  # pragma: no cover
            raise AssertionError(f"unexpected class item {op}")
    r = _norm(rngs)
    return _complement(r) if negate else r


def _literal_ranges(c: int, flags: int) -> Ranges:
    if flags & _I:
        return _scan_class(_cp_src(c), flags)
    return ((c, c),)


@lru_cache(maxsize=4096)
def _class_nfa(ranges: Ranges) -> ByteNFA:
    return N.codepoints(ranges)


# --------------------------------------------------------------------------- positions


def _scan_constructs(pattern: str, verbose: bool) -> list[tuple[str, int]]:
    """(construct, position) of the unsupported constructs, in source order (lexical scan; the
    parse tree says *which* construct is present, this says *where*)."""
    out: list[tuple[str, int]] = []
    n = len(pattern)
    i = 0

    while i < n:
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1] if i + 1 < n else ""
            if nxt == "b":
                out.append(("word boundary \\b", i))
            elif nxt == "B":
                out.append(("non-word-boundary \\B", i))
            elif nxt.isdigit() and nxt != "0":
                octal = pattern[i + 1:i + 4]
                if not (len(octal) == 3 and all(c in "01234567" for c in octal)):
                    out.append(("backreference", i))
            i += 2
            continue
        if ch == "[":
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        if verbose and ch == "#":
            j = pattern.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if ch == "(" and pattern.startswith("(?", i):
            rest = pattern[i + 2:i + 5]
            for prefix, kind in (("<=", "lookbehind"), ("<!", "negative lookbehind"),
                                 ("=", "lookahead"), ("!", "negative lookahead"),
                                 (">", "atomic group"), ("(", "conditional"),
                                 ("P=", "backreference")):
                if rest.startswith(prefix):
                    out.append((kind, i))
                    break
            if rest.startswith("#"):
                j = pattern.find(")", i)
                i = n if j < 0 else j + 1
                continue
            i += 2
            continue
        if ch in "*+?":
            j = i + 1
            if j < n and pattern[j] in "?":
                j += 1
            elif j < n and pattern[j] == "+":
                out.append(("possessive quantifier", j))
                j += 1
            i = j
            continue
        if ch == "{":
            m = re.match(r"\{\d*(,\d*)?\}", pattern[i:])
            if m and m.group(0) not in ("{}", "{,}"):
                j = i + m.end()
                if j < n and pattern[j] == "+":
                    out.append(("possessive quantifier", j))
                    j += 1
                i = j
                continue
        i += 1
    return out


# --------------------------------------------------------------------------- construction


def _marker(bit: int) -> ByteNFA:
    return ByteNFA(2, 0, frozenset({1}), ((0, bit, 1),))


class _Builder:
    def __init__(self, pattern: str, verbose: bool, max_states: int = MAX_NFA_STATES):
        self.pattern = pattern
        self.max_states = max_states
        self.verbose = verbose
        self.markers = False
        self._scan: list[tuple[str, int]] | None = None
        #: the lookarounds met so far (None: lookaround is refused, anchors are markers)
        self.looks: list[Lookaround] | None = None
        self._looks_seen = 0  # lookarounds visited, in source order (their positions' index)
        self._anchor_looks: dict[int, int] = {}

    def position(self, construct: str, text: str | None = None) -> int | None:
        if self._scan is None:
            self._scan = _scan_constructs(self.pattern, self.verbose)
        for kind, pos in self._scan:
            if kind == construct:
                return pos
        if text is not None:
            i = self.pattern.find(text)
            return i if i >= 0 else None
        return None

    def lookaround_position(self) -> int | None:
        """Position of the next lookaround in source order (the tree is walked in that order)."""
        if self._scan is None:
            self._scan = _scan_constructs(self.pattern, self.verbose)
        pos = [p for kind, p in self._scan if kind in _LOOK_KINDS]
        i = self._looks_seen
        self._looks_seen += 1
        return pos[i] if i < len(pos) else None

    def lookaround(self, construct: str, av, flags: int) -> ByteNFA:
        """A marker edge for lookaround ``av`` (its body compiled with markers of its own)."""
        assert self.looks is not None
        pos = self.lookaround_position()
        behind = av[0] < 0
        if behind:
            lo, hi = av[1].getwidth()
            if lo != hi:  # re._compiler's check (re._parser does not make it)
                raise InvalidRegexError("look-behind requires fixed-width pattern",
                                        self.pattern, pos)
        body = self.seq(av[1], flags)  # nested lookarounds are numbered first (inner first)
        self.looks.append(Lookaround(behind, construct.startswith("negative"), body, construct,
                                     pos))
        return _marker(1 << (MARKER_SHIFT + len(self.looks) - 1))

    def anchor_lookaround(self, bit: int) -> ByteNFA:
        """On the lookaround path an anchor is a lookaround too (so that it can sit inside one)."""
        assert self.looks is not None
        k = self._anchor_looks.get(bit)
        if k is None:
            any_cp = N.any_codepoint()
            not_nl = _class_nfa(((0, 9), (11, _MAXCP)))
            behind, body, name = {
                _BEG: (True, any_cp, "anchor ^ or \\A"),  # (?<![\s\S])
                _BOL: (True, not_nl, "anchor ^ (MULTILINE)"),  # (?<![^\n])
                _END: (False, N.union(not_nl, N.concat(N.literal(b"\n"), any_cp)), "anchor $"),
                _EOL: (False, not_nl, "anchor $ (MULTILINE)"),  # (?![^\n])
                _ENDZ: (False, any_cp, "anchor \\Z"),  # (?![\s\S])
            }[bit]
            k = self._anchor_looks[bit] = len(self.looks)
            self.looks.append(Lookaround(behind, True, body, name, None))
        return _marker(1 << (MARKER_SHIFT + k))

    def unsupported(self, construct: str) -> UnsupportedRegexError:
        return UnsupportedRegexError(construct, self.pattern, self.position(construct))

    # -- walking the parse tree
    def seq(self, items, flags: int) -> ByteNFA:
        parts: list[ByteNFA] = []
        lit = bytearray()
        for op, av in items:
            if op is _C.LITERAL and (not flags & _I or _literal_ranges(av, flags) == ((av, av),)):
                if 0xD800 <= av <= 0xDFFF:  # a lone surrogate: no UTF-8 string contains it
                    parts.append(N.nothing())
                else:
                    lit += chr(av).encode("utf-8")
                continue
            if lit:
                parts.append(N.literal(bytes(lit)))
                lit = bytearray()
            parts.append(self.node(op, av, flags))
        if lit:
            parts.append(N.literal(bytes(lit)))
        return N.concat(*parts)

    def node(self, op, av, flags: int) -> ByteNFA:
        if op is _C.LITERAL:
            return _class_nfa(_literal_ranges(av, flags))
        if op is _C.NOT_LITERAL:
            return _class_nfa(_complement(_literal_ranges(av, flags)))
        if op is _C.ANY:
            return _class_nfa(((0, _MAXCP),) if flags & _S else ((0, 9), (11, _MAXCP)))
        if op is _C.IN:
            return _class_nfa(_class_ranges(av, flags))
        if op is _C.BRANCH:
            return N.union(*(self.seq(b, flags) for b in av[1]))
        if op is _C.SUBPATTERN:
            _group, add, rem, sub = av
            return self.seq(sub, (flags | add) & ~rem)
        if op is _C.MAX_REPEAT or op is _C.MIN_REPEAT:
            lo, hi, sub = av
            hi = None if hi is _C.MAXREPEAT or hi == _C.MAXREPEAT else int(hi)
            body = self.seq(sub, flags)
            copies = max(lo, hi if hi is not None else lo + 1)
            if body.num_states * copies > self.max_states:
                text = f"{{{lo},{'' if hi is None else hi}}}" if lo != hi else f"{{{lo}}}"
                raise UnsupportedRegexError(
                    f"repetition {text} of a {body.num_states}-state subexpression (~"
                    f"{body.num_states * copies:,} states, over max_states={self.max_states:,})",
                    self.pattern, self.position("", text),
                )
            return N.repeat(body, int(lo), hi)
        if op is _C.AT:
            if av is _C.AT_BEGINNING:
                bit = _BOL if flags & _M else _BEG
            elif av is _C.AT_BEGINNING_STRING:
                bit = _BEG
            elif av is _C.AT_END:
                bit = _EOL if flags & _M else _END
            elif av is _C.AT_END_STRING:
                bit = _ENDZ
            else:
                raise self.unsupported(_UNSUPPORTED_AT.get(av, f"anchor {av}"))
            if self.looks is not None:
                return self.anchor_lookaround(bit)
            self.markers = True
            return _marker(bit)
        if op is _C.ASSERT or op is _C.ASSERT_NOT:
            neg = "negative " if op is _C.ASSERT_NOT else ""
            construct = neg + ("lookbehind" if av[0] < 0 else "lookahead")
            if self.looks is None:
                raise self.unsupported(construct)
            return self.lookaround(construct, av, flags)
        if op is _C.GROUPREF:
            raise self.unsupported("backreference")
        if op is _C.GROUPREF_EXISTS:
            raise self.unsupported("conditional")
        if op is getattr(_C, "ATOMIC_GROUP", None):
            raise self.unsupported("atomic group")
        if op is getattr(_C, "POSSESSIVE_REPEAT", None):
            raise self.unsupported("possessive quantifier")
        raise UnsupportedRegexError(str(op).lower(), self.pattern, None)  # pragma: no cover


def _has_lookaround(items) -> bool:
    """Whether the parse tree has a lookahead or lookbehind anywhere."""
    for op, av in items:
        if op is _C.ASSERT or op is _C.ASSERT_NOT:
            return True
        if op is _C.BRANCH:
            subs = av[1]
        elif op is _C.SUBPATTERN:
            subs = [av[3]]
        elif op is _C.MAX_REPEAT or op is _C.MIN_REPEAT:
            subs = [av[2]]
        else:  # the other compound nodes (conditionals, atomic groups) are refused anyway
            continue
        if any(_has_lookaround(sub) for sub in subs):
            return True
    return False


def _estimate(items, flags: int) -> tuple[int, str, str | None]:
    """(states, what, text) before building: the byte NFA's states as the builder makes them
    (a run of literal bytes: bytes + 1; a class: its automaton; a repetition: ``hi`` copies,
    or ``lo + 1`` when unbounded, of the body plus one each, plus one; alternations and
    concatenations summed: an upper bound) and the largest contribution (its description, and a
    piece of the pattern to find its position by).  Class automata are built (cached); nothing
    else is.  Recursion depth is the parse tree's, which ``re``'s own parser reached."""
    total = 0
    big = (0, "", None)
    run: list[int] = []  # code points of the current run of literals

    def flush() -> int:
        if not run:
            return 0
        n = len("".join(map(chr, run)).encode("utf-8", "surrogatepass")) + 1
        nonlocal big
        if n > big[0]:
            big = (n, f"a literal of {n - 1:,} bytes", "".join(map(chr, run[:20])))
        run.clear()
        return n

    for op, av in items:
        if op is _C.LITERAL:
            run.append(av)
            continue
        total += flush()
        what, text = str(op).lower(), None
        if op in (_C.NOT_LITERAL, _C.ANY, _C.IN):
            n = _Builder("", False).node(op, av, flags).num_states
        elif op is _C.BRANCH:
            n = 1
            for b in av[1]:
                m, w, t = _estimate(b, flags)
                n += m
                if m > big[0]:
                    big = (m, w, t)
        elif op is _C.SUBPATTERN:
            n, what, text = _estimate(av[3], (flags | av[1]) & ~av[2])
        elif op is _C.MAX_REPEAT or op is _C.MIN_REPEAT:
            lo, hi, sub = av
            hi = None if hi is _C.MAXREPEAT or hi == _C.MAXREPEAT else int(hi)
            m, _w, _t = _estimate(sub, flags)
            copies = max(int(lo), hi if hi is not None else int(lo) + 1)
            n = copies * (max(m, 1) + 1) + 1
            text = f"{{{lo},{'' if hi is None else hi}}}" if lo != hi else f"{{{lo}}}"
            what = f"repetition {text} of a ~{m:,}-state subexpression"
        else:
            n = 2
        total += n
        if n > big[0]:
            big = (n, what, text)
    total += flush()
    return max(total, 1), big[1], big[2]


def _is_anchor(item, codes) -> bool:
    return item[0] is _C.AT and item[1] in codes


_LEAD = (_C.AT_BEGINNING, _C.AT_BEGINNING_STRING)
_TRAIL = (_C.AT_END, _C.AT_END_STRING)


def _strip(items, lead: bool) -> list:
    """Drop anchors that are no-ops under full-match semantics: ``^``/``\\A`` in leading position,
    ``$``/``\\Z`` in trailing position (descending into leading/trailing groups and branches)."""
    items = list(items)
    idx = 0 if lead else -1
    codes = _LEAD if lead else _TRAIL
    while items and _is_anchor(items[idx], codes):
        items.pop(idx)
    if items:
        op, av = items[idx]
        if op is _C.SUBPATTERN:
            items[idx] = (op, (av[0], av[1], av[2], _strip(av[3], lead)))
        elif op is _C.BRANCH:
            items[idx] = (op, (av[0], [_strip(b, lead) for b in av[1]]))
    return items


def _anchor_product(a: ByteNFA) -> ByteNFA:
    """Remove anchor markers exactly: the product of ``a`` with the automaton tracking
    (consumed anything?, last character a newline?, pending end constraint).

    Pending constraints on the rest of the string, from weakest to strictest:
    0 none, 1 "empty or starts with \\n" (``$`` MULTILINE), 2 "empty or exactly \\n"
    (``$``), 3 "empty" (``\\Z``).  Marker edges become epsilons; everything is reached from the
    start, so the result is at most 12× the input.
    """
    out_b: list[list[tuple[int, int]]] = [[] for _ in range(a.num_states)]
    out_m: list[list[tuple[int, int]]] = [[] for _ in range(a.num_states)]
    for s, m, d in a.edges:
        if m & _MARKERS:
            out_m[s].append((m, d))
        else:
            out_b[s].append((m, d))
    out_e: list[list[int]] = [[] for _ in range(a.num_states)]
    for s, d in a.epsilons:
        out_e[s].append(d)

    def on_byte(t: int, nl: bool) -> int:
        pend = t >> 2
        if pend == 3 or (pend and not nl):
            return -1
        pend = 0 if pend == 1 else (3 if pend == 2 else 0)
        return 1 | (2 if nl else 0) | (pend << 2)

    def on_marker(t: int, m: int) -> int:
        consumed, last_nl, pend = t & 1, t & 2, t >> 2
        if m == _BEG:
            return t if not consumed else -1
        if m == _BOL:
            return t if (not consumed or last_nl) else -1
        need = {_EOL: 1, _END: 2, _ENDZ: 3}[m]
        return (t & 3) | (max(pend, need) << 2)

    ids: dict[tuple[int, int], int] = {(a.start, 0): 0}
    stack = [(a.start, 0)]
    edges: list[tuple[int, int, int]] = []
    eps: list[tuple[int, int]] = []

    def get(key) -> int:
        i = ids.get(key)
        if i is None:
            i = ids[key] = len(ids)
            stack.append(key)
        return i

    while stack:
        q, t = key = stack.pop()
        src = ids[key]
        for d in out_e[q]:
            eps.append((src, get((d, t))))
        for m, d in out_m[q]:
            t2 = on_marker(t, m)
            if t2 >= 0:
                eps.append((src, get((d, t2))))
        for m, d in out_b[q]:
            for part, nl in ((m & _NL, True), (m & ~_NL, False)):
                if part:
                    t2 = on_byte(t, nl)
                    if t2 >= 0:
                        edges.append((src, part, get((d, t2))))
    finals = frozenset(i for (q, _t), i in ids.items() if q in a.finals)
    return ByteNFA(len(ids), 0, finals, tuple(edges), tuple(eps))


def _parse(pattern: str, flags: int):
    if not isinstance(pattern, str):
        raise InvalidArgumentTypeError(f"pattern must be a str, not {type(pattern).__name__}")
    if flags & re.LOCALE:
        raise InvalidRegexError("re.LOCALE is only valid with bytes patterns", pattern, None)
    try:
        return _P.parse(pattern, flags)
    except re.error as e:
        raise InvalidRegexError(e.msg, pattern, e.pos) from None
    except (RecursionError, OverflowError) as e:  # deeply nested groups, huge repeat counts
        raise InvalidRegexError(f"{type(e).__name__}: {e}", pattern, None) from None


def _build(items, flags: int, search: bool, b: _Builder) -> ByteNFA:
    items = list(items)
    if not search:
        return b.seq(_strip(_strip(items, True), False), flags)
    # search: Σ* P Σ*, distributing over a top-level alternation so that anchored branches
    # (`^a$|b`) keep their cheap form.
    if len(items) == 1 and items[0][0] is _C.BRANCH:
        return N.union(*(_build(br, flags, True, b) for br in items[0][1][1]))
    if len(items) == 1 and items[0][0] is _C.SUBPATTERN:
        _g, add, rem, sub = items[0][1]
        return _build(sub, (flags | add) & ~rem, True, b)
    prefix = suffix = None  # unanchored: any text before / after
    if items and _is_anchor(items[0], _LEAD) and not (
        items[0][1] is _C.AT_BEGINNING and flags & _M
    ):
        items.pop(0)
        prefix = []
    if items and items[-1][0] is _C.AT:
        code = items[-1][1]
        if code is _C.AT_END_STRING:
            items.pop()
            suffix = []
        elif code is _C.AT_END and not flags & _M:
            items.pop()
            suffix = [N.optional(N.literal(b"\n"))]
    if prefix is None:
        prefix = [N.star(N.any_codepoint())]
    if suffix is None:
        suffix = [N.star(N.any_codepoint())]
    return N.concat(*prefix, b.seq(items, flags), *suffix)


def regex_to_nfa(
    pattern: str, *, flags: int = 0, search: bool = False, lookaround: bool = True,
    max_states: int | None = None,
) -> ByteNFA:
    """Compile a Python ``re`` pattern to a byte-level NFA (see the module docstring).

    Args:
        pattern: the regular expression (``str``; Python ``re`` syntax).
        flags: ``re`` flags (``re.IGNORECASE``, ``re.DOTALL``, ``re.MULTILINE``, ``re.ASCII``,
            ``re.VERBOSE``); inline flags in the pattern are honoured too.
        search: ``False`` — full-match semantics (``re.fullmatch``): the whole byte string must
            match; ``True`` — ``re.search`` semantics: some substring matches.
        lookaround: ``False`` refuses lookahead/lookbehind (:class:`UnsupportedRegexError`), for
            callers where the pattern is a piece of a longer text (a grammar terminal), so that
            a lookaround would see text outside the string matched here.
        max_states: the largest byte NFA built (default :data:`MAX_NFA_STATES`), estimated
            from the parse tree before anything is built: literals (bytes), counted
            repetitions (``hi`` copies, or ``lo + 1`` when unbounded), alternations.

    Returns:
        A :class:`~.nfa.ByteNFA` over bytes accepting exactly the UTF-8 encodings of the matching
        strings (not finalized; :func:`~.nfa.finalize` it or lift it with
        :meth:`TokenAutomaton.from_byte_nfa`).

    Raises:
        InvalidRegexError: ``re`` rejects the pattern (message and position from ``re``).
        UnsupportedRegexError: a non-regular or unsupported construct, or a lookaround whose
            exact automaton exceeds :data:`~.lookaround.MAX_LOOKAROUND_STATES`, with its
            position; a pattern estimated over ``max_states`` states (what, the estimate,
            the position of its largest part).
    """
    limit = MAX_NFA_STATES if max_states is None else max_states
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgumentError(f"max_states must be an int >= 1, not {max_states!r}")
    if isinstance(pattern, str) and len(pattern) > limit:
        # before parsing too (re's parser took 7 s over a 1 MB literal)
        raise UnsupportedRegexError(
            f"pattern of {len(pattern):,} characters (over max_states={limit:,}; "
            "pass max_states= to raise the limit)", pattern, None)
    parsed = _parse(pattern, flags)
    gflags = parsed.state.flags
    est, what, text = _estimate(list(parsed), gflags)
    if est > limit:  # before the work (a 1 MB literal: 9 s and 1.9 GB to lift)
        pos = pattern.find(text) if text else None
        shown = f"{est:,}" if est < 10**12 else f"{est:.2e}"
        raise UnsupportedRegexError(
            f"{what} (the pattern needs ~{shown} states, over max_states={limit:,}; "
            "pass max_states= to raise the limit)", pattern,
            pos if pos is not None and pos >= 0 else None)
    b = _Builder(pattern, bool(gflags & re.VERBOSE), limit)
    if lookaround and _has_lookaround(parsed):
        b.looks = []  # the lookaround path: markers, then one exact product
    out = _build(parsed, gflags, search, b)
    if b.looks:
        return lookaround_product(out, b.looks, pattern)
    if b.markers:
        out = _anchor_product(out)
    return out


# --------------------------------------------------------------------------- token automata

_CACHE: OrderedDict[tuple, TokenAutomaton] = OrderedDict()
_CACHE_SIZE = 256
_CACHE_LOCK = threading.Lock()


def compile_regex(
    pattern: str, vocab: TokenVocabulary, *, flags: int = 0, search: bool = False,
    max_states: int | None = None,
) -> TokenAutomaton:
    """Compile ``pattern`` into a :class:`~.automaton.TokenAutomaton` over ``vocab``.

    ``accepts(ids)`` is true iff the bytes of ``ids`` are the UTF-8 encoding of a string ``s``
    with ``re.fullmatch(pattern, s, flags)`` (``re.search`` when ``search=True``).  Results are
    cached in-process (LRU, 256 entries) by ``(pattern, flags, search, vocab.fingerprint)``: the
    same frozen object is returned again.

    ``max_states``: see :func:`regex_to_nfa`.

    Raises:
        InvalidRegexError, UnsupportedRegexError: see :func:`regex_to_nfa`.
        EmptyLanguageError: no token sequence over ``vocab`` matches.
    """
    with compile_stage(), paused_gc():
        require_vocabulary(vocab)
        key = (pattern, int(flags), bool(search), vocab.fingerprint, max_states)
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
            if hit is not None:
                _CACHE.move_to_end(key)
                return hit
        byte_nfa = regex_to_nfa(pattern, flags=flags, search=search, max_states=max_states)
        meta = {"kind": "regex", "pattern": pattern}
        if flags:
            meta["flags"] = int(flags)
        if search:
            meta["search"] = True
        out = TokenAutomaton.from_byte_nfa(byte_nfa, vocab, meta=meta)
        with _CACHE_LOCK:
            out = _CACHE.setdefault(key, out)
            _CACHE.move_to_end(key)
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
        return out


def clear_regex_cache() -> None:
    """Empty the :func:`compile_regex` cache (and the per-class caches)."""
    with _CACHE_LOCK:
        _CACHE.clear()
    _scan_class.cache_clear()
    _class_nfa.cache_clear()
