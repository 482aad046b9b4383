#!/usr/bin/env bash
# The main job on the embedded default: demo tasks, tiny model, local Docker, local Prefect and
# MLflow servers. Does all its set-up; rerunning it resumes (finished stages are skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --main
export DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90
SW=.venv/bin/swerl
PREFECT_PORT=${SWERL_PREFECT_PORT:-4200}
MLFLOW_PORT=${SWERL_MLFLOW_PORT:-5000}
# 1. a local Prefect server, a process worker and an MLflow server (left running for the UIs)
$SW up --prefect-port "$PREFECT_PORT" --mlflow-port "$MLFLOW_PORT"
export PREFECT_API_URL="http://127.0.0.1:$PREFECT_PORT/api" MLFLOW_TRACKING_URI="http://127.0.0.1:$MLFLOW_PORT"
# 2. the deployments: pipeline, build-images, evaluate (nightly, the champion)
.venv/bin/prefect --no-prompt deploy --all --prefect-file deployments/prefect.yaml >/dev/null
cat >&2 <<MSG
Prefect UI: http://127.0.0.1:$PREFECT_PORT  (Deployments; Runs -> the pipeline's flow run, its subflows and artifacts)
MLflow UI:  http://127.0.0.1:$MLFLOW_PORT  (experiment "swerl", run "pipeline demo" and its child runs; Models -> swerl-policy)
Run folder: runs/pipelines/demo (ledger.json, summary.json, eval/, rft/, iter-N/)
Stop the servers with: $SW down
MSG
# 3. the whole pipeline, run by the worker: images, validation, the tiny model's evaluation,
#    RFT, two DAPO iterations, each evaluated. The follower prints a line per stage saying
#    what it did, then the run's summary (why the numbers are what they are, where to look);
#    when the run fails, its last lines are the failed stage's error log and the reason.
$SW pipeline start --deployment pipeline/pipeline --interval 2
