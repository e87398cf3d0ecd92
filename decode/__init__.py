"""tractable.decode (see the module docstrings)."""
