"""Data-parallel EM over ``torch.distributed``: every rank runs the E-step on its own slice of
the sequences, the expected counts (and log-likelihoods) are summed with ``all_reduce``, and
every rank applies the same M-step, so all ranks hold identical parameters — the same EM
iteration as :func:`tractable.hmm.em.fit` on the union of the slices (exact EM is a sum over
sequences; only the summation order differs).

Backends: ``gloo`` on CPU, ``nccl`` on GPUs (one GPU per rank).  Launch with ``torchrun``::

    torchrun --nproc-per-node 4 -m tractable.hmm.distill --out DIR --stage train --lvd ...

(``tractable distill --world-size N`` spawns N local gloo processes instead).  Each rank reads
the sample-store shards ``rank, rank + world, …`` (:mod:`tractable.hmm.samples`).

LVD initialisation across ranks (:func:`lvd_init_distributed`): every rank draws its share of
the k-means sample, the samples are all-gathered, every rank fits the same clusters (same seed,
same data), counts its own assignments, and the counts are all-reduced.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from .em import accumulate_counts, init_from_unigram, m_step, unigram_counts
from .lvd import LVDClusters, lvd_counts, sample_positions
from .model import HMM

__all__ = ["fit_distributed", "lvd_init_distributed", "all_reduce_sum", "default_backend"]


def default_backend(device: torch.device | str) -> str:
    """``nccl`` for CUDA devices, ``gloo`` otherwise."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def all_reduce_sum(*xs: torch.Tensor) -> None:
    """Sum each tensor over all ranks, in place (a no-op without an initialized group)."""
    if dist.is_available() and dist.is_initialized():
        for x in xs:
            dist.all_reduce(x, op=dist.ReduceOp.SUM)


def _scalar(v: float, device) -> float:
    t = torch.tensor([v], dtype=torch.float64, device=device)
    all_reduce_sum(t)
    return float(t[0])


def lvd_init_distributed(
    tokens: torch.Tensor, lengths: torch.Tensor, hidden: torch.Tensor, *, hidden_size: int,
    vocab_size: int, pseudocount: float = 0.1, emission_pseudocount: float = 1.0,
    prior: torch.Tensor | None = None, sample_size: int = 262_144, dim: int | None = 64,
    iterations: int = 25, seed: int = 0, fingerprint: str | None = None,
    dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
) -> HMM:
    """:func:`tractable.hmm.lvd.lvd_init` over the union of the ranks' slices (see the module
    docstring); returns the same HMM on every rank."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    r, c = sample_positions(lengths, tokens.shape[1], max(1, sample_size // world), g)
    vec = hidden[r, c].float()
    if world > 1:
        parts: list = [None] * world
        dist.all_gather_object(parts, vec)
        vec = torch.cat(parts)
    cl = LVDClusters.fit(vec, hidden_size, dim=dim, iterations=iterations,
                         generator=torch.Generator().manual_seed(seed))
    init, trans, emit = lvd_counts(tokens, lengths, cl.states(hidden), hidden_size, vocab_size)
    init, trans, emit = init.to(device), trans.to(device), emit.to(device)
    all_reduce_sum(init, trans, emit)
    return m_step([init, trans, emit], pseudocount=pseudocount,
                  emission_pseudocount=emission_pseudocount, prior=prior,
                  fingerprint=fingerprint, device=device, dtype=dtype,
                  meta={"init": "lvd", "kmeans_points": int(vec.shape[0]), "pca_dim": dim})


def fit_distributed(
    train: torch.Tensor, train_lengths: torch.Tensor, heldout: torch.Tensor,
    heldout_lengths: torch.Tensor, *, hidden_size: int, vocab_size: int, epochs: int = 10,
    batch_size: int = 256, pseudocount: float = 0.1, emission_pseudocount: float = 1.0,
    seed: int = 0, device: torch.device | str = "cpu", init: HMM | None = None,
    patience: int | None = None, min_delta: float = 1e-4,
    log: Callable[[dict], None] | None = None, fingerprint: str | None = None,
    dtype: torch.dtype = torch.float32, hidden: torch.Tensor | None = None,
    lvd_options: dict | None = None,
) -> HMM:
    """Exact (full-batch) EM with held-out early stopping, data-parallel: ``train`` int64
    [N_r, T] / ``heldout`` are *this rank's* slices.  Same options and same result as
    :func:`tractable.hmm.em.fit` with ``step_size=1`` on the union of the slices (up to float
    summation order), with the same unigram emission prior.  Initial HMM: ``init`` (identical on
    every rank); else LVD when ``hidden`` float [N_r, T, D] is given (``lvd_options`` passed to
    :func:`lvd_init_distributed`); else :func:`init_from_unigram` on the all-reduced unigram.
    Works without a process group too (one rank).  Returns the best held-out parameters."""
    device = torch.device(device)
    log = log or (lambda rec: None)
    rank = dist.get_rank() if dist.is_initialized() else 0
    uni = unigram_counts(train, train_lengths, vocab_size).to(device)
    all_reduce_sum(uni)
    prior = (uni + pseudocount) / (uni + pseudocount).sum()
    if init is not None:
        hmm = init.to(device, dtype)
    elif hidden is not None:
        hmm = lvd_init_distributed(train, train_lengths, hidden, hidden_size=hidden_size,
                                   vocab_size=vocab_size, pseudocount=pseudocount,
                                   emission_pseudocount=emission_pseudocount, prior=prior,
                                   seed=seed, fingerprint=fingerprint, dtype=dtype,
                                   device=device, **(lvd_options or {}))
    else:
        hmm = init_from_unigram(hidden_size, vocab_size, train, train_lengths,
                                generator=torch.Generator().manual_seed(seed), dtype=dtype,
                                pseudocount=emission_pseudocount, fingerprint=fingerprint,
                                counts=uni).to(device)
    n_tr = _scalar(float(train_lengths.sum()), device)
    n_ho = _scalar(float(heldout_lengths.sum()), device)
    ho, ho_len = heldout.to(device), heldout_lengths.to(device)
    best, best_ll, best_epoch, stale = hmm, -math.inf, -1, 0
    for epoch in range(epochs):
        t0 = time.perf_counter()
        counts, ll = accumulate_counts(hmm, train, train_lengths, batch_size=batch_size)
        ll_t = torch.tensor([ll], dtype=torch.float64, device=device)
        all_reduce_sum(*counts, ll_t)
        hmm = m_step(counts, pseudocount=pseudocount, emission_pseudocount=emission_pseudocount,
                     prior=prior, fingerprint=fingerprint, device=device, dtype=dtype)
        ho_sum = 0.0
        for s in range(0, ho.shape[0], 512):
            ho_sum += float(hmm.log_likelihood(ho[s:s + 512], ho_len[s:s + 512]).double().sum())
        ho_ll = _scalar(ho_sum, device) / max(1.0, n_ho)
        improved = ho_ll > best_ll + min_delta
        if ho_ll > best_ll:
            best, best_ll, best_epoch = hmm, ho_ll, epoch
        stale = 0 if improved else stale + 1
        stop = patience is not None and stale >= patience
        rec = {"event": "epoch", "epoch": epoch, "train_ll_per_token": float(ll_t[0]) / n_tr,
               "heldout_ll_per_token": ho_ll, "seconds": time.perf_counter() - t0,
               "best_epoch": best_epoch, "best_heldout_ll_per_token": best_ll,
               "stopped": stop, "ranks": dist.get_world_size() if dist.is_initialized() else 1}
        if rank == 0:
            log(rec)
            print(f"[em-dp] epoch {epoch + 1}/{epochs}: train LL/token "
                  f"{rec['train_ll_per_token']:.4f}, held-out {ho_ll:.4f} (best {best_ll:.4f})"
                  f", {rec['seconds']:.1f} s, {rec['ranks']} rank(s)", file=sys.stderr,
                  flush=True)
        if stop:
            break
    return HMM(best.initial, best.transition, best.emission, best.fingerprint,
               {**best.meta, "best_epoch": best_epoch, "heldout_ll_per_token": best_ll})
