"""Per-step token-mask latency: tractable GCD / LCD vs xgrammar, outlines-core, llguidance.

    python bench/mask_bench.py                        # Llama-3 and Qwen3, 10 walks, B = 1 and 16
    python bench/mask_bench.py --vocabs llama3 --walks 4 --batches 1

Method (as ``../shared/reference/peers_cpu.md`` §2): a fixed valid string per regex is tokenized
canonically (``encode(add_special_tokens=False)``); every engine walks those tokens and, at each
step, fills a preallocated full-vocabulary int32 bitmask ([B, ceil(V/32)]); that fill is the
timed region (``time.perf_counter_ns``).  Outside it we check that the walked token's bit is set,
then advance (timed apart).  A final EOS step checks that EOS is allowed.  Walk 1 after compile
is *cold*; walks 2.. are *warm*; after them each engine walks a second valid string once
(``NOVEL``: a *novel* path, partly through state sets and budgets its caches have not seen).
tractable's compile time includes its mask engine's set-up (distances, per-state prefix rows).
Engines are interleaved walk by walk (noise hits all alike), all in ONE process, the order
rotated each walk; ``torch.set_num_threads(1)``; ``gc`` disabled inside walks.

*Mask + apply* (the processor's path, issue 21): after each fill, each engine applies its mask
to float32 logits [B, V] (refilled outside the timing) with its own CPU apply, in place:
tractable ``tractable.decode.token_bitmask.apply_token_bitmask_inplace`` (what
``gcd_logits_processor(..., inplace=True)`` and the vLLM adapter call; the tables' "GCD new"
column times ``apply_token_bitmask``, the processor's default, which leaves the logits alone and
returns a new tensor, on the same steps), xgrammar ``apply_token_bitmask_inplace``, llguidance
``llguidance.torch.apply_token_bitmask_inplace`` and outlines-core
``outlines_core.kernels.torch.apply_token_bitmask_inplace`` (both ``torch.compile``'d: their
first call, which compiles, is made before the walks and reported apart as "first apply").
A step's mask + apply is its fill plus its apply.

* tractable GCD: ``A.allowed_packed(st, remaining, "gcd", out=buf)`` with the tight budget
  n = len(walk) + 1 (EOS included), so remaining = n − t at step t — every walked token must
  survive the budget cut;  tractable LCD: the same call with ``mode="lcd"``;
* xgrammar: ``GrammarMatcher.fill_next_token_bitmask`` (B = 16: ``BatchGrammarMatcher(
  max_threads=1).batch_fill_next_token_bitmask``), compiled with ``GrammarCompiler(
  cache_enabled=False, max_threads=1).compile_regex``;
* outlines-core: ``Guide.write_mask_into`` on ``Index(regex, Vocabulary)`` (B = 16: a loop,
  it has no batch API);
* llguidance: ``llguidance.torch.fill_next_token_bitmask`` (B = 16: ``fill_next_token_bitmask_par``
  with an ``LLExecutor``) on ``LLMatcher(LLTokenizer, grammar_from_regex(r))``.

Besides the regexes, two JSONSchemaBench schemas (``SCHEMAS``: Glaiveai2K and Github_medium
records, each with a hand-written valid instance and a novel one), compiled by each engine's JSON
Schema front end (tractable ``compile_json_schema(canonical=True, strict=True)``, xgrammar
``compile_json_schema(strict_mode=True, any_whitespace=False, separators=(",", ":"))``, llguidance
``grammar_from_json_schema``, outlines-core ``build_regex_from_schema`` + ``Index``).

B = 16 walks 16 copies of the same sequence (as peers_cpu.md's batch rows).  The tractable
automaton comes from ``tractable.fsa.regex.compile_regex`` when that module exists, else from
the same patterns spelled with the ``fsa.nfa`` combinators (``_fallback_nfa``).

Writes ``bench/results/masks_cpu.md`` and ``masks_cpu.json`` (every per-step sample).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import harness as H
import torch
from compile_bench import KEYWORDS, REGEXES

# name -> (regex, walked string).  The first four are bench/compile_bench.py's REGEXES (fsa
# issue; [0-9] rather than \d there: Python's \d is any Unicode digit, the peers' is ASCII).
PATTERNS: dict[str, tuple[str, str]] = {
    "iso_datetime": (REGEXES["iso_datetime"], "2024-03-15T14:30:45.123456+05:30"),
    "email": (REGEXES["email"], "john.doe+bench@example-mail.com"),
    "keywords50": (REGEXES["keywords50"], "INTERSECT"),
    "json_string": (
        REGEXES["json_string"],
        r'"Hello \"world\", caf\u00e9 au lait \\ 42 times\n and more text here."',
    ),
    "json_object": (
        r'\{"name": "[^"\\]{0,40}", "age": [0-9]{1,3}\}',
        '{"name": "Alice Johnson", "age": 42}',
    ),
}
# a second valid string per pattern, walked once after the warm walks: a *novel* path (state
# sets and budgets partly never seen by tractable's caches)
NOVEL: dict[str, str] = {
    "iso_datetime": "1999-12-31T23:59:59Z",
    "email": "x_y.z@my-host.co.uk",
    "keywords50": "DISTINCT",
    "json_string": r'"tab\there, quote \" and \u00ff done"',
    "json_object": '{"name": "Bob O\'Neil", "age": 7}',
}
# JSON Schemas from JSONSchemaBench (``../shared/data/jsonschemabench``; skipped where absent):
# name -> (subset, record id, walked instance, novel instance).  Every engine compiles the
# schema with no unlisted properties and compact separators where it has the option (tractable
# ``canonical=True, strict=True``; xgrammar ``strict_mode=True, any_whitespace=False,
# separators=(",", ":")``;
# llguidance and outlines-core their defaults, which also accept compact JSON); the instances
# are compact, canonical numbers, properties in the schema's order.
SCHEMAS: dict[str, tuple[str, str, str, str]] = {
    "schema_health": (
        "Glaiveai2K", "Glaiveai2K/analyze_health_data_4ad104b4",
        '{"data":[{"measurement":"heart_rate","timestamp":"2024-03-15T08:30:00Z","value":72.5},'
        '{"measurement":"blood_pressure","timestamp":"2024-03-15T08:35:00Z","value":120}]}',
        '{"data":[{"measurement":"steps","timestamp":"2023-12-31T23:59:59Z",'
        '"value":10432}]}'),
    "schema_corrections": (
        "Github_medium", "Github_medium/o1",
        '{"corrections":[{"primary_key":"abc123","loc":42,"correction_comment":"Fix typo in '
        'docstring","module":"core-utils","subject":"Typo fix","change_id":'
        '["I0123456789abcdef0123456789abcdef01234567"],"author_email":"dev@example.com"}]}',
        '{"corrections":[{"primary_key":"k-9","correction_comment":"Swap args",'
        '"change_id":null}]}'),
}
EOS = {"llama3": "<|end_of_text|>", "qwen3": "<|im_end|>"}


def _schema(name: str) -> dict | None:
    """The JSONSchemaBench schema of case ``name`` (None: the data is not on this machine)."""

    sub, rid = SCHEMAS[name][:2]
    data = H.SHARED / "jsonschemabench"
    path = data / f"{sub}.jsonl"
    if not path.exists() and not path.with_suffix(".jsonl.gz").exists():
        return None
    from jsonschemabench_coverage import load

    rec = next((r for r in load(sub, data) if r["id"] == rid), None)
    return None if rec is None else rec["schema"]


def case(name: str) -> tuple[str, object, str, str]:
    """(kind "regex" | "schema", regex or schema dict, walked text, novel text)."""
    if name in SCHEMAS:
        return "schema", _schema(name), SCHEMAS[name][2], SCHEMAS[name][3]
    return "regex", PATTERNS[name][0], PATTERNS[name][1], NOVEL[name]
ENGINES = ("tractable_gcd", "tractable_lcd", "xgrammar", "outlines_core", "llguidance")


# ---------------------------------------------------------------------------- tractable side


def _fallback_nfa(name: str):
    """The PATTERNS spelled with the combinators (used until fsa/regex/ exists)."""
    from tractable.fsa import nfa as N

    def cls(spec: str):
        m = 0
        i = 0
        while i < len(spec):
            if i + 2 < len(spec) and spec[i + 1] == "-":
                m |= N.mask_of(range(ord(spec[i]), ord(spec[i + 2]) + 1))
                i += 3
            else:
                m |= N.mask_of([ord(spec[i])])
                i += 1
        return N.byteset(m)

    L = N.literal
    d = cls("0-9")
    two = lambda a, b: N.concat(cls(a), cls(b))  # noqa: E731
    if name == "iso_datetime":
        hh = N.union(two("01", "0-9"), two("2", "0-3"))
        return N.concat(
            N.repeat(d, 4, 4), L("-"), N.union(two("0", "1-9"), two("1", "0-2")), L("-"),
            N.union(two("0", "1-9"), two("12", "0-9"), two("3", "01")), L("T"), hh, L(":"),
            two("0-5", "0-9"), L(":"), two("0-5", "0-9"),
            N.optional(N.concat(L("."), N.repeat(d, 1, 6))),
            N.union(L("Z"), N.concat(cls("+-"), hh, L(":"), two("0-5", "0-9"))),
        )
    if name == "email":
        lab = cls("a-zA-Z0-9-")
        return N.concat(
            N.plus(cls("a-zA-Z0-9._%+-")), L("@"), N.plus(lab),
            N.star(N.concat(L("."), N.plus(lab))), L("."), N.repeat(cls("a-zA-Z"), 2, None),
        )
    if name == "keywords50":
        return N.union(*[L(k) for k in KEYWORDS])
    if name == "json_string":
        ch = N.codepoints([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)])
        esc = N.concat(L("\\"), cls('"\\/bfnrt'))
        uni = N.concat(L("\\u"), N.repeat(cls("0-9a-fA-F"), 4, 4))
        return N.concat(L('"'), N.star(N.union(ch, esc, uni)), L('"'))
    if name == "json_object":
        ch = N.codepoints([(0x00, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)])
        return N.concat(L('{"name": "'), N.repeat(ch, 0, 40), L('", "age": '),
                        N.repeat(d, 1, 3), L("}"))
    raise KeyError(name)


def compile_tractable(name: str, vocab):
    from tractable.fsa.automaton import TokenAutomaton

    if name in SCHEMAS:  # a fresh automaton object: no mask caches from an earlier compile
        import dataclasses
        import warnings

        from tractable.fsa.json_schema import compile_json_schema

        with warnings.catch_warnings():  # strict=True warns that it generates a subset
            warnings.simplefilter("ignore")
            A = compile_json_schema(case(name)[1], vocab, canonical=True, strict=True)
        return TokenAutomaton(**{f.name: getattr(A, f.name) for f in dataclasses.fields(A)
                                 if f.name != "_memo"}), "compile_json_schema"
    pattern = PATTERNS[name][0]
    try:
        from tractable.fsa.regex import compile_regex
    except ImportError:
        return TokenAutomaton.from_byte_nfa(_fallback_nfa(name), vocab,
                                            meta={"pattern": pattern}), "combinators"
    try:  # bypass the in-process cache if the compiler has one
        from tractable.fsa.regex import regex_to_nfa

        return TokenAutomaton.from_byte_nfa(regex_to_nfa(pattern), vocab,
                                            meta={"pattern": pattern}), "regex_to_nfa"
    except ImportError:
        return compile_regex(pattern, vocab), "compile_regex"


class Tractable:
    def __init__(self, vocab, mode: str):
        self.vocab = vocab
        self.mode = mode
        self.W = (vocab.size + 31) // 32
        self.tok_cache: dict[tuple[int, int], torch.Tensor] = {}

    def compile(self, name: str):
        from tractable.fsa.masks import mask_engine

        t0 = time.perf_counter()
        self.A, self.how = compile_tractable(name, self.vocab)
        mask_engine(self.A)  # the engine's set-up (distances, per-state rows) counts as compile
        return (time.perf_counter() - t0) * 1e3

    def new(self, B: int, n: int):
        self.st = self.A.start(B)
        self.buf = torch.zeros((B, self.W), dtype=torch.int32)
        # remaining budget: an int at B = 1, a LongTensor [B] (per-row budgets) at B > 1;
        # prepared outside the timed fill (indexing a tensor alone costs ~3 us here)
        self.rem = torch.full((B,), n, dtype=torch.long) if B > 1 else n
        self.B = B

    def fill(self, t: int):
        self.A.allowed_packed(self.st, self.rem, self.mode, out=self.buf)

    def bit(self, tok: int) -> bool:
        return bool((int(self.buf[0, tok >> 5]) >> (tok & 31)) & 1)

    def apply(self, logits: torch.Tensor) -> None:
        """In place, as the peers' applies (``gcd_logits_processor(..., inplace=True)``)."""
        from tractable.decode.token_bitmask import apply_token_bitmask_inplace

        apply_token_bitmask_inplace(logits, self.buf)

    def apply_new(self, logits: torch.Tensor) -> torch.Tensor:
        """Into a new tensor (``gcd_logits_processor``'s default: ``scores`` not mutated)."""
        from tractable.decode.token_bitmask import apply_token_bitmask

        return apply_token_bitmask(logits, self.buf)

    def prepare(self, tokens: list[int]) -> None:
        """Build the token-id tensors of a walk before it is timed (bench overhead)."""
        for tok in tokens:
            if (tok, self.B) not in self.tok_cache:
                self.tok_cache[(tok, self.B)] = torch.full((self.B,), tok, dtype=torch.long)

    def advance(self, tok: int):
        ids = self.tok_cache.get((tok, self.B))
        if ids is None:  # built once per (token, batch): torch.tensor() alone costs ~8 us here
            ids = self.tok_cache[(tok, self.B)] = torch.full((self.B,), tok, dtype=torch.long)
        self.st = self.A.advance(self.st, ids)
        self.rem = self.rem - 1


# ---------------------------------------------------------------------------- peers


class XGrammar:
    def __init__(self, hf_tok, V, eos):
        import xgrammar as xgr

        self.xgr = xgr
        self.info = xgr.TokenizerInfo.from_huggingface(hf_tok, vocab_size=V, stop_token_ids=[eos])
        self.V = V

    def compile(self, name):
        t0 = time.perf_counter()
        comp = self.xgr.GrammarCompiler(self.info, cache_enabled=False, max_threads=1)
        kind, spec = case(name)[:2]
        if kind == "schema":
            import json

            self.cg = comp.compile_json_schema(json.dumps(spec), any_whitespace=False,
                                               separators=(",", ":"), strict_mode=True)
        else:
            self.cg = comp.compile_regex(spec)
        return (time.perf_counter() - t0) * 1e3

    def new(self, B, n):
        self.B = B
        self.ms = [self.xgr.GrammarMatcher(self.cg) for _ in range(B)]
        self.buf = self.xgr.allocate_token_bitmask(B, self.V)
        if B > 1:
            self.batch = self.xgr.BatchGrammarMatcher(max_threads=1)

    def fill(self, t):
        if self.B == 1:
            self.ms[0].fill_next_token_bitmask(self.buf)
        else:
            self.batch.batch_fill_next_token_bitmask(self.ms, self.buf)

    def bit(self, tok):
        return bool((int(self.buf[0, tok >> 5]) >> (tok & 31)) & 1)

    def apply(self, logits):
        self.xgr.apply_token_bitmask_inplace(logits, self.buf)

    def advance(self, tok):
        for m in self.ms:
            assert m.accept_token(tok)


class OutlinesCore:
    def __init__(self, vocab, V, eos):
        import outlines_core as oc

        self.oc = oc
        d: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b is not None and i != eos:
                d.setdefault(b, []).append(i)
        self.vocab = oc.Vocabulary(eos, d)
        self.W = (V + 31) // 32

    def compile(self, name):
        t0 = time.perf_counter()
        kind, spec = case(name)[:2]
        if kind == "schema":
            import json

            spec = self.oc.json_schema.build_regex_from_schema(json.dumps(spec))
        self.index = self.oc.Index(spec, self.vocab)
        return (time.perf_counter() - t0) * 1e3

    def new(self, B, n):
        self.gs = [self.oc.Guide(self.index) for _ in range(B)]
        self.buf = torch.zeros((B, self.W), dtype=torch.int32)
        self.ptrs = [self.buf[i].data_ptr() for i in range(B)]

    def fill(self, t):
        W = self.W
        for g, p in zip(self.gs, self.ptrs):
            g.write_mask_into(p, W, 4)

    def bit(self, tok):
        return bool((int(self.buf[0, tok >> 5]) >> (tok & 31)) & 1)

    def apply(self, logits):
        from outlines_core.kernels.torch import apply_token_bitmask_inplace

        apply_token_bitmask_inplace(logits, self.buf)

    def advance(self, tok):
        for g in self.gs:
            g.advance(tok, return_tokens=False)


class LLGuidance:
    def __init__(self, hf_tok, V, eos):
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.llg = llguidance
        self.lt = llguidance.torch
        self.tok = llguidance.hf.from_tokenizer(hf_tok, n_vocab=V, eos_token=eos)
        self.V = V
        self.exe = llguidance.LLExecutor()

    def compile(self, name):
        t0 = time.perf_counter()
        kind, spec = case(name)[:2]
        M = self.llg.LLMatcher
        self.grammar = (M.grammar_from_json_schema(spec) if kind == "schema"
                        else M.grammar_from_regex(spec))
        self.proto = self.llg.LLMatcher(self.tok, self.grammar)
        return (time.perf_counter() - t0) * 1e3

    def new(self, B, n):
        self.B = B
        if B == 1:
            self.proto.reset()  # keeps the lazily built lexer state (as peers_cpu.md)
            self.ms = [self.proto]
        else:
            self.ms = [self.proto.deep_copy() for _ in range(B)]
            for m in self.ms:
                m.reset()
        self.buf = self.lt.allocate_token_bitmask(B, self.V)

    def fill(self, t):
        if self.B == 1:
            self.lt.fill_next_token_bitmask(self.ms[0], self.buf, 0)
        else:
            self.lt.fill_next_token_bitmask_par(self.exe, [(m, i) for i, m in enumerate(self.ms)],
                                                self.buf)

    def bit(self, tok):
        return bool((int(self.buf[0, tok >> 5]) >> (tok & 31)) & 1)

    def apply(self, logits):
        self.lt.apply_token_bitmask_inplace(logits, self.buf)

    def advance(self, tok):
        for m in self.ms:
            assert m.consume_token(tok), m.get_error()


# ---------------------------------------------------------------------------- harness


def walk(eng, tokens: list[int], eos: int, B: int, logits: torch.Tensor | None = None
         ) -> tuple[list[int], list[int], list[int], list[int]]:
    """One walk: (mask-fill ns per step incl. the EOS step, advance ns per token, apply ns per
    step: the engine's apply of its mask to a copy of ``logits`` [B, V], empty without it;
    the same for its ``apply_new`` (a new tensor, tractable only), empty without it)."""
    n = len(tokens) + 1
    eng.new(B, n)
    if hasattr(eng, "prepare"):
        eng.prepare(tokens)
    fills, advs, applies, applies_new = [], [], [], []
    new = getattr(eng, "apply_new", None)
    scratch = None if logits is None else logits.clone()
    clock = time.perf_counter_ns
    gc.disable()
    try:
        for t, tok in enumerate(tokens + [eos]):
            t0 = clock()
            eng.fill(t)
            t1 = clock()
            fills.append(t1 - t0)
            if not eng.bit(tok):
                raise AssertionError(f"{type(eng).__name__}: token {tok} not allowed at step {t}")
            if scratch is not None:
                scratch.copy_(logits)  # the in-place applies wrote -inf last step
                t0 = clock()
                eng.apply(scratch)
                applies.append(clock() - t0)
                if new is not None:
                    scratch.copy_(logits)
                    t0 = clock()
                    out = new(scratch)
                    applies_new.append(clock() - t0)
                    del out
            if tok == eos:
                break
            t0 = clock()
            eng.advance(tok)
            advs.append(clock() - t0)
    finally:
        gc.enable()
    return fills, advs, applies, applies_new


def _with_apply(fills: list[int], applies: list[int]) -> list[int]:
    """Per step: mask fill + apply (ns)."""
    return [f + a for f, a in zip(fills, applies)]


def run(args) -> dict:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    torch.set_num_threads(1)
    cells = []
    for vname in args.vocabs:
        path = H.tokenizer_path(vname)
        vocab = H.load_vocabulary(path)
        hf = PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token=EOS[vname])
        eos = hf.convert_tokens_to_ids(EOS[vname])
        V = len(hf)
        assert V == vocab.size and eos in vocab.eos_token_ids, (V, vocab.size, eos)
        raw = Tokenizer.from_file(str(path))
        engines = {}
        for e in args.engines:
            t0 = time.perf_counter()
            if e == "tractable_gcd":
                engines[e] = Tractable(vocab, "gcd")
            elif e == "tractable_lcd":
                engines[e] = Tractable(vocab, "lcd")
            elif e == "xgrammar":
                engines[e] = XGrammar(hf, V, eos)
            elif e == "outlines_core":
                engines[e] = OutlinesCore(vocab, V, eos)
            elif e == "llguidance":
                engines[e] = LLGuidance(hf, V, eos)
            print(f"[{vname}] {e} setup {1e3 * (time.perf_counter() - t0):.0f} ms", flush=True)
        gen = torch.Generator().manual_seed(0)
        logits_of = {B: torch.randn(B, V, generator=gen) for B in args.batches}
        first_apply_ms = {}
        for eng in engines.values():
            eng.compile(args.patterns[0])
        for B in args.batches:  # torch.compile'd applies compile on their first call
            for e, eng in engines.items():
                eng.new(B, 2)
                x = logits_of[B].clone()
                t0 = time.perf_counter()
                eng.apply(x)
                first_apply_ms[(e, B)] = (time.perf_counter() - t0) * 1e3
                print(f"[{vname}] {e} B={B} first apply {first_apply_ms[(e, B)]:.1f} ms",
                      flush=True)
        for pname in args.patterns:
            kind, spec, text, novel_text = case(pname)
            if spec is None:
                print(f"[{vname}] {pname}: JSONSchemaBench data not found, skipped", flush=True)
                continue
            tokens = raw.encode(text, add_special_tokens=False).ids
            assert raw.decode(tokens) == text
            novel = raw.encode(novel_text, add_special_tokens=False).ids
            assert raw.decode(novel) == novel_text
            compile_ms = {e: eng.compile(pname) for e, eng in engines.items()}
            for B in args.batches:
                data = {e: {"cold": [], "warm": [], "adv": [], "adv_cold": [], "novel": [],
                            "apply": [], "cold_apply": [], "novel_apply": [], "apply_new": [],
                            "cold_apply_new": [], "novel_apply_new": []} for e in engines}
                names = list(engines)
                for w in range(args.walks):
                    # rotate the engine order each walk: the engine right after another one's
                    # walk finds cold caches (measured: +20-40 us on its first step)
                    order = names[w % len(names):] + names[: w % len(names)]
                    for e in order:
                        eng = engines[e]
                        if w == 0 and e in ("tractable_gcd", "tractable_lcd") and B == 1:
                            eng.compile(pname)  # cold = empty caches (fresh automaton)
                        fills, advs, applies, news = walk(eng, tokens, eos, B, logits_of[B])
                        data[e]["cold" if w == 0 else "warm"].extend(fills)
                        data[e]["adv" if w > 0 else "adv_cold"].extend(advs)
                        if w == 0:
                            data[e]["cold_apply"].extend(_with_apply(fills, applies))
                            data[e]["cold_apply_new"].extend(_with_apply(fills, news))
                        else:
                            data[e]["apply"].extend(applies)
                            data[e]["apply_new"].extend(news)
                for e in names[::-1]:  # the novel path, once, after the warm walks
                    fills, _, applies, news = walk(engines[e], novel, eos, B, logits_of[B])
                    data[e]["novel"].extend(fills)
                    data[e]["novel_apply"].extend(_with_apply(fills, applies))
                    data[e]["novel_apply_new"].extend(_with_apply(fills, news))
                for e in engines:
                    cell = {
                        "vocab": vname, "pattern": pname, "engine": e, "batch": B,
                        "steps": len(tokens) + 1, "compile_ms": compile_ms[e],
                        "warm": H.median_p90_us(data[e]["warm"], 1e-3),  # ns → µs
                        "cold": H.median_p90_us(data[e]["cold"], 1e-3),
                        "advance": H.median_p90_us(data[e]["adv"], 1e-3),
                        "advance_cold": H.median_p90_us(data[e]["adv_cold"], 1e-3),
                        "novel": H.median_p90_us(data[e]["novel"], 1e-3),
                        "apply": H.median_p90_us(data[e]["apply"], 1e-3),
                        "cold_mask_apply": H.median_p90_us(data[e]["cold_apply"], 1e-3),
                        "novel_mask_apply": H.median_p90_us(data[e]["novel_apply"], 1e-3),
                        "first_apply_ms": first_apply_ms[(e, B)],
                        "samples_apply_ns": data[e]["apply"],
                        "samples_cold_mask_apply_ns": data[e]["cold_apply"],
                        "samples_novel_mask_apply_ns": data[e]["novel_apply"],
                        "samples_novel_ns": data[e]["novel"],
                        "samples_warm_ns": data[e]["warm"], "samples_cold_ns": data[e]["cold"],
                    }
                    if data[e]["apply_new"]:  # tractable: its apply into a new tensor
                        for k in ("apply_new", "cold_apply_new", "novel_apply_new"):
                            key = k if k == "apply_new" else k.replace("apply_new",
                                                                        "mask_apply_new")
                            cell[key] = H.median_p90_us(data[e][k], 1e-3)
                            cell[f"samples_{key}_ns"] = data[e][k]
                    if e.startswith("tractable"):
                        cell["automaton"] = engines[e].A.stats() | {"built_by": engines[e].how}
                    cells.append(cell)
                    w_ = cell["warm"]
                    print(f"[{vname}] {pname:13s} B={B:<2d} {e:14s} warm med "
                          f"{w_['median_us']:8.1f} us  p90 {w_['p90_us']:8.1f} us", flush=True)
    return {
        "command": "python bench/mask_bench.py " + " ".join(sys.argv[1:]),
        "date": H.utc_now(),
        "machine": H.machine(threads=torch.get_num_threads()),
        "load_avg_at_end": H.loadavg(),
        "versions": H.versions("torch", "numpy", "xgrammar", "outlines_core", "llguidance",
                             "transformers", "tokenizers", "tractable"),
        "walks": args.walks,
        "novel": {k: case(k)[3] for k in args.patterns},
        "patterns": {k: ({"regex": PATTERNS[k][0]} if k in PATTERNS else
                         {"schema": "/".join(SCHEMAS[k][:2])}) | {"walk": case(k)[2]}
                     for k in args.patterns},
        "cells": cells,
    }


def write_markdown(res: dict, path: Path) -> None:
    cells = res["cells"]

    def get(v, p, e, B):
        for c in cells:
            if (c["vocab"], c["pattern"], c["engine"], c["batch"]) == (v, p, e, B):
                return c
        return None

    def fmt(x):
        return "–" if x is None or x != x else (f"{x:.1f}" if x < 100 else f"{x:.0f}")

    def med_p90(s):
        return f"{fmt(s['median_us'])} / {fmt(s['p90_us'])}"

    def part(c, key):
        return c.get(key) if c else None

    def ratios(g, x) -> list[str]:
        """GCD / xgrammar of two summaries, median and p90 ("–" where one is missing)."""
        if not (g and x):
            return ["–", "–"]
        return [f"{g['median_us'] / x['median_us']:.2f}", f"{g['p90_us'] / x['p90_us']:.2f}"]

    def table(title: str, steps: bool = False) -> list[str]:
        """A section's title, header and rule (vocab, pattern, [steps,] engines, ratios)."""
        first = "| vocab | pattern | " + ("steps | " if steps else "")
        return ["", title, "", first + " | ".join(es) + " | GCD/xgr median | GCD/xgr p90 |",
                "|---|---|" + ("---|" if steps else "") + "---|" * len(es) + "---|---|"]

    vs = list(dict.fromkeys(c["vocab"] for c in cells))
    ps = list(dict.fromkeys(c["pattern"] for c in cells))
    es = list(dict.fromkeys(c["engine"] for c in cells))
    Bs = sorted(set(c["batch"] for c in cells))
    ver = res["versions"]
    lines = [
        "# Per-step full-vocabulary mask latency on CPU: tractable GCD / LCD vs peers",
        "",
        f"- Command: `{res['command']}`",
        f"- Date: {res['date']}; machine: {res['machine']}; load average at end: "
        + ", ".join(f"{x:.1f}" for x in res["load_avg_at_end"])
        + " (the machine is shared with other agents and was loaded during the run: absolute "
        "numbers are noisy; the ratios between engines measured in the same run, interleaved, "
        "are what count)",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in ver.items()),
        f"- {res['walks']} walks per cell (walk 1 cold, the rest warm), engines interleaved walk "
        "by walk in one process (order rotated each walk), `torch.set_num_threads(1)`, "
        "gc off inside walks. Method and "
        "peers' APIs: see the docstring of `bench/mask_bench.py` and "
        "`../shared/reference/peers_cpu.md` §2.",
        "- tractable GCD uses the tight budget n = walk length + 1 (EOS included): remaining "
        "= n − t at step t. LCD ignores the budget. Peers have no budget.",
        "",
        "Patterns and walked strings:",
        "",
    ]
    for k, v in res["patterns"].items():
        what = f"`{v['regex']}`" if "regex" in v else f"JSONSchemaBench `{v['schema']}`"
        lines.append(f"- `{k}`: {what} walking `{v['walk']}`")
    for B in Bs:
        lines += table(f"## Batch {B}: warm mask fill, µs per step (median / p90)", steps=True)
        for v in vs:
            for p in ps:
                row = [v, p]
                steps = None
                vals = {}
                for e in es:
                    c = get(v, p, e, B)
                    if c is None:
                        row.append("–")
                        continue
                    steps = c["steps"]
                    vals[e] = c["warm"]
                    row.append(med_p90(c["warm"]))
                row.insert(2, str(steps))
                row += ratios(vals.get("tractable_gcd"), vals.get("xgrammar"))
                lines.append("| " + " | ".join(row) + " |")
    lines += table("## Cold walk (first walk after compile; tractable's caches empty), batch 1, "
                   "µs median / p90; compile ms")
    for v in vs:
        for p in ps:
            row = [v, p]
            for e in es:
                c = get(v, p, e, 1)
                row.append("–" if c is None else
                           f"{med_p90(c['cold'])}; {fmt(c['compile_ms'])} ms")
            row += ratios(part(get(v, p, "tractable_gcd", 1), "cold"),
                          part(get(v, p, "xgrammar", 1), "cold"))
            lines.append("| " + " | ".join(row) + " |")
    for B in Bs:
        lines += table(f"## Novel path (a second valid string, walked once after the warm "
                       f"walks), batch {B}, µs median / p90")
        for v in vs:
            for p in ps:
                row = [v, p]
                for e in es:
                    c = get(v, p, e, B)
                    row.append("–" if c is None or "novel" not in c else med_p90(c["novel"]))
                row += ratios(part(get(v, p, "tractable_gcd", B), "novel"),
                              part(get(v, p, "xgrammar", B), "novel"))
                lines.append("| " + " | ".join(row) + " |")
    peers = [e for e in es if not e.startswith("tractable")]

    def best_peer(v, p, B, key, gkey=None) -> list[str]:
        """tractable GCD (its ``gkey`` summary, default ``key``) / the best peer (smallest
        median; smallest p90), median and p90."""
        g = part(get(v, p, "tractable_gcd", B), gkey or key)
        xs = [part(get(v, p, e, B), key) for e in peers]
        xs = [x for x in xs if x]
        if not (g and xs):
            return ["–", "–"]
        bm = min(x["median_us"] for x in xs)
        b9 = min(x["p90_us"] for x in xs)
        return [f"{g['median_us'] / bm:.2f}", f"{g['p90_us'] / b9:.2f}"]

    if any("cold_mask_apply" in c for c in cells):
        for key, what in (("cold_mask_apply", "cold walk (first walk after compile)"),
                          ("novel_mask_apply", "novel path")):
            for B in Bs:
                new = key.replace("apply", "apply_new")
                lines += ["", f"## Mask + apply (the processor's path), {what}, batch {B}, "
                          "µs per step median / p90 (every engine's apply in place; "
                          "\"GCD new\": tractable GCD's apply into a new tensor, the "
                          "processor's default)", "",
                          "| vocab | pattern | " + " | ".join(es)
                          + " | GCD new | GCD / best peer median | GCD / best peer p90 "
                          "| GCD new / best peer median | GCD new / best peer p90 |",
                          "|---|---|" + "---|" * len(es) + "---|---|---|---|---|"]
                for v in vs:
                    for p in ps:
                        row = [v, p]
                        for e in es:
                            c = get(v, p, e, B)
                            row.append("–" if c is None or key not in c else med_p90(c[key]))
                        g = get(v, p, "tractable_gcd", B)
                        row.append("–" if g is None or new not in g else med_p90(g[new]))
                        row += best_peer(v, p, B, key) + best_peer(v, p, B, key, new)
                        lines.append("| " + " | ".join(row) + " |")
        lines += ["", "## Apply alone (warm walks), µs per step median / p90; first call ms "
                  "(a torch.compile'd apply compiles then)", "",
                  "| vocab | batch | " + " | ".join(es) + " | GCD new |",
                  "|---|---|" + "---|" * (len(es) + 1)]
        for v in vs:
            for B in Bs:
                row = [v, str(B)]
                for e in es:
                    cs = [c for c in cells if (c["vocab"], c["engine"], c["batch"]) == (v, e, B)
                          and "apply" in c]
                    if not cs:
                        row.append("–")
                        continue
                    allx = [x for c in cs for x in c["samples_apply_ns"]]
                    st = H.median_p90_us(allx, 1e-3)
                    row.append(f"{med_p90(st)}; first {fmt(cs[0]['first_apply_ms'])} ms")
                cs = [c for c in cells if (c["vocab"], c["engine"], c["batch"])
                      == (v, "tractable_gcd", B) and "samples_apply_new_ns" in c]
                allx = [x for c in cs for x in c["samples_apply_new_ns"]]
                row.append(med_p90(H.median_p90_us(allx, 1e-3)) if allx else "–")
                lines.append("| " + " | ".join(row) + " |")
    advance_tables = [
        ("## Advance (accept one token), batch 1, warm median µs",
         lambda c: fmt(c["advance"]["median_us"])),
        ("## Advance (accept one token) in the cold walk, batch 1, µs median / p90 (a first-time "
         "advance interns a new state set)",
         lambda c: "–" if "advance_cold" not in c else med_p90(c["advance_cold"])),
    ]
    for title, cell_text in advance_tables:
        lines += ["", title, "", "| vocab | pattern | " + " | ".join(es) + " |",
                  "|---|---|" + "---|" * len(es)]
        for v in vs:
            for p in ps:
                row = [v, p]
                for e in es:
                    c = get(v, p, e, 1)
                    row.append("–" if c is None else cell_text(c))
                lines.append("| " + " | ".join(row) + " |")
    tr = [c for c in cells if c["engine"] == "tractable_gcd" and c["batch"] == Bs[0]]
    if tr:
        lines += ["", "tractable automata: " + "; ".join(
            f"{c['vocab']}/{c['pattern']}: {c['automaton']['states']} states, "
            f"{c['automaton']['edges']} edges, built by {c['automaton']['built_by']}"
            for c in tr)]
    lines += ["", "Raw per-step samples: `masks_cpu.json` (same folder).", ""]
    path.write_text("\n".join(lines))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocabs", nargs="+", default=["llama3", "qwen3"])
    ap.add_argument("--patterns", nargs="+", default=[*PATTERNS, *SCHEMAS])
    ap.add_argument("--engines", nargs="+", default=list(ENGINES))
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--walks", type=int, default=10)
    ap.add_argument("--out", default=str(H.RESULTS / "masks_cpu"))
    args = ap.parse_args(argv)
    res = run(args)
    out = Path(args.out)
    H.save_json(out.with_suffix(".json"), res, indent=None)  # creates out.parent
    write_markdown(res, out.with_suffix(".md"))
    print(f"wrote {out.with_suffix('.md')} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
