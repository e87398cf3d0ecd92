"""Subcommands of the ``tractable`` CLI (see :mod:`tractable.cli`)."""
