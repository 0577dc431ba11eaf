#!/usr/bin/env bash
# The wheel of this checkout, built and checked (scripts/check_wheel.py), installed in a
# brand-new `django-admin startproject` project by the README's installation steps only,
# then the API and a workflow test in it, on SQLite with no broker: see
# scripts/check_startproject.py. Needs python3 (3.11+) with the dev extra (build, twine)
# and the package index pip uses.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec "${PYTHON:-python3}" scripts/check_startproject.py "$@"
