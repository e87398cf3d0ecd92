"""The JSON Schema compiler's builder embeds automata without copying them
(:mod:`tractable.fsa.json_schema._builder`): what it builds must be the automaton the copying
builder built, edge for edge and in the same order."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from tractable.fsa import nfa as N
from tractable.fsa.json_schema import _builder as B
from tractable.fsa.json_schema._automata import _is_empty


class _CopyingBuilder:
    """The builder as it was: every embed copies the automaton's edges (the reference)."""

    def __init__(self) -> None:
        self.n = 0
        self.edges: list = []
        self.eps: list = []
        self.finals: set[int] = set()

    def state(self) -> int:
        self.n += 1
        return self.n - 1

    def edge(self, s: int, mask: int, d: int) -> None:
        if mask:
            self.edges.append((s, mask, d))

    def embed(self, a, src: int) -> frozenset[int]:
        if isinstance(a, tuple):
            finals = frozenset({src})
            for part in a:
                if len(finals) == 1:
                    (at,) = finals
                else:
                    at = self.state()
                    self.eps.extend([(f, at) for f in finals])
                finals = self.embed(part, at)
            return finals
        off = self.n
        self.n += a.num_states
        st = a.start
        entered = st in [d for _, _, d in a.edges] or st in [d for _, d in a.epsilons]
        if entered:
            self.edges.extend([(s + off, m, d + off) for s, m, d in a.edges])
            self.eps.extend([(s + off, d + off) for s, d in a.epsilons])
            self.eps.append((src, st + off))
            return frozenset(f + off for f in a.finals)
        self.edges.extend([(src if s == st else s + off, m, d + off) for s, m, d in a.edges])
        self.eps.extend([(src if s == st else s + off, d + off) for s, d in a.epsilons])
        return frozenset(src if f == st else f + off for f in a.finals)

    def build(self, start: int = 0) -> N.ByteNFA:
        return N.ByteNFA(self.n, start, frozenset(self.finals), tuple(self.edges),
                         tuple(self.eps))


def _random_nfa(rng) -> N.ByteNFA:
    n = int(rng.integers(1, 5))
    edges = tuple((int(rng.integers(n)), int(rng.integers(1, 8)), int(rng.integers(n)))
                  for _ in range(int(rng.integers(0, 5))))
    eps = tuple((int(rng.integers(n)), int(rng.integers(n)))
                for _ in range(int(rng.integers(0, 3))))
    finals = frozenset(int(x) for x in rng.integers(0, n, size=int(rng.integers(0, 3))))
    return N.ByteNFA(n, int(rng.integers(n)), finals, edges, eps)


def _program(rng, depth: int, pool: list) -> tuple:
    """The same random writing program run on both builders: returns (lazy, copied)."""
    lazy, ref = B._Builder(), _CopyingBuilder()
    own = [lazy.state()]  # the builder's own states (a start must be one of them)
    ref.state()
    for _ in range(int(rng.integers(1, 9))):
        op = int(rng.integers(0, 6))
        if op == 0:
            own.append(lazy.state())
            ref.state()
        elif op == 1:
            s, d = int(rng.integers(lazy.n)), int(rng.integers(lazy.n))
            m = int(rng.integers(0, 8))
            lazy.edge(s, m, d)
            ref.edge(s, m, d)
        elif op == 2:
            s, d = int(rng.integers(lazy.n)), int(rng.integers(lazy.n))
            lazy.eps.append((s, d))
            ref.eps.append((s, d))
        else:
            src = int(rng.integers(lazy.n))
            if depth and op == 5:
                a_lazy, a_ref = _program(rng, depth - 1, pool)
            else:
                a_lazy = a_ref = pool[int(rng.integers(len(pool)))]
            if op == 4:  # a concatenation, embedded part after part
                b_lazy, b_ref = (pool[int(rng.integers(len(pool)))],) * 2
                a_lazy, a_ref = (a_lazy, b_lazy), (a_ref, b_ref)
            f1, f2 = lazy.embed(a_lazy, src), ref.embed(a_ref, src)
            assert f1 == f2
            if f1 and rng.random() < 0.5:
                (f,) = sorted(f1)[:1]
                lazy.finals.add(f)
                ref.finals.add(f)
    start = own[int(rng.integers(len(own)))]
    return lazy.build(start), ref.build(start)


def _same(a: N.ByteNFA, b: N.ByteNFA) -> None:
    assert (a.num_states, a.start, a.finals) == (b.num_states, b.start, b.finals)
    assert a.edges == b.edges
    assert a.epsilons == b.epsilons


@pytest.mark.parametrize("seed", range(6))
def test_lazy_builder_writes_the_copying_builders_automaton(seed):
    rng = np.random.default_rng(seed)
    pool = [_random_nfa(rng) for _ in range(12)]
    lazies = 0
    for _ in range(150):
        lazy, ref = _program(rng, 3, pool)
        # the cached "start entered" must be what the written edges say
        entered = N._start_entered(lazy)
        lazies += isinstance(lazy, B._LazyNFA)
        _same(lazy, ref)
        assert entered == (ref.start in [d for _, _, d in ref.edges]
                           or ref.start in [d for _, d in ref.epsilons])
        assert N.finalize(lazy).edges == N.finalize(ref).edges
    assert lazies > 100  # the programs do embed


def test_lazy_builder_keeps_writing_after_build():
    """A builder built twice: the first automaton is not changed by what is written later."""
    inner = N.concat(N.literal("ab"), N.star(N.literal("c")))
    lazy, ref = B._Builder(), _CopyingBuilder()
    for b in (lazy, ref):
        s0 = b.state()
        b.finals = set(b.embed(inner, s0))
    first_lazy, first_ref = lazy.build(0), ref.build(0)
    for b in (lazy, ref):
        s = b.state()
        b.edge(0, 1 << ord("x"), s)
        b.eps.append((s, 0))
        b.embed(inner, s)
    _same(first_lazy, first_ref)
    _same(lazy.build(0), ref.build(0))


def test_lazy_builder_refuses_a_start_inside_a_block():
    from tractable.fsa.errors import InvalidArgumentError

    b = B._Builder()
    s0 = b.state()
    b.embed(N.literal("abc"), s0)
    with pytest.raises(InvalidArgumentError, match="inside an embedded"):
        b.build(2)
    assert N.matches(b.build(s0), b"") is False


def test_lazy_union_is_nfa_union():
    rng = np.random.default_rng(3)
    pool = [_random_nfa(rng) for _ in range(10)]
    for _ in range(100):
        parts = [pool[i] for i in rng.integers(0, len(pool), size=int(rng.integers(1, 5)))]
        got, want = B.union(*parts), N.union(*parts)
        _same(got, want)
        fresh = N.ByteNFA(want.num_states, want.start, want.finals, want.edges, want.epsilons)
        assert _is_empty(B.union(*parts)) == _is_empty(fresh)


def test_lazy_nfa_pickles_as_a_plain_nfa():
    b = B._Builder()
    s0 = b.state()
    b.finals = set(b.embed(N.literal("hi"), s0))
    a = b.build(s0)
    assert isinstance(a, B._LazyNFA)
    back = pickle.loads(pickle.dumps(a))
    assert type(back) is N.ByteNFA
    _same(back, a)
    assert N.matches(back, b"hi") and not N.matches(back, b"h")
