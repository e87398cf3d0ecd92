"""Bit-packed token sets: bool [..., V] ⇄ int32 [..., ceil(V/32)].

Token ``v`` is bit ``v % 32`` (little-endian within the word) of word ``v // 32``: the layout of
:attr:`~.automaton.TokenAutomaton.labels`, of the masks of :mod:`.masks` and of xgrammar's token
bitmask.  Bits past ``V`` in the last word are 0.  These are the CPU (numpy) helpers; the
device-side ones are :func:`tractable.kernels.token_mask.pack_mask` / ``unpack_mask``.

A leaf module (numpy and torch only), so :mod:`.automaton`, :mod:`.masks` and the packages above
``fsa`` import it without a cycle.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["pack_bits", "unpack_bits"]


def unpack_bits(packed: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int32 [..., W] bit-packed rows → bool [..., vocab_size] (a new CPU tensor; bit v%32 of
    word v//32).  ``packed`` is not mutated."""
    p = packed.detach().contiguous().cpu().numpy()
    if p.dtype != np.int32:
        p = p.astype(np.int32)
    # one pass (measured ~8 us for 128k ids; the bool copy it replaces was ~2 us more); the
    # uint8 0/1 result is viewed as bool (same bytes), torch shares its memory
    bits = np.unpackbits(p.view(np.uint8), axis=-1, bitorder="little")
    return torch.from_numpy(bits.view(bool))[..., :vocab_size]


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """bool [..., V] → int32 [..., ceil(V/32)] (a new CPU tensor; inverse of
    :func:`unpack_bits`)."""
    m = mask.detach().cpu().numpy().astype(bool)
    V = m.shape[-1]
    W = (V + 31) // 32
    pad = W * 32 - V
    if pad:
        m = np.concatenate([m, np.zeros(m.shape[:-1] + (pad,), dtype=bool)], axis=-1)
    packed = np.packbits(m, axis=-1, bitorder="little")
    return torch.from_numpy(np.ascontiguousarray(packed).view(np.int32))
