"""Brute-force references for the HMM and for P-GCD (HMM × automaton), for tiny cases.

* :func:`hmm_joint_enumeration` — ``p_hmm(x)`` by summing over all ``H^T`` hidden paths
  (App. B's joint, no recursion).
* :func:`hmm_prefix_prob` — ``p_hmm(x_{1:T})`` by a plain numpy forward loop (used to weight the
  enumerated strings; itself checked against :func:`hmm_joint_enumeration` in the tests).
* :func:`count_accepting_paths` — number of accepting paths of a token sequence (Thm. 4.3's
  weight), by a dynamic program over the edge list (no tensors of the automaton code).
* :func:`enumerate_complete_sequences` — every complete sequence within budget ``n`` under the
  EOS convention of :mod:`tractable.hmm.product` (``k ≤ n`` text tokens, then one EOS if
  ``k < n``), with its HMM probability and path weight.
* :func:`brute_force_next_token_probs` / :func:`brute_force_constraint_weight` — P-GCD's
  next-token distribution and potential factor from that list.
* :func:`algorithm1_literal` — paper 002's Algorithm 1 written literally with dense matrices
  (``A_f = T_in T_out`` [E'×E'], ``B_f`` [E'×V], eq. 5 as ``A_h X A_f^T``) on the EOS-augmented
  automaton (state ⊤, EOS edges from accepting states to ⊤, a wildcard self-loop on ⊤) — a
  reference that scales to real vocabularies when E is small.
* :func:`automaton_from_edges` — a :class:`~tractable.fsa.automaton.TokenAutomaton` from an
  explicit edge list (to build NFAs with several accepting paths per string).
* :func:`lm_shaped_hmm` — a 4-state HMM over a real vocabulary whose emissions are an LM's
  mean next-token rows on an enumerated prefix table (a stand-in for a distilled HMM on
  enumerable real-LM tasks: ``tests/decode/test_smc_real.py``, ``bench/smc_fig2_bench.py``).

Everything here is slow on purpose and meant for H ≤ 4, V ≤ 6, n ≤ 6.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch

__all__ = [
    "lm_shaped_hmm",
    "hmm_joint_enumeration",
    "hmm_prefix_prob",
    "count_accepting_paths",
    "enumerate_complete_sequences",
    "brute_force_next_token_probs",
    "brute_force_constraint_weight",
    "automaton_from_edges",
    "algorithm1_literal",
]


def _params(hmm) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (hmm.initial.double().cpu().numpy(), hmm.transition.double().cpu().numpy(),
            hmm.emission.double().cpu().numpy())


def hmm_joint_enumeration(hmm, seq) -> float:
    """``p_hmm(x_{1:T}) = Σ_{z_{1:T}} π(z_1) B(z_1, x_1) Π_t A(z_{t-1}, z_t) B(z_t, x_t)``,
    summed over all ``H^T`` hidden paths."""
    pi, A, B = _params(hmm)
    H = pi.shape[0]
    seq = [int(x) for x in seq]
    if not seq:
        return 1.0
    total = 0.0
    for z in itertools.product(range(H), repeat=len(seq)):
        p = pi[z[0]] * B[z[0], seq[0]]
        for t in range(1, len(seq)):
            p *= A[z[t - 1], z[t]] * B[z[t], seq[t]]
        total += p
    return float(total)


def hmm_prefix_prob(hmm, seq) -> float:
    """``p_hmm(x_{1:T})`` (marginal over the rest) by an unscaled numpy forward loop."""
    pi, A, B = _params(hmm)
    a = pi.copy()
    p = 1.0
    for t, x in enumerate(int(v) for v in seq):
        if t:
            a = a @ A
        a = a * B[:, x]
    return float(a.sum()) if len(seq) else p


def _edges(automaton) -> list[tuple[int, int, frozenset[int]]]:
    from tractable.fsa.automaton import unpack_bits

    V = automaton.vocab_size
    rows = unpack_bits(automaton.labels.cpu(), V).numpy()
    out = []
    for s, d, lab in zip(automaton.edge_src.tolist(), automaton.edge_dst.tolist(),
                         automaton.edge_label.tolist()):
        out.append((int(s), int(d), frozenset(np.nonzero(rows[lab])[0].tolist())))
    return out


def count_accepting_paths(automaton, seq, _edges_cache: list | None = None) -> int:
    """Number of state paths ``s_0 → … → s_T`` reading the text tokens ``seq`` and ending in an
    accepting state (paths, not edges: one edge per state pair, so the two coincide)."""
    edges = _edges_cache if _edges_cache is not None else _edges(automaton)
    final = automaton.final.cpu().numpy()
    cnt = {0: 1}
    for x in seq:
        nxt: dict[int, int] = {}
        for s, d, lab in edges:
            if s in cnt and int(x) in lab:
                nxt[d] = nxt.get(d, 0) + cnt[s]
        cnt = nxt
        if not cnt:
            return 0
    return int(sum(c for s, c in cnt.items() if final[s]))


def enumerate_complete_sequences(
    hmm, automaton, n: int
) -> list[tuple[tuple[int, ...], float, int]]:
    """All complete sequences ``y`` within budget ``n`` with a positive path weight, as
    ``(y, p_hmm(y as a prefix), #accepting paths of y's text tokens)``.

    ``y`` is ``x_{1:k}`` followed by one EOS id (each EOS id separately) when ``k < n``, or
    ``x_{1:n}`` with no EOS; ``x`` ranges over all non-EOS ids (``V^k`` strings per length)."""
    edges = _edges(automaton)
    eos = [int(e) for e in automaton.eos_token_ids]
    text = [v for v in range(automaton.vocab_size) if v not in eos]
    out = []
    for k in range(n + 1):
        for x in itertools.product(text, repeat=k):
            w = count_accepting_paths(automaton, x, edges)
            if w == 0:
                continue
            if k == n:
                out.append((tuple(x), hmm_prefix_prob(hmm, x), w))
            else:
                for e in eos:
                    y = tuple(x) + (e,)
                    out.append((y, hmm_prefix_prob(hmm, y), w))
    return out


def brute_force_next_token_probs(complete: list, prefix, vocab_size: int) -> np.ndarray:
    """float64 [V]: ``Σ_{y ⊒ prefix·v} p(y) w(y) / Σ_{y ⊒ prefix} p(y) w(y)`` over the list from
    :func:`enumerate_complete_sequences` (all zeros if no complete sequence extends ``prefix``)."""
    prefix = tuple(int(x) for x in prefix)
    k = len(prefix)
    mass = np.zeros(vocab_size)
    for y, p, w in complete:
        if len(y) > k and y[:k] == prefix:
            mass[y[k]] += p * w
    tot = mass.sum()
    return mass / tot if tot > 0 else mass


def brute_force_constraint_weight(hmm, complete: list, prefix) -> float:
    """``p_prod(x_{1:t}) / p_hmm(x_{1:t})`` with ``p_prod`` normalized over ``complete``
    (= ``p_hmm(C | x_{1:t}) / p_hmm(C)`` with C weighted by path counts)."""
    prefix = tuple(int(x) for x in prefix)
    k = len(prefix)
    Z = sum(p * w for _, p, w in complete)
    num = sum(p * w for y, p, w in complete if y[:k] == prefix)
    return num / Z / hmm_prefix_prob(hmm, prefix)


def automaton_from_edges(
    num_states: int, edges: list[tuple[int, int, Any]], finals, vocab_size: int,
    eos_token_ids=(), fingerprint: str = "",
):
    """A :class:`~tractable.fsa.automaton.TokenAutomaton` with the given edges
    ``(src, dst, iterable of token ids)`` (parallel edges between the same pair are merged by
    union, as the class requires), state 0 initial, ``finals`` accepting.  No trimming."""
    from tractable.fsa.automaton import TokenAutomaton, pack_bits

    merged: dict[tuple[int, int], set[int]] = {}
    for s, d, toks in edges:
        merged.setdefault((int(s), int(d)), set()).update(int(t) for t in toks)
    keys = sorted(k for k, v in merged.items() if v)
    label_rows: list[frozenset[int]] = []
    label_of: list[int] = []
    for k in keys:
        fs = frozenset(merged[k])
        if fs not in label_rows:
            label_rows.append(fs)
        label_of.append(label_rows.index(fs))
    dense = torch.zeros((max(1, len(label_rows)), vocab_size), dtype=torch.bool)
    for i, fs in enumerate(label_rows):
        dense[i, list(fs)] = True
    final = torch.zeros(num_states, dtype=torch.bool)
    final[list(finals)] = True
    initial = torch.zeros(num_states, dtype=torch.bool)
    initial[0] = True
    return TokenAutomaton(
        num_states=num_states, vocab_size=vocab_size,
        edge_src=torch.tensor([k[0] for k in keys], dtype=torch.long),
        edge_dst=torch.tensor([k[1] for k in keys], dtype=torch.long),
        edge_label=torch.tensor(label_of, dtype=torch.long),
        labels=pack_bits(dense), initial=initial, final=final, fingerprint=fingerprint,
        eos_token_ids=tuple(int(e) for e in eos_token_ids),
    )


def algorithm1_literal(hmm, automaton, n: int, prefix) -> np.ndarray:
    """float64 [V]: ``p_prod(x_t = v | x_<t = prefix)`` by Algorithm 1 with dense matrices on the
    EOS-augmented automaton (see the module docstring), normalized over ``v``.

    Cost ``O(n·(H²E' + HE'²) + H·E'·V)``; meant for automata with tens of edges."""
    from tractable.fsa.automaton import unpack_bits

    pi, Ah, Bh = _params(hmm)
    H, V = Bh.shape
    S = automaton.num_states
    rows = unpack_bits(automaton.labels.cpu(), V).numpy().astype(np.float64)
    src = automaton.edge_src.tolist()
    dst = automaton.edge_dst.tolist()
    lab = [rows[i] for i in automaton.edge_label.tolist()]
    final = automaton.final.cpu().numpy()
    eos = [int(e) for e in automaton.eos_token_ids]
    top = S
    if eos:
        eos_row = np.zeros(V)
        eos_row[eos] = 1
        for s in np.nonzero(final)[0].tolist():
            src.append(s)
            dst.append(top)
            lab.append(eos_row)
        src.append(top)
        dst.append(top)
        lab.append(np.ones(V))
    E = len(src)
    Bf = np.stack(lab)  # [E, V]
    T_out = np.zeros((S + 1, E))
    T_in = np.zeros((E, S + 1))
    T_out[src, np.arange(E)] = 1
    T_in[np.arange(E), dst] = 1
    Af = T_in @ T_out
    acc = np.append(final, bool(eos)).astype(np.float64)
    f = T_in @ acc
    pi_state = np.zeros(S + 1)
    pi_state[0] = 1
    pi_f = T_out.T @ pi_state
    # Step 1: backward messages β_k [H, E], k = 1..n
    inp = Bh @ Bf.T
    beta = {n: np.outer(np.ones(H), f)}
    for k in range(n, 1, -1):
        beta[k - 1] = Ah @ (inp * beta[k]) @ Af.T  # (A_f (A_h (input ∘ β_k))^T)^T, eq. 5
    # Step 2: forward prefix marginal α_t [H, E]
    alpha = np.outer(pi, pi_f)
    for x in prefix:
        x = int(x)
        alpha = Ah.T @ (alpha * np.outer(Bh[:, x], Bf[:, x])) @ Af
    t = len(prefix) + 1
    ab = alpha * beta[t]
    mass = np.einsum("ev,hv,he->v", Bf, Bh, ab)  # diag(B_f^T (B_h^T (α_t ∘ β_t)))
    return mass / mass.sum()


def lm_shaped_hmm(table: dict, V: int, fingerprint: str, eps: float = 1e-3):
    """An HMM shaped like a distilled one, from an LM's prefix table (``{prefix tuple:
    log-probability row float [V]}``, e.g. :class:`~.lm_tables.RecordingLM`'s ``table``).

    H = 4, float64: state 0 emits a random Dirichlet(1) row (general text), states 1, 2, 3 the
    mean of the LM's next-token rows after 1, 2, >= 3 generated tokens (the previous state's row
    where the table has none); every row mixed with ``eps``-uniform (positive emissions: the
    P-GCD product's support is the GCD mask).  π ≈ state 0, A ≈ 0 → 1 → 2 → 3 → 3."""
    from ..hmm.model import HMM

    g = torch.Generator().manual_seed(0)
    B = torch.empty(4, V, dtype=torch.float64)
    B[0] = torch.empty(V, dtype=torch.float64).exponential_(generator=g)
    for k in (1, 2, 3):
        rows = [r.double().exp() for p, r in table.items() if min(len(p), 3) == k]
        B[k] = torch.stack(rows).mean(0) if rows else B[k - 1]
    B = B / B.sum(1, keepdim=True)
    B = (1 - eps) * B + eps / V
    pi = 0.97 * torch.tensor([1.0, 0, 0, 0], dtype=torch.float64) + 0.01
    A = torch.tensor([[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 1]],
                     dtype=torch.float64)
    A = 0.98 * A + 0.02 / 4
    return HMM(pi, A, B, fingerprint)
