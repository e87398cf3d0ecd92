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
  HMM; skipped otherwise).

    OMP_NUM_THREADS=1 python bench/bfcl_bench.py --questions 20 --budget-slack 4 --ks 1 4 16 \
        --pgcd-ks 4 16 --hmm .cache/hmm/smollm2_n1024_t128

Budget: the shortest accepted output (in tokens) + ``--budget-slack``.  Besides validity and
time, each drawn output is scored by the unconstrained LM: ``log p_lm(x [EOS] | prompt)`` (one
extra forward pass, not timed), and SMC methods report ``log Ĝ`` (the estimate of the
constrained mass G = Σ_x P0(x) 1_C(x); every method estimates the same G per question).
Writes bench/results/bfcl_smc.{md,json}.  Reads /work/shared/data/bfcl_function_calling.
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
    return {"type": "object", "properties": {"name": {"const": fn["name"]},
                                             "arguments": bfcl_to_json_schema(fn["parameters"])},
            "required": ["name", "arguments"], "additionalProperties": False}


@torch.no_grad()
def lm_loglik(model, prompt: list[int], toks: list[int], eos: int | None) -> float:
    """``log p_lm(toks [eos] | prompt)`` under the unconstrained model (one forward pass)."""
    cont = list(toks) + ([eos] if eos is not None else [])
    if not cont:
        return 0.0
    ids = torch.tensor([list(prompt) + cont])
    logits = model(ids).logits[0, len(prompt) - 1:-1].double()
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
    ap.add_argument("--report-only", action="store_true",
                    help=f"re-render {renders} from OUT.json and exit")
    args = ap.parse_args()
    if args.report_only:
        print(write_report(Path(args.out)))
        raise SystemExit(0)
    return args


def run_meta(script: str, args: argparse.Namespace, packages=("torch", "transformers"),
             **extra) -> dict:
    """The ``meta`` of a result file: date, machine, versions (python and ``packages`` as
    top-level keys), torch threads, note and the command with every option spelled out
    (:func:`harness.command_line`)."""
    return {"date": utc_now(), "machine": machine(),
            "machine_note": "shared machine (other jobs running), ", "threads": args.threads,
            **versions(*packages), "note": args.note,
            "command": command_line(script, args, ("out", "note", "report_only")), **extra}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--budget-slack", type=int, default=4)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--awrs-k", type=int, default=4)
    ap.add_argument("--pgcd-ks", type=int, nargs="+", default=[4])
    ap.add_argument("--pgcd-w", type=float, default=0.5, help="P-GCD proposal weight w")
    ap.add_argument("--methods", nargs="+",
                    default=["lcd", "gcd", "gcd+smc", "awrs-smc", "pgcd+smc"])
    ap.add_argument("--hmm", default=None,
                    help="folder of a distilled HMM (HMM.save), or a distill output folder "
                         "holding it under hmm/")
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
    qs = [json.loads(line) for line in DATA.open()]
    rows: list[dict] = []
    skipped: list[str] = []
    meta = run_meta("bfcl_bench.py", args, budget_slack=args.budget_slack, skipped=skipped)
    if hmm is None and "pgcd+smc" in args.methods:
        meta["pgcd_note"] = "P-GCD+SMC: not run (no distilled HMM given; pass `--hmm DIR`)."
    elif hmm is not None:
        meta["pgcd_note"] = (f"P-GCD: HMM H = {hmm.hidden_size} distilled from SmolLM2 "
                             f"(`{args.hmm}`), proposal q ∝ p_lm^w p_hmm(·|x, C)^(1−w) with "
                             f"w = {args.pgcd_w} over the GCD mask, potential "
                             "p_hmm(x|C)/p_hmm(x) (paper 002 §4.3).")
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
        msg = (q["question"][0][0]["content"] + "\nAnswer with a JSON object {\"name\": ..., "
               "\"arguments\": {...}} calling this function: " + json.dumps(fn))
        prompt = tok.apply_chat_template([{"role": "user", "content": msg}],
                                         add_generation_prompt=True, tokenize=True)
        if not isinstance(prompt, list):
            prompt = list(prompt["input_ids"])
        plan = []
        for m in args.methods:
            if m in ("lcd", "gcd"):
                plan.append((m, m, 1, 0.0, None))
            elif m == "gcd+smc":
                plan += [(f"gcd+smc k={k}", "gcd", k, 0.5, None) for k in args.ks]
            elif m == "awrs-smc":
                plan.append((f"awrs-smc k={args.awrs_k}", "awrs", args.awrs_k, 0.5, None))
            elif m == "pgcd+smc" and hmm is not None:
                plan += [(f"pgcd+smc k={k}", "pgcd", k, 0.5, "pgcd") for k in args.pgcd_ks]
        for name, prop, k, tau, pot in plan:
            t0 = time.perf_counter()
            setup = 0.0
            if pot == "pgcd":  # the product's backward pass is part of the cost of a sample
                from tractable.hmm.pgcd import PGCD

                pot = PGCD(A, hmm, N, w=args.pgcd_w)
                setup = time.perf_counter() - t0
            s = SMC(lm, C, proposal=prop, potential=pot, max_new_tokens=N, ess_threshold=tau)
            res = s.run(prompt, k, seed=args.seed)
            dt = time.perf_counter() - t0
            toks = res.sample_tokens if res.sample >= 0 else res.particles[0]
            valid = bool(A.accepts(toks)) and (res.sample >= 0)
            eos = bool(res.eos[res.sample]) if res.sample >= 0 else False
            text = tok.decode(toks)
            ll = lm_loglik(model, prompt, toks, vocab.eos_token_ids[0] if eos else None)
            rows.append({"id": q["id"], "method": name, "k": k, "budget": N, "valid": valid,
                         "seconds": dt, "setup_seconds": setup, "log_G": res.log_G,
                         "lm_loglik": ll, "tokens": len(toks), "eos": eos,
                         "lm_calls": res.stats["lm_calls"],
                         "checks": res.stats["constraint_checks"],
                         "resampling_steps": res.stats["resampling_steps"], "text": text})
            print(f"{q['id']} N={N} {name:14s} valid={valid} {dt:6.1f}s logG={res.log_G:8.2f} "
                  f"ll={ll:8.2f} {text!r}", flush=True)
        save_rows(out, meta, rows)  # after every question: a killed run keeps its rows
    save_rows(out, meta, rows)  # the questions skipped after the last one run
    print(write_report(out))


def write_report(out: Path) -> str:
    """bench/results/<out>.md from <out>.json (``--report-only`` re-renders it)."""
    meta, rows = load_rows(out)
    qids = list(dict.fromkeys(r["id"] for r in rows))
    lines = ["# BFCL function calls on SmolLM2-135M-Instruct at a tight budget", "",
             f"Command: `{meta['command']}`  ",
             f"Machine: {meta.get('machine_note', '')}{meta['machine']}, torch threads = "
             f"{meta['threads']}, torch {meta['torch']}, transformers "
             f"{meta.get('transformers', '?')}, Python {meta.get('python', '?')}; SmolLM2-135M-"
             f"Instruct (float32); date {meta['date']}.  Raw rows: `{out.name}.json`.", "",
             f"{len(qids)} BFCL v4 `simple_python` questions (the first ones whose schema "
             f"compiles; skipped: {', '.join(meta.get('skipped', [])) or 'none'}).  Budget N = "
             f"shortest accepted output + {meta.get('budget_slack', '?')} tokens (EOS "
             "included); budgets: median "
             f"{np.median([r['budget'] for r in rows]):.0f}, range "
             f"{min(r['budget'] for r in rows)}–{max(r['budget'] for r in rows)}.  One output "
             "per method and question (SMC: one draw from its weighted ensemble; a run whose "
             "particles all died has no output and counts as invalid).  Validity = the output "
             "is accepted by the schema's automaton.  Time = the whole run that produced the "
             "output (P-GCD: including the product's backward pass).", "",
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
             "question (paired; finite estimates only).", "",
             "| method | outputs | valid | time/sample median (s) | p90 (s) | forward passes "
             "median | mean log p_lm (valid) | median log p_lm | mean log Ĝ (finite) | Ĝ = 0 | "
             "log Ĝ − log Ĝ_gcd: paired median | > gcd |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base = {r["id"]: r["log_G"] for r in rows if r["method"] == "gcd"}
    for name in dict.fromkeys(r["method"] for r in rows):
        sub = [r for r in rows if r["method"] == name]
        t = np.array([r["seconds"] for r in sub])
        ll = np.array([r["lm_loglik"] for r in sub if r["valid"]])
        lg = np.array([r["log_G"] for r in sub])
        fin = lg[np.isfinite(lg)]
        d = np.array([r["log_G"] - base[r["id"]] for r in sub
                      if r["id"] in base and np.isfinite(r["log_G"])])
        lines.append(
            f"| {name} | {len(sub)} | {sum(r['valid'] for r in sub)}/{len(sub)} | "
            f"{np.median(t):.2f} | {quantile(t, 0.9):.2f} | "
            f"{np.median([r['lm_calls'] for r in sub]):.0f} | "
            f"{ll.mean() if ll.size else float('nan'):.2f} | "
            f"{np.median(ll) if ll.size else float('nan'):.2f} | "
            f"{fin.mean() if fin.size else float('nan'):.2f} | {int((~np.isfinite(lg)).sum())} | "
            f"{np.median(d) if d.size else float('nan'):+.2f} | {int((d > 0).sum())}/{d.size} |")
    if meta.get("pgcd_note"):
        lines += ["", meta["pgcd_note"]]
    if meta.get("note"):
        lines += ["", meta["note"]]
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    return text

if __name__ == "__main__":
    main()
