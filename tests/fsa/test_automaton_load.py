"""Saving and loading a ``uniqueItems`` automaton with its checker (format version 3) and
:func:`tractable.fsa.automaton_load.load_automaton`: the loaded automaton masks, advances and
accepts exactly as the compiled one; ``TokenAutomaton.load`` refuses the file rather than drop
the checker; plain automata are still written as version 2; tampered checker parts (with the
checksum recomputed) and byte flips (checksum stale) are refused with typed errors."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from test_load_fuzz import read_parts, write_parts
from tractable.fsa.automaton import TokenAutomaton
from tractable.fsa.automaton_load import load_automaton
from tractable.fsa.errors import AutomatonFormatError, TractableError
from tractable.fsa.json_schema import compile_json_schema
from tractable.fsa.json_schema.unique_items import (
    UniqueItemsAutomaton,
    UniqueItemsDeadEndError,
)

STRS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
NESTED = {"type": "array", "uniqueItems": True,
          "items": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}}
ANYOF = {"anyOf": [{"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
                   {"type": "array", "items": {"type": "integer"}, "maxItems": 3}]}
PROP = {"type": "object", "additionalProperties": False, "required": ["tags"],
        "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                "uniqueItems": True}}}
SCHEMAS = {"strs": STRS, "nested": NESTED, "anyof": ANYOF, "prop": PROP}
TEXTS = {
    "strs": ['[]', '["a","b"]', '["a","a"]', '["a","\\u0061"]', '["ab","a","b"]'],
    "nested": ['[[1,2],[2,1]]', '[[1,2],[1,2]]', '[[1,1]]', '[[1],[1,2],[2]]'],
    "anyof": ['[1,1]', '[1,1,1]', '[1,2,3,4]', '[1,1,2,3]'],
    "prop": ['{"tags":[]}', '{"tags":["x","y"]}', '{"tags":["x","x"]}'],
}


def _compile(schema, vocab):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile_json_schema(schema, vocab)


@pytest.fixture(scope="module")
def saved(gpt2_vocab, tmp_path_factory):
    """{key: (compiled, path of its saved file)}"""
    d = tmp_path_factory.mktemp("unique_files")
    out = {}
    for k, s in SCHEMAS.items():
        A = _compile(s, gpt2_vocab)
        assert isinstance(A, UniqueItemsAutomaton), k
        p = d / f"{k}.safetensors"
        A.save(p)
        out[k] = (A, p)
    return out


def _walk_masks(A, budget: int, seed: int) -> list[bytes]:
    """The packed GCD masks of one uniform walk (the token drawn from the mask with ``seed``);
    a dead end (the checker's typed error) ends the list with b"dead"."""
    rng = random.Random(seed)
    st, out, r = A.start(1), [], budget
    while r > 0:
        try:
            row = A.allowed_packed(st, r, "gcd")[0]
        except UniqueItemsDeadEndError:
            return out + [b"dead"]
        out.append(row.numpy().tobytes())
        ids = torch.nonzero(A.allowed(st, r, "gcd")[0]).view(-1).tolist()
        v = rng.choice(ids)
        if v in A.eos_token_ids:
            break
        st = A.advance(st, torch.tensor([v]))
        r -= 1
    return out


@pytest.mark.parametrize("key", list(SCHEMAS))
def test_round_trip_keeps_the_checker(saved, gpt2_vocab, gpt2_tokenizer, key):
    """Loaded by both readers: a UniqueItemsAutomaton whose accepts() agrees with the compiled
    one on texts with and without duplicates, and whose masks along random walks are equal."""
    A, p = saved[key]
    for B in (load_automaton(p, gpt2_vocab), UniqueItemsAutomaton.load(p, gpt2_vocab)):
        assert isinstance(B, UniqueItemsAutomaton)
        assert B.num_states == A.num_states and B.marked.num_states == A.marked.num_states
        assert B.marked.finals == A.marked.finals
        assert B.num_edges == A.num_edges and B.memory_bytes() == A.memory_bytes()
        mem = B.memory_bytes()
        assert mem["total"] == (mem["labels"] + mem["edges"] + mem["states"] + mem["checker"])
        assert mem["checker"] >= 48 * len(A.marked.edges)
        assert sorted(B.marked.edges) == sorted(A.marked.edges)
        verdicts = []
        for text in TEXTS[key]:
            ids = gpt2_tokenizer.encode(text).ids
            verdicts.append(A.accepts(ids))
            assert B.accepts(ids) == verdicts[-1], (key, text)
        assert True in verdicts and False in verdicts  # duplicates are rejected after loading
        m = max(A.min_tokens_to_accept(), 1)
        for seed in range(3):
            assert _walk_masks(B, 2 * m + 4, seed) == _walk_masks(A, 2 * m + 4, seed)


def test_readers_refuse_the_other_kind(saved, gpt2_vocab, tmp_path):
    """TokenAutomaton.load refuses a checker file (naming load_automaton) instead of dropping
    uniqueness; UniqueItemsAutomaton.load refuses a plain file; load_automaton reads both."""
    _, p = saved["strs"]
    with pytest.raises(AutomatonFormatError, match="load_automaton"):
        TokenAutomaton.load(p, gpt2_vocab)
    plain = _compile({"type": "array", "items": {"type": "string"}}, gpt2_vocab)
    q = tmp_path / "plain.safetensors"
    plain.save(q)
    assert read_parts(q.read_bytes())[1]["version"] == "2"  # older readers still read it
    assert read_parts(p.read_bytes())[1]["version"] == "3"
    with pytest.raises(AutomatonFormatError, match="no uniqueItems checker"):
        UniqueItemsAutomaton.load(q, gpt2_vocab)
    B = load_automaton(q, gpt2_vocab)
    assert type(B) is TokenAutomaton and torch.equal(B.labels, plain.labels)


def test_tampered_checker_parts_are_refused(saved, gpt2_vocab, tmp_path):
    """Each inconsistent checker part, written with a valid checksum, is refused naming the
    checker; so are a part in a version-2 file, an unknown part, a missing or extra tensor."""
    _, p = saved["nested"]
    t, meta = read_parts(p.read_bytes())

    def load(edit, match="uniqueItems checker", **kw):
        tt = {k: v.clone() for k, v in t.items()}
        mm = dict(meta)
        edit(tt, mm)
        q = tmp_path / "x.safetensors"
        q.write_bytes(write_parts(tt, mm, "recompute"))
        with pytest.raises(AutomatonFormatError, match=match):
            load_automaton(q, gpt2_vocab)

    bs = t["byte_states"]
    j = int(np.nonzero(t["marked_final"].numpy()[bs.numpy()] == 0)[0][1])
    load(lambda tt, mm: tt["byte_states"].__setitem__(0, tt["byte_states"][1]))
    load(lambda tt, mm: tt["byte_states"].__setitem__(j, tt["byte_states"][j - 1]))
    load(lambda tt, mm: tt["byte_states"].__setitem__(j, t["marked_final"].numel()))
    load(lambda tt, mm: tt["marked_src"].__setitem__(0, -1))
    load(lambda tt, mm: tt["marked_dst"].__setitem__(3, t["marked_final"].numel()))
    load(lambda tt, mm: tt["marked_mask"].__setitem__(2, 0))
    load(lambda tt, mm: tt["marked_final"].__setitem__(0, 2))

    def flip_final(tt, mm):  # an accepting byte state of a token state made non-accepting
        acc = np.nonzero(t["marked_final"].numpy()[bs.numpy()])[0]
        tt["marked_final"][int(bs[int(acc[0])])] = 0

    load(flip_final)
    load(lambda tt, mm: tt.update(marked_mask=tt["marked_mask"][:, :31].contiguous()))
    load(lambda tt, mm: tt.update(byte_states=tt["byte_states"][:-1].contiguous()))
    load(lambda tt, mm: mm.update(version="2"), match="part")
    load(lambda tt, mm: mm.update(part="future_part"), match="unknown part")
    load(lambda tt, mm: tt.pop("marked_src"), match="lacks")
    load(lambda tt, mm: tt.update(extra=torch.zeros(3)), match="unknown")
    load(lambda tt, mm: tt.pop("labels") if "labels" in tt else tt.pop("labels.zlib"),
         match="lacks|zlib")


def test_byte_flips_are_refused_or_harmless(saved, gpt2_vocab, tmp_path):
    """Random byte flips anywhere in a checker file (checksum left as it was): every load is
    refused with a typed error or gives the same automaton and checker."""
    A, p = saved["anyof"]
    data = p.read_bytes()
    rng = random.Random(5)
    q = tmp_path / "f.safetensors"
    outcomes = {"refused": 0, "same": 0}
    for _ in range(60):
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        q.write_bytes(bytes(b))
        try:
            B = load_automaton(q, gpt2_vocab)
        except TractableError:
            outcomes["refused"] += 1
            continue
        assert isinstance(B, UniqueItemsAutomaton)
        assert torch.equal(B.automaton.labels, A.automaton.labels)
        assert B.marked.edges == A.marked.edges and B.marked.finals == A.marked.finals
        assert np.array_equal(B._byte_of, A._byte_of)
        outcomes["same"] += 1
    assert outcomes["refused"] >= 50, outcomes
