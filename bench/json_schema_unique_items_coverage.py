"""uniqueItems at token level: the JSONSchemaBench schemas that the byte-level coverage bench
refuses for ``uniqueItems``, compiled with the public API and checked.

Why: ``bench/jsonschemabench_coverage.py`` checks the *byte* automaton
(``JsonSchemaCompiler(...).build()``), which cannot express ``uniqueItems: true`` over an
unbounded item domain (distinct items are not a regular language) and so counts those schemas
as refused (``UnsupportedSchemaError``, keyword ``uniqueItems``).  The public API
``compile_json_schema(schema, vocab, canonical=False)`` compiles many of them anyway, with the
per-request token-level checker ``UniqueItemsAutomaton`` (``fsa/json_schema/unique_items.py``).
This bench says how many of those refusals compile at token level, whether the result is sound
on the records' own test instances, and whether GCD walks on it validate.

Schemas: every record (``/work/shared/data/jsonschemabench``, read with
``jsonschemabench_coverage.load``) whose byte-level record has ``status == "unsupported"`` and
``keyword == "uniqueItems"``.  The byte-level records are read from
``bench/results/jsonschemabench_coverage.json`` (the full run, ``results``: subset -> records),
except for the subsets re-run since (``jsonschemabench_coverage_jsonschemastore.json``,
``jsonschemabench_coverage_github_ultra.json``), whose newer records are used instead.

How, per schema, in a worker process (``--jobs``; address space limited to ``--mem-gib`` GiB;
``harness.WorkerProcess``, killed and restarted when it does not answer in time): compile
``compile_json_schema(schema, vocab, canonical=False)`` on the Llama-3 vocabulary (loaded and
``lift.prepare``-d once per worker, with a warm-up compile outside the limits) under a
``--timeout`` (SIGALRM, ``harness.time_limit``).  Status: compiled / refused (the
``UnsupportedSchemaError``'s keyword and pointer) / invalid schema / empty / timeout / memory /
error / killed.  For a compiled schema:

* test instances: each of the record's ``tests`` (``{"valid", "data"}``) is put in the schema's
  key order (``serialize_instance``, as the coverage bench's canonical text) and written in each
  ``--styles`` of ``tractable.testing.json_schema.serializations`` (default: ``compact`` =
  ``json.dumps(x, separators=(",", ":"), ensure_ascii=False)`` and ``dumps`` = ``json.dumps``'s
  default), tokenized with the Llama-3 tokenizer (``tokenizers``, no special tokens; the ids must
  decode back to the same bytes) and checked with ``A.accepts(ids)`` (the token automaton's
  acceptance; for a ``UniqueItemsAutomaton`` it includes the duplicate check).  A text that
  ``check_instance_text`` judges differently from the label is left out (``unrepresentable``, as
  in the coverage bench).  Counted: valid accepted, invalid accepted (goal 0), and the invalid
  instances that are invalid only through ``uniqueItems`` (valid once every ``uniqueItems:
  true`` is set to ``false``) and their acceptances.
* GCD random walks exactly as ``bench/json_schema_gcd_walks.py`` (its ``_budgets`` and
  ``_walk``; budgets m, m+1, 2m, 3m, m+64 with m = ``A.min_tokens_to_accept()``; ``--walks``
  walks per budget, seeded as that bench's ``every`` language), validated with
  ``check_instance_text``: valid, invalid, dead ends (``UniqueItemsDeadEndError`` or an empty
  mask), and walks exercising uniqueness (schema-valid, but invalid with every ``uniqueItems:
  true`` replaced by ``maxItems: 1``).
* ``--policy``: the walks' token choice (``json_schema_gcd_walks.run_walks``'s ``policy``).
  ``uniform`` (the default, as above) almost never completes two items of a unique array
  (committed run: 0 walks exercising uniqueness).  ``long-arrays`` draws among the same allowed
  ids (the GCD mask, never widened) a class of the id's first byte after leading whitespace --
  ``]`` 1/10, ``,`` 3, ``"`` 3, whitespace only 3/10, other 1 -- then an id of that class
  uniformly, so that arrays get several short items (``json_schema_gcd_walks`` docstring).
  With it the walks also count, per step of a ``UniqueItemsAutomaton``, the ids that the
  uniqueness check removed: allowed by the underlying automaton's mask at the same state and
  budget (``A.automaton.allowed(st, r)``, uniqueness ignored) but not by ``A.allowed(st, r)``
  (the whole plain mask at a ``UniqueItemsDeadEndError``): *removal steps* = steps with at least
  one such id.

Usage: OMP_NUM_THREADS=1 nice -n 19 python bench/json_schema_unique_items_coverage.py
    [--walks 5] [--policy uniform|long-arrays] [--timeout 60] [--walk-timeout 150]
    [--instance-timeout 300] [--jobs 1] [--mem-gib 8] [--styles compact,dumps] [--limit N]
    [--ids A,B] [--compiled-in RESULTS.json,...] [--resume] [--notes FILE] [--report-only]
Writes bench/results/json_schema_unique_items_coverage.{md,json} (``--out`` for another stem);
each finished schema is also appended to ``<stem>.partial.jsonl`` so that ``--resume`` can
continue a stopped run.  ``--compiled-in`` keeps only the schemas whose status is ``compiled``
in one of the given result files of this bench.  ``--notes FILE`` stores a hand-written
markdown section in the json (kept by later runs and by ``--report-only``, which rewrites the
md from the json).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness import (
    RESULTS,
    BenchTimeout,
    WorkerProcess,
    command_line,
    load_json,
    load_vocabulary,
    machine,
    run_threads,
    save_json,
    time_limit,
    tokenizer_path,
    utc_now,
    versions,
)
from json_schema_gcd_walks import (
    _SCHEMA_MAPS,
    EXTRA,
    LONG_ARRAYS,
    POLICIES,
    _md_escape,
    run_walks,
    source_state,
    without_unique,
)
from jsonschemabench_coverage import DATA, SUBSETS, load

OUT = RESULTS / "json_schema_unique_items_coverage"
BYTE_FULL = RESULTS / "jsonschemabench_coverage.json"
BYTE_RERUNS = [RESULTS / "jsonschemabench_coverage_jsonschemastore.json",
               RESULTS / "jsonschemabench_coverage_github_ultra.json"]
OPTIONS = {"canonical": False}  # the every-serialization language
EXAMPLES = 3  # failing instances kept per schema and kind
TEXT_CHARS = 300


def unique_off(node, in_map: bool = False):
    """The schema with every ``uniqueItems: true`` keyword set to ``false`` (names in the
    schema maps, e.g. a property called ``uniqueItems``, left alone)."""
    if isinstance(node, list):
        return [unique_off(x) for x in node]
    if not isinstance(node, dict):
        return node
    if in_map:
        return {k: unique_off(v) for k, v in node.items()}
    return {k: (False if k == "uniqueItems" and v is True
                else unique_off(v, in_map=k in _SCHEMA_MAPS)) for k, v in node.items()}


# ---------------------------------------------------------------- byte-level records, selection


def byte_records() -> tuple[dict[str, dict[str, dict]], dict[str, str]]:
    """subset -> id -> byte-level record, and subset -> the file its records come from (a
    re-run's file replaces the full run's for its subsets)."""
    recs: dict[str, dict[str, dict]] = {}
    src: dict[str, str] = {}
    for path in [BYTE_FULL, *BYTE_RERUNS]:
        data = load_json(path)
        if data is None:
            continue
        for sub, rs in data["results"].items():
            recs[sub] = {r["id"]: r for r in rs}
            src[sub] = f"{path.name} ({data['meta'].get('date', '?')})"
    return recs, src


def refused_for_unique(r: dict | None) -> bool:
    return bool(r) and r.get("status") == "unsupported" and r.get("keyword") == "uniqueItems"


def select(subsets: list[str], byte: dict[str, dict[str, dict]]) -> tuple[list[dict], dict]:
    """The records refused at byte level for ``uniqueItems`` (file order), and per subset the
    number of records, of byte-level records and of those refused for ``uniqueItems``."""
    out, counts = [], {}
    for sub in subsets:
        n = 0
        for rec in load(sub, DATA):
            n += 1
            br = byte.get(sub, {}).get(rec["id"])
            if refused_for_unique(br):
                out.append({"id": rec["id"], "subset": sub, "schema": rec["schema"],
                            "tests": rec.get("tests", []), "byte_pointer": br.get("pointer")})
        counts[sub] = {"records": n, "byte_records": len(byte.get(sub, {})),
                       "refused_unique": sum(refused_for_unique(r)
                                             for r in byte.get(sub, {}).values())}
    return out, counts


# ---------------------------------------------------------------- worker side


def _compile(rec: dict, vocab, timeout: int) -> tuple[object | None, dict]:
    import warnings

    from tractable.fsa.errors import (
        EmptyLanguageError,
        InvalidSchemaError,
        UnsupportedSchemaError,
    )
    from tractable.fsa.json_schema import compile_json_schema

    out: dict = {}
    t0 = time.perf_counter()
    try:
        with time_limit(timeout), warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            A = compile_json_schema(rec["schema"], vocab, **OPTIONS)
        out["warnings"] = sorted({str(x.message)[:200] for x in w})
    except BenchTimeout:
        return None, {"status": "timeout", "why": f"compile > {timeout} s"}
    except UnsupportedSchemaError as e:
        return None, {"status": "refused", "keyword": e.keyword, "pointer": e.pointer,
                      "detail": str(getattr(e, "detail", ""))[:300], "why": str(e)[:300]}
    except InvalidSchemaError as e:
        return None, {"status": "invalid_schema", "why": str(e)[:300]}
    except EmptyLanguageError as e:
        return None, {"status": "empty", "why": str(e)[:300]}
    except MemoryError:
        return None, {"status": "memory", "why": "MemoryError (address-space limit)"}
    except RecursionError:
        return None, {"status": "error", "why": "RecursionError"}
    except Exception as e:  # noqa: BLE001 - a bug, reported
        why = f"{type(e).__name__}: {e}"[:300]
        mem = isinstance(e, RuntimeError) and "allocate" in str(e)  # torch under RLIMIT_AS
        return None, {"status": "memory" if mem else "error", "why": why}
    out["compile_seconds"] = round(time.perf_counter() - t0, 3)
    out["status"] = "compiled"
    return A, out


def _instances(A, vocab, tok, rec: dict, styles: list[str]) -> dict:
    """Each test instance in each style: tokenized, ``A.accepts``; counts and examples."""
    from tractable.fsa.json_schema import serialize_instance

    from tractable.testing.json_schema import check_instance_text, serializations

    schema = rec["schema"]
    off = unique_off(schema)
    free = without_unique(schema)
    c = dict.fromkeys(("valid", "valid_accepted", "invalid", "invalid_accepted",
                       "invalid_dup_only", "invalid_dup_only_accepted", "valid_unique_used",
                       "unrepresentable", "tokenization_mismatch"), 0)
    by_style = {s: dict.fromkeys(("valid", "valid_accepted", "invalid", "invalid_accepted"), 0)
                for s in styles}
    rejected_valid, accepted_invalid, unrep = [], [], []
    for i, t in enumerate(rec["tests"]):
        try:
            texts = serializations(serialize_instance(t["data"], schema))
        except Exception as e:  # noqa: BLE001 - an instance the writer refuses (too deep)
            c["unrepresentable"] += len(styles)
            unrep.append(f"test {i}: {type(e).__name__}: {e}"[:200])
            continue
        for style in styles:
            tx = texts[style]
            data = tx.encode("utf-8")
            if (check_instance_text(data, schema) == "") != t["valid"]:
                c["unrepresentable"] += 1
                unrep.append(f"test {i} [{style}] labelled {t['valid']}: {tx[:120]}")
                continue
            ids = tok.encode(tx, add_special_tokens=False).ids
            if vocab.decode_bytes(ids) != data:
                c["tokenization_mismatch"] += 1
                continue
            acc = bool(A.accepts(ids))
            kind = "valid" if t["valid"] else "invalid"
            c[kind] += 1
            c[kind + "_accepted"] += acc
            by_style[style][kind] += 1
            by_style[style][kind + "_accepted"] += acc
            if t["valid"]:
                if check_instance_text(data, free) != "":
                    c["valid_unique_used"] += 1
                if not acc:
                    rejected_valid.append(f"test {i} [{style}] {tx[:TEXT_CHARS]}")
            else:
                dup = check_instance_text(data, off) == ""
                c["invalid_dup_only"] += dup
                c["invalid_dup_only_accepted"] += dup and acc
                if acc:
                    accepted_invalid.append(f"test {i} [{style}] {tx[:TEXT_CHARS]}")
    c.update(by_style=by_style, rejected_valid=rejected_valid[:EXAMPLES],
             accepted_invalid=accepted_invalid, unrepresentable_examples=unrep[:EXAMPLES])
    return c


def _task(vocab, tok, rec: dict, walks: int, timeout: int, walk_timeout: int,
          instance_timeout: int, styles: list[str], policy: str = "uniform") -> dict:
    from tractable.fsa.json_schema.unique_items import UniqueItemsAutomaton

    out = {"id": rec["id"], "subset": rec["subset"], "byte_pointer": rec["byte_pointer"],
           "tests": len(rec["tests"])}
    A, res = _compile(rec, vocab, timeout)
    out.update(res)
    if A is None:
        return out
    out["automaton"] = ("UniqueItemsAutomaton" if isinstance(A, UniqueItemsAutomaton)
                        else type(A).__name__)
    out["states"] = int(A.num_states)
    m = A.min_tokens_to_accept()
    out["min_tokens"] = m
    t1 = time.perf_counter()
    try:
        with time_limit(instance_timeout):
            out["instances"] = _instances(A, vocab, tok, rec, styles)
    except BenchTimeout:
        out["instances_stopped"] = f"time > {instance_timeout} s"
    except MemoryError:
        out["instances_stopped"] = "memory"
    except Exception as e:  # noqa: BLE001 - a bug, reported
        out["instances_stopped"] = f"{type(e).__name__}: {e}"[:300]
    out["instance_seconds"] = round(time.perf_counter() - t1, 3)
    run_walks(out, A, vocab, rec, "every", m, walks, walk_timeout, policy=policy,
              count_removed=policy != "uniform")
    return out


def _worker(inq, outq, mem_gib: float):
    import resource
    import warnings

    from tokenizers import Tokenizer

    lim = int(mem_gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    from tractable.fsa.json_schema import compile_json_schema
    from tractable.fsa.lift import prepare

    vocab = load_vocabulary("llama3")
    prepare(vocab)
    tok = Tokenizer.from_file(str(tokenizer_path("llama3")))
    with warnings.catch_warnings():  # the vocabulary's trie walks, cached, outside the limits
        warnings.simplefilter("ignore")
        compile_json_schema({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "number"}, "c": {"type": "integer"},
            "d": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}, vocab,
            **OPTIONS)
    outq.put("ready")
    while True:
        item = inq.get()
        if item is None:
            return
        rec = item[0]
        try:
            outq.put(_task(vocab, tok, *item))
        except BaseException as e:  # noqa: BLE001
            outq.put({"id": rec["id"], "subset": rec["subset"], "tests": len(rec["tests"]),
                      "byte_pointer": rec["byte_pointer"], "status": "error",
                      "why": f"worker: {type(e).__name__}: {e}"[:300]})


def _killed(worker: WorkerProcess, rec: dict) -> dict:
    return {"id": rec["id"], "subset": rec["subset"], "tests": len(rec["tests"]),
            "byte_pointer": rec["byte_pointer"], "status": "killed", "why": worker.why}


# ---------------------------------------------------------------- report


def _walk_counts(ws: list[dict]) -> dict:
    out = {"walks": len(ws), "valid": sum(bool(w["schema_valid"]) for w in ws),
           "invalid": sum(not w["schema_valid"] and w["end"] in ("eos", "budget") for w in ws),
           "dead_ends": sum(w["end"] in ("dead_end", "dead_end_unique") for w in ws),
           "other": sum(w["end"] in ("advance_dead", "error") for w in ws),
           "unique_exercised": sum(bool(w.get("unique_exercised")) for w in ws)}
    if any("unique_removed_steps" in w for w in ws):  # counted (--policy other than uniform)
        out.update(removal_steps=sum(w.get("unique_removed_steps", 0) for w in ws),
                   removal_walks=sum(bool(w.get("unique_removed_steps")) for w in ws),
                   removed_ids=sum(w.get("unique_removed_tokens", 0) for w in ws),
                   tokens=sum(w.get("tokens") or 0 for w in ws))
    return out


_INST_KEYS = ("valid", "valid_accepted", "invalid", "invalid_accepted", "invalid_dup_only",
              "invalid_dup_only_accepted", "valid_unique_used", "unrepresentable",
              "tokenization_mismatch")


def _row(label: str, tasks: list[dict], refused: int) -> dict:
    comp = [t for t in tasks if t["status"] == "compiled"]
    st: dict[str, int] = {}
    for t in tasks:
        if t["status"] != "compiled":
            key = f"refused ({t['keyword']})" if t["status"] == "refused" else t["status"]
            st[key] = st.get(key, 0) + 1
    inst = dict.fromkeys(_INST_KEYS, 0)
    for t in comp:
        for k in _INST_KEYS:
            inst[k] += t.get("instances", {}).get(k, 0)
    return {"row": label, "byte_refused_unique": refused, "run": len(tasks),
            "compiled": len(comp),
            "checker": sum(t.get("automaton") == "UniqueItemsAutomaton" for t in comp),
            "not_compiled": st, "timeouts": st.get("timeout", 0), "instances": inst,
            "instances_stopped": sum("instances_stopped" in t for t in comp),
            "walk_stopped": sum(bool(t.get("walk_timeout") or t.get("walk_memory"))
                                for t in comp),
            **_walk_counts([w for t in comp for w in t.get("walks", [])])}


def _fmt_status(st: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(st.items())) or "0"


def summarize(tasks: list[dict], counts: dict) -> list[dict]:
    rows = [_row(sub, [t for t in tasks if t["subset"] == sub], c["refused_unique"])
            for sub, c in counts.items()]
    rows.append(_row("**total**", tasks, sum(c["refused_unique"] for c in counts.values())))
    for r in rows:
        sub = r["row"]
        r["records"] = (counts[sub]["records"] if sub in counts
                        else sum(c["records"] for c in counts.values()))
    return rows


def _fail_kind(w: dict) -> str:
    """A walk that is not schema-valid, by kind (its end, or the validator's message)."""
    msg = w.get("message") or ""
    if w["end"] not in ("eos", "budget"):
        return w["end"]
    if msg.startswith("not JSON: duplicate keys"):
        return "duplicate object keys (`check_instance_text`: not JSON)"
    return "not JSON" if msg.startswith("not JSON") else "schema-invalid"


def _pct(a: int, b: int) -> str:
    return f" ({100 * a / b:.1f}%)" if b else ""


def write(data: dict, out: Path) -> None:
    meta, rows, tasks = data["meta"], data["summary"], data["tasks"]
    a = dict(meta["args"])
    if isinstance(a["styles"], str):
        a["styles"] = a["styles"].split(",")
    save_json(out.with_suffix(".json"), data, indent=0)
    tot = rows[-1]
    policy = a.get("policy", "uniform")
    lr = policy != "uniform"  # the removal columns (counted by the non-uniform policies)
    L = ["# uniqueItems at token level: the JSONSchemaBench schemas the byte-level coverage "
         "bench refuses" + (f" (walk policy `{policy}`)" if lr else ""), "",
         f"Command: `{meta['command']}`  ",
         f"Machine: {meta['machine']}  ",
         f"Versions: {meta['versions']}  ",
         f"Date: {meta['date']}; run time {meta['run_seconds'] / 60:.1f} min", "",
         "**What.** Every JSONSchemaBench record whose byte-level record "
         "(`bench/jsonschemabench_coverage.py`: `JsonSchemaCompiler(...).build()`) is "
         "`unsupported` with keyword `uniqueItems` is compiled with the public API "
         "`compile_json_schema(schema, vocab, canonical=False)` (Llama-3, 128,256 ids), which "
         "checks `uniqueItems` per request at token level (`UniqueItemsAutomaton`, "
         "`fsa/json_schema/unique_items.py`).  Byte-level records: "
         + "; ".join(f"{sub}: `{src}`" for sub, src in meta["byte_sources"].items()) + ".", "",
         "**How.** One schema at a time in a worker process "
         f"({a['jobs']} worker(s), {a['mem_gib']:g} GiB address space), compile limit "
         f"{a['timeout']} s.  *Test instances*: each of the record's `tests` in the schema's key "
         "order (`serialize_instance`), written in the styles "
         + ", ".join(f"`{s}`" for s in a["styles"])
         + " (`tractable.testing.json_schema.serializations`: `compact` = "
         "`json.dumps(x, separators=(\",\", \":\"), ensure_ascii=False)`, `dumps` = "
         "`json.dumps(x)`), tokenized by the Llama-3 tokenizer (no special tokens; ids decode "
         "back to the same bytes) and checked with `A.accepts(ids)`; a text that "
         "`check_instance_text` (the schema's draft, format checker, duplicate keys = failure) "
         "judges against its label is left out (*unrepresentable*).  *Walks*: the GCD random "
         "walks of `bench/json_schema_gcd_walks.py` (its `_walk`; budgets m, m+1, 2m, 3m, "
         f"m+{EXTRA} with m = `A.min_tokens_to_accept()`, duplicates merged; {a['walks']} "
         f"walks per budget, walks limit {a['walk_timeout']} s per schema), validated by "
         "`check_instance_text`."
         + ("" if not lr else
            f"  **Walk policy `{policy}`** (`--policy`; the default `uniform` picks an allowed "
            "id uniformly and almost never completes two items of a unique array): the id is "
            "drawn among the same allowed ids (the GCD mask, never widened) in two stages, a "
            "class of its first byte after leading whitespace -- "
            + ", ".join(f"`{k}` {v:g}" if k not in ("", "other") else
                        f"{'whitespace only' if k == '' else 'other'} {v:g}"
                        for k, v in LONG_ARRAYS.items())
            + " (weights, among the classes with an allowed id) -- then an id of the class "
            "uniformly; seeded as `uniform` plus `|long-arrays`.  Each step of a "
            "`UniqueItemsAutomaton` also compares the mask `A.allowed(st, r)` with the "
            "underlying automaton's `A.automaton.allowed(st, r)` (same state and budget, "
            "uniqueness ignored): the ids in the second only are those the uniqueness check "
            "removed (at a `UniqueItemsDeadEndError`: all of the second)."), "",
         "Columns: *refused (byte)* = byte-level records refused for `uniqueItems`; *compiled; "
         "checker* = compiled at token level; of which a `UniqueItemsAutomaton` (the others "
         "are exact regular automata: small item domains); *still refused* by keyword and the "
         "other statuses; *valid acc.* / *invalid acc.* = test texts accepted (invalid: goal "
         "0); *dup-only* = invalid texts that are valid once `uniqueItems` is off (accepted / "
         "total); *walks valid* = schema-valid walks; *dead ends* = "
         "`UniqueItemsDeadEndError` or empty mask (the checker's documented failure mode, "
         "never an invalid text); *unique used* = schema-valid walks with a unique array of 2+ "
         "items (invalid with `maxItems: 1` in place of `uniqueItems`)."
         + ("" if not lr else
            "  *Removal steps (walks)* = walk steps where the uniqueness check removed at "
            "least one id that the plain mask allowed (walks with at least one such step); "
            "*removed ids* = those ids, summed over the steps; *tokens* = tokens the walks "
            "generated (EOS excluded)."), "",
         "| subset | records | refused (byte) | compiled; checker | still refused / other | "
         "timeouts | valid acc. | invalid acc. | dup-only acc. | walks valid | invalid walks | "
         "dead ends | unique used |"
         + (" removal steps (walks) | removed ids | tokens |" if lr else ""),
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if lr else "")]
    zero = [r["row"] for r in rows[:-1] if not r["byte_refused_unique"]]
    for r in rows:
        if r["row"] in zero:
            continue
        i = r["instances"]
        L.append(
            f"| {r['row']} | {r['records']} | {r['byte_refused_unique']} | {r['compiled']}"
            f"{_pct(r['compiled'], r['run'])}; {r['checker']} | "
            f"{_fmt_status({k: v for k, v in r['not_compiled'].items() if k != 'timeout'})} | "
            f"{r['timeouts']} | {i['valid_accepted']}/{i['valid']} | "
            f"{i['invalid_accepted']}/{i['invalid']} | "
            f"{i['invalid_dup_only_accepted']}/{i['invalid_dup_only']} | "
            f"{r['valid']}/{r['walks']}{_pct(r['valid'], r['walks'])} | {r['invalid']} | "
            f"{r['dead_ends']} | {r['unique_exercised']} |"
            + (f" {r.get('removal_steps', 0)} ({r.get('removal_walks', 0)}) | "
               f"{r.get('removed_ids', 0)} | {r.get('tokens', 0)} |" if lr else ""))
    ti = tot["instances"]
    if zero:
        L += ["", "No byte-level record of " + ", ".join(zero) + " is refused for "
              "`uniqueItems` (rows left out)."]
    if tot["run"] != tot["byte_refused_unique"]:
        L += ["", f"**Only {tot['run']} of the {tot['byte_refused_unique']} schemas were run** "
              "(`--ids` / `--compiled-in` / `--limit`)."]
    L += ["", f"Test texts left out: {ti['unrepresentable']} unrepresentable (validator "
          f"disagrees with the label, or the writer refused the instance), "
          f"{ti['tokenization_mismatch']} whose tokens did not decode to the same bytes.  "
          f"Valid texts with a unique array of 2+ items: {ti['valid_unique_used']}.  "
          f"Schemas whose instance checks stopped early: {tot['instances_stopped']}; whose "
          f"walks hit the walks limit: {tot['walk_stopped']}; walks ending in another failure "
          f"(an allowed token the automaton could not read, an exception): {tot['other']}.",
          "", "By style (compiled schemas):", "",
          "| style | valid accepted | invalid accepted |", "|---|---|---|"]
    for s in a["styles"]:
        v = va = iv = ia = 0
        for t in tasks:
            bs = t.get("instances", {}).get("by_style", {}).get(s)
            if bs:
                v, va = v + bs["valid"], va + bs["valid_accepted"]
                iv, ia = iv + bs["invalid"], ia + bs["invalid_accepted"]
        L.append(f"| {s} | {va}/{v} | {ia}/{iv} |")
    L += ["", "## Failures", "", "Invalid test texts accepted (unsound):", ""]
    bad = [(t, x) for t in tasks for x in t.get("instances", {}).get("accepted_invalid", [])]
    L += [f"* {t['id']}: `{_md_escape(x)}`" for t, x in bad] or ["None."]
    L += ["", "Walks that are not schema-valid:", ""]
    kinds: dict[str, int] = {}
    for t in tasks:
        for w in t.get("walks", []):
            if not w["schema_valid"]:
                kinds[_fail_kind(w)] = kinds.get(_fail_kind(w), 0) + 1
    if kinds:
        L += ["By kind: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ".", ""]
    nf = 0
    for t in tasks:
        for w in t.get("walks", []):
            if w["schema_valid"]:
                continue
            nf += 1
            L.append(f"* {t['id']} ({t.get('automaton')}, m = {t.get('min_tokens')}), budget "
                     f"{w['budget']} ({w['budget_kind']}), walk {w['walk']}: **{w['end']}** "
                     f"after {w.get('tokens')} tokens; message: "
                     f"`{_md_escape(w.get('message') or '')[:300]}`; text: "
                     f"`{_md_escape((w.get('text') or '')[:TEXT_CHARS])}`")
    if not nf:
        L.append("None.")
    L += ["", "Valid test texts rejected (first per schema; a subset, not unsound):", ""]
    rv = [(t, t["instances"]["rejected_valid"][0]) for t in tasks
          if t.get("instances", {}).get("rejected_valid")]
    L += [f"* {t['id']}: `{_md_escape(x[:200])}`" for t, x in rv] or ["None."]
    L += ["", "## Per schema", "",
          "compile s = `compile_json_schema` wall time; m = `min_tokens_to_accept`; instances = "
          "valid acc./total, invalid acc./total over all styles; walks = valid/total, dead "
          "ends, unique used" + (", invalid walks, removal steps (walks)" if lr else "") + ".",
          "",
          "| schema | byte pointer | status | automaton | compile s | states | m | "
          "valid acc. | invalid acc. | walks | dead ends | unique used |"
          + (" invalid walks | removal steps (walks) |" if lr else ""),
          "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if lr else "")]
    for t in tasks:
        ptr = _md_escape(str(t.get("byte_pointer") or ""))[:80]
        if t["status"] != "compiled":
            st = (f"refused `{t['keyword']}` at `{_md_escape(t['pointer'])[:80]}`"
                  + (f": {_md_escape(t['detail'])[:160]}" if t.get("detail") else "")
                  if t["status"] == "refused" else
                  f"{t['status']}: {_md_escape(t.get('why', ''))[:120]}")
            L.append(f"| {t['id']} | `{ptr}` | {st} | | | | | | | | | |"
                     + (" | |" if lr else ""))
            continue
        i = t.get("instances")
        inst = (f"{i['valid_accepted']}/{i['valid']} | {i['invalid_accepted']}/{i['invalid']}"
                if i else f"stopped: {t.get('instances_stopped')} | ")
        wc = _walk_counts(t.get("walks", []))
        wt = " (walks stopped)" if t.get("walk_timeout") or t.get("walk_memory") else ""
        L.append(f"| {t['id']} | `{ptr}` | compiled | {t['automaton']} | "
                 f"{t['compile_seconds']:.2f} | {t['states']} | {t['min_tokens']} | {inst} | "
                 f"{wc['valid']}/{wc['walks']}{wt} | {wc['dead_ends']} | "
                 f"{wc['unique_exercised']} |"
                 + (f" {wc['invalid']} | {wc.get('removal_steps', 0)} "
                    f"({wc.get('removal_walks', 0)}) |" if lr else ""))
    if data.get("notes"):
        L += ["", "## Notes (by hand)", "", data["notes"].rstrip()]
    out.with_suffix(".md").write_text("\n".join(L) + "\n")
    print(f"wrote {out.with_suffix('.md')}", flush=True)


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subsets", default=",".join(SUBSETS))
    ap.add_argument("--ids", default=None, help="only these record ids (comma-separated)")
    ap.add_argument("--limit", type=int, default=0, help="first N selected schemas (0 = all)")
    ap.add_argument("--compiled-in", default=None,
                    help="only the schemas compiled in these result files (comma-separated)")
    ap.add_argument("--walks", type=int, default=5, help="walks per budget")
    ap.add_argument("--policy", choices=POLICIES, default="uniform",
                    help="the walks' token choice (json_schema_gcd_walks.run_walks)")
    ap.add_argument("--timeout", type=int, default=60, help="compile limit (s)")
    ap.add_argument("--walk-timeout", type=int, default=150, help="walks limit (s) per schema")
    ap.add_argument("--instance-timeout", type=int, default=300,
                    help="test-instance checks limit (s) per schema")
    ap.add_argument("--styles", default="compact,dumps",
                    help="comma-separated styles of tractable.testing.json_schema.STYLES")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--mem-gib", type=float, default=8.0)
    ap.add_argument("--out", type=Path, default=OUT, help="result stem (.md / .json)")
    ap.add_argument("--resume", action="store_true", help="keep the partial file's schemas")
    ap.add_argument("--notes", type=Path, default=None,
                    help="markdown file: the md's 'Notes (by hand)' section")
    ap.add_argument("--report-only", action="store_true", help="rewrite the md from the json")
    args = ap.parse_args()
    out = args.out.with_suffix("") if args.out.suffix in (".md", ".json") else args.out
    old = load_json(out.with_suffix(".json"), {})
    notes = args.notes.read_text() if args.notes else old.get("notes")
    if args.report_only:
        old["notes"] = notes
        write(old, out)
        return
    t_start = time.perf_counter()
    src0 = source_state()
    byte, byte_src = byte_records()
    subsets = args.subsets.split(",")
    recs, counts = select(subsets, byte)
    if args.ids:
        want = set(args.ids.split(","))
        recs = [r for r in recs if r["id"] in want]
    if args.compiled_in:
        ok = {t["id"] for f in args.compiled_in.split(",")
              for t in load_json(Path(f))["tasks"] if t["status"] == "compiled"}
        recs = [r for r in recs if r["id"] in ok]
    if args.limit:
        recs = recs[:args.limit]
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial.jsonl")
    results: dict[str, dict] = {}
    if args.resume and partial.exists():
        for line in partial.read_text().splitlines():
            r = json.loads(line)
            results[r["id"]] = r
    else:
        partial.write_text("")
    todo = [r for r in recs if r["id"] not in results]
    print(f"{len(recs)} schemas refused for uniqueItems at byte level, {len(todo)} to run",
          flush=True)
    hard = args.timeout + args.walk_timeout + args.instance_timeout + 120

    def record(rec, r):
        results[r["id"]] = r
        with open(partial, "a") as f:
            f.write(json.dumps(r, default=str) + "\n")
        i = r.get("instances", {})
        wc = _walk_counts(r.get("walks", []))
        print(f"[{len(results)}/{len(recs)} {time.perf_counter() - t_start:.0f}s] {r['id']}: "
              f"{r['status']} {r.get('keyword', '')} {r.get('automaton', '')} "
              f"c={r.get('compile_seconds')} m={r.get('min_tokens')} "
              f"valid {i.get('valid_accepted')}/{i.get('valid')} "
              f"invalid {i.get('invalid_accepted')}/{i.get('invalid')} "
              f"walks {wc['valid']}/{wc['walks']} dead {wc['dead_ends']} "
              f"uniq {wc['unique_exercised']} removal {wc.get('removal_steps', '-')} "
              f"i={r.get('instance_seconds')} "
              f"w={r.get('walk_seconds')}", flush=True)

    items = [(rec, args.walks, args.timeout, args.walk_timeout, args.instance_timeout,
              args.styles.split(","), args.policy) for rec in todo]
    run_threads(items, args.jobs,
                lambda: WorkerProcess(_worker, args.mem_gib, ready=True, context="fork"),
                lambda w, item: w.ask(item, hard, poll=5) or _killed(w, item[0]), record)
    tasks = [results[r["id"]] for r in recs]
    src1 = source_state()
    kills = sum(t["status"] == "killed" for t in tasks)
    ver = (f"git {src0['head']}" + (" + uncommitted library changes" if src0["dirty"] else "")
           + f" (library sources sha256 {src0['digest']} at start")
    ver += (", unchanged at the end)" if src1["digest"] == src0["digest"] else
            f"; they changed during the run: HEAD {src1['head']}, sha256 {src1['digest']} at "
            "the end; the workers imported them at start-up"
            + (f" and at {kills} restarts)" if kills else " and were never restarted)"))
    v = versions("torch", "jsonschema", "tokenizers")
    meta = {"command": command_line("json_schema_unique_items_coverage.py", args,
                                    skip=("resume", "notes", "report_only", "out"),
                                    prefix="OMP_NUM_THREADS=1 nice -n 19 python"),
            "machine": machine(note="shared CPU VM, other jobs running"),
            "versions": f"python {v['python']}, torch {v['torch']}, jsonschema "
                        f"{v['jsonschema']}, tokenizers {v['tokenizers']}, {ver}",
            "date": utc_now(), "run_seconds": time.perf_counter() - t_start,
            "source_start": src0, "source_end": src1, "byte_sources": byte_src,
            "counts": counts,
            "args": {k: (str(x) if isinstance(x, Path) else x) for k, x in vars(args).items()}}
    if args.resume:
        meta["resumed"] = True
    data = {"meta": meta, "summary": summarize(tasks, counts), "notes": notes,
            "tasks": tasks}
    write(data, out)
    partial.unlink()
    print(f"done in {meta['run_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
