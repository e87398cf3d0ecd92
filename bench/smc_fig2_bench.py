"""Paper 002 Fig. 2 "in shape" on SmolLM2 (issue 20): SMC ensemble TV and Ẑ vs the number of
particles M for the LCD, GCD, AWRS, P-GCD and P-GCD + potential proposals, on tasks whose
posterior P(x | C) is exactly enumerable.

Tasks (SmolLM2-135M-Instruct, chat template; every accepted token sequence within the budget
enumerated with the real model, so Z = G = Σ_x P̃(x) and P(x | C) are exact):

* ``yesno`` — "Is the sky blue? Answer with one word: yes, no or maybe.", regex
  ``(Yes|No|Maybe)\\.?``, budget 7 (the task of ``tests/decode/test_smc_real.py``);
* ``date``  — Apollo 11's landing as MM/YYYY, regex ``(0[1-9]|1[0-2])/19[6-9][0-9]``, budget 8
  (7 digit/slash tokens + EOS; SmolLM2 spells digits one per token, so LCD = GCD here);
* ``json``  — a ripe tomato as ``{"color": "red"|"green"|"blue", "size": 0-9}`` (JSON Schema,
  canonical compact serialization), budget 10 (one over the 9-token minimum: LCD can spend
  tokens on spellings that no longer fit, GCD cannot).

Stages (one function each): load SmolLM2; compile each task; enumerate it (the LM's rows are
recorded once, :class:`~tractable.testing.lm_tables.RecordingLM`, and served back to every SMC
run; LCD particles that leave the GCD-allowed tree get their rows from the real model on
demand); distil one HMM per task with the project's own pipeline (task-conditioned samples of
the task prompt and other prompts of the same task, :mod:`tractable.hmm.samples`; LVD
initialisation; EM with held-out early stopping); then, for every method and every M, R
independent SMC runs → ensemble TV (the runs' weighted posteriors averaged; a run whose particles
all died contributes a point mass on "no output"), mean per-run TV, Ẑ mean, Ẑ/Z and its z-score.

Methods: ``lcd``, ``gcd``, ``awrs`` (no potential); ``pgcd`` (the P-GCD proposal
q ∝ p_lm^w p_hmm(· | x, C)^(1-w) over the GCD mask, no potential); ``pgcd+pot`` (that proposal
and the P-GCD potential φ = p_lm · p_hmm(C | x)); ``gcd+pot`` (GCD proposal + P-GCD potential);
``pgcd+pot/lm-shaped`` (optional, ``--oracle``): the same with the hand-made "LM-shaped" HMM of
the test (its emissions are SmolLM2's own mean next-token rows on the enumerated tree — an
oracle-ish look-ahead, not a distilled HMM) and ``gcd+exact`` (optional, ``--oracle``): the GCD
proposal with the exact look-ahead twist p_lm(C | x) from the enumeration (an upper bound for
any potential).  w is fixed (``--w``, default 0.5), not tuned.

Cached (git-ignored) under ``.cache/smc_fig2/``: sample stores, HMMs, enumerations, finished
grid cells (a rerun redoes only what is missing).  Writes ``bench/results/smc_fig2.{md,json,png}``.

    OMP_NUM_THREADS=1 .venv/bin/python bench/smc_fig2_bench.py
    OMP_NUM_THREADS=1 .venv/bin/python bench/smc_fig2_bench.py --tasks yesno --runs 20 --Ms 1 4
    .venv/bin/python bench/smc_fig2_bench.py --report-only   # md + png from the json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from harness import (
    ROOT,
    command_line,
    environment,
    git_dirty_files,
    load_json,
    save_json,
)
from hmm_distill_bench import YESNO
from smc_fig2_report import METHODS, ORACLES, OUT, write_report

CACHE = ROOT / ".cache" / "smc_fig2"
FAIL = ("<no output>",)  # the posterior key of a run whose particles all died

YESNO_QS = YESNO  # the yes/no questions of the distillation bench (same prompts)
DATE_EVENTS = [
    "did Apollo 11 land on the Moon", "did the Berlin Wall fall", "did World War II end in Europe",
    "was the first iPhone released", "did the Chernobyl disaster happen",
    "did the Titanic sink", "did the Wright brothers first fly",
    "did Neil Armstrong walk on the Moon", "was John F. Kennedy assassinated",
    "did the Soviet Union launch Sputnik", "did the Woodstock festival take place",
    "did the Apollo 13 accident happen", "was the Euro introduced as cash",
    "did the Beatles release Abbey Road", "was the World Wide Web invented",
    "did Martin Luther King give his I Have a Dream speech",
]
JSON_OBJECTS = [
    "a ripe tomato", "the clear sky", "fresh grass", "a strawberry", "the deep ocean",
    "an unripe banana", "a blueberry", "a fire truck", "a frog", "a sapphire", "a ruby",
    "an emerald", "a cherry", "a lime", "a blue whale", "a ladybug",
]


def _date_prompt(event: str) -> str:
    return f"In which month and year {event}? Answer with the date only, in the format MM/YYYY."


def _json_prompt(obj: str) -> str:
    return (f'Describe {obj} as a JSON object with the keys "color" (one of "red", "green" or '
            f'"blue") and "size" (one digit from 0 to 9). Answer with the JSON object only.')


JSON_SCHEMA = {"type": "object",
               "properties": {"color": {"enum": ["red", "green", "blue"]},
                              "size": {"type": "integer", "minimum": 0, "maximum": 9}},
               "required": ["color", "size"], "additionalProperties": False}


@dataclass
class Task:
    """One enumerable task: ``prompts[0]`` is the task's prompt, the rest are other prompts of
    the same task (HMM distillation only)."""

    name: str
    kind: str  # "regex" | "json"
    spec: object  # the regex, or the JSON Schema
    budget: int
    prompts: list[str]
    samples_per_prompt: int = 16
    max_length: int = 20

    @property
    def prompt(self) -> str:
        return self.prompts[0]


TASKS = {
    "yesno": Task("yesno", "regex", r"(Yes|No|Maybe)\.?", 7,
                  [q + " Answer with one word: yes, no or maybe." for q in YESNO_QS],
                  samples_per_prompt=16, max_length=16),
    "date": Task("date", "regex", r"(0[1-9]|1[0-2])/19[6-9][0-9]", 8,
                 [_date_prompt(e) for e in DATE_EVENTS], samples_per_prompt=16, max_length=16),
    "json": Task("json", "json", JSON_SCHEMA, 10, [_json_prompt(o) for o in JSON_OBJECTS],
                 samples_per_prompt=12, max_length=24),
}




@dataclass
class Ctx:
    """What every stage of one task needs (built up stage by stage)."""

    task: Task
    prompt_ids: list[int]
    A: object
    C: object
    post: dict = field(default_factory=dict)
    G: float = 0.0
    lm: object = None
    enum_prefixes: set = field(default_factory=set)
    pgcd: dict = field(default_factory=dict)
    exact: object = None
    info: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- stage 1: model


def load_lm():
    """SmolLM2-135M-Instruct, its tokenizer and :class:`TokenVocabulary`."""
    from tractable.models import load_smollm2, smollm2_vocabulary

    model, tok = load_smollm2()
    return model, tok, smollm2_vocabulary(tok, model)


# ----------------------------------------------------------------------------- stage 2: task


def compile_task(task: Task, tok, vocab) -> Ctx:
    """The task's automaton, constraint and chat-template prompt ids."""
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.fsa.json_schema import compile_json_schema
    from tractable.fsa.regex import compile_regex
    from tractable.hmm.samples import encode_prompts

    t0 = time.perf_counter()
    A = (compile_regex(task.spec, vocab) if task.kind == "regex"
         else compile_json_schema(task.spec, vocab))
    ctx = Ctx(task, encode_prompts(tok, [task.prompt])[0], A, AutomatonConstraint(A))
    ctx.info.update({"prompt": task.prompt, "constraint": task.spec, "kind": task.kind,
                     "budget": task.budget, "automaton_states": int(A.num_states),
                     "prompt_tokens": len(ctx.prompt_ids),
                     "compile_seconds": time.perf_counter() - t0})
    return ctx


# ----------------------------------------------------------------------------- stage 3: exact


class OnDemandTableLM:
    """The recorded SmolLM2 rows as an LM; a prefix outside the table (an LCD particle that left
    the GCD-allowed tree) gets its row from the real model (prompt prefill + one forward over
    the prefix, batched per call) and is added to the table."""

    def __init__(self, table: dict, vocab_size: int, eos: tuple, base, prompt_ids: list[int]):
        from tractable.testing.lm_tables import PrefixTableLM

        self.inner = PrefixTableLM(table, vocab_size, eos)
        self.base, self.prompt_ids = base, prompt_ids
        self.vocab_size, self.eos_token_ids = vocab_size, tuple(eos)
        self.computed = 0
        self.compute_seconds = 0.0

    @property
    def calls(self) -> int:
        return self.inner.calls

    @property
    def eos(self) -> int:
        return self.eos_token_ids[0]

    def start(self, prompt_ids, batch_size: int = 1):
        return self.inner.start(prompt_ids, batch_size)

    def advance(self, state, tokens):
        return self.inner.advance(state, tokens)

    def logprobs(self, state):
        eos = set(self.eos_token_ids)
        missing = sorted({p for p in state.prefixes
                          if p not in self.inner.table and not eos.intersection(p)})
        if missing:
            t0 = time.perf_counter()
            for n in sorted({len(p) for p in missing}):
                group = [p for p in missing if len(p) == n]
                st = self.base.start(self.prompt_ids, len(group))
                st, _ = self.base.advance_many(st, torch.tensor(group, dtype=torch.long))
                rows = self.base.logprobs(st)
                for p, row in zip(group, rows):
                    self.inner.table[p] = row.clone()
            self.computed += len(missing)
            self.compute_seconds += time.perf_counter() - t0
        return self.inner.logprobs(state)


def enumerate_task(ctx: Ctx, model, tok, vocab) -> None:
    """Exact P(x | C) and Z by enumerating every GCD-allowed prefix with SmolLM2 (cached)."""
    from tractable.decode.lm import HFCausalLM

    from tractable.testing.lm_tables import RecordingLM
    from tractable.testing.samplers import enumerate_posterior

    t = ctx.task
    key = hashlib.sha256(json.dumps([t.prompt, t.spec, t.budget, vocab.fingerprint],
                                    sort_keys=True, default=str).encode()).hexdigest()[:12]
    path = CACHE / t.name / f"enum_{key}.pt"
    base = HFCausalLM(model, tok, eos_token_ids=vocab.eos_token_ids)
    if path.exists():
        d = torch.load(path)
        table = {tuple(k): r for k, r in zip(d["keys"], d["rows"])}
        post, G, secs = {tuple(k): v for k, v in d["post"]}, d["G"], d["seconds"]
    else:
        t0 = time.perf_counter()
        rec = RecordingLM(base)
        post, G = enumerate_posterior(rec, ctx.C, ctx.prompt_ids, t.budget, prune=True)
        secs = time.perf_counter() - t0
        table = rec.table
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"keys": [list(k) for k in table], "rows": torch.stack(list(table.values())),
                    "post": [(list(k), v) for k, v in post.items()], "G": G, "seconds": secs},
                   path)
    ctx.post, ctx.G = post, G
    ctx.lm = OnDemandTableLM(table, vocab.size, vocab.eos_token_ids, base, ctx.prompt_ids)
    ctx.enum_prefixes = set(table)  # the rows the oracle-ish HMM is built from
    top = sorted(post.items(), key=lambda kv: -kv[1])[:5]
    ctx.info.update({"Z": G, "log_Z": math.log(G), "accepted_outputs": len(post),
                     "enumerated_prefixes": len(table), "enumeration_seconds": secs,
                     "top_outputs": [[tok.decode(list(k)), v] for k, v in top],
                     "posterior_entropy_nats": -sum(v * math.log(v) for v in post.values()
                                                    if v > 0)})
    print(f"[fig2] {t.name}: Z = {G:.4g}, {len(post)} outputs, {len(table)} prefixes "
          f"({secs:.0f} s); top {ctx.info['top_outputs'][:3]}", flush=True)


# ----------------------------------------------------------------------------- stage 4: HMM


def task_samples(t: Task, model, tok, vocab, args):
    """The task's sample store (filled with SmolLM2 where shards are missing) and its split:
    ``(tag, sampling seconds, all samples, held-out prompt indices, train, held-out)``.  Held
    out: every 5th prompt after the task's own (prompt 0, whose answers are trained on)."""
    from tractable.hmm.samples import SampleStore, encode_prompts, prompts_fingerprint

    prompts = t.prompts[:args.distill_prompts]
    ids = encode_prompts(tok, prompts)
    k, T = t.samples_per_prompt, t.max_length
    cfg = {"model": "smollm2", "num_samples": len(prompts) * k, "shard_size": 64,
           "max_length": T, "seed": args.seed, "samples_per_prompt": k, "store_hidden": True,
           "num_prompts": len(prompts), "prompts_sha256": prompts_fingerprint(ids),
           "chat_template": True}
    tag = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:10]
    store = SampleStore(CACHE / t.name / f"samples_{tag}", cfg)
    store.fill(model, ids, batch_size=32, eos_token_ids=vocab.eos_token_ids,
               pad_token_id=tok.pad_token_id or 0, progress=False)
    shards = store.manifest["shards"].values()
    s_sec = sum(r.get("seconds", 0.0) for r in shards)
    S = store.load(with_hidden=True)
    held = torch.tensor([i for i in range(1, len(prompts)) if i % 5 == 0])
    ho_m = torch.isin(S.prompt_index, held)
    return tag, s_sec, S, held, S.select(~ho_m), S.select(ho_m)


def distill_hmm(ctx: Ctx, model, tok, vocab, args):
    """One HMM per task: task-conditioned SmolLM2 samples (resumable store), LVD init, EM with
    held-out early stopping.  Held out: every 5th prompt after the task's own (prompt 0, whose
    answers are trained on).  Returns the HMM (float32, as trained); its numbers go to
    ``ctx.info["hmm"]``."""
    from tractable.hmm.distill import bigram_heldout_ll
    from tractable.hmm.em import fit, heldout_ll_per_token, smoothed_unigram
    from tractable.hmm.lvd import lvd_init
    from tractable.hmm.model import HMM

    t = ctx.task
    V = vocab.size
    prompts = t.prompts[:args.distill_prompts]
    k, T = t.samples_per_prompt, t.max_length
    tag, s_sec, S, held, tr, ho = task_samples(t, model, tok, vocab, args)
    H = args.hmm_hidden
    hdir = CACHE / t.name / f"hmm_{tag}_H{H}_e{args.em_epochs}"
    info_path = hdir / "distill.json"
    if info_path.exists():
        hmm = HMM.load(hdir, vocab)
        dinfo = json.loads(info_path.read_text())
    else:
        t0 = time.perf_counter()
        prior = smoothed_unigram(tr.tokens, tr.lengths, V, 0.1)
        kw = dict(hidden_size=H, vocab_size=V, pseudocount=0.1, emission_pseudocount=1.0)
        start = lvd_init(tr.tokens, tr.lengths, tr.hidden, emission_prior=prior, iterations=20,
                         seed=args.seed, fingerprint=vocab.fingerprint, **kw)
        init_ll = heldout_ll_per_token(start, ho.tokens, ho.lengths)
        t_init = time.perf_counter() - t0
        logs: list[dict] = []
        hmm = fit(tr.tokens, tr.lengths, ho.tokens, ho.lengths, epochs=args.em_epochs,
                  batch_size=128, init=start, patience=2, seed=args.seed, progress=False,
                  log=logs.append, fingerprint=vocab.fingerprint, **kw)
        dinfo = {"H": H, "init": "lvd", "prompts": len(prompts),
                 "heldout_prompts": held.tolist(), "samples_per_prompt": k, "max_length": T,
                 "train_sequences": len(tr), "train_tokens": tr.num_tokens,
                 "heldout_sequences": len(ho), "heldout_tokens": ho.num_tokens,
                 "sampling_seconds": s_sec,
                 "sampling_tokens_per_s": S.num_tokens / max(s_sec, 1e-9),
                 "init_heldout_ll": init_ll, "heldout_ll": hmm.meta["heldout_ll_per_token"],
                 "best_epoch": hmm.meta["best_epoch"] + 1, "epochs_run": len(logs),
                 "lvd_seconds": t_init, "em_seconds": sum(r["seconds"] for r in logs),
                 "lm_heldout_ll": float(ho.lm_logprob.double().sum()) / ho.num_tokens,
                 "bigram_heldout_ll": bigram_heldout_ll(tr.tokens, tr.lengths, ho.tokens,
                                                        ho.lengths, V, 0.1)}
        mask = torch.arange(ho.tokens.shape[1])[None, :] < ho.lengths[:, None]
        dinfo["unigram_heldout_ll"] = float(torch.log(prior[ho.tokens[mask]]).sum()) / \
            ho.num_tokens
        # how often the unconstrained samples of the task prompt satisfy the constraint
        first = S.select(S.prompt_index == 0)
        dinfo["task_prompt_samples_accepted"] = _accepted_fraction(ctx, first)
        hmm.save(hdir)
        info_path.write_text(json.dumps(dinfo, indent=1))
    ctx.info["hmm"] = dinfo
    print(f"[fig2] {t.name}: HMM H={H}, {dinfo['train_tokens']} train tokens, held-out "
          f"{dinfo['heldout_ll']:.3f} nats/token (LM {dinfo['lm_heldout_ll']:.3f}, bigram "
          f"{dinfo['bigram_heldout_ll']:.3f}), EM {dinfo['em_seconds']:.0f} s", flush=True)
    return hmm


def _accepted_fraction(ctx: Ctx, S) -> float:
    """Fraction of the sequences ``S`` that are accepted outputs within the budget N (the text
    before the first EOS if it comes within N tokens, else the first N tokens): a Monte Carlo
    estimate of Z from the unconstrained samples."""
    C, N = ctx.C, ctx.task.budget
    eos = set(C.eos_token_ids)
    ok = 0
    for row, ln in zip(S.tokens.tolist(), S.lengths.tolist()):
        x = row[:min(ln, N)]
        cut = next((i for i, v in enumerate(x) if v in eos), None)
        x = x if cut is None else x[:cut]
        st = C.start(1)
        alive = True
        for v in x:
            if not bool(C.allowed(st, N, "lcd")[0, v]):
                alive = False
                break
            st = C.advance(st, torch.tensor([v]))
        ok += int(alive and bool(C.is_accepting(st)[0]))
    return ok / max(1, len(S))


def lm_shaped_hmm(table: dict, V: int, fingerprint: str, eps: float = 1e-3):
    """The "LM-shaped" HMM of ``tests/decode/test_smc_real.py``
    (:func:`tractable.testing.hmm.lm_shaped_hmm`): H = 4, states 1-3 SmolLM2's mean next-token
    rows after 1, 2, >= 3 generated tokens on the enumerated tree."""
    from tractable.testing.hmm import lm_shaped_hmm as shaped

    return shaped(table, V, fingerprint, eps)


# ----------------------------------------------------------------------------- stage 5: SMC


def build_pgcd(ctx: Ctx, hmm, args, oracle: bool, vocab) -> None:
    """P-GCD objects of the task: ``"distilled"`` and (``oracle``) ``"lm-shaped"``."""
    from tractable.hmm.pgcd import PGCD

    t0 = time.perf_counter()
    dt = getattr(torch, args.hmm_dtype)
    ctx.pgcd["distilled"] = PGCD(ctx.A, hmm, ctx.task.budget, w=args.w, dtype=dt)
    ctx.info["hmm"]["log_p_hmm_C"] = float(ctx.pgcd["distilled"].product.log_gamma)
    ctx.info["hmm"]["product_seconds"] = time.perf_counter() - t0
    if oracle:
        table = {p: r for p, r in ctx.lm.inner.table.items() if p in ctx.enum_prefixes}
        h = lm_shaped_hmm(table, vocab.size, vocab.fingerprint)
        ctx.pgcd["lm-shaped"] = PGCD(ctx.A, h, ctx.task.budget, w=args.w, dtype=dt)
        ctx.info["lm_shaped_log_p_hmm_C"] = float(ctx.pgcd["lm-shaped"].product.log_gamma)


class _Prefixes:
    """State of :class:`ExactTwist`: per row (prefix, log p_lm(prefix), finished)."""

    def __init__(self, rows: list) -> None:
        self.rows = rows

    @property
    def batch_size(self) -> int:
        return len(self.rows)

    def select(self, idx):
        return _Prefixes([self.rows[i] for i in idx.tolist()])


class ExactTwist:
    """The exact look-ahead φ*(x) = p_lm(C | x) = Z · P(x ⊑ y) / p_lm(x) as an SMC potential,
    from the enumeration (an oracle: the best any potential can do; on the scale of
    ``log_final`` = 0).  Only for proposals that stay on the GCD-allowed tree.  With the
    ``"twist"`` proposal (its :meth:`log_next`) every run is an exact posterior draw and
    Ĝ = Z."""

    def __init__(self, ctx: Ctx) -> None:
        self.table = ctx.lm.inner.table
        self.eos = set(ctx.C.eos_token_ids)
        self.mass: dict = {}
        for y, p in ctx.post.items():
            for k in range(len(y) + 1):
                self.mass[y[:k]] = self.mass.get(y[:k], 0.0) + p
        self.log_G = math.log(ctx.G)
        self.accepted = set(ctx.post)
        self.N = ctx.task.budget
        self.children: dict = {}  # prefix -> its one-token extensions with posterior mass
        for x in self.mass:
            if x:
                self.children.setdefault(x[:-1], []).append(x)

    def start(self, batch_size: int):
        return _Prefixes([((), 0.0, False)] * batch_size)

    def advance(self, state, tokens):
        out = []
        for (pre, llm, done), v in zip(state.rows, tokens.tolist()):
            if done or v in self.eos:
                out.append((pre, llm, True))
            else:
                out.append((pre + (v,), llm + float(self.table[pre][v]), False))
        return _Prefixes(out)

    def select(self, state, idx):
        return state.select(idx)

    def log_value(self, state, remaining=None):
        return torch.tensor([0.0 if done else (self.log_G + math.log(self.mass[pre]) - llm
                                               if self.mass.get(pre, 0.0) > 0 else -math.inf)
                             for pre, llm, done in state.rows], dtype=torch.float64)

    def log_final(self, state):
        return torch.zeros(len(state.rows), dtype=torch.float64)

    def log_next(self, state, remaining=None):
        """float64 [B, V]: log φ*(x v) on the scale of :meth:`log_value` (0 where x v is a
        finished accepted output, −inf where no accepted output extends it)."""
        V = next(iter(self.table.values())).shape[0]
        out = torch.full((len(state.rows), V), -math.inf, dtype=torch.float64)
        for b, (pre, llm, done) in enumerate(state.rows):
            if done or pre in self.accepted:
                out[b, min(self.eos)] = 0.0
            if done:
                continue
            lp = self.table[pre]
            for y in self.children.get(pre, ()):
                if len(y) == self.N:  # the budget ends the output: finished
                    out[b, y[-1]] = 0.0 if y in self.accepted else -math.inf
                else:
                    out[b, y[-1]] = self.log_G + math.log(self.mass[y]) - llm - float(lp[y[-1]])
        return out


def proposal_divergences(ctx: Ctx) -> dict:
    """Exact proposal and twist quality by walking the enumerated tree (no sampling).

    Per proposal (GCD, P-GCD with each HMM): KL(P ‖ q) and χ²(P ‖ q) over complete outputs
    (1 + χ² = E_q[(w / Z)²], the relative second moment of Ẑ at M = 1).  Per P-GCD HMM also the
    twist error of its potential: at each depth t, the P-weighted standard deviation over the
    prefixes x of log p_hmm(C | x) − log p_lm(C | x) (the exact look-ahead
    p_lm(C | x) = Z · P(x ⊑ y) / p_lm(x); 0 for a perfect twist up to a constant), averaged
    over t = 1 … N − 1."""
    C, N = ctx.C, ctx.task.budget
    table = ctx.lm.inner.table
    eos = set(C.eos_token_ids)
    mass: dict = {}  # posterior mass of the outputs extending each prefix
    for y, p in ctx.post.items():
        for k in range(1, len(y) + 1):
            mass[y[:k]] = mass.get(y[:k], 0.0) + p
    props = {"gcd": None, **{f"pgcd/{k}": v for k, v in ctx.pgcd.items()},
             **{f"twist/{k}": v for k, v in ctx.pgcd.items()}}
    out = {}
    for name, pg in props.items():
        logq: dict = {}
        twist: dict = {}  # depth -> [(weight, log ratio)]
        stack = [((), None if pg is None else pg.start(1), C.start(1), 0.0, 0.0)]
        while stack:
            pre, ps, cs, lq_pre, llm = stack.pop()
            if name.startswith("pgcd/") and pre and mass.get(pre, 0.0) > 0:
                exact = math.log(ctx.G * mass[pre]) - llm
                twist.setdefault(len(pre), []).append(
                    (mass[pre], float(pg.log_value(ps)[0]) - exact))
            mask = C.allowed(cs, N - len(pre), "gcd")
            lp = table[pre].double()[None]
            if pg is None:
                lq = lp
            elif name.startswith("twist/"):  # q ∝ p_lm(v | x) p_hmm(C | x v)
                lq = lp + pg.log_next(ps).double()
            else:
                lq = pg.proposal_logprobs(lp, ps).double()
            lq = lq.masked_fill(~mask, -math.inf)
            lq = (lq - torch.logsumexp(lq, -1, keepdim=True))[0]
            for v in mask[0].nonzero().flatten().tolist():
                lv = lq_pre + float(lq[v])
                if v in eos or len(pre) + 1 == N:
                    x = pre if v in eos else pre + (v,)
                    logq[x] = lv  # each complete output has one path
                    continue
                tv = torch.tensor([v])
                stack.append((pre + (v,), None if pg is None else pg.advance(ps, tv),
                              C.advance(cs, tv), lv, llm + float(lp[0, v])))
        kl = sum(p * (math.log(p) - logq[x]) for x, p in ctx.post.items() if p > 0)
        chi2 = sum(p * math.exp(math.log(p) - logq[x]) for x, p in ctx.post.items()) - 1.0
        out[name] = {"kl": kl, "chi2": chi2,
                     "q_mass_on_outputs": sum(math.exp(v) for v in logq.values())}
        if twist:
            sds = []
            for t in sorted(twist):
                w = np.array([a for a, _ in twist[t]])
                d = np.array([b for _, b in twist[t]])
                w = w / w.sum()
                mu = float((w * d).sum())
                sds.append(math.sqrt(float((w * (d - mu) ** 2).sum())))
            out[name]["twist_log_sd_by_depth"] = sds
            out[name]["twist_log_sd"] = float(np.mean(sds))
    return out


def method_parts(ctx: Ctx, method: str):
    """(proposal, potential) of a method name."""
    if method in ("lcd", "gcd", "awrs"):
        return method, None
    if method == "pgcd":
        return "pgcd", ctx.pgcd["distilled"].proposal_only()
    if method == "pgcd+pot":
        return "pgcd", ctx.pgcd["distilled"]
    if method == "gcd+pot":
        return "gcd", ctx.pgcd["distilled"]
    if method == "pgcd+pot/lm-shaped":
        return "pgcd", ctx.pgcd["lm-shaped"]
    if method == "gcd+exact":
        return "gcd", ctx.exact
    if method == "twist+pot":
        return "twist", ctx.pgcd["distilled"]
    if method == "twist+exact":
        return "twist", ctx.exact
    raise ValueError(method)


def smc_cell(ctx: Ctx, method: str, M: int, runs: int, seed: list[int],
             boot: int = 200) -> dict:
    """R runs of one method at M particles → ensemble / per-run TV, Ẑ statistics, and a
    bootstrap (over runs) standard error of the ensemble TV."""
    from tractable.decode.smc import SMC

    from tractable.testing.samplers import total_variation, z_score

    proposal, pot = method_parts(ctx, method)
    s = SMC(ctx.lm, ctx.C, proposal=proposal, potential=pot, max_new_tokens=ctx.task.budget)
    g = np.random.default_rng(seed)
    keys = list(ctx.post) + [FAIL]
    index = {k: i for i, k in enumerate(keys)}
    P = np.zeros((runs, len(keys)))
    zs = np.zeros(runs)
    tv_run = np.zeros(runs)
    computed0 = ctx.lm.computed
    resampled = 0
    t0 = time.perf_counter()
    for r in range(runs):
        res = s.run(ctx.prompt_ids, M, seed=g)
        zs[r] = math.exp(res.log_G) if res.log_G > -math.inf else 0.0
        post = res.posterior() or {FAIL: 1.0}
        for k, v in post.items():
            P[r, index[k]] += v  # KeyError: an output outside the enumerated posterior
        tv_run[r] = total_variation(ctx.post, post)
        resampled += res.stats["resampling_steps"]
    secs = time.perf_counter() - t0
    target = np.array([ctx.post.get(k, 0.0) for k in keys])

    def tv(rows):
        return 0.5 * float(np.abs(rows.mean(0) - target).sum())

    bg = np.random.default_rng(12345)
    boots = [tv(P[bg.integers(0, runs, runs)]) for _ in range(boot)]
    return {"method": method, "M": M, "runs": runs, "tv_ensemble": tv(P),
            "tv_ensemble_se": float(np.std(boots, ddof=1)), "tv_run": float(tv_run.mean()),
            "Zhat": float(zs.mean()), "Zhat_se": float(zs.std(ddof=1) / math.sqrt(runs)),
            "Zhat_over_Z": float(zs.mean() / ctx.G), "z": z_score(zs, ctx.G),
            "failed_runs": int(P[:, index[FAIL]].sum()),
            "resampling_steps_per_run": resampled / runs, "seconds": secs,
            "seconds_per_run": secs / runs,
            "offtree_rows_computed": ctx.lm.computed - computed0}


def iid_floor(post: dict, n: int, reps: int = 200, seed: int = 0) -> float:
    """E TV(P, empirical distribution of n i.i.d. draws from P): the ensemble TV of an ideal
    sampler with as many samples as R·M particles (a reference line, not a method)."""
    p = np.array(list(post.values()))
    p = p / p.sum()
    g = np.random.default_rng(seed)
    return float(np.mean([0.5 * np.abs(g.multinomial(n, p) / n - p).sum()
                          for _ in range(reps)]))


def cell_key(task: str, method: str, M: int, args) -> str:
    """The cache key of one grid cell (everything its numbers depend on)."""
    runs = args.awrs_runs if method == "awrs" else args.runs
    return (f"{task}/{method}/M{M}/R{runs}/w{args.w}/H{args.hmm_hidden}/e{args.em_epochs}"
            f"/p{args.distill_prompts}/{args.hmm_dtype}/s{args.seed}")


def run_grid(ctx: Ctx, methods: list[str], Ms: list[int], args, cells: dict, save) -> None:
    """Every (method, M) cell of the task not yet in ``cells`` (keyed by task/method/M/runs)."""
    for method in methods:
        for M in Ms:
            runs = args.awrs_runs if method == "awrs" else args.runs
            if method == "awrs" and M > args.awrs_max_m:
                continue
            key = cell_key(ctx.task.name, method, M, args)
            if key in cells:
                continue
            seed = [args.seed, list(TASKS).index(ctx.task.name), METHODS.index(method), M]
            c = smc_cell(ctx, method, M, runs, seed)
            c["task"] = ctx.task.name
            cells[key] = c
            save()
            print(f"[fig2] {key}: TV ens {c['tv_ensemble']:.4f}±{c['tv_ensemble_se']:.4f} "
                  f"run {c['tv_run']:.4f}  Ẑ/Z {c['Zhat_over_Z']:.3f} (z {c['z']:+.2f})  "
                  f"{c['seconds']:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--methods", nargs="+", default=METHODS[:6] + ["twist+pot"],
                    choices=METHODS)
    ap.add_argument("--Ms", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--runs", type=int, default=64, help="R: SMC runs per (method, M)")
    ap.add_argument("--awrs-runs", type=int, default=40, help="R for AWRS (slow)")
    ap.add_argument("--awrs-max-m", type=int, default=32, help="largest M run with AWRS")
    ap.add_argument("--hmm-hidden", type=int, default=128, help="H of the distilled HMMs")
    ap.add_argument("--em-epochs", type=int, default=30)
    ap.add_argument("--distill-prompts", type=int, default=16,
                    help="prompts per task for distillation (the task's own first)")
    ap.add_argument("--hmm-dtype", choices=["float32", "float64"], default="float32",
                    help="dtype of the HMM x automaton products (float32: 1.5x faster; "
                    "same TV / Z-hat to 1e-7 on json)")
    ap.add_argument("--w", type=float, default=0.5, help="P-GCD proposal weight (not tuned)")
    ap.add_argument("--oracle", action="store_true",
                    help="also run pgcd+pot with the test's LM-shaped HMM (oracle-ish) and "
                    "gcd with the exact look-ahead twist from the enumeration (oracle)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--note", action="append", default=[],
                    help="a line for the report's notes (e.g. how the run was split)")
    args = ap.parse_args()
    if args.report_only:
        write_report(load_json(OUT.with_suffix(".json")))
        return
    torch.set_num_threads(args.threads)
    t_all = time.perf_counter()
    methods = list(args.methods) + (ORACLES if args.oracle else [])
    cells_path = CACHE / "cells.json"
    cells = load_json(cells_path, {})
    cmd = command_line("smc_fig2_bench.py", args, skip=("report_only", "oracle", "note"),
                       prefix="OMP_NUM_THREADS=1 .venv/bin/python")
    res = {"meta": {"command_line": cmd + (" --oracle" if args.oracle else ""),
                    "env": environment("torch", "transformers", "numpy",
                                       threads=args.threads),
                    "dirty_files": git_dirty_files(),
                    "w": args.w, "runs": args.runs, "awrs_runs": args.awrs_runs,
                    "Ms": args.Ms, "methods": methods},
           "tasks": {}, "cells": {}, "notes": NOTES + args.note}

    def save():
        save_json(cells_path, cells)

    model, tok, vocab = load_lm()
    for name in args.tasks:
        ctx = compile_task(TASKS[name], tok, vocab)
        enumerate_task(ctx, model, tok, vocab)
        hmm = distill_hmm(ctx, model, tok, vocab, args)
        build_pgcd(ctx, hmm, args, args.oracle, vocab)
        ctx.exact = ExactTwist(ctx)
        ctx.info["proposal_divergences"] = proposal_divergences(ctx)
        run_grid(ctx, methods, args.Ms, args, cells, save)
        res["cells"].update({k: cells[k] for k in (cell_key(name, m, M, args)
                                                   for m in methods for M in args.Ms)
                             if k in cells})
        res["tasks"][name] = {"info": ctx.info, "iid_floor": {
            str(M): iid_floor(ctx.post, args.runs * M) for M in args.Ms}}
        res["meta"]["wall_seconds"] = time.perf_counter() - t_all
        write_report(res)
    res["meta"]["wall_seconds"] = time.perf_counter() - t_all
    write_report(res)


NOTES = [
    "Ẑ is unbiased for every method in theory; a z-score from R runs is only meaningful when "
    "Ẑ's variance is finite and estimated well.  With heavy-tailed weights (large χ², AWRS's "
    "rejection-count estimates of the mask mass) the sample s.e. under-states the true one and "
    "|z| of 3–15 occurs without bias: at M = 1 the true relative s.e. of mean Ẑ is "
    "sqrt(χ² / R) (the exact χ² of each proposal is printed per task).",
    "At M ≤ 2 the potential has no effect at all: resampling happens when ESS < M/2, and with "
    "M = 1 or 2 the ESS is never below 1, so the twist telescopes away — P-GCD proposal + "
    "potential is the P-GCD proposal, and GCD + potential is GCD, in distribution (only the "
    "random streams differ).",
    "Ensemble TV has a floor: the runs' average of R·M weighted particles is at best as good as "
    "R·M exact samples (the i.i.d. row).  P-GCD at M/2 has half GCD's samples, so where GCD is "
    "near that floor '≤ M/2' cannot hold for any sampler; differences smaller than about two "
    "bootstrap s.e. are noise.",
    "The HMM never sees the prompt (as in the paper): it is distilled from SmolLM2's "
    "unconstrained answers to the task's prompts, which rarely satisfy C, so p_hmm(C) is "
    "small and its look-ahead p_hmm(C | x) after a constrained prefix is an extrapolation.",
    "LCD = GCD on `yesno` and `date` (every accepted output fits the budget in every spelling "
    "the automaton allows, so the masks coincide on the tree; LCD never left it there); they "
    "differ only on `json`.  Outputs are token sequences: `json`'s top two are two spellings "
    "of the same text.",
]


if __name__ == "__main__":
    main()
