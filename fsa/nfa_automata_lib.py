"""Bridge to the automata-lib package (tests and benchmarks only): a :class:`~.nfa.ByteNFA`
as an automata-lib ``NFA``/``DFA`` whose input symbols are one-character strings ``chr(b)``, and
back.  (It depends on :mod:`.nfa`; :mod:`.nfa` does not depend on it.)

automata-lib is not a required dependency of tractable: ``pip install tractable[automata]`` (or
the ``dev`` extra); without it both functions raise ``ModuleNotFoundError`` saying so."""

from __future__ import annotations

from .nfa import ByteNFA, finalize

__all__ = ["to_automata_lib", "from_automata_lib"]


def _automata_lib():
    """automata-lib's ``DFA`` and ``NFA`` classes, imported on first use."""
    try:
        from automata.fa.dfa import DFA
        from automata.fa.nfa import NFA
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            "the automata-lib bridge needs the automata-lib package: "
            "pip install 'tractable[automata]'") from e
    return DFA, NFA


def to_automata_lib(nfa: ByteNFA, *, deterministic: bool = False):
    """Export to an automata-lib ``NFA`` (or, with ``deterministic=True``, its ``DFA``).

    Input symbols are one-character strings ``chr(b)`` for the bytes used.  Determinizing is
    exponential in the worst case: use it on small automata only (tests, benchmarks).
    """
    DFA, NFA = _automata_lib()
    f = finalize(nfa, reduce=False)
    symbols: set[str] = set()
    trans: dict[str, dict[str, set[str]]] = {f"q{s}": {} for s in range(f.num_states)}
    for s, m, d in f.edges:
        row = trans[f"q{s}"]
        mm = m
        while mm:
            low = mm & -mm
            ch = chr(low.bit_length() - 1)
            symbols.add(ch)
            row.setdefault(ch, set()).add(f"q{d}")
            mm ^= low
    if not symbols:
        symbols.add(chr(0))
    out = NFA(
        states=set(trans),
        input_symbols=symbols,
        transitions=trans,
        initial_state=f"q{f.start}",
        final_states={f"q{s}" for s in f.finals},
    )
    return DFA.from_nfa(out) if deterministic else out


def from_automata_lib(fa) -> ByteNFA:
    """Import an automata-lib ``NFA`` or ``DFA``.

    Each input symbol must be a one-character ``str`` (or a 1-byte ``bytes``) or a longer
    string, which is read as its UTF-8 bytes.  Epsilon moves (symbol ``""``) are kept.
    """
    DFA, _ = _automata_lib()
    names: dict = {}

    def sid(x) -> int:
        if x not in names:
            names[x] = len(names)
        return names[x]

    sid(fa.initial_state)
    for s in sorted(fa.states, key=repr):
        sid(s)
    parts_edges: list[tuple[int, int, int]] = []
    eps: list[tuple[int, int]] = []
    extra = len(names)
    chains: list[tuple[int, bytes, int]] = []
    for s, row in fa.transitions.items():
        for sym, dsts in row.items():
            if isinstance(fa, DFA):
                dsts = (dsts,)
            for d in dsts:
                if sym == "":
                    eps.append((sid(s), sid(d)))
                    continue
                data = sym if isinstance(sym, bytes) else sym.encode("utf-8")
                if len(data) == 1:
                    parts_edges.append((sid(s), 1 << data[0], sid(d)))
                else:
                    chains.append((sid(s), data, sid(d)))
    n = extra
    for s, data, d in chains:
        prev = s
        for i, byte in enumerate(data):
            nxt = d if i == len(data) - 1 else n
            if nxt == n:
                n += 1
            parts_edges.append((prev, 1 << byte, nxt))
            prev = nxt
    finals = frozenset(sid(f) for f in fa.final_states)
    return ByteNFA(n, sid(fa.initial_state), finals, tuple(parts_edges), tuple(eps))
