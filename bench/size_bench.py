"""Compiled size: a saved :class:`TokenAutomaton` vs xgrammar's serialized compiled grammar.

What a server that keeps compiled constraints on disk (or ships them between processes) stores
per constraint.  For each case and vocabulary, in one run:

* **tractable** — ``A.save(path)`` (safetensors, format 2: the token-set rows and index
  tensors deflated), the file's size in bytes; beside it ``A.memory_bytes()["total"]`` (the
  tensors held in memory while masking);
* **xgrammar** — ``GrammarCompiler.compile_*(...)``, then ``CompiledGrammar.serialize_json()``
  (its documented serialized form: grammar + adaptive token-mask cache), its UTF-8 length; beside
  it the same JSON deflated (zlib level 6, what format 2 uses for our tensors) and
  ``memory_size_bytes``.

llguidance and outlines-core are not measured: llguidance keeps no compiled form (it builds its
lexer lazily from the grammar text per matcher); outlines-core's ``Index`` has no serialized form
except ``pickle``.

Cases: the four regexes of ``compile_bench.py`` and the first ``--per-subset`` distinct schemas of
JSONSchemaBench subsets, each in the JSON languages both engines offer: **spec** (Draft 2020-12,
unlisted properties allowed; ours ``canonical=True``, xgrammar ``strict_mode=False``, compact),
**strict** (unlisted properties never generated; ours ``strict=True``, xgrammar default
``strict_mode=True``, compact) and **every** (ours ``canonical=False``: every RFC 8259 spelling;
xgrammar ``strict_mode=False, any_whitespace=True``).  Each engine compiles in its own worker
process per vocabulary with a time limit; a timeout or error is recorded, never dropped.

    OMP_NUM_THREADS=1 python bench/size_bench.py --vocabs llama3 qwen3 --per-subset 8

Writes ``bench/results/compiled_size.{md,json}``: per case both sizes and the ratio
tractable / xgrammar; per (vocabulary, language) the median, p90 and max of the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import zlib

from compile_bench import REGEXES
from harness import (
    SHARED,
    WorkerProcess,
    command_line,
    environment,
    quantile,
    tokenizer_path,
    write_result,
)
from jsonschemabench_coverage import load

SUBSETS = ["Glaiveai2K", "Github_medium", "Kubernetes", "JsonSchemaStore"]
LANGUAGES = ["spec", "strict", "every"]
# the bound (21): a saved automaton at most this many times xgrammar's serialized grammar
GOAL = 2.0


def _tractable_worker(inq, outq, vocab_name: str) -> None:
    import warnings

    from tractable.fsa.json_schema import compile_json_schema
    from tractable.fsa.regex import compile_regex
    from tractable.fsa.vocabulary import TokenVocabulary

    vocab = TokenVocabulary.from_tokenizer_file(tokenizer_path(vocab_name))
    opts = {"spec": {"canonical": True}, "strict": {"canonical": True, "strict": True},
            "every": {"canonical": False}}
    tmp = tempfile.mkdtemp(prefix="size_bench_")
    path = os.path.join(tmp, "a.safetensors")
    outq.put("ready")
    while (item := inq.get()) is not None:
        kind, spec, lang = item
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                A = (compile_regex(spec, vocab) if kind == "regex"
                     else compile_json_schema(json.loads(spec), vocab, **opts[lang]))
            A.save(path)
            outq.put({"status": "ok", "bytes": os.path.getsize(path),
                      "memory_bytes": A.memory_bytes()["total"], "states": A.num_states,
                      "edges": A.num_edges})
        except Exception as e:  # noqa: BLE001 - recorded per case
            outq.put({"status": "error", "why": f"{type(e).__name__}: {str(e)[:200]}"})
    if os.path.exists(path):
        os.remove(path)
    os.rmdir(tmp)


def _xgrammar_worker(inq, outq, vocab_name: str) -> None:
    import xgrammar as xgr
    from tractable.fsa.vocabulary import TokenVocabulary
    from transformers import PreTrainedTokenizerFast

    path = tokenizer_path(vocab_name)
    tv = TokenVocabulary.from_tokenizer_file(path)
    tok = PreTrainedTokenizerFast(tokenizer_file=str(path))
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=tv.size,
                                              stop_token_ids=list(tv.eos_token_ids))
    comp = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    outq.put("ready")
    while (item := inq.get()) is not None:
        kind, spec, lang = item
        try:
            g = (comp.compile_regex(spec) if kind == "regex" else comp.compile_json_schema(
                spec, strict_mode=lang == "strict", any_whitespace=lang == "every"))
            js = g.serialize_json().encode()
            outq.put({"status": "ok", "bytes": len(js), "zlib_bytes": len(zlib.compress(js, 6)),
                      "memory_bytes": int(g.memory_size_bytes)})
        except Exception as e:  # noqa: BLE001 - recorded per case
            outq.put({"status": "error", "why": f"{type(e).__name__}: {str(e)[:200]}"})


def cases(per_subset: int, languages: list[str]) -> list[tuple[str, str, str, str]]:
    """``(case id, kind, spec, language)``: the regexes once (language ``regex``), then the first
    ``per_subset`` distinct schemas of each subset in each language."""
    out = [(f"regex {name}", "regex", pattern, "regex") for name, pattern in REGEXES.items()]
    for sub in SUBSETS:
        seen: set[str] = set()
        for rec in load(sub, SHARED / "jsonschemabench"):
            text = json.dumps(rec["schema"], sort_keys=True)
            if text in seen:
                continue
            seen.add(text)
            out += [(rec["id"], "schema", text, lang) for lang in languages]
            if len(seen) >= per_subset:
                break
    return out


def run(args) -> dict:
    rows = []
    for vocab in args.vocabs:
        workers = {"tractable": WorkerProcess(_tractable_worker, vocab, ready=True),
                   "xgrammar": WorkerProcess(_xgrammar_worker, vocab, ready=True)}
        for cid, kind, spec, lang in cases(args.per_subset, args.languages):
            row = {"vocab": vocab, "case": cid, "language": lang}
            for name, w in workers.items():
                got = w.ask((kind, spec, lang), args.timeout, poll=1.0)
                row[name] = got if got is not None else {"status": "timeout", "why": w.why}
            print(json.dumps({k: row[k] for k in ("vocab", "case", "language")}),
                  {n: row[n].get("bytes", row[n]["status"]) for n in workers}, flush=True)
            rows.append(row)
        for w in workers.values():
            w.close()
    return {"meta": {**environment("xgrammar", "numpy", "torch", "safetensors"),
                     "command": command_line("size_bench.py", args),
                     "per_subset": args.per_subset, "timeout_s": args.timeout},
            "rows": rows}


def _kib(b: float) -> str:
    return f"{b / 1024:,.1f}"


def report(res: dict) -> str:
    m = res["meta"]
    lines = [
        "# Compiled size: saved TokenAutomaton vs xgrammar's serialized grammar",
        "",
        f"- command: `{m['command']}`",
        f"- date: {m['date']}; commit {m['commit']}",
        f"- machine: {m['machine']}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in m['versions'].items())}",
        f"- time limit per compile: {m['timeout_s']:g} s (each engine in its own worker)",
        "- **tractable** = bytes of `A.save(path)` (safetensors, format 2, token-set rows "
        "deflated); **xgrammar** = bytes of `CompiledGrammar.serialize_json()`; "
        "**xgrammar zlib** = that JSON deflated (zlib level 6); memory = "
        "`A.memory_bytes()['total']` / `memory_size_bytes`.  Ratio = tractable / xgrammar "
        f"(the issue's bound: at most {GOAL:g}).  Raw numbers in `compiled_size.json`.",
        "",
        "## Summary (cases both engines compiled)",
        "",
        "| vocab | language | n | ratio median | ratio p90 | ratio max | over 2× | "
        "ratio to xgrammar zlib: median | p90 | max | only tractable | only xgrammar |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = res["rows"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["vocab"], r["language"]), []).append(r)
    for (vocab, lang), rs in groups.items():
        both = [r for r in rs if r["tractable"]["status"] == "ok"
                and r["xgrammar"]["status"] == "ok"]
        ratio = [r["tractable"]["bytes"] / r["xgrammar"]["bytes"] for r in both]
        rz = [r["tractable"]["bytes"] / r["xgrammar"]["zlib_bytes"] for r in both]
        only_t = sum(r["tractable"]["status"] == "ok" and r["xgrammar"]["status"] != "ok"
                     for r in rs)
        only_x = sum(r["xgrammar"]["status"] == "ok" and r["tractable"]["status"] != "ok"
                     for r in rs)
        if not both:
            lines.append(f"| {vocab} | {lang} | 0 | – | – | – | – | – | – | – | {only_t} | "
                         f"{only_x} |")
            continue
        lines.append(
            f"| {vocab} | {lang} | {len(both)} | {quantile(ratio, .5):.3f} | "
            f"{quantile(ratio, .9):.3f} | {max(ratio):.3f} | {sum(x > GOAL for x in ratio)} | "
            f"{quantile(rz, .5):.2f} | {quantile(rz, .9):.2f} | {max(rz):.2f} | {only_t} | "
            f"{only_x} |")
    lines += [
        "",
        "## Per case (KiB)",
        "",
        "| vocab | case | language | states | tractable file | tractable memory | xgrammar json "
        "| xgrammar zlib | xgrammar memory | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t, x = r["tractable"], r["xgrammar"]
        tf = _kib(t["bytes"]) if t["status"] == "ok" else t["status"]
        tm = _kib(t["memory_bytes"]) if t["status"] == "ok" else "–"
        xj = _kib(x["bytes"]) if x["status"] == "ok" else x["status"]
        xz = _kib(x["zlib_bytes"]) if x["status"] == "ok" else "–"
        xm = _kib(x["memory_bytes"]) if x["status"] == "ok" else "–"
        ratio = (f"{t['bytes'] / x['bytes']:.3f}" if t["status"] == x["status"] == "ok"
                 else "–")
        lines.append(f"| {r['vocab']} | {r['case']} | {r['language']} | {t.get('states', '–')} "
                     f"| {tf} | {tm} | {xj} | {xz} | {xm} | {ratio} |")
    errs = [(r["vocab"], r["case"], r["language"], n, r[n].get("why", ""))
            for r in rows for n in ("tractable", "xgrammar") if r[n]["status"] != "ok"]
    if errs:
        lines += ["", "## Errors and timeouts", ""]
        lines += [f"- {v} {c} ({lang}), {n}: {why}" for v, c, lang, n, why in errs]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocabs", nargs="+", default=["llama3", "qwen3"])
    ap.add_argument("--per-subset", type=int, default=8)
    ap.add_argument("--languages", nargs="+", default=LANGUAGES, choices=LANGUAGES)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--out", default="compiled_size")
    args = ap.parse_args()
    res = run(args)
    write_result(args.out, report(res), raw=res)


if __name__ == "__main__":
    main()
