#!/usr/bin/env bash
# Install tractable and run the main job: unconstrained vs LCD vs GCD on SmolLM2-135M-Instruct.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh hf
exec .venv/bin/tractable demo "$@"
