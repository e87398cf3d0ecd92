"""Kernels (tractable.kernels): Triton kernels under TRITON_INTERPRET=1 on CPU vs the torch
references (bit for bit for masks and reachability, float tolerance for the HMM product), and the
torch references vs naive loops written straight from the module docstrings.

The Triton interpreter reads ``TRITON_INTERPRET`` when a kernel is decorated; tractable builds
its kernels lazily, per interpreter mode, so setting the variable in a module fixture is enough
(no subprocess).  Shapes are small and hypothesis examples few: the interpreter runs every
program of the grid in Python.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tractable.kernels import (
    UNREACHABLE,
    KernelBackendError,
    advance,
    advance_ref,
    apply_mask,
    apply_mask_ref,
    backward_reachability,
    backward_reachability_ref,
    distance_to_accept,
    distance_to_accept_ref,
    emission_marginal,
    emission_marginal_ref,
    emission_term,
    emission_term_ref,
    hmm_backward_messages,
    hmm_backward_messages_ref,
    hmm_forward_step,
    hmm_forward_step_ref,
    hmm_product,
    pack_mask,
    prepare_mask,
    token_mask,
    token_mask_ref,
    unpack_mask,
)
from tractable.kernels.hmm_product import TokenClasses

# the interpreter computes with numpy: inf / nan lanes warn
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SETTINGS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)


@pytest.fixture(autouse=True, scope="module")
def _interpret():
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    yield
    if old is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = old


# ---------------------------------------------------------------------------- random automata


class Auto:
    """Random automaton tensors (not trimmed: kernels must not rely on it)."""

    def __init__(self, S, E, L, V, seed, density, tail_garbage, empty_row):
        g = torch.Generator().manual_seed(seed)
        # a chain 0 -> 1 -> ... -> S-1 (final) under the random edges gives long distances
        chain = min(E, S - 1) if seed % 4 else 0
        self.S, self.E, self.L, self.V = S, E, L, V
        self.W = (V + 31) // 32
        self.src = torch.randint(0, S, (E,), generator=g)
        self.dst = torch.randint(0, S, (E,), generator=g)
        self.src[:chain] = torch.arange(chain)
        self.dst[:chain] = torch.arange(1, chain + 1)
        self.label = torch.randint(0, L, (E,), generator=g)
        dense = torch.rand(L, V, generator=g) < density
        dense[torch.arange(L), torch.randint(0, V, (L,), generator=g)] = True
        if empty_row:
            dense[0] = False
        self.dense = dense
        labels = pack_mask(dense)
        if tail_garbage and V % 32:
            labels[:, -1] |= ~((1 << (V % 32)) - 1)  # bits past V must be ignored
        self.labels = labels
        self.final = torch.rand(S, generator=g) < 0.25
        if chain:
            self.final[S - 1] = True
        self.g = g

    def has(self, l, v):
        return bool(self.dense[l, v])


@st.composite
def automata(draw, max_S=6, max_E=14, max_L=4):
    S = draw(st.integers(1, max_S))
    E = draw(st.integers(0, max_E) | st.integers(max_E // 2, max_E))
    L = draw(st.integers(1, max_L))
    V = draw(st.sampled_from([1, 7, 31, 32, 33, 64, 77, 100]))
    density = draw(st.sampled_from([0.0, 0.08, 0.5]))  # + one token per label set
    return Auto(S, E, L, V, draw(st.integers(0, 2**30)), density,
                draw(st.booleans()), draw(st.booleans()))


def naive_distance(a: Auto) -> list[int]:
    nonempty = [bool(a.dense[a.label[e]].any()) for e in range(a.E)]
    dist = [0 if a.final[s] else UNREACHABLE for s in range(a.S)]
    changed = True
    while changed:
        changed = False
        for e in range(a.E):
            s, d = int(a.src[e]), int(a.dst[e])
            if nonempty[e] and dist[d] != UNREACHABLE and dist[d] + 1 < dist[s]:
                dist[s] = dist[d] + 1
                changed = True
    return dist


# ---------------------------------------------------------------------------- token_mask


def naive_token_mask(a: Auto, active, remaining, mode, eos_ids, dist) -> torch.Tensor:
    B = active.shape[0]
    out = torch.zeros(B, a.V, dtype=torch.bool)
    for b in range(B):
        r = int(remaining[b])
        if r < 1:
            continue
        for e in range(a.E):
            if not active[b, a.src[e]]:
                continue
            if mode == "gcd" and dist[int(a.dst[e])] > r - 1:
                continue
            for v in range(a.V):
                if a.has(int(a.label[e]), v):
                    out[b, v] = True
        if any(bool(active[b, s] and a.final[s]) for s in range(a.S)):
            for v in eos_ids:
                out[b, v] = True
    return out


@settings(SETTINGS, max_examples=25)
@given(a=automata(), B=st.integers(1, 3), mode=st.sampled_from(["gcd", "lcd"]),
       data=st.data())
def test_token_mask_matches_naive_and_triton(a, B, mode, data):
    dist = distance_to_accept(a.src, a.dst, a.label, a.labels, a.final, vocab_size=a.V,
                              backend="torch")
    eos = data.draw(st.lists(st.integers(0, a.V - 1), max_size=2, unique=True))
    t = prepare_mask(a.src, a.dst, a.label, a.labels, a.final, dist, a.V, eos)
    active = torch.rand(B, a.S, generator=a.g) < 0.7
    remaining = torch.tensor(data.draw(st.lists(st.sampled_from([0, 1, 2, 3, 4, 50]),
                                                min_size=B, max_size=B)))
    want = naive_token_mask(a, active, remaining, mode, eos, dist.tolist())
    ref = token_mask_ref(active, remaining, t, mode)
    assert torch.equal(unpack_mask(ref, a.V), want)
    packed, as_bool = token_mask(active.to(torch.uint8), remaining, t, mode=mode,
                                 return_bool=True, backend="triton")
    assert torch.equal(packed, ref)
    assert torch.equal(as_bool, want)


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_token_mask_without_budget(seed):
    """``remaining=None``: GCD keeps the edges into co-accessible states (any distance),
    LCD every edge out of the set."""
    a = Auto(5, 12, 3, 70, seed, 0.3, True, False)
    dist = distance_to_accept(a.src, a.dst, a.label, a.labels, a.final, vocab_size=a.V)
    t = prepare_mask(a.src, a.dst, a.label, a.labels, a.final, dist, a.V, [69])
    active = torch.ones(2, a.S, dtype=torch.bool)
    big = token_mask_ref(active, 10**12, t, "gcd")
    assert torch.equal(token_mask(active, None, t, mode="gcd", backend="triton"), big)
    lcd = token_mask_ref(active, 5, t, "lcd")
    assert torch.equal(token_mask(active, None, t, mode="lcd", backend="triton"), lcd)
    coacc = dist < UNREACHABLE
    want = torch.zeros(a.V, dtype=torch.bool)
    for e in range(a.E):
        if coacc[a.dst[e]]:
            want |= a.dense[a.label[e]]
    want[69] |= bool(a.final.any())
    assert torch.equal(unpack_mask(big, a.V)[0], want)


def test_token_mask_bad_inputs():
    a = Auto(3, 4, 2, 40, 0, 0.5, False, False)
    dist = distance_to_accept_ref(a.src, a.dst, a.label, a.labels, a.final, vocab_size=a.V)
    from tractable.fsa.errors import TokenError

    with pytest.raises(TokenError):
        prepare_mask(a.src, a.dst, a.label, a.labels, a.final, dist, a.V, [40])
    t = prepare_mask(a.src, a.dst, a.label, a.labels, a.final, dist, a.V, [])
    with pytest.raises(ValueError, match="mode"):
        token_mask(torch.ones(1, 3, dtype=torch.bool), 1, t, mode="xyz")
    with pytest.raises(ValueError, match="active"):
        token_mask(torch.ones(1, 4, dtype=torch.bool), 1, t)


def test_token_mask_real_vocab_against_enumeration():
    """A lifted automaton over a tiny real-byte vocabulary: the GCD mask equals "some accepted
    sequence of at most r tokens starts with v" found by enumerating all sequences."""
    import itertools

    from tractable.fsa import nfa as N
    from tractable.fsa.automaton import TokenAutomaton
    from tractable.fsa.vocabulary import TokenVocabulary

    toks = [b"{", b"}", b"a", b"ab", b"b", b",", b"{a", None]
    vocab = TokenVocabulary.from_token_bytes(toks, eos_token_ids=(7,), name="tiny")
    item = N.plus(N.byteset(N.mask_of(b"ab")))
    body = N.concat(item, N.star(N.concat(N.literal(","), item)))
    A = TokenAutomaton.from_byte_nfa(N.concat(N.literal("{"), N.optional(body),
                                              N.literal("}")), vocab)
    t = prepare_mask(A.edge_src, A.edge_dst, A.edge_label, A.labels, A.final,
                     distance_to_accept(A.edge_src, A.edge_dst, A.edge_label, A.labels,
                                        A.final, vocab_size=A.vocab_size),
                     A.vocab_size, A.eos_token_ids)
    V = A.vocab_size
    text = [v for v in range(V) if toks[v] is not None]
    for prefix in [(), (0,), (0, 2), (6,), (0, 2, 5)]:
        st_ = A.initial.numpy()
        for x in prefix:
            st_ = A.step_states(st_, x)
        for r in range(0, 4):
            want = torch.zeros(V, dtype=torch.bool)
            for k in range(1, r + 1):
                for seq in itertools.product(text, repeat=k):
                    if A.accepts(prefix + seq):
                        want[seq[0]] = True
            if r >= 1 and A.accepts(prefix):
                want[7] = True
            act = torch.from_numpy(st_)[None]
            ref = token_mask_ref(act, torch.tensor([r]), t, "gcd")
            assert torch.equal(unpack_mask(ref, V)[0], want), (prefix, r)
            assert torch.equal(token_mask(act, r, t, backend="triton"), ref)


# ---------------------------------------------------------------------------- apply_mask


def naive_apply(logits, mask, temperature, normalize):
    B, V = logits.shape
    out = torch.empty(B, V, dtype=torch.float64)
    for b in range(B):
        z = []
        for v in range(V):
            x = float(np.float32(logits[b, v].float()) / np.float32(temperature or 1.0))
            ok = (int(mask[b, v >> 5]) >> (v & 31)) & 1
            z.append(x if ok else -math.inf)
        m = max(z)
        if normalize is None:
            out[b] = torch.tensor(z, dtype=torch.float64)
            continue
        s = sum(math.exp(x - m) for x in z if x != -math.inf) if m != -math.inf else 0.0
        for v, x in enumerate(z):
            if s == 0.0:
                out[b, v] = math.nan
            elif normalize == "softmax":
                out[b, v] = math.exp(x - m) / s
            else:
                out[b, v] = x - m - math.log(s)
    return out


@SETTINGS
@given(B=st.integers(1, 3), V=st.sampled_from([1, 31, 33, 100, 4100]),
       dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
       temperature=st.sampled_from([None, 0.7, 2.0]),
       normalize=st.sampled_from([None, "softmax", "log_softmax"]), seed=st.integers(0, 2**30))
def test_apply_mask(B, V, dtype, temperature, normalize, seed):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(B, V, generator=g) * 4).to(dtype)
    allowed = torch.rand(B, V, generator=g) < 0.3
    allowed[0] = False  # an empty row: -inf everywhere, NaN after softmax
    mask = pack_mask(allowed)
    if V % 32:
        mask[:, -1] |= ~((1 << (V % 32)) - 1)  # tail bits are never read
    ref = apply_mask_ref(logits.clone(), mask, temperature=temperature, normalize=normalize)
    got = apply_mask(logits.clone(), mask, temperature=temperature, normalize=normalize,
                     backend="triton")
    if normalize is None:
        assert got.dtype == dtype
        assert torch.equal(got, ref)  # bit for bit, both rounded to nearest even
        if V <= 100:
            want = naive_apply(logits, mask, temperature, None).to(dtype)
            assert torch.equal(ref, want)
    else:
        assert torch.equal(torch.isnan(got), torch.isnan(ref))
        assert torch.isnan(ref[0]).all()
        ok = ~torch.isnan(ref)
        fin = ok & torch.isfinite(ref)
        assert torch.equal(torch.isinf(got) & ok, torch.isinf(ref) & ok)
        torch.testing.assert_close(got[fin], ref[fin], rtol=2e-5, atol=2e-6)
        if V <= 100:
            want = naive_apply(logits, mask, temperature, normalize)
            assert torch.equal(torch.isnan(want), torch.isnan(ref))
            torch.testing.assert_close(ref[fin].double(), want[fin], rtol=1e-5, atol=1e-6)


def test_apply_mask_in_place_and_errors():
    x = torch.zeros(2, 40)
    m = pack_mask(torch.arange(40)[None].expand(2, 40) % 3 == 0)
    y = apply_mask(x, m, backend="triton")
    assert y is x and torch.isinf(x[:, 1]).all() and (x[:, 0] == 0).all()
    x2 = torch.zeros(2, 40)
    p = apply_mask(x2, m, normalize="softmax", backend="triton")
    assert (x2 == 0).all() and torch.allclose(p.sum(1), torch.ones(2))
    with pytest.raises(ValueError, match="mask"):
        apply_mask(torch.zeros(2, 40), torch.zeros(2, 1, dtype=torch.int32))
    with pytest.raises(ValueError, match="temperature"):
        apply_mask(torch.zeros(2, 40), m, temperature=0.0)


# ---------------------------------------------------------------------------- reachability


@SETTINGS
@given(a=automata(), B=st.integers(1, 3), data=st.data())
def test_advance(a, B, data):
    active = torch.rand(B, a.S, generator=a.g) < 0.6
    tokens = torch.tensor(data.draw(st.lists(st.integers(-1, a.V + 1), min_size=B,
                                             max_size=B)))
    want = torch.zeros(B, a.S, dtype=torch.bool)
    for b in range(B):
        x = int(tokens[b])
        for e in range(a.E):
            if active[b, a.src[e]] and 0 <= x < a.V and a.has(int(a.label[e]), x):
                want[b, a.dst[e]] = True
    ref = advance_ref(active, tokens, a.src, a.dst, a.label, a.labels, a.V)
    assert torch.equal(ref, want)
    got = advance(active, tokens, a.src, a.dst, a.label, a.labels, a.V, backend="triton")
    assert torch.equal(got, ref)


@settings(SETTINGS, max_examples=40)
@given(a=automata(), n=st.integers(0, 7), cumulative=st.booleans())
def test_backward_reachability_and_distance(a, n, cumulative):
    want = torch.zeros(n + 1, a.S, dtype=torch.bool)
    want[0] = a.final
    for r in range(1, n + 1):
        for e in range(a.E):
            if a.dense[a.label[e]].any() and want[r - 1, a.dst[e]]:
                want[r, a.src[e]] = True
        if cumulative:
            want[r] |= want[r - 1]
    ref = backward_reachability_ref(a.src, a.dst, a.label, a.labels, a.final, n,
                                    vocab_size=a.V, cumulative=cumulative)
    assert torch.equal(ref, want)
    got = backward_reachability(a.src, a.dst, a.label, a.labels, a.final, n, vocab_size=a.V,
                                cumulative=cumulative, backend="triton")
    assert torch.equal(got, ref)
    dist = naive_distance(a)
    dref = distance_to_accept_ref(a.src, a.dst, a.label, a.labels, a.final, vocab_size=a.V)
    assert dref.tolist() == dist
    dgot = distance_to_accept(a.src, a.dst, a.label, a.labels, a.final, vocab_size=a.V,
                              backend="triton")
    assert torch.equal(dgot, dref)
    # the cumulative table is the distance, thresholded
    within = backward_reachability_ref(a.src, a.dst, a.label, a.labels, a.final, n,
                                       vocab_size=a.V, cumulative=True)
    for r in range(n + 1):
        assert torch.equal(within[r], dref <= r)


@pytest.mark.parametrize("S", [1, 2, 9, 40])
def test_reachability_on_chains(S):
    """A chain 0 -> 1 -> ... -> S-1 (final) plus a dead-end self-loop: distances S-1-s; the
    exact table has a single state per row, the cumulative one a growing suffix."""
    src = torch.cat([torch.arange(S - 1), torch.tensor([0])])
    dst = torch.cat([torch.arange(1, S), torch.tensor([0])])
    lab = torch.cat([torch.zeros(S - 1, dtype=torch.int64), torch.tensor([1])])
    labels = pack_mask(torch.tensor([[True, False, False], [False, False, False]]))
    final = torch.zeros(S, dtype=torch.bool)
    final[-1] = True
    d = distance_to_accept(src, dst, lab, labels, final, vocab_size=3, backend="triton")
    assert d.tolist() == list(range(S - 1, -1, -1))
    n = S + 1
    exact = backward_reachability(src, dst, lab, labels, final, n, vocab_size=3,
                                  backend="triton")
    within = backward_reachability(src, dst, lab, labels, final, n, vocab_size=3,
                                   cumulative=True, backend="triton")
    for r in range(n + 1):
        assert exact[r].nonzero().flatten().tolist() == ([S - 1 - r] if r < S else [])
        assert torch.equal(within[r], d <= r)


# ---------------------------------------------------------------------------- hmm_product


def _hmm(a: Auto, H: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    A = torch.rand(H, H, generator=g, dtype=torch.float64) ** 3
    A /= A.sum(1, keepdim=True)
    Bh = torch.rand(H, a.V, generator=g, dtype=torch.float64) ** 3
    Bh /= Bh.sum(1, keepdim=True)
    return A, Bh, g


def _dense_edge_hmm(a: Auto):
    A_f = (a.dst[:, None] == a.src[None, :]).double()  # [E, E]: dst(e) == src(e')
    B_f = a.dense[a.label].double() if a.E else torch.zeros(0, a.V, dtype=torch.float64)
    return A_f, B_f


def _within(got32, ref64, torch32, atol_rel=1e-6):
    """Triton float32 error ≤ 2 × torch float32 error + a small atol (on the same scale)."""
    scale = float(ref64.abs().max()) if ref64.numel() else 0.0
    err = float((got32.double() - ref64).abs().max()) if ref64.numel() else 0.0
    base = float((torch32.double() - ref64).abs().max()) if ref64.numel() else 0.0
    assert err <= 2 * base + atol_rel * scale + 1e-30, (err, base, scale)


hmm_shapes = dict(a=automata(max_S=5, max_E=10, max_L=3), H=st.sampled_from([1, 3, 17, 40]),
                  B=st.integers(1, 2), seed=st.integers(0, 2**30))


@SETTINGS
@given(**hmm_shapes)
def test_emission_marginal_and_term(a, H, B, seed):
    _, Bh, g = _hmm(a, H, seed)
    Y = emission_marginal_ref(Bh, a.labels)
    want_Y = Bh @ a.dense.double().T  # [H, L]
    torch.testing.assert_close(Y, want_Y, rtol=1e-12, atol=1e-15)
    _within(emission_marginal(Bh.float(), a.labels, backend="triton"), Y,
            emission_marginal_ref(Bh.float(), a.labels))
    X = torch.rand(B, H, a.E, generator=g, dtype=torch.float64)
    ref = emission_term_ref(X, Bh, a.label, a.labels)
    _, B_f = _dense_edge_hmm(a)
    want = torch.einsum("hv,ev,bhe->bv", Bh, B_f, X)
    torch.testing.assert_close(ref, want, rtol=1e-12, atol=1e-15)
    got = emission_term(X.float(), Bh.float(), a.label, a.labels, backend="triton")
    _within(got, ref, emission_term_ref(X.float(), Bh.float(), a.label, a.labels))
    got1 = emission_term(X[0].float(), Bh.float(), a.label, a.labels, backend="triton")
    assert got1.shape == (a.V,)
    _within(got1, ref[0], emission_term_ref(X[0].float(), Bh.float(), a.label, a.labels))


@SETTINGS
@given(**hmm_shapes, chunk=st.sampled_from([1, 5, 32, 512]), max_rows=st.sampled_from([1, 64]),
       sparse=st.sampled_from([0.0, 0.5, 1.0]))
def test_emission_term_token_classes(a, H, B, seed, chunk, max_rows, sparse):
    """The torch path (token classes, per-chunk GEMMs or per-token gathers, label sets without
    mass skipped) against the float64 label-set loop; and the classes themselves against the
    dense label bits (tokens in no label set, empty label sets, bits past V ignored)."""
    tc = TokenClasses.from_labels(a.labels, a.V, chunk=chunk)
    cols = a.dense.T  # [V, L]
    assert tc.token_class.shape == (a.V,) and tc.membership.shape == (a.L, tc.num_classes)
    assert torch.equal(tc.membership[:, tc.token_class].T, cols)
    assert tc.num_classes == torch.unique(cols, dim=0).shape[0]
    _, Bh, g = _hmm(a, H, seed)
    X = torch.rand(B, H, a.E, generator=g, dtype=torch.float64)
    X = X * (torch.rand(a.E, generator=g) >= sparse)  # edges without mass: some, none or all
    ref = emission_term_ref(X, Bh, a.label, a.labels)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hmm_product, "_TC_MAX_ROWS", max_rows)
        got64 = emission_term(X, Bh, a.label, a.labels, classes=tc, backend="torch")
        got = emission_term(X.float(), Bh.float(), a.label, a.labels, classes=tc,
                            backend="torch")
        got1 = emission_term(X[0].float(), Bh.float(), a.label, a.labels, classes=tc,
                             backend="torch")
    torch.testing.assert_close(got64, ref, rtol=1e-12, atol=1e-300)
    _within(got, ref, emission_term_ref(X.float(), Bh.float(), a.label, a.labels))
    assert got1.shape == (a.V,)
    _within(got1, ref[0], emission_term_ref(X[0].float(), Bh.float(), a.label, a.labels))
    # tokens in no label set of an edge with mass get exactly 0
    live = a.dense[a.label[(X != 0).reshape(-1, a.E).any(0)]].any(0) if a.E else \
        torch.zeros(a.V, dtype=torch.bool)
    assert (got[:, ~live] == 0).all()


def test_emission_term_class_cache():
    """Without ``classes=``, the classes are cached per labels tensor and rebuilt after an
    in-place change of it."""
    a = Auto(3, 6, 3, 77, 5, 0.3, True, False)
    _, Bh, g = _hmm(a, 4, 0)
    X = torch.rand(4, a.E, generator=g, dtype=torch.float64)
    labels = a.labels.clone()
    first = emission_term(X, Bh, a.label, labels, backend="torch")
    torch.testing.assert_close(first, emission_term_ref(X, Bh, a.label, labels))
    assert hmm_product._classes_for(labels, a.V) is hmm_product._classes_for(labels, a.V)
    labels[0] = 0  # label set 0 now empty
    again = emission_term(X, Bh, a.label, labels, backend="torch")
    torch.testing.assert_close(again, emission_term_ref(X, Bh, a.label, labels))
    assert not torch.equal(first, again) or not a.dense[0].any()
    with pytest.raises(ValueError, match="classes are for"):
        emission_term(X, Bh, a.label, labels, classes=TokenClasses.from_labels(
            labels[:, :1], 32), backend="torch")


@SETTINGS
@given(**hmm_shapes, data=st.data())
def test_hmm_forward_step(a, H, B, seed, data):
    A, Bh, g = _hmm(a, H, seed)
    alpha = torch.rand(B, H, a.E, generator=g, dtype=torch.float64)
    tokens = torch.tensor(data.draw(st.lists(st.integers(-1, a.V), min_size=B, max_size=B)))
    new, ls = hmm_forward_step_ref(alpha, tokens, A, Bh, a.src, a.dst, a.label, a.labels, a.S)
    # brute force: the Kronecker product of Thm. 4.4, materialized
    A_f, B_f = _dense_edge_hmm(a)
    K = torch.kron(A, A_f)
    for b in range(B):
        x = int(tokens[b])
        col = torch.kron(Bh[:, x], B_f[:, x]) if 0 <= x < a.V else torch.zeros(H * a.E)
        nxt = K.T @ (alpha[b].reshape(-1) * col.double())
        z = float(nxt.sum())
        if z > 0:
            torch.testing.assert_close(ls[b].item(), math.log(z), rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(new[b].reshape(-1), nxt / z, rtol=1e-10, atol=1e-14)
        else:
            assert ls[b] == -math.inf and (new[b] == 0).all()
    # the torch path (restricted to the states the emitting edges enter) vs the reference
    t64, tls64 = hmm_forward_step(alpha, tokens, A, Bh, a.src, a.dst, a.label, a.labels, a.S,
                                  backend="torch")
    torch.testing.assert_close(t64, new, rtol=1e-12, atol=1e-300)
    assert torch.equal(torch.isfinite(tls64), torch.isfinite(ls))
    torch.testing.assert_close(tls64[torch.isfinite(ls)], ls[torch.isfinite(ls)], rtol=1e-12,
                               atol=1e-12)
    got, gls = hmm_forward_step(alpha.float(), tokens, A.float(), Bh.float(), a.src, a.dst,
                                a.label, a.labels, a.S, backend="triton")
    t32, tls = hmm_forward_step_ref(alpha.float(), tokens, A.float(), Bh.float(), a.src, a.dst,
                                    a.label, a.labels, a.S)
    _within(got, new, t32)
    fin = torch.isfinite(ls)
    assert torch.equal(torch.isfinite(gls), fin)
    _within(gls[fin], ls[fin], tls[fin], atol_rel=1e-6)


@SETTINGS
@given(**hmm_shapes, n=st.integers(1, 4))
def test_hmm_backward_messages(a, H, B, seed, n):
    A, Bh, _ = _hmm(a, H, seed)
    inp = emission_marginal_ref(Bh, a.labels)[:, a.label]  # B_h B_fᵀ
    beta, logs = hmm_backward_messages_ref(n, A, inp, a.src, a.dst, a.final, a.S)
    A_f, B_f = _dense_edge_hmm(a)
    torch.testing.assert_close(inp, Bh @ B_f.T, rtol=1e-12, atol=1e-15)
    K = torch.kron(A, A_f)
    vec = torch.kron(torch.ones(H, dtype=torch.float64), a.final.double()[a.dst])
    for k in range(n, 0, -1):
        true = beta[k - 1].reshape(-1) * math.exp(logs[k - 1]) if logs[k - 1] > -math.inf \
            else torch.zeros(H * a.E, dtype=torch.float64)
        torch.testing.assert_close(true, vec, rtol=1e-9, atol=1e-300)
        vec = K @ (inp.reshape(-1) * vec)
    got, gl = hmm_backward_messages(n, A.float(), inp.float(), a.src, a.dst, a.final, a.S,
                                    backend="triton")
    t32, tl32 = hmm_backward_messages_ref(n, A.float(), inp.float(), a.src, a.dst, a.final, a.S)
    _within(got, beta, t32)
    fin = torch.isfinite(logs)
    assert torch.equal(torch.isfinite(gl), fin)
    _within(gl[fin], logs[fin], tl32[fin])


# ---------------------------------------------------------------------------- backends


def test_backend_resolution(monkeypatch):
    a = Auto(3, 5, 2, 40, 1, 0.5, False, False)
    act = torch.ones(1, 3, dtype=torch.bool)
    tok = torch.tensor([1])
    with pytest.raises(KernelBackendError, match="backend must be"):
        advance(act, tok, a.src, a.dst, a.label, a.labels, a.V, backend="cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(KernelBackendError, match="TRITON_INTERPRET"):
        advance(act, tok, a.src, a.dst, a.label, a.labels, a.V, backend="triton")
    # auto on CPU tensors is the torch path (no interpreter needed)
    assert torch.equal(advance(act, tok, a.src, a.dst, a.label, a.labels, a.V),
                       advance_ref(act, tok, a.src, a.dst, a.label, a.labels, a.V))


def test_import_does_not_import_triton():
    code = ("import sys, tractable.kernels, tractable.kernels.hmm_product; "
            "assert 'triton' not in sys.modules, 'triton imported eagerly'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_unpack_pack_roundtrip():
    rng = np.random.default_rng(0)
    m = torch.from_numpy(rng.random((3, 77)) < 0.5)
    from tractable.fsa.automaton import pack_bits, unpack_bits

    assert torch.equal(pack_mask(m), pack_bits(m))
    assert torch.equal(unpack_mask(pack_mask(m), 77), unpack_bits(pack_bits(m), 77))
