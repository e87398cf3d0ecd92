"""Regex compile time and compiled size: tractable vs xgrammar vs outlines-core, in one run.

    python bench/compile_bench.py                   # Llama-3 and Qwen3, 10 reps per regex
    python bench/compile_bench.py --reps 3 --vocabs llama3

Each (engine, vocabulary) pair runs in a fresh child process: vocabulary set-up is timed apart
from compilation (it is paid once per tokenizer by every engine), then every regex is compiled
``--reps`` times with caches off.  What is timed per engine:

* tractable: ``regex_to_nfa`` + ``TokenAutomaton.from_byte_nfa`` (parse, lift, pack; no cache);
* xgrammar: ``GrammarCompiler(info, cache_enabled=False, max_threads=1).compile_regex``;
* outlines-core: ``Index(regex, Vocabulary)``.

Writes ``bench/results/compile_regex.md`` (table) and ``compile_regex.json`` (raw samples).

    python bench/compile_bench.py --repetition      # bounded repetition vs its bound

``--repetition``: compile time of counted repetitions against the bound N (issue 21): JSON
Schema ``maxLength`` (canonical and every serialization), ``minLength``, ``maxItems`` and the
regex ``[a-z0-9 ]{1,N}``, on Llama-3, each (case, N, lift) in a fresh child process after one
small warm-up compile; "periodic" is the lift as shipped, "per state" the same code with
``lift._USE_PERIODIC = False`` (every state of a repetition walked, as before).  Writes
``bench/results/compile_repetition.md`` / ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import time

from harness import (
    RESULTS,
    load_vocabulary,
    machine,
    quantile,
    tokenizer_path,
    utc_now,
    versions,
    write_result,
)

KEYWORDS = [
    "SELECT", "FROM", "WHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "OFFSET", "JOIN", "INNER",
    "OUTER", "LEFT", "RIGHT", "FULL", "CROSS", "UNION", "INTERSECT", "EXCEPT", "INSERT", "INTO",
    "VALUES", "UPDATE", "DELETE", "CREATE", "TABLE", "DROP", "ALTER", "INDEX", "VIEW", "DISTINCT",
    "COUNT", "AVG", "MIN", "MAX", "SUM", "BETWEEN", "LIKE", "EXISTS", "CASE", "WHEN", "THEN",
    "ELSE", "END", "NULL", "NOT", "AND", "OR", "ASC", "DESC", "AS",
]
assert len(KEYWORDS) == 50

# [0-9] rather than \d: Python's \d is any Unicode digit, the peers' is ASCII.
REGEXES = {
    "iso_datetime": (
        r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]"
        r":[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
    ),
    "email": r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}",
    "keywords50": "(" + "|".join(KEYWORDS) + ")",
    "json_string": r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',
}

ENGINES = ("tractable", "xgrammar", "outlines_core")


def _meta(**extra) -> dict:
    """The header of a result file: command, date, machine, versions (+ ``extra``)."""
    return {
        "command": "python bench/compile_bench.py " + " ".join(sys.argv[1:]),
        "date": utc_now(),
        "machine": machine(),
        "versions": versions("tractable", "torch", "numpy", "xgrammar", "outlines_core",
                             "transformers"),
        **extra,
    }


def _child(engine: str, vocab_name: str, reps: int) -> dict:
    path = tokenizer_path(vocab_name)
    t0 = time.perf_counter()
    tv = load_vocabulary(path)
    out: dict = {"engine": engine, "vocab": vocab_name, "vocab_size": tv.size, "regexes": {}}
    if engine == "tractable":
        from tractable.fsa.automaton import TokenAutomaton
        from tractable.fsa.regex import regex_to_nfa

        _ = tv.trie
        out["setup_s"] = time.perf_counter() - t0

        def compile_one(p):
            return TokenAutomaton.from_byte_nfa(regex_to_nfa(p), tv)

        def size_of(a):
            return {"bytes": a.memory_bytes()["total"], "states": a.num_states,
                    "edges": a.num_edges, "label_sets": a.num_labels}
    elif engine == "xgrammar":
        import xgrammar as xgr
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast(tokenizer_file=str(path))
        info = xgr.TokenizerInfo.from_huggingface(
            tok, vocab_size=tv.size, stop_token_ids=list(tv.eos_token_ids)
        )
        compiler = xgr.GrammarCompiler(info, cache_enabled=False, max_threads=1)
        out["setup_s"] = time.perf_counter() - t0

        def compile_one(p):
            return compiler.compile_regex(p)

        def size_of(c):
            return {"bytes": int(c.memory_size_bytes)}
    elif engine == "outlines_core":
        from outlines_core import Index, Vocabulary

        eos = tv.eos_token_ids[0]
        mapping: dict[bytes, list[int]] = {}
        for i, b in enumerate(tv.token_bytes):
            if b is not None:
                mapping.setdefault(b, []).append(i)
        ov = Vocabulary(eos, mapping)
        out["setup_s"] = time.perf_counter() - t0

        def compile_one(p):
            return Index(p, ov)

        def size_of(c):
            return {"bytes": len(pickle.dumps(c))}
    else:
        raise SystemExit(f"unknown engine {engine}")
    import gc

    for name, pattern in REGEXES.items():
        times = []
        obj = None
        for _ in range(reps):
            gc.collect()
            gc.disable()
            t = time.perf_counter()
            obj = compile_one(pattern)
            times.append(time.perf_counter() - t)
            gc.enable()
        out["regexes"][name] = {"seconds": times, **size_of(obj)}
    return out


REPETITION_NS = (50, 300, 1000, 5000)
REPETITION_CASES = {
    "string maxLength N": ({"type": "string", "maxLength": "N"}, True),
    "string maxLength N, every serialization": ({"type": "string", "maxLength": "N"}, False),
    "string minLength N": ({"type": "string", "minLength": "N"}, True),
    "object {name: string maxLength N}": ({"type": "object", "properties": {"name": {
        "type": "string", "maxLength": "N"}}, "required": ["name"],
        "additionalProperties": False}, True),
    "array of integers, maxItems N": ({"type": "array", "items": {"type": "integer"},
                                       "maxItems": "N"}, True),
    "regex [a-z0-9 ]{1,N}": ("[a-z0-9 ]{1,N}", None),
}


def _fill(x, n: int):
    if isinstance(x, dict):
        return {k: _fill(v, n) for k, v in x.items()}
    if isinstance(x, list):
        return [_fill(v, n) for v in x]
    return n if x == "N" else x


def _repetition_child(case: str, n: int, periodic: bool) -> dict:
    import warnings

    from tractable.fsa import lift
    from tractable.fsa.automaton import TokenAutomaton
    from tractable.fsa.json_schema import compile_json_schema
    from tractable.fsa.regex import regex_to_nfa

    warnings.simplefilter("ignore")
    tv = load_vocabulary("llama3")
    lift._USE_PERIODIC = periodic
    spec, canonical = REPETITION_CASES[case]
    if canonical is None:
        def build(k):
            return TokenAutomaton.from_byte_nfa(regex_to_nfa(spec.replace("N", str(k))), tv)
    else:
        def build(k):
            return compile_json_schema(_fill(spec, k), tv, canonical=canonical)
    build(2)  # warm-up: the vocabulary's tables and its small walks
    t = time.perf_counter()
    a = build(n)
    dt = time.perf_counter() - t
    return {"case": case, "n": n, "periodic": periodic, "seconds": dt, "states": a.num_states,
            "edges": a.num_edges}


def _repetition(args) -> int:
    runs = []
    for case in REPETITION_CASES:
        for n in REPETITION_NS:
            for periodic in (True, False):
                if not periodic and n > args.max_per_state:
                    continue
                print(f"{case} N={n} periodic={periodic} ...", file=sys.stderr, flush=True)
                got = []
                for _ in range(args.rep_runs if periodic else 1):
                    try:
                        proc = subprocess.run(
                            [sys.executable, __file__, "--repetition-child", case, str(n),
                             str(int(periodic))], capture_output=True, text=True,
                            timeout=args.timeout, env={**os.environ, "OMP_NUM_THREADS": "1"})
                    except subprocess.TimeoutExpired:
                        got = [{"case": case, "n": n, "periodic": periodic,
                                "timeout": args.timeout}]
                        break
                    if proc.returncode != 0:
                        got = [{"case": case, "n": n, "periodic": periodic,
                                "error": proc.stderr[-500:]}]
                        break
                    got.append(json.loads(proc.stdout.strip().splitlines()[-1]))
                if "seconds" in got[0]:  # the median of the fresh processes, all kept
                    secs = [g["seconds"] for g in got]
                    got = [{**got[0], "seconds": statistics.median(secs), "runs": secs}]
                runs.append(got[0])
    meta = _meta()
    lines = [
        "# Compile time of bounded repetition vs the bound (Llama-3)",
        "",
        f"- command: `{meta['command']}`",
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']}; shared VM (load average at the end: "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}): absolute times are noisy",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "- each cell: one compile in a fresh process after a warm-up compile of the same case "
        f"at N = 2, the median of {args.rep_runs} such processes (per state: one); "
        "**periodic** = the lift as shipped (a counted repetition's states are "
        "copies of one body: the body is walked once and every copy's token rows are its "
        "rows, renamed; `fsa/lift_periodic.py`), **per state** = the same code with "
        "`lift._USE_PERIODIC = False` (every state of the repetition walked, the lift before); "
        f"per-state runs only up to N = {args.max_per_state}, {args.timeout} s limit; raw "
        "numbers in `compile_repetition.json`.  Automata identical either way (tests: "
        "`tests/fsa/test_lift_periodic.py`).",
        "",
        "| case | N | states | edges | periodic s | per state s | speed-up | periodic s / "
        "N=50 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by = {(r["case"], r["n"], r["periodic"]): r for r in runs}
    for case in REPETITION_CASES:
        base = by.get((case, REPETITION_NS[0], True), {}).get("seconds")
        for n in REPETITION_NS:
            p, q = by.get((case, n, True), {}), by.get((case, n, False), {})

            def cell(r):
                if "seconds" in r:
                    return f"{r['seconds']:.2f}"
                if "timeout" in r:
                    return f"> {r['timeout']}"
                return "error" if "error" in r else "–"

            sp = (f"{q['seconds'] / p['seconds']:.1f}×" if "seconds" in p and "seconds" in q
                  else "–")
            rel = f"{p['seconds'] / base:.1f}" if "seconds" in p and base else "–"
            lines.append(f"| {case} | {n} | {p.get('states', q.get('states', '–'))} | "
                         f"{p.get('edges', q.get('edges', '–'))} | {cell(p)} | {cell(q)} | "
                         f"{sp} | {rel} |")
    md = "\n".join(lines) + "\n"
    write_result(RESULTS / "compile_repetition", md, {"meta": meta, "runs": runs}, echo=False)
    print(md)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--vocabs", nargs="+", default=["llama3", "qwen3"])
    ap.add_argument("--engines", nargs="+", default=list(ENGINES))
    ap.add_argument("--out", default=str(RESULTS / "compile_regex"))
    ap.add_argument("--child", nargs=2, metavar=("ENGINE", "VOCAB"), help=argparse.SUPPRESS)
    ap.add_argument("--repetition", action="store_true",
                    help="bounded repetition vs its bound (bench/results/compile_repetition)")
    ap.add_argument("--max-per-state", type=int, default=1000,
                    help="largest N also compiled with the per-state lift (--repetition)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per compile (--repetition)")
    ap.add_argument("--rep-runs", type=int, default=5,
                    help="fresh processes per periodic cell, median reported (--repetition)")
    ap.add_argument("--repetition-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.repetition_child:
        c, n, p = args.repetition_child
        print(json.dumps(_repetition_child(c, int(n), bool(int(p)))))
        return 0
    if args.repetition:
        return _repetition(args)
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], args.reps)))
        return 0
    runs = []
    for vocab in args.vocabs:
        for engine in args.engines:
            print(f"[{vocab}] {engine} ...", file=sys.stderr, flush=True)
            proc = subprocess.run(
                [sys.executable, __file__, "--reps", str(args.reps), "--child", engine, vocab],
                capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                runs.append({"engine": engine, "vocab": vocab, "error": proc.stderr[-500:]})
                continue
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    meta = _meta(regexes=REGEXES)
    md = _report(meta, runs)
    write_result(args.out, md, {"meta": meta, "runs": runs}, echo=False)
    print(md)
    return 0


def _report(meta: dict, runs: list[dict]) -> str:
    lines = [
        "# Regex compile time and size: tractable vs xgrammar vs outlines-core",
        "",
        f"- command: `{meta['command']}`",
        f"- date: {meta['date']}",
        f"- machine: {meta['machine']}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "- raw samples: `compile_regex.json` beside this file; each (engine, vocabulary) pair ran "
        "in a fresh process; caches off; xgrammar with max_threads=1.",
        "",
        "Regexes: " + "; ".join(f"`{k}` = `{v}`" for k, v in meta["regexes"].items()
                                if k != "keywords50")
        + "; `keywords50` = an alternation of 50 SQL keywords.",
        "",
        "| vocab | regex | engine | compile ms median | p90 | size KiB | vs xgrammar (median) "
        "| vs outlines-core (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by = {(r["vocab"], r["engine"]): r for r in runs if "regexes" in r}
    for vocab in dict.fromkeys(r["vocab"] for r in runs):
        for name in REGEXES:
            med = {}
            for engine in ENGINES:
                r = by.get((vocab, engine))
                if r and name in r["regexes"]:
                    med[engine] = statistics.median(r["regexes"][name]["seconds"])
            for engine in ENGINES:
                r = by.get((vocab, engine))
                if not r or name not in r["regexes"]:
                    continue
                x = r["regexes"][name]
                m = med[engine]
                vs_x = f"{m / med['xgrammar']:.2f}×" if "xgrammar" in med else "–"
                vs_o = f"{m / med['outlines_core']:.2f}×" if "outlines_core" in med else "–"
                extra = f" ({x['states']} states, {x['edges']} edges)" if "states" in x else ""
                lines.append(
                    f"| {vocab} | {name} | {engine} | {1e3 * m:.2f} | "
                    f"{1e3 * quantile(x['seconds'], 0.9):.2f} | {x['bytes'] / 1024:.0f}{extra} | "
                    f"{vs_x} | {vs_o} |"
                )
    lines += ["", "Vocabulary set-up (once per tokenizer, not included above):", ""]
    lines += ["| vocab | engine | setup s |", "|---|---|---|"]
    for r in runs:
        if "setup_s" in r:
            lines.append(f"| {r['vocab']} | {r['engine']} | {r['setup_s']:.2f} |")
    errors = [r for r in runs if "error" in r]
    if errors:
        lines += ["", "Errors:", ""]
        lines += [f"- {r['vocab']} {r['engine']}: {r['error']}" for r in errors]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
