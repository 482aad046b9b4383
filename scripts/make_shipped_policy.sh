#!/usr/bin/env bash
# Make the policy the main job starts from, by swerl's own recipe, and ship it into the repository:
# the warm start of deployments/warm-start.yaml (seed 0), then `swerl model ship` of its checkpoint.
# ~35 min on 2 cores with nothing cached (images, validation, 600 demonstrations, 29 epochs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --main
export DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=90
.venv/bin/swerl pipeline run --params deployments/warm-start.yaml --name warm-start-s0
.venv/bin/swerl model ship --run runs/pipelines/warm-start-s0 --out swerl/models/resources/tiny-warm-s0 \
  --recipe deployments/warm-start.yaml --command "bash scripts/make_shipped_policy.sh"
