"""Typed errors raised by the compilers and the automaton.

Every error names *what* went wrong and *where*: a regex position, a schema JSON pointer, a
grammar rule and line, or a token id.  All derive from :class:`TractableError` so a caller can
catch the whole family at once.
"""

from __future__ import annotations

__all__ = [
    "TractableError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "UnsupportedRegexError",
    "InvalidRegexError",
    "VocabularyError",
    "VocabularyMismatchError",
    "AutomatonFormatError",
    "AutomatonFileNotFoundError",
    "EmptyLanguageError",
    "EmptySchemaError",
    "UnsatisfiableBudgetError",
    "ForeignStateError",
    "UnsupportedSchemaError",
    "InvalidSchemaError",
    "UnresolvedReferenceError",
    "GrammarError",
    "TokenError",
    "BudgetExceededError",
    "LiftSizeError",
]


class TractableError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidArgumentError(TractableError, ValueError):
    """An argument of a tractable function has a value it cannot take (a mode, a size, a
    shape); the message names the argument and what was given."""


class InvalidArgumentTypeError(TractableError, TypeError):
    """An argument of a tractable function has a type it cannot take."""


#: Characters of a pattern a regex error message shows on each side of the error position.
EXCERPT_RADIUS = 40


def pattern_excerpt(pattern: str, position: int | None, radius: int = EXCERPT_RADIUS) -> str:
    """``repr(pattern)``, or for a long pattern the ``radius`` characters on each side of
    ``position`` (the start where None) with ``…`` where text is left out and the total length:
    a 20 kB pattern made 20 kB messages (issue 23).  The full pattern stays on the error's
    ``pattern`` attribute."""
    if len(pattern) <= 2 * radius + 8:
        return repr(pattern)
    at = 0 if position is None else max(0, min(position, len(pattern)))
    lo, hi = max(0, at - radius), min(len(pattern), at + radius)
    head = "…" if lo > 0 else ""
    tail = "…" if hi < len(pattern) else ""
    return f"{head}{pattern[lo:hi]!r}{tail} (a pattern of {len(pattern):,} characters)"


class InvalidRegexError(TractableError, ValueError):
    """The pattern is not a valid regular expression.

    Attributes: ``pattern`` (str), ``position`` (int or None: index into ``pattern``).
    """

    def __init__(self, message: str, pattern: str, position: int | None = None):
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"{message}{where} in regex {pattern_excerpt(pattern, position)}")
        self.pattern = pattern
        self.position = position


class UnsupportedRegexError(TractableError, ValueError):
    """The pattern is valid but uses a construct that is not regular or not supported.

    Attributes: ``pattern``, ``construct`` (e.g. ``"lookahead"``), ``position`` (int or None).
    """

    def __init__(self, construct: str, pattern: str, position: int | None = None):
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"unsupported regex construct {construct}{where} in "
                         f"{pattern_excerpt(pattern, position)}")
        self.pattern = pattern
        self.construct = construct
        self.position = position


class VocabularyError(TractableError, ValueError):
    """A tokenizer could not be turned into a :class:`TokenVocabulary`."""


class VocabularyMismatchError(TractableError, ValueError):
    """A saved automaton (or HMM) was compiled against another vocabulary."""

    def __init__(self, expected: str, found: str, what: str = "automaton", *,
                 differences: str = ""):
        super().__init__(
            f"{what} was compiled for vocabulary fingerprint {expected[:16]}…, "
            f"but the vocabulary given has fingerprint {found[:16]}…"
            + (f" ({differences})" if differences else "")
        )
        self.expected = expected
        self.found = found
        self.differences = differences


class AutomatonFormatError(TractableError, ValueError):
    """A saved automaton file is corrupt or of an unknown format version."""


class AutomatonFileNotFoundError(TractableError, FileNotFoundError):
    """:meth:`TokenAutomaton.load` was given a path where no file is."""


class EmptyLanguageError(TractableError, ValueError):
    """The constraint accepts no token sequence over this vocabulary."""


class EmptySchemaError(EmptyLanguageError):
    """A JSON Schema that no instance satisfies, with the smallest empty sub-schema found.

    Attributes: ``keyword`` (e.g. ``"minimum"``, ``"allOf"``, ``"enum"``, ``"$ref"``),
    ``pointer`` (JSON pointer of that sub-schema or keyword), ``detail`` (why).
    """

    def __init__(self, keyword: str, pointer: str, detail: str = ""):
        extra = f": {detail}" if detail else ""
        super().__init__(f"the JSON Schema accepts no instance: keyword {keyword!r} at "
                         f"{pointer}{extra}")
        self.keyword = keyword
        self.pointer = pointer
        self.detail = detail


class UnsatisfiableBudgetError(TractableError, ValueError):
    """The token budget is below the fewest tokens any accepted output needs.

    Raised by ``check_budget`` (whole outputs: ``row`` is None) and by the masks
    (``allowed``/``allowed_packed``) for a live batch row whose ``remaining`` budget is below what
    its state needs to produce any allowed token (``row`` is that row).

    Attributes: ``budget`` and ``minimum`` (ints), ``row`` (int or None).
    """

    def __init__(self, budget: int, minimum: int, *, row: int | None = None):
        if row is None:
            msg = (f"a budget of {budget} tokens cannot satisfy the constraint: "
                   f"the shortest accepted output needs {minimum} tokens")
        else:
            msg = (f"row {row}: {budget} remaining tokens cannot complete the constraint from "
                   f"this state, which needs at least {minimum} (EOS included); no token is "
                   "allowed (pass on_unsatisfiable='eos' or 'empty' to get a mask instead)")
        super().__init__(msg)
        self.budget = budget
        self.minimum = minimum
        self.row = row


class ForeignStateError(TractableError, ValueError):
    """A state made by one automaton (``start``/``advance``) was given to another: its state
    numbering means nothing there, even with the same number of states.  ``A.to(device)``
    copies share their original's identity and accept its states."""


class UnsupportedSchemaError(TractableError, ValueError):
    """A JSON Schema keyword (or keyword value) is not supported.

    Attributes: ``keyword`` and ``pointer`` (JSON pointer such as ``#/properties/a/anyOf/2``).
    """

    def __init__(self, keyword: str, pointer: str, detail: str = ""):
        extra = f": {detail}" if detail else ""
        super().__init__(f"unsupported JSON Schema keyword {keyword!r} at {pointer}{extra}")
        self.keyword = keyword
        self.pointer = pointer
        self.detail = detail


class InvalidSchemaError(TractableError, ValueError):
    """The document is not a valid JSON Schema.  ``pointer`` says where."""

    def __init__(self, message: str, pointer: str = "#"):
        super().__init__(f"invalid JSON Schema at {pointer}: {message}")
        self.pointer = pointer


class UnresolvedReferenceError(UnsupportedSchemaError):
    """A ``$ref`` names a document that is neither the schema itself nor in the ``registry``
    given to the compiler (documents are never fetched from the network).

    Attributes: ``uri`` (the absolute URI of the missing document, fragment removed), ``ref``
    (the reference as written), ``pointer`` (JSON pointer of the ``$ref``), ``keyword``
    (``"$ref"``).
    """

    def __init__(self, uri: str, ref: str, pointer: str):
        TractableError.__init__(
            self, f"$ref {ref!r} at {pointer}: document {uri!r} is not available (pass it in "
            "registry=: a referencing.Registry or a mapping URI -> schema; nothing is fetched "
            "from the network)")
        self.keyword = "$ref"
        self.pointer = pointer
        self.detail = f"document {uri!r} not in the registry"
        self.uri = uri
        self.ref = ref


class GrammarError(TractableError, ValueError):
    """A grammar could not be parsed or compiled.  ``rule`` and ``line`` say where."""

    def __init__(self, message: str, rule: str | None = None, line: int | None = None):
        parts = []
        if rule is not None:
            parts.append(f"rule {rule!r}")
        if line is not None:
            parts.append(f"line {line}")
        where = f" ({', '.join(parts)})" if parts else ""
        super().__init__(f"{message}{where}")
        self.rule = rule
        self.line = line


class TokenError(TractableError, ValueError):
    """A token id is out of range or not allowed where it was used."""

    def __init__(self, message: str, token_id: int | None = None):
        super().__init__(message if token_id is None else f"{message} (token id {token_id})")
        self.token_id = token_id


class BudgetExceededError(TractableError, RuntimeError):
    """``generate`` asked for a token past the processor's ``max_new_tokens`` for a row that has
    not finished.  Attributes: ``max_new_tokens``, ``generated`` (tokens already generated)."""

    def __init__(self, max_new_tokens: int, generated: int, row: int):
        super().__init__(
            f"row {row} has generated {generated} tokens without finishing, but the processor "
            f"was built for max_new_tokens={max_new_tokens}: pass the same max_new_tokens to "
            "generate() (a larger one would produce output that the budget guarantee does not "
            "cover)"
        )
        self.max_new_tokens = max_new_tokens
        self.generated = generated
        self.row = row


class LiftSizeError(TractableError, ValueError):
    """The token lift of a constraint needs more intermediate memory than its budget
    (:mod:`tractable.fsa.lift_budget`): raised before the array that would pass it is allocated.

    Attributes: ``what`` (the array being built, e.g. "packed token rows of a component
    template (97,528 rows)"), ``used`` and ``limit`` (bytes charged so far, the budget)."""

    def __init__(self, what: str, used: int, limit: int):
        super().__init__(
            f"the token lift needs more than its budget of {limit / 2**30:.2f} GiB of "
            f"intermediate arrays ({used / 2**30:.2f} GiB charged when building {what}): the "
            "constraint reads too many vocabulary tokens from too many states.  Raise the "
            "budget with TRACTABLE_MAX_LIFT_BYTES=N or tractable.fsa.lift_budget.lift_budget(N), "
            "or simplify the constraint")
        self.what = what
        self.used = used
        self.limit = limit
