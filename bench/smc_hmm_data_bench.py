"""HMM data sweep for P-GCD-SMC on SmolLM2 (issue 20): the data axis of
``bench/smc_hmm_size_bench.py``.

The size sweep (``smc_hmm_size.md``) found that at ~3k training tokens 3× the samples gained more
held-out LL than any step in H.  Here H is fixed per task (by default the H with the best
held-out LL at base data in ``smc_hmm_size.json``; 256 if unclear) and the task-prompted
SmolLM2 samples are multiplied by K ∈ ``--Ks`` (K× the samples per prompt, the same prompts,
the same held-out prompts).  Per (task, K), with :func:`smc_hmm_size_bench.hmm_row` (the size
sweep's own row, so K = 1 and K = 3 are its ``H`` and ``H × 3 data`` rows and cells):

* training tokens; held-out LL/token on the *base* held-out set (the size sweep's), so the rows
  compare; the exact KL(P‖q) and χ² of the P-GCD proposal and the potential's twist error;
* ensemble TV and mean per-run TV at M ∈ ``--Ms`` for the P-GCD proposal and the P-GCD proposal
  + potential (R runs, smc_fig2's seeds), with GCD-SMC at M and 2M as the reference;
* the goal check: P-GCD + potential at M vs GCD-SMC at 2M (difference ± bootstrap s.e.);
* least-squares fits of KL(P‖q) and of that TV gap against log2(training tokens), extrapolated
  to the token count at which KL reaches 0 and the gap reaches 0 (an *extrapolation*, labelled
  with the number of points it uses);
* the HMM seed's spread per K (``--hmm-seeds``; no SMC): KL and LL of HMMs from the same samples
  with other LVD/EM seeds (:func:`smc_hmm_size_bench.seed_spread` with ``factor`` = K).

Caches: those of the size sweep (``.cache/smc_fig2/``: enumerations, samples, HMMs;
``.cache/smc_hmm_size/cells.json``: cells); each finished (task, K) row is also written to the
result json at once, so a stopped run still reports what finished and a rerun only does the
rest.  ``--deadline HH:MM`` (UTC) starts no (task, K) whose estimated end is past it.
Writes ``bench/results/smc_hmm_data.{md,json,png}``.

    OMP_NUM_THREADS=1 .venv/bin/python bench/smc_hmm_data_bench.py --Ks 1 3 10 --hmm-seeds 1 2 3 4
    .venv/bin/python bench/smc_hmm_data_bench.py --report-only
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
import time

import numpy as np
import torch
from harness import RESULTS, command_line, environment, git_dirty_files, load_json, save_json
from smc_fig2_bench import CACHE as FIG2_CACHE
from smc_fig2_bench import TASKS, load_lm
from smc_fig2_report import LABELS
from smc_hmm_size_bench import CACHE, PG, _has, hmm_row, seed_key, seed_spread, setup_task

OUT = RESULTS / "smc_hmm_data"
SIZE_JSON = RESULTS / "smc_hmm_size.json"


def best_H(name: str, size: dict) -> tuple[int, str]:
    """The H with the best held-out LL at base data in the size sweep's json (else 256)."""
    rows = [r for r in size.get("tasks", {}).get(name, {}).get("rows", {}).values()
            if r.get("data_factor") == 1]
    if not rows:
        return 256, "no size-sweep rows: default 256"
    r = max(rows, key=lambda r: r["heldout_ll"])
    why = f"best held-out LL at base data in smc_hmm_size.json ({r['heldout_ll']:.3f})"
    return int(r["H"]), why


def _deadline(s: str | None) -> float:
    if not s:
        return math.inf
    now = dt.datetime.now(dt.timezone.utc)
    h, m = map(int, s.split(":"))
    t = now.replace(hour=h, minute=m, second=0, microsecond=0)
    if t < now - dt.timedelta(hours=12):
        t += dt.timedelta(days=1)
    return t.timestamp()


def _estimate(tr: dict, K: int) -> float:
    """Seconds for row K, from the K = 1 row (HMM distillation × K, the cells, divergences);
    sampling of a missing store is not included (fill the stores first)."""
    r1 = tr["rows"].get("1")
    if r1 is None:
        return 0.0
    cells = sum(c["seconds"] for c in r1["cells"].values())
    return K * (r1["lvd_seconds"] + r1["em_seconds"]) + cells + r1["divergence_seconds"] + 30


def sweep(name: str, model, tok, vocab, args, cells: dict, save, res: dict, report,
          seeds: dict, save_seeds) -> None:
    tr = res["tasks"].setdefault(name, {"rows": {}})
    H, why = (args.H, "--H") if args.H else best_H(name, load_json(SIZE_JSON, {}) or {})
    if tr.get("H", H) != H:
        raise SystemExit(f"{name}: the result json has H = {tr['H']}, not {H}")
    tr["H"], tr["H_reason"] = H, why
    todo = [K for K in args.Ks if not (
        str(K) in tr["rows"]
        and all(_has(cells, name, m, M, args, H, K) for m in PG for M in args.Ms)
    )]
    seeds_todo = [(K, s) for K in args.Ks for s in args.hmm_seeds
                  if seed_key(name, H, s, K, args) not in seeds]
    if not todo and not seeds_todo:
        return
    if time.time() + 300 > args.stop_at:
        print(f"[hdata] {name}: deadline, not started", flush=True)
        return
    ctx, ho_base = setup_task(name, model, tok, vocab, args, cells, save, tr)
    report(res)
    for K in todo:
        est = _estimate(tr, K)
        if time.time() + est > args.stop_at:
            print(f"[hdata] {name}: K = {K} skipped (est. {est:.0f} s past the deadline)",
                  flush=True)
            continue
        t0 = time.perf_counter()
        row = hmm_row(ctx, name, H, K, ho_base, model, tok, vocab, args, cells, save)
        row["row_wall_seconds"] = time.perf_counter() - t0
        row["finished_utc"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        tr["rows"][str(K)] = row
        report(res)
    # the HMM seed's spread per K (no SMC): after every row, only for the Ks that have one
    for K, s in seeds_todo:
        r = tr["rows"].get(str(K))
        if r is None:
            continue
        est = r["lvd_seconds"] + r["em_seconds"] + r["divergence_seconds"] + 20
        if time.time() + est > args.stop_at:
            print(f"[hdata] {name}: seed {s} at K = {K} skipped (deadline)", flush=True)
            continue
        ns = argparse.Namespace(**{**vars(args), "Hs": [H], "hmm_seeds": [s]})
        seed_spread(name, model, tok, vocab, ns, seeds, save_seeds, factor=K, ctx=ctx)
        _attach(res, seeds, args)
        report(res)


def _attach(res: dict, seeds: dict, args) -> None:
    """The seed-spread entries of each task's H and Ks (seed 0 = the row's own HMM)."""
    for name, tr in res["tasks"].items():
        tr["seed_spread"] = {}
        for K in tr["rows"]:
            for s in range(1, 100):
                v = seeds.get(seed_key(name, tr["H"], s, int(K), args))
                if v is not None:
                    tr["seed_spread"].setdefault(K, []).append(v)


# ----------------------------------------------------------------------------- analysis


def _rows(tr: dict) -> list[dict]:
    return sorted(tr["rows"].values(), key=lambda r: r["data_factor"])


def seed_stats(tr: dict) -> dict:
    """Per K: the row's HMM (seed 0) and the seed-spread HMMs (KL, LL on the base set)."""
    out = {}
    for K, r in tr["rows"].items():
        out[K] = [{"seed": 0, "kl": r["kl"], "heldout_ll": r["heldout_ll"],
                   "log_p_hmm_C": r["log_p_hmm_C"]}]
        out[K] += tr.get("seed_spread", {}).get(K, [])
    return out


def linfit(x, y) -> dict | None:
    """Least squares y = a + b·x with the slope's s.e. (None for < 2 points)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = len(x)
    if n < 2:
        return None
    b, a = np.polyfit(x, y, 1)
    out = {"a": float(a), "b": float(b), "n": n, "b_se": None}
    if n > 2:
        res = y - (a + b * x)
        s2 = float(res @ res) / (n - 2)
        out["b_se"] = math.sqrt(s2 / float(((x - x.mean()) ** 2).sum()))
    return out


def _cross(f: dict | None, target: float = 0.0, up: bool = False) -> float | None:
    """log2(tokens) at which the fitted line reaches ``target`` coming down (``up``: rising);
    None if it does not move that way."""
    if f is None or (f["b"] <= 0 if up else f["b"] >= 0):
        return None
    return (target - f["a"]) / f["b"]


def gaps(tr: dict, Ms: list[int], metric: str = "tv_ensemble") -> dict:
    """Per M and K: P-GCD + potential at M minus GCD-SMC at 2M (≤ 0: the goal holds) and the
    bootstrap s.e. of the difference (the two cells' s.e. combined; ensemble TV only)."""
    out: dict = {}
    for M in Ms:
        g = tr["gcd"].get(str(2 * M))
        if g is None:
            continue
        for r in _rows(tr):
            c = r["cells"].get(f"pgcd+pot/M{M}")
            if c is None:
                continue
            se = math.hypot(c.get(metric + "_se", 0.0), g.get(metric + "_se", 0.0))
            out.setdefault(str(M), {})[str(r["data_factor"])] = {
                "tokens": r["train_tokens"], "gap": c[metric] - g[metric], "se": se,
                "pgcd_pot": c[metric], "gcd_2M": g[metric],
            }
    return out


def analyse(tr: dict, Ms: list[int]) -> dict:
    rows = _rows(tr)
    x = [math.log2(r["train_tokens"]) for r in rows]
    out = {"n_points": len(rows), "Ks": [r["data_factor"] for r in rows]}
    fk = linfit(x, [r["kl"] for r in rows])
    out["kl_fit"] = fk and {**fk, "log2_tokens_at_0": _cross(fk)}
    st = seed_stats(tr)
    ks = [K for K in sorted(st, key=int) if len(st[K]) > 1]
    if len(ks) >= 2:
        xs = [math.log2(tr["rows"][K]["train_tokens"]) for K in ks]
        fm = linfit(xs, [np.mean([v["kl"] for v in st[K]]) for K in ks])
        out["kl_seed_mean_fit"] = {**fm, "Ks": [int(K) for K in ks],
                                   "log2_tokens_at_0": _cross(fm)}
    fl = linfit(x, [r["heldout_ll"] for r in rows])
    out["ll_fit"] = fl and {
        **fl,
        "log2_tokens_at_lm": _cross(fl, rows[0]["lm_heldout_ll"], up=True),
    }
    for metric in ("tv_ensemble", "tv_run"):
        gp = gaps(tr, Ms, metric)
        fits = {}
        for M, byK in gp.items():
            pts = sorted(byK.values(), key=lambda v: v["tokens"])
            f = linfit([math.log2(v["tokens"]) for v in pts], [v["gap"] for v in pts])
            held = [K for K, v in byK.items() if v["gap"] <= 0]
            clear = [K for K, v in byK.items() if v["se"] > 0 and v["gap"] < -2 * v["se"]]
            fits[M] = {"fit": f, "log2_tokens_at_goal": _cross(f), "holds_at_K": held,
                       "clear_at_K": clear}
        out[metric] = {"gaps": gp, "fits": fits}
    return out


def _tok(v: float | None, x_max: float | None = None) -> str:
    if v is None:
        return "never (the fitted line moves away from it)"
    if x_max is not None and v <= x_max:
        return f"2^{v:.1f}, inside the measured range (the line is already past it there)"
    if v > 64:
        return f"2^{v:.0f} tokens (effectively never)"
    return f"2^{v:.1f} ≈ {2**v:,.0f} tokens" if v < 40 else f"2^{v:.1f} ≈ {2**v:.1e} tokens"


def _line(f: dict, what: str, target: float, x_max: float, up: bool = False, label="") -> str:
    """``what ≈ a + b·log2(tokens)`` with the slope's s.e. and where it reaches ``target``
    (also with the slope one s.e. shallower, when there is an s.e.)."""
    s = f"{what} ≈ {f['a']:.3f} {'+' if f['b'] >= 0 else '−'} {abs(f['b']):.4f}·log2(tokens)"
    if f["b_se"] is not None:
        s += f" (slope s.e. {f['b_se']:.4f})"
    s += f"; reaches {target:g}{label} at {_tok(_cross(f, target, up), x_max)}"
    if f["b_se"] is not None and (f["b"] > 0 if up else f["b"] < 0):
        g = {**f, "b": f["b"] - f["b_se"] if up else f["b"] + f["b_se"]}
        s += f" (slope one s.e. shallower: {_tok(_cross(g, target, up), x_max)})"
    return s


# ----------------------------------------------------------------------------- report


def write_report(res: dict) -> None:
    from harness import write_result

    meta = res["meta"]
    Ms = meta["Ms"]
    md = [
        "# HMM data sweep: P-GCD-SMC vs the amount of distillation data at fixed H (issue 20)",
        "",
        f"Command: `{meta['command_line']}`  ",
        *(["Earlier runs into the same json (resumed): "
            + "; ".join(f"`{c}`" for c in meta["runs_before"]) + "  "]
          if meta.get("runs_before") else []),
        f"Date: {meta['env']['date']}  ",
        f"Machine: {meta['env']['machine']}  ",
        f"Commit: {meta['env']['commit']}"
        + (f" (uncommitted: {', '.join(d.split()[-1] for d in meta['dirty_files'])})"
           if meta.get("dirty_files") else "") + "  ",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in meta["env"]["versions"].items()) + "  ",
        f"Wall time: {meta.get('wall_seconds', float('nan')) / 60:.1f} min (all runs together)",
        "",
        "The data axis of [`smc_hmm_size.md`](smc_hmm_size.md) (same tasks, exact posteriors, "
        "seeds, methods, EM and cell keys; its rows `H` and `H × 3 data` are this sweep's K = 1 "
        "and K = 3).  Per task H is fixed; K = the multiple of the base samples per prompt "
        "(same 16 prompts, same held-out prompts).  **LL** = held-out LL/token on the *base* "
        "held-out set (so the rows compare; **own** = on the K-sized held-out set EM stopped "
        "on); **KL**, **χ²** = exact KL(P‖q), χ²(P‖q) of the P-GCD proposal over complete "
        "outputs; **twist** = the potential's twist error (nats); TV cells: ensemble TV "
        f"(± bootstrap s.e.) and mean per-run TV, R = {meta['runs']} runs, P-GCD w = "
        f"{meta['w']}.  **Goal** (issue 20): P-GCD + potential at M ≤ GCD-SMC at 2M in ensemble "
        "TV; the gap column is TV(P-GCD + pot., M) − TV(GCD-SMC, 2M) ± the s.e. of the "
        "difference (< 0: the goal holds; < −2 s.e.: clearly).",
        "",
    ]
    for name in dict.fromkeys(n for n in meta["tasks"] + list(TASKS) if n in res["tasks"]):
        tr = res["tasks"][name]
        rows = _rows(tr)
        if not rows:
            continue
        info, r0, g = tr["info"], rows[0], tr["gcd"]
        md += [
            f"## {name} (H = {tr['H']})",
            "",
            f"Prompt: “{info['prompt']}”; budget {info['budget']}; Z = {info['Z']:.4g}, "
            f"{info['accepted_outputs']} accepted outputs, posterior entropy "
            f"{info['posterior_entropy_nats']:.2f} nats.  H = {tr['H']}: {tr['H_reason']}.  "
            f"Base held-out set: {r0['heldout_tokens'] if r0['data_factor'] == 1 else '?'} "
            f"tokens; prompted LM LL {r0['lm_heldout_ll']:.3f} nats/token on it.  GCD proposal:"
            f" KL {r0['gcd_kl']:.3f}, χ² {r0['gcd_chi2']:.3g}.",
            "",
            "| K | train tokens | LL | LL own | LL − bigram | LL − LM | best epoch | EM s | "
            "log p_hmm(C) | KL(P‖q) | χ² | twist |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            md.append(
                f"| {r['data_factor']} | {r['train_tokens']} | {r['heldout_ll']:.3f} | "
                f"{r.get('heldout_ll_own', r['heldout_ll']):.3f} | "
                f"{r['heldout_ll'] - r['bigram_heldout_ll']:+.3f} | "
                f"{r['heldout_ll'] - r['lm_heldout_ll']:+.3f} | {r['best_epoch']}/"
                f"{r['epochs_run']} | {r['em_seconds']:.0f} | {r['log_p_hmm_C']:.2f} | "
                f"{r['kl']:.3f} | {r['chi2']:.3g} | {r['twist_log_sd']:.2f} |"
            )
        an = analyse(tr, Ms)
        gp = an["tv_ensemble"]["gaps"]
        md += [
            "",
            "Ensemble TV (± bootstrap s.e.), mean per-run TV in brackets, and the goal gap:",
            "",
            "| K | " + " | ".join(f"{LABELS[m]} M = {M}" for m in PG for M in Ms) + " | "
            + " | ".join(f"gap M = {M} (vs GCD@{2 * M})" for M in Ms) + " |",
            "|---:|" + "---:|" * (len(PG) * len(Ms) + len(Ms)),
        ]
        for r in rows:
            cs = [r["cells"].get(f"{m}/M{M}") for m in PG for M in Ms]
            gs = [gp.get(str(M), {}).get(str(r["data_factor"])) for M in Ms]
            md.append(
                f"| {r['data_factor']} | "
                + " | ".join("—" if c is None else f"{c['tv_ensemble']:.3f} ± "
                             f"{c['tv_ensemble_se']:.3f} ({c['tv_run']:.3f})" for c in cs)
                + " | "
                + " | ".join("—" if v is None else f"{v['gap']:+.3f} ± {v['se']:.3f}"
                             + (" ✓" if v["gap"] <= 0 else "") for v in gs)
                + " |"
            )
        md += [
            "",
            f"GCD-SMC reference (R = {meta['runs']}; independent of the HMM): "
            + "; ".join(
                f"M = {M}: ens {g[str(M)]['tv_ensemble']:.3f} ± {g[str(M)]['tv_ensemble_se']:.3f}"
                f", run {g[str(M)]['tv_run']:.3f}" for M in sorted(map(int, g))
            )
            + ".  i.i.d. floor (R·M exact samples): "
            + ", ".join(f"M = {M}: {v:.3f}"
                        for M, v in sorted((int(k), v) for k, v in tr["iid_floor"].items()))
            + ".",
            "",
        ]
        md += _seed_table(tr) + _repro(name, tr) + [
            "",
            f"**Fits against log2(training tokens)** (least squares over the {an['n_points']} "
            f"points K ∈ {an['Ks']}; every number past the largest K is an **extrapolation**):",
            "",
        ]
        x_max = max(math.log2(r["train_tokens"]) for r in rows)
        fk = an["kl_fit"]
        if fk:
            md.append("* " + _line(fk, "KL(P‖q)", 0.0, x_max, label=" (an exact proposal)") + ".")
        fl = an["ll_fit"]
        if fl:
            lm = round(r0["lm_heldout_ll"], 3)
            md.append("* " + _line(fl, "held-out LL", lm, x_max, True, " (the prompted LM's)")
                      + ".")
        fm = an.get("kl_seed_mean_fit")
        if fm:
            md.append("* " + _line(fm, "KL(P‖q) mean over HMM seeds", 0.0, x_max,
                                   label=" (an exact proposal)")
                      + f" (over the {fm['n']} Ks {fm['Ks']} with > 1 seed).")
        for metric, title in (("tv_ensemble", "ensemble TV (the goal)"),
                              ("tv_run", "mean per-run TV")):
            for M, v in an[metric]["fits"].items():
                f = v["fit"]
                if f is None:
                    continue
                md.append(
                    f"* {title}, M = {M}: "
                    + _line(f, f"gap to GCD@{2 * int(M)}", 0.0, x_max)
                    + "; measured ≤ 0 at K ∈ "
                    + f"{sorted(map(int, v['holds_at_K'])) or 'none'}"
                    + (f" (by > 2 s.e. at K ∈ {sorted(map(int, v['clear_at_K'])) or 'none'})"
                       if metric == "tv_ensemble" else "")
                    + "."
                )
        tr["analysis"] = an
        md.append("")
    md += ["## Reading", ""] + [f"* {n}" for n in res.get("notes", [])]
    write_result(OUT, "\n".join(md) + "\n", raw=res)
    try:
        plot(res)
    except Exception as e:  # pragma: no cover - plotting is optional
        print(f"[hdata] no plot: {e}", file=sys.stderr)


def _seed_table(tr: dict) -> list[str]:
    st = {K: v for K, v in seed_stats(tr).items() if len(v) > 1}
    if not st:
        return []
    seeds = sorted({v["seed"] for vs in st.values() for v in vs})
    md = [
        "HMM seed spread per K (no SMC; the same samples, LVD and EM with another seed; seed 0 ="
        " the row's HMM): exact KL(P‖q) of the P-GCD proposal and held-out LL (base set):",
        "",
        "| K | " + " | ".join(f"KL seed {s}" for s in seeds) + " | KL mean ± s.d. | LL min … max |",
        "|---:|" + "---:|" * (len(seeds) + 2),
    ]
    for K in sorted(st, key=int):
        by = {v["seed"]: v for v in st[K]}
        kl = np.array([v["kl"] for v in st[K]])
        ll = [v["heldout_ll"] for v in st[K]]
        md.append(f"| {K} | " + " | ".join(f"{by[s]['kl']:.3f}" if s in by else "—"
                                           for s in seeds)
                  + f" | {kl.mean():.3f} ± {kl.std(ddof=1):.3f} | {min(ll):.3f} … "
                  f"{max(ll):.3f} |")
    return md + [""]


def _repro(name: str, tr: dict) -> list[str]:
    """This run's K = 1 and K = 3 rows against the size sweep's ``H`` and ``H × 3 data`` rows
    (``smc_hmm_size.json``; same code, seeds and keys, another run): the largest difference."""
    size = (load_json(SIZE_JSON, {}) or {}).get("tasks", {}).get(name, {}).get("rows", {})
    out = []
    for K in (1, 3):
        r, o = tr["rows"].get(str(K)), size.get(f"{tr['H']}" if K == 1 else f"{tr['H']}x{K}")
        if r is None or o is None:
            continue
        d = [abs(c[m] - o["cells"][key][m]) for key, c in r["cells"].items()
             if key in o["cells"] for m in ("tv_ensemble", "tv_run")]
        out.append(f"K = {K}: {r['train_tokens']} vs {o['train_tokens']} training tokens, "
                   f"LL {r['heldout_ll']:.4f} vs {o['heldout_ll']:.4f}, KL {r['kl']:.4f} vs "
                   f"{o['kl']:.4f}, log p_hmm(C) {r['log_p_hmm_C']:.3f} vs "
                   f"{o['log_p_hmm_C']:.3f}, largest |Δ| of the {len(d)} TV numbers "
                   f"{max(d, default=float('nan')):.2g}")
    if not out:
        return []
    return ["Reproduction of the size sweep's rows (`smc_hmm_size.json`, an earlier run of the "
            "same code, seeds and cache keys): " + "; ".join(out) + "."]


def plot(res: dict) -> None:
    """Per task: KL(P‖q) (row 1, with its fit), ensemble TV of P-GCD + potential at each M with
    GCD-SMC at 2M as dashed lines of the same colour (row 2), held-out LL (row 3), all against
    the training tokens (log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in res["tasks"] if res["tasks"][n]["rows"]]
    if not names:
        return
    Ms = res["meta"]["Ms"]
    fig, axes = plt.subplots(3, len(names), figsize=(5.5 * len(names), 11), squeeze=False)
    for j, name in enumerate(names):
        tr = res["tasks"][name]
        rows = _rows(tr)
        xs = np.array([r["train_tokens"] for r in rows], float)
        an = analyse(tr, Ms)
        ak, at, al = axes[0][j], axes[1][j], axes[2][j]
        ak.plot(xs, [r["kl"] for r in rows], "o-", color="C2", label="P-GCD proposal")
        fk = an["kl_fit"]
        if fk:
            xe = np.array([xs.min(), xs.max() * 4])
            ak.plot(xe, fk["a"] + fk["b"] * np.log2(xe), ":", color="C2",
                    label=f"fit ({fk['n']} pts), extrapolated ×4")
        st = {K: v for K, v in seed_stats(tr).items() if len(v) > 1}
        if st:
            tok_of = {K: tr["rows"][K]["train_tokens"] for K in st}
            ak.plot([tok_of[K] for K, vs in st.items() for _ in vs[1:]],
                    [v["kl"] for vs in st.values() for v in vs[1:]], "x", color="gray",
                    label="other HMM seeds")
            ks = sorted(st, key=int)
            ak.plot([tok_of[K] for K in ks], [np.mean([v["kl"] for v in st[K]]) for K in ks],
                    "--", color="C2", label="mean over seeds")
        ak.axhline(rows[0]["gcd_kl"], color="k", lw=1, label="GCD proposal")
        ak.set(ylabel="exact KL(P‖q), nats", title=f"{name}, H = {tr['H']}", ylim=(0, None))
        for i, M in enumerate(Ms):
            cs = [(r["train_tokens"], r["cells"].get(f"pgcd+pot/M{M}")) for r in rows]
            cs = [(x, c) for x, c in cs if c]
            at.errorbar([x for x, _ in cs], [c["tv_ensemble"] for _, c in cs],
                        yerr=[c["tv_ensemble_se"] for _, c in cs], marker="o", capsize=2,
                        color=f"C{i}", label=f"{LABELS['pgcd+pot']}, M = {M}")
            g = tr["gcd"].get(str(2 * M))
            if g:
                at.axhline(g["tv_ensemble"], color=f"C{i}", ls="--", lw=1,
                           label=f"GCD-SMC, M = {2 * M}")
        at.set(ylabel="ensemble TV", ylim=(0, None))
        al.plot(xs, [r["heldout_ll"] for r in rows], "o-", label="distilled HMM (base held-out)")
        al.axhline(rows[0]["lm_heldout_ll"], color="k", label="prompted LM")
        al.set(ylabel="held-out LL (nats/token)")
        for a in (ak, at, al):
            a.set_xscale("log", base=2)
            a.set_xlabel("training tokens")
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT.with_suffix(".png"), dpi=110)


# ----------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=["json", "date"], choices=list(TASKS))
    ap.add_argument("--Ks", nargs="+", type=int, default=[1, 3, 10, 30],
                    help="data multipliers (samples per prompt × K)")
    ap.add_argument("--H", type=int, default=None,
                    help="hidden size (default: best base-data LL in smc_hmm_size.json)")
    ap.add_argument("--Ms", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--runs", type=int, default=64, help="R: SMC runs per (method, M)")
    ap.add_argument("--em-epochs", type=int, default=30)
    ap.add_argument("--distill-prompts", type=int, default=16)
    ap.add_argument("--hmm-dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--w", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hmm-seeds", nargs="*", type=int, default=[1, 2],
                    help="extra HMM seeds per K for the seed spread of KL and LL (no SMC)")
    ap.add_argument("--deadline", default=None,
                    help="UTC HH:MM: start no (task, K) whose estimated end is past it")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--note", action="append", default=[], help="a line for the reading")
    args = ap.parse_args()
    if args.report_only:
        res = load_json(OUT.with_suffix(".json"))
        res["notes"] = res.get("notes", []) + args.note
        _attach(res, load_json(CACHE / "seeds.json", {}), args)
        write_report(res)
        return
    torch.set_num_threads(args.threads)
    t_all = time.perf_counter()
    args.stop_at = _deadline(args.deadline)
    cells_path = CACHE / "cells.json"
    cells = load_json(cells_path, {})
    for k, v in load_json(FIG2_CACHE / "cells.json", {}).items():
        cells.setdefault(k, v)
    cmd = command_line("smc_hmm_data_bench.py", args,
                       skip=("report_only", "note", "stop_at", "deadline"),
                       prefix="OMP_NUM_THREADS=1 .venv/bin/python")
    old = load_json(OUT.with_suffix(".json"), {}) or {}
    res = {
        "meta": {
            "command_line": cmd,
            "env": environment("torch", "transformers", "numpy", threads=args.threads),
            "dirty_files": git_dirty_files(),
            "w": args.w, "runs": args.runs, "Ms": args.Ms, "Ks": args.Ks,
            "tasks": args.tasks, "em_epochs": args.em_epochs,
            "wall_seconds_before": old.get("meta", {}).get("wall_seconds", 0.0),
            "runs_before": old.get("meta", {}).get("runs_before", [])
            + ([old["meta"]["command_line"]] if old.get("meta") else []),
        },
        "tasks": old.get("tasks", {}),
        "notes": old.get("notes", []) + args.note,
    }

    def save():
        save_json(cells_path, cells)

    def report(r):
        r["meta"]["wall_seconds"] = r["meta"]["wall_seconds_before"] + time.perf_counter() - t_all
        save_json(OUT.with_suffix(".json"), r)  # first, so a broken report loses nothing
        try:
            write_report(r)
        except Exception as e:  # pragma: no cover - rerun with --report-only
            print(f"[hdata] report failed: {e!r}", file=sys.stderr, flush=True)

    model, tok, vocab = load_lm()
    seeds = load_json(CACHE / "seeds.json", {})

    def save_seeds():
        save_json(CACHE / "seeds.json", seeds)

    for name in args.tasks:
        sweep(name, model, tok, vocab, args, cells, save, res, report, seeds, save_seeds)
        _attach(res, seeds, args)
        report(res)


if __name__ == "__main__":
    main()
