"""Paper 002 §5.5 / Fig. 4: NFA vs minimal-DFA size for the ``add_vec_n`` function schema.

    properties x1..xn, y1..yn (integers, schema order), anyOf_i {required: [xi, yi]}

(``additionalProperties: false`` so that the count isolates the required-set structure; the
paper's listing leaves it implicit).  For n = 1..N we report the finalized byte-level NFA
(states, edges), the token-level NFA on the Llama-3 vocabulary (states, edges), and for small n
the minimal DFA over bytes (automata-lib ``DFA.from_nfa`` then ``minify``), with a time limit.

Usage: python bench/succinctness.py [--max-n 12] [--max-dfa-n 8] [--dfa-timeout 120]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

from harness import RESULTS, command_line, load_vocabulary, machine, utc_now, versions, write_result

OUT = RESULTS


NOTE = """Reading: the minimal DFA roughly doubles with each n (it must remember which x_i were
written), while the NFA grows polynomially: it is the union of the n anyOf branches, each an
ordered object automaton of 2n optional/required slots, so O(n^2) states (reduce_states shares
the common suffixes).  Quadratic is the best an NFA can do *with properties in schema order*: the
strings x_i y_p (for p < i) must reach pairwise-distinguishable states (extended fooling set:
x_i y_p' y_{p+1}..y_i is rejected for p' > p), so the paper's "linear" is linear in the number of
property *slots per branch*, not overall.  Token-level state counts equal byte-level ones here
because every state of this NFA is reached at a token boundary by some token sequence."""


def add_vec_schema(n: int) -> dict:
    props = {f"x{i}": {"type": "integer"} for i in range(1, n + 1)}
    props.update({f"y{i}": {"type": "integer"} for i in range(1, n + 1)})
    return {
        "name": f"add_vec_{n}",
        "type": "object",
        "properties": props,
        "additionalProperties": False,
        "anyOf": [{"required": [f"x{i}", f"y{i}"]} for i in range(1, n + 1)],
    }


def _dfa_states(n: int, q) -> None:
    from tractable.fsa import nfa as N
    from tractable.fsa import nfa_automata_lib as NA
    from tractable.fsa.json_schema import json_schema_to_nfa

    schema = add_vec_schema(n)
    schema.pop("name")
    a = N.finalize(json_schema_to_nfa(schema))
    dfa = NA.to_automata_lib(a, deterministic=True)
    m = dfa.minify()
    q.put((len(dfa.states), len(m.states)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=12)
    ap.add_argument("--max-dfa-n", type=int, default=8)
    ap.add_argument("--dfa-timeout", type=float, default=120)
    args = ap.parse_args()
    from tractable.fsa import nfa as N
    from tractable.fsa.automaton import TokenAutomaton
    from tractable.fsa.json_schema import json_schema_to_nfa

    vocab = load_vocabulary("llama3")
    rows = []
    for n in range(1, args.max_n + 1):
        schema = add_vec_schema(n)
        schema.pop("name")
        t0 = time.perf_counter()
        a = N.finalize(json_schema_to_nfa(schema))
        t_nfa = time.perf_counter() - t0
        t0 = time.perf_counter()
        A = TokenAutomaton.from_byte_nfa(a, vocab)
        t_tok = time.perf_counter() - t0
        row = {"n": n, "nfa_states": a.num_states, "nfa_edges": a.num_edges,
               "token_states": A.num_states, "token_edges": A.num_edges,
               "nfa_seconds": t_nfa, "token_seconds": t_tok, "dfa_states": None,
               "min_dfa_states": None}
        if n <= args.max_dfa_n:
            q = mp.Queue()
            p = mp.Process(target=_dfa_states, args=(n, q))
            p.start()
            p.join(args.dfa_timeout)
            if p.is_alive():
                p.terminate()
                row["min_dfa_states"] = "timeout"
            else:
                row["dfa_states"], row["min_dfa_states"] = q.get()
        rows.append(row)
        print(row, flush=True)
    ver = versions("automata-lib")
    meta = {"command": command_line("succinctness.py", args, prefix="python"),
        "machine": machine(note="shared VM"), "python": ver["python"],
        "automata-lib": ver["automata-lib"], "date": utc_now()}
    lines = ["# add_vec_n: NFA vs minimal DFA (paper 002 §5.5, Fig. 4)", "",
             f"Command: `{meta['command']}`  ", f"Machine: {meta['machine']}; Python "
             f"{meta['python']}; automata-lib {meta['automata-lib']}; {meta['date']}.", "",
             "Byte NFA = finalized (epsilon-free, trimmed, identical-future states merged). "
             "Token NFA = lifted to the Llama-3 vocabulary (128,256 ids). Minimal DFA = "
             "automata-lib subset construction + minify over bytes.", "",
             "| n | byte NFA states | byte NFA edges | token NFA states | token NFA edges | "
             "DFA states | minimal DFA states |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['nfa_states']} | {r['nfa_edges']} | {r['token_states']} "
                     f"| {r['token_edges']} | {r['dfa_states'] or '—'} | "
                     f"{r['min_dfa_states'] or '—'} |")
    lines += ["", NOTE]
    write_result(OUT / "json_schema_succinctness", "\n".join(lines) + "\n",
                 {"meta": meta, "rows": rows}, echo=False)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ns = [r["n"] for r in rows]
    ax.plot(ns, [r["nfa_states"] for r in rows], "o-", label="byte NFA")
    ax.plot(ns, [r["token_states"] for r in rows], "s-", label="token NFA (Llama-3)")
    d = [(r["n"], r["min_dfa_states"]) for r in rows if isinstance(r["min_dfa_states"], int)]
    if d:
        ax.plot([x for x, _ in d], [y for _, y in d], "^-", label="minimal DFA (bytes)")
    ax.set_yscale("log")
    ax.set_xlabel("n")
    ax.set_ylabel("states")
    ax.set_title("add_vec_n: NFA vs minimal DFA")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "json_schema_succinctness.png", dpi=120)


if __name__ == "__main__":
    main()
