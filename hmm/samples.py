"""Task-conditioned samples from an LM, in a resumable, sharded store on disk (paper 002 §5.2:
the HMM is distilled per task from LM samples on the task's non-test prompts).

Layout of a store directory::

    manifest.json                    format, version, config, and one entry per *finished* shard
    shard_00000.safetensors          tokens int32 [B, T] (0 after each sequence's end),
                                     lengths int64 [B], prompt_index int64 [B],
                                     lm_logprob float32 [B, T] (log p_lm(x_t | prompt, x_<t), 0
                                     at padding)
    shard_00000.hidden.safetensors   (``store_hidden``) hidden float16 [B, T, D]: the LM's last
                                     hidden state whose logits ``x_t`` was drawn from (the input
                                     of the LM head), for LVD (:mod:`tractable.hmm.lvd`)

A shard is finished once it is listed in the manifest; its files are written to ``*.tmp`` and
renamed before the manifest (also renamed into place) lists them, so a killed run leaves no
half shard behind, and a rerun samples only the missing shards.  Sequence ``j`` (global index)
answers prompt ``(j // samples_per_prompt) mod len(prompts)``; shard ``i`` holds sequences
``i·shard_size … (i+1)·shard_size − 1`` and is drawn with seed ``seed·1_000_003 + i``, so a
resumed store equals an uninterrupted one (on the same device).  Data-parallel EM
(:mod:`tractable.hmm.em_distributed`) gives rank ``r`` of ``w`` the shards ``r, r + w, …``.

Sampling is ancestral at temperature 1 (no top-k/top-p: the HMM approximates p_lm itself); each
prompt is prefilled once per batch and its KV cache repeated for its ``samples_per_prompt``
rows.  A sequence stops at its first EOS, which is kept as its last token.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..fsa.errors import InvalidArgumentError

__all__ = [
    "SampleStore",
    "Samples",
    "load_prompts",
    "encode_prompts",
    "sample_batch",
    "auto_device",
    "heldout_mask",
    "prompts_fingerprint",
    "STORE_FORMAT_VERSION",
]

#: Version of the on-disk layout of a :class:`SampleStore`.
STORE_FORMAT_VERSION = 1
_FORMAT = "tractable-samples"

Prompt = str | list  # a text, or a list of chat messages {"role", "content"}


def auto_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` → ``cuda`` when a GPU is visible, else ``cpu``; anything else as given."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


# ---------------------------------------------------------------------------- prompts


def load_prompts(source: str | os.PathLike | Sequence[Prompt]) -> list[Prompt]:
    """Prompts from a file or a list.

    A ``.jsonl`` file (or any file whose first non-blank line starts with ``{``, ``[`` or ``"``)
    holds one JSON value a line: a string, a list of chat messages, or an object with
    ``"messages"``, ``"prompt"`` or ``"text"``.  Any other file: one prompt a line (blank lines
    skipped; ``\\n`` inside a prompt written as the two characters ``\\n``).

    Raises:
        InvalidArgumentError: a line that is not such a value (file and line named), or no
            prompts at all.
        FileNotFoundError: the file does not exist.
    """
    if not isinstance(source, (str, os.PathLike)):
        out = list(source)
        for i, p in enumerate(out):
            if not isinstance(p, (str, list)):
                raise InvalidArgumentError(f"prompts[{i}]: expected a str or a list of chat "
                                           f"messages, got {type(p).__name__}")
        if not out:
            raise InvalidArgumentError("prompts: empty list")
        return out
    path = Path(source)
    lines = path.read_text(encoding="utf-8").splitlines()
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    as_json = path.suffix == ".jsonl" or first[:1] in ("{", "[", '"')
    out: list[Prompt] = []
    for no, ln in enumerate(lines, 1):
        if not ln.strip():
            continue
        if not as_json:
            out.append(ln.replace("\\n", "\n"))
            continue
        try:
            v = json.loads(ln)
        except ValueError as e:
            raise InvalidArgumentError(f"{path}:{no}: not JSON ({e})") from e
        if isinstance(v, dict):
            v = v.get("messages", v.get("prompt", v.get("text")))
        if not isinstance(v, (str, list)):
            raise InvalidArgumentError(
                f"{path}:{no}: expected a string, a list of chat messages or an object with "
                "'messages', 'prompt' or 'text'")
        out.append(v)
    if not out:
        raise InvalidArgumentError(f"{path}: no prompts")
    return out


def encode_prompts(tokenizer, prompts: Sequence[Prompt] | None,
                   chat_template: bool | None = None) -> list[list[int]]:
    """Token ids of each prompt.

    ``chat_template`` None (default): wrap each prompt as a user turn (a list is taken as the
    messages) with the tokenizer's chat template and the generation prompt when the tokenizer has
    one; True requires a template; False uses the raw text.  No prompts: one prompt, the
    tokenizer's document separator (``<|endoftext|>``, else BOS) — unconditional samples.

    Raises:
        InvalidArgumentError: ``chat_template=True`` and the tokenizer has none, or a list prompt
            without a template.
    """
    if not prompts:
        return [_start_ids(tokenizer)]
    has = getattr(tokenizer, "chat_template", None) is not None
    if chat_template and not has:
        raise InvalidArgumentError("chat_template=True but the tokenizer has no chat template")
    use = has if chat_template is None else bool(chat_template)
    out = []
    for i, p in enumerate(prompts):
        if use:
            msgs = p if isinstance(p, list) else [{"role": "user", "content": p}]
            ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if not isinstance(ids, list):
                ids = list(ids["input_ids"])
        else:
            if isinstance(p, list):
                raise InvalidArgumentError(f"prompts[{i}] is a list of messages but the chat "
                                           "template is not used")
            ids = tokenizer(p, add_special_tokens=False)["input_ids"]
        if not ids:
            ids = _start_ids(tokenizer)
        out.append([int(x) for x in ids])
    return out


def _start_ids(tokenizer) -> list[int]:
    i = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    if isinstance(i, int) and i != tokenizer.unk_token_id:
        return [i]
    if tokenizer.bos_token_id is not None:
        return [int(tokenizer.bos_token_id)]
    return [0]


# ---------------------------------------------------------------------------- sampling


@torch.inference_mode()
def sample_batch(
    model, prompt_ids: Sequence[Sequence[int]], *, max_length: int, generator: torch.Generator,
    eos_token_ids: Sequence[int] = (), pad_token_id: int = 0, store_hidden: bool = False,
) -> dict[str, torch.Tensor]:
    """Ancestral samples (temperature 1), one row per entry of ``prompt_ids``.

    Equal consecutive prompts are prefilled once and their KV cache repeated.  ``generator``
    lives on the model's device.  Returns CPU tensors ``tokens`` int32 [n, T], ``lengths``
    int64 [n], ``lm_logprob`` float32 [n, T] and, with ``store_hidden``, ``hidden`` float16
    [n, T, D] (the input of the LM head at the step that drew ``x_t``), where
    ``T = max_length`` (0 / padding after each row's end; a row ends at and includes its first
    EOS).
    """
    device = next(model.parameters()).device
    n = len(prompt_ids)
    uniq: list[list[int]] = []
    rows: list[int] = []
    for p in prompt_ids:
        if not uniq or list(p) != uniq[-1]:
            uniq.append(list(p))
        rows.append(len(uniq) - 1)
    P = max(len(x) for x in uniq)
    inp = torch.full((len(uniq), P), pad_token_id, dtype=torch.long)
    att = torch.zeros((len(uniq), P), dtype=torch.long)
    for i, x in enumerate(uniq):
        inp[i, P - len(x):] = torch.tensor(x)
        att[i, P - len(x):] = 1
    inp, att = inp.to(device), att.to(device)
    pos = (att.cumsum(-1) - 1).clamp(min=0)
    sel = torch.tensor(rows, device=device)
    eos = torch.tensor(sorted(set(int(e) for e in eos_token_ids)), dtype=torch.long,
                       device=device)
    captured: list[torch.Tensor] = []
    hook = None
    if store_hidden:
        head = model.get_output_embeddings()
        hook = head.register_forward_pre_hook(lambda m, a: captured.append(a[0][:, -1]))
    out = torch.zeros((n, max_length), dtype=torch.int32, device=device)
    lp_out = torch.zeros((n, max_length), dtype=torch.float32, device=device)
    hid = None
    done = torch.zeros(n, dtype=torch.bool, device=device)
    lengths = torch.full((n,), max_length, dtype=torch.int64, device=device)
    past = None
    cur_ids, cur_pos, cur_att = inp, pos, att
    try:
        for t in range(max_length):
            captured.clear()
            try:
                o = model(input_ids=cur_ids, attention_mask=cur_att, position_ids=cur_pos,
                          past_key_values=past, use_cache=True, logits_to_keep=1)
            except TypeError:  # a model without logits_to_keep
                o = model(input_ids=cur_ids, attention_mask=cur_att, position_ids=cur_pos,
                          past_key_values=past, use_cache=True)
            past = o.past_key_values
            logits = o.logits[:, -1, :].float()
            h = captured[-1] if store_hidden else None
            if t == 0:  # expand the prefilled prompts to their rows
                past.batch_select_indices(sel)
                logits, cur_pos, cur_att = logits[sel], cur_pos[sel], cur_att[sel]
                h = h[sel] if h is not None else None
            lp = torch.log_softmax(logits, dim=-1)
            nxt = torch.multinomial(lp.exp(), 1, generator=generator).squeeze(1)
            nxt = torch.where(done, torch.zeros_like(nxt), nxt)
            live = ~done
            out[:, t] = nxt.to(torch.int32)
            lp_out[:, t] = torch.where(live, lp.gather(1, nxt[:, None]).squeeze(1),
                                       torch.zeros_like(lp_out[:, t]))
            if h is not None:
                if hid is None:
                    hid = torch.zeros((n, max_length, h.shape[-1]), dtype=torch.float16,
                                      device=device)
                hid[:, t] = torch.where(live[:, None], h.to(torch.float16),
                                        torch.zeros_like(hid[:, t]))
            if eos.numel():
                newly = live & torch.isin(nxt, eos)
                lengths[newly] = t + 1
                done |= newly
            if bool(done.all()):
                break
            cur_ids = nxt.view(n, 1)
            cur_pos = cur_pos[:, -1:] + 1
            cur_att = torch.cat([cur_att, torch.ones((n, 1), dtype=cur_att.dtype,
                                                     device=device)], dim=1)
    finally:
        if hook is not None:
            hook.remove()
    res = {"tokens": out.cpu(), "lengths": lengths.cpu(), "lm_logprob": lp_out.cpu()}
    if store_hidden:
        res["hidden"] = (hid if hid is not None else torch.zeros((n, max_length, 0),
                                                                 dtype=torch.float16)).cpu()
    return res


# ---------------------------------------------------------------------------- the store


@dataclass
class Samples:
    """Sequences read from a store: ``tokens`` int64 [N, T], ``lengths`` int64 [N],
    ``prompt_index`` int64 [N], ``lm_logprob`` float32 [N, T], ``hidden`` float16 [N, T, D]
    or None, ``index`` int64 [N] (global sequence index in the store) or None."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    prompt_index: torch.Tensor
    lm_logprob: torch.Tensor
    hidden: torch.Tensor | None = None
    index: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())

    def select(self, idx: torch.Tensor) -> Samples:
        """The rows ``idx`` (int64 [K] or bool [N]) as a new :class:`Samples`."""
        return Samples(self.tokens[idx], self.lengths[idx], self.prompt_index[idx],
                       self.lm_logprob[idx], None if self.hidden is None else self.hidden[idx],
                       None if self.index is None else self.index[idx])


class SampleStore:
    """A directory of sample shards and their manifest; see the module docstring.

    ``config`` (any JSON-able dict; :meth:`fill` requires ``num_samples``, ``shard_size``,
    ``max_length``, ``seed``, ``samples_per_prompt``, ``store_hidden``) is fixed when the store
    is created; opening an existing store with a different config raises, naming the keys.
    """

    def __init__(self, directory: str | os.PathLike, config: dict[str, Any] | None = None):
        self.dir = Path(directory)
        mpath = self.dir / "manifest.json"
        if mpath.exists():
            try:
                man = json.loads(mpath.read_text())
            except ValueError as e:
                raise InvalidArgumentError(f"{mpath}: not a sample-store manifest ({e})") from e
            if man.get("format") != _FORMAT or man.get("version") != STORE_FORMAT_VERSION:
                raise InvalidArgumentError(
                    f"{mpath}: format {man.get('format')!r} version {man.get('version')!r}, "
                    f"expected {_FORMAT!r} version {STORE_FORMAT_VERSION}")
            if config is not None and man["config"] != _jsonable(config):
                old = man["config"]
                new = _jsonable(config)
                keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
                raise InvalidArgumentError(
                    f"{self.dir} holds samples drawn with a different configuration "
                    f"(differs in {', '.join(keys)}: "
                    + "; ".join(f"{k}: stored {old.get(k)!r}, asked {new.get(k)!r}"
                                for k in keys) + "); use another directory")
            self.manifest = man
        else:
            if config is None:
                raise InvalidArgumentError(f"{self.dir}: no sample store (no manifest.json)")
            self.manifest = {"format": _FORMAT, "version": STORE_FORMAT_VERSION,
                             "config": _jsonable(config), "shards": {}}
            self.dir.mkdir(parents=True, exist_ok=True)
            self._write_manifest()

    # -- bookkeeping

    @property
    def config(self) -> dict[str, Any]:
        return self.manifest["config"]

    @property
    def num_shards(self) -> int:
        c = self.config
        return math.ceil(int(c["num_samples"]) / int(c["shard_size"]))

    def finished(self) -> list[int]:
        """Indices of the finished shards, ascending."""
        return sorted(int(k) for k in self.manifest["shards"])

    def missing(self) -> list[int]:
        done = set(self.finished())
        return [i for i in range(self.num_shards) if i not in done]

    def shard_path(self, i: int, hidden: bool = False) -> Path:
        return self.dir / f"shard_{i:05d}{'.hidden' if hidden else ''}.safetensors"

    def _write_manifest(self) -> None:
        tmp = self.dir / "manifest.json.tmp"
        tmp.write_text(json.dumps(self.manifest, indent=1))
        os.replace(tmp, self.dir / "manifest.json")

    def write_shard(self, i: int, data: dict[str, torch.Tensor], info: dict | None = None) -> None:
        """Write shard ``i`` (the tensors of :func:`sample_batch` plus ``prompt_index``) and list
        it in the manifest.  Mutates the store's files and ``self.manifest``."""
        from safetensors.torch import save_file

        main = {k: data[k].contiguous() for k in ("tokens", "lengths", "prompt_index",
                                                   "lm_logprob")}
        tmp = self.shard_path(i).with_suffix(".tmp")
        save_file(main, str(tmp))
        if "hidden" in data:
            htmp = self.shard_path(i, hidden=True).with_suffix(".tmp")
            save_file({"hidden": data["hidden"].contiguous()}, str(htmp))
            os.replace(htmp, self.shard_path(i, hidden=True))
        os.replace(tmp, self.shard_path(i))
        rec = {"sequences": int(main["tokens"].shape[0]), "tokens": int(main["lengths"].sum())}
        rec.update(info or {})
        self.manifest["shards"][f"{i:05d}"] = rec
        self._write_manifest()

    def read_shard(self, i: int, with_hidden: bool = False) -> Samples:
        """Shard ``i`` as :class:`Samples` (tokens widened to int64).

        Raises:
            InvalidArgumentError: shard ``i`` is not finished, or has no hidden states.
        """
        from safetensors.torch import load_file

        if f"{i:05d}" not in self.manifest["shards"]:
            raise InvalidArgumentError(f"{self.dir}: shard {i} is not finished")
        d = load_file(str(self.shard_path(i)))
        hid = None
        if with_hidden:
            hp = self.shard_path(i, hidden=True)
            if not hp.exists():
                raise InvalidArgumentError(f"{self.dir}: shard {i} has no hidden states "
                                           "(sample with store_hidden=True / --lvd)")
            hid = load_file(str(hp))["hidden"]
        n = d["tokens"].shape[0]
        first = i * int(self.config.get("shard_size", n))
        return Samples(d["tokens"].long(), d["lengths"].long(), d["prompt_index"].long(),
                       d["lm_logprob"].float(), hid, torch.arange(first, first + n))

    def load(self, shards: Sequence[int] | None = None, with_hidden: bool = False) -> Samples:
        """The finished shards ``shards`` (default: all), concatenated in index order.

        Raises:
            InvalidArgumentError: no finished shard to read."""
        ids = self.finished() if shards is None else list(shards)
        if not ids:
            raise InvalidArgumentError(f"{self.dir}: no finished sample shards")
        parts = [self.read_shard(i, with_hidden) for i in ids]
        T = max(p.tokens.shape[1] for p in parts)

        def cat(name):
            xs = [getattr(p, name) for p in parts]
            if xs[0] is None:
                return None
            if xs[0].dim() == 1:
                return torch.cat(xs)
            pad = [torch.nn.functional.pad(x, (0, 0) * (x.dim() - 2) + (0, T - x.shape[1]))
                   for x in xs]
            return torch.cat(pad)

        return Samples(cat("tokens"), cat("lengths"), cat("prompt_index"), cat("lm_logprob"),
                       cat("hidden"), cat("index"))

    # -- sampling

    def fill(
        self, model, prompt_ids: Sequence[Sequence[int]], *, batch_size: int = 64,
        eos_token_ids: Sequence[int] = (), pad_token_id: int = 0,
        log: Callable[[dict], None] | None = None, progress: bool = True,
    ) -> int:
        """Sample every missing shard (in index order); returns how many were sampled.

        ``prompt_ids`` are the encoded prompts (:func:`encode_prompts`), the same list on every
        run.  Prints per shard the tokens sampled, tokens/s (generated) and the prompt tokens
        prefilled to stderr and passes the same record to ``log``.  Mutates the directory."""
        c = self.config
        N, S, k = int(c["num_samples"]), int(c["shard_size"]), int(c["samples_per_prompt"])
        device = next(model.parameters()).device
        todo = self.missing()
        t_all = time.perf_counter()
        gen_tok = 0
        for n_done, i in enumerate(todo):
            t0 = time.perf_counter()
            g = torch.Generator(device=device).manual_seed(int(c["seed"]) * 1_000_003 + i)
            lo, hi = i * S, min(N, (i + 1) * S)
            pidx = [(j // k) % len(prompt_ids) for j in range(lo, hi)]
            parts = []
            prefilled = 0
            for b in range(lo, hi, batch_size):
                ps = pidx[b - lo:b - lo + batch_size]
                prefilled += sum(len(prompt_ids[p]) for p in dict.fromkeys(ps))
                parts.append(sample_batch(
                    model, [prompt_ids[p] for p in ps], max_length=int(c["max_length"]),
                    generator=g, eos_token_ids=eos_token_ids, pad_token_id=pad_token_id,
                    store_hidden=bool(c["store_hidden"])))
            data = {key: torch.cat([p[key] for p in parts]) for key in parts[0]}
            data["prompt_index"] = torch.tensor(pidx, dtype=torch.int64)
            dt = time.perf_counter() - t0
            ntok = int(data["lengths"].sum())
            gen_tok += ntok
            rec = {"event": "sample", "shard": i, "of": self.num_shards, "sequences": hi - lo,
                   "tokens": ntok, "seconds": dt, "tokens_per_s": ntok / dt,
                   "prompt_tokens": prefilled, "device": str(device)}
            self.write_shard(i, data, {"seconds": dt})
            if log is not None:
                log(rec)
            if progress:
                el = time.perf_counter() - t_all
                print(f"[sample] shard {i + 1}/{self.num_shards} ({n_done + 1}/{len(todo)} this "
                      f"run): {ntok} tokens, {ntok / dt:.1f} tok/s generated, "
                      f"{prefilled} prompt tokens prefilled; {gen_tok / el:.1f} tok/s overall, "
                      f"{el:.0f} s, {device}", file=sys.stderr, flush=True)
        return len(todo)


def heldout_mask(samples: Samples, *, num_prompts: int, fraction: float,
                 seed: int = 0) -> torch.Tensor:
    """bool [N]: which sequences are held out.

    With two or more prompts the split is **by prompt**: ``max(1, round(fraction · P))``
    prompts drawn from ``seed`` are held out with all their samples (the held-out LL then
    measures generalisation to unseen task inputs, as the paper's non-test split).  With one
    prompt (or none) the split is by sequence: ``round(fraction · N)`` global sequence indices
    drawn from ``seed`` out of ``0 … max index``.  Depends only on global indices, so every
    rank of data-parallel EM agrees on it.

    Raises:
        InvalidArgumentError: ``fraction`` outside (0, 1).
    """
    if not 0.0 < fraction < 1.0:
        raise InvalidArgumentError(f"holdout fraction must be in (0, 1), got {fraction}")
    if num_prompts >= 2:
        g = torch.Generator().manual_seed(seed)
        held = torch.randperm(num_prompts, generator=g)[:max(1, round(fraction * num_prompts))]
        return torch.isin(samples.prompt_index, held)
    idx = samples.index if samples.index is not None else torch.arange(len(samples))
    # Knuth's multiplicative hash of (index, seed): a fixed pseudo-random subset of indices
    u = ((idx * 2654435761 + seed * 40503 + 12345) % 2**32).double() / 2**32
    return u < fraction


def prompts_fingerprint(prompt_ids: Sequence[Sequence[int]]) -> str:
    """sha256 of the encoded prompts (stored in a store's config: a changed prompt file is a
    different store)."""
    h = hashlib.sha256()
    for p in prompt_ids:
        h.update(json.dumps(list(p)).encode())
        h.update(b"\n")
    return h.hexdigest()


def _jsonable(d: dict) -> dict:
    return json.loads(json.dumps(d, default=str))
