"""verify_draft (fsa/speculative.py) against stepping token by token with the masks: GCD and
LCD, every budget, batched drafts of mixed lengths, EOS in the draft, rollback states."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tractable.fsa.errors import InvalidArgumentError, UnsatisfiableBudgetError
from tractable.fsa.regex import compile_regex
from tractable.fsa.speculative import verify_draft
from tractable.fsa.vocabulary import TokenVocabulary

TOKS = ["a", "b", "c", "ab", "bc", "abc", "1", "12", "-", None]  # id 9: EOS


@pytest.fixture(scope="module")
def auto():
    vocab = TokenVocabulary.from_token_bytes(TOKS, eos_token_ids=[9])
    return compile_regex(r"(ab|c)+-?[12]{0,3}", vocab)


def _stepwise(A, st, draft, r, mode):
    """Reference: the mask rule applied one token at a time."""
    n = 0
    for i, t in enumerate(draft):
        try:
            ok = bool(A.allowed(st, r - i, mode)[0, t])
        except UnsatisfiableBudgetError:  # no token allowed (masks that raise rather than
            ok = False                     # return an empty row)
        if not ok:
            break
        n += 1
        st = A.advance(st, torch.tensor([t]))
        if t in A.eos_token_ids:
            break
    return n, st


@pytest.mark.parametrize("mode", ["gcd", "lcd"])
def test_against_stepwise(auto, mode):
    A = auto
    rng = np.random.default_rng(0)
    checked = partial = 0
    for _ in range(300):
        # a prefix walked under the mask, then a random draft
        st = A.start()
        for _ in range(int(rng.integers(0, 3))):
            ok = A.allowed(st, 8, "gcd")[0].nonzero().flatten().tolist()
            ok = [t for t in ok if t != 9]  # budget 8 always satisfiable here
            if not ok:
                break
            st = A.advance(st, torch.tensor([int(rng.choice(ok))]))
        r = int(rng.integers(0, 8))
        k = int(rng.integers(1, 6))
        draft = rng.integers(0, 10, size=k).tolist()
        res = verify_draft(A, st, draft, r, mode)
        n, want = _stepwise(A, st, draft, r, mode)
        assert int(res.accepted[0]) == n, (draft, r)
        assert torch.equal(res.state.active, want.active)
        assert len(res.states) == k + 1 and res.states[0] is st
        for j in range(k + 1):
            _, sj = _stepwise(A, st, draft[:min(j, n)], r, mode)
            assert torch.equal(res.states[j].active, sj.active)
        checked += 1
        partial += 0 < n < k
    assert checked == 300 and partial > 20


def test_batched_mixed_lengths_and_budgets(auto):
    A = auto
    rng = np.random.default_rng(1)
    B, k = 16, 5
    draft = torch.as_tensor(rng.integers(0, 10, size=(B, k)))
    draft[0] = torch.tensor([3, 3, 4, 6, 9])  # ab ab bc: bc is not allowed after ab ab
    draft[1] = torch.tensor([3, 2, 6, 9, 0])  # ab c 1 EOS: all four, then stop
    lengths = rng.integers(0, k + 1, size=B)
    lengths[0] = lengths[1] = 5
    rem = torch.as_tensor(rng.integers(1, 9, size=B))
    rem[0] = rem[1] = 8
    st = A.start(B)
    res = verify_draft(A, st, draft, rem, "gcd", lengths=lengths)
    for b in range(B):
        n, want = _stepwise(A, A.start(), draft[b, :lengths[b]].tolist(), int(rem[b]), "gcd")
        assert int(res.accepted[b]) == n
        assert torch.equal(res.state.active[b], want.active[0])
    assert res.accepted[0] == 2 and res.accepted[1] == 4
    assert bool(res.state.is_dead()[1])  # after EOS: the empty set, as advance gives


def test_tight_budget_rejects_what_cannot_close(auto):
    A = auto
    # with 2 tokens left, "a" (closable by "b") and "b" are allowed, then the budget is spent
    res = verify_draft(A, A.start(), [0, 1, 2], 2, "gcd")
    assert int(res.accepted[0]) == 2
    res = verify_draft(A, A.start(), [0, 1, 2], 3, "gcd")
    assert int(res.accepted[0]) == 3
    res = verify_draft(A, A.start(), [0, 0], 5, "lcd")  # "aa" is never valid
    assert int(res.accepted[0]) == 1


def test_bad_arguments(auto):
    with pytest.raises(InvalidArgumentError, match="mode"):
        verify_draft(auto, auto.start(), [1], 3, "nope")
    with pytest.raises(InvalidArgumentError, match="shape"):
        verify_draft(auto, auto.start(2), [[1, 2]], 3)
    with pytest.raises(InvalidArgumentError, match="lengths"):
        verify_draft(auto, auto.start(), [[1, 2]], 3, lengths=[3])
