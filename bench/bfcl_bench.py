"""Function calling under a tight token budget: validity and time per sample on SmolLM2.

Each BFCL v4 ``simple_python`` question gives one function spec; its JSON Schema (BFCL types mapped
to JSON Schema: dict→object, float→number, tuple→array, any→{}) wrapped as
``{"name": <const>, "arguments": <parameters>}`` is compiled with
:func:`tractable.fsa.json_schema.compile_json_schema`.  Methods (one output per method and
question; SMC returns the sample drawn from its weighted ensemble):

* ``lcd``  — ancestral sampling with the budget-blind mask (can run out of budget: invalid);
* ``gcd``  — ancestral sampling with the budget-aware mask (always valid);
* ``gcd+smc k`` — SMC with the GCD proposal, k particles;
* ``awrs-smc k`` — SMC with the AWRS proposal (black-box checks), k particles;
* ``pgcd+smc k`` — SMC with the P-GCD proposal and potential (needs ``--hmm DIR`` with a distilled
  HMM; skipped otherwise);
* ``pgcd-prop k`` — SMC with the P-GCD proposal and no potential (plain importance weights
  p_lm / q; ``--pgcd-prop-ks``, same HMM);
* ``twist+smc k`` — SMC with the twist proposal q ∝ p_lm·φ over the GCD mask and the P-GCD
  potential φ (``SMC(proposal="twist")``; ``--pgcd-ks``, same HMM).

    OMP_NUM_THREADS=1 python bench/bfcl_bench.py --questions 20 --budget-slack 4 --ks 1 4 16 \
        --pgcd-ks 4 16 --hmm .cache/hmm/smollm2_n1024_t128

Accuracy vs particles (issue 20; two processes, one per core, merged by ``--also``):

    OMP_NUM_THREADS=1 python bench/bfcl_bench.py --questions 60 --budget-slack 10 \
        --ks 2 4 8 --awrs-k 4 8 --methods lcd gcd gcd+smc awrs-smc \
        --out bench/results/bfcl_accuracy --also bench/results/bfcl_accuracy_pgcd.json
    OMP_NUM_THREADS=1 python bench/bfcl_bench.py --questions 60 --budget-slack 10 \
        --methods pgcd-prop pgcd+smc --pgcd-prop-ks 1 2 4 8 --pgcd-ks 4 8 \
        --hmm .cache/hmm/bfcl_task_h256 --out bench/results/bfcl_accuracy_pgcd
    OMP_NUM_THREADS=1 python bench/bfcl_bench.py --questions 60 --budget-slack 10 \
        --methods twist+smc --pgcd-ks 4 8 --hmm .cache/hmm/bfcl_task_h256 \
        --out bench/results/bfcl_accuracy_twist
    python bench/bfcl_bench.py --out bench/results/bfcl_accuracy --report-only

Budget: the shortest accepted output (in tokens) + ``--budget-slack``.  Besides validity and
time, each drawn output is scored by the unconstrained LM: ``log p_lm(x [EOS] | prompt)`` (one
extra forward pass, not timed), and SMC methods report ``log Ĝ`` (the estimate of the
constrained mass G = Σ_x P0(x) 1_C(x); every method estimates the same G per question).
Each output is also scored against BFCL's ``possible_answer`` with the AST rules of
:mod:`bfcl_accuracy` (``correct``).  ``--also A.json ...`` merges rows of other runs (e.g. the
P-GCD methods run in a second process) into the report.  Writes bench/results/bfcl_smc.{md,json}
(``--out``).  Reads /work/shared/data/bfcl_function_calling.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from harness import (
    RESULTS,
    SHARED,
    command_line,
    load_rows,
    machine,
    quantile,
    save_rows,
    utc_now,
    versions,
)

DATA = SHARED / "bfcl_function_calling" / "BFCL_v4_simple_python.json"
ANSWERS = SHARED / "bfcl_function_calling" / "possible_answer" / "BFCL_v4_simple_python.json"
OUT = RESULTS
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None, "list": "array"}


def bfcl_to_json_schema(p):
    """BFCL parameter spec → JSON Schema (descriptions and defaults dropped)."""
    if not isinstance(p, dict):
        return p
    out = {}
    t = p.get("type")
    if t is not None:
        t = _TYPES.get(t, t)
        if t is not None:
            out["type"] = t
    if "properties" in p:
        out["properties"] = {k: bfcl_to_json_schema(v) for k, v in p["properties"].items()}
        out["additionalProperties"] = False
    if "required" in p:
        out["required"] = list(p["required"])
    if "items" in p:
        out["items"] = bfcl_to_json_schema(p["items"])
    if "enum" in p:
        out["enum"] = p["enum"]
    return out


def call_schema(fn: dict) -> dict:
    return {
        "type": "object",
        "properties": {
            "name": {"const": fn["name"]},
            "arguments": bfcl_to_json_schema(fn["parameters"]),
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


@torch.no_grad()
def lm_loglik(model, prompt: list[int], toks: list[int], eos: int | None) -> float:
    """``log p_lm(toks [eos] | prompt)`` under the unconstrained model (one forward pass)."""
    cont = list(toks) + ([eos] if eos is not None else [])
    if not cont:
        return 0.0
    ids = torch.tensor([list(prompt) + cont])
    logits = model(ids).logits[0, len(prompt) - 1 : -1].double()
    lp = torch.log_softmax(logits, dim=-1)
    return float(lp.gather(1, torch.tensor(cont).view(-1, 1)).sum())


# ---- shared with awrs_bench.py (which imports them from here): SmolLM2, --report-only and
# the run header of the SmolLM2 benches


def smollm2_lm(threads: int):
    """SmolLM2-135M-Instruct on ``threads`` torch threads: (model, tokenizer, vocabulary,
    :class:`HFCausalLM`)."""
    torch.set_num_threads(threads)
    from tractable.decode.lm import HFCausalLM

    from tractable.models import load_smollm2, smollm2_vocabulary

    model, tok = load_smollm2()
    vocab = smollm2_vocabulary(tok, model)
    return model, tok, vocab, HFCausalLM(model, tok, eos_token_ids=vocab.eos_token_ids)


def parse_or_report(ap: argparse.ArgumentParser, write_report, renders: str = "OUT.md"):
    """Add ``--report-only`` (the last option), parse; with it, print ``write_report(OUT)`` and
    exit."""
    ap.add_argument(
        "--report-only", action="store_true", help=f"re-render {renders} from OUT.json and exit"
    )
    args = ap.parse_args()
    if args.report_only:
        print(write_report(Path(args.out)))
        raise SystemExit(0)
    return args


def run_meta(
    script: str, args: argparse.Namespace, packages=("torch", "transformers"), **extra
) -> dict:
    """The ``meta`` of a result file: date, machine, versions (python and ``packages`` as
    top-level keys), torch threads, note and the command with every option spelled out
    (:func:`harness.command_line`)."""
    return {
        "date": utc_now(),
        "machine": machine(),
        "machine_note": "shared machine (other jobs running), ",
        "threads": args.threads,
        **versions(*packages),
        "note": args.note,
        "command": command_line(script, args, ("out", "note", "report_only")),
        **extra,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--budget-slack", type=int, default=4)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--awrs-k", type=int, nargs="+", default=[4])
    ap.add_argument("--pgcd-ks", type=int, nargs="+", default=[4])
    ap.add_argument(
        "--pgcd-prop-ks",
        type=int,
        nargs="+",
        default=[4],
        help="particles of the pgcd-prop method (P-GCD proposal, no potential)",
    )
    ap.add_argument("--first", type=int, default=0, help="skip the questions before this index")
    ap.add_argument(
        "--also", nargs="*", default=[], help="JSON row files of other runs merged into the report"
    )
    ap.add_argument("--pgcd-w", type=float, default=0.5, help="P-GCD proposal weight w")
    ap.add_argument(
        "--methods", nargs="+", default=["lcd", "gcd", "gcd+smc", "awrs-smc", "pgcd+smc"]
    )
    ap.add_argument(
        "--hmm",
        default=None,
        help="folder of a distilled HMM (HMM.save), or a distill output folder "
        "holding it under hmm/",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT / "bfcl_smc"))
    ap.add_argument("--note", default="", help="a sentence added to the report (load, ...)")
    args = parse_or_report(ap, write_report)
    out = Path(args.out)
    model, tok, vocab, lm = smollm2_lm(args.threads)
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.decode.smc import SMC
    from tractable.fsa.json_schema import compile_json_schema

    hmm = None
    if args.hmm:
        from tractable.hmm.model import HMM

        hdir = Path(args.hmm)
        if not (hdir / "config.json").exists() and (hdir / "hmm" / "config.json").exists():
            hdir = hdir / "hmm"  # the output folder of python -m tractable.hmm.distill
        hmm = HMM.load(hdir, vocab)
        print(f"HMM {hmm!r} from {hdir}", flush=True)
    qs = [json.loads(line) for line in DATA.open()][args.first :]
    from bfcl_accuracy import check

    answers = {a["id"]: a["ground_truth"] for a in map(json.loads, ANSWERS.open())}
    rows: list[dict] = []
    skipped: list[str] = []
    meta = run_meta(
        "bfcl_bench.py", args, budget_slack=args.budget_slack, skipped=skipped, also=list(args.also)
    )
    if hmm is None and ("pgcd+smc" in args.methods or "twist+smc" in args.methods):
        meta["pgcd_note"] = "P-GCD+SMC: not run (no distilled HMM given; pass `--hmm DIR`)."
    elif hmm is not None:
        meta["pgcd_note"] = (
            f"P-GCD: HMM H = {hmm.hidden_size} distilled from SmolLM2 "
            f"(`{args.hmm}`), proposal q ∝ p_lm^w p_hmm(·|x, C)^(1−w) with "
            f"w = {args.pgcd_w} over the GCD mask, potential "
            "p_hmm(x|C)/p_hmm(x) (paper 002 §4.3)."
        )
    done = 0
    for q in qs:
        if done >= args.questions:
            break
        fn = q["function"][0]
        try:
            A = compile_json_schema(call_schema(fn), vocab)
        except Exception as e:  # noqa: BLE001 - report and skip unsupported schemas
            print("skip", q["id"], type(e).__name__, e)
            skipped.append(f"{q['id']} ({type(e).__name__})")
            continue
        done += 1
        C = AutomatonConstraint(A)
        N = C.min_tokens_to_accept() + 1 + args.budget_slack
        msg = (
            q["question"][0][0]["content"] + '\nAnswer with a JSON object {"name": ..., '
            '"arguments": {...}} calling this function: ' + json.dumps(fn)
        )
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": msg}], add_generation_prompt=True, tokenize=True
        )
        if not isinstance(prompt, list):
            prompt = list(prompt["input_ids"])
        plan = []
        for m in args.methods:
            if m in ("lcd", "gcd"):
                plan.append((m, m, 1, 0.0, None))
            elif m == "gcd+smc":
                plan += [(f"gcd+smc k={k}", "gcd", k, 0.5, None) for k in args.ks]
            elif m == "awrs-smc":
                plan += [(f"awrs-smc k={k}", "awrs", k, 0.5, None) for k in args.awrs_k]
            elif m == "pgcd+smc" and hmm is not None:
                plan += [(f"pgcd+smc k={k}", "pgcd", k, 0.5, "pgcd") for k in args.pgcd_ks]
            elif m == "twist+smc" and hmm is not None:
                plan += [(f"twist+smc k={k}", "twist", k, 0.5, "pgcd") for k in args.pgcd_ks]
            elif m == "pgcd-prop" and hmm is not None:
                plan += [(f"pgcd-prop k={k}", "pgcd", k, 0.5, "prop") for k in args.pgcd_prop_ks]
        for name, prop, k, tau, pot in plan:
            t0 = time.perf_counter()
            setup = 0.0
            if pot in ("pgcd", "prop"):  # the product's backward pass is part of the cost
                from tractable.hmm.pgcd import PGCD

                pot = (
                    PGCD(A, hmm, N, w=args.pgcd_w)
                    if pot == "pgcd"
                    else PGCD(A, hmm, N, w=args.pgcd_w).proposal_only()
                )
                setup = time.perf_counter() - t0
            s = SMC(lm, C, proposal=prop, potential=pot, max_new_tokens=N, ess_threshold=tau)
            res = s.run(prompt, k, seed=args.seed)
            dt = time.perf_counter() - t0
            toks = res.sample_tokens if res.sample >= 0 else res.particles[0]
            valid = bool(A.accepts(toks)) and (res.sample >= 0)
            eos = bool(res.eos[res.sample]) if res.sample >= 0 else False
            text = tok.decode(toks)
            ll = lm_loglik(model, prompt, toks, vocab.eos_token_ids[0] if eos else None)
            correct, why = check(fn, text if valid else None, answers[q["id"]])
            rows.append(
                {
                    "id": q["id"],
                    "method": name,
                    "k": k,
                    "budget": N,
                    "valid": valid,
                    "seconds": dt,
                    "setup_seconds": setup,
                    "log_G": res.log_G,
                    "lm_loglik": ll,
                    "tokens": len(toks),
                    "eos": eos,
                    "lm_calls": res.stats["lm_calls"],
                    "checks": res.stats["constraint_checks"],
                    "resampling_steps": res.stats["resampling_steps"],
                    "text": text,
                    "correct": correct,
                    "why": why,
                }
            )
            print(
                f"{q['id']} N={N} {name:14s} valid={valid} ok={int(correct)} {dt:6.1f}s "
                f"logG={res.log_G:8.2f} ll={ll:8.2f} {text!r}",
                flush=True,
            )
        save_rows(out, meta, rows)  # after every question: a killed run keeps its rows
    save_rows(out, meta, rows)  # the questions skipped after the last one run
    print(write_report(out))


def _load_all(out: Path) -> tuple[dict, list[dict]]:
    """Rows of ``out`` and of the files in its meta's ``also`` (other runs merged)."""
    meta, rows = load_rows(out)
    for other in meta.get("also", []):
        if not Path(other).exists():
            continue
        m2, r2 = load_rows(Path(other).with_suffix(""))
        meta.setdefault("also_commands", []).append(m2["command"])
        if m2.get("pgcd_note") and not meta.get("pgcd_note"):
            meta["pgcd_note"] = m2["pgcd_note"]
        rows = rows + r2
    if meta.get("also"):  # runs stopped at different questions: keep the common ones
        per = {}
        for r in rows:
            per.setdefault(r["method"], set()).add(r["id"])
        common = set.intersection(*per.values()) if per else set()
        meta["dropped_questions"] = len({r["id"] for r in rows} - common)
        rows = [r for r in rows if r["id"] in common]
    return meta, rows


def write_report(out: Path) -> str:
    """bench/results/<out>.md from <out>.json (``--report-only`` re-renders it)."""
    meta, rows = _load_all(out)
    acc_lines = accuracy_section(rows, out)
    qids = list(dict.fromkeys(r["id"] for r in rows))
    lines = [
        "# BFCL function calls on SmolLM2-135M-Instruct at a tight budget",
        "",
        f"Command: `{meta['command']}`  ",
        *[f"Merged rows of: `{c}`  " for c in meta.get("also_commands", [])],
        f"Machine: {meta.get('machine_note', '')}{meta['machine']}, torch threads = "
        f"{meta['threads']}, torch {meta['torch']}, transformers "
        f"{meta.get('transformers', '?')}, Python {meta.get('python', '?')}; SmolLM2-135M-"
        f"Instruct (float32); date {meta['date']}.  Raw rows: `{out.name}.json`.",
        "",
        f"{len(qids)} BFCL v4 `simple_python` questions (the first ones whose schema "
        f"compiles; skipped: {', '.join(meta.get('skipped', [])) or 'none'}"
        + (
            f"; {meta['dropped_questions']} more run by only some of the merged runs left out"
            if meta.get("dropped_questions")
            else ""
        )
        + ").  Budget N = "
        f"shortest accepted output + {meta.get('budget_slack', '?')} tokens (EOS "
        "included); budgets: median "
        f"{np.median([r['budget'] for r in rows]):.0f}, range "
        f"{min(r['budget'] for r in rows)}–{max(r['budget'] for r in rows)}.  One output "
        "per method and question (SMC: one draw from its weighted ensemble; a run whose "
        "particles all died has no output and counts as invalid).  Validity = the output "
        "is accepted by the schema's automaton.  Time = the whole run that produced the "
        "output (P-GCD: including the product's backward pass).",
        "",
        "Closeness to the model: `log p_lm` = log-probability of the output (and its EOS) "
        "under the *unconstrained* LM given the prompt, over valid outputs (higher = an "
        "output the model itself finds likelier; read it with log Ĝ: a mode-seeking sampler "
        "can score higher than exact posterior samples, whose mean is log G − H(posterior))."
        "  `log Ĝ` "
        "= the run's estimate of log G, G = Σ_x P0(x) 1_C(x) (every method is an unbiased "
        "estimator of the same G per question, so by Jensen a higher mean log Ĝ means a "
        "lower-variance estimator, i.e. a proposal closer to the target; LCD/GCD: the "
        "product of the mask masses Z_t along the single path, −∞ when LCD runs out).  The "
        "last two columns compare each run's log Ĝ with the plain GCD run on the same "
        "question (paired; finite estimates only).",
        "",
        "Accuracy = the output is a correct call by BFCL's AST rules against "
        "`possible_answer` (`bench/bfcl_accuracy.py`; an invalid output is incorrect).",
        "",
        "| method | outputs | valid | accuracy | time/sample median (s) | p90 (s) | "
        "forward passes median | mean log p_lm (valid) | median log p_lm | "
        "mean log Ĝ (finite) | Ĝ = 0 | log Ĝ − log Ĝ_gcd: paired median | > gcd |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = {r["id"]: r["log_G"] for r in rows if r["method"] == "gcd"}
    for name in dict.fromkeys(r["method"] for r in rows):
        sub = [r for r in rows if r["method"] == name]
        t = np.array([r["seconds"] for r in sub])
        ll = np.array([r["lm_loglik"] for r in sub if r["valid"]])
        lg = np.array([r["log_G"] for r in sub])
        fin = lg[np.isfinite(lg)]
        d = np.array(
            [r["log_G"] - base[r["id"]] for r in sub if r["id"] in base and np.isfinite(r["log_G"])]
        )
        lines.append(
            f"| {name} | {len(sub)} | {sum(r['valid'] for r in sub)}/{len(sub)} | "
            f"{sum(r.get('correct', False) for r in sub)}/{len(sub)} | "
            f"{np.median(t):.2f} | {quantile(t, 0.9):.2f} | "
            f"{np.median([r['lm_calls'] for r in sub]):.0f} | "
            f"{ll.mean() if ll.size else float('nan'):.2f} | "
            f"{np.median(ll) if ll.size else float('nan'):.2f} | "
            f"{fin.mean() if fin.size else float('nan'):.2f} | {int((~np.isfinite(lg)).sum())} | "
            f"{np.median(d) if d.size else float('nan'):+.2f} | {int((d > 0).sum())}/{d.size} |"
        )
    lines += acc_lines
    if meta.get("pgcd_note"):
        lines += ["", meta["pgcd_note"]]
    if meta.get("note"):
        lines += ["", meta["note"]]
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    return text


# ---- accuracy vs particles

FAMILIES = {  # family -> (row-name prefix, fallback row names for M = 1 and 2)
    "gcd+smc": ("gcd+smc k=", {1: "gcd"}),
    "pgcd+smc (proposal + potential)": ("pgcd+smc k=", {1: "pgcd-prop k=1", 2: "pgcd-prop k=2"}),
    "pgcd-prop (proposal, no potential)": ("pgcd-prop k=", {}),
    "twist+smc (q ∝ p_lm·φ, P-GCD potential)": ("twist+smc k=", {}),
    "awrs-smc": ("awrs-smc k=", {}),
}


def _family_rows(by: dict, fam: str) -> dict[int, str]:
    """M -> the row name measuring family ``fam`` at M particles (measured or an identical
    fallback, see FAMILIES)."""
    pre, fb = FAMILIES[fam]
    ms = {int(n[len(pre) :]): n for n in by if n.startswith(pre)}
    for m, n in fb.items():
        if m not in ms and n in by:
            ms[m] = n
    return dict(sorted(ms.items()))


def _paired(a: dict, b: dict) -> tuple[int, float, float, float, float, int, int]:
    """Paired accuracy comparison of two {qid: correct} maps on their common questions:
    (n, acc a, acc b, difference, its standard error, a-only right, b-only right)."""
    q = sorted(set(a) & set(b))
    if not q:
        return 0, *[float("nan")] * 4, 0, 0
    x = np.array([a[i] for i in q], float)
    y = np.array([b[i] for i in q], float)
    d = x - y
    se = float(d.std(ddof=1) / np.sqrt(len(q))) if len(q) > 1 else float("nan")
    return (
        len(q),
        x.mean(),
        y.mean(),
        d.mean(),
        se,
        int(((x == 1) & (y == 0)).sum()),
        int(((x == 0) & (y == 1)).sum()),
    )


def accuracy_section(rows: list[dict], out: Path) -> list[str]:
    """The "accuracy vs particles" section (and ``<out>.png``)."""
    by: dict[str, dict] = {}
    for r in rows:
        by.setdefault(r["method"], {})[r["id"]] = bool(r.get("correct", False))
    lg: dict[str, dict] = {}
    for r in rows:
        lg.setdefault(r["method"], {})[r["id"]] = r["log_G"]
    fams = {f: _family_rows(by, f) for f in FAMILIES}
    fams = {f: ms for f, ms in fams.items() if ms}
    used = [n for ms in fams.values() for n in ms.values()] + [n for n in ("lcd", "gcd") if n in by]
    common = set.intersection(*[set(by[n]) for n in used]) if used else set()
    n = len(common)
    Ms = sorted({m for ms in fams.values() for m in ms})

    def sub(d: dict) -> dict:
        return {q: v for q, v in d.items() if q in common}

    lines = [
        "",
        "## Accuracy vs particles",
        "",
        f"Accuracy (correct / {n}) on the {n} questions every method below was run on; "
        "± = binomial standard error sqrt(p(1−p)/n).  One SMC run per question and M "
        "(seed fixed), the output one draw from the weighted ensemble.  M = 1 of gcd+smc "
        "is the `gcd` row (SMC with one GCD particle is GCD sampling: same draws, same "
        "seed; identical outputs in `bfcl_smc.md`); M ≤ 2 of pgcd+smc, when not run, is "
        "the pgcd-prop row: with ESS threshold M/2 nothing is resampled at M ≤ 2, the "
        "twist telescopes and the final draw uses the same weights (up to a constant), "
        "so the outputs are the same.",
        "",
        "| method | " + " | ".join(f"M = {m}" for m in Ms) + " |",
        "|---|" + "---:|" * len(Ms),
    ]

    def cell(name):
        v = [by[name][q] for q in common]
        p = float(np.mean(v)) if v else float("nan")
        se = np.sqrt(p * (1 - p) / max(1, len(v)))
        return f"{sum(v)} ({100 * p:.0f}% ± {100 * se:.0f})", p, se

    plot = {}
    for single in ("lcd", "gcd"):
        if single in by:
            c, p, se = cell(single)
            lines.append(f"| {single} (single sample) | {c} |" + " |" * (len(Ms) - 1))
            plot[single] = ([1], [p], [se])
    for f, ms in fams.items():
        cs = {m: cell(nm) for m, nm in ms.items()}
        lines.append(f"| {f} | " + " | ".join(cs[m][0] if m in cs else "—" for m in Ms) + " |")
        plot[f] = (list(cs), [c[1] for c in cs.values()], [c[2] for c in cs.values()])
    lines += [
        "",
        "Mean log Ĝ (finite) on the same questions:",
        "",
        "| method | " + " | ".join(f"M = {m}" for m in Ms) + " |",
        "|---|" + "---:|" * len(Ms),
    ]
    for f, ms in fams.items():
        vals = {}
        for m, nm in ms.items():
            x = np.array([lg[nm][q] for q in common])
            x = x[np.isfinite(x)]
            vals[m] = f"{x.mean():.2f}" if x.size else "—"
        lines.append(f"| {f} | " + " | ".join(vals.get(m, "—") for m in Ms) + " |")
    gc = fams.get("gcd+smc", {}).get(8)
    for fam, label in (("pgcd+smc (proposal + potential)", "P-GCD-SMC"),
                       ("twist+smc (q ∝ p_lm·φ, P-GCD potential)", "Twist-SMC (P-GCD potential)")):
        pg = fams.get(fam, {}).get(4)
        if not (pg and gc):
            continue
        k, a, b, d, se, ao, bo = _paired(sub(by[pg]), sub(by[gc]))
        met = "goal met" if a >= b else "goal not met"
        sig = (
            "the difference is within 2 standard errors of 0 (not distinguishable from noise)"
            if abs(d) < 2 * se or not np.isfinite(se)
            else "the difference exceeds 2 standard errors"
        )
        lines += [
            "",
            f"**{label} accuracy at M=4 vs GCD-SMC at M=8: {a:.1%} vs {b:.1%} "
            f"({k} paired questions) — {met}.**  Paired difference {d:+.1%} ± {se:.1%} "
            f"(standard error of the mean per-question difference); {label} right and GCD "
            f"wrong on {ao}, the reverse on {bo}: {sig}.",
        ]
    others = [
        (x, y)
        for x, y in (
            ("pgcd-prop (proposal, no potential)", "gcd+smc"),
            ("pgcd+smc (proposal + potential)", "gcd+smc"),
            ("twist+smc (q ∝ p_lm·φ, P-GCD potential)", "gcd+smc"),
            ("awrs-smc", "gcd+smc"),
        )
        if x in fams and y in fams
    ]
    rowsd = []
    for x, y in others:
        for m in sorted(set(fams[x]) & set(fams[y])):
            k, a, b, d, se, ao, bo = _paired(sub(by[fams[x][m]]), sub(by[fams[y][m]]))
            rowsd.append(
                f"| {x} vs {y} | {m} | {k} | {a:.1%} | {b:.1%} | {d:+.1%} ± {se:.1%} "
                f"| {ao} / {bo} |"
            )
    if rowsd:
        lines += [
            "",
            "Paired differences at equal M (± = standard error of the mean "
            "per-question difference):",
            "",
            "| comparison | M | questions | acc A | acc B | A − B | A-only / B-only right |",
            "|---|---:|---:|---:|---:|---:|---|",
            *rowsd,
        ]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return lines
    fig, ax = plt.subplots(figsize=(8.4, 4.2))
    for i, (name, (ms, ps, ses)) in enumerate(plot.items()):
        fmt = "s" if name in ("lcd", "gcd") else "o-"
        xs = [m * 2 ** (0.04 * (i - len(plot) / 2)) for m in ms]  # offsets: bars stay apart
        ax.errorbar(xs, ps, yerr=ses, fmt=fmt, capsize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(Ms or [1])
    ax.set_xticklabels([str(m) for m in Ms or [1]])
    ax.set_xlabel("particles M")
    ax.set_ylabel(f"accuracy (BFCL AST, n = {n})")
    ax.set_title("BFCL simple_python, SmolLM2-135M-Instruct")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    plt.close(fig)
    lines += ["", f"![accuracy vs particles]({out.name}.png)"]
    return lines


if __name__ == "__main__":
    main()
