"""tractable: constraints compiled to token-level NFAs, budget-aware masks, exact samplers.

    import tractable
    vocab = tractable.TokenVocabulary.from_huggingface(tokenizer)
    A = tractable.compile_regex(r"\\d{4}-\\d{2}-\\d{2}", vocab)
    proc = tractable.gcd_logits_processor(A, max_new_tokens=16)

Names are imported lazily, so ``import tractable`` needs neither transformers nor Triton.

The facade's own modules (the work is done in :mod:`tractable.fsa`, :mod:`tractable.kernels`,
:mod:`tractable.hmm` and :mod:`tractable.decode`):

* this file — the public names, re-exported from where they are defined;
* :mod:`.grammar` — ``tractable.grammar``, the grammar constraints' public names;
* :mod:`.models` — the bundled real model (SmolLM2-135M-Instruct, converted once);
* :mod:`.cli` and ``commands/`` — the ``tractable`` command (``compile``, ``demo``,
  ``sample``, ``distill``); :mod:`._syspath` keeps a checkout's root off ``sys.path`` for
  ``python -m`` entry points;
* ``testing/`` — brute-force references and hypothesis strategies the tests share.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # fsa: compile once, reuse
    "TokenVocabulary": "tractable.fsa.vocabulary",
    "TokenAutomaton": "tractable.fsa.automaton",
    "load_automaton": "tractable.fsa.automaton_load",
    "AutomatonState": "tractable.fsa.state",
    "compile_regex": "tractable.fsa.regex",
    "compile_json_schema": "tractable.fsa.json_schema",
    "compile_grammar": "tractable.fsa.grammar",
    "compile_structural_tag": "tractable.fsa.structural_tag",
    "compile_reasoning_then_schema": "tractable.fsa.structural_tag",
    "special_tokens_of": "tractable.fsa.structural_tag",
    "JumpForward": "tractable.fsa.jump_forward",
    "verify_draft": "tractable.fsa.speculative",
    # decoding
    "gcd_logits_processor": "tractable.decode.processor",
    "pgcd_logits_processor": "tractable.hmm.pgcd",
    "HMM": "tractable.hmm.model",
    "smc": "tractable.decode.smc",
    "run_smc": "tractable.decode.program",
    "generate": "tractable.decode.generate",
    "generate_json": "tractable.decode.generate",
    # errors
    "TractableError": "tractable.fsa.errors",
    "InvalidArgumentError": "tractable.fsa.errors",
    "InvalidArgumentTypeError": "tractable.fsa.errors",
    "InvalidRegexError": "tractable.fsa.errors",
    "UnsupportedRegexError": "tractable.fsa.errors",
    "VocabularyError": "tractable.fsa.errors",
    "VocabularyMismatchError": "tractable.fsa.errors",
    "AutomatonFormatError": "tractable.fsa.errors",
    "AutomatonFileNotFoundError": "tractable.fsa.errors",
    "EmptyLanguageError": "tractable.fsa.errors",
    "UnsatisfiableBudgetError": "tractable.fsa.errors",
    "ForeignStateError": "tractable.fsa.errors",
    "UnsupportedSchemaError": "tractable.fsa.errors",
    "InvalidSchemaError": "tractable.fsa.errors",
    "UnresolvedReferenceError": "tractable.fsa.errors",
    "GrammarError": "tractable.fsa.errors",
    "GrammarLimitError": "tractable.fsa.grammar",
    "LarkNotInstalledError": "tractable.fsa.grammar",
    "TokenError": "tractable.fsa.errors",
    "BudgetExceededError": "tractable.fsa.errors",
    "LiftSizeError": "tractable.fsa.errors",
    "compile_progress": "tractable.fsa.progress",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'tractable' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
