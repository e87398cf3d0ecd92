"""tractable.decode: samplers that condition a language model on a constraint.

Greedy masking in the frameworks users already run:

* :mod:`.token_bitmask` — packed masks applied to logits (a new tensor, or in place);
* :mod:`.processor` — :func:`gcd_logits_processor` / LCD for Hugging Face ``generate``;
* :mod:`.generate` — one call, one budget: :func:`generate` / :func:`generate_json` (regex,
  JSON Schema, pydantic model or automaton in; texts, parsed values or model instances out);
* :mod:`.vllm_processor` — the same masks as a vLLM V1 logits processor, per-request
  constraints in ``SamplingParams.extra_args``.

Samplers faithful to p(x | C), in the order they build on each other:

* :mod:`.lm` — batched LM interface with a reorderable KV cache (HF causal LMs, toy tables);
* :mod:`.constraints` — TokenAutomaton / predicate / regex constraints behind one interface;
  :mod:`.unique_constraint` — JSON Schema ``uniqueItems`` checked per request, as one of them;
* :mod:`.samplers` — token-level rejection sampling, WRS, AWRS (+ Gumbel-batched and clipped);
* :mod:`.smc` — SMC with LM / LCD / GCD / AWRS / P-GCD proposals (:func:`smc`);
* :mod:`.cars` — CARS and its special cases ARS, RSFT, RS (exact samples of P(· | L));
* :mod:`.asap` — ASAp (grammar-aligned decoding, paper 003) on the prefix trie shared with CARS
  (:mod:`.prefix_trie`);
* :mod:`.program` — programmable SMC (paper 004, LLaMPPL-style): a :class:`Model` with an async
  ``step()`` calling ``sample`` / ``observe`` / ``condition`` / ``twist``, run by :func:`run_smc`;
* :mod:`.program_proposals` — token proposals for programs (LCD/GCD masks, AWRS, P-GCD, products);
  :mod:`.program_examples` — paper 004's examples as programs, runnable on SmolLM2.
"""

from .asap import ASAp, ASApDraw
from .cars import CARS
from .constraints import (
    AutomatonConstraint,
    Constraint,
    PrefixConstraint,
    RegexConstraint,
    as_constraint,
)
from .lm import HFCausalLM, LanguageModel, LMState, RestrictedLM, TableLM
from .prefix_trie import (
    PrefixTrie,
    TrieFileNotFoundError,
    TrieFormatError,
    TrieFrozenError,
    TrieNode,
)
from .program import (
    Categorical,
    ConstraintTracker,
    Context,
    Model,
    NextToken,
    PotentialTracker,
    ProgramResult,
    run_smc,
)
from .program_proposals import (
    AWRSProposal,
    MaskedProposal,
    PGCDProposal,
    ProductProposal,
    TokenProposal,
    gcd_proposal,
    lcd_proposal,
)
from .samplers import TokenDraw, awrs, awrs_batched, awrs_clipped, rejection_sample, wrs
from .smc import SMC, Potential, SMCResult, resample_indices, smc

__all__ = [
    "ASAp",
    "ASApDraw",
    "PrefixTrie",
    "TrieNode",
    "TrieFormatError",
    "TrieFileNotFoundError",
    "TrieFrozenError",
    "CARS",
    "AutomatonConstraint",
    "Constraint",
    "PrefixConstraint",
    "RegexConstraint",
    "as_constraint",
    "HFCausalLM",
    "LanguageModel",
    "LMState",
    "RestrictedLM",
    "TableLM",
    "TokenDraw",
    "awrs",
    "awrs_batched",
    "awrs_clipped",
    "rejection_sample",
    "wrs",
    "SMC",
    "Potential",
    "SMCResult",
    "resample_indices",
    "smc",
    "Model",
    "Context",
    "NextToken",
    "Categorical",
    "ConstraintTracker",
    "PotentialTracker",
    "TokenProposal",
    "MaskedProposal",
    "lcd_proposal",
    "gcd_proposal",
    "AWRSProposal",
    "PGCDProposal",
    "ProductProposal",
    "ProgramResult",
    "run_smc",
]
