"""Fuzzing ``TokenAutomaton.load`` with mutated files (issue 23): every tampered, truncated or
inconsistent file is refused with a typed error (a ``TractableError``) at load, in bounded time,
or loads as an automaton that is identical to the original (a mutation the format ignores) or
satisfies every invariant the methods rely on, and then works at first use.

Mutations (``MUTATORS``): raw bytes of a saved file (truncation, byte flips in the header and in
the tensors, inserted/deleted bytes, the header-length prefix) and semantic edits written back
with safetensors (dtypes, shapes, out-of-range and negative indices such as
``edge_label[0] = -5``, label bits of EOS/special ids or past V, initial/final flags, every
header field, extra/missing tensors), each with the checksum recomputed, dropped or left stale.

Outcomes (:func:`trial`): ``refused`` (typed error at load), ``identical``, ``valid`` (a
different automaton that passes :func:`invariant_violation` and a first-use walk), and the
failures ``untyped`` (any other exception, at load or first use), ``hang`` (slower than
``HANG_S``), ``accepted_tampered`` (a stale checksum, yet a different automaton loaded) and
``accepted_invalid`` (loaded, but an invariant is violated).  CI runs a few dozen examples per
class; ``TRACTABLE_LOAD_FUZZ_EXAMPLES=N`` raises that, and ``bench/load_fuzz.py`` runs
thousands (``bench/results/load_fuzz.md``).

Two base files: a 40-id vocabulary (every tensor raw) and GPT-2's real vocabulary (V = 50,257,
W = 1,571), whose ``labels`` (25 rows, 157 KB) format version 2 stores zlib-compressed as
``labels.zlib`` declared in header field ``zlib``.  On the second base the semantic mutators edit
the decompressed tensors and write them back compressed again (or raw), and ``ZLIB_MUTATORS``
attack the compressed payload itself: byte flips inside the blob, truncated or extended blobs,
wrong declared shapes/sizes, undeclared, misnamed, mistyped or duplicated compressed tensors.
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tractable.fsa.automaton import TokenAutomaton
from tractable.fsa.errors import TractableError
from tractable.fsa.vocabulary import TokenVocabulary

HANG_S = 5.0
FAILURES = ("untyped", "hang", "accepted_tampered", "accepted_invalid")
EXAMPLES = int(os.environ.get("TRACTABLE_LOAD_FUZZ_EXAMPLES", "25"))
TENSORS = ("edge_src", "edge_dst", "edge_label", "labels", "initial", "final")


def tiny_vocab() -> TokenVocabulary:
    """40 ids (W = 2 words, 24 tail bits): 26 letters, 11 bigrams, EOS (37), two specials."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    toks: list = letters + ["ab", "bc", "ca", "cd", "de", "ea", "ba", "aa", "dd", "abc", "cab"]
    toks += [None, None, None]
    return TokenVocabulary.from_token_bytes(toks, eos_token_ids=[37], name="fuzz")


def tiny_automaton(vocab: TokenVocabulary) -> TokenAutomaton:
    from tractable.fsa.regex import compile_regex

    return compile_regex(r"(ab|c)+d?[a-e]{0,3}(x|yz)?", vocab)


#: Over GPT-2's vocabulary: 42 states, 25 label rows of 1,571 words (157 KB, >= 64 KiB), so
#: ``save`` stores ``labels`` zlib-compressed (asserted by ``test_gpt2_base_is_compressed``).
GPT2_PATTERN = r"[a-z]{1,6}(\.[a-z]{1,5}){0,3}@[a-z]{2,8}\.(com|org|net)"


def gpt2_automaton(vocab: TokenVocabulary) -> TokenAutomaton:
    from tractable.fsa.regex import compile_regex

    return compile_regex(GPT2_PATTERN, vocab)


# ---------------------------------------------------------------- reading and writing files


def read_parts(data: bytes) -> tuple[dict, dict]:
    """(tensors by name, metadata) of a valid safetensors file."""
    from safetensors.torch import load

    n = struct.unpack("<Q", data[:8])[0]
    meta = json.loads(data[8:8 + n]).get("__metadata__", {})
    return dict(load(data)), dict(meta)


ZSUF = ".zlib"
#: dtype of each tensor of the format (to decode a compressed one), as the format documents it
_DTYPE_OF = {"edge_src": torch.int64, "edge_dst": torch.int64, "edge_label": torch.int64,
             "labels": torch.int32, "initial": torch.uint8, "final": torch.uint8}


def inflate_parts(stored: dict, meta: dict) -> dict:
    """The tensors as ``load`` should see them: each ``<name>.zlib`` blob that ``meta["zlib"]``
    declares decompressed (plain ``zlib``, independent of the loader's code).  Raises (any type)
    on what cannot be decoded."""
    import zlib

    out = dict(stored)
    for k, shape in json.loads(meta.get("zlib", "{}")).items():
        raw = zlib.decompress(out.pop(k + ZSUF).numpy().tobytes())
        out[k] = torch.frombuffer(bytearray(raw), dtype=_DTYPE_OF[k]).reshape(shape).clone()
    return out


def deflate_parts(tensors: dict, meta: dict) -> dict:
    """What ``save`` would store for ``tensors`` (the format's ``_deflate``); sets or drops
    ``meta["zlib"]`` (mutated) accordingly."""
    from tractable.fsa.automaton_file import _deflate

    stored, shapes = _deflate(tensors)
    if shapes:
        meta["zlib"] = json.dumps(shapes)
    else:
        meta.pop("zlib", None)
    return stored


def write_parts(tensors: dict, meta: dict, checksum: str) -> bytes:
    """Serialize the stored ``tensors`` with the checksum ``"recompute"``d (over the tensors as
    decoded by :func:`inflate_parts`, as ``save`` does), ``"drop"``ped or left ``"stale"``."""
    from safetensors.torch import save
    from tractable.fsa.automaton import _checksum

    meta = {k: v for k, v in meta.items()}
    if checksum == "drop":
        meta.pop("checksum", None)
    elif checksum == "recompute":
        body = {k: v for k, v in meta.items() if k != "checksum"}
        try:
            meta["checksum"] = _checksum(inflate_parts(tensors, body), body)
        except Exception:  # noqa: BLE001 - nothing _checksum can hash: leave it stale
            pass
    return save({k: v.contiguous() for k, v in tensors.items()}, metadata=meta)


# ---------------------------------------------------------------- mutators (rng: random.Random)


def _flip(data: bytes, lo: int, hi: int, rng) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if hi > lo:
            i = rng.randrange(lo, hi)
            b[i] ^= 1 << rng.randrange(8) if rng.random() < 0.7 else rng.randrange(1, 256)
    return bytes(b)


def m_truncate(data: bytes, rng) -> bytes:
    return data[: rng.randrange(0, len(data))]


def m_flip_header(data: bytes, rng) -> bytes:
    n = struct.unpack("<Q", data[:8])[0]
    return _flip(data, 8, 8 + n, rng)


def m_flip_tensors(data: bytes, rng) -> bytes:
    n = struct.unpack("<Q", data[:8])[0]
    return _flip(data, 8 + n, len(data), rng)


def m_splice(data: bytes, rng) -> bytes:
    i = rng.randrange(0, len(data))
    if rng.random() < 0.5:
        return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + data[i:]
    return data[:i] + data[i + rng.randint(1, 8):]


def m_header_len(data: bytes, rng) -> bytes:
    n = struct.unpack("<Q", data[:8])[0]
    new = rng.choice([0, 1, n - 1, n + 1, n + 8, len(data), 2**40, 2**64 - 1, rng.randrange(n)])
    return struct.pack("<Q", new % 2**64) + data[8:]


_DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8, torch.float32, torch.bool,
           torch.float64)


def _semantic(edit):
    """A mutator that edits the decoded tensors and header of a file and writes them back: a
    compressed base compressed again by the format's rule (4 in 5) or all raw."""
    def mutate(data: bytes, rng) -> bytes:
        stored, meta = read_parts(data)
        compressed = "zlib" in meta
        tensors = inflate_parts(stored, meta)
        meta.pop("zlib", None)
        edit(tensors, meta, rng)
        if compressed and rng.random() < 0.8:
            tensors = deflate_parts(tensors, meta)
        return write_parts(tensors, meta, rng.choice(["recompute", "drop", "stale"]))

    mutate.__name__ = edit.__name__
    return mutate


@_semantic
def s_dtype(t, meta, rng):
    k = rng.choice(TENSORS)
    t[k] = t[k].to(rng.choice([d for d in _DTYPES if d != t[k].dtype]))


@_semantic
def s_shape(t, meta, rng):
    k = rng.choice(TENSORS)
    x = t[k]
    how = rng.randrange(5)
    if how == 0 and x.numel():
        t[k] = x.reshape(-1)[:-1].clone() if x.dim() == 1 else x[:-1].clone()
    elif how == 1:
        t[k] = torch.cat([x, x[:1]]) if x.numel() else torch.zeros((1,) + tuple(x.shape[1:]),
                                                                   dtype=x.dtype)
    elif how == 2:
        t[k] = x.reshape(1, *x.shape).clone()
    elif how == 3 and x.numel():
        t[k] = x.reshape(-1)[0].clone()  # 0-d
    else:
        t[k] = x[:, :-1].clone() if x.dim() == 2 and x.shape[1] else x.reshape(-1).clone()


@_semantic
def s_index(t, meta, rng):
    k = rng.choice(("edge_src", "edge_dst", "edge_label"))
    x = t[k].clone()
    if not x.numel():
        return
    S, L = t["initial"].shape[0], t["labels"].shape[0]
    hi = L if k == "edge_label" else S
    x[rng.randrange(x.numel())] = rng.choice([-5, -1, hi, hi + 3, 2**40, -(2**62),
                                              rng.randrange(hi)])
    t[k] = x


@_semantic
def s_labels(t, meta, rng):
    x = t["labels"].clone().numpy().view(np.uint32)
    if not x.size:
        return
    r = rng.randrange(x.shape[0])
    if rng.random() < 0.25:
        x[r] = 0
    else:
        v = rng.choice([37, 38, 39, 40, 41, 63, rng.randrange(x.shape[1] * 32)])
        x[r, v >> 5] ^= np.uint32(1 << (v & 31))
    t["labels"] = torch.from_numpy(x.view(np.int32).copy())


@_semantic
def s_flags(t, meta, rng):
    k = rng.choice(("initial", "final"))
    x = t[k].clone()
    i = rng.randrange(x.numel())
    x[i] = rng.choice([0, 1, 2, 255]) if rng.random() < 0.5 else 1 - min(int(x[i]), 1)
    t[k] = x


def _deep(n: int) -> str:
    return "[" * n + "]" * n


@_semantic
def s_header(t, meta, rng):
    k = rng.choice(["num_states", "vocab_size", "eos_token_ids", "version", "format", "meta",
                    "fingerprint", "remove", "extra"])
    S = t["initial"].shape[0]
    vals = {
        "num_states": [str(S - 1), str(S + 1), "one", "-1", "1e3", "", "0", str(2**70), "9" * 5000],
        "vocab_size": ["39", "41", "64", "0", "-40", "x", str(2**62)],
        "eos_token_ids": ["[true]", "[-1]", "[40]", "x", "[[37]]", "[37.0]", "[]", "[36]",
                          "[37, 37]", _deep(100_000), "{}", '"37"'],
        "version": ["one", "2", "0", "-1", "1.0", ""],
        "format": ["other", ""],
        "meta": ["{", "[]", "null", _deep(100_000), '{"a": ' * 3000 + "1" + "}" * 3000,
                 '{"pattern": 5}', '"x"'],
        "fingerprint": ["0" * 64, "", meta.get("fingerprint", "")[:-1] + "0"],
    }
    if k == "remove":
        meta.pop(rng.choice(sorted(meta)), None)
    elif k == "extra":
        meta[rng.choice(["x", "checksum2", "meta2"])] = "1"
    else:
        meta[k] = rng.choice(vals[k])


@_semantic
def s_tensors(t, meta, rng):
    how = rng.randrange(3)
    if how == 0:
        t.pop(rng.choice(TENSORS))
    elif how == 1:
        t[rng.choice(["extra", "labels2"])] = torch.zeros(rng.choice([(), (3,), (2, 2)]),
                                                          dtype=rng.choice(_DTYPES))
    else:  # swap two tensors of the same dtype
        a, b = rng.choice([("edge_src", "edge_dst"), ("edge_src", "edge_label"),
                           ("initial", "final")])
        t[a], t[b] = t[b], t[a]


MUTATORS = {f.__name__: f for f in (m_truncate, m_flip_header, m_flip_tensors, m_splice,
                                    m_header_len, s_dtype, s_shape, s_index, s_labels, s_flags,
                                    s_header, s_tensors)}


# ---------------------------------------------------------------- mutators of compressed payload
# (for a base file with a compressed tensor: ``"zlib"`` in its header)


def _blob_span(data: bytes) -> tuple[str, int, int]:
    """(name, first byte, end) of the first ``*.zlib`` tensor's bytes in the file."""
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    k = sorted(k for k in head if k.endswith(ZSUF))[0]
    a, b = head[k]["data_offsets"]
    return k, 8 + n + a, 8 + n + b


def z_flip(data: bytes, rng) -> bytes:
    """1-3 flipped bytes inside the compressed blob (its zlib header, deflate data or Adler-32
    trailer); the checksum (over the decompressed bytes) left as it was."""
    _, lo, hi = _blob_span(data)
    where = rng.choice([(lo, hi), (lo, lo + 2), (hi - 4, hi), (lo + 2, hi - 4)])
    return _flip(data, *where, rng)


def _zlib_edit(edit):
    def mutate(data: bytes, rng) -> bytes:
        stored, meta = read_parts(data)
        edit(stored, meta, rng)
        return write_parts(stored, meta, rng.choice(["recompute", "drop", "stale"]))

    mutate.__name__ = edit.__name__
    return mutate


@_zlib_edit
def z_truncate(t, meta, rng):
    """The blob cut short, emptied, or followed by extra bytes / a second zlib stream."""
    import zlib

    k = sorted(x for x in t if x.endswith(ZSUF))[0]
    b = t[k].numpy().tobytes()
    how = rng.randrange(4)
    if how == 0:
        b = b[:rng.randrange(len(b))]
    elif how == 1:
        b = b[:rng.choice([0, 1, 2, 6, len(b) - 1, len(b) - 4, len(b) - 5])]
    elif how == 2:
        b = b + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    else:
        b = b + zlib.compress(b"\0" * rng.choice([0, 4, 6284]))
    t[k] = torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else torch.zeros(
        0, dtype=torch.uint8)


@_zlib_edit
def z_size(t, meta, rng):
    """A wrong declared shape (size) in header field ``zlib``: off by one row or word, the same
    bytes in another shape or rank, empty, huge, negative, non-integer, or not JSON at all;
    one time in four with the blob replaced by a stream of no bytes (an empty shape matches)."""
    import zlib

    shapes = json.loads(meta["zlib"])
    k = rng.choice(sorted(shapes))
    if rng.random() < 0.25:
        t[k + ZSUF] = torch.frombuffer(bytearray(zlib.compress(b"")), dtype=torch.uint8)
    s = list(shapes[k])
    r, w = (s + [1])[:2]
    shapes[k] = rng.choice([
        [r + 1, w], [r - 1, w], [r, w + 1], [r, w - 1], [w, r], [r * w], [r, w, 1], [2 * r, w // 2],
        [0, w], [0, 2**63], [0, 2**62 - 1], [2**40, w], [r, 2**70], [-1, w], [r, -w],
        [float(r), w], [True, w], [str(r), w], [], None, "x", [[r], w], [2**31 * 4, 0],
    ])
    meta["zlib"] = rng.choice([json.dumps(shapes), json.dumps(shapes),
                               json.dumps(list(shapes.items())), "{", "null", _deep(100_000),
                               json.dumps({k: s, k + "2": s}), json.dumps({}), ""])


@_zlib_edit
def z_undeclared(t, meta, rng):
    """Compressed tensors the header does not declare (or declares wrongly): no ``zlib`` field,
    a blob renamed, a raw twin beside it, an extra compressed tensor, a version 1 file, a blob
    of another dtype or rank, a declaration without a blob, raw bytes as the blob, a gzip or raw
    deflate stream, or an equivalent re-compression (level 1: must load identical)."""
    import zlib

    k = sorted(x for x in t if x.endswith(ZSUF))[0]
    name = k[:-len(ZSUF)]
    shapes = json.loads(meta["zlib"])
    blob = t[k]
    how = rng.randrange(11)
    if how == 0:
        meta.pop("zlib")
    elif how == 1:
        other = rng.choice(["edge_src", "final", "labels2", "x", ""])
        t[other + ZSUF] = t.pop(k)
        if rng.random() < 0.5:
            shapes[other] = shapes.pop(name)
            meta["zlib"] = json.dumps(shapes)
    elif how == 2:  # a raw twin beside the blob
        t[name] = inflate_parts({k: blob}, {"zlib": json.dumps({name: shapes[name]})})[name]
    elif how == 3:  # a second compressed tensor, declared or not, its raw one kept or not
        extra = rng.choice(["final", "edge_src", "initial"])
        t[extra + ZSUF] = torch.frombuffer(bytearray(zlib.compress(t[extra].numpy().tobytes())),
                                           dtype=torch.uint8)
        if rng.random() < 0.5:
            shapes[extra] = list(t[extra].shape)
            meta["zlib"] = json.dumps(shapes)
        if rng.random() < 0.5:
            t.pop(extra)
    elif how == 4:
        meta["version"] = "1"
    elif how == 5:
        t[k] = rng.choice([blob.to(torch.int8), blob.to(torch.int32), blob.reshape(1, -1),
                           blob[:len(blob) // 4 * 4].view(torch.int32), blob[0].clone()])
    elif how == 6:  # declared, but no blob (the raw tensor or nothing instead)
        raw = inflate_parts({k: t.pop(k)}, {"zlib": json.dumps({name: shapes[name]})})[name]
        if rng.random() < 0.5:
            t[name] = raw
    elif how == 7:  # the raw bytes as the "compressed" blob
        raw = inflate_parts({k: blob}, {"zlib": json.dumps({name: shapes[name]})})[name]
        t[k] = raw.reshape(-1).view(torch.uint8).clone()
    elif how in (8, 9):  # another container (gzip, raw deflate) or level: same bytes
        raw = zlib.decompress(blob.numpy().tobytes())
        c = (zlib.compressobj(6, zlib.DEFLATED, rng.choice([31, -15])) if how == 8
             else zlib.compressobj(1))
        t[k] = torch.frombuffer(bytearray(c.compress(raw) + c.flush()), dtype=torch.uint8)
    else:  # a zip bomb declared as an empty tensor: 64 MB of zeros in ~64 KB
        t[k] = torch.frombuffer(bytearray(zlib.compress(b"\0" * (64 << 20), 9)),
                                dtype=torch.uint8)
        shapes[name] = rng.choice([[0, shapes[name][-1]], [0, 0], [1, 0]])
        meta["zlib"] = json.dumps(shapes)


ZLIB_MUTATORS = {f.__name__: f for f in (z_flip, z_truncate, z_size, z_undeclared)}
ALL_MUTATORS = {**MUTATORS, **ZLIB_MUTATORS}


# ---------------------------------------------------------------- the oracle


def invariant_violation(A: TokenAutomaton, vocab: TokenVocabulary) -> str | None:
    """What the loaded automaton violates (None: nothing), by plain loops — independent of the
    checks in ``load``."""
    S, V = A.num_states, A.vocab_size
    if V != vocab.size or list(A.eos_token_ids) != list(vocab.eos_token_ids):
        return "vocabulary"
    src, dst, lab = (x.tolist() for x in (A.edge_src, A.edge_dst, A.edge_label))
    if A.labels.dtype != torch.int32 or A.labels.dim() != 2 or A.labels.shape[1] != (V + 31) // 32:
        return "labels layout"
    L = A.labels.shape[0]
    if any(not 0 <= s < S for s in src + dst) or any(not 0 <= x < L for x in lab):
        return "index range"
    if A.initial.tolist() != [True] + [False] * (S - 1):
        return "initial"
    text = {v for v in range(V) if vocab.token_bytes[v] is not None} - set(vocab.eos_token_ids)
    words = A.labels.numpy()
    for x in set(lab):
        toks = set(np.flatnonzero(np.unpackbits(words[x].view(np.uint8), bitorder="little"))
                   .tolist())
        if not toks or not toks <= text:
            return f"label row {x}"
    fwd, seen = [0], {0}
    while fwd:
        s = fwd.pop()
        for a, b in zip(src, dst):
            if a == s and b not in seen:
                seen.add(b)
                fwd.append(b)
    fin = {s for s in range(S) if A.final[s]}
    co, todo = set(fin), list(fin)
    while todo:
        s = todo.pop()
        for a, b in zip(src, dst):
            if b == s and a not in co:
                co.add(a)
                todo.append(a)
    if len(seen) != S or len(co) != S:
        return "not trimmed"
    return None


def _first_use(A: TokenAutomaton, rng) -> None:
    """A GCD walk at the minimum budget (and the other entry points): must not raise."""
    n = A.min_tokens_to_accept() + rng.randrange(3)
    st_, seq = A.start(2), []
    for r in range(n, 0, -1):
        m = A.allowed(st_, r)
        choices = np.flatnonzero(m[0].numpy()).tolist()
        assert choices, "GCD dead end"
        t = rng.choice(choices)
        seq.append(t)
        if t in A.eos_token_ids:
            break
        st_ = A.advance(st_, torch.tensor([t, t]))
    assert A.accepts(seq), seq
    A.allowed_packed(A.start(1), None, "lcd")
    A.stats()


def _same(A: TokenAutomaton, B: TokenAutomaton) -> bool:
    return (A.num_states == B.num_states and A.vocab_size == B.vocab_size
            and A.eos_token_ids == B.eos_token_ids and A.fingerprint == B.fingerprint
            and all(torch.equal(getattr(A, k), getattr(B, k)) for k in TENSORS)
            and A.meta == B.meta)


def trial(data: bytes, path: Path, vocab, original: TokenAutomaton, rng,
          stale_checksum: bool) -> tuple[str, str]:
    """(outcome, detail) of loading ``data`` written to ``path`` (module docstring)."""
    path.write_bytes(data)
    t0 = time.perf_counter()
    try:
        A = TokenAutomaton.load(path, vocab)
    except TractableError as e:
        kind = "hang" if time.perf_counter() - t0 > HANG_S else "refused"
        return kind, type(e).__name__
    except Exception as e:  # noqa: BLE001 - the failure this fuzzer looks for
        return "untyped", f"load: {type(e).__name__}: {str(e)[:200]}"
    if time.perf_counter() - t0 > HANG_S:
        return "hang", f"load took {time.perf_counter() - t0:.1f} s"
    if _same(A, original):
        kind = "identical"
    elif stale_checksum:
        return "accepted_tampered", "a checksummed file changed and loaded"
    else:
        bad = invariant_violation(A, vocab)
        if bad is not None:
            return "accepted_invalid", bad
        kind = "valid"
    t1 = time.perf_counter()
    try:
        _first_use(A, rng)
    except Exception as e:  # noqa: BLE001
        return "untyped", f"first use: {type(e).__name__}: {str(e)[:200]}"
    if time.perf_counter() - t1 > HANG_S:
        return "hang", "first use"
    return kind, ""


def run_one(name: str, base: bytes, path: Path, vocab, original, rng) -> tuple[str, str]:
    """Mutate ``base`` with mutator ``name`` and :func:`trial` the result."""
    data = ALL_MUTATORS[name](base, rng)
    # a checksum still equal to the original's must catch every change
    try:
        meta = read_parts(data)[1]
    except Exception:  # noqa: BLE001 - unreadable: load must refuse it anyway
        meta = {}
    stale = meta.get("checksum") == read_parts(base)[1]["checksum"]
    return trial(data, path, vocab, original, rng, stale_checksum=stale)


# ---------------------------------------------------------------- tests


def _case(vocab, A, tmp_path_factory):
    p = tmp_path_factory.mktemp("fuzz") / "base.safetensors"
    A.save(p)
    return vocab, TokenAutomaton.load(p, vocab), p.read_bytes()


@pytest.fixture(scope="module")
def fuzz_case(tmp_path_factory):
    vocab = tiny_vocab()
    return _case(vocab, tiny_automaton(vocab), tmp_path_factory)


@pytest.fixture(scope="module")
def gpt2_case(gpt2_vocab, tmp_path_factory):
    return _case(gpt2_vocab, gpt2_automaton(gpt2_vocab), tmp_path_factory)


def test_oracle_catches_what_it_should(fuzz_case):
    """The oracle is not vacuous: hand-made invalid automata are flagged, the original not."""
    vocab, A, _ = fuzz_case
    assert invariant_violation(A, vocab) is None
    fields = {k: getattr(A, k) for k in ("num_states", "vocab_size", "edge_src", "edge_dst",
                                        "edge_label", "labels", "initial", "final",
                                        "fingerprint", "eos_token_ids")}
    lab = A.labels.clone()
    lab[0, 1] |= 1 << (37 - 32)  # EOS id as a text label
    assert invariant_violation(TokenAutomaton(**{**fields, "labels": lab}), vocab)
    ini = A.initial.clone()
    ini[1] = True
    assert invariant_violation(TokenAutomaton(**{**fields, "initial": ini}), vocab)
    fin = torch.zeros_like(A.final)
    assert invariant_violation(TokenAutomaton(**{**fields, "final": fin}), vocab)


def test_known_tampering_is_refused(fuzz_case, tmp_path):
    """The issue's cases: edge_label[0] = -5 (with and without a checksum), a float32 edge_src,
    an out-of-range edge_dst, version "one", bad header JSON, an EOS bit in a label row, a
    second initial state, an unreachable state."""
    from tractable.fsa.errors import AutomatonFormatError

    vocab, A, base = fuzz_case
    t, meta = read_parts(base)
    S = A.num_states

    def refused(edit, checksum="recompute"):
        tt = {k: v.clone() for k, v in t.items()}
        mm = dict(meta)
        edit(tt, mm)
        p = tmp_path / "x.safetensors"
        p.write_bytes(write_parts(tt, mm, checksum))
        with pytest.raises(AutomatonFormatError):
            TokenAutomaton.load(p, vocab)

    def neg_label(tt, mm):
        tt["edge_label"][0] = -5

    for checksum in ("recompute", "drop", "stale"):
        refused(neg_label, checksum)
    refused(lambda tt, mm: tt.update(edge_src=tt["edge_src"].float()))
    refused(lambda tt, mm: tt["edge_dst"].__setitem__(0, S + 2))
    refused(lambda tt, mm: mm.update(version="one"))
    refused(lambda tt, mm: mm.update(meta="{"))
    refused(lambda tt, mm: mm.update(meta=_deep(100_000)))
    refused(lambda tt, mm: tt["labels"].__setitem__((0, 1), tt["labels"][0, 1] | (1 << 5)))
    refused(lambda tt, mm: tt["initial"].__setitem__(S - 1, 1))
    refused(lambda tt, mm: tt.update(edge_src=tt["edge_src"][0].clone()))  # 0-d tensor

    def unreachable(tt, mm):  # drop the edges into the last state
        keep = tt["edge_dst"] != S - 1
        for k in ("edge_src", "edge_dst", "edge_label"):
            tt[k] = tt[k][keep].clone()

    refused(unreachable)

    def renamed_checksum(tt, mm):  # a flipped byte in the key: no longer a checksum to check
        mm["checksuM"] = mm.pop("checksum")
        tt["edge_label"][0] = (tt["edge_label"][0] + 1) % tt["labels"].shape[0]

    refused(renamed_checksum, "stale")


_HSET = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow,
                                        HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("name", sorted(MUTATORS))
def test_mutated_files_fail_typed_or_load_valid(name, fuzz_case, tmp_path):
    vocab, A, base = fuzz_case

    @_HSET
    @given(st.randoms(use_true_random=False))
    def check(rng):
        kind, detail = run_one(name, base, tmp_path / "m.safetensors", vocab, A, rng)
        assert kind not in FAILURES, (name, kind, detail)

    check()


# ---------------------------------------------------------------- the compressed (GPT-2) base


def test_gpt2_base_is_compressed(gpt2_case):
    """The second base really exercises format version 2: ``labels`` (>= 64 KiB) is stored as a
    zlib blob declared in the header, smaller than the raw tensor, and decodes (independently
    of the loader) to the loaded automaton's labels."""
    vocab, A, base = gpt2_case
    stored, meta = read_parts(base)
    assert A.labels.numel() * 4 >= 64 << 10
    assert json.loads(meta["zlib"]) == {"labels": list(A.labels.shape)}
    assert "labels" not in stored and stored["labels.zlib"].numel() < A.labels.numel() * 4
    assert torch.equal(inflate_parts(stored, meta)["labels"], A.labels)
    assert invariant_violation(A, vocab) is None


def test_known_zlib_tampering_is_refused(gpt2_case, tmp_path):
    """Hand-made compressed-payload cases, each refused with AutomatonFormatError: a flipped
    byte mid-blob, a truncated blob, a declared shape one row short, a zip bomb declared empty,
    an undeclared blob, and a tampered label row re-compressed under the old checksum."""
    import zlib

    from tractable.fsa.errors import AutomatonFormatError

    vocab, A, base = gpt2_case
    t, meta = read_parts(base)
    L, W = A.labels.shape

    def refused(data):
        p = tmp_path / "z.safetensors"
        p.write_bytes(data)
        with pytest.raises(AutomatonFormatError):
            TokenAutomaton.load(p, vocab)

    def edited(edit, checksum="recompute"):
        tt, mm = dict(t), dict(meta)
        edit(tt, mm)
        return write_parts(tt, mm, checksum)

    _, lo, hi = _blob_span(base)
    b = bytearray(base)
    b[(lo + hi) // 2] ^= 0x10
    refused(bytes(b))
    refused(edited(lambda tt, mm: tt.update({"labels.zlib": tt["labels.zlib"][:-7].clone()})))
    refused(edited(lambda tt, mm: mm.update(zlib=json.dumps({"labels": [L - 1, W]}))))
    # a zip bomb declared as an empty tensor: refused without inflating its 64 MB
    import tracemalloc

    bomb = torch.frombuffer(bytearray(zlib.compress(b"\0" * (64 << 20), 9)), dtype=torch.uint8)
    bomb_file = edited(lambda tt, mm: (tt.update({"labels.zlib": bomb}),
                                       mm.update(zlib=json.dumps({"labels": [0, W]}))))
    tracemalloc.start()
    try:
        refused(bomb_file)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"loading a 64 KB zip bomb allocated {peak} bytes"
    empty = torch.frombuffer(bytearray(zlib.compress(b"")), dtype=torch.uint8)
    for shape in ([0, 2**63], [2**64, 0], [0, W]):  # no bytes, as declared: shapes are refused
        refused(edited(lambda tt, mm, shape=shape: (tt.update({"labels.zlib": empty}),
                                                    mm.update(zlib=json.dumps({"labels": shape})))))
    refused(edited(lambda tt, mm: mm.pop("zlib"), "drop"))

    def tamper(tt, mm):
        lab = inflate_parts(tt, mm)["labels"].clone()
        lab[0, 0] ^= 1 << 3
        tt["labels.zlib"] = deflate_parts({"labels": lab}, {})["labels.zlib"]

    refused(edited(tamper, "stale"))
    # an equivalent re-encoding (zlib level 1) is no tampering: it loads identical
    p = tmp_path / "ok.safetensors"
    lvl1 = zlib.compress(inflate_parts(t, meta)["labels"].numpy().tobytes(), 1)
    p.write_bytes(edited(lambda tt, mm: tt.update(
        {"labels.zlib": torch.frombuffer(bytearray(lvl1), dtype=torch.uint8)}), "stale"))
    assert _same(TokenAutomaton.load(p, vocab), A)


@pytest.mark.parametrize("name", sorted(ALL_MUTATORS))
def test_mutated_compressed_files_fail_typed_or_load_valid(name, gpt2_case, tmp_path):
    """Every mutator (``MUTATORS`` and ``ZLIB_MUTATORS``) over the compressed GPT-2 base."""
    vocab, A, base = gpt2_case

    @_HSET
    @given(st.randoms(use_true_random=False))
    def check(rng):
        kind, detail = run_one(name, base, tmp_path / "m.safetensors", vocab, A, rng)
        assert kind not in FAILURES, (name, kind, detail)

    check()
