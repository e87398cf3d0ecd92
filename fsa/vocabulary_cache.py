"""The per-machine cache of vocabularies read from tokenizer files.

:meth:`~.vocabulary.TokenVocabulary.from_tokenizer_file` parses the tokenizer's JSON, decodes
every token string to its bytes and builds the byte trie: 0.35-0.5 s for Llama-3 and Qwen3 in
every fresh process, and ``from_huggingface`` 0.5-0.8 s (measured here), work that depends only
on the tokenizer.  This module keeps
its result on disk, keyed by a digest of what it was computed from, so a process pays it once
per machine: a hit loads in ~0.05 s.

Key: BLAKE2b over :data:`CACHE_FORMAT`, the bytes of ``tokenizer.json`` and of the
``tokenizer_config.json`` / ``generation_config.json`` beside it (they decide the EOS ids), and
the ``vocab_size`` and ``eos_token_ids`` arguments.  Any change to the files makes a new key.
For a tokenizer object (``from_huggingface``): its backend's JSON serialization
(``to_str()``, 0.15-0.2 s) in place of the files, and its ``eos_token_id``.

Entry: one ``.npz`` file (``numpy.load`` with ``allow_pickle=False``: nothing is unpickled)
holding the token bytes (concatenated, with lengths; -1 = no text), the EOS ids, the
leading-space rule, the trie arrays, the vocabulary's fingerprint and a checksum of all of them.
An unreadable entry or one whose checksum does not match is a miss; the caller also checks the
fingerprint recomputed from the bytes (and names the vocabulary after the file it was asked
for).
Written atomically (a temporary file renamed into place), best effort: a read-only or full disk
only costs the rebuild.

Location: ``$TRACTABLE_CACHE_DIR`` when set (``0``, ``off`` or empty: no cache), else
``$XDG_CACHE_HOME/tractable`` or ``~/.cache/tractable``, sub-folder ``vocab``.  The test suite
points it at a temporary folder.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

__all__ = ["CACHE_FORMAT", "cache_dir", "cache_key", "load_entry", "store_entry", "pack",
           "unpack"]

#: Bumped whenever the entry layout or what the vocabulary reader computes changes.
CACHE_FORMAT = 1
_CONFIGS = ("tokenizer_config.json", "generation_config.json")


def cache_dir() -> Path | None:
    """The folder of vocabulary entries, or None when caching is off (module docstring)."""
    raw = os.environ.get("TRACTABLE_CACHE_DIR")
    if raw is not None:
        if raw.strip().lower() in ("", "0", "off", "false", "no"):
            return None
        base = Path(raw)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "tractable"
    return base / "vocab"


def cache_key(tokenizer_bytes: bytes, folder: Path | None, vocab_size: int | None,
              eos_token_ids: Iterable[int | str] | None) -> str:
    """Hex digest naming the entry of one ``from_tokenizer_file`` call (module docstring), or
    of one ``from_huggingface`` call (``folder=None``: the tokenizer's own JSON serialization
    is ``tokenizer_bytes``, and its EOS id is in ``eos_token_ids``)."""
    h = hashlib.blake2b(digest_size=20)
    h.update(f"tractable-vocab-cache-{CACHE_FORMAT}\0".encode())
    h.update(len(tokenizer_bytes).to_bytes(8, "little"))
    h.update(tokenizer_bytes)
    for name in _CONFIGS if folder is not None else ():
        p = folder / name
        data = p.read_bytes() if p.is_file() else b"\xff(absent)"
        h.update(f"\0{name}:{len(data)}\0".encode())
        h.update(data)
    eos = None if eos_token_ids is None else [repr(e) for e in eos_token_ids]
    h.update(f"\0{vocab_size!r}\0{eos!r}".encode())
    return h.hexdigest()


def load_entry(key: str) -> dict[str, np.ndarray] | None:
    """The arrays of entry ``key``, or None (no cache, no entry, unreadable entry)."""
    d = cache_dir()
    if d is None:
        return None
    p = d / f"{key}.npz"
    try:
        with np.load(p, allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except Exception:  # noqa: BLE001 - any unreadable entry (bad zip, truncated, ...) is a miss
        return None
    if int(out.get("format", np.array(-1))) != CACHE_FORMAT:
        return None
    check = out.pop("checksum", None)
    if check is None or str(check) != _checksum(out):
        return None
    return out


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    """BLAKE2b over every array (name, dtype, shape, bytes) in name order: a damaged or edited
    entry (the trie arrays are used as stored) never loads."""
    h = hashlib.blake2b(digest_size=20)
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}:{a.dtype.str}:{a.shape}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def store_entry(key: str, arrays: dict[str, np.ndarray]) -> Path | None:
    """Write entry ``key`` (atomically; best effort).  Returns its path, or None when caching
    is off or the folder cannot be written."""
    d = cache_dir()
    if d is None:
        return None
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".npz", dir=d)
        try:
            arrays = {"format": np.array(CACHE_FORMAT), **arrays}
            with os.fdopen(fd, "wb") as f:
                np.savez(f, checksum=np.array(_checksum(arrays)), **arrays)
            os.replace(tmp, d / f"{key}.npz")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return None
    return d / f"{key}.npz"


def pack(token_bytes, eos_token_ids, rule: str, fingerprint: str,
         trie: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays of an entry: token bytes concatenated with their lengths (-1: no text), EOS
    ids, leading-space rule, fingerprint and the trie arrays (``trie_<field>``)."""
    lens = np.array([-1 if b is None else len(b) for b in token_bytes], dtype=np.int64)
    return {
        "lens": lens,
        "data": np.frombuffer(b"".join(b for b in token_bytes if b), dtype=np.uint8),
        "eos": np.array(eos_token_ids, dtype=np.int64),
        "rule": np.array(rule), "fingerprint": np.array(fingerprint),
        **{f"trie_{k}": v for k, v in trie.items()},
    }


def unpack(e: dict[str, np.ndarray] | None, trie_fields: tuple[str, ...]):
    """``(token_bytes tuple, eos tuple, rule, fingerprint, trie arrays)`` of an entry, or None
    when it is missing or malformed (the caller re-checks the fingerprint)."""
    if e is None:
        return None
    try:
        lens = e["lens"].astype(np.int64)
        data = e["data"].tobytes()
        ends = np.cumsum(np.maximum(lens, 0)).tolist()
        if (ends[-1] if ends else 0) != len(data):
            return None
        tb: list[bytes | None] = []
        start = 0
        for n, end in zip(lens.tolist(), ends):
            tb.append(None if n < 0 else data[start:end])
            start = end
        trie = tuple(e[f"trie_{k}"] for k in trie_fields)
        if int(trie[trie_fields.index("term_ptr")][-1]) != int(np.count_nonzero(lens > 0)):
            return None
        return (tuple(tb), tuple(int(x) for x in e["eos"].tolist()), str(e["rule"]),
                str(e["fingerprint"]), trie)
    except Exception:  # noqa: BLE001 - an entry that does not check out is a miss
        return None
