"""GCD / LCD masks (fsa/state.py) against brute force, eq. 3 / eq. 4 computed literally, and a
real Llama-3 automaton."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tractable.fsa import nfa as N
from tractable.fsa.automaton import TokenAutomaton, pack_bits
from tractable.fsa.errors import UnsatisfiableBudgetError
from tractable.fsa.state import AutomatonState
from tractable.fsa.vocabulary import TokenVocabulary

from tractable.testing.masks import (
    brute_force_allowed,
    brute_force_min_lengths,
    brute_force_viable,
    eq4_backward_literal,
    eq34_mask_literal,
    eq34_masks_literal,
    reachable_sets,
    tiny_automata,
)

MAX_R = 8
_HC = [HealthCheck.too_slow, HealthCheck.filter_too_much]
HSET = settings(max_examples=60, deadline=None, suppress_health_check=_HC)
HSET_MAIN = settings(max_examples=150, deadline=None, suppress_health_check=_HC)


def _state_after(A, prefix) -> AutomatonState:
    st = A.start(1)
    for t in prefix:
        st = A.advance(st, torch.tensor([t]))
    return st


# ------------------------------------------------------------------ brute force, tiny vocabularies


@HSET_MAIN
@given(tiny_automata(max_states=8))
def test_masks_equal_brute_force(case):
    """Every reachable state set, every r <= 8: gcd == enumeration == literal eq. 3/4;
    lcd == viability; packed == pack(bool)."""
    _, _, A = case
    for prefix, row in reachable_sets(A, max_depth=6, limit=40):
        st = _state_after(A, prefix)
        assert np.array_equal(st.active[0].numpy(), row)
        best = brute_force_min_lengths(A, prefix, max_len=MAX_R)
        viable = brute_force_viable(A, prefix)
        literal = eq34_masks_literal(A, row, MAX_R)
        for r in range(0, MAX_R + 1):
            gcd = A.allowed(st, r, "gcd")[0]
            expect = torch.from_numpy(best <= r)
            assert torch.equal(gcd, expect), (prefix, r, gcd, expect)
            assert torch.equal(gcd, literal[r]), (prefix, r)
            lcd = A.allowed(st, r, "lcd")[0]
            assert torch.equal(lcd, torch.from_numpy(viable) & (r >= 1)), (prefix, r)
            for mode, m in (("gcd", gcd), ("lcd", lcd)):
                assert torch.equal(A.allowed_packed(st, r, mode)[0], pack_bits(m))
        assert torch.equal(A.allowed(st, None, "lcd")[0], torch.from_numpy(viable))
        # GCD with an unbounded budget is LCD
        assert torch.equal(A.allowed(st, None, "gcd")[0], torch.from_numpy(viable))


@HSET
@given(tiny_automata())
def test_distance_threshold_is_literal_eq4(case):
    """Exact-length backward messages (eq. 4 with EOS padding) == distance threshold."""
    _, _, A = case
    n = MAX_R
    literal = eq4_backward_literal(A, n)
    d = A.distance_to_accept()
    for k in range(n + 1):
        assert torch.equal(literal[k], d <= k), k
    # backward_messages(n)[t] is β_t, i.e. n - t steps left
    assert torch.equal(A.backward_messages(n), literal.flip(0))


@HSET
@given(tiny_automata())
def test_min_tokens_is_shortest_accepted(case):
    _, _, A = case
    m = A.min_tokens_to_accept()
    if bool(A.final[0]):
        assert m == 0
    else:
        best = brute_force_min_lengths(A, [], max_len=MAX_R)
        text = [v for v in range(A.vocab_size) if v not in A.eos_token_ids]
        shortest = min(best[v] for v in text)
        assert shortest == m or (m > MAX_R and shortest == np.inf)
    A.check_budget(m)
    with pytest.raises(UnsatisfiableBudgetError) as ei:
        A.check_budget(m - 1)
    assert ei.value.minimum == m and ei.value.budget == m - 1


@HSET
@given(tiny_automata(), st.integers(0, 6), st.randoms(use_true_random=False))
def test_gcd_walk_never_dead_ends(case, extra, rnd):
    """Sampling only allowed tokens with budget n >= minimum always ends accepted within n."""
    _, _, A = case
    n = A.min_tokens_to_accept() + extra
    eos = set(A.eos_token_ids)
    buf = torch.empty((1, (A.vocab_size + 31) // 32), dtype=torch.int32)
    for _ in range(5):
        st = A.start(1)
        out = []
        for r in range(n, 0, -1):
            m = A.allowed(st, r)[0]
            # the reused-buffer fast path gives the same bits
            assert A.allowed_packed(st, r, out=buf) is buf
            assert torch.equal(buf[0], pack_bits(m))
            lcd = A.allowed_packed(st, r, "lcd", out=buf)
            assert torch.equal(lcd, A.allowed_packed(st, r, "lcd"))
            choices = np.flatnonzero(m.numpy()).tolist()
            assert choices, (out, r)
            t = rnd.choice(choices)
            out.append(t)
            if t in eos:
                break
            st = A.advance(st, torch.tensor([t]))
        assert A.accepts(out), out
        assert len(out) <= n


@HSET
@given(tiny_automata(), st.randoms(use_true_random=False))
def test_batch_select_and_per_row_budgets(case, rnd):
    _, _, A = case
    sets = reachable_sets(A, max_depth=4, limit=8)
    B = 6
    picks = [rnd.randrange(len(sets)) for _ in range(B)]
    st = AutomatonState.cat([_state_after(A, sets[i][0]) for i in picks])
    rem = torch.tensor([rnd.randrange(0, MAX_R + 1) for _ in range(B)])
    for mode in ("gcd", "lcd"):
        batch = A.allowed(st, rem, mode)
        packed = A.allowed_packed(st, rem, mode)
        for b in range(B):
            one = _state_after(A, sets[picks[b]][0])
            assert torch.equal(batch[b], A.allowed(one, int(rem[b]), mode)[0])
        assert torch.equal(packed, pack_bits(batch))
    perm = torch.tensor([rnd.randrange(B) for _ in range(B + 2)])
    sel = st.select(perm)
    assert torch.equal(sel.active, st.active[perm])
    assert torch.equal(A.allowed(sel, rem[perm]), A.allowed(st, rem)[perm])
    # a state rebuilt from its raw active tensor (no cache ids) gives the same masks
    raw = AutomatonState(st.active.clone(), A.final)
    assert torch.equal(A.allowed(raw, rem), A.allowed(st, rem))
    assert torch.equal(A.advance(raw, perm[:B]).active, A.advance(st, perm[:B]).active)


# ------------------------------------------------------------------ explicit cases


@pytest.fixture()
def tiny():
    # ids: 0 'a', 1 'b', 2 'ab', 3 'c', 4 EOS, 5 special
    vocab = TokenVocabulary.from_token_bytes(["a", "b", "ab", "c", None, None], eos_token_ids=[4])
    # a+ b c?
    A = TokenAutomaton.from_byte_nfa(
        N.concat(N.plus(N.literal("a")), N.literal("b"), N.optional(N.literal("c"))), vocab
    )
    return A


def test_eos_and_dead_rows(tiny):
    A = tiny
    assert A.min_tokens_to_accept() == 1  # "ab"
    st = A.advance(A.start(3), torch.tensor([2, 4, 5]))  # 'ab', EOS, special id
    assert st.is_accepting().tolist() == [True, False, False]
    assert st.is_dead().tolist() == [False, True, True]
    m = A.allowed(st, 5)
    assert m[0].tolist() == [False, False, False, True, True, False]  # 'c' or EOS
    assert not m[1:].any()
    # r = 1 in an accepting state: EOS or a token that ends in an accepting state
    assert A.allowed(st, 1)[0].tolist() == [False, False, False, True, True, False]
    # r = 0: nothing
    assert not A.allowed(st, 0).any() and not A.allowed(st, 0, "lcd").any()
    # accepting state without out-edges ('abc'): only EOS
    st2 = A.advance(st.select(torch.tensor([0])), torch.tensor([3]))
    assert A.allowed(st2, 3)[0].tolist() == [False, False, False, False, True, False]
    assert A.allowed(st2, 3, "lcd")[0].tolist() == [False, False, False, False, True, False]
    # out-of-range ids and EOS kill the row; a dead row stays dead
    st3 = A.advance(A.start(2), torch.tensor([99, -1]))
    assert st3.is_dead().all()
    assert A.advance(st3, torch.tensor([0, 0])).is_dead().all()


def test_budget_shapes_gcd_vs_lcd(tiny):
    A = tiny
    st = A.start(1)
    # at the start with r = 1 only 'ab' (1 token) can finish; 'a' needs >= 2 tokens
    assert A.allowed(st, 1)[0].tolist() == [False, False, True, False, False, False]
    assert A.allowed(st, 2)[0].tolist() == [True, False, True, False, False, False]
    assert A.allowed(st, 1, "lcd")[0].tolist() == [True, False, True, False, False, False]
    with pytest.raises(UnsatisfiableBudgetError):
        A.check_budget(0)
    with pytest.raises(ValueError):
        A.allowed(st, 3, "greedy")
    with pytest.raises(ValueError):
        A.allowed(A.start(2), torch.tensor([1, 2, 3]))
    out = torch.empty((1, 1), dtype=torch.int32)
    assert A.allowed_packed(st, 2, out=out) is out


def test_brute_force_reference_itself(tiny):
    """The references agree with hand-computed masks (guards against a vacuous reference)."""
    A = tiny
    assert brute_force_allowed(A, [], 1).tolist() == [False, False, True, False, False, False]
    assert brute_force_allowed(A, [], 2).tolist() == [True, False, True, False, False, False]
    assert brute_force_allowed(A, [2], 1).tolist() == [False, False, False, True, True, False]
    assert brute_force_allowed(A, [], 0, "lcd").tolist() == [False] * 6
    assert brute_force_allowed(A, [0], 3, "lcd").tolist() == [True, True, True, False, False, False]
    start = A.initial.numpy()
    assert eq34_mask_literal(A, start, 1).tolist() == [False, False, True, False, False, False]
    assert eq34_mask_literal(A, start, 2).tolist() == [True, False, True, False, False, False]
    assert not eq34_mask_literal(A, start, 0).any()


# ------------------------------------------------------------------ real vocabulary

DATE = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"


def _date_nfa():
    d = N.byte_range(ord("0"), ord("9"))
    return N.concat(
        N.union(N.literal("19"), N.literal("20")), d, d, N.literal("-"),
        N.union(N.concat(N.literal("0"), N.byte_range(ord("1"), ord("9"))),
                N.concat(N.literal("1"), N.byte_range(ord("0"), ord("2")))),
        N.literal("-"),
        N.union(N.concat(N.literal("0"), N.byte_range(ord("1"), ord("9"))),
                N.concat(N.byteset(N.mask_of(b"12")), d),
                N.concat(N.literal("3"), N.byte_range(ord("0"), ord("1")))),
    )


def _compile(pattern, nfa_fallback, vocab):
    try:
        from tractable.fsa.regex import compile_regex
    except ImportError:  # the regex compiler is written by another helper
        return TokenAutomaton.from_byte_nfa(nfa_fallback(), vocab, meta={"pattern": pattern})
    return compile_regex(pattern, vocab)


@pytest.fixture(scope="module")
def llama_date(llama3_vocab):
    return _compile(DATE, _date_nfa, llama3_vocab)


def _dense_reference(A, row, r, mode, Bd):
    """bool [V]: the mask rule evaluated directly on dense labels ``Bd`` (bool [E, V]; no
    caches, no prefix unions)."""
    d = A.distance_to_accept()
    act = torch.as_tensor(row)
    keep = act[A.edge_src]
    if mode == "gcd":
        keep &= d[A.edge_dst] <= (r - 1)
    m = Bd[keep].any(0) if r >= 1 else torch.zeros(A.vocab_size, dtype=torch.bool)
    if r >= 1 and bool((act & A.final).any()):
        m[list(A.eos_token_ids)] = True
    return m


def test_llama3_date_walks(llama_date, llama3_vocab):
    A = llama_date
    assert A.min_tokens_to_accept() >= 3
    # eq. 4 literally on the real automaton
    n = 10
    lit = eq4_backward_literal(A, n)
    d = A.distance_to_accept()
    for k in range(n + 1):
        assert torch.equal(lit[k], d <= k)
    rnd = random.Random(0)
    Bd = A.B.dense()
    m0 = A.min_tokens_to_accept()
    eos = set(A.eos_token_ids)
    for n in sorted({m0, m0 + 1, 2 * m0, 3 * m0}):
        for _ in range(3):
            B = 4
            st = A.start(B)
            seqs = [[] for _ in range(B)]
            done = [False] * B
            for r in range(n, 0, -1):
                packed = A.allowed_packed(st, r)
                mask = A.allowed(st, r)
                assert torch.equal(pack_bits(mask), packed)
                toks = []
                for b in range(B):
                    if done[b]:
                        toks.append(next(iter(eos)))
                        continue
                    if r == n or rnd.random() < 0.3:
                        ref = _dense_reference(A, st.active[b], r, "gcd", Bd)
                        assert torch.equal(mask[b], ref)
                    choices = np.flatnonzero(mask[b].numpy()).tolist()
                    assert choices
                    t = rnd.choice(choices)
                    toks.append(t)
                    seqs[b].append(t)
                    done[b] = t in eos
                st = A.advance(st, torch.tensor(toks))
            for s in seqs:
                assert A.accepts(s)
                text = llama3_vocab.decode_bytes(s).decode()
                assert re.fullmatch(DATE, text), text


def test_llama3_lcd_allows_what_gcd_cuts(llama3_vocab, llama3_tokenizer):
    """Inside a JSON-ish string at a tight budget GCD keeps only closing tokens; LCD keeps
    the letters too (the point of the budget)."""
    letters = N.byteset(N.mask_of(b"abcdefghijklmnopqrstuvwxyz "))
    A = _compile(
        r'\{"name": "[a-z ]{1,20}"\}',
        lambda: N.concat(N.literal('{"name": "'), N.repeat(letters, 1, 20), N.literal('"}')),
        llama3_vocab,
    )
    ids = llama3_tokenizer.encode('{"name": "bob', add_special_tokens=False).ids
    st = _state_after(A, ids)
    assert not st.is_dead().any()
    r = int(A.distance_to_accept()[st.active[0]].min())
    assert r >= 1
    gcd = A.allowed(st, r)[0]
    lcd = A.allowed(st, r, "lcd")[0]
    assert bool((gcd <= lcd).all())
    assert 0 < int(gcd.sum()) < int(lcd.sum())
    for t in np.flatnonzero(gcd.numpy()).tolist():  # every GCD token can still finish in time
        nxt = A.advance(st, torch.tensor([t]))
        assert int(A.distance_to_accept()[nxt.active[0]].min()) <= r - 1
    assert torch.equal(A.allowed(st, 100)[0], lcd)


def test_packed_walk_past_64_mask_rows(gpt2_vocab):
    """Issue 21: the decode-loop fast path read ``eng.table`` before ``mask_row`` grew it, so a
    walk needing its 65th mask row raised IndexError.  Each step's packed mask (into a reused
    buffer) must equal the bool mask, and the walk must end accepted."""
    from tractable.fsa.regex import compile_regex

    A = compile_regex("([0-9]{3},){100}", gpt2_vocab)
    st = A.start(1)
    buf = torch.zeros((1, (A.vocab_size + 31) // 32), dtype=torch.int32)
    rnd = random.Random(1)
    r = A.min_tokens_to_accept() + 5
    seq: list[int] = []
    while r > 0:
        assert A.allowed_packed(st, r, out=buf) is buf
        mask = A.allowed(st, r)[0]
        assert torch.equal(pack_bits(mask[None]), buf)
        t = rnd.choice(np.flatnonzero(mask.numpy()).tolist())
        seq.append(t)
        if t in A.eos_token_ids:
            break
        st = A.advance(st, torch.tensor([t]))
        r -= 1
    assert len(seq) > 64 and A.accepts(seq)
