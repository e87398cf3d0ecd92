"""Brute-force references for the JSON Schema compiler: the JSON-Schema-Test-Suite runner, a
uniform sampler over the strings an automaton accepts, and ``jsonschema``-based checks.

The sampler draws strings of a length ``n`` uniformly among the accepting *paths* of the
finalized byte NFA (path counts by dynamic programming, then a backward-weighted random walk);
for a DFA this is exactly uniform over the accepted strings of that length, for an NFA a string
is drawn in proportion to its number of accepting paths ("uniform-ish").  The length is drawn
uniformly among the lengths ``<= max_len`` that have an accepted string.
"""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tractable.fsa import nfa as N
from tractable.fsa.errors import InvalidSchemaError, UnsupportedSchemaError
from tractable.fsa.json_schema import JsonSchemaCompiler

__all__ = [
    "STYLES",
    "evaluate_record",
    "serializations",
    "load_suite",
    "run_suite",
    "summarize_suite",
    "PathSampler",
    "check_instance_text",
]


def load_suite(directory: str | Path, files: Iterable[str] | None = None) -> list[dict]:
    """Test groups of a JSON-Schema-Test-Suite draft folder: dicts with ``keyword`` (file stem,
    ``format:<name>`` for optional/format), ``group``, ``schema``, ``tests``."""
    d = Path(directory)
    out = []
    paths = sorted(d.glob("*.json")) + sorted((d / "optional" / "format").glob("*.json"))
    for p in paths:
        kw = p.stem if p.parent == d else f"format:{p.stem}"
        if files is not None and kw not in files:
            continue
        for g in json.loads(p.read_text()):
            out.append({"keyword": kw, "group": g["description"], "schema": g["schema"],
                        "tests": g["tests"]})
    return out


#: Serialization styles of :func:`serializations`.
STYLES = ("canonical", "compact", "dumps", "indent2", "py_floats")


def serializations(canonical_text: str) -> dict[str, str]:
    """The instance of ``canonical_text`` (keys already in the schema's order) written in each
    of :data:`STYLES`: canonical as given; compact with raw UTF-8 (``json.dumps(x,
    separators=(",", ":"), ensure_ascii=False)``); ``json.dumps``'s default (``", "``,
    ``": "``, ``\\u`` escapes); ``indent=2``; numbers as Python writes floats (``1.0``,
    ``1e-05``), where every number of the instance is exactly a float."""
    x = json.loads(canonical_text)
    out = {"canonical": canonical_text,
           "compact": json.dumps(x, separators=(",", ":"), ensure_ascii=False),
           "dumps": json.dumps(x), "indent2": json.dumps(x, indent=2)}
    from decimal import Decimal

    try:
        f = json.loads(canonical_text, parse_int=float)
        ft = json.dumps(f, allow_nan=False)
        exact = json.loads(ft, parse_float=Decimal) == json.loads(canonical_text,
                                                                   parse_float=Decimal)
    except (ValueError, OverflowError):
        exact = False
    if exact:
        out["py_floats"] = ft
    return out


def run_suite(groups: list[dict], *, styles: bool = False, **options: Any) -> list[dict]:
    """Compile each group's schema and check every test instance (canonical serialization, or
    with ``styles`` each of :func:`serializations`, a record per style).

    Records: ``keyword, group, test, valid, status`` with status ``pass`` / ``fail`` (accepts !=
    valid) / ``unsupported`` (UnsupportedSchemaError, detail in ``why``) / ``invalid_schema`` /
    ``error`` (any other exception: a bug), plus ``accepted``, ``text`` and ``style``.
    """
    recs = []
    for g in groups:
        base = {"keyword": g["keyword"], "group": g["group"]}
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                opts = dict(options)
                if g["keyword"] == "format":  # format.json tests annotation-only behaviour
                    opts.setdefault("assert_formats", False)
                comp = JsonSchemaCompiler(g["schema"], **opts)
                a = N.finalize(comp.build())
        except UnsupportedSchemaError as e:
            recs += [dict(base, test=t["description"], valid=t["valid"], status="unsupported",
                          why=f"{e.keyword} at {e.pointer}") for t in g["tests"]]
            continue
        except InvalidSchemaError as e:
            recs += [dict(base, test=t["description"], valid=t["valid"],
                          status="invalid_schema", why=str(e)) for t in g["tests"]]
            continue
        except Exception as e:  # noqa: BLE001 - reported as a bug
            recs += [dict(base, test=t["description"], valid=t["valid"], status="error",
                          why=f"{type(e).__name__}: {e}") for t in g["tests"]]
            continue
        subset = any("subset" in str(w.message) for w in caught)
        for t in g["tests"]:
            try:
                text = comp.serialize(t["data"])
            except (TypeError, ValueError) as e:
                recs.append(dict(base, test=t["description"], valid=t["valid"],
                                 status="unrepresentable", why=str(e)))
                continue
            texts = serializations(text) if styles else {"canonical": text}
            for style, tx in texts.items():
                acc = N.matches(a, tx.encode("utf-8"))
                recs.append(dict(base, test=t["description"], valid=t["valid"], accepted=acc,
                                 text=tx, style=style,
                                 status="pass" if acc == t["valid"] else "fail",
                                 subset_warning=subset))
    return recs


def summarize_suite(recs: list[dict]) -> dict[str, dict[str, int]]:
    """keyword -> counts of each status."""
    out: dict[str, dict[str, int]] = {}
    for r in recs:
        row = out.setdefault(r["keyword"], {})
        row[r["status"]] = row.get(r["status"], 0) + 1
    return out


class PathSampler:
    """Sampling over accepting paths of a finalized byte NFA, uniform for each length.

    ``cnt[k][s]`` is proportional to the number of accepting paths of length ``k`` from state
    ``s`` (a path counts each byte of an edge's mask separately): ``cnt[k] = A @ cnt[k-1]``
    with a sparse matrix ``A[s, d]`` = bytes on the edge s -> d (scipy), each layer divided by
    its largest entry so nothing overflows.  Where a count the boolean support says is positive
    underflows against its layer's largest (a free string's 10^6^k paths beside a long fixed
    prefix), the counts are redone in log space (a log-sum-exp per state, no underflow).  A
    step from ``s`` with ``left`` bytes to go picks an edge in proportion to
    ``A[s, d] * cnt[left-1][d]`` (one layer, one scale): exact up to float64 rounding.
    O(max_len x edges) in C: 10^6-state automata in seconds.  Memory: 8 x states x
    (max_len + 1) bytes.
    """

    def __init__(self, nfa: N.ByteNFA, max_len: int):
        import numpy as np
        import scipy.sparse as sp

        self.a = a = N.finalize(nfa)
        self.max_len = max_len
        S = a.num_states
        if a.edges:
            src, masks, dst = zip(*a.edges)  # sorted by (src, dst): CSR order
        else:
            src, masks, dst = (), (), ()
        self._masks = masks
        w = np.fromiter(map(int.bit_count, masks), dtype=np.float64, count=len(masks))
        self._ptr = np.searchsorted(np.asarray(src, dtype=np.int64), np.arange(S + 1))
        self._dst = np.asarray(dst, dtype=np.int64)
        self._w = w
        A = sp.csr_matrix((w, self._dst, self._ptr), shape=(S, S))
        B = sp.csr_matrix((np.ones(len(w)), self._dst, self._ptr), shape=(S, S))
        first = np.zeros(S)
        first[list(a.finals)] = 1.0
        support = first > 0
        layers = [first]
        starts = [bool(support[a.start])]
        for _k in range(max_len):
            cur = A @ layers[-1]
            top = cur.max() if S else 0.0
            if top > 0:
                cur /= top
            layers.append(cur)
            support = (B @ support.astype(np.float64)) > 0
            starts.append(bool(support[a.start]))
        self._log = any(s and not layers[k][a.start] > 0 for k, s in enumerate(starts))
        if self._log:
            layers = self._log_layers(np.log(w), first, max_len)
        self.cnt = layers
        self.lengths = [k for k in range(max_len + 1) if starts[k]]

    def _log_layers(self, logw, first, max_len: int):
        import numpy as np

        S = len(first)
        E = len(logw)
        heads = np.flatnonzero(np.diff(self._ptr) > 0)  # states with out-edges
        seg = self._ptr[heads]
        reps = np.diff(np.append(seg, E))
        with np.errstate(divide="ignore"):
            layers = [np.log(first)]
        for _k in range(max_len):
            v = logw + layers[-1][self._dst]
            cur = np.full(S, -np.inf)
            if E:
                mx = np.maximum.reduceat(v, seg)
                ok = np.isfinite(mx)
                tot = np.add.reduceat(np.exp(v - np.repeat(np.where(ok, mx, 0.0), reps)), seg)
                with np.errstate(divide="ignore"):
                    cur[heads] = np.where(ok, mx + np.log(tot), -np.inf)
            layers.append(cur)
        return layers

    def sample(self, rng: random.Random, length: int | None = None) -> bytes:
        import numpy as np

        if not self.lengths:
            raise ValueError("no accepted string within max_len")
        k = rng.choice(self.lengths) if length is None else length
        s = self.a.start
        out = bytearray()
        for left in range(k, 0, -1):
            lo, hi = int(self._ptr[s]), int(self._ptr[s + 1])
            nxt = self.cnt[left - 1][self._dst[lo:hi]]
            if self._log:
                lw = np.log(self._w[lo:hi]) + nxt
                p = np.exp(lw - lw.max())
            else:
                p = self._w[lo:hi] * nxt
            cum = np.cumsum(p)
            i = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
            i = min(i, hi - lo - 1)
            while p[i] == 0.0:  # rounding at a boundary: step back to a real edge
                i -= 1
            m = self._masks[lo + i]
            bits = [b for b in range(256) if m >> b & 1]
            out.append(bits[rng.randrange(len(bits))])
            s = int(self._dst[lo + i])
        return bytes(out)


#: Most path counts (states x lengths, float64) evaluate_record's sampler stores (1.6 GB):
#: Github_ultra/o10335 (117k states, shortest accepted string 8385 bytes) would need 8 GB.
MAX_SAMPLER_ENTRIES = 200_000_000


def _no_dupes(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate keys {keys}")
    return dict(pairs)


def check_instance_text(text: bytes, schema: Any) -> str:
    """'' if ``text`` is JSON (no duplicate keys) valid against ``schema`` with format checking,
    else the reason."""
    import jsonschema
    from jsonschema.validators import validator_for

    try:
        inst = json.loads(text.decode("utf-8"), object_pairs_hook=_no_dupes)
    except (ValueError, UnicodeDecodeError) as e:
        return f"not JSON: {e}"
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    v = cls(schema, format_checker=cls.FORMAT_CHECKER)
    err = jsonschema.exceptions.best_match(v.iter_errors(inst))
    return "" if err is None else f"invalid: {err.message[:200]} at {list(err.absolute_path)}"


def evaluate_record(rec: dict, samples: int, seed: int = 0, *, styles: bool = False,
                    **options: Any) -> dict:
    """Compile one JSONSchemaBench record (``schema``, ``tests``) with the compiler ``options``
    and check it: status, valid instances accepted, invalid accepted (unsound), sampled strings
    that validate.  With ``styles`` every instance is checked in each of :func:`serializations`
    (counts per style in ``by_style``)."""
    import random
    import time
    import warnings


    out = {"id": rec["id"]}
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            comp = JsonSchemaCompiler(rec["schema"], **options)
            a = N.finalize(comp.build())
        out["warnings"] = sorted({str(x.message)[:300] for x in w})
    except UnsupportedSchemaError as e:
        out.update(status="unsupported", keyword=e.keyword, pointer=e.pointer)
        return out
    except InvalidSchemaError as e:
        out.update(status="invalid_schema", why=str(e)[:200])
        return out
    except RecursionError:
        out.update(status="error", why="RecursionError")
        return out
    except Exception as e:  # noqa: BLE001 - a bug, reported
        out.update(status="error", why=f"{type(e).__name__}: {e}"[:300])
        return out
    out["compile_seconds"] = time.perf_counter() - t0
    out["states"] = a.num_states
    out["ignored"] = sorted(comp.ignored)
    if not a.finals:
        out.update(status="empty")
        return out
    out["status"] = "compiled"
    va = vt = ia = it = unrep = 0
    bad_valid, bad_invalid = [], []
    by_style: dict[str, dict[str, int]] = {}
    for t in rec["tests"]:
        try:
            text = comp.serialize(t["data"])
        except (TypeError, ValueError):
            continue
        acc = N.matches(a, text.encode())
        if styles and (check_instance_text(text.encode(), rec["schema"]) == "") == t["valid"]:
            for style, tx in serializations(text).items():
                row = by_style.setdefault(style, dict.fromkeys(
                    ("valid", "valid_accepted", "invalid", "invalid_accepted"), 0))
                ok = N.matches(a, tx.encode())
                kind = "valid" if t["valid"] else "invalid"
                row[kind] += 1
                row[kind + "_accepted"] += ok
                if ok and not t["valid"]:
                    bad_invalid.append(f"[{style}] {tx[:200]}")
        # the canonical text must mean the same instance to the validator (draft-04 reads 1.0
        # as a non-integer; the canonical text "1" is an integer): else it is unrepresentable
        if (check_instance_text(text.encode(), rec["schema"]) == "") != t["valid"]:
            unrep += 1
            continue
        if t["valid"]:
            vt += 1
            va += acc
            if not acc:
                bad_valid.append(text[:200])
        else:
            it += 1
            ia += acc
            if acc:
                bad_invalid.append(text[:200])
    if styles:
        out["by_style"] = by_style
    out.update(valid_total=vt, valid_accepted=va, invalid_total=it, invalid_accepted=ia,
               rejected_valid=bad_valid[:3], accepted_invalid=bad_invalid[:3],
               unrepresentable=unrep)
    if samples:
        # shortest accepted length by BFS
        dist = {a.start: 0}
        frontier = [a.start]
        shortest = None
        outs: dict[int, list[int]] = {}
        for s, _m, d in a.edges:
            outs.setdefault(s, []).append(d)
        while frontier and shortest is None:
            nxt = []
            for s in frontier:
                if s in a.finals:
                    shortest = dist[s]
                    break
                for d in outs.get(s, ()):
                    if d not in dist:
                        dist[d] = dist[s] + 1
                        nxt.append(d)
            frontier = nxt
        max_len = (shortest or 0) + 96
        if a.num_states * (max_len + 1) > MAX_SAMPLER_ENTRIES:
            out.update(samples=0, samples_valid=0, sample_failures=[], samples_skipped=(
                f"{a.num_states} states x {max_len + 1} lengths (shortest accepted string "
                f"{shortest} bytes) exceed the sampler's {MAX_SAMPLER_ENTRIES:.0e} counts"))
            return out
        sampler = PathSampler(a, max_len)
        rng = random.Random(seed)
        ok = 0
        fails = []
        for _ in range(samples):
            text = sampler.sample(rng)
            why = check_instance_text(text, rec["schema"])
            if why:
                fails.append((text[:200].decode("utf-8", "replace"), why[:200]))
            else:
                ok += 1
        out.update(samples=samples, samples_valid=ok, sample_failures=fails[:3])
    return out


#: Test-suite cases where the compiler is knowingly a strict *subset* (valid instance
#: rejected), each documented in tractable.fsa.json_schema.formats: leap seconds only at
#: 23:59:60 UTC, IDNA A-labels (xn--) refused by the hostname automaton.
KNOWN_FALSE_NEGATIVES = {
    ("format:date-time", "a valid date-time with a leap second, with minus offset"),
    ("format:time", "valid leap second, positive time-offset"),
    ("format:time", "valid leap second, large positive time-offset"),
    ("format:time", "valid leap second, negative time-offset"),
    ("format:time", "valid leap second, large negative time-offset"),
}


def known_false_negative(rec: dict) -> bool:
    """A rejected valid instance that the compiler documents: a format subset, or a schema for
    which it warned that it generates a subset (recursion / free-value depth)."""
    if rec.get("subset_warning"):
        return True
    if (rec["keyword"], rec["test"]) in KNOWN_FALSE_NEGATIVES:
        return True
    # valid IDNA A-labels (xn--...) are refused by the hostname subset
    return rec["keyword"] in ("format:hostname",) and "xn--" in rec.get("text", "").lower()


def write_suite_table(recs: list[dict], path: str | Path, command: str) -> None:
    """Markdown keyword × status table for the JSON-Schema-Test-Suite run."""
    import platform
    from datetime import date

    S = summarize_suite(recs)
    cols = ["pass", "fail", "unsupported", "invalid_schema", "error"]
    fp = sum(1 for r in recs if r["status"] == "fail" and not r["valid"])
    fn = [r for r in recs if r["status"] == "fail" and r["valid"]]
    lines = [
        "# JSON-Schema-Test-Suite (draft2020-12) — compiled automaton vs the suite's `valid`",
        "",
        f"Command: `{command}`  ",
        f"Machine: {platform.machine()} (shared 2-core VM); Python {platform.python_version()}; "
        f"{date.today().isoformat()}.",
        "",
        "Counts are test instances. pass = the automaton's acceptance of the canonical "
        "serialization equals `valid`; fail = differs; unsupported = the schema raised "
        "UnsupportedSchemaError (strict mode); invalid_schema = rejected as invalid JSON Schema "
        "(`\\p{...}` patterns, which Python's `re` cannot parse). `format` (format.json) runs "
        "with format assertion off, as that file tests annotation-only behaviour; "
        "`format:<name>` are the optional/format files (assertion on).",
        "",
        f"Accepted-invalid (unsound) instances: **{fp}**. Rejected-valid: {len(fn)} "
        f"({sum(known_false_negative(r) for r in fn)} are documented subsets: leap seconds with "
        "offsets, IDNA A-label hostnames, or schemas compiled with a warning that unconstrained "
        "values are generated at most `free_value_depth` levels deep).",
        "",
        "| keyword | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    tot = {c: 0 for c in cols}
    for k in sorted(S):
        lines.append(f"| {k} | " + " | ".join(str(S[k].get(c, 0)) for c in cols) + " |")
        for c in cols:
            tot[c] += S[k].get(c, 0)
    lines.append("| **total** | " + " | ".join(f"**{tot[c]}**" for c in cols) + " |")
    if fn:
        lines += ["", "Rejected-valid instances:", ""]
        lines += [f"- {r['keyword']} / {r['group']} / {r['test']}: `{r.get('text', '')[:80]}`"
                  for r in fn]
    Path(path).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":  # python -m tractable.testing.json_schema
    import sys

    root = Path(__file__).resolve().parents[2]
    recs = run_suite(load_suite(root / "tests" / "data" / "json_schema_test_suite"))
    out = root / "bench" / "results" / "json_schema_test_suite.md"
    write_suite_table(recs, out, "python -m tractable.testing.json_schema")
    (out.with_suffix(".json")).write_text(json.dumps(recs, indent=0, default=str))
    print(out.read_text())
    sys.exit(0)
