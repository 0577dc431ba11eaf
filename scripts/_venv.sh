# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/demo.sh: ensure_venv creates .venv with python3
# if missing and (re)installs the project with `pip install -e '.[dev]'` whenever
# pyproject.toml or the Python version changed since the last successful install, first
# upgrading the venv's own pip and setuptools (those `python -m venv` bundles have known
# vulnerabilities, which scripts/audit_dependencies.py reports).

ensure_venv() {
  local root venv python stamp want
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  venv="${YIELDSTAR_VENV:-$root/.venv}"
  python="${PYTHON:-python3}"
  stamp="$venv/.yieldstar-install-stamp"

  if [ ! -x "$venv/bin/python" ]; then
    echo "==> creating $venv with $("$python" --version 2>&1)"
    "$python" -m venv "$venv"
    rm -f "$stamp"
  fi

  want="$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1) $("$venv/bin/python" -c 'import sys; print(sys.version)')"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "==> installing yieldstar-django[dev] into $venv"
    (
      cd "$root"
      tools=(pip)
      if "$venv/bin/python" -m pip show -q setuptools >/dev/null 2>&1; then
        tools+=(setuptools) # bundled before Python 3.12
      fi
      "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q \
        --upgrade "${tools[@]}"
      "$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q \
        -e '.[dev]'
    )
    printf '%s' "$want" >"$stamp"
  fi

  export VIRTUAL_ENV="$venv"
  export PATH="$venv/bin:$PATH"
}
