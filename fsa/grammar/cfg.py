"""The internal context-free grammar every front end (Lark, GBNF, transformers-CFG EBNF) produces.

A :class:`CFG` is an *extended* CFG: each nonterminal has one right-hand side that is a regular
expression over symbols (an :data:`Expr` tree), so the EBNF operators ``? * + {m,n} ~`` of the
front ends stay loops instead of becoming recursive helper rules.  A symbol is a nonterminal or
a *terminal*; a terminal is a byte-level language given as a :class:`~..nfa.ByteNFA` (a literal,
a character class, a regex through :func:`~..regex.regex_to_nfa`, or a Lark terminal definition).

Expression trees are plain tuples::

    ("t", name)             terminal ``name`` (a key of ``CFG.terminals``)
    ("n", name)             nonterminal ``name`` (a key of ``CFG.rules``)
    ("seq", (e1, e2, ...))  concatenation; ``("seq", ())`` is ε
    ("alt", (e1, e2, ...))  union; ``("alt", ())`` is the empty language
    ("rep", e, lo, hi)      ``e{lo,hi}``; ``hi=None`` is unbounded (``*`` = (0, None))

``ignore`` (Lark ``%ignore``) is a byte language allowed, any number of times, before the first
terminal, between terminals and after the last one.  :func:`prepare` makes that explicit by
appending ``IGN*`` to every terminal and prefixing the start symbol with ``IGN*``, then turns
non-recursive rules whose symbols are all terminals into single terminals ("lexicalization"),
removes unproductive symbols, and computes the strongly connected components the regular
approximations (:mod:`.approx`) and the Earley checker (:mod:`.earley`) use.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .. import nfa as N
from ..errors import EmptyLanguageError, GrammarError, InvalidArgumentError
from ..nfa import ByteNFA

__all__ = [
    "CFG",
    "Expr",
    "EPS",
    "NOTHING",
    "seq",
    "alt",
    "rep",
    "symbols_of",
    "PreparedCFG",
    "prepare",
    "START",
    "IGNORE_TERMINAL",
]

Expr = tuple

EPS: Expr = ("seq", ())
NOTHING: Expr = ("alt", ())
#: Name of the synthetic start nonterminal :func:`prepare` adds (``$start: IGN* start``).
START = "$start"
#: Name of the synthetic terminal ``IGN*`` (only when the grammar has ``%ignore``).
IGNORE_TERMINAL = "$ignore*"

#: Lexicalize a non-recursive rule into one terminal only while its finalized byte NFA has at
#: most this many states (the SQL grammar's largest lexicalized rule has ~300).
LEX_MAX_STATES = 4000
#: Stop lexicalizing once the lexicalized rules' automata total this many states (a chain of
#: 10,000 rules each extending the one below would otherwise build 50M states; the largest
#: total among the grammars of shared/data is 7,646, sql.lark).
LEX_TOTAL_STATES = 100_000


def seq(*parts: Expr) -> Expr:
    """Concatenation, flattening nested sequences and dropping ε; ∅ absorbs."""
    out: list[Expr] = []
    for p in parts:
        if p == NOTHING:
            return NOTHING
        if p[0] == "seq":
            out.extend(p[1])
        else:
            out.append(p)
    return out[0] if len(out) == 1 else ("seq", tuple(out))


def alt(*parts: Expr) -> Expr:
    """Union, flattening nested unions and dropping ∅ and duplicates."""
    out: list[Expr] = []
    for p in parts:
        items = p[1] if p[0] == "alt" else (p,)
        for q in items:
            if q not in out:
                out.append(q)
    return out[0] if len(out) == 1 else ("alt", tuple(out))


def rep(e: Expr, lo: int, hi: int | None) -> Expr:
    """``e{lo,hi}`` with the trivial cases folded."""
    if hi is not None and hi < lo:
        raise InvalidArgumentError(f"bad repetition bounds {{{lo},{hi}}}")
    if hi == 0 or e == EPS:
        return EPS
    if e == NOTHING:
        return EPS if lo == 0 else NOTHING
    if lo == 1 and hi == 1:
        return e
    return ("rep", e, lo, hi)


def symbols_of(e: Expr):
    """Yield every ``("t", name)`` / ``("n", name)`` leaf of ``e``."""
    tag = e[0]
    if tag in ("t", "n"):
        yield e
    elif tag in ("seq", "alt"):
        for p in e[1]:
            yield from symbols_of(p)
    else:
        yield from symbols_of(e[1])


def _map_expr(e: Expr, f) -> Expr:
    """Rebuild ``e`` with every leaf ``x`` replaced by ``f(x)`` (an Expr)."""
    tag = e[0]
    if tag in ("t", "n"):
        return f(e)
    if tag == "seq":
        return seq(*(_map_expr(p, f) for p in e[1]))
    if tag == "alt":
        return alt(*(_map_expr(p, f) for p in e[1]))
    return rep(_map_expr(e[1], f), e[2], e[3])


@dataclass(frozen=True, eq=False)
class CFG:
    """An extended context-free grammar over bytes (see the module docstring).

    Attributes:
        rules: nonterminal name → right-hand side :data:`Expr`.
        terminals: terminal name → :class:`ByteNFA` (its byte language).
        start: the start nonterminal.
        ignore: byte language allowed between terminals (Lark ``%ignore``), or ``None``.
        lines: nonterminal or terminal name → 1-based line of its definition (for errors).
        syntax: ``"lark"``, ``"gbnf"`` or ``"ebnf"`` (the front end that produced it).
    """

    rules: dict[str, Expr]
    terminals: dict[str, ByteNFA]
    start: str
    ignore: ByteNFA | None = None
    lines: dict[str, int] = field(default_factory=dict)
    syntax: str = ""

    def __post_init__(self):
        if self.start not in self.rules:
            raise GrammarError(f"start symbol {self.start!r} is not defined", self.start)
        for name, e in self.rules.items():
            for kind, sym in symbols_of(e):
                if kind == "n" and sym not in self.rules:
                    raise GrammarError(
                        f"undefined rule {sym!r}", name, self.lines.get(name)
                    )
                if kind == "t" and sym not in self.terminals:
                    raise GrammarError(
                        f"undefined terminal {sym!r}", name, self.lines.get(name)
                    )

    def __repr__(self) -> str:
        return (
            f"CFG(syntax={self.syntax!r}, start={self.start!r}, rules={len(self.rules)}, "
            f"terminals={len(self.terminals)}, ignore={self.ignore is not None})"
        )

    def expr_nfa(self, e: Expr, resolve) -> ByteNFA:
        """Thompson NFA of ``e`` where ``resolve(("n", name))`` gives a nonterminal's NFA."""
        tag = e[0]
        if tag == "t":
            return self.terminals[e[1]]
        if tag == "n":
            return resolve(e)
        if tag == "seq":
            return N.concat(*(self.expr_nfa(p, resolve) for p in e[1]))
        if tag == "alt":
            return N.union(*(self.expr_nfa(p, resolve) for p in e[1]))
        return N.repeat(self.expr_nfa(e[1], resolve), e[2], e[3])


# --------------------------------------------------------------------------- preparation


def _sccs(nodes: list[str], succ: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's SCCs, iteratively, in reverse topological order (callees first)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def _nt_succ(rules: dict[str, Expr]) -> dict[str, set[str]]:
    return {a: {s for k, s in symbols_of(e) if k == "n"} for a, e in rules.items()}


def _nullable(e: Expr, nt_null, t_null) -> bool:
    tag = e[0]
    if tag == "t":
        return t_null(e[1])
    if tag == "n":
        return nt_null(e[1])
    if tag == "seq":
        return all(_nullable(p, nt_null, t_null) for p in e[1])
    if tag == "alt":
        return any(_nullable(p, nt_null, t_null) for p in e[1])
    return e[2] == 0 or _nullable(e[1], nt_null, t_null)


@dataclass(frozen=True, eq=False)
class PreparedCFG:
    """A :class:`CFG` ready for checking and approximation (see :func:`prepare`).

    Attributes:
        cfg: the source grammar.
        rules: nonterminal → Expr, with :data:`START` added; unproductive symbols removed.
        terminals: terminal → finalized :class:`ByteNFA` (``IGN*`` appended when ignoring).
        sccs: strongly connected components of the nonterminal graph, callees first.
        scc_of: nonterminal → index into ``sccs``.
        recursive: per SCC, whether it has a cycle (a self-loop or more than one member).
        lexicalized: names of rules turned into terminals.
    """

    cfg: CFG
    rules: dict[str, Expr]
    terminals: dict[str, ByteNFA]
    sccs: list[list[str]]
    scc_of: dict[str, int]
    recursive: list[bool]
    lexicalized: tuple[str, ...]

    def nullable_terminal(self, name: str) -> bool:
        t = self.terminals[name]
        return t.start in t.finals


def prepare(cfg: CFG, *, lexicalize: bool = True) -> PreparedCFG:
    """Make ``%ignore`` explicit, lexicalize non-recursive all-terminal rules, drop unproductive
    symbols, and compute SCCs (see the module docstring).  The language is unchanged.

    Raises:
        EmptyLanguageError: the start symbol derives no string.
    """
    cache = cfg.__dict__.setdefault("_prepared", {})
    if lexicalize in cache:
        return cache[lexicalize]
    terminals: dict[str, ByteNFA] = {}
    ign = None
    if cfg.ignore is not None:
        ign = N.star(cfg.ignore)
    for name, t in cfg.terminals.items():
        terminals[name] = N.finalize(N.concat(t, ign) if ign is not None else t)
    rules = dict(cfg.rules)
    if START in rules:
        raise GrammarError(f"rule name {START!r} is reserved", START)
    if ign is not None:
        terminals[IGNORE_TERMINAL] = N.finalize(ign)
        rules[START] = seq(("t", IGNORE_TERMINAL), ("n", cfg.start))
    else:
        rules[START] = ("n", cfg.start)

    # productivity (fixpoint) — a terminal is productive iff its language is non-empty
    t_prod = {name: bool(t.finals) for name, t in terminals.items()}
    prod: set[str] = set()

    def productive(e: Expr) -> bool:
        tag = e[0]
        if tag == "t":
            return t_prod[e[1]]
        if tag == "n":
            return e[1] in prod
        if tag == "seq":
            return all(productive(p) for p in e[1])
        if tag == "alt":
            return any(productive(p) for p in e[1])
        return e[2] == 0 or productive(e[1])

    # worklist: a rule is re-checked only when a nonterminal it uses became productive
    # (a plain fixpoint sweep is quadratic on a chain of 10,000 rules)
    users: dict[str, list[str]] = {}
    for a, e in rules.items():
        for k, s in symbols_of(e):
            if k == "n":
                users.setdefault(s, []).append(a)
    queue = deque(rules)
    queued = set(rules)
    while queue:
        a = queue.popleft()
        queued.discard(a)
        if a in prod or not productive(rules[a]):
            continue
        prod.add(a)
        for u in users.get(a, ()):
            if u not in prod and u not in queued:
                queue.append(u)
                queued.add(u)
    if START not in prod:
        raise EmptyLanguageError(f"the grammar's start rule {cfg.start!r} derives no string")

    def drop(x: Expr) -> Expr:
        if x[0] == "t":
            return x if t_prod[x[1]] else NOTHING
        return x if x[1] in prod else NOTHING

    rules = {a: _map_expr(e, drop) for a, e in rules.items() if a in prod}
    # keep only rules reachable from START
    succ = _nt_succ(rules)
    reach = {START}
    stack = [START]
    while stack:
        x = stack.pop()
        for y in succ[x]:
            if y not in reach:
                reach.add(y)
                stack.append(y)
    rules = {a: e for a, e in rules.items() if a in reach}

    lexed: list[str] = []
    if lexicalize:
        succ = _nt_succ(rules)
        comps = _sccs(sorted(rules), succ)
        lex_nfa: dict[str, ByteNFA] = {}
        lex_total = 0
        for comp in comps:
            if len(comp) != 1:
                continue
            a = comp[0]
            if a == START or a in succ[a]:
                continue
            if any(k == "n" and s not in lex_nfa for k, s in symbols_of(rules[a])):
                continue
            nfa = N.finalize(
                _expr_nfa(rules[a], terminals, lambda x: lex_nfa[x[1]])
            )
            if nfa.num_states > LEX_MAX_STATES:
                continue
            lex_total += nfa.num_states
            if lex_total > LEX_TOTAL_STATES:
                break
            lex_nfa[a] = nfa
        if lex_nfa:
            for a, nfa in lex_nfa.items():
                terminals["<" + a + ">"] = nfa
                lexed.append(a)

            def relex(x: Expr) -> Expr:
                if x[0] == "n" and x[1] in lex_nfa:
                    return ("t", "<" + x[1] + ">")
                return x

            rules = {a: _map_expr(e, relex) for a, e in rules.items() if a not in lex_nfa}
    used = {s for e in rules.values() for k, s in symbols_of(e) if k == "t"}
    terminals = {k: v for k, v in terminals.items() if k in used}
    succ = _nt_succ(rules)
    comps = _sccs(sorted(rules), succ)
    scc_of = {a: i for i, c in enumerate(comps) for a in c}
    recursive = [len(c) > 1 or c[0] in succ[c[0]] for c in comps]
    out = PreparedCFG(cfg, rules, terminals, comps, scc_of, recursive, tuple(lexed))
    cache[lexicalize] = out
    return out


def _expr_nfa(e: Expr, terminals: dict[str, ByteNFA], resolve) -> ByteNFA:
    tag = e[0]
    if tag == "t":
        return terminals[e[1]]
    if tag == "n":
        return resolve(e)
    if tag == "seq":
        return N.concat(*(_expr_nfa(p, terminals, resolve) for p in e[1]))
    if tag == "alt":
        return N.union(*(_expr_nfa(p, terminals, resolve) for p in e[1]))
    return N.repeat(_expr_nfa(e[1], terminals, resolve), e[2], e[3])
