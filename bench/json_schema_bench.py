"""Compile time per JSON Schema on the Llama-3 vocabulary: tractable vs xgrammar vs outlines-core.

Same schemas, one run, one engine at a time, each compile in a worker process with a time limit
(a timed-out worker is killed and restarted; the tokenizer is loaded once per worker, outside the
timing).  Two languages are compared separately, because the engines' defaults differ:

* **spec** — Draft 2020-12 semantics: properties the schema does not list are allowed where
  ``additionalProperties`` is unspecified (with keys different from the listed names):
  ``tractable`` (``compile_json_schema(schema, vocab)``) vs ``xgrammar_nonstrict``
  (``compile_json_schema(schema, any_whitespace=False, strict_mode=False)``);
* **strict** — unlisted properties are never generated: ``tractable_strict``
  (``compile_json_schema(schema, vocab, strict=True)``) vs ``xgrammar`` (its default
  ``strict_mode=True``) and ``outlines_core`` (``Index(build_regex_from_schema(schema), ...)``,
  whose regexes never allow unlisted properties).

xgrammar runs with ``max_threads=1`` and no cache.  tractable's worker builds the lift's
per-vocabulary tables (``lift.prepare``) and compiles one small schema at start-up, outside the
timing: vocabulary-level precomputation (byte-trie tables, the trie walks of a JSON string's
content, cached per vocabulary), the counterpart of xgrammar's ``TokenizerInfo``.

Subsets: GlaiveAI (Glaiveai2K), Github_medium, Kubernetes of JSONSchemaBench; the first
``--per-subset`` schemas of each (file order).  Reports, per engine and subset: compiled / errors
/ timeouts, and median, p90, max compile seconds over the schemas that engine compiled, and over
the schemas every engine of its language compiled (the fair comparison), with the median of the
per-schema ratios tractable / xgrammar.

Usage: python bench/json_schema_bench.py [--per-subset 30] [--timeout 60]
Writes bench/results/json_schema_compile_time.{md,json,png}; ``--replot`` redraws the PNG from
the JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import queue
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
OUT = ROOT / "bench" / "results"
TOKENIZER = ROOT / "fixtures" / "tokenizers" / "llama3" / "tokenizer.json"
SUBSETS = ["Glaiveai2K", "Github_medium", "Kubernetes"]
ENGINES = ["tractable", "xgrammar_nonstrict", "tractable_strict", "xgrammar", "outlines_core"]
LANGUAGE = {"tractable": "spec", "xgrammar_nonstrict": "spec", "tractable_strict": "strict",
            "xgrammar": "strict", "outlines_core": "strict"}


def _setup(engine: str):
    if engine in ("tractable", "tractable_strict"):
        import warnings

        from tractable.fsa.json_schema import compile_json_schema
        from tractable.fsa.vocabulary import TokenVocabulary

        vocab = TokenVocabulary.from_tokenizer_file(TOKENIZER)
        opts = {"strict": True} if engine == "tractable_strict" else {}

        def run(schema):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                A = compile_json_schema(schema, vocab, **opts)
            return {"states": A.num_states, "edges": A.num_edges}

        from tractable.fsa.lift import prepare

        prepare(vocab)  # per-vocabulary tables, outside the timing (like xgrammar's TokenizerInfo)
        run({"type": "object", "properties": {"a": {"type": "string"}}})  # vocabulary warm-up
        return run
    if engine in ("xgrammar", "xgrammar_nonstrict"):
        import xgrammar as xgr
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
        info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
        comp = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)

        strict = engine == "xgrammar"

        def run(schema):
            comp.compile_json_schema(json.dumps(schema), any_whitespace=False, strict_mode=strict)
            return {}

        return run
    if engine == "outlines_core":
        import outlines_core as oc
        from tractable.fsa.vocabulary import TokenVocabulary

        v = TokenVocabulary.from_tokenizer_file(TOKENIZER)
        m: dict[bytes, list[int]] = {}
        for i, b in enumerate(v.token_bytes):
            if b is not None and i not in v.eos_token_ids:
                m.setdefault(b, []).append(i)
        vocab = oc.Vocabulary(v.eos_token_ids[0], m)

        def run(schema):
            regex = oc.json_schema.build_regex_from_schema(json.dumps(schema))
            oc.Index(regex, vocab)
            return {}

        return run
    raise ValueError(engine)


def _worker(engine, inq, outq):
    run = _setup(engine)
    outq.put("ready")
    while True:
        item = inq.get()
        if item is None:
            return
        sid, schema = item
        t0 = time.perf_counter()
        try:
            extra = run(schema)
            outq.put({"id": sid, "status": "ok", "seconds": time.perf_counter() - t0, **extra})
        except Exception as e:  # noqa: BLE001 - engines raise many types
            outq.put({"id": sid, "status": "error", "seconds": time.perf_counter() - t0,
                      "why": f"{type(e).__name__}: {str(e)[:200]}"})


class Worker:
    def __init__(self, engine: str):
        self.engine = engine
        self._start()

    def _start(self):
        self.inq, self.outq = mp.Queue(), mp.Queue()
        self.p = mp.Process(target=_worker, args=(self.engine, self.inq, self.outq), daemon=True)
        self.p.start()
        assert self.outq.get(timeout=600) == "ready"

    def run(self, sid, schema, timeout):
        self.inq.put((sid, schema))
        try:
            return self.outq.get(timeout=timeout)
        except queue.Empty:
            self.p.kill()
            self.p.join()
            self._start()
            return {"id": sid, "status": "timeout", "seconds": timeout}

    def close(self):
        self.inq.put(None)
        self.p.join(10)


def _ratio(st) -> str:
    return "—" if st is None else f"{st['median']:.2f} ({st['p90']:.2f})"


def _stats(xs):
    if not xs:
        return None
    xs = sorted(xs)
    return {"n": len(xs), "median": statistics.median(xs),
            "p90": xs[min(len(xs) - 1, int(0.9 * len(xs)))], "max": xs[-1]}


def main() -> None:
    from jsonschemabench_coverage import load

    ap = argparse.ArgumentParser()
    ap.add_argument("--per-subset", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--replot", action="store_true", help="redraw the PNG from the JSON")
    args = ap.parse_args()
    if args.replot:
        saved = json.loads((OUT / "json_schema_compile_time.json").read_text())
        plot(saved["results"], list(saved["results"]))
        return
    engines = args.engines.split(",")
    schemas = {sub: [(r["id"], r["schema"]) for _, r in zip(range(args.per_subset), load(sub))]
               for sub in SUBSETS}
    results: dict[str, dict[str, list]] = {}
    for eng in engines:
        w = Worker(eng)
        results[eng] = {}
        for sub in SUBSETS:
            res = [w.run(sid, s, args.timeout) for sid, s in schemas[sub]]
            results[eng][sub] = res
            ok = sum(r["status"] == "ok" for r in res)
            print(f"{eng} {sub}: {ok}/{len(res)} ok", flush=True)
        w.close()
    import importlib.metadata as md

    versions = {k: md.version(k) for k in ("xgrammar", "outlines_core", "torch")}
    meta = {"command": "python bench/json_schema_bench.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "replot"),
        "machine": f"{platform.machine()} shared 2-core VM (~8 agents; timings noisy)",
        "python": platform.python_version(), "versions": versions,
        "date": date.today().isoformat(), "vocabulary": "Llama-3 (128,256 ids)"}
    table = []
    for sub in SUBSETS:
        for eng in engines:
            peers = [e for e in engines if LANGUAGE[e] == LANGUAGE[eng]]
            ok_all = set.intersection(*[
                {r["id"] for r in results[e][sub] if r["status"] == "ok"} for e in peers])
            res = results[eng][sub]
            mine = [r["seconds"] for r in res if r["status"] == "ok"]
            common = [r["seconds"] for r in res if r["id"] in ok_all]
            ratio = None
            ours = "tractable" if LANGUAGE[eng] == "spec" else "tractable_strict"
            if eng.startswith("xgrammar") and ours in engines:
                t = {r["id"]: r["seconds"] for r in results[ours][sub]}
                x = {r["id"]: r["seconds"] for r in res}
                ratio = _stats([t[i] / x[i] for i in ok_all if x[i] > 0])
            table.append({"subset": sub, "engine": eng, "language": LANGUAGE[eng],
                          "schemas": len(res), "ok": len(mine),
                          "errors": sum(r["status"] == "error" for r in res),
                          "timeouts": sum(r["status"] == "timeout" for r in res),
                          "own": _stats(mine), "common": _stats(common),
                          "ratio_tractable_over_this": ratio})
    (OUT / "json_schema_compile_time.json").write_text(json.dumps(
        {"meta": meta, "table": table, "results": results}, indent=0))

    def f(st, k):
        return "—" if st is None else f"{st[k]:.3f}"

    L = ["# JSON Schema compile time on the Llama-3 vocabulary (seconds per schema)", "",
         f"Command: `{meta['command']}`  ", f"Machine: {meta['machine']}; Python "
         f"{meta['python']}; {', '.join(f'{k} {v}' for k, v in versions.items())}; "
         f"{meta['date']}.", "",
         "Each compile runs in a worker process with the time limit; the vocabulary/tokenizer is "
         "loaded once per worker outside the timing. Languages: **spec** = Draft 2020-12 "
         "(unlisted properties allowed where `additionalProperties` is unspecified): tractable "
         "vs xgrammar `strict_mode=False`; **strict** = unlisted properties never generated: "
         "tractable `strict=True` vs xgrammar (default `strict_mode=True`) and outlines-core. "
         "tractable errors = unsupported keywords (never dropped silently); xgrammar "
         "`max_threads=1`, no cache, `any_whitespace=False`; outlines-core = regex + Index. "
         "\"common\" = schemas every engine of the same language compiled (the fair "
         "comparison); ratio = median (p90) over those schemas of tractable's time / this "
         "engine's time.", "",
         "| subset | language | engine | compiled | errors | timeouts | median (own) | p90 (own) "
         "| max (own) | n common | median (common) | p90 (common) | max (common) | tractable / "
         "this: median (p90) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        rt = r["ratio_tractable_over_this"]
        L.append(f"| {r['subset']} | {r['language']} | {r['engine']} | {r['ok']}/{r['schemas']} "
                 f"| {r['errors']} | "
                 f"{r['timeouts']} | {f(r['own'], 'median')} | {f(r['own'], 'p90')} | "
                 f"{f(r['own'], 'max')} | {r['common']['n'] if r['common'] else 0} | "
                 f"{f(r['common'], 'median')} | {f(r['common'], 'p90')} | "
                 f"{f(r['common'], 'max')} | "
                 f"{_ratio(rt)} |")
    (OUT / "json_schema_compile_time.md").write_text("\n".join(L) + "\n")
    plot(results, engines)


def plot(results: dict, engines: list[str]) -> None:
    """Box plot per subset of the compile seconds of each engine (compiled schemas only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SUBSETS), figsize=(4 * len(SUBSETS), 4.2), sharey=True)
    for ax, sub in zip(axes, SUBSETS):
        data = [[r["seconds"] for r in results[e][sub] if r["status"] == "ok"] or [float("nan")]
                for e in engines]
        ax.boxplot(data, tick_labels=engines)
        ax.tick_params(axis="x", labelrotation=35)
        ax.set_yscale("log")
        ax.set_title(sub)
    axes[0].set_ylabel("compile seconds (log)")
    fig.tight_layout()
    fig.savefig(OUT / "json_schema_compile_time.png", dpi=110)


if __name__ == "__main__":
    main()
