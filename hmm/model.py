"""HMM: a hidden Markov model over a token vocabulary (paper 002, Def. 4.1 and App. B).

Parameters (probabilities, not logs; float32 by default):

* ``initial`` π  [H]      ``π[i] = p(z_1 = i)``;
* ``transition`` A [H, H] ``A[i, j] = p(z_{t+1} = j | z_t = i)`` (rows sum to 1);
* ``emission`` B [H, V]   ``B[i, v] = p(x_t = v | z_t = i)`` (rows sum to 1).

The forward recursion of Def. 4.1 is run *scaled*: the filtered message is renormalized to sum
to 1 at every step and the log of the normalizer is accumulated, so log-likelihoods of sequences
of any length are finite (no underflow at 1,000 steps, checked by the tests); in the loop form::

    a = π                                    # p(z_t | x_<t), [N, H]
    for t in range(T):
        u = a * B[:, x_t]                    # [N, H]
        c_t = u.sum(-1); ll += log c_t       # log p(x_t | x_<t)
        a = (u / c_t) @ A

An :class:`HMM` is frozen: methods return new objects.  It is tied to a vocabulary by the
``fingerprint`` (sha256 of the :class:`~tractable.fsa.vocabulary.TokenVocabulary`), checked by
:meth:`HMM.load` and by the P-GCD product (:mod:`tractable.hmm.product`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..fsa.automaton_file import jsonable_meta
from ..fsa.errors import AutomatonFormatError, InvalidArgumentError, VocabularyMismatchError

__all__ = ["HMM", "HMM_FORMAT_VERSION"]

#: Version of the on-disk layout written by :meth:`HMM.save`.
HMM_FORMAT_VERSION = 1
_FORMAT_NAME = "tractable-hmm"


@dataclass(frozen=True, eq=False)
class HMM:
    """Hidden Markov model ``(π, A, B)``; see the module docstring for shapes and semantics.

    Build one with :meth:`random`, :meth:`from_counts`, the EM trainer
    (:func:`tractable.hmm.em.fit`), or :meth:`load`.
    """

    initial: torch.Tensor
    transition: torch.Tensor
    emission: torch.Tensor
    fingerprint: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        H = self.initial.shape[0]
        if self.initial.dim() != 1 or self.transition.shape != (H, H) or self.emission.dim() != 2 \
                or self.emission.shape[0] != H:
            raise InvalidArgumentError(
                f"HMM shapes: initial {tuple(self.initial.shape)}, transition "
                f"{tuple(self.transition.shape)}, emission {tuple(self.emission.shape)}; expected "
                "[H], [H, H], [H, V]"
            )

    # ------------------------------------------------------------------ construction

    @property
    def hidden_size(self) -> int:
        return int(self.initial.shape[0])

    @property
    def vocab_size(self) -> int:
        return int(self.emission.shape[1])

    @property
    def device(self) -> torch.device:
        return self.emission.device

    @property
    def dtype(self) -> torch.dtype:
        return self.emission.dtype

    @classmethod
    def random(
        cls, hidden_size: int, vocab_size: int, *, generator: torch.Generator | None = None,
        sharpness: float = 1.0, dtype: torch.dtype = torch.float32,
        fingerprint: str | None = None,
    ) -> HMM:
        """Random parameters: each row ∝ ``Exp(1) ** sharpness`` (``sharpness=1``: rows are
        Dirichlet(1), uniform on the simplex; larger values give peakier rows).  For tests and
        EM initialization; ``generator`` (CPU) fixes the draw."""
        def dirichlet(*shape):
            g = torch.empty(shape, dtype=torch.float64).exponential_(generator=generator)
            g = g ** sharpness
            return (g / g.sum(-1, keepdim=True)).to(dtype)

        return cls(dirichlet(hidden_size), dirichlet(hidden_size, hidden_size),
                   dirichlet(hidden_size, vocab_size), fingerprint)

    @classmethod
    def from_counts(
        cls, initial: torch.Tensor, transition: torch.Tensor, emission: torch.Tensor, *,
        pseudocount: float = 0.0, emission_pseudocount: float | None = None,
        emission_prior: torch.Tensor | None = None,
        fingerprint: str | None = None, meta: dict | None = None,
    ) -> HMM:
        """Normalize expected counts (+ pseudocounts) into probabilities (the EM M-step).

        ``pseudocount`` is added to every entry of π and A.  Emissions: without
        ``emission_prior``, ``emission_pseudocount`` (default: ``pseudocount``) is added to every
        entry; with a prior distribution [V] (sums to 1, e.g. the smoothed unigram),
        ``emission_pseudocount · prior`` is added to each row (a Dirichlet prior of total mass
        ``emission_pseudocount`` centred on ``prior``)."""
        ep = pseudocount if emission_pseudocount is None else emission_pseudocount
        pi = initial + pseudocount
        A = transition + pseudocount
        if emission_prior is not None:
            B = emission + ep * emission_prior.to(emission.device, emission.dtype)[None, :]
        else:
            B = emission + ep
        return cls(pi / pi.sum(), A / A.sum(-1, keepdim=True), B / B.sum(-1, keepdim=True),
                   fingerprint, dict(meta or {}))

    def to(self, device: str | torch.device | None = None, dtype: torch.dtype | None = None) -> HMM:
        """A copy on ``device`` and/or in ``dtype`` (the original is unchanged)."""
        def mv(x):
            return x.to(device=device, dtype=dtype)

        return HMM(mv(self.initial), mv(self.transition), mv(self.emission), self.fingerprint,
                   dict(self.meta))

    def __repr__(self) -> str:
        return (f"HMM(hidden_size={self.hidden_size}, vocab_size={self.vocab_size}, "
                f"dtype={self.dtype}, device={self.device})")

    # ------------------------------------------------------------------ inference

    def _check_ids(self, tokens: torch.Tensor, mask: torch.Tensor) -> None:
        if tokens.numel() == 0:
            return
        bad = mask & ((tokens < 0) | (tokens >= self.vocab_size))
        if bool(bad.any()):
            from ..fsa.errors import TokenError

            i = int(tokens[bad][0])
            raise TokenError(
                f"token id {i} outside the HMM's vocabulary 0..{self.vocab_size - 1}", i)

    @staticmethod
    def _lengths_mask(tokens: torch.Tensor, lengths: torch.Tensor | None):
        N, T = tokens.shape
        if lengths is None:
            lengths = torch.full((N,), T, dtype=torch.long, device=tokens.device)
        lengths = lengths.to(tokens.device)
        mask = torch.arange(T, device=tokens.device)[None, :] < lengths[:, None]
        return lengths, mask

    def forward(
        self, tokens: torch.Tensor, lengths: torch.Tensor | None = None, *,
        return_messages: bool = False,
    ):
        """Scaled forward pass (Def. 4.1).

        Args:
            tokens: int64 [N, T] (positions at or past ``lengths`` are padding, ignored).
            lengths: int64 [N] or None (all T).
            return_messages: also return the scaled messages for the backward pass.

        Returns:
            ``log_c`` float [N, T]: ``log p(x_t | x_<t)`` (0 at padding).  With
            ``return_messages``: ``(log_c, alpha)`` where ``alpha[:, t] = p(z_t | x_{≤t})``
            [N, T, H] (the scaled forward message α̂_t).

        Raises:
            TokenError: an id outside ``0 .. V-1`` at a non-padding position.
        """
        tokens = tokens.to(self.device).long()
        N, T = tokens.shape
        lengths, mask = self._lengths_mask(tokens, lengths)
        self._check_ids(tokens, mask)
        safe = torch.where(mask, tokens, torch.zeros_like(tokens))
        Bt = self.emission.T  # [V, H]
        log_c = torch.zeros((N, T), dtype=self.dtype, device=self.device)
        alphas = (torch.empty((N, T, self.hidden_size), dtype=self.dtype, device=self.device)
                  if return_messages else None)
        a = self.initial.expand(N, -1)
        tiny = torch.finfo(self.dtype).tiny
        for t in range(T):
            u = a * Bt[safe[:, t]]
            c = u.sum(-1)
            m = mask[:, t]
            log_c[:, t] = torch.where(m, torch.log(c), torch.zeros_like(c))
            f = u / c.clamp(min=tiny)[:, None]
            if alphas is not None:
                alphas[:, t] = f
            a = torch.where(m[:, None], f @ self.transition, a)
        return (log_c, alphas) if return_messages else log_c

    def log_likelihood(
        self, tokens: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """float [N]: ``log p_hmm(x_{1:len})`` per sequence (−inf when a token has probability 0).

        ``tokens`` int64 [N, T] or [T] (one sequence; returns a 0-dim tensor)."""
        one = tokens.dim() == 1
        if one:
            tokens = tokens[None]
        ll = self.forward(tokens, lengths).sum(-1)
        return ll[0] if one else ll

    def backward(
        self, tokens: torch.Tensor, lengths: torch.Tensor, log_c: torch.Tensor
    ) -> torch.Tensor:
        """Scaled backward messages ``β̂_t = p(x_{>t} | z_t) / p(x_{>t} | x_{≤t})`` [N, T, H]
        (1 at and after each sequence's last position), using the forward scalers ``log_c``."""
        tokens = tokens.to(self.device).long()
        N, T = tokens.shape
        lengths, mask = self._lengths_mask(tokens, lengths)
        safe = torch.where(mask, tokens, torch.zeros_like(tokens))
        Bt = self.emission.T
        beta = torch.ones((N, T, self.hidden_size), dtype=self.dtype, device=self.device)
        c = torch.exp(log_c)
        b = torch.ones((N, self.hidden_size), dtype=self.dtype, device=self.device)
        for t in range(T - 2, -1, -1):
            m = mask[:, t + 1]
            nb = ((Bt[safe[:, t + 1]] * b) @ self.transition.T) / c[:, t + 1, None].clamp(
                min=torch.finfo(self.dtype).tiny)
            b = torch.where(m[:, None], nb, b)
            beta[:, t] = b
        return beta

    def next_token_logprobs(
        self, tokens: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """float [N, V]: ``log p_hmm(x_{len+1} = v | x_{1:len})`` (unconstrained)."""
        tokens = tokens.to(self.device).long()
        lengths, mask = self._lengths_mask(tokens, lengths)
        _, alpha = self.forward(tokens, lengths, return_messages=True)
        N = tokens.shape[0]
        if tokens.shape[1] == 0:
            return torch.log(self.initial @ self.emission).expand(N, -1).clone()
        last = (lengths - 1).clamp(min=0)
        f = alpha[torch.arange(N, device=self.device), last]
        pred = torch.where((lengths > 0)[:, None], f @ self.transition, self.initial.expand(N, -1))
        return torch.log(pred @ self.emission)

    # ------------------------------------------------------------------ sampling

    def sample(
        self, n: int, length: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Ancestral samples: ``(tokens int64 [n, length], hidden int64 [n, length])``.

        ``generator`` (on the HMM's device) fixes the draw."""
        x = torch.empty((n, length), dtype=torch.long, device=self.device)
        z = torch.empty((n, length), dtype=torch.long, device=self.device)
        if length == 0:
            return x, z
        zt = torch.multinomial(self.initial.expand(n, -1), 1, generator=generator).squeeze(1)
        for t in range(length):
            if t:
                zt = torch.multinomial(self.transition[zt], 1, generator=generator).squeeze(1)
            z[:, t] = zt
            x[:, t] = torch.multinomial(self.emission[zt], 1, generator=generator).squeeze(1)
        return x, z

    # ------------------------------------------------------------------ persistence

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``directory/model.safetensors`` (π, A, B) and ``directory/config.json``
        (format, version, H, V, dtype, vocabulary fingerprint, meta).  No pickle."""
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        save_file(
            {"initial": self.initial.detach().cpu().contiguous(),
             "transition": self.transition.detach().cpu().contiguous(),
             "emission": self.emission.detach().cpu().contiguous()},
            str(d / "model.safetensors"),
        )
        cfg = {"format": _FORMAT_NAME, "version": HMM_FORMAT_VERSION,
               "hidden_size": self.hidden_size, "vocab_size": self.vocab_size,
               "dtype": str(self.dtype).replace("torch.", ""),
               "vocabulary_fingerprint": self.fingerprint, "meta": jsonable_meta(self.meta)}
        (d / "config.json").write_text(json.dumps(cfg, indent=1))

    @classmethod
    def load(cls, directory: str | os.PathLike, vocabulary=None, *,
             device: str | torch.device = "cpu") -> HMM:
        """Read a folder written by :meth:`save`.

        Args:
            vocabulary: a :class:`~tractable.fsa.vocabulary.TokenVocabulary` (or its fingerprint
                string) to check against; None skips the check.

        Raises:
            VocabularyMismatchError: the HMM was trained for another vocabulary (or its size
                differs from ``vocabulary.size``).
            AutomatonFormatError: not such a folder, or an unknown format version.
        """
        from safetensors.torch import load_file

        d = Path(directory)
        try:
            cfg = json.loads((d / "config.json").read_text())
            tensors = load_file(str(d / "model.safetensors"))
        except (OSError, ValueError) as e:
            raise AutomatonFormatError(f"{d} is not a saved HMM: {e}") from e
        if cfg.get("format") != _FORMAT_NAME:
            raise AutomatonFormatError(f"{d} is not a saved HMM (format {cfg.get('format')!r})")
        if int(cfg.get("version", -1)) != HMM_FORMAT_VERSION:
            raise AutomatonFormatError(
                f"{d} has HMM format version {cfg.get('version')}; this tractable reads "
                f"version {HMM_FORMAT_VERSION}")
        fp = cfg.get("vocabulary_fingerprint")
        if vocabulary is not None:
            want = vocabulary if isinstance(vocabulary, str) else vocabulary.fingerprint
            if fp != want:
                raise VocabularyMismatchError(str(fp), want, what="HMM")
            size = getattr(vocabulary, "size", None)
            if size is not None and size != int(cfg["vocab_size"]):
                raise VocabularyMismatchError(
                    f"{fp} (V={cfg['vocab_size']})", f"{want} (V={size})", what="HMM")
        hmm = cls(tensors["initial"], tensors["transition"], tensors["emission"], fp,
                  dict(cfg.get("meta") or {}))
        return hmm if str(device) == "cpu" else hmm.to(device)

