"""TokenAutomaton: an NFA over token ids, stored as tensors (paper 002, Def. 3.2).

Layout (S states, E edges, L distinct label sets, V vocabulary ids, W = ceil(V / 32)):

* ``edge_src``, ``edge_dst``: int64 [E] — one edge per (source, destination) pair;
* ``edge_label``: int64 [E] — index of the edge's label set;
* ``labels``: int32 [L, W] — label sets bit-packed: token ``v`` is in set ``l`` iff bit
  ``v % 32`` of ``labels[l, v // 32]`` is set.  Edges with the same token set share a row, so
  ``B`` (E × V, 0/1) is never dense at real vocabulary sizes;
* ``initial``, ``final``: bool [S]; state 0 is the single initial state.

``T_out`` [S×E], ``T_in`` [E×S] and ``B`` [E×V] of Def. 3.2 are views built from these (sparse
or packed), and :meth:`TokenAutomaton.edge_hmm` gives the edge-HMM view of Def. 4.2
(``A_f = T_in T_out``, edge-lifted initial and final vectors).

Instances are frozen: every method returns new objects and nothing mutates the automaton, so
one compiled automaton is shared read-only by any number of requests.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import masks as _masks
from .arrays import ranges as _ranges
from .arrays import run_starts as _run_starts
from .arrays import sorted_unique
from .automaton_file import (  # noqa: F401 - FORMAT_VERSION, _checksum: re-exported
    _FORMAT_NAME,
    _HEADER_KEYS,
    _PART_FORMAT,
    _READ_VERSIONS,
    _TENSOR_FORMAT,
    FORMAT_VERSION,
    PLAIN_VERSION,
    _checksum,
    _deflate,
    _inflate,
    jsonable_meta,
)
from .bits import pack_bits, unpack_bits
from .errors import (
    AutomatonFileNotFoundError,
    AutomatonFormatError,
    EmptyLanguageError,
    VocabularyMismatchError,
)
from .gc_pause import paused_gc
from .lift import LiftedEdges, lift
from .lift_budget import lift_budget
from .nfa import ByteNFA
from .progress import compile_stage, report
from .token_rows import SparseRows, _or_groups, dedup_rows, dedup_sets, pack_rows, take_rows
from .vocabulary import TokenVocabulary, require_vocabulary

__all__ = ["TokenAutomaton", "LabelMatrix", "EdgeHMM", "FORMAT_VERSION", "pack_bits",
           "unpack_bits"]



@dataclass(frozen=True, eq=False)
class LabelMatrix:
    """``B_f`` [E × V] of Def. 3.2 without materializing it.

    ``packed``: int32 [L, W] unique label sets; ``edge_label``: int64 [E] row per edge.
    """

    packed: torch.Tensor
    edge_label: torch.Tensor
    vocab_size: int

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.edge_label.shape[0]), self.vocab_size)

    def row_sizes(self) -> torch.Tensor:
        """int64 [L]: tokens per label set."""
        p = self.packed.numpy() if self.packed.device.type == "cpu" else self.packed.cpu().numpy()
        return torch.from_numpy(
            np.unpackbits(p.view(np.uint8), axis=1, bitorder="little").sum(axis=1).astype(np.int64)
        )

    def dense(self, max_elements: int = 50_000_000) -> torch.Tensor:
        """bool [E, V].  Raises ``MemoryError`` past ``max_elements`` (use the packed form)."""
        E, V = self.shape
        if E * V > max_elements:
            raise MemoryError(
                f"B is {E}×{V}; refusing to densify (packed rows: {tuple(self.packed.shape)})"
            )
        rows = unpack_bits(self.packed.cpu(), V)
        return rows[self.edge_label.cpu()].to(self.packed.device)

    def memory_bytes(self) -> int:
        return self.packed.numel() * 4 + self.edge_label.numel() * 8


@dataclass(frozen=True, eq=False)
class EdgeHMM:
    """The edge HMM induced by the automaton (Def. 4.2): hidden states are edges.

    ``A_f``: sparse [E×E] float (``T_in @ T_out``); ``B_f``: :class:`LabelMatrix` [E×V];
    ``initial``: float [E] (``T_out^T π``); ``final``: float [E] (``T_in f``).
    """

    A_f: torch.Tensor
    B_f: LabelMatrix
    initial: torch.Tensor
    final: torch.Tensor


@dataclass(frozen=True, eq=False)
class TokenAutomaton:
    """An NFA over token ids (see the module docstring for the tensor layout).

    Build one with :func:`tractable.compile_regex` (or the JSON Schema / grammar compilers), or
    :meth:`from_byte_nfa`; reload with :meth:`load`.  Requests (states, budget-aware masks)
    are served by the methods under "requests", which call :mod:`.masks`.  One automaton may
    be shared by several threads (:mod:`.masks`, "Threads").
    """

    num_states: int
    vocab_size: int
    edge_src: torch.Tensor
    edge_dst: torch.Tensor
    edge_label: torch.Tensor
    labels: torch.Tensor
    initial: torch.Tensor
    final: torch.Tensor
    fingerprint: str
    eos_token_ids: tuple[int, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_byte_nfa(
        cls, nfa: ByteNFA, vocab: TokenVocabulary, *, meta: dict[str, Any] | None = None
    ) -> TokenAutomaton:
        """Lift a byte-level NFA to tokens (:func:`~.lift.lift`), trim it at token level and
        pack its labels.

        Raises:
            EmptyLanguageError: no token sequence over ``vocab`` is accepted.
            VocabularyError: ``vocab`` is not a :class:`~.vocabulary.TokenVocabulary`.
            LiftSizeError: the lift and the label rows need more intermediate memory than
                their budget (:mod:`.lift_budget`).
        """
        require_vocabulary(vocab)
        t0 = time.perf_counter()
        with compile_stage(), paused_gc(), lift_budget():
            report(f"lift of {nfa.num_states:,} byte states")
            lifted = lift(nfa, vocab)
            report(f"label rows of {lifted.num_states:,} states")
            out = cls._from_lifted(lifted, vocab, dict(meta or {}))
        out.meta["compile_seconds"] = time.perf_counter() - t0
        return out

    @classmethod
    def _from_lifted(
        cls, lifted: LiftedEdges, vocab: TokenVocabulary, meta: dict
    ) -> TokenAutomaton:
        S0 = lifted.num_states
        V = vocab.size
        src, dst, grp = lifted.pair_src, lifted.pair_dst, lifted.pair_grp
        key = src * S0 + dst
        if key.size:
            bnd = np.concatenate([[True], key[1:] != key[:-1]])
        else:
            bnd = np.zeros(0, dtype=bool)
        x_first = np.nonzero(bnd)[0]
        x_key = key[x_first]  # explicit edges (sorted, unique)
        x_ptr = np.concatenate([x_first, [key.size]])
        r_key = lifted.row_src * S0 + lifted.row_dst  # shared-row contributions
        all_key = sorted_unique(np.concatenate([x_key, r_key]))
        e_src = all_key // S0
        e_dst = all_key % S0
        # token-level trimming: reachable from state 0 and able to reach a final state
        keep_state, order = _trim_states(S0, e_src, e_dst, lifted.final, start=0)
        if not keep_state[0]:
            raise EmptyLanguageError(
                "the constraint accepts no token sequence over this vocabulary"
                + (f" ({meta['pattern']!r})" if "pattern" in meta else "")
            )
        new_id = np.full(S0, -1, dtype=np.int64)
        new_id[order] = np.arange(order.size)
        kept = np.nonzero(keep_state[e_src] & keep_state[e_dst])[0]
        kept_key = all_key[kept]
        # explicit labels: exact dedup on sets of token groups (groups are disjoint and
        # non-empty, so equal group sets <=> equal token sets), then pack each distinct set once
        xi = np.searchsorted(kept_key, x_key)
        x_in = np.nonzero((xi < kept_key.size) & (kept_key[np.minimum(xi, kept_key.size - 1)]
                                                   == x_key))[0] if kept_key.size else x_key[:0]
        label_of_x, rep_edges = dedup_sets(grp, x_ptr[x_in], x_ptr[x_in + 1])
        packed = _pack_label_rows(grp, rep_edges, lifted.grp_ptr, lifted.grp_tokens, V)
        label_of_edge = np.full(kept.size, -1, dtype=np.int64)
        label_of_edge[xi[x_in]] = label_of_x
        packed, label_of_edge = _merge_rows(packed, label_of_edge, kept_key, r_key,
                                            lifted.row_id, lifted.rows, lifted.row_hash)
        e_src, e_dst = e_src[kept], e_dst[kept]
        n_src = new_id[e_src]
        n_dst = new_id[e_dst]
        eorder = np.lexsort((n_dst, n_src))
        S = order.size
        final = np.zeros(S, dtype=bool)
        final[new_id[np.nonzero(lifted.final & keep_state)[0]]] = True
        initial = np.zeros(S, dtype=bool)
        initial[0] = True
        meta.setdefault("byte_states", S0)
        meta["subsets_expanded"] = lifted.subsets_expanded
        meta["components"] = lifted.components
        out = cls(
            num_states=S,
            vocab_size=V,
            edge_src=torch.from_numpy(n_src[eorder].copy()),
            edge_dst=torch.from_numpy(n_dst[eorder].copy()),
            edge_label=torch.from_numpy(np.asarray(label_of_edge, dtype=np.int64)[eorder]),
            labels=torch.from_numpy(packed.view(np.int32)),
            initial=torch.from_numpy(initial),
            final=torch.from_numpy(final),
            fingerprint=vocab.fingerprint,
            eos_token_ids=tuple(vocab.eos_token_ids),
            meta=meta,
        )
        out._memo["byte_states"] = order  # int64 [S]: the lifted NFA's state of each state
        return out

    # ------------------------------------------------------------------ sizes and views

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])

    @property
    def num_labels(self) -> int:
        """Number of distinct label sets (rows of :attr:`labels`)."""
        return int(self.labels.shape[0])

    @property
    def device(self) -> torch.device:
        return self.labels.device

    @property
    def T_out(self) -> torch.Tensor:
        """Sparse float32 [S, E]: ``T_out[i, k] = 1`` iff edge k leaves state i."""
        E = self.num_edges
        idx = torch.stack([self.edge_src, torch.arange(E, device=self.device)])
        return torch.sparse_coo_tensor(idx, torch.ones(E, device=self.device),
                                       (self.num_states, E)).coalesce()

    @property
    def T_in(self) -> torch.Tensor:
        """Sparse float32 [E, S]: ``T_in[k, j] = 1`` iff edge k enters state j."""
        E = self.num_edges
        idx = torch.stack([torch.arange(E, device=self.device), self.edge_dst])
        return torch.sparse_coo_tensor(idx, torch.ones(E, device=self.device),
                                       (E, self.num_states)).coalesce()

    @property
    def B(self) -> LabelMatrix:
        """``B_f`` [E, V] as a :class:`LabelMatrix` (packed, deduplicated rows)."""
        return LabelMatrix(self.labels, self.edge_label, self.vocab_size)

    def edge_hmm(self) -> EdgeHMM:
        """The edge-HMM view of Def. 4.2."""
        A_f = torch.sparse.mm(self.T_in, self.T_out).coalesce()
        init = self.initial.float()[self.edge_src]
        fin = self.final.float()[self.edge_dst]
        return EdgeHMM(A_f, self.B, init, fin)

    def memory_bytes(self) -> dict[str, int]:
        """Bytes held, per part (``labels`` dominates at real vocabulary sizes)."""
        return {
            "labels": self.labels.numel() * 4,
            "edges": 3 * 8 * self.num_edges,
            "states": 2 * self.num_states,
            "total": self.labels.numel() * 4 + 24 * self.num_edges + 2 * self.num_states,
        }

    def stats(self) -> dict[str, Any]:
        """Sizes, memory and compile time, for CLIs and benchmarks."""
        return {
            "states": self.num_states,
            "edges": self.num_edges,
            "label_sets": self.num_labels,
            "vocab_size": self.vocab_size,
            "memory_bytes": self.memory_bytes()["total"],
            "compile_seconds": self.meta.get("compile_seconds"),
        }

    def to(self, device: str | torch.device) -> TokenAutomaton:
        """A copy whose tensors live on ``device`` (the original is unchanged).  The copy
        shares the original's identity: each accepts the other's states."""
        out = TokenAutomaton(
            self.num_states, self.vocab_size, self.edge_src.to(device), self.edge_dst.to(device),
            self.edge_label.to(device), self.labels.to(device), self.initial.to(device),
            self.final.to(device), self.fingerprint, self.eos_token_ids, dict(self.meta),
        )
        out._memo["identity"] = _masks.identity(self)
        return out

    # ------------------------------------------------------------------ requests (fsa/masks.py)

    def distance_to_accept(self) -> torch.Tensor:
        """int64 [S]: fewest text tokens from each state to an accepting state
        (:func:`.masks.distance_to_accept`; eq. 4 as a threshold)."""
        return _masks.distance_to_accept(self)

    def backward_messages(self, n: int) -> torch.Tensor:
        """bool [n + 1, S]: eq. 4's β_t for t = 0..n (:func:`.masks.backward_messages`)."""
        return _masks.backward_messages(self, n)

    def min_tokens_to_accept(self) -> int:
        """Fewest text tokens of an accepted output (:func:`.masks.min_tokens_to_accept`)."""
        return _masks.min_tokens_to_accept(self)

    def check_budget(self, n: int) -> None:
        """Raise :class:`~.errors.UnsatisfiableBudgetError` if no accepted output fits in ``n``
        tokens (:func:`.masks.check_budget`)."""
        _masks.check_budget(self, n)

    def _mask_engine(self) -> _masks.MaskEngine:
        return _masks.mask_engine(self)

    # The per-request methods are the functions of fsa/masks.py themselves (``self`` is their
    # first argument ``A``): no wrapper on the decode hot path.  See their docstrings there.
    #: ``start(batch_size=1) -> AutomatonState``: the initial set {0} per row (eq. 3).
    start = _masks.start
    #: ``advance(st, token_ids) -> AutomatonState``: read one token per row (eq. 3).
    advance = _masks.advance
    #: ``allowed_packed(st, remaining, mode="gcd", *, out=None, on_unsatisfiable="raise")``
    #: -> int32 [B, ceil(V/32)]: the GCD / LCD mask of each row, bit-packed.  A live row below
    #: its minimum budget (or remaining <= 0) raises UnsatisfiableBudgetError by default;
    #: ``on_unsatisfiable="eos"`` gives it only the EOS ids, ``"empty"`` the all-zero row.
    allowed_packed = _masks.allowed_packed
    #: ``allowed(st, remaining, mode="gcd", *, on_unsatisfiable="raise")`` -> bool [B, V].
    allowed = _masks.allowed

    def __repr__(self) -> str:
        kb = self.memory_bytes()["total"] / 1024
        return (
            f"TokenAutomaton(states={self.num_states}, edges={self.num_edges}, "
            f"label_sets={self.num_labels}, vocab={self.vocab_size}, {kb:.0f} KiB)"
        )

    # ------------------------------------------------------------------ CPU simulation

    @cached_property
    def _np(self) -> dict[str, np.ndarray]:
        src = self.edge_src.cpu().numpy()
        order = np.argsort(src, kind="stable")
        out_ptr = np.zeros(self.num_states + 1, dtype=np.int64)
        np.add.at(out_ptr, src + 1, 1)
        out_ptr = np.cumsum(out_ptr)
        return {
            "out_ptr": out_ptr,
            "out_edge": order,
            "dst": self.edge_dst.cpu().numpy(),
            "label": self.edge_label.cpu().numpy(),
            "labels": self.labels.cpu().numpy().view(np.uint32),
            "final": self.final.cpu().numpy(),
        }

    def step_states(self, states: np.ndarray, token: int) -> np.ndarray:
        """bool [S] → bool [S]: states reached from the set ``states`` on ``token`` (eq. 3 for
        one realized token).  Out-of-range or text-less ids lead to the empty set."""
        a = self._np
        if not 0 <= token < self.vocab_size:
            return np.zeros(self.num_states, dtype=bool)
        act = np.nonzero(states)[0]
        if act.size == 0:
            return np.zeros(self.num_states, dtype=bool)
        segs = [a["out_edge"][a["out_ptr"][s]:a["out_ptr"][s + 1]] for s in act]
        edges = np.concatenate(segs) if segs else np.zeros(0, dtype=np.int64)
        word = a["labels"][a["label"][edges], token >> 5]
        hit = ((word >> np.uint32(token & 31)) & np.uint32(1)).astype(bool)
        out = np.zeros(self.num_states, dtype=bool)
        out[a["dst"][edges[hit]]] = True
        return out

    def _run(self, token_ids) -> tuple[np.ndarray | None, bool]:
        """(state set after the text tokens, whether an EOS ended the sequence)."""
        ids = [int(t) for t in token_ids]
        eos = set(self.eos_token_ids)
        ended = False
        if ids and ids[-1] in eos:
            ids = ids[:-1]
            ended = True
        cur = self.initial.cpu().numpy().copy()
        for t in ids:
            if t in eos:
                return None, ended
            cur = self.step_states(cur, t)
            if not cur.any():
                return None, ended
        return cur, ended

    def accepts(self, token_ids) -> bool:
        """Whether the whole token sequence is accepted.  A single trailing EOS id is allowed
        (it ends the sequence); an EOS anywhere else, or a special/padding id, rejects."""
        cur, _ = self._run(token_ids)
        return cur is not None and bool((cur & self._np["final"]).any())

    def viable(self, token_ids) -> bool:
        """Whether some continuation of ``token_ids`` is accepted (states are trimmed, so this
        is "the state set is not empty"); after a trailing EOS, the same as :meth:`accepts`."""
        cur, ended = self._run(token_ids)
        if cur is None:
            return False
        return bool((cur & self._np["final"]).any()) if ended else bool(cur.any())

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | os.PathLike) -> None:
        """Write a ``.safetensors`` file with the tensors and a JSON header (format version,
        vocabulary fingerprint, EOS ids, metadata).  No pickle."""
        self._save(path)

    def _save(self, path, part: str | None = None, part_tensors: dict | None = None) -> None:
        """:meth:`save`, with the optional version-3 ``part`` (:mod:`.automaton_file`)."""
        from safetensors.torch import save_file

        tensors = {
            "edge_src": self.edge_src.cpu().contiguous(),
            "edge_dst": self.edge_dst.cpu().contiguous(),
            "edge_label": self.edge_label.cpu().contiguous(),
            "labels": self.labels.cpu().contiguous(),
            "initial": self.initial.cpu().to(torch.uint8).contiguous(),
            "final": self.final.cpu().to(torch.uint8).contiguous(),
        }
        header = {
            "format": _FORMAT_NAME,
            "version": str(FORMAT_VERSION if part else PLAIN_VERSION),
            "num_states": str(self.num_states),
            "vocab_size": str(self.vocab_size),
            "fingerprint": self.fingerprint,
            "eos_token_ids": json.dumps(list(self.eos_token_ids)),
            "meta": json.dumps(jsonable_meta(self.meta)),
        }
        if part:
            header["part"] = part
            tensors.update({k: t.cpu().contiguous() for k, t in part_tensors.items()})
        stored, shapes = _deflate(tensors)
        if shapes:
            header["zlib"] = json.dumps(shapes)
        header["checksum"] = _checksum(tensors, header)  # over the tensors as loaded
        save_file(stored, str(path), metadata=header)

    @classmethod
    def load(
        cls, path: str | os.PathLike, vocabulary: TokenVocabulary, *, device: str = "cpu"
    ) -> TokenAutomaton:
        """Read a file written by :meth:`save`.

        Everything read is checked before use: header fields and JSON, tensor dtypes, shapes and
        index ranges, and the SHA-256 checksum over header and tensors that :meth:`save` writes
        (files saved before checksums existed have none and are checked without it).

        Raises:
            AutomatonFileNotFoundError: no file at ``path`` (a ``FileNotFoundError`` too).
            VocabularyMismatchError: the file was compiled for another vocabulary.
            AutomatonFormatError: not such a file, an unknown format version, or a file that is
                truncated, tampered with or inconsistent (what and where in the message); a
                file saved from a :class:`~.json_schema.unique_items.UniqueItemsAutomaton`
                (read it with :func:`~.automaton_load.load_automaton`).
        """
        out, part, _ = cls._load(path, vocabulary, device=device)
        if part is not None:
            raise AutomatonFormatError(
                f"{path} holds a {part} checker besides the automaton (a uniqueItems schema); "
                "load it with tractable.load_automaton(path, vocab), which keeps the checker")
        return out

    @classmethod
    def _load(cls, path, vocabulary: TokenVocabulary, *, device: str = "cpu"):
        """:meth:`load`, also reading a version-3 part: (automaton, part name or None,
        {tensor name: tensor} of the part, dtypes and ranks checked)."""
        from safetensors import safe_open

        p = Path(path)
        if not p.is_file():
            raise AutomatonFileNotFoundError(2, f"no saved TokenAutomaton at {p}", str(p))
        try:
            with safe_open(str(p), framework="pt", device="cpu") as f:
                header = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as e:  # noqa: BLE001 - safetensors raises several types
            raise AutomatonFormatError(f"{p} is not a saved TokenAutomaton: {e}") from e
        if header.get("format") != _FORMAT_NAME:
            raise AutomatonFormatError(f"{p} is not a saved TokenAutomaton")
        try:
            version = int(header.get("version", "-1"))
        except ValueError:
            raise AutomatonFormatError(
                f"{p}: format version {header.get('version')!r} is not a number") from None
        if version not in _READ_VERSIONS:
            raise AutomatonFormatError(
                f"{p} has format version {version}; this tractable reads versions "
                f"{', '.join(map(str, _READ_VERSIONS))}")
        if "zlib" in header and version < 2:
            raise AutomatonFormatError(f"{p}: compressed tensors in a version {version} file")
        tensors = _inflate(p, tensors, header.get("zlib"))
        part = header.get("part")
        if part is not None and (version < 3 or part not in _PART_FORMAT):
            raise AutomatonFormatError(f"{p}: unknown part {part[:40]!r} (version {version})")
        fmt = {**_TENSOR_FORMAT, **_PART_FORMAT.get(part, {})}
        need_h = ("num_states", "vocab_size", "fingerprint", "eos_token_ids")
        missing = [k for k in fmt if k not in tensors] + [k for k in need_h if k not in header]
        if missing:
            raise AutomatonFormatError(f"{p} lacks {missing}")
        unknown = sorted(set(header) - _HEADER_KEYS) + sorted(set(tensors) - set(fmt))
        if unknown:  # e.g. a corrupted "checksum" key: refuse rather than skip the checksum
            raise AutomatonFormatError(f"{p}: unknown header fields or tensors {unknown[:5]}")
        # dtypes and ranks first: the checksum and every check below read them
        for k, (want, ndim) in fmt.items():
            if tensors[k].dtype != want:
                raise AutomatonFormatError(f"{p}: {k} has dtype {tensors[k].dtype}, not {want}")
            if tensors[k].ndim != ndim:
                raise AutomatonFormatError(f"{p}: tensor shapes do not match the format: "
                                           f"{k} has {tensors[k].ndim} dimensions, not {ndim}")
        if "checksum" in header:
            body = {k: v for k, v in header.items() if k != "checksum"}
            try:
                ok = _checksum(tensors, body) == header["checksum"]
            except Exception as e:  # noqa: BLE001 - an extra tensor of an odd dtype or shape
                raise AutomatonFormatError(f"{p}: cannot checksum the file: {e}") from None
            if not ok:
                raise AutomatonFormatError(
                    f"{p}: checksum mismatch (the file was modified or truncated after save)")
        try:
            S, V = int(header["num_states"]), int(header["vocab_size"])
            eos = json.loads(header["eos_token_ids"])
            meta = json.loads(header.get("meta", "{}"))
        except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
            raise AutomatonFormatError(f"{p}: unreadable header field: {e}") from None
        if S < 1 or V < 1 or not isinstance(meta, dict) or not isinstance(eos, list) or not all(
                type(e) is int and 0 <= e < V for e in eos):
            raise AutomatonFormatError(
                f"{p}: header out of range (num_states {S}, vocab_size {V}, "
                f"eos_token_ids {str(eos)[:200]})")
        e_shape = tensors["edge_src"].shape
        if (
            tensors["labels"].shape[1] != (V + 31) // 32
            or tuple(tensors["initial"].shape) != (S,)
            or tuple(tensors["final"].shape) != (S,)
            or not e_shape == tensors["edge_dst"].shape == tensors["edge_label"].shape
        ):
            raise AutomatonFormatError(f"{p}: tensor shapes do not match S={S}, V={V}")
        L = int(tensors["labels"].shape[0])
        for k, hi in (("edge_src", S), ("edge_dst", S), ("edge_label", L)):
            t = tensors[k]
            if t.numel() and (int(t.min()) < 0 or int(t.max()) >= hi):
                raise AutomatonFormatError(
                    f"{p}: {k} holds ids outside 0..{hi - 1} ({int(t.min())}..{int(t.max())})")
        if header["fingerprint"] != vocabulary.fingerprint:
            diff = []
            if V != vocabulary.size:
                diff.append(f"vocab_size {V} in the file, {vocabulary.size} given")
            if sorted(eos) != sorted(vocabulary.eos_token_ids):
                diff.append(f"EOS ids {sorted(eos)} in the file, "
                            f"{sorted(vocabulary.eos_token_ids)} given")
            raise VocabularyMismatchError(
                header["fingerprint"], vocabulary.fingerprint,
                differences="; ".join(diff) or "same size and EOS ids: the token strings differ")
        if V != vocabulary.size or list(eos) != list(vocabulary.eos_token_ids):
            raise AutomatonFormatError(
                f"{p}: vocab_size {V} / EOS ids {eos} disagree with the vocabulary of the same "
                f"fingerprint ({vocabulary.size} / {list(vocabulary.eos_token_ids)})")
        _check_semantics(p, tensors, S, V, vocabulary)
        out = cls(
            num_states=S,
            vocab_size=V,
            edge_src=tensors["edge_src"],
            edge_dst=tensors["edge_dst"],
            edge_label=tensors["edge_label"],
            labels=tensors["labels"],
            initial=tensors["initial"].bool(),
            final=tensors["final"].bool(),
            fingerprint=header["fingerprint"],
            eos_token_ids=tuple(eos),
            meta=meta,
        )
        part_tensors = {k: tensors[k] for k in _PART_FORMAT.get(part, {})}
        return (out if device == "cpu" else out.to(device)), part, part_tensors


# ---------------------------------------------------------------------------- helpers


def _check_semantics(p, tensors: dict, S: int, V: int, vocabulary: TokenVocabulary) -> None:
    """The invariants every method relies on, for a file whose tensors are well typed and in
    range (called by :meth:`TokenAutomaton.load`; raises AutomatonFormatError naming the first
    violation): state 0 is the only initial state; every label row that an edge uses holds a
    text token and no other id (no EOS, special or padding id, no bit past V); every state is
    reachable from state 0 and reaches an accepting state (trimmed: the masks' distances are
    finite)."""
    init = tensors["initial"].numpy()
    fin = tensors["final"].numpy()
    if init.max(initial=0) > 1 or fin.max(initial=0) > 1:
        raise AutomatonFormatError(f"{p}: initial/final hold values other than 0 and 1")
    if not (init[0] == 1 and int(init.sum()) == 1):
        raise AutomatonFormatError(
            f"{p}: the initial states are {np.flatnonzero(init)[:10].tolist()}, not [0]")
    labels = tensors["labels"].numpy().view(np.uint32)
    used = np.unique(tensors["edge_label"].numpy())
    text = vocabulary.text_token_mask.copy()
    for e in vocabulary.eos_token_ids:
        text[e] = False
    allowed_bits = np.packbits(np.concatenate([text, np.zeros(labels.shape[1] * 32 - V,
                                                                dtype=bool)]),
                               bitorder="little").view(np.uint32)
    if labels.shape[0]:
        stray = np.flatnonzero((labels & ~allowed_bits).any(axis=1))
        if stray.size:
            row = int(stray[0])
            word = int(np.flatnonzero(labels[row] & ~allowed_bits)[0])
            bit = int(labels[row, word] & ~allowed_bits[word])
            tok = 32 * word + (bit & -bit).bit_length() - 1
            raise AutomatonFormatError(
                f"{p}: label row {row} holds id {tok}, which is not a text token of the "
                f"vocabulary (EOS, special, padding, or past vocab_size {V})")
    if used.size:
        empty = used[~labels[used].any(axis=1)]
        if empty.size:
            raise AutomatonFormatError(f"{p}: label row {int(empty[0])} is used by an edge "
                                       "but holds no token")
    src, dst = tensors["edge_src"].numpy(), tensors["edge_dst"].numpy()
    keep, _ = _trim_states(S, src, dst, fin.astype(bool), start=0)
    if not keep.all():
        bad = int(np.flatnonzero(~keep)[0])
        raise AutomatonFormatError(
            f"{p}: state {bad} is unreachable from state 0 or cannot reach an accepting state "
            "(a saved automaton is trimmed)")




def _csr(S: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(src, kind="stable")
    ptr = np.zeros(S + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(np.bincount(src, minlength=S))
    return ptr, dst[order]


def _reach(ptr: np.ndarray, nbr: np.ndarray, sources: np.ndarray, S: int):
    """(bool [S]: states reachable from ``sources``, int64: those states by breadth-first
    distance, ascending ids within a distance).

    Unit-weight shortest paths in scipy's C code: a numpy step per breadth-first layer took
    12 ms on a 5,000-state chain (a string of maxLength 255 is 255 layers) where this takes
    0.6 ms (measured here)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    if sources.size == 0:
        return np.zeros(S, dtype=bool), np.zeros(0, dtype=np.int64)
    # int32 indices, float64 data: the types dijkstra works in (no conversion: 587 states,
    # 1,647 edges: 122 -> 102 us; measured here)
    g = csr_matrix((np.ones(nbr.size, dtype=np.float64), nbr.astype(np.int32),
                    ptr.astype(np.int32)), shape=(S, S))
    dist = dijkstra(g, directed=True, indices=sources, unweighted=True, min_only=True)
    seen = np.isfinite(dist)
    idx = np.nonzero(seen)[0]
    return seen, idx[np.argsort(dist[idx], kind="stable")].astype(np.int64)


def _reachable(ptr: np.ndarray, nbr: np.ndarray, sources: np.ndarray, S: int) -> np.ndarray:
    """bool [S]: the states reachable from ``sources``: one breadth-first search from a
    virtual state S with an edge to each source (no distances: 35 us where ``_reach`` takes
    ~100 us on 587 states; measured here)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order

    seen = np.zeros(S + 1, dtype=bool)
    if sources.size == 0:
        return seen[:S]
    nbr = np.concatenate([nbr, sources]).astype(np.int32)
    ptr = np.append(ptr, ptr[-1] + sources.size).astype(np.int32)
    g = csr_matrix((np.ones(nbr.size, dtype=np.float64), nbr, ptr), shape=(S + 1, S + 1))
    seen[breadth_first_order(g, S, directed=True, return_predecessors=False)] = True
    return seen[:S]


def _trim_states(S: int, src: np.ndarray, dst: np.ndarray, final: np.ndarray, start: int):
    """(bool [S]: the states reachable from ``start`` that reach a final state, int64: those
    states in breadth-first order from ``start``).  Every state on a path from the start to
    a kept state is kept, so distances over the kept states alone are the same and one forward
    search serves both."""
    fwd, order = _reach(*_csr(S, src, dst), np.array([start]), S)
    bwd = _reachable(*_csr(S, dst, src), np.nonzero(final)[0], S)
    keep = fwd & bwd
    return keep, order[keep[order]]


def _pack_label_rows(
    grp: np.ndarray, reps: list[tuple[int, int]], grp_ptr: np.ndarray, grp_tokens: np.ndarray,
    V: int,
) -> np.ndarray | SparseRows:
    """Row l holds the tokens of the groups ``grp[a:b]``, ``reps[l] = (a, b)``: a
    :class:`~.lift.SparseRows` when the rows are small (a few tokens each), else uint32
    [L, ceil(V/32)] packed by :func:`~.lift.pack_rows`."""
    L = len(reps)
    W = (V + 31) // 32
    if L == 0:
        return np.zeros((0, W), dtype=np.uint32)
    starts = np.array([a for a, _ in reps], dtype=np.int64)
    counts = np.array([b - a for a, b in reps], dtype=np.int64)
    sel = grp[_ranges(starts, counts)]
    gsize = grp_ptr[sel + 1] - grp_ptr[sel]
    t = grp_tokens[_ranges(grp_ptr[sel], gsize)]
    row = np.repeat(np.repeat(np.arange(L, dtype=np.int64), counts), gsize)
    if t.size * _SPARSE_WORDS_PER_PAIR <= L * W:
        return SparseRows.from_pairs(row, t, L, V)
    return pack_rows(row, t, L, V)


# Label rows stay sparse while their pairs are fewer than 1/20 of their words (the sort of a
# pair costs about 20 words of a dense pack; see pack_rows).
_SPARSE_WORDS_PER_PAIR = 20


def _merge_rows(explicit, label_of_edge, kept_key, r_key, row_id, rows, row_hash=None):
    """Add the lift's shared rows to the kept edges' labels and dedup all rows exactly.

    ``explicit`` (uint32 [Lx, W] or :class:`~.lift.SparseRows`) with ``label_of_edge`` int64
    [E] (-1: no explicit label); ``r_key``/``row_id``: edge key and row of ``rows`` (uint32
    [Lr, W]; ``row_hash``: their :func:`~.lift._row_hashes` when known) for each shared
    contribution.  Returns the distinct rows actually used (uint32 [K, W], numbered by first
    use) and the label of each edge.
    """
    if kept_key.size == 0:
        return np.zeros((0, rows.shape[1]), dtype=np.uint32), label_of_edge
    sparse = isinstance(explicit, SparseRows)
    Lx = explicit.num_rows if sparse else explicit.shape[0]
    if r_key.size == 0:  # the explicit rows alone: distinct by construction, all in use
        out = take_rows([explicit], np.arange(Lx, dtype=np.int64)) if sparse else explicit
        return out, label_of_edge
    ri = np.searchsorted(kept_key, r_key)
    ok = np.nonzero((ri < kept_key.size) & (kept_key[np.minimum(ri, kept_key.size - 1)]
                                            == r_key))[0]
    table = [explicit, rows]  # rows numbered across the parts
    n_table = Lx + rows.shape[0]
    x_e = np.nonzero(label_of_edge >= 0)[0]
    ref_e = np.concatenate([x_e, ri[ok]])
    ref_r = np.concatenate([label_of_edge[x_e], Lx + row_id[ok]])
    o = np.lexsort((ref_r, ref_e))
    ref_e, ref_r = ref_e[o], ref_r[o]
    first = np.concatenate([[True], ref_e[1:] != ref_e[:-1]])
    starts = np.nonzero(first)[0]
    multi = np.diff(np.concatenate([starts, [ref_e.size]])) > 1
    row_of = ref_r[starts].copy()
    if multi.any():
        # OR the rows of edges with several contributions, once per distinct combination
        # (states entering a component alike share them).  Each has at most one explicit row
        # (the first, numbered below Lx) and at least one shared row.
        m_idx = np.nonzero(multi)[0]
        ends = np.concatenate([starts[1:], [ref_e.size]])
        refs = ref_r.tolist()
        combos: dict[tuple[int, ...], int] = {}
        combo_of = np.empty(m_idx.size, dtype=np.int64)
        for i, e in enumerate(m_idx.tolist()):
            key = tuple(refs[starts[e]:ends[e]])
            combo_of[i] = combos.setdefault(key, len(combos))
        keys = list(combos)
        cnt = np.array([len(k) for k in keys], dtype=np.int64)
        sel = np.fromiter((r for k in keys for r in k), dtype=np.int64, count=int(cnt.sum()))
        cid = np.repeat(np.arange(len(keys), dtype=np.int64), cnt)
        shared = sel >= Lx
        merged = _or_groups(rows, sel[shared] - Lx, _run_starts(cid[shared]))
        xs = np.nonzero(~shared)[0]
        if xs.size:
            if sparse:
                explicit.scatter(merged, sel[xs], cid[xs])
            else:
                merged[cid[xs]] |= explicit[sel[xs]]
        row_of[m_idx] = n_table + combo_of
        table.append(merged)
    label = np.full(label_of_edge.size, -1, dtype=np.int64)
    label[ref_e[starts]] = row_of
    # exact dedup of the rows in use, numbered by first use
    return dedup_rows(table, label, [None, row_hash] + [None] * (len(table) - 2))


