"""vLLM serving on CPU: throughput and validity of tractable's logits processor against vLLM's
own structured-output backends (xgrammar, guidance) and unconstrained decoding.

    VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 \\
        python bench/vllm_bench.py --schemas 12 --samples 2 --loose 64 --slacks 0 4 12

Requests: the first ``--schemas`` BFCL v4 ``simple_python`` questions whose function-call
schema (``{"name": <const>, "arguments": <parameters>}``, as in ``bench/bfcl_bench.py``)
tractable compiles; prompt = the question + "answer with a JSON object", ChatML template;
``--samples`` sampled outputs per schema (temperature 0.7, a seed per request).  Every method
gets the same requests and the same engine settings (SmolLM2-135M-Instruct, float32,
``enforce_eager``, ``max_model_len=512``, ``max_num_seqs`` = all requests in one batch):

* ``unconstrained`` — no constraint;
* ``tractable`` — :class:`tractable.decode.vllm_processor.TractableLogitsProcessor`, GCD,
  constraint in ``SamplingParams.extra_args``;
* ``xgrammar``, ``guidance`` — ``SamplingParams.structured_outputs=StructuredOutputsParams(
  json=schema, disable_any_whitespace=True)`` (compact JSON, as tractable's canonical
  automaton), each on its own engine (vLLM allows one backend per engine).

Throughput: one ``llm.generate`` over all requests at the loose budget ``--loose``; the first
pass is "cold" (includes compiling the schemas: vLLM caches xgrammar/guidance grammars,
tractable its automata), then ``--repeats`` warm passes; tokens/s = generated tokens / wall
time (median over warm passes).  Validity: the same requests at tight budgets ``max_tokens`` =
tractable's shortest accepted output (tokens) + slack, for each ``--slacks``; an output is valid
iff ``json.loads`` + ``jsonschema`` (Draft 2020-12) accept it.

Writes bench/results/vllm_serving.{md,json}.  Scripts that spawn vLLM's engine processes must
run under ``if __name__ == "__main__"`` (this one does).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bfcl_bench and harness, also in vLLM's spawned processes
from harness import RESULTS, SHARED, machine, save_json, utc_now, versions  # noqa: E402

OUT = RESULTS
DATA = SHARED / "bfcl_function_calling" / "BFCL_v4_simple_python.json"
INSTRUCTION = ('\nAnswer with a JSON object {"name": ..., "arguments": {...}} calling the '
               "function.")


def load_requests(n: int, vocab):
    """[(id, prompt text, schema, tractable min tokens)] for the first n compilable questions."""
    from bfcl_bench import call_schema
    from tractable.decode.vllm_processor import compile_constraint

    out = []
    for line in DATA.read_text().splitlines():
        q = json.loads(line)
        schema = call_schema(q["function"][0])
        try:
            A = compile_constraint({"json_schema": schema}, vocab)
        except Exception as e:  # noqa: BLE001 - skip what tractable cannot compile
            print(f"skip {q['id']}: {type(e).__name__}", flush=True)
            continue
        out.append((q["id"], q["question"][0][0]["content"] + INSTRUCTION, schema,
                    A.min_tokens_to_accept()))
        if len(out) >= n:
            break
    return out


def params_for(method: str, schema: dict, max_tokens: int, seed: int):
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    kw = {"max_tokens": max_tokens, "temperature": 0.7, "seed": seed}
    if method == "tractable":
        kw["extra_args"] = {"tractable": {"json_schema": schema}}
    elif method in ("xgrammar", "guidance"):
        kw["structured_outputs"] = StructuredOutputsParams(json=schema,
                                                           disable_any_whitespace=True)
    return SamplingParams(**kw)


def valid(text: str, schema: dict) -> bool:
    import jsonschema

    try:
        jsonschema.Draft202012Validator(schema).validate(json.loads(text))
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def run_pass(llm, prompts, reqs, method, budget_of, samples):
    ps, metas = [], []
    for k, (rid, _text, schema, mn) in enumerate(reqs):
        for s in range(samples):
            ps.append(params_for(method, schema, budget_of(mn), seed=1000 * k + s))
            metas.append((rid, schema))
    all_prompts = [p for p in prompts for _ in range(samples)]
    t0 = time.perf_counter()
    outs = llm.generate(all_prompts, ps, use_tqdm=False)
    wall = time.perf_counter() - t0
    toks = sum(len(o.outputs[0].token_ids) for o in outs)
    ok = [valid(o.outputs[0].text, sch) for o, (_rid, sch) in zip(outs, metas)]
    reasons = [o.outputs[0].finish_reason for o in outs]
    return {"wall_s": wall, "tokens": toks, "tok_s": toks / wall, "valid": sum(ok),
            "n": len(ok), "finish_length": reasons.count("length"),
            "examples": [o.outputs[0].text for o in outs[:2]]}


def bench_engine(folder, backend, methods, reqs, args):
    from tractable.decode.vllm_processor import TractableLogitsProcessor
    from transformers import AutoTokenizer
    from vllm import LLM

    n_req = len(reqs) * args.samples
    t0 = time.perf_counter()
    # vLLM's model-inspection subprocess puts the working directory first on sys.path: from
    # the checkout root the source folder kernels/ would shadow Hugging Face's `kernels`
    cwd = os.getcwd()
    os.chdir(tempfile.mkdtemp(prefix="vllm_cwd_"))
    try:
        llm = LLM(model=folder, dtype="float32", max_model_len=512, enforce_eager=True,
                  max_num_seqs=n_req, logits_processors=[TractableLogitsProcessor],
                  structured_outputs_config={"backend": backend}, seed=0)
    finally:
        os.chdir(cwd)
    start_s = time.perf_counter() - t0
    tok = AutoTokenizer.from_pretrained(folder)
    prompts = [{"prompt_token_ids": tok.encode(
        tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                add_generation_prompt=True), add_special_tokens=False)}
        for _rid, text, _s, _m in reqs]
    res = {}
    try:
        for m in methods:
            r = {"cold": run_pass(llm, prompts, reqs, m, lambda mn: args.loose, args.samples)}
            warm = [run_pass(llm, prompts, reqs, m, lambda mn: args.loose, args.samples)
                    for _ in range(args.repeats)]
            r["warm"] = warm
            r["tok_s_median"] = statistics.median(w["tok_s"] for w in warm)
            r["tight"] = {}
            for sl in args.slacks:
                r["tight"][str(sl)] = run_pass(llm, prompts, reqs, m,
                                               lambda mn, sl=sl: mn + sl, args.samples)
            res[m] = r
            print(m, backend, f"{r['tok_s_median']:.1f} tok/s",
                  {k: f"{v['valid']}/{v['n']}" for k, v in r["tight"].items()}, flush=True)
    finally:
        llm.llm_engine.engine_core.shutdown()
    return start_s, res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schemas", type=int, default=12)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--loose", type=int, default=64)
    ap.add_argument("--slacks", type=int, nargs="+", default=[0, 4, 12])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(OUT / "vllm_serving"))
    args = ap.parse_args()

    import vllm  # noqa: F401 - fail before loading anything when vLLM is missing
    from tractable.decode.vllm_processor import vocabulary_for_model

    from tractable.models import load_smollm2, smollm2_cache_dir

    folder = smollm2_cache_dir()
    if not (folder / "model.safetensors").is_file():
        load_smollm2()
    folder = str(folder)
    gen = json.loads((Path(folder) / "generation_config.json").read_text())
    cfg = json.loads((Path(folder) / "config.json").read_text())
    vocab = vocabulary_for_model(folder, cfg["vocab_size"], generation_config=gen)
    reqs = load_requests(args.schemas, vocab)
    print(f"{len(reqs)} schemas; min tokens {[r[3] for r in reqs]}", flush=True)

    t_all = time.perf_counter()
    s1, r1 = bench_engine(folder, "xgrammar", ["unconstrained", "tractable", "xgrammar"], reqs,
                          args)
    s2, r2 = bench_engine(folder, "guidance", ["guidance"], reqs, args)
    results = {**r1, **r2}
    meta = {
        "command": "python bench/vllm_bench.py " + " ".join(sys.argv[1:]),
        "date": utc_now(), "machine": machine(),
        "versions": versions("vllm", "torch", "xgrammar", "llguidance"),
        "engine_start_s": {"xgrammar engine": s1, "guidance engine": s2},
        "total_s": time.perf_counter() - t_all,
        "args": vars(args),
        "schemas": [{"id": r[0], "min_tokens": r[3]} for r in reqs],
    }
    save_json(args.out + ".json", {"meta": meta, "results": results})
    Path(args.out + ".md").write_text(render(meta, results, args))
    print(Path(args.out + ".md").read_text())


def render(meta, results, args) -> str:
    n = len(meta["schemas"]) * args.samples
    lines = [
        "# vLLM serving on CPU: tractable vs xgrammar vs guidance vs unconstrained",
        "",
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}; machine: {meta['machine']} (shared with other jobs); "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + "  ",
        f"Model: SmolLM2-135M-Instruct (float32, enforce_eager, max_model_len 512, "
        f"max_num_seqs {n}); {len(meta['schemas'])} BFCL simple_python function-call schemas "
        f"× {args.samples} samples = {n} requests per pass, temperature 0.7, seeded.  "
        "xgrammar/guidance with `disable_any_whitespace=True` (compact JSON, like tractable's "
        "canonical automaton); one engine for unconstrained/tractable/xgrammar, one for "
        "guidance (vLLM: one structured-output backend per engine).  Engine start: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in meta["engine_start_s"].items())
        + f"; whole run {meta['total_s'] / 60:.1f} min.",
        "",
        f"## Throughput at the loose budget (max_tokens = {args.loose})",
        "",
        "| method | warm tokens/s (median) | warm passes tokens/s | warm s/pass | cold pass "
        "tokens/s (compiles) | tokens per pass | valid (warm) |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for m, r in results.items():
        warm = r["warm"]
        lines.append(
            f"| {m} | {r['tok_s_median']:.1f} | "
            + ", ".join(f"{w['tok_s']:.1f}" for w in warm)
            + f" | {statistics.median(w['wall_s'] for w in warm):.1f}"
            + f" | {r['cold']['tok_s']:.1f} | {warm[0]['tokens']} | "
            f"{sum(w['valid'] for w in warm)}/{sum(w['n'] for w in warm)} |")
    lines += [
        "",
        "Tokens/s counts generated tokens, so a method that stops earlier (a closed JSON "
        "object + EOS) generates fewer tokens per pass, and its batch shrinks as rows finish "
        "(fewer tokens per engine step); compare the wall time per pass too.  Unconstrained "
        "SmolLM2 answers in prose around the JSON, so its outputs are never bare valid JSON.  "
        "The machine is shared with other jobs: passes of one method differ by up to ~20%.",
        "",
        "## Validity at tight budgets (max_tokens = tractable's shortest accepted output + slack)",
        "",
        "| method | " + " | ".join(f"slack {s}: valid (cut at max_tokens)" for s in args.slacks)
        + " |",
        "|---|" + "---:|" * len(args.slacks),
    ]
    for m, r in results.items():
        cells = []
        for s in args.slacks:
            t = r["tight"][str(s)]
            cells.append(f"{t['valid']}/{t['n']} ({t['finish_length']})")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "With a budget that cuts generation, greedy masking (xgrammar, guidance) leaves the "
        "JSON unfinished; GCD (tractable) allows only tokens from which the object can still "
        "be closed within the tokens left, so every output is valid when vLLM stops it at "
        "max_tokens.",
        "",
        "Shortest accepted outputs (tokens, tractable's automaton): "
        + ", ".join(f"{s['id']} {s['min_tokens']}" for s in meta["schemas"]) + ".",
        "",
        "Raw numbers (every pass, example outputs): `vllm_serving.json`.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
