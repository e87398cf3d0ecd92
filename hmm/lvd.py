"""Latent variable distillation (LVD) initialisation of an HMM from an LM's hidden states.

As in Ctrl-G / pyjuice (Liu et al. 2023, "Scaling up probabilistic circuits by latent variable
distillation"; Zhang et al. 2024): the LM's contextual embedding of every sampled position is
clustered into H groups by k-means, the cluster of position t is taken as the HMM's hidden state
``z_t``, and the initial parameters are the (smoothed) counts of those hard assignments::

    π(i)    ∝ #{n : z^n_1 = i} + pc
    A(i, j) ∝ #{(n, t) : z^n_t = i, z^n_{t+1} = j} + pc
    B(i, v) ∝ #{(n, t) : z^n_t = i, x^n_t = v} + epc · prior(v)

(the maximum-likelihood HMM for the completed data ``(x, z)``, with the same pseudocounts as the
EM M-step, :meth:`HMM.from_counts`).  EM (:mod:`tractable.hmm.em`) then starts from this point
instead of a random one.

The embedding of position t is the LM's last hidden state whose logits ``x_t`` was drawn from
(the input of the LM head; :mod:`tractable.hmm.samples` stores it, float16), so clusters group
contexts with similar next-token distributions, which is what an HMM state's emission row
models.  For speed the embeddings are projected on their top ``dim`` principal components
(fitted on the k-means sample) before clustering; k-means is fitted on at most ``sample_size``
positions (Ctrl-G: 262,144) and then every position is assigned to its nearest centroid.
"""

from __future__ import annotations

import torch

from ..fsa.errors import InvalidArgumentError
from .model import HMM

__all__ = ["kmeans", "assign", "pca_basis", "lvd_counts", "lvd_init", "LVDClusters",
           "sample_positions"]


def assign(x: torch.Tensor, centroids: torch.Tensor, batch_size: int = 16384) -> torch.Tensor:
    """int64 [N]: index of the nearest centroid (squared Euclidean; ties to the lowest index)
    of each row of ``x`` float [N, D]; ``centroids`` float [K, D]."""
    cn = (centroids * centroids).sum(-1)
    out = torch.empty(x.shape[0], dtype=torch.long, device=x.device)
    for s in range(0, x.shape[0], batch_size):
        xb = x[s:s + batch_size].to(centroids.dtype)
        d = cn[None, :] - 2.0 * (xb @ centroids.T)  # ||x||² is the same for every centroid
        out[s:s + batch_size] = d.argmin(-1)
    return out


def kmeans(
    x: torch.Tensor, k: int, *, iterations: int = 25, generator: torch.Generator | None = None,
    batch_size: int = 16384, tol: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lloyd's k-means on float [N, D] (N ≥ k).

    Initial centroids: k distinct rows drawn uniformly (Ctrl-G); an emptied cluster is re-seeded
    with the point farthest from its centroid.  Stops after ``iterations`` or when the mean
    squared distance improves by at most ``tol`` (relative).

    Returns ``(centroids float [k, D], labels int64 [N])`` — labels are the nearest centroid of
    each row under the returned centroids.

    Raises:
        InvalidArgumentError: fewer rows than clusters, or k < 1.
    """
    x = x.float()
    N = x.shape[0]
    if k < 1 or N < k:
        raise InvalidArgumentError(f"kmeans: k = {k} clusters need at least k points, got {N}")
    perm = torch.randperm(N, generator=generator)[:k]
    c = x[perm.to(x.device)].clone()
    prev = float("inf")
    labels = assign(x, c, batch_size)
    for _ in range(iterations):
        sums = torch.zeros_like(c).index_add_(0, labels, x)
        cnt = torch.bincount(labels, minlength=k)
        occ = cnt > 0
        c[occ] = sums[occ] / cnt[occ, None].to(c.dtype)
        empty = torch.nonzero(~occ).flatten()
        if empty.numel():
            d = ((x - c[labels]) ** 2).sum(-1)
            far = torch.topk(d, empty.numel()).indices
            c[empty] = x[far]
        labels = assign(x, c, batch_size)
        sse = float(((x - c[labels]) ** 2).sum(-1).mean())
        if empty.numel() == 0 and prev - sse <= tol * max(prev, 1e-30):
            break
        prev = sse
    return c, labels


def pca_basis(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mean float [D], basis float [D, d])``, ``d = min(dim, D)``: the top principal
    directions of the rows of ``x`` float [N, D] (``(x - mean) @ basis`` projects)."""
    x = x.float()
    mu = x.mean(0)
    xc = x - mu
    d = min(dim, x.shape[1], x.shape[0])
    # covariance eigendecomposition (D ≤ a few thousand): exact and deterministic
    cov = xc.T.double() @ xc.double() / max(1, x.shape[0] - 1)
    evals, evecs = torch.linalg.eigh(cov)
    return mu, evecs[:, -d:].flip(-1).float()


def lvd_counts(
    tokens: torch.Tensor, lengths: torch.Tensor, states: torch.Tensor, hidden_size: int,
    vocab_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Counts of the completed data ``(x, z)``: ``(initial float64 [H], transition float64
    [H, H], emission float64 [H, V])``.

    ``tokens`` int64 [N, T], ``lengths`` int64 [N], ``states`` int64 [N, T] (the hidden state
    of each position; padding ignored).  Sums over sequences, so counts of disjoint data parts
    add up (data-parallel LVD all-reduces them)."""
    N, T = tokens.shape
    H, V = hidden_size, vocab_size
    mask = torch.arange(T, device=tokens.device)[None, :] < lengths[:, None].to(tokens.device)
    z = states.long()
    init = torch.bincount(z[:, 0][lengths > 0], minlength=H).double()
    pair = mask[:, 1:]
    trans = torch.bincount((z[:, :-1][pair] * H + z[:, 1:][pair]),
                           minlength=H * H).double().view(H, H)
    emit = torch.bincount(z[mask] * V + tokens[mask].long(), minlength=H * V).double().view(H, V)
    return init, trans, emit


class LVDClusters:
    """The fitted embedding → hidden-state map: PCA ``(mean, basis)`` then nearest centroid."""

    def __init__(self, mean: torch.Tensor, basis: torch.Tensor | None, centroids: torch.Tensor):
        self.mean, self.basis, self.centroids = mean, basis, centroids

    @classmethod
    def fit(
        cls, vectors: torch.Tensor, hidden_size: int, *, dim: int | None = 64,
        iterations: int = 25, generator: torch.Generator | None = None,
    ) -> LVDClusters:
        """Fit on float [M, D] embeddings (already subsampled): PCA to ``dim`` (None: none),
        then k-means into ``hidden_size`` clusters."""
        v = vectors.float()
        if dim is not None and dim < v.shape[1]:
            mean, basis = pca_basis(v, dim)
        else:
            mean, basis = torch.zeros(v.shape[1]), None
        c, _ = kmeans(cls._project(v, mean, basis), hidden_size, iterations=iterations,
                      generator=generator)
        return cls(mean, basis, c)

    @staticmethod
    def _project(v, mean, basis):
        v = v.float() - mean.to(v.device)
        return v if basis is None else v @ basis.to(v.device)

    def states(self, hidden: torch.Tensor) -> torch.Tensor:
        """int64 [...]: the hidden state of each embedding of float [..., D]."""
        flat = hidden.reshape(-1, hidden.shape[-1])
        out = torch.empty(flat.shape[0], dtype=torch.long)
        for s in range(0, flat.shape[0], 65536):
            out[s:s + 65536] = assign(self._project(flat[s:s + 65536], self.mean, self.basis),
                                      self.centroids)
        return out.view(hidden.shape[:-1])


def sample_positions(lengths: torch.Tensor, T: int, sample_size: int,
                     generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, cols)`` int64 [M]: up to ``sample_size`` distinct non-padding positions of a
    [N, T] batch with ``lengths``, drawn uniformly without replacement."""
    mask = torch.arange(T)[None, :] < lengths[:, None]
    r, c = torch.nonzero(mask, as_tuple=True)
    if r.numel() > sample_size:
        pick = torch.randperm(r.numel(), generator=generator)[:sample_size]
        r, c = r[pick], c[pick]
    return r, c


def lvd_init(
    tokens: torch.Tensor, lengths: torch.Tensor, hidden: torch.Tensor, *, hidden_size: int,
    vocab_size: int, pseudocount: float = 0.1, emission_pseudocount: float = 1.0,
    emission_prior: torch.Tensor | None = None, sample_size: int = 262_144,
    dim: int | None = 64, iterations: int = 25, seed: int = 0,
    fingerprint: str | None = None, dtype: torch.dtype = torch.float32,
) -> HMM:
    """The LVD initial HMM of ``tokens`` int64 [N, T] / ``lengths`` int64 [N] with their
    embeddings ``hidden`` float [N, T, D] (see the module docstring).

    Pseudocounts as :meth:`HMM.from_counts` (``emission_prior`` float [V], e.g. the smoothed
    training unigram).  ``meta`` of the result records ``init="lvd"`` and the k-means sizes.

    Raises:
        InvalidArgumentError: shapes disagree, or fewer non-padding positions than states.
    """
    N, T = tokens.shape
    if hidden.shape[:2] != (N, T):
        raise InvalidArgumentError(f"lvd_init: hidden {tuple(hidden.shape)} does not match "
                                   f"tokens {tuple(tokens.shape)}")
    g = torch.Generator().manual_seed(seed)
    r, c = sample_positions(lengths, T, sample_size, g)
    if r.numel() < hidden_size:
        raise InvalidArgumentError(f"lvd_init: {r.numel()} sampled positions < hidden_size = "
                                   f"{hidden_size}")
    cl = LVDClusters.fit(hidden[r, c], hidden_size, dim=dim, iterations=iterations, generator=g)
    z = cl.states(hidden)
    init, trans, emit = lvd_counts(tokens, lengths, z, hidden_size, vocab_size)
    h = HMM.from_counts(init, trans, emit, pseudocount=pseudocount,
                        emission_pseudocount=emission_pseudocount, emission_prior=emission_prior,
                        fingerprint=fingerprint,
                        meta={"init": "lvd", "kmeans_points": int(r.numel()), "pca_dim": dim,
                              "kmeans_iterations": iterations})
    return h.to(dtype=dtype)
