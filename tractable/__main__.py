"""``python -m tractable`` is the ``tractable`` command."""

import sys

from tractable.cli import main

sys.exit(main())
