"""``tractable compile`` end to end: ``python -m tractable compile ...`` on the Llama-3 fixture,
its printed numbers against the in-process compile, and the ``-o`` file against
``TokenAutomaton.load``."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, tokenizer_path
from tractable.fsa.automaton import TokenAutomaton

from tractable.cli import main

DATE = r"\d{4}-\d{2}-\d{2}"


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "tractable", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _field(out: str, name: str) -> str:
    m = re.search(rf"^{name}\s+(.*)$", out, flags=re.M)
    assert m, f"no {name!r} line in:\n{out}"
    return m.group(1)


def test_compile_regex_subprocess(tmp_path, llama3_vocab):
    from tractable.fsa.regex import compile_regex

    out_file = tmp_path / "sub" / "date.safetensors"
    folder = tokenizer_path("llama3").parent
    r = _run("compile", "--regex", DATE, "--tokenizer", str(folder), "-o", str(out_file))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    A = compile_regex(DATE, llama3_vocab)
    assert _field(out, "states") == str(A.num_states)
    assert _field(out, "edges") == str(A.num_edges)
    assert _field(out, "label sets") == str(A.num_labels)
    assert "128256 ids (128000 text)" in _field(out, "vocabulary")
    assert DATE in _field(out, "constraint")
    assert re.fullmatch(r"[\d.]+ KiB \(labels [\d.]+ KiB, edges [\d.]+ KiB, states [\d.]+ KiB\)",
                        _field(out, "memory"))
    assert re.fullmatch(r"\d+\.\d{3} s", _field(out, "compile"))
    assert re.fullmatch(r"\d+\.\d{3} s", _field(out, "vocab load"))
    assert str(out_file) in _field(out, "written")
    # the written file is the same automaton
    B = TokenAutomaton.load(out_file, llama3_vocab)
    for f in ("edge_src", "edge_dst", "edge_label", "labels", "initial", "final"):
        assert torch.equal(getattr(A, f), getattr(B, f)), f
    assert B.meta["pattern"] == DATE
    ids = llama3_vocab.token_bytes.index(b"202"), llama3_vocab.token_bytes.index(b"4")
    dash = llama3_vocab.token_bytes.index(b"-")
    two = llama3_vocab.token_bytes.index(b"12")
    assert B.accepts([*ids, dash, two, dash, two])
    assert not B.accepts([*ids, dash, two])


def test_compile_json_output(capsys, tmp_path):
    tok = tokenizer_path("gpt2")
    assert main(["compile", "--regex", "(yes|no)", "--tokenizer", str(tok), "--json",
                 "--eos", "<|endoftext|>", "--vocab-size", "50304"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["constraint"] == "regex" and report["source"] == "(yes|no)"
    assert report["vocab_size"] == 50304 and report["text_tokens"] == 50256
    assert report["eos_token_ids"] == [50256]
    assert report["states"] >= 2 and report["edges"] >= 2 and report["label_sets"] >= 1
    assert report["memory_bytes"]["total"] > 0 and report["compile_seconds"] >= 0
    assert report["output"] is None


def test_compile_errors(capsys, tmp_path):
    tok = str(tokenizer_path("gpt2"))
    assert main(["compile", "--regex", "a\\b", "--tokenizer", tok]) == 1
    err = capsys.readouterr().err
    assert "UnsupportedRegexError" in err and "word boundary" in err and "position 1" in err
    assert main(["compile", "--regex", "a(b", "--tokenizer", tok]) == 1
    assert "InvalidRegexError" in capsys.readouterr().err
    assert main(["compile", "--regex", "a", "--tokenizer", str(tmp_path / "nope.json")]) == 1
    assert "no tokenizer file" in capsys.readouterr().err
    assert main(["compile", "--regex", "a", "--tokenizer", tok, "--eos", "<|nope|>"]) == 1
    assert "<|nope|>" in capsys.readouterr().err
    assert main(["compile", "--regex", "a", "--tokenizer", tok, "--vocab-size", "10"]) == 1
    assert "smaller" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: exactly one constraint is required
        main(["compile", "--tokenizer", tok])
    capsys.readouterr()


def test_compile_json_schema(capsys, tmp_path):
    tok = str(tokenizer_path("llama3"))
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}},
                                  "required": ["ok"]}))
    status = main(["compile", "--json-schema", str(schema), "--tokenizer", tok, "--json"])
    out = capsys.readouterr()
    if importlib.util.find_spec("tractable.fsa.json_schema") is None:
        assert status == 2 and "not available" in out.err
        return
    assert status == 0, out.err
    report = json.loads(out.out)
    assert report["constraint"] == "json-schema" and report["states"] > 0
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["compile", "--json-schema", str(bad), "--tokenizer", tok]) == 1
    assert "not a JSON document" in capsys.readouterr().err


def test_compile_unique_items_schema_writes_its_checker(capsys, tmp_path):
    """A uniqueItems schema compiles to the per-request checker: ``-o`` writes it (format 3),
    the report counts its memory, and ``tractable.load_automaton`` reads it back with the
    checker (duplicates still rejected); ``TokenAutomaton.load`` refuses it."""
    from tractable.fsa.errors import AutomatonFormatError

    import tractable

    path = tokenizer_path("gpt2")
    schema = tmp_path / "u.json"
    schema.write_text(json.dumps({"type": "array", "items": {"type": "string"},
                                  "uniqueItems": True}))
    out_file = tmp_path / "u.safetensors"
    status = main(["compile", "--json-schema", str(schema), "--tokenizer", str(path),
                   "-o", str(out_file)])
    out = capsys.readouterr()
    assert status == 0, out.err
    assert "uniqueItems checker" in out.out and "written" in out.out
    vocab = tractable.TokenVocabulary.from_tokenizer_file(path)
    A = tractable.load_automaton(out_file, vocab)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    assert A.accepts(tok.encode('["a","b"]').ids) and not A.accepts(tok.encode('["a","a"]').ids)
    with pytest.raises(AutomatonFormatError, match="load_automaton"):
        tractable.TokenAutomaton.load(out_file, vocab)


def test_compile_grammar(capsys, tmp_path):
    tok = str(tokenizer_path("llama3"))
    grammar = tmp_path / "g.lark"
    grammar.write_text('start: "a" start "b" | "ab"\n')
    status = main(["compile", "--grammar", str(grammar), "--tokenizer", tok, "--json"])
    out = capsys.readouterr()
    if importlib.util.find_spec("tractable.fsa.grammar") is None:
        assert status == 2
        assert "grammar compiler (tractable.fsa.grammar) is not available" in out.err
        return
    assert status == 0, out.err
    assert json.loads(out.out)["constraint"] == "grammar"


def _tiny_llama(tmp_path, gpt2_tokenizer):
    """A randomly initialised 2-layer Llama with the GPT-2 tokenizer, saved as an HF folder;
    returns (folder, model, tokenizer)."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=gpt2_tokenizer, eos_token="<|endoftext|>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50304, hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256, bos_token_id=50256, eos_token_id=50256,
                      pad_token_id=50256, tie_word_embeddings=True)
    folder = tmp_path / "tiny-llama"
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model, tok


def test_sample_with_any_local_model(capsys, tmp_path, gpt2_tokenizer):
    """``tractable sample --model DIR`` (issue 22): any local HF causal-LM folder, offline;
    progress on stderr, results on stdout; every GCD particle valid."""
    folder, _, _ = _tiny_llama(tmp_path, gpt2_tokenizer)
    status = main(["sample", "--model", str(folder), "--prompt", "code:", "--regex", "[ab]{2}1",
                   "--method", "gcd", "-k", "3", "--max-new-tokens", "6", "--threads", "1"])
    out, err = capsys.readouterr()
    assert status == 0, (out, err)
    assert "loading" in err and "compiling" in err
    lines = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert len(lines) == 3 and all("valid " in ln for ln in lines), out
    assert all(re.search(r"'[ab]{2}1'", ln) for ln in lines), out


def test_sample_smc_jump_forward(capsys, tmp_path, gpt2_tokenizer, monkeypatch):
    """``tractable sample --jump-forward canonical``: the forced text of ``abc[12]`` is
    appended unsampled (counted in the summary line), every particle valid; refused for CARS."""
    folder, _, _ = _tiny_llama(tmp_path, gpt2_tokenizer)
    args = ["sample", "--model", str(folder), "--prompt", "code:", "--regex", "abcde[12]",
            "-k", "3", "--max-new-tokens", "8", "--threads", "1", "--jump-forward"]
    assert main(args + ["canonical", "--method", "cars"]) == 2
    assert "--jump-forward is used by SMC" in capsys.readouterr().out
    monkeypatch.setattr(sys.modules["tractable.decode.smc"], "_WARNED_CANONICAL", False)
    with pytest.warns(UserWarning, match="canonical"):
        status = main(args + ["canonical", "--method", "smc"])
    out, err = capsys.readouterr()
    assert status == 0, (out, err)
    lines = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert len(lines) == 3 and all(re.search(r"valid +'abcde[12]'", ln) for ln in lines), out
    forced = int(re.search(r"forced tokens=(\d+)", out).group(1))
    assert forced >= 1, out


def test_sample_smc_with_pgcd_proposal_and_potential(capsys, tmp_path, gpt2_tokenizer):
    """``tractable sample --method smc --proposal pgcd --hmm DIR`` (issue 20, "users see it"):
    the HMM folder is checked against the model's vocabulary, P-GCD is the proposal and the
    potential, every particle is valid; without --hmm the pgcd proposal is refused."""
    from tractable.decode.generate import model_vocabulary
    from tractable.hmm.model import HMM

    folder, model, tok = _tiny_llama(tmp_path, gpt2_tokenizer)
    vocab = model_vocabulary(model, tok)
    g = torch.Generator().manual_seed(0)
    HMM.random(4, vocab.size, generator=g, fingerprint=vocab.fingerprint).save(tmp_path / "hmm")
    args = ["sample", "--model", str(folder), "--prompt", "code:", "--regex", "[ab]{2}1",
            "--method", "smc", "--proposal", "pgcd", "-k", "4", "--max-new-tokens", "6",
            "--threads", "1"]
    assert main(args) == 2
    assert "--proposal pgcd needs --hmm" in capsys.readouterr().out
    status = main(args + ["--hmm", str(tmp_path / "hmm"), "--pgcd-weight", "0.3"])
    out, err = capsys.readouterr()
    assert status == 0, (out, err)
    assert "P-GCD: HMM with 4 hidden states" in out and "building P-GCD" in err
    assert "proposal=pgcd potential=pgcd" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("[")]
    assert len(lines) == 4 and all("valid " in ln for ln in lines), out
    assert all(re.search(r"'[ab]{2}1'", ln) for ln in lines), out
    # an HMM of another vocabulary is refused with the typed error
    HMM.random(4, vocab.size, generator=g, fingerprint="other").save(tmp_path / "hmm2")
    assert main(args + ["--hmm", str(tmp_path / "hmm2")]) == 2
    assert "VocabularyMismatchError" in capsys.readouterr().out


@pytest.mark.model
def test_demo_gcd_smc_rows(capsys, smollm2):
    """The demo's GCD-SMC rows (issue 20): each run's drawn output is valid for the regex and
    within the budget, log Ĝ is finite, and the running totals count every shown output."""
    import argparse

    from tractable.fsa.regex import compile_regex

    from tractable.commands.demo import DEMO_CASES, _smc_rows
    from tractable.models import smollm2_vocabulary

    model, tok = smollm2
    vocab = smollm2_vocabulary(tok, model)
    case = DEMO_CASES[0]  # the date
    A = compile_regex(case.pattern, vocab)
    budget = A.min_tokens_to_accept() + 1
    total = [0, 0]
    args = argparse.Namespace(particles=4, seed=0)
    spent = _smc_rows(model, tok, vocab, A, case, budget, 2, args, total)
    out = capsys.readouterr().out
    assert total == [2, 2] and spent > 0
    rows = [ln for ln in out.splitlines() if "log G^" in ln]
    assert len(rows) == 2 and all("valid  " in r for r in rows), out
    for r in rows:
        used = int(r.split(" tok")[0].split()[-1])
        assert used <= budget
        log_g = float(r.split("log G^ ")[1].rstrip(")"))
        assert -30 < log_g < 0


@pytest.mark.model
def test_demo_pgcd_smc_rows(capsys, smollm2, tmp_path):
    """The demo's P-GCD-SMC rows (issue 20): the case's HMM distilled from SmolLM2's answers to
    the case prompt (then loaded from its cache, identical), the P-GCD product built at the
    tight budget, and each run's drawn output valid, within the budget, with a finite log Ĝ."""
    import argparse

    from tractable.fsa.regex import compile_regex
    from tractable.hmm.pgcd import PGCD
    from tractable.hmm.task import distill_task_hmm

    from tractable.commands.demo import DEMO_CASES, _smc_rows
    from tractable.models import smollm2_vocabulary

    model, tok = smollm2
    vocab = smollm2_vocabulary(tok, model)
    case = DEMO_CASES[1]  # the JSON object, at its tight budget
    A = compile_regex(case.pattern, vocab)
    budget = A.min_tokens_to_accept()
    kw = dict(hidden_size=16, num_samples=24, max_length=16, epochs=3)
    hmm, info = distill_task_hmm(model, tok, vocab, [case.prompt], tmp_path, **kw)
    assert not info["cached"] and info["train_tokens"] > 0 and hmm.hidden_size == 16
    assert info["heldout_ll"] > info["lm_heldout_ll"] - 20
    again, info2 = distill_task_hmm(model, tok, vocab, [case.prompt], tmp_path, **kw)
    assert info2["cached"] and torch.equal(again.emission, hmm.emission)
    total = [0, 0]
    args = argparse.Namespace(particles=4, seed=0)
    spent = _smc_rows(model, tok, vocab, A, case, budget, 2, args, total,
                      potential=PGCD(A, hmm, budget, w=0.5))
    out = capsys.readouterr().out
    assert total == [2, 2] and spent > 0
    rows = [ln for ln in out.splitlines() if "log G^" in ln]
    assert len(rows) == 2 and all("valid  " in r for r in rows), out
    assert rows[0].lstrip().startswith("P-GCD-SMC x4")
    for r in rows:
        assert int(r.split(" tok")[0].split()[-1]) <= budget
        assert -60 < float(r.split("log G^ ")[1].rstrip(")")) < 0
