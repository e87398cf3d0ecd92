"""Issue 2's main evidence: every regex ``pattern`` of JSONSchemaBench, compiled against the
Llama-3 vocabulary (or rejected with a typed error), checked against Python ``re``/``regex``.

Data: ``tests/data/jsonschemabench_patterns.json.gz``, extracted by
``scripts/extract_pattern_data.py`` from ``../shared/data/jsonschemabench`` (JSONSchemaBench,
Geng et al. 2025; see that script).  Each distinct pattern comes with the instance strings found
where it applies.

For each pattern (full-match semantics, ``re.fullmatch``):

* ``re.compile`` fails → counted ``re_invalid`` (and :class:`InvalidRegexError` must be raised);
* :class:`UnsupportedRegexError` → counted per construct;
* otherwise the strings checked are: the instance strings, texts decoded from random accepted
  token paths of the automaton (each must fullmatch: soundness), and random one-character
  mutations of the matching ones.  For each string, under the canonical Llama-3 tokenization and
  random segmentations: ``accepts == re.fullmatch``; on every token prefix of the canonical
  tokenization and of one random segmentation: ``viable == regex partial matching``.

The default run takes a deterministic subset; ``-m slow`` runs them all (its report goes to a
temporary directory: tests write nothing else);
``python tests/fsa/json_schema/test_jsonschemabench_patterns.py`` runs them all and writes
``bench/results/regex_jsonschemabench_patterns.{md,json}``.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import platform
import random
import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from tractable.fsa import nfa as N
from tractable.fsa.errors import EmptyLanguageError, InvalidRegexError, UnsupportedRegexError
from tractable.fsa.regex import compile_regex, regex_to_nfa

from tractable.testing.regex import (
    decode_text,
    mutations,
    random_segmentation,
    reference_viable,
    sample_accepted,
)

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parents[2] / "data" / "jsonschemabench_patterns.json.gz"
RESULTS = ROOT / "bench" / "results" / "regex_jsonschemabench_patterns"

#: Default (not slow) run: this many patterns, chosen by hash, among those whose finalized byte
#: NFA has at most SUBSET_MAX_STATES states (Unicode ``\w{1,255}`` has ~80k states and takes
#: ~30 s to lift over 128k tokens; such patterns are in the full run only).
SUBSET_SIZE = 120
SUBSET_MAX_STATES = 2000


#: Seconds the references (``re``/``regex``, both backtracking) may spend on one string: a few
#: patterns backtrack exponentially on long sampled texts (``([a-z\\d_.-]+\\.)+[a-z]+``); such
#: strings are counted as ``reference_timeout`` and skipped (the automaton answers in
#: microseconds; it is the reference that cannot).
REFERENCE_SECONDS = 5.0


class _ReferenceTimeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    def _raise(signum, frame):
        raise _ReferenceTimeout

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _fullmatch(pattern: str, text: str, counts: Counter) -> bool | None:
    """``re.fullmatch`` as a bool, or ``None`` (counted) when it exceeds the time limit."""
    try:
        with _time_limit(REFERENCE_SECONDS):
            return re.fullmatch(pattern, text) is not None
    except _ReferenceTimeout:
        counts["reference_timeout"] += 1
        return None


def load_patterns(include_pattern_properties: bool = True) -> list[dict]:
    with gzip.open(DATA, "rt", encoding="utf-8") as f:
        rows = json.load(f)["patterns"]
    return [r for r in rows if include_pattern_properties or r["kind"] == "pattern"]


def _key(p: str) -> str:
    return hashlib.sha256(p.encode("utf-8")).hexdigest()


def check_pattern(row, vocab, tokenizer, rng, counts, mismatches, *, n_samples=4, n_mut=2,
                  n_segs=2):
    """Check one pattern; update ``counts`` (Counter) and append to ``mismatches``."""
    pattern = row["pattern"]
    kind = row["kind"]
    counts[f"{kind}:total"] += 1
    try:
        re.compile(pattern)
    except re.error:
        counts[f"{kind}:re_invalid"] += 1
        try:
            regex_to_nfa(pattern)
            mismatches.append({"pattern": pattern, "what": "re rejects, we compiled"})
        except InvalidRegexError:
            pass
        return
    except (OverflowError, RecursionError):
        counts[f"{kind}:re_invalid"] += 1
        return
    try:
        A = compile_regex(pattern, vocab)
    except UnsupportedRegexError as e:
        counts[f"{kind}:unsupported"] += 1
        counts[f"unsupported:{e.construct.split(' (')[0]}"] += 1
        return
    except InvalidRegexError as e:
        counts[f"{kind}:invalid"] += 1
        mismatches.append({"pattern": pattern, "what": f"re compiles, we raised {e}"})
        return
    except EmptyLanguageError:
        counts[f"{kind}:empty_language"] += 1
        for s in row["strings"]:
            if re.fullmatch(pattern, s):
                mismatches.append({"pattern": pattern, "what": "empty language", "text": s})
        return
    counts[f"{kind}:compiled"] += 1
    texts = list(dict.fromkeys(row["strings"]))
    samples = []
    for _ in range(n_samples):
        ids = sample_accepted(A, rng)
        data = decode_text(vocab, ids)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            mismatches.append({"pattern": pattern, "what": "sample not UTF-8", "data": repr(data)})
            continue
        counts["sampled"] += 1
        ok = _fullmatch(pattern, text, counts)
        if ok is False:
            mismatches.append({"pattern": pattern, "what": "sample rejected by re", "text": text})
        samples.append(text)
    matching = [t for t in texts if _fullmatch(pattern, t, counts)] + samples
    muts = [m for t in matching[:6] for m in mutations(t, rng, n_mut)]
    for text in dict.fromkeys(texts + samples + muts):
        try:
            with _time_limit(REFERENCE_SECONDS):
                _check_text(A, pattern, text, vocab, tokenizer, rng, counts, mismatches, n_segs)
        except _ReferenceTimeout:
            counts["reference_timeout"] += 1


def _check_text(A, pattern, text, vocab, tokenizer, rng, counts, mismatches, n_segs):
    want = re.fullmatch(pattern, text) is not None
    data = text.encode("utf-8")
    canon = tokenizer.encode(text, add_special_tokens=False).ids
    if decode_text(vocab, canon) != data:  # pragma: no cover - byte-level BPE round-trips
        counts["canonical_not_roundtrip"] += 1
        canon = random_segmentation(vocab, data, rng)
    segs = [canon] + [random_segmentation(vocab, data, rng) for _ in range(n_segs)]
    # reference answers first (they may time out), then the automaton's
    # the regex package's partial matching is wrong for lookarounds (it calls
    # regex.fullmatch(r"a(?!.*--)b*", "ac", partial=True) a partial match): no viable reference
    # there; test_regex checks lookarounds against re on every short string instead
    look = any(x in pattern for x in ("(?=", "(?!", "(?<=", "(?<!"))
    viable_ref = [] if look else [[reference_viable(pattern, decode_text(vocab, ids[:k]))
                                   for k in range(len(ids) + 1)] for ids in segs[:2]]
    counts["strings"] += 1
    counts["strings_matching" if want else "strings_not_matching"] += 1
    for j, ids in enumerate(segs):
        counts["accepts_checks"] += 1
        if A.accepts(ids) != want:
            mismatches.append({"pattern": pattern, "what": "accepts", "text": text,
                               "ids": ids, "want": want})
        if j > 1 or look:
            continue
        # viable on every prefix (canonical + one random segmentation), incrementally
        states = A.initial.numpy().copy()
        for k in range(len(ids) + 1):
            if k:
                states = A.step_states(states, ids[k - 1])
            counts["viable_checks"] += 1
            if bool(states.any()) != viable_ref[j][k]:
                mismatches.append({"pattern": pattern, "what": "viable", "text": text,
                                   "ids": ids[:k]})
        if A.viable(ids) != bool(states.any()):
            mismatches.append({"pattern": pattern, "what": "viable()", "text": text})


def run(rows, vocab, tokenizer, *, seed=0, progress=False) -> tuple[Counter, list, dict]:
    counts: Counter = Counter()
    mismatches: list = []
    times: dict[str, float] = {}
    t_all = time.perf_counter()
    for i, row in enumerate(rows):
        rng = random.Random(f"{seed}:{row['pattern']}")
        t0 = time.perf_counter()
        check_pattern(row, vocab, tokenizer, rng, counts, mismatches)
        times[row["pattern"]] = time.perf_counter() - t0
        if progress and i % 50 == 0:
            print(f"[{i}/{len(rows)}] {time.perf_counter() - t_all:.0f}s {dict(counts)}",
                  file=sys.stderr, flush=True)
    return counts, mismatches, times


def subset(rows):
    picked = []
    for r in sorted(rows, key=lambda r: _key(r["pattern"])):
        if len(picked) >= SUBSET_SIZE:
            break
        try:
            f = N.finalize(regex_to_nfa(r["pattern"]))
        except Exception:  # noqa: BLE001 - errors are part of what the check counts
            picked.append(r)
            continue
        if f.num_states <= SUBSET_MAX_STATES:
            picked.append(r)
    return picked


def _summary(counts: Counter) -> str:
    lines = []
    for kind in ("pattern", "patternProperties"):
        c = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith(kind + ":")}
        lines.append(f"{kind}: " + ", ".join(f"{k}={v}" for k, v in sorted(c.items())))
    lines.append("unsupported constructs: " + ", ".join(
        f"{k.split(':', 1)[1]}={v}" for k, v in sorted(counts.items())
        if k.startswith("unsupported:")))
    lines.append(", ".join(f"{k}={counts[k]}" for k in (
        "strings", "strings_matching", "strings_not_matching", "sampled", "accepts_checks",
        "viable_checks", "reference_timeout")))
    return "\n".join(lines)


def write_report(counts, mismatches, times, rows, elapsed, vocab_name="llama3",
                 results: Path = RESULTS):
    """Write ``results``.{md,json} (default: the tracked ``bench/results`` files)."""
    import numpy as np

    import tractable

    out = results
    out.parent.mkdir(parents=True, exist_ok=True)
    t = np.array(sorted(times.values()))
    raw = {"counts": dict(counts), "mismatches": mismatches, "seconds_per_pattern": times,
           "elapsed_seconds": elapsed, "vocab": vocab_name}
    out.with_suffix(".json").write_text(json.dumps(raw, indent=1, ensure_ascii=False))

    def c(kind, what):
        return counts.get(f"{kind}:{what}", 0)

    md = [
        "# JSONSchemaBench regex patterns: compiled automata vs Python `re`",
        "",
        "Command: `python tests/fsa/json_schema/test_jsonschemabench_patterns.py` "
        f"(= `pytest -m slow "
        f"tests/fsa/json_schema/test_jsonschemabench_patterns.py`), {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()} {platform.processor() or ''} ({platform.system()}), Python "
        f"{platform.python_version()}, tractable {tractable.__version__}, vocabulary "
        f"{vocab_name} (128,256 ids). Data: `tests/data/jsonschemabench_patterns.json.gz` "
        f"({len(rows)} distinct patterns). Raw numbers: `regex_jsonschemabench_patterns.json`.",
        "",
        "Semantics: full match (`re.fullmatch`). For each compiled pattern: instance strings, "
        "4 texts sampled from the automaton, 2 one-character mutations of each matching text; "
        "`accepts` under the canonical tokenization and 2 random segmentations; `viable` on "
        "every token prefix of the canonical tokenization and one random segmentation.",
        "",
        "| | `pattern` values | `patternProperties` keys |",
        "|---|---|---|",
    ]
    for what in ("total", "compiled", "unsupported", "re_invalid", "invalid", "empty_language"):
        md.append(f"| {what} | {c('pattern', what)} | {c('patternProperties', what)} |")
    md += [
        "",
        "| unsupported construct | patterns (both kinds) |",
        "|---|---|",
    ]
    md += [f"| {k.split(':', 1)[1]} | {v} |" for k, v in sorted(counts.items())
           if k.startswith("unsupported:")]
    md += [
        "",
        "| check | count |",
        "|---|---|",
    ]
    for k in ("strings", "strings_matching", "strings_not_matching", "sampled", "accepts_checks",
              "viable_checks", "reference_timeout"):
        md.append(f"| {k} | {counts.get(k, 0)} |")
    md.append(f"| **mismatches** | **{len(mismatches)}** |")
    md += [
        "",
        f"Time per pattern (compile + all checks, seconds): median {np.median(t):.3f}, "
        f"p90 {np.quantile(t, 0.9):.3f}, max {t.max():.1f}; total {elapsed:.0f} s.",
        "",
        "`re_invalid`: Python `re` itself rejects the pattern (ECMA-only syntax such as "
        "`\\p{L}` or `(?<name>`); `InvalidRegexError` is raised with `re`'s position — not a "
        "mismatch.  `empty_language`: no string fully matches (e.g. `/^[0-9]{4}$/`, a JavaScript "
        "regex literal whose slashes make `^` unsatisfiable under full match); "
        "`EmptyLanguageError` is raised and no instance string may match.",
    ]
    out.with_suffix(".md").write_text("\n".join(md) + "\n")


def test_pattern_data_is_committed():
    rows = load_patterns()
    assert sum(r["kind"] == "pattern" for r in rows) > 1000
    assert sum(len(r["strings"]) for r in rows) > 1000


def test_jsonschemabench_patterns_subset(llama3_vocab, llama3_tokenizer):
    rows = subset(load_patterns())
    counts, mismatches, _ = run(rows, llama3_vocab, llama3_tokenizer)
    print("\n" + _summary(counts) + f"\nmismatches={len(mismatches)}")
    assert not mismatches, mismatches[:5]
    assert counts["pattern:compiled"] > 50 and counts["strings_not_matching"] > 100


@pytest.mark.slow
def test_jsonschemabench_patterns_all(llama3_vocab, llama3_tokenizer, tmp_path):
    rows = load_patterns()
    t0 = time.perf_counter()
    counts, mismatches, times = run(rows, llama3_vocab, llama3_tokenizer, progress=True)
    report = tmp_path / "regex_jsonschemabench_patterns"
    write_report(counts, mismatches, times, rows, time.perf_counter() - t0, results=report)
    assert report.with_suffix(".md").stat().st_size > 0
    print("\n" + _summary(counts) + f"\nmismatches={len(mismatches)}")
    assert not mismatches, mismatches[:5]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from conftest import _tokenizer, _vocab

    rows = load_patterns()
    if len(sys.argv) > 1 and sys.argv[1] == "--subset":
        rows = subset(rows)
    t0 = time.perf_counter()
    counts, mismatches, times = run(rows, _vocab("llama3"), _tokenizer("llama3"), progress=True)
    elapsed = time.perf_counter() - t0
    if len(rows) == len(load_patterns()):
        write_report(counts, mismatches, times, rows, elapsed)
    print(_summary(counts) + f"\nmismatches={len(mismatches)} elapsed={elapsed:.0f}s")
    for m in mismatches[:20]:
        print(m)
