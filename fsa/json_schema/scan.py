"""An incremental JSON scanner over emitted bytes, JSON value keys, and per-vocabulary token
tables: the pieces of the ``uniqueItems`` checker (:mod:`.unique_items`) that know JSON syntax.

The scanner reads bytes that are a prefix of a JSON text (the token automaton guarantees
that) and keeps only what the checker needs: the container stack and whether it is inside a
string.  Its state is a tuple ``(stack, mode)``:

* ``stack``: ``bytes``, one byte per open container, ``b"["`` or ``b"{"`` (outermost first);
* ``mode``: :data:`OUT` (between tokens of JSON, inside numbers and literals too), :data:`STR`
  (inside a string), :data:`ESC` (after a backslash in a string), :data:`U4` .. :data:`U1`
  (that many hex digits of a ``\\uXXXX`` escape still to come).

:func:`scan` reports the *array events* of a chunk of bytes: an array opened (``[``), an item
separator of an array (``,`` whose innermost container is an array) and an array closed
(``]``), each with its byte offset and the depth (stack length) of the array concerned.

Value equality is JSON Schema's (``jsonschema``'s ``uniqueItems``): :func:`value_key` parses a
complete JSON text with numbers as :class:`~decimal.Decimal` and maps it to a hashable key in
which ``1`` and ``1.0`` and ``1e0`` are equal, ``true`` and ``1`` are not, objects compare
key-order-independently (duplicate keys: the last wins, as in ``json.loads``), and strings
compare after decoding their escapes.

:func:`token_tables` gives, per start mode, the tokens worth checking (bit-packed int32 [W]
rows, the layout of :func:`tractable.fsa.masks.allowed_packed`): tokens that, read from that
mode, contain a byte at which an item may be completed or committed (a structural ``,``,
``]`` or ``}``, a string-closing ``"``, or a letter of ``true``/``false``/``null`` outside a
string), and tokens that contain a structural ``[`` (may open an array).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import numpy as np

from ..errors import InvalidArgumentTypeError

__all__ = [
    "OUT", "STR", "ESC", "U4", "U3", "U2", "U1", "NUM_MODES",
    "EV_OPEN", "EV_SEP", "EV_CLOSE",
    "START", "scan", "value_key", "committed_key", "token_tables",
]

OUT, STR, ESC, U4, U3, U2, U1 = range(7)
NUM_MODES = 7
#: Event kinds reported by :func:`scan`.
EV_OPEN, EV_SEP, EV_CLOSE = 1, 2, 3
#: The scanner state before any byte.
START: tuple[bytes, int] = (b"", OUT)

_LBRACK, _RBRACK, _LBRACE, _RBRACE = 0x5B, 0x5D, 0x7B, 0x7D
_COMMA, _QUOTE, _BSLASH = 0x2C, 0x22, 0x5C
_ARRAY = b"["
_LITERAL_LETTERS = frozenset(b"truefalsn")


def scan(state: tuple[bytes, int], data: bytes, base: int = 0
         ) -> tuple[tuple[bytes, int], list[tuple[int, int, int]]]:
    """Read ``data`` from scanner ``state``.

    Args:
        state: ``(stack, mode)`` (see the module docstring).
        data: the bytes; a continuation of a JSON text prefix (not checked: bytes that no JSON
            text has there are read leniently).
        base: the offset of ``data[0]`` in the whole output (event offsets are absolute).

    Returns:
        ``(new state, events)``; events are ``(offset, kind, depth)`` in order: ``EV_OPEN`` at a
        structural ``[`` (depth = stack length after the push), ``EV_SEP`` at a ``,`` directly
        inside an array (depth = stack length), ``EV_CLOSE`` at a ``]`` (depth = stack length
        before the pop).
    """
    stack, mode = state
    events: list[tuple[int, int, int]] = []
    for i, b in enumerate(data):
        if mode == OUT:
            if b == _QUOTE:
                mode = STR
            elif b == _LBRACK:
                stack += _ARRAY
                events.append((base + i, EV_OPEN, len(stack)))
            elif b == _LBRACE:
                stack += b"{"
            elif b == _COMMA:
                if stack[-1:] == _ARRAY:
                    events.append((base + i, EV_SEP, len(stack)))
            elif b == _RBRACK:
                events.append((base + i, EV_CLOSE, len(stack)))
                stack = stack[:-1]
            elif b == _RBRACE:
                stack = stack[:-1]
        elif mode == STR:
            if b == _QUOTE:
                mode = OUT
            elif b == _BSLASH:
                mode = ESC
        elif mode == ESC:
            mode = U4 if b == 0x75 else STR
        else:  # U4..U1: a hex digit of \uXXXX
            mode = STR if mode == U1 else mode + 1
    return (stack, mode), events


# ----------------------------------------------------------------------------- values


def _key(v: Any) -> Any:
    if v is None:
        return ("z",)
    if v is True or v is False:
        return ("b", v)
    if isinstance(v, Decimal):
        return ("n", v)  # Decimal: numerically equal values are equal and hash alike
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, list):
        return ("a", tuple(_key(x) for x in v))
    if isinstance(v, dict):
        return ("o", frozenset((k, _key(x)) for k, x in v.items()))
    raise InvalidArgumentTypeError(
        f"not a JSON value: {v!r}")  # pragma: no cover - json.loads gives the above


def value_key(text: bytes | str) -> Any:
    """A hashable key of the JSON value ``text`` (one complete JSON text; whitespace around it
    allowed): equal keys iff equal JSON values (module docstring).

    Raises:
        ValueError: ``text`` is not one JSON value (``json.JSONDecodeError``) or not UTF-8.
    """
    return _key(json.loads(text, parse_float=Decimal, parse_int=Decimal))


def committed_key(item: bytes) -> Any:
    """The key of the value that the partial array item ``item`` (stripped of whitespace,
    non-empty, read with the scanner at the item's own depth and outside a string) must
    become, or None when it can still become several values (a number may get more digits).

    ``"..."``, ``{...}`` and ``[...]`` are complete there; a prefix of ``true``, ``false`` or
    ``null`` can only become that literal."""
    c = item[0]
    if c in b"tfn":
        for lit, key in ((b"true", ("b", True)), (b"false", ("b", False)), (b"null", ("z",))):
            if lit.startswith(item):
                return key
        return None
    if c in b"-0123456789":
        return None
    try:
        return value_key(item)
    except ValueError:  # not complete after all (not expected where the caller asks)
        return None


# ----------------------------------------------------------------------------- token tables


def _mode_table() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(next mode, candidate flag, open flag) int8/bool [NUM_MODES, 257]; column 256 is the
    padding of short tokens (no change)."""
    nxt = np.zeros((NUM_MODES, 257), dtype=np.int8)
    cand = np.zeros((NUM_MODES, 257), dtype=bool)
    opn = np.zeros((NUM_MODES, 257), dtype=bool)
    for m in range(NUM_MODES):
        nxt[m, 256] = m
        for b in range(256):
            if m == OUT:
                n = STR if b == _QUOTE else OUT
                c = b in (_COMMA, _RBRACK, _RBRACE) or b in _LITERAL_LETTERS
                o = b == _LBRACK
            elif m == STR:
                n = OUT if b == _QUOTE else ESC if b == _BSLASH else STR
                c = b == _QUOTE
                o = False
            elif m == ESC:
                n, c, o = (U4 if b == 0x75 else STR), False, False
            else:
                n, c, o = (STR if m == U1 else m + 1), False, False
            nxt[m, b], cand[m, b], opn[m, b] = n, c, o
    return nxt, cand, opn


def _pack(bits: np.ndarray) -> np.ndarray:
    V = bits.shape[-1]
    W = (V + 31) // 32
    pad = np.zeros(W * 32, dtype=bool)
    pad[:V] = bits
    return np.packbits(pad, bitorder="little").view(np.int32).copy()


def token_tables(vocab) -> tuple[np.ndarray, np.ndarray]:
    """``(candidates, opens)``: int32 [NUM_MODES, W] bit-packed token sets for a
    :class:`~.vocabulary.TokenVocabulary` (module docstring); tokens without text are in
    neither.  Computed once per vocabulary (vectorized over tokens, one numpy step per byte
    position) and kept in its memo."""
    hit = vocab._memo.get("json_scan_tables")
    if hit is not None:
        return hit
    tb = vocab.token_bytes
    V = len(tb)
    lens = np.array([0 if b is None else len(b) for b in tb], dtype=np.int64)
    # tokens by length, longest first: byte position j concerns a prefix of that order only
    order = np.argsort(-lens, kind="stable")
    slens = lens[order]
    flat = np.frombuffer(b"".join(tb[i] for i in order.tolist() if tb[i]), dtype=np.uint8)
    starts = np.cumsum(slens) - slens
    nxt, cand_t, opn_t = _mode_table()
    mode = np.repeat(np.arange(NUM_MODES, dtype=np.int64)[:, None], V, axis=1)  # [M, V]
    cand = np.zeros((NUM_MODES, V), dtype=bool)
    opn = np.zeros((NUM_MODES, V), dtype=bool)
    L = int(slens[0]) if V else 0
    n = V
    for j in range(L):
        while n and slens[n - 1] <= j:
            n -= 1
        col = flat[starts[:n] + j].astype(np.int64)[None, :]
        m = mode[:, :n]
        cand[:, :n] |= cand_t[m, col]
        opn[:, :n] |= opn_t[m, col]
        mode[:, :n] = nxt[m, col]
    inv = np.empty(V, dtype=np.int64)
    inv[order] = np.arange(V)
    cands = [_pack(cand[k, inv]) for k in range(NUM_MODES)]
    opens = [_pack(opn[k, inv]) for k in range(NUM_MODES)]
    out = (np.stack(cands), np.stack(opens))
    vocab._memo["json_scan_tables"] = out
    return out
