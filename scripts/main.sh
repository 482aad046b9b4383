#!/usr/bin/env bash
# The main job on the embedded default: demo tasks, tiny model, local Docker. Does all its set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${SWERL_OUT:-runs/demo}
SW=.venv/bin/swerl
$SW demo materialize --out "$OUT"
# 1. every task is valid: gold patch resolves (twice), empty patch does not
$SW tasks validate --tasks "$OUT/tasks.jsonl" --repos "$OUT/repos" --runs "${SWERL_RUNS:-2}" \
  --out "$OUT/validation.json" --log-dir "$OUT/logs" "$@"
# 2. the tiny default policy
[ -f "$OUT/tiny-model/config.json" ] || $SW model init-tiny --out "$OUT/tiny-model" --force
# 3. the scripted policy replays each gold patch through the agent's tools: the full path, all resolved
$SW eval --tasks "$OUT/tasks.jsonl" --repos "$OUT/repos" --model "$OUT/tiny-model" --engine scripted \
  --runs 1 --out "$OUT/eval-scripted" --log-dir "$OUT/logs" -j 2
# 4. the tiny model itself, 2 samples per task (random weights: Pass@1 is 0, the point is the path)
$SW eval --tasks "$OUT/tasks.jsonl" --repos "$OUT/repos" --model "$OUT/tiny-model" --engine hf \
  --runs 2 --max-turns 4 --max-new-tokens 64 --out "$OUT/eval-tiny" --log-dir "$OUT/logs" -j 4
echo "validation: $OUT/validation.json  evals: $OUT/eval-scripted/eval.json $OUT/eval-tiny/eval.json" >&2
