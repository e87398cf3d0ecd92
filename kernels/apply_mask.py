"""Apply a packed token mask to logits, optionally fused with temperature and (log-)softmax.

Semantics as a loop (``W = ceil(V / 32)``, ``T`` = temperature, 1 if not given)::

    for b in range(B):
        for v in range(V):
            x = logits[b, v] / T                      # in float32
            allowed = (mask[b, v >> 5] >> (v & 31)) & 1
            z[b, v] = x if allowed else -inf
        if normalize == "softmax":     out[b] = exp(z[b] - max(z[b])) / sum(exp(z[b] - max(z[b])))
        elif normalize == "log_softmax": out[b] = z[b] - max(z[b]) - log(sum(exp(...)))
        else:                          logits[b] = z[b]  (in place, rounded to logits.dtype)

Shapes and dtypes: ``logits`` float32 / bfloat16 / float16 [B, V] (last dimension contiguous);
``mask`` int32 [B, W] (the layout of :func:`tractable.kernels.token_mask.token_mask` and of
xgrammar's token bitmask).  With ``normalize=None`` the logits are **mutated** and returned;
with ``normalize="softmax"`` or ``"log_softmax"`` the logits are left untouched and a new
float32 [B, V] tensor is returned.  A row with no allowed token gives NaN probabilities (as
``torch.softmax`` of an all ``-inf`` row does): callers check that a mask row is not empty.

Triton: ``_mask_inplace`` (grid ``(B, ceil(V/BLOCK_V))``) for the in-place case;
``_mask_softmax`` (grid ``(B,)``) makes one online max / sum pass over the row and one
writing pass.  Temperature divides with IEEE rounding (``div_rn``), so the in-place result is
bit-identical to the torch path.
"""

from __future__ import annotations

import torch

from ..fsa.errors import InvalidArgumentError
from ._triton import build, resolve_backend
from .token_mask import unpack_mask

__all__ = ["apply_mask", "apply_mask_ref"]

_NORMALIZE = (None, "softmax", "log_softmax")
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check(logits: torch.Tensor, mask: torch.Tensor, temperature, normalize):
    if normalize not in _NORMALIZE:
        raise InvalidArgumentError(f"normalize must be one of {_NORMALIZE}, got {normalize!r}")
    if logits.dim() != 2 or logits.dtype not in _DTYPES:
        raise InvalidArgumentError(f"logits must be a 2-D float32/bfloat16/float16 tensor, got "
                                   f"{logits.dtype} {tuple(logits.shape)}")
    B, V = logits.shape
    W = (V + 31) // 32
    if mask.shape != (B, W) or mask.dtype != torch.int32:
        raise InvalidArgumentError(
            f"mask must be int32 [{B}, {W}] for logits {tuple(logits.shape)}, got "
            f"{mask.dtype} {tuple(mask.shape)}")
    if temperature is not None and not float(temperature) > 0:
        raise InvalidArgumentError(f"temperature must be > 0, got {temperature}")


# ---------------------------------------------------------------------------- torch reference


def apply_mask_ref(
    logits: torch.Tensor, mask: torch.Tensor, *, temperature: float | None = None,
    normalize: str | None = None,
) -> torch.Tensor:
    """Pure-torch :func:`apply_mask` (same mutation contract).

    ``torch.where(allowed, x, -inf, out=...)`` with the byte-table unpacking of
    :func:`unpack_mask`: at V = 128,256 on real masks (bench/kernel_bench.py, one thread on the
    loaded 2-core box) 3.3 / 20 / 564 ms at B = 16 / 64 / 1024, against 8.8 / 116 / 2506 ms for
    ``masked_fill_(~unpacked)`` with an int32 [B, W, 32] shift temporary.  (``where`` on CPU
    branches per element: on random 50 % masks it is ~5× slower than on real ones.)
    """
    _check(logits, mask, temperature, normalize)
    allowed = unpack_mask(mask, logits.shape[1])
    ninf = torch.tensor(float("-inf"), dtype=torch.float32, device=logits.device)
    if normalize is None and temperature is None:
        return torch.where(allowed, logits, ninf.to(logits.dtype), out=logits)
    x = logits.float()
    if temperature is not None:
        x = x / float(temperature)
    x = torch.where(allowed, x, ninf, out=x if x is not logits else None)
    if normalize is None:
        return logits.copy_(x)
    return torch.softmax(x, -1) if normalize == "softmax" else torch.log_softmax(x, -1)


# ---------------------------------------------------------------------------- Triton


def _kernels(triton, tl):
    @triton.jit
    def _mask_inplace(
        x_ptr, m_ptr, stride_x, W, V, temp,
        HAS_TEMP: tl.constexpr, IS_BF16: tl.constexpr, BLOCK_V: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
        vm = v < V
        word = tl.load(m_ptr + b * W + (v >> 5), mask=vm, other=0)
        bit = ((word >> (v & 31)) & 1) != 0
        ptr = x_ptr + b * stride_x + v
        x = tl.load(ptr, mask=vm, other=0.0)
        if HAS_TEMP:
            y = tl.math.div_rn(x.to(tl.float32), tl.zeros_like(x.to(tl.float32)) + temp)
            y = tl.where(bit, y, float("-inf"))
            if IS_BF16:
                # round to nearest even by hand: the 3.9 interpreter truncates fp32 -> bf16,
                # the GPU rounds; this is exact on both (no NaN logits expected)
                u = y.to(tl.uint32, bitcast=True)
                u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
                tl.store(ptr, u.to(tl.uint16).to(tl.bfloat16, bitcast=True), mask=vm)
            else:
                tl.store(ptr, y.to(x.dtype), mask=vm)
        else:
            tl.store(ptr, tl.where(bit, x, float("-inf")).to(x.dtype), mask=vm & (bit == 0))

    @triton.jit
    def _mask_softmax(
        x_ptr, m_ptr, out_ptr, stride_x, W, V, temp,
        HAS_TEMP: tl.constexpr, LOG: tl.constexpr, BLOCK_V: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        m_run = tl.full([BLOCK_V], float("-inf"), tl.float32)
        s_run = tl.zeros([BLOCK_V], dtype=tl.float32)
        for v0 in range(0, V, BLOCK_V):
            v = v0 + tl.arange(0, BLOCK_V)
            vm = v < V
            word = tl.load(m_ptr + b * W + (v >> 5), mask=vm, other=0)
            bit = (((word >> (v & 31)) & 1) != 0) & vm
            x = tl.load(x_ptr + b * stride_x + v, mask=vm, other=0.0).to(tl.float32)
            if HAS_TEMP:
                x = tl.math.div_rn(x, tl.zeros_like(x) + temp)
            x = tl.where(bit, x, float("-inf"))
            m_new = tl.maximum(m_run, x)
            # lanes that have seen nothing allowed keep m = -inf and s = 0
            alpha = tl.where(m_new == float("-inf"), 0.0, tl.exp(m_run - m_new))
            p = tl.where(bit, tl.exp(x - m_new), 0.0)
            s_run = s_run * alpha + p
            m_run = m_new
        m_row = tl.max(m_run, axis=0)
        scale = tl.where(m_run == float("-inf"), 0.0, tl.exp(m_run - m_row))
        s_row = tl.sum(s_run * scale, axis=0)
        for v0 in range(0, V, BLOCK_V):
            v = v0 + tl.arange(0, BLOCK_V)
            vm = v < V
            word = tl.load(m_ptr + b * W + (v >> 5), mask=vm, other=0)
            bit = ((word >> (v & 31)) & 1) != 0
            x = tl.load(x_ptr + b * stride_x + v, mask=vm, other=0.0).to(tl.float32)
            if HAS_TEMP:
                x = tl.math.div_rn(x, tl.zeros_like(x) + temp)
            x = tl.where(bit, x, float("-inf"))
            if LOG:
                y = x - m_row - tl.log(s_row)
            else:
                y = tl.exp(x - m_row) / s_row
            tl.store(out_ptr + b * V + v, y, mask=vm)

    return _mask_inplace, _mask_softmax


# 4096 logits per program: 16 KiB of float32, one 512-byte run of mask words
_BLOCK_V = 4096


def _apply_mask_triton(logits, mask, temperature, normalize):
    mask_inplace, mask_softmax = build("apply_mask", _kernels)
    B, V = logits.shape
    W = mask.shape[1]
    temp = 1.0 if temperature is None else float(temperature)
    if B == 0 or V == 0:
        return logits if normalize is None else torch.empty(B, V, device=logits.device)
    if normalize is None:
        mask_inplace[(B, -(-V // _BLOCK_V))](
            logits, mask, logits.stride(0), W, V, temp,
            HAS_TEMP=temperature is not None, IS_BF16=logits.dtype == torch.bfloat16,
            BLOCK_V=_BLOCK_V,
        )
        return logits
    out = torch.empty(B, V, dtype=torch.float32, device=logits.device)
    mask_softmax[(B,)](
        logits, mask, out, logits.stride(0), W, V, temp,
        HAS_TEMP=temperature is not None, LOG=normalize == "log_softmax", BLOCK_V=_BLOCK_V,
    )
    return out


# ---------------------------------------------------------------------------- public op


def apply_mask(
    logits: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float | None = None,
    normalize: str | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Set disallowed logits to ``-inf`` (see the module docstring for the contract).

    Args:
        logits: float32/bfloat16/float16 [B, V]; mutated iff ``normalize`` is None.
        mask: packed int32 [B, ceil(V/32)].
        temperature: divides the logits first (float32, IEEE rounding), if given.
        normalize: None, ``"softmax"`` or ``"log_softmax"`` (float32 [B, V] result).

    Raises:
        ValueError: bad shapes, dtypes, temperature or ``normalize``.
        KernelBackendError: see :func:`tractable.kernels._triton.resolve_backend`.
    """
    be = resolve_backend(backend, logits, mask, op="apply_mask")
    _check(logits, mask, temperature, normalize)
    if be == "torch":
        return apply_mask_ref(logits, mask, temperature=temperature, normalize=normalize)
    if logits.stride(1) != 1:
        raise InvalidArgumentError("apply_mask: logits must be contiguous along the vocabulary")
    return _apply_mask_triton(logits, mask.contiguous(), temperature, normalize)
