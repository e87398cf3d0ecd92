"""Budget-aware GCD / LCD masks of a :class:`~.automaton.TokenAutomaton` (paper 002 eqs. 2–4).

:class:`~.automaton.TokenAutomaton` keeps thin methods (``start``, ``advance``, ``allowed``,
``allowed_packed``, ``distance_to_accept``, ``min_tokens_to_accept``, ``check_budget``,
``backward_messages``) that call the functions of this module with the automaton as first
argument; the caches behind them are one :class:`MaskEngine` per automaton.

Budget and EOS convention
-------------------------
``remaining`` r is the number of tokens that may still be generated, **EOS included** (for a
``generate`` call with ``max_new_tokens = n``, r = n − tokens generated so far).

* A text token v is allowed iff it leads from the current set X to some state q with
  ``distance_to_accept()[q] <= r - 1`` (GCD, eq. 2).
* An EOS id is allowed iff X contains an accepting state and r >= 1.  EOS never emits text and
  ends the sequence: :func:`advance` on EOS gives the empty set (as does any id that cannot be
  read from X, e.g. a special or padding id); callers check :meth:`AutomatonState.is_dead`.
* Stopping because r reached 0 is fine: by the invariant below the set is then accepting.
* An accepting state with no outgoing edges allows only EOS.
* LCD (``mode="lcd"``) ignores r — any token that keeps the set non-empty (all states are
  co-accessible, so that is "some continuation exists") — but still needs r >= 1 to emit anything.
* :func:`min_tokens_to_accept` is ``distance_to_accept()[0]``: the fewest *text* tokens of an
  accepted output; EOS is not counted because a budget that runs out exactly in an accepting
  state needs no EOS.  A budget n is satisfiable iff n >= that minimum (:func:`check_budget`
  raises :class:`~.errors.UnsatisfiableBudgetError` otherwise).

Invariant (why a GCD walk never dead-ends): if min over X of distance <= r and r >= 1, then
either X is accepting (EOS is allowed) or a first edge of a shortest path leads to q with
distance(q) <= r − 1, so the mask is non-empty and the next set again satisfies the invariant
with r − 1.  It holds at the start iff r >= min_tokens_to_accept().  (Automata whose vocabulary
has no EOS id may leave only "stop" in an accepting state: the mask is then empty.)

Below the minimum budget
------------------------
For a live row (X non-empty) let ``need = max(1, min over X of distance)``.  Conversely to the
invariant, every out-edge of X enters a state at distance >= need − 1 > r − 1 when r < need, and
X is not accepting when need > r >= 1, so **the GCD mask is empty iff r < need** (LCD: iff
r <= 0), whatever the vocabulary.  Such a request is a caller error (a softmax over it is NaN),
so ``allowed``/``allowed_packed`` take ``on_unsatisfiable``:

* ``"raise"`` (default): :class:`~.errors.UnsatisfiableBudgetError` with ``budget`` = r,
  ``minimum`` = need (LCD: 1) and ``row`` = the first such row;
* ``"eos"``: such rows get a mask with only the EOS ids (end the row now; its output is then
  not accepted — for loops that must always have something to sample; a vocabulary without
  EOS ids gives the empty row);
* ``"empty"``: such rows get the all-zero row (the raw eq. 4 mask: samplers that let a
  budget-blind proposal run out of budget give such a particle weight 0).

Dead rows (the empty set: after EOS or an unreadable id) are never an error: their mask is all
zero under every policy.  ``remaining=None`` (no budget) is never unsatisfiable.

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
int64 vector computed once by backward BFS (:func:`distance_to_accept`), and the constraint mask
``m_t = 1{α_t^T β_t}`` becomes the rule above (EOS leads to ⊤, whose β is 1).
``tractable.testing.masks`` computes eq. 3 / eq. 4 literally and the tests compare.

Fast masks
----------
For a state s, sort its out-edges by the distance of their destination.  The GCD mask of {s} for
threshold d = r − 1 is the OR of the packed label rows of a *prefix* of that list; the prefix rows
of every (state, distance level) are built once (:mod:`.mask_rows`: for all states when the engine
is made if they fit in 16 MiB, else per state on first use).  The mask of a one-member set (every
set of a DFA-like automaton) *is* its member's prefix row: a first-time mask is a bisect over the
member's levels and a dict entry, without the lock and without copying the row (an accepting state's
prefix rows include the EOS ids; below its first level its mask is the EOS row).  The mask of a
larger set X is the OR of its members' prefix rows, written straight into the next row of one
contiguous int32 table.  Masks are cached per (interned set, r) and per (set, clamped threshold)
(state sets repeat across steps and requests: DFA-like lazy caching of the sets actually visited;
the automaton is never determinized).  Tables reserve 16 MiB of rows up front (calloc'd: pages are
mapped as rows are written; the first 64 rows are touched at set-up), so they seldom grow.  A warm
mask is then a dict lookup and a row copy.  LCD is the same union with no threshold.  Advance is
cached per (set, token); a first-time advance into a one-member set reads that state's facts
(out-edges, distances, final flag), precomputed per state when the engine is made, instead of array
work over the set.
On CUDA automata the batched Triton kernel (:mod:`tractable.kernels.token_mask`) computes the masks.

Threads
-------
One automaton may be shared by any number of threads.  Every cache *fill* (a new set, a new
transition, a new mask row, a table reset) runs under the engine's lock; warm reads take no
lock (nor does the first mask of a one-member set, above).  Mask rows are never rewritten once
published: a table that reaches its byte limit is replaced by a new one (the old one stays
intact for readers still holding its rows).  ``tests/fsa/test_thread_safety.py`` hammers
first-time fills and resets from several threads against a single-threaded reference.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from typing import Any

import numpy as np
import torch

from .bits import unpack_bits
from .distance import (
    backward_messages,
    check_budget,
    distance_to_accept,
    min_tokens_to_accept,
)
from .errors import (
    ForeignStateError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    UnsatisfiableBudgetError,
)
from .mask_rows import PrefixRows
from .state import AutomatonIdentity, AutomatonState, _remaining_list, identity

__all__ = [
    "MODES",
    "ON_UNSATISFIABLE",
    "AutomatonIdentity",
    "MaskEngine",
    "identity",
    "mask_engine",
    "distance_to_accept",
    "backward_messages",
    "min_tokens_to_accept",
    "check_budget",
    "start",
    "advance",
    "allowed_packed",
    "allowed",
]

#: Mask modes: ``"gcd"`` (budget-aware, eq. 2) and ``"lcd"`` (any valid continuation, eq. 1).
MODES = ("gcd", "lcd")
#: What a mask call does for a live row below its minimum budget (module docstring).
ON_UNSATISFIABLE = ("raise", "eos", "empty")

# Cache limits.  A mask row is W*4 bytes (16 KiB at Llama-3's 128,256 ids); 256 MiB holds
# ~16k (set, threshold) rows; measured: walking bench/'s json_object string at 3 budgets with
# GCD and LCD fills 16 rows (15 sets), the email regex 5.
_MAX_MASK_TABLE_BYTES = 256 << 20
# (set, token) → set transitions kept before the dict is cleared (~100 bytes an entry).
_MAX_TRANSITIONS = 1 << 20
# Rows a new mask table reserves up front (virtual memory: calloc'd, mapped on first write).
_RESERVE_TABLE_BYTES = 16 << 20
_EAGER_SINGLETONS = 1024  # automata with at most this many states intern every {q} at set-up
# step(): sets with at most this many out-edges test the token's bit edge by edge in Python
# (k = 2: 0.7 us vs 7-8 us for the array ops; the two meet near k = 10-20, measured here)
_SMALL_STEP = 8
_PREFAULT_ROWS = 64  # of which written (mapped) when a table is made (1 MiB at 128k ids)
_NO_EDGE = 1 << 62  # set_lo / set_min of a set without out-edges / members
_ENGINE_LOCK = threading.Lock()  # creation of one engine per automaton


class _MaskTable:
    """One generation of the mask table: ``rows`` int32 [capacity, W] (row 0 all zero; rows
    below ``n_rows`` are never rewritten), ``fast`` (set id, r) → mask row, ``by_level`` (set
    id, clamped threshold) → mask row.  A mask row (int32 [W], read-only by convention) is a
    row of ``rows``, a per-state prefix row of :class:`~.mask_rows.PrefixRows` (a set whose
    mask is one member's prefix row is not copied), the engine's ``eos_row`` or its
    ``zero_row`` (the empty mask).  ``index`` (set id, r) → row index in ``rows``: the batched
    path's copies (:meth:`MaskEngine.fill_index`)."""

    __slots__ = ("rows", "n_rows", "fast", "by_level", "index")

    def __init__(self, W: int, capacity: int = 64):
        # np.zeros of a large block is calloc'd: pages are mapped on first write, so a large
        # capacity costs nothing until rows are filled (and saves the copies of growing)
        self.rows = np.zeros((max(2, capacity), W), dtype=np.int32)
        # touch the first rows now (page faults, with transparent huge pages a 2 MiB zeroing,
        # measured 140-170 us at 128k ids, belong to set-up, not to the first mask)
        self.rows[: min(max(2, capacity), _PREFAULT_ROWS)] = 0
        self.n_rows = 1
        self.fast: dict[tuple[int, int | None], np.ndarray] = {}
        self.by_level: dict[tuple[int, int], np.ndarray] = {}
        self.index: dict[tuple[int, int | None], int] = {}  # (set id, r) -> row of ``rows``


class MaskEngine:
    """Lazily filled caches behind the masks of one automaton (CPU, numpy).

    Set interner: id → (bool row [S], members, accepting?, out-edges, smallest member
    distance).  Id 0 is the empty set.  Mask table: :class:`_MaskTable` (``tab``), replaced when
    it reaches ``max_table_bytes`` (``epoch`` counts the replacements).  ``owner`` is the
    automaton's :class:`AutomatonIdentity`.  Safe to share between threads (module docstring).
    """

    def __init__(self, A: Any):
        a = A._np
        self.owner = identity(A)
        self.S = A.num_states
        self.V = A.vocab_size
        self.W = (self.V + 31) // 32
        self.out_ptr = a["out_ptr"]
        self.out_edge = a["out_edge"]
        self.dst = a["dst"]
        self.label = a["label"]
        self.labels = A.labels.cpu().numpy().view(np.int32)
        self._flat_labels = self.labels.view(np.uint32).reshape(-1)  # for step(): word l*W + w
        self.final = a["final"]
        self.dist = distance_to_accept(A).cpu().numpy()
        self.eos = frozenset(int(e) for e in A.eos_token_ids if 0 <= int(e) < self.V)
        eos_row = np.zeros(self.W, dtype=np.uint32)
        for e in self.eos:
            eos_row[e >> 5] |= np.uint32(1) << np.uint32(e & 31)
        self.eos_row = eos_row.view(np.int32)
        self.zero_row = np.zeros(self.W, dtype=np.int32)
        self.max_table_bytes = _MAX_MASK_TABLE_BYTES
        self._lock = threading.RLock()
        self.prefix = PrefixRows(self.S, self.W, self.out_ptr, self.out_edge, self.dst,
                                 self.label, self.labels, self.dist, final=self.final,
                                 eos_row=self.eos_row if self.eos else None)
        # per-state facts (a singleton set, the common case of DFA-like automata, is interned
        # from these without array work): out-edges as views of the CSR order, the smallest /
        # largest destination distance, final flags and distances as Python lists
        e = self.out_edge
        self.e_label, self.e_dst = self.label[e], self.dst[e]
        ptr = self.out_ptr.tolist()
        self._ptr = ptr
        lo = np.full(self.S, _NO_EDGE, dtype=np.int64)
        hi = np.full(self.S, -1, dtype=np.int64)
        has = np.diff(self.out_ptr) > 0
        if e.size:
            dd = self.dist[self.e_dst]
            lo[has] = np.minimum.reduceat(dd, self.out_ptr[:-1][has])
            hi[has] = np.maximum.reduceat(dd, self.out_ptr[:-1][has])
        self._state_lo, self._state_hi = lo.tolist(), hi.tolist()
        self._state_final = self.final.astype(bool).tolist()
        self._state_dist = self.dist.tolist()
        # set interner: key = the members' int64 bytes (ascending)
        self._set_of_key: dict[bytes, int] = {}
        self.set_rows = np.zeros((16, self.S), dtype=bool)
        self.set_members: list[np.ndarray] = []
        self.set_final: list[bool] = []
        self.set_min: list[int] = []  # smallest member distance (or _NO_EDGE: empty set)
        self.set_lo: list[int] = []  # smallest destination distance of an out-edge (or _NO_EDGE)
        self.set_hi: list[int] = []  # largest (or -1)
        self.set_edges: list[tuple[np.ndarray, np.ndarray] | None] = []  # (labels, dsts)
        self._set_words: dict[int, list[int]] = {}  # step(): label * W per edge, small sets
        self.set_single: list[int] = []  # the member of a one-member set, else -1
        self._trans: dict[tuple[int, int], int] = {}
        self.final_t = A.final  # the final flags batch-1 states of the cache below carry
        self.set_state1: dict[int, AutomatonState] = {}  # set id -> its batch-1 state (frozen)
        self.tab = _MaskTable(self.W, self._table_capacity())
        self.out_view: tuple[torch.Tensor, np.ndarray] | None = None  # last `out` and its view
        self.epoch = 0  # number of table replacements
        self.empty_id = self.intern(np.zeros(self.S, dtype=bool))
        init = np.zeros(self.S, dtype=bool)
        init[0] = True
        self.initial_id = self.intern(init)
        # small automata: every one-member set interned now (ids 1..S, in state order), so a
        # first-time advance into one is a list lookup (set-up: ~2 ms for 345 states)
        self.single_id: list[int] | None = None
        if self.S <= _EAGER_SINGLETONS:
            self.single_id = [self.intern_members(np.array([q], dtype=np.int64))
                              for q in range(self.S)]
            # and their step() words and batch-1 states (first-time advance ~15 -> ~8 us)
            words, ptr = (self.e_label * self.W).tolist(), self._ptr
            for q, sid in enumerate(self.single_id):
                if ptr[q + 1] - ptr[q] <= _SMALL_STEP:
                    self._set_words[sid] = words[ptr[q]:ptr[q + 1]]
                self.state1(sid)

    # ------------------------------------------------------------ sets

    def intern(self, row: np.ndarray) -> int:
        """Id of the state set ``row`` (bool [S]), adding it if new."""
        return self.intern_members(np.flatnonzero(row))

    def intern_members(self, members: np.ndarray) -> int:
        """Id of the state set with ``members`` (int64 [k], ascending, distinct), adding it if
        new."""
        key = members.tobytes()
        sid = self._set_of_key.get(key)
        if sid is not None:
            return sid
        with self._lock:
            sid = self._set_of_key.get(key)
            if sid is None:
                sid = self._add_set(members.astype(np.int64, copy=False), key)
        return sid

    def _add_set(self, members: np.ndarray, key: bytes) -> int:
        # under the lock; every per-set list is filled before the key is published
        sid = len(self.set_members)
        if sid >= self.set_rows.shape[0]:
            grown = np.zeros((2 * self.set_rows.shape[0], self.S), dtype=bool)
            grown[:sid] = self.set_rows[:sid]
            self.set_rows = grown
        self.set_rows[sid, members] = True
        if members.size == 1:  # per-state facts, no array work
            s = members.item(0)
            a, b = self._ptr[s], self._ptr[s + 1]
            self.set_final.append(self._state_final[s])
            self.set_min.append(self._state_dist[s])
            self.set_lo.append(self._state_lo[s])
            self.set_hi.append(self._state_hi[s])
            self.set_edges.append((self.e_label[a:b], self.e_dst[a:b]) if b > a else None)
            self.set_single.append(s)
        else:
            self.set_final.append(bool(self.final[members].any()) if members.size else False)
            self.set_min.append(int(self.dist[members].min()) if members.size else _NO_EDGE)
            if members.size:
                ptr = self._ptr
                lab = np.concatenate([self.e_label[ptr[s]:ptr[s + 1]] for s in members.tolist()])
                dst = np.concatenate([self.e_dst[ptr[s]:ptr[s + 1]] for s in members.tolist()])
            else:
                lab = dst = np.zeros(0, dtype=np.int64)
            if dst.size:
                d = self.dist[dst]
                self.set_lo.append(int(d.min()))
                self.set_hi.append(int(d.max()))
                self.set_edges.append((lab, dst))
            else:
                self.set_lo.append(_NO_EDGE)
                self.set_hi.append(-1)
                self.set_edges.append(None)
            self.set_single.append(-1)
        self.set_members.append(members)  # len(set_members) numbers the sets: append it last
        self._set_of_key[key] = sid
        return sid

    def check_owner(self, st: AutomatonState) -> None:
        """Raise :class:`~.errors.ForeignStateError` if ``st`` was made by another automaton
        (states without an owner, built by hand, pass)."""
        other = st._engine
        if other is not None and other is not self and getattr(other, "owner", None) is not (
                self.owner):
            raise ForeignStateError(
                f"this state was made by another automaton "
                f"({getattr(other, 'owner', type(other).__name__)!r}), not by this one "
                f"({self.owner!r}); use this automaton's start()/advance()")

    def ids_of(self, st: AutomatonState) -> np.ndarray:
        """int64 [B]: the set ids of ``st``'s rows (interned from ``active`` when ``st`` carries
        none of this engine).  Raises ForeignStateError / InvalidArgumentError."""
        if st._engine is self and st.set_ids is not None:
            return st.set_ids
        self.check_owner(st)
        rows = st.active.detach().cpu().numpy()
        if rows.ndim != 2 or rows.shape[1] != self.S:
            raise InvalidArgumentError(
                f"state has shape {tuple(rows.shape)}; this automaton needs [B, {self.S}]"
            )
        return np.array([self.intern(np.ascontiguousarray(r, dtype=bool)) for r in rows],
                        dtype=np.int64)

    def make_state(self, ids: np.ndarray, final: torch.Tensor) -> AutomatonState:
        if ids.shape[0] == 1 and final is self.final_t:
            return self.state1(ids.item(0))
        return AutomatonState(torch.from_numpy(self.set_rows[ids]), final, ids, self)

    def state1(self, sid: int) -> AutomatonState:
        """The batch-1 state of set ``sid``, made once per set and shared (states are frozen
        and ``active`` is never written in place; warm advance 3.1 -> ~2 us)."""
        st = self.set_state1.get(sid)
        if st is None:
            st = self.set_state1[sid] = AutomatonState(
                torch.from_numpy(self.set_rows[sid:sid + 1]), self.final_t,
                np.array([sid], dtype=np.int64), self)
        return st

    def step(self, sid: int, tok: int) -> int:
        """Id of the set reached from set ``sid`` on token ``tok`` (empty on EOS/unknown)."""
        key = (sid, tok)
        nid = self._trans.get(key)
        if nid is not None:
            return nid
        with self._lock:
            edges = self.set_edges[sid]
            if edges is None or not 0 <= tok < self.V or tok in self.eos:
                nid = self.empty_id
            else:
                lab, dst = edges
                if lab.size <= _SMALL_STEP:
                    # a few edges: one label word each, read as Python ints (~1-2 us where the
                    # array ops below cost ~5-7 us, measured on iso_datetime's cold walk)
                    words = self._set_words.get(sid)
                    if words is None:
                        words = self._set_words[sid] = (lab * self.W).tolist()
                    fl, w, bit = self._flat_labels, tok >> 5, 1 << (tok & 31)
                    hit = [i for i, x in enumerate(words) if fl.item(x + w) & bit]
                else:
                    hit = np.flatnonzero((self.labels[lab, tok >> 5] >> (tok & 31)) & 1)
                if len(hit) == 1:
                    ids = self.single_id
                    nid = (ids[dst.item(int(hit[0]))] if ids is not None
                           else self.intern_members(dst[hit]))
                elif len(hit) == 0:
                    nid = self.empty_id
                else:
                    nid = self.intern_members(np.unique(dst[hit]))
            if len(self._trans) >= _MAX_TRANSITIONS:
                self._trans.clear()
            self._trans[key] = nid
        return nid

    # ------------------------------------------------------------ masks

    def _table_capacity(self) -> int:
        """Rows a new mask table reserves (calloc'd: only filled rows take memory)."""
        return max(64, min(self.max_table_bytes, _RESERVE_TABLE_BYTES) // (self.W * 4) + 1)

    def row(self, sid: int, r: int | None) -> np.ndarray:
        """Set ``sid``'s mask row (int32 [W]; read it, never write it) for ``r`` remaining
        tokens (``None``: no budget, i.e. LCD; r <= 0: the empty row ``zero_row``)."""
        row = self.tab.fast.get((sid, r))
        return row if row is not None else self.fill(sid, r)

    def fill(self, sid: int, r: int | None) -> np.ndarray:
        """:meth:`row` on a cache miss: computes the row (under the lock, except for a
        one-member set whose mask is its member's ready prefix row: no table row is written,
        so a lookup and a dict entry suffice; a race stores the same row twice)."""
        s = self.set_single[sid]
        if s >= 0:
            pr = self.prefix
            rows = pr.rows[s]
            a, b = pr.pair_ptr_list[s], pr.pair_ptr_list[s + 1]
            if rows is not None or a == b:  # ready rows, or no out-edges at all
                if r is None:
                    j = b - 1 - a
                elif r <= 0:
                    j = -1
                else:
                    j = bisect_right(pr.pair_level_list, r - 1, a, b) - 1 - a
                if j >= 0 and pr.live[s][j]:
                    row = rows[j]  # an accepting member's rows include the EOS ids
                elif self.eos and self._state_final[s] and (r is None or r >= 1):
                    row = self.eos_row
                else:
                    row = self.zero_row
                fast = self.tab.fast
                if len(fast) >= _MAX_TRANSITIONS:
                    fast.clear()
                fast[(sid, r)] = row
                return row
        with self._lock:
            tab = self.tab
            row = tab.fast.get((sid, r))
            if row is None:
                row = self._level_row(sid, r)
                tab = self.tab  # _level_row may have started a new table
                if len(tab.fast) >= _MAX_TRANSITIONS:
                    tab.fast.clear()
                tab.fast[(sid, r)] = row
            return row

    def _next_row(self) -> tuple[_MaskTable, np.ndarray]:
        """(table, its next free row) — under the lock; the row is unpublished until the caller
        moves ``n_rows`` past it.  Replaces a full table (the old one stays intact for readers)
        or grows it."""
        tab = self.tab
        if tab.n_rows > 1 and tab.n_rows * self.W * 4 >= self.max_table_bytes:
            tab = self.tab = _MaskTable(self.W, self._table_capacity())
            self.epoch += 1
        if tab.n_rows >= tab.rows.shape[0]:
            grown = np.zeros((2 * tab.rows.shape[0], self.W), dtype=np.int32)
            grown[: tab.n_rows] = tab.rows[: tab.n_rows]
            tab.rows = grown
        return tab, tab.rows[tab.n_rows]

    def fill_index(self, sid: int, r: int | None) -> tuple[_MaskTable, int]:
        """(table, row index) of set ``sid``'s mask for ``r`` (index 0: the empty mask), for
        batches, which gather their rows from one table with one ``np.take``.  A mask not yet
        in the table (a one-member set's prefix row, or a row of an older table) is copied
        into it once; a union row already in it is found by its offset."""
        with self._lock:
            row = self.row(sid, r)
            tab = self.tab
            if row is self.zero_row:
                return tab, 0
            i = tab.index.get((sid, r))
            if i is None:
                if row.base is tab.rows:  # a row of this table (a union): found by its offset
                    i = (row.ctypes.data - tab.rows.ctypes.data) // row.nbytes
                else:
                    tab, buf = self._next_row()
                    buf[:] = row
                    i = tab.n_rows
                    tab.n_rows += 1
                if len(tab.index) >= _MAX_TRANSITIONS:
                    tab.index.clear()
                tab.index[(sid, r)] = i
            return tab, i

    def _level_row(self, sid: int, r: int | None) -> np.ndarray:
        # under the lock
        if r is not None and r <= 0:
            return self.zero_row
        hi = self.set_hi[sid]
        d = hi if r is None else min(r - 1, hi)
        if d < self.set_lo[sid]:
            d = -1
        key = (sid, d)
        tab = self.tab
        row = tab.by_level.get(key)
        if row is not None:
            return row
        tab, buf = self._next_row()
        row = None if d < 0 else self.prefix.union_into(
            buf, self.set_members[sid], d, d >= self.set_hi[sid])
        if self.set_final[sid] and self.eos:
            if row is None:
                row = self.eos_row
            else:
                np.bitwise_or(row, self.eos_row, out=buf)
                row = buf
        if row is None:  # (the union of non-empty rows and the EOS row is non-empty)
            row = self.zero_row
        elif row is buf:
            tab.n_rows += 1
        tab.by_level[key] = row
        return row

    def unsatisfiable_row(self, b: int, sid: int, r: int | None, lcd: bool,
                          policy: str) -> np.ndarray | None:
        """For a batch row ``b`` whose mask is empty: the row to use instead under ``policy``
        (None: keep the empty row), or raise UnsatisfiableBudgetError (module docstring)."""
        if r is None or sid == self.empty_id or policy == "empty":
            return None
        need = 1 if lcd else max(1, self.set_min[sid])  # the smallest r with a non-empty mask
        if r >= need:
            return None  # satisfiable: an accepting set in a vocabulary without EOS
        if policy == "eos":
            return self.eos_row
        raise UnsatisfiableBudgetError(int(r), need, row=b)


def mask_engine(A: Any) -> MaskEngine:
    """The :class:`MaskEngine` of automaton ``A`` (built once, kept in ``A._memo``)."""
    eng = A._memo.get("mask_engine")
    if eng is None:
        with _ENGINE_LOCK:
            eng = A._memo.get("mask_engine")
            if eng is None:
                eng = A._memo["mask_engine"] = MaskEngine(A)
    return eng


# ---------------------------------------------------------------- eq. 4: distances


# ---------------------------------------------------------------- eq. 3: forward sets


def start(A: Any, batch_size: int = 1) -> AutomatonState:
    """``batch_size`` copies of the initial set {0} (eq. 3's α_0 = π_f)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise InvalidArgumentTypeError(f"batch_size must be an int, got {batch_size!r}")
    if batch_size < 0:
        raise InvalidArgumentError(f"batch_size must be >= 0, got {batch_size}")
    eng = mask_engine(A)
    return eng.make_state(np.full(int(batch_size), eng.initial_id, dtype=np.int64), A.final)


def advance(A: Any, st: AutomatonState, token_ids: torch.Tensor) -> AutomatonState:
    """A new state after reading ``token_ids`` (LongTensor [B], one per row; eq. 3).

    EOS ids, out-of-range ids, special ids and tokens outside the language give the empty
    set (check :meth:`AutomatonState.is_dead`); a dead row stays dead.  ``st`` is unchanged.

    Raises:
        ForeignStateError: ``st`` was made by another automaton.
        InvalidArgumentError: not one token id per row.
        InvalidArgumentTypeError: token ids that are not integers (e.g. a 2-D tensor).
    """
    eng = A._memo.get("mask_engine") or mask_engine(A)
    ids = eng.ids_of(st)
    toks = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else list(token_ids)
    if isinstance(toks, int):
        toks = [toks]
    if len(toks) != ids.shape[0]:
        raise InvalidArgumentError(
            f"advance() got {len(toks)} token ids for a batch of {ids.shape[0]}")
    step = eng.step
    try:
        if len(toks) == 1:
            sid = step(ids.item(0), int(toks[0]))
            if A.final is eng.final_t and st.active.device.type == "cpu":
                return eng.state1(sid)  # the batch-1 decode loop: no new objects
            new = np.array([sid], dtype=np.int64)
        else:
            new = np.array([step(s, int(t)) for s, t in zip(ids.tolist(), toks)],
                           dtype=np.int64)
    except TypeError:
        raise InvalidArgumentTypeError(
            "advance() takes one integer token id per row (a LongTensor [B]), got "
            f"{type(token_ids).__name__} {getattr(token_ids, 'shape', '')}") from None
    out = eng.make_state(new, A.final)
    return out if st.active.device.type == "cpu" else out.to(st.active.device)


# ---------------------------------------------------------------- masks


def allowed_packed(
    A: Any,
    st: AutomatonState,
    remaining: int | torch.Tensor | None,
    mode: str = "gcd",
    *,
    out: torch.Tensor | None = None,
    on_unsatisfiable: str = "raise",
) -> torch.Tensor:
    """int32 [B, ceil(V/32)]: bit v%32 of word v//32 of row b is set iff token v is allowed
    for row b (module docstring; EOS ids included where allowed).

    Args:
        A: the automaton.
        st: the batch of state sets (made by ``A``, or built by hand).
        remaining: tokens that may still be generated, EOS included — an int, a LongTensor
            [B] (one budget per row), or None (no budget).  Ignored by ``"lcd"`` except that
            r <= 0 allows nothing.
        mode: ``"gcd"`` (budget-aware, eq. 2) or ``"lcd"`` (eq. 1).
        out: optional int32 [B, W] CPU tensor to fill (overwritten; returned).  Unspecified
            after an error.
        on_unsatisfiable: ``"raise"``, ``"eos"`` or ``"empty"``: what a live row whose
            ``remaining`` is below its minimum gets (module docstring, "Below the minimum
            budget").

    Raises:
        UnsatisfiableBudgetError: a live row below its minimum budget (``"raise"``).
        ForeignStateError: ``st`` was made by another automaton.
        InvalidArgumentError: bad ``mode``, ``on_unsatisfiable``, shapes or ``out``.

    The fast path: warm calls are one dict lookup and one row copy per batch row.
    """
    # Hot path: a warm batch-1 call costs ~2-3 us here (Llama-3, 128k ids), of which the
    # 16 KiB row copy is ~0.8 us and torch's .numpy() ~1 us (hence the cached view).
    lcd = mode == "lcd"
    if not lcd and mode != "gcd":
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
    if on_unsatisfiable != "raise" and on_unsatisfiable not in ON_UNSATISFIABLE:
        raise InvalidArgumentError(
            f"on_unsatisfiable must be one of {ON_UNSATISFIABLE}, got {on_unsatisfiable!r}")
    if A.device.type == "cuda":
        packed = _allowed_packed_tables(A, st, remaining, mode, on_unsatisfiable)
        if out is not None:
            out.copy_(packed)
            return out
        return packed
    eng = A._memo.get("mask_engine") or mask_engine(A)
    ids = st.set_ids if (st._engine is eng and st.set_ids is not None) else eng.ids_of(st)
    B = len(ids)
    view = eng.out_view
    if (B == 1 and type(remaining) is int and view is not None and view[0] is out
            and not st.active.is_cuda):
        # the decode-loop case (one request, a reused buffer): ~1 us less than below
        r = remaining if not lcd else (None if remaining >= 1 else 0)
        sid = ids.item(0)
        row = eng.tab.fast.get((sid, r))
        if row is None:
            row = eng.fill(sid, r)
        if row is eng.zero_row:
            fix = eng.unsatisfiable_row(0, sid, remaining, lcd, on_unsatisfiable)
            if fix is not None:
                row = fix
        view[1][0] = row
        return out
    if type(remaining) is int:
        r0 = remaining if not lcd else (None if remaining >= 1 else 0)
        rs_in = rs = None
    else:
        rs_in = _remaining_list(remaining, B)
        rs = [None if (r is None or r >= 1) else 0 for r in rs_in] if lcd else rs_in
    fixes = None
    tabs = None  # per row, the table its row was published in (batches, after a fill)
    if B == 1:  # one row, looked up as a mask row (no table copy)
        sid = ids.item(0)
        rk = r0 if rs is None else rs[0]
        row = eng.tab.fast.get((sid, rk))
        if row is None:
            row = eng.fill(sid, rk)
        if row is eng.zero_row:
            fix = eng.unsatisfiable_row(0, sid, remaining if rs_in is None else rs_in[0], lcd,
                                        on_unsatisfiable)
            if fix is not None:
                row = fix
    else:  # warm rows: indices into one table; a miss or an empty row goes the slow way
        tab = eng.tab
        index = tab.index
        if rs is None:
            rows = [index.get((s, r0)) for s in ids.tolist()]
        else:
            rows = [index.get(k) for k in zip(ids.tolist(), rs)]
        if None in rows or 0 in rows:
            tabs = [tab] * B
            done: dict = {}  # (set, r) → (table, row) filled in this call
            for b in range(B):
                if rows[b] is None:
                    k = (ids.item(b), r0 if rs is None else rs[b])
                    got = done.get(k)
                    if got is None:
                        got = done[k] = eng.fill_index(*k)
                    tabs[b], rows[b] = got
                if rows[b] == 0:
                    r_in = remaining if rs_in is None else rs_in[b]
                    fix = eng.unsatisfiable_row(b, ids.item(b), r_in, lcd, on_unsatisfiable)
                    if fix is not None:
                        fixes = fixes or {}
                        fixes[b] = fix
            tab = tabs[0] if B else tab
            if all(t is tab for t in tabs):
                tabs = None
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
    if B == 1:
        o[0] = row
    elif tabs is not None:  # a table was replaced mid-batch: each row from its own table
        for b in range(B):
            o[b] = tabs[b].rows[rows[b]]
    elif B:
        # mode="clip": with the default "raise", numpy buffers `out` (an extra copy)
        np.take(tab.rows, rows, axis=0, out=o, mode="clip")
    if fixes:
        for b, fix in fixes.items():
            o[b] = fix
    if st.active.device.type != "cpu":
        return out.to(st.active.device)
    return out


def _allowed_packed_tables(A: Any, st: AutomatonState, remaining, mode: str,
                           policy: str) -> torch.Tensor:
    """:func:`allowed_packed` by the batched kernel of :mod:`tractable.kernels.token_mask`
    (the CUDA path; on CPU tensors it runs the kernel's torch reference) → int32 [B, W] on
    ``A.device``."""
    from ..kernels import MaskTables, token_mask

    eng = mask_engine(A)
    eng.check_owner(st)
    tables = A._memo.get("mask_tables")
    if tables is None:
        dist = distance_to_accept(A).to(A.device)
        tables = A._memo["mask_tables"] = MaskTables.from_automaton(A, dist)
    act = st.active.to(A.device)
    if act.dim() != 2 or act.shape[1] != A.num_states:
        raise InvalidArgumentError(
            f"state has shape {tuple(act.shape)}; this automaton needs [B, {A.num_states}]")
    B = act.shape[0]
    rem = None
    if remaining is not None:
        rem = torch.tensor(_remaining_list(remaining, B), dtype=torch.int64, device=A.device)
    packed = token_mask(act, rem, tables, mode=mode)
    if rem is None or policy == "empty" or B == 0:
        return packed
    live = act.bool().any(1)
    if mode == "gcd":
        big = torch.iinfo(torch.int64).max
        need = torch.where(act.bool(), tables.distance[None, :], big).min(1).values.clamp(min=1)
        bad = live & (rem < need)
    else:
        need = torch.ones_like(rem)
        bad = live & (rem <= 0)
    if policy == "eos":
        return torch.where(bad[:, None], tables.eos_words[None, :], packed)
    if bool(bad.any()):
        b = int(torch.nonzero(bad)[0, 0])
        raise UnsatisfiableBudgetError(int(rem[b]), int(need[b]), row=b)
    return packed


def allowed(
    A: Any, st: AutomatonState, remaining: int | torch.Tensor | None, mode: str = "gcd", *,
    on_unsatisfiable: str = "raise",
) -> torch.Tensor:
    """bool [B, V]: the unpacked :func:`allowed_packed` (convenience; the packed form is the
    fast path).  Same arguments and errors."""
    packed = allowed_packed(A, st, remaining, mode, on_unsatisfiable=on_unsatisfiable)
    bits = unpack_bits(packed, A.vocab_size)  # ~8 us at 128k ids (np.unpackbits, no copy)
    dev = st.active.device
    # Tensor.to(cpu) on the (strided) unpacked view measured ~14 us even as a no-op: skip it
    return bits if dev.type == "cpu" else bits.to(dev)
