"""Extract every regex ``pattern`` of JSONSchemaBench, with the instance strings it applies to.

Reads ``../shared/data/jsonschemabench/*.jsonl[.gz]`` (JSONSchemaBench, Geng et al. 2025, commit
ba103c73 of github.com/guidance-ai/jsonschemabench; see SOURCE.md there; MIT per the HF card)
and writes ``tests/data/jsonschemabench_patterns.json.gz``::

    {"source": ..., "patterns": [{"pattern": str, "kind": "pattern" | "patternProperties",
                                  "count": int (occurrences), "ids": [schema ids, at most 3],
                                  "strings": [instance strings at that location, at most 20]}]}

A pattern's strings are the values found where the pattern applies on a simple path: the schema
node with the ``pattern`` is reached through ``properties``/``items``/``additionalProperties``/
``allOf``/``anyOf``/``oneOf`` and the instance is walked alongside (valid and invalid test instances
alike: the test compares with ``re.fullmatch`` so the label does not matter).  For
``patternProperties`` keys, the strings are the instance's property names at that node.

Usage: python scripts/extract_pattern_data.py [--data DIR] [--out PATH]
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_STRINGS = 20


def _open(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _walk(schema, instance, out, sid):
    """Record patterns of ``schema`` (and sub-schemas) and the strings of ``instance`` there.
    ``instance`` is ``_NONE`` when no instance value lies at this node."""
    if not isinstance(schema, dict):
        return
    pat = schema.get("pattern")
    if isinstance(pat, str):
        rec = out.setdefault(("pattern", pat), {"count": 0, "ids": [], "strings": []})
        if isinstance(instance, str) and instance not in rec["strings"]:
            rec["strings"].append(instance)
    pp = schema.get("patternProperties")
    if isinstance(pp, dict):
        for key, sub in pp.items():
            rec = out.setdefault(("patternProperties", key), {"count": 0, "ids": [], "strings": []})
            if isinstance(instance, dict):
                for name in instance:
                    if name not in rec["strings"]:
                        rec["strings"].append(name)
            _walk(sub, _NONE, out, sid)
    props = schema.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            val = instance.get(name, _NONE) if isinstance(instance, dict) else _NONE
            _walk(sub, val, out, sid)
    ap = schema.get("additionalProperties")
    if isinstance(ap, dict):
        if isinstance(instance, dict):
            known = set(props or ())
            vals = [v for k, v in instance.items() if k not in known] or [_NONE]
        else:
            vals = [_NONE]
        for v in vals:
            _walk(ap, v, out, sid)
    items = schema.get("items")
    if isinstance(items, dict):
        vals = instance if isinstance(instance, list) and instance else [_NONE]
        for v in vals:
            _walk(items, v, out, sid)
    elif isinstance(items, list):
        for i, sub in enumerate(items):
            v = instance[i] if isinstance(instance, list) and i < len(instance) else _NONE
            _walk(sub, v, out, sid)
    for kw in ("allOf", "anyOf", "oneOf"):
        subs = schema.get(kw)
        if isinstance(subs, list):
            for sub in subs:
                _walk(sub, instance, out, sid)
    # everything else (definitions, $defs, not, if/then/else, dependencies, ...): patterns only
    for kw, val in schema.items():
        if kw in ("properties", "patternProperties", "additionalProperties", "items", "allOf",
                  "anyOf", "oneOf", "enum", "const", "default", "examples", "example"):
            continue
        if isinstance(val, dict):
            if all(isinstance(v, dict) for v in val.values()) and kw not in ("not", "if", "then",
                                                                            "else"):
                for sub in val.values():
                    _walk(sub, _NONE, out, sid)
            else:
                _walk(val, _NONE, out, sid)
        elif isinstance(val, list):
            for sub in val:
                _walk(sub, _NONE, out, sid)


class _NoneType:
    pass


_NONE = _NoneType()


def extract(data_dir: Path) -> list[dict]:
    out: dict[tuple[str, str], dict] = {}
    for path in sorted(data_dir.glob("*.jsonl*")):
        with _open(path) as f:
            for line in f:
                rec = json.loads(line)
                sid = rec["id"]
                before = {k: v["count"] for k, v in out.items()}
                seen: dict = {}
                _walk(rec["schema"], _NONE, seen, sid)
                for t in rec.get("tests") or []:
                    _walk(rec["schema"], t.get("data"), seen, sid)
                for key, r in seen.items():
                    tgt = out.setdefault(key, {"count": 0, "ids": [], "strings": []})
                    tgt["count"] = before.get(key, 0) + 1
                    if len(tgt["ids"]) < 3:
                        tgt["ids"].append(sid)
                    for s in r["strings"]:
                        if len(tgt["strings"]) < MAX_STRINGS and s not in tgt["strings"]:
                            tgt["strings"].append(s)
    rows = [{"pattern": p, "kind": k, **v} for (k, p), v in out.items()]
    rows.sort(key=lambda r: (r["kind"], r["pattern"]))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path,
                    default=ROOT.parent / "shared" / "data" / "jsonschemabench")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "tests" / "data" / "jsonschemabench_patterns.json.gz")
    args = ap.parse_args()
    rows = extract(args.data)
    doc = {
        "source": "JSONSchemaBench (github.com/guidance-ai/jsonschemabench @ ba103c73; MIT per the "
                  "HF dataset card epfl-dlab/JSONSchemaBench), extracted by "
                  "scripts/extract_pattern_data.py from ../shared/data/jsonschemabench",
        "patterns": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(args.out, "wb", mtime=0) as f:
        f.write(json.dumps(doc, ensure_ascii=False, sort_keys=True).encode("utf-8"))
    n_pat = sum(r["kind"] == "pattern" for r in rows)
    n_str = sum(len(r["strings"]) for r in rows)
    print(f"{len(rows)} distinct patterns ({n_pat} `pattern`, {len(rows) - n_pat} "
          f"patternProperties keys), {n_str} instance strings -> {args.out} "
          f"({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
