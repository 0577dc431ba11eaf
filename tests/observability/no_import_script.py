"""Run by ``test_off.py`` in a fresh interpreter: set Django up on a SQLite file, run a
workflow with steps, a store wait and a wake, and print which observability libraries the
process imported (JSON). ``argv[1]``: the database file; ``argv[2]``: ``off`` (the settings
turn both off), ``absent`` (both libraries made unimportable, settings left unset) or
``default`` (neither)."""

from __future__ import annotations

import importlib.abc
import json
import sys
from typing import Any

BLOCKED = ("opentelemetry", "prometheus_client")


class _Absent(importlib.abc.MetaPathFinder):
    """Makes the libraries unimportable, as when the extras are not installed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


def main(database: str, mode: str) -> None:
    if mode == "absent":
        sys.meta_path.insert(0, _Absent())
    import django
    from django.conf import settings

    yieldstar: dict[str, object] = {"WAKE_BACKEND": "yieldstar_django.testing.inline"}
    if mode == "off":
        yieldstar.update(TRACING=False, METRICS=False)
    settings.configure(
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "yieldstar_django",
        ],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": database}},
        USE_TZ=True,
        YIELDSTAR=yieldstar,
        CELERY_BROKER_URL="memory://",
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from yieldstar_django import define_store, get_store_client, start_workflow, workflow
    from yieldstar_django.models import Execution
    from yieldstar_django.testing import run_until_idle

    box = define_store("box", None, initial=lambda id: {"items": []})

    def first(state: Any) -> Any:
        return state["items"][0] if state["items"] else None

    def double(x: int) -> int:
        return 2 * x

    @workflow("take_double")
    def take_double(step: Any) -> Any:
        item = yield from step.take(box, "b", selector=first)
        return (yield from step.run(double, item))

    eid = start_workflow(take_double)
    run_until_idle()
    get_store_client().update_store(box, "b", updater=lambda d: d["items"].append(21))
    run_until_idle()
    execution = Execution.objects.get(pk=eid)
    print(
        json.dumps(
            {
                "status": execution.status,
                "result": execution.result_json,
                "trace_context": execution.trace_context,
                "imported": sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
