"""TokenVocabulary: the exact bytes every token id of a model emits.

A constraint is a set of *byte* strings; a model emits *token ids*.  The bridge is the byte
string each id contributes to the decoded output:

* byte-level BPE (GPT-2, Llama-3, Qwen2/3, SmolLM2): token strings are written in the
  GPT-2 byte-to-unicode alphabet (``Ġ`` = space, ``Ċ`` = newline, …) and map back 1:1 to bytes;
  a token may hold part of a UTF-8 character (GPT-2 splits emoji and CJK characters);
* SentencePiece (Llama-2, Mistral): ``▁`` stands for a space and ``<0xNN>`` byte-fallback
  tokens emit the single byte ``0xNN``;
* special tokens (BOS, EOS, chat markers, reserved ids) emit no text: their entry is ``None``
  and no constraint ever allows them, except EOS ids, which the masks allow in accepting states;
* ids past the tokenizer's size (a model's embedding matrix padded to a multiple of 64 or 128)
  are ``None`` too: never allowed;
* distinct ids with the same bytes are all kept (a model may emit either).

The vocabulary is immutable.  Its :attr:`fingerprint` (SHA-256 over the byte strings, the EOS
ids and the size) keys compile caches and is stored in saved automata.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from .errors import TokenError, VocabularyError

__all__ = ["TokenVocabulary", "VocabTrie", "bytes_to_unicode"]

# End-of-sequence token names tried, in order, when a tokenizer file does not say which is EOS.
_KNOWN_EOS = (
    "<|end_of_text|>",
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "</s>",
    "<eos>",
    "<|end|>",
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable unicode characters."""
    bs = list(range(ord("!"), ord("~") + 1))
    bs += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_BYTE_DECODER = {c: b for b, c in bytes_to_unicode().items()}


@dataclass(frozen=True, eq=False)
class VocabTrie:
    """A byte trie over the text tokens of a vocabulary, numbered breadth-first.

    Node 0 is the root (the empty prefix).  Nodes of depth ``d`` are the contiguous range
    ``level_ptr[d] : level_ptr[d+1]``, and the children of node ``n`` are the contiguous range
    ``child_ptr[n] : child_ptr[n+1]`` (sorted by byte).  Arrays (numpy, length N = nodes):

    * ``parent`` int64 [N] (root: -1), ``byte`` uint8 [N] (root: 0),
    * ``child_ptr`` int64 [N+1], ``level_ptr`` int64 [max_depth+2],
    * ``term_ptr`` int64 [N+1] and ``term_tokens`` int64 [T]: the token ids whose bytes end
      exactly at node ``n`` are ``term_tokens[term_ptr[n]:term_ptr[n+1]]``.
    """

    parent: np.ndarray
    byte: np.ndarray
    child_ptr: np.ndarray
    level_ptr: np.ndarray
    term_ptr: np.ndarray
    term_tokens: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.parent.shape[0])

    @property
    def max_depth(self) -> int:
        return int(self.level_ptr.shape[0]) - 2

    @staticmethod
    def build(token_bytes: Sequence[bytes | None]) -> VocabTrie:
        ids = np.array([i for i, b in enumerate(token_bytes) if b], dtype=np.int64)
        if ids.size == 0:
            z = np.zeros(1, dtype=np.int64)
            return VocabTrie(
                np.array([-1]), np.zeros(1, np.uint8), np.zeros(2, np.int64),
                np.array([0, 1]), z.repeat(2), np.zeros(0, np.int64),
            )
        lens = np.array([len(token_bytes[i]) for i in ids], dtype=np.int64)
        max_len = int(lens.max())
        joined = b"".join(token_bytes[i] for i in ids)
        flat = np.frombuffer(joined, dtype=np.uint8)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        node_of = np.zeros(ids.size, dtype=np.int64)  # current trie node per token
        parents = [np.array([-1], np.int64)]
        bytes_ = [np.zeros(1, np.uint8)]
        level_ptr = [0, 1]
        next_id = 1
        for d in range(1, max_len + 1):
            alive = np.nonzero(lens >= d)[0]
            key = node_of[alive] * 256 + flat[starts[alive] + d - 1].astype(np.int64)
            uniq, inv = np.unique(key, return_inverse=True)
            new_ids = next_id + np.arange(uniq.size, dtype=np.int64)
            node_of[alive] = new_ids[inv]
            parents.append(uniq // 256)
            bytes_.append((uniq % 256).astype(np.uint8))
            next_id += uniq.size
            level_ptr.append(next_id)
        parent = np.concatenate(parents)
        byte = np.concatenate(bytes_)
        n = parent.size
        # children of n are contiguous because each level is sorted by (parent, byte)
        counts = np.bincount(parent[1:], minlength=n)
        child_ptr = np.zeros(n + 1, dtype=np.int64)
        child_ptr[1:] = np.cumsum(counts)
        child_ptr += 1  # children of the root start at node 1
        child_ptr[0] = 1
        order = np.argsort(node_of, kind="stable")
        term_tokens = ids[order]
        term_counts = np.bincount(node_of, minlength=n)
        term_ptr = np.zeros(n + 1, dtype=np.int64)
        term_ptr[1:] = np.cumsum(term_counts)
        return VocabTrie(parent, byte, child_ptr, np.array(level_ptr, np.int64), term_ptr,
                         term_tokens)


@dataclass(frozen=True, eq=False)
class TokenVocabulary:
    """The bytes each token id emits, and which ids end a sequence.

    Attributes:
        token_bytes: one entry per id, ``0 .. size - 1``; ``None`` for ids that never emit
            text (special tokens, EOS, padding ids past the tokenizer).
        eos_token_ids: ids that end generation (several allowed, e.g. ``<|eot_id|>`` and
            ``<|end_of_text|>``).  Their ``token_bytes`` entry is ``None``.
        name: a human-readable label (tokenizer file or class).
    """

    token_bytes: tuple[bytes | None, ...]
    eos_token_ids: tuple[int, ...]
    name: str = "vocabulary"
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        size = len(self.token_bytes)
        for e in self.eos_token_ids:
            if not 0 <= e < size:
                raise VocabularyError(f"EOS id {e} is outside the vocabulary of size {size}")
            if self.token_bytes[e] is not None:
                raise VocabularyError(f"EOS id {e} must not emit text")

    # ---------------------------------------------------------------- constructors

    @classmethod
    def from_token_bytes(
        cls,
        token_bytes: Sequence[bytes | str | None],
        eos_token_ids: Iterable[int] = (),
        name: str = "custom",
    ) -> TokenVocabulary:
        """A vocabulary from explicit byte strings (``str`` entries are UTF-8 encoded).

        Empty strings are treated like ``None`` (a token that emits nothing would be a free
        self-loop on every state, so it is never allowed)."""
        tb: list[bytes | None] = []
        for t in token_bytes:
            if isinstance(t, str):
                t = t.encode("utf-8")
            tb.append(t if t else None)
        eos = tuple(sorted(set(int(e) for e in eos_token_ids)))
        for e in eos:
            if 0 <= e < len(tb):
                tb[e] = None
        return cls(tuple(tb), eos, name)

    @classmethod
    def from_huggingface(
        cls,
        tokenizer,
        vocab_size: int | None = None,
        eos_token_ids: Iterable[int] | None = None,
    ) -> TokenVocabulary:
        """From a ``transformers`` tokenizer (fast) or a ``tokenizers.Tokenizer``.

        Args:
            tokenizer: the tokenizer.
            vocab_size: the model's vocabulary (logits) size when it is larger than the
                tokenizer's; extra ids are padding and never allowed.  ``None``: the
                tokenizer's own size.
            eos_token_ids: ids that end generation; default: the tokenizer's ``eos_token_id``
                (plus ``<|eot_id|>``/``<|im_end|>`` when the tokenizer has them and they are
                its EOS token's chat counterpart is left to the caller: pass them here).

        Raises:
            VocabularyError: unknown tokenizer model/decoder, or ``vocab_size`` smaller than
                the tokenizer.
        """
        backend = _backend_tokenizer(tokenizer)
        spec = json.loads(backend.to_str())
        if eos_token_ids is None:
            eos = getattr(tokenizer, "eos_token_id", None)
            if eos is None:
                eos_token_ids = _guess_eos(backend)
            else:
                eos_token_ids = [eos] if isinstance(eos, int) else list(eos)
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        return cls._from_spec(backend, spec, vocab_size, eos_token_ids, name)

    @classmethod
    def from_tokenizer_file(
        cls,
        path: str | os.PathLike,
        vocab_size: int | None = None,
        eos_token_ids: Iterable[int] | None = None,
    ) -> TokenVocabulary:
        """From a ``tokenizer.json`` file (or a folder holding one), without transformers.

        EOS: ``eos_token_ids`` if given; else the ``eos_token`` of a ``tokenizer_config.json``
        next to the file; else the first of the usual EOS names the vocabulary has.
        """
        from tokenizers import Tokenizer

        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.exists():
            raise VocabularyError(f"no tokenizer file at {p}")
        backend = Tokenizer.from_file(str(p))
        spec = json.loads(p.read_text(encoding="utf-8"))
        if eos_token_ids is None:
            eos_token_ids = None
            cfg = p.parent / "tokenizer_config.json"
            if cfg.exists():
                tok = json.loads(cfg.read_text(encoding="utf-8")).get("eos_token")
                if isinstance(tok, dict):
                    tok = tok.get("content")
                if isinstance(tok, str) and backend.token_to_id(tok) is not None:
                    eos_token_ids = [backend.token_to_id(tok)]
            if eos_token_ids is None:
                eos_token_ids = _guess_eos(backend)
        return cls._from_spec(backend, spec, vocab_size, eos_token_ids, str(p))

    @classmethod
    def _from_spec(cls, backend, spec: dict, vocab_size, eos_token_ids, name) -> TokenVocabulary:
        n_tok = backend.get_vocab_size(with_added_tokens=True)
        vocab = backend.get_vocab(with_added_tokens=True)
        size = max(n_tok, max(vocab.values()) + 1 if vocab else 0)
        if vocab_size is not None:
            if vocab_size < size:
                raise VocabularyError(
                    f"vocab_size={vocab_size} is smaller than the tokenizer's {size} ids"
                )
            size = vocab_size
        id_to_tok: list[str | None] = [None] * size
        for t, i in vocab.items():
            id_to_tok[i] = t
        special = set()
        added_text: dict[int, str] = {}
        for a in spec.get("added_tokens", []) or []:
            if a.get("special", False):
                special.add(a["id"])
            else:
                added_text[a["id"]] = a["content"]
        decode = _token_decoder(spec)
        out: list[bytes | None] = [None] * size
        for i, t in enumerate(id_to_tok):
            if t is None or i in special:
                continue
            if i in added_text:
                out[i] = added_text[i].encode("utf-8") or None
                continue
            out[i] = decode(t) or None
        return cls.from_token_bytes(out, eos_token_ids, name)

    # ---------------------------------------------------------------- queries

    @property
    def size(self) -> int:
        """Number of ids (the model's logits width)."""
        return len(self.token_bytes)

    def __len__(self) -> int:
        return len(self.token_bytes)

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 hex digest of the size, the byte strings and the EOS ids."""
        h = hashlib.sha256()
        h.update(f"tractable-vocab-v1:{self.size}:".encode())
        lens = np.array([-1 if b is None else len(b) for b in self.token_bytes], dtype=np.int64)
        h.update(lens.tobytes())
        h.update(b"".join(b for b in self.token_bytes if b))
        h.update(",".join(map(str, self.eos_token_ids)).encode())
        return h.hexdigest()

    @cached_property
    def trie(self) -> VocabTrie:
        """The byte trie over the text tokens (built once, on first use)."""
        return VocabTrie.build(self.token_bytes)

    @cached_property
    def text_token_mask(self) -> np.ndarray:
        """bool [size]: ids that emit text."""
        return np.array([b is not None for b in self.token_bytes], dtype=bool)

    def decode_bytes(self, token_ids: Iterable[int]) -> bytes:
        """Concatenated bytes of ``token_ids``; EOS ids are skipped.

        Raises:
            TokenError: an id out of range or one that never emits text (special, padding).
        """
        parts = []
        eos = set(self.eos_token_ids)
        for t in token_ids:
            t = int(t)
            if not 0 <= t < self.size:
                raise TokenError(f"token id out of range 0..{self.size - 1}", t)
            if t in eos:
                continue
            b = self.token_bytes[t]
            if b is None:
                raise TokenError("token emits no text (special or padding id)", t)
            parts.append(b)
        return b"".join(parts)

    def memory_bytes(self) -> int:
        return sum(len(b) for b in self.token_bytes if b) + 8 * self.size

    def __repr__(self) -> str:
        n_text = int(self.text_token_mask.sum())
        return (
            f"TokenVocabulary({self.name!r}, size={self.size}, text_tokens={n_text}, "
            f"eos={list(self.eos_token_ids)})"
        )


# ---------------------------------------------------------------------------- helpers


def _backend_tokenizer(tokenizer):
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    for attr in ("backend_tokenizer", "_tokenizer"):
        b = getattr(tokenizer, attr, None)
        if isinstance(b, Tokenizer):
            return b
    raise VocabularyError(
        f"{type(tokenizer).__name__} has no fast (tokenizers) backend; "
        "load it with use_fast=True or pass a tokenizer.json to from_tokenizer_file()"
    )


def _guess_eos(backend) -> list[int]:
    for name in _KNOWN_EOS:
        i = backend.token_to_id(name)
        if i is not None:
            return [i]
    raise VocabularyError("cannot tell the EOS token; pass eos_token_ids=[...]")


def _decoder_kinds(dec: dict | None) -> list[dict]:
    if not dec:
        return []
    if dec.get("type") == "Sequence":
        out = []
        for d in dec.get("decoders", []):
            out.extend(_decoder_kinds(d))
        return out
    return [dec]


def _token_decoder(spec: dict):
    """A function token-string -> bytes for the tokenizer described by ``spec``."""
    model = spec.get("model", {}) or {}
    mtype = model.get("type")
    decs = _decoder_kinds(spec.get("decoder"))
    kinds = {d.get("type") for d in decs}
    if "ByteLevel" in kinds:
        def byte_level(t: str) -> bytes:
            try:
                return bytes(_BYTE_DECODER[c] for c in t)
            except KeyError:
                # an added token written in plain text: emit its UTF-8
                return t.encode("utf-8")
        return byte_level
    if mtype == "WordPiece" or "WordPiece" in kinds:
        raise VocabularyError(
            "WordPiece vocabularies (BERT) do not decode to exact bytes; not supported"
        )
    replaces = []
    for d in decs:
        if d.get("type") == "Replace":
            pat = d.get("pattern", {})
            src = pat.get("String") if isinstance(pat, dict) else pat
            if src is not None:
                replaces.append((src, d.get("content", "")))
        elif d.get("type") == "Metaspace":
            replaces.append((d.get("replacement", "▁"), " "))
    if not replaces and mtype in ("BPE", "Unigram"):
        pre = spec.get("pre_tokenizer") or {}
        if "Metaspace" in json.dumps(pre):
            replaces.append(("▁", " "))
    byte_fallback = "ByteFallback" in kinds or bool(model.get("byte_fallback"))

    def sentencepiece(t: str) -> bytes:
        if byte_fallback and len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            try:
                return bytes([int(t[3:5], 16)])
            except ValueError:
                pass
        for a, b in replaces:
            t = t.replace(a, b)
        return t.encode("utf-8")

    if mtype in ("BPE", "Unigram"):
        return sentencepiece
    raise VocabularyError(f"unsupported tokenizer model {mtype!r} / decoders {sorted(kinds)}")
