"""Every JSON serialization (``canonical=False``) against the canonical language, on the
JSON-Schema-Test-Suite and on JSONSchemaBench valid/invalid instances.

Each instance is written five ways (``tractable.testing.json_schema.serializations``): canonical
(what ``serialize_instance`` writes), compact with raw UTF-8, ``json.dumps``'s default
(``", "``/``": "`` and ``\\u`` escapes), ``indent=2``, and numbers as Python writes floats
(``1.0``, ``1e-05``; where every number is exactly a float).  Keys are in the schema's order in
every style (both languages keep the schema's property order).  Counted per language and style:
valid instances accepted, invalid instances accepted (unsound; must be 0).

Usage: python bench/json_schema_serializations.py [--per-subset 40] [--timeout 60]
Writes bench/results/json_schema_serializations.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from pathlib import Path

import harness as H

OUT = H.RESULTS
SUITES = {"draft2020-12": H.ROOT / "tests" / "data" / "json_schema_test_suite",
          "draft7": H.SHARED / "json_schema_test_suite" / "tests" / "draft7"}
SUBSETS = ["Github_easy", "Github_medium", "Glaiveai2K", "Kubernetes", "Snowplow",
           "JsonSchemaStore"]
LANGS = {"canonical": {"canonical": True}, "every": {"canonical": False}}


def _suite(name: str, path: Path) -> dict:
    import warnings

    from tractable.testing.json_schema import load_suite, run_suite

    out = {}
    for lang, opts in LANGS.items():
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            groups = load_suite(path)
            if name == "draft7":  # the suite's schemas do not say which draft they are
                for g in groups:
                    if isinstance(g["schema"], dict) and "$schema" not in g["schema"]:
                        g["schema"] = {"$schema": "http://json-schema.org/draft-07/schema#",
                                       **g["schema"]}
            recs = run_suite(groups, styles=True, **opts)
        rows: dict[str, dict[str, int]] = {}
        for r in recs:
            if r["status"] not in ("pass", "fail"):
                continue
            row = rows.setdefault(r["style"], dict.fromkeys(
                ("valid", "valid_accepted", "invalid", "invalid_accepted"), 0))
            kind = "valid" if r["valid"] else "invalid"
            row[kind] += 1
            row[kind + "_accepted"] += bool(r["accepted"])
        out[lang] = {"styles": rows, "seconds": time.perf_counter() - t0,
                     "unsupported": sum(r["status"] == "unsupported" for r in recs),
                     "errors": sum(r["status"] == "error" for r in recs)}
        print(name, lang, json.dumps(rows), flush=True)
    return out


def _eval(args):
    rec, lang, timeout = args
    import warnings

    from tractable.testing.json_schema import evaluate_record

    try:
        with H.time_limit(timeout), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = evaluate_record(rec, 0, styles=True, **LANGS[lang])
    except H.BenchTimeout:
        r = {"id": rec["id"], "status": "timeout"}
    r["lang"] = lang
    return r


def _bench(per_subset: int, timeout: int) -> dict:
    from jsonschemabench_coverage import load

    recs = []
    for sub in SUBSETS:
        for i, rec in enumerate(load(sub, H.SHARED / "jsonschemabench")):
            if i >= per_subset:
                break
            rec = dict(rec, id=f"{sub}/{rec.get('id', i)}")
            recs += [(rec, lang, timeout) for lang in LANGS]
    out: dict = {lang: {"status": {}, "styles": {}, "compile_seconds": [],
                        "accepted_invalid": []} for lang in LANGS}
    with mp.get_context("fork").Pool(2, maxtasksperchild=20) as pool:
        for r in pool.imap_unordered(_eval, recs):
            o = out[r["lang"]]
            o["status"][r["status"]] = o["status"].get(r["status"], 0) + 1
            if r["status"] != "compiled":
                continue
            o["compile_seconds"].append(r["compile_seconds"])
            for style, row in r.get("by_style", {}).items():
                acc = o["styles"].setdefault(style, dict.fromkeys(row, 0))
                for k, v in row.items():
                    acc[k] += v
            o["accepted_invalid"] += [f"{r['id']}: {x}" for x in r["accepted_invalid"]]
    return out


def _table(styles: dict) -> list[str]:
    lines = ["| style | valid accepted | invalid accepted |", "|---|---|---|"]
    for st, row in styles.items():
        lines.append(f"| {st} | {row['valid_accepted']} / {row['valid']} | "
                     f"{row['invalid_accepted']} / {row['invalid']} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-subset", type=int, default=40)
    ap.add_argument("--timeout", type=int, default=60)
    args = ap.parse_args()
    v = H.versions("tractable", "torch", "jsonschema")
    res = {"suite": {n: _suite(n, p) for n, p in SUITES.items() if p.exists()},
           "jsonschemabench": _bench(args.per_subset, args.timeout)}
    meta = {"command": "python bench/json_schema_serializations.py "
            f"--per-subset {args.per_subset} --timeout {args.timeout}",
            "machine": H.machine(note="shared CPU VM"),
            "versions": f"tractable {v['tractable']}, torch {v['torch']}, "
                        f"jsonschema {v['jsonschema']}, python {v['python']}",
            "date": H.utc_now()}
    H.save_json(OUT / "json_schema_serializations.json", dict(meta, **res))
    md = ["# Every JSON serialization vs the canonical language", "",
          f"Command: `{meta['command']}`  ", f"Machine: {meta['machine']}  ",
          f"Versions: {meta['versions']}  ", f"Date: {meta['date']}", "",
          "Each valid/invalid instance written five ways (see the script's docstring); keys in "
          "the schema's order.  `canonical` = `compile_json_schema(..., canonical=True)` (the "
          "default), `every` = `canonical=False`.", ""]
    for name, r in res["suite"].items():
        for lang, o in r.items():
            md += [f"## JSON-Schema-Test-Suite {name}, {lang} language", "",
                   f"Schemas unsupported: {o['unsupported']} tests; errors: {o['errors']}; "
                   f"{o['seconds']:.0f} s.", "", *_table(o["styles"]), ""]
    for lang, o in res["jsonschemabench"].items():
        cs = o["compile_seconds"]
        med, p90 = H.quantile(cs, 0.5) * 1000, H.quantile(cs, 0.9) * 1000
        md += [f"## JSONSchemaBench (first {args.per_subset} of {', '.join(SUBSETS)}), "
               f"{lang} language", "", f"Status: {json.dumps(o['status'])}; byte-NFA compile "
               f"median {med:.1f} ms, p90 {p90:.1f} ms (no token lift).", "",
               *_table(o["styles"]), ""]
        if o["accepted_invalid"]:
            md += ["Accepted invalid:", "", *[f"- `{x[:160]}`" for x in o["accepted_invalid"]],
                   ""]
    (OUT / "json_schema_serializations.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
