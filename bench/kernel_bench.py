"""Kernel latencies: batched GCD mask + apply at vocabulary 128k, and one P-GCD step.

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
* ``pgcd_step`` for H hidden states (random row-stochastic HMM): one
  :func:`hmm_forward_step` (emit the sampled token, transition, eq. 5) plus the next-token term
  :func:`emission_term` of ``α ∘ β`` (Algorithm 1's return) for B = 1.

CPU: the torch path (``backend="torch"``), ``time.perf_counter`` around each call.  CUDA: the
Triton path and the torch path, CUDA events, after warm-up; the result is compared with
xgrammar's published apply-only kernel (5.4 µs at batch 1, 45 µs at batch 64, H100, vocab 128k).
Results: ``bench/results/kernels_{cpu,gpu}.md`` and ``.json`` (every sample).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CACHE = Path(os.environ.get("TRACTABLE_CACHE", Path.home() / ".cache" / "tractable" / "bench"))
FIXTURES = Path(os.environ.get("TRACTABLE_FIXTURES", ROOT / "fixtures"))

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


def load_automaton():
    from tractable.fsa.automaton import TokenAutomaton
    from tractable.fsa.vocabulary import TokenVocabulary

    vocab = TokenVocabulary.from_tokenizer_file(FIXTURES / "tokenizers" / "llama3" /
                                                "tokenizer.json")
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
    """bool [B, S]: the state sets after random GCD-valid walks of up to ``steps`` tokens."""
    from tractable.kernels import advance, token_mask, unpack_mask

    g = torch.Generator().manual_seed(seed)
    V = A.vocab_size
    active = torch.zeros(B, A.num_states, dtype=torch.bool)
    active[:, 0] = True
    stop = torch.randint(0, steps + 1, (B,), generator=g)
    text = torch.ones(V, dtype=torch.bool)
    text[list(A.eos_token_ids)] = False
    for t in range(steps):
        allowed = unpack_mask(token_mask(active, 256 - t, tables, backend="torch"), V) & text
        w = allowed.float()
        w[w.sum(1) == 0, 0] = 1.0  # dead row (only EOS left): stays put below
        tok = torch.multinomial(w, 1, generator=g).flatten()
        nxt = advance(active, tok, A.edge_src, A.edge_dst, A.edge_label, A.labels, V,
                      backend="torch")
        keep = (t >= stop) | ~nxt.any(1)
        active = torch.where(keep[:, None], active, nxt)
    return active


def timeit(fn, reps: int, cuda: bool) -> list[float]:
    """Seconds per call (reps samples, after 2 warm-up calls)."""
    for _ in range(2):
        fn()
    out = []
    for _ in range(reps):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            out.append(s.elapsed_time(e) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return out


def stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
    return {"median_us": statistics.median(xs) * 1e6, "p90_us": p90 * 1e6, "n": len(xs)}


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


def bench_masks(A, tables, batches, reps, device, backend):
    from tractable.kernels import token_mask

    rows = []
    cuda = device.type == "cuda"
    V = A.vocab_size
    t_dev = tables.to(device)
    for B in batches:
        active = walk_states(A, tables, B, 24, seed=B).to(device)
        g = torch.Generator().manual_seed(B)
        remaining = torch.randint(8, 201, (B,), generator=g).to(device)
        logits = torch.randn(B, V, generator=g).to(device)
        packed = token_mask(active, remaining, t_dev, backend=backend)
        n = max(3, reps if B <= 64 else reps // 4)
        cases = _mask_cases(active, remaining, logits, packed, t_dev, backend)
        for name, fn in cases.items():
            samples = timeit(fn, n, cuda)
            row = {"case": name, "batch": B, "backend": backend, **stats(samples),
                   "samples_s": samples,
                   "mean_active_states": float(active.float().sum(1).mean())}
            rows.append(row)
            print(f"  {name:13s} B={B:5d} {backend:6s} median {row['median_us']:10.1f} µs"
                  f"  p90 {row['p90_us']:10.1f} µs", flush=True)
    return rows


def bench_pgcd(A, hidden, reps, device, backend):
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

        n = reps if cuda else max(1, min(reps, 3 if H <= 1024 else 1))
        samples = timeit(step, n, cuda)
        row = {"case": "pgcd_step", "H": H, "E": E, "S": S, "L": A.num_labels,
               "backend": backend, "setup_s": setup, **stats(samples), "samples_s": samples}
        rows.append(row)
        print(f"  pgcd_step H={H:6d} {backend:6s} median {row['median_us'] / 1e3:10.1f} ms"
              f"  (setup {setup:.1f} s)", flush=True)
        del step, A_h, B_h, inp, beta, alpha
    return rows


def versions() -> dict:
    out = {"python": sys.version.split()[0], "torch": torch.__version__,
           "platform": platform.platform(), "cpu_threads": torch.get_num_threads()}
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        out["triton"] = None
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name()
    return out


def write(rows, A, args, kind: str):
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"command": "python bench/kernel_bench.py " + shlex.join(sys.argv[1:]),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "versions": versions(), "automaton": A.stats() | {"schema": "Glaiveai2K/"
                                                              "analyze_social_media_mentions"}}
    (RESULTS / f"kernels_{kind}.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                             indent=1))
    lines = [f"# Kernel latencies ({kind})", "",
             f"- command: `{meta['command']}`", f"- date: {meta['date']}",
             f"- machine: {meta['versions']}",
             f"- automaton: {meta['automaton']}", "- raw samples: "
             f"`kernels_{kind}.json`", "",
             "| case | batch / H | backend | median | p90 | n |", "|---|---|---|---|---|---|"]
    for r in rows:
        key = r.get("batch", r.get("H"))
        unit = "ms" if r["case"] == "pgcd_step" else "µs"
        div = 1e3 if unit == "ms" else 1.0
        lines.append(f"| {r['case']} | {key} | {r['backend']} | {r['median_us'] / div:.1f} "
                     f"{unit} | {r['p90_us'] / div:.1f} {unit} | {r['n']} |")
    if kind == "gpu":
        lines += ["", "xgrammar apply-only (published, H100, vocab 128k): "
                  + ", ".join(f"batch {b}: {v} µs" for b, v in XGRAMMAR_APPLY_US.items()),
                  "Paper P-GCD slowdown vs LM step: "
                  + ", ".join(f"H={h}: {v}×" for h, v in PAPER_PGCD_SLOWDOWN.items())]
    lines += ["", args.note or ""]
    (RESULTS / f"kernels_{kind}.md").write_text("\n".join(lines) + "\n")
    print("wrote", RESULTS / f"kernels_{kind}.md")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256, 1024])
    p.add_argument("--hidden", type=int, nargs="+", default=None)
    p.add_argument("--reps", type=int, default=20)
    # 1 thread: on the shared 2-core box, 2 threads made the torch mask ~10x slower and noisier
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--note", default="")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    A, _ = load_automaton()
    print(A, flush=True)
    from tractable.kernels import MaskTables

    tables = MaskTables.from_automaton(A, A.distance_to_accept())
    cuda = torch.cuda.is_available()
    rows = []
    if cuda:
        dev = torch.device("cuda")
        hidden = args.hidden or [1024, 4096, 16384]
        for be in ("triton", "torch"):
            rows += bench_masks(A, tables, args.batches, max(args.reps, 100), dev, be)
        for be in ("triton", "torch"):
            rows += bench_pgcd(A, hidden, max(args.reps, 20), dev, be)
        write(rows, A, args, "gpu")
    else:
        dev = torch.device("cpu")
        hidden = args.hidden or [1024, 4096]
        rows += bench_masks(A, tables, args.batches, args.reps, dev, "torch")
        rows += bench_pgcd(A, hidden, args.reps, dev, "torch")
        write(rows, A, args, "cpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
