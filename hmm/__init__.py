"""tractable.hmm (see the module docstrings)."""
