"""Kernel latencies: batched GCD mask + apply at vocabulary 128k vs xgrammar, and one P-GCD step
as a ratio to a transformer step.

    python bench/kernel_bench.py                       # CPU: torch path; CUDA: Triton path too
    python bench/kernel_bench.py --batches 1 16 --hidden 1024 --reps 5

Cases (one JSON-schema automaton over the Llama-3 vocabulary, V = 128,256):

* automaton: JSONSchemaBench ``Glaiveai2K/analyze_social_media_mentions_df9069d1`` (the schema
  is inlined below), ``tractable.compile_json_schema`` (compact whitespace), cached under
  ``~/.cache/tractable/bench``;
* states: B random walks of up to 24 tokens (uniform over the GCD-allowed text tokens, budget
  256) — realistic state sets, not just the initial one; budgets ``remaining`` uniform in
  [8, 200];
* ``mask``: :func:`tractable.kernels.token_mask` (GCD) → packed [B, 4008];
  ``apply``: :func:`tractable.kernels.apply_mask` in place on float32 logits [B, V];
  ``mask+apply`` both; ``mask+softmax``: mask, then the fused masked softmax;
* xgrammar (CPU, same schema, same batch, same run): ``compile_json_schema(schema,
  any_whitespace=False, separators=(",", ":"), strict_mode=False)`` — compact separators so that
  its language matches ours (its default ``", "`` / ``": "`` would reject our walks at the first
  ``":``); B ``GrammarMatcher``s advanced along the same token walks as our states (a walk whose
  token xgrammar rejects stops there; the number of such walks is reported).  ``xgr mask``:
  ``fill_next_token_bitmask`` for each of the B matchers; ``xgr apply``:
  ``apply_token_bitmask_inplace`` on float32 CPU logits [B, V]; ``xgr mask+apply`` both (the
  ratio's denominator); ``xgr batch mask+apply``: ``BatchGrammarMatcher(max_threads=<threads>)``
  instead of the loop.  The cases of one batch size are timed round-robin (one sample of each in
  turn), so load changes hit all of them alike;
* ``pgcd_step`` for H hidden states (random row-stochastic HMM): one
  :func:`hmm_forward_step` (emit the sampled token, transition, eq. 5) plus the next-token term
  :func:`emission_term` of ``α ∘ β`` (Algorithm 1's return) for B = 1;
* ``transformer_step``: one forward step (batch 1, KV cache of 64 tokens) of a randomly
  initialised Llama with the Llama-3.2-1B shape (hidden 2048, 16 layers, 32 heads, 8 KV heads,
  intermediate 8192, vocabulary 128,256, tied embeddings; 1.24 B parameters), float32 on CPU with
  the same thread count (bfloat16 on CUDA).  Random weights: the step's cost does not depend on
  the values.  Timed after each H's P-GCD samples, so the ratio compares neighbours in time.

CPU: the torch path (``backend="torch"``), ``time.perf_counter`` around each call.  CUDA: the
Triton path and the torch path, CUDA events, after warm-up; the result is compared with
xgrammar's published apply-only kernel (5.4 µs at batch 1, 45 µs at batch 64, H100, vocab 128k).
Results: ``bench/results/kernels_{cpu,gpu}.md`` and ``.json`` (every sample).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from harness import (
    RESULTS,
    load_json,
    load_vocabulary,
    loadavg,
    machine,
    median_p90_us,
    save_json,
    tokenizer_path,
    utc_now,
    versions,
)

CACHE = Path(os.environ.get("TRACTABLE_CACHE", Path.home() / ".cache" / "tractable" / "bench"))

# JSONSchemaBench, Glaiveai2K/analyze_social_media_mentions_df9069d1 (../shared/data)
SCHEMA = {
    "properties": {
        "date_range": {
            "properties": {
                "end_date": {"description": "The end date for the mentions", "type": "string"},
                "start_date": {"description": "The start date for the mentions",
                               "type": "string"},
            },
            "required": ["start_date", "end_date"],
            "type": "object",
        },
        "platforms": {"description": "The social media platforms to analyze",
                      "items": {"type": "string"}, "type": "array"},
        "topic": {"description": "The topic to analyze mentions for", "type": "string"},
    },
    "required": ["topic", "platforms", "date_range"],
    "type": "object",
}

XGRAMMAR_APPLY_US = {1: 5.4, 64: 45.0}  # published H100 apply-only, vocab 128k
PAPER_PGCD_SLOWDOWN = {1024: 3.1, 4096: 4.9, 16384: 10.2}  # paper 002, vs the LM step
# Llama-3.2-1B's shape (config.json of meta-llama/Llama-3.2-1B)
LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                max_position_embeddings=131072, tie_word_embeddings=True, rms_norm_eps=1e-5)
KV_TOKENS = 64


def load_automaton():
    from tractable.fsa.automaton import TokenAutomaton

    vocab = load_vocabulary("llama3")
    path = CACHE / f"glaive_social_{vocab.fingerprint[:16]}.safetensors"
    if path.exists():
        return TokenAutomaton.load(path, vocab), vocab
    import warnings

    from tractable.fsa.json_schema import compile_json_schema

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        A = compile_json_schema(SCHEMA, vocab)
    CACHE.mkdir(parents=True, exist_ok=True)
    A.save(path)
    return A, vocab


def walk_states(A, tables, B: int, steps: int, seed: int):
    """(bool [B, S], list of B token lists): the state sets after random GCD-valid walks of up
    to ``steps`` tokens, and the tokens of each walk."""
    from tractable.kernels import advance, token_mask, unpack_mask

    g = torch.Generator().manual_seed(seed)
    V = A.vocab_size
    active = torch.zeros(B, A.num_states, dtype=torch.bool)
    active[:, 0] = True
    stop = torch.randint(0, steps + 1, (B,), generator=g)
    text = torch.ones(V, dtype=torch.bool)
    text[list(A.eos_token_ids)] = False
    walks: list[list[int]] = [[] for _ in range(B)]
    for t in range(steps):
        allowed = unpack_mask(token_mask(active, 256 - t, tables, backend="torch"), V) & text
        w = allowed.float()
        w[w.sum(1) == 0, 0] = 1.0  # dead row (only EOS left): stays put below
        tok = torch.multinomial(w, 1, generator=g).flatten()
        nxt = advance(active, tok, A.edge_src, A.edge_dst, A.edge_label, A.labels, V,
                      backend="torch")
        keep = (t >= stop) | ~nxt.any(1)
        active = torch.where(keep[:, None], active, nxt)
        for b in (~keep).nonzero().flatten().tolist():
            walks[b].append(int(tok[b]))
    return active, walks


def unique_label_sets(active, remaining, tables) -> int:
    """How many distinct (marked label sets, EOS flag) rows the batch has (the torch path ORs
    one row per distinct set)."""
    act = active.bool() & (remaining >= 1)[:, None]
    ok = act[:, tables.edge_src] & (tables.distance[tables.edge_dst][None, :] < remaining[:, None])
    L = tables.labels.shape[0]
    allowed = torch.zeros(active.shape[0], L + 1, dtype=torch.bool)
    b, e = ok.nonzero(as_tuple=True)
    allowed[b, tables.edge_label[e]] = True
    allowed[:, L] = (act & tables.final.bool()[None, :]).any(1)
    return int(torch.unique(allowed, dim=0).shape[0])


def timeit(fn, reps: int, cuda: bool) -> list[float]:
    """Seconds per call (reps samples, after 2 warm-up calls)."""
    for _ in range(2):
        fn()
    return [_once(fn, cuda) for _ in range(reps)]


def _once(fn, cuda: bool) -> float:
    if cuda:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def round_robin(cases: dict, reps: int, cuda: dict) -> dict[str, list[float]]:
    """Seconds per call of each case, one sample of each in turn (after 2 warm-up rounds)."""
    for _ in range(2):
        for fn in cases.values():
            fn()
    out: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(reps):
        for k, fn in cases.items():
            out[k].append(_once(fn, cuda[k]))
    return out


def mem_available_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------- xgrammar


class XGrammarCPU:
    """xgrammar's CPU mask (a ``GrammarMatcher`` per request) + ``apply_token_bitmask_inplace``."""

    def __init__(self, V: int, eos_ids, threads: int):
        import xgrammar as xgr
        from transformers import PreTrainedTokenizerFast

        self.xgr = xgr
        tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_path("llama3")))
        info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=V, stop_token_ids=list(eos_ids))
        t0 = time.perf_counter()
        self.cg = xgr.GrammarCompiler(info, max_threads=threads).compile_json_schema(
            json.dumps(SCHEMA), any_whitespace=False, separators=(",", ":"), strict_mode=False)
        self.compile_s = time.perf_counter() - t0
        self.V = V
        self.threads = threads

    def matchers(self, walks):
        """B matchers advanced along ``walks``; (matchers, walks truncated, tokens accepted)."""
        ms, truncated, accepted = [], 0, 0
        for w in walks:
            m = self.xgr.GrammarMatcher(self.cg)
            for t in w:
                if not m.accept_token(t):
                    truncated += 1
                    break
                accepted += 1
            ms.append(m)
        return ms, truncated, accepted

    def cases(self, ms, logits: torch.Tensor) -> dict:
        xgr = self.xgr
        buf = xgr.allocate_token_bitmask(len(ms), self.V)
        batch = xgr.BatchGrammarMatcher(max_threads=self.threads)
        dev_buf = buf.to(logits.device)

        def fill():
            for i, m in enumerate(ms):
                m.fill_next_token_bitmask(buf, i)

        def apply():
            if logits.is_cuda:
                dev_buf.copy_(buf, non_blocking=True)
                xgr.apply_token_bitmask_inplace(logits, dev_buf)
            else:
                xgr.apply_token_bitmask_inplace(logits, buf)

        def batch_fill():
            batch.batch_fill_next_token_bitmask(ms, buf)

        fill()
        return {
            "xgr mask": fill,
            "xgr apply": apply,
            "xgr mask+apply": lambda: (fill(), apply()),
            "xgr batch mask+apply": lambda: (batch_fill(), apply()),
        }


# ---------------------------------------------------------------------------- masks


def _mask_cases(active, remaining, logits, packed, t_dev, backend) -> dict:
    from tractable.kernels import apply_mask, token_mask

    def mask():
        return token_mask(active, remaining, t_dev, backend=backend)

    return {
        "mask": mask,
        "apply": lambda: apply_mask(logits, packed, backend=backend),
        "mask+apply": lambda: apply_mask(logits, mask(), backend=backend),
        "mask+softmax": lambda: apply_mask(logits, mask(), normalize="softmax",
                                           backend=backend),
    }


def bench_masks(A, tables, batches, reps, device, backends, xg: XGrammarCPU | None):
    from tractable.kernels import token_mask

    rows, walks_info = [], []
    cuda = device.type == "cuda"
    V = A.vocab_size
    t_dev = tables.to(device)
    for B in batches:
        active_cpu, walks = walk_states(A, tables, B, 24, seed=B)
        active = active_cpu.to(device)
        g = torch.Generator().manual_seed(B)
        remaining_cpu = torch.randint(8, 201, (B,), generator=g)
        remaining = remaining_cpu.to(device)
        logits0 = torch.randn(B, V, generator=g)
        cases, on_cuda = {}, {}
        for be in backends:
            logits = logits0.clone().to(device)
            packed = token_mask(active, remaining, t_dev, backend=be)
            for k, fn in _mask_cases(active, remaining, logits, packed, t_dev, be).items():
                cases[(k, be)] = fn
                on_cuda[(k, be)] = cuda
        info = {"batch": B, "mean_active_states": float(active_cpu.float().sum(1).mean()),
                "unique_label_sets": unique_label_sets(active_cpu, remaining_cpu, tables),
                "mean_walk_tokens": sum(map(len, walks)) / B}
        if xg is not None:
            ms, truncated, accepted = xg.matchers(walks)
            info |= {"xgr_truncated_walks": truncated,
                     "xgr_mean_tokens_accepted": accepted / B}
            for k, fn in xg.cases(ms, logits0.clone().to(device)).items():
                cases[(k, "xgrammar")] = fn
                on_cuda[(k, "xgrammar")] = False  # wall clock: its mask is CPU work
                if cuda:
                    cases[(k, "xgrammar")] = lambda fn=fn: (fn(), torch.cuda.synchronize())
        walks_info.append(info)
        print(f"B={B}: {info}", flush=True)
        n = max(3, reps if B <= 64 else reps // 4)
        load0 = loadavg()
        samples = round_robin(cases, n, on_cuda)
        load1 = loadavg()
        for (name, be), xs in samples.items():
            row = {"case": name, "batch": B, "backend": be, **median_p90_us(xs), "samples_s": xs,
                   "loadavg_before": load0, "loadavg_after": load1}
            rows.append(row)
            print(f"  {name:21s} B={B:5d} {be:8s} median {row['median_us']:11.1f} µs"
                  f"  p90 {row['p90_us']:11.1f} µs", flush=True)
    return rows, walks_info


# ---------------------------------------------------------------------------- transformer step


class TransformerStep:
    """One decoding step of a random Llama-3.2-1B-shaped model (batch 1, KV cache of 64)."""

    def __init__(self, device, seed: int = 0):
        self.device, self.seed = device, seed
        self.load()

    def unload(self):
        """Free the model (~5 GB in float32) and its cache."""
        self.model = self.cache = None
        gc.collect()

    def load(self):
        from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

        device, seed = self.device, self.seed
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        cfg = LlamaConfig(**LLAMA_1B)
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        self.model = LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()
        self.params = sum(p.numel() for p in self.model.parameters())
        self.dtype = str(dtype).replace("torch.", "")
        self.init_s = time.perf_counter() - t0
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(0, cfg.vocab_size, (1, KV_TOKENS), generator=g).to(device)
        self.cache = DynamicCache(config=cfg)
        with torch.no_grad():
            self.model(input_ids=prompt, past_key_values=self.cache, use_cache=True)
        self.tok = torch.randint(0, cfg.vocab_size, (1, 1), generator=g).to(device)
        self.pos = torch.tensor([[KV_TOKENS]], device=device)
        self.cuda = device.type == "cuda"

    def step(self):
        with torch.no_grad():
            out = self.model(input_ids=self.tok, past_key_values=self.cache,
                             position_ids=self.pos, use_cache=True, logits_to_keep=1)
        return out.logits

    def sample(self, reps: int) -> list[float]:
        xs = []
        for _ in range(reps):
            xs.append(_once(self.step, self.cuda))
            extra = self.cache.get_seq_length() - KV_TOKENS
            if extra > 0:
                self.cache.crop(-extra)  # back to 64 cached tokens
        return xs


# ---------------------------------------------------------------------------- P-GCD


def bench_pgcd(A, hidden, reps, device, backend, lm: TransformerStep | None, lm_reps: int):
    from tractable.kernels import (
        edge_csr,
        emission_marginal,
        emission_term,
        hmm_backward_messages,
        hmm_forward_step,
        unpack_mask,
    )

    rows = []
    cuda = device.type == "cuda"
    V, S, E = A.vocab_size, A.num_states, A.num_edges
    src, dst, lab, labels = (t.to(device) for t in (A.edge_src, A.edge_dst, A.edge_label,
                                                    A.labels))
    final = A.final.to(device)
    csr = edge_csr(src, dst, S)
    for H in hidden:
        # B_h [H, V] + A_h [H, H] + a few [H, E] messages, float32
        need = 4 * (H * V + H * H + 6 * H * E) / 2**30
        avail = mem_available_gib() if not cuda else None
        unloaded = False
        if avail is not None and need + 2.0 > avail and lm is not None:
            # not enough memory beside the LM: time the LM now, free it, reload it after H
            xs = lm.sample(lm_reps)
            rows.append({"case": "transformer_step", "before_H": H, "backend": lm.dtype,
                         **median_p90_us(xs), "samples_s": xs, "loadavg_after": loadavg()})
            lm.unload()
            unloaded = True
            avail = mem_available_gib()
        if avail is not None and need + 2.0 > avail:
            print(f"  pgcd_step H={H}: skipped, needs ~{need:.1f} GiB, {avail:.1f} available",
                  flush=True)
            rows.append({"case": "pgcd_step", "H": H, "backend": backend, "skipped":
                         f"needs ~{need:.1f} GiB, {avail:.1f} GiB available"})
            if unloaded:
                lm.load()
            continue
        g = torch.Generator().manual_seed(H)
        A_h = torch.rand(H, H, generator=g).to(device)
        A_h /= A_h.sum(1, keepdim=True)
        B_h = torch.rand(H, V, generator=g).to(device)
        B_h /= B_h.sum(1, keepdim=True)
        t0 = time.perf_counter()
        inp = emission_marginal(B_h, labels, lab, backend=backend)
        beta, _ = hmm_backward_messages(2, A_h, inp, src, dst, final, S, csr=csr,
                                        backend=backend)
        if cuda:
            torch.cuda.synchronize()
        setup = time.perf_counter() - t0
        alpha = (torch.ones(1, H, E, device=device) / (H * E))
        # a token of the first edge's label set, so the step is non-trivial
        first = unpack_mask(A.labels[A.edge_label[0]][None].cpu(), V)[0].nonzero()
        tok = torch.tensor([int(first[0]) if first.numel() else 0], device=device)

        def step(alpha=alpha, tok=tok, A_h=A_h, B_h=B_h, beta=beta):
            a, _ = hmm_forward_step(alpha, tok, A_h, B_h, src, dst, lab, labels, S, csr=csr,
                                    backend=backend)
            return emission_term(a * beta[0], B_h, lab, labels, backend=backend)

        if cuda:
            n = reps
        else:
            n = 3 if H <= 1024 else (2 if H <= 4096 else 1)
            n = max(1, min(reps, n))
        load0 = loadavg()
        if cuda or H <= 4096:
            step()  # warm-up (skipped on CPU above H = 4096: one step is ~1 min there)
        samples = [_once(step, cuda) for _ in range(n)]
        row = {"case": "pgcd_step", "H": H, "E": E, "S": S, "L": A.num_labels,
               "backend": backend, "setup_s": setup, **median_p90_us(samples), "samples_s": samples,
               "loadavg_before": load0, "loadavg_after": loadavg()}
        rows.append(row)
        print(f"  pgcd_step H={H:6d} {backend:6s} median {row['median_us'] / 1e3:10.1f} ms"
              f"  (setup {setup:.1f} s)", flush=True)
        del step, A_h, B_h, inp, beta, alpha
        gc.collect()
        if unloaded:
            lm.load()
        if lm is not None:
            xs = lm.sample(lm_reps)
            rows.append({"case": "transformer_step", "after_H": H, "backend": lm.dtype,
                         **median_p90_us(xs), "samples_s": xs, "loadavg_after": loadavg()})
            print(f"  transformer_step (after H={H}) median {statistics.median(xs) * 1e3:.1f} ms",
                  flush=True)
    return rows


def pgcd_ratios(rows) -> list[dict]:
    """pgcd_step / transformer_step per H (medians and p90s; the LM samples of the whole run,
    and those taken right after that H)."""
    lm_all = [x for r in rows if r["case"] == "transformer_step" for x in r["samples_s"]]
    out = []
    if not lm_all:
        return out
    lm = median_p90_us(lm_all)
    for r in rows:
        if r["case"] != "pgcd_step" or "median_us" not in r:
            continue
        near = [x for q in rows if q["case"] == "transformer_step"
                and r["H"] in (q.get("after_H"), q.get("before_H")) for x in q["samples_s"]]
        nb = median_p90_us(near) if near else lm
        out.append({
            "H": r["H"], "backend": r["backend"],
            "pgcd_median_ms": r["median_us"] / 1e3, "pgcd_p90_ms": r["p90_us"] / 1e3,
            "lm_median_ms": lm["median_us"] / 1e3, "lm_p90_ms": lm["p90_us"] / 1e3,
            "ratio_median": r["median_us"] / lm["median_us"],
            "ratio_p90": r["p90_us"] / lm["p90_us"],
            "ratio_median_adjacent": r["median_us"] / nb["median_us"],
            "paper_slowdown": PAPER_PGCD_SLOWDOWN.get(r["H"]),
        })
    return out


def xgr_ratios(rows, backends) -> list[dict]:
    """tractable mask+apply / xgrammar mask+apply per batch size (medians and p90s)."""
    by = {(r["case"], r["backend"], r["batch"]): r for r in rows if "batch" in r}
    out = []
    for (case, be, B), r in sorted(by.items(), key=lambda kv: kv[0][2]):
        if case != "mask+apply" or be not in backends:
            continue
        x = by.get(("xgr mask+apply", "xgrammar", B))
        xb = by.get(("xgr batch mask+apply", "xgrammar", B))
        xm = by.get(("xgr mask", "xgrammar", B))
        tm = by.get(("mask", be, B))
        if x is None:
            continue
        out.append({
            "batch": B, "backend": be,
            "ours_median_us": r["median_us"], "ours_p90_us": r["p90_us"],
            "xgr_median_us": x["median_us"], "xgr_p90_us": x["p90_us"],
            "ratio_median": r["median_us"] / x["median_us"],
            "ratio_p90": r["p90_us"] / x["p90_us"],
            "ratio_median_vs_batch_matcher": r["median_us"] / xb["median_us"] if xb else None,
            "mask_only_ratio_median": tm["median_us"] / xm["median_us"] if tm and xm else None,
        })
    return out


# ---------------------------------------------------------------------------- report


def _fmt(us: float) -> str:
    return f"{us / 1e3:.2f} ms" if us >= 1e4 else f"{us:.1f} µs"


def _row_key(r: dict):
    if r["case"] == "transformer_step":
        return (r["case"], r.get("after_H"), r.get("before_H"))
    return (r["case"], r.get("batch"), r.get("H"), r["backend"])


def merge_previous(rows: list[dict], meta: dict, path: Path) -> list[dict]:
    """``--merge``: the rows of the previous results file that this run did not re-measure, then
    this run's rows (each tagged with its run's date).  A transformer row of the previous run is
    dropped when this run measured P-GCD at its H."""
    old = load_json(path)
    redone = {_row_key(r) for r in rows}
    hs = {r["H"] for r in rows if r["case"] == "pgcd_step"}
    kept = [r for r in old["rows"] if _row_key(r) not in redone and not (
        r["case"] == "transformer_step" and {r.get("after_H"), r.get("before_H")} & hs)]
    m = old["meta"]
    meta["merged_with"] = [{k: m.get(k) for k in ("command", "date", "loadavg_start",
                                                  "loadavg_end")}] + m.get("merged_with", [])
    for k in ("walks", "xgrammar_compile_s", "transformer"):
        if k not in meta and k in m:
            meta[k] = m[k]
    for r in kept:
        r.setdefault("run", m.get("date"))
    return kept + rows


def write(rows, A, args, kind: str, extra: dict):
    meta = {"command": "python bench/kernel_bench.py " + shlex.join(sys.argv[1:]),
            "date": utc_now(), "machine": machine(threads=torch.get_num_threads()),
            "versions": versions("torch", "triton", "xgrammar", "transformers"),
            "automaton": A.stats() | {"schema": "Glaiveai2K/analyze_social_media_mentions"}}
    meta |= extra
    for r in rows:
        r.setdefault("run", meta["date"])
    if args.merge and (RESULTS / f"kernels_{kind}.json").exists():
        rows = merge_previous(rows, meta, RESULTS / f"kernels_{kind}.json")
    backends = [b for b in ("triton", "torch") if any(r.get("backend") == b for r in rows)]
    xr = xgr_ratios(rows, backends)
    pr = pgcd_ratios(rows)
    save_json(RESULTS / f"kernels_{kind}.json",
              {"meta": meta, "rows": rows, "xgrammar_ratios": xr, "pgcd_ratios": pr})
    L = [f"# Kernel latencies ({kind})", "",
         f"- command: `{meta['command']}`", f"- date: {meta['date']}",
         f"- machine: {meta['machine']}; versions: "
         + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
         f"- load average (1/5/15 min) at start: {meta.get('loadavg_start')}, at end: "
         f"{meta.get('loadavg_end')}",
         f"- automaton: {meta['automaton']}",
         f"- xgrammar grammar: compile_json_schema(any_whitespace=False, separators=(',', ':'), "
         f"strict_mode=False), {meta.get('xgrammar_compile_s', float('nan')):.1f} s to compile",
         f"- transformer: {meta.get('transformer')}",
         f"- raw samples: `kernels_{kind}.json`"]
    for m in meta.get("merged_with", []):
        L.append(f"- rows not re-measured above come from the earlier run `{m['command']}` "
                 f"({m['date']}, load average {m['loadavg_start']} → {m['loadavg_end']}); each "
                 "row's `run` in the json says which")
    L.append("")
    if args.note:
        L += [args.note, ""]
    L += ["## Mask and apply, V = 128,256", "",
          "Cases of one batch size timed round-robin.  `xgr ...`: xgrammar on the CPU.", "",
          "| case | batch | backend | median | p90 | n |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "batch" in r:
            L.append(f"| {r['case']} | {r['batch']} | {r['backend']} | {_fmt(r['median_us'])} "
                     f"| {_fmt(r['p90_us'])} | {r['n']} |")
    L += ["", "States per batch size (random GCD walks of ≤ 24 tokens; xgrammar matchers follow "
          "the same walks):", "",
          "| batch | mean active states | distinct label-set rows | mean walk tokens | "
          "xgrammar walks truncated | xgrammar mean tokens accepted |",
          "|---|---|---|---|---|---|"]
    for w in meta.get("walks", []):
        L.append(f"| {w['batch']} | {w['mean_active_states']:.2f} | {w['unique_label_sets']} | "
                 f"{w['mean_walk_tokens']:.1f} | {w.get('xgr_truncated_walks', '–')} | "
                 f"{w.get('xgr_mean_tokens_accepted', float('nan')):.1f} |")
    if meta.get("walks"):
        L += ["", "The torch path ORs one packed row per distinct (label sets, EOS) row, so its "
              "mask cost follows the 'distinct' column more than B; xgrammar's mask reads a "
              "per-state cache of token sets."]
    if xr:
        L += ["", "## tractable / xgrammar (mask + apply per step, same batch, same run)", "",
              "Ratio < 1: tractable is faster.  Denominator: a loop of "
              "`fill_next_token_bitmask` over the B matchers + `apply_token_bitmask_inplace`; "
              "the last two columns use `BatchGrammarMatcher` instead, and mask alone.  "
              "Ratio (p90): tractable's p90 over xgrammar's p90.", "",
              "| batch | backend | tractable median | tractable p90 | xgrammar median | "
              "xgrammar p90 | ratio (median) | ratio (p90) | ratio vs batch matcher (median) | "
              "mask-only ratio (median) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for x in xr:
            vb = x["ratio_median_vs_batch_matcher"]
            mo = x["mask_only_ratio_median"]
            L.append(f"| {x['batch']} | {x['backend']} | {_fmt(x['ours_median_us'])} | "
                     f"{_fmt(x['ours_p90_us'])} | {_fmt(x['xgr_median_us'])} | "
                     f"{_fmt(x['xgr_p90_us'])} | {x['ratio_median']:.2f} | "
                     f"{x['ratio_p90']:.2f} | {'–' if vb is None else f'{vb:.2f}'} | "
                     f"{'–' if mo is None else f'{mo:.2f}'} |")
    L += ["", "## P-GCD step vs transformer step", "",
          "| case | H | backend | median | p90 | n | setup |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["case"] == "pgcd_step":
            if "skipped" in r:
                L.append(f"| pgcd_step | {r['H']} | {r['backend']} | skipped: {r['skipped']} "
                         "| | | |")
            else:
                L.append(f"| pgcd_step | {r['H']} | {r['backend']} | {_fmt(r['median_us'])} | "
                         f"{_fmt(r['p90_us'])} | {r['n']} | {r['setup_s']:.1f} s |")
        elif r["case"] == "transformer_step":
            when = (f"before H={r['before_H']}, then unloaded" if "before_H" in r else
                    f"after H={r['after_H']}" if r["after_H"] else "before P-GCD")
            L.append(f"| transformer_step ({when}) | – | {r['backend']} | "
                     f"{_fmt(r['median_us'])} | {_fmt(r['p90_us'])} | {r['n']} | |")
    if pr:
        L += ["", "pgcd_step / transformer_step (LM samples pooled over the run; 'adjacent': "
              "only the LM samples taken right after that H).  Goal (issue 6): within half the "
              "paper's slowdown.", "",
              "| H | backend | ratio (median) | ratio (p90) | ratio (median, adjacent) | "
              "paper 002 slowdown | goal (½ paper) |", "|---|---|---|---|---|---|---|"]
        for p in pr:
            ps = p["paper_slowdown"]
            L.append(f"| {p['H']} | {p['backend']} | {p['ratio_median']:.1f}× | "
                     f"{p['ratio_p90']:.1f}× | {p['ratio_median_adjacent']:.1f}× | "
                     f"{'–' if ps is None else f'{ps}×'} | "
                     f"{'–' if ps is None else f'{ps / 2:.2f}×'} |")
    L += ["", "xgrammar apply-only (published, H100, vocab 128k): "
          + ", ".join(f"batch {b}: {v} µs" for b, v in XGRAMMAR_APPLY_US.items()) + "."]
    (RESULTS / f"kernels_{kind}.md").write_text("\n".join(L) + "\n")
    print("wrote", RESULTS / f"kernels_{kind}.md")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", type=int, nargs="*", default=[1, 16, 64, 256, 1024])
    p.add_argument("--hidden", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--lm-reps", type=int, default=5, help="transformer steps timed after each H")
    # 1 thread: on the shared 2-core box, 2 threads made the torch mask ~10x slower and noisier
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-xgrammar", action="store_true")
    p.add_argument("--no-transformer", action="store_true")
    p.add_argument("--note", default="")
    p.add_argument("--merge", action="store_true",
                   help="keep the previous results file's rows that this run does not re-measure")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    extra: dict = {"loadavg_start": loadavg()}
    A, _ = load_automaton()
    print(A, flush=True)
    from tractable.kernels import MaskTables

    tables = MaskTables.from_automaton(A, A.distance_to_accept())
    xg = None
    if not args.no_xgrammar and args.batches:
        xg = XGrammarCPU(A.vocab_size, A.eos_token_ids, args.threads)
        extra["xgrammar_compile_s"] = xg.compile_s
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    kind = "gpu" if cuda else "cpu"
    mask_backends = ("triton", "torch") if cuda else ("torch",)
    pgcd_backends = mask_backends
    reps = max(args.reps, 100) if cuda else args.reps
    rows, walks = bench_masks(A, tables, args.batches, reps, dev, mask_backends, xg)
    if walks:
        extra["walks"] = walks
    lm = None
    if not args.no_transformer:
        lm = TransformerStep(dev)
        extra["transformer"] = (f"random Llama-3.2-1B shape {LLAMA_1B}, {lm.params / 1e9:.2f} B "
                                f"params, {lm.dtype}, batch 1, KV cache {KV_TOKENS} tokens, "
                                f"init {lm.init_s:.0f} s")
        xs = lm.sample(args.lm_reps)
        rows.append({"case": "transformer_step", "after_H": 0, "backend": lm.dtype,
                     **median_p90_us(xs), "samples_s": xs, "loadavg_after": loadavg()})
        print(f"  transformer_step median {statistics.median(xs) * 1e3:.1f} ms", flush=True)
    for be in pgcd_backends:
        rows += bench_pgcd(A, args.hidden, max(args.reps, 20) if cuda else args.reps, dev, be,
                           lm, args.lm_reps)
    extra["loadavg_end"] = loadavg()
    write(rows, A, args, kind, extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
