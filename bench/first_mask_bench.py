"""Time to first mask in a fresh process: tractable vs xgrammar, llguidance, outlines-core.

What a server (or a CLI run) pays before it can mask its first token: the interpreter, the
engine's imports, the tokenizer, the engine's per-vocabulary set-up, the compile of one
constraint and the first full-vocabulary mask.  Each (engine, vocabulary, case) runs in its own
fresh ``python`` child; the children are alternated (engine order rotated per repetition) and
each cell's median and p90 over ``--reps`` runs are reported, with the ratio to xgrammar.

    OMP_NUM_THREADS=1 python bench/first_mask_bench.py --reps 3

Stages, timed inside the child (``perf_counter`` from its first line), and ``wall`` = the
child's whole life as the parent sees it (interpreter start included):

* ``import`` — the engine's modules (and torch, numpy, transformers where the engine needs
  them: xgrammar and llguidance take a Hugging Face ``PreTrainedTokenizerFast``, as their
  documented set-up does; outlines-core gets the token bytes from ``tokenizers`` directly);
* ``vocabulary`` — the tokenizer file loaded and the engine's vocabulary object built (tractable:
  ``TokenVocabulary.from_tokenizer_file`` + its trie, from the per-machine cache, filled once
  before the timed runs; ``tractable_nocache``: the same with ``TRACTABLE_CACHE_DIR=off``;
  xgrammar: ``TokenizerInfo`` from a ``PreTrainedTokenizerFast``; llguidance:
  ``llguidance.hf.from_tokenizer``; outlines-core: ``Vocabulary`` from the token bytes);
* ``compile`` — one constraint, caches off where an engine has one (tractable's compile cache is
  per process, so it is cold here);
* ``mask`` — the first mask at the start state (tractable: GCD ``allowed_packed``; llguidance
  builds its lexer lazily here).

Cases: two regexes and two JSON Schemas (the first record of JSONSchemaBench Glaiveai2K and
of Github_medium).  Engines compile the same constraint in their default JSON language (ours:
canonical; xgrammar: its default; llguidance: flexible whitespace; outlines-core: its regex).
Writes ``bench/results/first_mask.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from harness import RESULTS, ROOT, machine, quantile, save_rows, tokenizer_path, utc_now, versions

ENGINES = ["tractable", "tractable_nocache", "xgrammar", "llguidance", "outlines_core"]
VOCABS = ["llama3", "qwen3"]
REGEXES = {
    "regex iso_date": r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    "regex email": r"[a-z0-9._%+-]{1,20}@[a-z0-9-]{1,20}\.(com|org|net)",
}
SCHEMA_SUBSETS = ["Glaiveai2K", "Github_medium"]
STAGES = ("import", "vocabulary", "compile", "mask")

_CHILD = r'''
import json, sys, time
t0 = time.perf_counter()
engine, tok_path, kind, spec = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
st = {}
def mark(name):
    st[name] = time.perf_counter() - t0 - sum(st.values())
if engine == "tractable":
    import torch
    from tractable.fsa.vocabulary import TokenVocabulary
    from tractable.fsa.regex import compile_regex
    from tractable.fsa.json_schema import compile_json_schema
    mark("import")
    v = TokenVocabulary.from_tokenizer_file(tok_path)
    _ = v.trie
    mark("vocabulary")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        A = compile_regex(spec, v) if kind == "regex" else compile_json_schema(json.loads(spec), v)
    mark("compile")
    m = A.allowed_packed(A.start(1), 64, "gcd")
    mark("mask")
elif engine == "xgrammar":
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerFast
    mark("import")
    tok = PreTrainedTokenizerFast(tokenizer_file=tok_path)
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
    mark("vocabulary")
    comp = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    cg = comp.compile_regex(spec) if kind == "regex" else comp.compile_json_schema(spec)
    mark("compile")
    buf = xgr.allocate_token_bitmask(1, info.vocab_size)
    xgr.GrammarMatcher(cg).fill_next_token_bitmask(buf)
    mark("mask")
elif engine == "llguidance":
    import llguidance, llguidance.hf, llguidance.torch
    from transformers import PreTrainedTokenizerFast
    mark("import")
    tok = PreTrainedTokenizerFast(tokenizer_file=tok_path)
    lltok = llguidance.hf.from_tokenizer(tok)
    mark("vocabulary")
    M = llguidance.LLMatcher
    g = M.grammar_from_regex(spec) if kind == "regex" else M.grammar_from_json_schema(spec)
    m = M(lltok, g, log_level=0)
    if m.is_error():
        raise RuntimeError(m.get_error())
    mark("compile")
    buf = llguidance.torch.allocate_token_bitmask(1, lltok.vocab_size)
    llguidance.torch.fill_next_token_bitmask(m, buf, 0)
    if m.is_error():
        raise RuntimeError(m.get_error())
    mark("mask")
elif engine == "outlines_core":
    import outlines_core as oc
    from tokenizers import Tokenizer
    mark("import")
    t = Tokenizer.from_file(tok_path)
    # byte-level BPE (Llama-3, Qwen3): GPT-2's printable stand-ins back to bytes
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    u2b = {chr(c): b for b, c in zip(bs, cs)}
    special = {a.content for a in t.get_added_tokens_decoder().values()}
    eos = next(t.token_to_id(x) for x in ("<|eot_id|>", "<|im_end|>", "<|endoftext|>")
               if t.token_to_id(x) is not None)
    d = {}
    for s_, i in t.get_vocab().items():
        if s_ not in special and i != eos:
            d.setdefault(bytes(u2b[ch] for ch in s_), []).append(i)
    voc = oc.Vocabulary(eos, d)
    mark("vocabulary")
    regex = spec if kind == "regex" else oc.json_schema.build_regex_from_schema(spec)
    index = oc.Index(regex, voc)
    mark("compile")
    g = oc.Guide(index)
    g.get_tokens()
    mark("mask")
print(json.dumps(st))
'''


def _cases() -> dict[str, tuple[str, str]]:
    from jsonschemabench_coverage import load

    out = {name: ("regex", p) for name, p in REGEXES.items()}
    for sub in SCHEMA_SUBSETS:
        rec = next(iter(load(sub)))
        out[f"schema {sub}/{rec['id']}"] = ("json", json.dumps(rec["schema"]))
    return out


def _run(engine: str, vocab: str, kind: str, spec: str, timeout: float) -> dict:
    t = time.perf_counter()
    env_path = str(Path(__file__).resolve().parent)
    env = _env()
    if engine == "tractable_nocache":  # the per-machine vocabulary cache off
        engine, env["TRACTABLE_CACHE_DIR"] = "tractable", "off"
    try:
        p = subprocess.run([sys.executable, "-c", _CHILD, engine, str(tokenizer_path(vocab)),
                            kind, spec], capture_output=True, text=True, timeout=timeout,
                           cwd=env_path, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout > {timeout:.0f} s"}
    wall = time.perf_counter() - t
    last = (p.stdout.strip().splitlines() or [""])[-1]
    if p.returncode != 0 or not last.startswith("{"):
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return {"wall": wall, **json.loads(last)}


def _env() -> dict:
    import os

    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engines", nargs="+", default=ENGINES)
    ap.add_argument("--vocabs", nargs="+", default=VOCABS)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=str(RESULTS / "first_mask"))
    args = ap.parse_args()
    cases = _cases()
    rows: list[dict] = []
    if "tractable" in args.engines:  # the machine's vocabulary cache filled once, untimed
        for vocab in args.vocabs:
            _run("tractable", vocab, "regex", "a", args.timeout)
    for rep in range(args.reps):
        k = rep % len(args.engines)
        order = args.engines[k:] + args.engines[:k]
        for vocab in args.vocabs:
            for case, (kind, spec) in cases.items():
                for eng in order:
                    r = _run(eng, vocab, kind, spec, args.timeout)
                    r.update(engine=eng, vocab=vocab, case=case, rep=rep)
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    meta = {"command": "OMP_NUM_THREADS=1 python bench/first_mask_bench.py "
                       + " ".join(sys.argv[1:]),
            "machine": machine(1), **versions("torch", "xgrammar", "llguidance",
                                               "outlines_core", "transformers", "tokenizers"),
            "date": utc_now(), "engines": args.engines}
    out = Path(args.out)
    save_rows(out, meta, rows)
    out.with_suffix(".md").write_text(report(meta, rows))
    print(out.with_suffix(".md").read_text())


def report(meta: dict, rows: list[dict]) -> str:
    engines = meta["engines"]
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r["vocab"], r["case"], r["engine"]), []).append(r)
    vers = ", ".join(f"{k} {meta[k]}" for k in ("python", "torch", "xgrammar", "llguidance",
                                                  "outlines_core", "transformers") if k in meta)
    lines = ["# Time to first mask in a fresh process", "",
             f"- command: `{meta['command']}`", f"- machine: {meta['machine']}",
             f"- versions: {vers}", f"- date: {meta['date']}", "",
             "Each cell: a fresh `python` child per run, engines alternated; seconds, median "
             "(p90) over the runs.  `wall` = the child's life as the parent sees it (interpreter "
             "start included); the stages are timed inside it (see the script's docstring).  "
             "Ratio = wall median / xgrammar's.", "",
             "| vocab | case | engine | wall | import | vocabulary | compile | first mask "
             "| wall / xgrammar |", "|---|---|---|---|---|---|---|---|---|"]

    def cell(rs, key):
        xs = [r[key] for r in rs if key in r]
        if not xs:
            return "—"
        return f"{quantile(xs, 0.5):.2f} ({quantile(xs, 0.9):.2f})"

    wins = total = 0
    for vocab in dict.fromkeys(r["vocab"] for r in rows):
        for case in dict.fromkeys(r["case"] for r in rows):
            ref = [r["wall"] for r in cells.get((vocab, case, "xgrammar"), []) if "wall" in r]
            ref_med = quantile(ref, 0.5) if ref else None
            for eng in engines:
                rs = cells.get((vocab, case, eng), [])
                errs = [r["error"] for r in rs if "error" in r]
                walls = [r["wall"] for r in rs if "wall" in r]
                ratio = (f"{quantile(walls, 0.5) / ref_med:.2f}×" if walls and ref_med
                         else "—")
                if eng == "tractable" and walls and ref_med:
                    total += 1
                    wins += quantile(walls, 0.5) <= ref_med
                stages = " | ".join(cell(rs, k) for k in STAGES)
                err = f" ({len(errs)} failed: {errs[0]})" if errs else ""
                lines.append(f"| {vocab} | {case} | {eng}{err} | {cell(rs, 'wall')} | {stages} "
                             f"| {ratio} |")
    lines += ["", f"tractable's median wall at or below xgrammar's in {wins} of {total} cells."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    main()
