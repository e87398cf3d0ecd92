"""Baum–Welch EM for :class:`~tractable.hmm.model.HMM` (as used by GeLaTo / Ctrl-G to distill an
HMM from LM samples).

E-step (scaled forward/backward, :meth:`HMM.forward` / :meth:`HMM.backward`), for a batch of
sequences ``tokens`` int64 [N, T] with ``lengths`` [N]::

    γ_t(i)    = α̂_t(i) β̂_t(i)                                  = p(z_t = i | x)
    ξ_t(i, j) = α̂_t(i) A(i, j) B(j, x_{t+1}) β̂_{t+1}(j) / c_{t+1} = p(z_t = i, z_{t+1} = j | x)

    initial counts    [H]    Σ_n γ_1
    transition counts [H, H] A ∘ Σ_{n,t} α̂_t^T (B(:, x_{t+1}) ∘ β̂_{t+1} / c_{t+1})
                             (one GEMM per t)
    emission counts   [H, V] Σ_{n,t} γ_t e_{x_t}^T                              (index_add)

Cost per token: O(H²) for the forward, the backward and the ξ GEMM, plus O(H) for the emission
scatter; memory O(N·T·H) for the messages of one mini-batch.

M-step: counts + pseudocount, normalized per row (:meth:`HMM.from_counts`); in :func:`fit`
the emission pseudocount is a Dirichlet prior of total mass ``emission_pseudocount`` per row
centred on the smoothed training unigram (a uniform prior over V = 49152 ids would give unseen
tokens as much mass as a row's real counts when each state sees ~50 tokens).  With
``step_size == 1`` (the default) the counts of all mini-batches of an epoch are summed before
one M-step, which is exact EM: the training log-likelihood (without pseudocounts; with them,
the MAP objective) never decreases (tested).  With
``step_size < 1`` the parameters move after every mini-batch,
``θ ← (1 − η) θ + η · M-step(batch)`` (stochastic mini-batch EM as in GeLaTo), which is faster
per epoch on large sample sets but not monotone.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .model import HMM

__all__ = ["expected_counts", "em_step", "fit", "init_from_unigram"]


def expected_counts(
    hmm: HMM, tokens: torch.Tensor, lengths: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """E-step on one batch: ``(initial [H], transition [H, H], emission [H, V], log-likelihood)``.

    Counts are float64 for π and A and the HMM's dtype for B; the log-likelihood is the batch's
    total ``Σ_n log p(x^{(n)})`` under ``hmm``."""
    tokens = tokens.to(hmm.device).long()
    N, T = tokens.shape
    if lengths is None:
        lengths = torch.full((N,), T, dtype=torch.long)
    lengths = lengths.to(hmm.device)
    keep = lengths > 0
    tokens, lengths = tokens[keep], lengths[keep]
    N = tokens.shape[0]
    H, V = hmm.hidden_size, hmm.vocab_size
    log_c, alpha = hmm.forward(tokens, lengths, return_messages=True)
    beta = hmm.backward(tokens, lengths, log_c)
    mask = torch.arange(T, device=hmm.device)[None, :] < lengths[:, None]
    safe = torch.where(mask, tokens, torch.zeros_like(tokens))
    gamma = alpha * beta * mask[:, :, None]
    init = gamma[:, 0].sum(0).double()
    c = torch.exp(log_c)
    Bt = hmm.emission.T
    xi = torch.zeros((H, H), dtype=hmm.dtype, device=hmm.device)
    for t in range(T - 1):
        m = mask[:, t + 1]
        if not bool(m.any()):
            break
        w = Bt[safe[:, t + 1]] * beta[:, t + 1] / c[:, t + 1, None]
        w = w * m[:, None]
        xi += alpha[:, t].T @ w
    trans = (xi * hmm.transition).double()
    emit = torch.zeros((H, V), dtype=hmm.dtype, device=hmm.device)
    flat_tok = safe[mask]
    emit.index_add_(1, flat_tok, gamma[mask].T.contiguous())
    return init, trans, emit, float(log_c.sum())


def em_step(
    hmm: HMM, tokens: torch.Tensor, lengths: torch.Tensor | None = None, *,
    pseudocount: float = 0.1, emission_pseudocount: float = 1e-3, batch_size: int = 256,
) -> tuple[HMM, float]:
    """One exact EM iteration over all sequences (E-step in mini-batches of ``batch_size``).

    Returns ``(new_hmm, training log-likelihood of the *old* parameters)``."""
    N = tokens.shape[0]
    acc = None
    ll = 0.0
    for i in range(0, N, batch_size):
        ln = None if lengths is None else lengths[i:i + batch_size]
        init, trans, emit, l = expected_counts(hmm, tokens[i:i + batch_size], ln)
        ll += l
        acc = [init, trans, emit] if acc is None else [acc[0] + init, acc[1] + trans, acc[2] + emit]
    new = HMM.from_counts(acc[0], acc[1], acc[2].double(), pseudocount=pseudocount,
                          emission_pseudocount=emission_pseudocount, fingerprint=hmm.fingerprint)
    return new.to(dtype=hmm.dtype), ll


def init_from_unigram(
    hidden_size: int, vocab_size: int, tokens: torch.Tensor, lengths: torch.Tensor, *,
    generator: torch.Generator, dtype: torch.dtype = torch.float32, noise: float = 1.0,
    pseudocount: float = 1e-3, fingerprint: str | None = None,
) -> HMM:
    """EM initialization: each state's emission is the training unigram (+ pseudocount) times
    ``Exp(1) ** noise`` per entry, renormalized (symmetry breaking around the data's marginal);
    π and A rows are Dirichlet(1)."""
    mask = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
    uni = torch.bincount(tokens[mask].long(), minlength=vocab_size).double() + pseudocount
    r = HMM.random(hidden_size, vocab_size, generator=generator, sharpness=noise,
                   dtype=torch.float64)
    B = r.emission * uni[None, :]
    B = B / B.sum(-1, keepdim=True)
    return HMM(r.initial.to(dtype), r.transition.to(dtype), B.to(dtype), fingerprint)


def _blend(old: HMM, new: HMM, eta: float) -> HMM:
    return HMM((1 - eta) * old.initial + eta * new.initial,
               (1 - eta) * old.transition + eta * new.transition,
               (1 - eta) * old.emission + eta * new.emission, old.fingerprint, dict(old.meta))


def fit(
    train: torch.Tensor, train_lengths: torch.Tensor, heldout: torch.Tensor,
    heldout_lengths: torch.Tensor, *, hidden_size: int, vocab_size: int, epochs: int = 10,
    batch_size: int = 256, pseudocount: float = 0.1, emission_pseudocount: float = 1.0,
    step_size: float = 1.0, seed: int = 0, device: torch.device | str = "cpu",
    unigram_prior: bool = True,
    checkpoint: str | Path | None = None, resume: bool = False,
    log: Callable[[dict], None] | None = None, progress: bool = True,
    fingerprint: str | None = None, dtype: torch.dtype = torch.float32, **_: object,
) -> HMM:
    """Train an HMM by (mini-batch) EM; see the module docstring.

    Every epoch reports the training LL/token (of the parameters entering the epoch) and the
    held-out LL/token (after it), to ``log`` and stderr, and writes ``checkpoint/`` (the HMM and
    ``state.json``); ``resume=True`` continues from there.  Mini-batch order is a permutation
    drawn from ``seed + epoch``, so a resumed run repeats the uninterrupted one.
    """
    device = torch.device(device)
    log = log or (lambda rec: None)
    ck = Path(checkpoint) if checkpoint is not None else None
    start = 0
    if resume and ck is not None and (ck / "state.json").exists():
        state = json.loads((ck / "state.json").read_text())
        hmm = HMM.load(ck / "hmm", fingerprint).to(device, dtype)
        start = int(state["epoch"]) + 1
        print(f"[em] resumed from {ck} after epoch {state['epoch']}", file=sys.stderr)
    else:
        g = torch.Generator().manual_seed(seed)
        hmm = init_from_unigram(hidden_size, vocab_size, train, train_lengths, generator=g,
                                dtype=dtype, pseudocount=emission_pseudocount,
                                fingerprint=fingerprint).to(device)
    prior = None
    if unigram_prior:
        # emission prior: the training unigram, add-`pseudocount` smoothed (as the bigram
        # baseline's backoff); `emission_pseudocount` is then the prior's total mass per row
        mask = torch.arange(train.shape[1])[None, :] < train_lengths[:, None]
        uni = torch.bincount(train[mask].long(), minlength=vocab_size).double() + pseudocount
        prior = (uni / uni.sum()).to(device)
    n_train_tok = int(train_lengths.sum())
    n_ho_tok = int(heldout_lengths.sum())
    ho, ho_len = heldout.to(device), heldout_lengths.to(device)
    N = train.shape[0]
    nb = math.ceil(N / batch_size)
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        tqdm = None
    for epoch in range(start, epochs):
        t0 = time.perf_counter()
        perm = torch.randperm(N, generator=torch.Generator().manual_seed(seed + 7919 * epoch))
        it = range(nb)
        bar = None
        if progress and tqdm is not None:
            bar = tqdm(it, desc=f"epoch {epoch + 1}/{epochs}", unit="batch", file=sys.stderr)
            it = bar
        acc = None
        ll = 0.0
        for b in it:
            idx = perm[b * batch_size:(b + 1) * batch_size]
            init, trans, emit, l = expected_counts(hmm, train[idx], train_lengths[idx])
            ll += l
            if step_size >= 1.0:
                acc = [init, trans, emit] if acc is None else [acc[0] + init, acc[1] + trans,
                                                               acc[2] + emit]
            else:
                upd = HMM.from_counts(init, trans, emit.double(), pseudocount=pseudocount,
                                      emission_pseudocount=emission_pseudocount,
                                      emission_prior=prior,
                                      fingerprint=fingerprint).to(device, dtype)
                hmm = _blend(hmm, upd, step_size)
            if bar is not None:
                bar.set_postfix(train_ll=f"{ll / max(1, n_train_tok):.3f}")
        if acc is not None:
            hmm = HMM.from_counts(acc[0], acc[1], acc[2].double(), pseudocount=pseudocount,
                                  emission_pseudocount=emission_pseudocount,
                                  emission_prior=prior,
                                  fingerprint=fingerprint).to(device, dtype)
        ho_ll = float(hmm.log_likelihood(ho, ho_len).double().sum()) / n_ho_tok
        rec = {"event": "epoch", "epoch": epoch, "train_ll_per_token": ll / n_train_tok,
               "heldout_ll_per_token": ho_ll, "seconds": time.perf_counter() - t0}
        log(rec)
        print(f"[em] epoch {epoch + 1}/{epochs}: train LL/token {ll / n_train_tok:.4f} "
              f"(entering), held-out LL/token {ho_ll:.4f}, {rec['seconds']:.1f} s",
              file=sys.stderr, flush=True)
        if ck is not None:
            hmm.save(ck / "hmm.tmp")
            import shutil

            if (ck / "hmm").exists():
                shutil.rmtree(ck / "hmm")
            (ck / "hmm.tmp").rename(ck / "hmm")
            (ck / "state.json").write_text(json.dumps({"epoch": epoch, **rec}))
    return hmm
