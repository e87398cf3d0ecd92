"""Regular automata for JSON numbers (canonical form, ranges, ``multipleOf``) and string formats.

Everything here is built from the :mod:`.nfa` combinators (or, for the digit-comparison and
modular automata, written out state by state); nothing determinizes.

Canonical numbers
-----------------
The JSON Schema compiler generates numbers in one canonical decimal form, so that every number
*value* has exactly one serialization (see :func:`canonical_number`)::

    integer  :  0 | -?[1-9][0-9]*
    fraction :  -?(0|[1-9][0-9]*)\\.[0-9]*[1-9]          (never "-0", never trailing zeros)

No exponent, no ``-0``, no ``1.0`` (an integral value is written as an integer: JSON Schema treats
``1.0`` as an integer).  Comparisons with decimal bounds are then comparisons of digit strings,
which are regular: :func:`number_range` builds them exactly, with O(digits of the bounds) states.
:func:`multiple_of` is the modular automaton over the digits (exact for any decimal divisor).

String formats
--------------
:func:`format_nfa` gives the *decoded* string content of a format (no quotes, no escapes): valid
UTF-8, non-ASCII in ``iri``, ``iri-reference``, ``uri-template``, ``json-pointer``,
``relative-json-pointer`` and ``regex``, and the last three also contain ``"``, ``\\`` and control
characters.  :mod:`.json_schema` rewrites each of those (single ASCII bytes, never inside a
multi-byte sequence) into its JSON escape.  Each format is exact where the RFC grammar is regular
and small, and otherwise a documented **subset** (never a superset); a subset also follows what
the checkers of ``jsonschema`` (with its ``format-nongpl`` extras) refuse of a grammar, so that
no accepted string fails format validation:

* ``date`` (RFC 3339 full-date): exact, days per month and leap years (Feb 29 only in leap years).
* ``time`` / ``date-time`` (RFC 3339): exact, except that a leap second ``:60`` is accepted only as
  ``23:59:60`` with offset ``Z``/``z``/``+00:00``/``-00:00`` (subset).
* ``duration`` (RFC 3339 appendix A): exact.
* ``email``: RFC 5321 ``Mailbox`` with dot-atom or quoted-string local part and a hostname,
  ``[IPv4]`` or ``[IPv6:...]`` domain (subset: the hostname subset below, no length limits).
* ``hostname`` (RFC 1123): labels ``[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?``, no trailing dot; the
  253-character total is guaranteed by allowing at most 8 labels of at most
  ``min(63, (254 - k) // k)`` characters for ``k`` labels; labels with ``--`` in positions 3-4
  (IDNA A-labels such as ``xn--...``, whose Punycode is not validated here) are refused (subset).
* ``ipv4``: exact dotted quad without leading zeros.  ``ipv6``: exact RFC 4291 text forms (``::``
  compression, embedded IPv4 tail), no zone id.
* ``uuid``: exact 8-4-4-4-12 hex digits, either case.
* ``uri`` / ``uri-reference`` (RFC 3986 ``URI`` / ``URI-reference``): exact, except that an
  ``IPvFuture`` host literal takes a lowercase ``v`` only, as ``rfc3986-validator`` does (subset).
* ``iri`` / ``iri-reference`` (RFC 3987): as ``uri`` (lowercase ``v``), and where
  ``rfc3987-syntax`` (the checker) is narrower than RFC 3987: ``ucschar``/``iprivate`` from the
  Basic Multilingual Plane only, and IPv6 host literals with all eight groups written or ``::``
  standing for exactly one group (``[::1]`` is refused) (subset).
* ``json-pointer`` (RFC 6901): exact (any Unicode scalar value; ``~`` only in ``~0``/``~1``).
* ``relative-json-pointer`` (draft-handrews-relative-json-pointer-01): a non-negative integer
  then ``#`` or a JSON pointer, exact except that the integer is ``0`` or ``[1-9]+0?``: the
  checker refuses a ``0`` followed by a digit (``100``) (subset).  No index manipulation
  (``0+1``, a later draft), which the checker refuses too.
* ``uri-template`` (RFC 6570 level 4, with erratum 6937: ``'`` is a literal): exact except for
  what the ``uri-template`` package refuses (a variable name starting with ``%XX``, a prefix
  ``:N`` of four digits) and the reserved operators ``= , ! @ |`` (subset).
* ``regex`` (ECMA-262): nesting parentheses is not regular; a subset valid both as ECMA-262 (with
  or without the ``u`` flag) and for Python's ``re.compile`` (the checker): groups nested at
  most :data:`~.formats_regex.REGEX_MAX_DEPTH` deep, no lookbehind, named groups or
  backreferences, counts up to 999 with a simplified ``n <= m`` test for ``{n,m}`` (see
  :mod:`.formats_regex`) (subset).

The URI family is built in :mod:`.formats_uri`, ``regex`` in :mod:`.formats_regex`.
"""

from __future__ import annotations

import math
from decimal import Decimal
from functools import cache

from ..errors import InvalidArgumentError, InvalidArgumentTypeError
from ..nfa import (
    ByteNFA,
    byteset,
    codepoints,
    concat,
    intersect,
    literal,
    mask_of,
    nothing,
    optional,
    plus,
    repeat,
    star,
    union,
)
from ._builder import _Builder
from .formats_regex import regex_syntax
from .formats_uri import ipv4 as _ipv4
from .formats_uri import ipv6 as _ipv6
from .formats_uri import uri as _uri
from .formats_uri import uri_template as _uri_template

__all__ = [
    "FORMATS",
    "canonical_number",
    "number_nfa",
    "number_range",
    "multiple_of",
    "format_nfa",
    "to_decimal",
]

_DIGIT = mask_of(range(0x30, 0x3A))
_NZ = mask_of(range(0x31, 0x3A))


def _digits(lo: int, hi: int) -> int:
    return mask_of(range(0x30 + lo, 0x31 + hi))


def to_decimal(x) -> Decimal:
    """The exact decimal value a JSON number denotes (floats by their shortest repr)."""
    if isinstance(x, bool):
        raise InvalidArgumentTypeError("bool is not a number")
    if isinstance(x, int):
        return Decimal(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            raise InvalidArgumentError(f"{x!r} is not a JSON number")
        return Decimal(repr(x))
    if isinstance(x, Decimal):
        return x
    raise InvalidArgumentTypeError(f"not a number: {x!r}")


def canonical_number(x) -> str:
    """The canonical serialization of a JSON number (see the module docstring).

    ``1.0 -> "1"``, ``-0.0 -> "0"``, ``1e-05 -> "0.00001"``, ``2.50 -> "2.5"``.
    """
    d = to_decimal(x)
    if d == 0:
        return "0"
    s = format(d, "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def _split(d: Decimal) -> tuple[str, str]:
    """Nonnegative decimal -> (integer digits, fraction digits without trailing zeros)."""
    s = canonical_number(d)
    if "." in s:
        i, f = s.split(".")
        return i, f
    return s, ""


# canonical pieces
_FRAC = concat(literal("."), star(byteset(_DIGIT)), byteset(_NZ))  # \.[0-9]*[1-9]
_INT_NONNEG = union(literal("0"), concat(byteset(_NZ), star(byteset(_DIGIT))))


@cache
def number_nfa(integer: bool) -> ByteNFA:
    """All canonical numbers (``integer=True``: all canonical integers)."""
    return number_range(None, False, None, False, integer)


def _cmp_nonneg(bound: Decimal, strict: bool, integer: bool, greater: bool) -> ByteNFA:
    """Canonical nonnegative numbers x with x >= bound (``greater``) or x <= bound
    (``strict``: > / <).  ``bound`` >= 0.  O(digits of bound) states."""
    bi, bf = _split(bound)
    k = len(bi)
    b = _Builder()
    start = b.state()
    endint = b.state()  # integer part complete; optional canonical fraction follows
    b.finals.add(endint)
    if not integer:
        for f in b.embed(_FRAC, endint):
            b.finals.add(f)
    # free[m]: m more digits, then endint
    free = [endint]
    for _ in range(k):
        s = b.state()
        b.edge(s, _DIGIT, free[-1])
        free.append(s)
    if greater:
        # longer integer part: [1-9] [0-9]{k,}
        s = b.state()
        b.edge(start, _NZ, s)
        loop = b.state()
        prev = s
        for _ in range(k - 1):
            t = b.state()
            b.edge(prev, _DIGIT, t)
            prev = t
        b.edge(prev, _DIGIT, loop)
        b.edge(loop, _DIGIT, loop)
        b.eps.append((loop, endint))
    else:
        # shorter integer part: lengths 1 .. k-1
        if k >= 2:
            b.edge(start, 1 << 0x30, endint)  # "0"
            s = b.state()
            b.edge(start, _NZ, s)
            b.eps.append((s, endint))
            prev = s
            for _ in range(k - 2):
                t = b.state()
                b.edge(prev, _DIGIT, t)
                b.eps.append((t, endint))
                prev = t
    # same length, first difference at i
    tight = start
    for i in range(k):
        d = int(bi[i])
        if greater:
            lo, hi = d + 1, 9
        else:
            lo, hi = (1 if (i == 0 and k > 1) else 0), d - 1
        if lo <= hi:
            b.edge(tight, _digits(lo, hi), free[k - i - 1])
        nxt = b.state()
        b.edge(tight, 1 << (0x30 + d), nxt)
        tight = nxt
    # tight: integer part equal to bi
    eq_int = tight
    if greater:
        if not bf:
            if not strict:
                b.finals.add(eq_int)
            if not integer:
                for f in b.embed(_FRAC, eq_int):  # any fraction > 0
                    b.finals.add(f)
        elif not integer:
            t = b.chain(eq_int, ".")
            for j in range(len(bf)):
                d = int(bf[j])
                if d < 9:  # greater digit, then canonical tail
                    g = b.state()
                    b.edge(t, _digits(d + 1, 9), g)
                    b.finals.add(g)
                    for f in b.embed(concat(star(byteset(_DIGIT)), byteset(_NZ)), g):
                        b.finals.add(f)
                nxt = b.state()
                b.edge(t, 1 << (0x30 + d), nxt)
                t = nxt
            if not strict:
                b.finals.add(t)
            for f in b.embed(concat(star(byteset(_DIGIT)), byteset(_NZ)), t):
                b.finals.add(f)
    else:
        if bf or not strict:
            b.finals.add(eq_int)
        if bf and not integer:
            t = b.chain(eq_int, ".")
            for j in range(len(bf)):
                d = int(bf[j])
                if d >= 1:  # smaller digit then canonical tail
                    g0 = b.state()  # after a digit in [0, d-1]
                    b.edge(t, _digits(0, d - 1), g0)
                    for f in b.embed(concat(star(byteset(_DIGIT)), byteset(_NZ)), g0):
                        b.finals.add(f)
                    if d >= 2:
                        g1 = b.state()
                        b.edge(t, _digits(1, d - 1), g1)
                        b.finals.add(g1)
                nxt = b.state()
                b.edge(t, 1 << (0x30 + d), nxt)
                if j < len(bf) - 1 and d != 0:
                    b.finals.add(nxt)  # proper canonical prefix of bf: smaller
                t = nxt
            if not strict:
                b.finals.add(t)
    return b.build(start)


def _all_nonneg(integer: bool) -> ByteNFA:
    return _INT_NONNEG if integer else union(_INT_NONNEG, concat(_INT_NONNEG, _FRAC))


def number_range(
    lower: Decimal | None,
    lower_strict: bool,
    upper: Decimal | None,
    upper_strict: bool,
    integer: bool,
) -> ByteNFA:
    """Canonical numbers (``integer``: integers) x, lower <(=) x <(=) upper; None = unbounded."""
    zero = Decimal(0)
    # x >= 0
    if upper is not None and (upper < zero or (upper == zero and upper_strict)):
        nonneg = nothing()
    else:
        if lower is None or lower < zero or (lower == zero and not lower_strict):
            nonneg = _all_nonneg(integer)
        else:
            nonneg = _cmp_nonneg(lower, lower_strict, integer, greater=True)
        if upper is not None:
            nonneg = intersect(nonneg, _cmp_nonneg(upper, upper_strict, integer, greater=False))
    # x < 0, written "-" y with y > 0
    if lower is not None and lower >= zero:
        neg = nothing()
    else:
        y = _cmp_nonneg(zero, True, integer, greater=True)
        if lower is not None:
            y = intersect(y, _cmp_nonneg(-lower, lower_strict, integer, greater=False))
        if upper is not None and upper < zero:
            y = intersect(y, _cmp_nonneg(-upper, upper_strict, integer, greater=True))
        neg = concat(literal("-"), y)
    return union(nonneg, neg)


#: Largest modulus (numerator of the divisor) times (fraction digits + 1) built as an automaton.
MAX_MODULUS_STATES = 20_000


def multiple_of(m: Decimal, integer: bool) -> ByteNFA | None:
    """Canonical numbers that are integer multiples of ``m`` > 0, or ``None`` when the modular
    automaton would exceed :data:`MAX_MODULUS_STATES`.

    Writing ``m = P / 10**D`` (P, D integers), x is a multiple of m iff the digits of ``x * 10**D``
    (integer digits, then fraction digits padded with zeros to D) form a multiple of P; a
    fraction longer than D digits never is.  States: ``P * (2 D + 1)`` at most.
    """
    sign, digits, exp = m.normalize().as_tuple()
    P = int("".join(map(str, digits)))
    if exp >= 0:
        P *= 10**exp
        D = 0
    else:
        D = -exp
    if integer:
        D_frac = 0
    else:
        D_frac = D
    if P * (2 * D_frac + 1) > MAX_MODULUS_STATES:
        return None
    scale = [pow(10, D - j, P) if P > 1 else 0 for j in range(D + 1)]
    b = _Builder()
    start = b.state()
    nstart = b.state()
    zero = b.state()  # "0" after start (final)
    nzero = b.state()  # "0" after "-" (not final)
    b.edge(start, 1 << 0x30, zero)
    b.edge(start, 1 << 0x2D, nstart)
    b.edge(nstart, 1 << 0x30, nzero)
    b.finals.add(zero)
    ints = [b.state() for _ in range(P)]
    for r in range(P):
        for dgt in range(10):
            b.edge(ints[r], 1 << (0x30 + dgt), ints[(10 * r + dgt) % P])
        if (r * scale[0]) % P == 0:
            b.finals.add(ints[r])
    for dgt in range(1, 10):
        b.edge(start, 1 << (0x30 + dgt), ints[dgt % P])
        b.edge(nstart, 1 << (0x30 + dgt), ints[dgt % P])
    if D_frac:
        # frac[(r, j, nz)] after j fraction digits, residue r, last digit nonzero?
        frac: dict[tuple[int, int, bool], int] = {}

        def fs(r: int, j: int, nz: bool) -> int:
            key = (r, j, nz)
            if key not in frac:
                frac[key] = b.state()
                if nz and (r * scale[j]) % P == 0:
                    b.finals.add(frac[key])
            return frac[key]

        dots: dict[int, int] = {}
        for src, r in [(zero, 0), (nzero, 0)] + [(ints[r], r) for r in range(P)]:
            if r not in dots:
                dots[r] = b.state()
            b.edge(src, 1 << 0x2E, dots[r])
        todo = [(dots[r], r, 0) for r in dots]
        seen = set()
        while todo:
            s, r, j = todo.pop()
            if j >= D:
                continue
            for dgt in range(10):
                r2 = (10 * r + dgt) % P
                t = fs(r2, j + 1, dgt != 0)
                b.edge(s, 1 << (0x30 + dgt), t)
                if (r2, j + 1, dgt != 0) not in seen:
                    seen.add((r2, j + 1, dgt != 0))
                    todo.append((t, r2, j + 1))
    return b.build(start)


# --------------------------------------------------------------------------- formats


def _cls(chars: str) -> int:
    return mask_of(chars.encode())


_HEX = _cls("0123456789abcdefABCDEF")
_ALPHA = _cls("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ALNUM = _ALPHA | _DIGIT


def _d(lo: int, hi: int) -> ByteNFA:
    return byteset(_digits(lo, hi))


def _two(lo: int, hi: int) -> ByteNFA:
    """Two-digit numbers lo..hi (00-padded)."""
    return union(*(literal(f"{v:02d}") for v in range(lo, hi + 1)))


def _two_compact(hi: int) -> ByteNFA:
    """00..hi as digit classes (hi in {23, 59, 12, ...}); smaller than a union of literals."""
    tens, ones = divmod(hi, 10)
    parts = []
    if tens > 0:
        parts.append(concat(_d(0, tens - 1), _d(0, 9)))
    parts.append(concat(_d(tens, tens), _d(0, ones)))
    return union(*parts)


def _date() -> ByteNFA:
    year = concat(_d(0, 9), _d(0, 9), _d(0, 9), _d(0, 9))
    m31 = union(*(literal(f"{m:02d}") for m in (1, 3, 5, 7, 8, 10, 12)))
    m30 = union(*(literal(f"{m:02d}") for m in (4, 6, 9, 11)))
    d28 = union(concat(_d(0, 0), _d(1, 9)), concat(_d(1, 1), _d(0, 9)), concat(_d(2, 2), _d(0, 8)))
    d30 = union(d28, literal("29"), literal("30"))
    d31 = union(d30, literal("31"))
    # leap years 0000..9999: yy = multiple of 4 except 00, or yy00 with yy multiple of 4
    mult4 = union(*(literal(f"{v:02d}") for v in range(0, 100, 4)))
    mult4_nz = union(*(literal(f"{v:02d}") for v in range(4, 100, 4)))
    leap = union(concat(_d(0, 9), _d(0, 9), mult4_nz), concat(mult4, literal("00")))
    body = union(
        concat(year, literal("-"), union(concat(m31, literal("-"), d31),
                                         concat(m30, literal("-"), d30),
                                         concat(literal("02-"), d28))),
        concat(leap, literal("-02-29")),
    )
    return body


def _time() -> ByteNFA:
    hour = _two_compact(23)
    minute = _two_compact(59)
    secfrac = optional(concat(literal("."), plus(byteset(_DIGIT))))
    numoff = concat(byteset(_cls("+-")), hour, literal(":"), minute)
    offset = union(byteset(_cls("Zz")), numoff)
    normal = concat(hour, literal(":"), minute, literal(":"), minute, secfrac, offset)
    leap = concat(literal("23:59:60"), secfrac,
                  union(byteset(_cls("Zz")), literal("+00:00"), literal("-00:00")))
    return union(normal, leap)


def _duration() -> ByteNFA:
    num = plus(byteset(_DIGIT))

    def u(c: str) -> ByteNFA:
        return concat(num, literal(c))

    second = u("S")
    minute = concat(u("M"), optional(second))
    hour = concat(u("H"), optional(minute))
    dtime = concat(literal("T"), union(hour, minute, second))
    day = u("D")
    month = concat(u("M"), optional(day))
    year = concat(u("Y"), optional(month))
    ddate = concat(union(day, month, year), optional(dtime))
    week = u("W")
    return concat(literal("P"), union(ddate, dtime, week))


def _label(maxlen: int) -> ByteNFA:
    """LDH label; "--" in positions 3-4 (reserved for IDNA A-labels, which are not validated
    here) is excluded, so punycode labels are refused (subset)."""
    if maxlen == 1:
        return byteset(_ALNUM)
    inner = repeat(byteset(_ALNUM | _cls("-")), 0, maxlen - 2)
    basic = concat(byteset(_ALNUM), optional(concat(inner, byteset(_ALNUM))))
    ldh = byteset(_ALNUM | _cls("-"))
    nodash = byteset(_ALNUM)
    dash = literal("-")
    rest = star(ldh)
    no_dd = union(repeat(ldh, 0, 2), concat(ldh, ldh, union(concat(nodash, rest), dash,
                                                            concat(dash, nodash, rest))))
    return intersect(basic, no_dd)


#: Most labels a generated hostname has (subset of RFC 1123; keeps the automaton small).
HOSTNAME_MAX_LABELS = 8


def _hostname() -> ByteNFA:
    parts = []
    for k in range(1, HOSTNAME_MAX_LABELS + 1):
        cap = min(63, (254 - k) // k)
        lab = _label(cap)
        parts.append(concat(lab, *([concat(literal("."), lab)] * (k - 1))))
    return union(*parts)


def _uuid() -> ByteNFA:
    h = byteset(_HEX)
    return concat(repeat(h, 8, 8), literal("-"), repeat(h, 4, 4), literal("-"), repeat(h, 4, 4),
                  literal("-"), repeat(h, 4, 4), literal("-"), repeat(h, 12, 12))


def _email() -> ByteNFA:
    atext = byteset(_ALNUM | _cls("!#$%&'*+/=?^_`{|}~-"))
    dot_atom = concat(plus(atext), star(concat(literal("."), plus(atext))))
    qtext = byteset(mask_of([32, 33]) | mask_of(range(35, 92)) | mask_of(range(93, 127)))
    qpair = concat(literal("\\"), byteset(mask_of(range(32, 127))))
    quoted = concat(literal('"'), star(union(qtext, qpair)), literal('"'))
    domain = union(_hostname(), concat(literal("["), _ipv4(), literal("]")),
                   concat(literal("[IPv6:"), _ipv6(), literal("]")))
    return concat(union(dot_atom, quoted), literal("@"), domain)


def _date_time() -> ByteNFA:
    return concat(_date(), byteset(_cls("Tt")), _time())


def _json_pointer() -> ByteNFA:
    """RFC 6901: ``("/" reference-token)*``, ``~`` only in the escapes ``~0`` and ``~1``."""
    unescaped = codepoints([(0, 0x2E), (0x30, 0x7D), (0x7F, 0x10FFFF)])
    token = star(union(unescaped, literal("~0"), literal("~1")))
    return star(concat(literal("/"), token))


def _relative_json_pointer() -> ByteNFA:
    """draft-handrews-relative-json-pointer-01: a non-negative integer, then ``#`` or a JSON
    pointer.  ``jsonschema``'s checker refuses a ``0`` followed by another digit anywhere in
    the integer (``100``), so the integers here are ``0`` and ``[1-9]+0?``."""
    integer = union(literal("0"), concat(plus(byteset(_NZ)), optional(literal("0"))))
    return concat(integer, union(literal("#"), _json_pointer()))


_BUILDERS = {
    "date": _date,
    "time": _time,
    "date-time": _date_time,
    "duration": _duration,
    "email": _email,
    "hostname": _hostname,
    "ipv4": _ipv4,
    "ipv6": _ipv6,
    "uuid": _uuid,
    "uri": _uri,
    "uri-reference": lambda: _uri(reference=True),
    "iri": lambda: _uri(iri=True),
    "iri-reference": lambda: _uri(reference=True, iri=True),
    "uri-template": _uri_template,
    "json-pointer": _json_pointer,
    "relative-json-pointer": _relative_json_pointer,
    "regex": regex_syntax,
}

#: Formats with an automaton (exact or a documented subset; see the module docstring).
FORMATS = frozenset(_BUILDERS)


@cache
def format_nfa(name: str) -> ByteNFA:
    """The decoded content of strings in format ``name`` (a key of :data:`FORMATS`)."""
    from ..nfa import finalize

    return finalize(_BUILDERS[name]())
