"""Keep a source checkout's root off ``sys.path`` for ``python -m`` entry points.

``python -m`` puts the current directory first on ``sys.path``.  Run from a checkout of this
repository, that directory holds the source folder ``kernels/`` (installed as
``tractable.kernels``), which would shadow Hugging Face's ``kernels`` package that transformers
imports.  Entry points call :func:`drop_checkout_root` before importing transformers;
``tractable`` itself is found through its installation.
"""

from __future__ import annotations

import os
import sys

__all__ = ["drop_checkout_root"]


def _is_checkout_root(entry: str) -> bool:
    root = os.path.abspath(entry or os.curdir)
    return os.path.isfile(os.path.join(root, "pyproject.toml")) and os.path.isfile(
        os.path.join(root, "kernels", "__init__.py")
    )


def drop_checkout_root() -> None:
    """Remove every checkout root of this repository from ``sys.path`` (mutates it)."""
    sys.path[:] = [p for p in sys.path if not _is_checkout_root(p)]
