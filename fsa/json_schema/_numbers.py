"""JSON numbers: the compiler's :class:`_NumbersMixin` (``minimum``/``maximum`` and their
exclusive forms, ``multipleOf``, ``integer``; canonical decimals from :mod:`.formats`,
every spelling from :mod:`.number_spellings`), and the spellings of non-integral numbers."""

from __future__ import annotations

from decimal import Decimal

from .. import nfa as N
from ..errors import InvalidSchemaError
from ..nfa import ByteNFA
from ._automata import _ALL_BYTES
from ._base import _CompilerBase
from ._cache import _cached, _share
from ._nodes import _ptr
from ._strings import _complement_content
from .formats import multiple_of, number_nfa, number_range
from .number_spellings import MAX_NUMBER_STATES, number_language

#: Key bytes: the canonical numbers with a fractional part are those containing ``.``.
_HAS_DOT = ByteNFA(2, 0, frozenset({1}), ((0, _ALL_BYTES & ~(1 << 0x2E), 0), (0, 1 << 0x2E, 1),
                                          (1, _ALL_BYTES, 1)))


#: The exponent bound :func:`~.number_spellings.number_language` uses for ``integer`` by default.
_INTEGER_MAX_EXPONENT = 16


def _bounded_numbers(max_exponent: int) -> ByteNFA:
    """The number spellings :func:`~.number_spellings.number_language` can generate for
    ``integer`` with this exponent bound: a zero mantissa with any exponent, a scientific
    mantissa (one nonzero integer digit) with an exponent of value at most ``max_exponent``,
    any other mantissa with an exponent of value 0.  A complement of number spellings is
    taken within it, so that it is exact."""
    key = ("bounded-numbers", max_exponent)
    hit = _cached(key)
    if hit is None:
        from ..regex import regex_to_nfa

        exp = "|".join(str(i) for i in range(max_exponent + 1))
        hit = _share(key, N.finalize(regex_to_nfa(
            rf"-?0(\.0+)?([eE][+-]?[0-9]+)?"
            rf"|-?[1-9](\.[0-9]+)?[eE][+-]?0*({exp})"
            rf"|-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?0+)?")))
    return hit


def _non_integral(max_exponent: int | None) -> ByteNFA:
    """Spellings of numbers with a nonzero fractional value (``not: {type: integer}``), exact
    for exponents within ``max_exponent``: the bounded spellings minus the integral ones."""
    key = ("non-integral", max_exponent)
    hit = _cached(key)
    if hit is None:
        max_exponent = _INTEGER_MAX_EXPONENT if max_exponent is None else max_exponent
        ints = number_language(None, False, None, False, True, (), max_exponent)
        hit = _share(key, N.finalize(N.intersect(_bounded_numbers(max_exponent),
                                                 _complement_content(ints))))
    return hit


def _integer_syntax() -> ByteNFA:
    """JSON numbers without fraction or exponent, ``-?(0|[1-9][0-9]*)``: what draft-04 (and
    draft-03) calls an ``integer`` (``3.0`` and ``3e0`` are not, unlike in draft 6 and later)."""
    hit = _cached(("integer-syntax",))
    if hit is None:
        nonneg = N.union(N.literal("0"), N.concat(N.byteset(N.mask_of(range(0x31, 0x3A))),
                                                 N.star(N.byteset(N.mask_of(range(0x30, 0x3A))))))
        hit = _share(("integer-syntax",), N.finalize(N.concat(N.optional(N.literal("-")), nonneg)))
    return hit


class _NumbersMixin(_CompilerBase):
    """Number values: the bounds and ``multipleOf`` of a conjunction, as canonical decimals
    or as every spelling."""

    def _non_integral(self) -> ByteNFA:
        """Spellings of the numbers that are not integers (intersected with a number
        language by the caller): by value, or under draft-04 (:attr:`_integers_plain`) by
        syntax, where ``3.0`` is not an integer."""
        if self._integers_plain:
            hit = _cached(("non-plain-integer",))
            if hit is None:
                hit = _share(("non-plain-integer",),
                             N.finalize(_complement_content(_integer_syntax())))
            return hit
        return _non_integral(self.max_exponent)

    @property
    def _integers_plain(self) -> bool:
        """Every spelling, under draft-04 or earlier: an ``integer`` is written without
        fraction or exponent (``jsonschema``'s Draft4Validator rejects ``3.0`` as an integer)."""
        return not self.canonical and self.draft <= 4

    def _number_value(self, d: Decimal, plain: bool = False) -> ByteNFA:
        """Every spelling of the number ``d`` (exponents as :func:`number_language` bounds);
        ``plain``: an integral ``d`` only without fraction or exponent (see
        :attr:`_integers_plain`)."""
        a = self._numbers(d, False, d, False)
        if plain and d == d.to_integral_value():
            key = ("plain-integer", d, self.max_exponent)
            hit = _cached(key)
            if hit is None:
                hit = _share(key, N.finalize(N.intersect(a, _integer_syntax())))
            a = hit
        return a

    def _numbers(self, lower, lstrict, upper, ustrict, integer=False, mults=()) -> ByteNFA | None:
        """:func:`~.number_spellings.number_language` with this compiler's exponent bound, shared
        by all compilers (None: too large)."""
        key = ("numbers", lower, lstrict, upper, ustrict, integer, tuple(sorted(mults)),
               self.max_exponent)
        hit = _cached(key, False)
        if hit is False:
            hit = _share(key, number_language(lower, lstrict, upper, ustrict, integer, mults,
                                              self.max_exponent))
        return hit

    def _number(self, flat, integer: bool) -> ByteNFA:
        lower: Decimal | None = None
        lstrict = False
        upper: Decimal | None = None
        ustrict = False
        mults: list[tuple[Decimal, str]] = []

        def dec(x, p):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise InvalidSchemaError("expected a number", p)
            return Decimal(repr(x)) if isinstance(x, float) else Decimal(x)

        def lo(x, strict):
            nonlocal lower, lstrict
            if lower is None or x > lower or (x == lower and strict):
                lower, lstrict = x, strict

        def hi(x, strict):
            nonlocal upper, ustrict
            if upper is None or x < upper or (x == upper and strict):
                upper, ustrict = x, strict

        for s, p in flat:
            if "minimum" in s:
                lo(dec(s["minimum"], _ptr(p, "minimum")),
                   s.get("exclusiveMinimum") is True)
            if "maximum" in s:
                hi(dec(s["maximum"], _ptr(p, "maximum")),
                   s.get("exclusiveMaximum") is True)
            em, eM = s.get("exclusiveMinimum"), s.get("exclusiveMaximum")
            if em is not None and not isinstance(em, bool):
                lo(dec(em, _ptr(p, "exclusiveMinimum")), True)
            if eM is not None and not isinstance(eM, bool):
                hi(dec(eM, _ptr(p, "exclusiveMaximum")), True)
            if "multipleOf" in s:
                m = dec(s["multipleOf"], _ptr(p, "multipleOf"))
                if m <= 0:
                    raise InvalidSchemaError("multipleOf must be > 0", _ptr(p, "multipleOf"))
                mults.append((m, _ptr(p, "multipleOf")))
        if not self.canonical:
            a = self._numbers(lower, lstrict, upper, ustrict, integer, [m for m, _ in mults])
            if a is None:
                p = mults[0][1] if mults else flat[0][1]
                self._unsupported("multipleOf" if mults else "type", p,
                                  f"the number automaton would exceed {MAX_NUMBER_STATES} "
                                  "states")
                a = self._numbers(lower, lstrict, upper, ustrict, integer)
            if integer and self._integers_plain and a is not None:
                a = N.intersect(a, _integer_syntax())
            return a
        if lower is None and upper is None:
            a = number_nfa(integer)  # built once per process
        else:
            a = number_range(lower, lstrict, upper, ustrict, integer)
        for m, p in mults:
            mo = multiple_of(m, integer)
            if mo is None:
                self._unsupported("multipleOf", p, f"modulus automaton for {m} is too large")
                continue
            a = N.intersect(a, mo)
        return a
