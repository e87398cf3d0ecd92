"""Brute-force references for the grammar tests (:mod:`tractable.fsa.grammar`).

* :func:`sample_nfa` — random strings of a byte NFA (random walks biased towards acceptance);
* :func:`brute_viable` — a prefix is viable iff some completion of length <= ``max_len`` over
  ``alphabet`` is accepted (the definition, enumerated);
* :func:`lark_accepts` — Lark's own Earley parser (``lexer="dynamic_complete"``, the
  scannerless semantics) as the reference for complete strings;
* :func:`mutations` — single-byte edits of a sentence (deletions, insertions, substitutions);
* :func:`brute_cfg_accepts` — membership by the definition: the least fixpoint of "nonterminal
  ``A`` derives ``s[i:j]``" over all spans of ``s`` (no Earley items, no automata), for checking
  :class:`~tractable.fsa.grammar.Checker` and the approximations on tiny grammars.
"""

from __future__ import annotations

import itertools
import random
from collections import deque

from tractable.fsa import nfa as N

__all__ = ["sample_nfa", "brute_viable", "lark_parser", "lark_accepts", "mutations",
           "brute_cfg_accepts"]


def _dist_to_final(f: N.ByteNFA) -> list[int]:
    rev: list[list[int]] = [[] for _ in range(f.num_states)]
    for s, _m, d in f.edges:
        rev[d].append(s)
    inf = 1 << 30
    dist = [inf] * f.num_states
    q = deque()
    for s in f.finals:
        dist[s] = 0
        q.append(s)
    while q:
        x = q.popleft()
        for y in rev[x]:
            if dist[y] == inf:
                dist[y] = dist[x] + 1
                q.append(y)
    return dist


def sample_nfa(nfa: N.ByteNFA, rng: random.Random, *, max_len: int = 200,
               stop_prob: float = 0.3) -> bytes:
    """One random accepted string of ``nfa`` (walks towards a final state once past ``max_len``
    bytes, so it always terminates on a trimmed NFA)."""
    f = N.finalize(nfa, reduce=False)
    if not f.finals:
        raise ValueError("empty language")
    out: list[list[tuple[int, int]]] = [[] for _ in range(f.num_states)]
    for s, m, d in f.edges:
        out[s].append((m, d))
    dist = _dist_to_final(f)
    s = f.start
    data = bytearray()
    while True:
        if s in f.finals and (not out[s] or rng.random() < stop_prob or len(data) >= max_len):
            return bytes(data)
        choices = out[s]
        if len(data) >= max_len:
            best = min(dist[d] for _m, d in choices)
            choices = [(m, d) for m, d in choices if dist[d] == best]
        m, d = rng.choice(choices)
        bits = [b for b in range(256) if m >> b & 1]
        data.append(rng.choice(bits))
        s = d


def brute_viable(accepts, prefix: bytes, alphabet: bytes, max_len: int) -> bool:
    """``True`` iff ``accepts(prefix + w)`` for some ``w`` over ``alphabet`` with
    ``len(w) <= max_len`` (exhaustive)."""
    for n in range(max_len + 1):
        for w in itertools.product(alphabet, repeat=n):
            if accepts(prefix + bytes(w)):
                return True
    return False


def lark_parser(text: str, start: str = "start"):
    """Lark's Earley parser with the scannerless ``dynamic_complete`` lexer."""
    import lark

    return lark.Lark(text, parser="earley", lexer="dynamic_complete", start=start)


def lark_accepts(parser, s: str) -> bool:
    import lark

    try:
        parser.parse(s)
        return True
    except lark.exceptions.LarkError:
        return False


def mutations(s: bytes, rng: random.Random, n: int, alphabet: bytes) -> list[bytes]:
    """``n`` random single-byte edits of ``s``."""
    out = []
    for _ in range(n):
        i = rng.randrange(len(s) + 1)
        op = rng.randrange(3)
        c = bytes([rng.choice(alphabet)])
        if op == 0 and i < len(s):
            out.append(s[:i] + s[i + 1 :])
        elif op == 1:
            out.append(s[:i] + c + s[i:])
        else:
            out.append(s[:i] + c + s[i + 1 :])
    return out


def brute_cfg_accepts(cfg, s: bytes) -> bool:
    """``s`` ∈ L(``cfg``), by the definition (cost O(|s|^3 · grammar size) per sweep).

    ``T[A][i]`` = the ends ``j`` such that nonterminal ``A`` derives ``s[i:j]``, grown from
    empty sets by re-evaluating every right-hand side (terminals matched with
    :func:`tractable.fsa.nfa.matches` on the substring) until nothing changes: the least fixpoint,
    i.e. exactly the finite derivations.  ``%ignore`` is handled by
    :func:`~tractable.fsa.grammar.cfg.prepare` (``lexicalize=False``).
    """
    from tractable.fsa.grammar.cfg import START, prepare

    pc = prepare(cfg, lexicalize=False)
    n = len(s)
    term_cache: dict = {}

    def term_ends(name: str, i: int) -> frozenset:
        key = (name, i)
        hit = term_cache.get(key)
        if hit is None:
            t = pc.terminals[name]
            hit = term_cache[key] = frozenset(j for j in range(i, n + 1)
                                              if N.matches(t, s[i:j]))
        return hit

    T = {a: [frozenset() for _ in range(n + 1)] for a in pc.rules}

    def ends(e, i: int) -> set:
        tag = e[0]
        if tag == "t":
            return set(term_ends(e[1], i))
        if tag == "n":
            return set(T[e[1]][i])
        if tag == "seq":
            cur = {i}
            for p in e[1]:
                cur = {j for q in cur for j in ends(p, q)}
            return cur
        if tag == "alt":
            return {j for p in e[1] for j in ends(p, i)}
        body, lo, hi = e[1], e[2], e[3]
        cur = {i}
        for _ in range(lo):
            cur = {j for q in cur for j in ends(body, q)}
        out = set(cur)
        k = lo
        while hi is None or k < hi:
            cur = {j for q in cur for j in ends(body, q)} - out
            if not cur:
                break
            out |= cur
            k += 1
        return out

    changed = True
    while changed:
        changed = False
        for a, e in pc.rules.items():
            for i in range(n + 1):
                new = frozenset(ends(e, i))
                if new != T[a][i]:
                    T[a][i] = new | T[a][i]
                    changed = True
    return n in T[START][0]
