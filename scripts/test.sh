#!/usr/bin/env bash
# THE test command (CI's full run, about 15 minutes): bash scripts/test.sh [pytest args...]
#
# Starts the services (scripts/services.sh), creates or refreshes .venv
# (scripts/_venv.sh), then runs, stopping at the first failure:
#   ruff check, ruff format --check, mypy,
#   pytest -n 2 -m "" "$@": every test, the slow ones and the end-to-end, fault and
#     browser suites included (plain `pytest` leaves those out: pyproject.toml's addopts),
#   mkdocs build --strict,
#   scripts/audit_dependencies.py (known vulnerabilities of the installed dependencies),
#   scripts/check_startproject.sh (the built wheel, checked, then installed by the
#   README's steps in a new project),
# then the Django 6.x leg of the support matrix: the same install on Python 3.13 in
# .venv-django6 runs pytest -m "not (e2e or faults or browser)" "$@": every suite but
# the end-to-end, fault and browser ones, which run on Django 5.2 only (about 3 minutes),
# then audits that environment's dependencies.
#
# The pytest arguments go to both legs: `bash scripts/test.sh -k relay` runs the tests
# whose names match on each. While iterating, leave out the new-project check and the
# Django 6.x leg: YIELDSTAR_STARTPROJECT=0 YIELDSTAR_MATRIX=0 bash scripts/test.sh -k relay
# (or run plain `pytest`, the fast loop: see CONTRIBUTING.md).
# Environment: DATABASE_URL (default PostgreSQL on 127.0.0.1), CELERY_BROKER_URL.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh

export NO_MKDOCS_2_WARNING=1 # mkdocs-material prints an end-of-life banner otherwise

bash scripts/services.sh
ensure_venv

# The browser tests (marker `browser`) drive Debian's Chromium through Playwright; never
# `playwright install`.
if ! command -v chromium >/dev/null; then
  echo "==> installing chromium (browser tests)"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi

# The failover test (tests/faults/test_failover.py) makes a pg_auto_failover formation:
# Debian's packages, never a build of its own.
if ! command -v pg_autoctl >/dev/null; then
  echo "==> installing pg_auto_failover (failover test)"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
    postgresql-15-auto-failover pg-auto-failover-cli >/dev/null
fi

step() {
  local started=$SECONDS
  echo
  echo "==> $*"
  "$@"
  echo "==> ($1: $((SECONDS - started)) s)"
}

# pytest runs on two workers (pytest-xdist; the machine's cores), the tests that run real
# processes one at a time on one of them (tests/conftest.py). YIELDSTAR_TEST_WORKERS=0
# runs everything in one process.
workers=(-n "${YIELDSTAR_TEST_WORKERS:-2}" --dist loadgroup)

step ruff check .
step ruff format --check .
step mypy yieldstar_django demo_project bench
step pytest "${workers[@]}" -m "" "$@"
step mkdocs build --strict --quiet
# Known vulnerabilities of the installed dependencies (accepted ones with a reason in
# .pip-audit-ignore): pip-audit's services when they answer, else the local copy of the
# PyPA advisory database that YIELDSTAR_ADVISORY_DB names (by default the mirror below,
# when this machine has it); says why and passes when neither can audit, unless
# YIELDSTAR_AUDIT_REQUIRED=1.
advisory_mirror=/work/.mirror/pypa+advisory-database/repo
if [ -z "${YIELDSTAR_ADVISORY_DB:-}" ] && [ -d "$advisory_mirror" ]; then
  export YIELDSTAR_ADVISORY_DB="$advisory_mirror"
fi
step python scripts/audit_dependencies.py
# The wheel built and checked, then a brand-new startproject project with the README's
# installation steps only (a fresh virtualenv: about a minute). YIELDSTAR_STARTPROJECT=0
# leaves it out while iterating.
if [ "${YIELDSTAR_STARTPROJECT:-1}" != "0" ]; then
  step bash scripts/check_startproject.sh
fi

if [ "${YIELDSTAR_MATRIX:-1}" != "0" ]; then
  # The first Python >= 3.12 that actually runs (a pyenv shim may exist and refuse).
  py313=""
  for candidate in python3.13 /root/.pyenv/versions/3.13*/bin/python3.13 python3.12; do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then
      py313="$candidate"
      break
    fi
  done
  if [ -n "$py313" ]; then
    echo
    echo "==> Django 6.x leg: $("$py313" --version) in .venv-django6"
    (
      YIELDSTAR_VENV="$PWD/.venv-django6" PYTHON="$py313" ensure_venv
      python -c 'import django; print("Django", django.get_version())'
      status=0
      pytest "${workers[@]}" -q -p no:cacheprovider -m "not (e2e or faults or browser)" "$@" ||
        status=$?
      if [ "$status" = 5 ]; then # e.g. `bash scripts/test.sh tests/e2e`: nothing for this leg
        echo "==> Django 6.x leg: no test selected"
      elif [ "$status" != 0 ]; then
        exit "$status"
      fi
      python scripts/audit_dependencies.py # this leg's installed set
    )
  else
    echo "==> Django 6.x leg skipped: no Python >= 3.12 runs on this machine (Django 6 needs it)"
  fi
fi
echo
echo "==> all checks passed"
