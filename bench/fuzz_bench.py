"""Long fuzzing run of the regex and JSON Schema front ends (issue 23).

Drives the properties of ``tests/fsa/test_fuzz_regex.py`` and
``tests/fsa/json_schema/test_fuzz_json_schema.py``
(the same generators and checks as CI, which runs a short derandomized sample) with many more
random examples, and counts what they record:

* examples and instance checks;
* untyped exceptions (anything not a ``TractableError``: a bug);
* hangs: examples past ``--limit-s`` seconds (SIGALRM interrupts them);
* accepted-invalid (the automaton accepts what ``re``/``jsonschema`` rejects: a bug);
* rejected-valid, by reason: outside a documented subset the compile warned about (values
  nested deeper than ``free_value_depth``, recursive ``$ref`` unrolling) or a bug;
* refusals (typed ``UnsupportedRegexError``/``UnsupportedSchemaError``/``InvalidSchemaError``:
  documented unsupported constructs), by keyword/construct.

Writes ``bench/results/front_end_fuzz.md`` and ``.json``::

    OMP_NUM_THREADS=1 .venv/bin/python bench/fuzz_bench.py --regex-examples 2000 \\
        --schema-examples 300
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import sys
import time
import warnings
from pathlib import Path

from harness import (
    RESULTS,
    ROOT,
    BenchTimeout,
    machine,
    quantile,
    save_json,
    time_limit,
    utc_now,
    versions,
)

sys.path.insert(0, str(ROOT / "tests" / "fsa"))
sys.path.insert(0, str(ROOT / "tests" / "fsa" / "json_schema"))

import test_fuzz_json_schema as FJ  # noqa: E402
import test_fuzz_regex as FR  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _timed(fn, limit_s: float, what: dict) -> dict:
    """``fn()``'s record, or a hang record once ``limit_s`` seconds have passed."""
    t0 = time.perf_counter()
    try:
        with time_limit(limit_s):
            return fn()
    except BenchTimeout:
        return dict(what, status="hang", seconds=time.perf_counter() - t0, checks=0)


def _construct(error: str) -> str:
    """The refused keyword or construct named in a typed error's message."""
    m = (re.search(r"keyword '([^']+)'", error)
         or re.search(r"construct (.+?)(?: at position| in | \(|$)", error))
    head = error.split(":", 1)[0]
    return f"{head}: {m.group(1)}" if m else head


def _fuzz(n: int, limit_s: float, rng_seed: int, key: str, check, subject, samples) -> list[dict]:
    """``n`` seeded examples (``subject``, ``samples``, an int seed), each ``check``-ed under
    :func:`_timed`; the records, each naming its subject under ``key``."""
    recs: list[dict] = []
    cfg = settings(max_examples=n, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck))

    @seed(rng_seed)
    @cfg
    @given(subject, samples, st.integers(0, 2**16))
    def prop(x, xs, s):
        recs.append(_timed(lambda: check(x, xs, s), limit_s, {key: x}))

    prop()
    return recs


def run_regex(n: int, limit_s: float, rng_seed: int) -> list[dict]:
    return _fuzz(n, limit_s, rng_seed, "pattern", FR.check_regex,
                 st.one_of(FR.regexes(), FR.regexes(), FR.garbage()),
                 st.lists(FR.texts(), min_size=1, max_size=8))


def run_schema(n: int, limit_s: float, rng_seed: int) -> list[dict]:
    return _fuzz(n, limit_s, rng_seed, "schema",
                 lambda schema, xs, s: FJ.check_schema(schema, xs, seed=s),
                 FJ.schemas(), st.lists(FJ.instances(), min_size=1, max_size=6))


def summarize(recs: list[dict], kind: str) -> dict:
    status = collections.Counter(r["status"] for r in recs)
    secs = sorted(r["seconds"] for r in recs)
    out = {
        "examples": len(recs),
        "checks": sum(r.get("checks", 0) for r in recs),
        "status": dict(status),
        "untyped": [r.get("error") for r in recs if r["status"] == "untyped"],
        "untyped_examples": [(r.get("error"), r.get("schema", r.get("pattern")))
                             for r in recs if r["status"] == "untyped"][:20],
        "reference_errors": sum(len(r.get("reference_errors", [])) for r in recs),
        "hangs": len([r for r in recs if r["status"] == "hang"]),
        "refused_by_construct": dict(collections.Counter(
            _construct(r["error"]) for r in recs if r["status"] == "refused").most_common()),
        "median_s": statistics.median(secs) if secs else 0.0,
        "p90_s": quantile(secs, 0.9) if secs else 0.0,
        "max_s": secs[-1] if secs else 0.0,
    }
    if kind == "regex":
        bad = [r for r in recs if r.get("mismatches")]
        out["accepted_invalid"] = sum(1 for r in bad for _t, want in r["mismatches"]
                                      if not want)
        out["rejected_valid_bug"] = sum(1 for r in bad for _t, want in r["mismatches"] if want)
        out["rejected_valid_documented"] = 0
        out["examples_with_mismatch"] = [(r["pattern"], r["mismatches"][:3]) for r in bad][:20]
        out["invalid_regex_agrees_with_re"] = sum(
            1 for r in recs if r["status"] == "refused" and r.get("invalid")
            and r.get("re_ok") is False)
    else:
        out["accepted_invalid"] = sum(len(r.get("accepted_invalid", [])) for r in recs)
        out["rejected_valid_bug"] = sum(len(r.get("rejected_valid", [])) for r in recs)
        out["rejected_valid_documented"] = sum(len(r.get("rejected_documented", []))
                                               for r in recs)
        out["examples_with_mismatch"] = [
            (r["schema"], r.get("accepted_invalid", [])[:2], r.get("rejected_valid", [])[:2])
            for r in recs if r.get("accepted_invalid") or r.get("rejected_valid")][:20]
    return out


HEADER = "\n".join([
    "| front end | examples | checks | untyped exceptions | hangs | accepted-invalid "
    "| rejected-valid (bug) | rejected-valid (documented subset) | refused (typed) "
    "| seconds per example median / p90 / max |",
    "|---|---|---|---|---|---|---|---|---|---|"])


def write(results: dict, out: Path, command: str) -> None:
    save_json(out.with_suffix(".json"), results, indent=1)  # creates out.parent
    rows = []
    for kind in ("regex", "json_schema"):
        s = results[kind]
        rows.append(f"| {kind} | {s['examples']:,} | {s['checks']:,} | {len(s['untyped'])} | "
                    f"{s['hangs']} | {s['accepted_invalid']} | {s['rejected_valid_bug']} | "
                    f"{s['rejected_valid_documented']} | "
                    f"{sum(s['refused_by_construct'].values()):,} | {s['median_s']:.3f} / "
                    f"{s['p90_s']:.3f} / {s['max_s']:.2f} |")
    refused = []
    for kind in ("regex", "json_schema"):
        for k, v in results[kind]["refused_by_construct"].items():
            refused.append(f"| {kind} | {k} | {v} |")
    status = "; ".join(f"{k}: {json.dumps(results[k]['status'])}"
                       for k in ("regex", "json_schema"))
    md = f"""# Front-end fuzzing: regex and JSON Schema (issue 23)

Command: `{command}`
Machine: {results['machine']}; versions: {json.dumps(results['versions'])}; date:
{results['date']}; hypothesis seed {results['seed']}; per-example limit {results['limit_s']} s
(SIGALRM); wall time {results['wall_s']:.0f} s.

What is checked (generators and checks: `tests/fsa/test_fuzz_regex.py`,
`tests/fsa/json_schema/test_fuzz_json_schema.py`, the same as CI, which runs a short
derandomized sample):

* regex: random patterns (lookaround, anchors inside, flags, counted repetition, and
  backreferences / `\\b` / conditionals that must be refused) and garbage strings over
  metacharacters, compiled over a ~300-token vocabulary; random texts split into tokens at
  random and random accepted token paths, against `re.fullmatch`; `InvalidRegexError` exactly
  where `re.compile` refuses;
* JSON Schema: random schemas (types, numeric/string/array/object keywords, enum/const,
  allOf/anyOf/oneOf/not/if, `$ref`) and random instances against `jsonschema` (Draft
  2020-12, formats checked): the canonical automaton on `serialize_instance`'s text, the
  every-serialization automaton (`canonical=False`) on every style of
  `tractable.testing.json_schema.serializations`, and texts sampled from the canonical
  automaton (each must be JSON valid against the schema); `free_value_depth={FJ.FREE_DEPTH}`.

{HEADER}
{chr(10).join(rows)}

Statuses: {status}.  ("empty": the pattern matches nothing, an `EmptyLanguageError`; every
text was then checked to fail `re` too.)  Instances the reference itself failed on (skipped;
`jsonschema`'s `contains` does not enter an embedded `$id` resource): regex
{results['regex']['reference_errors']}, JSON Schema {results['json_schema']['reference_errors']}.

Refusals (documented unsupported constructs, typed errors) by construct:

| front end | construct | examples |
|---|---|---|
{chr(10).join(refused) or '| - | - | 0 |'}

Examples with a mismatch (if any) and untyped errors are listed in the JSON file.

Found by earlier runs of this script and fixed (regression tests in
`tests/facade/test_bad_inputs.py::test_embedded_id_resources_found_by_fuzzing`): a sub-schema
with its own `$id` whose `$ref` points into its own `$defs` made `serialize_instance` raise
jsonschema's PointerToNowhere (anyOf branches were checked at the root's base URI), and made
the compile itself raise it where enum/const values are checked under such an `if` (now a
typed `UnsupportedSchemaError`: jsonschema 4.26's `if`/`contains` do not enter embedded
resources).
"""
    out.with_suffix(".md").write_text(md)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--regex-examples", type=int, default=2000)
    ap.add_argument("--schema-examples", type=int, default=300)
    ap.add_argument("--limit-s", type=float, default=FJ.EXAMPLE_LIMIT_S)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--out", type=Path, default=RESULTS / "front_end_fuzz")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    t0 = time.time()
    results = {
        "seed": args.seed, "limit_s": args.limit_s,
        "machine": machine(),
        "versions": versions("hypothesis", "jsonschema", "torch", "numpy"),
        "date": utc_now(),
    }
    results["regex"] = summarize(run_regex(args.regex_examples, args.limit_s, args.seed),
                                 "regex")
    print("regex", {k: v for k, v in results["regex"].items() if k != "examples_with_mismatch"},
          flush=True)
    results["json_schema"] = summarize(run_schema(args.schema_examples, args.limit_s,
                                                  args.seed), "json_schema")
    print("json_schema", {k: v for k, v in results["json_schema"].items()
                          if k != "examples_with_mismatch"}, flush=True)
    results["wall_s"] = time.time() - t0
    command = "OMP_NUM_THREADS=1 .venv/bin/python bench/fuzz_bench.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    write(results, args.out, command.strip())
    bugs = sum(len(results[k]["untyped"]) + results[k]["hangs"] + results[k]["accepted_invalid"]
               + results[k]["rejected_valid_bug"] for k in ("regex", "json_schema"))
    return 1 if bugs else 0


if __name__ == "__main__":
    raise SystemExit(main())
