"""JSON number spellings constrained by value (:mod:`tractable.fsa.json_schema.number_spellings`).

Brute force: every RFC 8259 spelling up to 7 bytes over the digits 0 1 2 5 (and every one up to
4 bytes over all digits, both exponent letters) against a :class:`~decimal.Decimal` /
:class:`~fractions.Fraction` oracle of the documented language, for ~40 constraint sets and
several exponent bounds (small ones, so that the clamped scales are reached); exact inclusion
in the grammar by a product walk; ``json.dumps`` output; the spellings from the brief.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random
import re
from decimal import Decimal
from fractions import Fraction
from functools import cache

import pytest
from tractable.fsa import nfa as N
from tractable.fsa.json_schema.formats import number_range
from tractable.fsa.json_schema.number_spellings import (
    DEFAULT_MAX_EXPONENT,
    DEFAULT_MAX_EXPONENT_MULTIPLE,
    MAX_NUMBER_STATES,
    number_language,
)

D = Decimal
GRAMMAR = re.compile(r"(-?)(0|[1-9][0-9]*)(\.[0-9]+)?(?:[eE]([+-]?[0-9]+))?\Z")


def _digit_strings(n: int, digits: str, first: str | None = None):
    for p in itertools.product(first or digits, *[digits] * (n - 1)):
        yield "".join(p)


def spellings(maxlen: int, digits: str, marks: str) -> list[str]:
    """Every grammar spelling of at most ``maxlen`` bytes over ``digits``, sorted."""
    nz = "".join(d for d in digits if d != "0")
    out = []
    for sign in ("", "-"):
        for il in range(1, maxlen + 1 - len(sign)):
            ints = (["0"] if il == 1 else []) + list(_digit_strings(il, digits, nz))
            for i in ints:
                base = sign + i
                fracs = [""] + ["." + f for fl in range(1, maxlen - len(base))
                                for f in _digit_strings(fl, digits)]
                for f in fracs:
                    m = base + f
                    out.append(m)
                    for mark, sg in itertools.product(marks, ("", "+", "-")):
                        for el in range(1, maxlen - len(m) - len(sg)):
                            out.extend(m + mark + sg + x for x in _digit_strings(el, digits))
    return sorted(out)


@cache
def corpus() -> tuple:
    """(spelling, value, mantissa is zero, negative, scientific, exponent value) rows."""
    strings = sorted(set(spellings(7, "0125", "e")) | set(spellings(4, "0123456789", "eE")))
    rows = []
    for s in strings:
        m = GRAMMAR.match(s)
        assert m, s
        neg, ip, fp, ex = m.groups()
        mant = D(ip + (fp or ""))
        rows.append((s, D(s), mant == 0, neg == "-", len(ip) == 1 and ip != "0",
                     int(ex or 0)))
    return tuple(rows)


def expected(row, lo, ls, hi, us, integer, mults, E, E0) -> bool:
    """The documented language (module docstring of number_spellings), computed on values."""
    s, v, zero, neg, sci, e = row
    ms = list(mults) + ([D(1)] if integer else [])
    if abs(e) > (E if sci else E0) and not zero:
        # unbounded only when every number of the mantissa's sign satisfies the bounds
        if ms:
            return False
        if not neg and not ((lo is None or lo <= 0) and hi is None):
            return False
        if neg and not ((hi is None or hi >= 0) and lo is None):
            return False
    if lo is not None and (v < lo or (ls and v == lo)):
        return False
    if hi is not None and (v > hi or (us and v == hi)):
        return False
    if ms and not zero:
        f = Fraction(v)
        return all((f / Fraction(m)).denominator == 1 for m in ms)
    return True


def accepts_many(a: N.ByteNFA, strings) -> list[bool]:
    """Membership of sorted ``strings``: one subset step per byte not shared with the
    previous string's prefix (memoized subset transitions)."""
    f = N.finalize(a, reduce=False)
    out_edges: list[list[tuple[int, int]]] = [[] for _ in range(f.num_states)]
    for s, m, d in f.edges:
        out_edges[s].append((m, d))
    memo: dict = {}

    def step(cur: frozenset, byte: int) -> frozenset:
        key = (cur, byte)
        if key not in memo:
            bit = 1 << byte
            memo[key] = frozenset(d for s in cur for m, d in out_edges[s] if m & bit)
        return memo[key]

    stack = [frozenset([f.start])]  # stack[i]: states after the first i bytes of prev
    prev = b""
    res = []
    for text in strings:
        data = text.encode()
        k = 0
        n = min(len(prev), len(data), len(stack) - 1)
        while k < n and prev[k] == data[k]:
            k += 1
        del stack[k + 1:]
        for byte in data[k:]:
            stack.append(step(stack[-1], byte))
        res.append(bool(stack[-1] & f.finals))
        prev = data
    return res


def lang(*args, **kw) -> N.ByteNFA:
    a = number_language(*args, **kw)
    assert a is not None
    return a


def accepts(a: N.ByteNFA, text: str) -> bool:
    return N.matches(a, text.encode())


# ------------------------------------------------------------------ constraint sets

_POOL = [D(x) for x in ("0", "1", "-1", "2", "0.5", "-0.5", "2.5", "-2.5", "12", "-12", "100",
                        "0.01", "0.25", "-0.02", "1.5", "1000", "150", "-105", "5E+1", "0.125",
                        "21", "1.05", "-0.001")]
_MULTS = [D("0.5"), D(3), D("0.01"), D(7), D("2.5"), D("0.25")]


def _cases():
    fixed = [
        (None, False, None, False, False, []),
        (D(0), False, None, False, False, []),
        (D(0), True, None, False, False, []),
        (None, False, D(0), False, False, []),
        (None, False, D(0), True, False, []),
        (D(1), False, None, False, False, []),
        (D(0), False, D(100), False, False, []),
        (D(1), False, D(65535), False, True, []),
        (D(0), False, D(1000), False, False, [D("0.01")]),
        (D("0.5"), True, None, False, False, []),
        (None, False, None, False, True, []),
        (None, False, None, False, False, [D("0.5")]),
        (None, False, None, False, False, [D(3)]),
        (None, False, None, False, False, [D(7)]),
        (None, False, None, False, False, [D("0.01")]),
        (D(-1), False, D(1), False, False, []),
        (D("-2.5"), True, D("-0.5"), True, False, []),
        (D(2), False, D(2), False, False, []),
        (D(5), False, D(2), False, False, []),
        (D(-12), False, D(150), True, True, [D(3)]),
    ]
    rnd = random.Random(1234)
    out = list(fixed)
    while len(out) < 40:
        lo = rnd.choice(_POOL + [None])
        hi = rnd.choice(_POOL + [None])
        if lo is not None and hi is not None and lo > hi and rnd.random() < 0.8:
            lo, hi = hi, lo
        mults = rnd.sample(_MULTS, rnd.choice([0, 0, 1, 1, 2]))
        out.append((lo, rnd.random() < 0.4, hi, rnd.random() < 0.4, rnd.random() < 0.3, mults))
    return out


CASES = _cases()
# exponent bounds (max_exponent, nonscientific_max_exponent): small ones reach the clamps
BOUNDS = [(2, 0), (3, None), (2, 1), (1, None), (None, 0)]


def _bounds_of(i):
    return BOUNDS[i % len(BOUNDS)]


def _effective(case, E, E0):
    lo, ls, hi, us, integer, mults = case
    if E is None:
        E = DEFAULT_MAX_EXPONENT if not (integer or mults) else DEFAULT_MAX_EXPONENT_MULTIPLE
    return E, (E if E0 is None else min(E0, E))


@pytest.mark.parametrize("i", range(len(CASES)))
def test_brute_force(i):
    case = CASES[i]
    E, E0 = _bounds_of(i)
    a = lang(*case, max_exponent=E, nonscientific_max_exponent=E0)
    Ee, E0e = _effective(case, E, E0)
    rows = corpus()
    got = accepts_many(a, [r[0] for r in rows])
    bad = [r[0] for r, g in zip(rows, got) if g != expected(r, *case, Ee, E0e)]
    assert not bad, (case, E, E0, len(bad), bad[:10])
    assert any(got) == any(expected(r, *case, Ee, E0e) for r in rows)


def test_brute_force_all_mantissas_large_bound():
    """Every mantissa with an exponent (``nonscientific_max_exponent=None``)."""
    rows = corpus()
    for case in CASES[5:10] + CASES[16:20]:
        a = lang(*case, max_exponent=4, nonscientific_max_exponent=None)
        got = accepts_many(a, [r[0] for r in rows])
        bad = [r[0] for r, g in zip(rows, got) if g != expected(r, *case, 4, 4)]
        assert not bad, (case, bad[:10])


# ------------------------------------------------------------------ grammar inclusion

_G_FINAL = {2, 3, 5, 8}


def _g_step(g: int, c: int) -> int:
    """The RFC 8259 number grammar as a DFA over byte classes; -1 is dead."""
    ch = chr(c)
    if ch in "0123456789":
        cls = "0" if ch == "0" else "nz"
    else:
        cls = {"e": "e", "E": "e", "+": "s", "-": "s", ".": "."}.get(ch, "other")
    table = {
        0: {"-": 1, "0": 2, "nz": 3},
        1: {"0": 2, "nz": 3},
        2: {".": 4, "e": 6},
        3: {"0": 3, "nz": 3, ".": 4, "e": 6},
        4: {"0": 5, "nz": 5},
        5: {"0": 5, "nz": 5, "e": 6},
        6: {"s": 7, "0": 8, "nz": 8},
        7: {"0": 8, "nz": 8},
        8: {"0": 8, "nz": 8},
    }[g]
    if cls == "s" and "s" not in table:
        return table.get(ch, -1)  # "-" at the start
    return table.get(cls, -1)


def grammar_relation(a: N.ByteNFA) -> tuple[bool, bool]:
    """(language of ``a`` within the grammar, ``a`` equals the grammar), by a product walk of
    ``a``'s subset construction with the grammar DFA."""
    f = N.finalize(a)
    out_edges: list[list[tuple[int, int]]] = [[] for _ in range(f.num_states)]
    for s, m, d in f.edges:
        out_edges[s].append((m, d))
    start = (frozenset([f.start]), 0)
    seen = {start}
    todo = [start]
    inside = equal = True
    while todo:
        cur, g = todo.pop()
        fin = bool(cur & f.finals)
        if fin and g not in _G_FINAL:
            inside = False
        if cur and g == -1:
            inside = False
        if fin != (g in _G_FINAL) or (not cur and g != -1):
            equal = False
        for byte in range(256):
            bit = 1 << byte
            nxt = frozenset(d for s in cur for m, d in out_edges[s] if m & bit)
            ng = _g_step(g, byte) if g != -1 else -1
            if not nxt and ng == -1:
                continue
            key = (nxt, ng)
            if key not in seen:
                seen.add(key)
                todo.append(key)
    return inside, equal


@pytest.mark.parametrize("i", range(0, len(CASES), 3))
def test_within_grammar(i):
    E, E0 = _bounds_of(i)
    inside, _ = grammar_relation(lang(*CASES[i], max_exponent=E, nonscientific_max_exponent=E0))
    assert inside


def test_no_constraint_is_the_grammar():
    for E, E0 in [(None, 0), (3, None)]:
        inside, equal = grammar_relation(lang(None, False, None, False, False, [],
                                              max_exponent=E, nonscientific_max_exponent=E0))
        assert inside and equal


def test_grammar_walk_detects_extra_spellings():
    """The product walk fails on a language with a spelling outside the grammar."""
    a = lang(D(0), False, D(100), False, False)
    assert grammar_relation(a) == (True, False)
    assert grammar_relation(N.union(a, N.literal("1."))) == (False, False)


MALFORMED = ["", "-", "01", "00", "-01", "1.", ".5", "-.5", "+1", "1e", "1e+", "1E-", "--1",
             "NaN", "Infinity", "-Infinity", "1..2", "1.e5", "1e1.5", "0x1", " 1", "1 ", "1,5",
             "1e--1", "1ee1", "١"]


@pytest.mark.parametrize("case", CASES[:12])
def test_malformed_rejected(case):
    a = lang(*case)
    for s in MALFORMED:
        assert not accepts(a, s), (case, s)


# ------------------------------------------------------------------ what writers write


def _in(x, lo, ls, hi, us):
    d = D(repr(x)) if isinstance(x, float) else D(x)
    return ((lo is None or d > lo or (d == lo and not ls))
            and (hi is None or d < hi or (d == hi and not us)))


@pytest.mark.parametrize("lo,ls,hi,us", [
    (None, False, None, False),
    (D(0), False, None, False),
    (D(1), False, None, False),
    (D(0), False, D(100), False),
    (D("0.5"), True, None, False),
    (D(-1), True, D("1E-3"), False),
])
def test_json_dumps_floats_accepted(lo, ls, hi, us):
    a = lang(lo, ls, hi, us, False)
    rnd = random.Random(7)
    xs = [1e-05, 2000.0, -0.0, 0.0, 1.0, 19.9, 1e16, 1.5e-07, 5e-324, 1.7976931348623157e308,
          -1e-300, 100.0, 0.5, 1e-4, 6.02e23, 0.001]
    xs += [rnd.uniform(-2, 200) for _ in range(200)]
    xs += [math.ldexp(rnd.random(), rnd.randint(-1070, 1020)) * rnd.choice([1, -1])
           for _ in range(300)]
    n = 0
    for x in xs:
        text = json.dumps(x)
        assert accepts(a, text) == _in(x, lo, ls, hi, us), (text, lo, hi)
        n += _in(x, lo, ls, hi, us)
    assert n > 20


def test_json_dumps_integers_accepted():
    a = lang(D(1), False, D(65535), False, True)
    rnd = random.Random(3)
    for v in [1, 2, 65535, 65534, 100, 1000, 10000] + [rnd.randint(1, 65535) for _ in range(300)]:
        assert accepts(a, json.dumps(v)), v
        assert accepts(a, json.dumps(float(v))), v  # "5.0"
    for v in [0, -1, 65536, 100000]:
        assert not accepts(a, json.dumps(v)) and not accepts(a, json.dumps(float(v)))
    b = lang(None, False, None, False, True)  # integral floats Python writes with exponents
    for v in [1e16, 1.5e16, 1.2345678901234567e16, -2e16, 9.999999999999998e16]:
        assert accepts(b, json.dumps(v)), v


def test_brief_spellings():
    free = lang(None, False, None, False, False)
    for s in ["1.0", "0.0", "19.90", "2000.0", "1e-05", "1E+20", "-0", "2.5e3", "1e05",
              "1e+005", "-0.0e-0", "1E-0005"]:
        assert accepts(free, s), s
    a = lang(D(0), False, D(100), False, False)
    for s in ["1.0", "0.0", "19.90", "1e-05", "-0", "2.5e1", "1e+002", "100.000", "1.00e2",
              "-0.0", "0e999999"]:
        assert accepts(a, s), s
    for s in ["2000.0", "1E+20", "100.001", "1.0001e2", "1e3", "-1e-05", "-0.001"]:
        assert not accepts(a, s), s
    m = lang(D(0), False, D(1000), False, False, [D("0.01")])
    for s in ["19.90", "19.9", "1e-2", "1.5e-1", "1000.00", "0.10"]:
        assert accepts(m, s), s
    for s in ["19.901", "1e-3", "1.00001e2", "1000.01", "1.0001e3"]:
        assert not accepts(m, s), s


def test_integer_values():
    full = lang(None, False, None, False, True, nonscientific_max_exponent=None)
    sci = lang(None, False, None, False, True)
    for s in ["1.0", "1e2", "1.5e1", "-0", "100e-2", "-0.0", "12.50e1", "1.25e2", "0e-5"]:
        assert accepts(full, s), s
    for s in ["1.5", "1e-1", "1.55e1", "0.5", "-2.5", "1.25e1", "5e-1", "100e-3"]:
        assert not accepts(full, s) and not accepts(sci, s), s
    assert accepts(sci, "1.5e1") and accepts(sci, "1.0") and not accepts(sci, "100e-2")


def test_exponent_bound_and_unbounded_cases():
    m1 = lang(D(1), False, None, False, False)
    assert accepts(m1, "1e324") and accepts(m1, "1e+0324") and not accepts(m1, "1e325")
    assert not accepts(m1, "1e-1") and accepts(m1, "1.5e-0") and not accepts(m1, "9e-324")
    z = lang(D(0), False, None, False, False)  # the sign decides: any exponent
    assert accepts(z, "1e400") and accepts(z, "1e-99999") and not accepts(z, "-1e-99999")
    assert accepts(z, "-0e99999")
    assert not accepts(lang(D(0), True, None, False, False), "0e5")
    assert accepts(lang(None, False, D(5), False, False), "-1e400")
    assert not accepts(lang(None, False, D(-5), False, False), "-1e400")  # bounded: subset
    assert accepts(lang(None, False, D(-5), False, False), "-1e324")
    i = lang(D(0), False, None, False, True)
    assert accepts(i, "1e16") and not accepts(i, "1e17") and accepts(i, "0e17")
    assert accepts(lang(D(0), False, None, False, True, max_exponent=30), "1e30")
    big = lang(D(10) ** 400, False, None, False, False)  # beyond the exponent bound: empty
    assert not accepts(big, "1e401") and accepts(big, "1" + "0" * 400)
    assert not accepts(big, "9" * 400) and accepts(big, "1" + "0" * 400 + ".0")
    assert accepts(lang(None, False, D(10) ** 400, True, False), "9e324")


def test_huge_modulus_returns_none():
    assert number_language(None, False, None, False, False, [D("0.0000123457")]) is None
    assert number_language(None, False, None, False, False, [D("0.0000123457")],
                           canonical=True) is None
    assert number_language(None, False, None, False, False, [D("1.23")]) is not None
    assert number_language(None, False, None, False, False, [D("1.234")]) is None
    P = MAX_NUMBER_STATES // (DEFAULT_MAX_EXPONENT_MULTIPLE + 2) + 1
    assert number_language(None, False, None, False, False, [D(P)]) is None
    with pytest.raises(ValueError):
        number_language(None, False, None, False, False, [D(0)])


def test_canonical_delegates():
    a = lang(D(0), False, D(100), False, False, canonical=True)
    ref = N.finalize(number_range(D(0), False, D(100), False, False))
    for s in ["0", "1", "2.5", "100", "99.99", "1.0", "-0", "1e1", "100.5", "0.10"]:
        assert accepts(a, s) == accepts(ref, s), s
    assert accepts(a, "2.5") and not accepts(a, "1.0")
    i = lang(D(0), False, D(100), False, True, canonical=True)
    assert accepts(i, "25") and not accepts(i, "2.5") and not accepts(i, "25.0")
    m = lang(None, False, None, False, True, [D(3)], canonical=True)
    assert accepts(m, "9") and not accepts(m, "9.0") and not accepts(m, "10")


SIZES = [  # (case, states ceiling) for the typical schemas of the module docstring
    ((None, False, None, False, False, []), 9),
    ((D(0), False, None, False, False, []), 12),
    ((D(1), False, None, False, False, []), 18),
    ((D(0), False, D(100), False, False, []), 40),
    ((D(1), False, D(65535), False, True, []), 64),
    ((D(0), False, D(1000), False, False, [D("0.01")]), 53),
    ((D("0.5"), True, None, False, False, []), 30),
    ((None, False, None, False, True, []), 95),
]


@pytest.mark.parametrize("case,ceiling", SIZES)
def test_sizes(case, ceiling):
    a = lang(*case)
    assert a.num_states <= ceiling, (case, a.num_states, a.num_edges)


def test_accepts_many_matches_reference():
    a = lang(D("-2.5"), False, D(12), True, False, [D("0.5")], max_exponent=2)
    strings = sorted(r[0] for r in corpus()[::97])
    assert accepts_many(a, strings) == [accepts(a, s) for s in strings]
    assert bisect.bisect(strings, "1") > 0
