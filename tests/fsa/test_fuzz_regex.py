"""Property-based fuzzing of the regex front end (issue 23), through a small vocabulary.

* Random regexes from a grammar wider than ``tractable.testing.regex.small_regexes``
  (lookaround, anchors inside the pattern, ``(?m)``/``(?x)`` flags, nested and larger counted
  repetitions, and constructs that must be refused: backreferences, ``\\b``, conditionals)
  compiled over a ~300-token vocabulary (every byte, every character of the text alphabet and
  some multi-character tokens) and checked on random texts, each split into tokens at random:
  ``A.accepts(ids) == bool(re.fullmatch(pattern, text))``.
* Random garbage patterns (strings over regex metacharacters): ``re.compile`` accepts the
  pattern iff the compiler does not raise :class:`InvalidRegexError`; whatever is raised is a
  ``TractableError``.
* Every example runs within :data:`EXAMPLE_LIMIT_S` seconds.

:func:`check_regex` returns a record that ``bench/fuzz_bench.py`` counts over many examples;
here, a short derandomized run asserts it is clean.
"""

from __future__ import annotations

import random
import re
import time
from functools import lru_cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: Seconds one example (compile and every check) may take before it counts as a hang.
EXAMPLE_LIMIT_S = 30.0

_ATOMS = ["a", "b", "0", "é", "中", "😀", " ", r"\n", "[ab]", "[^a]", "[a-c0]", r"\d", r"\w",
          r"\s", r"\W", ".", "[é-ü]", r"\.", "ab", "ba"]
_ALPHABET = "ab0 \né中😀c."


def _extend(inner):
    quant = st.sampled_from(["*", "+", "?", "*?", "{2}", "{0,2}", "{1,3}", "{2,}", "{3,5}",
                             "{0,12}"])
    look = st.sampled_from(["(?=", "(?!", "(?<=", "(?<!"])
    return st.one_of(
        st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
        st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
        st.tuples(inner, quant).map(lambda t: f"(?:{t[0]}){t[1]}"),
        inner.map(lambda s: f"({s})"),
        st.tuples(look, inner).map(lambda t: f"{t[0]}{t[1]})"),
        st.tuples(inner, st.sampled_from(["^", "$", r"\A", r"\Z"]), inner).map("".join),
    )


def regexes(max_leaves: int = 6):
    """Hypothesis strategy: regexes of the grammar above (valid for ``re`` except where a
    lookbehind is not fixed-width, which must then be an InvalidRegexError)."""
    body = st.recursive(st.sampled_from(_ATOMS), _extend, max_leaves=max_leaves)
    prefix = st.sampled_from(["", "", "", "(?m)", "(?i)", "(?s)", "(?x)"])
    refused = st.sampled_from(["", "", "", "", "", r"(a)\1", r"\bab", "(a)?(?(1)b|c)"])
    return st.tuples(prefix, body, refused).map("".join)


def texts(max_size: int = 7):
    return st.text(alphabet=_ALPHABET, max_size=max_size)


def garbage():
    """Hypothesis strategy: strings over regex metacharacters (mostly not valid regexes)."""
    return st.text(alphabet="ab()[]{}?*+|^$\\.-,0123=!<>:#PdwsbB ", max_size=12)


@lru_cache(maxsize=1)
def small_vocab():
    """Every single byte, every character of the text alphabet, some longer tokens; id 0 is
    EOS."""
    from tractable.fsa.vocabulary import TokenVocabulary

    toks: list[bytes | None] = [None] + [bytes([b]) for b in range(256)]
    toks += [c.encode() for c in _ALPHABET if len(c.encode()) > 1]
    toks += [t.encode() for t in ["ab", "ba", "a\n", "0 ", "中😀", "é中", "aab", "  ", ".a"]]
    return TokenVocabulary.from_token_bytes(toks, eos_token_ids=[0], name="fuzz-small")


def check_regex(pattern: str, samples: list[str], seed: int = 0, accepted: int = 3) -> dict:
    """Compile ``pattern`` over :func:`small_vocab` and check each text of ``samples`` (split
    into tokens at random) against ``re.fullmatch``, and the texts of ``accepted`` random
    accepted token paths of the automaton.  Record: ``status`` (``ok`` /
    ``refused`` (a TractableError; ``re_ok`` says whether ``re.compile`` accepts the pattern)
    / ``untyped``), ``error``, ``checks``, ``mismatches`` (``(text, re's verdict)``),
    ``seconds``."""
    from tractable.fsa.errors import EmptyLanguageError, InvalidRegexError, TractableError
    from tractable.fsa.regex import compile_regex

    from tractable.testing.regex import random_segmentation, sample_accepted

    rec: dict[str, Any] = {"pattern": pattern, "status": "ok", "error": "", "checks": 0,
                           "mismatches": []}
    try:
        re.compile(pattern)
        rec["re_ok"] = True
    except re.error:
        rec["re_ok"] = False
    except (RecursionError, OverflowError):
        rec["re_ok"] = None
    t0 = time.perf_counter()
    vocab = small_vocab()
    rng = random.Random(seed)
    try:
        A = compile_regex(pattern, vocab)
        for text in samples:
            ids = random_segmentation(vocab, text.encode("utf-8"), rng)
            want = re.fullmatch(pattern, text) is not None
            rec["checks"] += 1
            if A.accepts(ids) != want:
                rec["mismatches"].append((text, want))
        for _ in range(accepted):  # accepted token paths: re must match their text
            data = vocab.decode_bytes(sample_accepted(A, rng, max_tokens=12))
            rec["checks"] += 1
            text = data.decode("utf-8", "replace")
            if not (text.encode("utf-8") == data and re.fullmatch(pattern, text)):
                rec["mismatches"].append((text, False))
    except EmptyLanguageError as e:  # a pattern matching nothing: every text must fail re too
        rec["status"], rec["error"] = "empty", str(e)[:200]
        for text in samples:
            rec["checks"] += 1
            if re.fullmatch(pattern, text) is not None:
                rec["mismatches"].append((text, True))
    except TractableError as e:
        rec["status"], rec["error"] = "refused", f"{type(e).__name__}: {e}"[:300]
        rec["invalid"] = isinstance(e, InvalidRegexError)
    except Exception as e:  # noqa: BLE001 - an untyped exception is what is being counted
        rec["status"], rec["error"] = "untyped", f"{type(e).__name__}: {e}"[:300]
    rec["seconds"] = time.perf_counter() - t0
    return rec


def assert_clean(rec: dict) -> None:
    """No untyped exception, no hang, no disagreement with ``re``; an InvalidRegexError
    exactly where ``re.compile`` refuses the pattern."""
    p = rec["pattern"]
    assert rec["status"] != "untyped", (rec["error"], p)
    assert rec["seconds"] < EXAMPLE_LIMIT_S, (rec["seconds"], p)
    assert not rec["mismatches"], (rec["mismatches"][:3], p)
    if rec["re_ok"] is False:
        assert rec["status"] == "refused" and rec["invalid"], (rec["status"], p)
    if rec["status"] == "refused" and rec["invalid"]:
        assert rec["re_ok"] is not True or "look-behind" in rec["error"], (rec["error"], p)


SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@SETTINGS
@given(regexes(), st.lists(texts(), min_size=1, max_size=8), st.integers(0, 2**16))
def test_fuzz_regex_tokens_against_re(pattern, samples, seed):
    assert_clean(check_regex(pattern, samples, seed))


@SETTINGS
@given(garbage(), st.lists(texts(4), min_size=1, max_size=3))
def test_fuzz_garbage_patterns_are_typed(pattern, samples):
    assert_clean(check_regex(pattern, samples))


def test_fuzz_checks_can_fail(monkeypatch):
    """The harness catches what it is for: with ``re.fullmatch`` negated every check
    mismatches, and an untyped exception is reported as one."""
    from tractable.fsa.regex import compile as R

    rec = check_regex("a(b|c)*", ["abcb", "x", ""])
    assert rec["status"] == "ok" and not rec["mismatches"] and rec["checks"] == 3 + 3
    real = re.fullmatch
    monkeypatch.setattr(re, "fullmatch", lambda p, s: None if real(p, s) else True)
    assert len(check_regex("a(b|c)*", ["abcb", "x", ""], accepted=0)["mismatches"]) == 3
    monkeypatch.setattr(re, "fullmatch", real)

    def boom(*a, **k):
        raise KeyError("x")

    monkeypatch.setattr(R, "regex_to_nfa", boom)
    R.clear_regex_cache()
    assert check_regex("a(b|c)*d", ["ad"])["status"] == "untyped"
