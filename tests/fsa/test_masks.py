"""GCD / LCD masks (fsa/masks.py) against brute force, eq. 3 / eq. 4 computed literally, and a
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
from tractable.fsa.errors import ForeignStateError, UnsatisfiableBudgetError
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
    lcd == viability; packed == pack(bool).  Where the mask is empty the default policy raises
    UnsatisfiableBudgetError whose minimum is the brute-force shortest completion."""
    _, _, A = case
    eos = list(A.eos_token_ids)
    for prefix, row in reachable_sets(A, max_depth=6, limit=40):
        st = _state_after(A, prefix)
        assert np.array_equal(st.active[0].numpy(), row)
        best = brute_force_min_lengths(A, prefix, max_len=MAX_R)
        viable = brute_force_viable(A, prefix)
        literal = eq34_masks_literal(A, row, MAX_R)
        for r in range(0, MAX_R + 1):
            gcd = A.allowed(st, r, "gcd", on_unsatisfiable="empty")[0]
            expect = torch.from_numpy(best <= r)
            assert torch.equal(gcd, expect), (prefix, r, gcd, expect)
            assert torch.equal(gcd, literal[r]), (prefix, r)
            lcd = A.allowed(st, r, "lcd", on_unsatisfiable="empty")[0]
            assert torch.equal(lcd, torch.from_numpy(viable) & (r >= 1)), (prefix, r)
            for mode, m in (("gcd", gcd), ("lcd", lcd)):
                if m.any():  # satisfiable: every policy gives the same mask
                    for pol in ("raise", "eos", "empty"):
                        got = A.allowed_packed(st, r, mode, on_unsatisfiable=pol)[0]
                        assert torch.equal(got, pack_bits(m)), (mode, pol)
                    continue
                with pytest.raises(UnsatisfiableBudgetError) as ei:
                    A.allowed_packed(st, r, mode)
                assert ei.value.row == 0 and ei.value.budget == r
                if mode == "gcd":  # the smallest budget with a non-empty mask
                    if np.isfinite(best.min()):
                        assert ei.value.minimum == best.min(), (prefix, r, ei.value.minimum)
                    else:  # beyond the enumeration's horizon (e.g. a 9-token chain)
                        assert ei.value.minimum > MAX_R, (prefix, r, ei.value.minimum)
                else:
                    assert r <= 0
                only_eos = A.allowed(st, r, mode, on_unsatisfiable="eos")[0]
                assert np.flatnonzero(only_eos.numpy()).tolist() == eos
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
    E = "empty"
    for mode in ("gcd", "lcd"):
        batch = A.allowed(st, rem, mode, on_unsatisfiable=E)
        packed = A.allowed_packed(st, rem, mode, on_unsatisfiable=E)
        for b in range(B):
            one = _state_after(A, sets[picks[b]][0])
            assert torch.equal(batch[b], A.allowed(one, int(rem[b]), mode, on_unsatisfiable=E)[0])
        assert torch.equal(packed, pack_bits(batch))
        # per-row policy: the first empty row raises (naming it), "eos" fills only those rows
        empty = [b for b in range(B) if not batch[b].any()]
        if empty:
            with pytest.raises(UnsatisfiableBudgetError) as ei:
                A.allowed(st, rem, mode)
            assert ei.value.row == empty[0] and ei.value.budget == int(rem[empty[0]])
            fixed = A.allowed(st, rem, mode, on_unsatisfiable="eos")
            for b in range(B):
                want = batch[b].clone()
                if b in empty:
                    want[list(A.eos_token_ids)] = True
                assert torch.equal(fixed[b], want), (mode, b)
        else:
            assert torch.equal(A.allowed(st, rem, mode), batch)
    perm = torch.tensor([rnd.randrange(B) for _ in range(B + 2)])
    sel = st.select(perm)
    assert torch.equal(sel.active, st.active[perm])
    assert torch.equal(A.allowed(sel, rem[perm], on_unsatisfiable=E),
                       A.allowed(st, rem, on_unsatisfiable=E)[perm])
    # a state rebuilt from its raw active tensor (no cache ids) gives the same masks
    raw = AutomatonState(st.active.clone(), A.final)
    assert torch.equal(A.allowed(raw, rem, on_unsatisfiable=E),
                       A.allowed(st, rem, on_unsatisfiable=E))
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
    assert not m[1:].any()  # dead rows: all zero, and no error under any policy
    assert not A.allowed(st.select([1, 2]), 0).any()
    assert not A.allowed(st.select([1, 2]), 0, on_unsatisfiable="eos").any()
    # r = 1 in an accepting state: EOS or a token that ends in an accepting state
    assert A.allowed(st, 1)[0].tolist() == [False, False, False, True, True, False]
    # r = 0: nothing can be generated, not even EOS
    for mode in ("gcd", "lcd"):
        with pytest.raises(UnsatisfiableBudgetError) as ei:
            A.allowed(st, 0, mode)
        assert (ei.value.row, ei.value.budget, ei.value.minimum) == (0, 0, 1)
        assert not A.allowed(st, 0, mode, on_unsatisfiable="empty").any()
        assert A.allowed(st, 0, mode, on_unsatisfiable="eos").tolist() == [
            [False, False, False, False, True, False]] + [[False] * 6] * 2
    # accepting state without out-edges ('abc'): only EOS
    st2 = A.advance(st.select(torch.tensor([0])), torch.tensor([3]))
    assert A.allowed(st2, 3)[0].tolist() == [False, False, False, False, True, False]
    assert A.allowed(st2, 3, "lcd")[0].tolist() == [False, False, False, False, True, False]
    # out-of-range ids and EOS kill the row; a dead row stays dead
    st3 = A.advance(A.start(2), torch.tensor([99, -1]))
    assert st3.is_dead().all()
    assert A.advance(st3, torch.tensor([0, 0])).is_dead().all()


def test_below_minimum_budget(tiny):
    """Issue 23: below the state's minimum (or r <= 0) the default is UnsatisfiableBudgetError
    (budget, minimum, row), not an all-False mask; "eos" gives only EOS; the batch and the
    decode-loop fast path (reused ``out``) agree; LCD ignores the budget above 0."""
    A = tiny
    st = A.start(1)  # needs 1 token ('ab')
    a = A.advance(st, torch.tensor([0]))  # after 'a': needs 'b' then maybe more: 1 token
    assert A.min_tokens_to_accept() == 1
    buf = torch.empty((1, 1), dtype=torch.int32)
    for s, r in ((st, 0), (a, 0), (a, -3)):
        with pytest.raises(UnsatisfiableBudgetError):
            A.allowed(s, r)
        with pytest.raises(UnsatisfiableBudgetError):
            A.allowed_packed(s, r, out=buf)
        assert A.allowed_packed(s, r, out=buf, on_unsatisfiable="eos").tolist() == [[1 << 4]]
        assert A.allowed_packed(s, r, out=buf, on_unsatisfiable="empty").tolist() == [[0]]
    # a state two tokens from acceptance ('a' then 'b'): r = 1 is below its minimum of 2
    A2 = TokenAutomaton.from_byte_nfa(N.concat(N.literal("a"), N.literal("c")), A_vocab(A))
    with pytest.raises(UnsatisfiableBudgetError) as ei:
        A2.allowed(A2.start(1), 1)
    assert (ei.value.budget, ei.value.minimum, ei.value.row) == (1, 2, 0)
    assert "row 0" in str(ei.value)
    assert A2.allowed(A2.start(1), 1, "lcd")[0].tolist() == [True] + [False] * 5  # LCD: fine
    assert A2.allowed(A2.start(1), 2)[0].tolist() == [True] + [False] * 5
    with pytest.raises(ValueError):
        A.allowed(st, 2, on_unsatisfiable="nan")
    # rows named: the first unsatisfiable live row of a batch
    both = AutomatonState.cat([A2.start(1), A2.advance(A2.start(1), torch.tensor([0]))])
    with pytest.raises(UnsatisfiableBudgetError) as ei:
        A2.allowed(both, torch.tensor([2, 0]))
    assert ei.value.row == 1 and ei.value.minimum == 1


def A_vocab(A):
    from tractable.fsa.vocabulary import TokenVocabulary as TV

    return TV.from_token_bytes(["a", "b", "ab", "c", None, None], eos_token_ids=[4])


def test_states_carry_their_automaton(tiny):
    """Issue 23: a state of another automaton (same number of states) is refused; select /
    cat / to keep the owner; A.to(device) shares the original's identity; hand-built states
    (no owner) are checked by shape only."""
    A = tiny
    B_ = TokenAutomaton.from_byte_nfa(
        N.concat(N.plus(N.literal("b")), N.literal("a"), N.optional(N.literal("c"))),
        A_vocab(A))
    assert B_.num_states == A.num_states
    sa, sb = A.start(2), B_.start(2)
    for bad in (sb, sb.select([1, 0]), sb.to("cpu"), AutomatonState.cat([sb, sb])):
        with pytest.raises(ForeignStateError):
            A.allowed(bad, 3)
        with pytest.raises(ForeignStateError):
            A.allowed_packed(bad, 3)
        with pytest.raises(ForeignStateError):
            A.advance(bad, torch.tensor([0] * bad.batch_size))
    with pytest.raises(ForeignStateError):
        AutomatonState.cat([sa, sb])
    with pytest.raises(ForeignStateError):
        from tractable.fsa import masks

        masks._allowed_packed_tables(A, sb, 3, "gcd", "raise")
    # the same automaton's states, reordered / concatenated / moved: accepted
    for ok in (sa.select([1, 0, 1]), AutomatonState.cat([sa, sa.select([0])]), sa.to("cpu")):
        assert A.allowed(ok, 3).shape == (ok.batch_size, A.vocab_size)
    copy = A.to("cpu")
    assert torch.equal(copy.allowed(sa, 3), A.allowed(sa, 3))
    assert torch.equal(A.allowed(copy.start(2), 3), A.allowed(sa, 3))
    raw = AutomatonState(sb.active.clone(), A.final)  # no owner: accepted (shape only)
    assert A.allowed(raw, 3).shape == (2, A.vocab_size)


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


def test_accepting_one_member_sets_use_their_prefix_rows(gpt2_vocab):
    """An accepting state's prefix rows carry the EOS ids, so the mask of a one-member accepting
    set is a ready row (no table row, no lock): along a GCD walk of ``[0-9]{0,40}`` (every
    state accepting, every set one state) each packed mask equals eq. 4's literal mask,
    EOS included, at every budget down to 1 (0: nothing), and the table stays empty."""
    from tractable.fsa import masks as M
    from tractable.fsa.regex import compile_regex

    A = compile_regex("[0-9]{0,40}", gpt2_vocab)
    A = TokenAutomaton(**{f: getattr(A, f) for f in A.__dataclass_fields__ if f != "_memo"})
    eng = M.mask_engine(A)
    rnd = random.Random(0)
    st, prefix = A.start(1), []
    eos = A.eos_token_ids[0]
    for _ in range(12):
        lit = eq34_masks_literal(A, st.active[0].numpy(), 40)  # [41, V], row r: budget r
        for r in (0, 1, 2, 5, 40):
            got = A.allowed_packed(st, r, on_unsatisfiable="empty")[0]
            assert torch.equal(got, pack_bits(lit[r][None])[0]), (prefix, r)
            assert bool(lit[r][eos]) == (r >= 1)
        assert len(eng.set_members[int(st.set_ids[0])]) == 1
        text = [t for t in np.flatnonzero(A.allowed(st, 40)[0].numpy()).tolist() if t != eos]
        t = rnd.choice(text)
        prefix.append(t)
        st = A.advance(st, torch.tensor([t]))
    assert eng.tab.n_rows == 1  # row 0 only: every mask was a state's own prefix row


def test_packed_walk_past_64_mask_rows(gpt2_vocab, monkeypatch):
    """Issue 21: the decode-loop fast path read ``eng.table`` before ``mask_row`` grew it, so a
    walk needing its 65th mask row raised IndexError.  Each step's packed mask (into a reused
    buffer) must equal the bool mask, and the walk must end accepted.  (Tables reserve 16 MiB
    up front; a zero reserve brings back the 64-row start, so the table must grow.  A set whose
    mask is one state's prefix row takes no table row, accepting states included: the regex is
    a union of a counter and a loop, so every set along the walk has 2-3 members and its mask
    is a table row.)"""
    from tractable.fsa import masks as M
    from tractable.fsa.regex import compile_regex

    monkeypatch.setattr(M, "_RESERVE_TABLE_BYTES", 0)
    A = compile_regex("[0-9]{0,400}|[0-9]*7", gpt2_vocab)  # sets of 2-3 states
    A._memo.pop("mask_engine", None)  # (compile_regex may cache automata)
    st = A.start(1)
    assert M.mask_engine(A).tab.rows.shape[0] == 64
    buf = torch.zeros((1, (A.vocab_size + 31) // 32), dtype=torch.int32)
    rnd = random.Random(1)
    eos = set(A.eos_token_ids)
    r = 300
    seq: list[int] = []
    while r > 0:
        assert A.allowed_packed(st, r, out=buf) is buf
        mask = A.allowed(st, r)[0]
        assert torch.equal(pack_bits(mask[None]), buf)
        ok = np.flatnonzero(mask.numpy()).tolist()
        text = [t for t in ok if t not in eos]
        t = rnd.choice(text) if text and len(seq) < 150 else rnd.choice(ok)
        seq.append(t)
        if t in eos:
            break
        st = A.advance(st, torch.tensor([t]))
        r -= 1
    assert len(seq) > 64 and A.accepts(seq)
    assert M.mask_engine(A).tab.n_rows > 64 < M.mask_engine(A).tab.rows.shape[0]  # it grew
    A._memo.pop("mask_engine", None)


@pytest.mark.parametrize("eager,small_set", [(True, 0), (False, 8), (False, 0)])
@settings(max_examples=40, deadline=None, suppress_health_check=_HC)
@given(case=tiny_automata(max_states=8))
def test_engine_variants_equal_brute_force(case, eager, small_set):
    """Issue 21's cold-path engine: per-state prefix rows built at set-up (eager) or on first use
    (lazy), unions by plain-Python bisect (sets of <= ``_SMALL_SET`` members) or by one
    vectorized searchsorted (``_SMALL_SET = 0``), and mask tables that must grow (a 2-row
    reserve): every packed mask equals the brute-force GCD / LCD mask."""
    from tractable.fsa import mask_rows as R
    from tractable.fsa import masks as M

    _, _, A = case
    saved = R._EAGER_PREFIX_BYTES, R._SMALL_SET, M._RESERVE_TABLE_BYTES
    R._EAGER_PREFIX_BYTES = saved[0] if eager else 0
    R._SMALL_SET, M._RESERVE_TABLE_BYTES = small_set, 0
    try:
        A._memo.pop("mask_engine", None)
        eng = M.mask_engine(A)
        assert eng.tab.rows.shape[0] <= 64  # the reserve is small: growth is exercised
        n_prefix = sum(p is not None for p in eng.prefix.rows)
        assert (n_prefix == int((np.diff(eng.out_ptr) > 0).sum())) if eager else n_prefix == 0
        for prefix, _row in reachable_sets(A, max_depth=6, limit=40):
            st_ = _state_after(A, prefix)
            best = brute_force_min_lengths(A, prefix, max_len=MAX_R)
            viable = brute_force_viable(A, prefix)
            for r in [None, *range(0, MAX_R + 1)]:
                gcd = A.allowed_packed(st_, r, "gcd", on_unsatisfiable="empty")
                want = viable if r is None else best <= r
                assert torch.equal(gcd, pack_bits(torch.from_numpy(want)[None])), (prefix, r)
                lcd = A.allowed_packed(st_, r, "lcd", on_unsatisfiable="empty")
                want = viable & (r is None or r >= 1)
                assert torch.equal(lcd, pack_bits(torch.from_numpy(want)[None])), (prefix, r)
    finally:
        R._EAGER_PREFIX_BYTES, R._SMALL_SET, M._RESERVE_TABLE_BYTES = saved
        A._memo.pop("mask_engine", None)


@pytest.mark.parametrize("small_step,eager", [(0, 1024), (8, 0), (0, 0)])
@settings(max_examples=40, deadline=None, suppress_health_check=_HC)
@given(case=tiny_automata(max_states=8))
def test_step_variants_equal_brute_force(case, small_step, eager):
    """Issue 21's first-time advance: a set's token bit tested edge by edge in Python (sets of
    <= ``_SMALL_STEP`` edges) or by array ops (``_SMALL_STEP = 0``), with every one-member set,
    its step words and batch-1 tensor made at set-up (``_EAGER_SINGLETONS``) or on first use:
    every state set after every prefix equals the brute-force set."""
    from tractable.fsa import masks as M

    _, _, A = case
    saved = M._SMALL_STEP, M._EAGER_SINGLETONS
    M._SMALL_STEP, M._EAGER_SINGLETONS = small_step, eager
    try:
        A._memo.pop("mask_engine", None)
        for prefix, row in reachable_sets(A, max_depth=6, limit=40):
            st_ = _state_after(A, prefix)
            assert np.array_equal(st_.active[0].numpy(), row), prefix
            dead = A.advance(st_, torch.tensor([A.vocab_size + 5]))  # unknown id: empty set
            assert not dead.active.any()
    finally:
        M._SMALL_STEP, M._EAGER_SINGLETONS = saved
        A._memo.pop("mask_engine", None)


def test_large_state_sets_vectorized_union(gpt2_vocab):
    """Sets with more than ``_SMALL_SET`` members take the vectorized union: the packed mask of
    a set of 17 states equals the OR of its members' singleton masks (each of those taking the
    small-set path), at several budgets and with no budget."""
    from tractable.fsa import mask_rows as R
    from tractable.fsa.regex import compile_regex

    words = [f"{c}{d}{c}" for c in "qwrtyp" for d in "sdfg"]
    A = compile_regex("(" + "|".join(words) + ")x{0,2}", gpt2_vocab)
    S = A.num_states
    assert S > 2 * R._SMALL_SET + 1
    active = torch.zeros((1, S), dtype=torch.bool)
    active[0, 1: 2 + 2 * R._SMALL_SET] = True
    members = np.flatnonzero(active[0].numpy())
    st_ = AutomatonState(active, A.final)
    for r in (None, 1, 2, 3, 5):
        for mode in ("gcd", "lcd"):
            got = A.allowed_packed(st_, r, mode, on_unsatisfiable="empty")
            want = torch.zeros(A.vocab_size, dtype=torch.bool)
            for s in members.tolist():
                one = torch.zeros_like(active)
                one[0, s] = True
                want |= A.allowed(AutomatonState(one, A.final), r, mode,
                                  on_unsatisfiable="empty")[0]
            assert torch.equal(got, pack_bits(want[None])), (r, mode)
            assert (r is not None and r < 2) or want.any()
