#!/usr/bin/env bash
# THE test command: bash scripts/test.sh [pytest arguments...]
#
# Starts the services (scripts/services.sh), creates or refreshes .venv
# (scripts/_venv.sh), then runs, stopping at the first failure:
#   ruff check, ruff format --check, mypy, pytest "$@", mkdocs build --strict.
# Environment: DATABASE_URL (default PostgreSQL on 127.0.0.1), CELERY_BROKER_URL.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh

export NO_MKDOCS_2_WARNING=1 # mkdocs-material prints an end-of-life banner otherwise

bash scripts/services.sh
ensure_venv

step() {
  echo
  echo "==> $*"
  "$@"
}

step ruff check .
step ruff format --check .
step mypy yieldstar_django demo_project
step pytest "$@"
step mkdocs build --strict --quiet
echo
echo "==> all checks passed"
