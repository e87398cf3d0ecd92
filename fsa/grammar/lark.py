"""Lark grammar front end → :class:`~.cfg.CFG`, on the ``lark`` package's own grammar loader.

The ``lark`` package (``pip install 'tractable[grammar]'``; imported lazily, a missing package
is a :class:`LarkNotInstalledError`) parses the source with its grammar-of-grammars, resolves
``%import`` (of its standard library: ``common`` and ``unicode``; grammar files are never read),
``%override``, ``%extend``, ``%ignore``, templates, priorities and aliases.  This module only
translates lark's rule and terminal trees (``expansions / expansion / expr / maybe / value /
literal / range / template_usage``) into the internal CFG:

* a terminal definition becomes one byte NFA (literals, ``"a".."z"`` ranges, ``/regex/flags``
  through :func:`~..regex.regex_to_nfa` with lark's own escaping, ``? * + ~ n..m``);
* a rule becomes a nonterminal whose right-hand side keeps the EBNF operators as loops;
  anonymous literals and regexes in rules become terminals named by their source
  (``'"x"'``, ``'/[a-z]+/2'``); ``?rule``, ``!rule``, priorities and ``-> alias`` change the
  parse tree, not the language, and are ignored; ``%declare`` (terminals fed by a custom lexer)
  is refused.

Semantics: the *scannerless* language — a sentence is a derivation whose terminals match byte
substrings, with ``%ignore`` material allowed between any two terminals and at both ends; this
is what Lark's Earley parser with ``lexer="dynamic_complete"`` accepts.

``common.ESCAPED_STRING`` is Lark's lookbehind-and-lazy definition's language written without
lookaround (:data:`COMMON_OVERRIDES`): ``/"(?:[^"\\\\\\n]|\\\\[^\\n])*"/``.

Translation is iterative over rules (a chain of 10,000 rules needs no deep recursion) and
recursive only over one right-hand side, whose bracket nesting is bounded by ``max_nesting``.
"""

from __future__ import annotations

import re

from .. import nfa as N
from ..errors import GrammarError, InvalidRegexError, UnsupportedRegexError
from ..nfa import ByteNFA
from ..regex import regex_to_nfa
from .cfg import CFG, EPS, NOTHING, Expr, alt, rep, seq, symbols_of
from .lark_load import LarkNotInstalledError, load_definitions
from .limits import DEFAULT_MAX_NESTING, DEFAULT_MAX_RULES, check_limit

__all__ = ["parse_lark", "LarkNotInstalledError", "COMMON_OVERRIDES"]

#: ``common`` terminals whose Lark definitions use lookbehind, replaced by their language.
COMMON_OVERRIDES = {"ESCAPED_STRING": r'/"(?:[^"\\\n]|\\[^\n])*"/'}

_FLAGS = {"i": re.I, "m": re.M, "s": re.S, "x": re.X, "u": 0, "l": 0}


def _is_terminal_name(name: str) -> bool:
    return name.lstrip("_")[:1].isupper()


def _depth(tree) -> int:
    """Nesting depth of a lark tree (iterative)."""
    from lark import Tree

    best = 0
    stack = [(tree, 0)]
    while stack:
        t, d = stack.pop()
        best = max(best, d)
        for c in t.children:
            if isinstance(c, Tree):
                stack.append((c, d + (c.data == "expansions")))
    return best


class _Translator:
    def __init__(self, defs: dict, lines: dict[str, int]):
        self.defs = defs  # name -> lark Definition (is_term, tree, params)
        self.lines = lines
        self.term_memo: dict[int, ByteNFA] = {}  # id(tree) -> NFA (terminal trees are shared)
        self.terminals: dict[str, ByteNFA] = {}
        self.anon: dict[str, ByteNFA] = {}
        self.rules: dict[str, Expr] = {}
        self.order: list[str] = []
        self.pending: dict[str, tuple] = {}  # template instance -> (tree, env, template name)

    # ---------------------------------------------------------------- leaves
    def leaf(self, tree, rule: str | None) -> tuple[str, ByteNFA] | None:
        """(key, NFA) of a ``literal`` / ``range`` tree; ``None`` for the empty literal."""
        from lark import GrammarError as LarkGrammarError
        from lark.lexer import PatternStr
        from lark.load_grammar import _literal_to_pattern, eval_escaping

        line = self.lines.get(rule) if rule else None
        tok = tree.children[0]
        line = getattr(tok, "line", None) or line
        if tree.data == "range":
            a, b = tree.children
            try:
                lo, hi = eval_escaping(a.value[1:-1]), eval_escaping(b.value[1:-1])
            except LarkGrammarError as e:
                raise GrammarError(f"bad range {a}..{b}: {e}", rule, line) from None
            if len(lo) != 1 or len(hi) != 1:
                raise GrammarError(f"range {a}..{b} needs one-character strings", rule, line)
            if ord(hi) < ord(lo):
                raise GrammarError(f"reversed range {a}..{b}", rule, line)
            return f'"{lo}".."{hi}"', N.codepoints([(ord(lo), ord(hi))])
        if tok.type == "STRING" and tok.value in ('""', '""i'):
            return None
        try:
            pat = _literal_to_pattern(tok)
        except LarkGrammarError as e:
            raise GrammarError(f"literal {tok.value}: {e}", rule, line) from None
        if isinstance(pat, PatternStr):
            ci = "i" in pat.flags
            key = '"' + pat.value + '"' + ("i" if ci else "")
            if not ci:
                return key, N.literal(pat.value.encode("utf-8"))
            return key, regex_to_nfa(re.escape(pat.value), flags=re.I)
        flags = 0
        for f in pat.flags:
            flags |= _FLAGS[f]
        end = tok.value.rindex("/")
        key = "/" + tok.value[1:end].replace("\\/", "/") + "/" + (str(flags) if flags else "")
        try:
            # a lookaround in a terminal would see past the terminal: refused
            return key, regex_to_nfa(pat.value, flags=flags, lookaround=False)
        except (InvalidRegexError, UnsupportedRegexError) as e:
            raise GrammarError(f"regex {tok.value}: {e}", rule, line) from e

    # ---------------------------------------------------------------- terminals
    def terminal(self, name: str) -> ByteNFA:
        out = self.terminals.get(name)
        if out is None:
            out = self.terminals[name] = self.term_tree(self.defs[name].tree, name)
        return out

    def term_tree(self, t, rule: str) -> ByteNFA:
        from lark import Tree

        hit = self.term_memo.get(id(t))
        if hit is not None:
            return hit
        tag = t.data
        if tag == "expansions":
            parts = [self.term_tree(c, rule) for c in t.children]
            out = parts[0] if len(parts) == 1 else N.union(*parts)
        elif tag == "expansion":
            parts = [self.term_tree(c, rule) for c in t.children]
            out = parts[0] if len(parts) == 1 else N.concat(*parts)
        elif tag in ("literal", "range"):
            lf = self.leaf(t, rule)
            out = N.concat() if lf is None else lf[1]
        elif tag == "value":
            (c,) = t.children
            if not isinstance(c, Tree):  # a symbol left unresolved: a rule inside a terminal
                raise GrammarError(f"terminal refers to rule {c.name!r} (terminals may only "
                                   "use terminals)", rule, self.lines.get(rule))
            if c.data == "template_usage":
                raise GrammarError("templates cannot be used inside terminals", rule,
                                   self.lines.get(rule))
            out = self.term_tree(c, rule)
        elif tag in ("expr", "maybe"):
            lo, hi = self._bounds(t, rule)
            out = N.repeat(self.term_tree(t.children[0], rule), lo, hi)
        elif tag == "alias":
            raise GrammarError("aliases are not allowed in terminals", rule, self.lines.get(rule))
        else:  # pragma: no cover - lark's grammar has no other node
            raise GrammarError(f"unexpected {tag!r} in a terminal", rule, self.lines.get(rule))
        self.term_memo[id(t)] = out
        return out

    def _bounds(self, t, rule: str) -> tuple[int, int | None]:
        if t.data == "maybe":
            return 0, 1
        op = t.children[1]
        if op == "~":
            lo = int(t.children[2])
            hi = int(t.children[3]) if len(t.children) > 3 else lo
            if lo < 0 or hi < lo:
                raise GrammarError(f"bad repetition ~ {lo}..{hi}", rule, self.lines.get(rule))
            return lo, hi
        return {"?": (0, 1), "*": (0, None), "+": (1, None)}[str(op)]

    # ---------------------------------------------------------------- rules
    def rule_tree(self, t, rule: str, env: dict, refs: list) -> Expr:
        """Expr of a rule's tree; names of rules (and template instances) it uses, in order,
        are appended to ``refs`` (visited later, so no recursion across rules)."""
        from lark import Tree
        from lark.grammar import NonTerminal

        tag = t.data
        if tag == "expansions":
            return alt(*(self.rule_tree(c, rule, env, refs) for c in t.children))
        if tag == "expansion":
            return seq(*(self.rule_tree(c, rule, env, refs) for c in t.children))
        if tag == "alias":
            return self.rule_tree(t.children[0], rule, env, refs)
        if tag in ("expr", "maybe"):
            lo, hi = self._bounds(t, rule)
            return rep(self.rule_tree(t.children[0], rule, env, refs), lo, hi)
        if tag in ("literal", "range"):
            lf = self.leaf(t, rule)
            if lf is None:
                return EPS
            self.anon.setdefault(lf[0], lf[1])
            return ("t", lf[0])
        if tag == "template_usage":
            return self.template(t, rule, env, refs)
        if tag != "value":  # pragma: no cover
            raise GrammarError(f"unexpected {tag!r} in a rule", rule, self.lines.get(rule))
        (c,) = t.children
        if isinstance(c, Tree):
            return self.rule_tree(c, rule, env, refs)
        name = c.name
        if name in env:
            return env[name]
        d = self.defs.get(name)
        line = self.lines.get(rule)
        if not isinstance(c, NonTerminal):
            if d is None or not d.is_term:
                raise GrammarError(f"undefined terminal {name!r}", rule, line)
            self.terminal(name)
            return ("t", name)
        if d is None or d.is_term:
            raise GrammarError(f"undefined rule {name!r}", rule, line)
        if d.params:
            raise GrammarError(f"template {name!r} used without arguments", rule, line)
        refs.append(name)
        return ("n", name)

    def template(self, t, rule: str, env: dict, refs: list) -> Expr:
        name = t.children[0].name
        args = t.children[1:]
        d = self.defs.get(name)
        line = self.lines.get(rule)
        if d is None or d.is_term or not d.params:
            raise GrammarError(f"undefined template {name!r}", rule, line)
        if len(args) != len(d.params):
            raise GrammarError(
                f"template {name!r} takes {len(d.params)} arguments, got {len(args)}", rule, line)
        vals = [self.rule_tree(a, rule, env, refs) for a in args]
        inst = f"{name}{{{', '.join(map(repr, vals))}}}"
        if inst not in self.pending and inst not in self.rules:
            self.pending[inst] = (d.tree, dict(zip(d.params, vals)), name)
            self.lines.setdefault(inst, self.lines.get(name))
        refs.append(inst)
        return ("n", inst)

    def visit_all(self, roots: list[str], max_rules: int) -> None:
        """Translate every rule reachable from ``roots``, depth-first in reference order
        (iteratively: one explicit stack of reference lists)."""

        def visit(name: str) -> list:
            refs: list = []
            self.rules[name] = NOTHING  # placeholder while translating
            self.order.append(name)
            check_limit("rules and template instances", "max_rules", max_rules,
                        len(self.rules) + len(self.terminals), name, self.lines.get(name))
            if name in self.pending:
                tree, env, tname = self.pending.pop(name)
                self.rules[name] = self.rule_tree(tree, tname, env, refs)
            else:
                self.rules[name] = self.rule_tree(self.defs[name].tree, name, {}, refs)
            return refs

        for root in roots:
            if root in self.rules:
                continue
            stack = [iter(visit(root))]
            while stack:
                nxt = next(stack[-1], None)
                if nxt is None:
                    stack.pop()
                elif nxt not in self.rules:
                    stack.append(iter(visit(nxt)))


def parse_lark(text: str, *, start: str | None = None, max_nesting: int = DEFAULT_MAX_NESTING,
               max_rules: int = DEFAULT_MAX_RULES) -> CFG:
    """Parse a Lark grammar (see the module docstring) into a :class:`CFG`.

    Raises:
        LarkNotInstalledError: the ``lark`` package is not installed.
        GrammarError: syntax errors, undefined names, recursive terminals, ``%declare``,
            imports other than lark's ``common`` / ``unicode``, bad regexes — with the rule and
            the line where its definition starts.
        GrammarLimitError: more than ``max_nesting`` nested brackets in one definition or more
            than ``max_rules`` rules and terminals.
    """
    defs, ignore_names, lines = load_definitions(text, COMMON_OVERRIDES)
    check_limit("rules and terminals defined", "max_rules", max_rules, len(defs))
    for name, d in defs.items():
        if d.tree is None:
            raise GrammarError(
                f"%declare {name}: declared terminals come from a custom lexer and have no "
                "byte language", None, lines.get(name))
        check_limit("bracket nesting", "max_nesting", max_nesting, _depth(d.tree), name,
                    lines.get(name))
    tr = _Translator(defs, lines)
    start = start or "start"
    if start not in defs or defs[start].is_term or defs[start].params:
        raise GrammarError(f"no start rule {start!r} defined", start)
    # every definition is translated, so that errors anywhere are reported
    tr.visit_all([start], max_rules)
    for name, d in defs.items():
        if d.is_term:
            tr.terminal(name)
        elif not d.params:
            tr.visit_all([name], max_rules)
    ignore = None
    if ignore_names:
        ignore = N.union(*(tr.terminal(nm) for nm in ignore_names))
        if N.finalize(ignore).start in N.finalize(ignore).finals:
            raise GrammarError("%ignore material must not match the empty string", "%ignore",
                               lines.get("%ignore"))
    # only rules reachable from the start matter; keep the terminals they use
    reach = {start}
    stack = [start]
    while stack:
        x = stack.pop()
        for k, s in symbols_of(tr.rules[x]):
            if k == "n" and s not in reach:
                reach.add(s)
                stack.append(s)
    rules = {a: tr.rules[a] for a in tr.order if a in reach}
    terminals: dict[str, ByteNFA] = {}
    for e in rules.values():
        for k, s in symbols_of(e):
            if k == "t" and s not in terminals:
                terminals[s] = tr.anon[s] if s in tr.anon else tr.terminal(s)
    return CFG(rules, terminals, start, ignore, dict(lines), "lark")
