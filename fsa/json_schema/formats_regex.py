"""A regular subset of the JSON Schema ``regex`` format (ECMA-262 regular expression syntax).

Regular expressions nest parentheses, so their syntax is not regular; :func:`regex_syntax`
accepts a documented subset, chosen to be valid both as ECMA-262 (with or without the ``u``
flag, not ``v``) and for Python's ``re.compile`` (what ``jsonschema`` checks the format with)::

    regex    :  alt ( "|" alt )*
    alt      :  term*
    term     :  atom quant? | "^" | "$" | "\\b" | "\\B" | ( "(?=" | "(?!" ) regex ")"
    atom     :  char | "." | escape | class | ( "(" | "(?:" ) regex ")"
    quant    :  ( "*" | "+" | "?" | "{" n "}" | "{" n ",}" | "{" n "," m "}" ) "?"?

* groups nest at most :data:`REGEX_MAX_DEPTH` deep; lookaheads are never quantified; no
  lookbehinds, named groups, backreferences or inline flags;
* ``char``: any code point but ``^$\\.*+?()[]{}|``; ``escape``: ``\\`` and one of
  ``^$\\.*+?()[]{}|/``, a class escape ``dDwWsS``, a control escape ``fnrtv``, ``xHH`` or
  ``uHHHH`` (no ``\\0``, ``\\c``, ``\\u{...}``, identity escapes of letters or digits);
* ``class``: ``[``, optional ``^``, optional ``-``, then at least one item (at least zero after
  the ``-``), ``]``; an item is a code point but ``\\]-[&~|``, an escape as above (``\\-`` and
  ``\\b`` = backspace included, ``\\B`` not), or a range ``x-y`` of two digits, two lowercase or
  two uppercase ASCII letters with ``x <= y``.  No empty class ``[]``/``[^]`` (Python rejects
  them); ``"[^"`` always negates (``[^]`` is not a class of ``^``); ``&~|`` only escaped, since
  Python warns about ``&&``, ``~~``, ``||`` in classes;
* ``n``, ``m``: ``0`` or ``[1-9][0-9]{0,2}``, with ``n <= m`` decided without remembering
  ``n``: ``m`` has more digits than ``n``; or both have one digit; or both have two and ``m``'s
  tens digit is greater, or equal with ``n`` a multiple of ten (``{10,15}``, ``{12,30}``; not
  ``{12,15}`` nor ``{100,200}``).  Copied at every nesting level, the full comparison (about
  300 states) made the automaton three times larger.
"""

from __future__ import annotations

from ..nfa import (
    ByteNFA,
    byteset,
    codepoints,
    concat,
    literal,
    mask_of,
    optional,
    repeat,
    star,
    union,
)

__all__ = ["REGEX_MAX_DEPTH", "regex_syntax"]

#: Deepest nesting of groups (lookaheads included) in the ``regex`` format subset.
REGEX_MAX_DEPTH = 3

_SYNTAX = "^$\\.*+?()[]{}|"
_DIGITS = "0123456789"
_LOWER = "abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()


def _cls(chars: str) -> int:
    return mask_of(chars.encode())


def _all_but(chars: str) -> ByteNFA:
    """Any code point except the ASCII ``chars``."""
    cut = sorted(ord(c) for c in chars)
    ranges, lo = [], 0
    for c in cut:
        if lo <= c - 1:
            ranges.append((lo, c - 1))
        lo = c + 1
    ranges.append((lo, 0x10FFFF))
    return codepoints(ranges)


def _escape(in_class: bool) -> ByteNFA:
    hexd = byteset(_cls("0123456789abcdefABCDEF"))
    simple = _SYNTAX + "/" + "dDwWsS" + "fnrtv" + ("b-" if in_class else "")  # \b \B: assertions
    return concat(literal("\\"), union(byteset(_cls(simple)),
                                       concat(literal("x"), hexd, hexd),
                                       concat(literal("u"), repeat(hexd, 4, 4))))


def _class() -> ByteNFA:
    ranges = []
    for group in (_DIGITS, _LOWER, _UPPER):
        for i, c in enumerate(group):
            ranges.append(concat(literal(c + "-"), byteset(_cls(group[i:]))))
    item_nc = union(_all_but("\\]-[&~|^"), _escape(True), *ranges)  # an item but "^"
    # "[^" always negates, so an unnegated class cannot start with "^" ("[^]" is not "^")
    head = union(concat(optional(literal("^")), union(literal("-"), item_nc)), literal("^^"))
    items = star(union(item_nc, literal("^")))
    return concat(literal("["), head, items, literal("]"))


def _number(digits: int) -> ByteNFA:
    """Canonical numbers of exactly ``digits`` digits."""
    if digits == 1:
        return byteset(_cls(_DIGITS))
    rest = repeat(byteset(_cls(_DIGITS)), digits - 1, digits - 1)
    return concat(byteset(_cls(_DIGITS[1:])), rest)


def _quantifier() -> ByteNFA:
    num = union(*(_number(k) for k in (1, 2, 3)))
    pairs = []
    for k in (1, 2):  # m longer than n
        longer = union(*(_number(j) for j in range(k + 1, 4)))
        pairs.append(concat(_number(k), literal(","), longer))
    for n in range(10):  # one digit each, n <= m
        pairs.append(concat(literal(f"{n},"), byteset(_cls(_DIGITS[n:]))))
    any_digit = byteset(_cls(_DIGITS))
    for t in range(1, 10):  # two digits each: a greater tens digit, or n = t0 <= m = t?
        pairs.append(concat(literal(str(t)), union(
            concat(any_digit, literal(","), byteset(_cls(_DIGITS[t + 1:])), any_digit),
            concat(literal(f"0,{t}"), any_digit))))
    counted = concat(literal("{"), union(num, concat(num, literal(",")), *pairs), literal("}"))
    return concat(union(byteset(_cls("*+?")), counted), optional(literal("?")))


def regex_syntax(depth: int = REGEX_MAX_DEPTH) -> ByteNFA:
    """The ``regex`` format subset (module docstring) with groups nested ``depth`` deep."""
    quant = _quantifier()
    plain = union(_all_but(_SYNTAX), literal("."), _escape(False), _class())
    assertion = union(byteset(_cls("^$")), literal("\\b"), literal("\\B"))
    out: ByteNFA | None = None
    for _ in range(depth + 1):
        atom = plain
        terms = [assertion]
        if out is not None:
            close = literal(")")
            atom = union(plain, concat(union(literal("("), literal("(?:")), out, close))
            terms.append(concat(union(literal("(?="), literal("(?!")), out, close))
        term = union(concat(atom, optional(quant)), *terms)
        out = star(union(term, literal("|")))  # alt ("|" alt)*, alt = term*: one copy of term
    return out
