"""Batched GCD / LCD token masks, read straight from the bit-packed edge labels.

Paper 002 §3.2: the mask ``m_t = 1{α_tᵀ β_t}``.  For a batch of requests with state sets
``active`` and budgets ``remaining`` (tokens that may still be generated, EOS included), token
``v`` is allowed iff some edge leaving an active state carries ``v`` and (GCD only) enters a
state that can still accept within the rest of the budget::

    for b in range(B):                               # request
        if remaining[b] < 1: continue               # nothing may be generated
        for e in range(E):                           # edge
            if not active[b, edge_src[e]]: continue
            if mode == "gcd" and distance[edge_dst[e]] > remaining[b] - 1: continue
            for v in label_set(edge_label[e]):       # bits of labels[edge_label[e]]
                mask[b, v] = 1
        if any(active[b] & final):                   # EOS ends the sequence in an accepting state
            for v in eos_token_ids: mask[b, v] = 1

Shapes and dtypes (S states, E edges, L label sets, V vocabulary, W = ceil(V / 32)):

* ``active``: bool or uint8 [B, S]; ``remaining``: int64 [B] (or an int, or ``None`` = no budget);
* tables (:class:`MaskTables`, built once by :func:`prepare_mask`): ``edge_src``, ``edge_dst``,
  ``edge_label`` int64 [E]; ``labels`` int32 [L, W] (token ``v`` in set ``l`` iff
  ``(labels[l, v >> 5] >> (v & 31)) & 1``); ``distance`` int64 [S] (shortest number of tokens
  from each state to an accepting state, 0 if final, :data:`UNREACHABLE` if none);
  ``final`` uint8 [S]; ``eos_words`` int32 [W] (the EOS ids as a packed row); ``src_order``
  int64 [E] and ``src_ptr`` int64 [S + 1] (the edges grouped by source state: those of ``s``
  are ``src_order[src_ptr[s]:src_ptr[s + 1]]``; read by the torch path only);
* result: packed int32 [B, W] (bits past ``V`` in the last word are always 0), the layout of
  xgrammar's token bitmask; :func:`unpack_mask` gives bool [B, V].

Since ``distance[s] >= 0``, "``distance[dst] <= remaining - 1``" is evaluated as
``distance[dst] < remaining`` (no overflow at :data:`UNREACHABLE`).  ``remaining < 1`` gives an
empty row.  EOS ids never appear in ``labels`` (they emit no text).

Triton path (two launches after one memset): ``_allowed_labels`` (grid ``(B, ceil(E/BLOCK_E))``)
marks the label sets reachable per request, ``allowed[b, l]``, and the EOS flag per request;
``_or_labels`` (grid ``(B, ceil(W/BLOCK_W))``) ORs the marked rows of ``labels`` word-tile by
word-tile, skipping blocks of label sets none of which is marked, adds the EOS bits, clears the
tail bits and optionally writes the bool [B, V] mask in the same pass.  Nothing is mutated but
the output buffers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from ..fsa.errors import InvalidArgumentError, TokenError
from ._common import MODES as _MODES
from ._common import UNREACHABLE
from ._triton import build, resolve_backend

__all__ = [
    "UNREACHABLE",
    "MaskTables",
    "prepare_mask",
    "token_mask",
    "token_mask_ref",
    "unpack_mask",
    "pack_mask",
]



@dataclass(frozen=True, eq=False)
class MaskTables:
    """Device-resident tensors :func:`token_mask` reads (see the module docstring).

    Build with :func:`prepare_mask` (or :meth:`from_automaton`); move with :meth:`to`.
    """

    edge_src: torch.Tensor
    edge_dst: torch.Tensor
    edge_label: torch.Tensor
    labels: torch.Tensor
    distance: torch.Tensor
    final: torch.Tensor
    eos_words: torch.Tensor
    vocab_size: int
    num_states: int
    src_order: torch.Tensor
    src_ptr: torch.Tensor

    @property
    def device(self) -> torch.device:
        return self.labels.device

    @property
    def num_words(self) -> int:
        return int(self.labels.shape[1])

    def to(self, device: str | torch.device) -> MaskTables:
        return MaskTables(
            self.edge_src.to(device), self.edge_dst.to(device), self.edge_label.to(device),
            self.labels.to(device), self.distance.to(device), self.final.to(device),
            self.eos_words.to(device), self.vocab_size, self.num_states,
            self.src_order.to(device), self.src_ptr.to(device),
        )

    @classmethod
    def from_automaton(cls, automaton, distance: torch.Tensor | None = None) -> MaskTables:
        """Tables of a :class:`~tractable.fsa.automaton.TokenAutomaton` on its device.

        ``distance`` defaults to :func:`tractable.kernels.reachability.distance_to_accept`.
        """
        if distance is None:
            from .reachability import distance_to_accept

            distance = distance_to_accept(
                automaton.edge_src, automaton.edge_dst, automaton.edge_label, automaton.labels,
                automaton.final, backend="torch",
            )
        return prepare_mask(
            automaton.edge_src, automaton.edge_dst, automaton.edge_label, automaton.labels,
            automaton.final, distance, automaton.vocab_size, automaton.eos_token_ids,
        )


def prepare_mask(
    edge_src: torch.Tensor,
    edge_dst: torch.Tensor,
    edge_label: torch.Tensor,
    labels: torch.Tensor,
    final: torch.Tensor,
    distance: torch.Tensor,
    vocab_size: int,
    eos_token_ids=(),
) -> MaskTables:
    """Check and convert the automaton tensors once (all on ``labels.device``).

    Raises:
        ValueError: inconsistent shapes or dtypes, or an ``edge_src`` outside ``[0, S)``.
        TokenError: an EOS id outside ``[0, vocab_size)``.
    """
    dev = labels.device
    W = (vocab_size + 31) // 32
    if labels.dim() != 2 or labels.shape[1] != W:
        raise InvalidArgumentError(f"labels must be int32 [L, {W}] for vocab_size {vocab_size}, "
                                   f"got {tuple(labels.shape)}")
    E = int(edge_src.shape[0])
    for name, t in (("edge_dst", edge_dst), ("edge_label", edge_label)):
        if t.shape != (E,):
            raise InvalidArgumentError(f"{name} must have shape ({E},), got {tuple(t.shape)}")
    S = int(final.shape[0])
    if distance.shape != (S,):
        raise InvalidArgumentError(f"distance must have shape ({S},), got {tuple(distance.shape)}")
    eos = torch.zeros(W, dtype=torch.int64)
    for t in eos_token_ids:
        t = int(t)
        if not 0 <= t < vocab_size:
            raise TokenError(f"EOS id {t} is outside the vocabulary [0, {vocab_size})", t)
        eos[t >> 5] |= 1 << (t & 31)
    # int64 → int32 keeps the low 32 bits (two's complement), as the packed layout wants
    eos_words = torch.where(eos >= 2**31, eos - 2**32, eos).to(torch.int32)
    src = edge_src.to(dev, torch.int64).contiguous()
    if E and not 0 <= int(src.min()) <= int(src.max()) < S:
        raise InvalidArgumentError(f"edge_src must lie in [0, {S})")
    # edges grouped by source state (the torch path walks only the active states' edges)
    src_order = torch.argsort(src, stable=True)
    src_ptr = torch.zeros(S + 1, dtype=torch.int64, device=dev)
    src_ptr[1:] = torch.cumsum(torch.bincount(src, minlength=S), 0)
    return MaskTables(
        src,
        edge_dst.to(dev, torch.int64).contiguous(),
        edge_label.to(dev, torch.int64).contiguous(),
        labels.to(dev, torch.int32).contiguous(),
        distance.to(dev, torch.int64).contiguous(),
        final.to(dev).to(torch.uint8).contiguous(),
        eos_words.to(dev),
        int(vocab_size),
        S,
        src_order,
        src_ptr,
    )


# ---------------------------------------------------------------------------- helpers


_BIT_TABLES: dict[torch.device, torch.Tensor] = {}


def _bit_table(device) -> torch.Tensor:
    """bool [256, 8]: bit ``j`` of byte ``x`` at ``[x, j]``, cached per device."""
    key = torch.device(device)
    t = _BIT_TABLES.get(key)
    if t is None:
        t = _BIT_TABLES[key] = ((torch.arange(256)[:, None] >> torch.arange(8)) & 1).bool().to(
            device)
    return t


def unpack_mask(packed: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int32 [..., W] → bool [..., vocab_size], on the tensor's device.

    Little-endian: bit ``v & 31`` of word ``v >> 5`` is bit ``v & 7`` of byte ``v >> 3``, so
    one lookup per byte in a [256, 8] table gives 8 bools at once.  At B = 64, V = 128,256 (one
    thread, loaded 2-core box) this took 11 ms against 37 ms for shifting every int32 word 32
    times, which also made an int32 [B, W, 32] temporary 4× the size of the result.
    """
    lead = packed.shape[:-1]
    if sys.byteorder == "little" and packed.dtype == torch.int32:
        by = packed.contiguous().view(torch.uint8).reshape(-1).to(torch.int32)
        bits = torch.index_select(_bit_table(packed.device), 0, by)
        return bits.reshape(*lead, packed.shape[-1] * 32)[..., :vocab_size]
    shifts = torch.arange(32, dtype=torch.int32, device=packed.device)
    bits = ((packed.to(torch.int32).unsqueeze(-1) >> shifts) & 1).bool()
    return bits.reshape(*lead, packed.shape[-1] * 32)[..., :vocab_size]


def pack_mask(mask: torch.Tensor) -> torch.Tensor:
    """bool [..., V] → int32 [..., ceil(V/32)], on the tensor's device."""
    V = mask.shape[-1]
    W = (V + 31) // 32
    m = torch.zeros(*mask.shape[:-1], W * 32, dtype=torch.int64, device=mask.device)
    m[..., :V] = mask.to(torch.int64)
    weights = torch.ones(32, dtype=torch.int64, device=mask.device) << torch.arange(
        32, device=mask.device)
    words = (m.reshape(*mask.shape[:-1], W, 32) * weights).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _tail_mask(V: int, W: int, device) -> torch.Tensor:
    """int32 [W]: all ones except the bits past V in the last word."""
    tm = torch.full((W,), -1, dtype=torch.int32, device=device)
    r = V - 32 * (W - 1) if W else 32
    if W and r < 32:
        tm[-1] = (1 << r) - 1
    return tm


def _inputs(active: torch.Tensor, remaining, tables: MaskTables, mode: str):
    if mode not in _MODES:
        raise InvalidArgumentError(f"mode must be one of {_MODES}, got {mode!r}")
    if active.dim() != 2 or active.shape[1] != tables.num_states:
        raise InvalidArgumentError(
            f"active must be [B, {tables.num_states}], got {tuple(active.shape)}")
    B = active.shape[0]
    dev = active.device
    if remaining is None:
        rem = torch.full((B,), UNREACHABLE, dtype=torch.int64, device=dev)
    elif isinstance(remaining, int):
        rem = torch.full((B,), remaining, dtype=torch.int64, device=dev)
    else:
        rem = remaining.to(dev, torch.int64).reshape(-1)
        if rem.shape[0] != B:
            raise InvalidArgumentError(
                f"remaining must have shape ({B},), got {tuple(remaining.shape)}")
    act = active.to(torch.uint8) if active.dtype != torch.uint8 else active
    return act.contiguous(), rem.contiguous()


# ---------------------------------------------------------------------------- torch reference


def token_mask_ref(
    active: torch.Tensor, remaining, tables: MaskTables, mode: str = "gcd"
) -> torch.Tensor:
    """Pure-torch :func:`token_mask` → packed int32 [B, W] (any device).

    Sparse in the state sets: only the out-edges of the active ``(request, state)`` pairs are
    visited (``tables.src_order`` / ``src_ptr``), which marks ``allowed`` bool [B, L]; requests
    with the same marked label sets (and EOS flag) share one OR of their ``labels`` rows, the
    rows of the largest sets first.  Work: ``O(Σ active out-degree + Σ_unique |set| · W + B·W)``.
    Measured at V = 128,256 on bench/kernel_bench.py's JSON-schema automaton (one thread on the
    loaded 2-core box, same process and states): the dense version (a [B, E] edge test, then
    ``max |set|`` passes of a masked [B, W] OR) took 6.9 / 23 / 515 ms at B = 16 / 64 / 1024,
    this one 1.2 / 2.9 / 32 ms.
    """
    act, rem = _inputs(active, remaining, tables, mode)
    B, W, L = act.shape[0], tables.num_words, tables.labels.shape[0]
    dev = act.device
    live = rem >= 1
    if B == 0 or W == 0:
        return torch.zeros(B, W, dtype=torch.int32, device=dev)
    # (request, active state) pairs → their out-edges
    b_s, s = ((act != 0) & live[:, None]).nonzero(as_tuple=True)
    start = tables.src_ptr[s]
    deg = tables.src_ptr[s + 1] - start
    n = int(deg.sum()) if deg.numel() else 0
    b_e = torch.repeat_interleave(b_s, deg, output_size=n)
    first = torch.repeat_interleave(start - (torch.cumsum(deg, 0) - deg), deg, output_size=n)
    e = tables.src_order[first + torch.arange(n, device=dev)]
    if mode == "gcd":
        keep = tables.distance[tables.edge_dst[e]] < rem[b_e]
        b_e, e = b_e[keep], e[keep]
    # allowed[b, l] for l < L; column L: the EOS flag
    allowed = torch.zeros(B, L + 1, dtype=torch.bool, device=dev)
    allowed[b_e, tables.edge_label[e]] = True
    allowed[:, L] = (act.bool() & tables.final.bool()[None, :]).any(1) & live
    if B > 1:
        uniq, inv = torch.unique(allowed, dim=0, return_inverse=True)
    else:
        uniq, inv = allowed, None
    counts = uniq[:, :L].sum(1)
    U = uniq.shape[0]
    by_size = None
    if U > 1:
        by_size = torch.argsort(counts, descending=True, stable=True)
        uniq, counts = uniq[by_size], counts[by_size]
    out = torch.zeros(U, W, dtype=torch.int32, device=dev)
    K = int(counts[0]) if U and L else 0
    if K:
        # marked label ids first (row u: ids[u, :counts[u]]); rows sorted by count, so the
        # rows still busy at step k are a prefix
        ids = torch.argsort(uniq[:, :L].to(torch.uint8), dim=1, descending=True,
                            stable=True)[:, :K]
        busy = (counts[None, :] > torch.arange(K, device=dev)[:, None]).sum(1).tolist()
        buf = torch.empty(U, W, dtype=torch.int32, device=dev)
        for k, m in enumerate(busy):
            torch.index_select(tables.labels, 0, ids[:m, k], out=buf[:m])
            out[:m] |= buf[:m]
    out[uniq[:, L]] |= tables.eos_words
    if tables.vocab_size % 32:
        out &= _tail_mask(tables.vocab_size, W, dev)[None, :]
    if by_size is None:
        return out if inv is None else out[inv]
    # back to the requests' order
    rank = torch.empty_like(by_size)
    rank[by_size] = torch.arange(U, device=dev)
    return out[rank[inv]]


# ---------------------------------------------------------------------------- Triton


def _kernels(triton, tl):
    @triton.jit
    def _allowed_labels(
        active_ptr, rem_ptr, src_ptr, dst_ptr, lab_ptr, dist_ptr, final_ptr,
        allowed_ptr, eos_ptr, S, E, L,
        GCD: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_S: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        pid = tl.program_id(1)
        rem = tl.load(rem_ptr + b)
        offs = pid * BLOCK_E + tl.arange(0, BLOCK_E)
        m = offs < E
        src = tl.load(src_ptr + offs, mask=m, other=0)
        act = tl.load(active_ptr + b * S + src, mask=m, other=0)
        # (vector & scalar-bool yields int32 under the 3.9 interpreter: compare vectors only)
        rem_v = tl.zeros([BLOCK_E], dtype=tl.int64) + rem
        ok = m & (act != 0) & (rem_v >= 1)
        if GCD:
            dst = tl.load(dst_ptr + offs, mask=m, other=0)
            d = tl.load(dist_ptr + dst, mask=ok, other=0)
            ok = ok & (d < rem_v)
        lab = tl.load(lab_ptr + offs, mask=m, other=0)
        one = tl.full([BLOCK_E], 1, tl.uint8)
        tl.store(allowed_ptr + b * L + lab, one, mask=ok)
        if pid == 0:
            acc = tl.zeros([BLOCK_S], dtype=tl.int32)
            for s0 in range(0, S, BLOCK_S):
                so = s0 + tl.arange(0, BLOCK_S)
                sm = so < S
                a = tl.load(active_ptr + b * S + so, mask=sm, other=0)
                f = tl.load(final_ptr + so, mask=sm, other=0)
                acc = acc | ((a != 0) & (f != 0)).to(tl.int32)
            flag = (tl.max(acc, axis=0) > 0) & (rem >= 1)
            tl.store(eos_ptr + b, flag.to(tl.uint8))

    @triton.jit
    def _or_labels(
        allowed_ptr, eos_ptr, labels_ptr, eos_words_ptr, out_ptr, bool_ptr, L, W, V,
        WRITE_BOOL: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_W: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        wo = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
        wm = wo < W
        acc = tl.zeros([BLOCK_W], dtype=tl.int32)
        for l0 in range(0, L, BLOCK_L):
            lo = l0 + tl.arange(0, BLOCK_L)
            f = tl.load(allowed_ptr + b * L + lo, mask=lo < L, other=0) != 0
            if tl.max(f.to(tl.int32), axis=0) > 0:
                tile = tl.load(
                    labels_ptr + lo.to(tl.int64)[:, None] * W + wo[None, :],
                    mask=f[:, None] & wm[None, :], other=0,
                )
                acc = acc | tl.reduce_or(tile, 0)
        eos = tl.load(eos_ptr + b)
        ew = tl.load(eos_words_ptr + wo, mask=wm, other=0)
        acc = acc | tl.where(eos != 0, ew, 0)
        # clear the bits past V in the last word
        nbits = (V - wo * 32).to(tl.int64)
        low = ((tl.full([BLOCK_W], 1, tl.int64) << tl.minimum(tl.maximum(nbits, 0), 31)) - 1)
        tail = tl.where(nbits >= 32, -1, tl.where(nbits <= 0, 0, low)).to(tl.int32)
        acc = acc & tail
        tl.store(out_ptr + b * W + wo, acc, mask=wm)
        if WRITE_BOOL:
            sh = tl.arange(0, 32)
            bits = (acc[:, None] >> sh[None, :]) & 1
            v = wo[:, None] * 32 + sh[None, :]
            tl.store(bool_ptr + b * V + v, bits.to(tl.uint8), mask=v < V)

    return _allowed_labels, _or_labels


# measured under TRITON_INTERPRET on CPU only so far: the block sizes bound the tile at
# 16 x 128 int32 (8 KiB); retune on a GPU (bench/kernel_bench.py)
_BLOCK_E = 128
_BLOCK_S = 128
_BLOCK_L = 16
_BLOCK_W = 128


def _token_mask_triton(act, rem, tables: MaskTables, mode: str, want_bool: bool):
    allowed_labels, or_labels = build("token_mask", _kernels)
    B, S = act.shape
    E = int(tables.edge_src.shape[0])
    L, W = tables.labels.shape
    V = tables.vocab_size
    dev = act.device
    flags = torch.zeros(B * (L + 1), dtype=torch.uint8, device=dev)
    allowed, eos = flags[: B * L], flags[B * L:]
    out = torch.empty(B, W, dtype=torch.int32, device=dev)
    out_bool = torch.empty(B, V, dtype=torch.bool, device=dev) if want_bool else None
    if B == 0:
        return out, out_bool
    grid1 = (B, max(1, triton_cdiv(E, _BLOCK_E)))
    allowed_labels[grid1](
        act, rem, tables.edge_src, tables.edge_dst, tables.edge_label, tables.distance,
        tables.final, allowed, eos, S, E, L,
        GCD=(mode == "gcd"), BLOCK_E=_BLOCK_E, BLOCK_S=_BLOCK_S,
    )
    if W:
        grid2 = (B, triton_cdiv(W, _BLOCK_W))
        or_labels[grid2](
            allowed, eos, tables.labels, tables.eos_words, out,
            out_bool.view(torch.uint8) if want_bool else out, L, W, V,
            WRITE_BOOL=want_bool, BLOCK_L=_BLOCK_L, BLOCK_W=_BLOCK_W,
        )
    return out, out_bool


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------- public op


def token_mask(
    active: torch.Tensor,
    remaining,
    tables: MaskTables,
    *,
    mode: str = "gcd",
    return_bool: bool = False,
    backend: str = "auto",
):
    """Packed int32 [B, W] GCD (``mode="gcd"``, budget-aware) or LCD mask; with
    ``return_bool=True`` the pair ``(packed, bool [B, V])``.

    ``active``: bool/uint8 [B, S] state sets; ``remaining``: int64 [B], int, or ``None``
    (no budget).  Inputs are not mutated.

    Raises:
        ValueError: bad ``mode`` or shapes.
        KernelBackendError: see :func:`tractable.kernels._triton.resolve_backend`.
    """
    be = resolve_backend(backend, active, tables.labels, op="token_mask")
    act, rem = _inputs(active, remaining, tables, mode)
    if be == "torch":
        packed = token_mask_ref(act, rem, tables, mode)
        return (packed, unpack_mask(packed, tables.vocab_size)) if return_bool else packed
    packed, as_bool = _token_mask_triton(act, rem, tables, mode, return_bool)
    return (packed, as_bool) if return_bool else packed
