"""TokenVocabulary: the exact bytes every token id of a model emits.

A constraint is a set of *byte* strings; a model emits *token ids*.  The bridge is the byte
string each id contributes to the decoded output, read off the tokenizer's own decoder (the
``decoder`` of its ``tokenizer.json``), so that for every sequence of text ids
``vocab.decode_bytes(ids)`` is what ``tokenizer.decode(ids, skip_special_tokens=True)`` prints:

* **byte-level BPE** (GPT-2, Llama-3, Qwen2/3, SmolLM2; ``ByteLevel`` decoder): token strings
  are written in the GPT-2 byte-to-unicode alphabet (``Ġ`` = space, ``Ċ`` = newline, ...) and
  map back 1:1 to bytes; a token may hold part of a UTF-8 character (GPT-2 splits emoji and CJK
  characters).  A token string with a character outside that alphabet (an added token written
  in plain text) emits its own UTF-8, as the ``ByteLevel`` decoder does.  Here
  ``tokenizer.decode(ids)`` is exactly ``decode_bytes(ids).decode("utf-8", "replace")``.
* **SentencePiece** (Llama-2, Mistral, Gemma; ``Replace``/``Metaspace``, ``ByteFallback``,
  ``Fuse``, ``Strip`` decoders): ``▁`` stands for a space and *is part of the token's bytes*
  (``▁Hello`` emits ``b" Hello"``); ``<0xNN>`` byte-fallback tokens emit the single byte
  ``0xNN``.  The tokenizer's decoder also drops the leading space of the *whole decoded text*
  (``Strip`` after ``Fuse``: one leading space; ``Metaspace``: every ``▁`` of the first token):
  that is a display convention of :meth:`tokenizers.Tokenizer.decode` for a sequence that starts
  at the beginning of a document, not a property of the token, so it is not applied here and is
  recorded in :attr:`TokenVocabulary.leading_space_rule`.  A constraint over the model's output
  therefore sees ``" Hello"`` for ``▁Hello`` (write the regex accordingly, or strip one leading
  space before matching, as the decoder does).
* **special tokens** (BOS, EOS, chat markers, reserved ids; ``special: true`` in the tokenizer)
  emit no text: their entry is ``None`` and no constraint ever allows them, except EOS ids, which
  the masks allow in accepting states.  Several EOS ids are allowed (Llama-3-Instruct ends turns
  with ``<|eot_id|>`` 128009 and documents with ``<|end_of_text|>`` 128001).  An EOS id never
  emits text, even if the tokenizer has a text for it.  Non-special added tokens (Qwen3's
  ``<tool_call>``, ``<think>``) emit their text, as ``decode`` prints it.
* ids past the tokenizer's size (a model's embedding matrix padded to a multiple of 64 or 128,
  e.g. Qwen's 151669 tokens in a 151936-wide head) are ``None`` too: never allowed;
* distinct ids with the same bytes are all kept (a model may emit either: Mistral's ``▁`` and
  ``<0x20>`` both emit a space);
* a token whose bytes are empty is ``None`` (it would be a free self-loop on every state).

WordPiece (BERT) and tokenizers without a decoder (``decode`` joins tokens with spaces) have no
per-token bytes and raise :class:`~.errors.VocabularyError`, as does any decoder step whose
effect is not a per-token byte string (a regex ``Replace``, a ``Strip`` of trailing text, ...).

The vocabulary is immutable and picklable.  Its :attr:`fingerprint` (SHA-256 over the size, the
byte strings and the EOS ids) keys compile caches and is stored in saved automata.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from .errors import TokenError, VocabularyError
from .gc_pause import paused_gc

__all__ = ["TokenVocabulary", "VocabTrie", "bytes_to_unicode", "require_vocabulary"]

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

#: The arrays of a :class:`VocabTrie`, in field order.
_TRIE_FIELDS = ("parent", "byte", "child_ptr", "level_ptr", "term_ptr", "term_tokens")

#: Values of :attr:`TokenVocabulary.leading_space_rule`.
LEADING_SPACE_RULES = ("none", "strip", "metaspace")


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
# str.translate table: byte-level character -> the character with code point = its byte, so
# that ``s.translate(_BL_TRANSLATE).encode("latin-1")`` decodes a whole string at once.
_BL_TRANSLATE = {ord(c): b for c, b in _BYTE_DECODER.items()}
# a character outside the byte-level alphabet (the token then decodes to its own UTF-8)
_NON_BYTE_LEVEL = re.compile("[^" + "".join(re.escape(c) for c in sorted(_BYTE_DECODER)) + "]")
# tokenizers' ByteFallback: a 6-byte token "<0x" + u8::from_str_radix(2 chars, 16) + ">"
_BYTE_FALLBACK = re.compile(r"<0x(\+?[0-9A-Fa-f]{1,2})>")


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
        eos_token_ids: sorted ids that end generation (several allowed, e.g. ``<|eot_id|>``
            and ``<|end_of_text|>``).  Their ``token_bytes`` entry is ``None``.
        name: a human-readable label (tokenizer file or class).
        leading_space_rule: how the tokenizer's own ``decode`` differs from
            ``decode_bytes(ids).decode()`` at the start of a text (see the module docstring):
            ``"none"`` (byte-level BPE: no difference), ``"strip"`` (``Strip`` decoder: one
            leading space of the whole text is dropped) or ``"metaspace"`` (``Metaspace``
            decoder: every ``▁``-space of the first token is dropped).  Not part of the
            fingerprint: it does not change what any id emits.

    Equality is identity; compare :attr:`fingerprint` to test two vocabularies for sameness.
    Instances pickle (the cached trie and fingerprint travel with them).
    """

    token_bytes: tuple[bytes | None, ...]
    eos_token_ids: tuple[int, ...]
    name: str = "vocabulary"
    leading_space_rule: str = "none"
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        size = len(self.token_bytes)
        if size == 0:
            raise VocabularyError("a vocabulary needs at least one id")
        for e in self.eos_token_ids:
            if not 0 <= e < size:
                raise VocabularyError(f"EOS id {e} is outside the vocabulary of size {size}")
            if self.token_bytes[e] is not None:
                raise VocabularyError(f"EOS id {e} must not emit text")
        if self.leading_space_rule not in LEADING_SPACE_RULES:
            raise VocabularyError(
                f"leading_space_rule={self.leading_space_rule!r}; expected one of "
                f"{LEADING_SPACE_RULES}"
            )

    # ---------------------------------------------------------------- constructors

    @classmethod
    def from_token_bytes(
        cls,
        token_bytes: Sequence[bytes | str | None],
        eos_token_ids: Iterable[int] = (),
        name: str = "custom",
        *,
        leading_space_rule: str = "none",
    ) -> TokenVocabulary:
        """A vocabulary from explicit byte strings (``str`` entries are UTF-8 encoded).

        Empty strings are treated like ``None`` (a token that emits nothing would be a free
        self-loop on every state, so it is never allowed).  EOS ids are set to ``None``.

        Raises:
            VocabularyError: an EOS id outside ``0 .. len(token_bytes) - 1``, or no ids.
        """
        tb: list[bytes | None] = []
        for t in token_bytes:
            if isinstance(t, str):
                t = t.encode("utf-8")
            elif t is not None and not isinstance(t, bytes):
                t = bytes(t)
            tb.append(t if t else None)
        eos = tuple(sorted({int(e) for e in eos_token_ids}))
        for e in eos:
            if 0 <= e < len(tb):
                tb[e] = None
        return cls(tuple(tb), eos, name, leading_space_rule)

    @classmethod
    def from_huggingface(
        cls,
        tokenizer,
        vocab_size: int | None = None,
        eos_token_ids: Iterable[int | str] | None = None,
        *,
        cache: bool = True,
    ) -> TokenVocabulary:
        """From a ``transformers`` fast tokenizer or a ``tokenizers.Tokenizer``.

        With ``cache`` (default) the result and its trie are kept in the per-machine cache
        (:mod:`.vocabulary_cache`, keyed by the tokenizer's JSON serialization and the
        arguments): 0.5-0.8 s -> ~0.3 s for Llama-3 / Qwen3 in a later process.

        Args:
            tokenizer: the tokenizer (its ``backend_tokenizer`` is read: the token strings,
                which added tokens are special, and the decoder).
            vocab_size: the model's vocabulary (logits) size when it is larger than the
                tokenizer's (``model.config.vocab_size``); extra ids are padding and never
                allowed.  ``None``: the tokenizer's own size.
            eos_token_ids: ids (or token strings) that end generation.  Default: the
                tokenizer's ``eos_token_id``; for a bare ``tokenizers.Tokenizer``, the first of
                the usual EOS names it has.  Chat models often end a turn with another token
                (``<|eot_id|>``, ``<|im_end|>``): pass all of them here.

        Raises:
            VocabularyError: a slow tokenizer, an unsupported model/decoder (WordPiece, no
                decoder), ``vocab_size`` smaller than the tokenizer, or an unknown EOS.
        """
        backend = _backend_tokenizer(tokenizer)
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        if eos_token_ids is None:
            eos = getattr(tokenizer, "eos_token_id", None)
            if eos is not None:
                eos_token_ids = [eos] if isinstance(eos, int) else list(eos)
        key = None
        if cache:
            from . import vocabulary_cache as vc

            try:
                raw = backend.to_str().encode("utf-8")
            except Exception:  # noqa: BLE001 - a backend that cannot serialize: no cache
                raw = None
            if raw is not None:
                key = vc.cache_key(raw, None, vocab_size, eos_token_ids)
                hit = cls._from_cache_entry(vc.load_entry(key), name)
                if hit is not None:
                    return hit
        # The backend's `special` flags decide, as they do for decode(skip_special_tokens=True)
        # (tokens added through transformers' add_special_tokens are flagged there too).
        table = _table_from_backend(backend)
        if eos_token_ids is None:
            eos_token_ids = _guess_eos(table)
        v = cls._from_table(table, vocab_size, eos_token_ids, name)
        if key is not None:
            vc.store_entry(key, v._cache_entry())
        return v

    @classmethod
    def from_tokenizer_file(
        cls,
        path: str | os.PathLike,
        vocab_size: int | None = None,
        eos_token_ids: Iterable[int | str] | None = None,
        *,
        cache: bool = True,
    ) -> TokenVocabulary:
        """From a ``tokenizer.json`` file (or a folder holding one), without transformers.

        The file is read as JSON (the ``tokenizers`` library is only loaded when an added token
        must be normalized to know its string); Llama-3 loads in about 0.4 s.  With ``cache``
        (default) the result and its trie are kept in the per-machine cache
        (:mod:`.vocabulary_cache`, keyed by the files' bytes and the arguments), so a later
        process loads them in ~0.05 s; ``TRACTABLE_CACHE_DIR=off`` turns it off everywhere.

        EOS: ``eos_token_ids`` (ids or token strings) if given; else the ``eos_token`` of a
        ``tokenizer_config.json`` next to the file together with the ``eos_token_id`` (int or
        list) of a ``generation_config.json`` there; else the first of the usual EOS names.

        Raises:
            VocabularyError: no such file, not a tokenizer file, an unsupported model/decoder,
                bad ``vocab_size``, or an unknown EOS.
        """
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise VocabularyError(f"no tokenizer file at {p}")
        key = None
        if cache:
            from . import vocabulary_cache as vc

            raw = p.read_bytes()
            key = vc.cache_key(raw, p.parent, vocab_size, eos_token_ids)
            hit = cls._from_cache_entry(vc.load_entry(key), str(p))
            if hit is not None:
                return hit
        v = cls._read_tokenizer_file(p, vocab_size, eos_token_ids, raw if cache else None)
        if key is not None:
            vc.store_entry(key, v._cache_entry())
        return v

    @classmethod
    def _read_tokenizer_file(cls, p: Path, vocab_size, eos_token_ids,
                             raw: bytes | None = None) -> TokenVocabulary:
        # The cyclic GC has nothing to collect here but keeps rescanning the 400k fresh
        # containers json.loads makes (Qwen3's merges are lists): pausing it took Qwen3 from
        # 0.86 s to 0.49 s.
        with paused_gc():
            try:
                spec = json.loads(p.read_text(encoding="utf-8") if raw is None
                                  else raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise VocabularyError(f"{p} is not a tokenizer.json file: {e}") from e
            if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
                raise VocabularyError(f"{p} is not a tokenizer.json file (no 'model' object)")
            table = _table_from_spec(spec, p)
            del spec
            if eos_token_ids is None:
                eos_token_ids = _eos_from_configs(p.parent, table)
            return cls._from_table(table, vocab_size, eos_token_ids, str(p))

    @classmethod
    def _from_table(cls, table: _TokenTable, vocab_size, eos_token_ids, name) -> TokenVocabulary:
        size = len(table.tokens)
        if vocab_size is not None:
            if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
                raise VocabularyError(f"vocab_size must be an int, got {vocab_size!r}")
            if vocab_size < size:
                raise VocabularyError(
                    f"vocab_size={vocab_size} is smaller than the tokenizer's {size} ids"
                )
            size = int(vocab_size)
        eos = sorted(set(_resolve_eos(eos_token_ids, table, size)))
        out = table.decode_all()  # bytes (never empty) or None
        out.extend([None] * (size - len(out)))
        for e in eos:
            out[e] = None
        return cls(tuple(out), tuple(eos), name, table.leading_space_rule)

    # ---------------------------------------------------------------- the on-disk cache

    def _cache_entry(self) -> dict[str, np.ndarray]:
        """The arrays :mod:`.vocabulary_cache` stores for this vocabulary (its trie built)."""
        from .vocabulary_cache import pack

        t = self.trie
        return pack(self.token_bytes, self.eos_token_ids, self.leading_space_rule,
                    self.fingerprint, {k: getattr(t, k) for k in _TRIE_FIELDS})

    @classmethod
    def _from_cache_entry(cls, e: dict[str, np.ndarray] | None, name: str
                          ) -> TokenVocabulary | None:
        """The vocabulary of a cache entry (named ``name``: the file it was asked for), or
        None when it is missing or does not check out (its fingerprint recomputed from the
        bytes must match)."""
        from .vocabulary_cache import unpack

        got = unpack(e, _TRIE_FIELDS)
        if got is None:
            return None
        tb, eos, rule, fingerprint, trie = got
        try:
            v = cls(tb, eos, name, rule)
        except VocabularyError:
            return None
        if v.fingerprint != fingerprint:
            return None
        v.__dict__["trie"] = VocabTrie(*trie)  # the cached_property's slot
        return v

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
        tb = self.token_bytes
        for t in token_ids:
            t = int(t)
            if not 0 <= t < len(tb):
                raise TokenError(f"token id out of range 0..{len(tb) - 1}", t)
            b = tb[t]
            if b is None:
                if t in eos:
                    continue
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


# ---------------------------------------------------------------------------- tokenizer tables


@dataclass
class _TokenTable:
    """What a tokenizer says about its ids: the string of each id (as ``id_to_token`` gives it:
    added tokens first, then the model), which ids are special, and the decoder."""

    tokens: list[str | None]
    special: set[int]
    decoder: _Decoder

    @property
    def leading_space_rule(self) -> str:
        return self.decoder.leading_space_rule

    def token_to_id(self, token: str) -> int | None:
        m = self.__dict__.get("_index")
        if m is None:
            m = {}
            for i in range(len(self.tokens) - 1, -1, -1):  # lowest id wins
                t = self.tokens[i]
                if t is not None:
                    m[t] = i
            self.__dict__["_index"] = m
        return m.get(token)

    def decode_all(self) -> list[bytes | None]:
        toks = [None if i in self.special else t for i, t in enumerate(self.tokens)]
        return self.decoder.decode_all(toks)


def _table_from_spec(spec: dict, path: Path) -> _TokenTable:
    """The id table of a parsed ``tokenizer.json``, read without the ``tokenizers`` library
    when possible (it spends 0.5 s building Llama-3's merge table, which decoding never needs)."""
    model = spec["model"]
    added = spec.get("added_tokens") or []
    if spec.get("normalizer") and any(
        a.get("normalized", True) and not a.get("special", False) for a in added
    ):
        # tokenizers stores a normalized added token under its normalized string (Mistral's
        # Prepend("▁") turns an added "xyz" into "▁xyz"): ask the library itself.
        from tokenizers import Tokenizer

        try:
            backend = Tokenizer.from_file(str(path))
        except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception
            raise VocabularyError(f"tokenizers cannot load {path}: {e}") from e
        return _table_from_backend(backend)
    mtype = model.get("type")
    vocab = model.get("vocab")
    pairs: list[tuple[str, int]]
    if isinstance(vocab, dict):
        pairs = list(vocab.items())
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], id = position
        pairs = [(entry[0], i) for i, entry in enumerate(vocab)]
    else:
        raise VocabularyError(f"{path}: model {mtype!r} has no vocabulary")
    size = 0
    for _, i in pairs:
        size = max(size, i + 1)
    for a in added:
        size = max(size, int(a["id"]) + 1)
    tokens: list[str | None] = [None] * size
    for t, i in pairs:
        tokens[i] = t
    special: set[int] = set()
    for a in added:
        i = int(a["id"])
        tokens[i] = a["content"]
        if a.get("special", False):
            special.add(i)
    return _TokenTable(tokens, special, _Decoder.compile(mtype, spec.get("decoder")))


def _table_from_backend(backend) -> _TokenTable:
    """The id table of a loaded ``tokenizers.Tokenizer``."""
    vocab = backend.get_vocab(with_added_tokens=True)
    added = backend.get_added_tokens_decoder()
    size = max(
        backend.get_vocab_size(with_added_tokens=True),
        max(vocab.values(), default=-1) + 1,
        max(added, default=-1) + 1,
    )
    tokens = [backend.id_to_token(i) for i in range(size)]
    special = {int(i) for i, a in added.items() if a.special}
    dec = backend.decoder
    dec_spec = json.loads(dec.__getstate__()) if dec is not None else None
    return _TokenTable(tokens, special, _Decoder.compile(type(backend.model).__name__, dec_spec))


# ---------------------------------------------------------------------------- decoders


@dataclass(frozen=True)
class _Decoder:
    """A tokenizers decoder pipeline reduced to a per-token map ``str -> bytes``.

    ``byte_level``: the GPT-2 byte alphabet (``ByteLevel``).  Otherwise ``steps`` are applied to
    each token string in order: ``("replace", pattern, content)``, ``("strip", start, stop,
    char)`` and ``("bytes",)`` (byte fallback: ``<0xNN>`` is the byte 0xNN).
    """

    byte_level: bool
    steps: tuple[tuple, ...]
    leading_space_rule: str

    @staticmethod
    def compile(model_type: str | None, dec: dict | None) -> _Decoder:
        if model_type == "WordPiece":
            raise VocabularyError(
                "WordPiece vocabularies (BERT) do not decode to exact per-token bytes "
                "(continuation pieces lose their '##' and words get spaces): not supported"
            )
        if model_type not in ("BPE", "Unigram", "WordLevel"):
            raise VocabularyError(f"unsupported tokenizer model {model_type!r}")
        if not dec:
            raise VocabularyError(
                f"the {model_type} tokenizer has no decoder (tokenizers then joins tokens with "
                "spaces), so its tokens have no exact bytes; not supported"
            )
        parts = _flatten_decoder(dec)
        kinds = [d.get("type") for d in parts]
        if "ByteLevel" in kinds:
            if set(kinds) != {"ByteLevel"}:
                raise VocabularyError(f"unsupported decoder sequence {kinds}: ByteLevel mixed "
                                      "with other decoders")
            return _Decoder(True, (), "none")
        steps: list[tuple] = []
        fused = False
        rule = "none"
        seen_bytes = False
        for i, d in enumerate(parts):
            k = d.get("type")
            if k == "Replace":
                pat = d.get("pattern", {})
                src = pat.get("String") if isinstance(pat, dict) else None
                if not isinstance(src, str) or not src:
                    raise VocabularyError(f"decoder {i} ({k}) has a regex pattern {pat!r}; only "
                                          "string replacements are supported")
                if seen_bytes or (fused and len(src) > 1):
                    raise VocabularyError(f"decoder {i} ({k}) after ByteFallback/Fuse acts "
                                          "across tokens; not supported")
                steps.append(("replace", src, d.get("content", "")))
            elif k == "Metaspace":
                if seen_bytes or fused:
                    raise VocabularyError(f"decoder {i} (Metaspace) after ByteFallback/Fuse; "
                                          "not supported")
                steps.append(("replace", d.get("replacement", "\u2581"), " "))
                scheme = d.get("prepend_scheme")
                if scheme is None:
                    scheme = "always" if d.get("add_prefix_space", True) else "never"
                if scheme != "never":
                    rule = "metaspace"
            elif k == "ByteFallback":
                if fused:
                    raise VocabularyError(f"decoder {i} (ByteFallback) after Fuse; not supported")
                seen_bytes = True
                steps.append(("bytes",))
            elif k == "Fuse":
                fused = True
            elif k == "Strip":
                content, start, stop = d.get("content", " "), int(d.get("start", 0)), int(
                    d.get("stop", 0))
                if not fused:
                    if seen_bytes:
                        raise VocabularyError(f"decoder {i} (Strip) after ByteFallback; "
                                              "not supported")
                    steps.append(("strip", start, stop, content))
                elif stop == 0 and start <= 1 and content == " ":
                    if start == 1:
                        rule = "strip"
                else:
                    raise VocabularyError(f"decoder {i} (Strip {d}) acts on the whole text in a "
                                          "way that is not per token; not supported")
            else:
                raise VocabularyError(f"unsupported decoder {k!r} (decoder {i} of {kinds})")
        return _Decoder(False, tuple(steps), rule)

    def decode_token(self, t: str) -> bytes:
        """The bytes of one (non-special) token string."""
        if self.byte_level:
            if _NON_BYTE_LEVEL.search(t):
                return t.encode("utf-8")
            return t.translate(_BL_TRANSLATE).encode("latin-1")
        for step in self.steps:
            op = step[0]
            if op == "replace":
                t = t.replace(step[1], step[2])
            elif op == "bytes":
                if len(t) == 6:
                    m = _BYTE_FALLBACK.fullmatch(t)
                    if m:
                        return bytes([int(m.group(1), 16)])
            else:  # strip: drop up to `start` leading and `stop` trailing `char`s
                _, start, stop, ch = step
                a = 0
                while a < min(start, len(t)) and t[a] == ch:
                    a += 1
                b = len(t)
                while len(t) - b < stop and b > a and t[b - 1] == ch:
                    b -= 1
                t = t[a:b]
        return t.encode("utf-8")

    def decode_all(self, tokens: list[str | None]) -> list[bytes | None]:
        out: list[bytes | None] = [None] * len(tokens)
        if self.byte_level:
            # One translate over the joined strings (0.03 s for Llama-3, where a per-token
            # dict lookup took 0.34 s); tokens with foreign characters go one by one.
            idx = [i for i, t in enumerate(tokens) if t]
            if _NON_BYTE_LEVEL.search("".join(tokens[i] for i in idx)):
                foreign = [i for i in idx if _NON_BYTE_LEVEL.search(tokens[i])]
                for i in foreign:
                    out[i] = tokens[i].encode("utf-8")
                skip = set(foreign)
                idx = [i for i in idx if i not in skip]
            raw = "".join(tokens[i] for i in idx).translate(_BL_TRANSLATE).encode("latin-1")
            pos = 0
            for i in idx:
                n = len(tokens[i])
                out[i] = raw[pos:pos + n]
                pos += n
            return out
        for i, t in enumerate(tokens):
            if t:
                out[i] = self.decode_token(t) or None
        return out


def _flatten_decoder(dec: dict) -> list[dict]:
    if dec.get("type") == "Sequence":
        out: list[dict] = []
        for d in dec.get("decoders", []) or []:
            out.extend(_flatten_decoder(d))
        return out
    return [dec]


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


def _guess_eos(table: _TokenTable) -> list[int]:
    for name in _KNOWN_EOS:
        i = table.token_to_id(name)
        if i is not None:
            return [i]
    raise VocabularyError("cannot tell the EOS token; pass eos_token_ids=[...]")


def _eos_from_configs(folder: Path, table: _TokenTable) -> list[int]:
    """EOS ids named by ``tokenizer_config.json`` / ``generation_config.json`` in ``folder``."""
    found: list[int] = []
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file():
        tok = json.loads(cfg.read_text(encoding="utf-8")).get("eos_token")
        if isinstance(tok, dict):
            tok = tok.get("content")
        if isinstance(tok, str) and table.token_to_id(tok) is not None:
            found.append(table.token_to_id(tok))
    gen = folder / "generation_config.json"
    if gen.is_file():
        e = json.loads(gen.read_text(encoding="utf-8")).get("eos_token_id")
        found.extend([e] if isinstance(e, int) else [int(x) for x in e or ()])
    return found or _guess_eos(table)


def _resolve_eos(eos_token_ids: Iterable[int | str], table: _TokenTable, size: int) -> list[int]:
    if isinstance(eos_token_ids, (int, str)):
        eos_token_ids = [eos_token_ids]
    out = []
    for e in eos_token_ids:
        if isinstance(e, str):
            i = table.token_to_id(e)
            if i is None:
                raise VocabularyError(f"EOS token {e!r} is not in the vocabulary")
            e = i
        e = int(e)
        if not 0 <= e < size:
            raise VocabularyError(f"EOS id {e} is outside the vocabulary of size {size}")
        out.append(e)
    return out


def require_vocabulary(vocab: object) -> TokenVocabulary:
    """``vocab`` itself if it is a :class:`TokenVocabulary`; else :class:`VocabularyError`
    (a ``TractableError``) naming what was passed and how to build one."""
    if not isinstance(vocab, TokenVocabulary):
        raise VocabularyError(
            "vocab must be a TokenVocabulary (TokenVocabulary.from_huggingface(tokenizer) or "
            f".from_tokenizer_file(path)), not {type(vocab).__name__}")
    return vocab
