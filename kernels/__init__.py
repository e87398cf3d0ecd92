"""tractable.kernels (see the module docstrings)."""
