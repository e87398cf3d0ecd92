"""HMM size sweep for P-GCD-SMC on SmolLM2 (issue 20; paper 002 Table 3 analog).

Paper 002 Table 3 varies only the HMM's hidden size H (1024 vs 16384, distilled from the same
2M LM samples) and reports xLAM accuracy of P-GCD vs LCD at k = 1 … 16 particles: larger HMMs
help, mostly at few particles.  Here the same question on the exactly enumerable tasks of
``bench/smc_fig2_bench.py`` (date, json, yesno): for every H the task's HMM is distilled (LVD,
EM with held-out early stopping) from the *same* cached task-prompted SmolLM2 samples, and
reported per H:

* held-out LL/token (vs the bigram baseline and the prompted LM), EM time, log p_hmm(C);
* the exact KL(P‖q) and χ² of the P-GCD proposal over complete outputs (tree walk) and the
  potential's twist error (:func:`smc_fig2_bench.proposal_divergences`);
* ensemble TV and mean per-run TV at M ∈ {2, 4, 8} for the P-GCD proposal and P-GCD proposal
  + potential, R runs each (seeds as in smc_fig2, so H = 128 is smc_fig2's cells), with
  GCD-SMC at M ∈ {2, …, 16} as the reference (independent of H, computed once);
* the issue's goal: the smallest H at which P-GCD + potential at M reaches GCD-SMC's ensemble
  TV at 2M, and a log-linear fit of held-out LL vs H extrapolated to the LM's LL;
* one extra row per task with ``--extra-data`` times more samples at the H with the best
  held-out LL (its LL also measured on the base held-out set, so the rows compare).

Caches: ``.cache/smc_fig2/`` (enumerations, samples, HMMs: shared with smc_fig2) and
``.cache/smc_hmm_size/cells.json`` (grid cells; smc_fig2's finished cells are reused).
Writes ``bench/results/smc_hmm_size.{md,json,png}``.

    OMP_NUM_THREADS=1 .venv/bin/python bench/smc_hmm_size_bench.py --threads 1
    OMP_NUM_THREADS=1 .venv/bin/python bench/smc_hmm_size_bench.py --tasks json --Hs 512
    .venv/bin/python bench/smc_hmm_size_bench.py --report-only
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time

import numpy as np
import torch
from harness import (
    RESULTS,
    ROOT,
    command_line,
    environment,
    git_dirty_files,
    load_json,
    save_json,
    write_result,
)
from smc_fig2_bench import (
    CACHE as FIG2_CACHE,
)
from smc_fig2_bench import (
    TASKS,
    build_pgcd,
    cell_key,
    compile_task,
    distill_hmm,
    enumerate_task,
    iid_floor,
    load_lm,
    proposal_divergences,
    smc_cell,
    task_samples,
)
from smc_fig2_report import LABELS, METHODS

OUT = RESULTS / "smc_hmm_size"
CACHE = ROOT / ".cache" / "smc_hmm_size"
PG = ["pgcd", "pgcd+pot"]


def _ns(args, H: int) -> argparse.Namespace:
    """smc_fig2's argument namespace for one H (its cell keys and HMM cache paths)."""
    return argparse.Namespace(
        hmm_hidden=H,
        em_epochs=args.em_epochs,
        seed=args.seed,
        distill_prompts=args.distill_prompts,
        runs=args.runs,
        awrs_runs=args.runs,
        hmm_dtype=args.hmm_dtype,
        w=args.w,
    )


def _cell(ctx, method: str, M: int, args, H: int, cells: dict, save, suffix: str = "") -> dict:
    """One (method, M) cell, from the cache if there (smc_fig2's seeds and keys)."""
    key = cell_key(ctx.task.name, method, M, _ns(args, H)) + suffix
    if key not in cells:
        seed = [args.seed, list(TASKS).index(ctx.task.name), METHODS.index(method), M]
        c = smc_cell(ctx, method, M, args.runs, seed)
        c.update(task=ctx.task.name, H=H)
        cells[key] = c
        save()
        print(
            f"[hsize] {key}: TV ens {c['tv_ensemble']:.4f}±{c['tv_ensemble_se']:.4f} run "
            f"{c['tv_run']:.4f}  Ẑ/Z {c['Zhat_over_Z']:.3f}  {c['seconds']:.0f} s",
            flush=True,
        )
    return cells[key]


def _heldout_on(hmm, ho) -> float:
    from tractable.hmm.em import heldout_ll_per_token

    return float(heldout_ll_per_token(hmm, ho.tokens, ho.lengths))


def setup_task(name: str, model, tok, vocab, args, cells: dict, save, tr_res: dict):
    """Compile and enumerate the task, its i.i.d. floors and GCD-SMC reference cells (into
    ``tr_res``); returns ``(ctx, the base held-out samples)``."""
    ctx = compile_task(TASKS[name], tok, vocab)
    enumerate_task(ctx, model, tok, vocab)
    tr_res["info"] = {k: v for k, v in ctx.info.items() if k != "hmm"}
    tr_res["iid_floor"] = {
        str(M): iid_floor(ctx.post, args.runs * M)
        for M in sorted(set(args.Ms) | {2 * M for M in args.Ms})
    }
    # GCD reference (independent of H): M and 2M, keyed at smc_fig2's H so its cells are reused
    gM = sorted(set(args.Ms) | {2 * M for M in args.Ms})
    tr_res["gcd"] = {str(M): _cell(ctx, "gcd", M, args, 128, cells, save) for M in gM}
    _, _, _, _, _, ho_base = task_samples(ctx.task, model, tok, vocab, _ns(args, 128))
    return ctx, ho_base


def sweep_task(name: str, model, tok, vocab, args, cells: dict, save, res: dict, report) -> None:
    """Every H (then the extra-data row) of one task; the report is rewritten after each."""
    tr_res = res["tasks"].setdefault(name, {"rows": {}})
    ctx, ho_base = setup_task(name, model, tok, vocab, args, cells, save, tr_res)
    plan = [(H, 1) for H in args.Hs]
    if args.extra_data > 1:
        plan.append((None, args.extra_data))
    for H, factor in plan:
        if H is None:  # extra data at the best H by held-out LL (of those run)
            done = {int(h): r for h, r in tr_res["rows"].items() if r["data_factor"] == 1}
            if not done:
                continue
            H = max(done, key=lambda h: done[h]["heldout_ll"])
        tag = f"{H}" if factor == 1 else f"{H}x{factor}"
        if tag in tr_res["rows"] and all(
            _has(cells, ctx.task.name, m, M, args, H, factor) for m in PG for M in args.Ms
        ):
            continue
        if time.time() > args.stop_at:
            print(f"[hsize] {name}: stop time reached, H = {tag} skipped", flush=True)
            continue
        row = hmm_row(ctx, name, H, factor, ho_base, model, tok, vocab, args, cells, save)
        tr_res["rows"][tag] = row
        report(res)


def hmm_row(ctx, name, H, factor, ho_base, model, tok, vocab, args, cells, save) -> dict:
    """One row: the HMM of size H distilled from ``factor``× the task's samples (its
    held-out LL on the base held-out set ``ho_base``), its P-GCD proposal's exact KL / χ² /
    twist error, and its P-GCD cells at every ``args.Ms`` (cached in ``cells``)."""
    tag = f"{H}" if factor == 1 else f"{H}x{factor}"
    ctx.task = dataclasses.replace(
        TASKS[name], samples_per_prompt=TASKS[name].samples_per_prompt * factor
    )
    t0 = time.perf_counter()
    hmm = distill_hmm(ctx, model, tok, vocab, _ns(args, H))
    row = dict(ctx.info["hmm"])
    row.update(H=H, data_factor=factor, distill_wall_seconds=time.perf_counter() - t0)
    if factor > 1:  # the same held-out set as the base rows
        from tractable.hmm.distill import bigram_heldout_ll

        _, _, _, _, tr_x, _ = task_samples(ctx.task, model, tok, vocab, _ns(args, H))
        row["heldout_ll_own"] = row["heldout_ll"]
        row["heldout_ll"] = _heldout_on(hmm, ho_base)
        row["lm_heldout_ll"] = float(ho_base.lm_logprob.double().sum()) / ho_base.num_tokens
        row["bigram_heldout_ll"] = bigram_heldout_ll(
            tr_x.tokens, tr_x.lengths, ho_base.tokens, ho_base.lengths, vocab.size, 0.1
        )
    ctx.pgcd = {}
    build_pgcd(ctx, hmm, _ns(args, H), False, vocab)
    row["log_p_hmm_C"] = ctx.info["hmm"]["log_p_hmm_C"]
    row["product_seconds"] = ctx.info["hmm"]["product_seconds"]
    t1 = time.perf_counter()
    div = proposal_divergences(ctx)
    row["divergence_seconds"] = time.perf_counter() - t1
    row["gcd_kl"], row["gcd_chi2"] = div["gcd"]["kl"], div["gcd"]["chi2"]
    d = div["pgcd/distilled"]
    row.update(kl=d["kl"], chi2=d["chi2"], twist_log_sd=d.get("twist_log_sd"))
    print(
        f"[hsize] {name} H={tag}: LL {row['heldout_ll']:.3f}, log p(C) "
        f"{row['log_p_hmm_C']:.2f}, KL {row['kl']:.3f} (GCD {row['gcd_kl']:.3f}), "
        f"twist {row['twist_log_sd']:.2f}",
        flush=True,
    )
    sfx = "" if factor == 1 else f"/data{factor}x"
    row["cells"] = {
        f"{m}/M{M}": _cell(ctx, m, M, args, H, cells, save, sfx) for m in PG for M in args.Ms
    }
    ctx.pgcd = {}
    del hmm
    return row


def _has(cells, task, m, M, args, H, factor) -> bool:
    sfx = "" if factor == 1 else f"/data{factor}x"
    return cell_key(task, m, M, _ns(args, H)) + sfx in cells


def seed_key(name: str, H: int, s: int, factor: int, args) -> str:
    """The ``seeds`` cache key of :func:`seed_spread`'s HMM with seed ``s`` (``factor``× data)."""
    sfx = "" if factor == 1 else f"/data{factor}x"
    return f"{name}/H{H}/seed{s}/e{args.em_epochs}/p{args.distill_prompts}/w{args.w}{sfx}"


def seed_spread(
    name: str, model, tok, vocab, args, seeds: dict, save, factor: int = 1, ctx=None
) -> None:
    """The HMM seed's share of the H trend (no SMC): for every H and every ``--hmm-seeds`` seed,
    an HMM from the same base samples with that seed for LVD and EM (else as
    :func:`smc_fig2_bench.distill_hmm`, whose seed is ``--seed``) → held-out LL, log p_hmm(C)
    and the exact KL / χ² / twist error of its P-GCD proposal.  Cached in ``seeds``.
    ``factor`` > 1: from ``factor``× the samples (the data sweep; keys end in ``/data{K}x``,
    held-out LL also on the base held-out set); ``ctx``: the task's enumerated context."""
    from tractable.hmm.em import fit, smoothed_unigram
    from tractable.hmm.lvd import lvd_init
    from tractable.hmm.pgcd import PGCD

    tr, V = None, vocab.size
    for H in args.Hs:
        for s in args.hmm_seeds:
            key = seed_key(name, H, s, factor, args)
            if key in seeds:
                continue
            if time.time() > args.stop_at:
                print(f"[hsize] {name}: stop time reached, seed spread H = {H} skipped")
                return
            if ctx is None:
                ctx = compile_task(TASKS[name], tok, vocab)
                enumerate_task(ctx, model, tok, vocab)
            if tr is None:
                task = dataclasses.replace(
                    TASKS[name], samples_per_prompt=TASKS[name].samples_per_prompt * factor
                )
                _, _, _, _, tr, ho = task_samples(task, model, tok, vocab, _ns(args, 128))
                ho_base = ho
                if factor > 1:
                    _, _, _, _, _, ho_base = task_samples(
                        TASKS[name], model, tok, vocab, _ns(args, 128)
                    )
                prior = smoothed_unigram(tr.tokens, tr.lengths, V, 0.1)
            t0 = time.perf_counter()
            kw = dict(hidden_size=H, vocab_size=V, pseudocount=0.1, emission_pseudocount=1.0)
            start = lvd_init(
                tr.tokens,
                tr.lengths,
                tr.hidden,
                emission_prior=prior,
                iterations=20,
                seed=s,
                fingerprint=vocab.fingerprint,
                **kw,
            )
            hmm = fit(
                tr.tokens,
                tr.lengths,
                ho.tokens,
                ho.lengths,
                epochs=args.em_epochs,
                batch_size=128,
                init=start,
                patience=2,
                seed=s,
                progress=False,
                fingerprint=vocab.fingerprint,
                **kw,
            )
            secs = time.perf_counter() - t0
            pg = PGCD(ctx.A, hmm, ctx.task.budget, w=args.w, dtype=getattr(torch, args.hmm_dtype))
            ctx.pgcd = {"distilled": pg}
            d = proposal_divergences(ctx)["pgcd/distilled"]
            seeds[key] = {
                "task": name,
                "H": H,
                "seed": s,
                "heldout_ll": float(hmm.meta["heldout_ll_per_token"]),
                "log_p_hmm_C": float(pg.product.log_gamma),
                "kl": d["kl"],
                "chi2": d["chi2"],
                "twist_log_sd": d.get("twist_log_sd"),
                "distill_seconds": secs,
            }
            if factor > 1:  # LL on the base held-out set, as the data sweep's rows
                seeds[key].update(
                    data_factor=factor,
                    train_tokens=tr.num_tokens,
                    heldout_ll_own=seeds[key]["heldout_ll"],
                    heldout_ll=_heldout_on(hmm, ho_base),
                )
            save()
            print(f"[hsize] seeds {key}: LL {seeds[key]['heldout_ll']:.3f} KL {d['kl']:.3f}")


def _attach_seeds(res: dict, seeds: dict) -> None:
    for name, tr in res["tasks"].items():
        tr["seed_spread"] = sorted(
            (v for v in seeds.values() if v["task"] == name and v.get("data_factor", 1) == 1),
            key=lambda v: (v["H"], v["seed"]),
        )


# ----------------------------------------------------------------------------- analysis


def _base_rows(tr: dict) -> list[dict]:
    return sorted((r for r in tr["rows"].values() if r["data_factor"] == 1), key=lambda r: r["H"])


def ll_fit(tr: dict) -> dict | None:
    """Least-squares LL = a + b·log2 H over the base rows up to the best held-out LL (the
    rising part; past it the HMM overfits the fixed data) and its extrapolation: the H at
    which the fitted line reaches the prompted LM's held-out LL, and the LM's − 1 nat."""
    rows = _base_rows(tr)
    if len(rows) < 2:
        return None
    best = max(range(len(rows)), key=lambda i: rows[i]["heldout_ll"])
    out = {"best_H": rows[best]["H"], "best_ll": rows[best]["heldout_ll"]}
    for label, part in (("all", rows), ("rising", rows[: best + 1])):
        if len(part) < 2:
            out[label] = None
            continue
        x = np.log2([r["H"] for r in part])
        y = np.array([r["heldout_ll"] for r in part])
        b, a = np.polyfit(x, y, 1)
        lm = float(np.mean([r["lm_heldout_ll"] for r in part]))
        f = {"a": float(a), "b_per_doubling": float(b), "Hs": [r["H"] for r in part], "lm_ll": lm}
        for k, target in (("log2_H_at_lm", lm), ("log2_H_at_lm_minus_1", lm - 1.0)):
            f[k] = float((target - a) / b) if b > 1e-9 else None
        out[label] = f
    return out


def goal(tr: dict, Ms: list[int], metric: str = "tv_ensemble") -> dict:
    """Per M: the Hs (base data) at which P-GCD + potential at M has ``metric`` ≤ GCD-SMC's at
    2M, the smallest one, and (ensemble TV) those where it is lower by more than two s.e. of the
    difference (bootstrap s.e. of the two cells combined)."""
    out = {}
    for M in Ms:
        g = tr["gcd"].get(str(2 * M))
        if g is None:
            continue
        hits, clear = [], []
        for r in _base_rows(tr):
            c = r["cells"].get(f"pgcd+pot/M{M}")
            if c is None or c[metric] > g[metric]:
                continue
            hits.append(r["H"])
            se = math.hypot(c.get(metric + "_se", 0.0), g.get(metric + "_se", 0.0))
            if se > 0 and g[metric] - c[metric] > 2 * se:
                clear.append(r["H"])
        out[str(M)] = {
            "gcd_2M": g[metric],
            "Hs": hits,
            "smallest_H": min(hits, default=None),
            "clear_Hs": clear,
        }
    return out


def _task_order(res: dict) -> list[str]:
    order = res["meta"].get("tasks", []) + list(TASKS)
    return sorted(res["tasks"], key=order.index)


def _tag(r: dict) -> str:
    return f"{r['H']}" if r["data_factor"] == 1 else f"{r['H']} × {r['data_factor']} data"


def _short(m: str) -> str:
    return {"pgcd": "P-GCD prop.", "pgcd+pot": "P-GCD prop. + pot."}[m]


def _fmt_log2(v) -> str:
    if v is None:
        return "never (LL does not rise with H)"
    if v > 60:
        return f"2^{v:.0f} ≈ 10^{v * math.log10(2):.0f}"
    return f"2^{v:.1f} ≈ {2**v:,.0f}"


# ----------------------------------------------------------------------------- report


def write_report(res: dict) -> None:
    meta = res["meta"]
    Ms = meta["Ms"]
    md = [
        "# HMM size sweep: P-GCD-SMC vs the distilled HMM's hidden size H (paper 002 "
        "Table 3 analog) on SmolLM2",
        "",
        f"Command: `{meta['command_line']}`  ",
        f"Date: {meta['env']['date']}  ",
        f"Machine: {meta['env']['machine']}  ",
        f"Commit: {meta['env']['commit']}"
        + (
            f" (uncommitted: {', '.join(d.split()[-1] for d in meta['dirty_files'])})"
            if meta.get("dirty_files")
            else ""
        )
        + "  ",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["env"]["versions"].items()) + "  ",
        f"Wall time: {meta.get('wall_seconds', float('nan')) / 60:.1f} min",
        "",
        "Tasks, exact posteriors, seeds and methods as in "
        "[`smc_fig2.md`](smc_fig2.md) (SmolLM2-135M-Instruct, chat template, every "
        "GCD-allowed prefix enumerated; multinomial resampling at ESS < M/2; P-GCD weight "
        f"w = {meta['w']}, not tuned).  Per task and H one HMM is distilled from the same "
        "cached task-prompted samples (LVD init, EM ≤ "
        f"{meta['em_epochs']} epochs with held-out early stopping, patience 2).  "
        f"R = {meta['runs']} SMC runs per cell.  **LL** = held-out LL/token (3 unseen "
        "prompts of the task); **KL**, **χ²** = exact KL(P‖q) and χ²(P‖q) of the P-GCD "
        "proposal over complete outputs; **twist** = its potential's twist error (nats; "
        "0 = perfect look-ahead); **ens** = ensemble TV (± bootstrap s.e.), **run** = mean "
        "per-run TV.  Rows `H × K data`: K× the samples at that H (LL on the base held-out set).  "
        "At M = 2 no run resamples, so + potential ≡ proposal in distribution there.",
        "",
    ]
    for name in _task_order(res):
        tr = res["tasks"][name]
        info = tr["info"]
        rows = sorted(tr["rows"].values(), key=lambda r: (r["data_factor"], r["H"]))
        if not rows:
            continue
        r0 = rows[0]
        md += [
            f"## {name}",
            "",
            f"Prompt: “{info['prompt']}”; budget {info['budget']}; Z = {info['Z']:.4g}, "
            f"{info['accepted_outputs']} accepted outputs, posterior entropy "
            f"{info['posterior_entropy_nats']:.2f} nats.  ",
            f"Training data (base): {r0['train_tokens']} tokens ({r0['train_sequences']} "
            f"samples of {r0['prompts'] - len(r0['heldout_prompts'])} prompts, ≤ "
            f"{r0['max_length']} tokens); held out {r0['heldout_tokens']} tokens.  "
            f"Prompted LM LL {r0['lm_heldout_ll']:.3f}, bigram {r0['bigram_heldout_ll']:.3f}"
            f", unigram {r0['unigram_heldout_ll']:.3f} nats/token.  GCD proposal: KL "
            f"{r0['gcd_kl']:.3f}, χ² {r0['gcd_chi2']:.3g}.",
            "",
            "| H | train tokens | held-out LL | LL − bigram | LL − LM | best epoch | EM s | "
            "log p_hmm(C) | KL(P‖q) | χ² | twist |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            md.append(
                f"| {_tag(r)} | {r['train_tokens']} | {r['heldout_ll']:.3f} | "
                f"{r['heldout_ll'] - r['bigram_heldout_ll']:+.3f} | "
                f"{r['heldout_ll'] - r['lm_heldout_ll']:+.3f} | {r['best_epoch']}/"
                f"{r['epochs_run']} | {r['em_seconds']:.0f} | {r['log_p_hmm_C']:.2f} | "
                f"{r['kl']:.3f} | {r['chi2']:.3g} | {r['twist_log_sd']:.2f} |"
            )
        md.append(f"| GCD (no HMM) | | | | | | | | {r0['gcd_kl']:.3f} | {r0['gcd_chi2']:.3g} | |")
        g = tr["gcd"]
        for metric, title, fmt in (
            ("tv_ensemble", "Ensemble TV (± bootstrap s.e.)", "{:.3f} ± {:.3f}"),
            ("tv_run", "Mean per-run TV", "{:.3f}"),
        ):
            md += [
                "",
                f"{title}:",
                "",
                "| H | " + " | ".join(f"{_short(m)} M = {M}" for m in PG for M in Ms) + " |",
                "|---|" + "---:|" * (len(PG) * len(Ms)),
            ]
            for r in rows:
                cs = [r["cells"].get(f"{m}/M{M}") for m in PG for M in Ms]
                md.append(
                    f"| {_tag(r)} | "
                    + " | ".join(
                        "—"
                        if c is None
                        else fmt.format(c[metric], c[metric + "_se"])
                        if metric == "tv_ensemble"
                        else fmt.format(c[metric])
                        for c in cs
                    )
                    + " |"
                )
            md.append(
                "| GCD-SMC (no HMM) | "
                + " | ".join(
                    fmt.format(g[str(M)][metric], g[str(M)].get(metric + "_se", 0))
                    if str(M) in g
                    else "—"
                    for _ in PG
                    for M in Ms
                )
                + " |"
            )
        md += [
            "",
            f"GCD-SMC reference (R = {meta['runs']}; independent of H): "
            + "; ".join(
                f"M = {M}: ens {g[str(M)]['tv_ensemble']:.3f} ± {g[str(M)]['tv_ensemble_se']:.3f}"
                f", run {g[str(M)]['tv_run']:.3f}"
                for M in sorted(map(int, g))
            )
            + ".  i.i.d. "
            "floor (R·M exact samples): "
            + ", ".join(
                f"M = {M}: {v:.3f}"
                for M, v in sorted((int(k), v) for k, v in tr["iid_floor"].items())
            )
            + ".",
            "",
        ]
        for metric, title in (("tv_ensemble", "ensemble TV"), ("tv_run", "mean per-run TV")):
            gl = goal(tr, Ms, metric)
            md.append(
                f"**Goal** ({title}; P-GCD + potential at M ≤ GCD-SMC at 2M): "
                + "; ".join(
                    f"M = {M}: GCD@{2 * int(M)} = {v['gcd_2M']:.3f}, "
                    + (
                        f"smallest H = {v['smallest_H']} (holds at H ∈ {v['Hs']}"
                        + (
                            f"; by > 2 s.e. at {v['clear_Hs'] or 'none'}"
                            if metric == "tv_ensemble"
                            else ""
                        )
                        + ")"
                        if v["smallest_H"] is not None
                        else "no H"
                    )
                    for M, v in gl.items()
                )
                + ".  "
            )
        fit = ll_fit(tr)
        if fit:
            parts = [f"best held-out LL at H = {fit['best_H']} ({fit['best_ll']:.3f})"]
            for label in ("all", "rising"):
                f = fit.get(label)
                if f is None:
                    continue
                parts.append(
                    f"fit over H ∈ {f['Hs']} ({label}): LL ≈ {f['a']:.3f} + "
                    f"{f['b_per_doubling']:.4f}·log2 H; **extrapolated** H to reach the LM's "
                    f"{f['lm_ll']:.3f}: {_fmt_log2(f['log2_H_at_lm'])}, to within 1 nat of it:"
                    f" {_fmt_log2(f['log2_H_at_lm_minus_1'])}"
                )
            md.append(
                "LL vs H (log-linear least squares, an *extrapolation* far outside the "
                "measured range, at fixed data): " + "; ".join(parts) + ".  "
            )
        md += _seed_table(tr)
        md.append("")
    md += ["## Reading", ""] + [f"* {n}" for n in res.get("notes", [])]
    write_result(OUT, "\n".join(md) + "\n", raw=res)
    try:
        plot(res)
    except Exception as e:  # pragma: no cover - plotting is optional
        print(f"[hsize] no plot: {e}", file=sys.stderr)


def _seed_stats(tr: dict) -> dict:
    """Per H: the seed-0 row (the grid's) and the ``--hmm-seeds`` HMMs together."""
    out: dict = {}
    for r in _base_rows(tr):
        out[r["H"]] = [{"seed": 0, **{k: r[k] for k in ("heldout_ll", "log_p_hmm_C", "kl")}}]
    for v in tr.get("seed_spread", []):
        out.setdefault(v["H"], []).append(v)
    return out


def _seed_table(tr: dict) -> list[str]:
    st = {H: v for H, v in _seed_stats(tr).items() if len(v) > 1}
    if not st:
        return []
    seeds = sorted({v["seed"] for vs in st.values() for v in vs})
    md = [
        "",
        "HMM seed spread (no SMC; the same samples, LVD and EM with another seed; seed 0 = the "
        "grid's HMM): exact KL(P‖q) of the P-GCD proposal, and held-out LL:",
        "",
        "| H | " + " | ".join(f"KL seed {s}" for s in seeds) + " | KL mean ± s.d. | LL min … max |",
        "|---|" + "---:|" * (len(seeds) + 2),
    ]
    for H, vs in sorted(st.items()):
        by = {v["seed"]: v for v in vs}
        kl = np.array([v["kl"] for v in vs])
        ll = [v["heldout_ll"] for v in vs]
        md.append(
            f"| {H} | "
            + " | ".join(f"{by[s]['kl']:.3f}" if s in by else "—" for s in seeds)
            + f" | {kl.mean():.3f} ± {kl.std(ddof=1):.3f} | {min(ll):.3f} … {max(ll):.3f} |"
        )
    return md


def plot(res: dict) -> None:
    """Row 1: ensemble TV at M = 4 vs H per method, GCD-SMC at M = 4 and 8 as horizontal
    lines; row 2: held-out LL/token vs H with the bigram, the LM and the log-linear fit; row 3:
    the exact KL(P‖q) of the P-GCD proposal vs H, GCD's as a horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    M = 4 if 4 in res["meta"]["Ms"] else res["meta"]["Ms"][0]
    names = [n for n in _task_order(res) if res["tasks"][n]["rows"]]
    fig, axes = plt.subplots(3, len(names), figsize=(5 * len(names), 11), squeeze=False)
    for j, name in enumerate(names):
        tr = res["tasks"][name]
        rows = _base_rows(tr)
        extra = [r for r in tr["rows"].values() if r["data_factor"] > 1]
        ax, al = axes[0][j], axes[1][j]
        for m, color in zip(PG, ["C0", "C1"]):
            rs = [r for r in rows if f"{m}/M{M}" in r["cells"]]
            ax.errorbar(
                [r["H"] for r in rs],
                [r["cells"][f"{m}/M{M}"]["tv_ensemble"] for r in rs],
                yerr=[r["cells"][f"{m}/M{M}"]["tv_ensemble_se"] for r in rs],
                marker="o",
                capsize=2,
                color=color,
                label=f"{LABELS[m]}, M = {M}",
            )
            for r in extra:
                c = r["cells"].get(f"{m}/M{M}")
                if c:
                    ax.errorbar(
                        [r["H"]],
                        [c["tv_ensemble"]],
                        yerr=[c["tv_ensemble_se"]],
                        marker="*",
                        ms=12,
                        color=color,
                        capsize=2,
                        label=f"{LABELS[m]}, {r['data_factor']}× data",
                    )
        for MM, ls in ((M, "-"), (2 * M, "--")):
            g = tr["gcd"].get(str(MM))
            if g:
                ax.axhline(g["tv_ensemble"], color="k", ls=ls, lw=1, label=f"GCD-SMC, M = {MM}")
        fl = tr["iid_floor"].get(str(M))
        if fl:
            ax.axhline(fl, color="gray", ls=":", lw=1, label=f"i.i.d. floor (R·{M})")
        ax.set_xscale("log", base=2)
        ax.set(xlabel="HMM hidden size H", ylabel=f"ensemble TV at M = {M}", title=name)
        hs = [r["H"] for r in rows]
        al.plot(hs, [r["heldout_ll"] for r in rows], "o-", label="distilled HMM")
        for r in extra:
            al.plot(
                [r["H"]],
                [r["heldout_ll"]],
                "*",
                ms=12,
                color="C3",
                label=f"{r['data_factor']}× data",
            )
        if rows:
            al.axhline(rows[0]["bigram_heldout_ll"], color="gray", ls="--", label="bigram")
            al.axhline(rows[0]["lm_heldout_ll"], color="k", ls="-", label="prompted LM")
        fit = ll_fit(tr)
        f = fit and (fit.get("rising") or fit.get("all"))
        if f:
            xs = np.array([min(hs), max(hs)])
            al.plot(xs, f["a"] + f["b_per_doubling"] * np.log2(xs), "C0:", label="log-linear fit")
        al.set_xscale("log", base=2)
        al.set(xlabel="HMM hidden size H", ylabel="held-out LL (nats/token)")
        ak = axes[2][j]
        ak.plot(hs, [r["kl"] for r in rows], "o-", color="C2", label="P-GCD proposal (seed 0)")
        st = {H: v for H, v in _seed_stats(tr).items() if len(v) > 1}
        if st:
            xs = [H for H, vs in st.items() for v in vs[1:]]
            ak.plot(
                xs,
                [v["kl"] for vs in st.values() for v in vs[1:]],
                "x",
                color="gray",
                label="other HMM seeds",
            )
            Hs = sorted(st)
            ak.plot(
                Hs,
                [np.mean([v["kl"] for v in st[H]]) for H in Hs],
                "--",
                color="C2",
                label="mean over seeds",
            )
        for r in extra:
            ak.plot([r["H"]], [r["kl"]], "*", ms=12, color="C3", label=f"{r['data_factor']}× data")
        if rows:
            ak.axhline(rows[0]["gcd_kl"], color="k", ls="-", lw=1, label="GCD proposal")
        ak.set_xscale("log", base=2)
        ak.set(xlabel="HMM hidden size H", ylabel="exact KL(P‖q), nats", ylim=(0, None))
    for a in axes[0][0], axes[1][0], axes[2][0]:
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT.with_suffix(".png"), dpi=110)


# ----------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=["date", "json", "yesno"], choices=list(TASKS))
    ap.add_argument("--Hs", nargs="+", type=int, default=[16, 32, 64, 128, 256, 512, 1024])
    ap.add_argument("--Ms", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--runs", type=int, default=64, help="R: SMC runs per (method, M)")
    ap.add_argument(
        "--extra-data",
        type=int,
        default=3,
        help="K: one extra row with K× the samples at the best H (1 = none)",
    )
    ap.add_argument("--em-epochs", type=int, default=30)
    ap.add_argument("--distill-prompts", type=int, default=16)
    ap.add_argument("--hmm-dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--w", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--stop-after-min",
        type=float,
        default=None,
        help="start no new H after this many minutes (the rest is left out)",
    )
    ap.add_argument(
        "--hmm-seeds",
        nargs="*",
        type=int,
        default=[1, 2],
        help="extra HMM seeds per H for the seed spread of KL and LL (no SMC)",
    )
    ap.add_argument(
        "--seed-spread-only",
        action="store_true",
        help="only the seed spread (into its cache); no grid, no result files",
    )
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--note", action="append", default=[], help="a line for the reading")
    args = ap.parse_args()
    if args.report_only:
        res = load_json(OUT.with_suffix(".json"))
        res["notes"] = res.get("notes", []) + args.note
        _attach_seeds(res, load_json(CACHE / "seeds.json", {}))
        res["meta"].setdefault("tasks", args.tasks)
        write_report(res)
        return
    torch.set_num_threads(args.threads)
    t_all = time.perf_counter()
    args.stop_at = (
        math.inf if args.stop_after_min is None else time.time() + 60 * args.stop_after_min
    )
    cells_path = CACHE / "cells.json"
    cells = load_json(cells_path, {})
    for k, v in load_json(FIG2_CACHE / "cells.json", {}).items():  # smc_fig2's cells, reused
        cells.setdefault(k, v)
    cmd = command_line(
        "smc_hmm_size_bench.py",
        args,
        skip=("report_only", "note", "stop_at", "stop_after_min", "seed_spread_only"),
        prefix="OMP_NUM_THREADS=1 .venv/bin/python",
    )
    old = load_json(OUT.with_suffix(".json"), {}) or {}
    res = {
        "meta": {
            "command_line": cmd,
            "env": environment("torch", "transformers", "numpy", threads=args.threads),
            "dirty_files": git_dirty_files(),
            "w": args.w,
            "runs": args.runs,
            "Ms": args.Ms,
            "Hs": args.Hs,
            "tasks": args.tasks,
            "em_epochs": args.em_epochs,
        },
        "tasks": old.get("tasks", {}),
        "notes": old.get("notes", []) + args.note,
    }

    def save():
        save_json(cells_path, cells)

    def report(r):
        r["meta"]["wall_seconds"] = time.perf_counter() - t_all
        write_report(r)

    model, tok, vocab = load_lm()
    seeds = load_json(CACHE / "seeds.json", {})

    def save_seeds():
        save_json(CACHE / "seeds.json", seeds)

    if args.seed_spread_only:
        for name in args.tasks:
            seed_spread(name, model, tok, vocab, args, seeds, save_seeds)
        return
    for name in args.tasks:
        sweep_task(name, model, tok, vocab, args, cells, save, res, report)
        _attach_seeds(res, seeds)
        report(res)
    for name in args.tasks:
        seed_spread(name, model, tok, vocab, args, seeds, save_seeds)
        _attach_seeds(res, seeds)
        report(res)


if __name__ == "__main__":
    main()
