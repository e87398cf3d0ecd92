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

A ``{"type": "structural_tag", ...}`` dict is compiled by
:func:`~tractable.fsa.structural_tag.compile_structural_tag` (free text with tool calls,
reasoning then an answer; the tokenizer's special tokens may be named in its literals), and
texts then show special tokens as the tokenizer writes them.  ``jump_forward=True`` appends
forced continuations unsampled (:mod:`tractable.fsa.jump_forward`; off by default because it
fixes the spelling of forced text, an approximation of the model's distribution).

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
    #: with ``jump_forward=True``: per output, how many tokens were forced (not sampled) and
    #: how many model forward calls were made; else None.
    forced_tokens: list[int] | None = None
    model_calls: list[int] | None = None


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


def _compile(constraint, vocab, schema_options: dict, tokenizer=None):
    """(automaton, kind, pydantic class or None); kind in {"automaton", "regex", "schema",
    "structural_tag"}."""
    if hasattr(constraint, "allowed_packed") and hasattr(constraint, "eos_token_ids"):
        return constraint, "automaton", None
    if isinstance(constraint, dict) and constraint.get("type") == "structural_tag":
        from ..fsa.structural_tag import compile_structural_tag, special_tokens_of

        try:
            special = special_tokens_of(tokenizer) if tokenizer is not None else None
        except Exception:  # noqa: BLE001 - a slow tokenizer: no special tokens named
            special = None
        return (compile_structural_tag(constraint, vocab, special_tokens=special,
                                       schema_options=schema_options or None),
                "structural_tag", None)
    if isinstance(constraint, str):
        from ..fsa.regex import compile_regex

        return compile_regex(constraint, vocab), "regex", None
    from ..fsa.json_schema import compile_json_schema

    model_cls = constraint if any(callable(getattr(constraint, m, None)) for m in
                                  ("model_validate_json", "validate_json")) else None
    return compile_json_schema(constraint, vocab, **schema_options), "schema", model_cls


def generate(model, tokenizer, prompts: str | Sequence[str], constraint, *,
             max_new_tokens: int, mode: str = "gcd", vocab=None, chat_template: bool = False,
             schema_options: dict | None = None, jump_forward: bool = False,
             **generate_kwargs) -> GenerateResult:
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
            A ``{"type": "structural_tag", ...}`` dict is a structural tag
            (:func:`~tractable.fsa.structural_tag.compile_structural_tag`; the tokenizer's
            special tokens may be named in its literals).
        jump_forward: where the constraint allows one continuation, append its canonical
            tokenization without sampling (:mod:`tractable.fsa.jump_forward`; one model call
            for all of them).  Off by default: it replaces the model's distribution over
            spellings of the forced text by the canonical spelling (an approximation; warned
            once).  Runs its own sampling loop, one prompt at a time, and takes only
            ``do_sample``, ``temperature``, ``top_k`` and ``num_return_sequences`` from
            ``generate_kwargs``.
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
    A, kind, model_cls = _compile(constraint, vocab, schema_options or {}, tokenizer)
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
    forced_counts = calls = None
    if jump_forward:
        rows, forced_counts, calls = _jump_forward_generate(
            model, tokenizer, vocab, A, enc, max_new_tokens, mode, eos, generate_kwargs)
        out = None
    else:
        rows = None
    proc = gcd_logits_processor(A, max_new_tokens, mode, pad_token_id=pad)
    extra = list(generate_kwargs.pop("logits_processor", None) or [])
    if rows is None:
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens,
                                 logits_processor=extra + [proc], eos_token_id=eos,
                                 pad_token_id=pad, **generate_kwargs)
        P = enc["input_ids"].shape[1]
        rows = out[:, P:].tolist()
    eos_set = set(eos)
    token_ids, texts, accepted = [], [], []
    for row in rows:
        ids: list[int] = []
        for t in row:
            ids.append(t)
            if t in eos_set:
                break
        body = [t for t in ids if t not in eos_set]
        token_ids.append(ids)
        texts.append(_decode(vocab, tokenizer, body))
        accepted.append(bool(A.accepts(body)))
    values = None
    if kind == "schema":
        values = [_parse(t, model_cls) if ok else None for t, ok in zip(texts, accepted)]
    return GenerateResult(texts, token_ids, values, accepted, A, forced_counts, calls)


def _decode(vocab, tokenizer, ids: list[int]) -> str:
    """The text of ``ids``: each token's bytes, special tokens (a structural tag's) as the
    tokenizer writes them."""
    parts: list[bytes] = []
    tb = vocab.token_bytes
    for t in ids:
        b = tb[t] if 0 <= t < len(tb) else None
        if b is None:
            b = tokenizer.decode([t]).encode("utf-8")
        parts.append(b)
    return b"".join(parts).decode("utf-8", errors="replace")


_WARNED_JUMP_FORWARD = False
_JF_KWARGS = ("do_sample", "temperature", "top_k", "num_return_sequences")


def _jump_forward_generate(model, tokenizer, vocab, A, enc, max_new_tokens: int, mode: str,
                           eos: list[int], kwargs: dict, force: bool = True):
    """Sample with GCD/LCD masks and jump-forward, one prompt (row of ``enc``) at a time.

    Each step: one forward call over the tokens appended since the last call (the sampled one
    and the forced ones), a masked draw, then :meth:`JumpForward.tokens` from the new state.
    Returns (generated ids per output, forced tokens per output, model calls per output).
    ``force=False``: the same loop without forcing (what ``bench/jump_forward_bench.py``
    compares against)."""
    global _WARNED_JUMP_FORWARD
    import warnings

    from ..fsa.jump_forward import JumpForward

    bad = [k for k in kwargs if k not in _JF_KWARGS and k != "logits_processor"]
    if bad or kwargs.get("logits_processor"):
        raise InvalidArgumentError(
            f"jump_forward=True runs its own loop and takes only {_JF_KWARGS} from "
            f"generate_kwargs; got {sorted(bad) or ['logits_processor']}")
    if force and not _WARNED_JUMP_FORWARD:
        _WARNED_JUMP_FORWARD = True
        warnings.warn("jump_forward=True: forced text is appended in its canonical "
                      "tokenization, not sampled (an approximation of the model's "
                      "distribution over tokenizations; tractable.fsa.jump_forward)",
                      UserWarning, stacklevel=3)
    if mode == "gcd":
        A.check_budget(max_new_tokens)
    do_sample = bool(kwargs.get("do_sample", False))
    temperature = float(kwargs.get("temperature", 1.0) or 1.0)
    top_k = kwargs.get("top_k")
    n_ret = int(kwargs.get("num_return_sequences", 1) or 1)
    jf = JumpForward(A, vocab, lambda s: tokenizer.encode(s, add_special_tokens=False))
    eos_set = set(eos)
    ids_all, mask_all = enc["input_ids"], enc.get("attention_mask")
    rows, forced, calls = [], [], []
    for b in range(ids_all.shape[0]):
        prompt = ids_all[b] if mask_all is None else ids_all[b][mask_all[b].bool()]
        for _ in range(n_ret):
            out: list[int] = []
            n_forced = n_calls = 0
            st = A.start()
            past = None
            feed = prompt.unsqueeze(0)
            with torch.no_grad():
                while len(out) < max_new_tokens:
                    res = model(input_ids=feed, past_key_values=past, use_cache=True)
                    n_calls += 1
                    past = res.past_key_values
                    logits = res.logits[0, -1].float()
                    r = max_new_tokens - len(out)
                    allowed = A.allowed(st, r, mode)[0].to(logits.device)
                    width = min(logits.shape[0], allowed.shape[0])
                    masked = torch.full_like(logits, float("-inf"))
                    masked[:width] = torch.where(allowed[:width], logits[:width],
                                                 torch.tensor(float("-inf")))
                    if do_sample:
                        z = masked / temperature
                        if top_k:
                            kth = torch.topk(z, min(int(top_k), z.shape[0])).values[-1]
                            z = torch.where(z < kth, torch.tensor(float("-inf")), z)
                        t = int(torch.multinomial(torch.softmax(z, dim=-1), 1))
                    else:
                        t = int(torch.argmax(masked))
                    out.append(t)
                    if t in eos_set:
                        break
                    st = A.advance(st, torch.tensor([t]))
                    new = [t]
                    if force and len(out) < max_new_tokens:
                        f = jf.tokens(st, max_new_tokens - len(out), mode)
                        if f:
                            out.extend(f)
                            n_forced += len(f)
                            new.extend(f)
                            for x in f:
                                st = A.advance(st, torch.tensor([x]))
                    feed = torch.tensor([new], device=prompt.device)
            rows.append(out)
            forced.append(n_forced)
            calls.append(n_calls)
    return rows, forced, calls


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
