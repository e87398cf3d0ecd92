"""Shared pytest fixtures: real tokenizers fetched by ``scripts/fetch_fixtures.py``.

``tests/`` mirrors the package: ``fsa/`` (with ``json_schema/`` and ``grammar/``), ``decode/``,
``hmm/``, ``kernels/`` and ``facade/`` (the ``tractable`` facade and CLI); data in
``tests/data``.  Pytest puts this folder on ``sys.path`` to import this file; there a sub-folder
would be found as a namespace package of its name (``tests/kernels/`` as Hugging Face's
``kernels``, which ``transformers`` and ``vllm`` probe for), so it is taken off again below: test
modules import this one as ``conftest`` (already in ``sys.modules``), and each test folder is put
on ``sys.path`` by pytest itself.  ``facade/`` is named so that it can never be taken for the
installed ``tractable`` (its editable finder comes after ``sys.path``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# `python -m pytest` puts the checkout root on sys.path, where the source folder kernels/
# (installed as tractable.kernels) would shadow Hugging Face's `kernels` package; pytest put this
# folder there, where tests/kernels/ would be a namespace package `kernels` (module docstring).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() not in (ROOT, ROOT / "tests")]

# Without a GPU the Triton kernels run under the Triton interpreter.  Triton reads
# TRITON_INTERPRET when triton.language is first imported (its own @jit helpers such as tl.sum are
# built then), so it must be set for the whole session, before any test module imports Triton.
if "TRITON_INTERPRET" not in os.environ:
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
FIXTURES = Path(os.environ.get("TRACTABLE_FIXTURES", ROOT / "fixtures"))

# Tests write only to temporary folders: the per-machine vocabulary cache
# (tractable.fsa.vocabulary_cache) goes to one for the session, subprocesses included.
_CACHE = tempfile.mkdtemp(prefix="tractable-test-cache-")
os.environ["TRACTABLE_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


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


@pytest.fixture(scope="module")
def smollm2():
    """(model, tokenizer) of SmolLM2-135M-Instruct (skips where it is not installed); torch runs
    on one thread while a module uses it (2 shared cores: see README's note on OMP)."""
    import torch

    from tractable.models import ModelNotInstalledError, load_smollm2

    try:
        model, tok = load_smollm2()
    except (ModelNotInstalledError, ImportError) as e:  # pragma: no cover - env dependent
        pytest.skip(f"SmolLM2 unavailable: {e}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield model, tok
    torch.set_num_threads(threads)
