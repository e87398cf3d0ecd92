"""Brute-force references for regex automata, and hypothesis strategies.

References (independent of :mod:`tractable.fsa.regex`: they only decode bytes and call ``re`` or
the ``regex`` package):

* :func:`reference_accepts` — the token sequence's bytes are valid UTF-8 and the decoded text
  matches with ``re.fullmatch`` (``re.search`` with ``search=True``);
* :func:`reference_viable` — some continuation of the bytes is accepted, decided with
  ``regex.fullmatch(p, s, partial=True)``.  Bytes ending inside a UTF-8 character are viable iff
  some character completing them keeps the text viable (see the function);
* :func:`decode_text` — the bytes a token sequence emits.

Generators: :func:`small_regexes` and :func:`regex_texts` (hypothesis strategies),
:func:`segmentations` (strategy) and :func:`random_segmentation` (plain ``random.Random``) —
*any* split of a byte string into vocabulary tokens, not only the tokenizer's canonical one —
:func:`sample_accepted` (a random accepted token path of an automaton) and :func:`mutations`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

__all__ = [
    "decode_text",
    "reference_accepts",
    "reference_viable",
    "split_utf8",
    "utf8_completions",
    "small_regexes",
    "regex_texts",
    "segmentations",
    "random_segmentation",
    "token_table",
    "sample_accepted",
    "mutations",
    "TEXT_ALPHABET",
]


def decode_text(vocab, ids: Sequence[int]) -> bytes:
    """The bytes emitted by ``ids`` (EOS ids skipped; ``TokenError`` on special/padding ids)."""
    return vocab.decode_bytes([int(i) for i in ids])


@lru_cache(maxsize=512)
def _re(pattern: str, flags: int):
    return re.compile(pattern, flags)


@lru_cache(maxsize=512)
def _rx(pattern: str, flags: int):
    import regex

    ascii_ = bool((flags | _re(pattern, flags).flags) & re.ASCII)
    pattern = greedy(pattern)
    return regex.compile(pattern if ascii_ else _re_classes_for_regex(pattern), flags)


_BRACE = re.compile(r"\{\d*(,\d*)?\}")


def greedy(pattern: str) -> str:
    """``pattern`` with lazy quantifiers (``*?``, ``+?``, ``??``, ``{m,n}?``) made greedy.

    Full-match languages do not depend on laziness, but ``regex``'s partial matching does: with
    a lazy quantifier it reports partial matches that no extension completes (``regex`` 2026.11:
    ``fullmatch(r"^a.*?b$", "a\\n", partial=True)`` is a match though ``.`` never reads a
    newline; the greedy pattern answers correctly).  Escapes and character classes are skipped.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":  # copy the class through its closing bracket
            j = i + 1
            if j < n and pattern[j] == "^":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            out.append(pattern[i:j + 1])
            i = j + 1
            continue
        if c == "{":
            m = _BRACE.match(pattern, i)
            if m:  # a counted repetition; a lazy marker after it is dropped
                out.append(m.group(0))
                i = m.end()
                if i < n and pattern[i] == "?":
                    i += 1
                continue
        out.append(c)
        i += 1
        if c in "*+?" and i > 1 and pattern[i - 2] != "(" and i < n and pattern[i] == "?":
            i += 1  # the lazy marker
    return "".join(out)


@lru_cache(maxsize=8)
def _re_category(esc: str) -> str:
    """``re``'s Unicode ``\\d``/``\\w``/``\\s`` (``esc`` in "dws", or upper case for the complement)
    as class items ``\\Ulo-\\Uhi...``, found by matching every code point with ``re``."""
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    rx = re.compile("\\" + esc.lower())
    ranges: list[list[int]] = []
    want_in = esc.islower()
    for c in cps:
        if (rx.match(chr(c)) is not None) == want_in:
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
    out = []
    for lo, hi in ranges:  # skip the surrogate gap
        if lo < 0xD800 <= hi or lo <= 0xDFFF < hi:
            out.append(f"\\U{lo:08x}-\\U{0xD7FF:08x}")
            lo = 0xE000
        out.append(f"\\U{lo:08x}-\\U{hi:08x}")
    return "".join(out)


def _re_classes_for_regex(pattern: str) -> str:
    """``pattern`` with ``\\d \\w \\s \\D \\W \\S`` spelled out as ``re``'s code-point classes.

    The ``regex`` package's ``\\w`` follows Unicode TR#18 (no ``No`` numbers such as ``➒``, which
    ``re`` matches) and its Unicode tables are newer than ``re``'s, so without this
    :func:`reference_viable` would disagree with ``re.fullmatch`` on such characters.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = class_start = False
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if e in "dwsDWS":
                items = _re_category(e)
                out.append(items if in_class else f"[{items}]")
            else:
                out.append(pattern[i:i + 2])
            class_start = False
            i += 2
            continue
        if in_class:
            if ch == "]" and not class_start:
                in_class = False
            class_start = False
        elif ch == "[":
            in_class = class_start = True
            out.append(ch)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def reference_accepts(pattern: str, data: bytes, flags: int = 0, *, search: bool = False) -> bool:
    """``data`` is valid UTF-8 and ``re.fullmatch(pattern, text, flags)`` (or ``re.search``)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    rx = _re(pattern, flags)
    return (rx.search(text) if search else rx.fullmatch(text)) is not None


_UTF8_RANGES = {2: (0x80, 0x7FF), 3: (0x800, 0xFFFF), 4: (0x10000, 0x10FFFF)}


def utf8_completions(tail: bytes) -> tuple[int, int] | None:
    """Inclusive code-point range ``(lo, hi)`` of the characters whose UTF-8 encoding starts with
    the incomplete sequence ``tail`` (1–3 bytes), surrogates possibly inside the range (they have
    no encoding; callers skip them); ``None`` if no character starts so."""
    if not tail:
        return None
    lead = tail[0]
    if 0xC2 <= lead <= 0xDF:
        n, payload = 2, lead & 0x1F
    elif 0xE0 <= lead <= 0xEF:
        n, payload = 3, lead & 0x0F
    elif 0xF0 <= lead <= 0xF4:
        n, payload = 4, lead & 0x07
    else:
        return None
    if len(tail) >= n or any(not 0x80 <= b <= 0xBF for b in tail[1:]):
        return None
    cp = payload
    for b in tail[1:]:
        cp = (cp << 6) | (b & 0x3F)
    rest = 6 * (n - len(tail))
    lo, hi = cp << rest, (cp << rest) | ((1 << rest) - 1)
    vlo, vhi = _UTF8_RANGES[n]
    lo, hi = max(lo, vlo), min(hi, vhi)
    if lo > hi or (0xD800 <= lo and hi <= 0xDFFF):
        return None
    return lo, hi


def split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """``(text, tail)``: ``data`` = UTF-8 of ``text`` followed by an incomplete character
    ``tail`` (possibly empty); ``None`` if ``data`` is not a prefix of any valid UTF-8."""
    try:
        return data.decode("utf-8"), b""
    except UnicodeDecodeError:
        pass
    for k in (1, 2, 3):
        if k > len(data):
            break
        try:
            text = data[:-k].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if utf8_completions(data[-k:]) is not None:
            return text, data[-k:]
        return None
    return None


def reference_viable(pattern: str, data: bytes, flags: int = 0, *, search: bool = False) -> bool:
    """Whether some byte string ``c`` makes ``data + c`` accepted (:func:`reference_accepts`).

    ``data`` = UTF-8 text ``s`` + incomplete character ``tail`` (:func:`split_utf8`; anything else
    is never viable).  With no tail: ``regex.fullmatch(pattern, s, partial=True)`` (a full or a
    partial match).  With a tail: viable iff some character ``ch`` whose encoding starts with
    ``tail`` makes ``s + ch`` viable — the continuation must finish that character before
    anything else, so this is exact.  The characters are tried one by one (up to 262,144 for a
    lone 4-byte lead byte; the pattern's own characters first, and only when ``s`` itself is
    viable), so it is slow but plain.

    The ``regex`` package follows ``re`` except in its Unicode tables (it may be a newer Unicode
    version than ``re``'s ``unicodedata``): test strings should avoid characters assigned in
    recent Unicode versions when the pattern uses ``\\w``/``\\d``/``\\s`` or IGNORECASE.
    """
    split = split_utf8(data)
    if split is None:
        return False
    text, tail = split
    return _viable(pattern, flags, search, text, tail)


@lru_cache(maxsize=65536)
def _viable(pattern: str, flags: int, search: bool, text: str, tail: bytes) -> bool:
    rx = _rx(pattern, flags)
    f = rx.search if search else rx.fullmatch
    if f(text, partial=True) is None:
        return False
    if not tail:
        return True
    lo, hi = utf8_completions(tail)
    bounds = _class_boundaries(pattern, flags)
    if bounds is not None:
        # one representative per interval of characters the pattern cannot tell apart
        import bisect

        reps = []
        cp = lo
        while cp <= hi:
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0xE000
                continue
            reps.append(cp)
            j = bisect.bisect_right(bounds, cp)
            cp = bounds[j] if j < len(bounds) else hi + 1
        candidates = reps
    else:
        first = sorted({ord(c) for c in pattern if lo <= ord(c) <= hi})
        candidates = first + [c for c in range(lo, hi + 1) if not 0xD800 <= c <= 0xDFFF]
    return any(f(text + chr(cp), partial=True) is not None for cp in candidates)


@lru_cache(maxsize=512)
def _class_boundaries(pattern: str, flags: int) -> list[int] | None:
    """Sorted code points where membership in some character item of the pattern (as given to
    the ``regex`` package) can change; characters between two consecutive boundaries are
    interchangeable for the pattern.  ``None`` under IGNORECASE (case folding relates distant
    code points): the caller then tries every character."""
    try:
        from re import _constants as C
        from re import _parser as P
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_constants as C  # type: ignore[no-redef]
        import sre_parse as P  # type: ignore[no-redef]

    compiled = _re(pattern, flags)
    if (flags | compiled.flags) & re.IGNORECASE:
        return None
    src = pattern if (flags | compiled.flags) & re.ASCII else _re_classes_for_regex(pattern)
    bounds = {0, 10, 11, 0x110000}
    ok = True

    def walk(node) -> None:
        nonlocal ok
        if isinstance(node, P.SubPattern):
            node = node.data
        if not isinstance(node, (list, tuple)):
            return
        for item in node:
            if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], type(C.IN)):
                op, av = item
                if op in (C.LITERAL, C.NOT_LITERAL):
                    bounds.update((av, av + 1))
                elif op is C.RANGE:
                    bounds.update((av[0], av[1] + 1))
                elif op is C.CATEGORY:
                    bounds.update(range(0, 129))
                elif op is C.SUBPATTERN and av[1] & re.IGNORECASE:
                    ok = False
                else:
                    walk(av)
            elif isinstance(item, (list, tuple, P.SubPattern)):
                walk(item)

    walk(P.parse(src, flags))
    return sorted(bounds) if ok else None


# --------------------------------------------------------------------------- segmentations


_TABLES: dict[str, tuple[dict[bytes, list[int]], int]] = {}


def token_table(vocab) -> tuple[dict[bytes, list[int]], int]:
    """``({token bytes: [ids]}, longest token length)`` over the text tokens (cached per
    fingerprint)."""
    hit = _TABLES.get(vocab.fingerprint)
    if hit is None:
        table: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b:
                table.setdefault(bytes(b), []).append(i)
        hit = _TABLES[vocab.fingerprint] = (table, max((len(b) for b in table), default=0))
    return hit


def _options(vocab, data: bytes) -> list[list[tuple[int, list[int]]]]:
    """``opts[i]``: (length, ids) of the tokens that can start at byte ``i`` and still let the
    rest be segmented."""
    table, maxlen = token_table(vocab)
    n = len(data)
    ok = [False] * (n + 1)
    ok[n] = True
    opts: list[list[tuple[int, list[int]]]] = [[] for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for L in range(1, min(maxlen, n - i) + 1):
            if ok[i + L]:
                ids = table.get(data[i:i + L])
                if ids:
                    opts[i].append((L, ids))
        ok[i] = bool(opts[i])
    if not ok[0]:
        raise ValueError(f"{data!r} cannot be split into tokens of this vocabulary")
    return opts


def random_segmentation(vocab, data: bytes, rng: random.Random) -> list[int]:
    """A random split of ``data`` into token ids whose bytes concatenate to ``data``: at each
    position a token length is drawn uniformly among those that keep the rest splittable, then
    an id among the ids with those bytes.  Raises ``ValueError`` if no split exists."""
    opts = _options(vocab, data)
    out: list[int] = []
    i = 0
    while i < len(data):
        L, ids = rng.choice(opts[i])
        out.append(rng.choice(ids))
        i += L
    return out


def segmentations(vocab, data: bytes):
    """Hypothesis strategy: a split of ``data`` into token ids (any split, not only the
    canonical tokenization; shrinks towards the longest tokens)."""
    from hypothesis import strategies as st

    opts = _options(vocab, data)

    @st.composite
    def _seg(draw):
        out: list[int] = []
        i = 0
        while i < len(data):
            choices = sorted(opts[i], key=lambda t: -t[0])
            L, ids = choices[draw(st.integers(0, len(choices) - 1))]
            out.append(ids[draw(st.integers(0, len(ids) - 1))])
            i += L
        return out

    return _seg()


# --------------------------------------------------------------------------- small regexes

#: Characters the strategies draw from: ASCII, 2-, 3- and 4-byte UTF-8 characters, specials.
TEXT_ALPHABET = "ab0 _-.\né中😀ß\u00a0K\u212a"

_ATOMS = [
    "a", "b", "0", "é", "中", "😀", "ß", "k", r"\.", r"\-", " ", r"\n",
    "[ab]", "[^a]", "[a-c0]", "[é-ü]", "[😀-😂]", "[^中]", "[a-z中]",
    r"\d", r"\w", r"\s", r"\D", r"\W", ".", r"\u00e9", r"\x41",
]


def small_regexes(max_leaves: int = 6):
    """Hypothesis strategy: small Python regexes built from literals (ASCII and multi-byte),
    classes (negated, ranges, ``\\d \\w \\s``, ``.``), concatenation, alternation, groups,
    greedy/lazy quantifiers and counted repetition, optionally with ``^``/``$`` anchors and an
    ``(?i)``/``(?s)`` flag."""
    from hypothesis import strategies as st

    atom = st.sampled_from(_ATOMS)

    def extend(inner):
        quant = st.sampled_from(["*", "+", "?", "*?", "{2}", "{0,2}", "{1,3}", "{2,}"])
        return st.one_of(
            st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
            st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
            st.tuples(inner, quant).map(lambda t: f"(?:{t[0]}){t[1]}"),
            inner.map(lambda s: f"({s})"),
        )

    body = st.recursive(atom, extend, max_leaves=max_leaves)
    prefix = st.sampled_from(["", "", "", "^", "(?i)", "(?s)"])
    suffix = st.sampled_from(["", "", "", "$"])
    return st.tuples(prefix, body, suffix).map(lambda t: "".join(t))


def regex_texts(max_size: int = 8):
    """Hypothesis strategy: short texts over :data:`TEXT_ALPHABET` plus any code point."""
    from hypothesis import strategies as st

    ch = st.one_of(
        st.sampled_from(TEXT_ALPHABET),
        st.characters(blacklist_categories=("Cs",)),
    )
    return st.lists(ch, max_size=max_size).map("".join)


# --------------------------------------------------------------------------- automaton walks


def _out_edges(A):
    src = A.edge_src.cpu().numpy()
    dst = A.edge_dst.cpu().numpy()
    lab = A.edge_label.cpu().numpy()
    final = A.final.cpu().numpy()
    S = A.num_states
    out: list[list[int]] = [[] for _ in range(S)]
    for e, s in enumerate(src):
        out[int(s)].append(e)
    # shortest distance (in tokens) to a final state, by backward BFS
    dist = np.full(S, np.iinfo(np.int64).max, dtype=np.int64)
    preds: list[list[int]] = [[] for _ in range(S)]
    for s, d in zip(src, dst):
        preds[int(d)].append(int(s))
    frontier = [int(s) for s in np.nonzero(final)[0]]
    dist[frontier] = 0
    while frontier:
        nxt = []
        for d in frontier:
            for s in preds[d]:
                if dist[s] > dist[d] + 1:
                    dist[s] = dist[d] + 1
                    nxt.append(s)
        frontier = nxt
    return out, dst, lab, final, dist


def sample_accepted(A, rng: random.Random, *, max_tokens: int = 24,
                    stop_prob: float = 0.25) -> list[int]:
    """A random accepted token sequence of the automaton ``A`` (no EOS): a random walk from the
    initial state choosing a uniform outgoing edge and a uniform token of its label set, stopping
    in final states with probability ``stop_prob``; past ``max_tokens`` it takes only edges
    that get closer to a final state, so it always ends accepted."""
    memo = A._memo.setdefault("testing_walk", {})
    if "out" not in memo:
        memo["out"] = _out_edges(A)
        memo["tokens"] = {}
    out, dst, lab, final, dist = memo["out"]
    tokens = memo["tokens"]
    packed = A.labels.cpu().numpy().view(np.uint32)
    state = 0
    ids: list[int] = []
    while True:
        edges = out[state]
        if final[state] and (not edges or rng.random() < stop_prob or len(ids) >= max_tokens):
            return ids
        if len(ids) >= max_tokens:
            edges = [e for e in edges if dist[dst[e]] < dist[state]]
        e = rng.choice(edges)
        li = int(lab[e])
        toks = tokens.get(li)
        if toks is None:
            bits = np.unpackbits(packed[li].view(np.uint8), bitorder="little")[: A.vocab_size]
            toks = tokens[li] = np.nonzero(bits)[0]
        ids.append(int(toks[rng.randrange(len(toks))]))
        state = int(dst[e])


_MUTATION_CHARS = "a Z0-_.:/@\n\té中😀ß"


def mutations(text: str, rng: random.Random, n: int = 3) -> list[str]:
    """``n`` random single-character edits of ``text``: insert, delete or replace one character
    (inserted characters come from ASCII, 2-, 3- and 4-byte UTF-8 characters)."""
    out = []
    for _ in range(n):
        kind = rng.randrange(3) if text else 0
        i = rng.randrange(len(text) + (1 if kind == 0 else 0)) if text else 0
        c = rng.choice(_MUTATION_CHARS)
        if kind == 0:
            out.append(text[:i] + c + text[i:])
        elif kind == 1:
            out.append(text[:i] + text[i + 1:])
        else:
            out.append(text[:i] + c + text[i + 1:])
    return out
