"""Packed token masks applied to logits: :func:`apply_token_bitmask` (a new tensor) and
:func:`apply_token_bitmask_inplace` (mutates the logits, as xgrammar's and llguidance's do).

Semantics, for ``scores`` float [B, V] and ``packed`` int32 [B, W] (bit ``v % 32`` of word
``v // 32`` set: token ``v`` allowed; ids at or past ``32 W`` are not allowed)::

    for b in range(B):
        for v in range(V):
            out[b, v] = scores[b, v] if allowed(b, v) else -inf

On CPU float32 / float64 the work follows the mask's shape, read one 32-bit word at a time:

* **sparse** (at most ``_SPARSE_WORDS`` of the words have a bit set — a JSON structure step,
  a digit, a keyword: 85–100 % of the words are zero in the bench's walks): the few non-zero
  words' 32 scores are gathered, the row is filled with ``-inf``, and the gathered scores, each
  ``np.fmin``'d with its bit's ``+inf``/``-inf`` bound, are scattered back — one write pass over
  the row and work on the allowed words only;
* **mixed** (inside a string, an e-mail local part: most words have bits set): row by row, the
  mask's bytes index a table of eight ``+inf``/``-inf`` bounds each (``np.take``; a row whose
  mask equals the previous row's reuses them, and each thread keeps the bounds of its last few
  distinct masks, :class:`_BoundsCache`, since decoding meets one mask step after step) and
  one ``np.fmin`` with the scores writes the row — no bool row.

Elsewhere (other dtypes, other devices) a torch ``where`` (in place: ``masked_fill_``) on the
unpacked bool mask.

Allowed entries are copied bit for bit, except that a NaN score of an allowed token becomes
``+inf`` on the CPU float32 / float64 path (``fmin``'s rule); a disallowed token is ``-inf``
whatever its score, NaN included.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch

from ..fsa.errors import InvalidArgumentError

__all__ = ["apply_token_bitmask", "apply_token_bitmask_inplace", "unpack_token_bitmask"]

# the sparse path is taken when at most this fraction of the mask's words is non-zero.  Llama-3
# (4,008 words per row), batch 16, in place, real masks from bench/mask_bench.py's walks, 2-core
# VM: sparse 0.2-0.3 ms against 0.45-0.65 ms for the row-by-row path at <= 1.3 % non-zero words
# (85-100 % of the walks' steps); the two cost about the same at 10-14 % (~0.6 ms)
_SPARSE_WORDS = 0.1


def unpack_token_bitmask(packed: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int32 [B, W] packed masks (bit ``v % 32`` of word ``v // 32``) → bool [B, vocab_size],
    on ``packed``'s device; ``W * 32 >= vocab_size``."""
    if packed.device.type == "cpu":
        p = packed.contiguous().numpy().view(np.uint8)
        bits = np.unpackbits(p, axis=-1, bitorder="little", count=vocab_size)
        return torch.from_numpy(bits.view(bool))
    u8 = packed.contiguous().view(torch.uint8)  # little-endian words: byte k holds bits 8k..
    weights = torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=u8.device)
    return (u8.unsqueeze(-1) & weights).ne(0).reshape(packed.shape[0], -1)[:, :vocab_size]


# byte value -> 8 float bounds (bit k of the byte set: +inf, else -inf), per dtype
_BYTE_BOUNDS: dict[Any, np.ndarray] = {}


def _byte_bounds(dtype) -> np.ndarray:
    t = _BYTE_BOUNDS.get(dtype)
    if t is None:
        bits = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)
        t = _BYTE_BOUNDS[dtype] = np.where(bits, np.inf, -np.inf).astype(dtype)  # [256, 8]
    return t


def _apply_numpy(src: np.ndarray, words: np.ndarray, dst: np.ndarray | None) -> np.ndarray:
    """``src`` masked by ``words``, written into ``dst`` (``None``: a new C-contiguous array),
    which is returned.

    ``src``, ``dst``: float32/64 [B, V] (any strides; ``dst`` may be ``src`` itself);
    ``words``: int32 [B, W], C-contiguous.  Mutates ``dst`` only.
    """
    B, V = src.shape
    table = _byte_bounds(src.dtype)
    Wm = min(V // 32, words.shape[1])  # words whose 32 ids all lie inside the scores
    end = 32 * Wm
    wm = words[:, :Wm]
    sparse = np.count_nonzero(wm) <= _SPARSE_WORDS * B * Wm
    if sparse and Wm:  # gather the allowed words' scores before ``dst`` (maybe ``src``) is hit
        flat = np.flatnonzero(wm != 0)  # flatnonzero on bools: ~4x faster than on the words
        r, c = np.divmod(flat, Wm)
        blocks = _word_blocks(src, Wm)
        kept, bound = _scratch(len(flat), src.dtype)  # [k, 32] each, reused per thread
        if blocks is not None:
            np.take(blocks, flat, axis=0, out=kept, mode="wrap")
        else:
            kept[...] = src[:, :end].reshape(B, Wm, 32)[r, c]
        nzw = np.take(words.reshape(-1), flat + r * (words.shape[1] - Wm))  # wm[r, c], faster
        np.take(table, nzw.view(np.uint8), axis=0, out=bound.reshape(-1, 8), mode="wrap")
        np.fmin(kept, bound, out=kept)
    if dst is None:
        if sparse or end < V:
            dst = np.empty((B, V), dtype=src.dtype)
    if end < V:  # a partial last word, or ids past the mask's 32 W (never allowed)
        tail = np.full((B, V - end), -np.inf, dtype=src.dtype)
        if Wm < words.shape[1]:
            bits = np.take(table, np.ascontiguousarray(words[:, Wm]).view(np.uint8), axis=0)
            k = min(V - end, 32)
            np.fmin(src[:, end:end + k], bits.reshape(B, 32)[:, :k], out=tail[:, :k])
        dst[:, end:] = tail
    if not Wm:
        return dst
    if sparse:
        d = dst[:, :end]
        torch.from_numpy(d).fill_(float("-inf"))  # torch's fill: 112 us vs numpy's 144 (8 MB)
        blocks = _word_blocks(dst, Wm)
        if blocks is not None:  # one index array: ~2x faster than (row, word) pairs
            blocks[flat] = kept
        else:
            d.reshape(B, Wm, 32)[r, c] = kept
        return dst
    u8 = (wm if wm.flags.c_contiguous else np.ascontiguousarray(wm)).view(np.uint8)
    if dst is None:
        dst = np.empty((B, V), dtype=src.dtype)
    # row by row: a row whose mask equals the previous row's reuses its bounds (rows of one
    # prompt's samples, beams); the others take theirs from the thread's cache of recent masks
    # (_BoundsCache) or compute them: batch 16, Llama-3, 2-core VM: 0.55 ms for 16 distinct
    # masks, against 0.95 ms for one take and one fmin over the whole [B, V]
    cache = _bounds_cache(src.dtype, Wm)
    bounds = None
    for b in range(B):
        if b == 0 or not np.array_equal(u8[b], u8[b - 1]):
            bounds = cache.bounds(u8[b], table)
        np.fmin(src[b, :end], bounds, out=dst[b, :end])
    return dst


class _BoundsCache:
    """One thread's bounds (float [32 Wm], ``+inf`` where the mask allows, ``-inf`` elsewhere)
    of the last :data:`_BOUNDS_KEPT` distinct mixed masks of one width and dtype.

    Decoding meets the same mixed mask step after step (every character of a JSON string, of an
    e-mail's local part), and computing the bounds (``np.take`` of eight per mask byte) costs
    more than the ``fmin`` that uses them: Llama-3, one row, 2-core VM: take + fmin 79 us, a
    cached row's fmin 35 us.  Lookup: a row's sum of words as a fingerprint, then an exact
    comparison with the stored mask (equal fingerprints of different masks are a miss, never a
    wrong mask).  Evicts the least recently used entry and reuses its arrays."""

    def __init__(self, dtype, Wm: int):
        self.dtype, self.Wm = dtype, Wm
        self.entries: list[tuple[int, np.ndarray, np.ndarray]] = []  # (fingerprint, mask, bounds)

    def bounds(self, row: np.ndarray, table: np.ndarray) -> np.ndarray:
        """Bounds of ``row`` (the mask's bytes, uint8 [4 Wm]); the array is the cache's: read
        it before the next call."""
        fp = _fingerprint(row)
        for i, (f, key, bnd) in enumerate(self.entries):
            if f == fp and np.array_equal(key, row):
                if i:
                    self.entries.insert(0, self.entries.pop(i))
                return bnd
        if len(self.entries) < _BOUNDS_KEPT:
            key = np.empty_like(row)
            bnd = np.empty(8 * row.size, dtype=self.dtype)
        else:
            _, key, bnd = self.entries.pop()
        key[...] = row
        np.take(table, row, axis=0, out=bnd.reshape(-1, 8), mode="wrap")  # "wrap": no buffering
        self.entries.insert(0, (fp, key, bnd))
        return bnd


# masks kept per thread (Llama-3 float32: 528 KB each).  The bench's walks meet 1-3 distinct
# mixed masks in a row (a string's content, its escapes, the closing step)
_BOUNDS_KEPT = 8


def _fingerprint(row: np.ndarray) -> int:
    """A row's words summed (uint64): cheap (~2 us for Llama-3's 16 KB), equal for equal rows."""
    return int(row.view(np.uint32).sum(dtype=np.uint64))


def _bounds_cache(dtype, Wm: int) -> _BoundsCache:
    """This thread's :class:`_BoundsCache` for ``dtype`` and ``Wm`` words (a new one, and the
    old one dropped, when either changes)."""
    c = getattr(_local, "bounds", None)
    if c is None or c.dtype != dtype or c.Wm != Wm:
        c = _local.bounds = _BoundsCache(dtype, Wm)
    return c


def _word_blocks(a: np.ndarray, Wm: int) -> np.ndarray | None:
    """``a[:, :32 Wm]`` as a [B * Wm, 32] view (one 32-id block per mask word), or None where
    the rows are not laid end to end (a vocabulary not a multiple of 32, strided scores)."""
    B = a.shape[0]
    part = a[:, : 32 * Wm]
    if part.strides[1] != a.itemsize or (B > 1 and part.strides[0] != 32 * Wm * a.itemsize):
        return None
    return part.reshape(B * Wm, 32)


# scratch arrays, one set per thread (the last shape / dtype used): arrays over glibc's mmap
# threshold are fresh pages on every call otherwise — a 1.1 MB pair of [k, 32] arrays (batch
# 16, 14 % of the words non-zero) cost ~0.2 ms of page faults per call on this VM
_local = threading.local()


def _scratch(k: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The sparse path's gathered scores and bounds, float [k, 32] each."""
    buf = getattr(_local, "pair", None)
    if buf is None or buf.shape[1] < k or buf.dtype != dtype:
        buf = _local.pair = np.empty((2, max(k, 64), 32), dtype=dtype)
    return buf[0, :k], buf[1, :k]


def _words(packed: torch.Tensor) -> np.ndarray:
    return packed.to("cpu").to(torch.int32).contiguous().numpy()


def apply_token_bitmask(scores: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """``scores`` float [B, V] with disallowed entries set to ``-inf``: a new tensor (on
    ``scores``' device and dtype); ``scores`` is not mutated.

    ``packed``: int32 [B, W] (moved to ``scores``' device); ids at or past ``32 W`` are not
    allowed.  Allowed entries are copied exactly, except that a NaN score of an allowed token
    becomes ``+inf`` on CPU float32 / float64.  Paths: the module docstring.
    """
    B, V = scores.shape
    if scores.device.type == "cpu" and scores.dtype in (torch.float32, torch.float64):
        return torch.from_numpy(_apply_numpy(scores.detach().numpy(), _words(packed), None))
    allowed = _allowed(packed, scores)
    return torch.where(allowed, scores, torch.full((), float("-inf"), dtype=scores.dtype,
                                                   device=scores.device))


def apply_token_bitmask_inplace(scores: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """Set the disallowed entries of ``scores`` float [B, V] to ``-inf`` in place (mutates
    ``scores``; returns it).  Same semantics as :func:`apply_token_bitmask`, without allocating
    the [B, V] result — what xgrammar's and llguidance's ``apply_token_bitmask_inplace`` do.

    Raises :class:`~tractable.fsa.errors.InvalidArgumentError` when ``scores`` requires grad
    (autograd cannot follow an in-place write through numpy).
    """
    if scores.requires_grad:
        raise InvalidArgumentError("apply_token_bitmask_inplace: scores requires grad; mask a "
                                   "detached tensor or use apply_token_bitmask")
    if scores.device.type == "cpu" and scores.dtype in (torch.float32, torch.float64):
        a = scores.numpy()
        _apply_numpy(a, _words(packed), a)
        return scores
    allowed = _allowed(packed, scores)
    scores.masked_fill_(~allowed, float("-inf"))
    return scores


def _allowed(packed: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """bool [B, V] on ``scores``' device (ids past the mask's ``32 W``: False)."""
    B, V = scores.shape
    p = packed.to(scores.device)
    if p.shape[1] * 32 < V:
        p = torch.cat([p, p.new_zeros(B, (V + 31) // 32 - p.shape[1])], dim=1)
    return unpack_token_bitmask(p, V)
