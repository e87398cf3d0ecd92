"""The per-machine vocabulary cache (:mod:`tractable.fsa.vocabulary_cache`, issue 21): a hit is
the same vocabulary as a fresh read (bytes, EOS ids, fingerprint, trie), any change to the files
or arguments is a new entry, a damaged entry is a miss (rebuilt, never trusted), and the cache
can be turned off or be unwritable without changing results."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import tokenizer_path
from tractable.fsa import vocabulary_cache as vc
from tractable.fsa.vocabulary import TokenVocabulary

TRIE = ("parent", "byte", "child_ptr", "level_ptr", "term_ptr", "term_tokens")


def _same(a: TokenVocabulary, b: TokenVocabulary) -> None:
    assert a.token_bytes == b.token_bytes and a.eos_token_ids == b.eos_token_ids
    assert a.fingerprint == b.fingerprint and a.leading_space_rule == b.leading_space_rule
    for k in TRIE:
        assert np.array_equal(getattr(a.trie, k), getattr(b.trie, k)), k


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TRACTABLE_CACHE_DIR", str(d))
    return d / "vocab"


@pytest.mark.parametrize("name", ["gpt2", "mistral", "llama3"])
def test_hit_equals_a_fresh_read(cache, tmp_path, name):
    src = tokenizer_path(name)
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(src, folder / "tokenizer.json")
    fresh = TokenVocabulary.from_tokenizer_file(folder, cache=False)
    assert not cache.exists()
    first = TokenVocabulary.from_tokenizer_file(folder)  # miss: read, then stored
    assert len(list(cache.glob("*.npz"))) == 1
    hit = TokenVocabulary.from_tokenizer_file(folder / "tokenizer.json")
    assert "trie" in hit.__dict__  # came with its trie
    _same(fresh, first)
    _same(fresh, hit)
    assert hit.name == str(folder / "tokenizer.json")


def test_changed_files_and_arguments_are_new_entries(cache, tmp_path):
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(tokenizer_path("gpt2"), folder / "tokenizer.json")
    a = TokenVocabulary.from_tokenizer_file(folder)
    b = TokenVocabulary.from_tokenizer_file(folder, vocab_size=50304)
    c = TokenVocabulary.from_tokenizer_file(folder, eos_token_ids=[50256, 198])
    assert len(list(cache.glob("*.npz"))) == 3
    assert b.size == 50304 and c.eos_token_ids == (198, 50256) and a.size == 50257
    # a generation config beside the file changes the EOS ids: a new key, not the old entry
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [50256, 13]}))
    d = TokenVocabulary.from_tokenizer_file(folder)
    assert len(list(cache.glob("*.npz"))) == 4
    _same(d, TokenVocabulary.from_tokenizer_file(folder, cache=False))
    # the tokenizer file itself edited: one token's string changed
    spec = json.loads((folder / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    tok = next(t for t, i in vocab.items() if i == 100)
    vocab["zzzzqq"] = vocab.pop(tok)
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    e = TokenVocabulary.from_tokenizer_file(folder)
    assert e.token_bytes[100] == b"zzzzqq" and d.token_bytes[100] != b"zzzzqq"


def test_damaged_entries_are_misses(cache, tmp_path):
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(tokenizer_path("gpt2"), folder / "tokenizer.json")
    ref = TokenVocabulary.from_tokenizer_file(folder, cache=False)
    TokenVocabulary.from_tokenizer_file(folder)
    (entry,) = cache.glob("*.npz")
    good = dict(np.load(entry, allow_pickle=False))
    assert "checksum" in good
    damages = {
        "truncated": lambda: entry.write_bytes(entry.read_bytes()[:1000]),
        "garbage": lambda: entry.write_bytes(b"not a zip file at all"),
        "one byte of a token": lambda: _rewrite(entry, good, data=_flip(good["data"])),
        "lengths": lambda: _rewrite(entry, good, lens=good["lens"][::-1].copy()),
        "eos": lambda: _rewrite(entry, good, eos=np.array([5], dtype=np.int64)),
        "trie": lambda: _rewrite(entry, good, trie_term_ptr=good["trie_term_ptr"][:-1]),
        "a trie link": lambda: _rewrite(entry, good, trie_child_ptr=_bump(good["trie_child_ptr"])),
        "format": lambda: _rewrite(entry, good, format=np.array(vc.CACHE_FORMAT + 1)),
        "missing array": lambda: _rewrite(entry, {k: v for k, v in good.items()
                                                  if k != "fingerprint"}),
    }
    for what, damage in damages.items():
        damage()
        v = TokenVocabulary.from_tokenizer_file(folder)
        _same(ref, v)  # rebuilt from the file
        # ... and the entry rewritten: the next process hits again
        assert TokenVocabulary._from_cache_entry(vc.load_entry(entry.stem), "x") is not None, what


def _bump(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    out[3] += 1
    return out


def _flip(data: np.ndarray) -> np.ndarray:
    out = data.copy()
    out[len(out) // 2] ^= 0x20
    return out


def _rewrite(entry, arrays: dict, **changed) -> None:
    merged = {**arrays, **changed}
    with open(entry, "wb") as f:
        np.savez(f, **merged)


def test_cache_off_and_unwritable(tmp_path, monkeypatch):
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(tokenizer_path("gpt2"), folder / "tokenizer.json")
    ref = TokenVocabulary.from_tokenizer_file(folder, cache=False)
    for off in ("off", "0", ""):
        monkeypatch.setenv("TRACTABLE_CACHE_DIR", off)
        assert vc.cache_dir() is None
        _same(ref, TokenVocabulary.from_tokenizer_file(folder))
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    monkeypatch.setenv("TRACTABLE_CACHE_DIR", str(blocker))  # cannot mkdir below a file
    _same(ref, TokenVocabulary.from_tokenizer_file(folder))
    assert vc.store_entry("k", {"a": np.zeros(1)}) is None
    monkeypatch.delenv("TRACTABLE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert vc.cache_dir() == tmp_path / "xdg" / "tractable" / "vocab"


def test_the_suite_writes_its_cache_to_a_temporary_folder():
    import os
    import tempfile

    d = vc.cache_dir()
    assert d is not None and str(d).startswith(tempfile.gettempdir())
    assert os.environ["TRACTABLE_CACHE_DIR"] in str(d)


def test_huggingface_tokenizers_are_cached_too(cache):
    """``from_huggingface`` keys on the tokenizer's JSON serialization: a hit equals a fresh
    read for a transformers tokenizer and a bare ``tokenizers.Tokenizer``; a different EOS or
    an added token is another entry."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    path = str(tokenizer_path("llama3"))
    hf = PreTrainedTokenizerFast(tokenizer_file=path, eos_token="<|eot_id|>")
    fresh = TokenVocabulary.from_huggingface(hf, cache=False)
    assert not cache.exists()
    TokenVocabulary.from_huggingface(hf)
    hit = TokenVocabulary.from_huggingface(hf)
    assert "trie" in hit.__dict__ and len(list(cache.glob("*.npz"))) == 1
    _same(fresh, hit)
    assert hit.eos_token_ids == (128009,)
    bare = Tokenizer.from_file(str(tokenizer_path("gpt2")))
    b0 = TokenVocabulary.from_huggingface(bare, cache=False)
    TokenVocabulary.from_huggingface(bare)
    _same(b0, TokenVocabulary.from_huggingface(bare))
    other = TokenVocabulary.from_huggingface(bare, eos_token_ids=[198])
    assert other.eos_token_ids == (198,) and len(list(cache.glob("*.npz"))) == 3
    bare.add_tokens(["<my_new_token>"])
    grown = TokenVocabulary.from_huggingface(bare)
    assert grown.size == b0.size + 1 and grown.token_bytes[-1] == b"<my_new_token>"
