"""Constants shared by the mask and reachability kernels (a leaf module: :mod:`.token_mask`
and :mod:`.reachability` both import it, and neither imports the other at module level)."""

from __future__ import annotations

import torch

__all__ = ["UNREACHABLE", "MODES"]

#: ``distance`` of a state that cannot reach an accepting state (int64 max).
UNREACHABLE = torch.iinfo(torch.int64).max

#: Mask modes: ``"gcd"`` (budget-aware) and ``"lcd"`` (any valid continuation).
MODES = ("gcd", "lcd")
