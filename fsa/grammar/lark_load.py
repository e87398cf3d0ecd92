"""Load a Lark grammar's definitions with the ``lark`` package's own grammar parser.

:func:`load_definitions` is ``lark.load_grammar.GrammarBuilder.load_grammar`` statement by
statement, so that each definition keeps the line where it starts, imports are restricted to
lark's standard library (``common``, ``unicode``: a grammar never makes tractable read a file),
and lark's exceptions become :class:`~..errors.GrammarError` s with a rule and a line.
"""

from __future__ import annotations

import re

from ..errors import GrammarError

__all__ = ["load_definitions", "LarkNotInstalledError", "STDLIB_MODULES"]

#: Modules of lark's standard library that ``%import`` may name.
STDLIB_MODULES = ("common", "unicode")


class LarkNotInstalledError(GrammarError, ImportError):
    """Lark syntax needs the ``lark`` package: ``pip install 'tractable[grammar]'``."""

    def __init__(self):
        GrammarError.__init__(
            self, "Lark grammars are parsed by the 'lark' package, which is not installed: "
            "pip install 'tractable[grammar]' (or lark>=1.1); GBNF/EBNF grammars need nothing")


def _lark():
    try:
        import lark
        import lark.load_grammar as lg
    except ImportError:
        raise LarkNotInstalledError() from None
    return lark, lg


def _first_line(tree) -> int | None:
    from lark import Token

    for v in tree.scan_values(lambda v: isinstance(v, Token)):
        if v.line is not None:
            return v.line
    return None


def _def_start(text: str, line: int) -> tuple[str | None, int]:
    """The definition (name, first line) that contains ``line``: the last line at or before it
    that starts a rule or terminal (``name:``, ``?name.2:``, ``NAME.1 :``)."""
    head = re.compile(r"^\s*[?!]*([_a-zA-Z][_a-zA-Z0-9]*)\s*(?:\{[^}]*\})?\s*(?:\.-?\d+)?\s*:")
    lines = text.split("\n")
    for i in range(min(line, len(lines)) - 1, -1, -1):
        m = head.match(lines[i])
        if m:
            return m.group(1), i + 1
        if lines[i].strip() and not lines[i].lstrip().startswith(("|", "//", "#")) and i < line - 1:
            break
    return None, line


def _syntax_error(lark, lg, text: str, e) -> GrammarError:
    """A GrammarError for lark's parse error ``e`` (at the start of the construct)."""
    tok = getattr(e, "token", None)
    found = repr(str(tok)) if tok is not None and str(tok) else "end of line"
    if isinstance(e, lark.exceptions.UnexpectedToken):
        try:
            hint = lg._translate_parser_exception(lg._get_parser().parse, e)
        except Exception:  # lark's example matching is best effort
            hint = None
        what = f"unexpected {found}" + (f" ({hint})" if hint else "")
    else:
        what = f"unexpected character {text[e.pos_in_stream]!r}" if getattr(
            e, "pos_in_stream", None) is not None and e.pos_in_stream < len(text) else \
            "unexpected input"
    name, start = _def_start(text, e.line)
    where = f" at line {e.line} column {e.column}"
    return GrammarError(what + where, name, start)


def load_definitions(text: str, overrides: dict[str, str]):
    """Parse ``text`` with lark and return ``(definitions, ignore_names, lines)``:
    name → lark ``Definition`` (``is_term``, ``tree``, ``params``; terminal references inside
    terminals already inlined by lark), the names of the ``%ignore`` terminals, and
    name → first line of its definition (``"%ignore"`` → line of the first ``%ignore``).

    ``overrides`` maps a ``common`` terminal name to a Lark expression replacing its definition.

    Raises:
        LarkNotInstalledError, GrammarError.
    """
    lark, lg = _lark()
    try:
        tree = lg._get_parser().parse(text + "\n", "start")
    except lark.exceptions.UnexpectedInput as e:
        raise _syntax_error(lark, lg, text, e) from None
    tree = lg.PrepareGrammar().transform(tree)
    builder = lg.GrammarBuilder(False, [])
    lines: dict[str, int] = {}
    kw_lines = {k: [m.start() for m in re.finditer(rf"^[ \t]*%{k}\b", text, re.M)]
                for k in ("ignore", "declare")}
    kw_seen = {"ignore": 0, "declare": 0}

    def kw_line(kind: str) -> int | None:
        pos = kw_lines[kind]
        k = kw_seen[kind]
        kw_seen[kind] += 1
        return text.count("\n", 0, pos[k]) + 1 if k < len(pos) else None

    def fail(e, rule=None, line=None):
        return GrammarError(str(e).strip().split("\n")[0], rule, line)

    for stmt in tree.children:
        line = _first_line(stmt)
        try:
            if stmt.data == "import":
                dotted, base_path, aliases = builder._unpack_import(stmt, "<grammar>")
                mod = ".".join(dotted)
                if base_path is not None or len(dotted) != 1 or dotted[0] not in STDLIB_MODULES:
                    raise GrammarError(
                        f"%import {mod}: only lark's standard modules "
                        f"{', '.join(STDLIB_MODULES)} can be imported (common is the usual "
                        "one; grammar files are never read)", None, line)
                builder.do_import(dotted, None, aliases, None)
                for name, alias in aliases.items():
                    if str(alias) not in builder._definitions:
                        raise GrammarError(f"%import {mod}.{name}: {mod} has no {name!r}",
                                           None, line)
                    lines.setdefault(str(alias), line)
                    if dotted[0] == "common" and name in overrides:
                        sub = lg.GrammarBuilder(False, [])
                        sub.load_grammar(f"{name}: {overrides[name]}\n", "<override>")
                        builder._definitions[str(alias)].tree = sub._definitions[name].tree
            elif stmt.data in ("rule", "term", "override", "extend"):
                d = stmt.children[0] if stmt.data in ("override", "extend") else stmt
                name, is_term, exp, params, opts = builder._unpack_definition(d, None)
                name = str(name)
                params = tuple(str(p) for p in params)
                if stmt.data == "extend":
                    builder._extend(name, is_term, exp, params, opts)
                else:
                    builder._define(name, is_term, exp, params, opts,
                                    override=stmt.data == "override")
                    lines[name] = line
            elif stmt.data == "ignore":
                ln = kw_line("ignore")
                lines.setdefault("%ignore", ln)
                before = len(builder._ignore_names)
                builder._ignore(*stmt.children)
                for nm in builder._ignore_names[before:]:
                    lines.setdefault(nm, ln)
            elif stmt.data == "declare":
                ln = kw_line("declare")
                for sym in stmt.children:
                    builder._define(str(sym.name), sym.is_term, None)
                    lines[str(sym.name)] = ln
        except GrammarError:
            raise
        except (lark.exceptions.GrammarError, OSError) as e:
            name, _ = _def_start(text, line) if line else (None, None)
            raise fail(e, name, line) from None
    defs = builder._definitions
    terms = {name: d.tree for name, d in defs.items() if d.is_term}
    for name, t in terms.items():
        for sym in t.scan_values(lambda v: isinstance(v, lark.grammar.Symbol)) if t else ():
            if sym.is_term and sym.name not in terms:
                raise GrammarError(f"undefined terminal {sym.name!r}", str(name), lines.get(name))
    try:
        lg.resolve_term_references(terms)
    except lark.exceptions.GrammarError as e:
        msg = str(e)
        m = re.search(r"Recursion in terminal '([^']+)'", msg)
        if m:
            raise GrammarError("terminal definitions are recursive", m.group(1),
                               lines.get(m.group(1))) from None
        m = re.search(r"\((\S+) in (\S+)\)", msg)
        if m:  # "Rules aren't allowed inside terminals (rule in TERM)"
            raise GrammarError(f"terminal refers to rule {m.group(1)!r} (terminals may only use "
                               "terminals)", m.group(2), lines.get(m.group(2))) from None
        m = re.search(r"not defined: (\S+)", msg)
        if m:
            raise GrammarError(f"undefined terminal {m.group(1)!r}", None, None) from None
        raise fail(e) from None
    out = {str(k): v for k, v in defs.items()}
    return out, [str(n) for n in builder._ignore_names], lines
