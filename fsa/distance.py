"""Distances to acceptance of a :class:`~.automaton.TokenAutomaton` (paper 002 eq. 4).

``distance_to_accept()[q]`` is the fewest text tokens from state q to an accepting state; with
EOS padding, ``distance <= k`` is eq. 4's backward message β for k remaining steps (the Claim
in :mod:`.masks`' docstring), so every budget's messages are one int64 vector computed once by
a reverse BFS.  The GCD masks of :mod:`.masks` threshold these distances; the thin methods of
:class:`~.automaton.TokenAutomaton` (``distance_to_accept``, ``backward_messages``,
``min_tokens_to_accept``, ``check_budget``) call the functions here (re-exported by
:mod:`.masks`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .errors import InvalidArgumentError, UnsatisfiableBudgetError

__all__ = ["distance_to_accept", "backward_messages", "min_tokens_to_accept", "check_budget"]


def distance_to_accept(A: Any) -> torch.Tensor:
    """int64 [S]: fewest text tokens from each state to an accepting state (0 if accepting).

    One backward BFS over the edges (multi-source from the accepting states), computed once
    and cached.  ``distance <= k`` is eq. 4's β for k remaining steps (module docstring).
    Every state is co-accessible (trimmed), so every entry is finite.
    """
    memo = A._memo
    d = memo.get("distance_to_accept")
    if d is None:
        d = torch.from_numpy(_bfs_distance(A))
        memo["distance_to_accept"] = d
    return d


def backward_messages(A: Any, n: int) -> torch.Tensor:
    """bool [n + 1, S]: eq. 4's β_t for t = 0..n with budget n under EOS padding, i.e.
    ``β_t = distance_to_accept() <= n - t`` (module docstring, Claim)."""
    d = distance_to_accept(A)
    k = torch.arange(n, -1, -1).unsqueeze(1)
    return d.unsqueeze(0) <= k


def min_tokens_to_accept(A: Any) -> int:
    """Fewest text tokens of an accepted output (``distance_to_accept()[0]``; EOS not
    counted).  A budget (``max_new_tokens``) must be at least this."""
    return int(distance_to_accept(A)[0])


def check_budget(A: Any, n: int) -> None:
    """Raise :class:`~.errors.UnsatisfiableBudgetError` (budget, minimum) if no accepted
    output fits in ``n`` tokens."""
    m = min_tokens_to_accept(A)
    if int(n) < m:
        raise UnsatisfiableBudgetError(int(n), m)


def _bfs_distance(A: Any) -> np.ndarray:
    """int64 [S]: unweighted shortest distance to any accepting state (reverse BFS)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    S = A.num_states
    src = A.edge_src.cpu().numpy()
    dst = A.edge_dst.cpu().numpy()
    fin = np.nonzero(A.final.cpu().numpy())[0]
    # reverse graph plus a super-source S with an edge to every accepting state
    rows = np.concatenate([dst, np.full(fin.size, S)])
    cols = np.concatenate([src, fin])
    g = csr_matrix((np.ones(rows.size), (rows, cols)), shape=(S + 1, S + 1))
    d = dijkstra(g, directed=True, indices=S, unweighted=True)[:S] - 1
    if not np.all(np.isfinite(d)):
        bad = int(np.nonzero(~np.isfinite(d))[0][0])
        raise InvalidArgumentError(
            f"state {bad} cannot reach an accepting state (automaton not trimmed)")
    return d.astype(np.int64)
