"""Check that two checkouts compile the same token automata (issue 24: "behaviour unchanged").

Compiles a fixed list of cases with the ``tractable`` package of a given checkout and writes a
digest per case; a second mode compares two such dumps.

Cases (all from this repository's data, so both checkouts get the same list):

* ``tests/data/json_schema_bench_subset.jsonl``: every record's schema;
* ``tests/data/jsonschemabench_patterns.json.gz``: the first 200 patterns (``compile_regex``);
* ``tests/data/json_schema_test_suite/*.json``: the first 150 schemas (files sorted, groups in
  file order);
* ``tests/data/grammars/*.{lark,gbnf,ebnf}`` and every ``.lark``/``.gbnf``/``.ebnf`` file under
  ``../shared/data/{gbnf_grammars,spider,smiles,cars_grammar_tasks}`` (``compile_grammar``
  with its defaults: approximation ``"under"``, ``max_depth=2``; ``syntax`` from the suffix,
  as ``bench/grammar_bench.py``).

Only the API present before and after the refactor is used: ``TokenVocabulary.from_tokenizer_file``
(``tractable.fsa.vocabulary``), ``compile_regex`` (``tractable.fsa.regex``),
``compile_json_schema`` (``tractable.fsa.json_schema``), ``compile_grammar``
(``tractable.fsa.grammar``) and the automaton's tensors ``edge_src, edge_dst, edge_label, labels,
initial, final`` (a ``UniqueItemsAutomaton`` is digested through ``.automaton`` and ``.marked``).

Usage::

    python scripts/check_automata_unchanged.py dump --checkout /tmp/before --out /tmp/before.json
    python scripts/check_automata_unchanged.py dump --checkout . --out /tmp/after.json
    python scripts/check_automata_unchanged.py compare /tmp/before.json /tmp/after.json

``dump`` runs the compiles in a subprocess whose ``PYTHONPATH`` starts with a temporary folder
holding a copy of the checkout's ``tractable/`` and symlinks ``tractable/fsa -> CHECKOUT/fsa``
(likewise ``kernels``, ``hmm``, ``decode``), the layout of ``[tool.setuptools.package-dir]``; the
subprocess checks ``tractable.fsa.__file__`` so that an editable install cannot win.  Each case
runs under ``--limit-seconds`` (SIGALRM); a case that hangs in C code or crashes the process is
recorded as ``killed``/``crashed`` and the dump goes on in a fresh subprocess.  Refusals
(exception class and the first 100 characters of the message) and timeouts are outcomes too.
``--match REGEX`` restricts the dump to the matching case ids; ``--resume`` continues an
interrupted dump from ``OUT.work/log.jsonl``.  Each compiled automaton's tensors are saved
(``OUT.automata/<case>.npz``) so that ``compare`` can check languages without importing either
checkout.

A digest holds the numbers of states, edges and label sets, the initial and final states, the
EOS ids, the vocabulary fingerprint, ``tensor_sha`` (SHA-256 over the six tensors) and
``edge_set_sha`` (SHA-256 over the sorted (src, dst, label-set content) triples: equal when only
the order of edges or label rows differs).

``compare`` prints the counts: identical, different (structure reordered / same language by
sampling / different language, each with old vs new states and edges), refused before and
compiled now, compiled before and refused now, same refusal, other changes of refusal.  For a
case whose tensors differ, ``--walks`` random accepted token sequences of each automaton are
checked against the other (a counterexample proves the languages differ; none is evidence, not
proof, of equality).  Exit status 1 if a case that compiled before differs or is refused now.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SHARED_DATA = ROOT.parent / "shared" / "data"
SHARED_GRAMMARS = SHARED_DATA / "gbnf_grammars"
#: the other grammar files of the shared data (SQL, SMILES, the CARS grammar tasks)
SHARED_GRAMMAR_DIRS = ("spider", "smiles", "cars_grammar_tasks")
TOKENIZERS = ROOT / "fixtures" / "tokenizers"
SUBPACKAGES = ("fsa", "kernels", "hmm", "decode")
N_PATTERNS = 200
N_SUITE = 150
TENSORS = ("edge_src", "edge_dst", "edge_label", "labels", "initial", "final")
DTYPES = {"edge_src": np.int64, "edge_dst": np.int64, "edge_label": np.int64,
          "labels": np.int32, "initial": np.bool_, "final": np.bool_}


# ---------------------------------------------------------------------------- cases


def build_cases() -> list[dict]:
    """The fixed case list: ``{"id", "kind": regex|schema|grammar, ...}``."""
    cases: list[dict] = []
    with open(DATA / "json_schema_bench_subset.jsonl") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                cid = f"bench/{rec['id']}"
                cases.append({"id": cid, "kind": "schema", "schema": rec["schema"]})
    with gzip.open(DATA / "jsonschemabench_patterns.json.gz", "rt") as f:
        patterns = json.load(f)["patterns"]
    for i, rec in enumerate(patterns[:N_PATTERNS]):
        cases.append({"id": f"pattern/{i:03d}", "kind": "regex", "pattern": rec["pattern"]})
    n = 0
    for path in sorted((DATA / "json_schema_test_suite").glob("*.json")):
        for j, group in enumerate(json.loads(path.read_text())):
            if n < N_SUITE:
                cases.append({"id": f"suite/{path.stem}/{j}", "kind": "schema",
                              "schema": group["schema"]})
                n += 1
    grammar_files = sorted(p for p in (DATA / "grammars").iterdir()
                           if p.suffix in (".lark", ".gbnf", ".ebnf"))
    grammar_files += sorted(p for p in SHARED_GRAMMARS.rglob("*")
                            if p.is_file() and p.suffix in (".lark", ".gbnf", ".ebnf"))
    for sub in SHARED_GRAMMAR_DIRS:
        grammar_files += sorted(p for p in (SHARED_DATA / sub).rglob("*")
                                if p.is_file() and p.suffix in (".lark", ".gbnf", ".ebnf"))
    for p in grammar_files:
        if p.is_relative_to(DATA):
            rel = f"tests/{p.relative_to(DATA / 'grammars')}"
        elif p.is_relative_to(SHARED_GRAMMARS):
            rel = f"shared/{p.relative_to(SHARED_GRAMMARS)}"
        else:
            rel = f"data/{p.relative_to(SHARED_DATA)}"
        cases.append({"id": f"grammar/{rel}", "kind": "grammar", "text": p.read_text(),
                      "syntax": p.suffix[1:]})
    return cases


# ---------------------------------------------------------------------------- automata (numpy)


def arrays_of(A) -> dict[str, np.ndarray]:
    """The six tensors of a TokenAutomaton as numpy arrays of fixed dtypes, plus ``vocab_size``."""
    out = {k: np.ascontiguousarray(getattr(A, k).cpu().numpy().astype(DTYPES[k], copy=False))
           for k in TENSORS}
    out["vocab_size"] = np.int64(A.vocab_size)
    out["eos"] = np.asarray([int(e) for e in A.eos_token_ids], dtype=np.int64)
    return out


class Sim:
    """Token NFA over the six arrays: acceptance and random accepted walks (numpy only)."""

    def __init__(self, a: dict[str, np.ndarray], eos: tuple[int, ...] = ()):
        self.S = int(a["initial"].shape[0])
        self.V = int(a["vocab_size"])
        self.src, self.dst = a["edge_src"], a["edge_dst"]
        self.lab, self.labels = a["edge_label"], a["labels"].view(np.uint32)
        self.initial, self.final = a["initial"].astype(bool), a["final"].astype(bool)
        self.eos_ids = np.asarray(a["eos"] if "eos" in a else eos, dtype=np.int64)
        self.eos = bool(self.eos_ids.size)
        order = np.argsort(self.src, kind="stable")
        ptr = np.zeros(self.S + 1, dtype=np.int64)
        np.add.at(ptr, self.src + 1, 1)
        self.ptr, self.out = np.cumsum(ptr), order
        self._dist = None

    def accepts(self, ids) -> bool:
        cur = self.initial.copy()
        for t in ids:
            t = int(t)
            if not 0 <= t < self.V:
                return False
            act = np.flatnonzero(cur)
            if act.size == 0:
                return False
            edges = np.concatenate([self.out[self.ptr[s]:self.ptr[s + 1]] for s in act])
            word = self.labels[self.lab[edges], t >> 5]
            hit = ((word >> np.uint32(t & 31)) & np.uint32(1)).astype(bool)
            cur = np.zeros(self.S, dtype=bool)
            cur[self.dst[edges[hit]]] = True
        return bool((cur & self.final).any())

    def dist(self) -> np.ndarray:
        """Edges from each state to a final state (BFS backwards); large if none."""
        if self._dist is None:
            big = np.iinfo(np.int64).max // 2
            d = np.full(self.S, big, dtype=np.int64)
            frontier = np.flatnonzero(self.final)
            d[frontier] = 0
            order = np.argsort(self.dst, kind="stable")
            ptr = np.zeros(self.S + 1, dtype=np.int64)
            np.add.at(ptr, self.dst + 1, 1)
            ptr = np.cumsum(ptr)
            k = 0
            while frontier.size:
                k += 1
                inc = np.concatenate([order[ptr[s]:ptr[s + 1]] for s in frontier])
                srcs = np.unique(self.src[inc])
                srcs = srcs[d[srcs] > k]
                d[srcs] = k
                frontier = srcs
            self._dist = d
        return self._dist

    def tokens(self, row: int) -> np.ndarray:
        bits = np.unpackbits(self.labels[row].view(np.uint8), bitorder="little")[:self.V]
        return np.flatnonzero(bits)

    def walk(self, rng: random.Random, max_len: int = 40, p_stop: float = 0.2) -> list[int] | None:
        """One random accepted token sequence (no EOS), or None if stuck."""
        d = self.dist()
        starts = [int(s) for s in np.flatnonzero(self.initial) if d[s] < len(d) + 1]
        if not starts:
            return None
        s, ids = rng.choice(starts), []
        for _ in range(4 * max_len + 4 * len(d)):
            if self.final[s] and (len(ids) >= max_len or rng.random() < p_stop):
                return ids
            edges = self.out[self.ptr[s]:self.ptr[s + 1]]
            edges = edges[d[self.dst[edges]] < len(d) + 1]
            if len(ids) >= max_len:
                edges = edges[d[self.dst[edges]] < d[s]]
            choices = list(edges)
            rng.shuffle(choices)
            for e in choices:
                toks = self.tokens(int(self.lab[e]))
                if self.eos:
                    toks = toks[~np.isin(toks, self.eos_ids)]
                if len(toks):
                    ids.append(int(toks[rng.randrange(len(toks))]))
                    s = int(self.dst[e])
                    break
            else:
                return ids if self.final[s] else None
        return None


def digest_arrays(a: dict[str, np.ndarray]) -> dict:
    h = hashlib.sha256()
    for k in TENSORS:
        h.update(k.encode())
        h.update(repr(a[k].shape).encode())
        h.update(a[k].tobytes())
    labels = a["labels"]
    row_hash = [hashlib.sha256(r.tobytes()).hexdigest() for r in labels]
    uniq = sorted(set(row_hash))
    rank = {x: i for i, x in enumerate(uniq)}
    lab_rank = np.array([rank[x] for x in row_hash], dtype=np.int64)
    triples = np.stack([a["edge_src"], a["edge_dst"], lab_rank[a["edge_label"]]], axis=1) \
        if len(a["edge_src"]) else np.zeros((0, 3), dtype=np.int64)
    triples = np.unique(triples, axis=0) if len(triples) else triples
    h2 = hashlib.sha256()
    h2.update("".join(uniq).encode())
    h2.update(np.ascontiguousarray(triples, dtype=np.int64).tobytes())
    h2.update(a["initial"].tobytes() + a["final"].tobytes())
    initial = np.flatnonzero(a["initial"]).tolist()
    final = np.flatnonzero(a["final"]).tolist()
    return {
        "states": int(a["initial"].shape[0]), "edges": int(a["edge_src"].shape[0]),
        "labels": int(labels.shape[0]), "vocab_size": int(a["vocab_size"]),
        "initial": initial[:20], "num_initial": len(initial),
        "final_sha": hashlib.sha256(np.asarray(final, np.int64).tobytes()).hexdigest()[:16],
        "num_final": len(final),
        "tensor_sha": h.hexdigest(), "edge_set_sha": h2.hexdigest(),
    }


# ---------------------------------------------------------------------------- child (one checkout)


class _CaseTimeout(BaseException):
    """Raised by SIGALRM (a BaseException: ``except Exception`` in the library cannot eat it)."""


def _on_alarm(signum, frame):
    raise _CaseTimeout


def _child(args) -> None:
    checkout = os.path.realpath(args.checkout)
    import tractable.fsa
    from tractable.fsa.grammar import compile_grammar
    from tractable.fsa.json_schema import compile_json_schema
    from tractable.fsa.regex import compile_regex
    from tractable.fsa.vocabulary import TokenVocabulary

    fsa_file = os.path.realpath(tractable.fsa.__file__)
    if not fsa_file.startswith(checkout + os.sep):
        raise SystemExit(f"imported {fsa_file}, not from {checkout}")
    for mod in (compile_grammar, compile_json_schema, compile_regex, TokenVocabulary):
        f = os.path.realpath(sys.modules[mod.__module__].__file__)
        if not f.startswith(checkout + os.sep):
            raise SystemExit(f"{mod.__name__} from {f}, not from {checkout}")
    warnings.simplefilter("ignore")
    cases = json.loads(Path(args.cases).read_text())
    done = set()
    if os.path.exists(args.out):
        for line in Path(args.out).read_text().splitlines():
            rec = json.loads(line)
            if "outcome" in rec:
                done.add(rec["id"])
    vocab = TokenVocabulary.from_tokenizer_file(args.tokenizer)
    eos = tuple(int(e) for e in vocab.eos_token_ids)
    adir = Path(args.automata_dir)
    adir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGALRM, _on_alarm)
    log = open(args.out, "a")
    if not done:
        log.write(json.dumps({"header": {"fsa_file": fsa_file, "python": sys.version.split()[0],
                                         "vocab_fingerprint": vocab.fingerprint,
                                         "vocab_size": len(vocab.token_bytes),
                                         "eos": list(eos)}}) + "\n")
    for case in cases:
        if case["id"] in done:
            continue
        log.write(json.dumps({"id": case["id"], "start": time.time()}) + "\n")
        log.flush()
        rec: dict = {"id": case["id"]}
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, args.limit_seconds)
        try:
            if case["kind"] == "regex":
                A = compile_regex(case["pattern"], vocab)
            elif case["kind"] == "schema":
                A = compile_json_schema(case["schema"], vocab)
            else:
                A = compile_grammar(case["text"], vocab, syntax=case["syntax"])
            signal.setitimer(signal.ITIMER_REAL, 0)
            rec["outcome"] = "compiled"
        except _CaseTimeout:
            rec["outcome"] = "timeout"
        except (Exception, RecursionError) as e:  # noqa: BLE001 - refusals are outcomes
            signal.setitimer(signal.ITIMER_REAL, 0)
            rec["outcome"] = "refused"
            rec["error"] = f"{type(e).__name__}: {str(e)[:100]}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        if rec["outcome"] == "compiled":
            rec.update(_describe(A, case["id"], adir, eos))
        log.write(json.dumps(rec) + "\n")
        log.flush()
        A = None


def _case_file(adir: Path, case_id: str) -> Path:
    return adir / (re.sub(r"[^A-Za-z0-9._-]+", "_", case_id) + ".npz")


def _digest_marked(m) -> dict:
    """A ByteNFA (the marked NFA of a UniqueItemsAutomaton), or a TokenAutomaton."""
    if hasattr(m, "edge_src"):
        return digest_arrays(arrays_of(m))
    h = hashlib.sha256(repr((m.num_states, m.start, sorted(m.finals), sorted(m.edges),
                             sorted(m.epsilons))).encode())
    return {"states": m.num_states, "edges": len(m.edges), "tensor_sha": h.hexdigest()}


def _describe(A, case_id: str, adir: Path, eos: tuple[int, ...]) -> dict:
    out: dict = {"class": type(A).__name__}
    plain = A
    if not hasattr(A, "edge_src") and hasattr(A, "automaton") and hasattr(A, "marked"):
        plain = A.automaton
        out["marked"] = _digest_marked(A.marked)
    a = arrays_of(plain)
    out["digest"] = digest_arrays(a)
    out["digest"]["fingerprint"] = plain.fingerprint
    out["digest"]["eos_token_ids"] = [int(e) for e in plain.eos_token_ids]
    meta = getattr(plain, "meta", {}) or {}
    out["meta"] = {k: v for k, v in meta.items()
                   if k in ("byte_states", "byte_edges", "token_states", "token_edges")}
    np.savez_compressed(_case_file(adir, case_id), **a)
    # the numpy simulator used by ``compare`` must agree with the automaton's own accepts()
    sim, rng, bad = Sim(a, eos), random.Random(0), 0
    for _ in range(3):
        w = sim.walk(rng)
        if w is not None and not plain.accepts(w):
            bad += 1
    out["sim_disagreements"] = bad
    return out


# ---------------------------------------------------------------------------- dump (parent)


def _import_dir(checkout: Path) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="tractable_import_"))
    shutil.copytree(checkout / "tractable", tmp / "tractable",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for sub in SUBPACKAGES:
        dest = tmp / "tractable" / sub
        if dest.exists():
            raise SystemExit(f"{checkout}/tractable/{sub} exists: cannot map {sub}/ onto it")
        dest.symlink_to(checkout / sub, target_is_directory=True)
    return tmp


def dump(args) -> int:
    checkout = Path(args.checkout).resolve()
    out = Path(args.out)
    cases = [c for c in build_cases() if re.search(args.match, c["id"])]
    tok = Path(args.tokenizer)
    if not tok.exists():
        tok = TOKENIZERS / args.tokenizer / "tokenizer.json"
    work = Path(str(out) + ".work")
    work.mkdir(parents=True, exist_ok=True)
    (work / "cases.json").write_text(json.dumps(cases))
    log = work / "log.jsonl"
    if log.exists() and not args.resume:
        log.unlink()
    adir = Path(str(out) + ".automata")
    imp = _import_dir(checkout)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(imp)] + (
        [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, str(Path(__file__).resolve()), "_child", "--checkout", str(checkout),
           "--cases", str(work / "cases.json"), "--out", str(log), "--tokenizer", str(tok),
           "--limit-seconds", str(args.limit_seconds), "--automata-dir", str(adir)]
    hard = 3 * args.limit_seconds + 120  # a case stuck in C code past SIGALRM
    try:
        while True:
            proc = subprocess.Popen(cmd, env=env, cwd=str(imp))
            last, size = time.time(), -1
            while proc.poll() is None:
                time.sleep(1.0)
                cur = log.stat().st_size if log.exists() else 0
                if cur != size:
                    size, last = cur, time.time()
                elif time.time() - last > hard:
                    proc.kill()
                    proc.wait()
                    break
            killed = proc.returncode not in (0, None) and time.time() - last > hard
            recs = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
            finished = {r["id"] for r in recs if "outcome" in r}
            started = [r["id"] for r in recs if "start" in r and r["id"] not in finished]
            if proc.returncode == 0 and not started:
                break
            if not started:
                raise SystemExit(f"dump child failed (exit {proc.returncode}) before a case")
            with open(log, "a") as f:
                f.write(json.dumps({"id": started[-1], "outcome": "killed" if killed else "crashed",
                                    "error": f"exit {proc.returncode}"}) + "\n")
    finally:
        shutil.rmtree(imp, ignore_errors=True)
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    header = next(r["header"] for r in recs if "header" in r)
    results = {r["id"]: r for r in recs if "outcome" in r}
    header.update({"checkout": str(checkout), "tokenizer": str(tok),
                   "limit_seconds": args.limit_seconds, "automata_dir": str(adir.resolve())})
    ordered = {c["id"]: results[c["id"]] for c in cases}
    out.write_text(json.dumps({"header": header, "cases": ordered}, indent=1))
    counts: dict[str, int] = {}
    for r in ordered.values():
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    print(f"{out}: {len(ordered)} cases {counts} (tractable.fsa from {header['fsa_file']})")
    return 0


# ---------------------------------------------------------------------------- compare


def _load(path: str) -> dict:
    return json.loads(Path(path).read_text())


def _language(old: dict, new: dict, cid: str, walks: int, decode) -> dict:
    """Cross-check random accepted walks of each automaton against the other."""
    pa = _case_file(Path(old["header"]["automata_dir"]), cid)
    pb = _case_file(Path(new["header"]["automata_dir"]), cid)
    a, b = Sim(dict(np.load(pa))), Sim(dict(np.load(pb)))
    res = {"old_not_new": 0, "new_not_old": 0, "walks": 0, "example": None}
    for name, x, y in (("old_not_new", a, b), ("new_not_old", b, a)):
        rng = random.Random(zlib.crc32(cid.encode()))
        for i in range(walks):
            w = x.walk(rng, max_len=(8, 24, 64)[i % 3])
            if w is None:
                continue
            res["walks"] += 1
            if not y.accepts(w):
                res[name] += 1
                if res["example"] is None:
                    res["example"] = f"{name}: {decode(w)}"
    return res


def compare(args) -> int:
    old, new = _load(args.old), _load(args.new)
    try:
        from tractable.fsa.vocabulary import TokenVocabulary

        vocab = TokenVocabulary.from_tokenizer_file(new["header"]["tokenizer"])

        def decode(ids):
            return repr(b"".join(vocab.token_bytes[i] or b"" for i in ids)[:80])
    except Exception:  # noqa: BLE001 - decoding is a convenience only
        def decode(ids):
            return str(ids[:20])
    buckets: dict[str, list[str]] = {k: [] for k in (
        "identical", "reordered", "same_language", "different_language", "newly_compiling",
        "newly_refused", "same_refusal", "refusal_changed", "missing")}
    notes: dict[str, str] = {}
    for cid, o in old["cases"].items():
        n = new["cases"].get(cid)
        if n is None:
            buckets["missing"].append(cid)
            continue
        oc, nc = o["outcome"] == "compiled", n["outcome"] == "compiled"
        if oc and nc:
            do, dn = o["digest"], n["digest"]
            same = (do["tensor_sha"] == dn["tensor_sha"] and do["fingerprint"] == dn["fingerprint"]
                    and do["eos_token_ids"] == dn["eos_token_ids"]
                    and o.get("marked", {}).get("tensor_sha")
                    == n.get("marked", {}).get("tensor_sha"))
            size = (f"states {do['states']} -> {dn['states']}, edges {do['edges']} -> "
                    f"{dn['edges']}, labels {do['labels']} -> {dn['labels']}")
            if same:
                buckets["identical"].append(cid)
            elif do["edge_set_sha"] == dn["edge_set_sha"]:
                buckets["reordered"].append(cid)
                notes[cid] = size
            else:
                lang = _language(old, new, cid, args.walks, decode)
                key = ("different_language" if lang["old_not_new"] or lang["new_not_old"]
                       else "same_language")
                buckets[key].append(cid)
                notes[cid] = (f"{size}; walks {lang['walks']}: old-not-new "
                              f"{lang['old_not_new']}, new-not-old {lang['new_not_old']}"
                              + (f"; e.g. {lang['example']}" if lang["example"] else ""))
        elif nc:
            buckets["newly_compiling"].append(cid)
            notes[cid] = (f"before {o['outcome']}: {o.get('error', '')}; now states "
                          f"{n['digest']['states']}, edges {n['digest']['edges']}")
        elif oc:
            buckets["newly_refused"].append(cid)
            notes[cid] = f"now {n['outcome']}: {n.get('error', '')}"
        elif (o["outcome"], o.get("error")) == (n["outcome"], n.get("error")):
            buckets["same_refusal"].append(cid)
            notes[cid] = f"{o['outcome']}: {o.get('error', '')}"
        else:
            buckets["refusal_changed"].append(cid)
            notes[cid] = (f"{o['outcome']}: {o.get('error', '')} -> {n['outcome']}: "
                          f"{n.get('error', '')}")
    sim_bad = [c for d in (old, new) for c, r in d["cases"].items() if r.get("sim_disagreements")]
    print(f"old: {args.old} ({old['header']['checkout']})")
    print(f"new: {args.new} ({new['header']['checkout']})")
    print(f"cases: {len(old['cases'])}; random walks per direction for differing cases: "
          f"{args.walks}")
    print("counts: " + ", ".join(f"{k} {len(v)}" for k, v in buckets.items()))
    both_timeout = [c for c in buckets["same_refusal"] if old["cases"][c]["outcome"] == "timeout"]
    print(f"(same_refusal includes {len(both_timeout)} timeouts in both, over "
          f"{old['header']['limit_seconds']} s / {new['header']['limit_seconds']} s)")
    if sim_bad:
        print(f"WARNING: numpy simulator disagrees with accepts() on {sim_bad}")
    for k, v in buckets.items():
        if k == "identical" or not v:
            continue
        print(f"\n== {k} ({len(v)})")
        for cid in v:
            print(f"  {cid}: {notes.get(cid, '')}")
    bad = (buckets["reordered"] + buckets["same_language"] + buckets["different_language"]
           + buckets["newly_refused"] + buckets["missing"])
    return 1 if bad else 0


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="compile every case with a checkout, write digests")
    d.add_argument("--checkout", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--tokenizer", default="llama3", help="fixture name or tokenizer.json path")
    d.add_argument("--limit-seconds", type=float, default=60.0)
    d.add_argument("--match", default="", help="only the cases whose id matches this regex")
    d.add_argument("--resume", action="store_true", help="keep OUT.work/log.jsonl, skip done")
    c = sub.add_parser("compare", help="compare two dumps")
    c.add_argument("old")
    c.add_argument("new")
    c.add_argument("--walks", type=int, default=100)
    ch = sub.add_parser("_child")
    for name in ("--checkout", "--cases", "--out", "--tokenizer", "--automata-dir"):
        ch.add_argument(name, required=True)
    ch.add_argument("--limit-seconds", type=float, required=True)
    args = p.parse_args(argv)
    if args.cmd == "dump":
        return dump(args)
    if args.cmd == "compare":
        return compare(args)
    _child(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
