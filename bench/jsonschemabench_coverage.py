"""JSONSchemaBench coverage, soundness and sampling for the JSON Schema compiler (byte level).

For every schema of each subset (``/work/shared/data/jsonschemabench``): compile it (strict
mode, per-schema time limit in a worker process); for compiled schemas, check that every
``valid`` test instance (re-serialized canonically) is accepted and every ``invalid`` one is
rejected, and draw ``--samples`` strings from the automaton (uniform over accepting paths of a
random length <= shortest + 96 bytes) and validate them with ``jsonschema`` (format checking on,
duplicate keys counted as failures).  llguidance's coverage is read from its expected-results
file (a ``json_error`` entry = schema rejected).

Usage: python bench/jsonschemabench_coverage.py [--subsets A,B] [--limit N] [--timeout 60]
    [--jobs 2] [--resume]
Writes bench/results/jsonschemabench_coverage.{md,json}; each finished record is also appended to
``bench/results/jsonschemabench_coverage.partial.jsonl`` so that ``--resume`` can continue a run
that was stopped (the file is removed when the run completes).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # imported by the other JSON benches

from harness import (  # noqa: E402
    RESULTS,
    SHARED,
    WorkerProcess,
    command_line,
    machine,
    run_threads,
    save_json,
    utc_now,
    versions,
)

DATA = SHARED / "jsonschemabench"
OUT = RESULTS
SUBSETS = ["Github_trivial", "Github_easy", "Github_medium", "Github_hard", "Github_ultra",
           "Glaiveai2K", "Kubernetes", "Snowplow", "WashingtonPost", "JsonSchemaStore"]


def load(subset: str, data: Path = DATA):
    p = data / f"{subset}.jsonl"
    f = open(p) if p.exists() else gzip.open(data / f"{subset}.jsonl.gz", "rt")
    with f:
        for line in f:
            yield json.loads(line)


def evaluate(rec: dict, samples: int, seed: int = 0) -> dict:
    """Compile one record and check it (runs in the worker)."""
    from tractable.testing.json_schema import evaluate_record

    return evaluate_record(rec, samples, seed)


def _worker(inq, outq, samples):
    while True:
        item = inq.get()
        if item is None:
            return
        try:
            outq.put(evaluate(item, samples))
        except BaseException as e:  # noqa: BLE001
            outq.put({"id": item["id"], "status": "error", "why": repr(e)[:300]})


def llguidance_rejected(data: Path = DATA) -> dict[str, set[str]]:
    ref = json.loads((data / "reference_results" / "llguidance_expected_maskbench.json")
                     .read_text())
    out: dict[str, set[str]] = {}
    for name, v in ref.items():
        if "json_error" in v:
            out.setdefault(name.split("---")[0], set()).add(name)
    return out


PARTIAL = OUT / "jsonschemabench_coverage.partial.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subsets", default=",".join(SUBSETS))
    ap.add_argument("--limit", type=int, default=0, help="schemas per subset (0 = all)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--resume", action="store_true", help="keep the records in the partial file")
    args = ap.parse_args()
    data = Path(args.data)
    llg = llguidance_rejected(data)
    done: dict[str, dict] = {}
    if args.resume and PARTIAL.exists():
        for line in PARTIAL.read_text().splitlines():
            r = json.loads(line)
            done[r["id"]] = r
    else:
        PARTIAL.write_text("")
    subsets = args.subsets.split(",")
    todo = []
    order: dict[str, list[str]] = {sub: [] for sub in subsets}
    for sub in subsets:
        for i, rec in enumerate(load(sub, data)):
            if args.limit and i >= args.limit:
                break
            order[sub].append(rec["id"])
            if rec["id"] not in done:
                todo.append(rec)
    def record(rec, r):
        r["maskbench_file"] = rec.get("maskbench_file")
        done[r["id"]] = r
        with open(PARTIAL, "a") as f:
            f.write(json.dumps(r, default=str) + "\n")
        if len(done) % 200 == 0:
            print(f"{len(done)} records done", flush=True)

    run_threads(todo, args.jobs, lambda: WorkerProcess(_worker, args.samples),
                lambda w, rec: w.ask(rec, args.timeout) or {"id": rec["id"], "status": "timeout"},
                record)
    results = {sub: [done[i] for i in ids] for sub, ids in order.items()}
    for sub, res in results.items():
        c = sum(r["status"] == "compiled" for r in res)
        print(f"{sub}: {c}/{len(res)} compiled", flush=True)
    summarize(results, llg, args)
    PARTIAL.unlink()


def summarize(results, llg, args) -> None:
    ver = versions("jsonschema")
    meta = {"command": command_line("jsonschemabench_coverage.py", args, ("data", "resume"),
                                    prefix="python"),
        "machine": machine(note="shared VM"), "python": ver["python"],
        "jsonschema": ver["jsonschema"], "date": utc_now()}
    rows = []
    tot = {}
    for sub, res in results.items():
        n = len(res)
        st = {}
        for r in res:
            st[r["status"]] = st.get(r["status"], 0) + 1
        comp = [r for r in res if r["status"] == "compiled"]
        names = {Path(r["maskbench_file"]).name for r in res if r.get("maskbench_file")}
        llg_ok = len(names - llg.get(sub, set()))
        row = {
            "subset": sub, "schemas": n, "compiled": st.get("compiled", 0),
            "unsupported": st.get("unsupported", 0), "invalid_schema": st.get("invalid_schema", 0),
            "timeout": st.get("timeout", 0), "error": st.get("error", 0),
            "empty": st.get("empty", 0), "llguidance_compiled": llg_ok,
            "llguidance_schemas": len(names),
            "valid_accepted": sum(r.get("valid_accepted", 0) for r in comp),
            "valid_total": sum(r.get("valid_total", 0) for r in comp),
            "invalid_accepted": sum(r.get("invalid_accepted", 0) for r in comp),
            "invalid_total": sum(r.get("invalid_total", 0) for r in comp),
            "samples_valid": sum(r.get("samples_valid", 0) for r in comp),
            "samples": sum(r.get("samples", 0) for r in comp),
            "unrepresentable": sum(r.get("unrepresentable", 0) for r in comp),
        }
        rows.append(row)
        for k, v in row.items():
            if isinstance(v, int):
                tot[k] = tot.get(k, 0) + v
    tot["subset"] = "**total**"
    rows.append(tot)
    unsup: dict[str, int] = {}
    for res in results.values():
        for r in res:
            if r["status"] == "unsupported":
                unsup[r["keyword"]] = unsup.get(r["keyword"], 0) + 1
    save_json(OUT / "jsonschemabench_coverage.json",
              {"meta": meta, "rows": rows, "unsupported_keywords": unsup, "results": results},
              indent=0)
    L = ["# JSONSchemaBench: coverage, soundness, sampling (byte-level automata)", "",
         f"Command: `{meta['command']}`  ",
         f"Machine: {meta['machine']}; Python {meta['python']}; jsonschema {meta['jsonschema']}; "
         f"{meta['date']}.", "",
         "compiled = compiled in strict mode (no keyword dropped; unknown non-validation "
         "keywords are annotations). llguidance = schemas of the subset that llguidance's "
         "expected-results file does not list as `json_error` (its MaskBench coverage). "
         "valid acc. = valid test instances (canonical serialization) accepted; invalid acc. = "
         "invalid instances accepted (soundness: goal 0); samples = strings sampled from the "
         "automaton that `jsonschema` (format checker on, duplicate keys = failure) validates. "
         "Test instances whose canonical serialization the validator judges differently from "
         "the label (draft-04 reads `12345.0` as a non-integer; its canonical text `12345` is an "
         "integer) are not representable and are left out (count in the json).",
         "",
         "| subset | schemas | compiled | unsupported | invalid schema | timeout | error | "
         "llguidance | valid acc. | invalid acc. | samples valid |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(
            f"| {r['subset']} | {r['schemas']} | {r['compiled']} "
            f"({100 * r['compiled'] / max(1, r['schemas']):.1f}%) | {r['unsupported']} | "
            f"{r['invalid_schema']} | {r['timeout']} | {r['error']} | "
            f"{r['llguidance_compiled']}/{r['llguidance_schemas']} | "
            f"{r['valid_accepted']}/{r['valid_total']} | {r['invalid_accepted']}/"
            f"{r['invalid_total']} | {r['samples_valid']}/{r['samples']} |")
    L += ["", "Unsupported, by keyword: " + ", ".join(
        f"`{k}` {v}" for k, v in sorted(unsup.items(), key=lambda x: -x[1]))]
    (OUT / "jsonschemabench_coverage.md").write_text("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
