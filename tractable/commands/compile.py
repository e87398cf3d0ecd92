"""``tractable compile``: compile a constraint against a tokenizer and report its size.

    tractable compile --regex '\\d{4}-\\d{2}-\\d{2}' --tokenizer fixtures/tokenizers/llama3
    tractable compile --json-schema schema.json --tokenizer tok.json -o schema.safetensors
    tractable compile --grammar sql.lark --tokenizer tok.json --json

Prints the vocabulary (and its load time), then the compiled :class:`TokenAutomaton`'s states,
edges, distinct label sets, memory and compile time; ``-o`` writes it with
its ``save`` (reload it with ``tractable.load_automaton(path, vocab)``, which also reads a
``uniqueItems`` schema's checker).  ``--json``
prints the same numbers as one JSON object instead.

Exit status: 0 on success; 1 when the constraint or the tokenizer is rejected (the typed error's
message, which names the position, schema pointer or rule, goes to stderr); 2 when a compiler is
not available in this installation.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

HELP = "compile a regex, JSON Schema or grammar against a tokenizer; print its size"

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--regex", metavar="PATTERN",
                      help="a Python regular expression (full-match semantics)")
    what.add_argument("--json-schema", metavar="FILE", type=Path,
                      help="a JSON Schema document (.json)")
    what.add_argument("--grammar", metavar="FILE", type=Path,
                      help="a context-free grammar (Lark / GBNF), compiled as a regular "
                           "approximation")
    parser.add_argument("--tokenizer", metavar="PATH", type=Path, required=True,
                        help="a tokenizer.json file, or a folder holding one (and optionally "
                             "tokenizer_config.json / generation_config.json for the EOS ids)")
    parser.add_argument("--vocab-size", metavar="V", type=int, default=None,
                        help="the model's logits width when larger than the tokenizer "
                             "(padding ids are never allowed)")
    parser.add_argument("--eos", metavar="TOKEN", action="append", default=None,
                        help="an EOS id or token string (repeat for several); default: from "
                             "the tokenizer's config files")
    parser.add_argument("-o", "--output", metavar="OUT", type=Path, default=None,
                        help="write the compiled automaton here (.safetensors)")
    parser.add_argument("--json", action="store_true",
                        help="print the numbers as one JSON object")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress lines on stderr (shown for compiles over 2 s)")


def _eos(values: list[str] | None) -> list[int | str] | None:
    if values is None:
        return None
    return [int(v) if v.lstrip("-").isdigit() else v for v in values]


def _compiler(module: str, name: str):
    """``tractable.fsa.<module>.<name>``, or ``None`` when that compiler is not installed."""
    try:
        mod = importlib.import_module(f"tractable.fsa.{module}")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith(f"tractable.fsa.{module}"):
            return None
        raise
    return getattr(mod, name, None)


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


def _fail(message: str, status: int = 1) -> int:
    print(f"tractable compile: error: {message}", file=sys.stderr)
    return status


def run(args: argparse.Namespace) -> int:
    from tractable.fsa.errors import TractableError
    from tractable.fsa.progress import compile_progress
    from tractable.fsa.vocabulary import TokenVocabulary

    # what to compile, and with which compiler
    if args.regex is not None:
        kind, source = "regex", args.regex
        compile_fn = _compiler("regex", "compile_regex")
        missing = "the regex compiler (tractable.fsa.regex)"
    elif args.json_schema is not None:
        kind, source = "json-schema", str(args.json_schema)
        compile_fn = _compiler("json_schema", "compile_json_schema")
        missing = "the JSON Schema compiler (tractable.fsa.json_schema)"
    else:
        kind, source = "grammar", str(args.grammar)
        compile_fn = _compiler("grammar", "compile_grammar")
        missing = "the grammar compiler (tractable.fsa.grammar)"
    if compile_fn is None:
        return _fail(f"{missing} is not available in this installation", 2)
    if kind == "json-schema":
        try:
            payload: Any = json.loads(args.json_schema.read_text(encoding="utf-8"))
        except OSError as e:
            return _fail(f"cannot read {args.json_schema}: {e.strerror or e}")
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            return _fail(f"{args.json_schema} is not a JSON document: {e}")
    elif kind == "grammar":
        try:
            payload = args.grammar.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            return _fail(f"cannot read {args.grammar}: {e}")
    else:
        payload = args.regex

    try:
        t0 = time.perf_counter()
        vocab = TokenVocabulary.from_tokenizer_file(
            args.tokenizer, vocab_size=args.vocab_size, eos_token_ids=_eos(args.eos))
        t_vocab = time.perf_counter() - t0
        t0 = time.perf_counter()
        with contextlib.nullcontext() if args.no_progress else compile_progress():
            automaton = compile_fn(payload, vocab)
        t_compile = time.perf_counter() - t0
    except TractableError as e:
        return _fail(f"{type(e).__name__}: {e}")

    if args.output is not None:
        try:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            automaton.save(args.output)
        except OSError as e:
            return _fail(f"cannot write {args.output}: {e.strerror or e}")

    mem = automaton.memory_bytes()
    report = {
        "constraint": kind,
        "source": source,
        "tokenizer": vocab.name,
        "vocab_size": vocab.size,
        "text_tokens": int(vocab.text_token_mask.sum()),
        "eos_token_ids": list(vocab.eos_token_ids),
        "vocab_load_seconds": round(t_vocab, 6),
        "states": automaton.num_states,
        "edges": automaton.num_edges,
        "label_sets": automaton.num_labels,
        "memory_bytes": mem,
        "compile_seconds": round(t_compile, 6),
        "output": str(args.output) if args.output is not None else None,
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    rows = [
        ("constraint", f"{kind} {source}"),
        ("vocabulary", f"{vocab.name}: {vocab.size} ids ({report['text_tokens']} text), "
                       f"EOS {list(vocab.eos_token_ids)}"),
        ("vocab load", f"{t_vocab:.3f} s"),
        ("states", str(automaton.num_states)),
        ("edges", str(automaton.num_edges)),
        ("label sets", str(automaton.num_labels)),
        ("memory", f"{_kib(mem['total'])} (labels {_kib(mem['labels'])}, "
                   f"edges {_kib(mem['edges'])}, states {_kib(mem['states'])}"
                   + (f", uniqueItems checker {_kib(mem['checker'])}" if "checker" in mem
                      else "") + ")"),
        ("compile", f"{t_compile:.3f} s"),
    ]
    if args.output is not None:
        rows.append(("written", f"{args.output} ({_kib(args.output.stat().st_size)})"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0
