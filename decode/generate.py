"""One call, one budget: constrained generation with Hugging Face models.

    import tractable
    texts = tractable.generate(model, tokenizer, ["A date: "], r"\\d{4}-\\d{2}-\\d{2}",
                               max_new_tokens=12).texts
    people = tractable.generate_json(model, tokenizer, "Describe a person as JSON.", Person,
                                     max_new_tokens=64)        # validated Person instances

:func:`generate` compiles the constraint against the model's vocabulary (a regex string, a JSON
Schema dict/bool, a pydantic model class or ``TypeAdapter``, or an already compiled automaton),
builds :func:`~.processor.gcd_logits_processor` with ``max_new_tokens`` and passes the *same*
``max_new_tokens`` to ``model.generate``: the budget is given once, so every GCD output is
accepted when generation stops (paper 002 §3.2), at EOS or at the budget.  (With the processor
and ``generate`` called separately the two budgets can disagree; see :mod:`.processor`.)

Prompts are left-padded as one batch; EOS ids are the tokenizer's, the model's
``generation_config`` ones and ChatML's ``<|im_end|>`` where the tokenizer has it, and
``generate`` is told to stop on exactly those.  Texts are decoded from the tokens' bytes
(EOS and padding removed), so they are the exact strings the automaton accepted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..fsa.errors import InvalidArgumentError
from .processor import gcd_logits_processor

__all__ = ["GenerateResult", "generate", "generate_json", "model_vocabulary"]


@dataclass(frozen=True)
class GenerateResult:
    """The outputs of :func:`generate`, one entry per prompt (times ``num_return_sequences``).

    ``texts``: decoded outputs (EOS removed).  ``token_ids``: generated ids per output, EOS
    included where generated.  ``values``: for a JSON Schema constraint the parsed JSON value
    of each text (a pydantic model instance for a pydantic class), else None.  ``accepted``:
    whether the automaton accepts each output (always True under GCD).  ``automaton``: the
    compiled constraint (reuse it: compiling is the expensive part).
    """

    texts: list[str]
    token_ids: list[list[int]]
    values: list[Any] | None
    accepted: list[bool]
    automaton: Any


def model_vocabulary(model, tokenizer):
    """The :class:`~tractable.fsa.vocabulary.TokenVocabulary` of ``tokenizer`` as ``model`` sees
    it: ``model``'s logits width, and every id generation stops on (module docstring)."""
    from ..fsa.vocabulary import TokenVocabulary

    eos: set[int] = set()
    for src in (getattr(tokenizer, "eos_token_id", None),
                getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if isinstance(src, int):
            eos.add(src)
        elif src is not None:
            eos.update(int(x) for x in src)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end >= 0 and im_end != getattr(tokenizer, "unk_token_id",
                                                                      None):
        eos.add(im_end)
    width = model.get_output_embeddings().weight.shape[0]
    return TokenVocabulary.from_huggingface(tokenizer, vocab_size=int(width),
                                            eos_token_ids=sorted(eos) or None)


def _compile(constraint, vocab, schema_options: dict):
    """(automaton, kind, pydantic class or None); kind in {"automaton", "regex", "schema"}."""
    if hasattr(constraint, "allowed_packed") and hasattr(constraint, "eos_token_ids"):
        return constraint, "automaton", None
    if isinstance(constraint, str):
        from ..fsa.regex import compile_regex

        return compile_regex(constraint, vocab), "regex", None
    from ..fsa.json_schema import compile_json_schema

    model_cls = constraint if any(callable(getattr(constraint, m, None)) for m in
                                  ("model_validate_json", "validate_json")) else None
    return compile_json_schema(constraint, vocab, **schema_options), "schema", model_cls


def generate(model, tokenizer, prompts: str | Sequence[str], constraint, *,
             max_new_tokens: int, mode: str = "gcd", vocab=None, chat_template: bool = False,
             schema_options: dict | None = None, **generate_kwargs) -> GenerateResult:
    """Generate constrained outputs for ``prompts`` with one budget.

    Args:
        model: a Hugging Face causal LM (``generate``).
        tokenizer: its fast tokenizer.
        prompts: one prompt or a list (one batch, left-padded).
        constraint: a regex (``str``, Python ``re`` syntax, full match), a JSON Schema
            (``dict``/``bool``), a pydantic model class or ``TypeAdapter``, or a compiled
            automaton (``TokenAutomaton``/``UniqueItemsAutomaton`` over ``vocab``).
        max_new_tokens: the budget, EOS included, for both the masks and ``generate``.
        mode: ``"gcd"`` (every output accepted) or ``"lcd"`` (greedy masking).
        vocab: the model's vocabulary (default :func:`model_vocabulary`).
        chat_template: wrap each prompt as a user turn with the tokenizer's chat template.
        schema_options: keyword arguments of ``compile_json_schema`` (e.g. ``canonical``).
        **generate_kwargs: passed to ``model.generate`` (``do_sample``, ``temperature``,
            ``num_return_sequences``, extra ``logits_processor`` — ours runs last).
    Returns:
        :class:`GenerateResult`.
    Raises:
        ValueError: ``max_new_tokens`` or ``logits_processor``-like budget arguments given
            twice (``max_length``, ``max_new_tokens`` in ``generate_kwargs``).
        UnsatisfiableBudgetError: no accepted output fits in ``max_new_tokens``.
        the compile errors of the constraint (typed ``TractableError`` subclasses).
    """
    for k in ("max_length", "max_new_tokens", "min_new_tokens", "min_length"):
        if k in generate_kwargs:
            raise InvalidArgumentError(
                f"{k} in generate_kwargs: the budget is max_new_tokens, given once")
    if isinstance(prompts, str):
        prompts = [prompts]
    vocab = vocab if vocab is not None else model_vocabulary(model, tokenizer)
    A, kind, model_cls = _compile(constraint, vocab, schema_options or {})
    if chat_template:
        prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}],
                                                 tokenize=False, add_generation_prompt=True)
                   for p in prompts]
    eos = sorted(int(e) for e in A.eos_token_ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(list(prompts), return_tensors="pt", padding=True,
                        add_special_tokens=not chat_template)
    finally:
        tokenizer.padding_side = side
    enc = {k: v.to(model.device) for k, v in enc.items()}
    proc = gcd_logits_processor(A, max_new_tokens, mode, pad_token_id=pad)
    extra = list(generate_kwargs.pop("logits_processor", None) or [])
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, logits_processor=extra + [proc],
                             eos_token_id=eos, pad_token_id=pad, **generate_kwargs)
    P = enc["input_ids"].shape[1]
    eos_set = set(eos)
    token_ids, texts, accepted = [], [], []
    for row in out[:, P:].tolist():
        ids: list[int] = []
        for t in row:
            ids.append(t)
            if t in eos_set:
                break
        body = [t for t in ids if t not in eos_set]
        token_ids.append(ids)
        texts.append(vocab.decode_bytes(body).decode("utf-8", errors="replace"))
        accepted.append(bool(A.accepts(body)))
    values = None
    if kind == "schema":
        values = [_parse(t, model_cls) if ok else None for t, ok in zip(texts, accepted)]
    return GenerateResult(texts, token_ids, values, accepted, A)


def _parse(text: str, model_cls) -> Any:
    if model_cls is None:
        return json.loads(text)
    check = getattr(model_cls, "model_validate_json", None) or model_cls.validate_json
    return check(text)


def generate_json(model, tokenizer, prompts: str | Sequence[str], schema, *,
                  max_new_tokens: int, **kwargs) -> list[Any]:
    """:func:`generate` with a JSON Schema or pydantic model; returns the parsed values (model
    instances for a pydantic class; ``None`` for an output that was not accepted, which GCD
    never produces)."""
    res = generate(model, tokenizer, prompts, schema, max_new_tokens=max_new_tokens, **kwargs)
    return list(res.values or [])
