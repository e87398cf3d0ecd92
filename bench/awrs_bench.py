"""AWRS constraint calls per token on SmolLM2 (paper 000 Fig. 3 analog).

For regexes from the AWRS pattern-matching set (``regex`` partial matching: backreferences and
lookarounds included), decode with AWRS (sequential Def. 2, one check per call) and record, per
decoding step (the EOS draw included): the number of distinct constraint checks, the exact local
Z = Σ_{v viable} p(v) (by checking the whole restricted vocabulary — token masking, measured for
comparison and for the plot only) and D_KL(p ‖ p0) = -log Z, where p = p0 1_C / Z is the locally
constrained next-token distribution.  Each regex is sampled repeatedly (restarting from the
prompt after EOS, at most ``--max-len`` tokens per sample) until it has ``--tokens`` steps.
Repeated with the model restricted to its first V ids (renormalized; ``RestrictedLM``) for each
V in ``--vocab-sizes`` to show checks per token vs V (token masking costs V checks per token).

    OMP_NUM_THREADS=1 python bench/awrs_bench.py --regexes 12 --tokens 30 \\
        --vocab-sizes 4096 16384 49152

Writes bench/results/awrs_calls.{md,json,png}.  Reads /work/shared/data/pattern_matching.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from pathlib import Path

import numpy as np
import torch
from bfcl_bench import parse_or_report, run_meta, smollm2_lm
from harness import RESULTS, SHARED, load_rows, quantile, save_rows

DATA = SHARED / "pattern_matching" / "awrs_colm2025_patterns.csv"
OUT = RESULTS
KL_BINS = [(0.0, 0.01), (0.01, 0.1), (0.1, 1.0), (1.0, 3.0), (3.0, math.inf)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--regexes", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=30,
                    help="decoding steps per regex and vocabulary size (over repeated samples)")
    ap.add_argument("--max-len", type=int, default=40, help="tokens per sample at most")
    ap.add_argument("--max-samples", type=int, default=30, help="samples per regex at most")
    ap.add_argument("--vocab-sizes", type=int, nargs="+", default=[4096, 16384, 49152])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--note", default="", help="a sentence added to the report")
    ap.add_argument("--out", default=str(OUT / "awrs_calls"))
    args = parse_or_report(ap, write_report, "OUT.md and OUT.png")
    out = Path(args.out)
    _model, tok, vocab, base = smollm2_lm(args.threads)

    import regex
    from tractable.decode.constraints import RegexConstraint
    from tractable.decode.lm import RestrictedLM
    from tractable.decode.samplers import awrs

    pats = [r["regex"] for r in csv.DictReader(DATA.open())]
    rng = np.random.default_rng(args.seed)
    chosen = []
    for i in rng.permutation(len(pats)):
        try:
            regex.compile(pats[i])
        except regex.error:
            continue
        chosen.append(pats[i])
        if len(chosen) == args.regexes:
            break
    meta = run_meta("awrs_bench.py", args, ("torch", "transformers", "regex"),
                    vocab_sizes=args.vocab_sizes, tokens=args.tokens, regexes=chosen)
    rows: list[dict] = []
    for V in args.vocab_sizes:
        lm = base if V >= vocab.size else RestrictedLM(base, list(range(V)))
        for pat in chosen:
            C = RegexConstraint(pat, vocab)
            prompt = tok.apply_chat_template(
                [{"role": "user", "content": f"Write one string that fully matches the regular "
                  f"expression {pat}. Answer with the string only."}],
                add_generation_prompt=True, tokenize=True)
            if not isinstance(prompt, list):
                prompt = list(prompt["input_ids"])
            g = np.random.default_rng(args.seed)
            steps = 0
            sample = 0
            while steps < args.tokens and sample < args.max_samples:
                st = lm.start(prompt, 1)
                cs = C.start(1)
                for t in range(args.max_len):
                    r = args.max_len - t
                    lp = lm.logprobs(st)[0].double()

                    # a fresh constraint (empty memo) for the draw and for the masking, so
                    # neither time profits from checks made at an earlier step or sample
                    Ca = RegexConstraint(pat, vocab)

                    def check(v, cs=cs, r=r, Ca=Ca):
                        return bool(Ca.check(cs, torch.tensor([0]), torch.tensor([v]), r,
                                             "lcd")[0])

                    t0 = time.perf_counter()
                    d = awrs(lp, check, rng=g)
                    dt = time.perf_counter() - t0
                    # exact local Z by token masking (every id of positive probability)
                    C = RegexConstraint(pat, vocab)
                    t0 = time.perf_counter()
                    support = torch.nonzero(torch.isfinite(lp)).view(-1)
                    ok = C.check(cs, torch.zeros(support.numel(), dtype=torch.long), support,
                                 r, "lcd")
                    z = float(torch.exp(torch.logsumexp(lp[support[ok]], 0))) if ok.any() else 0.0
                    dt_mask = time.perf_counter() - t0
                    rows.append({"vocab": V, "regex": pat, "sample": sample, "step": t,
                                 "checks": d.checks, "rejections": d.rejections, "z_hat": d.z,
                                 "z": z, "kl": -math.log(z) if z > 0 else math.inf,
                                 "viable": int(ok.sum()), "support": int(support.numel()),
                                 "token": d.token, "seconds": dt, "mask_seconds": dt_mask})
                    steps += 1
                    if d.token < 0 or d.token in vocab.eos_token_ids:
                        break
                    st = lm.advance(st, torch.tensor([d.token]))
                    cs = C.advance(cs, torch.tensor([d.token]))
                sample += 1
            sub = [r_ for r_ in rows if r_["regex"] == pat and r_["vocab"] == V]
            print(f"V={V} {pat!r}: {len(sub)} steps in {sample} samples, checks median "
                  f"{np.median([r_['checks'] for r_ in sub]):.0f}", flush=True)
        save_rows(out, meta, rows)  # after every vocabulary size: a killed run keeps its rows
    print(write_report(out))


def write_report(out: Path) -> str:
    """OUT.md and OUT.png from OUT.json."""
    meta, rows = load_rows(out)
    Vs = [V for V in meta["vocab_sizes"] if any(r["vocab"] == V for r in rows)]
    chosen = meta["regexes"]
    lines = [
        "# AWRS constraint checks per token (SmolLM2-135M-Instruct, regex partial matching)",
        "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta.get('machine_note', '')}{meta['machine']}, torch threads = "
        f"{meta.get('threads', meta.get('cpu_threads'))}, torch {meta['torch']}, transformers "
        f"{meta.get('transformers', '?')}, regex {meta.get('regex', '?')}, Python "
        f"{meta.get('python', '?')}; date {meta['date']}.  Raw rows: `{out.name}.json`.",
        "",
        f"Regexes ({len(chosen)}, drawn at random from the AWRS pattern-matching set "
        "`awrs_colm2025_patterns.csv`): " + ", ".join(f"`{p}`" for p in chosen),
        "",
        "A step = one next-token draw (the EOS draw included); each regex is sampled again "
        "from the prompt after EOS until it has the requested number of steps.  Checks = "
        "distinct constraint calls of AWRS (Def. 2) for that draw; token masking would make V "
        "(restricted vocabulary: the first V ids, renormalized).  Z = p0-mass of the viable "
        "next tokens (computed by masking, for the analysis only); D_KL(p‖p0) = −log Z.  "
        "Times: AWRS draw vs checking the whole vocabulary (the masking cost), per step.",
        "",
        "| vocabulary V | steps | checks/token median | p90 | mean | max | steps with ≤ 2 "
        "checks | steps checking all V | token masking (= V) | median D_KL(p‖p0) | AWRS "
        "ms/step median | masking ms/step median |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for V in Vs:
        sub = [r for r in rows if r["vocab"] == V]
        c = np.array([r["checks"] for r in sub])
        kl = np.array([r["kl"] for r in sub])
        lines.append(
            f"| {V} | {len(sub)} | {np.median(c):.0f} | {quantile(c, 0.9):.0f} | "
            f"{c.mean():.1f} | {c.max()} | {100 * np.mean(c <= 2):.0f}% | "
            f"{100 * np.mean(np.array([r['checks'] >= r['support'] for r in sub])):.0f}% | {V} | "
            f"{np.median(kl):.3f} | {1e3 * np.median([r['seconds'] for r in sub]):.1f} | "
            f"{1e3 * np.median([r['mask_seconds'] for r in sub]):.0f} |")
    lines += ["", "The same without the dead ends (steps where no token is viable, Z = 0: AWRS "
              "must reject every token of positive probability before it can report Ẑ = 0; the "
              "`regex` partial-match oracle over-approximates viability at incomplete UTF-8: "
              "e.g. for `\\p{Symbol}` it accepts the prefix ``b'`\\xc3'`` — a symbol then a "
              "lead byte whose completion makes two characters; found by listing the prefixes "
              "of the Z = 0 steps):", "",
              "| vocabulary V | steps with Z > 0 | checks/token median | p90 | mean | max |",
              "|---:|---:|---:|---:|---:|---:|"]
    for V in Vs:
        c = np.array([r["checks"] for r in rows if r["vocab"] == V and r["z"] > 0])
        if c.size:
            lines.append(f"| {V} | {c.size} | {np.median(c):.0f} | {quantile(c, 0.9):.0f} | "
                         f"{c.mean():.1f} | {c.max()} |")
    lines += ["", "Checks per token by D_KL(p‖p0) (all vocabulary sizes pooled; Prop. 4: the "
              "expected cost grows with D_KL, not with V):", "",
              "| D_KL(p‖p0) | steps | checks median | p90 | mean |", "|---|---:|---:|---:|---:|"]
    for lo, hi in KL_BINS:
        c = np.array([r["checks"] for r in rows if lo <= r["kl"] < hi])
        if c.size:
            lines.append(f"| [{lo:g}, {hi:g}) | {c.size} | {np.median(c):.0f} | "
                         f"{quantile(c, 0.9):.0f} | {c.mean():.1f} |")
    per = []
    for V in Vs:
        for pat in chosen:
            c = [r["checks"] for r in rows if r["vocab"] == V and r["regex"] == pat]
            if c:
                per.append((V, pat, len(c), float(np.median(c)), float(quantile(c, 0.9))))
    lines += ["", "Per regex (median / p90 checks per step):", "",
              "| regex | " + " | ".join(f"V = {V}" for V in Vs) + " |",
              "|---|" + "---:|" * len(Vs)]
    for pat in chosen:
        cells = []
        for V in Vs:
            m = [x for x in per if x[0] == V and x[1] == pat]
            cells.append(f"{m[0][3]:.0f} / {m[0][4]:.0f} ({m[0][2]} steps)" if m else "–")
        lines.append(f"| `{pat.replace('|', chr(92) + '|')}` | " + " | ".join(cells) + " |")
    lines += ["", f"Plot: `{out.name}.png` (left: checks vs D_KL(p‖p0) per step with 1/Z = "
              "e^D_KL, the expected draws of plain rejection sampling; right: median and p90 "
              "checks per token vs V, against V for token masking)."]
    if meta.get("note"):
        lines += ["", meta["note"]]
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
        for V in Vs:
            sub = [r for r in rows if r["vocab"] == V and math.isfinite(r["kl"])]
            ax[0].scatter([max(r["kl"], 1e-4) for r in sub], [r["checks"] for r in sub], s=10,
                          label=f"V={V}", alpha=0.6)
        xs = np.logspace(-4, math.log10(max(12.0, max(
            (r["kl"] for r in rows if math.isfinite(r["kl"])), default=1.0))), 100)
        ax[0].plot(xs, np.exp(xs), "k:", label="1/Z = e^D_KL")
        ax[0].set_xscale("log")
        ax[0].set_yscale("log")
        ax[0].set_xlabel("D_KL(p ‖ p0) = −log Z  (clipped at 1e-4)")
        ax[0].set_ylabel("constraint checks per token")
        ax[0].legend(fontsize=8)
        med = [np.median([r["checks"] for r in rows if r["vocab"] == V]) for V in Vs]
        p90 = [quantile([r["checks"] for r in rows if r["vocab"] == V], 0.9) for V in Vs]
        ax[1].plot(Vs, med, "o-", label="AWRS median")
        ax[1].plot(Vs, p90, "s--", label="AWRS p90")
        p90z = [quantile([r["checks"] for r in rows if r["vocab"] == V and r["z"] > 0], 0.9)
                for V in Vs]
        ax[1].plot(Vs, p90z, "^-.", label="AWRS p90, steps with Z > 0")
        ax[1].plot(Vs, Vs, "k:", label="token masking (V)")
        ax[1].set_xscale("log")
        ax[1].set_yscale("log")
        ax[1].set_xlabel("vocabulary size V")
        ax[1].set_ylabel("checks per token")
        ax[1].legend(fontsize=8)
        fig.suptitle("AWRS on SmolLM2-135M-Instruct, AWRS regex set", fontsize=10)
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"), dpi=110)
        plt.close(fig)
    except ImportError:  # pragma: no cover
        pass
    return text


if __name__ == "__main__":
    main()
