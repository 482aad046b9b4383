#!/usr/bin/env bash
# The whole test suite, with all its set-up. Docker tests fail (never skip) when no daemon answers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DO_NOT_TRACK=1 SWERL_REQUIRE_DOCKER=1
# DeepSpeed compiles a small CPU op on first use (~1-2 min); keep it where later runs find it
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$HOME/.cache/swerl/torch_extensions}
exec .venv/bin/python -m pytest tests "$@"
