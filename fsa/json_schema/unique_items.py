"""``uniqueItems: true`` enforced exactly at token level: :class:`UniqueItemsAutomaton`.

Distinct items are not a regular language, so the token automaton accepts the arrays *without*
uniqueness, and the per-request state carries what the automaton cannot: for each open unique
array, the values of its completed items.  A token that would complete (or commit, below) a
duplicate item is masked out; ``advance`` over such a token gives a dead row; ``accepts``
rejects a text with duplicates.  (Small finite item domains never get here: the compiler builds
them exactly as a regular automaton, see :mod:`.unique_compile`.)

Where the unique arrays are
---------------------------
The compiler builds each unique array with *marker* bytes for its ``[``, item separator and
``]`` (:mod:`.unique_compile`).  The marked byte NFA T is finalized (markers keep the states of
unique arrays apart from all others), its demarked copy is lifted without renumbering, so every
token state *is* a byte state of T (``byte_states``).  The checker therefore knows exactly,
path by path, which ``[`` opened a unique array: an ``anyOf`` of a unique and a non-unique
array of the same shape keeps two sets of states, and only the unique one is checked.

Per-request state (:class:`UniqueItemsState`, an :class:`~.state.AutomatonState` whose
``active`` rows are the union below, so the automaton's own masks and ``is_accepting`` apply):
per row, the emitted bytes since the oldest open unique item, a JSON scanner state
(:mod:`.scan`: container stack, in-string) and a tuple of *configurations*
``(frames, set id)``: a set of token states that agree on the open unique arrays (``frames``:
per array its depth, the keys of its completed items and where its current item starts).
A token is read per configuration:

* no ``[`` in the token (the common case): the scanner's separator / close events at a frame's
  depth complete that frame's item (its value key, :func:`~.scan.value_key`, must be new),
  and the set advances by the automaton's own cached step;
* a ``[`` in the token: the marked NFA is simulated byte by byte from each state, so the paths
  that open a unique array (a marker edge) push a frame and the others do not.

A configuration also dies when its innermost frame's current item is *committed* to a
duplicate: a complete string / object / array, or a prefix of ``true``/``false``/``null``
(:func:`~.scan.committed_key`), waiting only for its separator.

Masks
-----
``allowed_packed`` starts from the automaton's mask (the same cached rows; no per-history data
ever goes into those caches) and re-checks only *candidates*: allowed tokens that, read from
the row's scanner mode, contain a byte where an item can end or commit
(:func:`~.scan.token_tables`), and only in rows with an open unique array (or, for tokens
that may open one, the tokens with a ``[``).  A candidate stays allowed iff some configuration
survives it and (``"gcd"``) reaches a state within ``remaining - 1`` tokens of acceptance.
Rows with no open unique array and tokens that cannot end an item cost nothing extra.

Budget guarantee (where GCD's "a walk within the budget never dead-ends" holds)
--------------------------------------------------------------------------------
* Arrays built by the exact route (small finite domains, :mod:`.unique_compile`): always,
  for every budget >= ``min_tokens_to_accept()`` -- the automaton is the exact language, so
  the invariant of :mod:`.state` applies unchanged (tested: booleans with ``minItems: 2`` at
  the minimum budget; with ``minItems: 3`` compiling raises EmptyLanguageError).
* Arrays checked here: every output is duplicate-free (exact), and the mask is exact one
  token ahead (a token is allowed iff some configuration survives it -- no completed or
  committed repeat -- within ``remaining - 1`` tokens of acceptance *ignoring uniqueness*).
  So the guarantee holds whenever, from each configuration the walk reaches, some
  continuation within the budget completes every pending item with a value not used yet.
  It fails (a) when the budget is tight against the items' shortest spellings
  (``minItems: 2`` strings at the minimum budget: the shortest text is ``["",""]``; or the
  walk spent its slack and the only item that still fits repeats one), and (b) when an
  unfinished item can only become used values (a string pattern with few values, a
  partially written enum-like string).  Then :meth:`UniqueItemsAutomaton.allowed_packed`
  raises :class:`UniqueItemsDeadEndError` (row, text) instead of returning an empty mask:
  no invalid output is ever produced (the SMC adapter gives such a particle weight 0).
  ``min_tokens_to_accept`` / ``distance_to_accept`` are those of the language without
  uniqueness: lower bounds.

Everything is batched over rows; states are immutable and reorderable (``select``, ``cat``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from ..errors import AutomatonFormatError, InvalidArgumentError, TractableError
from ..state import AutomatonState, _remaining_list
from . import scan as J
from .unique_compile import CLOSE, MARKERS, OPEN, SEP, lift_view

__all__ = ["UniqueItemsAutomaton", "UniqueItemsState", "UniqueItemsDeadEndError"]

_WS = b" \t\n\r"
_KIND_OF_BYTE = {0x5B: OPEN, 0x2C: SEP, 0x5D: CLOSE}
_MAX_KEYS = 1 << 16  # value keys cached per automaton (a pure function of the item's bytes)


class UniqueItemsDeadEndError(TractableError, RuntimeError):
    """A row of a uniqueItems automaton has no allowed token: every continuation within the
    budget would repeat an item (see the module docstring for when this can happen)."""

    def __init__(self, row: int, text: bytes, remaining: Any):
        self.row = row
        self.text = text
        self.remaining = remaining
        super().__init__(
            f"row {row}: every continuation within the budget ({remaining} tokens left) repeats "
            f"an item of a uniqueItems array after {text[-80:]!r}; raise max_new_tokens or "
            "bound the item domain")


class _Frame(NamedTuple):
    depth: int  # scanner stack length inside the array
    seen: frozenset  # value keys of the completed items
    start: int  # absolute offset of the current item's first byte


class _Row(NamedTuple):
    base: int  # absolute offset of text[0]
    text: bytes  # emitted bytes from ``base`` (empty while no unique array is open)
    scan: tuple  # json_scan state (stack, mode)
    configs: tuple  # ((frames, set id), ...); () = dead
    framed: bool  # some configuration has an open frame


@dataclass(frozen=True, eq=False)
class UniqueItemsState(AutomatonState):
    """A batch of uniqueItems states: ``active`` [B, S] (the union of each row's
    configurations; the automaton's masks read it) plus ``rows`` (per-row checker state,
    immutable and shared between rows after :meth:`select`)."""

    rows: tuple = ()

    def select(self, indices) -> UniqueItemsState:
        base = AutomatonState.select(self, indices)
        idx = torch.as_tensor(indices, dtype=torch.long).tolist()
        return UniqueItemsState(base.active, base.final, base.set_ids, base._engine,
                                tuple(self.rows[i] for i in idx))

    @staticmethod
    def cat(states: list) -> UniqueItemsState:
        base = AutomatonState.cat(states)
        rows = tuple(r for s in states for r in s.rows)
        return UniqueItemsState(base.active, base.final, base.set_ids, base._engine, rows)

    def to(self, device) -> UniqueItemsState:
        return UniqueItemsState(self.active.to(device), self.final.to(device), self.set_ids,
                                self._engine, self.rows)

    def texts(self) -> list[bytes]:
        """Per row, the bytes the checker still holds (from the oldest open unique item)."""
        return [r.text for r in self.rows]


class UniqueItemsAutomaton:
    """A token automaton of a JSON Schema with ``uniqueItems`` arrays checked per request.

    Same interface as :class:`~.automaton.TokenAutomaton` for decoding: :meth:`start`,
    :meth:`advance`, :meth:`allowed_packed`, :meth:`allowed`, :meth:`accepts`,
    :meth:`viable`, :meth:`distance_to_accept`, :meth:`min_tokens_to_accept`,
    :meth:`check_budget`, ``vocab_size``, ``eos_token_ids``; :meth:`as_constraint` for
    :func:`tractable.smc` and the samplers.  ``automaton`` is the underlying
    :class:`~.automaton.TokenAutomaton` (its language ignores uniqueness).

    Build with :func:`~.compile_json_schema` (or :meth:`from_marked_nfa`).
    """

    def __init__(self, automaton, marked, vocab):
        bs = automaton._memo.get("byte_states")
        if bs is None:
            raise InvalidArgumentError(
                "the automaton does not record its byte states; build it with "
                "UniqueItemsAutomaton.from_marked_nfa")
        self.automaton = automaton
        self.marked = marked
        self._tb = vocab.token_bytes
        self._cands, self._opens = J.token_tables(vocab)
        self._byte_of = np.asarray(bs, dtype=np.int64)
        self._tok_of = np.full(marked.num_states, -1, dtype=np.int64)
        self._tok_of[self._byte_of] = np.arange(self._byte_of.size)
        self._eos = frozenset(int(e) for e in automaton.eos_token_ids)
        self._out: dict[int, list] = {}  # byte state -> [(plain mask, marker mask, dst)]
        self._union: dict[tuple, int] = {}  # set ids -> id of their union
        self._mind: dict[int, int] = {}  # set id -> min distance to accept of its members
        self._keys: dict[bytes, Any] = {}  # item bytes -> value key
        self._edges = None

    @classmethod
    def from_marked_nfa(cls, marked, vocab, meta: dict | None = None) -> UniqueItemsAutomaton:
        """Lift the finalized marked byte NFA (:mod:`.unique_compile`) over ``vocab``.

        Raises:
            EmptyLanguageError: no token sequence is accepted (even without uniqueness).
        """
        from ..automaton import TokenAutomaton

        meta = dict(meta or {})
        meta["unique_items"] = "checker"
        A = TokenAutomaton.from_byte_nfa(lift_view(marked), vocab, meta=meta)
        return cls(A, marked, vocab)

    # ------------------------------------------------------------ delegated facts

    @property
    def vocab_size(self) -> int:
        return self.automaton.vocab_size

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.automaton.eos_token_ids

    @property
    def fingerprint(self) -> str:
        return self.automaton.fingerprint

    @property
    def num_states(self) -> int:
        return self.automaton.num_states

    @property
    def meta(self) -> dict:
        return self.automaton.meta

    @property
    def device(self) -> torch.device:
        return self.automaton.device

    def distance_to_accept(self) -> torch.Tensor:
        """int64 [S]: the automaton's distances (uniqueness ignored: lower bounds)."""
        return self.automaton.distance_to_accept()

    def min_tokens_to_accept(self) -> int:
        """Fewest tokens of an output without uniqueness (a lower bound here)."""
        return self.automaton.min_tokens_to_accept()

    def check_budget(self, n: int) -> None:
        """:class:`~.errors.UnsatisfiableBudgetError` below :meth:`min_tokens_to_accept`."""
        self.automaton.check_budget(n)

    def to(self, device) -> UniqueItemsAutomaton:
        """A copy whose automaton lives on ``device`` (checker state stays on the CPU)."""
        out = copy.copy(self)
        out.automaton = self.automaton.to(device)
        out._union, out._mind = {}, {}  # set ids belong to the new automaton's engine
        return out

    def save(self, path) -> None:
        """Write the automaton and its checker to one ``.safetensors`` file: the token
        automaton as :meth:`~.automaton.TokenAutomaton.save` writes it, plus (format version 3,
        part ``"unique_items"``, :mod:`..automaton_file`) the marked byte NFA and the byte state
        of each token state.  Read it back with :meth:`load` or
        :func:`~..automaton_load.load_automaton` (:meth:`TokenAutomaton.load` refuses it)."""
        e = self.marked.edges
        n = len(e)
        masks = b"".join(m.to_bytes(32, "little") for _, m, _ in e)
        final = torch.zeros(self.marked.num_states, dtype=torch.uint8)
        final[sorted(self.marked.finals)] = 1
        self.automaton._save(path, "unique_items", {
            "marked_src": torch.tensor([x[0] for x in e], dtype=torch.int64),
            "marked_dst": torch.tensor([x[2] for x in e], dtype=torch.int64),
            "marked_mask": torch.frombuffer(bytearray(masks), dtype=torch.uint8).reshape(n, 32)
            if n else torch.zeros((0, 32), dtype=torch.uint8),
            "marked_final": final,
            "byte_states": torch.from_numpy(self._byte_of.copy()),
        })

    @classmethod
    def load(cls, path, vocabulary, *, device: str = "cpu") -> UniqueItemsAutomaton:
        """Read a file written by :meth:`save` (checked as
        :meth:`~.automaton.TokenAutomaton.load` checks its files, and the checker part: ranges,
        shapes, a one-to-one token -> byte state map that keeps the start and the accepting
        states).

        Raises:
            AutomatonFileNotFoundError, VocabularyMismatchError, AutomatonFormatError: as
                :meth:`~.automaton.TokenAutomaton.load`; AutomatonFormatError also for a file
                without the checker part (a plain automaton: ``TokenAutomaton.load`` reads it).
        """
        from ..automaton import TokenAutomaton

        A, part, tensors = TokenAutomaton._load(path, vocabulary)
        if part != "unique_items":
            raise AutomatonFormatError(f"{path} holds no uniqueItems checker (a plain automaton: "
                                       "read it with TokenAutomaton.load)")
        out = cls._from_part(A, tensors, vocabulary, path)
        return out if device == "cpu" else out.to(device)

    @classmethod
    def _from_part(cls, A, t: dict, vocabulary, path) -> UniqueItemsAutomaton:
        """The automaton of the loaded token automaton ``A`` (CPU) and the ``unique_items`` part
        ``t`` (dtypes and ranks checked by the caller).  Raises AutomatonFormatError."""
        from ..nfa import ByteNFA

        def bad(what: str):
            return AutomatonFormatError(f"{path}: uniqueItems checker: {what}")

        src, dst, mask = t["marked_src"].numpy(), t["marked_dst"].numpy(), t["marked_mask"]
        fin, bs = t["marked_final"].numpy(), t["byte_states"].numpy()
        Sb, S = int(fin.size), A.num_states
        if Sb < 1 or not src.shape == dst.shape == mask.shape[:1] or mask.shape[1] != 32:
            raise bad(f"shapes do not fit ({Sb} byte states, edges {src.shape}/{dst.shape}/"
                      f"{tuple(mask.shape)})")
        if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= Sb):
            raise bad(f"edge states outside 0..{Sb - 1}")
        if fin.size and fin.max() > 1:
            raise bad("marked_final holds values other than 0 and 1")
        if bs.shape != (S,) or bs.min() < 0 or bs.max() >= Sb or bs[0] != 0:
            raise bad(f"byte_states is not {S} byte states starting at 0")
        if np.unique(bs).size != S:
            raise bad("two token states share a byte state")
        if not np.array_equal(fin[bs].astype(bool), A.final.numpy()):
            raise bad("the accepting token states are not those of their byte states")
        raw = mask.contiguous().numpy().tobytes()
        masks = [int.from_bytes(raw[32 * i:32 * i + 32], "little") for i in range(src.size)]
        if not all(masks):
            raise bad("an edge with an empty byte set")
        marked = ByteNFA(Sb, 0, frozenset(np.nonzero(fin)[0].tolist()),
                         tuple(zip(src.tolist(), masks, dst.tolist(), strict=True)))
        A._memo["byte_states"] = bs.copy()
        return cls(A, marked, vocabulary)

    @property
    def num_edges(self) -> int:
        return self.automaton.num_edges

    @property
    def num_labels(self) -> int:
        return self.automaton.num_labels

    def memory_bytes(self) -> dict[str, int]:
        """The automaton's :meth:`~.automaton.TokenAutomaton.memory_bytes` plus ``checker``:
        the marked byte NFA as :meth:`save` stores it (int64 source and target, 32 bytes of
        byte set per edge, a flag per byte state) and the token -> byte state map; the
        Python tuples that hold it in memory take several times more."""
        out = dict(self.automaton.memory_bytes())
        m = self.marked
        out["checker"] = 48 * m.num_edges + m.num_states + 8 * self._byte_of.size
        out["total"] += out["checker"]
        return out

    def stats(self) -> dict[str, Any]:
        return dict(self.automaton.stats(), unique_items="checker",
                    memory_bytes=self.memory_bytes()["total"])

    def as_constraint(self):
        """This automaton as a :class:`~tractable.decode.constraints.Constraint` (SMC, AWRS,
        CARS): :func:`~tractable.decode.constraints.as_constraint` calls this."""
        from ...decode.unique_constraint import UniqueItemsConstraint

        return UniqueItemsConstraint(self)

    def __repr__(self) -> str:
        return f"UniqueItemsAutomaton({self.automaton!r})"

    # ------------------------------------------------------------ states

    def _engine(self):
        return self.automaton._mask_engine()

    def _make(self, rows: list[_Row]) -> UniqueItemsState:
        eng = self._engine()
        ids = np.array([self._union_id(r.configs) for r in rows], dtype=np.int64)
        base = eng.make_state(ids, self.automaton.final)
        return UniqueItemsState(base.active, base.final, base.set_ids, base._engine, tuple(rows))

    def start(self, batch_size: int = 1) -> UniqueItemsState:
        """``batch_size`` copies of the initial state (no open array)."""
        if batch_size < 0:
            raise InvalidArgumentError(f"batch_size must be >= 0, got {batch_size}")
        eng = self._engine()
        row = _Row(0, b"", J.START, (((), eng.initial_id),), False)
        return self._make([row] * batch_size)

    def _rows_of(self, st) -> tuple:
        rows = getattr(st, "rows", None)
        if rows is None or len(rows) != st.batch_size:
            raise InvalidArgumentError(
                "not a UniqueItemsState of this automaton (use start()/advance())")
        return rows

    def advance(self, st: UniqueItemsState, token_ids) -> UniqueItemsState:
        """The state after reading ``token_ids`` (LongTensor [B]).  EOS, special or
        out-of-range ids, tokens outside the language and tokens that complete a duplicate
        item give a dead row (:meth:`AutomatonState.is_dead`)."""
        rows = self._rows_of(st)
        toks = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else list(token_ids)
        if isinstance(toks, int):
            toks = [toks]
        if len(toks) != len(rows):
            raise InvalidArgumentError(
                f"advance() got {len(toks)} token ids for a batch of {len(rows)}")
        out = [self._step_row(r, int(t)) for r, t in zip(rows, toks)]
        new = self._make(out)
        return new if st.active.device.type == "cpu" else new.to(st.active.device)

    # ------------------------------------------------------------ one row, one token

    def _dead(self, row: _Row) -> _Row:
        return _Row(row.base, b"", row.scan, (), False)

    def _step_row(self, row: _Row, tok: int) -> _Row:
        configs = row.configs
        if not configs:
            return row
        data = self._tb[tok] if 0 <= tok < len(self._tb) and tok not in self._eos else None
        if data is None:
            return self._dead(row)
        res = self._step_configs(row, tok, data)
        if res is None:
            return self._dead(row)
        new_configs, scan, text = res
        framed = any(fr for fr, _ in new_configs)
        if framed:
            return _Row(row.base, text, scan, new_configs, True)
        return _Row(row.base + len(text), b"", scan, new_configs, False)

    def _step_configs(self, row: _Row, tok: int, data: bytes):
        """(configurations, scanner state, text) after ``tok``, or None when none survives."""
        text = row.text + data
        off = row.base + len(row.text)
        scan, events = J.scan(row.scan, data, off)
        opens = any(k == J.EV_OPEN for _, k, _ in events)
        eng = self._engine()
        out: dict[tuple, list[int]] = {}
        for frames, sid in row.configs:
            if opens:
                for fr, nsid in self._simulate(frames, sid, data, off, text, row.base, events):
                    if not fr or self._commit_ok(fr[-1], scan, text, row.base):
                        out.setdefault(fr, []).append(nsid)
                continue
            fr = frames
            for o, kind, depth in events:
                if fr and fr[-1].depth == depth:
                    fr = self._complete(fr, text, row.base, o, kind == J.EV_CLOSE)
                    if fr is None:
                        break
            if fr is None:
                continue
            nsid = eng.step(sid, tok)
            if nsid == eng.empty_id:
                continue
            if fr and not self._commit_ok(fr[-1], scan, text, row.base):
                continue
            out.setdefault(fr, []).append(nsid)
        if not out:
            return None
        configs = tuple((fr, sids[0] if len(sids) == 1 else self._union_id_of(sids))
                        for fr, sids in out.items())
        return configs, scan, text

    def _key(self, item: bytes) -> Any:
        k = self._keys.get(item)
        if k is None:
            k = J.value_key(item)
            if len(self._keys) >= _MAX_KEYS:
                self._keys.clear()
            self._keys[item] = k
        return k

    def _complete(self, fr: tuple, text: bytes, base: int, o: int, close: bool):
        """Frames after the innermost frame's item ends at absolute offset ``o`` (a separator
        or, ``close``, the array's ``]``); None if the item repeats one."""
        f = fr[-1]
        item = text[f.start - base:o - base].strip(_WS)
        seen = f.seen
        if item:
            k = self._key(item)
            if k in seen:
                return None
            seen = seen | {k}
        if close:
            return fr[:-1]
        return fr[:-1] + (_Frame(f.depth, seen, o + 1),)

    def _commit_ok(self, f: _Frame, scan: tuple, text: bytes, base: int) -> bool:
        """False when frame ``f``'s current item is already a value it holds (module
        docstring: committed)."""
        stack, mode = scan
        if mode != J.OUT or len(stack) != f.depth or not f.seen:
            return True
        item = text[f.start - base:].strip(_WS)
        if not item:
            return True
        k = J.committed_key(item)
        return k is None or k not in f.seen

    # ------------------------------------------------------------ byte-level simulation

    def _out_of(self, s: int) -> list:
        hit = self._out.get(s)
        if hit is None:
            if self._edges is None:  # finalized: edges sorted by source
                e = self.marked.edges
                src = np.fromiter((x[0] for x in e), dtype=np.int64, count=len(e))
                if src.size > 1 and bool((src[1:] < src[:-1]).any()):
                    e = sorted(e)
                    src = np.sort(src)
                self._edges = (e, np.searchsorted(src, np.arange(self.marked.num_states + 1)))
            e, ptr = self._edges
            hit = self._out[s] = [(m & ~MARKERS, m & MARKERS, d)
                                  for _, m, d in e[ptr[s]:ptr[s + 1]]]
        return hit

    def _simulate(self, frames, sid, data, off, text, base, events):
        """Read ``data`` on the marked NFA from the states of set ``sid`` (all with ``frames``);
        returns [(frames, set id)] of the surviving token states."""
        eng = self._engine()
        depth_at = {o: d for o, k, d in events if k == J.EV_OPEN}
        paths = {(int(self._byte_of[q]), frames) for q in eng.set_members[sid].tolist()}
        for i, c in enumerate(data):
            o = off + i
            kind = _KIND_OF_BYTE.get(c)
            bit = 1 << kind if kind is not None else 0
            nxt = set()
            for s, fr in paths:
                for plain, marks, d in self._out_of(s):
                    if plain >> c & 1:
                        nxt.add((d, fr))
                    if marks & bit:
                        if kind == OPEN:
                            nxt.add((d, fr + (_Frame(depth_at[o], frozenset(), o + 1),)))
                        elif fr:
                            f2 = self._complete(fr, text, base, o, kind == CLOSE)
                            if f2 is not None:
                                nxt.add((d, f2))
            paths = nxt
            if not paths:
                return []
        S = self.automaton.num_states
        by_frames: dict[tuple, np.ndarray] = {}
        for s, fr in paths:
            q = self._tok_of[s]
            if q < 0:
                continue  # not a token state: no token-level continuation
            row = by_frames.get(fr)
            if row is None:
                row = by_frames[fr] = np.zeros(S, dtype=bool)
            row[q] = True
        return [(fr, eng.intern(row)) for fr, row in by_frames.items()]

    # ------------------------------------------------------------ sets

    def _union_id_of(self, sids: list[int]) -> int:
        key = tuple(sorted(set(sids)))
        if len(key) == 1:
            return key[0]
        hit = self._union.get(key)
        if hit is None:
            eng = self._engine()
            hit = self._union[key] = eng.intern(np.logical_or.reduce(eng.set_rows[list(key)]))
        return hit

    def _union_id(self, configs: tuple) -> int:
        if not configs:
            return self._engine().empty_id
        if len(configs) == 1:
            return configs[0][1]
        return self._union_id_of([sid for _, sid in configs])

    def _min_dist(self, sid: int) -> int:
        d = self._mind.get(sid)
        if d is None:
            eng = self._engine()
            m = eng.set_members[sid]
            d = self._mind[sid] = int(eng.dist[m].min()) if m.size else 1 << 62
        return d

    # ------------------------------------------------------------ masks

    def allowed_packed(self, st: UniqueItemsState, remaining, mode: str = "gcd", *,
                       out: torch.Tensor | None = None,
                       on_dead_end: str = "raise",
                       on_unsatisfiable: str = "raise") -> torch.Tensor:
        """int32 [B, ceil(V/32)]: the automaton's mask (:func:`tractable.fsa.masks.
        allowed_packed`, same arguments) without the tokens that complete or commit a
        duplicate item, or (``"gcd"``) whose surviving states are beyond ``remaining - 1``.

        Raises:
            UniqueItemsDeadEndError: a live row had allowed tokens and has none left
                (``on_dead_end="raise"``, the default; ``"empty"`` returns the empty row).
        """
        rows = self._rows_of(st)
        packed = self.automaton.allowed_packed(st, remaining, mode, out=out,
                                               on_unsatisfiable=on_unsatisfiable)
        B = len(rows)
        todo = [b for b in range(B) if rows[b].configs]
        if not todo:
            return packed
        host = packed if packed.device.type == "cpu" else packed.cpu()
        p = host.numpy()
        rs = _remaining_list(remaining, B)
        changed = False
        for b in todo:
            if self._fix_row(rows[b], p[b], rs[b], mode == "lcd"):
                changed = True
                if not p[b].any() and on_dead_end == "raise":
                    raise UniqueItemsDeadEndError(b, rows[b].text, rs[b])
        if changed and host is not packed:
            packed.copy_(host)
        return packed

    def _fix_row(self, row: _Row, prow: np.ndarray, r, lcd: bool) -> bool:
        """Clear the candidates of ``prow`` (int32 [W], in place) that no configuration
        survives; True if a bit was cleared."""
        mode = row.scan[1]
        cand = prow & self._cands[mode]
        if not row.framed:
            cand &= self._opens[mode]
        if not cand.any():
            return False
        toks = np.flatnonzero(np.unpackbits(cand.view(np.uint8), bitorder="little"))
        limit = None if (lcd or r is None) else int(r) - 1
        words = prow.view(np.uint32)
        cleared = False
        for v in toks.tolist():
            if v in self._eos:
                continue
            res = self._step_configs(row, v, self._tb[v])
            ok = res is not None and (limit is None or min(
                self._min_dist(sid) for _, sid in res[0]) <= limit)
            if not ok:
                words[v >> 5] &= np.uint32(0xFFFFFFFF ^ (1 << (v & 31)))
                cleared = True
        return cleared

    def allowed(self, st: UniqueItemsState, remaining, mode: str = "gcd", *,
                on_unsatisfiable: str = "raise") -> torch.Tensor:
        """bool [B, V]: the unpacked :meth:`allowed_packed`."""
        from ..automaton import unpack_bits

        packed = self.allowed_packed(st, remaining, mode, on_unsatisfiable=on_unsatisfiable)
        return unpack_bits(packed, self.vocab_size).to(
            st.active.device)

    # ------------------------------------------------------------ whole sequences

    def _run(self, token_ids):
        ids = [int(t) for t in token_ids]
        ended = bool(ids) and ids[-1] in self._eos
        if ended:
            ids = ids[:-1]
        st = self.start(1)
        for t in ids:
            if t in self._eos:
                return None, ended
            st = self.advance(st, torch.tensor([t]))
            if not st.rows[0].configs:
                return None, ended
        return st, ended

    def accepts(self, token_ids) -> bool:
        """Whether the token sequence is accepted: in the language and no unique array with
        two equal items.  A single trailing EOS id is allowed."""
        st, _ = self._run(token_ids)
        return st is not None and bool(st.is_accepting()[0])

    def viable(self, token_ids) -> bool:
        """No duplicate so far and the automaton can continue (after a trailing EOS: accepted).
        A prefix whose every continuation repeats an item may still count as viable."""
        st, ended = self._run(token_ids)
        if st is None:
            return False
        return bool(st.is_accepting()[0]) if ended else True
