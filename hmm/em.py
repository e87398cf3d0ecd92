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

Early stopping (:func:`fit` ``patience``): training likelihood rises monotonically while the
held-out likelihood of a distilled HMM peaks and falls (it memorises its samples' bigrams), so
the held-out LL/token is measured after every epoch, the best parameters are kept, and training
stops after ``patience`` epochs without a gain.  :func:`accumulate_counts` / :func:`m_step`
are the two halves data-parallel EM (:mod:`tractable.hmm.em_distributed`) puts an
``all_reduce`` between.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..fsa.errors import InvalidArgumentError
from .model import HMM

__all__ = [
    "expected_counts",
    "accumulate_counts",
    "m_step",
    "em_step",
    "fit",
    "init_from_unigram",
    "smoothed_unigram",
    "unigram_counts",
    "heldout_ll_per_token",
]


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
    counts: torch.Tensor | None = None,
) -> HMM:
    """EM initialization: each state's emission is the training unigram (+ pseudocount) times
    ``Exp(1) ** noise`` per entry, renormalized (symmetry breaking around the data's marginal);
    π and A rows are Dirichlet(1).  ``counts`` float [V]: the unigram counts to use instead of
    counting ``tokens`` (data-parallel EM passes the all-reduced counts)."""
    if counts is None:
        counts = unigram_counts(tokens, lengths, vocab_size)
    uni = counts.double().cpu() + pseudocount
    r = HMM.random(hidden_size, vocab_size, generator=generator, sharpness=noise,
                   dtype=torch.float64)
    B = r.emission * uni[None, :]
    B = B / B.sum(-1, keepdim=True)
    return HMM(r.initial.to(dtype), r.transition.to(dtype), B.to(dtype), fingerprint)


def _blend(old: HMM, new: HMM, eta: float) -> HMM:
    return HMM((1 - eta) * old.initial + eta * new.initial,
               (1 - eta) * old.transition + eta * new.transition,
               (1 - eta) * old.emission + eta * new.emission, old.fingerprint, dict(old.meta))


def smoothed_unigram(tokens: torch.Tensor, lengths: torch.Tensor, vocab_size: int,
                  pseudocount: float) -> torch.Tensor:
    """float64 [V]: the training unigram, add-``pseudocount`` smoothed and normalized (the
    emission prior of :func:`fit`).  ``tokens`` int64 [N, T], ``lengths`` int64 [N]."""
    return _normalize(unigram_counts(tokens, lengths, vocab_size) + pseudocount)


def unigram_counts(tokens: torch.Tensor, lengths: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """float64 [V]: token counts over the non-padding positions."""
    mask = torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths[:, None].to(
        tokens.device)
    return torch.bincount(tokens[mask].long(), minlength=vocab_size).double()


def _normalize(x: torch.Tensor) -> torch.Tensor:
    return x / x.sum()


def accumulate_counts(
    hmm: HMM, tokens: torch.Tensor, lengths: torch.Tensor, *, batch_size: int = 256,
    order: torch.Tensor | None = None,
) -> tuple[list[torch.Tensor], float]:
    """E-step over all rows of ``tokens`` int64 [N, T] (in mini-batches of ``batch_size``, rows
    taken in ``order`` int64 [N] if given): ``([initial float64 [H], transition float64 [H, H],
    emission float64 [H, V]], total log-likelihood)``.  Counts of disjoint data add up."""
    N = tokens.shape[0]
    order = torch.arange(N) if order is None else order
    acc = None
    ll = 0.0
    for s in range(0, N, batch_size):
        idx = order[s:s + batch_size]
        init, trans, emit, l = expected_counts(hmm, tokens[idx], lengths[idx])
        ll += l
        emit = emit.double()
        acc = [init, trans, emit] if acc is None else [acc[0] + init, acc[1] + trans,
                                                       acc[2] + emit]
    if acc is None:
        H, V = hmm.hidden_size, hmm.vocab_size
        z = dict(dtype=torch.float64, device=hmm.device)
        acc = [torch.zeros(H, **z), torch.zeros((H, H), **z), torch.zeros((H, V), **z)]
    return acc, ll


def m_step(counts: list[torch.Tensor], *, pseudocount: float, emission_pseudocount: float,
           prior: torch.Tensor | None, fingerprint: str | None, device, dtype,
           meta: dict | None = None) -> HMM:
    """The M-step of :func:`fit`: :meth:`HMM.from_counts` on ``[initial, transition,
    emission]`` counts, cast to ``dtype`` on ``device``."""
    return HMM.from_counts(counts[0], counts[1], counts[2].double(), pseudocount=pseudocount,
                           emission_pseudocount=emission_pseudocount, emission_prior=prior,
                           fingerprint=fingerprint, meta=meta).to(device, dtype)


def heldout_ll_per_token(hmm: HMM, tokens: torch.Tensor, lengths: torch.Tensor,
                         batch_size: int = 512) -> float:
    """Mean ``log p_hmm(x_t | x_<t)`` over the non-padding positions of ``tokens`` int64
    [N, T] (nats/token; evaluated in mini-batches)."""
    tot = 0.0
    for s in range(0, tokens.shape[0], batch_size):
        tot += float(hmm.log_likelihood(tokens[s:s + batch_size].to(hmm.device),
                                        lengths[s:s + batch_size].to(hmm.device)).double().sum())
    return tot / max(1, int(lengths.sum()))


def _save_atomic(hmm: HMM, path: Path) -> None:
    import shutil

    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    hmm.save(tmp)
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)


def fit(
    train: torch.Tensor, train_lengths: torch.Tensor, heldout: torch.Tensor,
    heldout_lengths: torch.Tensor, *, hidden_size: int, vocab_size: int, epochs: int = 10,
    batch_size: int = 256, pseudocount: float = 0.1, emission_pseudocount: float = 1.0,
    step_size: float = 1.0, seed: int = 0, device: torch.device | str = "cpu",
    unigram_prior: bool = True, init: HMM | None = None,
    patience: int | None = None, min_delta: float = 1e-4,
    checkpoint: str | Path | None = None, resume: bool = False,
    log: Callable[[dict], None] | None = None, progress: bool = True,
    fingerprint: str | None = None, dtype: torch.dtype = torch.float32, **_: object,
) -> HMM:
    """Train an HMM by (mini-batch) EM; see the module docstring.

    ``init``: the starting HMM (e.g. :func:`tractable.hmm.lvd.lvd_init`); default a random
    HMM around the training unigram (:func:`init_from_unigram`, drawn from ``seed``).

    Every epoch reports the training LL/token (of the parameters entering the epoch) and the
    held-out LL/token (after it), to ``log`` and stderr.  **Early stopping**: the parameters
    with the best held-out LL/token so far are kept and returned; with ``patience`` set,
    training stops once ``patience`` epochs in a row have not improved the best by more than
    ``min_delta`` nats/token (EM's training likelihood keeps rising while held-out LL turns
    down: the distilled HMM overfits its samples).  Without ``patience`` all ``epochs`` run
    and the best epoch's parameters are still returned.

    ``checkpoint/``: the current HMM (``hmm/``), the best one (``best/``) and ``state.json``
    after every epoch; ``resume=True`` continues from there.  Mini-batch order is a permutation
    drawn from ``seed + epoch``, so a resumed run repeats the uninterrupted one.
    """
    device = torch.device(device)
    log = log or (lambda rec: None)
    ck = Path(checkpoint) if checkpoint is not None else None
    start = 0
    best, best_ll, best_epoch, stale = None, -math.inf, -1, 0
    if resume and ck is not None and (ck / "state.json").exists():
        state = json.loads((ck / "state.json").read_text())
        hmm = HMM.load(ck / "hmm", fingerprint).to(device, dtype)
        start = int(state["epoch"]) + 1
        if (ck / "best").exists() and "best_epoch" in state:
            best = HMM.load(ck / "best", fingerprint).to(device, dtype)
            best_ll, best_epoch = float(state["best_heldout_ll_per_token"]), state["best_epoch"]
            stale = int(state.get("stale", 0))
        print(f"[em] resumed from {ck} after epoch {state['epoch']}", file=sys.stderr)
        if state.get("stopped"):
            return best if best is not None else hmm
    elif init is not None:
        if init.hidden_size != hidden_size or init.vocab_size != vocab_size:
            raise InvalidArgumentError(
                f"fit: init has H={init.hidden_size}, V={init.vocab_size}; expected "
                f"H={hidden_size}, V={vocab_size}")
        hmm = init.to(device, dtype)
    else:
        g = torch.Generator().manual_seed(seed)
        hmm = init_from_unigram(hidden_size, vocab_size, train, train_lengths, generator=g,
                                dtype=dtype, pseudocount=emission_pseudocount,
                                fingerprint=fingerprint).to(device)
    prior = None
    if unigram_prior:
        # emission prior: the training unigram, add-`pseudocount` smoothed (as the bigram
        # baseline's backoff); `emission_pseudocount` is then the prior's total mass per row
        prior = smoothed_unigram(train, train_lengths, vocab_size, pseudocount).to(
            device)
    n_train_tok = int(train_lengths.sum())
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
            init_c, trans, emit, l = expected_counts(hmm, train[idx], train_lengths[idx])
            ll += l
            if step_size >= 1.0:
                acc = [init_c, trans, emit] if acc is None else [
                    acc[0] + init_c, acc[1] + trans, acc[2] + emit]
            else:
                upd = m_step([init_c, trans, emit], pseudocount=pseudocount,
                             emission_pseudocount=emission_pseudocount, prior=prior,
                             fingerprint=fingerprint, device=device, dtype=dtype)
                hmm = _blend(hmm, upd, step_size)
            if bar is not None:
                bar.set_postfix(train_ll=f"{ll / max(1, n_train_tok):.3f}")
        if acc is not None:
            hmm = m_step(acc, pseudocount=pseudocount, emission_pseudocount=emission_pseudocount,
                         prior=prior, fingerprint=fingerprint, device=device, dtype=dtype)
        ho_ll = heldout_ll_per_token(hmm, ho, ho_len)
        improved = ho_ll > best_ll + min_delta
        if ho_ll > best_ll:
            best, best_ll, best_epoch = hmm, ho_ll, epoch
        stale = 0 if improved else stale + 1
        stop = patience is not None and stale >= patience
        rec = {"event": "epoch", "epoch": epoch, "train_ll_per_token": ll / n_train_tok,
               "heldout_ll_per_token": ho_ll, "seconds": time.perf_counter() - t0,
               "best_epoch": best_epoch, "best_heldout_ll_per_token": best_ll, "stale": stale,
               "stopped": stop}
        log(rec)
        print(f"[em] epoch {epoch + 1}/{epochs}: train LL/token {ll / n_train_tok:.4f} "
              f"(entering), held-out LL/token {ho_ll:.4f} (best {best_ll:.4f} at epoch "
              f"{best_epoch + 1}), {rec['seconds']:.1f} s", file=sys.stderr, flush=True)
        if ck is not None:
            _save_atomic(hmm, ck / "hmm")
            if best_epoch == epoch:
                _save_atomic(best, ck / "best")
            (ck / "state.json").write_text(json.dumps(rec))
        if stop:
            print(f"[em] early stop: no held-out gain > {min_delta} for {patience} epochs; "
                  f"keeping epoch {best_epoch + 1}", file=sys.stderr, flush=True)
            break
    if best is None:
        return hmm
    return HMM(best.initial, best.transition, best.emission, best.fingerprint,
               {**best.meta, "best_epoch": best_epoch, "heldout_ll_per_token": best_ll})
