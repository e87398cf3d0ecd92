"""Constrained adaptive rejection sampling (CARS, paper 001, Alg. 1) and its special cases.

Exact samples from P(x | L) where P is the LM with a budget (an output ends with EOS or after
``max_new_tokens`` tokens) and L the constraint.  A trie holds a set W of *invalid prefixes*; each
trie node u stores p_u = P(complete sequence extending u avoids W | u), and attempts are drawn
from R^W(a | u) = P(a | u) p_{ua} / p_u.  An attempt that reaches an invalid prefix is rejected;
afterwards the update rule adds prefixes to W and recomputes p_u on the attempt's path (see
below).  Any accepted attempt is an exact sample of P(· | L) whatever W is (Thm. 1), so W is only
updated *between* attempts (a batch of attempts shares one W).

Update rules (``update=``):

* ``"cars"`` — the shortest invalid prefix of the attempt and, at every prefix the attempt visited,
  every invalid next token (from the constraint's full mask, budget-aware);
* ``"ars"``  — only the attempt's shortest invalid prefix;
* ``"rsft"`` — only invalid *first* tokens (the root's mask);
* ``"rs"``   — nothing (plain rejection sampling).

The trie is :class:`~.prefix_trie.PrefixTrie` (shared with ASAp, :mod:`.asap`): a node stores the
invalid next tokens it knows as a bool mask [V] (not one child per token), valid children as
nodes, and ``value`` = p_u.  After an attempt's W members are marked, p_u is recomputed on its path
from the deepest node up by normalized re-summation (:meth:`~.prefix_trie.PrefixTrie.resum`):
p_u = Σ_a P(a | u) · [ua ∉ W] · p_{ua} / Σ_a P(a | u) over u's full next-token row (unexplored
children count 1).  Paper 001 writes the update as mass subtraction (p_parent -= P(child |
parent) · Δp_child, kept as :meth:`~.prefix_trie.PrefixTrie.kill`); the two agree in exact
arithmetic on rows summing to 1, but subtraction from 1 cancels in float64: valid mass below
~1e-16 of the total was lost (Z = 1e-20 raised "every sequence is known invalid"), and float32 LM
rows summing to 1 ± 1e-7 left that much spurious mass (Z = 2e-14: wrong samples).  Re-summation
adds non-negative terms only, so p_u keeps full relative precision down to float64's underflow
(~1e-300).  :meth:`CARS.freeze` stops all updates; :meth:`CARS.save` / :meth:`CARS.load` keep W
in a file.  Costs: ``stats`` reports attempts, forward passes and LM rows (token positions
computed) per valid sample.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np
import torch

from ..fsa.errors import InvalidArgumentError
from .constraints import Constraint, as_constraint
from .lm import LanguageModel
from .prefix_trie import PrefixTrie, TrieFormatError, TrieNode

__all__ = ["CARS", "UPDATE_RULES"]

UPDATE_RULES = ("cars", "ars", "rsft", "rs")


class CARS:
    """CARS sampler (see the module docstring).

    Args:
        lm: batched LM; constraint: a :class:`~.constraints.Constraint` (or TokenAutomaton…).
        prompt_ids: the prompt.
        max_new_tokens: N.
        update: ``"cars" | "ars" | "rsft" | "rs"``.
        batch_size: attempts drawn in parallel from the same W.
        seed: numpy seed.
    """

    def __init__(self, lm: LanguageModel, constraint, prompt_ids: Sequence[int] = (), *,
                 max_new_tokens: int = 32, update: str = "cars", batch_size: int = 1,
                 seed=None, vocab=None) -> None:
        if update not in UPDATE_RULES:
            raise InvalidArgumentError(f"update must be one of {UPDATE_RULES}: {update!r}")
        self.lm = lm
        self.constraint: Constraint = as_constraint(constraint, vocab)
        self.prompt_ids = list(prompt_ids)
        self.N = int(max_new_tokens)
        self.update = update
        self.batch_size = int(batch_size)
        self.g = np.random.default_rng(seed)
        self.V = lm.vocab_size
        self.trie = PrefixTrie(self.V, rule=f"cars:{update}")
        self.stats = {"attempts": 0, "valid": 0, "lm_calls": 0, "lm_rows": 0, "seconds": 0.0,
                      "trie_nodes": 1}

    @property
    def root(self) -> TrieNode:
        return self.trie.root

    @property
    def frozen(self) -> bool:
        return self.trie.frozen

    def freeze(self) -> None:
        """Stop updating W: later attempts use the trie as it is (still exact)."""
        self.trie.freeze()

    @property
    def acceptance_bound(self) -> float:
        """p_ε: probability that an attempt avoids W (an upper bound on the acceptance rate)."""
        return self.root.value

    def _meta(self) -> dict:
        return {"sampler": "cars", "update": self.update, "max_new_tokens": self.N,
                "prompt_ids": self.prompt_ids, "vocab_size": self.V,
                "eos_token_ids": list(self.lm.eos_token_ids)}

    def save(self, path: str | os.PathLike) -> None:
        """Write W (the trie) and this sampler's settings to ``path`` (``.safetensors``)."""
        self.trie.save(path, self._meta())

    def load(self, path: str | os.PathLike) -> CARS:
        """Replace W by the trie saved at ``path`` (frozen if it was saved frozen); returns self.

        Raises:
            TrieFileNotFoundError, TrieFormatError: see :meth:`PrefixTrie.load`; also when the
                file was saved by another sampler / update rule, budget, prompt or vocabulary.
        """
        trie, meta = PrefixTrie.load(path)
        mine = self._meta()
        diff = [k for k in mine if meta.get(k) != mine[k]]
        if diff:
            raise TrieFormatError(f"{path}: saved for another CARS set-up ({', '.join(diff)} "
                                  f"differ: file {[meta.get(k) for k in diff]}, "
                                  f"here {[mine[k] for k in diff]})")
        self.trie = trie
        self.stats["trie_nodes"] = trie.num_nodes
        return self

    # ------------------------------------------------------------------ sampling

    def _attempt_batch(self):
        B = self.batch_size
        lm, C, N = self.lm, self.constraint, self.N
        need_mask = self.update == "cars"
        calls0, rows0 = lm.calls, lm.rows
        lst = lm.start(self.prompt_ids, B)
        cst = C.start(B)
        nodes: list[TrieNode | None] = [self.root] * B
        paths: list[list[tuple]] = [[] for _ in range(B)]
        seqs: list[list[int]] = [[] for _ in range(B)]
        status = np.zeros(B, dtype=np.int8)  # 0 running, 1 valid, -1 invalid
        root_mask = None
        eos = set(lm.eos_token_ids)
        for t in range(N):
            run = np.nonzero(status == 0)[0]
            if run.size == 0:
                break
            r = N - t
            logp = lm.logprobs(lst).double()
            p0 = torch.exp(logp).numpy()
            mask = C.allowed(cst, r, "gcd").numpy() if (need_mask or
                                                         (self.update == "rsft" and t == 0)) \
                else None
            if self.update == "rsft" and t == 0:
                root_mask = mask[0].copy()
            tokens = np.full(B, lm.eos, dtype=np.int64)
            for b in run.tolist():
                w = p0[b].copy()
                nd = nodes[b]
                if nd is not None:
                    if nd.dead is not None:
                        w[nd.dead] = 0.0
                    for a, ch in nd.children.items():
                        w[a] *= ch.value
                s = w.sum()
                if s <= 0:
                    status[b] = -1
                    continue
                c = np.cumsum(w)
                a = min(int(np.searchsorted(c, self.g.random() * c[-1], side="right")), w.size - 1)
                tokens[b] = a
                paths[b].append((nd, p0[b], None if mask is None else mask[b], a, r))
            # validity of the drawn tokens
            rows = torch.from_numpy(run)
            if mask is not None:
                ok = mask[run, tokens[run]]
            else:
                ok = C.check(cst, rows, torch.from_numpy(tokens[run]), r, "gcd").numpy()
            for j, b in enumerate(run.tolist()):
                if status[b] != 0:
                    continue
                a = int(tokens[b])
                if not ok[j]:
                    status[b] = -1
                    continue
                nd = nodes[b]
                nodes[b] = nd.children.get(a) if nd is not None else None
                if a in eos:
                    status[b] = 1
                else:
                    seqs[b].append(a)
            cst = C.advance(cst, torch.from_numpy(tokens))
            if t + 1 == N:
                acc = C.is_accepting(cst).numpy()
                for b in np.nonzero(status == 0)[0].tolist():
                    status[b] = 1 if acc[b] else -1
                break
            if (status == 0).any():
                lst = lm.advance(lst, torch.from_numpy(tokens))
        self.stats["lm_calls"] += lm.calls - calls0
        self.stats["lm_rows"] += lm.rows - rows0
        return seqs, status, paths, root_mask

    def _child(self, node: TrieNode, a: int, prob: float) -> TrieNode:
        n0 = self.trie.num_created
        ch = self.trie.child(node, a, prob)
        self.stats["trie_nodes"] += self.trie.num_created - n0
        return ch

    def _update(self, path: list[tuple], valid: bool, root_mask) -> None:
        """Add this attempt's invalid prefixes to W (``dead`` bits, per the update rule), then
        recompute p_u on the attempt's path from the deepest node up by re-summation
        (:meth:`PrefixTrie.resum`: p_u = Σ_a P(a | u) p_{ua} over u's full row, normalized, dead
        tokens 0, unexplored ones 1).  Only the path's p_u change: every new W member hangs
        below a node of the path, and the attempt computed every row on it."""
        if self.frozen or self.update == "rs":
            return
        trie = self.trie
        if self.update == "rsft":
            if valid or root_mask is None:
                return
            p0 = path[0][1]
            dead = np.zeros(self.V, dtype=bool) if self.root.dead is None else self.root.dead
            new = ~root_mask & (p0 > 0) & ~dead
            if new.any():
                trie.mark_dead(self.root, new)
                trie.resum(self.root, p0)
            return
        # walk the path, materializing nodes (the path's nodes may be None off-trie)
        node = self.root
        seen: list[tuple[TrieNode, np.ndarray]] = []
        for i, (_, p0, mask, a, _r) in enumerate(path):
            last = i == len(path) - 1
            seen.append((node, p0))
            if self.update == "cars" and mask is not None:
                dead = np.zeros(self.V, dtype=bool) if node.dead is None else node.dead
                new = ~mask & ~dead & (p0 > 0)
                if new.any():
                    trie.mark_dead(node, new)
            if last:
                if not valid:
                    trie.mark_dead(node, [int(a)])  # the shortest invalid prefix
                break
            node = self._child(node, int(a), float(p0[a]))
        for nd, p0 in reversed(seen):
            trie.resum(nd, p0)

    def sample(self, n: int = 1, *, max_attempts: int = 100_000) -> list[list[int]]:
        """``n`` exact samples of P(· | L) (token ids, EOS removed), in the order drawn.

        Raises:
            RuntimeError: ``max_attempts`` attempts gave fewer than ``n`` samples, or W covers
                every sequence (the constraint is unsatisfiable within the budget).
        """
        t0 = time.perf_counter()
        out: list[list[int]] = []
        attempts = 0
        while len(out) < n:
            if self.root.value <= 0.0:
                raise RuntimeError("CARS: every sequence is known invalid (no valid output "
                                   "within the budget)")
            if attempts >= max_attempts:
                raise RuntimeError(f"CARS: only {len(out)} of {n} samples in {attempts} attempts")
            seqs, status, paths, root_mask = self._attempt_batch()
            attempts += len(seqs)
            self.stats["attempts"] += len(seqs)
            for b in range(len(seqs)):
                if status[b] == 1:
                    if len(out) < n:
                        out.append(seqs[b])
                    self.stats["valid"] += 1
            for b in range(len(seqs)):
                if paths[b]:
                    self._update(paths[b], bool(status[b] == 1), root_mask)
        self.stats["seconds"] += time.perf_counter() - t0
        return out

    def cost_per_sample(self) -> dict[str, float]:
        """Attempts, forward passes and LM rows per valid sample so far."""
        v = max(self.stats["valid"], 1)
        return {k: self.stats[k] / v for k in ("attempts", "lm_calls", "lm_rows")} | {
            "acceptance_bound": self.acceptance_bound}

