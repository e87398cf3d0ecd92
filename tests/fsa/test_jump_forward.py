"""Jump-forward (fsa/jump_forward.py): forced continuations against brute-force enumeration on
small automata, forced tokens (canonical encoding, budget, fallback), real tokenizers with a
JSON Schema, and the generate loop: outputs valid, model calls saved."""

from __future__ import annotations

import pytest
import torch
from tractable.fsa.jump_forward import JumpForward, forced_bytes, forced_tokens
from tractable.fsa.regex import compile_regex
from tractable.fsa.vocabulary import TokenVocabulary

TOKS = ["a", "b", "c", "ab", "abc", "bc", "x", "{", "}", '"', '{"', '":', None]  # 12: EOS
PATTERNS = [r"abc(x|bc)", r'\{"(ab|abc)":(a|b)\}', r"(ab)+c", r"a?bc", r"x(abc|abx)c?"]


def _vocab():
    return TokenVocabulary.from_token_bytes(TOKS, eos_token_ids=[12])


def _lcp(strings):
    out = strings[0]
    for s in strings[1:]:
        i = 0
        while i < min(len(out), len(s)) and out[i] == s[i]:
            i += 1
        out = out[:i]
    return out


def _language_from(A, vocab, st, depth):
    """Byte strings of every accepted continuation from ``st`` (finite languages)."""
    out = []
    stack = [(st, b"", 0)]
    while stack:
        s, acc, d = stack.pop()
        if bool(s.is_accepting()[0]):
            out.append(acc)
        if d == depth:
            continue
        for t in range(len(TOKS) - 1):
            n = A.advance(s, torch.tensor([t]))
            if not bool(n.is_dead()[0]):
                stack.append((n, acc + vocab.token_bytes[t], d + 1))
    return out


@pytest.mark.parametrize("pattern", PATTERNS[:2] + PATTERNS[3:])
def test_forced_bytes_brute_force(pattern):
    vocab = _vocab()
    A = compile_regex(pattern, vocab)
    jf = JumpForward(A, vocab)
    seen = 0
    stack = [A.start()]
    visited = set()
    while stack:
        st = stack.pop()
        key = st.active.numpy().tobytes()
        if key in visited:
            continue
        visited.add(key)
        lang = _language_from(A, vocab, st, 12)
        assert lang
        assert jf.bytes(st) == [_lcp(lang)], (pattern, lang)
        seen += 1
        for t in range(len(TOKS) - 1):
            n = A.advance(st, torch.tensor([t]))
            if not bool(n.is_dead()[0]):
                stack.append(n)
    assert seen >= 4


def test_forced_bytes_loops_are_prefixes():
    # (ab)+c: a loop; the true forced text from the start is "ab"; the loop guard may
    # only shorten it, never make it wrong
    vocab = _vocab()
    A = compile_regex(PATTERNS[2], vocab)
    got = forced_bytes(A, vocab, A.start())[0]
    assert b"ab".startswith(got) and got == b"ab"
    st = A.advance(A.start(), torch.tensor([3]))  # "ab": then "ab" again or "c"
    assert forced_bytes(A, vocab, st) == [b""]


def _greedy(vocab):
    texts = {b: i for i, b in enumerate(vocab.token_bytes) if b}

    def enc(s: str) -> list[int]:
        data, out, i = s.encode(), [], 0
        while i < len(data):
            for j in range(len(data), i, -1):
                if data[i:j] in texts:
                    out.append(texts[data[i:j]])
                    i = j
                    break
            else:
                raise AssertionError(data[i:])
        return out
    return enc


def test_forced_tokens_canonical_budget_and_fallback():
    vocab = _vocab()
    A = compile_regex(r'\{"(abcx)":(a|b)\}', vocab)
    enc = _greedy(vocab)
    # forced '{"abcx":' -> greedy ['{"', 'abc', 'x', '":']; the last is dropped (it could merge)
    toks = forced_tokens(A, vocab, A.start(), enc, 20)
    assert toks == [10, 4, 6]
    # a longer spelling: all of it with room, only the prefix that still fits the budget at 8
    # (after '{', '"', 'a' the rest needs 'bc', 'x', '":', 'a', '}': 5 tokens, 5 left)
    long = lambda s: [7, 9, 0, 1, 2, 6, 11]  # noqa: E731
    assert forced_tokens(A, vocab, A.start(), long, 20) == [7, 9, 0, 1, 2, 6]
    assert forced_tokens(A, vocab, A.start(), long, 8) == [7, 9, 0]
    assert forced_tokens(A, vocab, A.start(), enc, 5) == []  # below the minimum (6)
    # an encoding that does not spell the forced bytes forces nothing
    assert forced_tokens(A, vocab, A.start(), lambda s: [7, 9, 0, 1, 2, 6, 9, 11], 20) == []
    assert forced_tokens(A, vocab, A.start(), lambda s: [0], 20) == []
    # at the end: '}' is forced and nothing follows, so it is kept
    st = A.start()
    for t in [10, 4, 6, 11, 0]:
        st = A.advance(st, torch.tensor([t]))
    assert forced_tokens(A, vocab, st, enc, 3) == [8]


def test_json_schema_forced_on_real_tokenizer(qwen3_vocab, qwen3_tokenizer):
    from tractable.fsa.json_schema import compile_json_schema

    schema = {"type": "object", "properties": {
        "name": {"const": "get_weather"},
        "arguments": {"type": "object", "properties": {"city": {"type": "string"},
                                                      "unit": {"enum": ["celsius", "kelvin"]}},
                      "required": ["city", "unit"], "additionalProperties": False}},
        "required": ["name", "arguments"], "additionalProperties": False}
    A = compile_json_schema(schema, qwen3_vocab)
    enc = lambda s: qwen3_tokenizer.encode(s, add_special_tokens=False).ids  # noqa: E731
    jf = JumpForward(A, qwen3_vocab, enc)
    assert jf.bytes(A.start()) == [b'{"name":"get_weather","arguments":{"city":"']
    toks = jf.tokens(A.start(), 40)
    text = qwen3_vocab.decode_bytes(toks)
    assert b'{"name":"get_weather","arguments":{"city":"'.startswith(text) and len(toks) >= 8
    st = A.start()
    for t in enc('{"name":"get_weather","arguments":{"city":"Paris","unit":"'):
        st = A.advance(st, torch.tensor([t]))
    assert jf.bytes(st) == [b""]  # celsius | kelvin
    st = A.advance(st, torch.tensor([enc("k")[0]]))
    assert jf.bytes(st) == [b'elvin"}}']
    assert qwen3_vocab.decode_bytes(jf.tokens(st, 10)) == b'elvin"}}'  # the end: all kept


def test_structural_tag_forced_after_trigger(qwen3_vocab):
    from tractable.fsa.structural_tag import compile_structural_tag

    tags = [{"begin": f'<tool_call>\n{{"name": "{n}", "arguments": ',
             "content": {"type": "json_schema", "json_schema": {"enum": [1, 2]}},
             "end": "}\n</tool_call>"} for n in ("get_weather", "get_time")]
    A = compile_structural_tag({"type": "triggered_tags", "triggers": ["<tool_call>"],
                                "tags": tags}, qwen3_vocab)
    jf = JumpForward(A, qwen3_vocab)
    assert jf.bytes(A.start()) == [b""]  # free text: nothing forced
    st = A.advance(A.start(), torch.tensor([151657]))  # the <tool_call> token
    assert jf.bytes(st) == [b'\n{"name": "get_']
