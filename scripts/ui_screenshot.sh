#!/usr/bin/env bash
# Headless screenshots of the local stack's web UIs: Prefect's deployments and flow-runs
# pages, MLflow's experiments page and, once a pipeline has run, its lineage: the newest
# evaluation run (its logged-model input), that logged model (datasets, source run, scores),
# the training run that made it and its registered version (Pass@1), as PNGs under
# runs/screenshots/ (their paths printed).
# Not part of CI. Needs a stack that answers (`swerl up`); installs Debian's chromium when missing.
#
#   bash scripts/ui_screenshot.sh [--home .swerl/services] [--out runs/screenshots]
#
# The URLs come from PREFECT_API_URL / MLFLOW_TRACKING_URI when set, else from `swerl status`
# (the settings `swerl up` recorded in --home).
set -euo pipefail
cd "$(dirname "$0")/.."

home=.swerl/services
out=runs/screenshots
while [[ $# -gt 0 ]]; do
  case "$1" in
    --home) home=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "unknown option $1 (use --home DIR, --out DIR)" >&2; exit 2 ;;
  esac
done
# The single-page UIs fetch their data after load and fade it in: give them (virtual) time
# to finish, and draw only once every compositor stage has run (else a half-faded page)
budget_ms=${SCREENSHOT_BUDGET_MS:-30000}

swerl=.venv/bin/swerl
[[ -x $swerl ]] || swerl=swerl
if [[ -z "${PREFECT_API_URL:-}" || -z "${MLFLOW_TRACKING_URI:-}" ]]; then
  # stdout of `swerl status` is the `export ...` line; it exits 1 when a service is down
  exports=$("$swerl" status --home "$home" 2>/dev/null || true)
  [[ $exports == export* ]] || { echo "could not read the stack's URLs from '$swerl status --home $home'" >&2; exit 1; }
  eval "$exports"
fi
prefect_ui=${PREFECT_API_URL%/api}
mlflow_ui=${MLFLOW_TRACKING_URI%/}

for url in "$PREFECT_API_URL/health" "$mlflow_ui/health"; do
  curl -fsS -o /dev/null --max-time 5 "$url" \
    || { echo "$url does not answer: start the stack with 'swerl up --home $home'" >&2; exit 1; }
done

browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $browser ]]; then
  sudo=; [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
  browser=$(command -v chromium)
fi

mkdir -p "$out"
shoot() {  # name url
  local file="$out/$1.png"
  rm -f "$file"  # so a failed shot is not mistaken for an old one
  # a throwaway profile: no first-run state, no lock clash with another chromium
  local profile; profile=$(mktemp -d)
  "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --run-all-compositor-stages-before-draw \
    --user-data-dir="$profile" --window-size=1600,1000 --virtual-time-budget="$budget_ms" \
    --screenshot="$file" "$2" >/dev/null 2>&1
  rm -rf "$profile"
  [[ -s $file ]] || { echo "chromium wrote no screenshot of $2" >&2; exit 1; }
  echo "$file"
}
shoot prefect-deployments "$prefect_ui/deployments"
shoot prefect-runs "$prefect_ui/runs"
shoot mlflow-experiments "$mlflow_ui/#/experiments"
# the lineage pages, found through MLflow's API: an evaluation run with a logged-model input
pages=$(MLFLOW_TRACKING_URI=$mlflow_ui .venv/bin/python - <<'PY'
from mlflow.tracking import MlflowClient

client = MlflowClient()
for exp in client.search_experiments():
    for run in client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"], max_results=200):
        inputs = client.get_run(run.info.run_id).inputs  # search_runs leaves model inputs out
        models = getattr(inputs, "model_inputs", None) or []
        if not models or not any(k.startswith("eval/") or "pass" in k for k in run.data.metrics):
            continue
        model = client.get_logged_model(models[0].model_id)
        print("mlflow-eval-run", f"#/experiments/{exp.experiment_id}/runs/{run.info.run_id}")
        print("mlflow-logged-model", f"#/experiments/{model.experiment_id}/models/{model.model_id}")
        if model.source_run_id:
            print("mlflow-training-run", f"#/experiments/{model.experiment_id}/runs/{model.source_run_id}")
        for mv in client.search_model_versions(f"tags.`swerl.model_id` = '{model.model_id}'"):
            print("mlflow-registered-version", f"#/models/{mv.name}/versions/{mv.version}")
            break
        raise SystemExit(0)
PY
) || pages=""
[[ -n $pages ]] || echo "no evaluation run with a logged model yet: run the pipeline (scripts/main.sh) for the lineage pages" >&2
while read -r name path; do
  [[ -n $name ]] && shoot "$name" "$mlflow_ui/$path"
done <<< "$pages"
