"""Per-request automaton state (paper 002 eq. 3) and budget-aware GCD / LCD masks (eq. 4).

A request's state is the *set* of automaton states reached by its prefix — the realized column
``α_t(·, x_t)`` of eq. 3.  :class:`AutomatonState` holds one such set per batch row (``active``:
bool [B, S]); it is small, immutable and reorderable (:meth:`AutomatonState.select` is an
``index_select``: beam search, SMC resampling).

Budget and EOS convention
-------------------------
``remaining`` r is the number of tokens that may still be generated, **EOS included** (for a
``generate`` call with ``max_new_tokens = n``, r = n − tokens generated so far).

* A text token v is allowed iff it leads from the current set X to some state q with
  ``distance_to_accept()[q] <= r - 1`` (GCD, eq. 2).
* An EOS id is allowed iff X contains an accepting state and r >= 1.  EOS never emits text and
  ends the sequence: :meth:`MaskMixin.advance` on EOS gives the empty set (as does any id that
  cannot be read from X, e.g. a special or padding id); callers check
  :meth:`AutomatonState.is_dead`.
* Stopping because r reached 0 is fine: by the invariant below the set is then accepting.  With
  r <= 0 nothing is allowed (the mask is all zero).
* An accepting state with no outgoing edges allows only EOS.
* LCD (``mode="lcd"``) ignores r — any token that keeps the set non-empty (all states are
  co-accessible, so that is "some continuation exists") — but still needs r >= 1 to emit anything.
* :meth:`MaskMixin.min_tokens_to_accept` is ``distance_to_accept()[0]``: the fewest *text* tokens
  of an accepted output; EOS is not counted because a budget that runs out exactly in an
  accepting state needs no EOS.  A budget n is satisfiable iff n >= that minimum
  (:meth:`MaskMixin.check_budget` raises :class:`~.errors.UnsatisfiableBudgetError` otherwise).

Invariant (why a GCD walk never dead-ends): if min over X of distance <= r and r >= 1, then
either X is accepting (EOS is allowed) or a first edge of a shortest path leads to q with
distance(q) <= r − 1, so the mask is non-empty and the next set again satisfies the invariant
with r − 1.  It holds at the start iff r >= min_tokens_to_accept().  (Automata whose vocabulary
has no EOS id may leave only "stop" in an accepting state: the mask is then empty.)

"Exactly n" (eq. 4) versus "within n" (a threshold on distances)
----------------------------------------------------------------
Eq. 4 keeps β_t(s) = "s reaches an accepting state in *exactly* n − t steps", β_n = f.  We read
an output that stops early as padded with EOS: add a fresh accepting state ⊤, EOS edges from
every accepting state to ⊤ and an EOS self-loop on ⊤.  **Claim**: in that automaton, for an
original state s, β_{n−k}(s) = 1 iff distance(s) <= k.  *Proof*: (⇐) follow a shortest path of
distance(s) text tokens to an accepting state, then take k − distance(s) EOS steps (to ⊤ and
its self-loop), an accepting path of length exactly k.  (⇒) the text part of an accepting path of
length k ends in an accepting state — either the path ends there, or its first EOS leaves one —
so distance(s) <= number of text tokens <= k.  ∎  Hence eq. 4's messages for every budget are one
int64 vector computed once by backward BFS (:meth:`MaskMixin.distance_to_accept`), and the
constraint mask ``m_t = 1{α_t^T β_t}`` becomes the rule above (EOS leads to ⊤, whose β is 1).
``tractable.testing.masks`` computes eq. 3 / eq. 4 literally and the tests compare.

Fast masks
----------
For a state s, sort its out-edges by the distance of their destination.  The GCD mask of {s} for
threshold d = r − 1 is the OR of the packed label rows of a *prefix* of that list; prefix unions
are built lazily per (state, distance level) and kept.  The mask of a set X is the OR of its
members' prefix unions, cached per (interned set, clamped threshold) in one contiguous int32
table (state sets repeat across steps and requests: DFA-like lazy caching of the sets actually
visited; the automaton is never determinized).  A warm mask is then a dict lookup and a row
copy.  LCD is the same union with no threshold.  Advance is cached per (set, token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .errors import InvalidArgumentError, UnsatisfiableBudgetError

__all__ = ["AutomatonState", "MaskMixin", "MODES"]

#: Mask modes: ``"gcd"`` (budget-aware, eq. 2) and ``"lcd"`` (any valid continuation, eq. 1).
MODES = ("gcd", "lcd")

# Cache limits.  A mask row is W*4 bytes (16 KiB at Llama-3's 128,256 ids); 256 MiB holds
# ~16k (set, threshold) rows; measured: walking bench/'s json_object string at 3 budgets with
# GCD and LCD fills 16 rows (15 sets), the email regex 5.
_MAX_MASK_TABLE_BYTES = 256 << 20
# (set, token) → set transitions kept before the dict is cleared (~100 bytes an entry).
_MAX_TRANSITIONS = 1 << 20


@dataclass(frozen=True, eq=False)
class AutomatonState:
    """A batch of state sets, one per request (eq. 3's realized column ``α_t(·, x_t)``).

    Attributes:
        active: bool [B, S] — row b is the set of automaton states reached by request b's
            prefix.  An all-false row is *dead* (after EOS, or an id the automaton cannot read).
        final: bool [S] — the automaton's accepting states (shared, not copied).
        set_ids: int64 numpy [B] or None — ids of the rows in the automaton's set interner (a
            cache key; rebuilt from ``active`` when absent or from another automaton).

    Immutable: :meth:`select`, :meth:`to` and the automaton's ``advance`` return new objects.
    Do not write into ``active`` in place: batch-1 states share one cached tensor per set.
    """

    active: torch.Tensor
    final: torch.Tensor
    set_ids: np.ndarray | None = None
    _engine: Any = field(default=None, repr=False, compare=False)

    @property
    def batch_size(self) -> int:
        return int(self.active.shape[0])

    @property
    def num_states(self) -> int:
        return int(self.active.shape[1])

    @property
    def device(self) -> torch.device:
        return self.active.device

    def select(self, indices: torch.Tensor | np.ndarray | list[int]) -> AutomatonState:
        """Rows ``indices`` (LongTensor [K], repeats allowed): beam reordering, SMC resampling."""
        idx = torch.as_tensor(indices, dtype=torch.long).cpu()
        if idx.dim() != 1:
            raise InvalidArgumentError(
                f"select() takes a 1-D index tensor, got shape {tuple(idx.shape)}")
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.batch_size):
            raise IndexError(f"select() index out of range for batch size {self.batch_size}")
        ids = None if self.set_ids is None else self.set_ids[idx.numpy()]
        return AutomatonState(
            self.active.index_select(0, idx.to(self.active.device)), self.final, ids, self._engine
        )

    @staticmethod
    def cat(states: list[AutomatonState]) -> AutomatonState:
        """Concatenate batches (same automaton) along the batch dimension."""
        if not states:
            raise InvalidArgumentError("cat() needs at least one state")
        eng = states[0]._engine
        same = all(s._engine is eng and s.set_ids is not None for s in states)
        ids = np.concatenate([s.set_ids for s in states]) if same else None
        return AutomatonState(
            torch.cat([s.active for s in states]), states[0].final, ids, eng if same else None
        )

    def is_accepting(self) -> torch.Tensor:
        """bool [B]: the set contains an accepting state (stopping here is valid)."""
        return (self.active & self.final.to(self.active.device)).any(dim=1)

    def is_dead(self) -> torch.Tensor:
        """bool [B]: the set is empty (EOS was read, or a token outside the language)."""
        return ~self.active.any(dim=1)

    def to(self, device: str | torch.device) -> AutomatonState:
        return AutomatonState(
            self.active.to(device), self.final.to(device), self.set_ids, self._engine
        )

    def __repr__(self) -> str:
        sizes = self.active.sum(dim=1).tolist()
        return f"AutomatonState(batch={self.batch_size}, states={self.num_states}, sizes={sizes})"


class _MaskEngine:
    """Lazily filled caches behind the masks of one automaton (CPU, numpy).

    Set interner: id → (bool row [S], members, accepting?, out-edges).  Id 0 is the empty set.
    Mask table: int32 [rows, W]; row 0 is all zero; ``_mask_idx[(set id, threshold)]`` → row.
    Not safe for concurrent first-time fills from several threads; share behind a lock.
    """

    def __init__(self, A: Any):
        a = A._np
        self.S = A.num_states
        self.V = A.vocab_size
        self.W = (self.V + 31) // 32
        self.out_ptr = a["out_ptr"]
        self.out_edge = a["out_edge"]
        self.dst = a["dst"]
        self.label = a["label"]
        self.labels = A.labels.cpu().numpy().view(np.int32)
        self.final = a["final"]
        self.dist = A.distance_to_accept().cpu().numpy()
        self.eos = frozenset(int(e) for e in A.eos_token_ids if 0 <= int(e) < self.V)
        eos_row = np.zeros(self.W, dtype=np.uint32)
        for e in self.eos:
            eos_row[e >> 5] |= np.uint32(1) << np.uint32(e & 31)
        self.eos_row = eos_row.view(np.int32)
        # per state: (levels [K] ascending, label ids sorted by level, level end offsets, rows)
        self._sinfo: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]] = {}
        # set interner
        self._set_of_key: dict[bytes, int] = {}
        self.set_rows = np.zeros((16, self.S), dtype=bool)
        self.set_members: list[np.ndarray] = []
        self.set_final: list[bool] = []
        self.set_lo: list[int] = []  # smallest destination distance of an out-edge (or 1<<62)
        self.set_hi: list[int] = []  # largest (or -1)
        self.set_edges: list[tuple[np.ndarray, np.ndarray] | None] = []
        self._trans: dict[tuple[int, int], int] = {}
        self.set_tensor1: dict[int, torch.Tensor] = {}  # set id -> bool [1, S] (read-only use)
        self.table = np.zeros((64, self.W), dtype=np.int32)
        self.n_rows = 1  # row 0: nothing allowed
        self._mask_idx: dict[tuple[int, int], int] = {}
        self._fast_idx: dict[tuple[int, int | None], int] = {}  # (set, r) -> row, unclamped
        self.out_view: tuple[torch.Tensor, np.ndarray] | None = None  # last `out` and its view
        self.epoch = 0  # bumped when the mask table is cleared (row numbers then change)
        self.empty_id = self.intern(np.zeros(self.S, dtype=bool))
        init = np.zeros(self.S, dtype=bool)
        init[0] = True
        self.initial_id = self.intern(init)

    # ------------------------------------------------------------ sets

    def intern(self, row: np.ndarray) -> int:
        """Id of the state set ``row`` (bool [S]), adding it if new."""
        key = row.tobytes()
        sid = self._set_of_key.get(key)
        if sid is not None:
            return sid
        sid = len(self.set_members)
        if sid >= self.set_rows.shape[0]:
            grown = np.zeros((2 * self.set_rows.shape[0], self.S), dtype=bool)
            grown[:sid] = self.set_rows[:sid]
            self.set_rows = grown
        self.set_rows[sid] = row
        members = np.nonzero(row)[0]
        self.set_members.append(members)
        self.set_final.append(bool(self.final[members].any()) if members.size else False)
        if members.size:
            segs = [self.out_edge[self.out_ptr[s]:self.out_ptr[s + 1]] for s in members]
            e = np.concatenate(segs)
        else:
            e = np.zeros(0, dtype=np.int64)
        if e.size:
            d = self.dist[self.dst[e]]
            self.set_lo.append(int(d.min()))
            self.set_hi.append(int(d.max()))
            self.set_edges.append((self.label[e], self.dst[e]))
        else:
            self.set_lo.append(1 << 62)
            self.set_hi.append(-1)
            self.set_edges.append(None)
        self._set_of_key[key] = sid
        return sid

    def ids_of(self, st: AutomatonState) -> np.ndarray:
        if st._engine is self and st.set_ids is not None:
            return st.set_ids
        rows = st.active.detach().cpu().numpy()
        if rows.ndim != 2 or rows.shape[1] != self.S:
            raise InvalidArgumentError(
                f"state has shape {tuple(rows.shape)}; this automaton needs [B, {self.S}]"
            )
        return np.array([self.intern(np.ascontiguousarray(r, dtype=bool)) for r in rows],
                        dtype=np.int64)

    def make_state(self, ids: np.ndarray, final: torch.Tensor) -> AutomatonState:
        if ids.shape[0] == 1:
            # batch-1 states share one cached [1, S] tensor per set (advance: ~3 us less);
            # AutomatonState.active is never written in place.
            sid = ids.item(0)
            active = self.set_tensor1.get(sid)
            if active is None:
                active = self.set_tensor1[sid] = torch.from_numpy(self.set_rows[ids])
        else:
            active = torch.from_numpy(self.set_rows[ids])
        return AutomatonState(active, final, ids, self)

    def step(self, sid: int, tok: int) -> int:
        """Id of the set reached from set ``sid`` on token ``tok`` (empty on EOS/unknown)."""
        key = (sid, tok)
        nid = self._trans.get(key)
        if nid is not None:
            return nid
        edges = self.set_edges[sid]
        if edges is None or not 0 <= tok < self.V or tok in self.eos:
            nid = self.empty_id
        else:
            lab, dst = edges
            hit = ((self.labels[lab, tok >> 5] >> (tok & 31)) & 1).astype(bool)
            row = np.zeros(self.S, dtype=bool)
            row[dst[hit]] = True
            nid = self.intern(row)
        if len(self._trans) >= _MAX_TRANSITIONS:
            self._trans.clear()
        self._trans[key] = nid
        return nid

    # ------------------------------------------------------------ masks

    def _state_prefix(self, s: int, d: int) -> np.ndarray | None:
        """OR of the labels of ``s``'s out-edges whose destination has distance <= d."""
        info = self._sinfo.get(s)
        if info is None:
            e = self.out_edge[self.out_ptr[s]:self.out_ptr[s + 1]]
            dd = self.dist[self.dst[e]]
            order = np.argsort(dd, kind="stable")
            dd = dd[order]
            labs = self.label[e][order]
            levels, first = np.unique(dd, return_index=True)
            ends = np.append(first[1:], dd.size)
            info = (levels, labs, ends, [])
            self._sinfo[s] = info
        levels, labs, ends, rows = info
        j = int(np.searchsorted(levels, d, side="right")) - 1
        if j < 0:
            return None
        while len(rows) <= j:
            k = len(rows)
            lo = ends[k - 1] if k else 0
            part = np.bitwise_or.reduce(self.labels[labs[lo:ends[k]]], axis=0)
            rows.append(part | rows[-1] if rows else part)
        return rows[j]

    def mask_row(self, sid: int, r: int | None) -> int:
        """Row of :attr:`table` holding set ``sid``'s mask for ``r`` remaining tokens (``None``:
        no budget, i.e. LCD)."""
        i = self._fast_idx.get((sid, r))
        if i is not None:
            return i
        i = self._mask_row(sid, r)
        if len(self._fast_idx) >= _MAX_TRANSITIONS:
            self._fast_idx.clear()
        self._fast_idx[(sid, r)] = i
        return i

    def _mask_row(self, sid: int, r: int | None) -> int:
        if r is not None and r <= 0:
            return 0
        hi = self.set_hi[sid]
        d = hi if r is None else min(r - 1, hi)
        if d < self.set_lo[sid]:
            d = -1
        key = (sid, d)
        i = self._mask_idx.get(key)
        if i is not None:
            return i
        row = np.zeros(self.W, dtype=np.int32)
        if d >= 0:
            for s in self.set_members[sid]:
                p = self._state_prefix(int(s), d)
                if p is not None:
                    np.bitwise_or(row, p, out=row)
        if self.set_final[sid]:
            np.bitwise_or(row, self.eos_row, out=row)
        if not row.any():
            i = 0
        else:
            if self.n_rows * self.W * 4 >= _MAX_MASK_TABLE_BYTES:
                self._mask_idx.clear()
                self._fast_idx.clear()
                self.n_rows = 1
                self.epoch += 1
            if self.n_rows >= self.table.shape[0]:
                grown = np.zeros((2 * self.table.shape[0], self.W), dtype=np.int32)
                grown[: self.n_rows] = self.table[: self.n_rows]
                self.table = grown
            i = self.n_rows
            self.table[i] = row
            self.n_rows += 1
        self._mask_idx[key] = i
        return i


def _remaining_list(remaining: int | torch.Tensor | None, B: int) -> list:
    if remaining is None:
        return [None] * B
    if isinstance(remaining, torch.Tensor):
        if remaining.dim() == 0:
            return [int(remaining)] * B
        if remaining.shape != (B,):
            raise InvalidArgumentError(
                f"remaining has shape {tuple(remaining.shape)}; expected an int or [{B}]"
            )
        return remaining.tolist()
    if isinstance(remaining, (list, tuple, np.ndarray)):
        if len(remaining) != B:
            raise InvalidArgumentError(f"remaining has {len(remaining)} entries; the batch has {B}")
        return [int(x) for x in remaining]
    return [int(remaining)] * B


class MaskMixin:
    """Methods of :class:`~tractable.fsa.automaton.TokenAutomaton` that deal with requests:
    forward state sets (eq. 3), distances (eq. 4 as a threshold) and GCD / LCD masks.

    See the module docstring for the budget and EOS convention.
    """

    # ------------------------------------------------------------ eq. 4: distances

    def distance_to_accept(self) -> torch.Tensor:
        """int64 [S]: fewest text tokens from each state to an accepting state (0 if accepting).

        One backward BFS over the edges (multi-source from the accepting states), computed once
        and cached.  ``distance <= k`` is eq. 4's β for k remaining steps (module docstring).
        Every state is co-accessible (trimmed), so every entry is finite.
        """
        memo = self._memo
        d = memo.get("distance_to_accept")
        if d is None:
            d = torch.from_numpy(_bfs_distance(self))
            memo["distance_to_accept"] = d
        return d

    def backward_messages(self, n: int) -> torch.Tensor:
        """bool [n + 1, S]: eq. 4's β_t for t = 0..n with budget n under EOS padding, i.e.
        ``β_t = distance_to_accept() <= n - t`` (module docstring, Claim)."""
        d = self.distance_to_accept()
        k = torch.arange(n, -1, -1).unsqueeze(1)
        return d.unsqueeze(0) <= k

    def min_tokens_to_accept(self) -> int:
        """Fewest text tokens of an accepted output (``distance_to_accept()[0]``; EOS not
        counted).  A budget (``max_new_tokens``) must be at least this."""
        return int(self.distance_to_accept()[0])

    def check_budget(self, n: int) -> None:
        """Raise :class:`~.errors.UnsatisfiableBudgetError` (budget, minimum) if no accepted
        output fits in ``n`` tokens."""
        m = self.min_tokens_to_accept()
        if int(n) < m:
            raise UnsatisfiableBudgetError(int(n), m)

    # ------------------------------------------------------------ eq. 3: forward sets

    def _mask_engine(self) -> _MaskEngine:
        eng = self._memo.get("mask_engine")
        if eng is None:
            eng = _MaskEngine(self)
            self._memo["mask_engine"] = eng
        return eng

    def start(self, batch_size: int = 1) -> AutomatonState:
        """``batch_size`` copies of the initial set {0} (eq. 3's α_0 = π_f)."""
        if batch_size < 0:
            raise InvalidArgumentError(f"batch_size must be >= 0, got {batch_size}")
        eng = self._mask_engine()
        return eng.make_state(np.full(batch_size, eng.initial_id, dtype=np.int64), self.final)

    def advance(self, st: AutomatonState, token_ids: torch.Tensor) -> AutomatonState:
        """A new state after reading ``token_ids`` (LongTensor [B], one per row; eq. 3).

        EOS ids, out-of-range ids, special ids and tokens outside the language give the empty
        set (check :meth:`AutomatonState.is_dead`); a dead row stays dead.  ``st`` is unchanged.
        """
        eng = self._mask_engine()
        ids = eng.ids_of(st)
        toks = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else list(token_ids)
        if isinstance(toks, int):
            toks = [toks]
        if len(toks) != ids.shape[0]:
            raise InvalidArgumentError(
                f"advance() got {len(toks)} token ids for a batch of {ids.shape[0]}")
        step = eng.step
        if len(toks) == 1:
            new = np.array([step(ids.item(0), int(toks[0]))], dtype=np.int64)
        else:
            new = np.array([step(s, int(t)) for s, t in zip(ids.tolist(), toks)], dtype=np.int64)
        out = eng.make_state(new, self.final)
        return out if st.active.device.type == "cpu" else out.to(st.active.device)

    # ------------------------------------------------------------ masks

    def allowed_packed(
        self,
        st: AutomatonState,
        remaining: int | torch.Tensor | None,
        mode: str = "gcd",
        *,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """int32 [B, ceil(V/32)]: bit v%32 of word v//32 of row b is set iff token v is allowed
        for row b (module docstring; EOS ids included where allowed).

        Args:
            st: the batch of state sets.
            remaining: tokens that may still be generated, EOS included — an int, a LongTensor
                [B] (one budget per row), or None (no budget).  Ignored by ``"lcd"`` except that
                r <= 0 allows nothing.
            mode: ``"gcd"`` (budget-aware, eq. 2) or ``"lcd"`` (eq. 1).
            out: optional int32 [B, W] CPU tensor to fill (overwritten; returned).

        The fast path: warm calls are one dict lookup and one row copy per batch row.
        """
        # Hot path: a warm batch-1 call costs ~2-3 us here (Llama-3, 128k ids), of which the
        # 16 KiB row copy is ~0.8 us and torch's .numpy() ~1 us (hence the cached view).
        lcd = mode == "lcd"
        if not lcd and mode != "gcd":
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
        if self.device.type == "cuda":
            # On the GPU the batched Triton kernel computes the masks (tractable.kernels)
            from ..kernels import MaskTables, token_mask

            tables = self._memo.get("mask_tables")
            if tables is None:
                dist = self.distance_to_accept().to(self.device)
                tables = self._memo["mask_tables"] = MaskTables.from_automaton(self, dist)
            packed = token_mask(st.active.to(self.device), remaining, tables, mode=mode)
            if out is not None:
                out.copy_(packed)
                return out
            return packed
        eng = self._memo.get("mask_engine") or self._mask_engine()
        ids = st.set_ids if (st._engine is eng and st.set_ids is not None) else eng.ids_of(st)
        B = len(ids)
        view = eng.out_view
        if (B == 1 and type(remaining) is int and view is not None and view[0] is out
                and not st.active.is_cuda):
            # the decode-loop case (one request, a reused buffer): ~1 us less than below
            r = remaining if not lcd else (None if remaining >= 1 else 0)
            sid = ids.item(0)
            i = eng._fast_idx.get((sid, r))
            if i is None:
                i = eng.mask_row(sid, r)  # may grow eng.table: read the table after it
            view[1][0] = eng.table[i]
            return out
        epoch = eng.epoch
        rows = self._mask_rows(eng, ids, remaining, lcd)
        if eng.epoch != epoch:  # the table was cleared mid-batch: earlier rows are stale
            rows = self._mask_rows(eng, ids, remaining, lcd)
        if out is None:
            o = np.empty((B, eng.W), dtype=np.int32)
            out = torch.from_numpy(o)
        else:
            cached = eng.out_view
            if cached is not None and cached[0] is out:
                o = cached[1]
            else:
                o = out.numpy() if out.device.type == "cpu" else None
                if (o is None or o.dtype != np.int32 or o.shape != (B, eng.W)
                        or not o.flags.c_contiguous):
                    raise InvalidArgumentError(
                        f"out must be a contiguous CPU int32 tensor of shape {(B, eng.W)}"
                    )
                eng.out_view = (out, o)
            if o.shape[0] != B:
                raise InvalidArgumentError(f"out has {o.shape[0]} rows; the batch has {B}")
        table = eng.table
        if B == 1:
            o[0] = table[rows[0]]
        else:
            # mode="clip": with the default "raise", numpy buffers `out` (an extra copy)
            np.take(table, rows, axis=0, out=o, mode="clip")
        if st.active.device.type != "cpu":
            return out.to(st.active.device)
        return out

    @staticmethod
    def _mask_rows(eng: _MaskEngine, ids: np.ndarray, remaining, lcd: bool) -> list[int]:
        """Mask-table rows for each batch row."""
        B = len(ids)
        if type(remaining) is int:
            r = remaining
            if lcd:
                r = None if r >= 1 else 0
            if B == 1:
                return [eng.mask_row(ids.item(0), r)]
            mask_row = eng.mask_row
            return [mask_row(s, r) for s in ids.tolist()]
        rs = _remaining_list(remaining, B)
        if lcd:
            rs = [None if (r is None or r >= 1) else 0 for r in rs]
        mask_row = eng.mask_row
        return [mask_row(s, r) for s, r in zip(ids.tolist(), rs)]

    def allowed(
        self, st: AutomatonState, remaining: int | torch.Tensor | None, mode: str = "gcd"
    ) -> torch.Tensor:
        """bool [B, V]: the unpacked :meth:`allowed_packed` (convenience; the packed form is
        the fast path)."""
        from .automaton import unpack_bits

        packed = self.allowed_packed(st, remaining, mode)
        return unpack_bits(packed, self.vocab_size).to(st.active.device)


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
