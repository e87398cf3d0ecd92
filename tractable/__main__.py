"""``python -m tractable`` is the ``tractable`` command (see :mod:`tractable._syspath` for why
the checkout root leaves ``sys.path`` first)."""

import sys

from tractable._syspath import drop_checkout_root

drop_checkout_root()

from tractable.cli import main  # noqa: E402

sys.exit(main())
