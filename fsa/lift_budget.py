"""The lift's resource limit: bytes of intermediate arrays, charged as the lift makes them.

The front ends estimate *byte* states before they build (``max_states``), but the token lift's
size is not a function of the byte states alone: it is the number of (start, trie node) records
its walks reach and of the packed token rows (``ceil(V/32)`` words each) it keeps, which depend
on how many vocabulary tokens each state reads.  A chain of 20,000 distinct letter classes
(40,000 byte states, well under ``max_states``) needed 97,528 dense Llama-3 rows for one
template: 1.5 GiB for that array alone, and the process died at 5 GiB after 15 s (measured
here).  No estimate short of the walk itself knows that number, so the lift charges every
large intermediate array to a per-lift budget *before allocating it*
(:func:`charge`): walk records (3 int64 each, per depth) and packed rows (``4 · ceil(V/32)``
bytes each).  Past the budget the lift stops with :class:`~.errors.LiftSizeError` naming what
it was building and the bytes alive — bounded memory (time is bounded by the byte-state
limits of the front ends, not here).

The limit is :data:`MAX_LIFT_BYTES` (2.5 GiB of live charges; the environment variable
``TRACTABLE_MAX_LIFT_BYTES`` overrides it, read when a lift starts), or the ``limit`` given to
:func:`lift_budget` around a compile.  What is charged and not released is what is
alive: walk records until their chunk or component is turned into rows (:func:`release`),
float64 bincounts until packed, and packed, gathered and concatenated token rows for the rest
of the lift.  So the budget bounds the peak of these arrays, whatever the total work (the plain
walk is chunked so that its records stay small: Spider SQL "over" walks 64M records in
chunks).

What it does not bound: arrays that grow with edges and keys rather than with rows x V (the
subset table, sorted keys, label construction).  Measured peak RSS against peak live charges
(Llama-3): the 5,000-class chain 2.0 GB / 0.81 GiB, the 20,000-class chain 6.4 GB / 2.91 GiB,
c.gbnf "under" 2.2 GB / 0.23 GiB, sql.lark "over" 8.4 GB / 1.55 GiB, lark.lark "over" 9.5 GB
/ 1.33 GiB (the last two spend most of their memory outside the charged arrays).
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import InvalidArgumentError, LiftSizeError

__all__ = ["MAX_LIFT_BYTES", "LiftBudget", "lift_budget", "charge", "release",
           "current_budget", "default_limit"]


#: Default budget of one lift: bytes of live charges (see the module docstring).  2.5 GiB:
#: above the heaviest grammars of the test data (peaks of live charges over Llama-3, measured
#: here: sql.lark "over" 1.55 GiB, lark.lark "over" 1.33, 270 JSON Schema compiles at most
#: 1.24 (median 0.03), bench/results/lift_budget.md) and below the chain of 20,000
#: distinct letter classes (2.91 GiB live, 6.4 GB RSS unlimited).
MAX_LIFT_BYTES: int = 5 << 29


def default_limit() -> int:
    """``TRACTABLE_MAX_LIFT_BYTES`` when set (bytes, e.g. ``8e9``), else :data:`MAX_LIFT_BYTES`.

    Raises :class:`~.errors.InvalidArgumentError` for a value that is not a positive number."""
    raw = os.environ.get("TRACTABLE_MAX_LIFT_BYTES")
    if raw is None:
        return MAX_LIFT_BYTES
    try:
        value = int(float(raw))
    except (ValueError, OverflowError) as e:
        raise InvalidArgumentError(
            f"TRACTABLE_MAX_LIFT_BYTES must be a number of bytes, got {raw!r}") from e
    if value <= 0:
        raise InvalidArgumentError(f"TRACTABLE_MAX_LIFT_BYTES must be > 0, got {raw!r}")
    return value


@dataclass
class LiftBudget:
    """The running account of one lift: ``limit``, ``used`` (bytes charged and not released:
    the arrays alive), ``peak`` (the most ``used`` was), ``total`` (every charge), the largest
    charge (``largest``, ``largest_what``).  Mutated by :func:`charge` and :func:`release`."""

    limit: int
    used: int = 0
    peak: int = 0
    total: int = 0
    largest: int = 0
    largest_what: str = ""


_CURRENT: contextvars.ContextVar[LiftBudget | None] = contextvars.ContextVar(
    "tractable_lift_budget", default=None)


@contextmanager
def lift_budget(limit: int | None = None) -> Iterator[LiftBudget]:
    """Charge the lifts run inside to one :class:`LiftBudget` of ``limit`` bytes (default
    :data:`MAX_LIFT_BYTES`).  Nested uses keep the outer budget unless ``limit`` is given.
    Thread- and task-local (a ``contextvars`` variable)."""
    outer = _CURRENT.get()
    if outer is not None and limit is None:
        yield outer
        return
    if limit is not None and (not isinstance(limit, int) or limit <= 0):
        raise InvalidArgumentError(f"lift budget limit must be a positive int, got {limit!r}")
    budget = LiftBudget(default_limit() if limit is None else limit)
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)


def current_budget() -> LiftBudget | None:
    """The budget lifts are charged to here, or None outside :func:`lift_budget`."""
    return _CURRENT.get()


def charge(nbytes: int, what: str) -> None:
    """Charge ``nbytes`` (an array about to be allocated) to the current budget; raise
    :class:`~.errors.LiftSizeError` when the total passes the limit.  No budget: no-op."""
    b = _CURRENT.get()
    if b is None:
        return
    nbytes = int(nbytes)
    b.used += nbytes
    b.total += nbytes
    b.peak = max(b.peak, b.used)
    if nbytes > b.largest:
        b.largest, b.largest_what = nbytes, what
    if b.used > b.limit:
        raise LiftSizeError(what, b.used, b.limit)


def release(nbytes: int) -> None:
    """Return ``nbytes`` of earlier charges (the arrays are dropped).  No budget: no-op."""
    b = _CURRENT.get()
    if b is not None:
        b.used = max(0, b.used - int(nbytes))
