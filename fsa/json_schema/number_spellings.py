"""Every RFC 8259 spelling of the JSON numbers whose *value* satisfies a JSON Schema.

:func:`number_language` builds a byte automaton for the spellings

    ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?``

(``1``, ``1.0``, ``19.90``, ``-0``, ``1e-05``, ``1E+20``, ``2.5e3``, ``1e005`` ...) whose value
satisfies ``minimum``/``maximum`` (inclusive or exclusive), ``"type": "integer"`` (the value is
integral: ``1.0``, ``1e2``, ``1.5e1``, ``100e-2`` are integers) and ``multipleOf`` -- decided
exactly on the value (:class:`~decimal.Decimal` equality; ``-0`` is 0), never on the spelling.

What is exact: the exponent bounds
----------------------------------
Whether ``0.000...01e(n+1)`` is at least 1 relates a digit count to the exponent's value, which
is not regular, so the exponent value ``e`` (0 when absent; ``e05`` = ``e+005`` = 5) is bounded
where it matters.  A mantissa is *scientific* when its integer part is one nonzero digit
(``1``, ``2.5``, ``-9.75``).  The language accepted is exactly the spellings in the grammar whose
value satisfies the constraints and whose exponent has

* ``|e| <= max_exponent`` after a scientific mantissa,
* ``|e| <= nonscientific_max_exponent`` (default 0: ``12.5``, ``0.05``, ``100.0e0`` but not
  ``0.5e3`` or ``100e-2``; None: ``max_exponent``, every mantissa alike) after any other,

except that ``e`` is unbounded where it cannot change the verdict: the mantissa is zero
(``0.0e999`` is 0), or there is no ``integer``/``multipleOf`` and every number of the mantissa's
sign satisfies the bounds (``minimum: 0`` accepts ``1e400``; no constraint is the whole grammar).
Other spellings are a documented subset: a spelling whose value violates a constraint is never
accepted.

Why these bounds: Python's ``repr`` (so ``json.dumps``) and JavaScript write floats as plain
decimals or with a scientific mantissa (``1e-05``, ``1.5e+16``, ``5e-324``), as models do;
``max_exponent`` defaults to :data:`DEFAULT_MAX_EXPONENT` = 324, every finite double, because for
ranges the size hardly depends on it (bounds only constrain scientific mantissas through a
couple of exponent intervals).  With ``integer``/``multipleOf`` and no finite bound on the far
side, each exponent value past the digits of the divisor costs about five states (``1.234e3`` is
an integer because 3 >= 3 fraction digits: one exponent threshold per fraction length), so the
default there is :data:`DEFAULT_MAX_EXPONENT_MULTIPLE` = 16: integers up to 10**17 (RFC 8259
section 6: only integers within 2**53 are interoperable; Python writes ``1e+16``).  Letting
non-scientific mantissas carry exponents (``0.5e3``, ``100e-2``) multiplies the states by 7-14
at ``max_exponent`` 16 (one exponent threshold per mantissa scale), hence the default 0.

Construction
------------
A number is read as (sign, significant digits ``s``, scale ``q``): ``|x| = 0.s * 10**q``.  A
bound ``c = 0.t * 10**p`` compares by scale first and by digits only at equal scale, and the
digit comparison ``s`` vs ``t`` does not depend on where the decimal point is.  So the mantissa
is read by a small tracker -- sign, grammar phase, mantissa scale ``L`` (integer digit count, or
minus the leading fraction zeros), the comparison state against each bound's digits -- and at
its end every constraint becomes an *interval of exponent values*: ``x >= c`` iff
``e >= p - L (+1 when s < t)``.  ``multipleOf m = P * 10**-D`` (``integer`` is ``m = 1``;
several are combined into their least common multiple) becomes ``e >= need(r) - D - l``, where
``l`` is the place of the mantissa's last nonzero digit (guessed nondeterministically when that
digit is read), ``r`` the significant digits modulo ``P`` and ``need(r)`` the least ``g >= 0``
with ``P | r * 10**g``.  The exponent part is one shared automaton per interval (digit states
memoized by their residual language, leading zeros a loop).  Scales far from every bound are
clamped (past them the interval no longer changes), tracker states whose interval can no longer
be nonempty are dropped, and bisimilar states are merged.

Sizes (states/edges after :func:`~.nfa.finalize`, default bounds; canonical in brackets): no
constraint 9/17 [13/23]; ``minimum 0`` 12/21 [6/10]; ``minimum 1`` 18/37 [8/12];
``0 <= x <= 100`` 40/83 [8/13]; integer 1..65535 64/147 [13/18]; ``multipleOf 0.01``,
0..1000 53/110 [12/18]; ``exclusiveMinimum 0.5`` 30/69 [11/18]; integer 95/201 [6/8];
``multipleOf 7`` 203/1143 [18/122].

``canonical=True`` returns the canonical language of :mod:`.formats` instead (one spelling
per value, no exponent).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import Decimal

from ..errors import InvalidArgumentError
from ..nfa import ByteNFA, finalize, intersect
from .formats import multiple_of, number_nfa, number_range

__all__ = [
    "DEFAULT_MAX_EXPONENT",
    "DEFAULT_MAX_EXPONENT_MULTIPLE",
    "MAX_NUMBER_STATES",
    "number_language",
]

#: Default bound on ``|e|`` after a scientific mantissa: every finite double (``5e-324``).
DEFAULT_MAX_EXPONENT = 324
#: ... with ``integer`` or ``multipleOf``, where each unit costs about five states.
DEFAULT_MAX_EXPONENT_MULTIPLE = 16

#: Most mantissa-tracker states built before :func:`number_language` gives up (returns None).
MAX_NUMBER_STATES = 20_000

_ZERO, _DOT, _MINUS, _PLUS = 0x30, 0x2E, 0x2D, 0x2B
_EXP = (1 << 0x65) | (1 << 0x45)  # e E
_DIGITS = tuple(range(10))

# grammar phases of the mantissa; *1: the integer part is one nonzero digit ("scientific")
_START, _SIGNED, _INT0, _INT1, _INT, _POINT1, _POINT, _FRAC1, _FRAC = range(9)
_ENDS = frozenset((_INT0, _INT1, _INT, _FRAC1, _FRAC))
_SCI = frozenset((_INT1, _POINT1, _FRAC1))
_FRACS = frozenset((_POINT1, _POINT, _FRAC1, _FRAC))
_AFTER_DIGIT = {_INT1: _INT, _INT: _INT, _POINT1: _FRAC1, _FRAC1: _FRAC1, _POINT: _FRAC,
                _FRAC: _FRAC}


def _sig_digits(c: Decimal) -> tuple[tuple[int, ...], int]:
    """``c > 0`` as ``0.t * 10**p``: (t without trailing zeros, p).  Exact (no context)."""
    _, digits, exp = c.as_tuple()
    t = list(digits)
    while t[-1] == 0:
        t.pop()
        exp += 1
    return tuple(t), exp + len(t)


def _coef_exp(c: Decimal) -> tuple[int, int]:
    """``c > 0`` as ``P * 10**x`` with P not divisible by 10.  Exact (no context)."""
    _, digits, x = c.as_tuple()
    P = int("".join(map(str, digits)))
    while P % 10 == 0:
        P //= 10
        x += 1
    return P, x


def _lcm(ms: Iterable[Decimal]) -> tuple[int, int] | None:
    """The least common multiple of positive decimals as ``(P, D)``: ``P * 10**-D``."""
    parts = [_coef_exp(m) for m in ms]
    if not parts:
        return None
    x0 = min(x for _, x in parts)
    P = 1
    for p, x in parts:
        P = math.lcm(P, p * 10 ** (x - x0))
    while P % 10 == 0:
        P //= 10
        x0 += 1
    return P, -x0


def _check(d: Decimal | None, what: str) -> None:
    if d is not None and (not isinstance(d, Decimal) or not d.is_finite()):
        raise InvalidArgumentError(f"{what} must be a finite Decimal, got {d!r}")


class _Spec:
    """The constraints, split by the sign of a nonzero mantissa into magnitude bounds, and the
    mantissa tracker (an NFA over tracker states, explored by :func:`_build`)."""

    def __init__(self, lower, lstrict, upper, ustrict, mult, E, E_other):
        self.E = E  # exponent bound after a scientific mantissa ([1-9](.[0-9]+)?)
        self.E0 = E_other  # ... after any other nonzero mantissa (E0 <= E)
        zero = Decimal(0)
        self.zero_ok = (lower is None or lower < zero or (lower == zero and not lstrict)) and (
            upper is None or upper > zero or (upper == zero and not ustrict))
        # per sign (False: +, True: -): None = no nonzero value allowed, else a list of
        # (greater: bool, t, p, strict) bounds on the magnitude y = |x| > 0
        pos: list | None = []
        if lower is not None and lower > zero:
            pos.append((True, *_sig_digits(lower), lstrict))
        if upper is not None:
            if upper <= zero:
                pos = None
            else:
                pos.append((False, *_sig_digits(upper), ustrict))
        neg: list | None = []
        if lower is not None:
            if lower >= zero:
                neg = None
            else:
                neg.append((False, *_sig_digits(lower.copy_negate()), lstrict))
        if neg is not None and upper is not None and upper < zero:
            neg.append((True, *_sig_digits(upper.copy_negate()), ustrict))
        self.mags = {False: pos, True: neg}
        ps = [p for _, _, p, _ in (pos or []) + (neg or [])]
        # Scales L <= lmin or >= lmax (never 1, a scientific mantissa's) decide every bound
        # alone for exponents within E0: the interval is then empty or [-E0, E0].
        self.lmin = min(min(ps, default=0) - E_other - 2, 0)
        self.lmax = max(max(ps, default=0) + E_other + 2, 2)
        self.mult = mult
        if mult is not None:
            P, D = mult
            self.P, self.D = P, D
            g_max = 0  # max(a, b) for P = 2**a * 5**b * Q: 10**g_max absorbs the 2s and 5s
            while P % 2 ** (g_max + 1) == 0 or P % 5 ** (g_max + 1) == 0:
                g_max += 1
            self.need = []
            for r in range(P):
                g = next((g for g in range(g_max + 1) if (r * 10**g) % P == 0), None)
                self.need.append(g)

    # state: (phase, neg, sig, rng, mul)
    #   sig: a nonzero digit was read
    #   rng: None when the sign's magnitude is unconstrained; else (L, cmps) with cmps None
    #        before the first significant digit; cmps[i]: "lt" / "gt" / k (equal to t[:k])
    #   mul: None without multipleOf; ("run", R, f): digits so far mod P, f fraction digits;
    #        ("tail", T): the last nonzero digit was read, e >= T is required.

    def start(self):
        return (_START, False, False, None, None if self.mult is None else ("run", 0, 0))

    def step(self, st, byte):
        """Successor tracker states of ``st`` on ``byte`` (a list; NFA guesses)."""
        phase, neg, sig, rng, mul = st
        if byte == _MINUS:
            if phase != _START:
                return []
            return [(_SIGNED, True, False, None if not self.mags[True] else (0, None), mul)]
        if byte == _DOT:
            if phase not in (_INT0, _INT1, _INT):
                return []
            return [({_INT1: _POINT1, _INT: _POINT}.get(phase, _POINT), neg, sig, rng, mul)]
        d = byte - _ZERO
        if phase == _START:
            rng = None if not self.mags[False] else (0, None)
            phase = _SIGNED
        if phase == _SIGNED:
            if d == 0:
                return [(_INT0, neg, False, rng, mul)]
            nphase = _INT1
        elif phase == _INT0:
            return []
        else:
            nphase = _AFTER_DIGIT[phase]
        frac = nphase in _FRACS
        if d and self.mags[neg] is None:
            return []  # no nonzero number of this sign is allowed
        nsig = sig or d != 0
        if rng is not None:
            L, cmps = rng
            if cmps is None:
                if d == 0:  # a leading fraction zero
                    L = max(L - 1, self.lmin)
                else:
                    if not frac:
                        L = 1
                    cmps = tuple(self._cmp(neg, k, 0, d) for k in range(len(self.mags[neg])))
            else:
                if not frac:
                    L = min(L + 1, self.lmax)
                cmps = tuple(self._cmp(neg, k, c, d) for k, c in enumerate(cmps))
            if cmps is not None and (L <= self.lmin or L >= self.lmax):
                cmps = ("gt",) * len(cmps)  # the scale decides every bound
            rng = (L, cmps)
        muls = [mul]
        if mul is not None:
            muls = []
            E = self.E
            if mul[0] == "tail":
                if d == 0:
                    T = mul[1] if frac else max(mul[1] - 1, -E)
                    muls.append(("tail", T))
            else:
                _, R, f = mul
                R = (10 * R + d) % self.P
                if frac:
                    f += 1
                if d:
                    g = self.need[R]
                    if g is not None:
                        T = g - self.D + (f if frac else 0)
                        if T <= E:
                            muls.append(("tail", max(T, -E)))
                    if not frac or f + 1 - self.D <= E:
                        muls.append(("run", R, f))
                elif nsig:
                    if not frac or f + 1 - self.D <= E:
                        muls.append(("run", R, f))
                else:  # leading zeros of a zero-so-far mantissa: kept (it may stay zero)
                    muls.append(("run", R, min(f, E + self.D + 1)))
        out = []
        for m in muls:
            s = (nphase, neg, nsig, rng, m)
            if not nsig or self._possible(s):
                out.append(s)
        return out

    def _cmp(self, neg, k, c, d):
        """Comparison state ``c`` against bound ``k``'s digits t after digit ``d``."""
        if c in ("lt", "gt"):
            return c
        t = self.mags[neg][k][1]
        if c < len(t):
            return "lt" if d < t[c] else "gt" if d > t[c] else c + 1
        return "gt" if d else c

    def _bounds(self, neg, L, cmps, E):
        lo, hi = -E, E
        for (greater, t, p, strict), c in zip(self.mags[neg], cmps):
            if c == "gt":
                rel = 1
            elif c == "lt" or c < len(t):
                rel = -1
            else:
                rel = 0
            if greater:  # y >= c (strict: >): q > p, or q == p and s >= t (>)
                ok = rel > 0 or (rel == 0 and not strict)
                lo = max(lo, p - L + (0 if ok else 1))
            else:
                ok = rel < 0 or (rel == 0 and not strict)
                hi = min(hi, p - L - (0 if ok else 1))
        return lo, hi

    def _possible(self, st) -> bool:
        """False only when no continuation of ``st`` (a significant digit was read) is
        accepted: an optimistic interval of exponents is empty."""
        phase, neg, sig, rng, mul = st
        E = self.E if phase in _SCI else self.E0  # only shrinks with more digits
        lo, hi = -E, E
        frac = phase in _FRACS
        if rng is not None and rng[1] is not None:
            L = rng[0]
            for greater, _, p, _ in self.mags[neg]:
                if greater:
                    if frac:
                        lo = max(lo, p - L)
                else:
                    hi = min(hi, p - L)
        if mul is not None and frac:
            if mul[0] == "tail":
                lo = max(lo, mul[1])
            else:
                lo = max(lo, mul[2] + 1 - self.D)
        return lo <= hi

    def interval(self, st):
        """Exponent values allowed after the mantissa ``st``: None (nothing) or (lo, hi) with
        None for an unbounded end."""
        phase, neg, sig, rng, mul = st
        if phase not in _ENDS:
            return None
        if not sig:
            return (None, None) if self.zero_ok else None
        if self.mags[neg] is None:
            return None
        E = self.E if phase in _SCI else self.E0
        lo = hi = None
        if rng is not None:
            lo, hi = self._bounds(neg, rng[0], rng[1], E)
        if mul is not None:
            if mul[0] != "tail":
                return None
            lo = max(mul[1], -E) if lo is None else max(lo, mul[1])
            hi = E if hi is None else hi
        if lo is not None and hi is not None and lo > hi:
            return None
        return lo, hi


class _Out:
    """An NFA written state by state."""

    def __init__(self) -> None:
        self.n = 0
        self.edges: list[tuple[int, int, int]] = []
        self.finals: set[int] = set()

    def state(self) -> int:
        self.n += 1
        return self.n - 1

    def edge(self, s: int, mask: int, d: int) -> None:
        self.edges.append((s, mask, d))


class _Exponents:
    """Exponent parts ``[eE][+-]?[0-9]+`` whose value lies in an interval, sharing states."""

    def __init__(self, out: _Out) -> None:
        self.out = out
        self.entries: dict = {}
        self.signed: dict = {}
        self.zeros: dict = {}
        self.digits: dict = {}

    def after_e(self, lo: int | None, hi: int | None) -> int:
        """The state after ``e``/``E`` for exponent values in [lo, hi] (None: unbounded)."""
        key = (lo, hi)
        if key in self.entries:
            return self.entries[key]
        o = self.out
        s = self.entries[key] = o.state()
        pos = None if hi is not None and hi < 0 else (max(lo or 0, 0), hi)
        neg = None if lo is not None and lo > 0 else (
            0 if hi is None else max(-hi, 0), None if lo is None else -lo)
        if pos is not None:
            o.edge(s, 1 << _PLUS, self._signed(pos))
            self._first_digit(s, *pos)
        if neg is not None:
            o.edge(s, 1 << _MINUS, self._signed(neg))
        return s

    def _signed(self, rng) -> int:
        if rng not in self.signed:
            s = self.signed[rng] = self.out.state()
            self._first_digit(s, *rng)
        return self.signed[rng]

    def _first_digit(self, s: int, a: int, b: int | None) -> None:
        """Edges from ``s`` for digit strings (leading zeros allowed) with value in [a, b]."""
        z = self.zeros.get((a, b))
        if z is None:
            z = self.zeros[(a, b)] = self.out.state()
            if a == 0:
                self.out.finals.add(z)
            self._first_digit(z, a, b)
        self.out.edge(s, 1 << _ZERO, z)
        self._digit_edges(s, a, b, 0)

    def _digit_edges(self, s: int, a: int, b: int | None, v: int) -> None:
        by_dst: dict[int, int] = {}
        for d in range(1 if v == 0 else 0, 10):
            t = self._value(a, b, 10 * v + d)
            if t is not None:
                by_dst[t] = by_dst.get(t, 0) | 1 << (_ZERO + d)
        for t, m in by_dst.items():
            self.out.edge(s, m, t)

    def _value(self, a: int, b: int | None, v: int) -> int | None:
        """The state after significant digits of value ``v`` >= 1, shared by residual."""
        key = _residual(a, b, v)
        if key is None:
            return None
        s = self.digits.get(key)
        if s is None:
            s = self.digits[key] = self.out.state()
            if a <= v and (b is None or v <= b):
                self.out.finals.add(s)
            self._digit_edges(s, a, b, v)
        return s


def _residual(a: int, b: int | None, v: int):
    """The digit strings ``w`` with ``a <= int(str(v) + w) <= b``, as per-length intervals
    (and whether every longer string is in); None when there are none."""
    parts = []
    m = 0
    while True:
        base = v * 10**m
        if b is None and base >= a:
            return tuple(parts), True
        if b is not None and base > b:
            break
        lo = max(a - base, 0)
        hi = 10**m - 1 if b is None else min(b - base, 10**m - 1)
        parts.append((lo, hi) if lo <= hi else None)
        m += 1
    if all(p is None for p in parts):
        return None
    return tuple(parts), False


def _build(spec: _Spec) -> ByteNFA | None:
    out = _Out()
    exps = _Exponents(out)
    first = spec.start()
    ids = {first: out.state()}
    todo = [first]
    bytes_ = [_MINUS, _DOT] + [_ZERO + d for d in _DIGITS]
    while todo:
        st = todo.pop()
        src = ids[st]
        by_dst: dict[int, int] = {}
        for byte in bytes_:
            for nxt in spec.step(st, byte):
                dst = ids.get(nxt)
                if dst is None:
                    if len(ids) >= MAX_NUMBER_STATES:
                        return None
                    dst = ids[nxt] = out.state()
                    todo.append(nxt)
                by_dst[dst] = by_dst.get(dst, 0) | 1 << byte
        for dst, m in by_dst.items():
            out.edge(src, m, dst)
        iv = spec.interval(st)
        if iv is not None:
            lo, hi = iv
            if (lo is None or lo <= 0) and (hi is None or hi >= 0):
                out.finals.add(src)
            out.edge(src, _EXP, exps.after_e(lo, hi))
    return _bisimulation_quotient(out.n, out.finals, out.edges)


def _bisimulation_quotient(n: int, finals: set[int], edges: list) -> ByteNFA:
    """Merge bisimilar states (coarsest partition refinement; exact: bisimilar states have
    the same right language).  Unlike :func:`.nfa.reduce_states` it merges equivalent cycles
    (e.g. the clamped scale counters of both signs)."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for s, m, d in edges:
        out[s].append((m, d))
    block = [1 if s in finals else 0 for s in range(n)]
    count = len(set(block))
    while True:
        sigs: dict = {}
        new = []
        for s in range(n):
            row: dict[int, int] = {}
            for m, d in out[s]:
                row[block[d]] = row.get(block[d], 0) | m
            new.append(sigs.setdefault((block[s], frozenset(row.items())), len(sigs)))
        block = new
        if len(sigs) == count:
            break
        count = len(sigs)
    merged: dict[tuple[int, int], int] = {}
    for s, m, d in edges:
        key = (block[s], block[d])
        merged[key] = merged.get(key, 0) | m
    return ByteNFA(count, block[0], frozenset(block[s] for s in finals),
                   tuple((s, m, d) for (s, d), m in merged.items()))


def number_language(
    lower: Decimal | None,
    lower_strict: bool,
    upper: Decimal | None,
    upper_strict: bool,
    integer: bool,
    multiples: Iterable[Decimal] = (),
    max_exponent: int | None = None,
    *,
    nonscientific_max_exponent: int | None = 0,
    canonical: bool = False,
) -> ByteNFA | None:
    """JSON number spellings whose value x has ``lower <(=) x <(=) upper`` (None: unbounded;
    ``*_strict``: exclusive), is integral when ``integer``, and is an integer multiple of every
    ``m`` in ``multiples`` (each > 0).  Finalized (epsilon-free, trimmed, reduced).

    Exact on the value of every spelling whose exponent value is within ``max_exponent``
    (default :data:`DEFAULT_MAX_EXPONENT`, or :data:`DEFAULT_MAX_EXPONENT_MULTIPLE` with
    ``integer``/``multipleOf``) after a scientific mantissa (``[1-9](.[0-9]+)?``) and within
    ``nonscientific_max_exponent`` (None: ``max_exponent``) after another, and of any exponent
    where it cannot change the verdict; see the module docstring.  ``canonical=True``: the
    canonical language of :mod:`.formats` (:func:`~.formats.number_range` intersected
    with :func:`~.formats.multiple_of`) instead, the exponent bounds unused.

    Returns None when the automaton would be too large: more than :data:`MAX_NUMBER_STATES`
    mantissa-tracker states (about ``P * (max_exponent + D)`` for ``multipleOf P * 10**-D``,
    several divisors combined into their least common multiple), or, with ``canonical``, when
    :func:`~.formats.multiple_of` returns None (``P * (2 D + 1) > 20000``).
    """
    multiples = list(multiples)
    for what, d in (("lower", lower), ("upper", upper)):
        _check(d, what)
    for m in multiples:
        _check(m, "multipleOf")
        if m <= 0:
            raise InvalidArgumentError(f"multipleOf must be > 0, got {m!r}")
    if canonical:
        if lower is None and upper is None:
            a = number_nfa(integer)
        else:
            a = number_range(lower, lower_strict, upper, upper_strict, integer)
        for m in multiples:
            mo = multiple_of(m, integer)
            if mo is None:
                return None
            a = intersect(a, mo)
        return finalize(a)
    if integer:
        multiples.append(Decimal(1))
    mult = _lcm(multiples)
    E = max_exponent
    if E is None:
        E = DEFAULT_MAX_EXPONENT if mult is None else DEFAULT_MAX_EXPONENT_MULTIPLE
    E0 = E if nonscientific_max_exponent is None else nonscientific_max_exponent
    if E < 0 or E0 < 0:
        raise InvalidArgumentError("exponent bounds must be >= 0")
    E0 = min(E0, E)
    if mult is not None and mult[0] * max(E + mult[1] + 2, 1) > MAX_NUMBER_STATES:
        return None
    spec = _Spec(lower, lower_strict, upper, upper_strict, mult, E, E0)
    a = _build(spec)
    return None if a is None else finalize(a)
