"""JSONSchemaBench (guidance-ai/jsonschemabench @ ba103c73): a deterministic subset committed in
tests/data/json_schema_bench_subset.jsonl (first schemas with tests of 9 subsets, extracted by
scripts/extract_schema_data.py).  For compiled schemas: no invalid instance accepted, every
valid instance accepted (unless the compiler warned that it generates a subset), and strings
sampled from the automaton validate with ``jsonschema`` (format checking on)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tractable.testing.json_schema import evaluate_record

DATA = Path(__file__).resolve().parents[2] / "data" / "json_schema_bench_subset.jsonl"


def _records():
    return [json.loads(line) for line in DATA.read_text().splitlines()]


def _check(recs, samples):
    compiled = 0
    for rec in recs:
        r = evaluate_record(rec, samples)
        assert r["status"] != "error", r
        if r["status"] != "compiled":
            continue
        compiled += 1
        assert r["invalid_accepted"] == 0, r
        subset_warning = any("subset" in w for w in r.get("warnings", []))
        if not subset_warning:
            assert r["valid_accepted"] == r["valid_total"], r
        assert r["samples_valid"] == r["samples"], r
    return compiled


def test_bench_subset_fast():
    recs = _records()
    by_subset: dict[str, list] = {}
    for rec in recs:
        by_subset.setdefault(rec["subset"], []).append(rec)
    # small schemas only (the full committed subset runs in the slow test)
    pick = [r for rs in by_subset.values()
            for r in [x for x in rs if len(json.dumps(x["schema"])) < 1500][:2]]
    assert _check(pick, samples=2) >= len(pick) * 2 // 3


@pytest.mark.slow
def test_bench_subset_full():
    recs = _records()
    assert _check(recs, samples=5) >= len(recs) // 2
