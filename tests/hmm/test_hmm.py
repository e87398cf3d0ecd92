"""HMM (Def. 4.1 / App. B), Baum–Welch EM and the distillation script, against enumeration."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from tractable.fsa.errors import AutomatonFormatError, TokenError, VocabularyMismatchError
from tractable.fsa.vocabulary import TokenVocabulary
from tractable.hmm import HMM
from tractable.hmm.distill import bigram_heldout_ll
from tractable.hmm.em import em_step, expected_counts, fit

from tractable.testing.hmm import hmm_joint_enumeration, hmm_prefix_prob


def _hmm(H, V, seed, sharpness=1.0, dtype=torch.float64):
    return HMM.random(H, V, generator=torch.Generator().manual_seed(seed), sharpness=sharpness,
                      dtype=dtype)


def test_forward_matches_enumeration_with_padding():
    hmm = _hmm(3, 4, seed=0)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 4, (12, 5), generator=g)
    lengths = torch.randint(0, 6, (12,), generator=g)
    x[torch.arange(5)[None, :] >= lengths[:, None]] = 99  # padding is never read
    ll = hmm.log_likelihood(x, lengths)
    for i in range(12):
        seq = x[i, : lengths[i]].tolist()
        ref = hmm_joint_enumeration(hmm, seq)
        assert float(ll[i]) == pytest.approx(math.log(ref), rel=1e-12, abs=1e-12)
        assert hmm_prefix_prob(hmm, seq) == pytest.approx(ref, rel=1e-12)
    # a single sequence as a 1-D tensor
    assert float(hmm.log_likelihood(x[0, : lengths[0]])) == pytest.approx(float(ll[0]))


def test_forward_float32_matches_float64():
    h64 = _hmm(6, 10, seed=2)
    x, _ = h64.sample(8, 40, generator=torch.Generator().manual_seed(0))
    ll32 = h64.to(dtype=torch.float32).log_likelihood(x)
    assert torch.allclose(ll32.double(), h64.log_likelihood(x), rtol=1e-5)


def test_no_underflow_at_1000_steps():
    """Scaled forward: finite LL at 1,000 steps (p ≈ e^-2000, far below float64's range) and
    equal to a log-space (logsumexp) forward."""
    hmm = _hmm(5, 20, seed=3)
    x, _ = hmm.sample(2, 1000, generator=torch.Generator().manual_seed(1))
    ll = hmm.log_likelihood(x)
    assert torch.isfinite(ll).all() and float(ll.max()) < -1000
    logA, logB = hmm.transition.log(), hmm.emission.log()
    for i in range(2):
        la = hmm.initial.log() + logB[:, x[i, 0]]
        for t in range(1, 1000):
            la = torch.logsumexp(la[:, None] + logA, 0) + logB[:, x[i, t]]
        assert float(ll[i]) == pytest.approx(float(torch.logsumexp(la, 0)), rel=1e-10)
    assert torch.isfinite(hmm.to(dtype=torch.float32).log_likelihood(x)).all()


def test_next_token_logprobs():
    hmm = _hmm(3, 4, seed=4)
    x = torch.tensor([[1, 2, 0], [3, 0, 0]])
    lengths = torch.tensor([3, 1])
    lp = hmm.next_token_logprobs(x, lengths)
    for i, L in enumerate(lengths.tolist()):
        pre = x[i, :L].tolist()
        for v in range(4):
            ref = hmm_prefix_prob(hmm, pre + [v]) / hmm_prefix_prob(hmm, pre)
            assert float(lp[i, v].exp()) == pytest.approx(ref, rel=1e-12)
    empty = hmm.next_token_logprobs(torch.zeros((1, 0), dtype=torch.long), torch.tensor([0]))
    assert torch.allclose(empty[0].exp(), hmm.initial @ hmm.emission)


def test_sample_distribution_and_seed():
    """First two tokens of ancestral samples follow p_hmm (chi-square), and a generator fixes
    the draw."""
    from scipy.stats import chisquare

    hmm = _hmm(3, 3, seed=5)
    x, z = hmm.sample(20000, 2, generator=torch.Generator().manual_seed(0))
    x2, _ = hmm.sample(20000, 2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(x, x2) and z.shape == (20000, 2)
    obs = torch.bincount(x[:, 0] * 3 + x[:, 1], minlength=9).numpy()
    exp = np.array([hmm_prefix_prob(hmm, [a, b]) for a in range(3) for b in range(3)]) * 20000
    assert chisquare(obs, exp).pvalue > 1e-4


def test_bad_token_raises():
    hmm = _hmm(2, 4, seed=0)
    with pytest.raises(TokenError):
        hmm.log_likelihood(torch.tensor([[1, 4]]))


def test_save_load_roundtrip_and_mismatch(tmp_path):
    vocab = TokenVocabulary.from_token_bytes(["a", "b", "c", None], eos_token_ids=[3])
    other = TokenVocabulary.from_token_bytes(["a", "b", "d", None], eos_token_ids=[3])
    g = torch.Generator().manual_seed(0)
    hmm = HMM.random(3, 4, generator=g, fingerprint=vocab.fingerprint)
    hmm.save(tmp_path / "h")
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    assert cfg["hidden_size"] == 3 and cfg["vocab_size"] == 4
    assert cfg["vocabulary_fingerprint"] == vocab.fingerprint
    back = HMM.load(tmp_path / "h", vocab)
    for a, b in [(hmm.initial, back.initial), (hmm.transition, back.transition),
                 (hmm.emission, back.emission)]:
        assert torch.equal(a, b)
    assert back.fingerprint == vocab.fingerprint
    HMM.load(tmp_path / "h")  # no check without a vocabulary
    with pytest.raises(VocabularyMismatchError) as e:
        HMM.load(tmp_path / "h", other)
    assert "HMM" in str(e.value)
    with pytest.raises(AutomatonFormatError):
        HMM.load(tmp_path / "nothing-here")


def test_expected_counts_are_consistent():
    """γ sums to one per position: counts total the number of tokens; and the E-step matches
    posterior marginals computed by enumeration on one short sequence."""
    hmm = _hmm(3, 4, seed=6)
    x = torch.tensor([[0, 3, 1, 2], [2, 2, 0, 0]])
    lengths = torch.tensor([4, 2])
    init, trans, emit, ll = expected_counts(hmm, x, lengths)
    assert float(init.sum()) == pytest.approx(2.0)
    assert float(trans.sum()) == pytest.approx(4.0)  # (4-1) + (2-1) transitions
    assert float(emit.sum()) == pytest.approx(6.0)
    assert ll == pytest.approx(float(hmm.log_likelihood(x, lengths).sum()))
    # enumeration of p(z_1 = i | x) and p(z_2 = j, z_3 = k | x) for sequence 0
    import itertools

    pi, A, B = (t.numpy() for t in (hmm.initial, hmm.transition, hmm.emission))
    seq = [0, 3, 1, 2]
    post1 = np.zeros(3)
    pair = np.zeros((3, 3))
    Z = 0.0
    for zz in itertools.product(range(3), repeat=4):
        p = pi[zz[0]] * B[zz[0], seq[0]]
        for t in range(1, 4):
            p *= A[zz[t - 1], zz[t]] * B[zz[t], seq[t]]
        Z += p
        post1[zz[0]] += p
        for t in range(3):
            pair[zz[t], zz[t + 1]] += p
    i1, t1, _, _ = expected_counts(hmm, x[:1], lengths[:1])
    np.testing.assert_allclose(i1.numpy(), post1 / Z, rtol=1e-10)
    np.testing.assert_allclose(t1.numpy(), pair / Z, rtol=1e-10)


def test_em_never_decreases_training_likelihood():
    """Exact EM (mini-batched E-step, one M-step): the LL never decreases without pseudocounts,
    and the MAP objective (LL + Dirichlet log-prior) never decreases with them."""
    true = _hmm(4, 6, seed=7, sharpness=3.0)
    g = torch.Generator().manual_seed(0)
    x, _ = true.sample(60, 15, generator=g)
    lengths = torch.randint(1, 16, (60,), generator=g)
    h = _hmm(4, 6, seed=8)
    lls = []
    for _ in range(15):
        h, ll = em_step(h, x, lengths, pseudocount=0.0, emission_pseudocount=0.0, batch_size=16)
        lls.append(ll)
    lls.append(float(h.log_likelihood(x, lengths).sum()))
    assert all(b >= a - 1e-9 for a, b in zip(lls, lls[1:])), lls
    assert lls[-1] > lls[0] + 10  # it really learns

    pc, epc = 0.5, 0.1
    def map_obj(m):
        ll = float(m.log_likelihood(x, lengths).sum())
        return ll + pc * float(m.initial.log().sum() + m.transition.log().sum()) + \
            epc * float(m.emission.log().sum())

    h = _hmm(4, 6, seed=9)
    objs = [map_obj(h)]
    for _ in range(10):
        h, _ = em_step(h, x, lengths, pseudocount=pc, emission_pseudocount=epc, batch_size=7)
        objs.append(map_obj(h))
    assert all(b >= a - 1e-9 for a, b in zip(objs, objs[1:])), objs


def test_fit_resume_is_deterministic(tmp_path):
    """fit() with checkpoints: 2 epochs then a resumed 3rd equals 3 uninterrupted epochs; the
    held-out LL beats the initialization and the bigram baseline on HMM data."""
    true = _hmm(4, 12, seed=10, sharpness=4.0)
    x, _ = true.sample(220, 20, generator=torch.Generator().manual_seed(0))
    lengths = torch.full((220,), 20)
    tr, trl, ho, hol = x[:200], lengths[:200], x[200:], lengths[200:]
    logs: list[dict] = []
    kw = dict(hidden_size=4, vocab_size=12, batch_size=64, pseudocount=0.01,
              emission_pseudocount=0.01, seed=3, progress=False, dtype=torch.float64)
    full = fit(tr, trl, ho, hol, epochs=3, checkpoint=tmp_path / "a", log=logs.append, **kw)
    fit(tr, trl, ho, hol, epochs=2, checkpoint=tmp_path / "b", **kw)
    resumed = fit(tr, trl, ho, hol, epochs=3, checkpoint=tmp_path / "b", resume=True, **kw)
    assert torch.allclose(full.emission, resumed.emission) and torch.allclose(
        full.transition, resumed.transition)
    assert [r["epoch"] for r in logs] == [0, 1, 2]
    assert logs[-1]["heldout_ll_per_token"] > logs[0]["train_ll_per_token"]
    long = fit(tr, trl, ho, hol, epochs=25, **kw)
    ho_ll = float(long.log_likelihood(ho, hol).sum()) / int(hol.sum())
    big = bigram_heldout_ll(tr, trl, ho, hol, 12, pseudocount=0.1)
    assert ho_ll > big


def test_bigram_baseline_exact_small_case():
    """The bigram baseline on a toy corpus, by hand: first token from smoothed first-token
    counts, then the Jelinek–Mercer mixture of bigram and smoothed unigram."""
    tr = torch.tensor([[0, 1, 0, 1]])
    trl = torch.tensor([4])
    te = torch.tensor([[0, 1, 1]])
    tel = torch.tensor([3])
    V, pc = 3, 0.5
    got = bigram_heldout_ll(tr, trl, te, tel, V, pseudocount=pc)
    first = (1 + pc) / (1 + 3 * pc)
    uni = np.array([2 + pc, 2 + pc, pc]) / (4 + 3 * pc)
    lam0 = 2 / 3  # token 0 followed twice (count 2, λ = 2 / (2 + 1))
    lam1 = 1 / 2  # token 1 followed once
    p01 = lam0 * 1.0 + (1 - lam0) * uni[1]
    p11 = lam1 * 0.0 + (1 - lam1) * uni[1]
    ref = (math.log(first) + math.log(p01) + math.log(p11)) / 3
    assert got == pytest.approx(ref, rel=1e-12)


def test_distill_train_stage_cli(tmp_path):
    """`tractable distill --stage train` on cached samples (no LM needed): writes the HMM, a
    log with per-epoch held-out LL, and a summary; resume continues."""
    from tractable.hmm.distill import load_samples

    from tractable.cli import main

    true = _hmm(3, 9, seed=11, sharpness=3.0, dtype=torch.float32)
    x, _ = true.sample(100, 12, generator=torch.Generator().manual_seed(0))
    out = tmp_path / "run"
    (out / "samples").mkdir(parents=True)
    torch.save({"tokens": x[:60].int(), "lengths": torch.full((60,), 12)},
               out / "samples" / "batch_00000.pt")
    torch.save({"tokens": x[60:].int(), "lengths": torch.full((40,), 12)},
               out / "samples" / "batch_00001.pt")
    (out / "vocabulary.json").write_text(json.dumps({"size": 9, "fingerprint": "f" * 64,
                                                     "eos_token_ids": []}))
    toks, lens = load_samples(out / "samples")
    assert toks.shape == (100, 12) and int(lens.sum()) == 1200
    args = ["distill", "--out", str(out), "--stage", "train", "--hidden-size", "3",
            "--num-samples", "100", "--max-length", "12", "--epochs", "2", "--batch-size",
            "32", "--no-progress", "--device", "cpu"]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["train_tokens"] == 1080 and summary["heldout_tokens"] == 120
    hmm = HMM.load(out / "hmm", "f" * 64)
    assert hmm.hidden_size == 3 and hmm.vocab_size == 9
    epochs = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in epochs if r.get("event") == "epoch"] == [0, 1]
    assert main(args[:-7] + ["--epochs", "3", "--batch-size", "32", "--no-progress",
                             "--device", "cpu", "--resume"]) == 0
    epochs = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in epochs if r.get("event") == "epoch"] == [0, 1, 2]
