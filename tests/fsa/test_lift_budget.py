"""The lift's memory budget (issue 23, "no estimate of the lifted size"): :mod:`tractable.fsa.
lift_budget`.

A chain of distinct letter classes has few byte states but many dense token rows: over
Llama-3, 20,000 classes died with MemoryError at 5 GiB after 15 s.  Under a budget the lift
refuses it with a typed :class:`LiftSizeError` before allocating past the budget, and the
memory actually allocated (numpy arrays are traced by ``tracemalloc``) stays near the budget.

CALIBRATION (peaks of live charges of whole compiles with an unlimited budget, Llama-3;
measured here): sql.lark "over" 1.55 GiB, lark.lark "over" 1.33, c.gbnf "under" 0.23; the
135 JSON Schemas of tests/data in both languages at most 1.24 (Github_hard o1052), median
0.03 (``bench/results/lift_budget.md``); the chain of 20,000 classes 2.91.  The default,
2.5 GiB, sits between.
"""

from __future__ import annotations

import random
import tracemalloc

import pytest
from tractable.fsa.errors import InvalidArgumentError, LiftSizeError, TractableError
from tractable.fsa.lift_budget import MAX_LIFT_BYTES, current_budget, default_limit, lift_budget
from tractable.fsa.regex import clear_regex_cache, compile_regex


def _chain(n: int, seed: int = 0) -> str:
    """n distinct letter classes in a row (each a random range of 11-20 letters)."""
    rng = random.Random(seed)
    return "".join(f"[{chr(97 + rng.randrange(10))}-{chr(107 + rng.randrange(10))}]"
                   for _ in range(n))


def test_a_chain_is_refused_under_a_small_budget_and_memory_stays_near_it(gpt2_vocab):
    pat = _chain(1000)
    limit = 32 << 20
    clear_regex_cache()
    tracemalloc.start()
    try:
        with lift_budget(limit) as b, pytest.raises(LiftSizeError) as e:
            compile_regex(pat, gpt2_vocab)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = e.value
    assert isinstance(err, TractableError) and isinstance(err, ValueError)
    assert err.limit == limit and err.used > limit and "token" in err.what
    assert "TRACTABLE_MAX_LIFT_BYTES" in str(err)
    # what was allocated stays near the budget (unlimited, the compile allocated ~150 MiB)
    assert peak < 3 * limit, peak
    # unlimited, the same (cold) compile peaks at ~70 MiB of live charges and succeeds; the walks
    # are cached on the vocabulary, so budgets count cold work (a warm compile charges less)
    clear_regex_cache()
    with lift_budget(1 << 50) as b:
        A = compile_regex(pat, gpt2_vocab)
    assert A.num_states == 1001 and b.peak > 50 << 20 and b.total >= b.peak


def test_the_environment_variable_sets_the_default(gpt2_vocab, monkeypatch):
    assert current_budget() is None and default_limit() == MAX_LIFT_BYTES
    monkeypatch.setenv("TRACTABLE_MAX_LIFT_BYTES", "1e6")
    assert default_limit() == 1_000_000
    clear_regex_cache()
    with pytest.raises(LiftSizeError):
        compile_regex(_chain(300, seed=1), gpt2_vocab)
    monkeypatch.setenv("TRACTABLE_MAX_LIFT_BYTES", "lots")
    clear_regex_cache()
    with pytest.raises(InvalidArgumentError, match="TRACTABLE_MAX_LIFT_BYTES"):
        compile_regex(_chain(3, seed=2), gpt2_vocab)
    monkeypatch.delenv("TRACTABLE_MAX_LIFT_BYTES")
    clear_regex_cache()
    assert compile_regex(_chain(3, seed=2), gpt2_vocab).num_states == 4


def test_budget_is_scoped_and_checks_its_argument():
    with lift_budget(10 << 20) as outer:
        with lift_budget() as inner:  # nested without a limit: the same account
            assert inner is outer
        with lift_budget(5 << 20) as own:
            assert own is not outer and current_budget() is own
        assert current_budget() is outer
    assert current_budget() is None
    for bad in (0, -1, 1.5, "1"):
        with pytest.raises(InvalidArgumentError), lift_budget(bad):
            pass


def test_budgets_do_not_change_what_compiles(gpt2_vocab):
    """A generous budget gives the same automaton as no budget (charges only count)."""
    pat = r"(\d{1,3}\.){3}\d{1,3}|[a-z]+@[a-z]+\.(com|org)"
    clear_regex_cache()
    A = compile_regex(pat, gpt2_vocab)
    clear_regex_cache()
    with lift_budget(1 << 40):
        B = compile_regex(pat, gpt2_vocab)
    assert (A.num_states, A.num_edges) == (B.num_states, B.num_edges)
    assert bool((A.edge_src == B.edge_src).all() and (A.edge_dst == B.edge_dst).all())
