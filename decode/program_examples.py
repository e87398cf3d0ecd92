"""The examples of paper 004 (§2.2, Fig. 1-2) as :mod:`.program` models, runnable on SmolLM2:

* ``constrained`` — :class:`ConstrainedGeneration`: a hard constraint given as an automaton
  (default: the seed's "no word longer than five letters" after "The Fed says"), with the
  seed's two formulations — ``--proposal lm`` (M_t = the LM, G_t = 1_C: sample, then
  ``condition(c.check(tok))``) and ``--proposal lcd`` / ``gcd`` (M'_t = masked LM, G'_t = the
  mask's mass) — and ``awrs``; the class also takes ``pgcd`` with a ``PGCD`` potential as
  proposal and twist (the command line has no HMM).  With the same seed it reproduces
  :class:`~.smc.SMC` draw for draw (tests/decode/test_program.py);
* ``contains_word`` — :class:`ContainsWord`: the answer must contain a given word (the
  infilling-like task): a GCD proposal on the automaton ``(?s).*word.*`` keeps every particle
  able to fit the word within the budget, and ``condition`` checks at the end what the regex
  compiler does not express (``\\bword\\b``: a whole word, not "whales" for "whale");
* ``intersection`` — :class:`PromptIntersection`: a completion likely under two prompts,
  P(s) ∝ Π_i P_lm(s | x_i) (seed Fig. 2): ``--proposal first`` samples from the first prompt
  and observes the second; ``--proposal product`` samples from the normalized product
  (:class:`~.program_proposals.ProductProposal`, the locally optimal M'_t) and keeps the
  importance weight.

Run: ``python -m tractable.decode.program_examples constrained --particles 8 --max-tokens 12``
(``--help`` for the options).  Each prints the weighted particles, log Ẑ and the time.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence

import torch

from ..fsa.errors import InvalidArgumentError
from .constraints import as_constraint
from .lm import HFCausalLM, LanguageModel
from .program import Model, ProgramResult, run_smc
from .program_proposals import (
    AWRSProposal,
    PGCDProposal,
    ProductProposal,
    gcd_proposal,
    lcd_proposal,
)

__all__ = [
    "ConstrainedGeneration",
    "ContainsWord",
    "PromptIntersection",
    "EXAMPLES",
    "run_example",
    "main",
]

SHORT_WORDS = r"[^A-Za-z]*([A-Za-z]{1,5}[^A-Za-z]+)*[A-Za-z]{0,5}"
PROPOSALS = ("lm", "lcd", "gcd", "awrs", "pgcd", "twist")


class ConstrainedGeneration(Model):
    """p_lm(x | prompt) conditioned on a constraint within ``max_new_tokens`` (EOS included):
    the target of :class:`~.smc.SMC` with the same proposal and potential, written as a
    program.  ``potential`` (e.g. a ``PGCD``) twists the intermediate weights and is divided
    out at the end (its ``log_final`` is kept, as in SMC)."""

    def __init__(self, lm: LanguageModel, prompt_ids: Sequence[int], constraint, *,
                 max_new_tokens: int, proposal: str = "gcd", potential=None,
                 pgcd_weight: float | None = None, awrs_chunk: int = 8, vocab=None) -> None:
        super().__init__()
        if proposal not in PROPOSALS:
            raise InvalidArgumentError(f"proposal must be one of {PROPOSALS}: {proposal!r}")
        if proposal in ("pgcd", "twist") and potential is None:
            raise InvalidArgumentError(f"proposal={proposal!r} needs potential= (e.g. a PGCD)")
        C = as_constraint(constraint, vocab)
        self.ctx = self.new_context(lm, prompt_ids)
        self.c = self.ctx.constrain(C, budget=max_new_tokens)
        self.pot = self.ctx.track(potential) if potential is not None else None
        self.N = int(max_new_tokens)
        self.mode = proposal
        self.eos = frozenset(lm.eos_token_ids) | frozenset(C.eos_token_ids)
        self.proposal = {"lm": None, "lcd": lcd_proposal(self.c), "gcd": gcd_proposal(self.c),
                         "awrs": AWRSProposal(self.c, awrs_chunk) if proposal == "awrs"
                         else None,
                         "pgcd": PGCDProposal(self.c, self.pot, pgcd_weight)
                         if proposal == "pgcd" else None,
                         "twist": PGCDProposal(self.c, self.pot, twist=True)
                         if proposal == "twist" else None}[proposal]

    async def step(self) -> None:
        before = 0.0
        if self.pot is not None:
            before = self.pot.log_value()
            if self.ctx.length == 0:
                self.twist(before)  # SMC starts from the weight φ(∅)
        tok = await self.sample(self.ctx.next_token(), proposal=self.proposal)
        if self.mode == "lm":
            self.condition(self.c.check(tok))  # the constraint as a hard twist, G_t = 1_C
        eos = tok in self.eos
        if eos or self.ctx.length == self.N:
            if not eos:
                self.condition(self.c.accepting())  # budget used up: valid iff accepted
            self.finish()
            if self.pot is not None:
                self.score(self.pot.log_final())
        elif self.pot is not None:
            self.twist(self.pot.log_value() - before)


class ContainsWord(Model):
    """The answer contains ``word`` as a whole word, within ``max_new_tokens``.  Proposal: GCD
    on the automaton of ``(?s).*word.*`` (budget-aware: the word always fits); the end checks
    ``\\bword\\b`` on the decoded text (``condition``)."""

    def __init__(self, lm: LanguageModel, tokenizer, vocab, prompt_ids: Sequence[int],
                 word: str, *, max_new_tokens: int) -> None:
        super().__init__()
        from ..fsa.regex import compile_regex

        self.tokenizer = tokenizer
        self.word = word
        self.pattern = re.compile(r"\b" + re.escape(word) + r"\b")
        A = compile_regex(r"(?s).*" + re.escape(word) + r".*", vocab)
        self.ctx = self.new_context(lm, prompt_ids)
        self.c = self.ctx.constrain(A, budget=max_new_tokens)
        self.proposal = gcd_proposal(self.c)
        self.N = int(max_new_tokens)
        self.eos = frozenset(lm.eos_token_ids) | frozenset(vocab.eos_token_ids)

    def text(self) -> str:
        toks = [t for t in self.ctx.tokens if t not in self.eos]
        return self.tokenizer.decode(toks, skip_special_tokens=False)

    async def step(self) -> None:
        tok = await self.sample(self.ctx.next_token(), proposal=self.proposal)
        eos = tok in self.eos
        if eos or self.ctx.length == self.N:
            if not eos:
                self.condition(self.c.accepting())
            self.condition(self.pattern.search(self.text()) is not None)
            self.finish()


class PromptIntersection(Model):
    """P(s) ∝ Π_i P_lm(s | x_i): generate under the first prompt, observe the others (seed
    Fig. 2); ``proposal="product"`` samples from the normalized product of all prompts'
    next-token distributions instead (seed §2.2, M'_t and G'_t).  A particle ends at EOS, after
    a token for which ``stop(token)`` holds (e.g. one holding a period), or after
    ``max_new_tokens`` tokens."""

    def __init__(self, lm: LanguageModel, prompts: Sequence[Sequence[int]], *,
                 max_new_tokens: int, proposal: str = "first", stop=None, lms=None) -> None:
        super().__init__()
        if len(prompts) < 2:
            raise InvalidArgumentError("prompt intersection needs at least two prompts")
        if proposal not in ("first", "product"):
            raise InvalidArgumentError(f"proposal must be 'first' or 'product': {proposal!r}")
        lms = list(lms) if lms is not None else [lm] * len(prompts)
        self.x = [self.new_context(m, p) for m, p in zip(lms, prompts)]
        self.proposal = ProductProposal(self.x) if proposal == "product" else None
        self.N = int(max_new_tokens)
        self.stop = stop
        self.eos = frozenset(lms[0].eos_token_ids)

    async def step(self) -> None:
        w = await self.sample(self.x[0].next_token(), proposal=self.proposal)
        for x in self.x[1:]:
            self.observe(x.next_token(), w)
        if w in self.eos or self.x[0].length == self.N or (
                self.stop is not None and self.stop(w)):
            self.finish()


# ----------------------------------------------------------------------------- running


def _chat(tokenizer, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                        add_generation_prompt=True, tokenize=True)
    if not isinstance(ids, list):
        ids = list(ids["input_ids"])
    return [int(t) for t in ids]


def build_example(name: str, model, tokenizer, *, max_new_tokens: int, proposal: str | None
                  = None, word: str = "whale", prompt: str | None = None) -> Model:
    """The example ``name`` on a Hugging Face model (SmolLM2 in the tests)."""
    from tractable.models import smollm2_vocabulary

    vocab = smollm2_vocabulary(tokenizer, model)
    lm = HFCausalLM(model, tokenizer, eos_token_ids=vocab.eos_token_ids)
    if name == "constrained":
        from ..fsa.regex import compile_regex

        ids = tokenizer.encode(prompt or "The Fed says")
        return ConstrainedGeneration(lm, ids, compile_regex(SHORT_WORDS, vocab),
                                     max_new_tokens=max_new_tokens, proposal=proposal or "gcd")
    if name == "contains_word":
        ids = _chat(tokenizer, prompt or f"Write one short sentence about the sea with the "
                                          f"word {word}.")
        return ContainsWord(lm, tokenizer, vocab, ids, word, max_new_tokens=max_new_tokens)
    if name == "intersection":
        prompts = [tokenizer.encode(p) for p in
                   (prompt.split("|") if prompt else ["My favorite writer is probably",
                                                      "My favorite physicist is probably"])]

        def stop(t: int) -> bool:
            s = tokenizer.decode([t])
            return "." in s or "\n" in s

        return PromptIntersection(lm, prompts, max_new_tokens=max_new_tokens,
                                  proposal=proposal or "first", stop=stop)
    raise InvalidArgumentError(f"unknown example {name!r}; choose from {sorted(EXAMPLES)}")


EXAMPLES = {
    "constrained": "no word longer than five letters after 'The Fed says' (automaton)",
    "contains_word": "a sentence about the sea that contains a given word",
    "intersection": "a completion likely under two prompts (writer / physicist)",
}


def run_example(name: str, model, tokenizer, *, n_particles: int = 4, max_new_tokens: int = 8,
                seed: int = 0, proposal: str | None = None, word: str = "whale",
                prompt: str | None = None) -> tuple[ProgramResult, list[str]]:
    """Build and run example ``name``; returns the result and each particle's decoded text."""
    m = build_example(name, model, tokenizer, max_new_tokens=max_new_tokens, proposal=proposal,
                      word=word, prompt=prompt)
    res = run_smc(m, n_particles, seed=seed)
    ctx = m.x[0] if isinstance(m, PromptIntersection) else m.ctx
    eos = set(ctx.eos_token_ids)
    texts = []
    for p in res.particles:
        c = p.x[0] if isinstance(p, PromptIntersection) else p.ctx
        texts.append(tokenizer.decode([t for t in c.tokens if t not in eos],
                                      skip_special_tokens=False))
    return res, texts


def main(argv: Sequence[str] | None = None) -> ProgramResult:
    """Command line: ``python -m tractable.decode.program_examples NAME [options]``."""
    from tractable._syspath import drop_checkout_root

    drop_checkout_root()
    ap = argparse.ArgumentParser(prog="python -m tractable.decode.program_examples",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("name", choices=sorted(EXAMPLES))
    ap.add_argument("--particles", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--proposal", default=None,
                    help="constrained: lm|lcd|gcd|awrs; intersection: first|product")
    ap.add_argument("--word", default="whale")
    ap.add_argument("--prompt", default=None,
                    help="the prompt (intersection: two prompts separated by '|')")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    from tractable.models import load_smollm2

    torch.set_num_threads(args.threads)
    model, tok = load_smollm2()
    t0 = time.perf_counter()
    res, texts = run_example(args.name, model, tok, n_particles=args.particles,
                             max_new_tokens=args.max_tokens, seed=args.seed,
                             proposal=args.proposal, word=args.word, prompt=args.prompt)
    dt = time.perf_counter() - t0
    print(f"{args.name}: {EXAMPLES[args.name]}")
    print(f"M = {args.particles}, budget {args.max_tokens} tokens, proposal "
          f"{args.proposal or 'default'}: log Z^ = {res.log_Z:.3f}, "
          f"{res.stats['resampling_steps']} resampling steps, {dt:.1f} s")
    order = sorted(range(len(texts)), key=lambda i: -float(res.weights[i]))
    for i in order:
        mark = "*" if i == res.sample else " "
        print(f"{mark} w = {float(res.weights[i]):.3f}  {texts[i]!r}")
    return res


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
