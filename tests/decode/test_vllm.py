"""The vLLM adapter (:mod:`tractable.decode.vllm_processor`).

Part 1 (no vLLM needed, fast): the batch bookkeeping of the processor, driven like vLLM's
persistent batch — requests added into holes and at the end, removed, condensed by one-way
moves, swapped — on the GPT-2 vocabulary with random logits and tokens sampled from the masked
logits.  At every step the mask of every constrained row must equal the mask replayed from
scratch on that request's own output (``A.start`` + ``advance`` + ``allowed_packed``), the
unmasked entries must keep their values, and unconstrained rows must be bitwise untouched;
every finished output must be accepted (``re.fullmatch`` on its text for the regexes).

Part 2 (``pytest.importorskip("vllm")``, slow): the real thing on SmolLM2 with vLLM's CPU
build, the processor loaded as the installed entry-point plugin — a mixed batch of constrained
(3 JSON Schemas, 2 regexes; greedy and sampled) and
unconstrained requests, added at different engine steps, two aborted mid-run, rows finishing at
different times (``max_num_seqs=4`` also queues and condenses), every constrained output valid
at tight ``max_tokens``, unconstrained rows identical to a run with the processor idle, a
constraint that fails to compile ending only its own request, malformed ``extra_args`` rejected
at admission, pydantic out.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from tractable.decode import vllm_processor as tv
from tractable.fsa.errors import InvalidArgumentError
from tractable.fsa.regex import compile_regex

DATE = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
PERSON = r'\{"name": "[a-z ]{1,20}", "age": [0-9]{1,3}\}'
PARENS = 'start: "(" start ")" | "x"'
SMALL_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
                                                      "maximum": 99}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}


class _Params:
    """The two fields of ``vllm.SamplingParams`` the processor reads."""

    def __init__(self, spec: dict | None, max_tokens: int | None):
        self.extra_args = {tv.EXTRA_ARGS_KEY: spec} if spec is not None else None
        self.max_tokens = max_tokens
        self.stop = None
        self.structured_outputs = None


def _ids(vocab, text: str) -> list[int]:
    """One token per character (the lowest id whose bytes are that character)."""
    index: dict[bytes, int] = {}
    for i in range(vocab.size - 1, -1, -1):
        b = vocab.token_bytes[i]
        if b is not None and len(b) == 1:
            index[b] = i
    return [index[c.encode()] for c in text]


def _masks(vocab, max_model_len=None):
    m = tv._BatchMasks()
    m._init_state(lambda: vocab, max_model_len)
    return m


def _replayed_mask(A, out, budget, mode="gcd"):
    """bool [V]: the mask of a request with output ``out``, from scratch; EOS only once an EOS
    was generated or the budget is spent."""
    V = A.vocab_size
    eos_only = np.zeros(V, dtype=bool)
    eos_only[list(A.eos_token_ids)] = True
    if any(t in A.eos_token_ids for t in out) or budget - len(out) <= 0:
        return eos_only
    st = A.start(1)
    for t in out:
        st = A.advance(st, torch.tensor([t]))
    return A.allowed(st, budget - len(out), mode)[0].numpy()


# ----------------------------------------------------------------------------- part 1


@pytest.mark.filterwarnings("ignore:grammar approximated from below")
def test_batch_bookkeeping_matches_replay(gpt2_vocab):
    rng = np.random.default_rng(0)
    specs = [
        {"regex": DATE},
        {"regex": PERSON},
        {"json_schema": SMALL_SCHEMA},
        {"regex": DATE, "mode": "lcd"},
        {"grammar": PARENS, "options": {"approximation": "under", "max_depth": 3}},
        None,  # unconstrained
        None,
    ]
    autos = [tv.compile_constraint(s, gpt2_vocab) if s else None for s in specs]
    V = gpt2_vocab.size
    proc = _masks(gpt2_vocab)
    slots: list[dict | None] = []  # persistent batch: slot -> request
    finished: list[dict] = []
    n_added = n_moves = n_swaps = n_removed = 0
    for step in range(60):
        removed, added, moved = [], [], []
        # vLLM removes finished requests (and the test aborts some at random) ...
        for i, r in enumerate(slots):
            if r is None:
                continue
            done = r["eos"] or len(r["out"]) >= r["budget"]
            if done or rng.random() < 0.03:
                if done:
                    finished.append(r)
                slots[i] = None
                removed.append(i)
                n_removed += 1
        # ... adds new ones into holes first, then at the end ...
        for _ in range(int(rng.integers(0, 3)) if step < 45 else 0):
            k = int(rng.integers(len(specs)))
            A = autos[k]
            lo = A.min_tokens_to_accept() if A is not None else 1
            r = {"k": k, "out": [], "budget": lo + int(rng.integers(0, 6)), "eos": False}
            i = slots.index(None) if None in slots else len(slots)
            if i == len(slots):
                slots.append(None)
            slots[i] = r
            added.append((i, _Params(specs[k], r["budget"]), [1, 2, 3], r["out"]))
            n_added += 1
        # ... condenses holes with one-way moves from the end, and sometimes swaps
        while None in slots:
            while slots and slots[-1] is None:
                slots.pop()
            if None not in slots:
                break
            hole = slots.index(None)
            moved.append((len(slots) - 1, hole, False))
            slots[hole] = slots.pop()
            n_moves += 1
        if len(slots) >= 2 and rng.random() < 0.3:
            a, b = (int(x) for x in rng.choice(len(slots), 2, replace=False))
            moved.append((a, b, True))
            slots[a], slots[b] = slots[b], slots[a]
            n_swaps += 1
        if removed or added or moved:
            proc.update_batch(removed, added, moved)
        B = len(slots)
        if B == 0:
            continue
        logits = torch.from_numpy(rng.standard_normal((B, V)).astype(np.float32))
        before = logits.clone()
        out = proc.apply_masks(logits)
        assert out is logits
        for i, r in enumerate(slots):
            A = autos[r["k"]]
            if A is None:
                assert torch.equal(out[i], before[i]), "an unconstrained row was modified"
                tok = int(torch.argmax(out[i]))
            else:
                mode = specs[r["k"]].get("mode", "gcd")
                want = _replayed_mask(A, r["out"], r["budget"], mode)
                got = torch.isfinite(out[i]).numpy()
                assert np.array_equal(got, want), (step, i, r)
                assert torch.equal(out[i][got], before[i][got])
                g = torch.from_numpy(rng.gumbel(size=V).astype(np.float32))
                tok = int(torch.argmax(out[i] + g))
            r["out"].append(tok)
            if A is not None and tok in A.eos_token_ids:
                r["eos"] = True
    assert n_added > 40 and n_removed > 20 and n_moves > 5 and n_swaps > 5
    ends = [r for r in finished
            if autos[r["k"]] is not None and specs[r["k"]].get("mode") != "lcd"]
    assert len(ends) > 10
    assert {next(iter(specs[r["k"]])) for r in ends} == {"regex", "json_schema", "grammar"}
    for r in ends:
        A = autos[r["k"]]
        body = [t for t in r["out"] if t not in A.eos_token_ids]
        assert A.accepts(body)
        spec = specs[r["k"]]
        text = gpt2_vocab.decode_bytes(body).decode()
        if "regex" in spec:
            assert re.fullmatch(spec["regex"], text), text
        elif "grammar" in spec:
            d = text.count("(")
            assert d <= 3 and text == "(" * d + "x" + ")" * d, text
        else:
            v = json.loads(text)
            assert set(v) == {"ok", "n"} and 0 <= v["n"] <= 99
    assert proc.errors == []


def test_failures_end_the_request_with_eos(gpt2_vocab):
    proc = _masks(gpt2_vocab, max_model_len=64)
    outs = [[], [], [], []]
    added = [
        (0, _Params({"json_schema": {"type": "no-such-type"}}, 10), [1], outs[0]),  # compile
        (1, _Params({"regex": DATE}, 3), [1], outs[1]),  # budget below the minimum (5)
        (2, _Params({"regex": DATE}, 20), [1], outs[2]),  # will take a token not allowed
        (3, _Params({"regex": DATE}, None), list(range(58)), outs[3]),  # capped: 64-58=6
    ]
    proc.update_batch([], added, [])
    assert [e[0] for e in proc.errors] == ["json_schema@10", "regex@3"]
    assert "InvalidSchemaError" in proc.errors[0][1]
    assert "UnsatisfiableBudgetError" in proc.errors[1][1]
    assert proc.rows[3].budget == 6
    V = gpt2_vocab.size
    eos = gpt2_vocab.eos_token_ids[0]
    logits = torch.zeros(4, V)
    proc.apply_masks(logits)
    for i in (0, 1):
        assert torch.isfinite(logits[i]).nonzero().flatten().tolist() == [eos]
    outs[2].extend(_ids(gpt2_vocab, "x"))  # not a digit: the mask did not allow it
    logits = torch.zeros(4, V)
    outs[3].extend(_ids(gpt2_vocab, "2024-0"))  # the budget is spent
    proc.apply_masks(logits)
    assert "was not allowed" in proc.errors[-1][1]
    assert torch.isfinite(logits[2]).nonzero().flatten().tolist() == [eos]
    # the budget-capped row read "2024-0" (one char at a time: not accepted) -> EOS, counted
    assert torch.isfinite(logits[3]).nonzero().flatten().tolist() == [eos]
    assert proc.budget_ended_rows == 1


def test_all_minus_inf_row_gets_its_allowed_tokens(gpt2_vocab):
    """min_tokens in vLLM sets EOS to -inf; where EOS is the only allowed token the row would
    have no finite logit: the allowed tokens come back at 0."""
    proc = _masks(gpt2_vocab)
    out: list[int] = []
    proc.update_batch([], [(0, _Params({"regex": "a"}, 4), None, out)], [])
    out.extend(_ids(gpt2_vocab, "a"))
    logits = torch.zeros(1, gpt2_vocab.size)
    eos = gpt2_vocab.eos_token_ids[0]
    logits[0, eos] = float("-inf")
    proc.apply_masks(logits)
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [eos]
    assert float(logits[0, eos]) == 0.0


def test_compile_cache_is_shared(gpt2_vocab, llama3_vocab):
    a = tv.compile_constraint({"json_schema": SMALL_SCHEMA}, gpt2_vocab)
    b = tv.compile_constraint({"json_schema": json.dumps(SMALL_SCHEMA), "mode": "lcd"},
                              gpt2_vocab)
    c = tv.compile_constraint({"json_schema": SMALL_SCHEMA}, llama3_vocab)
    assert a is b and a is not c and c.vocab_size == llama3_vocab.size
    d = tv.compile_constraint({"json_schema": SMALL_SCHEMA, "options": {"canonical": False}},
                              gpt2_vocab)
    assert d is not a


def test_saved_automaton_constraint(gpt2_vocab, tmp_path):
    A = compile_regex(DATE, gpt2_vocab)
    p = tmp_path / "date.safetensors"
    A.save(p)
    B = tv.compile_constraint({"automaton": str(p)}, gpt2_vocab)
    assert B.num_states == A.num_states
    ids = _ids(gpt2_vocab, "2024-02-29")
    assert B.accepts(ids) and not B.accepts(ids[:-1])


def test_extra_args_and_validation():
    assert tv.extra_args(regex="a+") == {"tractable": {"regex": "a+", "mode": "gcd"}}
    assert tv.extra_args(json_schema=True, mode="lcd", strict=True) == {
        "tractable": {"json_schema": True, "mode": "lcd", "options": {"strict": True}}}
    bad = [
        ({}, "exactly one"),
        ({"regex": "a", "grammar": "b"}, "exactly one"),
        ({"regex": "("}, "not a valid regex"),
        ({"regex": "a", "mode": "beam"}, "mode"),
        ({"regex": "a", "budget": 3}, "unknown keys"),
        ({"json_schema": "{not json"}, "not JSON text"),
        ({"json_schema": 3}, "JSON Schema"),
        ({"grammar": ""}, "non-empty"),
        ({"regex": "a", "options": [1]}, "options"),
        ("a+", "must be a dict"),
    ]
    for spec, msg in bad:
        with pytest.raises(InvalidArgumentError, match=msg):
            tv.validate_params(_Params(spec, 8))
    p = _Params({"regex": "a"}, 8)
    p.stop = ["\n"]
    with pytest.raises(InvalidArgumentError, match="stop strings"):
        tv.validate_params(p)
    tv.validate_params(_Params(None, 8))  # unconstrained: nothing to check
    # the server form: vllm_xargs take no dicts, so the spec travels as JSON text
    xa = tv.server_xargs(json_schema=SMALL_SCHEMA, strict=True)
    assert isinstance(xa["tractable"], str)
    assert tv._spec_of(_Params(xa["tractable"], 8)) == {
        "json_schema": SMALL_SCHEMA, "mode": "gcd", "options": {"strict": True}}
    tv.validate_params(_Params(xa["tractable"], 8))
    with pytest.raises(InvalidArgumentError, match="exactly one"):
        tv.extra_args()


def test_pydantic_schema_is_closed():
    pydantic = pytest.importorskip("pydantic")

    class Pet(pydantic.BaseModel):
        name: str
        legs: int

    spec = tv.extra_args(json_schema=Pet)["tractable"]["json_schema"]
    assert spec["additionalProperties"] is False and set(spec["properties"]) == {"name", "legs"}
    assert tv.parse_json('{"name":"rex","legs":4}', Pet) == Pet(name="rex", legs=4)
    assert tv.parse_json("[1]") == [1]


def test_module_imports_without_vllm():
    code = (
        "import sys; sys.modules['vllm'] = None\n"
        "import tractable.decode.vllm_processor as m\n"
        "print(m.extra_args(regex='x')['tractable']['regex'])\n"
        "try:\n    m.TractableLogitsProcessor\nexcept ImportError:\n    print('lazy')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["x", "lazy"]


def _v2_processor(vocab, max_num_reqs: int, max_model_len: int, listed=()):
    """A TractableLogitsProcessor built as vLLM's model runner V2 builds it, over a stub of the
    runner's request state (the fields the interface documents) and ``vocab``."""
    from types import SimpleNamespace

    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcRequestState

    rs = LogitsProcRequestState(
        device=torch.device("cpu"), max_num_reqs=max_num_reqs, vocab_size=vocab.size,
        all_token_ids=SimpleNamespace(gpu=torch.zeros(max_num_reqs, max_model_len,
                                                      dtype=torch.int32)),
        prompt_len=SimpleNamespace(np=np.zeros(max_num_reqs, dtype=np.int32)),
        prefill_len=SimpleNamespace(np=np.zeros(max_num_reqs, dtype=np.int32)),
        total_len=SimpleNamespace(gpu=torch.zeros(max_num_reqs, dtype=torch.int32)))
    mc = SimpleNamespace(max_model_len=max_model_len, logits_processors=list(listed),
                         tokenizer="unused", get_vocab_size=lambda: vocab.size)
    config = SimpleNamespace(model_config=mc, speculative_config=None)
    procs = [tv.TractableLogitsProcessor(config, rs), tv.TractableLogitsPlugin(config, rs)]
    for p in procs:
        p._vocab = vocab  # (the engine builds it from the model's tokenizer)
    return procs, rs


@pytest.mark.filterwarnings("ignore:grammar approximated from below")
def test_model_runner_v2_interface_matches_replay(gpt2_vocab):
    """vLLM 0.32's model runner V2 (CUDA builds may default to it): no batch updates — a
    request enters a recycled slot through ``add_request``, rows are reordered every step,
    ``apply(logits, ctx)`` reads each row's slot and sequence length from ``ctx`` and the
    committed tokens from the runner's buffers.  Simulated here (no CUDA machine): requests of
    every kind in recycled slots, shuffled rows, requests preempted and resumed in another slot
    (their earlier outputs read back from ``all_token_ids``); every constrained mask equals the
    replayed one, unconstrained rows are untouched, finished outputs are accepted."""
    vllm = pytest.importorskip("vllm")
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2
    from vllm.v1.worker.gpu.sample.logits_processor.loader import _load_v2_logitsprocs

    assert vllm is not None
    cls = tv.TractableLogitsProcessor
    assert issubclass(cls, V2) and issubclass(tv.TractableLogitsPlugin, V2)
    loaded = _load_v2_logitsprocs([f"{cls.__module__}:{cls.__qualname__}"])
    assert loaded[-1] is cls and tv.TractableLogitsPlugin in loaded  # FQCN and entry point
    rng = np.random.default_rng(1)
    specs = [{"regex": DATE}, {"regex": PERSON}, {"json_schema": SMALL_SCHEMA},
             {"regex": DATE, "mode": "lcd"}, None, None]
    autos = [tv.compile_constraint(sp, gpt2_vocab) if sp else None for sp in specs]
    V, S, L = gpt2_vocab.size, 6, 256
    (proc, plugin), rs = _v2_processor(gpt2_vocab, S, L)
    assert not proc.idle and not plugin.idle
    slots: list[dict | None] = [None] * S
    finished, n_resumed = [], 0

    def admit(r, slot):
        slots[slot] = r
        plen = len(r["prompt"])
        rs.prompt_len.np[slot] = plen
        seq = r["prompt"] + r["out"]  # a resumed request refills its outputs too
        rs.all_token_ids.gpu[slot, :len(seq)] = torch.tensor(seq, dtype=torch.int32)
        sp = _Params(specs[r["k"]], r["budget"])
        assert proc.add_request(slot, sp) == (specs[r["k"]] is not None)

    for step in range(80):
        for i, r in enumerate(slots):
            if r is not None and (r["eos"] or len(r["out"]) >= r["budget"]):
                finished.append(r)
                slots[i] = None
        for i, r in enumerate(slots):  # preemption: out, and back later in another slot
            if r is not None and r["out"] and rng.random() < 0.04:
                slots[i] = None
                free = [j for j in range(S) if slots[j] is None and j != i]
                if free:
                    admit(r, free[int(rng.integers(len(free)))])
                    n_resumed += 1
        for _ in range(int(rng.integers(0, 3)) if step < 60 else 0):
            if None not in slots:
                break
            k = int(rng.integers(len(specs)))
            A = autos[k]
            lo = A.min_tokens_to_accept() if A is not None else 1
            r = {"k": k, "out": [], "eos": False, "budget": lo + int(rng.integers(0, 5)),
                 "prompt": rng.integers(0, 5000, int(rng.integers(2, 8))).tolist()}
            admit(r, [j for j in range(S) if slots[j] is None][0])
        batch = [j for j in range(S) if slots[j] is not None]
        if not batch:
            continue
        rng.shuffle(batch)
        seq_lens = np.array([len(slots[j]["prompt"]) + len(slots[j]["out"]) for j in batch])
        last = [(slots[j]["prompt"] + slots[j]["out"])[-1] for j in batch]
        idx = torch.tensor(batch)
        ctx = LogitsContext(expanded_idx_mapping=idx, idx_mapping=idx,
                            idx_mapping_np=np.array(batch), expanded_local_pos=idx * 0,
                            input_ids=torch.tensor(last), pos=torch.from_numpy(seq_lens - 1),
                            seq_lens_upper_bound_np=seq_lens)
        logits = torch.from_numpy(rng.standard_normal((len(batch), V)).astype(np.float32))
        before = logits.clone()
        assert plugin.apply(logits, ctx) is logits  # idle-free but nothing added to it
        assert torch.equal(logits, before)
        out = proc.apply(logits, ctx)
        for row, j in enumerate(batch):
            r = slots[j]
            A = autos[r["k"]]
            if A is None:
                assert torch.equal(out[row], before[row])
                tok = int(torch.argmax(out[row]))
            else:
                want = _replayed_mask(A, r["out"], r["budget"], specs[r["k"]].get("mode", "gcd"))
                got = torch.isfinite(out[row]).numpy()
                assert np.array_equal(got, want), (step, j, r)
                g = torch.from_numpy(rng.gumbel(size=V).astype(np.float32))
                tok = int(torch.argmax(out[row] + g))
            rs.all_token_ids.gpu[j, seq_lens[row]] = tok
            r["out"].append(tok)
            r["eos"] = A is not None and tok in A.eos_token_ids
    assert n_resumed >= 3
    ends = [r for r in finished if autos[r["k"]] is not None and "mode" not in specs[r["k"]]]
    assert len(ends) > 10
    for r in ends:
        A = autos[r["k"]]
        assert A.accepts([t for t in r["out"] if t not in A.eos_token_ids])
    assert proc.errors == []


def test_plugin_is_idle_where_the_engine_lists_the_processor(gpt2_vocab):
    """The entry-point plugin (loaded into every engine) stays idle when the engine also
    lists TractableLogitsProcessor (by class or FQCN), so a row is never masked twice."""
    pytest.importorskip("vllm")
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="vllm.logits_processors") if e.name == "tractable"]
    assert len(eps) == 1 and eps[0].load() is tv.TractableLogitsPlugin
    cls = tv.TractableLogitsProcessor
    for listed, idle in (((), False), ((cls,), True),
                         ((f"{cls.__module__}:{cls.__qualname__}",), True), (("x:Y",), False)):
        (proc, plugin), _ = _v2_processor(gpt2_vocab, 2, 64, listed)
        assert not proc.idle and plugin.idle == idle, listed
        assert plugin.add_request(0, _Params({"regex": DATE}, 12)) == (not idle)


# ----------------------------------------------------------------------------- part 2 (vLLM)

PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 16},
                   "age": {"type": "integer", "minimum": 0, "maximum": 130}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
COLORS_SCHEMA = {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                 "minItems": 1, "maxItems": 4}
EVENT_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "date": {"type": "string", "format": "date"},
                   "online": {"type": "boolean"}},
    "required": ["title", "date", "online"],
    "additionalProperties": False,
}
EMAIL = r"[a-z]{1,12}@[a-z]{1,10}\.(com|org)"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    pytest.importorskip("vllm")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tractable.models import ModelNotInstalledError, load_smollm2, smollm2_cache_dir

    folder = smollm2_cache_dir()
    if not (folder / "model.safetensors").is_file():
        try:
            load_smollm2()  # converts the packaged GGUF once (the folder vLLM reads)
        except (ModelNotInstalledError, ImportError) as e:  # pragma: no cover - env dependent
            pytest.skip(f"SmolLM2 unavailable: {e}")
    from transformers import AutoTokenizer
    from vllm import LLM

    folder = str(folder)
    # vLLM inspects the model in `python -m vllm.model_executor.models.registry`, whose sys.path
    # starts with the working directory: from the checkout root, the source folder kernels/
    # would be imported as Hugging Face's `kernels` (transformers probes for it) and the
    # inspection fails.  Start the engine from an empty folder (workers inherit it).
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("vllm_cwd"))
    try:
        # no logits_processors=: the entry-point plugin (installed with tractable) masks
        llm = LLM(model=folder, dtype="float32", max_model_len=512, enforce_eager=True,
                  max_num_seqs=4, seed=0)
    finally:
        os.chdir(cwd)
    tok = AutoTokenizer.from_pretrained(folder)
    mc = llm.llm_engine.model_config
    vocab = tv.vocabulary_for_model(folder, mc.get_vocab_size(),
                                    generation_config=mc.try_get_generation_config())
    try:
        yield llm, tok, vocab
    finally:
        llm.llm_engine.engine_core.shutdown()


def _prompt(tok, text):
    chat = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                   add_generation_prompt=True)
    return {"prompt_token_ids": tok.encode(chat, add_special_tokens=False)}


def _mixed_requests(vocab):
    """(name, prompt, spec or None, max_tokens, sampling kwargs, add at step, abort at step)."""
    def tight(spec, extra):
        return tv.compile_constraint(spec, vocab).min_tokens_to_accept() + extra

    P, C, E = {"json_schema": PERSON_SCHEMA}, {"json_schema": COLORS_SCHEMA}, \
        {"json_schema": EVENT_SCHEMA}
    D, M = {"regex": DATE}, {"regex": EMAIL}
    g = {"temperature": 0.0}
    s = {"temperature": 1.0, "seed": 7}
    return [
        ("person", "Describe a famous scientist as JSON with many details.", P, tight(P, 2), g,
         0, None),
        ("u-story", "Tell me a story about a cat.", None, 24, g, 0, None),
        ("date", "When did the first moon landing happen? Explain at length.", D, tight(D, 0), g,
         0, None),
        ("u-list", "List five fruits.", None, 12, g, 0, None),
        ("colors", "Which colors do you like, and why? Be verbose.", C, tight(C, 3), s, 2, None),
        ("u-abort", "Write a poem about the sea.", None, 40, g, 2, 5),
        ("event", "Describe a conference as JSON.", E, tight(E, 4), g, 3, None),
        ("c-abort", "Describe a dog as JSON.", P, 40, g, 3, 6),
        ("email", "What is the email of the support team?", M, tight(M, 1), s, 5, None),
        ("u-math", "What is 2 + 2?", None, 8, g, 5, None),
        ("person2", "Invent a character for a novel; answer in JSON.", P, tight(P, 6), s, 8, None),
        ("u-late", "Name a planet.", None, 16, g, 9, None),
    ]


@pytest.fixture(scope="module")
def mixed_run(engine):
    from vllm import SamplingParams

    llm, tok, vocab = engine
    eng = llm.llm_engine
    reqs = _mixed_requests(vocab)
    outputs, steps = {}, 0
    while len(outputs) < len(reqs) - 2 or eng.has_unfinished_requests():
        for name, text, spec, mt, kw, at, abort in reqs:
            if at == steps:
                xa = {tv.EXTRA_ARGS_KEY: spec} if spec else None
                eng.add_request(name, _prompt(tok, text),
                                SamplingParams(max_tokens=mt, extra_args=xa, **kw))
            if abort == steps:
                eng.abort_request([name])
        for o in eng.step():
            if o.finished:
                outputs[o.request_id] = o
        steps += 1
        assert steps < 400
    # the reference: the unconstrained prompts alone (the processor loaded but idle)
    alone = {}
    for name, text, spec, mt, kw, _at, abort in reqs:
        if spec is None and abort is None:
            o = llm.generate([_prompt(tok, text)], SamplingParams(max_tokens=mt, **kw),
                             use_tqdm=False)[0]
            alone[name] = list(o.outputs[0].token_ids)
    return reqs, outputs, alone


@pytest.mark.slow
def test_vllm_constrained_outputs_are_valid_at_tight_budgets(engine, mixed_run):
    import jsonschema

    _, _, vocab = engine
    reqs, outputs, _ = mixed_run
    aborted = {name for name, *_r, abort in reqs if abort is not None}
    assert aborted.isdisjoint(outputs) or all(
        outputs[n].outputs[0].finish_reason == "abort" for n in aborted & set(outputs))
    n_checked = 0
    for name, _text, spec, mt, _kw, _at, abort in reqs:
        if spec is None or abort is not None:
            continue
        o = outputs[name].outputs[0]
        ids = list(o.token_ids)
        assert len(ids) <= mt
        A = tv.compile_constraint(spec, vocab)
        body = [t for t in ids if t not in A.eos_token_ids]
        text = vocab.decode_bytes(body).decode()
        assert A.accepts(body), (name, text, o.finish_reason)
        if "json_schema" in spec:
            jsonschema.validate(json.loads(text), spec["json_schema"])
        else:
            assert re.fullmatch(spec["regex"], text), (name, text)
        n_checked += 1
    assert n_checked == 6


@pytest.mark.slow
def test_vllm_unconstrained_rows_untouched(mixed_run):
    reqs, outputs, alone = mixed_run
    assert len(alone) == 4
    for name, ids in alone.items():
        assert list(outputs[name].outputs[0].token_ids) == ids, name


@pytest.mark.slow
def test_vllm_bad_constraints(engine):
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError

    llm, tok, _ = engine
    with pytest.raises((ValueError, VLLMValidationError), match="exactly one"):
        llm.generate([_prompt(tok, "hi")],
                     SamplingParams(max_tokens=4, extra_args={"tractable": {"mode": "gcd"}}),
                     use_tqdm=False)
    # a schema that does not compile ends its own request (EOS at once); the other one runs
    bad = SamplingParams(max_tokens=8, extra_args={"tractable": {"json_schema": {"type": 5}}})
    ok = tv.sampling_params(regex=DATE, max_tokens=12, temperature=0.0)
    o_bad, o_ok = llm.generate([_prompt(tok, "A date?"), _prompt(tok, "A date?")], [bad, ok],
                               use_tqdm=False)
    assert o_bad.outputs[0].text == "" and len(o_bad.outputs[0].token_ids) == 1
    assert re.fullmatch(DATE, o_ok.outputs[0].text)


@pytest.mark.slow
def test_vllm_generate_json_pydantic(engine):
    pydantic = pytest.importorskip("pydantic")
    llm, _, _ = engine

    class City(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=20)
        population: int = pydantic.Field(ge=0)

    cities = tv.generate_json(llm, ["Describe Paris as JSON.", "Describe Rome as JSON."], City,
                              max_tokens=24, chat=True, temperature=0.0)
    assert len(cities) == 2 and all(isinstance(c, City) for c in cities)
