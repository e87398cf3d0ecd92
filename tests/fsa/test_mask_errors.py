"""Mask misuse is a typed error (issue 23): a live row below its minimum budget raises
UnsatisfiableBudgetError (or gets only EOS / nothing when asked), on the CPU engine and on the
kernel path alike; bad policies, token ids and batch sizes are TractableErrors; callers that
relied on empty rows (the logits processor's replay) keep their behaviour."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from tractable.fsa import masks
from tractable.fsa import nfa as N
from tractable.fsa.automaton import TokenAutomaton
from tractable.fsa.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    TokenError,
    TractableError,
    UnsatisfiableBudgetError,
)
from tractable.fsa.state import AutomatonState
from tractable.fsa.vocabulary import TokenVocabulary

from tractable.testing.masks import reachable_sets, tiny_automata

HSET = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@pytest.fixture()
def tiny():
    # ids: 0 'a', 1 'b', 2 'ab', 3 'c', 4 EOS, 5 special;  a+ b c?
    vocab = TokenVocabulary.from_token_bytes(["a", "b", "ab", "c", None, None], eos_token_ids=[4])
    return TokenAutomaton.from_byte_nfa(
        N.concat(N.plus(N.literal("a")), N.literal("b"), N.optional(N.literal("c"))), vocab)


def test_error_types_and_messages(tiny):
    A = tiny
    st = A.advance(A.start(3), torch.tensor([0, 4, 2]))  # 'a' (needs 1), dead, 'ab' (accepting)
    with pytest.raises(UnsatisfiableBudgetError) as ei:
        A.allowed(st, 0)
    e = ei.value
    assert isinstance(e, TractableError) and isinstance(e, ValueError)
    assert (e.row, e.budget, e.minimum) == (0, 0, 1)  # the dead row 1 is not an error
    assert "row 0" in str(e) and "on_unsatisfiable" in str(e)
    with pytest.raises(UnsatisfiableBudgetError) as ei:
        A.allowed(st.select([1, 2]), torch.tensor([5, 0]))
    assert ei.value.row == 1
    with pytest.raises(UnsatisfiableBudgetError) as ei:  # whole-output check: no row
        A.check_budget(0)
    assert ei.value.row is None and "shortest accepted output needs 1" in str(ei.value)
    for bad in ("nan", "", None):
        with pytest.raises(InvalidArgumentError):
            A.allowed(st, 3, on_unsatisfiable=bad)


def test_token_ids_and_batch_sizes_are_typed(tiny):
    A = tiny
    with pytest.raises(InvalidArgumentTypeError):
        A.advance(A.start(2), torch.tensor([[0], [1]]))
    with pytest.raises(InvalidArgumentError):
        A.advance(A.start(2), torch.tensor([0, 1, 2]))
    with pytest.raises(InvalidArgumentTypeError):
        A.start("2")
    with pytest.raises(InvalidArgumentTypeError):
        A.start(True)
    with pytest.raises(InvalidArgumentError):
        A.start(-1)
    with pytest.raises(InvalidArgumentError):
        A.allowed(AutomatonState(torch.zeros(1, A.num_states + 1, dtype=torch.bool), A.final), 3)


def _softmax_loop(A, n, policy, seed=0):
    """A hand-written sampling loop (what the issue's NaN came from): returns the sequence and
    whether every step's distribution was finite."""
    g = torch.Generator().manual_seed(seed)
    st, out, finite = A.start(1), [], True
    for r in range(n, 0, -1):
        m = A.allowed(st, r, on_unsatisfiable=policy)[0]
        logits = torch.randn(A.vocab_size, generator=g).masked_fill(~m, -math.inf)
        p = torch.softmax(logits, -1)
        finite &= bool(torch.isfinite(p).all())
        t = int(torch.multinomial(p, 1, generator=g)) if finite else -1
        out.append(t)
        if t in A.eos_token_ids or t < 0:
            break
        st = A.advance(st, torch.tensor([t]))
    return out, finite


def test_hand_written_loop_never_sees_nan(tiny):
    A = tiny
    assert A.min_tokens_to_accept() == 1
    A2 = TokenAutomaton.from_byte_nfa(N.concat(N.literal("a"), N.literal("c")),
                                      TokenVocabulary.from_token_bytes(
                                          ["a", "b", "ab", "c", None, None], eos_token_ids=[4]))
    assert A2.min_tokens_to_accept() == 2
    with pytest.raises(UnsatisfiableBudgetError):  # default: an error, not NaN
        _softmax_loop(A2, 1, "raise")
    seq, finite = _softmax_loop(A2, 1, "eos")  # "eos": the row ends at once
    assert finite and seq == [4] and not A2.accepts(seq)
    _, finite = _softmax_loop(A2, 1, "empty")  # the old behaviour, on request: NaN
    assert not finite
    for seed in range(5):  # at or above the minimum every policy walks to acceptance
        for pol in ("raise", "eos", "empty"):
            seq, finite = _softmax_loop(A2, 3, pol, seed)
            assert finite and A2.accepts(seq), (pol, seq)


@HSET
@given(tiny_automata(max_states=6))
def test_kernel_path_matches_engine_for_every_policy(case):
    """The CUDA path's logic (the kernel's torch reference on CPU tensors) gives the engine's
    masks and raises the engine's errors, row for row."""
    _, _, A = case
    sets = reachable_sets(A, max_depth=4, limit=6)
    st = AutomatonState.cat([_after(A, p) for p, _ in sets]
                            + [A.advance(A.start(1), torch.tensor([A.eos_token_ids[0]]))])
    B = st.batch_size
    for mode in ("gcd", "lcd"):
        for rem in (torch.arange(B) % 4, torch.full((B,), 6), 2, None):
            for pol in ("eos", "empty", "raise"):
                try:
                    want = A.allowed_packed(st, rem, mode, on_unsatisfiable=pol)
                except UnsatisfiableBudgetError as e:
                    with pytest.raises(UnsatisfiableBudgetError) as ei:
                        masks._allowed_packed_tables(A, st, rem, mode, pol)
                    assert (ei.value.row, ei.value.budget, ei.value.minimum) == (
                        e.row, e.budget, e.minimum)
                    continue
                got = masks._allowed_packed_tables(A, st, rem, mode, pol)
                assert torch.equal(got, want), (mode, rem, pol)


def _after(A, prefix):
    st = A.start(1)
    for t in prefix:
        st = A.advance(st, torch.tensor([t]))
    return st


def test_processor_replay_past_the_budget_is_still_a_violation(tiny):
    """decode/processor.py: a replayed prefix longer than max_new_tokens reports the token the
    (empty) mask did not allow — a TokenError naming it — as before issue 23."""
    from tractable.decode.processor import GCDLogitsProcessor

    A = tiny
    proc = GCDLogitsProcessor(A, max_new_tokens=2, on_violation="raise")
    scores = torch.zeros(1, A.vocab_size)
    proc(torch.tensor([[5, 5]]), scores)  # prompt of 2
    with pytest.raises(TokenError) as ei:  # 'ab', 'c', then one token past the budget
        proc(torch.tensor([[5, 5, 2, 3, 3]]), scores)
    assert ei.value.token_id == 3
    proc = GCDLogitsProcessor(A, max_new_tokens=2, on_violation="prune")
    proc(torch.tensor([[5, 5]]), scores)
    out = proc(torch.tensor([[5, 5, 2, 3, 3]]), scores)
    assert proc.pruned_rows == 1
    assert np.flatnonzero(np.isfinite(out[0].numpy())).tolist() == [4]  # only EOS
