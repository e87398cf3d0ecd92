"""tractable.decode: samplers that condition a language model on a constraint.

* :mod:`.lm` — batched LM interface with a reorderable KV cache (HF causal LMs, toy tables);
* :mod:`.constraints` — TokenAutomaton / predicate / regex constraints behind one interface;
* :mod:`.samplers` — token-level rejection sampling, WRS, AWRS (+ Gumbel-batched and clipped);
* :mod:`.smc` — SMC with LM / LCD / GCD / AWRS / P-GCD proposals (:func:`smc`);
* :mod:`.cars` — CARS and its special cases ARS, RSFT, RS (exact samples of P(· | L)).
"""

from .cars import CARS
from .constraints import (
    AutomatonConstraint,
    Constraint,
    PrefixConstraint,
    RegexConstraint,
    as_constraint,
)
from .lm import HFCausalLM, LanguageModel, LMState, RestrictedLM, TableLM
from .samplers import TokenDraw, awrs, awrs_batched, awrs_clipped, rejection_sample, wrs
from .smc import SMC, Potential, SMCResult, resample_indices, smc

__all__ = [
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
]
