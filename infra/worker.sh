#!/usr/bin/env bash
# Start a Prefect process worker for the `gpu` pool on this host (the GPU worker).
# Needs PREFECT_API_URL pointing at the Prefect server and IRFORGE_HOME at the checkout.
set -euo pipefail
: "${PREFECT_API_URL:?set PREFECT_API_URL to the Prefect server, e.g. http://prefect:4200/api}"
export IRFORGE_HOME=${IRFORGE_HOME:-$(cd "$(dirname "$0")/.." && pwd)}
export PREFECT_SERVER_ANALYTICS_ENABLED=false
cd "$IRFORGE_HOME"
bash scripts/setup.sh
exec .venv/bin/prefect worker start --pool gpu --limit "${IRFORGE_WORKER_LIMIT:-1}"
