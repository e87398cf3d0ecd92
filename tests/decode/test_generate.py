"""``tractable.generate`` / ``generate_json``: one budget for the masks and ``generate``.

Fast part: a tiny random-init Llama with the real GPT-2 tokenizer (logits 50,304 wide): every
GCD output at a tight budget is accepted and matches the regex / validates; the budget is not
accepted twice.  Model part: SmolLM2 with a pydantic model returns validated instances."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tractable.decode.generate import generate, generate_json, model_vocabulary  # noqa: E402

import tractable  # noqa: E402

MODEL_V = 50304
EOS = 50256


@pytest.fixture(scope="module")
def hf_tok(gpt2_tokenizer):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=gpt2_tokenizer, eos_token="<|endoftext|>")
    tok.pad_token = tok.eos_token
    return tok


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=MODEL_V, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, bos_token_id=EOS, eos_token_id=EOS,
                      pad_token_id=EOS, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def test_facade_exports():
    assert tractable.generate is generate and tractable.generate_json is generate_json


def test_regex_one_budget_every_output_accepted(tiny, hf_tok):
    vocab = model_vocabulary(tiny, hf_tok)
    assert vocab.size == MODEL_V and EOS in vocab.eos_token_ids
    date = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
    A = tractable.compile_regex(date, vocab)
    m = A.min_tokens_to_accept()
    torch.manual_seed(1)
    res = generate(tiny, hf_tok, ["Today is", "A longer prompt, then a date:"], A,
                   max_new_tokens=m + 1, do_sample=True, num_return_sequences=3, vocab=vocab)
    assert len(res.texts) == 6 and res.values is None
    for text, ids, ok in zip(res.texts, res.token_ids, res.accepted):
        assert ok and re.fullmatch(date, text), text
        assert len(ids) <= m + 1


def test_schema_values_parsed_and_budget_given_once(tiny, hf_tok):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                     "maximum": 99},
                                               "ok": {"type": "boolean"}},
              "required": ["n", "ok"], "additionalProperties": False}
    vocab = model_vocabulary(tiny, hf_tok)
    A = tractable.compile_json_schema(schema, vocab)
    torch.manual_seed(2)
    res = generate(tiny, hf_tok, "JSON:", schema, max_new_tokens=A.min_tokens_to_accept() + 2,
                   do_sample=True, num_return_sequences=4, vocab=vocab)
    for v in res.values:
        assert isinstance(v, dict) and set(v) == {"n", "ok"} and 0 <= v["n"] <= 99
    with pytest.raises(ValueError, match="given once"):
        generate(tiny, hf_tok, "JSON:", A, max_new_tokens=20, max_length=30, vocab=vocab)


@pytest.mark.model
def test_smollm2_pydantic_generate_json():
    pydantic = pytest.importorskip("pydantic")
    from tractable.models import ModelNotInstalledError, load_smollm2

    try:
        model, tok = load_smollm2()
    except (ModelNotInstalledError, ImportError) as e:  # pragma: no cover - env dependent
        pytest.skip(f"SmolLM2 unavailable: {e}")

    class City(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=20)
        population: int = pydantic.Field(ge=0)
        capital: bool

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # an ordinary model: no warning
            A = tractable.compile_json_schema(City, model_vocabulary(model, tok))
        budget = A.min_tokens_to_accept() + 6  # tight: GCD must close the object in time
        torch.manual_seed(0)
        cities = generate_json(model, tok, "Describe Paris as a JSON object.", City,
                               max_new_tokens=budget, chat_template=True, do_sample=True,
                               num_return_sequences=3)
    finally:
        torch.set_num_threads(threads)
    assert len(cities) == 3 and all(isinstance(c, City) for c in cities)


def test_jump_forward_valid_forced_and_fewer_model_calls(tiny, hf_tok):
    """jump_forward=True: every output accepted at a tight budget, forced tokens appended
    without a model call each (calls + forced = tokens), the approximation warned once."""
    import tractable.decode.generate as G

    vocab = model_vocabulary(tiny, hf_tok)
    schema = {"type": "object", "properties": {"name": {"const": "get_weather"},
                                               "arguments": {"enum": [1, 22]}},
              "required": ["name", "arguments"], "additionalProperties": False}
    A = tractable.compile_json_schema(schema, vocab)
    m = A.min_tokens_to_accept()
    G._WARNED_JUMP_FORWARD = False
    torch.manual_seed(3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = generate(tiny, hf_tok, ["Call:", "Weather?"], A, max_new_tokens=m + 1,
                       vocab=vocab, jump_forward=True, do_sample=True, num_return_sequences=2)
        generate(tiny, hf_tok, ["x"], A, max_new_tokens=m + 1, vocab=vocab, jump_forward=True)
    assert sum("jump_forward" in str(x.message) for x in w) == 1
    assert len(res.texts) == 4 and all(res.accepted)
    for text, ids, f, c in zip(res.texts, res.token_ids, res.forced_tokens, res.model_calls):
        assert text.startswith('{"name":"get_weather","arguments":')
        assert f > 5 and c + f == len(ids), (text, f, c, len(ids))
    plain = generate(tiny, hf_tok, ["Call:"], A, max_new_tokens=m + 1, vocab=vocab)
    assert plain.forced_tokens is None and all(plain.accepted)
    with pytest.raises(tractable.InvalidArgumentError, match="jump_forward"):
        generate(tiny, hf_tok, ["x"], A, max_new_tokens=m + 1, vocab=vocab, jump_forward=True,
                 top_p=0.9)


def test_structural_tag_dict_through_generate(tiny, hf_tok):
    vocab = model_vocabulary(tiny, hf_tok)
    spec = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<f"], "at_least_one": True,
        "stop_after_first": True,
        "tags": [{"begin": "<f=a>", "end": "</f>",
                  "content": {"type": "json_schema", "json_schema": {"enum": [1, 2]}}}]}}
    from tractable.fsa.structural_tag import compile_structural_tag

    m = compile_structural_tag(spec, vocab).min_tokens_to_accept()
    torch.manual_seed(0)
    res = generate(tiny, hf_tok, ["a", "b"], spec, max_new_tokens=m, vocab=vocab,
                   do_sample=True)
    assert all(res.accepted) and res.values is None
    assert all(re.fullmatch(r"<f=a>[12]</f>", t) for t in res.texts), res.texts
