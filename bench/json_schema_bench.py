"""Compile time per JSON Schema on the Llama-3 vocabulary: tractable vs xgrammar, llguidance and
outlines-core.

Same schemas, one run, one engine at a time, each compile in a worker process with a time limit
(a timed-out worker is killed and restarted; the tokenizer is loaded once per worker, outside the
timing).  Engines are compared within a *group* of comparable languages, because their defaults
differ:

* **spec** — Draft 2020-12 semantics (properties the schema does not list are allowed where
  ``additionalProperties`` is unspecified, with keys different from the listed names), compact
  JSON: ``tractable`` (``compile_json_schema(schema, vocab, canonical=True)``, the canonical
  serialization of each instance) vs ``xgrammar_nonstrict``
  (``compile_json_schema(schema, any_whitespace=False, separators=(",", ":"),
  strict_mode=False)``; without ``separators`` xgrammar writes ``", "`` and ``": "``);
* **every** — Draft 2020-12 semantics, many serializations: ``tractable_every``
  (``compile_json_schema(schema, vocab, canonical=False)``: every RFC 8259 serialization — any
  whitespace, every number spelling, every string escape) vs ``xgrammar_any_ws``
  (``any_whitespace=True, strict_mode=False``: any whitespace between tokens, but only some
  number spellings, e.g. ``integer`` only as ``-?(0|[1-9][0-9]*)``) and ``llguidance``
  (``LLMatcher(tokenizer, LLMatcher.grammar_from_json_schema(schema))`` with its default options:
  any whitespace between tokens, ``integer`` only as ``-?(0|[1-9][0-9]*)``, no ``\\uXXXX``
  escapes; the timing includes the first ``compute_bitmask``, since llguidance builds its lexer
  lazily, at mask time);
* **strict** — unlisted properties are never generated: ``tractable_strict``
  (``compile_json_schema(schema, vocab, strict=True)``) vs ``xgrammar`` (its default
  ``strict_mode=True``, ``any_whitespace=False``, compact separators) and ``outlines_core``
  (``Index(build_regex_from_schema(schema), ...)``, whose regexes never allow unlisted
  properties).

xgrammar runs with ``max_threads=1`` and no cache.  tractable's worker builds the lift's
per-vocabulary tables (``lift.prepare``) and compiles one small schema at start-up, outside the
timing: vocabulary-level precomputation (byte-trie tables, the trie walks of a JSON string's
content, cached per vocabulary), the counterpart of xgrammar's ``TokenizerInfo`` and
llguidance's ``LLTokenizer`` (built once per worker, also outside the timing).

Subsets: GlaiveAI (Glaiveai2K), Github_medium, Kubernetes of JSONSchemaBench; the first
``--per-subset`` schemas of each (file order).  Reports, per engine and subset: compiled / errors
/ timeouts, and median, p90, max compile seconds over the schemas that engine compiled, and over
the schemas every engine of its group compiled (the fair comparison), with the median of the
per-schema ratios tractable / this engine.  Then, per subset, the cost of the every-serialization
language: ``tractable_every`` / ``tractable`` (median, p90 and total over the schemas both
compiled), and ``tractable_every`` vs ``xgrammar_any_ws`` and vs ``llguidance`` (ratio of
medians over the schemas both compiled).

Usage: python bench/json_schema_bench.py [--per-subset 30] [--timeout 60] [--engines a,b,...]
Writes bench/results/json_schema_compile_time.{md,json,png}; ``--replot`` redraws the PNG from
the JSON.
"""

from __future__ import annotations

import argparse
import json
import time

from harness import (
    RESULTS,
    WorkerProcess,
    command_line,
    load_vocabulary,
    machine,
    quantile,
    save_json,
    tokenizer_path,
    utc_now,
    versions,
)
from jsonschemabench_coverage import load

OUT = RESULTS
SUBSETS = ["Glaiveai2K", "Github_medium", "Kubernetes"]
ENGINES = ["tractable", "xgrammar_nonstrict", "tractable_every", "xgrammar_any_ws", "llguidance",
           "tractable_strict", "xgrammar", "outlines_core"]
# comparison group of each engine (engines of one group are compared on their common schemas)
GROUP = {"tractable": "spec", "xgrammar_nonstrict": "spec",
         "tractable_every": "every", "xgrammar_any_ws": "every", "llguidance": "every",
         "tractable_strict": "strict", "xgrammar": "strict", "outlines_core": "strict"}
OURS = {"spec": "tractable", "every": "tractable_every", "strict": "tractable_strict"}
# the language each engine compiles, as shown in the table
LANGUAGE = {"tractable": "spec, canonical", "xgrammar_nonstrict": "spec, compact",
            "tractable_every": "spec, every serialization",
            "xgrammar_any_ws": "spec, any whitespace", "llguidance": "spec, flexible whitespace",
            "tractable_strict": "strict, canonical", "xgrammar": "strict, compact",
            "outlines_core": "strict, compact"}
# compiled once by every worker before the timed schemas (the same for every engine)
WARM_UP = {"type": "object", "properties": {
    "a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "number"},
    "d": {"type": "boolean"}, "e": {"type": "array", "items": {"enum": ["x", "y"]}}},
    "required": ["a"]}


def _setup(engine: str):
    if engine in ("tractable", "tractable_every", "tractable_strict"):
        import warnings

        from tractable.fsa.json_schema import compile_json_schema

        vocab = load_vocabulary("llama3")
        opts = {"tractable": {"canonical": True}, "tractable_every": {"canonical": False},
                "tractable_strict": {"canonical": True, "strict": True}}[engine]

        def run(schema):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                A = compile_json_schema(schema, vocab, **opts)
            return {"states": A.num_states, "edges": A.num_edges}

        from tractable.fsa.lift import prepare

        prepare(vocab)  # per-vocabulary tables, outside the timing (like xgrammar's TokenizerInfo)
        run(WARM_UP)  # vocabulary warm-up
        return run
    if engine in ("xgrammar", "xgrammar_nonstrict", "xgrammar_any_ws"):
        import xgrammar as xgr
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_path("llama3")))
        info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
        comp = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)

        strict = engine == "xgrammar"
        any_ws = engine == "xgrammar_any_ws"

        def run(schema):
            # compact separators where whitespace is off (xgrammar's default there is ", "/": ")
            seps = None if any_ws else (",", ":")
            comp.compile_json_schema(json.dumps(schema), any_whitespace=any_ws, separators=seps,
                                     strict_mode=strict)
            return {}

        run(WARM_UP)  # warm-up
        return run
    if engine == "llguidance":
        import llguidance
        import llguidance.hf
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_path("llama3")))
        lltok = llguidance.hf.from_tokenizer(tok)  # ~1-2 s, once per worker (outside the timing)
        Matcher = llguidance.LLMatcher

        def run(schema):
            # default options: whitespace_flexible (any JSON whitespace between tokens)
            grammar = Matcher.grammar_from_json_schema(json.dumps(schema))
            t0 = time.perf_counter()
            m = Matcher(lltok, grammar, log_level=0)
            if m.is_error():
                raise RuntimeError(m.get_error())
            t1 = time.perf_counter()
            m.compute_bitmask()  # llguidance is lazy: the lexer is built at mask time
            if m.is_error():
                raise RuntimeError(m.get_error())
            return {"matcher_seconds": t1 - t0, "first_mask_seconds": time.perf_counter() - t1}

        run(WARM_UP)  # warm-up
        return run
    if engine == "outlines_core":
        import outlines_core as oc

        v = load_vocabulary("llama3")
        m: dict[bytes, list[int]] = {}
        for i, b in enumerate(v.token_bytes):
            if b is not None and i not in v.eos_token_ids:
                m.setdefault(b, []).append(i)
        vocab = oc.Vocabulary(v.eos_token_ids[0], m)

        def run(schema):
            regex = oc.json_schema.build_regex_from_schema(json.dumps(schema))
            oc.Index(regex, vocab)
            return {}

        run(WARM_UP)  # warm-up
        return run
    raise ValueError(engine)


def _worker(inq, outq, engine):
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
    """The engine's worker process (set up once, outside the timing); a compile that runs past
    the time limit kills and restarts it."""

    def __init__(self, engine: str):
        self.engine = engine
        self.proc = WorkerProcess(_worker, engine, ready=True)

    def run(self, sid, schema, timeout):
        r = self.proc.ask((sid, schema), timeout)
        return {"id": sid, "status": "timeout", "seconds": timeout} if r is None else r

    def close(self):
        self.proc.close()


def _ratio(st) -> str:
    return "—" if st is None else f"{st['median']:.2f} ({st['p90']:.2f})"


def _stats(xs):
    if not xs:
        return None
    xs = sorted(xs)
    return {"n": len(xs), "median": quantile(xs, 0.5), "p90": quantile(xs, 0.9), "max": xs[-1],
            "total": sum(xs)}


def _ok(results, eng, sub) -> dict[str, float]:
    return {r["id"]: r["seconds"] for r in results[eng][sub] if r["status"] == "ok"}


def _pair(results, a: str, b: str, sub: str) -> dict | None:
    """``a`` vs ``b`` on the schemas both compiled: their stats, the ratios a / b of the medians,
    p90s and totals, and the median per-schema ratio."""
    ta, tb = _ok(results, a, sub), _ok(results, b, sub)
    both = sorted(set(ta) & set(tb))
    if not both:
        return None
    sa, sb = _stats([ta[i] for i in both]), _stats([tb[i] for i in both])
    per = _stats([ta[i] / tb[i] for i in both if tb[i] > 0])
    return {"n": len(both), a: sa, b: sb,
            "ratio_median": sa["median"] / sb["median"], "ratio_p90": sa["p90"] / sb["p90"],
            "ratio_total": sa["total"] / sb["total"],
            "per_schema_ratio_median": per["median"] if per else None,
            "a_not_faster": sum(ta[i] > tb[i] for i in both)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-subset", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--replot", action="store_true", help="redraw the PNG from the JSON")
    ap.add_argument("--rereport", action="store_true",
                    help="rewrite the md and PNG from the JSON (no compiling)")
    args = ap.parse_args()
    if args.replot or args.rereport:
        saved = json.loads((OUT / "json_schema_compile_time.json").read_text())
        if args.rereport:
            report(saved["meta"], saved["results"], list(saved["results"]))
        else:
            plot(saved["results"], list(saved["results"]))
        return
    engines = args.engines.split(",")
    bad = [e for e in engines if e not in GROUP]
    if bad:
        ap.error(f"unknown engines {bad}; known: {ENGINES}")
    schemas = {sub: [(r["id"], r["schema"]) for _, r in zip(range(args.per_subset), load(sub))]
               for sub in SUBSETS}
    t_run = time.perf_counter()
    workers = {eng: Worker(eng) for eng in engines}
    results: dict[str, dict[str, list]] = {eng: {sub: [] for sub in SUBSETS} for eng in engines}
    # schema-major order: every engine compiles schema k before any compiles schema k+1, so that
    # the machine's load (shared VM) drifts alike for all engines; one compile at a time
    for sub in SUBSETS:
        for sid, s in schemas[sub]:
            for eng in engines:
                results[eng][sub].append(workers[eng].run(sid, s, args.timeout))
        for eng in engines:
            res = results[eng][sub]
            ok = sum(r["status"] == "ok" for r in res)
            print(f"{eng} {sub}: {ok}/{len(res)} ok", flush=True)
    for w in workers.values():
        w.close()
    ver = versions("xgrammar", "llguidance", "outlines_core", "torch")
    python = ver.pop("python")
    meta = {"command": command_line("json_schema_bench.py", args, ("replot", "rereport")),
        "machine": machine(note="shared VM, timings noisy"),
        "python": python, "versions": {k: v or "not installed" for k, v in ver.items()},
        "date": utc_now(), "vocabulary": "Llama-3 (128,256 ids)",
        "run_seconds": round(time.perf_counter() - t_run, 1)}
    report(meta, results, engines)


def report(meta: dict, results: dict, engines: list[str]) -> None:
    engines = sorted(engines, key=lambda e: list(OURS).index(GROUP[e]))  # rows by group
    table = []
    for sub in SUBSETS:
        for eng in engines:
            peers = [e for e in engines if GROUP[e] == GROUP[eng]]
            ok_all = set.intersection(*[set(_ok(results, e, sub)) for e in peers])
            res = results[eng][sub]
            mine = [r["seconds"] for r in res if r["status"] == "ok"]
            common = [r["seconds"] for r in res if r["id"] in ok_all]
            ratio = None
            ours = OURS[GROUP[eng]]
            if eng != ours and ours in engines:
                t = _ok(results, ours, sub)
                x = _ok(results, eng, sub)
                ratio = _stats([t[i] / x[i] for i in ok_all if x[i] > 0])
            table.append({"subset": sub, "engine": eng, "group": GROUP[eng],
                          "language": LANGUAGE[eng], "schemas": len(res), "ok": len(mine),
                          "errors": sum(r["status"] == "error" for r in res),
                          "timeouts": sum(r["status"] == "timeout" for r in res),
                          "own": _stats(mine), "common": _stats(common),
                          "ratio_tractable_over_this": ratio})
    # the cost of the every-serialization language, and tractable_every vs its peers
    every = {}
    for sub in SUBSETS:
        row = {}
        if "tractable" in engines and "tractable_every" in engines:
            row["every_over_canonical"] = _pair(results, "tractable_every", "tractable", sub)
            canon, ev = _ok(results, "tractable", sub), results["tractable_every"][sub]
            row["every_failed_where_canonical_compiled"] = [
                {"id": r["id"], "status": r["status"], "why": r.get("why", "")}
                for r in ev if r["status"] != "ok" and r["id"] in canon]
        for peer in ("xgrammar_any_ws", "llguidance"):
            if "tractable_every" in engines and peer in engines:
                row[f"every_over_{peer}"] = _pair(results, "tractable_every", peer, sub)
        every[sub] = row
    save_json(OUT / "json_schema_compile_time.json",
              {"meta": meta, "table": table, "every": every, "results": results}, indent=0)

    def f(st, k):
        return "—" if st is None else f"{st[k]:.3f}"

    versions = meta["versions"]
    run_s = meta.get("run_seconds")
    L = ["# JSON Schema compile time on the Llama-3 vocabulary (seconds per schema)", "",
         f"Command: `{meta['command']}`  ", f"Machine: {meta['machine']}; Python "
         f"{meta['python']}; {', '.join(f'{k} {v}' for k, v in versions.items())}; "
         f"{meta['date']}" + (f"; whole run {run_s / 60:.1f} min" if run_s else "") + ".", "",
         "Each compile runs in a worker process with the time limit; the vocabulary/tokenizer is "
         "loaded once per worker outside the timing, and each worker compiles one small schema "
         "before the timed ones. All workers are alive together and the schemas are run "
         "schema-major (every engine compiles schema k, one at a time, before schema k+1), so "
         "that the shared machine's load drifts alike for every engine. Engines are compared "
         "within a **group**: **spec** = Draft 2020-12 (unlisted properties allowed where "
         "`additionalProperties` is unspecified), compact JSON: tractable `canonical=True` (the "
         "canonical serialization of each instance) vs xgrammar `strict_mode=False, "
         "any_whitespace=False, separators=(\",\", \":\")`; **every** = Draft 2020-12, many "
         "serializations: tractable "
         "`canonical=False` (every RFC 8259 serialization: any whitespace, every number "
         "spelling, every string escape) vs xgrammar `strict_mode=False, any_whitespace=True` "
         "(any whitespace between tokens, none around the top-level value; only some number "
         "spellings: `integer` only as `-?(0|[1-9][0-9]*)`, so not `1.0` or `1e2`; bounded "
         "numbers without exponent and with at most 6 fraction digits; every string escape) "
         "and llguidance (`LLMatcher(LLTokenizer, LLMatcher.grammar_from_json_schema(schema))`, "
         "default options: any whitespace between tokens, none around the top-level value; "
         "`integer` only as `-?(0|[1-9][0-9]*)`; no exponent in bounded numbers; no `\\/` and "
         "no `\\uXXXX` escape; llguidance builds its lexer lazily, so its time is the matcher's "
         "construction **plus the first `compute_bitmask`**; an `is_error()` matcher counts as "
         "an error); **strict** = unlisted properties never generated: tractable `strict=True` "
         "vs xgrammar (default `strict_mode=True`, `any_whitespace=False`) and outlines-core "
         "(regex + Index). tractable errors = unsupported keywords (never dropped silently); "
         "xgrammar `max_threads=1`, no cache. \"common\" = schemas every engine of the same "
         "group compiled (the fair comparison); ratio = median (p90) over those schemas of "
         "the group's tractable engine's time / this engine's time.", "",
         "| subset | group | language | engine | compiled | errors | timeouts | median (own) "
         "| p90 (own) | max (own) | n common | median (common) | p90 (common) | max (common) "
         "| tractable / this: median (p90) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        rt = r["ratio_tractable_over_this"]
        L.append(f"| {r['subset']} | {r['group']} | {r['language']} | {r['engine']} "
                 f"| {r['ok']}/{r['schemas']} | {r['errors']} | "
                 f"{r['timeouts']} | {f(r['own'], 'median')} | {f(r['own'], 'p90')} | "
                 f"{f(r['own'], 'max')} | {r['common']['n'] if r['common'] else 0} | "
                 f"{f(r['common'], 'median')} | {f(r['common'], 'p90')} | "
                 f"{f(r['common'], 'max')} | "
                 f"{_ratio(rt)} |")
    if any(every.values()):
        L += ["", "## Every serialization vs canonical (tractable)", "",
              "tractable `canonical=False` (every) / `canonical=True` (canonical), on the schemas "
              "both compiled: ratio of the medians, of the p90s and of the total seconds, and the "
              "median of the per-schema ratios; \"every slower\" = schemas where every took "
              "longer.", "",
              "| subset | n both | canonical median | every median | ratio median "
              "| canonical p90 | every p90 | ratio p90 | canonical total | every total "
              "| ratio total | per-schema ratio (median) | every slower |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for sub in SUBSETS:
            pr = every[sub].get("every_over_canonical")
            if pr is None:
                continue
            c, e = pr["tractable"], pr["tractable_every"]
            L.append(f"| {sub} | {pr['n']} | {c['median']:.3f} | {e['median']:.3f} | "
                     f"{pr['ratio_median']:.2f} | {c['p90']:.3f} | {e['p90']:.3f} | "
                     f"{pr['ratio_p90']:.2f} | {c['total']:.2f} | {e['total']:.2f} | "
                     f"{pr['ratio_total']:.2f} | {pr['per_schema_ratio_median']:.2f} | "
                     f"{pr['a_not_faster']}/{pr['n']} |")
        failed = [(sub, x) for sub in SUBSETS
                  for x in every[sub].get("every_failed_where_canonical_compiled", [])]
        L += ["", "Schemas the canonical language compiles and the every language does not: "
              + ("none." if not failed else "; ".join(
                  f"{sub} {x['id']} ({x['status']}{': ' + x['why'] if x['why'] else ''})"
                  for sub, x in failed))]
        L += ["", "## tractable every vs xgrammar any_whitespace and llguidance", "",
              "On the schemas both compiled: medians, p90s, the ratio of the medians "
              "tractable_every / peer, and the median of the per-schema ratios (< 1: tractable "
              "faster).", "",
              "| subset | peer | n both | tractable_every median | peer median | ratio of medians "
              "| tractable_every p90 | peer p90 | per-schema ratio (median) |",
              "|---|---|---|---|---|---|---|---|---|"]
        for sub in SUBSETS:
            for peer in ("xgrammar_any_ws", "llguidance"):
                pr = every[sub].get(f"every_over_{peer}")
                if pr is None:
                    continue
                a, b = pr["tractable_every"], pr[peer]
                L.append(f"| {sub} | {peer} | {pr['n']} | {a['median']:.3f} | "
                         f"{b['median']:.3f} | {pr['ratio_median']:.2f} | {a['p90']:.3f} | "
                         f"{b['p90']:.3f} | {pr['per_schema_ratio_median']:.2f} |")
        if "llguidance" in engines:
            parts = []
            for sub in SUBSETS:
                ok = [r for r in results["llguidance"][sub] if r["status"] == "ok"]
                if ok:
                    mc = quantile((r["matcher_seconds"] for r in ok), 0.5)
                    fm = quantile((r["first_mask_seconds"] for r in ok), 0.5)
                    parts.append(f"{sub} {1e3 * mc:.2f} + {1e3 * fm:.2f} ms")
            L += ["", "llguidance's time split, medians over its compiled schemas (construction "
                  "`LLMatcher(...)` + first `compute_bitmask`): " + "; ".join(parts) + "."]
    (OUT / "json_schema_compile_time.md").write_text("\n".join(L) + "\n")
    plot(results, engines)


def plot(results: dict, engines: list[str]) -> None:
    """Box plot per subset of the compile seconds of each engine (compiled schemas only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SUBSETS), figsize=(0.7 * len(engines) * len(SUBSETS), 4.6),
                             sharey=True)
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
