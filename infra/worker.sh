#!/usr/bin/env bash
# Start a Prefect process worker for the `gpu` pool on this host (the GPU worker); the
# README's "Scheduled runs" says how the server, the pool and the deployments come first.
#   PREFECT_API_URL     the Prefect server's API, e.g. http://prefect-host:4200/api (required)
#   IRFORGE_HOME        the checkout flow runs start in (default: the one holding this script)
#   IRFORGE_ARTIFACTS   where flow runs write (default data/artifacts; relative: to IRFORGE_HOME)
#   IRFORGE_WORKER_LIMIT  flow runs at once (default 1: one GPU)
set -euo pipefail
: "${PREFECT_API_URL:?set PREFECT_API_URL to the Prefect server, e.g. http://prefect-host:4200/api}"
export IRFORGE_HOME=${IRFORGE_HOME:-$(cd "$(dirname "$0")/.." && pwd)}
export PREFECT_SERVER_ANALYTICS_ENABLED=false
cd "$IRFORGE_HOME"
if [ ! -x .venv/bin/prefect ]; then
  echo "worker: no environment in $IRFORGE_HOME/.venv: run 'bash scripts/setup.sh' there once first" >&2
  exit 1
fi
exec .venv/bin/prefect worker start --pool gpu --limit "${IRFORGE_WORKER_LIMIT:-1}"
