"""TokenAutomaton (paper 002, Def. 3.2) against brute force.

Tiny vocabularies (``from_token_bytes``) and small byte NFAs: token-level acceptance and
viability against decoding every token sequence up to length 4 and simulating the byte NFA;
the ``T_out``/``T_in``/``B`` views and the edge HMM (Def. 4.2) rebuilt densely; persistence.
Then a real-vocabulary check on Llama-3 with random segmentations.
"""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from test_nfa import nfas
from tractable.fsa import nfa as N
from tractable.fsa.automaton import FORMAT_VERSION, TokenAutomaton, pack_bits, unpack_bits
from tractable.fsa.automaton_file import PLAIN_VERSION
from tractable.fsa.errors import (
    AutomatonFormatError,
    EmptyLanguageError,
    VocabularyMismatchError,
)
from tractable.fsa.vocabulary import TokenVocabulary

EOS = 9
SPECIAL = 10
# Tiny vocabulary: single bytes, merges, a duplicate ("a" twice), an EOS and a special id, the
# two halves of "é" (C3 A9) and the whole of it.
TINY = ["a", "b", "c", "ab", "bc", "abc", "ca", "a", b"\xc3", None, None, b"\xa9", "é", "cc"]


@pytest.fixture(scope="module")
def tiny():
    return TokenVocabulary.from_token_bytes(TINY, eos_token_ids=[EOS], name="tiny")


def _tiny():
    return TokenVocabulary.from_token_bytes(TINY, eos_token_ids=[EOS], name="tiny")


# ------------------------------------------------------------------- brute-force reference


class Reference:
    """Token-level semantics by brute force: simulate the byte NFA on each token's bytes."""

    def __init__(self, nfa: N.ByteNFA, vocab: TokenVocabulary):
        self.vocab = vocab
        self.f = f = N.finalize(nfa, reduce=False)
        self.out = [[] for _ in range(f.num_states)]
        for s, m, d in f.edges:
            self.out[s].append((m, d))
        self.text_ids = [i for i, b in enumerate(vocab.token_bytes) if b is not None]
        # token moves from each single state, and the states that can still reach a final
        delta = {(q, v): self.step({q}, vocab.token_bytes[v])
                 for q in range(f.num_states) for v in self.text_ids}
        live = set(f.finals)
        changed = True
        while changed:
            changed = False
            for (q, _), dst in delta.items():
                if q not in live and dst & live:
                    live.add(q)
                    changed = True
        self.live = live

    def step(self, cur: set[int], data: bytes) -> set[int]:
        for byte in data:
            cur = {d for s in cur for m, d in self.out[s] if (m >> byte) & 1}
        return cur

    def _run(self, ids):
        ids = list(ids)
        ended = bool(ids) and ids[-1] in self.vocab.eos_token_ids
        if ended:
            ids = ids[:-1]
        if any(not 0 <= t < self.vocab.size or self.vocab.token_bytes[t] is None for t in ids):
            return None, ended
        return self.step({self.f.start}, self.vocab.decode_bytes(ids)), ended

    def accepts(self, ids) -> bool:
        cur, _ = self._run(ids)
        return cur is not None and bool(cur & self.f.finals)

    def viable(self, ids) -> bool:
        cur, ended = self._run(ids)
        if cur is None:
            return False
        return bool(cur & self.f.finals) if ended else bool(cur & self.live)


def _sequences(ids, max_len):
    for n in range(max_len + 1):
        yield from itertools.product(ids, repeat=n)


def _check_against_reference(A: TokenAutomaton, ref: Reference, max_len: int) -> int:
    """Every text-token sequence up to ``max_len``: walked as a tree with ``step_states`` (one
    token per edge of the tree), against the byte NFA simulated on the decoded bytes; and
    ``accepts``/``viable`` called on every sequence one shorter and a sample of full length
    (with trailing EOS and special ids too).  Returns the number of sequences walked."""
    final = A.final.numpy()
    rng = random.Random(len(ref.text_ids) * 1000 + A.num_states)
    count = 0
    stack = [((), A.initial.numpy().copy(), {ref.f.start})]
    while stack:
        seq, cur, bstates = stack.pop()
        count += 1
        acc = bool((cur & final).any())
        assert acc == bool(bstates & ref.f.finals) == ref.accepts(seq), seq
        assert bool(cur.any()) == bool(bstates & ref.live) == ref.viable(seq), seq
        assert acc == N.matches(ref.f, ref.vocab.decode_bytes(seq)), seq
        if len(seq) < max_len or rng.random() < 0.05:
            assert A.accepts(seq) == acc and A.viable(seq) == bool(cur.any()), seq
            for eos in ref.vocab.eos_token_ids:
                assert A.accepts(seq + (eos,)) == acc == A.viable(seq + (eos,)), seq
        if len(seq) < max_len:
            for v in ref.text_ids:
                stack.append((seq + (v,), A.step_states(cur, v),
                              ref.step(bstates, ref.vocab.token_bytes[v])))
    return count


FIXED = {
    "literal": N.literal("abc"),
    "star": N.star(N.union(N.literal("ab"), N.literal("c"))),
    "repeat": N.repeat(N.byteset(N.mask_of(b"abc")), 2, 4),
    "utf8": N.concat(N.optional(N.literal("a")), N.plus(N.codepoints([(0xE9, 0xE9)]))),
    "intersect": N.intersect(N.star(N.byteset(N.mask_of(b"abc"))),
                             N.concat(N.star(N.literal("a")), N.literal("bc"),
                                      N.star(N.byteset(N.mask_of(b"abc"))))),
    "epsilon": N.empty(),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_acceptance_equals_brute_force(name, tiny):
    nfa = FIXED[name]
    A = TokenAutomaton.from_byte_nfa(nfa, tiny, meta={"pattern": name})
    ref = Reference(nfa, tiny)
    assert _check_against_reference(A, ref, 4) == sum(12 ** k for k in range(5))
    _check_structure(A, tiny)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nfas)
def test_acceptance_equals_brute_force_random_nfas(case):
    nfa, _ = case
    vocab = _tiny()
    ref = Reference(nfa, vocab)
    if not ref.accepts(()) and not ref.viable(()):
        with pytest.raises(EmptyLanguageError):
            TokenAutomaton.from_byte_nfa(nfa, vocab)
        return
    A = TokenAutomaton.from_byte_nfa(nfa, vocab)
    _check_against_reference(A, ref, 3)
    _check_structure(A, vocab)


# ------------------------------------------------------------------- structure and views


def _dense(t: torch.Tensor) -> np.ndarray:
    return t.to_dense().numpy()


def _check_structure(A: TokenAutomaton, vocab: TokenVocabulary) -> None:
    """Def. 3.2 exactly, on a small automaton, rebuilt densely."""
    S, E, V = A.num_states, A.num_edges, A.vocab_size
    src, dst = A.edge_src.numpy(), A.edge_dst.numpy()
    assert V == vocab.size and A.fingerprint == vocab.fingerprint
    assert A.eos_token_ids == vocab.eos_token_ids
    assert A.edge_src.dtype == A.edge_dst.dtype == A.edge_label.dtype == torch.int64
    assert A.labels.dtype == torch.int32 and A.labels.shape == (A.num_labels, (V + 31) // 32)
    assert A.initial.dtype == A.final.dtype == torch.bool
    assert A.initial.tolist() == [True] + [False] * (S - 1)
    # one edge per (src, dst), sorted
    pairs = list(zip(src.tolist(), dst.tolist()))
    assert pairs == sorted(set(pairs))
    # trimmed: every state accessible from 0 and co-accessible to a final state
    fwd, bwd = {0}, set(np.nonzero(A.final.numpy())[0].tolist())
    for _ in range(S):
        fwd |= {d for s, d in pairs if s in fwd}
        bwd |= {s for s, d in pairs if d in bwd}
    assert fwd == bwd == set(range(S))
    # labels: deduplicated, non-empty, all used, never a text-less id, no bits past V
    rows = unpack_bits(A.labels, V).numpy()
    assert len({r.tobytes() for r in rows}) == A.num_labels
    assert rows.any(axis=1).all()
    assert sorted(set(A.edge_label.tolist())) == list(range(A.num_labels))
    assert not rows[:, ~vocab.text_token_mask].any()
    assert torch.equal(pack_bits(torch.from_numpy(rows)), A.labels)
    # T_out [S, E], T_in [E, S], B [E, V]
    T_out, T_in = _dense(A.T_out), _dense(A.T_in)
    assert T_out.shape == (S, E) and T_in.shape == (E, S)
    want_out = np.zeros((S, E))
    want_out[src, np.arange(E)] = 1
    want_in = np.zeros((E, S))
    want_in[np.arange(E), dst] = 1
    assert np.array_equal(T_out, want_out) and np.array_equal(T_in, want_in)
    B = A.B.dense().numpy()
    assert B.shape == (E, V) and A.B.shape == (E, V)
    assert np.array_equal(B, rows[A.edge_label.numpy()])
    assert A.B.row_sizes().tolist() == rows.sum(axis=1).tolist()
    # B[k, v] = 1 iff v moves src_k -> dst_k: the views' transition relation
    # M_v = T_out diag(B[:, v]) T_in equals step_states from every single state
    for v in range(V):
        M = (T_out * B[:, v]) @ T_in
        for s in range(S):
            one = np.zeros(S, dtype=bool)
            one[s] = True
            assert np.array_equal(A.step_states(one, v), M[s] > 0), (s, v)
    # edge HMM (Def. 4.2)
    H = A.edge_hmm()
    A_f = _dense(H.A_f)
    assert np.array_equal(A_f, T_in @ T_out)
    assert np.array_equal(A_f > 0, dst[:, None] == src[None, :])
    assert np.array_equal(H.initial.numpy(), A.initial.float().numpy()[src])
    assert np.array_equal(H.final.numpy(), A.final.float().numpy()[dst])
    assert np.array_equal(H.B_f.dense().numpy(), B)
    # memory
    mem = A.memory_bytes()
    assert mem["labels"] == A.labels.numel() * 4
    assert mem["total"] == mem["labels"] + mem["edges"] + mem["states"]
    assert A.B.memory_bytes() == A.labels.numel() * 4 + E * 8
    st = A.stats()
    assert (st["states"], st["edges"], st["label_sets"]) == (S, E, A.num_labels)


def test_label_sets_are_shared(tiny):
    # "a" and "b" steps from many states carry the same sets: fewer label rows than edges
    nfa = N.concat(*[N.byteset(N.mask_of(b"ab"))] * 6)
    A = TokenAutomaton.from_byte_nfa(nfa, tiny)
    assert A.num_labels < A.num_edges
    assert A.accepts([3, 3, 3]) and A.accepts([0, 7, 1, 0, 3])  # both ids for "a"
    assert not A.accepts([3, 3])


def test_dense_refuses_real_sizes(llama3_vocab):
    A = TokenAutomaton.from_byte_nfa(N.repeat(N.byte_range(0x30, 0x39), 1, 3), llama3_vocab)
    with pytest.raises(MemoryError):
        A.B.dense(max_elements=1000)
    assert A.memory_bytes()["labels"] < 64 * 1024  # packed, deduplicated


# ------------------------------------------------------------------- EOS and ids


def test_eos_semantics(tiny):
    A = TokenAutomaton.from_byte_nfa(N.star(N.literal("ab")), tiny)
    ab = [0, 1]
    assert A.accepts([]) and A.accepts([EOS]) and A.viable([EOS])
    assert A.accepts(ab) and A.accepts(ab + [EOS]) and A.accepts([3, EOS])
    assert A.viable([0]) and not A.accepts([0])
    assert not A.accepts([0, EOS]) and not A.viable([0, EOS])  # EOS only from accepting
    assert not A.accepts([3, EOS, 3]) and not A.viable([3, EOS, 3])  # EOS in the middle
    assert not A.accepts([3, EOS, EOS]) and not A.viable([EOS, EOS])
    assert not A.accepts([3, SPECIAL]) and not A.viable([SPECIAL])  # special id
    assert not A.viable([3, 99]) and not A.viable([-1])  # out of range
    assert not A.viable([2])  # "c" is dead


def test_several_eos_ids():
    v = TokenVocabulary.from_token_bytes(["a", None, None, "b"], eos_token_ids=[1, 2])
    A = TokenAutomaton.from_byte_nfa(N.literal("ab"), v)
    assert A.eos_token_ids == (1, 2)
    assert A.accepts([0, 3, 1]) and A.accepts([0, 3, 2])
    assert not A.accepts([0, 1, 3])


def test_empty_language_errors(tiny):
    with pytest.raises(EmptyLanguageError):
        TokenAutomaton.from_byte_nfa(N.nothing(), tiny)
    with pytest.raises(EmptyLanguageError):
        TokenAutomaton.from_byte_nfa(N.literal("abd"), tiny)  # no token spells "d"
    with pytest.raises(EmptyLanguageError, match="xyz"):
        TokenAutomaton.from_byte_nfa(N.literal("\n"), tiny, meta={"pattern": "xyz"})
    # only half of a character is spellable: the language is empty at token level
    v = TokenVocabulary.from_token_bytes([b"\xc3", "a"])
    with pytest.raises(EmptyLanguageError):
        TokenAutomaton.from_byte_nfa(N.literal("é"), v)
    # the empty string alone: one state, no edges
    A = TokenAutomaton.from_byte_nfa(N.empty(), tiny)
    assert (A.num_states, A.num_edges) == (1, 0)
    assert A.accepts([]) and A.accepts([EOS]) and not A.viable([0])


# ------------------------------------------------------------------- persistence and devices


def _same(a: TokenAutomaton, b: TokenAutomaton) -> None:
    for f in ("edge_src", "edge_dst", "edge_label", "labels", "initial", "final"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and torch.equal(x.cpu(), y.cpu()), f
    assert (a.num_states, a.vocab_size, a.fingerprint, a.eos_token_ids) == \
        (b.num_states, b.vocab_size, b.fingerprint, b.eos_token_ids)


def test_save_load_round_trip(tmp_path, tiny):
    nfa = FIXED["star"]
    A = TokenAutomaton.from_byte_nfa(nfa, tiny, meta={"pattern": "(ab|c)*"})
    p = tmp_path / "a.safetensors"
    A.save(p)
    B = TokenAutomaton.load(p, tiny)
    _same(A, B)
    assert B.meta["pattern"] == "(ab|c)*"
    ref = Reference(nfa, tiny)
    for seq in _sequences(ref.text_ids, 3):
        assert B.accepts(seq) == A.accepts(seq) and B.viable(seq) == A.viable(seq)
    # an equal vocabulary built anew loads it too
    TokenAutomaton.load(p, _tiny())
    assert p.read_bytes()[:8]  # a file was written


def test_load_against_another_vocabulary(tmp_path, tiny):
    A = TokenAutomaton.from_byte_nfa(N.literal("ab"), tiny)
    p = tmp_path / "a.safetensors"
    A.save(p)
    other = TokenVocabulary.from_token_bytes(TINY[:-1] + ["cd"], eos_token_ids=[EOS])
    with pytest.raises(VocabularyMismatchError, match="the token strings differ"):
        TokenAutomaton.load(p, other)
    other_eos = TokenVocabulary.from_token_bytes(TINY, eos_token_ids=[SPECIAL])
    with pytest.raises(VocabularyMismatchError, match=r"EOS ids \[\d+\] in the file"):
        TokenAutomaton.load(p, other_eos)
    bigger = TokenVocabulary.from_token_bytes(TINY + ["zz"], eos_token_ids=[EOS])
    with pytest.raises(VocabularyMismatchError, match="vocab_size"):
        TokenAutomaton.load(p, bigger)


def test_load_bad_files(tmp_path, tiny):
    from safetensors.torch import save_file

    A = TokenAutomaton.from_byte_nfa(N.literal("ab"), tiny)
    good = tmp_path / "good.safetensors"
    A.save(good)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00\x01not a safetensors file")
    with pytest.raises(AutomatonFormatError):
        TokenAutomaton.load(junk, tiny)
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[:-7])
    with pytest.raises(AutomatonFormatError):
        TokenAutomaton.load(cut, tiny)
    from tractable.fsa.errors import AutomatonFileNotFoundError, TractableError

    with pytest.raises(FileNotFoundError) as e:  # issue 23: a missing file is FileNotFoundError
        TokenAutomaton.load(tmp_path / "missing.safetensors", tiny)
    assert isinstance(e.value, AutomatonFileNotFoundError) and isinstance(e.value, TractableError)
    from safetensors import safe_open

    with safe_open(str(good), framework="pt") as f:
        header = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    other = tmp_path / "other.safetensors"
    save_file(tensors, str(other), metadata={**header, "format": "something-else"})
    with pytest.raises(AutomatonFormatError):
        TokenAutomaton.load(other, tiny)
    newer = tmp_path / "newer.safetensors"
    save_file(tensors, str(newer), metadata={**header, "version": str(FORMAT_VERSION + 1)})
    with pytest.raises(AutomatonFormatError, match="version"):
        TokenAutomaton.load(newer, tiny)
    plain = tmp_path / "plain.safetensors"
    save_file(tensors, str(plain))  # no header at all
    with pytest.raises(AutomatonFormatError):
        TokenAutomaton.load(plain, tiny)


def test_load_missing_tensor(tmp_path, tiny):
    from safetensors import safe_open
    from safetensors.torch import save_file

    A = TokenAutomaton.from_byte_nfa(N.literal("ab"), tiny)
    good = tmp_path / "good.safetensors"
    A.save(good)
    with safe_open(str(good), framework="pt") as f:
        header = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys() if k != "labels"}
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), metadata=header)
    with pytest.raises(AutomatonFormatError):
        TokenAutomaton.load(bad, tiny)


def test_to_device_copies(tiny):
    A = TokenAutomaton.from_byte_nfa(FIXED["repeat"], tiny)
    B = A.to("cpu")
    assert B is not A and B.device.type == "cpu"
    _same(A, B)
    assert B.accepts([0, 1, 2]) == A.accepts([0, 1, 2])
    if torch.cuda.is_available():
        C = A.to("cuda")
        assert C.device.type == "cuda" and C.edge_src.device.type == "cuda"
        _same(A, C)
        assert C.accepts([0, 1, 2]) == A.accepts([0, 1, 2])
        assert A.device.type == "cpu"  # the original is unchanged


# ------------------------------------------------------------------- a real vocabulary


def _price_nfa() -> tuple[N.ByteNFA, object]:
    """Digits, an optional decimal part, then a currency: built with the combinators, with a
    generator of matching strings."""
    digit = N.byte_range(0x30, 0x39)
    cjk = N.codepoints([(0x4E00, 0x4E0F)])
    emoji = N.codepoints([(0x1F600, 0x1F60F)])
    nfa = N.concat(
        N.plus(digit),
        N.optional(N.concat(N.literal("."), N.repeat(digit, 1, 2))),
        N.union(N.literal(" €"), N.literal(" USD"), N.concat(N.literal(" "), N.plus(cjk)),
                N.concat(N.literal(" "), emoji)),
    )

    def sample(rng: random.Random) -> str:
        s = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.5:
            s += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 2)))
        r = rng.random()
        if r < 0.25:
            return s + " €"
        if r < 0.5:
            return s + " USD"
        if r < 0.75:
            return s + " " + "".join(chr(rng.randint(0x4E00, 0x4E0F))
                                     for _ in range(rng.randint(1, 3)))
        return s + " " + chr(rng.randint(0x1F600, 0x1F60F))

    return nfa, sample


def _mutate(s: str, rng: random.Random) -> str:
    chars = list(s)
    k = rng.randrange(4)
    i = rng.randrange(len(chars) + 1)
    alphabet = "0123456789. €USDxé中😀"
    if k == 0 and chars:
        del chars[min(i, len(chars) - 1)]
    elif k == 1:
        chars.insert(i, rng.choice(alphabet))
    elif k == 2 and chars:
        chars[min(i, len(chars) - 1)] = rng.choice(alphabet)
    else:
        chars = chars[: max(0, i - 1)]
    return "".join(chars)


def test_llama3_random_segmentations(llama3_vocab, llama3_tokenizer):
    from tractable.testing.regex import random_segmentation

    nfa, sample = _price_nfa()
    A = TokenAutomaton.from_byte_nfa(nfa, llama3_vocab)
    _check_structure_light(A, llama3_vocab)
    rng = random.Random(2024)
    eos = llama3_vocab.eos_token_ids[0]
    n_pos = n_neg = 0
    for _ in range(150):
        good = sample(rng)
        for text in [good] + [_mutate(good, rng) for _ in range(2)]:
            data = text.encode("utf-8")
            want = N.matches(nfa, data)
            n_pos += want
            n_neg += not want
            segs = [llama3_tokenizer.encode(text, add_special_tokens=False).ids]
            segs += [random_segmentation(llama3_vocab, data, rng) for _ in range(3)]
            for ids in segs:
                assert llama3_vocab.decode_bytes(ids) == data
                assert A.accepts(ids) == want, (text, ids)
                assert A.accepts(ids + [eos]) == want
                # every prefix: Llama-3 spells any byte string, so token-level viability is
                # byte-level prefix matching
                for k in range(len(ids) + 1):
                    prefix = llama3_vocab.decode_bytes(ids[:k])
                    assert A.viable(ids[:k]) == N.matches(nfa, prefix, partial=True), (text, k)
    assert n_pos >= 150 and n_neg >= 100


def _check_structure_light(A: TokenAutomaton, vocab: TokenVocabulary) -> None:
    """The Def. 3.2 checks that stay cheap at V = 128256."""
    src, dst = A.edge_src.numpy(), A.edge_dst.numpy()
    pairs = list(zip(src.tolist(), dst.tolist()))
    assert pairs == sorted(set(pairs))
    rows = unpack_bits(A.labels, A.vocab_size).numpy()
    assert len({r.tobytes() for r in rows}) == A.num_labels
    assert not rows[:, ~vocab.text_token_mask].any()
    assert A.labels.shape[1] == (vocab.size + 31) // 32


def test_trim_states_matches_breadth_first_search():
    """The token-level trim (reachable from the start and reaching a final state) and its
    breadth-first order (by distance, ascending ids within one) equal a plain Python search on
    random graphs, with no, one or many final states."""
    from tractable.fsa.automaton import _trim_states

    rng = random.Random(3)
    for _ in range(300):
        S = rng.randint(1, 12)
        E = rng.randint(0, 30)
        src = np.array([rng.randrange(S) for _ in range(E)], dtype=np.int64)
        dst = np.array([rng.randrange(S) for _ in range(E)], dtype=np.int64)
        final = np.array([rng.random() < 0.25 for _ in range(S)], dtype=bool)
        start = rng.randrange(S)
        dist = {start: 0}
        layer = [start]
        while layer:
            nxt = sorted({int(d) for s in layer for s_, d in zip(src, dst) if s_ == s} - set(dist))
            for d in nxt:
                dist[d] = dist[layer[0]] + 1
            layer = nxt
        co = {int(q) for q in np.nonzero(final)[0]}
        grow = True
        while grow:
            new = {int(s) for s, d in zip(src, dst) if int(d) in co} - co
            grow = bool(new)
            co |= new
        keep = [q in dist and q in co for q in range(S)]
        order = sorted((q for q in range(S) if keep[q]), key=lambda q: (dist[q], q))
        got_keep, got_order = _trim_states(S, src, dst, final, start)
        assert got_keep.tolist() == keep
        assert got_order.tolist() == order


def _tampered(tmp_path, tiny, name, *, header=None, tensors=None, keep_checksum=True):
    """A copy of a good file with header fields / tensors replaced (the checksum kept from the
    good file unless ``keep_checksum`` is False: then dropped, as an old file has none)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    A = TokenAutomaton.from_byte_nfa(N.union(N.literal("ab"), N.literal("b")), tiny)
    good = tmp_path / "good.safetensors"
    A.save(good)
    with safe_open(str(good), framework="pt") as f:
        h = dict(f.metadata())
        t = {k: f.get_tensor(k) for k in f.keys()}
    h.update(header or {})
    if not keep_checksum:
        h.pop("checksum")
    for k, v in (tensors or {}).items():
        t[k] = v(t[k])
    out = tmp_path / name
    save_file(t, str(out), metadata=h)
    return out


@pytest.mark.parametrize("what,header,tensors,match", [
    ("version not a number", {"version": "one"}, None, "not a number"),
    ("bad header JSON", {"eos_token_ids": "[1,"}, None, "unreadable header"),
    ("eos out of range", {"eos_token_ids": "[99999]"}, None, "out of range"),
    ("float32 edge_src", None, {"edge_src": lambda x: x.float()}, "dtype"),
    ("edge_dst out of range", None, {"edge_dst": lambda x: x + 1000}, "edge_dst holds ids"),
    ("negative edge_label", None, {"edge_label": lambda x: x.index_fill(0, x.new_zeros(1), -5)},
     "edge_label holds ids"),
    ("2-D edge_src", None, {"edge_src": lambda x: x[None, :]}, "shapes"),
])
def test_load_refuses_tampered_files(tmp_path, tiny, what, header, tensors, match):
    """Issue 23: tampered files are refused at load, never at first use — by the checksum, and
    (for files without one, as saved before checksums existed) by the checks themselves."""
    signed = _tampered(tmp_path, tiny, "signed.safetensors", header=header, tensors=tensors)
    with pytest.raises(AutomatonFormatError, match="checksum|not a number|" + match):
        TokenAutomaton.load(signed, tiny)
    unsigned = _tampered(tmp_path, tiny, "unsigned.safetensors", header=header, tensors=tensors,
                         keep_checksum=False)
    with pytest.raises(AutomatonFormatError, match=match):
        TokenAutomaton.load(unsigned, tiny)


def test_load_accepts_its_own_files_and_old_ones(tmp_path, tiny):
    A = TokenAutomaton.from_byte_nfa(N.union(N.literal("ab"), N.literal("b")), tiny)
    A.save(tmp_path / "a.safetensors")
    B = TokenAutomaton.load(tmp_path / "a.safetensors", tiny)
    assert torch.equal(A.labels, B.labels) and torch.equal(A.edge_dst, B.edge_dst)
    old = _tampered(tmp_path, tiny, "old.safetensors", keep_checksum=False)  # no checksum
    C = TokenAutomaton.load(old, tiny)
    assert torch.equal(A.edge_label, C.edge_label)


# ------------------------------------------------------------------ compressed format (issue 21)


@pytest.fixture(scope="module")
def packed_file(gpt2_vocab, tmp_path_factory):
    """(automaton, path) of a gpt2-vocabulary regex whose label rows (6 KiB each) are saved
    zlib-compressed."""
    from tractable.fsa.regex import compile_regex

    A = compile_regex(r"[a-z]{2,5}(-[A-Z][0-9]{1,3}|\.[0-9a-f]{2}|_(on|off|x+))*;", gpt2_vocab)
    p = tmp_path_factory.mktemp("packed") / "a.safetensors"
    A.save(p)
    return A, p


def _parts(p):
    from safetensors import safe_open

    with safe_open(str(p), framework="pt") as f:
        return dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}


def test_save_compresses_large_tensors(packed_file, gpt2_vocab):
    """Issue 21: the label matrix is stored as ``labels.zlib`` (declared in header ``zlib``),
    the file is far smaller than the raw tensors, and load gives back identical tensors."""
    A, p = packed_file
    header, stored = _parts(p)
    # version 3 adds only the uniqueItems checker part: a plain automaton is still version 2
    assert header["version"] == str(PLAIN_VERSION) == "2" and FORMAT_VERSION == 3
    assert "labels.zlib" in stored and "labels" not in stored
    assert json.loads(header["zlib"])["labels"] == list(A.labels.shape)
    raw = sum(t.numel() * t.element_size() for t in (A.labels, A.edge_src, A.edge_dst))
    assert A.labels.numel() * 4 >= 64 << 10 and p.stat().st_size * 10 < raw
    B = TokenAutomaton.load(p, gpt2_vocab)
    for k in ("edge_src", "edge_dst", "edge_label", "labels", "initial", "final"):
        assert torch.equal(getattr(A, k), getattr(B, k)), k
    st = B.start(1)
    assert torch.equal(A.allowed_packed(A.start(1), 6), B.allowed_packed(st, 6))


def _rewrite(src, dst, header=None, tensors=None, drop=(), checksum="keep"):
    from safetensors.torch import save_file

    h, t = _parts(src)
    h.update(header or {})
    t.update(tensors or {})
    for k in drop:
        (h if k in h else t).pop(k)
    if checksum == "drop":
        h.pop("checksum", None)
    save_file(t, str(dst), metadata=h)
    return dst


def _flip(blob):
    b = blob.clone()
    b[b.numel() // 2] ^= 0x5A
    return b


@pytest.mark.parametrize("what,edit,match", [
    ("corrupt blob", lambda h, t: ({}, {"labels.zlib": _flip(t["labels.zlib"])}, ()),
     "corrupt|checksum|exactly"),
    ("truncated blob", lambda h, t: ({}, {"labels.zlib": t["labels.zlib"][:-9].clone()}, ()),
     "exactly|corrupt"),
    ("longer shape", lambda h, t: ({"zlib": json.dumps({"labels": [
        json.loads(h["zlib"])["labels"][0] + 1, json.loads(h["zlib"])["labels"][1]]})}, {}, ()),
     "exactly"),
    ("huge shape", lambda h, t: ({"zlib": json.dumps({"labels": [10**12, 1571]})}, {}, ()),
     "more than"),
    ("rank", lambda h, t: ({"zlib": json.dumps({"labels": [5]})}, {}, ()), "bad shape"),
    ("bad JSON", lambda h, t: ({"zlib": "{"}, {}, ()), "unreadable header field 'zlib'"),
    ("no header field", lambda h, t: ({}, {}, ("zlib",)), "without a 'zlib'"),
    ("undeclared name", lambda h, t: ({"zlib": json.dumps({"labels": [1, 1],
                                                           "final": [3]})}, {}, ()),
     "does not name"),
    ("raw and compressed", lambda h, t: ({}, {"labels": torch.zeros((1, 1571), dtype=torch.int32)},
                                         ()), "not expected here"),
    ("blob dtype", lambda h, t: ({}, {"labels.zlib": t["labels.zlib"].to(torch.int32)}, ()),
     "not a uint8 vector"),
    ("version 1", lambda h, t: ({"version": "1"}, {}, ()), "version 1 file"),
])
@pytest.mark.parametrize("checksum", ["keep", "drop"])
def test_load_refuses_bad_compressed_tensors(packed_file, gpt2_vocab, tmp_path, what, edit,
                                            match, checksum):
    """Every malformed ``.zlib`` tensor or ``zlib`` header field is refused with an
    AutomatonFormatError naming it, with or without a checksum, before any large allocation."""
    _, p = packed_file
    h, t = _parts(p)
    hdr, tens, drop = edit(h, t)
    bad = _rewrite(p, tmp_path / "bad.safetensors", hdr, tens, drop, checksum)
    with pytest.raises(AutomatonFormatError, match=match):
        TokenAutomaton.load(bad, gpt2_vocab)


def test_load_reads_version_1_files(packed_file, gpt2_vocab, tmp_path):
    """A version 1 file (every tensor raw, as saved before issue 21) still loads, checksum
    included; version 0 and 3 are refused."""
    from safetensors.torch import save_file
    from tractable.fsa.automaton import _checksum

    A, _ = packed_file
    tensors = {"edge_src": A.edge_src, "edge_dst": A.edge_dst, "edge_label": A.edge_label,
               "labels": A.labels, "initial": A.initial.to(torch.uint8),
               "final": A.final.to(torch.uint8)}
    h, _ = _parts(packed_file[1])
    h.pop("zlib")
    for version, ok in (("1", True), ("0", False), (str(FORMAT_VERSION + 1), False)):
        h["version"] = version
        h.pop("checksum", None)
        h["checksum"] = _checksum(tensors, h)
        f = tmp_path / f"v{version}.safetensors"
        save_file(tensors, str(f), metadata=h)
        if ok:
            B = TokenAutomaton.load(f, gpt2_vocab)
            assert torch.equal(B.labels, A.labels) and torch.equal(B.edge_dst, A.edge_dst)
        else:
            with pytest.raises(AutomatonFormatError, match="version"):
                TokenAutomaton.load(f, gpt2_vocab)


@pytest.mark.parametrize("chunk", [256, 1, 3, 7])
def test_or_groups_is_reduceat(chunk, monkeypatch):
    """The shared-row ORs of _merge_rows, gathered a few rows at a time, equal one reduceat."""
    import tractable.fsa.token_rows as TR

    monkeypatch.setattr(TR, "_OR_CHUNK_ROWS", chunk)
    rng = np.random.default_rng(chunk)
    for _ in range(100):
        L, W, G = (int(x) for x in rng.integers(1, [40, 9, 30]))
        rows = rng.integers(0, 2**32, size=(L, W), dtype=np.uint64).astype(np.uint32)
        cnt = rng.integers(1, 8, G)
        ref = rng.integers(0, L, int(cnt.sum()))
        starts = np.cumsum(cnt) - cnt
        want = np.bitwise_or.reduceat(rows[ref], starts, axis=0)
        np.testing.assert_array_equal(TR._or_groups(rows, ref, starts), want)
