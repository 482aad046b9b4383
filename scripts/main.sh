#!/usr/bin/env bash
# The main job on the embedded default: demo tasks, local Docker. Does all its set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${SWERL_OUT:-runs/demo}
.venv/bin/swerl demo materialize --out "$OUT"
.venv/bin/swerl tasks validate --tasks "$OUT/tasks.jsonl" --repos "$OUT/repos" --runs "${SWERL_RUNS:-2}" \
  --out "$OUT/validation.json" --log-dir "$OUT/logs" "$@"
echo "validation report: $OUT/validation.json   logs: $OUT/logs" >&2
