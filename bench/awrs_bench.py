"""AWRS constraint calls per token on SmolLM2 (paper 000 Fig. 3 analog).

For regexes from the AWRS pattern-matching set (``regex`` partial matching: backreferences and
lookarounds included), decode with AWRS (sequential Def. 2, one check per call) and record, per
generated token: the number of constraint checks, the exact local Z (by masking the whole
restricted vocabulary — only for the plot) and D_KL(p ‖ p0) = -log Z.  Repeated with the model
restricted to its first V' ids (V' = vocabulary size) to show calls per token vs V (token masking
costs V' checks per token).

    python bench/awrs_bench.py --regexes 6 --tokens 12 --vocab-sizes 1024 8192 49152

Writes bench/results/awrs_calls.{md,json,png}.  Reads /work/shared/data/pattern_matching.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import platform
import time
from pathlib import Path

import numpy as np
import torch

DATA = Path("/work/shared/data/pattern_matching/awrs_colm2025_patterns.csv")
OUT = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--regexes", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=12, help="tokens decoded per regex")
    ap.add_argument("--vocab-sizes", type=int, nargs="+", default=[1024, 8192, 49152])
    ap.add_argument("--exact-z", action="store_true", default=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT / "awrs_calls"))
    args = ap.parse_args()

    import regex
    from tractable.decode.constraints import RegexConstraint
    from tractable.decode.lm import HFCausalLM, RestrictedLM
    from tractable.decode.samplers import awrs

    from tractable.models import load_smollm2, smollm2_vocabulary

    torch.set_num_threads(2)
    model, tok = load_smollm2()
    vocab = smollm2_vocabulary(tok, model)
    base = HFCausalLM(model, tok, eos_token_ids=vocab.eos_token_ids)
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
    rows = []
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
            st = lm.start(prompt, 1)
            cs = C.start(1)
            g = np.random.default_rng(args.seed)
            for t in range(args.tokens):
                r = args.tokens - t + 1
                lp = lm.logprobs(st)[0].double()

                def check(v, cs=cs, r=r, C=C):
                    return bool(C.check(cs, torch.tensor([0]), torch.tensor([v]), r, "lcd")[0])

                t0 = time.perf_counter()
                d = awrs(lp, check, rng=g)
                dt = time.perf_counter() - t0
                z = math.nan
                if args.exact_z:
                    support = torch.nonzero(torch.isfinite(lp)).view(-1)
                    ok = C.check(cs, torch.zeros(support.numel(), dtype=torch.long), support,
                                 r, "lcd")
                    z = float(torch.exp(torch.logsumexp(lp[support[ok]], 0))) if ok.any() else 0.0
                rows.append({"vocab": V, "regex": pat, "step": t, "checks": d.checks,
                             "rejections": d.rejections, "z_hat": d.z, "z": z,
                             "kl": -math.log(z) if z > 0 else math.inf, "seconds": dt})
                if d.token < 0 or d.token in vocab.eos_token_ids:
                    break
                st = lm.advance(st, torch.tensor([d.token]))
                cs = C.advance(cs, torch.tensor([d.token]))
            print(V, pat, sum(1 for r_ in rows if r_["regex"] == pat and r_["vocab"] == V),
                  "tokens", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": datetime.date.today().isoformat(), "machine": platform.platform(),
            "cpu_threads": torch.get_num_threads(), "torch": torch.__version__,
            "command": "python bench/awrs_bench.py " + " ".join(
                f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                for k, v in vars(args).items() if k not in ("out", "exact_z")),
            "regexes": chosen}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = [
        "# AWRS constraint checks per token (SmolLM2-135M-Instruct, regex partial matching)",
        "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta['machine']}, {meta['cpu_threads']} threads, torch {meta['torch']}; "
        f"date {meta['date']}.  Raw rows: `awrs_calls.json`.",
        "",
        f"Regexes ({len(chosen)}, from the AWRS pattern-matching set): "
        + ", ".join(f"`{p}`" for p in chosen),
        "",
        "| vocabulary V | tokens | checks/token median | p90 | max | token masking (= V) |"
        " median D_KL(p‖p0) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for V in args.vocab_sizes:
        sub = [r for r in rows if r["vocab"] == V]
        c = np.array([r["checks"] for r in sub])
        kl = np.array([r["kl"] for r in sub if math.isfinite(r["kl"])])
        lines.append(f"| {V} | {len(sub)} | {np.median(c):.0f} | {np.percentile(c, 90):.0f} | "
                     f"{c.max()} | {V} | {np.median(kl) if kl.size else float('nan'):.3f} |")
    lines += ["", "Checks vs D_KL (all vocabulary sizes): see `awrs_calls.png` (left: checks vs"
              " D_KL(p‖p0) = -log Z, the runtime driver of Prop. 4; right: checks per token vs V)."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for V in args.vocab_sizes:
            sub = [r for r in rows if r["vocab"] == V and math.isfinite(r["kl"])]
            ax[0].scatter([r["kl"] for r in sub], [r["checks"] for r in sub], s=12,
                          label=f"V={V}", alpha=0.7)
        ax[0].set_xlabel("D_KL(p ‖ p0) = -log Z")
        ax[0].set_ylabel("constraint checks per token")
        ax[0].set_yscale("log")
        ax[0].legend()
        Vs = args.vocab_sizes
        med = [np.median([r["checks"] for r in rows if r["vocab"] == V]) for V in Vs]
        p90 = [np.percentile([r["checks"] for r in rows if r["vocab"] == V], 90) for V in Vs]
        ax[1].plot(Vs, med, "o-", label="AWRS median")
        ax[1].plot(Vs, p90, "s--", label="AWRS p90")
        ax[1].plot(Vs, Vs, "k:", label="token masking (V)")
        ax[1].set_xscale("log")
        ax[1].set_yscale("log")
        ax[1].set_xlabel("vocabulary size V")
        ax[1].set_ylabel("checks per token")
        ax[1].legend()
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"), dpi=110)
    except ImportError:  # pragma: no cover
        pass
    print("\n".join(lines))


if __name__ == "__main__":
    main()
