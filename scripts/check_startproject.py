"""A first run as a new user: README installation steps in a brand-new Django project.

Builds this checkout's sdist and wheel and checks them (``scripts/check_wheel.py``), then
creates a virtualenv and a ``django-admin startproject`` project in a temporary directory,
applies the code blocks of the README's "Installation in a Django project" section and
nothing else (``bash`` blocks are run, the ``/path/to/yieldstar-django`` placeholder being
the built wheel, so the package is installed as a user installs a release; ``python``
blocks whose first line names a file, ``# settings.py``, are appended to that file of the
project package, ``yourproject`` being its name), then, on SQLite and with no reachable
broker:

- the package is imported from the virtualenv (the wheel), not from the checkout;
- the OpenAPI schema view and the API root answer 200 to a logged-in superuser
  (``orders/test_api.py``, written by this script);
- the docs' testing example (``tests/testing/example``, copied into a new app) passes under
  ``manage.py test``: a take woken by a store update, and a one-day ``step.sleep``, which
  must take under a second of wall time.

Run it through ``scripts/check_startproject.sh``. Exits non-zero on the first failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from check_wheel import build_and_check

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER_CHECKOUT = "/path/to/yieldstar-django"
PLACEHOLDER_PROJECT = "yourproject"
PROJECT = "mysite"
#: A broker URL where nothing listens: any publish would fail loudly.
NO_BROKER = "redis://127.0.0.1:1/0"
#: Wall-time budget of the one-day sleep test, in seconds.
SLEEP_BUDGET = 1.0

#: The job's own test of the HTTP API, written into the new app.
API_TEST = """from django.contrib.auth import get_user_model
from django.test import TestCase


class ApiTests(TestCase):
    def test_schema_and_api_root(self):
        user = get_user_model().objects.create_superuser("admin", "admin@example.com", "pw")
        self.client.force_login(user)
        for url in ("/yieldstar/schema/", "/yieldstar/"):
            response = self.client.get(url)
            self.assertEqual(response.status_code, 200, (url, response.content[:2000]))
"""


def install_section(readme: str) -> list[tuple[str, str]]:
    """The ``(language, code)`` blocks of the README's installation section, in order."""
    match = re.search(r"^## Installation in a Django project\n(.*?)(?=^## )", readme, re.S | re.M)
    if match is None:
        sys.exit("README.md has no '## Installation in a Django project' section")
    return re.findall(r"^```(\w+)\n(.*?)^```", match.group(1), re.S | re.M)


def run(cmd: list[str] | str, cwd: Path, env: dict[str, str]) -> str:
    print("$", cmd if isinstance(cmd, str) else " ".join(cmd), flush=True)
    done = subprocess.run(
        cmd, cwd=cwd, env=env, shell=isinstance(cmd, str), text=True, capture_output=True
    )
    if done.returncode != 0:
        sys.stdout.write(done.stdout[-4000:])
        sys.stderr.write(done.stderr[-8000:])
        sys.exit(f"failed ({done.returncode}): {cmd}")
    return done.stdout + done.stderr


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="yieldstar-startproject-"))
    keep = os.environ.get("KEEP_STARTPROJECT") == "1"
    try:
        check(work)
    finally:
        if keep:
            print("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


def check(work: Path) -> None:
    wheel = build_and_check(work / "dist", ROOT)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "VIRTUAL_ENV"}}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        CELERY_BROKER_URL=NO_BROKER,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    site = work / "site"
    package = site / PROJECT
    python = str(venv / "bin" / "python")
    started = False
    for language, code in install_section((ROOT / "README.md").read_text()):
        code = code.replace(PLACEHOLDER_CHECKOUT, str(wheel)).replace(PLACEHOLDER_PROJECT, PROJECT)
        if language == "bash":
            for line in code.splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith("pip "):
                    line = f"{python} -m {line} -q"
                if not started and not line.startswith(python):
                    start_project(site, env)
                    started = True
                run(line, site if started else work, env)
            continue
        first = code.splitlines()[0]
        target = re.fullmatch(r"#\s*(?:\w+/)?([\w.]+\.py)", first.strip())
        if language != "python" or target is None:
            continue  # a block that shows, not one that says where it goes
        if not started:
            start_project(site, env)
            started = True
        path = package / target.group(1)
        print(f"+ append the README's block to {path.relative_to(site)}")
        with path.open("a") as out:
            out.write("\n\n" + code)

    if not started:
        sys.exit("the README's installation section never installs the package")
    installed = run(
        [python, "-c", "import yieldstar_django as y; print(y.__file__, y.__version__)"],
        site,
        env,
    ).split()
    if not Path(installed[0]).is_relative_to(venv) or not wheel.name.startswith(
        f"yieldstar_django-{installed[1]}-"
    ):
        sys.exit(f"yieldstar_django is not the wheel's: {installed} ({wheel.name})")
    print(f"ok: yieldstar_django {installed[1]} installed from {wheel.name}")
    # The example app of docs/howto/testing.md, as a user would write it.
    run([python, "manage.py", "startapp", "orders"], site, env)
    for name in ("workflows.py", "test_workflows.py"):
        shutil.copy(ROOT / "tests" / "testing" / "example" / name, site / "orders" / name)
    (site / "orders" / "test_api.py").write_text(API_TEST)
    with (package / "settings.py").open("a") as out:
        out.write('\n\nINSTALLED_APPS += ["orders"]\n')

    # The README's settings pass every check: a warning (W005, say) fails this script.
    run([python, "manage.py", "check", "--fail-level", "WARNING"], site, env)
    run([python, "manage.py", "migrate", "-v", "0"], site, env)
    print(run([python, "manage.py", "test", "orders.test_workflows", "-v", "2"], site, env)[-3000:])
    out = run(
        [python, "manage.py", "test", "orders.test_workflows.PickNextTests.test_a_one_day_sleep"],
        site,
        env,
    )
    ran = re.search(r"Ran 1 test in ([\d.]+)s", out)
    if ran is None or float(ran.group(1)) >= SLEEP_BUDGET:
        sys.exit(f"the one-day sleep test did not finish within {SLEEP_BUDGET}s:\n{out}")
    print(f"ok: a one-day step.sleep tested in {ran.group(1)}s of wall time")
    print(run([python, "manage.py", "test", "orders.test_api", "-v", "2"], site, env)[-3000:])
    print("startproject check passed")


def start_project(site: Path, env: dict[str, str]) -> None:
    site.mkdir()
    run(["django-admin", "startproject", PROJECT, "."], site, env)


if __name__ == "__main__":
    main()
