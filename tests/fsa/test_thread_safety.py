"""One automaton shared by threads (issue 23): concurrent first-time fills of the set interner,
the transition cache and the mask table — including table replacements (resets) — give the
masks of a single-threaded reference, bit for bit (fsa/masks.py, "Threads")."""

from __future__ import annotations

import dataclasses
import random
import sys
import threading

import numpy as np
import pytest
import torch
from tractable.fsa import masks
from tractable.fsa.automaton import TokenAutomaton

N_THREADS = 6
# optional domain, and a loop beside it: state sets of several members, whose masks take
# table rows (a one-member set's mask is its state's ready prefix row, accepting or not)
# (the queries below: 27 distinct masks, 22 table rows, 11 sets of several members)
PATTERN = r"[a-z]{1,12}(\.[a-z]{1,5}){0,3}(@[a-z]{2,8}\.(com|org|net))?|[a-z]{1,16}!"


def _fresh(A: TokenAutomaton) -> TokenAutomaton:
    """The same automaton with empty caches (a new identity, a new engine)."""
    return TokenAutomaton(**{f.name: getattr(A, f.name) for f in dataclasses.fields(A)
                             if f.name != "_memo"})


@pytest.fixture(scope="module")
def automaton(gpt2_vocab):
    from tractable.fsa.regex import compile_regex

    return compile_regex(PATTERN, gpt2_vocab)


def _queries(A, n_walks=12, seed=0):
    """[(prefix tokens, remaining, mode)] from random GCD walks (single-threaded)."""
    rnd = random.Random(seed)
    out = []
    m = A.min_tokens_to_accept()
    for _w in range(n_walks):
        n = m + rnd.randrange(0, 6)
        st, prefix = A.start(1), []
        for r in range(n, 0, -1):
            for mode in ("gcd", "lcd"):
                out.append((tuple(prefix), r, mode))
            allowed = np.flatnonzero(A.allowed(st, r)[0].numpy()).tolist()
            t = rnd.choice(allowed)
            if t in A.eos_token_ids:
                break
            prefix.append(t)
            st = A.advance(st, torch.tensor([t]))
    return out


def _mask(A, prefix, r, mode, buf=None):
    st = A.start(1)
    for t in prefix:
        st = A.advance(st, torch.tensor([t]))
    if buf is not None:
        return A.allowed_packed(st, r, mode, out=buf).clone()
    return A.allowed_packed(st, r, mode)


@pytest.mark.slow
def test_concurrent_first_fills_and_resets_match_reference(automaton):
    ref_A = _fresh(automaton)
    queries = _queries(ref_A)
    ref = {q: _mask(ref_A, *q) for q in queries}
    assert len({tuple(v[0].tolist()) for v in ref.values()}) >= 15  # many distinct mask rows

    A = _fresh(automaton)
    eng = masks.mask_engine(A)
    eng.max_table_bytes = 4 * eng.W * 4  # a new table every 3 rows: resets all the time
    W = eng.W
    barrier = threading.Barrier(N_THREADS)
    errors: list[str] = []

    def work(k: int) -> None:
        rnd = random.Random(100 + k)
        order = queries * 3
        rnd.shuffle(order)
        buf = torch.empty((1, W), dtype=torch.int32)
        barrier.wait()
        try:
            for i, q in enumerate(order):
                got = _mask(A, *q, buf=buf if i % 2 else None)
                if not torch.equal(got, ref[q]):
                    errors.append(f"thread {k}: mask of {q} differs")
                if i % 5 == 0:  # a batch of three rows (the batched path)
                    picks = [order[rnd.randrange(len(order))] for _ in range(3)]
                    sts = [A.start(1)] * 3
                    for j, (p, _, _) in enumerate(picks):
                        for t in p:
                            sts[j] = A.advance(sts[j], torch.tensor([t]))
                    batch = sts[0].cat(sts)
                    for mode in ("gcd", "lcd"):
                        rem = torch.tensor([p[1] for p in picks])
                        got = A.allowed_packed(batch, rem, mode)
                        want = torch.cat([ref[(p[0], p[1], mode)] for p in picks])
                        if not torch.equal(got, want):
                            errors.append(f"thread {k}: batch {picks} differs")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {k}: {type(e).__name__}: {e}")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(N_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[:5]
    assert eng.epoch > 10  # the reset path ran, many times
    # every set interned once: ids are a bijection onto distinct rows
    n = len(eng.set_members)
    assert len(eng._set_of_key) == n
    assert len({eng.set_rows[i].tobytes() for i in range(n)}) == n


def test_published_rows_survive_a_table_reset(automaton):
    """Deterministic interleaving: a reader holding a mask row from before a reset still
    reads the right mask after other fills replaced the table (rows are never rewritten)."""
    A = _fresh(automaton)
    eng = masks.mask_engine(A)
    eng.max_table_bytes = 3 * eng.W * 4
    queries = _queries(A, n_walks=3, seed=1)
    st0 = A.start(1)
    sid = int(st0.set_ids[0])
    r = queries[0][1]
    tab = eng.tab
    row = eng.row(sid, r)  # a reader got its row ...
    want = row.copy()
    epoch = eng.epoch
    for q in queries:  # ... other threads fill enough rows to replace the table ...
        _mask(A, *q)
    assert eng.epoch > epoch and eng.tab is not tab
    assert np.array_equal(row, want)  # ... and the reader's row is intact
    assert torch.equal(A.allowed_packed(st0, r)[0], torch.from_numpy(want))


def test_engine_created_once_under_contention(automaton):
    """Threads racing on a fresh automaton's first start() get one engine (one interner)."""
    A = _fresh(automaton)
    got: list = []
    barrier = threading.Barrier(N_THREADS)

    def work():
        barrier.wait()
        got.append(A.start(1)._engine)

    threads = [threading.Thread(target=work) for _ in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == N_THREADS and all(e is got[0] for e in got)
