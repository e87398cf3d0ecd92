"""Extract the small JSON Schema test data committed under tests/data/ from /work/shared/data.

Sources (see the SOURCE.md files there):
* JSON-Schema-Test-Suite @ 44401e0c (MIT): ``tests/draft2020-12/*.json`` and the
  ``optional/format`` files of the formats the compiler claims, copied verbatim into
  ``tests/data/json_schema_test_suite/``.
* JSONSchemaBench @ ba103c73 (guidance-ai/jsonschemabench): a deterministic subset — the first
  ``--per-subset`` schemas (file order) with tests of each subset — into
  ``tests/data/json_schema_bench_subset.jsonl`` (same record format as the source).

Usage: python scripts/extract_schema_data.py [--shared /work/shared/data] [--per-subset 15]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ["date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid",
           "uri"]
SUBSETS = ["Github_trivial", "Github_easy", "Github_medium", "Github_hard", "Glaiveai2K",
           "Kubernetes", "Snowplow", "WashingtonPost", "JsonSchemaStore"]


def open_subset(base: Path, name: str):
    p = base / f"{name}.jsonl"
    if p.exists():
        return open(p)
    return gzip.open(base / f"{name}.jsonl.gz", "rt")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="/work/shared/data")
    ap.add_argument("--per-subset", type=int, default=15)
    args = ap.parse_args()
    shared = Path(args.shared)
    src = shared / "json_schema_test_suite" / "tests" / "draft2020-12"
    dst = ROOT / "tests" / "data" / "json_schema_test_suite"
    (dst / "optional" / "format").mkdir(parents=True, exist_ok=True)
    for f in sorted(src.glob("*.json")):
        shutil.copy(f, dst / f.name)
    for name in FORMATS:
        shutil.copy(src / "optional" / "format" / f"{name}.json",
                    dst / "optional" / "format" / f"{name}.json")
    shutil.copy(shared / "json_schema_test_suite" / "LICENSE", dst / "LICENSE")
    out = ROOT / "tests" / "data" / "json_schema_bench_subset.jsonl"
    n = 0
    with open(out, "w") as w:
        for sub in SUBSETS:
            k = 0
            with open_subset(shared / "jsonschemabench", sub) as r:
                for line in r:
                    rec = json.loads(line)
                    if not rec["tests"] or len(line) > 20_000:
                        continue
                    w.write(json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n")
                    k += 1
                    n += 1
                    if k >= args.per_subset:
                        break
    print(f"wrote {dst} and {out} ({n} schemas)")


if __name__ == "__main__":
    main()
