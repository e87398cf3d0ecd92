"""Load fuzzing: mutated saved automata → typed error, identical, or valid; never untyped, never
a hang, never a tampered file accepted (issue 23).

Runs the mutators and the oracle of ``tests/fsa/test_load_fuzz.py`` (one definition of both) with
seeded ``random.Random`` streams: ``--examples`` trials per mutator on each base automaton (a
40-id vocabulary, W = 2, every tensor raw; and GPT-2's real vocabulary, W = 1,571, whose 157 KB
``labels`` format version 2 stores zlib-compressed — on it the compressed-payload mutators
``ZLIB_MUTATORS`` run too), each trial in this process
with a ``SIGALRM`` watchdog of ``--hang-seconds`` (a trial past it counts as a hang).  Writes
``bench/results/load_fuzz.md`` and ``.json`` (counts per mutator and outcome, failures with
their seeds, the slowest trials).

    python bench/load_fuzz.py                      # 2,500 per mutator and base (~5 min)
    python bench/load_fuzz.py --examples 50 --out /tmp/lf   # a quick look
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from harness import (
    RESULTS,
    ROOT,
    BenchTimeout,
    load_vocabulary,
    loadavg,
    machine,
    save_json,
    time_limit,
    utc_now,
    versions,
)


def _fuzz_module():
    path = ROOT / "tests/fsa/test_load_fuzz.py"
    spec = importlib.util.spec_from_file_location("_load_fuzz", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bases(F, which: list[str]):
    """[(name, vocab, automaton)]: the automata whose saved files are mutated (the GPT-2 one is
    ``tests/fsa/test_load_fuzz.py``'s ``gpt2_automaton``: its labels are stored compressed)."""
    out = []
    if "tiny" in which:
        v = F.tiny_vocab()
        out.append(("tiny (V=40)", v, F.tiny_automaton(v)))
    if "gpt2" in which:
        v = load_vocabulary("gpt2")
        out.append(("gpt2 (V=50,257, zlib)", v, F.gpt2_automaton(v)))
    return out


def run(args) -> dict:
    import torch

    torch.set_num_threads(1)
    F = _fuzz_module()
    counts: dict = defaultdict(Counter)
    failures: list[dict] = []
    slow: list[tuple[float, str, str, int]] = []
    base_info: list[dict] = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for bname, vocab, A in bases(F, args.bases):
            A.save(tmp / "base.safetensors")
            base = (tmp / "base.safetensors").read_bytes()
            original = F.TokenAutomaton.load(tmp / "base.safetensors", vocab)
            compressed = "zlib" in F.read_parts(base)[1]
            names = sorted(F.MUTATORS) + (sorted(F.ZLIB_MUTATORS) if compressed else [])
            print(f"[{bname}] {len(base)} bytes, compressed: "
                  f"{F.read_parts(base)[1].get('zlib', 'none')}", flush=True)
            base_info.append({"base": bname, "file_bytes": len(base),
                              "zlib": F.read_parts(base)[1].get("zlib")})
            for mname in names:
                for i in range(args.examples):
                    seed = args.seed * 1_000_003 + i
                    rng = random.Random(f"{bname}/{mname}/{seed}")
                    t0 = time.perf_counter()
                    try:
                        with time_limit(args.hang_seconds):
                            kind, detail = F.run_one(mname, base, tmp / "m.safetensors", vocab,
                                                     original, rng)
                    except BenchTimeout:
                        kind, detail = "hang", f"> {args.hang_seconds} s"
                    except Exception as e:  # noqa: BLE001 - a harness error is a failure too
                        kind, detail = "untyped", f"harness: {type(e).__name__}: {e}"
                    dt = time.perf_counter() - t0
                    slow.append((dt, bname, mname, seed))
                    counts[(bname, mname)][kind] += 1
                    if kind in F.FAILURES:
                        failures.append({"base": bname, "mutator": mname, "seed": seed,
                                         "outcome": kind, "detail": detail})
                print(f"[{bname}] {mname:16s} {dict(counts[(bname, mname)])}", flush=True)
    slow.sort(reverse=True)
    return {
        "command": "python bench/load_fuzz.py " + " ".join(sys.argv[1:]),
        "date": utc_now(),
        "machine": machine(threads=torch.get_num_threads()),
        "load_avg_at_end": loadavg(),
        "versions": versions("torch", "numpy", "safetensors", "hypothesis", "tractable"),
        "examples_per_mutator": args.examples,
        "bases": base_info,
        "hang_seconds": args.hang_seconds,
        "seconds": time.perf_counter() - t_all,
        "counts": [{"base": b, "mutator": m, **dict(c)} for (b, m), c in counts.items()],
        "failures": failures,
        "slowest": [{"seconds": s, "base": b, "mutator": m, "seed": sd}
                    for s, b, m, sd in slow[:10]],
        "trial_seconds_median": sorted(x[0] for x in slow)[len(slow) // 2] if slow else None,
    }


OUTCOMES = ("refused", "identical", "valid", "untyped", "hang", "accepted_tampered",
            "accepted_invalid")


def write(res: dict, out: Path) -> None:
    save_json(out.with_suffix(".json"), res, indent=1)  # creates out.parent
    tot = Counter()
    for c in res["counts"]:
        tot.update({k: c.get(k, 0) for k in OUTCOMES})
    n = sum(tot.values())
    lines = [
        "# Load fuzzing: mutated saved automata",
        "",
        f"- Command: `{res['command']}`",
        f"- Date: {res['date']}; machine: {res['machine']}; load average at end: "
        + ", ".join(f"{x:.1f}" for x in res["load_avg_at_end"]),
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in res["versions"].items()),
        f"- {res['examples_per_mutator']} seeded trials per mutator and base automaton; "
        f"watchdog {res['hang_seconds']} s per trial; {n} trials in {res['seconds']:.0f} s "
        f"(median {res['trial_seconds_median'] * 1e3:.1f} ms per trial, load + first use).",
        "- Bases: " + "; ".join(
            f"{b['base']}: {b['file_bytes']:,} bytes, compressed {b['zlib'] or 'nothing'}"
            for b in res.get("bases", [])) + ".  The `z_*` mutators (compressed payload: byte "
        "flips in the blob, truncated/extended blob, wrong declared size, undeclared or "
        "misdeclared blobs) run on the compressed base only.",
        "- Mutators and the oracle: `tests/fsa/test_load_fuzz.py` (its docstring defines the "
        "outcomes).  `refused` = a `TractableError` at load; `identical` = the mutation changed "
        "nothing the format reads; `valid` = a different automaton (checksum recomputed or "
        "dropped) that satisfies every invariant and passed a first-use GCD walk.",
        "",
        f"**Totals: {tot['untyped']} untyped, {tot['hang']} hangs, {tot['accepted_tampered']} "
        f"accepted-tampered, {tot['accepted_invalid']} accepted-invalid** "
        f"({tot['refused']} refused, {tot['identical']} identical, {tot['valid']} valid).",
        "",
        "| base | mutator | " + " | ".join(OUTCOMES) + " |",
        "|---|---|" + "---|" * len(OUTCOMES),
    ]
    for c in res["counts"]:
        lines.append(f"| {c['base']} | {c['mutator']} | "
                     + " | ".join(str(c.get(k, 0)) for k in OUTCOMES) + " |")
    lines += ["", "Slowest trials (s): " + ", ".join(
        f"{s['seconds']:.2f} ({s['base']}, {s['mutator']})" for s in res["slowest"][:5]), ""]
    if res["failures"]:
        lines += ["## Failures", ""]
        lines += [f"- {f['base']} / {f['mutator']} seed {f['seed']}: {f['outcome']} — "
                  f"{f['detail']}" for f in res["failures"][:50]]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=2500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hang-seconds", type=int, default=10)
    ap.add_argument("--bases", nargs="+", default=["tiny", "gpt2"], choices=["tiny", "gpt2"])
    ap.add_argument("--out", type=Path, default=RESULTS / "load_fuzz")
    args = ap.parse_args(argv)
    res = run(args)
    write(res, args.out)
    print(f"wrote {args.out}.md; failures: {len(res['failures'])}")
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
