"""Programmable SMC in the style of LLaMPPL (paper 004 §2.3 and Alg. 1).

A task is a :class:`Model` subclass whose ``async def step(self)`` advances one particle with
``tok = await self.sample(dist, proposal=None)`` (weight × dist(v) / proposal(v), properly
weighted), ``observe(dist, value)`` (× dist(value)), ``condition(ok)`` (× 1[ok]),
``score(log_w)`` (× exp(log_w)), ``twist(log_a)`` / ``set_twist(log_phi)`` (a temporary factor
that steers resampling and is divided out at ``finish()``: twisted SMC) and ``finish()``.  The
factors of a step make the potential G_t of the Feynman-Kac model, the proposals its kernel
M_t; :func:`run_smc` returns weighted particles and log Ẑ (Ẑ unbiased for Z = E_M[Π G_t]).

**The LM is a distribution.**  ``ctx = self.new_context(lm, prompt_ids)`` (in ``__init__``);
``ctx.next_token()`` is the LM's next-token distribution after the particle's tokens; sampling
or observing it appends the token.  A context is one :class:`~.lm.LMState` with M rows: one
forward per context and step serves every particle (two prompts are two contexts: the LM
interface has no padding); resampling reorders the KV cache with ``select``.

**Why async** (as LLaMPPL): ``await self.sample(...)`` is where particles meet.  The runner
drives each live particle's coroutine to its next ``await`` and draws the pending samples that
share a context and proposal in one batched call (one categorical draw, one mask, one AWRS
call), in particle order — so a program reproduces :class:`~.smc.SMC` draw for draw with the
same seed.  There is no event loop; the other primitives and tracker queries are plain calls.

**One token per context per step.**  ``ctx.next_token()`` after the context was extended in
the same step raises :class:`~tractable.fsa.errors.InvalidArgumentError` (it needs the forward
that ends the step).  A context that others extend in a step and a live particle does not
becomes *stale* for it (its row is fed EOS, as finished rows are); using it later raises: a
program may abandon a context (a mixture over LMs), not pause one.

**Constraints and P-GCD.**  ``c = ctx.constrain(automaton, budget=N)`` and
``pot = ctx.track(potential)`` (a :class:`~.smc.Potential`, e.g. ``tractable.hmm.pgcd.PGCD``)
follow a context, batched.  Proposals (:mod:`.program_proposals`): ``lcd_proposal``,
``gcd_proposal`` (weight Z of the mask), ``AWRSProposal`` (weight Ẑ), ``PGCDProposal`` and
``ProductProposal`` (weight p/q); a new one subclasses ``TokenProposal``; twists:
``condition(c.check(tok))`` (the seed's G_t = 1_C), ``twist(c.log_potential())``,
``set_twist(pot.log_value())`` (the P-GCD look-ahead).
"""

from __future__ import annotations

import copy
import inspect
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..fsa.errors import InvalidArgumentError, InvalidArgumentTypeError
from .constraints import as_constraint
from .lm import LanguageModel
from .program_proposals import TokenProposal
from .smc import categorical_draw, log_mean_exp, normalize_log_weights, resample_indices

__all__ = [
    "Model", "Context", "NextToken", "Categorical", "ConstraintTracker", "PotentialTracker",
    "ProgramResult", "run_smc", "without_replacement_indices",
]

_NEG_INF = -math.inf


_err = InvalidArgumentError


def _log_factor(x, what: str) -> float:
    x = float(x)
    if math.isnan(x) or x == math.inf:
        raise _err(f"{what}: a log factor must be finite or -inf, got {x}")
    return x


class _Handle:
    """A particle's handle on a batched slot of the runner (row = the particle's index);
    copied with its particle, the copy points at the new particle."""

    def __deepcopy__(self, memo):
        new = copy.copy(self)
        memo[id(self)] = new
        new._model = memo.get(id(self._model), self._model)
        if isinstance(self, _Tracker):
            new.ctx = copy.deepcopy(self.ctx, memo)
        return new

    def _runner(self) -> _Runner:
        r = self._model._runner
        if r is None:
            raise _err(f"{type(self).__name__}: only usable in step() while run_smc runs")
        return r


class Context(_Handle):
    """A particle's token context (:meth:`Model.new_context`).  ``tokens``: tuple of the ids
    appended so far (EOS included when sampled); ``length`` = len(tokens)."""

    def __init__(self, model: Model, slot: int, lm: LanguageModel, prompt_ids: Sequence[int]):
        self._model, self._slot, self.lm = model, slot, lm
        self.prompt_ids = tuple(int(t) for t in prompt_ids)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return tuple(self.lm.eos_token_ids)

    @property
    def tokens(self) -> tuple[int, ...]:
        return self._runner().tokens(self._slot, self._model._index)

    @property
    def length(self) -> int:
        return len(self.tokens)

    def next_token(self) -> NextToken:
        """The LM's next-token distribution after this particle's tokens."""
        return NextToken(self)

    def constrain(self, constraint, *, budget: int, vocab=None) -> ConstraintTracker:
        """Track ``constraint`` (what :func:`~.constraints.as_constraint` takes) along this
        context within ``budget`` tokens (EOS included).  Only in ``__init__``."""
        return self._model._register(ConstraintTracker, self, constraint, int(budget), vocab)

    def track(self, potential) -> PotentialTracker:
        """Track a :class:`~.smc.Potential` (e.g. a ``PGCD``).  Only in ``__init__``."""
        return self._model._register(PotentialTracker, self, potential, None, None)


class _Tracker(_Handle):
    def __init__(self, model: Model, slot: int, ctx: Context, obj, budget, vocab) -> None:
        self._model, self._slot, self.ctx = model, slot, ctx
        self.obj, self.budget, self.vocab = obj, budget, vocab

    def _at(self) -> tuple[_Runner, _Slot, int]:
        R, i = self._runner(), self._model._index
        R.check_fresh(self.ctx._slot, i)
        return R, R.slots[self._slot], i


class ConstraintTracker(_Tracker):
    """A constraint followed along a context.  Queries about the *next* token (:meth:`check`,
    :meth:`allowed`, :attr:`remaining`) see the state at the start of the step; queries about
    the *prefix* (:meth:`accepting`, :meth:`viable`) include this step's token, if any."""

    @property
    def remaining(self) -> int:
        """Tokens that may still be generated at the start of this step (EOS included)."""
        R, s, i = self._at()
        return R.remaining(s, i)

    def check(self, token: int, mode: str = "gcd") -> bool:
        """Is ``token`` allowed at the start of this step (within the budget for "gcd")?"""
        R, s, i = self._at()
        t = torch.tensor([int(token)])
        return bool(s.obj.check(s.state, torch.tensor([i]), t, R.remaining(s, i), mode)[0])

    def allowed(self, mode: str = "gcd") -> torch.Tensor:
        """bool [V]: the mask at the start of this step."""
        R, s, i = self._at()
        return s.obj.allowed(s.state.select(torch.tensor([i])), R.remaining(s, i), mode)[0]

    def accepting(self) -> bool:
        """Is the prefix (with this step's token) a complete valid output?"""
        R, s, i = self._at()
        return bool(R.tracker_values(self._slot, "accepting")[i])

    def viable(self) -> bool:
        """Can the prefix (with this step's token) still be completed within the budget?"""
        R, s, i = self._at()
        tok = R.pending.get(self.ctx._slot, {}).get(i)
        if tok is not None:
            return self.check(tok, "gcd")
        return self.accepting() if R.remaining(s, i) <= 0 else bool(self.allowed().any())

    def log_potential(self) -> float:
        """0 if :meth:`viable` else -inf: the constraint as a twist."""
        return 0.0 if self.viable() else _NEG_INF


class PotentialTracker(_Tracker):
    """A :class:`~.smc.Potential` followed along a context.  :meth:`log_value` and
    :meth:`log_final` include this step's token; :meth:`log_next` (float [V] or None) is at
    the start of the step."""

    def log_value(self) -> float:
        R, s, i = self._at()
        return float(R.tracker_values(self._slot, "log_value")[i])

    def log_final(self) -> float:
        R, s, i = self._at()
        return float(R.tracker_values(self._slot, "log_final")[i])

    def log_next(self) -> torch.Tensor | None:
        R, s, i = self._at()
        out = s.obj.log_next(s.obj.select(s.state, torch.tensor([i])), None)
        return None if out is None else out[0]


class NextToken:
    """The LM's next-token distribution of a particle's context (batched by the runner)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def logprobs(self) -> torch.Tensor:
        """float64 [V] log p_lm(· | prompt, tokens)."""
        return self.ctx._runner().logprobs(self.ctx._slot)[self.ctx._model._index].double()

    def log_prob(self, token: int) -> float:
        return float(self.logprobs()[int(token)])  # float32 logits widened, as SMC does


class Categorical:
    """A finite distribution over ``values`` from log-probabilities (normalized here); drawn
    per particle (not batched)."""

    def __init__(self, values: Sequence[Any], log_probs: Sequence[float]) -> None:
        lp = np.asarray(log_probs, dtype=np.float64)
        m = np.max(lp) if lp.ndim == 1 and len(values) == lp.size > 0 else math.nan
        if not np.isfinite(m):
            raise _err(f"Categorical: {len(values)} values, log_probs of shape {lp.shape}; "
                       "needs one per value, not all -inf")
        self.values = list(values)
        self.lp = lp - (m + np.log(np.exp(lp - m).sum()))

    @classmethod
    def from_probs(cls, values: Sequence[Any], probs: Sequence[float]) -> Categorical:
        with np.errstate(divide="ignore"):
            return cls(values, np.log(np.asarray(probs, dtype=np.float64)))

    def log_prob(self, value) -> float:
        lp = [self.lp[i] for i, v in enumerate(self.values) if v == value]
        return float(np.logaddexp.reduce(lp)) if lp else _NEG_INF

    def draw(self, g: np.random.Generator) -> Any:
        return self.values[int(categorical_draw(torch.from_numpy(self.lp[None, :]), g)[0])]


class _SampleRequest:
    def __init__(self, model, dist, proposal) -> None:
        self.model, self.dist, self.proposal = model, dist, proposal

    def __await__(self):
        return (yield self)


class Model:
    """Base class of a language-model probabilistic program (see the module docstring).

    Subclasses call ``super().__init__()``, create contexts and trackers in ``__init__`` and
    implement ``async def step(self)``.  Per particle: ``log_weight`` (float, twist included),
    ``finished``, ``done`` (finished or weight 0).
    """

    def __init__(self) -> None:
        self._handles: list[_Handle] = []
        self._runner: _Runner | None = None
        self._index, self.log_weight, self._twist_total, self.finished = -1, 0.0, 0.0, False

    def new_context(self, lm: LanguageModel, prompt_ids: Sequence[int] = ()) -> Context:
        """A token context on ``lm`` after ``prompt_ids`` (only in ``__init__``)."""
        if not isinstance(lm, LanguageModel):
            raise InvalidArgumentTypeError(
                f"new_context needs a decode.lm.LanguageModel, got {type(lm).__name__}")
        return self._register(Context, lm, prompt_ids)

    def _register(self, cls, *args):
        if not hasattr(self, "_handles"):
            raise _err(f"{type(self).__name__}.__init__ must call super().__init__() first")
        if self._runner is not None:
            raise _err("contexts and trackers are created in __init__, not in step() (they "
                       "are batched over particles when run_smc starts)")
        h = cls(self, len(self._handles), *args)
        self._handles.append(h)
        return h

    async def step(self) -> None:
        raise NotImplementedError

    def key(self) -> Any:
        """What the ensemble groups particles by: the first context's tokens without EOS."""
        c = next((h for h in self._handles if isinstance(h, Context)), None)
        return None if c is None else tuple(t for t in c.tokens if t not in c.eos_token_ids)

    @property
    def done(self) -> bool:
        return self.finished or self.log_weight == _NEG_INF

    def sample(self, dist, proposal: TokenProposal | Categorical | None = None
               ) -> _SampleRequest:
        """``await`` it: a draw from ``proposal`` (or ``dist``); the weight × dist(v) /
        proposal(v).  ``dist``: a :class:`NextToken` (the token is appended to its context,
        ``proposal`` a :class:`TokenProposal`) or a :class:`Categorical` (``proposal`` one
        too)."""
        want = {NextToken: TokenProposal, Categorical: Categorical}.get(type(dist))
        if want is None or not (proposal is None or isinstance(proposal, want)):
            raise InvalidArgumentTypeError(
                f"sample: dist must be a NextToken (proposal a TokenProposal) or a Categorical "
                f"(proposal a Categorical), got {type(dist).__name__}, {type(proposal).__name__}")
        if want is TokenProposal:
            dist.ctx._runner().check_readable(dist.ctx)
        return _SampleRequest(self, dist, proposal)

    def observe(self, dist, value) -> None:
        """The weight × dist(value); a :class:`NextToken` also appends ``value``."""
        if not isinstance(dist, (NextToken, Categorical)):
            raise InvalidArgumentTypeError(
                f"observe: dist must be a NextToken or a Categorical, got {type(dist).__name__}")
        if isinstance(dist, NextToken):
            dist.ctx._runner().check_readable(dist.ctx)
        self.score(dist.log_prob(value))
        if isinstance(dist, NextToken):
            dist.ctx._runner().extend(dist.ctx, int(value))

    def condition(self, ok: bool) -> None:
        """The weight × 1[ok]."""
        if not bool(ok):
            self.log_weight = _NEG_INF

    def score(self, log_w: float) -> None:
        """The weight × exp(log_w) (a factor of the target)."""
        self.log_weight += _log_factor(log_w, "score")

    def twist(self, log_amount: float) -> None:
        """The weight × exp(log_amount) until the particle finishes (then the accumulated
        twist is divided out); -inf kills the particle."""
        a = _log_factor(log_amount, "twist")
        if a == _NEG_INF:
            self.log_weight = self._twist_total = _NEG_INF
            return
        self.log_weight += a
        self._twist_total += a

    def set_twist(self, log_phi: float) -> None:
        """Make the accumulated twist ``log_phi`` (``twist(log_phi - accumulated)``)."""
        if self._twist_total != _NEG_INF:
            log_phi = float(log_phi)
            self.twist(_NEG_INF if log_phi == _NEG_INF else log_phi - self._twist_total)

    def untwist(self) -> None:
        """Divide the accumulated twist out of the weight (not of a dead particle's)."""
        if self.log_weight != _NEG_INF:
            self.log_weight -= self._twist_total
            self._twist_total = 0.0

    def finish(self) -> None:
        """The particle is complete (its twist is divided out)."""
        self.untwist()
        self.finished = True

    def clone(self, memo: dict) -> Model:
        """A copy for resampling: attributes holding lists, dicts, sets, arrays, handles and
        proposals are copied, other objects (LMs, tokenizers, automata) shared (``memo`` maps
        the ids of shared objects to themselves).  Override for anything else."""
        new = copy.copy(self)
        memo = dict(memo)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            if _is_copied(v):
                new.__dict__[k] = copy.deepcopy(v, memo)
        return new


def _is_copied(v) -> bool:
    return isinstance(v, (list, dict, set, bytearray, np.ndarray, _Handle, TokenProposal)) or (
        isinstance(v, tuple) and any(_is_copied(x) for x in v))


@dataclass
class _Slot:
    kind: str  # "context" | "constraint" | "potential"
    obj: Any  # the LM, the Constraint or the Potential
    state: Any
    ctx: int = -1  # the context slot a tracker follows
    budget: int | None = None
    tokens: list = field(default_factory=list)  # per row (contexts)
    stale: np.ndarray | None = None  # bool [M]: rows that skipped a step (contexts)
    logp: torch.Tensor | None = None
    after: tuple | None = None  # (tokens, state after this step's tokens) (trackers)
    values: dict = field(default_factory=dict)  # queries of ``state``
    after_values: dict = field(default_factory=dict)  # queries of ``after``


class _Runner:
    """The batched slots and per-step bookkeeping of one :func:`run_smc` run.  ``pending``:
    {context slot: {row: token appended in this step}}."""

    def __init__(self, template: Model, M: int) -> None:
        self.slots: list[_Slot] = []
        self.M, self.pending, self.awrs_checks = M, {}, []
        for h in template._handles:
            if isinstance(h, Context):
                self.slots.append(_Slot("context", h.lm, h.lm.start(h.prompt_ids, M),
                                        tokens=[()] * M, stale=np.zeros(M, dtype=bool)))
            elif isinstance(h, ConstraintTracker):
                C = as_constraint(h.obj, h.vocab)
                V = self.slots[h.ctx._slot].obj.vocab_size
                if C.vocab_size != V:
                    raise _err(f"constraint vocabulary size {C.vocab_size} != LM logits "
                               f"width {V} (context {h.ctx._slot})")
                if h.budget < 1:
                    raise _err(f"budget must be >= 1 (got {h.budget})")
                self.slots.append(_Slot("constraint", C, C.start(M), h.ctx._slot, h.budget))
            else:
                self.slots.append(_Slot("potential", h.obj, h.obj.start(M), h.ctx._slot))

    def tokens(self, slot: int, row: int) -> tuple[int, ...]:
        base = self.slots[slot].tokens[row]
        tok = self.pending.get(slot, {}).get(row)
        return base if tok is None else base + (tok,)

    def remaining(self, s: _Slot, row: int) -> int:
        return int(s.budget - len(self.slots[s.ctx].tokens[row]))

    def remaining_rows(self, s: _Slot, rows: np.ndarray) -> np.ndarray:
        return np.array([self.remaining(s, int(i)) for i in rows], dtype=np.int64)

    def logprobs(self, slot: int) -> torch.Tensor:
        s = self.slots[slot]
        if s.logp is None:
            s.logp = s.obj.logprobs(s.state)
        return s.logp

    def check_readable(self, ctx: Context) -> None:
        """Raise unless the particle may read ``ctx``'s next-token distribution now."""
        i = ctx._model._index
        self.check_fresh(ctx._slot, i)
        if i in self.pending.get(ctx._slot, {}):
            raise _err(f"context {ctx._slot} of particle {i} was already extended in this "
                       "step: its next-token distribution needs the forward pass that ends "
                       "the step (extend each context by at most one token per step)")

    def check_fresh(self, ctx_slot: int, row: int) -> None:
        if self.slots[ctx_slot].stale[row]:
            raise _err(f"context {ctx_slot} of particle {row} is stale: the particle was live "
                       "and did not extend it in a step where other particles did (its row "
                       "was fed EOS); a context cannot be paused")

    def extend(self, ctx: Context, token: int) -> None:
        self.pending.setdefault(ctx._slot, {})[ctx._model._index] = int(token)

    def _step_tokens(self, ctx_slot: int) -> np.ndarray:
        toks = np.full(self.M, self.slots[ctx_slot].obj.eos, dtype=np.int64)
        ext = self.pending.get(ctx_slot, {})
        toks[list(ext)] = list(ext.values())
        return toks

    def _advanced(self, slot: int):
        """A tracker's state after this step's tokens (EOS for rows without one), cached."""
        s = self.slots[slot]
        toks = self._step_tokens(s.ctx)
        key = tuple(toks.tolist())
        if s.after is None or s.after[0] != key:
            s.after = (key, s.obj.advance(s.state, torch.from_numpy(toks)))
            s.after_values = {}
        return s.after[1]

    def tracker_values(self, slot: int, what: str) -> np.ndarray:
        """[M] ``accepting`` / ``log_value`` / ``log_final`` of every row, batched and cached:
        rows extended in this step see the advanced state, the others the step's start."""
        s = self.slots[slot]
        b = _query(s.values, s, s.state, what)
        ext = self.pending.get(s.ctx)
        if not ext:
            return b
        a = _query(s.after_values, s, self._advanced(slot), what)  # (_advanced resets them)
        rows = np.zeros(self.M, dtype=bool)
        rows[list(ext)] = True
        return np.where(rows, a, b)

    def end_step(self, particles: list[Model]) -> None:
        """Mark skipped contexts stale; if a particle is still live, advance every context
        extended in this step (one forward each) and the trackers that follow it."""
        live = any(not p.done for p in particles)
        for k, s in enumerate(self.slots):
            ext = self.pending.get(k if s.kind == "context" else s.ctx)
            if not ext:
                continue
            if s.kind != "context":
                if live:
                    s.state = self._advanced(k)
                s.after, s.values, s.after_values = None, {}, {}
                continue
            for i, p in enumerate(particles):
                if i not in ext and not p.done:
                    s.stale[i] = True
            if live:
                s.state = s.obj.advance(s.state, torch.from_numpy(self._step_tokens(k)))
                s.logp = None
            s.tokens = [t + (ext[i],) if i in ext else t for i, t in enumerate(s.tokens)]
        self.pending = {}

    def select(self, idx: np.ndarray) -> None:
        """Reorder every slot to rows ``idx`` (resampling; its length is the new M)."""
        ti = torch.from_numpy(idx)
        self.M = len(idx)
        for s in self.slots:
            if s.kind == "context":
                s.tokens = [s.tokens[int(j)] for j in idx]
                s.stale, s.logp = s.stale[idx], None
            s.state = s.obj.select(s.state, ti) if s.kind == "potential" else s.state.select(ti)
            s.after, s.values, s.after_values = None, {}, {}


def _query(store: dict, s: _Slot, st, what: str) -> np.ndarray:
    if what not in store:
        store[what] = (s.obj.is_accepting(st) if what == "accepting" else s.obj.log_value(
            st, None).double() if what == "log_value" else s.obj.log_final(st).double()).numpy()
    return store[what]


def _drive(particles: list[Model], runner: _Runner, g: np.random.Generator) -> None:
    """Run ``step()`` of every live particle, batching their samples round by round."""
    coros: dict[int, Any] = {}
    for i, p in enumerate(particles):
        c = None if p.done else p.step()
        if inspect.iscoroutine(c):  # a plain step() that never samples has run already
            coros[i] = c
    try:
        send: dict[int, Any] = {i: None for i in coros}
        while send:
            groups: dict[tuple, list[tuple[int, _SampleRequest]]] = {}
            for i in sorted(send):
                try:
                    req = coros[i].send(send[i])
                except StopIteration:
                    continue
                if not isinstance(req, _SampleRequest) or req.model is not particles[i]:
                    raise _err(f"step() of particle {i} awaited {req!r}: only "
                               "self.sample(...) may be awaited in step()")
                if isinstance(req.dist, NextToken):
                    q = None if req.proposal is None else req.proposal.key()
                    groups.setdefault(("token", req.dist.ctx._slot, q), []).append((i, req))
                else:
                    groups[("single", i)] = [(i, req)]
            send = {}
            for k, items in groups.items():
                _draw_group(k, items, runner, g, send)
    finally:
        for c in coros.values():
            c.close()


def _draw_group(k, items, runner: _Runner, g, send: dict) -> None:
    """Draw the samples of one group (particle order); record the tokens and weights."""
    rows = np.array([i for i, _ in items], dtype=np.int64)
    req0 = items[0][1]
    if k[0] == "single":
        d, q = req0.dist, req0.proposal
        v = (q or d).draw(g)
        if q is not None:
            req0.model.score(d.log_prob(v) - q.log_prob(v))
        send[int(rows[0])] = v
        return
    lp = runner.logprobs(k[1])[torch.from_numpy(rows)].double()
    if req0.proposal is None:
        tok, inc = categorical_draw(lp, g), np.zeros(rows.size)
    else:
        tok, inc = req0.proposal.draw(runner, rows, lp, g)
    eos = runner.slots[k[1]].obj.eos
    for (i, req), t, w in zip(items, tok.tolist(), inc.tolist()):
        if t < 0:  # no token possible: the particle dies and is fed EOS
            t, w = eos, _NEG_INF
        req.model.log_weight += w
        runner.extend(req.dist.ctx, t)
        send[i] = t


@dataclass
class ProgramResult:
    """Output of :func:`run_smc`: the M final ``particles``; ``log_weights`` float64 [M] and
    normalized ``weights`` (zeros if all died); ``log_Z`` = log mean weight (-inf if all died);
    ``sample``: index drawn from the ensemble (-1 if none); ``stats``: seconds, steps,
    lm_calls, resampling_steps, ess (ESS before each check; none with without_replacement),
    unfinished, awrs_checks_per_token (AWRS)."""

    particles: list[Model]
    log_weights: torch.Tensor
    weights: torch.Tensor
    log_Z: float
    sample: int
    stats: dict[str, Any] = field(default_factory=dict)

    def _sum(self, values, key) -> dict[Any, float]:
        key = key or (lambda m: m.key())
        out: dict[Any, float] = {}
        for p, v in zip(self.particles, values):
            if v > 0:
                out[key(p)] = out.get(key(p), 0.0) + v
        return out

    def ensemble(self, key: Callable[[Model], Any] | None = None) -> dict[Any, float]:
        """The weighted ensemble P̂ as {key(particle): probability} (default key
        :meth:`Model.key`)."""
        return self._sum(self.weights.tolist(), key)

    def unnormalized(self, key: Callable[[Model], Any] | None = None) -> dict[Any, float]:
        """{k: (1/M) Σ_m w_m 1[key(x_m) = k]}, unbiased for Z · P(k)."""
        M = len(self.particles)
        return self._sum([math.exp(lw) / M for lw in self.log_weights.tolist()], key)


def _shared_memo(template: Model, runner: _Runner) -> dict:
    """{id: object} of what particles share: runner, LMs, constraints, potentials, etc."""
    shared = [runner] + [s.obj for s in runner.slots]
    shared += [getattr(h, a, None) for h in template._handles for a in ("lm", "obj", "vocab")]
    shared += [v for v in template.__dict__.values() if not _is_copied(v)]
    return {id(v): v for v in shared if v is not None}


_RESAMPLING = ("multinomial", "stratified", "systematic", "without_replacement")


def _reorder(particles: list[Model], runner: _Runner, memo: dict, idx: np.ndarray
             ) -> list[Model]:
    """The particles ``idx`` (int64, repeats allowed; the runner's rows follow): the first copy
    of an ancestor is the ancestor, the others clones; ``_index`` renumbered."""
    runner.select(idx)
    seen: set[int] = set()
    new = []
    for j in idx.tolist():
        new.append(particles[j].clone(memo) if j in seen else particles[j])
        seen.add(j)
    for i, p in enumerate(new):
        p._index = i
    return new


def without_replacement_indices(logw: np.ndarray, n: int, g: np.random.Generator
                                ) -> tuple[np.ndarray, np.ndarray]:
    """Down-sample N' = len(``logw``) weighted particles to ``n``, none kept twice (paper 004
    Alg. 1 lines 18-30; Fearnhead & Clifford 2003 with the paper's weights).

    ŵ = w / W (W = Σ w); c* solves Σ min(1, c ŵ) = n.  Particles with c* ŵ ≥ 1 are kept with
    weight w · n/N'; the others by systematic sampling with probability c* ŵ < 1 and weight
    (W / c*) · n/N', so E[Σ kept weights] = (n/N') Σ w (Ẑ = mean weight stays unbiased).  If
    at most ``n`` weights are positive all of them are kept, and zero-weight particles fill
    the rest.  ``logw``: float [N'] (N' ≥ n ≥ 1); returns increasing indices int64 [n] and
    their log weights float64 [n]; ``g`` gives one uniform when it samples."""
    logw = np.asarray(logw, dtype=np.float64)
    scale = math.log(n / logw.size)
    pos = np.flatnonzero(np.isfinite(logw))
    if pos.size <= n:
        idx = np.sort(np.concatenate([pos, np.flatnonzero(~np.isfinite(logw))[:n - pos.size]]))
        return idx.astype(np.int64), logw[idx] + scale
    w = normalize_log_weights(logw)
    order = np.argsort(-w, kind="stable")
    tail = np.cumsum(w[order][::-1])[::-1]  # tail[k] = Σ_{j ≥ k} ŵ_(j)
    ok = (n - np.arange(n)) * w[order][:n] < tail[:n]  # c_k ŵ_(k) < 1, c_k = (n - k) / tail_k
    ok[-1] = True  # holds exactly: more than n weights are positive
    k = int(np.argmax(ok))  # |I_det|: the first k that passes (c_k grows until then)
    stoch = np.sort(order[k:])
    alpha = tail[k] / (n - k)  # = 1 / c*
    c = np.cumsum(w[stoch])
    u = alpha * (g.random() + np.arange(n - k))
    pick = stoch[np.minimum(np.searchsorted(c, u, side="right"), stoch.size - 1)]
    idx = np.concatenate([order[:k], pick])
    new = np.concatenate([logw[order[:k]], np.full(n - k, log_mean_exp(logw)
                                                   + math.log(logw.size * alpha))]) + scale
    o = np.argsort(idx, kind="stable")
    return idx[o].astype(np.int64), new[o]


def run_smc(model: Model, n_particles: int, *, ess_threshold: float = 0.5,
            resampling: str = "multinomial", expansion: int | None = None, seed=None,
            max_steps: int | None = None, progress: Callable[[int], None] | None = None
            ) -> ProgramResult:
    """SMC over ``n_particles`` copies of ``model`` (paper 004 Alg. 1; the rules of
    :class:`~.smc.SMC`).

    Each step runs ``step()`` of the live particles (batched), advances the extended contexts
    (one forward each) and, while one is live, resamples (:func:`~.smc.resample_indices`:
    ``resampling`` multinomial, stratified or systematic) when the ESS is below
    ``ess_threshold · M``, setting every weight to the mean (Ẑ stays unbiased).

    ``resampling="without_replacement"`` is the seed's scheme (Alg. 1 with K = ``expansion``,
    default 3 as in its experiments): before each step every live particle becomes K clones
    (the LM batch grows to N' rows), after it :func:`without_replacement_indices` keeps M
    distinct ones, every step (``ess_threshold`` unused); K = 1 never resamples.

    Stops when all are done or after ``max_steps`` steps (unfinished particles: twist
    divided out).  ``seed``: int, None or a ``numpy.random.Generator`` (consumed as by
    :meth:`~.smc.SMC.run`); ``progress(step)``; ``model`` is the particles' template and is
    not modified.

    Raises:
        InvalidArgumentError: bad M, threshold, resampling or expansion; a vocabulary
            mismatch; a step that reads a context twice, uses a stale context, or awaits
            anything but sample.
    """
    if not isinstance(model, Model):
        raise InvalidArgumentTypeError(f"run_smc needs a Model, got {type(model).__name__}")
    M = int(n_particles)
    for bad, msg in ((M < 1, f"n_particles must be >= 1 (got {n_particles})"),
                     (not 0.0 <= ess_threshold <= 1.0,
                      f"ess_threshold must be in [0, 1] (got {ess_threshold})"),
                     (resampling not in _RESAMPLING, f"resampling must be one of "
                      f"{', '.join(_RESAMPLING)}: {resampling!r}"),
                     (expansion is not None and (resampling != "without_replacement"
                                                 or int(expansion) < 1),
                      f"expansion (K >= 1) goes with resampling='without_replacement' "
                      f"(got {expansion}, {resampling!r})"),
                     (not hasattr(model, "_handles"),
                      f"{type(model).__name__}.__init__ must call super().__init__()"),
                     (getattr(model, "_runner", None) is not None,
                      "run_smc: this model is a running particle, not a template")):
        if bad:
            raise _err(msg)
    wr, K = resampling == "without_replacement", int(3 if expansion is None else expansion)
    t0 = time.perf_counter()
    g = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    lms = {id(h.lm): h.lm for h in model._handles if isinstance(h, Context)}
    calls0 = {k: lm.calls for k, lm in lms.items()}
    runner = _Runner(model, M)
    memo = _shared_memo(model, runner)
    particles = [model.clone(memo) for _ in range(M)]
    for i, p in enumerate(particles):
        p._index, p._runner = i, runner
    n_resample, steps, ess_hist = 0, 0, []
    try:
        while not all(p.done for p in particles) and (max_steps is None or steps < max_steps):
            if progress is not None:
                progress(steps)
            if wr:  # Alg. 1 lines 8-17: K clones of each live particle, weights × N'/(KN)
                n2 = sum(1 if p.done else K for p in particles)
                particles = _reorder(particles, runner, memo, np.repeat(
                    np.arange(M), [1 if p.done else K for p in particles]))
                for p in particles:
                    p.log_weight += math.log(n2 / (M * (1 if p.done else K)))
            _drive(particles, runner, g)
            runner.end_step(particles)
            steps += 1
            logw = np.array([p.log_weight for p in particles])
            if wr:  # Alg. 1 lines 18-30 (nothing to do if N' = M)
                if len(particles) > M:
                    idx, new_logw = without_replacement_indices(logw, M, g)
                    particles = _reorder(particles, runner, memo, idx)
                    for p, lw in zip(particles, new_logw.tolist()):
                        p.log_weight = lw
                    n_resample += 1
            elif any(not p.done for p in particles) and np.isfinite(logw).any():
                wn = normalize_log_weights(logw)
                ess_hist.append(1.0 / float((wn ** 2).sum()))
                if ess_hist[-1] < ess_threshold * M:
                    idx = resample_indices(wn, M, resampling, g)
                    mean = log_mean_exp(logw)
                    particles = _reorder(particles, runner, memo, idx)
                    for p in particles:
                        p.log_weight = mean
                    n_resample += 1
        unfinished = [p for p in particles if not p.done]
        for p in unfinished:
            p.untwist()
        logw = np.array([p.log_weight for p in particles])
        log_Z = log_mean_exp(logw)
        ok = bool(np.isfinite(logw).any())
        wn = normalize_log_weights(logw) if ok else np.zeros(M)
        sample = int(g.choice(M, p=wn)) if ok else -1
    finally:
        for s in runner.slots:  # free the KV caches; the particles keep their tokens
            if s.kind == "context":
                s.state = s.logp = None
    stats = {"seconds": time.perf_counter() - t0, "steps": steps,
             "lm_calls": sum(lm.calls - calls0[k] for k, lm in lms.items()),
             "resampling_steps": n_resample, "ess": ess_hist, "unfinished": len(unfinished)}
    if runner.awrs_checks:
        stats["awrs_checks_per_token"] = list(runner.awrs_checks)
    return ProgramResult(particles, torch.from_numpy(logw), torch.from_numpy(wn),
                         float(log_Z), sample, stats)
