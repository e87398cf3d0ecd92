"""GCD random walks on JSONSchemaBench schemas, validated with ``jsonschema`` (issue 19).

Claim checked: a walk that follows the budget-aware GCD mask -- any allowed token, chosen
uniformly -- always stops in an accepted text that ``jsonschema`` validates, at every budget from
the minimum up, ``uniqueItems`` included.  Both languages are walked in the same run:
``every`` = ``compile_json_schema(schema, vocab, canonical=False)`` (every RFC 8259
serialization) and ``canonical`` = ``canonical=True`` (the default).

Schemas: the first ``--per-subset`` records (file order) of each of nine JSONSchemaBench subsets
(``/work/shared/data/jsonschemabench``), plus the ``--unique`` smallest (compact serialization
length, then id) other JsonSchemaStore records whose schema contains ``"uniqueItems": true``.

Vocabulary: Llama-3 (``fixtures/tokenizers/llama3/tokenizer.json``, 128,256 ids, EOS 128001),
loaded and ``lift.prepare``-d once per worker process.  Each (schema, language) runs in a worker
(``--jobs`` processes; address space limited to ``--mem-gib``) with a compile time limit
(``--timeout``, SIGALRM) and a limit on the walks' total time (``--walk-timeout``); a worker that
does not answer in time is killed and restarted (status ``killed``).  Schemas that do not
compile are reported with their status (unsupported keyword, invalid schema, empty language,
timeout, memory, error).

Walks: m = ``A.min_tokens_to_accept()``; budgets r in {m, m+1, 2m, 3m} (the issue's "from the
minimum to 3x") plus m+64 (so that schemas with m = 1, e.g. ``{}``, get walks long enough to
open arrays and strings).  r counts the tokens that may still be generated, EOS included
(``fsa/state.py``).  Per budget ``--walks`` walks: at each step the mask ``A.allowed(st, r)``,
a token drawn uniformly among the allowed ids (``random.Random`` seeded by id, language,
budget, walk), ``A.advance``, r -= 1; the walk ends when EOS is drawn or r reaches 0.  Then
the text (``vocab.decode_bytes``, EOS excluded) is checked by
``tractable.testing.json_schema.check_instance_text`` (``json.loads``, duplicate keys counted
as failures, the schema's own draft via ``validator_for``, that draft's format checker).  An
empty mask before the walk ends is a dead end (``UniqueItemsDeadEndError`` for the per-request
uniqueItems checker); a walk that runs out of budget in a non-accepting state is counted too.
For schemas with ``uniqueItems``, a schema-valid walk "exercises" uniqueness when its instance
fails the same schema with every ``uniqueItems: true`` replaced by ``maxItems: 1`` (a unique
array held two or more items).

Walk policies (``run_walks(..., policy=...)``; this bench always uses the default):
``uniform`` (the above; its walks are the committed results) and ``long-arrays``, for callers
that want arrays with several items (``bench/json_schema_unique_items_coverage.py --policy``).
Uniform walks in the every-serialization language are mostly whitespace (Llama-3 has 423
whitespace-only ids) and their strings run until the budget forces a ``"`` (622 of the 128k
ids start with one), so they almost never complete two items of an array.  ``long-arrays``
draws among the same allowed ids (the mask is never widened: the GCD budget guarantee is that
of ``uniform``) in two stages: each id's *class* is the first byte of its text after leading
JSON whitespace -- ``]``, ``,``, ``"``, whitespace only, or other (``LONG_ARRAYS``); a class
is drawn among the classes that have an allowed id, with the weights ``]`` 1/10 (close arrays
seldom), ``,`` 3 (separators: another item or property), ``"`` 3 (open and close strings: short
strings), whitespace 3/10, other 1; then an allowed id of that class, uniformly (seeded as
``uniform`` plus ``|long-arrays``).  The classes do not know the context: inside a string
``,`` and ``]`` are text, and a ``"`` id closes it.  ``count_removed=True`` also counts,
on a ``UniqueItemsAutomaton``, the steps where the uniqueness check removed a token: at the
same state and budget, the ids allowed by the underlying automaton's mask
(``A.automaton.allowed``, uniqueness ignored) but not by ``A.allowed`` (a
``UniqueItemsDeadEndError`` step: all of them).

Usage: OMP_NUM_THREADS=1 python bench/json_schema_gcd_walks.py [--per-subset 8] [--unique 15]
    [--walks 5] [--timeout 30] [--walk-timeout 150] [--jobs 2] [--mem-gib 8]
Writes bench/results/json_schema_gcd_walks.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from harness import (
    RESULTS,
    ROOT,
    BenchTimeout,
    WorkerProcess,
    command_line,
    git_commit,
    load_vocabulary,
    machine,
    run_threads,
    save_json,
    time_limit,
    utc_now,
    versions,
)
from jsonschemabench_coverage import DATA, load

OUT = RESULTS
SUBSETS = ["Github_trivial", "Github_easy", "Github_medium", "Github_hard", "Glaiveai2K",
           "Kubernetes", "Snowplow", "WashingtonPost", "JsonSchemaStore"]
UNIQUE_GROUP = "JsonSchemaStore+uniqueItems"
ARRAY_GROUP = "uniqueItems arrays (extracted)"
LANGS = {"every": {"canonical": False}, "canonical": {"canonical": True}}
EXTRA = 64  # the m+64 budget
POLICIES = ("uniform", "long-arrays")
# long-arrays: class (first byte after leading JSON whitespace) -> weight; "" = whitespace only
LONG_ARRAYS = {"]": 0.1, ",": 3.0, '"': 3.0, "": 0.3, "other": 1.0}
TEXT_CHARS = 600  # text kept per walk record (failures: the whole head of the text)
# keywords whose value maps names to schemas (their keys are not keywords)
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
                "dependencies")


def has_unique(schema) -> bool:
    return '"uniqueItems": true' in json.dumps(schema)


def without_unique(node, in_map: bool = False):
    """The schema with every ``uniqueItems: true`` keyword replaced by ``maxItems: 1``."""
    if isinstance(node, list):
        return [without_unique(x) for x in node]
    if not isinstance(node, dict):
        return node
    if in_map:
        return {k: without_unique(v) for k, v in node.items()}
    out = {}
    for k, v in node.items():
        if k == "uniqueItems" and v is True:
            out["maxItems"] = min(1, node.get("maxItems", 1)) if isinstance(
                node.get("maxItems", 1), int) else 1
            continue
        if k == "maxItems" and node.get("uniqueItems") is True:
            continue
        out[k] = without_unique(v, in_map=k in _SCHEMA_MAPS)
    return out


# ---------------------------------------------------------------- worker side


def _budgets(m: int) -> list[tuple[str, int]]:
    out: dict[int, str] = {}
    for kind, r in (("m", m), ("m+1", m + 1), ("2m", 2 * m), ("3m", 3 * m),
                    (f"m+{EXTRA}", m + EXTRA)):
        r = max(r, 1)
        if r not in out:
            out[r] = kind
    return [(k, r) for r, k in sorted(out.items())]


_CLASSES: dict = {}  # id(vocab) -> (vocab, int64 [V] class of each id)


def policy_classes(vocab, policy: str):
    """``long-arrays``: (int64 [V] class index of each id, float64 [K] class weights), the
    classes in ``LONG_ARRAYS`` order (ids without text: other); None for ``uniform``."""
    import numpy as np

    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    if policy == "uniform":
        return None
    names = list(LONG_ARRAYS)
    hit = _CLASSES.get(id(vocab))
    if hit is None or hit[0] is not vocab:
        index = {k.encode(): i for i, k in enumerate(names) if k != "other"}
        other = names.index("other")
        cls = np.full(vocab.size, other, dtype=np.int64)
        for i, b in enumerate(vocab.token_bytes):
            if b:
                cls[i] = index.get(b.lstrip(b" \t\n\r")[:1], other)
        hit = _CLASSES[id(vocab)] = (vocab, cls)
    return hit[1], np.array([LONG_ARRAYS[k] for k in names], dtype=np.float64)


def _walk(A, vocab, schema, rng, r: int, policy: str = "uniform",
          count_removed: bool = False) -> dict:
    import numpy as np
    import torch
    from tractable.fsa.json_schema.unique_items import (
        UniqueItemsAutomaton,
        UniqueItemsDeadEndError,
    )

    from tractable.testing.json_schema import check_instance_text

    classes = policy_classes(vocab, policy)
    count_removed = count_removed and isinstance(A, UniqueItemsAutomaton)
    removed_steps = removed_tokens = 0
    eos = set(A.eos_token_ids)
    st = A.start(1)
    ids: list[int] = []
    end = "budget"
    rem = r
    t0 = time.perf_counter()
    while rem > 0:
        if count_removed:  # uniqueness ignored, same state and budget (cloned: A.allowed next)
            plain = A.automaton.allowed(st, rem)[0].clone()
        try:
            mask = A.allowed(st, rem)[0]
        except UniqueItemsDeadEndError as e:
            end = "dead_end_unique"
            why = str(e)
            if count_removed:
                removed_steps += 1
                removed_tokens += int(plain.sum())
            break
        if count_removed:
            n = int((plain & ~mask).sum())
            removed_steps += n > 0
            removed_tokens += n
        nz = mask.nonzero().flatten()
        if nz.numel() == 0:
            end = "dead_end"
            break
        if classes is None:
            tok = int(nz[rng.randrange(nz.numel())])
        else:  # a class among those present (weighted), then an id of it (uniform)
            cls = classes[0][nz.numpy()]
            w = np.cumsum(classes[1] * (np.bincount(cls, minlength=classes[1].size) > 0))
            k = min(int(np.searchsorted(w, rng.random() * w[-1], side="right")), w.size - 1)
            pick = np.flatnonzero(cls == k)
            tok = int(nz[int(pick[rng.randrange(pick.size)])])
        if tok in eos:
            end = "eos"
            break
        accepting_before = bool(st.is_accepting()[0])
        st = A.advance(st, torch.tensor([tok]))
        ids.append(tok)
        rem -= 1
        if bool(st.is_dead()[0]):
            end = "advance_dead"  # an allowed token that the automaton cannot read
            break
    accepting = bool(st.is_accepting()[0]) if end != "advance_dead" else accepting_before
    text = vocab.decode_bytes(ids)
    rec = {"budget": r, "tokens": len(ids), "eos": end == "eos", "end": end,
           "accepting": accepting, "bytes": len(text),
           "seconds": round(time.perf_counter() - t0, 4)}
    why = check_instance_text(text, schema) if end in ("eos", "budget") else (
        why if end == "dead_end_unique" else end)
    rec["valid_json"] = not why.startswith("not JSON") if end in ("eos", "budget") else None
    rec["schema_valid"] = why == ""
    rec["message"] = why[:400]
    rec["text"] = text[:TEXT_CHARS].decode("utf-8", "replace")
    if rec["schema_valid"] and has_unique(schema):
        rec["unique_exercised"] = check_instance_text(text, without_unique(schema)) != ""
    if count_removed:
        rec["unique_removed_steps"] = removed_steps
        rec["unique_removed_tokens"] = removed_tokens
    return rec


def _task(vocab, rec: dict, lang: str, walks: int, timeout: int, walk_timeout: int) -> dict:
    import warnings

    from tractable.fsa.errors import (
        EmptyLanguageError,
        InvalidSchemaError,
        UnsupportedSchemaError,
    )
    from tractable.fsa.json_schema import compile_json_schema
    from tractable.fsa.json_schema.unique_items import UniqueItemsAutomaton

    out = {"id": rec["id"], "group": rec["group"], "lang": lang,
           "unique_items": has_unique(rec["schema"])}
    t0 = time.perf_counter()
    try:
        with time_limit(timeout), warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            A = compile_json_schema(rec["schema"], vocab, **LANGS[lang])
        out["warnings"] = sorted({str(x.message)[:200] for x in w})
    except BenchTimeout:
        out.update(status="timeout", why=f"compile > {timeout} s")
        return out
    except UnsupportedSchemaError as e:
        out.update(status="unsupported", why=f"{getattr(e, 'keyword', '')}: {e}"[:300])
        return out
    except InvalidSchemaError as e:
        out.update(status="invalid_schema", why=str(e)[:300])
        return out
    except EmptyLanguageError as e:
        out.update(status="empty", why=str(e)[:300])
        return out
    except MemoryError:
        out.update(status="memory", why="MemoryError (address-space limit)")
        return out
    except RecursionError:
        out.update(status="error", why="RecursionError")
        return out
    except Exception as e:  # noqa: BLE001 - a bug, reported
        out.update(status="error", why=f"{type(e).__name__}: {e}"[:300])
        return out
    out["compile_seconds"] = round(time.perf_counter() - t0, 3)
    out["automaton"] = ("UniqueItemsAutomaton" if isinstance(A, UniqueItemsAutomaton)
                        else type(A).__name__)
    out["states"] = int(A.num_states)
    m = A.min_tokens_to_accept()
    out["min_tokens"] = m
    out["status"] = "compiled"
    run_walks(out, A, vocab, rec, lang, m, walks, walk_timeout)
    return out


def run_walks(out: dict, A, vocab, rec: dict, lang: str, m: int, walks: int,
              walk_timeout: int, policy: str = "uniform", count_removed: bool = False) -> None:
    """``walks`` GCD walks per budget of :func:`_budgets` (``m`` = the minimum) on ``A``, seeded
    by record id, ``lang``, budget and walk (and ``policy`` unless ``uniform``), within
    ``walk_timeout`` seconds in all; written into ``out`` (mutated): ``walks`` (per walk,
    :func:`_walk`'s record with its budget kind and number), ``walk_timeout`` /
    ``walk_memory`` where the walks stopped, ``walk_seconds`` (and ``walk_policy`` unless
    ``uniform``).  ``policy`` and ``count_removed``: the module docstring."""
    import random

    policy_classes(vocab, policy)  # checks the name; the classes are built outside the limit
    tag = "" if policy == "uniform" else f"|{policy}"
    if tag:
        out["walk_policy"] = policy
    out["walks"] = []
    t1 = time.perf_counter()
    try:
        with time_limit(walk_timeout):
            for kind, r in _budgets(m):
                for k in range(walks):
                    rng = random.Random(f"{rec['id']}|{lang}|{r}|{k}{tag}")
                    try:
                        wr = _walk(A, vocab, rec["schema"], rng, r, policy, count_removed)
                    except BenchTimeout:
                        raise
                    except Exception as e:  # noqa: BLE001 - a bug, reported
                        wr = {"budget": r, "end": "error", "schema_valid": False,
                              "valid_json": None, "tokens": None,
                              "message": f"{type(e).__name__}: {e}"[:400], "text": ""}
                    wr.update(budget_kind=kind, walk=k)
                    out["walks"].append(wr)
    except BenchTimeout:
        out["walk_timeout"] = True
    except MemoryError:
        out["walk_memory"] = True
    out["walk_seconds"] = round(time.perf_counter() - t1, 3)


def _worker(inq, outq, mem_gib: float):
    import resource

    lim = int(mem_gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    from tractable.fsa.json_schema import compile_json_schema
    from tractable.fsa.lift import prepare

    vocab = load_vocabulary("llama3")
    prepare(vocab)
    for opts in LANGS.values():  # the vocabulary's trie walks, cached, outside the time limits
        compile_json_schema({"type": "object", "properties": {
            "a": {"type": "string"}, "b": {"type": "number"}, "c": {"type": "integer"},
            "d": {"type": "array", "items": {"type": "boolean"}}}}, vocab, **opts)
    while True:
        item = inq.get()
        if item is None:
            return
        rec, lang, walks, timeout, walk_timeout = item
        try:
            outq.put(_task(vocab, rec, lang, walks, timeout, walk_timeout))
        except BaseException as e:  # noqa: BLE001
            outq.put({"id": rec["id"], "group": rec["group"], "lang": lang,
                      "unique_items": has_unique(rec["schema"]), "status": "error",
                      "why": f"worker: {type(e).__name__}: {e}"[:300]})


def _killed(worker: WorkerProcess, item) -> dict:
    rec, lang = item[0], item[1]
    return {"id": rec["id"], "group": rec["group"], "lang": lang,
            "unique_items": has_unique(rec["schema"]), "status": "killed", "why": worker.why}


# ---------------------------------------------------------------- sample, run, report


def unique_nodes(node, ptr: str = "", in_map: bool = False):
    """(JSON pointer, subschema) of every schema object with ``uniqueItems: true``."""
    if isinstance(node, list):
        for i, x in enumerate(node):
            yield from unique_nodes(x, f"{ptr}/{i}")
        return
    if not isinstance(node, dict):
        return
    if not in_map and node.get("uniqueItems") is True:
        yield ptr, node
    for k, v in node.items():
        if in_map or k not in ("enum", "const", "default", "examples"):
            key = k.replace("~", "~0").replace("/", "~1")
            yield from unique_nodes(v, f"{ptr}/{key}", in_map=not in_map and k in _SCHEMA_MAPS)


def extract_arrays(recs: list[dict], limit: int, per_schema: int = 2) -> list[dict]:
    """The ``uniqueItems`` array subschemas of ``recs`` as schemas of their own (the root's
    ``$schema``, ``definitions`` and ``$defs`` kept so that local references resolve): walks
    on them start with ``[`` and so put items in a unique array."""
    out = []
    for rec in recs:
        root = rec["schema"]
        if not isinstance(root, dict):
            continue
        for ptr, node in list(unique_nodes(root))[:per_schema]:
            if not ptr:
                continue
            sub = {k: root[k] for k in ("$schema", "definitions", "$defs") if k in root}
            sub.update(node)
            out.append({"id": f"{rec['id']}#{ptr}", "group": ARRAY_GROUP, "schema": sub})
            if len(out) >= limit:
                return out
    return out


def sample(per_subset: int, n_unique: int, n_arrays: int) -> list[dict]:
    recs = []
    for sub in SUBSETS:
        for i, rec in enumerate(load(sub, DATA)):
            if i >= per_subset:
                break
            recs.append({"id": rec["id"], "group": sub, "schema": rec["schema"]})
    taken = {r["id"] for r in recs}
    cands = [(len(json.dumps(r["schema"], separators=(",", ":"))), r["id"], r["schema"])
             for r in load("JsonSchemaStore", DATA)
             if r["id"] not in taken and has_unique(r["schema"])]
    for _n, rid, schema in sorted(cands)[:n_unique]:
        recs.append({"id": rid, "group": UNIQUE_GROUP, "schema": schema})
    return recs + extract_arrays([r for r in recs if has_unique(r["schema"])], n_arrays)


def _row(label: str, tasks: list[dict]) -> dict:
    comp = [t for t in tasks if t["status"] == "compiled"]
    ws = [w for t in comp for w in t["walks"]]
    st: dict[str, int] = {}
    for t in tasks:
        if t["status"] != "compiled":
            st[t["status"]] = st.get(t["status"], 0) + 1
    lens = [w["tokens"] for w in ws if w.get("tokens") is not None]
    return {
        "row": label, "sampled": len(tasks), "compiled": len(comp), "not_compiled": st,
        "checker": sum(t.get("automaton") == "UniqueItemsAutomaton" for t in comp),
        "walks": len(ws), "valid_json": sum(bool(w.get("valid_json")) for w in ws),
        "schema_valid": sum(bool(w["schema_valid"]) for w in ws),
        "invalid": sum(not w["schema_valid"] and w["end"] in ("eos", "budget") for w in ws),
        "dead_ends": sum(w["end"] in ("dead_end", "dead_end_unique") for w in ws),
        "other_failures": sum(w["end"] in ("advance_dead", "error") for w in ws),
        "not_accepting": sum(w["end"] == "budget" and not w["accepting"] for w in ws),
        "unique_exercised": sum(bool(w.get("unique_exercised")) for w in ws),
        "walk_timeouts": sum(bool(t.get("walk_timeout") or t.get("walk_memory")) for t in comp),
        "len_median": statistics.median(lens) if lens else None,
        "len_max": max(lens) if lens else None,
        "bytes_max": max((w.get("bytes") or 0 for w in ws), default=None),
    }


def _rows(tasks: list[dict]) -> list[dict]:
    bench = [t for t in tasks if t["group"] != ARRAY_GROUP]
    rows = [_row(g, [t for t in bench if t["group"] == g]) for g in SUBSETS + [UNIQUE_GROUP]]
    rows.append(_row("**all JSONSchemaBench records**", bench))
    rows.append(_row("records with `uniqueItems: true`", [t for t in bench if t["unique_items"]]))
    rows.append(_row("... compiled to a UniqueItemsAutomaton",
                     [t for t in bench if t.get("automaton") == "UniqueItemsAutomaton"]))
    arrays = [t for t in tasks if t["group"] == ARRAY_GROUP]
    rows.append(_row(ARRAY_GROUP, arrays))
    rows.append(_row("... compiled to a UniqueItemsAutomaton",
                     [t for t in arrays if t.get("automaton") == "UniqueItemsAutomaton"]))
    rows.append(_row("**everything**", tasks))
    return rows


def _budget_rows(tasks: list[dict]) -> list[dict]:
    out = []
    for kind in ("m", "m+1", "2m", "3m", f"m+{EXTRA}"):
        ws = [w for t in tasks if t["status"] == "compiled" for w in t["walks"]
              if w["budget_kind"] == kind]
        out.append({"budget": kind, "walks": len(ws),
                    "schema_valid": sum(bool(w["schema_valid"]) for w in ws),
                    "dead_ends": sum(w["end"] in ("dead_end", "dead_end_unique") for w in ws),
                    "eos": sum(w["end"] == "eos" for w in ws),
                    "len_median": statistics.median([w["tokens"] for w in ws
                                                     if w.get("tokens") is not None] or [0])})
    return out


def _num(x) -> str:
    return "-" if x is None else f"{x:g}"


def _fmt_status(st: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(st.items())) or "0"


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", "\\n").replace("\r", "\\r").replace("`", "'")


def write(tasks: list[dict], meta: dict, args) -> None:
    langs = list(LANGS)
    summary = {lang: {"rows": _rows([t for t in tasks if t["lang"] == lang]),
                      "budgets": _budget_rows([t for t in tasks if t["lang"] == lang])}
               for lang in langs}
    save_json(OUT / "json_schema_gcd_walks.json",
              {"meta": meta, "summary": summary, "tasks": tasks}, indent=0)
    L = ["# GCD random walks on JSONSchemaBench, validated with `jsonschema` (issue 19)", "",
         f"Command: `{meta['command']}`  ",
         f"Machine: {meta['machine']}  ",
         f"Versions: {meta['versions']}  ",
         f"Date: {meta['date']}; run time {meta['run_seconds'] / 60:.1f} min", "",
         "**What.** Every walk follows the budget-aware GCD mask (`A.allowed(st, r)`) and picks "
         "a token uniformly among the allowed ids, until EOS or until the budget r is spent; "
         "its text must be JSON that `jsonschema` validates (the schema's own draft, that "
         "draft's format checker, duplicate keys counted as failures: "
         "`tractable.testing.json_schema.check_instance_text`).  **Why.** Issue 19 requires "
         "that GCD walks, budgets from the minimum to 3x, validate 100%, `uniqueItems` "
         "included, for the every-serialization language `compile_json_schema(schema, vocab, "
         "canonical=False)` (`every` below); the canonical language (`canonical=True`, the "
         "default) is walked in the same run for comparison.", "",
         f"Schemas: the first {args.per_subset} records (file order) of each of "
         f"{len(SUBSETS)} subsets, plus the {args.unique} smallest other JsonSchemaStore "
         f"schemas containing `\"uniqueItems\": true` (row `{UNIQUE_GROUP}`).  Uniform walks "
         "from the root seldom reach a unique array with two items, so the `uniqueItems: true` "
         "subschemas of those records (the first two per record, up to "
         f"{args.arrays}; the root's `$schema`, `definitions` and `$defs` kept) are walked as "
         f"schemas of their own (row `{ARRAY_GROUP}`, id `record#pointer`, "
         f"{args.array_walks} walks per budget).  Vocabulary: "
         "Llama-3 (128,256 ids).  m = `A.min_tokens_to_accept()`; budgets r in {m, m+1, 2m, "
         f"3m, m+{EXTRA}}} (duplicates merged; r counts tokens including EOS), "
         f"{args.walks} walks each, seeded.  Compile limit {args.timeout} s, walks limit "
         f"{args.walk_timeout} s per schema and language, {args.mem_gib:g} GiB address space "
         f"per worker, {args.jobs} workers.", "",
         "Columns: *compiled* (of which *checker* = `UniqueItemsAutomaton`, the per-request "
         "uniqueItems checker); *not compiled* by status; *walks*; *valid JSON*; "
         "*schema-valid*; *invalid* = JSON or schema failures of walks that ended normally; "
         "*dead ends* = empty mask (or `UniqueItemsDeadEndError`) before the walk ended; "
         "*other* = an allowed token the automaton could not read, or an exception; "
         "*len* = tokens per walk (median / max); *unique used* = schema-valid walks whose "
         "instance has a `uniqueItems` array with 2 or more items (fails the schema with "
         "`maxItems: 1` in place of `uniqueItems`).  `UniqueItemsDeadEndError` is the "
         "per-request checker's documented failure mode "
         "(`fsa/json_schema/unique_items.py`, \"Budget guarantee\": its "
         "`min_tokens_to_accept` and mask distances ignore uniqueness, so a "
         "walk can spend its slack until every continuation that fits repeats an item).", ""]
    for lang in langs:
        L += [f"## `{lang}` language (`canonical={LANGS[lang]['canonical']}`)", "",
              "| row | sampled | compiled (checker) | not compiled | walks | valid JSON | "
              "schema-valid | invalid | dead ends | other | len median / max | unique used |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in summary[lang]["rows"]:
            pct = f" ({100 * r['schema_valid'] / r['walks']:.1f}%)" if r["walks"] else ""
            L.append(
                f"| {r['row']} | {r['sampled']} | {r['compiled']} ({r['checker']}) | "
                f"{_fmt_status(r['not_compiled'])} | {r['walks']} | {r['valid_json']} | "
                f"{r['schema_valid']}{pct} | {r['invalid']} | {r['dead_ends']} | "
                f"{r['other_failures']} | {_num(r['len_median'])} / {_num(r['len_max'])} | "
                f"{r['unique_exercised']} |")
        nacc = summary[lang]["rows"][-1]["not_accepting"]
        wto = summary[lang]["rows"][-1]["walk_timeouts"]
        L += ["", f"Walks that spent the budget in a non-accepting state: {nacc}.  Schemas "
              f"whose walks hit the walks time limit (fewer walks): {wto}.", "",
              "By budget:", "", "| budget | walks | schema-valid | dead ends | ended by EOS | "
              "len median |", "|---|---|---|---|---|---|"]
        for b in summary[lang]["budgets"]:
            L.append(f"| {b['budget']} | {b['walks']} | {b['schema_valid']} | "
                     f"{b['dead_ends']} | {b['eos']} | {_num(b['len_median'])} |")
        L.append("")
    L += ["## Failures (every walk that is not schema-valid)", ""]
    nf = 0
    for t in tasks:
        for w in t.get("walks", []):
            if w["schema_valid"]:
                continue
            nf += 1
            L.append(f"* `{t['lang']}` {t['id']} ({t.get('automaton')}, m = "
                     f"{t.get('min_tokens')}), budget r = {w['budget']} ({w['budget_kind']}), "
                     f"walk {w['walk']}: **{w['end']}** after {w.get('tokens')} tokens; "
                     f"message: `{_md_escape(w.get('message') or '')}`; text (first "
                     f"300 chars): `{_md_escape((w.get('text') or '')[:300])}`")
    if not nf:
        L.append("None.")
    L += ["", "## Schemas not compiled or not fully walked", "",
          "| language | schema | status | why |", "|---|---|---|---|"]
    for t in tasks:
        if t["status"] != "compiled":
            L.append(f"| {t['lang']} | {t['id']} | {t['status']} | "
                     f"{_md_escape(t.get('why', ''))[:200]} |")
        elif t.get("walk_timeout") or t.get("walk_memory"):
            L.append(f"| {t['lang']} | {t['id']} | compiled, walks stopped "
                     f"({'time' if t.get('walk_timeout') else 'memory'}) | "
                     f"{len(t['walks'])} walks done in {t['walk_seconds']} s |")
    L += ["", "## Sampled schemas", "",
          "| schema | group | uniqueItems | " + " | ".join(
              f"{lg}: automaton, m, compile s, walk s" for lg in langs) + " |",
          "|---|---|---|" + "---|" * len(langs)]
    by = {(t["id"], t["lang"]): t for t in tasks}
    seen = []
    for t in tasks:
        if t["id"] not in seen:
            seen.append(t["id"])
    for rid in seen:
        cells = []
        for lg in langs:
            t = by.get((rid, lg), {})
            if t.get("status") == "compiled":
                cells.append(f"{t['automaton']}, {t['min_tokens']}, {t['compile_seconds']}, "
                             f"{t['walk_seconds']}")
            else:
                cells.append(t.get("status", "-"))
        t0 = by.get((rid, langs[0])) or by.get((rid, langs[1]))
        L.append(f"| {rid} | {t0['group']} | {'yes' if t0['unique_items'] else ''} | "
                 + " | ".join(cells) + " |")
    (OUT / "json_schema_gcd_walks.md").write_text("\n".join(L) + "\n")


def source_state() -> dict:
    """HEAD, whether the library differs from it, and a digest of the library's sources (the
    workers import them at start-up; other sessions may commit during a run)."""
    import hashlib

    h = hashlib.sha256()
    for d in ("fsa", "decode", "tractable"):
        for f in sorted((ROOT / d).rglob("*.py")):
            h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    commit = git_commit()
    return {"head": commit.removesuffix("+dirty"), "dirty": commit.endswith("+dirty"),
            "digest": h.hexdigest()[:12]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-subset", type=int, default=8)
    ap.add_argument("--unique", type=int, default=15)
    ap.add_argument("--arrays", type=int, default=30,
                    help="uniqueItems array subschemas walked on their own")
    ap.add_argument("--walks", type=int, default=5)
    ap.add_argument("--array-walks", type=int, default=20,
                    help="walks per budget on the extracted uniqueItems arrays")
    ap.add_argument("--timeout", type=int, default=30, help="compile limit (s)")
    ap.add_argument("--walk-timeout", type=int, default=150, help="walks limit (s) per task")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--mem-gib", type=float, default=8.0)
    args = ap.parse_args()
    t_start = time.perf_counter()
    src0 = source_state()
    recs = sample(args.per_subset, args.unique, args.arrays)
    items = [(rec, lang, args.array_walks if rec["group"] == ARRAY_GROUP else args.walks,
              args.timeout, args.walk_timeout) for rec in recs for lang in LANGS]
    print(f"{len(recs)} schemas, {len(items)} tasks", flush=True)
    results: dict[tuple[str, str], dict] = {}
    hard = args.timeout + args.walk_timeout + 120

    def record(_item, r):
        results[(r["id"], r["lang"])] = r
        ws = r.get("walks", [])
        bad = sum(not w["schema_valid"] for w in ws)
        print(f"[{len(results)}/{len(items)} {time.perf_counter() - t_start:.0f}s] "
              f"{r['lang']} {r['id']}: {r['status']} {r.get('automaton', '')} "
              f"m={r.get('min_tokens')} walks={len(ws)} bad={bad} "
              f"c={r.get('compile_seconds')} w={r.get('walk_seconds')}", flush=True)

    run_threads(items, args.jobs, lambda: WorkerProcess(_worker, args.mem_gib, context="fork"),
                lambda w, item: w.ask(item, hard, poll=5) or _killed(w, item), record)
    tasks = [results[(rec["id"], lang)] for rec in recs for lang in LANGS]

    src1 = source_state()
    kills = sum(t["status"] == "killed" for t in tasks)
    ver = (f"git {src0['head']}" + (" + uncommitted library changes" if src0["dirty"] else "")
           + f" (library sources sha256 {src0['digest']} at start")
    ver += (", unchanged at the end)" if src1["digest"] == src0["digest"] else
            f"; they changed during the run: HEAD {src1['head']}, sha256 {src1['digest']} at "
            "the end; the workers imported them at start-up"
            + (f" and at {kills} restarts)" if kills else " and were never restarted)"))
    cmd = command_line("json_schema_gcd_walks.py", args)
    v = versions("torch", "jsonschema")
    meta = {"command": cmd,
            "machine": machine(note="shared CPU VM, other jobs running"),
            "versions": f"python {v['python']}, torch {v['torch']}, "
                        f"jsonschema {v['jsonschema']}, {ver}",
            "date": utc_now(),
            "run_seconds": time.perf_counter() - t_start, "source_start": src0,
            "source_end": src1,
            "schemas": [{"id": r["id"], "group": r["group"]} for r in recs]}
    write(tasks, meta, args)
    print(f"done in {meta['run_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
