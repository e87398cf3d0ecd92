"""Structural tags: free text with constrained regions, compiled to one token automaton.

Tool calls and reasoning are *mixed* outputs: free text until a trigger (``<tool_call>``), then
a region constrained by the called tool's JSON Schema, then free text again; or
``<think>…</think>`` and then a JSON answer.  xgrammar calls the description a *structural tag*
and llguidance a lazy grammar.  Here the whole description is one regular language, built as a
byte NFA by composition and lifted once by :meth:`~.automaton.TokenAutomaton.from_byte_nfa`, so
the GCD budget guarantee (paper 002 §3.2: every walk within the budget ends accepted) covers the
whole output, free text, trigger, region and end tag included.

Spec (modelled on xgrammar's ``structural_tag`` response format; ``{"type": "structural_tag",
"format": F}`` or a format ``F`` itself):

* ``{"type": "const_string", "value": s}`` — exactly ``s``;
* ``{"type": "json_schema", "json_schema": schema}`` — :func:`~.json_schema.json_schema_to_nfa`
  (``schema_options`` apply); ``{"type": "regex", "pattern": p}`` (full match);
  ``{"type": "grammar", "grammar": g}`` (its regular under-approximation);
* ``{"type": "any_text", "excluded_str": [...]}`` — any UTF-8 text containing none of the
  excluded strings (never a special token);
* ``{"type": "sequence", "elements": [...]}``, ``{"type": "or", "elements": [...]}``;
* ``{"type": "tag", "begin": b, "content": F, "end": e}`` — ``b F e``.  With ``any_text``
  content the content ends at the *first* occurrence of ``e`` (lazy, as in xgrammar);
* ``{"type": "triggered_tags", "triggers": [...], "tags": [tag, ...], "at_least_one": false,
  "stop_after_first": false}`` — free text until the first occurrence of a trigger, then a tag
  whose ``begin`` starts with that trigger, then free text again (repeated).  ``at_least_one``:
  the output starts with a tag (no text before the first one, as in xgrammar);
  ``stop_after_first``: the element ends after the first tag.
* ``{"type": "tags_with_separator", "tags": [...], "separator": s, "at_least_one",
  "stop_after_first"}`` — zero or more tags separated by ``s``, no other text.
* xgrammar's older form ``{"type": "structural_tag", "structures": [{"begin", "schema", "end"}],
  "triggers": [...]}`` is read as ``triggered_tags`` with ``json_schema`` contents.

Free text without a trigger is regular: the Aho–Corasick automaton of the stop strings
(triggers, end tag, excluded strings) reads the text byte by byte, in product with the UTF-8
validity automaton, and a state where a stop string has just been completed leaves the free
text.  "First occurrence" means: scanning left to right, the first position where *some* stop
string ends decides (an end tag closes the content, a trigger dispatches to its tags, an
excluded string rejects; several triggers ending there are all allowed).

Special tokens
--------------
A special token (``special: true`` in the tokenizer: Llama-3's ``<|start_header_id|>``) emits no
text in :class:`~.vocabulary.TokenVocabulary` (its bytes are ``None``), so no byte language can
reach it.  Name such tokens in ``special_tokens`` (``{"<|python_tag|>": id}``; see
:func:`special_tokens_of`) and each occurrence of their text in a literal of the spec (a
trigger, ``begin``, ``end``, separator or constant) means that single token, not its spelling.
They are compiled with *sentinels*: each used special token gets the two bytes ``0xFF k``, a
byte that never occurs in UTF-8 text, the lift runs over a copy of the vocabulary in which those
ids emit their sentinel and tokens whose bytes hold a ``0xFF`` emit nothing (no UTF-8 language
reads them), and the result carries the real vocabulary's fingerprint.  Exact: ``0xFF`` occurs
only as a sentinel's first byte, so a token sequence spells a sentinel iff it holds that special
token there.  Special tokens are read only at UTF-8 character boundaries.  Tokens that are added
but *not* special (Qwen3's ``<tool_call>``, ``<think>``) emit their text and need nothing: the
single token and every spelling of the same bytes are accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from . import nfa as N
from .errors import InvalidArgumentError, InvalidArgumentTypeError
from .nfa import ByteNFA
from .vocabulary import TokenVocabulary, require_vocabulary

__all__ = [
    "compile_structural_tag",
    "structural_tag_to_nfa",
    "reasoning_then_format",
    "compile_reasoning_then_schema",
    "special_tokens_of",
    "SENTINEL_BYTE",
]

#: First byte of every special-token sentinel (never part of valid UTF-8).
SENTINEL_BYTE = 0xFF
_FF = 1 << SENTINEL_BYTE
_MAX_SPECIAL = 255

# The UTF-8 validity DFA: state -> [(byte mask, next state)]; state 0 is a character boundary.
_UTF8: list[list[tuple[int, int]]] = [
    [(N.mask_of(range(0x00, 0x80)), 0), (N.mask_of(range(0xC2, 0xE0)), 1),
     (N.mask_of([0xE0]), 2), (N.mask_of(list(range(0xE1, 0xED)) + [0xEE, 0xEF]), 3),
     (N.mask_of([0xED]), 4), (N.mask_of([0xF0]), 5), (N.mask_of(range(0xF1, 0xF4)), 6),
     (N.mask_of([0xF4]), 7)],
    [(N.mask_of(range(0x80, 0xC0)), 0)],
    [(N.mask_of(range(0xA0, 0xC0)), 1)],
    [(N.mask_of(range(0x80, 0xC0)), 1)],
    [(N.mask_of(range(0x80, 0xA0)), 1)],
    [(N.mask_of(range(0x90, 0xC0)), 3)],
    [(N.mask_of(range(0x80, 0xC0)), 3)],
    [(N.mask_of(range(0x80, 0x90)), 3)],
]


class _Arena:
    """One growing epsilon-NFA (Thompson's construction in one numbering)."""

    def __init__(self) -> None:
        self.n = 0
        self.edges: list[tuple[int, int, int]] = []
        self.eps: list[tuple[int, int]] = []

    def state(self) -> int:
        self.n += 1
        return self.n - 1

    def embed(self, a: ByteNFA, where: str) -> tuple[int, int]:
        """Copy ``a``; (entry, exit) with one fresh exit state."""
        if any(m & _FF for _, m, _ in a.edges):
            raise InvalidArgumentError(
                f"structural tag {where}: the constraint reads byte 0xFF, which is not UTF-8")
        k = self.n
        self.n += a.num_states
        self.edges.extend((s + k, m, d + k) for s, m, d in a.edges)
        self.eps.extend((s + k, d + k) for s, d in a.epsilons)
        out = self.state()
        self.eps.extend((f + k, out) for f in a.finals)
        return a.start + k, out

    def chain(self, data: bytes) -> tuple[int, int]:
        i = o = self.state()
        for b in data:
            nxt = self.state()
            self.edges.append((o, 1 << b, nxt))
            o = nxt
        return i, o


class _Compiler:
    def __init__(self, special: Mapping[str, int], schema_options: dict,
                 eos_token_ids: Sequence[int] = ()):
        self.eos = {int(e) for e in eos_token_ids}
        # longest names first, so that a name containing another is split as itself
        self.special = sorted(special.items(), key=lambda kv: -len(kv[0]))
        self.sentinel: dict[int, int] = {}  # token id -> sentinel index k
        self.schema_options = schema_options
        self.a = _Arena()
        self._leaf_cache: dict[str, ByteNFA] = {}

    # ------------------------------------------------------------ literals

    def pieces(self, text: str, where: str) -> list[bytes | int]:
        """``text`` split into UTF-8 runs (bytes) and special token ids (int)."""
        if not isinstance(text, str):
            raise InvalidArgumentTypeError(f"structural tag {where}: expected a string, got "
                                           f"{type(text).__name__}")
        out: list[bytes | int] = []
        i = start = 0
        while i < len(text):
            for name, tid in self.special:
                if name and text.startswith(name, i):
                    if start < i:
                        out.append(text[start:i].encode("utf-8"))
                    out.append(tid)
                    i += len(name)
                    start = i
                    break
            else:
                i += 1
        if start < len(text):
            out.append(text[start:].encode("utf-8"))
        return out

    def sentinel_bytes(self, tid: int) -> bytes:
        k = self.sentinel.get(tid)
        if k is None:
            if tid in self.eos:
                raise InvalidArgumentError(
                    f"structural tag: special token id {tid} is an EOS id; EOS ends generation "
                    f"and cannot be part of a tag")
            if len(self.sentinel) >= _MAX_SPECIAL:
                raise InvalidArgumentError(
                    f"structural tag uses more than {_MAX_SPECIAL} distinct special tokens")
            k = self.sentinel[tid] = len(self.sentinel)
        return bytes([SENTINEL_BYTE, k])

    def literal(self, text: str, where: str) -> tuple[int, int]:
        data = b"".join(p if isinstance(p, bytes) else self.sentinel_bytes(p)
                        for p in self.pieces(text, where))
        return self.a.chain(data)

    # ------------------------------------------------------------ formats

    def build(self, f: Any, where: str) -> tuple[int, int]:
        if not isinstance(f, Mapping):
            raise InvalidArgumentTypeError(
                f"structural tag {where}: a format is an object, got {type(f).__name__}")
        t = f.get("type")
        a = self.a
        if t == "const_string":
            return self.literal(_need(f, "value", where), where + "/value")
        if t in ("json_schema", "regex", "grammar"):
            return a.embed(self.leaf(t, f, where), where)
        if t == "any_text":
            return self.any_text(f, None, where)
        if t in ("sequence", "or"):
            els = _need(f, "elements", where)
            if not isinstance(els, Sequence) or isinstance(els, (str, bytes)) or not els:
                raise InvalidArgumentError(
                    f"structural tag {where}/elements: a non-empty list of formats")
            parts = [self.build(e, f"{where}/elements/{i}") for i, e in enumerate(els)]
            if t == "sequence":
                for (_, o), (i2, _) in zip(parts, parts[1:]):
                    a.eps.append((o, i2))
                return parts[0][0], parts[-1][1]
            i, o = a.state(), a.state()
            for pi, po in parts:
                a.eps += [(i, pi), (po, o)]
            return i, o
        if t == "tag":
            return self.tag(f, where, b"")
        if t == "triggered_tags":
            return self.triggered(f, where)
        if t == "tags_with_separator":
            return self.with_separator(f, where)
        raise InvalidArgumentError(f"structural tag {where}: unknown format type {t!r}")

    def leaf(self, t: str, f: Mapping, where: str) -> ByteNFA:
        key = json.dumps([t, {k: v for k, v in f.items() if k != "type"}], sort_keys=True,
                         default=repr)
        hit = self._leaf_cache.get(key)
        if hit is not None:
            return hit
        if t == "json_schema":
            from .json_schema import json_schema_to_nfa

            out = json_schema_to_nfa(_need(f, "json_schema", where), **self.schema_options)
        elif t == "regex":
            from .regex import regex_to_nfa

            out = regex_to_nfa(_need(f, "pattern", where))
        else:
            from .grammar import grammar_to_nfa

            out = grammar_to_nfa(_need(f, "grammar", where), approximation="under")
        out = N.finalize(out)
        self._leaf_cache[key] = out
        return out

    def tag(self, f: Mapping, where: str, read: bytes) -> tuple[int, int]:
        """``begin content end``; ``begin``'s first bytes ``read`` (a trigger) already read."""
        begin = _need(f, "begin", where)
        end = _need(f, "end", where)
        content = _need(f, "content", where)
        pieces = self.pieces(begin, where + "/begin")
        data = b"".join(p if isinstance(p, bytes) else self.sentinel_bytes(p) for p in pieces)
        if not data.startswith(read):
            raise InvalidArgumentError(
                f"structural tag {where}/begin: {begin!r} does not start with the bytes of its "
                f"trigger (a special token name overlaps the trigger)")
        bi, bo = self.a.chain(data[len(read):])
        if isinstance(content, Mapping) and content.get("type") == "any_text":
            ci, co = self.any_text(content, end, where + "/content", where + "/end")
        else:
            ci, co = self.build(content, where + "/content")
            ei, eo = self.literal(end, where + "/end")
            self.a.eps.append((co, ei))
            co = eo
        self.a.eps.append((bo, ci))
        return bi, co

    def any_text(self, f: Mapping, end: str | None, where: str,
                 end_where: str = "") -> tuple[int, int]:
        """Free text avoiding the excluded strings; with ``end``, up to its first occurrence
        and the end tag itself (then the exit is after ``end``)."""
        excl = f.get("excluded_str") or []
        if isinstance(excl, str) or not isinstance(excl, Sequence):
            raise InvalidArgumentError(f"structural tag {where}/excluded_str: a list of strings")
        stops: list[bytes] = []
        for j, s in enumerate(excl):
            p = self.pieces(s, f"{where}/excluded_str/{j}")
            if p and all(isinstance(x, bytes) for x in p):  # with a special token: never text
                stops.append(b"".join(p))
        end_pieces = None if end is None else self.pieces(end, end_where)
        lazy = end_pieces is not None and all(isinstance(x, bytes) for x in end_pieces) and end
        if lazy:
            stops.append(end.encode("utf-8"))
        free = self.free_text(stops)
        a = self.a
        out = a.state()
        if lazy:
            end_k = len(stops) - 1
            for node_state, outs in free.matches:
                if end_k in outs:  # the end tag completes here (an excluded string ending
                    a.eps.append((node_state, out))  # at the same byte is part of it)
            return free.entry, out
        for s in free.boundary:
            a.eps.append((s, out))
        if end_pieces is not None:
            ei, eo = self.literal(end, end_where)
            a.eps.append((out, ei))
            return free.entry, eo
        return free.entry, out

    def free_text(self, stops: list[bytes]) -> _Free:
        """Aho–Corasick over ``stops`` × UTF-8 validity, added to the arena."""
        for s in stops:
            if not s:
                raise InvalidArgumentError("structural tag: an empty trigger/end/excluded string")
        return _Free(self.a, stops)

    def triggered(self, f: Mapping, where: str) -> tuple[int, int]:
        triggers = _need(f, "triggers", where)
        tags = _need(f, "tags", where)
        if isinstance(triggers, str) or not isinstance(triggers, Sequence) or not triggers:
            raise InvalidArgumentError(f"structural tag {where}/triggers: a non-empty list")
        if isinstance(tags, str) or not isinstance(tags, Sequence) or not tags:
            raise InvalidArgumentError(f"structural tag {where}/tags: a non-empty list")
        at_least_one = bool(f.get("at_least_one", False))
        stop_after_first = bool(f.get("stop_after_first", False))
        text_trig: list[bytes] = []
        text_idx: list[int] = []
        special_trig: list[int] = []
        for i, t in enumerate(triggers):
            p = self.pieces(t, f"{where}/triggers/{i}")
            if not p:
                raise InvalidArgumentError(f"structural tag {where}/triggers/{i}: empty trigger")
            if all(isinstance(x, bytes) for x in p):
                text_idx.append(i)
                text_trig.append(b"".join(p))
            elif isinstance(p[0], int):
                special_trig.append(i)
            else:
                raise InvalidArgumentError(
                    f"structural tag {where}/triggers/{i}: a trigger is text, or starts with a "
                    f"special token ({t!r} has text before its special token)")
        # each tag: the trigger it starts with
        owner: list[int] = []
        for j, tg in enumerate(tags):
            if not isinstance(tg, Mapping):
                raise InvalidArgumentTypeError(f"structural tag {where}/tags/{j}: an object")
            b = _need(tg, "begin", f"{where}/tags/{j}")
            hits = [i for i, t in enumerate(triggers) if isinstance(t, str) and b.startswith(t)]
            if len(hits) != 1:
                raise InvalidArgumentError(
                    f"structural tag {where}/tags/{j}: its begin {b!r} must start with exactly "
                    f"one trigger (it starts with {[triggers[i] for i in hits]})")
            owner.append(hits[0])
        unused = [triggers[i] for i in range(len(triggers)) if i not in owner]
        if unused:
            raise InvalidArgumentError(
                f"structural tag {where}/triggers: no tag begins with {unused}")
        a = self.a
        entry, out = a.state(), a.state()
        root = a.state()  # free text (after a tag, or from the start)

        def tag_loop(j: int, read: bytes) -> tuple[int, int]:
            ti, to = self.tag(tags[j], f"{where}/tags/{j}", read)
            a.eps.append((to, out if stop_after_first else root))
            return ti, to

        if at_least_one:
            for j in range(len(tags)):
                ti, _ = tag_loop(j, b"")
                a.eps.append((entry, ti))
        else:
            a.eps.append((entry, root))
        free = self.free_text(text_trig)
        a.eps.append((root, free.entry))
        for s in free.boundary:
            a.eps.append((s, out))
        # text triggers: from the state where one was completed, its tags' rest of begin
        hub: dict[int, int] = {}
        for k, i in enumerate(text_idx):
            h = hub[k] = a.state()
            for j in range(len(tags)):
                if owner[j] == i:
                    ti, _ = tag_loop(j, text_trig[k])
                    a.eps.append((h, ti))
        for node_state, outs in free.matches:
            for k in outs:
                a.eps.append((node_state, hub[k]))
        # special-token triggers: from any character boundary of the free text
        for i in special_trig:
            h = a.state()
            for j in range(len(tags)):
                if owner[j] == i:
                    ti, _ = tag_loop(j, b"")
                    a.eps.append((h, ti))
            for s in free.boundary:
                a.eps.append((s, h))
        return entry, out

    def with_separator(self, f: Mapping, where: str) -> tuple[int, int]:
        tags = _need(f, "tags", where)
        sep = _need(f, "separator", where)
        if isinstance(tags, str) or not isinstance(tags, Sequence) or not tags:
            raise InvalidArgumentError(f"structural tag {where}/tags: a non-empty list")
        at_least_one = bool(f.get("at_least_one", False))
        stop_after_first = bool(f.get("stop_after_first", False))
        a = self.a
        entry, out = a.state(), a.state()
        one_i, one_o = a.state(), a.state()  # one tag, any of them
        for j, tg in enumerate(tags):
            ti, to = self.tag(tg, f"{where}/tags/{j}", b"")
            a.eps += [(one_i, ti), (to, one_o)]
        a.eps.append((entry, one_i))
        a.eps.append((one_o, out))
        if not at_least_one:
            a.eps.append((entry, out))
        if not stop_after_first:
            si, so = self.literal(sep, where + "/separator")
            a.eps += [(one_o, si), (so, one_i)]
        return entry, out


class _Free:
    """Aho–Corasick automaton of ``stops`` in product with UTF-8 validity, in the arena.

    ``entry``: the state at the start (root, character boundary).  ``boundary``: the states at
    a character boundary where no stop string has been completed (free text may end there, a
    special token may follow).  ``matches``: (state, stop indices) for each state where stop
    strings have just been completed (no out-edges: the free text is over there).
    """

    def __init__(self, a: _Arena, stops: list[bytes]):
        # trie
        children: list[dict[int, int]] = [{}]
        ends: list[set[int]] = [set()]
        for k, s in enumerate(stops):
            q = 0
            for b in s:
                nxt = children[q].get(b)
                if nxt is None:
                    nxt = len(children)
                    children[q][b] = nxt
                    children.append({})
                    ends.append(set())
                q = nxt
            ends[q].add(k)
        # failure links (breadth-first) and outputs
        fail = [0] * len(children)
        out = [set(e) for e in ends]
        order = []
        queue = list(children[0].values())
        while queue:
            q = queue.pop(0)
            order.append(q)
            for b, c in children[q].items():
                f = fail[q]
                while f and b not in children[f]:
                    f = fail[f]
                fail[c] = children[f][b] if (b in children[f] and children[f][b] != c) else 0
                out[c] |= out[fail[c]]
                queue.append(c)
        alphabet = sorted({b for s in stops for b in s})
        delta: list[dict[int, int]] = [{} for _ in children]
        for q in [0] + order:  # parents before children: fail[q] done before q
            for b in alphabet:
                if b in children[q]:
                    delta[q][b] = children[q][b]
                else:
                    delta[q][b] = delta[fail[q]][b] if q else 0
        rest = N.ALL_BYTES & ~N.mask_of(alphabet)
        # transitions of each trie node grouped by destination
        groups: list[list[tuple[int, int]]] = []
        for q in range(len(children)):
            by_dst: dict[int, int] = {0: rest} if rest else {}
            for b, d in delta[q].items():
                by_dst[d] = by_dst.get(d, 0) | (1 << b)
            groups.append([(m, d) for d, m in by_dst.items() if m])
        ids: dict[tuple[int, int], int] = {}
        self.boundary: list[int] = []
        self.matches: list[tuple[int, list[int]]] = []

        def get(q: int, u: int) -> int:
            s = ids.get((q, u))
            if s is None:
                s = ids[(q, u)] = a.state()
                stack.append((q, u))
                if out[q]:
                    self.matches.append((s, sorted(out[q])))
                elif u == 0:
                    self.boundary.append(s)
            return s

        stack: list[tuple[int, int]] = []
        self.entry = get(0, 0)
        while stack:
            q, u = stack.pop()
            if out[q]:
                continue  # a stop string was completed: the free text is over
            src = ids[(q, u)]
            for mu, u2 in _UTF8[u]:
                for mq, q2 in groups[q]:
                    m = mu & mq
                    if m:
                        a.edges.append((src, m, get(q2, u2)))


def _need(f: Mapping, key: str, where: str) -> Any:
    if key not in f:
        raise InvalidArgumentError(f"structural tag {where}: missing {key!r}")
    return f[key]


def _normalize(spec: Any) -> Any:
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise InvalidArgumentError(f"structural tag: not JSON: {e}") from None
    if hasattr(spec, "model_dump"):  # xgrammar's pydantic StructuralTag objects
        spec = spec.model_dump()
    if not isinstance(spec, Mapping):
        raise InvalidArgumentTypeError(
            f"structural tag: a spec is an object, got {type(spec).__name__}")
    if spec.get("type") == "structural_tag":
        if "format" in spec:
            return spec["format"]
        if "structures" in spec:
            return {
                "type": "triggered_tags",
                "triggers": spec.get("triggers", []),
                "tags": [{"begin": s["begin"], "end": s["end"],
                          "content": {"type": "json_schema", "json_schema": s["schema"]}}
                         for s in spec["structures"]],
            }
        raise InvalidArgumentError("structural tag: needs 'format' (or 'structures')")
    return spec


def structural_tag_to_nfa(
    spec: Any,
    *,
    special_tokens: Mapping[str, int] | None = None,
    schema_options: dict | None = None,
    eos_token_ids: Sequence[int] = (),
) -> tuple[ByteNFA, dict[int, bytes]]:
    """The byte NFA of ``spec`` (see the module docstring) and the sentinel of each special
    token it uses (``{token id: b"\\xff" + k}``; empty when it uses none).  A literal naming a
    special token whose id is in ``eos_token_ids`` is refused (EOS ends generation).

    Raises:
        InvalidArgumentError / InvalidArgumentTypeError: a malformed spec (with the JSON pointer
            of the offending part), a tag no trigger starts, a trigger no tag starts with.
        the errors of the JSON Schema, regex and grammar front ends.
    """
    comp = _Compiler(dict(special_tokens or {}), dict(schema_options or {}), eos_token_ids)
    i, o = comp.build(_normalize(spec), "#")
    a = comp.a
    nfa = ByteNFA(a.n, i, frozenset({o}), tuple(a.edges), tuple(a.eps))
    sent = {tid: bytes([SENTINEL_BYTE, k]) for tid, k in comp.sentinel.items()}
    return N.finalize(nfa), sent


def _sentinel_vocabulary(vocab: TokenVocabulary, sent: dict[int, bytes]) -> TokenVocabulary:
    """``vocab`` with each special id emitting its sentinel and every token holding a 0xFF byte
    emitting nothing (cached on ``vocab``)."""
    key = ("structural_tag_vocab", tuple(sorted(sent.items())))
    hit = vocab._memo.get(key)
    if hit is not None:
        return hit
    tb = [None if (b is not None and b"\xff" in b) else b for b in vocab.token_bytes]
    for tid, s in sent.items():
        tb[tid] = s
    out = TokenVocabulary(tuple(tb), vocab.eos_token_ids, vocab.name + "+sentinels",
                          vocab.leading_space_rule)
    vocab._memo[key] = out
    return out


def compile_structural_tag(
    spec: Any,
    vocabulary: TokenVocabulary,
    *,
    special_tokens: Mapping[str, int] | None = None,
    schema_options: dict | None = None,
):
    """Compile a structural tag (module docstring) to a
    :class:`~.automaton.TokenAutomaton` over ``vocabulary``.

    Args:
        spec: ``{"type": "structural_tag", "format": ...}``, a format object, xgrammar's older
            ``{"structures": [...], "triggers": [...]}`` form, a JSON string of these, or an
            object with ``model_dump()`` (xgrammar's pydantic classes).
        vocabulary: the model's vocabulary.
        special_tokens: text -> id of special tokens that literals in ``spec`` may name
            (:func:`special_tokens_of` reads them off a tokenizer).  Ids that emit text in
            ``vocabulary`` are ignored (their text is matched as text); a literal naming an EOS
            id is refused.
        schema_options: keyword arguments of :func:`~.json_schema.json_schema_to_nfa` for every
            ``json_schema`` content (``canonical``, ``whitespace``, ...).

    Returns:
        A ``TokenAutomaton`` (``meta["kind"] = "structural_tag"``; ``meta["special_tokens"]``
        lists the special ids it reads).  Its budget guarantee covers the whole output.

    Raises:
        InvalidArgumentError: a malformed spec, or a literal naming an EOS token.
        EmptyLanguageError: nothing over ``vocabulary`` is accepted.
        the errors of the JSON Schema / regex / grammar front ends.
    """
    require_vocabulary(vocabulary)
    from .automaton import TokenAutomaton

    special = {}
    for name, tid in (special_tokens or {}).items():
        tid = int(tid)
        if not 0 <= tid < vocabulary.size:
            raise InvalidArgumentError(
                f"special token {name!r}: id {tid} outside the vocabulary (size "
                f"{vocabulary.size})")
        if vocabulary.token_bytes[tid] is None:
            special[name] = tid
    nfa, sent = structural_tag_to_nfa(spec, special_tokens=special,
                                      schema_options=schema_options,
                                      eos_token_ids=vocabulary.eos_token_ids)
    meta = {"kind": "structural_tag", "special_tokens": sorted(sent),
            "byte_states": nfa.num_states, "byte_edges": nfa.num_edges}
    if not sent:
        return TokenAutomaton.from_byte_nfa(nfa, vocabulary, meta=meta)
    aug = _sentinel_vocabulary(vocabulary, sent)
    A = TokenAutomaton.from_byte_nfa(nfa, aug, meta=meta)
    memo = {k: v for k, v in A._memo.items() if k == "byte_states"}
    return replace(A, fingerprint=vocabulary.fingerprint, _memo=memo)


def reasoning_then_format(
    answer: Any,
    *,
    begin: str = "<think>",
    end: str = "</think>",
    separator: str = r"[ \t\r\n]*",
    optional_reasoning: bool = False,
) -> dict:
    """The spec "reasoning, then an answer": ``begin`` free text ``end``, whitespace
    (``separator``, a regex), then ``answer`` (a format object, e.g. ``{"type": "json_schema",
    ...}``).  The reasoning ends at the first ``end``.  ``optional_reasoning``: the reasoning
    block may be left out (the output is then ``separator answer``)."""
    think = {"type": "tag", "begin": begin, "content": {"type": "any_text"}, "end": end}
    if optional_reasoning:
        think = {"type": "or", "elements": [think, {"type": "const_string", "value": ""}]}
    return {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        think, {"type": "regex", "pattern": separator}, answer]}}


def compile_reasoning_then_schema(schema: Any, vocabulary: TokenVocabulary, **kwargs):
    """:func:`compile_structural_tag` of :func:`reasoning_then_format` with a JSON Schema
    answer.  ``kwargs``: those of :func:`reasoning_then_format` (``begin``, ``end``,
    ``separator``, ``optional_reasoning``) and of :func:`compile_structural_tag`
    (``special_tokens``, ``schema_options``)."""
    own = {k: kwargs.pop(k) for k in ("begin", "end", "separator", "optional_reasoning")
           if k in kwargs}
    spec = reasoning_then_format({"type": "json_schema", "json_schema": schema}, **own)
    return compile_structural_tag(spec, vocabulary, **kwargs)


def special_tokens_of(tokenizer: Any) -> dict[str, int]:
    """``{text: id}`` of the *special* added tokens of ``tokenizer`` (a ``transformers`` fast
    tokenizer, a ``tokenizers.Tokenizer``, or the path of a ``tokenizer.json``)."""
    import os

    if isinstance(tokenizer, (str, os.PathLike)):
        from pathlib import Path

        p = Path(tokenizer)
        if p.is_dir():
            p = p / "tokenizer.json"
        spec = json.loads(p.read_text(encoding="utf-8"))
        return {a["content"]: int(a["id"]) for a in spec.get("added_tokens", [])
                if a.get("special")}
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    get = getattr(backend, "get_added_tokens_decoder", None)
    if get is None:
        raise InvalidArgumentTypeError(
            f"special_tokens_of: not a fast tokenizer or tokenizer.json path: "
            f"{type(tokenizer).__name__}")
    return {t.content: int(i) for i, t in get().items() if getattr(t, "special", False)}
