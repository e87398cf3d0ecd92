"""``python -m tractable`` is the ``tractable`` command.

``python -m`` puts the current directory first on ``sys.path``.  Run from a checkout of this
repository, that directory holds the source folder ``kernels/`` (installed as
``tractable.kernels``), which would shadow Hugging Face's ``kernels`` package that transformers
imports.  The checkout root is therefore dropped from ``sys.path`` before anything else loads;
``tractable`` itself is found through its installation.
"""

import os
import sys


def _is_checkout_root(entry: str) -> bool:
    root = os.path.abspath(entry or os.curdir)
    return os.path.isfile(os.path.join(root, "pyproject.toml")) and os.path.isfile(
        os.path.join(root, "kernels", "__init__.py")
    )


sys.path[:] = [p for p in sys.path if not _is_checkout_root(p)]

from tractable.cli import main  # noqa: E402

sys.exit(main())
