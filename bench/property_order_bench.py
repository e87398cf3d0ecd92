"""``property_order="any"`` vs schema order: automaton size and compile time (issue 4).

For n = 1..N declared properties (alternating string / integer, the first ``ceil(n/2)``
required, ``additionalProperties: false``) we compile the byte NFA in both orders and report
states, edges and seconds, with the fooling-set lower bound for any NFA of the any-order
language: the C(n, floor(n/2)) subsets of optional-or-required properties written so far must
reach pairwise-distinct states (``w_S w_{S^c}`` is accepted, ``w_S w_{T^c}`` is not for
T != S of the same size: a property would be missing or repeated), so no NFA is polynomial;
ours is (subset written) x (count) states, refused past ``MAX_ANY_ORDER_PROPERTIES``.
Each compile is also checked: a random permutation of a full instance is accepted in any-order
mode and a duplicated key is rejected.

Usage: python bench/property_order_bench.py [--max-n 8]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
import warnings

from harness import RESULTS, machine, utc_now, versions, write_result


def schema(n: int) -> dict:
    props = {f"p{i}": {"type": "string" if i % 2 else "integer"} for i in range(n)}
    return {"type": "object", "properties": props, "additionalProperties": False,
            "required": [f"p{i}" for i in range((n + 1) // 2)]}


def main() -> None:
    from tractable.fsa import nfa as N
    from tractable.fsa.json_schema import MAX_ANY_ORDER_PROPERTIES, json_schema_to_nfa

    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=MAX_ANY_ORDER_PROPERTIES)
    args = ap.parse_args()
    rng = random.Random(0)
    rows = []
    for n in range(1, args.max_n + 1):
        s = schema(n)
        row: dict = {"n": n, "lower_bound": math.comb(n, n // 2)}
        for order in ("schema", "any"):
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                a = N.finalize(json_schema_to_nfa(s, property_order=order))
            row[order] = {"states": a.num_states, "edges": a.num_edges,
                          "seconds": time.perf_counter() - t}
        keys = [f"p{i}" for i in range(n)]
        rng.shuffle(keys)
        vals = {k: ("x" if int(k[1:]) % 2 else 1) for k in keys}
        text = "{" + ",".join(f'"{k}":{json.dumps(v)}' for k, v in vals.items()) + "}"
        dup = "{" + ",".join([f'"{k}":{json.dumps(v)}' for k, v in vals.items()]
                             + [f'"{keys[0]}":{json.dumps(vals[keys[0]])}']) + "}"
        a_any = json_schema_to_nfa(s, property_order="any")
        row["permuted_accepted"] = N.matches(a_any, text.encode())
        row["duplicate_rejected"] = not N.matches(a_any, dup.encode())
        rows.append(row)
        print(row, flush=True)
    meta = {"command": f"python bench/property_order_bench.py --max-n {args.max_n}",
            "machine": machine(note="shared VM"),
            "python": versions()["python"], "date": utc_now()}
    lines = ["# JSON objects: `property_order=\"any\"` vs schema order (byte NFA)", "",
             f"Command: `{meta['command']}`  ", f"Machine: {meta['machine']}; Python "
             f"{meta['python']}; {meta['date']}.", "",
             "n declared properties (alternating string/integer), the first ceil(n/2) required, "
             "`additionalProperties: false`; finalized byte NFA.  Lower bound = C(n, floor(n/2)) "
             "states for *any* NFA of the any-order language (fooling set over the subsets "
             "written so far).  Checks: a shuffled full instance is accepted in any order, a "
             "repeated key is rejected.", "",
             "| n | schema order: states / edges | s | any order: states / edges | s | "
             "NFA lower bound | shuffled accepted | duplicate rejected |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        so, an = r["schema"], r["any"]
        lines.append(f"| {r['n']} | {so['states']} / {so['edges']} | {so['seconds']:.3f} | "
                     f"{an['states']} / {an['edges']} | {an['seconds']:.3f} | "
                     f"{r['lower_bound']} | {r['permuted_accepted']} | "
                     f"{r['duplicate_rejected']} |")
    write_result(RESULTS / "json_schema_property_order", "\n".join(lines) + "\n",
                 {"meta": meta, "rows": rows}, echo=False)


if __name__ == "__main__":
    main()
