"""A trie of sampled prefixes holding an upper bound on each prefix's mass of valid futures.

Shared by CARS (paper 001, :mod:`.cars`) and ASAp (paper 003, :mod:`.asap`): one structure,
several update rules.  A node u (a prefix of generated token ids) stores

* ``prob`` — P(last token of u | parent prefix), the LM's next-token probability of its edge;
* ``value`` — an upper bound on the mass of u's futures that are valid: CARS's
  p_u = P(a complete sequence extending u avoids W | u) (paper 001, §3), ASAp's expected future
  grammaticality c̃_S(u) (paper 003, eq. 3);
* ``dead`` — bool [V] (or ``None``: nothing known), the next tokens known to lead only to
  invalid outputs (CARS: prefixes in W; ASAp: tokens the GCD/LCD mask removed at u);
* ``children`` — {token id: node} for the continuations that were sampled.

A token with neither a dead bit nor a child counts with value 1 (nothing is known about it).  The
sampling weight of next token ``a`` after u is therefore::

    w(a | u) = P(a | u) · [a not dead] · (children[a].value if a is a child else 1)

(:meth:`PrefixTrie.weights`, batched over rows).  The update rules:

* **mass subtraction** (paper 001 Alg. 1 as written): :meth:`PrefixTrie.kill` marks ``u·a`` dead
  and subtracts its remaining mass ``P(a | u) · value(u·a)`` from u and, scaled by each edge's
  ``prob``, from every ancestor (p_parent -= P(child | parent) · Δp_child).  Kept as the paper's
  reference rule; CARS no longer uses it: in float64 ``1 - (1 - 1e-5)`` keeps only ~11 digits and
  any valid mass below ~1e-16 of the total cancels to 0 (or to rounding noise), and an LM row
  whose probabilities sum to 1 ± 1e-7 (float32 log-softmax) leaves that much spurious mass;
* **re-summation along a path** (ASAp, paper 003 Alg. 1): :meth:`PrefixTrie.refresh` recomputes
  ``value(u) = Σ_a P(a | u) · [a not dead] · value(u·a)`` from u's full next-token row, from the
  end of a sampled path back to the root.  Every term is non-negative, so small values (a prefix
  whose only valid completion has probability 1e-8) keep full relative precision, which repeated
  subtraction from 1 would lose;
* **normalized re-summation** (CARS, paper 001's p_u computed without cancellation):
  :meth:`PrefixTrie.resum` is :meth:`refresh` over the row *normalized to sum 1*, with the
  current row's ``P(a | u)`` for children too, so ``value(u)`` is exactly the quantity CARS's
  proposal R^W(a | u) = P(a | u) p_{ua} / p_u needs for its telescoping (Thm. 1): an untouched
  node's value is exactly 1.0, and values stay exact to relative rounding error down to float64's
  underflow (~1e-300), whatever the row sum's float32 error.

Both keep ``value`` an upper bound on the true valid mass as long as only truly invalid tokens are
marked dead.  :meth:`PrefixTrie.freeze` makes the trie read-only (later mutation raises
:class:`TrieFrozenError`).  :meth:`PrefixTrie.save` / :meth:`PrefixTrie.load` write and read a
``.safetensors`` file (format name, version, vocabulary size, rule, user metadata and a SHA-256
checksum; no pickle).  Nodes are stored in breadth-first order as parallel arrays plus the dead
masks in CSR form (``dead_ptr`` int64 [n+1], ``dead_idx`` int64 [nnz]); ``has_dead`` uint8 [n]
says per node whether ``dead_idx`` lists its dead ids (1), the ids *not* dead (2: a GCD mask
kills most of a 49k vocabulary) or nothing (0: no mask).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..fsa.errors import InvalidArgumentError, TractableError

__all__ = [
    "TrieNode",
    "PrefixTrie",
    "TrieFormatError",
    "TrieFileNotFoundError",
    "TrieFrozenError",
    "TRIE_FORMAT_VERSION",
]

#: Version of the file layout written by :meth:`PrefixTrie.save`.
TRIE_FORMAT_VERSION = 1
_FORMAT_NAME = "tractable.prefix_trie"


class TrieFormatError(TractableError, ValueError):
    """A saved trie file is corrupt, of an unknown format version, or of another sampler."""


class TrieFileNotFoundError(TractableError, FileNotFoundError):
    """:meth:`PrefixTrie.load` was given a path where no file is."""


class TrieFrozenError(TractableError, RuntimeError):
    """A frozen :class:`PrefixTrie` was asked to change."""


@dataclass(eq=False)
class TrieNode:
    """One prefix (see the module docstring).  ``token`` is the edge's token id (-1 at the root).
    ``dead`` is bool [V] or ``None``; ``children`` maps token ids to nodes."""

    parent: TrieNode | None
    prob: float
    token: int = -1
    value: float = 1.0
    dead: np.ndarray | None = None
    children: dict[int, TrieNode] = field(default_factory=dict)

    @property
    def expanded(self) -> bool:
        """A dead mask was recorded here (ASAp: the node's mask is known)."""
        return self.dead is not None


class PrefixTrie:
    """The trie (see the module docstring).

    Args:
        vocab_size: V, the width of LM rows and dead masks.
        rule: a label of the update rule that filled it (``"cars:<update>"``, ``"asap"``),
            written to files and checked on load.
    """

    def __init__(self, vocab_size: int, *, rule: str = "") -> None:
        if int(vocab_size) < 1:
            raise InvalidArgumentError(f"vocab_size must be >= 1: {vocab_size}")
        self.V = int(vocab_size)
        self.rule = str(rule)
        self.root = TrieNode(None, 1.0)
        self.num_nodes = 1  # nodes in the trie now
        self.num_created = 1  # nodes ever created (dropped subtrees included)
        self.frozen = False

    # ------------------------------------------------------------------ structure

    def freeze(self) -> None:
        """Make the trie read-only: :meth:`child`, :meth:`kill`, :meth:`kill_tokens`,
        :meth:`mark_dead`, :meth:`refresh` and :meth:`resum` raise :class:`TrieFrozenError` from
        now on."""
        self.frozen = True

    def _check_mutable(self) -> None:
        if self.frozen:
            raise TrieFrozenError("the prefix trie is frozen; it cannot be updated")

    def child(self, node: TrieNode, a: int, prob: float) -> TrieNode:
        """The child ``node·a``, created (value 1) if absent.  Mutates ``node.children``."""
        ch = node.children.get(a)
        if ch is None:
            self._check_mutable()
            ch = node.children[a] = TrieNode(node, prob, int(a))
            self.num_nodes += 1
            self.num_created += 1
        return ch

    def _dead(self, node: TrieNode) -> np.ndarray:
        if node.dead is None:
            node.dead = np.zeros(self.V, dtype=bool)
        return node.dead

    # ------------------------------------------------------------------ mass subtraction

    def subtract(self, node: TrieNode | None, delta: float) -> None:
        """``value(node) -= delta``, then ``delta *= node.prob`` and so on up to the root
        (values are clipped at 0).  Paper 001: p_parent -= P(child | parent) · Δp_child."""
        self._check_mutable()
        while node is not None and delta > 0:
            node.value = max(node.value - delta, 0.0)
            delta *= node.prob
            node = node.parent

    def kill(self, node: TrieNode, a: int, prob: float) -> None:
        """Mark ``node·a`` dead (paper 001: add it to W) and subtract its remaining mass
        ``prob · value(node·a)`` up the trie; its subtree is dropped.  No-op if already dead."""
        self._check_mutable()
        dead = self._dead(node)
        if dead[a]:
            return
        ch = node.children.pop(a, None)
        if ch is not None:
            self.num_nodes -= _count(ch)
        old = 1.0 if ch is None else ch.value
        dead[a] = True
        self.subtract(node, prob * old)

    def kill_tokens(self, node: TrieNode, new: np.ndarray, p0: np.ndarray, *,
                    sorted_children: bool = False) -> None:
        """Kill every token of ``new`` (bool [V], none dead yet) after ``node``: children one by
        one with :meth:`kill` (in insertion order, or by id with ``sorted_children``), the rest
        at once (mass ``p0[rest].sum()``).  ``new`` is modified (children cleared from it)."""
        self._check_mutable()
        dead = self._dead(node)
        kids = [c for c in node.children if new[c]]
        for c in sorted(kids) if sorted_children else kids:
            self.kill(node, c, float(p0[c]))
            new[c] = False
        if new.any():
            dead |= new
            self.subtract(node, float(p0[new].sum()))

    # ------------------------------------------------------------------ ASAp: re-summation

    def mark_dead(self, node: TrieNode, tokens: np.ndarray | Sequence[int]) -> None:
        """Mark ``tokens`` (bool [V] or ids) dead after ``node`` without changing any value
        (follow with :meth:`refresh` from there up).  Children among them are dropped."""
        self._check_mutable()
        dead = self._dead(node)
        t = np.asarray(tokens)
        if t.dtype == bool:
            dead |= t
        else:
            dead[t.astype(np.int64)] = True
        for c in [c for c in node.children if dead[c]]:
            self.num_nodes -= _count(node.children.pop(c))

    def refresh(self, node: TrieNode, p0: np.ndarray) -> float:
        """``value(node) = Σ_a p0[a] · [a not dead] · value(node·a)`` (paper 003 eq. 3), with
        ``p0`` the float64 [V] next-token probabilities after ``node``; returns the value."""
        self._check_mutable()
        alive = np.ones(self.V, dtype=bool) if node.dead is None else ~node.dead
        kids = list(node.children.items())
        if kids:
            alive[[a for a, _ in kids]] = False
        v = float(p0[alive].sum()) + sum(ch.prob * ch.value for _, ch in kids)
        node.value = v
        return v

    # ------------------------------------------------------------------ CARS: re-summation

    def resum(self, node: TrieNode, p0: np.ndarray) -> float:
        """CARS's update of p_u (paper 001 §3) without cancellation: with ``p0`` the float64 [V]
        next-token probabilities after ``node`` (not necessarily summing to 1: they are
        normalized here) and ``f[a]`` = 0 if ``a`` is dead, ``value(node·a)`` if it is a child,
        else 1, sets and returns ``value(node) = Σ_a p0[a] f[a] / Σ_a p0[a]``.

        Call it on the nodes of a path from the deepest up (each sees its children's new
        values).  Both sums run over the same [V] array in the same order and ``f ≤ 1``, so the
        result is in [0, 1], and exactly 1.0 when nothing below ``node`` is dead.  Mutates
        ``node.value`` only.

        Raises:
            TrieFrozenError: the trie is frozen.
            InvalidArgumentError: ``p0`` is not [V], or its sum is not finite and positive.
        """
        self._check_mutable()
        p0 = np.asarray(p0, dtype=np.float64)
        if p0.shape != (self.V,):
            raise InvalidArgumentError(f"resum: p0 must be [{self.V}], got {list(p0.shape)}")
        tot = float(p0.sum())
        if not (np.isfinite(tot) and tot > 0):
            raise InvalidArgumentError(f"resum: the next-token row sums to {tot}, not > 0")
        f = np.ones(self.V, dtype=np.float64)
        if node.dead is not None:
            f[node.dead] = 0.0
        if node.children:
            f[list(node.children)] = [ch.value for ch in node.children.values()]
        v = min(float((p0 * f).sum()) / tot, 1.0)
        node.value = v
        return v

    # ------------------------------------------------------------------ lookups

    def weights(self, nodes: Sequence[TrieNode | None], probs: np.ndarray) -> np.ndarray:
        """float64 [B, V]: ``probs`` (float64 [B, V], row b the LM's next-token probabilities
        after ``nodes[b]``) times ``[not dead] · value(child)``; rows whose node is ``None``
        (off the trie) are copied unchanged.  ``probs`` is not modified."""
        w = np.array(probs, dtype=np.float64, copy=True)
        if w.ndim != 2 or w.shape[0] != len(nodes) or w.shape[1] != self.V:
            raise InvalidArgumentError(
                f"weights: probs must be [{len(nodes)}, {self.V}], got {list(w.shape)}")
        for b, nd in enumerate(nodes):
            if nd is None:
                continue
            if nd.dead is not None:
                w[b, nd.dead] = 0.0
            for a, ch in nd.children.items():
                w[b, a] *= ch.value
        return w

    def lookup(self, prefix: Iterable[int]) -> TrieNode | None:
        """The node of ``prefix`` (token ids), or ``None`` if it is not in the trie."""
        nd: TrieNode | None = self.root
        for a in prefix:
            nd = nd.children.get(int(a))
            if nd is None:
                return None
        return nd

    def lookup_many(self, prefixes: Sequence[Iterable[int]]) -> list[TrieNode | None]:
        """:meth:`lookup` for each prefix."""
        return [self.lookup(p) for p in prefixes]

    def bound(self, prefix: Iterable[int]) -> float:
        """The stored upper bound on the valid mass of ``prefix``: ``value`` of its node; off
        the trie, 0 if an ancestor marked the next token dead, else 1."""
        nd = self.root
        for a in prefix:
            a = int(a)
            nxt = nd.children.get(a)
            if nxt is None:
                return 0.0 if nd.dead is not None and bool(nd.dead[a]) else 1.0
            nd = nxt
        return nd.value

    def nodes(self) -> list[TrieNode]:
        """Every node, breadth-first (children in insertion order), the root first."""
        out = [self.root]
        i = 0
        while i < len(out):
            out.extend(out[i].children.values())
            i += 1
        return out

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | os.PathLike, meta: dict | None = None) -> None:
        """Write the trie to ``path`` (``.safetensors``; see the module docstring).  ``meta``
        (JSON-serializable) is stored and returned by :meth:`load`."""
        from safetensors.numpy import save_file

        nodes = self.nodes()
        index = {id(n): i for i, n in enumerate(nodes)}
        n = len(nodes)
        parent = np.array([-1] + [index[id(x.parent)] for x in nodes[1:]], dtype=np.int64)
        token = np.array([x.token for x in nodes], dtype=np.int64)
        prob = np.array([x.prob for x in nodes], dtype=np.float64)
        value = np.array([x.value for x in nodes], dtype=np.float64)
        # per node the smaller side of its dead mask: 0 none, 1 dead ids, 2 ids NOT dead
        has_dead = np.zeros(n, dtype=np.uint8)
        idx = []
        for i, x in enumerate(nodes):
            if x.dead is None:
                idx.append(np.zeros(0, np.int64))
                continue
            k = int(x.dead.sum())
            has_dead[i] = 1 if 2 * k <= self.V else 2
            idx.append(np.nonzero(x.dead if has_dead[i] == 1 else ~x.dead)[0])
        ptr = np.zeros(n + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([len(i) for i in idx])
        tensors = {
            "parent": parent, "token": token, "prob": prob, "value": value,
            "has_dead": has_dead, "dead_ptr": ptr,
            "dead_idx": (np.concatenate(idx) if n else np.zeros(0)).astype(np.int64),
        }
        header = {
            "format": _FORMAT_NAME,
            "version": str(TRIE_FORMAT_VERSION),
            "vocab_size": str(self.V),
            "rule": self.rule,
            "frozen": "1" if self.frozen else "0",
            "meta": json.dumps(meta or {}),
        }
        header["checksum"] = _checksum(tensors, header)
        save_file(tensors, str(path), metadata=header)

    @classmethod
    def load(cls, path: str | os.PathLike) -> tuple[PrefixTrie, dict]:
        """Read a file written by :meth:`save`; returns ``(trie, meta)``.

        Everything is checked before use: format name, version, checksum, dtypes, shapes and
        index ranges (parents precede children, tokens in 0..V-1, no token twice under one
        parent, probabilities and values in [0, 1 + 1e-6]).

        Raises:
            TrieFileNotFoundError: no file at ``path``.
            TrieFormatError: not a saved trie, another version, or corrupt (what and where).
        """
        from safetensors import safe_open

        p = Path(path)
        if not p.is_file():
            raise TrieFileNotFoundError(2, f"no saved prefix trie at {p}", str(p))
        try:
            with safe_open(str(p), framework="numpy") as f:
                header = dict(f.metadata() or {})
                t = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as e:  # noqa: BLE001 - safetensors raises several types
            raise TrieFormatError(f"{p} is not a saved prefix trie: {e}") from e
        if header.get("format") != _FORMAT_NAME:
            raise TrieFormatError(f"{p} is not a saved prefix trie (format "
                                  f"{header.get('format')!r})")
        if header.get("version") != str(TRIE_FORMAT_VERSION):
            raise TrieFormatError(f"{p} has trie format version {header.get('version')!r}; this "
                                  f"tractable reads version {TRIE_FORMAT_VERSION}")
        want = {"parent": np.int64, "token": np.int64, "prob": np.float64, "value": np.float64,
                "has_dead": np.uint8, "dead_ptr": np.int64, "dead_idx": np.int64}
        missing = [k for k in want if k not in t] + [
            k for k in ("vocab_size", "rule", "meta", "checksum") if k not in header]
        if missing:
            raise TrieFormatError(f"{p} lacks {missing}")
        body = {k: v for k, v in header.items() if k != "checksum"}
        if _checksum(t, body) != header["checksum"]:
            raise TrieFormatError(f"{p}: checksum mismatch (modified or truncated after save)")
        for k, dt in want.items():
            if t[k].dtype != dt or t[k].ndim != 1:
                raise TrieFormatError(f"{p}: {k} has dtype {t[k].dtype} and shape "
                                      f"{t[k].shape}, not 1-d {np.dtype(dt)}")
        try:
            V = int(header["vocab_size"])
            meta = json.loads(header["meta"])
        except ValueError as e:
            raise TrieFormatError(f"{p}: unreadable header field: {e}") from None
        n = t["parent"].size
        ptr, di = t["dead_ptr"], t["dead_idx"]
        bad = None
        if V < 1 or n < 1 or not isinstance(meta, dict):
            bad = f"vocab_size {V}, {n} nodes"
        elif any(t[k].size != n for k in ("token", "prob", "value", "has_dead")) \
                or ptr.size != n + 1:
            bad = "array lengths differ"
        elif t["parent"][0] != -1 or (n > 1 and not (
                (t["parent"][1:] >= 0) & (t["parent"][1:] < np.arange(1, n))).all()):
            bad = "a parent index does not precede its child"
        elif n > 1 and not ((t["token"][1:] >= 0) & (t["token"][1:] < V)).all():
            bad = f"a token id outside 0..{V - 1}"
        elif not (np.isfinite(t["prob"]) & (t["prob"] >= 0) & (t["prob"] <= 1 + 1e-6)).all() \
                or not (np.isfinite(t["value"]) & (t["value"] >= 0)
                        & (t["value"] <= 1 + 1e-6)).all():
            bad = "a probability or value outside [0, 1]"
        elif (t["has_dead"] > 2).any():
            bad = "has_dead holds a code other than 0, 1, 2"
        elif ptr[0] != 0 or (np.diff(ptr) < 0).any() or ptr[-1] != di.size:
            bad = "dead_ptr is not a valid CSR index"
        elif di.size and (di.min() < 0 or di.max() >= V):
            bad = f"a dead token id outside 0..{V - 1}"
        if bad:
            raise TrieFormatError(f"{p}: {bad}")
        trie = cls(V, rule=header["rule"])
        nodes: list[TrieNode] = [trie.root]
        for i in range(n):
            if i:
                par = nodes[int(t["parent"][i])]
                a = int(t["token"][i])
                if a in par.children:
                    raise TrieFormatError(f"{p}: node {i} repeats token {a} under its parent")
                nd = TrieNode(par, float(t["prob"][i]), a)
                par.children[a] = nd
                nodes.append(nd)
            nd = nodes[i]
            nd.value = float(t["value"][i])
            kind = int(t["has_dead"][i])
            if kind:
                nd.dead = np.full(V, kind == 2, dtype=bool)
                nd.dead[di[ptr[i]:ptr[i + 1]]] = kind == 1
        trie.num_nodes = trie.num_created = n
        trie.frozen = header.get("frozen") == "1"
        return trie, meta


def _count(node: TrieNode) -> int:
    """Number of nodes in the subtree of ``node`` (itself included)."""
    k, stack = 0, [node]
    while stack:
        x = stack.pop()
        k += 1
        stack.extend(x.children.values())
    return k


def _checksum(tensors: dict, header: dict) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(header, sort_keys=True).encode())
    for k in sorted(tensors):
        a = np.ascontiguousarray(tensors[k])
        h.update(f"{k}|{a.dtype}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()
