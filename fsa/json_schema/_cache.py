"""The automata shared by all JSON Schema compilers of a process: immutable, keyed by their
inputs, bounded in number.

The table is read and written only through :func:`_cached` and :func:`_share`, which look up
:data:`_SHARED` in this module at each call: replacing the table here (as a test may, with
``monkeypatch``) replaces it for every compiler."""

from __future__ import annotations

from typing import Any

#: Immutable automata shared by all compilers (keys name their inputs): free values per
#: (depth, whitespace), escaped format contents, translated patterns, length-bounded bodies.
_SHARED: dict[tuple, Any] = {}
#: Most entries kept in :data:`_SHARED` (oldest dropped first): patterns and length bounds come
#: from user schemas, so a long-running process must not keep all of them.
MAX_SHARED = 4096


def _cached(key: tuple, default: Any = None) -> Any:
    """The shared object stored under ``key``, or ``default``."""
    return _SHARED.get(key, default)


def _share(key: tuple, value: Any) -> Any:
    if len(_SHARED) >= MAX_SHARED:
        for k in list(_SHARED)[: MAX_SHARED // 4]:
            del _SHARED[k]
    _SHARED[key] = value
    return value
