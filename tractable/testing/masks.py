"""Brute-force and literal references for the GCD / LCD masks, and hypothesis strategies.

* :func:`brute_force_allowed` enumerates token sequences (tiny vocabularies): a token v is GCD-
  allowed with r tokens remaining iff some sequence ``v c`` of at most r tokens, read after the
  prefix, is accepted (a trailing EOS is implied when there is room; the EOS token itself is
  allowed iff the prefix is accepted and r >= 1).  LCD: ``v`` keeps some accepted continuation
  of any length reachable (searched over the finite graph of state sets), and r >= 1.
* :func:`eq4_backward_literal` and :func:`eq34_mask_literal` compute paper 002's eq. 3 / eq. 4
  literally with dense 0/1 matrices on the EOS-padded automaton (a fresh accepting state ⊤, EOS
  edges from accepting states to ⊤ and an EOS self-loop on ⊤): exact-length backward messages,
  not our distance threshold.
* :func:`reachable_sets` lists every state set reachable from the start, with a shortest prefix.
* Strategies (need ``hypothesis``): :func:`tiny_vocabularies`, :func:`random_byte_nfas`,
  :func:`tiny_automata`.

Everything here is slow on purpose and meant for V <= ~8.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = [
    "brute_force_allowed",
    "brute_force_min_lengths",
    "brute_force_viable",
    "eq4_backward_literal",
    "eq34_mask_literal",
    "eq34_masks_literal",
    "reachable_sets",
    "tiny_vocabularies",
    "random_byte_nfas",
    "random_regex_nfas",
    "tiny_automata",
]


class _Stepper:
    """``automaton.step_states`` with a (set, token) → set cache (the sequences are still
    enumerated one by one; only the transition function is memoized)."""

    def __init__(self, A: Any):
        self.A = A
        self.final = A.final.cpu().numpy()
        self.eos = set(int(e) for e in A.eos_token_ids)
        self.text = [v for v in range(A.vocab_size) if v not in self.eos]
        self.cache: dict[tuple[bytes, int], np.ndarray] = {}

    def step(self, row: np.ndarray, v: int) -> np.ndarray:
        key = (row.tobytes(), v)
        out = self.cache.get(key)
        if out is None:
            out = self.A.step_states(row, v)
            self.cache[key] = out
        return out

    def run(self, prefix_ids) -> np.ndarray | None:
        cur = self.A.initial.cpu().numpy().astype(bool)
        for t in prefix_ids:
            t = int(t)
            if t in self.eos:
                return None
            cur = self.step(cur, t)
            if not cur.any():
                return None
        return cur

    def accepting(self, row: np.ndarray) -> bool:
        return bool((row & self.final).any())


def brute_force_min_lengths(A: Any, prefix_ids, max_len: int) -> np.ndarray:
    """float [V]: for each token v, the length of the shortest accepted sequence ``v c`` (EOS
    counted as one token when v is EOS; text sequences need no EOS) read after ``prefix_ids``,
    among all sequences of at most ``max_len`` tokens; ``inf`` if none.

    Enumerates sequences level by level (all of length 1, then 2, ...); a branch is dropped
    only when its state set is empty (no extension can be accepted) or a shorter accepted
    sequence with the same first token was already found.
    """
    sp = _Stepper(A)
    V = A.vocab_size
    best = np.full(V, np.inf)
    cur = sp.run(prefix_ids)
    if cur is None or max_len < 1:
        return best
    if sp.accepting(cur):
        for e in sp.eos:
            best[e] = 1
    frontier: list[tuple[int, np.ndarray]] = []
    for v in sp.text:
        s = sp.step(cur, v)
        if s.any():
            frontier.append((v, s))
    for k in range(1, max_len + 1):
        nxt: list[tuple[int, np.ndarray]] = []
        for v, s in frontier:
            if best[v] <= k:
                continue
            if sp.accepting(s):
                best[v] = k
                continue
            if k == max_len:
                continue
            for u in sp.text:
                s2 = sp.step(s, u)
                if s2.any():
                    nxt.append((v, s2))
        frontier = nxt
        if not frontier:
            break
    return best


def brute_force_viable(A: Any, prefix_ids) -> np.ndarray:
    """bool [V]: ``prefix + [v]`` has an accepted continuation of any length (EOS: the prefix
    is accepted).  Searches the finite graph of reachable state sets."""
    sp = _Stepper(A)
    V = A.vocab_size
    out = np.zeros(V, dtype=bool)
    cur = sp.run(prefix_ids)
    if cur is None:
        return out
    if sp.accepting(cur):
        for e in sp.eos:
            out[e] = True

    def can_accept(row: np.ndarray) -> bool:
        seen = {row.tobytes()}
        todo = [row]
        while todo:
            r = todo.pop()
            if sp.accepting(r):
                return True
            for u in sp.text:
                r2 = sp.step(r, u)
                k = r2.tobytes()
                if r2.any() and k not in seen:
                    seen.add(k)
                    todo.append(r2)
        return False

    for v in sp.text:
        s = sp.step(cur, v)
        out[v] = bool(s.any()) and can_accept(s)
    return out


def brute_force_allowed(
    A: Any, prefix_ids, remaining: int | None, mode: str = "gcd", max_len: int = 8
) -> torch.Tensor:
    """bool [V]: the mask by enumeration (see the module docstring).  ``remaining`` must be
    <= ``max_len`` for ``"gcd"`` (None = no budget is only meaningful for ``"lcd"``)."""
    if mode == "lcd":
        if remaining is not None and remaining < 1:
            return torch.zeros(A.vocab_size, dtype=torch.bool)
        return torch.from_numpy(brute_force_viable(A, prefix_ids))
    if mode != "gcd":
        raise ValueError(f"unknown mode {mode!r}")
    if remaining is None or remaining > max_len:
        raise ValueError(f"brute force needs remaining <= max_len ({remaining} > {max_len})")
    best = brute_force_min_lengths(A, prefix_ids, max_len=int(remaining))
    return torch.from_numpy(best <= remaining)


# ------------------------------------------------------------------------ eq. 3 / eq. 4


def _padded_dense(A: Any):
    """Dense (T_out [S+1, E'], T_in [E', S+1], B [E', V], f [S+1]) of the EOS-padded automaton
    (state S is ⊤).  float64."""
    S, V = A.num_states, A.vocab_size
    E = A.num_edges
    Bd = A.B.dense().double()
    fin = np.nonzero(A.final.cpu().numpy())[0]
    eos = torch.zeros(V, dtype=torch.float64)
    for e in A.eos_token_ids:
        eos[int(e)] = 1.0
    src = A.edge_src.tolist() + [int(f) for f in fin] + [S]
    dst = A.edge_dst.tolist() + [S] * fin.size + [S]
    E2 = len(src)
    T_out = torch.zeros(S + 1, E2, dtype=torch.float64)
    T_in = torch.zeros(E2, S + 1, dtype=torch.float64)
    T_out[src, torch.arange(E2)] = 1.0
    T_in[torch.arange(E2), dst] = 1.0
    B = torch.cat([Bd, eos.expand(E2 - E, V)], dim=0)
    f = torch.zeros(S + 1, dtype=torch.float64)
    f[torch.as_tensor(fin, dtype=torch.long)] = 1.0
    f[S] = 1.0
    return T_out, T_in, B, f


def eq4_backward_literal(A: Any, n: int) -> torch.Tensor:
    """bool [n + 1, S]: row k = "reaches an accepting state in exactly k steps" in the
    EOS-padded automaton, by eq. 4 literally: ``β_{t-1} = 1{T_out((T_in β_t) ∘ (B 1_V))}``,
    ``β_n = f`` (row k is β_{n-k}).  The ⊤ column is dropped."""
    T_out, T_in, B, f = _padded_dense(A)
    ones = torch.ones(B.shape[1], dtype=torch.float64)
    rows = [f]
    for _ in range(n):
        rows.append(((T_out @ ((T_in @ rows[-1]) * (B @ ones))) > 0).double())
    return torch.stack(rows)[:, : A.num_states] > 0


def eq34_masks_literal(A: Any, state_row, max_remaining: int) -> torch.Tensor:
    """bool [max_remaining + 1, V]: row r is ``m = 1{α^T β}`` with eq. 3's α from the realized
    set ``state_row`` (bool [S]) and eq. 4's exact-length β for r − 1 further steps, on the
    EOS-padded automaton (row 0, no token left, is all zero)."""
    T_out, T_in, B, f = _padded_dense(A)
    x = torch.zeros(A.num_states + 1, dtype=torch.float64)
    x[: A.num_states] = torch.as_tensor(np.asarray(state_row), dtype=torch.float64)
    alpha = ((T_in.T @ ((T_out.T @ x).unsqueeze(1) * B)) > 0).double()  # [S+1, V]  (eq. 3)
    ones = torch.ones(B.shape[1], dtype=torch.float64)
    out = torch.zeros(max_remaining + 1, A.vocab_size, dtype=torch.bool)
    beta = f
    for r in range(1, max_remaining + 1):
        if r > 1:
            beta = ((T_out @ ((T_in @ beta) * (B @ ones))) > 0).double()  # eq. 4
        out[r] = (alpha.T @ beta) > 0
    return out


def eq34_mask_literal(A: Any, state_row, remaining: int) -> torch.Tensor:
    """bool [V]: row ``remaining`` of :func:`eq34_masks_literal`."""
    if remaining < 1:
        return torch.zeros(A.vocab_size, dtype=torch.bool)
    return eq34_masks_literal(A, state_row, remaining)[remaining]


def reachable_sets(A: Any, max_depth: int = 12, limit: int = 200) -> list[tuple[list[int], Any]]:
    """[(shortest prefix ids, bool numpy [S] set)] for every state set reachable from the start
    in at most ``max_depth`` text tokens (breadth first; at most ``limit`` sets)."""
    sp = _Stepper(A)
    init = A.initial.cpu().numpy().astype(bool)
    seen = {init.tobytes()}
    out = [([], init)]
    level = [([], init)]
    for _ in range(max_depth):
        nxt = []
        for pre, row in level:
            for v in sp.text:
                r2 = sp.step(row, v)
                k = r2.tobytes()
                if r2.any() and k not in seen:
                    seen.add(k)
                    nxt.append((pre + [v], r2))
                    out.append((pre + [v], r2))
                    if len(out) >= limit:
                        return out
        level = nxt
        if not level:
            break
    return out


# ------------------------------------------------------------------------ strategies


def tiny_vocabularies(max_size: int = 6, alphabet: bytes = b"abc", max_token_len: int = 3):
    """Strategy: a :class:`~tractable.fsa.vocabulary.TokenVocabulary` of at most ``max_size``
    ids over ``alphabet``: some single-byte tokens, some longer ones (all distinct), one EOS id
    at a random position and sometimes one special (text-less) id."""
    from hypothesis import strategies as st

    from tractable.fsa.vocabulary import TokenVocabulary

    @st.composite
    def build(draw):
        special = draw(st.booleans()) and max_size >= 4
        room = max_size - 1 - int(special)
        singles = draw(st.lists(st.sampled_from(list(alphabet)), min_size=1,
                                max_size=min(room, len(alphabet)), unique=True))
        word = st.lists(st.sampled_from(list(alphabet)), min_size=2,
                        max_size=max_token_len).map(bytes)
        multis = draw(st.lists(word, max_size=room - len(singles), unique=True))
        toks: list[bytes | None] = [bytes([b]) for b in singles] + multis
        toks = draw(st.permutations(toks))
        if special:
            toks.insert(draw(st.integers(0, len(toks))), None)
        eos_at = draw(st.integers(0, len(toks)))
        toks.insert(eos_at, None)
        return TokenVocabulary.from_token_bytes(toks, eos_token_ids=[eos_at], name="tiny")

    return build()


def random_byte_nfas(max_states: int = 6, alphabet: bytes = b"abc"):
    """Strategy: a random :class:`~tractable.fsa.nfa.ByteNFA`: a chain 0 → 1 → … → n−1 (so
    long words exist), extra random edges (labels: non-empty subsets of ``alphabet``), a few
    epsilon moves; state n−1 and a random subset are accepting."""
    from hypothesis import strategies as st

    from tractable.fsa.nfa import ByteNFA, mask_of

    @st.composite
    def build(draw):
        n = draw(st.integers(2, max_states))
        state = st.integers(0, n - 1)
        label = st.sets(st.sampled_from(list(alphabet)), min_size=1).map(mask_of)
        chain = [(i, draw(label), i + 1) for i in range(n - 1)]
        extra = draw(st.lists(st.tuples(state, label, state), max_size=2 * n))
        eps = draw(st.lists(st.tuples(state, state), max_size=2))
        finals = draw(st.frozensets(state)) | {n - 1}
        return ByteNFA(n, 0, frozenset(finals), tuple(chain + extra), tuple(eps))

    return build()


def random_regex_nfas(alphabet: bytes = b"abc", max_leaves: int = 6):
    """Strategy: a :class:`~tractable.fsa.nfa.ByteNFA` built by the combinators from a random
    regular expression (literals, classes, concatenation, union, ``?``, ``*``, ``{lo,hi}``)."""
    from hypothesis import strategies as st

    from tractable.fsa import nfa as N

    leaf = st.one_of(
        st.lists(st.sampled_from(list(alphabet)), min_size=1, max_size=3).map(
            lambda b: N.literal(bytes(b))),
        st.sets(st.sampled_from(list(alphabet)), min_size=1).map(
            lambda s: N.byteset(N.mask_of(s))),
    )

    def extend(children):
        return st.one_of(
            st.lists(children, min_size=2, max_size=3).map(lambda xs: N.concat(*xs)),
            st.lists(children, min_size=2, max_size=3).map(lambda xs: N.union(*xs)),
            children.map(N.optional),
            children.map(N.star),
            st.tuples(children, st.integers(0, 3), st.integers(0, 2)).map(
                lambda t: N.repeat(t[0], t[1], t[1] + t[2])),
        )

    return st.recursive(leaf, extend, max_leaves=max_leaves)


def tiny_automata(max_vocab: int = 6, max_states: int = 6):
    """Strategy: ``(vocab, byte_nfa, TokenAutomaton)`` with a non-empty token language, the byte
    NFA drawn from :func:`random_byte_nfas` or :func:`random_regex_nfas` (draws whose language is
    empty over the vocabulary are rejected)."""
    from hypothesis import reject
    from hypothesis import strategies as st

    from tractable.fsa.automaton import TokenAutomaton
    from tractable.fsa.errors import EmptyLanguageError

    @st.composite
    def build(draw):
        vocab = draw(tiny_vocabularies(max_vocab))
        nfa = draw(st.one_of(random_byte_nfas(max_states), random_regex_nfas()))
        try:
            A = TokenAutomaton.from_byte_nfa(nfa, vocab)
        except EmptyLanguageError:
            reject()
        return vocab, nfa, A

    return build()
