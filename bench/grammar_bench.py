"""Grammar benchmarks (issue 8): coverage, gold acceptance, SQL state counts, checker cost.

    .venv/bin/python bench/grammar_bench.py coverage    # -> results/grammar_coverage.{md,json}
    .venv/bin/python bench/grammar_bench.py gold        # -> results/grammar_gold.{md,json}
    .venv/bin/python bench/grammar_bench.py sql_states  # -> results/grammar_sql_states.{md,json}
    .venv/bin/python bench/grammar_bench.py cost        # -> results/grammar_cost.{md,json}

Reads ../shared/data (not available to tests).  Tokenizer: fixtures/tokenizers/llama3.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import signal
import statistics
import sys
import time
import warnings
from contextlib import contextmanager
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "bench" / "results"
TOK = ROOT / "fixtures" / "tokenizers" / "llama3" / "tokenizer.json"
GDATA = ROOT / "tests" / "data" / "grammars"


class Timeout(Exception):
    pass


@contextmanager
def time_limit(seconds: int):
    def handler(signum, frame):
        raise Timeout()

    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def header(cmd: str) -> str:
    import lark

    from tractable import __version__

    return (
        f"- command: `{cmd}`\n- machine: {platform.machine()}, {platform.processor() or 'cpu'}, "
        f"Python {platform.python_version()}, shared 2-core box (timings noisy)\n"
        f"- versions: tractable {__version__}, lark {lark.__version__}\n- date: {date.today()}\n"
    )


def grammar_files() -> list[Path]:
    out = []
    for sub in ("gbnf_grammars", "spider", "smiles", "cars_grammar_tasks"):
        for ext in ("*.gbnf", "*.ebnf", "*.lark"):
            out.extend((DATA / sub).rglob(ext))
    return sorted(out)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# --------------------------------------------------------------------------- coverage


def coverage_one(args) -> None:
    """One grammar (run in a subprocess by ``coverage``): prints its row as JSON."""
    from tractable.fsa.errors import TractableError
    from tractable.fsa.vocabulary import TokenVocabulary

    from tractable.grammar import Checker, compile_grammar, parse_grammar

    path = Path(args.path)
    rel = str(path.relative_to(DATA))
    text = path.read_text()
    syntax = "ebnf" if path.suffix == ".ebnf" else path.suffix[1:]
    row: dict = {"grammar": rel, "syntax": syntax}
    try:
        t = time.perf_counter()
        g = parse_grammar(text, syntax=syntax)
        row["parse_s"] = time.perf_counter() - t
        row["rules"] = len(g.rules)
        Checker(g)
    except (TractableError, RecursionError) as e:
        row["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(row))
        return
    vocab = TokenVocabulary.from_tokenizer_file(TOK)
    for mode, depths in (("over", [0]), ("under", [2, 1, 0])):
        for k in depths:
            try:
                t = time.perf_counter()
                with warnings.catch_warnings(), time_limit(args.limit):
                    warnings.simplefilter("ignore")
                    A = compile_grammar(g, vocab, approximation=mode, max_depth=k,
                                        max_states=args.max_states)
                row[mode] = {
                    "max_depth": k if mode == "under" else None,
                    "byte_states": A.meta["byte_states"],
                    "byte_edges": A.meta["byte_edges"],
                    "token_states": A.meta["token_states"],
                    "token_edges": A.meta["token_edges"],
                    "seconds": time.perf_counter() - t,
                }
                break
            except Timeout:
                row[mode] = {"error": f"over {args.limit}s at depth {k}"}
            except (TractableError, MemoryError) as e:
                row[mode] = {"error": f"{type(e).__name__}: {e}"[:160]}
    print(json.dumps(row))


def coverage(args) -> None:
    import resource
    import subprocess

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (args.mem_gb << 30, args.mem_gb << 30))

    rows = []
    for path in grammar_files():
        rel = str(path.relative_to(DATA))
        print(rel, flush=True)
        cmd = [sys.executable, __file__, "one", "--path", str(path), "--limit", str(args.limit),
               "--max-states", str(args.max_states)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * args.limit,
                               preexec_fn=limit_memory)
            lines_out = [x for x in p.stdout.splitlines() if x.startswith("{")]
            if lines_out:
                row = json.loads(lines_out[-1])
            else:
                row = {"grammar": rel, "error": f"process failed (rc={p.returncode}): "
                       + (p.stderr.strip().splitlines() or ["?"])[-1][:160]}
        except subprocess.TimeoutExpired:
            row = {"grammar": rel, "error": f"timeout {4 * args.limit}s"}
        rows.append(row)
        print("  ", {k: v for k, v in row.items() if k in ("over", "under", "error")}, flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "grammar_coverage.json").write_text(json.dumps(rows, indent=1))
    lines = [
        "# Grammar coverage: every grammar in shared/data, both approximations, Llama-3 vocabulary",
        "",
        header("python bench/grammar_bench.py coverage"),
        f"`under` tries max_depth 2, then 1, then 0 (byte-state cap {args.max_states:,}, "
        f"{args.limit}s per compile, {args.mem_gb} GiB per grammar process); sizes are byte-NFA "
        "states/edges and token-automaton states/edges; time includes lifting to tokens.",
        "",
        "| grammar | rules | over: byte st/edges | over: token st/edges | s | under depth | "
        "under: byte st/edges | under: token st/edges | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    n_ok = {"over": 0, "under": 0}
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['grammar']} | rejected: {r['error']} |||||||| ")
            continue
        if "over" not in r or "under" not in r:
            lines.append(f"| {r['grammar']} | {r.get('rules', '')} | incomplete |||||||")
            continue
        cells = [r["grammar"], str(r["rules"])]
        for mode in ("over", "under"):
            m = r.get(mode, {})
            if "error" in m:
                cells += (["—"] if mode == "under" else []) + [m["error"], "", ""]
                continue
            n_ok[mode] += 1
            if mode == "under":
                cells.append(str(m["max_depth"]))
            cells += [f"{m['byte_states']}/{m['byte_edges']}",
                      f"{m['token_states']}/{m['token_edges']}", f"{m['seconds']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"{len(rows)} grammar files; compiled: over {n_ok['over']}, under "
              f"{n_ok['under']}; rejected at parse: {sum('error' in r for r in rows)}.", ""]
    (OUT / "grammar_coverage.md").write_text("\n".join(lines))


# --------------------------------------------------------------------------- gold


def gold(args) -> None:
    from tractable.fsa import nfa as N

    from tractable.grammar import Checker, grammar_to_nfa, parse_grammar, unroll

    res = {}
    sets = [
        ("spider/grammars/cars_spider_sql.lark", "spider_dev_gold.txt.gz", "", [0]),
        ("smiles/genlm/smiles.lark", "smiles_molecules.txt.gz", " ", [0, 1, 2, 3]),
    ]
    for gpath, data, prefix, depths in sets:
        text = (DATA / gpath).read_text()
        with gzip.open(GDATA / data, "rt") as f:
            items = [prefix + x for x in f.read().split("\n") if x]
        g = parse_grammar(text)
        c = Checker(g)
        t = time.perf_counter()
        rejected = [s for s in items if not c.accepts(s)]
        t_check = time.perf_counter() - t
        over = grammar_to_nfa(g, approximation="over")
        over_rej = [s for s in items if not N.matches(over, s.encode())]
        under = {}
        for k in depths:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                u = grammar_to_nfa(g, approximation="under", max_depth=k)
            cu = Checker(unroll(g, k))
            within = [s for s in items if cu.accepts(s)]
            acc = [s for s in within if N.matches(u, s.encode())]
            under[k] = {"within_depth": len(within), "accepted": len(acc)}
        res[gpath] = {
            "n": len(items), "checker_rejected": rejected, "checker_seconds": t_check,
            "over_rejected": over_rej,
            "over_rejects_subset_of_checker": set(over_rej) <= set(rejected),
            "under": under,
        }
        print(gpath, len(items), len(rejected), len(over_rej), under, flush=True)
    (OUT / "grammar_gold.json").write_text(json.dumps(res, indent=1))
    lines = ["# Real sentences vs the exact checker and the approximations", "",
             header("python bench/grammar_bench.py gold"),
             "| grammar | sentences | rejected by checker | rejected by over (byte NFA) | "
             "under: depth → (#within depth, #accepted) | checker s |", "|---|---|---|---|---|---|"]
    for gp, r in res.items():
        u = ", ".join(f"{k}→({v['within_depth']}, {v['accepted']})" for k, v in r["under"].items())
        lines.append(f"| {gp} | {r['n']} | {len(r['checker_rejected'])} | "
                     f"{len(r['over_rejected'])} | {u} | {r['checker_seconds']:.1f} |")
    lines += ["", "Rejected by the exact checker (the grammar does not cover them):", ""]
    for gp, r in res.items():
        for s in sorted(set(r["checker_rejected"])):
            lines.append(f"- `{gp}`: `{s}`")
    lines += ["", "Reasons (SQL): the CARS grammar's `subquery` is `\"(\" query_expr \")\"`, so "
              "UNION/INTERSECT/EXCEPT inside parentheses is outside it; its AGGREGATION terminal "
              "is the single token `COUNT(DISTINCT` (and `COUNT(`), so `COUNT( DISTINCT x)` and "
              "`COUNT (*)` (a space) are outside it.  Every string the over-approximation "
              "rejects is also rejected by the checker (it is a superset of the grammar).", ""]
    (OUT / "grammar_gold.md").write_text("\n".join(lines))


# --------------------------------------------------------------------------- SQL states


def sql_states(args) -> None:
    import gc
    import resource

    from tractable.fsa import nfa as N
    from tractable.fsa.automaton import TokenAutomaton
    from tractable.fsa.vocabulary import TokenVocabulary

    from tractable.grammar import grammar_to_nfa, parse_grammar

    resource.setrlimit(resource.RLIMIT_AS, (args.mem_gb << 30, args.mem_gb << 30))
    vocab = TokenVocabulary.from_tokenizer_file(TOK)
    g = parse_grammar((DATA / "spider/grammars/cars_spider_sql.lark").read_text())
    rows = []
    for mode, k in (("over", 0), ("under", 0)):
        row = {"approximation": mode, "max_depth": k if mode == "under" else None}
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nfa = grammar_to_nfa(g, approximation=mode, max_depth=k)
        row["char_nfa_states"], row["char_nfa_edges"] = nfa.num_states, nfa.num_edges
        row["char_nfa_s"] = time.perf_counter() - t
        t = time.perf_counter()
        try:
            with time_limit(args.limit):
                dfa = N.to_automata_lib(nfa, deterministic=True)
            row["char_dfa_states"] = len(dfa.states)
            row["char_dfa_s"] = time.perf_counter() - t
        except Timeout:
            row["char_dfa_states"] = None
            row["char_dfa_s"] = f"> {args.limit}"
        except MemoryError:
            row["char_dfa_states"] = None
            row["char_dfa_s"] = (f"out of memory ({args.mem_gb} GiB) after "
                                 f"{time.perf_counter() - t:.0f}")
        gc.collect()
        t = time.perf_counter()
        try:
            with time_limit(args.limit * 3):
                A = TokenAutomaton.from_byte_nfa(nfa, vocab)
            row["token_nfa_states"], row["token_nfa_edges"] = A.num_states, A.num_edges
            row["token_nfa_s"] = time.perf_counter() - t
        except Timeout:
            row["token_nfa_states"] = None
            row["token_nfa_s"] = f"> {args.limit * 3}"
        except MemoryError:
            row["token_nfa_states"] = None
            row["token_nfa_s"] = (f"out of memory ({args.mem_gb} GiB) after "
                                  f"{time.perf_counter() - t:.0f}")
        gc.collect()
        rows.append(row)
        print(row, flush=True)
    (OUT / "grammar_sql_states.json").write_text(json.dumps(rows, indent=1))
    lines = ["# SQL grammar (CARS Spider Lark grammar): states, paper 002 Table 5 analog", "",
             header("python bench/grammar_bench.py sql_states"),
             "Character level = our byte NFA (finalized, ε-free); DFA = automata-lib "
             f"`DFA.from_nfa` (time limit {args.limit}s, {args.mem_gb} GiB); token level = "
             "lifted to the Llama-3 vocabulary (128,256 tokens).  The token-level DFA is not "
             "attempted: the char DFA is the lower bound of its work.", "",
             "| approximation | char NFA states / edges | s | char DFA states | s | "
             "token NFA states / edges | s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        name = r["approximation"] + (f" (depth {r['max_depth']})" if r["max_depth"] is not None
                                     else "")

        def f(x):
            return f"{x:.1f}" if isinstance(x, float) else str(x)

        lines.append(
            f"| {name} | {r['char_nfa_states']:,} / {r['char_nfa_edges']:,} | "
            f"{f(r['char_nfa_s'])} | {r['char_dfa_states'] or 'did not finish'} | "
            f"{f(r['char_dfa_s'])} | {r.get('token_nfa_states') or '—'} / "
            f"{r.get('token_nfa_edges') or '—'} | {f(r['token_nfa_s'])} |")
    (OUT / "grammar_sql_states.md").write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- checker cost


def cost(args) -> None:
    from tokenizers import Tokenizer

    from tractable.grammar import Checker

    tok = Tokenizer.from_file(str(TOK))
    text = (DATA / "spider/grammars/cars_spider_sql.lark").read_text()
    with gzip.open(GDATA / "spider_dev_gold.txt.gz", "rt") as f:
        gold = [x for x in f.read().split("\n") if x][: args.n]
    c = Checker(text)
    ours = []
    accepted = [q for q in gold if c.accepts(q)]
    c.clear_cache()
    for q in accepted:
        ids = tok.encode(q, add_special_tokens=False).ids
        pieces = [tok.decode([i]).encode() for i in ids]
        if b"".join(pieces) != q.encode():
            continue
        prefix = b""
        for p in pieces:
            t = time.perf_counter()
            assert c.viable(prefix + p)
            ours.append(time.perf_counter() - t)
            prefix += p
    res = {"n_queries": len(accepted), "ours_per_token_s": ours}
    # peers: mask computation per token on the same grammar
    try:
        import llguidance
        import llguidance.hf
        import llguidance.numpy
        from transformers import PreTrainedTokenizerFast

        hf = PreTrainedTokenizerFast(tokenizer_file=str(TOK))
        lt = llguidance.hf.from_tokenizer(hf)
        grm = llguidance.LLMatcher.grammar_from_lark(text)
        llg = []
        errs = 0
        import numpy as np

        for q in accepted:
            m = llguidance.LLMatcher(lt, grm)
            if m.is_error():
                errs += 1
                break
            ids = tok.encode(q, add_special_tokens=False).ids
            buf = np.zeros((1, (lt.vocab_size + 31) // 32), dtype=np.int32)
            for i in ids:
                t = time.perf_counter()
                llguidance.numpy.fill_next_token_bitmask(m, buf, 0)
                llg.append(time.perf_counter() - t)
                if not m.consume_token(i):
                    errs += 1
                    break
        res["llguidance_mask_per_token_s"] = llg
        res["llguidance_rejected"] = errs
    except Exception as e:  # noqa: BLE001 - record why the peer could not run
        res["llguidance_error"] = f"{type(e).__name__}: {e}"[:300]
    try:
        import xgrammar as xgr
        from transformers import PreTrainedTokenizerFast

        hf = PreTrainedTokenizerFast(tokenizer_file=str(TOK))
        info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=len(hf))
        comp = xgr.GrammarCompiler(info)
        ebnf = (DATA / "cars_grammar_tasks/fuzzing/sql.ebnf").read_text()
        res["xgrammar_note"] = ("xgrammar has no Lark front end; the Spider Lark grammar cannot "
                                "be given to it")
        try:
            xgr.Grammar.from_ebnf(text)
        except Exception as e:  # noqa: BLE001
            res["xgrammar_error_on_spider_lark"] = f"{type(e).__name__}: {e}"[:200]
        del comp, ebnf
    except Exception as e:  # noqa: BLE001
        res["xgrammar_error"] = f"{type(e).__name__}: {e}"[:300]
    res["smiles"] = smiles_three_way(tok, args.n)
    (OUT / "grammar_cost.json").write_text(json.dumps(res))
    lines = ["# Exact checker cost per token on Spider gold queries (Llama-3 tokenization)", "",
             header(f"python bench/grammar_bench.py cost --n {args.n}"),
             "Ours: one `Checker.viable(prefix + token)` per generated token with the column "
             "cache (the incremental step).  llguidance: `fill_next_token_bitmask` per token "
             "(a full 128k-token mask from the same Lark grammar).  These measure different "
             "things: a mask answers all 128,256 tokens at once, our probe answers one.", "",
             "| engine | tokens | median µs/token | p90 µs/token |", "|---|---|---|---|"]
    for name, key in (("tractable Checker.viable (1 probe)", "ours_per_token_s"),
                      ("llguidance mask", "llguidance_mask_per_token_s")):
        xs = res.get(key)
        if xs:
            lines.append(f"| {name} | {len(xs)} | {1e6 * statistics.median(xs):.0f} | "
                         f"{1e6 * pct(xs, 0.9):.0f} |")
    sm = res["smiles"]
    lines += ["", "## SMILES (transformers-CFG `generic.ebnf`, GBNF syntax: all three engines)", "",
              "| engine | tokens | median µs/token | p90 µs/token |", "|---|---|---|---|"]
    for name, key in (("tractable Checker.viable (1 probe)", "ours"),
                      ("llguidance mask (gbnf_to_lark)", "llguidance"),
                      ("xgrammar mask (from_ebnf)", "xgrammar")):
        xs = sm.get(key)
        if xs:
            lines.append(f"| {name} | {len(xs)} | {1e6 * statistics.median(xs):.0f} | "
                         f"{1e6 * pct(xs, 0.9):.0f} |")
        elif key + "_error" in sm:
            lines.append(f"| {name} | — | {sm[key + '_error']} | |")
    for k in ("llguidance_error", "llguidance_rejected", "xgrammar_note",
              "xgrammar_error_on_spider_lark", "xgrammar_error"):
        if k in res:
            lines.append(f"\n- {k}: {res[k]}")
    (OUT / "grammar_cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def smiles_three_way(tok, n: int) -> dict:
    import numpy as np

    from tractable.grammar import Checker

    text = (DATA / "smiles/transformers-CFG/generic.ebnf").read_text()
    with gzip.open(GDATA / "smiles_molecules.txt.gz", "rt") as f:
        mols = [x for x in f.read().split("\n") if x][:n]
    c = Checker(text, syntax="ebnf")
    mols = [m for m in mols if c.accepts(m)]
    seqs = []
    for m in mols:
        ids = tok.encode(m, add_special_tokens=False).ids
        pieces = [tok.decode([i]).encode() for i in ids]
        if b"".join(pieces) == m.encode():
            seqs.append((ids, pieces))
    out: dict = {"n_molecules": len(seqs)}
    c.clear_cache()
    ours = []
    for _ids, pieces in seqs:
        prefix = b""
        for p in pieces:
            t = time.perf_counter()
            c.viable(prefix + p)
            ours.append(time.perf_counter() - t)
            prefix += p
    out["ours"] = ours
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_file=str(TOK))
    try:
        import llguidance
        import llguidance.hf
        import llguidance.numpy
        from llguidance.gbnf_to_lark import gbnf_to_lark

        lt = llguidance.hf.from_tokenizer(hf)
        grm = llguidance.LLMatcher.grammar_from_lark(gbnf_to_lark(text))
        xs = []
        buf = np.zeros((1, (lt.vocab_size + 31) // 32), dtype=np.int32)
        for ids, _ in seqs:
            m = llguidance.LLMatcher(lt, grm)
            for i in ids:
                t = time.perf_counter()
                llguidance.numpy.fill_next_token_bitmask(m, buf, 0)
                xs.append(time.perf_counter() - t)
                m.consume_token(i)
        out["llguidance"] = xs
    except Exception as e:  # noqa: BLE001
        out["llguidance_error"] = f"{type(e).__name__}: {e}"[:200]
    try:
        import torch
        import xgrammar as xgr

        info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=len(hf))
        cg = xgr.GrammarCompiler(info).compile_grammar(text)
        mask = xgr.allocate_token_bitmask(1, info.vocab_size)
        xs = []
        for ids, _ in seqs:
            m = xgr.GrammarMatcher(cg)
            for i in ids:
                t = time.perf_counter()
                m.fill_next_token_bitmask(mask)
                xs.append(time.perf_counter() - t)
                m.accept_token(i)
        out["xgrammar"] = xs
        del torch
    except Exception as e:  # noqa: BLE001
        out["xgrammar_error"] = f"{type(e).__name__}: {e}"[:200]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["coverage", "gold", "sql_states", "cost", "one"])
    ap.add_argument("--path", help="grammar file for `one`")
    ap.add_argument("--mem-gb", type=int, default=6)
    ap.add_argument("--limit", type=int, default=120, help="seconds per compile / DFA")
    ap.add_argument("--max-states", type=int, default=300_000)
    ap.add_argument("--n", type=int, default=200, help="gold queries for `cost`")
    args = ap.parse_args()
    sys.setrecursionlimit(10000)
    {"coverage": coverage, "gold": gold, "sql_states": sql_states, "cost": cost,
     "one": coverage_one}[args.what](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
