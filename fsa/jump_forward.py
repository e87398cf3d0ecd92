"""Jump-forward: where the constraint allows exactly one continuation, append it unsampled.

After ``{"name": "get_weather", "arguments": {"`` a schema may force ``city":"`` — every
accepted output continues with those bytes, so sampling them token by token only spends model
calls.  :func:`forced_bytes` finds that continuation on the token automaton;
:func:`forced_tokens` spells it with the tokenizer's own (canonical) encoding and keeps the
longest prefix the automaton allows within the budget (:func:`~.speculative.verify_draft`).

Forced bytes
------------
For a state set X let L(X) be the byte strings of the token sequences X accepts.  The forced
continuation is the longest common prefix (LCP) of L(X): empty when X is accepting (stopping is
a continuation).  On the token automaton, with T(X) the tokens allowed from X (the LCD mask: a
continuation exists), ``forced(X) = LCP over t in T(X) of bytes(t) + forced(δ(X, t))``,
memoized per set.  Three places cut it short, each returning a *prefix* of the true value (LCPs
of prefixes are prefixes of the LCP), so what is returned is always forced: more than
``max_branch`` allowed tokens (then the LCP of their bytes alone), a set already being expanded
(a loop: counted as empty), and ``max_bytes``.  A special token (no bytes; structural tags)
ends the forced text.  LCD, not the budget: a prefix of every unbounded continuation is a prefix
of every continuation that fits the budget too; the budget is checked on the tokens.

Forced tokens, and what this does to the distribution
-----------------------------------------------------
The bytes are cut to whole UTF-8 characters, encoded with ``encode`` (the tokenizer), checked to
spell exactly those bytes, and the last token is dropped unless nothing may follow it (a token
at the end of the forced text might merge with what comes next in the canonical tokenization:
``" "`` then ``"Paris"`` is ``" Paris"``).  The remaining tokens are kept as far as
:func:`~.speculative.verify_draft` allows them under GCD with the budget left; an encoding that
is not allowed (another tokenization was needed) forces nothing and sampling goes on.

The *text* is forced either way (the constraint allows no other), but the *tokenization* is
not: a model can put probability on other spellings of the same bytes, and later tokens are
conditioned on the spelling.  Jump-forward replaces the model's distribution over spellings
of the forced text by a point mass on the canonical one — an approximation (it is what SGLang
and xgrammar's jump-forward do).  It is exact only where the model itself puts all its
constrained mass on the canonical spelling.  :func:`tractable.generate` therefore leaves it
off by default (``jump_forward=False``) and warns once when it is turned on.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .speculative import verify_draft
from .state import AutomatonState

__all__ = ["JumpForward", "forced_bytes", "forced_tokens"]

_MAX_BRANCH = 64
_MAX_BYTES = 512


def _lcp(a: bytes, b: bytes) -> bytes:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return a[:i]


class JumpForward:
    """Forced continuations of one automaton over one vocabulary, memoized per state set.

    Args:
        automaton: a :class:`~.automaton.TokenAutomaton`.
        vocab: its :class:`~.vocabulary.TokenVocabulary` (the bytes of each id).
        encode: ``str -> list[int]``, the tokenizer's encoding without special tokens (for
            :meth:`tokens`; e.g. ``lambda s: tok.encode(s, add_special_tokens=False)``).
        max_branch, max_bytes: the cut-offs of the module docstring.

    Not thread-safe (the memo); one per decoding loop, or behind a lock.
    """

    def __init__(self, automaton, vocab, encode: Callable[[str], list[int]] | None = None, *,
                 max_branch: int = _MAX_BRANCH, max_bytes: int = _MAX_BYTES):
        self.A = automaton
        self.vocab = vocab
        self.encode = encode
        self.max_branch = int(max_branch)
        self.max_bytes = int(max_bytes)
        self._memo: dict[bytes, bytes] = {}
        self._busy: set[bytes] = set()
        tb = vocab.token_bytes
        self._first = np.array([-1 if not b else b[0] for b in tb], dtype=np.int16)
        self._eos = frozenset(int(e) for e in automaton.eos_token_ids)

    # ------------------------------------------------------------ bytes

    def bytes(self, state: AutomatonState) -> list[bytes]:
        """The forced bytes of each row of ``state`` (module docstring)."""
        return [self._forced(state.select([b])) for b in range(state.batch_size)]

    def _forced(self, X: AutomatonState) -> bytes:
        key = X.active.cpu().numpy().tobytes()
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if key in self._busy or bool(X.is_dead()[0]) or bool(X.is_accepting()[0]):
            return b""
        mask = self.A.allowed(X, None, "lcd")[0].numpy()
        toks = np.nonzero(mask)[0]
        tb = self.vocab.token_bytes
        if toks.size == 0 or any(tb[t] is None for t in toks[:self.max_branch + 1].tolist()):
            out = b""
        else:
            first = self._first[toks]
            if (first != first[0]).any() or (first < 0).any():
                out = b""
            elif toks.size > self.max_branch:
                out = tb[int(toks[0])]
                for t in toks.tolist():
                    out = _lcp(out, tb[t])
                    if not out:
                        break
            else:
                self._busy.add(key)
                try:
                    out = None
                    for t in toks.tolist():
                        nxt = self.A.advance(X, torch.tensor([t]))
                        s = tb[t] + (self._forced(nxt) if len(tb[t]) < self.max_bytes else b"")
                        out = s if out is None else _lcp(out, s)
                        if not out:
                            break
                finally:
                    self._busy.discard(key)
                out = (out or b"")[:self.max_bytes]
        self._memo[key] = out
        return out

    # ------------------------------------------------------------ tokens

    def tokens(self, state: AutomatonState, remaining: int | None, mode: str = "gcd"
               ) -> list[int]:
        """The forced tokens for a batch-1 ``state`` with ``remaining`` tokens left (possibly
        none): the canonical encoding of :meth:`bytes`, cut as in the module docstring."""
        if self.encode is None:
            from .errors import InvalidArgumentError

            raise InvalidArgumentError("JumpForward.tokens needs an encode function")
        data = self._forced(state)
        data = _whole_utf8(data)
        if not data:
            return []
        ids = [int(t) for t in self.encode(data.decode("utf-8"))]
        tb = self.vocab.token_bytes
        if not ids or any(not 0 <= t < len(tb) or tb[t] is None for t in ids) or \
                b"".join(tb[t] for t in ids) != data:
            return []
        res = verify_draft(self.A, state, [ids], remaining, mode)
        n = int(res.accepted[0])
        if n == len(ids):
            # keep the last token only if nothing but EOS may follow it
            st = res.state
            tail = self.A.allowed(st, None, "lcd")[0]
            if tail.any() and not all(int(t) in self._eos for t in tail.nonzero().flatten()):
                n -= 1
        return ids[:n]


def _whole_utf8(data: bytes) -> bytes:
    """``data`` cut after its last complete UTF-8 character."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            data[:cut].decode("utf-8")
            return data[:cut]
        except UnicodeDecodeError:
            continue
    return b""


def forced_bytes(automaton, vocab, state: AutomatonState, **kwargs) -> list[bytes]:
    """The forced continuation (bytes) of each row of ``state``; see :class:`JumpForward`."""
    return JumpForward(automaton, vocab, **kwargs).bytes(state)


def forced_tokens(automaton, vocab, state: AutomatonState, encode: Callable[[str], list[int]],
                  remaining: int | None, mode: str = "gcd", **kwargs) -> list[int]:
    """The forced tokens for a batch-1 ``state``; see :meth:`JumpForward.tokens`."""
    return JumpForward(automaton, vocab, encode, **kwargs).tokens(state, remaining, mode)
