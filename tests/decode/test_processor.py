"""``gcd_logits_processor`` inside Hugging Face ``generate`` (fast: a tiny random-init Llama).

The model is a 2-layer ``LlamaForCausalLM`` with the real GPT-2 tokenizer (fixture) and a
logits width of 50,304 (the tokenizer's 50,257 ids padded to a multiple of 64, as real models
do), so the padding ids 50,257..50,303 must be masked too.  Its distribution is close to
uniform, which makes it a harsh test: without the mask nothing it writes is valid.

What is checked: the masks the processor applies equal ``A.allowed`` replayed from scratch on
each row's generated suffix (including rows reordered and duplicated as beam search does), and
every GCD output is accepted by Python's ``re.fullmatch`` on its decoded text, for greedy,
sampling, ``num_return_sequences``, left-padded batches and beam search; the errors.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tractable.decode.processor import (  # noqa: E402
    BudgetExceededError,
    GCDLogitsProcessor,
    apply_token_bitmask,
    gcd_logits_processor,
    unpack_token_bitmask,
)
from tractable.fsa.automaton import pack_bits  # noqa: E402
from tractable.fsa.errors import (  # noqa: E402
    TokenError,
    UnsatisfiableBudgetError,
    VocabularyError,
)
from tractable.fsa.regex import compile_regex  # noqa: E402
from tractable.fsa.vocabulary import TokenVocabulary  # noqa: E402

MODEL_V = 50304  # GPT-2's 50,257 ids padded to a multiple of 64
EOS = 50256
DATE = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
PERSON = r'\{"name": "[a-z ]{1,20}", "age": [0-9]{1,3}\}'



@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One torch thread: on the shared 2-core machine, 2 OpenMP threads made a batch-8 decode
    step of SmolLM2 take 12 s instead of 0.35 s (oversubscription)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

@pytest.fixture(scope="module")
def hf_tok(gpt2_tokenizer):
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=gpt2_tokenizer, eos_token="<|endoftext|>")
    tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


@pytest.fixture(scope="module")
def vocab(hf_tok):
    return TokenVocabulary.from_huggingface(hf_tok, vocab_size=MODEL_V, eos_token_ids=[EOS])


@pytest.fixture(scope="module")
def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=MODEL_V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=EOS, eos_token_id=EOS, pad_token_id=EOS, tie_word_embeddings=True,
    )
    m = LlamaForCausalLM(cfg).eval()
    # sharpen the near-uniform random logits a little so greedy and beams are not all ties
    with torch.no_grad():
        m.lm_head.weight.mul_(20.0)
    return m


@pytest.fixture(scope="module")
def date_A(vocab):
    return compile_regex(DATE, vocab)


@pytest.fixture(scope="module")
def person_A(vocab):
    return compile_regex(PERSON, vocab)


def _encode(tok, prompts):
    return tok(prompts, return_tensors="pt", padding=True)


def _generated(out, enc):
    return out[:, enc["input_ids"].shape[1]:]


def _texts(vocab, rows):
    return [vocab.decode_bytes([t for t in r.tolist() if t != EOS]).decode("utf-8", "replace")
            for r in rows]


def _check_history(A, proc, mode="gcd"):
    """Every recorded mask equals A.allowed replayed from the start on the row's suffix."""
    assert proc.history, "record=True kept nothing"
    P = proc.prompt_length
    n_checked = 0
    for ids, masks in proc.history:
        assert masks.shape == (ids.shape[0], A.vocab_size)
        assert not masks[:, 50257:].any(), "a model-vocabulary padding id was allowed"
        for b in range(ids.shape[0]):
            gen = ids[b, P:].tolist()
            if EOS in gen:
                expect = torch.zeros(A.vocab_size, dtype=torch.bool)
                expect[EOS] = True
            else:
                st = A.start(1)
                for t in gen:
                    st = A.advance(st, torch.tensor([t]))
                assert not bool(st.is_dead()[0])
                expect = A.allowed(st, proc.max_new_tokens - len(gen), mode)[0]
            assert torch.equal(masks[b], expect), (b, gen)
            n_checked += 1
    return n_checked


# ---------------------------------------------------------------------------- generate


def test_greedy_masks_equal_allowed_and_outputs_valid(model, hf_tok, vocab, date_A):
    n = date_A.min_tokens_to_accept()
    enc = _encode(hf_tok, ["The date is"])
    proc = gcd_logits_processor(date_A, n, record=True)
    out = model.generate(**enc, max_new_tokens=n, logits_processor=[proc], do_sample=False)
    gen = _generated(out, enc)
    (text,) = _texts(vocab, gen)
    assert re.fullmatch(DATE, text), text
    assert date_A.accepts(gen[0].tolist())
    assert _check_history(date_A, proc) == len(proc.history) >= 1


def test_inplace_generate_gives_the_same_outputs(model, hf_tok, vocab, person_A):
    """``inplace=True`` inside ``generate`` (sampling, 4 rows, a seeded generator): the same
    tokens as the default new-tensor processor, every output accepted, the same masks."""
    n = person_A.min_tokens_to_accept() + 4
    enc = _encode(hf_tok, ['Person: {"name":'])
    outs = []
    for inplace in (False, True):
        torch.manual_seed(3)
        proc = gcd_logits_processor(person_A, n, record=True, inplace=inplace)
        out = model.generate(**enc, max_new_tokens=n, logits_processor=[proc], do_sample=True,
                             num_return_sequences=4, top_k=None, top_p=None)
        outs.append((_generated(out, enc), proc))
    (a, pa), (b, pb) = outs
    assert torch.equal(a, b)
    assert [torch.equal(x[1], y[1]) for x, y in zip(pa.history, pb.history)] == [True] * len(
        pa.history)
    for row in b.tolist():
        assert person_A.accepts([t for t in row if t != EOS] + [EOS])


@pytest.mark.parametrize("extra", [0, 6])
def test_sampling_num_return_sequences(model, hf_tok, vocab, person_A, extra):
    n = person_A.min_tokens_to_accept() + extra
    enc = _encode(hf_tok, ['Person: {"name":'])
    torch.manual_seed(1)
    proc = gcd_logits_processor(person_A, n, record=True)
    out = model.generate(**enc, max_new_tokens=n, logits_processor=[proc], do_sample=True,
                         num_return_sequences=6, top_k=None, top_p=None)
    texts = _texts(vocab, _generated(out, enc))
    assert len(texts) == 6
    for t in texts:
        assert re.fullmatch(PERSON, t), t
    assert len(set(texts)) > 1, "sampling gave identical outputs"
    _check_history(person_A, proc)


def test_left_padded_batch(model, hf_tok, vocab, date_A):
    prompts = ["Date:", "A much longer prompt, which is padded on the left, asks for a date:",
               "When?"]
    enc = _encode(hf_tok, prompts)
    assert (enc["attention_mask"][:, 0] == 0).any(), "the batch should be left-padded"
    n = date_A.min_tokens_to_accept() + 2
    torch.manual_seed(2)
    proc = gcd_logits_processor(date_A, n, record=True)
    out = model.generate(**enc, max_new_tokens=n, logits_processor=[proc], do_sample=True,
                         top_k=None, top_p=None)
    assert proc.prompt_length == enc["input_ids"].shape[1]
    for t in _texts(vocab, _generated(out, enc)):
        assert re.fullmatch(DATE, t), t
    _check_history(date_A, proc)


class _BoostEOS(transformers.LogitsProcessor):
    """A user processor placed *before* ours: makes EOS likely wherever it is allowed."""

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, EOS] += 30.0
        return scores


def test_finished_rows_are_padded(model, hf_tok, vocab):
    # rows can stop after 1..4 digits; a boosted EOS ends them at different steps
    A = compile_regex(r"[0-9]{1,4}|[a-z]{6,8}", vocab)
    enc = _encode(hf_tok, ["x", "y y"])
    torch.manual_seed(3)
    proc = gcd_logits_processor(A, 8, record=True)
    out = model.generate(**enc, max_new_tokens=8, logits_processor=[_BoostEOS(), proc],
                         do_sample=True, num_return_sequences=4, top_k=None, top_p=None)
    gen = _generated(out, enc)
    assert (gen == EOS).any(), "no row ended with EOS"
    for t in _texts(vocab, gen):
        assert re.fullmatch(r"[0-9]{1,4}|[a-z]{6,8}", t), t
    _check_history(A, proc)


@pytest.mark.parametrize("pattern", [DATE, r"(cat|dog|bird)s?"])
def test_beam_search_outputs_valid(model, hf_tok, vocab, pattern):
    A = compile_regex(pattern, vocab)
    n = A.min_tokens_to_accept() + 3
    enc = _encode(hf_tok, ["Answer:", "The animal, or date, is"])
    proc = gcd_logits_processor(A, n)
    out = model.generate(**enc, max_new_tokens=n, logits_processor=[proc], do_sample=False,
                         num_beams=3, num_return_sequences=3)
    texts = _texts(vocab, _generated(out, enc))
    assert len(texts) == 6
    for t in texts:
        assert re.fullmatch(pattern, t), t


def test_lcd_mode_masks(model, hf_tok, vocab, person_A):
    n = person_A.min_tokens_to_accept() + 4
    enc = _encode(hf_tok, ["{"])
    torch.manual_seed(4)
    proc = gcd_logits_processor(person_A, n, mode="lcd", record=True)
    model.generate(**enc, max_new_tokens=n, logits_processor=[proc], do_sample=True,
                   num_return_sequences=3, top_k=None, top_p=None)
    _check_history(person_A, proc, mode="lcd")


# ---------------------------------------------------------------------------- errors


def test_unsatisfiable_budget_raises_before_generation(date_A):
    m = date_A.min_tokens_to_accept()
    with pytest.raises(UnsatisfiableBudgetError) as ei:
        gcd_logits_processor(date_A, m - 1)
    assert ei.value.minimum == m and ei.value.budget == m - 1


def test_vocab_size_mismatch(model, hf_tok):
    small = TokenVocabulary.from_huggingface(hf_tok, eos_token_ids=[EOS])  # 50,257 ids
    A = compile_regex(r"[0-9]{2}", small)
    proc = gcd_logits_processor(A, 3)
    enc = _encode(hf_tok, ["n ="])
    with pytest.raises(VocabularyError, match="50257"):
        model.generate(**enc, max_new_tokens=3, logits_processor=[proc], do_sample=False)


class _NoEOS(transformers.LogitsProcessor):
    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, EOS] = float("-inf")
        return scores


def test_generation_past_budget_ends_rows_with_eos(model, hf_tok, vocab):
    """generate's budget larger than the processor's (issue 22): the row is given EOS at the
    processor's budget (even with EOS suppressed by an earlier processor) instead of an
    exception that loses the batch; under GCD it ends accepted."""
    A = compile_regex(r"[a-z]{3,}", vocab)
    proc = gcd_logits_processor(A, 5)
    enc = _encode(hf_tok, ["word:", "a longer prompt:"])
    out = model.generate(**enc, max_new_tokens=9, logits_processor=[_NoEOS(), proc],
                         do_sample=False, pad_token_id=EOS)
    P = enc["input_ids"].shape[1]
    assert proc.budget_ended_rows == 2
    for row in out[:, P:].tolist():
        assert row[5] == EOS
        assert A.accepts(row[:5])
        assert re.fullmatch(r"[a-z]{3,}", hf_tok.decode(row[:5]))


def test_budget_exceeded_without_eos_raises(vocab):
    """Only an automaton without an EOS id has no way to end a row: BudgetExceededError."""
    v = TokenVocabulary.from_token_bytes(["a", "b"], eos_token_ids=[])
    A = compile_regex(r"a+", v)
    proc = gcd_logits_processor(A, 1)
    scores = torch.zeros((1, 2))
    proc(torch.tensor([[1]]), scores)
    with pytest.raises(BudgetExceededError, match="max_new_tokens=1"):
        proc(torch.tensor([[1, 0]]), scores)


class _ForceToken(transformers.LogitsProcessor):
    """A user processor placed *after* ours that re-enables a masked token."""

    def __init__(self, tok):
        self.tok = tok

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, self.tok] = 1e4
        return scores


def test_disallowed_token_raises_with_row_and_id(model, hf_tok, vocab, date_A):
    bad = hf_tok.convert_tokens_to_ids("x")
    proc = gcd_logits_processor(date_A, 12)
    enc = _encode(hf_tok, ["a", "b c"])
    with pytest.raises(TokenError, match=rf"row 0 .*token id {bad}") as ei:
        model.generate(**enc, max_new_tokens=12, logits_processor=[proc, _ForceToken(bad)],
                       do_sample=False)
    assert ei.value.token_id == bad


def test_bad_arguments(date_A):
    with pytest.raises(ValueError, match="mode"):
        gcd_logits_processor(date_A, 12, mode="greedy")
    with pytest.raises(ValueError, match="on_violation"):
        gcd_logits_processor(date_A, 12, on_violation="ignore")
    proc = gcd_logits_processor(date_A, 12)
    assert isinstance(proc, transformers.LogitsProcessor)
    proc(torch.zeros(1, 5, dtype=torch.long), torch.zeros(1, date_A.vocab_size))
    with pytest.raises(ValueError, match="one generate"):
        proc(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, date_A.vocab_size))


# ---------------------------------------------------------------------------- no model


def test_reordered_and_duplicated_rows_match_replay(vocab, person_A):
    """Drive the processor by hand the way beam search does: every step, rows are permuted,
    duplicated and dropped; each row then takes a random allowed token."""
    A = person_A
    n = A.min_tokens_to_accept() + 5
    proc = gcd_logits_processor(A, n, record=True)
    g = torch.Generator().manual_seed(0)
    B, P = 5, 3
    ids = torch.randint(0, 1000, (1, P), generator=g).expand(B, P).clone()
    for _ in range(n):
        scores = torch.randn(B, A.vocab_size, generator=g)
        out = proc(ids, scores)
        assert torch.isfinite(out).any(dim=1).all()
        nxt = torch.multinomial(torch.softmax(out, -1), 1, generator=g)
        ids = torch.cat([ids, nxt], dim=1)
        perm = torch.randint(0, B, (B,), generator=g)  # beam-style reorder with repeats
        ids = ids[perm]
    _check_history(A, proc)
    for row in ids[:, P:].tolist():
        assert A.accepts(row), row


@pytest.mark.parametrize("how", ["prune", "auto-beam", "auto", "raise"])
def test_masked_token_prunes_beams_and_raises_elsewhere(person_A, how):
    """A row that took a masked token: pruned (only EOS from then on) when asked, or when the
    call comes from a transformers beam-search loop under "auto"; TokenError otherwise."""
    A = person_A
    n = A.min_tokens_to_accept() + 2
    proc = gcd_logits_processor(A, n, on_violation="prune" if how == "prune" else
                                "raise" if how == "raise" else "auto")
    V = A.vocab_size
    ids = torch.zeros(2, 3, dtype=torch.long)
    out = proc(ids, torch.zeros(2, V))
    good = int(torch.nonzero(torch.isfinite(out[1]))[0])
    bad = int(torch.nonzero(~torch.isfinite(out[0]))[0])
    ids = torch.cat([ids, torch.tensor([[bad], [good]])], dim=1)
    # a stand-in for transformers' beam-search loop (the detection reads the caller's frames)
    ns: dict = {}
    exec(compile("def _beam_search(p, i, s):\n    return p(i, s)\n",
                 "transformers/generation/utils.py", "exec"), ns)
    call = ns["_beam_search"] if how == "auto-beam" else (lambda p, i, s: p(i, s))
    if how in ("auto", "raise"):
        with pytest.raises(TokenError, match=rf"row 0 .*token id {bad}"):
            call(proc, ids, torch.zeros(2, V))
        return
    out = call(proc, ids, torch.zeros(2, V))
    assert proc.pruned_rows == 1
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [EOS]
    assert torch.isfinite(out[1]).any() and not torch.isfinite(out[1, EOS])  # still live


def test_apply_token_bitmask_matches_reference():
    g = torch.Generator().manual_seed(0)
    for V in (1, 31, 32, 33, 100, 1000):
        allowed = torch.rand(4, V, generator=g) < 0.3
        packed = pack_bits(allowed)
        assert torch.equal(unpack_token_bitmask(packed, V), allowed)
        scores = torch.randn(4, V, generator=g)
        ref = scores.masked_fill(~allowed, float("-inf"))
        for dt in (torch.float32, torch.float64, torch.bfloat16):
            got = apply_token_bitmask(scores.to(dt), packed)
            assert got.dtype == dt
            assert torch.equal(got, ref.to(dt))
            assert torch.equal(scores, scores.clone())  # not mutated


def test_apply_token_bitmask_special_values():
    """Allowed scores are copied bit for bit (-0.0, +-inf, huge and tiny values), disallowed
    ones are -inf whatever they were (NaN included); rows of a batch keep their own masks;
    strided (non-contiguous) scores are read as they are."""
    V = 70
    vals = torch.tensor([-0.0, 0.0, float("inf"), float("-inf"), 3.4e38, -3.4e38, 1e-45, -7.5])
    for dt in (torch.float32, torch.float64):
        base = vals.to(dt).repeat(V // len(vals) + 1)[:V]
        scores = torch.stack([base, base.flip(0), base]).to(dt)
        allowed = torch.zeros(3, V, dtype=torch.bool)
        allowed[0, ::2] = True
        allowed[1, 1::3] = True  # row 2: nothing allowed
        got = apply_token_bitmask(scores, pack_bits(allowed))
        assert torch.equal(got[allowed].view(torch.int64 if dt == torch.float64 else torch.int32),
                           scores[allowed].view(torch.int64 if dt == torch.float64
                                                else torch.int32))  # -0.0 stays -0.0
        assert (got[~allowed] == float("-inf")).all()
        nan = scores.clone()
        nan[:, 5] = float("nan")
        got = apply_token_bitmask(nan, pack_bits(allowed))
        assert got[1, 5] == float("-inf") and got[2, 5] == float("-inf")  # disallowed NaN
        narrow = apply_token_bitmask(torch.zeros(3, 100, dtype=dt), pack_bits(allowed))
        assert torch.equal(torch.isfinite(narrow[:, :V]), allowed)  # ids past the mask: -inf
        assert (narrow[:, 96:] == float("-inf")).all()  # (the mask's 3 words cover 96 ids)
        wide = torch.randn(3, 2 * V, dtype=dt)[:, ::2]  # strided view
        ref = wide.masked_fill(~allowed, float("-inf"))
        assert torch.equal(apply_token_bitmask(wide, pack_bits(allowed)), ref)


def test_processor_class_and_import_is_lazy():
    assert issubclass(GCDLogitsProcessor, transformers.LogitsProcessor)
    code = "import sys, tractable; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
