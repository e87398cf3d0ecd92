"""The on-disk format of a :class:`~.automaton.TokenAutomaton` (``save``/``load``).

A ``.safetensors`` file (no pickle) with six tensors — ``edge_src``/``edge_dst``/``edge_label``
int64 [E], ``labels`` int32 [L, ceil(V/32)] (bit-packed label rows), ``initial``/``final`` uint8
[S] — and a JSON header: format name and version, ``num_states``, ``vocab_size``, the
vocabulary ``fingerprint``, ``eos_token_ids``, ``meta`` and a SHA-256 ``checksum`` over the
header and the tensors (as loaded).

Version 2 (issue 21) stores a tensor of at least 64 KiB zlib-compressed when that is smaller: as
``<name>.zlib`` (uint8 [n]) declared in header field ``zlib`` (JSON {name: shape}).  Label rows
compress ~30-50x (a 128k-id row is 16 KiB of mostly-equal words): a function-call JSON Schema's
file went from 4.2 MB to 0.17 MB, a SchemaStore config schema's from 35 MB to 1.2 MB.  Version 1
files (every tensor raw) are still read.

Version 3 (issue 21) adds an optional *part* beside the automaton: header field ``part`` names
it and its tensors follow :data:`_PART_FORMAT`.  The one part today is ``"unique_items"``, the
checker of a :class:`~.json_schema.unique_items.UniqueItemsAutomaton`: its marked byte NFA
(``marked_src``/``marked_dst`` int64 [Em], ``marked_mask`` uint8 [Em, 32] -- each edge's
256-bit byte set, little-endian -- and ``marked_final`` uint8 [Sb]) and ``byte_states`` int64
[S] (the marked NFA's state of each token state).  A file without a part is still written as
version 2, so older readers read it; a reader that does not know the part refuses the file
(version 3), never drops the checker.  This module holds the constants and the pure helpers
(no automaton import: a leaf, imported by :mod:`.automaton`).
"""

from __future__ import annotations

import json

import numpy as np
import torch

from .errors import AutomatonFormatError

__all__ = ["FORMAT_VERSION", "PLAIN_VERSION", "jsonable_meta"]

#: Version of the on-disk format written by :meth:`TokenAutomaton.save`.  Version 2 may store a
#: tensor zlib-compressed (tensor ``<name>.zlib``, uint8 [n]; header ``zlib``: JSON {name:
#: shape}); version 1 files (every tensor raw) are still read.
FORMAT_VERSION = 3
#: Version written for a file without a part (readable by tractable versions that read 2).
PLAIN_VERSION = 2
_READ_VERSIONS = (1, 2, 3)
_FORMAT_NAME = "tractable-token-automaton"
_HEADER_KEYS = frozenset({"format", "version", "num_states", "vocab_size", "fingerprint",
                          "eos_token_ids", "meta", "checksum", "zlib", "part"})
#: The tensors of a saved automaton: dtype and rank.
_TENSOR_FORMAT = {"edge_src": (torch.int64, 1), "edge_dst": (torch.int64, 1),
                  "edge_label": (torch.int64, 1), "labels": (torch.int32, 2),
                  "initial": (torch.uint8, 1), "final": (torch.uint8, 1)}
#: The tensors of each optional part (version 3): dtype and rank.
_PART_FORMAT = {"unique_items": {"marked_src": (torch.int64, 1), "marked_dst": (torch.int64, 1),
                                 "marked_mask": (torch.uint8, 2), "marked_final": (torch.uint8, 1),
                                 "byte_states": (torch.int64, 1)}}
#: Every tensor name of the format and its dtype and rank.
_ALL_TENSORS = {**_TENSOR_FORMAT, **{k: v for f in _PART_FORMAT.values() for k, v in f.items()}}
# Tensors of at least this many bytes are saved zlib-compressed when that is smaller (label rows
# are 16 KiB each at 128k ids and compress ~50x: a JSON Schema's file shrinks ~30x).
_ZLIB_MIN_BYTES = 64 << 10
_ZLIB_SUFFIX = ".zlib"


def _deflate(tensors: dict) -> tuple[dict, dict]:
    """(tensors to write, {name: shape} of those stored compressed): a tensor of at least
    ``_ZLIB_MIN_BYTES`` is replaced by ``<name>.zlib`` (uint8 [n], zlib level 6) when smaller."""
    import zlib

    stored, shapes = {}, {}
    for k, t in tensors.items():
        raw = t.numpy().tobytes() if t.numel() * t.element_size() >= _ZLIB_MIN_BYTES else None
        if raw is not None:
            blob = zlib.compress(raw, 6)
            if len(blob) < len(raw):
                stored[k + _ZLIB_SUFFIX] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
                shapes[k] = list(t.shape)
                continue
        stored[k] = t
    return stored, shapes


def _inflate(p, tensors: dict, spec: str | None) -> dict:
    """``tensors`` with each ``<name>.zlib`` blob that header field ``spec`` declares replaced
    by tensor ``name`` (dtype from ``_ALL_TENSORS``, the declared shape).  Raises
    AutomatonFormatError for an unreadable ``spec``, an undeclared or missing blob, a declared
    size no zlib stream of that length can hold (zlib expands at most ~1032x: no unbounded
    allocation; a dimension of 2**62 or more is refused too, even in an empty shape), or a blob
    that does not decompress to exactly the declared bytes (never more than the declared size
    plus one byte is inflated)."""
    import zlib

    blobs = sorted(k for k in tensors if k.endswith(_ZLIB_SUFFIX))
    if spec is None:
        if blobs:
            raise AutomatonFormatError(f"{p}: compressed tensors {blobs[:3]} without a 'zlib' "
                                       "header field")
        return tensors
    try:
        shapes = json.loads(spec)
    except (ValueError, RecursionError) as e:
        raise AutomatonFormatError(f"{p}: unreadable header field 'zlib': {e}") from None
    if not isinstance(shapes, dict) or sorted(k + _ZLIB_SUFFIX for k in shapes) != blobs:
        raise AutomatonFormatError(
            f"{p}: header field 'zlib' ({spec[:200]}) does not name the compressed tensors "
            f"{blobs[:6]}")
    out = dict(tensors)
    for k, shape in shapes.items():
        if k not in _ALL_TENSORS or k in tensors:
            raise AutomatonFormatError(f"{p}: compressed tensor {k!r} is not expected here")
        dtype, ndim = _ALL_TENSORS[k]
        if (not isinstance(shape, list) or len(shape) != ndim
                or not all(type(n) is int and 0 <= n < 2**62 for n in shape)):
            raise AutomatonFormatError(f"{p}: compressed tensor {k} has a bad shape "
                                       f"{str(shape)[:100]} (rank {ndim} expected)")
        blob = out.pop(k + _ZLIB_SUFFIX)
        if blob.dtype != torch.uint8 or blob.ndim != 1:
            raise AutomatonFormatError(f"{p}: {k}{_ZLIB_SUFFIX} is not a uint8 vector")
        nbytes = int(np.prod(shape, dtype=object)) * torch.empty(0, dtype=dtype).element_size()
        if nbytes > 1100 * blob.numel() + 1024:
            raise AutomatonFormatError(
                f"{p}: compressed tensor {k} declares {nbytes} bytes, more than "
                f"{blob.numel()} compressed bytes can hold")
        try:
            d = zlib.decompressobj()
            # at most nbytes + 1 bytes out (max_length 0 would mean "no limit": a zip bomb
            # declared as an empty tensor); one byte more than declared is a refusal
            raw = d.decompress(blob.numpy().tobytes(), nbytes + 1)
            ok = len(raw) == nbytes and d.eof and not d.unused_data and not d.unconsumed_tail
        except zlib.error as e:
            raise AutomatonFormatError(f"{p}: compressed tensor {k} is corrupt: {e}") from None
        if not ok:
            raise AutomatonFormatError(
                f"{p}: compressed tensor {k} does not hold exactly {nbytes} bytes")
        out[k] = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape) if nbytes else (
            torch.zeros(shape, dtype=dtype))
    return out


def _checksum(tensors: dict, header: dict) -> str:
    """SHA-256 over the header fields (sorted) and each tensor's name, dtype, shape and bytes."""
    import hashlib

    h = hashlib.sha256()
    h.update(json.dumps(header, sort_keys=True).encode())
    for k in sorted(tensors):
        t = tensors[k].contiguous()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def jsonable_meta(meta: dict) -> dict:
    """``meta`` with every value JSON cannot write replaced by its ``repr`` (saved headers)."""
    out = {}
    for k, v in meta.items():
        try:
            json.dumps(v)
            out[k] = v
        except TypeError:
            out[k] = repr(v)
    return out
