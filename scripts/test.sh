#!/usr/bin/env bash
# Set up (or reuse) the environment, then lint, type-check and run the test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

# The run report's browser tests (tests/common/test_report.py) open the page in headless Chromium:
# Debian's package, installed when missing and we may (root). Without it those tests skip
# and say why; in CI (CI=true) a missing browser is an error instead, so they always run there.
browser() { command -v chromium || command -v chromium-browser || command -v google-chrome; }
if ! browser >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "test: installing Debian's chromium for the report's browser tests" >&2
  log=$(mktemp)
  apt=(apt-get -o DPkg::Lock::Timeout=300 -qq)
  if ! { "${apt[@]}" update && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y chromium; } >"$log" 2>&1; then
    tail -n 20 "$log" >&2
  fi
  rm -f "$log"
fi
if ! browser >/dev/null; then
  if [ "${CI:-}" = true ]; then
    echo "test: no chromium and it could not be installed: the report's browser tests cannot run" >&2
    exit 1
  fi
  echo "test: no chromium; the report's browser tests will skip" >&2
fi

# Static checks, then the tests.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache   # the layers of pyproject.toml [tool.importlinter]
.venv/bin/pytest -q "$@"
