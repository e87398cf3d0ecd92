"""The lift's memory budget (issue 23): what real compiles charge, and what hostile ones cost.

Two parts, one run, Llama-3 vocabulary:

* **charges** — every regex, grammar and JSON Schema of the test data compiled in one process
  under an unlimited :func:`~tractable.fsa.lift_budget.lift_budget`: the peak of live charges
  (median, p90, max per kind), so that the default
  :data:`~tractable.fsa.lift_budget.MAX_LIFT_BYTES` can be seen to sit above real work.
  Charges count *cold* work: each case runs without the vocabulary's component walks and
  class tries (cached per vocabulary object);
* **hostile** — constraints with few byte states and huge lifts (chains of distinct letter
  classes), each in a fresh subprocess under a 6 GiB address-space limit, with the default
  budget and with the budget off: outcome, seconds, peak RSS.

    OMP_NUM_THREADS=1 .venv/bin/python bench/lift_budget_bench.py            # both parts
    OMP_NUM_THREADS=1 .venv/bin/python bench/lift_budget_bench.py --only hostile

Writes ``bench/results/lift_budget.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

from harness import (
    ROOT,
    BenchTimeout,
    environment,
    load_vocabulary,
    quantile,
    time_limit,
    tokenizer_path,
    write_result,
)

GRAMMARS = ROOT / "tests" / "data" / "grammars"
SCHEMAS = ROOT / "tests" / "data" / "json_schema_bench_subset.jsonl"
REGEXES = [".{0,20000}", "[a-z ]{0,20000}", r"(\d{1,3}\.){3}\d{1,3}", r"[^\n]{0,2000}",
           r"\w+@\w+\.(com|org|net)", r'"([^"\\]|\\.){0,500}"']
#: hostile chains: n distinct letter classes in a row
CHAINS = (2000, 5000, 10000, 20000)
GiB = 2**30


def chain(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(f"[{chr(97 + rng.randrange(10))}-{chr(107 + rng.randrange(10))}]"
                   for _ in range(n))


def _cases(limit_schemas: int | None):
    from tractable.fsa.grammar import compile_grammar
    from tractable.fsa.json_schema import compile_json_schema
    from tractable.fsa.regex import compile_regex

    for p in REGEXES:
        yield "regex", p[:40], lambda v, p=p: compile_regex(p, v)
    for f in sorted(GRAMMARS.glob("*")):
        if f.suffix in (".gbnf", ".lark", ".ebnf"):
            for a in ("over", "under"):
                yield "grammar", f"{f.name} {a}", \
                    lambda v, f=f, a=a: compile_grammar(f.read_text(), v, approximation=a)
    recs = [json.loads(line) for line in SCHEMAS.read_text().splitlines() if line.strip()]
    for r in recs[:limit_schemas]:
        for canonical in (True, False):
            name = f"{r['id']} {'canonical' if canonical else 'every'}"
            yield "json_schema", name, \
                lambda v, s=r["schema"], c=canonical: compile_json_schema(s, v, canonical=c)


def charges(args) -> list[dict]:
    from tractable.fsa.lift_budget import lift_budget
    from tractable.fsa.regex import clear_regex_cache

    base = load_vocabulary("llama3")
    rows = []
    for kind, name, fn in _cases(args.schemas):
        if args.kinds and kind not in args.kinds:
            continue
        # cold: no component walks or class tries cached from earlier cases (the per-vocabulary
        # tables that every compile shares stay)
        base._memo.pop("lift_templates", None)
        base._memo.pop("class_tries", None)
        vocab = base
        clear_regex_cache()
        t = time.perf_counter()
        with lift_budget(1 << 60) as b, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with time_limit(args.timeout):
                    fn(vocab)
                out = "ok"
            except BenchTimeout:
                out = "timeout"
            except Exception as e:  # noqa: BLE001 - a refusal is recorded as it is
                out = type(e).__name__
        row = {"kind": kind, "case": name, "outcome": out, "charged": b.peak, "total": b.total,
               "largest": b.largest, "largest_what": b.largest_what,
               "seconds": time.perf_counter() - t}
        rows.append(row)
        print(f"{kind:12s} {b.peak / GiB:7.3f} GiB {out:10s} {row['seconds']:6.1f}s  {name}",
              flush=True)
    return rows


_CHILD = r"""
import json, resource, sys, time
from tractable.fsa.vocabulary import TokenVocabulary
from tractable.fsa.regex import compile_regex
from tractable.fsa.lift_budget import lift_budget
v = TokenVocabulary.from_tokenizer_file(sys.argv[1])
pat, off = open(sys.argv[2]).read(), sys.argv[3] == "off"
t = time.perf_counter()
try:
    if off:
        with lift_budget(1 << 60):
            A = compile_regex(pat, v)
    else:
        A = compile_regex(pat, v)
    out = f"ok, {A.num_states:,} states, {A.num_edges:,} edges"
except MemoryError as e:
    out = f"MemoryError (untyped): {str(e)[:80]}"
except Exception as e:
    out = f"{type(e).__name__}: {str(e)[:160]}"
print(json.dumps({"outcome": out, "seconds": time.perf_counter() - t,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
"""


def hostile(args) -> list[dict]:
    rows = []
    tmp = Path(args.tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    for n in CHAINS:
        pat = tmp / f"chain{n}.txt"
        pat.write_text(chain(n))
        for budget in ("default", "off"):
            def limit_as():
                resource.setrlimit(resource.RLIMIT_AS, (args.address_gib * GiB,) * 2)

            t = time.perf_counter()
            try:
                p = subprocess.run(
                    [sys.executable, "-c", _CHILD, str(tokenizer_path("llama3")), str(pat),
                     budget], capture_output=True, text=True, timeout=args.hostile_timeout,
                    preexec_fn=limit_as)
                line = (p.stdout.strip().splitlines() or [""])[-1]
                rec = json.loads(line) if line.startswith("{") else {
                    "outcome": f"died: {p.stderr.strip().splitlines()[-1][:120]}"
                    if p.stderr.strip() else f"died (rc {p.returncode})"}
            except subprocess.TimeoutExpired:
                rec = {"outcome": f"over {args.hostile_timeout} s"}
            rec.update({"classes": n, "byte_states": 2 * n + 1, "budget": budget,
                        "wall": time.perf_counter() - t})
            rows.append(rec)
            print(rec, flush=True)
    return rows


def report(res: dict) -> str:
    env = res["env"]
    lines = ["# The lift's memory budget (issue 23)", "",
             f"- command: `{env['command']}`", f"- machine: {env['machine']}",
             f"- versions: {json.dumps(env['versions'])}; commit {env['commit']}",
             f"- date: {env['date']}", "",
             "The token lift charges its large arrays (walk records, packed token rows, their "
             "bincounts, gathered and concatenated rows) to a budget before allocating them "
             "(`fsa/lift_budget.py`); past it, `LiftSizeError`.  Default "
             f"{res['default_limit'] / GiB:.1f} GiB of live charges.", ""]
    if res.get("charges"):
        lines += ["## Peak live charges of real compiles (unlimited budget, cold vocabulary "
                  "per case)", "",
                  "| kind | cases | ok | median GiB | p90 GiB | max GiB | max case |",
                  "|---|---|---|---|---|---|---|"]
        for kind in ("regex", "grammar", "json_schema"):
            rs = [r for r in res["charges"] if r["kind"] == kind]
            if not rs:
                continue
            ch = [r["charged"] / GiB for r in rs]
            top = max(rs, key=lambda r: r["charged"])
            lines.append(f"| {kind} | {len(rs)} | {sum(r['outcome'] == 'ok' for r in rs)} | "
                         f"{quantile(ch, 0.5):.4f} | {quantile(ch, 0.9):.4f} | {max(ch):.3f} | "
                         f"{top['case']} ({top['outcome']}, {top['seconds']:.1f} s) |")
        over = [r for r in res["charges"] if r["charged"] > res["default_limit"]]
        lines += ["", f"Cases charging past the default: {len(over)}"
                  + (": " + ", ".join(r["case"] for r in over) if over else "") + ".", ""]
        slow = sorted(res["charges"], key=lambda r: -r["charged"])[:8]
        lines += ["Largest charges:", "", "| case | outcome | GiB | s | largest array |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['case']} | {r['outcome']} | {r['charged'] / GiB:.3f} | "
                  f"{r['seconds']:.1f} | {r['largest'] / 2**20:.1f} MiB ({r['largest_what']}) |"
                  for r in slow]
        lines.append("")
    if res.get("hostile"):
        lines += ["## Hostile chains of distinct letter classes (fresh process each, "
                  f"{res['address_gib']} GiB address space)", "",
                  "| classes | byte states | budget | outcome | s | peak RSS MB |",
                  "|---|---|---|---|---|---|"]
        for r in res["hostile"]:
            s = r.get("seconds")
            lines.append(f"| {r['classes']:,} | {r['byte_states']:,} | {r['budget']} | "
                         f"{r['outcome']} | {'' if s is None else f'{s:.1f}'} | "
                         f"{r.get('rss_mb', '')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("charges", "hostile"))
    ap.add_argument("--kinds", nargs="*", help="charges: regex grammar json_schema")
    ap.add_argument("--schemas", type=int, default=None, help="first N schema records")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per charged case")
    ap.add_argument("--hostile-timeout", type=int, default=300)
    ap.add_argument("--address-gib", type=int, default=6)
    ap.add_argument("--tmp", default="/tmp/tractable_lift_budget")
    ap.add_argument("--out", default="lift_budget")
    args = ap.parse_args()
    from tractable.fsa.lift_budget import default_limit

    res = {"env": environment("torch", "numpy"), "default_limit": default_limit(),
           "address_gib": args.address_gib}
    if args.only in (None, "hostile"):
        res["hostile"] = hostile(args)
    if args.only in (None, "charges"):
        res["charges"] = charges(args)
    write_result(args.out, report(res), res)


if __name__ == "__main__":
    main()
