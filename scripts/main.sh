#!/usr/bin/env bash
# The main job on the embedded default: demo tasks, tiny model, local Docker, local Prefect and
# MLflow servers. Does all its set-up; rerunning it resumes (finished stages are skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90
SW=.venv/bin/swerl
PREFECT_PORT=${SWERL_PREFECT_PORT:-4200}
MLFLOW_PORT=${SWERL_MLFLOW_PORT:-5000}
# 1. a local Prefect server, a process worker and an MLflow server (left running for the UIs)
$SW up --prefect-port "$PREFECT_PORT" --mlflow-port "$MLFLOW_PORT"
export PREFECT_API_URL="http://127.0.0.1:$PREFECT_PORT/api" MLFLOW_TRACKING_URI="http://127.0.0.1:$MLFLOW_PORT"
# 2. the deployments: pipeline, build-images, evaluate (nightly, the champion)
.venv/bin/prefect --no-prompt deploy --all --prefect-file deployments/prefect.yaml >/dev/null
# 3. the whole pipeline, run by the worker: images, validation, the tiny model's evaluation,
#    RFT, two DAPO iterations, each evaluated
.venv/bin/prefect deployment run pipeline/pipeline --watch --watch-interval 10
summary=runs/pipelines/demo/summary.json
[ -f "$summary" ] && .venv/bin/python - "$summary" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for row in s["stages"]:
    p1, sem = row.get("pass_at_1"), row.get("pass_at_1_sem")
    print(f"{row['stage']:>8}  policy {row['policy']:<8}  Pass@1 {p1:.1%} ± {sem:.1%}  trained {row.get('trained', '-')}")
PY
cat >&2 <<MSG
Prefect UI: http://127.0.0.1:$PREFECT_PORT  (Deployments; Runs -> the pipeline's flow run, its subflows and artifacts)
MLflow UI:  http://127.0.0.1:$MLFLOW_PORT  (experiment "swerl", run "pipeline demo" and its child runs; Models -> swerl-policy)
Run folder: runs/pipelines/demo (ledger.json, summary.json, eval/, rft/, iter-N/)
Stop the servers with: $SW down
MSG
