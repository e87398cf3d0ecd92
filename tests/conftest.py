"""Shared pytest fixtures: real tokenizers fetched by ``scripts/fetch_fixtures.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("TRACTABLE_FIXTURES", ROOT / "fixtures"))


def tokenizer_path(name: str) -> Path:
    """Path of a fetched ``tokenizer.json`` (``gpt2``, ``llama3``, ``qwen3``, ``mistral``)."""
    p = FIXTURES / "tokenizers" / name / "tokenizer.json"
    if not p.exists():
        pytest.fail(f"missing fixture {p}: run `python scripts/fetch_fixtures.py` first")
    return p


def _vocab(name: str):
    from tractable.fsa.vocabulary import TokenVocabulary

    return TokenVocabulary.from_tokenizer_file(tokenizer_path(name))


def _tokenizer(name: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_path(name)))


@pytest.fixture(scope="session")
def gpt2_vocab():
    return _vocab("gpt2")


@pytest.fixture(scope="session")
def llama3_vocab():
    return _vocab("llama3")


@pytest.fixture(scope="session")
def qwen3_vocab():
    return _vocab("qwen3")


@pytest.fixture(scope="session")
def mistral_vocab():
    return _vocab("mistral")


@pytest.fixture(scope="session")
def gpt2_tokenizer():
    return _tokenizer("gpt2")


@pytest.fixture(scope="session")
def llama3_tokenizer():
    return _tokenizer("llama3")


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    return _tokenizer("qwen3")


@pytest.fixture(scope="session")
def mistral_tokenizer():
    return _tokenizer("mistral")
