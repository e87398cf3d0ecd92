"""Read any saved automaton: :func:`load_automaton`.

:meth:`~.automaton.TokenAutomaton.save` and
:meth:`~.json_schema.unique_items.UniqueItemsAutomaton.save` write one file format
(:mod:`.automaton_file`); a schema with ``uniqueItems`` compiles to the latter, so code that
saves whatever :func:`~.json_schema.compile_json_schema` returns reads it back here without
knowing which it was.  A module of its own because it needs both classes (the JSON Schema
package imports :mod:`.automaton`, so the automaton cannot import the checker).
"""

from __future__ import annotations

import os

from .automaton import TokenAutomaton
from .json_schema.unique_items import UniqueItemsAutomaton
from .vocabulary import TokenVocabulary

__all__ = ["load_automaton"]


def load_automaton(
    path: str | os.PathLike, vocabulary: TokenVocabulary, *, device: str = "cpu"
) -> TokenAutomaton | UniqueItemsAutomaton:
    """The automaton saved at ``path``: a :class:`~.automaton.TokenAutomaton`, or a
    :class:`~.json_schema.unique_items.UniqueItemsAutomaton` when the file holds its checker.

    Raises:
        AutomatonFileNotFoundError: no file at ``path``.
        VocabularyMismatchError: the file was compiled for another vocabulary.
        AutomatonFormatError: not such a file, an unknown format version or part, or a file
            that is truncated, tampered with or inconsistent (what and where in the message).
    """
    A, part, tensors = TokenAutomaton._load(path, vocabulary)
    out = A if part is None else UniqueItemsAutomaton._from_part(A, tensors, vocabulary, path)
    return out if device == "cpu" else out.to(device)
