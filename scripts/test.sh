#!/usr/bin/env bash
# The whole test suite, with all its set-up. Docker tests fail (never skip) when no daemon answers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the multi-host tests push images through Debian's registry (a user's pool needs none: save/load is the default)
if ! command -v docker-registry >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker-registry >/dev/null || {
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker-registry >/dev/null; }
fi
export DO_NOT_TRACK=1 SWERL_REQUIRE_DOCKER=1
# DeepSpeed compiles a small CPU op on first use (~1-2 min); keep it where later runs find it
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$HOME/.cache/swerl/torch_extensions}
# Three workers, each taking whole test files (a module's fixtures, its servers and namespaces, stay in
# one process; tests share the daemon and check only what they made). The Docker, flow and
# conformance tests wait on daemons, servers and containers much of the time, so on 2 cores a third
# worker still gains: 1474-1478 tests took 30.7 and 35.2 min of pytest on three, 38.4 on two (2026-11-29;
# runs vary by minutes here). The slowest files start first (tests/conftest.py's SLOW_FILES; xdist's own
# order, most tests first, left them to run alone at the end). SWERL_TEST_WORKERS=0 runs everything in this process.
exec .venv/bin/python -m pytest tests -n "${SWERL_TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder "$@"
