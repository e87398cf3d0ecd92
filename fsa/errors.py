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
    "UnsatisfiableBudgetError",
    "UnsupportedSchemaError",
    "InvalidSchemaError",
    "UnresolvedReferenceError",
    "GrammarError",
    "TokenError",
    "BudgetExceededError",
]


class TractableError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidArgumentError(TractableError, ValueError):
    """An argument of a tractable function has a value it cannot take (a mode, a size, a
    shape); the message names the argument and what was given."""


class InvalidArgumentTypeError(TractableError, TypeError):
    """An argument of a tractable function has a type it cannot take."""


class InvalidRegexError(TractableError, ValueError):
    """The pattern is not a valid regular expression.

    Attributes: ``pattern`` (str), ``position`` (int or None: index into ``pattern``).
    """

    def __init__(self, message: str, pattern: str, position: int | None = None):
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"{message}{where} in regex {pattern!r}")
        self.pattern = pattern
        self.position = position


class UnsupportedRegexError(TractableError, ValueError):
    """The pattern is valid but uses a construct that is not regular or not supported.

    Attributes: ``pattern``, ``construct`` (e.g. ``"lookahead"``), ``position`` (int or None).
    """

    def __init__(self, construct: str, pattern: str, position: int | None = None):
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"unsupported regex construct {construct}{where} in {pattern!r}")
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


class UnsatisfiableBudgetError(TractableError, ValueError):
    """The token budget is below the fewest tokens any accepted output needs.

    Attributes: ``budget`` and ``minimum`` (ints).
    """

    def __init__(self, budget: int, minimum: int):
        super().__init__(
            f"a budget of {budget} tokens cannot satisfy the constraint: "
            f"the shortest accepted output needs {minimum} tokens"
        )
        self.budget = budget
        self.minimum = minimum


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
