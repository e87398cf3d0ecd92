"""JSON Schema ``uniqueItems: true``, enforced exactly: the exact (regular) route for small item
domains and the token-level checker (:mod:`tractable.fsa.json_schema.unique_items`) for the
rest, checked against ``jsonschema`` on texts, GCD random walks, brute-force masks on a tiny
vocabulary, batched state reordering, the logits processor and SMC."""

from __future__ import annotations

import inspect
import itertools
import json
import random
import warnings

import jsonschema
import numpy as np
import pytest
import torch
from tractable.decode.constraints import as_constraint
from tractable.decode.lm import TableLM
from tractable.decode.processor import gcd_logits_processor
from tractable.decode.smc import smc
from tractable.decode.unique_constraint import UniqueItemsConstraint
from tractable.fsa.automaton import TokenAutomaton
from tractable.fsa.errors import EmptyLanguageError, UnsupportedSchemaError
from tractable.fsa.json_schema import compile_json_schema, json_schema_to_nfa
from tractable.fsa.json_schema import scan as J
from tractable.fsa.json_schema.scan import value_key
from tractable.fsa.json_schema.unique_items import (
    UniqueItemsAutomaton,
    UniqueItemsDeadEndError,
    UniqueItemsState,
)
from tractable.fsa.vocabulary import TokenVocabulary

ENUM = {"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": True}
INTS = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3},
        "uniqueItems": True, "maxItems": 3}
STRS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
OBJS = {"type": "array", "uniqueItems": True, "maxItems": 4,
        "items": {"type": "object", "additionalProperties": False,
                  "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}}}}
NESTED = {"type": "array", "uniqueItems": True,
          "items": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}}
# [1, 1] is valid through the second branch only; [1, 1, 2, 3] through neither
ANYOF = {"anyOf": [{"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
                   {"type": "array", "items": {"type": "integer"}, "maxItems": 3}]}
FREE = {"type": "array", "uniqueItems": True}  # items: any JSON value
PROP = {"type": "object", "additionalProperties": False, "required": ["tags"],
        "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                "uniqueItems": True}}}
# prefixItems, contains and a $ref'd recursive item: the checker route
PREFIX = {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
          "items": {"$ref": "#/$defs/t"}, "contains": {"type": "boolean"}, "uniqueItems": True,
          "$defs": {"t": {"anyOf": [{"type": "boolean"}, {"type": "integer"},
                                    {"type": "array", "items": {"$ref": "#/$defs/t"},
                                     "uniqueItems": True}]}}}
ALL = {"prefix": PREFIX, "enum": ENUM, "ints": INTS, "strs": STRS, "objs": OBJS, "nested": NESTED,
       "anyof": ANYOF, "free": FREE, "prop": PROP}
CHECKER = {"prefix", "strs", "objs", "nested", "anyof", "free", "prop"}  # the others: exact route


def _kw(fn) -> dict:
    """The option for the language of every serialization (whitespace, number and string
    spellings), where this version of ``fn`` has it."""
    return {"canonical": False} if "canonical" in inspect.signature(fn).parameters else {}


def _compile(schema, vocab, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile_json_schema(schema, vocab, **_kw(compile_json_schema), **kw)


def _plain(schema):
    """``schema`` without its uniqueItems keywords (the automaton's language without them)."""
    if isinstance(schema, dict):
        return {k: _plain(v) for k, v in schema.items() if k != "uniqueItems"}
    if isinstance(schema, list):
        return [_plain(v) for v in schema]
    return schema


def _valid(schema, text: str) -> bool:
    try:
        inst = json.loads(text)
    except ValueError:
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(inst)


@pytest.fixture(scope="module")
def compiled(gpt2_vocab):
    # objects in any key order: duplicates must be found whatever the order
    return {k: _compile(s, gpt2_vocab, **({"property_order": "any"} if k in ("objs", "free")
                                          else {}))
            for k, s in ALL.items()}


def test_routes(compiled):
    for k, A in compiled.items():
        assert isinstance(A, UniqueItemsAutomaton) == (k in CHECKER), k
        if k not in CHECKER:
            assert isinstance(A, TokenAutomaton)


def test_value_key_is_json_equality():
    eq = [("1", "1.0"), ("1", "1e0"), ("100", "1E2"), ("-0", "0"), ('"\\u00e9"', '"é"'),
          ('{"a":1,"b":[true]}', '{ "b" : [ true ], "a" : 1.00 }'), ('{"a":1,"a":2}', '{"a":2}')]
    ne = [("1", "true"), ("0", "false"), ("null", "0"), ('"1"', "1"), ("[1,2]", "[2,1]"),
          ('{"a":1}', '{"a":1,"b":null}'), ("1", "1.0000000000000000001")]
    for a, b in eq:
        assert value_key(a) == value_key(b), (a, b)
    for a, b in ne:
        assert value_key(a) != value_key(b), (a, b)


def test_scanner_events_and_token_tables(gpt2_vocab):
    st, ev = J.scan(J.START, b'{"k":[1,"a,]",[2],{"x":[]}]', 0)
    assert st == (b"{", J.OUT)
    assert ev == [(5, J.EV_OPEN, 2), (7, J.EV_SEP, 2), (13, J.EV_SEP, 2), (14, J.EV_OPEN, 3),
                  (16, J.EV_CLOSE, 3), (17, J.EV_SEP, 2), (23, J.EV_OPEN, 4),
                  (24, J.EV_CLOSE, 4), (26, J.EV_CLOSE, 2)]
    assert J.scan((b"[", J.STR), b'\\u00e9"', 0)[0] == (b"[", J.OUT)
    assert J.scan((b"[", J.STR), b'\\"', 0)[0] == (b"[", J.STR)
    cands, opens = J.token_tables(gpt2_vocab)
    tb = gpt2_vocab.token_bytes
    rng = random.Random(0)
    picks = rng.sample(range(len(tb)), 2000) + [i for i, b in enumerate(tb)
                                                 if b and (b'"' in b or b"[" in b)][:2000]
    for v in picks:
        for m in range(J.NUM_MODES):
            want_c = want_o = False
            if tb[v]:
                mode = m
                for x in tb[v]:  # the definition, byte by byte
                    if mode == J.OUT:
                        want_c |= x in b",]}" or x in b"truefalsn"
                        want_o |= x == 0x5B
                    elif mode == J.STR:
                        want_c |= x == 0x22
                    (_, mode), _ = J.scan((b"[[", mode), bytes([x]))
            got = [int(t[m].view(np.uint32)[v >> 5]) >> (v & 31) & 1 for t in (cands, opens)]
            assert got == [want_c, want_o], (v, tb[v], m)


# ----------------------------------------------------------------------------- accepts


_TEXTS = {
    "prefix": ['[1,"a",true]', '[1,"a",true,true]', '[1,"a",1]', '[1,"a",1,false]',
               '[1,"a",[true],[true]]', '[1,"a",[true,true],false]', '[1,"a",[[1],[1]],true]',
               '[1,"a",[[1],[2]],true]', '[1,"a",false,[],[]]', '[1,"a",false,[[]],[[]]]'],
    "enum": ["[]", "[1]", "[1,2,3]", "[3,1]", "[1,1]", "[1,2,1]", "[1,1.0]", "[2, 1e0, 1]",
             "[1,2,3,2]", "[4]", "[ 1 , 2 ]"],
    "ints": ["[]", "[0,1,2]", "[0,1,2,3]", "[3,3]", "[0,0.0]", "[2,1]"],
    "strs": ['[]', '["a"]', '["a","b"]', '["a","a"]', '["a", "a"]', '["\\u0061","a"]',
             '["é","\\u00e9"]', '["a","b","a"]', '["ab","a","b"]', '["",""]', '[""," "]'],
    "objs": ['[]', '[{}]', '[{},{}]', '[{"a":1},{"a":2}]', '[{"a":1,"b":true},{"b":true,"a":1}]',
             '[{"a":1},{"a":1.0}]', '[{"a":1},{"a":1,"b":false}]', '[{"b":true},{"b":false}]'],
    "nested": ['[]', '[[]]', '[[],[]]', '[[1,2],[2,1]]', '[[1,2],[1,2]]', '[[1,1]]',
               '[[1],[1,2],[2]]', '[[1,2],[2, 1.0]]', '[[1,2],[ 1 , 2.0 ]]', '[[[1]]]'],
    "anyof": ['[]', '[1,1]', '[1,1,1]', '[1,2,3,4]', '[1,1,2,3]', '[1,2,3,1]', '[1,2,1]'],
    "free": ['[]', '[1,true]', '[1,1.0]', '[0,false]', '[null,null]', '["a",["a"]]',
             '[[1,2],[1,2]]', '[{"x":[1]},{"x":[1.0]}]', '[{"x":1},{"y":1}]', '[[],{}]'],
    "prop": ['{"tags":[]}', '{"tags":["x","y"]}', '{"tags":["x","x"]}', '{"tags":["x","y","x"]}'],
}


@pytest.mark.parametrize("key", list(_TEXTS))
def test_accepts_agrees_with_jsonschema(compiled, gpt2_vocab, gpt2_tokenizer, key):
    """Accepted iff in the language without uniqueness and valid per jsonschema."""
    A, schema = compiled[key], ALL[key]
    P = _compile(_plain(schema), gpt2_vocab,
                 **({"property_order": "any"} if key in ("objs", "free") else {}))
    dups = 0
    for text in _TEXTS[key]:
        ids = gpt2_tokenizer.encode(text).ids
        want = P.accepts(ids) and _valid(schema, text)
        assert A.accepts(ids) == want, (key, text)
        dups += P.accepts(ids) and not want
    assert dups


@pytest.mark.parametrize("key", ["enum", "strs", "objs", "nested", "free"])
def test_accepts_random_arrays(compiled, gpt2_vocab, gpt2_tokenizer, key):
    """Random arrays from a pool of values with repeats and several spellings per value."""
    pools = {
        "enum": ["1", "2", "3", "1.0", "2e0", "4"],
        "strs": ['"a"', '"b"', '"\\u0061"', '"ab"', '""'],
        "objs": ['{}', '{"a":1}', '{"a":1.0}', '{"b":true,"a":1}', '{"a":1,"b":true}'],
        "nested": ['[]', '[1]', '[1,2]', '[2,1]', '[1.0]', '[1,1]'],
        "free": ['1', '1.0', 'true', '"1"', '[1]', '{"k":1}', 'null', '[]'],
    }[key]
    A, schema = compiled[key], ALL[key]
    P = _compile(_plain(schema), gpt2_vocab,
                 **({"property_order": "any"} if key in ("objs", "free") else {}))
    rng = random.Random(7)
    seen_dup = seen_ok = 0
    for _ in range(60):
        items = [rng.choice(pools) for _ in range(rng.randint(0, 4))]
        if key == "objs" and len(items) > 4:
            continue
        sep = rng.choice([",", ", ", " ,"])
        text = "[" + sep.join(items) + "]"
        ids = gpt2_tokenizer.encode(text).ids
        # in the language without uniqueness (key order, spellings) and distinct per jsonschema
        want = P.accepts(ids) and _valid(schema, text)
        assert A.accepts(ids) == want, (key, text)
        seen_ok += want
        seen_dup += P.accepts(ids) and not want
    assert seen_ok and seen_dup


# ----------------------------------------------------------------------------- GCD walks


def _walk(A, budget: int, rng: random.Random, mode: str = "gcd") -> list[int]:
    st = A.start(1)
    ids: list[int] = []
    r = budget
    eos = set(A.eos_token_ids)
    while r > 0:
        allowed = torch.nonzero(A.allowed(st, r, mode)[0]).view(-1).tolist()
        assert allowed, ("empty mask without an error", ids)
        v = rng.choice(allowed)
        if v in eos:
            break
        ids.append(v)
        st = A.advance(st, torch.tensor([v]))
        assert not bool(st.is_dead()[0])
        r -= 1
    assert bool(st.is_accepting()[0])
    return ids


@pytest.mark.parametrize("key", list(ALL))
def test_gcd_walks_valid(compiled, gpt2_vocab, key):
    """Uniform walks over the GCD mask, budgets from the minimum to 3x: every output validates.
    Exact-route automata never dead-end; checker-route walks may only stop with the typed
    error (tight budgets, see test_budget_guarantee_*)."""
    A, schema = compiled[key], ALL[key]
    m = max(A.min_tokens_to_accept(), 1)
    rng = random.Random(11)
    done = dead = 0
    for budget in range(m, 3 * m + 3):
        for _ in range(4):
            try:
                ids = _walk(A, budget, rng)
            except UniqueItemsDeadEndError:
                assert key in CHECKER
                dead += 1
                continue
            text = gpt2_vocab.decode_bytes(ids).decode()
            assert _valid(schema, text), (key, budget, text)
            assert A.accepts(ids)
            done += 1
    assert done >= dead


def test_gcd_walks_exhausting_a_small_domain(gpt2_vocab):
    """Items from a 6-value domain through the checker route (a pattern: not enumerable from
    the schema), long budgets: many items, never two equal ones; when the walk reaches an item
    whose every completion is a used value it stops with the typed error (documented)."""
    schema = {"type": "array", "items": {"type": "string", "pattern": "^[ab]{1,2}$"},
              "uniqueItems": True}
    A = _compile(schema, gpt2_vocab)
    assert isinstance(A, UniqueItemsAutomaton)
    rng = random.Random(3)
    most = done = 0
    for budget in (12, 20, 30):
        for _ in range(6):
            try:
                ids = _walk(A, budget, rng, mode="lcd" if budget == 30 else "gcd")
            except UniqueItemsDeadEndError:
                continue
            text = gpt2_vocab.decode_bytes(ids).decode()
            assert _valid(schema, text), text
            most = max(most, len(json.loads(text)))
            done += 1
    assert done and most >= 2


def test_budget_guarantee_holds_on_exact_route(gpt2_vocab):
    """Booleans, minItems 2: the exact automaton (sets of values); at the minimum budget every
    walk completes ([true,false] or [false,true]); minItems 3 has no instance at all."""
    schema = {"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "minItems": 2}
    A = _compile(schema, gpt2_vocab)
    assert isinstance(A, TokenAutomaton)
    m = A.min_tokens_to_accept()
    rng = random.Random(0)
    for _ in range(20):
        text = gpt2_vocab.decode_bytes(_walk(A, m, rng)).decode()
        assert _valid(schema, text), text
    with pytest.raises(EmptyLanguageError):
        _compile(dict(schema, minItems=3), gpt2_vocab)


def test_budget_guarantee_fails_loudly_on_checker_route(gpt2_vocab):
    """Strings, minItems 2, at the minimum budget of the language without uniqueness: its
    shortest texts repeat an item, so walks must stop with UniqueItemsDeadEndError (never an
    invalid output); with two more tokens of budget every walk completes."""
    schema = {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "minItems": 2}
    A = _compile(schema, gpt2_vocab)
    m = A.min_tokens_to_accept()
    rng = random.Random(5)
    dead = 0
    for _ in range(10):
        try:
            text = gpt2_vocab.decode_bytes(_walk(A, m, rng)).decode()
        except UniqueItemsDeadEndError as e:
            assert e.row == 0
            dead += 1
            continue
        assert _valid(schema, text), text
    assert dead > 0
    done = 0
    for _ in range(10):
        try:
            text = gpt2_vocab.decode_bytes(_walk(A, m + 3, rng)).decode()
        except UniqueItemsDeadEndError:
            continue
        assert _valid(schema, text), text
        done += 1
    assert done


# ----------------------------------------------------------------------------- brute force

_TINY = ["[", "]", ",", '"', "a", '"a"', '"]', '","', "[]", '["a",', "1", " "]


@pytest.fixture(scope="module")
def tiny_vocab():
    return TokenVocabulary.from_token_bytes(_TINY + [None], eos_token_ids=[len(_TINY)])


def _tiny_lang(schema):
    def ok(text: bytes) -> bool:
        return _valid(schema, text.decode())
    return ok


def _brute(P, vocab, ok, prefix: tuple, r: int, memo: dict) -> set[int]:
    """Tokens v such that prefix + v + w is valid (``ok``) for some w of at most r - 1 text
    tokens (EOS: the prefix itself is valid); the search is pruned to prefixes the automaton
    ``P`` of the language without uniqueness can continue (every valid text's prefixes are)."""
    V = len(_TINY)
    final = P.final.numpy()
    states = memo.setdefault("states", {})

    def state(p: tuple):
        s = states.get(p)
        if s is None:
            s = P.initial.numpy().copy() if not p else P.step_states(state(p[:-1]), p[-1])
            states[p] = s
        return s

    def completes(p: tuple, k: int) -> bool:
        key = (p, k)
        hit = memo.get(key)
        if hit is None:
            s = state(p)
            hit = bool(s.any()) and (
                (bool((s & final).any()) and ok(vocab.decode_bytes(p)))
                or (k > 0 and any(completes(p + (t,), k - 1) for t in range(V))))
            memo[key] = hit
        return hit

    out = {t for t in range(V) if r >= 1 and completes(prefix + (t,), r - 1)}
    if r >= 1 and completes(prefix, 0):
        out.add(V)
    return out


@pytest.mark.parametrize("schema,exact_masks", [
    (STRS, False),
    ({"type": "array", "items": {"enum": ["a", ""]}, "uniqueItems": True}, True),
    (NESTED, False),
])
def test_masks_equal_brute_force(tiny_vocab, schema, exact_masks):
    """Every prefix of up to 3 tokens, budgets 1..5: the GCD mask is never smaller than the
    exact set (a continuation completes within the budget without repeats); on the exact
    route it is equal; on the checker route it differs only by the tokens after which
    uniqueness, not the language, runs out of budget (mask == exact set of the language
    without uniqueness, minus what repeats or commits a repeat)."""
    A = _compile(schema, tiny_vocab)
    P = _compile(_plain(schema), tiny_vocab)
    ok = _tiny_lang(schema)
    ok_plain = _tiny_lang(_plain(schema))
    V = len(_TINY)
    memo: dict = {}
    memo_plain: dict = {}
    checked = differ = 0
    frontier = [()]
    for _depth in range(4):
        nxt = []
        for p in frontier:
            if not A.viable(list(p)):
                continue
            st = A.start(1)
            for t in p:
                st = A.advance(st, torch.tensor([t]))
            for r in range(1, 6):
                try:
                    mask = set(torch.nonzero(A.allowed(st, r, on_unsatisfiable="empty")[0])
                               .view(-1).tolist())
                except UniqueItemsDeadEndError:
                    assert not exact_masks
                    mask = set()
                want = _brute(P, tiny_vocab, ok, p, r, memo)
                assert want <= mask, (p, r, want - mask)
                if exact_masks:
                    assert mask == want, (p, r)
                else:
                    # extra tokens: the language without uniqueness fits the budget, and with
                    # a larger budget a continuation without repeats exists
                    extra = mask - want
                    base = _brute(P, tiny_vocab, ok_plain, p, r, memo_plain)
                    assert extra <= base, (p, r)
                    if r <= 3:
                        assert extra <= _brute(P, tiny_vocab, ok, p, r + 3, memo), (p, r)
                    differ += bool(extra)
                checked += 1
            nxt += [p + (t,) for t in range(V)]
        frontier = nxt
    assert checked > 50
    if not exact_masks and schema is STRS:
        assert differ > 0  # the tight-budget dead ends exist (documented)


# ----------------------------------------------------------------------------- states


def test_state_select_and_cat(compiled, gpt2_tokenizer):
    A = compiled["strs"]
    texts = ['["a","b', '["a","a', '["x']
    seqs = [gpt2_tokenizer.encode(t).ids for t in texts]
    n = max(len(s) for s in seqs)
    singles = []
    for s in seqs:
        st = A.start(1)
        for t in s:
            st = A.advance(st, torch.tensor([t]))
        singles.append(st)
    both = UniqueItemsState.cat(singles)
    assert isinstance(both, UniqueItemsState) and both.batch_size == 3
    m_both = A.allowed(both, n + 5)
    for i, s in enumerate(singles):
        assert torch.equal(m_both[i], A.allowed(s, n + 5)[0])
    sel = both.select(torch.tensor([2, 1, 1, 0]))
    m_sel = A.allowed(sel, n + 5)
    for j, i in enumerate([2, 1, 1, 0]):
        assert torch.equal(m_sel[j], m_both[i])
    # the duplicate row ('["a","a') must not be allowed to close the string and the array
    close = gpt2_tokenizer.encode('"]').ids
    assert len(close) == 1
    assert not bool(m_both[1, close[0]]) and bool(m_both[0, close[0]])
    adv = A.advance(sel, torch.tensor([close[0]] * 4))
    assert adv.is_dead().tolist() == [False, True, True, False]
    assert adv.is_accepting().tolist() == [True, False, False, True]


def test_batched_advance_matches_single_rows(compiled, gpt2_tokenizer):
    """Rows advanced together (different tokens each) equal rows advanced alone: dead rows,
    accepting rows and masks at every step."""
    A = compiled["nested"]
    texts = ["[[1,2],[2,1]]", "[[1,2],[1,2]]", "[[1,1],[2]]", "[[],[3],[]]"]
    seqs = [gpt2_tokenizer.encode(t).ids for t in texts]
    L = min(map(len, seqs))
    st = A.start(len(seqs))
    singles = [A.start(1) for _ in seqs]
    for j in range(L):
        st = A.advance(st, torch.tensor([s[j] for s in seqs]))
        singles = [A.advance(x, torch.tensor([s[j]])) for x, s in zip(singles, seqs)]
        m = A.allowed(st, 30, "lcd")
        for i, x in enumerate(singles):
            assert bool(st.is_dead()[i]) == bool(x.is_dead()[0])
            assert bool(st.is_accepting()[i]) == bool(x.is_accepting()[0])
            assert torch.equal(m[i], A.allowed(x, 30, "lcd")[0])
    assert st.is_dead().tolist() == [not A.viable(s[:L]) for s in seqs]
    assert any(st.is_dead().tolist()) and not all(st.is_dead().tolist())


# ----------------------------------------------------------------------------- decode paths


def test_logits_processor(compiled, gpt2_vocab):
    """gcd_logits_processor works unchanged: sampled rows stay valid; two rows sharing a
    prefix and a replayed prefix (a new processor mid-generation) agree."""
    A = compiled["prop"]
    V = A.vocab_size
    budget = 3 * A.min_tokens_to_accept()
    proc = gcd_logits_processor(A, max_new_tokens=budget)
    rng = np.random.default_rng(0)
    B = 3
    ids = torch.zeros((B, 2), dtype=torch.long)
    eos = A.eos_token_ids[0]
    done = [False] * B
    for _ in range(budget):
        scores = proc(ids, torch.zeros((B, V)))
        nxt = []
        for b in range(B):
            ok = np.flatnonzero(np.isfinite(scores[b].numpy()))
            nxt.append(eos if done[b] else int(rng.choice(ok)))
            done[b] = done[b] or nxt[-1] == eos
        ids = torch.cat([ids, torch.tensor(nxt).view(B, 1)], dim=1)
        if all(done):
            break
    for b in range(B):
        gen = [t for t in ids[b, 2:].tolist() if t != eos]
        text = gpt2_vocab.decode_bytes(gen).decode()
        assert _valid(PROP, text), text
    late = gcd_logits_processor(A, max_new_tokens=budget)
    late(ids[:, :2], torch.zeros((B, V)))
    out = late(ids[:, :4], torch.zeros((B, V)))  # replays 2 tokens per row
    assert out.shape == (B, V)


def test_smc_and_constraint(tiny_vocab):
    A = _compile(STRS, tiny_vocab)
    C = as_constraint(A)
    assert isinstance(C, UniqueItemsConstraint)
    V = tiny_vocab.size
    lm = TableLM(lambda p: [1.0] * V, V, tiny_vocab.eos_token_ids[0])
    res = smc(lm, None, [], A, n_particles=16, max_new_tokens=8, seed=1)
    live = [i for i, w in enumerate(res.log_weights.tolist()) if w > -float("inf")]
    assert live
    for i in live:
        text = tiny_vocab.decode_bytes(res.particles[i]).decode()
        assert _valid(STRS, text), text
    # check() agrees with allowed(); EOS keeps the row
    st = C.start(2)
    st = C.advance(st, torch.tensor([_TINY.index("["), _TINY.index('"a"')]))
    m = C.allowed(st, 4)
    rows = torch.tensor([0, 0, 1, 1])
    toks = torch.tensor([_TINY.index('"a"'), _TINY.index("]"), V - 1, _TINY.index(",")])
    assert C.check(st, rows, toks, 4).tolist() == m[rows, toks].tolist()
    kept = C.advance(st, torch.tensor([V - 1, _TINY.index('"a"')]))
    assert not bool(kept.is_dead()[0])


# ----------------------------------------------------------------------------- compiler


def test_byte_nfa_api_refuses_checker_route_and_builds_exact_route():
    kw = _kw(json_schema_to_nfa)
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_nfa(STRS, **kw)
    assert e.value.pointer == "#/uniqueItems"
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_to_nfa({"properties": {"t": STRS}}, **kw)
    assert e.value.pointer == "#/properties/t/uniqueItems"
    from tractable.fsa import nfa as N

    a = N.finalize(json_schema_to_nfa(ENUM, **kw))
    for items in itertools.product(["1", "2", "3", "1.0"], repeat=2):
        text = "[" + ",".join(items) + "]"
        assert N.matches(a, text.encode()) == _valid(ENUM, text), text


def test_refused_combinations_name_the_pointer(gpt2_vocab):
    with pytest.raises(UnsupportedSchemaError):
        _compile({"not": {"type": "array", "uniqueItems": True}}, gpt2_vocab)
    with pytest.raises(UnsupportedSchemaError):
        _compile({"oneOf": [STRS, {"type": "array", "maxItems": 2}]}, gpt2_vocab)


def test_schemas_without_unique_items_unchanged(gpt2_vocab):
    """The hook returns before anything changes: uniqueItems false / maxItems 1 compile to the
    same automaton as the schema without the keyword."""
    base = {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 1}
    A = _compile(base, gpt2_vocab)
    for extra in ({"uniqueItems": False}, {"uniqueItems": True}):
        B = _compile(dict(base, **extra), gpt2_vocab)
        assert isinstance(B, TokenAutomaton)
        for f in ("edge_src", "edge_dst", "edge_label", "labels", "final"):
            assert torch.equal(getattr(A, f), getattr(B, f)), f
