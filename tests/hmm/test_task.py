"""``distill_task_hmm``: a task's HMM in one call (sample store, LVD, EM), cached per argument set
and per vocabulary; a tiny random Llama and a 40-id vocabulary, so it runs in seconds."""

from __future__ import annotations

import pytest
import torch
from test_hmm_distill import _tiny_lm
from tractable.fsa.errors import InvalidArgumentError
from tractable.fsa.vocabulary import TokenVocabulary
from tractable.hmm.task import distill_task_hmm


class _CharTokenizer:
    """Raw-text tokenizer (no chat template): each character -> id 1 + ord % 36."""

    chat_template = None
    pad_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [1 + ord(c) % 36 for c in text]}


def _vocab(first: str = "a") -> TokenVocabulary:
    toks: list = [chr(ord("a") + i % 26) * (1 + i // 26) for i in range(39)] + [None]
    toks[0] = first
    return TokenVocabulary.from_token_bytes(toks, eos_token_ids=[39], name="task")


def test_distill_task_hmm_caches_per_arguments(tmp_path):
    lm, tok, vocab = _tiny_lm(V=40), _CharTokenizer(), _vocab()
    prompts = ["date?", "when did it fall", "a day"]
    kw = dict(hidden_size=4, num_samples=24, max_length=8, epochs=3, holdout=0.34)
    hmm, info = distill_task_hmm(lm, tok, vocab, prompts, tmp_path, **kw)
    assert not info["cached"] and hmm.hidden_size == 4 and hmm.vocab_size == 40
    assert hmm.fingerprint == vocab.fingerprint
    assert info["train_tokens"] > 0 and info["heldout_tokens"] > 0 and info["prompts"] == 3
    assert info["heldout_ll"] < 0 and info["lm_heldout_ll"] < 0
    assert info["sampling_seconds"] > 0
    # the same arguments: loaded, identical, nothing sampled again
    shards = sorted(tmp_path.rglob("*.safetensors")) + sorted(tmp_path.rglob("*.pt"))
    stamp = {p: p.stat().st_mtime_ns for p in shards}
    again, info2 = distill_task_hmm(lm, tok, vocab, prompts, tmp_path, **kw)
    assert info2["cached"] and torch.equal(again.emission, hmm.emission)
    assert torch.equal(again.transition, hmm.transition)
    assert all(p.stat().st_mtime_ns == t for p, t in stamp.items())
    # another H reuses the samples (same tokens trained on) but trains another HMM
    other, info3 = distill_task_hmm(lm, tok, vocab, prompts, tmp_path, **{**kw, "hidden_size": 6})
    assert not info3["cached"] and other.hidden_size == 6
    assert info3["train_tokens"] == info["train_tokens"]
    assert info3["sampling_seconds"] < info["sampling_seconds"] + 1.0
    # another vocabulary (fingerprint): another cache entry, never the first HMM
    other_vocab = _vocab("A")
    assert other_vocab.fingerprint != vocab.fingerprint
    h4, info4 = distill_task_hmm(lm, tok, other_vocab, prompts, tmp_path, **kw)
    assert not info4["cached"] and h4.fingerprint == other_vocab.fingerprint


def test_distill_task_hmm_refuses_bad_arguments(tmp_path):
    lm, tok, vocab = _tiny_lm(V=40), _CharTokenizer(), _vocab()
    with pytest.raises(InvalidArgumentError, match="prompts"):
        distill_task_hmm(lm, tok, vocab, [], tmp_path)
    with pytest.raises(InvalidArgumentError, match="hidden_size"):
        distill_task_hmm(lm, tok, vocab, ["x"], tmp_path, hidden_size=0)
