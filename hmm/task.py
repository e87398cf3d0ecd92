"""A task's HMM in one call, from a model already in memory: :func:`distill_task_hmm`.

The pipeline of :mod:`.distill` (``tractable distill``) without its command line: the LM answers
the task's prompts (chat template, temperature 1) into a resumable sample store, the HMM is
initialised by latent variable distillation (k-means of the LM's hidden states, :mod:`.lvd`)
and trained by EM with held-out early stopping (:func:`.em.fit`), as paper 002 §5.2 distils per
task.  Everything lives in ``directory``: a second call with the same arguments loads the HMM
(nothing sampled or trained again); a call with other arguments uses another sub-folder.
Used by ``tractable demo`` (its P-GCD-SMC rows) and usable for any task.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from ..fsa.errors import InvalidArgumentError
from .model import HMM

__all__ = ["distill_task_hmm"]


def distill_task_hmm(
    model, tokenizer, vocabulary, prompts: Sequence[str], directory: str | os.PathLike, *,
    hidden_size: int = 64, num_samples: int = 128, max_length: int = 32, epochs: int = 20,
    holdout: float = 0.15, batch_size: int = 32, seed: int = 0, progress: bool = False,
) -> tuple[HMM, dict]:
    """(HMM, info) distilled from ``model``'s answers to ``prompts``.

    Args:
        model, tokenizer: a Hugging Face causal LM (in eval mode) and its tokenizer.
        vocabulary: the :class:`~tractable.fsa.vocabulary.TokenVocabulary` of the automata the
            HMM will be multiplied with (its size and fingerprint go into the HMM).
        prompts: the task's user messages (each wrapped in the chat template), cycled over
            ``num_samples`` answers of at most ``max_length`` tokens.
        directory: the cache folder (created; mutated: samples and the HMM are written there).
        hidden_size: H.  holdout: fraction held out for early stopping (by prompt with two or
            more prompts, else by sequence).  epochs: at most this many EM epochs (patience 2).
        progress: print the sampler's shard lines and EM's epoch lines to stderr (else
            EM's lines are swallowed).

    Returns:
        The HMM (float32) and ``info``: training / held-out tokens, held-out LL per token
        (initial and best), the LM's own on the same tokens, and the seconds spent sampling and
        training in the call that built it (``cached`` True when it was loaded).

    Raises:
        InvalidArgumentError: no prompts, or sizes below 1.
    """
    from .em import fit, heldout_ll_per_token, smoothed_unigram
    from .lvd import lvd_init
    from .samples import SampleStore, encode_prompts, heldout_mask, prompts_fingerprint

    if not prompts or min(hidden_size, num_samples, max_length, epochs) < 1:
        raise InvalidArgumentError(
            "distill_task_hmm needs prompts and hidden_size, num_samples, max_length, epochs "
            f">= 1 (got {len(prompts)} prompts, {hidden_size}, {num_samples}, {max_length}, "
            f"{epochs})")
    ids = encode_prompts(tokenizer, list(prompts))
    k = max(1, num_samples // len(ids))
    cfg = {"num_samples": num_samples, "shard_size": min(num_samples, 256),
           "max_length": max_length, "seed": seed, "samples_per_prompt": k,
           "store_hidden": True, "num_prompts": len(ids),
           "prompts_sha256": prompts_fingerprint(ids),
           "chat_template": True, "vocabulary": vocabulary.fingerprint}
    tag = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:12]
    root = Path(directory) / tag
    hdir = root / f"hmm_H{hidden_size}_e{epochs}_h{holdout}"
    info_path = hdir / "distill.json"
    if info_path.exists():
        return HMM.load(hdir, vocabulary), dict(json.loads(info_path.read_text()), cached=True)
    t0 = time.perf_counter()
    store = SampleStore(root / "samples", cfg)
    store.fill(model, ids, batch_size=batch_size, eos_token_ids=vocabulary.eos_token_ids,
               pad_token_id=tokenizer.pad_token_id or 0, progress=progress)
    t_sample = time.perf_counter() - t0
    S = store.load(with_hidden=True)
    m = heldout_mask(S, num_prompts=len(ids), fraction=holdout, seed=seed)
    tr, ho = S.select(~m), S.select(m)
    if len(tr) == 0 or len(ho) == 0:
        raise InvalidArgumentError(f"{num_samples} samples leave no training or held-out "
                                   f"sequence at holdout {holdout}; sample more")
    t1 = time.perf_counter()
    V = vocabulary.size
    prior = smoothed_unigram(tr.tokens, tr.lengths, V, 0.1)
    kw = dict(hidden_size=hidden_size, vocab_size=V, pseudocount=0.1, emission_pseudocount=1.0)
    start = lvd_init(tr.tokens, tr.lengths, tr.hidden, emission_prior=prior, iterations=20,
                     seed=seed, fingerprint=vocabulary.fingerprint, **kw)
    init_ll = heldout_ll_per_token(start, ho.tokens, ho.lengths)
    with contextlib.nullcontext() if progress else contextlib.redirect_stderr(io.StringIO()):
        hmm = fit(tr.tokens, tr.lengths, ho.tokens, ho.lengths, epochs=epochs, batch_size=128,
                  init=start, patience=2, seed=seed, progress=progress,
                  fingerprint=vocabulary.fingerprint, **kw)
    info = {"hidden_size": hidden_size, "prompts": len(ids), "train_sequences": len(tr),
            "train_tokens": tr.num_tokens, "heldout_tokens": ho.num_tokens,
            "init_heldout_ll": init_ll, "heldout_ll": hmm.meta["heldout_ll_per_token"],
            "lm_heldout_ll": float(ho.lm_logprob.double().sum()) / max(1, ho.num_tokens),
            "sampling_seconds": t_sample, "training_seconds": time.perf_counter() - t1}
    hmm.save(hdir)
    info_path.write_text(json.dumps(info, indent=1))
    return hmm, dict(info, cached=False)
