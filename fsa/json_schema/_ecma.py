"""ECMA-262 ``pattern`` regexes translated to Python ``re`` syntax where the meanings differ
(``$``, ``.``, ``\\s``/``\\S``, ``\\d``/``\\D``)."""

from __future__ import annotations

from ..errors import InvalidArgumentError

_ECMA_SPACE = ("\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f"
               "\\u3000\\ufeff")


def _class_ranges(excluded: list[tuple[int, int]]) -> str:
    """Class-item text for every code point outside the sorted ``excluded`` ranges: how ``\\S``
    and ``\\D`` are written inside a class (``[\\S ]``, ``[^\\D.]``), where no negation
    is available."""
    out, cur = [], 0
    for lo, hi in excluded + [(0x110000, 0x110000)]:
        if lo > cur:
            out.append(f"\\U{cur:08x}-\\U{lo - 1:08x}")
        cur = hi + 1
    return "".join(out)


_ECMA_SPACE_RANGES = [(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680),
                      (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
                      (0x3000, 0x3000), (0xFEFF, 0xFEFF)]
_NOT_SPACE_ITEMS = _class_ranges(_ECMA_SPACE_RANGES)
_NOT_DIGIT_ITEMS = _class_ranges([(0x30, 0x39)])


def _ecma_to_python(pattern: str) -> str:
    """Rewrite the ECMA-262 constructs whose Python meaning differs: ``$`` (end of input only),
    ``.`` (not a line terminator), ``\\s``/``\\S`` (ECMA white space); ``\\d``/``\\w`` are made
    ASCII by the caller with ``re.ASCII``."""
    out = []
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "s":
                out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
            elif nxt == "S":
                out.append(_NOT_SPACE_ITEMS if in_class else f"[^{_ECMA_SPACE}]")
            elif nxt == "d":
                out.append("0-9" if in_class else "[0-9]")
            elif nxt == "D":
                out.append(_NOT_DIGIT_ITEMS if in_class else "[^0-9]")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            out.append(c)
        elif c == "[":
            in_class = True
            out.append(c)
            if pattern[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if pattern[i + 1:i + 2] == "]":  # ECMA "[]" is an empty class; Python: a literal "]"
                raise InvalidArgumentError("empty character class")
        elif c == "$":
            out.append(r"\Z")
        elif c == ".":
            out.append("[^\\n\\r\\u2028\\u2029]")
        else:
            out.append(c)
        i += 1
    return "".join(out)
