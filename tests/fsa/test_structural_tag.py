"""Structural tags (fsa/structural_tag.py): byte languages against an independent reference
matcher on random texts, token automata against brute-force enumeration over a tiny vocabulary
with a special token, real tokenizers (Qwen3's text-token triggers, Llama-3's special-token
triggers), and GCD walks at the tightest budget."""

from __future__ import annotations

import json
import random
import re
import zlib
from functools import cache

import numpy as np
import pytest
import torch
from tractable.fsa import nfa as N
from tractable.fsa.errors import InvalidArgumentError
from tractable.fsa.structural_tag import (
    compile_reasoning_then_schema,
    compile_structural_tag,
    reasoning_then_format,
    special_tokens_of,
    structural_tag_to_nfa,
)
from tractable.fsa.vocabulary import TokenVocabulary

SP0 = chr(0xF0000)  # special tokens in reference strings: private-use characters
SP1 = chr(0xF0001)
SPECIAL = {"<S>": SP0, "<E>": SP1}
DIGIT = {"type": "integer", "minimum": 0, "maximum": 12}
ENUM = {"enum": ["ab", "b<"]}


# ---------------------------------------------------------------- reference matcher


def _special(c: str) -> bool:
    return ord(c) >= 0xF0000


def _clean(t: str) -> bool:
    return not any(map(_special, t))


def _json_ok(text: str, schema: dict) -> bool:
    return _json_ok_cached(text, json.dumps(schema, sort_keys=True))


@cache
def _json_ok_cached(text: str, schema_key: str) -> bool:
    import jsonschema

    schema = json.loads(schema_key)
    try:
        v = json.loads(text)
    except ValueError:
        return False
    if json.dumps(v, separators=(",", ":"), ensure_ascii=False) != text:
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(v)


def ref_accepts(fmt: dict, s: str) -> bool:
    """Whether ``s`` (special tokens as private-use characters) is in the language of ``fmt``
    (the module docstring's semantics, written directly on strings)."""

    @cache
    def ends_k(key: str, i: int) -> frozenset:
        return frozenset(ends(json.loads(key), i))

    def E(f, i):
        return ends_k(json.dumps(f, sort_keys=True), i)

    def lazy(p, end, excl):
        excl = [x for x in excl if _clean(x)]
        if not end or not _clean(end):
            return {j + len(end) for j in range(p, len(s) + 1) if _clean(s[p:j])
                    and not any(x in s[p:j] for x in excl) and s.startswith(end, j)}
        for e in range(p + 1, len(s) + 1):
            if _special(s[e - 1]):
                return set()
            occ = [x for x in excl + [end] if e - len(x) >= p and s[e - len(x):e] == x]
            if occ:
                return {e} if end in occ else set()
        return set()

    def tag_ends(f, i):
        if not s.startswith(f["begin"], i):
            return set()
        p = i + len(f["begin"])
        c = f["content"]
        if c["type"] == "any_text":
            return lazy(p, f["end"], list(c.get("excluded_str", [])))
        return {j + len(f["end"]) for j in E(c, p) if s.startswith(f["end"], j)}

    def triggered(f, i):
        trig, tags = f["triggers"], f["tags"]
        first, stop = f.get("at_least_one", False), f.get("stop_after_first", False)
        res: set[int] = set()
        seen: set[int] = set()

        def after(k):
            if stop:
                res.add(k)
            else:
                root(k)

        def root(i0):
            if i0 in seen:
                return
            seen.add(i0)
            j = i0
            while True:
                res.add(j)
                for tg in tags:
                    if _special(tg["begin"][0]):
                        for k in tag_ends(tg, j):
                            after(k)
                if j == len(s) or _special(s[j]):
                    return
                j += 1
                occ = [t for t in trig if _clean(t) and j - len(t) >= i0 and s[j - len(t):j] == t]
                if occ:
                    for t in occ:
                        for tg in tags:
                            if tg["begin"].startswith(t):
                                for k in tag_ends(tg, j - len(t)):
                                    after(k)
                    return

        if first:
            for tg in tags:
                for k in tag_ends(tg, i):
                    after(k)
        else:
            root(i)
        return res

    def with_sep(f, i):
        res = set() if f.get("at_least_one") else {i}
        todo, seen = [i], set()
        while todo:
            p = todo.pop()
            for tg in f["tags"]:
                for k in tag_ends(tg, p):
                    res.add(k)
                    if not f.get("stop_after_first") and s.startswith(f["separator"], k):
                        q = k + len(f["separator"])
                        if q not in seen:
                            seen.add(q)
                            todo.append(q)
        return res

    def ends(f, i):
        t = f["type"]
        if t == "const_string":
            return {i + len(f["value"])} if s.startswith(f["value"], i) else set()
        if t == "regex":
            return {j for j in range(i, len(s) + 1)
                    if _clean(s[i:j]) and re.fullmatch(f["pattern"], s[i:j])}
        if t == "json_schema":
            return {j for j in range(i, len(s) + 1)
                    if _clean(s[i:j]) and _json_ok(s[i:j], f["json_schema"])}
        if t == "any_text":
            ex = [x for x in f.get("excluded_str", []) if _clean(x)]
            return {j for j in range(i, len(s) + 1)
                    if _clean(s[i:j]) and not any(x in s[i:j] for x in ex)}
        if t == "sequence":
            cur = {i}
            for el in f["elements"]:
                cur = {k for j in cur for k in E(el, j)}
            return cur
        if t == "or":
            return {k for el in f["elements"] for k in E(el, i)}
        if t == "tag":
            return tag_ends(f, i)
        if t == "triggered_tags":
            return triggered(f, i)
        if t == "tags_with_separator":
            return with_sep(f, i)
        raise AssertionError(t)

    return len(s) in E(fmt, 0)


def _to_ref(x):
    """The spec with special token names replaced by their reference characters."""
    if isinstance(x, str):
        for name, c in SPECIAL.items():
            x = x.replace(name, c)
        return x
    if isinstance(x, list):
        return [_to_ref(v) for v in x]
    if isinstance(x, dict):
        return {k: (v if k in ("json_schema", "pattern") else _to_ref(v)) for k, v in x.items()}
    return x


def _to_bytes(s: str, sent: dict[int, bytes], ids: dict[str, int]) -> bytes:
    out = s
    for name, c in SPECIAL.items():
        if name in ids:
            out = out.replace(c, f"\0SENT{ids[name]}\0")
    data = out.encode("utf-8")
    for tid, b in sent.items():
        data = data.replace(b"\0SENT%d\0" % tid, b)
    for tid in ids.values():  # a special token the spec does not use: never accepted
        data = data.replace(b"\0SENT%d\0" % tid, b"\xff\xff")
    return data


# ---------------------------------------------------------------- specs

SPECS = {
    "trigger_json": {"type": "triggered_tags", "triggers": ["<f"], "tags": [
        {"begin": "<f=a>", "content": {"type": "json_schema", "json_schema": DIGIT},
         "end": "</f>"},
        {"begin": "<fb>", "content": {"type": "json_schema", "json_schema": ENUM},
         "end": "</f>"}]},
    "overlap_triggers": {"type": "triggered_tags", "triggers": ["aa", "ba"], "tags": [
        {"begin": "aa", "content": {"type": "regex", "pattern": "[0-9]"}, "end": "."},
        {"begin": "bab", "content": {"type": "const_string", "value": "1"}, "end": ""}]},
    "first_stop": {"type": "triggered_tags", "triggers": ["<f"], "at_least_one": True,
                   "stop_after_first": True, "tags": [
                       {"begin": "<f>", "content": {"type": "json_schema", "json_schema": DIGIT},
                        "end": "</f>"}]},
    "at_least_one": {"type": "triggered_tags", "triggers": ["<"], "at_least_one": True,
                     "tags": [{"begin": "<a>", "content": {"type": "any_text"}, "end": "</a>"}]},
    "think_json": reasoning_then_format({"type": "json_schema", "json_schema": ENUM},
                                        begin="<t>", end="</t>", separator=r"\n?")["format"],
    "lazy_end_border": {"type": "tag", "begin": "<", "content": {
        "type": "any_text", "excluded_str": ["x", "ba"]}, "end": "aba"},
    "separator": {"type": "tags_with_separator", "separator": ",", "tags": [
        {"begin": "a", "content": {"type": "regex", "pattern": "[0-9]+"}, "end": ";"},
        {"begin": "b", "content": {"type": "any_text"}, "end": ";"}]},
    "special_trigger": {"type": "triggered_tags", "triggers": ["<S>", "<f"], "tags": [
        {"begin": "<S>x", "content": {"type": "json_schema", "json_schema": DIGIT},
         "end": "<E>"},
        {"begin": "<f>", "content": {"type": "any_text"}, "end": "<E>"}]},
    "sequence_or": {"type": "sequence", "elements": [
        {"type": "or", "elements": [{"type": "const_string", "value": "<S>"},
                                    {"type": "any_text", "excluded_str": ["b"]}]},
        {"type": "const_string", "value": "!"}]},
}


def _pieces(fmt) -> list[str]:
    """Literal pieces of a spec, for random texts that hit its triggers and tags."""
    out: list[str] = []
    if isinstance(fmt, dict):
        for k, v in fmt.items():
            if k in ("value", "begin", "end", "separator") and isinstance(v, str):
                out.append(v)
            elif k in ("triggers", "excluded_str"):
                out.extend(v)
            elif k == "json_schema":
                out.extend(["7", "12", "13", '"ab"', '"b<"', "1"])
            else:
                out.extend(_pieces(v))
    elif isinstance(fmt, list):
        for v in fmt:
            out.extend(_pieces(v))
    return out


def _sample(f, rng: random.Random) -> str:
    """A random string built along ``f`` (a reference spec): mostly in its language (the
    reference decides; ``_random_texts`` mixes these with random texts)."""
    t = f["type"]
    if t == "const_string":
        return f["value"]
    if t == "regex":
        return rng.choice(["", "7", "12", "a", "\n"])
    if t == "json_schema":
        return json.dumps(rng.choice([0, 7, 12, 13, "ab", "b<"]), ensure_ascii=False)
    if t == "any_text":
        return "".join(rng.choice("ab<>x/é") for _ in range(rng.randint(0, 3)))
    if t == "sequence":
        return "".join(_sample(e, rng) for e in f["elements"])
    if t == "or":
        return _sample(rng.choice(f["elements"]), rng)
    if t == "tag":
        return f["begin"] + _sample(f["content"], rng) + f["end"]
    free = {"type": "any_text"}
    if t == "triggered_tags":
        n = rng.randint(1 if f.get("at_least_one") else 0, 1 if f.get("stop_after_first") else 2)
        parts = [("" if f.get("at_least_one") and i == 0 else _sample(free, rng))
                 + _sample(dict(rng.choice(f["tags"]), type="tag"), rng) for i in range(n)]
        return "".join(parts) + _sample(free, rng)
    if t == "tags_with_separator":
        n = rng.randint(0, 1 if f.get("stop_after_first") else 3)
        return f["separator"].join(_sample(dict(rng.choice(f["tags"]), type="tag"), rng)
                                   for _ in range(n))
    raise AssertionError(t)


def _random_texts(fmt, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    ref = _to_ref(fmt)
    pieces = [p for p in _pieces(ref) if p] + list("ab<>/f=x.;,!\n0") + [SP0, SP1, "é"]
    out = [""]
    for _ in range(n // 2):
        k = rng.randint(1, 6)
        out.append("".join(rng.choice(pieces) for _ in range(k)))
        out.append(_sample(ref, rng))
    return out


# ---------------------------------------------------------------- byte level


@pytest.mark.parametrize("name", sorted(SPECS))
def test_byte_language_matches_reference(name):
    fmt = SPECS[name]
    ids = {"<S>": 5, "<E>": 6}
    nfa, sent = structural_tag_to_nfa({"type": "structural_tag", "format": fmt},
                                      special_tokens=ids)
    ref_fmt = _to_ref(fmt)
    texts = _random_texts(fmt, 1500, seed=zlib.crc32(name.encode()))
    agree = pos = 0
    for t in texts:
        want = ref_accepts(ref_fmt, t)
        got = N.matches(nfa, _to_bytes(t, sent, ids))
        assert got == want, (name, t, want)
        agree += 1
        pos += want
    # the random texts exercise both sides
    assert pos >= 10 and agree - pos >= 10, (name, pos)


def test_byte_language_examples():
    nfa, _ = structural_tag_to_nfa({"type": "structural_tag", "format": SPECS["trigger_json"]})
    ok = ["", "hi", "x<f=a>7</f>y<fb>\"b<\"</f>", "<", "a <f=a>12</f>"]
    bad = ["<f", "<f=a>13</f>", "<f=a>7</f", "<fx", "<f=a>07</f>"]
    assert all(N.matches(nfa, t.encode()) for t in ok)
    assert not any(N.matches(nfa, t.encode()) for t in bad)
    # the lazy end: the content stops at the first "aba"; "ba" (excluded) may end with it
    nfa, _ = structural_tag_to_nfa(SPECS["lazy_end_border"])
    assert all(N.matches(nfa, t) for t in (b"<aba", b"<aaba", b"<ab.aba"))
    assert not any(N.matches(nfa, t) for t in (b"<baaba", b"<abaaba", b"<xaba", b"<ab"))


def test_grammar_content_under_approximation():
    spec = {"type": "tag", "begin": "<g>", "end": "</g>",
            "content": {"type": "grammar", "grammar": 'start: "(" start ")" | "x"'}}
    with pytest.warns(UserWarning, match="approximated from below"):
        nfa, _ = structural_tag_to_nfa(spec)
    assert N.matches(nfa, b"<g>x</g>") and N.matches(nfa, b"<g>((x))</g>")
    assert not N.matches(nfa, b"<g>((x)</g>") and not N.matches(nfa, b"<g></g>")


def test_xgrammar_legacy_form_and_errors():
    legacy = {"type": "structural_tag", "triggers": ["<f"],
              "structures": [{"begin": "<f=a>", "schema": DIGIT, "end": "</f>"}]}
    nfa, _ = structural_tag_to_nfa(legacy)
    assert N.matches(nfa, b"so <f=a>3</f>") and not N.matches(nfa, b"<f=a>x</f>")
    with pytest.raises(InvalidArgumentError, match="start with exactly one trigger"):
        structural_tag_to_nfa({"type": "triggered_tags", "triggers": ["<g"],
                               "tags": [{"begin": "<f>", "content": {"type": "any_text"},
                                         "end": "</f>"}]})
    with pytest.raises(InvalidArgumentError, match="no tag begins with"):
        structural_tag_to_nfa({"type": "triggered_tags", "triggers": ["<f", "<g"],
                               "tags": [{"begin": "<f>", "content": {"type": "any_text"},
                                         "end": "</f>"}]})
    with pytest.raises(InvalidArgumentError, match="unknown format type"):
        structural_tag_to_nfa({"type": "sequence", "elements": [{"type": "nope"}]})
    with pytest.raises(InvalidArgumentError, match=r"#/elements/0.*missing 'value'"):
        structural_tag_to_nfa({"type": "sequence", "elements": [{"type": "const_string"}]})


# ---------------------------------------------------------------- token level, brute force


def _tiny_vocab():
    toks = list("ab<>/f=x71") + ["<f", "=a>", "</f>", "1</", "b<", None, None]
    # ids 15, 16: special tokens <S>, <E> (no text); 17: EOS
    return TokenVocabulary.from_token_bytes(toks + [None], eos_token_ids=[17]), {"<S>": 15,
                                                                                  "<E>": 16}


@pytest.mark.parametrize("name", ["trigger_json", "special_trigger", "first_stop"])
def test_token_automaton_brute_force(name):
    vocab, ids = _tiny_vocab()
    fmt = SPECS[name]
    A = compile_structural_tag({"type": "structural_tag", "format": fmt}, vocab,
                               special_tokens=ids)
    assert A.fingerprint == vocab.fingerprint
    ref_fmt = _to_ref(fmt)
    rev = {v: SPECIAL[k] for k, v in ids.items()}
    text_ids = [i for i in range(vocab.size) if vocab.token_bytes[i] is not None or i in rev]
    n_acc = n_seen = 0
    starters = {10, 2} | set(rev)  # "<f", "<", the special tokens
    st0 = A.start()
    stack = [((), st0)]
    max_len = {"first_stop": 5, "trigger_json": 4, "special_trigger": 4}[name]
    while stack:
        seq, st = stack.pop()
        s = "".join(rev[t] if t in rev else vocab.token_bytes[t].decode("utf-8", "replace")
                    for t in seq)
        utf8 = all(t in rev or True for t in seq)
        raw = b"".join(vocab.token_bytes[t] for t in seq if t not in rev)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            utf8 = False
        want = utf8 and ref_accepts(ref_fmt, s)
        dead = bool(st.is_dead()[0])
        got = (not dead) and bool(st.is_accepting()[0])
        assert got == want, (name, seq, s)
        n_seen += 1
        if want or n_seen % 7 == 0:  # the whole-sequence path too (a sample: it is slow)
            assert A.accepts(list(seq)) == want
        n_acc += want
        if dead or len(seq) == max_len:
            continue
        if len(seq) >= 3 and not any(t in starters for t in seq):
            continue  # past length 3, only prefixes that may have entered a tag
        nxt = A.advance(st.select([0] * len(text_ids)), torch.tensor(text_ids))
        for k, t in enumerate(text_ids):
            stack.append((seq + (t,), nxt.select([k])))
    assert n_acc >= 5 and n_seen > 200


def test_special_tokens_in_masks():
    vocab, ids = _tiny_vocab()
    A = compile_structural_tag(SPECS["special_trigger"], vocab, special_tokens=ids)
    m = A.allowed(A.start(), 10)[0]
    assert m[15] and not m[16] and m[17]  # <S> may start a tag, <E> only ends one, EOS
    st = A.advance(A.start(), torch.tensor([15]))
    m = A.allowed(st, 10)[0]
    assert m.nonzero().flatten().tolist() == [7]  # "x" after <S>
    # an id that emits text is no special token; an EOS id is refused
    B = compile_structural_tag(SPECS["special_trigger"], vocab, special_tokens={"<S>": 2,
                                                                                "<E>": 16})
    assert B.meta["special_tokens"] == [16]
    with pytest.raises(InvalidArgumentError, match="EOS"):
        compile_structural_tag(SPECS["special_trigger"], vocab, special_tokens={"<S>": 17,
                                                                                "<E>": 16})


def test_gcd_walks_tiny_every_budget():
    vocab, ids = _tiny_vocab()
    A = compile_structural_tag(SPECS["first_stop"], vocab, special_tokens=ids)
    m = A.min_tokens_to_accept()
    assert m == 4  # "<f", ">", "7", "</f>"
    rng = np.random.default_rng(0)
    for budget in range(m, m + 4):
        for _ in range(40):
            st, seq = A.start(), []
            for r in range(budget, 0, -1):
                allowed = A.allowed(st, r)[0].nonzero().flatten().tolist()
                assert allowed, (budget, seq)
                t = int(rng.choice(allowed))
                seq.append(t)
                if t in vocab.eos_token_ids:
                    break
                st = A.advance(st, torch.tensor([t]))
            assert A.accepts(seq), (budget, seq)


# ---------------------------------------------------------------- real tokenizers

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["C", "F"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 10}},
        "required": ["tz"], "additionalProperties": False}


def _qwen_tool_spec(at_least_one=False):
    tags = [{"begin": f'<tool_call>\n{{"name": "{n}", "arguments": ',
             "content": {"type": "json_schema", "json_schema": s}, "end": "}\n</tool_call>"}
            for n, s in (("get_weather", WEATHER), ("get_time", TIME))]
    return {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<tool_call>"], "tags": tags,
        "at_least_one": at_least_one}}


@pytest.fixture(scope="module")
def qwen_tool(qwen3_vocab):
    return compile_structural_tag(_qwen_tool_spec(), qwen3_vocab)


def test_qwen3_tool_call_text_trigger(qwen_tool, qwen3_vocab, qwen3_tokenizer):
    A = qwen_tool
    call = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city":"Paris","unit":"C"}}\n</tool_call>\nDone.')
    ids = qwen3_tokenizer.encode(call, add_special_tokens=False).ids
    assert 151657 in ids  # the tokenizer writes <tool_call> as its one added token
    assert A.accepts(ids)
    bad = call.replace("get_weather", "get_wether")
    assert not A.accepts(qwen3_tokenizer.encode(bad, add_special_tokens=False).ids)
    assert not A.accepts(qwen3_tokenizer.encode(call.replace('"C"', '"K"'),
                                                add_special_tokens=False).ids)
    # the single <tool_call> token is allowed in free text, and after it no free text
    m = A.allowed(A.start(), 200)[0]
    assert m[151657] and m[qwen3_tokenizer.token_to_id("Hello")]
    st = A.advance(A.start(), torch.tensor([151657]))
    m = A.allowed(st, 200)[0]
    assert not m[qwen3_tokenizer.token_to_id("Hello")] and int(m.sum()) < 10
    # free text may mention tool calls without the trigger
    assert A.accepts(qwen3_tokenizer.encode("no <tool call here", add_special_tokens=False).ids)


def test_qwen3_gcd_walks_tight_budget(qwen3_vocab):
    A = compile_structural_tag(_qwen_tool_spec(at_least_one=True), qwen3_vocab)
    m = A.min_tokens_to_accept()
    assert m > 10
    rng = np.random.default_rng(1)
    eos = set(qwen3_vocab.eos_token_ids)
    for budget in (m, m + 3):
        for _ in range(4):
            st, seq = A.start(), []
            for r in range(budget, 0, -1):
                allowed = A.allowed(st, r)[0].nonzero().flatten().numpy()
                assert allowed.size
                t = int(rng.choice(allowed))
                seq.append(t)
                if t in eos:
                    break
                st = A.advance(st, torch.tensor([t]))
            assert A.accepts(seq)
            text = qwen3_vocab.decode_bytes(seq).decode()
            assert text.startswith("<tool_call>\n") and text.endswith("}\n</tool_call>")
            body = json.loads(text[len("<tool_call>\n"):-len("\n</tool_call>")])
            assert body["name"] in ("get_weather", "get_time")


def test_qwen3_reasoning_then_schema(qwen3_vocab, qwen3_tokenizer):
    A = compile_reasoning_then_schema(WEATHER, qwen3_vocab)
    text = '<think>\nThe user wants Paris; </thin is not the end.\n</think>\n\n' \
           '{"city":"Paris","unit":"F"}'
    ids = qwen3_tokenizer.encode(text, add_special_tokens=False).ids
    assert 151667 in ids and 151668 in ids and A.accepts(ids)
    assert not A.accepts(qwen3_tokenizer.encode(text[:-1], add_special_tokens=False).ids)
    m = A.allowed(A.start(), 100)[0]
    assert m[151667] and not m[qwen3_tokenizer.token_to_id("{")]
    # the answer cannot begin before </think>; a second </think> is not free text
    twice = text.replace("\n\n{", "</think>{")
    assert not A.accepts(qwen3_tokenizer.encode(twice, add_special_tokens=False).ids)


def test_llama3_special_token_trigger(llama3_vocab, llama3_tokenizer):
    sp = special_tokens_of(llama3_tokenizer)
    assert sp["<|start_header_id|>"] == 128006
    spec = {"type": "triggered_tags", "triggers": ["<|start_header_id|>"], "tags": [
        {"begin": "<|start_header_id|>tool<|end_header_id|>\n\n",
         "content": {"type": "json_schema", "json_schema": TIME},
         "end": "<|reserved_special_token_0|>"}]}
    A = compile_structural_tag(spec, llama3_vocab, special_tokens=sp)
    assert sorted(A.meta["special_tokens"]) == [128002, 128006, 128007]
    enc = llama3_tokenizer.encode('Hi.<|start_header_id|>tool<|end_header_id|>\n\n{"tz":"UTC"}'
                                  '<|reserved_special_token_0|> bye', add_special_tokens=False).ids
    assert 128006 in enc and A.accepts(enc)
    m = A.allowed(A.start(), 50)[0]
    assert m[128006] and not m[128007] and not m[128002]
    st = A.start()
    for t in enc[:enc.index(128007) + 1]:
        st = A.advance(st, torch.tensor([t]))
    m = A.allowed(st, 50)[0]
    nl = llama3_tokenizer.token_to_id("ĊĊ")
    assert not m[128006] and m[nl] and int(m.sum()) <= 3  # "\n", "\n\n"
    m = A.allowed(A.advance(st, torch.tensor([nl])), 50)[0]
    assert m[llama3_tokenizer.token_to_id("{")] and not m[128002]
    # the spelled-out text of a special token is free text, not a trigger
    spelled = [t for part in ("<|start_header_id|", ">")
               for t in llama3_tokenizer.encode(part, add_special_tokens=False).ids]
    assert 128006 not in spelled and len(spelled) > 1 and A.accepts(spelled)
    # GCD walk at the tight budget of an at_least_one variant
    B = compile_structural_tag(dict(spec, at_least_one=True), llama3_vocab, special_tokens=sp)
    m0 = B.min_tokens_to_accept()
    rng = np.random.default_rng(2)
    for _ in range(3):
        st, seq = B.start(), []
        for r in range(m0, 0, -1):
            allowed = B.allowed(st, r)[0].nonzero().flatten().numpy()
            t = int(rng.choice(allowed))
            seq.append(t)
            st = B.advance(st, torch.tensor([t]))
        assert B.accepts(seq) and seq[0] == 128006 and seq[-1] == 128002
