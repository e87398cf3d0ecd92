"""Regular automata for the URI family of JSON Schema string formats (decoded string content).

IP addresses (RFC 3986 ``IPv4address`` / ``IPv6address``), URIs and URI references (RFC 3986),
IRIs and IRI references (RFC 3987) and URI templates (RFC 6570): all of them regular, built from
the :mod:`.nfa` combinators.  :mod:`.formats` lists them in ``FORMATS`` and documents, per
format, where an automaton is a *subset* of its RFC; the subsets are exactly what the checkers
``jsonschema`` uses (``rfc3986-validator``, ``rfc3987-syntax``, ``uri-template``) reject of the
RFC languages, so that no accepted string fails a format-checking validator.

The IRI automata contain non-ASCII code points (UTF-8 encoded, valid UTF-8 only); none of these
formats contains ``"``, ``\\`` or a control character.
"""

from __future__ import annotations

from ..nfa import (
    ByteNFA,
    byteset,
    codepoints,
    concat,
    empty,
    literal,
    mask_of,
    nothing,
    optional,
    plus,
    repeat,
    star,
    union,
)

__all__ = ["ipv4", "ipv6", "uri", "uri_template"]


def _cls(chars: str) -> int:
    return mask_of(chars.encode())


_DIGIT = mask_of(range(0x30, 0x3A))
_HEX = _cls("0123456789abcdefABCDEF")
_ALPHA = _cls("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ALNUM = _ALPHA | _DIGIT
_UNRESERVED = _ALNUM | _cls("-._~")
_SUB_DELIMS = _cls("!$&'()*+,;=")

#: RFC 3987 ``ucschar`` and ``iprivate``, all planes.
UCSCHAR = ((0xA0, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFEF),
           *((p << 16, (p << 16) | 0xFFFD) for p in range(1, 14)), (0xE1000, 0xEFFFD))
IPRIVATE = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))
#: The Basic Multilingual Plane part of them: all that ``rfc3987-syntax`` (the ``iri`` checker
#: of ``jsonschema``) accepts, so the IRI automata use these.
UCSCHAR_BMP = UCSCHAR[:3]
IPRIVATE_BMP = IPRIVATE[:1]


def _d(lo: int, hi: int) -> ByteNFA:
    return byteset(mask_of(range(0x30 + lo, 0x31 + hi)))


def _pct() -> ByteNFA:
    return concat(literal("%"), byteset(_HEX), byteset(_HEX))


def ipv4() -> ByteNFA:
    """Dotted quad without leading zeros (RFC 3986 ``IPv4address``): exact."""
    octet = union(
        _d(0, 9),
        concat(_d(1, 9), _d(0, 9)),
        concat(literal("1"), _d(0, 9), _d(0, 9)),
        concat(literal("2"), _d(0, 4), _d(0, 9)),
        concat(literal("25"), _d(0, 5)),
    )
    dot = literal(".")
    return concat(octet, dot, octet, dot, octet, dot, octet)


def ipv6(one_gap: bool = False) -> ByteNFA:
    """RFC 3986 / RFC 4291 ``IPv6address`` (``::`` compression, IPv4 tail), no zone id: exact.

    ``one_gap``: only eight written groups, or seven with ``::`` standing for exactly one group
    (the IPv4 tail counting two): the forms that ``rfc3987-syntax`` parses (its grammar writes
    every ``h16`` of RFC 3986's optional prefixes out, so ``::1`` and ``2001:db8::1`` fail it).
    """
    h16 = repeat(byteset(_HEX), 1, 4)
    colon = literal(":")
    v4 = ipv4()

    def groups(n: int) -> ByteNFA:  # exactly n groups separated by ':'
        if n == 0:
            return empty()
        return concat(h16, *([concat(colon, h16)] * (n - 1)))

    def tail(n: int) -> ByteNFA:  # exactly n groups, the last two possibly an IPv4 address
        if n < 2:
            return groups(n)
        return union(groups(n), v4 if n == 2 else concat(groups(n - 2), colon, v4))

    def upto(n: int) -> ByteNFA:  # right side: 0..n groups, or (n-2 groups ':')? ipv4
        g = empty() if n <= 0 else optional(concat(h16, repeat(concat(colon, h16), 0, n - 1)))
        rest = nothing()
        if n >= 2:
            rest = concat(repeat(concat(h16, colon), 0, n - 2), v4)
        return union(g, rest)

    if one_gap:
        return union(tail(8), *(concat(groups(i), literal("::"), tail(7 - i)) for i in range(8)))
    full = union(groups(8), concat(groups(6), colon, v4))
    comp = [concat(groups(i), literal("::"), upto(7 - i)) for i in range(8)]
    return union(full, *comp)


def uri(reference: bool = False, iri: bool = False) -> ByteNFA:
    """RFC 3986 ``URI`` (``reference``: ``URI-reference``, that is ``URI / relative-ref``), or
    with ``iri`` the RFC 3987 ``IRI`` / ``IRI-reference``.

    Exact, except: an ``IPvFuture`` host literal takes a lowercase ``v`` only (both checkers
    spell it so); for IRIs, ``ucschar`` and ``iprivate`` are the Basic Multilingual Plane ranges
    only and an IPv6 host literal is one of the :func:`ipv6` ``one_gap`` forms (what
    ``rfc3987-syntax`` accepts).
    """
    ucs = codepoints(UCSCHAR_BMP) if iri else None
    pct = _pct()

    def chars(extra: str) -> ByteNFA:
        """(i)unreserved / pct-encoded / sub-delims / ``extra``: one character."""
        parts = [byteset(_UNRESERVED | _SUB_DELIMS | _cls(extra)), pct]
        if ucs is not None:
            parts.append(ucs)
        return union(*parts)

    pchar = chars(":@")
    scheme = concat(byteset(_ALPHA), star(byteset(_ALNUM | _cls("+-."))))
    userinfo = star(chars(":"))
    reg_name = star(chars(""))
    future = concat(literal("v"), plus(byteset(_HEX)), literal("."),
                    plus(byteset(_UNRESERVED | _SUB_DELIMS | _cls(":"))))
    ip_literal = concat(literal("["), union(ipv6(one_gap=iri), future), literal("]"))
    host = union(ip_literal, ipv4(), reg_name)
    port = star(byteset(_DIGIT))
    authority = concat(optional(concat(userinfo, literal("@"))), host,
                       optional(concat(literal(":"), port)))
    segment = star(pchar)
    path_abempty = star(concat(literal("/"), segment))
    path_absolute = concat(literal("/"), optional(concat(plus(pchar), path_abempty)))
    net = concat(literal("//"), authority, path_abempty)
    qchars = [pchar, byteset(_cls("/?"))]
    fragment = star(union(*qchars))
    if iri:
        qchars.append(codepoints(IPRIVATE_BMP))
    query = star(union(*qchars))
    tail = concat(optional(concat(literal("?"), query)), optional(concat(literal("#"), fragment)))
    path_rootless = concat(plus(pchar), path_abempty)
    absolute = concat(scheme, literal(":"), union(net, path_absolute, path_rootless, empty()),
                      tail)
    if not reference:
        return absolute
    path_noscheme = concat(plus(chars("@")), path_abempty)
    relative = concat(union(net, path_absolute, path_noscheme, empty()), tail)
    return union(absolute, relative)


#: Longest prefix modifier (``{var:N}``) of a URI template: the ``uri-template`` package (the
#: ``jsonschema`` checker) refuses four digits, which RFC 6570 allows (up to 9999).
URI_TEMPLATE_MAX_PREFIX_DIGITS = 3


def uri_template() -> ByteNFA:
    """RFC 6570 URI Template (level 4 syntax, with erratum 6937: ``'`` is a literal).

    Exact except for three things the ``uri-template`` package (the ``jsonschema`` checker)
    refuses: a variable name starting with a pct-encoded triplet, a prefix modifier of more
    than :data:`URI_TEMPLATE_MAX_PREFIX_DIGITS` digits, and the operators reserved for future
    extensions (``= , ! @ |``; the checker reads ``,`` as an extension of its own).
    """
    pct = _pct()
    lit_ascii = mask_of([0x21, 0x23, 0x24, 0x3D, 0x5D, 0x5F, 0x7E]) | mask_of(range(0x26, 0x3C))
    lit_ascii |= mask_of(range(0x3F, 0x5C)) | mask_of(range(0x61, 0x7B))
    literals = union(byteset(lit_ascii), codepoints(UCSCHAR + IPRIVATE), pct)
    first = byteset(_ALNUM | _cls("_"))
    varchar = union(first, pct)
    varname = concat(first, star(concat(optional(literal(".")), varchar)))
    max_length = concat(_d(1, 9), repeat(byteset(_DIGIT), 0, URI_TEMPLATE_MAX_PREFIX_DIGITS - 1))
    modifier = union(concat(literal(":"), max_length), literal("*"))
    varspec = concat(varname, optional(modifier))
    varlist = concat(varspec, star(concat(literal(","), varspec)))
    expression = concat(literal("{"), optional(byteset(_cls("+#./;?&"))), varlist, literal("}"))
    return star(union(literals, expression))
