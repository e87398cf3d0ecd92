"""Byte NFA combinators against Python's ``re`` / ``regex`` and brute force on small alphabets.

Every generated NFA comes with an equivalent Python regular expression; both are run on every
string over a small alphabet up to a length bound, in full-match and in prefix (partial) mode.
"""

from __future__ import annotations

import itertools
import re

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tractable.fsa import nfa as N
from tractable.fsa import nfa_automata_lib as NA

ALPHABET = "abc"
# strings over the pattern alphabet plus one byte no pattern uses
STRINGS = ["".join(p) for n in range(6) for p in itertools.product(ALPHABET + "x", repeat=n)]

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------- strategy


def _leaf():
    return st.sampled_from([
        (N.literal("a"), "a"),
        (N.literal("b"), "b"),
        (N.literal("c"), "c"),
        (N.literal("ab"), "ab"),
        (N.literal(b"ca"), "ca"),
        (N.byteset(N.mask_of(b"ab")), "[ab]"),
        (N.byte_range(ord("b"), ord("c")), "[b-c]"),
        (N.empty(), "(?:)"),
        (N.nothing(), "(?!)"),
    ])


def _extend(inner):
    def rep(args):
        (a, p), lo, extra = args
        hi = None if extra is None else lo + extra
        return N.repeat(a, lo, hi), f"(?:{p}){{{lo},{'' if hi is None else hi}}}"

    return st.one_of(
        st.tuples(inner, inner).map(lambda t: (N.concat(t[0][0], t[1][0]),
                                               f"(?:{t[0][1]})(?:{t[1][1]})")),
        st.tuples(inner, inner).map(lambda t: (N.union(t[0][0], t[1][0]),
                                               f"(?:{t[0][1]}|{t[1][1]})")),
        st.lists(inner, min_size=0, max_size=3).map(
            lambda xs: (N.union(*[x[0] for x in xs]),
                        "(?:" + "|".join(f"(?:{x[1]})" for x in xs) + ")" if xs else "(?!)")),
        st.lists(inner, min_size=0, max_size=3).map(
            lambda xs: (N.concat(*[x[0] for x in xs]), "".join(f"(?:{x[1]})" for x in xs))),
        inner.map(lambda t: (N.star(t[0]), f"(?:{t[1]})*")),
        inner.map(lambda t: (N.plus(t[0]), f"(?:{t[1]})+")),
        inner.map(lambda t: (N.optional(t[0]), f"(?:{t[1]})?")),
        st.tuples(inner, st.integers(0, 2), st.one_of(st.none(), st.integers(0, 2))).map(rep),
    )


#: (ByteNFA, equivalent Python regex over ALPHABET)
nfas = st.recursive(_leaf(), _extend, max_leaves=7)


def _lang(a: N.ByteNFA, strings=STRINGS, partial=False) -> list[bool]:
    return [N.matches(a, s.encode(), partial=partial) for s in strings]


def _ref(pattern: str, strings=STRINGS) -> list[bool]:
    rx = re.compile(pattern)
    return [rx.fullmatch(s) is not None for s in strings]


def _ref_partial(pattern: str, strings=STRINGS) -> list[bool]:
    rx = regex.compile(pattern)
    return [rx.fullmatch(s, partial=True) is not None for s in strings]


def _check_canonical(f: N.ByteNFA) -> None:
    """finalize()'s promises: epsilon-free, start 0, one edge per (src, dst), trimmed."""
    assert f.epsilons == ()
    assert f.start == 0
    pairs = [(s, d) for s, _, d in f.edges]
    assert len(pairs) == len(set(pairs))
    assert all(m != 0 and 0 <= m <= N.ALL_BYTES for _, m, _ in f.edges)
    assert all(0 <= s < f.num_states and 0 <= d < f.num_states for s, d in pairs)
    if not f.finals:  # the empty language: a single dead start state
        assert f.num_states == 1 and not f.edges
        return
    fwd = {0}
    stack = [0]
    while stack:
        x = stack.pop()
        for s, d in pairs:
            if s == x and d not in fwd:
                fwd.add(d)
                stack.append(d)
    bwd = set(f.finals)
    stack = list(bwd)
    while stack:
        x = stack.pop()
        for s, d in pairs:
            if d == x and s not in bwd:
                bwd.add(s)
                stack.append(s)
    assert fwd == bwd == set(range(f.num_states))


# ------------------------------------------------------------------- combinators


@SETTINGS
@given(nfas)
def test_combinators_match_python_re(case):
    a, pattern = case
    assert _lang(a) == _ref(pattern), pattern


SHORT = [s for s in STRINGS if len(s) <= 3]
EXTENSIONS = ["".join(p) for n in range(6) for p in itertools.product(ALPHABET, repeat=n)]


@SETTINGS
@given(nfas)
def test_partial_matching_is_prefix_of_the_language(case):
    """``matches(partial=True)``: some extension is in the language.  Bounded below by brute
    force (an extension of up to 5 characters matches ``re``) and above by ``regex``'s partial
    matching (which also reports a prefix whose only continuations are dead, e.g. ``a(?!)``)."""
    a, pattern = case
    rx = re.compile(pattern)
    got = _lang(a, SHORT, partial=True)
    upper = _ref_partial(pattern, SHORT)
    for s, g, u in zip(SHORT, got, upper):
        lower = any(rx.fullmatch(s + t) for t in EXTENSIONS)
        assert lower <= g <= u, (pattern, s)


def test_partial_matching_ignores_dead_branches():
    a = N.union(N.concat(N.literal("ab"), N.nothing()), N.literal("c"))
    assert not N.matches(a, b"a", partial=True)
    assert N.matches(a, b"", partial=True) is not False  # "" is a prefix of "c"
    assert not N.matches(N.concat(N.literal("a"), N.nothing()), b"", partial=True)
    assert N.matches(N.intersect(N.star(N.literal("ab")), N.literal("abab")), b"aba",
                     partial=True)
    assert not N.matches(N.intersect(N.star(N.literal("ab")), N.literal("ab")), b"aba",
                         partial=True)


@SETTINGS
@given(nfas, nfas)
def test_intersect_is_the_conjunction(x, y):
    a = N.intersect(x[0], y[0])
    want = [p and q for p, q in zip(_ref(x[1]), _ref(y[1]))]
    assert _lang(a) == want, (x[1], y[1])
    _check_canonical(N.finalize(a))
    # and it composes like any other NFA
    b = N.concat(a, N.literal("c"))
    assert _lang(b) == [s.endswith("c") and w for s, w in
                        zip(STRINGS, [False] + _lang(a, [s[:-1] for s in STRINGS[1:]]))]


@SETTINGS
@given(nfas)
def test_finalize_is_canonical_and_preserves_the_language(case):
    a, pattern = case
    want = _ref(pattern)
    for reduce in (False, True):
        f = N.finalize(a, reduce=reduce)
        _check_canonical(f)
        assert _lang(f) == want
        assert N.finalize(a, reduce=reduce) is f  # cached
    # the pieces one by one
    e = N.remove_epsilons(a)
    assert e.epsilons == () and _lang(e) == want
    t = N.trim(e)
    _check_canonical(t)
    r = N.reduce_states(t)
    _check_canonical(r)
    assert r.num_states <= t.num_states and _lang(r) == want


def test_reduce_states_shrinks():
    # "ab" | "cb": the two states before the final "b" have the same future and merge
    a = N.union(N.literal("ab"), N.literal("cb"), N.literal("ccb"))
    t = N.finalize(a, reduce=False)
    r = N.finalize(a, reduce=True)
    assert r.num_states < t.num_states
    assert r.num_states == 4  # start, after a-or-cc, after c, final
    assert _lang(r) == _lang(t) == _ref("ab|cb|ccb")


def test_trim_needs_epsilon_free():
    with pytest.raises(ValueError, match="epsilon"):
        N.trim(N.optional(N.literal("a")))


def test_primitives_and_errors():
    assert _lang(N.empty()) == [s == "" for s in STRINGS]
    assert not any(_lang(N.nothing()))
    assert not any(_lang(N.byteset(0)))
    assert not any(_lang(N.nothing(), partial=True))
    assert N.matches(N.byteset(N.ALL_BYTES), b"\xff")
    assert N.matches(N.literal("é"), "é".encode())
    assert N.matches(N.literal("é"), b"\xc3", partial=True)
    assert not N.matches(N.literal("é"), b"\xc3")
    with pytest.raises(ValueError):
        N.byte_range(3, 2)
    with pytest.raises(ValueError):
        N.byte_range(0, 256)
    with pytest.raises(ValueError):
        N.repeat(N.literal("a"), 2, 1)
    with pytest.raises(ValueError):
        N.repeat(N.literal("a"), -1, None)
    assert N.concat() is not None and _lang(N.concat()) == _lang(N.empty())
    assert not any(_lang(N.union()))
    assert N.mask_of([0, 255]) == 1 | (1 << 255)


def test_repeat_is_linear_in_the_bound():
    a = N.repeat(N.byteset(N.mask_of(b"ab")), 0, 200)
    f = N.finalize(a)
    assert f.num_states <= 202
    assert N.matches(a, b"ab" * 100) and not N.matches(a, b"a" * 201)


@given(st.lists(st.integers(0, 2**256 - 1), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_byte_classes_partition(masks):
    cls, n = N.byte_classes(masks)
    assert len(cls) == 256 and max(cls) < n
    # numbering: class 0 for bytes in no mask (always counted), the rest by first byte
    want: dict[tuple[int, ...], int] = {(): 0}
    ref = [want.setdefault(tuple(i for i, m in enumerate(sorted(set(masks))) if m >> b & 1),
                           len(want)) for b in range(256)]
    assert (cls, n) == (ref, len(want))
    for b1 in range(0, 256, 7):
        for b2 in range(256):
            same = all(((m >> b1) & 1) == ((m >> b2) & 1) for m in masks)
            assert (cls[b1] == cls[b2]) == same


# ------------------------------------------------------------------- UTF-8 code points

BOUNDARIES = [0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xD800, 0xDFFF, 0xE000, 0xFFFF, 0x10000,
              0x3FFFF, 0x40000, 0xFFFFF, 0x100000, 0x10FFFF]
NEAR = sorted({c + d for c in BOUNDARIES for d in range(-3, 4) if 0 <= c + d <= 0x10FFFF})


def _is_surrogate(c: int) -> bool:
    return 0xD800 <= c <= 0xDFFF


def _encodings(seqs) -> set[bytes]:
    return {bytes(p) for s in seqs for p in itertools.product(*[range(a, b + 1) for a, b in s])}


@given(st.sampled_from(NEAR), st.integers(0, 600))
@settings(max_examples=150, deadline=None)
def test_utf8_sequences_are_exact(lo, width):
    hi = min(lo + width, 0x10FFFF)
    seqs = N.utf8_sequences(lo, hi)
    want = {chr(c).encode("utf-8") for c in range(lo, hi + 1) if not _is_surrogate(c)}
    assert _encodings(seqs) == want
    # the pieces are disjoint
    assert sum(len(list(itertools.product(*[range(a, b + 1) for a, b in s]))) for s in seqs) \
        == len(want)


@given(st.lists(st.tuples(st.sampled_from(NEAR), st.integers(0, 0x2000)), min_size=1,
                max_size=3))
@settings(max_examples=100, deadline=None)
def test_codepoints_accepts_exactly_the_ranges(spec):
    ranges = [(lo, min(lo + w, 0x10FFFF)) for lo, w in spec]
    a = N.codepoints(ranges)
    probe = set(NEAR) | {lo for lo, _ in ranges} | {hi for _, hi in ranges} \
        | {hi + 1 for _, hi in ranges if hi < 0x10FFFF} | {lo - 1 for lo, _ in ranges if lo}
    for c in sorted(probe):
        if _is_surrogate(c):
            continue
        inside = any(lo <= c <= hi for lo, hi in ranges)
        assert N.matches(a, chr(c).encode("utf-8")) == inside, hex(c)
    # surrogates (CESU-style encodings) are never accepted
    for c in (0xD800, 0xDBFF, 0xDC00, 0xDFFF):
        assert not N.matches(a, bytes([0xED, 0xA0 | ((c >> 6) & 0x1F), 0x80 | (c & 0x3F)]))


def test_any_codepoint_is_valid_utf8_only():
    a = N.any_codepoint()
    for c in NEAR:
        enc = chr(c).encode("utf-8", "surrogatepass")
        assert N.matches(a, enc) == (not _is_surrogate(c)), hex(c)
    for bad in [b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf",  # overlong
                b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf",
                b"\xed\xa0\x80", b"\xed\xbf\xbf",  # surrogates
                b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff",  # past U+10FFFF
                b"\x80", b"\xbf", b"\xe4\xb8", b"\xe4\xb8\xad\xad", b""]:  # broken, truncated
        assert not N.matches(a, bad), bad
    assert N.matches(a, b"\xe4\xb8", partial=True)  # a prefix of 中
    assert N.matches(a, b"\xf0\x9f", partial=True)
    assert not N.matches(a, b"\xed\xa0", partial=True)  # no surrogate continues this
    assert not N.matches(a, b"\xc0", partial=True)


def test_codepoints_edge_cases():
    assert not any(N.matches(N.codepoints([(0xD800, 0xDFFF)]), chr(c).encode())
                   for c in (0xD7FF, 0xE000))
    two = N.codepoints([(0xD7FF, 0xE000)])
    assert N.matches(two, "\ud7ff".encode()) and N.matches(two, "\ue000".encode())
    assert not N.matches(two, "\ue001".encode())
    assert not any(_lang(N.codepoints([])))
    assert not any(_lang(N.codepoints([(5, 4)])))
    with pytest.raises(ValueError):
        N.codepoints([(0, 0x110000)])
    with pytest.raises(ValueError):
        N.codepoints([(-1, 3)])
    # a class such as "not a quote or backslash" stays small
    cls = N.codepoints([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)])
    assert N.finalize(cls).num_states <= 12


# ------------------------------------------------------------------- automata-lib


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nfas)
def test_automata_lib_round_trip(case):
    a, pattern = case
    want = _ref(pattern)
    fa = NA.to_automata_lib(a)
    assert [fa.accepts_input(s) for s in STRINGS] == want
    back = NA.from_automata_lib(fa)
    assert _lang(back) == want
    f = N.finalize(a)
    if f.num_states <= 12:
        dfa = NA.to_automata_lib(a, deterministic=True)
        assert [dfa.accepts_input(s) for s in STRINGS] == want
        assert _lang(NA.from_automata_lib(dfa)) == want


def test_from_automata_lib_native_objects():
    from automata.fa.dfa import DFA
    from automata.fa.nfa import NFA

    nfa = NFA.from_regex("a(b|c)*a?", input_symbols=set(ALPHABET))
    assert _lang(NA.from_automata_lib(nfa)) == _ref("a(?:b|c)*a?")
    # epsilon moves and multi-byte symbols (read as their UTF-8 bytes)
    nfa2 = NFA(states={"p", "q", "r"}, input_symbols={"é", "a"},
               transitions={"p": {"": {"q"}, "a": {"p"}}, "q": {"é": {"r"}}, "r": {}},
               initial_state="p", final_states={"r"})
    b = NA.from_automata_lib(nfa2)
    assert N.matches(b, "aaé".encode()) and N.matches(b, "é".encode())
    assert not N.matches(b, b"a") and N.matches(b, b"a\xc3", partial=True)
    dfa = DFA(states={0, 1}, input_symbols={"a", "b"},
              transitions={0: {"a": 1, "b": 0}, 1: {"a": 0, "b": 1}},
              initial_state=0, final_states={1})
    assert _lang(NA.from_automata_lib(dfa)) == _ref("b*a(?:b|ab*a)*")


def _round_based_reduce_size(t: N.ByteNFA) -> int:
    """Reference for reduce_states: re-sign every state per round until no merge (the
    original algorithm); returns the number of surviving states."""
    rep = list(range(t.num_states))
    alive = list(range(t.num_states))
    while True:
        owner: dict = {}
        merged = False
        for s in alive:
            row: dict[int, int] = {}
            for src, m, d in t.edges:
                if src == s:
                    row[rep[d]] = row.get(rep[d], 0) | m
            r = owner.setdefault((s in t.finals, frozenset(row.items())), s)
            if r != s:
                for x in range(t.num_states):
                    if rep[x] == s:
                        rep[x] = r
                merged = True
        if not merged:
            return len(alive)
        alive = [s for s in alive if rep[s] == s]


@SETTINGS
@given(nfas)
def test_reduce_states_reaches_the_round_based_fixpoint(case):
    a, _ = case
    t = N.finalize(a, reduce=False)
    assert N.reduce_states(t).num_states == _round_based_reduce_size(t)


def _components(f: N.ByteNFA) -> list[list[int]]:
    """Strongly connected components with more than one state (Kosaraju)."""
    fwd: dict[int, list[int]] = {}
    bwd: dict[int, list[int]] = {}
    for s, _, d in f.edges:
        fwd.setdefault(s, []).append(d)
        bwd.setdefault(d, []).append(s)
    order: list[int] = []
    seen: set[int] = set()
    for r in range(f.num_states):
        if r in seen:
            continue
        seen.add(r)
        stack = [(r, iter(fwd.get(r, ())))]
        while stack:
            x, it = stack[-1]
            for y in it:
                if y not in seen:
                    seen.add(y)
                    stack.append((y, iter(fwd.get(y, ()))))
                    break
            else:
                stack.pop()
                order.append(x)
    comp: dict[int, int] = {}
    out: list[list[int]] = []
    for r in reversed(order):
        if r in comp:
            continue
        members = [r]
        comp[r] = r
        for x in members:
            for y in bwd.get(x, ()):
                if y not in comp:
                    comp[y] = r
                    members.append(y)
        if len(members) > 1:
            out.append(sorted(members))
    return out


def test_finalize_numbers_copies_of_a_sub_automaton_alike():
    """Copies of one looping sub-automaton with different futures stay separate, and each is
    numbered the same way relative to itself (what the token lifter's memoization relies on)."""
    body = N.star(N.union(N.codepoints([(0x20, 0x21), (0x23, 0x10FFFF)]),
                          N.concat(N.literal("\\"), N.byteset(N.mask_of(b'"\\nt')))))
    item = N.concat(N.literal('"'), body, N.literal('"'))
    a = N.concat(N.literal("["), item, N.literal(","), N.literal("1"), item, N.literal("]"),
                 N.union(N.literal("x"), N.concat(N.literal("y"), item)))
    f = N.finalize(a)
    comps = _components(f)
    assert len(comps) == 3
    forms = set()
    for c in comps:
        rel = {s: i for i, s in enumerate(c)}
        forms.add(tuple(sorted((rel[s], m, rel[d]) for s, m, d in f.edges
                               if s in rel and d in rel)))
    assert len(forms) == 1
    # and the numbering does not depend on where the NFA's states were numbered before
    k = 17
    moved = N.ByteNFA(a.num_states + k, a.start + k, frozenset(x + k for x in a.finals),
                      tuple((s + k, m, d + k) for s, m, d in a.edges),
                      tuple((s + k, d + k) for s, d in a.epsilons))
    g = N.finalize(moved)
    assert (g.num_states, g.finals, g.edges) == (f.num_states, f.finals, f.edges)
