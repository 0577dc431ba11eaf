#!/usr/bin/env bash
# THE test command (CI's full run, about 15 minutes): bash scripts/test.sh [pytest args...]
#
# Starts the services (scripts/services.sh), creates or refreshes .venv
# (scripts/_venv.sh), then runs, stopping at the first failure:
#   ruff check, ruff format --check, mypy,
#   pytest -n 2 -m "" "$@": every test, the slow ones and the end-to-end, fault and
#     browser suites included (plain `pytest` leaves those out: pyproject.toml's addopts),
#   the suites through PgBouncer (PostgreSQL only): Debian's PgBouncer in transaction mode
#     started in front of PostgreSQL (scripts/pgbouncer.sh, a config of its own in a
#     temporary directory, 127.0.0.1:${PGBOUNCER_PORT:-6432}), then the conformance
#     suite, tests/connector, tests/runtime and an end-to-end run (a prefork Celery worker
#     and the relay) through it, with YIELDSTAR_TEST_POOLER=transaction (1 to 2.5
#     minutes; YIELDSTAR_PGBOUNCER=0 leaves it out),
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
# The suites through a transaction pooler run behind Debian's PgBouncer (1.18 on Debian 12).
pgbouncer_wanted() {
  [ "${YIELDSTAR_PGBOUNCER:-1}" != "0" ] && case "${DATABASE_URL:-postgres://}" in
    postgres://* | postgresql://* | pgsql://*) true ;;
    *) false ;;
  esac
}
if pgbouncer_wanted && ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
  echo "==> installing pgbouncer (the suites through a transaction pooler)"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq pgbouncer >/dev/null
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

# The store protocol's conformance suite, the connector's and the runtime's, and an
# end-to-end run with a prefork worker and the relay, through PgBouncer in transaction
# mode: DATABASE_URL's database reached at 127.0.0.1:$PGBOUNCER_PORT, with the settings
# docs/operations/database.md gives for it (tests/settings.py, YIELDSTAR_TEST_POOLER). The
# tests that need one backend per client connection (they kill or watch it by its pid, or
# prepare statements) are skipped there (tests/connections.py, DIRECT).
through_pgbouncer() {
  local run_dir status=0
  run_dir="$(mktemp -d "${TMPDIR:-/tmp}/yieldstar-pgbouncer.XXXXXX")"
  local settings
  settings="$(
    python - <<'PY'
import os
import shlex

from demo_project.dburl import parse_database_url

url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/yieldstar"
entry = parse_database_url(url)
host, port = entry["HOST"] or "127.0.0.1", entry["PORT"] or "5432"
user = entry["USER"] or "postgres"
pooled = f"postgres://{user}@127.0.0.1:{os.environ.get('PGBOUNCER_PORT', '6432')}/{entry['NAME']}"
print(f"export PGBOUNCER_UPSTREAM_HOST={shlex.quote(host)}")
print(f"export PGBOUNCER_UPSTREAM_PORT={shlex.quote(port)}")
print(f"export PGBOUNCER_UPSTREAM_USER={shlex.quote(user)}")
print(f"pooled_url={shlex.quote(pooled)}")
PY
  )" || return 1
  eval "$settings"
  bash scripts/pgbouncer.sh start "$run_dir"
  DATABASE_URL="$pooled_url" YIELDSTAR_TEST_POOLER=transaction pytest "${workers[@]}" \
    -p no:cacheprovider -m "e2e or not (slow or faults or browser)" \
    tests/core/conformance tests/connector tests/runtime \
    "tests/e2e/test_pools.py::test_each_pool_runs_executions_and_stops_warmly_mid_step[redis-prefork]" ||
    status=$?
  bash scripts/pgbouncer.sh stop "$run_dir"
  if [ "$status" != 0 ]; then
    echo "==> PgBouncer's log: $run_dir/pgbouncer.log"
  else
    rm -rf "$run_dir"
  fi
  return "$status"
}
if pgbouncer_wanted; then
  step through_pgbouncer
fi
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
