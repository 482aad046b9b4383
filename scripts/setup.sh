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
  .venv/bin/pip install -q -e '.[dev]' 2>&1 | grep -v '^WARNING: Location' || true
  .venv/bin/python -c 'import swerl, swebench, docker' && touch "$stamp"
fi
export DO_NOT_TRACK=1
