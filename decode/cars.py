"""Constrained adaptive rejection sampling (CARS, paper 001, Alg. 1) and its special cases.

Exact samples from P(x | L) where P is the LM with a budget (an output ends with EOS or after
``max_new_tokens`` tokens) and L the constraint.  A trie holds a set W of *invalid prefixes*; each
trie node u stores p_u = P(complete sequence extending u avoids W | u), and attempts are drawn
from R^W(a | u) = P(a | u) p_{ua} / p_u.  An attempt that reaches an invalid prefix is rejected;
afterwards the update rule adds prefixes to W and subtracts their mass up the trie
(p_parent -= P(child | parent) · Δp_child).  Any accepted attempt is an exact sample of P(· | L)
whatever W is (Thm. 1), so W is only updated *between* attempts (a batch of attempts shares one W).

Update rules (``update=``):

* ``"cars"`` — the shortest invalid prefix of the attempt and, at every prefix the attempt visited,
  every invalid next token (from the constraint's full mask, budget-aware);
* ``"ars"``  — only the attempt's shortest invalid prefix;
* ``"rsft"`` — only invalid *first* tokens (the root's mask);
* ``"rs"``   — nothing (plain rejection sampling).

A node stores the invalid next tokens it knows as a bool mask [V] (not one child per token), valid
children with p < 1 as nodes.  :meth:`CARS.freeze` stops all updates.  Costs: ``stats`` reports
attempts, forward passes and LM rows (token positions computed) per valid sample.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..fsa.errors import InvalidArgumentError
from .constraints import Constraint, as_constraint
from .lm import LanguageModel

__all__ = ["CARS", "UPDATE_RULES"]

UPDATE_RULES = ("cars", "ars", "rsft", "rs")


@dataclass(eq=False)
class _Node:
    parent: _Node | None
    prob: float  # P(edge into this node | parent prefix)
    p: float = 1.0  # p_u
    dead: np.ndarray | None = None  # bool [V]: next tokens known invalid
    children: dict[int, _Node] = field(default_factory=dict)


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
        self.root = _Node(None, 1.0)
        self.frozen = False
        self.V = lm.vocab_size
        self.stats = {"attempts": 0, "valid": 0, "lm_calls": 0, "lm_rows": 0, "seconds": 0.0,
                      "trie_nodes": 1}

    def freeze(self) -> None:
        """Stop updating W: later attempts use the trie as it is (still exact)."""
        self.frozen = True

    @property
    def acceptance_bound(self) -> float:
        """p_ε: probability that an attempt avoids W (an upper bound on the acceptance rate)."""
        return self.root.p

    # ------------------------------------------------------------------ sampling

    def _attempt_batch(self):
        B = self.batch_size
        lm, C, N = self.lm, self.constraint, self.N
        need_mask = self.update == "cars"
        calls0, rows0 = lm.calls, lm.rows
        lst = lm.start(self.prompt_ids, B)
        cst = C.start(B)
        nodes: list[_Node | None] = [self.root] * B
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
                        w[a] *= ch.p
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

    def _subtract(self, node: _Node, delta: float) -> None:
        """p_node -= delta, propagated to the root."""
        while node is not None and delta > 0:
            node.p = max(node.p - delta, 0.0)
            delta *= node.prob
            node = node.parent

    def _child(self, node: _Node, a: int, prob: float) -> _Node:
        ch = node.children.get(a)
        if ch is None:
            ch = node.children[a] = _Node(node, prob)
            self.stats["trie_nodes"] += 1
        return ch

    def _kill(self, node: _Node, a: int, prob: float) -> None:
        """Add prefix ``node·a`` to W."""
        if node.dead is None:
            node.dead = np.zeros(self.V, dtype=bool)
        if node.dead[a]:
            return
        ch = node.children.pop(a, None)
        old = 1.0 if ch is None else ch.p
        node.dead[a] = True
        self._subtract(node, prob * old)

    def _update(self, path: list[tuple], valid: bool, root_mask) -> None:
        if self.frozen or self.update == "rs":
            return
        if self.update == "rsft":
            if valid or root_mask is None:
                return
            p0 = path[0][1]
            node = self.root
            bad = ~root_mask & (p0 > 0)
            if node.dead is None:
                node.dead = np.zeros(self.V, dtype=bool)
            new = bad & ~node.dead
            for a in np.nonzero(new & np.isin(np.arange(self.V), list(node.children)))[0]:
                self._kill(node, int(a), float(p0[a]))
                new[a] = False
            node.dead |= new
            self._subtract(node, float(p0[new].sum()))
            return
        # walk the path, materializing nodes (the path's nodes may be None off-trie)
        node = self.root
        for i, (_, p0, mask, a, _r) in enumerate(path):
            last = i == len(path) - 1
            if self.update == "cars" and mask is not None:
                if node.dead is None:
                    node.dead = np.zeros(self.V, dtype=bool)
                new = ~mask & ~node.dead & (p0 > 0)
                for c in [c for c in node.children if new[c]]:
                    self._kill(node, c, float(p0[c]))
                    new[c] = False
                if new.any():
                    node.dead |= new
                    self._subtract(node, float(p0[new].sum()))
            if last and not valid:
                self._kill(node, int(a), float(p0[a]))  # the shortest invalid prefix
                return
            if last:
                return
            node = self._child(node, int(a), float(p0[a]))

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
            if self.root.p <= 0.0:
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

