"""ASAp vs GCD vs CARS on SyGuS grammar tasks (paper 003 §4, SLIA / INV-BV4 in shape) with
SmolLM2-135M-Instruct.

    OMP_NUM_THREADS=1 .venv/bin/python bench/asap_bench.py   # -> results/asap_grammar_tasks.*

For each task of ``../shared/data/cars_grammar_tasks`` named in ``--tasks``:

* prompt: the task file's instruction header, its first in-context example and its last question
  (one-shot: the file's three examples would make every decoding step ~2× dearer on CPU; with
  none, SmolLM2 puts Z ≈ e^-43 on the grammar and the comparison says little), ending in
  "Solution:";
* constraint: the task's grammar compiled to a token automaton with the ``under`` approximation
  (nesting depth <= ``--depth``: every accepted string is grammatical) and GCD's budget-aware mask
  at ``--budget`` tokens (EOS included).  L is that language; targets are P(x | L);
* GCD: ancestral sampling from the masked LM (= ASAp with its trie frozen empty);
* ASAp (:class:`tractable.decode.asap.ASAp`): ``--samples`` outputs in batches of ``--batch``;
* CARS (:class:`tractable.decode.cars.CARS`): exact samples of P(x | L) within ``--cars-seconds``.

Measures, per output x drawn from the sampler's current Q̃ (log Q̃(x) is known exactly):

* the paper's KL(Q̃ ‖ P) = E_Q̃[log Q̃(x) − log P(x)] = KL(Q̃ ‖ P(· | L)) − log Z, estimated on a
  sliding window of outputs; its floor is −log Z;
* Ẑ = mean of P(x) / Q̃(x) over all GCD and ASAp outputs (unbiased: every Q̃ covers L), giving
  KL(Q̃ ‖ P(· | L)) ≈ window mean + log Ẑ;
* the expected log-likelihood E[log P(x)] (window mean), whose target E_{P(·|L)}[log P(x)] is the
  mean over CARS's exact samples.

A control on an enumerable real-LM task (SmolLM2 over its full vocabulary, the regex task of
tests/decode/test_smc_real.py) gives the same comparison exactly: KL(Q̃_S ‖ P(· | L)) of ASAp's
current sampling distribution after m samples (by enumeration), GCD's fixed KL, and the upper
bounds on Z
that ASAp (c̃_S(ε)) and CARS (p_ε) hold.  ``--control-only`` reruns just the control and keeps the
grammar rows of an earlier run's JSON.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from harness import (
    RESULTS,
    SHARED,
    command_line,
    load_json,
    machine,
    save_json,
    utc_now,
    versions,
)

DATA = SHARED / "cars_grammar_tasks"
OUT = RESULTS
NAME = "asap_grammar_tasks"

DEFAULT_TASKS = ["BV4/find_inv_bvsge_bvneg_4bit", "SLIA/lastname"]


def few_shot_prompt(text: str, shots: int = 1) -> str:
    """The instruction header, the first ``shots`` examples and the last question of a task."""
    head, *examples, last = text.split("Question:")
    return head + "".join("Question:" + e for e in examples[:shots]) + "Question:" + last


def window_means(x: np.ndarray, w: int) -> list[float]:
    """Mean of x[i:i+w] for i = 0, w/2, ... (the paper's sliding window)."""
    step = max(w // 2, 1)
    return [float(x[i:i + w].mean()) for i in range(0, max(len(x) - w, 0) + 1, step)]


def run_task(task: str, model, tok, vocab, args) -> dict:
    from tractable.decode.asap import ASAp
    from tractable.decode.cars import CARS
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.decode.lm import HFCausalLM

    from tractable.grammar import compile_grammar

    grammar = (DATA / f"{task}.ebnf").read_text()
    prompt = few_shot_prompt((DATA / f"{task}.txt").read_text(), args.shots)
    ids = tok(prompt)["input_ids"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the depth cut of the under-approximation warns
        A = compile_grammar(grammar, vocab, approximation="under", max_depth=args.depth)
    C = AutomatonConstraint(A)
    N = args.budget
    need = C.min_tokens_to_accept() + 1
    if N < need:
        raise SystemExit(f"{task}: budget {N} < {need} tokens needed")
    lm = HFCausalLM(model, tok, eos_token_ids=vocab.eos_token_ids)
    row: dict = {"task": task, "prompt_tokens": len(ids), "budget": N, "depth": args.depth,
                 "automaton_states": int(A.num_states), "min_tokens": need}

    def run_asap(frozen: bool, n: int, seed: int) -> dict:
        s = ASAp(lm, C, ids, max_new_tokens=N, batch_size=args.batch, seed=seed)
        if frozen:
            s.freeze()
        t0 = time.perf_counter()
        draws = s.draw(n)
        return {"logp": [d.logp for d in draws], "logq": [d.logq for d in draws],
                "seconds": time.perf_counter() - t0, "trie_nodes": s.trie_nodes,
                "stats": {k: v for k, v in s.stats.items()},
                "examples": [tok.decode(d.tokens) for d in draws[-3:]],
                "distinct": len({tuple(d.tokens) for d in draws})}

    row["gcd"] = run_asap(True, args.gcd_samples, 1)
    print(f"  gcd   {row['gcd']['seconds']:.0f} s", flush=True)
    row["asap"] = run_asap(False, args.samples, 2)
    print(f"  asap  {row['asap']['seconds']:.0f} s, trie {row['asap']['trie_nodes']}", flush=True)

    c = CARS(lm, C, ids, max_new_tokens=N, batch_size=args.batch, seed=3)
    t0 = time.perf_counter()
    cars_logp: list[float] = []
    bounds: list[float] = []
    while time.perf_counter() - t0 < args.cars_seconds and len(cars_logp) < args.samples:
        try:
            x = c.sample(1, max_attempts=args.batch * 4)[0]
        except RuntimeError:  # no valid attempt in this round (W still grew), or W covers all
            if c.acceptance_bound <= 0:
                break
            continue
        cars_logp.append(_logp(lm, ids, x))
        bounds.append(c.acceptance_bound)
    row["cars"] = {"samples": len(cars_logp), "logp": cars_logp, "bounds": bounds,
                   "attempts": c.stats["attempts"], "seconds": time.perf_counter() - t0,
                   "trie_nodes": c.stats["trie_nodes"]}
    print(f"  cars  {len(cars_logp)} samples, {c.stats['attempts']} attempts", flush=True)

    lp = np.array(row["gcd"]["logp"] + row["asap"]["logp"])
    lq = np.array(row["gcd"]["logq"] + row["asap"]["logq"])
    w = lp - lq
    m = w.max()
    row["log_Z_hat"] = float(m + math.log(np.exp(w - m).mean()))
    for k in ("gcd", "asap"):
        d = np.array(row[k]["logq"]) - np.array(row[k]["logp"])
        row[k]["kl_window"] = window_means(d, args.window)
        row[k]["loglik_window"] = window_means(np.array(row[k]["logp"]), args.window)
        row[k]["kl_first"] = float(d[: args.window].mean()) + row["log_Z_hat"]
        row[k]["kl_last"] = float(d[-args.window:].mean()) + row["log_Z_hat"]
        row[k]["loglik_last"] = float(np.mean(row[k]["logp"][-args.window:]))
    if cars_logp:
        row["cars"]["loglik_mean"] = float(np.mean(cars_logp))
    return row


def _logp(lm, ids, x) -> float:
    """log P(x EOS) under the LM (CARS returns tokens only)."""
    st = lm.start(ids, 1)
    total = 0.0
    for a in list(x) + [lm.eos]:
        lp = lm.logprobs(st)[0].double()
        total += float(lp[a])
        if a == lm.eos:
            break
        st = lm.advance(st, torch.tensor([a]))
    return total


CONTROL_PROMPT = "Is the sky blue? Answer with one word: yes, no or maybe."
CONTROL_PATTERN = r"(Yes|No|Maybe)\.?"
CONTROL_BUDGET = 7
CONTROL_CHECKPOINTS = [0, 1, 2, 5, 10, 20, 50, 100, 200, 400, 800]


class _Rows:
    def __init__(self, prefixes):
        self.prefixes = prefixes

    @property
    def batch_size(self):
        return len(self.prefixes)

    def select(self, idx):
        return _Rows([self.prefixes[int(i)] for i in idx.tolist()])


def _table_lm(table: dict, V: int, eos: tuple):
    """The LM rows recorded while enumerating, served as an LM (EOS-only rows after EOS)."""
    from tractable.decode.lm import LanguageModel

    class TableRows(LanguageModel):
        def __init__(self):
            self.vocab_size, self.eos_token_ids, self.calls, self.rows = V, eos, 0, 0
            self.eos_row = torch.full((V,), -math.inf)
            self.eos_row[eos[0]] = 0.0

        def start(self, prompt_ids, batch_size=1):
            return _Rows([()] * batch_size)

        def logprobs(self, st):
            self.calls += 1
            self.rows += st.batch_size
            return torch.stack([table.get(p, self.eos_row) for p in st.prefixes])

        def advance(self, st, tokens):
            return _Rows([p + (int(t),) for p, t in zip(st.prefixes, tokens.tolist())])

    return TableRows()


def run_control(model, tok, vocab, args) -> dict:
    """An enumerable real-LM task (SmolLM2, full vocabulary, the regex task of
    tests/decode/test_smc_real.py): exact KL(Q̃_S ‖ P(· | L)) of ASAp's current sampling distribution
    after m samples, GCD's, and the upper bounds c̃_S(ε) (ASAp) and p_ε (CARS) against Z."""
    from tractable.decode.asap import ASAp
    from tractable.decode.cars import CARS
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.decode.lm import HFCausalLM, LanguageModel
    from tractable.fsa.regex import compile_regex

    from tractable.testing.samplers import enumerate_posterior, kl_divergence

    class Recorder(LanguageModel):
        def __init__(self, base):
            self.base, self.table = base, {}
            self.vocab_size, self.eos_token_ids = base.vocab_size, base.eos_token_ids

        def start(self, prompt_ids, batch_size=1):
            return self.base.start(prompt_ids, batch_size)

        def logprobs(self, st):
            lp = self.base.logprobs(st)
            for p, r in zip(st.prefixes, lp):
                self.table[tuple(p)] = r.clone()
            return lp

        def advance(self, st, tokens):
            return self.base.advance(st, tokens)

    t0 = time.perf_counter()
    C = AutomatonConstraint(compile_regex(CONTROL_PATTERN, vocab))
    ids = tok.apply_chat_template([{"role": "user", "content": CONTROL_PROMPT}],
                                  add_generation_prompt=True, tokenize=True)
    ids = list(ids) if isinstance(ids, list) else list(ids["input_ids"])
    rec = Recorder(HFCausalLM(model, tok, eos_token_ids=vocab.eos_token_ids))
    N = CONTROL_BUDGET
    post, G = enumerate_posterior(rec, C, ids, N, prune=True)
    lm = _table_lm(rec.table, vocab.size, tuple(vocab.eos_token_ids))

    def kl(q):
        v = {k: p for k, p in q.items() if not (k and k[0] == "invalid")}
        z = sum(v.values())
        return kl_divergence({k: p / z for k, p in v.items()}, post)

    gcd = kl(ASAp(lm, C, ids, max_new_tokens=N).distribution())
    curve = []
    for seed in range(args.control_seeds):
        a = ASAp(lm, C, ids, max_new_tokens=N, seed=seed)
        c = CARS(lm, C, ids, max_new_tokens=N, seed=seed)
        pts = []
        for m in CONTROL_CHECKPOINTS:
            if m:
                a.sample(m - a.stats["samples"])
                c.sample(m - c.stats["valid"])
            pts.append({"m": m, "kl_asap": kl(a.distribution()), "efg_root": a.root.value,
                        "cars_bound": c.acceptance_bound, "cars_attempts": c.stats["attempts"]})
        curve.append(pts)
    return {"task": "SmolLM2 full vocabulary, " + CONTROL_PATTERN, "prompt": CONTROL_PROMPT,
            "budget": N, "outputs": len(post), "Z": G, "kl_gcd": gcd, "seeds": curve,
            "seconds": time.perf_counter() - t0}


def plot(rows: list[dict], window: int, path: Path, control: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = len(rows) + (control is not None)
    fig, axes = plt.subplots(2, cols, figsize=(4.5 * cols, 7), squeeze=False)
    if control is not None:
        ax, bx = axes[0, -1], axes[1, -1]
        for i, pts in enumerate(control["seeds"]):
            m = [max(p["m"], 0.5) for p in pts]
            ax.plot(m, [max(p["kl_asap"], 1e-6) for p in pts], color="tab:blue", marker=".",
                    alpha=0.7, label="ASAp (exact Q̃_S)" if i == 0 else None)
            bx.plot(m, [p["efg_root"] for p in pts], color="tab:blue", marker=".", alpha=0.7,
                    label="ASAp c̃_S(ε)" if i == 0 else None)
            bx.plot(m, [p["cars_bound"] for p in pts], color="tab:green", marker=".",
                    alpha=0.7, label="CARS p_ε" if i == 0 else None)
        ax.axhline(control["kl_gcd"], color="tab:red", label="GCD")
        ax.axhline(1e-6, color="tab:green", ls=":", label="CARS (exact: 0)")
        ax.set(xscale="log", yscale="log", xlabel="samples (0 plotted at 0.5)",
               ylabel="KL(Q̃ ‖ P(·|L)), exact")
        ax.set_title("control: SmolLM2, (Yes|No|Maybe)\\.?, enumerable", fontsize=9)
        ax.legend(fontsize=7)
        bx.axhline(control["Z"], color="k", ls="--", label="Z (enumerated)")
        bx.set(xscale="log", yscale="log", xlabel="samples", ylabel="upper bound on Z")
        bx.legend(fontsize=7)
    for j, r in enumerate(rows):
        ax = axes[0, j]
        for k, col in (("gcd", "tab:red"), ("asap", "tab:blue")):
            y = r[k]["kl_window"]
            x = [i * max(window // 2, 1) + window for i in range(len(y))]
            ax.plot(x, y, color=col, marker=".", label=k.upper())
        ax.axhline(-r["log_Z_hat"], color="k", ls="--", lw=1, label="−log Ẑ (floor)")
        ax.set_title(r["task"].split("/")[-1], fontsize=9)
        ax.set_xlabel("samples")
        if j == 0:
            ax.set_ylabel(f"KL(Q̃‖P), window {window}")
        ax.legend(fontsize=7)
        ax = axes[1, j]
        for k, col in (("gcd", "tab:red"), ("asap", "tab:blue")):
            y = r[k]["loglik_window"]
            x = [i * max(window // 2, 1) + window for i in range(len(y))]
            ax.plot(x, y, color=col, marker=".", label=k.upper())
        if r["cars"].get("loglik_mean") is not None:
            ax.axhline(r["cars"]["loglik_mean"], color="tab:green", ls="--",
                       label=f"CARS (exact, n={r['cars']['samples']})")
        ax.set_xlabel("samples")
        if j == 0:
            ax.set_ylabel("E[log P(x)], window")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="*", default=DEFAULT_TASKS)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--gcd-samples", type=int, default=100)
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--shots", type=int, default=1)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument("--cars-seconds", type=float, default=60.0)
    ap.add_argument("--control-seeds", type=int, default=3)
    ap.add_argument("--control-only", action="store_true",
                    help="run only the enumerable control; keep the grammar rows of --out.json")
    ap.add_argument("--report-only", action="store_true",
                    help="only rewrite the .md and .png from --out.json")
    ap.add_argument("--out", default=str(OUT / NAME))
    args = ap.parse_args()
    torch.set_num_threads(1)
    from tractable import __version__
    from tractable.models import load_smollm2, smollm2_vocabulary

    t_all = time.perf_counter()
    out = Path(args.out)
    if args.report_only:  # rewrite .md and .png from the JSON (after editing this script)
        old = load_json(out.with_suffix(".json"))
        oargs = argparse.Namespace(**old["args"])
        plot(old["rows"], oargs.window, out.with_suffix(".png"), old.get("control"))
        out.with_suffix(".md").write_text(
            report(old["rows"], oargs, __version__, old["seconds"], old.get("control")))
        return
    model, tok = load_smollm2()
    vocab = smollm2_vocabulary(tok, model)
    if args.control_only:
        old = load_json(out.with_suffix(".json"))
        rows, seconds = old["rows"], old["seconds"]
        gargs = argparse.Namespace(**{**old["args"], **{
            k: v for k, v in vars(args).items() if k in ("control_seeds", "control_only")}})
    else:
        rows, gargs = [], args
        for task in args.tasks:
            print(task, flush=True)
            rows.append(run_task(task, model, tok, vocab, args))
        seconds = time.perf_counter() - t_all
    print("control", flush=True)
    control = run_control(model, tok, vocab, args)
    res = {"args": vars(gargs), "rows": rows, "seconds": seconds, "control": control}
    save_json(out.with_suffix(".json"), res)
    plot(rows, gargs.window, out.with_suffix(".png"), control)
    out.with_suffix(".md").write_text(report(rows, gargs, __version__, seconds, control))
    print(out.with_suffix(".md").read_text())


def _control_sentence(control: dict) -> str:
    med = [float(np.median([pts[j]["kl_asap"] for pts in control["seeds"]]))
           for j in range(len(CONTROL_CHECKPOINTS))]
    early = [k for m, k in zip(CONTROL_CHECKPOINTS, med) if 0 < m <= 20]
    return (f"; in the control ASAp's exact KL is {min(early):.2f}–{max(early):.2f} for "
            f"1–20 samples against GCD's {control['kl_gcd']:.2f}, then falls to "
            f"{med[-1]:.4f} at {CONTROL_CHECKPOINTS[-1]} (medians over seeds).")


def report(rows, args, version, seconds, control: dict | None = None) -> str:
    ver = versions("torch", "transformers")
    cmd = command_line("asap_bench.py", args,
                       ("out", "control_seeds", "control_only", "report_only"),
                       prefix="OMP_NUM_THREADS=1 .venv/bin/python")
    lines = [
        "# ASAp vs GCD vs CARS on SyGuS grammar tasks (SmolLM2-135M-Instruct)", "",
        f"- command: `{cmd}`",
        *([f"- control: `{cmd.split(' --')[0]} --control-only --control-seeds "
           f"{args.control_seeds}` (reuses the grammar rows of the run above)"]
          if getattr(args, "control_only", False) else []),
        f"- machine: {machine(1)}, shared box; grammar tasks {seconds:.0f} s wall (load average "
        "9–12 from other jobs during the run: ~2.5× slower than a quiet box, where one output of "
        "a batch of 10 took ~1.4 s with the 904-token prompt)",
        f"- versions: tractable {version}, torch {ver['torch']}, "
        f"transformers {ver['transformers']}, Python {ver['python']}",
        f"- date: {utc_now()}", "",
        "Paper 003 §4 in shape: for each task, GCD and ASAp outputs x with their exact sampling "
        "probability Q̃(x) and LM probability P(x).  `KL(Q̃‖P)` is the paper's measure "
        "E_Q̃[log Q̃ − log P] = KL(Q̃‖P(·|L)) − log Z (window of "
        f"{args.window} outputs); `KL to P(·|L)` adds log Ẑ, with Ẑ the importance-sampling "
        "estimate of Z = P(L) from all GCD and ASAp outputs (unbiased).  `E log P` is the "
        "expected log-likelihood of the outputs (last window); CARS's exact samples give the "
        "target.  The constraint is the grammar's `under` approximation (nesting depth "
        f"≤ {args.depth}) at a budget of {args.budget} tokens, EOS included; prompts are "
        f"{args.shots}-shot (the header, the first {args.shots} example(s) and the last "
        "question of each task file).", "",
        "| task | prompt tok | −log Ẑ | GCD KL to P(·\\|L) | ASAp KL first → last window | "
        "GCD E log P | ASAp E log P (last) | CARS E log P (n) | ASAp trie nodes | "
        "s GCD / ASAp / CARS |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        g, a, c = r["gcd"], r["asap"], r["cars"]
        cl = f"{c['loglik_mean']:.2f} ({c['samples']})" if c.get("loglik_mean") is not None \
            else f"— (0 in {c['attempts']} attempts)"
        lines.append(
            f"| {r['task']} | {r['prompt_tokens']} | {-r['log_Z_hat']:.2f} | "
            f"{np.mean([g['kl_first'], g['kl_last']]):.3f} | "
            f"{a['kl_first']:.3f} → {a['kl_last']:.3f} | {np.mean(g['logp']):.2f} | "
            f"{a['loglik_last']:.2f} | {cl} | {a['trie_nodes']} | "
            f"{g['seconds']:.0f} / {a['seconds']:.0f} / {c['seconds']:.0f} |")
    if control is not None:
        k = len(control["seeds"])
        lines += [
            "", "## Control: an enumerable real-LM task", "",
            f"{control['task']}, chat prompt \"{control['prompt']}\", budget "
            f"{control['budget']}: {control['outputs']} valid outputs, Z = {control['Z']:.4f}, "
            "all enumerated with SmolLM2 (rows recorded once, then served from that table; "
            f"{control['seconds']:.0f} s with {k} seeds).  KL(Q̃_S ‖ P(·|L)) of ASAp's *current* "
            "sampling distribution is computed exactly from its trie by enumeration "
            "(`ASAp.distribution`); CARS's samples are exact (KL 0) and its cost is attempts. "
            f"GCD's KL is fixed: **{control['kl_gcd']:.4f}**.  Medians over seeds:", "",
            "| samples m | ASAp KL (exact) | ASAp c̃_S(ε) | CARS p_ε | CARS attempts |",
            "|---|---|---|---|---|"]
        for j, m in enumerate(CONTROL_CHECKPOINTS):
            col = [pts[j] for pts in control["seeds"]]
            med = {q: float(np.median([p[q] for p in col]))
                   for q in ("kl_asap", "efg_root", "cars_bound", "cars_attempts")}
            lines.append(f"| {m} | {med['kl_asap']:.4g} | {med['efg_root']:.4f} | "
                         f"{med['cars_bound']:.4f} | {med['cars_attempts']:.0f} |")
    lines += ["", "## Observations", ""]
    for r in rows:
        g, a, c = r["gcd"], r["asap"], r["cars"]
        lines.append(
            f"- {r['task']}: over its {len(a['logp'])} samples ASAp's window estimate of "
            f"KL(Q̃‖P) goes {a['kl_window'][0]:.1f} → {a['kl_window'][-1]:.1f} while GCD's stays "
            f"at {min(g['kl_window']):.1f}–{max(g['kl_window']):.1f} (floor −log Ẑ = "
            f"{-r['log_Z_hat']:.1f}); the mean log-likelihood of ASAp's outputs goes "
            f"{a['loglik_window'][0]:.1f} → {a['loglik_window'][-1]:.1f} (GCD "
            f"{np.mean(g['logp']):.1f}); ASAp drew {a['distinct']} distinct outputs of "
            f"{len(a['logp'])}, GCD {g['distinct']} of {len(g['logp'])}.  CARS returned "
            f"{c['samples']} exact samples in {c['attempts']} attempts ({c['seconds']:.0f} s).")
    behind = [r["task"].split("/")[-1] for r in rows
              if r["asap"]["kl_window"][-1] > min(r["gcd"]["kl_window"])]
    ahead = [r["task"].split("/")[-1] for r in rows
             if r["task"].split("/")[-1] not in behind]
    worse0 = [r["task"].split("/")[-1] for r in rows
              if r["asap"]["kl_window"][0] > r["gcd"]["kl_window"][0]]
    lines += [
        f"- ASAp's first window is worse than GCD's on {', '.join(worse0) or 'no task'}; by its "
        f"last window it is still behind GCD's best window on {', '.join(behind) or 'none'} "
        f"and ahead of it on {', '.join(ahead) or 'none'}.  The control shows why ASAp can "
        "start worse, exactly: once a prefix has been sampled its c̃_S falls towards the true "
        "(small) expected future grammaticality, while every unexplored sibling keeps "
        "c̃_S = 1, so Q̃_S first moves mass to unexplored, low-probability prefixes (on the "
        "grammar tasks ASAp draws far more distinct outputs than GCD, above)"
        + (_control_sentence(control) if control is not None else ".")
        + "  Paper 003 itself reports slow convergence on some tasks (§4, Discussion).",
    ]
    zero = [r for r in rows if r["cars"]["samples"] == 0]
    if zero:
        lines.append(
            f"- CARS obtained no exact sample within its time box on {len(zero)} of {len(rows)} "
            f"grammar task(s): Z ≈ e^-{min(-r['log_Z_hat'] for r in zero):.0f} to "
            f"e^-{max(-r['log_Z_hat'] for r in zero):.0f} here and an attempt costs up to the "
            "whole budget of forward passes.")
    lines += ["", f"![KL and log-likelihood vs samples]({NAME}.png)", "",
              "Last outputs of ASAp per task:", ""]
    for r in rows:
        for e in r["asap"]["examples"]:
            lines.append(f"- {r['task']}: `{e}`")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
