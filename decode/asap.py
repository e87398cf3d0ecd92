"""ASAp: adaptive sampling with approximate expected futures (paper 003, §3, Alg. 1).

Grammar-aligned decoding: the target is P(x | L) = 1[x ∈ L] P(x) / Z, with P the LM with a budget
(an output ends with EOS or after ``max_new_tokens`` tokens, as in :mod:`.cars`) and L the
constraint.  Its exact left-to-right conditionals (paper 003, eq. 2) weight P(a | u) by the
*expected future grammaticality* c(u·a) = P(a complete continuation of u·a is in L | u·a).  GCD
replaces c by the mask bit 1[u·a can still be completed] and is biased.  ASAp keeps, over the
samples S drawn so far, a trie (:class:`~.prefix_trie.PrefixTrie`) of their prefixes and the
upper bound (eq. 3)::

    c̃_S(u) = 1[u can be completed]                   if no sample in S starts with u
    c̃_S(u) = Σ_a P(a | u) · c̃_S(u·a)                 otherwise

and samples each token from (eq. 5)::

    Q̃_S(a | u) = P(a | u) · c̃_S(u·a) / Σ_b P(b | u) · c̃_S(u·b).

At a prefix no sample reached this is GCD (or LCD with ``mode="lcd"``): the constraint's mask is
computed there.  After each sample the masked-out tokens of every prefix on its path are recorded
as dead (c̃ = 0) and c̃ is re-summed from the end of the path to the root (Alg. 1, the
:meth:`~.prefix_trie.PrefixTrie.refresh` rule of the shared trie; CARS fills the same trie by mass
subtraction).  c̃_S ≥ c (Thm. 1) and c̃_S → c as samples accumulate (Thm. 2), so Q̃_S converges to
P(· | L); unlike CARS no sample is rejected, and unlike CARS the samples are only asymptotically
exact.

With a mask that cannot see the whole budget (``mode="lcd"``, or a black-box
:class:`~.constraints.PrefixConstraint` such as the Earley checker, which looks one step ahead), an
attempt may end invalid: out of budget without acceptance, or at a prefix where nothing is
allowed.  It is not returned; the failing token (or prefix) is marked dead, which keeps c̃ an upper
bound and makes the next attempt better informed.

A batch of ``batch_size`` attempts is drawn from the same trie and the trie is updated after the
batch (``batch_size=1`` is Alg. 1 exactly).  :meth:`ASAp.freeze` stops updates;
:meth:`ASAp.save` / :meth:`ASAp.load` keep the trie in a file.  :meth:`ASAp.distribution` gives
the current Q̃_S over complete outputs exactly, by enumeration (small tasks; tests and benches).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..fsa.errors import InvalidArgumentError
from .constraints import Constraint, as_constraint
from .lm import LanguageModel
from .prefix_trie import PrefixTrie, TrieFormatError, TrieNode

__all__ = ["ASAp", "ASApDraw"]

_MODES = ("gcd", "lcd")


@dataclass
class ASApDraw:
    """One valid output.  ``tokens``: generated ids, EOS removed; ``logp``: log P(x) under the LM
    (the EOS step included when it ended with EOS); ``logq``: log Q̃_S(x), the probability that
    the attempt drew x (the sampler's own proposal, for KL(Q̃_S ‖ P) estimates)."""

    tokens: list[int]
    logp: float
    logq: float


class ASAp:
    """ASAp sampler (see the module docstring).

    Args:
        lm: batched LM (:class:`~.lm.LanguageModel`).
        constraint: anything :func:`~.constraints.as_constraint` accepts: a
            :class:`~.constraints.Constraint`, a ``TokenAutomaton``, a regex string, or a checker
            with ``viable(bytes)`` / ``accepts(bytes)`` such as ``tractable.fsa.grammar.Checker``
            (exact Earley; needs ``vocab``).
        prompt_ids: the prompt.
        max_new_tokens: N, the budget (EOS included).
        mode: ``"gcd"`` (budget-aware mask at unexplored prefixes) or ``"lcd"``.
        batch_size: attempts drawn in parallel from the same trie.
        seed: numpy seed (or Generator).
        vocab: a ``TokenVocabulary``, for string / checker constraints.

    Raises:
        InvalidArgumentError: bad ``mode``, ``max_new_tokens`` or ``batch_size``.
    """

    def __init__(self, lm: LanguageModel, constraint, prompt_ids: Sequence[int] = (), *,
                 max_new_tokens: int = 32, mode: str = "gcd", batch_size: int = 1,
                 seed=None, vocab=None) -> None:
        if mode not in _MODES:
            raise InvalidArgumentError(f"mode must be one of {_MODES}: {mode!r}")
        if int(max_new_tokens) < 1 or int(batch_size) < 1:
            raise InvalidArgumentError(
                f"max_new_tokens and batch_size must be >= 1: {max_new_tokens}, {batch_size}")
        self.lm = lm
        self.constraint: Constraint = as_constraint(constraint, vocab)
        self.prompt_ids = [int(t) for t in prompt_ids]
        self.N = int(max_new_tokens)
        self.mode = mode
        self.batch_size = int(batch_size)
        self.g = np.random.default_rng(seed)
        self.V = int(lm.vocab_size)
        self._eos = set(int(e) for e in lm.eos_token_ids)
        self.trie = PrefixTrie(self.V, rule="asap")
        self.stats = {"samples": 0, "attempts": 0, "invalid": 0, "lm_calls": 0, "lm_rows": 0,
                      "mask_rows": 0, "seconds": 0.0}

    # ------------------------------------------------------------------ state

    @property
    def root(self) -> TrieNode:
        return self.trie.root

    @property
    def frozen(self) -> bool:
        return self.trie.frozen

    def freeze(self) -> None:
        """Stop updating the trie: later attempts sample from the current Q̃_S (fixed)."""
        self.trie.freeze()

    def efg(self, prefix: Sequence[int]) -> float:
        """c̃_S(prefix), the current upper bound on its expected future grammaticality (1 off
        the trie when no ancestor marked it dead; the mask is not consulted there)."""
        return self.trie.bound(prefix)

    def _meta(self) -> dict:
        return {"sampler": "asap", "mode": self.mode, "max_new_tokens": self.N,
                "prompt_ids": self.prompt_ids, "vocab_size": self.V,
                "eos_token_ids": sorted(self._eos)}

    def save(self, path: str | os.PathLike) -> None:
        """Write the trie and this sampler's settings to ``path`` (``.safetensors``)."""
        self.trie.save(path, self._meta())

    def load(self, path: str | os.PathLike) -> ASAp:
        """Replace the trie by the one saved at ``path`` (frozen if saved frozen); returns self.

        Raises:
            TrieFileNotFoundError, TrieFormatError: see
                :meth:`~.prefix_trie.PrefixTrie.load`; also when the file was saved by another
                sampler, mode, budget, prompt or vocabulary.
        """
        trie, meta = PrefixTrie.load(path)
        mine = self._meta()
        diff = [k for k in mine if meta.get(k) != mine[k]]
        if diff or trie.rule != "asap":
            raise TrieFormatError(f"{path}: saved for another sampler set-up (rule "
                                  f"{trie.rule!r}; differing: {diff})")
        self.trie = trie
        return self

    # ------------------------------------------------------------------ weights

    def _weights(self, nodes: list[TrieNode | None], probs: np.ndarray, cst, rows: np.ndarray,
                 r: int) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """Q̃_S numerators for ``rows`` (int [k] into the batch): float64 [k, V], and the mask
        rows computed (at unexpanded prefixes), keyed by batch row."""
        need = [int(b) for b in rows if nodes[b] is None or nodes[b].dead is None]
        masks: dict[int, np.ndarray] = {}
        if need:
            m = self.constraint.allowed(cst.select(torch.tensor(need, dtype=torch.long)), r,
                                        self.mode).numpy()
            self.stats["mask_rows"] += len(need)
            masks = {b: m[i] for i, b in enumerate(need)}
        w = self.trie.weights([nodes[b] for b in rows], probs[rows])
        for i, b in enumerate(rows.tolist()):
            if b in masks:
                w[i, ~masks[b]] = 0.0
        return w, masks

    # ------------------------------------------------------------------ sampling

    def _attempt_batch(self, B: int):
        lm, C, N = self.lm, self.constraint, self.N
        calls0, rows0 = lm.calls, lm.rows
        lst = lm.start(self.prompt_ids, B)
        cst = C.start(B)
        nodes: list[TrieNode | None] = [self.root] * B
        paths: list[list[tuple]] = [[] for _ in range(B)]
        seqs: list[list[int]] = [[] for _ in range(B)]
        logp = np.zeros(B)
        logq = np.zeros(B)
        status = np.zeros(B, dtype=np.int8)  # 0 running, 1 valid, -1 invalid
        for t in range(N):
            run = np.nonzero(status == 0)[0]
            if run.size == 0:
                break
            p0 = torch.exp(lm.logprobs(lst).double()).numpy()
            w, masks = self._weights(nodes, p0, cst, run, N - t)
            tokens = np.full(B, lm.eos, dtype=np.int64)
            for i, b in enumerate(run.tolist()):
                s = float(w[i].sum())
                if s <= 0:  # nothing allowed here: a dead end
                    paths[b].append((p0[b], masks.get(b), -1))
                    status[b] = -1
                    continue
                c = np.cumsum(w[i])
                a = min(int(np.searchsorted(c, self.g.random() * c[-1], side="right")),
                        self.V - 1)
                tokens[b] = a
                logq[b] += math.log(w[i, a] / s)
                logp[b] += math.log(p0[b, a])
                paths[b].append((p0[b], masks.get(b), a))
                if a in self._eos:
                    status[b] = 1
                else:
                    seqs[b].append(a)
                    nd = nodes[b]
                    nodes[b] = nd.children.get(a) if nd is not None else None
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
        return seqs, status, paths, logp, logq

    def _update(self, path: list[tuple], valid: bool) -> None:
        """Alg. 1's update for one attempt: record the mask of every new prefix on ``path`` as
        dead tokens, mark the failing token dead if the attempt ended invalid, then re-sum c̃
        from the end of the path to the root."""
        trie = self.trie
        node = self.root
        seen: list[tuple[TrieNode, np.ndarray]] = []
        for i, (p0, mask, a) in enumerate(path):
            if mask is not None and node.dead is None:
                trie.mark_dead(node, ~mask)
            seen.append((node, p0))
            if i == len(path) - 1:
                if not valid and a >= 0:
                    trie.mark_dead(node, [a])  # u·a ended (out of budget) unaccepted
                break
            if node.dead is not None and node.dead[a]:
                break  # a batch-mate's update killed this branch: nothing below to learn
            node = trie.child(node, a, float(p0[a]))
        for nd, p0 in reversed(seen):
            trie.refresh(nd, p0)

    def draw(self, n: int = 1, *, max_attempts: int = 100_000) -> list[ASApDraw]:
        """``n`` valid outputs of ASAp, in the order drawn, with their log P and log Q̃_S.

        Mutates the trie (unless frozen), ``self.g`` and ``self.stats``.

        Raises:
            RuntimeError: ``max_attempts`` attempts gave fewer than ``n`` outputs, or c̃_S(ε) = 0
                (no valid output within the budget).
        """
        t0 = time.perf_counter()
        out: list[ASApDraw] = []
        attempts = 0
        while len(out) < n:
            if self.root.value <= 0.0:
                raise RuntimeError("ASAp: every output is known invalid (no valid output "
                                   "within the budget)")
            if attempts >= max_attempts:
                raise RuntimeError(f"ASAp: only {len(out)} of {n} outputs in {attempts} attempts")
            B = min(self.batch_size, n - len(out))
            seqs, status, paths, logp, logq = self._attempt_batch(B)
            attempts += B
            self.stats["attempts"] += B
            for b in range(B):
                if status[b] == 1:
                    out.append(ASApDraw(seqs[b], float(logp[b]), float(logq[b])))
                    self.stats["samples"] += 1
                else:
                    self.stats["invalid"] += 1
            if not self.frozen:
                for b in range(B):
                    if paths[b]:
                        self._update(paths[b], bool(status[b] == 1))
        self.stats["seconds"] += time.perf_counter() - t0
        return out

    def sample(self, n: int = 1, *, max_attempts: int = 100_000) -> list[list[int]]:
        """``n`` valid outputs (token ids, EOS removed); see :meth:`draw`."""
        return [d.tokens for d in self.draw(n, max_attempts=max_attempts)]

    @property
    def trie_nodes(self) -> int:
        return self.trie.num_nodes

    def cost_per_sample(self) -> dict[str, float]:
        """Attempts, forward passes, LM rows and mask rows per valid output so far."""
        v = max(self.stats["samples"], 1)
        return {k: self.stats[k] / v for k in ("attempts", "lm_calls", "lm_rows", "mask_rows")}

    # ------------------------------------------------------------------ exact Q̃_S

    def distribution(self, *, max_prefixes: int = 200_000) -> dict[tuple, float]:
        """The current sampling distribution of one attempt, Q̃_S, over complete outputs, by
        enumeration (every prefix with Q̃_S > 0, level by level, batched).

        Returns ``{x: Q̃_S(x)}`` (tuples of ids, EOS removed); an attempt that ends invalid is
        keyed ``("invalid",) + x``.  Does not change the trie; the LM and constraint are queried.

        Raises:
            InvalidArgumentError: a level would hold more than ``max_prefixes`` prefixes.
        """
        lm, C, N = self.lm, self.constraint, self.N
        out: dict[tuple, float] = {}
        lst = lm.start(self.prompt_ids, 1)
        cst = C.start(1)
        prefixes: list[tuple[int, ...]] = [()]
        nodes: list[TrieNode | None] = [self.root]
        logq = np.zeros(1)
        saved = dict(self.stats)

        def add(k, v):
            out[k] = out.get(k, 0.0) + v

        for t in range(N):
            p0 = torch.exp(lm.logprobs(lst).double()).numpy()
            w, _ = self._weights(nodes, p0, cst, np.arange(len(prefixes)), N - t)
            par: list[int] = []
            toks: list[int] = []
            lqs: list[float] = []
            for b, pre in enumerate(prefixes):
                s = float(w[b].sum())
                if s <= 0:
                    add(("invalid",) + pre, math.exp(logq[b]))
                    continue
                for v in np.nonzero(w[b] > 0)[0].tolist():
                    lv = logq[b] + math.log(w[b, v] / s)
                    if v in self._eos:
                        add(pre, math.exp(lv))
                    else:
                        par.append(b)
                        toks.append(v)
                        lqs.append(lv)
            if not par:
                break
            if len(par) > max_prefixes:
                raise InvalidArgumentError(
                    f"distribution: level {t + 1} holds {len(par)} prefixes > max_prefixes")
            idx = torch.tensor(par, dtype=torch.long)
            tk = torch.tensor(toks, dtype=torch.long)
            nodes = [nodes[b].children.get(v) if nodes[b] is not None else None
                     for b, v in zip(par, toks)]
            prefixes = [prefixes[b] + (v,) for b, v in zip(par, toks)]
            logq = np.asarray(lqs)
            cst = C.advance(cst.select(idx), tk)
            if t + 1 == N:
                acc = C.is_accepting(cst).numpy()
                for b, pre in enumerate(prefixes):
                    add(pre if acc[b] else ("invalid",) + pre, math.exp(logq[b]))
                break
            lst = lm.advance(lst.select(idx), tk)
        self.stats.update(saved)
        return out
