"""``apply_token_bitmask`` / ``apply_token_bitmask_inplace`` against the definition
(``scores.masked_fill(~allowed, -inf)``), on both CPU paths (sparse words, mixed words), with
adjacent equal rows (reused bounds), masks met again (the thread's bounds cache), strided
scores, masks narrower and wider than the scores, several threads at once, and in a processor
with ``inplace=True``."""

from __future__ import annotations

import threading

import pytest
import torch
import tractable.decode.token_bitmask as TB
from tractable.decode.token_bitmask import (
    apply_token_bitmask,
    apply_token_bitmask_inplace,
    unpack_token_bitmask,
)
from tractable.fsa.automaton import pack_bits
from tractable.fsa.errors import InvalidArgumentError


def _masks(B: int, V: int, density: float, g: torch.Generator) -> torch.Tensor:
    """bool [B, V]: a few allowed ids (density < 0.05: most 32-id words empty) or many."""
    return torch.rand(B, V, generator=g) < density


def _reference(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return scores.masked_fill(~allowed, float("-inf"))


@pytest.mark.parametrize("path", ["auto", "sparse", "mixed"])
@pytest.mark.parametrize("V", [1, 31, 32, 33, 100, 1000, 4099])
def test_both_functions_match_the_definition(path, V, monkeypatch):
    thr = {"auto": TB._SPARSE_WORDS, "sparse": 2.0, "mixed": -1.0}[path]
    monkeypatch.setattr(TB, "_SPARSE_WORDS", thr)
    g = torch.Generator().manual_seed(V)
    for density in (0.0, 0.002, 0.05, 0.5, 0.97, 1.0):
        allowed = _masks(5, V, density, g)
        allowed[3] = allowed[2]  # an adjacent equal row: its bounds are reused
        packed = pack_bits(allowed)
        for dt in (torch.float32, torch.float64, torch.bfloat16):
            scores = torch.randn(5, V, generator=g).to(dt)
            keep = scores.clone()
            ref = _reference(scores, allowed)
            got = apply_token_bitmask(scores, packed)
            assert got.dtype == dt and torch.equal(got, ref), (density, dt)
            assert torch.equal(scores, keep)  # not mutated
            out = apply_token_bitmask_inplace(scores, packed)
            assert out is scores and torch.equal(scores, ref), (density, dt)


def test_paths_agree_on_special_values(monkeypatch):
    """-0.0 and +-inf copied bit for bit, NaN: allowed -> +inf, disallowed -> -inf, on both
    paths and in both functions."""
    V = 200
    vals = torch.tensor([-0.0, 0.0, float("inf"), float("-inf"), 3.4e38, float("nan"), 1e-45])
    scores = vals.repeat(V // len(vals) + 1)[:V].repeat(3, 1)
    allowed = torch.zeros(3, V, dtype=torch.bool)
    allowed[0, ::3] = True
    allowed[1, :] = True
    packed = pack_bits(allowed)
    results = []
    for thr in (2.0, -1.0):
        monkeypatch.setattr(TB, "_SPARSE_WORDS", thr)
        results.append(apply_token_bitmask(scores, packed))
        x = scores.clone()
        results.append(apply_token_bitmask_inplace(x, packed))
    for r in results:
        bits = r.view(torch.int32)
        assert torch.equal(bits, results[0].view(torch.int32))
    r = results[0]
    assert (r[~allowed] == float("-inf")).all()
    fin = allowed & ~scores.isnan()
    assert torch.equal(r[fin].view(torch.int32), scores[fin].view(torch.int32))
    assert (r[allowed & scores.isnan()] == float("inf")).all()


@pytest.mark.parametrize("thr", [2.0, -1.0])
def test_inplace_on_a_strided_view_writes_only_its_elements(thr, monkeypatch):
    monkeypatch.setattr(TB, "_SPARSE_WORDS", thr)
    g = torch.Generator().manual_seed(0)
    V = 130
    base = torch.randn(4, 2 * V + 1, generator=g)
    view = base[:, 1::2]  # [4, V], column stride 2
    allowed = _masks(4, V, 0.3, g)
    expected_other = base[:, 0::2].clone()
    ref = _reference(view.clone(), allowed)
    apply_token_bitmask_inplace(view, pack_bits(allowed))
    assert torch.equal(base[:, 1::2], ref)
    assert torch.equal(base[:, 0::2], expected_other)  # the columns in between untouched


def test_masks_narrower_and_wider_than_the_scores():
    g = torch.Generator().manual_seed(1)
    allowed = _masks(3, 70, 0.5, g)
    packed = pack_bits(allowed)  # 3 words: 96 ids
    scores = torch.randn(3, 100, generator=g)
    got = apply_token_bitmask(scores, packed)
    assert torch.equal(got[:, :70], _reference(scores[:, :70], allowed))
    assert (got[:, 70:] == float("-inf")).all()  # zero bits, then ids past the mask
    wide = torch.cat([packed, torch.full((3, 2), -1, dtype=torch.int32)], dim=1)
    assert torch.equal(apply_token_bitmask(scores[:, :70], wide), _reference(scores[:, :70],
                                                                                allowed))
    x = scores.clone()
    apply_token_bitmask_inplace(x, packed)
    assert torch.equal(x, got)


def test_threads_with_different_shapes_do_not_share_bounds():
    """The mixed path's bounds cache is per thread: concurrent calls of different widths stay
    exact."""
    errors: list[str] = []

    def work(V: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        for _ in range(30):
            allowed = _masks(4, V, 0.6, g)
            scores = torch.randn(4, V, generator=g)
            if not torch.equal(apply_token_bitmask(scores, pack_bits(allowed)),
                               _reference(scores, allowed)):
                errors.append(f"V={V}")

    ts = [threading.Thread(target=work, args=(V, i)) for i, V in enumerate((3200, 6400, 9600))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


@pytest.mark.parametrize("collide", [False, True])
def test_cached_bounds_of_recent_masks_stay_exact(collide, monkeypatch):
    """Masks met again are served from the thread's bounds cache: a cycle of more distinct
    mixed masks than it keeps (evictions, reused arrays), repeated masks, rows equal to earlier
    but not adjacent rows; with every fingerprint equal too (a hit needs the exact mask)."""
    monkeypatch.setattr(TB, "_SPARSE_WORDS", -1.0)  # the mixed path
    monkeypatch.setattr(TB, "_BOUNDS_KEPT", 3)
    monkeypatch.setattr(TB._local, "bounds", None, raising=False)
    if collide:
        monkeypatch.setattr(TB, "_fingerprint", lambda row: 0)
    g = torch.Generator().manual_seed(7)
    V = 1000
    pool = _masks(5, V, 0.7, g)
    pool[4] = pool[3]
    pool[4, 17] = ~pool[4, 17]  # one bit from another mask (same length, different content)
    for step in range(40):
        idx = torch.randint(0, 5, (4,), generator=g)
        allowed = pool[idx]
        scores = torch.randn(4, V, generator=g)
        assert torch.equal(apply_token_bitmask(scores, pack_bits(allowed)),
                           _reference(scores, allowed)), step
        assert len(TB._local.bounds.entries) <= 3


def test_inplace_refuses_a_tensor_that_requires_grad():
    x = torch.zeros(1, 64, requires_grad=True)
    with pytest.raises(InvalidArgumentError, match="requires grad"):
        apply_token_bitmask_inplace(x, torch.zeros(1, 2, dtype=torch.int32))
    assert unpack_token_bitmask(torch.tensor([[5]], dtype=torch.int32), 3).tolist() == [
        [True, False, True]]


def test_processor_inplace_masks_the_scores_it_is_given(gpt2_vocab):
    from tractable.decode.processor import gcd_logits_processor
    from tractable.fsa.regex import compile_regex

    A = compile_regex(r"(19|20)\d\d", gpt2_vocab)
    g = torch.Generator().manual_seed(0)
    ids = torch.zeros(3, 2, dtype=torch.long)
    scores = torch.randn(3, gpt2_vocab.size, generator=g)
    plain = gcd_logits_processor(A, 4)
    inplace = gcd_logits_processor(A, 4, inplace=True)
    expected = plain(ids, scores)
    assert expected is not scores and not torch.isinf(scores).any()
    got = inplace(ids, scores)
    assert got is scores and torch.equal(scores, expected)
    allowed = A.allowed(A.start(1), 4, "gcd")[0]
    assert torch.equal(torch.isfinite(expected), allowed.expand(3, -1))
    assert 0 < int(allowed.sum()) < 200
