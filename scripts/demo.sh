#!/usr/bin/env bash
# THE demo command: bash scripts/demo.sh
#
# Creates or refreshes .venv (scripts/_venv.sh) and runs `python -m demo_project.run_demo`.
# The demo uses SQLite and a file-system Celery broker under var/ unless DATABASE_URL or
# CELERY_BROKER_URL say otherwise, so it needs no running service.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh

ensure_venv
exec python -m demo_project.run_demo "$@"
