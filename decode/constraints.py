"""Constraint adapters: one batched, reorderable interface over every kind of constraint.

A :class:`Constraint` answers, for ``B`` prefixes at once (``st``: per-row state):

* ``allowed(st, remaining, mode) -> bool [B, V]`` — token masking (every id at once);
* ``check(st, rows, tokens, remaining, mode) -> bool [k]`` — black-box checks of ``k`` (row, token)
  pairs, the operation AWRS counts (``constraint.checks`` is the running number of token checks);
* ``advance(st, tokens)``, ``st.select(idx)``, ``is_accepting(st) -> bool [B]``.

Budget convention (the same as the masks of :mod:`tractable.fsa.masks`): ``remaining`` r = tokens
that may still be generated, EOS included.  A text token ``v`` is allowed iff the prefix extended by
``v`` can still be completed within ``r - 1`` further tokens (``mode="gcd"``), or can be completed
at all (``mode="lcd"``: the budget is ignored); an EOS id is allowed iff the prefix is accepted and
r >= 1.  A sequence that uses its whole budget (r = 0) without EOS is complete: valid iff accepted.

Adapters:

* :class:`AutomatonConstraint` — a :class:`~tractable.fsa.automaton.TokenAutomaton` (state =
  set of automaton states; exact budget lookahead from shortest distances to a final state);
* :class:`PrefixConstraint` — Python predicates ``viable(prefix)`` / ``accepts(prefix)`` over
  token-id tuples, or over decoded bytes when ``token_bytes`` is given (grammar checkers);
* :class:`RegexConstraint` — ``regex`` module partial matching (lookarounds, backreferences…).

Black-box predicates cannot see the budget beyond one step: with ``mode="gcd"`` a text token at
r = 1 must make the prefix accepted; earlier, viability is all they know (a particle may still run
out of budget; SMC then gives it weight 0, which is correct, only wasteful).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..fsa.errors import InvalidArgumentError, InvalidArgumentTypeError

__all__ = [
    "Constraint",
    "AutomatonConstraint",
    "PrefixConstraint",
    "RegexConstraint",
    "as_constraint",
]


def _rem(remaining, B: int) -> np.ndarray:
    if isinstance(remaining, torch.Tensor):
        r = remaining.detach().cpu().numpy().astype(np.int64).reshape(-1)
    else:
        r = np.asarray(remaining, dtype=np.int64).reshape(-1)
    if r.size == 1 and B != 1:
        r = np.full(B, int(r[0]), dtype=np.int64)
    return r


class Constraint:
    """Interface (see the module docstring).  ``checks`` counts per-token evaluations made by
    :meth:`check`; ``mask_calls`` counts rows masked by :meth:`allowed`."""

    vocab_size: int
    eos_token_ids: tuple[int, ...]
    checks: int = 0
    mask_calls: int = 0

    def start(self, batch_size: int = 1) -> Any:
        raise NotImplementedError

    def advance(self, state, tokens: torch.Tensor) -> Any:
        """Append ``tokens`` (int64 [B]); EOS ids leave a row unchanged (it is finished)."""
        raise NotImplementedError

    def allowed(self, state, remaining, mode: str = "gcd") -> torch.Tensor:
        raise NotImplementedError

    def check(self, state, rows: torch.Tensor, tokens: torch.Tensor, remaining,
              mode: str = "gcd") -> torch.Tensor:
        raise NotImplementedError

    def is_accepting(self, state) -> torch.Tensor:
        raise NotImplementedError

    def _is_eos(self, tokens: np.ndarray) -> np.ndarray:
        return np.isin(tokens, np.asarray(self.eos_token_ids, dtype=np.int64))


# ----------------------------------------------------------------------------- automaton


@dataclass
class _SetState:
    """bool [B, S]: the automaton states each row may be in."""

    active: np.ndarray

    @property
    def batch_size(self) -> int:
        return int(self.active.shape[0])

    def select(self, idx: torch.Tensor) -> _SetState:
        return _SetState(self.active[np.asarray(idx.cpu(), dtype=np.int64)])


class AutomatonConstraint(Constraint):
    """A :class:`~tractable.fsa.automaton.TokenAutomaton` as a constraint.

    State: bool [B, S] numpy sets (eq. 3 of paper 002 for realized tokens).  ``allowed`` ORs the
    packed label rows of the edges that leave the current set and reach a state whose shortest
    distance to a final state is <= r - 1 (``mode="gcd"``) or finite (``"lcd"``).  ``check`` does
    the same test for single (row, token) pairs without building the mask (AWRS's black-box call).
    """

    def __init__(self, automaton) -> None:
        A = automaton
        self.automaton = A
        self.vocab_size = int(A.vocab_size)
        self.eos_token_ids = tuple(int(e) for e in A.eos_token_ids)
        self.S = int(A.num_states)
        self.src = A.edge_src.cpu().numpy().astype(np.int64)
        self.dst = A.edge_dst.cpu().numpy().astype(np.int64)
        self.lab = A.edge_label.cpu().numpy().astype(np.int64)
        self.packed = np.ascontiguousarray(A.labels.cpu().numpy()).view(np.uint32)
        self.final = A.final.cpu().numpy().astype(bool)
        self.dist = self._distances()
        self.dist_dst = self.dist[self.dst]
        self.checks = 0
        self.mask_calls = 0

    def _distances(self) -> np.ndarray:
        """int64 [S]: fewest text tokens from each state to a final state (BFS backwards)."""
        big = np.iinfo(np.int64).max // 4
        d = np.full(self.S, big, dtype=np.int64)
        d[self.final] = 0
        frontier = np.nonzero(self.final)[0]
        k = 0
        while frontier.size:
            k += 1
            m = np.isin(self.dst, frontier)
            cand = np.unique(self.src[m])
            cand = cand[d[cand] > k]
            d[cand] = k
            frontier = cand
        return d

    def start(self, batch_size: int = 1) -> _SetState:
        a = np.zeros((batch_size, self.S), dtype=bool)
        a[:, 0] = True
        return _SetState(a)

    def _bits(self, edges: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """bool [..]: token ``tokens`` is in the label set of ``edges`` (broadcast)."""
        t = tokens.astype(np.int64)
        word = self.packed[self.lab[edges], t >> 5]
        return ((word >> (t & 31).astype(np.uint32)) & np.uint32(1)).astype(bool)

    def advance(self, state: _SetState, tokens: torch.Tensor) -> _SetState:
        toks = np.asarray(tokens.cpu(), dtype=np.int64).reshape(-1)
        eos = self._is_eos(toks)
        out = np.zeros_like(state.active)
        for b in range(state.batch_size):
            if eos[b]:
                out[b] = state.active[b]
                continue
            t = int(toks[b])
            if not 0 <= t < self.vocab_size:
                continue
            e = np.nonzero(state.active[b][self.src])[0]
            if e.size:
                hit = e[self._bits(e, np.full(e.size, t))]
                out[b, self.dst[hit]] = True
        return _SetState(out)

    def _limit(self, r: int, mode: str) -> int:
        if mode == "gcd":
            return r - 1
        if mode == "lcd":
            return np.iinfo(np.int64).max
        raise InvalidArgumentError(f"mode must be 'gcd' or 'lcd', got {mode!r}")

    def allowed(self, state: _SetState, remaining, mode: str = "gcd") -> torch.Tensor:
        B = state.batch_size
        r = _rem(remaining, B)
        W = self.packed.shape[1]
        out = np.zeros((B, W), dtype=np.uint32)
        for b in range(B):
            if r[b] <= 0:
                continue
            ok = state.active[b][self.src] & (self.dist_dst <= self._limit(int(r[b]), mode))
            labs = np.unique(self.lab[ok])
            if labs.size:
                out[b] = np.bitwise_or.reduce(self.packed[labs], axis=0)
        bits = np.unpackbits(out.view(np.uint8), axis=1, bitorder="little")[:, : self.vocab_size]
        mask = torch.from_numpy(bits.astype(bool))
        acc = (state.active & self.final[None, :]).any(axis=1) & (r >= 1)
        for e in self.eos_token_ids:
            mask[:, e] = torch.from_numpy(acc)
        self.mask_calls += B
        return mask

    def check(self, state: _SetState, rows: torch.Tensor, tokens: torch.Tensor, remaining,
              mode: str = "gcd") -> torch.Tensor:
        rows_np = np.asarray(rows.cpu(), dtype=np.int64).reshape(-1)
        toks = np.asarray(tokens.cpu(), dtype=np.int64).reshape(-1)
        r = _rem(remaining, rows_np.size)
        self.checks += int(toks.size)
        out = np.zeros(toks.size, dtype=bool)
        eos = self._is_eos(toks)
        for i in range(toks.size):
            act = state.active[rows_np[i]]
            if r[i] <= 0:
                continue
            if eos[i]:
                out[i] = bool((act & self.final).any())
                continue
            t = int(toks[i])
            if not 0 <= t < self.vocab_size:
                continue
            e = np.nonzero(act[self.src] & (self.dist_dst <= self._limit(int(r[i]), mode)))[0]
            if e.size:
                out[i] = bool(self._bits(e, np.full(e.size, t)).any())
        return torch.from_numpy(out)

    def is_accepting(self, state: _SetState) -> torch.Tensor:
        return torch.from_numpy((state.active & self.final[None, :]).any(axis=1))

    def min_tokens_to_accept(self) -> int:
        return int(self.dist[0])


# ----------------------------------------------------------------------------- predicates


@dataclass
class _PrefixState:
    prefixes: list  # per row: tuple of ids, or bytes

    @property
    def batch_size(self) -> int:
        return len(self.prefixes)

    def select(self, idx: torch.Tensor) -> _PrefixState:
        return _PrefixState([self.prefixes[int(i)] for i in idx.tolist()])


class PrefixConstraint(Constraint):
    """A constraint given by two predicates on prefixes.

    Args:
        viable: ``prefix -> bool``: some continuation of ``prefix`` is accepted (false positives
            are allowed and only cost efficiency; false negatives bias every sampler).
        accepts: ``prefix -> bool``: ``prefix`` itself is a complete valid string.
        vocab_size: V; eos_token_ids: ids that end a sequence.
        token_bytes: when given (``TokenVocabulary.token_bytes``), prefixes are ``bytes`` (the
            decoded text) and a token whose entry is ``None`` (special) is never allowed; otherwise
            prefixes are tuples of token ids.

    Results are memoized per prefix.  ``allowed`` evaluates every id (token masking).
    """

    def __init__(self, viable: Callable[[Any], bool], accepts: Callable[[Any], bool],
                 vocab_size: int, eos_token_ids: Sequence[int], *,
                 token_bytes: Sequence[bytes | None] | None = None) -> None:
        self._viable_fn = viable
        self._accepts_fn = accepts
        self.vocab_size = int(vocab_size)
        self.eos_token_ids = tuple(int(e) for e in eos_token_ids)
        self.token_bytes = None if token_bytes is None else list(token_bytes)
        if self.token_bytes is not None and len(self.token_bytes) < self.vocab_size:
            self.token_bytes += [None] * (self.vocab_size - len(self.token_bytes))
        self._v: dict = {}
        self._a: dict = {}
        self.checks = 0
        self.mask_calls = 0

    def viable(self, p) -> bool:
        out = self._v.get(p)
        if out is None:
            out = self._v[p] = bool(self._viable_fn(p))
        return out

    def accepts(self, p) -> bool:
        out = self._a.get(p)
        if out is None:
            out = self._a[p] = bool(self._accepts_fn(p))
        return out

    def _extend(self, p, t: int):
        if self.token_bytes is None:
            return p + (t,)
        b = self.token_bytes[t] if 0 <= t < self.vocab_size else None
        return None if b is None else p + b

    def start(self, batch_size: int = 1) -> _PrefixState:
        empty = () if self.token_bytes is None else b""
        return _PrefixState([empty] * batch_size)

    def advance(self, state: _PrefixState, tokens: torch.Tensor) -> _PrefixState:
        out = []
        eos = set(self.eos_token_ids)
        for p, t in zip(state.prefixes, tokens.tolist()):
            if t in eos:
                out.append(p)
            else:
                n = self._extend(p, int(t))
                out.append(n if n is not None else p)
        return _PrefixState(out)

    def _ok(self, p, t: int, r: int, mode: str) -> bool:
        if r <= 0:
            return False
        if t in self.eos_token_ids:
            return self.accepts(p)
        n = self._extend(p, t)
        if n is None:
            return False
        if mode == "gcd" and r == 1:
            return self.accepts(n)
        if mode not in ("gcd", "lcd"):
            raise InvalidArgumentError(f"mode must be 'gcd' or 'lcd', got {mode!r}")
        return self.viable(n)

    def check(self, state: _PrefixState, rows: torch.Tensor, tokens: torch.Tensor, remaining,
              mode: str = "gcd") -> torch.Tensor:
        rr = rows.tolist()
        tt = tokens.tolist()
        r = _rem(remaining, len(tt))
        self.checks += len(tt)
        return torch.tensor([self._ok(state.prefixes[a], int(t), int(q), mode)
                             for a, t, q in zip(rr, tt, r)], dtype=torch.bool)

    def allowed(self, state: _PrefixState, remaining, mode: str = "gcd") -> torch.Tensor:
        B = state.batch_size
        r = _rem(remaining, B)
        out = torch.zeros(B, self.vocab_size, dtype=torch.bool)
        for b in range(B):
            p = state.prefixes[b]
            out[b] = torch.tensor([self._ok(p, t, int(r[b]), mode)
                                   for t in range(self.vocab_size)], dtype=torch.bool)
        self.mask_calls += B
        return out

    def is_accepting(self, state: _PrefixState) -> torch.Tensor:
        return torch.tensor([self.accepts(p) for p in state.prefixes], dtype=torch.bool)


def _utf8_text(data: bytes) -> str:
    """Decode ``data``; an incomplete UTF-8 sequence at the end is dropped (viability of the
    rest is then an over-approximation, which is allowed)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start >= len(data) - 3 and e.reason.startswith("unexpected end"):
            return data[: e.start].decode("utf-8", errors="strict")
        raise


class RegexConstraint(PrefixConstraint):
    """``regex`` (the PyPI module) full-match constraint with partial matching for viability:
    ``viable(b) = regex.fullmatch(pattern, text, partial=True) is not None``.

    Supports what finite automata cannot (backreferences, lookaround); costs one regex call per
    checked token — the black-box setting AWRS is designed for.  Invalid UTF-8 is rejected.
    """

    def __init__(self, pattern: str, vocab, *, flags: int = 0) -> None:
        import regex

        self.pattern = pattern
        self._re = regex.compile(pattern, flags)

        def viable(b: bytes) -> bool:
            try:
                s = _utf8_text(b)
            except UnicodeDecodeError:
                return False
            return self._re.fullmatch(s, partial=True) is not None

        def accepts(b: bytes) -> bool:
            try:
                s = b.decode("utf-8")
            except UnicodeDecodeError:
                return False
            return self._re.fullmatch(s) is not None

        super().__init__(viable, accepts, vocab.size, vocab.eos_token_ids,
                         token_bytes=vocab.token_bytes)


def as_constraint(obj, vocab=None) -> Constraint:
    """Wrap ``obj`` as a :class:`Constraint`:

    * a :class:`Constraint` → itself;
    * a ``TokenAutomaton`` → :class:`AutomatonConstraint`;
    * a ``str`` → :class:`RegexConstraint` (needs ``vocab``);
    * an object with ``viable(bytes)`` and ``accepts(bytes)`` (a grammar checker) →
      :class:`PrefixConstraint` over decoded bytes (needs ``vocab``).

    Raises:
        TypeError: none of the above.
    """
    if isinstance(obj, Constraint):
        return obj
    if callable(getattr(obj, "as_constraint", None)):  # e.g. a UniqueItemsAutomaton
        return obj.as_constraint()
    if hasattr(obj, "edge_src") and hasattr(obj, "labels") and hasattr(obj, "final"):
        return AutomatonConstraint(obj)
    if isinstance(obj, str):
        if vocab is None:
            raise InvalidArgumentTypeError("a regex constraint needs vocab= (a TokenVocabulary)")
        return RegexConstraint(obj, vocab)
    if callable(getattr(obj, "viable", None)) and callable(getattr(obj, "accepts", None)):
        if vocab is None:
            raise InvalidArgumentTypeError(
                "a viable/accepts constraint needs vocab= (a TokenVocabulary)")
        return PrefixConstraint(obj.viable, obj.accepts, vocab.size, vocab.eos_token_ids,
                                token_bytes=vocab.token_bytes)
    raise InvalidArgumentTypeError(
        f"cannot use {type(obj).__name__} as a constraint: expected a Constraint, a "
        "TokenAutomaton, a regex string, or an object with viable(bytes)/accepts(bytes)"
    )
